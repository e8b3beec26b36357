//! The write-ahead log: framing, segments, group commit, recycling, replay.
//!
//! Owns: the WAL of one database file `NAME` — the segment files
//! `NAME-wal.0`, `NAME-wal.1`, … (slot numbers, not sequence numbers) in the
//! same [`Vfs`] — and everything about them: the frame and header layouts
//! (`frame.rs`, `segment.rs`, each with its byte table), record placement
//! and segment recycling (`layout.rs`), the I/O (`io.rs`), replay at open
//! (`replay.rs`, which also states how the chain of segment uses is found
//! through each header's `prev_salt`), group commit and durability waits
//! ([`Wal`]), and the payload codec of commit records ([`record`]).
//!
//! Must not know: B-trees, pages, transactions, column-family state. The
//! database gives it opaque payloads and LSN thresholds; `record` encodes
//! logical operations by `CfId`/`TableId` but never applies them.
//!
//! # LSNs
//!
//! An LSN is the logical byte position of a frame in the log, monotonic
//! across segments. A use of a segment covers `[start_lsn, start_lsn +
//! capacity)`. A frame never spans segments: when a frame does not fit in
//! the rest of the current use, the writer starts a new use whose start LSN
//! is the LSN where the skipped space began, so the skipped bytes get no
//! LSNs of their own and `end` of one use = `start` of the next. The first
//! record of a new log has LSN [`FIRST_LSN`] (4096), so `Lsn(0)` means
//! "before every record".
//!
//! # Group commit (design.md §4.1)
//!
//! One state behind a mutex: the pending steps (encoded frames and segment
//! switches), `written_lsn`, `synced_lsn`, and `io_in_progress`. A caller
//! that needs its record written (and possibly synced) loops: done if the
//! watermark is past its end; if no I/O round is running, it becomes the
//! leader: it takes every pending step, releases the mutex, writes them in
//! order (possibly across a segment switch), `fdatasync`s every file written
//! since the last sync (for a durable wait), re-takes the mutex, and sets
//! the watermarks to the end of the last record in what it wrote; otherwise
//! it waits on the condition variable. Everyone is woken after each round
//! and loops, so one of the waiters leads the next round: no lost wake-ups,
//! no premature acknowledgement. Only one round runs at a time, so bytes are
//! written exactly once and in LSN order whether the round was started by a
//! durable or a written-only wait.
//!
//! A failed write or sync **poisons** the WAL: the failing leader returns
//! the I/O error, every waiting and later call returns `Error::Poisoned`,
//! and nothing is retried.
//!
//! # Invariants
//!
//! - `synced_lsn <= written_lsn <= next_lsn`; `synced_lsn` never exceeds
//!   the end of the last record actually written before the sync that set
//!   it (design.md §11.5): it is set only from the steps the leader wrote.
//! - Watermarks only grow; pending steps are in LSN order.
//! - A segment slot is reused only when its use lies wholly below the
//!   release point; a reused segment gets a new sequence number, salt and
//!   start LSN, so its stale frames are rejected (salt, LSN continuity).
//! - After open, new records always start in a fresh use (new sequence and
//!   salt), so bytes after a torn tail can never extend the log later.
//! - No mutex is held during I/O.

mod anchor;
mod frame;
mod io;
mod layout;
pub mod record;
mod replay;
mod segment;
#[cfg(test)]
mod tests;

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, MutexGuard};

use crate::lock_rank::{ranks, RankedMutex};

pub use anchor::{Anchor, AnchorKind, Announcer, ANCHOR_BYTES, ANCHOR_OFFSET};
pub use frame::FRAME_HEADER_BYTES;
pub use replay::{LogDamage, ReplaySummary};
pub use segment::{FIRST_LSN, HEADER_BLOCK_BYTES, MIN_SEGMENT_BYTES};

/// True if `file` is a WAL segment file of the database file `db_name`.
pub fn is_segment_of(db_name: &str, file: &str) -> bool {
    segment::parse_segment_name(db_name, file).is_some()
}

/// The data file `file` would be a WAL segment of, if its name has the
/// shape of one (`NAME-wal.N`): a database or backup must not be given
/// such a name, since opening `NAME` takes the file for a segment of its
/// log (and deletes it when the log shrinks).
pub fn segment_owner(file: &str) -> Option<&str> {
    let (base, _) = file.rsplit_once("-wal.")?;
    (!base.is_empty() && is_segment_of(base, file)).then_some(base)
}

use self::io::SegmentIo;
use self::layout::{
    steps_end, Layout, LinkFrom, PreparedFrame, Resume, SegmentSizes, SlotMeta, Step, UseMeta,
};
use self::replay::{Recovered, ScannedSlot};
use crate::error::{Error, PoisonCause, Result, WAL_MISSING_HINT};
use crate::storage::{Storage, Vfs};
use crate::types::Lsn;

