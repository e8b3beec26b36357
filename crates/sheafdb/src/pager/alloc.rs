//! Space management: the global extent map and one allocator per CF.
//!
//! The file is carved into *extents*, each owned by one CF (or free). A CF
//! allocates pages only inside its own extents, without any global lock;
//! only claiming a new extent takes the extent-map lock (design.md §8).
//!
//! A CF allocator keeps two sets:
//! - `free`: pages that may be handed out now;
//! - `pending`: pages freed by a commit that some snapshot may still read.
//!   They count as free in the persisted state (no snapshot survives a
//!   crash) but are reused only after their [`ReclaimBatch`] is released.
//!
//! Invariants: `free`, `pending` and the pages reachable from the latest
//! version are disjoint and together cover the CF's extents exactly (checked
//! by `check_integrity`); every range in `free`/`pending` lies inside an
//! extent of the CF.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::format::records::{ExtentRecord, PageRange};
use crate::pager::ranges::RangeSet;
use crate::types::{CfId, IdMap, PageId, Version};

/// Growth policy of extents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentPolicy {
    /// Pages in a CF's first extent.
    pub first_pages: u64,
    /// Largest growth step in pages (a single huge value may still claim more).
    pub max_pages: u64,
}

impl ExtentPolicy {
    /// About 1 MiB first extents doubling up to 64 MiB (and at most an
    /// eighth of what the CF owns, `CfAllocator::next_extent_pages`).
    pub fn for_page_size(page_size: usize) -> ExtentPolicy {
        ExtentPolicy {
            first_pages: ((1 << 20) / page_size as u64).max(4),
            max_pages: ((64 << 20) / page_size as u64).max(16),
        }
    }
}

/// The global extent table.
#[derive(Debug, Clone, Default)]
pub struct ExtentMap {
    file_pages: u64,
    owned: BTreeMap<u64, (u64, CfId)>,
    free: RangeSet,
}

impl ExtentMap {
    /// Pages of the file no extent owns (claimable without growing it).
    pub fn free_pages(&self) -> u64 {
        self.free.pages()
    }

    /// Of those, the pages below page `limit`.
    pub fn free_pages_below(&self, limit: u64) -> u64 {
        self.free.pages_below(limit)
    }

    /// A map for a new file whose first `reserved` pages hold superblocks.
    pub fn new(reserved: u64) -> ExtentMap {
        ExtentMap {
            file_pages: reserved,
            ..ExtentMap::default()
        }
    }

    /// Rebuilds the map from its persisted form, validating it.
    pub fn from_records(file_pages: u64, records: &[ExtentRecord]) -> Result<ExtentMap> {
        let mut map = ExtentMap::new(2);
        map.file_pages = file_pages;
        let mut prev_end = 2;
        for e in records {
            let r = e.range;
            if r.start.0 < prev_end || r.end() > file_pages {
                return Err(Error::corrupted(
                    format!("extent {r:?} overlaps another or passes the file end"),
                    "extent map",
                ));
            }
            prev_end = r.end();
            match e.owner {
                Some(cf) => {
                    map.owned.insert(r.start.0, (r.pages, cf));
                }
                None => {
                    map.free.insert(r.start.0, r.pages);
                }
            }
        }
        Ok(map)
    }

    /// Persisted form, sorted by start.
    pub fn to_records(&self) -> Vec<ExtentRecord> {
        let mut v: Vec<ExtentRecord> = self
            .owned
            .iter()
            .map(|(&s, &(pages, cf))| ExtentRecord {
                range: PageRange {
                    start: PageId(s),
                    pages,
                },
                owner: Some(cf),
            })
            .chain(
                self.free
                    .iter()
                    .map(|range| ExtentRecord { range, owner: None }),
            )
            .collect();
        v.sort_by_key(|e| e.range.start);
        v
    }

    /// Persisted form in which an extent owned by a CF is recorded as owned
    /// only if `persisted(cf)` lists it (the extents the CF's persisted
    /// descriptor accounts for); extents claimed since are recorded as free
    /// — no page in them is live in the durable base.
    pub fn to_records_as_persisted(
        &self,
        persisted: &dyn Fn(CfId) -> Option<Vec<PageRange>>,
    ) -> Vec<ExtentRecord> {
        // Sorted once per CF, so a CF of many extents costs n log n here,
        // not n² (this runs in every checkpoint).
        let mut cache: std::collections::HashMap<CfId, Vec<PageRange>> = Default::default();
        let mut v = self.to_records();
        for e in &mut v {
            if let Some(cf) = e.owner {
                let known = cache.entry(cf).or_insert_with(|| {
                    let mut known = persisted(cf).unwrap_or_default();
                    known.sort_unstable();
                    known
                });
                if known.binary_search(&e.range).is_err() {
                    e.owner = None;
                }
            }
        }
        v
    }

    /// File length in pages.
    pub fn file_pages(&self) -> u64 {
        self.file_pages
    }

    /// The owner of every owned extent, in extent order.
    pub fn owners(&self) -> impl Iterator<Item = CfId> + '_ {
        self.owned.values().map(|&(_, cf)| cf)
    }

    /// Extents owned by `cf`.
    pub fn extents_of(&self, cf: CfId) -> Vec<PageRange> {
        self.owned
            .iter()
            .filter(|(_, &(_, o))| o == cf)
            .map(|(&s, &(pages, _))| PageRange {
                start: PageId(s),
                pages,
            })
            .collect()
    }

    /// Gives `cf` a new extent of `pages` pages from the free extents
    /// wholly below page `limit`, if one fits.
    pub fn claim_below(&mut self, cf: CfId, pages: u64, limit: u64) -> Option<PageRange> {
        let start = self.free.take_below(pages, limit)?;
        self.owned.insert(start, (pages, cf));
        debug_assert!(start + pages <= limit, "a claim past its limit");
        Some(PageRange {
            start: PageId(start),
            pages,
        })
    }

    /// Gives `cf` a new extent of at least `min` and at most `max` pages
    /// from the free extents wholly below page `limit`: as much of the
    /// lowest one that has `min` as it has ([`RangeSet::take_first_below`]).
    pub fn claim_most_below(
        &mut self,
        cf: CfId,
        (min, max): (u64, u64),
        limit: u64,
    ) -> Option<PageRange> {
        let (start, pages) = self.free.take_first_below(min, max, limit)?;
        self.owned.insert(start, (pages, cf));
        debug_assert!(
            start + pages <= limit && pages >= min,
            "a claim past its bounds"
        );
        Some(PageRange {
            start: PageId(start),
            pages,
        })
    }

    /// Gives `cf` a new extent of `pages` pages: a free extent if one fits,
    /// else the end of the file.
    pub fn claim(&mut self, cf: CfId, pages: u64) -> PageRange {
        let start = match self.free.take(pages) {
            Some(s) => s,
            None => {
                let s = self.file_pages;
                self.file_pages += pages;
                s
            }
        };
        self.owned.insert(start, (pages, cf));
        PageRange {
            start: PageId(start),
            pages,
        }
    }

    /// Cuts the file back to `end` pages: every extent (owned or free)
    /// loses its pages at or past `end`. The owners' allocators must have
    /// given those pages up first ([`CfAllocator::cut_to`]).
    pub fn cut_to(&mut self, end: u64) {
        debug_assert!(end >= 2, "a cut into the superblocks");
        let owned: Vec<(u64, u64, CfId)> = (self.owned.range(..))
            .filter(|(&s, &(p, _))| s + p > end)
            .map(|(&s, &(p, cf))| (s, p, cf))
            .collect();
        for (s, p, cf) in owned {
            self.owned.remove(&s);
            if s < end {
                self.owned.insert(s, (end - s, cf));
            }
            debug_assert!(p > 0, "an empty extent");
        }
        let free: Vec<PageRange> = self.free.iter().filter(|r| r.end() > end).collect();
        for r in free {
            let from = r.start.0.max(end);
            let ok = self.free.remove(from, r.end() - from);
            debug_assert!(ok, "a free extent vanished");
        }
        self.file_pages = self.file_pages.min(end);
        debug_assert!(
            self.owned.iter().all(|(&s, &(p, _))| s + p <= end)
                && self.free.iter().all(|r| r.end() <= end),
            "an extent passes the cut"
        );
    }

    /// Takes `range` (free pages of `cf`, inside its extents) out of its
    /// extents into the free pool, splitting the extents around it.
    pub fn give_back(&mut self, cf: CfId, range: PageRange) {
        let (lo, hi) = (range.start.0, range.end());
        let hit: Vec<(u64, u64)> = (self.owned.range(..hi))
            .filter(|(&s, &(p, o))| o == cf && s + p > lo)
            .map(|(&s, &(p, _))| (s, p))
            .collect();
        // DESIGN 11.3: a CF gives back only pages of its own extents (its
        // free ones); anything else would put another CF's pages, or
        // pages in use, into the pool.
        debug_assert_eq!(
            hit.iter()
                .map(|&(s, p)| (s + p).min(hi) - s.max(lo))
                .sum::<u64>(),
            range.pages,
            "cf {cf} gave back {range:?}, which its extents do not cover"
        );
        for (s, p) in hit {
            self.owned.remove(&s);
            if s < lo {
                self.owned.insert(s, (lo - s, cf));
            }
            if s + p > hi {
                self.owned.insert(hi, (s + p - hi, cf));
            }
        }
        let inserted = self.free.insert(lo, hi - lo);
        debug_assert!(inserted, "a given-back range overlapped the free pool");
    }

    /// One past the last page of the extents whose owner `known` does not
    /// name, if there are any.
    pub fn end_of_others(&self, known: impl Fn(CfId) -> bool) -> Option<u64> {
        (self.owned.iter())
            .filter(|(_, &(_, cf))| !known(cf))
            .map(|(&s, &(p, _))| s + p)
            .max()
    }

    /// Returns every extent of each CF `of` names to the free pool, in one
    /// pass over the extents: a checkpoint after many drops calls it once
    /// (one pass per dropped CF made it quadratic in the drops).
    pub fn release_all_of(&mut self, of: impl Fn(CfId) -> bool) {
        let mine: Vec<u64> = self
            .owned
            .iter()
            .filter(|(_, &(_, o))| of(o))
            .map(|(&s, _)| s)
            .collect();
        for s in mine {
            let (pages, _) = self.owned.remove(&s).expect("listed");
            let inserted = self.free.insert(s, pages);
            debug_assert!(inserted, "freed extent overlapped a free one");
        }
    }
}

