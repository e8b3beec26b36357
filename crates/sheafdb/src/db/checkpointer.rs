//! What drives checkpoints: the system state they own, their triggers, and
//! the background thread.
//!
//! Owns: [`CheckpointState`]: the durable system state (`SysState`, under
//! the lock every checkpoint holds), the dirty-page counter shared with
//! every CF allocator, the LSN the last checkpoint started at, the
//! triggers, and the signal that wakes the `sheafdb-checkpoint` thread
//! ([`checkpointer_loop`]). The checkpoint itself is `db::checkpoint`.
//! The thread also keeps the folds it deferred to wait for snapshots
//! (`DeferredFolds`, design.md "Fold rounds") and retries them when a
//! snapshot releases pages, and gives an idle WAL's space back.
//!
//! Invariants: `sys` changes only under its lock, held for one whole
//! checkpoint; the background thread holds only a weak handle, so it
//! never keeps a dropped database alive, and exits on `shutdown`; a fold
//! waits for snapshots at most `Builder::fold_patience` (`overdue`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::btree::TreeRoot;
use crate::lock_rank::{ranks, RankedMutex};
use crate::pager::alloc::{CfAllocator, ReleaseWatch};
use crate::txn::CfShared;
use crate::types::{CfId, Lsn, PageId};

use super::commit::Patience;
use super::{DbShared, Options};
use crate::format::superblock::WalMark;

/// Durable system state, changed only by checkpoints (under its lock).
#[derive(Debug)]
pub(crate) struct SysState {
    /// Generation of the current superblock.
    pub generation: u64,
    /// Slot (0 or 1) holding the current superblock.
    pub slot: u8,
    /// Root of the system tree.
    pub root: TreeRoot,
    /// Allocator of system extents.
    pub alloc: Arc<Mutex<CfAllocator>>,
    /// The metadata blob run of the current superblock.
    pub meta_run: Option<(PageId, u32)>,
    /// Next CF id to hand out.
    pub next_cf: CfId,
    /// WAL position replay starts from (every CF's base covers what is
    /// below it).
    pub replay_lsn: Lsn,
    /// The database's random identity (superblock and WAL headers).
    pub db_id: u64,
    /// One past the highest page any checkpoint wrote: the data file is
    /// at least this long, or it was truncated. A cut never truncates
    /// below it (`DbShared::truncate_file`).
    pub written_pages: u64,
    /// The file length in pages the current superblock records: a cut
    /// that shortened the extent map below it is not durable until a
    /// checkpoint writes a superblock with the shorter length.
    pub file_pages: u64,
    /// What the current superblock says about the WAL (rule O13).
    pub wal_mark: WalMark,
    /// Set once the open made sure a WAL segment file exists durably
    /// (`Wal::ensure_file`); from then on one always does, and checkpoints
    /// may write `WalMark::Required` (`DbShared::wal_mark_for`).
    pub wal_kept: bool,
}

/// When a checkpoint is due.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Triggers {
    /// WAL bytes since the last checkpoint started.
    pub wal_bytes: u64,
    /// Dirty bytes over all CFs.
    pub dirty_bytes: u64,
    /// Dirty bytes past which a new writer checkpoints itself first.
    pub hard_limit_bytes: u64,
    /// Page size, to turn the page counter into bytes.
    pub page_size: u64,
}

impl Triggers {
    /// The triggers `options` set, for pages of `page_size` bytes.
    pub fn new(options: &Options, page_size: usize) -> Triggers {
        Triggers {
            wal_bytes: options.checkpoint_wal_bytes,
            dirty_bytes: options.checkpoint_dirty_bytes,
            hard_limit_bytes: options.dirty_hard_limit_bytes,
            page_size: page_size as u64,
        }
    }
}

/// What the background checkpointer is asked to do.
#[derive(Debug, Default)]
struct SignalState {
    /// Run a checkpoint soon (a trigger fired).
    requested: bool,
    /// Give the blocks of free runs back (snapshots released many pages).
    punch: bool,
    /// Exit (the database is closing).
    shutdown: bool,
}

