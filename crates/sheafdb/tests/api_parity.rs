//! The table API users of redb reach for (issue 16): savepoints, multimap
//! tables, cursors, the entry API, lazy `extract_if`, `insert_reserve`,
//! stats, `ReadableTable`, a `Send` write transaction. Model tests check
//! each against `BTreeMap`/`BTreeSet`; savepoints and multimaps also
//! through reopen and simulated power loss (seeds printed; `SHEAF_SEED=n`
//! replays one case).

mod common;
/// redb's own test suite, ported (a module here: one link fewer in CI).
mod redb_suite;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use common::{builder, def, dump, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sheafdb::storage::mem::MemVfs;
use sheafdb::storage::sim::{Fault, SimVfs};
use sheafdb::{
    Database, Entry, Error, MultimapTableDefinition, ReadableTable, Result, TableDefinition,
};

const NUMS: TableDefinition<u64, u64> = TableDefinition::new("nums");
const TAGS: MultimapTableDefinition<u32, &str> = MultimapTableDefinition::new("tags");

fn mem_db() -> Database {
    builder()
        .create_with_vfs(Arc::new(MemVfs::new()), "p.sheaf")
        .unwrap()
}

fn nums(db: &Database) -> Result<BTreeMap<u64, u64>> {
    let rx = db.begin_read()?;
    let t = match rx.open_table(NUMS) {
        Ok(t) => t,
        Err(Error::TableNotFound(_)) => return Ok(BTreeMap::new()),
        Err(e) => return Err(e),
    };
    t.iter()?
        .map(|e| e.map(|(k, v)| (k.value(), v.value())))
        .collect()
}

// ---------------------------------------------------------------- savepoints

#[test]
fn savepoints_nest_and_restore_undoes_writes_and_catalog_changes() -> Result<()> {
    let db = mem_db();
    let tx = db.begin_write()?;
    tx.open_table(NUMS)?.insert(1, 10)?;
    let mut tx = tx;
    let sp1 = tx.savepoint()?;
    {
        let mut t = tx.open_table(NUMS)?;
        t.insert(2, 20)?;
        t.remove(1)?;
    }
    tx.open_table(def("created"))?
        .insert(b"k".as_slice(), b"v".as_slice())?;
    let sp2 = tx.savepoint()?;
    tx.rename_table("created", "renamed")?;
    tx.delete_table("nums")?;
    assert_eq!(tx.list_tables()?, ["renamed"]);
    // Back to sp2: the rename and the delete are undone.
    tx.restore_savepoint(&sp2)?;
    assert_eq!(tx.list_tables()?, ["created", "nums"]);
    assert_eq!(tx.open_table(NUMS)?.get(2)?.map(|g| g.value()), Some(20));
    // Back to sp1: the table created after it is gone too, and sp2 with it.
    tx.restore_savepoint(&sp1)?;
    assert_eq!(tx.list_tables()?, ["nums"]);
    assert!(matches!(
        tx.restore_savepoint(&sp2),
        Err(Error::InvalidArgument(_))
    ));
    {
        let t = tx.open_table(NUMS)?;
        assert_eq!(t.get(1)?.map(|g| g.value()), Some(10));
        assert_eq!(t.get(2)?.map(|g| g.value()), None);
        assert_eq!(t.len()?, 1);
    }
    // sp1 stays valid: restore it again after more writes.
    tx.open_table(NUMS)?.insert(3, 30)?;
    tx.restore_savepoint(&sp1)?;
    tx.open_table(NUMS)?.insert(4, 40)?;
    tx.commit()?;
    assert_eq!(nums(&db)?, BTreeMap::from([(1, 10), (4, 40)]));
    assert_eq!(db.begin_read()?.list_tables()?, ["nums"]);
    db.check_integrity()?;
    Ok(())
}

#[test]
fn a_savepoint_of_another_transaction_is_refused() -> Result<()> {
    let db = mem_db();
    let other = db.cf_or_create("other")?;
    let tx = db.begin_write()?;
    let sp = tx.savepoint()?;
    tx.abort()?;
    let mut tx = db.begin_write()?;
    assert!(matches!(
        tx.restore_savepoint(&sp),
        Err(Error::InvalidArgument(_))
    ));
    let mut otx = other.begin_write()?;
    let own = tx.savepoint()?;
    assert!(matches!(
        otx.restore_savepoint(&own),
        Err(Error::InvalidArgument(_))
    ));
    tx.restore_savepoint(&own)?;
    Ok(())
}

#[test]
fn savepoints_span_the_cfs_of_a_multi_cf_transaction() -> Result<()> {
    let db = mem_db();
    let a = db.cf_or_create("a")?;
    let b = db.cf_or_create("b")?;
    let mut tx = db.begin_write_cfs(&[&a, &b])?;
    tx.open_table(&a, NUMS)?.insert(1, 1)?;
    tx.open_table(&b, NUMS)?.insert(1, 1)?;
    let sp = tx.savepoint()?;
    tx.open_table(&a, NUMS)?.insert(2, 2)?;
    tx.open_multimap_table(&b, TAGS)?.insert(7, "x")?;
    tx.restore_savepoint(&sp)?;
    tx.open_table(&b, NUMS)?.insert(3, 3)?;
    tx.commit()?;
    let rx = db.begin_read()?;
    let read = |cf| -> Result<Vec<u64>> {
        rx.open_table_in(cf, NUMS)?
            .iter()?
            .map(|e| e.map(|(k, _)| k.value()))
            .collect()
    };
    assert_eq!(read(&a)?, [1]);
    assert_eq!(read(&b)?, [1, 3]);
    assert!(matches!(
        rx.open_multimap_table_in(&b, TAGS),
        Err(Error::TableNotFound(_))
    ));
    Ok(())
}

/// A transaction whose record outgrows `wal_record_max_bytes` after a
/// savepoint keeps the record (for the restore) and commits by a direct
/// checkpoint; one that outgrew it before has no savepoint to take.
#[test]
fn savepoints_work_past_the_wal_record_limit() -> Result<()> {
    let vfs = MemVfs::new();
    let open = || builder().create_with_vfs(Arc::new(vfs.clone()), "big.sheaf");
    let db = open()?;
    let mut tx = db.begin_write()?;
    let sp = tx.savepoint()?;
    let big = vec![7u8; 1000];
    {
        let mut t = tx.open_table(def("t"))?;
        for i in 0..200u32 {
            t.insert(i.to_be_bytes().as_slice(), big.as_slice())?;
        }
    }
    tx.restore_savepoint(&sp)?;
    {
        let mut t = tx.open_table(def("t"))?;
        for i in 0..150u32 {
            t.insert(i.to_be_bytes().as_slice(), big.as_slice())?;
        }
    }
    tx.commit()?;
    let want: BTreeMap<Vec<u8>, Vec<u8>> = (0..150u32)
        .map(|i| (i.to_be_bytes().to_vec(), big.clone()))
        .collect();
    assert_eq!(dump(&db)?, Model::from([("t".to_string(), want.clone())]));
    // Past the limit without a savepoint: a clear error, nothing lost.
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(def("u"))?;
        for i in 0..200u32 {
            t.insert(i.to_be_bytes().as_slice(), big.as_slice())?;
        }
    }
    assert!(matches!(tx.savepoint(), Err(Error::InvalidArgument(_))));
    tx.commit()?;
    drop(db);
    let db = open()?;
    assert_eq!(dump(&db)?["t"], want);
    assert_eq!(dump(&db)?["u"].len(), 200);
    db.check_integrity()?;
    Ok(())
}

