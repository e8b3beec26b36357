//! A table used as a queue: the workload where removed keys pile up as
//! tombstones in the write buffer at the front of a table, and every
//! `pop_first`/`first` would walk them (design.md "End hints"). Prints
//! figures; it is not a test.
//!
//! Run: `cargo run --release --example queue [-- ITEMS [DIR]]`
//!
//! Pushes `ITEMS` (default 50,000) 100-byte jobs under increasing `u64`
//! keys in one transaction, then pops them one `Durability::None`
//! transaction each, printing the pop rate per tenth; then pushes them
//! again, removes all but the last with `retain` in one transaction and
//! times `first()` in read transactions. Checkpoints run as the defaults
//! say (the buffer is folded in the background).

mod common;

use std::time::Instant;

use common::in_scratch_dir;
use sheafdb::{Database, Durability, Result, TableDefinition};

const JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("jobs");

fn push_all(db: &Database, from: u64, items: u64) -> Result<()> {
    let job = [7u8; 100];
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(JOBS)?;
        for k in from..from + items {
            t.insert(k, job.as_slice())?;
        }
    }
    tx.commit()
}

fn pop_all(db: &Database, items: u64) -> Result<()> {
    let tenth = (items / 10).max(1);
    let mut start = Instant::now();
    for i in 0..items {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::None);
        let popped = tx.open_table(JOBS)?.pop_first()?.map(|(k, _)| k.value());
        tx.commit()?;
        assert!(popped.is_some(), "the queue ran dry after {i} pops");
        if (i + 1) % tenth == 0 {
            let secs = start.elapsed().as_secs_f64();
            println!(
                "  pops {:>7}..{:>7}: {:>9.0} pops/s ({:>7.1} µs each)",
                i + 1 - tenth,
                i + 1,
                tenth as f64 / secs,
                secs * 1e6 / tenth as f64
            );
            start = Instant::now();
        }
    }
    Ok(())
}

fn first_after_retain(db: &Database, from: u64, items: u64) -> Result<()> {
    push_all(db, from, items)?;
    let last = from + items - 1;
    let tx = db.begin_write()?;
    tx.open_table(JOBS)?.retain(|k, _| k == last)?;
    tx.commit()?;
    let mut times = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        let rx = db.begin_read()?;
        let first = rx.open_table(JOBS)?.first()?.map(|(k, _)| k.value());
        times.push(start.elapsed().as_secs_f64() * 1e6);
        assert_eq!(first, Some(last));
    }
    times.sort_by(f64::total_cmp);
    println!(
        "  first() after retain removed {}: median {:.1} µs, max {:.1} µs (20 reads)",
        items - 1,
        times[times.len() / 2],
        times[times.len() - 1]
    );
    Ok(())
}

/// The allocated size of each file in `dir`.
fn print_sizes(dir: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let mut files: Vec<_> = (std::fs::read_dir(dir).into_iter().flatten().flatten())
        .filter_map(|e| Some((e.file_name(), e.metadata().ok()?)))
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, m) in files {
        let kib = m.blocks() * 512 / 1024;
        println!("  {}: {kib} KiB allocated", name.to_string_lossy());
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let items: u64 = args
        .next()
        .map(|s| s.parse().expect("ITEMS is a number"))
        .unwrap_or(50_000);
    in_scratch_dir("sheafdb-queue", args.next(), |dir| {
        let db = Database::create(dir.join("queue.sheaf"))?;
        push_all(&db, 0, items)?;
        println!("{items} jobs pushed; popping one per transaction:");
        pop_all(&db, items)?;
        print_sizes(dir);
        first_after_retain(&db, items, items)?;
        Ok(())
    })
}