/// What woke the background checkpointer.
#[derive(Debug, Clone, Copy, Default)]
struct Wake {
    /// A checkpoint was requested.
    requested: bool,
    /// Snapshots released [`PUNCH_AFTER_RELEASED_BYTES`] or more since the
    /// last hole punch.
    punch: bool,
}

/// Pages released by dropped snapshots past which the checkpointer is
/// woken to punch holes at once (design.md "Holes"); below it the next
/// checkpoint does. A reader that held a snapshot across a large rewrite
/// gives the old pages' disk space back when it ends, not 30 s later.
pub(crate) const PUNCH_AFTER_RELEASED_BYTES: u64 = 8 << 20;

/// The checkpointer's wake-up: its signal, and the count of pages
/// snapshots released since the last hole punch (every CF allocator's
/// release sink tells it, see [`ReleaseWatch`]).
#[derive(Debug)]
pub(crate) struct Wakeup {
    signal: Mutex<SignalState>,
    wake: Condvar,
    /// Set by a request until the checkpointer takes it, so a trigger
    /// that stays fired (a full buffer) costs later commits one atomic
    /// load, not a lock and a wake-up each.
    pending: std::sync::atomic::AtomicBool,
    /// Pages released since the last punch pass began.
    released: AtomicU64,
    /// [`PUNCH_AFTER_RELEASED_BYTES`] in pages.
    punch_after: u64,
}

impl Wakeup {
    /// See [`CheckpointState::request`].
    fn request(&self) {
        if self.pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut st = self.signal.lock();
        st.requested = true;
        self.wake.notify_all();
    }

    fn new(page_size: u64) -> Wakeup {
        Wakeup {
            signal: Mutex::new(SignalState::default()),
            wake: Condvar::new(),
            pending: std::sync::atomic::AtomicBool::new(false),
            released: AtomicU64::new(0),
            punch_after: (PUNCH_AFTER_RELEASED_BYTES / page_size).max(1),
        }
    }

    /// A punch pass begins: releases from now on count toward the next.
    pub fn punch_begins(&self) {
        self.released.store(0, Ordering::Relaxed);
    }
}

impl ReleaseWatch for Wakeup {
    /// Wakes the checkpointer once per [`PUNCH_AFTER_RELEASED_BYTES`]
    /// released (the crossing release takes the signal's lock; the
    /// others cost one atomic add).
    fn released(&self, pages: u64) {
        let before = self.released.fetch_add(pages, Ordering::Relaxed);
        if before < self.punch_after && before + pages >= self.punch_after {
            let mut st = self.signal.lock();
            st.punch = true;
            self.wake.notify_all();
        }
    }
}

/// The checkpointer's state in one open database.
#[derive(Debug)]
pub(crate) struct CheckpointState {
    /// The durable system state; held for one whole checkpoint.
    pub sys: RankedMutex<SysState, { ranks::SYS }>,
    /// Pages committed since their CF's durable base, over all CFs.
    pub dirty_pages: Arc<AtomicU64>,
    /// WAL position when the last checkpoint started (trigger by WAL bytes).
    pub last_lsn: AtomicU64,
    /// While non-zero (compaction): checkpoints move the system tree and
    /// the metadata blob below this page.
    pub relocate_below: AtomicU64,
    /// Set at open and by every cut, cleared by a truncation that brought
    /// the file to the extent map's length: while set, the data file may
    /// be longer than it needs to be (`DbShared::truncate_file`; a crash
    /// between a cut's checkpoint and its truncation leaves it so).
    pub truncation_owed: std::sync::atomic::AtomicBool,
    /// Set for good when the storage said it cannot punch holes
    /// (`DbShared::punch_free_runs` stops trying).
    pub punch_unsupported: std::sync::atomic::AtomicBool,
    /// Compactions running: no holes are punched meanwhile
    /// (`DbShared::without_punching`).
    pub punch_paused: std::sync::atomic::AtomicUsize,
    triggers: Triggers,
    /// Wakes the background checkpointer; every CF allocator's release
    /// sink reports to it.
    pub wakeup: Arc<Wakeup>,
}

