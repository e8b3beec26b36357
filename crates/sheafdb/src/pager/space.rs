//! The page space: what page stores need from the database, and no more.
//!
//! Owns: [`PageSpace`], the narrow handle transactions, snapshots and the
//! checkpointer read and allocate pages through: the pager, the file's
//! extent map and the extent policy of new CFs. Holding it keeps the file
//! readable (the pager's storage) without reaching the rest of the
//! database.
//!
//! Invariants: one `PageSpace` per open database; its extent map is the
//! only record of which CF owns which part of the file (the lock on it is
//! a leaf: nothing else is taken while it is held, see ARCHITECTURE.md).

use parking_lot::Mutex;

use super::alloc::{ExtentMap, ExtentPolicy};
use super::Pager;

/// The pager, extents and extent policy of one open database.
#[derive(Debug)]
pub struct PageSpace {
    /// Page runs between memory and the data file.
    pub pager: Pager,
    /// Which CF owns which extent; free space at file level.
    pub extents: Mutex<ExtentMap>,
    /// Extent sizes for user CFs.
    pub policy: ExtentPolicy,
    /// The database's file lock. Here, not with the database, because
    /// everything that reads the file holds this space: a table or an
    /// iterator that outlives its snapshot and its database still reads
    /// pages, so no other instance may open the file and rewrite them
    /// until the last of those is gone (found by an adversarial review:
    /// such a table read another instance's pages as its own).
    lock: Option<Box<dyn crate::storage::LockGuard>>,
}

impl PageSpace {
    /// A page space over `pager` with the file's `extents`.
    pub fn new(pager: Pager, extents: ExtentMap, policy: ExtentPolicy) -> PageSpace {
        assert!(
            policy.first_pages > 0,
            "extent policy with empty first extent"
        );
        assert!(
            policy.max_pages >= policy.first_pages,
            "extent policy grows below its first extent"
        );
        PageSpace {
            pager,
            extents: Mutex::new(extents),
            policy,
            lock: None,
        }
    }

    /// This space holding the database's file `lock` for as long as it
    /// lives.
    pub fn holding(mut self, lock: Box<dyn crate::storage::LockGuard>) -> PageSpace {
        self.lock = Some(lock);
        self
    }
}