/// A savepoint restored after the transaction failed (a panicking
/// predicate) makes it usable again; without the restore it cannot commit.
#[test]
fn a_panicking_predicate_fails_the_transaction_until_a_restore() -> Result<()> {
    let db = mem_db();
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(NUMS)?;
        for i in 0..100 {
            t.insert(i, i)?;
        }
    }
    tx.commit()?;
    for restore in [false, true] {
        let mut tx = db.begin_write()?;
        let sp = tx.savepoint()?;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut t = tx.open_table(NUMS).unwrap();
            t.retain(|k, _| {
                assert!(k < 50, "predicate panics half-way");
                k % 2 == 0
            })
        }));
        assert!(r.is_err(), "the predicate panicked");
        if restore {
            tx.restore_savepoint(&sp)?;
            tx.open_table(NUMS)?.insert(1000, 1)?;
            tx.commit()?;
        } else {
            let r = tx.open_table(NUMS)?.insert(1000, 1);
            assert!(matches!(r, Err(Error::TransactionFailed(_))), "{r:?}");
            assert!(matches!(tx.commit(), Err(Error::TransactionFailed(_))));
        }
    }
    let got = nums(&db)?;
    assert_eq!(got.len(), 101, "nothing of the failed transaction landed");
    assert_eq!(got.get(&1000), Some(&1));
    db.check_integrity()?;
    Ok(())
}

