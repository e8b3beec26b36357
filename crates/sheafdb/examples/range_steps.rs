//! What a range over the tree costs per entry (design.md "Read path",
//! *Range iteration*). Prints figures; it is not a test.
//!
//! Run: `cargo run --release --example range_steps [-- LEN [RANGES [PASSES [DB]]]]`
//!
//! Loads 1,000,000 pairs (the `sheaf-bench peers` shape: 24-byte keys,
//! 150-byte values) in one transaction and checkpoints, so the tree holds
//! them all and the buffer is empty; then, from one snapshot, times
//! `PASSES` (default 3) passes of `RANGES` (default 500,000) ranges of
//! `LEN` (default 10) entries from random loaded keys, and prints each
//! pass's rate. Every pass reads the same keys, so from the second on the
//! pages are cached and indexed: what is left is the cursor's own work.
//!
//! With `DB` (a path) the loaded file is kept there and reused by the
//! next run, so the reads can be counted without the load under a tool
//! that slows everything down: the figures in design.md are
//! `valgrind --tool=cachegrind --cache-sim=no` of `-- 100 20000 1 DB` and
//! `-- 100 20000 3 DB`, whose difference is two passes' instructions.

mod common;

use std::path::Path;
use std::time::Instant;

use common::{in_scratch_dir, key, load_tree, LOAD, T, VALUE};
use sheafdb::{Database, Result};

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .map_or(default, |s| s.parse().expect("a number"))
}

fn main() -> Result<()> {
    let (len, ranges, passes) = (arg(1, 10), arg(2, 500_000), arg(3, 3));
    match std::env::args().nth(4) {
        Some(path) => run(Path::new(&path), len, ranges, passes),
        None => in_scratch_dir("sheafdb-range-steps", None, |dir| {
            run(&dir.join("ranges.sheaf"), len, ranges, passes)
        }),
    }
}

fn load(path: &Path) -> Result<Database> {
    if path.exists() {
        return Database::builder().open(path);
    }
    let db = Database::builder().create(path)?;
    load_tree(&db)?;
    Ok(db)
}

fn run(path: &Path, len: u64, ranges: u64, passes: u64) -> Result<()> {
    let db = load(path)?;
    let starts: Vec<[u8; 24]> = (0..ranges).map(|i| key(i * 7919 % LOAD)).collect();
    let rx = db.begin_read()?;
    let t = rx.open_table(T)?;
    for pass in 0..passes {
        let start = Instant::now();
        let mut entries = 0u64;
        for k in &starts {
            for e in t.range(&k[..]..)?.take(len as usize) {
                let (k, v) = e?;
                assert_eq!(k.value().len() + v.value().len(), 24 + VALUE.len());
                entries += 1;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "pass {pass}: {:.0}k ranges of {len}/s, {:.1} ns per entry ({entries} entries)",
            ranges as f64 / secs / 1e3,
            secs * 1e9 / entries as f64
        );
    }
    Ok(())
}
