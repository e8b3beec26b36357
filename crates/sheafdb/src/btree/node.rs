//! Byte layout of B+tree leaf and branch pages: parsing (validated, never
//! panicking on any page contents) and building/editing private pages.
//!
//! Owns: the slotted-page format below, cell encodings, size limits.
//! Must not know: how pages are found, cached or allocated (callers pass
//! page buffers), transactions, the WAL.
//!
//! # Node page (after the 32-byte common header of `format::page`)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0..32 | 32 | common header; `count` = number of cells, type `Leaf`/`Branch` |
//! | 32 | 4 | `content_start` (u32): offset of the lowest cell byte; page size when there are no cells |
//! | 36 | 1 | `level`: 0 for a leaf, height above the leaves for a branch (1..=63) |
//! | 37 | 1 | reserved, 0 |
//! | 38 | 2 | `dead` (u16): bytes of removed cells still inside `content_start .. page end` |
//! | 40 | 8 | branch: `rightmost` child `PageId`; leaf: 0 |
//! | 48 | 2 × count | slot array: u16 offset of each cell, in ascending key order |
//! | … | | free gap |
//! | content_start .. page end | | cells, packed downward from the page end, plus `dead` bytes of removed cells |
//!
//! So the bytes a compacted copy would use are
//! `2 × count + (page_size - content_start - dead)`, known in O(1).
//!
//! # Leaf cell
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | key length `k` (u16) |
//! | 2 | 4 | value length `v` (u32), the full length even when stored in an overflow run |
//! | 6 | 1 | flags: 0 = value inline, 1 = value in an overflow run |
//! | 7 | k | key bytes |
//! | 7 + k | v or 8 | inline: the value; overflow: first `PageId` (u64) of the run |
//!
//! An overflow run has `pages_for_payload(page_size, v)` pages, type
//! `Overflow`, `payload_len = v`, and the value at byte 32 of the run.
//! A value is stored inline exactly when its inline cell fits the cell limit
//! ([`inline_fits`]); a cell that says otherwise is corrupt.
//!
//! # Branch cell
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | child `PageId` |
//! | 8 | 2 | separator length `k` (u16) |
//! | 10 | k | separator bytes |
//!
//! A branch with `n` cells has `n + 1` children: cell `i`'s child holds the
//! keys in `[sep[i-1], sep[i])`; `rightmost` holds the keys `>= sep[n-1]`.
//! Separators are strictly increasing. Every child's `level` is its parent's
//! minus one, so all leaves are at the same depth and a descent ends within
//! 64 pages even over corrupted pointers.
//!
//! # Limits
//!
//! `usable = page_size - 48`. A cell plus its slot is at most `usable / 3`
//! bytes, so any two-way split of an overfull page fits in two pages and a
//! page holds at least three cells. Keys longer than [`max_key_len`] are
//! rejected; longer values go to overflow runs.

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::format::codec::{
    put_bytes, put_u16, put_u32, put_u64, put_u8, read_u16, read_u32, read_u64, read_u8, slice_at,
};
use crate::format::page::{PageBuf, PageBytes as _, PageOwned, PageType, HEADER_LEN};
use crate::types::{CfId, PageId};

/// Offset of `content_start`.
const OFF_CONTENT: usize = HEADER_LEN;
/// Offset of `level`.
const OFF_LEVEL: usize = HEADER_LEN + 4;
/// Offset of the reserved byte after `level`.
const OFF_RESERVED: usize = HEADER_LEN + 5;
/// Offset of `dead`.
const OFF_DEAD: usize = HEADER_LEN + 6;
/// Offset of `rightmost`.
const OFF_RIGHTMOST: usize = HEADER_LEN + 8;
/// End of the node header, start of the slot array.
pub(crate) const NODE_HEADER_LEN: usize = HEADER_LEN + 16;
/// Bytes per slot.
pub(crate) const SLOT_LEN: usize = 2;
/// Fixed part of a leaf cell.
pub(crate) const LEAF_CELL_HEADER: usize = 7;
/// Fixed part of a branch cell.
pub(crate) const BRANCH_CELL_HEADER: usize = 10;
/// Size of an overflow pointer in a leaf cell.
pub(crate) const OVERFLOW_PTR_LEN: usize = 8;
/// Highest level a page may have (a root at level 63 is a tree of depth 64).
pub(crate) const MAX_LEVEL: u8 = 63;
/// Flag: the value lives in an overflow run.
const FLAG_OVERFLOW: u8 = 1;

/// Bytes available for slots and cells.
#[inline]
pub(crate) fn usable(page_size: usize) -> usize {
    page_size - NODE_HEADER_LEN
}

/// Largest cell including its slot.
#[inline]
pub(crate) fn max_cell_with_slot(page_size: usize) -> usize {
    usable(page_size) / 3
}

/// Longest key accepted at `page_size`.
pub fn max_key_len(page_size: usize) -> usize {
    let leaf = max_cell_with_slot(page_size) - SLOT_LEN - LEAF_CELL_HEADER - OVERFLOW_PTR_LEN;
    let branch = max_cell_with_slot(page_size) - SLOT_LEN - BRANCH_CELL_HEADER;
    leaf.min(branch).min(u16::MAX as usize)
}

/// Longest value accepted (an overflow run's payload length is a u32).
pub fn max_value_len() -> usize {
    u32::MAX as usize - HEADER_LEN
}

