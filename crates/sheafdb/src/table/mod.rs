//! The typed layer: key/value traits and encodings ([`types`]) and the
//! table handles built on them ([`access`]).

pub mod access;
pub mod types;

pub use access::{AccessGuard, KeyGuard, Range, ReadOnlyTable, Table};
