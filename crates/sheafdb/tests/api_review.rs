//! Findings of an adversarial review of the issue 14/16 API (savepoints,
//! backup, `insert_reserve`, ranges, `Send` transactions), each kept as a
//! test that failed (panicked, lost data or hung) before its fix.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sheafdb::storage::hook::{is_wal_file, FileOp, Hook, HookVfs};
use sheafdb::storage::mem::MemVfs;
use sheafdb::storage::{OpenMode, Vfs};
use sheafdb::{Database, Error, TableDefinition};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
const N: TableDefinition<u64, u64> = TableDefinition::new("n");

#[derive(Debug, Default)]
struct FailReads(AtomicBool);

impl Hook for FailReads {
    fn before(&self, name: &str, op: FileOp) -> io::Result<()> {
        if op == FileOp::Read && !is_wal_file(name) && self.0.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected read error"));
        }
        Ok(())
    }
}

/// A restore whose replay failed (a read error) could not be retried: the
/// record it kept was shorter than the savepoint's mark, and the retry hit
/// an always-on assertion.
#[test]
fn a_failed_restore_can_be_retried() {
    let mem = Arc::new(MemVfs::new());
    let builder = || {
        Database::builder()
            .cache_size_bytes(16 * 4096)
            .background_checkpoints(false)
    };
    {
        let db = builder().create_with_vfs(mem.clone(), "p.sheaf").unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(T).unwrap();
            for k in 0..20_000u64 {
                t.insert(k, [7u8; 100].as_slice()).unwrap();
            }
        }
        tx.commit().unwrap();
        db.close().unwrap();
    }
    let hook = Arc::new(FailReads::default());
    let vfs = Arc::new(HookVfs::new(mem, hook.clone()));
    let db = builder().open_with_vfs(vfs, "p.sheaf").unwrap();
    let mut tx = db.begin_write().unwrap();
    tx.open_table(T)
        .unwrap()
        .insert(5, b"a".as_slice())
        .unwrap();
    let sp = tx.savepoint().unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        for k in (0..20_000u64).step_by(97) {
            t.insert(k, b"b".as_slice()).unwrap();
        }
    }
    hook.0.store(true, Ordering::SeqCst);
    assert!(tx.restore_savepoint(&sp).is_err(), "the replay reads fail");
    hook.0.store(false, Ordering::SeqCst);
    assert!(matches!(
        tx.open_table(T).unwrap().insert(1, b"x".as_slice()),
        Err(Error::TransactionFailed(_))
    ));
    tx.restore_savepoint(&sp).unwrap();
    {
        let t = tx.open_table(T).unwrap();
        assert_eq!(t.get(5).unwrap().unwrap().value(), b"a");
        assert_eq!(t.get(97).unwrap().unwrap().value(), [7u8; 100].as_slice());
    }
    tx.commit().unwrap();
}

/// A backup removed whatever file was called `TARGET.backup-tmp` (its old
/// temporary name) and its WAL: here, the open source database itself.
#[test]
fn a_backup_never_removes_a_file_it_did_not_make() {
    let dir = tempfile::tempdir().unwrap();
    for src_name in ["data.backup-tmp", "data.backup-0.tmp"] {
        let src = dir.path().join(src_name);
        let db = Database::create(&src).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(N).unwrap();
            for k in 0..1000 {
                t.insert(k, k).unwrap();
            }
        }
        tx.commit().unwrap();
        let target = dir.path().join(format!("copy-of-{src_name}"));
        db.backup_to(&target).unwrap();
        db.close().unwrap();
        for path in [&src, &target] {
            let db = Database::open(path).unwrap();
            let n = db
                .begin_read()
                .unwrap()
                .open_table(N)
                .unwrap()
                .len()
                .unwrap();
            assert_eq!(n, 1000, "{}", path.display());
        }
    }
}

/// WAL files of the target's name (a database whose data file was
/// deleted) were taken as the backup's own: the backup did not open
/// (`WalMismatch`). Now the backup refuses, changing nothing.
#[test]
fn a_backup_refuses_a_target_with_stale_wal_files() {
    let vfs = Arc::new(MemVfs::new());
    {
        let old = Database::builder()
            .create_with_vfs(vfs.clone(), "data")
            .unwrap();
        let tx = old.begin_write().unwrap();
        tx.open_table(N).unwrap().insert(1, 111).unwrap();
        tx.commit().unwrap();
    }
    vfs.remove("data").unwrap();
    let src = Database::builder()
        .create_with_vfs(vfs.clone(), "src")
        .unwrap();
    let before = vfs.list().unwrap();
    let r = src.backup_to_vfs(vfs.clone(), "data", |_| {});
    assert!(
        matches!(r, Err(Error::InvalidArgument(ref m)) if m.contains("WAL")),
        "{r:?}"
    );
    assert_eq!(
        vfs.list().unwrap(),
        before,
        "nothing was created or removed"
    );
}

