//! `seed`: the workloads sheafdb is built for — concurrent durable writers
//! on separate column families, concurrent readers, skewed mixed load,
//! durability modes side by side, WAL recovery and CF create/drop.
//!
//! Values are 1 KiB; writer transactions hold 1,000 writes. Peers give each
//! writer their best equivalent of a CF (stated per engine in the notes).
//! Writer scaling runs twice per thread count: every writer on its own
//! table/CF, and all writers on one. Engines that cannot give writers their
//! own space record those rows as missing with the reason.
//!
//! Recovery runs a child process (`sheaf-bench crash-writer`) that commits
//! records and then aborts without closing anything; the parent times the
//! reopen.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::engines::{
    self, Engine, EngineKind, OpenOptions, Result, SyncMode, TableId, WriterLayout, MAIN_TABLE,
};
use crate::report::{Better, Chart, Report, Series};
use crate::stats::{per_sec, time, Latencies};
use crate::workload::{mix64, Dataset, Zipfian};

use super::{progress, remove_dir, threaded_reads, Ctx, KeyChoice, MixedCell};

const SUITE: &str = "seed";
const VALUE_BYTES: usize = 1024;
const WRITER_COUNTS: [usize; 4] = [1, 2, 4, 8];
const READER_COUNTS: [usize; 4] = [1, 2, 4, 8];
const MIXES: [u32; 3] = [80, 50, 20];
const MIX_THREADS: usize = 4;
const RECOVERY_VALUE_BYTES: usize = 100;

struct Sizes {
    batch: usize,
    txns_per_writer: usize,
    read_keys: usize,
    reads: usize,
    single_durable: usize,
    single_nosync: usize,
    recovery_records: usize,
    cf_reps: usize,
}

impl Sizes {
    fn new(ctx: &Ctx) -> Self {
        Sizes {
            batch: ctx.n(1_000, 100),
            txns_per_writer: ctx.n(20, 2),
            read_keys: ctx.n(100_000, 1_000),
            reads: ctx.n(400_000, 4_000),
            single_durable: ctx.n(500, 10),
            single_nosync: ctx.n(20_000, 200),
            recovery_records: ctx.n(100_000, 1_000),
            cf_reps: ctx.n(200, 10),
        }
    }
}

/// Runs the suite over every engine of `ctx`.
pub fn run(ctx: &Ctx, rep: &mut Report) -> Result<()> {
    let s = Sizes::new(ctx);
    let pool = Dataset::random(s.read_keys, 16, VALUE_BYTES, ctx.seed);
    rep.note(format!(
        "{VALUE_BYTES}-byte values; writer txns of {} writes; mixed cells {MIX_THREADS} \
         threads, Zipfian keys (theta {}), durable single-key writes, {:.2} s",
        s.batch,
        Zipfian::DEFAULT_THETA,
        ctx.cell.as_secs_f64()
    ));
    let mut writer_points = Vec::new();
    let mut shared_points = Vec::new();
    let mut reader_points = Vec::new();
    for &kind in &ctx.engines {
        let dir = ctx.engine_dir(SUITE, kind);
        let opts = OpenOptions {
            tables: WRITER_COUNTS[WRITER_COUNTS.len() - 1],
        };
        let outcome = engines::open(kind, &dir, opts).and_then(|engine| {
            let e = engine.as_ref();
            note_layout(rep, e);
            let w = writers(ctx, e, &pool, &s, rep)?;
            writer_points.push((kind, w.own));
            shared_points.push((kind, w.shared));
            reader_points.push((kind, readers(ctx, e, &pool, &s, rep)?));
            mixed(ctx, e, &pool, rep)?;
            durability_modes(e, &pool, &s, rep)?;
            cf_create_drop(e, s.cf_reps, rep)
        });
        remove_dir(&dir);
        let outcome = outcome.and_then(|()| recovery(ctx, kind, s.recovery_records, rep));
        if let Err(e) = outcome {
            rep.fail(kind, &e);
        }
    }
    rep.charts.push(scaling_chart(
        "seed-writers.png",
        "concurrent durable writers, own CF each",
        "writes/s",
        writer_points,
    ));
    rep.charts.push(scaling_chart(
        "seed-writers-shared.png",
        "concurrent durable writers, one shared CF",
        "writes/s",
        shared_points,
    ));
    rep.charts.push(scaling_chart(
        "seed-readers.png",
        "concurrent readers",
        "reads/s",
        reader_points,
    ));
    Ok(())
}