/// Sizes of the WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalOptions {
    /// The working size of a segment file, header block included: a
    /// multiple of 4096, at least 8 KiB (`MIN_SEGMENT_BYTES`). No file is
    /// larger.
    pub segment_bytes: u64,
    /// Size of the first segment file a new log creates (each new file
    /// then doubles up to `segment_bytes`): a multiple of 4096 between
    /// 8 KiB and `segment_bytes`.
    pub min_segment_bytes: u64,
    /// Largest payload `append` accepts; at most `segment_bytes -
    /// HEADER_BLOCK_BYTES - FRAME_HEADER_BYTES` (a frame fits in one
    /// segment). Larger commits must be made durable another way.
    pub max_record_bytes: u64,
    /// Identity of the database the WAL belongs to: written into every
    /// segment header; open refuses segments with another one.
    pub db_id: u64,
    /// Generation of the durable superblock: written into new segment
    /// headers; open refuses segments begun under a later generation
    /// (the data file is older than its WAL).
    pub generation: u64,
    /// Replay only: segment files are opened read-only and never synced,
    /// and `append` refuses (`Error::ReadOnly`).
    pub read_only: bool,
    /// The data file's other superblock slot did not decode: then a
    /// segment begun under a later generation than `generation` means
    /// the newest superblock was damaged (`Corrupted`), not that the data
    /// file is an older copy.
    pub superblock_damaged: bool,
    /// When replay proves records past a damaged frame were durable
    /// (`ReplaySummary::damage`), open the log up to the damage instead of
    /// failing with `Corrupted`: the records after it are given up.
    pub salvage: bool,
    /// The WAL anchor the data file holds (rule O16), when its base says
    /// the WAL is required: open refuses a log that no longer reaches the
    /// use it names. `None` checks nothing.
    pub anchor: Option<Anchor>,
    /// The data file's base says the log holds nothing past `from` (a
    /// clean close): a record there belongs to another copy's log.
    pub log_ended: bool,
}

impl WalOptions {
    /// Options for segments of `segment_bytes`, accepting the largest
    /// payload that fits in one.
    pub fn with_segment_bytes(segment_bytes: u64) -> WalOptions {
        WalOptions {
            segment_bytes,
            min_segment_bytes: segment_bytes.min(DEFAULT_MIN_SEGMENT_BYTES),
            max_record_bytes: segment_bytes
                .saturating_sub(HEADER_BLOCK_BYTES + FRAME_HEADER_BYTES as u64),
            db_id: 0,
            generation: 0,
            read_only: false,
            superblock_damaged: false,
            salvage: false,
            anchor: None,
            log_ended: false,
        }
    }

    fn validate(&self) -> Result<()> {
        if !segment::is_valid_segment_bytes(self.segment_bytes) {
            return Err(Error::InvalidArgument(format!(
                "WAL segment_bytes {} must be a multiple of 4096 between {} and {}",
                self.segment_bytes,
                MIN_SEGMENT_BYTES,
                segment::MAX_SEGMENT_BYTES
            )));
        }
        if !segment::is_valid_segment_bytes(self.min_segment_bytes)
            || self.min_segment_bytes > self.segment_bytes
        {
            return Err(Error::InvalidArgument(format!(
                "WAL min_segment_bytes {} must be a multiple of 4096 between {} and \
                 segment_bytes ({})",
                self.min_segment_bytes, MIN_SEGMENT_BYTES, self.segment_bytes
            )));
        }
        let most = self.segment_bytes - HEADER_BLOCK_BYTES - FRAME_HEADER_BYTES as u64;
        if self.max_record_bytes > most.min(u64::from(u32::MAX)) {
            return Err(Error::InvalidArgument(format!(
                "WAL max_record_bytes {} exceeds what one segment holds ({most})",
                self.max_record_bytes
            )));
        }
        Ok(())
    }
}

impl Default for WalOptions {
    /// 32 MiB segments.
    fn default() -> Self {
        WalOptions::with_segment_bytes(32 << 20)
    }
}

/// First segment size of a new log (`WalOptions::min_segment_bytes`
/// default): small enough that a small database has a small log.
pub const DEFAULT_MIN_SEGMENT_BYTES: u64 = 64 << 10;

/// How far the log was written and synced when someone looked: lower
/// bounds of the watermarks from then on (they only grow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogMarks {
    pub written: Lsn,
    pub synced: Lsn,
}

/// Counters for benchmarks and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Records appended.
    pub records: u64,
    /// Frame bytes appended (headers included).
    pub bytes: u64,
    /// I/O rounds that wrote records.
    pub write_rounds: u64,
    /// I/O rounds that synced (each shared by every record it covered).
    pub syncs: u64,
    /// Segment files created.
    pub segments_created: u64,
    /// Segment uses started in a recycled file.
    pub segments_recycled: u64,
}

