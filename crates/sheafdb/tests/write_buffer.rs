//! Issue 11: the write buffer. Commits that only put and remove change no
//! page; snapshots read the buffer at their version; folds (by a
//! checkpoint, or by the commit that finds the buffer past its threshold)
//! move the buffer into the trees without changing what any snapshot
//! sees; the buffer's memory stays bounded; buffered commits survive
//! crashes through the WAL.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use common::{builder, def};
use sheafdb::storage::mem::MemVfs;
use sheafdb::storage::sim::{CrashPolicy, Fault, SimVfs};
use sheafdb::{Database, Durability, Result, TableDefinition};

const T: TableDefinition<u64, u64> = TableDefinition::new("t");

fn mem_db(vfs: &MemVfs, fold_bytes: u64) -> Database {
    builder()
        .background_checkpoints(false)
        .buffer_fold_bytes(fold_bytes)
        .create_with_vfs(Arc::new(vfs.clone()), "b.sheaf")
        .unwrap()
}

fn put(db: &Database, k: u64, v: u64) {
    let tx = db.begin_write().unwrap();
    tx.open_table(T).unwrap().insert(k, v).unwrap();
    tx.commit().unwrap();
}

fn contents(rx: &sheafdb::ReadTransaction) -> Vec<(u64, u64)> {
    let t = rx.open_table(T).unwrap();
    let fwd: Vec<(u64, u64)> = t
        .iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.value(), v.value())).unwrap())
        .collect();
    let mut back: Vec<(u64, u64)> = t
        .iter()
        .unwrap()
        .rev()
        .map(|e| e.map(|(k, v)| (k.value(), v.value())).unwrap())
        .collect();
    back.reverse();
    assert_eq!(fwd, back, "the two directions disagree");
    assert_eq!(
        t.len().unwrap(),
        fwd.len() as u64,
        "len disagrees with iteration"
    );
    for (k, v) in &fwd {
        assert_eq!(t.get(k).unwrap().map(|g| g.value()), Some(*v));
    }
    fwd
}

#[test]
fn buffered_commits_write_no_page_and_a_checkpoint_folds_them() {
    let vfs = MemVfs::new();
    let db = mem_db(&vfs, 16 << 20);
    put(&db, 0, 0);
    db.checkpoint().unwrap();
    let cf = db.default_cf().unwrap();
    assert_eq!(cf.stats().unwrap().dirty_bytes, 0);
    for k in 1..300u64 {
        put(&db, k, k * 10);
    }
    let tx = db.begin_write().unwrap();
    tx.open_table(T).unwrap().remove(7).unwrap();
    tx.commit().unwrap();
    let stats = cf.stats().unwrap();
    assert_eq!(stats.dirty_bytes, 0, "a buffered commit wrote pages");
    assert!(stats.buffered_bytes > 0, "nothing was buffered");
    assert_eq!(stats.entries, 299);
    let before = contents(&db.begin_read().unwrap());
    assert_eq!(before.len(), 299);
    assert!(!before.iter().any(|(k, _)| *k == 7));
    db.checkpoint().unwrap();
    let stats = cf.stats().unwrap();
    assert_eq!(stats.buffered_bytes, 0, "the checkpoint did not fold");
    assert_eq!(stats.dirty_bytes, 0, "the checkpoint left dirty pages");
    assert_eq!(contents(&db.begin_read().unwrap()), before);
    db.check_integrity().unwrap();
    drop((cf, db));
    let db = builder()
        .open_with_vfs(Arc::new(vfs.clone()), "b.sheaf")
        .unwrap();
    assert_eq!(contents(&db.begin_read().unwrap()), before);
}

