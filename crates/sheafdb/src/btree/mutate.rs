//! Copy-on-write insertion and deletion.
//!
//! Owns: descending to a leaf, copying the root-to-leaf path into private
//! pages, editing the leaf, splitting overfull pages (with the split point at
//! the insertion point on the tree's left/right edge, so sequential inserts
//! fill pages), merging underfull pages with a sibling, removing empty pages
//! and collapsing a root branch with a single child. Also the bulk
//! operations built on them (pop, retain, drain, clear is in `walk`).
//!
//! Invariants: after a successful operation the tree satisfies every
//! invariant listed in the module above; a non-private page is never written
//! (it is copied and freed first); each page or run dropped from the tree is
//! freed exactly once; `TreeRoot::len` changes by exactly the number of
//! entries added or removed.
//!
//! Must not know: transactions, the WAL, how the store allocates or caches.

#[cfg(test)]
use super::cursor::Cursor;
use super::node::{
    copy_node, inline_fits, insert_cell, max_key_len, max_value_len, remove_cell, remove_child,
    set_child, shortest_separator, underfull_below, usable, NewCell, NodeBuilder, NodeRef,
    ValueLoc, BRANCH_CELL_HEADER, MAX_LEVEL, SLOT_LEN,
};
use super::store::{PageRead, PageWrite};
use super::{
    child_level, read_node, read_node_for, read_overflow, Bytes, KeyRef, TreeRoot, ValueRef,
};
use crate::error::{Error, Result};
use crate::format::page::{
    pages_for_payload, PageBuf, PageBytes as _, PageHandle, PageOwned, PageType, HEADER_LEN,
};
use crate::types::PageId;

/// Most pages on a root-to-leaf path.
const MAX_DEPTH: usize = MAX_LEVEL as usize + 1;

/// The branches from the root down to (not including) a leaf, with the
/// child index taken at each.
#[derive(Clone, Copy)]
pub(super) struct Path {
    pub(super) ids: [PageId; MAX_DEPTH],
    pub(super) idx: [usize; MAX_DEPTH],
    pub(super) len: usize,
}

impl Path {
    fn new() -> Path {
        Path {
            ids: [PageId(0); MAX_DEPTH],
            idx: [0; MAX_DEPTH],
            len: 0,
        }
    }

    fn push(&mut self, id: PageId, idx: usize) -> Result<()> {
        if self.len == MAX_DEPTH {
            return Err(Error::corrupted_page(id, "tree deeper than 64 levels"));
        }
        self.ids[self.len] = id;
        self.idx[self.len] = idx;
        self.len += 1;
        Ok(())
    }
}

/// Which insertion point a split favours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Edge {
    /// Balanced split.
    Middle,
    /// Appending past the last key of the tree: keep the old page full.
    Right,
    /// Inserting before the first key of the tree: keep the old page full.
    Left,
}

/// What a descent looks for. (`First`/`Last` serve `pop_first`/`pop_last`,
/// which only the tree's own tests drive now: tables pop through the
/// merged view.)
#[derive(Clone, Copy)]
#[cfg_attr(
    not(test),
    allow(dead_code, reason = "First/Last are reached only from test drivers")
)]
pub(super) enum Target<'k> {
    Key(&'k [u8]),
    First,
    Last,
}

/// The result of a read-only descent.
pub(super) struct Descent {
    pub(super) path: Path,
    pub(super) leaf: PageId,
    pub(super) page: PageHandle,
    /// Position of the key (found) or where it would go.
    pub(super) pos: usize,
    pub(super) found: bool,
    edge: Edge,
}

