//! LMDB adapter (through heed).
//!
//! Layout: one environment in `dir/lmdb/` (`data.mdb` + `lock.mdb`); table
//! `t` is the named database `kv{t}`. LMDB has one writer per environment, so
//! writers on different named databases serialise on the write lock.
//!
//! Durability: durable commits run with LMDB's default env flags, under which
//! `mdb_txn_commit` fdatasyncs the data pages and then the meta page before it
//! returns. No-sync commits run with `EnvFlags::NO_SYNC | NO_META_SYNC` set on
//! the env (commits reach the OS page cache, no fsync). The flags are flipped
//! only while this adapter holds the single write transaction, so no other
//! commit can observe the switch half-way.
//!
//! Compaction: `mdb_env_copy2` with `MDB_CP_COMPACT` (heed `copy_to_path` with
//! `CompactionOption::Enabled`) into a new file, which replaces `data.mdb`
//! after the env is closed; then the env is reopened.
//!
//! This is one of the two modules of the crate that use `unsafe` (heed marks
//! env opening and flag changes unsafe); each site has a SAFETY comment.
#![allow(unsafe_code)]

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use heed::types::Bytes;
use heed::{CommitOrAbort, CompactionOption, Database, Env, EnvFlags, EnvOpenOptions, FlagSetMode};

use super::{
    copy_into, table_name, Backup, Compaction, Engine, EngineKind, KvRef, OpenOptions, Reader,
    Result, Snapshot, SyncMode, TableId, WriterLayout,
};

type Db = Database<'static, Bytes, Bytes>;

/// Virtual size of the memory map; the file grows only as pages are used.
const MAP_SIZE_BYTES: usize = 64 << 30;

/// An open LMDB environment.
pub struct LmdbEngine {
    dir: PathBuf,
    env: Option<Env>,
    dbs: Vec<Db>,
    tables: usize,
    /// Whether NO_SYNC | NO_META_SYNC is currently set on the env.
    no_sync: AtomicBool,
}

fn env_dir(dir: &Path) -> PathBuf {
    dir.join("lmdb")
}

fn open_env(path: &Path) -> Result<Env> {
    std::fs::create_dir_all(path)?;
    let mut opts = EnvOpenOptions::new();
    opts.map_size(MAP_SIZE_BYTES).max_dbs(4096).max_readers(512);
    // SAFETY: the environment directory is private to this adapter (a fresh
    // bench directory); no other code maps or modifies its files, and we never
    // open it twice at once (compaction closes it before reopening).
    Ok(unsafe { opts.open(path)? })
}

fn create_db(env: &Env, name: &str) -> Result<Db> {
    let wtxn = env.write_txn()?;
    let db = env
        .create_databases_and_commit(wtxn, |opener, wtxn| -> Result<_> {
            let db = opener.create_database::<Bytes, Bytes>(wtxn, Some(name))?;
            Ok(CommitOrAbort::<_, ()>::Commit(db))
        })?
        .unwrap_commit();
    Ok(db)
}

impl LmdbEngine {
    /// Opens (or creates) the environment and every named database.
    pub fn open(dir: &Path, opts: OpenOptions) -> Result<Self> {
        let env = open_env(&env_dir(dir))?;
        let dbs = (0..opts.tables)
            .map(|t| create_db(&env, &table_name(t)))
            .collect::<Result<Vec<_>>>()?;
        Ok(LmdbEngine {
            dir: dir.to_path_buf(),
            env: Some(env),
            dbs,
            tables: opts.tables,
            no_sync: AtomicBool::new(false),
        })
    }

    fn env(&self) -> &Env {
        self.env
            .as_ref()
            .expect("env is only absent during compaction")
    }

    /// Makes the env flags match `mode`. Must be called while holding the
    /// write transaction, which makes this thread the only one committing.
    fn set_mode_locked(&self, mode: SyncMode) -> Result<()> {
        // No mode between the two (`EngineKind::relaxed` is `None`).
        let want_no_sync = mode != SyncMode::Durable;
        if self.no_sync.load(Ordering::Acquire) == want_no_sync {
            return Ok(());
        }
        let flag_mode = if want_no_sync {
            FlagSetMode::Enable
        } else {
            FlagSetMode::Disable
        };
        // SAFETY: LMDB requires one caller of mdb_env_set_flags at a time; the
        // caller holds the env's only write transaction, and every call of
        // this function happens under it. NO_SYNC only weakens durability,
        // which is exactly what no-sync rows measure.
        unsafe {
            self.env()
                .set_flags(EnvFlags::NO_SYNC | EnvFlags::NO_META_SYNC, flag_mode)?;
        }
        self.no_sync.store(want_no_sync, Ordering::Release);
        Ok(())
    }

