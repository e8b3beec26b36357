//! Model tests: random operation sequences against a `BTreeMap` per table,
//! checked after every step, after commit/abort, and after close/reopen;
//! savepoints taken and restored (also after table deletes and renames)
//! in the middle of transactions.

mod common;
mod end_hints;
/// Ranges bounded at a key type's extremes against a model (one link
/// fewer in CI).
mod range_extreme_bounds;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use common::{def, dump, dump_snapshot, rand_key, rand_value, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sheafdb::storage::mem::MemVfs;
use sheafdb::{Database, Result};

fn bound(rng: &mut StdRng) -> Bound<Vec<u8>> {
    match rng.gen_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(rand_key(rng)),
        _ => Bound::Excluded(rand_key(rng)),
    }
}

fn valid_range(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a < b,
        _ => true,
    }
}

fn as_slice_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Every table of a write transaction, read through it.
fn dump_txn(tx: &sheafdb::WriteTransaction) -> Result<Model> {
    let mut model = Model::new();
    for name in tx.list_tables()? {
        model.insert(
            name.clone(),
            common::table_map(&tx.open_table(def(&name))?)?,
        );
    }
    Ok(model)
}

/// One random step inside a write transaction, checked against `m`.
fn step(
    t: &mut sheafdb::Table<'_, &'static [u8], &'static [u8]>,
    m: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    rng: &mut StdRng,
    seed: u64,
) -> Result<()> {
    match rng.gen_range(0..100) {
        0..=44 => {
            let (k, v) = (rand_key(rng), rand_value(rng));
            let old = t.insert(k.as_slice(), v.as_slice())?;
            assert_eq!(
                old.map(|g| g.value().to_vec()),
                m.insert(k, v),
                "seed {seed}"
            );
        }
        45..=56 => {
            let k = rand_key(rng);
            let old = t.remove(k.as_slice())?;
            assert_eq!(old.map(|g| g.value().to_vec()), m.remove(&k), "seed {seed}");
        }
        57..=64 => {
            // Without looking: the count is settled later (len, commit,
            // savepoint restore, spill), which the steps that skip the
            // len check below leave to those.
            let k = rand_key(rng);
            t.delete(k.as_slice())?;
            m.remove(&k);
        }
        65..=74 => {
            let k = rand_key(rng);
            let got = t.get(k.as_slice())?.map(|g| g.value().to_vec());
            assert_eq!(got.as_ref(), m.get(&k), "seed {seed}");
        }
        75..=86 => {
            let (lo, hi) = (bound(rng), bound(rng));
            if !valid_range(&lo, &hi) {
                return Ok(());
            }
            let rev = rng.gen_bool(0.5);
            let take = rng.gen_range(0..50);
            let it = t.range::<&[u8]>((as_slice_bound(&lo), as_slice_bound(&hi)))?;
            let got: Vec<(Vec<u8>, Vec<u8>)> = if rev {
                it.rev()
                    .take(take)
                    .map(|e| e.map(|(k, v)| (k.value().to_vec(), v.value().to_vec())))
                    .collect::<Result<_>>()?
            } else {
                it.take(take)
                    .map(|e| e.map(|(k, v)| (k.value().to_vec(), v.value().to_vec())))
                    .collect::<Result<_>>()?
            };
            let r = m.range((lo, hi)).map(|(k, v)| (k.clone(), v.clone()));
            let want: Vec<_> = if rev {
                r.rev().take(take).collect()
            } else {
                r.take(take).collect()
            };
            assert_eq!(got, want, "seed {seed}: range");
        }
        87..=90 => {
            let got = t
                .pop_first()?
                .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()));
            assert_eq!(got, m.pop_first(), "seed {seed}: pop_first");
        }
        91..=94 => {
            let got = t
                .pop_last()?
                .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()));
            assert_eq!(got, m.pop_last(), "seed {seed}: pop_last");
        }
        95..=96 => {
            let modulo = rng.gen_range(2..5u8);
            t.retain(|k, _| k.iter().map(|&b| b as u32).sum::<u32>() % modulo as u32 != 0)?;
            m.retain(|k, _| k.iter().map(|&b| b as u32).sum::<u32>() % modulo as u32 != 0);
        }
        97..=98 => {
            // Taken lazily, and sometimes dropped early: only what the
            // iterator yielded is removed.
            let take = if rng.gen_bool(0.5) {
                usize::MAX
            } else {
                rng.gen_range(0..4)
            };
            let mut got = Vec::new();
            for e in t.extract_if(|_, v| v.len() > 1000)?.take(take) {
                got.push(e?.0.value().to_vec());
            }
            let want: Vec<Vec<u8>> = m
                .iter()
                .filter(|(_, v)| v.len() > 1000)
                .map(|(k, _)| k.clone())
                .take(take)
                .collect();
            for k in &want {
                m.remove(k);
            }
            assert_eq!(got, want, "seed {seed}: extract_if (take {take})");
        }
        _ => {
            let first = t.first()?.map(|(k, _)| k.value().to_vec());
            let last = t.last()?.map(|(k, _)| k.value().to_vec());
            assert_eq!(first.as_ref(), m.keys().next(), "seed {seed}: first");
            assert_eq!(last.as_ref(), m.keys().next_back(), "seed {seed}: last");
        }
    }
    if rng.gen_bool(0.7) {
        assert_eq!(t.len()?, m.len() as u64, "seed {seed}: len");
    }
    Ok(())
}

