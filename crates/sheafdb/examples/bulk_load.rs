//! A bulk load in one transaction, timed in its two halves: the inserts
//! (each recorded in the transaction's write set) and the commit (the
//! sorted batch written into packed pages, made durable by a direct
//! checkpoint). Prints figures; it is not a test.
//!
//! Run: `cargo run --release --example bulk_load [-- RUNS [DIR]]`
//!
//! Each run loads 1,000,000 pairs (24-byte pseudo-random keys, 150-byte
//! values, the `sheaf-bench peers` shape) into a new database and prints
//! the time of the inserts, of the commit and the pairs per second of the
//! whole (default 3 runs). Databases live in a new directory under `DIR`
//! (default: the system temp dir), removed at the end.

mod common;

use std::path::Path;
use std::time::Instant;

use common::{in_scratch_dir, key, LOAD, T, VALUE};
use sheafdb::{Database, Result};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let runs: usize = args
        .next()
        .map_or(3, |s| s.parse().expect("RUNS must be a number"));
    in_scratch_dir("sheafdb-bulk-load", args.next(), |dir| {
        for run in 0..runs {
            load_once(dir, run)?;
        }
        Ok(())
    })
}

fn load_once(dir: &Path, run: usize) -> Result<()> {
    let path = dir.join(format!("bulk-{run}.sheaf"));
    let db = Database::create(&path)?;
    let start = Instant::now();
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for i in 0..LOAD {
            t.insert(&key(i)[..], &VALUE[..])?;
        }
    }
    let inserted = start.elapsed();
    tx.commit()?;
    let total = start.elapsed();
    println!(
        "run {run}: inserts {:.0} ms, commit {:.0} ms, {:.0} pairs/s",
        inserted.as_secs_f64() * 1e3,
        (total - inserted).as_secs_f64() * 1e3,
        LOAD as f64 / total.as_secs_f64()
    );
    drop(db);
    std::fs::remove_file(&path)?;
    Ok(())
}