impl CheckpointState {
    /// The state of a database whose durable system state is `sys`.
    pub fn new(sys: SysState, triggers: Triggers) -> CheckpointState {
        assert!(triggers.page_size > 0, "page size 0");
        CheckpointState {
            sys: RankedMutex::new(sys),
            dirty_pages: Arc::new(AtomicU64::new(0)),
            last_lsn: AtomicU64::new(0),
            relocate_below: AtomicU64::new(0),
            truncation_owed: std::sync::atomic::AtomicBool::new(true),
            punch_unsupported: std::sync::atomic::AtomicBool::new(false),
            punch_paused: std::sync::atomic::AtomicUsize::new(0),
            wakeup: Arc::new(Wakeup::new(triggers.page_size)),
            triggers,
        }
    }

    /// Bytes committed since the durable base, over all CFs.
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_pages.load(Ordering::Relaxed) * self.triggers.page_size
    }

    /// True past the hard dirty limit: a new writer checkpoints first.
    pub fn over_hard_limit(&self) -> bool {
        self.dirty_bytes() >= self.triggers.hard_limit_bytes
    }

    /// Asks the background checkpointer to run soon (once per run: later
    /// requests before it starts are free).
    pub fn request(&self) {
        self.wakeup.request();
    }

    /// A [`FoldNudge`](crate::txn::FoldNudge) that makes this request:
    /// for readers that walked many buffered tombstones.
    pub fn fold_nudge(&self) -> crate::txn::FoldNudge {
        let w = self.wakeup.clone();
        crate::txn::FoldNudge::new(move || w.request())
    }

    /// Tells the background checkpointer to exit.
    pub fn shutdown(&self) {
        let w = &self.wakeup;
        let mut st = w.signal.lock();
        st.shutdown = true;
        w.wake.notify_all();
    }

    /// After a commit whose record ended at `end`: wake the checkpointer if
    /// a trigger fired. Uses the commit's own LSN, so the commit path does
    /// not take the WAL lock again.
    pub fn after_commit(&self, end: Lsn) {
        if self.due(end) {
            self.request();
        }
    }

    /// True if the log (ending at `end`) or the dirty pages passed their
    /// checkpoint trigger.
    pub fn due(&self, end: Lsn) -> bool {
        let since = end.0.saturating_sub(self.last_lsn.load(Ordering::Relaxed));
        since >= self.triggers.wal_bytes || self.dirty_bytes() >= self.triggers.dirty_bytes
    }

    /// Waits up to `interval` for a request; `None` on shutdown, else
    /// what was asked.
    fn wait_request(&self, interval: Duration) -> Option<Wake> {
        let w = &self.wakeup;
        let mut st = w.signal.lock();
        if !st.requested && !st.punch && !st.shutdown {
            w.wake.wait_for(&mut st, interval);
        }
        if st.shutdown {
            return None;
        }
        w.pending.store(false, Ordering::Release);
        Some(Wake {
            requested: std::mem::take(&mut st.requested),
            punch: std::mem::take(&mut st.punch),
        })
    }
}

/// How often the background checkpointer looks whether snapshots that
/// kept a deferred fold waiting have released pages.
const DEFERRED_POLL: Duration = Duration::from_millis(20);

/// Folds the background checkpointer deferred to wait for snapshots
/// (design.md "Fold rounds", *Waiting for snapshots*): each CF with the
/// pages that waited for snapshots when it was deferred, and since when
/// the first one waits.
#[derive(Debug, Default)]
struct DeferredFolds {
    cfs: Vec<(Arc<CfShared>, u64)>,
    since: Option<Instant>,
}

impl DeferredFolds {
    /// Records the CFs the last pass deferred (replacing the earlier
    /// list; the wait keeps its start while folds stay deferred).
    fn note(&mut self, cfs: Vec<Arc<CfShared>>) {
        if cfs.is_empty() {
            *self = DeferredFolds::default();
            return;
        }
        self.cfs = (cfs.into_iter())
            .map(|cf| {
                let pinned = cf.alloc.lock().waiting_pages().0;
                (cf, pinned)
            })
            .collect();
        self.since.get_or_insert_with(Instant::now);
    }

