//! Recovery through the WAL (issue 3): mixed durability modes and
//! concurrent committers under simulated power loss, crashes at every step
//! of a checkpoint, checkpoints racing writers and readers, large
//! transactions that commit by a direct checkpoint, and a clean close that
//! leaves nothing to replay. Seeds are printed in every failure message.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{dump, open_sim, random_writes, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sheafdb::storage::sim::{CrashPolicy, Fault, SimVfs};
use sheafdb::{Database, Durability, Result, TableDefinition};

fn seed_env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Single writer, random durability per commit, explicit checkpoints now
/// and then, power cut at a random operation. The recovered state must be
/// a commit-order prefix that includes every acknowledged `Immediate`
/// commit (and everything before it).
fn mixed_durability_case(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let vfs = SimVfs::new();
    let db = open_sim(&vfs, "m.sheaf").unwrap();
    let mut models = vec![Model::new()];
    let mut must_have = 0usize;
    vfs.fail_from(rng.gen_range(1..400), Fault::Eio);
    for _ in 0..40 {
        let mut next = models.last().unwrap().clone();
        let Ok(mut tx) = db.begin_write() else { break };
        let mode = match rng.gen_range(0..3) {
            0 => Durability::Immediate,
            1 => Durability::Eventual,
            _ => Durability::None,
        };
        tx.set_durability(mode);
        let n = rng.gen_range(1..20);
        if random_writes(&tx, &mut next, &mut rng, n).is_err() {
            break;
        }
        let r = tx.commit();
        let ok = r.is_ok();
        if std::env::var("SHEAF_TRACE").is_ok() {
            eprintln!("commit {} {mode:?} -> {r:?}", models.len());
        }
        models.push(next);
        if !ok {
            break;
        }
        if mode == Durability::Immediate {
            must_have = models.len() - 1;
        }
        if rng.gen_bool(0.15) {
            let r = db.checkpoint();
            if std::env::var("SHEAF_TRACE").is_ok() {
                eprintln!("checkpoint -> {r:?}");
            }
            if r.is_err() {
                break;
            }
        }
        if rng.gen_bool(0.1) && db.sync().is_ok() {
            must_have = models.len() - 1;
        }
    }
    if std::env::var_os("SHEAF_TRACE").is_some() {
        for policy in [CrashPolicy::DropAll, CrashPolicy::KeepAll] {
            let c = vfs.crash_with(seed, policy);
            let d = open_sim(&c, "m.sheaf").unwrap();
            let st = dump(&d).unwrap();
            eprintln!(
                "{policy:?}: recovered {:?}",
                models.iter().rposition(|m| *m == st)
            );
        }
    }
    let crashed = vfs.crash(seed);
    drop(db);
    let db = open_sim(&crashed, "m.sheaf").unwrap_or_else(|e| panic!("seed {seed}: reopen: {e}"));
    let state = dump(&db).unwrap_or_else(|e| panic!("seed {seed}: dump: {e}"));
    let at = models.iter().rposition(|m| *m == state);
    let Some(at) = at else {
        panic!("seed {seed}: recovered state is not a prefix of the commit order")
    };
    assert!(
        at >= must_have,
        "seed {seed}: lost acknowledged durable commit {must_have} (recovered {at})"
    );
    db.check_integrity()
        .unwrap_or_else(|e| panic!("seed {seed}: integrity: {e}"));
}

#[test]
fn mixed_durability_power_loss_keeps_a_prefix_with_every_durable_commit() {
    if let Some(seed) = std::env::var("SHEAF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return mixed_durability_case(seed);
    }
    for seed in 0..seed_env("SHEAF_MIXED_CASES", 1500) {
        mixed_durability_case(seed);
    }
}

const COUNTERS: TableDefinition<u64, u64> = TableDefinition::new("counters");
const LOG: TableDefinition<(u64, u64), u64> = TableDefinition::new("log");

