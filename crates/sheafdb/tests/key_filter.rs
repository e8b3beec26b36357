//! The key filter (design.md "Key filter", invariant F1): a write
//! transaction that puts or removes a key no tree holds skips the tree
//! descent for its old value, and never skips one for a key that is there,
//! whatever state the filter was built from (trees, buffers, replayed
//! commits, other CFs), while transactions race its builds, and within its
//! memory bound. `tests/model.rs` also builds filters at random points of
//! its sequences and checks every old value against its model.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::builder;
use sheafdb::storage::sim::{CrashPolicy, SimVfs};
use sheafdb::{Database, Durability, Result, TableDefinition};

const T: TableDefinition<u64, u64> = TableDefinition::new("t");

fn open(vfs: &SimVfs) -> Database {
    builder()
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), "k.sheaf")
        .unwrap()
}

/// Inserts `keys` (value = key + `plus`) in one transaction.
fn put_all(db: &Database, keys: impl Iterator<Item = u64>, plus: u64) {
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        for k in keys {
            t.insert(k, k + plus).unwrap();
        }
    }
    tx.commit().unwrap();
}

fn skips(db: &Database) -> u64 {
    db.memory_stats().key_filter_skips
}

#[test]
fn new_keys_skip_the_tree_and_existing_ones_keep_their_old_values() -> Result<()> {
    let vfs = SimVfs::new();
    let db = open(&vfs);
    // A new database's filter is trusted at once (it has no key); writes
    // into an empty tree need neither it nor a descent, so they count no
    // skip.
    put_all(&db, (0..10_000).map(|k| k * 2), 0); // even keys
    assert_eq!(skips(&db), 0);
    db.checkpoint()?;
    put_all(&db, (10_000..20_000).map(|k| k * 2), 0);
    assert!(skips(&db) >= 9_500, "{}", skips(&db));
    db.checkpoint()?;
    put_all(&db, (0..2_000).map(|k| k * 2 + 40_000), 0); // buffered
    db.build_key_filters()?;
    assert!(db.memory_stats().key_filter_bytes > 0);
    let before = skips(&db);
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 0..5_000u64 {
            // Odd keys are new; even ones are in the trees or the buffer.
            assert_eq!(t.insert(k * 2 + 1, 7)?.map(|g| g.value()), None, "{k}");
            let even = k * 2 + if k % 2 == 0 { 0 } else { 40_000 };
            // The evens below 44,000 were loaded or buffered.
            let want = (even < 44_000).then_some(even);
            assert_eq!(t.insert(even, 9)?.map(|g| g.value()), want, "{even}");
        }
        for k in 0..1_000u64 {
            assert!(t.remove(k * 2 + 100_001)?.is_none(), "absent {k}");
            assert_eq!(t.remove(k * 4)?.map(|g| g.value()), Some(9));
        }
        // New: 5,000 odd keys and the 1,500 evens from 44,000 on.
        assert_eq!(t.len()?, 22_000 + 5_000 + 1_500 - 1_000);
    }
    tx.commit()?;
    let skipped = skips(&db) - before;
    // 7,500 absent keys; a Bloom filter lets about one in a hundred by.
    assert!(
        (7_300..=7_500).contains(&skipped),
        "{skipped} descents skipped"
    );
    // The odd keys the transaction added are in the filter now.
    let tx = db.begin_write()?;
    assert_eq!(tx.open_table(T)?.insert(1, 3)?.map(|g| g.value()), Some(7));
    tx.commit()?;
    db.check_integrity()?;
    Ok(())
}