/// Pages that waited on snapshots and may now be reused; filled by
/// [`ReclaimBatch`] drops on any thread, drained by the allocator.
pub type ReleasedPages = Arc<ReleaseSink>;

/// Told how many pages each dropped snapshot released (the database
/// wakes its checkpointer to give their file blocks back once enough
/// have; design.md "Holes").
pub trait ReleaseWatch: Send + Sync + std::fmt::Debug {
    /// `pages` were just released into a sink. Called on the releasing
    /// thread with no lock held; must be cheap and must not block.
    fn released(&self, pages: u64);
}

/// Where an allocator's reclaim batches release their runs.
#[derive(Debug, Default)]
pub struct ReleaseSink {
    runs: Mutex<Vec<(PageId, u32)>>,
    watch: std::sync::OnceLock<Arc<dyn ReleaseWatch>>,
}

impl ReleaseSink {
    /// Adds released runs, then tells the watch (if one is set).
    fn push(&self, runs: Vec<(PageId, u32)>) {
        let watch = self.watch.get();
        let pages = watch.map_or(0, |_| runs.iter().map(|&(_, n)| n as u64).sum());
        self.runs.lock().extend(runs);
        if let Some(w) = watch {
            w.released(pages);
        }
    }

    /// Takes every run released so far.
    fn take(&self) -> Vec<(PageId, u32)> {
        std::mem::take(&mut *self.runs.lock())
    }
}

/// Pages freed by the commit after version v; dropped (and its pages
/// released) once no snapshot of a version ≤ v exists.
///
/// Each batch holds the next one, so a batch cannot be dropped before every
/// older one is: a snapshot of version u keeps batches u, u+1, … alive.
#[derive(Debug)]
pub struct ReclaimBatch {
    pages: Mutex<Vec<(PageId, u32)>>,
    next: Mutex<Option<Arc<ReclaimBatch>>>,
    sink: ReleasedPages,
}

impl ReclaimBatch {
    /// An empty batch releasing into `sink`.
    pub fn new(sink: ReleasedPages) -> Arc<ReclaimBatch> {
        Arc::new(ReclaimBatch {
            pages: Mutex::new(Vec::new()),
            next: Mutex::new(None),
            sink,
        })
    }

    /// A new, empty batch releasing into the same allocator as this one
    /// (for a commit that frees nothing: no allocator lock needed).
    pub fn successor(&self) -> Arc<ReclaimBatch> {
        ReclaimBatch::new(self.sink.clone())
    }

    /// Called once by the commit that supersedes this batch's version:
    /// records the pages it freed and links the new version's batch.
    pub fn seal(&self, freed: Vec<(PageId, u32)>, next: Arc<ReclaimBatch>) {
        let mut n = self.next.lock();
        assert!(n.is_none(), "reclaim batch sealed twice");
        *n = Some(next);
        *self.pages.lock() = freed;
    }

    fn release(&self) {
        let pages = std::mem::take(&mut *self.pages.lock());
        if !pages.is_empty() {
            self.sink.push(pages);
        }
    }
}

impl Drop for ReclaimBatch {
    fn drop(&mut self) {
        self.release();
        // Unlink iteratively: a long chain must not recurse.
        let mut next = self.next.get_mut().take();
        while let Some(arc) = next {
            match Arc::try_unwrap(arc) {
                Ok(mut b) => {
                    b.release();
                    next = b.next.get_mut().take();
                }
                Err(_) => break,
            }
        }
    }
}

/// State of a run freed by a commit but not yet reusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FreedState {
    /// A snapshot of an older version may still read it.
    Pinned,
    /// No snapshot needs it, but the durable base still references it:
    /// reusable after a checkpoint of a version ≥ `freed_at`.
    AwaitCheckpoint,
}

#[derive(Debug, Clone, Copy)]
struct Freed {
    npages: u32,
    allocated_at: Version,
    freed_at: Version,
    state: FreedState,
    /// Its bytes are in the file (it was in a durable base, or a
    /// checkpoint wrote it): its cache entry may be clean and evictable.
    /// Unwritten runs count as dirty pages until written or released.
    written: bool,
}

/// The allocator of one CF (or of the system).
///
/// Every page of the CF's extents is in exactly one of: `free`
/// (allocatable), `uncommitted` (held by the write transaction in flight),
/// `recent` (committed after the durable base, live), `freed` (freed by a
/// commit, waiting for snapshots or a checkpoint), or the durable base
/// (everything else, allocated at version 0 as far as we know).
#[derive(Debug)]
pub struct CfAllocator {
    cf: CfId,
    policy: ExtentPolicy,
    extents: Vec<PageRange>,
    free: RangeSet,
    uncommitted: RangeSet,
    recent: IdMap<u64, (u32, Version)>,
    freed: IdMap<u64, Freed>,
    base_version: Version,
    released: ReleasedPages,
    /// Shared count, over all CFs, of pages whose only copy is in memory:
    /// `recent` runs plus freed runs not yet `written` (an old snapshot
    /// may still read those). Checkpoint trigger and memory bound.
    dirty_counter: Arc<AtomicU64>,
    /// Runs freed without ever being written: their only copy is a dirty
    /// cache entry, which the allocating transaction drops.
    unwritten_freed: Vec<PageId>,
    /// Operations since creation (debug builds sample the full invariant
    /// check on large allocators by it).
    ops: u64,
    /// While set (compaction), no page at or past it is handed out.
    limit: Option<u64>,
    /// Set by [`CfAllocator::discard_all`] (a dropped CF's pages went
    /// back): released runs still in the sink are nobody's.
    discarded: bool,
    /// Free pages whose file blocks were given back (a hole punched,
    /// design.md "Holes"): a subset of `free`; a page leaves it when it
    /// leaves `free`, so the next punch knows which runs still hold blocks.
    punched: RangeSet,
}

