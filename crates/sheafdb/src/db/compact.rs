//! Giving file space back (issue 14; design.md "Space").
//!
//! Owns: cutting the file back to its last page in use ([`DbShared::shrink_file`],
//! run after checkpoints past a hysteresis, and by compaction), and
//! compaction, which first moves pages in use out of the file's tail
//! (copy-on-write relocation, a normal commit) so there is a tail to cut.
//!
//! Protocol of a cut (its crash argument is in design.md "Space"): under
//! the checkpoint lock (so no checkpoint runs meanwhile), with every CF's
//! allocator locked, find one past the highest page any CF holds (free
//! pages do not count; a page a snapshot or the durable base may still
//! read is not free); every CF gives up its pages past it and the extent
//! map forgets them; the affected CFs are marked so the next checkpoint
//! rewrites their descriptors. That checkpoint makes the shorter file the
//! durable base; only after its superblock is synced is the file
//! truncated (and synced).
//!
//! Must not know: B-tree layouts (relocation is `btree::relocate`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::DbShared;
use crate::error::{Error, Result};
use crate::format::records::PageRange;
use crate::pager::alloc::CfAllocator;
use crate::txn::{CfShared, Durability, WriteState};
use crate::types::PageId;

/// Free bytes below which nothing is given back to the file system, by
/// a cut or by holes (nor below an eighth of the file,
/// [`DbShared::worth_giving_back`]): a file does not flap between a cut
/// and regrowth by an extent, and its steady churn of pages freed and
/// reused within a checkpoint or two is left alone; a large removal, or
/// a rewrite an old snapshot held, is given back.
pub(crate) const GIVE_BACK_MIN_BYTES: u64 = 1 << 20;

/// Shortest free run a punch gives back ([`DbShared::punch_free_runs`]):
/// each run costs an `fallocate`, about 10-100 µs on ext4, and the free
/// space a fold leaves behind is mostly runs of 1-15 pages, which the next
/// folds reuse. Punching every run took 3 s per pass in the peers
/// benchmark (after its removal: 48,000 pages); runs of 16 pages and up
/// hold most of what a removal or a long-held snapshot frees and took
/// 0.2-0.25 s.
pub(crate) const PUNCH_MIN_RUN_BYTES: u64 = 64 << 10;

/// Holes punched per hold of an allocator's lock (a writer that needs a
/// page waits at most this many `fallocate` calls).
const PUNCH_CHUNK: usize = 64;

/// Smallest free run compaction moves from a CF to the shared pool (so
/// extents do not splinter into single pages).
const POOL_MIN_PAGES: u64 = 8;
/// The smallest reach a step that moved nothing is retried with.
const MIN_STEP_REACH: u64 = 256 << 10;

/// Pages past its target below which a compaction step also pools the
/// system allocator's free runs below its limit
/// ([`DbShared::pool_system_free`]), so the last steps reach the target
/// (`sheaf-bench peers` ended 145 pages past it without this). Only the
/// last steps: pooled from the first step, the system's room went to the
/// CFs, and a traced run showed a system tree value of 17 pages (a CF
/// descriptor listing thousands of free runs, right after the repack)
/// finding no run below the limit, so the checkpoint wrote it past the
/// limit, near the file's end. 4 of 24 such runs kept 319–334 MiB of
/// file for 116 in use: no later step moved a system page off the end
/// (this is the likely cause; no stuck run was traced to it).
const FINAL_PAGES: u64 = 2048;

/// How long a compaction step waits for the snapshots that still read
/// the old copies of the pages it moved, before it cuts what it can.
/// Short-lived readers finish well within it; a snapshot held longer
/// keeps its pages, and the report says the file is not done.
const SNAPSHOT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Most steps one `compact()` takes: each either gives something back or
/// halves its reach, so this is never reached by a correct engine; it
/// bounds the call if that ever fails (a call proceeds or returns).
const MAX_STEPS: usize = 4096;

/// Steps in a row that moved pages but left the file no shorter than the
/// shortest so far, after which `compact()` stops: the pages it moves are
/// replaced at the end as fast by writers running beside it.
const CHASING_STEPS: u32 = 3;

/// Whether `compact()`'s steps still shorten the file. Writers beside the
/// compaction keep taking pages at the end of the file: a step may move
/// pages and leave the file no shorter than before, and the loop followed
/// them until they stopped (an adversarial probe: one call ran 44-55 s
/// beside four writers, multi-CF transfers and snapshot readers, until
/// their 60 s load ended). The call compacts what it found: it stops after
/// [`CHASING_STEPS`] steps in a row that moved pages without a new
/// shortest length (its report then says `done: false`). Steps that moved
/// nothing are not counted: `compact()` answers those by halving its
/// reach, a bounded search that writer-free compactions need.
#[derive(Debug, Default)]
struct Chase {
    shortest: Option<u64>,
    chasing: u32,
}

