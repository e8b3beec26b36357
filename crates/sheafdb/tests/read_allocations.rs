//! Issue 13: the read path allocates nothing once warm. A counting global
//! allocator measures `begin_read`, `open_table` and point gets (found,
//! missing, buffered and in the tree) on the calling thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use sheafdb::storage::mem::MemVfs;
use sheafdb::{Database, TableDefinition};

/// Counts the allocations of the thread that set `COUNTING` (the
/// database's own threads, such as the WAL's, may allocate meanwhile: a
/// global flag counted theirs too, and failed once in a loaded run). The
/// count is per thread too: the tests of this file run in parallel.
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // `try_with`: a thread being torn down has no flag (and counts not).
        if COUNTING.try_with(Cell::get).unwrap_or(false) {
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const T: TableDefinition<&str, u64> = TableDefinition::new("t");

fn count(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get)
}

/// A database whose table `T` holds 2,000 keys (returned), committed and
/// not yet checkpointed.
fn loaded() -> sheafdb::Result<(Database, Vec<String>)> {
    let db = Database::builder()
        .background_checkpoints(false)
        .sync_interval(Duration::from_secs(3600))
        .create_with_vfs(Arc::new(MemVfs::new()), "a.sheaf")?;
    let keys: Vec<String> = (0..2000).map(|i| format!("key-{i:06}")).collect();
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for (i, k) in keys.iter().enumerate() {
            t.insert(k.as_str(), i as u64)?;
        }
    }
    tx.commit()?;
    Ok((db, keys))
}

#[test]
fn open_table_and_point_reads_allocate_nothing_once_warm() -> sheafdb::Result<()> {
    let (db, keys) = loaded()?;
    db.checkpoint()?;
    // Some buffered commits above the tree too.
    for k in keys.iter().step_by(50) {
        let tx = db.begin_write()?;
        tx.open_table(T)?.insert(k.as_str(), 7)?;
        tx.commit()?;
    }
    let read_all = |rx: &sheafdb::ReadTransaction| -> sheafdb::Result<u64> {
        let t = rx.open_table(T)?;
        let mut sum = 0;
        for k in keys.iter().step_by(7) {
            sum += t.get(k.as_str())?.map_or(0, |v| v.value());
        }
        assert!(t.get("missing")?.is_none());
        Ok(sum)
    };
    // Warm up: the catalog is decoded, pages are cached and indexed, the
    // key buffer grows.
    for _ in 0..3 {
        read_all(&db.begin_read()?)?;
    }
    let mut sum = 0;
    let allocations = count(|| {
        for _ in 0..20 {
            let rx = db.begin_read().unwrap();
            sum += read_all(&rx).unwrap();
        }
    });
    assert!(sum > 0);
    assert_eq!(
        allocations, 0,
        "{allocations} allocations in 20 snapshots of 287 point reads and an open_table each"
    );
    // A table opened with other types is refused, and still costs nothing
    // for the right ones afterwards.
    const WRONG: TableDefinition<&str, u32> = TableDefinition::new("t");
    assert!(db.begin_read()?.open_table(WRONG).is_err());
    let allocations = count(|| {
        read_all(&db.begin_read().unwrap()).unwrap();
    });
    assert_eq!(allocations, 0);
    Ok(())
}

#[test]
fn a_range_over_the_tree_allocates_its_bound_and_its_path_only() -> sheafdb::Result<()> {
    let (db, keys) = loaded()?;
    db.checkpoint()?; // the buffer is folded: ranges read the tree alone
    let scan = |rx: &sheafdb::ReadTransaction| -> sheafdb::Result<u64> {
        let t = rx.open_table(T)?;
        let mut sum = 0;
        for k in keys.iter().step_by(13) {
            for e in t.range(k.as_str()..)?.take(10) {
                sum += e?.1.value();
            }
        }
        Ok(sum)
    };
    let rx = db.begin_read()?;
    scan(&rx)?; // warm: pages cached and indexed
    let ranges = keys.iter().step_by(13).count() as u64;
    let mut sum = 0;
    let allocations = count(|| sum = scan(&rx).unwrap());
    assert!(sum > 0);
    // One for the encoded start bound, one for the cursor's path: the
    // cursor takes the bound without copying it, and its steps allocate
    // nothing (keys and values are page slices).
    assert!(
        allocations <= 2 * ranges,
        "{allocations} allocations for {ranges} ranges of 10"
    );
    Ok(())
}
