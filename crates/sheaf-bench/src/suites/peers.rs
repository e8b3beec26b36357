//! `peers`: the classic side-by-side run (redb's benchmark shape).
//!
//! Random 24-byte keys and 150-byte values from a fixed seed. Per engine, in
//! this order on one database: bulk load in one transaction; individual
//! durable single-insert transactions; durable transactions of 1,000
//! inserts; no-sync single-insert transactions; `len()`; random point reads
//! (median of 3 passes, one read transaction per pass); random range reads
//! of 10 entries; random point reads with 1, 2, 4 threads; removal of half
//! the loaded keys in one durable transaction; an online backup of that
//! state (time and size; SQLite's backup API, LMDB's compacting copy,
//! sheafdb's `backup_to`; N/A where none); size on disk after load,
//! after removal and after the engine's compaction (N/A where none).

use crate::engines::{
    Backup, Compaction, Engine, EngineKind, OpenOptions, Result, SyncMode, MAIN_TABLE,
};
use crate::report::{Better, Chart, Report, Series};
use crate::stats::{median, per_sec, time, Latencies};
use crate::workload::{uniform_indices, Dataset};

use super::{for_each_engine, progress, threaded_reads, Ctx, Scale};

const SUITE: &str = "peers";
const KEY_BYTES: usize = 24;
const VALUE_BYTES: usize = 150;
const READ_PASSES: usize = 3;
const RANGE_LEN: usize = 10;

/// Sizes of one run.
struct Sizes {
    load: usize,
    durable_singles: usize,
    batch_txns: usize,
    batch_len: usize,
    nosync_singles: usize,
    point_reads: usize,
    range_reads: usize,
    read_threads: Vec<usize>,
}

impl Sizes {
    fn new(ctx: &Ctx) -> Self {
        let load = match ctx.scale {
            Scale::Full => 5_000_000,
            _ => ctx.n(1_000_000, 1_000),
        };
        Sizes {
            load,
            durable_singles: ctx.n(1_000, 10),
            batch_txns: if ctx.scale == Scale::Quick { 10 } else { 100 },
            batch_len: ctx.n(1_000, 100),
            nosync_singles: ctx.n(50_000, 100),
            point_reads: ctx.n(1_000_000, 1_000),
            range_reads: ctx.n(500_000, 1_000),
            read_threads: ctx.thread_counts(&[1, 2, 4]),
        }
    }

    /// Keys needed: loaded ones plus every later insert.
    fn total_keys(&self) -> usize {
        self.load + self.durable_singles + self.batch_txns * self.batch_len + self.nosync_singles
    }
}

/// Runs the suite over every engine of `ctx`.
pub fn run(ctx: &Ctx, rep: &mut Report) -> Result<()> {
    let sizes = Sizes::new(ctx);
    eprintln!(
        "[{SUITE}] generating {} keys ({KEY_BYTES} B) with {VALUE_BYTES} B values",
        sizes.total_keys()
    );
    let data = Dataset::random(sizes.total_keys(), KEY_BYTES, VALUE_BYTES, ctx.seed);
    rep.note(format!(
        "{KEY_BYTES}-byte random keys, {VALUE_BYTES}-byte values, seed {}; point and range \
         reads use one read transaction per pass (per thread); sizes are the allocated bytes of \
         the files in the engine's directory",
        ctx.seed
    ));
    let mut threaded: Vec<(EngineKind, Vec<(f64, f64)>)> = Vec::new();
    for_each_engine(ctx, rep, SUITE, OpenOptions::default(), |engine, rep| {
        let points = run_engine(ctx, engine, &data, &sizes, rep)?;
        threaded.push((engine.kind(), points));
        Ok(())
    });
    rep.charts.push(Chart {
        file: "peers-read-threads.png".into(),
        title: "peers: random point reads by thread count".into(),
        x_label: "threads".into(),
        y_label: "reads/s".into(),
        log_x: true,
        series: threaded
            .into_iter()
            .map(|(k, points)| Series {
                name: k.name().into(),
                points,
            })
            .collect(),
    });
    Ok(())
}