/// True if a value of `value_len` bytes is stored inline next to a key of
/// `key_len` bytes.
#[inline]
pub(crate) fn inline_fits(page_size: usize, key_len: usize, value_len: usize) -> bool {
    SLOT_LEN + LEAF_CELL_HEADER + key_len + value_len <= max_cell_with_slot(page_size)
}

/// A page is underfull when its cells and slots use less than this.
#[inline]
pub(crate) fn underfull_below(page_size: usize) -> usize {
    usable(page_size) / 4
}

/// Where a leaf cell's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ValueLoc {
    /// Bytes `start..end` of the leaf page.
    Inline { start: usize, end: usize },
    /// An overflow run starting at `id` holding `len` bytes.
    Overflow { id: PageId, len: u32 },
}

/// The first eight bytes of `key`, big-endian, zero-padded: a smaller
/// prefix means a smaller key (equal prefixes decide nothing), so a search
/// compares integers from the page's index and reads key bytes only on a
/// tie.
#[inline]
pub(crate) fn key_prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    if let (Some(dst), Some(src)) = (b.get_mut(..n), key.get(..n)) {
        dst.copy_from_slice(src);
    }
    u64::from_be_bytes(b)
}

/// A decoded leaf cell.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeafCell<'a> {
    pub key: &'a [u8],
    /// Offset of the key in the page.
    pub key_off: usize,
    pub value: ValueLoc,
}

/// A validated read-only view of a leaf or branch page. Parsing checks the
/// header; every cell access checks that cell's bounds, so no page content
/// can cause a panic or an out-of-bounds read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeRef<'a> {
    b: &'a [u8],
    page: &'a PageBuf,
    id: PageId,
    count: usize,
    content: usize,
    dead: usize,
    level: u8,
}

/// What [`NodeRef::parse`] found in a node's header, kept by a cursor so
/// the steps within one page do not parse and check it again
/// ([`NodeRef::reparsed`]). Valid only for the page it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeHeader {
    count: usize,
    content: usize,
    dead: usize,
    level: u8,
}

impl<'a> NodeRef<'a> {
    /// The checked header of this node, for [`NodeRef::reparsed`].
    #[inline]
    pub fn header(&self) -> NodeHeader {
        NodeHeader {
            count: self.count,
            content: self.content,
            dead: self.dead,
            level: self.level,
        }
    }

