//! redb 4.x adapter.
//!
//! Layout: one database file `redb.db`; table `t` is the redb table `kv{t}`
//! (`&[u8] -> &[u8]`). redb has one writer at a time per database, so
//! writers on different tables serialise on `begin_write`.
//!
//! Durability: durable commits use `Durability::Immediate` (redb fsyncs the
//! file before `commit` returns); no-sync commits use `Durability::None`
//! (persisted only by a later Immediate commit). Bulk loads commit Immediate.
//! Compaction: `Database::compact`, repeated until it reports no progress.

use std::path::{Path, PathBuf};

use redb::{
    Database, Durability, ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTableMetadata,
    TableDefinition,
};

use super::{
    copy_into, table_name, Compaction, Engine, EngineKind, KvRef, OpenOptions, Reader, Result,
    Snapshot, SyncMode, TableId, WriterLayout,
};

type Def<'a> = TableDefinition<'a, &'static [u8], &'static [u8]>;

/// An open redb database.
pub struct RedbEngine {
    dir: PathBuf,
    db: Database,
    names: Vec<String>,
}

fn durability(mode: SyncMode) -> Durability {
    match mode {
        SyncMode::Durable => Durability::Immediate,
        // No mode between the two (`EngineKind::relaxed` is `None`).
        SyncMode::NoSync | SyncMode::Relaxed => Durability::None,
    }
}

impl RedbEngine {
    /// Creates or opens `dir/redb.db` and makes sure every table exists.
    pub fn open(dir: &Path, opts: OpenOptions) -> Result<Self> {
        let db = Database::create(dir.join("redb.db"))?;
        let names: Vec<String> = (0..opts.tables).map(table_name).collect();
        let engine = RedbEngine {
            dir: dir.to_path_buf(),
            db,
            names,
        };
        let tx = engine.db.begin_write()?;
        for name in &engine.names {
            tx.open_table(Def::new(name))?;
        }
        tx.commit()?;
        Ok(engine)
    }

    fn def(&self, table: TableId) -> Def<'_> {
        Def::new(&self.names[table.0])
    }

    fn write(
        &self,
        mode: SyncMode,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<()>,
    ) -> Result<()> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(durability(mode))?;
        f(&tx)?;
        tx.commit()?;
        Ok(())
    }
}

impl Engine for RedbEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Redb
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn bulk_load(&self, table: TableId, pairs: &[KvRef<'_>]) -> Result<()> {
        self.insert_txn(table, pairs, SyncMode::Durable)
    }

    fn insert_txn(&self, table: TableId, batch: &[KvRef<'_>], mode: SyncMode) -> Result<()> {
        self.write(mode, |tx| {
            let mut t = tx.open_table(self.def(table))?;
            for &(k, v) in batch {
                t.insert(k, v)?;
            }
            Ok(())
        })
    }

    fn remove_txn(&self, table: TableId, keys: &[&[u8]], mode: SyncMode) -> Result<()> {
        self.write(mode, |tx| {
            let mut t = tx.open_table(self.def(table))?;
            for &k in keys {
                t.remove(k)?;
            }
            Ok(())
        })
    }

    fn pop_first_txn(&self, table: TableId, mode: SyncMode, key: &mut Vec<u8>) -> Result<bool> {
        let mut found = false;
        self.write(mode, |tx| {
            if let Some((k, _)) = tx.open_table(self.def(table))?.pop_first()? {
                copy_into(key, k.value());
                found = true;
            }
            Ok(())
        })?;
        Ok(found)
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(RedbReader { engine: self }))
    }

    fn len(&self, table: TableId) -> Result<u64> {
        let tx = self.db.begin_read()?;
        Ok(tx.open_table(self.def(table))?.len()?)
    }

    fn compact(&mut self) -> Result<Compaction> {
        // Each call frees what it can; a bounded loop reaches the fixpoint.
        for _ in 0..64 {
            if !self.db.compact()? {
                break;
            }
        }
        Ok(Compaction::Done)
    }

    fn create_table(&self, name: &str) -> Result<()> {
        self.write(SyncMode::Durable, |tx| {
            tx.open_table(Def::new(name))?;
            Ok(())
        })
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        self.write(SyncMode::Durable, |tx| {
            tx.delete_table(Def::new(name))?;
            Ok(())
        })
    }

    fn writer_layout(&self) -> WriterLayout {
        WriterLayout::PerWriter("one table per writer in one database file; writers serialise")
    }
}

struct RedbReader<'e> {
    engine: &'e RedbEngine,
}

impl Reader for RedbReader<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let tx = self.engine.db.begin_read()?;
        let t = tx.open_table(self.engine.def(table))?;
        read_into(&t, key, out)
    }

    fn snapshot(&mut self) -> Result<Box<dyn Snapshot + '_>> {
        let tx = self.engine.db.begin_read()?;
        let mut tables = Vec::with_capacity(self.engine.names.len());
        for name in &self.engine.names {
            tables.push(tx.open_table(Def::new(name))?);
        }
        Ok(Box::new(RedbSnapshot { _tx: tx, tables }))
    }
}

struct RedbSnapshot {
    // Kept so the snapshot lives as long as the tables opened from it.
    _tx: ReadTransaction,
    tables: Vec<ReadOnlyTable<&'static [u8], &'static [u8]>>,
}

fn read_into(
    t: &ReadOnlyTable<&'static [u8], &'static [u8]>,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool> {
    match t.get(key)? {
        Some(guard) => {
            copy_into(out, guard.value());
            Ok(true)
        }
        None => Ok(false),
    }
}

impl Snapshot for RedbSnapshot {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        read_into(&self.tables[table.0], key, out)
    }

    fn range(
        &mut self,
        table: TableId,
        start: &[u8],
        n: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mut seen = 0;
        for item in self.tables[table.0].range(start..)?.take(n) {
            let (k, v) = item?;
            visit(k.value(), v.value());
            seen += 1;
        }
        Ok(seen)
    }
}
