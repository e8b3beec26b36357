//! Applying a sorted batch of writes to a tree, one leaf at a time.
//!
//! Owns: [`apply_sorted`], which large transactions and folds of the write
//! buffer use (design.md "Write buffer", "Batches"). For each leaf the
//! batch touches it descends once, merges the leaf's cells with every
//! write that falls in the leaf's key range, and writes the result into
//! as few pages as hold it: packed full where the batch only appends past
//! the tree's last key (a bulk load of sorted or unsorted keys into an
//! empty table fills every page), spread evenly otherwise. Replacing one
//! child by several is carried up the path by rebuilding each parent the
//! same way, so a batch never splits a page more than once per level.
//!
//! Invariants: as for single writes (module `mutate`): committed pages are
//! copied before they change, every run dropped from the tree is freed
//! exactly once, `TreeRoot::len` changes by exactly the entries added and
//! removed, and every page a batch writes fits (checked by `NodeBuilder`,
//! which fails rather than overflow a page).
//!
//! Must not know: transactions, the WAL, buffers; the batch is plain
//! sorted `(key, Some(value) | None)` pairs.

use std::ops::Range;
use std::sync::Arc;

use super::mutate::{
    balanced_point, build, check_limits, descend, fits, make_private_upto, overflow_run, rebalance,
    slot_size, Descent, NewValue, Path, Target,
};
use super::node::{
    insert_cell, set_child, shortest_separator, underfull_below, usable, NewCell, NodeRef,
    MAX_LEVEL, SLOT_LEN,
};
use super::store::PageWrite;
use super::TreeRoot;
use crate::error::{Error, Result};
use crate::types::PageId;

/// One write of a batch: the key and its new value (`None`: removed).
pub type BatchWrite = (Arc<[u8]>, Option<Arc<[u8]>>);

