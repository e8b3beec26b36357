//! Double-ended range cursor.
//!
//! Owns: iteration over a key range from both ends. A cursor holds its own
//! copy of the bounds and `PageRef` clones of the pages on each end's path,
//! never a borrow of the store: every step takes the store as an argument,
//! so the caller may mutate other trees through the same store between
//! steps (the tree being iterated must not change).
//!
//! Invariants: the front yields strictly increasing keys, the back strictly
//! decreasing ones, and neither yields a key the other has already passed,
//! so the two ends meet without overlap. Because yielded keys must be
//! strictly monotonic and non-root leaves must be non-empty, a corrupted
//! tree (shared subtrees, loops through siblings) ends in an error, never in
//! an endless iteration.
//!
//! Must not know: transactions, the WAL, how pages are stored.

use std::ops::Bound;

use super::node::{LeafCell, NodeHeader, NodeRef, MAX_LEVEL};
use super::store::PageRead;
use super::{child_level, load_value, read_node_for, Bytes, KeyRef, TreeRoot, ValueRef};
use crate::error::{Error, Result};
use crate::format::page::{PageBytes as _, PageHandle, PageRef};
use crate::types::PageId;

/// Cells whose headers a step asks the CPU to fetch ahead of the one it
/// yields (`NodeRef::prefetch_cells`): enough to overlap the misses of a
/// short range, few enough that a step issues only a handful of hints.
/// Measured in design.md "Read path", *Range iteration*.
const PREFETCH_CELLS: usize = 4;

/// One page on a cursor end's path. For a branch, `idx` is the child the
/// path descends into. For a leaf at the front, `idx` is the next cell to
/// yield; at the back, `idx` is one past the next cell to yield.
#[derive(Clone, Debug)]
struct Frame {
    id: PageId,
    page: PageHandle,
    /// The page's header as parsed when the frame was pushed: a step
    /// within the page does not parse it again.
    header: NodeHeader,
    idx: usize,
    /// Leaf cells already hinted to the CPU: at the front those below
    /// `hinted`, at the back those from `hinted` on (see
    /// [`hint_ahead`]).
    hinted: usize,
}

impl Frame {
    fn new(id: PageId, page: PageHandle, header: NodeHeader, idx: usize) -> Frame {
        Frame {
            id,
            header,
            page,
            idx,
            hinted: idx,
        }
    }
}

