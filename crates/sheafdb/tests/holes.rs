//! Holes (design.md "Holes"): once enough of the data file is free, a
//! checkpoint gives the file system back the blocks of its free pages
//! (`fallocate(PUNCH_HOLE)`), so removed data stops taking disk space
//! without a compaction. A punched page reads as zeros, so a page punched
//! while something could still read it shows up as `Corrupted`: these
//! tests read everything back (old snapshots too, with a cache too small
//! to hide the file), crash at every storage operation of a punching
//! checkpoint, and fail the punches.

mod common;

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::builder;
use sheafdb::storage::hook::{FileOp, Hook, HookVfs};
use sheafdb::storage::mem::MemVfs;
use sheafdb::storage::sim::{Fault, SimVfs};
use sheafdb::{Database, ReadTransaction, Result, TableDefinition};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
const PAGE: usize = 4096;

fn value(k: u64) -> Vec<u8> {
    vec![(k % 251) as u8; 200 + (k % 200) as usize]
}

fn load(db: &Database, keys: impl Iterator<Item = u64>) -> Result<()> {
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in keys {
            t.insert(k, value(k).as_slice())?;
        }
    }
    tx.commit()
}

fn delete(db: &Database, keys: impl Iterator<Item = u64>) -> Result<()> {
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in keys {
            t.delete(k)?;
        }
    }
    tx.commit()
}

fn contents_of(rx: &ReadTransaction) -> Result<BTreeMap<u64, Vec<u8>>> {
    let t = match rx.open_table(T) {
        Ok(t) => t,
        Err(sheafdb::Error::TableNotFound(_)) => return Ok(BTreeMap::new()),
        Err(e) => return Err(e),
    };
    let mut m = BTreeMap::new();
    for e in t.iter()? {
        let (k, v) = e?;
        m.insert(k.value(), v.value().to_vec());
    }
    Ok(m)
}

fn contents(db: &Database) -> Result<BTreeMap<u64, Vec<u8>>> {
    contents_of(&db.begin_read()?)
}

fn model(keys: impl Iterator<Item = u64>) -> BTreeMap<u64, Vec<u8>> {
    keys.map(|k| (k, value(k))).collect()
}

/// Pages of the simulated data file that are all zeros (punched, or
/// never written).
fn zero_pages(vfs: &SimVfs, name: &str) -> usize {
    let bytes = vfs.file_bytes(name).expect("the data file exists");
    (bytes.chunks(PAGE))
        .filter(|p| p.iter().all(|&b| b == 0))
        .count()
}

/// Removing most of a real file's data gives its blocks back at the next
/// checkpoints, with the file's length unchanged; with `punch_holes(false)`
/// the blocks stay. Either way the data reads back, checks clean, reopens,
/// and new writes into the punched pages read back after a reopen.
#[test]
fn removed_data_gives_its_blocks_back_without_a_compaction() -> Result<()> {
    for punch in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.sheaf");
        let blocks = || std::fs::metadata(&path).unwrap().blocks() * 512;
        let db = Database::builder().punch_holes(punch).create(&path)?;
        load(&db, 0..60_000)?;
        db.checkpoint()?;
        let loaded = blocks();
        delete(&db, (0..60_000).filter(|k| k % 10 != 0))?;
        db.checkpoint()?;
        db.checkpoint()?;
        let after = blocks();
        let len = std::fs::metadata(&path).unwrap().len();
        eprintln!("punch {punch}: {loaded} bytes allocated, then {after} (length {len})");
        if punch {
            assert!(
                after * 10 < loaded * 4,
                "{after} bytes allocated after removing 90 % of {loaded}"
            );
        } else {
            assert!(after >= loaded, "blocks given back without punching");
        }
        let want = model((0..60_000).filter(|k| k % 10 == 0));
        assert_eq!(contents(&db)?, want);
        db.check_integrity()?;
        // New data lands in the punched pages and reads back.
        load(&db, 100_000..130_000)?;
        db.checkpoint()?;
        drop(db);
        let db = Database::open(&path)?;
        let mut want = want;
        want.extend(model(100_000..130_000));
        assert_eq!(contents(&db)?, want);
        db.check_integrity()?;
    }
    Ok(())
}

