//! Record frames: the envelope around every WAL payload.
//!
//! Owns: the frame byte layouts (one per segment format), their checksum,
//! and the validity rules replay applies. Must not know: what payloads
//! mean, segments' files, group commit.
//!
//! # Frame, format 3 (written by this build; little-endian)
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0  | 4 | crc32c of bytes 4..32+len (header fields and payload) |
//! | 4  | 4 | `len`: payload bytes |
//! | 8  | 8 | `lsn`: this frame's own LSN (its logical byte position) |
//! | 16 | 8 | `salt` of the segment use it was written in |
//! | 24 | 8 | `synced`: the log was durable (`fdatasync`ed) below this LSN when the frame was appended; at most `lsn` |
//! | 32 | len | payload |
//!
//! Format 2 (segments of earlier builds, still read) is the same without
//! the `synced` field: a 24-byte header, the crc over bytes 4..24+len.
//!
//! A frame is valid only if: its header is not all zeros, its salt equals the
//! use's salt, its LSN equals the position where it was found (continuity),
//! it fits in what is left of the use, its `synced` mark is not past its own
//! LSN, and the crc matches. Frames never span segments.
//!
//! The `synced` mark is the evidence replay uses to tell a damaged frame
//! from a torn tail (design.md §7, "Damage in the middle of the log"): a
//! valid frame whose mark is past the position where replay stopped proves
//! that position was durable before the crash, so the stop is damage, not
//! an unfinished write.

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

use crate::format::codec::{put_u32, put_u64, read_u32, read_u64};
use crate::types::Lsn;

/// Bytes of the frame header before the payload, in the format this build
/// writes ([`FrameFormat::V3`]).
pub const FRAME_HEADER_BYTES: usize = FrameFormat::V3.header_bytes();

/// Bytes of the longest frame header of any format.
pub(crate) const MAX_FRAME_HEADER_BYTES: usize = FRAME_HEADER_BYTES;

/// Byte offsets of the frame header's fields (the table in the module doc).
mod off {
    /// crc32c over `LEN..` of the header and then the payload.
    pub const CRC: usize = 0;
    /// Payload length, u32.
    pub const LEN: usize = 4;
    /// The frame's own LSN, u64.
    pub const LSN: usize = 8;
    /// The segment use's salt, u64.
    pub const SALT: usize = 16;
    /// Format 3 only: the synced mark, u64.
    pub const SYNCED: usize = 24;
    /// First byte the crc covers: everything after the crc field.
    pub const CRC_FROM: usize = LEN;
    /// End of a format-2 header.
    pub const V2_END: usize = 24;
    /// End of a format-3 header.
    pub const V3_END: usize = 32;

    const _: () = assert!(CRC + 4 == LEN && LEN + 4 == LSN && LSN + 8 == SALT);
    const _: () = assert!(SALT + 8 == V2_END && SALT + 8 == SYNCED && SYNCED + 8 == V3_END);
}

/// Offset of the salt in every format's header (replay searches for it).
pub(crate) const SALT_OFFSET: usize = off::SALT;

/// The frame layout of a segment use, named by its header's format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameFormat {
    /// 24-byte headers without a synced mark (read only).
    V2,
    /// 32-byte headers with a synced mark (written by this build).
    V3,
}

impl FrameFormat {
    /// Bytes of this format's frame header.
    pub const fn header_bytes(self) -> usize {
        match self {
            FrameFormat::V2 => off::V2_END,
            FrameFormat::V3 => off::V3_END,
        }
    }
}

/// Why replay stopped at a frame position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// There was no segment use to replay (a new or emptied WAL).
    NoLog,
    /// Fewer than a frame header's bytes are left in the segment use.
    SegmentFull,
    /// The segment file ends before the frame does (a truncated file).
    FileEnd,
    /// The segment file ends before the frame does, after frames of this
    /// use, and is shorter than its header says: it was cut after it had
    /// been made full length (durably, before any frame went in), so
    /// whatever followed is lost to damage, not to a torn write.
    FileCut,
    /// The use ended whole, and its file names the use that continued it
    /// (rule O15), but no segment file holds that use: it was deleted,
    /// emptied or replaced after the fact.
    UseMissing,
    /// The frame header is all zeros (space never written in this use).
    ZeroedSpace,
    /// The salt belongs to another use (a stale record of recycled space).
    StaleSalt,
    /// The LSN field is not the frame's position (a discontinuity).
    LsnMismatch,
    /// The length field runs past the end of the segment use.
    BadLength,
    /// The synced mark is past the frame's own LSN (impossible when
    /// written, so the header is damaged).
    SyncedMarkAhead,
    /// The checksum does not match (a torn or damaged frame).
    ChecksumMismatch,
}

