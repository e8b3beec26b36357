//! RocksDB adapter (rust-rocksdb), compiled only with the `rocksdb` feature
//! (needs libclang and a long C++ build; never built by CI).
//!
//! Layout: one RocksDB instance in `dir/rocksdb/` opened multi-threaded;
//! table `t` is the column family `kv{t}`. Writers on different CFs share the
//! WAL; RocksDB groups concurrent WAL writes (its own group commit).
//!
//! Transactions: every insert/remove call is one atomic `WriteBatch`.
//!
//! Durability: durable batches are written with `WriteOptions::set_sync(true)`
//! (WAL fsynced before the write returns); no-sync batches with
//! `set_sync(false)` and the WAL still on (survives a process crash, not a
//! power loss).
//!
//! Compaction: `compact_range_cf(None, None)` on every CF.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{
    BoundColumnFamily, DBWithThreadMode, Direction, IteratorMode, MultiThreaded, Options,
    WriteBatch, WriteOptions,
};

use super::{
    copy_into, table_name, Compaction, Engine, EngineKind, KvRef, OpenOptions, Reader, Result,
    Snapshot, SyncMode, TableId, WriterLayout,
};

type Db = DBWithThreadMode<MultiThreaded>;

/// An open RocksDB instance.
pub struct RocksEngine {
    dir: PathBuf,
    db: Db,
    names: Vec<String>,
}

impl RocksEngine {
    /// Opens (or creates) `dir/rocksdb` with one CF per table.
    pub fn open(dir: &Path, opts: OpenOptions) -> Result<Self> {
        let names: Vec<String> = (0..opts.tables).map(table_name).collect();
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        let db = Db::open_cf(&options, dir.join("rocksdb"), &names)?;
        Ok(RocksEngine {
            dir: dir.to_path_buf(),
            db,
            names,
        })
    }

    fn cf(&self, table: TableId) -> Result<Arc<BoundColumnFamily<'_>>> {
        self.db
            .cf_handle(&self.names[table.0])
            .ok_or_else(|| format!("rocksdb: missing column family {}", self.names[table.0]).into())
    }

    fn write(&self, batch: WriteBatch, mode: SyncMode) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(mode == SyncMode::Durable);
        self.db.write_opt(batch, &wo)?;
        Ok(())
    }
}

impl Engine for RocksEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Rocksdb
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn bulk_load(&self, table: TableId, pairs: &[KvRef<'_>]) -> Result<()> {
        self.insert_txn(table, pairs, SyncMode::Durable)
    }

    fn insert_txn(&self, table: TableId, batch: &[KvRef<'_>], mode: SyncMode) -> Result<()> {
        let cf = self.cf(table)?;
        let mut wb = WriteBatch::default();
        for &(k, v) in batch {
            wb.put_cf(&cf, k, v);
        }
        self.write(wb, mode)
    }

    fn remove_txn(&self, table: TableId, keys: &[&[u8]], mode: SyncMode) -> Result<()> {
        let cf = self.cf(table)?;
        let mut wb = WriteBatch::default();
        for &k in keys {
            wb.delete_cf(&cf, k);
        }
        self.write(wb, mode)
    }

    /// Single-threaded use only (the suites pop from one thread): the
    /// read of the first key and its removal are not one transaction.
    fn pop_first_txn(&self, table: TableId, mode: SyncMode, key: &mut Vec<u8>) -> Result<bool> {
        let cf = self.cf(table)?;
        let first = self.db.iterator_cf(&cf, IteratorMode::Start).next();
        let Some(item) = first else {
            return Ok(false);
        };
        let (k, _) = item?;
        copy_into(key, &k);
        let mut wb = WriteBatch::default();
        wb.delete_cf(&cf, &k);
        self.write(wb, mode)?;
        Ok(true)
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(RocksReader { engine: self }))
    }

    fn len(&self, table: TableId) -> Result<u64> {
        // RocksDB only estimates its size; count exactly by iterating.
        let cf = self.cf(table)?;
        let mut n = 0u64;
        for item in self.db.iterator_cf(&cf, IteratorMode::Start) {
            item?;
            n += 1;
        }
        Ok(n)
    }

    fn compact(&mut self) -> Result<Compaction> {
        for t in 0..self.names.len() {
            let cf = self.cf(TableId(t))?;
            self.db.compact_range_cf(&cf, None::<&[u8]>, None::<&[u8]>);
        }
        Ok(Compaction::Done)
    }

    fn create_table(&self, name: &str) -> Result<()> {
        self.db.create_cf(name, &Options::default())?;
        Ok(())
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        self.db.drop_cf(name)?;
        Ok(())
    }

    fn writer_layout(&self) -> WriterLayout {
        WriterLayout::PerWriter("one column family per writer; shared WAL with group commit")
    }
}

struct RocksReader<'e> {
    engine: &'e RocksEngine,
}

impl Reader for RocksReader<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let cf = self.engine.cf(table)?;
        match self.engine.db.get_pinned_cf(&cf, key)? {
            Some(v) => {
                copy_into(out, &v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn snapshot(&mut self) -> Result<Box<dyn Snapshot + '_>> {
        Ok(Box::new(RocksSnapshot {
            snap: self.engine.db.snapshot(),
            engine: self.engine,
        }))
    }
}

struct RocksSnapshot<'e> {
    snap: rocksdb::SnapshotWithThreadMode<'e, Db>,
    engine: &'e RocksEngine,
}

impl Snapshot for RocksSnapshot<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let cf = self.engine.cf(table)?;
        match self.snap.get_pinned_cf(&cf, key)? {
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
        let cf = self.engine.cf(table)?;
        let mut seen = 0;
        let iter = self
            .snap
            .iterator_cf(&cf, IteratorMode::From(start, Direction::Forward));
        for item in iter.take(n) {
            let (k, v) = item?;
            visit(&k, &v);
            seen += 1;
        }
        Ok(seen)
    }
}