fn run_sequence(seed: u64, txns: usize) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    let vfs = MemVfs::new();
    // Odd seeds fold in rounds of a page or two, and sometimes stop after
    // one round: transactions, reads and reopens then meet half-folded
    // trees (design.md "Fold rounds").
    let round_pages = (seed % 2 == 1).then(|| 1 + seed % 3);
    let open = || {
        let b = common::builder();
        let b = match round_pages {
            Some(p) => b.fold_round_pages(p),
            None => b,
        };
        b.create_with_vfs(Arc::new(vfs.clone()), "model.sheaf")
    };
    let mut db: Database = open()?;
    let mut committed = Model::new();
    for _ in 0..txns {
        if rng.gen_bool(0.25) {
            // A key filter built from this state: every insert and removal
            // below checks the old value it returns (design.md "Key
            // filter", F1), across folds, rounds, deletes and reopens.
            db.build_key_filters()?;
        }
        let mut working = committed.clone();
        // A snapshot held across the transaction and any fold it meets.
        let snapshot = match rng.gen_bool(0.3) {
            true => Some((db.begin_read()?, committed.clone())),
            false => None,
        };
        let mut tx = db.begin_write()?;
        // Savepoints taken (with the model then), and ones a restore
        // discarded (restoring them must fail).
        let mut saves: Vec<(sheafdb::Savepoint, Model)> = Vec::new();
        let mut discarded: Vec<sheafdb::Savepoint> = Vec::new();
        for _ in 0..rng.gen_range(1..25) {
            let name = format!("t{}", rng.gen_range(0..4));
            match rng.gen_range(0..100) {
                0..=3 => saves.push((tx.savepoint()?, working.clone())),
                4..=6 if !saves.is_empty() => {
                    let i = rng.gen_range(0..saves.len());
                    tx.restore_savepoint(&saves[i].0)?;
                    working = saves[i].1.clone();
                    discarded.extend(saves.drain(i + 1..).map(|(sp, _)| sp));
                    assert_eq!(dump_txn(&tx)?, working, "seed {seed}: after a restore");
                }
                7 if !discarded.is_empty() => {
                    let r = tx.restore_savepoint(&discarded[0]);
                    assert!(r.is_err(), "seed {seed}: a discarded savepoint restored");
                }
                8 => {
                    let existed = tx.delete_table(&name)?;
                    assert_eq!(existed, working.remove(&name).is_some(), "seed {seed}");
                }
                9 => {
                    let to = format!("t{}", rng.gen_range(0..4));
                    let r = tx.rename_table(&name, &to);
                    if !working.contains_key(&name) {
                        assert!(matches!(r, Err(sheafdb::Error::TableNotFound(_))));
                    } else if name == to {
                        r?; // a rename to its own name changes nothing
                    } else if working.contains_key(&to) {
                        assert!(matches!(r, Err(sheafdb::Error::TableExists(_))));
                    } else {
                        r?;
                        let t = working.remove(&name).expect("checked");
                        working.insert(to, t);
                    }
                }
                _ => {
                    let mut t = tx.open_table(def(&name))?;
                    let m = working.entry(name).or_default();
                    step(&mut t, m, &mut rng, seed)?;
                }
            }
            if rng.gen_bool(0.03) {
                // A checkpoint while this writer is open (its CF is not
                // folded: its writer is busy).
                db.checkpoint()?;
            }
            if rng.gen_bool(0.02) {
                db.fold_step()?; // busy writer: nothing folds
            }
            if rng.gen_bool(0.01) {
                // This thread holds the writer a build needs.
                let r = db.build_key_filters();
                assert!(
                    matches!(r, Err(sheafdb::Error::WouldDeadlock(_))),
                    "seed {seed}: {r:?}"
                );
            }
        }
        match rng.gen_range(0..10) {
            0 => tx.abort()?,
            1 => drop(tx),
            _ => {
                tx.commit()?;
                committed = working;
            }
        }
        assert_eq!(dump(&db)?, committed, "seed {seed}: after commit/abort");
        if rng.gen_bool(0.2) {
            db.checkpoint()?; // folds the buffered commits into the trees
            assert_eq!(dump(&db)?, committed, "seed {seed}: after a fold");
        } else if rng.gen_bool(0.3) {
            db.fold_step()?; // maybe one round of several
            assert_eq!(dump(&db)?, committed, "seed {seed}: after a fold round");
        }
        if let Some((rx, want)) = snapshot {
            assert_eq!(dump_snapshot(&rx)?, want, "seed {seed}: a snapshot changed");
        }
        if rng.gen_bool(0.1) {
            drop(db);
            db = open()?;
            assert_eq!(dump(&db)?, committed, "seed {seed}: after reopen");
            db.check_integrity()?;
        }
    }
    db.check_integrity()?;
    Ok(())
}

