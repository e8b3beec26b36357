//! How the file grows through the write phases of `sheaf-bench peers`
//! and a removal of half the keys followed by an online backup (issue 14,
//! design.md "Fold rounds", "Column families" and "Holes"). Prints the
//! data file's length and allocated size and the WAL's allocated size
//! after each phase; it is not a test.
//!
//! Run: `cargo run --release --example removal_space [-- PHASES [DIR]]`
//!
//! Loads 1,000,000 pairs (24-byte pseudo-random keys, 150-byte values) in
//! one durable transaction. `PHASES` (default `sbn`) picks what follows,
//! in this order: `s` 1,000 durable single-insert transactions, `b` 100
//! durable transactions of 1,000 inserts, `n` 50,000 no-sync single
//! inserts, `r` 2,000,000 point reads with a snapshot each. Then every
//! second loaded key is removed in one durable transaction and a backup
//! is taken (its snapshot is held while the background checkpointer
//! folds the removal), printing sizes every 150 ms meanwhile, then once
//! a second for 3 s, then after an explicit checkpoint and after
//! `compact()` (with its time and what it moved). With `c` in `PHASES`
//! the compaction follows the backup at once, as in `sheaf-bench peers`
//! (no wait, no checkpoint first: `compact()` finishes the removal's
//! fold itself, and its time includes that). The database
//! lives in a new directory under `DIR` (default: the system temp dir),
//! removed at the end.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{in_scratch_dir, insert, key, LOAD, T};
use sheafdb::{Database, Durability, Result};

/// (data file length, data file allocated, WAL files allocated) in MiB:
/// the WAL's segment files are named after the data file. Allocated is
/// what `du` counts (holes punched in free pages do not count).
fn sizes(dir: &Path) -> (u64, u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut data, mut data_alloc, mut wal) = (0, 0, 0);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let (len, alloc) = e.metadata().map_or((0, 0), |m| (m.len(), m.blocks() * 512));
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "db.sheaf" {
            data += len;
            data_alloc += alloc;
        } else if name.starts_with("db.sheaf") {
            wal += alloc; // not the backup's files
        }
    }
    (data >> 20, data_alloc >> 20, wal >> 20)
}

fn report(dir: &Path, what: &str) {
    let (data, alloc, wal) = sizes(dir);
    println!("{what:<28} data file {data:>4} MiB ({alloc:>4} MiB allocated), WAL {wal:>3} MiB");
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let phases = args.next().unwrap_or_else(|| "sbn".into());
    in_scratch_dir("sheaf-removal", args.next(), |dir| run(dir, &phases))
}

fn run(dir: &Path, phases: &str) -> Result<()> {
    let db = Database::create(dir.join("db.sheaf"))?;
    let mut next = 0;
    insert(&db, &mut next, LOAD, LOAD, Durability::Immediate)?;
    report(dir, "after the load");
    if phases.contains('s') {
        insert(&db, &mut next, 1_000, 1, Durability::Immediate)?;
        report(dir, "after durable singles");
    }
    if phases.contains('b') {
        insert(&db, &mut next, 100_000, 1_000, Durability::Immediate)?;
        report(dir, "after durable batches");
    }
    if phases.contains('n') {
        insert(&db, &mut next, 50_000, 1, Durability::None)?;
        report(dir, "after no-sync singles");
    }
    if phases.contains('r') {
        let mut found = 0u64;
        for i in 0..2_000_000u64 {
            let rx = db.begin_read()?;
            let t = rx.open_table(T)?;
            found += u64::from(t.get(&key(i * 7_919 % LOAD)[..])?.is_some());
        }
        assert_eq!(found, 2_000_000, "a loaded key was missing");
        report(dir, "after point reads");
    }
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::Immediate);
    {
        let mut t = tx.open_table(T)?;
        for i in (0..LOAD).step_by(2) {
            t.remove(&key(i)[..])?;
        }
    }
    tx.commit()?;
    report(dir, "after the removal");
    let backup = dir.join("backup.sheaf");
    let done = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<()> {
        s.spawn(|| {
            let start = Instant::now();
            while !done.load(Ordering::Relaxed) {
                let at = format!("  during backup {:>5} ms", start.elapsed().as_millis());
                report(dir, &at);
                std::thread::sleep(Duration::from_millis(150));
            }
        });
        let r = db.backup_to(&backup);
        done.store(true, Ordering::Relaxed);
        r.map(drop)
    })?;
    std::fs::remove_file(&backup)?;
    report(dir, "after the backup");
    if !phases.contains('c') {
        for s in 1..=3 {
            std::thread::sleep(Duration::from_secs(1));
            report(dir, &format!("  {s} s later"));
        }
        db.checkpoint()?;
        report(dir, "after a checkpoint");
    }
    let start = Instant::now();
    let r = db.compact()?;
    let took = start.elapsed();
    report(dir, "after compact()");
    let check = db.check_integrity()?;
    println!(
        "compact() took {} ms, moved {} pages, {} -> {} bytes (done: {}); \
         {} pages in use",
        took.as_millis(),
        r.pages_moved,
        r.bytes_before,
        r.bytes_after,
        r.done,
        check.pages_in_use
    );
    let rx = db.begin_read()?;
    assert_eq!(rx.open_table(T)?.len()?, next - LOAD / 2);
    Ok(())
}
