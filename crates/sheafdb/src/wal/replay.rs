//! Opening the segment files and replaying the log (design.md §7).
//!
//! Owns: finding segment files, reading their headers, choosing the chain
//! of uses that forms the log, and walking its frames in LSN order.
//!
//! # Which uses form the log
//!
//! Every use names the salt of the use it continues (`prev_salt`). Replay
//! starts in the use with the highest sequence number among those starting
//! at or below `from` (for `from` below [`FIRST_LSN`], the use with the
//! lowest start), walks its frames until the first invalid one (at LSN
//! `E`), and continues into the use that names it as predecessor *and*
//! starts exactly at `E`. Otherwise replay stops: later uses are
//! *abandoned* (written but never reachable, e.g. after a torn tail or a
//! damaged frame), and the writer's next use links to the last use
//! replayed, which excludes them from every later walk.
//!
//! The walk only goes forward from the use holding `from`, so a lost or
//! damaged header can only end the log early (leaving a prefix), never make
//! replay skip from one use to a later one. If every use starts after
//! `from`, the records the data file needs are gone: open fails with
//! `Corrupted` instead of applying later records to an older base.
//!
//! Reads are done in chunks of [`READ_CHUNK_BYTES`]; no allocation is
//! sized from a length field before the field is checked against the bytes
//! left in the segment use (themselves bounded by the file length).
//!
//! Must not know: what payloads mean.

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use super::frame::{FrameFormat, FrameHeader, StopReason, MAX_FRAME_HEADER_BYTES, SALT_OFFSET};
use super::segment::{
    parse_segment_name, segment_name, SegmentHeader, UseLink, FIRST_LSN, HEADER_BLOCK_BYTES,
    LINK_OFFSET, MAX_SEGMENT_BYTES,
};
use super::WalOptions;
use crate::error::{Error, Location, Result, WAL_SALVAGE_HINT};
use crate::format::codec::slice_at;
use crate::storage::{OpenMode, Storage, Vfs};
use crate::types::{Lsn, COUNTER_LIMIT};

/// Size of each read while replaying.
const READ_CHUNK_BYTES: usize = 4 << 20;
/// Size of each read while looking at later uses for evidence of damage
/// (usually one frame is read from each).
const PROBE_CHUNK_BYTES: usize = 64 << 10;

/// One segment file found at open.
#[derive(Debug)]
pub(crate) struct ScannedSlot {
    pub slot: usize,
    pub file: Arc<dyn Storage>,
    pub len_bytes: u64,
    /// `None`: the header is invalid, so the file holds no use.
    pub header: Option<SegmentHeader>,
    /// The use that continued this one, as its file records it (rule O15).
    pub link: Option<UseLink>,
    /// A whole header of a format version this build cannot read.
    pub unreadable_version: Option<u32>,
    /// The file begins like a sheafdb data file, not a segment: a database
    /// or backup named like one of this log's files.
    pub data_file: bool,
    /// The file begins like neither a segment nor zeros (see
    /// [`could_be_a_segment`]): somebody else's file under a segment name.
    pub foreign: bool,
}

/// What replay found, returned by [`crate::wal::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Valid records at or after `from`, passed to `apply`.
    pub records_replayed: u64,
    /// Valid records below `from`, checked but not applied.
    pub records_skipped: u64,
    /// LSN of the last valid record, applied or not.
    pub last_record_lsn: Option<Lsn>,
    /// Where the log ends: the LSN just past the last valid record (or the
    /// start of the last use replayed). New records start at or after it.
    pub end_lsn: Lsn,
    /// Why replay stopped at `end_lsn`.
    pub stop: StopReason,
    /// The file and byte offset of the frame replay stopped at.
    pub stopped_at: Option<Location>,
    /// Segment uses walked.
    pub uses_replayed: usize,
    /// Uses that followed the stopping point but did not continue the log
    /// (their records are not part of it and their segments are free).
    pub uses_abandoned: usize,
    /// A damaged frame below `from` that replay walked past, resuming at
    /// the whole frame at `from` (the base already holds every record
    /// below `from`, so nothing is lost): its LSN and why it was refused.
    pub damage_below_start: Option<(Lsn, StopReason)>,
    /// Set when replay stopped at a damaged frame that a later frame proves
    /// was durable (only with `WalOptions::salvage`; otherwise that is a
    /// `Corrupted` error).
    pub damage: Option<LogDamage>,
}

/// Proof that the log went on, durably, past where replay stopped: the
/// records from `stop_lsn` on were acknowledged and are lost to damage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDamage {
    /// Where replay stopped (the damaged frame).
    pub stop_lsn: Lsn,
    /// Why the frame there was refused.
    pub stop: StopReason,
    /// The file and offset of the damaged frame.
    pub stop_at: Location,
    /// The valid frame whose synced mark proves it: its LSN and place.
    pub witness_lsn: Lsn,
    /// The file and offset of that frame.
    pub witness_at: Location,
    /// Its synced mark: the log was durable below this LSN.
    pub synced: Lsn,
    /// An LSN past every record the damaged log's uses may hold: a salvaged
    /// log must continue at or after it, so that no frame left in those
    /// uses can vouch for the new log's records.
    pub log_limit: Lsn,
}