pub(super) fn descend<S: PageRead + ?Sized>(
    store: &S,
    root: PageId,
    target: Target,
) -> Result<Descent> {
    let ps = store.page_size();
    let mut path = Path::new();
    let (mut right_edge, mut left_edge) = (true, true);
    let mut id = root;
    let mut expect = None;
    loop {
        let page = read_node(store, id, expect)?;
        let node = NodeRef::parse(&page, id, ps)?;
        let n = node.count();
        if node.is_leaf() {
            if n == 0 && path.len > 0 {
                return Err(Error::corrupted_page(id, "empty non-root leaf"));
            }
            let (pos, found) = match target {
                Target::Key(k) => node.leaf_search(k)?,
                Target::First => (0, n > 0),
                Target::Last => (n.saturating_sub(1), n > 0),
            };
            let edge = if found {
                Edge::Middle
            } else if right_edge && pos == n {
                Edge::Right
            } else if left_edge && pos == 0 {
                Edge::Left
            } else {
                Edge::Middle
            };
            return Ok(Descent {
                path,
                leaf: id,
                page,
                pos,
                found,
                edge,
            });
        }
        let idx = match target {
            Target::Key(k) => node.branch_search(k)?,
            Target::First => 0,
            Target::Last => n,
        };
        right_edge &= idx == n;
        left_edge &= idx == 0;
        path.push(id, idx)?;
        expect = Some(child_level(id, node.level())?);
        id = node.child(idx)?;
    }
}

/// Copies committed page `id` into a new private page and frees it.
fn cow_copy<S: PageWrite + ?Sized>(store: &mut S, id: PageId) -> Result<PageId> {
    let ps = store.page_size();
    let page = store.read_page(id)?;
    // Validate the header before allocating, so a corrupt page leaks nothing.
    NodeRef::parse(&page, id, ps)?;
    let new_id = store.alloc(1)?;
    if new_id == id {
        // Only a page this transaction freed (a page the file lets the
        // tree reach twice) can be handed out again while reachable.
        return Err(Error::corrupted_page(id, "page reached after it was freed"));
    }
    let buf = copy_node(&page, id, ps, new_id, store.cf())?;
    drop(page);
    store.install(new_id, buf);
    store.free(id, 1);
    debug_assert!(store.is_private(new_id), "a fresh copy is private");
    debug_assert!(!store.is_private(id), "a committed page was private");
    Ok(new_id)
}

/// Makes every page on the path (and the leaf) private, copying committed
/// pages top-down and repointing their parents (or the root).
pub(super) fn make_private<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    path: &mut Path,
    leaf: &mut PageId,
) -> Result<()> {
    make_private_upto(store, root, path, leaf, true)
}

/// [`make_private`], leaving the leaf as it is unless `with_leaf` (a
/// caller that rewrites the leaf whole need not copy it first).
pub(super) fn make_private_upto<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    path: &mut Path,
    leaf: &mut PageId,
    with_leaf: bool,
) -> Result<()> {
    let n = path.len;
    let last = if with_leaf { n + 1 } else { n };
    for i in 0..last {
        let id = if i < n { path.ids[i] } else { *leaf };
        if store.is_private(id) {
            continue;
        }
        debug_assert!(i == 0 || store.is_private(path.ids[i - 1]));
        let new_id = cow_copy(store, id)?;
        if i < n && (path.ids[i + 1..n].contains(&new_id) || new_id == *leaf) {
            // The allocator handed out a page further down this path.
            return Err(Error::corrupted_page(
                new_id,
                "free space names a live tree page",
            ));
        }
        if i == 0 {
            root.root = Some(new_id);
        } else {
            set_child(store.get_mut(path.ids[i - 1])?, path.idx[i - 1], new_id)?;
        }
        if i < n {
            path.ids[i] = new_id;
        } else {
            *leaf = new_id;
        }
    }
    debug_assert!(path.ids[..n].iter().all(|&p| store.is_private(p)));
    debug_assert!(!with_leaf || store.is_private(*leaf));
    debug_assert!(root.root == Some(if n > 0 { path.ids[0] } else { *leaf }));
    Ok(())
}

/// How a new value is stored.
#[derive(Clone, Copy)]
pub(super) enum NewValue {
    Inline,
    Overflow { id: PageId, len: u32 },
}

