//! Issue 9 points 7 and 8: files that do not belong together, truncated
//! files and files that are not databases. Each case gets a clear error at
//! open (or create), and a refused open changes no file.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{builder, files_of};
use sheafdb::storage::sim::{CrashPolicy, Fault, SimVfs};
use sheafdb::storage::Vfs;
use sheafdb::testing::{CfId, Superblock, SLOT_LEN};
use sheafdb::{Database, Error, TableDefinition};

const T: TableDefinition<u64, u64> = TableDefinition::new("t");
const NAME: &str = "d.sheaf";

fn open(vfs: &SimVfs) -> sheafdb::Result<Database> {
    builder()
        .background_checkpoints(false)
        .open_with_vfs(Arc::new(vfs.clone()), NAME)
}

fn create(vfs: &SimVfs) -> sheafdb::Result<Database> {
    builder()
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), NAME)
}

fn put(db: &Database, from: u64, n: u64) {
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        for k in from..from + n {
            t.insert(k, k).unwrap();
        }
    }
    tx.commit().unwrap();
}

fn count(db: &Database) -> u64 {
    db.begin_read()
        .unwrap()
        .open_table(T)
        .unwrap()
        .len()
        .unwrap()
}

fn wal_names(vfs: &SimVfs) -> Vec<String> {
    vfs.file_names()
        .into_iter()
        .filter(|n| n.starts_with("d.sheaf-wal."))
        .collect()
}

/// A database with records in its WAL (not checkpointed) and one segment.
fn with_wal(rows: u64) -> SimVfs {
    let vfs = SimVfs::new();
    let db = create(&vfs).unwrap();
    put(&db, 0, rows);
    // Leave the commits in the WAL: a process crash keeps them.
    let image = vfs.process_crash();
    drop(db);
    image
}

#[test]
fn a_wal_copied_from_another_database_is_refused_and_nothing_changes() {
    let a = with_wal(50);
    let b = with_wal(70);
    // b's WAL beside a's data file.
    for name in wal_names(&a) {
        a.set_file_bytes(&name, vec![0u8; 0]);
    }
    for name in wal_names(&b) {
        a.set_file_bytes(&name, b.file_bytes(&name).unwrap());
    }
    let before = files_of(&a);
    let err = open(&a).unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    assert!(err.to_string().contains("belongs to database"), "{err}");
    assert_eq!(files_of(&a), before, "a refused open changed a file");
    // create() on it refuses the same way.
    let err = create(&a).unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    assert_eq!(files_of(&a), before);
}

#[test]
fn a_new_database_never_adopts_a_wal_left_behind() {
    let vfs = with_wal(40);
    let wal_before: BTreeMap<_, _> = files_of(&vfs)
        .into_iter()
        .filter(|(n, _)| n.contains("-wal."))
        .collect();
    assert!(!wal_before.is_empty());
    vfs.remove(NAME).unwrap();
    vfs.sync_dir().unwrap();
    let err = create(&vfs).unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    let after = files_of(&vfs);
    assert!(!after.contains_key(NAME), "create left a data file behind");
    for (n, b) in &wal_before {
        assert_eq!(after.get(n), Some(b), "{n} changed");
    }
}

const BIG: TableDefinition<u64, &[u8]> = TableDefinition::new("big");

/// Copies the data file after one checkpoint, goes on with `rounds` of
/// checkpoints and commits, then puts the old copy back beside the WAL.
fn stale_beside_newer_wal(rounds: u64, value_bytes: usize) -> SimVfs {
    let vfs = SimVfs::new();
    let db = create(&vfs).unwrap();
    put(&db, 0, 10);
    db.checkpoint().unwrap();
    let stale = vfs.file_bytes(NAME).unwrap();
    for round in 0..rounds {
        db.checkpoint().unwrap();
        for i in 0..40 {
            let tx = db.begin_write().unwrap();
            tx.open_table(BIG)
                .unwrap()
                .insert(round * 100 + i, vec![1u8; value_bytes].as_slice())
                .unwrap();
            tx.commit().unwrap();
        }
    }
    let image = vfs.process_crash();
    drop(db);
    image.set_file_bytes(NAME, stale);
    image
}

#[test]
fn a_stale_data_file_beside_a_newer_wal_is_refused() {
    // Segments begun under later checkpoints: the WAL is newer than the
    // data file, and its records since the copy may be recycled.
    let image = stale_beside_newer_wal(6, 3000);
    let before = files_of(&image);
    let err = open(&image).unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    assert!(err.to_string().contains("older than its WAL"), "{err}");
    assert!(!err.is_missing_wal(), "{err}");
    assert_eq!(files_of(&image), before);
}

#[test]
fn a_stale_data_file_whose_log_is_all_there_recovers_every_commit() {
    // Everything since the copy is still in one WAL use begun before it:
    // base plus log is exactly the newer state.
    let image = stale_beside_newer_wal(3, 20);
    let db = open(&image).unwrap();
    assert_eq!(count(&db), 10);
    let rx = db.begin_read().unwrap();
    assert_eq!(rx.open_table(BIG).unwrap().len().unwrap(), 120);
    drop(rx);
    db.check_integrity().unwrap();
}

