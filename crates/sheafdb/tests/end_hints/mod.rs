//! The end hints (design.md "End hints", E1) against a `BTreeMap` model,
//! written as an adversarial review of them: random transactions biased to
//! write just past the current ends (inserts, removals, blind deletes, the
//! entry API, `insert_reserve`, pops, `retain_in`, `extract_from_if`,
//! ranges both ways, write cursors), savepoints, spills to direct mode,
//! direct-checkpoint commits, drops, renames, old snapshots, folds in
//! rounds, compaction, crashes and reopens; concurrent CFs with folds and
//! readers; the edges (inverted windows, keys equal to a hint, emptied and
//! refilled tables, backup, read-only open); multimaps and untyped handles.
//! Part of the `model` test binary (one link fewer in CI).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sheafdb::storage::mem::MemVfs;
use sheafdb::storage::sim::SimVfs;
use sheafdb::{Database, ReadableTable, Result, TableDefinition};

type M = BTreeMap<u64, Vec<u8>>;
const T: TableDefinition<u64, &'static [u8]> = TableDefinition::new("t");
const U: TableDefinition<u64, &'static [u8]> = TableDefinition::new("u");
const DOM: u64 = 48;

fn rb(rng: &mut StdRng) -> Bound<u64> {
    match rng.gen_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(rng.gen_range(0..DOM)),
        _ => Bound::Excluded(rng.gen_range(0..DOM)),
    }
}

fn valid(lo: &Bound<u64>, hi: &Bound<u64>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a < b,
        _ => true,
    }
}

fn model_range(m: &M, lo: Bound<u64>, hi: Bound<u64>) -> Vec<u64> {
    if !valid(&lo, &hi) {
        return vec![];
    }
    m.range((lo, hi)).map(|(k, _)| *k).collect()
}

/// Puts `keys` (value `v`) into `T` in one commit, then checkpoints: the
/// keys in the tree, the test's writes in the buffer above them.
fn load_and_checkpoint(db: &Database, keys: std::ops::Range<u64>) -> Result<()> {
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in keys {
            t.insert(k, &b"v"[..])?;
        }
    }
    tx.commit()?;
    db.checkpoint()
}

/// One random range of `t`, both ways, against the model.
fn check_random_range<Tb: ReadableTable<u64, &'static [u8]>>(
    t: &Tb,
    m: &M,
    rng: &mut StdRng,
    ctx: &str,
) -> Result<()> {
    let (lo, hi) = (rb(rng), rb(rng));
    if !valid(&lo, &hi) {
        return Ok(());
    }
    let want = model_range(m, lo, hi);
    let got: Vec<u64> = t
        .range::<u64>((lo, hi))?
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_>>()?;
    assert_eq!(got, want, "{ctx}: range {lo:?}..{hi:?}");
    let got: Vec<u64> = t
        .range::<u64>((lo, hi))?
        .rev()
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_>>()?;
    let mut w = want;
    w.reverse();
    assert_eq!(got, w, "{ctx}: range rev {lo:?}..{hi:?}");
    Ok(())
}

/// Full read checks of any readable table.
fn check_read<Tb: ReadableTable<u64, &'static [u8]>>(
    t: &Tb,
    m: &M,
    rng: &mut StdRng,
    ctx: &str,
) -> Result<()> {
    let all: Vec<u64> = t
        .iter()?
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_>>()?;
    assert_eq!(all, m.keys().copied().collect::<Vec<_>>(), "{ctx}: iter");
    let back: Vec<u64> = t
        .iter()?
        .rev()
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_>>()?;
    assert_eq!(
        back,
        m.keys().rev().copied().collect::<Vec<_>>(),
        "{ctx}: iter rev"
    );
    assert_eq!(t.len()?, m.len() as u64, "{ctx}: len");
    assert_eq!(
        t.first()?.map(|(k, _)| k.value()),
        m.keys().next().copied(),
        "{ctx}: first"
    );
    assert_eq!(
        t.last()?.map(|(k, _)| k.value()),
        m.keys().next_back().copied(),
        "{ctx}: last"
    );
    for _ in 0..12 {
        check_random_range(t, m, rng, ctx)?;
    }
    for k in 0..DOM {
        assert_eq!(
            t.get(k)?.map(|v| v.value().to_vec()).as_ref(),
            m.get(&k),
            "{ctx}: get {k}"
        );
    }
    Ok(())
}