impl NewValue {
    /// Writes `value` to an overflow run if it does not fit inline.
    pub(super) fn store<S: PageWrite + ?Sized>(
        store: &mut S,
        key: &[u8],
        value: &[u8],
    ) -> Result<NewValue> {
        let ps = store.page_size();
        if inline_fits(ps, key.len(), value.len()) {
            return Ok(NewValue::Inline);
        }
        debug_assert!(value.len() <= max_value_len());
        let len = value.len() as u32;
        let npages = pages_for_payload(ps, value.len());
        let id = store.alloc(npages)?;
        let mut run = PageBuf::new_run(ps, npages, PageType::Overflow, id, store.cf());
        run.bytes_mut()[HEADER_LEN..HEADER_LEN + value.len()].copy_from_slice(value);
        run.set_payload_len(len);
        store.install(id, run);
        Ok(NewValue::Overflow { id, len })
    }

    pub(super) fn cell<'a>(self, key: &'a [u8], value: &'a [u8]) -> NewCell<'a> {
        match self {
            NewValue::Inline => NewCell::LeafInline { key, value },
            NewValue::Overflow { id, len } => NewCell::LeafOverflow { key, id, len },
        }
    }
}

/// The overflow run (first page, pages) a value occupies, if any.
pub(super) fn overflow_run(ps: usize, value: ValueLoc) -> Option<(PageId, u32)> {
    match value {
        ValueLoc::Inline { .. } => None,
        ValueLoc::Overflow { id, len } => Some((id, pages_for_payload(ps, len as usize))),
    }
}

/// The value of a leaf cell, detached from the leaf if the leaf is private
/// (and so about to be edited in place).
fn old_value<S: PageRead + ?Sized>(
    store: &S,
    page: &PageHandle,
    private: bool,
    value: ValueLoc,
) -> Result<ValueRef> {
    match value {
        ValueLoc::Inline { start, end } if private => {
            Ok(Bytes::copy_from(&page.bytes()[start..end]))
        }
        ValueLoc::Inline { start, end } => Ok(Bytes::new(page.to_ref(), start, end)),
        ValueLoc::Overflow { id, len } => {
            let run = read_overflow(store, id, len)?;
            Ok(Bytes::new(run, HEADER_LEN, HEADER_LEN + len as usize))
        }
    }
}

/// `KeyTooLarge` or `ValueTooLarge` unless a tree of `ps`-byte pages can
/// store `key` and `value`.
pub fn check_limits(ps: usize, key: &[u8], value: &[u8]) -> Result<()> {
    if key.len() > max_key_len(ps) {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max: max_key_len(ps),
        });
    }
    if value.len() > max_value_len() {
        return Err(Error::ValueTooLarge {
            len: value.len(),
            max: max_value_len(),
        });
    }
    Ok(())
}

/// Inserts or replaces; returns whether a value was replaced, and the old
/// value if `want_old`.
fn put_impl<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    key: &[u8],
    value: &[u8],
    want_old: bool,
) -> Result<(bool, Option<ValueRef>)> {
    let ps = store.page_size();
    check_limits(ps, key, value)?;
    let Some(root_id) = root.root else {
        let nv = NewValue::store(store, key, value)?;
        let id = store.alloc(1)?;
        let mut b = NodeBuilder::new(ps, id, store.cf(), 0);
        b.push(&nv.cell(key, value))?;
        store.install(id, b.finish());
        *root = TreeRoot {
            root: Some(id),
            len: 1,
        };
        return Ok((false, None));
    };
    let d = descend(store, root_id, Target::Key(key))?;
    if !d.found && root.len == u64::MAX {
        return Err(Error::corrupted_page(root_id, "entry count overflow"));
    }
    let (mut old, mut old_run) = (None, None);
    if d.found {
        let cell = NodeRef::parse(&d.page, d.leaf, ps)?.leaf_cell(d.pos)?;
        old_run = overflow_run(ps, cell.value);
        if want_old {
            let private = store.is_private(d.leaf);
            old = Some(old_value(store, &d.page, private, cell.value)?);
        }
    }
    let Descent {
        mut path,
        mut leaf,
        page,
        pos,
        found,
        edge,
    } = d;
    drop(page);
    make_private(store, root, &mut path, &mut leaf)?;
    let nv = NewValue::store(store, key, value)?;
    if found {
        remove_cell(store.get_mut(leaf)?, pos)?;
    }
    if let Some((id, npages)) = old_run {
        store.free(id, npages);
    }
    let split = insert_into(store, leaf, pos, &nv.cell(key, value), edge)?;
    propagate(store, root, &path, leaf, split, edge)?;
    if !found {
        root.len += 1;
    }
    Ok((found, old))
}

