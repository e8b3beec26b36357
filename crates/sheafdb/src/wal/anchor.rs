//! The WAL anchor: a sector of the data file naming the log's newest use
//! (rule O16, design.md "A missing newest segment").
//!
//! Owns: the anchor's byte layout and the rule that decides, at open,
//! whether the log the files hold still reaches the use it names. Must not
//! know: how the data file is opened or written (the caller writes the
//! bytes through an [`Announcer`]).
//!
//! Rule O15's continuation records name a use from the use before it; the
//! first use after an open, or after an idle log retired its file, has no
//! such file, and once checkpoints recycle the earlier files nothing in
//! the WAL names the use the replay starts in. The anchor lives outside
//! the WAL files, in the data file, so deleting, zeroing or replacing the
//! newest segment file cannot take it along.
//!
//! # Layout (data file, [`ANCHOR_OFFSET`], one 512-byte sector)
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0  | 8 | magic `b"SHEAFANC"` |
//! | 8  | 8 | database identity |
//! | 16 | 4 | kind: 1 begun, 2 ended |
//! | 20 | 4 | reserved, zero |
//! | 24 | 8 | sequence number of the use (0: none) |
//! | 32 | 8 | salt of the use (0: none) |
//! | 40 | 8 | begun: the use's start LSN; ended: the LSN the log ends at |
//! | 48 | 4 | crc32c of bytes 0..48 |
//!
//! The sector lies in page 0 past the superblock slot (bytes 0..512), so
//! writing it never tears a superblock; builds before it never read it.

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use crate::format::codec::{
    crc_holds, put_bytes, put_u32, put_u64, read_u32, read_u64, seal_crc, slice_at,
};
use crate::types::Lsn;

use super::replay::ScannedSlot;
use super::segment::SegmentHeader;

/// Offset of the anchor in the data file: page 0's third sector.
pub const ANCHOR_OFFSET: u64 = 1024;
/// Bytes written for an anchor (one sector).
pub const ANCHOR_BYTES: usize = 512;
const MAGIC: [u8; 8] = *b"SHEAFANC";
const KIND_BEGUN: u32 = 1;
const KIND_ENDED: u32 = 2;
mod off {
    pub const MAGIC: usize = 0;
    pub const DB_ID: usize = 8;
    pub const KIND: usize = 16;
    pub const SEQ: usize = 24;
    pub const SALT: usize = 32;
    pub const LSN: usize = 40;
    pub const CRC: usize = 48;
    pub const USED: usize = 52;
}
const _: () = assert!(ANCHOR_OFFSET as usize >= crate::format::superblock::SLOT_LEN);
const _: () = assert!(ANCHOR_OFFSET as usize + ANCHOR_BYTES <= crate::format::page::MIN_PAGE_SIZE);

/// Writes an encoded anchor into the data file at [`ANCHOR_OFFSET`] and
/// makes it durable before returning.
#[derive(Clone)]
pub struct Announcer(pub Arc<AnnounceFn>);

/// The function an [`Announcer`] calls with the encoded anchor.
pub type AnnounceFn = dyn Fn(&[u8]) -> std::io::Result<()> + Send + Sync;

impl std::fmt::Debug for Announcer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Announcer")
    }
}

/// What the anchor says of the log's newest use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnchorKind {
    /// The use `seq`/`salt` began at `lsn` and may hold records: its
    /// header was durable before the anchor, and the anchor before any of
    /// its frames.
    Begun,
    /// The log ends at `lsn`, after the use `seq`/`salt` (or after none):
    /// the next use, if any, continues it and is announced before its
    /// first frame.
    Ended,
}

/// A decoded anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    pub kind: AnchorKind,
    pub db_id: u64,
    pub seq: u64,
    pub salt: u64,
    pub lsn: Lsn,
}

impl Anchor {
    /// The anchor of a use just begun, from its header.
    pub(crate) fn begun(h: &SegmentHeader) -> Anchor {
        Anchor {
            kind: AnchorKind::Begun,
            db_id: h.db_id,
            seq: h.seq,
            salt: h.salt,
            lsn: h.start_lsn,
        }
    }