    fn write(
        &self,
        mode: SyncMode,
        f: impl FnOnce(&mut heed::RwTxn<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut wtxn = self.env().write_txn()?;
        self.set_mode_locked(mode)?;
        f(&mut wtxn)?;
        wtxn.commit()?;
        Ok(())
    }

    fn compact_file(&mut self) -> Result<()> {
        let path = env_dir(&self.dir);
        let tmp = self.dir.join("lmdb-compact.mdb");
        self.env()
            .copy_to_path(&tmp, CompactionOption::Enabled)?
            .sync_all()?;
        self.dbs.clear();
        let env = self.env.take().expect("env present");
        env.prepare_for_closing().wait();
        std::fs::rename(&tmp, path.join("data.mdb"))?;
        let env = open_env(&path)?;
        self.dbs = (0..self.tables)
            .map(|t| create_db(&env, &table_name(t)))
            .collect::<Result<Vec<_>>>()?;
        self.env = Some(env);
        self.no_sync.store(false, Ordering::Release);
        Ok(())
    }
}

impl LmdbEngine {
    /// `mdb_env_copy2` with `MDB_CP_COMPACT` into `dest/data.mdb` while
    /// the env stays open (a read transaction's snapshot).
    fn backup_to(&self, dest: &Path) -> Result<()> {
        self.env()
            .copy_to_path(dest.join("data.mdb"), CompactionOption::Enabled)?
            .sync_all()?;
        Ok(())
    }
}

impl Engine for LmdbEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Lmdb
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn bulk_load(&self, table: TableId, pairs: &[KvRef<'_>]) -> Result<()> {
        self.insert_txn(table, pairs, SyncMode::Durable)
    }

    fn insert_txn(&self, table: TableId, batch: &[KvRef<'_>], mode: SyncMode) -> Result<()> {
        let db = self.dbs[table.0];
        self.write(mode, |wtxn| {
            for &(k, v) in batch {
                db.put(wtxn, k, v)?;
            }
            Ok(())
        })
    }

    fn remove_txn(&self, table: TableId, keys: &[&[u8]], mode: SyncMode) -> Result<()> {
        let db = self.dbs[table.0];
        self.write(mode, |wtxn| {
            for &k in keys {
                db.delete(wtxn, k)?;
            }
            Ok(())
        })
    }

    fn pop_first_txn(&self, table: TableId, mode: SyncMode, key: &mut Vec<u8>) -> Result<bool> {
        let db = self.dbs[table.0];
        let mut found = false;
        self.write(mode, |wtxn| {
            if let Some((k, _)) = db.first(wtxn)? {
                copy_into(key, k);
                found = true;
            }
            if found {
                db.delete(wtxn, key)?;
            }
            Ok(())
        })?;
        Ok(found)
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(LmdbReader { engine: self }))
    }

    fn len(&self, table: TableId) -> Result<u64> {
        let rtxn = self.env().read_txn()?;
        Ok(self.dbs[table.0].len(&rtxn)?)
    }

    fn backup(&self, dest: &Path) -> Result<Backup> {
        self.backup_to(dest)?;
        Ok(Backup::Done)
    }

    fn compact(&mut self) -> Result<Compaction> {
        self.compact_file()?;
        Ok(Compaction::Done)
    }

    fn create_table(&self, name: &str) -> Result<()> {
        let env = self.env();
        let wtxn = env.write_txn()?;
        self.set_mode_locked(SyncMode::Durable)?;
        env.create_databases_and_commit(wtxn, |opener, wtxn| -> Result<_> {
            opener.create_database::<Bytes, Bytes>(wtxn, Some(name))?;
            Ok(CommitOrAbort::<(), ()>::Commit(()))
        })?;
        Ok(())
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        let env = self.env();
        let wtxn = env.write_txn()?;
        self.set_mode_locked(SyncMode::Durable)?;
        env.create_databases_and_commit(wtxn, |opener, wtxn| -> Result<_> {
            let db = opener.create_database::<Bytes, Bytes>(wtxn, Some(name))?;
            // SAFETY: `db` is a handle opened in this transaction for this
            // table only; it is consumed here and no other handle to the
            // table is kept anywhere.
            unsafe { db.remove(wtxn)? };
            Ok(CommitOrAbort::<(), ()>::Commit(()))
        })?;
        Ok(())
    }

    fn writer_layout(&self) -> WriterLayout {
        WriterLayout::PerWriter(
            "one named database per writer in one env; the env write lock serialises writers",
        )
    }
}

struct LmdbReader<'e> {
    engine: &'e LmdbEngine,
}

impl Reader for LmdbReader<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let rtxn = self.engine.env().read_txn()?;
        read_into(&self.engine.dbs[table.0], &rtxn, key, out)
    }

    fn snapshot(&mut self) -> Result<Box<dyn Snapshot + '_>> {
        let rtxn = self.engine.env().read_txn()?;
        Ok(Box::new(LmdbSnapshot {
            rtxn,
            dbs: &self.engine.dbs,
        }))
    }
}

fn read_into(db: &Db, rtxn: &heed::RoTxn<'_>, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
    match db.get(rtxn, key)? {
        Some(v) => {
            copy_into(out, v);
            Ok(true)
        }
        None => Ok(false),
    }
}

struct LmdbSnapshot<'e> {
    rtxn: heed::RoTxn<'e, heed::WithTls>,
    dbs: &'e [Db],
}

impl Snapshot for LmdbSnapshot<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        read_into(&self.dbs[table.0], &self.rtxn, key, out)
    }

    fn range(
        &mut self,
        table: TableId,
        start: &[u8],
        n: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let bounds: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Included(start), Bound::Unbounded);
        let mut seen = 0;
        for item in self.dbs[table.0].range(&self.rtxn, &bounds)?.take(n) {
            let (k, v) = item?;
            visit(k, v);
            seen += 1;
        }
        Ok(seen)
    }
}
