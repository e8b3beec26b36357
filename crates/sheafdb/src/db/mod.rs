//! The database: open/create/recover, the CF registry, and the public entry
//! points.
//!
//! Owns: [`Database`], [`Builder`], `DbShared` (everything a transaction
//! or snapshot needs), the system state (superblock generation, system tree,
//! system allocator) and poisoning.
//!
//! Sees every lower layer; nothing below depends on it except through
//! `DbShared` handles held by transactions.
//!
//! Invariants: exactly one `Database` per file at a time (file lock); after
//! a write or sync fails, the database is poisoned and refuses writes.

mod backup;
mod budget;
mod cf;
mod checkpoint;
mod checkpointer;
mod commit;
mod compact;
mod health;
mod info;
mod integrity;
mod key_filter;
mod open;
mod recover;
mod registry;
mod transaction;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::format::page::DEFAULT_PAGE_SIZE;
use crate::pager::alloc::ExtentPolicy;
use crate::pager::space::PageSpace;
use crate::storage::file::FsVfs;
use crate::storage::Vfs;
use crate::txn::Durability;

use crate::types::{CfId, Lsn};
use crate::wal::{FlusherHandle, Wal};
use budget::BufferBudget;
use checkpointer::CheckpointState;
use health::Health;
use registry::CfRegistry;

pub use backup::{BackupProgress, BackupReport};
pub use cf::{CfStats, ColumnFamily, MAX_CF_NAME};
pub use compact::CompactReport;
pub use info::{DatabaseStats, FileInfo, WalDamage};
pub use integrity::IntegrityReport;
pub use transaction::{
    MultiWriteTransaction, ReadTransaction, Savepoint, TableInfo, UntypedReadTable, UntypedTable,
    WriteTransaction,
};

/// The system CF's extents: small, they hold only metadata.
/// The least [`Builder::wal_record_max_bytes`] takes: every record the
/// engine writes for itself (a fold round's marker, a column family's
/// creation) fits in it.
pub const MIN_WAL_RECORD_BYTES: usize = 4096;

/// Default of [`Builder::direct_commit_bytes`].
pub const DEFAULT_DIRECT_COMMIT_BYTES: usize = 4 << 20;

const SYS_EXTENT_POLICY: ExtentPolicy = ExtentPolicy {
    first_pages: 16,
    max_pages: 1024,
};

/// Tunables fixed when the database is opened.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub durability: Durability,
    pub sync_interval: Duration,
    pub wal_segment_bytes: u64,
    pub wal_first_segment_bytes: u64,
    pub wal_record_max_bytes: usize,
    /// Records from this size on commit by a direct checkpoint when the
    /// transaction's tree pages are no more than twice its record
    /// (`Builder::direct_commit_bytes`).
    pub direct_commit_bytes: usize,
    pub checkpoint_wal_bytes: u64,
    pub checkpoint_dirty_bytes: u64,
    pub dirty_hard_limit_bytes: u64,
    pub checkpoint_interval: Duration,
    pub background_checkpoints: bool,
    /// Buffered bytes of a CF past which its next commit (or checkpoint)
    /// folds the buffer into the trees.
    pub buffer_fold_bytes: u64,
    /// Buffered bytes over all CFs past which the background checkpointer
    /// folds (see `budget`).
    pub buffer_total_bytes: u64,
    /// Buffered bytes over all CFs never exceeded; writers stall at ¾.
    pub buffer_limit_bytes: u64,
    /// Page budget of every fold round instead of the adaptive one
    /// (`DbShared::round_budget`); tests set it small to exercise rounds.
    pub fold_round_pages: Option<u64>,
    /// Pending write bytes of one table past which a transaction applies
    /// them to the table's tree (`txn::SPILL_BYTES` by default).
    pub txn_spill_bytes: u64,
    /// How long a background fold defers rounds that would grow the file
    /// while freed pages wait for snapshots.
    pub fold_patience: Duration,
    /// Open a WAL damaged in the middle up to the damage
    /// (`Builder::salvage_damaged_wal`).
    pub salvage_damaged_wal: bool,
    /// Open a database whose base requires a WAL that is missing, as of
    /// that base (`Builder::accept_missing_wal`).
    pub accept_missing_wal: bool,
    /// Give the file blocks of long free runs back after checkpoints
    /// (`Builder::punch_holes`).
    pub punch_holes: bool,
    /// Free bytes not yet given back past which a punch pass punches, in
    /// runs of any length (`None`: an eighth of the file and at least
    /// 1 MiB, in runs of 64 KiB or more).
    pub punch_after_bytes: Option<u64>,
    /// Bytes the key filters of every CF may take (0: none;
    /// `Builder::key_filter_memory`).
    pub key_filter_memory: u64,
    /// Keys the smallest key filter holds (tests lower it).
    pub key_filter_min_keys: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Immediate,
            sync_interval: Duration::from_millis(50),
            wal_segment_bytes: 32 << 20,
            wal_first_segment_bytes: crate::wal::DEFAULT_MIN_SEGMENT_BYTES,
            wal_record_max_bytes: 32 << 20,
            direct_commit_bytes: DEFAULT_DIRECT_COMMIT_BYTES,
            checkpoint_wal_bytes: 64 << 20,
            checkpoint_dirty_bytes: 256 << 20,
            dirty_hard_limit_bytes: 512 << 20,
            checkpoint_interval: Duration::from_secs(30),
            background_checkpoints: true,
            buffer_fold_bytes: 32 << 20,
            buffer_total_bytes: 128 << 20,
            buffer_limit_bytes: 512 << 20,
            fold_round_pages: None,
            txn_spill_bytes: crate::txn::SPILL_BYTES,
            fold_patience: Duration::from_secs(3),
            salvage_damaged_wal: false,
            accept_missing_wal: false,
            punch_holes: true,
            punch_after_bytes: None,
            key_filter_memory: 64 << 20,
            key_filter_min_keys: crate::txn::key_filter::MIN_CAPACITY,
        }
    }
}