fn check_snapshot_cursor(
    t: &sheafdb::ReadOnlyTable<u64, &'static [u8]>,
    m: &M,
    rng: &mut StdRng,
    ctx: &str,
) -> Result<()> {
    let mut c = t.cursor();
    for _ in 0..10 {
        let k = rng.gen_range(0..DOM);
        let got = c.seek(k)?.map(|(k, _)| k.value());
        assert_eq!(
            got,
            m.range(k..).next().map(|(k, _)| *k),
            "{ctx}: cursor seek {k}"
        );
        let got = c.prev()?.map(|(k, _)| k.value());
        let _ = got;
        let got = c.seek_back(k)?.map(|(k, _)| k.value());
        assert_eq!(
            got,
            m.range(..=k).next_back().map(|(k, _)| *k),
            "{ctx}: cursor seek_back {k}"
        );
        let got = c.current()?.map(|(k, _)| k.value());
        assert_eq!(
            got,
            m.range(..=k).next_back().map(|(k, _)| *k),
            "{ctx}: cursor current"
        );
    }
    assert_eq!(
        c.first()?.map(|(k, _)| k.value()),
        m.keys().next().copied(),
        "{ctx}: cursor first"
    );
    assert_eq!(
        c.last()?.map(|(k, _)| k.value()),
        m.keys().next_back().copied(),
        "{ctx}: cursor last"
    );
    Ok(())
}

fn val(k: u64, rng: &mut StdRng) -> Vec<u8> {
    let mut v = k.to_be_bytes().to_vec();
    v.push(rng.gen());
    v
}

/// A key biased to lie beyond the model's ends (where the hints are).
fn key(m: &M, rng: &mut StdRng) -> u64 {
    let (lo, hi) = (m.keys().next().copied(), m.keys().next_back().copied());
    match rng.gen_range(0..4) {
        0 => lo.map_or(DOM / 2, |l| l.saturating_sub(rng.gen_range(0..3))),
        1 => hi.map_or(DOM / 2, |h| (h + rng.gen_range(0..3)).min(DOM - 1)),
        _ => rng.gen_range(0..DOM),
    }
}

