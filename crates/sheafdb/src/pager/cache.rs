//! The clean page cache: page runs that match the data file, evictable
//! under a byte budget.
//!
//! Sharded by page id so readers on many cores rarely share a lock; a hit
//! takes one shard's read lock and sets a reference bit (only if unset, so
//! hot pages do not bounce a cache line between cores). No cache-wide
//! counters are touched on the read path. Eviction is a
//! second-chance sweep of the shard that went over its budget.
//!
//! It also holds *dirty* runs: committed but not yet written by a
//! checkpoint. Those are the only copy of their bytes, so they are never
//! evicted and never count against the budget; a checkpoint re-inserts
//! them as clean after writing them.
//!
//! Invariant: an entry for page P holds exactly the bytes every live
//! snapshot that reaches P expects. The pager keeps this by replacing an
//! entry when P is rewritten and removing it when P is reallocated.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

use crate::format::page::PageRef;
use crate::types::{IdMap, PageId};

const SHARDS: usize = 64;

struct Entry {
    page: PageRef,
    referenced: AtomicBool,
    dirty: bool,
}

/// `bytes` counts clean entries only; dirty ones are not evictable.
#[derive(Default)]
struct Shard {
    map: IdMap<PageId, Entry>,
    bytes: usize,
}

impl Shard {
    fn put(&mut self, id: PageId, page: PageRef, dirty: bool) {
        let len = page.len();
        let entry = Entry {
            page,
            referenced: AtomicBool::new(false),
            dirty,
        };
        if let Some(old) = self.map.insert(id, entry) {
            if !old.dirty {
                self.bytes -= old.page.len();
            }
        }
        if !dirty {
            self.bytes += len;
        }
        debug_assert!(self.map.contains_key(&id), "a put entry is missing");
        debug_assert!(len > 0, "an empty run was cached");
    }

    fn take(&mut self, id: PageId) {
        if let Some(old) = self.map.remove(&id) {
            if !old.dirty {
                debug_assert!(self.bytes >= old.page.len(), "clean bytes underflow");
                self.bytes -= old.page.len();
            }
        }
        debug_assert!(!self.map.contains_key(&id), "a taken entry is still cached");
    }
}

/// Sharded clean-page cache.
pub struct PageCache {
    shards: Vec<RwLock<Shard>>,
    shard_budget: usize,
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache")
            .field("budget", &(self.shard_budget * SHARDS))
            .finish()
    }
}

impl PageCache {
    /// A cache holding about `budget_bytes`.
    pub fn new(budget_bytes: usize) -> PageCache {
        PageCache {
            shards: (0..SHARDS).map(|_| RwLock::new(Shard::default())).collect(),
            shard_budget: (budget_bytes / SHARDS).max(64 * 1024),
        }
    }

    fn shard(&self, id: PageId) -> &RwLock<Shard> {
        // Fibonacci hashing spreads sequential ids over shards.
        let h = id.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.shards[h as usize % SHARDS]
    }

    /// The cached run starting at `id`, if any.
    pub fn get(&self, id: PageId) -> Option<PageRef> {
        let shard = self.shard(id).read();
        match shard.map.get(&id) {
            Some(e) => {
                if !e.referenced.load(Ordering::Relaxed) {
                    e.referenced.store(true, Ordering::Relaxed);
                }
                Some(e.page.clone())
            }
            None => None,
        }
    }

    /// Inserts or replaces the clean run at `id`. Runs larger than a
    /// quarter of a shard's budget are not cached.
    pub fn insert(&self, id: PageId, page: PageRef) {
        let mut shard = self.shard(id).write();
        if page.len() > self.shard_budget / 4 {
            shard.take(id);
            return;
        }
        shard.put(id, page, false);
        if shard.bytes > self.shard_budget {
            Self::evict(&mut shard, self.shard_budget * 7 / 8);
        }
    }