impl CfAllocator {
    /// Checks, in debug builds, every invariant of the allocator's state:
    /// extents disjoint; `free`, `uncommitted`, `recent` and `freed`
    /// disjoint and inside the extents; runs committed since the durable
    /// base newer than it; a committed freed run freed after it was
    /// allocated; punched runs free. Called after every mutating
    /// operation; past 2,048 tracked runs (recent, freed, free and
    /// punched), on one operation in (tracked runs), so the check
    /// (linear in the runs) costs a bounded amount per operation however
    /// large the allocator grows (a fold allocates thousands of runs).
    fn assert_invariants(&mut self) {
        if !cfg!(debug_assertions) {
            return;
        }
        self.ops = self.ops.wrapping_add(1);
        let tracked = self.recent.len() + self.freed.len() + self.free.runs() + self.punched.runs();
        let every = (tracked as u64).max(256);
        if tracked > 2048 && !self.ops.is_multiple_of(every) {
            return;
        }
        let cf = self.cf;
        let mut owned = RangeSet::new();
        for e in &self.extents {
            assert!(owned.insert(e.start.0, e.pages), "cf {cf}: extents overlap");
        }
        let mut used = RangeSet::new();
        let mut claim = |start: u64, pages: u64, what: &str| {
            assert!(
                owned.contains_all(start, pages),
                "cf {cf}: {what} run {start}+{pages} outside the extents"
            );
            assert!(
                used.insert(start, pages),
                "cf {cf}: {what} run {start}+{pages} in two allocator states"
            );
        };
        for r in self.free.iter() {
            claim(r.start.0, r.pages, "free");
        }
        for r in self.uncommitted.iter() {
            claim(r.start.0, r.pages, "uncommitted");
        }
        for (&p, &(n, a)) in &self.recent {
            claim(p, n as u64, "recent");
            assert!(
                a > self.base_version,
                "cf {cf}: recent run {p} at or below the base"
            );
        }
        for (&p, f) in &self.freed {
            claim(p, f.npages as u64, "freed");
            assert!(
                f.freed_at > f.allocated_at,
                "cf {cf}: run {p} freed before allocated"
            );
        }
        for r in self.punched.iter() {
            assert!(
                self.free.contains_all(r.start.0, r.pages),
                "cf {cf}: punched run {}+{} is not free",
                r.start.0,
                r.pages
            );
        }
    }

    /// An allocator owning `extents` with `free` pages free, whose durable
    /// base is at `base_version`.
    pub fn new(
        cf: CfId,
        policy: ExtentPolicy,
        extents: Vec<PageRange>,
        free: &[PageRange],
    ) -> Result<CfAllocator> {
        let mut owned = RangeSet::new();
        for e in &extents {
            if !owned.insert(e.start.0, e.pages) {
                return Err(Error::corrupted(
                    format!("extents of cf {cf} overlap"),
                    "allocator state",
                ));
            }
        }
        let mut set = RangeSet::new();
        for r in free {
            // Free ranges may span adjacent extents (they are coalesced).
            let inside = owned.contains_all(r.start.0, r.pages);
            if !inside || !set.insert(r.start.0, r.pages) {
                return Err(Error::corrupted(
                    format!("free range {r:?} of cf {cf} outside its extents or overlapping"),
                    "allocator state",
                ));
            }
        }
        Ok(CfAllocator {
            cf,
            policy,
            extents,
            free: set,
            uncommitted: RangeSet::new(),
            recent: IdMap::default(),
            freed: IdMap::default(),
            base_version: Version(0),
            released: Arc::new(ReleaseSink::default()),
            dirty_counter: Arc::new(AtomicU64::new(0)),
            unwritten_freed: Vec::new(),
            ops: 0,
            limit: None,
            discarded: false,
            punched: RangeSet::new(),
        })
    }

    /// Counts this CF's dirty pages into `counter` (shared by all CFs).
    pub fn set_dirty_counter(&mut self, counter: Arc<AtomicU64>) {
        let mine = self.dirty_pages();
        self.dirty_counter.fetch_sub(mine, Ordering::Relaxed);
        counter.fetch_add(mine, Ordering::Relaxed);
        self.dirty_counter = counter;
    }

    /// Sets the version of the durable base (at open).
    pub fn set_base_version(&mut self, v: Version) {
        self.base_version = v;
    }

    /// Tells `watch` about every release into this allocator's sink
    /// (once; a second watch is ignored).
    pub fn set_release_watch(&self, watch: Arc<dyn ReleaseWatch>) {
        let _ = self.released.watch.set(watch);
    }

    /// Where reclaim batches of this CF release pages.
    pub fn released_sink(&self) -> ReleasedPages {
        self.released.clone()
    }

    /// Extents owned.
    pub fn extents(&self) -> &[PageRange] {
        &self.extents
    }

    /// One past the highest page of the CF's extents that is not free now
    /// (live, in flight, or waiting for a snapshot or a checkpoint): how
    /// far its extents may be cut back. The lowest extent start if every
    /// page is free; `None` without extents.
    pub fn live_end(&mut self) -> Option<u64> {
        self.drain_released();
        let mut exts = self.extents.clone();
        exts.sort_by_key(|e| std::cmp::Reverse(e.start));
        for e in &exts {
            let mut p = e.end();
            while p > e.start.0 {
                match self.free.containing(p - 1) {
                    Some((s, _)) => p = s.max(e.start.0),
                    None => return Some(p),
                }
            }
        }
        exts.last().map(|e| e.start.0)
    }

    /// True if a run freed by a commit, ending past page `limit`, still
    /// waits for a snapshot (compaction waits, bounded, for those before
    /// it cuts: a moved page's old copy is pinned until the snapshots
    /// that read it are dropped).
    pub fn pinned_past(&mut self, limit: u64) -> bool {
        self.drain_released();
        self.freed
            .iter()
            .any(|(&p, f)| f.state == FreedState::Pinned && p + u64::from(f.npages) > limit)
    }

    /// Pages freed by commits that are not free yet, as (waiting for a
    /// snapshot to end, waiting only for a checkpoint): what a fold round
    /// short of free space could have by waiting instead of growing the
    /// file (`DbShared::round_budget`).
    pub fn waiting_pages(&mut self) -> (u64, u64) {
        self.drain_released();
        let (mut pinned, mut checkpoint) = (0, 0);
        for f in self.freed.values() {
            match f.state {
                FreedState::Pinned => pinned += u64::from(f.npages),
                FreedState::AwaitCheckpoint => checkpoint += u64::from(f.npages),
            }
        }
        (pinned, checkpoint)
    }

    /// Gives up its free runs of at least `min_pages` that lie below page
    /// `below`: taken out of the free set and out of its extents (split
    /// around them); the caller returns them to the extent map's pool, so
    /// another CF may claim them (compaction packs every CF into the
    /// lowest space, not only its own).
    /// At most about `budget` pages are given: the lowest runs, until
    /// their pages reach it. A run that crosses `below` gives its part
    /// below it: a CF's free tail often starts under a compaction limit,
    /// and is the only long run there when the rest of its free space is
    /// splintered (without it, a system tree value of many pages found
    /// no run below the limit, and compaction stopped at twice its
    /// target: `a_many_page_cf_descriptor_does_not_keep_compaction_from_its_target`).
    pub fn give_free(&mut self, min_pages: u64, below: u64, budget: u64) -> Vec<PageRange> {
        self.drain_released();
        let mut given = 0u64;
        let runs: Vec<PageRange> = (self.free.iter())
            .filter(|r| r.start.0 < below)
            .map(|r| PageRange {
                start: r.start,
                pages: r.pages.min(below - r.start.0),
            })
            .filter(|r| r.pages >= min_pages)
            .take_while(|r| {
                let more = given < budget;
                given = given.saturating_add(r.pages);
                more
            })
            .collect();
        for r in &runs {
            let ok = self.free.remove(r.start.0, r.pages);
            assert!(ok, "engine invariant: listed from the free set");
            self.punched.remove_overlap(r.start.0, r.pages);
            self.extents = (self.extents.iter())
                .flat_map(|e| {
                    let (lo, hi) = (r.start.0.max(e.start.0), r.end().min(e.end()));
                    if lo >= hi {
                        return vec![*e];
                    }
                    let mut keep = Vec::new();
                    if e.start.0 < lo {
                        keep.push(PageRange {
                            start: e.start,
                            pages: lo - e.start.0,
                        });
                    }
                    if hi < e.end() {
                        keep.push(PageRange {
                            start: PageId(hi),
                            pages: e.end() - hi,
                        });
                    }
                    keep
                })
                .collect();
        }
        self.assert_invariants();
        runs
    }