#[test]
fn truncated_data_files_are_corrupted_at_open() {
    let vfs = SimVfs::new();
    let db = create(&vfs).unwrap();
    put(&db, 0, 3000);
    db.close().unwrap();
    let full = vfs.file_bytes(NAME).unwrap();
    assert!(full.len() > 20 * 4096);
    let len = full.len();
    for cut in [len / 2, len * 9 / 10, len - 4096 - 100, len - 1] {
        let v = SimVfs::new();
        v.set_file_bytes(NAME, full[..cut].to_vec());
        match open(&v) {
            Err(e) => assert!(e.is_corrupted(), "cut {cut}: {e}"),
            // Only a cut inside space no checkpoint wrote may open.
            Ok(db) => {
                assert_eq!(count(&db), 3000, "cut {cut}: opened with rows missing");
                db.check_integrity().unwrap();
            }
        }
    }
    // Cut to half is always inside written pages.
    let v = SimVfs::new();
    v.set_file_bytes(NAME, full[..len / 2].to_vec());
    let err = open(&v).unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[test]
fn files_that_are_not_databases_get_not_a_database() {
    let mut sqlite = b"SQLite format 3\0".to_vec();
    sqlite.resize(8192, 0x11);
    let random: Vec<u8> = (0..20_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("sqlite", sqlite),
        ("random", random),
        ("text", b"hello, this is a text file\n".to_vec()),
        ("zeros 4 KiB", vec![0u8; 4096]),
        ("zeros 64 KiB", vec![0u8; 65536]),
    ];
    for (what, bytes) in cases {
        let v = SimVfs::new();
        v.set_file_bytes(NAME, bytes.clone());
        let err = open(&v).unwrap_err();
        assert!(
            matches!(err, Error::NotADatabase(_)),
            "{what}: open gave {err}"
        );
        let err = create(&v).unwrap_err();
        assert!(
            matches!(err, Error::NotADatabase(_)),
            "{what}: create gave {err}"
        );
        assert_eq!(v.file_bytes(NAME).unwrap(), bytes, "{what}: file changed");
        assert!(wal_names(&v).is_empty(), "{what}: a WAL was created");
    }
}

#[test]
fn a_damaged_sheafdb_file_stays_corrupted_not_foreign() {
    let vfs = SimVfs::new();
    create(&vfs).unwrap().close().unwrap();
    let mut b = vfs.file_bytes(NAME).unwrap();
    // Damage both slots' checksummed bodies, keep their magic.
    b[20] ^= 0xFF;
    b[4096 + 20] ^= 0xFF;
    vfs.set_file_bytes(NAME, b);
    let err = open(&vfs).unwrap_err();
    assert!(err.is_corrupted(), "{err}");
}

#[test]
fn a_crafted_superblock_cannot_make_open_allocate_the_moon() {
    let vfs = SimVfs::new();
    create(&vfs).unwrap().close().unwrap();
    let mut b = vfs.file_bytes(NAME).unwrap();
    for slot in [0usize, 4096] {
        let s = &mut b[slot..slot + SLOT_LEN];
        if Superblock::decode(s, 0).ok().flatten().is_none() {
            continue;
        }
        // meta_npages = u32::MAX, written_pages = huge, crc fixed up.
        s[48..52].copy_from_slice(&u32::MAX.to_le_bytes());
        s[56..64].copy_from_slice(&u64::MAX.to_le_bytes());
        s[88..96].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
        let crc = crc32c::crc32c(&s[..508]);
        s[508..512].copy_from_slice(&crc.to_le_bytes());
    }
    vfs.set_file_bytes(NAME, b);
    let err = open(&vfs).unwrap_err();
    assert!(err.is_corrupted(), "{err}");
}

#[test]
fn a_crash_anywhere_inside_create_leaves_a_file_create_accepts() {
    let mut crashed_inside = 0;
    for n in 1..200u64 {
        let vfs = SimVfs::new();
        vfs.fail_from(n, Fault::Eio);
        let done = create(&vfs).is_ok();
        for policy in [
            CrashPolicy::DropAll,
            CrashPolicy::KeepAll,
            CrashPolicy::Random,
        ] {
            let image = vfs.crash_with(n, policy);
            // open: a database, or a clear "not a database".
            match open(&image) {
                Ok(db) => db.check_integrity().map(drop).unwrap(),
                Err(Error::NotADatabase(_)) => {}
                Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => panic!("n {n} {policy:?}: open gave {e}"),
            }
            let db = create(&image).unwrap_or_else(|e| panic!("n {n} {policy:?}: create gave {e}"));
            put(&db, 0, 5);
            assert_eq!(count(&db), 5);
            db.check_integrity().unwrap();
        }
        if done {
            break;
        }
        crashed_inside += 1;
    }
    assert!(crashed_inside > 5, "create never failed part-way");
}

/// A checksum-valid superblock whose "next CF id" is below ids the file
/// already uses must not make `create_cf` hand out one of them again (the
/// registry raises its next id past every CF it registers). Before, the
/// new CF got the default CF's id and replaced it in the registry.
#[test]
fn a_superblock_with_a_low_next_cf_id_does_not_reuse_ids() {
    let vfs = SimVfs::new();
    {
        let db = create(&vfs).unwrap();
        put(&db, 0, 10);
        db.create_cf("a").unwrap();
        db.checkpoint().unwrap();
        db.close().unwrap();
    }
    let mut b = vfs.file_bytes(NAME).unwrap();
    let mut patched = 0;
    for slot in [0usize, 1] {
        let at = slot * 4096;
        let s = &mut b[at..at + SLOT_LEN];
        let Ok(Some(mut sb)) = Superblock::decode(s, slot as u8) else {
            continue;
        };
        sb.next_cf = CfId(1);
        s.copy_from_slice(&sb.encode());
        patched += 1;
    }
    assert!(patched > 0, "no superblock to patch");
    vfs.set_file_bytes(NAME, b);
    let db = open(&vfs).unwrap();
    db.create_cf("b").unwrap();
    assert_eq!(count(&db), 10, "the default CF lost its rows");
    assert_eq!(db.list_cfs().unwrap(), ["a", "b", "default"]);
    db.close().unwrap();
    let db = open(&vfs).unwrap();
    assert_eq!(count(&db), 10);
    assert_eq!(db.list_cfs().unwrap(), ["a", "b", "default"]);
}

/// A bit flipped in the newest superblock slot, with WAL segments begun
/// after that checkpoint: the other slot is older than the log, so open
/// must refuse. It used to call that `WalMismatch` ("the data file is
/// older than its WAL"), sending the user after a copy that never
/// happened; now it is `Corrupted`, naming the damaged superblock, and
/// nothing changes. Damage in the older slot opens normally.
#[test]
fn a_damaged_newest_superblock_is_reported_as_corruption_not_a_stale_copy() {
    let vfs = SimVfs::new();
    let db = create(&vfs).unwrap();
    put(&db, 0, 10);
    db.checkpoint().unwrap();
    // The slots after this checkpoint: both hold it (rule O12).
    let stale = vfs.process_crash().file_bytes(NAME).unwrap();
    put(&db, 10, 5);
    db.checkpoint().unwrap();
    // Past the first segment files: uses begun at the newest generation.
    for i in 0..400u64 {
        let tx = db.begin_write().unwrap();
        tx.open_table(BIG)
            .unwrap()
            .insert(i, vec![2u8; 3000].as_slice())
            .unwrap();
        tx.commit().unwrap();
    }
    let image = vfs.process_crash();
    drop(db);
    let page_size = 4096;
    // Either slot damaged alone: the other holds an equal copy.
    for slot_at in [0usize, page_size] {
        let copy = image.process_crash();
        let mut bytes = copy.file_bytes(NAME).unwrap();
        bytes[slot_at + 40] ^= 0x10;
        copy.set_file_bytes(NAME, bytes);
        let db = open(&copy).unwrap();
        assert_eq!(count(&db), 15, "a damaged slot lost rows");
        assert_eq!(count_big(&db), 400, "a damaged slot lost the WAL's commits");
    }
    // The other slot older (as between a checkpoint's two slot writes,
    // or restored by hand) and the newest damaged: refused, unchanged.
    for (stale_at, damaged_at) in [(0usize, page_size), (page_size, 0)] {
        let copy = image.process_crash();
        let mut bytes = copy.file_bytes(NAME).unwrap();
        bytes[stale_at..stale_at + SLOT_LEN].copy_from_slice(&stale[stale_at..stale_at + SLOT_LEN]);
        bytes[damaged_at + 40] ^= 0x10;
        copy.set_file_bytes(NAME, bytes);
        let before = files_of(&copy);
        let err = open(&copy).map(|_| ()).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        assert!(
            err.to_string().contains("superblock slot is damaged"),
            "{err}"
        );
        assert_eq!(files_of(&copy), before, "a refused open changed a file");
    }
}

fn count_big(db: &Database) -> u64 {
    db.begin_read()
        .unwrap()
        .open_table(BIG)
        .unwrap()
        .len()
        .unwrap()
}

/// Found by an adversarial probe: after a clean close (which leaves no
/// WAL), damage to the newest superblock slot made open fall back to the
/// older slot, whose base named pages the last checkpoints had reused:
/// it opened, without an error, a state that never existed (some rows of
/// the last commits, not others). Every checkpoint now copies its
/// superblock into both slots (rule O12), so the fallback is the same base.
#[test]
fn a_damaged_slot_after_a_clean_close_falls_back_to_an_equal_copy() {
    for damaged_at in [0usize, 4096] {
        let vfs = SimVfs::new();
        let db = create(&vfs).unwrap();
        for round in 0..6u64 {
            // Each round rewrites the same keys: later checkpoints reuse
            // the pages earlier bases named.
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(T).unwrap();
                for k in 0..2000u64 {
                    t.insert(k, k * 10 + round).unwrap();
                }
            }
            tx.commit().unwrap();
            db.checkpoint().unwrap();
        }
        db.close().unwrap();
        let mut bytes = vfs.file_bytes(NAME).unwrap();
        bytes[damaged_at + 40] ^= 0x10;
        vfs.set_file_bytes(NAME, bytes);
        let db = open(&vfs).unwrap();
        let rx = db.begin_read().unwrap();
        let t = rx.open_table(T).unwrap();
        assert_eq!(t.len().unwrap(), 2000);
        for k in 0..2000u64 {
            assert_eq!(
                t.get(k).unwrap().map(|v| v.value()),
                Some(k * 10 + 5),
                "key {k}"
            );
        }
        drop(t);
        drop(rx);
        db.check_integrity().unwrap();
    }
}