/// Several threads commit concurrently (`Immediate`); the power fails while
/// they run. Every commit acknowledged before the crash must survive, and
/// each thread's commits must be a prefix (its log has exactly 1..=n).
fn concurrent_case(seed: u64, threads: u64) {
    let vfs = SimVfs::new();
    let db = Arc::new(open_sim(&vfs, "c.sheaf").unwrap());
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..threads).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let r: Result<()> = (|| {
                        let tx = db.begin_write()?;
                        tx.open_table(COUNTERS)?.insert(t, n)?;
                        tx.open_table(LOG)?.insert((t, n), n * 7)?;
                        tx.commit()
                    })();
                    if r.is_err() {
                        return;
                    }
                    acked[t as usize].store(n, Ordering::SeqCst);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(5 + seed % 20));
    if seed.is_multiple_of(3) {
        let r = db.checkpoint();
        if std::env::var_os("SHEAF_TRACE").is_some() {
            eprintln!("checkpoint -> {r:?}");
        }
    }
    let before: Vec<u64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
    let crashed = vfs.crash(seed);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    drop(db);
    let db = open_sim(&crashed, "c.sheaf").unwrap_or_else(|e| panic!("seed {seed}: reopen: {e}"));
    let rx = db.begin_read().unwrap();
    let counters: BTreeMap<u64, u64> = match rx.open_table(COUNTERS) {
        Ok(t) => t
            .iter()
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.value(), v.value())).unwrap())
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    for t in 0..threads {
        let have = counters.get(&t).copied().unwrap_or(0);
        assert!(
            have >= before[t as usize],
            "seed {seed}: thread {t} lost acknowledged commit {} (has {have})",
            before[t as usize]
        );
        if have > 0 {
            let log = rx.open_table(LOG).unwrap();
            let got: Vec<u64> = log
                .range((t, 0)..(t + 1, 0))
                .unwrap()
                .map(|e| e.unwrap().0.value().1)
                .collect();
            assert_eq!(
                got,
                (1..=have).collect::<Vec<_>>(),
                "seed {seed}: thread {t} commits are not a prefix"
            );
        }
    }
    drop(rx);
    db.check_integrity()
        .unwrap_or_else(|e| panic!("seed {seed}: integrity: {e}"));
}

#[test]
fn concurrent_committers_lose_no_acknowledged_commit() {
    if let Some(seed) = std::env::var("SHEAF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return concurrent_case(seed, 8);
    }
    for seed in 0..seed_env("SHEAF_CONCURRENT_CASES", 60) {
        concurrent_case(seed, 8);
    }
}

/// Crash at every storage operation of a checkpoint (including the
/// superblock write, which may tear): recovery must give the full state,
/// since every commit was durable in the WAL before the checkpoint began.
#[test]
fn crash_at_every_step_of_a_checkpoint_recovers_everything() {
    let build = |vfs: &SimVfs| -> (Database, Model) {
        let db = open_sim(vfs, "k.sheaf").unwrap();
        let mut rng = StdRng::seed_from_u64(77);
        let mut model = Model::new();
        for _ in 0..10 {
            let tx = db.begin_write().unwrap();
            random_writes(&tx, &mut model, &mut rng, 30).unwrap();
            tx.commit().unwrap();
        }
        (db, model)
    };
    let probe = SimVfs::new();
    let (db, _) = build(&probe);
    let before = probe.op_count();
    db.checkpoint().unwrap();
    let steps = probe.op_count() - before;
    drop(db);
    assert!(
        steps >= 4,
        "a checkpoint writes pages, syncs, writes the superblock, syncs"
    );
    for step in 1..=steps {
        for seed in 0..4u64 {
            let vfs = SimVfs::new();
            let (db, model) = build(&vfs);
            vfs.fail_from(step, Fault::Eio);
            let _ = db.checkpoint();
            let crashed = vfs.crash(step * 10 + seed);
            drop(db);
            let db = open_sim(&crashed, "k.sheaf")
                .unwrap_or_else(|e| panic!("step {step} seed {seed}: reopen: {e}"));
            assert_eq!(
                dump(&db).unwrap(),
                model,
                "step {step} seed {seed}: state after crash in checkpoint"
            );
            db.check_integrity()
                .unwrap_or_else(|e| panic!("step {step} seed {seed}: integrity: {e}"));
        }
    }
}

const ACCOUNTS: TableDefinition<u64, i64> = TableDefinition::new("accounts");