/// The write-ahead log of one database. `Send + Sync`; used through `&self`.
pub struct Wal {
    state: RankedMutex<State, { ranks::WAL_STATE }>,
    /// Signalled after every I/O round.
    round_done: Condvar,
    /// Copies of `written_lsn` and `synced_lsn`, stored after the state's
    /// (so never ahead of them), for [`Wal::marks`] without the mutex.
    written_copy: AtomicU64,
    synced_copy: AtomicU64,
    opts: WalOptions,
    /// Where spare segment files are made ([`Wal::prepare_spare`]).
    vfs: Arc<dyn Vfs>,
    name: String,
}

#[derive(Debug)]
struct State {
    layout: Layout,
    /// End of the last record handed to the OS.
    written_lsn: Lsn,
    /// End of the last record known durable.
    synced_lsn: Lsn,
    io_in_progress: bool,
    /// Set by a failed round: the first failure, returned to every later
    /// call as `Error::Poisoned`.
    poisoned: Option<PoisonCause>,
    /// Present whenever no round is in progress (the leader moves it out).
    io: Option<Box<SegmentIo>>,
    stats: WalStats,
    /// Wakes the flusher to make a spare (`Wal::start_flusher` with
    /// spares), sent once per segment use, by the append that finds one
    /// due ([`Wal::ask_for_spare`]).
    spare_wake: Option<mpsc::Sender<Wake>>,
    /// Start of the use a spare was last asked for.
    spare_asked: Option<Lsn>,
}

/// What wakes the flusher before its tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// The handle was dropped: exit.
    Stop,
    /// A spare segment became due: make it now, not at the next tick.
    Spare,
}

/// How far a waiter needs its record to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Written,
    Durable,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("Wal")
            .field("next_lsn", &st.layout.next_lsn)
            .field("written_lsn", &st.written_lsn)
            .field("synced_lsn", &st.synced_lsn)
            .field("poisoned", &st.poisoned)
            .finish_non_exhaustive()
    }
}

/// Opens (creating if missing) the WAL of `name` in `vfs` and replays every
/// valid record with `lsn >= from`, in LSN order, through `apply`.
///
/// Replay stops at the first invalid record (torn tail, zeroed space, stale
/// salt, LSN discontinuity, bad crc, impossible length); see
/// [`ReplaySummary`]. The returned WAL appends new records in a fresh
/// segment use starting at `max(end of log, from)`.
///
/// `from` is also the release point: segments wholly below it may be
/// recycled. It must not exceed the end of the log as last written (the
/// database passes the lowest checkpoint LSN of its column families).
/// An error from `apply` aborts the open and is returned.
pub fn open(
    vfs: Arc<dyn Vfs>,
    name: &str,
    opts: WalOptions,
    from: Lsn,
    apply: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>,
) -> Result<(Wal, ReplaySummary)> {
    opts.validate()?;
    let scanned = replay::scan_segments(&*vfs, name, opts.read_only)?;
    replay::check_identity(&scanned, name, &opts)?;
    let recovered = replay::replay(&scanned, name, from, opts.salvage, apply)?;
    // After replay, so that damage it can name precisely (a cut, a use a
    // link names) is reported as such; a salvage accepts what is missing.
    let anchor = opts.anchor.filter(|_| !opts.salvage);
    if let Some(missing) = anchor.and_then(|a| a.missing(&scanned, from)) {
        return Err(Error::WalMismatch(format!(
            "{name}: {missing}: the newest WAL file was deleted, emptied or replaced, and the \
             commits in it are missing; nothing was changed. Put the WAL files back \
             {WAL_MISSING_HINT}"
        )));
    }
    if opts.log_ended && recovered.summary.records_replayed > 0 {
        // A clean close covered the whole log, and records are appended
        // only after an open wrote "required" again (rule O13): these are
        // another copy's (a second name for the data file, or a WAL copied
        // in). Applying them would build a state no copy had.
        return Err(Error::WalMismatch(format!(
            "{name} was closed cleanly with its log ending at LSN {}, but the WAL files beside \
             it hold {} records after that: they belong to another copy of this database \
             (opened under another name, or copied); nothing was changed",
            from.0, recovered.summary.records_replayed
        )));
    }
    let resume = resume_after(&scanned, &recovered, &opts, from);
    let next_lsn = resume.next_lsn;
    let mut files: Vec<Option<Arc<dyn Storage>>> = vec![None; resume.slots.len()];
    for s in &scanned {
        files[s.slot] = Some(Arc::clone(&s.file));
    }
    let io = SegmentIo::new(vfs.clone(), name, files);
    let sizes = SegmentSizes {
        min_bytes: opts.min_segment_bytes,
        max_bytes: opts.segment_bytes,
    };
    let wal = Wal {
        state: RankedMutex::new(State {
            layout: Layout::resume(sizes, resume),
            written_lsn: next_lsn,
            synced_lsn: next_lsn,
            io_in_progress: false,
            poisoned: None,
            io: Some(Box::new(io)),
            stats: WalStats::default(),
            spare_wake: None,
            spare_asked: None,
        }),
        round_done: Condvar::new(),
        written_copy: AtomicU64::new(next_lsn.0),
        synced_copy: AtomicU64::new(next_lsn.0),
        opts,
        vfs,
        name: name.to_owned(),
    };
    Ok((wal, recovered.summary))
}

