//! The one error type of the crate (DESIGN §10).
//!
//! Variants are things a caller can act on. File contents never cause a
//! panic: every decoder returns `Error::Corrupted` naming what and where.

use std::fmt;
use std::io;

use crate::types::{CfId, PageId};

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where a corruption was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A page of the data file.
    Page(PageId),
    /// A superblock slot (0 or 1).
    Superblock(u8),
    /// A byte offset in a named file (WAL, etc.).
    File {
        /// File name.
        name: String,
        /// Byte offset.
        offset: u64,
    },
    /// Somewhere not tied to one page (e.g. catalog cross-checks).
    Other(String),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Page(p) => write!(f, "page {p}"),
            Location::Superblock(s) => write!(f, "superblock slot {s}"),
            Location::File { name, offset } => write!(f, "{name} at byte {offset}"),
            Location::Other(s) => f.write_str(s),
        }
    }
}

/// Every error sheafdb returns.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The operating system reported an I/O error.
    Io(io::Error),
    /// Stored bytes failed validation. `what` says which check failed.
    Corrupted {
        /// Which check failed.
        what: String,
        /// Where.
        location: Location,
    },
    /// Another handle (in this or another process) holds the file lock.
    DatabaseAlreadyOpen,
    /// The file is not a sheafdb database (bad magic) or has an unknown format version.
    NotADatabase(String),
    /// A table was opened with key/value types different from those it was created with.
    TableTypeMismatch {
        /// The table.
        table: String,
        /// Types it was created with.
        stored: String,
        /// Types it was opened with.
        requested: String,
    },
    /// No table of that name exists.
    TableNotFound(String),
    /// A table of that name already exists (rename target).
    TableExists(String),
    /// The table is already open in this transaction.
    TableAlreadyOpen(String),
    /// No column family of that name or id.
    CfNotFound(String),
    /// A column family of that name already exists.
    CfExists(String),
    /// A key longer than the page size allows.
    KeyTooLarge {
        /// Length given.
        len: usize,
        /// Largest allowed.
        max: usize,
    },
    /// A value longer than the format allows.
    ValueTooLarge {
        /// Length given.
        len: usize,
        /// Largest allowed.
        max: usize,
    },
    /// A previous write or sync failed; the database must be reopened.
    Poisoned,
    /// A write was attempted through a read-only handle.
    ReadOnly,
    /// An argument was invalid (bad page size, bad name, ...).
    InvalidArgument(String),
    /// A feature that is not implemented yet; the README lists these.
    Unsupported(&'static str),
}

impl Error {
    /// Shorthand for a corruption found on `page`.
    pub fn corrupted_page(page: PageId, what: impl Into<String>) -> Error {
        Error::Corrupted {
            what: what.into(),
            location: Location::Page(page),
        }
    }

    /// Shorthand for a corruption not tied to one page.
    pub fn corrupted(what: impl Into<String>, location: impl Into<String>) -> Error {
        Error::Corrupted {
            what: what.into(),
            location: Location::Other(location.into()),
        }
    }

    /// True for `Error::Corrupted`.
    pub fn is_corrupted(&self) -> bool {
        matches!(self, Error::Corrupted { .. })
    }

    /// A column family id that no longer exists.
    pub fn cf_not_found(cf: CfId) -> Error {
        Error::CfNotFound(format!("cf id {cf}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Corrupted { what, location } => {
                write!(f, "database corrupted: {what} ({location})")
            }
            Error::DatabaseAlreadyOpen => f.write_str("database is already open elsewhere"),
            Error::NotADatabase(s) => write!(f, "not a sheafdb database: {s}"),
            Error::TableTypeMismatch {
                table,
                stored,
                requested,
            } => write!(
                f,
                "table {table:?} stores {stored} but was opened as {requested}"
            ),
            Error::TableNotFound(t) => write!(f, "table {t:?} not found"),
            Error::TableExists(t) => write!(f, "table {t:?} already exists"),
            Error::TableAlreadyOpen(t) => write!(f, "table {t:?} is already open"),
            Error::CfNotFound(c) => write!(f, "column family {c:?} not found"),
            Error::CfExists(c) => write!(f, "column family {c:?} already exists"),
            Error::KeyTooLarge { len, max } => {
                write!(f, "key of {len} bytes exceeds the maximum of {max}")
            }
            Error::ValueTooLarge { len, max } => {
                write!(f, "value of {len} bytes exceeds the maximum of {max}")
            }
            Error::Poisoned => {
                f.write_str("database poisoned by an earlier write or sync failure; reopen it")
            }
            Error::ReadOnly => f.write_str("database is read-only"),
            Error::InvalidArgument(s) => write!(f, "invalid argument: {s}"),
            Error::Unsupported(s) => write!(f, "not supported: {s}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}