/// Checkpoints in a loop while 8 threads transfer between accounts and 8
/// threads read and check that the total never changes.
#[test]
fn checkpoints_race_writers_and_readers_without_tearing() -> Result<()> {
    let db = Arc::new(
        common::builder()
            .cache_size_bytes(1 << 20)
            .create_with_vfs(Arc::new(sheafdb::storage::mem::MemVfs::new()), "race.sheaf")?,
    );
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(ACCOUNTS)?;
        for a in 0..200u64 {
            t.insert(a, 1_000)?;
        }
    }
    tx.commit()?;
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut handles = Vec::new();
    for w in 0..8u64 {
        let (db, stop, errors) = (db.clone(), stop.clone(), errors.clone());
        handles.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(w);
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) || n < 50 {
                n += 1;
                let r: Result<()> = (|| {
                    let mut tx = db.begin_write()?;
                    tx.set_durability(if n % 2 == 0 {
                        Durability::None
                    } else {
                        Durability::Immediate
                    });
                    {
                        let mut t = tx.open_table(ACCOUNTS)?;
                        let (a, b) = (rng.gen_range(0..200u64), rng.gen_range(0..200u64));
                        let amount = rng.gen_range(1..50);
                        let va = t.get(a)?.unwrap().value();
                        t.insert(a, va - amount)?;
                        let vb = t.get(b)?.unwrap().value();
                        t.insert(b, vb + amount)?;
                    }
                    tx.commit()
                })();
                if let Err(e) = r {
                    errors.lock().unwrap().push(format!("writer {w}: {e}"));
                    return;
                }
            }
        }));
    }
    for r in 0..8 {
        let (db, stop, errors) = (db.clone(), stop.clone(), errors.clone());
        handles.push(std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) || n < 50 {
                n += 1;
                let rx = db.begin_read().unwrap();
                let t = rx.open_table(ACCOUNTS).unwrap();
                let sum: i64 = t.iter().unwrap().map(|e| e.unwrap().1.value()).sum();
                if sum != 200_000 {
                    errors
                        .lock()
                        .unwrap()
                        .push(format!("reader {r} saw total {sum}"));
                    return;
                }
            }
        }));
    }
    let start = Instant::now();
    let mut checkpoints = 0;
    while start.elapsed() < Duration::from_secs(3) {
        db.checkpoint()?;
        checkpoints += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    assert!(
        errors.lock().unwrap().is_empty(),
        "{:?}",
        errors.lock().unwrap()
    );
    assert!(checkpoints > 3);
    db.check_integrity()?;
    let rx = db.begin_read()?;
    let sum: i64 = rx
        .open_table(ACCOUNTS)?
        .iter()?
        .map(|e| e.unwrap().1.value())
        .sum();
    assert_eq!(sum, 200_000);
    Ok(())
}

/// A transaction larger than the WAL record limit commits by a direct
/// checkpoint, atomically, and survives a power cut right after commit.
#[test]
fn a_large_transaction_commits_by_direct_checkpoint() -> Result<()> {
    const BIG: TableDefinition<u64, &[u8]> = TableDefinition::new("big");
    let vfs = SimVfs::new();
    let db = open_sim(&vfs, "big.sheaf")?;
    let tx = db.begin_write()?;
    tx.open_table(BIG)?.insert(0, b"small".as_slice())?;
    tx.commit()?;
    let wal_before = db.wal_stats();
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(BIG)?;
        for k in 1..200u64 {
            t.insert(k, vec![k as u8; 2_000].as_slice())?;
        }
    }
    tx.commit()?;
    let wal_after = db.wal_stats();
    assert!(
        wal_after.bytes - wal_before.bytes < 64 * 1024,
        "a 400 KB transaction went through the WAL"
    );
    let crashed = vfs.crash_with(1, CrashPolicy::DropAll);
    drop(db);
    let db = open_sim(&crashed, "big.sheaf")?;
    let rx = db.begin_read()?;
    let t = rx.open_table(BIG)?;
    assert_eq!(t.len()?, 200);
    assert_eq!(t.get(150)?.unwrap().value(), vec![150u8; 2_000].as_slice());
    db.check_integrity()?;
    Ok(())
}

/// A clean close checkpoints: the next open replays nothing. A crash
/// (no close) replays the records since the last checkpoint.
#[test]
fn clean_close_leaves_nothing_to_replay() -> Result<()> {
    let vfs = SimVfs::new();
    let mut model = Model::new();
    let mut rng = StdRng::seed_from_u64(4);
    {
        let db = open_sim(&vfs, "close.sheaf")?;
        for _ in 0..5 {
            let tx = db.begin_write()?;
            random_writes(&tx, &mut model, &mut rng, 10)?;
            tx.commit()?;
        }
        let crashed = vfs.crash_with(0, CrashPolicy::KeepAll);
        let db2 = open_sim(&crashed, "close.sheaf")?;
        assert_eq!(
            db2.replayed_records(),
            5,
            "a crash replays the commits since the checkpoint"
        );
        assert_eq!(dump(&db2)?, model);
        db.close()?;
    }
    let db = open_sim(&vfs, "close.sheaf")?;
    assert_eq!(db.replayed_records(), 0);
    assert_eq!(dump(&db)?, model);
    Ok(())
}

