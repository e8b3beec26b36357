//! The checkpoint protocol (design.md §6).
//!
//! 1. For each CF with unpersisted commits, take its latest published
//!    version `S_c` as a snapshot (its pages stay alive) and its LSN `L_c`.
//! 2. Collect the dirty runs reachable from `S_c` (a connected top part of
//!    each tree, found without reading clean pages).
//! 3. Compute the CF's free space *at* `S_c` exactly from the allocator's
//!    page versions, and write the new descriptors (roots, `L_c`, free
//!    space) into the system tree, copy-on-write; then a new metadata blob.
//! 4. Write all runs sorted and coalesced; `fdatasync`.
//! 5. Write the superblock (with the WAL replay start) to the slot that is
//!    not current; `fdatasync`.
//! 6. Mark the written runs clean, let pages wait-listed on this checkpoint
//!    be reused, release the system pages of the old base, and let the WAL
//!    below the replay start be recycled.
//!
//! Writers and readers keep running: the checkpoint reads only immutable
//! committed pages and takes the allocator lock briefly; only one
//! checkpoint runs at a time (the system lock).
//!
//! Crash argument: until step 5 completes, the current superblock and every
//! page it reaches are untouched (new runs go only to pages free in the
//! current base, and pages the base uses are never reused before a later
//! base drops them), so a crash recovers the previous base plus the WAL. A
//! torn superblock write fails its checksum and the other slot is used.
//! Invariant 4 (design.md §11): data synced before the superblock that
//! references it; generations strictly increase.

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use super::checkpointer::SysState;
use super::commit::Patience;
use super::DbShared;
use crate::btree::{self, TreeRoot};
use crate::error::{Error, Result};
use crate::format::page::{
    pages_for_payload, PageBuf, PageBytes as _, PageRef, PageType, HEADER_LEN,
};
use crate::format::records::{cf_key, CfDescriptor, MetaBlob, TableMeta};
use crate::format::superblock::{Superblock, WalMark};
use crate::pager::alloc::CfAllocator;
use crate::pager::ranges::RangeSet;
use crate::txn::pages::{ReadPages, TxnPages};
use crate::txn::{CfShared, CfVersion};
use crate::types::{CfId, IdMap, IdSet, Lsn, PageId, Version};
use crate::wal::Retire;

/// Where a checkpoint put the metadata blob, and the file length it
/// records (the superblock repeats both).
struct MetaRun {
    page: PageId,
    npages: u32,
    payload_len: u32,
    file_pages: u64,
}

/// One CF's part of a checkpoint.
struct Plan {
    cf: Arc<CfShared>,
    snapshot: Arc<CfVersion>,
    /// The CF's extents when its free space at `snapshot` was computed.
    extents: Vec<crate::format::records::PageRange>,
    /// Superseded, never-written runs an old snapshot pins, written by
    /// this checkpoint so their memory becomes evictable.
    spilled: Vec<(PageId, u32)>,
}

impl DbShared {
    /// Folds every CF's buffered commits (aside, see `fold_cf`), then
    /// checkpoints every CF with unpersisted published trees.
    /// Then cuts the file if enough of its tail is free
    /// (`shrink_if_worth_it`).
    pub(crate) fn checkpoint_all(self: &Arc<Self>) -> Result<()> {
        // Folds go in rounds; each round's checkpoint lets the next reuse
        // the pages it replaced (see `fold_cf`). Rounds only cover the
        // versions published when a fold began, and a CF whose fold ended
        // is not folded again here, so this ends while writers go on.
        self.fold_and_checkpoint(None, Patience::Grow).map(|_| ())
    }