impl std::fmt::Display for LogDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.stop == StopReason::UseMissing {
            return write!(
                f,
                "WAL segment use missing: {} records that the log went on from LSN {} in a \
                 later segment, and no WAL file holds it (deleted, emptied or replaced), so the \
                 records from LSN {} on were lost",
                self.witness_at, self.stop_lsn.0, self.stop_lsn.0,
            );
        }
        if self.stop == StopReason::FileCut {
            return write!(
                f,
                "WAL segment cut short at {} (LSN {}), after frames of the use whose header is at \
                 {} (from LSN {}): the header says the file is longer, and a segment file \
                 reaches its full length durably before any frame goes in, so the records that \
                 followed were lost to damage",
                self.stop_at, self.stop_lsn.0, self.witness_at, self.witness_lsn.0,
            );
        }
        write!(
            f,
            "WAL frame at LSN {} ({}) is damaged ({:?}), but the frame at LSN {} ({}) records \
             that the log was durable up to LSN {}: the commits from LSN {} on were \
             acknowledged and cannot be replayed",
            self.stop_lsn.0,
            self.stop_at,
            self.stop,
            self.witness_lsn.0,
            self.witness_at,
            self.synced.0,
            self.stop_lsn.0
        )
    }
}

/// The replay result plus what the writer needs to continue the log.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub summary: ReplaySummary,
    /// Uses still part of the log, as (index into the scanned slots, end).
    pub kept: Vec<(usize, Lsn)>,
    /// Salt of the last use replayed.
    pub last_salt: Option<u64>,
    /// Highest sequence number in any valid header.
    pub max_seq: u64,
}

/// Lists, syncs and opens every segment file of `db_name`, and reads its
/// header. The directory and each file are synced first, so that what is
/// read is durable (a crashed process may have left dirty pages behind).
pub(crate) fn scan_segments(
    vfs: &dyn Vfs,
    db_name: &str,
    read_only: bool,
) -> Result<Vec<ScannedSlot>> {
    let slots: Vec<usize> = vfs
        .list()?
        .iter()
        .filter_map(|f| parse_segment_name(db_name, f))
        .collect();
    // A read-only open syncs nothing: it decides nothing durable (no
    // segment is recycled, no superblock written) on what it reads.
    if !slots.is_empty() && !read_only {
        vfs.sync_dir()?;
    }
    slots
        .into_iter()
        .map(|slot| scan_one(vfs, db_name, slot, read_only))
        .collect()
}

fn scan_one(vfs: &dyn Vfs, db_name: &str, slot: usize, read_only: bool) -> Result<ScannedSlot> {
    let mode = match read_only {
        true => OpenMode::ReadOnly,
        false => OpenMode::Existing,
    };
    let file = vfs.open(&segment_name(db_name, slot), mode)?;
    if !read_only {
        file.sync_data()?;
    }
    let len_bytes = file.len()?;
    let mut block = vec![0u8; len_bytes.min(HEADER_BLOCK_BYTES) as usize];
    file.read_at(0, &mut block)?;
    let header = SegmentHeader::decode(&block);
    let data_file = block.starts_with(&crate::format::superblock::MAGIC);
    Ok(ScannedSlot {
        slot,
        file,
        len_bytes,
        header,
        link: header.and_then(|h| UseLink::decode(&block, &h)),
        unreadable_version: SegmentHeader::unreadable_version(&block),
        data_file,
        foreign: !data_file && header.is_none() && !could_be_a_segment(&block),
    })
}

/// True if a header block that does not decode may still be one of this
/// log's files: every byte of its first eight (as far as the file has
/// them) is zero or the magic's byte there. A spare or a file being made
/// is zeros, a torn header write leaves the magic or bytes of it over
/// zeros, and a recycled file keeps the magic of its earlier header.
/// Anything else is not ours: the open refuses it rather than delete or
/// overwrite it as free space (a session-34 probe: a user's text file
/// named `NAME-wal.2` was deleted without a word).
///
/// A header of ours whose magic was damaged is ours too: with the magic
/// put back it decodes (its crc covers the magic), and is then damage for
/// replay to find, not another program's file (a session-34 review). And
/// a salvage (`WalOptions::salvage`) takes every such file for free space,
/// as before: the caller asked to get past what cannot be read.
fn could_be_a_segment(block: &[u8]) -> bool {
    let magic = SegmentHeader::MAGIC;
    if (block.iter().zip(magic.iter())).all(|(&b, &m)| b == 0 || b == m) {
        return true;
    }
    let mut mended = block.to_vec();
    if let Some(head) = mended.get_mut(..magic.len()) {
        head.copy_from_slice(&magic);
    }
    SegmentHeader::decode(&mended).is_some()
}

/// Refuses a WAL that is not this data file's (issue 9 point 7): a
/// segment with a valid header of another database, or one begun under a
/// superblock generation newer than the data file's (a stale data file
/// restored beside its newer WAL). Runs before anything is written, so a
/// refused open changes neither file.
pub(crate) fn check_identity(
    slots: &[ScannedSlot],
    db_name: &str,
    opts: &WalOptions,
) -> Result<()> {
    let (db_id, generation) = (opts.db_id, opts.generation);
    for s in slots {
        if s.data_file {
            // Never taken for a free segment (which the log would reuse or
            // delete): the other database would be lost.
            return Err(Error::WalMismatch(format!(
                "{} is a sheafdb database file, not a WAL file of {db_name}: a database or \
                 backup named like one; rename it (nothing was changed)",
                segment_name(db_name, s.slot)
            )));
        }
        if s.foreign && !opts.salvage {
            return Err(Error::WalMismatch(format!(
                "{} is named like a WAL segment of {db_name} but is not one (it begins like \
                 neither a segment nor zeros); rename or remove it (nothing was changed)",
                segment_name(db_name, s.slot)
            )));
        }
        if let Some(version) = s.unreadable_version {
            return Err(Error::WalMismatch(format!(
                "{} is in WAL format version {version}, which this build does not read \
                 (it reads versions 2 and 3): it was written by a newer build",
                segment_name(db_name, s.slot)
            )));
        }
        let Some(h) = s.header else { continue };
        let file = segment_name(db_name, s.slot);
        if h.db_id != db_id {
            return Err(Error::WalMismatch(format!(
                "{file} belongs to database {:016x}, the data file is database {db_id:016x}",
                h.db_id
            )));
        }
        if h.generation > generation && opts.superblock_damaged {
            // The data file's newest superblock is the damaged slot: the
            // one that decoded is older than the log, and may name pages
            // reused since. Neither file changes.
            return Err(Error::Corrupted {
                what: format!(
                    "the newest superblock slot is damaged; the other slot is at \
                     generation {generation}, older than {file} (begun at generation {}), \
                     so the latest checkpoint cannot be found",
                    h.generation
                ),
                location: Location::File {
                    name: db_name.to_string(),
                    offset: 0,
                },
            });
        }
        if h.generation > generation {
            return Err(Error::WalMismatch(format!(
                "{file} was written after checkpoint generation {}, but the data file is at \
                 generation {generation}: the data file is older than its WAL",
                h.generation
            )));
        }
    }
    refuse_duplicate_uses(slots, db_name)
}