#[test]
fn commits_replayed_at_open_are_in_the_filter_built_after_it() -> Result<()> {
    let vfs = SimVfs::new();
    let db = open(&vfs);
    put_all(&db, 0..1_000, 0);
    db.checkpoint()?;
    // Committed after the checkpoint: only in the WAL at the crash.
    for k in 1_000..1_500u64 {
        put_all(&db, std::iter::once(k), 1);
    }
    let crashed = vfs.crash_with(3, CrashPolicy::DropAll);
    drop(db);
    let db = builder()
        .background_checkpoints(false)
        .open_with_vfs(Arc::new(crashed), "k.sheaf")?;
    assert!(db.replayed_records() >= 500, "nothing was replayed");
    db.build_key_filters()?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 0..2_000u64 {
            let want = match k {
                0..=999 => Some(k),
                1_000..=1_499 => Some(k + 1),
                _ => None,
            };
            assert_eq!(t.insert(k, 0)?.map(|g| g.value()), want, "key {k}");
        }
        assert_eq!(t.len()?, 2_000);
    }
    tx.commit()?;
    assert!(skips(&db) >= 450, "{} skips", skips(&db));
    db.checkpoint()?;
    db.check_integrity()?;
    Ok(())
}

#[test]
fn the_filter_of_one_column_family_says_nothing_of_another() -> Result<()> {
    let vfs = SimVfs::new();
    let db = open(&vfs);
    let a = db.create_cf("a")?;
    let b = db.create_cf("b")?;
    let put = |cf: &sheafdb::ColumnFamily, k: u64, v: u64| -> Result<Option<u64>> {
        let tx = cf.begin_write()?;
        let old = tx.open_table(T)?.insert(k, v)?.map(|g| g.value());
        tx.commit()?;
        Ok(old)
    };
    for k in 0..500 {
        assert_eq!(put(&a, k, 1)?, None);
    }
    db.build_key_filters()?;
    for k in 0..500 {
        assert_eq!(put(&b, k, 2)?, None, "new in b");
        assert_eq!(put(&a, k, 3)?, Some(1), "still in a");
        assert_eq!(put(&b, k, 4)?, Some(2), "now in b");
    }
    // Another table of the same CF is another key too.
    let tx = a.begin_write()?;
    let other: TableDefinition<u64, u64> = TableDefinition::new("other");
    assert!(tx.open_table(other)?.insert(7, 1)?.is_none());
    tx.commit()?;
    Ok(())
}

/// A writer commits while another thread builds filters over and over (and
/// the filter, sized for few keys, fills and asks for more): each
/// transaction puts a new key and rewrites an old one, whose old value
/// must come back every time.
#[test]
fn a_writer_racing_filter_builds_never_loses_an_old_value() {
    let vfs = SimVfs::new();
    let db = Arc::new(open(&vfs));
    put_all(&db, 0..100, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let builds = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                db.build_key_filters().unwrap();
                n += 1;
                if n.is_multiple_of(4) {
                    db.checkpoint().unwrap();
                }
            }
            n
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut k = 100u64;
    while Instant::now() < deadline || k < 2_000 {
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(Durability::None);
        {
            let mut t = tx.open_table(T).unwrap();
            assert_eq!(t.insert(k, k).unwrap().map(|g| g.value()), None, "{k}");
            let old = k / 2;
            let got = t.insert(old, old).unwrap().map(|g| g.value());
            assert_eq!(got, Some(old), "old value of {old} lost");
        }
        tx.commit().unwrap();
        k += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let n = builds.join().unwrap();
    assert!(n >= 10, "only {n} builds raced the writer");
    assert!(skips(&db) > 0, "the filter was never trusted");
    assert_eq!(
        db.begin_read()
            .unwrap()
            .open_table(T)
            .unwrap()
            .len()
            .unwrap(),
        k
    );
}

#[test]
fn no_filter_without_memory_for_one() -> Result<()> {
    for limit in [0u64, 1_000] {
        let vfs = SimVfs::new();
        let db = builder()
            .background_checkpoints(false)
            .key_filter_memory(limit)
            .create_with_vfs(Arc::new(vfs.clone()), "k.sheaf")?;
        put_all(&db, 0..1_000, 0);
        db.build_key_filters()?;
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(T)?;
            for k in 0..2_000u64 {
                let want = (k < 1_000).then_some(k);
                assert_eq!(t.insert(k, 0)?.map(|g| g.value()), want);
            }
        }
        tx.commit()?;
        let m = db.memory_stats();
        assert_eq!((m.key_filter_bytes, m.key_filter_skips), (0, 0), "{limit}");
        assert_eq!(m.key_filter_limit_bytes, limit);
    }
    Ok(())
}