#[test]
fn random_sequences_match_btreemap() {
    let cases: u64 = std::env::var("SHEAF_MODEL_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    for seed in 0..cases {
        if let Err(e) = run_sequence(seed, 8) {
            panic!("seed {seed} failed: {e}");
        }
    }
}

#[test]
fn long_sequences_match_btreemap() {
    for seed in 10_000..10_020u64 {
        if let Err(e) = run_sequence(seed, 120) {
            panic!("seed {seed} failed: {e}");
        }
    }
}

#[test]
fn snapshot_isolation_holds_across_commits() -> Result<()> {
    let vfs = MemVfs::new();
    let db = common::builder().create_with_vfs(Arc::new(vfs), "iso.sheaf")?;
    let mut rng = StdRng::seed_from_u64(99);
    let mut model = Model::new();
    let mut snapshots = Vec::new();
    for _ in 0..40 {
        let tx = db.begin_write()?;
        common::random_writes(&tx, &mut model, &mut rng, 30)?;
        tx.commit()?;
        snapshots.push((db.begin_read()?, model.clone()));
    }
    for (rx, want) in &snapshots {
        let mut got = Model::new();
        for name in rx.list_tables()? {
            let t = rx.open_table(def(&name))?;
            let mut map = BTreeMap::new();
            for e in t.iter()? {
                let (k, v) = e?;
                map.insert(k.value().to_vec(), v.value().to_vec());
            }
            got.insert(name, map);
        }
        assert_eq!(&got, want, "an old snapshot changed");
    }
    drop(snapshots);
    db.check_integrity()?;
    Ok(())
}

