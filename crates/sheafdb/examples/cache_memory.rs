//! How much memory the page cache really holds: resident memory against
//! the cache's budget after a bulk load, random point reads and a full
//! scan (design.md "Read path", *Huge pages*, memory bound). Prints
//! figures; it is not a test.
//!
//! Run: `cargo run --release --example cache_memory [-- BUDGET_MIB [DIR]]`
//! (default budget 16 MiB). Loads 1,000,000 pairs (the `sheaf-bench
//! peers` shape, about 280 MiB of pages) in one transaction and
//! checkpoints; then reads 1,000,000 random keys and scans the table
//! twice (timing the reads); then updates 200,000 random keys in one transaction,
//! checkpoints and reads 1,000,000 random keys again, printing after each
//! phase the process's anonymous resident
//! memory (`RssAnon` of `/proc/self/status`), the part of it in huge
//! pages (`AnonHugePages` of `/proc/self/smaps_rollup`), and the growth
//! over the figure before the database was opened.

mod common;

use std::path::Path;
use std::time::Instant;

use common::{in_scratch_dir, key, load_tree, proc_mib, LOAD, T};
use sheafdb::{Database, Result};

/// Keys one large transaction updates after the load.
const UPDATES: u64 = 200_000;

fn main() -> Result<()> {
    let budget_mib: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    in_scratch_dir("sheafdb-cache-memory", std::env::args().nth(2), |dir| {
        run(dir, budget_mib)
    })
}

fn report(phase: &str, base: f64, budget_mib: usize) {
    let anon = proc_mib("/proc/self/status", "RssAnon:");
    let huge = proc_mib("/proc/self/smaps_rollup", "AnonHugePages:");
    println!(
        "{phase:<28} RssAnon {anon:>8.1} MiB  (+{:>7.1}, {:>5.2}x budget)  in huge pages {huge:>7.1} MiB",
        anon - base,
        (anon - base) / budget_mib as f64
    );
}

fn run(dir: &Path, budget_mib: usize) -> Result<()> {
    let base = proc_mib("/proc/self/status", "RssAnon:");
    println!("cache budget {budget_mib} MiB; RssAnon before open {base:.1} MiB");
    let db = Database::builder()
        .cache_size_bytes(budget_mib << 20)
        .create(dir.join("memory.sheaf"))?;
    load_tree(&db)?;
    report("after load + checkpoint", base, budget_mib);
    let rx = db.begin_read()?;
    let t = rx.open_table(T)?;
    let start = Instant::now();
    let mut found = 0u64;
    for i in 0..LOAD {
        let k = key((i * 7919) % LOAD);
        found += u64::from(t.get(&k[..])?.is_some());
    }
    assert_eq!(found, LOAD, "every loaded key reads back");
    let rate = LOAD as f64 / start.elapsed().as_secs_f64();
    report(
        &format!("after 1M reads ({:.0}k/s)", rate / 1e3),
        base,
        budget_mib,
    );
    for pass in 0..2 {
        let mut n = 0u64;
        for e in t.iter()? {
            e?;
            n += 1;
        }
        assert_eq!(n, LOAD);
        report(&format!("after full scan {}", pass + 1), base, budget_mib);
    }
    drop(t);
    drop(rx);
    // A large transaction over the loaded tree: its copied pages are
    // one-page runs in the slab's regions, cached clean after the
    // checkpoint and then evicted down to the budget.
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for i in 0..UPDATES {
            t.insert(&key((i * 104_729) % LOAD)[..], &[1u8; 150][..])?;
        }
    }
    tx.commit()?;
    db.checkpoint()?;
    report("after 200k updates + ckpt", base, budget_mib);
    let rx = db.begin_read()?;
    let t = rx.open_table(T)?;
    let start = Instant::now();
    for i in 0..LOAD {
        t.get(&key((i * 7919) % LOAD)[..])?;
    }
    let rate = LOAD as f64 / start.elapsed().as_secs_f64();
    report(
        &format!("after 1M reads ({:.0}k/s)", rate / 1e3),
        base,
        budget_mib,
    );
    drop(t);
    drop(rx);
    drop(db);
    report("after close", base, budget_mib);
    Ok(())
}
