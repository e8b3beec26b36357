//! Rebuilding a whole tree as a packed copy (compaction's repack).
//!
//! Owns: [`repack`], which streams the entries of a tree, in key order,
//! leaf by leaf, into new leaves filled to the brim, builds the branch
//! levels above them, and then frees the old tree. Inline cells are copied
//! as their encoded bytes; a value in an overflow run gets a new run (the
//! old one is freed with its tree), so every page of the result is new.
//!
//! It replaces applying the entries as appending sorted batches
//! (`apply_sorted`), which decoded, checked and sized each entry five or
//! six times and took about 1 µs per entry (`examples/removal_space`:
//! 530 ms of a 1.2 s `compact()` for 500,000 entries).
//!
//! Invariants: nothing is freed unless the whole old tree was read and
//! every entry copied (a corrupt old tree leaves it as it was; the pages
//! the copy allocated are the transaction's, rolled back with it); keys
//! strictly increase across the whole copy, or the copy fails with
//! `Corrupted`; a tree page reached twice is `Corrupted` at its second
//! visit, so a shared subtree is never walked once per path); no page or
//! overflow run of the old tree is freed twice (runs reachable twice are
//! `Corrupted`), nor one the copy took (an old run that overlaps any run
//! the copy allocated, because the file's free space named it, is
//! `Corrupted`: the copy may have read its own bytes there); the copy's
//! entry count is the old tree's.
//!
//! Must not know: transactions, allocators' limits (the store's `alloc`
//! decides where the pages go), files.

use super::batch::grow_root;
use super::mutate::{check_limits, NewValue};
use super::node::{shortest_separator, NewCell, NodeBuilder, NodeRef, ValueLoc};
use super::store::{PageRead, PageWrite};
use super::walk::mark;
use super::{child_level, read_node_for, read_overflow, TreeRoot};
use crate::error::{Error, Result};
use crate::format::page::{
    pages_for_payload, PageBuf, PageBytes as _, PageHandle, PageOwned, PageRef, HEADER_LEN,
};
use crate::types::{CfId, PageId};
use std::collections::HashSet;

/// Builds a packed copy of the tree `old` in pages `store` allocates,
/// frees the old tree, and returns the copy's root and the pages freed.
pub fn repack<S: PageWrite + ?Sized>(store: &mut S, old: &TreeRoot) -> Result<(TreeRoot, u64)> {
    let Some(root_id) = old.root else {
        if old.len != 0 {
            return Err(Error::corrupted(
                format!("an empty tree counts {} entries", old.len),
                "tree root",
            ));
        }
        return Ok((TreeRoot::default(), 0));
    };
    let mut packer = Packer::new(store.page_size());
    let mut old_runs = Vec::new();
    let mut copy = Recording {
        inner: store,
        allocated: Vec::new(),
    };
    let mut seen = HashSet::new();
    copy_subtree(
        &mut copy,
        &mut packer,
        root_id,
        None,
        &mut old_runs,
        &mut seen,
    )?;
    let new = packer.finish(&mut copy)?;
    let Recording {
        inner: store,
        allocated,
    } = copy;
    if new.len != old.len {
        return Err(Error::corrupted_page(
            root_id,
            format!("tree holds {} entries, its count says {}", new.len, old.len),
        ));
    }
    debug_assert!(
        new.root.is_none_or(|r| store.is_private(r)),
        "a repacked root that is not the transaction's"
    );
    // Disjoint: `mark` refused any page reached twice; freed in address
    // order.
    old_runs.sort_unstable_by_key(|&(id, _)| id);
    debug_assert!(
        (old_runs.windows(2)).all(|w| w[0].0 .0.saturating_add(u64::from(w[0].1)) <= w[1].0 .0),
        "old runs overlap though `mark` refused every page reached twice"
    );
    // A page of the old tree the copy's allocations handed out (the
    // file's free space names a live page): the copy may have read its
    // own bytes there, and freeing the old tree would free a page the
    // copy uses. `seen` holds every page of the old tree.
    let taken = allocated.iter().flat_map(|&(id, n)| {
        (0..u64::from(n)).filter_map(move |p| id.0.checked_add(p).map(PageId))
    });
    if let Some(id) = taken.into_iter().find(|p| seen.contains(p)) {
        return Err(Error::corrupted_page(id, "free space names a live page"));
    }
    let mut freed = 0;
    // (Old pages may be private: the transaction may have written the
    // old tree before, e.g. folding a buffer into it.)
    for (id, npages) in old_runs {
        store.free(id, npages);
        freed += u64::from(npages);
    }
    Ok((new, freed))
}