/// Everything shared by the handles of one open database, split by
/// concern; each part owns its locks (ARCHITECTURE.md lists their order).
#[derive(Debug)]
pub(crate) struct DbShared {
    /// Pager, extents and extent policy: all a page store needs.
    pub space: Arc<PageSpace>,
    /// Live CFs, the database-wide snapshot, CF create/drop ordering.
    pub registry: CfRegistry,
    /// System state, dirty-page accounting, triggers, the wake-up signal.
    pub ckpt: CheckpointState,
    /// Poisoning and closing.
    pub health: Health,
    /// Bytes buffered over all CFs, and their bound.
    pub budget: BufferBudget,
    /// The write-ahead log, once opened.
    wal: OnceLock<Arc<Wal>>,
    pub options: Options,
    /// WAL records applied by recovery when this database was opened.
    pub replayed_records: AtomicU64,
    /// Buffered entries the last rounds of folds carried into new
    /// buffers since open: before the writer lock, and under it
    /// (design.md "Fold rounds", *The carry*).
    pub carried: [AtomicU64; 2],
    /// Damage in the middle of the WAL this open salvaged around
    /// (`Builder::salvage_damaged_wal`): the commits from it on are lost.
    pub wal_damage: OnceLock<WalDamage>,
    /// LSN of a damaged WAL frame below the replay start this open walked
    /// past (its records were in the base already; nothing was lost).
    pub wal_damage_passed: OnceLock<u64>,
    /// Bytes of the CFs' key filters, their bound, and the signal of the
    /// `sheafdb-keyfilter` thread (`db::key_filter`).
    pub filter_budget: Arc<crate::txn::key_filter::FilterBudget>,
    /// What every CF's buffers call to ask for a fold when snapshot
    /// ranges walked many of their tombstones (design.md "Tombstone
    /// walks"): a request to the background checkpointer.
    pub fold_nudge: crate::txn::FoldNudge,
    threads: Mutex<Threads>,
    // The file lock lives in `space` (`PageSpace::holding`): released when
    // the last handle that can read the file (database, CF handle,
    // transaction, table, iterator) is gone.
}

/// Background threads owned by an open database.
#[derive(Debug, Default)]
pub(crate) struct Threads {
    checkpointer: Option<std::thread::JoinHandle<()>>,
    key_filter: Option<std::thread::JoinHandle<()>>,
    flusher: Option<FlusherHandle>,
}

impl DbShared {
    /// Errors if the database was closed, or refuses writes.
    pub fn check_open(&self) -> Result<()> {
        self.health.check_open()
    }

    /// Poisons the database with `cause` (see [`Health::poison`]).
    pub fn poison(&self, cause: &Error) {
        self.health.poison(cause);
    }

    /// The write-ahead log.
    pub fn wal(&self) -> &Arc<Wal> {
        self.wal
            .get()
            .expect("the WAL is opened before the database is used")
    }

    /// The WAL, unless the database is still being created or opened.
    pub fn wal_if_open(&self) -> Option<&Arc<Wal>> {
        self.wal.get()
    }

    /// Makes the WAL durable through `lsn`, which a superblock about to be
    /// written names (ordering rule O1). Before the WAL is opened (while a
    /// database is created) nothing past the log's first LSN can be named.
    pub fn wal_durable_through(&self, lsn: Lsn) -> Result<()> {
        let Some(wal) = self.wal.get() else {
            assert!(
                lsn <= crate::wal::FIRST_LSN,
                "O1: a superblock names {lsn:?} before the WAL exists"
            );
            return Ok(());
        };
        assert!(
            lsn <= wal.next_lsn(),
            "O1: a superblock would name {lsn:?}, past the log end"
        );
        wal.wait_durable(lsn)?;
        assert!(
            wal.synced_lsn() >= lsn,
            "O1: WAL not durable through {lsn:?}"
        );
        Ok(())
    }

    /// Before a write transaction: past the hard dirty limit, the writer
    /// runs a checkpoint itself (memory stays bounded).
    pub fn stall_if_dirty(self: &Arc<Self>) -> Result<()> {
        if self.ckpt.over_hard_limit() {
            self.checkpoint_all()?;
        }
        Ok(())
    }

