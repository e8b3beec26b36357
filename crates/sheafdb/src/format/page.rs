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

use crate::error::{Error, Result};
use crate::types::{CfId, PageId};

/// Size of the common header.
pub const HEADER_LEN: usize = 32;

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
#[derive(Clone, PartialEq, Eq)]
pub struct PageBuf {
    data: Box<[u8]>,
}

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

impl PageBuf {
    /// A zeroed run of `len` bytes.
    pub fn zeroed(len: usize) -> PageBuf {
        PageBuf {
            data: vec![0u8; len].into_boxed_slice(),
        }
    }

    /// Wraps bytes read from the file.
    pub fn from_vec(data: Vec<u8>) -> PageBuf {
        PageBuf {
            data: data.into_boxed_slice(),
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
        p.data[4] = page_type as u8;
        p.data[8..16].copy_from_slice(&id.0.to_le_bytes());
        p.data[16..24].copy_from_slice(&cf.0.to_le_bytes());
        p.data[24..28].copy_from_slice(&npages.to_le_bytes());
        p
    }

    /// All bytes of the run.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// All bytes of the run, mutable.
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.data
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
        PageType::from_u8(self.data[4])
    }

    /// Cell count field.
    #[inline]
    pub fn count(&self) -> u16 {
        u16::from_le_bytes([self.data[6], self.data[7]])
    }

    /// Sets the cell count field.
    #[inline]
    pub fn set_count(&mut self, n: u16) {
        self.data[6..8].copy_from_slice(&n.to_le_bytes());
    }

    /// Own page id field.
    #[inline]
    pub fn page_id(&self) -> PageId {
        PageId(read_u64(&self.data, 8))
    }

    /// Owning CF field.
    #[inline]
    pub fn cf(&self) -> CfId {
        CfId(read_u64(&self.data, 16))
    }

    /// Pages-in-run field.
    #[inline]
    pub fn npages(&self) -> u32 {
        read_u32(&self.data, 24)
    }

    /// Payload length field (overflow and blob runs).
    #[inline]
    pub fn payload_len(&self) -> u32 {
        read_u32(&self.data, 28)
    }

    /// Sets the payload length field.
    #[inline]
    pub fn set_payload_len(&mut self, n: u32) {
        self.data[28..32].copy_from_slice(&n.to_le_bytes());
    }

    /// The checksum this run should carry on disk.
    pub fn compute_checksum(&self) -> u32 {
        crc32c::crc32c(&self.data[4..])
    }

    /// Writes the checksum into the header (only for runs not yet shared).
    pub fn seal(&mut self) {
        let c = self.compute_checksum();
        self.data[0..4].copy_from_slice(&c.to_le_bytes());
    }

    /// Checks a run just read from the file at `expect_id` for `expect_cf`.
    /// Any mismatch is `Corrupted` naming the page.
    pub fn verify(&self, expect_id: PageId, expect_cf: Option<CfId>) -> Result<PageType> {
        if self.data.len() < HEADER_LEN {
            return Err(Error::corrupted_page(expect_id, "page shorter than header"));
        }
        let stored = read_u32(&self.data, 0);
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