// ------------------------------------------------------------------ multimap

type MultiModel = BTreeMap<u32, BTreeSet<String>>;

/// Values with 00 bytes and prefixes of each other exercise the escape.
fn rand_tag(rng: &mut StdRng) -> String {
    const PARTS: [&str; 6] = ["", "a", "a\0", "a\0b", "b", "\0"];
    let mut s = String::new();
    for _ in 0..rng.gen_range(0..3) {
        s.push_str(PARTS[rng.gen_range(0..PARTS.len())]);
    }
    s
}

fn read_multimap(t: &sheafdb::ReadOnlyMultimapTable<u32, &str>) -> Result<MultiModel> {
    let mut m = MultiModel::new();
    for e in t.iter()? {
        let (k, v) = e?;
        m.entry(k.value())
            .or_default()
            .insert(v.value().to_string());
    }
    Ok(m)
}

fn flat(m: &MultiModel) -> Vec<(u32, String)> {
    m.iter()
        .flat_map(|(k, vs)| vs.iter().map(move |v| (*k, v.clone())))
        .collect()
}

fn multimap_step(
    t: &mut sheafdb::MultimapTable<'_, u32, &str>,
    m: &mut MultiModel,
    rng: &mut StdRng,
    seed: u64,
) -> Result<()> {
    let k = rng.gen_range(0..12u32);
    match rng.gen_range(0..100) {
        0..=44 => {
            let v = rand_tag(rng);
            let had = t.insert(k, v.as_str())?;
            assert_eq!(
                had,
                !m.entry(k).or_default().insert(v),
                "seed {seed}: insert"
            );
        }
        45..=64 => {
            let v = rand_tag(rng);
            let had = t.remove(k, v.as_str())?;
            let want = m.get_mut(&k).is_some_and(|s| s.remove(&v));
            assert_eq!(had, want, "seed {seed}: remove");
        }
        65..=69 => {
            let n = t.remove_all(k)?;
            let want = m.remove(&k).map_or(0, |s| s.len() as u64);
            assert_eq!(n, want, "seed {seed}: remove_all");
        }
        70..=84 => {
            let rev = rng.gen_bool(0.5);
            let it = t.get(k)?;
            let got: Vec<String> = if rev {
                it.rev()
                    .map(|v| v.map(|v| v.value().to_string()))
                    .collect::<Result<_>>()?
            } else {
                it.map(|v| v.map(|v| v.value().to_string()))
                    .collect::<Result<_>>()?
            };
            let mut want: Vec<String> = m.get(&k).map_or(vec![], |s| s.iter().cloned().collect());
            if rev {
                want.reverse();
            }
            assert_eq!(got, want, "seed {seed}: get");
            let count = m.get(&k).map_or(0, |s| s.len() as u64);
            assert_eq!(t.value_count(k)?, count, "seed {seed}: value_count");
        }
        _ => {
            let lo = rng.gen_range(0..12u32);
            let hi = rng.gen_range(lo..13u32);
            let (lb, hb) = match rng.gen_range(0..3) {
                0 => (Bound::Included(lo), Bound::Excluded(hi)),
                1 => (Bound::Excluded(lo), Bound::Included(hi)),
                _ => (Bound::Unbounded, Bound::Included(hi)),
            };
            let rev = rng.gen_bool(0.5);
            let it = t.range((lb, hb))?;
            let got: Vec<(u32, String)> = if rev {
                it.rev()
                    .map(|e| e.map(|(k, v)| (k.value(), v.value().to_string())))
                    .collect::<Result<_>>()?
            } else {
                it.map(|e| e.map(|(k, v)| (k.value(), v.value().to_string())))
                    .collect::<Result<_>>()?
            };
            let mut want: Vec<(u32, String)> = m
                .range((lb, hb))
                .flat_map(|(k, vs)| vs.iter().map(move |v| (*k, v.clone())))
                .collect();
            if rev {
                want.reverse();
            }
            assert_eq!(got, want, "seed {seed}: range {lb:?}..{hb:?}");
        }
    }
    m.retain(|_, s| !s.is_empty());
    assert_eq!(t.len()?, flat(m).len() as u64, "seed {seed}: len");
    Ok(())
}