fn ops(
    t: &mut sheafdb::Table<'_, u64, &'static [u8]>,
    m: &mut M,
    rng: &mut StdRng,
    n: usize,
    ctx: &str,
) -> Result<()> {
    for i in 0..n {
        let ctx = format!("{ctx} op {i}");
        match rng.gen_range(0..100) {
            0..=19 => {
                let k = key(m, rng);
                let v = val(k, rng);
                t.insert(k, v.as_slice())?;
                m.insert(k, v);
            }
            20..=24 => {
                let k = key(m, rng);
                let got = t.remove(k)?.map(|v| v.value().to_vec());
                assert_eq!(got, m.remove(&k), "{ctx}: remove");
            }
            25..=27 => {
                let k = key(m, rng);
                t.delete(k)?;
                m.remove(&k);
            }
            28..=30 => {
                let k = key(m, rng);
                let v = val(k, rng);
                t.entry(k)?.or_insert(v.as_slice())?;
                m.entry(k).or_insert(v);
            }
            31..=33 => {
                let k = key(m, rng);
                let v = val(k, rng);
                let mut r = t.insert_reserve(k, v.len())?;
                r.copy_from_slice(&v);
                r.finish()?;
                m.insert(k, v);
            }
            34..=45 => {
                let got = t.pop_first()?.map(|(k, _)| k.value());
                assert_eq!(got, m.pop_first().map(|(k, _)| k), "{ctx}: pop_first");
            }
            46..=55 => {
                let got = t.pop_last()?.map(|(k, _)| k.value());
                assert_eq!(got, m.pop_last().map(|(k, _)| k), "{ctx}: pop_last");
            }
            56..=61 => {
                assert_eq!(
                    t.first()?.map(|(k, _)| k.value()),
                    m.keys().next().copied(),
                    "{ctx}: first"
                );
                assert_eq!(
                    t.last()?.map(|(k, _)| k.value()),
                    m.keys().next_back().copied(),
                    "{ctx}: last"
                );
            }
            62..=67 => {
                let (lo, hi) = (rb(rng), rb(rng));
                if valid(&lo, &hi) {
                    let md = rng.gen_range(1..4u64);
                    let n = t.retain_in::<u64>((lo, hi), |k, _| k % md != 0)?;
                    let gone: Vec<u64> = model_range(m, lo, hi)
                        .into_iter()
                        .filter(|k| k % md == 0)
                        .collect();
                    assert_eq!(n, gone.len() as u64, "{ctx}: retain_in count");
                    for k in gone {
                        m.remove(&k);
                    }
                }
            }
            68..=71 => {
                let (lo, hi) = (rb(rng), rb(rng));
                if valid(&lo, &hi) {
                    let md = rng.gen_range(1..4u64);
                    let take = rng.gen_range(0..4);
                    let got: Vec<u64> = t
                        .extract_from_if::<u64, _>((lo, hi), |k, _| k % md == 0)?
                        .take(take)
                        .map(|e| e.map(|(k, _)| k.value()))
                        .collect::<Result<_>>()?;
                    let want: Vec<u64> = model_range(m, lo, hi)
                        .into_iter()
                        .filter(|k| k % md == 0)
                        .take(take)
                        .collect();
                    assert_eq!(got, want, "{ctx}: extract_from_if");
                    for k in want {
                        m.remove(&k);
                    }
                }
            }
            72..=74 => {
                let md = rng.gen_range(1..5u64);
                let cut = rng.gen_range(0..DOM);
                t.retain(|k, _| k >= cut || k % md == 1)?;
                m.retain(|k, _| *k >= cut || *k % md == 1);
            }
            75..=84 => check_random_range(&*t, m, rng, &ctx)?,
            85..=94 => {
                // Write cursor: seeks, moves, removes and updates.
                let mut c = t.cursor();
                let k = rng.gen_range(0..DOM);
                let mut pos = if rng.gen_bool(0.5) {
                    let got = c.seek(k)?.map(|(k, _)| k.value());
                    let want = m.range(k..).next().map(|(k, _)| *k);
                    assert_eq!(got, want, "{ctx}: wcursor seek {k}");
                    want
                } else {
                    let got = c.seek_back(k)?.map(|(k, _)| k.value());
                    let want = m.range(..=k).next_back().map(|(k, _)| *k);
                    assert_eq!(got, want, "{ctx}: wcursor seek_back {k}");
                    want
                };
                if let Some(mut p) = pos {
                    if rng.gen_bool(0.5) {
                        c.remove()?;
                        m.remove(&p);
                    }
                    for _ in 0..3 {
                        if rng.gen_bool(0.5) {
                            let got = c.next()?.map(|(k, _)| k.value());
                            let want = m
                                .range((Bound::Excluded(p), Bound::Unbounded))
                                .next()
                                .map(|(k, _)| *k);
                            assert_eq!(got, want, "{ctx}: wcursor next from {p}");
                            pos = want;
                        } else {
                            let got = c.prev()?.map(|(k, _)| k.value());
                            let want = m.range(..p).next_back().map(|(k, _)| *k);
                            assert_eq!(got, want, "{ctx}: wcursor prev from {p}");
                            pos = want;
                        }
                        let Some(p2) = pos else { break };
                        if rng.gen_bool(0.3) {
                            let v = val(p2, rng);
                            c.update(v.as_slice())?;
                            m.insert(p2, v);
                        }
                        p = p2;
                    }
                }
            }
            _ => {
                assert_eq!(t.len()?, m.len() as u64, "{ctx}: len");
            }
        }
    }
    Ok(())
}

