//! Findings of the session-27 adversarial probe of the public API, each
//! reproduced as it was found and failing before its fix: a table that
//! outlived its database read another instance's pages; a database or
//! backup named like a WAL file was deleted by its neighbour's close;
//! `check_integrity` deadlocked with a thread holding two writers; calls
//! from inside its progress callback hung; a forgotten reserved value
//! vanished from a commit that reported success. Then the session-33
//! liveness probe's: a moved multi-CF transaction, `file_info`, a direct
//! commit and a close inside the integrity callback, `try_begin_write`
//! stalling before it said `WriterBusy`.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::watchdog;
use sheafdb::storage::mem::MemVfs;
use sheafdb::{Database, Error, TableDefinition};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
const B: TableDefinition<&[u8], &[u8]> = TableDefinition::new("b");

fn value(k: u64, len: usize) -> Vec<u8> {
    vec![(k % 251) as u8; len]
}

fn fill(db: &Database, n: u64, len: usize) -> sheafdb::Result<()> {
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 0..n {
            t.insert(k, value(k, len).as_slice())?;
        }
    }
    tx.commit()
}

fn mem_db() -> Arc<Database> {
    let db = Database::builder().create_with_vfs(Arc::new(MemVfs::new()), "h");
    Arc::new(db.expect("create"))
}

/// A table (and an iterator) that outlive their snapshot and database
/// keep the file locked: no other instance opens it and rewrites the pages
/// they read. Before, the reopen succeeded, deleted the table, wrote
/// another over its pages, and the old handle returned 2,988 wrong values
/// of 3,000 without an error.
#[test]
fn a_table_outliving_its_database_keeps_the_file_locked() -> sheafdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("a.sheaf");
    let db = Database::builder().cache_size_bytes(0).create(&path)?;
    fill(&db, 3000, 500)?;
    db.checkpoint()?;
    let rx = db.begin_read()?;
    let old = rx.open_table(T)?;
    let iter = rx.open_table(T)?.range(1000u64..)?;
    drop(rx);
    drop(db);
    match Database::builder().cache_size_bytes(0).open(&path) {
        Err(Error::DatabaseAlreadyOpen) => {}
        Err(e) => panic!("refused, but not as locked: {e}"),
        Ok(db2) => {
            // What the old handle then read: another instance's pages.
            let tx = db2.begin_write()?;
            tx.delete_table("t")?;
            tx.commit()?;
            let tx = db2.begin_write()?;
            {
                let mut b = tx.open_table(B)?;
                for k in 0..3000u64 {
                    b.insert(k.to_be_bytes().as_slice(), [0xEE; 500].as_slice())?;
                }
            }
            tx.commit()?;
            db2.checkpoint()?;
            panic!("a second instance opened the file while a table of the first read it");
        }
    }
    // The old handles still read their snapshot, all of it.
    let mut n = 0;
    for e in old.iter()? {
        let (k, v) = e?;
        assert_eq!(v.value(), value(k.value(), 500).as_slice());
        n += 1;
    }
    assert_eq!(n, 3000);
    assert_eq!(iter.count(), 2000);
    drop(old);
    // The last reader gone, the file opens again.
    let db = Database::open(&path)?;
    assert_eq!(db.begin_read()?.open_table(T)?.len()?, 3000);
    Ok(())
}

/// `create` and `backup_to` refuse a name of the shape of a WAL file
/// (`NAME-wal.N`). Before, two backups so named beside `d.sheaf` were
/// taken for its log's segments and the second deleted when `d.sheaf`
/// was reopened and closed.
#[test]
fn databases_and_backups_named_like_wal_files_are_refused() -> sheafdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let db = Database::create(dir.path().join("d.sheaf"))?;
    fill(&db, 10, 10)?;
    for name in [
        "d.sheaf-wal.5",
        "d.sheaf-wal.6",
        "other-wal.0",
        "x-wal.65535",
    ] {
        let target = dir.path().join(name);
        let e = db.backup_to(&target).expect_err(name);
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("WAL file")),
            "{name}: {e}"
        );
        assert!(!target.exists(), "{name} was left behind");
        let e = Database::create(&target).expect_err(name);
        assert!(matches!(e, Error::InvalidArgument(_)), "{name}: {e}");
        assert!(!target.exists(), "{name} was created");
    }
    // Names that only look similar are fine.
    for name in [
        "d.sheaf-wal",
        "d.sheaf-wal.x",
        "d.sheaf-wal.01",
        "d-wal.sheaf",
    ] {
        db.backup_to(dir.path().join(name))?;
        drop(Database::open(dir.path().join(name))?);
    }
    Ok(())
}

