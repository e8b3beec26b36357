//! sheafdb adapter — written against the planned (redb-like) API and compiled
//! only with the `sheafdb` cargo feature. All sheafdb-specific code of the
//! harness is in this file.
//!
//! Layout: one database file `sheaf.db` (WAL beside it); table `t` is the
//! table `kv{t}` in the default column family. Concurrent writers per column
//! family are not wired yet: `writer_layout` reports the marker the `seed`
//! suite prints instead of numbers ("needs sheafdb column families"). When
//! CFs land, give each writer its own CF (`db.cf_or_create(name)?`, then
//! `cf.begin_write()` / `cf.begin_read()`) and switch `writer_layout` to
//! `PerWriter`.
//!
//! Durability: durable commits use `Durability::Immediate` (commit returns
//! once the WAL is synced past it, shared group-commit fsync); no-sync
//! commits use `Durability::None` (record left in the WAL buffer).
//!
//! Compaction: `Database::compact`; an `Unsupported` error is reported as
//! N/A rather than as a failure.

use std::path::{Path, PathBuf};

use sheafdb::{Database, Durability, TableDefinition};

use super::{
    copy_into, table_name, Compaction, Engine, EngineKind, KvRef, OpenOptions, Reader, Result,
    Snapshot, SyncMode, TableId, WriterLayout,
};

type Def<'a> = TableDefinition<'a, &'static [u8], &'static [u8]>;

/// Copies the value of `$key` in table `$t` into `$out`; `Ok(found)`.
/// A macro so it works with whatever table type sheafdb returns (read-only
/// or writable) without naming a trait.
macro_rules! get_into {
    ($t:expr, $key:expr, $out:expr) => {
        match $t.get($key)? {
            Some(guard) => {
                copy_into($out, guard.value());
                Ok(true)
            }
            None => Ok(false),
        }
    };
}

/// The marker the `seed` suite prints for rows that need column families.
pub const NEEDS_CFS: &str = "needs sheafdb column families";

/// An open sheafdb database.
pub struct SheafEngine {
    dir: PathBuf,
    db: Database,
    names: Vec<String>,
}

fn durability(mode: SyncMode) -> Durability {
    match mode {
        SyncMode::Durable => Durability::Immediate,
        SyncMode::NoSync => Durability::None,
    }
}

impl SheafEngine {
    /// Creates or opens `dir/sheaf.db` and makes sure every table exists.
    pub fn open(dir: &Path, opts: OpenOptions) -> Result<Self> {
        let db = Database::create(dir.join("sheaf.db"))?;
        let engine = SheafEngine {
            dir: dir.to_path_buf(),
            db,
            names: (0..opts.tables).map(table_name).collect(),
        };
        engine.write(SyncMode::Durable, |tx| {
            for name in &engine.names {
                tx.open_table(Def::new(name))?;
            }
            Ok(())
        })?;
        Ok(engine)
    }

    fn def(&self, table: TableId) -> Def<'_> {
        Def::new(&self.names[table.0])
    }

    fn write(
        &self,
        mode: SyncMode,
        f: impl FnOnce(&sheafdb::WriteTransaction) -> Result<()>,
    ) -> Result<()> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(durability(mode));
        f(&tx)?;
        tx.commit()?;
        Ok(())
    }
}

impl Engine for SheafEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Sheafdb
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

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(SheafReader { engine: self }))
    }

    fn len(&self, table: TableId) -> Result<u64> {
        let r = self.db.begin_read()?;
        let t = r.open_table(self.def(table))?;
        Ok(t.len()?)
    }

    fn compact(&mut self) -> Result<Compaction> {
        match self.db.compact() {
            Ok(_) => Ok(Compaction::Done),
            Err(sheafdb::Error::Unsupported(_)) => Ok(Compaction::NotAvailable),
            Err(e) => Err(e.into()),
        }
    }

    fn create_table(&self, _name: &str) -> Result<()> {
        Err(NEEDS_CFS.into())
    }

    fn drop_table(&self, _name: &str) -> Result<()> {
        Err(NEEDS_CFS.into())
    }

    fn writer_layout(&self) -> WriterLayout {
        WriterLayout::Unsupported(NEEDS_CFS)
    }
}

struct SheafReader<'e> {
    engine: &'e SheafEngine,
}

impl Reader for SheafReader<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let r = self.engine.db.begin_read()?;
        let t = r.open_table(self.engine.def(table))?;
        get_into!(t, key, out)
    }

    fn snapshot(&mut self) -> Result<Box<dyn Snapshot + '_>> {
        let r = self.engine.db.begin_read()?;
        Ok(Box::new(SheafSnapshot {
            r,
            engine: self.engine,
        }))
    }
}

struct SheafSnapshot<'e> {
    r: sheafdb::ReadTransaction,
    engine: &'e SheafEngine,
}

impl Snapshot for SheafSnapshot<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        // Opening a table inside a read transaction is expected to be cheap
        // (a catalog lookup); if it is not, cache the tables here.
        let t = self.r.open_table(self.engine.def(table))?;
        get_into!(t, key, out)
    }

    fn range(
        &mut self,
        table: TableId,
        start: &[u8],
        n: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let t = self.r.open_table(self.engine.def(table))?;
        let mut seen = 0;
        for item in t.range(start..)?.take(n) {
            let (k, v) = item?;
            visit(k.value(), v.value());
            seen += 1;
        }
        Ok(seen)
    }
}
