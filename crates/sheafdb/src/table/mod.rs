//! The typed layer: key/value traits and encodings ([`types`]) and the
//! table handles built on them (`access`, re-exported here).

pub(crate) mod access;
pub mod types;

pub use access::{AccessGuard, KeyGuard, Range, ReadOnlyTable, Table};
