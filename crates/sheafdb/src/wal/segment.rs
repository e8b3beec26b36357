//! Segment files: names, the header block, and per-use salts.
//!
//! Owns: the byte layout of a segment's header block and the naming of
//! segment files (`NAME-wal.<slot>`). Must not know: records, group commit,
//! or anything above the WAL.
//!
//! # Segment file
//!
//! A segment file is exactly `segment_bytes` long (preallocated with zeros
//! when created). Its first [`HEADER_BLOCK_BYTES`] bytes are the header
//! block; the rest is the data area, which holds frames back to back. A
//! *use* of a segment covers the LSNs `[start_lsn, start_lsn + capacity)`
//! where `capacity = segment_bytes - HEADER_BLOCK_BYTES`; the frame at LSN
//! `L` lives at file offset `HEADER_BLOCK_BYTES + (L - start_lsn)`.
//!
//! # Header block (little-endian)
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0  | 8 | magic `b"SHEAFWAL"` |
//! | 8  | 4 | format version: 3 (frames with a synced mark, `frame.rs`); 2 is still read |
//! | 12 | 4 | reserved, zero |
//! | 16 | 8 | sequence number of this use (strictly increasing across uses of all segments; ≥ 1) |
//! | 24 | 8 | salt of this use (non-zero; every frame of the use carries it) |
//! | 32 | 8 | salt of the use this one continues (0: starts a new chain) |
//! | 40 | 8 | start LSN of this use |
//! | 48 | 8 | `segment_bytes`: file size this use was written for (multiple of 4096, ≥ 8192) |
//! | 56 | 8 | identity of the database the WAL belongs to (the data file's superblock holds it too) |
//! | 64 | 8 | superblock generation that was durable when this use began |
//! | 72 | 4 | crc32c of bytes 0..72 |
//! | 76 | 4020 | zero |
//!
//! A header that fails any check (magic, crc, ranges) means the segment
//! holds no use: it is free. A whole header of a version this build does
//! not read is refused at open (`WalMismatch`), never taken for free space.
//!
//! # Continuation record (the header block's second sector)
//!
//! When the log switches from one use to the next, the old use's file gets
//! a [`UseLink`] at [`LINK_OFFSET`] naming the use that continues it (rule
//! O15, design.md "A missing newest segment"). A new use's header block
//! is written whole, so a recycled file never keeps an earlier use's link;
//! a link whose owner is not the header's use is ignored. Earlier builds
//! of this format never read these bytes.
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 512 | 8 | magic `b"SHEAFLNK"` |
//! | 520 | 8 | sequence number of the use this file holds (the owner) |
//! | 528 | 8 | salt of the owner |
//! | 536 | 8 | sequence number of the next use |
//! | 544 | 8 | salt of the next use |
//! | 552 | 8 | start LSN of the next use (where the owner stopped) |
//! | 560 | 4 | crc32c of bytes 512..560 |

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

use std::time::{SystemTime, UNIX_EPOCH};

use super::frame::FrameFormat;
use crate::format::codec::{
    crc_holds, put_bytes, put_u32, put_u64, read_u32, read_u64, seal_crc, slice_at,
};
use crate::types::{Lsn, COUNTER_LIMIT};

/// Bytes reserved for the header block at the start of every segment.
pub const HEADER_BLOCK_BYTES: u64 = 4096;
/// Smallest accepted segment size (one header block plus one data block).
pub const MIN_SEGMENT_BYTES: u64 = 2 * HEADER_BLOCK_BYTES;
/// Largest segment size a header may claim (bounds reads of garbage headers).
pub const MAX_SEGMENT_BYTES: u64 = 1 << 40;
/// The LSN of the first record of a new log (so LSN 0 means "before
/// everything"; the first segment's LSNs equal its file offsets).
pub const FIRST_LSN: Lsn = Lsn(HEADER_BLOCK_BYTES);