/// With background work on, a reopened database's filter is built without
/// being asked, and a chain of filters grown past three (new keys filled
/// each) is replaced by one; the budget bounds them all.
#[test]
fn the_background_thread_builds_and_replaces_long_chains() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.sheaf");
    let open = || {
        Database::builder()
            .key_filter_memory(4 << 20)
            .key_filter_min_keys(64)
            .create(&path)
    };
    let db = open()?;
    let wait_for = |db: &Database, what: &str, ok: &dyn Fn(&sheafdb::MemoryStats) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ok(&db.memory_stats()) {
            assert!(Instant::now() < deadline, "{what}: {:?}", db.memory_stats());
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    assert_eq!(db.memory_stats().key_filter_builds, 1, "empty: at once");
    // 64 + 256 + 1,024 keys fill a chain of three; the fourth asks for
    // one filter in their place.
    put_all(&db, 0..5_000, 0);
    wait_for(&db, "a filter in place of the chain", &|m| {
        m.key_filter_builds >= 2
    });
    let check = |db: &Database, from: u64| -> Result<u64> {
        let before = skips(db);
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(T)?;
            for k in from..from + 1_000 {
                assert!(t.insert(k, 1)?.is_none(), "{k} is new");
                assert!(t.insert(k - from, 2)?.is_some(), "{} is there", k - from);
            }
        }
        tx.commit()?;
        Ok(skips(db) - before)
    };
    let skipped = check(&db, 100_000)?;
    assert!(
        skipped >= 950,
        "{skipped} of 1,000 new keys skipped the tree"
    );
    assert!(db.memory_stats().key_filter_bytes <= 4 << 20);
    drop(db);
    // Reopened with keys: trusted only once the thread has scanned them.
    let db = Database::builder().key_filter_memory(4 << 20).open(&path)?;
    wait_for(&db, "a filter after reopening", &|m| {
        m.key_filter_builds >= 1
    });
    let skipped = check(&db, 200_000)?;
    assert!(
        skipped >= 950,
        "{skipped} of 1,000 new keys skipped the tree: {:?}",
        db.memory_stats()
    );
    Ok(())
}

/// A budget with room for the first filter only: a full filter cannot
/// grow, new keys go on into it, and every old value stays right.
#[test]
fn a_filter_the_budget_cannot_grow_still_answers_right() -> Result<()> {
    let vfs = SimVfs::new();
    let db = builder()
        .background_checkpoints(false)
        .key_filter_min_keys(64)
        .key_filter_memory(128)
        .create_with_vfs(Arc::new(vfs.clone()), "k.sheaf")?;
    assert_eq!(db.memory_stats().key_filter_bytes, 128);
    for round in 0..3u64 {
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(T)?;
            for k in 0..2_000u64 {
                let want = (round > 0).then(|| k + round - 1);
                assert_eq!(t.insert(k, k + round)?.map(|g| g.value()), want);
            }
        }
        tx.commit()?;
        db.build_key_filters()?; // no room for a second: keeps the first
        assert_eq!(db.memory_stats().key_filter_bytes, 128);
    }
    Ok(())
}

