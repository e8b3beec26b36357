//! Commit and column-family benchmarks on real files (issues 3 and 4).
//! Prints figures; it is not a test.
//!
//! Run: `cargo run --release --example commit_bench [-- --quick]`
//!
//! 1. fdatasync latency of this machine (4 KiB overwrite + fdatasync on a
//!    preallocated file), the physical floor of a durable commit.
//! 2. Latency p50/p95/p99 of 1,000 single-row `Immediate` commits.
//! 3. Throughput of single-row `Immediate` commits with 1, 4, 16, 64
//!    threads (group commit shares one fdatasync among many commits), and
//!    of single-row `None` commits (no sync: what the CF's writer lock and
//!    publication cost as threads are added).
//! 4. Batched writes (1,000 × 1 KiB values per transaction, `Immediate`)
//!    with 1, 2, 4, 8 writer threads, each on its own column family, and
//!    the same threads all on one column family.
//! 5. Point-read throughput with 1, 2, 4, 8 reader threads.

#![expect(
    clippy::disallowed_types,
    reason = "measures raw fdatasync on its own file, beside the engine"
)]

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sheafdb::{Database, Durability, Result, TableDefinition};

const ROWS: TableDefinition<u64, &[u8]> = TableDefinition::new("rows");

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn fsync_latency(dir: &std::path::Path, n: usize) -> std::io::Result<Duration> {
    let path = dir.join("fsync-probe");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    let block = vec![7u8; 4096];
    for i in 0..64u64 {
        f.write_all_at(&block, i * 4096)?;
    }
    f.sync_all()?;
    let mut samples = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let t = Instant::now();
        f.write_all_at(&block, (i % 64) * 4096)?;
        f.sync_data()?;
        samples.push(t.elapsed());
    }
    samples.sort();
    std::fs::remove_file(path)?;
    Ok(percentile(&samples, 0.5))
}

fn single_row_latency(db: &Database, n: usize) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let t = Instant::now();
        let tx = db.begin_write()?;
        tx.open_table(ROWS)?
            .insert(i % 1000, [1u8; 16].as_slice())?;
        tx.commit()?;
        samples.push(t.elapsed());
    }
    samples.sort();
    Ok(samples)
}