/// A write [`apply_sorted`] takes: a key and its new value (`None`:
/// removed), as owned bytes ([`BatchWrite`]) or as bytes of another
/// tree's pages (a repack copies entries without allocating for each).
pub trait SortedWrite {
    /// The key.
    fn key(&self) -> &[u8];
    /// The new value; `None` removes the key.
    fn value(&self) -> Option<&[u8]>;
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> SortedWrite for (K, Option<V>) {
    #[inline]
    fn key(&self) -> &[u8] {
        self.0.as_ref()
    }

    #[inline]
    fn value(&self) -> Option<&[u8]> {
        self.1.as_ref().map(AsRef::as_ref)
    }
}

/// Applies `writes` (keys strictly increasing) to the tree: each put
/// inserts or replaces, each removal of a present key deletes it (of an
/// absent one does nothing). Equivalent to applying them one by one, but
/// each touched leaf is read, copied and rewritten once.
///
/// Keys that do not strictly increase are `Corrupted`, with the tree
/// unchanged: a batch may come from another tree's pages (a repack, a
/// backup), which a damaged file can hand out of order.
pub fn apply_sorted<S: PageWrite + ?Sized, W: SortedWrite>(
    store: &mut S,
    root: &mut TreeRoot,
    writes: &[W],
) -> Result<()> {
    if let Some(i) = writes.windows(2).position(|w| w[0].key() >= w[1].key()) {
        return Err(Error::corrupted(
            format!(
                "write {} of a sorted batch is not past the one before",
                i + 1
            ),
            "sorted batch",
        ));
    }
    let mut i = 0;
    while i < writes.len() {
        i = match root.root {
            None => build_fresh(store, root, &writes[i..])?,
            Some(root_id) => apply_leaf(store, root, root_id, writes, i)?,
        };
        debug_assert!(i <= writes.len(), "a step consumed writes past the end");
    }
    debug_assert!(
        root.root.is_some() || root.len == 0,
        "an empty tree with entries"
    );
    Ok(())
}

/// Builds a tree from the puts of `writes` into an empty `root`; returns
/// `writes.len()` (every write is consumed).
fn build_fresh<S: PageWrite + ?Sized, W: SortedWrite>(
    store: &mut S,
    root: &mut TreeRoot,
    writes: &[W],
) -> Result<usize> {
    debug_assert!(root.root.is_none(), "a fresh build over a tree");
    if root.len != 0 {
        // The catalog names no root page but counts entries.
        return Err(Error::corrupted(
            format!("an empty tree counts {} entries", root.len),
            "tree root",
        ));
    }
    let mut values = Vec::new();
    for w in writes {
        let k = w.key();
        if let Some(v) = w.value() {
            check_limits(store.page_size(), k, v)?;
            values.push((k, v, NewValue::store(store, k, v)?));
        }
    }
    if values.is_empty() {
        return Ok(writes.len());
    }
    let cells: Vec<NewCell> = values.iter().map(|(k, v, nv)| nv.cell(k, v)).collect();
    let id = store.alloc(1)?;
    let (children, seps) = write_level(store, id, 0, &cells, None, Spread::Pack)?;
    root.root = Some(children[0]);
    root.len = cells.len() as u64;
    grow_root(store, root, 0, children, seps)?;
    Ok(writes.len())
}

/// Applies the writes from `i` on that fall in the leaf holding
/// `writes[i]`, and in the right siblings under the same parent that the
/// batch touches too (a run, see [`run_of`]); returns the index of the
/// first write past the run.
///
/// A run of several leaves is merged with its writes and written back
/// packed: the bytes a dense batch adds flow into the next leaf of the run
/// instead of splitting every leaf in two, and the bytes it removes are
/// given back the same way. One leaf alone is split evenly when it
/// overflows (a sparse batch, where packing would make the next insert
/// split again).
fn apply_leaf<S: PageWrite + ?Sized, W: SortedWrite>(
    store: &mut S,
    root: &mut TreeRoot,
    root_id: PageId,
    writes: &[W],
    i: usize,
) -> Result<usize> {
    let ps = store.page_size();
    let d = descend(store, root_id, Target::Key(writes[i].key()))?;
    let Descent {
        mut path, mut leaf, ..
    } = d;
    // The path is copied; the leaves are rewritten whole, so a committed
    // leaf is read where it is and its cells go to a new page.
    make_private_upto(store, root, &mut path, &mut leaf, false)?;
    let run = run_of(store, &path, leaf, writes, i)?;
    let end = *run.ends.last().expect("a run has its first leaf");
    // Which of the run's leaves are committed: no allocation may hand
    // them out, nor the overflow runs they name (checked before the
    // frees).
    let was_committed: Vec<bool> = (run.leaves.iter())
        .map(|&id| !store.is_private(id))
        .collect();
    let pages = (run.leaves.iter())
        .map(|&id| store.read_page(id))
        .collect::<Result<Vec<_>>>()?;
    let nodes = (pages.iter().zip(&run.leaves))
        .map(|(page, &id)| {
            let node = NodeRef::parse(page, id, ps)?;
            if node.is_leaf() {
                Ok(node)
            } else {
                Err(Error::corrupted_page(id, "a branch where a leaf belongs"))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    // Appending past the tree's last key: pages are packed full.
    let n0 = nodes[0].count();
    let appends = run.hi_is_none
        && run.leaves.len() == 1
        && (n0 == 0 || nodes[0].leaf_key(n0 - 1)? < writes[i].key());
    let mut values = Vec::with_capacity(end - i);
    for w in &writes[i..end] {
        let k = w.key();
        if let Some(v) = w.value() {
            check_limits(ps, k, v)?;
            values.push(NewValue::store(store, k, v)?);
        }
    }
    let mut merge = Merge {
        cells: Vec::with_capacity(nodes.iter().map(NodeRef::count).sum::<usize>() + (end - i)),
        frees: Vec::new(),
        // Wide enough for any count the file holds plus any batch.
        len: i128::from(root.len),
        put: 0,
    };
    let mut from = i;
    for ((node, &to), &committed) in nodes.iter().zip(&run.ends).zip(&was_committed) {
        merge.leaf(ps, node, &writes[from..to], &values, committed)?;
        from = to;
    }
    debug_assert_eq!(merge.put, values.len(), "every put has its cell");
    if !merge.cells.windows(2).all(|w| w[0].key() < w[1].key()) {
        return Err(Error::corrupted_page(leaf, "leaf keys out of order"));
    }
    root.len = u64::try_from(merge.len)
        .map_err(|_| Error::corrupted_page(leaf, "entry count below zero"))?;
    let span = run.leaves.len() - 1;
    debug_assert!(span == 0 || !appends, "an append run is one leaf");
    let spread = match (appends, span) {
        (true, _) => Spread::Pack,
        (false, 0) => Spread::Even,
        (false, _) => Spread::Dense,
    };
    let target = private_leaf(store, root, &path, leaf)?;
    let (children, seps) = write_level(store, target, 0, &merge.cells, None, spread)?;
    debug_assert_eq!(children[0], target, "the leaf's first page is its own");
    let used: usize = merge.cells.iter().map(slot_size).sum();
    let frees = merge.frees;
    drop(nodes);
    drop(pages);
    let leaf = target;
    let single = children.len() == 1;
    let parent_kept = if !single || span > 0 {
        replace_up(store, root, &path, span, children, seps)?
    } else {
        true
    };
    // A page that was committed when the step began (a leaf of the run,
    // or an overflow run a committed leaf names) and is private now was
    // handed out by an allocation above (the leaf's copy, a value, a
    // parent's split): the file's free space names a live page, and
    // freeing it would free a page the new tree names.
    let committed_leaves = (run.leaves.iter().zip(&was_committed))
        .filter(|(_, &committed)| committed)
        .map(|(&id, _)| id);
    let committed_runs = (frees.iter())
        .filter(|&&(_, _, committed)| committed)
        .map(|&(id, _, _)| id);
    if let Some(id) = committed_leaves
        .chain(committed_runs)
        .find(|&id| store.is_private(id))
    {
        return Err(Error::corrupted_page(id, "free space names a live page"));
    }
    for (id, npages, _) in frees {
        store.free(id, npages);
    }
    for &sibling in &run.leaves[1..] {
        store.free(sibling, 1);
    }
    if single && used < underfull_below(ps) {
        rebalance(store, root, &path, leaf)?;
    } else if span > 0 && parent_kept {
        // The parent lost children: merge it with a sibling if it is now
        // under a quarter full, as a removal would (the run's leaves are
        // full, so the walk starts a level up; a parent that split is at
        // least half full).
        let mut up = path;
        up.len -= 1;
        rebalance(store, root, &up, path.ids[path.len - 1])?;
    }
    Ok(end)
}

/// The leaves one step of a batch rewrites.
struct Run {
    /// The leaf holding the step's first write, then the right siblings
    /// under the same parent that the batch touches, in key order.
    leaves: Vec<PageId>,
    /// For each leaf, the end of its writes (its first write is the end
    /// of the previous leaf's).
    ends: Vec<usize>,
    /// The first leaf is the tree's rightmost (no upper bound).
    hi_is_none: bool,
}

/// The run that starts at `leaf` (at the end of the private `path`) with
/// `writes[i]`: the leaf, and each next sibling in the same parent that the
/// following writes fall into, stopping at the first sibling they skip.
/// The parent keeps at least two children (a run never takes them all), so
/// it never needs to be collapsed.
fn run_of<S: PageWrite + ?Sized, W: SortedWrite>(
    store: &S,
    path: &Path,
    leaf: PageId,
    writes: &[W],
    i: usize,
) -> Result<Run> {
    let hi = bound_at(store, path, path.len)?;
    let mut end = ends_before(writes, i, hi.as_deref());
    if end == i {
        return Err(Error::corrupted_page(
            leaf,
            "a key outside its leaf's bounds",
        ));
    }
    let mut run = Run {
        leaves: vec![leaf],
        ends: vec![end],
        hi_is_none: hi.is_none(),
    };
    if path.len == 0 || end == writes.len() {
        return Ok(run);
    }
    let (pid, idx) = (path.ids[path.len - 1], path.idx[path.len - 1]);
    let page = store.read_page(pid)?;
    let node = NodeRef::parse(&page, pid, store.page_size())?;
    let n = node.count();
    // At most n - 1 siblings: the parent keeps a second child.
    let last = n.min((idx + n).saturating_sub(1));
    for k in idx + 1..=last {
        if end == writes.len() {
            break;
        }
        // The parent's own bound for its rightmost child (the last k).
        let bound = if k < n {
            Some(node.branch_key(k)?.to_vec())
        } else {
            bound_at(store, path, path.len - 1)?
        };
        let e = ends_before(writes, end, bound.as_deref());
        if e == end {
            break;
        }
        let sibling = node.child(k)?;
        if run.leaves.contains(&sibling) || path.ids[..path.len].contains(&sibling) {
            return Err(Error::corrupted_page(sibling, "page reachable twice"));
        }
        run.leaves.push(sibling);
        run.ends.push(e);
        end = e;
    }
    debug_assert_eq!(run.leaves.len(), run.ends.len(), "one end per leaf");
    debug_assert!(
        run.ends.windows(2).all(|w| w[0] < w[1]),
        "every leaf of a run has writes"
    );
    debug_assert!(
        run.leaves.len() == 1 || run.leaves.len() <= n,
        "a run left its parent a second child"
    );
    Ok(run)
}

/// The end of the writes from `from` on that are below `bound` (all of
/// them without one).
fn ends_before<W: SortedWrite>(writes: &[W], from: usize, bound: Option<&[u8]>) -> usize {
    match bound {
        Some(h) => from + writes[from..].partition_point(|w| w.key() < h),
        None => writes.len(),
    }
}

/// The cells of a run's leaves merged with the run's writes.
struct Merge<'a> {
    cells: Vec<NewCell<'a>>,
    /// Overflow runs of replaced and removed values, each with whether
    /// the leaf that named it was committed when the step began.
    frees: Vec<(PageId, u32, bool)>,
    /// The tree's entry count as the merge goes.
    len: i128,
    /// Puts consumed from the run's stored values.
    put: usize,
}

impl<'a> Merge<'a> {
    /// Merges the cells of `node` with `writes` (all within its bounds);
    /// `values` are the stored values of the run's puts, in order;
    /// `committed`: the node's page was committed when the step began.
    fn leaf<W: SortedWrite>(
        &mut self,
        ps: usize,
        node: &NodeRef<'a>,
        writes: &'a [W],
        values: &'a [NewValue],
        committed: bool,
    ) -> Result<()> {
        let n = node.count();
        let mut a = 0;
        for w in writes {
            let (k, v) = (w.key(), w.value());
            while a < n && node.leaf_key(a)? < k {
                self.cells.push(NewCell::Raw {
                    leaf: true,
                    bytes: node.cell_bytes(a)?,
                });
                a += 1;
            }
            if a < n && node.leaf_key(a)? == k {
                let run = overflow_run(ps, node.leaf_cell(a)?.value);
                self.frees.extend(run.map(|(id, n)| (id, n, committed)));
                a += 1;
                self.len -= 1;
            }
            if let Some(v) = v {
                debug_assert!(self.put < values.len(), "a put without its stored value");
                self.cells.push(values[self.put].cell(k, v));
                self.put += 1;
                self.len += 1;
            }
        }
        for a in a..n {
            self.cells.push(NewCell::Raw {
                leaf: true,
                bytes: node.cell_bytes(a)?,
            });
        }
        Ok(())
    }
}

/// The private page the leaf at the end of the (private) `path` is
/// rewritten into: itself if private, else a new page that its parent
/// (or the root) now names, the committed one freed (its contents stay
/// readable to the caller's copy and to older snapshots).
fn private_leaf<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    path: &Path,
    leaf: PageId,
) -> Result<PageId> {
    if store.is_private(leaf) {
        return Ok(leaf);
    }
    let id = store.alloc(1)?;
    if id == leaf || path.ids[..path.len].contains(&id) {
        // The allocator handed out a page of this very path.
        return Err(Error::corrupted_page(
            id,
            "free space names a live tree page",
        ));
    }
    match path.len {
        0 => root.root = Some(id),
        n => set_child(store.get_mut(path.ids[n - 1])?, path.idx[n - 1], id)?,
    }
    store.free(leaf, 1);
    debug_assert!(store.is_private(id), "a fresh page is private");
    Ok(id)
}

/// The exclusive upper bound of the keys of the page reached by the first
/// `levels` steps of `path` (the separator right of it in its lowest
/// ancestor where it is not the rightmost child); `None` on the tree's
/// right edge. `levels == path.len` bounds the leaf at its end.
fn bound_at<S: PageWrite + ?Sized>(
    store: &S,
    path: &Path,
    levels: usize,
) -> Result<Option<Vec<u8>>> {
    debug_assert!(levels <= path.len, "a bound past the path");
    for lvl in (0..levels).rev() {
        let (pid, idx) = (path.ids[lvl], path.idx[lvl]);
        let page = store.read_page(pid)?;
        let node = NodeRef::parse(&page, pid, store.page_size())?;
        if idx < node.count() {
            return Ok(Some(node.branch_key(idx)?.to_vec()));
        }
    }
    Ok(None)
}

/// A run of leaves is packed to all but 1/`DENSE_SLACK` of a page: the
/// slack takes a later batch's few inserts into the leaf without a split
/// (a leaf packed full splits in two half-empty pages at its first insert).
const DENSE_SLACK: usize = 10;

/// How [`partition`] spreads cells over pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spread {
    /// Pages share the bytes evenly (one page that overflowed).
    Even,
    /// Every page full, the last takes what is left (appends, new levels).
    Pack,
    /// Pages full, the last two evened out if the last is under half full
    /// (a run of leaves rewritten together).
    Dense,
}

/// Writes `cells` (at `level`; a branch's rightmost child is `rightmost`)
/// into page `first` and as many new pages as they need. Returns the
/// pages in key order and the separators between them.
fn write_level<S: PageWrite + ?Sized>(
    store: &mut S,
    first: PageId,
    level: u8,
    cells: &[NewCell],
    rightmost: Option<PageId>,
    spread: Spread,
) -> Result<(Vec<PageId>, Vec<Vec<u8>>)> {
    let ps = store.page_size();
    let branch = level > 0;
    debug_assert_eq!(
        branch,
        rightmost.is_some(),
        "a branch has a rightmost child"
    );
    let groups = partition(ps, cells, branch, spread)
        .ok_or_else(|| Error::corrupted_page(first, "cells that no split makes fit"))?;
    let mut ids = Vec::with_capacity(groups.len());
    let mut seps = Vec::with_capacity(groups.len().saturating_sub(1));
    for (g, r) in groups.iter().enumerate() {
        let id = if g == 0 { first } else { store.alloc(1)? };
        let last = g + 1 == groups.len();
        let right = match (branch, last) {
            (false, _) => None,
            (true, true) => rightmost,
            (true, false) => Some(cells[r.end].child()),
        };
        store.install(
            id,
            build(ps, id, store.cf(), level, &cells[r.clone()], right)?,
        );
        debug_assert!(store.is_private(id), "a batch writes only private pages");
        if !last {
            let next = &groups[g + 1];
            let sep = if branch {
                cells[r.end].key().to_vec()
            } else {
                let (l, r) = (cells[r.end - 1].key(), cells[next.start].key());
                if l >= r {
                    return Err(Error::corrupted_page(first, "keys out of order"));
                }
                shortest_separator(l, r).to_vec()
            };
            seps.push(sep);
        }
        ids.push(id);
    }
    debug_assert_eq!(ids.len(), seps.len() + 1, "one separator between two pages");
    Ok((ids, seps))
}

/// Splits `cells` into consecutive groups that each fit a page. Leaves:
/// the groups tile the cells. Branches: the cell after each group but the
/// last is promoted (its key goes up, its child is the group's rightmost).
/// See [`Spread`] for how the bytes are shared. `None` if no grouping fits
/// (cells the file made too large).
fn partition(
    ps: usize,
    cells: &[NewCell],
    branch: bool,
    spread: Spread,
) -> Option<Vec<Range<usize>>> {
    let limit = usable(ps);
    let total: usize = cells.iter().map(slot_size).sum();
    if total <= limit {
        return Some(std::iter::once(0..cells.len()).collect());
    }
    let target = match spread {
        Spread::Pack => limit,
        Spread::Dense => limit - limit / DENSE_SLACK,
        Spread::Even => total.div_ceil(total.div_ceil(limit)),
    };
    let mut groups = Vec::new();
    let (mut start, mut cur, mut i) = (0, 0, 0);
    while i < cells.len() {
        let sz = slot_size(&cells[i]);
        if cur > 0 && (cur + sz > limit || cur >= target) {
            groups.push(start..i);
            i += usize::from(branch); // promoted
            start = i;
            cur = 0;
            continue;
        }
        cur += sz;
        i += 1;
    }
    groups.push(start..cells.len());
    debug_assert!(
        groups.windows(2).all(|w| w[0].end <= w[1].start),
        "groups overlap"
    );
    let last = groups.last()?;
    let last_bytes: usize = cells[last.clone()].iter().map(slot_size).sum();
    let small = match spread {
        Spread::Pack => last.is_empty(),
        Spread::Even | Spread::Dense => last_bytes < limit / 2,
    };
    if small && groups.len() >= 2 {
        rebalance_tail(ps, cells, branch, &mut groups)?;
    }
    // Cells the file made too large (or a tail no split fixes) give up.
    let sound = groups
        .iter()
        .all(|g| !g.is_empty() && fits(ps, &cells[g.clone()]));
    sound.then_some(groups)
}

/// Re-splits the last two groups evenly (or joins them if they fit one
/// page).
fn rebalance_tail(
    ps: usize,
    cells: &[NewCell],
    branch: bool,
    groups: &mut Vec<Range<usize>>,
) -> Option<()> {
    let last = groups.pop()?;
    let prev = groups.pop()?;
    let span = prev.start..last.end;
    if fits(ps, &cells[span.clone()]) {
        groups.push(span);
        return Some(());
    }
    let k = prev.start + balanced_point(ps, &cells[span.clone()], branch)?;
    debug_assert!(
        k > prev.start && k < span.end,
        "a tail split leaves a side empty"
    );
    groups.push(prev.start..k);
    groups.push(k + usize::from(branch)..span.end);
    Some(())
}

/// Replaces the leaf at the end of `path` and the `span` siblings right of
/// it by `children` (separated by `seps`) in their parent, rebuilding each
/// ancestor that must hold more children, up to a new root if the old one
/// overflows. The parent keeps a second child (`span` is below its key
/// count, see [`run_of`]). True if the parent stayed one page where it
/// was (nothing above it changed, so `path` still leads to it).
fn replace_up<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    path: &Path,
    mut span: usize,
    mut children: Vec<PageId>,
    mut seps: Vec<Vec<u8>>,
) -> Result<bool> {
    let ps = store.page_size();
    let mut level = 0u8;
    for lvl in (0..path.len).rev() {
        debug_assert_eq!(
            children.len(),
            seps.len() + 1,
            "one separator between two children"
        );
        let first = lvl + 1 == path.len;
        if children.len() == 1 && span == 0 {
            return Ok(first);
        }
        let (pid, idx) = (path.ids[lvl], path.idx[lvl]);
        debug_assert!(store.is_private(pid), "a parent on the path is private");
        let page = store.read_page(pid)?;
        let node = NodeRef::parse(&page, pid, ps)?;
        let n = node.count();
        level = node.level();
        let m = children.len();
        let last = idx + span;
        if last > n || (span > 0 && span >= n) {
            // run_of read these bounds from this very page.
            return Err(Error::corrupted_page(pid, "a branch changed under a batch"));
        }
        let need: usize = (seps.iter())
            .map(|k| NewCell::Branch { child: pid, key: k }.len() + SLOT_LEN)
            .sum();
        if span == 0 && node.used() + need <= usable(ps) {
            drop(page);
            insert_children(store, pid, idx, &children, &seps)?;
            return Ok(first);
        }
        let mut cells = Vec::with_capacity(n + m);
        for c in 0..idx {
            cells.push(NewCell::Raw {
                leaf: false,
                bytes: node.cell_bytes(c)?,
            });
        }
        for (child, key) in children.iter().zip(&seps) {
            cells.push(NewCell::Branch { child: *child, key });
        }
        let rightmost = if last < n {
            cells.push(NewCell::Branch {
                child: children[m - 1],
                key: node.branch_key(last)?,
            });
            for c in last + 1..n {
                cells.push(NewCell::Raw {
                    leaf: false,
                    bytes: node.cell_bytes(c)?,
                });
            }
            node.child(n)?
        } else {
            children[m - 1]
        };
        debug_assert!(!cells.is_empty(), "a rebuilt branch keeps a key");
        let spread = if last == n {
            Spread::Pack
        } else {
            Spread::Even
        };
        let (ids, up) = write_level(store, pid, level, &cells, Some(rightmost), spread)?;
        drop(cells);
        drop(page);
        children = ids;
        seps = up;
        span = 0;
        if first && children.len() == 1 {
            // Rewritten in place: the levels above are unchanged.
            return Ok(true);
        }
    }
    if children.len() == 1 {
        return Ok(false);
    }
    debug_assert_eq!(path.len == 0, level == 0, "the root's level");
    grow_root(store, root, level, children, seps)?;
    Ok(false)
}

