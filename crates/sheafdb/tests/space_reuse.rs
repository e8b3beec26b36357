//! Space reuse (design.md §5): rewriting the same keys keeps the file size
//! stable; a snapshot pins the pages it reads until it is dropped; a tree
//! that shrinks gives its pages back.

mod common;

use std::sync::Arc;

use sheafdb::storage::mem::MemVfs;
use sheafdb::{Database, Result, TableDefinition};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");

fn overwrite_round(db: &Database, round: u64, keys: u64) -> Result<()> {
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 0..keys {
            let len = 16 + ((k + round) % 17) as usize;
            t.insert(k, vec![round as u8; len].as_slice())?;
        }
    }
    tx.commit()
}

/// A database on `vfs` whose WAL files start at 8 KiB and grow to 64
/// KiB, checkpointed only explicitly or past `wal_trigger` bytes of log,
/// after 12 overwrite rounds of 60 keys: a log of several files.
fn busy_small_wal(vfs: &sheafdb::storage::sim::SimVfs, name: &str, wal_trigger: u64) -> Database {
    let db = common::builder()
        .background_checkpoints(false)
        .wal_segment_bytes(64 << 10)
        .wal_first_segment_bytes(8 << 10)
        .checkpoint_triggers(wal_trigger, 1 << 30, 1 << 30)
        .create_with_vfs(Arc::new(vfs.clone()), name)
        .unwrap();
    for round in 0..12u64 {
        overwrite_round(&db, round, 60).unwrap();
    }
    db
}

#[test]
fn overwriting_10k_keys_100_times_keeps_the_file_size() -> Result<()> {
    let db = common::builder().create_with_vfs(Arc::new(MemVfs::new()), "s.sheaf")?;
    let mut sizes = Vec::new();
    for round in 0..100 {
        overwrite_round(&db, round, 10_000)?;
        sizes.push(db.file_len_bytes());
    }
    let settled = sizes[4];
    assert!(
        sizes[5..].iter().all(|&s| s <= settled),
        "file grew after round 5: {} -> {}",
        settled,
        sizes.last().unwrap()
    );
    let report = db.check_integrity()?;
    assert_eq!(report.entries, 10_000);
    Ok(())
}

#[test]
fn a_snapshot_pins_pages_until_dropped() -> Result<()> {
    let db = common::builder().create_with_vfs(Arc::new(MemVfs::new()), "p.sheaf")?;
    overwrite_round(&db, 0, 5_000)?;
    let reader = db.begin_read()?;
    for round in 1..10 {
        overwrite_round(&db, round, 5_000)?;
    }
    // The old snapshot still reads its own data.
    let t = reader.open_table(T)?;
    assert_eq!(
        t.get(4_999)?.unwrap().value(),
        vec![0u8; 16 + (4_999 % 17)].as_slice()
    );
    let grown = db.file_len_bytes();
    drop(t);
    drop(reader);
    for round in 10..40 {
        overwrite_round(&db, round, 5_000)?;
    }
    assert!(
        db.file_len_bytes() <= grown,
        "pages held by the dropped snapshot were not reused"
    );
    db.check_integrity()?;
    Ok(())
}

#[test]
fn a_tree_that_shrinks_gives_pages_back() -> Result<()> {
    let db = common::builder().create_with_vfs(Arc::new(MemVfs::new()), "shrink.sheaf")?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 0..50_000u64 {
            t.insert(k, [7u8; 40].as_slice())?;
        }
    }
    tx.commit()?;
    let full = db.check_integrity()?.pages_in_use;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 10..50_000u64 {
            t.remove(k)?;
        }
    }
    tx.commit()?;
    let report = db.check_integrity()?;
    assert!(full > 500, "expected a large tree, got {full} pages");
    assert!(
        report.pages_in_use < 40,
        "{} pages still in use for 10 entries",
        report.pages_in_use
    );
    assert_eq!(report.entries, 10);
    Ok(())
}