    /// The view of `page` whose header [`NodeRef::parse`] already checked
    /// and returned as `header` (page bytes never change once shared), so
    /// nothing is checked again. The caller keeps `header` with the page
    /// it was parsed from (a cursor frame holds both); debug builds parse
    /// again and compare.
    #[inline]
    pub fn reparsed(page: &'a PageBuf, id: PageId, header: NodeHeader) -> NodeRef<'a> {
        let node = NodeRef {
            b: page.bytes(),
            page,
            id,
            count: header.count,
            content: header.content,
            dead: header.dead,
            level: header.level,
        };
        debug_assert_eq!(
            NodeRef::parse(page, id, page.len())
                .map(|n| n.header())
                .ok(),
            Some(header),
            "a node header kept for another page"
        );
        node
    }

    /// Parses the node header of `page`, which the store returned for `id`.
    pub fn parse(page: &'a PageBuf, id: PageId, page_size: usize) -> Result<NodeRef<'a>> {
        let b = page.bytes();
        if b.len() != page_size || page_size < 4 * NODE_HEADER_LEN {
            return Err(Error::corrupted_page(id, "tree page has the wrong length"));
        }
        let is_leaf = match page.page_type() {
            Some(PageType::Leaf) => true,
            Some(PageType::Branch) => false,
            other => {
                return Err(Error::corrupted_page(
                    id,
                    format!("expected a tree page, found type {other:?}"),
                ))
            }
        };
        let level = read_u8(b, OFF_LEVEL);
        if is_leaf != (level == 0) || level > MAX_LEVEL {
            return Err(Error::corrupted_page(id, format!("bad node level {level}")));
        }
        if read_u8(b, OFF_RESERVED) != 0 {
            return Err(Error::corrupted_page(
                id,
                "reserved node header byte not zero",
            ));
        }
        if is_leaf && read_u64(b, OFF_RIGHTMOST) != 0 {
            return Err(Error::corrupted_page(id, "leaf has a rightmost child"));
        }
        let count = page.count() as usize;
        let content = read_u32(b, OFF_CONTENT) as usize;
        let dead = read_u16(b, OFF_DEAD) as usize;
        let slots_end = NODE_HEADER_LEN + count * SLOT_LEN;
        if slots_end > content || content > b.len() || dead > b.len() - content {
            return Err(Error::corrupted_page(
                id,
                format!("cell count {count}, content start {content}, dead {dead} out of bounds"),
            ));
        }
        Ok(NodeRef {
            b,
            page,
            id,
            count,
            content,
            dead,
            level,
        })
    }

    /// The page id this view was parsed for.
    #[inline]
    pub fn id(&self) -> PageId {
        self.id
    }

    /// Number of cells.
    #[inline]
    pub fn count(&self) -> usize {
        self.count
    }

    /// Level (0 = leaf).
    #[inline]
    pub fn level(&self) -> u8 {
        self.level
    }

    /// True for a leaf.
    #[inline]
    pub fn is_leaf(&self) -> bool {
        self.level == 0
    }

    /// Bytes of the contiguous gap between the slot array and the cells.
    #[inline]
    pub fn gap(&self) -> usize {
        self.content - (NODE_HEADER_LEN + self.count * SLOT_LEN)
    }

    fn corrupt(&self, what: impl Into<String>) -> Error {
        Error::corrupted_page(self.id, what)
    }

    /// Offset of cell `i`, checked to lie in the cell area.
    #[inline]
    fn cell_off(&self, i: usize) -> Result<usize> {
        debug_assert!(i < self.count, "cell {i} of {}", self.count);
        let off = read_u16(self.b, NODE_HEADER_LEN + i * SLOT_LEN) as usize;
        if off < self.content || off >= self.b.len() {
            return Err(self.corrupt(format!("slot {i} points outside the cell area")));
        }
        Ok(off)
    }

    /// Hints the CPU to fetch the headers of cells `from .. from + n` (of
    /// those that exist): a cursor walking the leaf reads them next. Reads
    /// only the slot array; a slot pointing outside the page is skipped
    /// here and reported when its cell is decoded.
    pub fn prefetch_cells(&self, from: usize, n: usize) {
        for i in from..from.saturating_add(n).min(self.count) {
            let off = read_u16(self.b, NODE_HEADER_LEN + i * SLOT_LEN) as usize;
            if let Some(cell) = self.b.get(off..) {
                crate::storage::hint::prefetch(cell);
            }
        }
    }

    /// Reads `len` bytes at `off`, failing if they pass the page end.
    #[inline]
    fn span(&self, off: usize, len: usize, what: &str) -> Result<&'a [u8]> {
        match off.checked_add(len) {
            Some(_) => slice_at(self.b, off, len)
                .ok_or_else(|| self.corrupt(format!("{what} passes the page end"))),
            None => Err(self.corrupt(format!("{what} passes the page end"))),
        }
    }

    /// Decodes leaf cell `i` and returns it with its total length in bytes.
    pub fn leaf_cell_with_len(&self, i: usize) -> Result<(LeafCell<'a>, usize)> {
        debug_assert!(self.is_leaf());
        let off = self.cell_off(i)?;
        let h = self.span(off, LEAF_CELL_HEADER, "leaf cell header")?;
        let klen = read_u16(h, 0) as usize;
        let vlen = read_u32(h, 2) as usize;
        let flags = read_u8(h, 6);
        let key = self.span(off + LEAF_CELL_HEADER, klen, "leaf key")?;
        let vstart = off + LEAF_CELL_HEADER + klen;
        let page_size = self.b.len();
        match flags {
            0 => {
                if !inline_fits(page_size, klen, vlen) {
                    return Err(self.corrupt(format!("inline value of cell {i} too long")));
                }
                self.span(vstart, vlen, "inline value")?;
                let value = ValueLoc::Inline {
                    start: vstart,
                    end: vstart + vlen,
                };
                let cell = LeafCell {
                    key,
                    key_off: off + LEAF_CELL_HEADER,
                    value,
                };
                Ok((cell, LEAF_CELL_HEADER + klen + vlen))
            }
            FLAG_OVERFLOW => {
                if inline_fits(page_size, klen, vlen) || vlen > max_value_len() {
                    return Err(self.corrupt(format!("overflow length of cell {i} invalid")));
                }
                let ptr = self.span(vstart, OVERFLOW_PTR_LEN, "overflow pointer")?;
                let value = ValueLoc::Overflow {
                    id: PageId(read_u64(ptr, 0)),
                    len: vlen as u32,
                };
                let cell = LeafCell {
                    key,
                    key_off: off + LEAF_CELL_HEADER,
                    value,
                };
                Ok((cell, LEAF_CELL_HEADER + klen + OVERFLOW_PTR_LEN))
            }
            f => Err(self.corrupt(format!("unknown leaf cell flags {f:#x}"))),
        }
    }

    /// Decodes leaf cell `i`.
    #[inline]
    pub fn leaf_cell(&self, i: usize) -> Result<LeafCell<'a>> {
        Ok(self.leaf_cell_with_len(i)?.0)
    }

    /// Decodes leaf cell `i` and returns it with its encoded bytes.
    pub fn leaf_cell_raw(&self, i: usize) -> Result<(LeafCell<'a>, &'a [u8])> {
        let (cell, len) = self.leaf_cell_with_len(i)?;
        let bytes = self.span(self.cell_off(i)?, len, "cell")?;
        Ok((cell, bytes))
    }

