//! Point and range reads over a tree alone and over a tree with buffered
//! commits in front of it (the write buffer, design.md "The layer").
//! Prints figures; it is not a test.
//!
//! Run: `cargo run --release --example buffered_reads [-- BUFFERED [DIR]]`
//!
//! Loads 1,000,000 pairs (24-byte pseudo-random keys, 150-byte values) in
//! one transaction and checkpoints, so the tree holds them all. Then
//! commits `BUFFERED` more keys (default 150,000) in no-sync transactions
//! of 1,000, with the fold triggers raised so they stay in the buffer.
//! `BUFFERED` with a trailing `u` (`1000000u`) commits that many updates
//! of loaded keys drawn at random instead (new values; a key may be
//! updated more than once): issue 11's "reads after 1 M random updates
//! are buffered". A trailing `d` (`1000000d`) makes the same updates with
//! the default fold and checkpoint triggers, so the buffer holds what a
//! user's would (folds run in the background as usual; the reads start
//! once the buffer has stopped changing).
//! From one snapshot it times three passes each of 1,000,000 point reads
//! and of 500,000 ranges of 10 entries from random keys, and prints the
//! median of each. Run it with `0` for the tree alone. The database
//! lives in a new directory under `DIR` (default: the system temp dir),
//! removed at the end.

mod common;

use std::path::Path;
use std::time::Instant;

use common::{in_scratch_dir, median};

use sheafdb::{Database, Durability, Result, TableDefinition};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");
const LOADED: u64 = 1_000_000;

/// The `i`-th key: 24 pseudo-random bytes (splitmix64).
fn key(i: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x0123_4567;
    for c in k.chunks_mut(8) {
        x ^= x >> 31;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x ^= x >> 29;
        c.copy_from_slice(&x.to_le_bytes());
    }
    k
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let arg = args.next().unwrap_or_else(|| "150000".into());
    let (count, mode) = match arg.char_indices().last() {
        Some((at, c @ ('u' | 'd'))) => (&arg[..at], Some(c)),
        _ => (arg.as_str(), None),
    };
    let buffered: u64 = count
        .parse()
        .expect("BUFFERED must be a number of keys, optionally followed by `u` or `d`");
    in_scratch_dir("sheafdb-buffered-reads", args.next(), |dir| {
        run(dir, buffered, mode.is_some(), mode == Some('d'))
    })
}

/// The key the `n`-th buffered write goes to: a new key, or (`updates`)
/// a loaded one drawn at random.
fn buffered_key(n: u64, updates: bool) -> [u8; 24] {
    if !updates {
        return key(LOADED + n);
    }
    let mut x = n.wrapping_add(0x5DEE_CE66_D1CE_4E5B);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    key((x ^ (x >> 31)) % LOADED)
}

fn run(dir: &Path, buffered: u64, updates: bool, defaults: bool) -> Result<()> {
    let mut builder = Database::builder();
    if !defaults {
        builder = builder
            .buffer_fold_bytes(1 << 30)
            .buffer_memory(1 << 30, 2 << 30)
            // Nor may the log's growth start a checkpoint (which folds).
            .checkpoint_triggers(8 << 30, 256 << 20, 512 << 20)
            .checkpoint_interval(std::time::Duration::from_secs(3600));
    }
    let db = builder.create(dir.join("reads.sheaf"))?;
    let value = [7u8; 150];
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(TABLE)?;
        for i in 0..LOADED {
            t.insert(&key(i)[..], &value[..])?;
        }
    }
    tx.commit()?;
    db.checkpoint()?;
    let new_value = [8u8; 150];
    for batch in 0..buffered.div_ceil(1000) {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::None);
        {
            let mut t = tx.open_table(TABLE)?;
            let first = batch * 1000;
            for n in first..(first + 1000).min(buffered) {
                t.insert(&buffered_key(n, updates)[..], &new_value[..])?;
            }
        }
        tx.commit()?;
    }
    let cf = db.default_cf()?;
    let mut stats = cf.stats()?;
    // With the defaults, let a fold under way finish: the reads time a
    // settled state.
    let mut settled = !defaults;
    while !settled {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = cf.stats()?;
        settled = now.buffered_bytes == stats.buffered_bytes;
        stats = now;
    }
    let rx = db.begin_read()?;
    let t = rx.open_table(TABLE)?;
    let (mut points, mut ranges) = (Vec::new(), Vec::new());
    for pass in 0..3u64 {
        let start = Instant::now();
        let mut found = 0u64;
        for i in 0..LOADED {
            let j = (i.wrapping_mul(7919) + pass) % LOADED;
            found += u64::from(t.get(&key(j)[..])?.is_some());
        }
        assert_eq!(found, LOADED, "a loaded key was not found");
        points.push(LOADED as f64 / start.elapsed().as_secs_f64());
        let start = Instant::now();
        for i in 0..LOADED / 2 {
            let j = (i.wrapping_mul(7919) + pass) % LOADED;
            let mut n = 0;
            for entry in t.range(&key(j)[..]..)?.take(10) {
                entry?;
                n += 1;
            }
            assert!(n > 0, "a range from a loaded key was empty");
        }
        ranges.push((LOADED / 2) as f64 / start.elapsed().as_secs_f64());
    }
    println!(
        "{LOADED} keys in the tree, {buffered} buffered {}: point reads {:.0}k/s, \
         ranges of 10 {:.0}k/s (medians of 3 passes, one snapshot, one thread; \
         {} MiB buffered)",
        match (updates, defaults) {
            (false, _) => "new keys",
            (true, false) => "updates of loaded keys",
            (true, true) => "updates of loaded keys (default triggers)",
        },
        median(points) / 1e3,
        median(ranges) / 1e3,
        stats.buffered_bytes >> 20
    );
    drop(t);
    drop(rx);
    drop(db);
    Ok(())
}
