//! Concurrent durable writers in the shape of `sheaf-bench seed`'s
//! writer rows: every writer commits `TXNS` transactions of 1,000 inserts
//! (8-byte pseudo-random keys, 1 KiB values) with `Durability::Immediate`.
//! Prints writes/s for 1, 2, 4 and 8 writers, with the time per
//! transaction spent beginning (a stall shows there), inserting and
//! committing, the WAL syncs, the writer stalls and the bytes buffered at
//! the end. Prints figures; it is not a test.
//!
//! Run: `cargo run --release --example cf_writers [-- [seed] TXNS [FOLD_MIB LIMIT_MIB [DIR]]]`
//!
//! By default each writer count gets a new database and every writer
//! its own CF. With `seed`, one database takes every cell in the seed
//! suite's order (1 writer on its own CF, 1 on a shared CF, 2 on their
//! own, 2 on a shared one, …, 8), so the buffers the earlier cells left
//! are still there, being folded, when the later ones run: writer `w`
//! uses CF `w{w}` in every own-CF cell, as the suite's writer `w` uses
//! its table. `TXNS` defaults to 20 (the seed suite's). `FOLD_MIB
//! LIMIT_MIB` set `Builder::buffer_memory` (default: the library's
//! defaults). The databases live in a new directory under `DIR`
//! (default: the system temp dir), removed at the end.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use common::in_scratch_dir;
use sheafdb::{Database, Durability, Result, TableDefinition};

const ROWS: TableDefinition<u64, &[u8]> = TableDefinition::new("rows");
const BATCH: u64 = 1_000;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    let seed_order = args.next_if(|a| a == "seed").is_some();
    let number = |a: Option<String>| a.map(|s| s.parse::<u64>().expect("arguments are numbers"));
    let txns = number(args.next()).unwrap_or(20);
    let memory = match (number(args.next()), number(args.next())) {
        (Some(fold), Some(limit)) => Some((fold << 20, limit << 20)),
        _ => None,
    };
    let create = |path: &Path| {
        let mut builder = Database::builder();
        if let Some((fold, limit)) = memory {
            builder = builder.buffer_memory(fold, limit);
        }
        builder.create(path)
    };
    in_scratch_dir("sheafdb-cf-writers", args.next(), |dir| {
        println!("{txns} Immediate txns of {BATCH} x 1 KiB per writer");
        if seed_order {
            let db = create(&dir.join("seed.sheaf"))?;
            for (cell, writers) in [1u64, 2, 4, 8].into_iter().enumerate() {
                for shared in [false, true] {
                    run(
                        &db,
                        writers,
                        txns,
                        shared,
                        2 * cell as u64 + u64::from(shared),
                    )?;
                }
            }
            return Ok(());
        }
        for writers in [1u64, 2, 4, 8] {
            let db = create(&dir.join(format!("w{writers}.sheaf")))?;
            run(&db, writers, txns, false, 0)?;
        }
        Ok(())
    })
}

/// One cell: `writers` threads, on CFs of their own or all on one
/// (`shared`); `cell` keeps the keys of different cells apart.
fn run(db: &Database, writers: u64, txns: u64, shared: bool, cell: u64) -> Result<()> {
    let cfs = (0..writers)
        .map(|w| match shared {
            true => db.cf_or_create("shared"),
            false => db.cf_or_create(&format!("w{w}")),
        })
        .collect::<Result<Vec<_>>>()?;
    let stalls = db.memory_stats().buffer_stalls;
    let syncs = db.wal_stats().syncs;
    let value = vec![5u8; 1024];
    // Nanoseconds all writers spent beginning, inserting and committing.
    let phases: [AtomicU64; 3] = Default::default();
    let start = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (cfs.iter().enumerate())
            .map(|(w, cf)| {
                let (value, phases) = (&value, &phases);
                s.spawn(move || -> Result<()> {
                    let lap = |i: usize, since: &mut Instant| {
                        let ns = since.elapsed().as_nanos() as u64;
                        phases[i].fetch_add(ns, Ordering::Relaxed);
                        *since = Instant::now();
                    };
                    for t in 0..txns {
                        let mut since = Instant::now();
                        let mut tx = cf.begin_write()?;
                        tx.set_durability(Durability::Immediate);
                        lap(0, &mut since);
                        {
                            let mut table = tx.open_table(ROWS)?;
                            for i in 0..BATCH {
                                let k = (cell << 56 | (w as u64) << 48 | t << 24 | i)
                                    .wrapping_mul(0x9E37_79B9_7F4A_7C15);
                                table.insert(k, value.as_slice())?;
                            }
                        }
                        lap(1, &mut since);
                        tx.commit()?;
                        lap(2, &mut since);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("writer panicked")?;
        }
        Ok(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    let writes = (writers * txns * BATCH) as f64;
    let mem = db.memory_stats();
    let per_txn =
        |i: usize| phases[i].load(Ordering::Relaxed) as f64 / (writers * txns) as f64 / 1e6;
    println!(
        "  {writers} writers{}: {:>8.0} writes/s  {:>6.1} ms  per txn: begin {:.2} ms, inserts {:.2} ms, commit {:.2} ms  {:>5} WAL syncs  {:>3} stalls  {:>4} MiB buffered",
        if shared { ", one CF" } else { ", own CFs" },
        writes / secs,
        secs * 1e3,
        per_txn(0),
        per_txn(1),
        per_txn(2),
        db.wal_stats().syncs - syncs,
        mem.buffer_stalls - stalls,
        mem.buffered_bytes >> 20
    );
    Ok(())
}