const MAGIC: [u8; 8] = *b"SHEAFWAL";
/// The format version this build writes.
const FORMAT_VERSION: u32 = 3;
/// The older format still read: its frames have no synced mark.
const FORMAT_VERSION_V2: u32 = 2;
/// Field offsets of the header block (the table in the module doc).
mod off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const RESERVED: usize = 12;
    pub const SEQ: usize = 16;
    pub const SALT: usize = 24;
    pub const PREV_SALT: usize = 32;
    pub const START_LSN: usize = 40;
    pub const SEGMENT_BYTES: usize = 48;
    pub const DB_ID: usize = 56;
    pub const GENERATION: usize = 64;
    /// The crc covers every byte before it.
    pub const CRC: usize = 72;
    /// Bytes of the header that carry information (crc included).
    pub const USED: usize = 76;
}

// The layout adds up: each field starts where the previous one ends.
const _: () = assert!(off::VERSION == off::MAGIC + MAGIC.len());
const _: () = assert!(off::RESERVED == off::VERSION + 4);
const _: () = assert!(off::SEQ == off::RESERVED + 4);
const _: () = assert!(off::SALT == off::SEQ + 8);
const _: () = assert!(off::PREV_SALT == off::SALT + 8);
const _: () = assert!(off::START_LSN == off::PREV_SALT + 8);
const _: () = assert!(off::SEGMENT_BYTES == off::START_LSN + 8);
const _: () = assert!(off::DB_ID == off::SEGMENT_BYTES + 8);
const _: () = assert!(off::GENERATION == off::DB_ID + 8);
const _: () = assert!(off::CRC == off::GENERATION + 8);
const _: () = assert!(off::USED == off::CRC + 4);
const _: () = assert!(off::USED as u64 <= HEADER_BLOCK_BYTES);

/// The decoded header of one segment use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub seq: u64,
    pub salt: u64,
    pub prev_salt: u64,
    pub start_lsn: Lsn,
    pub segment_bytes: u64,
    /// The database this WAL belongs to.
    pub db_id: u64,
    /// Superblock generation durable when the use began.
    pub generation: u64,
    /// The layout of the use's frames (from the header's format version).
    pub frames: FrameFormat,
}

impl SegmentHeader {
    /// The magic every header block begins with.
    pub const MAGIC: [u8; 8] = MAGIC;

    /// Data bytes a use of this header covers.
    pub fn capacity_bytes(&self) -> u64 {
        self.segment_bytes - HEADER_BLOCK_BYTES
    }

    /// One past the last LSN this use could hold.
    pub fn limit_lsn(&self) -> Lsn {
        Lsn(self.start_lsn.0 + self.capacity_bytes())
    }

    /// The whole header block ([`HEADER_BLOCK_BYTES`] bytes).
    pub fn encode(&self) -> Vec<u8> {
        debug_assert!(self.salt != 0 && self.seq != 0);
        debug_assert!(is_valid_segment_bytes(self.segment_bytes));
        let mut block = vec![0u8; HEADER_BLOCK_BYTES as usize];
        put_bytes(&mut block, off::MAGIC, &MAGIC);
        let version = match self.frames {
            FrameFormat::V2 => FORMAT_VERSION_V2,
            FrameFormat::V3 => FORMAT_VERSION,
        };
        put_u32(&mut block, off::VERSION, version);
        put_u64(&mut block, off::SEQ, self.seq);
        put_u64(&mut block, off::SALT, self.salt);
        put_u64(&mut block, off::PREV_SALT, self.prev_salt);
        put_u64(&mut block, off::START_LSN, self.start_lsn.0);
        put_u64(&mut block, off::SEGMENT_BYTES, self.segment_bytes);
        put_u64(&mut block, off::DB_ID, self.db_id);
        put_u64(&mut block, off::GENERATION, self.generation);
        seal_crc(&mut block, off::CRC);
        block
    }