/// Two files holding the same use (sequence number and salt): one is a
/// copy or a hard link of the other. The log would take the one it does
/// not walk for free and recycle it, and through a hard link that
/// overwrote the live segment behind it: acknowledged commits lost at
/// the next open (a session-33 probe of WAL damage). No crash or
/// recycling makes two: every use gets a new sequence number and salt.
fn refuse_duplicate_uses(slots: &[ScannedSlot], db_name: &str) -> Result<()> {
    let mut seen = std::collections::HashMap::new();
    for s in slots {
        let Some(h) = s.header else { continue };
        if let Some(first) = seen.insert((h.seq, h.salt), s.slot) {
            return Err(Error::WalMismatch(format!(
                "{} and {} hold the same WAL segment (use {}): one is a copy or a link of \
                 the other; remove the one the database did not write (nothing was changed)",
                segment_name(db_name, first),
                segment_name(db_name, s.slot),
                h.seq
            )));
        }
    }
    Ok(())
}

/// Replays the log in `slots` from `from`, calling `apply` per record.
///
/// Errors with `Corrupted` if the log provably misses records at `from`
/// (every use it holds starts after `from`): then the data file needs
/// records that are gone, and applying later ones would build a state that
/// never existed.
///
/// Where the walk stops on a frame that may be damaged in place, replay
/// looks for a *witness* (see [`find_witness`]): a valid later frame whose
/// synced mark is past both the stop and `from`. One proves that the
/// records from the stop on were durable, so they are lost to damage, not
/// a torn write: `Corrupted`, or with `salvage` the prefix and
/// [`ReplaySummary::damage`].
pub(crate) fn replay(
    slots: &[ScannedSlot],
    db_name: &str,
    from: Lsn,
    salvage: bool,
    apply: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>,
) -> Result<Recovered> {
    let max_seq = slots
        .iter()
        .filter_map(|s| s.header.map(|h| h.seq))
        .max()
        .unwrap_or(0);
    let mut rec = Recovered {
        summary: ReplaySummary {
            records_replayed: 0,
            records_skipped: 0,
            last_record_lsn: None,
            end_lsn: FIRST_LSN,
            stop: StopReason::NoLog,
            stopped_at: None,
            uses_replayed: 0,
            uses_abandoned: 0,
            damage_below_start: None,
            damage: None,
        },
        kept: Vec::new(),
        last_salt: None,
        max_seq,
    };
    let Some(mut cur) = starting_use(slots, db_name, from)? else {
        // No use at all; frames of uses whose header was damaged may still
        // prove that records past `from` were durable.
        let stop = (rec.summary.end_lsn, rec.summary.stop);
        if let Some(damage) = find_witness(slots, db_name, None, stop, from)? {
            rec.summary.damage = Some(salvaged(damage, salvage)?);
        }
        return Ok(rec);
    };
    // One read buffer for every use: a fresh one per use would fault in
    // its pages again.
    let mut buf = Vec::new();
    // The use walked before `cur` names it in its link (rule O15).
    let mut linked = false;
    loop {
        let header = header_of(slots, cur);
        let slot = slot_at(slots, cur);
        let mut reader = UseReader::new(&*slot.file, slot.len_bytes.min(header.segment_bytes), buf);
        let end = replay_use(slot, &mut reader, db_name, from, apply, &mut rec.summary)?;
        debug_assert!(end >= header.start_lsn, "a use ends before it starts");
        rec.kept.push((cur, end));
        rec.last_salt = Some(header.salt);
        rec.summary.uses_replayed += 1;
        match successor(slots, &header, end) {
            Some(next) => {
                buf = reader.into_buf();
                let h = header_of(slots, next);
                linked = (slot.link).is_some_and(|l| (l.next_seq, l.next_salt) == (h.seq, h.salt));
                cur = next;
            }
            None => {
                rec.summary.uses_abandoned = slots
                    .iter()
                    .filter(|s| s.header.is_some_and(|h| h.seq > header.seq))
                    .count();
                if cut_after_frames(slot, &header, end, rec.summary.stop, from, linked) {
                    rec.summary.stop = StopReason::FileCut;
                    let damage = cut_damage(slots, db_name, cur, end)?;
                    rec.summary.damage = Some(salvaged(damage, salvage)?);
                    return Ok(rec);
                }
                // The walk's reader still holds the bytes where it stopped.
                let last = Some((cur, &mut reader));
                let stop = (end, rec.summary.stop);
                if let Some(damage) = find_witness(slots, db_name, last, stop, from)? {
                    rec.summary.damage = Some(salvaged(damage, salvage)?);
                } else if let Some(damage) = missing_successor(slots, db_name, cur, end, from)? {
                    rec.summary.stop = StopReason::UseMissing;
                    rec.summary.damage = Some(salvaged(damage, salvage)?);
                }
                return Ok(rec);
            }
        }
    }
}

