//! The superblock: the root of everything durable (design.md §2.1).
//!
//! Two slots, at pages 0 and 1. A slot is written only when it is not the
//! current one, so a torn write destroys at most the slot being written.
//! The valid slot with the higher generation is current. Only the first
//! 512 bytes (one sector) of a slot page are used.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0   | 8 | magic `b"SHEAFDB\0"` |
//! | 8   | 4 | format version |
//! | 12  | 4 | page size in bytes |
//! | 16  | 8 | generation (strictly increasing) |
//! | 24  | 8 | system tree root page (0 = empty tree) |
//! | 32  | 8 | system tree entry count |
//! | 40  | 8 | metadata blob first page (0 = none) |
//! | 48  | 4 | metadata blob page count |
//! | 52  | 4 | metadata blob payload length |
//! | 56  | 8 | file length in pages (high-water mark of all extents) |
//! | 64  | 8 | next column family id |
//! | 72  | 8 | WAL replay start LSN (every CF's base covers the log below it) |
//! | 80  | 8 | database identity (random, fixed at creation; every WAL segment header carries it) |
//! | 88  | 8 | written pages: one past the highest page any checkpoint wrote (the file is at least this long) |
//! | 96  | 4 | WAL mark ([`WalMark`]: 0 unknown, 1 required, 2 not required) |
//! | 100 | 408 | reserved, zero |
//! | 508 | 4 | crc32c of bytes 0..508 |
//!
//! The WAL mark (rule O13, design.md "A missing WAL") lets an open tell a
//! WAL deleted by hand (or a data file copied without it) from a log with
//! nothing in it: `Required` is written only while a WAL segment file
//! exists durably, so a `Required` base with no segment file lost commits.
//! Files of format version 2 (before the mark) read as `Unknown` (no check)
//! and are upgraded to version 3 by the first checkpoint of a read-write
//! open; builds before the mark refuse version 3 (they would not keep it).
//!
//! The magic is checked before the checksum, so a file that is not a
//! sheafdb database gets `NotADatabase`, a damaged one `Corrupted`.
//!
//! While a database is being created, slot 0 first holds a *creation
//! marker* (magic, version, page size, generation 0, identity, everything
//! else zero, valid crc). A file whose only valid slot is the marker was
//! never finished: `create` may start over on it, `open` refuses it.

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

use crate::error::{Error, Location, Result};
use crate::format::codec::{
    crc_holds, put_bytes, put_u32, put_u64, read_u32, read_u64, seal_crc, slice_at,
};
use crate::format::page::{MAX_PAGE_SIZE, MIN_PAGE_SIZE};
use crate::format::{FORMAT_VERSION, FORMAT_VERSION_NO_ANCHOR, FORMAT_VERSION_NO_WAL_MARK};
use crate::types::{CfId, Lsn, PageId, COUNTER_LIMIT};

/// Magic bytes at the start of a slot.
pub const MAGIC: [u8; 8] = *b"SHEAFDB\0";
/// Bytes of a slot that carry data (one sector).
pub const SLOT_LEN: usize = 512;

/// Field offsets of a slot (the table in the module doc).
mod off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const PAGE_SIZE: usize = 12;
    pub const GENERATION: usize = 16;
    pub const SYS_ROOT: usize = 24;
    pub const SYS_LEN: usize = 32;
    pub const META_PAGE: usize = 40;
    pub const META_NPAGES: usize = 48;
    pub const META_LEN: usize = 52;
    pub const FILE_PAGES: usize = 56;
    pub const NEXT_CF: usize = 64;
    pub const REPLAY_LSN: usize = 72;
    pub const DB_ID: usize = 80;
    pub const WRITTEN_PAGES: usize = 88;
    pub const WAL_MARK: usize = 96;
    pub const RESERVED: usize = 100;
    pub const CRC: usize = 508;
}