/// A database file that sits where a WAL segment of another would (made
/// outside the library: copied, renamed) makes that database's open fail
/// with a clear error; it is never taken for a free segment and deleted.
#[test]
fn a_database_file_named_like_a_wal_segment_is_never_deleted() -> sheafdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("d.sheaf");
    let db = Database::create(&path)?;
    fill(&db, 10, 10)?;
    db.backup_to(dir.path().join("copy.sheaf"))?;
    db.close()?;
    for n in [5, 6] {
        std::fs::copy(
            dir.path().join("copy.sheaf"),
            dir.path().join(format!("d.sheaf-wal.{n}")),
        )?;
    }
    for _ in 0..2 {
        let e = Database::open(&path).expect_err("open beside a database named like its WAL");
        assert!(
            matches!(&e, Error::WalMismatch(m) if m.contains("database file")),
            "{e}"
        );
    }
    for n in [5, 6] {
        let stray = dir.path().join(format!("d.sheaf-wal.{n}"));
        assert!(stray.exists(), "{} was deleted", stray.display());
        std::fs::rename(&stray, dir.path().join(format!("moved-{n}.sheaf")))?;
        drop(Database::open(dir.path().join(format!("moved-{n}.sheaf")))?);
    }
    let db = Database::open(&path)?;
    assert_eq!(db.begin_read()?.open_table(T)?.len()?, 10);
    Ok(())
}

/// A thread holding the writer of one CF begins a transaction on another
/// while `check_integrity` runs: both finish. Before, the check held the
/// second CF's writer while it waited for the first, and the thread waited
/// for the second: a deadlock (and every other writer of that CF behind).
#[test]
fn check_integrity_beside_a_thread_taking_two_writers_does_not_deadlock() {
    for _ in 0..5 {
        let db = mem_db();
        watchdog("two writers beside check_integrity", move || {
            let y = db.cf_or_create("y").expect("cf");
            let ty = y.begin_write().expect("y");
            let checker = {
                let db = db.clone();
                thread::spawn(move || db.check_integrity().map(drop))
            };
            thread::sleep(Duration::from_millis(100));
            let td = db.begin_write().expect("default");
            {
                let mut t = td.open_table(T).expect("t");
                t.insert(1, [1u8].as_slice()).expect("insert");
            }
            td.commit().expect("commit default");
            ty.commit().expect("commit y");
            checker.join().expect("checker").expect("check passes");
        });
    }
}

/// Calls that need a lock the integrity check holds return `WouldDeadlock`
/// from inside its progress callback (before: each hung).
#[test]
fn calls_from_inside_the_integrity_callback_do_not_hang() {
    type Call = fn(&Database) -> sheafdb::Result<()>;
    let calls: [(&str, Call); 7] = [
        ("checkpoint", |db| db.checkpoint()),
        ("create_cf", |db| db.create_cf("zz").map(drop)),
        ("cf_or_create", |db| db.cf_or_create("zz").map(drop)),
        ("compact", |db| db.compact().map(drop)),
        ("compact_step", |db| db.compact_step(1 << 20).map(drop)),
        ("fold_step", |db| db.fold_step().map(drop)),
        ("backup_to", |db| {
            let dir = tempfile::tempdir()?;
            db.backup_to(dir.path().join("b.sheaf")).map(drop)
        }),
    ];
    for (name, call) in calls {
        let db = mem_db();
        fill(&db, 100, 10).expect("fill");
        let (inner, report) = watchdog(name, move || {
            let mut inner = None;
            let report = db.check_integrity_with(&mut |_, _| {
                if inner.is_none() {
                    inner = Some(call(&db));
                }
            });
            // Usable again once the check is over.
            call(&db).unwrap_or_else(|e| panic!("{name} after the check: {e}"));
            (inner, report.map(drop))
        });
        assert!(
            matches!(inner, Some(Err(Error::WouldDeadlock(_)))),
            "{name}: {inner:?}"
        );
        report.unwrap_or_else(|e| panic!("{name}: the check itself failed: {e}"));
    }
}

