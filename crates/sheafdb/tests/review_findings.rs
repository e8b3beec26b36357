//! Review findings: interleavings of checkpoints with column-family
//! creation/drop and extent claims, reproduced deterministically where
//! possible with a "gated" storage wrapper that blocks one chosen I/O
//! operation until the test releases it.

mod common;

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{def, open_sim};
use sheafdb::storage::hook::{is_wal_file, FileOp, Hook, HookVfs};
use sheafdb::storage::sim::{CrashPolicy, SimVfs};
use sheafdb::storage::{OpenMode, Vfs};
use sheafdb::{Database, Durability, Error, Result};

// ---------------------------------------------------------------------------
// A Vfs wrapper that can block one I/O operation (one-shot) until released.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GateOp {
    Read,
    Sync,
}

#[derive(Debug, Default)]
struct GateState {
    /// (operation, true = WAL file / false = data file)
    armed: Option<(GateOp, bool)>,
    blocked: bool,
    open: bool,
}

#[derive(Debug, Default)]
struct Gate {
    st: Mutex<GateState>,
    cv: Condvar,
}

impl Gate {
    fn arm(&self, op: GateOp, wal: bool) {
        let mut st = self.st.lock().unwrap();
        *st = GateState {
            armed: Some((op, wal)),
            blocked: false,
            open: false,
        };
    }
    fn check(&self, op: GateOp, wal: bool) {
        let mut st = self.st.lock().unwrap();
        if st.armed == Some((op, wal)) {
            st.armed = None;
            st.blocked = true;
            self.cv.notify_all();
            let deadline = Instant::now() + Duration::from_secs(20);
            while !st.open && Instant::now() < deadline {
                st = self
                    .cv
                    .wait_timeout(st, Duration::from_millis(50))
                    .unwrap()
                    .0;
            }
        }
    }
    fn wait_blocked(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.st.lock().unwrap();
        while !st.blocked {
            if Instant::now() >= deadline {
                return false;
            }
            st = self
                .cv
                .wait_timeout(st, Duration::from_millis(20))
                .unwrap()
                .0;
        }
        true
    }
    fn release(&self) {
        let mut st = self.st.lock().unwrap();
        st.open = true;
        st.armed = None;
        self.cv.notify_all();
    }
}

impl Hook for Gate {
    fn before(&self, name: &str, op: FileOp) -> io::Result<()> {
        let op = match op {
            FileOp::Read => GateOp::Read,
            FileOp::Sync => GateOp::Sync,
            FileOp::Write | FileOp::SetLen | FileOp::Len | FileOp::PunchHole => return Ok(()),
        };
        self.check(op, is_wal_file(name));
        Ok(())
    }
}

fn gated(sim: &SimVfs) -> (Arc<dyn Vfs>, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    let vfs = HookVfs::new(Arc::new(sim.clone()), gate.clone());
    (Arc::new(vfs), gate)
}

fn open_gated(vfs: &Arc<dyn Vfs>, name: &str) -> Result<Database> {
    common::builder()
        .background_checkpoints(false)
        .create_with_vfs(vfs.clone(), name)
}