    /// Folds (in rounds, a checkpoint after each) the buffers of `cfs`
    /// (every CF if `None`), then checkpoints everything and cuts the file
    /// if worth it. Returns the CFs whose fold was deferred to wait for
    /// snapshots (`Patience::WaitForSnapshots` only): the background
    /// checkpointer calls this again with them once a snapshot released
    /// pages.
    pub(crate) fn fold_and_checkpoint(
        self: &Arc<Self>,
        cfs: Option<Vec<Arc<CfShared>>>,
        patience: Patience,
    ) -> Result<Vec<Arc<CfShared>>> {
        let cfs = cfs.unwrap_or_else(|| self.registry.cfs.read().values().cloned().collect());
        // What a fold that must happen has to cover: every version
        // published when it was asked for.
        let published: Vec<(Arc<CfShared>, Version)> = match patience {
            Patience::Grow => (cfs.iter())
                .map(|cf| (cf.clone(), cf.current.load().version))
                .collect(),
            Patience::WaitForSnapshots => Vec::new(),
        };
        let mut pass = self.fold_rounds(cfs, patience)?;
        let mut deferred = std::mem::take(&mut pass.deferred);
        let mut again = true;
        loop {
            while !pass.more.is_empty() {
                self.checkpoint_including(Vec::new())?;
                pass = self.fold_rounds(pass.more, patience)?;
                deferred.append(&mut pass.deferred);
            }
            self.checkpoint_including(Vec::new())?;
            // One more pass, over: CFs deferred for pages that waited
            // only for a checkpoint (free after this one; a CF whose
            // pages a snapshot pins defers again, and the checkpointer
            // retries it when the snapshot ends); and CFs whose fold in
            // rounds, begun before this call (by another thread), covered
            // only the versions published when it began.
            let behind = behind(&published);
            if !again || (deferred.is_empty() && behind.is_empty()) {
                break;
            }
            again = false;
            debug_assert!(pass.more.is_empty(), "rounds left before the second pass");
            let next = std::mem::take(&mut deferred).into_iter().chain(behind);
            pass = self.fold_rounds(next.collect(), patience)?;
            deferred = std::mem::take(&mut pass.deferred);
        }
        debug_assert!(
            patience == Patience::WaitForSnapshots || deferred.is_empty(),
            "a fold that must happen was deferred"
        );
        self.shrink_if_worth_it()?;
        Ok(deferred)
    }

    /// Checkpoints every CF with unpersisted published commits, plus
    /// `extra` (CFs with a committed version not yet published — the
    /// direct-commit path, whose caller holds those CFs' writer locks).
    pub(crate) fn checkpoint_including(
        self: &Arc<Self>,
        extra: Vec<(Arc<CfShared>, Arc<CfVersion>)>,
    ) -> Result<()> {
        super::integrity::refuse_inside_callback("a checkpoint")?;
        let mut sys = self.ckpt.sys.lock();
        self.health.check_writable()?;
        // One consistent view: no CF record is appended between sampling
        // the log end and reading the registry, the dropped list and the
        // snapshot (whose multi-CF commits are all-or-nothing).
        let (log_end, cfs, dropped, db_snapshot) = {
            let _change = self.registry.change.read();
            (
                self.wal().next_lsn(),
                self.registry
                    .cfs
                    .read()
                    .values()
                    .cloned()
                    .collect::<Vec<Arc<CfShared>>>(),
                self.registry.dropped.lock().clone(),
                self.registry.snapshot.load_full(),
            )
        };
        let prev_replay = sys.replay_lsn;
        debug_assert!(
            prev_replay <= log_end,
            "the replay start is past the log end"
        );
        debug_assert!(
            !cfs.iter().any(|c| dropped.iter().any(|d| d.id == c.id)),
            "a CF is both live and dropped"
        );
        let prev_start = self.ckpt.last_lsn.swap(log_end.0, Ordering::Relaxed);
        // Nothing logged since the last checkpoint began: the log is idle,
        // and keeps no free segment file.
        let keep_wal_bytes = match prev_start == log_end.0 {
            true => 0,
            false => self.options.checkpoint_wal_bytes,
        };
        let mut plans = plan(&cfs, &db_snapshot, extra);
        // O9: the WAL is made durable below through the end of every
        // version written here (one published after `log_end` was sampled
        // may be in the snapshot), before the superblock: so a fold
        // round's `FoldRound` marker is durable whenever trees it left
        // ahead of their durable base are (replay then looks keys up).
        let durable_to = (plans.iter()).fold(log_end, |end, p| end.max(p.snapshot.lsn));
        let mut runs = Vec::new();
        let mut descriptors = Vec::new();
        for p in plans.iter_mut() {
            let (desc, mut r) = self.prepare_cf(p)?;
            descriptors.push((p.cf.id, Some(desc)));
            runs.append(&mut r);
        }
        let persisted = |cf: CfId| -> Option<Vec<crate::format::records::PageRange>> {
            match plans.iter().find(|p| p.cf.id == cf) {
                Some(p) => Some(p.extents.clone()),
                None => cfs
                    .iter()
                    .find(|c| c.id == cf)
                    .map(|c| c.persisted_extents.lock().clone()),
            }
        };
        let replay_lsn = replay_floor(&cfs, &plans, log_end, prev_replay);
        // Buffered commits a checkpoint does not write into the trees (a
        // CF whose writer was busy, so it was not folded) become durable
        // in the WAL instead: a checkpoint makes every commit before it
        // durable, whatever its mode (ordering rule O8).
        if let Err(e) = self.wal_durable_through(durable_to) {
            self.poison(&e);
            return Err(e);
        }
        assert!(
            self.wal().synced_lsn() >= durable_to,
            "O8/O9: WAL not durable through {durable_to:?} before the superblock"
        );
        // Nothing to persist: no new superblock, unless compaction asks
        // for the system tree and the blob below a limit (they may lie
        // past it although no CF changed: a step that moved no CF page
        // left them at the file's end, and every step after it too).
        let relocating = self.ckpt.relocate_below.load(Ordering::Acquire) != 0;
        // A cut that changed no CF's extents (only the pool's or the
        // system's) still needs a superblock with the shorter length
        // before the file may lose its tail.
        let cut = self.space.extents.lock().file_pages() != sys.file_pages;
        if descriptors.is_empty()
            && dropped.is_empty()
            && replay_lsn == sys.replay_lsn
            && !relocating
            && !cut
            && self.wal_mark_for(&sys, replay_lsn) == sys.wal_mark
        {
            self.give_back_wal(keep_wal_bytes);
            return Ok(());
        }
        // Dropped CFs leave the system tree (their descriptor is removed).
        descriptors.extend(dropped.iter().map(|c| (c.id, None)));
        if let Err(e) =
            self.write_checkpoint_with(&mut sys, &runs, descriptors, replay_lsn, &persisted)
        {
            self.poison(&e);
            return Err(e);
        }
        for p in &plans {
            let trees = p.snapshot.tree_base;
            *p.cf.base.lock() = trees;
            *p.cf.persisted_extents.lock() = p.extents.clone();
            p.cf.alloc.lock().checkpoint_done(trees.version, &p.spilled);
        }
        drop(plans);
        self.release_dropped(&dropped);
        self.wal().release_before(replay_lsn);
        self.give_back_wal(keep_wal_bytes);
        Ok(())
    }