/// Found by review: a writer's own `build_key_filters` waited for the
/// build lock another caller held while that caller waited for the
/// writer: neither returned. It is `WouldDeadlock` at once now.
#[test]
fn a_writer_asking_for_builds_while_another_build_waits_for_it_is_refused() {
    let vfs = SimVfs::new();
    let db = Arc::new(open(&vfs));
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<()>>();
    let (mine_tx, mine_rx) = std::sync::mpsc::channel::<Result<()>>();
    {
        let db = db.clone();
        std::thread::spawn(move || {
            let tx = db.begin_write().unwrap();
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            let r = db.build_key_filters();
            drop(tx); // lets the other build go on
            mine_tx.send(r).unwrap();
        });
    }
    held_rx.recv().unwrap();
    let other = {
        let db = db.clone();
        std::thread::spawn(move || done_tx.send(db.build_key_filters()).unwrap())
    };
    std::thread::sleep(Duration::from_millis(200)); // the other now waits
    go_tx.send(()).unwrap();
    // (Before the fix, neither call ever returned.)
    let r = mine_rx.recv_timeout(Duration::from_secs(20));
    assert!(
        matches!(r, Ok(Err(sheafdb::Error::WouldDeadlock(_)))),
        "{r:?}"
    );
    let other_result = done_rx.recv_timeout(Duration::from_secs(20));
    assert!(matches!(other_result, Ok(Ok(()))), "{other_result:?}");
    other.join().unwrap();
}

/// Found by review: a dropped CF's filters kept their share of the
/// budget for as long as a handle of the CF (or the next checkpoint)
/// lived, so another CF could be refused one.
#[test]
fn a_dropped_cf_gives_its_filter_memory_back_at_once() -> Result<()> {
    let vfs = SimVfs::new();
    let db = builder()
        .background_checkpoints(false)
        .key_filter_min_keys(64)
        .key_filter_memory(128 + 16_384)
        .create_with_vfs(Arc::new(vfs.clone()), "k.sheaf")?;
    let before = db.memory_stats().key_filter_bytes;
    let old = db.create_cf("old")?;
    put_all_in(&old, 0..4_000);
    db.build_key_filters()?;
    assert!(db.memory_stats().key_filter_bytes > before);
    db.drop_cf("old")?;
    let m = db.memory_stats(); // `old`, a handle, still lives
    assert_eq!(m.key_filter_bytes, before, "{m:?}");
    drop(old);
    Ok(())
}

fn put_all_in(cf: &sheafdb::ColumnFamily, keys: std::ops::Range<u64>) {
    let tx = cf.begin_write().unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        for k in keys {
            t.insert(k, k).unwrap();
        }
    }
    tx.commit().unwrap();
}

/// New keys of `cf` whose tree descent a filter skipped, of 200.
fn skipped_in(db: &Database, cf: &sheafdb::ColumnFamily, from: u64) -> u64 {
    let before = skips(db);
    put_all_in(cf, from..from + 200);
    skips(db) - before
}