// ---------------------------------------------------------------------------
// BUG 1 (db/cf.rs create_cf, db/checkpoint.rs replay_floor):
// `create_cf` appends + syncs the create-CF record, and only afterwards
// registers the CF in `DbShared::cfs`. A checkpoint that starts in between
// captures `log_end` past the create record, does not see the new CF (not in
// `cfs`, so neither planned nor pinning the replay floor) and writes a
// superblock whose replay start is past the create record. Until some later
// checkpoint happens to record the CF, a crash loses the CF and every
// (acknowledged, Immediate) commit to it: replay skips records of unknown
// CfIds.
// Interleaving forced here: the WAL fdatasync of the create record is held
// while `Database::checkpoint()` runs to completion.
#[test]
fn create_cf_racing_a_checkpoint_is_lost_after_a_crash() -> Result<()> {
    let sim = SimVfs::new();
    let (vfs, gate) = gated(&sim);
    let db = open_gated(&vfs, "c.sheaf")?;
    gate.arm(GateOp::Sync, true);
    let x = std::thread::scope(|s| -> Result<_> {
        let h = s.spawn(|| db.create_cf("x"));
        assert!(
            gate.wait_blocked(Duration::from_secs(10)),
            "create_cf never synced the WAL"
        );
        // The create record is appended (and being synced); the CF is not
        // registered yet. A checkpoint started now waits for the create to
        // register its CF (the registry's change lock): it is released
        // while the checkpoint waits, as held it would wait out the gate.
        let c = s.spawn(|| db.checkpoint());
        std::thread::sleep(Duration::from_millis(100));
        gate.release();
        c.join().expect("checkpoint thread")?;
        h.join().expect("create thread")
    })?;
    let tx = x.begin_write()?;
    tx.open_table(def("t"))?
        .insert(b"k".as_slice(), b"v".as_slice())?;
    tx.commit()?; // Immediate: acknowledged durable
    let crashed = sim.crash_with(1, CrashPolicy::DropAll);
    drop(db);
    let db2 = open_sim(&crashed, "c.sheaf")?;
    let x2 = db2
        .cf("x")
        .expect("created CF (with an acknowledged Immediate commit) lost after crash");
    let rx = x2.begin_read()?;
    let t = rx.open_table(def("t"))?;
    assert_eq!(t.get(b"k".as_slice())?.unwrap().value(), b"v");
    Ok(())
}

// ---------------------------------------------------------------------------
// BUG 2 (db/checkpoint.rs checkpoint_including / write_checkpoint_inner /
// release_dropped):
// The checkpoint reads `cfs` (and plans CF X, which has unpersisted commits)
// and only later clones `dropped`. If `drop_cf(X)` completes in between, X is
// both planned and in `dropped`: `write_checkpoint_inner` removes X's
// descriptor (dropping) and then re-inserts it (descriptors), and
// `release_dropped` returns X's extents to the pool and forgets X. The
// system tree now holds a descriptor of a dropped CF whose extents the next
// checkpoint persists as free. Reopen then fails (`CfAllocator::new`
// rejects free ranges outside the CF's extents) or resurrects the CF over
// extents another CF may own.
// Interleaving forced here: the checkpoint's first data-file read (a clean
// catalog leaf of X, read in `prepare_cf`) is held while `drop_cf("x")`
// runs to completion.
#[test]
fn drop_cf_racing_a_checkpoint_leaves_its_descriptor_behind() -> Result<()> {
    let sim = SimVfs::new();
    let (vfs, gate) = gated(&sim);
    let long = |i: usize| format!("{i:03}{}", "n".repeat(200));
    {
        let db = open_gated(&vfs, "d.sheaf")?;
        let x = db.create_cf("x")?;
        let tx = x.begin_write()?;
        for i in 0..60 {
            tx.open_table(def(&long(i)))?
                .insert(b"k".as_slice(), b"v".as_slice())?;
        }
        tx.commit()?;
        db.close()?;
    }
    let db = open_gated(&vfs, "d.sheaf")?; // cold cache
    let x = db.cf("x")?;
    let tx = x.begin_write()?;
    tx.open_table(def(&long(0)))?
        .insert(b"k2".as_slice(), b"v2".as_slice())?;
    tx.commit()?;
    gate.arm(GateOp::Read, false);
    std::thread::scope(|s| -> Result<()> {
        let h = s.spawn(|| db.checkpoint());
        assert!(
            gate.wait_blocked(Duration::from_secs(10)),
            "checkpoint never read the data file"
        );
        db.drop_cf("x")?;
        gate.release();
        h.join().expect("checkpoint thread")
    })?;
    assert!(matches!(db.cf("x"), Err(Error::CfNotFound(_))));
    drop(x); // the handle keeps the database (and its file lock) alive
    db.close()?; // clean close: one more checkpoint
    let db = open_gated(&vfs, "d.sheaf").expect("reopen after a clean close must succeed");
    assert!(
        db.cf("x").is_err(),
        "a dropped CF came back after a clean close"
    );
    db.check_integrity()?;
    Ok(())
}

