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

use super::frame::{FrameHeader, StopReason, FRAME_HEADER_BYTES};
use super::segment::{
    parse_segment_name, segment_name, SegmentHeader, FIRST_LSN, HEADER_BLOCK_BYTES,
};
use super::WalOptions;
use crate::error::{Error, Location, Result};
use crate::format::codec::slice_at;
use crate::storage::{OpenMode, Storage, Vfs};
use crate::types::Lsn;

/// Size of each read while replaying.
const READ_CHUNK_BYTES: usize = 4 << 20;

/// One segment file found at open.
#[derive(Debug)]
pub(crate) struct ScannedSlot {
    pub slot: usize,
    pub file: Arc<dyn Storage>,
    pub len_bytes: u64,
    /// `None`: the header is invalid, so the file holds no use.
    pub header: Option<SegmentHeader>,
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
    Ok(ScannedSlot {
        slot,
        file,
        len_bytes,
        header: SegmentHeader::decode(&block),
    })
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
    Ok(())
}

/// Replays the log in `slots` from `from`, calling `apply` per record.
///
/// Errors with `Corrupted` if the log provably misses records at `from`
/// (every use it holds starts after `from`): then the data file needs
/// records that are gone, and applying later ones would build a state that
/// never existed.
pub(crate) fn replay(
    slots: &[ScannedSlot],
    db_name: &str,
    from: Lsn,
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
        },
        kept: Vec::new(),
        last_salt: None,
        max_seq,
    };
    let Some(mut cur) = starting_use(slots, db_name, from)? else {
        return Ok(rec);
    };
    // One read buffer for every use: a fresh one per use would fault in
    // its pages again.
    let mut buf = Vec::new();
    loop {
        let header = header_of(slots, cur);
        let slot = slot_at(slots, cur);
        let mut reader = UseReader::new(&*slot.file, slot.len_bytes.min(header.segment_bytes), buf);
        let end = replay_use(slot, &mut reader, db_name, from, apply, &mut rec.summary)?;
        buf = reader.into_buf();
        debug_assert!(end >= header.start_lsn, "a use ends before it starts");
        rec.kept.push((cur, end));
        rec.last_salt = Some(header.salt);
        rec.summary.uses_replayed += 1;
        match successor(slots, &header, end) {
            Some(next) => cur = next,
            None => {
                rec.summary.uses_abandoned = slots
                    .iter()
                    .filter(|s| s.header.is_some_and(|h| h.seq > header.seq))
                    .count();
                return Ok(rec);
            }
        }
    }
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
        match next_frame(reader, &header, lsn)? {
            Ok((frame_bytes, payload)) => {
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
            }
            Err(reason) => break reason,
        }
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

fn file_offset(header: &SegmentHeader, lsn: Lsn) -> u64 {
    debug_assert!(lsn >= header.start_lsn, "an LSN before its use");
    HEADER_BLOCK_BYTES + (lsn.0 - header.start_lsn.0)
}

/// The frame at `lsn`: `Ok(Ok((frame_bytes, payload)))` if valid,
/// `Ok(Err(reason))` if replay must stop there, `Err` on an I/O error.
#[allow(clippy::type_complexity)]
fn next_frame<'r>(
    reader: &'r mut UseReader<'_>,
    header: &SegmentHeader,
    lsn: Lsn,
) -> Result<Result<(u64, &'r [u8]), StopReason>> {
    let room_bytes = header.limit_lsn().0 - lsn.0;
    if room_bytes < FRAME_HEADER_BYTES as u64 {
        return Ok(Err(StopReason::SegmentFull));
    }
    let offset = file_offset(header, lsn);
    let Some(raw) = reader.bytes(offset, FRAME_HEADER_BYTES)? else {
        return Ok(Err(StopReason::FileEnd));
    };
    let Ok(raw) = <[u8; FRAME_HEADER_BYTES]>::try_from(raw) else {
        return Ok(Err(StopReason::FileEnd));
    };
    let frame = FrameHeader::parse(&raw);
    let frame_bytes = match frame.check(&raw, lsn, header.salt, room_bytes) {
        Ok(n) => n,
        Err(reason) => return Ok(Err(reason)),
    };
    let payload_at = offset + FRAME_HEADER_BYTES as u64;
    let Some(payload) = reader.bytes(payload_at, frame.len as usize)? else {
        return Ok(Err(StopReason::FileEnd));
    };
    if !frame.crc_matches(&raw, payload) {
        return Ok(Err(StopReason::ChecksumMismatch));
    }
    Ok(Ok((frame_bytes, payload)))
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
}

impl<'f> UseReader<'f> {
    /// A reader of `file` up to `end_offset`, reading into `buf` (its
    /// contents are overwritten).
    fn new(file: &'f dyn Storage, end_offset: u64, buf: Vec<u8>) -> UseReader<'f> {
        UseReader {
            file,
            end_offset,
            buf,
            buf_len: 0,
            buf_offset: 0,
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
        let want = n.max(READ_CHUNK_BYTES) as u64;
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