#[test]
fn snapshots_see_exactly_their_version_across_folds() {
    let vfs = MemVfs::new();
    let db = mem_db(&vfs, 16 << 20);
    put(&db, 1, 1);
    let rx1 = db.begin_read().unwrap();
    put(&db, 2, 2);
    put(&db, 1, 11);
    let rx2 = db.begin_read().unwrap();
    let want1 = vec![(1, 1)];
    let want2 = vec![(1, 11), (2, 2)];
    assert_eq!(contents(&rx1), want1);
    assert_eq!(contents(&rx2), want2);
    db.checkpoint().unwrap(); // folds
    put(&db, 3, 3);
    let tx = db.begin_write().unwrap();
    tx.open_table(T).unwrap().remove(2).unwrap();
    tx.commit().unwrap();
    db.checkpoint().unwrap(); // folds again
    put(&db, 4, 4);
    assert_eq!(
        contents(&rx1),
        want1,
        "an old snapshot changed across folds"
    );
    assert_eq!(
        contents(&rx2),
        want2,
        "an old snapshot changed across folds"
    );
    assert_eq!(
        contents(&db.begin_read().unwrap()),
        vec![(1, 11), (3, 3), (4, 4)]
    );
}

/// A write transaction reads the buffered commits below its own writes,
/// and a catalog change folds them into the trees at its commit.
#[test]
fn a_writer_reads_through_the_buffer_and_a_catalog_change_folds_it() {
    let vfs = MemVfs::new();
    let db = mem_db(&vfs, 16 << 20);
    for k in 0..50u64 {
        put(&db, k, k);
    }
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        assert_eq!(t.len().unwrap(), 50);
        assert_eq!(t.insert(10, 100).unwrap().map(|g| g.value()), Some(10));
        assert_eq!(t.remove(11).unwrap().map(|g| g.value()), Some(11));
        assert_eq!(t.first().unwrap().unwrap().0.value(), 0);
        assert_eq!(t.last().unwrap().unwrap().0.value(), 49);
        assert_eq!(t.pop_last().unwrap().unwrap().0.value(), 49);
        assert_eq!(t.len().unwrap(), 48);
        let removed = t.extract_if(|k, _| k % 10 == 5).unwrap();
        assert_eq!(removed.len(), 5);
        assert_eq!(t.len().unwrap(), 43);
    }
    tx.open_table(def("other")).unwrap(); // a catalog change
    tx.commit().unwrap();
    let cf = db.default_cf().unwrap();
    assert_eq!(
        cf.stats().unwrap().buffered_bytes,
        0,
        "a tree commit kept the buffer"
    );
    let got = contents(&db.begin_read().unwrap());
    let want: Vec<(u64, u64)> = (0..49u64)
        .filter(|k| *k != 11 && k % 10 != 5)
        .map(|k| (k, if k == 10 { 100 } else { k }))
        .collect();
    assert_eq!(got, want);
    db.check_integrity().unwrap();
}

/// A writer that keeps committing never lets its CF's buffer grow past
/// the fold threshold (plus one transaction): past half of it the writer
/// asks the background checkpointer to fold aside (off here), and the
/// commit that finds it full folds the buffer itself.
#[test]
fn the_buffer_stays_under_its_fold_threshold() {
    let vfs = MemVfs::new();
    let limit = 64 << 10;
    let db = mem_db(&vfs, limit);
    let cf = db.default_cf().unwrap();
    let mut peak = 0;
    let mut folds = 0;
    let mut last = 0;
    for k in 0..6000u64 {
        put(&db, k % 700, k);
        let b = cf.stats().unwrap().buffered_bytes;
        assert!(
            b <= limit + 1024,
            "buffer at {b} bytes, past {limit} + one commit"
        );
        if b < last {
            folds += 1;
        }
        last = b;
        peak = peak.max(b);
    }
    assert!(folds >= 3, "only {folds} folds");
    assert!(peak > limit / 2, "the buffer never filled (peak {peak})");
    let got = contents(&db.begin_read().unwrap());
    assert_eq!(got.len(), 700);
    assert!(got.iter().all(|(k, v)| v % 700 == *k && *v >= 5300));
    db.check_integrity().unwrap();
}