fn run(seed: u64) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut vfs = SimVfs::new();
    let small = seed.is_multiple_of(3);
    let b = || {
        let mut b = Database::builder()
            .page_size(4096)
            .cache_size_bytes(4 << 20)
            .checkpoint_triggers(u64::MAX, u64::MAX, u64::MAX)
            .background_checkpoints(false);
        if small {
            b = b
                .txn_spill_bytes(256)
                .wal_record_max_bytes(16 * 1024)
                .direct_commit_bytes(512);
        }
        if seed % 4 == 1 {
            b = b.fold_round_pages(1);
        }
        b
    };
    let mut db = b().create_with_vfs(Arc::new(vfs.clone()), "x.sheaf")?;
    let mut m = M::new();
    let mut old: Vec<(sheafdb::ReadTransaction, M)> = Vec::new();
    // Fill.
    {
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(T)?;
            for k in (0..DOM).step_by(2) {
                let v = val(k, &mut rng);
                t.insert(k, v.as_slice())?;
                m.insert(k, v);
            }
        }
        tx.commit()?;
    }
    if seed.is_multiple_of(2) {
        db.checkpoint()?;
    }
    for round in 0..60 {
        let ctx = format!("seed {seed} round {round}");
        let mut tx = db.begin_write()?;
        let mut w = m.clone();
        {
            let mut t = tx.open_table(T)?;
            {
                let n = rng.gen_range(1..15);
                ops(&mut t, &mut w, &mut rng, n, &ctx)?;
            }
        }
        if rng.gen_bool(0.25) {
            let sp = tx.savepoint()?;
            let before = w.clone();
            {
                let mut t = tx.open_table(T)?;
                {
                    let n = rng.gen_range(1..15);
                    ops(&mut t, &mut w, &mut rng, n, &format!("{ctx} after sp"))?;
                }
                check_read(&t, &w, &mut rng, &format!("{ctx} after sp"))?;
            }
            if rng.gen_bool(0.6) {
                tx.restore_savepoint(&sp)?;
                w = before;
                let mut t = tx.open_table(T)?;
                check_read(&t, &w, &mut rng, &format!("{ctx} restored"))?;
                {
                    let n = rng.gen_range(1..15);
                    ops(&mut t, &mut w, &mut rng, n, &format!("{ctx} restored"))?;
                }
            }
        }
        // Another table in the same transaction (a spill folds every tree).
        if rng.gen_bool(0.3) {
            let mut u = tx.open_table(U)?;
            for k in 0..rng.gen_range(0..200u64) {
                u.insert(k, &[7u8; 40][..])?;
            }
        }
        // Drop and re-create, or rename away and back.
        match rng.gen_range(0..30) {
            0 => {
                tx.delete_table("t")?;
                w.clear();
                let mut t = tx.open_table(T)?;
                ops(&mut t, &mut w, &mut rng, 10, &format!("{ctx} recreated"))?;
            }
            1 => {
                tx.delete_table("u")?;
                tx.rename_table("t", "u")?;
                {
                    let mut t = tx.open_table(U)?;
                    ops(&mut t, &mut w, &mut rng, 5, &format!("{ctx} renamed"))?;
                }
                tx.rename_table("u", "t")?;
            }
            _ => {}
        }
        {
            let t = tx.open_table(T)?;
            check_read(&t, &w, &mut rng, &format!("{ctx} writer"))?;
        }
        if rng.gen_bool(0.15) {
            tx.abort()?;
        } else {
            tx.commit()?;
            m = w;
        }
        if rng.gen_bool(0.3) {
            old.push((db.begin_read()?, m.clone()));
        }
        for (i, (rx, want)) in old.iter().enumerate() {
            let t = rx.open_table(T)?;
            let c = format!("{ctx} snapshot {i}");
            check_read(&t, want, &mut rng, &c)?;
            check_snapshot_cursor(&t, want, &mut rng, &c)?;
        }
        if old.len() > 3 {
            old.remove(0);
        }
        match rng.gen_range(0..24) {
            0 | 1 => db.checkpoint()?,
            2 | 3 => drop(db.fold_step()?),
            4 => {
                old.clear();
                drop(db);
                db = b().open_with_vfs(Arc::new(vfs.clone()), "x.sheaf")?;
            }
            5 => {
                old.clear();
                db.compact()?;
            }
            6 => {
                // Crash: the files as they are, no close.
                old.clear();
                let crashed = vfs.process_crash();
                drop(db);
                vfs = crashed;
                db = b().open_with_vfs(Arc::new(vfs.clone()), "x.sheaf")?;
            }
            _ => {}
        }
    }
    let rx = db.begin_read()?;
    let t = rx.open_table(T)?;
    check_read(&t, &m, &mut rng, &format!("seed {seed} end"))?;
    drop(t);
    drop(rx);
    db.check_integrity()?;
    Ok(())
}

#[test]
fn random_against_model() -> Result<()> {
    let n: u64 = std::env::var("SHEAF_END_HINT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    for seed in 0..n {
        run(seed)?;
    }
    Ok(())
}

/// Every read of a snapshot's table agrees with its full scan and `len`
/// (which the hints do not touch).
fn self_consistent<Tb: ReadableTable<u64, &'static [u8]>>(
    t: &Tb,
    rng: &mut StdRng,
    ctx: &str,
) -> Result<()> {
    let all: Vec<u64> = t
        .iter()?
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_>>()?;
    assert_eq!(all.len() as u64, t.len()?, "{ctx}: iter count vs len");
    let mut back: Vec<u64> = t
        .iter()?
        .rev()
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_>>()?;
    back.reverse();
    assert_eq!(all, back, "{ctx}: rev");
    assert_eq!(
        t.first()?.map(|(k, _)| k.value()),
        all.first().copied(),
        "{ctx}: first"
    );
    assert_eq!(
        t.last()?.map(|(k, _)| k.value()),
        all.last().copied(),
        "{ctx}: last"
    );
    let m: M = all.iter().map(|k| (*k, vec![])).collect();
    for _ in 0..4 {
        let (lo, hi) = (rb2(rng, &all), rb2(rng, &all));
        if !valid(&lo, &hi) {
            continue;
        }
        let got: Vec<u64> = t
            .range::<u64>((lo, hi))?
            .map(|e| e.map(|(k, _)| k.value()))
            .collect::<Result<_>>()?;
        assert_eq!(got, model_range(&m, lo, hi), "{ctx}: range {lo:?}..{hi:?}");
    }
    Ok(())
}