/// How the writer continues after replay: which slots hold kept uses, and
/// where (and linked to what) the next use starts.
fn resume_after(scanned: &[ScannedSlot], rec: &Recovered, opts: &WalOptions, from: Lsn) -> Resume {
    let slot_count = scanned.iter().map(|s| s.slot + 1).max().unwrap_or(0);
    let mut slots = vec![SlotMeta::default(); slot_count];
    for s in scanned {
        // A file of another length (cut short, or not a segment size) is
        // preallocated again before it is used.
        let sized =
            segment::is_valid_segment_bytes(s.len_bytes) && s.len_bytes <= opts.segment_bytes;
        slots[s.slot] = SlotMeta {
            exists: true,
            bytes: if sized { s.len_bytes } else { 0 },
            holds: None,
            busy: false,
            spare: false,
        };
    }
    for &(i, end) in &rec.kept {
        let h = scanned[i].header.expect("kept uses have headers");
        debug_assert!(end >= h.start_lsn);
        slots[scanned[i].slot].holds = Some(UseMeta {
            seq: h.seq,
            salt: h.salt,
            start: h.start_lsn,
            end: Some(end),
        });
    }
    let end = rec.summary.end_lsn;
    let next_lsn = end.max(from).max(FIRST_LSN);
    // Link to the last use replayed only if the log continues exactly where
    // it ended; otherwise the next use starts a new chain.
    let prev_salt = match rec.last_salt {
        Some(salt) if next_lsn == end => salt,
        _ => 0,
    };
    // The next use links into the file of the use it continues (O15).
    let link_from = rec.kept.last().and_then(|&(i, _)| {
        let h = scanned[i].header.expect("kept uses have headers");
        (prev_salt != 0 && h.salt == prev_salt).then_some(LinkFrom {
            slot: scanned[i].slot,
            seq: h.seq,
            salt: h.salt,
        })
    });
    Resume {
        slots,
        next_lsn,
        released_lsn: from,
        next_seq: rec.max_seq + 1,
        prev_salt,
        link_from,
        db_id: opts.db_id,
        generation: opts.generation,
    }
}

/// Whether [`Wal::give_back`] also gives back the file the log appends
/// to, once every record in it is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retire {
    /// Never (the log is busy).
    No,
    /// If it is larger than the first size (an idle log, close).
    Large,
    /// Whatever its size (after a compaction, which makes the files as
    /// small as they get; the next record starts a small file).
    Any,
}

impl Wal {
    /// Appends one record to the in-process buffer; returns `(lsn, end)`
    /// where `end` is the LSN just past it. Does no I/O: the record reaches
    /// the OS at the next write round (any `wait_*`, `sync`, or the
    /// flusher), so callers that never wait must sync now and then to bound
    /// the buffer (`Durability::None` relies on later syncs).
    ///
    /// `Error::ValueTooLarge` if the payload exceeds `max_record_bytes`;
    /// `Error::Poisoned` after a failed write or sync; `Error::Io` of kind
    /// `StorageFull` (without poisoning) if a new segment is needed but all
    /// 65,536 slot numbers hold unreleased uses.
    pub fn append(&self, payload: &[u8]) -> Result<(Lsn, Lsn)> {
        if self.opts.read_only {
            return Err(Error::ReadOnly);
        }
        if payload.len() as u64 > self.opts.max_record_bytes {
            return Err(Error::ValueTooLarge {
                len: payload.len(),
                max: self.opts.max_record_bytes as usize,
            });
        }
        let frame = PreparedFrame::new(payload);
        let mut st = self.state.lock();
        if let Some(cause) = &st.poisoned {
            return Err(Error::Poisoned(cause.clone()));
        }
        let before = st.layout.next_lsn;
        let synced = st.synced_lsn;
        let (lsn, end) = (st.layout.push(frame, synced)).map_err(|_| slots_exhausted())?;
        // LSNs are issued in increasing order, past everything written.
        assert!(lsn >= before, "WAL issued {lsn:?} below its end {before:?}");
        assert!(end > lsn, "WAL record at {lsn:?} has no length");
        debug_assert!(lsn >= st.written_lsn && lsn >= st.synced_lsn);
        st.stats.records += 1;
        st.stats.bytes += end.0 - lsn.0;
        Self::ask_for_spare(&mut st);
        Ok((lsn, end))
    }

    /// Wakes the flusher once per segment use, at the first append that
    /// finds a spare due: at the flusher's tick (50 ms apart by default)
    /// a log growing by 1 MiB commits had often reached the switch before
    /// its spare was made, and the switching commit zero-filled its new
    /// file itself (23-45 ms; `examples/cf_writers`). Sending does not
    /// block.
    fn ask_for_spare(st: &mut State) {
        let Some(wake) = &st.spare_wake else { return };
        let open = st.layout.open_start();
        if open.is_none() || st.spare_asked == open || !st.layout.spare_due() {
            return;
        }
        st.spare_asked = open;
        // The flusher gone (exited after a failed sync): nothing to wake.
        let _ = wake.send(Wake::Spare);
    }