    /// Starts the WAL flusher and (if enabled) the background
    /// checkpointer. `Error::Io` if a thread cannot be spawned.
    fn start_threads(self: &Arc<Self>) -> Result<()> {
        let cfs: Vec<Arc<crate::txn::CfShared>> =
            self.registry.cfs.read().values().cloned().collect();
        for cf in cfs {
            key_filter::start_empty(self, &cf)?;
        }
        let mut t = self.threads.lock();
        // A failed background sync poisons the database like a foreign one.
        let weak = Arc::downgrade(self);
        let on_error = move |e: &Error| {
            if let Some(shared) = weak.upgrade() {
                shared.poison(e);
            }
        };
        // Spare segments are background work like checkpoints: off with
        // them, so a test that turns them off sees no file made unasked.
        let spares = self.options.background_checkpoints;
        t.flusher = Some(self.wal().start_flusher(
            self.options.sync_interval,
            spares,
            Box::new(on_error),
        )?);
        if self.options.background_checkpoints {
            let weak = Arc::downgrade(self);
            t.checkpointer = Some(
                std::thread::Builder::new()
                    .name("sheafdb-checkpoint".into())
                    .spawn(move || checkpointer::checkpointer_loop(weak))?,
            );
        }
        // Background work like checkpoints: off with them (a test that
        // turns them off counts every storage operation it makes).
        let filters = self.filter_budget.limit() > 0 && !self.health.is_read_only();
        if filters && self.options.background_checkpoints {
            let weak = Arc::downgrade(self);
            t.key_filter = Some(
                std::thread::Builder::new()
                    .name("sheafdb-keyfilter".into())
                    .spawn(move || key_filter::builder_loop(weak))?,
            );
            self.filter_budget.wake();
        }
        Ok(())
    }

    fn stop_threads(&self) {
        self.signal_threads_to_stop();
        let mut t = self.threads.lock();
        if let Some(h) = t.key_filter.take() {
            let _ = h.join();
        }
        t.flusher = None;
        if let Some(h) = t.checkpointer.take() {
            let _ = h.join();
        }
    }

    /// Joins the background threads if the database was closed from
    /// inside an integrity check's progress callback, which could only
    /// signal them (`shutdown`); called as a CF's check returns or
    /// unwinds (`ColumnFamily::check_integrity_with`: only a CF handle can
    /// close the database from its own check's callback, a `Database`
    /// being borrowed by its check). The
    /// threads hold the database, and with it the file's lock: without
    /// the join, a reopen right after the last handle went could find the
    /// lock still held by threads on their way out (`DatabaseAlreadyOpen`;
    /// seen under load in
    /// `handle_and_name_misuse::closing_inside_the_callback_keeps_acknowledged_commits`).
    pub(crate) fn join_threads_if_closed(&self) {
        if self.health.is_closed() && !integrity::inside_callback() {
            self.stop_threads();
        }
    }

    /// Tells the background threads to stop, without waiting for them
    /// (each holds its own reference to the database and exits at its
    /// next look at the flag).
    fn signal_threads_to_stop(&self) {
        self.ckpt.shutdown();
        self.filter_budget.shutdown();
    }
}

/// What [`Database::memory_stats`] reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Clean cached runs (evictable; at most about the cache budget).
    pub clean_bytes: u64,
    /// Dirty runs: only in memory until a checkpoint writes them.
    pub dirty_bytes: u64,
    /// Bytes of buffered commits over all CFs (write buffers; design.md
    /// "Memory bound"). Never above `buffer_limit_bytes`.
    pub buffered_bytes: u64,
    /// The database-wide write-buffer limit (`Builder::buffer_memory`).
    pub buffer_limit_bytes: u64,
    /// Write transactions that began at the stall mark and folded
    /// buffers before they started, since open.
    pub buffer_stalls: u64,
    /// Bytes of the key filters over all column families (design.md
    /// "Key filter"); never above `key_filter_limit_bytes`.
    pub key_filter_bytes: u64,
    /// The bound of the key filters (`Builder::key_filter_memory`).
    pub key_filter_limit_bytes: u64,
    /// Tree descents a key filter spared write transactions since open
    /// (a put or removal of a key no tree holds).
    pub key_filter_skips: u64,
    /// Key filters built since open (each CF's first, and each rebuild
    /// once new keys filled the last).
    pub key_filter_builds: u64,
}

/// The shortest `Builder::sync_interval` and `checkpoint_interval`: a
/// zero one kept a background thread spinning on a core.
const MIN_SYNC_INTERVAL: Duration = Duration::from_millis(1);

/// The largest extent size [`Builder::extent_sizes`] accepts (1 GiB).
pub const MAX_EXTENT_BYTES: u64 = 1 << 30;

/// Options for creating or opening a database.
#[derive(Debug, Clone)]
pub struct Builder {
    page_size: usize,
    read_only: bool,
    cache_bytes: usize,
    extent_first_bytes: Option<u64>,
    extent_max_bytes: Option<u64>,
    options: Options,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            page_size: DEFAULT_PAGE_SIZE,
            read_only: false,
            cache_bytes: 1 << 30,
            extent_first_bytes: None,
            extent_max_bytes: None,
            options: Options::default(),
        }
    }
}

impl Builder {
    /// Default durability of write transactions (default `Immediate`).
    pub fn durability(mut self, d: Durability) -> Self {
        self.options.durability = d;
        self
    }

