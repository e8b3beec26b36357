//! Large write transactions over a large table: 100 durable transactions
//! of 1,000 random inserts, then the removal of half the table in one
//! durable transaction (the `sheaf-bench peers` write rows, engine alone).
//! Prints figures; it is not a test.
//!
//! Run: `cargo run --release --example large_txns [-- DIR]`
//!
//! Loads 1,000,000 pairs (24-byte pseudo-random keys, 150-byte values) in
//! one transaction and closes the database, then reopens it (so the page
//! cache starts cold, as after a restart) and times each phase. The
//! database lives in a new directory under `DIR` (default: the system
//! temp dir), removed at the end.

mod common;

use std::path::Path;
use std::time::Instant;

use common::{in_scratch_dir, insert, key, LOAD, T};
use sheafdb::{Database, Durability, Result};

fn main() -> Result<()> {
    in_scratch_dir("sheaf-large-txns", std::env::args().nth(1), run)
}

fn run(dir: &Path) -> Result<()> {
    let path = dir.join("db.sheaf");
    let db = Database::create(&path)?;
    let mut next = 0;
    insert(&db, &mut next, LOAD, LOAD, Durability::Immediate)?;
    db.close()?;

    let db = Database::open(&path)?;
    let start = Instant::now();
    insert(&db, &mut next, 100_000, 1_000, Durability::Immediate)?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "100 durable txns of 1,000 inserts: {:.0} inserts/s",
        100_000.0 / secs
    );

    let start = Instant::now();
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::Immediate);
    {
        let mut t = tx.open_table(T)?;
        for i in (0..LOAD).step_by(2) {
            t.remove(&key(i)[..])?;
        }
    }
    tx.commit()?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "remove 500,000 keys in one durable txn: {:.0} removes/s",
        500_000.0 / secs
    );
    let rx = db.begin_read()?;
    assert_eq!(rx.open_table(T)?.len()?, next - LOAD / 2);
    Ok(())
}