/// True if the walk of a use ended at the end of its file (`stop`, at
/// `end`) after at least one frame, in a file shorter than the header says.
/// A use's file is zero-filled to its full length and synced before its
/// first frame is written (`io.rs`, `preallocate`; a recovered log always
/// starts a fresh use), so no crash leaves frames in a short file: it was
/// cut afterwards. (A file cut before any frame may be a crash during the
/// zero fill, and ends the log there.)
///
/// The replay start proves frames too: by rule O1 the log was durable
/// through `from` before the superblock naming it was written, so a use
/// that begins below `from` had frames up to it, and its file had reached
/// its full length; cut to its header (or into it) afterwards, it is the
/// same damage (before, emptying the only WAL file opened the checkpoint
/// without the commits after it). So does a durable link to the use
/// (`linked`, rule O15): it was written after the use's header was
/// durable, and the header reaches the disk with the zero fill, in one
/// sync, or over a file already full length. And a use that ends at or before `from`
/// holds nothing replay needs: a cut there loses nothing (a salvaged log
/// keeps its cut file as a free one, which a later clean close may leave
/// behind; it was refused at every open after that).
fn cut_after_frames(
    slot: &ScannedSlot,
    header: &SegmentHeader,
    end: Lsn,
    stop: StopReason,
    from: Lsn,
    linked: bool,
) -> bool {
    let short = stop == StopReason::FileEnd && slot.len_bytes < header.segment_bytes;
    let had_frames = end > header.start_lsn || from > header.start_lsn || linked;
    short && had_frames && from < header.limit_lsn()
}

/// Rule O15: the last use walked, `cur`, ended whole at `end`, and its
/// file names the use that continued it from `end`, but no file holds
/// that use (deleted, emptied, zeroed, or replaced by another file).
///
/// A link is durable only after the header of the use it names, so no
/// crash makes one point at nothing. Only a give-back or a recycle removes
/// a use's file, and only once the use lies wholly below the replay start
/// of a durable checkpoint, so such a use starts at or below `from` (at
/// `from` when it is empty: a round that failed after its header). A
/// missing use that starts after `from` therefore held records replay
/// needs: damage. (One that starts at or below `from` may have been given
/// back; the WAL anchor covers the newest use, rule O16.)
fn missing_successor(
    slots: &[ScannedSlot],
    db_name: &str,
    cur: usize,
    end: Lsn,
    from: Lsn,
) -> Result<Option<LogDamage>> {
    let slot = slot_at(slots, cur);
    let Some(link) = slot.link else {
        return Ok(None);
    };
    let present = (slots.iter()).any(|s| {
        s.header
            .is_some_and(|h| (h.seq, h.salt) == (link.next_seq, link.next_salt))
    });
    if present || link.next_start != end || link.next_start <= from {
        return Ok(None);
    }
    let witness = (end, LINK_OFFSET);
    use_damage(slots, db_name, cur, end, StopReason::UseMissing, witness).map(Some)
}

/// The damage of use `cur`'s file cut short at `end` (see
/// [`cut_after_frames`]). Its header is the proof: nothing past `end` is
/// known to have been durable, so `synced` is `end`.
fn cut_damage(slots: &[ScannedSlot], db_name: &str, cur: usize, end: Lsn) -> Result<LogDamage> {
    let witness = (header_of(slots, cur).start_lsn, 0);
    use_damage(slots, db_name, cur, end, StopReason::FileCut, witness)
}

/// Damage that use `cur`'s own file proves (a cut, a link to a missing
/// use): the log stops at `end`, nothing past `end` is known to have been
/// durable (`synced` is `end`), and the proof is in the same file at
/// `witness` (its LSN and byte offset).
fn use_damage(
    slots: &[ScannedSlot],
    db_name: &str,
    cur: usize,
    end: Lsn,
    stop: StopReason,
    (witness_lsn, witness_offset): (Lsn, u64),
) -> Result<LogDamage> {
    let header = header_of(slots, cur);
    let name = segment_name(db_name, slot_at(slots, cur).slot);
    let limit = log_limit(slots, &headerless_uses(slots)?);
    debug_assert!(limit >= end, "the log limit is below the damage");
    Ok(LogDamage {
        stop_lsn: end,
        stop,
        stop_at: Location::File {
            name: name.clone(),
            offset: file_offset(&header, end),
        },
        witness_lsn,
        witness_at: Location::File {
            name,
            offset: witness_offset,
        },
        synced: end,
        log_limit: limit.max(end),
    })
}

/// Slot `i`: an index `starting_use`/`successor` returned (an engine
/// invariant, not a property of the files).
fn slot_at(slots: &[ScannedSlot], i: usize) -> &ScannedSlot {
    slots
        .get(i)
        .unwrap_or_else(|| panic!("walked to slot index {i} of {}", slots.len()))
}

/// The header of slot `i`, which `starting_use`/`successor` only return
/// for uses with a valid header.
fn header_of(slots: &[ScannedSlot], i: usize) -> SegmentHeader {
    slot_at(slots, i)
        .header
        .unwrap_or_else(|| panic!("walked to slot index {i}, which has no valid header"))
}