/// Issue 9 point 10: a read transaction held open while others commit
/// used to keep every superseded page in memory (~16 KiB per commit, not
/// counted by any budget). Checkpoints now write those pages where they
/// are, so memory stays under the cache budget plus the dirty triggers
/// however many commits the old snapshot outlives, and the snapshot still
/// reads its data (from the file).
#[test]
fn an_old_snapshot_does_not_cost_memory_per_commit() {
    use sheafdb::storage::mem::MemVfs;
    const T: sheafdb::TableDefinition<u64, u64> = sheafdb::TableDefinition::new("t");
    let db = sheafdb::Database::builder()
        .cache_size_bytes(2 << 20)
        .background_checkpoints(false)
        .checkpoint_triggers(4 << 20, 1 << 20, 2 << 20)
        .create_with_vfs(std::sync::Arc::new(MemVfs::new()), "m")
        .unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        for k in 0..20_000u64 {
            t.insert(k, k).unwrap();
        }
    }
    tx.commit().unwrap();
    let old = db.begin_read().unwrap();
    let peak_at = |commits: u64, from: u64| {
        let mut peak = 0u64;
        for i in from..commits {
            let tx = db.begin_write().unwrap();
            tx.open_table(T)
                .unwrap()
                .insert((i * 7919) % 20_000, i + 1_000_000)
                .unwrap();
            tx.commit().unwrap();
            let m = db.memory_stats();
            peak = peak.max(m.clean_bytes + m.dirty_bytes);
        }
        peak
    };
    let early = peak_at(2_000, 0);
    let late = peak_at(12_000, 2_000);
    // Budget 2 MiB clean + 2 MiB hard dirty limit (+ slack for the runs a
    // checkpoint is writing). Before the fix, 12,000 commits kept ~190 MiB.
    let bound = 8u64 << 20;
    assert!(early <= bound, "{early} bytes after 2,000 commits");
    assert!(late <= bound, "{late} bytes after 12,000 commits");
    // The old snapshot still reads what it saw.
    let t = old.open_table(T).unwrap();
    for k in (0..20_000u64).step_by(97) {
        assert_eq!(t.get(k).unwrap().unwrap().value(), k, "key {k}");
    }
    assert_eq!(t.len().unwrap(), 20_000);
    drop(t);
    drop(old);
    db.check_integrity().unwrap();
}

/// Bytes the files of `dir` occupy on disk (allocated blocks).
fn disk_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks() * 512)
        .sum()
}

/// Issue 14: a database with one row takes well under 1 MiB of disk (the
/// WAL used to preallocate 32 MiB up front).
#[test]
fn a_database_with_one_row_is_under_one_mib() -> Result<()> {
    const ONE: TableDefinition<&str, u64> = TableDefinition::new("one");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.sheaf");
    let db = Database::create(&path)?;
    let tx = db.begin_write()?;
    tx.open_table(ONE)?.insert("row", 1)?;
    tx.commit()?;
    let open = disk_bytes(dir.path());
    db.close()?;
    let closed = disk_bytes(dir.path());
    assert!(open < 1 << 20, "{open} bytes with one row");
    assert!(closed < 1 << 20, "{closed} bytes with one row, closed");
    let db = Database::open(&path)?;
    assert_eq!(
        db.begin_read()?
            .open_table(ONE)?
            .get("row")?
            .unwrap()
            .value(),
        1
    );
    Ok(())
}

/// WAL segment files: (name, bytes).
fn wal_files(vfs: &MemVfs) -> Vec<(String, u64)> {
    use sheafdb::storage::{OpenMode, Vfs};
    let mut files: Vec<(String, u64)> = (vfs.list().unwrap().into_iter())
        .filter(|n| n.contains("-wal."))
        .map(|n| {
            let len = vfs.open(&n, OpenMode::Existing).unwrap().len().unwrap();
            (n, len)
        })
        .collect();
    files.sort();
    files
}