    /// Gives up every page at or past `end`, all of which must be free
    /// now (`false`, changing nothing, otherwise): removed from the free
    /// set, and the extents cut there.
    pub fn cut_to(&mut self, end: u64) -> bool {
        let cut: Vec<(u64, u64)> = (self.extents.iter())
            .filter(|e| e.end() > end)
            .map(|e| {
                let from = e.start.0.max(end);
                (from, e.end() - from)
            })
            .collect();
        if !cut.iter().all(|&(s, n)| self.free.contains_all(s, n)) {
            return false;
        }
        for (s, n) in cut {
            let ok = self.free.remove(s, n);
            assert!(ok, "engine invariant: checked free a moment ago");
            self.punched.remove_overlap(s, n);
        }
        self.extents = (self.extents.iter())
            .filter(|e| e.start.0 < end)
            .map(|e| PageRange {
                start: e.start,
                pages: e.pages.min(end - e.start.0),
            })
            .collect();
        self.assert_invariants();
        debug_assert!(
            self.extents.iter().all(|e| e.end() <= end),
            "an extent passes the cut"
        );
        true
    }

    /// The CF whose pages this allocator hands out.
    pub fn cf(&self) -> CfId {
        self.cf
    }

    /// Pages free now.
    pub fn free_set(&self) -> &RangeSet {
        &self.free
    }

    /// Pages freed by commits and not yet reusable.
    pub fn pending_set(&self) -> RangeSet {
        let mut s = RangeSet::new();
        for (&p, f) in &self.freed {
            s.insert(p, f.npages as u64);
        }
        s
    }

    /// Bytes of pages committed since the durable base and still live:
    /// what the next checkpoint has to write at most.
    pub fn dirty_pages(&self) -> u64 {
        let recent: u64 = self.recent.values().map(|&(n, _)| n as u64).sum();
        recent + self.unwritten_freed_pages()
    }

    fn unwritten_freed_pages(&self) -> u64 {
        self.freed
            .values()
            .filter(|f| !f.written)
            .map(|f| f.npages as u64)
            .sum()
    }

    /// Freed runs that never reached the file and were superseded at or
    /// before `upto` (so a checkpoint of `upto` does not write them), while
    /// an older snapshot may still read them. A checkpoint writes them to
    /// their own pages — referenced by no durable base, and not reusable
    /// while pinned — so their cache entries can become clean and be
    /// evicted: old snapshots cost no memory beyond the cache budget
    /// (issue 9 point 10). Releases by dropped snapshots are drained
    /// first: a run nothing pins any more is free, not written.
    pub fn pinned_unwritten(&mut self, upto: Version) -> Vec<(PageId, u32)> {
        self.drain_released();
        self.freed
            .iter()
            .filter(|(_, f)| !f.written && f.freed_at <= upto && f.state == FreedState::Pinned)
            .map(|(&p, f)| (PageId(p), f.npages))
            .collect()
    }

    /// After a checkpoint durably wrote these freed runs (those still
    /// freed and unwritten): they count as dirty no more.
    fn note_written(&mut self, runs: &[(PageId, u32)]) -> u64 {
        let mut n = 0;
        for &(p, _) in runs {
            if let Some(f) = self.freed.get_mut(&p.0) {
                if !f.written {
                    f.written = true;
                    n += f.npages as u64;
                }
            }
        }
        n
    }

    /// Runs allocated after the durable base and live at version `upto`:
    /// exactly what a checkpoint of `upto` must write. This includes runs a
    /// later commit already freed (the snapshot still reaches them).
    ///
    /// The map is sized once, for every run it could hold, and hashed with
    /// [`IdHasher`](crate::types::IdHasher): this runs under the allocator
    /// lock, and a map grown by doubling with SipHash made a checkpoint
    /// after a 500,000-key removal spend about a sixth of its time here,
    /// mostly in the allocator merging freed chunks at each regrowth.
    pub fn dirty_runs(&self, upto: Version) -> IdMap<PageId, u32> {
        let mut out = IdMap::with_capacity_and_hasher(
            self.recent.len() + self.freed.len(),
            Default::default(),
        );
        let live_recent = self
            .recent
            .iter()
            .filter(|(_, &(_, a))| a <= upto)
            .map(|(&p, &(n, _))| (PageId(p), n));
        let live_freed = self
            .freed
            .iter()
            .filter(|(_, f)| {
                f.allocated_at > self.base_version && f.allocated_at <= upto && f.freed_at > upto
            })
            .map(|(&p, f)| (PageId(p), f.npages));
        out.extend(live_recent.chain(live_freed));
        out
    }

    /// Free space of the CF as of version `at` (≥ the durable base, ≤ the
    /// latest commit): every page not live at `at`. A page is live at `at`
    /// iff it was allocated at or before `at` and not freed at or before it.
    pub fn free_at(&self, at: Version) -> RangeSet {
        let mut s = self.free.clone();
        let ok = s.insert_all(&self.uncommitted);
        assert!(ok, "uncommitted pages also free in cf {}", self.cf);
        let recent = (self.recent.iter())
            .filter(|&(_, &(_, a))| a > at)
            .map(|(&p, &(n, _))| (PageId(p), n));
        let freed = (self.freed.iter())
            .filter(|(_, f)| f.freed_at <= at || f.allocated_at > at)
            .map(|(&p, f)| (PageId(p), f.npages));
        let mut runs: Vec<(PageId, u32)> = recent.chain(freed).collect();
        if let Some((p, n)) = s.insert_runs(&mut runs) {
            panic!("run {p}+{n} in two allocator states of cf {}", self.cf);
        }
        s
    }

    /// Moves runs released by dropped snapshots to `free` (or to waiting
    /// for a checkpoint if the durable base still uses them). Returns the
    /// runs that became free.
    pub fn drain_released(&mut self) -> Vec<(PageId, u32)> {
        let released = self.released.take();
        if self.discarded {
            // Runs released before `discard_all` and never drained: the
            // discard already handed back every page they name (they were
            // in `freed`). Compaction, which listed the CF before the
            // drop, still asks (it panicked here before).
            return Vec::new();
        }
        let mut now_free = Vec::new();
        for (p, n) in released {
            let f = self.freed.get_mut(&p.0).unwrap_or_else(|| {
                panic!(
                    "engine invariant: a released run {p} was freed by a commit in cf {}",
                    self.cf
                )
            });
            assert_eq!(f.npages, n, "released run {p} changed length");
            debug_assert_eq!(f.state, FreedState::Pinned);
            let in_base = f.allocated_at <= self.base_version && f.freed_at > self.base_version;
            if in_base {
                debug_assert!(f.written, "a run of the durable base is in the file");
                f.state = FreedState::AwaitCheckpoint;
            } else {
                if !f.written {
                    self.dirty_counter.fetch_sub(n as u64, Ordering::Relaxed);
                }
                if f.allocated_at > self.base_version {
                    self.unwritten_freed.push(p);
                }
                self.freed.remove(&p.0);
                let ok = self.free.insert(p.0, n as u64);
                assert!(
                    ok,
                    "engine invariant (frees checked at commit): released run {p} was already free in cf {}",
                    self.cf
                );
                now_free.push((p, n));
            }
        }
        self.assert_invariants();
        now_free
    }