// The layout adds up: each field starts where the previous one ends, and
// the checksum is the slot's last four bytes.
const _: () = assert!(off::VERSION == off::MAGIC + MAGIC.len());
const _: () = assert!(off::PAGE_SIZE == off::VERSION + 4);
const _: () = assert!(off::GENERATION == off::PAGE_SIZE + 4);
const _: () = assert!(off::SYS_ROOT == off::GENERATION + 8);
const _: () = assert!(off::SYS_LEN == off::SYS_ROOT + 8);
const _: () = assert!(off::META_PAGE == off::SYS_LEN + 8);
const _: () = assert!(off::META_NPAGES == off::META_PAGE + 8);
const _: () = assert!(off::META_LEN == off::META_NPAGES + 4);
const _: () = assert!(off::FILE_PAGES == off::META_LEN + 4);
const _: () = assert!(off::NEXT_CF == off::FILE_PAGES + 8);
const _: () = assert!(off::REPLAY_LSN == off::NEXT_CF + 8);
const _: () = assert!(off::DB_ID == off::REPLAY_LSN + 8);
const _: () = assert!(off::WRITTEN_PAGES == off::DB_ID + 8);
const _: () = assert!(off::WAL_MARK == off::WRITTEN_PAGES + 8);
const _: () = assert!(off::RESERVED == off::WAL_MARK + 4);
const _: () = assert!(off::CRC == SLOT_LEN - 4);
// Format 4 is the first that keeps the WAL anchor (`anchor_kept`).
const _: () = assert!(FORMAT_VERSION_NO_ANCHOR + 1 == FORMAT_VERSION);
const _: () = assert!(off::RESERVED <= off::CRC);
const _: () = assert!(SLOT_LEN <= super::page::MIN_PAGE_SIZE);

/// Decoded superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    /// Page size of the file.
    pub page_size: u32,
    /// Generation; the higher valid one wins.
    pub generation: u64,
    /// Root of the system tree.
    pub sys_root: Option<PageId>,
    /// Entries in the system tree.
    pub sys_len: u64,
    /// First page of the metadata blob run.
    pub meta_page: Option<PageId>,
    /// Pages in the metadata blob run.
    pub meta_npages: u32,
    /// Payload bytes of the metadata blob.
    pub meta_len: u32,
    /// File length in pages.
    pub file_pages: u64,
    /// Next column family id to hand out.
    pub next_cf: CfId,
    /// WAL position recovery replays from.
    pub replay_lsn: Lsn,
    /// Random identity of the database (also in every WAL segment header).
    pub db_id: u64,
    /// One past the highest page any checkpoint wrote.
    pub written_pages: u64,
    /// Whether an open needs a WAL file beside the data file (rule O13).
    pub wal_mark: WalMark,
    /// Written by a build that keeps the WAL anchor (format 4, rule O16):
    /// only then does an open check the log against it. Ignored by
    /// `encode`, which always writes this build's format.
    pub anchor_kept: bool,
}

/// What a superblock says about the WAL beside its data file (rule O13,
/// design.md "A missing WAL").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WalMark {
    /// Written by a build before the mark existed: an open cannot tell a
    /// missing WAL from an empty one, and does not try.
    #[default]
    Unknown,
    /// The log may hold commits past this base, and a segment file existed
    /// durably when it was written (and one always does until a base says
    /// otherwise): an open that finds no segment file refuses, since the
    /// commits since this base are gone.
    Required,
    /// Every record of the log is in this base and none follows it (a clean
    /// close, a new database): the WAL files may be missing.
    NotRequired,
}

impl WalMark {
    fn encode(self) -> u32 {
        match self {
            WalMark::Unknown => 0,
            WalMark::Required => 1,
            WalMark::NotRequired => 2,
        }
    }

    fn decode(v: u32) -> Option<WalMark> {
        match v {
            0 => Some(WalMark::Unknown),
            1 => Some(WalMark::Required),
            2 => Some(WalMark::NotRequired),
            _ => None,
        }
    }
}

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// All zero: never written.
    Empty,
    /// The creation marker of a database whose creation never finished.
    Creating {
        /// Identity the creation chose.
        db_id: u64,
    },
    /// A superblock.
    Written(Superblock),
}

