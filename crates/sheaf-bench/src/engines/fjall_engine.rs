//! fjall 3.x adapter.
//!
//! Layout: one fjall `Database` in `dir/fjall/`; table `t` is the keyspace
//! `kv{t}`. Writers on different keyspaces write their batches concurrently,
//! but share the database's journal (its writer lock is held across the
//! append and, for durable batches, the fsync).
//!
//! Transactions: every insert/remove call is one atomic `WriteBatch`
//! (fjall's atomic multi-key write); point reads go through the keyspace
//! (which reads the latest committed state), multi-read snapshots through
//! `Database::snapshot`.
//!
//! Durability: durable batches commit with `PersistMode::SyncData`
//! (fdatasync of the journal before `commit` returns); no-sync batches with
//! `PersistMode::Buffer` (journal flushed to the OS, no fsync).
//!
//! Compaction: for every keyspace, flush the memtable
//! (`rotate_memtable_and_wait`) then `major_compact`.

use std::path::{Path, PathBuf};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};

use super::{
    copy_into, table_name, Compaction, Engine, EngineKind, KvRef, OpenOptions, Reader, Result,
    Snapshot, SyncMode, TableId, WriterLayout,
};

/// An open fjall database.
pub struct FjallEngine {
    dir: PathBuf,
    db: Database,
    keyspaces: Vec<Keyspace>,
}

fn persist_mode(mode: SyncMode) -> PersistMode {
    match mode {
        SyncMode::Durable => PersistMode::SyncData,
        // No mode between the two (`EngineKind::relaxed` is `None`).
        SyncMode::NoSync | SyncMode::Relaxed => PersistMode::Buffer,
    }
}

impl FjallEngine {
    /// Opens (or creates) `dir/fjall` and every keyspace.
    pub fn open(dir: &Path, opts: OpenOptions) -> Result<Self> {
        let db = Database::builder(dir.join("fjall")).open()?;
        let keyspaces = (0..opts.tables)
            .map(|t| db.keyspace(&table_name(t), KeyspaceCreateOptions::default))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        db.persist(PersistMode::SyncData)?;
        Ok(FjallEngine {
            dir: dir.to_path_buf(),
            db,
            keyspaces,
        })
    }
}

impl Engine for FjallEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Fjall
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn bulk_load(&self, table: TableId, pairs: &[KvRef<'_>]) -> Result<()> {
        self.insert_txn(table, pairs, SyncMode::Durable)
    }

    fn insert_txn(&self, table: TableId, batch: &[KvRef<'_>], mode: SyncMode) -> Result<()> {
        let ks = &self.keyspaces[table.0];
        let mut wb = self.db.batch().durability(Some(persist_mode(mode)));
        for &(k, v) in batch {
            wb.insert(ks, k, v);
        }
        wb.commit()?;
        Ok(())
    }

    fn remove_txn(&self, table: TableId, keys: &[&[u8]], mode: SyncMode) -> Result<()> {
        let ks = &self.keyspaces[table.0];
        let mut wb = self.db.batch().durability(Some(persist_mode(mode)));
        for &k in keys {
            wb.remove(ks, k);
        }
        wb.commit()?;
        Ok(())
    }

    /// Single-threaded use only (the suites pop from one thread): the
    /// read of the first key and its removal are not one transaction.
    fn pop_first_txn(&self, table: TableId, mode: SyncMode, key: &mut Vec<u8>) -> Result<bool> {
        let ks = &self.keyspaces[table.0];
        let Some(guard) = ks.first_key_value() else {
            return Ok(false);
        };
        let (k, _) = guard.into_inner()?;
        copy_into(key, &k);
        let mut wb = self.db.batch().durability(Some(persist_mode(mode)));
        wb.remove(ks, k);
        wb.commit()?;
        Ok(true)
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(FjallReader { engine: self }))
    }

    fn len(&self, table: TableId) -> Result<u64> {
        Ok(u64::try_from(self.keyspaces[table.0].len()?)?)
    }

    fn compact(&mut self) -> Result<Compaction> {
        for ks in &self.keyspaces {
            ks.rotate_memtable_and_wait()?;
            ks.major_compact()?;
        }
        Ok(Compaction::Done)
    }

    fn create_table(&self, name: &str) -> Result<()> {
        self.db.keyspace(name, KeyspaceCreateOptions::default)?;
        self.db.persist(PersistMode::SyncData)?;
        Ok(())
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        let ks = self.db.keyspace(name, KeyspaceCreateOptions::default)?;
        self.db.delete_keyspace(ks)?;
        self.db.persist(PersistMode::SyncData)?;
        Ok(())
    }

    fn writer_layout(&self) -> WriterLayout {
        WriterLayout::PerWriter(
            "one keyspace per writer in one database; writers share the journal lock",
        )
    }
}

struct FjallReader<'e> {
    engine: &'e FjallEngine,
}

impl Reader for FjallReader<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.engine.keyspaces[table.0].get(key)? {
            Some(v) => {
                copy_into(out, &v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn snapshot(&mut self) -> Result<Box<dyn Snapshot + '_>> {
        Ok(Box::new(FjallSnapshot {
            snap: self.engine.db.snapshot(),
            keyspaces: &self.engine.keyspaces,
        }))
    }
}

struct FjallSnapshot<'e> {
    snap: fjall::Snapshot,
    keyspaces: &'e [Keyspace],
}

impl Snapshot for FjallSnapshot<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.snap.get(&self.keyspaces[table.0], key)? {
            Some(v) => {
                copy_into(out, &v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn range(
        &mut self,
        table: TableId,
        start: &[u8],
        n: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mut seen = 0;
        for guard in self.snap.range(&self.keyspaces[table.0], start..).take(n) {
            let (k, v) = guard.into_inner()?;
            visit(&k, &v);
            seen += 1;
        }
        Ok(seen)
    }
}