/// Runs `threads` workers calling `op(thread, i)` for `secs`; returns ops/s.
fn throughput(
    threads: usize,
    secs: f64,
    op: impl Fn(usize, u64) -> Result<()> + Send + Sync,
) -> f64 {
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (stop, done, op) = (&stop, &done, &op);
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    op(t, i).expect("benchmark operation failed");
                    i += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn batch(cf: &sheafdb::ColumnFamily, thread: usize, i: u64, value: &[u8]) -> Result<()> {
    let tx = cf.begin_write()?;
    {
        let mut t = tx.open_table(ROWS)?;
        let base = ((thread as u64) << 40) | ((i % 64) * 1000);
        for k in 0..1000 {
            t.insert(base + k, value)?;
        }
    }
    tx.commit()
}

/// Recovery throughput: commits `n` single-row transactions (`None`
/// durability, then one `sync`) on the in-memory simulated disk, crashes
/// it keeping every written byte (like a killed process), and times the
/// reopen, which replays every record through the B+trees.
fn recovery(n: u64) -> Result<()> {
    use sheafdb::storage::sim::{CrashPolicy, SimVfs};
    let vfs = SimVfs::new();
    let open = |v: &SimVfs| {
        Database::builder()
            .background_checkpoints(false)
            .create_with_vfs(Arc::new(v.clone()), "recover.sheaf")
    };
    let db = open(&vfs)?;
    for i in 0..n {
        let mut tx = db.begin_write()?;
        tx.set_durability(sheafdb::Durability::None);
        tx.open_table(ROWS)?.insert(i, [5u8; 16].as_slice())?;
        tx.commit()?;
    }
    db.sync()?;
    let crashed = vfs.crash_with(0, CrashPolicy::KeepAll);
    std::mem::forget(db); // a killed process does not checkpoint at close
    let t = Instant::now();
    let db = open(&crashed)?;
    let secs = t.elapsed().as_secs_f64();
    let replayed = db.replayed_records();
    assert_eq!(replayed, n, "every commit must be replayed");
    println!("\nrecovery after a crash: {replayed} records (one 16-byte put each) replayed at open in {:.3} s = {:.0} records/s",
        secs, replayed as f64 / secs);
    Ok(())
}

fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let secs = if quick { 0.5 } else { 2.0 };
    let dir = tempfile::tempdir()?;
    println!("sheafdb commit benchmarks ({} cpus, {} s per cell, durable = Immediate: WAL fdatasync before commit returns)",
        std::thread::available_parallelism().map_or(1, |n| n.get()), secs);

    let fsync = fsync_latency(dir.path(), if quick { 100 } else { 500 })?;
    println!(
        "\nfdatasync p50 (4 KiB overwrite): {:>8.1} us",
        fsync.as_secs_f64() * 1e6
    );

    let db = Database::builder().create(dir.path().join("commit.sheaf"))?;
    let lat = single_row_latency(&db, if quick { 200 } else { 1000 })?;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "\nsingle-row Immediate commit latency ({} commits)",
        lat.len()
    );
    println!(
        "  p50 {:>8.1} us   p95 {:>8.1} us   p99 {:>8.1} us   p50/fdatasync = {:.2}x",
        us(percentile(&lat, 0.5)),
        us(percentile(&lat, 0.95)),
        us(percentile(&lat, 0.99)),
        us(percentile(&lat, 0.5)) / us(fsync)
    );

    println!("\nsingle-row Immediate commits, one CF, N threads");
    let mut one = 0.0;
    for threads in [1usize, 4, 16, 64] {
        let syncs_before = db.wal_stats().syncs;
        let tps = throughput(threads, secs, |t, i| {
            let tx = db.begin_write()?;
            tx.open_table(ROWS)?
                .insert((t as u64) << 32 | (i % 1000), [2u8; 16].as_slice())?;
            tx.commit()
        });
        let syncs = db.wal_stats().syncs - syncs_before;
        if threads == 1 {
            one = tps;
        }
        println!("  {threads:>3} threads: {tps:>9.0} commits/s  ({:>5.1}x one thread, {:.1} commits per fdatasync)",
            tps / one, tps * secs / syncs.max(1) as f64);
    }

    println!("\nsingle-row None commits (no sync), one CF, N threads");
    let mut one = 0.0;
    for threads in [1usize, 4, 16, 64] {
        let tps = throughput(threads, secs, |t, i| {
            let mut tx = db.begin_write()?;
            tx.set_durability(Durability::None);
            tx.open_table(ROWS)?
                .insert((t as u64) << 32 | (i % 1000), [3u8; 16].as_slice())?;
            tx.commit()
        });
        if threads == 1 {
            one = tps;
        }
        println!(
            "  {threads:>3} threads: {tps:>9.0} commits/s  ({:>5.2}x one thread)",
            tps / one
        );
    }
    drop(db);

    let value = vec![9u8; 1024];
    println!("\nbatched writes: 1,000 x 1 KiB per transaction, Immediate (MB/s of values)");
    for threads in [1usize, 2, 4, 8] {
        let db = Database::builder().create(dir.path().join(format!("cf{threads}.sheaf")))?;
        let cfs: Vec<_> = (0..threads)
            .map(|i| db.create_cf(&format!("w{i}")))
            .collect::<Result<_>>()?;
        let own = throughput(threads, secs, |t, i| batch(&cfs[t], t, i, &value));
        let shared = db.create_cf("shared")?;
        let one_cf = throughput(threads, secs, |t, i| batch(&shared, t, i, &value));
        println!("  {threads} writers: own CF each {:>7.1} MB/s   all on one CF {:>7.1} MB/s   ratio {:.2}x",
            own * 1000.0 * 1024.0 / 1e6, one_cf * 1000.0 * 1024.0 / 1e6, own / one_cf.max(1e-9));
    }

    recovery(if quick { 50_000 } else { 500_000 })?;

    println!("\npoint reads over 100,000 rows (snapshot per 100 reads)");
    let db = Database::builder().create(dir.path().join("read.sheaf"))?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(ROWS)?;
        for k in 0..100_000u64 {
            t.insert(k, [3u8; 100].as_slice())?;
        }
    }
    tx.commit()?;
    for threads in [1usize, 2, 4, 8] {
        let rps = throughput(threads, secs, |t, i| {
            let rx = db.begin_read()?;
            let table = rx.open_table(ROWS)?;
            let mut x = (t as u64 + 1) * 0x9E37_79B9 + i * 100;
            for _ in 0..100 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                assert!(table.get(x % 100_000)?.is_some());
            }
            Ok(())
        }) * 100.0;
        println!("  {threads} readers: {rps:>11.0} reads/s");
    }
    Ok(())
}