    /// True if some CF's pages waiting for snapshots went down (a
    /// snapshot ended): a retry may now fold without growing the file.
    fn released_some(&self) -> bool {
        (self.cfs.iter()).any(|(cf, pinned)| cf.alloc.lock().waiting_pages().0 < *pinned)
    }

    /// True once folds have waited `patience` (`Builder::fold_patience`):
    /// the next pass grows the file rather than wait longer (a snapshot
    /// held for minutes must not keep the buffer, and the WAL behind it,
    /// from being folded, nor reads merging it).
    fn overdue(&self, patience: Duration) -> bool {
        self.since.is_some_and(|t| t.elapsed() >= patience)
    }

    fn take(&mut self) -> Vec<Arc<CfShared>> {
        self.cfs.drain(..).map(|(cf, _)| cf).collect()
    }
}

impl DbShared {
    /// True if a live CF other than those in `deferred` has a buffer at
    /// its fold threshold: a request then concerns more than the folds
    /// that wait for snapshots.
    fn fold_due_beside(&self, deferred: &[(Arc<CfShared>, u64)]) -> bool {
        let cfs = self.registry.cfs.read();
        cfs.values().any(|cf| {
            !deferred.iter().any(|(d, _)| Arc::ptr_eq(d, cf))
                && cf.current.load().buffer.bytes() >= self.options.buffer_fold_bytes
        })
    }
}

/// The background checkpointer: runs a checkpoint when asked (WAL or dirty
/// bytes over their trigger) or when the timer fires with work to do;
/// retries deferred folds when snapshots release pages; gives the WAL's
/// space back when nothing was committed for an interval.
pub(crate) fn checkpointer_loop(weak: Weak<DbShared>) {
    let mut deferred = DeferredFolds::default();
    let mut last_run = Instant::now();
    loop {
        let Some(shared) = weak.upgrade() else { return };
        let interval = shared.options.checkpoint_interval;
        let poll = match deferred.cfs.is_empty() {
            true => interval,
            false => DEFERRED_POLL.min(interval),
        };
        let Some(wake) = shared.ckpt.wait_request(poll) else {
            return;
        };
        if shared.health.check_writable().is_err() {
            deferred = DeferredFolds::default();
            continue;
        }
        if wake.punch {
            shared.punch_free_runs();
        }
        let requested = wake.requested;
        let timer_due = last_run.elapsed() >= interval;
        let timer_work = timer_due
            && (shared.ckpt.dirty_pages.load(Ordering::Relaxed) > 0 || shared.budget.used() > 0);
        let bound = shared.options.fold_patience;
        let patience = match bound.is_zero() || deferred.overdue(bound) {
            true => Patience::Grow,
            false => Patience::WaitForSnapshots,
        };
        // A buffer past its fold threshold asks again after every commit;
        // while its fold waits for snapshots, only released pages, the
        // timer, the log and dirty triggers or another CF's buffer make
        // another pass worth it (not the stall mark: the fold would wait
        // again; writers that begin there fold themselves).
        let waiting = !deferred.cfs.is_empty()
            && patience == Patience::WaitForSnapshots
            && !deferred.released_some();
        let requested = requested
            && (!waiting
                || shared.ckpt.due(shared.wal().next_lsn())
                || shared.fold_due_beside(&deferred.cfs));
        // A failure poisons the database; writers will see it.
        let outcome = if requested || timer_work {
            last_run = Instant::now();
            shared.fold_and_checkpoint(None, patience)
        } else if !deferred.cfs.is_empty() {
            if waiting {
                continue;
            }
            shared.fold_and_checkpoint(Some(deferred.take()), patience)
        } else {
            if timer_due {
                // Nothing committed for a whole interval: the log gives
                // back its free files, and its open one once released;
                // the data file the blocks of its long free runs.
                last_run = Instant::now();
                shared.give_back_wal(0);
                shared.punch_free_runs();
            }
            continue;
        };
        deferred.note(outcome.unwrap_or_default());
    }
}
