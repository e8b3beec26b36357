//! Engine adapters: one uniform surface over sheafdb and its peers.
//!
//! Every suite talks to an engine only through [`Engine`], [`Reader`] and
//! [`Snapshot`]; all engine-specific code (durability knobs, table layout,
//! compaction) lives in one file per engine beside this one.
//!
//! Invariants every adapter upholds:
//! - a call with [`SyncMode::Durable`] returns only once the commit is durable
//!   (survives power loss); each adapter documents how it gets there;
//! - `insert_txn` and `remove_txn` are each exactly one transaction (atomic);
//! - tables `0..tables` given at open exist for the adapter's whole life and
//!   are independent (one writer per table in the `seed` suite);
//! - all files of an engine live inside the directory it was opened in, so
//!   [`dir_size_bytes`] measures its footprint (allocated blocks).
//!
//! This module must not know about suites, timing or reporting.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub mod fjall_engine;
pub mod lmdb;
pub mod redb_engine;
#[cfg(feature = "rocksdb")]
pub mod rocksdb_engine;
#[cfg(feature = "sheafdb")]
pub mod sheafdb;
pub mod sqlite;

#[cfg(test)]
mod tests;

/// Error type of the harness: engines differ, so errors are boxed.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// Result type of the harness.
pub type Result<T> = std::result::Result<T, Error>;

/// A borrowed key/value pair as handed to the write calls.
pub type KvRef<'a> = (&'a [u8], &'a [u8]);

/// Index of one of the tables created at open (`0..tables`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableId(pub usize);

/// The table every single-table workload uses.
pub const MAIN_TABLE: TableId = TableId(0);

/// How durable a commit must be before the call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// The commit survives power loss when the call returns.
    Durable,
    /// The engine's cheapest mode that still commits atomically; no promise
    /// about power loss (see each engine's [`EngineKind::durability_note`]).
    NoSync,
    /// Between the two, where the engine has such a mode
    /// ([`EngineKind::relaxed`]): the commit survives a process crash
    /// once the call returns, and a power loss may lose the last moments
    /// of commits (sheafdb `Eventual`, SQLite `synchronous=NORMAL` in WAL
    /// mode). Suites ask for it only from engines that have it.
    Relaxed,
}

impl SyncMode {
    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            SyncMode::Durable => "durable",
            SyncMode::NoSync => "no-sync",
            SyncMode::Relaxed => "relaxed",
        }
    }
}

/// What `compact` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compaction {
    /// The engine compacted its files.
    Done,
    /// The engine has no compaction the harness can call.
    NotAvailable,
}

/// What `backup` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backup {
    /// The engine wrote a consistent copy into the directory given.
    Done,
    /// The engine has no online backup the harness can call.
    NotAvailable,
}

/// How an engine gives several concurrent writers their own space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriterLayout {
    /// Each writer gets its own table/keyspace/CF; the text says which and
    /// whether their commits serialise.
    PerWriter(&'static str),
    /// Not measurable yet; the text says what is missing.
    Unsupported(&'static str),
}

/// The engines the harness knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EngineKind {
    /// sheafdb, this project (behind the `sheafdb` feature).
    Sheafdb,
    /// redb 4.x.
    Redb,
    /// LMDB through heed.
    Lmdb,
    /// SQLite through rusqlite (bundled).
    Sqlite,
    /// fjall 3.x.
    Fjall,
    /// RocksDB through rust-rocksdb (behind the `rocksdb` feature).
    Rocksdb,
}

impl EngineKind {
    /// Every engine, sheafdb first (the column order of the tables).
    pub const ALL: [EngineKind; 6] = [
        EngineKind::Sheafdb,
        EngineKind::Redb,
        EngineKind::Lmdb,
        EngineKind::Sqlite,
        EngineKind::Fjall,
        EngineKind::Rocksdb,
    ];