fn note_layout(rep: &mut Report, engine: &dyn Engine) {
    let text = match engine.writer_layout() {
        WriterLayout::PerWriter(t) => t,
        WriterLayout::Unsupported(t) => t,
    };
    rep.note(format!("{} writers: {text}", engine.kind()));
}

fn scaling_chart(
    file: &str,
    what: &str,
    unit: &str,
    data: Vec<(EngineKind, Vec<(f64, f64)>)>,
) -> Chart {
    Chart {
        file: file.into(),
        title: format!("seed: {what}"),
        x_label: "threads".into(),
        y_label: unit.into(),
        log_x: true,
        series: data
            .into_iter()
            .filter(|(_, p)| !p.is_empty())
            .map(|(k, points)| Series {
                name: k.name().into(),
                points,
            })
            .collect(),
    }
}

/// An 8-byte key unique to (cell, writer, txn, item), in random order.
fn writer_key(cell: u64, writer: u64, txn: u64, item: u64) -> [u8; 8] {
    mix64(cell << 56 | writer << 48 | txn << 24 | item).to_be_bytes()
}

/// Where the writers of one cell write.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Writer `t` on table `t` (sheafdb: its own CF).
    OwnTable,
    /// Every writer on the main table (sheafdb: the default CF).
    Shared,
}

/// Durable writer scaling: each count once with every writer on its own
/// table/CF, once with all of them on one. Returns the (threads, writes/s)
/// points of both placements.
fn writers(
    ctx: &Ctx,
    engine: &dyn Engine,
    pool: &Dataset,
    s: &Sizes,
    rep: &mut Report,
) -> Result<WriterPoints> {
    let kind = engine.kind();
    let mut points = WriterPoints::default();
    let counts = ctx.thread_counts(&WRITER_COUNTS);
    for (cell, &w) in counts.iter().enumerate() {
        let w = w.min(WRITER_COUNTS[WRITER_COUNTS.len() - 1]);
        for placement in [Placement::OwnTable, Placement::Shared] {
            let (workload, cell_id) = match placement {
                Placement::OwnTable => (format!("{w} durable writers, own CF each"), cell),
                Placement::Shared => (format!("{w} durable writers, one shared CF"), cell + 64),
            };
            if placement == Placement::OwnTable {
                if let WriterLayout::Unsupported(why) = engine.writer_layout() {
                    rep.add_missing(&workload, kind, "writes", "writes/s", Better::Higher, why);
                    rep.add_missing(&workload, kind, "commits", "txn/s", Better::Higher, why);
                    continue;
                }
            }
            progress(SUITE, kind, &workload);
            let ((), d) = time(|| {
                std::thread::scope(|sc| -> Result<()> {
                    let handles: Vec<_> = (0..w)
                        .map(|t| {
                            let table = match placement {
                                Placement::OwnTable => TableId(t),
                                Placement::Shared => MAIN_TABLE,
                            };
                            sc.spawn(move || write_txns(engine, pool, s, cell_id as u64, t, table))
                        })
                        .collect();
                    for h in handles {
                        h.join().map_err(|_| "writer thread panicked")??;
                    }
                    Ok(())
                })
            })?;
            let total = (w * s.txns_per_writer * s.batch) as u64;
            let rate = per_sec(total, d);
            rep.add(&workload, kind, "writes", rate, "writes/s", Better::Higher);
            rep.add(
                &workload,
                kind,
                "commits",
                per_sec((w * s.txns_per_writer) as u64, d),
                "txn/s",
                Better::Higher,
            );
            match placement {
                Placement::OwnTable => points.own.push((w as f64, rate)),
                Placement::Shared => points.shared.push((w as f64, rate)),
            }
        }
    }
    Ok(points)
}

/// Chart points of the writer workloads.
#[derive(Default)]
struct WriterPoints {
    own: Vec<(f64, f64)>,
    shared: Vec<(f64, f64)>,
}

fn write_txns(
    engine: &dyn Engine,
    pool: &Dataset,
    s: &Sizes,
    cell: u64,
    writer: usize,
    table: TableId,
) -> Result<()> {
    for txn in 0..s.txns_per_writer {
        let keys: Vec<[u8; 8]> = (0..s.batch)
            .map(|i| writer_key(cell, writer as u64, txn as u64, i as u64))
            .collect();
        let batch: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_slice(), pool.value(i, txn)))
            .collect();
        engine.insert_txn(table, &batch, SyncMode::Durable)?;
    }
    Ok(())
}

