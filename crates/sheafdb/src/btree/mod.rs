//! Copy-on-write B+tree over byte-string keys ordered by plain byte
//! comparison.
//!
//! Owns: the page format of tree pages (module `node`), search, the
//! double-ended range [`Cursor`], copy-on-write insertion and deletion with
//! splits and merges, overflow runs for large values, and the integrity
//! [`walk`]. A tree is described by a [`TreeRoot`] (root page and exact entry
//! count) that the caller stores wherever it likes.
//!
//! Must not know: the WAL, transactions, versions, files, caches or the
//! allocator. Pages are reached only through [`store::PageRead`] /
//! [`store::PageWrite`].
//!
//! Invariants kept (and asserted):
//! - A page the store reports as not private is never modified: it is copied
//!   to a new page (and freed) first, and so are its ancestors, up to the
//!   root. Private pages are edited in place.
//! - Every page or overflow run that stops being referenced is passed to
//!   `store.free` exactly once.
//! - All leaves are at level 0 and every child is one level below its
//!   parent; separators bound the keys of their subtrees; keys in a page are
//!   strictly increasing.
//! - No page except a root leaf is empty; a root branch has at least one
//!   separator; an empty tree has `root: None`.
//! - `TreeRoot::len` is the exact number of entries.
//! - No byte sequence in a page can cause a panic, a hang or an allocation
//!   sized by a length field (other than an overflow value's own length,
//!   which is bounded by [`max_value_len`]): every decode is checked and
//!   bad contents give `Error::Corrupted` naming the page.

mod batch;
mod cursor;
mod dirty;
mod mutate;
mod node;
mod pack;
mod relocate;
pub mod store;
mod walk;

#[cfg(test)]
pub(crate) mod mem_store;
#[cfg(test)]
mod tests;

use crate::error::{Error, Result};
use crate::format::page::{
    page_from_slice, pages_for_payload, PageBytes as _, PageHandle, PageRef, PageType, HEADER_LEN,
};
use crate::types::PageId;

pub use batch::{apply_sorted, BatchWrite, SortedWrite};
pub use cursor::Cursor;
pub use dirty::collect_dirty;
pub use mutate::{check_limits, insert, remove};
#[cfg(test)]
pub use mutate::{delete, drain_filter, pop_first, pop_last, put, retain};
pub(crate) use node::key_prefix;
#[cfg(test)]
pub use node::max_key_len;
pub use node::max_value_len;
pub use pack::repack;
pub use relocate::relocate;
pub use walk::{clear, tree_stats, walk, TreeStats};

use node::{NodeRef, ValueLoc, MAX_LEVEL};
use store::PageRead;

/// Where a tree lives and how many entries it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TreeRoot {
    /// The root page, or `None` for an empty tree.
    pub root: Option<PageId>,
    /// Number of entries, kept exact so `len()` is O(1).
    pub len: u64,
}

impl TreeRoot {}

/// Zero-copy bytes of a key or value: a range of a page (or overflow run)
/// that this handle keeps alive.
#[derive(Clone)]
pub struct Bytes {
    page: PageRef,
    start: usize,
    end: usize,
}

/// A key returned by the tree.
pub type KeyRef = Bytes;
/// A value returned by the tree.
pub type ValueRef = Bytes;

impl Bytes {
    /// Bytes `start..end` of `page`.
    pub(crate) fn new(page: PageRef, start: usize, end: usize) -> Bytes {
        debug_assert!(start <= end && end <= page.len());
        Bytes { page, start, end }
    }

    /// An owned copy of `data` (used when the page it came from is about to
    /// be edited in place).
    pub fn copy_from(data: &[u8]) -> Bytes {
        let page = page_from_slice(data).shareable();
        Bytes::new(page, 0, data.len())
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.page.bytes()[self.start..self.end]
    }

    /// An owned copy.
    pub fn to_vec(&self) -> Vec<u8> {
        self.as_slice().to_vec()
    }

