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

use std::path::{Path, PathBuf};
use std::time::Instant;

use sheafdb::{Database, Durability, Result, TableDefinition};

const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv0");
const LOAD: u64 = 1_000_000;
const VALUE: [u8; 150] = [7; 150];

/// A pseudo-random 24-byte key, unique per `i`.
fn key(i: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    k[8..16].copy_from_slice(&i.to_be_bytes());
    k
}

fn main() -> Result<()> {
    let parent = std::env::args()
        .nth(1)
        .map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = parent.join(format!("sheaf-large-txns-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = run(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run(dir: &Path) -> Result<()> {
    let path = dir.join("db.sheaf");
    let db = Database::create(&path)?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for i in 0..LOAD {
            t.insert(&key(i)[..], &VALUE[..])?;
        }
    }
    tx.commit()?;
    db.close()?;

    let db = Database::open(&path)?;
    let start = Instant::now();
    let mut next = LOAD;
    for _ in 0..100 {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::Immediate);
        {
            let mut t = tx.open_table(T)?;
            for _ in 0..1_000 {
                t.insert(&key(next)[..], &VALUE[..])?;
                next += 1;
            }
        }
        tx.commit()?;
    }
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