/// A check of another CF run from inside a CF's integrity callback leaves
/// the outer callback marked as one: a checkpoint after it still returns
/// `WouldDeadlock`. Before, the inner check cleared the mark, and the
/// checkpoint waited for the writer the outer check held on this very
/// thread (it returned after about 4 s, once a fold gave up waiting;
/// found by a session-38 review).
#[test]
fn a_check_nested_in_a_check_callback_keeps_the_outer_one_marked() {
    let db = mem_db();
    fill(&db, 100, 10).expect("fill");
    let a = db.cf_or_create("a").expect("cf a");
    let b = db.cf_or_create("b").expect("cf b");
    for cf in [&a, &b] {
        let tx = cf.begin_write().expect("begin");
        tx.open_table(T)
            .expect("table")
            .insert(1, [1u8].as_slice())
            .expect("insert");
        tx.commit().expect("commit");
    }
    let (before, nested, after) = watchdog("nested check", move || {
        let mut seen = None;
        a.check_integrity_with(&mut |_, _| {
            if seen.is_none() {
                let before = db.checkpoint();
                let nested = b.check_integrity().map(drop);
                let started = std::time::Instant::now();
                let after = db.checkpoint();
                assert!(
                    started.elapsed() < Duration::from_secs(1),
                    "the checkpoint waited {:?}",
                    started.elapsed()
                );
                seen = Some((before, nested, after));
            }
        })
        .expect("the outer check");
        seen.expect("the callback ran")
    });
    assert!(matches!(before, Err(Error::WouldDeadlock(_))), "{before:?}");
    nested.expect("the nested check of another CF passes");
    assert!(matches!(after, Err(Error::WouldDeadlock(_))), "{after:?}");
}

/// In a transaction over several CFs, a forgotten table handle fails the
/// commit like in a one-CF transaction, and so does a forgotten reserved
/// value; nothing is committed and both writers are free again. The
/// multi-CF commit skipped the open-handle check before (an adversarial
/// probe's note): it committed with the handle still registered.
#[test]
fn a_multi_cf_commit_refuses_forgotten_handles_like_a_one_cf_commit() -> sheafdb::Result<()> {
    let db = mem_db();
    let (a, b) = (db.cf_or_create("a")?, db.cf_or_create("b")?);
    let tx = db.begin_write_cfs(&[&a, &b])?;
    tx.open_table(&a, T)?.insert(1, b"x".as_slice())?;
    let mut t = tx.open_table(&b, T)?;
    t.insert(2, b"y".as_slice())?;
    std::mem::forget(t);
    let e = tx.commit().expect_err("a commit with a table still open");
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("still open") && m.contains("\"t\"")),
        "{e:?}"
    );
    for cf in [&a, &b] {
        assert!(cf.begin_read()?.open_table(T).is_err(), "a write survived");
        drop(cf.begin_write()?);
    }

    let tx = db.begin_write_cfs(&[&a, &b])?;
    tx.open_table(&a, T)?.insert(1, b"x".as_slice())?;
    {
        let mut t = tx.open_table(&b, T)?;
        let mut r = t.insert_reserve(2, 4)?;
        r.copy_from_slice(b"abcd");
        std::mem::forget(r);
    }
    let e = tx
        .commit()
        .expect_err("a commit without the reserved value");
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("reserved")),
        "{e:?}"
    );
    for cf in [&a, &b] {
        assert!(cf.begin_read()?.open_table(T).is_err(), "a write survived");
    }
    // A well-behaved transaction over both commits afterwards.
    let tx = db.begin_write_cfs(&[&a, &b])?;
    tx.open_table(&a, T)?.insert(1, b"x".as_slice())?;
    tx.open_table(&b, T)?.insert(2, b"y".as_slice())?;
    tx.commit()?;
    assert_eq!(
        b.begin_read()?.open_table(T)?.get(2)?.expect("2").value(),
        b"y"
    );
    Ok(())
}

