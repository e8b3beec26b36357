//! Issue 13: the read path (lock-free page table, page search indexes,
//! allocation-free lookups) keeps every guarantee: readers on many threads
//! over snapshots of different ages see exactly their version while a
//! writer, folds and checkpoints run; the cache stays within its budget
//! under a scan larger than it; a page damaged on disk after it was
//! evicted gives `Corrupted` (or correct data), never wrong data.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use sheafdb::storage::mem::MemVfs;
use sheafdb::storage::sim::SimVfs;
use sheafdb::{Database, Error, ReadTransaction, Result, TableDefinition};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
const KEYS: u64 = 1500;

/// The value every key gets in commit `c`: `c` followed by padding.
fn value_of(c: u64, k: u64) -> Vec<u8> {
    let mut v = c.to_le_bytes().to_vec();
    v.resize(60 + (k % 50) as usize, (c % 251) as u8);
    v
}

/// Reads the whole table of `rx` by point reads, a forward scan and a
/// backward scan; all keys must hold one commit's values. Returns it.
fn one_commit(rx: &ReadTransaction, rng: &mut impl Rng) -> u64 {
    let t = rx.open_table(T).unwrap();
    assert_eq!(t.len().unwrap(), KEYS);
    let c = u64::from_le_bytes(t.get(0).unwrap().unwrap().value()[..8].try_into().unwrap());
    for _ in 0..50 {
        let k = rng.gen_range(0..KEYS);
        assert_eq!(
            t.get(k).unwrap().unwrap().value(),
            value_of(c, k).as_slice(),
            "key {k}"
        );
    }
    let lo = rng.gen_range(0..KEYS);
    let fwd: Vec<u64> = (t.range(lo..).unwrap())
        .map(|e| {
            let (k, v) = e.unwrap();
            assert_eq!(v.value(), value_of(c, k.value()).as_slice());
            k.value()
        })
        .collect();
    assert_eq!(fwd, (lo..KEYS).collect::<Vec<_>>());
    let back: Vec<u64> = (t.range(..lo).unwrap().rev())
        .map(|e| e.unwrap().0.value())
        .collect();
    assert_eq!(back, (0..lo).rev().collect::<Vec<_>>());
    c
}

#[test]
fn eight_readers_over_snapshots_of_different_ages() -> Result<()> {
    let db = common::builder()
        .cache_size_bytes(256 << 10)
        .buffer_fold_bytes(64 << 10)
        .checkpoint_interval(Duration::from_millis(20))
        .create_with_vfs(Arc::new(MemVfs::new()), "r.sheaf")?;
    let write = |c: u64| -> Result<()> {
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(T)?;
            for k in 0..KEYS {
                t.insert(k, value_of(c, k).as_slice())?;
            }
        }
        tx.commit()
    };
    write(0)?;
    let committed = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let checks = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut c = 1;
            while !stop.load(Ordering::Relaxed) {
                write(c).unwrap();
                committed.store(c, Ordering::Release);
                c += 1;
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                db.checkpoint().unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        for r in 0..8u64 {
            let (db, committed, stop, checks) = (&db, &committed, &stop, &checks);
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(r);
                // Snapshots kept alive, with the commit each first showed.
                let mut held: Vec<(ReadTransaction, u64)> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if held.len() < 3 || rng.gen_bool(0.3) {
                        let floor = committed.load(Ordering::Acquire);
                        let rx = db.begin_read().unwrap();
                        let c = one_commit(&rx, &mut rng);
                        assert!(c >= floor, "a snapshot shows commit {c}, {floor} was done");
                        held.push((rx, c));
                    }
                    // An old one still shows exactly its commit.
                    let i = rng.gen_range(0..held.len());
                    let again = one_commit(&held[i].0, &mut rng);
                    assert_eq!(again, held[i].1, "a snapshot changed its commit");
                    if held.len() > 4 {
                        held.remove(rng.gen_range(0..held.len()));
                    }
                    checks.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
    });
    let commits = committed.load(Ordering::Relaxed);
    eprintln!(
        "{commits} commits, {} snapshot checks",
        checks.load(Ordering::Relaxed)
    );
    assert!(commits >= 5, "only {commits} commits");
    assert!(checks.load(Ordering::Relaxed) >= 40);
    db.check_integrity()?;
    Ok(())
}