/// A transaction large enough that its pending writes are applied to the
/// tree part-way (past 4 MiB per table), with model steps between: reads of
/// its own writes, ranges, pops, `retain`, `len()` stay exact across each
/// spill, and the commit and a reopen show the model.
#[test]
fn a_large_transaction_spills_and_still_matches_the_model() -> Result<()> {
    for seed in [7u64, 8] {
        let mut rng = StdRng::seed_from_u64(seed);
        let vfs = MemVfs::new();
        let open = || common::builder().create_with_vfs(Arc::new(vfs.clone()), "big.sheaf");
        let db = open()?;
        let mut model = Model::new();
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(def("big"))?;
            let m = model.entry("big".to_string()).or_default();
            for i in 0..14_000u32 {
                let k = rng.gen::<u32>().to_be_bytes().to_vec();
                let v = vec![(i % 251) as u8; rng.gen_range(200..700)];
                let old = t.insert(k.as_slice(), v.as_slice())?;
                assert_eq!(
                    old.map(|g| g.value().to_vec()),
                    m.insert(k, v),
                    "seed {seed}"
                );
                if i % 40 == 0 {
                    step(&mut t, m, &mut rng, seed)?;
                }
            }
            assert_eq!(t.len()?, m.len() as u64, "seed {seed}");
        }
        tx.commit()?;
        assert_eq!(dump(&db)?, model, "seed {seed}: after commit");
        drop(db);
        let db = open()?;
        assert_eq!(dump(&db)?, model, "seed {seed}: after reopen");
        db.check_integrity()?;
    }
    Ok(())
}

/// A range over one table stays exact while another table of the same
/// transaction is written heavily (its writes spilling into its tree).
#[test]
fn a_range_survives_writes_to_another_table() -> Result<()> {
    let db = common::builder().create_with_vfs(Arc::new(MemVfs::new()), "r.sheaf")?;
    let tx = db.begin_write()?;
    let mut want = Vec::new();
    {
        let mut a = tx.open_table(def("a"))?;
        for i in 0..3000u32 {
            let k = i.to_be_bytes();
            a.insert(k.as_slice(), k.as_slice())?;
            want.push(k.to_vec());
        }
    }
    tx.commit()?;
    let tx = db.begin_write()?;
    {
        let mut a = tx.open_table(def("a"))?;
        // Pending writes in `a` too: every tenth key removed.
        for i in (0..3000u32).step_by(10) {
            a.remove(i.to_be_bytes().as_slice())?;
        }
        want.retain(|k| u32::from_be_bytes(k[..4].try_into().unwrap()) % 10 != 0);
        let mut b = tx.open_table(def("b"))?;
        let mut got = Vec::new();
        let mut n = 0u32;
        for e in a.iter()? {
            got.push(e?.0.value().to_vec());
            for _ in 0..20 {
                b.insert(n.to_be_bytes().as_slice(), vec![1u8; 400].as_slice())?;
                n += 1;
            }
        }
        assert_eq!(got, want);
        assert!(n as u64 * 404 > 4 << 20, "b never spilled");
        assert_eq!(b.len()?, n as u64);
    }
    tx.commit()?;
    db.check_integrity()?;
    Ok(())
}