#[test]
fn multimaps_match_a_model_with_savepoints_folds_and_reopens() -> Result<()> {
    for seed in 0..60u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let vfs = MemVfs::new();
        let open = || builder().create_with_vfs(Arc::new(vfs.clone()), "mm.sheaf");
        let mut db = open()?;
        let mut committed = MultiModel::new();
        for _ in 0..12 {
            let mut working = committed.clone();
            let mut tx = db.begin_write()?;
            let mut saves = Vec::new();
            for _ in 0..rng.gen_range(1..40) {
                match rng.gen_range(0..20) {
                    0 => saves.push((tx.savepoint()?, working.clone())),
                    1 if !saves.is_empty() => {
                        let i = rng.gen_range(0..saves.len());
                        tx.restore_savepoint(&saves[i].0)?;
                        working = saves[i].1.clone();
                        saves.truncate(i + 1);
                    }
                    _ => {
                        let mut t = tx.open_multimap_table(TAGS)?;
                        multimap_step(&mut t, &mut working, &mut rng, seed)?;
                    }
                }
            }
            if rng.gen_bool(0.8) {
                tx.commit()?;
                committed = working;
            } else {
                tx.abort()?;
            }
            if rng.gen_bool(0.3) {
                db.checkpoint()?;
            }
            if rng.gen_bool(0.2) {
                drop(db);
                db = open()?;
                db.check_integrity()?;
            }
            let rx = db.begin_read()?;
            let got = match rx.open_multimap_table(TAGS) {
                Ok(t) => read_multimap(&t)?,
                Err(Error::TableNotFound(_)) => MultiModel::new(),
                Err(e) => return Err(e),
            };
            assert_eq!(got, committed, "seed {seed}");
        }
        db.check_integrity()?;
    }
    Ok(())
}

#[test]
fn multimap_and_plain_tables_do_not_open_as_each_other() -> Result<()> {
    let db = mem_db();
    let tx = db.begin_write()?;
    tx.open_multimap_table(TAGS)?.insert(1, "a")?;
    tx.open_table(NUMS)?.insert(1, 1)?;
    assert!(matches!(
        tx.open_table(TableDefinition::<u32, &str>::new("tags")),
        Err(Error::TableTypeMismatch { .. })
    ));
    assert!(matches!(
        tx.open_multimap_table(MultimapTableDefinition::<u64, u64>::new("nums")),
        Err(Error::TableTypeMismatch { .. })
    ));
    tx.commit()?;
    let rx = db.begin_read()?;
    assert!(matches!(
        rx.open_multimap_table(MultimapTableDefinition::<u64, u64>::new("nums")),
        Err(Error::TableTypeMismatch { .. })
    ));
    assert!(matches!(
        rx.open_multimap_table(MultimapTableDefinition::<u32, u32>::new("tags")),
        Err(Error::TableTypeMismatch { .. })
    ));
    let info = rx.table_info("tags")?;
    assert_eq!(info.key_type, "multimap(u32,str)");
    assert_eq!(info.entries, 1);
    Ok(())
}