impl StopReason {
    /// True if the bytes replay stopped at hold something that is not a
    /// whole frame of this use but may be one damaged in place: its header
    /// carries this use's salt and position, or only its checksum fails.
    /// (Zeroed space, the end of the use or file, and stale frames of an
    /// earlier use are where a log ordinarily ends.)
    pub(crate) fn may_be_damage(self) -> bool {
        matches!(
            self,
            StopReason::LsnMismatch
                | StopReason::BadLength
                | StopReason::SyncedMarkAhead
                | StopReason::ChecksumMismatch
        )
    }
}

/// The fixed-size header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub crc: u32,
    pub len: u32,
    pub lsn: Lsn,
    pub salt: u64,
    /// The synced mark; `Lsn(0)` (no evidence) in format 2.
    pub synced: Lsn,
    format: FrameFormat,
}

impl FrameHeader {
    /// Parses a header of `format` from `raw`, which holds exactly
    /// `format.header_bytes()` bytes.
    pub fn parse(raw: &[u8], format: FrameFormat) -> FrameHeader {
        debug_assert_eq!(raw.len(), format.header_bytes());
        FrameHeader {
            crc: read_u32(raw, off::CRC),
            len: read_u32(raw, off::LEN),
            lsn: Lsn(read_u64(raw, off::LSN)),
            salt: read_u64(raw, off::SALT),
            synced: match format {
                FrameFormat::V2 => Lsn(0),
                FrameFormat::V3 => Lsn(read_u64(raw, off::SYNCED)),
            },
            format,
        }
    }

    /// Checks everything but the crc for a frame found at `expected_lsn` in
    /// a use with `salt`, with `room_bytes` left in the use (header
    /// included). Returns the frame's total length.
    pub fn check(
        &self,
        raw: &[u8],
        expected_lsn: Lsn,
        salt: u64,
        room_bytes: u64,
    ) -> Result<u64, StopReason> {
        if raw.iter().all(|&b| b == 0) {
            return Err(StopReason::ZeroedSpace);
        }
        if self.salt != salt {
            return Err(StopReason::StaleSalt);
        }
        if self.lsn != expected_lsn {
            return Err(StopReason::LsnMismatch);
        }
        let frame_bytes = self.format.header_bytes() as u64 + u64::from(self.len);
        if frame_bytes > room_bytes {
            return Err(StopReason::BadLength);
        }
        if self.synced > self.lsn {
            return Err(StopReason::SyncedMarkAhead);
        }
        Ok(frame_bytes)
    }

    /// True if the stored crc matches the header fields and `payload`.
    pub fn crc_matches(&self, raw: &[u8], payload: &[u8]) -> bool {
        debug_assert_eq!(payload.len(), self.len as usize);
        let fields = raw.get(off::CRC_FROM..).unwrap_or_default();
        let crc = crc32c::crc32c_append(crc32c::crc32c(fields), payload);
        crc == self.crc
    }
}

/// How [`encode_header`] gets the payload's part of the frame crc.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PayloadCrc<'a> {
    /// Hash these payload bytes after the header fields (fast for small
    /// payloads: tens of nanoseconds for a few dozen bytes).
    Hash(&'a [u8]),
    /// The payload's own crc32c, computed beforehand outside any lock, and
    /// its length; combined with the header's crc in constant time (about
    /// 15 µs, so only worth it for large payloads).
    Combine { crc: u32, len: usize },
}

/// Where a frame goes and what it vouches for: the header fields besides
/// the length and crc.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FramePlace {
    /// The frame's LSN.
    pub lsn: Lsn,
    /// The salt of the use it is written in.
    pub salt: u64,
    /// The log's durable end when the frame was appended (at most `lsn`).
    pub synced: Lsn,
}

/// Encodes a format-3 frame header into `out` for a payload of
/// `payload_len` bytes.
pub(crate) fn encode_header(
    out: &mut [u8; FRAME_HEADER_BYTES],
    place: FramePlace,
    payload_len: u32,
    payload: PayloadCrc<'_>,
) {
    assert!(
        place.synced <= place.lsn,
        "a frame at {:?} cannot vouch for the log past itself ({:?})",
        place.lsn,
        place.synced
    );
    put_u32(out, off::LEN, payload_len);
    put_u64(out, off::LSN, place.lsn.0);
    put_u64(out, off::SALT, place.salt);
    put_u64(out, off::SYNCED, place.synced.0);
    let header_crc = crc32c::crc32c(&out[off::CRC_FROM..]);
    let crc = match payload {
        PayloadCrc::Hash(bytes) => {
            debug_assert_eq!(bytes.len(), payload_len as usize);
            crc32c::crc32c_append(header_crc, bytes)
        }
        PayloadCrc::Combine { crc, len } => {
            debug_assert_eq!(len, payload_len as usize);
            crc32c::crc32c_combine(header_crc, crc, len)
        }
    };
    put_u32(out, off::CRC, crc);
}

