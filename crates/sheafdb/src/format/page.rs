//! The common header of every page run in the data file.
//!
//! A *run* is one page (tree pages) or several contiguous pages (overflow
//! values, metadata blobs). Only the first page of a run has a header; the
//! checksum covers the whole run.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0  | 4 | crc32c of bytes `4 .. run length` |
//! | 4  | 1 | page type ([`PageType`]) |
//! | 5  | 1 | reserved, 0 |
//! | 6  | 2 | cell count (tree pages), 0 otherwise |
//! | 8  | 8 | own `PageId` (detects misdirected writes and reads) |
//! | 16 | 8 | owning `CfId` (detects pages read through the wrong CF) |
//! | 24 | 4 | pages in the run (1 for tree pages) |
//! | 28 | 4 | payload length in bytes (overflow and blob runs), 0 otherwise |
//! | 32 | … | type-specific body |
//!
//! The checksum is computed when the run is written to the file (the copy in
//! memory may carry a stale one); every other field is set when the page is
//! built and never changes while the page is shared.

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::storage::run::{Run, RunArc, UniqueRun};

use crate::error::{Error, Result};
use crate::format::codec::{put_u16, put_u32, put_u64, put_u8, read_u8};
use crate::types::{CfId, PageId};

/// Offset of the crc32c (covers `OFF_TYPE ..` the run's end).
pub const OFF_CRC: usize = 0;
/// Offset of the page type byte.
pub const OFF_TYPE: usize = 4;
/// Offset of the reserved byte.
pub const OFF_RESERVED: usize = 5;
/// Offset of the cell count (u16).
pub const OFF_COUNT: usize = 6;
/// Offset of the own page id (u64).
pub const OFF_ID: usize = 8;
/// Offset of the owning CF id (u64).
pub const OFF_CF: usize = 16;
/// Offset of the pages-in-run count (u32).
pub const OFF_NPAGES: usize = 24;
/// Offset of the payload length (u32).
pub const OFF_PAYLOAD_LEN: usize = 28;
/// Size of the common header.
pub const HEADER_LEN: usize = 32;

// The header table above adds up: each field starts where the previous
// one ends, and the last ends at the header's length.
const _: () = assert!(OFF_TYPE == OFF_CRC + 4);
const _: () = assert!(OFF_RESERVED == OFF_TYPE + 1);
const _: () = assert!(OFF_COUNT == OFF_RESERVED + 1);
const _: () = assert!(OFF_ID == OFF_COUNT + 2);
const _: () = assert!(OFF_CF == OFF_ID + 8);
const _: () = assert!(OFF_NPAGES == OFF_CF + 8);
const _: () = assert!(OFF_PAYLOAD_LEN == OFF_NPAGES + 4);
const _: () = assert!(HEADER_LEN == OFF_PAYLOAD_LEN + 4);
const _: () = assert!(HEADER_LEN <= MIN_PAGE_SIZE);

/// Smallest supported page size.
pub const MIN_PAGE_SIZE: usize = 4096;
/// Largest supported page size.
pub const MAX_PAGE_SIZE: usize = 65536;
/// Page size of new databases unless the builder says otherwise.
pub const DEFAULT_PAGE_SIZE: usize = 4096;

/// What a page run holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PageType {
    /// B+tree interior page.
    Branch = 1,
    /// B+tree leaf page.
    Leaf = 2,
    /// A value too large to store inline in a leaf.
    Overflow = 3,
    /// A metadata blob (allocator state), referenced from the superblock or
    /// the system tree.
    Blob = 4,
}

impl PageType {
    /// Decodes a type byte.
    pub fn from_u8(b: u8) -> Option<PageType> {
        match b {
            1 => Some(PageType::Branch),
            2 => Some(PageType::Leaf),
            3 => Some(PageType::Overflow),
            4 => Some(PageType::Blob),
            _ => None,
        }
    }
}

/// What the engine derives from a page run's bytes and keeps with them,
/// in the same allocation (see [`PageBuf`]).
#[derive(Default)]
pub struct PageMeta {
    /// A search index the B+tree derives from the bytes once and keeps
    /// with the page (the first eight bytes of every key, see
    /// `btree::node`): opaque here, cleared by every mutable access.
    index: OnceLock<Box<[u64]>>,
    /// Set by the first [`PageBytes::searched_before`]: the B+tree builds a
    /// leaf's index only when the leaf is searched a second time.
    searched: AtomicBool,
}