    /// The bytes from offset `from` on, sharing the page.
    ///
    /// # Panics
    /// If `from` is past the end (callers split bytes they have checked).
    pub fn suffix(&self, from: usize) -> Bytes {
        assert!(from <= self.end - self.start, "suffix past the end");
        Bytes::new(self.page.clone(), self.start + from, self.end)
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.as_slice();
        if s.len() <= 64 {
            write!(f, "Bytes({s:?})")
        } else {
            write!(f, "Bytes({:?}.. {} bytes)", &s[..64], s.len())
        }
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Bytes {}

/// Reads tree page `id` and checks that it is at `expect_level` (if given).
/// Returns a handle on the page (no new reference when it comes from the
/// cache); callers re-parse it (parsing is a few header checks).
pub(crate) fn read_node<S: PageRead + ?Sized>(
    store: &S,
    id: PageId,
    expect_level: Option<u8>,
) -> Result<PageHandle> {
    read_node_for(store, id, expect_level, true)
}

/// [`read_node`] for a caller that searches a leaf for a key (`search`)
/// or only walks its cells from one end (a scan: a repack, a backup, the
/// next leaf of a range). A scan neither builds a leaf's index nor counts
/// as the search after which one is built: a repack right after a backup
/// built an index for every leaf it copied and then freed
/// (design.md "A search index kept with the page").
pub(crate) fn read_node_for<S: PageRead + ?Sized>(
    store: &S,
    id: PageId,
    expect_level: Option<u8>,
    search: bool,
) -> Result<PageHandle> {
    let page = store.read_handle(id, 1)?;
    let node = NodeRef::parse(&page, id, store.page_size())?;
    // Shared through the cache, so never mutated: worth an index; a leaf
    // only once it is searched again (building it costs more than one
    // search, and a fold replaces every leaf it touches).
    let cached = matches!(page, PageHandle::Slot(_));
    if cached && (!node.is_leaf() || (search && page.searched_before())) {
        node.build_index();
    }
    if let Some(level) = expect_level {
        if node.level() != level {
            return Err(Error::corrupted_page(
                id,
                format!(
                    "page at level {} where level {level} was expected",
                    node.level()
                ),
            ));
        }
    }
    Ok(page)
}

/// The level a child of a branch at `level` must have.
#[inline]
pub(crate) fn child_level(id: PageId, level: u8) -> Result<u8> {
    debug_assert!(level <= MAX_LEVEL);
    level
        .checked_sub(1)
        .ok_or_else(|| Error::corrupted_page(id, "leaf used as a branch"))
}

/// Reads overflow run `id` holding `len` bytes and checks its header.
pub(crate) fn read_overflow<S: PageRead + ?Sized>(
    store: &S,
    id: PageId,
    len: u32,
) -> Result<PageRef> {
    let ps = store.page_size();
    let npages = pages_for_payload(ps, len as usize);
    let run = store.read_run(id, npages)?;
    if run.len() != npages as usize * ps {
        return Err(Error::corrupted_page(
            id,
            "overflow run has the wrong length",
        ));
    }
    if run.page_type() != Some(PageType::Overflow) {
        return Err(Error::corrupted_page(id, "expected an overflow run"));
    }
    if run.payload_len() != len || run.npages() != npages {
        return Err(Error::corrupted_page(
            id,
            format!(
                "overflow run holds {} bytes in {} pages, leaf says {len} bytes",
                run.payload_len(),
                run.npages()
            ),
        ));
    }
    Ok(run)
}

/// The value of a leaf cell as zero-copy bytes.
#[inline]
pub(crate) fn load_value<S: PageRead + ?Sized>(
    store: &S,
    leaf: &PageHandle,
    value: ValueLoc,
) -> Result<ValueRef> {
    match value {
        ValueLoc::Inline { start, end } => Ok(Bytes::new(leaf.to_ref(), start, end)),
        ValueLoc::Overflow { id, len } => {
            let run = read_overflow(store, id, len)?;
            Ok(Bytes::new(run, HEADER_LEN, HEADER_LEN + len as usize))
        }
    }
}

/// Looks up `key`.
pub fn get<S: PageRead + ?Sized>(
    store: &S,
    root: &TreeRoot,
    key: &[u8],
) -> Result<Option<ValueRef>> {
    let Some(mut id) = root.root else {
        return Ok(None);
    };
    let ps = store.page_size();
    let mut expect = None;
    loop {
        let page = read_node(store, id, expect)?;
        let node = NodeRef::parse(&page, id, ps)?;
        if node.is_leaf() {
            let (pos, found) = node.leaf_search(key)?;
            if !found {
                return Ok(None);
            }
            let cell = node.leaf_cell(pos)?;
            debug_assert_eq!(cell.key, key);
            return load_value(store, &page, cell.value).map(Some);
        }
        let idx = node.branch_search(key)?;
        expect = Some(child_level(id, node.level())?);
        id = node.child(idx)?;
    }
}

/// The entry with the smallest key.
#[cfg(test)]
pub fn first<S: PageRead + ?Sized>(
    store: &S,
    root: &TreeRoot,
) -> Result<Option<(KeyRef, ValueRef)>> {
    Cursor::new(root, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded).next(store)
}

/// The entry with the largest key.
#[cfg(test)]
pub fn last<S: PageRead + ?Sized>(
    store: &S,
    root: &TreeRoot,
) -> Result<Option<(KeyRef, ValueRef)>> {
    Cursor::new(root, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded).next_back(store)
}