/// The use replay starts in: the newest use starting at or before `from`
/// (a newer one would have been started later, at a higher LSN, so the
/// newest such use is the one the log continued in). For `from` below
/// [`FIRST_LSN`] ("everything"), the use with the lowest start.
///
/// Replay walks forward from there only (see [`successor`]), so a use whose
/// header was lost can never make replay skip to a later one.
fn starting_use(slots: &[ScannedSlot], db_name: &str, from: Lsn) -> Result<Option<usize>> {
    let headers = || {
        slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.header.map(|h| (i, h)))
    };
    if from < FIRST_LSN {
        let oldest = headers().min_by_key(|(_, h)| (h.start_lsn, std::cmp::Reverse(h.seq)));
        return Ok(oldest.map(|(i, _)| i));
    }
    if let Some((i, _)) = headers()
        .filter(|(_, h)| h.start_lsn <= from)
        .max_by_key(|(_, h)| h.seq)
    {
        return Ok(Some(i));
    }
    match headers().min_by_key(|(_, h)| h.start_lsn) {
        None => Ok(None),
        Some((i, h)) => Err(Error::Corrupted {
            what: format!(
                "the WAL starts at LSN {} but replay must start at {}: the records between are missing",
                h.start_lsn.0, from.0
            ),
            location: Location::File {
                name: segment_name(db_name, slot_at(slots, i).slot),
                offset: 0,
            },
        }),
    }
}

/// The use that continues `prev`, whose valid frames end at `end`: it
/// names `prev` as its predecessor and starts exactly at `end`. Any other
/// later use is abandoned (its predecessor's tail was torn).
fn successor(slots: &[ScannedSlot], prev: &SegmentHeader, end: Lsn) -> Option<usize> {
    slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.header.map(|h| (i, h)))
        .filter(|(_, h)| h.prev_salt == prev.salt && h.start_lsn == end && h.seq > prev.seq)
        .max_by_key(|(_, h)| h.seq)
        .map(|(i, _)| i)
}

/// Walks one use's frames, applying those at or after `from`; returns the
/// LSN of the first invalid frame (the end of this use's valid records).
fn replay_use(
    slot: &ScannedSlot,
    reader: &mut UseReader<'_>,
    db_name: &str,
    from: Lsn,
    apply: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>,
    summary: &mut ReplaySummary,
) -> Result<Lsn> {
    let Some(header) = slot.header else {
        panic!("replay of slot {} without a valid header", slot.slot);
    };
    let mut lsn = header.start_lsn;
    let stop = loop {
        let reason = match next_frame(reader, &header, lsn)? {
            Ok(Frame {
                bytes: frame_bytes,
                payload,
                ..
            }) => {
                if lsn >= from {
                    apply(lsn, payload)?;
                    summary.records_replayed += 1;
                } else {
                    summary.records_skipped += 1;
                }
                summary.last_record_lsn = Some(lsn);
                debug_assert!(frame_bytes > 0, "an empty frame was accepted");
                lsn = Lsn(lsn.0 + frame_bytes);
                debug_assert!(lsn <= header.limit_lsn(), "a frame passes its use's end");
                continue;
            }
            Err(reason) => reason,
        };
        if !resumes_at_start(reader, &header, lsn, from, summary)? {
            break reason;
        }
        summary.damage_below_start = Some((lsn, reason));
        lsn = from;
    };
    debug_assert!(lsn >= header.start_lsn, "replay ended before its use began");
    summary.end_lsn = lsn;
    summary.stop = stop;
    summary.stopped_at = Some(Location::File {
        name: segment_name(db_name, slot.slot),
        offset: file_offset(&header, lsn),
    });
    Ok(lsn)
}

/// True if a walk that stopped at `stop` below the replay start `from`
/// goes on at `from`: by rule O1 the log was durable through `from` before
/// the superblock naming it was written, so a stop below it is damage (no
/// torn tail lies there), and the records below `from` are in the base
/// already. The walk resumes only at a whole frame of this use at exactly
/// `from` (its salt, LSN and checksum hold), and only once per replay.
fn resumes_at_start(
    reader: &mut UseReader<'_>,
    header: &SegmentHeader,
    stop: Lsn,
    from: Lsn,
    summary: &ReplaySummary,
) -> Result<bool> {
    if stop >= from || from >= header.limit_lsn() || summary.damage_below_start.is_some() {
        return Ok(false);
    }
    debug_assert!(
        from >= header.start_lsn,
        "replay started in a use after `from`"
    );
    Ok(next_frame(reader, header, from)?.is_ok())
}