    /// How soon `Eventual` commits are synced (default 50 ms; at least 1
    /// ms: a zero interval would keep the flusher thread spinning on a
    /// core). `Duration::MAX` syncs them only at checkpoints, explicit
    /// syncs and close.
    pub fn sync_interval(mut self, every: Duration) -> Self {
        self.options.sync_interval = every.max(MIN_SYNC_INTERVAL);
        self
    }

    /// Working size of the WAL's preallocated segment files (default 32
    /// MiB): no segment file is larger. A new log starts with one small
    /// file ([`Builder::wal_first_segment_bytes`]) and each file it adds
    /// doubles, up to this; checkpoints delete free files past what the
    /// log writes between two checkpoints, and all of them when the log
    /// was idle or the database closes (design.md "WAL size").
    pub fn wal_segment_bytes(mut self, bytes: u64) -> Self {
        self.options.wal_segment_bytes = bytes;
        self
    }

    /// Size of the first WAL segment file of a new log (default 64 KiB,
    /// at most the working size): a small database keeps a small log.
    pub fn wal_first_segment_bytes(mut self, bytes: u64) -> Self {
        self.options.wal_first_segment_bytes = bytes;
        self
    }

    /// Bytes of buffered commits per column family past which the
    /// background checkpointer folds them into the B+trees (default 32
    /// MiB), aside, while writers keep committing. Commits in between
    /// change no page; a larger value makes folds rarer (each rewrites the
    /// leaves its keys fall in, so fewer, larger folds write fewer pages
    /// per key) and longer. What bounds the buffers' memory is
    /// [`Builder::buffer_memory`].
    pub fn buffer_fold_bytes(mut self, bytes: u64) -> Self {
        self.options.buffer_fold_bytes = bytes.max(1);
        self
    }

    /// Bytes of pending writes (keys and values) one table of a write
    /// transaction keeps before applying them to its tree (default 64 MiB;
    /// a table without pages keeps them all, so a bulk load fills its
    /// pages). Below it a transaction can commit into the write buffer
    /// (no page touched; folded later in rounds that need free space for
    /// one round only), past it the rest of its writes go to the tree
    /// (one copy of every leaf they touch, at once): a larger value keeps
    /// larger transactions buffered, at that much memory per table. A
    /// transaction whose writes would charge the buffer more than this
    /// (keys, values and the buffer's per-entry overheads, over all its
    /// tables and CFs) commits to the trees, whatever room the buffer
    /// has (design.md "Memory bound", *Too large to buffer*).
    pub fn txn_spill_bytes(mut self, bytes: u64) -> Self {
        self.options.txn_spill_bytes = bytes.max(1);
        self
    }

    /// Pages a fold round may rewrite before it stops and a checkpoint
    /// makes the pages it replaced reusable (design.md "Fold rounds").
    /// By default a round may use the free space of the file, and at
    /// least a sixteenth of the column family's pages; a small value
    /// makes many short rounds (tests use it to put rounds everywhere).
    #[doc(hidden)]
    pub fn fold_round_pages(mut self, pages: u64) -> Self {
        self.options.fold_round_pages = Some(pages.max(1));
        self
    }

    /// Free bytes not yet given back to the file system past which a
    /// checkpoint punches holes (`punch_holes`), in free runs of any
    /// length; by default an eighth of the file and at least 1 MiB, in
    /// runs of 64 KiB or more. Tests set it to a page, so every
    /// checkpoint punches whatever became free.
    #[doc(hidden)]
    pub fn punch_after_bytes(mut self, bytes: u64) -> Self {
        self.options.punch_after_bytes = Some(bytes);
        self
    }

    /// Bytes the key filters of all column families may take (design.md
    /// "Key filter"; default 64 MiB; 0: none). A CF's filter is a chain
    /// of Bloom filters over its trees' keys (2.5–5 bytes per key once
    /// built: sized for twice the CF's entries), empty and trusted at
    /// once for a new CF, built in the background after a reopen, grown
    /// by a larger filter as new keys fill it: a put or removal of a key
    /// the filter lacks needs no tree descent for its old value. A CF
    /// whose filter does not fit goes without one until memory comes
    /// back. The builds run on the background thread only while
    /// background checkpoints are on (`background_checkpoints`).
    pub fn key_filter_memory(mut self, bytes: u64) -> Self {
        self.options.key_filter_memory = bytes;
        self
    }

    /// Keys the smallest key filter is sized for (default 65,536); tests
    /// lower it so that filters fill, chains grow and builds happen with
    /// few keys.
    #[doc(hidden)]
    pub fn key_filter_min_keys(mut self, keys: u64) -> Self {
        self.options.key_filter_min_keys = keys;
        self
    }

    /// How long a background fold waits for snapshots before it grows the
    /// file (design.md "Fold rounds", *Waiting for snapshots*; default
    /// 3 s). While it waits, its buffered commits stay in memory and
    /// reads merge them (range scans over a large buffer are slower);
    /// longer keeps the file smaller beside long-lived readers, zero
    /// never waits.
    pub fn fold_patience(mut self, wait: Duration) -> Self {
        self.options.fold_patience = wait;
        self
    }