    /// The name used on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Sheafdb => "sheafdb",
            EngineKind::Redb => "redb",
            EngineKind::Lmdb => "lmdb",
            EngineKind::Sqlite => "sqlite",
            EngineKind::Fjall => "fjall",
            EngineKind::Rocksdb => "rocksdb",
        }
    }

    /// Parses a command-line name (`heed` is accepted for LMDB).
    pub fn parse(name: &str) -> Option<EngineKind> {
        let name = name.trim().to_ascii_lowercase();
        if name == "heed" {
            return Some(EngineKind::Lmdb);
        }
        EngineKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether this binary was built with the engine.
    pub fn compiled_in(self) -> bool {
        let (sheafdb, rocksdb) = (cfg!(feature = "sheafdb"), cfg!(feature = "rocksdb"));
        match self {
            EngineKind::Sheafdb => sheafdb,
            EngineKind::Rocksdb => rocksdb,
            EngineKind::Redb | EngineKind::Lmdb | EngineKind::Sqlite | EngineKind::Fjall => true,
        }
    }

    /// Engines run when `--engines` is not given: every compiled-in one.
    pub fn defaults() -> Vec<EngineKind> {
        EngineKind::ALL
            .into_iter()
            .filter(|k| k.compiled_in())
            .collect()
    }

    /// The engine's [`SyncMode::Relaxed`], if it has one: what it is.
    pub fn relaxed(self) -> Option<&'static str> {
        match self {
            EngineKind::Sheafdb => Some(
                "Durability::Eventual (record written to the OS before commit returns; \
                 fdatasync'ed within the 50 ms sync interval)",
            ),
            EngineKind::Sqlite => Some("WAL mode, PRAGMA synchronous=NORMAL"),
            _ => None,
        }
    }

    /// Exactly how durable and no-sync commits are made, for the output
    /// header and the README.
    pub fn durability_note(self) -> &'static str {
        match self {
            EngineKind::Sheafdb => {
                "durable: Durability::Immediate (commit returns after the WAL is \
                 fdatasync'ed past it; group commit); no-sync: Durability::None (record \
                 left in the WAL buffer, no fdatasync); removals: Table::delete (no \
                 old value read; redb's remove returns it, fjall's and LMDB's do not); \
                 library defaults otherwise"
            }
            EngineKind::Redb => {
                "durable: Durability::Immediate (fsync before commit returns); \
                 no-sync: Durability::None"
            }
            EngineKind::Lmdb => {
                "durable: default env flags (fdatasync of data + meta page on commit); \
                 no-sync: EnvFlags::NO_SYNC | NO_META_SYNC set on the env"
            }
            EngineKind::Sqlite => {
                "WAL mode; durable: PRAGMA synchronous=FULL; no-sync: synchronous=OFF; \
                 table kv(key BLOB PRIMARY KEY, value BLOB) WITHOUT ROWID, prepared statements"
            }
            EngineKind::Fjall => {
                "atomic WriteBatch; durable: PersistMode::SyncData (fdatasync of the journal); \
                 no-sync: PersistMode::Buffer (flushed to the OS)"
            }
            EngineKind::Rocksdb => {
                "atomic WriteBatch; durable: WriteOptions::set_sync(true) (WAL fsync); \
                 no-sync: set_sync(false), WAL on"
            }
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Options fixed when an engine is opened.
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// Number of independent tables to create (`TableId(0..tables)`).
    pub tables: usize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { tables: 1 }
    }
}