/// Found by an adversarial probe: a directory under a WAL segment's name
/// passed for a missing segment (open dropped the commits the segment
/// held). It is an I/O error now, and nothing changes.
#[test]
fn a_directory_in_place_of_a_wal_segment_fails_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.sheaf");
    let db = builder()
        .background_checkpoints(false)
        .create(&path)
        .unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_table(T).unwrap().insert(1, 1).unwrap();
    tx.commit().unwrap();
    db.close().unwrap();
    let seg = dir.path().join("d.sheaf-wal.0");
    if seg.exists() {
        std::fs::remove_file(&seg).unwrap();
    }
    std::fs::create_dir(&seg).unwrap();
    let err = builder()
        .background_checkpoints(false)
        .open(&path)
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, Error::Io(_)), "{err}");
    let err = Database::open_read_only(&path).map(|_| ()).unwrap_err();
    assert!(matches!(err, Error::Io(_)), "{err}");
    assert!(seg.is_dir(), "a refused open changed the directory");
}

/// Deletes every WAL segment file of `NAME`.
fn delete_wal(vfs: &SimVfs) {
    for f in wal_names(vfs) {
        Vfs::remove(vfs, &f).unwrap();
    }
    assert!(wal_names(vfs).is_empty());
}

/// Rule O13: 10 rows checkpointed, 40 more only in the WAL, then a crash
/// and the WAL deleted by hand. Before the WAL mark this opened with 10
/// rows and no error (the 40 acknowledged commits silently gone).
#[test]
fn a_wal_deleted_after_a_crash_is_refused_and_nothing_changes() {
    let vfs = SimVfs::new();
    let db = create(&vfs).unwrap();
    put(&db, 0, 10);
    db.checkpoint().unwrap();
    for k in 10..50 {
        put(&db, k, 1);
    }
    let image = vfs.process_crash();
    drop(db);
    delete_wal(&image);
    let before = files_of(&image);
    let err = open(&image).map(drop).unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    assert!(err.to_string().contains("accept_missing_wal"), "{err}");
    assert!(err.is_missing_wal(), "{err}");
    let ro = builder()
        .read_only(true)
        .open_with_vfs(Arc::new(image.clone()), NAME);
    assert!(matches!(ro, Err(Error::WalMismatch(_))), "read-only open");
    assert_eq!(files_of(&image), before, "a refused open changed a file");
    // Asked for, the open goes on as of the last checkpoint; from then on
    // the database has a WAL again and a crash loses nothing.
    let db = builder()
        .background_checkpoints(false)
        .accept_missing_wal(true)
        .open_with_vfs(Arc::new(image.clone()), NAME)
        .unwrap();
    assert_eq!(count(&db), 10);
    put(&db, 100, 5);
    let again = image.process_crash();
    drop(db);
    let db = open(&again).unwrap();
    assert_eq!(count(&db), 15);
    db.check_integrity().unwrap();
}