    /// What a superblock with replay start `replay_lsn` says about the WAL
    /// (rule O13): until the open made sure a segment file exists, what
    /// the current one says (`NotRequired` for a new database); then
    /// `Required`, except at close once the base covers the whole log
    /// (no commit starts after close began), when the files may go.
    fn wal_mark_for(&self, sys: &SysState, replay_lsn: Lsn) -> WalMark {
        if !sys.wal_kept {
            return sys.wal_mark;
        }
        let wal = self.wal();
        if self.health.is_closed() && replay_lsn >= wal.next_lsn() {
            return WalMark::NotRequired;
        }
        debug_assert!(wal.segment_files() > 0, "O13: WAL required with no file");
        WalMark::Required
    }

    /// Deletes free WAL segment files beyond `keep_bytes` (design.md
    /// "WAL size"); with `keep_bytes` 0 (an idle log, close, the end of a
    /// compaction) a log wholly released gives back its open file too.
    /// They hold nothing replay needs, so a failure to delete one costs
    /// only disk space and fails nothing.
    pub(crate) fn give_back_wal(&self, keep_bytes: u64) {
        let retire = match keep_bytes {
            0 => Retire::Large,
            _ => Retire::No,
        };
        self.give_back_wal_with(keep_bytes, retire);
    }

    /// [`DbShared::give_back_wal`], choosing whether the open file goes.
    pub(crate) fn give_back_wal_with(&self, keep_bytes: u64, retire: Retire) {
        if let Some(wal) = self.wal_if_open() {
            let _ = wal.give_back(keep_bytes, retire);
        }
    }

    /// Collects the dirty runs of `S_c`'s trees and builds its descriptor.
    /// The trees hold `S_c`'s tree base (its buffered commits stay in the
    /// WAL, which replay refills the buffer from), so the descriptor
    /// names that version and its LSN.
    fn prepare_cf(
        self: &Arc<Self>,
        p: &mut Plan,
    ) -> Result<(CfDescriptor, Vec<(PageId, PageRef)>)> {
        let s = &p.snapshot;
        let trees = s.tree_base;
        assert!(
            trees.lsn <= s.lsn,
            "cf {}: the trees' replay point is past the snapshot",
            p.cf.id
        );
        let (dirty, free, pinned) = {
            let mut a = p.cf.alloc.lock();
            // Drains releases first, so `free_at` counts them as free too.
            let pinned = a.pinned_unwritten(trees.version);
            p.extents = a.extents().to_vec();
            // These extents go into the descriptor (cuts happen under the
            // checkpoint lock, so none runs before it is durable).
            p.cf.extents_changed.store(false, Ordering::Release);
            (
                a.dirty_runs(trees.version),
                a.free_at(trees.version),
                pinned,
            )
        };
        let store = ReadPages::new(self.space.clone(), p.cf.id);
        let mut runs = Vec::new();
        if !dirty.is_empty() {
            collect_cf_dirty(&store, &s.catalog, &dirty, &mut runs)?;
        }
        debug_assert!(runs.iter().all(|(id, _)| dirty.contains_key(id)));
        p.spilled = self.spill_pinned(&pinned, &dirty, &mut runs);
        let desc = CfDescriptor {
            name: p.cf.name.clone(),
            catalog_root: s.catalog.root,
            catalog_len: s.catalog.len,
            next_table: s.next_table,
            checkpoint_lsn: trees.lsn,
            version: trees.version,
            free: free.to_vec(),
        };
        Ok((desc, runs))
    }

