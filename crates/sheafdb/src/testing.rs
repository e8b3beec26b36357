//! Tools for tests, of sheafdb and of applications built on it: the
//! fault-injecting storage ([`crate::storage::sim`]) lives in `storage`;
//! this module gives access to the pieces of the file format and the WAL
//! that tests and benchmarks need to craft damaged files or measure the
//! log on its own. Not part of the stable API: these follow the format.
//!
//! Owns nothing; only re-exports.

pub use crate::format::superblock::{Superblock, WalMark, SLOT_LEN};
pub use crate::types::{CfId, Lsn, PageId};
pub use crate::wal::{open as open_wal, ReplaySummary, Wal, WalOptions};
