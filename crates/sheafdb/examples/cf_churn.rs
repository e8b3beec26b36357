//! Column families created and dropped many times between checkpoints
//! (a CF per tenant or per job, thrown away after use), then one
//! checkpoint that gives all the dropped CFs' extents back. Prints
//! figures; it is not a test.
//!
//! Run: `cargo run --release --example cf_churn [-- DROPS [DIR]]`
//!
//! Four CF names are created (each with one 100-byte row) and dropped in
//! turn until `DROPS` (default 10,000) CFs have been dropped, with
//! background checkpoints off so every drop waits for the one explicit
//! checkpoint at the end; then times that checkpoint, `check_integrity`
//! and a reopen. The checkpoint is linear in the drops (design.md
//! "Checkpoint", step 6): doubling `DROPS` should about double it.

mod common;

use std::time::Instant;

use common::in_scratch_dir;
use sheafdb::{Database, Result, TableDefinition};

const ROWS: TableDefinition<u64, &[u8]> = TableDefinition::new("rows");

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let drops: u64 = args.next().map_or(10_000, |s| s.parse().expect("DROPS"));
    in_scratch_dir("sheaf-cf-churn", args.next(), |dir| {
        let path = dir.join("churn.sheaf");
        let db = Database::builder()
            .background_checkpoints(false)
            .create(&path)?;
        let start = Instant::now();
        let (mut dropped, mut n) = (0u64, 0u64);
        while dropped < drops {
            let name = format!("tenant-{}", n % 4);
            if db.cf(&name).is_ok() {
                db.drop_cf(&name)?;
                dropped += 1;
            } else {
                let cf = db.create_cf(&name)?;
                let tx = cf.begin_write()?;
                tx.open_table(ROWS)?.insert(n, [1u8; 100].as_slice())?;
                tx.commit()?;
            }
            n += 1;
        }
        let churn = start.elapsed();
        println!(
            "{dropped} CFs created and dropped in {churn:.2?} ({:.0} creates + drops/s)",
            n as f64 / churn.as_secs_f64()
        );
        let t = Instant::now();
        db.checkpoint()?;
        println!("checkpoint after them: {:.2?}", t.elapsed());
        let t = Instant::now();
        db.check_integrity()?;
        println!("check_integrity: {:.2?}", t.elapsed());
        drop(db);
        let t = Instant::now();
        let db = Database::open(&path)?;
        println!(
            "reopen: {:.2?}, {} CFs, file {} bytes",
            t.elapsed(),
            db.list_cfs()?.len(),
            std::fs::metadata(&path)?.len()
        );
        Ok(())
    })
}