/// Key index ranges of the write phases, in order.
struct Phases {
    next: usize,
}

impl Phases {
    fn take(&mut self, n: usize) -> std::ops::Range<usize> {
        let r = self.next..self.next + n;
        self.next += n;
        r
    }
}

fn run_engine(
    ctx: &Ctx,
    engine: &mut Box<dyn Engine>,
    data: &Dataset,
    s: &Sizes,
    rep: &mut Report,
) -> Result<Vec<(f64, f64)>> {
    let kind = engine.kind();
    let mut phases = Phases { next: 0 };
    bulk_load(engine.as_ref(), data, phases.take(s.load), rep)?;
    rep.add(
        "size after bulk load",
        kind,
        "disk",
        engine.disk_bytes()? as f64,
        "bytes",
        Better::Lower,
    );
    trace_size(engine.as_ref())?;
    durable_singles(engine.as_ref(), data, phases.take(s.durable_singles), rep)?;
    durable_batches(
        engine.as_ref(),
        data,
        phases.take(s.batch_txns * s.batch_len),
        s.batch_len,
        rep,
    )?;
    nosync_singles(engine.as_ref(), data, phases.take(s.nosync_singles), rep)?;
    trace_size(engine.as_ref())?;
    check_len(engine.as_ref(), phases.next as u64, rep)?;
    point_reads(engine.as_ref(), data, s, ctx.seed, rep)?;
    trace_size(engine.as_ref())?;
    range_reads(engine.as_ref(), data, s, ctx.seed, rep)?;
    trace_size(engine.as_ref())?;
    let threaded = threaded_point_reads(engine.as_ref(), data, s, ctx.seed, rep)?;
    trace_size(engine.as_ref())?;
    remove_half(engine.as_ref(), data, s.load, rep)?;
    trace_size(engine.as_ref())?;
    backup(engine.as_ref(), rep)?;
    compaction(engine, rep)?;
    Ok(threaded)
}

/// Prints the engine directory's size to stderr after a phase: where a
/// file grows shows in the progress lines, not only in the two size rows.
fn trace_size(engine: &dyn Engine) -> Result<()> {
    let mib = engine.disk_bytes()? as f64 / (1024.0 * 1024.0);
    eprintln!("[{SUITE}] {}: directory {mib:.1} MiB", engine.kind());
    Ok(())
}

fn bulk_load(
    engine: &dyn Engine,
    data: &Dataset,
    range: std::ops::Range<usize>,
    rep: &mut Report,
) -> Result<()> {
    let kind = engine.kind();
    let n = range.len();
    progress(SUITE, kind, &format!("bulk load {n}"));
    let pairs = data.pairs(range);
    let ((), d) = time(|| engine.bulk_load(MAIN_TABLE, &pairs))?;
    let w = format!("bulk load {n} pairs (one txn)");
    rep.add(
        &w,
        kind,
        "throughput",
        per_sec(n as u64, d),
        "pairs/s",
        Better::Higher,
    );
    Ok(())
}

fn durable_singles(
    engine: &dyn Engine,
    data: &Dataset,
    range: std::ops::Range<usize>,
    rep: &mut Report,
) -> Result<()> {
    let kind = engine.kind();
    let n = range.len();
    progress(SUITE, kind, &format!("{n} durable single-insert txns"));
    let mut lat = Latencies::with_capacity(n);
    for i in range {
        let pair = [(data.key(i), data.value(i, 0))];
        let ((), d) = time(|| engine.insert_txn(MAIN_TABLE, &pair, SyncMode::Durable))?;
        lat.push(d);
    }
    let w = format!("{n} durable single-insert txns");
    rep.add(
        &w,
        kind,
        "throughput",
        per_sec(n as u64, lat.total()),
        "txn/s",
        Better::Higher,
    );
    rep.add(&w, kind, "p50", lat.percentile_us(0.5), "µs", Better::Lower);
    rep.add(
        &w,
        kind,
        "p99",
        lat.percentile_us(0.99),
        "µs",
        Better::Lower,
    );
    Ok(())
}