/// Group-commit stress (issue 3): 16 threads × 2,000 `Immediate` commits,
/// repeated `SHEAF_STRESS_ROUNDS` times (default 50). A watchdog fails the test instead of letting it hang. After each
/// round the disk loses power: every acknowledged commit must be there.
#[test]
fn group_commit_stress_never_hangs_and_loses_nothing() {
    const THREADS: u64 = 16;
    const COMMITS: u64 = 2_000;
    let rounds = seed_env("SHEAF_STRESS_ROUNDS", 50);
    for round in 0..rounds {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            let vfs = SimVfs::new();
            let db = Arc::new(open_sim(&vfs, "stress.sheaf").unwrap());
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let db = db.clone();
                    std::thread::spawn(move || {
                        for n in 1..=COMMITS {
                            let tx = db.begin_write().unwrap();
                            tx.open_table(COUNTERS).unwrap().insert(t, n).unwrap();
                            tx.commit().unwrap();
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            let stats = db.wal_stats();
            let crashed = vfs.crash(round);
            drop(db);
            let db = open_sim(&crashed, "stress.sheaf").unwrap();
            let rx = db.begin_read().unwrap();
            let t = rx.open_table(COUNTERS).unwrap();
            for th in 0..THREADS {
                assert_eq!(
                    t.get(th).unwrap().unwrap().value(),
                    COMMITS,
                    "round {round}: thread {th} lost commits"
                );
            }
            done_tx.send(stats).unwrap();
        });
        let stats = match done_rx.recv_timeout(Duration::from_secs(240)) {
            Ok(s) => s,
            Err(_) => panic!("round {round}: group commit hung (watchdog after 240 s)"),
        };
        worker.join().unwrap();
        assert!(
            stats.syncs < THREADS * COMMITS,
            "round {round}: no commit shared a sync ({} syncs for {} commits)",
            stats.syncs,
            THREADS * COMMITS
        );
    }
}

/// Catalog operations replayed from the WAL give the state the API built
/// (one implementation of each catalog rule serves both): create, write,
/// rename with unflushed changes, drop, recreate under an old name.
#[test]
fn replayed_catalog_operations_match_the_api() {
    const A: TableDefinition<&[u8], &[u8]> = TableDefinition::new("a");
    const B: TableDefinition<&[u8], &[u8]> = TableDefinition::new("b");
    let vfs = SimVfs::new();
    let db = common::builder()
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), "cat.sheaf")
        .unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_table(A)
        .unwrap()
        .insert(b"1".as_slice(), b"x".as_slice())
        .unwrap();
    tx.open_table(B)
        .unwrap()
        .insert(b"2".as_slice(), b"y".as_slice())
        .unwrap();
    tx.commit().unwrap();
    let tx = db.begin_write().unwrap();
    // Unflushed change, then rename: the new name carries it.
    tx.open_table(A)
        .unwrap()
        .insert(b"3".as_slice(), b"z".as_slice())
        .unwrap();
    tx.rename_table("a", "c").unwrap();
    tx.delete_table("b").unwrap();
    // Recreate "a" (a new id) and write to the renamed table.
    tx.open_table(A)
        .unwrap()
        .insert(b"4".as_slice(), b"w".as_slice())
        .unwrap();
    const C: TableDefinition<&[u8], &[u8]> = TableDefinition::new("c");
    tx.open_table(C)
        .unwrap()
        .insert(b"5".as_slice(), b"v".as_slice())
        .unwrap();
    tx.commit().unwrap();
    let want = dump(&db).unwrap();
    let crashed = vfs.crash_with(1, CrashPolicy::KeepAll);
    drop(db);
    let db = open_sim(&crashed, "cat.sheaf").unwrap();
    assert!(db.replayed_records() >= 2, "nothing was replayed");
    assert_eq!(dump(&db).unwrap(), want);
    assert_eq!(
        db.begin_read().unwrap().list_tables().unwrap(),
        vec!["a".to_string(), "c".to_string()]
    );
    db.check_integrity().unwrap();
}