/// A data file copied alone while its database runs (the usual backup
/// mistake) is refused, not opened without the commits its WAL held.
#[test]
fn a_data_file_copied_without_its_wal_while_open_is_refused() {
    let vfs = SimVfs::new();
    let db = create(&vfs).unwrap();
    put(&db, 0, 10);
    db.checkpoint().unwrap();
    put(&db, 10, 10);
    let copy = SimVfs::new();
    copy.set_file_bytes(NAME, vfs.file_bytes(NAME).unwrap());
    let err = open(&copy).map(drop).unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    assert_eq!(count(&db), 20, "the source is untouched");
}

/// A cleanly closed database needs no WAL: deleting it (or copying the
/// data file alone) loses nothing, and the next open makes a new one.
#[test]
fn a_cleanly_closed_database_opens_without_its_wal() {
    let vfs = SimVfs::new();
    let db = create(&vfs).unwrap();
    put(&db, 0, 30);
    db.close().unwrap();
    delete_wal(&vfs);
    let db = open(&vfs).unwrap();
    assert_eq!(count(&db), 30);
    assert!(
        !wal_names(&vfs).is_empty(),
        "a read-write open made no WAL file"
    );
    put(&db, 30, 3);
    let image = vfs.process_crash();
    drop(db);
    delete_wal(&image);
    // Open again: the base requires its WAL once more.
    let err = open(&image).map(drop).unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
}

/// A database whose open WAL file is past the first size, every record
/// checkpointed: the next checkpoint (idle) or compaction gives files back.
fn with_large_idle_wal(vfs: &SimVfs) -> Database {
    let db = builder()
        .background_checkpoints(false)
        .wal_first_segment_bytes(32 * 1024)
        .create_with_vfs(Arc::new(vfs.clone()), NAME)
        .unwrap();
    for k in 0..40 {
        let tx = db.begin_write().unwrap();
        tx.open_table(BIG)
            .unwrap()
            .insert(k, vec![7u8; 3000].as_slice())
            .unwrap();
        tx.commit().unwrap();
    }
    db.checkpoint().unwrap();
    db
}

fn give_back(db: &Database, compaction: bool) {
    match compaction {
        false => db.checkpoint().map(drop),
        true => db.compact().map(drop),
    }
    .unwrap_or_default();
}

/// Rule O13 on the writer side: an idle log gives back its large open
/// file, and a compaction every file, but a crash at any storage
/// operation of either never finds no WAL file beside a base that
/// requires one (the new small file is made durable first), so no
/// crash makes a healthy database refuse to open.
#[test]
fn a_crash_anywhere_in_a_wal_give_back_never_leaves_the_database_without_its_wal() {
    for compaction in [false, true] {
        // How many storage operations the give-back takes, and that it
        // does give the large file back.
        let vfs = SimVfs::new();
        let db = with_large_idle_wal(&vfs);
        let files = wal_names(&vfs);
        let before = vfs.op_count();
        give_back(&db, compaction);
        let ops = vfs.op_count() - before;
        assert_ne!(
            wal_names(&vfs),
            files,
            "compaction {compaction}: nothing given back"
        );
        drop(db);
        for n in 1..=ops {
            let vfs = SimVfs::new();
            let db = with_large_idle_wal(&vfs);
            vfs.fail_from(n, Fault::Eio);
            give_back(&db, compaction);
            for policy in [
                CrashPolicy::DropAll,
                CrashPolicy::KeepAll,
                CrashPolicy::Random,
            ] {
                let image = vfs.crash_with(n, policy);
                let db2 = open(&image).unwrap_or_else(|e| {
                    panic!("compaction {compaction} op {n}/{ops} {policy:?}: open gave {e}")
                });
                let rx = db2.begin_read().unwrap();
                assert_eq!(rx.open_table(BIG).unwrap().len().unwrap(), 40);
                drop(rx);
                db2.check_integrity().unwrap();
            }
            drop(db);
        }
    }
}