    /// Returns once the log is durable (`fdatasync`ed) past `end`
    /// (`Durability::Immediate`), sharing syncs with concurrent callers.
    pub fn wait_durable(&self, end: Lsn) -> Result<()> {
        self.wait_for(end, Need::Durable)
    }

    /// Returns once every byte before `end` was handed to the OS, written
    /// but not necessarily synced (`Durability::Eventual`).
    pub fn wait_written(&self, end: Lsn) -> Result<()> {
        self.wait_for(end, Need::Written)
    }

    /// Writes and syncs everything appended so far.
    pub fn sync(&self) -> Result<()> {
        let end = self.next_lsn();
        self.wait_durable(end)
    }

    /// Right after open, before any append: the next record gets an LSN of
    /// at least `lsn`. The database calls it when a recorded checkpoint LSN
    /// lies past the end of the recovered log (the log was damaged), so no
    /// new record can get an LSN a checkpoint already claims; it must then
    /// checkpoint before appending, since the skipped LSNs break the chain
    /// of uses. Returns whether the log end moved.
    pub fn skip_to(&self, lsn: Lsn) -> bool {
        let mut st = self.state.lock();
        let moved = st.layout.skip_to(lsn);
        if moved {
            // Nothing exists in the skipped range, so nothing there is
            // unwritten or unsynced.
            st.written_lsn = lsn;
            st.synced_lsn = lsn;
            self.copy_marks(&st);
        }
        moved
    }

    /// After a checkpoint made superblock generation `g` durable: uses
    /// begun from now on carry it.
    pub fn set_generation(&self, g: u64) {
        let mut st = self.state.lock();
        debug_assert!(g >= st.layout.generation, "generations only grow");
        st.layout.generation = g;
    }

    /// Declares records below `lsn` unneeded (every CF's checkpoint covers
    /// them): segments whose use lies wholly below become reusable.
    pub fn release_before(&self, lsn: Lsn) {
        self.state.lock().layout.release_before(lsn);
    }

    /// Deletes free segment files (no use replay could need) until at most
    /// `keep_bytes` of them remain, smallest first; never the file records
    /// are appended to. Runs like an I/O round (no lock held while files
    /// are deleted); if a round is running it does nothing this time.
    /// Returns the bytes given back. With `retire`, a released log also
    /// gives back its open file (`Layout::retire_open`): the next record
    /// starts a small one.
    pub fn give_back(&self, keep_bytes: u64, retire: Retire) -> Result<u64> {
        let mut st = self.state.lock();
        if st.io_in_progress || st.poisoned.is_some() || self.opts.read_only {
            return Ok(0);
        }
        if retire != Retire::No {
            st.layout.retire_open(retire == Retire::Any);
        }
        if st.layout.small_file_wanted() {
            // Rule O13 keeps the last file: make it a small one first. A
            // failure only keeps a larger file (nothing is poisoned).
            drop(st);
            let _ = self.make_small_file();
            st = self.state.lock();
            if st.io_in_progress || st.poisoned.is_some() {
                return Ok(0);
            }
        }
        let before = st.layout.slot_bytes();
        let saved = st.layout.slots_snapshot();
        let gone = st.layout.give_back(keep_bytes);
        if gone.is_empty() {
            return Ok(0);
        }
        let held: Vec<_> = (gone.iter())
            .filter_map(|&i| saved.get(i)?.holds.filter(|u| u.end.is_some()))
            .map(UseMeta::ended)
            .collect();
        let freed = before - st.layout.slot_bytes();
        // No spare may be made under these numbers until the files are gone.
        st.layout.set_deleting(&gone, true);
        let mut io = st.io.take().expect("I/O state is home between rounds");
        st.io_in_progress = true;
        let outcome = MutexGuard::unlocked(st.inner(), || {
            // Rule O16: the anchor leaves a use before its file goes.
            for used in &held {
                io.unanchor(*used).map_err(|e| (false, e))?;
            }
            (gone.iter()).try_for_each(|&slot| io.remove(slot).map_err(|e| (true, e)))
        });
        st.layout.set_deleting(&gone, false);
        if let Err((false, _)) = &outcome {
            // The anchor could not move: every file stays, counted as
            // before, so none is reused while the anchor names it.
            st.layout.restore_slots(&gone, &saved);
        }
        st.io = Some(io);
        st.io_in_progress = false;
        self.round_done.notify_all();
        // The files hold nothing needed: a failed deletion leaves a file
        // the writer no longer counts (recreated or reused later; the
        // anchor was moved off it first).
        outcome.map(|()| freed).map_err(|(_, e)| Error::Io(e))
    }