/// A reserved value forgotten (`mem::forget`) before it was stored makes
/// the commit fail; one stored commits. Before, the value was missing and
/// the commit reported success.
#[test]
fn a_forgotten_reserved_value_fails_the_commit() -> sheafdb::Result<()> {
    let db = mem_db();
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        let mut r = t.insert_reserve(1, 4)?;
        r.copy_from_slice(b"abcd");
        std::mem::forget(r);
    }
    let e = tx
        .commit()
        .expect_err("a commit without the reserved value");
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("reserved")),
        "{e}"
    );
    assert!(db.begin_read()?.open_table(T).is_err() || db.begin_read()?.open_table(T)?.is_empty()?);

    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        let mut r = t.insert_reserve(1, 4)?;
        r.copy_from_slice(b"abcd");
        r.finish()?;
        let mut r = t.insert_reserve(2, 2)?;
        r.copy_from_slice(b"ef");
        drop(r);
    }
    tx.commit()?;
    let t = db.begin_read()?.open_table(T)?;
    assert_eq!(t.get(1)?.expect("1").value(), b"abcd");
    assert_eq!(t.get(2)?.expect("2").value(), b"ef");
    Ok(())
}

/// A table handle forgotten (`mem::forget`) fails the commit with an
/// error that names the table. The message printed the lock guard's
/// internals (`RankedGuard { guard: {"t"}, _held: ... }`) before.
#[test]
fn a_forgotten_table_handle_fails_the_commit_naming_the_table() -> sheafdb::Result<()> {
    let db = mem_db();
    let tx = db.begin_write()?;
    let mut t = tx.open_table(T)?;
    t.insert(1, b"x".as_slice())?;
    std::mem::forget(t);
    let e = tx.commit().expect_err("a commit with a table still open");
    let Error::InvalidArgument(m) = &e else {
        panic!("{e:?}")
    };
    assert!(m.contains("still open") && m.contains('"'), "{m}");
    assert!(!m.contains("Guard") && !m.contains("rank"), "{m}");
    // Nothing was committed, and the writer is free again.
    assert!(db.begin_read()?.open_table(T).is_err());
    drop(db.begin_write()?);
    Ok(())
}

// Findings of the session-33 liveness probe (concurrency and misuse), each
// failing before its fix.

const U: TableDefinition<u64, u64> = TableDefinition::new("u");

/// A multi-CF transaction moved to another thread and used there through
/// one CF's part (`open_table`) makes that thread the owner of every part:
/// its `begin_write` on another of the CFs is `WouldDeadlock`. Before, only
/// the part used was claimed and the `begin_write` waited on its own
/// transaction forever.
#[test]
fn a_moved_multi_cf_transaction_claims_every_cf_for_its_new_thread() -> sheafdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let db = Database::create(dir.path().join("d.sheaf"))?;
    let (a, b) = (db.cf_or_create("a")?, db.cf_or_create("b")?);
    let a2 = a.clone();
    let tx = db.begin_write_cfs(&[&a, &b])?;
    let (r, tx) = watchdog(
        "begin_write beside a moved multi-CF transaction",
        move || {
            tx.open_table(&a, U).and_then(|mut t| t.insert(1, 1))?;
            Ok::<_, Error>((b.begin_write().map(drop), tx))
        },
    )?;
    assert!(matches!(r, Err(Error::WouldDeadlock(_))), "{r:?}");
    let mut tx = tx;
    let (r, tx) = watchdog("set_durability then begin_write", move || {
        tx.set_durability(sheafdb::Durability::None);
        (a2.begin_write().map(drop), tx)
    });
    assert!(matches!(r, Err(Error::WouldDeadlock(_))), "{r:?}");
    tx.commit()?;
    assert_eq!(
        db.cf("a")?
            .begin_read()?
            .open_table(U)?
            .get(1)?
            .map(|g| g.value()),
        Some(1)
    );
    Ok(())
}

