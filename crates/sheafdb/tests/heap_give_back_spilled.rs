//! Memory after a very large transaction into a table that already has
//! pages (design.md "Memory bound", *Large transactions*): its writes
//! spill to the tree past `txn_spill_bytes` (64 MiB by default; the table
//! then takes its writes directly) and its log record is dropped past
//! `wal_record_max_bytes` (32 MiB), so at its end it holds next to
//! nothing, though it freed far more than `GIVE_BACK_FROM`. Judged by
//! what it held at its end, it gave nothing back: a `malloc_trim` after
//! it returned 74 MiB of 450,000 pairs' freed writes.
//!
//! Measured as what a give-back after the transaction still returns (the
//! pages the table's direct writes dirtied are the cache's and stay).
//! Alone in its file: resident memory is the whole process's.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use sheafdb::{Database, TableDefinition};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("big");
const VALUE: [u8; 150] = [9; 150];
/// About 71 MB of keys and values: past the spill bound.
const PAIRS: u64 = 450_000;

fn rss_anon_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("an RssAnon line");
    kb / 1024.0
}

#[test]
fn a_transaction_that_spilled_gives_its_freed_writes_back() {
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
    let tx = db.begin_write().expect("begin");
    {
        let mut t = tx.open_table(T).expect("table");
        for i in 0..PAIRS {
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
}
