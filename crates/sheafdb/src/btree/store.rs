//! What the B+tree needs from the layer that owns pages.
//!
//! The tree code never touches files, caches or allocators directly; it sees
//! pages only through these traits, implemented by the transaction layer
//! (and by a simple in-memory store in the tree's own tests).

use crate::error::Result;
use crate::format::page::{PageBuf, PageHandle, PageOwned, PageRef};
use crate::types::{CfId, PageId};

/// Read access to the pages of one snapshot.
pub trait PageRead {
    /// Page size of the database in bytes.
    fn page_size(&self) -> usize;
    /// The column family whose pages this store serves (written into new
    /// page headers and checked on read).
    fn cf(&self) -> CfId;
    /// A run of `npages` pages starting at `id`, header verified (checksum,
    /// own id, owning cf) when it came from the file.
    fn read_run(&self, id: PageId, npages: u32) -> Result<PageRef>;
    /// A single tree page.
    fn read_page(&self, id: PageId) -> Result<PageRef> {
        self.read_run(id, 1)
    }
    /// [`PageRead::read_run`] as a handle, which a store backed by a
    /// shared cache may return without taking a new reference to the run
    /// (a descent only passes through most pages it reads).
    fn read_handle(&self, id: PageId, npages: u32) -> Result<PageHandle> {
        Ok(PageHandle::Ref(self.read_run(id, npages)?))
    }
}

/// Write access for one write transaction: copy-on-write over a snapshot.
pub trait PageWrite: PageRead {
    /// True if `id` was allocated by this transaction and may be mutated in
    /// place; false for pages of committed versions (never mutated).
    fn is_private(&self, id: PageId) -> bool;
    /// Allocates a run of `npages` contiguous pages for this transaction.
    fn alloc(&mut self, npages: u32) -> Result<PageId>;
    /// Sets the contents of a private run (replacing any earlier contents).
    fn install(&mut self, id: PageId, page: PageOwned);
    /// Mutable access to a private run (copy-on-write if a reader still holds
    /// a clone of it). Calling this for a non-private page is a bug.
    fn get_mut(&mut self, id: PageId) -> Result<&mut PageBuf>;
    /// Releases a run this transaction's state no longer references. A
    /// private run is reusable at once; a committed one when no snapshot
    /// needs it any more.
    fn free(&mut self, id: PageId, npages: u32);
}