impl Chase {
    /// Records a step that left the file at `bytes_after` and moved pages
    /// (`progressed`); true if the loop should stop.
    fn stop_after(&mut self, bytes_after: u64, progressed: bool) -> bool {
        if self.shortest.is_none_or(|s| bytes_after < s) {
            self.shortest = Some(bytes_after);
            self.chasing = 0;
        } else if progressed {
            self.chasing += 1;
        }
        self.chasing >= CHASING_STEPS
    }
}

/// One step toward the packed length.
struct Step {
    report: CompactReport,
    /// Pages the file still ends past its target (0: there).
    past_target: u64,
    /// The step moved pages or shortened the extents or the file.
    progressed: bool,
}

/// What a cut gave back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cut {
    /// File length in pages before and after.
    pub from_pages: u64,
    pub to_pages: u64,
}

impl DbShared {
    /// Cuts the file back to one past its last page in use, if that gives
    /// back at least `min_pages`: the cut, a checkpoint that makes it
    /// durable, then the truncation. `Ok(None)` if there was not enough to
    /// give back.
    pub(crate) fn shrink_file(self: &Arc<Self>, min_pages: u64) -> Result<Option<Cut>> {
        self.health.check_writable()?;
        let Some(cut) = self.cut_tail(min_pages)? else {
            // Nothing to cut now, but a truncation may be owed (one failed,
            // or stopped at a durable length a later checkpoint lowered).
            // It needs no checkpoint: the base describes the shorter file.
            if self.ckpt.truncation_owed.load(Ordering::Acquire) {
                self.truncate_file()?;
            }
            return Ok(None);
        };
        // The shorter extents become the durable base ...
        self.checkpoint_including(Vec::new())?;
        // ... and only then does the file lose its tail.
        self.truncate_file()?;
        Ok(Some(cut))
    }

    /// The in-memory half of a cut (see the module doc); `None` if less
    /// than `min_pages` would go.
    fn cut_tail(&self, min_pages: u64) -> Result<Option<Cut>> {
        // No checkpoint may run between the cut and the one that persists
        // it (it would persist descriptors of extents that no longer are).
        let sys = self.ckpt.sys.lock();
        let sys_alloc = sys.alloc.clone();
        let mut cfs: Vec<Arc<CfShared>> = self.registry.cfs.read().values().cloned().collect();
        cfs.extend(self.registry.dropped.lock().iter().cloned());
        cfs.sort_by_key(|c| c.id);
        cfs.dedup_by_key(|c| c.id);
        // A direct commit between its checkpoint (which set the CF's base,
        // under this lock) and its publication: the next checkpoint would
        // write the CF from the published version before it, losing the
        // acknowledged commit from the durable base. No cut then (the
        // checkpoint would be forced to plan that CF by the cut).
        if cfs.iter().any(|c| c.base_ahead_of_published()) {
            return Ok(None);
        }
        // Every allocator (in id order), then the extent map: nothing can
        // allocate or claim while the end is found and cut.
        // The system's allocator too (the system tree and metadata blob).
        let mut allocs: Vec<_> = cfs.iter().map(|c| c.alloc.lock()).collect();
        let mut system = sys_alloc.lock();
        let mut extents = self.space.extents.lock();
        let from = extents.file_pages();
        let mut end = system.live_end().unwrap_or(2).max(2);
        for a in allocs.iter_mut() {
            if let Some(e) = a.live_end() {
                end = end.max(e);
            }
        }
        // A CF created after the list above was read is not locked, and
        // may have claimed an extent since: none of its pages go (cut
        // below them, the next cut found "a page in use past the file
        // end"; `compaction_skips_a_cf_dropped_while_it_runs`).
        let listed = |id: crate::types::CfId| {
            id == crate::types::CfId::SYSTEM || cfs.iter().any(|c| c.id == id)
        };
        if let Some(theirs) = extents.end_of_others(listed) {
            end = end.max(theirs);
        }
        if end > from {
            return Err(Error::corrupted(
                format!("a page in use at {end} past the file end {from}"),
                "extent map",
            ));
        }
        if from - end < min_pages.max(1) {
            return Ok(None);
        }
        for (cf, a) in cfs.iter().zip(allocs.iter_mut()) {
            let before = a.extents().to_vec();
            let ok = a.cut_to(end);
            assert!(ok, "engine invariant: the pages past the live end are free");
            if a.extents() != before.as_slice() {
                cf.extents_changed.store(true, Ordering::Release);
            }
        }
        let ok = system.cut_to(end);
        assert!(
            ok,
            "engine invariant: the system pages past the live end are free"
        );
        // The cut pages may be claimed again once the file regrows: stale
        // entries of runs freed unwritten go now (see `pool_free_space`).
        for a in allocs.iter_mut() {
            self.space.pager.forget_unwritten_freed(a);
        }
        self.space.pager.forget_unwritten_freed(&mut system);
        extents.cut_to(end);
        debug_assert_eq!(extents.file_pages(), end, "the cut left another length");
        self.ckpt.truncation_owed.store(true, Ordering::Release);
        Ok(Some(Cut {
            from_pages: from,
            to_pages: end,
        }))
    }