/// Replay keeps `len()` O(1) without reading the trees: each commit
/// record ends with its tables' count changes (`Op::CountChange`), so a
/// reopen after a crash reads the superblock, the catalog and the WAL,
/// not one leaf per replayed key (before, every replayed key was looked
/// up in its tree to learn whether it was new). The crash keeps 600
/// commits of updates and inserts spread over a 20,000-key tree of
/// hundreds of leaves; the reopen may read a few dozen pages at most.
#[test]
fn replay_reads_no_leaf_to_count_the_replayed_writes() -> Result<()> {
    const T: TableDefinition<u64, u64> = TableDefinition::new("counted");
    const LOADED: u64 = 20_000;
    let vfs = SimVfs::new();
    let db = open_sim(&vfs, "count.sheaf")?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 0..LOADED {
            t.insert(k * 2, k)?;
        }
    }
    tx.commit()?;
    db.checkpoint()?;
    let mut rng = StdRng::seed_from_u64(11);
    let mut model: BTreeMap<u64, u64> = (0..LOADED).map(|k| (k * 2, k)).collect();
    for i in 0..600u64 {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::None);
        {
            let mut t = tx.open_table(T)?;
            // Even keys exist (an update), odd keys are new, and some
            // existing keys are removed.
            let k = rng.gen_range(0..LOADED * 2);
            if k % 2 == 0 && i % 3 == 0 {
                t.remove(k)?;
                model.remove(&k);
            } else {
                t.insert(k, i)?;
                model.insert(k, i);
            }
        }
        tx.commit()?;
    }
    db.sync()?;
    let crashed = vfs.process_crash();
    drop(db);
    let before = crashed.op_count();
    // No key filter: its builder thread scans the tree right after open,
    // and under load (CI runs every suite at once) its reads landed before
    // the count below and failed the test (145 operations) though replay
    // read no leaf.
    let db = common::builder()
        .key_filter_memory(0)
        .create_with_vfs(Arc::new(crashed.clone()), "count.sheaf")?;
    let open_ops = crashed.op_count() - before;
    assert_eq!(db.replayed_records(), 600);
    assert!(
        open_ops < 60,
        "the reopen made {open_ops} storage operations: replay read the tree"
    );
    assert_replayed_table(&db, T, &model)
}

/// Table `def` of `db` holds exactly `model`, `len()` agrees, and after
/// a checkpoint (whose fold checks the replayed count changes against
/// the trees, design 15.2) the file passes `check_integrity`.
fn assert_replayed_table(
    db: &Database,
    def: TableDefinition<u64, u64>,
    model: &BTreeMap<u64, u64>,
) -> Result<()> {
    let rx = db.begin_read()?;
    let t = rx.open_table(def)?;
    let got: BTreeMap<u64, u64> = t
        .iter()?
        .map(|e| e.map(|(k, v)| (k.value(), v.value())))
        .collect::<Result<_>>()?;
    assert_eq!(&got, model);
    assert_eq!(t.len()?, model.len() as u64);
    drop((t, rx));
    db.checkpoint()?;
    db.check_integrity()?;
    Ok(())
}

/// A transaction whose writes outgrow the spill size goes on writing its
/// tree directly (`TableState::direct`), and its puts and removals are
/// still logged with their count changes: after a crash, replay's count
/// must be the table's. Before the direct writes counted, the record
/// claimed only the writes made before the spill, and the reopened
/// table's `len()` disagreed with its entries (the next fold refused it
/// as corrupted).
#[test]
fn count_changes_cover_writes_made_after_a_spill() -> Result<()> {
    const T: TableDefinition<u64, u64> = TableDefinition::new("spilled");
    let vfs = SimVfs::new();
    let open = |vfs: &SimVfs| {
        common::builder()
            .txn_spill_bytes(4 * 1024)
            .create_with_vfs(Arc::new(vfs.clone()), "spill.sheaf")
    };
    let db = open(&vfs)?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 0..2_000u64 {
            t.insert(k, k)?;
        }
    }
    tx.commit()?;
    db.checkpoint()?;
    let mut model: BTreeMap<u64, u64> = (0..2_000u64).map(|k| (k, k)).collect();
    // Far past 4 KiB of pending writes: most of these go to the tree
    // directly, logged all the same. New keys, updates and removals.
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::None);
    {
        let mut t = tx.open_table(T)?;
        for k in 1_500..3_000u64 {
            t.insert(k, k + 1)?;
            model.insert(k, k + 1);
        }
        for k in (0..1_000u64).step_by(3) {
            t.remove(k)?;
            model.remove(&k);
        }
    }
    tx.commit()?;
    db.sync()?;
    let crashed = vfs.process_crash();
    drop(db);
    let db = open(&crashed)?;
    assert_eq!(db.replayed_records(), 1);
    assert_replayed_table(&db, T, &model)
}