/// Looks for proof that the log went on durably past `stop` (the LSN
/// where the walk of use `last` stopped, and why): a valid frame whose
/// synced mark is past both the stop and `from`. Such a frame was appended
/// after a sync that covered the stopped position, so the frame there was
/// durable and is damaged, and records at or after `from` (which the data
/// file needs) followed it. Frames past an unfinished write never carry
/// such a mark (design.md §7, "Damage in the middle of the log").
///
/// Looks, cheapest first, at:
/// 1. the frame the stopped header's length field names, if the stop may
///    be damage in place ([`StopReason::may_be_damage`], or a stale salt
///    at the right position);
/// 2. every valid frame of the uses begun after `last` that continue some
///    chain (`prev_salt` set: a new chain begins only where a checkpoint
///    covers what came before), walked from their start;
/// 3. for a stop that may be damage in place, the rest of `last`, searched
///    for frames carrying its salt (a damaged length hides where the next
///    frame starts).
fn find_witness(
    slots: &[ScannedSlot],
    db_name: &str,
    last: Option<(usize, &mut UseReader<'_>)>,
    (stop_lsn, stop): (Lsn, StopReason),
    from: Lsn,
) -> Result<Option<LogDamage>> {
    let threshold = stop_lsn.max(from);
    let headerless = headerless_uses(slots)?;
    let place = |slot: usize, h: &SegmentHeader, lsn: Lsn| Location::File {
        name: segment_name(db_name, slot),
        offset: file_offset(h, lsn),
    };
    let stop_at = match &last {
        Some((i, _)) => place(slot_at(slots, *i).slot, &header_of(slots, *i), stop_lsn),
        None => Location::Other("the WAL (no segment has a valid header)".into()),
    };
    let damage = |w: Witness, in_slot: usize, h: &SegmentHeader| {
        // A witness lies after the stop and vouches past it (and `from`).
        debug_assert!(w.lsn > stop_lsn, "a witness before the stop");
        debug_assert!(w.synced > stop_lsn && w.synced <= w.lsn);
        let limit = log_limit(slots, &headerless);
        debug_assert!(limit > w.lsn, "the log limit is below a frame");
        LogDamage {
            stop_lsn,
            stop,
            stop_at: stop_at.clone(),
            witness_lsn: w.lsn,
            witness_at: place(in_slot, h, w.lsn),
            synced: w.synced,
            log_limit: limit,
        }
    };
    if let Some((last, reader)) = last {
        let header = header_of(slots, last);
        let slot = slot_at(slots, last).slot;
        // The header at the stop, read only where the stop may hide a
        // frame: damage in place, or a stale salt (an earlier use's frame,
        // or this one's with its salt damaged, and maybe its LSN too).
        let suspect = stop.may_be_damage() || stop == StopReason::StaleSalt;
        let at_stop = match suspect {
            true => raw_header_at(reader, &header, stop_lsn)?,
            false => None,
        };
        // A genuine stale frame (an earlier use of this file) carries a
        // lower LSN than the position it sits at, and a mark no higher than
        // its own LSN; a header that breaks either was damaged in place
        // (foreign bytes over it), so the rest of the use is searched too.
        let in_place = stop.may_be_damage()
            || (stop == StopReason::StaleSalt
                && at_stop.is_some_and(|h| h.lsn >= stop_lsn || h.synced > h.lsn));
        if let Some(next) = at_stop.and_then(|h| next_by_length(&header, stop_lsn, &h)) {
            if let Some(w) = walk_for_witness(reader, &header, next, threshold)?.0 {
                return Ok(Some(damage(w, slot, &header)));
            }
        }
        for (i, later) in later_uses(slots, &header) {
            let s = slot_at(slots, i);
            if let Some(w) = probe_use(s, &later, threshold)? {
                return Ok(Some(damage(w, s.slot, &later)));
            }
        }
        if in_place && header.frames == FrameFormat::V3 {
            if let Some(w) = scan_for_witness(reader, &header, stop_lsn, threshold)? {
                return Ok(Some(damage(w, slot, &header)));
            }
        }
    }
    for (i, pseudo) in &headerless {
        let s = slot_at(slots, *i);
        if let Some(w) = probe_use(s, pseudo, threshold)? {
            return Ok(Some(damage(w, s.slot, pseudo)));
        }
    }
    Ok(None)
}

/// A valid frame whose synced mark is past a stop.
#[derive(Debug, Clone, Copy)]
struct Witness {
    lsn: Lsn,
    synced: Lsn,
}

/// Walks the frames of a use other than the one replay stopped in.
fn probe_use(s: &ScannedSlot, h: &SegmentHeader, threshold: Lsn) -> Result<Option<Witness>> {
    let end = s.len_bytes.min(h.segment_bytes);
    let mut r = UseReader::with_chunk(&*s.file, end, Vec::new(), PROBE_CHUNK_BYTES);
    Ok(walk_for_witness(&mut r, h, h.start_lsn, threshold)?.0)
}

/// The valid uses begun after `last` that continue a chain, by sequence.
fn later_uses(slots: &[ScannedSlot], last: &SegmentHeader) -> Vec<(usize, SegmentHeader)> {
    let mut later: Vec<(usize, SegmentHeader)> = slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.header.map(|h| (i, h)))
        .filter(|(_, h)| h.seq > last.seq && h.prev_salt != 0 && h.frames == FrameFormat::V3)
        .collect();
    later.sort_by_key(|(_, h)| h.seq);
    later
}

/// Segment files whose header block is damaged (or was never written) but
/// whose first frame, at the start of the data area, is whole: a header
/// rebuilt from that frame (its salt and LSN) for each, so its frames can
/// be walked as evidence. A frame's crc covers its salt and LSN, so a
/// frame that checks is one the log wrote.
fn headerless_uses(slots: &[ScannedSlot]) -> Result<Vec<(usize, SegmentHeader)>> {
    let mut out = Vec::new();
    let header_bytes = FrameFormat::V3.header_bytes();
    for (i, s) in slots.iter().enumerate() {
        if s.header.is_some() || s.unreadable_version.is_some() {
            continue;
        }
        let segment_bytes = s.len_bytes - s.len_bytes % HEADER_BLOCK_BYTES;
        if !super::segment::is_valid_segment_bytes(segment_bytes) {
            continue;
        }
        let mut r = UseReader::with_chunk(&*s.file, segment_bytes, Vec::new(), PROBE_CHUNK_BYTES);
        let Some(raw) = r.bytes(HEADER_BLOCK_BYTES, header_bytes)? else {
            continue;
        };
        let frame = FrameHeader::parse(raw, FrameFormat::V3);
        let plausible = frame.lsn >= FIRST_LSN
            && frame.salt != 0
            && frame
                .lsn
                .0
                .checked_add(segment_bytes)
                .is_some_and(|end| end <= COUNTER_LIMIT);
        if !plausible {
            continue;
        }
        debug_assert!(segment_bytes <= s.len_bytes);
        let pseudo = SegmentHeader {
            seq: 0,
            salt: frame.salt,
            prev_salt: 0,
            start_lsn: frame.lsn,
            segment_bytes,
            db_id: 0,
            generation: 0,
            frames: FrameFormat::V3,
        };
        // Only a first frame that is whole (crc included) rebuilds a
        // header: garbage must not decide anything, such as where a
        // salvaged log continues (`log_limit`).
        if next_frame(&mut r, &pseudo, frame.lsn)?.is_ok() {
            out.push((i, pseudo));
        }
    }
    Ok(out)
}

