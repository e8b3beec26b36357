//! How fast a fold moves buffered commits into the trees: the rate the
//! background checkpointer must keep up with under sustained writers, and
//! what a stalled writer waits for (design.md "Memory bound"). Prints
//! figures; it is not a test.
//!
//! Run: `cargo run --release --example fold_rate [-- ENTRIES [ROUNDS [DIR]]]`
//!
//! Buffers `ENTRIES` (default 200,000) 1 KiB values under pseudo-random
//! `u64` keys (the `sheaf-bench seed` writer shape) in one CF, 1,000 per
//! `Durability::None` transaction, with a buffer large enough that nothing
//! folds on its own, then times `Database::checkpoint` (fold and write).
//! Repeats `ROUNDS` times (default 3) with new keys, so the first round
//! folds into an empty tree and later ones into a growing one. The
//! database lives in a new directory under `DIR` (default: the system
//! temp dir), removed at the end.

mod common;

use std::time::Instant;

use common::in_scratch_dir;
use sheafdb::{Database, Durability, Result, TableDefinition};

const ROWS: TableDefinition<u64, &[u8]> = TableDefinition::new("rows");
const BATCH: u64 = 1_000;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let number = |a: Option<String>| a.map(|s| s.parse::<u64>().expect("arguments are numbers"));
    let entries = number(args.next()).unwrap_or(200_000);
    let rounds = number(args.next()).unwrap_or(3);
    in_scratch_dir("sheafdb-fold-rate", args.next(), |dir| {
        let db = Database::builder()
            .buffer_memory(4 << 30, 8 << 30)
            .buffer_fold_bytes(4 << 30)
            .checkpoint_triggers(u64::MAX, u64::MAX, u64::MAX)
            .create(dir.join("fold.sheaf"))?;
        let value = vec![5u8; 1024];
        println!("{entries} x 1 KiB values per round, folded by Database::checkpoint");
        for round in 0..rounds {
            let start = Instant::now();
            for t in 0..entries / BATCH {
                let mut tx = db.begin_write()?;
                tx.set_durability(Durability::None);
                {
                    let mut table = tx.open_table(ROWS)?;
                    for i in 0..BATCH {
                        let k = (round << 48 | t << 16 | i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                        table.insert(k, value.as_slice())?;
                    }
                }
                tx.commit()?;
            }
            let write = start.elapsed();
            let buffered = db.memory_stats().buffered_bytes;
            let start = Instant::now();
            db.checkpoint()?;
            let fold = start.elapsed();
            println!(
                "  round {round}: write {:>6.0} ms, {:>4} MiB buffered; checkpoint {:>6.0} ms = {:>5.0} MiB/s, {:>7.0} entries/s",
                write.as_secs_f64() * 1e3,
                buffered >> 20,
                fold.as_secs_f64() * 1e3,
                (buffered >> 20) as f64 / fold.as_secs_f64(),
                entries as f64 / fold.as_secs_f64()
            );
        }
        Ok(())
    })
}
