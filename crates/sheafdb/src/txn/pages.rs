//! Page stores the B+tree runs on: one for snapshots, one for write
//! transactions (copy-on-write over a snapshot).
//!
//! Lookup order (design.md §5): transaction-private runs, then the pager
//! (committed dirty runs, clean cache, data file).
//!
//! Invariants: a private run is in `private` from `alloc` until it is freed
//! or the transaction ends; a committed run is never mutated (only private
//! runs are handed out by `get_mut`); every run freed is recorded exactly
//! once, either returned to the allocator (private) or queued for
//! reclamation (committed).

use std::sync::Arc;

use parking_lot::Mutex;

use crate::btree::store::{PageRead, PageWrite};
use crate::error::{Error, Result};
use crate::format::page::{
    make_mut, page_from_slice, PageBuf, PageBytes as _, PageHandle, PageOwned, PageRef,
};
use crate::pager::alloc::CfAllocator;
use crate::pager::space::PageSpace;
use crate::types::{CfId, IdMap, PageId};

/// Read-only access to committed pages of one CF.
#[derive(Clone, Debug)]
pub struct ReadPages {
    space: Arc<PageSpace>,
    cf: CfId,
}

impl ReadPages {
    /// Pages of `cf`.
    pub(crate) fn new(space: Arc<PageSpace>, cf: CfId) -> ReadPages {
        ReadPages { space, cf }
    }
}

impl PageRead for ReadPages {
    fn page_size(&self) -> usize {
        self.space.pager.page_size()
    }
    fn cf(&self) -> CfId {
        self.cf
    }
    fn read_run(&self, id: PageId, npages: u32) -> Result<PageRef> {
        self.space.pager.read_run(id, npages, self.cf)
    }
    fn read_handle(&self, id: PageId, npages: u32) -> Result<PageHandle> {
        self.space.pager.read_handle(id, npages, self.cf)
    }
}

/// Copy-on-write page access for one write transaction on one CF (or for
/// the system tree during a checkpoint).
pub struct TxnPages {
    space: Arc<PageSpace>,
    cf: CfId,
    alloc: Arc<Mutex<CfAllocator>>,
    /// Private runs; an allocated run holds an empty placeholder until
    /// `install`.
    private: IdMap<PageId, PageRef>,
    /// Pages in each private run.
    sizes: IdMap<PageId, u32>,
    freed_committed: Vec<(PageId, u32)>,
    /// A free the file asked for that no tree of this transaction could
    /// (a pointer naming a run this transaction allocated, with another
    /// length: the file's free space named a live run). Reported by
    /// [`TxnPages::check_frees`], before the commit's WAL append.
    bad_free: Option<PageId>,
}

impl std::fmt::Debug for TxnPages {
    /// The runs by id and length, not their bytes (a page's `Debug` prints
    /// every byte).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnPages")
            .field("cf", &self.cf)
            .field("private_runs", &self.sizes)
            .field("freed_committed", &self.freed_committed)
            .field("bad_free", &self.bad_free)
            .finish_non_exhaustive()
    }
}

impl TxnPages {
    /// A fresh store allocating from `alloc`.
    pub(crate) fn new(space: Arc<PageSpace>, cf: CfId, alloc: Arc<Mutex<CfAllocator>>) -> TxnPages {
        TxnPages {
            space,
            cf,
            alloc,
            private: IdMap::default(),
            sizes: IdMap::default(),
            freed_committed: Vec::new(),
            bad_free: None,
        }
    }

    /// True if the transaction allocated or freed anything.
    pub fn is_dirty(&self) -> bool {
        !self.private.is_empty() || !self.freed_committed.is_empty()
    }

    /// Pages of the private runs (what this store allocated and holds).
    pub fn private_pages(&self) -> u64 {
        self.sizes.values().map(|&n| u64::from(n)).sum()
    }

    /// The private runs (all reachable from the transaction's state if the
    /// tree code freed correctly).
    pub fn private_runs(&self) -> Vec<(PageId, PageRef)> {
        self.private
            .iter()
            .map(|(k, v)| {
                assert!(
                    !v.is_empty(),
                    "private run {k} allocated but never installed"
                );
                (*k, v.clone())
            })
            .collect()
    }

    /// Committed runs this transaction stopped referencing.
    pub fn take_freed(&mut self) -> Vec<(PageId, u32)> {
        std::mem::take(&mut self.freed_committed)
    }

    /// `Corrupted` unless the allocator may free the committed runs this
    /// transaction dropped from its trees
    /// ([`CfAllocator::check_freeable`]); called before the commit's WAL
    /// append.
    pub fn check_frees(&self) -> Result<()> {
        self.check_private_frees()?;
        self.alloc.lock().check_freeable(&self.freed_committed)
    }