/// Copies the entries of the subtree at `id` (expected at `level`; `None`
/// for the root) into `packer`, recording its pages and overflow runs in
/// `old_runs`. A page or overflow run reached twice is `Corrupted` at
/// once (`walk::mark`, as in `clear`; an
/// empty subtree shared by many parents has no keys to repeat, and
/// visiting it again for every path would take exponential time).
/// Recursion depth is bounded by the levels, which strictly decrease
/// (at most 64).
fn copy_subtree<S: PageWrite + ?Sized>(
    store: &mut S,
    packer: &mut Packer,
    id: PageId,
    level: Option<u8>,
    old_runs: &mut Vec<(PageId, u32)>,
    seen: &mut HashSet<PageId>,
) -> Result<()> {
    mark(seen, id, 1)?;
    let ps = store.page_size();
    let page = read_node_for(&*store, id, level, false)?;
    let node = NodeRef::parse(&page, id, ps)?;
    old_runs.push((id, 1));
    if !node.is_leaf() {
        let cl = child_level(id, node.level())?;
        for i in 0..=node.count() {
            copy_subtree(store, packer, node.child(i)?, Some(cl), old_runs, seen)?;
        }
        return Ok(());
    }
    for i in 0..node.count() {
        let (cell, bytes) = node.leaf_cell_raw(i)?;
        match cell.value {
            ValueLoc::Inline { start, end } => {
                let value = page.bytes().get(start..end).unwrap_or_default();
                check_limits(ps, cell.key, value)?;
                let raw = NewCell::Raw { leaf: true, bytes };
                packer.push(store, cell.key, &raw)?;
            }
            ValueLoc::Overflow { id: run, len } => {
                let src = read_overflow(&*store, run, len)?;
                let npages = pages_for_payload(ps, len as usize);
                mark(seen, run, npages)?;
                old_runs.push((run, npages));
                let value = src
                    .bytes()
                    .get(HEADER_LEN..HEADER_LEN + len as usize)
                    .ok_or_else(|| Error::corrupted_page(run, "overflow value past its run"))?;
                check_limits(ps, cell.key, value)?;
                let stored = NewValue::store(store, cell.key, value)?;
                packer.push(store, cell.key, &stored.cell(cell.key, value))?;
            }
        }
    }
    Ok(())
}

/// The store as the copy uses it, recording every run it allocates (to
/// check them against the old tree's runs before anything is freed).
struct Recording<'s, S: ?Sized> {
    inner: &'s mut S,
    allocated: Vec<(PageId, u32)>,
}

impl<S: PageWrite + ?Sized> PageRead for Recording<'_, S> {
    fn page_size(&self) -> usize {
        self.inner.page_size()
    }

    fn cf(&self) -> CfId {
        self.inner.cf()
    }

    fn read_run(&self, id: PageId, npages: u32) -> Result<PageRef> {
        self.inner.read_run(id, npages)
    }

    fn read_handle(&self, id: PageId, npages: u32) -> Result<PageHandle> {
        self.inner.read_handle(id, npages)
    }
}

impl<S: PageWrite + ?Sized> PageWrite for Recording<'_, S> {
    fn is_private(&self, id: PageId) -> bool {
        self.inner.is_private(id)
    }

    fn alloc(&mut self, npages: u32) -> Result<PageId> {
        debug_assert!(npages > 0, "an empty allocation");
        let id = self.inner.alloc(npages)?;
        self.allocated.push((id, npages));
        Ok(id)
    }

    fn install(&mut self, id: PageId, page: PageOwned) {
        self.inner.install(id, page);
    }

    fn get_mut(&mut self, id: PageId) -> Result<&mut PageBuf> {
        self.inner.get_mut(id)
    }

    fn free(&mut self, id: PageId, npages: u32) {
        self.inner.free(id, npages);
    }
}

/// The leaf being filled and the leaves finished so far.
struct Packer {
    ps: usize,
    /// The leaf being filled, if any.
    leaf: Option<NodeBuilder>,
    /// Every leaf begun, in key order.
    children: Vec<PageId>,
    /// The separators between consecutive leaves.
    seps: Vec<Vec<u8>>,
    /// The last key pushed (for the order check and the separators).
    last_key: Vec<u8>,
    entries: u64,
}

impl Packer {
    fn new(ps: usize) -> Packer {
        Packer {
            ps,
            leaf: None,
            children: Vec::new(),
            seps: Vec::new(),
            last_key: Vec::new(),
            entries: 0,
        }
    }

    /// Appends the entry `key` (encoded as `cell`) after the last one.
    fn push<S: PageWrite + ?Sized>(
        &mut self,
        store: &mut S,
        key: &[u8],
        cell: &NewCell,
    ) -> Result<()> {
        if self.entries > 0 && key <= self.last_key.as_slice() {
            let at = self.children.last().copied().unwrap_or(PageId(0));
            return Err(Error::corrupted_page(at, "keys out of order in a repack"));
        }
        let full = (self.leaf.as_ref()).is_some_and(|b| !b.fits(cell.len()));
        if full {
            self.install_leaf(store);
            self.seps
                .push(shortest_separator(&self.last_key, key).to_vec());
        }
        if self.leaf.is_none() {
            let id = store.alloc(1)?;
            self.leaf = Some(NodeBuilder::new(self.ps, id, store.cf(), 0));
            self.children.push(id);
        }
        if let Some(b) = self.leaf.as_mut() {
            b.push(cell)?;
        }
        debug_assert!(self.leaf.is_some(), "an entry pushed without a leaf");
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.entries += 1;
        Ok(())
    }

    /// Gives the leaf being filled to the store.
    fn install_leaf<S: PageWrite + ?Sized>(&mut self, store: &mut S) {
        if let Some(b) = self.leaf.take() {
            let id = *self.children.last().expect("a leaf begun is listed");
            store.install(id, b.finish());
            debug_assert!(store.is_private(id), "a new leaf is private");
        }
    }

    /// Installs the last leaf and builds the branch levels above the
    /// leaves: the copy's root.
    fn finish<S: PageWrite + ?Sized>(mut self, store: &mut S) -> Result<TreeRoot> {
        self.install_leaf(store);
        debug_assert_eq!(
            self.children.len(),
            (self.seps.len() + 1).min(self.entries as usize),
            "one separator between two leaves"
        );
        let mut root = TreeRoot {
            root: None,
            len: self.entries,
        };
        if !self.children.is_empty() {
            grow_root(store, &mut root, 0, self.children, self.seps)?;
        }
        debug_assert_eq!(
            root.root.is_some(),
            root.len > 0,
            "a copy with entries has a root, an empty one none"
        );
        Ok(root)
    }
}