/// Commits `before` transactions, checkpoints, commits `after` more, and
/// crashes keeping every byte; returns the files and the model after each
/// commit. One WAL segment (the default sizes).
fn crashed_after_checkpoint(before: usize, after: usize) -> (common::Files, Vec<Model>) {
    let vfs = SimVfs::new();
    // One segment holds every record (the tests cut or damage "the" file).
    let db = common::builder()
        .background_checkpoints(false)
        .wal_first_segment_bytes(256 << 10)
        .create_with_vfs(Arc::new(vfs.clone()), "d.sheaf")
        .unwrap();
    let mut models = vec![Model::new()];
    let mut rng = StdRng::seed_from_u64(5);
    for i in 0..before + after {
        let mut m = models.last().unwrap().clone();
        let tx = db.begin_write().unwrap();
        random_writes(&tx, &mut m, &mut rng, 30).unwrap();
        tx.commit().unwrap();
        models.push(m);
        if i + 1 == before {
            db.checkpoint().unwrap();
        }
    }
    let crashed = vfs.crash_with(0, CrashPolicy::KeepAll);
    std::mem::forget(db);
    (common::files_of(&crashed), models)
}

/// Opens a copy of `files` read-write: the state it reads, or its error.
fn open_copy(files: &common::Files) -> Result<Model> {
    dump(&open_copy_with(files, common::builder())?)
}

/// Opens a copy of `files` read-write with `builder` (background
/// checkpoints off).
fn open_copy_with(files: &common::Files, builder: sheafdb::Builder) -> Result<Database> {
    let vfs = SimVfs::new();
    for (n, b) in files {
        vfs.set_file_bytes(n, b.clone());
    }
    builder
        .background_checkpoints(false)
        .open_with_vfs(Arc::new(vfs), "d.sheaf")
}

/// The position of the second frame of a segment (past the first one's
/// length).
fn second_frame(seg: &[u8]) -> usize {
    let len1 = u32::from_le_bytes(seg[4096 + 4..4096 + 8].try_into().unwrap()) as usize;
    4096 + 32 + len1
}

fn the_segment(files: &common::Files) -> String {
    let w: Vec<&String> = files.keys().filter(|n| n.contains("-wal")).collect();
    assert_eq!(w.len(), 1, "expected one segment: {w:?}");
    w[0].clone()
}

/// Every acknowledged commit, or a clear `Corrupted`: never a silent
/// prefix.
fn assert_whole_or_refused(got: Result<Model>, models: &[Model], what: &str) {
    match got {
        Ok(state) => assert!(
            state == *models.last().unwrap(),
            "{what}: opened silently at model {:?} of {}",
            models.iter().position(|m| *m == state),
            models.len() - 1
        ),
        Err(e) => assert!(
            matches!(e, sheafdb::Error::Corrupted { .. }),
            "{what}: {e:?}"
        ),
    }
}

/// A flipped bit in a WAL frame the last checkpoint already covers made
/// replay stop there, and the acknowledged commit after the checkpoint
/// (whose own mark is the replay start, so it was no "witness") vanished:
/// the open succeeded one commit short and made the loss final (an
/// adversarial probe). Rule O1 says the log was durable through the
/// replay start, so a walk stopping below it stopped at damage, and the
/// base holds what it lost: replay resumes at the frame at the replay
/// start (it refused the open before that, and dropped the commit first).
#[test]
fn a_flip_below_the_replay_start_does_not_drop_the_commit_after_it() {
    let (files, models) = crashed_after_checkpoint(4, 1);
    let wal = the_segment(&files);
    let mut damaged = files.clone();
    damaged.get_mut(&wal).unwrap()[4096 + 100] ^= 0x10; // the first frame's payload
                                                        // The base holds the damaged frame's records; replay resumes at the
                                                        // frame at the replay start and keeps every acknowledged commit.
    assert!(
        open_copy(&damaged).unwrap() == *models.last().unwrap(),
        "flip below the replay start"
    );
    // The open says it walked past damage (a sign of a failing disk).
    let db = open_copy_with(&damaged, common::builder()).unwrap();
    // The first frame (LSNs start at 4096, the first frame offset).
    assert_eq!(db.wal_damage_passed(), Some(4096));
    assert!(db.wal_damage().is_none());
    assert!(
        open_copy(&files).unwrap() == *models.last().unwrap(),
        "the undamaged copy"
    );
}