fn rb2(rng: &mut StdRng, all: &[u64]) -> Bound<u64> {
    let base = all.first().copied().unwrap_or(1000);
    let k = base.saturating_sub(5) + rng.gen_range(0..(all.len() as u64 + 10));
    match rng.gen_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(k),
        _ => Bound::Excluded(k),
    }
}

/// One queue transaction on `t` against `q`.
fn queue_ops(
    t: &mut sheafdb::Table<'_, u64, &'static [u8]>,
    q: &mut M,
    rng: &mut StdRng,
    ctx: &str,
) -> Result<()> {
    for _ in 0..rng.gen_range(1..6) {
        let (lo, hi) = (q.keys().next().copied(), q.keys().next_back().copied());
        match rng.gen_range(0..10) {
            0 | 1 => {
                let k = hi.map_or(1000, |h| h + rng.gen_range(1..3));
                t.insert(k, &b"v"[..])?;
                q.insert(k, b"v".to_vec());
            }
            2 => {
                let k = lo.map_or(1000, |l| l.saturating_sub(rng.gen_range(1..3)));
                t.insert(k, &b"v"[..])?;
                q.insert(k, b"v".to_vec());
            }
            3 | 4 => assert_eq!(
                t.pop_first()?.map(|(k, _)| k.value()),
                q.pop_first().map(|(k, _)| k),
                "{ctx}"
            ),
            5 | 6 => assert_eq!(
                t.pop_last()?.map(|(k, _)| k.value()),
                q.pop_last().map(|(k, _)| k),
                "{ctx}"
            ),
            7 => {
                let cut = lo.unwrap_or(0) + rng.gen_range(0..4);
                t.retain(|k, _| k >= cut)?;
                q.retain(|k, _| *k >= cut);
            }
            _ => {
                assert_eq!(t.first()?.map(|(k, _)| k.value()), lo, "{ctx}: first");
                assert_eq!(t.last()?.map(|(k, _)| k.value()), hi, "{ctx}: last");
            }
        }
    }
    let all: Vec<u64> = t
        .iter()?
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_>>()?;
    assert_eq!(
        all,
        q.keys().copied().collect::<Vec<_>>(),
        "{ctx}: writer iter"
    );
    Ok(())
}

