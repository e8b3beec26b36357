//! The benchmark suites and what they share: the run context, the
//! per-engine loop (fresh directory per engine, removed afterwards) and the
//! multi-threaded read and mixed-workload drivers.
//!
//! Suites only talk to engines through `crate::engines`; they record numbers
//! into a `Report` and never print tables themselves.

use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use rand::RngExt;

use crate::engines::{self, Engine, EngineKind, OpenOptions, Result, SyncMode, TableId};
use crate::report::Report;
use crate::stats::per_sec;
use crate::workload::{rng, Dataset, Zipfian};

pub mod commit;
pub mod matrix;
pub mod peers;
pub mod queue;
pub mod seed;

/// How big a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// About 100× smaller than the default: a smoke run.
    Quick,
    /// The sizes the issue specifies.
    Default,
    /// Larger where the issue names a larger size (`peers` bulk load: 5 M).
    Full,
}

/// Everything a suite needs to know about the run.
pub struct Ctx {
    /// Engines to run, in column order.
    pub engines: Vec<EngineKind>,
    /// Run size.
    pub scale: Scale,
    /// Private scratch directory of this run (removed at the end).
    pub root: PathBuf,
    /// Seed of every random choice.
    pub seed: u64,
    /// Length of one timed cell of the matrix and mixed workloads.
    pub cell: Duration,
    /// Thread counts for the scaling workloads, if overridden.
    pub threads: Option<Vec<usize>>,
    /// This binary, for the crash child of the `seed` recovery workload.
    pub exe: Option<PathBuf>,
}

impl Ctx {
    /// `default` scaled for the run: divided by 100 (at least `quick_min`)
    /// in quick runs.
    pub fn n(&self, default: usize, quick_min: usize) -> usize {
        match self.scale {
            Scale::Quick => (default / 100).max(quick_min),
            Scale::Default | Scale::Full => default,
        }
    }

    /// Thread counts to use: the override, or `default`.
    pub fn thread_counts(&self, default: &[usize]) -> Vec<usize> {
        self.threads.clone().unwrap_or_else(|| default.to_vec())
    }

    /// A fresh directory for `kind` in `suite`.
    pub fn engine_dir(&self, suite: &str, kind: EngineKind) -> PathBuf {
        self.root.join(format!("{suite}-{}", kind.name()))
    }
}

/// Progress line on stderr (stdout is for the tables).
pub fn progress(suite: &str, kind: EngineKind, what: &str) {
    eprintln!("[{suite}] {kind}: {what}");
}

/// Runs `body` once per engine on a fresh engine directory, then removes
/// the directory. An engine that fails is reported in the notes and the
/// suite goes on with the next one.
pub fn for_each_engine(
    ctx: &Ctx,
    rep: &mut Report,
    suite: &str,
    opts: OpenOptions,
    mut body: impl FnMut(&mut Box<dyn Engine>, &mut Report) -> Result<()>,
) {
    for &kind in &ctx.engines {
        let dir = ctx.engine_dir(suite, kind);
        let outcome = engines::open(kind, &dir, opts).and_then(|mut e| body(&mut e, rep));
        if let Err(e) = outcome {
            rep.fail(kind, &e);
        }
        remove_dir(&dir);
    }
}

/// Best-effort recursive removal (a leftover only wastes temp space).
pub fn remove_dir(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            eprintln!("warning: could not remove {}: {e}", dir.display());
        }
    }
}

/// Point reads of `keys` (all present) split over `threads` threads, each
/// with its own reader and one snapshot; returns reads per second.
pub fn threaded_reads(
    engine: &dyn Engine,
    table: TableId,
    keys: &[&[u8]],
    threads: usize,
) -> Result<f64> {
    assert!(threads >= 1 && !keys.is_empty());
    let parts: Vec<&[&[u8]]> = keys.chunks(keys.len().div_ceil(threads)).collect();
    let barrier = Barrier::new(parts.len() + 1);
    let elapsed = std::thread::scope(|s| -> Result<Duration> {
        let handles: Vec<_> = parts
            .iter()
            .map(|&part| {
                let barrier = &barrier;
                s.spawn(move || read_chunk(engine, table, part, barrier))
            })
            .collect();
        barrier.wait();
        let mut spans = Vec::with_capacity(handles.len());
        for h in handles {
            spans.push(h.join().map_err(|_| "reader thread panicked")??);
        }
        Ok(wall_time(&spans))
    })?;
    Ok(per_sec(keys.len() as u64, elapsed))
}