/// One page run in memory: its [`PageMeta`] and its bytes in a single
/// reference-counted allocation (unsized; held as a [`PageRef`],
/// [`PageOwned`] or [`PageHandle`]).
///
/// One allocation, not a struct pointing at a byte buffer: a B+tree
/// descent that finds a page in the cache reaches its header in the same
/// cache line as the reference count, instead of first loading a struct
/// to learn where the bytes are (one dependent memory miss less per
/// level; see docs/design.md, *The page cache*). A run of one page lives
/// on a huge page with many others (`storage::slab`): one TLB entry per
/// 2 MiB of cached pages.
pub type PageBuf = Run<PageMeta>;

/// A shared, immutable page run. Private pages of a write transaction are
/// mutated in place only while unshared (see [`make_mut`]), so a reader
/// holding a clone never sees a change.
pub type PageRef = RunArc<PageMeta>;

/// A page run being built: the only reference, so mutable. `shareable()`
/// turns it into a [`PageRef`] without copying.
pub type PageOwned = UniqueRun<PageMeta>;

/// A [`PageRef`] in the form the page cache's slots hold (an atomic swap
/// needs a thin pointer; a [`PageRef`] is one already).
pub type PageThin = RunArc<PageMeta>;

/// A page run held for reading: a reference ([`PageRef`]), or a guard on
/// the page cache's slot that keeps the run alive without touching its
/// reference count (so readers on many cores passing through the same
/// root do not bounce one counter between them). Derefs to the run;
/// [`PageHandle::to_ref`] takes a reference when the caller keeps bytes
/// of it (a value handed to the user).
pub enum PageHandle {
    /// A counted reference.
    Ref(PageRef),
    /// A cache slot's guard; always holds a run (see [`PageHandle::guarded`]).
    Slot(arc_swap::Guard<Option<PageThin>>),
}

impl PageHandle {
    /// A handle on the run `guard` holds; `None` if it holds none.
    pub fn guarded(guard: arc_swap::Guard<Option<PageThin>>) -> Option<PageHandle> {
        guard.is_some().then_some(PageHandle::Slot(guard))
    }

    /// A counted reference to the run.
    pub fn to_ref(&self) -> PageRef {
        match self {
            PageHandle::Ref(p) => p.clone(),
            PageHandle::Slot(g) => match &**g {
                Some(p) => p.clone(),
                None => unreachable!("engine invariant: a slot handle holds a run"),
            },
        }
    }
}

impl Clone for PageHandle {
    /// A counted reference to the same run (a slot guard is not copied).
    fn clone(&self) -> PageHandle {
        PageHandle::Ref(self.to_ref())
    }
}

impl std::fmt::Debug for PageHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        describe(self, f)
    }
}

impl std::ops::Deref for PageHandle {
    type Target = PageBuf;
    #[inline]
    fn deref(&self) -> &PageBuf {
        match self {
            PageHandle::Ref(p) => p,
            PageHandle::Slot(g) => match &**g {
                Some(p) => p,
                None => unreachable!("engine invariant: a slot handle holds a run"),
            },
        }
    }
}

impl std::fmt::Debug for PageMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageMeta")
            .field("indexed", &self.index.get().is_some())
            .finish()
    }
}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        describe(self, f)
    }
}

impl std::fmt::Debug for PageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        describe(self, f)
    }
}

impl std::fmt::Debug for PageOwned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        describe(self, f)
    }
}

/// A short description of a run (its length, type byte and id), not its
/// bytes.
pub fn describe(page: &PageBuf, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    f.debug_struct("PageBuf")
        .field("len", &page.len())
        .field("type", &page.bytes().get(OFF_TYPE))
        .field("id", &page.page_id())
        .finish()
}

/// A new run holding a copy of `bytes`.
pub fn page_from_slice(bytes: &[u8]) -> PageOwned {
    RunArc::from_slice(PageMeta::default(), bytes)
}