/// Foreign bytes over one frame header in the middle of the log looked
/// like a stale frame of an earlier use (its salt differs), and replay
/// ended there with no error: five acknowledged commits gone (an
/// adversarial probe). A stale frame's LSN is below its position and its
/// mark no higher than its LSN; a header that breaks either is damage.
#[test]
fn garbage_over_a_frame_header_mid_log_is_refused_not_a_silent_prefix() {
    let (files, models) = crashed_after_checkpoint(0, 6);
    let wal = the_segment(&files);
    let seg = &files[&wal];
    let second = second_frame(seg);
    let mut damaged = files.clone();
    for (i, b) in damaged.get_mut(&wal).unwrap()[second..second + 32]
        .iter_mut()
        .enumerate()
    {
        *b = 0xA5 ^ (i as u8);
    }
    assert_whole_or_refused(open_copy(&damaged), &models, "garbage frame header");
}

/// A segment file cut short after frames of its use opened as if the log
/// ended at the cut: the acknowledged commits past it vanished without an
/// error (an adversarial probe). Segment files are full length and synced
/// before any frame goes in, so no crash leaves one short with frames in
/// it: the open refuses, and a salvage opens the prefix and reports it.
#[test]
fn a_segment_cut_short_after_its_frames_is_refused_not_a_silent_prefix() {
    let (files, models) = crashed_after_checkpoint(0, 6);
    let wal = the_segment(&files);
    let seg = &files[&wal];
    let second = second_frame(seg);
    // A byte short of full length (only zeros are lost): the whole log.
    let mut zeros_cut = files.clone();
    zeros_cut.get_mut(&wal).unwrap().truncate(seg.len() - 1);
    assert!(open_copy(&zeros_cut).unwrap() == *models.last().unwrap());
    // Mid-way through the second frame, and at its start.
    for cut in [second + 7, second] {
        assert_cut_refused(&files, &wal, cut, &models, &models[1]);
    }
}

/// `files` with segment `wal` cut to `cut` bytes: the open refuses it as
/// cut short (never a silent prefix of `models`), and a salvage reports
/// `FileCut` and opens at `salvaged`, passing `check_integrity`.
fn assert_cut_refused(
    files: &common::Files,
    wal: &str,
    cut: usize,
    models: &[Model],
    salvaged: &Model,
) {
    let mut damaged = files.clone();
    damaged.get_mut(wal).unwrap().truncate(cut);
    let what = format!("segment cut to {cut} bytes");
    match open_copy(&damaged) {
        Ok(state) => panic!(
            "{what}: opened silently at model {:?} of {}",
            models.iter().position(|m| *m == state),
            models.len() - 1
        ),
        Err(e) => assert!(e.to_string().contains("cut short"), "{what}: {e:?}"),
    }
    let db = open_copy_with(&damaged, common::builder().salvage_damaged_wal(true)).unwrap();
    let damage = db
        .wal_damage()
        .expect("the salvage reports the cut")
        .clone();
    assert_eq!(damage.reason, "FileCut", "{what}");
    assert!(
        dump(&db).unwrap() == *salvaged,
        "{what}: not the salvaged prefix"
    );
    db.check_integrity().unwrap();
}

/// The only WAL file cut to its header (or into its first frame) after a
/// checkpoint past that use's start: the replay start proves the log had
/// frames there (rule O1), so the file had its full length (O14) and was
/// cut afterwards. Refused, and a salvage reports the cut. Before, the
/// open went on silently at the checkpoint without the six commits after
/// it (a session-33 probe of WAL damage).
#[test]
fn the_only_wal_file_cut_to_its_header_is_refused_not_the_checkpoint_alone() {
    let (files, models) = crashed_after_checkpoint(2, 6);
    let wal = the_segment(&files);
    for cut in [4096, 4096 + 10] {
        assert_cut_refused(&files, &wal, cut, &models, &models[2]);
    }
}