#[test]
fn concurrent_cfs_folds_and_readers() -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    const Q: TableDefinition<u64, &'static [u8]> = TableDefinition::new("q");
    const Q1: TableDefinition<u64, &'static [u8]> = TableDefinition::new("q1");
    const Q2: TableDefinition<u64, &'static [u8]> = TableDefinition::new("q2");
    let iters: usize = std::env::var("PROBE_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    for seed in 0..3u64 {
        let db = Arc::new(
            Database::builder()
                .page_size(4096)
                .fold_round_pages(1 + seed)
                .buffer_fold_bytes(16 << 10)
                .create_with_vfs(Arc::new(MemVfs::new()), "x.sheaf")?,
        );
        let a = db.default_cf()?;
        let b = db.create_cf("b")?;
        let done = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        // Folder.
        {
            let (db, done) = (db.clone(), done.clone());
            handles.push(std::thread::spawn(move || -> Result<()> {
                while !done.load(Ordering::Relaxed) {
                    match db.fold_step() {
                        Ok(_) | Err(sheafdb::Error::WriterBusy(_)) => {}
                        Err(e) => return Err(e),
                    }
                    db.checkpoint()?;
                }
                Ok(())
            }));
        }
        // Reader.
        {
            let (db, done) = (db.clone(), done.clone());
            let (a, b) = (a.clone(), b.clone());
            handles.push(std::thread::spawn(move || -> Result<()> {
                let mut rng = StdRng::seed_from_u64(seed + 100);
                let _ = &db;
                while !done.load(Ordering::Relaxed) {
                    for (cf, names) in [(&a, &["q"][..]), (&b, &["q1", "q2"][..])] {
                        let rx = cf.begin_read()?;
                        for n in names {
                            let def: TableDefinition<u64, &'static [u8]> = TableDefinition::new(n);
                            match rx.open_table(def) {
                                Ok(t) => self_consistent(&t, &mut rng, &format!("reader {n}"))?,
                                Err(sheafdb::Error::TableNotFound(_)) => {}
                                Err(e) => return Err(e),
                            }
                        }
                    }
                }
                Ok(())
            }));
        }
        // Writer 2: CF b, table q2.
        {
            let (db, done) = (db.clone(), done.clone());
            let b = b.clone();
            handles.push(std::thread::spawn(move || -> Result<()> {
                let _ = &db;
                let mut rng = StdRng::seed_from_u64(seed + 200);
                let mut q = M::new();
                while !done.load(Ordering::Relaxed) {
                    let tx = b.begin_write()?;
                    let mut w = q.clone();
                    {
                        let mut t = tx.open_table(Q2)?;
                        queue_ops(&mut t, &mut w, &mut rng, "w2")?;
                    }
                    if rng.gen_bool(0.1) {
                        tx.abort()?;
                    } else {
                        tx.commit()?;
                        q = w;
                    }
                }
                Ok(())
            }));
        }
        // Writer 1: CF a table q, sometimes together with CF b table q1.
        let mut rng = StdRng::seed_from_u64(seed);
        let (mut qa, mut qb) = (M::new(), M::new());
        for i in 0..iters {
            let ctx = format!("seed {seed} w1 {i}");
            if rng.gen_bool(0.3) {
                let tx = db.begin_write_cfs(&[&a, &b])?;
                let (mut wa, mut wb) = (qa.clone(), qb.clone());
                {
                    let mut t = tx.open_table(&a, Q)?;
                    queue_ops(&mut t, &mut wa, &mut rng, &ctx)?;
                    let mut u = tx.open_table(&b, Q1)?;
                    queue_ops(&mut u, &mut wb, &mut rng, &ctx)?;
                }
                tx.commit()?;
                qa = wa;
                qb = wb;
            } else {
                let tx = a.begin_write()?;
                let mut wa = qa.clone();
                {
                    let mut t = tx.open_table(Q)?;
                    queue_ops(&mut t, &mut wa, &mut rng, &ctx)?;
                }
                tx.commit()?;
                qa = wa;
            }
            let rx = a.begin_read()?;
            let t = rx.open_table(Q)?;
            check_read(&t, &qa, &mut rng, &ctx)?;
        }
        done.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().expect("thread panicked")?;
        }
    }
    Ok(())
}

fn keys<Tb: ReadableTable<u64, &'static [u8]>>(t: &Tb) -> Result<Vec<u64>> {
    t.iter()?.map(|e| e.map(|(k, _)| k.value())).collect()
}

fn buffered_db(vfs: &MemVfs) -> Result<Database> {
    Database::builder()
        .page_size(4096)
        .checkpoint_triggers(u64::MAX, u64::MAX, u64::MAX)
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), "x.sheaf")
}