/// Multimap writes and savepoints in multi-CF transactions under power
/// loss: the recovered state is the last acknowledged commit or the one in
/// flight, in both CFs at once.
#[test]
fn multimaps_and_savepoints_survive_power_loss() {
    let cases = if let Some(seed) = std::env::var("SHEAF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        seed..seed + 1
    } else {
        0..150
    };
    let (mut cases_run, mut commits) = (0, 0);
    for seed in cases {
        commits += power_case(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        cases_run += 1;
    }
    // The cuts must land after real work, not only during setup.
    assert!(
        commits >= cases_run * 3,
        "{commits} commits in {cases_run} cases"
    );
}

type BothModel = (BTreeMap<u64, u64>, MultiModel);

fn read_both(db: &Database) -> Result<BothModel> {
    let mm = db.cf("mm")?;
    let rx = db.begin_read()?;
    let t = match rx.open_multimap_table_in(&mm, TAGS) {
        Ok(t) => read_multimap(&t)?,
        Err(Error::TableNotFound(_)) => MultiModel::new(),
        Err(e) => return Err(e),
    };
    Ok((nums(db)?, t))
}

/// One case; returns how many commits were acknowledged before the cut.
fn power_case(seed: u64) -> Result<u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let vfs = SimVfs::new();
    let db = common::open_sim(&vfs, "pm.sheaf")?;
    let mm = db.cf_or_create("mm")?;
    let default = db.default_cf()?;
    let mut acked: BothModel = Default::default();
    let mut in_flight = None;
    let mut commits = 0;
    vfs.fail_from(rng.gen_range(1..400), Fault::Eio);
    for _ in 0..30 {
        let mut next = acked.clone();
        let Ok(mut tx) = db.begin_write_cfs(&[&default, &mm]) else {
            break;
        };
        let mut saves = Vec::new();
        let mut ok = true;
        for _ in 0..rng.gen_range(1..20) {
            let r = match rng.gen_range(0..10) {
                0 => tx.savepoint().map(|sp| saves.push((sp, next.clone()))),
                1 if !saves.is_empty() => {
                    let i = rng.gen_range(0..saves.len());
                    let r = tx.restore_savepoint(&saves[i].0);
                    next = saves[i].1.clone();
                    saves.truncate(i + 1);
                    r
                }
                2..=5 => tx.open_table(&default, NUMS).and_then(|mut t| {
                    let (k, v) = (rng.gen_range(0..50), rng.gen());
                    t.insert(k, v)?;
                    next.0.insert(k, v);
                    Ok(())
                }),
                _ => tx.open_multimap_table(&mm, TAGS).and_then(|mut t| {
                    let (k, v) = (rng.gen_range(0..10u32), rand_tag(&mut rng));
                    t.insert(k, v.as_str())?;
                    next.1.entry(k).or_default().insert(v);
                    Ok(())
                }),
            };
            if r.is_err() {
                ok = false;
                break;
            }
        }
        if !ok {
            break;
        }
        match tx.commit() {
            Ok(()) => {
                acked = next;
                commits += 1;
            }
            Err(_) => {
                in_flight = Some(next);
                break;
            }
        }
    }
    drop(db);
    let crashed = vfs.crash(seed);
    let db = common::open_sim(&crashed, "pm.sheaf")?;
    let got = read_both(&db)?;
    assert!(
        got == acked || in_flight.as_ref() == Some(&got),
        "seed {seed}: recovered state is neither the last acknowledged commit nor the one in flight"
    );
    db.check_integrity()?;
    Ok(commits)
}

// ------------------------------------------------------------------- cursors