/// A snapshot taken before a removal keeps every page it reads while
/// checkpoints punch holes around it (read back through a small cache, so
/// from the file); once it is dropped, the next checkpoint punches its
/// old pages too.
#[test]
fn a_snapshot_reads_its_pages_while_holes_are_punched_around_it() -> Result<()> {
    let vfs = SimVfs::new();
    let db = builder()
        .cache_size_bytes(256 << 10)
        .punch_after_bytes(PAGE as u64)
        .create_with_vfs(Arc::new(vfs.clone()), "s.sheaf")?;
    load(&db, 0..20_000)?;
    db.checkpoint()?;
    let all = model(0..20_000);
    let rx = db.begin_read()?;
    delete(&db, (0..20_000).filter(|k| k % 2 == 0))?;
    db.checkpoint()?;
    load(&db, 30_000..34_000)?;
    db.checkpoint()?;
    let pinned = zero_pages(&vfs, "s.sheaf");
    assert_eq!(contents_of(&rx)?, all, "the old snapshot");
    let mut now = model((0..20_000).filter(|k| k % 2 == 1));
    now.extend(model(30_000..34_000));
    assert_eq!(contents(&db)?, now);
    drop(rx);
    db.checkpoint()?;
    db.checkpoint()?;
    let freed = zero_pages(&vfs, "s.sheaf");
    eprintln!("zero pages: {pinned} while the snapshot lived, {freed} after");
    assert!(
        freed > pinned + 100,
        "the snapshot's pages were not punched: {pinned} -> {freed} zero pages"
    );
    assert_eq!(contents(&db)?, now);
    db.check_integrity()?;
    drop(db);
    let db = builder().open_with_vfs(Arc::new(vfs.crash(7)), "s.sheaf")?;
    assert_eq!(contents(&db)?, now);
    db.check_integrity()?;
    Ok(())
}

/// The database of [`a_crash_at_every_operation_of_a_punching_checkpoint_loses_nothing`]:
/// 4,000 keys loaded and checkpointed, then all but every fifth deleted
/// in commits of 400 keys (small enough for the WAL: buffered, not yet
/// folded or checkpointed).
fn punch_case(vfs: &SimVfs) -> Database {
    let db = builder()
        .punch_after_bytes(PAGE as u64)
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), "p.sheaf")
        .unwrap();
    load(&db, 0..4000).unwrap();
    db.checkpoint().unwrap();
    for chunk in (0..4000u64).collect::<Vec<_>>().chunks(400) {
        delete(&db, chunk.iter().copied().filter(|k| k % 5 != 0)).unwrap();
    }
    db
}

/// Two checkpoints: the first folds the removal and makes the old pages
/// wait for the second, after which they are free and punched.
fn two_checkpoints(db: &Database) -> Result<()> {
    db.checkpoint()?;
    db.checkpoint()
}

/// A crash (power loss with three seeds, and a process crash) at every
/// storage operation of two checkpoints that fold a removal and punch its
/// old pages: the reopened database holds exactly the committed data,
/// checks clean, and takes and keeps new writes. Panics name the step and
/// the seed.
#[test]
fn a_crash_at_every_operation_of_a_punching_checkpoint_loses_nothing() {
    let want = model((0..4000).filter(|k| k % 5 == 0));
    let probe = SimVfs::new();
    let db = punch_case(&probe);
    let zeros = zero_pages(&probe, "p.sheaf");
    let ops = probe.op_count();
    two_checkpoints(&db).unwrap();
    let steps = probe.op_count() - ops;
    let punched = zero_pages(&probe, "p.sheaf");
    assert!(
        punched > zeros + 20,
        "no hole punched: {zeros} -> {punched}"
    );
    assert!(
        steps > 20,
        "{steps} operations: the fold was not in the checkpoints"
    );
    drop(db);
    eprintln!("{steps} storage operations; zero pages {zeros} -> {punched}");
    for step in 1..=steps {
        for seed in 0..4u64 {
            let at = format!("step {step} seed {seed}");
            let vfs = SimVfs::new();
            let db = punch_case(&vfs);
            vfs.fail_from(vfs.op_count() + step, Fault::Eio);
            let _ = two_checkpoints(&db);
            let crashed = match seed {
                3 => vfs.process_crash(),
                _ => vfs.crash(step * 10 + seed),
            };
            drop(db);
            let db = builder()
                .punch_after_bytes(PAGE as u64)
                .open_with_vfs(Arc::new(crashed.clone()), "p.sheaf")
                .unwrap_or_else(|e| panic!("{at}: reopen: {e}"));
            assert_eq!(contents(&db).unwrap(), want, "{at}");
            db.check_integrity()
                .unwrap_or_else(|e| panic!("{at}: integrity: {e}"));
            load(&db, 10_000..10_500).unwrap();
            two_checkpoints(&db).unwrap_or_else(|e| panic!("{at}: checkpoint: {e}"));
            drop(db);
            let db = builder()
                .open_with_vfs(Arc::new(crashed.crash(seed)), "p.sheaf")
                .unwrap_or_else(|e| panic!("{at}: reopen 2: {e}"));
            let mut more = want.clone();
            more.extend(model(10_000..10_500));
            assert_eq!(contents(&db).unwrap(), more, "{at}: after reopen 2");
            db.check_integrity()
                .unwrap_or_else(|e| panic!("{at}: integrity 2: {e}"));
        }
    }
}

/// Answers every hole punch with `error` (and counts them); every other
/// operation goes through.
#[derive(Debug)]
struct FailPunches {
    error: fn() -> io::Error,
    punches: AtomicU64,
}