/// Issue 14: the WAL starts with one small file, adds files that double up
/// to the working size while the log is busy, keeps about what it writes
/// between two checkpoints after a checkpoint, and gives the rest back
/// when idle and at close; nothing acknowledged is lost on the way.
#[test]
fn the_wal_starts_small_grows_and_gives_space_back() -> Result<()> {
    let vfs = MemVfs::new();
    let open = |vfs: &MemVfs| {
        common::builder()
            .background_checkpoints(false)
            .wal_segment_bytes(4 << 20)
            .wal_first_segment_bytes(256 << 10)
            .wal_record_max_bytes(1 << 20)
            .checkpoint_triggers(1 << 20, 1 << 30, 1 << 30)
            .create_with_vfs(Arc::new(vfs.clone()), "w.sheaf")
    };
    let db = open(&vfs)?;
    overwrite_round(&db, 0, 10)?;
    let first = wal_files(&vfs);
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].1 <= 256 << 10, "{first:?}");
    // Busy: 100 commits of ~100 KB values, no checkpoint.
    for round in 0..100u64 {
        let tx = db.begin_write()?;
        tx.open_table(T)?
            .insert(round, vec![round as u8; 100_000].as_slice())?;
        tx.commit()?;
    }
    let busy = wal_files(&vfs);
    let sizes: Vec<u64> = busy.iter().map(|f| f.1).collect();
    assert!(sizes.iter().all(|&s| s <= 4 << 20), "{busy:?}");
    assert!(
        sizes.contains(&(4 << 20)),
        "the log never reached its working size: {busy:?}"
    );
    let total: u64 = sizes.iter().sum();
    assert!(total >= 10 << 20, "{busy:?}");
    // A checkpoint releases the log and keeps about one trigger's worth of
    // free files (1 MiB) besides the open one.
    db.checkpoint()?;
    let kept: u64 = wal_files(&vfs).iter().map(|f| f.1).sum();
    assert!(kept <= (1 << 20) + (4 << 20), "{:?}", wal_files(&vfs));
    // Idle since: the next checkpoint gives back every file, the open one
    // too (wholly released, and larger than the first size), after
    // beginning the log anew in a file of the first size (rule O13: the
    // base requires its WAL, so one file always exists).
    db.checkpoint()?;
    db.checkpoint()?;
    let idle = wal_files(&vfs);
    assert_eq!(idle.len(), 1, "{idle:?}");
    assert!(idle[0].1 <= 256 << 10, "{idle:?}");
    // The next commit goes on in it.
    overwrite_round(&db, 1, 10)?;
    let restarted = wal_files(&vfs);
    assert_eq!(restarted.len(), 1, "{restarted:?}");
    assert!(restarted[0].1 <= 256 << 10, "{restarted:?}");
    // A close keeps at most that small file, and everything reads back.
    db.close()?;
    let closed: u64 = wal_files(&vfs).iter().map(|f| f.1).sum();
    assert!(closed <= 256 << 10, "{:?}", wal_files(&vfs));
    let db = open(&vfs)?;
    assert_eq!(db.replayed_records(), 0);
    let rx = db.begin_read()?;
    let t = rx.open_table(T)?;
    assert_eq!(t.get(99)?.unwrap().value().len(), 100_000);
    assert_eq!(t.get(5)?.unwrap().value()[0], 1);
    db.check_integrity()?;
    Ok(())
}

