//! Space reuse (design.md §5): rewriting the same keys keeps the file size
//! stable; a snapshot pins the pages it reads until it is dropped; a tree
//! that shrinks gives its pages back.

mod common;

use std::sync::Arc;

use sheafdb::storage::mem::MemVfs;
use sheafdb::{Database, Result, TableDefinition};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");

fn overwrite_round(db: &Database, round: u64, keys: u64) -> Result<()> {
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 0..keys {
            let len = 16 + ((k + round) % 17) as usize;
            t.insert(k, vec![round as u8; len].as_slice())?;
        }
    }
    tx.commit()
}

#[test]
fn overwriting_10k_keys_100_times_keeps_the_file_size() -> Result<()> {
    let db = common::builder().create_with_vfs(Arc::new(MemVfs::new()), "s.sheaf")?;
    let mut sizes = Vec::new();
    for round in 0..100 {
        overwrite_round(&db, round, 10_000)?;
        sizes.push(db.file_len_bytes());
    }
    let settled = sizes[4];
    assert!(
        sizes[5..].iter().all(|&s| s <= settled),
        "file grew after round 5: {} -> {}",
        settled,
        sizes.last().unwrap()
    );
    let report = db.check_integrity()?;
    assert_eq!(report.entries, 10_000);
    Ok(())
}

#[test]
fn a_snapshot_pins_pages_until_dropped() -> Result<()> {
    let db = common::builder().create_with_vfs(Arc::new(MemVfs::new()), "p.sheaf")?;
    overwrite_round(&db, 0, 5_000)?;
    let reader = db.begin_read()?;
    for round in 1..10 {
        overwrite_round(&db, round, 5_000)?;
    }
    // The old snapshot still reads its own data.
    let t = reader.open_table(T)?;
    assert_eq!(
        t.get(4_999)?.unwrap().value(),
        vec![0u8; 16 + (4_999 % 17)].as_slice()
    );
    let grown = db.file_len_bytes();
    drop(t);
    drop(reader);
    for round in 10..40 {
        overwrite_round(&db, round, 5_000)?;
    }
    assert!(
        db.file_len_bytes() <= grown,
        "pages held by the dropped snapshot were not reused"
    );
    db.check_integrity()?;
    Ok(())
}

#[test]
fn a_tree_that_shrinks_gives_pages_back() -> Result<()> {
    let db = common::builder().create_with_vfs(Arc::new(MemVfs::new()), "shrink.sheaf")?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 0..50_000u64 {
            t.insert(k, [7u8; 40].as_slice())?;
        }
    }
    tx.commit()?;
    let full = db.check_integrity()?.pages_in_use;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        for k in 10..50_000u64 {
            t.remove(k)?;
        }
    }
    tx.commit()?;
    let report = db.check_integrity()?;
    assert!(full > 500, "expected a large tree, got {full} pages");
    assert!(
        report.pages_in_use < 40,
        "{} pages still in use for 10 entries",
        report.pages_in_use
    );
    assert_eq!(report.entries, 10);
    Ok(())
}

/// Issue 9 point 10: a read transaction held open while others commit
/// used to keep every superseded page in memory (~16 KiB per commit, not
/// counted by any budget). Checkpoints now write those pages where they
/// are, so memory stays under the cache budget plus the dirty triggers
/// however many commits the old snapshot outlives, and the snapshot still
/// reads its data (from the file).
#[test]
fn an_old_snapshot_does_not_cost_memory_per_commit() {
    use sheafdb::storage::mem::MemVfs;
    const T: sheafdb::TableDefinition<u64, u64> = sheafdb::TableDefinition::new("t");
    let db = sheafdb::Database::builder()
        .cache_size_bytes(2 << 20)
        .background_checkpoints(false)
        .checkpoint_triggers(4 << 20, 1 << 20, 2 << 20)
        .create_with_vfs(std::sync::Arc::new(MemVfs::new()), "m")
        .unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        for k in 0..20_000u64 {
            t.insert(k, k).unwrap();
        }
    }
    tx.commit().unwrap();
    let old = db.begin_read().unwrap();
    let peak_at = |commits: u64, from: u64| {
        let mut peak = 0u64;
        for i in from..commits {
            let tx = db.begin_write().unwrap();
            tx.open_table(T)
                .unwrap()
                .insert((i * 7919) % 20_000, i + 1_000_000)
                .unwrap();
            tx.commit().unwrap();
            let m = db.memory_stats();
            peak = peak.max(m.clean_bytes + m.dirty_bytes);
        }
        peak
    };
    let early = peak_at(2_000, 0);
    let late = peak_at(12_000, 2_000);
    // Budget 2 MiB clean + 2 MiB hard dirty limit (+ slack for the runs a
    // checkpoint is writing). Before the fix, 12,000 commits kept ~190 MiB.
    let bound = 8u64 << 20;
    assert!(early <= bound, "{early} bytes after 2,000 commits");
    assert!(late <= bound, "{late} bytes after 12,000 commits");
    // The old snapshot still reads what it saw.
    let t = old.open_table(T).unwrap();
    for k in (0..20_000u64).step_by(97) {
        assert_eq!(t.get(k).unwrap().unwrap().value(), k, "key {k}");
    }
    assert_eq!(t.len().unwrap(), 20_000);
    drop(t);
    drop(old);
    db.check_integrity().unwrap();
}