    /// Truncates the data file to the extent map's length (after a
    /// checkpoint made the cut durable), and syncs it; never below the
    /// pages the current superblock says checkpoints wrote
    /// (`written_pages`, which open checks the file against). The extent
    /// map can be shorter than the durable length: another cut may have
    /// come between this one's checkpoint and here, and truncating to it
    /// left a file that no longer opened after a crash
    /// (`tests/compaction.rs::a_crash_after_cuts_that_changed_no_cf_leaves_a_file_that_opens`).
    fn truncate_file(&self) -> Result<()> {
        let sys = self.ckpt.sys.lock();
        let extent_pages = self.space.extents.lock().file_pages();
        let pages = extent_pages.max(sys.written_pages);
        let ps = self.space.pager.page_size() as u64;
        let storage = self.space.pager.storage();
        let want = pages * ps;
        // A failed truncation leaves a longer file than the base says:
        // harmless, but the I/O failed, so the database is poisoned
        // (reading the length too: compaction measured progress against a
        // file it could no longer cut, and spun).
        let r = storage.len().and_then(|len| match len > want {
            true => storage.set_len(want).and_then(|()| storage.sync_data()),
            false => Ok(()),
        });
        r.map_err(|e| {
            let e = Error::Io(e);
            self.poison(&e);
            e
        })?;
        // Settled, unless the durable length kept the file past the
        // extents (a later checkpoint lowers it; then truncate again).
        let settled = pages == extent_pages;
        self.ckpt.truncation_owed.store(!settled, Ordering::Release);
        Ok(())
    }

    /// After a checkpoint: cuts the file if its free tail is at least an
    /// eighth of it and 1 MiB (so it does not flap between cuts and
    /// regrowth by an extent), then punches holes where long runs inside
    /// it are free.
    pub(crate) fn shrink_if_worth_it(self: &Arc<Self>) -> Result<()> {
        if self.health.is_read_only() {
            return Ok(());
        }
        self.shrink_file(self.worth_giving_back())?;
        self.punch_free_runs();
        Ok(())
    }

    /// Free pages worth giving back to the file system, by a cut or by
    /// holes: an eighth of the file and at least [`GIVE_BACK_MIN_BYTES`].
    fn worth_giving_back(&self) -> u64 {
        let ps = self.space.pager.page_size() as u64;
        let file = self.space.extents.lock().file_pages();
        (file / 8).max(GIVE_BACK_MIN_BYTES / ps)
    }

    /// Gives the file system back the blocks of the parts of free runs
    /// not punched yet, of at least [`PUNCH_MIN_RUN_BYTES`] each, once
    /// they are worth it ([`DbShared::worth_giving_back`]; design.md
    /// "Holes"). A free page may be written at once (that is what free
    /// means: no durable base, snapshot or transaction reads it), so it
    /// may be zeroed too: each run is checked free again and punched
    /// under its allocator's lock, so no transaction takes and writes it
    /// meanwhile. The lock is let go every [`PUNCH_CHUNK`] runs. Returns
    /// the pages punched.
    ///
    /// Never fails: a hole that could not be punched leaves free pages
    /// as they were, which no one reads. Storage that cannot punch holes
    /// is not asked again; any other error ends this pass (a failing
    /// device shows itself to the next write or sync, which poisons).
    pub(crate) fn punch_free_runs(&self) -> u64 {
        // Releases from now on count toward the next wake-up, also when
        // this pass punches nothing (else one skipped pass kept the
        // checkpointer from being woken again).
        self.ckpt.wakeup.punch_begins();
        let off = !self.options.punch_holes
            || self.ckpt.punch_unsupported.load(Ordering::Relaxed)
            || self.ckpt.punch_paused.load(Ordering::Acquire) > 0
            || self.health.check_writable().is_err();
        if off {
            return 0;
        }
        let ps = self.space.pager.page_size() as u64;
        let (after, min_run) = match self.options.punch_after_bytes {
            Some(bytes) => (bytes / ps, 1),
            None => (self.worth_giving_back(), PUNCH_MIN_RUN_BYTES / ps),
        };
        let mut allocs: Vec<_> = (self.registry.cfs.read().values())
            .map(|c| c.alloc.clone())
            .collect();
        allocs.push(self.ckpt.sys.lock().alloc.clone());
        let work: Vec<_> = (allocs.into_iter())
            .map(|a| {
                let runs = a.lock().runs_to_punch(min_run.max(1));
                (a, runs)
            })
            .collect();
        let unpunched: u64 = work.iter().flat_map(|(_, r)| r).map(|r| r.pages).sum();
        if unpunched < after.max(1) {
            return 0;
        }
        let mut punched = 0;
        for (alloc, runs) in work {
            for chunk in runs.chunks(PUNCH_CHUNK) {
                match self.punch_runs(&mut alloc.lock(), chunk, ps) {
                    Ok(pages) => punched += pages,
                    Err(pages) => return punched + pages,
                }
            }
        }
        punched
    }