#[test]
fn cursors_match_a_model() -> Result<()> {
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let db = mem_db();
        let mut m = BTreeMap::new();
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(NUMS)?;
            for _ in 0..200 {
                let (k, v) = (rng.gen_range(0..1000u64), rng.gen());
                t.insert(k, v)?;
                m.insert(k, v);
            }
        }
        if rng.gen_bool(0.5) {
            tx.commit()?; // half the cases read the buffered commit
        } else {
            drop(tx);
            m.clear();
        }
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(NUMS)?;
            let mut c = t.cursor();
            // The model's position: None before the start / past the end.
            let mut pos: Option<u64> = None;
            let mut at_end = false;
            for _ in 0..300 {
                let got = match rng.gen_range(0..8) {
                    0 => {
                        let k = rng.gen_range(0..1000);
                        let got = c.seek(k)?.map(|e| e.0.value());
                        let want = m.range(k..).next().map(|(k, _)| *k);
                        assert_eq!(got, want, "seed {seed}: seek {k}");
                        at_end = want.is_none();
                        want
                    }
                    1 => {
                        let k = rng.gen_range(0..1000);
                        let got = c.seek_back(k)?.map(|e| e.0.value());
                        let want = m.range(..=k).next_back().map(|(k, _)| *k);
                        assert_eq!(got, want, "seed {seed}: seek_back {k}");
                        at_end = false;
                        want
                    }
                    2 | 3 => {
                        let got = c.next()?.map(|e| e.0.value());
                        let want = match (pos, at_end) {
                            (_, true) => None,
                            (None, false) => m.keys().next().copied(),
                            (Some(p), false) => m.range(p + 1..).next().map(|(k, _)| *k),
                        };
                        assert_eq!(got, want, "seed {seed}: next from {pos:?}");
                        at_end = want.is_none();
                        want
                    }
                    4 | 5 => {
                        let got = c.prev()?.map(|e| e.0.value());
                        let want = match (pos, at_end) {
                            (_, true) => m.keys().next_back().copied(),
                            (None, false) => None,
                            (Some(p), false) => m.range(..p).next_back().map(|(k, _)| *k),
                        };
                        assert_eq!(got, want, "seed {seed}: prev from {pos:?}");
                        at_end = false;
                        want
                    }
                    6 if pos.is_some() => {
                        let p = pos.unwrap();
                        let v = rng.gen();
                        let old = c.update(v)?.map(|g| g.value());
                        assert_eq!(old, m.insert(p, v), "seed {seed}: update");
                        pos
                    }
                    7 if pos.is_some() => {
                        let p = pos.unwrap();
                        let old = c.remove()?.map(|g| g.value());
                        assert_eq!(old, m.remove(&p), "seed {seed}: remove");
                        assert!(c.current()?.is_none(), "seed {seed}: removed entry");
                        pos
                    }
                    _ => pos,
                };
                pos = got;
                if let Some(p) = pos {
                    if let Some(v) = m.get(&p) {
                        let cur = c.current()?.map(|e| (e.0.value(), e.1.value()));
                        assert_eq!(cur, Some((p, *v)), "seed {seed}: current");
                    }
                }
            }
        }
        tx.commit()?;
        assert_eq!(nums(&db)?, m, "seed {seed}: after commit");
        // A snapshot's cursor walks the same entries both ways.
        let rx = db.begin_read()?;
        if let Ok(t) = rx.open_table(NUMS) {
            let mut c = t.cursor();
            let mut fwd = Vec::new();
            while let Some(e) = c.next()? {
                fwd.push(e.0.value());
            }
            let mut back = Vec::new();
            while let Some(e) = c.prev()? {
                back.push(e.0.value());
            }
            back.reverse();
            let keys: Vec<u64> = m.keys().copied().collect();
            assert_eq!(fwd, keys, "seed {seed}");
            assert_eq!(back, keys, "seed {seed}");
        }
    }
    Ok(())
}

// ---------------------------------------------------------- entry and friends

