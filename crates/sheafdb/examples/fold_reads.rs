//! Point reads before, during and after the fold of the `sheaf-bench
//! peers` write phases, with the huge pages the process holds (design.md
//! "Read path", *Huge pages*, the slab's sparse regions). Prints figures;
//! it is not a test.
//!
//! Run: `cargo run --release --example fold_reads [-- DIR]`.
//!
//! Loads 1,000,000 pairs (24-byte pseudo-random keys, 150-byte values) in
//! one transaction, then writes as the peers suite does: 1,000 durable
//! single inserts, 100 durable transactions of 1,000 inserts and 50,000
//! no-sync single inserts. The background checkpointer folds those
//! buffered writes into the tree while eight passes of 1,000,000 point
//! reads of loaded keys run (a snapshot each). After each pass it prints
//! the rate, the bytes still buffered, the process's `AnonHugePages` and
//! the huge pages the system split since the start (`thp_split_pmd` of
//! `/proc/vmstat`; other processes count too). The database lives in a
//! new directory under `DIR` (default: the system temp dir), removed at
//! the end.

mod common;

use std::path::Path;
use std::time::Instant;

use common::{in_scratch_dir, insert, key, proc_mib, LOAD, T};
use sheafdb::{Database, Durability, Result};

fn main() -> Result<()> {
    in_scratch_dir("sheafdb-fold-reads", std::env::args().nth(1), run)
}

fn run(dir: &Path) -> Result<()> {
    let db = Database::create(dir.join("reads.sheaf"))?;
    let splits_before = vmstat("thp_split_pmd");
    let mut next = 0;
    insert(&db, &mut next, LOAD, LOAD, Durability::Immediate)?;
    insert(&db, &mut next, 1_000, 1, Durability::Immediate)?;
    insert(&db, &mut next, 100_000, 1_000, Durability::Immediate)?;
    insert(&db, &mut next, 50_000, 1, Durability::None)?;
    for pass in 0..8u64 {
        let start = Instant::now();
        let rx = db.begin_read()?;
        let t = rx.open_table(T)?;
        let mut found = 0u64;
        for i in 0..LOAD {
            let k = key((i * 7919 + pass) % LOAD);
            found += u64::from(t.get(&k[..])?.is_some());
        }
        assert_eq!(found, LOAD, "every loaded key reads back");
        let rate = LOAD as f64 / start.elapsed().as_secs_f64();
        let m = db.memory_stats();
        println!(
            "pass {pass}: {:>4.0}k reads/s; buffered {:>3} MiB, cached {:>3} MiB; \
             AnonHugePages {:>6.1} MiB; huge pages split {}",
            rate / 1e3,
            m.buffered_bytes >> 20,
            (m.clean_bytes + m.dirty_bytes) >> 20,
            proc_mib("/proc/self/smaps_rollup", "AnonHugePages:"),
            vmstat("thp_split_pmd").saturating_sub(splits_before)
        );
    }
    Ok(())
}

/// A counter of `/proc/vmstat` (0 where there is none).
fn vmstat(name: &str) -> u64 {
    let stat = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    (stat.lines())
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