/// The run `slot` holds, for writing: in place if no one else holds it,
/// else a copy put in its place first (readers keep the old bytes).
pub fn make_mut(slot: &mut PageRef) -> &mut PageBuf {
    if !slot.is_unique() {
        let copy = page_from_slice(slot.bytes());
        if let Some(ix) = slot.meta().index.get() {
            // The bytes are the same, so is the index.
            let _ = copy.meta().index.set(ix.clone());
        }
        *slot = copy.shareable();
    }
    match RunArc::get_mut(slot) {
        Some(page) => page,
        None => unreachable!("a run just copied is shared"),
    }
}

/// The methods of a page run (on [`PageBuf`], a type of another crate, so
/// through a trait).
pub trait PageBytes {
    /// A zeroed run of `len` bytes (one pass over the memory).
    fn zeroed(len: usize) -> PageOwned {
        RunArc::zeroed(PageMeta::default(), len)
    }

    /// A fresh run with its header filled in.
    fn new_run(
        page_size: usize,
        npages: u32,
        page_type: PageType,
        id: PageId,
        cf: CfId,
    ) -> PageOwned {
        let mut p = Self::zeroed(page_size * npages as usize);
        let b = p.bytes_mut();
        put_u8(b, OFF_TYPE, page_type as u8);
        put_u64(b, OFF_ID, id.0);
        put_u64(b, OFF_CF, cf.0);
        put_u32(b, OFF_NPAGES, npages);
        p
    }

    /// All bytes of the run.
    fn bytes(&self) -> &[u8];

    /// All bytes of the run, mutable (the derived index is dropped).
    fn bytes_mut(&mut self) -> &mut [u8];

    /// What is derived from the bytes.
    fn meta(&self) -> &PageMeta;

    /// The index derived from these bytes by `build` (once; later calls
    /// return the same). `None` if `build` fails (then it is tried again
    /// next time, and the caller falls back to reading the bytes).
    fn index_or(&self, build: impl FnOnce(&[u8]) -> Option<Box<[u64]>>) -> Option<&[u64]> {
        let index = &self.meta().index;
        if let Some(ix) = index.get() {
            return Some(ix);
        }
        let built = build(self.bytes())?;
        Some(index.get_or_init(|| built))
    }

    /// True if this was asked before (and remembers that it was asked
    /// now). One write per page, ever: no shared counter on later reads.
    #[inline]
    fn searched_before(&self) -> bool {
        let searched = &self.meta().searched;
        if searched.load(Ordering::Relaxed) {
            return true;
        }
        searched.store(true, Ordering::Relaxed);
        false
    }

    /// Length of the run in bytes.
    #[inline]
    fn len(&self) -> usize {
        self.bytes().len()
    }

    /// Always false: a run has at least a header.
    #[inline]
    fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }

    /// Raw type byte.
    #[inline]
    fn page_type(&self) -> Option<PageType> {
        PageType::from_u8(read_u8(self.bytes(), OFF_TYPE))
    }

    /// Cell count field.
    #[inline]
    fn count(&self) -> u16 {
        read_u16(self.bytes(), OFF_COUNT)
    }

    /// Sets the cell count field.
    #[inline]
    fn set_count(&mut self, n: u16) {
        put_u16(self.bytes_mut(), OFF_COUNT, n);
    }

    /// Own page id field.
    #[inline]
    fn page_id(&self) -> PageId {
        PageId(read_u64(self.bytes(), OFF_ID))
    }

    /// Owning CF field.
    #[inline]
    fn cf(&self) -> CfId {
        CfId(read_u64(self.bytes(), OFF_CF))
    }

    /// Pages-in-run field.
    #[inline]
    fn npages(&self) -> u32 {
        read_u32(self.bytes(), OFF_NPAGES)
    }

    /// Payload length field (overflow and blob runs).
    #[inline]
    fn payload_len(&self) -> u32 {
        read_u32(self.bytes(), OFF_PAYLOAD_LEN)
    }

    /// Sets the payload length field.
    #[inline]
    fn set_payload_len(&mut self, n: u32) {
        put_u32(self.bytes_mut(), OFF_PAYLOAD_LEN, n);
    }

    /// The checksum this run should carry on disk.
    fn compute_checksum(&self) -> u32 {
        crc32c::crc32c(self.bytes().get(OFF_TYPE..).unwrap_or_default())
    }

    /// Checks a run just read from the file at `expect_id` for `expect_cf`.
    /// Any mismatch is `Corrupted` naming the page.
    fn verify(&self, expect_id: PageId, expect_cf: Option<CfId>) -> Result<PageType> {
        if self.len() < HEADER_LEN {
            return Err(Error::corrupted_page(expect_id, "page shorter than header"));
        }
        let stored = read_u32(self.bytes(), OFF_CRC);
        if stored != self.compute_checksum() {
            return Err(Error::corrupted_page(expect_id, "checksum mismatch"));
        }
        let ty = self
            .page_type()
            .ok_or_else(|| Error::corrupted_page(expect_id, "unknown page type"))?;
        if self.page_id() != expect_id {
            return Err(Error::corrupted_page(
                expect_id,
                format!("page claims to be page {}", self.page_id()),
            ));
        }
        if let Some(cf) = expect_cf {
            if self.cf() != cf {
                return Err(Error::corrupted_page(
                    expect_id,
                    format!("page belongs to cf {} not cf {}", self.cf(), cf),
                ));
            }
        }
        Ok(ty)
    }
}

