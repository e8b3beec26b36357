//! sheafdb adapter, compiled with the `sheafdb` cargo feature (on by
//! default). All sheafdb-specific code of the harness is in this file.
//!
//! Layout: one database file `sheaf.db` (WAL segments beside it). Table 0
//! is the table `kv0` in the default column family; table `t >= 1` is the
//! table `kv{t}` in its own column family `kv{t}` (made with
//! `Database::cf_or_create`), so the `seed` suite's concurrent writers each
//! get a CF of their own and commit without waiting for each other's
//! writer lock. Reads take a database-wide snapshot (`Database::begin_read`)
//! and open the table in its CF (`open_table_in`).
//!
//! Durability: durable commits use `Durability::Immediate` (the commit
//! returns once the WAL is fdatasync'ed past it; concurrent commits share
//! one group-commit fdatasync); no-sync commits use `Durability::None` (the
//! record stays in the WAL buffer, no fdatasync).
//!
//! Compaction: `Database::compact`; an `Unsupported` error is reported as
//! N/A rather than as a failure.
//!
//! Options: the library defaults (`Database::create`: 1 GiB page cache,
//! 64 MiB WAL checkpoint trigger, background checkpoints every 30 s).

use std::path::{Path, PathBuf};

use sheafdb::{ColumnFamily, Database, Durability, TableDefinition};

use super::{
    copy_into, table_name, Backup, Compaction, Engine, EngineKind, KvRef, OpenOptions, Reader,
    Result, Snapshot, SyncMode, TableId, WriterLayout,
};

type Def<'a> = TableDefinition<'a, &'static [u8], &'static [u8]>;
type RoTable = sheafdb::ReadOnlyTable<&'static [u8], &'static [u8]>;

/// Copies the value of `$key` in table `$t` into `$out`; `Ok(found)`.
/// A macro so it works with the read-only and the writable table types
/// without naming a trait.
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

/// How the `seed` suite's concurrent writers are laid out in sheafdb.
pub const LAYOUT: &str = "one column family per writer (`cf_or_create`; writer 0 in the \
     default CF); commits on different CFs proceed in parallel and share the WAL's \
     group-commit fdatasync";

/// An open sheafdb database.
pub struct SheafEngine {
    dir: PathBuf,
    db: Database,
    /// `cfs[t]` holds table `t`; `cfs[0]` is the default CF.
    cfs: Vec<ColumnFamily>,
    names: Vec<String>,
}

fn durability(mode: SyncMode) -> Durability {
    match mode {
        SyncMode::Durable => Durability::Immediate,
        SyncMode::NoSync => Durability::None,
        SyncMode::Relaxed => Durability::Eventual,
    }
}

impl SheafEngine {
    /// Creates or opens `dir/sheaf.db` and makes sure every table (and its
    /// column family) exists. Tables that already exist are not written to,
    /// so reopening after a crash only pays for recovery.
    pub fn open(dir: &Path, opts: OpenOptions) -> Result<Self> {
        let db = Database::create(dir.join("sheaf.db"))?;
        let mut cfs = vec![db.default_cf()?];
        for t in 1..opts.tables {
            cfs.push(db.cf_or_create(&table_name(t))?);
        }
        let engine = SheafEngine {
            dir: dir.to_path_buf(),
            db,
            cfs,
            names: (0..opts.tables).map(table_name).collect(),
        };
        for t in 0..opts.tables {
            let exists = {
                let r = engine.db.begin_read()?;
                match r.open_table_in(&engine.cfs[t], engine.def(TableId(t))) {
                    Ok(_) => true,
                    Err(sheafdb::Error::TableNotFound(_)) => false,
                    Err(e) => return Err(e.into()),
                }
            };
            if !exists {
                engine.write(TableId(t), SyncMode::Durable, |tx, def| {
                    tx.open_table(def)?;
                    Ok(())
                })?;
            }
        }
        Ok(engine)
    }