/// A failed backup leaves no temporary files.
#[test]
fn a_failed_backup_removes_its_temporary_files() {
    let src = Database::builder()
        .create_with_vfs(Arc::new(MemVfs::new()), "src")
        .unwrap();
    let tx = src.begin_write().unwrap();
    tx.open_table(N).unwrap().insert(1, 1).unwrap();
    tx.commit().unwrap();
    /// Refuses renames: the backup fails at its last step.
    #[derive(Debug)]
    struct NoRename(MemVfs);
    impl Vfs for NoRename {
        fn open(&self, n: &str, m: OpenMode) -> io::Result<Arc<dyn sheafdb::storage::Storage>> {
            self.0.open(n, m)
        }
        fn exists(&self, n: &str) -> io::Result<bool> {
            self.0.exists(n)
        }
        fn remove(&self, n: &str) -> io::Result<()> {
            self.0.remove(n)
        }
        fn list(&self) -> io::Result<Vec<String>> {
            self.0.list()
        }
        fn sync_dir(&self) -> io::Result<()> {
            self.0.sync_dir()
        }
        fn lock(&self, n: &str) -> io::Result<Box<dyn sheafdb::storage::LockGuard>> {
            self.0.lock(n)
        }
    }
    let dst = MemVfs::new();
    let r = src.backup_to_vfs(Arc::new(NoRename(dst.clone())), "b", |_| {});
    assert!(
        matches!(r, Err(Error::Io(ref e)) if e.kind() == io::ErrorKind::Unsupported),
        "{r:?}"
    );
    assert_eq!(
        dst.list().unwrap(),
        Vec::<String>::new(),
        "temporary files left"
    );
}

/// `insert_reserve(k, usize::MAX)` panicked allocating the buffer before
/// the length was checked.
#[test]
fn insert_reserve_of_an_impossible_length_is_an_error() {
    let db = Database::builder()
        .create_with_vfs(Arc::new(MemVfs::new()), "x")
        .unwrap();
    let tx = db.begin_write().unwrap();
    let mut t = tx.open_table(T).unwrap();
    for len in [usize::MAX, 1 << 45] {
        assert!(matches!(
            t.insert_reserve(1, len),
            Err(Error::ValueTooLarge { .. })
        ));
    }
}

/// A reserved value dropped by a panic was stored half-written; now it is
/// not stored and the transaction cannot commit.
#[test]
fn a_panic_while_writing_a_reserved_value_fails_the_transaction() {
    let db = Database::builder()
        .create_with_vfs(Arc::new(MemVfs::new()), "x")
        .unwrap();
    let tx = db.begin_write().unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut t = tx.open_table(T).unwrap();
        let mut v = t.insert_reserve(1, 8).unwrap();
        v[0] = 1;
        panic!("while writing");
    }));
    assert!(r.is_err());
    assert!(tx.open_table(T).unwrap().get(1).unwrap().is_none());
    assert!(matches!(tx.commit(), Err(Error::TransactionFailed(_))));
}

/// A write table's range kept walking the tree it started on after
/// another table's spill folded the base's buffered commits into every
/// tree: the buffered keys were skipped.
#[test]
fn an_open_range_sees_a_fold_caused_by_another_tables_spill() {
    const A: TableDefinition<u64, u64> = TableDefinition::new("a");
    let db = Database::builder()
        .txn_spill_bytes(4 << 20)
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(MemVfs::new()), "x")
        .unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut a = tx.open_table(A).unwrap();
        for k in 0..10 {
            a.insert(k * 2, 0).unwrap();
        }
        tx.open_table(T)
            .unwrap()
            .insert(0, b"x".as_slice())
            .unwrap();
    }
    tx.commit().unwrap();
    db.checkpoint().unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut a = tx.open_table(A).unwrap();
        for k in 0..10 {
            a.insert(k * 2 + 1, 1).unwrap(); // buffered: not in the tree
        }
    }
    tx.commit().unwrap();
    let tx = db.begin_write().unwrap();
    let a = tx.open_table(A).unwrap();
    let mut b = tx.open_table(T).unwrap();
    for back in [false, true] {
        let mut it = a.iter().unwrap();
        let first = if back { it.next_back() } else { it.next() };
        let mut seen = vec![first.unwrap().unwrap().0.value()];
        // Over 4 MiB into B, which has pages: B spills, folding the buffer.
        for k in 1..1300u64 {
            b.insert(k + u64::from(back) * 10_000, [1u8; 3500].as_slice())
                .unwrap();
        }
        if back {
            seen.extend(it.rev().map(|e| e.unwrap().0.value()));
            seen.reverse();
        } else {
            seen.extend(it.map(|e| e.unwrap().0.value()));
        }
        assert_eq!(seen, (0..20).collect::<Vec<u64>>(), "back {back}");
    }
}

/// A transaction moved to another thread: after its first use there, a
/// second `begin_write` of the CF from that thread is `WouldDeadlock`, not
/// a hang (its owner record followed only some calls before).
#[test]
fn a_moved_transaction_belongs_to_the_thread_that_uses_it() {
    let db = Arc::new(
        Database::builder()
            .create_with_vfs(Arc::new(MemVfs::new()), "x")
            .unwrap(),
    );
    for first_use in 0..3 {
        let tx = db.begin_write().unwrap();
        let db2 = db.clone();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = tx;
            match first_use {
                0 => drop(tx.list_tables()),
                1 => tx.set_durability(sheafdb::Durability::None),
                _ => drop(tx.durability()),
            }
            let r = db2.begin_write().map(drop);
            let _ = done_tx.send(matches!(r, Err(Error::WouldDeadlock(_))));
            drop(tx);
        });
        let ok = done_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("begin_write on the thread holding the transaction hung");
        assert!(ok, "case {first_use}: not WouldDeadlock");
    }
}
