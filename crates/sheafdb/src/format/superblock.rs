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
//! | 96  | 412 | reserved, zero |
//! | 508 | 4 | crc32c of bytes 0..508 |
//!
//! The magic is checked before the checksum, so a file that is not a
//! sheafdb database gets `NotADatabase`, a damaged one `Corrupted`.
//!
//! While a database is being created, slot 0 first holds a *creation
//! marker* (magic, version, page size, generation 0, identity, everything
//! else zero, valid crc). A file whose only valid slot is the marker was
//! never finished: `create` may start over on it, `open` refuses it.

use crate::error::{Error, Location, Result};
use crate::format::page::{read_u32, read_u64, MAX_PAGE_SIZE, MIN_PAGE_SIZE};
use crate::format::FORMAT_VERSION;
use crate::types::{CfId, Lsn, PageId};

/// Magic bytes at the start of a slot.
pub const MAGIC: [u8; 8] = *b"SHEAFDB\0";
/// Bytes of a slot that carry data (one sector).
pub const SLOT_LEN: usize = 512;

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
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.page_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&self.sys_root.map_or(0, |p| p.0).to_le_bytes());
        b[32..40].copy_from_slice(&self.sys_len.to_le_bytes());
        b[40..48].copy_from_slice(&self.meta_page.map_or(0, |p| p.0).to_le_bytes());
        b[48..52].copy_from_slice(&self.meta_npages.to_le_bytes());
        b[52..56].copy_from_slice(&self.meta_len.to_le_bytes());
        b[56..64].copy_from_slice(&self.file_pages.to_le_bytes());
        b[64..72].copy_from_slice(&self.next_cf.0.to_le_bytes());
        b[72..80].copy_from_slice(&self.replay_lsn.0.to_le_bytes());
        b[80..88].copy_from_slice(&self.db_id.to_le_bytes());
        b[88..96].copy_from_slice(&self.written_pages.to_le_bytes());
        seal(&mut b);
        b
    }

    /// The creation marker for a database of `page_size` and `db_id`.
    pub fn encode_creating(page_size: u32, db_id: u64) -> [u8; SLOT_LEN] {
        let mut b = [0u8; SLOT_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&page_size.to_le_bytes());
        b[80..88].copy_from_slice(&db_id.to_le_bytes());
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
        if b.len() < SLOT_LEN {
            return Err(bad("slot truncated"));
        }
        if b[..SLOT_LEN].iter().all(|&x| x == 0) {
            return Ok(Slot::Empty);
        }
        if b[0..8] != MAGIC {
            return Err(Error::NotADatabase(format!(
                "superblock slot {slot}: bad magic"
            )));
        }
        if read_u32(b, 508) != crc32c::crc32c(&b[..508]) {
            return Err(bad("checksum mismatch"));
        }
        let version = read_u32(b, 8);
        if version != FORMAT_VERSION {
            return Err(Error::NotADatabase(format!(
                "format version {version}, this build reads {FORMAT_VERSION}"
            )));
        }
        let page_size = read_u32(b, 12);
        if !valid_page_size(page_size as usize) {
            return Err(bad("invalid page size"));
        }
        let sb = Superblock {
            page_size,
            generation: read_u64(b, 16),
            sys_root: opt_page(read_u64(b, 24)),
            sys_len: read_u64(b, 32),
            meta_page: opt_page(read_u64(b, 40)),
            meta_npages: read_u32(b, 48),
            meta_len: read_u32(b, 52),
            file_pages: read_u64(b, 56),
            next_cf: CfId(read_u64(b, 64)),
            replay_lsn: Lsn(read_u64(b, 72)),
            db_id: read_u64(b, 80),
            written_pages: read_u64(b, 88),
        };
        if sb.generation == 0 && b[16..80].iter().all(|&x| x == 0) && sb.written_pages == 0 {
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
        Ok(())
    }
}

/// Sets the crc of a slot image.
fn seal(b: &mut [u8; SLOT_LEN]) {
    let crc = crc32c::crc32c(&b[..508]);
    b[508..512].copy_from_slice(&crc.to_le_bytes());
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
        }
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