fn durable_batches(
    engine: &dyn Engine,
    data: &Dataset,
    range: std::ops::Range<usize>,
    batch_len: usize,
    rep: &mut Report,
) -> Result<()> {
    let kind = engine.kind();
    let txns = range.len() / batch_len;
    progress(
        SUITE,
        kind,
        &format!("{txns} durable txns of {batch_len} inserts"),
    );
    let pairs = data.pairs(range);
    let ((), d) = time(|| {
        for batch in pairs.chunks(batch_len) {
            engine.insert_txn(MAIN_TABLE, batch, SyncMode::Durable)?;
        }
        Ok(())
    })?;
    let w = format!("{txns} durable txns of {batch_len} inserts");
    rep.add(
        &w,
        kind,
        "throughput",
        per_sec(pairs.len() as u64, d),
        "inserts/s",
        Better::Higher,
    );
    Ok(())
}

fn nosync_singles(
    engine: &dyn Engine,
    data: &Dataset,
    range: std::ops::Range<usize>,
    rep: &mut Report,
) -> Result<()> {
    let kind = engine.kind();
    let n = range.len();
    progress(SUITE, kind, &format!("{n} no-sync single-insert txns"));
    let ((), d) = time(|| {
        for i in range {
            let pair = [(data.key(i), data.value(i, 0))];
            engine.insert_txn(MAIN_TABLE, &pair, SyncMode::NoSync)?;
        }
        Ok(())
    })?;
    let w = format!("{n} no-sync single-insert txns");
    rep.add(
        &w,
        kind,
        "throughput",
        per_sec(n as u64, d),
        "txn/s",
        Better::Higher,
    );
    Ok(())
}

fn check_len(engine: &dyn Engine, expect: u64, rep: &mut Report) -> Result<()> {
    let kind = engine.kind();
    let (n, d) = time(|| engine.len(MAIN_TABLE))?;
    if n != expect {
        return Err(format!("{kind}: len() = {n}, expected {expect}").into());
    }
    let w = format!("len() of {n} entries");
    rep.add(&w, kind, "time", d.as_secs_f64() * 1e6, "µs", Better::Lower);
    Ok(())
}

fn point_reads(
    engine: &dyn Engine,
    data: &Dataset,
    s: &Sizes,
    seed: u64,
    rep: &mut Report,
) -> Result<()> {
    let kind = engine.kind();
    progress(
        SUITE,
        kind,
        &format!("{} random point reads x{READ_PASSES}", s.point_reads),
    );
    let keys = data.keys_of(uniform_indices(s.point_reads, s.load, seed ^ 1).into_iter());
    let mut rates = Vec::with_capacity(READ_PASSES);
    for _ in 0..READ_PASSES {
        rates.push(threaded_reads(engine, MAIN_TABLE, &keys, 1)?);
    }
    let w = format!(
        "{} random point reads (median of {READ_PASSES})",
        s.point_reads
    );
    rep.add(
        &w,
        kind,
        "throughput",
        median(&rates),
        "reads/s",
        Better::Higher,
    );
    Ok(())
}

fn range_reads(
    engine: &dyn Engine,
    data: &Dataset,
    s: &Sizes,
    seed: u64,
    rep: &mut Report,
) -> Result<()> {
    let kind = engine.kind();
    progress(
        SUITE,
        kind,
        &format!("{} range reads of {RANGE_LEN}", s.range_reads),
    );
    let starts = uniform_indices(s.range_reads, s.load, seed ^ 2);
    let mut reader = engine.reader()?;
    let mut snap = reader.snapshot()?;
    let mut bytes = 0usize;
    let (entries, d) = time(|| {
        let mut entries = 0usize;
        for &i in &starts {
            entries += snap.range(MAIN_TABLE, data.key(i), RANGE_LEN, &mut |k, v| {
                bytes += k.len() + v.len();
            })?;
        }
        Ok(entries)
    })?;
    std::hint::black_box(bytes);
    if entries < starts.len() {
        return Err(format!("{kind}: range reads returned only {entries} entries").into());
    }
    let w = format!(
        "{} random range reads of {RANGE_LEN} entries",
        s.range_reads
    );
    rep.add(
        &w,
        kind,
        "throughput",
        per_sec(starts.len() as u64, d),
        "ranges/s",
        Better::Higher,
    );
    Ok(())
}