/// Issue 14: a crash at any storage operation of a checkpoint that gives
/// WAL files back (several of them, after a busy log) loses no commit and
/// leaves a database that opens and checks clean.
#[test]
fn a_crash_while_the_wal_gives_files_back_loses_nothing() {
    use sheafdb::storage::sim::{Fault, SimVfs};
    let build = |vfs: &SimVfs| busy_small_wal(vfs, "g.sheaf", 16 << 10);
    let check_round = |db: &Database, round: u8, what: &str| {
        let rx = db.begin_read().unwrap();
        let t = rx.open_table(T).unwrap();
        assert_eq!(t.len().unwrap(), 60, "{what}");
        for k in 0..60u64 {
            assert_eq!(
                t.get(k).unwrap().unwrap().value()[0],
                round,
                "{what}: key {k}"
            );
        }
        db.check_integrity()
            .unwrap_or_else(|e| panic!("{what}: integrity: {e}"));
    };
    let check = |db: &Database, what: &str| check_round(db, 11, what);
    let probe = SimVfs::new();
    let db = build(&probe);
    let files = probe
        .file_names()
        .iter()
        .filter(|n| n.contains("-wal."))
        .count();
    assert!(files >= 3, "only {files} WAL files before the checkpoint");
    let before = probe.op_count();
    db.checkpoint().unwrap();
    db.checkpoint().unwrap(); // idle: gives every free file back
    let steps = probe.op_count() - before;
    let after = probe
        .file_names()
        .iter()
        .filter(|n| n.contains("-wal."))
        .count();
    assert!(after < files, "{files} WAL files before, {after} after");
    check(&db, "no crash");
    drop(db);
    eprintln!("{files} -> {after} WAL files; two checkpoints: {steps} storage operations");
    assert!(steps >= 8, "{steps} operations");
    for step in 1..=steps {
        for seed in 0..3u64 {
            let vfs = SimVfs::new();
            let db = build(&vfs);
            vfs.fail_from(step, Fault::Eio);
            let _ = db.checkpoint().and_then(|()| db.checkpoint());
            let crashed = vfs.crash(step * 10 + seed);
            drop(db);
            let db = common::builder()
                .open_with_vfs(Arc::new(crashed.clone()), "g.sheaf")
                .unwrap_or_else(|e| panic!("step {step} seed {seed}: reopen: {e}"));
            check(&db, &format!("step {step} seed {seed}"));
            // The log goes on after a crash anywhere in the give-back
            // (the idle one retires the open file): a commit, a power
            // cut once it is durable, and it is there.
            overwrite_round(&db, 12, 60).unwrap();
            let crashed = crashed.crash(step * 10 + seed + 1);
            drop(db);
            let db = common::builder()
                .open_with_vfs(Arc::new(crashed), "g.sheaf")
                .unwrap_or_else(|e| panic!("step {step} seed {seed}: second reopen: {e}"));
            check_round(&db, 12, &format!("step {step} seed {seed}, after"));
        }
    }
}

/// Review of the WAL's retire: the open file is given back in-process
/// (asserted), commits continue the chain in a new use whose
/// predecessor's file is gone, and a power cut before any checkpoint
/// replays them.
#[test]
fn commits_after_a_retired_wal_file_survive_a_power_cut() {
    use sheafdb::storage::sim::SimVfs;
    for seed in 0..40u64 {
        let vfs = SimVfs::new();
        let db = busy_small_wal(&vfs, "r.sheaf", 1 << 30);
        db.checkpoint().unwrap();
        db.checkpoint().unwrap(); // idle: retires the open file
                                  // The large open file is gone; a new one of the first size
                                  // (begun with no record, rule O13) is all that is left.
        let left: Vec<String> = (vfs.file_names().into_iter())
            .filter(|n| n.contains("-wal."))
            .collect();
        assert_eq!(left.len(), 1, "seed {seed}: {left:?}");
        let small = vfs.file_bytes(&left[0]).unwrap().len();
        assert!(
            small <= 256 << 10,
            "seed {seed}: the open file was not retired"
        );
        for round in 12..15u64 {
            overwrite_round(&db, round, 60).unwrap();
        }
        let crashed = vfs.crash(seed);
        drop(db);
        let db = common::builder()
            .background_checkpoints(false)
            .open_with_vfs(Arc::new(crashed), "r.sheaf")
            .unwrap_or_else(|e| panic!("seed {seed}: reopen: {e}"));
        assert!(
            db.replayed_records() >= 3,
            "seed {seed}: replayed {}",
            db.replayed_records()
        );
        let rx = db.begin_read().unwrap();
        let t = rx.open_table(T).unwrap();
        for k in 0..60u64 {
            assert_eq!(
                t.get(k).unwrap().unwrap().value()[0],
                14,
                "seed {seed}: key {k}"
            );
        }
        db.check_integrity().unwrap();
    }
}