    /// Key of leaf cell `i` (does not decode the value).
    #[inline]
    pub fn leaf_key(&self, i: usize) -> Result<&'a [u8]> {
        debug_assert!(self.is_leaf());
        let off = self.cell_off(i)?;
        let h = self.span(off, LEAF_CELL_HEADER, "leaf cell header")?;
        let klen = read_u16(h, 0) as usize;
        self.span(off + LEAF_CELL_HEADER, klen, "leaf key")
    }

    /// Separator `i` of a branch.
    #[inline]
    pub fn branch_key(&self, i: usize) -> Result<&'a [u8]> {
        debug_assert!(!self.is_leaf());
        let off = self.cell_off(i)?;
        let h = self.span(off, BRANCH_CELL_HEADER, "branch cell header")?;
        let klen = read_u16(h, 8) as usize;
        self.span(off + BRANCH_CELL_HEADER, klen, "separator")
    }

    /// Child `i` of a branch, `0 ..= count` (`count` is the rightmost).
    pub fn child(&self, i: usize) -> Result<PageId> {
        debug_assert!(!self.is_leaf());
        debug_assert!(i <= self.count);
        if i == self.count {
            return Ok(PageId(read_u64(self.b, OFF_RIGHTMOST)));
        }
        let off = self.cell_off(i)?;
        let h = self.span(off, BRANCH_CELL_HEADER, "branch cell header")?;
        Ok(PageId(read_u64(h, 0)))
    }

    /// The raw bytes of cell `i` (bounds and encoding checked).
    pub fn cell_bytes(&self, i: usize) -> Result<&'a [u8]> {
        if self.is_leaf() {
            return Ok(self.leaf_cell_raw(i)?.1);
        }
        let len = BRANCH_CELL_HEADER + self.branch_key(i)?.len();
        self.span(self.cell_off(i)?, len, "cell")
    }

    /// Bytes used by cells and slots (what a compacted copy would use),
    /// from the header: O(1). Exact for pages this module wrote; see
    /// [`NodeRef::used_exact`].
    pub fn used(&self) -> usize {
        self.count * SLOT_LEN + (self.b.len() - self.content - self.dead)
    }

    /// Bytes used by cells and slots, summed cell by cell (validating each).
    pub fn used_exact(&self) -> Result<usize> {
        let mut total = 0usize;
        for i in 0..self.count {
            total += self.cell_bytes(i)?.len() + SLOT_LEN;
        }
        Ok(total)
    }

    /// Key (leaf) or separator (branch) `i`.
    #[inline]
    fn key_at(&self, i: usize) -> Result<&'a [u8]> {
        if self.is_leaf() {
            self.leaf_key(i)
        } else {
            self.branch_key(i)
        }
    }

    /// Derives the page's search index (the first eight bytes of each key
    /// or separator, big-endian, zero-padded: see [`key_prefix`]) and keeps
    /// it with the page, unless it is there already. Done for pages shared
    /// through the cache (never mutated); a page whose keys do not decode
    /// gets none (its searches read the bytes and report the damage).
    pub fn build_index(&self) {
        self.page.index_or(|_| {
            // Sized once: collecting through `Option` loses the length, and
            // growing by doubling reallocated five or six times per page
            // (16 % of a checkpoint's time, in glibc's `realloc`).
            let mut ix = Vec::with_capacity(self.count);
            for i in 0..self.count {
                ix.push(key_prefix(self.key_at(i).ok()?));
            }
            Some(ix.into_boxed_slice())
        });
    }

    /// The page's search index, if built and matching this view.
    #[inline]
    fn index(&self) -> Option<&'a [u64]> {
        let page: &'a PageBuf = self.page;
        let ix = page.index_or(|_| None)?;
        (ix.len() == self.count).then_some(ix)
    }

    /// Compares the key at `i` with `key` (whose prefix is `kp`): through
    /// the index where the prefixes differ, else by the bytes.
    #[inline]
    fn cmp_at(&self, ix: Option<&[u64]>, i: usize, key: &[u8], kp: u64) -> Result<Ordering> {
        if let Some(p) = ix.and_then(|ix| ix.get(i)) {
            if *p != kp {
                return Ok(p.cmp(&kp));
            }
        }
        Ok(self.key_at(i)?.cmp(key))
    }

    /// In a leaf: the first position whose key is `>= key`, and whether it
    /// is equal.
    pub fn leaf_search(&self, key: &[u8]) -> Result<(usize, bool)> {
        debug_assert!(self.is_leaf());
        let (ix, kp) = (self.index(), key_prefix(key));
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.cmp_at(ix, mid, key, kp)? {
                Ordering::Less => lo = mid + 1,
                Ordering::Equal => return Ok((mid, true)),
                Ordering::Greater => hi = mid,
            }
        }
        Ok((lo, false))
    }

    /// In a branch: the number of separators `<= key`, i.e. the child that
    /// holds `key`.
    pub fn branch_search(&self, key: &[u8]) -> Result<usize> {
        debug_assert!(!self.is_leaf());
        let (ix, kp) = (self.index(), key_prefix(key));
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.cmp_at(ix, mid, key, kp)? != Ordering::Greater {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// In a branch: the number of separators `< key`, i.e. the child that
    /// holds the greatest keys below `key`.
    pub fn branch_search_lt(&self, key: &[u8]) -> Result<usize> {
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.branch_key(mid)? < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Checks every cell: in bounds, inside the cell area, not overlapping
    /// another cell. Used by the integrity walk and before copying a page.
    pub fn check_cells(&self) -> Result<()> {
        let mut spans = Vec::with_capacity(self.count);
        for i in 0..self.count {
            let off = self.cell_off(i)?;
            spans.push((off, off + self.cell_bytes(i)?.len()));
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if let [(_, a_end), (b_start, _)] = w {
                if a_end > b_start {
                    return Err(self.corrupt("cells overlap"));
                }
            }
        }
        if self.used_exact()? != self.used() {
            return Err(self.corrupt("dead byte count disagrees with the cells"));
        }
        Ok(())
    }
}

/// A cell to write into a page: new contents or a copy of an existing cell.
#[derive(Clone, Copy, Debug)]
pub(crate) enum NewCell<'a> {
    /// A leaf cell with its value inline.
    LeafInline { key: &'a [u8], value: &'a [u8] },
    /// A leaf cell pointing at an overflow run.
    LeafOverflow { key: &'a [u8], id: PageId, len: u32 },
    /// A branch cell.
    Branch { child: PageId, key: &'a [u8] },
    /// A copy of an encoded cell (already validated by [`NodeRef`]).
    Raw { leaf: bool, bytes: &'a [u8] },
}

impl<'a> NewCell<'a> {
    /// Encoded length in bytes (without the slot).
    pub fn len(&self) -> usize {
        match self {
            NewCell::LeafInline { key, value } => LEAF_CELL_HEADER + key.len() + value.len(),
            NewCell::LeafOverflow { key, .. } => LEAF_CELL_HEADER + key.len() + OVERFLOW_PTR_LEN,
            NewCell::Branch { key, .. } => BRANCH_CELL_HEADER + key.len(),
            NewCell::Raw { bytes, .. } => bytes.len(),
        }
    }

    /// True for leaf cells.
    pub fn is_leaf(&self) -> bool {
        match self {
            NewCell::LeafInline { .. } | NewCell::LeafOverflow { .. } => true,
            NewCell::Branch { .. } => false,
            NewCell::Raw { leaf, .. } => *leaf,
        }
    }

    /// The key (leaf) or separator (branch).
    pub fn key(&self) -> &'a [u8] {
        match self {
            NewCell::LeafInline { key, .. }
            | NewCell::LeafOverflow { key, .. }
            | NewCell::Branch { key, .. } => key,
            NewCell::Raw { leaf: true, bytes } => {
                let klen = read_u16(bytes, 0) as usize;
                slice_at(bytes, LEAF_CELL_HEADER, klen).unwrap_or_default()
            }
            NewCell::Raw { leaf: false, bytes } => {
                let klen = read_u16(bytes, 8) as usize;
                slice_at(bytes, BRANCH_CELL_HEADER, klen).unwrap_or_default()
            }
        }
    }

    /// The child of a branch cell.
    pub fn child(&self) -> PageId {
        match self {
            NewCell::Branch { child, .. } => *child,
            NewCell::Raw { leaf: false, bytes } => PageId(read_u64(bytes, 0)),
            _ => unreachable!("child() of a leaf cell"),
        }
    }

    /// Writes the encoded cell into `dst` (exactly `self.len()` bytes).
    pub fn write(&self, dst: &mut [u8]) {
        debug_assert_eq!(dst.len(), self.len());
        match self {
            NewCell::LeafInline { key, value } => {
                write_leaf_header(dst, key, value.len() as u32, 0);
                put_bytes(dst, LEAF_CELL_HEADER + key.len(), value);
            }
            NewCell::LeafOverflow { key, id, len } => {
                write_leaf_header(dst, key, *len, FLAG_OVERFLOW);
                put_u64(dst, LEAF_CELL_HEADER + key.len(), id.0);
            }
            NewCell::Branch { child, key } => {
                debug_assert!(key.len() <= u16::MAX as usize);
                put_u64(dst, 0, child.0);
                put_u16(dst, 8, key.len() as u16);
                put_bytes(dst, BRANCH_CELL_HEADER, key);
            }
            NewCell::Raw { bytes, .. } => dst.copy_from_slice(bytes),
        }
    }
}

fn write_leaf_header(dst: &mut [u8], key: &[u8], vlen: u32, flags: u8) {
    debug_assert!(key.len() <= u16::MAX as usize);
    put_u16(dst, 0, key.len() as u16);
    put_u32(dst, 2, vlen);
    put_u8(dst, 6, flags);
    put_bytes(dst, LEAF_CELL_HEADER, key);
}

/// Builds a fresh node page cell by cell, in key order.
pub(crate) struct NodeBuilder {
    buf: PageOwned,
    count: usize,
    content: usize,
    level: u8,
}

impl NodeBuilder {
    /// An empty node of `level` for page `id`.
    pub fn new(page_size: usize, id: PageId, cf: CfId, level: u8) -> NodeBuilder {
        debug_assert!(level <= MAX_LEVEL);
        let ty = if level == 0 {
            PageType::Leaf
        } else {
            PageType::Branch
        };
        let mut buf = PageBuf::new_run(page_size, 1, ty, id, cf);
        put_u8(buf.bytes_mut(), OFF_LEVEL, level);
        NodeBuilder {
            buf,
            count: 0,
            content: page_size,
            level,
        }
    }

    /// Appends a cell after the ones pushed so far. Fails (rather than
    /// panicking) if it does not fit; callers check sizes first.
    pub fn push(&mut self, cell: &NewCell) -> Result<()> {
        debug_assert_eq!(cell.is_leaf(), self.level == 0);
        let len = cell.len();
        let slots_end = NODE_HEADER_LEN + (self.count + 1) * SLOT_LEN;
        if len + slots_end > self.content {
            return Err(Error::corrupted_page(
                self.buf.page_id(),
                "cells do not fit in one page",
            ));
        }
        let off = self.content - len;
        cell.write(region(self.buf.bytes_mut(), off, self.content));
        set_slot(&mut self.buf, self.count, off);
        self.content = off;
        self.count += 1;
        Ok(())
    }

    /// True if a cell of `len` encoded bytes (and its slot) still fits.
    pub fn fits(&self, len: usize) -> bool {
        NODE_HEADER_LEN + (self.count + 1) * SLOT_LEN + len <= self.content
    }

    /// Sets the rightmost child of a branch.
    pub fn set_rightmost(&mut self, child: PageId) {
        debug_assert!(self.level > 0);
        put_u64(self.buf.bytes_mut(), OFF_RIGHTMOST, child.0);
    }

    /// The finished page.
    pub fn finish(mut self) -> PageOwned {
        debug_assert!(self.count <= u16::MAX as usize);
        self.buf.set_count(self.count as u16);
        set_content(&mut self.buf, self.content);
        self.buf
    }
}

/// A compacted copy of `node` as page `id` (cells, order and rightmost
/// child preserved). Fails if the cells are corrupt.
pub(crate) fn rebuild(node: &NodeRef, page_size: usize, id: PageId, cf: CfId) -> Result<PageOwned> {
    if node.used_exact()? > usable(page_size) {
        return Err(node.corrupt("cells overflow the page"));
    }
    let mut b = NodeBuilder::new(page_size, id, cf, node.level());
    let leaf = node.is_leaf();
    for i in 0..node.count() {
        b.push(&NewCell::Raw {
            leaf,
            bytes: node.cell_bytes(i)?,
        })?;
    }
    if !leaf {
        b.set_rightmost(node.child(node.count())?);
    }
    Ok(b.finish())
}

/// A byte-for-byte copy of node page `page` (read for `old`) as page `id`
/// (only the common header's identity fields differ). Cells are not
/// re-validated: every later access to them is checked anyway.
pub(crate) fn copy_node(
    page: &PageBuf,
    old: PageId,
    page_size: usize,
    id: PageId,
    cf: CfId,
) -> Result<PageOwned> {
    let node = NodeRef::parse(page, old, page_size)?;
    let ty = if node.is_leaf() {
        PageType::Leaf
    } else {
        PageType::Branch
    };
    let mut copy = PageBuf::new_run(page_size, 1, ty, id, cf);
    copy.set_count(node.count() as u16);
    let body = page.bytes().get(HEADER_LEN..).unwrap_or_default();
    put_bytes(copy.bytes_mut(), HEADER_LEN, body);
    Ok(copy)
}

/// Points leaf cell `i` of a private page, an overflow cell, at the run
/// starting at `run`.
pub(crate) fn set_overflow(page: &mut PageBuf, i: usize, run: PageId) -> Result<()> {
    let at = {
        let n = view(page)?;
        let (cell, len) = n.leaf_cell_with_len(i)?;
        if !matches!(cell.value, ValueLoc::Overflow { .. }) {
            return Err(Error::corrupted_page(
                n.id(),
                format!("cell {i} is not an overflow cell"),
            ));
        }
        let off = n.cell_off(i)?;
        debug_assert_eq!(len, LEAF_CELL_HEADER + cell.key.len() + OVERFLOW_PTR_LEN);
        off + LEAF_CELL_HEADER + cell.key.len()
    };
    put_u64(page.bytes_mut(), at, run.0);
    Ok(())
}

fn set_slot(page: &mut PageBuf, i: usize, off: usize) {
    debug_assert!(off < page.len() && off <= u16::MAX as usize);
    let at = NODE_HEADER_LEN + i * SLOT_LEN;
    put_u16(page.bytes_mut(), at, off as u16);
}

fn set_dead(page: &mut PageBuf, dead: usize) {
    debug_assert!(dead <= u16::MAX as usize);
    put_u16(page.bytes_mut(), OFF_DEAD, dead as u16);
}

fn set_content(page: &mut PageBuf, content: usize) {
    debug_assert!(content <= page.len());
    put_u32(page.bytes_mut(), OFF_CONTENT, content as u32);
}

/// Bytes `start..end` of an engine-built page; out of range is an engine
/// bug (callers computed both from the page's own header).
fn region(b: &mut [u8], start: usize, end: usize) -> &mut [u8] {
    let len = b.len();
    match b.get_mut(start..end) {
        Some(r) => r,
        None => panic!("node region {start}..{end} outside a page of {len} bytes"),
    }
}

/// The view of a private page (built by this module, so parsing only fails
/// on a bug; the error is still returned rather than panicking).
fn view(page: &PageBuf) -> Result<NodeRef<'_>> {
    NodeRef::parse(page, page.page_id(), page.len())
}

/// Inserts `cell` at slot position `pos` of a private page, compacting if
/// the gap is too small. Returns false, leaving the page unchanged, if the
/// cell does not fit at all.
pub(crate) fn insert_cell(page: &mut PageBuf, pos: usize, cell: &NewCell) -> Result<bool> {
    let need = cell.len() + SLOT_LEN;
    let (count, gap, used) = {
        let n = view(page)?;
        debug_assert_eq!(n.is_leaf(), cell.is_leaf());
        debug_assert!(pos <= n.count());
        (n.count(), n.gap(), n.used())
    };
    if gap < need {
        if used + need > usable(page.len()) {
            return Ok(false);
        }
        compact(page)?;
        // `used` comes from the header; only trust what compaction made.
        if view(page)?.gap() < need {
            return Ok(false);
        }
    }
    let content = read_u32(page.bytes(), OFF_CONTENT) as usize;
    debug_assert!(content - (NODE_HEADER_LEN + count * SLOT_LEN) >= need);
    let off = content - cell.len();
    cell.write(region(page.bytes_mut(), off, content));
    let slot_at = NODE_HEADER_LEN + pos * SLOT_LEN;
    let slots_end = NODE_HEADER_LEN + count * SLOT_LEN;
    page.bytes_mut()
        .copy_within(slot_at..slots_end, slot_at + SLOT_LEN);
    set_slot(page, pos, off);
    set_content(page, off);
    page.set_count((count + 1) as u16);
    Ok(true)
}

/// Removes cell `pos` of a private page. Its bytes become dead space unless
/// it was the lowest cell.
pub(crate) fn remove_cell(page: &mut PageBuf, pos: usize) -> Result<()> {
    let (count, off, len, content, dead) = {
        let n = view(page)?;
        debug_assert!(pos < n.count());
        let bytes = n.cell_bytes(pos)?;
        (n.count(), n.cell_off(pos)?, bytes.len(), n.content, n.dead)
    };
    if off == content {
        set_content(page, content + len);
    } else {
        // Never more than the cell area, even if a copied page lied.
        set_dead(page, (dead + len).min(page.len() - content));
    }
    let slot_at = NODE_HEADER_LEN + pos * SLOT_LEN;
    let slots_end = NODE_HEADER_LEN + count * SLOT_LEN;
    page.bytes_mut()
        .copy_within(slot_at + SLOT_LEN..slots_end, slot_at);
    page.set_count((count - 1) as u16);
    Ok(())
}

/// Points child `i` (`0 ..= count`) of a private branch at `child`.
pub(crate) fn set_child(page: &mut PageBuf, i: usize, child: PageId) -> Result<()> {
    let at = {
        let n = view(page)?;
        debug_assert!(!n.is_leaf() && i <= n.count());
        if i == n.count() {
            OFF_RIGHTMOST
        } else {
            n.cell_off(i)?
        }
    };
    put_u64(page.bytes_mut(), at, child.0);
    Ok(())
}

/// Removes child `i` (`0 ..= count`) of a private branch together with an
/// adjacent separator: cell `i` when `i < count`, else the last cell (whose
/// child becomes the rightmost). Returns true, leaving the page unchanged,
/// if the branch had no separators, i.e. it just lost its only child.
pub(crate) fn remove_child(page: &mut PageBuf, i: usize) -> Result<bool> {
    let (count, last_child) = {
        let n = view(page)?;
        debug_assert!(!n.is_leaf() && i <= n.count());
        if n.count() == 0 {
            return Ok(true);
        }
        (n.count(), n.child(n.count() - 1)?)
    };
    if i < count {
        remove_cell(page, i)?;
    } else {
        set_child(page, count, last_child)?;
        remove_cell(page, count - 1)?;
    }
    Ok(false)
}

/// Rewrites a private page with its cells packed at the end.
fn compact(page: &mut PageBuf) -> Result<()> {
    let rebuilt = {
        let n = view(page)?;
        rebuild(&n, page.len(), page.page_id(), page.cf())?
    };
    page.bytes_mut().copy_from_slice(rebuilt.bytes());
    Ok(())
}

/// The shortest key `s` with `left < s <= right` (requires `left < right`).
pub(crate) fn shortest_separator<'r>(left: &[u8], right: &'r [u8]) -> &'r [u8] {
    debug_assert!(left < right);
    let common = left
        .iter()
        .zip(right.iter())
        .take_while(|(a, b)| a == b)
        .count();
    let sep = right.get(..common + 1).unwrap_or(right);
    debug_assert!(left < sep && sep <= right);
    sep
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests index and unwrap their own fixtures"
)]
mod tests {
    use super::*;
    use crate::format::page::page_from_slice;