/// Wall time covered by the threads' (start, end) spans: from the first
/// start to the last end. Taken from the threads' own clocks, so a
/// descheduled coordinating thread cannot shrink it.
fn wall_time(spans: &[(Instant, Instant)]) -> Duration {
    let start = spans.iter().map(|s| s.0).min();
    let end = spans.iter().map(|s| s.1).max();
    match (start, end) {
        (Some(a), Some(b)) => b.duration_since(a),
        _ => Duration::ZERO,
    }
}

fn read_chunk(
    engine: &dyn Engine,
    table: TableId,
    keys: &[&[u8]],
    barrier: &Barrier,
) -> Result<(Instant, Instant)> {
    // Every thread reaches the barrier, even after a setup error, so the
    // others (and the timer) are never left waiting.
    let mut reader = match engine.reader() {
        Ok(r) => r,
        Err(e) => {
            barrier.wait();
            return Err(e);
        }
    };
    let snap = reader.snapshot();
    barrier.wait();
    let mut snap = snap?;
    let mut out = Vec::new();
    let start = Instant::now();
    for k in keys {
        if !snap.get(table, k, &mut out)? {
            return Err(format!("{}: key missing during reads", engine.kind()).into());
        }
    }
    Ok((start, Instant::now()))
}

/// How a timed mixed cell chooses keys.
#[derive(Clone, Copy)]
pub enum KeyChoice<'a> {
    /// Uniform over the data set.
    Uniform,
    /// Scrambled Zipfian over the data set.
    Zipf(&'a Zipfian),
}

/// One timed cell: `threads` threads, each op a read (snapshot point get)
/// with probability `read_pct`% or else a single-key write transaction in
/// `mode`, until `duration` has passed.
pub struct MixedCell<'a> {
    /// Keys (all present) and the values written.
    pub data: &'a Dataset,
    /// Table operated on.
    pub table: TableId,
    /// Percentage of reads.
    pub read_pct: u32,
    /// Durability of the writes.
    pub mode: SyncMode,
    /// Number of threads.
    pub threads: usize,
    /// How long to run.
    pub duration: Duration,
    /// Key distribution.
    pub keys: KeyChoice<'a>,
    /// Seed of the threads' choices.
    pub seed: u64,
}

/// Counts of a finished mixed cell.
#[derive(Clone, Copy, Debug, Default)]
pub struct MixedOutcome {
    /// Read transactions per second.
    pub reads_per_sec: f64,
    /// Write transactions per second.
    pub writes_per_sec: f64,
}

impl MixedCell<'_> {
    /// Runs the cell against `engine`.
    pub fn run(&self, engine: &dyn Engine) -> Result<MixedOutcome> {
        let barrier = Barrier::new(self.threads + 1);
        let (reads, writes, elapsed) = std::thread::scope(|s| -> Result<(u64, u64, Duration)> {
            let handles: Vec<_> = (0..self.threads)
                .map(|t| {
                    let barrier = &barrier;
                    s.spawn(move || self.worker(engine, t, barrier))
                })
                .collect();
            barrier.wait();
            let (mut reads, mut writes) = (0, 0);
            let mut spans = Vec::with_capacity(handles.len());
            for h in handles {
                let c = h.join().map_err(|_| "worker thread panicked")??;
                reads += c.reads;
                writes += c.writes;
                spans.push(c.span);
            }
            Ok((reads, writes, wall_time(&spans)))
        })?;
        Ok(MixedOutcome {
            reads_per_sec: per_sec(reads, elapsed),
            writes_per_sec: per_sec(writes, elapsed),
        })
    }

    fn worker(&self, engine: &dyn Engine, thread: usize, barrier: &Barrier) -> Result<Counts> {
        let mut r = rng(self.seed ^ (thread as u64).wrapping_mul(0x9e37_79b9));
        let reader = engine.reader();
        barrier.wait();
        let mut reader = reader?;
        let mut out = Vec::new();
        let (mut reads, mut writes) = (0u64, 0u64);
        let start = Instant::now();
        let deadline = start + self.duration;
        loop {
            for _ in 0..8 {
                let i = match self.keys {
                    KeyChoice::Uniform => r.random_range(0..self.data.len()),
                    KeyChoice::Zipf(z) => z.sample(&mut r),
                };
                let key = self.data.key(i);
                if r.random_range(0..100) < self.read_pct {
                    if !reader.get(self.table, key, &mut out)? {
                        return Err(format!("{}: key missing in mixed cell", engine.kind()).into());
                    }
                    reads += 1;
                } else {
                    let value = self.data.value(i, (writes as usize) + thread + 1);
                    engine.insert_txn(self.table, &[(key, value)], self.mode)?;
                    writes += 1;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Counts {
                    reads,
                    writes,
                    span: (start, now),
                });
            }
        }
    }
}

/// What one worker of a mixed cell did.
struct Counts {
    reads: u64,
    writes: u64,
    span: (Instant, Instant),
}