    /// Memory bound of the write buffers over all column families
    /// (design.md "Memory bound"): past `total_bytes` (default 128 MiB) the
    /// background checkpointer folds them; `limit_bytes` (default 512 MiB)
    /// is never exceeded: a writer beginning a transaction at ¾ of it
    /// stalls and folds the largest buffers itself, and a commit that
    /// would pass it writes its trees instead of buffering.
    pub fn buffer_memory(mut self, total_bytes: u64, limit_bytes: u64) -> Self {
        self.options.buffer_limit_bytes = limit_bytes.max(1);
        self.options.buffer_total_bytes = total_bytes.min(self.options.buffer_limit_bytes);
        self
    }

    /// Transactions whose WAL record would exceed this commit by a direct
    /// checkpoint instead (default 32 MiB, capped by what one WAL segment
    /// holds; at least [`MIN_WAL_RECORD_BYTES`], so the engine's own small
    /// records, such as a fold round's, are always logged).
    pub fn wal_record_max_bytes(mut self, bytes: usize) -> Self {
        self.options.wal_record_max_bytes = bytes.max(MIN_WAL_RECORD_BYTES);
        self
    }

    /// An `Immediate` transaction whose WAL record is at least this large (default
    /// [`DEFAULT_DIRECT_COMMIT_BYTES`], 4 MiB) and whose new tree pages
    /// take no more than twice its record's bytes — an import into new
    /// or small tables — commits by a direct checkpoint: its data is
    /// written once, to the data file, instead of to the WAL now and to
    /// the data file again at the next checkpoint, and no background
    /// checkpoint of it is left to compete with later commits' syncs
    /// (design.md "Commit", *Written once*). Such a transaction is not
    /// buffered when each of its tables held fewer entries than it
    /// writes there. `usize::MAX` turns this off.
    pub fn direct_commit_bytes(mut self, bytes: usize) -> Self {
        self.options.direct_commit_bytes = bytes.max(1);
        self
    }

    /// Checkpoint triggers: WAL bytes since the last checkpoint (default
    /// 64 MiB), dirty bytes (default 256 MiB), and the hard dirty limit
    /// past which writers run the checkpoint themselves (default 512 MiB).
    pub fn checkpoint_triggers(
        mut self,
        wal_bytes: u64,
        dirty_bytes: u64,
        hard_limit_bytes: u64,
    ) -> Self {
        self.options.checkpoint_wal_bytes = wal_bytes;
        self.options.checkpoint_dirty_bytes = dirty_bytes;
        self.options.dirty_hard_limit_bytes = hard_limit_bytes.max(dirty_bytes);
        self
    }

    /// Timer of the background checkpointer (default 30 s; at least 1 ms,
    /// as [`Builder::sync_interval`]).
    pub fn checkpoint_interval(mut self, every: Duration) -> Self {
        self.options.checkpoint_interval = every.max(MIN_SYNC_INTERVAL);
        self
    }

    /// Turns the background checkpoint thread off (checkpoints then run on
    /// `checkpoint()`, past the hard dirty limit, and at close), and with
    /// it the other background file work: spare WAL segments made ahead of
    /// need (a segment switch then creates its file itself).
    pub fn background_checkpoints(mut self, on: bool) -> Self {
        self.options.background_checkpoints = on;
        self
    }