/// Inserts `cell` at `pos` of private node `id`, splitting it if it does
/// not fit. Returns the separator and the new right sibling on a split.
fn insert_into<S: PageWrite + ?Sized>(
    store: &mut S,
    id: PageId,
    pos: usize,
    cell: &NewCell,
    edge: Edge,
) -> Result<Option<(Vec<u8>, PageId)>> {
    debug_assert!(store.is_private(id));
    if insert_cell(store.get_mut(id)?, pos, cell)? {
        return Ok(None);
    }
    split(store, id, pos, cell, edge).map(Some)
}

/// Size of a cell with its slot.
pub(super) fn slot_size(c: &NewCell) -> usize {
    c.len() + SLOT_LEN
}

/// True if `cells` fit in one page.
pub(super) fn fits(ps: usize, cells: &[NewCell]) -> bool {
    cells.iter().map(slot_size).sum::<usize>() <= usable(ps)
}

/// Split point `k` of a leaf: left gets `cells[..k]`, right `cells[k..]`.
fn leaf_split_point(ps: usize, cells: &[NewCell], pos: usize, edge: Edge) -> Option<usize> {
    let n = cells.len();
    debug_assert!(n >= 2, "a leaf splits only with two cells or more");
    debug_assert!(pos < n, "the inserted cell is among the cells");
    let k = match edge {
        Edge::Right if pos == n - 1 => Some(n - 1),
        Edge::Left if pos == 0 => Some(1),
        _ => None,
    };
    if let Some(k) = k {
        if fits(ps, &cells[..k]) && fits(ps, &cells[k..]) {
            return Some(k);
        }
    }
    balanced_point(ps, cells, false)
}

/// Split point `k` of a branch: left gets `cells[..k]` (its rightmost child
/// is `cells[k]`'s), `cells[k]`'s separator moves up, right gets
/// `cells[k + 1..]`.
fn branch_split_point(ps: usize, cells: &[NewCell], pos: usize, edge: Edge) -> Option<usize> {
    let n = cells.len();
    debug_assert!(n >= 2, "a branch splits only with two cells or more");
    debug_assert!(pos < n, "the inserted cell is among the cells");
    let k = match edge {
        Edge::Right if pos == n - 1 && n >= 3 => Some(n - 2),
        Edge::Left if pos == 0 && n >= 3 => Some(1),
        _ => None,
    };
    if let Some(k) = k {
        if fits(ps, &cells[..k]) && fits(ps, &cells[k + 1..]) {
            return Some(k);
        }
    }
    balanced_point(ps, cells, true)
}

/// The split point that balances bytes between two pages that both fit.
pub(super) fn balanced_point(ps: usize, cells: &[NewCell], branch: bool) -> Option<usize> {
    let total: usize = cells.iter().map(slot_size).sum();
    let limit = usable(ps);
    let mut left = 0;
    let mut best: Option<(usize, usize)> = None;
    let last_k = if branch {
        cells.len().saturating_sub(2)
    } else {
        cells.len().saturating_sub(1)
    };
    for k in 1..=last_k {
        left += slot_size(&cells[k - 1]);
        let right = if branch {
            total - left - slot_size(&cells[k])
        } else {
            total - left
        };
        if left <= limit && right <= limit {
            let d = left.abs_diff(right);
            if best.is_none_or(|(bd, _)| d < bd) {
                best = Some((d, k));
            }
        }
    }
    debug_assert!(
        best.is_none_or(|(_, k)| k >= 1),
        "a split leaves the left page empty"
    );
    debug_assert!(
        best.is_none_or(|(_, k)| k <= last_k),
        "a split leaves the right page empty"
    );
    best.map(|(_, k)| k)
}