    /// Adds the pinned, never-written runs whose cached copy is still the
    /// one their version committed to the runs to write (issue 9 point
    /// 10). They are free at the snapshot, so the new base does not
    /// reference them, and not reusable while pinned; a run released and
    /// reused meanwhile has another cache entry then, and `mark_clean`
    /// leaves that alone.
    fn spill_pinned(
        &self,
        pinned: &[(PageId, u32)],
        dirty: &IdMap<PageId, u32>,
        runs: &mut Vec<(PageId, PageRef)>,
    ) -> Vec<(PageId, u32)> {
        let ps = self.space.pager.page_size();
        let mut spilled = Vec::new();
        for &(id, n) in pinned {
            debug_assert!(
                !dirty.contains_key(&id),
                "run {id} both live and superseded"
            );
            let Some(page) = self.space.pager.cache().get(id) else {
                continue;
            };
            if page.len() != n as usize * ps || page.page_id() != id {
                continue;
            }
            runs.push((id, page));
            spilled.push((id, n));
        }
        spilled
    }

    /// Writes `runs` and the given CF descriptors as a new durable base,
    /// recording every extent as currently owned (no writer is running).
    pub(crate) fn write_checkpoint(
        self: &Arc<Self>,
        sys: &mut SysState,
        runs: &[(PageId, PageRef)],
        descriptors: Vec<(CfId, Option<CfDescriptor>)>,
        replay_lsn: Lsn,
    ) -> Result<()> {
        let extents = self.space.extents.lock().clone();
        let all = |cf: CfId| Some(extents.extents_of(cf));
        self.write_checkpoint_with(sys, runs, descriptors, replay_lsn, &all)
    }

    /// Writes `runs` and the given CF descriptors as a new durable base;
    /// `persisted(cf)` lists the extents each CF's descriptor accounts for.
    fn write_checkpoint_with(
        self: &Arc<Self>,
        sys: &mut SysState,
        runs: &[(PageId, PageRef)],
        descriptors: Vec<(CfId, Option<CfDescriptor>)>,
        replay_lsn: Lsn,
        persisted: &dyn Fn(CfId) -> Option<Vec<crate::format::records::PageRange>>,
    ) -> Result<()> {
        // Compaction asks for the system tree and the blob below a limit.
        // Where the pages below it ran out (other CFs took them), the
        // checkpoint is written without the limit instead of failing: the
        // allocation failed before anything was written, and the cut that
        // follows only gives back less.
        let limit = self.ckpt.relocate_below.load(Ordering::Acquire);
        if limit > 0 {
            let mut sp = TxnPages::new(self.space.clone(), CfId::SYSTEM, sys.alloc.clone());
            let descs = descriptors.clone();
            let alloc = sys.alloc.clone();
            let limited = SystemLimit::set(&alloc, limit);
            let r = self.write_checkpoint_inner(sys, &mut sp, runs, descs, replay_lsn, persisted);
            drop(limited);
            match r {
                Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::StorageFull => sp.rollback(),
                r => {
                    if r.is_err() {
                        sp.rollback();
                    }
                    return r;
                }
            }
        }
        let mut sp = TxnPages::new(self.space.clone(), CfId::SYSTEM, sys.alloc.clone());
        let result =
            self.write_checkpoint_inner(sys, &mut sp, runs, descriptors, replay_lsn, persisted);
        if result.is_err() {
            sp.rollback();
        }
        result
    }