/// Hints the headers of the [`PREFETCH_CELLS`] leaf cells past cell `i`,
/// the one a step yields (towards the back if `back`), that `hinted` (a
/// frame's [`Frame::hinted`]) says are not hinted yet, and returns the new
/// boundary: one new cell per step once a leaf is under way, not the
/// whole window again.
#[inline]
fn hint_ahead(node: &NodeRef, i: usize, hinted: usize, back: bool) -> usize {
    debug_assert!(
        i < node.count(),
        "a step yields cell {i} of {}",
        node.count()
    );
    let (from, to) = if back {
        (i.saturating_sub(PREFETCH_CELLS), hinted.min(i))
    } else {
        (
            hinted.max(i + 1),
            (i + 1 + PREFETCH_CELLS).min(node.count()),
        )
    };
    if from >= to {
        return hinted;
    }
    debug_assert!(to <= node.count(), "hints past the last cell");
    node.prefetch_cells(from, to - from);
    if back {
        from
    } else {
        to
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Unstarted,
    Active,
    Done,
}

/// Where the last key an end yielded lies: a page it was read from and
/// the key's byte range there. The page is taken once per leaf, not once
/// per entry: a step within the same leaf only moves the range, so a
/// cursor's order checks cost no reference-count change per entry.
#[derive(Clone, Debug)]
struct LastKey {
    page: PageRef,
    start: usize,
    end: usize,
}

impl LastKey {
    fn key(&self) -> &[u8] {
        // In bounds: the range is a decoded cell's key (`LastKey::set`).
        self.page
            .bytes()
            .get(self.start..self.end)
            .unwrap_or_default()
    }

    /// Records that `key` (bytes `start..end` of `page`) was yielded.
    fn set(slot: &mut Option<LastKey>, page: &PageHandle, start: usize, end: usize) {
        debug_assert!(start <= end && end <= page.len(), "a key outside its page");
        match slot {
            Some(last) if std::ptr::eq(&*last.page, &**page) => {
                last.start = start;
                last.end = end;
            }
            _ => {
                *slot = Some(LastKey {
                    page: page.to_ref(),
                    start,
                    end,
                })
            }
        }
    }
}

/// One end of the cursor.
#[derive(Clone, Debug)]
struct End {
    stack: Vec<Frame>,
    state: State,
    /// The last key this end yielded.
    last: Option<LastKey>,
}

impl End {
    fn new() -> End {
        End {
            stack: Vec::new(),
            state: State::Unstarted,
            last: None,
        }
    }

    fn finish(&mut self) {
        self.state = State::Done;
        self.stack.clear();
    }
}

/// A double-ended cursor over the entries of a tree whose keys lie in a
/// range.
#[derive(Clone, Debug)]
pub struct Cursor {
    root: Option<PageId>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    front: End,
    back: End,
}

/// True if `key` is past the upper bound `hi`.
fn above(hi: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match hi {
        Bound::Included(h) => key > h.as_slice(),
        Bound::Excluded(h) => key >= h.as_slice(),
        Bound::Unbounded => false,
    }
}

/// True if `key` is before the lower bound `lo`.
fn below(lo: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match lo {
        Bound::Included(l) => key < l.as_slice(),
        Bound::Excluded(l) => key <= l.as_slice(),
        Bound::Unbounded => false,
    }
}

/// Which way a descent goes at each page.
#[derive(Clone, Copy)]
enum Aim<'k> {
    /// Leftmost path.
    First,
    /// Rightmost path.
    Last,
    /// Towards the first key `>= k` (front, `Included`).
    FromIncl(&'k [u8]),
    /// Towards the first key `> k` (front, `Excluded`).
    FromExcl(&'k [u8]),
    /// Towards the last key `<= k` (back, `Included`).
    UpToIncl(&'k [u8]),
    /// Towards the last key `< k` (back, `Excluded`).
    UpToExcl(&'k [u8]),
}

impl Aim<'_> {
    fn front(b: &Bound<Vec<u8>>) -> Aim<'_> {
        match b {
            Bound::Included(k) => Aim::FromIncl(k),
            Bound::Excluded(k) => Aim::FromExcl(k),
            Bound::Unbounded => Aim::First,
        }
    }

    fn back(b: &Bound<Vec<u8>>) -> Aim<'_> {
        match b {
            Bound::Included(k) => Aim::UpToIncl(k),
            Bound::Excluded(k) => Aim::UpToExcl(k),
            Bound::Unbounded => Aim::Last,
        }
    }

    /// The child of a branch to descend into.
    fn child(self, node: &NodeRef) -> Result<usize> {
        match self {
            Aim::First => Ok(0),
            Aim::Last => Ok(node.count()),
            Aim::FromIncl(k) | Aim::FromExcl(k) | Aim::UpToIncl(k) => node.branch_search(k),
            Aim::UpToExcl(k) => node.branch_search_lt(k),
        }
    }

    /// True if the aim searches pages for a key (not just an end).
    fn searches(self) -> bool {
        !matches!(self, Aim::First | Aim::Last)
    }

    /// The leaf frame index (see [`Frame`]).
    fn leaf_idx(self, node: &NodeRef) -> Result<usize> {
        match self {
            Aim::First => Ok(0),
            Aim::Last => Ok(node.count()),
            Aim::FromIncl(k) | Aim::UpToExcl(k) => Ok(node.leaf_search(k)?.0),
            Aim::FromExcl(k) | Aim::UpToIncl(k) => {
                let (pos, found) = node.leaf_search(k)?;
                Ok(pos + found as usize)
            }
        }
    }
}

/// Descends from page `id` (expected at `level`, if known) along `aim`,
/// pushing frames onto `stack`. `is_root` tells whether `id` is the root.
fn descend<S: PageRead + ?Sized>(
    store: &S,
    stack: &mut Vec<Frame>,
    mut id: PageId,
    mut level: Option<u8>,
    aim: Aim,
) -> Result<()> {
    let ps = store.page_size();
    loop {
        let page = read_node_for(store, id, level, aim.searches())?;
        let node = NodeRef::parse(&page, id, ps)?;
        if node.is_leaf() {
            if node.count() == 0 && !stack.is_empty() {
                return Err(Error::corrupted_page(id, "empty non-root leaf"));
            }
            let idx = aim.leaf_idx(&node)?;
            debug_assert!(idx <= node.count());
            let header = node.header();
            stack.push(Frame::new(id, page, header, idx));
            debug_assert!(
                stack.len() <= MAX_LEVEL as usize + 1,
                "a path is longer than the deepest tree"
            );
            return Ok(());
        }
        let idx = aim.child(&node)?;
        debug_assert!(idx <= node.count(), "a branch has count + 1 children");
        let child = node.child(idx)?;
        level = Some(child_level(id, node.level())?);
        let header = node.header();
        stack.push(Frame::new(id, page, header, idx));
        id = child;
    }
}

/// The entry of `cell` in leaf `page`, noted as the last one its end
/// yielded (`last`).
#[inline]
fn yield_cell<S: PageRead + ?Sized>(
    store: &S,
    page: &PageHandle,
    cell: &LeafCell,
    last: &mut Option<LastKey>,
) -> Result<(KeyRef, ValueRef)> {
    let (start, end) = (cell.key_off, cell.key_off + cell.key.len());
    let value = load_value(store, page, cell.value)?;
    LastKey::set(last, page, start, end);
    Ok((Bytes::new(page.to_ref(), start, end), value))
}

/// Moves the front path to the next leaf. False when there is none.
fn advance<S: PageRead + ?Sized>(store: &S, stack: &mut Vec<Frame>) -> Result<bool> {
    stack.pop();
    while let Some(top) = stack.last_mut() {
        let node = NodeRef::reparsed(&top.page, top.id, top.header);
        if top.idx < node.count() {
            top.idx += 1;
            debug_assert!(!node.is_leaf(), "a leaf frame below the top of the path");
            let child = node.child(top.idx)?;
            let level = child_level(top.id, node.level())?;
            descend(store, stack, child, Some(level), Aim::First)?;
            return Ok(true);
        }
        stack.pop();
    }
    Ok(false)
}

/// Moves the back path to the previous leaf. False when there is none.
fn retreat<S: PageRead + ?Sized>(store: &S, stack: &mut Vec<Frame>) -> Result<bool> {
    stack.pop();
    while let Some(top) = stack.last_mut() {
        let node = NodeRef::reparsed(&top.page, top.id, top.header);
        if top.idx > 0 {
            top.idx -= 1;
            debug_assert!(!node.is_leaf(), "a leaf frame below the top of the path");
            let child = node.child(top.idx)?;
            let level = child_level(top.id, node.level())?;
            descend(store, stack, child, Some(level), Aim::Last)?;
            return Ok(true);
        }
        stack.pop();
    }
    Ok(false)
}

impl Cursor {
    /// A cursor over the keys of `root` within `(lo, hi)`. Nothing is read
    /// until the first step. An empty or inverted range yields nothing.
    pub fn new(root: &TreeRoot, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Cursor {
        Cursor::with_bounds(root, lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec))
    }

    /// [`Cursor::new`] taking bounds the caller owns already (no copy).
    pub fn with_bounds(root: &TreeRoot, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>) -> Cursor {
        Cursor {
            root: root.root,
            lo,
            hi,
            front: End::new(),
            back: End::new(),
        }
    }

    /// A cursor over every entry of `root`.
    pub fn all(root: &TreeRoot) -> Cursor {
        Cursor::new(root, Bound::Unbounded, Bound::Unbounded)
    }

    /// The next entry from the front, or `None` when the ends have met.
    #[inline]
    pub fn next<S: PageRead + ?Sized>(&mut self, store: &S) -> Result<Option<(KeyRef, ValueRef)>> {
        let r = self.step_front(store);
        if r.is_err() {
            self.front.finish();
        }
        r
    }

    /// The next entry from the back, or `None` when the ends have met.
    #[inline]
    pub fn next_back<S: PageRead + ?Sized>(
        &mut self,
        store: &S,
    ) -> Result<Option<(KeyRef, ValueRef)>> {
        let r = self.step_back(store);
        if r.is_err() {
            self.back.finish();
        }
        r
    }

    fn step_front<S: PageRead + ?Sized>(
        &mut self,
        store: &S,
    ) -> Result<Option<(KeyRef, ValueRef)>> {
        match self.front.state {
            State::Done => return Ok(None),
            State::Unstarted => {
                self.front.state = State::Active;
                let Some(root) = self.root else {
                    self.front.finish();
                    return Ok(None);
                };
                descend(
                    store,
                    &mut self.front.stack,
                    root,
                    None,
                    Aim::front(&self.lo),
                )?;
            }
            State::Active => {}
        }
        loop {
            let Some(frame) = self.front.stack.last_mut() else {
                self.front.finish();
                return Ok(None);
            };
            let node = NodeRef::reparsed(&frame.page, frame.id, frame.header);
            debug_assert!(node.is_leaf());
            if frame.idx >= node.count() {
                if !advance(store, &mut self.front.stack)? {
                    self.front.finish();
                    return Ok(None);
                }
                continue;
            }
            let idx = frame.idx;
            frame.idx += 1;
            frame.hinted = hint_ahead(&node, idx, frame.hinted, false);
            let cell = node.leaf_cell(idx)?;
            if let Some(prev) = &self.front.last {
                if cell.key <= prev.key() {
                    return Err(Error::corrupted_page(frame.id, "keys out of order"));
                }
            }
            let met = match &self.back.last {
                Some(b) => cell.key >= b.key(),
                None => false,
            };
            if met || above(&self.hi, cell.key) {
                self.front.finish();
                return Ok(None);
            }
            return yield_cell(store, &frame.page, &cell, &mut self.front.last).map(Some);
        }
    }

    fn step_back<S: PageRead + ?Sized>(&mut self, store: &S) -> Result<Option<(KeyRef, ValueRef)>> {
        match self.back.state {
            State::Done => return Ok(None),
            State::Unstarted => {
                self.back.state = State::Active;
                let Some(root) = self.root else {
                    self.back.finish();
                    return Ok(None);
                };
                descend(store, &mut self.back.stack, root, None, Aim::back(&self.hi))?;
            }
            State::Active => {}
        }
        loop {
            let Some(frame) = self.back.stack.last_mut() else {
                self.back.finish();
                return Ok(None);
            };
            let node = NodeRef::reparsed(&frame.page, frame.id, frame.header);
            debug_assert!(node.is_leaf());
            if frame.idx == 0 {
                if !retreat(store, &mut self.back.stack)? {
                    self.back.finish();
                    return Ok(None);
                }
                continue;
            }
            if frame.idx > node.count() {
                return Err(Error::corrupted_page(
                    frame.id,
                    "cursor position past the page",
                ));
            }
            frame.idx -= 1;
            frame.hinted = hint_ahead(&node, frame.idx, frame.hinted, true);
            let cell = node.leaf_cell(frame.idx)?;
            if let Some(prev) = &self.back.last {
                if cell.key >= prev.key() {
                    return Err(Error::corrupted_page(frame.id, "keys out of order"));
                }
            }
            let met = match &self.front.last {
                Some(f) => cell.key <= f.key(),
                None => false,
            };
            if met || below(&self.lo, cell.key) {
                self.back.finish();
                return Ok(None);
            }
            return yield_cell(store, &frame.page, &cell, &mut self.back.last).map(Some);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::page::{page_from_slice, PageOwned};

    fn page() -> PageRef {
        let owned: PageOwned = page_from_slice(&[7u8; 64]);
        owned.shareable()
    }

    /// A leaf of `count` cells (keys 0, 1, ...) as a node, for the hint
    /// boundaries.
    fn leaf(count: u8) -> PageRef {
        use crate::btree::node::{NewCell, NodeBuilder};
        let mut b = NodeBuilder::new(4096, PageId(9), crate::types::CfId(0), 0);
        for k in 0..count {
            let cell = NewCell::LeafInline {
                key: &[k],
                value: &[k],
            };
            b.push(&cell).unwrap();
        }
        b.finish().shareable()
    }

    #[test]
    fn steps_hint_each_cell_once_within_the_window_ahead() {
        let page = leaf(20);
        let node = NodeRef::parse(&page, PageId(9), 4096).unwrap();
        // From the front, starting at cell 3: the first step hints 4..8,
        // each later one the one new cell at the window's far edge.
        let mut hinted = 3;
        hinted = hint_ahead(&node, 3, hinted, false);
        assert_eq!(hinted, 3 + 1 + PREFETCH_CELLS);
        hinted = hint_ahead(&node, 4, hinted, false);
        assert_eq!(hinted, 4 + 1 + PREFETCH_CELLS);
        // Never past the last cell.
        assert_eq!(hint_ahead(&node, 18, 19, false), 20);
        assert_eq!(hint_ahead(&node, 19, 20, false), 20);
        // From the back, yielding cell 15 (the frame's index was 16).
        let mut hinted = 16;
        hinted = hint_ahead(&node, 15, hinted, true);
        assert_eq!(hinted, 15 - PREFETCH_CELLS);
        hinted = hint_ahead(&node, 14, hinted, true);
        assert_eq!(hinted, 14 - PREFETCH_CELLS);
        assert_eq!(hint_ahead(&node, 1, 0, true), 0);
        assert_eq!(hint_ahead(&node, 0, 0, true), 0);
    }

    #[test]
    fn the_last_key_takes_one_reference_per_page_not_per_entry() {
        let a = page();
        let b = page();
        let mut last = None;
        let before = PageRef::count(&a);
        for start in 0..10 {
            LastKey::set(&mut last, &PageHandle::Ref(a.clone()), start, start + 4);
        }
        assert_eq!(PageRef::count(&a), before + 1, "one reference kept");
        assert_eq!(last.as_ref().map(LastKey::key), Some(&[7u8; 4][..]));
        assert_eq!(last.as_ref().map(|l| l.start), Some(9));
        LastKey::set(&mut last, &PageHandle::Ref(b.clone()), 1, 3);
        assert_eq!(PageRef::count(&a), before, "the old page let go");
        assert_eq!(PageRef::count(&b), 2);
        assert_eq!(last.as_ref().map(LastKey::key), Some(&[7u8; 2][..]));
    }

    #[test]
    fn a_cache_slot_handle_is_the_same_page_as_its_counted_reference() {
        // Cached pages reach the cursor as slot guards, not counted
        // references: the identity test must see through both.
        let a = page();
        let slot = arc_swap::ArcSwapAny::new(Some(a.clone()));
        let guarded = PageHandle::guarded(slot.load()).expect("a run");
        let mut last = None;
        LastKey::set(&mut last, &PageHandle::Ref(a.clone()), 0, 4);
        let kept = PageRef::count(&a);
        LastKey::set(&mut last, &guarded, 4, 8);
        assert_eq!(PageRef::count(&a), kept, "no new reference taken");
        assert_eq!(last.as_ref().map(|l| (l.start, l.end)), Some((4, 8)));
    }
}