    /// Rule O16: from now on the WAL anchor in the data file follows the
    /// log through `announcer`; writes the anchor for the log as it is
    /// now (it ends at the next LSN, after the use the next one continues),
    /// so that no earlier anchor names a use this open may give back (an
    /// abandoned use, or one the open's checkpoint releases). Called once,
    /// after `skip_to`, before the first append, by a read-write open.
    pub fn start_anchoring(&self, announcer: Announcer) -> Result<()> {
        let mut st = self.state.lock();
        if self.opts.read_only {
            return Ok(());
        }
        debug_assert!(
            !st.io_in_progress && !st.layout.begin_pending(),
            "anchoring starts before the first append"
        );
        let (seq, salt) = st.layout.continued_use();
        let anchor = Anchor {
            kind: AnchorKind::Ended,
            db_id: self.opts.db_id,
            seq,
            salt,
            lsn: st.layout.next_lsn,
        };
        let io = st.io.as_mut().expect("I/O state is home between rounds");
        io.set_announcer(announcer);
        io.announce(anchor).map_err(Error::Io)
    }

    /// Makes sure a segment file exists durably (file and directory
    /// entry), making a free one of the first size if the log has none:
    /// rule O13, before a superblock says the WAL is required. Does
    /// nothing for a read-only log.
    pub fn ensure_file(&self) -> Result<()> {
        if self.opts.read_only || self.state.lock().layout.slot_files() > 0 {
            return Ok(());
        }
        self.make_small_file()?;
        debug_assert!(
            self.segment_files() > 0,
            "O13: a file was made, none is counted"
        );
        Ok(())
    }

    /// Makes a free segment file of the first size
    /// ([`Wal::make_reserved_file`]).
    fn make_small_file(&self) -> Result<()> {
        let (slot, bytes) =
            (self.state.lock().layout.reserve_small_file()).ok_or_else(slots_exhausted)?;
        self.make_reserved_file(slot, bytes)
    }

    /// Makes a spare segment file ahead of the next switch, if the open
    /// use is half full and no free file could take the next use
    /// (`Layout::reserve_spare`): the file is created, zero-filled to the
    /// next segment size and made durable, directory entry included,
    /// without the WAL lock, so the commit that switches recycles it
    /// instead of zero-filling a new file (a 32 MiB segment took 23 ms,
    /// paid by one commit). Called on a thread the flusher starts.
    /// Returns whether it made one. A failure changes nothing durable or
    /// visible (the file holds no use, and open takes a file without a
    /// valid header for free space); the partial file is removed, the
    /// error returned, and no other spare is tried during the same use.
    pub fn prepare_spare(&self) -> Result<bool> {
        if self.opts.read_only {
            return Ok(false);
        }
        let (slot, bytes) = {
            let mut st = self.state.lock();
            if st.poisoned.is_some() {
                return Ok(false);
            }
            match st.layout.reserve_spare() {
                Some(reserved) => reserved,
                None => return Ok(false),
            }
        };
        self.make_reserved_file(slot, bytes).map(|()| true)
    }

    /// Makes the free file of `bytes` in `slot`, reserved by the layout
    /// (a spare, or the small file rule O13 keeps): created, zero-filled,
    /// durable with its directory entry, outside the lock and outside any
    /// round. A failure removes the partial file and frees the number
    /// (nothing is poisoned).
    fn make_reserved_file(&self, slot: usize, bytes: u64) -> Result<()> {
        let made = io::make_spare(&*self.vfs, &self.name, slot, bytes);
        if made.is_err() {
            // Best effort, while the number is still ours: a partial file
            // the writer does not count would hold disk space until the
            // number is used again (review finding).
            let _ = self.vfs.remove(&segment::segment_name(&self.name, slot));
        }
        (self.state.lock().layout).spare_done(slot, bytes, made.is_ok());
        made.map_err(Error::Io)
    }

    /// True if [`Wal::prepare_spare`] would make a spare now.
    pub fn spare_due(&self) -> bool {
        let st = self.state.lock();
        !self.opts.read_only && st.poisoned.is_none() && st.layout.spare_due()
    }

    /// Log bytes appended since `lsn` (frames, plus any skipped segment
    /// tails), for checkpoint triggers.
    pub fn bytes_since(&self, lsn: Lsn) -> u64 {
        self.next_lsn().0.saturating_sub(lsn.0)
    }

    /// The LSN the next record will get: the end of everything appended
    /// (a segment switch starts the new use exactly there).
    pub fn next_lsn(&self) -> Lsn {
        self.state.lock().layout.next_lsn
    }

    /// End of the log known durable.
    pub fn synced_lsn(&self) -> Lsn {
        self.state.lock().synced_lsn
    }

    /// The written and synced watermarks (lower bounds: read without the
    /// mutex, from copies stored after each change).
    pub fn marks(&self) -> LogMarks {
        LogMarks {
            written: Lsn(self.written_copy.load(Ordering::Acquire)),
            synced: Lsn(self.synced_copy.load(Ordering::Acquire)),
        }
    }

