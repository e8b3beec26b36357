//! Whole-tree traversals: the integrity walk, `clear` and `tree_stats`.
//!
//! Owns: [`walk`], which visits every page and overflow run of a tree once
//! and checks every structural invariant (page format, cell bounds and
//! overlap, key order inside pages and against the parents' separators,
//! levels — hence equal leaf depth —, no page reachable twice, no empty
//! non-root page, entry count), and [`clear`], which frees a whole tree.
//!
//! Invariants: both read each page exactly once and terminate on any page
//! contents (levels strictly decrease downwards and pages already seen are
//! rejected). `clear` frees nothing unless the whole tree could be read, so
//! a corrupt tree is left as it was.
//!
//! Must not know: allocators, files, transactions.

use std::collections::HashSet;

use super::mutate::overflow_run;
use super::node::{NodeRef, ValueLoc, NODE_HEADER_LEN};
use super::store::{PageRead, PageWrite};
use super::{child_level, read_node_for, read_overflow, TreeRoot};
use crate::error::{Error, Result};
use crate::format::page::{PageBytes as _, PageType};
use crate::types::PageId;

/// Marks the `npages` pages of the run at `id` as seen; fails if any was.
pub(super) fn mark(seen: &mut HashSet<PageId>, id: PageId, npages: u32) -> Result<()> {
    for p in 0..npages as u64 {
        // A run's first page comes from a pointer in the file.
        let Some(page) = id.0.checked_add(p).map(PageId) else {
            return Err(Error::corrupted_page(id, "run past the last page id"));
        };
        if !seen.insert(page) {
            return Err(Error::corrupted_page(
                page,
                "page reachable twice from one tree",
            ));
        }
    }
    Ok(())
}

struct Walker<'a, S: PageRead + ?Sized> {
    store: &'a S,
    visit: &'a mut dyn FnMut(PageId, u32, PageType),
    seen: HashSet<PageId>,
    entries: u64,
}

impl<S: PageRead + ?Sized> Walker<'_, S> {
    /// Checks the subtree at `id`, whose keys must lie in `[lo, hi)`.
    fn node(
        &mut self,
        id: PageId,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        level: Option<u8>,
    ) -> Result<()> {
        let is_root = level.is_none();
        mark(&mut self.seen, id, 1)?;
        let page = read_node_for(self.store, id, level, false)?;
        let node = NodeRef::parse(&page, id, self.store.page_size())?;
        node.check_cells()?;
        check_keys(&node, lo, hi)?;
        let n = node.count();
        if node.is_leaf() {
            if n == 0 && !is_root {
                return Err(Error::corrupted_page(id, "empty non-root leaf"));
            }
            for i in 0..n {
                if let ValueLoc::Overflow { id: run, len } = node.leaf_cell(i)?.value {
                    self.overflow(run, len)?;
                }
            }
            self.entries += n as u64;
            (self.visit)(id, 1, PageType::Leaf);
            return Ok(());
        }
        if n == 0 && is_root {
            return Err(Error::corrupted_page(id, "root branch without separators"));
        }
        let cl = child_level(id, node.level())?;
        for i in 0..=n {
            let clo = if i == 0 {
                lo
            } else {
                Some(node.branch_key(i - 1)?)
            };
            let chi = if i == n {
                hi
            } else {
                Some(node.branch_key(i)?)
            };
            self.node(node.child(i)?, clo, chi, Some(cl))?;
        }
        (self.visit)(id, 1, PageType::Branch);
        Ok(())
    }

    fn overflow(&mut self, id: PageId, len: u32) -> Result<()> {
        let run = read_overflow(self.store, id, len)?;
        let npages = run.npages();
        mark(&mut self.seen, id, npages)?;
        (self.visit)(id, npages, PageType::Overflow);
        Ok(())
    }
}