fn opt_page(v: u64) -> Option<PageId> {
    (v != 0).then_some(PageId(v))
}

impl Superblock {
    /// Encodes into a 512-byte slot image.
    pub fn encode(&self) -> [u8; SLOT_LEN] {
        let mut b = [0u8; SLOT_LEN];
        put_bytes(&mut b, off::MAGIC, &MAGIC);
        put_u32(&mut b, off::VERSION, FORMAT_VERSION);
        put_u32(&mut b, off::PAGE_SIZE, self.page_size);
        put_u64(&mut b, off::GENERATION, self.generation);
        put_u64(&mut b, off::SYS_ROOT, self.sys_root.map_or(0, |p| p.0));
        put_u64(&mut b, off::SYS_LEN, self.sys_len);
        put_u64(&mut b, off::META_PAGE, self.meta_page.map_or(0, |p| p.0));
        put_u32(&mut b, off::META_NPAGES, self.meta_npages);
        put_u32(&mut b, off::META_LEN, self.meta_len);
        put_u64(&mut b, off::FILE_PAGES, self.file_pages);
        put_u64(&mut b, off::NEXT_CF, self.next_cf.0);
        put_u64(&mut b, off::REPLAY_LSN, self.replay_lsn.0);
        put_u64(&mut b, off::DB_ID, self.db_id);
        put_u64(&mut b, off::WRITTEN_PAGES, self.written_pages);
        put_u32(&mut b, off::WAL_MARK, self.wal_mark.encode());
        seal(&mut b);
        b
    }

    /// The creation marker for a database of `page_size` and `db_id`.
    pub fn encode_creating(page_size: u32, db_id: u64) -> [u8; SLOT_LEN] {
        let mut b = [0u8; SLOT_LEN];
        put_bytes(&mut b, off::MAGIC, &MAGIC);
        put_u32(&mut b, off::VERSION, FORMAT_VERSION);
        put_u32(&mut b, off::PAGE_SIZE, page_size);
        put_u64(&mut b, off::DB_ID, db_id);
        seal(&mut b);
        b
    }

    /// Decodes slot `slot` as a superblock; `Ok(None)` for an empty slot
    /// or a creation marker.
    pub fn decode(b: &[u8], slot: u8) -> Result<Option<Superblock>> {
        Ok(match Self::decode_slot(b, slot)? {
            Slot::Written(sb) => Some(sb),
            Slot::Empty | Slot::Creating { .. } => None,
        })
    }