/// Buffered commits live in the WAL until a fold reaches a checkpoint: a
/// power cut at any moment keeps every acknowledged `Immediate` commit,
/// across folds.
#[test]
fn buffered_commits_survive_power_loss_across_folds() {
    for seed in 0..40u64 {
        let vfs = SimVfs::new();
        let db = builder()
            .background_checkpoints(false)
            .buffer_fold_bytes(4 << 10)
            .create_with_vfs(Arc::new(vfs.clone()), "p.sheaf")
            .unwrap();
        let n = 20 + seed * 7;
        for k in 0..n {
            put(&db, k, k + seed);
            if k % 23 == seed % 23 {
                db.checkpoint().unwrap();
            }
        }
        let crashed = vfs.crash_with(seed, CrashPolicy::Random);
        drop(db);
        let db = builder()
            .open_with_vfs(Arc::new(crashed), "p.sheaf")
            .unwrap_or_else(|e| panic!("seed {seed}: reopen failed: {e}"));
        let got = contents(&db.begin_read().unwrap());
        let want: Vec<(u64, u64)> = (0..n).map(|k| (k, k + seed)).collect();
        assert_eq!(got, want, "seed {seed}: an acknowledged commit was lost");
        db.check_integrity().unwrap();
    }
}

/// A checkpoint skips (does not wait for) a CF whose writer is busy; its
/// buffered commits stay in the WAL and are folded later.
#[test]
fn a_checkpoint_does_not_wait_for_a_busy_writer() {
    let vfs = MemVfs::new();
    let db = Arc::new(mem_db(&vfs, 16 << 20));
    for k in 0..10u64 {
        put(&db, k, k);
    }
    let tx = db.begin_write().unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let db2 = db.clone();
    thread::spawn(move || {
        done_tx
            .send(db2.checkpoint().map_err(|e| e.to_string()))
            .unwrap();
    });
    let r = done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("checkpoint waited for the writer");
    r.unwrap();
    let cf = db.default_cf().unwrap();
    assert!(cf.stats().unwrap().buffered_bytes > 0);
    drop(tx);
    db.checkpoint().unwrap();
    assert_eq!(cf.stats().unwrap().buffered_bytes, 0);
    assert_eq!(contents(&db.begin_read().unwrap()).len(), 10);
}