fn readers(
    ctx: &Ctx,
    engine: &dyn Engine,
    pool: &Dataset,
    s: &Sizes,
    rep: &mut Report,
) -> Result<Vec<(f64, f64)>> {
    let kind = engine.kind();
    progress(
        SUITE,
        kind,
        &format!("load {} pairs for readers", pool.len()),
    );
    engine.bulk_load(MAIN_TABLE, &pool.pairs(0..pool.len()))?;
    let keys = pool
        .keys_of(crate::workload::uniform_indices(s.reads, pool.len(), ctx.seed ^ 5).into_iter());
    let mut points = Vec::new();
    for &t in &ctx.thread_counts(&READER_COUNTS) {
        progress(SUITE, kind, &format!("{t} concurrent readers"));
        let rate = threaded_reads(engine, MAIN_TABLE, &keys, t)?;
        rep.add(
            &format!("{t} concurrent readers"),
            kind,
            "reads",
            rate,
            "reads/s",
            Better::Higher,
        );
        points.push((t as f64, rate));
    }
    Ok(points)
}

fn mixed(ctx: &Ctx, engine: &dyn Engine, pool: &Dataset, rep: &mut Report) -> Result<()> {
    let kind = engine.kind();
    let zipf = Zipfian::new(pool.len(), Zipfian::DEFAULT_THETA);
    for read_pct in MIXES {
        let workload = format!("mixed r{read_pct}/w{} zipfian, durable", 100 - read_pct);
        progress(SUITE, kind, &workload);
        let out = MixedCell {
            data: pool,
            table: MAIN_TABLE,
            read_pct,
            mode: SyncMode::Durable,
            threads: MIX_THREADS,
            duration: ctx.cell,
            keys: KeyChoice::Zipf(&zipf),
            seed: ctx.seed ^ u64::from(read_pct),
        }
        .run(engine)?;
        rep.add(
            &workload,
            kind,
            "read txn",
            out.reads_per_sec,
            "txn/s",
            Better::Higher,
        );
        rep.add(
            &workload,
            kind,
            "write txn",
            out.writes_per_sec,
            "txn/s",
            Better::Higher,
        );
    }
    Ok(())
}

fn durability_modes(
    engine: &dyn Engine,
    pool: &Dataset,
    s: &Sizes,
    rep: &mut Report,
) -> Result<()> {
    let kind = engine.kind();
    for (mode, singles) in [
        (SyncMode::Durable, s.single_durable),
        (SyncMode::NoSync, s.single_nosync),
    ] {
        progress(SUITE, kind, &format!("{} commits", mode.label()));
        let ((), d) = time(|| {
            for i in 0..singles {
                let k = pool.key(i % pool.len());
                engine.insert_txn(MAIN_TABLE, &[(k, pool.value(i, 7))], mode)?;
            }
            Ok(())
        })?;
        let w = format!("single-write txns, {}", mode.label());
        rep.add(
            &w,
            kind,
            "commits",
            per_sec(singles as u64, d),
            "txn/s",
            Better::Higher,
        );
        let batch = pool.pairs(0..s.batch.min(pool.len()));
        let txns = 5;
        let ((), d) = time(|| {
            for _ in 0..txns {
                engine.insert_txn(MAIN_TABLE, &batch, mode)?;
            }
            Ok(())
        })?;
        let w = format!("{}-write txns, {}", batch.len(), mode.label());
        rep.add(
            &w,
            kind,
            "writes",
            per_sec((txns * batch.len()) as u64, d),
            "writes/s",
            Better::Higher,
        );
    }
    Ok(())
}

