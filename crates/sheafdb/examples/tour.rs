//! A tour of sheafdb — the README's first command.
//!
//! 1. Typed tables in the default column family: write, read from a
//!    snapshot, close, reopen.
//! 2. Column families written concurrently, one thread each, plus
//!    transfers that span two CFs atomically; a database-wide snapshot
//!    checks that money is never created or lost.
//! 3. Power loss on a simulated disk in the middle of that workload:
//!    reopen recovers through the WAL, every acknowledged commit is there,
//!    the totals still add up, and `check_integrity()` passes.
//!
//! Run: `cargo run --release --example tour`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sheafdb::storage::sim::SimVfs;
use sheafdb::{ColumnFamily, Database, Result, TableDefinition};

const USERS: TableDefinition<&str, u64> = TableDefinition::new("users");
const EVENTS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("events");
const BALANCE: TableDefinition<u64, i64> = TableDefinition::new("balance");

const BRANCHES: usize = 4;
const ACCOUNTS: u64 = 100;
const START: i64 = 1_000;

fn tables_on_disk() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("tour.sheaf");
    {
        let db = Database::create(&path)?;
        let tx = db.begin_write()?;
        {
            let mut users = tx.open_table(USERS)?;
            for (name, age) in [("alice", 31), ("bob", 27), ("carol", 45)] {
                users.insert(name, age)?;
            }
            let mut events = tx.open_table(EVENTS)?;
            for ts in 0..1000u64 {
                events.insert((ts, (ts % 7) as u32), format!("event #{ts}").as_bytes())?;
            }
        }
        tx.commit()?;
        db.close()?; // checkpoints: the next open replays nothing
    }
    let db = Database::open(&path)?;
    let rx = db.begin_read()?;
    let users = rx.open_table(USERS)?;
    let names: Vec<String> = users
        .iter()?
        .map(|e| e.map(|(k, v)| format!("{}={}", k.value(), v.value())))
        .collect::<Result<_>>()?;
    let events = rx.open_table(EVENTS)?;
    let newest = events
        .last()?
        .map(|(k, v)| (k.value(), String::from_utf8_lossy(v.value()).into_owned()));
    println!(
        "[1 tables] reopened: users {names:?}; {} events, newest {newest:?}",
        events.len()?
    );
    println!(
        "[1 tables] WAL records replayed at open: {} (clean close)",
        db.replayed_records()
    );
    Ok(())
}

fn open_branches(db: &Database) -> Result<Vec<ColumnFamily>> {
    (0..BRANCHES)
        .map(|i| db.cf_or_create(&format!("branch{i}")))
        .collect()
}

fn total(db: &Database, cfs: &[ColumnFamily]) -> Result<i64> {
    let snapshot = db.begin_read()?; // every CF at one instant
    let mut sum = 0;
    for cf in cfs {
        for e in snapshot.open_table_in(cf, BALANCE)?.iter()? {
            sum += e?.1.value();
        }
    }
    Ok(sum)
}

/// One thread per CF: deposits-and-withdrawals inside its branch, and
/// every few rounds a transfer to another branch in one atomic
/// multi-CF transaction. Returns how many commits were acknowledged.
fn run_branches(db: &Arc<Database>, cfs: &Arc<Vec<ColumnFamily>>, rounds: u64) -> u64 {
    let acked = Arc::new(AtomicU64::new(0));
    std::thread::scope(|s| {
        for b in 0..BRANCHES {
            let (db, cfs, acked) = (db.clone(), cfs.clone(), acked.clone());
            s.spawn(move || {
                for r in 0..rounds {
                    let a = (r * 7 + b as u64) % ACCOUNTS;
                    let c = (a + 1 + (r * 13) % (ACCOUNTS - 1)) % ACCOUNTS; // never a

                    let result = if r % 4 == 3 {
                        let other = &cfs[(b + 1) % BRANCHES];
                        (|| {
                            let tx = db.begin_write_cfs(&[&cfs[b], other])?;
                            let mut from = tx.open_table(&cfs[b], BALANCE)?;
                            let v = from.get(a)?.unwrap().value();
                            from.insert(a, v - 10)?;
                            drop(from);
                            let mut to = tx.open_table(other, BALANCE)?;
                            let v = to.get(c)?.unwrap().value();
                            to.insert(c, v + 10)?;
                            drop(to);
                            tx.commit()
                        })()
                    } else {
                        (|| {
                            let tx = cfs[b].begin_write()?;
                            {
                                let mut t = tx.open_table(BALANCE)?;
                                let (va, vc) =
                                    (t.get(a)?.unwrap().value(), t.get(c)?.unwrap().value());
                                t.insert(a, va - 3)?;
                                t.insert(c, vc + 3)?;
                            }
                            tx.commit()
                        })()
                    };
                    match result {
                        Ok(()) => {
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => return, // the simulated disk died
                    }
                }
            });
        }
    });
    acked.load(Ordering::Relaxed)
}

fn column_families_and_power_loss() -> Result<()> {
    let vfs = SimVfs::new();
    let open = |vfs: &SimVfs| {
        Database::builder()
            .wal_segment_bytes(1 << 20)
            .create_with_vfs(Arc::new(vfs.clone()), "bank.sheaf")
    };
    let db = Arc::new(open(&vfs)?);
    let cfs = Arc::new(open_branches(&db)?);
    for cf in cfs.iter() {
        let tx = cf.begin_write()?;
        {
            let mut t = tx.open_table(BALANCE)?;
            for a in 0..ACCOUNTS {
                t.insert(a, START)?;
            }
        }
        tx.commit()?;
    }
    let expected = BRANCHES as i64 * ACCOUNTS as i64 * START;
    let acked = run_branches(&db, &cfs, 200);
    db.checkpoint()?;
    println!(
        "[2 column families] {BRANCHES} threads, one per CF, committed {acked} transactions (every 4th spans two CFs); snapshot total {} (expected {expected}); CFs {:?}",
        total(&db, &cfs)?,
        db.list_cfs()?
    );

    // The power fails while the branches are committing: from operation
    // 400 on, every write and sync fails; the disk keeps, drops or tears
    // whatever was not synced.
    vfs.fail_from(400, sheafdb::storage::sim::Fault::Eio);
    let acked = run_branches(&db, &cfs, 200);
    let crashed = vfs.crash(2026);
    println!("[3 power loss] {acked} more commits were acknowledged before the disk died");
    drop(cfs);
    drop(db);

    let db = open(&crashed)?;
    let cfs = open_branches(&db)?;
    let report = db.check_integrity()?;
    println!(
        "[3 power loss] reopened: replayed {} WAL records; snapshot total {} (expected {expected}); integrity ok over {} CFs, {} tables, {} entries",
        db.replayed_records(),
        total(&db, &cfs)?,
        report.cfs,
        report.tables,
        report.entries
    );
    for cf in &cfs {
        let s = cf.stats()?;
        println!(
            "[3 power loss]   {:<8} {} entries, {} extents ({} KiB)",
            cf.name(),
            s.entries,
            s.extents,
            s.extent_bytes / 1024
        );
    }
    assert_eq!(total(&db, &cfs)?, expected, "money was created or lost");
    Ok(())
}

fn main() -> Result<()> {
    tables_on_disk()?;
    column_families_and_power_loss()
}
