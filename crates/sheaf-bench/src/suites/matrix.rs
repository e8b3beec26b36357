//! `matrix`: read/write mix × thread count, in no-sync and durable mode.
//!
//! 1,000,000 keys (8-byte, distinct) with 8-byte values are loaded once per
//! engine. Each cell runs `threads` threads for at least `--cell-secs`
//! (2 s by default); each operation is a read (one snapshot point get) or a
//! write (a single-key update transaction) chosen at random by the mix.
//! Reported: read and write transactions per second of every cell.

use crate::engines::{Engine, EngineKind, OpenOptions, Result, SyncMode, MAIN_TABLE};
use crate::report::{Better, Chart, Report, Series};
use crate::workload::Dataset;

use super::{for_each_engine, progress, Ctx, KeyChoice, MixedCell};

const SUITE: &str = "matrix";
const VALUE_BYTES: usize = 8;
/// Read percentages of the mixes (the rest are writes).
const READ_PCTS: [u32; 5] = [100, 90, 50, 10, 0];
const THREADS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
const MODES: [SyncMode; 2] = [SyncMode::NoSync, SyncMode::Durable];

/// One cell's result, kept for the charts.
struct Point {
    engine: EngineKind,
    mode: SyncMode,
    read_pct: u32,
    threads: usize,
    total: f64,
}

/// Runs the suite over every engine of `ctx`.
pub fn run(ctx: &Ctx, rep: &mut Report) -> Result<()> {
    let keys = ctx.n(1_000_000, 10_000);
    let data = Dataset::distinct_u64(keys, VALUE_BYTES, ctx.seed);
    let threads = ctx.thread_counts(&THREADS);
    rep.note(format!(
        "{keys} keys (8 B) with {VALUE_BYTES}-byte values; cells of {:.2} s; reads are \
         snapshot point gets, writes single-key update transactions, keys uniform",
        ctx.cell.as_secs_f64()
    ));
    let mut points = Vec::new();
    for_each_engine(ctx, rep, SUITE, OpenOptions::default(), |engine, rep| {
        run_engine(ctx, engine.as_ref(), &data, &threads, rep, &mut points)
    });
    rep.charts.extend(charts(&points));
    Ok(())
}

fn run_engine(
    ctx: &Ctx,
    engine: &dyn Engine,
    data: &Dataset,
    threads: &[usize],
    rep: &mut Report,
    points: &mut Vec<Point>,
) -> Result<()> {
    let kind = engine.kind();
    progress(SUITE, kind, &format!("load {} keys", data.len()));
    engine.bulk_load(MAIN_TABLE, &data.pairs(0..data.len()))?;
    for mode in MODES {
        for read_pct in READ_PCTS {
            progress(
                SUITE,
                kind,
                &format!("{} r{read_pct}/w{}", mode.label(), 100 - read_pct),
            );
            for &t in threads {
                let cell = MixedCell {
                    data,
                    table: MAIN_TABLE,
                    read_pct,
                    mode,
                    threads: t,
                    duration: ctx.cell,
                    keys: KeyChoice::Uniform,
                    seed: ctx.seed ^ t as u64,
                };
                let out = cell.run(engine)?;
                record(
                    rep,
                    kind,
                    mode,
                    read_pct,
                    t,
                    out.reads_per_sec,
                    out.writes_per_sec,
                );
                points.push(Point {
                    engine: kind,
                    mode,
                    read_pct,
                    threads: t,
                    total: out.reads_per_sec + out.writes_per_sec,
                });
            }
        }
    }
    Ok(())
}

fn record(
    rep: &mut Report,
    kind: EngineKind,
    mode: SyncMode,
    read_pct: u32,
    t: usize,
    r: f64,
    w: f64,
) {
    let workload = format!(
        "{} r{read_pct}/w{} {t:>2} threads",
        mode.label(),
        100 - read_pct
    );
    if read_pct > 0 {
        rep.add(&workload, kind, "read txn", r, "txn/s", Better::Higher);
    }
    if read_pct < 100 {
        rep.add(&workload, kind, "write txn", w, "txn/s", Better::Higher);
    }
}

fn charts(points: &[Point]) -> Vec<Chart> {
    let mut charts = Vec::new();
    for mode in MODES {
        for read_pct in READ_PCTS {
            let mut engines: Vec<EngineKind> = points.iter().map(|p| p.engine).collect();
            engines.dedup();
            let series = engines
                .into_iter()
                .map(|e| Series {
                    name: e.name().into(),
                    points: points
                        .iter()
                        .filter(|p| p.engine == e && p.mode == mode && p.read_pct == read_pct)
                        .map(|p| (p.threads as f64, p.total))
                        .collect(),
                })
                .collect();
            charts.push(Chart {
                file: format!("matrix-{}-r{read_pct}.png", mode.label()),
                title: format!(
                    "matrix {}: {read_pct}% reads / {}% writes",
                    mode.label(),
                    100 - read_pct
                ),
                x_label: "threads".into(),
                y_label: "transactions/s (reads + writes)".into(),
                log_x: true,
                series,
            });
        }
    }
    charts
}