/// Replaces child `idx` of the private branch `pid`, which has room for
/// them, by `children` (separated by `seps`), in place.
fn insert_children<S: PageWrite + ?Sized>(
    store: &mut S,
    pid: PageId,
    idx: usize,
    children: &[PageId],
    seps: &[Vec<u8>],
) -> Result<()> {
    let m = children.len();
    let page = store.get_mut(pid)?;
    set_child(page, idx, children[m - 1])?;
    for (k, (child, key)) in children[..m - 1].iter().zip(seps).enumerate() {
        let cell = NewCell::Branch { child: *child, key };
        if !insert_cell(page, idx + k, &cell)? {
            // Its header promised the room (a page the file damaged).
            return Err(Error::corrupted_page(
                pid,
                "a branch lacks the room its header shows",
            ));
        }
    }
    Ok(())
}

/// Puts new root levels above `children` (pages at `level`) until one page
/// holds them all.
pub(super) fn grow_root<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    mut level: u8,
    mut children: Vec<PageId>,
    mut seps: Vec<Vec<u8>>,
) -> Result<()> {
    while children.len() > 1 {
        debug_assert_eq!(
            children.len(),
            seps.len() + 1,
            "one separator between two children"
        );
        if level >= MAX_LEVEL {
            return Err(Error::corrupted_page(
                children[0],
                "tree would exceed 64 levels",
            ));
        }
        level += 1;
        let m = children.len();
        let cells: Vec<NewCell> = (children[..m - 1].iter().zip(&seps))
            .map(|(child, key)| NewCell::Branch { child: *child, key })
            .collect();
        let id = store.alloc(1)?;
        let (ids, up) = write_level(
            store,
            id,
            level,
            &cells,
            Some(children[m - 1]),
            Spread::Pack,
        )?;
        children = ids;
        seps = up;
    }
    debug_assert!(store.is_private(children[0]), "a new root is private");
    root.root = Some(children[0]);
    Ok(())
}