/// A node page `id` holding `cells` (and `rightmost` for a branch).
pub(super) fn build(
    ps: usize,
    id: PageId,
    cf: crate::types::CfId,
    level: u8,
    cells: &[NewCell],
    rightmost: Option<PageId>,
) -> Result<PageOwned> {
    let mut b = NodeBuilder::new(ps, id, cf, level);
    for c in cells {
        b.push(c)?;
    }
    if let Some(r) = rightmost {
        b.set_rightmost(r);
    }
    Ok(b.finish())
}

/// Splits private node `id` while inserting `cell` at `pos`. The left half
/// stays in `id`; returns the separator and the new right page.
fn split<S: PageWrite + ?Sized>(
    store: &mut S,
    id: PageId,
    pos: usize,
    cell: &NewCell,
    edge: Edge,
) -> Result<(Vec<u8>, PageId)> {
    let ps = store.page_size();
    let cf = store.cf();
    let page = store.read_page(id)?;
    let node = NodeRef::parse(&page, id, ps)?;
    let (leaf, level, n) = (node.is_leaf(), node.level(), node.count());
    let mut cells = Vec::with_capacity(n + 1);
    for i in 0..n {
        cells.push(NewCell::Raw {
            leaf,
            bytes: node.cell_bytes(i)?,
        });
    }
    cells.insert(pos, *cell);
    let no_split = || Error::corrupted_page(id, "no valid split point");
    if cells.len() < 2 {
        // Only a header that claims more bytes than its cells use makes
        // a page refuse its first cell.
        return Err(no_split());
    }
    let k = if leaf {
        leaf_split_point(ps, &cells, pos, edge).ok_or_else(no_split)?
    } else {
        branch_split_point(ps, &cells, pos, edge).ok_or_else(no_split)?
    };
    debug_assert!(k >= 1, "split point leaves the left page empty");
    debug_assert!(k < cells.len(), "split point leaves the right page empty");
    if cells[k - 1].key() >= cells[k].key() {
        return Err(Error::corrupted_page(id, "keys out of order"));
    }
    let right_id = store.alloc(1)?;
    debug_assert_ne!(right_id, id, "a split's right page is its left page");
    let (left_buf, right_buf, sep) = if leaf {
        let sep = shortest_separator(cells[k - 1].key(), cells[k].key()).to_vec();
        let l = build(ps, id, cf, 0, &cells[..k], None)?;
        let r = build(ps, right_id, cf, 0, &cells[k..], None)?;
        (l, r, sep)
    } else {
        let rightmost = node.child(n)?;
        let l = build(ps, id, cf, level, &cells[..k], Some(cells[k].child()))?;
        let r = build(ps, right_id, cf, level, &cells[k + 1..], Some(rightmost))?;
        (l, r, cells[k].key().to_vec())
    };
    drop(cells);
    drop(page);
    debug_assert!(
        !sep.is_empty() || !leaf,
        "a leaf split's separator is empty"
    );
    store.install(id, left_buf);
    store.install(right_id, right_buf);
    debug_assert!(store.is_private(id), "a split page is private");
    debug_assert!(
        store.is_private(right_id),
        "a split's right page is private"
    );
    Ok((sep, right_id))
}