    /// Decodes a header block; `None` when any check fails (a free segment).
    pub fn decode(block: &[u8]) -> Option<SegmentHeader> {
        let used = block.get(..off::USED)?;
        if slice_at(used, off::MAGIC, MAGIC.len())? != MAGIC {
            return None;
        }
        if !crc_holds(used, off::CRC) {
            return None;
        }
        let frames = match read_u32(used, off::VERSION) {
            FORMAT_VERSION => FrameFormat::V3,
            FORMAT_VERSION_V2 => FrameFormat::V2,
            _ => return None,
        };
        let header = SegmentHeader {
            seq: read_u64(used, off::SEQ),
            salt: read_u64(used, off::SALT),
            prev_salt: read_u64(used, off::PREV_SALT),
            start_lsn: Lsn(read_u64(used, off::START_LSN)),
            segment_bytes: read_u64(used, off::SEGMENT_BYTES),
            db_id: read_u64(used, off::DB_ID),
            generation: read_u64(used, off::GENERATION),
            frames,
        };
        header.is_plausible().then_some(header)
    }

    /// The format version of a header block that is whole (magic and crc
    /// check) but of a version this build cannot read: a segment of a newer
    /// build, which must be refused rather than taken for free space.
    pub fn unreadable_version(block: &[u8]) -> Option<u32> {
        let used = block.get(..off::USED)?;
        let whole = slice_at(used, off::MAGIC, MAGIC.len())? == MAGIC && crc_holds(used, off::CRC);
        let version = read_u32(used, off::VERSION);
        (whole && version != FORMAT_VERSION && version != FORMAT_VERSION_V2).then_some(version)
    }

    /// Range checks a crc-valid header must still pass.
    fn is_plausible(&self) -> bool {
        self.seq != 0
            && self.salt != 0
            && is_valid_segment_bytes(self.segment_bytes)
            && self.start_lsn >= FIRST_LSN
            && (self.start_lsn.0.checked_add(self.segment_bytes))
                .is_some_and(|end| end <= COUNTER_LIMIT)
    }
}

/// Offset of the continuation record in a segment's header block: its
/// second 512-byte sector, so writing it never tears the header.
pub(crate) const LINK_OFFSET: u64 = 512;
/// Bytes written for a continuation record (one sector).
const LINK_BLOCK_BYTES: usize = 512;
const LINK_MAGIC: [u8; 8] = *b"SHEAFLNK";
/// Field offsets of the continuation record, from [`LINK_OFFSET`].
mod link_off {
    pub const MAGIC: usize = 0;
    pub const OWNER_SEQ: usize = 8;
    pub const OWNER_SALT: usize = 16;
    pub const NEXT_SEQ: usize = 24;
    pub const NEXT_SALT: usize = 32;
    pub const NEXT_START: usize = 40;
    pub const CRC: usize = 48;
    pub const USED: usize = 52;
}
const _: () = assert!(LINK_OFFSET as usize >= off::USED);
const _: () = assert!(LINK_OFFSET as usize + LINK_BLOCK_BYTES <= HEADER_BLOCK_BYTES as usize);
const _: () = assert!(link_off::USED <= LINK_BLOCK_BYTES);

/// A continuation record: the use `owner_seq`/`owner_salt` was continued
/// by the use `next_seq`/`next_salt`, which starts at `next_start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UseLink {
    pub owner_seq: u64,
    pub owner_salt: u64,
    pub next_seq: u64,
    pub next_salt: u64,
    pub next_start: Lsn,
}

impl UseLink {
    /// The sector written at [`LINK_OFFSET`].
    pub fn encode(&self) -> Vec<u8> {
        debug_assert!(self.next_seq > self.owner_seq, "a link names an older use");
        let mut block = vec![0u8; LINK_BLOCK_BYTES];
        put_bytes(&mut block, link_off::MAGIC, &LINK_MAGIC);
        put_u64(&mut block, link_off::OWNER_SEQ, self.owner_seq);
        put_u64(&mut block, link_off::OWNER_SALT, self.owner_salt);
        put_u64(&mut block, link_off::NEXT_SEQ, self.next_seq);
        put_u64(&mut block, link_off::NEXT_SALT, self.next_salt);
        put_u64(&mut block, link_off::NEXT_START, self.next_start.0);
        seal_crc(&mut block, link_off::CRC);
        block
    }