/// Hints set in one transaction (head 10, tail 20 over 10..=20), then
/// every edge: ranges wholly below/above/at the hints, inverted by the
/// narrowing, cursors seeking outside, extract/retain over such ranges,
/// emptied and refilled, dropped and re-created, renamed, backup,
/// compaction, read-only reopen.
#[test]
fn targeted_edges() -> Result<()> {
    let vfs = MemVfs::new();
    let db = buffered_db(&vfs)?;
    load_and_checkpoint(&db, 0..30)?;
    let tx = db.begin_write()?;
    let mut m: M = (0..30u64).map(|k| (k, b"v".to_vec())).collect();
    {
        let mut t = tx.open_table(T)?;
        for _ in 0..10 {
            assert_eq!(
                t.pop_first()?.map(|(k, _)| k.value()),
                m.pop_first().map(|(k, _)| k)
            );
        }
        for _ in 0..9 {
            assert_eq!(
                t.pop_last()?.map(|(k, _)| k.value()),
                m.pop_last().map(|(k, _)| k)
            );
        }
        assert_eq!(t.first()?.unwrap().0.value(), 10);
        assert_eq!(t.last()?.unwrap().0.value(), 20);
        let mut rng = StdRng::seed_from_u64(1);
        check_read(&t, &m, &mut rng, "writer hints")?;
        for (lo, hi) in [
            (Bound::Unbounded, Bound::Excluded(10)),
            (Bound::Unbounded, Bound::Included(10)),
            (Bound::Excluded(10), Bound::Unbounded),
            (Bound::Included(20), Bound::Unbounded),
            (Bound::Excluded(20), Bound::Unbounded),
            (Bound::Unbounded, Bound::Included(5)),
            (Bound::Included(25), Bound::Unbounded),
            (Bound::Included(10), Bound::Included(10)),
            (Bound::Included(20), Bound::Included(20)),
            (Bound::Included(3), Bound::Included(9)),
            (Bound::Excluded(20), Bound::Included(29)),
        ] {
            let got: Vec<u64> = t
                .range::<u64>((lo, hi))?
                .map(|e| e.map(|(k, _)| k.value()))
                .collect::<Result<_>>()?;
            assert_eq!(got, model_range(&m, lo, hi), "{lo:?}..{hi:?}");
            let got: Vec<u64> = t
                .range::<u64>((lo, hi))?
                .rev()
                .map(|e| e.map(|(k, _)| k.value()))
                .collect::<Result<_>>()?;
            let mut w = model_range(&m, lo, hi);
            w.reverse();
            assert_eq!(got, w, "rev {lo:?}..{hi:?}");
        }
        {
            let mut c = t.cursor();
            assert!(c.seek_back(5)?.is_none());
            assert_eq!(c.next()?.unwrap().0.value(), 10);
            assert!(c.seek(25)?.is_none());
            assert_eq!(c.prev()?.unwrap().0.value(), 20);
        }
        assert_eq!(t.retain_in(..5u64, |_, _| false)?, 0);
        assert_eq!(t.extract_from_if(25u64.., |_, _| true)?.count(), 0);
        // Keys at the hints exactly, then beyond.
        t.insert(10, &b"w"[..])?;
        m.insert(10, b"w".to_vec());
        t.insert(20, &b"w"[..])?;
        m.insert(20, b"w".to_vec());
        check_read(&t, &m, &mut rng, "at hints")?;
        // Empty it, refill inside the old hints, then beyond.
        while t.pop_last()?.is_some() {}
        m.clear();
        assert!(t.first()?.is_none());
        t.insert(15, &b"x"[..])?;
        m.insert(15, b"x".to_vec());
        check_read(&t, &m, &mut rng, "refilled inside")?;
        t.insert(3, &b"x"[..])?;
        t.insert(27, &b"x"[..])?;
        m.insert(3, b"x".to_vec());
        m.insert(27, b"x".to_vec());
        check_read(&t, &m, &mut rng, "refilled beyond")?;
        assert_eq!(t.pop_first()?.unwrap().0.value(), 3);
        m.remove(&3);
        assert_eq!(t.pop_last()?.unwrap().0.value(), 27);
        m.remove(&27);
    }
    tx.commit()?;
    let mut rng = StdRng::seed_from_u64(2);
    {
        let rx = db.begin_read()?;
        let t = rx.open_table(T)?;
        check_read(&t, &m, &mut rng, "snapshot")?;
        check_snapshot_cursor(&t, &m, &mut rng, "snapshot")?;
    }
    // Drop and re-create with the same name, in one transaction and over two.
    let tx = db.begin_write()?;
    {
        let t = tx.open_table(T)?;
        assert_eq!(t.first()?.unwrap().0.value(), 15);
    }
    tx.delete_table("t")?;
    {
        let mut t = tx.open_table(T)?;
        for k in [1u64, 40] {
            t.insert(k, &b"y"[..])?;
        }
        assert_eq!(keys(&t)?, vec![1, 40]);
    }
    tx.rename_table("t", "r")?;
    {
        let mut t = tx.open_table(TableDefinition::<u64, &[u8]>::new("r"))?;
        assert_eq!(t.pop_first()?.unwrap().0.value(), 1);
    }
    tx.commit()?;
    let tx = db.begin_write()?;
    tx.rename_table("r", "t")?;
    {
        let mut t = tx.open_table(T)?;
        t.insert(0, &b"z"[..])?;
        t.insert(50, &b"z"[..])?;
        assert_eq!(keys(&t)?, vec![0, 40, 50]);
    }
    tx.commit()?;
    m = [0u64, 40, 50].into_iter().map(|k| (k, vec![])).collect();
    assert_eq!(keys(&db.begin_read()?.open_table(T)?)?, vec![0, 40, 50]);
    // Backup, compaction, read-only reopen.
    let bvfs = MemVfs::new();
    db.backup_to_vfs(Arc::new(bvfs.clone()), "b.sheaf", |_| {})?;
    let b = Database::builder().open_with_vfs(Arc::new(bvfs), "b.sheaf")?;
    assert_eq!(keys(&b.begin_read()?.open_table(T)?)?, vec![0, 40, 50]);
    db.compact()?;
    assert_eq!(keys(&db.begin_read()?.open_table(T)?)?, vec![0, 40, 50]);
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        assert_eq!(t.pop_first()?.unwrap().0.value(), 0);
        t.insert(45, &b"z"[..])?;
    }
    tx.commit()?;
    drop(db);
    let ro = Database::builder()
        .read_only(true)
        .open_with_vfs(Arc::new(vfs.clone()), "x.sheaf")?;
    assert_eq!(keys(&ro.begin_read()?.open_table(T)?)?, vec![40, 45, 50]);
    let _ = m;
    Ok(())
}

