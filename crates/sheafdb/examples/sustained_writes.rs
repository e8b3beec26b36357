//! Sustained no-sync single-insert transactions of random keys over a
//! loaded table: how fast the writer goes once the write buffer has to be
//! folded while it runs (design.md "Memory bound", "Fold rounds"). Prints
//! figures; it is not a test.
//!
//! Run: `cargo run --release --example sustained_writes [-- COMMITS [FOLD_MIB LIMIT_MIB [DIR]]]`
//!
//! Loads 1,000,000 pairs (24-byte pseudo-random keys, 150-byte values, the
//! `sheaf-bench peers` shape) in one transaction, then commits `COMMITS`
//! (default 300,000) new keys, one per `Durability::None` transaction, and
//! prints the rate of every 25,000 commits and its longest commit (with
//! the bytes buffered and dirty after it), the slowest chunk, the whole
//! run's rate and the writer stalls counted (`MemoryStats::buffer_stalls`).
//! `FOLD_MIB LIMIT_MIB` set `Builder::buffer_memory` (default 128 and 512,
//! the library's defaults). The database lives in a new directory under
//! `DIR` (default: the system temp dir), removed at the end.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{in_scratch_dir, insert, LOAD};
use sheafdb::{Database, Durability, Result};

/// Commits per printed chunk.
const CHUNK: u64 = 25_000;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let number = |a: Option<String>, default: u64| {
        a.map_or(default, |s| s.parse().expect("arguments are numbers"))
    };
    let commits = number(args.next(), 300_000);
    let fold_mib = number(args.next(), 128);
    let limit_mib = number(args.next(), 512);
    in_scratch_dir("sheafdb-sustained-writes", args.next(), |dir| {
        run(dir, commits, fold_mib << 20, limit_mib << 20)
    })
}

fn run(dir: &Path, commits: u64, fold: u64, limit: u64) -> Result<()> {
    let db = Database::builder()
        .buffer_memory(fold, limit)
        .create(dir.join("sustained.sheaf"))?;
    let mut next = 0;
    insert(&db, &mut next, LOAD, LOAD, Durability::Immediate)?;
    println!(
        "buffer_memory({} MiB, {} MiB): {commits} no-sync single-insert txns after {LOAD} loaded",
        fold >> 20,
        limit >> 20
    );
    let start = Instant::now();
    let mut slowest = f64::INFINITY;
    let mut done = 0;
    while done < commits {
        let n = CHUNK.min(commits - done);
        let t = Instant::now();
        let mut longest = Duration::ZERO;
        for _ in 0..n {
            let one = Instant::now();
            insert(&db, &mut next, 1, 1, Durability::None)?;
            longest = longest.max(one.elapsed());
        }
        let rate = n as f64 / t.elapsed().as_secs_f64();
        slowest = slowest.min(rate);
        done += n;
        let m = db.memory_stats();
        println!(
            "  {done:>8} commits: {rate:>9.0}/s, longest {:>7.1} ms  (buffered {:>4} MiB, dirty {:>4} MiB)",
            longest.as_secs_f64() * 1e3,
            m.buffered_bytes >> 20,
            m.dirty_bytes >> 20
        );
    }
    println!(
        "whole run {:.0}/s, slowest chunk {slowest:.0}/s, writer stalls {}",
        commits as f64 / start.elapsed().as_secs_f64(),
        db.memory_stats().buffer_stalls
    );
    Ok(())
}