/// `file_info` from inside an integrity check's progress callback is
/// refused (`WouldDeadlock`): the check holds the superblock state's lock
/// there. Before, it panicked on the lock order in debug builds and hung
/// in release builds.
#[test]
fn file_info_inside_the_integrity_callback_is_refused_not_a_hang() -> sheafdb::Result<()> {
    let db = mem_db();
    fill(&db, 10, 8)?;
    let inner = db.clone();
    let (report, info) = watchdog("file_info inside the callback", move || {
        let mut info = None;
        let report = inner.check_integrity_with(&mut |_, _| {
            if info.is_none() {
                info = Some(inner.file_info().map(drop));
            }
        });
        (report.map(drop), info)
    });
    report?;
    assert!(
        matches!(info, Some(Err(Error::WouldDeadlock(_)))),
        "{info:?}"
    );
    db.file_info()?;
    Ok(())
}

/// A commit too large for the WAL (a direct commit, which checkpoints)
/// from inside a CF's integrity callback is refused before anything is
/// installed, and the database stays usable. Before, it was refused after
/// its version was installed, which poisoned the database.
#[test]
fn a_direct_commit_refused_inside_the_callback_does_not_poison() -> sheafdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let db = Database::builder()
        .wal_record_max_bytes(64 << 10)
        .create(dir.path().join("d.sheaf"))?;
    let (a, b) = (db.cf_or_create("a")?, db.cf_or_create("b")?);
    let big = |cf: &sheafdb::ColumnFamily| -> sheafdb::Result<()> {
        let tx = cf.begin_write()?;
        {
            let mut t = tx.open_table(T)?;
            for k in 0..200u64 {
                t.insert(k, value(k, 1000).as_slice())?;
            }
        }
        tx.commit()
    };
    let mut inner = None;
    a.check_integrity_with(&mut |_, _| {
        if inner.is_none() {
            inner = Some(big(&b));
        }
    })?;
    assert!(
        matches!(inner, Some(Err(Error::WouldDeadlock(_)))),
        "{inner:?}"
    );
    assert!(
        b.begin_read()?.open_table(T).is_err(),
        "the refused commit left data"
    );
    big(&b)?;
    let tx = a.begin_write()?;
    tx.open_table(U)?.insert(2, 2)?;
    tx.commit()?;
    assert_eq!(b.begin_read()?.open_table(T)?.len()?, 200);
    Ok(())
}

/// A new database at `path` whose CF "a" holds `1 -> value` in table `U`,
/// committed with `Durability::None` (in the WAL buffer only).
fn one_unsynced_row(
    path: &std::path::Path,
    value: u64,
) -> sheafdb::Result<(Database, sheafdb::ColumnFamily)> {
    let db = Database::builder()
        .durability(sheafdb::Durability::None)
        .create(path)?;
    let a = db.cf_or_create("a")?;
    let tx = a.begin_write()?;
    tx.open_table(U)?.insert(1, value)?;
    tx.commit()?;
    Ok((db, a))
}

/// `close()` from inside a CF's integrity callback cannot checkpoint
/// (`WouldDeadlock`), but it makes every acknowledged commit durable in
/// the WAL first: a `None` commit survives the reopen. Before, the refused
/// checkpoint returned past the WAL sync and the commit was lost, with
/// `sync()` and `checkpoint()` then refused as closed. Dropping the
/// database there does the same. The reopen follows the last handle at
/// once, 100 times each way: until the check joined the background
/// threads the close had only signalled, a reopen could find the file
/// still locked by them on their way out (`DatabaseAlreadyOpen`, in most
/// runs of this loop, and once in a full `cargo test` under load).
#[test]
fn closing_inside_the_callback_keeps_acknowledged_commits() -> sheafdb::Result<()> {
    for close in [true, false].repeat(100) {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("d.sheaf");
        let (db, a) = one_unsynced_row(&path, 1)?;
        let mut slot = Some(db);
        let mut closed = None;
        a.check_integrity_with(&mut |_, _| {
            if let Some(db) = slot.take() {
                match close {
                    true => closed = Some(db.close()),
                    false => drop(db),
                }
            }
        })?;
        if close {
            assert!(
                matches!(closed, Some(Err(Error::WouldDeadlock(_)))),
                "{closed:?}"
            );
        }
        drop(a);
        let db = watchdog("reopen", move || Database::open(&path))?;
        let got = db.cf("a")?.begin_read()?.open_table(U)?.get(1)?;
        assert_eq!(
            got.map(|g| g.value()),
            Some(1),
            "close={close}: commit lost"
        );
    }
    Ok(())
}

