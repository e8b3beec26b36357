//! The typed layer: key/value traits and encodings ([`types`]), the
//! table handles built on them (`access`, re-exported here), and the same
//! encodings handled at run time by type name ([`dynamic`]).

pub(crate) mod access;
pub mod dynamic;
pub mod types;

pub use access::{AccessGuard, KeyGuard, Range, ReadOnlyTable, Table};