/// Review of rule O13: a first version made the small WAL file an idle
/// give-back keeps with a WAL write round, whose failure poisons the log,
/// so one ENOSPC or EIO in an idle checkpoint poisoned the database (and
/// the checkpoint still returned `Ok`). Now a failure there only keeps a
/// larger file: the next commit works, and every commit survives a crash.
#[test]
fn a_failed_operation_in_an_idle_give_back_poisons_nothing() {
    // How many storage operations the idle give-back takes.
    let vfs = SimVfs::new();
    let db = with_large_idle_wal(&vfs);
    let before = vfs.op_count();
    give_back(&db, false);
    let ops = vfs.op_count() - before;
    assert!(ops >= 3, "the give-back did {ops} operations");
    drop(db);
    for fault in [Fault::NoSpace, Fault::Eio] {
        for n in 1..=ops {
            let vfs = SimVfs::new();
            let db = with_large_idle_wal(&vfs);
            vfs.fail_op(n, fault);
            give_back(&db, false);
            let tx = db.begin_write().unwrap();
            tx.open_table(BIG)
                .unwrap()
                .insert(1000, [1u8; 10].as_slice())
                .unwrap();
            tx.commit()
                .unwrap_or_else(|e| panic!("{fault:?} at op {n}/{ops}: the next commit: {e}"));
            assert!(
                !wal_names(&vfs).is_empty(),
                "{fault:?} at op {n}: no WAL file"
            );
            let image = vfs.process_crash();
            drop(db);
            let db = open(&image).unwrap();
            let rx = db.begin_read().unwrap();
            assert_eq!(rx.open_table(BIG).unwrap().len().unwrap(), 41);
        }
    }
}