impl PageBytes for PageBuf {
    #[inline]
    fn bytes(&self) -> &[u8] {
        self.data()
    }

    #[inline]
    fn bytes_mut(&mut self) -> &mut [u8] {
        let index = &mut self.header_mut().index;
        if index.get().is_some() {
            *index = OnceLock::new();
        }
        self.data_mut()
    }

    #[inline]
    fn meta(&self) -> &PageMeta {
        self.header()
    }
}

pub use crate::format::codec::{read_u16, read_u32, read_u64};

/// Number of pages a run with `payload_len` bytes after the header needs.
pub fn pages_for_payload(page_size: usize, payload_len: usize) -> u32 {
    (HEADER_LEN + payload_len).div_ceil(page_size) as u32
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    /// The point of one allocation: a run's bytes start in the first
    /// cache line of its allocation, right after the count and the
    /// derived fields.
    #[test]
    fn zeroed_runs_of_every_size_are_zero() {
        for len in [0, 1, 4096, MAX_PAGE_SIZE, MAX_PAGE_SIZE + 1, 3 << 20] {
            let run = PageBuf::zeroed(len);
            assert_eq!(run.bytes().len(), len);
            assert!(run.bytes().iter().all(|&b| b == 0), "{len}");
        }
    }

    #[test]
    fn bytes_follow_the_count_in_one_allocation() {
        let page = PageBuf::new_run(4096, 1, PageType::Leaf, PageId(7), CfId(3)).shareable();
        let offset = page.bytes().as_ptr() as usize - page.heap_ptr() as usize;
        assert!(
            offset <= 48,
            "the bytes start {offset} bytes into the allocation"
        );
        assert_eq!(page.len(), 4096);
        assert_eq!(
            (page.page_id(), page.cf(), page.npages()),
            (PageId(7), CfId(3), 1)
        );
        // A run of one page, at every page size, lives on huge pages.
        let mut size = MIN_PAGE_SIZE;
        while size <= MAX_PAGE_SIZE {
            assert!(
                crate::storage::run::on_huge_pages::<PageMeta>(size),
                "{size}"
            );
            size *= 2;
        }
        assert!(!crate::storage::run::on_huge_pages::<PageMeta>(3 * 4096));
    }

    /// A shared run is copied before it is written; an unshared one is
    /// written in place.
    #[test]
    fn make_mut_copies_only_shared_runs() {
        let mut page = PageBuf::zeroed(4096).shareable();
        let at = page.heap_ptr();
        make_mut(&mut page).bytes_mut()[100] = 1;
        assert_eq!(page.heap_ptr(), at, "an unshared run was copied");
        let reader = page.clone();
        make_mut(&mut page).bytes_mut()[100] = 2;
        assert_ne!(page.heap_ptr(), at, "a shared run was written in place");
        assert_eq!((reader.bytes()[100], page.bytes()[100]), (1, 2));
        // Runs larger than the zero buffer are zeroed too.
        let big = PageBuf::zeroed(MAX_PAGE_SIZE + 4096);
        assert!(big.bytes().iter().all(|&b| b == 0));
    }
}