    /// The continuation record in a whole header block, if it is valid and
    /// belongs to `header`'s use (a recycled file's stale link is not).
    pub fn decode(header_block: &[u8], header: &SegmentHeader) -> Option<UseLink> {
        let used = slice_at(header_block, LINK_OFFSET as usize, link_off::USED)?;
        if slice_at(used, link_off::MAGIC, LINK_MAGIC.len())? != LINK_MAGIC
            || !crc_holds(used, link_off::CRC)
        {
            return None;
        }
        let link = UseLink {
            owner_seq: read_u64(used, link_off::OWNER_SEQ),
            owner_salt: read_u64(used, link_off::OWNER_SALT),
            next_seq: read_u64(used, link_off::NEXT_SEQ),
            next_salt: read_u64(used, link_off::NEXT_SALT),
            next_start: Lsn(read_u64(used, link_off::NEXT_START)),
        };
        let owned = link.owner_seq == header.seq && link.owner_salt == header.salt;
        let plausible = link.next_seq > link.owner_seq
            && link.next_salt != 0
            && (header.start_lsn..=header.limit_lsn()).contains(&link.next_start);
        (owned && plausible).then_some(link)
    }
}

/// True for a segment size this format accepts.
pub(crate) fn is_valid_segment_bytes(segment_bytes: u64) -> bool {
    (MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&segment_bytes)
        && segment_bytes.is_multiple_of(HEADER_BLOCK_BYTES)
}

/// File name of segment slot `slot` of the database file `db_name`.
pub(crate) fn segment_name(db_name: &str, slot: usize) -> String {
    format!("{db_name}-wal.{slot}")
}

/// Slot numbers at or above this are not WAL segments (so a stray file name
/// cannot make open allocate a huge slot table). The writer only creates
/// slots beyond the highest existing one when none is free, so a WAL needs
/// about `checkpoint interval / segment size + 2` slots.
pub(crate) const MAX_SLOTS: usize = 1 << 16;

/// The slot number if `file` is a segment of `db_name` (canonical decimal,
/// so `x-wal.01` is not taken for slot 1; below [`MAX_SLOTS`]).
pub(crate) fn parse_segment_name(db_name: &str, file: &str) -> Option<usize> {
    let digits = file.strip_prefix(db_name)?.strip_prefix("-wal.")?;
    let slot: usize = digits.parse().ok()?;
    (slot < MAX_SLOTS && slot.to_string() == digits).then_some(slot)
}

/// A fresh non-zero salt for use `seq`, different from `prev_salt`.
///
/// Uniqueness is best effort (time, sequence, process id, a per-process
/// counter, mixed by SplitMix64); correctness never rests on it alone since
/// every frame is also checked for LSN continuity.
pub(crate) fn fresh_salt(seq: u64, prev_salt: u64) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut x = nanos ^ seq.rotate_left(29) ^ (u64::from(std::process::id()) << 40);
    x = splitmix64(x ^ splitmix64(count) ^ prev_salt.rotate_left(7));
    while x == 0 || x == prev_salt {
        x = splitmix64(x.wrapping_add(1));
    }
    x
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests index and unwrap their own fixtures"
)]
mod tests {
    use super::*;

    fn sample() -> SegmentHeader {
        SegmentHeader {
            seq: 7,
            salt: 0xDEAD_BEEF,
            prev_salt: 3,
            start_lsn: Lsn(123_456),
            segment_bytes: 64 * 1024,
            db_id: 0x5EAF,
            generation: 9,
            frames: FrameFormat::V3,
        }
    }

    #[test]
    fn header_round_trips() {
        let block = sample().encode();
        assert_eq!(block.len(), HEADER_BLOCK_BYTES as usize);
        assert_eq!(SegmentHeader::decode(&block), Some(sample()));
    }