/// Format version 2 (before the WAL mark) opens, with no missing-WAL
/// check, and a read-write open upgrades it: version 4, mark `Required`.
#[test]
fn a_version_2_file_opens_and_is_upgraded() {
    let vfs = SimVfs::new();
    let db = create(&vfs).unwrap();
    put(&db, 0, 10);
    db.close().unwrap();
    // Both slots as a version-2 build wrote them: version 2, offset 96 zero.
    let mut file = vfs.file_bytes(NAME).unwrap();
    let ps = 4096;
    for slot in 0..2 {
        let b = &mut file[slot * ps..slot * ps + SLOT_LEN];
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        b[96..100].fill(0);
        let crc = crc32c::crc32c(&b[..SLOT_LEN - 4]);
        b[SLOT_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
    }
    vfs.set_file_bytes(NAME, file);
    let version = |vfs: &SimVfs| {
        let f = vfs.file_bytes(NAME).unwrap();
        (0..2)
            .filter_map(|s| Superblock::decode(&f[s * ps..s * ps + SLOT_LEN], s as u8).ok()?)
            .max_by_key(|sb| sb.generation)
            .map(|sb| {
                (
                    u32::from_le_bytes(f[8..12].try_into().unwrap()),
                    sb.wal_mark,
                )
            })
    };
    // Read-only: read as it is, nothing written.
    let ro = builder()
        .read_only(true)
        .open_with_vfs(Arc::new(vfs.clone()), NAME)
        .unwrap();
    assert_eq!(
        ro.file_info().unwrap().format_version,
        4,
        "the build's version"
    );
    assert_eq!(count(&ro), 10);
    drop(ro);
    let db = open(&vfs).unwrap();
    assert_eq!(count(&db), 10);
    let (v, mark) = version(&vfs).unwrap();
    assert_eq!(v, 4);
    assert_eq!(mark, sheafdb::testing::WalMark::Required);
    put(&db, 10, 5);
    let image = vfs.process_crash();
    drop(db);
    delete_wal(&image);
    assert!(matches!(open(&image).map(drop), Err(Error::WalMismatch(_))));
}

/// Sets the format version of both superblock slots of `NAME` on `vfs`
/// to `version`, resealing them (what a build of that format wrote).
fn set_format_version(vfs: &SimVfs, version: u32) {
    let mut file = vfs.file_bytes(NAME).unwrap();
    for slot in 0..2 {
        let b = &mut file[slot * 4096..slot * 4096 + SLOT_LEN];
        b[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32c::crc32c(&b[..SLOT_LEN - 4]);
        b[SLOT_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
    }
    vfs.set_file_bytes(NAME, file);
}

/// Rule O16 and format 4: the WAL anchor is trusted only under a base a
/// build that keeps it wrote. A build of format 3 ignores the anchor, so
/// after it ran on the file the anchor may name a use it gave back; under
/// a format-3 base the open must not take that for lost commits. Under a
/// format-4 base the same anchor is checked (and refuses).
#[test]
fn the_wal_anchor_is_checked_only_under_a_base_of_format_4() {
    let vfs = SimVfs::new();
    let db = create(&vfs).unwrap();
    put(&db, 0, 10);
    let image = vfs.process_crash();
    drop(db);
    // An anchor naming a use no file holds (as a format-3 build's
    // give-back would leave it).
    let mut file = image.file_bytes(NAME).unwrap();
    let sb = Superblock::decode(&file[..SLOT_LEN], 0).unwrap().unwrap();
    let mut anchor = vec![0u8; 512];
    anchor[..8].copy_from_slice(b"SHEAFANC");
    anchor[8..16].copy_from_slice(&sb.db_id.to_le_bytes());
    anchor[16..20].copy_from_slice(&1u32.to_le_bytes());
    anchor[24..32].copy_from_slice(&99u64.to_le_bytes());
    anchor[32..40].copy_from_slice(&0x5A17u64.to_le_bytes());
    anchor[40..48].copy_from_slice(&(1u64 << 30).to_le_bytes());
    let crc = crc32c::crc32c(&anchor[..48]);
    anchor[48..52].copy_from_slice(&crc.to_le_bytes());
    file[1024..1536].copy_from_slice(&anchor);
    image.set_file_bytes(NAME, file);
    let err = open(&image).map(drop).unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    assert!(err.to_string().contains("segment use 99"), "{err}");
    set_format_version(&image, 3);
    let db = open(&image).unwrap();
    assert_eq!(count(&db), 10);
}

/// Rule O13's cost at a full disk: a read-write open of a cleanly closed
/// database makes a WAL file and writes a superblock, so on a full disk
/// it fails (`Io`) where it used to open; a read-only open still works,
/// and whichever of the open's operations failed, the next open finds the
/// database whole.
#[test]
fn a_clean_open_on_a_full_disk_fails_and_leaves_the_database_whole() {
    let clean = || {
        let vfs = SimVfs::new();
        let db = create(&vfs).unwrap();
        put(&db, 0, 20);
        db.close().unwrap();
        delete_wal(&vfs);
        vfs
    };
    let vfs = clean();
    let before = vfs.op_count();
    drop(open(&vfs).unwrap());
    let ops = vfs.op_count() - before;
    for n in 1..=ops {
        let vfs = clean();
        vfs.fail_from(n, Fault::NoSpace);
        let r = open(&vfs).map(drop);
        vfs.clear_faults();
        if let Err(e) = &r {
            assert!(matches!(e, Error::Io(_)), "op {n}/{ops}: {e}");
        }
        let ro = builder()
            .read_only(true)
            .open_with_vfs(Arc::new(vfs.clone()), NAME)
            .unwrap();
        assert_eq!(count(&ro), 20, "op {n}");
        drop(ro);
        let db = open(&vfs).unwrap_or_else(|e| panic!("op {n}/{ops}: reopen: {e}"));
        assert_eq!(count(&db), 20, "op {n}");
        db.check_integrity().unwrap();
    }
}

/// A second name for a live WAL segment (a hard link, or a copy) is
/// refused at open, and nothing changes. Before, the open took the extra
/// name for a free file; the next segment switch recycled it and, through
/// a hard link, overwrote the live segment: the following open refused
/// the log, and a salvage kept 15 to 37 of 120 acknowledged rows (a
/// session-33 probe of WAL damage).
/// Options whose WAL switches segments every few dozen commits.
fn small_wal() -> sheafdb::Builder {
    builder()
        .background_checkpoints(false)
        .wal_segment_bytes(32 * 1024)
        .wal_first_segment_bytes(8192)
}

/// `d.sheaf` in a new directory after `n` commits of 600-byte values into
/// table "t" (a checkpoint after the tenth) and a crash: `forget` keeps
/// the lock, so callers open copies of the files.
fn crashed_across_segments(n: u64) -> sheafdb::Result<tempfile::TempDir> {
    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
    let dir = tempfile::tempdir()?;
    let db = small_wal().create(dir.path().join("d.sheaf"))?;
    for k in 0..n {
        let tx = db.begin_write()?;
        tx.open_table(T)?.insert(k, vec![k as u8; 600].as_slice())?;
        tx.commit()?;
        if k == 9 {
            db.checkpoint()?;
        }
    }
    std::mem::forget(db);
    Ok(dir)
}

#[test]
fn a_second_name_for_a_live_wal_segment_is_refused() -> sheafdb::Result<()> {
    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
    let small = small_wal;
    // A crash: the log holds the last 50 commits (`forget` keeps the
    // lock, so the crashed state is opened from a copy of the files).
    let dir = crashed_across_segments(60)?;
    let snapshot = |d: &std::path::Path| -> std::io::Result<Vec<(String, Vec<u8>)>> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(d)? {
            let e = e?;
            v.push((
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path())?,
            ));
        }
        v.sort();
        Ok(v)
    };
    let copy = tempfile::tempdir()?;
    for (name, bytes) in snapshot(dir.path())? {
        std::fs::write(copy.path().join(name), bytes)?;
    }
    let live = copy.path().join("d.sheaf-wal.1");
    assert!(live.exists(), "the log uses a second segment");
    std::fs::hard_link(&live, copy.path().join("d.sheaf-wal.40"))?;
    let before = snapshot(copy.path())?;
    let err = small()
        .open(copy.path().join("d.sheaf"))
        .map(drop)
        .unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    assert!(err.to_string().contains("same WAL segment"), "{err}");
    assert_eq!(
        snapshot(copy.path())?,
        before,
        "a refused open changed a file"
    );
    // Without the extra name every acknowledged commit is there.
    std::fs::remove_file(copy.path().join("d.sheaf-wal.40"))?;
    let db = small().open(copy.path().join("d.sheaf"))?;
    assert_eq!(db.begin_read()?.open_table(T)?.len()?, 60);
    db.check_integrity()?;
    Ok(())
}

/// Rule O15 through the whole stack: the newest WAL segment of a crashed
/// database deleted (or zeroed) while an older one that the replay start
/// lies in remains. Before, the open replayed the older segment and
/// opened without the newest one's acknowledged commits and without a
/// word; now it is refused as a missing segment use and changes nothing,
/// and a salvage opens the commits before it.
#[test]
fn a_deleted_newest_wal_segment_is_refused_not_a_silent_prefix() -> sheafdb::Result<()> {
    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
    let small = small_wal;
    for zero in [false, true] {
        // A crash, then the newest segment file goes.
        let dir = crashed_across_segments(80)?;
        let copy = tempfile::tempdir()?;
        let mut newest = (0u64, String::new());
        for e in std::fs::read_dir(dir.path())? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(e.path())?;
            if name.contains("-wal.") && bytes.len() >= 24 && bytes.starts_with(b"SHEAFWAL") {
                let seq = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
                newest = newest.max((seq, name.clone()));
            }
            std::fs::write(copy.path().join(name), bytes)?;
        }
        let victim = copy.path().join(&newest.1);
        match zero {
            true => std::fs::write(
                &victim,
                vec![0u8; std::fs::metadata(&victim)?.len() as usize],
            )?,
            false => std::fs::remove_file(&victim)?,
        }
        let before = files_in(copy.path());
        let err = small()
            .open(copy.path().join("d.sheaf"))
            .map(drop)
            .unwrap_err();
        assert!(err.is_corrupted(), "zeroed {zero}: {err}");
        assert!(
            err.to_string().contains("use missing"),
            "zeroed {zero}: {err}"
        );
        assert_eq!(
            files_in(copy.path()),
            before,
            "a refused open changed a file"
        );
        let db = small()
            .salvage_damaged_wal(true)
            .open(copy.path().join("d.sheaf"))?;
        let kept = db.begin_read()?.open_table(T)?.len()?;
        assert!((10..80).contains(&kept), "zeroed {zero}: {kept} rows kept");
        assert!(db.wal_damage().is_some());
        db.check_integrity()?;
    }
    Ok(())
}