    /// Punches those of `runs` still free in `a` (whose lock the caller
    /// holds). `Err` with the pages punched if a punch failed: the pass
    /// ends (and after `Unsupported`, no pass starts again).
    fn punch_runs(&self, a: &mut CfAllocator, runs: &[PageRange], ps: u64) -> Result<u64, u64> {
        let storage = self.space.pager.storage();
        let mut punched = 0;
        for &run in runs {
            if !a.is_free(run) {
                continue;
            }
            if let Err(e) = storage.punch_hole(run.start.0 * ps, run.pages * ps) {
                if e.kind() == std::io::ErrorKind::Unsupported {
                    self.ckpt.punch_unsupported.store(true, Ordering::Relaxed);
                }
                return Err(punched);
            }
            a.mark_punched(run);
            punched += run.pages;
        }
        Ok(punched)
    }
}

/// What compaction did ([`crate::Database::compact`],
/// [`crate::Database::compact_step`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// Length of the data file before, in bytes.
    pub bytes_before: u64,
    /// Length of the data file after, in bytes.
    pub bytes_after: u64,
    /// Pages copied from the file's tail into free space below it.
    pub pages_moved: u64,
    /// True if the file is as short as compaction can make it now: no
    /// page in use lies past the space the data needs (pages an open
    /// snapshot still reads, or that wait for one, stay where they are
    /// until it is dropped).
    pub done: bool,
}

impl CompactReport {
    /// Bytes given back to the file system.
    pub fn reclaimed_bytes(&self) -> u64 {
        self.bytes_before.saturating_sub(self.bytes_after)
    }
}

/// Restores a CF allocator's compaction limit when dropped.
struct Limit<'a>(&'a CfShared);

impl<'a> Limit<'a> {
    fn set(cf: &'a CfShared, limit: u64) -> Limit<'a> {
        cf.alloc.lock().set_limit(Some(limit));
        Limit(cf)
    }
}

impl Drop for Limit<'_> {
    fn drop(&mut self) {
        self.0.alloc.lock().set_limit(None);
    }
}

impl DbShared {
    /// Pages of the file and pages in use (not free) over every allocator.
    fn usage(&self) -> (u64, u64) {
        let mut used = 2; // the superblocks
        let sys = self.ckpt.sys.lock();
        let cfs: Vec<Arc<CfShared>> = self.registry.cfs.read().values().cloned().collect();
        let mut count = |a: &mut crate::pager::alloc::CfAllocator| {
            a.drain_released();
            let extent_pages: u64 = a.extents().iter().map(|e| e.pages).sum();
            used += extent_pages - a.free_set().pages();
        };
        for cf in &cfs {
            count(&mut cf.alloc.lock());
        }
        count(&mut sys.alloc.lock());
        drop(sys);
        (self.space.extents.lock().file_pages(), used)
    }

    /// One step of compaction: checkpoint, then move the pages in use in
    /// the last `max_bytes` of the file (no deeper than the file would end
    /// if packed) below that point by copy-on-write (a commit per CF, the
    /// system tree by the next checkpoint), checkpoint, and cut the file.
    /// Readers and writers keep running; a writer of a CF being moved
    /// waits for that commit like for any other.
    pub(crate) fn compact_step(self: &Arc<Self>, max_bytes: u64) -> Result<CompactReport> {
        self.without_punching(|| self.step_with_shrinking_reach(max_bytes))
    }

    /// One step of at most `max_bytes`; a step that moved nothing while
    /// the file is still past its target is tried again with half the
    /// reach, down to [`MIN_STEP_REACH`] (its limit was below where the
    /// pages could move, as in `compact`). Without that, a large step
    /// said `done` with most of the file still reclaimable, and a
    /// `while !done` loop stopped there (an adversarial probe).
    fn step_with_shrinking_reach(self: &Arc<Self>, max_bytes: u64) -> Result<CompactReport> {
        let ps = self.space.pager.page_size() as u64;
        let mut reach = max_bytes.min(self.usage().0.saturating_mul(ps));
        loop {
            let step = self.step_toward_target(reach)?;
            let smaller = reach / 2;
            if step.progressed || step.past_target == 0 || smaller < MIN_STEP_REACH {
                return Ok(step.report);
            }
            reach = smaller;
        }
    }

