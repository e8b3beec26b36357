//! sheafdb: an embedded, transactional, single-file key-value database.
//!
//! One file holds column families, each with many typed tables (ordered
//! maps). Readers see consistent snapshots and never block; writers use
//! copy-on-write B+trees; commits are made durable by checkpoints.
//!
//! ```no_run
//! use sheafdb::{Database, TableDefinition};
//! const USERS: TableDefinition<&str, u64> = TableDefinition::new("users");
//! # fn main() -> sheafdb::Result<()> {
//! let db = Database::create("app.sheaf")?;
//! let tx = db.begin_write()?;
//! tx.open_table(USERS)?.insert("alice", 30)?;
//! tx.commit()?;
//! let rx = db.begin_read()?;
//! assert_eq!(rx.open_table(USERS)?.get("alice")?.unwrap().value(), 30);
//! # Ok(()) }
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub(crate) mod btree;
pub(crate) mod buffer;
pub(crate) mod db;
pub(crate) mod error;
pub(crate) mod format;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod lock_rank;
pub(crate) mod pager;
pub mod storage;
pub mod table;
pub mod testing;
pub(crate) mod txn;
pub(crate) mod types;
pub(crate) mod wal;

pub use db::{
    BackupProgress, BackupReport, Builder, CfStats, ColumnFamily, CompactReport, Database,
    DatabaseStats, FileInfo, IntegrityReport, MemoryStats, WalDamage, DEFAULT_DIRECT_COMMIT_BYTES,
    MAX_CF_NAME, MAX_EXTENT_BYTES, MIN_WAL_RECORD_BYTES,
};
pub use db::{
    MultiWriteTransaction, ReadTransaction, Savepoint, TableInfo, UntypedReadTable, UntypedTable,
    WriteTransaction,
};
pub use error::{Error, Location, PoisonCause, Result};
pub use table::types::{Key, KeyPart, TableDefinition, Value};
pub use table::{
    AccessGuard, Entry, ExtractIf, KeyGuard, MultimapRange, MultimapTable, MultimapTableDefinition,
    MultimapValues, MutInPlaceValue, OccupiedEntry, Range, ReadOnlyCursor, ReadOnlyMultimapTable,
    ReadOnlyTable, ReadableTable, ReservedValue, Table, TableCursor, TableStats, VacantEntry,
};
pub use txn::{Durability, MAX_TABLE_NAME};