#[test]
fn a_scan_larger_than_the_cache_stays_within_its_budget() -> Result<()> {
    let budget = 512 << 10;
    let db = Database::builder()
        .cache_size_bytes(budget)
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(MemVfs::new()), "s.sheaf")?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 0..40_000u64 {
            t.insert(k, value_of(k, k).as_slice())?;
        }
    }
    tx.commit()?;
    db.checkpoint()?; // the pages are clean now: only the budget keeps them
    let mut peak = 0;
    for pass in 0..3 {
        let rx = db.begin_read()?;
        let t = rx.open_table(T)?;
        let mut n = 0;
        for e in t.iter()? {
            let (k, v) = e?;
            assert_eq!(v.value(), value_of(k.value(), k.value()).as_slice());
            n += 1;
            if n % 1000 == 0 {
                peak = peak.max(db.memory_stats().clean_bytes);
            }
        }
        assert_eq!(n, 40_000, "pass {pass}");
        for k in (0..40_000u64).step_by(13) {
            assert!(t.get(k)?.is_some());
            peak = peak.max(db.memory_stats().clean_bytes);
        }
    }
    let data = db.cf("default")?.stats()?.pages_in_use * 4096;
    assert!(
        data > 8 * budget as u64,
        "the data ({data}) is not much larger than the cache"
    );
    assert!(
        peak <= budget as u64,
        "clean cache bytes peaked at {peak}, budget {budget}"
    );
    assert!(peak > budget as u64 / 4, "the cache never filled ({peak})");
    Ok(())
}

#[test]
fn a_page_damaged_on_disk_after_eviction_gives_corrupted() -> Result<()> {
    let mut corrupted_seen = 0;
    for seed in 0..8u64 {
        let sim = SimVfs::new();
        let db = Database::builder()
            .cache_size_bytes(256 << 10)
            .background_checkpoints(false)
            .create_with_vfs(Arc::new(sim.clone()), "c.sheaf")?;
        let tx = db.begin_write()?;
        let mut model = BTreeMap::new();
        {
            let mut t = tx.open_table(T)?;
            for k in 0..20_000u64 {
                t.insert(k, value_of(k, k).as_slice())?;
                model.insert(k, value_of(k, k));
            }
        }
        tx.commit()?;
        db.checkpoint()?;
        // Read everything (cached, indexed), then scan again so most
        // pages are evicted.
        for _ in 0..2 {
            let rx = db.begin_read()?;
            for e in rx.open_table(T)?.iter()? {
                e?;
            }
        }
        // Damage bytes of random pages on disk.
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut bytes = sim.file_bytes("c.sheaf").unwrap();
        let pages = bytes.len() / 4096;
        for _ in 0..20 {
            let p = rng.gen_range(2..pages);
            let off = p * 4096 + rng.gen_range(0..4096);
            bytes[off] ^= 1 << rng.gen_range(0..8);
        }
        sim.set_file_bytes("c.sheaf", bytes);
        let rx = db.begin_read()?;
        let t = rx.open_table(T)?;
        for (k, want) in &model {
            match t.get(k) {
                Ok(Some(v)) => assert_eq!(v.value(), want.as_slice(), "seed {seed} key {k}"),
                Ok(None) => panic!("seed {seed}: key {k} vanished"),
                Err(Error::Corrupted { .. }) => corrupted_seen += 1,
                Err(e) => panic!("seed {seed}: key {k}: {e}"),
            }
        }
        for e in t.iter()? {
            match e {
                Ok((k, v)) => assert_eq!(v.value(), model[&k.value()].as_slice()),
                Err(Error::Corrupted { .. }) => break,
                Err(e) => panic!("seed {seed}: scan: {e}"),
            }
        }
        drop((t, rx));
        std::mem::forget(db); // its close would checkpoint over the damage
    }
    assert!(corrupted_seen > 0, "no damaged page was ever read back");
    Ok(())
}
