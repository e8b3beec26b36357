//! Moving a tree off the file's tail (compaction, design.md "Space").
//!
//! Owns: [`relocate`], which copies every page of a tree that lies at or
//! past a page limit (and every overflow run that does) to pages the
//! store allocates, which must lie below it, repointing parents up to the
//! root: a copy-on-write of exactly the paths that reach the tail. A
//! committed page is copied and freed like any copy-on-write; a private
//! page below the limit is edited in place.
//!
//! Must not know: where the limit comes from, allocators, files.

use super::node::{copy_node, set_child, set_overflow, NodeRef, ValueLoc};
use super::store::PageWrite;
use super::{child_level, read_node_for, read_overflow, TreeRoot};
use crate::error::{Error, Result};
use crate::format::page::{page_from_slice, pages_for_payload, PageBytes as _, OFF_ID};
use crate::types::PageId;

/// Moves every page and overflow run of the tree at or past `limit`
/// below it (see the module doc). Returns the pages moved.
pub fn relocate<S: PageWrite + ?Sized>(
    store: &mut S,
    root: &mut TreeRoot,
    limit: PageId,
) -> Result<u64> {
    let Some(id) = root.root else {
        return Ok(0);
    };
    let mut moved = 0;
    if let Some(new) = node(store, id, None, limit, &mut moved)? {
        root.root = Some(new);
    }
    debug_assert!(
        root.root.is_none_or(|r| r < limit),
        "the root stayed past the limit"
    );
    Ok(moved)
}

/// A page below the limit that may be edited: `id` itself if private and
/// below, else a fresh copy (the original freed).
fn writable<S: PageWrite + ?Sized>(
    store: &mut S,
    id: PageId,
    limit: PageId,
    moved: &mut u64,
) -> Result<PageId> {
    if store.is_private(id) && id < limit {
        return Ok(id);
    }
    let ps = store.page_size();
    let page = store.read_page(id)?;
    let new = store.alloc(1)?;
    if new >= limit || new == id {
        return Err(Error::corrupted_page(
            new,
            "relocation got a page at or past its limit",
        ));
    }
    let copy = copy_node(&page, id, ps, new, store.cf())?;
    drop(page);
    store.install(new, copy);
    store.free(id, 1);
    *moved += 1;
    debug_assert!(store.is_private(new), "a relocated page is private");
    Ok(new)
}

/// Relocates the subtree at `id`; `Some(new id)` if the page itself moved.
fn node<S: PageWrite + ?Sized>(
    store: &mut S,
    id: PageId,
    level: Option<u8>,
    limit: PageId,
    moved: &mut u64,
) -> Result<Option<PageId>> {
    let ps = store.page_size();
    let page = read_node_for(store, id, level, false)?;
    let n = NodeRef::parse(&page, id, ps)?;
    if n.is_leaf() {
        let mut runs = Vec::new();
        for i in 0..n.count() {
            if let ValueLoc::Overflow { id: run, len } = n.leaf_cell(i)?.value {
                if run
                    .0
                    .saturating_add(pages_for_payload(ps, len as usize) as u64)
                    > limit.0
                {
                    runs.push((i, run, len));
                }
            }
        }
        drop(page);
        if id < limit && runs.is_empty() {
            return Ok(None);
        }
        let new = writable(store, id, limit, moved)?;
        for (i, run, len) in runs {
            let moved_run = move_run(store, run, len, limit, moved)?;
            set_overflow(store.get_mut(new)?, i, moved_run)?;
        }
        return Ok((new != id).then_some(new));
    }
    let children: Vec<PageId> = (0..=n.count()).map(|i| n.child(i)).collect::<Result<_>>()?;
    let cl = Some(child_level(id, n.level())?);
    drop(page);
    let mut changed = Vec::new();
    for (i, c) in children.into_iter().enumerate() {
        if let Some(nc) = node(store, c, cl, limit, moved)? {
            changed.push((i, nc));
        }
    }
    if id < limit && changed.is_empty() {
        return Ok(None);
    }
    let new = writable(store, id, limit, moved)?;
    for (i, nc) in changed {
        set_child(store.get_mut(new)?, i, nc)?;
    }
    Ok((new != id).then_some(new))
}

/// Copies the overflow run `run` (holding `len` bytes) below the limit.
fn move_run<S: PageWrite + ?Sized>(
    store: &mut S,
    run: PageId,
    len: u32,
    limit: PageId,
    moved: &mut u64,
) -> Result<PageId> {
    let ps = store.page_size();
    let npages = pages_for_payload(ps, len as usize);
    let old = read_overflow(store, run, len)?;
    let new = store.alloc(npages)?;
    if new.0 + npages as u64 > limit.0 {
        return Err(Error::corrupted_page(
            new,
            "relocation got a run past its limit",
        ));
    }
    let mut copy = page_from_slice(old.bytes());
    crate::format::codec::put_u64(copy.bytes_mut(), OFF_ID, new.0);
    drop(old);
    store.install(new, copy);
    store.free(run, npages);
    *moved += npages as u64;
    debug_assert_eq!(
        store.read_run(new, npages)?.page_id(),
        new,
        "a moved run names its page"
    );
    Ok(new)
}