/// Every file in `dir` with its bytes, by name.
fn files_in(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    v.sort();
    v
}

/// Opened through a symlink, the database keeps its WAL beside the data
/// file under the data file's own name. Before, the segments went beside
/// the link under the link's name, so after a crash an open through the
/// real name found only the log of an earlier open, and opened without
/// the commits made through the link (a session-34 probe).
#[test]
fn a_database_opened_through_a_symlink_keeps_its_wal_beside_the_file() -> sheafdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = dir.path().join("r.sheaf");
    let db = builder().create(&real)?;
    put(&db, 0, 10);
    db.close()?;
    let link = dir.path().join("h.sheaf");
    std::os::unix::fs::symlink(&real, &link)?;
    let db = builder().open(&link)?;
    for k in 10..50 {
        put(&db, k, 1);
    }
    let names: Vec<String> = files_in(dir.path()).into_iter().map(|f| f.0).collect();
    assert!(
        !names.iter().any(|n| n.starts_with("h.sheaf-wal.")),
        "WAL files named after the link: {names:?}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("r.sheaf-wal.")),
        "{names:?}"
    );
    // A crash, then an open through the real name: every commit is there.
    std::mem::forget(db);
    let copy = tempfile::tempdir()?;
    for (name, bytes) in files_in(dir.path()) {
        if name != "h.sheaf" {
            std::fs::write(copy.path().join(name), bytes)?;
        }
    }
    let db = builder().open(copy.path().join("r.sheaf"))?;
    assert_eq!(db.begin_read()?.open_table(T)?.len()?, 50);
    Ok(())
}

/// Child of [`a_relative_path_keeps_its_directory_after_a_chdir`]: opens
/// `c.sheaf` by a relative path in `a`, changes the working directory to
/// `b`, commits until the log needs new segment files, and exits without
/// closing (a crash).
#[test]
#[ignore = "run as a child process by a_relative_path_keeps_its_directory_after_a_chdir"]
fn chdir_child() {
    let Ok(base) = std::env::var("SHEAF_CHDIR_BASE") else {
        return;
    };
    let base = std::path::PathBuf::from(base);
    std::env::set_current_dir(base.join("a")).unwrap();
    let small = builder()
        .wal_segment_bytes(32 * 1024)
        .wal_first_segment_bytes(8192);
    let db = small.create("c.sheaf").unwrap();
    put(&db, 0, 1);
    std::env::set_current_dir(base.join("b")).unwrap();
    for k in 1..300 {
        put(&db, k, 1);
    }
    std::process::exit(0);
}

/// A database opened by a relative path keeps every file in the
/// directory it was opened in when the process changes its working
/// directory. Before, later segment files went to the new working
/// directory, and the next open silently lacked the commits in them (a
/// session-34 probe).
#[test]
fn a_relative_path_keeps_its_directory_after_a_chdir() {
    let base = tempfile::tempdir().unwrap();
    for d in ["a", "b"] {
        std::fs::create_dir(base.path().join(d)).unwrap();
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "chdir_child", "--test-threads=1"])
        .env("SHEAF_CHDIR_BASE", base.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the child failed: {status}");
    let strays: Vec<_> = files_in(&base.path().join("b"))
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert!(
        strays.is_empty(),
        "files made in the new working directory: {strays:?}"
    );
    let db = builder()
        .open(base.path().join("a").join("c.sheaf"))
        .unwrap();
    assert_eq!(
        db.begin_read()
            .unwrap()
            .open_table(T)
            .unwrap()
            .len()
            .unwrap(),
        300
    );
}

/// A file that is not ours under a WAL segment's name (a user's text, a
/// file of another program) is refused at open, and left as it was.
/// Before, a file without a valid segment header was taken for free
/// space: deleted by the next give-back, or overwritten by the next use
/// (a session-34 probe). Zeros under such a name are still a free file
/// (what a spare is).
#[test]
fn a_foreign_file_named_like_a_wal_segment_is_refused_and_kept() -> sheafdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("v.sheaf");
    let db = builder().create(&path)?;
    put(&db, 0, 10);
    db.close()?;
    let text = dir.path().join("v.sheaf-wal.2");
    std::fs::write(&text, b"my notes, not a WAL segment\n".repeat(100))?;
    let before = files_in(dir.path());
    for read_only in [false, true] {
        let err = builder()
            .read_only(read_only)
            .open(&path)
            .map(drop)
            .unwrap_err();
        assert!(matches!(err, Error::WalMismatch(_)), "{err}");
        assert!(err.to_string().contains("v.sheaf-wal.2"), "{err}");
        assert_eq!(
            files_in(dir.path()),
            before,
            "a refused open changed a file"
        );
    }
    std::fs::write(&text, vec![0u8; 8192])?;
    let db = builder().open(&path)?;
    assert_eq!(db.begin_read()?.open_table(T)?.len()?, 10);
    Ok(())
}