    /// Runs `f` (a compaction) with hole punching paused, then punches
    /// once. A compaction moves pages into the free space below its limit
    /// and cuts the tail: punching that space first would cost an
    /// `fallocate` per run and a block allocation per page moved there
    /// (the peers benchmark's compaction took 2-3x as long).
    fn without_punching<T>(&self, f: impl FnOnce() -> T) -> T {
        struct Pause<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Pause<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.ckpt.punch_paused.fetch_add(1, Ordering::AcqRel);
        let pause = Pause(&self.ckpt.punch_paused);
        let out = f();
        drop(pause);
        self.punch_free_runs();
        out
    }

    /// [`DbShared::compact_step`], also returning how many pages the file
    /// still ends past where it would if packed (its target; 0 when it
    /// is there). A step whose limit is the target can move nothing
    /// although the tail holds pages in use: copying them also copies
    /// their ancestors below the limit, which the slack may not hold. Its
    /// report says `done` (this step can do no more); `compact()` then
    /// retries with a limit between the target and the end.
    fn step_toward_target(self: &Arc<Self>, max_bytes: u64) -> Result<Step> {
        self.check_open()?;
        let ps = self.space.pager.page_size() as u64;
        self.checkpoint_all()?;
        let (file, used) = self.usage();
        let on_disk = self.on_disk_pages()?;
        let mut report = CompactReport {
            bytes_before: on_disk * ps,
            ..CompactReport::default()
        };
        // Where the file could end if packed, with a little room for the
        // system's own pages and the allocation granularity.
        let target = used + used / 1024 + 16;
        let step = (max_bytes / ps).max(1);
        let limit = target.max(file.saturating_sub(step));
        if limit < file {
            let cfs: Vec<Arc<CfShared>> = self.registry.cfs.read().values().cloned().collect();
            if file - target <= FINAL_PAGES {
                self.pool_system_free(limit);
            }
            self.pool_free_space(&cfs, limit, POOL_MIN_PAGES, u64::MAX);
            self.reserve_system_room(&cfs, limit)?;
            for cf in &cfs {
                match self.relocate_cf(cf, limit) {
                    Ok(n) => report.pages_moved += n,
                    // No room below the limit in this CF: it keeps its
                    // tail pages this step.
                    Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::StorageFull => {}
                    Err(e) => return Err(e),
                }
            }
            self.ckpt.relocate_below.store(limit, Ordering::Release);
            let r = self.checkpoint_all();
            self.ckpt.relocate_below.store(0, Ordering::Release);
            r?;
            self.wait_for_snapshots_past(&cfs, limit);
        }
        self.shrink_file(1)?;
        let (after, _) = self.usage();
        let on_disk_after = self.on_disk_pages()?;
        report.bytes_after = on_disk_after.min(after) * ps;
        // Progress is measured against the same quantities before and
        // after (the extent map, the file's length, pages moved): the
        // report's two lengths are not, and a file longer than its
        // extents made every step look like progress (`compact` spun).
        let progressed = report.pages_moved > 0 || after < file || on_disk_after < on_disk;
        report.done = after <= target || (report.pages_moved == 0 && after >= file);
        let step = Step {
            report,
            past_target: after.saturating_sub(target),
            progressed,
        };
        Ok(step)
    }

    /// The data file's length in pages (what it holds on disk; the
    /// extent map may claim more, not yet written).
    fn on_disk_pages(&self) -> Result<u64> {
        let ps = self.space.pager.page_size() as u64;
        Ok(self.space.pager.storage().len()?.div_ceil(ps))
    }

