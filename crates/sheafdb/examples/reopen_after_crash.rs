//! How long a reopen after a crash takes when the WAL holds many small
//! commits over a large table. Prints figures; it is not a test.
//!
//! Run: `cargo run --release --example reopen_after_crash [-- LOADED [DIR]]`
//!
//! Loads `LOADED` pairs (default 1,000,000; 24-byte keys, 150-byte
//! values) and closes the database, so its trees hold them all. Then a
//! child process (this program again) commits 100,000 no-sync
//! single-row transactions, half updates of loaded keys and half new
//! keys, then syncs the WAL (`Database::sync`) and aborts: no close.
//! The parent copies the crashed directory three times and times
//! `Database::create` on each copy (open plus WAL replay, the page cache
//! cold), then checks the row count. The database lives in a new
//! directory under `DIR` (default: the system temp dir), removed at the
//! end.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::{in_scratch_dir, insert, key, T, VALUE};
use sheafdb::{Database, Durability, Result};

/// Commits the crashed child makes (one more, durable, at the end).
const CRASH_COMMITS: u64 = 100_000;
const FILE: &str = "crash.sheaf";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("--child") {
        let dir = args.next().expect("--child DIR LOADED");
        let loaded: u64 = args.next().and_then(|a| a.parse().ok()).expect("LOADED");
        child(Path::new(&dir), loaded)
    } else {
        let loaded = first.map_or(1_000_000, |a| a.parse().expect("LOADED must be a number"));
        in_scratch_dir("sheafdb-reopen", args.next(), |dir| parent(dir, loaded))
    }
}

fn parent(dir: &Path, loaded: u64) -> Result<()> {
    let base = dir.join("base");
    std::fs::create_dir_all(&base)?;
    let db = Database::create(base.join(FILE))?;
    let mut next = 0;
    insert(&db, &mut next, loaded, loaded.max(1), Durability::Immediate)?;
    db.close()?;
    let exe = std::env::current_exe()?;
    let status = Command::new(exe)
        .arg("--child")
        .arg(&base)
        .arg(loaded.to_string())
        .status()?;
    assert!(!status.success(), "the child was to abort");
    let want = loaded + CRASH_COMMITS.div_ceil(2);
    let mut times = Vec::new();
    for run in 0..3 {
        let copy = dir.join(format!("copy{run}"));
        std::fs::create_dir_all(&copy)?;
        for f in std::fs::read_dir(&base)? {
            let f = f?;
            std::fs::copy(f.path(), copy.join(f.file_name()))?;
        }
        let t = Instant::now();
        let db = Database::create(copy.join(FILE))?;
        let secs = t.elapsed().as_secs_f64();
        let replayed = db.replayed_records();
        let rx = db.begin_read()?;
        let n = rx.open_table(T)?.len()?;
        assert_eq!(n, want, "rows after the reopen");
        println!(
            "reopen {run}: {replayed} records replayed in {:.1} ms ({:.2} M records/s)",
            secs * 1e3,
            replayed as f64 / secs / 1e6
        );
        times.push(secs);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{loaded} keys in the tree, {CRASH_COMMITS} single-row commits in the WAL: \
         median reopen {:.1} ms",
        times[1] * 1e3
    );
    Ok(())
}

/// Commits `CRASH_COMMITS` single rows without syncing (even ones update a
/// loaded key, odd ones add a key), makes them durable with one sync,
/// and aborts.
fn child(dir: &Path, loaded: u64) -> Result<()> {
    let db = Database::create(dir.join(FILE))?;
    let mut fresh = loaded;
    for i in 0..CRASH_COMMITS {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::None);
        {
            let mut t = tx.open_table(T)?;
            let k = if i % 2 == 0 {
                key(i.wrapping_mul(7919) % loaded.max(1))
            } else {
                fresh += 1;
                key(fresh - 1)
            };
            t.insert(&k[..], &VALUE[..])?;
        }
        tx.commit()?;
    }
    db.sync()?;
    std::process::abort();
}