#[test]
fn the_entry_api_matches_a_model() -> Result<()> {
    let db = mem_db();
    let mut rng = StdRng::seed_from_u64(5);
    let mut m: BTreeMap<u64, u64> = BTreeMap::new();
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(NUMS)?;
        for _ in 0..2000 {
            let k = rng.gen_range(0..100u64);
            match rng.gen_range(0..8) {
                0 => {
                    let v = t.entry(k)?.or_insert(7)?.value();
                    assert_eq!(v, *m.entry(k).or_insert(7));
                }
                1 => {
                    let mut called = false;
                    let v = t
                        .entry(k)?
                        .or_insert_with(|| {
                            called = true;
                            k * 2
                        })?
                        .value();
                    assert_eq!(called, !m.contains_key(&k));
                    assert_eq!(v, *m.entry(k).or_insert(k * 2));
                }
                2 => {
                    let e = t.entry(k)?.and_modify(|v| v + 1)?;
                    assert_eq!(matches!(e, Entry::Occupied(_)), m.contains_key(&k));
                    if let Some(v) = m.get_mut(&k) {
                        *v += 1;
                    }
                }
                3 => {
                    if let Some(mut o) = t.get_mut(k)? {
                        assert_eq!(Some(o.value()), m.get(&k).copied());
                        assert_eq!(o.key()?, k);
                        let old = o.insert(1)?.value();
                        assert_eq!(Some(old), m.insert(k, 1));
                        assert_eq!(o.value(), 1);
                    } else {
                        assert!(!m.contains_key(&k));
                    }
                }
                5 => {
                    let mut seen = None;
                    let v = t
                        .entry(k)?
                        .or_insert_with_key(|key| {
                            seen = Some(key);
                            key + 5
                        })?
                        .value();
                    assert_eq!(seen, (!m.contains_key(&k)).then_some(k));
                    assert_eq!(v, *m.entry(k).or_insert(k + 5));
                }
                6 => match t.entry(k)? {
                    Entry::Occupied(o) => {
                        let (key, value) = o.remove_entry()?;
                        assert_eq!(
                            (Some(key.value()), Some(value.value())),
                            (Some(k), m.remove(&k))
                        );
                    }
                    Entry::Vacant(v) => {
                        assert!(!m.contains_key(&k));
                        assert_eq!(v.into_key()?.value(), k);
                    }
                },
                _ => match t.entry(k)? {
                    Entry::Occupied(o) => {
                        assert_eq!(Some(o.remove()?.value()), m.remove(&k));
                    }
                    Entry::Vacant(v) => {
                        assert!(!m.contains_key(&k));
                        assert_eq!(v.insert(3)?.value(), 3);
                        m.insert(k, 3);
                    }
                },
            }
        }
        assert_eq!(t.len()?, m.len() as u64);
    }
    tx.commit()?;
    assert_eq!(nums(&db)?, m);
    Ok(())
}

#[test]
fn extract_if_dropped_early_removes_only_what_it_yielded() -> Result<()> {
    let db = mem_db();
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(NUMS)?;
        for i in 0..100 {
            t.insert(i, i)?;
        }
        let taken: Vec<u64> = t
            .extract_if(|k, _| k % 3 == 0)?
            .take(4)
            .map(|e| e.map(|(k, _)| k.value()))
            .collect::<Result<_>>()?;
        assert_eq!(taken, [0, 3, 6, 9]);
        assert_eq!(t.len()?, 96);
        assert!(t.get(12)?.is_some(), "not yielded, so not removed");
        // Range-restricted forms.
        let from: Vec<u64> = t
            .extract_from_if(50..60, |k, _| k % 2 == 1)?
            .map(|e| e.map(|(k, _)| k.value()))
            .collect::<Result<_>>()?;
        assert_eq!(from, [51, 53, 55, 57, 59]);
        assert_eq!(t.retain_in(90.., |k, _| k < 95)?, 5);
        assert_eq!(t.len()?, 86);
    }
    tx.commit()?;
    let got = nums(&db)?;
    assert!(!got.contains_key(&9) && got.contains_key(&12) && !got.contains_key(&95));
    Ok(())
}

#[test]
fn insert_reserve_writes_a_value_in_place() -> Result<()> {
    const BLOBS: TableDefinition<u32, &[u8]> = TableDefinition::new("blobs");
    let db = mem_db();
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(BLOBS)?;
        let mut r = t.insert_reserve(1, 10_000)?;
        for (i, b) in r.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        assert!(r.finish()?.is_none());
        let mut r = t.insert_reserve(2, 3)?;
        r.as_mut().copy_from_slice(b"abc");
        drop(r); // stored when dropped
        assert!(matches!(
            t.insert_reserve(3, (u32::MAX as usize) + 1),
            Err(Error::ValueTooLarge { .. })
        ));
    }
    tx.commit()?;
    let rx = db.begin_read()?;
    let t = rx.open_table(BLOBS)?;
    let want: Vec<u8> = (0..10_000).map(|i| (i % 251) as u8).collect();
    assert_eq!(t.get(1)?.unwrap().value(), want.as_slice());
    assert_eq!(t.get(2)?.unwrap().value(), b"abc");
    assert!(t.get(3)?.is_none());
    Ok(())
}

// --------------------------------------------------------- stats and generics

