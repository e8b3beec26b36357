//! Online backup (issue 14): `Database::backup_to` writes one snapshot of
//! every column family as a compacted, checkpointed file that opens
//! without WAL replay; writers keep running; a crash during a backup never
//! leaves a partial file under the target's name. Seeds are printed;
//! `SHEAF_SEED=n` replays one crash case.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::builder;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sheafdb::storage::mem::MemVfs;
use sheafdb::storage::sim::{Fault, SimVfs};
use sheafdb::storage::Vfs;
use sheafdb::{Database, Durability, Error, MultimapTableDefinition, Result, TableDefinition};

/// (CF, table, key type, value type) → raw entries: a database's whole
/// contents, whatever the tables' types.
type Contents = BTreeMap<(String, String, String, String), Vec<(Vec<u8>, Vec<u8>)>>;

fn contents(db: &Database) -> Result<Contents> {
    let rx = db.begin_read()?;
    let mut all = Contents::new();
    for cf_name in db.list_cfs()? {
        let cf = db.cf(&cf_name)?;
        for info in rx.list_table_info_in(&cf)? {
            let t = rx.open_untyped_table_in(&cf, &info.name)?;
            let mut rows = Vec::new();
            for e in t.iter()? {
                let (k, v) = e?;
                rows.push((k.value().to_vec(), v.value().to_vec()));
            }
            assert_eq!(rows.len() as u64, info.entries, "count of {}", info.name);
            all.insert(
                (cf_name.clone(), info.name, info.key_type, info.value_type),
                rows,
            );
        }
    }
    Ok(all)
}

const USERS: TableDefinition<&str, u64> = TableDefinition::new("users");
const EVENTS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("events");
const TAGS: MultimapTableDefinition<u32, &str> = MultimapTableDefinition::new("tags");

/// A source with several CFs, typed tables, a multimap, an empty table,
/// large values, folded and still-buffered commits.
fn fill(db: &Database) -> Result<()> {
    let audit = db.cf_or_create("audit")?;
    let tx = db.begin_write()?;
    {
        let mut u = tx.open_table(USERS)?;
        for i in 0..3000u64 {
            u.insert(format!("user-{i:05}").as_str(), i)?;
        }
        let mut e = tx.open_table(EVENTS)?;
        for i in 0..500u64 {
            e.insert((i, 1), vec![i as u8; (i as usize % 7) * 1500].as_slice())?;
        }
        tx.open_table(TableDefinition::<u8, u8>::new("empty"))?;
    }
    tx.commit()?;
    db.checkpoint()?;
    let tx = audit.begin_write()?;
    {
        let mut t = tx.open_multimap_table(TAGS)?;
        for i in 0..400u32 {
            t.insert(i % 37, format!("tag\0{i}").as_str())?;
        }
    }
    tx.commit()?;
    // Buffered, not folded: the backup must read through the buffer.
    let tx = db.begin_write()?;
    tx.open_table(USERS)?.remove("user-00007")?;
    tx.open_table(USERS)?.insert("zed", 1)?;
    tx.commit()?;
    Ok(())
}

/// Opens the backup `copy.sheaf` of `dst` and checks it: closed cleanly
/// (no record to replay), equal to `want`, sound.
fn open_copy(dst: &MemVfs, want: &Contents) -> Result<Database> {
    let copy = builder().open_with_vfs(Arc::new(dst.clone()), "copy.sheaf")?;
    assert_eq!(copy.replayed_records(), 0);
    assert!(copy.file_info()?.clean);
    assert_eq!(&contents(&copy)?, want);
    copy.check_integrity()?;
    Ok(copy)
}