    /// The sector written at [`ANCHOR_OFFSET`].
    pub fn encode(&self) -> Vec<u8> {
        debug_assert!(
            self.kind == AnchorKind::Ended || (self.seq != 0 && self.salt != 0),
            "a begun anchor names no use"
        );
        let mut b = vec![0u8; ANCHOR_BYTES];
        put_bytes(&mut b, off::MAGIC, &MAGIC);
        put_u64(&mut b, off::DB_ID, self.db_id);
        let kind = match self.kind {
            AnchorKind::Begun => KIND_BEGUN,
            AnchorKind::Ended => KIND_ENDED,
        };
        put_u32(&mut b, off::KIND, kind);
        put_u64(&mut b, off::SEQ, self.seq);
        put_u64(&mut b, off::SALT, self.salt);
        put_u64(&mut b, off::LSN, self.lsn.0);
        seal_crc(&mut b, off::CRC);
        debug_assert_eq!(
            Anchor::decode(&b, self.db_id),
            Some(*self),
            "an anchor round-trips"
        );
        b
    }

    /// The anchor in `sector` (read at [`ANCHOR_OFFSET`]), if whole and of
    /// database `db_id`; `None` for zeros (a file never anchored), a torn
    /// write or any other bytes: then nothing is checked.
    pub fn decode(sector: &[u8], db_id: u64) -> Option<Anchor> {
        let used = sector.get(..off::USED)?;
        if slice_at(used, off::MAGIC, MAGIC.len())? != MAGIC || !crc_holds(used, off::CRC) {
            return None;
        }
        let kind = match read_u32(used, off::KIND) {
            KIND_BEGUN => AnchorKind::Begun,
            KIND_ENDED => AnchorKind::Ended,
            _ => return None,
        };
        let a = Anchor {
            kind,
            db_id: read_u64(used, off::DB_ID),
            seq: read_u64(used, off::SEQ),
            salt: read_u64(used, off::SALT),
            lsn: Lsn(read_u64(used, off::LSN)),
        };
        (a.db_id == db_id).then_some(a)
    }

    /// Rule O16 (reader side): `None` if the files still reach the use
    /// the anchor names, else what is missing. They do if a file holds
    /// that use, or a use that continues it (its successor, begun after
    /// the anchor was written; its own anchor may not have been durable
    /// yet), or if the anchor says the log ended at or below `from`
    /// (everything before is in the base, and nothing was appended after,
    /// or a newer anchor would say so).
    pub(crate) fn missing(&self, slots: &[ScannedSlot], from: Lsn) -> Option<String> {
        let headers = || slots.iter().filter_map(|s| s.header);
        let named = headers().any(|h| (h.seq, h.salt) == (self.seq, self.salt));
        let continued = headers().any(|h| h.prev_salt == self.salt && h.seq > self.seq);
        let ended = self.kind == AnchorKind::Ended && self.lsn <= from;
        if named || continued || ended {
            return None;
        }
        Some(match self.kind {
            AnchorKind::Begun => format!(
                "the data file records that the WAL went on in segment use {} (from LSN {}), \
                 and no WAL file holds it or a use after it",
                self.seq, self.lsn.0
            ),
            AnchorKind::Ended => format!(
                "the data file records that the WAL ended at LSN {}, after segment use {}, \
                 past the replay start {}, and no WAL file holds that use or a use after it",
                self.lsn.0, self.seq, from.0
            ),
        })
    }
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

    #[test]
    fn anchors_round_trip_and_refuse_damage() {
        let a = Anchor {
            kind: AnchorKind::Ended,
            db_id: 9,
            seq: 4,
            salt: 77,
            lsn: Lsn(8192),
        };
        let b = a.encode();
        assert_eq!(b.len(), ANCHOR_BYTES);
        assert_eq!(Anchor::decode(&b, 9), Some(a));
        assert_eq!(Anchor::decode(&b, 8), None, "another database's anchor");
        assert_eq!(Anchor::decode(&[0u8; ANCHOR_BYTES], 9), None);
        for i in 0..off::USED {
            let mut bad = b.clone();
            bad[i] ^= 0x08;
            assert_eq!(Anchor::decode(&bad, 9), None, "byte {i}");
        }
    }
}