    /// `Corrupted` if a free named a private run with another length.
    pub fn check_private_frees(&self) -> Result<()> {
        match self.bad_free {
            Some(id) => Err(Error::corrupted_page(
                id,
                "a pointer names a run allocated from free space, with another length",
            )),
            None => Ok(()),
        }
    }

    /// Gives every private run back to the allocator (abort).
    pub fn rollback(&mut self) {
        let mut alloc = self.alloc.lock();
        self.private.clear();
        for (id, npages) in self.sizes.drain() {
            alloc.free_now(id, npages);
        }
        self.freed_committed.clear();
        self.bad_free = None;
    }

    /// Forgets private runs after they were made durable and published:
    /// they are committed now.
    pub fn mark_committed(&mut self) {
        self.private.clear();
        self.sizes.clear();
        self.freed_committed.clear();
    }
}

impl PageRead for TxnPages {
    fn page_size(&self) -> usize {
        self.space.pager.page_size()
    }
    fn cf(&self) -> CfId {
        self.cf
    }
    fn read_run(&self, id: PageId, npages: u32) -> Result<PageRef> {
        if let Some(p) = self.private.get(&id) {
            if p.len() != npages as usize * self.page_size() {
                return Err(Error::corrupted_page(id, "private run has another length"));
            }
            return Ok(p.clone());
        }
        self.space.pager.read_run(id, npages, self.cf)
    }
    fn read_handle(&self, id: PageId, npages: u32) -> Result<PageHandle> {
        if self.private.contains_key(&id) {
            return self.read_run(id, npages).map(PageHandle::Ref);
        }
        self.space.pager.read_handle(id, npages, self.cf)
    }
}

impl PageWrite for TxnPages {
    fn is_private(&self, id: PageId) -> bool {
        self.private.contains_key(&id)
    }

    fn alloc(&mut self, npages: u32) -> Result<PageId> {
        let id = {
            let mut a = self.alloc.lock();
            let id = a.alloc(npages, &self.space.extents).ok_or_else(|| {
                Error::Io(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "no free pages below the compaction limit",
                ))
            })?;
            // Stale cache entries of freed, never-written runs are dropped
            // under the allocator lock: another store of this CF (a fold
            // made aside beside the writer) may reuse such a run as soon
            // as the lock is released, and its new entry must survive.
            self.space.pager.forget_unwritten_freed(&mut a);
            id
        };
        // A stale cached copy of `id` needs no removal here: no snapshot
        // can reach `id` (it was free), reads in this transaction find the
        // private run first, and the commit's `install_dirty` replaces the
        // entry before the new version is published.
        // An empty placeholder until `install`; `sizes` keeps rollback exact.
        let prev = self.private.insert(id, page_from_slice(&[]).shareable());
        assert!(
            prev.is_none(),
            "allocator handed out private page {id} twice"
        );
        self.sizes.insert(id, npages);
        Ok(id)
    }

    fn install(&mut self, id: PageId, page: PageOwned) {
        debug_assert_eq!(page.page_id(), id, "installed page carries another id");
        debug_assert_eq!(page.cf(), self.cf, "installed page carries another cf");
        let slot = self
            .private
            .get_mut(&id)
            .unwrap_or_else(|| panic!("install of non-private page {id}"));
        debug_assert_eq!(
            self.sizes[&id] as usize * self.space.pager.page_size(),
            page.len(),
            "installed run has another length than allocated"
        );
        *slot = page.shareable();
    }

    fn get_mut(&mut self, id: PageId) -> Result<&mut PageBuf> {
        // Only a pointer from the file can name a page the tree code
        // thinks private after it was freed (the file's free space named
        // a live page, so a run was allocated and freed through two names).
        let slot = self.private.get_mut(&id).ok_or_else(|| {
            Error::corrupted_page(id, "a page freed through another pointer is written")
        })?;
        Ok(make_mut(slot))
    }

    fn free(&mut self, id: PageId, npages: u32) {
        if let Some(&allocated) = self.sizes.get(&id) {
            if allocated != npages {
                // Not a run the tree code allocated: a pointer from the
                // file names it (the file's free space named a live run).
                // Kept, and the commit fails in `check_frees`.
                self.bad_free.get_or_insert(id);
                return;
            }
            self.private.remove(&id);
            self.sizes.remove(&id);
            self.alloc.lock().free_now(id, npages);
        } else {
            self.freed_committed.push((id, npages));
        }
    }
}