    const PS: usize = 4096;

    fn leaf(id: u64) -> PageOwned {
        NodeBuilder::new(PS, PageId(id), CfId(1), 0).finish()
    }

    #[test]
    fn limits_at_4k() {
        assert!(max_key_len(PS) >= 1024);
        assert!(inline_fits(PS, max_key_len(PS), 0));
        assert!(max_key_len(65536) <= u16::MAX as usize);
        assert_eq!(max_value_len(), u32::MAX as usize - 32);
    }

    #[test]
    fn insert_remove_compact() {
        let mut p = leaf(7);
        let keys: Vec<Vec<u8>> = (0..100u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let mut n = 0;
        for k in &keys {
            let cell = NewCell::LeafInline {
                key: k,
                value: b"0123456789",
            };
            if !insert_cell(&mut p, n, &cell).unwrap() {
                break;
            }
            n += 1;
        }
        assert_eq!(n, 100);
        // Remove every other cell, then refill: needs compaction.
        for i in (0..n / 2).rev() {
            remove_cell(&mut p, i * 2).unwrap();
        }
        let v = view(&p).unwrap();
        let remaining = v.count();
        assert_eq!(remaining, n - n / 2);
        for i in 0..remaining {
            assert_eq!(v.leaf_key(i).unwrap(), &keys[i * 2 + 1][..]);
        }
        let cell = NewCell::LeafInline {
            key: b"",
            value: &[9u8; 600],
        };
        assert!(insert_cell(&mut p, 0, &cell).unwrap());
        let v = view(&p).unwrap();
        v.check_cells().unwrap();
        assert_eq!(v.leaf_key(0).unwrap(), b"");
        let c = v.leaf_cell(0).unwrap();
        match c.value {
            ValueLoc::Inline { start, end } => assert_eq!(&p.bytes()[start..end], &[9u8; 600][..]),
            _ => panic!(),
        }
    }

    #[test]
    fn branch_children() {
        let mut b = NodeBuilder::new(PS, PageId(3), CfId(1), 1);
        b.push(&NewCell::Branch {
            child: PageId(10),
            key: b"m",
        })
        .unwrap();
        b.set_rightmost(PageId(11));
        let mut p = b.finish();
        let v = view(&p).unwrap();
        assert_eq!(v.branch_search(b"a").unwrap(), 0);
        assert_eq!(v.branch_search(b"m").unwrap(), 1);
        assert_eq!(v.branch_search_lt(b"m").unwrap(), 0);
        set_child(&mut p, 1, PageId(12)).unwrap();
        let v = view(&p).unwrap();
        assert_eq!(v.child(0).unwrap(), PageId(10));
        assert_eq!(v.child(1).unwrap(), PageId(12));
    }

    /// Searches through the page's index give exactly what searches over
    /// the bytes give, for keys with shared, equal and short prefixes, in
    /// leaves and branches; mutating the page drops the index.
    #[test]
    fn indexed_search_equals_byte_search() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let gen = |rng: &mut rand::rngs::StdRng| -> Vec<u8> {
            let n = rng.gen_range(0..14);
            let mut k: Vec<u8> = (0..n).map(|_| rng.gen_range(0..3u8)).collect();
            if rng.gen_bool(0.3) {
                k.splice(0..0, b"commonpfx".iter().copied());
            }
            k
        };
        for round in 0..300 {
            let mut keys: Vec<Vec<u8>> = (0..rng.gen_range(1..60)).map(|_| gen(&mut rng)).collect();
            keys.sort();
            keys.dedup();
            let level = if round % 2 == 0 { 0 } else { 1 };
            let mut b = NodeBuilder::new(PS, PageId(3), CfId(1), level);
            for (i, k) in keys.iter().enumerate() {
                let cell = if level == 0 {
                    NewCell::LeafInline {
                        key: k,
                        value: b"v",
                    }
                } else {
                    NewCell::Branch {
                        child: PageId(100 + i as u64),
                        key: k,
                    }
                };
                b.push(&cell).unwrap();
            }
            if level > 0 {
                b.set_rightmost(PageId(99));
            }
            let plain = b.finish();
            let indexed = page_from_slice(plain.bytes());
            let pv = view(&plain).unwrap();
            let iv = view(&indexed).unwrap();
            iv.build_index();
            assert!(iv.index().is_some(), "no index was built");
            assert!(pv.index().is_none());
            for _ in 0..100 {
                let probe = gen(&mut rng);
                if level == 0 {
                    assert_eq!(
                        pv.leaf_search(&probe).unwrap(),
                        iv.leaf_search(&probe).unwrap()
                    );
                } else {
                    assert_eq!(
                        pv.branch_search(&probe).unwrap(),
                        iv.branch_search(&probe).unwrap()
                    );
                }
            }
            // A copy made for writing keeps the index; the write drops it.
            let mut shared = indexed.shareable();
            let reader = shared.clone();
            let changed = crate::format::page::make_mut(&mut shared);
            assert!(
                view(changed).unwrap().index().is_some(),
                "a copy lost the index"
            );
            changed.set_count(0);
            assert!(
                view(changed).unwrap().index().is_none(),
                "a mutated page kept its index"
            );
            assert!(
                view(&reader).unwrap().index().is_some(),
                "a reader's page changed"
            );
        }
    }

