//! I/O error injection (design.md §12): fail the N-th storage operation, for
//! every N over a workload, with EIO, ENOSPC and short writes. Each run
//! must end in `Ok` or an error (never a panic), and a reopen must show a
//! committed prefix: the last acknowledged commit or the failed one.

mod common;

use common::{dump, open_sim, random_writes, Model};
use rand::rngs::StdRng;
use rand::SeedableRng;
use sheafdb::storage::sim::{CrashPolicy, Fault, SimVfs};
use sheafdb::Result;

const COMMITS: usize = 15;

/// The workload: COMMITS commits of random writes. Returns the models
/// after each commit attempt: (acknowledged, in flight when an error hit).
fn workload(vfs: &SimVfs, arm: Option<(u64, Fault)>) -> (Model, Option<Model>) {
    let mut rng = StdRng::seed_from_u64(5);
    let db = open_sim(vfs, "e.sheaf").expect("create");
    if let Some((n, f)) = arm {
        vfs.fail_op(n, f);
    }
    let mut acked = Model::new();
    let mut in_flight = None;
    for _ in 0..COMMITS {
        let mut next = acked.clone();
        let r: Result<()> = (|| {
            let tx = db.begin_write()?;
            random_writes(&tx, &mut next, &mut rng, 40)?;
            tx.commit()
        })();
        match r {
            Ok(()) => acked = next,
            Err(_) => {
                in_flight.get_or_insert(next);
                // The model of a failed transaction is not committed;
                // later commits may still succeed (e.g. a failed read).
            }
        }
    }
    (acked, in_flight)
}

fn check_reopen(vfs: &SimVfs, acked: &Model, in_flight: &Option<Model>, what: &str) {
    let db = open_sim(vfs, "e.sheaf").unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
    let state = dump(&db).unwrap_or_else(|e| panic!("{what}: dump failed: {e}"));
    assert!(
        &state == acked || in_flight.as_ref() == Some(&state),
        "{what}: state after reopen is not a committed prefix"
    );
    db.check_integrity()
        .unwrap_or_else(|e| panic!("{what}: integrity: {e}"));
}

#[test]
fn every_operation_failing_once_leaves_a_committed_prefix() {
    let probe = SimVfs::new();
    let start = probe.op_count();
    let _ = workload(&probe, None);
    let total = probe.op_count() - start;
    assert!(
        total > 20,
        "workload too small to be meaningful ({total} ops)"
    );
    eprintln!("io_errors: failing each of {total} operations in turn");
    for n in 1..=total {
        for fault in [Fault::Eio, Fault::NoSpace, Fault::ShortWrite] {
            let vfs = SimVfs::new();
            let (acked, in_flight) = workload(&vfs, Some((n, fault)));
            let what = format!("op {n} failing with {fault:?}");
            vfs.clear_faults();
            check_reopen(
                &vfs,
                &acked,
                &in_flight,
                &format!("{what}, process restart"),
            );
            let crashed = vfs.crash_with(n, CrashPolicy::Random);
            check_reopen(
                &crashed,
                &acked,
                &in_flight,
                &format!("{what}, then power loss"),
            );
        }
    }
}

#[test]
fn poisoned_database_refuses_writes_until_reopened() {
    let vfs = SimVfs::new();
    let db = open_sim(&vfs, "poison.sheaf").unwrap();
    vfs.fail_from(1, Fault::Eio);
    let tx = db.begin_write().unwrap();
    tx.open_table(common::def("t"))
        .unwrap()
        .insert(b"k".as_slice(), b"v".as_slice())
        .unwrap();
    assert!(tx.commit().is_err());
    assert!(matches!(db.begin_write(), Err(sheafdb::Error::Poisoned(_))));
    vfs.clear_faults();
    assert!(matches!(db.begin_write(), Err(sheafdb::Error::Poisoned(_))));
    drop(db);
    let db = open_sim(&vfs, "poison.sheaf").unwrap();
    db.check_integrity().unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_table(common::def("t"))
        .unwrap()
        .insert(b"k".as_slice(), b"v".as_slice())
        .unwrap();
    tx.commit().unwrap();
}