    fn write_checkpoint_inner(
        self: &Arc<Self>,
        sys: &mut SysState,
        sp: &mut TxnPages,
        runs: &[(PageId, PageRef)],
        descriptors: Vec<(CfId, Option<CfDescriptor>)>,
        replay_lsn: Lsn,
        persisted: &dyn Fn(CfId) -> Option<Vec<crate::format::records::PageRange>>,
    ) -> Result<()> {
        let mut root = sys.root;
        for (cf, desc) in &descriptors {
            match desc {
                Some(d) => btree::insert(sp, &mut root, &cf_key(*cf), &d.encode())?,
                None => btree::remove(sp, &mut root, &cf_key(*cf))?,
            };
        }
        // Compaction: the system tree and the blob move below the limit
        // the caller set on the system allocator. Every allocation happens
        // before the first write, so running out below it (`StorageFull`)
        // changes nothing.
        let limit = sys.alloc.lock().limit().unwrap_or(0);
        if limit > 0 {
            btree::relocate(sp, &mut root, PageId(limit))?;
            debug_assert!(
                root.root.is_none_or(|r| r.0 < limit),
                "the system tree stayed past the compaction limit"
            );
        }
        if let Some((p, n)) = sys.meta_run {
            btree::store::PageWrite::free(sp, p, n);
        }
        // System pages the previous base still uses: free in the new base,
        // reusable only once it is durable.
        sp.check_private_frees()?;
        let released = sp.take_freed();
        let mut released_set = RangeSet::new();
        // The system tree's pages come from the file: two references to
        // one page, or a page the system allocator calls free, is
        // corruption (found before anything is written).
        for &(p, n) in &released {
            if !released_set.insert(p.0, n as u64) {
                return Err(Error::corrupted_page(
                    p,
                    "system page reachable twice (freed twice in one checkpoint)",
                ));
            }
        }
        if !(sys.alloc.lock().free_set().clone()).insert_all(&released_set) {
            return Err(Error::corrupted(
                "the system tree uses a page its allocator calls free",
                "checkpoint",
            ));
        }
        // Nor may it use a page outside the system's extents: freed into
        // the system's free space, it broke the allocator (a panic).
        if let Some((p, n)) = sys.alloc.lock().first_unowned(&released) {
            return Err(Error::corrupted_page(
                p,
                format!("a system run of {n} pages lies outside the system's extents"),
            ));
        }
        let meta = self.build_meta(sp, &sys.alloc.clone(), &released_set, persisted)?;
        let system_runs = sp.private_runs();
        let mut all: Vec<(PageId, PageRef)> = runs.to_vec();
        all.extend(system_runs.iter().cloned());
        self.space.pager.write_runs(&all)?;
        self.space.pager.sync()?;
        // O4: clean only now. CF runs: only if still the cached copy (a
        // spilled run may have been reused). System runs: only this
        // checkpoint writes system pages, so their entries are replaced
        // (a reused system page may have a stale entry).
        self.space.pager.mark_clean(runs);
        self.space.pager.cache_clean(&system_runs);
        // Ordering rule O1: every LSN the new superblock names is durable
        // in the WAL before the superblock is written.
        let named = descriptors
            .iter()
            .filter_map(|(_, d)| d.as_ref().map(|d| d.checkpoint_lsn))
            .fold(replay_lsn, Lsn::max);
        self.wal_durable_through(named)?;
        // A cut file (`shrink_file`) lowers the mark with its length.
        let written_pages = all
            .iter()
            .map(|(id, p)| id.0 + (p.len() / self.space.pager.page_size()) as u64)
            .fold(sys.written_pages, u64::max)
            .min(meta.file_pages);
        let wal_mark = self.wal_mark_for(sys, replay_lsn);
        let sb = Superblock {
            wal_mark,
            page_size: self.space.pager.page_size() as u32,
            generation: sys.generation + 1,
            sys_root: root.root,
            sys_len: root.len,
            meta_page: Some(meta.page),
            meta_npages: meta.npages,
            meta_len: meta.payload_len,
            file_pages: meta.file_pages,
            next_cf: CfId(self.registry.next_id.load(Ordering::Acquire)),
            replay_lsn,
            db_id: sys.db_id,
            written_pages,
            anchor_kept: true,
        };
        debug_assert!(sys.slot <= 1, "superblock slot {} out of range", sys.slot);
        let slot = 1 - sys.slot;
        debug_assert_ne!(
            slot, sys.slot,
            "§11.4: a checkpoint overwrites the current slot"
        );
        debug_assert!(
            sb.generation > sys.generation,
            "§11.4: generations increase"
        );
        debug_assert!(
            sb.written_pages <= sb.file_pages,
            "written pages past the file"
        );
        let offset = slot as u64 * self.space.pager.page_size() as u64;
        let encoded = sb.encode();
        self.space.pager.storage().write_at(offset, &encoded)?;
        self.space.pager.sync()?;
        // The new base is durable. Ordering rule O12: only now is the same
        // superblock copied over the other slot (and synced), so at every
        // moment one slot holds the newest durable base, and once the copy
        // is durable a slot damaged later falls back to an equal copy, not
        // to an older base whose freed pages this checkpoint may have
        // reused (design.md "Superblock copies").
        let other = sys.slot as u64 * self.space.pager.page_size() as u64;
        debug_assert_ne!(offset, other, "O12: the copy goes to the other slot");
        self.space.pager.storage().write_at(other, &encoded)?;
        self.space.pager.sync()?;
        sys.generation += 1;
        if let Some(wal) = self.wal_if_open() {
            wal.set_generation(sys.generation);
        }
        sys.slot = slot;
        sys.root = root;
        sys.meta_run = Some((meta.page, meta.npages));
        sys.replay_lsn = replay_lsn;
        sys.written_pages = written_pages;
        sys.file_pages = meta.file_pages;
        sys.wal_mark = wal_mark;
        let mut alloc = sys.alloc.lock();
        let allocated: Vec<(PageId, u32)> = sp
            .private_runs()
            .iter()
            .map(|(id, p)| (*id, (p.len() / self.space.pager.page_size()) as u32))
            .collect();
        sp.mark_committed();
        alloc.commit(Version(sys.generation), &allocated, &[]);
        alloc.checkpoint_done(Version(sys.generation), &[]);
        for (p, n) in released {
            alloc.release_system_run(p, n);
        }
        Ok(())
    }