/// `Table::delete` in large transactions, with no `len()` to settle the
/// count before the commit does: keys that exist in the tree and in the
/// buffer above it, missing keys, keys deleted twice, re-inserted, and
/// written earlier in the same transaction, under a savepoint restore.
/// Checked against the model after commit, after a process crash (replay
/// takes the record's counts) and after a checkpoint, for the three ways
/// a transaction commits: buffered (record in the WAL), spilled into its
/// tree mid-way (`txn_spill_bytes`), and by a direct checkpoint (record
/// past `wal_record_max_bytes`).
#[test]
fn deletes_without_lookups_settle_exact_counts_on_every_commit_path() -> Result<()> {
    use sheafdb::storage::sim::SimVfs;
    for (case, spill, record_max) in [
        ("buffered", 64u64 << 20, 4usize << 20),
        ("spilled", 64 << 10, 4 << 20),
        ("direct", 64 << 20, 4096),
    ] {
        for seed in 0..3u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let vfs = SimVfs::new();
            let builder = || {
                common::builder()
                    .background_checkpoints(false)
                    .txn_spill_bytes(spill)
                    .wal_record_max_bytes(record_max)
            };
            let db = builder().create_with_vfs(Arc::new(vfs.clone()), "d.sheaf")?;
            let key = |i: u32| (i.wrapping_mul(2_654_435_761)).to_be_bytes().to_vec();
            let mut m: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            // 6,000 keys in the tree, then 1,000 more buffered above it.
            for (from, to) in [(0u32, 6000u32), (6000, 7000)] {
                let tx = db.begin_write()?;
                {
                    let mut t = tx.open_table(def("t"))?;
                    for i in from..to {
                        let v = vec![(i % 251) as u8; 40];
                        t.insert(key(i).as_slice(), v.as_slice())?;
                        m.insert(key(i), v);
                    }
                }
                tx.commit()?;
                if to == 6000 {
                    db.checkpoint()?;
                }
            }
            let mut tx = db.begin_write()?;
            let mut saved = None;
            {
                let mut t = tx.open_table(def("t"))?;
                for step in 0..9000u32 {
                    let i = rng.gen_range(0..9000u32); // past 7000: missing
                    match rng.gen_range(0..10) {
                        0 => {
                            let v = vec![7u8; 30];
                            t.insert(key(i).as_slice(), v.as_slice())?;
                            m.insert(key(i), v);
                        }
                        _ => {
                            t.delete(key(i).as_slice())?;
                            m.remove(&key(i));
                        }
                    }
                    // (A savepoint must come before the record outgrows
                    // its limit: at once in the direct case.)
                    if step == if case == "direct" { 0 } else { 3000 } {
                        drop(t);
                        saved = Some((tx.savepoint()?, m.clone()));
                        t = tx.open_table(def("t"))?;
                    }
                }
            }
            // Everything after the savepoint is undone.
            let (sp, at) = saved.expect("taken");
            tx.restore_savepoint(&sp)?;
            m = at;
            {
                let mut t = tx.open_table(def("t"))?;
                for i in 0..500u32 {
                    t.delete(key(i * 13).as_slice())?;
                    m.remove(&key(i * 13));
                }
            }
            tx.commit()?;
            let want: Model = [("t".to_string(), m.clone())].into();
            let ctx = format!("{case} seed {seed}");
            assert_eq!(dump(&db)?, want, "{ctx}: after commit");
            let crashed = vfs.process_crash();
            drop(db);
            let db = builder().open_with_vfs(Arc::new(crashed), "d.sheaf")?;
            assert_eq!(dump(&db)?, want, "{ctx}: after a crash");
            db.checkpoint()?;
            assert_eq!(dump(&db)?, want, "{ctx}: after a fold");
            db.check_integrity()?;
        }
    }
    Ok(())
}

/// Review finding: `delete` of a key longer than any stored key logged a
/// removal, and WAL replay (which checks every key's length) then called
/// the committed record corrupt: the database no longer opened after a
/// crash. Such a key cannot be present; `delete` now logs nothing for it,
/// as `remove` finds nothing.
#[test]
fn a_delete_of_an_oversized_key_survives_a_crash() -> Result<()> {
    use sheafdb::storage::sim::SimVfs;
    let vfs = SimVfs::new();
    let builder = || common::builder().background_checkpoints(false);
    let db = builder().create_with_vfs(Arc::new(vfs.clone()), "d.sheaf")?;
    let tx = db.begin_write()?;
    tx.open_table(def("t"))?
        .insert(b"a".as_slice(), b"1".as_slice())?;
    tx.commit()?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(def("t"))?;
        // (Both in a record that fits the WAL: a direct commit logs none.)
        for len in [3000usize, 20_000] {
            t.delete(vec![b'x'; len].as_slice())?;
        }
        t.delete(b"a".as_slice())?;
        assert_eq!(t.len()?, 0);
    }
    tx.commit()?;
    let crashed = vfs.process_crash();
    drop(db);
    let db = builder().open_with_vfs(Arc::new(crashed), "d.sheaf")?;
    let want: Model = [("t".to_string(), BTreeMap::new())].into();
    assert_eq!(dump(&db)?, want);
    db.check_integrity()?;
    Ok(())
}

/// The ends of `m` as a table's `first()`/`last()` keys.
fn ends_of(m: &BTreeMap<u64, u64>) -> (Option<u64>, Option<u64>) {
    (m.keys().next().copied(), m.keys().next_back().copied())
}

/// Every key of a table, in order.
fn all_keys<T: sheafdb::ReadableTable<u64, u64>>(t: &T) -> Result<Vec<u64>> {
    t.iter()?.map(|e| e.map(|(k, _)| k.value())).collect()
}