    /// Runs freed since the last call that never reached the file. The
    /// caller drops their cached copies while it still holds this
    /// allocator's lock, so no other store of the CF (the writer, a fold
    /// made aside) can reuse one of them first.
    pub fn take_unwritten_freed(&mut self) -> Vec<PageId> {
        std::mem::take(&mut self.unwritten_freed)
    }

    /// Records that a checkpoint of version `at` is durable: it is the new
    /// base, and it also wrote the freed runs `spilled` (see
    /// [`CfAllocator::pinned_unwritten`]). Returns the runs that became
    /// free.
    pub fn checkpoint_done(
        &mut self,
        at: Version,
        spilled: &[(PageId, u32)],
    ) -> Vec<(PageId, u32)> {
        assert!(
            at >= self.base_version,
            "checkpoint went back in time in cf {}",
            self.cf
        );
        self.base_version = at;
        let mut written = 0u64;
        self.recent.retain(|_, &mut (n, a)| {
            if a <= at {
                written += n as u64;
            }
            a > at
        });
        // Freed runs live at `at` were written as part of its trees.
        for f in self.freed.values_mut() {
            if !f.written && f.allocated_at <= at && f.freed_at > at {
                f.written = true;
                written += f.npages as u64;
            }
        }
        written += self.note_written(spilled);
        self.dirty_counter.fetch_sub(written, Ordering::Relaxed);
        let mut now_free: Vec<(PageId, u32)> = self
            .freed
            .extract_if(|_, f| f.state == FreedState::AwaitCheckpoint && f.freed_at <= at)
            .map(|(p, f)| (PageId(p), f.npages))
            .collect();
        // Adjacent runs go into the free set as one (a checkpoint after a
        // large rewrite frees tens of thousands of runs, mostly in
        // stretches: one set update per stretch, not per run).
        if let Some((start, pages)) = self.free.insert_runs(&mut now_free) {
            panic!(
                "engine invariant (frees checked at commit): run {start}+{pages} freed twice in cf {}",
                self.cf
            );
        }
        self.assert_invariants();
        now_free
    }

    /// Makes sure a free run of `pages` contiguous pages lies wholly below
    /// page `limit`, claiming an extent from `map` below it if none does
    /// (compaction reserves room for the system tree and the metadata
    /// blob before the CFs' relocations take the pooled space). False if
    /// neither was possible.
    pub fn reserve_below(&mut self, pages: u64, limit: u64, map: &Mutex<ExtentMap>) -> bool {
        self.drain_released();
        let fits = self
            .free
            .iter()
            .any(|r| r.pages >= pages && r.start.0 + pages <= limit);
        if fits {
            return true;
        }
        let Some(ext) = map.lock().claim_below(self.cf, pages, limit) else {
            return false;
        };
        self.adopt(ext);
        self.assert_invariants();
        true
    }

    /// Takes `ext`, just claimed from the extent map, as one of its
    /// extents, all free.
    fn adopt(&mut self, ext: PageRange) {
        self.extents.push(ext);
        let ok = self.free.insert(ext.start.0, ext.pages);
        assert!(
            ok,
            "engine invariant: a claimed extent was free in cf {}",
            self.cf
        );
    }

    /// Makes sure at least `pages` of its free pages lie below `limit`,
    /// claiming extents from the map's free runs below it (lowest first,
    /// whatever their size) where its own are too few; false if the map
    /// runs out first (what it claimed stays claimed). For the system
    /// tree's pages, which need not be contiguous.
    pub fn reserve_pages_below(&mut self, pages: u64, limit: u64, map: &Mutex<ExtentMap>) -> bool {
        self.drain_released();
        let mut have = self.free.pages_below(limit);
        while have < pages {
            let Some(ext) = map
                .lock()
                .claim_most_below(self.cf, (1, pages - have), limit)
            else {
                return false;
            };
            self.adopt(ext);
            have += ext.pages;
        }
        self.assert_invariants();
        true
    }

    /// While `limit` is set, pages at or past it are not handed out
    /// (compaction moves pages below it).
    pub fn set_limit(&mut self, limit: Option<u64>) {
        self.limit = limit;
    }

    /// The limit [`CfAllocator::set_limit`] set, if any.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Allocates `npages` contiguous pages for the write transaction in
    /// flight, claiming a new extent from `map` if no free run fits.
    /// `None` only under a limit ([`CfAllocator::set_limit`]) with no room
    /// below it.
    pub fn alloc(&mut self, npages: u32, map: &Mutex<ExtentMap>) -> Option<PageId> {
        let id = self.take(npages, map)?;
        let ok = self.uncommitted.insert(id.0, npages as u64);
        assert!(
            ok,
            "allocated run {id} was already in use in cf {}",
            self.cf
        );
        debug_assert!(
            self.limit.is_none_or(|l| id.0 + npages as u64 <= l),
            "a run past the allocation limit"
        );
        self.assert_invariants();
        Some(id)
    }

    fn take_free(&mut self, n: u64) -> Option<u64> {
        let start = match self.limit {
            None => self.free.take(n),
            Some(l) => self.free.take_below(n, l),
        }?;
        if self.punched.pages() > 0 {
            self.punched.remove_overlap(start, n);
        }
        Some(start)
    }

    /// The parts of free runs that still hold file blocks (not punched),
    /// of at least `min_pages` each: what a punch gives back now. Every
    /// page of them may be written at once, so it may be zeroed too. A
    /// page freed next to a punched run is a part of its own, so churn
    /// beside holes is not counted as a whole run again (an adversarial
    /// review found one page of churn counted as a 1,024-page run).
    pub fn runs_to_punch(&mut self, min_pages: u64) -> Vec<PageRange> {
        self.drain_released();
        let mut out = Vec::new();
        for r in self.free.iter().filter(|r| r.pages >= min_pages) {
            for (start, pages) in self.punched.gaps(r.start.0, r.pages) {
                if pages >= min_pages {
                    out.push(PageRange {
                        start: PageId(start),
                        pages,
                    });
                }
            }
        }
        out
    }

    /// True if every page of `run` is free now.
    pub fn is_free(&self, run: PageRange) -> bool {
        self.free.contains_all(run.start.0, run.pages)
    }

    /// Records that the blocks of `run`, free, were given back.
    pub fn mark_punched(&mut self, run: PageRange) {
        assert!(
            self.free.contains_all(run.start.0, run.pages),
            "engine invariant: a punched run {}+{} is free in cf {}",
            run.start.0,
            run.pages,
            self.cf
        );
        self.punched.remove_overlap(run.start.0, run.pages);
        let ok = self.punched.insert(run.start.0, run.pages);
        debug_assert!(ok, "its punched pages were just removed");
        self.assert_invariants();
    }

    /// Free pages whose blocks were given back.
    #[cfg(test)]
    pub fn punched_pages(&self) -> u64 {
        self.punched.pages()
    }

    fn take(&mut self, npages: u32, map: &Mutex<ExtentMap>) -> Option<PageId> {
        let n = npages as u64;
        if let Some(s) = self.take_free(n) {
            return Some(PageId(s));
        }
        self.drain_released();
        if let Some(s) = self.take_free(n) {
            return Some(PageId(s));
        }
        let want = self.next_extent_pages().max(n);
        let ext = match self.limit {
            None => map.lock().claim(self.cf, want),
            Some(l) => {
                let mut m = map.lock();
                m.claim_below(self.cf, want, l)
                    .or_else(|| m.claim_most_below(self.cf, (n, want), l))?
            }
        };
        self.adopt(ext);
        let s = self.take_free(n).expect("fresh extent fits the request");
        Some(PageId(s))
    }