    /// Allocates and fills the metadata blob. The blob describes the
    /// allocator state
    /// including its own pages, so its run is allocated before encoding,
    /// with slack, and retried if the encoding outgrew it.
    fn build_meta(
        &self,
        sp: &mut TxnPages,
        sys_alloc: &Mutex<CfAllocator>,
        released: &RangeSet,
        persisted: &dyn Fn(CfId) -> Option<Vec<crate::format::records::PageRange>>,
    ) -> Result<MetaRun> {
        use crate::btree::store::PageWrite;
        let ps = self.space.pager.page_size();
        let mut slack = 256usize;
        for _attempt in 0..8 {
            let estimate = self.encode_meta(sys_alloc, released, persisted).0.len() + slack;
            let npages = pages_for_payload(ps, estimate);
            let id = sp.alloc(npages)?;
            let (blob, file_pages) = self.encode_meta(sys_alloc, released, persisted);
            if HEADER_LEN + blob.len() <= npages as usize * ps {
                let mut run = PageBuf::new_run(ps, npages, PageType::Blob, id, CfId::SYSTEM);
                run.bytes_mut()[HEADER_LEN..HEADER_LEN + blob.len()].copy_from_slice(&blob);
                run.set_payload_len(blob.len() as u32);
                sp.install(id, run);
                // The superblock records the file length the blob does.
                return Ok(MetaRun {
                    page: id,
                    npages,
                    payload_len: blob.len() as u32,
                    file_pages,
                });
            }
            sp.free(id, npages);
            slack *= 4;
        }
        Err(Error::corrupted(
            "metadata blob size did not converge",
            "checkpoint",
        ))
    }

    fn encode_meta(
        &self,
        sys_alloc: &Mutex<CfAllocator>,
        released: &RangeSet,
        persisted: &dyn Fn(CfId) -> Option<Vec<crate::format::records::PageRange>>,
    ) -> (Vec<u8>, u64) {
        // The system's in-flight pages are the new base's own pages: only
        // what is free now (and what the old base used) is free in it.
        let mut sys_free = sys_alloc.lock().free_set().clone();
        let ok = sys_free.insert_all(released);
        // Engine invariant: `write_checkpoint_inner` checked this under the same
        // system lock.
        assert!(ok, "released system pages were already free");
        let extents = self.space.extents.lock();
        let file_pages = extents.file_pages();
        let blob = MetaBlob {
            file_pages,
            extents: extents.to_records_as_persisted(&|cf| {
                if cf == CfId::SYSTEM {
                    Some(extents.extents_of(cf))
                } else {
                    persisted(cf)
                }
            }),
            sys_free: sys_free.to_vec(),
        }
        .encode();
        (blob, file_pages)
    }
}

