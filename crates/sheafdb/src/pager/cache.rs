//! The page cache: page runs in memory, found by page id without a lock.
//!
//! A *page table*: a directory of fixed-size chunks, one slot per page id,
//! each slot an `ArcSwapOption` holding the run that starts there. A hit
//! is two atomic loads (directory, slot) and, at most once per run until
//! the next eviction sweep, setting its reference bit: no lock, no hash,
//! no counter shared between threads, so readers on many cores do not
//! contend. [`PageCache::handle`] even returns the run without touching
//! its reference count (an `arc_swap` guard), which is what a B+tree
//! descent uses for the pages it only passes through.
//!
//! Every change (a miss filling a slot, a dirty install, marking clean,
//! eviction, removal) takes one mutex, so byte counts are exact and an
//! eviction never races another change. Clean runs are evicted by a
//! second-chance (clock) sweep over the order they were cached in, once
//! their bytes pass the budget; dirty runs (committed, not yet written by
//! a checkpoint: the only copy of their bytes) are never evicted and do
//! not count against the budget; a checkpoint marks them clean after the
//! sync that wrote them.
//!
//! Memory bound: the clean bytes stay within the budget (a run larger
//! than a sixteenth of it is not cached at all), plus 16 bytes of slot per
//! page id in each 1,024-page chunk that ever held a run.
//!
//! Invariant: a slot for page P holds exactly the bytes every live
//! snapshot that reaches P expects. The pager keeps this by replacing the
//! run when P is rewritten and removing it when P is reallocated.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapAny};
use parking_lot::Mutex;

use crate::format::page::{PageBytes as _, PageHandle, PageRef, PageThin};
use crate::types::{CfId, PageId};

/// Page ids per chunk of the page table.
const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;

/// One page id's place in the table.
#[derive(Default)]
struct Slot {
    page: ArcSwapAny<Option<PageThin>>,
    /// Set by a hit, cleared by the eviction sweep (second chance).
    referenced: AtomicBool,
    /// The run is committed but not written yet: never evicted. Changed
    /// only under the cache's mutex.
    dirty: AtomicBool,
}

struct Chunk {
    slots: Box<[Slot]>,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk {
            slots: (0..CHUNK).map(|_| Slot::default()).collect(),
        }
    }
}

/// What only changes under the mutex.
#[derive(Default)]
struct Changes {
    /// Clean runs in the order they were cached (may hold ids since
    /// evicted, removed or turned dirty; the sweep skips those).
    clock: VecDeque<PageId>,
    /// Clean runs cached now.
    resident: usize,
}

/// The page cache of one data file.
pub struct PageCache {
    /// Chunk `i` holds page ids `i * CHUNK ..`; grown under `changes`.
    dir: ArcSwap<Vec<Option<Arc<Chunk>>>>,
    changes: Mutex<Changes>,
    clean_bytes: AtomicUsize,
    dirty_bytes: AtomicUsize,
    budget: usize,
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache")
            .field("budget", &self.budget)
            .field("clean_bytes", &self.bytes())
            .field("dirty_bytes", &self.dirty_bytes())
            .finish()
    }
}

fn split(id: PageId) -> (usize, usize) {
    ((id.0 >> CHUNK_BITS) as usize, (id.0 as usize) & (CHUNK - 1))
}

impl PageCache {
    /// A cache holding about `budget_bytes` of clean runs.
    pub fn new(budget_bytes: usize) -> PageCache {
        PageCache {
            dir: ArcSwap::from_pointee(Vec::new()),
            changes: Mutex::new(Changes::default()),
            clean_bytes: AtomicUsize::new(0),
            dirty_bytes: AtomicUsize::new(0),
            budget: budget_bytes.max(256 * 1024),
        }
    }

    /// Runs larger than this are not cached clean (one would crowd out
    /// the rest).
    fn largest_clean(&self) -> usize {
        self.budget / 16
    }

    /// Calls `f` with the slot of `id`, if its chunk exists.
    fn with_slot<R>(&self, id: PageId, f: impl FnOnce(&Slot) -> R) -> Option<R> {
        let (c, s) = split(id);
        let dir = self.dir.load();
        let chunk = dir.get(c)?.as_ref()?;
        chunk.slots.get(s).map(f)
    }