/// Keys (or separators) of `node` strictly increase and lie in `[lo, hi)`.
fn check_keys(node: &NodeRef, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<()> {
    let mut prev: Option<&[u8]> = None;
    for i in 0..node.count() {
        let k = if node.is_leaf() {
            node.leaf_key(i)?
        } else {
            node.branch_key(i)?
        };
        if prev.is_some_and(|p| k <= p) {
            return Err(Error::corrupted_page(
                node.id(),
                format!("key {i} out of order"),
            ));
        }
        if lo.is_some_and(|l| k < l) || hi.is_some_and(|h| k >= h) {
            return Err(Error::corrupted_page(
                node.id(),
                format!("key {i} outside its parent's separators"),
            ));
        }
        prev = Some(k);
    }
    Ok(())
}

/// Visits every page and overflow run of the tree (`visit(first page,
/// pages in run, type)`), checking every structural invariant. Returns the
/// number of entries, which must equal `root.len`. Any violation is
/// `Error::Corrupted` naming the page.
pub fn walk<S: PageRead + ?Sized>(
    store: &S,
    root: &TreeRoot,
    visit: &mut dyn FnMut(PageId, u32, PageType),
) -> Result<u64> {
    let Some(id) = root.root else {
        if root.len != 0 {
            return Err(Error::corrupted(
                format!("empty tree with count {}", root.len),
                "tree root",
            ));
        }
        return Ok(0);
    };
    let mut w = Walker {
        store,
        visit,
        seen: HashSet::new(),
        entries: 0,
    };
    w.node(id, None, None, None)?;
    if w.entries != root.len {
        return Err(Error::corrupted_page(
            id,
            format!(
                "tree holds {} entries, its count says {}",
                w.entries, root.len
            ),
        ));
    }
    Ok(w.entries)
}

/// Frees every page and overflow run of the tree and empties `root`;
/// returns the pages freed. Each page is read once; if any page is
/// corrupt nothing is freed.
pub fn clear<S: PageWrite + ?Sized>(store: &mut S, root: &mut TreeRoot) -> Result<u64> {
    let Some(id) = root.root else {
        *root = TreeRoot::default();
        return Ok(0);
    };
    let ps = store.page_size();
    let mut seen = HashSet::new();
    let mut runs = Vec::new();
    let mut stack = vec![(id, None)];
    while let Some((id, level)) = stack.pop() {
        mark(&mut seen, id, 1)?;
        let page = read_node_for(&*store, id, level, false)?;
        let node = NodeRef::parse(&page, id, ps)?;
        if node.is_leaf() {
            for i in 0..node.count() {
                if let Some((run, npages)) = overflow_run(ps, node.leaf_cell(i)?.value) {
                    mark(&mut seen, run, npages)?;
                    runs.push((run, npages));
                }
            }
        } else {
            let cl = child_level(id, node.level())?;
            for i in 0..=node.count() {
                stack.push((node.child(i)?, Some(cl)));
            }
        }
        runs.push((id, 1));
    }
    let mut freed = 0;
    for (id, npages) in runs {
        store.free(id, npages);
        freed += u64::from(npages);
    }
    *root = TreeRoot::default();
    Ok(freed)
}

/// What a tree's pages hold ([`tree_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Levels of the tree (0 for an empty tree, 1 for a lone leaf).
    pub height: u32,
    /// Leaf pages.
    pub leaf_pages: u64,
    /// Branch pages.
    pub branch_pages: u64,
    /// Pages of overflow runs (values too large for a leaf).
    pub overflow_pages: u64,
    /// Bytes of keys and values stored in the leaves and overflow runs.
    pub stored_bytes: u64,
    /// Bytes of page headers, slot arrays, cell headers and separators.
    pub metadata_bytes: u64,
    /// Bytes of the tree's pages that hold nothing (free space in pages,
    /// the unused tail of overflow runs).
    pub fragmented_bytes: u64,
    /// Entries in the leaves.
    pub entries: u64,
}

/// Counts what the tree's pages hold, reading each page once. Stops with
/// `Corrupted` at the first page that does not parse, or a page reached
/// twice.
pub fn tree_stats<S: PageRead + ?Sized>(store: &S, root: &TreeRoot) -> Result<TreeStats> {
    let mut st = TreeStats::default();
    let Some(id) = root.root else {
        return Ok(st);
    };
    let ps = store.page_size();
    let mut seen = HashSet::new();
    let mut stack = vec![(id, None)];
    while let Some((id, level)) = stack.pop() {
        mark(&mut seen, id, 1)?;
        let page = read_node_for(store, id, level, false)?;
        let node = NodeRef::parse(&page, id, ps)?;
        if level.is_none() {
            st.height = u32::from(node.level()) + 1;
        }
        let used = (NODE_HEADER_LEN + node.used()).min(ps);
        st.fragmented_bytes += (ps - used) as u64;
        let mut in_page = 0usize;
        if node.is_leaf() {
            st.leaf_pages += 1;
            st.entries += node.count() as u64;
            for i in 0..node.count() {
                let cell = node.leaf_cell(i)?;
                in_page += cell.key.len();
                st.stored_bytes += cell.key.len() as u64;
                match cell.value {
                    ValueLoc::Inline { start, end } => {
                        in_page += end.saturating_sub(start);
                        st.stored_bytes += end.saturating_sub(start) as u64;
                    }
                    ValueLoc::Overflow { id: run, len } => {
                        let npages = overflow_run(ps, cell.value).map_or(0, |(_, n)| n);
                        mark(&mut seen, run, npages)?;
                        let run_bytes = u64::from(npages) * ps as u64;
                        st.overflow_pages += u64::from(npages);
                        st.stored_bytes += u64::from(len);
                        let header = crate::format::page::HEADER_LEN as u64;
                        st.metadata_bytes += header;
                        st.fragmented_bytes += run_bytes.saturating_sub(u64::from(len) + header);
                    }
                }
            }
        } else {
            st.branch_pages += 1;
            let cl = child_level(id, node.level())?;
            for i in 0..=node.count() {
                stack.push((node.child(i)?, Some(cl)));
            }
        }
        st.metadata_bytes += used.saturating_sub(in_page) as u64;
    }
    Ok(st)
}