fn threaded_point_reads(
    engine: &dyn Engine,
    data: &Dataset,
    s: &Sizes,
    seed: u64,
    rep: &mut Report,
) -> Result<Vec<(f64, f64)>> {
    let kind = engine.kind();
    let keys = data.keys_of(uniform_indices(s.point_reads, s.load, seed ^ 3).into_iter());
    let mut points = Vec::new();
    for &t in &s.read_threads {
        progress(
            SUITE,
            kind,
            &format!("{} point reads on {t} threads", keys.len()),
        );
        let rate = threaded_reads(engine, MAIN_TABLE, &keys, t)?;
        let w = format!("{} random point reads, {t} threads", keys.len());
        rep.add(&w, kind, "throughput", rate, "reads/s", Better::Higher);
        points.push((t as f64, rate));
    }
    Ok(points)
}

fn remove_half(engine: &dyn Engine, data: &Dataset, load: usize, rep: &mut Report) -> Result<()> {
    let kind = engine.kind();
    let keys = data.keys_of((0..load).step_by(2));
    progress(SUITE, kind, &format!("remove {} keys", keys.len()));
    let before = engine.len(MAIN_TABLE)?;
    let ((), d) = time(|| engine.remove_txn(MAIN_TABLE, &keys, SyncMode::Durable))?;
    let after = engine.len(MAIN_TABLE)?;
    if before - after != keys.len() as u64 {
        return Err(format!("{kind}: removal left {after} of {before} entries").into());
    }
    let w = format!(
        "remove {} keys (half the load, one durable txn)",
        keys.len()
    );
    rep.add(
        &w,
        kind,
        "throughput",
        per_sec(keys.len() as u64, d),
        "removes/s",
        Better::Higher,
    );
    Ok(())
}

/// The engine's online backup of the database after the removal (time and
/// size of the copy); N/A where the engine has none.
fn backup(engine: &dyn Engine, rep: &mut Report) -> Result<()> {
    let kind = engine.kind();
    progress(SUITE, kind, "backup");
    let dest = engine.dir().with_extension("backup");
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::create_dir_all(&dest)?;
    let (outcome, d) = time(|| engine.backup(&dest))?;
    let w = "online backup (after removal)";
    match outcome {
        Backup::Done => {
            let size = crate::engines::dir_size_bytes(&dest)?;
            rep.add(w, kind, "time", d.as_secs_f64() * 1e3, "ms", Better::Lower);
            rep.add(
                "size of backup",
                kind,
                "disk",
                size as f64,
                "bytes",
                Better::Lower,
            );
        }
        Backup::NotAvailable => {
            let why = "engine has no online backup";
            rep.add_missing(w, kind, "time", "ms", Better::Lower, why);
            rep.add_missing("size of backup", kind, "disk", "bytes", Better::Lower, why);
        }
    }
    std::fs::remove_dir_all(&dest)?;
    Ok(())
}

fn compaction(engine: &mut Box<dyn Engine>, rep: &mut Report) -> Result<()> {
    let kind = engine.kind();
    progress(SUITE, kind, "compaction");
    rep.add(
        "size after removal",
        kind,
        "disk",
        engine.disk_bytes()? as f64,
        "bytes",
        Better::Lower,
    );
    let (outcome, d) = time(|| engine.compact())?;
    let w = "size after compaction";
    match outcome {
        Compaction::Done => {
            rep.add(
                w,
                kind,
                "disk",
                engine.disk_bytes()? as f64,
                "bytes",
                Better::Lower,
            );
            rep.add(
                "compaction",
                kind,
                "time",
                d.as_secs_f64() * 1e3,
                "ms",
                Better::Lower,
            );
        }
        Compaction::NotAvailable => {
            let why = "engine has no compaction";
            rep.add_missing(w, kind, "disk", "bytes", Better::Lower, why);
            rep.add_missing("compaction", kind, "time", "ms", Better::Lower, why);
        }
    }
    Ok(())
}