    /// The slot of `id`, creating its chunk (under the mutex).
    fn slot_for(&self, _changes: &mut Changes, id: PageId) -> Arc<Chunk> {
        let (c, _) = split(id);
        let dir = self.dir.load();
        if let Some(Some(chunk)) = dir.get(c) {
            return chunk.clone();
        }
        let mut grown: Vec<Option<Arc<Chunk>>> = (**dir).clone();
        if grown.len() <= c {
            grown.resize(c + 1, None);
        }
        let chunk = Arc::new(Chunk::new());
        grown[c] = Some(chunk.clone());
        self.dir.store(Arc::new(grown));
        debug_assert!(
            self.with_slot(id, |_| ()).is_some(),
            "a grown table lacks the slot"
        );
        chunk
    }

    fn touch(slot: &Slot) {
        if !slot.referenced.load(Ordering::Relaxed) {
            slot.referenced.store(true, Ordering::Relaxed);
        }
    }

    /// The cached run starting at `id`, if any (a new reference to it).
    pub fn get(&self, id: PageId) -> Option<PageRef> {
        self.with_slot(id, |slot| {
            let page = slot.page.load_full();
            if page.is_some() {
                Self::touch(slot);
            }
            page
        })
        .flatten()
    }

    /// The cached run starting at `id`, if any, without taking a new
    /// reference to it (see [`PageHandle`]).
    pub fn handle(&self, id: PageId) -> Option<PageHandle> {
        self.with_slot(id, |slot| {
            let guard = slot.page.load();
            guard.is_some().then(|| {
                Self::touch(slot);
                PageHandle::guarded(guard)
            })
        })
        .flatten()
        .flatten()
    }

    /// Puts `page` in `id`'s slot (dirty or clean), accounting for the run
    /// it replaces. Under the mutex.
    fn put(&self, changes: &mut Changes, id: PageId, page: Option<PageRef>, dirty: bool) {
        let chunk = self.slot_for(changes, id);
        let slot = &chunk.slots[split(id).1];
        let len = page.as_ref().map_or(0, |p| p.len());
        debug_assert!(
            page.as_ref()
                .is_none_or(|p| p.len() >= crate::format::page::HEADER_LEN),
            "an empty run was cached"
        );
        let old = slot.page.swap(page);
        if let Some(old) = old {
            if slot.dirty.load(Ordering::Relaxed) {
                self.dirty_bytes.fetch_sub(old.len(), Ordering::Relaxed);
            } else {
                self.clean_bytes.fetch_sub(old.len(), Ordering::Relaxed);
                changes.resident -= 1;
            }
        }
        slot.dirty.store(dirty, Ordering::Relaxed);
        if len == 0 {
            return;
        }
        if dirty {
            self.dirty_bytes.fetch_add(len, Ordering::Relaxed);
        } else {
            self.clean_bytes.fetch_add(len, Ordering::Relaxed);
            changes.resident += 1;
            changes.clock.push_back(id);
        }
        debug_assert!(
            changes.clock.len() >= changes.resident,
            "a clean cached run has no clock entry"
        );
    }

    /// Inserts or replaces the clean run at `id`. Runs larger than a
    /// sixteenth of the budget are not cached.
    pub fn insert(&self, id: PageId, page: PageRef) {
        let mut changes = self.changes.lock();
        if page.len() > self.largest_clean() {
            self.put(&mut changes, id, None, false);
            return;
        }
        self.put(&mut changes, id, Some(page), false);
        self.evict_if_over(&mut changes);
        debug_assert!(
            self.bytes() <= self.budget
                || changes.clock.is_empty()
                || self.referenced_all(&changes),
            "the clean bytes stay over the budget"
        );
    }

    /// True if every clock entry's run was referenced (a sweep then gives
    /// each a second chance before it may stop over the budget).
    fn referenced_all(&self, changes: &Changes) -> bool {
        changes.clock.iter().all(|&id| {
            self.with_slot(id, |s| s.referenced.load(Ordering::Relaxed))
                .unwrap_or(false)
        })
    }

    /// Inserts a dirty run: kept until a checkpoint writes it or the run is
    /// reallocated.
    pub fn insert_dirty(&self, id: PageId, page: PageRef) {
        let mut changes = self.changes.lock();
        self.put(&mut changes, id, Some(page), true);
        debug_assert!(
            self.with_slot(id, |s| s.dirty.load(Ordering::Relaxed)) == Some(true),
            "a dirty run was not kept dirty"
        );
    }