impl DbShared {
    /// After a checkpoint that removed their descriptors: gives the extents
    /// of dropped CFs back to the pool once no snapshot can read them.
    ///
    /// Linear in the dropped CFs and the extents: one pass over each for
    /// all of them (a checkpoint after 10,000 drops took 1.3 s with a pass
    /// per dropped CF, and `check_integrity` behind it 49 s in a debug
    /// build; `introspection::database_stats_beside_cf_creation_and_drops_never_fail`).
    fn release_dropped(&self, dropped: &[Arc<CfShared>]) {
        let mut released: IdSet<CfId> = IdSet::default();
        for cf in dropped {
            // §11.3: only a dropped CF's extents may go back to the pool
            // (no later version of a live CF can reach them).
            debug_assert!(cf.check_live().is_err(), "cf {} is live", cf.id.0);
            let latest = cf.current.load_full();
            // current + writer head + `latest` itself; any more is a reader.
            // An older version alive keeps the latest batch referenced.
            let unread = Arc::strong_count(&latest) <= 3 && latest.batch_is_last();
            if !unread {
                continue;
            }
            let runs = cf.alloc.lock().discard_all();
            for (id, _) in runs {
                self.space.pager.forget(id);
            }
            released.insert(cf.id);
        }
        if released.is_empty() {
            return;
        }
        // Until here the released CFs still own their extents, so nothing
        // else allocates from them.
        self.space
            .extents
            .lock()
            .release_all_of(|id| released.contains(&id));
        self.registry
            .dropped
            .lock()
            .retain(|c| !released.contains(&c.id));
    }
}

/// Holds the system allocator's compaction limit for one checkpoint.
struct SystemLimit<'a>(&'a Arc<Mutex<crate::pager::alloc::CfAllocator>>);

impl<'a> SystemLimit<'a> {
    fn set(alloc: &'a Arc<Mutex<crate::pager::alloc::CfAllocator>>, limit: u64) -> Self {
        debug_assert!(limit > 2, "a compaction limit inside the superblocks");
        alloc.lock().set_limit(Some(limit));
        SystemLimit(alloc)
    }
}

impl Drop for SystemLimit<'_> {
    fn drop(&mut self) {
        self.0.lock().set_limit(None);
    }
}

/// The CFs to checkpoint and the snapshot of each.
fn plan(
    cfs: &[Arc<CfShared>],
    db: &crate::txn::DbVersion,
    extra: Vec<(Arc<CfShared>, Arc<CfVersion>)>,
) -> Vec<Plan> {
    let mut plans = Vec::new();
    for cf in cfs {
        let mut snapshot = match extra.iter().find(|(x, _)| x.id == cf.id) {
            Some((_, v)) => v.clone(),
            None => match db.get(cf.id) {
                Some(v) => v.clone(),
                // Registered a moment ago: not in this snapshot yet; its
                // base LSN keeps the log from being released past it.
                None => continue,
            },
        };
        let base_version = cf.base.lock().version;
        if snapshot.tree_base.version < base_version {
            // The database-wide snapshot is updated just after a CF's own
            // version is published (`note_published`, multi-CF commits):
            // if the CF has published its direct commit already, plan it
            // from that. A cut or a pool checks the CF's own version, so
            // skipping it here left its changed extents out of this
            // checkpoint (its descriptor on disk then disagreed with the
            // extent map written here: a file a kill left did not open).
            if cf.base_ahead_of_published() {
                // Not published yet: this snapshot is behind the base,
                // and writing it would take the commit back out. Its
                // extents must not have changed since the direct
                // commit's checkpoint wrote its descriptor: a cut or a
                // pool leaves such a CF alone (`cut_tail`,
                // `pool_free_space`), and its writer lock keeps every
                // other allocation out until it publishes.
                debug_assert!(
                    !cf.extents_changed.load(Ordering::Acquire),
                    "a checkpoint skips CF {:?} with changed extents",
                    cf.id
                );
                continue;
            }
            snapshot = cf.current.load_full();
        }
        let cut = cf.extents_changed.load(Ordering::Acquire);
        if snapshot.tree_base.version > base_version || cut {
            plans.push(Plan {
                cf: cf.clone(),
                snapshot,
                extents: Vec::new(),
                spilled: Vec::new(),
            });
        }
    }
    plans
}

