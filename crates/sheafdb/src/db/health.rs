//! Whether the database may still be used: poisoning and closing.
//!
//! Owns: [`Health`], the poison flag and its first cause, the closed flag
//! and the close gate.
//!
//! Invariants: once poisoned, always poisoned (until reopened), and every
//! `Poisoned` error carries the first cause; once closed, every use gets
//! `DatabaseClosed`; every commit that passed `enter_commit` returns
//! before `mark_closed` does (the close gate), so close's final
//! checkpoint covers it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::lock_rank::{ranks, RankedRead, RankedRwLock};

use crate::error::{Error, PoisonCause, Result};

/// Poisoning and closing of one open database.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// Set by the first failure after which memory and the files may
    /// disagree; `poison_cause` holds that failure.
    poisoned: AtomicBool,
    poison_cause: OnceLock<PoisonCause>,
    /// Set by `Database::close`/drop; every later use gets
    /// `Error::DatabaseClosed`.
    closed: AtomicBool,
    /// Read-held by every commit and CF create/drop from its "still open?"
    /// check until it returns; write-held by close while it sets `closed`.
    /// So every commit that passed the check is covered by close's final
    /// checkpoint and sync, and none starts after it.
    close_gate: RankedRwLock<(), { ranks::CLOSE_GATE }>,
    /// Opened read-only: every write gets `Error::ReadOnly`.
    read_only: bool,
}

impl Health {
    /// The health of a database opened read-only (`true`) or read-write.
    pub fn new(read_only: bool) -> Health {
        Health {
            read_only,
            ..Health::default()
        }
    }

    /// True if the database was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Errors if the database refuses writes (opened read-only, or
    /// poisoned).
    pub fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned(self.poison_cause()));
        }
        Ok(())
    }

    /// Errors if the database was closed (reads still work when poisoned).
    pub fn check_not_closed(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::DatabaseClosed);
        }
        Ok(())
    }

    /// True once close began (no commit starts after it).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Errors if the database was closed, or refuses writes.
    pub fn check_open(&self) -> Result<()> {
        self.check_not_closed()?;
        self.check_writable()
    }

    /// For a commit or a CF change: holds off close until the caller is
    /// done, after checking the database is open and writable.
    pub fn enter_commit(&self) -> Result<RankedRead<'_, ()>> {
        let gate = self.close_gate.read();
        self.check_open()?;
        Ok(gate)
    }

    /// Marks the database unusable for writes until reopened; the first
    /// cause is kept for every later `Error::Poisoned`.
    pub fn poison(&self, cause: &Error) -> PoisonCause {
        self.poison_with(PoisonCause::of(cause))
    }

    /// [`Health::poison`] with a cause that is not an `Error`. Returns the
    /// first cause, which is `cause` only if nothing poisoned the database
    /// before.
    pub fn poison_with(&self, cause: PoisonCause) -> PoisonCause {
        let first = self.poison_cause.get_or_init(|| cause).clone();
        self.poisoned.store(true, Ordering::Release);
        first
    }

    /// The first failure that poisoned the database.
    pub fn poison_cause(&self) -> PoisonCause {
        self.poison_cause
            .get()
            .cloned()
            .unwrap_or_else(|| PoisonCause::new("unknown"))
    }

    /// Sets `closed` once no commit is in flight; false if it was set
    /// already.
    pub fn mark_closed(&self) -> bool {
        let _gate = self.close_gate.write();
        !self.closed.swap(true, Ordering::AcqRel)
    }
}