    /// Waits, at most [`SNAPSHOT_WAIT`], until no snapshot still reads a
    /// run past `limit` that a commit freed (the old copies of the pages
    /// just moved). The relocation's checkpoint already made the new
    /// copies the durable base, so a run released after it is free at
    /// once, and the cut that follows can take it.
    fn wait_for_snapshots_past(&self, cfs: &[Arc<CfShared>], limit: u64) {
        let start = std::time::Instant::now();
        while cfs.iter().any(|cf| cf.alloc.lock().pinned_past(limit)) {
            if start.elapsed() >= SNAPSHOT_WAIT {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Before the CFs' relocations take the pooled space below `limit`:
    /// the system allocator claims room below it for a new copy of the
    /// system tree and of the metadata blob (twice each, with slack), so
    /// the checkpoint that moves them below the limit finds room. One run
    /// for both where the pool has it; else the tree's room in runs of any
    /// size (its pages need not be contiguous), lowest first, and a run
    /// for the blob, taking the CFs' free runs shorter than
    /// [`POOL_MIN_PAGES`] into the pool where the pool is short. Where
    /// even that fails, the checkpoint falls back to writing them
    /// unlimited (`write_checkpoint_with`), past the limit: then no step
    /// can cut past them, which is what the fallback once did whenever
    /// the CFs' free space below the limit was all runs shorter than the
    /// system tree (a third of the peers benchmark's runs kept 319 MiB of
    /// file for 116 MiB in use).
    fn reserve_system_room(&self, cfs: &[Arc<CfShared>], limit: u64) -> Result<()> {
        let (tree_pages, blob_pages) = self.system_pages()?;
        let tree_room = 2 * tree_pages + 8;
        let blob_room = 2 * blob_pages + 4;
        // Under the checkpoint lock, so no checkpoint encodes the system's
        // extents and free pages halfway through a claim.
        let whole = {
            let sys = self.ckpt.sys.lock();
            let mut alloc = sys.alloc.lock();
            alloc.reserve_below(tree_room + blob_room, limit, &self.space.extents)
        };
        if whole {
            return Ok(());
        }
        let pooled = self.space.extents.lock().free_pages_below(limit);
        let short = (tree_room + blob_room).saturating_sub(pooled);
        if short > 0 {
            self.pool_free_space(cfs, limit, 1, short);
        }
        // The tree's room first: its pieces are claimed lowest first, so
        // the blob's run lies above them and the tree's copy (written
        // first, into the lowest free pages) leaves it whole.
        let sys = self.ckpt.sys.lock();
        let mut alloc = sys.alloc.lock();
        alloc.reserve_pages_below(tree_room, limit, &self.space.extents);
        alloc.reserve_below(blob_room, limit, &self.space.extents);
        Ok(())
    }

    /// Gives the system allocator's free runs below `limit` back to the
    /// extent map's pool (see [`FINAL_PAGES`]): old copies of the system
    /// tree and the metadata blob, and room earlier steps reserved. They
    /// count as free in the target, but no CF could move pages into them.
    /// Under the checkpoint lock, like any change of the system's extents
    /// (the next checkpoint's blob records them).
    fn pool_system_free(&self, limit: u64) {
        let sys = self.ckpt.sys.lock();
        // The allocator stays locked until the runs are in the pool.
        let mut a = sys.alloc.lock();
        let runs = a.give_free(1, limit, u64::MAX);
        // Before the runs reach the pool (see `pool_free_space`).
        self.space.pager.forget_unwritten_freed(&mut a);
        self.pool_runs(crate::types::CfId::SYSTEM, runs);
    }

    /// Returns `runs`, which `cf`'s allocator just gave up
    /// ([`crate::pager::alloc::CfAllocator::give_free`]), to the extent
    /// map's pool; their pages.
    fn pool_runs(
        &self,
        cf: crate::types::CfId,
        runs: Vec<crate::format::records::PageRange>,
    ) -> u64 {
        let mut extents = self.space.extents.lock();
        (runs.into_iter())
            .map(|r| {
                extents.give_back(cf, r);
                r.pages
            })
            .sum()
    }

    /// Pages of the system tree and of the metadata blob now.
    fn system_pages(&self) -> Result<(u64, u64)> {
        let sys = self.ckpt.sys.lock();
        let reader = crate::txn::pages::TxnPages::new(
            self.space.clone(),
            crate::types::CfId::SYSTEM,
            sys.alloc.clone(),
        );
        let mut tree_pages = 0u64;
        crate::btree::walk(&reader, &sys.root, &mut |_, n, _| {
            tree_pages += u64::from(n)
        })?;
        Ok((tree_pages, sys.meta_run.map_or(1, |(_, n)| u64::from(n))))
    }

    /// Gives every CF's free runs below `limit` of at least `min_pages`
    /// (the lowest, until about `budget` pages) back to the extent map's
    /// pool, so the pages of any CF past the limit can move into them.
    /// Under the checkpoint lock, like a cut: the next checkpoint rewrites
    /// the descriptors of the CFs whose extents changed.
    ///
    /// A CF with a direct commit between its checkpoint and its
    /// publication is left alone: checkpoints skip such a CF (writing it
    /// from the published version would take the commit back out), so its
    /// descriptor on disk would keep runs the extent map no longer gives
    /// it, and the file would not open (`CfAllocator::new`: "free range
    /// outside its extents"; a kill-test probe). The next step pools them.
    fn pool_free_space(&self, cfs: &[Arc<CfShared>], limit: u64, min_pages: u64, budget: u64) {
        let _sys = self.ckpt.sys.lock();
        let mut left = budget;
        for cf in cfs {
            if left == 0 {
                break;
            }
            if cf.base_ahead_of_published() {
                continue;
            }
            // Locked until the runs are in the pool, as in a cut.
            let mut a = cf.alloc.lock();
            let runs = a.give_free(min_pages, limit, left);
            // Stale cache entries of runs freed unwritten go before any
            // run reaches the pool: left to the CF's next allocation, the
            // removal came after another CF had claimed the page and
            // cached its own run there, and dropped that run, its only
            // copy ("page belongs to cf 3 not cf 2", checksum mismatches
            // under two writers and compaction steps; adversarial probe).
            self.space.pager.forget_unwritten_freed(&mut a);
            if runs.is_empty() {
                continue;
            }
            left = left.saturating_sub(self.pool_runs(cf.id, runs));
            cf.extents_changed.store(true, Ordering::Release);
        }
    }

    /// Compaction until the file is as short as it gets (or a step gives
    /// nothing back): first every CF's trees are rebuilt packed into the
    /// lowest free pages below the current end (where there is room for
    /// them: the file never grows), then the tail is moved and cut in
    /// steps.
    pub(crate) fn compact(self: &Arc<Self>) -> Result<CompactReport> {
        self.without_punching(|| self.compact_paused())
    }

    /// [`DbShared::compact`] with hole punching paused.
    fn compact_paused(self: &Arc<Self>) -> Result<CompactReport> {
        self.check_open()?;
        self.finish_folds()?;
        let ps = self.space.pager.page_size() as u64;
        let (file, _) = self.usage();
        // The packed copies go below the bytes the file has, never into
        // claimed space past them: that would lengthen a small file.
        let written = self.on_disk_pages()?;
        let mut total = CompactReport {
            bytes_before: written * ps,
            ..CompactReport::default()
        };
        let cfs: Vec<Arc<CfShared>> = self.registry.cfs.read().values().cloned().collect();
        for cf in &cfs {
            match self.rewrite_cf(cf, file.min(written), WriteState::repack_trees) {
                Ok(n) => total.pages_moved += n,
                // Not enough free space for a packed copy: the steps below
                // still move its tail.
                Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::StorageFull => {}
                Err(e) => return Err(e),
            }
        }
        // Steps of at most 64 MiB; a step that gives nothing back (its
        // limit was below what the CFs could move into: the free space
        // there is splintered, or taken) is retried with half the reach,
        // down to 256 KiB, so the limit climbs to where moves succeed.
        let min_reach = MIN_STEP_REACH;
        let mut reach = 64u64 << 20;
        let mut chase = Chase::default();
        for _ in 0..MAX_STEPS {
            let Step {
                report: r,
                past_target,
                progressed,
            } = self.step_toward_target(reach)?;
            total.bytes_after = r.bytes_after;
            total.pages_moved += r.pages_moved;
            total.done = r.done;
            if past_target == 0 {
                break;
            }
            // Writers beside it refill the tail: see `Chase`.
            if chase.stop_after(r.bytes_after, progressed) {
                break;
            }
            if !progressed {
                // Nothing given back: a step of shorter reach has a
                // higher limit (at most halfway from the end to the
                // target), with more room below it for what it moves.
                reach = (reach / 2).min(past_target * ps / 2);
                if reach < min_reach {
                    break;
                }
            }
        }
        // The WAL too: free segment files, and the open one, whatever its
        // size, if nothing logged since is unreleased (the next record
        // starts a small one).
        self.give_back_wal_with(0, crate::wal::Retire::Any);
        Ok(total)
    }

    /// Checkpoints, folding every buffer, until no fold in rounds is left
    /// half done (waiting, at most [`SNAPSHOT_WAIT`], for one the
    /// background checkpointer runs: a checkpoint skips a CF another
    /// thread folds). A repack of a half-folded CF would fold the rest
    /// itself, in one piece, and need room for it besides the packed copy
    /// (a repack without that room is skipped, leaving the trees as the
    /// rounds packed them: 132 MiB instead of 116 in the peers benchmark).
    fn finish_folds(self: &Arc<Self>) -> Result<()> {
        let start = std::time::Instant::now();
        loop {
            self.checkpoint_all()?;
            let cfs: Vec<Arc<CfShared>> = self.registry.cfs.read().values().cloned().collect();
            let half_done = cfs.iter().any(|cf| cf.current.load().fold.is_some());
            if !half_done || start.elapsed() >= SNAPSHOT_WAIT {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Moves `cf`'s trees below page `limit` as one commit (nothing if they
    /// already are). Returns the pages moved; an I/O error of kind
    /// `StorageFull` if the CF has no room below the limit.
    fn relocate_cf(self: &Arc<Self>, cf: &Arc<CfShared>, limit: u64) -> Result<u64> {
        self.rewrite_cf(cf, limit, WriteState::relocate_trees)
    }

    /// Runs `rewrite` (relocation or repacking) over `cf`'s trees with its
    /// allocator limited below `limit`, and commits the result (a commit
    /// whose record carries no operation: the data does not change).
    fn rewrite_cf(
        self: &Arc<Self>,
        cf: &Arc<CfShared>,
        limit: u64,
        rewrite: fn(&mut WriteState, PageId) -> Result<u64>,
    ) -> Result<u64> {
        let lock = cf.lock_writer()?;
        if cf.check_live().is_err() {
            // Dropped since the CFs were listed: nothing of it to move
            // (its pages go back once no snapshot reads them).
            return Ok(0);
        }
        let limited = Limit::set(cf, limit);
        let log_max = Some(self.options.wal_record_max_bytes);
        let mut st = WriteState::new(self.space.clone(), cf, lock.head.clone(), log_max);
        let moved = match rewrite(&mut st, PageId(limit)) {
            Ok(n) => n,
            Err(e) => {
                st.pages.rollback();
                return Err(e);
            }
        };
        // Lifted before the commit, which releases the writer lock early:
        // the next writer of this CF must not allocate under the limit.
        drop(limited);
        if !st.needs_tree_commit() || !st.pages.is_dirty() {
            st.pages.rollback();
            return Ok(0);
        }
        // The data did not change: the record carries no operation.
        let payload = st.finish_log().inspect_err(|_| st.pages.rollback())?;
        let r = self.commit(cf, &mut st, lock, Durability::None, payload);
        if r.is_err() {
            st.pages.rollback();
        }
        r.map(|()| moved)
    }
}

#[cfg(test)]
mod chase_tests {
    use super::Chase;

    #[test]
    fn steps_that_move_pages_but_never_shorten_the_file_stop_the_loop() {
        // The lengths an adversarial probe saw beside four writers: every
        // step moved a few pages, the file swung between 4.5 and 10 MB.
        let mut chase = Chase::default();
        let lengths = [
            9_800_000u64,
            6_100_000,
            4_500_000,
            7_900_000,
            10_000_000,
            5_200_000,
        ];
        let stops: Vec<bool> = lengths.iter().map(|&l| chase.stop_after(l, true)).collect();
        assert_eq!(stops, [false, false, false, false, false, true]);
    }

    #[test]
    fn a_new_shortest_length_or_a_step_that_moved_nothing_keeps_it_going() {
        let mut chase = Chase::default();
        assert!(!chase.stop_after(100, true));
        assert!(!chase.stop_after(120, true));
        assert!(!chase.stop_after(110, true));
        assert!(!chase.stop_after(90, true)); // shorter: counting restarts
        assert!(!chase.stop_after(95, true));
        assert!(!chase.stop_after(95, true));
        // Steps that moved nothing (the reach is halved) do not count,
        // however many: a writer-free compaction searches that way.
        for _ in 0..10 {
            assert!(!chase.stop_after(95, false));
        }
        assert!(chase.stop_after(91, true));
    }
}

#[cfg(test)]
mod pool_tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use crate::db::Database;
    use crate::storage::mem::MemVfs;
    use crate::table::types::TableDefinition;
    use crate::types::Version;

    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");

    /// A compaction step pooled the free runs of a CF whose direct commit
    /// sat between its checkpoint and its publication; checkpoints skip
    /// such a CF, so a kill left an extent map its descriptor did not
    /// match, and the file did not open (a real-kill probe). The state the
    /// direct commit leaves (a base ahead of the published version) is
    /// made by hand here.
    #[test]
    fn a_cf_with_an_unpublished_direct_commit_keeps_its_free_runs() {
        let db = Database::builder()
            .background_checkpoints(false)
            .create_with_vfs(Arc::new(MemVfs::new()), "p.sheaf")
            .unwrap();
        let value = [7u8; 900];
        for round in 0..2u64 {
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(T).unwrap();
                for k in 0..2000u64 {
                    match round {
                        0 => drop(t.insert(k, &value[..]).unwrap()),
                        _ => drop(t.remove(k).unwrap()),
                    }
                }
            }
            tx.commit().unwrap();
            db.checkpoint().unwrap();
        }
        db.checkpoint().unwrap();
        let shared = &db.shared;
        let cfs: Vec<_> = shared.registry.cfs.read().values().cloned().collect();
        assert_eq!(cfs.len(), 1, "the default CF alone");
        let cf = &cfs[0];
        assert!(!cf.extents_changed.load(Ordering::Acquire));
        let saved = *cf.base.lock();
        let published = cf.current.load().tree_base.version;
        cf.base.lock().version = Version(published.0 + 1);
        shared.pool_free_space(&cfs, u64::MAX, 1, u64::MAX);
        assert!(
            !cf.extents_changed.load(Ordering::Acquire),
            "runs of a CF with an unpublished direct commit were pooled"
        );
        *cf.base.lock() = saved;
        shared.pool_free_space(&cfs, u64::MAX, 1, u64::MAX);
        assert!(
            cf.extents_changed.load(Ordering::Acquire),
            "the removal left no free run to pool: the test proves nothing"
        );
        db.checkpoint().unwrap();
        db.check_integrity().unwrap();
    }
}
