//! Adapter tests: every compiled-in engine returns exactly what was written.

use std::collections::BTreeMap;

use super::*;

fn key(i: u32) -> Vec<u8> {
    // Spread keys so that insertion order differs from key order.
    let mixed = i.wrapping_mul(2_654_435_761);
    let mut k = mixed.to_be_bytes().to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

fn value(i: u32) -> Vec<u8> {
    let len = 10 + (i as usize % 200);
    (0..len).map(|j| (i as usize + j) as u8).collect()
}

fn model(n: u32) -> BTreeMap<Vec<u8>, Vec<u8>> {
    (0..n).map(|i| (key(i), value(i))).collect()
}

fn as_refs(map: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<KvRef<'_>> {
    map.iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice()))
        .collect()
}

fn check_all(engine: &dyn Engine, table: TableId, expect: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let name = engine.kind();
    assert_eq!(
        engine.len(table).unwrap(),
        expect.len() as u64,
        "{name} len"
    );
    let mut reader = engine.reader().unwrap();
    let mut out = Vec::new();
    for (k, v) in expect {
        assert!(reader.get(table, k, &mut out).unwrap(), "{name} get hit");
        assert_eq!(&out, v, "{name} get value");
    }
    assert!(
        !reader.get(table, b"absent-key", &mut out).unwrap(),
        "{name} get miss"
    );
    check_range(reader.as_mut(), name, table, expect);
}

fn check_range(
    reader: &mut dyn Reader,
    name: EngineKind,
    table: TableId,
    expect: &BTreeMap<Vec<u8>, Vec<u8>>,
) {
    let mut snap = reader.snapshot().unwrap();
    let probe: Vec<Vec<u8>> = expect.keys().step_by(7).cloned().collect();
    for start in probe {
        let want: Vec<(Vec<u8>, Vec<u8>)> = expect
            .range(start.clone()..)
            .take(10)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut got = Vec::new();
        let n = snap
            .range(table, &start, 10, &mut |k, v| {
                got.push((k.to_vec(), v.to_vec()))
            })
            .unwrap();
        assert_eq!(n, got.len(), "{name} range count");
        assert_eq!(got, want, "{name} range from {start:?}");
    }
    let mut out = Vec::new();
    let (k, v) = expect.iter().next().unwrap();
    assert!(snap.get(table, k, &mut out).unwrap(), "{name} snapshot get");
    assert_eq!(&out, v, "{name} snapshot value");
}