    /// Decodes slot `slot`: empty, a creation marker, or a superblock.
    /// `NotADatabase` if the magic is wrong (checked first), `Corrupted`
    /// for a damaged slot.
    pub fn decode_slot(b: &[u8], slot: u8) -> Result<Slot> {
        let bad = |what: &str| Error::Corrupted {
            what: what.to_string(),
            location: Location::Superblock(slot),
        };
        let Some(b) = b.get(..SLOT_LEN) else {
            return Err(bad("slot truncated"));
        };
        if b.iter().all(|&x| x == 0) {
            return Ok(Slot::Empty);
        }
        if slice_at(b, off::MAGIC, MAGIC.len()) != Some(MAGIC.as_slice()) {
            return Err(Error::NotADatabase(format!(
                "superblock slot {slot}: bad magic"
            )));
        }
        if !crc_holds(b, off::CRC) {
            return Err(bad("checksum mismatch"));
        }
        let version = read_u32(b, off::VERSION);
        if !(FORMAT_VERSION_NO_WAL_MARK..=FORMAT_VERSION).contains(&version) {
            return Err(Error::NotADatabase(format!(
                "format version {version}, this build reads {FORMAT_VERSION_NO_WAL_MARK} to \
                 {FORMAT_VERSION}"
            )));
        }
        let page_size = read_u32(b, off::PAGE_SIZE);
        if !valid_page_size(page_size as usize) {
            return Err(bad("invalid page size"));
        }
        // Version 2 had no mark (its bytes were reserved, zero).
        let wal_mark = match version {
            FORMAT_VERSION_NO_WAL_MARK => Some(WalMark::Unknown),
            _ => WalMark::decode(read_u32(b, off::WAL_MARK)),
        };
        let Some(wal_mark) = wal_mark else {
            return Err(bad("unknown WAL mark"));
        };
        let sb = Superblock {
            page_size,
            generation: read_u64(b, off::GENERATION),
            sys_root: opt_page(read_u64(b, off::SYS_ROOT)),
            sys_len: read_u64(b, off::SYS_LEN),
            meta_page: opt_page(read_u64(b, off::META_PAGE)),
            meta_npages: read_u32(b, off::META_NPAGES),
            meta_len: read_u32(b, off::META_LEN),
            file_pages: read_u64(b, off::FILE_PAGES),
            next_cf: CfId(read_u64(b, off::NEXT_CF)),
            replay_lsn: Lsn(read_u64(b, off::REPLAY_LSN)),
            db_id: read_u64(b, off::DB_ID),
            written_pages: read_u64(b, off::WRITTEN_PAGES),
            wal_mark,
            anchor_kept: version > FORMAT_VERSION_NO_ANCHOR,
        };
        let between_page_size_and_id = b.get(off::GENERATION..off::DB_ID).unwrap_or_default();
        if sb.generation == 0
            && between_page_size_and_id.iter().all(|&x| x == 0)
            && sb.written_pages == 0
        {
            return Ok(Slot::Creating { db_id: sb.db_id });
        }
        sb.check(slot)?;
        Ok(Slot::Written(sb))
    }

    fn check(&self, slot: u8) -> Result<()> {
        let bad = |what: &str| Error::Corrupted {
            what: what.to_string(),
            location: Location::Superblock(slot),
        };
        let in_file = |p: Option<PageId>| p.is_none_or(|p| p.0 >= 2 && p.0 < self.file_pages);
        if !in_file(self.sys_root) || !in_file(self.meta_page) {
            return Err(bad("root page outside the file"));
        }
        if self.meta_page.is_none() {
            return Err(bad("no metadata blob"));
        }
        if self.file_pages < 2 {
            return Err(bad("file length too small"));
        }
        if self.written_pages < 2 || self.written_pages > self.file_pages {
            return Err(bad("written pages outside the file"));
        }
        let meta_end = self
            .meta_page
            .map_or(0, |p| p.0.saturating_add(u64::from(self.meta_npages)));
        if self.meta_npages == 0 || meta_end > self.written_pages {
            return Err(bad("metadata blob outside the written file"));
        }
        if self.db_id == 0 {
            return Err(bad("no database identity"));
        }
        let counters = [self.generation, self.next_cf.0, self.replay_lsn.0];
        if counters.iter().any(|&c| c > COUNTER_LIMIT) {
            return Err(bad(
                "generation, next CF id or WAL replay LSN past its range",
            ));
        }
        // Every page of the file (and of the extents claimed past it) has
        // a byte offset that fits in a u64.
        if self.file_pages > COUNTER_LIMIT / u64::from(self.page_size) {
            return Err(bad("file length past its range"));
        }
        Ok(())
    }
}

/// Sets the crc of a slot image.
fn seal(b: &mut [u8; SLOT_LEN]) {
    seal_crc(b, off::CRC);
}

/// A fresh random database identity (never 0): 64 bits from the OS
/// random source through std's randomly keyed hasher, mixed with the time
/// and process id, so two databases created anywhere differ.
pub fn fresh_db_id() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::time::{SystemTime, UNIX_EPOCH};
    loop {
        let mut h = RandomState::new().build_hasher();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        let id = h.finish();
        if id != 0 {
            return id;
        }
    }
}