/// One open database of some engine.
///
/// Shared between threads by reference; writes from several threads are
/// allowed and serialise however the engine serialises them.
pub trait Engine: Send + Sync {
    /// Which engine this is.
    fn kind(&self) -> EngineKind;
    /// Directory holding all of the engine's files.
    fn dir(&self) -> &Path;
    /// Loads `pairs` in one transaction, committed durably.
    fn bulk_load(&self, table: TableId, pairs: &[KvRef<'_>]) -> Result<()>;
    /// Inserts (or overwrites) `batch` in one transaction.
    fn insert_txn(&self, table: TableId, batch: &[KvRef<'_>], mode: SyncMode) -> Result<()>;
    /// Removes `keys` in one transaction.
    fn remove_txn(&self, table: TableId, keys: &[&[u8]], mode: SyncMode) -> Result<()>;
    /// Removes the entry with the smallest key in one transaction (a
    /// queue's consumer); copies its key into `key` and returns `true`, or
    /// returns `false` when the table is empty.
    fn pop_first_txn(&self, table: TableId, mode: SyncMode, key: &mut Vec<u8>) -> Result<bool>;
    /// A read handle for the calling thread.
    fn reader(&self) -> Result<Box<dyn Reader + '_>>;
    /// Exact number of entries in `table`.
    fn len(&self, table: TableId) -> Result<u64>;
    /// Runs the engine's compaction, if it has one.
    fn compact(&mut self) -> Result<Compaction>;
    /// Writes a consistent copy of the open database into the empty
    /// directory `dest` with the engine's online backup, if it has one
    /// (the database stays open and usable meanwhile).
    fn backup(&self, dest: &Path) -> Result<Backup> {
        let _ = dest;
        Ok(Backup::NotAvailable)
    }
    /// Creates a table (or CF/keyspace) named `name` and commits durably.
    fn create_table(&self, name: &str) -> Result<()>;
    /// Drops the table created by [`Engine::create_table`] and commits durably.
    fn drop_table(&self, name: &str) -> Result<()>;
    /// How concurrent writers get their own space (the `seed` suite).
    fn writer_layout(&self) -> WriterLayout;
    /// WAL records the engine's recovery applied when it was opened, where
    /// the engine reports it (sheafdb); `None` elsewhere.
    fn replayed_records(&self) -> Option<u64> {
        None
    }
    /// Bytes used on disk: the allocated size of the files in [`Engine::dir`].
    fn disk_bytes(&self) -> Result<u64> {
        dir_size_bytes(self.dir())
    }
}

/// A per-thread read handle.
pub trait Reader {
    /// One snapshot point read: copies the value of `key` into `out` and
    /// returns `true`, or returns `false` when absent. Uses the engine's
    /// cheapest way to read one key from a consistent snapshot.
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Opens a read transaction for many reads from one snapshot.
    fn snapshot(&mut self) -> Result<Box<dyn Snapshot + '_>>;
}

/// A read transaction: every call sees the same committed state.
pub trait Snapshot {
    /// Like [`Reader::get`], inside this snapshot.
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Visits up to `n` entries with key `>= start` in key order; returns how
    /// many were visited.
    fn range(
        &mut self,
        table: TableId,
        start: &[u8],
        n: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize>;
}

/// Name of table `t` in engines that name tables.
pub fn table_name(t: usize) -> String {
    format!("kv{t}")
}

/// Copies `src` into the reusable buffer `out`.
pub fn copy_into(out: &mut Vec<u8>, src: &[u8]) {
    out.clear();
    out.extend_from_slice(src);
}

/// Opens `kind` in `dir` (created if missing).
pub fn open(kind: EngineKind, dir: &Path, opts: OpenOptions) -> Result<Box<dyn Engine>> {
    assert!(opts.tables >= 1, "an engine needs at least one table");
    std::fs::create_dir_all(dir)?;
    let engine: Box<dyn Engine> = match kind {
        EngineKind::Redb => Box::new(redb_engine::RedbEngine::open(dir, opts)?),
        EngineKind::Lmdb => Box::new(lmdb::LmdbEngine::open(dir, opts)?),
        EngineKind::Sqlite => Box::new(sqlite::SqliteEngine::open(dir, opts)?),
        EngineKind::Fjall => Box::new(fjall_engine::FjallEngine::open(dir, opts)?),
        #[cfg(feature = "sheafdb")]
        EngineKind::Sheafdb => Box::new(sheafdb::SheafEngine::open(dir, opts)?),
        #[cfg(feature = "rocksdb")]
        EngineKind::Rocksdb => Box::new(rocksdb_engine::RocksEngine::open(dir, opts)?),
        #[allow(unreachable_patterns)]
        other => return Err(not_compiled(other)),
    };
    Ok(engine)
}

fn not_compiled(kind: EngineKind) -> Error {
    format!(
        "engine {kind} is not compiled in; rebuild with `--features {}`",
        kind.name()
    )
    .into()
}

/// Bytes allocated on disk (`st_blocks` × 512) by all regular files under
/// `dir`, recursively. Allocated rather than apparent size, so sparse
/// preallocation (e.g. a journal made with `set_len`) is not counted as used.
pub fn dir_size_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0u64;
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total += meta.blocks() * 512;
            }
        }
    }
    Ok(total)
}