    #[test]
    fn format_2_headers_still_decode() {
        let old = SegmentHeader {
            frames: FrameFormat::V2,
            ..sample()
        };
        let block = old.encode();
        assert_eq!(read_u32(&block, off::VERSION), 2);
        assert_eq!(SegmentHeader::decode(&block), Some(old));
        // An unknown version is no use (as any failed check).
        let mut v4 = sample().encode();
        put_u32(&mut v4, off::VERSION, 4);
        let crc = crc32c::crc32c(&v4[..off::CRC]);
        put_u32(&mut v4, off::CRC, crc);
        assert_eq!(SegmentHeader::decode(&v4), None);
        assert_eq!(SegmentHeader::unreadable_version(&v4), Some(4));
        assert_eq!(SegmentHeader::unreadable_version(&block), None);
        assert_eq!(SegmentHeader::unreadable_version(&sample().encode()), None);
    }

    #[test]
    fn any_flipped_byte_invalidates_header() {
        let block = sample().encode();
        for i in 0..off::USED {
            let mut bad = block.clone();
            bad[i] ^= 0x40;
            assert_eq!(SegmentHeader::decode(&bad), None, "byte {i}");
        }
        assert_eq!(SegmentHeader::decode(&block[..30]), None);
        assert_eq!(SegmentHeader::decode(&[0u8; 4096]), None);
    }

    #[test]
    fn links_round_trip_and_belong_to_their_use() {
        let header = sample();
        let link = UseLink {
            owner_seq: header.seq,
            owner_salt: header.salt,
            next_seq: header.seq + 1,
            next_salt: 77,
            next_start: Lsn(header.start_lsn.0 + 4096),
        };
        let mut block = header.encode();
        assert_eq!(
            UseLink::decode(&block, &header),
            None,
            "a fresh header has no link"
        );
        let at = LINK_OFFSET as usize;
        block[at..at + LINK_BLOCK_BYTES].copy_from_slice(&link.encode());
        assert_eq!(
            SegmentHeader::decode(&block),
            Some(header),
            "the link tears no header"
        );
        assert_eq!(UseLink::decode(&block, &header), Some(link));
        // Another use of the same file (recycled) does not own it.
        let other = SegmentHeader {
            seq: 9,
            salt: 5,
            ..header
        };
        assert_eq!(UseLink::decode(&block, &other), None);
        for i in 0..link_off::USED {
            let mut bad = block.clone();
            bad[at + i] ^= 0x10;
            assert_eq!(UseLink::decode(&bad, &header), None, "byte {i}");
        }
        // A start outside the owner's span is refused even with a good crc.
        let far = UseLink {
            next_start: Lsn(header.limit_lsn().0 + 1),
            ..link
        };
        block[at..at + LINK_BLOCK_BYTES].copy_from_slice(&far.encode());
        assert_eq!(UseLink::decode(&block, &header), None);
    }

    #[test]
    fn names_parse_canonically() {
        assert_eq!(segment_name("db", 3), "db-wal.3");
        assert_eq!(parse_segment_name("db", "db-wal.3"), Some(3));
        assert_eq!(parse_segment_name("db", "db-wal.03"), None);
        assert_eq!(parse_segment_name("db", "db-wal.x"), None);
        assert_eq!(parse_segment_name("db", "db-wal."), None);
        assert_eq!(parse_segment_name("db", "dbx-wal.1"), None);
        assert_eq!(parse_segment_name("db", "db"), None);
        assert_eq!(parse_segment_name("db", "db-wal.-1"), None);
        assert_eq!(parse_segment_name("db", "db-wal.+1"), None);
        assert_eq!(parse_segment_name("db", "db-wal.65535"), Some(65535));
        assert_eq!(parse_segment_name("db", "db-wal.65536"), None);
        assert_eq!(parse_segment_name("db", "db-wal.4000000000"), None);
    }

    #[test]
    fn salts_are_fresh() {
        let mut prev = 0;
        let mut seen = std::collections::HashSet::new();
        for seq in 1..1000 {
            let s = fresh_salt(seq, prev);
            assert!(s != 0 && s != prev);
            assert!(seen.insert(s));
            prev = s;
        }
    }
}