/// 4 writers (each moving amounts between keys of its own CF, sum kept),
/// 8 readers checking every sum in their snapshots (database-wide and
/// per CF), and a checkpoint loop folding all the while.
#[test]
fn readers_writers_and_folds_keep_every_invariant() -> Result<()> {
    const CFS: usize = 4;
    const KEYS: u64 = 64;
    let db = Arc::new(
        builder()
            .background_checkpoints(false)
            .buffer_fold_bytes(32 << 10)
            .create_with_vfs(Arc::new(MemVfs::new()), "c.sheaf")?,
    );
    let mut cfs = Vec::new();
    for i in 0..CFS {
        let cf = db.create_cf(&format!("cf{i}"))?;
        let tx = cf.begin_write()?;
        {
            let mut t = tx.open_table(T)?;
            for k in 0..KEYS {
                t.insert(k, 1000)?;
            }
        }
        tx.commit()?;
        cfs.push(cf);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for (i, cf) in cfs.iter().enumerate() {
        let (cf, stop, commits) = (cf.clone(), stop.clone(), commits.clone());
        handles.push(thread::spawn(move || -> Result<()> {
            let mut x = i as u64 * 7919 + 1;
            while !stop.load(Ordering::Relaxed) {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let (a, b) = ((x >> 20) % KEYS, (x >> 40) % KEYS);
                let mut tx = cf.begin_write()?;
                tx.set_durability(Durability::None);
                {
                    let mut t = tx.open_table(T)?;
                    let va = t.get(a)?.map(|g| g.value()).unwrap_or(0);
                    let vb = t.get(b)?.map(|g| g.value()).unwrap_or(0);
                    if a != b && va > 0 {
                        t.insert(a, va - 1)?;
                        t.insert(b, vb + 1)?;
                    }
                }
                tx.commit()?;
                commits.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    for r in 0..8 {
        let (db, cfs, stop) = (db.clone(), cfs.clone(), stop.clone());
        handles.push(thread::spawn(move || -> Result<()> {
            while !stop.load(Ordering::Relaxed) {
                let cf = &cfs[r % CFS];
                let rx = if r % 2 == 0 {
                    db.begin_read()?
                } else {
                    cf.begin_read()?
                };
                let t = rx.open_table_in(cf, T)?;
                let mut sum = 0;
                let mut n = 0;
                for e in t.iter()? {
                    sum += e?.1.value();
                    n += 1;
                }
                assert_eq!(
                    (n, sum),
                    (KEYS, KEYS * 1000),
                    "a snapshot broke the invariant"
                );
                assert_eq!(t.len()?, KEYS);
                let back: u64 = t
                    .iter()?
                    .rev()
                    .map(|e| e.map(|(_, v)| v.value()))
                    .sum::<Result<u64>>()?;
                assert_eq!(back, KEYS * 1000);
            }
            Ok(())
        }));
    }
    {
        let (db, stop) = (db.clone(), stop.clone());
        handles.push(thread::spawn(move || -> Result<()> {
            while !stop.load(Ordering::Relaxed) {
                db.checkpoint()?;
                thread::sleep(Duration::from_millis(3));
            }
            Ok(())
        }));
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("a thread panicked")?;
    }
    assert!(commits.load(Ordering::Relaxed) > 100, "too few commits ran");
    db.check_integrity()?;
    Ok(())
}

/// A multi-CF transaction that only puts and removes is buffered in every
/// CF (one WAL record, no page), visible in all its CFs at once, and
/// survives power loss whole.
#[test]
fn multi_cf_commits_are_buffered_and_atomic() {
    let vfs = SimVfs::new();
    let db = builder()
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), "m.sheaf")
        .unwrap();
    let (a, b) = (db.create_cf("a").unwrap(), db.create_cf("b").unwrap());
    for cf in [&a, &b] {
        let tx = cf.begin_write().unwrap();
        tx.open_table(T).unwrap().insert(0, 1000).unwrap();
        tx.commit().unwrap();
    }
    db.checkpoint().unwrap();
    for i in 1..=50u64 {
        let tx = db.begin_write_cfs(&[&a, &b]).unwrap();
        {
            let mut ta = tx.open_table(&a, T).unwrap();
            let v = ta.get(0).unwrap().unwrap().value();
            ta.insert(0, v - 1).unwrap();
            ta.insert(i, i).unwrap();
        }
        {
            let mut tb = tx.open_table(&b, T).unwrap();
            let v = tb.get(0).unwrap().unwrap().value();
            tb.insert(0, v + 1).unwrap();
        }
        tx.commit().unwrap();
        let rx = db.begin_read().unwrap();
        let va = rx
            .open_table_in(&a, T)
            .unwrap()
            .get(0)
            .unwrap()
            .unwrap()
            .value();
        let vb = rx
            .open_table_in(&b, T)
            .unwrap()
            .get(0)
            .unwrap()
            .unwrap()
            .value();
        assert_eq!(va + vb, 2000, "a multi-CF commit was seen in one CF only");
    }
    for cf in [&a, &b] {
        let s = cf.stats().unwrap();
        assert_eq!(s.dirty_bytes, 0, "a buffered multi-CF commit wrote pages");
        assert!(s.buffered_bytes > 0);
    }
    let crashed = vfs.crash_with(3, CrashPolicy::DropAll);
    drop((a, b, db));
    let db = builder()
        .open_with_vfs(Arc::new(crashed), "m.sheaf")
        .unwrap();
    let (a, b) = (db.cf("a").unwrap(), db.cf("b").unwrap());
    let rx = db.begin_read().unwrap();
    let ta = rx.open_table_in(&a, T).unwrap();
    assert_eq!(ta.get(0).unwrap().unwrap().value(), 950);
    assert_eq!(ta.len().unwrap(), 51);
    assert_eq!(
        rx.open_table_in(&b, T)
            .unwrap()
            .get(0)
            .unwrap()
            .unwrap()
            .value(),
        1050
    );
    drop((ta, rx));
    db.check_integrity().unwrap();
}

/// A crash (with the disk failing from that operation on) at every storage
/// operation of a checkpoint that folds buffered commits: the fold's own
/// WAL record, the tree pages, the syncs, the superblock. Every
/// acknowledged commit is there after reopen, and integrity holds.
#[test]
fn a_crash_at_every_step_of_fold_and_checkpoint_loses_nothing() {
    let build = |vfs: &SimVfs| -> (Database, Vec<(u64, u64)>) {
        let db = builder()
            .background_checkpoints(false)
            .create_with_vfs(Arc::new(vfs.clone()), "f.sheaf")
            .unwrap();
        for k in 0..200u64 {
            put(&db, k, k);
        }
        db.checkpoint().unwrap();
        // Buffered: updates, inserts, removals.
        for k in 150..260u64 {
            put(&db, k, k * 3);
        }
        for k in (0..100u64).step_by(7) {
            let tx = db.begin_write().unwrap();
            tx.open_table(T).unwrap().remove(k).unwrap();
            tx.commit().unwrap();
        }
        let want = (0..260u64)
            .filter(|k| !(*k < 100 && k % 7 == 0))
            .map(|k| (k, if k >= 150 { k * 3 } else { k }))
            .collect();
        (db, want)
    };
    let probe = SimVfs::new();
    let (db, want) = build(&probe);
    let cf = db.default_cf().unwrap();
    assert!(cf.stats().unwrap().buffered_bytes > 0);
    let before = probe.op_count();
    db.checkpoint().unwrap();
    let steps = probe.op_count() - before;
    assert_eq!(
        cf.stats().unwrap().buffered_bytes,
        0,
        "the checkpoint did not fold"
    );
    assert_eq!(contents(&db.begin_read().unwrap()), want);
    drop((cf, db));
    assert!(
        steps >= 5,
        "fold record, pages, sync, superblock, sync: {steps} ops"
    );
    eprintln!("fold + checkpoint: {steps} storage operations");
    for step in 1..=steps {
        for seed in 0..3u64 {
            let vfs = SimVfs::new();
            let (db, want) = build(&vfs);
            vfs.fail_from(step, Fault::Eio);
            let _ = db.checkpoint();
            let crashed = vfs.crash(step * 10 + seed);
            drop(db);
            let db = builder()
                .open_with_vfs(Arc::new(crashed), "f.sheaf")
                .unwrap_or_else(|e| panic!("step {step} seed {seed}: reopen: {e}"));
            assert_eq!(
                contents(&db.begin_read().unwrap()),
                want,
                "step {step} seed {seed}: state after a crash in fold + checkpoint"
            );
            db.check_integrity()
                .unwrap_or_else(|e| panic!("step {step} seed {seed}: integrity: {e}"));
        }
    }
}

/// Recovery puts replayed puts and removals into the buffer: reopening
/// after a crash writes no page (a catalog record in the replayed log
/// makes it write the trees instead, and both give the same contents).
#[test]
fn recovery_replays_into_the_buffer() {
    for with_catalog_op in [false, true] {
        let vfs = SimVfs::new();
        let db = builder()
            .background_checkpoints(false)
            .create_with_vfs(Arc::new(vfs.clone()), "r.sheaf")
            .unwrap();
        for k in 0..100u64 {
            put(&db, k, k);
        }
        db.checkpoint().unwrap();
        for k in 50..180u64 {
            put(&db, k, k + 1);
        }
        let tx = db.begin_write().unwrap();
        tx.open_table(T).unwrap().remove(3).unwrap();
        if with_catalog_op {
            tx.open_table(def("created")).unwrap();
        }
        tx.commit().unwrap();
        put(&db, 200, 1);
        let crashed = vfs.crash_with(1, CrashPolicy::DropAll);
        drop(db);
        let db = builder()
            .open_with_vfs(Arc::new(crashed), "r.sheaf")
            .unwrap();
        assert!(db.replayed_records() > 100, "nothing was replayed");
        let cf = db.default_cf().unwrap();
        let s = cf.stats().unwrap();
        if with_catalog_op {
            assert!(
                s.dirty_bytes > 0,
                "a catalog record was replayed without the trees"
            );
        } else {
            assert_eq!(s.dirty_bytes, 0, "recovery wrote pages");
            assert!(s.buffered_bytes > 0, "recovery did not buffer");
        }
        let want: Vec<(u64, u64)> = (0..180u64)
            .filter(|k| *k != 3)
            .map(|k| (k, if k >= 50 { k + 1 } else { k }))
            .chain([(200, 1)])
            .collect();
        assert_eq!(
            contents(&db.begin_read().unwrap()),
            want,
            "catalog op {with_catalog_op}"
        );
        db.checkpoint().unwrap();
        assert_eq!(cf.stats().unwrap().buffered_bytes, 0);
        assert_eq!(contents(&db.begin_read().unwrap()), want);
        db.check_integrity().unwrap();
    }
}

/// Folds made aside while a writer keeps committing: a checkpoint loop
/// folds and checkpoints (writers continue into the buffer meanwhile),
/// and a power cut at a random moment keeps every commit acknowledged
/// before it — including commits carried over in a fold version's buffer
/// (whose WAL the checkpoint must keep).
#[test]
fn power_cuts_during_folds_made_aside_keep_acknowledged_commits() {
    for seed in 0..12u64 {
        let vfs = SimVfs::new();
        let db = Arc::new(
            builder()
                .background_checkpoints(false)
                .buffer_fold_bytes(8 << 10)
                .create_with_vfs(Arc::new(vfs.clone()), "a.sheaf")
                .unwrap(),
        );
        put(&db, 0, 0);
        let acked = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
            thread::spawn(move || {
                let mut k = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    let tx = db.begin_write().unwrap();
                    tx.open_table(T).unwrap().insert(k, k).unwrap();
                    if tx.commit().is_err() {
                        return;
                    }
                    acked.store(k, Ordering::SeqCst);
                    k += 1;
                }
            })
        };
        let folder = {
            let (db, stop) = (db.clone(), stop.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if db.checkpoint().is_err() {
                        return;
                    }
                }
            })
        };
        thread::sleep(Duration::from_millis(40 + seed * 13));
        let floor = acked.load(Ordering::SeqCst);
        let crashed = vfs.crash_with(seed, CrashPolicy::DropAll);
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        folder.join().unwrap();
        drop(db);
        let db = builder()
            .open_with_vfs(Arc::new(crashed), "a.sheaf")
            .unwrap_or_else(|e| panic!("seed {seed}: reopen: {e}"));
        let got = contents(&db.begin_read().unwrap());
        let n = got.len() as u64;
        assert!(
            n > floor,
            "seed {seed}: {n} rows, {floor} were acknowledged before the cut"
        );
        assert!(
            got.iter()
                .enumerate()
                .all(|(i, (k, v))| *k == i as u64 && v == k),
            "seed {seed}: not a prefix of the commits"
        );
        db.check_integrity().unwrap();
    }
}

/// An explicit checkpoint (and a close) folds even a buffer that is full
/// (which a background fold leaves to the writer's next commit), so it
/// leaves nothing to replay.
#[test]
fn an_explicit_checkpoint_folds_a_full_buffer() {
    let vfs = MemVfs::new();
    let limit = 4 << 10;
    let db = mem_db(&vfs, limit);
    let cf = db.default_cf().unwrap();
    let mut k = 0;
    while cf.stats().unwrap().buffered_bytes < limit {
        put(&db, k, k);
        k += 1;
    }
    db.checkpoint().unwrap();
    assert_eq!(
        cf.stats().unwrap().buffered_bytes,
        0,
        "a full buffer was not folded"
    );
    put(&db, k, k);
    drop((cf, db));
    let db = builder()
        .open_with_vfs(Arc::new(vfs.clone()), "b.sheaf")
        .unwrap();
    assert_eq!(
        db.replayed_records(),
        0,
        "a clean close left records to replay"
    );
    assert_eq!(contents(&db.begin_read().unwrap()).len() as u64, k + 1);
}