    /// Stores the copies [`Wal::marks`] reads; under the state's mutex,
    /// after the watermarks changed.
    fn copy_marks(&self, st: &State) {
        debug_assert!(self.written_copy.load(Ordering::Relaxed) <= st.written_lsn.0);
        debug_assert!(self.synced_copy.load(Ordering::Relaxed) <= st.synced_lsn.0);
        self.written_copy.store(st.written_lsn.0, Ordering::Release);
        self.synced_copy.store(st.synced_lsn.0, Ordering::Release);
    }

    /// True if something appended is not yet durable.
    pub fn has_unsynced(&self) -> bool {
        let st = self.state.lock();
        st.synced_lsn < st.layout.next_lsn
    }

    /// True after a failed write or sync.
    pub fn is_poisoned(&self) -> bool {
        self.state.lock().poisoned.is_some()
    }

    /// Why the WAL refuses work, if it does.
    pub fn poison_cause(&self) -> Option<PoisonCause> {
        self.state.lock().poisoned.clone()
    }

    /// Counters since open.
    pub fn stats(&self) -> WalStats {
        let st = self.state.lock();
        WalStats {
            segments_created: st.layout.switches.created,
            segments_recycled: st.layout.switches.recycled,
            ..st.stats
        }
    }

    /// Number of segment files (existing, or about to be created).
    pub fn segment_files(&self) -> usize {
        self.state.lock().layout.slot_files()
    }

    /// Bytes of the segment files (existing, or about to be created).
    pub fn file_bytes(&self) -> u64 {
        let st = self.state.lock();
        let bytes = st.layout.slot_bytes();
        debug_assert!(
            bytes == 0 || st.layout.slot_files() > 0,
            "segment bytes without segment files"
        );
        bytes
    }

    /// The options this WAL was opened with.
    pub fn options(&self) -> WalOptions {
        self.opts
    }

    /// Starts a thread that calls [`Wal::sync`] every `interval` while
    /// something is unsynced (`Durability::Eventual`). It holds only a weak
    /// reference, stops when the handle is dropped (joining it) or the WAL
    /// is gone, and exits after a failed sync (the WAL is then poisoned).
    /// With `spares`, it also starts a thread making a spare segment file
    /// when one is due ([`Wal::prepare_spare`]): at every tick, and when
    /// an append finds one due (`Wal::ask_for_spare`); the flusher
    /// joins it before it ends.
    /// `Error::Io` if the thread cannot be spawned.
    pub fn start_flusher(
        self: &Arc<Self>,
        interval: Duration,
        spares: bool,
        on_error: OnFlushError,
    ) -> Result<FlusherHandle> {
        let (wake_tx, wake_rx) = mpsc::channel::<Wake>();
        let wal = Arc::downgrade(self);
        let thread = std::thread::Builder::new()
            .name("sheafdb-wal-flusher".to_owned())
            .spawn(move || flusher_loop(&wal, &wake_rx, interval, spares, &*on_error))?;
        if spares {
            let mut st = self.state.lock();
            st.spare_wake = Some(wake_tx.clone());
            st.spare_asked = None;
        }
        Ok(FlusherHandle {
            stop: Some(wake_tx),
            thread: Some(thread),
        })
    }

    /// The group-commit loop of design.md §4.1.
    fn wait_for(&self, end: Lsn, need: Need) -> Result<()> {
        let mut st = self.state.lock();
        loop {
            if let Some(cause) = &st.poisoned {
                return Err(Error::Poisoned(cause.clone()));
            }
            if end > st.layout.next_lsn {
                return Err(Error::InvalidArgument(format!(
                    "WAL wait for {end:?} past the end of the log {:?}",
                    st.layout.next_lsn
                )));
            }
            if st.reached(end, need) {
                return Ok(());
            }
            if st.io_in_progress {
                self.round_done.wait(st.inner());
            } else {
                self.lead_round(st.inner(), need)?;
            }
        }
    }

    /// Runs one I/O round as leader: writes every pending step (and syncs,
    /// for `Need::Durable`) without holding the mutex, then publishes the
    /// new watermarks and wakes every waiter. The leader alone gets the I/O
    /// error of a failed round; the WAL is then poisoned.
    fn lead_round(&self, st: &mut MutexGuard<'_, State>, need: Need) -> Result<()> {
        debug_assert!(!st.io_in_progress);
        let steps = st.layout.take_pending();
        let end = steps_end(&steps).unwrap_or(st.written_lsn);
        debug_assert_eq!(end, st.layout.next_lsn, "pending steps cover the log");
        let mut io = st.io.take().expect("I/O state is home between rounds");
        st.io_in_progress = true;
        let outcome = MutexGuard::unlocked(st, || {
            panic::catch_unwind(AssertUnwindSafe(|| run_round(&mut io, &steps, need)))
        });
        st.io = Some(io);
        st.io_in_progress = false;
        st.layout.recycle(steps);
        let result = match outcome {
            Ok(result) => result,
            Err(payload) => {
                st.poisoned
                    .get_or_insert_with(|| PoisonCause::new("a panic during a WAL write or sync"));
                self.round_done.notify_all();
                panic::resume_unwind(payload);
            }
        };
        match &result {
            Ok(wrote) => {
                st.finish_round(end, need, *wrote);
                self.copy_marks(st);
            }
            Err(e) => {
                let cause = PoisonCause::io("WAL write or sync failed", e);
                st.poisoned.get_or_insert(cause);
            }
        }
        self.round_done.notify_all();
        result.map(|_| ()).map_err(Error::Io)
    }
}

