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

/// An owned, page-aligned-size buffer holding one page run.
pub struct PageBuf {
    data: Box<[u8]>,
    /// A search index the B+tree derives from the bytes once and keeps
    /// with the page (the first eight bytes of every key, see
    /// `btree::node`): opaque here, cleared by every mutable access.
    index: std::sync::OnceLock<Box<[u64]>>,
    /// Set by the first [`PageBuf::searched_before`]: the B+tree builds a
    /// leaf's index only when the leaf is searched a second time.
    searched: std::sync::atomic::AtomicBool,
}

impl Clone for PageBuf {
    fn clone(&self) -> Self {
        PageBuf {
            data: self.data.clone(),
            index: self.index.clone(),
            searched: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl PartialEq for PageBuf {
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data
    }
}

impl Eq for PageBuf {}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageBuf")
            .field("len", &self.data.len())
            .field("type", &self.data.get(4))
            .field("id", &self.page_id())
            .finish()
    }
}

/// A shared, immutable page run. Private pages of a write transaction are
/// mutated through `Arc::make_mut`, so a reader holding a clone never sees
/// a change.
pub type PageRef = std::sync::Arc<PageBuf>;

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
    Slot(arc_swap::Guard<Option<PageRef>>),
}

impl PageHandle {
    /// A handle on the run `guard` holds; `None` if it holds none.
    pub fn guarded(guard: arc_swap::Guard<Option<PageRef>>) -> Option<PageHandle> {
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

impl std::ops::Deref for PageHandle {
    type Target = PageBuf;
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

impl Clone for PageHandle {
    /// A counted reference to the same run (a slot guard is not copied).
    fn clone(&self) -> PageHandle {
        PageHandle::Ref(self.to_ref())
    }
}

impl std::fmt::Debug for PageHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl PageBuf {
    /// A zeroed run of `len` bytes.
    pub fn zeroed(len: usize) -> PageBuf {
        PageBuf {
            data: vec![0u8; len].into_boxed_slice(),
            index: std::sync::OnceLock::new(),
            searched: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Wraps bytes read from the file.
    pub fn from_vec(data: Vec<u8>) -> PageBuf {
        PageBuf {
            data: data.into_boxed_slice(),
            index: std::sync::OnceLock::new(),
            searched: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A fresh run with its header filled in.
    pub fn new_run(
        page_size: usize,
        npages: u32,
        page_type: PageType,
        id: PageId,
        cf: CfId,
    ) -> PageBuf {
        let mut p = PageBuf::zeroed(page_size * npages as usize);
        put_u8(&mut p.data, OFF_TYPE, page_type as u8);
        put_u64(&mut p.data, OFF_ID, id.0);
        put_u64(&mut p.data, OFF_CF, cf.0);
        put_u32(&mut p.data, OFF_NPAGES, npages);
        p
    }

    /// All bytes of the run.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// All bytes of the run, mutable (the derived index is dropped).
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.index.get().is_some() {
            self.index = std::sync::OnceLock::new();
        }
        &mut self.data
    }

    /// The index derived from these bytes by `build` (once; later calls
    /// return the same). `None` if `build` fails (then it is tried again
    /// next time, and the caller falls back to reading the bytes).
    pub fn index_or(&self, build: impl FnOnce(&[u8]) -> Option<Box<[u64]>>) -> Option<&[u64]> {
        if let Some(ix) = self.index.get() {
            return Some(ix);
        }
        let built = build(&self.data)?;
        Some(self.index.get_or_init(|| built))
    }

    /// True if this was asked before (and remembers that it was asked
    /// now). One write per page, ever: no shared counter on later reads.
    #[inline]
    pub fn searched_before(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.searched.load(Ordering::Relaxed) {
            return true;
        }
        self.searched.store(true, Ordering::Relaxed);
        false
    }

    /// Length of the run in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Always false: a run has at least a header.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Raw type byte.
    #[inline]
    pub fn page_type(&self) -> Option<PageType> {
        PageType::from_u8(read_u8(&self.data, OFF_TYPE))
    }

    /// Cell count field.
    #[inline]
    pub fn count(&self) -> u16 {
        read_u16(&self.data, OFF_COUNT)
    }

    /// Sets the cell count field.
    #[inline]
    pub fn set_count(&mut self, n: u16) {
        put_u16(self.bytes_mut(), OFF_COUNT, n);
    }

    /// Own page id field.
    #[inline]
    pub fn page_id(&self) -> PageId {
        PageId(read_u64(&self.data, OFF_ID))
    }

    /// Owning CF field.
    #[inline]
    pub fn cf(&self) -> CfId {
        CfId(read_u64(&self.data, OFF_CF))
    }

    /// Pages-in-run field.
    #[inline]
    pub fn npages(&self) -> u32 {
        read_u32(&self.data, OFF_NPAGES)
    }

    /// Payload length field (overflow and blob runs).
    #[inline]
    pub fn payload_len(&self) -> u32 {
        read_u32(&self.data, OFF_PAYLOAD_LEN)
    }

    /// Sets the payload length field.
    #[inline]
    pub fn set_payload_len(&mut self, n: u32) {
        put_u32(self.bytes_mut(), OFF_PAYLOAD_LEN, n);
    }

    /// The checksum this run should carry on disk.
    pub fn compute_checksum(&self) -> u32 {
        crc32c::crc32c(self.data.get(OFF_TYPE..).unwrap_or_default())
    }

    /// Checks a run just read from the file at `expect_id` for `expect_cf`.
    /// Any mismatch is `Corrupted` naming the page.
    pub fn verify(&self, expect_id: PageId, expect_cf: Option<CfId>) -> Result<PageType> {
        if self.data.len() < HEADER_LEN {
            return Err(Error::corrupted_page(expect_id, "page shorter than header"));
        }
        let stored = read_u32(&self.data, OFF_CRC);
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

pub use crate::format::codec::{read_u16, read_u32, read_u64};

/// Number of pages a run with `payload_len` bytes after the header needs.
pub fn pages_for_payload(page_size: usize, payload_len: usize) -> u32 {
    (HEADER_LEN + payload_len).div_ceil(page_size) as u32
}