// ---------------------------------------------------------------------------
// BUG 3 (db/checkpoint.rs build_meta):
// The metadata blob records `file_pages` from the extent map when it is
// encoded, but the superblock's `file_pages` is read from the extent map
// again afterwards (`let file_pages = self.extents.lock().file_pages()`).
// A writer claiming an extent at the end of the file in between makes the
// two disagree, and `open_existing` then refuses the file for good
// ("metadata blob and superblock disagree on the file length") — there is
// no fallback to the other slot. Probabilistic: writers claim one-page
// extents continuously while checkpoints loop; after each checkpoint the
// current superblock and its blob are compared.
#[test]
fn superblock_and_blob_file_length_agree_under_concurrent_claims() -> Result<()> {
    let sim = SimVfs::new();
    let name = "f.sheaf";
    // Small buffers keep each checkpoint's fold short: with one-page
    // extents, 3 KB values and debug invariant checks, folding a 16 MiB
    // buffer made this four-second loop run for minutes. (Without a
    // background checkpointer only the database-wide limit bounds them.)
    let db = common::builder()
        .extent_sizes(4096, 4096)
        .background_checkpoints(false)
        .durability(Durability::None)
        .buffer_fold_bytes(64 << 10)
        .buffer_memory(64 << 10, 256 << 10)
        .create_with_vfs(Arc::new(sim.clone()), name)?;
    let file = sim.open(name, OpenMode::Existing).map_err(Error::Io)?;
    let stop = AtomicBool::new(false);
    let commits = AtomicU64::new(0);
    let mismatch = std::thread::scope(|s| -> Result<Option<(u64, u64)>> {
        for w in 0..2u64 {
            let db = &db;
            let stop = &stop;
            let commits = &commits;
            s.spawn(move || -> Result<()> {
                let cf = db.cf_or_create(&format!("w{w}"))?;
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let tx = cf.begin_write()?;
                    {
                        let mut t = tx.open_table(def("t"))?;
                        for _ in 0..4 {
                            i += 1;
                            t.insert(i.to_be_bytes().as_slice(), [7u8; 3000].as_slice())?;
                        }
                    }
                    tx.commit()?;
                    commits.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            });
        }
        let deadline = Instant::now() + Duration::from_secs(4);
        let mut found = None;
        while Instant::now() < deadline && found.is_none() {
            db.checkpoint()?;
            let mut sb = [0u8; 512 * 2];
            let mut best: Option<(u64, u64, u64)> = None; // (gen, meta_page, file_pages)
            for slot in 0..2u64 {
                file.read_at(slot * 4096, &mut sb[..512])
                    .map_err(Error::Io)?;
                let gen = u64::from_le_bytes(sb[16..24].try_into().unwrap());
                let meta = u64::from_le_bytes(sb[40..48].try_into().unwrap());
                let fp = u64::from_le_bytes(sb[56..64].try_into().unwrap());
                if best.is_none_or(|b| gen > b.0) {
                    best = Some((gen, meta, fp));
                }
            }
            let (_, meta, fp) = best.unwrap();
            let mut blob_fp = [0u8; 8];
            file.read_at(meta * 4096 + 32, &mut blob_fp)
                .map_err(Error::Io)?;
            let blob_fp = u64::from_le_bytes(blob_fp);
            if blob_fp != fp {
                found = Some((fp, blob_fp));
            }
        }
        stop.store(true, Ordering::Relaxed);
        Ok(found)
    })?;
    if let Some((sb_fp, blob_fp)) = mismatch {
        let crashed = sim.crash_with(3, CrashPolicy::KeepAll);
        let reopen = open_sim(&crashed, name).map(drop);
        panic!(
            "superblock file_pages {sb_fp} != metadata blob file_pages {blob_fp} \
             after {} commits; reopen of that image: {reopen:?}",
            commits.load(Ordering::Relaxed)
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Findings of the review of fold rounds (each failed before its fix).

fn put_in(cf: &sheafdb::ColumnFamily, t: &str, k: &[u8], v: &[u8]) {
    let tx = cf.begin_write().unwrap();
    tx.open_table(def(t)).unwrap().insert(k, v).unwrap();
    tx.commit().unwrap();
}

/// Replay of a CF whose records wrote trees (a catalog record) and whose
/// drop followed: the replay's private pages stayed "uncommitted" in the
/// dropped CF's allocator, and closing the reopened database failed an
/// allocator invariant (debug builds).
#[test]
fn a_replayed_drop_of_a_cf_that_wrote_trees_closes_cleanly() {
    for variant in 0..4 {
        let vfs = SimVfs::new();
        let b = || common::builder().background_checkpoints(false);
        let db = b()
            .create_with_vfs(Arc::new(vfs.clone()), "d.sheaf")
            .unwrap();
        let cf = db.cf_or_create("b").unwrap();
        for i in 0..50u32 {
            put_in(&cf, "t", &i.to_be_bytes(), b"v");
        }
        db.checkpoint().unwrap();
        for i in 0..50u32 {
            put_in(&cf, "t", &i.to_be_bytes(), b"w");
        }
        if variant & 1 == 1 {
            let tx = cf.begin_write().unwrap();
            tx.open_table(def("u")).unwrap();
            tx.commit().unwrap();
            for i in 0..50u32 {
                put_in(&cf, "u", &i.to_be_bytes(), b"w");
            }
        }
        drop(cf);
        db.drop_cf("b").unwrap();
        if variant & 2 == 2 {
            db.cf_or_create("b").unwrap();
        }
        let crashed = vfs.process_crash();
        drop(db);
        let db2 = b().open_with_vfs(Arc::new(crashed), "d.sheaf").unwrap();
        db2.check_integrity().unwrap();
        db2.close().unwrap();
    }
}

/// `check_integrity` beside tree commits reported `Corrupted` on a healthy
/// database: it walked the published version against the allocator of a
/// committed, not yet published one.
#[test]
fn check_integrity_beside_tree_commits_finds_nothing() {
    const N: sheafdb::TableDefinition<u64, u64> = sheafdb::TableDefinition::new("t");
    let db = Arc::new(
        common::builder()
            .background_checkpoints(false)
            .create_with_vfs(Arc::new(SimVfs::new()), "i.sheaf")
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let checker = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || -> Result<u64> {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                db.check_integrity()?;
                n += 1;
            }
            Ok(n)
        })
    };
    for i in 0..2000u64 {
        let tx = db.begin_write().unwrap();
        if i % 2 == 0 {
            tx.delete_table("t").unwrap(); // a catalog change: a tree commit
        }
        tx.open_table(N).unwrap().insert(i, i).unwrap();
        tx.commit().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let checks = checker
        .join()
        .unwrap()
        .expect("a healthy database checks clean");
    assert!(checks > 0);
}

/// A write transaction right after a compaction step's relocation commit
/// allocated under the step's limit (lifted only after the commit, which
/// releases the writer lock early) and failed with `StorageFull`.
#[test]
fn writes_beside_compaction_steps_never_fail() {
    const T: sheafdb::TableDefinition<u64, &[u8]> = sheafdb::TableDefinition::new("t");
    let db = Arc::new(
        common::builder()
            .background_checkpoints(false)
            .create_with_vfs(Arc::new(SimVfs::new()), "c.sheaf")
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let compactor = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || -> Result<()> {
            while !stop.load(Ordering::Relaxed) {
                db.compact_step(64 << 10)?;
            }
            Ok(())
        })
    };
    let big = vec![7u8; 600];
    for i in 0..3000u64 {
        let tx = db.begin_write().unwrap();
        tx.delete_table(&format!("side{}", i % 2)).unwrap();
        tx.open_table(sheafdb::TableDefinition::<u64, u64>::new(&format!(
            "side{}",
            (i + 1) % 2
        )))
        .unwrap();
        {
            let mut t = tx.open_table(T).unwrap();
            for k in 0..40 {
                t.insert((i * 7 + k) % 500, big.as_slice())
                    .unwrap_or_else(|e| panic!("txn {i}: {e}"));
            }
        }
        tx.commit().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    compactor.join().unwrap().unwrap();
    db.check_integrity().unwrap();
}

/// `checkpoint()` while writers keep committing into every CF, with folds
/// in one-page rounds: it must end (a CF whose fold ended is not folded
/// again in the same checkpoint, or new buffers would keep it looping).
#[test]
fn a_checkpoint_ends_while_writers_keep_every_cf_busy() {
    const T: sheafdb::TableDefinition<u64, u64> = sheafdb::TableDefinition::new("t");
    let db = Arc::new(
        common::builder()
            .background_checkpoints(false)
            .fold_round_pages(1)
            .create_with_vfs(Arc::new(sheafdb::storage::mem::MemVfs::new()), "l.sheaf")
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for i in 0..2u64 {
        let cf = db.create_cf(&format!("c{i}")).unwrap();
        let tx = cf.begin_write().unwrap();
        {
            let mut t = tx.open_table(T).unwrap();
            for k in 0..20_000u64 {
                t.insert(k, k).unwrap();
            }
        }
        tx.commit().unwrap();
        let stop = stop.clone();
        writers.push(std::thread::spawn(move || {
            let mut x = i + 1;
            while !stop.load(Ordering::Relaxed) {
                let mut tx = cf.begin_write().unwrap();
                tx.set_durability(Durability::None);
                {
                    let mut t = tx.open_table(T).unwrap();
                    for _ in 0..50 {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        t.insert((x >> 33) % 20_000, x).unwrap();
                    }
                }
                tx.commit().unwrap();
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(300));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    {
        let db = db.clone();
        std::thread::spawn(move || {
            let _ = done_tx.send(db.checkpoint().map_err(|e| e.to_string()));
        });
    }
    let r = done_rx.recv_timeout(Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert!(
        matches!(r, Ok(Ok(()))),
        "checkpoint() did not end within 60 s beside busy writers: {r:?}"
    );
}

// ---------------------------------------------------------------------------
// Session 19 review of `WriteCore::open_table_typed` (a write transaction's
// typed open taking the catalog its base decoded once).

/// FINDING: the fast path's debug check re-read the catalog and asserted on
/// the result, so a failed read (the catalog page evicted, then EIO) panicked
/// in debug builds instead of returning. Now a failed read proves nothing and
/// the open returns (its table or an error), never panics.
#[test]
fn a_writer_open_from_the_decoded_catalog_survives_failing_reads() {
    use sheafdb::storage::sim::Fault;
    const T: sheafdb::TableDefinition<u64, u64> = sheafdb::TableDefinition::new("t");
    const BIG: sheafdb::TableDefinition<u64, &[u8]> = sheafdb::TableDefinition::new("big");
    let vfs = SimVfs::new();
    let open = |create: bool| {
        let b = Database::builder()
            .page_size(4096)
            .cache_size_bytes(0) // the smallest budget: 256 KiB
            .background_checkpoints(false);
        if create {
            b.create_with_vfs(Arc::new(vfs.clone()), "p.sheaf")
        } else {
            b.open_with_vfs(Arc::new(vfs.clone()), "p.sheaf")
        }
        .unwrap()
    };
    let db = open(true);
    let tx = db.begin_write().unwrap();
    tx.open_table(T).unwrap().insert(1, 1).unwrap();
    {
        let mut b = tx.open_table(BIG).unwrap();
        for k in 0..4000u64 {
            b.insert(k, [7u8; 300].as_slice()).unwrap();
        }
    }
    tx.commit().unwrap();
    db.close().unwrap();
    let db = open(false);
    let rx = db.begin_read().unwrap();
    assert_eq!(rx.open_table(T).unwrap().len().unwrap(), 1); // decodes the catalog
    for _ in 0..4 {
        // Scans larger than the cache push the catalog page out.
        assert_eq!(rx.open_table(BIG).unwrap().iter().unwrap().count(), 4000);
    }
    drop(rx);
    let tx = db.begin_write().unwrap();
    vfs.fail_from(1, Fault::Eio);
    assert!(tx.list_tables().is_err(), "the catalog read fails");
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tx.open_table(T).map(|_| ())
    }));
    vfs.clear_faults();
    assert!(opened.is_ok(), "a typed open panicked on a failed read");
}

/// FINDING: a writer decoding a small catalog whole failed every typed open
/// when any one entry was damaged, where the lookup it replaced reads only
/// the entry asked for (a writer must be able to open intact tables to save
/// their data). Now a catalog that does not decode leaves the open to the
/// lookup.
#[test]
fn one_damaged_catalog_entry_does_not_keep_a_writer_from_an_intact_table() {
    let vfs = SimVfs::new();
    let a: sheafdb::TableDefinition<u64, u64> = sheafdb::TableDefinition::new("a_tbl");
    let db = Database::builder()
        .page_size(4096)
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), "q.sheaf")
        .unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_table(a).unwrap().insert(1, 1).unwrap();
    tx.open_table(sheafdb::TableDefinition::<u64, u64>::new("b_tbl"))
        .unwrap()
        .insert(1, 1)
        .unwrap();
    tx.commit().unwrap();
    db.close().unwrap();
    // Make "b_tbl" "\xFF_tbl" in the catalog leaf (still after "a_tbl", not
    // UTF-8) and fix the page's checksum, so only that entry is damaged.
    let mut bytes = vfs.file_bytes("q.sheaf").unwrap();
    let mut edited = 0;
    for page in bytes.chunks_mut(4096) {
        let Some(i) = page.windows(5).position(|w| w == b"b_tbl") else {
            continue;
        };
        page[i] = 0xFF;
        let crc = crc32c::crc32c(&page[4..]);
        page[..4].copy_from_slice(&crc.to_le_bytes());
        edited += 1;
    }
    assert_eq!(edited, 1, "one catalog page names b_tbl");
    vfs.set_file_bytes("q.sheaf", bytes);
    let db = Database::builder()
        .background_checkpoints(false)
        .open_with_vfs(Arc::new(vfs.clone()), "q.sheaf")
        .unwrap();
    let tx = db.begin_write().unwrap();
    let len = tx.open_table(a).and_then(|t| t.len());
    assert_eq!(len.ok(), Some(1), "a typed open of the intact table");
    assert!(tx.list_tables().is_err(), "the damage is still reported");
}

/// Findings of an adversarial probe of API edges (session 29), each
/// failing (hanging, or aborting the process) before its fix.
mod api_edges {
    use sheafdb::{Database, Error};

    /// `extent_sizes(u64::MAX, u64::MAX)` was taken, and the first commit
    /// aborted the process allocating terabytes of cache bookkeeping.
    #[test]
    fn huge_extent_sizes_are_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        for (first, max) in [(u64::MAX, u64::MAX), (1 << 20, 1 << 50), (1 << 40, 1 << 20)] {
            let r = Database::builder()
                .extent_sizes(first, max)
                .create(dir.path().join("e.sheaf"));
            assert!(
                matches!(r, Err(Error::InvalidArgument(_))),
                "{first} / {max}: {r:?}"
            );
        }
        let at_limit = sheafdb::MAX_EXTENT_BYTES;
        let db = Database::builder()
            .extent_sizes(1 << 20, at_limit)
            .create(dir.path().join("e.sheaf"))
            .unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(sheafdb::TableDefinition::<u64, u64>::new("t"))
            .unwrap()
            .insert(1, 2)
            .unwrap();
        tx.commit().unwrap();
    }

    /// Opening a FIFO blocked forever in `open(2)`, waiting for a writer.
    #[test]
    fn a_fifo_is_refused_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f.sheaf");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let outcomes = [
                Database::open_read_only(&path).map(drop),
                Database::open(&path).map(drop),
                Database::create(&path).map(drop),
            ];
            tx.send(outcomes.map(|r| r.map_err(|e| e.to_string())))
                .unwrap();
        });
        let outcomes = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("opening a FIFO hung");
        for r in outcomes {
            let e = r.expect_err("a FIFO opened as a database");
            assert!(e.contains("not a regular file"), "{e}");
        }
    }

    /// A value from `insert_reserve` leaked (`mem::forget`) after a
    /// savepoint kept failing every commit after a restore to it ("1
    /// reserved value(s) never stored"): a restore rebuilds the state at
    /// the savepoint, and that had no reservation out.
    #[test]
    fn a_restore_forgets_a_reservation_leaked_after_its_savepoint() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("r.sheaf")).unwrap();
        let t = sheafdb::TableDefinition::<u64, &[u8]>::new("t");
        let mut tx = db.begin_write().unwrap();
        tx.open_table(t)
            .unwrap()
            .insert(1, b"a".as_slice())
            .unwrap();
        let sp = tx.savepoint().unwrap();
        {
            let mut table = tx.open_table(t).unwrap();
            std::mem::forget(table.insert_reserve(2, 8).unwrap());
        }
        tx.restore_savepoint(&sp).unwrap();
        tx.commit().unwrap();
        let rx = db.begin_read().unwrap();
        let table = rx.open_table(t).unwrap();
        assert_eq!(table.get(1).unwrap().unwrap().value(), b"a");
        assert!(table.get(2).unwrap().is_none());
    }

    /// A reservation handed out before a savepoint and stored after it
    /// made the transaction uncommittable once restored to that savepoint
    /// ("1 reserved value(s) never stored", at every later commit): the
    /// restore put back the count of reservations out at the savepoint,
    /// though that one had been stored and its handle was gone (an
    /// adversarial probe, also through a multi-CF transaction). Now a
    /// restore forgets the reservations made after the savepoint and keeps
    /// only those still out.
    #[test]
    fn a_reservation_stored_after_a_savepoint_does_not_block_the_commit_after_a_restore() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("r.sheaf")).unwrap();
        let t = sheafdb::TableDefinition::<u64, &[u8]>::new("t");
        let mut tx = db.begin_write().unwrap();
        let sp;
        {
            let mut table = tx.open_table(t).unwrap();
            table.insert(1, b"one".as_slice()).unwrap();
            let mut r = table.insert_reserve(2, 3).unwrap();
            sp = tx.savepoint().unwrap();
            r.copy_from_slice(b"two");
            r.finish().unwrap();
        }
        tx.restore_savepoint(&sp).unwrap();
        tx.commit().unwrap();
        let rx = db.begin_read().unwrap();
        let table = rx.open_table(t).unwrap();
        assert_eq!(table.get(1).unwrap().unwrap().value(), b"one");
        assert!(table.get(2).unwrap().is_none());
        assert_eq!(table.len().unwrap(), 1);

        // The same through a transaction over two CFs.
        let other = db.cf_or_create("other").unwrap();
        let main = db.default_cf().unwrap();
        let mut tx = db.begin_write_cfs(&[&main, &other]).unwrap();
        let sp;
        {
            let mut table = tx.open_table(&other, t).unwrap();
            let mut r = table.insert_reserve(5, 4).unwrap();
            sp = tx.savepoint().unwrap();
            r.copy_from_slice(b"five");
            r.finish().unwrap();
        }
        tx.restore_savepoint(&sp).unwrap();
        tx.open_table(&other, t)
            .unwrap()
            .insert(6, b"six".as_slice())
            .unwrap();
        tx.commit().unwrap();
        let rx = db.begin_read().unwrap();
        let table = rx.open_table_in(&other, t).unwrap();
        assert!(table.get(5).unwrap().is_none());
        assert_eq!(table.get(6).unwrap().unwrap().value(), b"six");
    }

    /// A reservation leaked before a savepoint is still out after a
    /// restore to it: the commit stays refused (its value would vanish
    /// from a commit that reports success), and the transaction can
    /// still be aborted.
    #[test]
    fn a_reservation_leaked_before_a_savepoint_still_blocks_the_commit_after_a_restore() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("r.sheaf")).unwrap();
        let t = sheafdb::TableDefinition::<u64, &[u8]>::new("t");
        let mut tx = db.begin_write().unwrap();
        {
            let mut table = tx.open_table(t).unwrap();
            std::mem::forget(table.insert_reserve(2, 8).unwrap());
        }
        let sp = tx.savepoint().unwrap();
        tx.open_table(t)
            .unwrap()
            .insert(3, b"c".as_slice())
            .unwrap();
        tx.restore_savepoint(&sp).unwrap();
        let e = tx.commit().unwrap_err();
        assert!(e.to_string().contains("reserved value"), "{e}");
        let rx = db.begin_read().unwrap();
        assert!(rx.open_table(t).is_err(), "nothing was committed");
    }

    /// A backup into a missing directory failed with a bare `NotFound`
    /// naming nothing, and one to a dangling symlink copied everything
    /// and then failed with "File exists": both are refused first, naming
    /// the path.
    #[test]
    fn backup_targets_that_cannot_work_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("src.sheaf")).unwrap();
        let missing = dir.path().join("no-such-dir").join("b.sheaf");
        let e = db.backup_to(&missing).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(e.to_string().contains("no-such-dir"), "{e}");
        let link = dir.path().join("link.sheaf");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).unwrap();
        let e = db.backup_to(&link).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(e.to_string().contains("link.sheaf"), "{e}");
        assert!(!dir.path().join("nowhere").exists());
        db.backup_to(dir.path().join("ok.sheaf")).unwrap();
    }
}

