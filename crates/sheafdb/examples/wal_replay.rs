//! WAL benchmark: replay throughput and group-commit throughput on real
//! files, beside the `fdatasync` latency of the same machine.
//!
//! Run: `cargo run --release --example wal_replay [RECORDS] [DIR]`
//! (defaults: 1,000,000 records; a temporary directory under the current
//! one — not `/tmp`, which may be a RAM file system where syncs are free).

#![expect(
    clippy::disallowed_types,
    reason = "a benchmark preallocating its own scratch file, outside the engine"
)]

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use sheafdb::storage::file::FsVfs;
use sheafdb::storage::Vfs;
use sheafdb::testing::{open_wal as wal_open, Lsn, ReplaySummary, Wal, WalOptions};
use sheafdb::Result;

const PAYLOAD_BYTES: usize = 50;
const GROUP_COMMIT_SECS: f64 = 2.0;
const FSYNC_SAMPLES: usize = 300;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let records: u64 = args
        .next()
        .map(|a| a.parse().expect("RECORDS must be a number"))
        .unwrap_or(1_000_000);
    let parent = args.next().unwrap_or_else(|| ".".to_owned());
    let dir = tempfile::Builder::new()
        .prefix("sheafdb-wal-bench-")
        .tempdir_in(&parent)?;
    println!("WAL benchmark in {}", dir.path().display());

    let fsync = fdatasync_latency(dir.path())?;
    println!(
        "fdatasync of a 4 KiB overwrite: median {:.1} us, p90 {:.1} us ({FSYNC_SAMPLES} samples)",
        micros(fsync.median),
        micros(fsync.p90)
    );

    replay_benchmark(dir.path(), records)?;
    group_commit_benchmark(dir.path(), fsync.median)?;
    Ok(())
}

struct Latency {
    median: Duration,
    p90: Duration,
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Median of `FSYNC_SAMPLES` 4 KiB overwrites of a preallocated file, each
/// followed by `fdatasync`.
fn fdatasync_latency(dir: &std::path::Path) -> std::io::Result<Latency> {
    const FILE_BYTES: u64 = 4 << 20;
    let path = dir.join("fsync-probe");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    file.write_all_at(&vec![0u8; FILE_BYTES as usize], 0)?;
    file.sync_all()?;
    let block = vec![0xA5u8; 4096];
    let mut samples = Vec::with_capacity(FSYNC_SAMPLES);
    for i in 0..FSYNC_SAMPLES as u64 {
        let t = Instant::now();
        file.write_all_at(&block, (i * 4096) % FILE_BYTES)?;
        file.sync_data()?;
        samples.push(t.elapsed());
    }
    std::fs::remove_file(&path)?;
    samples.sort();
    Ok(Latency {
        median: samples[samples.len() / 2],
        p90: samples[samples.len() * 9 / 10],
    })
}

fn open_wal(vfs: &Arc<dyn Vfs>, name: &str) -> Result<(Wal, ReplaySummary, u64)> {
    let mut bytes = 0u64;
    let (wal, summary) = wal_open(
        Arc::clone(vfs),
        name,
        WalOptions::default(),
        Lsn(0),
        &mut |_, payload| {
            bytes += payload.len() as u64;
            Ok(())
        },
    )?;
    Ok((wal, summary, bytes))
}

fn replay_benchmark(dir: &std::path::Path, records: u64) -> Result<()> {
    let vfs: Arc<dyn Vfs> = Arc::new(FsVfs::new(dir));
    let (wal, _, _) = open_wal(&vfs, "replay")?;
    let t = Instant::now();
    let mut payload = [0u8; PAYLOAD_BYTES];
    for i in 0..records {
        payload[..8].copy_from_slice(&i.to_le_bytes());
        let (_, end) = wal.append(&payload)?;
        if i % 65_536 == 65_535 {
            wal.wait_written(end)?;
        }
    }
    let append_secs = t.elapsed().as_secs_f64();
    wal.sync()?;
    let write_secs = t.elapsed().as_secs_f64();
    let stats = wal.stats();
    println!(
        "\nwrote {records} records of {PAYLOAD_BYTES} bytes ({:.1} MiB of log, {} segments \
         created and zero-filled) in {:.2} s ({:.2} s appending and writing, {:.2} s final sync)",
        stats.bytes as f64 / (1 << 20) as f64,
        stats.segments_created,
        write_secs,
        append_secs,
        write_secs - append_secs
    );
    drop(wal);
    for run in 1..=3 {
        let t = Instant::now();
        let (_, summary, bytes) = open_wal(&vfs, "replay")?;
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(summary.records_replayed, records);
        assert_eq!(bytes, records * PAYLOAD_BYTES as u64);
        println!(
            "replay run {run}: {} records in {:.3} s = {:.2} M records/s ({:.0} MiB/s)",
            summary.records_replayed,
            secs,
            records as f64 / secs / 1e6,
            stats.bytes as f64 / secs / (1 << 20) as f64
        );
    }
    Ok(())
}

/// Result of one group-commit run.
struct Run {
    threads: usize,
    commits: u64,
    secs: f64,
    syncs: u64,
}

fn group_commit_benchmark(dir: &std::path::Path, fsync_median: Duration) -> Result<()> {
    println!(
        "\ngroup commit: append({PAYLOAD_BYTES} B) + wait_durable per commit, {GROUP_COMMIT_SECS} s per row"
    );
    println!(
        "{:>8} {:>12} {:>10} {:>12} {:>14} {:>12}",
        "threads", "commits/s", "vs 1 thr", "commits/sync", "mean lat (us)", "vs fdatasync"
    );
    let mut base = None;
    for threads in [1usize, 4, 16, 64] {
        let run = group_commit_run(dir, threads)?;
        let rate = run.commits as f64 / run.secs;
        let base_rate = *base.get_or_insert(rate);
        let mean_latency = run.secs * run.threads as f64 / run.commits as f64;
        println!(
            "{:>8} {:>12.0} {:>9.1}x {:>12.1} {:>14.1} {:>11.2}x",
            run.threads,
            rate,
            rate / base_rate,
            run.commits as f64 / run.syncs.max(1) as f64,
            mean_latency * 1e6,
            mean_latency / fsync_median.as_secs_f64()
        );
    }
    Ok(())
}

fn group_commit_run(dir: &std::path::Path, threads: usize) -> Result<Run> {
    let vfs: Arc<dyn Vfs> = Arc::new(FsVfs::new(dir));
    let name = format!("commit{threads}");
    let (wal, _, _) = open_wal(&vfs, &name)?;
    // The first append creates and preallocates a segment: keep it out of
    // the measurement.
    wal.append(&[0u8; PAYLOAD_BYTES])?;
    wal.sync()?;
    let syncs_before = wal.stats().syncs;
    let wal = Arc::new(wal);
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (wal, stop, commits) = (Arc::clone(&wal), Arc::clone(&stop), Arc::clone(&commits));
            thread::spawn(move || -> Result<()> {
                let payload = [7u8; PAYLOAD_BYTES];
                while !stop.load(Ordering::Relaxed) {
                    let (_, end) = wal.append(&payload)?;
                    wal.wait_durable(end)?;
                    commits.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    thread::sleep(Duration::from_secs_f64(GROUP_COMMIT_SECS));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("committer thread panicked")?;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(Run {
        threads,
        commits: commits.load(Ordering::Relaxed),
        secs,
        syncs: wal.stats().syncs - syncs_before,
    })
}