/// Carries a split of `leaf` up the (private) path, splitting branches as
/// needed and growing a new root when the old one splits.
fn propagate<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    path: &Path,
    leaf: PageId,
    mut split: Option<(Vec<u8>, PageId)>,
    edge: Edge,
) -> Result<()> {
    let mut child = leaf;
    for i in (0..path.len).rev() {
        let Some((sep, right)) = split.take() else {
            return Ok(());
        };
        let (pid, idx) = (path.ids[i], path.idx[i]);
        // Child `idx` becomes the right half; the new cell before it points
        // at the left half.
        set_child(store.get_mut(pid)?, idx, right)?;
        let cell = NewCell::Branch { child, key: &sep };
        split = insert_into(store, pid, idx, &cell, edge)?;
        child = pid;
    }
    if let Some((sep, right)) = split {
        let level = path.len + 1;
        if level > MAX_LEVEL as usize {
            return Err(Error::corrupted_page(child, "tree would exceed 64 levels"));
        }
        let id = store.alloc(1)?;
        let mut b = NodeBuilder::new(store.page_size(), id, store.cf(), level as u8);
        b.push(&NewCell::Branch { child, key: &sep })?;
        b.set_rightmost(right);
        store.install(id, b.finish());
        debug_assert!(store.is_private(id), "a new root is private");
        root.root = Some(id);
    }
    Ok(())
}

/// Removes the entry a descent found. Returns its key and value if asked.
fn remove_found<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    d: Descent,
    want_key: bool,
    want_value: bool,
) -> Result<(Option<KeyRef>, Option<ValueRef>)> {
    debug_assert!(d.found);
    let ps = store.page_size();
    if root.len == 0 {
        return Err(Error::corrupted_page(
            d.leaf,
            "entry found in a tree of length 0",
        ));
    }
    let (key, value, run) = {
        let cell = NodeRef::parse(&d.page, d.leaf, ps)?.leaf_cell(d.pos)?;
        let private = store.is_private(d.leaf);
        let key = match (want_key, private) {
            (false, _) => None,
            (true, true) => Some(Bytes::copy_from(cell.key)),
            (true, false) => Some(Bytes::new(
                d.page.to_ref(),
                cell.key_off,
                cell.key_off + cell.key.len(),
            )),
        };
        let value = if want_value {
            Some(old_value(store, &d.page, private, cell.value)?)
        } else {
            None
        };
        (key, value, overflow_run(ps, cell.value))
    };
    let Descent {
        mut path,
        mut leaf,
        page,
        pos,
        ..
    } = d;
    drop(page);
    make_private(store, root, &mut path, &mut leaf)?;
    remove_cell(store.get_mut(leaf)?, pos)?;
    if let Some((id, npages)) = run {
        store.free(id, npages);
    }
    root.len -= 1;
    rebalance(store, root, &path, leaf)?;
    Ok((key, value))
}

/// How full a page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fill {
    /// A leaf without cells.
    Empty,
    /// Below a quarter of the usable bytes.
    Under,
    /// Full enough.
    Ok,
}

fn fill_of<S: PageRead + ?Sized>(store: &S, id: PageId) -> Result<Fill> {
    let page = store.read_page(id)?;
    let node = NodeRef::parse(&page, id, store.page_size())?;
    Ok(if node.is_leaf() && node.count() == 0 {
        Fill::Empty
    } else if node.used() < underfull_below(store.page_size()) {
        Fill::Under
    } else {
        Fill::Ok
    })
}

/// Restores the fill invariants after a cell was removed from the private
/// `leaf` at the end of the private `path`.
pub(super) fn rebalance<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    path: &Path,
    leaf: PageId,
) -> Result<()> {
    let mut child = leaf;
    // `child` is a branch whose only child was removed.
    let mut childless = false;
    for i in (0..path.len).rev() {
        let (pid, idx) = (path.ids[i], path.idx[i]);
        let fill = if childless {
            Fill::Empty
        } else {
            fill_of(store, child)?
        };
        match fill {
            Fill::Ok => return Ok(()),
            Fill::Empty => {
                store.free(child, 1);
                childless = remove_child(store.get_mut(pid)?, idx)?;
            }
            Fill::Under => {
                if !merge_around(store, pid, idx)? {
                    return Ok(());
                }
            }
        }
        child = pid;
    }
    fix_root(store, root, childless)
}

