//! Issue 9 points 4, 5, 6, 9, 11 and 12: failures that must poison (with
//! their cause), failed operations that must fail the transaction, calls
//! that used to hang, handles of another database, and use after close.
//! Every scenario that once hung runs under a watchdog, so a regression
//! fails the test instead of hanging the suite.

mod common;

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{builder, watchdog};
use sheafdb::storage::hook::{is_wal_file, FileOp, Hook, HookVfs};
use sheafdb::storage::mem::MemVfs;
use sheafdb::storage::sim::{CrashPolicy, Fault, SimVfs};
use sheafdb::storage::Vfs;
use sheafdb::{Database, Durability, Error, TableDefinition};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
const U: TableDefinition<u64, u64> = TableDefinition::new("u");

fn sim_db(vfs: &SimVfs) -> Database {
    builder()
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), "m.sheaf")
        .unwrap()
}

fn put(db: &Database, k: u64, len: usize) -> sheafdb::Result<()> {
    let tx = db.begin_write()?;
    tx.open_table(T)?.insert(k, vec![7u8; len].as_slice())?;
    tx.commit()
}

fn keys(db: &Database) -> Vec<u64> {
    let rx = db.begin_read().unwrap();
    match rx.open_table(T) {
        Ok(t) => t.iter().unwrap().map(|e| e.unwrap().0.value()).collect(),
        Err(_) => Vec::new(),
    }
}

// ------------------------------------------------------------- point 4

/// A direct-checkpoint commit (record larger than the WAL takes) that runs
/// out of disk part-way poisons the database and keeps the cause: the next
/// commit returns `Poisoned` naming the full disk at once (it used to wait
/// forever), and after a power loss the file opens with a committed prefix.
#[test]
fn failed_direct_commit_poisons_with_its_cause_and_never_hangs() {
    let mut poisoned = 0;
    for n in 1..80u64 {
        let vfs = SimVfs::new();
        let db = Arc::new(sim_db(&vfs));
        put(&db, 1, 10).unwrap();
        vfs.fail_from(n, Fault::NoSpace);
        let db2 = db.clone();
        // 200 KiB of values: over the 64 KiB record limit of `builder()`.
        let first = watchdog("direct commit", move || {
            let tx = db2.begin_write()?;
            {
                let mut t = tx.open_table(T)?;
                for k in 100..300u64 {
                    t.insert(k, vec![3u8; 1000].as_slice())?;
                }
            }
            tx.commit()
        });
        let Err(first) = first else { break };
        let db2 = db.clone();
        let next = watchdog("commit after a failed direct commit", move || {
            put(&db2, 2, 10)
        });
        match next {
            Err(Error::Poisoned(cause)) => {
                assert_eq!(
                    cause.io_kind(),
                    Some(io::ErrorKind::StorageFull),
                    "n {n}: cause lost: {cause} (first error: {first})"
                );
                assert!(next_display_names_cause(&Error::Poisoned(cause)));
                poisoned += 1;
            }
            // The disk is still full: the new commit may fail on its own.
            Err(Error::Io(e)) if e.kind() == io::ErrorKind::StorageFull => {}
            Ok(()) => {}
            Err(e) => panic!("n {n}: unexpected {e} after {first}"),
        }
        let crashed = vfs.crash_with(n, CrashPolicy::DropAll);
        drop(db);
        let db = sim_db(&crashed);
        assert!(keys(&db).contains(&1), "n {n}: committed row lost");
        db.check_integrity()
            .unwrap_or_else(|e| panic!("n {n}: integrity after reopen: {e}"));
    }
    assert!(poisoned > 3, "no failure of the direct commit poisoned");
}

fn next_display_names_cause(e: &Error) -> bool {
    let s = e.to_string();
    s.contains("cause") && s.to_lowercase().contains("space")
}

// ------------------------------------------------------------- point 5

/// A hook that fails reads of the data file or syncs of the WAL once armed.
#[derive(Debug, Clone, Default)]
struct FlakyVfs {
    inner: MemVfs,
    fail_reads: Arc<AtomicBool>,
    fail_syncs: Arc<AtomicBool>,
    /// Panic in the next WAL sync once this is set (point 6).
    panic_wal_sync: Arc<AtomicBool>,
    /// Parked WAL syncs wait for this channel before panicking.
    release: Arc<Mutex<Option<mpsc::Receiver<()>>>>,
    syncs: Arc<AtomicU64>,
}