/// True for a power of two between the minimum and maximum page size.
pub fn valid_page_size(n: usize) -> bool {
    n.is_power_of_two() && (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&n)
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

    fn sample() -> Superblock {
        Superblock {
            page_size: 4096,
            generation: 7,
            sys_root: Some(PageId(9)),
            sys_len: 3,
            meta_page: Some(PageId(12)),
            meta_npages: 1,
            meta_len: 100,
            file_pages: 300,
            next_cf: CfId(5),
            replay_lsn: Lsn(0),
            db_id: 0xABCD,
            written_pages: 13,
            wal_mark: WalMark::Required,
            anchor_kept: true,
        }
    }

    #[test]
    fn a_version_2_superblock_reads_with_an_unknown_mark() {
        let mut b = sample().encode();
        put_u32(&mut b, off::VERSION, FORMAT_VERSION_NO_WAL_MARK);
        seal(&mut b);
        let sb = Superblock::decode(&b, 0).unwrap().unwrap();
        assert_eq!(sb.wal_mark, WalMark::Unknown);
        assert!(!sb.anchor_kept);
        // Version 3: the mark is read, the WAL anchor is not trusted.
        let mut v3 = sample().encode();
        put_u32(&mut v3, off::VERSION, FORMAT_VERSION_NO_ANCHOR);
        seal(&mut v3);
        let sb = Superblock::decode(&v3, 0).unwrap().unwrap();
        assert_eq!((sb.wal_mark, sb.anchor_kept), (WalMark::Required, false));
        assert!(
            Superblock::decode(&sample().encode(), 0)
                .unwrap()
                .unwrap()
                .anchor_kept
        );
        put_u32(&mut b, off::VERSION, FORMAT_VERSION + 1);
        seal(&mut b);
        assert!(matches!(
            Superblock::decode(&b, 0),
            Err(Error::NotADatabase(_))
        ));
    }

    #[test]
    fn every_wal_mark_round_trips_and_others_are_corruption() {
        for mark in [WalMark::Unknown, WalMark::Required, WalMark::NotRequired] {
            let sb = Superblock {
                wal_mark: mark,
                anchor_kept: true,
                ..sample()
            };
            assert_eq!(Superblock::decode(&sb.encode(), 0).unwrap(), Some(sb));
        }
        let mut b = sample().encode();
        put_u32(&mut b, off::WAL_MARK, 3);
        seal(&mut b);
        let e = Superblock::decode(&b, 0).unwrap_err();
        assert!(matches!(e, Error::Corrupted { .. }), "{e}");
    }

    #[test]
    fn round_trip() {
        let sb = sample();
        assert_eq!(Superblock::decode(&sb.encode(), 0).unwrap(), Some(sb));
    }

    #[test]
    fn creation_marker_is_not_a_superblock() {
        let b = Superblock::encode_creating(4096, 77);
        assert_eq!(
            Superblock::decode_slot(&b, 0).unwrap(),
            Slot::Creating { db_id: 77 }
        );
        assert_eq!(Superblock::decode(&b, 0).unwrap(), None);
    }

    #[test]
    fn foreign_bytes_are_not_a_database() {
        let mut sqlite = [0u8; 512];
        sqlite[..16].copy_from_slice(b"SQLite format 3\0");
        let e = Superblock::decode(&sqlite, 0).unwrap_err();
        assert!(matches!(e, Error::NotADatabase(_)), "{e}");
        let text = [b'x'; 512];
        assert!(matches!(
            Superblock::decode(&text, 0),
            Err(Error::NotADatabase(_))
        ));
    }

    #[test]
    fn zero_slot_is_empty() {
        assert_eq!(Superblock::decode(&[0u8; 512], 1).unwrap(), None);
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let img = sample().encode();
        for i in 0..SLOT_LEN {
            let mut b = img;
            b[i] ^= 0x40;
            assert!(
                Superblock::decode(&b, 0).is_err(),
                "flip at {i} not detected"
            );
        }
    }
}