/// Merges underfull child `idx` of private branch `pid` with its right
/// and/or left sibling where the two fit in one page. True if the branch
/// lost a cell.
fn merge_around<S: PageWrite + ?Sized>(store: &mut S, pid: PageId, idx: usize) -> Result<bool> {
    let count = {
        let page = store.read_page(pid)?;
        NodeRef::parse(&page, pid, store.page_size())?.count()
    };
    let mut merged = false;
    if idx < count && try_merge(store, pid, idx, true)? {
        merged = true;
    }
    if idx > 0 {
        let child = {
            let page = store.read_page(pid)?;
            NodeRef::parse(&page, pid, store.page_size())?.child(idx)?
        };
        if fill_of(store, child)? != Fill::Ok && try_merge(store, pid, idx - 1, false)? {
            merged = true;
        }
    }
    Ok(merged)
}

/// Merges children `j` and `j + 1` of private branch `pid` into the one
/// named by `keep_left` (which must be private) if they fit in one page.
fn try_merge<S: PageWrite + ?Sized>(
    store: &mut S,
    pid: PageId,
    j: usize,
    keep_left: bool,
) -> Result<bool> {
    let ps = store.page_size();
    let (kept, other, buf) = {
        let ppage = store.read_page(pid)?;
        let parent = NodeRef::parse(&ppage, pid, ps)?;
        debug_assert!(j < parent.count());
        let (lid, rid) = (parent.child(j)?, parent.child(j + 1)?);
        if lid == rid {
            return Err(Error::corrupted_page(pid, "two children are the same page"));
        }
        let sep = parent.branch_key(j)?;
        let level = child_level(pid, parent.level())?;
        let lpage = read_node_for(store, lid, Some(level), false)?;
        let rpage = read_node_for(store, rid, Some(level), false)?;
        let l = NodeRef::parse(&lpage, lid, ps)?;
        let r = NodeRef::parse(&rpage, rid, ps)?;
        let extra = if level > 0 {
            BRANCH_CELL_HEADER + sep.len() + SLOT_LEN
        } else {
            0
        };
        if l.used() + r.used() + extra > usable(ps) {
            return Ok(false);
        }
        let (kept, other) = if keep_left { (lid, rid) } else { (rid, lid) };
        debug_assert!(store.is_private(kept));
        let leaf = level == 0;
        let mut b = NodeBuilder::new(ps, kept, store.cf(), level);
        for i in 0..l.count() {
            b.push(&NewCell::Raw {
                leaf,
                bytes: l.cell_bytes(i)?,
            })?;
        }
        if !leaf {
            let child = l.child(l.count())?;
            b.push(&NewCell::Branch { child, key: sep })?;
        }
        for i in 0..r.count() {
            b.push(&NewCell::Raw {
                leaf,
                bytes: r.cell_bytes(i)?,
            })?;
        }
        if !leaf {
            b.set_rightmost(r.child(r.count())?);
        }
        (kept, other, b.finish())
    };
    store.install(kept, buf);
    store.free(other, 1);
    let parent = store.get_mut(pid)?;
    set_child(parent, j + 1, kept)?;
    remove_cell(parent, j)?;
    Ok(true)
}

/// Removes an empty root and collapses root branches with one child.
fn fix_root<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    mut childless: bool,
) -> Result<()> {
    let mut expect = None;
    while let Some(id) = root.root {
        if childless {
            store.free(id, 1);
            root.root = None;
            break;
        }
        // The root's level bounds the loop: each step goes one level down
        // (a child pointer from the file may name its own branch).
        let page = read_node(store, id, expect)?;
        let node = NodeRef::parse(&page, id, store.page_size())?;
        if node.is_leaf() {
            if node.count() == 0 {
                drop(page);
                store.free(id, 1);
                root.root = None;
            }
            break;
        }
        if node.count() > 0 {
            break;
        }
        let only = node.child(0)?;
        expect = Some(child_level(id, node.level())?);
        drop(page);
        store.free(id, 1);
        root.root = Some(only);
        childless = false;
    }
    if root.root.is_none() && root.len != 0 {
        return Err(Error::corrupted(
            format!("tree emptied but its count says {}", root.len),
            "tree root",
        ));
    }
    Ok(())
}