/// The lowest WAL position a recovery may need after this checkpoint:
/// the end of the checkpointed version of every CF that has later commits;
/// a CF whose latest commit is in its (new) base does not pin the log,
/// whether or not a write transaction is open on it (design.md §6.6).
///
/// `log_end` was sampled before this call, so every record appended
/// before it has been installed as its CF's head by the time the CF's
/// commit gate is taken here (append and install happen under the gate),
/// and every record appended after it starts at or after `log_end`.
///
/// Never below `prev` (the replay start of the current superblock): a CF
/// that was idle at an earlier checkpoint has no record between its base
/// and that checkpoint's replay start, so it needs the log only from
/// there on. Ordering rule O3: the replay start never moves backwards.
fn replay_floor(cfs: &[Arc<CfShared>], plans: &[Plan], log_end: Lsn, prev: Lsn) -> Lsn {
    assert!(
        log_end >= prev,
        "the log end {log_end:?} is below the replay start {prev:?}"
    );
    let mut floor = log_end;
    for cf in cfs {
        let (base_version, base_lsn) = match plans.iter().find(|p| p.cf.id == cf.id) {
            Some(p) => (p.snapshot.tree_base.version, p.snapshot.tree_base.lsn),
            None => {
                let b = *cf.base.lock();
                (b.version, b.lsn)
            }
        };
        // A CF pins the log from its tree base while anything it holds is
        // not in its trees: later commits, or (after a fold made aside)
        // buffered commits carried over at the head itself.
        let buffered = cf.current.load().buffer.entries() > 0;
        if cf.head_version_settled() != base_version || buffered {
            floor = floor.min(base_lsn.max(prev));
        }
    }
    assert!(floor >= prev, "O3: the replay start moved backwards");
    assert!(floor <= log_end, "the replay start passed the log end");
    floor
}

/// Collects the dirty runs of a CF's catalog tree and of every table tree.
fn collect_cf_dirty(
    store: &ReadPages,
    catalog: &TreeRoot,
    dirty: &IdMap<PageId, u32>,
    out: &mut Vec<(PageId, PageRef)>,
) -> Result<()> {
    let is_dirty = |id: PageId| dirty.contains_key(&id);
    btree::collect_dirty(store, catalog, &is_dirty, out)?;
    let mut cursor = btree::Cursor::new(catalog, Bound::Unbounded, Bound::Unbounded);
    while let Some((_, v)) = cursor.next(store)? {
        let meta = TableMeta::decode(v.as_slice())?;
        let root = TreeRoot {
            root: meta.root,
            len: meta.len,
        };
        btree::collect_dirty(store, &root, &is_dirty, out)?;
    }
    Ok(())
}

/// The CFs of `published` whose buffer still holds a commit of the
/// version recorded there or an older one, or whose fold in rounds is
/// half done (a fold that another thread began covers only the versions
/// published when it began).
fn behind(published: &[(Arc<CfShared>, Version)]) -> Vec<Arc<CfShared>> {
    let is_behind = |cf: &CfShared, v: Version| {
        let cur = cf.current.load();
        let old_commits = (cur.buffer.versions()).is_some_and(|(oldest, _)| oldest <= v);
        cf.check_live().is_ok() && (cur.fold.is_some() || old_commits)
    };
    (published.iter())
        .filter(|(cf, v)| is_behind(cf, *v))
        .map(|(cf, _)| cf.clone())
        .collect()
}

#[cfg(test)]
mod plan_tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::plan;
    use crate::db::Database;
    use crate::storage::mem::MemVfs;
    use crate::table::types::TableDefinition;

    const T: TableDefinition<u64, u64> = TableDefinition::new("t");

    /// The database-wide snapshot a checkpoint samples is updated just
    /// after a CF publishes its own version. A checkpoint in between saw
    /// the CF's snapshot behind its base, took that for an unpublished
    /// direct commit and skipped the CF, though a compaction step had
    /// changed its extents (checking the CF's own published version):
    /// its descriptor on disk then disagreed with the extent map written.
    /// A lagging database-wide snapshot is made here by keeping an old one.
    #[test]
    fn a_cf_published_ahead_of_the_database_snapshot_is_planned() {
        let db = Database::builder()
            .background_checkpoints(false)
            .create_with_vfs(Arc::new(MemVfs::new()), "p.sheaf")
            .unwrap();
        let lagging = db.shared.registry.snapshot.load_full();
        let tx = db.begin_write().unwrap();
        tx.open_table(T).unwrap().insert(1, 2).unwrap();
        tx.commit().unwrap();
        db.checkpoint().unwrap();
        let cfs: Vec<_> = db.shared.registry.cfs.read().values().cloned().collect();
        assert_eq!(cfs.len(), 1, "the default CF alone");
        let cf = &cfs[0];
        let base = cf.base.lock().version;
        assert!(
            lagging.get(cf.id).unwrap().tree_base.version < base,
            "the kept snapshot does not lag the base: the test proves nothing"
        );
        assert!(!cf.base_ahead_of_published());
        // What a compaction step beside it leaves.
        cf.extents_changed.store(true, Ordering::Release);
        let plans = plan(&cfs, &lagging, Vec::new());
        assert_eq!(plans.len(), 1, "the CF with changed extents was skipped");
        assert!(plans[0].snapshot.tree_base.version >= base);
        db.checkpoint().unwrap();
        db.check_integrity().unwrap();
    }
}
