//! The checkpoint's walk: collect the dirty runs of a tree.
//!
//! With copy-on-write, the runs a version created since the last checkpoint
//! form a connected top part of each tree (a changed page's parent changed
//! too), so a walk from the root that descends only into dirty runs finds
//! all of them while reading nothing else (design.md §6 step 2).
//!
//! Must not know: how dirtiness is tracked (the caller passes a predicate),
//! files, transactions.

use super::node::{NodeRef, ValueLoc};
use super::store::PageRead;
use super::{child_level, read_node_for, read_overflow, TreeRoot};
use crate::error::Result;
use crate::format::page::PageRef;
use crate::types::PageId;

/// Appends every dirty run reachable from `root` through dirty pages to
/// `out` (first page id, run).
pub fn collect_dirty<S: PageRead + ?Sized>(
    store: &S,
    root: &TreeRoot,
    is_dirty: &dyn Fn(PageId) -> bool,
    out: &mut Vec<(PageId, PageRef)>,
) -> Result<()> {
    match root.root {
        Some(id) if is_dirty(id) => visit(store, id, None, is_dirty, out),
        _ => Ok(()),
    }
}

fn visit<S: PageRead + ?Sized>(
    store: &S,
    id: PageId,
    level: Option<u8>,
    is_dirty: &dyn Fn(PageId) -> bool,
    out: &mut Vec<(PageId, PageRef)>,
) -> Result<()> {
    let page = read_node_for(store, id, level, false)?;
    let node = NodeRef::parse(&page, id, store.page_size())?;
    if node.is_leaf() {
        for i in 0..node.count() {
            if let ValueLoc::Overflow { id: run, len } = node.leaf_cell(i)?.value {
                if is_dirty(run) {
                    out.push((run, read_overflow(store, run, len)?));
                }
            }
        }
    } else {
        let cl = child_level(id, node.level())?;
        for i in 0..=node.count() {
            let child = node.child(i)?;
            if is_dirty(child) {
                visit(store, child, Some(cl), is_dirty, out)?;
            }
        }
    }
    out.push((id, page.to_ref()));
    Ok(())
}
