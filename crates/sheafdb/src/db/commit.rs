//! The commit path (design.md §4).
//!
//! A logged commit: (a) append the transaction's logical record to the WAL
//! (one short critical section, assigns the LSN); make the new version the
//! CF's head, hand its pages to the allocator as committed and keep them in
//! memory as dirty; queue it for publication — all under the CF's writer
//! lock, so queue order is LSN order; (b) release the writer lock (early
//! lock release); (c) wait as the durability mode says (group commit for
//! `Immediate`); (d) publish in LSN order and return.
//!
//! A transaction whose record would exceed `wal_record_max_bytes` (or a
//! WAL segment) commits by a *direct checkpoint* of its CF instead: it
//! keeps the writer lock, waits until every earlier version of the CF is
//! published, writes the CF's dirty pages and a new superblock, then
//! publishes. Either way the effect is atomic.
//!
//! Any failed WAL write or sync poisons the database (design.md §4.1).

use std::sync::Arc;

use super::budget::Reserved;
use super::DbShared;
use crate::error::{Error, PoisonCause, Result};
use crate::format::page::PageBytes as _;
use crate::pager::alloc::ReclaimBatch;
use crate::txn::{
    CfShared, CfVersion, Durability, FoldCarry, FoldMark, FoldProgress, KeyIndex, WriteState,
    WriterGuard, WriterSlot, ROUND_BATCH,
};
use crate::types::{CfId, Lsn, PageId, Version};
use crate::wal::record::Op;

/// What [`DbShared::fold_cf`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fold {
    /// The CF's published buffer is folded (or was empty, or the fold was
    /// overtaken by a tree commit that folded it).
    Done,
    /// A round was committed; more rounds are due after a checkpoint.
    Round,
    /// Nothing was done now (writer busy, another fold running, a
    /// compaction's limit): a later checkpoint folds.
    Busy,
    /// Nothing was done now: the round would have grown the file while
    /// pages it could reuse wait for snapshots (only with
    /// [`Patience::WaitForSnapshots`]); the checkpointer retries when
    /// they are released.
    Deferred,
}

/// What one pass of fold rounds over several CFs left to do.
#[derive(Debug, Default)]
pub(crate) struct FoldPass {
    /// CFs that committed a round and have rounds left (after a
    /// checkpoint).
    pub more: Vec<Arc<CfShared>>,
    /// CFs whose round was deferred ([`Fold::Deferred`]).
    pub deferred: Vec<Arc<CfShared>>,
}

/// What a fold round short of free space does (design.md "Fold rounds",
/// *Waiting for snapshots*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Patience {
    /// Take new space (grow the file) rather than wait: explicit
    /// checkpoints, close, compaction, writers stalled on the buffer.
    Grow,
    /// The background checkpointer with buffers under the stall mark:
    /// if pages freed earlier wait only for snapshots (or for the next
    /// checkpoint), defer the round rather than grow the file.
    WaitForSnapshots,
}

/// A version queued for publication whose committer has not resolved it
/// yet. Every path out of a commit resolves it: published, or failed (the
/// database is then poisoned). If the committer unwinds (a panic) before
/// that, dropping the guard fails the version, so no later committer of
/// the CF waits forever behind it (issue 9 point 6).
struct Unpublished<'a> {
    db: &'a DbShared,
    cf: Arc<CfShared>,
    version: Arc<CfVersion>,
    armed: bool,
}

impl<'a> Unpublished<'a> {
    fn new(db: &'a DbShared, cf: &Arc<CfShared>, version: Arc<CfVersion>) -> Self {
        Unpublished {
            db,
            cf: cf.clone(),
            version,
            armed: true,
        }
    }

    /// Publishes (in LSN order, waiting for earlier versions) once the
    /// commit is as durable as promised; fails it if `durable` is an error.
    fn publish(mut self, durable: Result<()>) -> Result<()> {
        self.armed = false;
        let db = self.db;
        let id = self.cf.id;
        if let Err(e) = durable {
            // The committer gets its own error; the waiters behind it get
            // the first cause, which may be another's (README: `Poisoned`
            // carries the first failure).
            let first = Err(Error::Poisoned(db.health.poison(&e)));
            self.cf.mark(self.version.version, &first, None, &|_| {});
            return Err(e);
        }
        self.cf
            .publish(self.version.version, Ok(()), Some(db.wal().marks()), &|v| {
                db.note_published(id, v)
            })
    }

    /// Marks a commit that has nothing to wait for (`Durability::None`)
    /// ready and publishes what it can, without waiting: called under the
    /// writer lock, so the next writer's commit never finds this one still
    /// unmarked at the front of the queue and sleeps until this thread is
    /// scheduled again (with more committers than cores that was most of
    /// their context switches). Returns what the caller waits on after
    /// releasing the lock: versions before this one (an `Immediate` commit
    /// waiting for its sync) are still published first.
    fn ready_now(mut self) -> Ready {
        self.armed = false;
        let db = self.db;
        let id = self.cf.id;
        let version = self.version.version;
        self.cf
            .mark(version, &Ok(()), Some(db.wal().marks()), &|v| {
                db.note_published(id, v)
            });
        Ready {
            cf: self.cf.clone(),
            version,
        }
    }

    /// Fails the version with `e` (poisoning the database) and returns `e`.
    fn fail(self, e: Error) -> Error {
        let _ = self.publish(Err(e.clone_for_waiters()));
        e
    }
}

/// A version marked ready under the writer lock ([`Unpublished::ready_now`]).
#[must_use = "the commit returns once its version is published"]
struct Ready {
    cf: Arc<CfShared>,
    version: Version,
}

impl Ready {
    fn wait(self) -> Result<()> {
        self.cf.wait_published(self.version)
    }
}

