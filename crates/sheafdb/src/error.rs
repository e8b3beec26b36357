//! The one error type of the crate (design.md §10).
//!
//! Variants are things a caller can act on. File contents never cause a
//! panic: every decoder returns `Error::Corrupted` naming what and where.

use std::fmt;
use std::io;
use std::sync::Arc;

use crate::types::{CfId, PageId};

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the message of a refused open of a salvageable WAL ends
/// ([`Error::is_salvageable_wal_damage`]).
pub(crate) const WAL_SALVAGE_HINT: &str =
    "(the `salvage_damaged_wal` option opens the log up to the damage, losing them)";

/// How the message of an open refused for a missing WAL ends
/// ([`Error::is_missing_wal`]).
pub(crate) const WAL_MISSING_HINT: &str =
    "(Builder::accept_missing_wal(true) opens the database as of that checkpoint)";

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

/// Why a database was poisoned: the first failure, kept for every later
/// `Error::Poisoned`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoisonCause {
    message: Arc<str>,
    io_kind: Option<io::ErrorKind>,
}

impl PoisonCause {
    /// The cause `e` describes (an `Error::Poisoned` passes its own on).
    pub fn of(e: &Error) -> PoisonCause {
        match e {
            Error::Poisoned(cause) => cause.clone(),
            Error::Io(io) => PoisonCause {
                message: io.to_string().into(),
                io_kind: Some(io.kind()),
            },
            other => PoisonCause {
                message: other.to_string().into(),
                io_kind: None,
            },
        }
    }

    /// An I/O failure while doing `what`.
    pub fn io(what: &str, e: &io::Error) -> PoisonCause {
        PoisonCause {
            message: format!("{what}: {e}").into(),
            io_kind: Some(e.kind()),
        }
    }

    /// A cause that is not an error value (a panic, say).
    pub fn new(message: impl Into<String>) -> PoisonCause {
        PoisonCause {
            message: message.into().into(),
            io_kind: None,
        }
    }

    /// What failed.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The kind of the I/O error that caused it, if it was one (for
    /// example `StorageFull` for a full disk).
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        self.io_kind
    }
}

impl fmt::Display for PoisonCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
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
    /// An earlier failure left memory and the files possibly disagreeing
    /// (a failed write or sync, a failed checkpoint, a panic mid-commit);
    /// the database refuses writes until it is reopened. Carries the
    /// original cause.
    Poisoned(PoisonCause),
    /// The database was closed (or dropped); this handle outlived it.
    DatabaseClosed,
    /// An operation of this write transaction failed part-way, so its
    /// changes may be incomplete: it can only be aborted (or dropped).
    TransactionFailed(String),
    /// The call would wait for a lock the calling thread itself holds
    /// (for example a second write transaction on a CF from the thread
    /// that holds its writer), so it fails instead of hanging.
    WouldDeadlock(String),
    /// `try_begin_write`: another write transaction holds the CF's writer.
    WriterBusy(String),
    /// A handle (column family) of another open database was passed.
    ForeignHandle(String),
    /// The WAL beside the data file belongs to another database (or to
    /// a newer state of this one than the data file holds): nothing was
    /// changed.
    WalMismatch(String),
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

    /// True if an open refused a WAL damaged before its end (proven
    /// damage, not a torn tail) that [`crate::Builder::salvage_damaged_wal`]
    /// would open up to the damage, losing the commits after it. Tools
    /// test this rather than the message's wording (the CLI points to
    /// `sheaf salvage-wal` when it holds).
    pub fn is_salvageable_wal_damage(&self) -> bool {
        matches!(self, Error::Corrupted { what, .. } if what.ends_with(WAL_SALVAGE_HINT))
    }

    /// True for an open refused because the data file's last checkpoint
    /// requires a WAL and none is beside it (rule O13), which
    /// [`crate::Builder::accept_missing_wal`] would open as of that
    /// checkpoint. Tools test this rather than the message's wording (the
    /// CLI points to `sheaf accept-missing-wal` when it holds).
    pub fn is_missing_wal(&self) -> bool {
        matches!(self, Error::WalMismatch(what) if what.ends_with(WAL_MISSING_HINT))
    }

    /// The error to hand the other waiters of a failure: the same error
    /// for every variant that can be copied, else `Poisoned` with this
    /// error as its cause (an I/O error has one owner).
    pub fn clone_for_waiters(&self) -> Error {
        Error::Poisoned(PoisonCause::of(self))
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
            Error::Poisoned(cause) => write!(
                f,
                "database refuses writes after an earlier failure (reopen it); the cause: {cause}"
            ),
            Error::DatabaseClosed => f.write_str("the database was closed; reopen it"),
            Error::TransactionFailed(cause) => write!(
                f,
                "an operation of this write transaction failed ({cause}); it can only be aborted"
            ),
            Error::WouldDeadlock(what) => write!(f, "would wait on this thread's own lock: {what}"),
            Error::WriterBusy(cf) => {
                write!(
                    f,
                    "column family {cf:?} has a write transaction in progress"
                )
            }
            Error::ForeignHandle(what) => {
                write!(f, "{what} belongs to another open database")
            }
            Error::WalMismatch(what) => {
                write!(f, "the WAL does not belong to this data file: {what}")
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