impl Hook for FailPunches {
    fn before(&self, _: &str, op: FileOp) -> io::Result<()> {
        if op != FileOp::PunchHole {
            return Ok(());
        }
        self.punches.fetch_add(1, Ordering::SeqCst);
        Err((self.error)())
    }
}

/// Load, delete most, checkpoint twice, three times over; returns what
/// the table holds.
fn churn(db: &Database) -> Result<BTreeMap<u64, Vec<u8>>> {
    let mut want = BTreeMap::new();
    for round in 0..3u64 {
        let keys = round * 10_000..round * 10_000 + 5_000;
        load(db, keys.clone())?;
        db.checkpoint()?;
        delete(db, keys.clone().filter(|k| k % 4 != 0))?;
        db.checkpoint()?;
        db.checkpoint()?;
        want.extend(model(keys.filter(|k| k % 4 == 0)));
    }
    Ok(want)
}

/// A punch that fails loses nothing and poisons nothing (free pages left
/// as they were are read by no one): commits, checkpoints and reads go on.
/// Storage that cannot punch holes is asked once, then never again; one
/// that fails otherwise is asked again at later checkpoints.
#[test]
fn failed_and_unsupported_punches_lose_nothing_and_poison_nothing() -> Result<()> {
    let cases: [(fn() -> io::Error, bool); 2] = [
        (|| io::Error::from_raw_os_error(libc::EIO), false),
        (
            || io::Error::new(io::ErrorKind::Unsupported, "no holes here"),
            true,
        ),
    ];
    for (error, unsupported) in cases {
        let hook = Arc::new(FailPunches {
            error,
            punches: AtomicU64::new(0),
        });
        let mem = MemVfs::new();
        let vfs = HookVfs::new(Arc::new(mem.clone()), hook.clone());
        let db = builder()
            .punch_after_bytes(PAGE as u64)
            .create_with_vfs(Arc::new(vfs), "f.sheaf")?;
        let want = churn(&db)?;
        let punches = hook.punches.load(Ordering::SeqCst);
        match unsupported {
            true => assert_eq!(punches, 1, "unsupported punching asked again"),
            false => assert!(punches >= 3, "failed punches not retried: {punches}"),
        }
        assert_eq!(contents(&db)?, want);
        db.check_integrity()?;
        load(&db, 90_000..90_100)?;
        drop(db);
        let db = builder().open_with_vfs(Arc::new(mem), "f.sheaf")?;
        let mut want = want;
        want.extend(model(90_000..90_100));
        assert_eq!(contents(&db)?, want);
        db.check_integrity()?;
    }
    Ok(())
}

/// Records the data file's operations while armed.
#[derive(Debug, Default)]
struct Record {
    armed: std::sync::atomic::AtomicBool,
    ops: std::sync::Mutex<Vec<FileOp>>,
}

impl Hook for Record {
    fn before(&self, name: &str, op: FileOp) -> io::Result<()> {
        if self.armed.load(Ordering::SeqCst) && name == "c.sheaf" {
            self.ops.lock().unwrap().push(op);
        }
        Ok(())
    }
}

/// A compaction punches no hole until it has moved and written all it
/// moves: the space below its limit is where the moved pages go, so
/// punching it first costs a syscall per run and a block allocation per
/// page moved (design.md "Holes"). It punches once at its end.
#[test]
fn a_compaction_punches_only_after_its_last_write() -> Result<()> {
    let hook = Arc::new(Record::default());
    let mem = MemVfs::new();
    let db = builder().punch_after_bytes(PAGE as u64).create_with_vfs(
        Arc::new(HookVfs::new(Arc::new(mem), hook.clone())),
        "c.sheaf",
    )?;
    load(&db, 0..20_000)?;
    db.checkpoint()?;
    delete(&db, (0..20_000).filter(|k| k % 3 != 0))?;
    load(&db, 20_000..24_000)?;
    hook.armed.store(true, Ordering::SeqCst);
    let report = db.compact()?;
    hook.armed.store(false, Ordering::SeqCst);
    assert!(report.pages_moved > 0, "nothing moved: {report:?}");
    let ops = hook.ops.lock().unwrap().clone();
    let last_write = ops.iter().rposition(|&op| op == FileOp::Write);
    let first_punch = ops.iter().position(|&op| op == FileOp::PunchHole);
    eprintln!(
        "{} operations, last write {last_write:?}, first punch {first_punch:?}",
        ops.len()
    );
    let (Some(w), Some(p)) = (last_write, first_punch) else {
        panic!("the compaction wrote nothing or punched nothing: {ops:?}");
    };
    assert!(
        p > w,
        "a hole punched at operation {p}, before the write at {w}"
    );
    let mut want = model((0..20_000).filter(|k| k % 3 == 0));
    want.extend(model(20_000..24_000));
    assert_eq!(contents(&db)?, want);
    db.check_integrity()?;
    Ok(())
}