impl Drop for Unpublished<'_> {
    fn drop(&mut self) {
        if self.armed {
            let cause = PoisonCause::new(format!(
                "a commit of cf {} stopped between its WAL append and its publication{}",
                self.cf.id,
                if std::thread::panicking() {
                    " (panic)"
                } else {
                    ""
                }
            ));
            // The first cause wins (another failure may have poisoned
            // the database first: this commit then stopped because of it);
            // waiters behind this version get that one.
            let first = self.db.health.poison_with(cause);
            let _ = self.cf.publish(
                self.version.version,
                Err(Error::Poisoned(first)),
                None,
                &|_| {},
            );
        }
    }
}

impl DbShared {
    /// Commits `st` (the transaction's state, its writes applied to its
    /// trees) on `cf`, with `payload` its finished WAL record (`None`: too
    /// large to log).
    pub(crate) fn commit(
        self: &Arc<Self>,
        cf: &Arc<CfShared>,
        st: &mut WriteState,
        lock: WriterGuard,
        durability: Durability,
        payload: Option<Vec<u8>>,
    ) -> Result<()> {
        let _open = self.health.enter_commit()?;
        self.commit_trees(cf, st, lock, durability, payload)
    }

    /// [`DbShared::commit`] without the close gate: for the engine's own
    /// commits (folds), which may run while the database closes.
    fn commit_trees(
        self: &Arc<Self>,
        cf: &Arc<CfShared>,
        st: &mut WriteState,
        lock: WriterGuard,
        durability: Durability,
        payload: Option<Vec<u8>>,
    ) -> Result<()> {
        // Frees decided by file contents are checked before anything is
        // logged: a corrupt tree fails this commit, not the process.
        st.pages.check_frees()?;
        let version = st.base.version.next();
        let max_record = self.wal().options().max_record_bytes;
        let logged = payload.filter(|p| {
            (p.len() as u64) <= max_record && !self.writes_once(st, durability, p.len())
        });
        let result = match logged {
            Some(p) => self.commit_logged(cf, st, lock, durability, &p, version),
            None => self.commit_direct(cf, st, lock, version),
        };
        let end = result?;
        self.ckpt.after_commit(end);
        Ok(())
    }

    /// True if a commit in `durability` with a record of `record_len`
    /// bytes may be written once (design.md "Commit", *Written once*):
    /// an `Immediate` one (a direct commit syncs the data file, and a
    /// `None` or `Eventual` commit was promised no wait for a sync) of
    /// at least `direct_commit_bytes`.
    pub(crate) fn may_write_once(&self, durability: Durability, record_len: usize) -> bool {
        durability == Durability::Immediate && record_len >= self.options.direct_commit_bytes
    }

    /// True if `st`, with a record of `record_len` bytes, commits by a
    /// direct checkpoint to be written once: it may
    /// ([`DbShared::may_write_once`]), and the pages it wrote take no
    /// more than twice its record's bytes (logged, its data would be
    /// written twice: to the WAL now, to the data file at the next
    /// checkpoint).
    fn writes_once(&self, st: &WriteState, durability: Durability, record_len: usize) -> bool {
        let page = self.space.pager.page_size() as u64;
        self.may_write_once(durability, record_len)
            && st.pages.private_pages().saturating_mul(page) <= 2 * record_len as u64
    }

    /// True if a transaction whose writes charge `charge` bytes to a
    /// buffer is small enough to commit into one: at most
    /// `txn_spill_bytes` (the bound a table's pending writes spill past,
    /// counted here with the buffer's own overheads). A larger one writes
    /// its trees at commit, each leaf once in key order, whatever room
    /// the budget has: buffered, it would start a fold at once that does
    /// the same work later, in rounds beside the snapshots open then, and
    /// hold the memory meanwhile (design.md "Memory bound", *Too large to
    /// buffer*).
    pub(crate) fn bufferable_charge(&self, charge: u64) -> bool {
        charge <= self.options.txn_spill_bytes
    }

    /// Commits `st` without touching a page: its WAL record `payload` is
    /// appended and its write set inserted into the CF's buffer at the new
    /// version (design.md "Write buffer"). Publication, durability waits,
    /// early lock release and poisoning are those of a logged commit.
    pub(crate) fn commit_buffered(
        self: &Arc<Self>,
        cf: &Arc<CfShared>,
        st: &mut WriteState,
        mut lock: WriterGuard,
        durability: Durability,
        payload: &[u8],
        reserved: Reserved<'_>,
    ) -> Result<()> {
        let _open = self.health.enter_commit()?;
        let version = st.base.version.next();
        let gate = cf.commit_gate.lock();
        let (_, end) = self.wal().append(payload)?;
        let v = install_buffered(cf, st, &mut lock, version, end, KeyIndex::Build);
        reserved.keep();
        let buffered_bytes = v.buffer.bytes();
        let pending = Unpublished::new(self, cf, v);
        drop(gate);
        self.release_and_publish(pending, lock, end, durability)?;
        self.ckpt.after_commit(end);
        if buffered_bytes >= self.options.buffer_fold_bytes || self.budget.over_fold_total() {
            // The background checkpointer folds aside while writers go on.
            self.ckpt.request();
        }
        Ok(())
    }

    fn commit_logged(
        self: &Arc<Self>,
        cf: &Arc<CfShared>,
        st: &mut WriteState,
        mut lock: WriterGuard,
        durability: Durability,
        payload: &[u8],
        version: Version,
    ) -> Result<Lsn> {
        let gate = cf.commit_gate.lock();
        // A failed append changes nothing (the WAL poisons itself if its
        // I/O failed); the caller rolls the transaction back.
        let (_, end) = self.wal().append(payload)?;
        let v = self.install_version(cf, st, &mut lock, version, end);
        let pending = Unpublished::new(self, cf, v);
        drop(gate);
        self.release_and_publish(pending, lock, end, durability)?;
        Ok(end)
    }

    /// The end of a logged commit: releases the writer lock (early lock
    /// release), waits for the durability `durability` promises, then
    /// publishes in LSN order. A `Durability::None` commit, which waits
    /// for nothing, is marked ready before the lock is released
    /// ([`Unpublished::ready_now`]).
    fn release_and_publish(
        &self,
        pending: Unpublished<'_>,
        lock: WriterGuard,
        end: Lsn,
        durability: Durability,
    ) -> Result<()> {
        if durability == Durability::None {
            let ready = pending.ready_now();
            drop(lock);
            return ready.wait();
        }
        pending.cf.await_log(
            pending.version.version,
            end,
            durability == Durability::Immediate,
        );
        drop(lock);
        let durable = self.wait_durability(end, durability);
        pending.publish(durable)
    }

