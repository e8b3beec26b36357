//! The superblock: the root of everything durable (DESIGN §2.1).
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
//! | 80  | 428 | reserved, zero |
//! | 508 | 4 | crc32c of bytes 0..508 |

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
        let crc = crc32c::crc32c(&b[..508]);
        b[508..512].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes slot `slot`. `Ok(None)` for an all-zero slot (never written).
    pub fn decode(b: &[u8], slot: u8) -> Result<Option<Superblock>> {
        let bad = |what: &str| Error::Corrupted {
            what: what.to_string(),
            location: Location::Superblock(slot),
        };
        if b.len() < SLOT_LEN {
            return Err(bad("slot truncated"));
        }
        if b[..SLOT_LEN].iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if read_u32(b, 508) != crc32c::crc32c(&b[..508]) {
            return Err(bad("checksum mismatch"));
        }
        if b[0..8] != MAGIC {
            return Err(Error::NotADatabase("bad magic".into()));
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
        };
        sb.check(slot)?;
        Ok(Some(sb))
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
        Ok(())
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
        }
    }

    #[test]
    fn round_trip() {
        let sb = sample();
        assert_eq!(Superblock::decode(&sb.encode(), 0).unwrap(), Some(sb));
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