#[test]
fn a_backup_equals_its_source_and_opens_without_replay() -> Result<()> {
    let src_vfs = MemVfs::new();
    let db = builder().create_with_vfs(Arc::new(src_vfs), "src.sheaf")?;
    fill(&db)?;
    let want = contents(&db)?;
    let dst = MemVfs::new();
    let mut seen = Vec::new();
    let report = db.backup_to_vfs(Arc::new(dst.clone()), "copy.sheaf", |p| seen.push(p))?;
    assert_eq!(report.column_families, 2);
    assert_eq!(report.tables, 4);
    let total = 3000 + 500 + 400;
    assert_eq!(report.entries, total);
    let last = seen.last().expect("progress was reported");
    assert_eq!((last.entries_copied, last.entries_total), (total, total));
    assert!(
        seen.windows(2)
            .all(|w| w[0].entries_copied <= w[1].entries_copied),
        "progress goes forward"
    );
    assert!(seen.len() > 2, "several batches: {}", seen.len());
    // One file: no WAL beside it, no temporary left.
    assert_eq!(dst.list()?, ["copy.sheaf"]);
    let copy = open_copy(&dst, &want)?;
    // A second backup onto the same name is refused, nothing changed.
    let before = dst.list()?;
    assert!(matches!(
        db.backup_to_vfs(Arc::new(dst.clone()), "copy.sheaf", |_| {}),
        Err(Error::InvalidArgument(_))
    ));
    drop(copy);
    // (The copy's open made its WAL file, listed in `before` already.)
    assert_eq!(dst.list()?, before);
    Ok(())
}

/// A table larger than one copy batch (8 MiB of keys and values): the
/// backup takes it in several sorted runs straight from the snapshot's
/// pages, each appended to the copy's tree, and the copy equals the
/// source entry for entry, with still-buffered updates among them.
#[test]
fn a_table_of_several_backup_batches_is_copied_exactly() -> Result<()> {
    const BIG: TableDefinition<u64, &[u8]> = TableDefinition::new("big");
    let db = builder().create_with_vfs(Arc::new(MemVfs::new()), "src.sheaf")?;
    let value = |k: u64, gen: u8| vec![gen ^ (k % 253) as u8; 250 + (k % 5) as usize * 20];
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(BIG)?;
        for k in 0..70_000u64 {
            t.insert(k * 3, value(k, 1).as_slice())?;
        }
    }
    tx.commit()?;
    db.checkpoint()?;
    // Buffered, not folded: the copy merges them.
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(BIG)?;
        for k in (0..70_000u64).step_by(7) {
            t.insert(k * 3, value(k, 2).as_slice())?;
            t.insert(k * 3 + 1, value(k, 3).as_slice())?;
        }
    }
    tx.commit()?;
    let want = contents(&db)?;
    let dst = MemVfs::new();
    let mut batches = 0;
    let report = db.backup_to_vfs(Arc::new(dst.clone()), "copy.sheaf", |_| batches += 1)?;
    assert_eq!(report.entries, 80_000);
    assert!(
        batches >= 3,
        "one table of 21 MB copied in {batches} progress reports"
    );
    open_copy(&dst, &want)?;
    Ok(())
}

/// Review finding: every table of the copy began its own transaction,
/// each committed by a direct checkpoint, so a database of many small
/// tables backed up about twice as slowly as before the batches went
/// straight into the trees. One transaction now takes tables until it
/// holds a batch's bytes: 300 small tables make one commit (progress is
/// reported once per commit), and the copy is exact.
#[test]
fn many_small_tables_share_backup_transactions() -> Result<()> {
    let db = builder().create_with_vfs(Arc::new(MemVfs::new()), "src.sheaf")?;
    let tx = db.begin_write()?;
    for i in 0..300u32 {
        let name = format!("small-{i:03}");
        let def: TableDefinition<u32, &str> = TableDefinition::new(&name);
        let mut t = tx.open_table(def)?;
        for k in 0..(i % 4) {
            t.insert(k, "v")?;
        }
    }
    tx.commit()?;
    let want = contents(&db)?;
    let dst = MemVfs::new();
    let mut reports = 0;
    let report = db.backup_to_vfs(Arc::new(dst.clone()), "copy.sheaf", |_| reports += 1)?;
    assert_eq!(report.tables, 300);
    assert!(
        reports <= 3,
        "{reports} progress reports (one per commit) for 300 small tables"
    );
    open_copy(&dst, &want)?;
    Ok(())
}