fn cf_create_drop(engine: &dyn Engine, reps: usize, rep: &mut Report) -> Result<()> {
    let kind = engine.kind();
    let (create_w, drop_w) = ("CF create (durable)", "CF drop (durable)");
    if let WriterLayout::Unsupported(why) = engine.writer_layout() {
        for w in [create_w, drop_w] {
            for p in ["p50", "p95"] {
                rep.add_missing(w, kind, p, "µs", Better::Lower, why);
            }
        }
        return Ok(());
    }
    progress(SUITE, kind, &format!("{reps} CF create/drop"));
    let mut create = Latencies::with_capacity(reps);
    let mut drop = Latencies::with_capacity(reps);
    for i in 0..reps {
        let name = format!("cf_{i}");
        create.push(time(|| engine.create_table(&name))?.1);
        drop.push(time(|| engine.drop_table(&name))?.1);
    }
    for (w, lat) in [(create_w, &mut create), (drop_w, &mut drop)] {
        rep.add(w, kind, "p50", lat.percentile_us(0.5), "µs", Better::Lower);
        rep.add(w, kind, "p95", lat.percentile_us(0.95), "µs", Better::Lower);
    }
    Ok(())
}

fn recovery(ctx: &Ctx, kind: EngineKind, records: usize, rep: &mut Report) -> Result<()> {
    let workload = format!("recovery after crash, {records} records");
    let Some(exe) = &ctx.exe else {
        let why = "no binary path for the crash child";
        rep.add_missing(&workload, kind, "replay", "records/s", Better::Higher, why);
        return Ok(());
    };
    progress(SUITE, kind, &workload);
    let dir = ctx.root.join(format!("{SUITE}-recovery-{}", kind.name()));
    let result = crash_and_reopen(exe, kind, &dir, records, ctx.seed);
    remove_dir(&dir);
    let reopened = result?;
    // Engines that report how many log records their recovery applied
    // (sheafdb) are rated on those; the others on what the child committed.
    let applied = reopened.replayed.unwrap_or(records as u64 + 1);
    let rate = applied as f64 / reopened.open_secs.max(1e-9);
    rep.add(&workload, kind, "replay", rate, "records/s", Better::Higher);
    rep.add(
        &workload,
        kind,
        "reopen",
        reopened.open_secs * 1e3,
        "ms",
        Better::Lower,
    );
    if let Some(n) = reopened.replayed {
        rep.note(format!(
            "{kind} recovery: the reopen replayed {n} WAL records \
             (Database::replayed_records): the crash child's {} data commits and \
             its table creation; replay rate = replayed records / reopen time",
            records + 1
        ));
    }
    Ok(())
}

/// What the parent saw when it reopened after the crash.
struct Reopened {
    open_secs: f64,
    replayed: Option<u64>,
}

fn crash_and_reopen(
    exe: &Path,
    kind: EngineKind,
    dir: &Path,
    records: usize,
    seed: u64,
) -> Result<Reopened> {
    let status = Command::new(exe)
        .arg("crash-writer")
        .arg("--engine")
        .arg(kind.name())
        .arg("--crash-dir")
        .arg(dir)
        .arg("--records")
        .arg(records.to_string())
        .arg("--seed")
        .arg(seed.to_string())
        .status()?;
    if status.success() {
        return Err("crash child exited cleanly; expected an abort".into());
    }
    let start = Instant::now();
    let engine = engines::open(kind, dir, OpenOptions::default())?;
    let open_secs = start.elapsed().as_secs_f64();
    let n = engine.len(MAIN_TABLE)?;
    let expect = records as u64 + 1;
    if n != expect {
        return Err(format!("{kind}: {n} records after recovery, expected {expect}").into());
    }
    Ok(Reopened {
        open_secs,
        replayed: engine.replayed_records(),
    })
}

/// Body of the `crash-writer` child: commits `records` no-sync single-record
/// transactions and one durable one (which makes all of them durable: for
/// sheafdb, `Durability::None` commits then one `Immediate` commit that
/// fdatasyncs the WAL past them all), then aborts the process without
/// closing the engine (no checkpoint, no clean shutdown).
pub fn crash_writer(kind: EngineKind, dir: &Path, records: usize, seed: u64) -> Result<()> {
    let engine = engines::open(kind, dir, OpenOptions::default())?;
    let pool = Dataset::random(1, 8, RECOVERY_VALUE_BYTES, seed);
    for i in 0..records as u64 {
        let key = mix64(i).to_be_bytes();
        engine.insert_txn(
            MAIN_TABLE,
            &[(&key, pool.value(i as usize, 0))],
            SyncMode::NoSync,
        )?;
    }
    let last = mix64(records as u64).to_be_bytes();
    engine.insert_txn(MAIN_TABLE, &[(&last, pool.value(0, 1))], SyncMode::Durable)?;
    std::process::abort();
}