    /// The size of the next extent: double the last one, but at most an
    /// eighth of what the CF owns (and at least the first extent's size,
    /// at most the policy's largest). Growth by a fixed large step left a
    /// large CF up to 64 MiB of unused extent past its pages (a fold round
    /// that needed a few pages more grew a 187 MiB file to 251); an eighth
    /// also keeps a fresh extent's free tail under what
    /// `DbShared::shrink_if_worth_it` cuts, so the file does not flap
    /// between a cut and a regrowth.
    fn next_extent_pages(&self) -> u64 {
        let Some(last) = self.extents.last() else {
            return self.policy.first_pages;
        };
        let owned: u64 = self.extents.iter().map(|e| e.pages).sum();
        let share = (owned / 8).max(self.policy.first_pages);
        (last.pages * 2)
            .min(share)
            .clamp(self.policy.first_pages, self.policy.max_pages)
    }

    /// Returns a run of the transaction in flight that no snapshot saw.
    pub fn free_now(&mut self, id: PageId, npages: u32) {
        let ok =
            self.uncommitted.remove(id.0, npages as u64) && self.free.insert(id.0, npages as u64);
        assert!(
            ok,
            "double free of uncommitted {id}+{npages} in cf {}",
            self.cf
        );
        self.assert_invariants();
    }

    /// Records a commit at `version`: `allocated` runs become live,
    /// `freed` committed runs start waiting for snapshots.
    pub fn commit(
        &mut self,
        version: Version,
        allocated: &[(PageId, u32)],
        freed: &[(PageId, u32)],
    ) {
        for &(p, n) in allocated {
            let ok = self.uncommitted.remove(p.0, n as u64);
            assert!(
                ok,
                "engine invariant: a committed private run {p} was allocated by this transaction in cf {}",
                self.cf
            );
            self.recent.insert(p.0, (n, version));
            self.dirty_counter.fetch_add(n as u64, Ordering::Relaxed);
        }
        for &(p, n) in freed {
            // A run committed after the base stays counted as dirty (its
            // only copy is in memory) until written or released.
            let (allocated_at, written) = match self.recent.remove(&p.0) {
                Some((rn, a)) => {
                    assert_eq!(
                        rn, n,
                        "engine invariant (check_freeable ran first): run {p} freed with another length"
                    );
                    (a, false)
                }
                None => (Version(0), true),
            };
            let f = Freed {
                npages: n,
                allocated_at,
                freed_at: version,
                state: FreedState::Pinned,
                written,
            };
            let fresh = self.freed.insert(p.0, f).is_none() && !self.free.intersects(p.0, n as u64);
            assert!(
                fresh,
                "engine invariant (check_freeable ran before the WAL append): double free of committed {p}+{n} in cf {}",
                self.cf
            );
        }
        self.assert_invariants();
    }

    /// Checks that a commit may free the committed runs `freed` (DESIGN §11,
    /// issue 12): each lies inside the CF's extents, is live (not free, not
    /// allocated by a transaction in flight, not freed by an earlier
    /// commit), has the length it was committed with, and no two overlap.
    /// The runs come from the file (child and overflow pointers), so a
    /// violation is `Corrupted`, found before the commit is logged; once
    /// this passed, [`CfAllocator::commit`]'s asserts guard only the
    /// engine's own bookkeeping.
    pub fn check_freeable(&self, freed: &[(PageId, u32)]) -> Result<()> {
        let mut owned = RangeSet::new();
        for e in &self.extents {
            owned.insert(e.start.0, e.pages);
        }
        let mut seen = RangeSet::new();
        // Runs freed by earlier commits and runs committed since the base,
        // as ranges: a freed run may not overlap the former at all, nor
        // the latter except as exactly one of them. (Built once per tree
        // commit; linear in the runs tracked.)
        let pending = if freed.is_empty() {
            RangeSet::new()
        } else {
            self.pending_set()
        };
        let mut recent = RangeSet::new();
        if !freed.is_empty() {
            for (&p, &(n, _)) in &self.recent {
                let fresh = recent.insert(p, u64::from(n));
                debug_assert!(fresh, "recent runs overlap in cf {}", self.cf);
            }
        }
        let bad = |p: PageId, what: &str| {
            Err(Error::corrupted_page(
                p,
                format!("cf {}: a commit frees a run {what}", self.cf),
            ))
        };
        for &(p, n) in freed {
            let len = u64::from(n);
            if n == 0 || !owned.contains_all(p.0, len) {
                return bad(p, "outside the CF's extents");
            }
            if !seen.insert(p.0, len) {
                return bad(p, "twice (two references to one page or run)");
            }
            if self.free.intersects(p.0, len) || self.uncommitted.intersects(p.0, len) {
                return bad(p, "the allocator holds free (a live page it calls free)");
            }
            if pending.intersects(p.0, len) {
                return bad(p, "an earlier commit already freed");
            }
            match self.recent.get(&p.0) {
                Some(&(rn, _)) if rn != n => {
                    return bad(p, "with another length than it was allocated with");
                }
                None if recent.intersects(p.0, len) => {
                    return bad(p, "overlapping a run committed since the base");
                }
                _ => {}
            }
        }
        debug_assert_eq!(
            seen.pages(),
            freed.iter().map(|&(_, n)| u64::from(n)).sum::<u64>(),
            "accepted frees are disjoint"
        );
        Ok(())
    }

    /// Forgets every page of a dropped CF: returns the runs that were
    /// committed since the base (their cached copies can go) and clears the
    /// dirty count. The extents themselves are released by the caller.
    pub fn discard_all(&mut self) -> Vec<(PageId, u32)> {
        let runs: Vec<(PageId, u32)> = self
            .recent
            .iter()
            .map(|(&p, &(n, _))| (PageId(p), n))
            .chain(self.freed.iter().map(|(&p, f)| (PageId(p), f.npages)))
            .collect();
        let dirty = self.dirty_pages();
        self.dirty_counter.fetch_sub(dirty, Ordering::Relaxed);
        self.recent.clear();
        self.freed.clear();
        self.free = RangeSet::new();
        self.punched = RangeSet::new();
        self.extents.clear();
        self.discarded = true;
        self.assert_invariants();
        runs
    }

    /// Frees a run of the system's previous base right after a checkpoint
    /// made a new base without it (no snapshot ever reads system pages).
    pub fn release_system_run(&mut self, id: PageId, npages: u32) {
        debug_assert_eq!(self.cf, CfId::SYSTEM);
        let n = npages as u64;
        let ok = !self.uncommitted.intersects(id.0, n)
            && !self.recent.contains_key(&id.0)
            && self.free.insert(id.0, n);
        assert!(ok, "system run {id}+{npages} released while in use");
        self.assert_invariants();
    }

    /// The first of `runs` that does not lie inside this CF's extents (a
    /// run may span two adjacent extents): for runs the file names, which
    /// the allocator would otherwise take in and trip over.
    pub fn first_unowned(&self, runs: &[(PageId, u32)]) -> Option<(PageId, u32)> {
        let mut owned = RangeSet::new();
        for e in &self.extents {
            owned.insert(e.start.0, e.pages);
        }
        (runs.iter().copied()).find(|&(id, n)| !owned.contains_all(id.0, u64::from(n)))
    }

