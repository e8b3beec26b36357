//! What the benchmark examples share: the table and keys of the
//! `sheaf-bench peers` shape (24-byte pseudo-random keys, 150-byte
//! values), a batched insert, and a scratch directory that is removed
//! afterwards. Not an example itself (cargo builds `examples/*.rs`).
#![allow(dead_code, reason = "each example uses part of it")]

use std::path::{Path, PathBuf};

use sheafdb::{Database, Durability, Result, TableDefinition};

/// The table the examples write.
pub const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv0");
/// Pairs a load writes.
pub const LOAD: u64 = 1_000_000;
/// Every value.
pub const VALUE: [u8; 150] = [7; 150];

/// A pseudo-random 24-byte key, unique per `i`.
pub fn key(i: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    k[8..16].copy_from_slice(&i.to_be_bytes());
    k
}

/// Commits `n` new keys from `*next` on, `per_txn` to a transaction.
pub fn insert(db: &Database, next: &mut u64, n: u64, per_txn: u64, d: Durability) -> Result<()> {
    for _ in 0..n / per_txn {
        let mut tx = db.begin_write()?;
        tx.set_durability(d);
        {
            let mut t = tx.open_table(T)?;
            for _ in 0..per_txn {
                t.insert(&key(*next)[..], &VALUE[..])?;
                *next += 1;
            }
        }
        tx.commit()?;
    }
    Ok(())
}

/// Loads [`LOAD`] pairs in one transaction and checkpoints, so the tree
/// holds them all and the write buffer is empty.
pub fn load_tree(db: &Database) -> Result<()> {
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for i in 0..LOAD {
            t.insert(&key(i)[..], &VALUE[..])?;
        }
    }
    tx.commit()?;
    db.checkpoint()
}

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `run` in a new directory `NAME-PID` under `parent` (default: the
/// system temp dir) and removes that directory afterwards, whatever
/// `run` returned. Only the directory it made is removed, never one the
/// user named.
pub fn in_scratch_dir(
    name: &str,
    parent: Option<String>,
    run: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    let parent = parent.map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = parent.join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = run(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A `kB` figure of a `/proc` file (`RssAnon:` of `/proc/self/status`,
/// `AnonHugePages:` of `/proc/self/smaps_rollup`) in MiB; NaN where there
/// is none.
pub fn proc_mib(file: &str, field: &str) -> f64 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}