/// Every key of the model, in order.
fn model_keys(m: &BTreeMap<u64, u64>) -> Vec<u64> {
    m.keys().copied().collect()
}

/// The ends of a table as a reader sees them.
fn ends_read<T: sheafdb::ReadableTable<u64, u64>>(t: &T) -> Result<(Option<u64>, Option<u64>)> {
    let first = t.first()?.map(|(k, _)| k.value());
    let last = t.last()?.map(|(k, _)| k.value());
    Ok((first, last))
}

/// One transaction of the queue model: pushes at either end (beyond the
/// end hints, E1, or between them), pops, ends, `retain`, savepoints.
fn queue_txn(
    tx: &sheafdb::WriteTransaction,
    q: &mut BTreeMap<u64, u64>,
    rng: &mut StdRng,
    seed: u64,
) -> Result<()> {
    const Q: sheafdb::TableDefinition<u64, u64> = sheafdb::TableDefinition::new("q");
    let mut t = tx.open_table(Q)?;
    for _ in 0..rng.gen_range(1..12) {
        let (lo, hi) = ends_of(q);
        match rng.gen_range(0..100) {
            0..=29 => {
                let k = hi.map_or(1 << 32, |h| h + rng.gen_range(1..4));
                t.insert(k, k)?;
                q.insert(k, k);
            }
            30..=39 => {
                let k = lo.map_or(1 << 32, |l| l.saturating_sub(rng.gen_range(1..4)));
                t.insert(k, k)?;
                q.insert(k, k);
            }
            40..=44 => {
                let k = rng.gen_range(lo.unwrap_or(0)..=hi.unwrap_or(1 << 33));
                t.insert(k, k)?;
                q.insert(k, k);
            }
            45..=69 => {
                let got = t.pop_first()?.map(|(k, _)| k.value());
                assert_eq!(got, q.pop_first().map(|(k, _)| k), "seed {seed}: pop_first");
            }
            70..=84 => {
                let got = t.pop_last()?.map(|(k, _)| k.value());
                assert_eq!(got, q.pop_last().map(|(k, _)| k), "seed {seed}: pop_last");
            }
            85..=89 => {
                let cut = rng.gen_range(lo.unwrap_or(0)..=hi.unwrap_or(0));
                t.retain(|k, _| k >= cut)?;
                q.retain(|k, _| *k >= cut);
            }
            90..=94 => {
                if let Some(k) = q.keys().nth(rng.gen_range(0..q.len().max(1))).copied() {
                    assert!(t.remove(k)?.is_some(), "seed {seed}: remove");
                    q.remove(&k);
                }
            }
            _ => {}
        }
        assert_eq!(
            ends_read(&t)?,
            ends_of(q),
            "seed {seed}: ends in the writer"
        );
        assert_eq!(t.len()?, q.len() as u64, "seed {seed}: len");
    }
    assert_eq!(all_keys(&t)?, model_keys(q), "seed {seed}: iter");
    Ok(())
}