/// A log salvaged past a segment cut short, then closed cleanly, opens
/// again without salvage. The close left the cut file behind as a free
/// one (its use wholly below the new replay start), and every later open
/// refused it as "cut short" before, salvage or not, for ever (a
/// session-33 probe of WAL damage).
#[test]
fn a_salvaged_cut_log_opens_after_a_clean_close() {
    let small = || {
        common::builder()
            .background_checkpoints(false)
            .wal_segment_bytes(32 * 1024)
            .wal_first_segment_bytes(8192)
    };
    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
    let put = |db: &Database, k: u64| {
        let tx = db.begin_write().unwrap();
        tx.open_table(T)
            .unwrap()
            .insert(k, vec![k as u8; 600].as_slice())
            .unwrap();
        tx.commit().unwrap();
    };
    let rows = |db: &Database| {
        db.begin_read()
            .unwrap()
            .open_table(T)
            .unwrap()
            .len()
            .unwrap()
    };
    let vfs = SimVfs::new();
    let db = small()
        .create_with_vfs(Arc::new(vfs.clone()), "d.sheaf")
        .unwrap();
    for k in 0..120 {
        put(&db, k);
        if k == 9 {
            db.checkpoint().unwrap();
        }
    }
    let img = vfs.crash_with(0, CrashPolicy::KeepAll);
    std::mem::forget(db);
    let seg = "d.sheaf-wal.2";
    let mut bytes = img.file_bytes(seg).expect("a third segment");
    bytes.truncate(second_frame(&bytes));
    img.set_file_bytes(seg, bytes);
    let refused = small().open_with_vfs(Arc::new(img.clone()), "d.sheaf");
    assert!(
        matches!(refused, Err(sheafdb::Error::Corrupted { .. })),
        "{:?}",
        refused.map(drop)
    );
    let db = small()
        .salvage_damaged_wal(true)
        .open_with_vfs(Arc::new(img.clone()), "d.sheaf")
        .unwrap();
    assert!(db.wal_damage().is_some());
    let salvaged = rows(&db);
    put(&db, 1_000_000);
    db.close().unwrap();
    for round in 0..2 {
        let db = small()
            .open_with_vfs(Arc::new(img.clone()), "d.sheaf")
            .unwrap_or_else(|e| panic!("open {round} after the clean close: {e}"));
        assert_eq!(rows(&db), salvaged + 1);
        assert!(db.wal_damage().is_none());
        db.check_integrity().unwrap();
        db.close().unwrap();
    }
}

/// The disk dies at any of the operations of a run of commits across WAL
/// segment switches (optionally with a checkpoint after each), then a
/// power cut, an open (recovery), a clean close with nothing new, and
/// another open: both opens succeed, with every acknowledged commit.
/// From a session-34 review of rules O15/O16: a crash could leave a
/// switched-to use empty (header and link durable, first frame not); the
/// clean close then gave it back and kept the older file, whose link named
/// the empty use at exactly the replay start, and the second open was
/// refused as a missing use (the check is strict since). And an I/O error
/// in a new file's zero fill left a short file with a header, which a
/// later open took for a cut segment (the header goes in last since).
#[test]
fn a_crash_across_switches_then_a_clean_close_always_reopens() {
    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
    let small = || {
        common::builder()
            .background_checkpoints(false)
            .wal_segment_bytes(32 * 1024)
            .wal_first_segment_bytes(8192)
    };
    let rows = |db: &Database| {
        db.begin_read()
            .unwrap()
            .open_table(T)
            .map_or(0, |t| t.len().unwrap())
    };
    for ckpt in [false, true] {
        for n in (1..400u64).step_by(2) {
            let ctx = format!("checkpoints {ckpt}, disk dead from op {n}");
            let vfs = SimVfs::new();
            let db = small()
                .create_with_vfs(Arc::new(vfs.clone()), "r.sheaf")
                .unwrap();
            vfs.fail_from(n, Fault::Eio);
            let mut acked = 0;
            for k in 0..60u64 {
                let Ok(tx) = db.begin_write() else { break };
                let ok = (|| -> Result<()> {
                    tx.open_table(T)?.insert(k, vec![k as u8; 600].as_slice())?;
                    tx.commit()
                })();
                if ok.is_err() {
                    break;
                }
                acked = k + 1;
                if ckpt && db.checkpoint().is_err() {
                    break;
                }
            }
            let image = vfs.crash_with(n, CrashPolicy::DropAll);
            std::mem::forget(db);
            let db = small()
                .open_with_vfs(Arc::new(image.clone()), "r.sheaf")
                .unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
            assert!(rows(&db) >= acked, "{ctx}: lost a commit");
            db.close().unwrap_or_else(|e| panic!("{ctx}: close: {e}"));
            let db = small()
                .open_with_vfs(Arc::new(image.clone()), "r.sheaf")
                .unwrap_or_else(|e| panic!("{ctx}: open after a clean close: {e}"));
            assert!(rows(&db) >= acked, "{ctx}: lost a commit");
            // DESIGN §11.8: after any crash and reopen the file checks out.
            db.check_integrity()
                .unwrap_or_else(|e| panic!("{ctx}: integrity: {e}"));
        }
    }
}
