//! `commit`: the latency view — what one durable commit and one point read
//! cost, next to the disk's own fdatasync latency (in the header).
//!
//! Per engine: insert 100,000 rows in one transaction (rows/s); database
//! size after that load; 100,000 point reads over those rows, each timed
//! (p50/p95/p99); 1,000 single-row durable update commits, each timed
//! (p50/p95/p99); 10,000 single-row no-sync update commits, each timed
//! (p50/p95/p99: the commit path's own cost, no fdatasync).

use crate::engines::{Engine, OpenOptions, Result, SyncMode, MAIN_TABLE};
use crate::report::{Better, Report};
use crate::stats::{per_sec, time, Latencies};
use crate::workload::{uniform_indices, Dataset};

use super::{for_each_engine, progress, Ctx};

const SUITE: &str = "commit";
const KEY_BYTES: usize = 24;
const VALUE_BYTES: usize = 150;

struct Sizes {
    rows: usize,
    reads: usize,
    commits: usize,
    nosync_commits: usize,
}

/// Runs the suite over every engine of `ctx`.
pub fn run(ctx: &Ctx, rep: &mut Report) -> Result<()> {
    let s = Sizes {
        rows: ctx.n(100_000, 1_000),
        reads: ctx.n(100_000, 1_000),
        commits: ctx.n(1_000, 20),
        nosync_commits: ctx.n(10_000, 100),
    };
    let data = Dataset::random(s.rows, KEY_BYTES, VALUE_BYTES, ctx.seed);
    rep.note(format!(
        "{KEY_BYTES}-byte random keys, {VALUE_BYTES}-byte values; each read is its own \
         snapshot point get; each update its own durable transaction; compare the commit \
         p50 with the machine's fdatasync p50 above"
    ));
    for_each_engine(ctx, rep, SUITE, OpenOptions::default(), |engine, rep| {
        run_engine(ctx, engine.as_ref(), &data, &s, rep)
    });
    Ok(())
}

fn run_engine(
    ctx: &Ctx,
    engine: &dyn Engine,
    data: &Dataset,
    s: &Sizes,
    rep: &mut Report,
) -> Result<()> {
    load(engine, data, rep)?;
    reads(engine, data, s.reads, ctx.seed, rep)?;
    updates(engine, data, s.commits, SyncMode::Durable, ctx.seed, rep)?;
    updates(
        engine,
        data,
        s.nosync_commits,
        SyncMode::NoSync,
        ctx.seed,
        rep,
    )?;
    if engine.kind().relaxed().is_some() {
        updates(
            engine,
            data,
            s.nosync_commits,
            SyncMode::Relaxed,
            ctx.seed,
            rep,
        )
    } else {
        let w = format!(
            "relaxed single-row update commit ({} commits)",
            s.nosync_commits
        );
        for name in ["p50", "p95", "p99"] {
            rep.add_missing(
                &w,
                engine.kind(),
                name,
                "µs",
                Better::Lower,
                "no mode between durable and no-sync",
            );
        }
        Ok(())
    }
}

fn load(engine: &dyn Engine, data: &Dataset, rep: &mut Report) -> Result<()> {
    let kind = engine.kind();
    let n = data.len();
    progress(SUITE, kind, &format!("insert {n} rows in one txn"));
    let pairs = data.pairs(0..n);
    let ((), d) = time(|| engine.insert_txn(MAIN_TABLE, &pairs, SyncMode::Durable))?;
    let w = format!("insert {n} rows (one durable txn)");
    rep.add(
        &w,
        kind,
        "throughput",
        per_sec(n as u64, d),
        "rows/s",
        Better::Higher,
    );
    let size = engine.disk_bytes()? as f64;
    rep.add(
        &format!("size after {n} rows"),
        kind,
        "disk",
        size,
        "bytes",
        Better::Lower,
    );
    Ok(())
}

fn reads(engine: &dyn Engine, data: &Dataset, n: usize, seed: u64, rep: &mut Report) -> Result<()> {
    let kind = engine.kind();
    progress(SUITE, kind, &format!("{n} timed point reads"));
    let mut reader = engine.reader()?;
    let mut out = Vec::new();
    let mut lat = Latencies::with_capacity(n);
    for i in uniform_indices(n, data.len(), seed ^ 11) {
        let (found, d) = time(|| reader.get(MAIN_TABLE, data.key(i), &mut out))?;
        if !found {
            return Err(format!("{kind}: key {i} missing").into());
        }
        lat.push(d);
    }
    let w = format!("point read ({n} reads over {} rows)", data.len());
    add_percentiles(rep, &w, kind, &mut lat);
    Ok(())
}

fn updates(
    engine: &dyn Engine,
    data: &Dataset,
    n: usize,
    mode: SyncMode,
    seed: u64,
    rep: &mut Report,
) -> Result<()> {
    let kind = engine.kind();
    let label = mode.label();
    progress(
        SUITE,
        kind,
        &format!("{n} {label} single-row update commits"),
    );
    let mut lat = Latencies::with_capacity(n);
    let salt = match mode {
        SyncMode::Durable => 12,
        SyncMode::NoSync => 13,
        SyncMode::Relaxed => 14,
    };
    for (version, i) in uniform_indices(n, data.len(), seed ^ salt)
        .into_iter()
        .enumerate()
    {
        let pair = [(data.key(i), data.value(i, version + 1))];
        let ((), d) = time(|| engine.insert_txn(MAIN_TABLE, &pair, mode))?;
        lat.push(d);
    }
    let w = format!("{label} single-row update commit ({n} commits)");
    add_percentiles(rep, &w, kind, &mut lat);
    Ok(())
}

fn add_percentiles(
    rep: &mut Report,
    w: &str,
    kind: crate::engines::EngineKind,
    lat: &mut Latencies,
) {
    for (name, q) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)] {
        rep.add(w, kind, name, lat.percentile_us(q), "µs", Better::Lower);
    }
}