/// `StorageFull` (not poisoning): a new use needs a slot number and every
/// one holds a use not yet released.
fn slots_exhausted() -> Error {
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::StorageFull,
        format!(
            "the WAL uses all {} segment slots; release (checkpoint) some",
            segment::MAX_SLOTS
        ),
    ))
}

/// The I/O of one round; returns whether frames were written.
fn run_round(io: &mut SegmentIo, steps: &[Step], need: Need) -> std::io::Result<bool> {
    let report = io.write_steps(steps)?;
    if need == Need::Durable && io.has_dirty() {
        io.sync_dirty()?;
    }
    Ok(report.writes > 0)
}

impl State {
    fn reached(&self, end: Lsn, need: Need) -> bool {
        match need {
            Need::Written => self.written_lsn >= end,
            Need::Durable => self.synced_lsn >= end,
        }
    }

    /// Publishes a successful round that wrote everything up to `end`.
    fn finish_round(&mut self, end: Lsn, need: Need, wrote: bool) {
        debug_assert!(end >= self.written_lsn && self.written_lsn >= self.synced_lsn);
        self.written_lsn = end;
        if wrote {
            self.stats.write_rounds += 1;
        }
        if need == Need::Durable {
            self.synced_lsn = end;
            self.stats.syncs += 1;
        }
        debug_assert!(self.synced_lsn <= self.written_lsn);
        debug_assert!(self.written_lsn <= self.layout.next_lsn);
    }
}

/// Stops the background flusher when dropped (and waits for it to exit).
#[derive(Debug)]
pub struct FlusherHandle {
    stop: Option<mpsc::Sender<Wake>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for FlusherHandle {
    fn drop(&mut self) {
        // Told, not disconnected: the WAL keeps a sender of its own.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Wake::Stop);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Told about a failed background sync (the WAL is poisoned by then).
pub type OnFlushError = Box<dyn Fn(&Error) + Send>;

fn flusher_loop(
    wal: &Weak<Wal>,
    wake: &mpsc::Receiver<Wake>,
    interval: Duration,
    spares: bool,
    on_error: &dyn Fn(&Error),
) {
    // Joined on every way out, so no spare is still being written when
    // the flusher (and so the database) is gone.
    let mut spare = SpareWorker(None);
    // Ticks keep their pace whatever wakes the loop between them: an
    // `Eventual` commit is synced within `interval` even while appends
    // ask for spares. An interval too long to add to the clock
    // (`Duration::MAX`: never) has no tick at all.
    let tick_after = |now: Instant| now.checked_add(interval);
    let mut next_tick = tick_after(Instant::now());
    loop {
        let woken = match next_tick {
            Some(t) => wake.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => wake.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let tick = match woken {
            Err(RecvTimeoutError::Timeout) => true,
            Ok(Wake::Spare) => false,
            Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => return,
        };
        let Some(wal) = wal.upgrade() else { return };
        if tick {
            next_tick = tick_after(Instant::now());
            if wal.has_unsynced() {
                if let Err(e) = wal.sync() {
                    on_error(&e);
                    return;
                }
            }
        }
        if spares {
            spare.start_if_due(&wal);
        }
    }
}

/// The thread making a spare segment, if one runs. A spare is made on a
/// thread of its own, not the flusher's: zero-filling 32 MiB took about
/// 25 ms here, and `Eventual` commits must still be synced within the
/// sync interval meanwhile (review finding: the flusher making spares
/// itself delayed those syncs by as long).
struct SpareWorker(Option<std::thread::JoinHandle<()>>);

impl SpareWorker {
    /// Starts a thread making a spare if one is due and none runs.
    fn start_if_due(&mut self, wal: &Arc<Wal>) {
        if self.0.as_ref().is_some_and(|h| !h.is_finished()) || !wal.spare_due() {
            return;
        }
        self.join();
        let wal = Arc::clone(wal);
        // Best effort: a failure is not a failed commit (see
        // `Wal::prepare_spare`), and neither is a thread that could not
        // start; the switch then makes its file itself.
        self.0 = std::thread::Builder::new()
            .name("sheafdb-wal-spare".to_owned())
            .spawn(move || {
                let _ = wal.prepare_spare();
            })
            .ok();
    }

    fn join(&mut self) {
        if let Some(h) = self.0.take() {
            let _ = h.join();
        }
    }
}

impl Drop for SpareWorker {
    fn drop(&mut self) {
        self.join();
    }
}