    /// Page size for a new file (power of two, 4 KiB to 64 KiB). Ignored
    /// when opening an existing file, which keeps its own.
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_size = bytes;
        self
    }

    /// Budget of the clean-page cache (default 1 GiB; memory is used only
    /// as pages are read).
    pub fn cache_size_bytes(mut self, bytes: usize) -> Self {
        self.cache_bytes = bytes;
        self
    }

    /// Size of a column family's first extent and the cap on its growth
    /// step (defaults 1 MiB and 64 MiB; at most [`MAX_EXTENT_BYTES`], or
    /// the open fails with `InvalidArgument`).
    pub fn extent_sizes(mut self, first_bytes: u64, max_bytes: u64) -> Self {
        self.extent_first_bytes = Some(first_bytes);
        self.extent_max_bytes = Some(max_bytes);
        self
    }

    /// `InvalidArgument` for an extent size past [`MAX_EXTENT_BYTES`]
    /// (such a size made the first commit try to allocate terabytes of
    /// cache bookkeeping and abort the process; an adversarial probe).
    fn check_extent_sizes(&self) -> Result<()> {
        let sizes = [self.extent_first_bytes, self.extent_max_bytes];
        match sizes.into_iter().flatten().find(|&b| b > MAX_EXTENT_BYTES) {
            Some(b) => Err(Error::InvalidArgument(format!(
                "extent size {b} bytes is past the limit of {MAX_EXTENT_BYTES} bytes"
            ))),
            None => Ok(()),
        }
    }

    fn policy(&self, page_size: usize) -> ExtentPolicy {
        let d = ExtentPolicy::for_page_size(page_size);
        let ps = page_size as u64;
        let first = self
            .extent_first_bytes
            .map_or(d.first_pages, |b| (b / ps).max(1));
        let max = self
            .extent_max_bytes
            .map_or(d.max_pages, |b| (b / ps).max(first));
        ExtentPolicy {
            first_pages: first,
            max_pages: max,
        }
    }

    /// Opens read-only (`open` only; `create` refuses): a shared lock on
    /// the data file (other read-only openers may hold it too, a
    /// read-write opener excludes them and they it), no write to the data
    /// file or the WAL, no sync. WAL records past the last checkpoint are
    /// replayed into memory only, so the database reads as a read-write
    /// open would show it. Every write (transactions, column-family
    /// changes, `checkpoint`, `sync`) returns `Error::ReadOnly`.
    pub fn read_only(mut self, on: bool) -> Self {
        self.read_only = on;
        self
    }

    /// What an open does when a WAL frame in the middle of the log is
    /// damaged: replay must stop there, and a later frame proves the log
    /// went on durably past it (so acknowledged commits would be lost; a
    /// torn tail after a crash never looks like this). By default
    /// (`false`) the open fails with `Error::Corrupted` naming the frame
    /// and changes nothing, so the files can be copied or repaired first.
    /// With `true` the open goes on with the log up to the damage: the
    /// commits after it are given up, `Database::wal_damage` says where,
    /// and a read-write open makes that final (it checkpoints, and the log
    /// continues past every damaged segment).
    pub fn salvage_damaged_wal(mut self, on: bool) -> Self {
        self.options.salvage_damaged_wal = on;
        self
    }

    /// What an open does when the data file's last checkpoint says its WAL
    /// may hold newer commits and no WAL file is beside it (deleted by
    /// hand, or the data file copied or moved without its `NAME-wal.*`
    /// files): by default (`false`) the open fails with
    /// `Error::WalMismatch` and changes nothing, so the files can be put
    /// back. With `true` it opens the database as of that checkpoint: the
    /// commits after it are gone. A cleanly closed database needs no WAL
    /// file and opens either way.
    pub fn accept_missing_wal(mut self, on: bool) -> Self {
        self.options.accept_missing_wal = on;
        self
    }

    /// Whether checkpoints give the file system back the blocks of long
    /// runs of free pages inside the data file (holes punched with
    /// `fallocate(PUNCH_HOLE)`; default `true`). Removed data then stops
    /// occupying disk space at the first checkpoint after its pages are
    /// free, without a compaction: the file keeps its length (`ls`), its
    /// allocated size (`du`) drops. A checkpoint punches once the free
    /// pages not yet given back, in runs of 64 KiB or more, are an eighth
    /// of the file and at least 1 MiB, so a file's steady churn of pages
    /// freed and reused soon is left alone.
    /// Where the file system cannot punch holes (or off Linux) nothing is
    /// given back and nothing fails. Compaction still moves pages and
    /// shortens the file.
    pub fn punch_holes(mut self, on: bool) -> Self {
        self.options.punch_holes = on;
        self
    }

    /// Opens the database at `path`, creating it if missing.
    pub fn create(&self, path: impl AsRef<Path>) -> Result<Database> {
        let (vfs, name) = split_path(path.as_ref())?;
        self.create_with_vfs(Arc::new(vfs), &name)
    }

    /// Opens an existing database at `path`.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Database> {
        let (vfs, name) = split_path(path.as_ref())?;
        self.open_with_vfs(Arc::new(vfs), &name)
    }

    /// Opens `name` in `vfs`, creating it if missing.
    pub fn create_with_vfs(&self, vfs: Arc<dyn Vfs>, name: &str) -> Result<Database> {
        open::open(self, vfs, name, true)
    }

    /// Opens an existing `name` in `vfs`.
    pub fn open_with_vfs(&self, vfs: Arc<dyn Vfs>, name: &str) -> Result<Database> {
        open::open(self, vfs, name, false)
    }
}

/// The directory every later file operation of the database resolves
/// its names in, and the data file's name there.
///
/// The directory is absolute: a relative one was resolved again at every
/// operation, so a process that changed its working directory while the
/// database was open created WAL segments in the new one (acknowledged
/// commits missing at the next open, and a same-named database there lost
/// its WAL; a session-34 probe). Symlinks are resolved, so the WAL files
/// sit beside the data file itself, named after it: opened through a link,
/// they used to go beside the link under its name, and a later open
/// through the real name found an older log (the same probe).
fn split_path(path: &Path) -> Result<(FsVfs, String)> {
    let no_name = |p: &Path| {
        Error::InvalidArgument(format!(
            "{} has no file name, or one that is not UTF-8",
            p.display()
        ))
    };
    path.file_name().ok_or_else(|| no_name(path))?;
    let resolved = resolve_path(path);
    let name = (resolved.file_name().and_then(|n| n.to_str())).ok_or_else(|| no_name(path))?;
    let dir = match resolved.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    Ok((FsVfs::new(dir), name.to_string()))
}

/// `path` made absolute, through symlinks where it exists (the file, or
/// else its directory); as given, made absolute, where nothing resolves
/// (the open's own error then names it). A dangling symlink is followed
/// to where its target would be, which is where `create` makes the file
/// (a session-34 review: the WAL went beside the link, and an open
/// through the link after a crash looked beside the target).
fn resolve_path(path: &Path) -> std::path::PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    let mut abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // At most as many links as the kernel follows (ELOOP past 40).
    for _ in 0..40 {
        let Ok(target) = std::fs::read_link(&abs) else {
            break;
        };
        abs = match abs.parent() {
            Some(dir) => dir.join(target),
            None => target,
        };
    }
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .unwrap_or_else(|_| dir.to_path_buf())
            .join(name),
        _ => abs,
    }
}