/// An LSN past every frame any use (or header-less segment) may hold.
fn log_limit(slots: &[ScannedSlot], headerless: &[(usize, SegmentHeader)]) -> Lsn {
    slots
        .iter()
        .filter_map(|s| s.header)
        .chain(headerless.iter().map(|(_, h)| *h))
        .map(|h| h.limit_lsn())
        .fold(FIRST_LSN, Lsn::max)
}

/// Walks the valid frames of `header`'s use from `lsn`; returns the first
/// whose synced mark is past `threshold`, and where the walk ended.
fn walk_for_witness(
    reader: &mut UseReader<'_>,
    header: &SegmentHeader,
    mut lsn: Lsn,
    threshold: Lsn,
) -> Result<(Option<Witness>, Lsn)> {
    while let Ok(frame) = next_frame(reader, header, lsn)? {
        debug_assert!(frame.synced <= lsn, "a valid frame vouches past itself");
        if frame.synced > threshold {
            let w = Witness {
                lsn,
                synced: frame.synced,
            };
            return Ok((Some(w), lsn));
        }
        lsn = Lsn(lsn.0 + frame.bytes);
    }
    Ok((None, lsn))
}

/// The raw header bytes at `lsn` (`None` past the readable end).
fn raw_header_at(
    reader: &mut UseReader<'_>,
    header: &SegmentHeader,
    lsn: Lsn,
) -> Result<Option<FrameHeader>> {
    let n = header.frames.header_bytes();
    if header.limit_lsn().0 - lsn.0 < n as u64 {
        return Ok(None);
    }
    let raw = reader.bytes(file_offset(header, lsn), n)?;
    Ok(raw.map(|raw| FrameHeader::parse(raw, header.frames)))
}

/// Where the next frame would start if the length field of `at`, the
/// header found at `lsn`, is right (`None` if that is past the use).
fn next_by_length(header: &SegmentHeader, lsn: Lsn, at: &FrameHeader) -> Option<Lsn> {
    let next = lsn.0 + header.frames.header_bytes() as u64 + u64::from(at.len);
    (next < header.limit_lsn().0).then_some(Lsn(next))
}

/// Searches the rest of `header`'s use after `stop` for frames carrying
/// its salt (a frame is found even where no length leads to it), walking
/// on from each valid one; returns the first witness past `threshold`.
/// Reads the rest of the use in [`READ_CHUNK_BYTES`] windows, and checks
/// candidates' checksums over at most twice the use's size in all.
fn scan_for_witness(
    reader: &mut UseReader<'_>,
    header: &SegmentHeader,
    stop: Lsn,
    threshold: Lsn,
) -> Result<Option<Witness>> {
    let salt = header.salt.to_le_bytes();
    let finder = memchr::memmem::Finder::new(&salt);
    let header_bytes = header.frames.header_bytes() as u64;
    let Some(last_start) = header.limit_lsn().0.checked_sub(header_bytes) else {
        return Ok(None);
    };
    // Candidate frame positions are `cand`; a window holds the bytes where
    // their salts would be, so candidate `cand + i` has its salt at `i`.
    let mut cand = stop.0 + 1;
    let (mut checked, budget) = (0u64, 2 * header.capacity_bytes());
    while cand <= last_start {
        let at = file_offset(header, Lsn(cand)) + SALT_OFFSET as u64;
        let salts_end = file_offset(header, Lsn(last_start)) + SALT_OFFSET as u64 + 8;
        let want = (salts_end - at)
            .min(READ_CHUNK_BYTES as u64)
            .min(reader.end_offset.saturating_sub(at));
        if want < salt.len() as u64 {
            break;
        }
        let Some(window) = reader.bytes(at, want as usize)? else {
            break;
        };
        let Some(i) = finder.find(window) else {
            // Every candidate whose salt lies wholly in the window failed.
            cand += want - (salt.len() as u64 - 1);
            continue;
        };
        let found = Lsn(cand + i as u64);
        debug_assert!(
            found > stop && found.0 <= last_start,
            "a candidate outside the scan"
        );
        // Each candidate's crc covers the length it claims: bound the bytes
        // checked so crafted bytes cannot make the search quadratic.
        let claimed = raw_header_at(reader, header, found)?.map_or(0, |h| u64::from(h.len));
        checked = checked.saturating_add(claimed);
        if checked > budget {
            break;
        }
        let (witness, end) = walk_for_witness(reader, header, found, threshold)?;
        debug_assert!(end >= found, "a walk ended before it began");
        if witness.is_some() {
            return Ok(witness);
        }
        cand = end.0.max(found.0 + 1);
    }
    Ok(None)
}