    #[test]
    fn separators() {
        assert_eq!(shortest_separator(b"abc", b"abd"), b"abd");
        assert_eq!(shortest_separator(b"ab", b"abzz"), b"abz");
        assert_eq!(shortest_separator(b"", b"q"), b"q");
        assert_eq!(shortest_separator(b"a", b"zzz"), b"z");
    }

    #[test]
    fn garbage_pages_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for _ in 0..2000 {
            let mut p = leaf(1);
            let bytes = p.bytes_mut();
            let n = rng.gen_range(0..64);
            for _ in 0..n {
                let i = rng.gen_range(4..bytes.len().min(200));
                bytes[i] = rng.gen();
            }
            if rng.gen_bool(0.5) {
                bytes[4] = 1;
            }
            if let Ok(v) = NodeRef::parse(&p, PageId(1), PS) {
                for i in 0..v.count() {
                    let _ = v.cell_bytes(i);
                    if v.is_leaf() {
                        let _ = v.leaf_cell(i);
                    } else {
                        let _ = v.child(i);
                    }
                }
                let _ = v.used_exact();
                let _ = v.check_cells();
                if v.is_leaf() {
                    let _ = v.leaf_search(b"k");
                } else {
                    let _ = v.branch_search(b"k");
                }
            }
        }
    }
}
