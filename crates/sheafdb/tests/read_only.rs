//! Read-only open (issues 15 and 16): a shared lock, no write to the data
//! file or the WAL, WAL records replayed in memory only, every write API
//! refused with `Error::ReadOnly`.

mod common;

use std::sync::Arc;

use common::{builder, files_of};
use sheafdb::storage::sim::{CrashPolicy, SimVfs};
use sheafdb::{Database, Durability, Error, Result, TableDefinition};

const T: TableDefinition<u64, &str> = TableDefinition::new("t");
const LATER: TableDefinition<&str, u64> = TableDefinition::new("later");

fn read_only(vfs: &SimVfs) -> Result<Database> {
    builder()
        .read_only(true)
        .open_with_vfs(Arc::new(vfs.clone()), "r.sheaf")
}

/// A database whose WAL holds commits past its last checkpoint: buffered
/// puts and removals, a table created after the checkpoint, a second CF
/// created and written after it. The process "crashes" (nothing more is
/// written), so a reopen has records to replay.
fn crashed_with_a_log() -> SimVfs {
    let vfs = SimVfs::new();
    let db = builder()
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), "r.sheaf")
        .unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        for k in 0..100u64 {
            t.insert(k, "checkpointed").unwrap();
        }
    }
    tx.commit().unwrap();
    db.checkpoint().unwrap();
    for k in 50..150u64 {
        let tx = db.begin_write().unwrap();
        tx.open_table(T).unwrap().insert(k, "logged").unwrap();
        tx.commit().unwrap();
    }
    let tx = db.begin_write().unwrap();
    tx.open_table(T).unwrap().remove(7).unwrap();
    tx.open_table(LATER).unwrap().insert("x", 42).unwrap();
    tx.commit().unwrap();
    let cf = db.cf_or_create("other").unwrap();
    let mut tx = cf.begin_write().unwrap();
    tx.set_durability(Durability::Immediate);
    tx.open_table(LATER).unwrap().insert("y", 7).unwrap();
    tx.commit().unwrap();
    let crashed = vfs.crash_with(1, CrashPolicy::KeepAll);
    drop(cf);
    std::mem::forget(db); // no close: the log keeps its records
    crashed
}

fn check_contents(db: &Database) -> Result<()> {
    let rx = db.begin_read()?;
    let t = rx.open_table(T)?;
    assert_eq!(t.len()?, 149);
    assert!(t.get(7)?.is_none());
    assert_eq!(t.get(10)?.unwrap().value(), "checkpointed");
    assert_eq!(t.get(120)?.unwrap().value(), "logged");
    let keys: Vec<u64> = t.range(140..)?.map(|e| e.unwrap().0.value()).collect();
    assert_eq!(keys, (140..150).collect::<Vec<_>>());
    assert_eq!(rx.open_table(LATER)?.get("x")?.unwrap().value(), 42);
    let other = db.cf("other")?;
    let orx = other.begin_read()?;
    assert_eq!(orx.open_table(LATER)?.get("y")?.unwrap().value(), 7);
    Ok(())
}

#[test]
fn a_read_only_open_replays_in_memory_and_writes_nothing() -> Result<()> {
    let vfs = crashed_with_a_log();
    let before = files_of(&vfs);
    let db = read_only(&vfs)?;
    assert!(db.is_read_only());
    assert!(
        db.replayed_records() > 100,
        "{} records",
        db.replayed_records()
    );
    check_contents(&db)?;
    let report = db.check_integrity()?;
    assert_eq!(report.entries, 151);
    let ops = vfs.op_count();
    drop(db);
    assert_eq!(files_of(&vfs), before, "a read-only open changed the files");
    assert_eq!(vfs.op_count(), ops, "closing a read-only database did I/O");
    // A read-write open afterwards replays the same records and sees the
    // same state.
    let db = builder().open_with_vfs(Arc::new(vfs.clone()), "r.sheaf")?;
    assert!(db.replayed_records() > 100);
    check_contents(&db)?;
    Ok(())
}

#[test]
fn every_write_is_refused_with_read_only() -> Result<()> {
    let vfs = crashed_with_a_log();
    let before = files_of(&vfs);
    let db = read_only(&vfs)?;
    let ro = |r: Result<()>, what: &str| match r {
        Err(Error::ReadOnly) => {}
        other => panic!("{what}: {other:?}"),
    };
    ro(db.begin_write().map(drop), "begin_write");
    ro(db.try_begin_write().map(drop), "try_begin_write");
    let other = db.cf("other")?;
    let default = db.default_cf()?;
    ro(other.begin_write().map(drop), "cf begin_write");
    ro(
        db.begin_write_cfs(&[&default, &other]).map(drop),
        "begin_write_cfs",
    );
    ro(db.create_cf("new").map(drop), "create_cf");
    ro(db.cf_or_create("new").map(drop), "cf_or_create of a new CF");
    ro(db.drop_cf("other").map(drop), "drop_cf");
    ro(db.checkpoint(), "checkpoint");
    ro(db.sync(), "sync");
    // Existing CFs still open through cf_or_create, and reads go on.
    assert_eq!(db.cf_or_create("other")?.name(), "other");
    check_contents(&db)?;
    db.close()?;
    assert_eq!(files_of(&vfs), before, "refused writes changed the files");
    Ok(())
}

#[test]
fn readers_share_the_file_and_a_writer_excludes_them() -> Result<()> {
    let vfs = crashed_with_a_log();
    let a = read_only(&vfs)?;
    let b = read_only(&vfs)?;
    check_contents(&b)?;
    let rw = builder().open_with_vfs(Arc::new(vfs.clone()), "r.sheaf");
    assert!(
        matches!(rw, Err(Error::DatabaseAlreadyOpen)),
        "a writer opened beside readers: {rw:?}"
    );
    drop((a, b));
    let rw = builder().open_with_vfs(Arc::new(vfs.clone()), "r.sheaf")?;
    let ro = read_only(&vfs);
    assert!(
        matches!(ro, Err(Error::DatabaseAlreadyOpen)),
        "a reader opened beside a writer: {ro:?}"
    );
    drop(rw);
    read_only(&vfs)?;
    Ok(())
}

#[test]
fn read_only_never_creates() {
    let vfs = SimVfs::new();
    let r = builder()
        .read_only(true)
        .create_with_vfs(Arc::new(vfs.clone()), "r.sheaf");
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    let r = read_only(&vfs);
    assert!(r.is_err(), "a read-only open of nothing succeeded");
    assert!(vfs.file_names().is_empty(), "{:?}", vfs.file_names());
}

/// On real files too: the read-only open holds a shared `flock`, and the
/// files' bytes are unchanged after it.
#[test]
fn read_only_on_real_files() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.sheaf");
    let db = Database::create(&path)?;
    let tx = db.begin_write()?;
    tx.open_table(T)?.insert(1, "one")?;
    tx.commit()?;
    db.close()?;
    let snapshot = |dir: &std::path::Path| -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = snapshot(dir.path());
    let a = Database::open_read_only(&path)?;
    let b = Database::open_read_only(&path)?;
    assert_eq!(
        b.begin_read()?.open_table(T)?.get(1)?.unwrap().value(),
        "one"
    );
    assert!(matches!(
        Database::open(&path),
        Err(Error::DatabaseAlreadyOpen)
    ));
    assert!(matches!(a.begin_write(), Err(Error::ReadOnly)));
    drop((a, b));
    assert_eq!(snapshot(dir.path()), before);
    Database::open(&path)?.close()?;
    Ok(())
}
