//! A tour of sheafdb: create a database, write several typed tables in one
//! transaction, read them from a snapshot, close and reopen, then survive a
//! simulated power loss in the middle of a commit.
//!
//! Run: `cargo run --release --example quickstart`

use std::sync::Arc;

use sheafdb::storage::sim::SimVfs;
use sheafdb::{Database, Result, TableDefinition};

const USERS: TableDefinition<&str, u64> = TableDefinition::new("users");
const EVENTS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("events");

fn write_sample(db: &Database) -> Result<()> {
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
    tx.commit()
}

fn show(db: &Database, label: &str) -> Result<()> {
    let rx = db.begin_read()?;
    let users = rx.open_table(USERS)?;
    let events = rx.open_table(EVENTS)?;
    println!("[{label}] tables: {:?}", rx.list_tables()?);
    for entry in users.iter()? {
        let (k, v) = entry?;
        println!("[{label}]   user {:<6} age {}", k.value(), v.value());
    }
    let last3: Vec<String> = events
        .range((995u64, 0u32)..)?
        .rev()
        .take(3)
        .map(|e| e.map(|(k, v)| format!("{:?}={}", k.value(), String::from_utf8_lossy(v.value()))))
        .collect::<Result<_>>()?;
    println!("[{label}]   {} events, newest: {last3:?}", events.len()?);
    Ok(())
}

fn on_disk() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("quickstart.sheaf");
    {
        let db = Database::create(&path)?;
        write_sample(&db)?;
        show(&db, "written")?;
    }
    let db = Database::open(&path)?;
    show(&db, "reopened")?;
    let report = db.check_integrity()?;
    println!(
        "[reopened] integrity ok: {} tables, {} entries, {} pages in use, file {} KiB",
        report.tables,
        report.entries,
        report.pages_in_use,
        db.file_len_bytes() / 1024
    );
    Ok(())
}

fn power_loss() -> Result<()> {
    let vfs = SimVfs::new();
    let db = Database::builder().create_with_vfs(Arc::new(vfs.clone()), "sim.sheaf")?;
    write_sample(&db)?;
    // A second commit is in flight when the power fails: the simulated disk
    // keeps, drops or tears every write that was not yet synced.
    let tx = db.begin_write()?;
    tx.open_table(USERS)?.insert("dave", 52)?;
    let crashed = vfs.crash(42);
    tx.commit()?;
    drop(db);
    let db = Database::builder().open_with_vfs(Arc::new(crashed), "sim.sheaf")?;
    db.check_integrity()?;
    let rx = db.begin_read()?;
    let users = rx.open_table(USERS)?;
    println!(
        "[after power loss] recovered {} users (dave's commit was not acknowledged before the crash: {})",
        users.len()?,
        if users.get("dave")?.is_some() { "present" } else { "absent" }
    );
    Ok(())
}

fn main() -> Result<()> {
    on_disk()?;
    power_loss()
}