    fn commit_direct(
        self: &Arc<Self>,
        cf: &Arc<CfShared>,
        st: &mut WriteState,
        mut lock: WriterGuard,
        version: Version,
    ) -> Result<Lsn> {
        // A direct commit checkpoints, which needs locks an integrity
        // check holds across its progress callback: refused there before
        // anything is installed (after the install, a failure poisons).
        super::integrity::refuse_inside_callback("a commit too large for the WAL")?;
        // Earlier versions of this CF go first: make them durable and wait
        // until they are published.
        self.wal().sync().inspect_err(|e| self.poison(e))?;
        cf.wait_publication(None, &|| self.health.check_writable())?;
        // No record of this CF can be appended while we hold its lock, so
        // replay of this CF may resume at the current end of the log.
        let lsn = self.wal().next_lsn();
        let v = self.install_version(cf, st, &mut lock, version, lsn);
        let pending = Unpublished::new(self, cf, v.clone());
        // From here on the head is ahead of the file: any failure poisons.
        if let Err(e) = self.checkpoint_including(vec![(cf.clone(), v)]) {
            return Err(pending.fail(e));
        }
        let published = pending.publish(Ok(()));
        drop(lock);
        published.map(|()| lsn)
    }

    /// Folds `cf`'s published buffered commits into its trees *aside*, in
    /// rounds (design.md "Fold rounds"): the trees are built from the
    /// published version without any lock writers need, while they keep
    /// committing into the buffer; then, holding the writer lock briefly
    /// (waiting at most 50 ms for a transaction), a fold version is
    /// committed (an empty WAL record). A round stops once it holds the
    /// page budget of [`DbShared::round_budget`]: its version keeps the
    /// buffer, records how far the rounds got, and replay of its trees
    /// still resumes where it did before the first round; the last round's
    /// version holds the folded versions in its trees and the commits made
    /// meanwhile in a new buffer. Between rounds a checkpoint makes the
    /// pages the last round replaced reusable, so a fold of a large buffer
    /// needs free space for one round, not for a copy of every leaf.
    ///
    /// `Busy` if the writer stayed busy, another thread folds this CF, or a
    /// compaction limits its allocator (the work is discarded; the
    /// buffered commits stay in the WAL, a later checkpoint folds them).
    ///
    /// `Deferred` (with [`Patience::WaitForSnapshots`] only) if the round
    /// would have grown the file while freed pages wait for snapshots.
    pub(crate) fn fold_cf(
        self: &Arc<Self>,
        cf: &Arc<CfShared>,
        patience: Patience,
    ) -> Result<Fold> {
        if cf.check_live().is_err() || cf.current.load().buffer.entries() == 0 {
            return Ok(Fold::Done);
        }
        let Some(_mark) = self.fold_mark(cf, patience) else {
            return Ok(Fold::Busy); // another thread is folding this CF
        };
        // Loaded under the mark: no round of another thread is in flight.
        let folded = cf.current.load_full();
        if cf.check_live().is_err() || folded.buffer.entries() == 0 {
            return Ok(Fold::Done);
        }
        self.health.check_writable()?;
        let progress = FoldProgress::of(&folded);
        let Some(budget) = self.round_budget(cf, patience) else {
            return Ok(Fold::Deferred);
        };
        let log_max = Some(self.options.wal_record_max_bytes);
        let mut st = WriteState::new(self.space.clone(), cf, folded.clone(), log_max);
        let built = (st.fold_round(progress.upto, &progress.cursor, budget))
            .and_then(|o| st.flush_tables().map(|()| o));
        // The last round's new buffer: the commits published so far are
        // copied before the writer lock is taken.
        let early = match &built {
            Ok(o) if o.next.is_none() => Some(FoldCarry::start_rest(
                &folded.buffer,
                progress.upto,
                cf.current.load().version,
            )),
            _ => None,
        };
        let (outcome, lock) =
            match built.and_then(|o| Ok((o, cf.lock_writer_within(FOLD_LOCK_WAIT)?))) {
                Ok(x) => x,
                // Busy writer, or a compaction limits this CF's allocator right
                // now (allocation never does I/O: `StorageFull` here is that
                // limit): give up, a later checkpoint folds.
                Err(Error::WriterBusy(_) | Error::WouldDeadlock(_)) => {
                    st.pages.rollback();
                    // A request the buffer's tombstone walks made is not
                    // made again by them: they ask again once they pass
                    // the mark anew (design.md "Tombstone walks").
                    folded.buffer.rearm_walked();
                    return Ok(Fold::Busy);
                }
                Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::StorageFull => {
                    st.pages.rollback();
                    return Ok(Fold::Busy);
                }
                Err(e) => {
                    st.pages.rollback();
                    return Err(e);
                }
            };
        let head = lock.head.clone();
        let same_round = match (&head.fold, &folded.fold) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if cf.check_live().is_err() || !Arc::ptr_eq(&head.buffer, &folded.buffer) || !same_round {
            // The CF was dropped (under this lock), or a tree commit
            // replaced the trees meanwhile.
            st.pages.rollback();
            return Ok(Fold::Done);
        }
        debug_assert_eq!(head.catalog, folded.catalog, "trees changed under a fold");
        let last = outcome.next.is_none();
        if last {
            // 15.2: the rounds changed each table's count by what the
            // folded versions' deltas say (else the trees and the buffer
            // disagree: a tree the file damaged).
            if let Err(e) = progress.check_complete(&outcome.changes) {
                st.pages.rollback();
                return Err(e);
            }
        }
        if !last {
            // Trees ahead of their durable base from here on: replay over
            // such a base looks keys up instead of using count changes.
            st.log(&Op::FoldRound {
                upto: progress.upto_lsn,
            });
        }
        let early_entries = early.as_ref().map_or(0, |(b, _)| b.entries());
        let carry = FoldCarry::round(&head, progress, &outcome.changes, outcome.next, early);
        if last {
            let [before, under] = &self.carried;
            before.fetch_add(early_entries, std::sync::atomic::Ordering::Relaxed);
            under.fetch_add(
                carry.buffer.entries() - early_entries,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        st.carry = Some(carry);
        st.base = head;
        let payload = st.finish_log().inspect_err(|_| st.pages.rollback())?;
        let logged = (payload.as_ref())
            .is_some_and(|p| p.len() as u64 <= self.wal().options().max_record_bytes);
        if !last && !logged {
            // Committed directly, this round's trees would be durable with
            // no `FoldRound` marker for replay to see. Never with a record
            // limit of at least `MIN_WAL_RECORD_BYTES`.
            debug_assert!(false, "a fold round's marker record did not fit the WAL");
            st.pages.rollback();
            return Ok(Fold::Busy);
        }
        let result = self.commit_trees(cf, &mut st, lock, Durability::None, payload);
        if result.is_err() {
            st.pages.rollback();
        }
        result.map(|()| if last { Fold::Done } else { Fold::Round })
    }

    /// The mark that makes this thread `cf`'s only folder. Another
    /// thread's fold (the background checkpointer's) makes a patient
    /// caller give up at once; a caller that must fold (`Patience::Grow`:
    /// an explicit checkpoint, close, compaction, a stalled writer) waits
    /// for it, at most [`FOLD_MARK_WAIT`]: otherwise `checkpoint()` could
    /// return with the buffer unfolded, and compaction would repack a
    /// half-folded CF (which needs room for the rest of the fold besides
    /// the packed copy).
    fn fold_mark<'c>(&self, cf: &'c CfShared, patience: Patience) -> Option<FoldMark<'c>> {
        let start = std::time::Instant::now();
        loop {
            if let Some(mark) = cf.begin_fold() {
                return Some(mark);
            }
            if patience == Patience::WaitForSnapshots || start.elapsed() >= FOLD_MARK_WAIT {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Pages a fold round of `cf` may hold before it stops: the free space
    /// it can allocate without growing the file (its own free pages and
    /// the unowned extents, less a margin). Where that is less than a
    /// sixteenth of the CF's pages in use (at least 64): a round of what
    /// is free if that is at least a sixty-fourth of them (at least 256
    /// pages); else, with [`Patience::WaitForSnapshots`], `None` (defer)
    /// if freed pages wait for snapshots or a checkpoint (even at the
    /// buffers' stall mark, where writers fold themselves); else the
    /// sixteenth, growing the file
    /// (so a fold takes at most about sixteen rounds).
    /// `Builder::fold_round_pages` (tests) fixes the size of every round,
    /// without margin, and keeps the rule for deferring.
    pub(crate) fn round_budget(&self, cf: &CfShared, patience: Patience) -> Option<u64> {
        let (free, used, waiting) = {
            let mut a = cf.alloc.lock();
            let (pinned, checkpoint) = a.waiting_pages();
            let total: u64 = a.extents().iter().map(|e| e.pages).sum();
            let free = a.free_set().pages();
            (free, total.saturating_sub(free), pinned + checkpoint)
        };
        let pool = self.space.extents.lock().free_pages();
        let fixed = self.options.fold_round_pages.map(|p| p.max(1));
        // A round stops after the batch that reaches its budget, and a
        // batch may copy two pages per key: the margin keeps that last
        // batch inside the free space, so a round that could fit in it
        // never makes the CF take a new extent.
        let margin = match fixed {
            Some(_) => 0,
            None => 2 * ROUND_BATCH as u64,
        };
        let avail = (free + pool).saturating_sub(margin);
        let (full, smaller) = match fixed {
            Some(p) => (p, p),
            None => ((used / 16).max(64), (used / 64).max(256)),
        };
        if avail >= full {
            return Some(fixed.unwrap_or(avail));
        }
        if avail >= smaller {
            return Some(avail);
        }
        // Waits even at the buffers' stall mark: a writer that begins
        // there folds itself (`Patience::Grow`), so memory stays bounded.
        // Growing the file first would only spare writers a stall that
        // may never come, at the cost of a copy of every leaf the fold
        // replaces while a snapshot (a backup) pins the old ones.
        let wait = patience == Patience::WaitForSnapshots && waiting > 0;
        (!wait).then_some(full)
    }

    /// One fold round of every CF (see [`DbShared::fold_cf`]); returns
    /// the CFs that have rounds left (the caller checkpoints, then calls
    /// [`DbShared::fold_rounds`] with them).
    pub(crate) fn fold_all(self: &Arc<Self>, patience: Patience) -> Result<FoldPass> {
        let cfs: Vec<Arc<CfShared>> = self.registry.cfs.read().values().cloned().collect();
        self.fold_rounds(cfs, patience)
    }

    /// One fold round of each of `cfs`; returns those with rounds left
    /// and those deferred. A CF whose fold ended is not folded again here:
    /// with writers committing meanwhile there would always be a new
    /// buffer to fold, and a checkpoint looping on them would never end.
    pub(crate) fn fold_rounds(
        self: &Arc<Self>,
        cfs: Vec<Arc<CfShared>>,
        patience: Patience,
    ) -> Result<FoldPass> {
        let mut pass = FoldPass::default();
        for cf in cfs {
            match self.fold_cf(&cf, patience)? {
                Fold::Round => pass.more.push(cf),
                Fold::Deferred => pass.deferred.push(cf),
                Fold::Done | Fold::Busy => {}
            }
        }
        Ok(pass)
    }

    /// Folds `cf` to the end: round, checkpoint, round, … (the checkpoints
    /// make the pages each round replaced reusable by the next).
    pub(crate) fn fold_cf_fully(self: &Arc<Self>, cf: &Arc<CfShared>) -> Result<Fold> {
        loop {
            match self.fold_cf(cf, Patience::Grow)? {
                Fold::Round => self.checkpoint_including(Vec::new())?,
                done_or_busy => return Ok(done_or_busy),
            }
        }
    }

    /// Before a write transaction: at the buffer stall mark (¾ of the
    /// database-wide limit) the writer folds the largest buffers itself,
    /// until the total is back under the fold trigger or a pass frees
    /// nothing (every large buffer's writer busy, and no other fold ends
    /// within [`STALL_POLL`]). It never waits on a busy CF for long, and
    /// B1 holds regardless: a commit that would pass the limit writes its
    /// trees instead of buffering.
    pub(crate) fn stall_if_buffered(self: &Arc<Self>) -> Result<()> {
        if !self.budget.over_stall_mark() {
            return Ok(());
        }
        self.budget.note_stall();
        while self.budget.over_fold_total() {
            let before = self.budget.used();
            for cf in self.largest_buffers() {
                self.fold_cf_fully(&cf)?;
                if !self.budget.over_fold_total() {
                    return Ok(());
                }
            }
            if self.budget.used() >= before {
                self.budget.wait_release(STALL_POLL);
                if self.budget.used() >= before {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Live CFs with buffered commits, largest buffer first.
    fn largest_buffers(&self) -> Vec<Arc<CfShared>> {
        let mut cfs: Vec<(u64, Arc<CfShared>)> = (self.registry.cfs.read().values())
            .map(|cf| (cf.current.load().buffer.bytes(), cf.clone()))
            .filter(|(bytes, _)| *bytes > 0)
            .collect();
        cfs.sort_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
        cfs.into_iter().map(|(_, cf)| cf).collect()
    }

    /// Commits a multi-CF transaction: one WAL record with a part per CF
    /// (or one checkpoint of all of them if too large), then publication in
    /// every CF and the database-wide snapshot at once. Buffered in every
    /// CF when each part could be (see [`DbShared::commit_buffered`]);
    /// otherwise every part folds its CF's buffer and writes its trees. The writer locks
    /// are held until then, so no later commit of these CFs can interleave.
    pub(crate) fn commit_multi(
        self: &Arc<Self>,
        locked: &mut [(Arc<CfShared>, WriterGuard)],
        states: &mut [&mut WriteState],
        durability: Durability,
    ) -> Result<()> {
        let _open = self.health.enter_commit()?;
        let mut payloads = Vec::with_capacity(states.len());
        for st in states.iter_mut() {
            payloads.push(st.finish_log()?);
        }
        let merged = crate::wal::record::merge_payloads(&payloads);
        let logged = merged
            .as_ref()
            .is_some_and(|p| p.len() as u64 <= self.wal().options().max_record_bytes);
        if !logged {
            // As in `commit_direct`: refused before anything is installed.
            super::integrity::refuse_inside_callback("a commit too large for the WAL")?;
        }
        // Buffered in every CF, or the trees are written in every CF.
        let total: u64 = states
            .iter()
            .map(|st| st.buffer_charge(KeyIndex::Build))
            .sum();
        let bufferable = logged
            && self.bufferable_charge(total)
            && states.iter().all(|st| !st.needs_tree_commit());
        let reserved = bufferable.then(|| self.budget.reserve(total)).flatten();
        let buffered = reserved.is_some();
        if !buffered {
            for st in states.iter_mut() {
                let written = st
                    .fold_base()
                    .and_then(|()| st.apply_writes())
                    .and_then(|()| st.flush_tables())
                    .and_then(|()| st.pages.check_frees());
                written.map_err(|e| st.fail(e))?;
            }
        }
        if !logged {
            self.wal().sync().inspect_err(|e| self.poison(e))?;
        }
        // Gates in ascending CfId order (`locked` is sorted), held from the
        // append until every part is installed.
        let gate_cfs: Vec<Arc<CfShared>> = locked.iter().map(|(cf, _)| cf.clone()).collect();
        debug_assert!(gate_cfs.windows(2).all(|w| w[0].id < w[1].id));
        let gates: Vec<_> = gate_cfs.iter().map(|cf| cf.commit_gate.lock()).collect();
        let end = match merged.filter(|_| logged) {
            Some(payload) => self.wal().append(&payload)?.1,
            None => self.wal().next_lsn(),
        };
        let mut versions = Vec::with_capacity(states.len());
        let mut pending = Vec::with_capacity(states.len());
        for ((cf, lock), st) in locked.iter_mut().zip(states.iter_mut()) {
            let version = st.base.version.next();
            let v = if buffered {
                install_buffered(cf, st, lock, version, end, KeyIndex::Build)
            } else {
                self.install_version(cf, st, lock, version, end)
            };
            pending.push(Unpublished::new(self, cf, v.clone()));
            versions.push((cf.clone(), v));
        }
        if let Some(r) = reserved {
            r.keep(); // the parts are in their buffers
        }
        drop(gates);
        let durable = if logged {
            self.wait_durability(end, durability)
        } else {
            self.checkpoint_including(versions.clone())
        };
        if let Err(e) = durable {
            self.poison(&e);
            for p in pending {
                let _ = p.fail(e.clone_for_waiters());
            }
            return Err(e);
        }
        // Earlier commits of these CFs (which released their locks early)
        // publish first. (We hold their writer locks: once ours is at the
        // front it stays.) A failure here leaves the guards armed: they
        // fail the versions and poison.
        for (cf, v) in &versions {
            cf.wait_publication(Some(v.version), &|| self.health.check_writable())?;
        }
        for p in &mut pending {
            p.armed = false;
        }
        for (cf, v) in &versions {
            cf.publish_alone(v);
        }
        let updates: Vec<(CfId, Option<Arc<CfVersion>>)> = versions
            .iter()
            .map(|(cf, v)| (cf.id, Some(v.clone())))
            .collect();
        self.registry
            .snapshot
            .rcu(|old| Arc::new(old.with(&updates)));
        self.ckpt.after_commit(end);
        Ok(())
    }

    /// Makes `v` the version of `cf` in the database-wide snapshot.
    pub(crate) fn note_published(&self, cf: CfId, v: &Arc<CfVersion>) {
        self.registry
            .snapshot
            .rcu(|old| Arc::new(old.with(&[(cf, Some(v.clone()))])));
    }

    /// Waits until the log up to `end` is as durable as `durability`
    /// promises (group commit for `Immediate`). A failure poisons.
    pub(crate) fn wait_durability(&self, end: Lsn, durability: Durability) -> Result<()> {
        let end = end.min(self.wal().next_lsn());
        let r = match durability {
            Durability::Immediate => self.wal().wait_durable(end),
            Durability::Eventual => self.wal().wait_written(end),
            Durability::None => Ok(()),
        };
        if let Err(e) = &r {
            self.poison(e);
        }
        r
    }

    /// Turns a transaction's state into a committed version: the CF's new
    /// head, its pages committed in the allocator and kept as dirty in the
    /// cache, the base version's reclaim batch sealed, queued for
    /// publication. Called under the writer lock.
    pub(crate) fn install_version(
        &self,
        cf: &CfShared,
        st: &mut WriteState,
        slot: &mut WriterSlot,
        version: Version,
        lsn: Lsn,
    ) -> Arc<CfVersion> {
        debug_assert!(
            Arc::ptr_eq(&slot.head, &st.base),
            "transaction not based on the head"
        );
        debug_assert!(
            lsn >= slot.head.lsn,
            "design.md §11.6: a CF's LSNs must not go backwards"
        );
        let ps = self.space.pager.page_size();
        let runs = st.pages.private_runs();
        let freed = st.pages.take_freed();
        self.space.pager.install_dirty(&runs);
        let allocated: Vec<(PageId, u32)> = runs
            .iter()
            .map(|(id, p)| (*id, (p.len() / ps) as u32))
            .collect();
        let batch = {
            let mut a = cf.alloc.lock();
            a.commit(version, &allocated, &freed);
            ReclaimBatch::new(a.released_sink())
        };
        st.base.batch.seal(freed, batch.clone());
        st.pages.mark_committed();
        // The trees now hold every buffered commit too (the transaction
        // folded them, or there were none).
        debug_assert!(
            st.folded || st.base.buffer.entries() == 0,
            "a tree commit over unfolded buffered commits"
        );
        let nudge = self.fold_nudge.clone();
        let mut v = CfVersion::of_trees(version, st.catalog, st.next_table, lsn, batch, nudge);
        if let Some(carry) = st.carry.take() {
            // A fold made aside: the commits after the folded version stay
            // buffered, and replay of these trees resumes after it.
            assert!(carry.tree_lsn <= lsn, "a fold's trees end past its record");
            v.buffer = carry.buffer;
            v.deltas = carry.deltas;
            v.tree_base.lsn = carry.tree_lsn;
            v.fold = carry.fold;
            // A fold changes no live entry: the head's hints (not the
            // older base's: commits since may have broken those) hold.
            v.ends = slot.head.ends.clone();
        } else {
            v.ends = st.ends.clone();
        }
        // B2: the folded buffer's bytes leave the budget (the carried
        // commits stay accounted).
        let (before, after) = (slot.head.buffer.bytes(), v.buffer.bytes());
        assert!(after <= before, "B2: a fold's new buffer outgrew the old");
        self.budget.release(before - after);
        if !Arc::ptr_eq(&slot.head.buffer, &v.buffer) {
            // Replaced: only older snapshots read it now, and nothing may
            // write it again (`MemBuffer::insert` asserts).
            slot.head.buffer.freeze();
        }
        let v = Arc::new(v);
        cf.set_head_version(version);
        slot.head = v.clone();
        cf.enqueue(v.clone());
        v
    }
}

/// Turns a transaction's write set into a buffered version: its entries go
/// into the base's buffer at `version` (invisible to every snapshot until
/// it is published), the count deltas move on, the base's reclaim batch is
/// sealed with no page. Called under the writer lock and the commit gate.
pub(super) fn install_buffered(
    cf: &CfShared,
    st: &mut WriteState,
    slot: &mut WriterSlot,
    version: Version,
    lsn: Lsn,
    index: KeyIndex,
) -> Arc<CfVersion> {
    let base = st.base.clone();
    debug_assert!(
        Arc::ptr_eq(&slot.head, &base),
        "transaction not based on the head"
    );
    debug_assert!(
        !st.folded && !st.pages.is_dirty(),
        "a buffered commit with pages"
    );
    assert!(
        lsn >= base.lsn,
        "design.md §11.6: a CF's LSNs must not go backwards"
    );
    let (before, charge) = (base.buffer.bytes(), st.buffer_charge(index));
    let mut deltas = (*base.deltas).clone();
    for id in st.writes.tables() {
        let Some(w) = st.writes.take_table(id) else {
            continue;
        };
        let delta = w
            .delta()
            .expect("a buffered commit's count changes are resolved");
        // In key order: a large commit's inserts retrace each other's
        // paths through the skip list (500,000 removes in random order
        // spent a third of the commit searching it). Moved, not cloned:
        // the commit is done with its write set.
        let mut ins = base.buffer.inserting(id, version, index);
        ins.expect(w.len());
        w.into_key_order(|w| ins.push(w));
        ins.finish();
        *deltas.entry(id).or_default() += delta;
    }
    debug_assert_eq!(
        base.buffer.bytes() - before,
        charge,
        "B1: a buffered commit charged other bytes than it reserved"
    );
    // No page freed: the next batch comes from the base's, without
    // taking the allocator lock a fold made aside may be using.
    let batch = base.batch.successor();
    base.batch.seal(Vec::new(), batch.clone());
    let v = Arc::new(CfVersion {
        version,
        catalog: base.catalog,
        next_table: base.next_table,
        lsn,
        batch,
        buffer: base.buffer.clone(),
        deltas: Arc::new(deltas),
        ends: st.ends.clone(),
        tree_base: base.tree_base,
        // The catalog is unchanged: so is its decoded form.
        tables: base.tables.clone(),
        // A fold in rounds goes on under buffered commits.
        fold: base.fold.clone(),
    });
    cf.set_head_version(version);
    slot.head = v.clone();
    cf.enqueue(v.clone());
    v
}

/// How long a fold made aside waits for a write transaction to finish
/// before it gives up (and a later checkpoint tries again).
const FOLD_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a fold that must happen waits for another thread's fold of
/// the same CF to let go of it (see `DbShared::fold_mark`).
const FOLD_MARK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a stalled writer whose fold pass freed nothing waits for
/// another thread's fold before it goes on.
const STALL_POLL: std::time::Duration = std::time::Duration::from_millis(10);

#[cfg(test)]
mod end_hint_tests {
    use std::sync::Arc;

    use crate::db::Database;
    use crate::error::Result;
    use crate::storage::mem::MemVfs;
    use crate::table::types::TableDefinition;
    use crate::txn::take_tombstones_walked;

    /// The walk the hints spare (failed before them: each pop walked
    /// every tombstone the earlier pops left, O(n²) for a queue).
    #[test]
    fn a_pop_after_many_pops_walks_past_no_tombstone() -> Result<()> {
        const Q: TableDefinition<u64, u64> = TableDefinition::new("q");
        let db = Database::builder()
            .buffer_memory(1 << 30, 2 << 30)
            .buffer_fold_bytes(1 << 30)
            .checkpoint_triggers(u64::MAX, u64::MAX, u64::MAX)
            .create_with_vfs(Arc::new(MemVfs::new()), "q.sheaf")?;
        let tx = db.begin_write()?;
        for k in 0..2000u64 {
            tx.open_table(Q)?.insert(k, k)?;
        }
        tx.commit()?;
        db.checkpoint()?; // the keys in the tree, the pops' tombstones above it
        for k in 0..1000u64 {
            let tx = db.begin_write()?;
            let popped = tx.open_table(Q)?.pop_first()?.map(|(k, _)| k.value());
            assert_eq!(popped, Some(k));
            tx.commit()?;
        }
        take_tombstones_walked();
        let tx = db.begin_write()?;
        let popped = tx.open_table(Q)?.pop_first()?.map(|(k, _)| k.value());
        assert_eq!(popped, Some(1000));
        assert!(
            take_tombstones_walked() <= 1,
            "pop_first walked the tombstones"
        );
        tx.abort()?;
        let rx = db.begin_read()?;
        let first = rx.open_table(Q)?.first()?.map(|(k, _)| k.value());
        assert_eq!(first, Some(1000));
        assert!(
            take_tombstones_walked() <= 1,
            "first() walked the tombstones"
        );
        drop(rx);
        // A retain that keeps only the front: the walk from the back
        // after it starts at the last key kept.
        let tx = db.begin_write()?;
        tx.open_table(Q)?.retain(|k, _| k < 1010)?;
        tx.commit()?;
        take_tombstones_walked();
        let rx = db.begin_read()?;
        let last = rx.open_table(Q)?.last()?.map(|(k, _)| k.value());
        assert_eq!(last, Some(1009));
        assert_eq!(take_tombstones_walked(), 0, "last() walked the tombstones");
        Ok(())
    }

    /// Draining a table from one end inside one write transaction, by any
    /// of the ways that take the first (last) entry and remove it, walks
    /// each tombstone it leaves about once. A session-35 probe found every
    /// way but `first`/`last`/`pop_*` walking all the earlier ones each
    /// time (O(n²): 27–36 s for 8,000 keys): ranges and cursors used the
    /// hints but never set one, and `extract_if` set one only for a kept
    /// entry.
    #[test]
    fn draining_an_end_in_one_transaction_walks_each_tombstone_about_once() -> Result<()> {
        const Q: TableDefinition<u64, u64> = TableDefinition::new("q");
        const N: u64 = 400;
        type Drain = fn(&mut crate::table::Table<'_, u64, u64>) -> Result<Option<u64>>;
        let ways: [(&str, Drain); 7] = [
            // A bound at the least or greatest key is an open side.
            ("range(0..).next()", |t| {
                let k = t.range(0u64..)?.next().transpose()?.map(|(k, _)| k.value());
                k.map(|k| t.remove(k).map(|_| k)).transpose()
            }),
            ("range(..=MAX).next_back()", |t| {
                let k = (t.range(..=u64::MAX)?.next_back().transpose()?).map(|(k, _)| k.value());
                k.map(|k| t.remove(k).map(|_| k)).transpose()
            }),
            ("iter().next()", |t| {
                let k = t.iter()?.next().transpose()?.map(|(k, _)| k.value());
                k.map(|k| t.remove(k).map(|_| k)).transpose()
            }),
            ("iter().next_back()", |t| {
                let k = t.iter()?.next_back().transpose()?.map(|(k, _)| k.value());
                k.map(|k| t.remove(k).map(|_| k)).transpose()
            }),
            ("range(..).next()", |t| {
                let k = t
                    .range::<u64>(..)?
                    .next()
                    .transpose()?
                    .map(|(k, _)| k.value());
                k.map(|k| t.remove(k).map(|_| k)).transpose()
            }),
            ("cursor().first()", |t| {
                let k = t.cursor().first()?.map(|(k, _)| k.value());
                k.map(|k| t.remove(k).map(|_| k)).transpose()
            }),
            ("extract_if().next()", |t| {
                let k = t.extract_if(|_, _| true)?.next().transpose()?;
                Ok(k.map(|(k, _)| k.value()))
            }),
        ];
        for (name, drain) in ways {
            let db = Database::builder().create_with_vfs(Arc::new(MemVfs::new()), "q.sheaf")?;
            let tx = db.begin_write()?;
            for k in 0..N {
                tx.open_table(Q)?.insert(k, k)?;
            }
            tx.commit()?;
            db.checkpoint()?; // the keys in the tree, the removals above it
            let tx = db.begin_write()?;
            let mut t = tx.open_table(Q)?;
            take_tombstones_walked();
            let mut drained = 0;
            while drain(&mut t)?.is_some() {
                drained += 1;
            }
            let walked = take_tombstones_walked();
            assert_eq!(drained, N, "{name}");
            assert!(walked <= 2 * N, "{name}: {walked} tombstones walked");
        }
        Ok(())
    }

    /// A bound opened at the least or greatest key (`encode_bounds`) leaves
    /// out no key: the extremes themselves, and for a byte-string key the
    /// empty one, are still in the range; a bound one past them is not
    /// opened.
    #[test]
    fn ranges_bounded_at_the_extreme_keys_keep_them() -> Result<()> {
        const U: TableDefinition<u64, ()> = TableDefinition::new("u");
        const B: TableDefinition<&[u8], ()> = TableDefinition::new("b");
        let db = Database::builder().create_with_vfs(Arc::new(MemVfs::new()), "x.sheaf")?;
        let tx = db.begin_write()?;
        {
            let mut u = tx.open_table(U)?;
            let mut b = tx.open_table(B)?;
            for k in [0, 1, u64::MAX - 1, u64::MAX] {
                u.insert(k, ())?;
            }
            for k in [&b""[..], b"\0", b"a"] {
                b.insert(k, ())?;
            }
            fn keys(
                r: impl Iterator<
                    Item = Result<(crate::table::KeyGuard<u64>, crate::table::AccessGuard<()>)>,
                >,
            ) -> Result<Vec<u64>> {
                r.map(|e| e.map(|(k, _)| k.value())).collect()
            }
            assert_eq!(keys(u.range(0u64..)?)?, [0, 1, u64::MAX - 1, u64::MAX]);
            assert_eq!(keys(u.range(0u64..=u64::MAX)?.rev())?.len(), 4);
            assert_eq!(keys(u.range(1u64..u64::MAX)?)?, [1, u64::MAX - 1]);
            assert_eq!(keys(u.range(..=u64::MAX)?.rev())?[0], u64::MAX);
            let first = b.range(&b""[..]..)?.next().transpose()?;
            assert_eq!(first.map(|(k, _)| k.value().to_vec()), Some(vec![]));
            assert_eq!(b.range(&b"\0"[..]..)?.count(), 2);
        }
        tx.commit()
    }

    /// The same for a multimap drained through `range(0..)`, the usual
    /// way to take its first key (a range from an explicit bound set no
    /// hint before: 80,200 tombstones walked for 400 pairs).
    #[test]
    fn draining_a_multimap_by_its_least_key_walks_each_tombstone_about_once() -> Result<()> {
        const M: crate::table::MultimapTableDefinition<u64, u64> =
            crate::table::MultimapTableDefinition::new("m");
        const N: u64 = 400;
        let db = Database::builder().create_with_vfs(Arc::new(MemVfs::new()), "m.sheaf")?;
        let tx = db.begin_write()?;
        for k in 0..N {
            tx.open_multimap_table(M)?.insert(k, k + 1)?;
        }
        tx.commit()?;
        db.checkpoint()?;
        let tx = db.begin_write()?;
        let mut t = tx.open_multimap_table(M)?;
        take_tombstones_walked();
        let mut drained = 0;
        loop {
            let first = t.range(0u64..)?.next().transpose()?;
            let Some((k, v)) = first.map(|(k, v)| (k.value(), v.value())) else {
                break;
            };
            assert!(t.remove(k, v)?);
            drained += 1;
        }
        let walked = take_tombstones_walked();
        assert_eq!(drained, N);
        assert!(walked <= 2 * N, "{walked} tombstones walked");
        Ok(())
    }
}

#[cfg(test)]
mod unpublished_tests {
    use std::io;
    use std::sync::Arc;

    use super::Unpublished;
    use crate::db::Database;
    use crate::error::{Error, PoisonCause, Result};
    use crate::pager::alloc::ReclaimBatch;
    use crate::storage::mem::MemVfs;
    use crate::txn::version::CfVersion;
    use crate::txn::FoldNudge;
    use crate::types::Version;

    /// A commit that stops before publishing after another failure
    /// poisoned the database (a multi-CF commit whose wait for earlier
    /// versions saw the poison, on a real full disk in a session-36 probe;
    /// or one whose own sync failed later) fails its version with the
    /// first cause, which the CF's later waiters then get. It used to be
    /// a cause of its own ("stopped between its WAL append and its
    /// publication", no I/O kind; or its own error), so a caller checking
    /// for `StorageFull` missed a full disk.
    #[test]
    fn a_commit_stopped_after_another_failure_fails_with_the_first_cause() -> Result<()> {
        type Stop = fn(Unpublished<'_>);
        let ways: [(&str, Stop); 2] = [
            ("dropped", |u| drop(u)),
            ("failed", |u| {
                drop(u.fail(Error::Io(io::Error::other("later"))))
            }),
        ];
        for (name, stop) in ways {
            let db = Database::builder().create_with_vfs(Arc::new(MemVfs::new()), "u.sheaf")?;
            let shared = &*db.shared;
            let cf = (shared.registry.cfs.read().values().next().cloned()).expect("the default cf");
            let full = Error::Io(io::Error::from(io::ErrorKind::StorageFull));
            shared.health.poison_with(PoisonCause::of(&full));
            let cur = cf.current.load_full();
            let batch = ReclaimBatch::new(cf.alloc.lock().released_sink());
            let next = Version(cur.version.0 + 1);
            let v = CfVersion::of_trees(
                next,
                cur.catalog,
                cur.next_table,
                cur.lsn,
                batch,
                FoldNudge::default(),
            );
            let v = Arc::new(v);
            cf.enqueue(v.clone());
            stop(Unpublished::new(shared, &cf, v));
            match cf.wait_published(next) {
                Err(Error::Poisoned(cause)) => {
                    assert_eq!(
                        cause.io_kind(),
                        Some(io::ErrorKind::StorageFull),
                        "{name}: {cause}"
                    );
                }
                other => panic!("{name}: expected the first cause, got {other:?}"),
            }
        }
        Ok(())
    }
}