/// Proven damage: an error unless salvaging, and then an error too if
/// the log could not continue past it (a use claiming LSNs next to the
/// counters' limit: the new log's segment headers would not be valid).
fn salvaged(damage: LogDamage, salvage: bool) -> Result<LogDamage> {
    if !salvage {
        return Err(Error::Corrupted {
            what: format!("{damage}; nothing was changed {WAL_SALVAGE_HINT}"),
            location: damage.stop_at,
        });
    }
    let room = damage.log_limit.0.checked_add(MAX_SEGMENT_BYTES);
    if room.is_none_or(|end| end > COUNTER_LIMIT) {
        return Err(Error::Corrupted {
            what: format!(
                "the damaged WAL claims LSNs up to {}, too close to the limit for the log to \
                 continue past them: it cannot be salvaged",
                damage.log_limit.0
            ),
            location: damage.witness_at,
        });
    }
    Ok(damage)
}

fn file_offset(header: &SegmentHeader, lsn: Lsn) -> u64 {
    debug_assert!(lsn >= header.start_lsn, "an LSN before its use");
    HEADER_BLOCK_BYTES + (lsn.0 - header.start_lsn.0)
}

/// A valid frame replay read.
struct Frame<'r> {
    /// Header and payload bytes (the LSN span of the frame).
    bytes: u64,
    /// Its synced mark (`Lsn(0)` in format 2).
    synced: Lsn,
    payload: &'r [u8],
}

/// The frame at `lsn`: `Ok(Ok(frame))` if valid, `Ok(Err(reason))` if
/// replay must stop there, `Err` on an I/O error.
fn next_frame<'r>(
    reader: &'r mut UseReader<'_>,
    header: &SegmentHeader,
    lsn: Lsn,
) -> Result<Result<Frame<'r>, StopReason>> {
    let header_bytes = header.frames.header_bytes();
    let room_bytes = header.limit_lsn().0 - lsn.0;
    if room_bytes < header_bytes as u64 {
        return Ok(Err(StopReason::SegmentFull));
    }
    let offset = file_offset(header, lsn);
    let Some(raw) = reader.bytes(offset, header_bytes)? else {
        return Ok(Err(StopReason::FileEnd));
    };
    let mut copy = [0u8; MAX_FRAME_HEADER_BYTES];
    let Some(raw_copy) = copy.get_mut(..header_bytes) else {
        return Ok(Err(StopReason::FileEnd));
    };
    raw_copy.copy_from_slice(raw);
    let raw: &[u8] = raw_copy;
    let frame = FrameHeader::parse(raw, header.frames);
    let frame_bytes = match frame.check(raw, lsn, header.salt, room_bytes) {
        Ok(n) => n,
        Err(reason) => return Ok(Err(reason)),
    };
    let payload_at = offset + header_bytes as u64;
    let Some(payload) = reader.bytes(payload_at, frame.len as usize)? else {
        return Ok(Err(StopReason::FileEnd));
    };
    if !frame.crc_matches(raw, payload) {
        return Ok(Err(StopReason::ChecksumMismatch));
    }
    Ok(Ok(Frame {
        bytes: frame_bytes,
        synced: frame.synced,
        payload,
    }))
}

/// Buffered positional reads of one segment file, in large chunks.
struct UseReader<'f> {
    file: &'f dyn Storage,
    /// Bytes of the file that may be read (file length, capped by the use).
    end_offset: u64,
    /// Read buffer: only `buf[..buf_len]` holds file bytes (the rest is
    /// kept so a later fill zeroes no memory).
    buf: Vec<u8>,
    buf_len: usize,
    /// File offset of `buf[0]`.
    buf_offset: u64,
    /// Bytes each fill reads at least.
    chunk: usize,
}

impl<'f> UseReader<'f> {
    /// A reader of `file` up to `end_offset`, reading into `buf` (its
    /// contents are overwritten).
    fn new(file: &'f dyn Storage, end_offset: u64, buf: Vec<u8>) -> UseReader<'f> {
        UseReader::with_chunk(file, end_offset, buf, READ_CHUNK_BYTES)
    }

    /// A reader whose fills read at least `chunk` bytes.
    fn with_chunk(
        file: &'f dyn Storage,
        end_offset: u64,
        buf: Vec<u8>,
        chunk: usize,
    ) -> UseReader<'f> {
        UseReader {
            file,
            end_offset,
            buf,
            buf_len: 0,
            buf_offset: 0,
            chunk,
        }
    }

    /// The read buffer, for the next use's reader.
    fn into_buf(self) -> Vec<u8> {
        self.buf
    }

    /// `n` bytes at `offset`, or `None` if they pass the readable end.
    fn bytes(&mut self, offset: u64, n: usize) -> Result<Option<&[u8]>> {
        let Some(end) = offset
            .checked_add(n as u64)
            .filter(|&e| e <= self.end_offset)
        else {
            return Ok(None);
        };
        let buf_end = self.buf_offset + self.buf_len as u64;
        if offset < self.buf_offset || end > buf_end {
            self.fill(offset, n)?;
        }
        let start = (offset - self.buf_offset) as usize;
        Ok(self
            .buf
            .get(..self.buf_len)
            .and_then(|b| slice_at(b, start, n)))
    }

    /// Reads at least `n` bytes at `offset` (already checked to be
    /// readable), up to a chunk or the readable end.
    fn fill(&mut self, offset: u64, n: usize) -> Result<()> {
        let want = n.max(self.chunk) as u64;
        let len = want.min(self.end_offset - offset) as usize;
        debug_assert!(len >= n);
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        self.buf_len = 0;
        let (dst, _) = self.buf.split_at_mut(len);
        self.file.read_at(offset, dst)?;
        self.buf_len = len;
        self.buf_offset = offset;
        Ok(())
    }
}