impl Hook for FlakyVfs {
    fn before(&self, name: &str, op: FileOp) -> io::Result<()> {
        let wal = is_wal_file(name);
        match op {
            FileOp::Read if !wal && self.fail_reads.load(Ordering::SeqCst) => {
                Err(io::Error::other("injected read error"))
            }
            FileOp::Sync => {
                self.syncs.fetch_add(1, Ordering::SeqCst);
                if wal && self.panic_wal_sync.swap(false, Ordering::SeqCst) {
                    if let Some(rx) = self.release.lock().unwrap().take() {
                        let _ = rx.recv_timeout(Duration::from_secs(10));
                    }
                    panic!("injected panic in a WAL sync");
                }
                if wal && self.fail_syncs.load(Ordering::SeqCst) {
                    return Err(io::Error::other("injected sync error"));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl FlakyVfs {
    fn vfs(&self) -> Arc<dyn Vfs> {
        Arc::new(HookVfs::new(
            Arc::new(self.inner.clone()),
            Arc::new(self.clone()),
        ))
    }
}

fn flaky_db(vfs: &FlakyVfs) -> Database {
    Database::builder()
        .cache_size_bytes(0)
        .background_checkpoints(false)
        .wal_segment_bytes(256 * 1024)
        .sync_interval(Duration::from_millis(5))
        .create_with_vfs(vfs.vfs(), "f.sheaf")
        .unwrap()
}

/// Fills table `t` and checkpoints, so its pages come from the file.
fn seeded(vfs: &FlakyVfs) -> Database {
    let db = flaky_db(vfs);
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        for k in 0..2000u64 {
            t.insert(k, vec![1u8; 100].as_slice()).unwrap();
        }
    }
    tx.commit().unwrap();
    db.close().unwrap();
    // Reopened: every page of `t` comes from the file on first use.
    flaky_db(vfs)
}

/// A write transaction's writes wait in its write set and reach the tree
/// at commit, so a read that fails during `insert` (looking up the old
/// value) has changed nothing: the operation fails, the transaction goes
/// on and commits. (Before the write set, the same failure could strike
/// mid-copy and had to fail the whole transaction; a failure applying the
/// writes still does, see `WriteState::apply_table_writes` and the
/// `io_errors` suite, which fails every storage operation of a workload.)
#[test]
fn a_failed_read_fails_only_its_operation() {
    let vfs = FlakyVfs::default();
    let db = seeded(&vfs);
    let tx = db.begin_write().unwrap();
    tx.open_table(U).unwrap().insert(1, 1).unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        vfs.fail_reads.store(true, Ordering::SeqCst);
        let err = t.insert(5000, b"x".as_slice()).unwrap_err();
        assert!(matches!(err, Error::Io(_)), "{err}");
        let err = t.remove(7).unwrap_err();
        assert!(matches!(err, Error::Io(_)), "{err}");
        vfs.fail_reads.store(false, Ordering::SeqCst);
        assert!(t.get(5000).unwrap().is_none(), "a failed insert wrote");
        assert!(t.get(7).unwrap().is_some(), "a failed remove removed");
        t.insert(5001, b"y".as_slice()).unwrap();
        assert_eq!(t.len().unwrap(), 2001);
    }
    tx.commit().unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(rx.open_table(U).unwrap().len().unwrap(), 1);
    let t = rx.open_table(T).unwrap();
    assert_eq!(t.len().unwrap(), 2001);
    assert!(t.get(5000).unwrap().is_none());
    assert_eq!(t.get(5001).unwrap().unwrap().value(), b"y");
    drop((t, rx));
    db.check_integrity().unwrap();
}

#[test]
fn oversized_keys_and_values_do_not_fail_the_transaction() {
    let db = builder()
        .create_with_vfs(Arc::new(MemVfs::new()), "o.sheaf")
        .unwrap();
    const B: TableDefinition<&[u8], &[u8]> = TableDefinition::new("b");
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(B).unwrap();
        let err = t
            .insert(vec![0u8; 100_000].as_slice(), b"v".as_slice())
            .unwrap_err();
        assert!(matches!(err, Error::KeyTooLarge { .. }), "{err}");
        t.insert(b"k".as_slice(), b"v".as_slice()).unwrap();
    }
    tx.commit().unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(rx.open_table(B).unwrap().len().unwrap(), 1);
}

// ------------------------------------------------------------- point 6

#[test]
fn a_failed_background_flush_poisons_the_database() {
    let vfs = FlakyVfs::default();
    let db = flaky_db(&vfs);
    put(&db, 1, 10).unwrap();
    vfs.fail_syncs.store(true, Ordering::SeqCst);
    let mut tx = db.begin_write().unwrap();
    tx.set_durability(Durability::Eventual);
    tx.open_table(T)
        .unwrap()
        .insert(2, b"e".as_slice())
        .unwrap();
    tx.commit().unwrap();
    // The flusher (5 ms) fails its sync; the database must notice.
    let mut poisoned = false;
    for _ in 0..400 {
        if let Err(Error::Poisoned(cause)) = db.begin_write() {
            assert!(cause.message().contains("injected sync error"), "{cause}");
            poisoned = true;
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    assert!(poisoned, "a failed background sync did not poison");
}

#[test]
fn a_panic_after_the_wal_append_does_not_hang_later_committers() {
    let vfs = FlakyVfs::default();
    let db = Arc::new(flaky_db(&vfs));
    put(&db, 1, 10).unwrap();
    let (release_tx, release_rx) = mpsc::channel();
    *vfs.release.lock().unwrap() = Some(release_rx);
    vfs.panic_wal_sync.store(true, Ordering::SeqCst);
    // Committer 1: appends, releases the writer lock, then its group-commit
    // sync panics (after committer 2 queued behind it).
    let db1 = db.clone();
    let first = thread::spawn(move || put(&db1, 10, 10));
    // Committer 2 (Durability::None) waits to publish behind committer 1.
    let db2 = db.clone();
    let second = thread::spawn(move || {
        let mut tx = db2.begin_write()?;
        tx.set_durability(Durability::None);
        tx.open_table(T)?.insert(11, b"n".as_slice())?;
        tx.commit()
    });
    thread::sleep(Duration::from_millis(200));
    release_tx.send(()).unwrap();
    assert!(first.join().is_err(), "committer 1 should have panicked");
    let r = watchdog("committer behind a panicked one", move || second.join());
    match r {
        Ok(Err(Error::Poisoned(_))) => {}
        Ok(Ok(())) => {} // it was published before the panic: fine
        other => panic!("unexpected {other:?}"),
    }
    let db3 = db.clone();
    let next = watchdog("commit after the panic", move || put(&db3, 12, 10));
    assert!(matches!(next, Err(Error::Poisoned(_))), "{next:?}");
}

// ------------------------------------------------------------- point 9

#[test]
fn handles_of_another_database_are_refused() {
    let a = builder()
        .create_with_vfs(Arc::new(MemVfs::new()), "a")
        .unwrap();
    let b = builder()
        .create_with_vfs(Arc::new(MemVfs::new()), "b")
        .unwrap();
    let a_cf = a.cf_or_create("x").unwrap();
    let b_cf = b.cf_or_create("x").unwrap();
    assert_eq!(a_cf.id(), b_cf.id(), "same name, same id in both files");
    let foreign = |r: sheafdb::Result<()>| {
        let e = r.unwrap_err();
        assert!(matches!(e, Error::ForeignHandle(_)), "{e}");
    };
    foreign(a.begin_write_cfs(&[&b_cf]).map(drop));
    foreign(a.begin_write_cfs(&[&a_cf, &b_cf]).map(drop));
    let tx = a.begin_write_cfs(&[&a_cf]).unwrap();
    foreign(tx.open_table(&b_cf, U).map(drop));
    foreign(tx.delete_table(&b_cf, "u").map(drop));
    tx.open_table(&a_cf, U).unwrap().insert(1, 1).unwrap();
    tx.commit().unwrap();
    let rx = a.begin_read().unwrap();
    foreign(rx.open_table_in(&b_cf, U).map(drop));
    foreign(rx.list_tables_in(&b_cf).map(drop));
    assert_eq!(
        rx.open_table_in(&a_cf, U)
            .unwrap()
            .get(1)
            .unwrap()
            .unwrap()
            .value(),
        1
    );
    // b is untouched.
    assert!(b.begin_read().unwrap().open_table_in(&b_cf, U).is_err());
    a.check_integrity().unwrap();
    b.check_integrity().unwrap();
}

// ------------------------------------------------------------- point 11

fn mem_db() -> Arc<Database> {
    Arc::new(
        builder()
            .create_with_vfs(Arc::new(MemVfs::new()), "h")
            .unwrap(),
    )
}

#[test]
fn extract_if_closure_reading_another_table_errors_instead_of_hanging() {
    let db = mem_db();
    let r = watchdog("extract_if using its own transaction", move || {
        let tx = db.begin_write().unwrap();
        tx.open_table(U).unwrap().insert(1, 1).unwrap();
        let other = tx.open_table(U).unwrap();
        let mut t = tx.open_table(T).unwrap();
        t.insert(1, b"a".as_slice()).unwrap();
        let mut inner_error = None;
        let kept = t.retain(|k, _| {
            if let Err(e) = other.get(k) {
                inner_error = Some(e);
            }
            true
        });
        (
            kept.map_err(|e| e.to_string()),
            inner_error.map(|e| e.to_string()),
        )
    });
    assert_eq!(r.0, Ok(0));
    let inner = r.1.expect("the closure's read must fail, not hang");
    assert!(
        inner.contains("would wait on this thread's own lock"),
        "{inner}"
    );
}

#[test]
fn second_begin_write_on_the_same_thread_errors() {
    let db = mem_db();
    let r = watchdog("second begin_write", move || {
        let _tx = db.begin_write().unwrap();
        let cf = db.default_cf().unwrap();
        let again = db.begin_write().map(drop);
        let again_cf = cf.begin_write().map(drop);
        let tried = db.try_begin_write().map(drop);
        (again, again_cf, tried)
    });
    assert!(matches!(r.0, Err(Error::WouldDeadlock(_))), "{:?}", r.0);
    assert!(matches!(r.1, Err(Error::WouldDeadlock(_))), "{:?}", r.1);
    assert!(matches!(r.2, Err(Error::WouldDeadlock(_))), "{:?}", r.2);
}

#[test]
fn try_begin_write_returns_at_once_when_another_thread_writes() {
    let db = mem_db();
    let tx = db.begin_write().unwrap();
    let db2 = db.clone();
    let r = watchdog("try_begin_write", move || db2.try_begin_write().map(drop));
    assert!(matches!(r, Err(Error::WriterBusy(_))), "{r:?}");
    drop(tx);
    assert!(db.try_begin_write().is_ok());
}

#[test]
fn drop_cf_while_this_thread_writes_it_errors() {
    let db = mem_db();
    let r = watchdog("drop_cf of own CF", move || {
        let cf = db.cf_or_create("x").unwrap();
        let tx = cf.begin_write().unwrap();
        let dropped = db.drop_cf("x");
        drop(tx);
        let later = db.drop_cf("x");
        (dropped, later)
    });
    assert!(matches!(r.0, Err(Error::WouldDeadlock(_))), "{:?}", r.0);
    assert!(r.1.is_ok(), "{:?}", r.1);
}

/// A writer that creates a CF while another thread's `drop_cf` of the
/// writer's own CF waits for it: `drop_cf` used to hold the create/drop
/// lock while it waited for the writer, so `create_cf` waited on `drop_cf`
/// and `drop_cf` on the writer's commit (a deadlock across two threads).
#[test]
fn create_cf_while_another_thread_drops_this_writers_cf_does_not_hang() {
    let db = mem_db();
    let r = watchdog("create_cf during a drop_cf of the writer's CF", move || {
        let cf = db.cf_or_create("x").unwrap();
        let tx = cf.begin_write().unwrap();
        tx.open_table(U).unwrap().insert(1, 1).unwrap();
        let db2 = db.clone();
        let dropper = thread::spawn(move || db2.drop_cf("x"));
        // Let the dropper reach its wait for this thread's writer.
        thread::sleep(Duration::from_millis(100));
        let created = db.create_cf("y").map(|c| c.name().to_string());
        let committed = tx.commit();
        let dropped = dropper.join().expect("drop_cf panicked");
        let names = db.list_cfs().unwrap();
        (created, committed, dropped, names)
    });
    assert_eq!(r.0.as_deref().ok(), Some("y"), "{:?}", r.0);
    assert!(r.1.is_ok(), "{:?}", r.1);
    assert!(r.2.is_ok(), "{:?}", r.2);
    assert_eq!(r.3, ["default", "y"]);
}

/// Two threads dropping the same CF: one succeeds, the other gets
/// `CfNotFound` (it waited for the writer lock of a CF that went away).
#[test]
fn racing_drops_of_one_cf_give_one_success() {
    let db = mem_db();
    db.cf_or_create("x").unwrap();
    let rs = watchdog("two drop_cf of one CF", move || {
        let a = {
            let db = db.clone();
            thread::spawn(move || db.drop_cf("x"))
        };
        let b = {
            let db = db.clone();
            thread::spawn(move || db.drop_cf("x"))
        };
        [a.join().unwrap(), b.join().unwrap()]
    });
    let ok = rs.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, 1, "{rs:?}");
    assert!(
        rs.iter().any(|r| matches!(r, Err(Error::CfNotFound(_)))),
        "{rs:?}"
    );
}

#[test]
fn check_integrity_while_this_thread_writes_errors() {
    let db = mem_db();
    let r = watchdog("check_integrity with a held writer", move || {
        let tx = db.begin_write().unwrap();
        let whole = db.check_integrity().map(drop);
        let one = db.default_cf().unwrap().check_integrity().map(drop);
        drop(tx);
        (whole, one, db.check_integrity().map(drop))
    });
    assert!(matches!(r.0, Err(Error::WouldDeadlock(_))), "{:?}", r.0);
    assert!(matches!(r.1, Err(Error::WouldDeadlock(_))), "{:?}", r.1);
    assert!(r.2.is_ok());
}

#[test]
fn checkpoint_while_this_thread_writes_works() {
    let db = Arc::new(
        builder()
            .checkpoint_triggers(1, 1, 1)
            .create_with_vfs(Arc::new(MemVfs::new()), "c")
            .unwrap(),
    );
    let r = watchdog("checkpoint with a held writer", move || {
        let other = db.cf_or_create("o").unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(U).unwrap().insert(1, 1).unwrap();
        // Commits on another CF: past the hard dirty limit, begin_write
        // runs the checkpoint itself.
        for k in 0..20 {
            let t2 = other.begin_write().unwrap();
            t2.open_table(U).unwrap().insert(k, k).unwrap();
            t2.commit().unwrap();
        }
        db.checkpoint().unwrap();
        tx.commit().unwrap();
        db.checkpoint().unwrap();
        db.check_integrity().map(drop)
    });
    r.unwrap();
}

// ------------------------------------------------------------- point 12

#[test]
fn handles_that_outlive_close_fail_clearly_and_lose_nothing() {
    for d in [
        Durability::None,
        Durability::Eventual,
        Durability::Immediate,
    ] {
        let vfs = SimVfs::new();
        let db = sim_db(&vfs);
        let cf = db.cf_or_create("x").unwrap();
        put(&db, 1, 10).unwrap();
        let mut tx = cf.begin_write().unwrap();
        tx.set_durability(d);
        tx.open_table(T)
            .unwrap()
            .insert(2, b"late".as_slice())
            .unwrap();
        db.close().unwrap();
        let err = tx.commit().unwrap_err();
        assert!(matches!(err, Error::DatabaseClosed), "{d:?}: {err}");
        assert!(matches!(cf.begin_write(), Err(Error::DatabaseClosed)));
        assert!(matches!(cf.begin_read(), Err(Error::DatabaseClosed)));
        drop(cf);
        // Everything acknowledged is on disk even if power fails now.
        let after = vfs.crash_with(1, CrashPolicy::DropAll);
        let db = sim_db(&after);
        assert_eq!(keys(&db), vec![1]);
        assert!(db
            .cf("x")
            .unwrap()
            .begin_read()
            .unwrap()
            .open_table(T)
            .is_err());
    }
}

#[test]
fn commits_racing_close_are_durable_or_refused() {
    for round in 0..20u64 {
        let vfs = SimVfs::new();
        let db = sim_db(&vfs);
        let acked = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for t in 0..4u64 {
            let cf = db.cf_or_create(&format!("c{t}")).unwrap();
            let acked = acked.clone();
            threads.push(thread::spawn(move || {
                for k in 0..200u64 {
                    let key = t * 1000 + k;
                    let mut tx = match cf.begin_write() {
                        Ok(tx) => tx,
                        Err(Error::DatabaseClosed) => return,
                        Err(e) => panic!("{e}"),
                    };
                    tx.set_durability(if k % 2 == 0 {
                        Durability::None
                    } else {
                        Durability::Eventual
                    });
                    tx.open_table(T)
                        .unwrap()
                        .insert(key, b"v".as_slice())
                        .unwrap();
                    match tx.commit() {
                        Ok(()) => acked.lock().unwrap().push((t, key)),
                        Err(Error::DatabaseClosed) => return,
                        Err(e) => panic!("{e}"),
                    }
                }
            }));
        }
        thread::sleep(Duration::from_millis(2 + round));
        db.close().unwrap();
        for th in threads {
            th.join().unwrap();
        }
        let after = vfs.crash_with(round, CrashPolicy::DropAll);
        let db = sim_db(&after);
        for (t, key) in acked.lock().unwrap().iter() {
            let rx = db.cf(&format!("c{t}")).unwrap().begin_read().unwrap();
            let has = rx.open_table(T).unwrap().get(*key).unwrap().is_some();
            assert!(
                has,
                "round {round}: acknowledged {key} in c{t} lost after close"
            );
        }
    }
}

/// Threads of this process named like the WAL flusher or the background
/// checkpointer (names cut to 15 bytes), by id.
fn background_threads() -> Vec<String> {
    let mut ids = Vec::new();
    for e in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if ["sheafdb-wal-flu", "sheafdb-checkpo"].contains(&comm.trim_end()) {
            ids.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    ids
}

/// CPU clock ticks (user + system) thread `id` used so far.
fn thread_ticks(id: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{id}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    num(11) + num(12) // utime, stime (fields 14 and 15 of stat)
}

/// Extreme sync and checkpoint intervals: `Duration::ZERO` is clamped (a
/// zero interval kept the flusher and the checkpointer spinning on a core
/// while the database was idle), and `Duration::MAX` (no tick at all)
/// neither panics a thread nor loses an `Eventual` commit across close
/// and reopen.
#[test]
fn extreme_sync_intervals_neither_spin_nor_lose_commits() {
    for every in [Duration::ZERO, Duration::MAX] {
        let vfs = MemVfs::new();
        let before = background_threads();
        let db = builder()
            .sync_interval(every)
            .checkpoint_interval(every)
            .durability(Durability::Eventual)
            .create_with_vfs(Arc::new(vfs.clone()), "s.sheaf")
            .unwrap();
        // Ours, and any another test opened meanwhile (idle ones cost
        // nothing measurable). A thread names itself once it runs.
        let started = std::time::Instant::now();
        let ours: Vec<String> = loop {
            let new: Vec<String> = (background_threads().into_iter())
                .filter(|id| !before.contains(id))
                .collect();
            if new.len() >= 2 {
                break new;
            }
            let waited = started.elapsed();
            assert!(
                waited < Duration::from_secs(5),
                "{every:?}: no flusher and checkpointer started"
            );
            thread::sleep(Duration::from_millis(1));
        };
        for k in 0..200 {
            put(&db, k, 100).unwrap();
        }
        let ticks = || ours.iter().map(|id| thread_ticks(id)).sum::<u64>();
        let start = ticks();
        thread::sleep(Duration::from_millis(500));
        let used = ticks() - start;
        // A spinning thread takes most of 50 ticks (100 per second).
        assert!(
            used < 15,
            "{every:?}: idle background threads used {used} ticks in 500 ms"
        );
        watchdog("close", move || db.close()).unwrap();
        let db = builder()
            .open_with_vfs(Arc::new(vfs.clone()), "s.sheaf")
            .unwrap();
        assert_eq!(keys(&db), (0..200).collect::<Vec<u64>>(), "{every:?}");
    }
}
