//! Memory after a very large transaction (design.md "Memory bound",
//! *Large transactions*): once it ends, the process's resident memory
//! falls back to about the page cache's budget, instead of glibc keeping
//! the transaction's freed write set for reuse (it did: a 16 MiB cache
//! held 16 times that after a million-pair load, `examples/cache_memory`).
//!
//! Alone in their file, one at a time (`ALONE`), so that the process
//! runs no other test beside each: resident memory is the whole
//! process's.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use sheafdb::{Database, TableDefinition};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("big");
const PAIRS: u64 = 300_000;
const VALUE: [u8; 150] = [9; 150];
const CACHE_MIB: usize = 8;
/// About 71 MB of keys and values: past the spill bound.
const SPILLED_PAIRS: u64 = 450_000;

/// The tests here run one at a time: resident memory is the process's.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The process's anonymous resident memory, in MiB.
fn rss_anon_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("an RssAnon line");
    kb / 1024.0
}

/// Writes [`PAIRS`] pairs (about 120 MiB of write set and log) in one
/// transaction, then commits or aborts it.
fn big_transaction(db: &Database, commit: bool) {
    let tx = db.begin_write().expect("begin");
    {
        let mut t = tx.open_table(T).expect("table");
        for i in 0..PAIRS {
            t.insert(i.wrapping_mul(0x9E37_79B9_7F4A_7C15), &VALUE[..])
                .expect("insert");
        }
    }
    if commit {
        tx.commit().expect("commit");
    } else {
        drop(tx);
    }
}

#[test]
fn memory_falls_back_after_a_large_transaction_commits_or_is_dropped() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let before = rss_anon_mib();
    let db = Database::builder()
        .cache_size_bytes(CACHE_MIB << 20)
        .create(dir.path().join("big.sheaf"))
        .expect("create");
    for commit in [false, true] {
        big_transaction(&db, commit);
        db.checkpoint().expect("checkpoint");
        let grown = rss_anon_mib() - before;
        // The cache's budget, its huge-page regions, the WAL's buffers and
        // the allocator's arenas: well under the ~120 MiB the transaction
        // held (which stayed resident before).
        assert!(
            grown < 48.0,
            "resident memory grew by {grown:.1} MiB after a {} transaction (cache {CACHE_MIB} MiB)",
            if commit { "committed" } else { "dropped" }
        );
    }
    let rx = db.begin_read().expect("read");
    assert_eq!(rx.open_table(T).expect("table").len().expect("len"), PAIRS);
}

/// Memory after a very large transaction into a table that already has
/// pages (design.md "Memory bound", *Large transactions*): its writes
/// spill to the tree past `txn_spill_bytes` (64 MiB by default; the table
/// then takes its writes directly) and its log record is dropped past
/// `wal_record_max_bytes` (32 MiB), so at its end it holds next to
/// nothing, though it freed far more than `GIVE_BACK_FROM`. Judged by
/// what it held at its end, it gave nothing back: a `malloc_trim` after
/// it returned 74 MiB of 450,000 pairs' freed writes.
///
/// Measured as what a give-back after the transaction still returns (the
/// pages the table's direct writes dirtied are the cache's and stay).
#[test]
fn a_transaction_that_spilled_gives_its_freed_writes_back() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::builder()
        .cache_size_bytes(8 << 20)
        .create(dir.path().join("big.sheaf"))
        .expect("create");
    // The table gets pages first, so the big transaction spills.
    let tx = db.begin_write().expect("begin");
    tx.open_table(T)
        .expect("table")
        .insert(1, &VALUE[..])
        .expect("insert");
    tx.commit().expect("commit");
    db.checkpoint().expect("checkpoint");
    let start = rss_anon_mib();
    let tx = db.begin_write().expect("begin");
    {
        let mut t = tx.open_table(T).expect("table");
        for i in 0..SPILLED_PAIRS {
            t.insert(i.wrapping_mul(0x9E37_79B9_7F4A_7C15), &VALUE[..])
                .expect("insert");
        }
    }
    tx.commit().expect("commit");
    let ended = rss_anon_mib();
    sheafdb::storage::heap::give_back();
    let left = ended - rss_anon_mib();
    assert!(
        left < 16.0,
        "a give-back after the spilled transaction still returned {left:.1} MiB"
    );
    // What stays is the cache (8 MiB, its dirty pages included) and the
    // open database's own structures, not the transaction's writes
    // (~95 MiB of pairs).
    let held = rss_anon_mib() - start;
    eprintln!("held after the spilled transaction: {held:.1} MiB");
    assert!(
        held < 40.0,
        "the open database holds {held:.1} MiB more after the spilled transaction"
    );
}