/// The backup is compacted: after half the data is removed, it is about
/// half the size of the source and no larger than a fresh load.
#[test]
fn a_backup_is_compacted() -> Result<()> {
    let db = builder().create_with_vfs(Arc::new(MemVfs::new()), "s.sheaf")?;
    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
    let v = [3u8; 200];
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for i in 0..20_000u64 {
            t.insert(i.wrapping_mul(0x9E37_79B9_7F4A_7C15), v.as_slice())?;
        }
    }
    tx.commit()?;
    db.checkpoint()?;
    let loaded = db.file_len_bytes();
    let tx = db.begin_write()?;
    tx.open_table(T)?.retain(|k, _| k % 2 == 0)?;
    tx.commit()?;
    db.checkpoint()?;
    let dst = MemVfs::new();
    let r = db.backup_to_vfs(Arc::new(dst.clone()), "b.sheaf", |_| {})?;
    let stored = (db.begin_read()?.open_table(T)?.len()?) * (8 + 200);
    assert!(
        r.file_bytes < loaded * 6 / 10,
        "backup {} vs loaded {loaded}",
        r.file_bytes
    );
    assert!(
        r.file_bytes < stored * 13 / 10 + (1 << 20),
        "backup {} for {stored} bytes of data",
        r.file_bytes
    );
    Ok(())
}

/// Writers commit multi-CF transactions numbered by a sequence while a
/// backup runs: the backup equals the state after exactly one of them,
/// in both CFs.
#[test]
fn a_backup_taken_while_writers_run_is_one_snapshot() -> Result<()> {
    const SEQ: TableDefinition<&str, u64> = TableDefinition::new("seq");
    const DATA: TableDefinition<u64, u64> = TableDefinition::new("data");
    let db = Arc::new(
        builder()
            .checkpoint_interval(std::time::Duration::from_millis(20))
            .create_with_vfs(Arc::new(MemVfs::new()), "w.sheaf")?,
    );
    let a = db.cf_or_create("a")?;
    let b = db.cf_or_create("b")?;
    // history[n]: contents of (a, b) after commit n.
    type State = (BTreeMap<u64, u64>, BTreeMap<u64, u64>);
    let history: Mutex<Vec<State>> = Mutex::new(vec![Default::default()]);
    let stop = AtomicBool::new(false);
    let mut reports = Vec::new();
    let dst = MemVfs::new();
    std::thread::scope(|s| -> Result<()> {
        let writer = s.spawn(|| -> Result<()> {
            let mut rng = StdRng::seed_from_u64(1);
            let mut state: State = Default::default();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) || n < 50 {
                n += 1;
                let mut tx = db.begin_write_cfs(&[&a, &b])?;
                tx.set_durability(Durability::None);
                for _ in 0..rng.gen_range(1..40) {
                    let (k, v) = (rng.gen_range(0..2000u64), rng.gen());
                    if rng.gen_bool(0.5) {
                        tx.open_table(&a, DATA)?.insert(k, v)?;
                        state.0.insert(k, v);
                    } else {
                        tx.open_table(&b, DATA)?.remove(k)?;
                        state.1.remove(&k);
                    }
                }
                tx.open_table(&a, SEQ)?.insert("n", n)?;
                tx.open_table(&b, SEQ)?.insert("n", n)?;
                tx.commit()?;
                history.lock().unwrap().push(state.clone());
            }
            Ok(())
        });
        for i in 0..4 {
            std::thread::sleep(std::time::Duration::from_millis(15));
            reports.push(db.backup_to_vfs(Arc::new(dst.clone()), &format!("b{i}"), |_| {})?);
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap()
    })?;
    let history = history.into_inner().unwrap();
    let read = |copy: &Database, cf: &str, t| -> Result<BTreeMap<u64, u64>> {
        let rx = copy.begin_read()?;
        let cf = copy.cf(cf)?;
        match rx.open_table_in(&cf, t) {
            Ok(t) => t
                .iter()?
                .map(|e| e.map(|(k, v)| (k.value(), v.value())))
                .collect(),
            Err(Error::TableNotFound(_)) => Ok(BTreeMap::new()),
            Err(e) => Err(e),
        }
    };
    for i in 0..4 {
        let copy = builder().open_with_vfs(Arc::new(dst.clone()), &format!("b{i}"))?;
        assert_eq!(copy.replayed_records(), 0);
        copy.check_integrity()?;
        let seq = |cf: &str| -> Result<u64> {
            let rx = copy.begin_read()?;
            let cf = copy.cf(cf)?;
            Ok(match rx.open_table_in(&cf, SEQ) {
                Ok(t) => t.get("n")?.map_or(0, |g| g.value()),
                Err(Error::TableNotFound(_)) => 0,
                Err(e) => return Err(e),
            })
        };
        let n = seq("a")?;
        assert_eq!(n, seq("b")?, "backup {i}: the CFs are at different commits");
        let want = &history[n as usize];
        assert_eq!(read(&copy, "a", DATA)?, want.0, "backup {i} at commit {n}");
        assert_eq!(read(&copy, "b", DATA)?, want.1, "backup {i} at commit {n}");
    }
    Ok(())
}

