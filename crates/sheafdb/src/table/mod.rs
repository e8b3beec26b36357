//! The typed layer: key/value traits and encodings ([`types`]), the
//! table handles built on them (`access`, re-exported here), and the same
//! encodings handled at run time by type name ([`dynamic`]).

pub(crate) mod access;
mod cursor;
pub mod dynamic;
mod entry;
mod extract;
mod multimap;
mod readable;
pub mod types;

pub use access::{AccessGuard, KeyGuard, Range, ReadOnlyTable, Table};
pub use cursor::{ReadOnlyCursor, TableCursor};
pub use entry::{Entry, MutInPlaceValue, OccupiedEntry, ReservedValue, VacantEntry};
pub use extract::ExtractIf;
pub use multimap::{
    MultimapRange, MultimapTable, MultimapTableDefinition, MultimapValues, ReadOnlyMultimapTable,
};
pub use readable::{ReadableTable, TableStats};
