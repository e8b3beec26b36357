//! Power-loss simulation (design.md §12): random workloads on the
//! fault-injecting storage lose power at a random operation; the disk then
//! keeps, drops or tears every unsynced write. After reopen the state must
//! equal the model at the last acknowledged commit or the one in flight,
//! `check_integrity()` must pass, and the database must keep working.
//! Every failure message carries the seed; `SHEAF_SEED=n` replays one case.

mod common;

use common::{dump, open_sim, random_writes, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sheafdb::storage::sim::{Fault, SimVfs};
use sheafdb::Result;

struct Outcome {
    acked: Model,
    in_flight: Option<Model>,
}

/// Runs commits until the simulated power cut makes one fail.
fn workload(vfs: &SimVfs, rng: &mut StdRng) -> Result<Outcome> {
    let db = open_sim(vfs, "p.sheaf")?;
    let mut acked = Model::new();
    // Warm up with a few commits that always succeed.
    for _ in 0..rng.gen_range(0..4) {
        let tx = db.begin_write()?;
        random_writes(&tx, &mut acked, rng, 20)?;
        tx.commit()?;
    }
    vfs.fail_from(rng.gen_range(1..300), Fault::Eio);
    for _ in 0..40 {
        let mut next = acked.clone();
        let Ok(tx) = db.begin_write() else { break };
        let n = rng.gen_range(1..30);
        if random_writes(&tx, &mut next, rng, n).is_err() {
            break;
        }
        match tx.commit() {
            Ok(()) => acked = next,
            Err(_) => {
                return Ok(Outcome {
                    acked,
                    in_flight: Some(next),
                })
            }
        }
    }
    Ok(Outcome {
        acked,
        in_flight: None,
    })
}

fn run_case(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let vfs = SimVfs::new();
    let outcome =
        workload(&vfs, &mut rng).unwrap_or_else(|e| panic!("seed {seed}: setup failed: {e}"));
    let crashed = vfs.crash(seed);
    let db =
        open_sim(&crashed, "p.sheaf").unwrap_or_else(|e| panic!("seed {seed}: reopen failed: {e}"));
    let state = dump(&db).unwrap_or_else(|e| panic!("seed {seed}: read failed: {e}"));
    let ok = state == outcome.acked || outcome.in_flight.as_ref() == Some(&state);
    assert!(ok, "seed {seed}: recovered state is neither the last acknowledged commit nor the one in flight");
    db.check_integrity()
        .unwrap_or_else(|e| panic!("seed {seed}: integrity after crash: {e}"));
    // The recovered database keeps working, including its allocator.
    let mut model = state;
    for _ in 0..3 {
        let tx = db.begin_write().unwrap();
        random_writes(&tx, &mut model, &mut rng, 25).unwrap();
        tx.commit()
            .unwrap_or_else(|e| panic!("seed {seed}: commit after recovery: {e}"));
    }
    assert_eq!(
        dump(&db).unwrap(),
        model,
        "seed {seed}: writes after recovery"
    );
    db.check_integrity()
        .unwrap_or_else(|e| panic!("seed {seed}: integrity after more writes: {e}"));
}

#[test]
fn power_loss_at_random_points() {
    if let Some(seed) = std::env::var("SHEAF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        run_case(seed);
        return;
    }
    let cases: u64 = std::env::var("SHEAF_POWER_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    sheafdb::testing::in_parallel(0..cases, run_case);
}