/// Two reopened CFs, room for one filter: the other gets its filter once
/// memory comes back (the first CF dropped). Found by review: a build
/// with no room dropped the request for good.
#[test]
fn a_cf_refused_a_filter_gets_one_once_memory_comes_back() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.sheaf");
    {
        let db = Database::create(&path)?;
        for name in ["a", "b"] {
            put_all_in(&db.create_cf(name)?, 0..4_000);
        }
    }
    // Each build sizes for 8,000 keys: 16 KiB; the default CF, empty,
    // takes the smallest filter (128 bytes).
    let db = Database::builder()
        .key_filter_min_keys(64)
        .key_filter_memory(128 + 20_000)
        .open(&path)?;
    let (a, b) = (db.cf("a")?, db.cf("b")?);
    let deadline = Instant::now() + Duration::from_secs(20);
    while db.memory_stats().key_filter_builds < 2 {
        assert!(Instant::now() < deadline, "{:?}", db.memory_stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let (with, without, name) = match skipped_in(&db, &a, 100_000) {
        0 => (b, a, "b"),
        _ => (a, b, "a"),
    };
    assert_eq!(skipped_in(&db, &without, 200_000), 0, "no room for two");
    drop(with);
    db.drop_cf(name)?;
    // The dropped CF's 16 KiB come back at once; the refused CF's build
    // is asked for again and fits now.
    assert_eq!(db.memory_stats().key_filter_bytes, 128);
    while db.memory_stats().key_filter_builds < 3 {
        assert!(Instant::now() < deadline, "{:?}", db.memory_stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let got = skipped_in(&db, &without, 300_000);
    assert!(got >= 190, "{got} {:?}", db.memory_stats());
    Ok(())
}

/// A caller that holds one CF's writer is refused at once: a build waits
/// for each CF's writer in turn, and another CF's could be held by a
/// thread that waits for this one (before, it waited for the default
/// CF's writer, held below until the call returned: neither went on).
#[test]
fn a_build_from_a_writer_of_another_cf_is_refused_before_it_waits() {
    let vfs = SimVfs::new();
    let db = Arc::new(open(&vfs));
    let a = db.create_cf("a").unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = {
        let db = db.clone();
        std::thread::spawn(move || {
            let tx = db.begin_write().unwrap(); // the default CF's writer
            held_tx.send(()).unwrap();
            release_rx.recv().unwrap();
            drop(tx);
        })
    };
    held_rx.recv().unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<()>>();
    {
        let db = db.clone();
        std::thread::spawn(move || {
            let tx = a.begin_write().unwrap(); // CF `a`'s writer
            done_tx.send(db.build_key_filters()).unwrap();
            drop(tx);
        });
    }
    let r = done_rx.recv_timeout(Duration::from_secs(5));
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    assert!(
        matches!(r, Ok(Err(sheafdb::Error::WouldDeadlock(_)))),
        "{r:?}"
    );
}

/// Found by an adversarial kill campaign: `build_key_filters` failed with
/// "page belongs to cf 322 not cf 324" (and checksum mismatches) when a CF
/// it listed was dropped: its first estimate read the published version
/// without holding it before checking the CF live, so the drop could give
/// the pages to another CF first. It now holds the version, then checks,
/// as a reader does. One thread creates, fills and
/// drops CFs, another writes a long-lived CF (which claims the pages),
/// and the caller builds filters all along; no build may fail.
#[test]
fn filter_builds_beside_cf_drops_do_not_fail() -> Result<()> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = builder()
        .extent_sizes(16 * 4096, 64 * 4096)
        .key_filter_min_keys(16)
        .create(dir.path().join("k.sheaf"))?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<()> {
        let churn = s.spawn(|| -> Result<()> {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("eph{}", i % 3);
                let cf = db.create_cf(&name)?;
                let tx = cf.begin_write()?;
                {
                    let mut t = tx.open_table(T)?;
                    for k in 0..300 + (i % 5) * 400 {
                        t.insert(k.wrapping_mul(0x9e37_79b9_7f4a_7c15), k)?;
                    }
                }
                tx.commit()?;
                db.checkpoint()?;
                db.drop_cf(&name)?;
                i += 1;
            }
            Ok(())
        });
        let other = s.spawn(|| -> Result<()> {
            let cf = db.create_cf("long")?;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let tx = cf.begin_write()?;
                {
                    let mut t = tx.open_table(T)?;
                    for _ in 0..200 {
                        n += 1;
                        t.insert(n.wrapping_mul(0xbf58_476d_1ce4_e5b9), n)?;
                    }
                }
                tx.commit()?;
                db.checkpoint()?;
            }
            Ok(())
        });
        let until = Instant::now() + Duration::from_secs(6);
        let mut builds = 0u32;
        let r = (|| -> Result<()> {
            while Instant::now() < until {
                db.build_key_filters()?;
                builds += 1;
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        churn.join().expect("churn thread panicked")?;
        other.join().expect("writer thread panicked")?;
        r?;
        assert!(builds > 0, "no build ran");
        Ok(())
    })?;
    db.check_integrity()?;
    Ok(())
}