/// Backups onto a simulated disk that fails at a random operation and
/// then loses power: the target is absent or complete, never partial, and
/// the next backup succeeds over whatever the crash left.
#[test]
fn a_crash_during_a_backup_never_leaves_a_partial_target() -> Result<()> {
    let db = builder().create_with_vfs(Arc::new(MemVfs::new()), "src.sheaf")?;
    fill(&db)?;
    let want = contents(&db)?;
    let seeds = match std::env::var("SHEAF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(s) => s..s + 1,
        None => 0..60u64,
    };
    let mut completed = 0;
    for seed in seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let dst = SimVfs::new();
        dst.fail_from(rng.gen_range(1..400), Fault::Eio);
        let r = db.backup_to_vfs(Arc::new(dst.clone()), "t.sheaf", |_| {});
        let crashed = dst.crash(seed);
        if crashed.exists("t.sheaf")? {
            let copy = builder()
                .open_with_vfs(Arc::new(crashed.clone()), "t.sheaf")
                .unwrap_or_else(|e| panic!("seed {seed}: the target does not open: {e}"));
            assert_eq!(contents(&copy)?, want, "seed {seed}: a partial target");
            copy.check_integrity()?;
            completed += 1;
        } else {
            // Absent: a retry over the leftovers completes.
            db.backup_to_vfs(Arc::new(crashed.clone()), "t.sheaf", |_| {})
                .unwrap_or_else(|e| panic!("seed {seed}: retry: {e}"));
            let copy = builder().open_with_vfs(Arc::new(crashed), "t.sheaf")?;
            assert_eq!(contents(&copy)?, want, "seed {seed}: retry");
        }
        if r.is_ok() {
            // An acknowledged backup survives the power cut (it synced).
            assert!(dst.crash(seed + 1).exists("t.sheaf")?, "seed {seed}");
        }
    }
    // Some cuts must land after the rename was made durable.
    assert!(completed > 0, "no case completed a backup before the cut");
    Ok(())
}

#[test]
fn backup_to_a_real_path() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let db = Database::create(dir.path().join("live.sheaf"))?;
    fill(&db)?;
    let target = dir.path().join("backup.sheaf");
    db.backup_to(&target)?;
    assert!(matches!(
        db.backup_to(&target),
        Err(Error::InvalidArgument(_))
    ));
    let names: Vec<String> = std::fs::read_dir(dir.path())?
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("backup"))
        .collect();
    assert_eq!(names, ["backup.sheaf"]);
    let copy = Database::open(&target)?;
    let want = contents(&db)?;
    assert_eq!(contents(&copy)?, want);
    drop(copy);
    // From a read-only open (only reads: nothing is written to the source).
    db.close()?;
    let ro = Database::open_read_only(dir.path().join("live.sheaf"))?;
    ro.backup_to(dir.path().join("again.sheaf"))?;
    assert_eq!(
        contents(&Database::open(dir.path().join("again.sheaf"))?)?,
        want
    );
    Ok(())
}