/// A table in direct mode (spilled past txn_spill_bytes) and a commit by
/// direct checkpoint, with hints set before and keys put beyond them after.
#[test]
fn direct_mode() -> Result<()> {
    for spill_first in [false, true] {
        let vfs = MemVfs::new();
        let db = Database::builder()
            .page_size(4096)
            .txn_spill_bytes(4096)
            .wal_record_max_bytes(16 << 10)
            .checkpoint_triggers(u64::MAX, u64::MAX, u64::MAX)
            .background_checkpoints(false)
            .create_with_vfs(Arc::new(vfs.clone()), "x.sheaf")?;
        load_and_checkpoint(&db, 1000..1100)?;
        let tx = db.begin_write()?;
        let mut m: M = (1000..1100u64).map(|k| (k, vec![])).collect();
        {
            let mut t = tx.open_table(T)?;
            if spill_first {
                for k in 2000..3000u64 {
                    t.insert(k, &[1u8; 64][..])?;
                    m.insert(k, vec![]);
                }
            }
            for _ in 0..50 {
                assert_eq!(
                    t.pop_first()?.map(|(k, _)| k.value()),
                    m.pop_first().map(|(k, _)| k)
                );
                assert_eq!(
                    t.pop_last()?.map(|(k, _)| k.value()),
                    m.pop_last().map(|(k, _)| k)
                );
            }
            for k in (0..1000u64).chain(3000..4000) {
                t.insert(k, &[1u8; 64][..])?;
                m.insert(k, vec![]);
            }
            assert_eq!(keys(&t)?, m.keys().copied().collect::<Vec<_>>());
            assert_eq!(t.first()?.unwrap().0.value(), 0);
            assert_eq!(t.last()?.unwrap().0.value(), 3999);
        }
        tx.commit()?;
        let rx = db.begin_read()?;
        assert_eq!(
            keys(&rx.open_table(T)?)?,
            m.keys().copied().collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// Multimap and untyped handles over a table whose typed handle set hints.
#[test]
fn multimap_and_untyped() -> Result<()> {
    use sheafdb::MultimapTableDefinition;
    const MM: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("mm");
    let vfs = MemVfs::new();
    let db = buffered_db(&vfs)?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_multimap_table(MM)?;
        for k in 0..20u64 {
            for v in 0..3u64 {
                t.insert(k, v)?;
            }
        }
        t.remove_all(0u64)?;
        t.remove_all(19u64)?;
        t.insert(0u64, 9u64)?;
    }
    tx.commit()?;
    let rx = db.begin_read()?;
    let t = rx.open_multimap_table(MM)?;
    let n = t.iter()?.count();
    assert_eq!(n as u64, t.len()?);
    drop(t);
    drop(rx);
    // Untyped handle on a hinted table.
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 0..10u64 {
            t.insert(k, &b"v"[..])?;
        }
    }
    tx.commit()?;
    let tx = db.begin_write()?;
    let raw0;
    {
        let mut t = tx.open_table(T)?;
        raw0 = t.pop_first()?.unwrap().0.raw_bytes().to_vec();
        t.pop_last()?;
        t.pop_first()?;
    }
    {
        let mut u = tx.open_untyped_table("t", "u64", "bytes")?;
        u.insert(raw0.as_slice(), &b"q"[..])?;
    }
    {
        let t = tx.open_table(T)?;
        assert_eq!(keys(&t)?, vec![0, 2, 3, 4, 5, 6, 7, 8]);
    }
    tx.commit()?;
    assert_eq!(
        keys(&db.begin_read()?.open_table(T)?)?,
        vec![0, 2, 3, 4, 5, 6, 7, 8]
    );
    Ok(())
}