/// Inserts or replaces `key`; returns the old value.
pub fn insert<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    key: &[u8],
    value: &[u8],
) -> Result<Option<ValueRef>> {
    Ok(put_impl(store, root, key, value, true)?.1)
}

/// Inserts or replaces `key` without reading the old value; true if a
/// value was replaced.
#[cfg(test)]
pub fn put<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    key: &[u8],
    value: &[u8],
) -> Result<bool> {
    Ok(put_impl(store, root, key, value, false)?.0)
}

/// Removes `key`; returns its value.
pub fn remove<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    key: &[u8],
) -> Result<Option<ValueRef>> {
    let Some(root_id) = root.root else {
        return Ok(None);
    };
    let d = descend(store, root_id, Target::Key(key))?;
    if !d.found {
        return Ok(None);
    }
    Ok(remove_found(store, root, d, false, true)?.1)
}

#[cfg(test)]
/// Removes `key` without reading its value; true if it was present.
pub fn delete<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    key: &[u8],
) -> Result<bool> {
    let Some(root_id) = root.root else {
        return Ok(false);
    };
    let d = descend(store, root_id, Target::Key(key))?;
    if !d.found {
        return Ok(false);
    }
    remove_found(store, root, d, false, false)?;
    Ok(true)
}

#[cfg(test)]
fn pop<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    target: Target,
) -> Result<Option<(KeyRef, ValueRef)>> {
    let Some(root_id) = root.root else {
        return Ok(None);
    };
    let d = descend(store, root_id, target)?;
    if !d.found {
        return Ok(None);
    }
    match remove_found(store, root, d, true, true)? {
        (Some(k), Some(v)) => Ok(Some((k, v))),
        _ => unreachable!("remove_found returns what it is asked for"),
    }
}

#[cfg(test)]
/// Removes and returns the entry with the smallest key.
pub fn pop_first<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
) -> Result<Option<(KeyRef, ValueRef)>> {
    pop(store, root, Target::First)
}

#[cfg(test)]
/// Removes and returns the entry with the largest key.
pub fn pop_last<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
) -> Result<Option<(KeyRef, ValueRef)>> {
    pop(store, root, Target::Last)
}

#[cfg(test)]
/// Scans every entry, collecting (an owned copy of) those `doomed` picks.
fn collect<S: PageRead + ?Sized, T>(
    store: &S,
    root: &TreeRoot,
    mut doomed: impl FnMut(&[u8], &[u8]) -> Option<T>,
) -> Result<Vec<(Vec<u8>, T)>> {
    let mut out = Vec::new();
    let mut c = Cursor::all(root);
    while let Some((k, v)) = c.next(store)? {
        if let Some(t) = doomed(&k, &v) {
            out.push((k.to_vec(), t));
        }
    }
    Ok(out)
}

#[cfg(test)]
/// Removes every key in `keys` (all present in the tree).
fn delete_all<S: PageWrite + ?Sized, T>(
    store: &mut S,
    root: &mut TreeRoot,
    keys: &[(Vec<u8>, T)],
) -> Result<()> {
    for (k, _) in keys {
        if !delete(store, root, k)? {
            return Err(Error::corrupted("a key seen by a scan is missing", "tree"));
        }
    }
    Ok(())
}

/// Keeps only the entries for which `f` returns true; returns how many were
/// removed.
#[cfg(test)]
pub fn retain<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    mut f: impl FnMut(&[u8], &[u8]) -> bool,
) -> Result<u64> {
    let doomed = collect(&*store, root, |k, v| (!f(k, v)).then_some(()))?;
    delete_all(store, root, &doomed)?;
    Ok(doomed.len() as u64)
}

#[cfg(test)]
/// Removes the entries for which `f` returns true and returns them in key
/// order.
pub fn drain_filter<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    mut f: impl FnMut(&[u8], &[u8]) -> bool,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let doomed = collect(&*store, root, |k, v| f(k, v).then(|| v.to_vec()))?;
    delete_all(store, root, &doomed)?;
    Ok(doomed)
}