/// A callback that drops the database and then panics: the check unwinds,
/// and the background threads the drop signalled are joined on the way
/// out as well, so the file reopens at once with the commit (100 times;
/// a join only after a normal return left them holding the file's lock).
#[test]
fn a_callback_that_closes_then_panics_leaves_the_file_free() -> sheafdb::Result<()> {
    for round in 0..100u64 {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("d.sheaf");
        let (db, a) = one_unsynced_row(&path, round)?;
        let mut slot = Some(db);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            a.check_integrity_with(&mut |_, _| {
                if let Some(db) = slot.take() {
                    drop(db);
                    panic!("the callback fails after closing");
                }
            })
        }));
        assert!(unwound.is_err(), "the panic reached the caller");
        drop(a);
        let db = watchdog("reopen", move || Database::open(&path))?;
        let got = db.cf("a")?.begin_read()?.open_table(U)?.get(1)?;
        assert_eq!(got.map(|g| g.value()), Some(round), "round {round}");
    }
    Ok(())
}

/// `try_begin_write` on a CF whose writer is busy returns `WriterBusy`
/// without the stall a `begin_write` makes at the buffers' stall mark
/// (which folds other CFs' buffers first). Before, it folded a 24 MiB
/// buffer of another CF and only then said `WriterBusy`.
#[test]
fn try_begin_write_on_a_busy_writer_does_not_stall_first() -> sheafdb::Result<()> {
    let db = Database::builder()
        .buffer_memory(8 << 20, 32 << 20)
        .buffer_fold_bytes(1 << 40)
        .background_checkpoints(false)
        .durability(sheafdb::Durability::None)
        .create_with_vfs(Arc::new(MemVfs::new()), "s")?;
    let (a, b) = (db.cf_or_create("a")?, db.cf_or_create("b")?);
    let holder = a.begin_write()?;
    let mut k = 0u64;
    while db.memory_stats().buffered_bytes < 24 << 20 {
        let tx = b.begin_write()?;
        {
            let mut t = tx.open_table(T)?;
            for _ in 0..200 {
                k = k
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                t.insert(k % 2_000_000, [7u8; 64].as_slice())?;
            }
        }
        tx.commit()?;
    }
    let before = db.memory_stats();
    let a2 = a.clone();
    let r = watchdog("try_begin_write", move || a2.try_begin_write().map(drop));
    assert!(matches!(r, Err(Error::WriterBusy(_))), "{r:?}");
    let after = db.memory_stats();
    assert_eq!(after.buffer_stalls, before.buffer_stalls, "it stalled");
    assert_eq!(after.buffered_bytes, before.buffered_bytes, "it folded");
    drop(holder);
    // With the writer free, it begins (stalling like begin_write).
    drop(a.try_begin_write()?);
    Ok(())
}

/// A backup whose progress callback panics leaves no temporary files (a
/// note of the same probe: they were removed on an error only), and a
/// backup under the same name works afterwards.
#[test]
fn a_panicking_backup_callback_leaves_no_temporary_files() -> sheafdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let db = Database::create(dir.path().join("d.sheaf"))?;
    fill(&db, 200, 100)?;
    let target = dir.path().join("b.sheaf");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        db.backup_to_with(&target, |_| panic!("the callback's own panic"))
    }));
    assert!(panicked.is_err(), "the callback never ran");
    let left: Vec<String> = std::fs::read_dir(dir.path())?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    assert!(
        left.iter().all(|f| !f.starts_with("b.sheaf")),
        "left behind: {left:?}"
    );
    db.backup_to(&target)?;
    let copy = Database::open(&target)?;
    assert_eq!(copy.begin_read()?.open_table(T)?.len()?, 200);
    Ok(())
}