/// An open database. Cheap to share: wrap it in an `Arc` or use it from
/// scoped threads; every method takes `&self`.
#[derive(Debug)]
pub struct Database {
    shared: Arc<DbShared>,
}

impl Database {
    /// Opens the database at `path`, creating it if missing, with default
    /// options.
    pub fn create(path: impl AsRef<Path>) -> Result<Database> {
        Builder::default().create(path)
    }

    /// Opens an existing database at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Database> {
        Builder::default().open(path)
    }

    /// Opens an existing database at `path` read-only (see
    /// [`Builder::read_only`]): it never writes to the data file or the
    /// WAL, and several read-only openers may share it.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Database> {
        Builder::default().read_only(true).open(path)
    }

    /// True if this database was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.shared.health.is_read_only()
    }

    /// Options for creating or opening.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Starts a write transaction on the default column family, waiting for
    /// the one in progress (if any) to finish.
    pub fn begin_write(&self) -> Result<WriteTransaction> {
        WriteTransaction::begin(
            self.shared.clone(),
            self.shared.registry.get(CfId::DEFAULT)?,
        )
    }

    /// Starts a write transaction on the default column family only if no
    /// other one is in progress: `Error::WriterBusy` at once otherwise.
    pub fn try_begin_write(&self) -> Result<WriteTransaction> {
        WriteTransaction::try_begin(
            self.shared.clone(),
            self.shared.registry.get(CfId::DEFAULT)?,
        )
    }

    /// Takes a snapshot of every column family at one instant (a multi-CF
    /// commit is in all of its CFs or in none). `open_table` on it reads the
    /// default CF. Never blocks: one atomic load.
    pub fn begin_read(&self) -> Result<ReadTransaction> {
        self.shared.health.check_not_closed()?;
        Ok(ReadTransaction::for_db(self.shared.clone()))
    }

    /// Verifies checksums, tree order and key bounds, page ownership,
    /// allocator agreement and catalog counts (design.md §11).
    pub fn check_integrity(&self) -> Result<IntegrityReport> {
        self.check_integrity_with(&mut |_, _| {})
    }

    /// [`Database::check_integrity`], calling `progress(pages_done,
    /// pages_total)` as it goes: first with 0 done, then after each page
    /// run it visits, and with `pages_done == pages_total` when the check
    /// passes. `pages_total` is the pages in use (system and every CF)
    /// when the check begins; on a damaged file the count stops there.
    /// The callback runs with the database quiesced (every CF's writer
    /// held): it must not use the database.
    pub fn check_integrity_with(
        &self,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<IntegrityReport> {
        self.shared.health.check_not_closed()?;
        integrity::check(&self.shared, progress)
    }

    /// Writes every published commit into the data file and lets the WAL
    /// behind it be recycled (design.md §6). Readers and writers keep running.
    pub fn checkpoint(&self) -> Result<()> {
        self.shared.check_open()?;
        self.shared.checkpoint_all()
    }

    /// One fold round of every column family with buffered commits, then
    /// a checkpoint; true if rounds are left. Tests use it to leave a fold
    /// half done among other operations (`checkpoint` runs every round).
    #[doc(hidden)]
    pub fn fold_step(&self) -> Result<bool> {
        self.shared.check_open()?;
        integrity::refuse_inside_callback("a fold")?;
        let more = !(self.shared.fold_all(commit::Patience::Grow)?.more).is_empty();
        self.shared.checkpoint_including(Vec::new())?;
        Ok(more)
    }

    /// Buffered entries the last rounds of folds carried into new buffers
    /// since open, as (copied before the writer lock, copied under it).
    /// For tests (design.md "Fold rounds", *The carry*).
    #[doc(hidden)]
    pub fn fold_carried(&self) -> (u64, u64) {
        let [early, locked] = &self.shared.carried;
        (
            early.load(Ordering::Relaxed),
            locked.load(Ordering::Relaxed),
        )
    }

    /// Makes every committed transaction durable, whatever its
    /// [`Durability`].
    pub fn sync(&self) -> Result<()> {
        self.shared.check_open()?;
        self.shared
            .wal()
            .sync()
            .inspect_err(|e| self.shared.poison(e))
    }

    /// WAL records recovery applied when this database was opened (0 after
    /// a clean close).
    pub fn replayed_records(&self) -> u64 {
        self.shared.replayed_records.load(Ordering::Relaxed)
    }

    /// The damage this open salvaged the WAL around
    /// ([`Builder::salvage_damaged_wal`]), if any: the commits from
    /// `lost_from_lsn` on were lost.
    pub fn wal_damage(&self) -> Option<&WalDamage> {
        self.shared.wal_damage.get()
    }

    /// A damaged WAL frame that this open found below the last
    /// checkpoint's replay start and walked past, if any: its LSN. The
    /// checkpoint already held every record below that start, so nothing
    /// was lost, but bytes that were durable changed on disk: a sign of a
    /// failing disk or of writes from outside.
    pub fn wal_damage_passed(&self) -> Option<u64> {
        self.shared.wal_damage_passed.get().copied()
    }

    /// Bytes committed but not yet written by a checkpoint.
    pub fn dirty_bytes(&self) -> u64 {
        self.shared.ckpt.dirty_bytes()
    }

    /// Memory the page cache holds: clean runs (bounded by the cache
    /// budget) and dirty runs (committed, or pinned by old snapshots, and
    /// not yet written: bounded by the checkpoint triggers).
    pub fn memory_stats(&self) -> MemoryStats {
        let cache = self.shared.space.pager.cache();
        MemoryStats {
            clean_bytes: cache.bytes() as u64,
            dirty_bytes: cache.dirty_bytes() as u64,
            buffered_bytes: self.shared.budget.used(),
            buffer_limit_bytes: self.shared.budget.limit(),
            buffer_stalls: self.shared.budget.stalls(),
            key_filter_bytes: self.shared.filter_budget.used(),
            key_filter_limit_bytes: self.shared.filter_budget.limit(),
            key_filter_skips: self.shared.filter_budget.skipped(),
            key_filter_builds: self.shared.filter_budget.built(),
        }
    }

    /// Builds every column family's key filter now, waiting for each
    /// one's writer (`WouldDeadlock` if this thread holds one); the
    /// background thread does this on its own. For tests.
    #[doc(hidden)]
    pub fn build_key_filters(&self) -> Result<()> {
        self.shared.check_open()?;
        integrity::refuse_inside_callback("building key filters")?;
        key_filter::build_all(&self.shared, key_filter::Wait::Block).map(drop)
    }

    /// Statistics of the WAL (records, bytes, syncs).
    pub fn wal_stats(&self) -> crate::wal::WalStats {
        self.shared.wal().stats()
    }

    /// Compacts the data file online: moves the pages in use at the end
    /// of the file into free space before it (copy-on-write, one commit
    /// per column family, each made durable by a checkpoint), then cuts
    /// the file back, in steps, until it is as short as it gets. Readers
    /// and writers keep running (a writer of a CF being moved waits for
    /// that one commit); a snapshot keeps every page it reads, so pages an
    /// open snapshot holds stay until it is dropped. Returns what it gave
    /// back (design.md "Space").
    pub fn compact(&self) -> Result<CompactReport> {
        integrity::refuse_inside_callback("a compaction")?;
        self.shared.compact()
    }

    /// One bounded step of [`Database::compact`]: moves at most about
    /// `max_bytes` of the file's tail, then cuts. Call it again while
    /// `CompactReport::done` is false to compact a large file without a
    /// long pause. A step that can move nothing within `max_bytes` (the
    /// pages past that limit have nowhere to go below it) tries again
    /// with half the reach, down to 256 KiB, before it says `done`. It
    /// waits for a write transaction in progress on a CF it moves.
    pub fn compact_step(&self, max_bytes: u64) -> Result<CompactReport> {
        integrity::refuse_inside_callback("a compaction")?;
        self.shared.compact_step(max_bytes)
    }

    /// Page size of the file.
    pub fn page_size(&self) -> usize {
        self.shared.space.pager.page_size()
    }

    /// Length of the data file in bytes, as recorded by the last checkpoint.
    pub fn file_len_bytes(&self) -> u64 {
        self.shared.space.extents.lock().file_pages() * self.page_size() as u64
    }

    /// Closes cleanly: waits for commits in flight, stops background work
    /// and checkpoints, so the next open replays nothing and every commit
    /// acknowledged before is durable. Dropping the database does the same
    /// but cannot report an error.
    ///
    /// Handles that outlive it (column families, transactions) then fail
    /// with `Error::DatabaseClosed` for every write and every new snapshot;
    /// a snapshot taken before keeps reading. The file stays locked until
    /// the last of them is dropped.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&self) -> Result<()> {
        // Inside an integrity check's progress callback this thread holds
        // locks the background threads and a checkpoint may wait for:
        // joining them or checkpointing would wait on itself.
        let refused = integrity::refuse_inside_callback("closing the database");
        match refused {
            Ok(()) => self.shared.stop_threads(),
            Err(_) => self.shared.signal_threads_to_stop(),
        }
        if !self.shared.health.mark_closed() || self.shared.health.is_read_only() {
            return Ok(());
        }
        self.shared.health.check_writable()?;
        if let Err(e) = refused {
            // Every acknowledged commit is made durable in the WAL (the
            // next open replays it), so the close loses nothing; the
            // checkpoint is what it cannot do here. Before, the refused
            // checkpoint returned early past this sync: a `None` commit
            // acknowledged before was lost.
            self.shared
                .wal()
                .sync()
                .inspect_err(|e| self.shared.poison(e))?;
            return Err(e);
        }
        self.shared.checkpoint_all()?;
        self.shared
            .wal()
            .sync()
            .inspect_err(|e| self.shared.poison(e))?;
        // Nothing is left to replay: the log keeps only its open file.
        self.shared.give_back_wal(0);
        Ok(())
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