    /// True if the run at `id` lies inside this CF's extents.
    #[cfg(test)]
    pub fn owns(&self, id: PageId, npages: u32) -> bool {
        self.first_unowned(&[(id, npages)]).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> ExtentPolicy {
        ExtentPolicy {
            first_pages: 4,
            max_pages: 16,
        }
    }

    #[test]
    fn extents_grow_and_cap() {
        let map = Mutex::new(ExtentMap::new(2));
        let mut a = CfAllocator::new(CfId(1), policy(), vec![], &[]).unwrap();
        for _ in 0..100 {
            a.alloc(1, &map).unwrap();
        }
        let sizes: Vec<u64> = a.extents().iter().map(|e| e.pages).collect();
        assert!(sizes.iter().all(|&s| s <= 16));
        assert_eq!(sizes.iter().sum::<u64>() - 100, a.free_set().pages());
        // Each extent at most doubles the last and at most an eighth of
        // what was owned before it (at least the first size).
        let mut owned = 0;
        for w in sizes.windows(2) {
            owned += w[0];
            assert!(w[1] <= 2 * w[0], "{sizes:?}: more than doubled");
            assert!(w[1] <= (owned / 8).max(4), "{sizes:?}: over an eighth");
        }
    }

    /// A large CF grows by an eighth of what it owns, not by the policy's
    /// largest step: the file ends at most that far past its pages.
    #[test]
    fn a_large_cf_grows_by_an_eighth_of_what_it_owns() {
        let map = Mutex::new(ExtentMap::new(2));
        let policy = ExtentPolicy {
            first_pages: 4,
            max_pages: 4096,
        };
        let mut a = CfAllocator::new(CfId(1), policy, vec![], &[]).unwrap();
        for _ in 0..10_000 {
            a.alloc(1, &map).unwrap();
        }
        let sizes: Vec<u64> = a.extents().iter().map(|e| e.pages).collect();
        let owned: u64 = sizes.iter().sum();
        assert!(
            owned <= 10_000 + 10_000 / 8 + 4,
            "{owned} pages owned for 10,000 used: {sizes:?}"
        );
        // The doubling alone would have claimed 4 + 8 + ... + 8192.
        assert!(sizes.iter().all(|&s| s < 2048), "{sizes:?}");
    }

    #[test]
    fn frees_the_file_cannot_justify_are_refused() {
        let map = Mutex::new(ExtentMap::new(2));
        let mut a = CfAllocator::new(CfId(1), policy(), vec![], &[]).unwrap();
        let run = a.alloc(3, &map).unwrap();
        let single = a.alloc(1, &map).unwrap();
        a.commit(Version(1), &[(run, 3), (single, 1)], &[]);
        let corrupt = |r: Result<()>| matches!(r, Err(Error::Corrupted { .. }));
        assert!(a.check_freeable(&[(run, 3), (single, 1)]).is_ok());
        assert!(
            corrupt(a.check_freeable(&[(single, 1), (single, 1)])),
            "twice"
        );
        assert!(corrupt(a.check_freeable(&[(run, 2)])), "another length");
        let inside = PageId(run.0 + 1);
        assert!(
            corrupt(a.check_freeable(&[(inside, 1)])),
            "inside a live run"
        );
        assert!(corrupt(a.check_freeable(&[(PageId(10_000), 1)])), "outside");
        let free = a.alloc(1, &map).unwrap();
        a.free_now(free, 1);
        assert!(corrupt(a.check_freeable(&[(free, 1)])), "a free page");
        a.commit(Version(2), &[], &[(run, 3)]);
        assert!(corrupt(a.check_freeable(&[(run, 3)])), "freed before");
        assert!(
            corrupt(a.check_freeable(&[(inside, 1)])),
            "inside a freed run"
        );
        assert!(a.check_freeable(&[(single, 1)]).is_ok());
    }

    #[test]
    fn big_run_claims_big_extent() {
        let map = Mutex::new(ExtentMap::new(2));
        let mut a = CfAllocator::new(CfId(1), policy(), vec![], &[]).unwrap();
        let p = a.alloc(100, &map).unwrap();
        assert!(a.owns(p, 100));
    }

    #[test]
    fn pending_pages_wait_for_their_batch() {
        let map = Mutex::new(ExtentMap::new(2));
        let mut a = CfAllocator::new(CfId(1), policy(), vec![], &[]).unwrap();
        let p = a.alloc(1, &map).unwrap();
        a.commit(Version(1), &[(p, 1)], &[]);
        a.commit(Version(2), &[], &[(p, 1)]);
        let b0 = ReclaimBatch::new(a.released_sink());
        let b1 = ReclaimBatch::new(a.released_sink());
        b0.seal(vec![(p, 1)], b1.clone());
        let reader = b0.clone();
        drop(b0);
        for _ in 0..3 {
            assert_ne!(
                a.alloc(1, &map).unwrap(),
                p,
                "page reused while a snapshot holds it"
            );
        }
        drop(reader);
        a.drain_released();
        assert!(
            a.free_set().contains_all(p.0, 1),
            "page never in a durable base is free at once"
        );
        drop(b1);
    }

    #[test]
    fn a_page_of_the_durable_base_waits_for_a_checkpoint() {
        let map = Mutex::new(ExtentMap::new(2));
        let mut a = CfAllocator::new(CfId(1), policy(), vec![], &[]).unwrap();
        let p = a.alloc(1, &map).unwrap();
        a.commit(Version(1), &[(p, 1)], &[]);
        assert!(!a.free_at(Version(1)).contains_all(p.0, 1));
        assert!(
            a.free_at(Version(0)).contains_all(p.0, 1),
            "not yet allocated at v0"
        );
        a.checkpoint_done(Version(1), &[]);
        a.commit(Version(2), &[], &[(p, 1)]);
        assert!(!a.free_at(Version(1)).contains_all(p.0, 1), "live at v1");
        assert!(a.free_at(Version(2)).contains_all(p.0, 1), "freed at v2");
        let b1 = ReclaimBatch::new(a.released_sink());
        b1.seal(vec![(p, 1)], ReclaimBatch::new(a.released_sink()));
        drop(b1);
        a.drain_released();
        assert!(
            !a.free_set().contains_all(p.0, 1),
            "reused while the base still uses it"
        );
        a.checkpoint_done(Version(2), &[]);
        assert!(a.free_set().contains_all(p.0, 1));
    }

    #[test]
    fn a_run_freed_after_the_snapshot_is_still_dirty_at_it() {
        let map = Mutex::new(ExtentMap::new(2));
        let mut a = CfAllocator::new(CfId(1), policy(), vec![], &[]).unwrap();
        let p = a.alloc(1, &map).unwrap();
        a.commit(Version(1), &[(p, 1)], &[]);
        a.commit(Version(2), &[], &[(p, 1)]);
        assert!(
            a.dirty_runs(Version(1)).contains_key(&p),
            "live at v1, never written"
        );
        assert!(!a.dirty_runs(Version(2)).contains_key(&p), "freed at v2");
        a.checkpoint_done(Version(1), &[]);
        assert!(
            !a.dirty_runs(Version(1)).contains_key(&p),
            "now in the base"
        );
    }

    /// A superseded run no snapshot pins any more is not spilled by the
    /// next checkpoint, even if no allocation drained the release yet
    /// (the peers benchmark's no-sync commits halved, and the file grew
    /// by every superseded page, when checkpoints wrote those runs).
    #[test]
    fn a_released_run_is_not_reported_as_pinned() {
        let map = Mutex::new(ExtentMap::new(2));
        let mut a = CfAllocator::new(CfId(1), policy(), vec![], &[]).unwrap();
        let p = a.alloc(1, &map).unwrap();
        a.commit(Version(1), &[(p, 1)], &[]);
        a.commit(Version(2), &[], &[(p, 1)]);
        let b1 = ReclaimBatch::new(a.released_sink());
        let b2 = ReclaimBatch::new(a.released_sink());
        let reader = b1.clone();
        b1.seal(vec![(p, 1)], b2.clone());
        drop(b1);
        assert_eq!(
            a.pinned_unwritten(Version(2)),
            vec![(p, 1)],
            "a reader pins it"
        );
        drop(reader);
        assert!(
            a.pinned_unwritten(Version(2)).is_empty(),
            "released, so nothing pins it"
        );
        assert!(a.free_at(Version(2)).contains_all(p.0, 1));
        assert_eq!(a.dirty_pages(), 0, "a released, unwritten run is not dirty");
        drop(b2);
    }

    /// Punched runs stay a subset of the free ones: a page taken, cut or
    /// pooled is no longer punched, so the next punch gives it back again
    /// once it is free again; a run wholly punched is not listed twice.
    #[test]
    fn punched_pages_leave_the_punched_set_when_they_leave_the_free_set() {
        let map = Mutex::new(ExtentMap::new(2));
        let mut a = CfAllocator::new(CfId(1), policy(), vec![], &[]).unwrap();
        let p = a.alloc(8, &map).unwrap();
        a.free_now(p, 8);
        let runs = a.runs_to_punch(1);
        let total: u64 = runs.iter().map(|r| r.pages).sum();
        assert_eq!(total, a.free_set().pages(), "every free run is listed");
        assert!(
            a.runs_to_punch(total + 1).is_empty(),
            "shorter runs are not"
        );
        for r in runs {
            a.mark_punched(r);
        }
        assert_eq!(a.runs_to_punch(1).iter().map(|r| r.pages).sum::<u64>(), 0);
        assert!(
            a.runs_to_punch(1).is_empty(),
            "punched runs are not listed again"
        );
        let q = a.alloc(3, &map).unwrap();
        assert_eq!(q, p, "lowest first fit takes the punched run's start");
        assert_eq!(
            a.punched_pages(),
            a.free_set().pages(),
            "the taken pages left"
        );
        a.free_now(q, 3);
        let again = a.runs_to_punch(1);
        assert_eq!(
            again,
            vec![PageRange { start: q, pages: 3 }],
            "only the pages freed again, not the coalesced run around them"
        );
        assert!(
            a.runs_to_punch(4).is_empty(),
            "3 pages of churn beside a hole are shorter than 4"
        );
        a.mark_punched(again[0]);
        assert_eq!(a.runs_to_punch(1).iter().map(|r| r.pages).sum::<u64>(), 0);
        let end = a.extents()[0].start.0 + 4;
        assert!(a.cut_to(end));
        assert_eq!(a.punched_pages(), a.free_set().pages(), "cut pages left");
        let given = a.give_free(1, u64::MAX, u64::MAX);
        assert!(!given.is_empty());
        assert_eq!(a.punched_pages(), 0, "pooled pages left");
    }

    #[test]
    fn long_batch_chain_drops_without_recursion() {
        #[derive(Debug, Default)]
        struct Count(AtomicU64);
        impl ReleaseWatch for Count {
            fn released(&self, pages: u64) {
                self.0.fetch_add(pages, Ordering::Relaxed);
            }
        }
        let sink: ReleasedPages = Arc::new(ReleaseSink::default());
        let count = Arc::new(Count::default());
        sink.watch.set(count.clone()).unwrap();
        let first = ReclaimBatch::new(sink.clone());
        let mut cur = first.clone();
        for i in 0..200_000u64 {
            let next = ReclaimBatch::new(sink.clone());
            cur.seal(vec![(PageId(i + 2), 1)], next.clone());
            cur = next;
        }
        drop(cur);
        drop(first);
        assert_eq!(sink.take().len(), 200_000);
        assert_eq!(
            count.0.load(Ordering::Relaxed),
            200_000,
            "every release told"
        );
    }

    /// Compaction pools free runs of every size below its limit; a CF
    /// moving pages there takes one extent per pooled run it uses, not one
    /// per page it allocates. (It took one per page: 15,000 extents after
    /// compacting the peers benchmark, an 89-page metadata blob and a
    /// 14-page system tree that found no room below the limit and kept
    /// the file 1,400 pages longer.)
    #[test]
    fn a_limited_allocation_takes_whole_pooled_runs_as_extents() {
        let map = Mutex::new(ExtentMap::new(2));
        // A pool of 10 runs of 3 pages (smaller than any extent the policy
        // asks for) below page 200, with gaps another CF owns between them.
        let whole = map.lock().claim(CfId(2), 198);
        assert_eq!(whole.start, PageId(2));
        let mut pooled = 0;
        for i in 0..10u64 {
            let start = 2 + i * 10;
            map.lock().give_back(
                CfId(2),
                PageRange {
                    start: PageId(start),
                    pages: 3,
                },
            );
            pooled += 3;
        }
        assert_eq!(map.lock().free_pages(), pooled);
        let mut a = CfAllocator::new(CfId(1), policy(), vec![], &[]).unwrap();
        a.set_limit(Some(200));
        for _ in 0..pooled {
            let p = a.alloc(1, &map).expect("room in the pool");
            assert!(p.0 < 200, "{p} past the limit");
        }
        assert_eq!(a.extents().len(), 10, "one extent per pooled run");
        assert!(a.alloc(1, &map).is_none(), "the pool is used up");
        assert_eq!(map.lock().extents_of(CfId(1)).len(), 10);
    }

    /// A free run that crosses the limit gives its part below it (and
    /// keeps the rest), so a CF's free tail starting under a compaction
    /// limit can hold a system value of many pages.
    #[test]
    fn a_free_run_crossing_the_limit_gives_its_part_below_it() {
        let ext = PageRange {
            start: PageId(10),
            pages: 100,
        };
        let free = [PageRange {
            start: PageId(40),
            pages: 70,
        }];
        let mut a = CfAllocator::new(CfId(1), policy(), vec![ext], &free).unwrap();
        let given = a.give_free(8, 60, u64::MAX);
        assert_eq!(
            given,
            vec![PageRange {
                start: PageId(40),
                pages: 20
            }]
        );
        assert_eq!(a.free_set().pages(), 50, "60..110 stays free");
        assert!(a.free_set().iter().all(|r| r.start.0 >= 60));
        assert!(!a.owns(PageId(40), 20) && a.owns(PageId(10), 30) && a.owns(PageId(60), 50));
        // Under min_pages below the limit: nothing.
        assert!(a.give_free(8, 64, u64::MAX).is_empty());
    }

    /// The system tree's room may come in runs of any size: reserving it
    /// claims the lowest free runs below the limit until it has enough,
    /// and says so when the runs below the limit are too few.
    #[test]
    fn pages_are_reserved_from_short_runs_below_a_limit() {
        let map = Mutex::new(ExtentMap::new(2));
        map.lock().claim(CfId(2), 98);
        for start in [10u64, 20, 30, 90] {
            map.lock().give_back(
                CfId(2),
                PageRange {
                    start: PageId(start),
                    pages: 3,
                },
            );
        }
        let mut sys = CfAllocator::new(CfId::SYSTEM, policy(), vec![], &[]).unwrap();
        assert!(sys.reserve_pages_below(7, 50, &map));
        assert_eq!(sys.free_set().pages(), 7, "{:?}", sys.free_set().to_vec());
        assert!(sys.free_set().iter().all(|r| r.end() <= 50));
        assert_eq!(sys.extents().len(), 3, "the three lowest runs");
        assert!(!sys.reserve_pages_below(10, 50, &map), "only 9 below 50");
        assert_eq!(map.lock().free_pages_below(50), 0);
        assert_eq!(map.lock().free_pages(), 3, "the run at 90 stays");
    }

    #[test]
    fn release_all_of_frees_every_named_cf_in_one_pass_and_keeps_the_rest() {
        let mut m = ExtentMap::new(2);
        for cf in [1, 2, 3, 1, 2, 3] {
            m.claim(CfId(cf), 4);
        }
        let before = m.free_pages();
        m.release_all_of(|cf| cf != CfId(2));
        assert_eq!(m.free_pages(), before + 16, "four extents of 4 pages freed");
        let owners: Vec<CfId> = m.owned.values().map(|&(_, o)| o).collect();
        assert_eq!(owners, [CfId(2), CfId(2)], "cf 2 keeps both of its extents");
    }

    #[test]
    fn extent_map_round_trips_and_rejects_overlap() {
        let mut m = ExtentMap::new(2);
        m.claim(CfId(1), 4);
        m.claim(CfId(2), 8);
        m.release_all_of(|cf| cf == CfId(1));
        let recs = m.to_records();
        let back = ExtentMap::from_records(m.file_pages(), &recs).unwrap();
        assert_eq!(back.to_records(), recs);
        let mut bad = recs.clone();
        bad[1].range.start = PageId(3);
        assert!(ExtentMap::from_records(m.file_pages(), &bad).is_err());
    }
}