    /// After `page` was durably written at `id`: if the slot still holds
    /// that very run, it becomes clean (evictable). A run that was
    /// reallocated meanwhile has another entry, which is left alone.
    pub fn mark_clean(&self, id: PageId, page: &PageRef) {
        let mut changes = self.changes.lock();
        let same = self
            .with_slot(id, |s| {
                s.page
                    .load()
                    .as_ref()
                    .is_some_and(|cur| cur.heap_ptr() == page.heap_ptr())
            })
            .unwrap_or(false);
        if !same {
            return;
        }
        let keep = (page.len() <= self.largest_clean()).then(|| page.clone());
        self.put(&mut changes, id, keep, false);
        self.evict_if_over(&mut changes);
    }

    /// Drops the run at `id` if cached (dirty or clean) and it belongs to
    /// `cf`: a stale entry of a run `cf` freed is dropped, but never a run
    /// another CF installed there after the page changed hands.
    pub fn remove_owned(&self, id: PageId, cf: CfId) {
        let mut changes = self.changes.lock();
        let owned = self
            .with_slot(id, |slot| slot.page.load().as_ref().map(|p| p.cf() == cf))
            .flatten();
        if owned == Some(true) {
            self.put(&mut changes, id, None, false);
        }
    }

    /// Drops the run at `id` if cached (dirty or clean).
    pub fn remove(&self, id: PageId) {
        let mut changes = self.changes.lock();
        if self.with_slot(id, |_| ()).is_some() {
            self.put(&mut changes, id, None, false);
        }
        debug_assert!(self.get(id).is_none(), "a removed run is still cached");
    }

    /// Past the budget: second-chance sweep down to 7/8 of it.
    fn evict_if_over(&self, changes: &mut Changes) {
        if self.clean_bytes.load(Ordering::Relaxed) <= self.budget {
            return;
        }
        let target = self.budget / 8 * 7;
        // Every entry gets one look with its bit set and one without.
        let mut budget_steps = 2 * changes.clock.len() + 1;
        while self.clean_bytes.load(Ordering::Relaxed) > target && budget_steps > 0 {
            budget_steps -= 1;
            let Some(id) = changes.clock.pop_front() else {
                break;
            };
            let chunk = self.slot_for(changes, id);
            let slot = &chunk.slots[split(id).1];
            if slot.dirty.load(Ordering::Relaxed) || slot.page.load().is_none() {
                continue; // stale clock entry
            }
            if slot.referenced.swap(false, Ordering::Relaxed) {
                changes.clock.push_back(id);
                continue;
            }
            self.put(changes, id, None, false);
        }
        // Stale entries (evicted, removed, replaced) must not pile up.
        if changes.clock.len() > 2 * changes.resident + 1024 {
            self.compact_clock(changes);
        }
        debug_assert!(
            changes.clock.len() <= 2 * changes.resident + 1024,
            "the clock holds too many stale entries"
        );
    }

    /// Keeps one clock entry per clean cached run.
    fn compact_clock(&self, changes: &mut Changes) {
        let mut seen = std::collections::HashSet::new();
        let clock = std::mem::take(&mut changes.clock);
        for id in clock {
            let live = self
                .with_slot(id, |s| {
                    !s.dirty.load(Ordering::Relaxed) && s.page.load().is_some()
                })
                .unwrap_or(false);
            if live && seen.insert(id) {
                changes.clock.push_back(id);
            }
        }
        debug_assert_eq!(
            changes.clock.len(),
            changes.resident,
            "compaction left other than one entry per clean run"
        );
    }

    /// Bytes of dirty runs held (committed, not yet written): memory the
    /// budget does not bound, only the checkpoint triggers do.
    pub fn dirty_bytes(&self) -> usize {
        self.dirty_bytes.load(Ordering::Relaxed)
    }