/// A durable commit that changed nothing, in one column family, makes the
/// earlier `Durability::None` commits of every column family durable,
/// like any durable commit (README, "Durability"). Before, it waited only
/// for its own CF's version, and another CF's `None` commit was lost to a
/// crash right after it (a session-34 probe).
#[test]
fn an_empty_durable_commit_makes_other_cfs_none_commits_durable() -> Result<()> {
    const T: sheafdb::TableDefinition<&str, u64> = sheafdb::TableDefinition::new("t");
    for (policy, what) in [
        (None, "process crash"),
        (Some(CrashPolicy::DropAll), "power cut"),
    ] {
        for mode in [Durability::Immediate, Durability::Eventual] {
            if mode == Durability::Eventual && policy.is_some() {
                continue; // Eventual promises only a process crash.
            }
            let sim = SimVfs::new();
            let db = common::builder()
                .background_checkpoints(false)
                .create_with_vfs(Arc::new(sim.clone()), "e.sheaf")?;
            let other = db.cf_or_create("c2")?;
            let mut tx = db.begin_write()?;
            tx.set_durability(Durability::None);
            tx.open_table(T)?.insert("b", 3)?;
            tx.commit()?;
            let mut empty = other.begin_write()?;
            empty.set_durability(mode);
            empty.commit()?;
            let image = match policy {
                None => sim.process_crash(),
                Some(p) => sim.crash_with(7, p),
            };
            drop(db);
            let db = common::builder().open_with_vfs(Arc::new(image), "e.sheaf")?;
            let got = db.begin_read()?.open_table(T)?.get("b")?.map(|g| g.value());
            assert_eq!(got, Some(3), "{what}, {mode:?}: the None commit was lost");
        }
    }
    Ok(())
}