#[test]
fn table_stats_count_pages_and_bytes() -> Result<()> {
    let db = mem_db();
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(def("s"))?;
        for i in 0..5000u32 {
            t.insert(i.to_be_bytes().as_slice(), [1u8; 100].as_slice())?;
        }
        t.insert(b"big".as_slice(), vec![2u8; 50_000].as_slice())?;
    }
    tx.commit()?;
    db.checkpoint()?; // folded into the tree
    let rx = db.begin_read()?;
    let t = rx.open_table(def("s"))?;
    let s = t.stats()?;
    assert_eq!(s.entries, 5001);
    assert_eq!(s.tree_entries, 5001);
    assert!(s.tree_height >= 2, "{s:?}");
    assert!(s.leaf_pages > 100 && s.branch_pages >= 1, "{s:?}");
    assert_eq!(s.overflow_pages, 50_032u64.div_ceil(4096), "{s:?}");
    assert_eq!(s.stored_bytes, 5000 * 104 + 3 + 50_000, "{s:?}");
    let page_bytes = s.total_pages() * s.page_size;
    assert_eq!(
        s.stored_bytes + s.metadata_bytes + s.fragmented_bytes,
        page_bytes,
        "{s:?}"
    );
    // The database sums every table of every CF.
    let other = db.cf_or_create("other")?;
    let tx = other.begin_write()?;
    tx.open_table(NUMS)?.insert(1, 1)?;
    tx.commit()?;
    let d = db.stats()?;
    assert_eq!(
        (d.column_families, d.tables, d.totals.entries),
        (2, 2, 5002),
        "{d:?}"
    );
    assert_eq!(d.totals.leaf_pages, s.leaf_pages + 1, "{d:?}");
    assert_eq!(d.totals.tree_height, s.tree_height);
    assert!(d.file_bytes >= (s.total_pages() + 1) * 4096, "{d:?}");
    // The write handle sees the same through the trait.
    let tx = db.begin_write()?;
    let w = tx.open_table(def("s"))?;
    assert_eq!(ReadableTable::stats(&w)?, s);
    Ok(())
}

/// Generic code over both handles through `ReadableTable`.
fn sum_of<T: ReadableTable<u64, u64>>(t: &T) -> Result<u64> {
    let mut sum = 0;
    for e in t.range(10..20)? {
        sum += e?.1.value();
    }
    Ok(sum + t.get(99)?.map_or(0, |g| g.value()) + t.len()?)
}

#[test]
fn readable_table_is_shared_by_both_handles() -> Result<()> {
    let db = mem_db();
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(NUMS)?;
        for i in 0..100 {
            t.insert(i, 1)?;
        }
        assert_eq!(sum_of(&t)?, 10 + 1 + 100);
    }
    tx.commit()?;
    let rx = db.begin_read()?;
    assert_eq!(sum_of(&rx.open_table(NUMS)?)?, 111);
    let t = rx.open_table(NUMS)?;
    rx.close()?;
    assert_eq!(t.len()?, 100, "a table outlives its closed transaction");
    Ok(())
}

#[test]
fn a_write_transaction_moves_to_another_thread_and_commits_there() -> Result<()> {
    fn assert_send<T: Send>() {}
    assert_send::<sheafdb::WriteTransaction>();
    assert_send::<sheafdb::MultiWriteTransaction>();
    let db = Arc::new(mem_db());
    let tx = db.begin_write()?;
    tx.open_table(NUMS)?.insert(1, 1)?;
    let db2 = db.clone();
    std::thread::spawn(move || -> Result<()> {
        tx.open_table(NUMS)?.insert(2, 2)?;
        // This thread holds the writer now: a second begin is refused, not
        // a hang.
        assert!(matches!(db2.begin_write(), Err(Error::WouldDeadlock(_))));
        tx.commit()
    })
    .join()
    .unwrap()?;
    // The first thread can write again.
    let tx = db.begin_write()?;
    tx.open_table(NUMS)?.insert(3, 3)?;
    tx.commit()?;
    assert_eq!(nums(&db)?, BTreeMap::from([(1, 1), (2, 2), (3, 3)]));
    Ok(())
}