    /// Bytes of clean runs held.
    pub fn bytes(&self) -> usize {
        self.clean_bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::page::PageBuf;

    #[test]
    fn stays_within_budget_and_keeps_hot_pages() {
        let budget = 4 << 20;
        let cache = PageCache::new(budget);
        let hot = PageId(5);
        cache.insert(hot, PageBuf::zeroed(4096).shareable());
        for i in 0..20_000u64 {
            cache.get(hot);
            cache.insert(PageId(1000 + i), PageBuf::zeroed(4096).shareable());
            assert!(cache.bytes() <= budget, "{} bytes cached", cache.bytes());
        }
        assert!(cache.bytes() > budget / 2, "the cache emptied itself");
        assert!(
            cache.get(hot).is_some(),
            "a page read all the time was evicted"
        );
        let stale = cache.changes.lock().clock.len();
        assert!(stale < 2 * 1024 + 2048, "{stale} clock entries");
    }

    #[test]
    fn dirty_runs_are_never_evicted_and_counted_apart() {
        let cache = PageCache::new(4 << 20);
        for i in 0..100u64 {
            cache.insert_dirty(PageId(i), PageBuf::zeroed(4096).shareable());
        }
        assert_eq!(cache.dirty_bytes(), 100 * 4096);
        for i in 0..20_000u64 {
            cache.insert(PageId(1000 + i), PageBuf::zeroed(4096).shareable());
        }
        for i in 0..100u64 {
            assert!(cache.get(PageId(i)).is_some(), "dirty page {i} evicted");
        }
        // A huge dirty run is kept too; marking it clean drops it.
        let huge = PageBuf::zeroed(8 << 20).shareable();
        cache.insert_dirty(PageId(50_000), huge.clone());
        assert!(cache.get(PageId(50_000)).is_some());
        cache.mark_clean(PageId(50_000), &huge);
        assert!(cache.get(PageId(50_000)).is_none());
        assert_eq!(cache.dirty_bytes(), 100 * 4096);
        // Marking a small one clean moves its bytes to the clean count.
        let p = cache.get(PageId(3)).unwrap();
        let clean = cache.bytes();
        cache.mark_clean(PageId(3), &p);
        assert_eq!(cache.dirty_bytes(), 99 * 4096);
        assert_eq!(cache.bytes(), clean + 4096);
        // Marking clean a run that was replaced meanwhile does nothing.
        cache.insert_dirty(PageId(4), PageBuf::zeroed(4096).shareable());
        cache.mark_clean(PageId(4), &p);
        assert_eq!(cache.dirty_bytes(), 99 * 4096);
    }

    #[test]
    fn replace_remove_and_handles() {
        let cache = PageCache::new(1 << 20);
        cache.insert(PageId(3), PageBuf::zeroed(4096).shareable());
        let mut b = PageBuf::zeroed(4096);
        b.bytes_mut()[100] = 1;
        cache.insert(PageId(3), b.shareable());
        assert_eq!(cache.bytes(), 4096, "a replaced run was counted twice");
        assert_eq!(cache.get(PageId(3)).unwrap().bytes()[100], 1);
        let h = cache.handle(PageId(3)).unwrap();
        cache.remove(PageId(3));
        assert!(cache.get(PageId(3)).is_none());
        assert!(cache.handle(PageId(3)).is_none());
        assert_eq!(cache.bytes(), 0);
        // A handle taken before keeps reading the run it found.
        assert_eq!(h.bytes()[100], 1);
        // Far page ids grow the table.
        cache.insert(PageId(5_000_000), PageBuf::zeroed(4096).shareable());
        assert!(cache.get(PageId(5_000_000)).is_some());
        assert!(cache.get(PageId(4_999_999)).is_none());
    }

    /// Readers on several threads hit while another thread inserts and
    /// evicts: every hit returns the run of its id.
    #[test]
    fn concurrent_hits_during_eviction() {
        let cache = PageCache::new(1 << 20);
        let run = |id: u64| {
            let mut b = PageBuf::new_run(
                4096,
                1,
                crate::format::page::PageType::Leaf,
                PageId(id),
                crate::types::CfId(1),
            );
            b.bytes_mut()[100] = 7;
            b.shareable()
        };
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let cache = &cache;
                s.spawn(move || {
                    for i in 0..50_000u64 {
                        let id = PageId(2 + (i * 7 + t) % 2000);
                        if let Some(h) = cache.handle(id) {
                            assert_eq!(h.page_id(), id);
                        }
                    }
                });
            }
            for i in 0..20_000u64 {
                let id = 2 + i % 2000;
                cache.insert(PageId(id), run(id));
            }
        });
        assert!(cache.bytes() <= 1 << 20);
    }
}
