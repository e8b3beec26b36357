//! Opening the segment files and replaying the log (DESIGN §7).
//!
//! Owns: finding segment files, reading their headers, choosing the chain
//! of uses that forms the log, and walking its frames in LSN order.
//!
//! # Which uses form the log
//!
//! Every use names the salt of the use it continues (`prev_salt`). The
//! candidate chain is found backwards from the use with the highest
//! sequence number, following `prev_salt` to lower sequence numbers. Replay
//! starts at the last candidate whose start LSN is at or below `from`,
//! walks its frames until the first invalid one (at LSN `E`), and continues
//! into the next candidate only if that one starts exactly at `E`.
//! Otherwise replay stops: later candidates are *abandoned* (written but
//! never reachable, e.g. after a torn tail or a damaged frame), and the
//! writer's next use links to the last use replayed, which excludes them
//! from every later chain.
//!
//! Reads are done in chunks of [`READ_CHUNK_BYTES`]; no allocation is
//! sized from a length field before the field is checked against the bytes
//! left in the segment use (themselves bounded by the file length).
//!
//! Must not know: what payloads mean.

use std::sync::Arc;

use super::frame::{FrameHeader, StopReason, FRAME_HEADER_BYTES};
use super::segment::{
    parse_segment_name, segment_name, SegmentHeader, FIRST_LSN, HEADER_BLOCK_BYTES,
};
use crate::error::{Location, Result};
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
pub(crate) fn scan_segments(vfs: &dyn Vfs, db_name: &str) -> Result<Vec<ScannedSlot>> {
    let slots: Vec<usize> = vfs
        .list()?
        .iter()
        .filter_map(|f| parse_segment_name(db_name, f))
        .collect();
    if !slots.is_empty() {
        vfs.sync_dir()?;
    }
    slots
        .into_iter()
        .map(|slot| scan_one(vfs, db_name, slot))
        .collect()
}

fn scan_one(vfs: &dyn Vfs, db_name: &str, slot: usize) -> Result<ScannedSlot> {
    let file = vfs.open(&segment_name(db_name, slot), OpenMode::Existing)?;
    file.sync_data()?;
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

/// Replays the log in `slots` from `from`, calling `apply` per record.
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
    let chain = candidate_chain(slots);
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
    if chain.is_empty() {
        return Ok(rec);
    }
    let header_of = |i: usize| slots[chain[i]].header.expect("chain uses have headers");
    let first = (0..chain.len())
        .rev()
        .find(|&i| header_of(i).start_lsn <= from)
        .unwrap_or(0);
    // Uses before the first one replayed lie below `from`: keep them as
    // closed (they are released at once, since `from` is the release point).
    rec.kept.extend(chain.windows(2).take(first).map(|pair| {
        let next = slots[pair[1]].header.expect("chain uses have headers");
        (pair[0], next.start_lsn)
    }));
    let mut i = first;
    loop {
        let slot = &slots[chain[i]];
        let end = replay_use(slot, db_name, from, apply, &mut rec.summary)?;
        rec.kept.push((chain[i], end));
        rec.last_salt = Some(header_of(i).salt);
        rec.summary.uses_replayed += 1;
        let continues = i + 1 < chain.len() && header_of(i + 1).start_lsn == end;
        if !continues {
            rec.summary.uses_abandoned = chain.len() - 1 - i;
            return Ok(rec);
        }
        i += 1;
    }
}

/// Indices (into `slots`) of the candidate chain, oldest first.
fn candidate_chain(slots: &[ScannedSlot]) -> Vec<usize> {
    let newest = slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.header.map(|h| (h.seq, i)))
        .max();
    let Some((_, mut cur)) = newest else {
        return Vec::new();
    };
    let mut chain = vec![cur];
    loop {
        let h = slots[cur].header.expect("chain uses have headers");
        if h.prev_salt == 0 {
            break;
        }
        let prev = slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.header.map(|p| (p, i)))
            .filter(|(p, _)| p.salt == h.prev_salt && p.seq < h.seq && p.start_lsn <= h.start_lsn)
            .max_by_key(|(p, _)| p.seq);
        match prev {
            Some((_, i)) => {
                chain.push(i);
                cur = i;
            }
            None => break,
        }
    }
    chain.reverse();
    chain
}

/// Walks one use's frames, applying those at or after `from`; returns the
/// LSN of the first invalid frame (the end of this use's valid records).
fn replay_use(
    slot: &ScannedSlot,
    db_name: &str,
    from: Lsn,
    apply: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>,
    summary: &mut ReplaySummary,
) -> Result<Lsn> {
    let header = slot.header.expect("replayed uses have headers");
    let mut reader = UseReader::new(&*slot.file, slot.len_bytes.min(header.segment_bytes));
    let mut lsn = header.start_lsn;
    let stop = loop {
        match next_frame(&mut reader, &header, lsn)? {
            Ok((frame_bytes, payload)) => {
                if lsn >= from {
                    apply(lsn, payload)?;
                    summary.records_replayed += 1;
                } else {
                    summary.records_skipped += 1;
                }
                summary.last_record_lsn = Some(lsn);
                lsn = Lsn(lsn.0 + frame_bytes);
            }
            Err(reason) => break reason,
        }
    };
    summary.end_lsn = lsn;
    summary.stop = stop;
    summary.stopped_at = Some(Location::File {
        name: segment_name(db_name, slot.slot),
        offset: file_offset(&header, lsn),
    });
    Ok(lsn)
}

fn file_offset(header: &SegmentHeader, lsn: Lsn) -> u64 {
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
    let raw: [u8; FRAME_HEADER_BYTES] = raw.try_into().expect("exact length");
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
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    buf_offset: u64,
}

impl<'f> UseReader<'f> {
    fn new(file: &'f dyn Storage, end_offset: u64) -> UseReader<'f> {
        UseReader {
            file,
            end_offset,
            buf: Vec::new(),
            buf_offset: 0,
        }
    }

    /// `n` bytes at `offset`, or `None` if they pass the readable end.
    fn bytes(&mut self, offset: u64, n: usize) -> Result<Option<&[u8]>> {
        let Some(end) = offset
            .checked_add(n as u64)
            .filter(|&e| e <= self.end_offset)
        else {
            return Ok(None);
        };
        let buf_end = self.buf_offset + self.buf.len() as u64;
        if offset < self.buf_offset || end > buf_end {
            self.fill(offset, n)?;
        }
        let start = (offset - self.buf_offset) as usize;
        Ok(Some(&self.buf[start..start + n]))
    }

    /// Reads at least `n` bytes at `offset` (already checked to be
    /// readable), up to a chunk or the readable end.
    fn fill(&mut self, offset: u64, n: usize) -> Result<()> {
        let want = n.max(READ_CHUNK_BYTES) as u64;
        let len = want.min(self.end_offset - offset) as usize;
        debug_assert!(len >= n);
        self.buf.resize(len, 0);
        self.file.read_at(offset, &mut self.buf)?;
        self.buf_offset = offset;
        Ok(())
    }
}