/// A table used as a queue, against a `BTreeMap`: the end hints that spare
/// a walk over the removed front (design.md "End hints", E1) never hide a
/// live key, in the writer, in snapshots older and newer than the hint,
/// across savepoint restores, aborts, folds, checkpoints and reopens.
#[test]
fn a_queue_matches_btreemap_through_end_hints() -> Result<()> {
    const Q: sheafdb::TableDefinition<u64, u64> = sheafdb::TableDefinition::new("q");
    for seed in 0..60u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let vfs = MemVfs::new();
        let open = || common::builder().create_with_vfs(Arc::new(vfs.clone()), "queue.sheaf");
        let mut db = open()?;
        let tx = db.begin_write()?;
        tx.open_table(Q)?;
        tx.commit()?;
        let mut q: BTreeMap<u64, u64> = BTreeMap::new();
        let mut old: Vec<(sheafdb::ReadTransaction, BTreeMap<u64, u64>)> = Vec::new();
        for _ in 0..80 {
            let mut tx = db.begin_write()?;
            let mut working = q.clone();
            let save = rng
                .gen_bool(0.15)
                .then(|| (tx.savepoint(), working.clone()));
            queue_txn(&tx, &mut working, &mut rng, seed)?;
            if let Some((sp, before)) = save.filter(|_| rng.gen_bool(0.5)) {
                tx.restore_savepoint(&sp?)?;
                working = before;
                queue_txn(&tx, &mut working, &mut rng, seed)?;
            }
            if rng.gen_bool(0.15) {
                tx.abort()?;
            } else {
                tx.commit()?;
                q = working;
            }
            if rng.gen_bool(0.3) {
                old.push((db.begin_read()?, q.clone()));
            }
            for (rx, want) in &old {
                let t = rx.open_table(Q)?;
                assert_eq!(
                    ends_read(&t)?,
                    ends_of(want),
                    "seed {seed}: ends in a snapshot"
                );
                assert_eq!(t.len()?, want.len() as u64, "seed {seed}: snapshot len");
            }
            if old.len() > 4 {
                old.remove(0);
            }
            match rng.gen_range(0..20) {
                0 => db.checkpoint()?,
                1 => drop(db.fold_step()?),
                2 => {
                    old.clear();
                    drop(db);
                    db = open()?;
                }
                _ => {}
            }
        }
        let rx = db.begin_read()?;
        let t = rx.open_table(Q)?;
        assert_eq!(all_keys(&t)?, model_keys(&q), "seed {seed}: at the end");
        db.check_integrity()?;
    }
    Ok(())
}

/// A queue written by one thread while another folds and checkpoints: a
/// fold's version must carry the end hints of the head it replaces, not
/// those of the older version it folded (commits made during the fold
/// may have pushed keys past those), E1.
#[test]
fn a_queue_keeps_its_ends_while_folds_run_beside_it() -> Result<()> {
    const Q: sheafdb::TableDefinition<u64, u64> = sheafdb::TableDefinition::new("q");
    for seed in 0..4u64 {
        let db = Arc::new(
            common::builder()
                .fold_round_pages(1 + seed)
                .create_with_vfs(Arc::new(MemVfs::new()), "queue.sheaf")?,
        );
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let folder = {
            let (db, done) = (db.clone(), done.clone());
            std::thread::spawn(move || -> Result<()> {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    match db.fold_step() {
                        Ok(_) | Err(sheafdb::Error::WriterBusy(_)) => {}
                        Err(e) => return Err(e),
                    }
                    db.checkpoint()?;
                }
                Ok(())
            })
        };
        let mut rng = StdRng::seed_from_u64(seed);
        let mut q: BTreeMap<u64, u64> = (1000..1400).map(|k| (k, k)).collect();
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(Q)?;
            for k in q.keys() {
                t.insert(k, k)?;
            }
        }
        tx.commit()?;
        for _ in 0..3000 {
            let tx = db.begin_write()?;
            {
                let mut t = tx.open_table(Q)?;
                assert_eq!(
                    ends_read(&t)?,
                    ends_of(&q),
                    "seed {seed}: ends at the start"
                );
                let (lo, hi) = ends_of(&q);
                match rng.gen_range(0..4) {
                    0 => {
                        let k = lo.unwrap_or(1000).saturating_sub(1);
                        t.insert(k, k)?;
                        q.insert(k, k);
                    }
                    1 => {
                        let k = hi.unwrap_or(1000) + 1;
                        t.insert(k, k)?;
                        q.insert(k, k);
                    }
                    2 => assert_eq!(
                        t.pop_first()?.map(|(k, _)| k.value()),
                        q.pop_first().map(|(k, _)| k),
                        "seed {seed}"
                    ),
                    _ => assert_eq!(
                        t.pop_last()?.map(|(k, _)| k.value()),
                        q.pop_last().map(|(k, _)| k),
                        "seed {seed}"
                    ),
                }
            }
            tx.commit()?;
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        folder.join().expect("the folder panicked")?;
        let rx = db.begin_read()?;
        let t = rx.open_table(Q)?;
        assert_eq!(all_keys(&t)?, model_keys(&q), "seed {seed}");
    }
    Ok(())
}