/// Copies every file of `from` into a new temporary directory (hard links
/// become separate files with the same bytes).
fn copy_dir(from: &std::path::Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for (name, bytes) in files_in(from) {
        std::fs::write(copy.path().join(name), bytes).unwrap();
    }
    copy
}

/// Rule O16 through the whole stack, in its plainest form: a new database
/// commits into its first WAL file until the log makes a spare beside it,
/// the process dies, and the first file is deleted. No other WAL file
/// names that use, and the spare kept rule O13 quiet: the open found no
/// use and opened empty, without an error. The data file's WAL anchor
/// names the use now: the open is refused and changes nothing.
#[test]
fn a_deleted_only_wal_segment_beside_its_spare_is_refused() -> sheafdb::Result<()> {
    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
    let dir = tempfile::tempdir()?;
    // 180 KB of records: past half of a 256 KiB first file (a spare is
    // made) and short of its end (the log has not switched to the spare).
    let db = Database::builder()
        .wal_first_segment_bytes(256 << 10)
        .create(dir.path().join("x.sheaf"))?;
    for k in 0..300u64 {
        let tx = db.begin_write()?;
        tx.open_table(T)?.insert(k, vec![1u8; 600].as_slice())?;
        tx.commit()?;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !dir.path().join("x.sheaf-wal.1").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::mem::forget(db);
    let copy = copy_dir(dir.path());
    assert!(
        copy.path().join("x.sheaf-wal.1").exists(),
        "a spare beside the first file"
    );
    std::fs::remove_file(copy.path().join("x.sheaf-wal.0"))?;
    let before = files_in(copy.path());
    let err = Database::open(copy.path().join("x.sheaf"))
        .map(drop)
        .unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    assert!(err.to_string().contains("segment use 1"), "{err}");
    assert_eq!(
        files_in(copy.path()),
        before,
        "a refused open changed a file"
    );
    // Accepting the loss opens it as of its last checkpoint.
    let db = builder()
        .accept_missing_wal(true)
        .open(copy.path().join("x.sheaf"))?;
    db.check_integrity()?;
    Ok(())
}

/// A data file opened under a second name (a hard link) keeps a WAL under
/// that name; after a crash, an open through the first name found only
/// that name's older log and opened without the commits made through the
/// other (a session-34 probe). The anchor names the other log's use: the
/// open is refused. And a cleanly closed data file beside another copy's
/// log that holds records past its end is refused too, instead of
/// replaying them into a state no copy had.
#[test]
fn a_data_file_opened_under_a_second_name_is_not_opened_without_its_log() -> sheafdb::Result<()> {
    let b = || builder().background_checkpoints(false);
    let dir = tempfile::tempdir()?;
    let real = dir.path().join("r.sheaf");
    let db = b().create(&real)?;
    put(&db, 0, 10);
    db.close()?;
    std::fs::hard_link(&real, dir.path().join("h.sheaf"))?;
    let db = b().open(dir.path().join("h.sheaf"))?;
    for k in 10..400 {
        put(&db, k, 1);
    }
    std::mem::forget(db);
    let copy = copy_dir(dir.path());
    let err = b().open(copy.path().join("r.sheaf")).map(drop).unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    // Accepting the loss through the first name (which commits a little
    // and closes cleanly), then the data file opened through the second
    // name again: its log holds records past the clean close's end, from
    // another history. Before, they were replayed into a state neither
    // name had seen; now the open is refused.
    let db = b()
        .accept_missing_wal(true)
        .open(copy.path().join("r.sheaf"))?;
    put(&db, 5000, 5);
    db.close()?;
    std::fs::copy(copy.path().join("r.sheaf"), copy.path().join("h.sheaf"))?;
    let before = files_in(copy.path());
    let err = b().open(copy.path().join("h.sheaf")).map(drop).unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    assert!(err.to_string().contains("closed cleanly"), "{err}");
    assert_eq!(
        files_in(copy.path()),
        before,
        "a refused open changed a file"
    );
    Ok(())
}

/// A database created through a dangling symlink is made at the link's
/// target; its WAL goes beside the target, under the target's name, where
/// every later open through the link looks. Before, the WAL went beside
/// the link (nothing resolved yet), and after a crash the open through
/// the link found no WAL (a session-34 review).
#[test]
fn a_database_created_through_a_dangling_symlink_finds_its_wal() -> sheafdb::Result<()> {
    let root = tempfile::tempdir()?;
    let (real, links) = (root.path().join("real"), root.path().join("links"));
    std::fs::create_dir(&real)?;
    std::fs::create_dir(&links)?;
    let link = links.join("alias.sheaf");
    std::os::unix::fs::symlink(real.join("data.sheaf"), &link)?;
    let db = builder().background_checkpoints(false).create(&link)?;
    put(&db, 0, 50);
    let names: Vec<String> = files_in(&links).into_iter().map(|f| f.0).collect();
    assert_eq!(names, ["alias.sheaf"], "files beside the link");
    let names: Vec<String> = files_in(&real).into_iter().map(|f| f.0).collect();
    assert!(
        names.iter().any(|n| n.starts_with("data.sheaf-wal.")),
        "{names:?}"
    );
    // A crash, then an open through a link to a copy of the target.
    std::mem::forget(db);
    let copy = copy_dir(&real);
    let clink = root.path().join("copy-link.sheaf");
    std::os::unix::fs::symlink(copy.path().join("data.sheaf"), &clink)?;
    let db = builder().background_checkpoints(false).open(&clink)?;
    assert_eq!(db.begin_read()?.open_table(T)?.len()?, 50);
    Ok(())
}