fn roundtrip(kind: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = open(kind, dir.path(), OpenOptions { tables: 2 }).unwrap();
    let mut expect = model(300);
    engine.bulk_load(MAIN_TABLE, &as_refs(&expect)).unwrap();
    check_all(engine.as_ref(), MAIN_TABLE, &expect);

    // Small durable and no-sync transactions, including an overwrite.
    let extra: BTreeMap<_, _> = (300..340).map(|i| (key(i), value(i + 1))).collect();
    engine
        .insert_txn(MAIN_TABLE, &as_refs(&extra), SyncMode::Durable)
        .unwrap();
    let overwrite = (key(5), b"new-value".to_vec());
    engine
        .insert_txn(
            MAIN_TABLE,
            &[(&overwrite.0, &overwrite.1)],
            SyncMode::NoSync,
        )
        .unwrap();
    expect.extend(extra);
    expect.insert(overwrite.0, overwrite.1);
    check_all(engine.as_ref(), MAIN_TABLE, &expect);

    // Remove every third key.
    let gone: Vec<Vec<u8>> = expect.keys().step_by(3).cloned().collect();
    let gone_refs: Vec<&[u8]> = gone.iter().map(Vec::as_slice).collect();
    engine
        .remove_txn(MAIN_TABLE, &gone_refs, SyncMode::Durable)
        .unwrap();
    for k in &gone {
        expect.remove(k);
    }
    check_all(engine.as_ref(), MAIN_TABLE, &expect);

    // The second table is independent of the first.
    assert_eq!(engine.len(TableId(1)).unwrap(), 0, "{kind} table 1 empty");
    let other = model(20);
    engine
        .insert_txn(TableId(1), &as_refs(&other), SyncMode::Durable)
        .unwrap();
    check_all(engine.as_ref(), TableId(1), &other);
    check_all(engine.as_ref(), MAIN_TABLE, &expect);

    // Popping the smallest key, as a queue's consumer does, until empty.
    let mut popped = Vec::new();
    let mut left = other.clone();
    while let Some((k, _)) = left.pop_first() {
        let found = engine
            .pop_first_txn(TableId(1), SyncMode::NoSync, &mut popped)
            .unwrap();
        assert!(found && popped == k, "{kind} pop_first");
        if left.is_empty() {
            assert_eq!(engine.len(TableId(1)).unwrap(), 0, "{kind} drained");
        } else {
            check_all(engine.as_ref(), TableId(1), &left);
        }
    }
    let found = engine
        .pop_first_txn(TableId(1), SyncMode::Durable, &mut popped)
        .unwrap();
    assert!(!found, "{kind} pop_first of an empty table");

    // An online backup writes files where the engine has one; the
    // database stays usable.
    let backup_dir = tempfile::tempdir().unwrap();
    let outcome = engine.backup(backup_dir.path()).unwrap();
    let has_backup = matches!(
        kind,
        EngineKind::Sheafdb | EngineKind::Sqlite | EngineKind::Lmdb
    );
    assert_eq!(outcome == Backup::Done, has_backup, "{kind} backup");
    let copied = dir_size_bytes(backup_dir.path()).unwrap();
    assert_eq!(copied > 0, has_backup, "{kind} backup size {copied}");
    check_all(engine.as_ref(), MAIN_TABLE, &expect);

    // Compaction keeps the data and the footprint is measurable.
    assert!(engine.disk_bytes().unwrap() > 0, "{kind} disk bytes");
    engine.compact().unwrap();
    check_all(engine.as_ref(), MAIN_TABLE, &expect);
    assert!(
        engine.disk_bytes().unwrap() > 0,
        "{kind} disk bytes after compaction"
    );

    if matches!(engine.writer_layout(), WriterLayout::PerWriter(_)) {
        engine.create_table("scratch").unwrap();
        engine.drop_table("scratch").unwrap();
    }
}

fn reopen_keeps_data(kind: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let expect = model(50);
    {
        let engine = open(kind, dir.path(), OpenOptions::default()).unwrap();
        engine
            .insert_txn(MAIN_TABLE, &as_refs(&expect), SyncMode::Durable)
            .unwrap();
    }
    let engine = open(kind, dir.path(), OpenOptions::default()).unwrap();
    check_all(engine.as_ref(), MAIN_TABLE, &expect);
}

#[test]
fn redb_roundtrip() {
    roundtrip(EngineKind::Redb);
    reopen_keeps_data(EngineKind::Redb);
}

#[test]
fn lmdb_roundtrip() {
    roundtrip(EngineKind::Lmdb);
    reopen_keeps_data(EngineKind::Lmdb);
}

#[test]
fn sqlite_roundtrip() {
    roundtrip(EngineKind::Sqlite);
    reopen_keeps_data(EngineKind::Sqlite);
}

#[test]
fn fjall_roundtrip() {
    roundtrip(EngineKind::Fjall);
    reopen_keeps_data(EngineKind::Fjall);
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_roundtrip() {
    roundtrip(EngineKind::Rocksdb);
    reopen_keeps_data(EngineKind::Rocksdb);
}

#[cfg(feature = "sheafdb")]
#[test]
fn sheafdb_roundtrip() {
    roundtrip(EngineKind::Sheafdb);
    reopen_keeps_data(EngineKind::Sheafdb);
}

#[test]
fn engine_names_parse() {
    for kind in EngineKind::ALL {
        assert_eq!(EngineKind::parse(kind.name()), Some(kind));
    }
    assert_eq!(EngineKind::parse("heed"), Some(EngineKind::Lmdb));
    assert_eq!(EngineKind::parse("nope"), None);
}

#[test]
fn dir_size_counts_nested_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a"), [0u8; 100]).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/b"), [0u8; 23]).unwrap();
    std::fs::File::create(dir.path().join("sparse"))
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let size = dir_size_bytes(dir.path()).unwrap();
    assert!((123..(1 << 20)).contains(&size), "allocated bytes {size}");
}