/// A whole format-3 frame (header and payload), for tests and tools.
#[cfg(test)]
pub(crate) fn encode_frame(place: FramePlace, payload: &[u8]) -> Vec<u8> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    encode_header(
        &mut header,
        place,
        payload.len() as u32,
        PayloadCrc::Hash(payload),
    );
    let mut out = header.to_vec();
    out.extend_from_slice(payload);
    out
}

/// A whole format-2 frame, for tests of reading older segments.
#[cfg(test)]
pub(crate) fn encode_v2_frame(lsn: Lsn, salt: u64, payload: &[u8]) -> Vec<u8> {
    let mut header = [0u8; off::V2_END];
    put_u32(&mut header, off::LEN, payload.len() as u32);
    put_u64(&mut header, off::LSN, lsn.0);
    put_u64(&mut header, off::SALT, salt);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header[off::CRC_FROM..]), payload);
    put_u32(&mut header, off::CRC, crc);
    let mut out = header.to_vec();
    out.extend_from_slice(payload);
    out
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

    const H: usize = FRAME_HEADER_BYTES;

    fn place(lsn: u64, salt: u64, synced: u64) -> FramePlace {
        FramePlace {
            lsn: Lsn(lsn),
            salt,
            synced: Lsn(synced),
        }
    }

    #[test]
    fn frame_validates() {
        let frame = encode_frame(place(5000, 42, 4100), b"hello");
        let raw = &frame[..H];
        let h = FrameHeader::parse(raw, FrameFormat::V3);
        assert_eq!((h.len, h.synced), (5, Lsn(4100)));
        assert_eq!(h.check(raw, Lsn(5000), 42, 37), Ok(37));
        assert!(h.crc_matches(raw, &frame[H..]));
        // The crc is a straight crc over bytes 4.. .
        assert_eq!(h.crc, crc32c::crc32c(&frame[4..]));
        // Combining a precomputed payload crc gives the same header.
        let mut combined = [0u8; FRAME_HEADER_BYTES];
        let crc = crc32c::crc32c(b"hello");
        encode_header(
            &mut combined,
            place(5000, 42, 4100),
            5,
            PayloadCrc::Combine { crc, len: 5 },
        );
        assert_eq!(&combined[..], raw);
    }

    #[test]
    fn format_2_frames_still_validate() {
        let frame = encode_v2_frame(Lsn(5000), 42, b"hello");
        assert_eq!(frame.len(), 24 + 5);
        let raw = &frame[..24];
        let h = FrameHeader::parse(raw, FrameFormat::V2);
        assert_eq!((h.len, h.synced), (5, Lsn(0)));
        assert_eq!(h.check(raw, Lsn(5000), 42, 29), Ok(29));
        assert!(h.crc_matches(raw, &frame[24..]));
    }

    #[test]
    #[should_panic(expected = "cannot vouch")]
    fn a_frame_never_vouches_past_itself() {
        encode_frame(place(5000, 42, 5001), b"x");
    }

    #[test]
    fn each_rule_rejects() {
        let frame = encode_frame(place(5000, 42, 4096), b"hello");
        let raw = &frame[..H];
        let h = FrameHeader::parse(raw, FrameFormat::V3);
        assert_eq!(h.check(raw, Lsn(5000), 43, 100), Err(StopReason::StaleSalt));
        assert_eq!(
            h.check(raw, Lsn(5001), 42, 100),
            Err(StopReason::LsnMismatch)
        );
        assert_eq!(h.check(raw, Lsn(5000), 42, 36), Err(StopReason::BadLength));
        let zero = [0u8; FRAME_HEADER_BYTES];
        assert_eq!(
            FrameHeader::parse(&zero, FrameFormat::V3).check(&zero, Lsn(5000), 42, 100),
            Err(StopReason::ZeroedSpace)
        );
        // A mark past the frame's own LSN is refused before the crc.
        let mut ahead = frame.clone();
        put_u64(&mut ahead, off::SYNCED, 5001);
        let raw = &ahead[..H];
        assert_eq!(
            FrameHeader::parse(raw, FrameFormat::V3).check(raw, Lsn(5000), 42, 100),
            Err(StopReason::SyncedMarkAhead)
        );
        for i in 0..frame.len() {
            let mut bad = frame.clone();
            bad[i] ^= 1;
            let raw = &bad[..H];
            let h = FrameHeader::parse(raw, FrameFormat::V3);
            let ok = h.check(raw, Lsn(5000), 42, 100).is_ok()
                && h.crc_matches(raw, &bad[H..H + (h.len as usize).min(bad.len() - H)]);
            assert!(!ok, "flip at byte {i} went unnoticed");
        }
    }
}
