//! `queue`: a table used as a job queue, the workload where removed keys
//! pile up at the front of a table (LSM tombstones; sheafdb's write buffer
//! until a fold, design.md "End hints").
//!
//! Per engine: loads `QUEUED` jobs (8-byte big-endian sequence numbers,
//! 100-byte values) in one durable transaction; then runs rounds of one
//! no-sync transaction pushing a job at the tail and one no-sync
//! transaction popping the smallest key, so the queue keeps its length
//! while its front moves; every popped key is checked to be the next in
//! sequence. Reports the rounds per second, the pop latency percentiles
//! over all rounds and over the last tenth (where a walk over removed keys
//! would show as growth), and the size on disk at the end.

use std::time::Instant;

use crate::engines::{Engine, OpenOptions, Result, SyncMode, MAIN_TABLE};
use crate::report::{Better, Report};
use crate::stats::{per_sec, Latencies};

use super::{for_each_engine, progress, Ctx};

const SUITE: &str = "queue";
const VALUE_BYTES: usize = 100;

/// The key of job number `i`.
fn job_key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

/// Runs the suite over every engine of `ctx`.
pub fn run(ctx: &Ctx, rep: &mut Report) -> Result<()> {
    let queued = ctx.n(100_000, 1_000) as u64;
    let rounds = ctx.n(50_000, 500) as u64;
    rep.note(format!(
        "a queue of {queued} jobs (8-byte sequence keys, {VALUE_BYTES}-byte values); each round \
         is a no-sync push transaction and a no-sync pop-first transaction"
    ));
    for_each_engine(ctx, rep, SUITE, OpenOptions::default(), |engine, rep| {
        run_engine(engine.as_ref(), queued, rounds, rep)
    });
    Ok(())
}

fn run_engine(engine: &dyn Engine, queued: u64, rounds: u64, rep: &mut Report) -> Result<()> {
    let kind = engine.kind();
    let value = [0x5Au8; VALUE_BYTES];
    let keys: Vec<[u8; 8]> = (0..queued).map(job_key).collect();
    let pairs: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &value[..])).collect();
    progress(SUITE, kind, &format!("loading {queued} jobs"));
    engine.bulk_load(MAIN_TABLE, &pairs)?;
    progress(SUITE, kind, &format!("{rounds} push + pop rounds"));
    let mut pops = Latencies::with_capacity(rounds as usize);
    let mut last_tenth = Latencies::with_capacity((rounds / 10 + 1) as usize);
    let mut popped = Vec::new();
    let start = Instant::now();
    for r in 0..rounds {
        let push = job_key(queued + r);
        engine.insert_txn(MAIN_TABLE, &[(&push[..], &value[..])], SyncMode::NoSync)?;
        let t = Instant::now();
        let found = engine.pop_first_txn(MAIN_TABLE, SyncMode::NoSync, &mut popped)?;
        let d = t.elapsed();
        if !found || popped[..] != job_key(r)[..] {
            return Err(format!("{kind}: round {r} popped {popped:?}, expected job {r}").into());
        }
        pops.push(d);
        if r >= rounds - rounds / 10 {
            last_tenth.push(d);
        }
    }
    let elapsed = start.elapsed();
    let w = format!("{rounds} push + pop rounds, no-sync (queue of {queued})");
    let rate = per_sec(rounds, elapsed);
    rep.add(&w, kind, "throughput", rate, "rounds/s", Better::Higher);
    for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
        let us = pops.percentile_us(q);
        rep.add("pop_first latency", kind, name, us, "µs", Better::Lower);
    }
    let us = last_tenth.percentile_us(0.99);
    rep.add(
        "pop_first latency, last tenth",
        kind,
        "p99",
        us,
        "µs",
        Better::Lower,
    );
    let len = engine.len(MAIN_TABLE)?;
    if len != queued {
        return Err(format!("{kind}: len() = {len} after the rounds, expected {queued}").into());
    }
    let bytes = engine.disk_bytes()? as f64;
    rep.add(
        "size after the rounds",
        kind,
        "disk",
        bytes,
        "bytes",
        Better::Lower,
    );
    Ok(())
}