    /// Inserts a dirty run: kept until a checkpoint writes it or the run is
    /// reallocated.
    pub fn insert_dirty(&self, id: PageId, page: PageRef) {
        self.shard(id).write().put(id, page, true);
    }

    /// After `page` was durably written at `id`: if the entry is still
    /// that very run, it becomes clean (evictable). A run that was
    /// reallocated meanwhile has another entry, which is left alone.
    pub fn mark_clean(&self, id: PageId, page: &PageRef) {
        let mut shard = self.shard(id).write();
        let same = shard
            .map
            .get(&id)
            .is_some_and(|e| std::sync::Arc::ptr_eq(&e.page, page));
        if !same {
            return;
        }
        if page.len() > self.shard_budget / 4 {
            shard.take(id);
            return;
        }
        shard.put(id, page.clone(), false);
        if shard.bytes > self.shard_budget {
            Self::evict(&mut shard, self.shard_budget * 7 / 8);
        }
    }

    /// Bytes of dirty runs held (committed, not yet written): memory the
    /// budget does not bound, only the checkpoint triggers do.
    pub fn dirty_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.read()
                    .map
                    .values()
                    .filter(|e| e.dirty)
                    .map(|e| e.page.len())
                    .sum::<usize>()
            })
            .sum()
    }

    /// Drops the run at `id` if cached (dirty or clean).
    pub fn remove(&self, id: PageId) {
        self.shard(id).write().take(id);
    }

    fn evict(shard: &mut Shard, target: usize) {
        for _round in 0..2 {
            let mut victims = Vec::new();
            let mut freed = 0usize;
            for (id, e) in shard.map.iter() {
                if shard.bytes - freed <= target {
                    break;
                }
                if e.dirty || e.referenced.swap(false, Ordering::Relaxed) {
                    continue;
                }
                freed += e.page.len();
                victims.push(*id);
            }
            for id in victims {
                shard.take(id);
            }
            if shard.bytes <= target {
                return;
            }
        }
    }

    /// Bytes of clean runs held.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.read().bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::page::PageBuf;
    use std::sync::Arc;

    #[test]
    fn stays_within_budget_and_keeps_hot_pages() {
        let cache = PageCache::new(64 * 64 * 1024);
        let hot = PageId(5);
        cache.insert(hot, Arc::new(PageBuf::zeroed(4096)));
        for i in 0..20_000u64 {
            cache.get(hot);
            cache.insert(PageId(1000 + i), Arc::new(PageBuf::zeroed(4096)));
        }
        assert!(cache.bytes() <= 64 * 64 * 1024 + 4096 * SHARDS);
        assert!(
            cache.get(hot).is_some(),
            "a page read all the time was evicted"
        );
    }

    #[test]
    fn dirty_runs_are_never_evicted() {
        let cache = PageCache::new(64 * 64 * 1024);
        for i in 0..100u64 {
            cache.insert_dirty(PageId(i), Arc::new(PageBuf::zeroed(4096)));
        }
        for i in 0..20_000u64 {
            cache.insert(PageId(1000 + i), Arc::new(PageBuf::zeroed(4096)));
        }
        for i in 0..100u64 {
            assert!(cache.get(PageId(i)).is_some(), "dirty page {i} evicted");
        }
        // A huge dirty run is kept too.
        cache.insert_dirty(PageId(50_000), Arc::new(PageBuf::zeroed(8 << 20)));
        assert!(cache.get(PageId(50_000)).is_some());
    }

    #[test]
    fn replace_and_remove() {
        let cache = PageCache::new(1 << 20);
        cache.insert(PageId(3), Arc::new(PageBuf::zeroed(4096)));
        let mut b = PageBuf::zeroed(4096);
        b.bytes_mut()[100] = 1;
        cache.insert(PageId(3), Arc::new(b));
        assert_eq!(cache.get(PageId(3)).unwrap().bytes()[100], 1);
        cache.remove(PageId(3));
        assert!(cache.get(PageId(3)).is_none());
    }
}