    fn def(&self, table: TableId) -> Def<'_> {
        Def::new(&self.names[table.0])
    }

    /// One write transaction on the CF of `table`.
    fn write(
        &self,
        table: TableId,
        mode: SyncMode,
        f: impl FnOnce(&sheafdb::WriteTransaction, Def<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut tx = self.cfs[table.0].begin_write()?;
        tx.set_durability(durability(mode));
        f(&tx, self.def(table))?;
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
        self.write(table, mode, |tx, def| {
            let mut t = tx.open_table(def)?;
            for &(k, v) in batch {
                t.insert(k, v)?;
            }
            Ok(())
        })
    }

    /// `Table::delete`: the workload does not use the old values, so each
    /// key is removed without a lookup (as fjall's and LMDB's removals do);
    /// the count is settled at commit, in key order.
    fn remove_txn(&self, table: TableId, keys: &[&[u8]], mode: SyncMode) -> Result<()> {
        self.write(table, mode, |tx, def| {
            let mut t = tx.open_table(def)?;
            for &k in keys {
                t.delete(k)?;
            }
            Ok(())
        })
    }

    fn pop_first_txn(&self, table: TableId, mode: SyncMode, key: &mut Vec<u8>) -> Result<bool> {
        let mut found = false;
        self.write(table, mode, |tx, def| {
            if let Some((k, _)) = tx.open_table(def)?.pop_first()? {
                copy_into(key, k.value());
                found = true;
            }
            Ok(())
        })?;
        Ok(found)
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(SheafReader { engine: self }))
    }

    fn len(&self, table: TableId) -> Result<u64> {
        let r = self.db.begin_read()?;
        let t = r.open_table_in(&self.cfs[table.0], self.def(table))?;
        Ok(t.len()?)
    }

    /// `Database::backup_to`: one snapshot of every CF as a compacted,
    /// checkpointed file.
    fn backup(&self, dest: &Path) -> Result<Backup> {
        self.db.backup_to(dest.join("backup.sheaf"))?;
        Ok(Backup::Done)
    }

    fn compact(&mut self) -> Result<Compaction> {
        match self.db.compact() {
            Ok(_) => Ok(Compaction::Done),
            Err(sheafdb::Error::Unsupported(_)) => Ok(Compaction::NotAvailable),
            Err(e) => Err(e.into()),
        }
    }

    /// `Database::create_cf`: returns once the WAL record is fdatasync'ed.
    fn create_table(&self, name: &str) -> Result<()> {
        self.db.create_cf(name)?;
        Ok(())
    }

    /// `Database::drop_cf`: returns once the WAL record is fdatasync'ed.
    fn drop_table(&self, name: &str) -> Result<()> {
        self.db.drop_cf(name)?;
        Ok(())
    }

    fn writer_layout(&self) -> WriterLayout {
        WriterLayout::PerWriter(LAYOUT)
    }

    fn replayed_records(&self) -> Option<u64> {
        Some(self.db.replayed_records())
    }
}

struct SheafReader<'e> {
    engine: &'e SheafEngine,
}

impl Reader for SheafReader<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let r = self.engine.cfs[table.0].begin_read()?;
        let t = r.open_table(self.engine.def(table))?;
        get_into!(t, key, out)
    }

    fn snapshot(&mut self) -> Result<Box<dyn Snapshot + '_>> {
        let r = self.engine.db.begin_read()?;
        Ok(Box::new(SheafSnapshot {
            r,
            engine: self.engine,
            open: None,
        }))
    }
}

struct SheafSnapshot<'e> {
    r: sheafdb::ReadTransaction,
    engine: &'e SheafEngine,
    /// The table opened last, reused while the calls stay on it.
    open: Option<(usize, RoTable)>,
}

impl SheafSnapshot<'_> {
    fn table(&mut self, table: TableId) -> Result<&RoTable> {
        if self.open.as_ref().map(|(t, _)| *t) != Some(table.0) {
            let t = self
                .r
                .open_table_in(&self.engine.cfs[table.0], self.engine.def(table))?;
            self.open = Some((table.0, t));
        }
        Ok(&self.open.as_ref().expect("just opened").1)
    }
}

impl Snapshot for SheafSnapshot<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let t = self.table(table)?;
        get_into!(t, key, out)
    }

    fn range(
        &mut self,
        table: TableId,
        start: &[u8],
        n: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let t = self.table(table)?;
        let mut seen = 0;
        for item in t.range(start..)?.take(n) {
            let (k, v) = item?;
            visit(k.value(), v.value());
            seen += 1;
        }
        Ok(seen)
    }
}
