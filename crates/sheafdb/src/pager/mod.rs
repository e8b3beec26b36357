//! The pager: page runs between memory and the data file.
//!
//! Owns: the page cache, reads with verification (checksum, own id, owning
//! CF, run length), and coalesced vectored writes of dirty runs with their
//! checksums. Also hosts the space managers ([`alloc`]) and the range set
//! they are built on.
//!
//! Must not know: B-tree layouts, transactions, the WAL.
//!
//! Invariants: a run returned by [`Pager::read_run`] passed `verify`; a run
//! is written with the checksum of exactly the bytes written.

pub mod alloc;
pub mod cache;
pub mod ranges;
pub mod space;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::page::{PageBuf, PageBytes as _, PageHandle, PageOwned, PageRef, HEADER_LEN};
use crate::storage::Storage;
use crate::types::{CfId, PageId};

use cache::PageCache;

/// Largest single vectored write, in bytes.
const MAX_WRITE_BYTES: usize = 8 << 20;
/// Most iovecs per vectored write (two per run).
const MAX_IOVECS: usize = 1000;

/// Reads and writes page runs of one data file.
#[derive(Debug)]
pub struct Pager {
    storage: Arc<dyn Storage>,
    page_size: usize,
    cache: PageCache,
}

impl Pager {
    /// A pager over `storage` with a clean-page cache of `cache_bytes`.
    pub fn new(storage: Arc<dyn Storage>, page_size: usize, cache_bytes: usize) -> Pager {
        Pager {
            storage,
            page_size,
            cache: PageCache::new(cache_bytes),
        }
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The underlying file.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The clean-page cache.
    pub fn cache(&self) -> &PageCache {
        &self.cache
    }

    /// Reads the run of `npages` at `id` owned by `cf`, from the cache or
    /// the file (verified).
    pub fn read_run(&self, id: PageId, npages: u32, cf: CfId) -> Result<PageRef> {
        Ok(self.read_handle(id, npages, cf)?.to_ref())
    }

    /// [`Pager::read_run`] returning a handle: a cache hit takes no new
    /// reference to the run (see [`PageHandle`]).
    pub fn read_handle(&self, id: PageId, npages: u32, cf: CfId) -> Result<PageHandle> {
        if let Some(p) = self.cache.handle(id) {
            if p.len() == npages as usize * self.page_size && p.cf() == cf {
                return Ok(p);
            }
            return Err(Error::corrupted_page(
                id,
                "cached run has another shape or owner",
            ));
        }
        let page = self.read_uncached(id, npages, Some(cf))?.shareable();
        self.cache.insert(id, page.clone());
        Ok(PageHandle::Ref(page))
    }

    /// Reads and verifies a run without touching the cache.
    pub fn read_uncached(&self, id: PageId, npages: u32, cf: Option<CfId>) -> Result<PageOwned> {
        if id.0 < 2 || npages == 0 {
            return Err(Error::corrupted_page(
                id,
                "reference to a superblock page or empty run",
            ));
        }
        let len = npages as usize * self.page_size;
        // The id comes from a pointer in the file: its byte offset may not
        // fit in a u64.
        let Some(offset) = id.0.checked_mul(self.page_size as u64) else {
            return Err(Error::corrupted_page(
                id,
                "reference past the end of the file",
            ));
        };
        // A multi-page run's length comes from a page or a record: bound it
        // by the file before allocating (one page is always small).
        if npages > 1 {
            let end = offset.saturating_add(len as u64);
            if end > self.storage.len()? {
                return Err(Error::corrupted_page(
                    id,
                    format!("run of {npages} pages passes the end of the file"),
                ));
            }
        }
        let mut page = PageBuf::zeroed(len);
        self.storage
            .read_at(offset, page.bytes_mut())
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    Error::corrupted_page(id, "reference past the end of the file")
                }
                _ => Error::Io(e),
            })?;
        page.verify(id, cf)?;
        if page.npages() != npages {
            return Err(Error::corrupted_page(
                id,
                format!("run has {} pages, expected {npages}", page.npages()),
            ));
        }
        Ok(page)
    }

    /// Writes runs (any order) with fresh checksums, sorted and coalesced
    /// into vectored writes. Does not sync, and leaves the cache alone:
    /// a run written but not yet synced is still the only durable-to-be
    /// copy of its bytes, so it must stay dirty (unevictable) until
    /// [`Pager::mark_clean`] after the sync (ordering rule O4).
    pub fn write_runs(&self, runs: &[(PageId, PageRef)]) -> Result<()> {
        let mut sorted: Vec<&(PageId, PageRef)> = runs.iter().collect();
        sorted.sort_by_key(|(id, _)| *id);
        let checksums: Vec<[u8; 4]> = sorted
            .iter()
            .map(|(id, p)| {
                debug_assert_eq!(p.page_id(), *id, "run carries another id");
                debug_assert!(p.len() >= HEADER_LEN && p.len() % self.page_size == 0);
                p.compute_checksum().to_le_bytes()
            })
            .collect();
        let mut i = 0;
        while i < sorted.len() {
            let start = sorted[i].0;
            let mut next_page = start.0;
            let mut bytes = 0usize;
            let mut iov: Vec<&[u8]> = Vec::new();
            while i < sorted.len()
                && sorted[i].0 .0 == next_page
                && iov.len() + 2 <= MAX_IOVECS
                && (iov.is_empty() || bytes + sorted[i].1.len() <= MAX_WRITE_BYTES)
            {
                let (_, p) = sorted[i];
                iov.push(&checksums[i]);
                iov.push(&p.bytes()[4..]);
                bytes += p.len();
                next_page += (p.len() / self.page_size) as u64;
                i += 1;
            }
            self.storage
                .write_vectored_at(start.offset(self.page_size), &iov)?;
        }
        Ok(())
    }

    /// After the sync that made `runs` durable: they match the file now,
    /// so the cache may evict them — each only if its entry is still that
    /// very run (one reallocated meanwhile has a newer entry).
    pub fn mark_clean(&self, runs: &[(PageId, PageRef)]) {
        for (id, p) in runs {
            self.cache.mark_clean(*id, p);
        }
    }

    /// After the sync that made `runs` durable, for runs whose page no one
    /// else writes: caches them as clean, replacing any entry.
    pub fn cache_clean(&self, runs: &[(PageId, PageRef)]) {
        for (id, p) in runs {
            self.cache.insert(*id, p.clone());
        }
    }

    /// Keeps committed runs that no checkpoint has written yet in memory,
    /// where readers find them before the file.
    pub fn install_dirty(&self, runs: &[(PageId, PageRef)]) {
        for (id, p) in runs {
            debug_assert_eq!(p.page_id(), *id);
            self.cache.insert_dirty(*id, p.clone());
        }
    }

    /// Forgets any cached run starting at `id` (the pages were reallocated).
    pub fn forget(&self, id: PageId) {
        self.cache.remove(id);
    }

    /// Drops the stale cache entries of the runs `alloc` freed without
    /// their ever reaching the file (`CfAllocator::take_unwritten_freed`).
    /// Called under the allocator's lock, before any of those pages can
    /// be handed out again: by the CF itself (its next allocation) or, once
    /// compaction or a cut gave them away, by another CF, whose new run the
    /// late removal would otherwise have dropped from the cache.
    pub fn forget_unwritten_freed(&self, alloc: &mut crate::pager::alloc::CfAllocator) {
        let cf = alloc.cf();
        for id in alloc.take_unwritten_freed() {
            self.cache.remove_owned(id, cf);
        }
    }

    /// Makes all earlier writes durable.
    pub fn sync(&self) -> Result<()> {
        self.storage.sync_data().map_err(Error::Io)
    }
}
