//! What the key filter (design.md "Key filter") saves the writes of new
//! keys into a loaded table: the same phases with the filter off
//! (`Builder::key_filter_memory(0)`) and on, alternating, one database
//! each. Prints each phase's throughput and the median of the rounds;
//! it is not a test.
//!
//! Run: `cargo run --release --example key_filter [-- ROUNDS [DIR]]`
//!
//! Each round loads 1,000,000 pairs (24-byte pseudo-random keys, 150-byte
//! values, the `sheaf-bench peers` shape) in one durable transaction,
//! then commits 1,000 durable single inserts, 100 durable transactions of
//! 1,000 inserts and 50,000 no-sync single inserts, all of new keys, as
//! `peers` does, with background checkpoints on. `ROUNDS` (default 3)
//! pairs are run; the databases live in a new directory under `DIR`
//! (default: the system temp dir), removed at the end.

mod common;

use std::path::Path;
use std::time::Instant;

use common::{in_scratch_dir, insert, LOAD};
use sheafdb::{Database, Durability, Result};

/// Throughput of each phase, per second.
struct Phases {
    load: f64,
    singles: f64,
    batches: f64,
    nosync: f64,
    skipped: u64,
}

fn run(path: &Path, filter: bool) -> Result<Phases> {
    let b = Database::builder();
    let b = if filter { b } else { b.key_filter_memory(0) };
    let db = b.create(path)?;
    let mut next = 0u64;
    let rate = |n: u64, t: Instant| n as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    insert(&db, &mut next, LOAD, LOAD, Durability::Immediate)?;
    let load = rate(LOAD, t);
    let t = Instant::now();
    insert(&db, &mut next, 1_000, 1, Durability::Immediate)?;
    let singles = rate(1_000, t);
    let t = Instant::now();
    insert(&db, &mut next, 100_000, 1_000, Durability::Immediate)?;
    let batches = rate(100_000, t);
    let t = Instant::now();
    insert(&db, &mut next, 50_000, 1, Durability::None)?;
    let nosync = rate(50_000, t);
    let skipped = db.memory_stats().key_filter_skips;
    drop(db);
    Ok(Phases {
        load,
        singles,
        batches,
        nosync,
        skipped,
    })
}

/// One figure of a round's phases.
type Metric = fn(&Phases) -> f64;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(3, |r| r.parse().expect("ROUNDS"));
    in_scratch_dir("sheafdb-key-filter", args.next(), |dir| {
        let mut results: [Vec<Phases>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            for (i, filter) in [false, true].into_iter().enumerate() {
                let path = dir.join(format!("db-{round}-{filter}.sheaf"));
                let p = run(&path, filter)?;
                println!(
                    "round {round} filter {:<3}: load {:>7.0}/s, durable singles {:>6.0}/s, \
                     100 x 1,000 {:>7.0} inserts/s, no-sync singles {:>7.0}/s ({} descents skipped)",
                    if filter { "on" } else { "off" },
                    p.load,
                    p.singles,
                    p.batches,
                    p.nosync,
                    p.skipped
                );
                results[i].push(p);
                let _ = std::fs::remove_dir_all(dir);
                std::fs::create_dir_all(dir)?;
            }
        }
        let rows: [(&str, Metric); 4] = [
            ("bulk load (pairs/s)", |p| p.load),
            ("durable singles (txn/s)", |p| p.singles),
            ("100 x 1,000 durable (inserts/s)", |p| p.batches),
            ("no-sync singles (txn/s)", |p| p.nosync),
        ];
        println!("\nmedian of {rounds}            filter off   filter on   on/off");
        for (name, f) in rows {
            let off = median(results[0].iter().map(f).collect());
            let on = median(results[1].iter().map(f).collect());
            println!("{name:<32} {off:>10.0} {on:>11.0} {:>8.2}x", on / off);
        }
        Ok(())
    })
}
