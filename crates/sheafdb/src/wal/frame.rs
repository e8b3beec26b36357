//! Record frames: the envelope around every WAL payload.
//!
//! Owns: the frame byte layout, its checksum, and the validity rules replay
//! applies. Must not know: what payloads mean, segments' files, group commit.
//!
//! # Frame (little-endian)
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0  | 4 | crc32c of bytes 4..24+len (header fields and payload) |
//! | 4  | 4 | `len`: payload bytes |
//! | 8  | 8 | `lsn`: this frame's own LSN (its logical byte position) |
//! | 16 | 8 | `salt` of the segment use it was written in |
//! | 24 | len | payload |
//!
//! A frame is valid only if: its header is not all zeros, its salt equals the
//! use's salt, its LSN equals the position where it was found (continuity),
//! it fits in what is left of the use, and the crc matches. Frames never
//! span segments.

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

use crate::format::codec::{put_u32, put_u64, read_u32, read_u64};
use crate::types::Lsn;

/// Bytes of the frame header before the payload.
pub const FRAME_HEADER_BYTES: usize = 24;

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
    /// First byte the crc covers: everything after the crc field.
    pub const CRC_FROM: usize = LEN;

    const _: () = assert!(CRC + 4 == LEN && LEN + 4 == LSN && LSN + 8 == SALT);
    const _: () = assert!(SALT + 8 == super::FRAME_HEADER_BYTES);
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
    /// The frame header is all zeros (space never written in this use).
    ZeroedSpace,
    /// The salt belongs to another use (a stale record of recycled space).
    StaleSalt,
    /// The LSN field is not the frame's position (a discontinuity).
    LsnMismatch,
    /// The length field runs past the end of the segment use.
    BadLength,
    /// The checksum does not match (a torn or damaged frame).
    ChecksumMismatch,
}

/// The fixed-size header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub crc: u32,
    pub len: u32,
    pub lsn: Lsn,
    pub salt: u64,
}

impl FrameHeader {
    /// Parses the first [`FRAME_HEADER_BYTES`] of `bytes`.
    pub fn parse(bytes: &[u8; FRAME_HEADER_BYTES]) -> FrameHeader {
        FrameHeader {
            crc: read_u32(bytes, off::CRC),
            len: read_u32(bytes, off::LEN),
            lsn: Lsn(read_u64(bytes, off::LSN)),
            salt: read_u64(bytes, off::SALT),
        }
    }

    /// Checks everything but the crc for a frame found at `expected_lsn` in
    /// a use with `salt`, with `room_bytes` left in the use (header
    /// included). Returns the frame's total length.
    pub fn check(
        &self,
        raw: &[u8; FRAME_HEADER_BYTES],
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
        let frame_bytes = FRAME_HEADER_BYTES as u64 + u64::from(self.len);
        if frame_bytes > room_bytes {
            return Err(StopReason::BadLength);
        }
        Ok(frame_bytes)
    }

    /// True if the stored crc matches the header fields and `payload`.
    pub fn crc_matches(&self, raw: &[u8; FRAME_HEADER_BYTES], payload: &[u8]) -> bool {
        debug_assert_eq!(payload.len(), self.len as usize);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&raw[off::CRC_FROM..]), payload);
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

/// Encodes a frame header into `out` for a payload of `payload_len` bytes.
pub(crate) fn encode_header(
    out: &mut [u8; FRAME_HEADER_BYTES],
    lsn: Lsn,
    salt: u64,
    payload_len: u32,
    payload: PayloadCrc<'_>,
) {
    put_u32(out, off::LEN, payload_len);
    put_u64(out, off::LSN, lsn.0);
    put_u64(out, off::SALT, salt);
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

/// A whole frame (header and payload), for tests and tools.
#[cfg(test)]
pub(crate) fn encode_frame(lsn: Lsn, salt: u64, payload: &[u8]) -> Vec<u8> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    encode_header(
        &mut header,
        lsn,
        salt,
        payload.len() as u32,
        PayloadCrc::Hash(payload),
    );
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

    fn header_of(frame: &[u8]) -> [u8; FRAME_HEADER_BYTES] {
        frame[..FRAME_HEADER_BYTES].try_into().unwrap()
    }

    #[test]
    fn frame_validates() {
        let frame = encode_frame(Lsn(5000), 42, b"hello");
        let raw = header_of(&frame);
        let h = FrameHeader::parse(&raw);
        assert_eq!(h.len, 5);
        assert_eq!(h.check(&raw, Lsn(5000), 42, 29), Ok(29));
        assert!(h.crc_matches(&raw, &frame[24..]));
        // The crc is a straight crc over bytes 4.. .
        assert_eq!(h.crc, crc32c::crc32c(&frame[4..]));
        // Combining a precomputed payload crc gives the same header.
        let mut combined = [0u8; FRAME_HEADER_BYTES];
        let crc = crc32c::crc32c(b"hello");
        encode_header(
            &mut combined,
            Lsn(5000),
            42,
            5,
            PayloadCrc::Combine { crc, len: 5 },
        );
        assert_eq!(combined, raw);
    }

    #[test]
    fn each_rule_rejects() {
        let frame = encode_frame(Lsn(5000), 42, b"hello");
        let raw = header_of(&frame);
        let h = FrameHeader::parse(&raw);
        assert_eq!(
            h.check(&raw, Lsn(5000), 43, 100),
            Err(StopReason::StaleSalt)
        );
        assert_eq!(
            h.check(&raw, Lsn(5001), 42, 100),
            Err(StopReason::LsnMismatch)
        );
        assert_eq!(h.check(&raw, Lsn(5000), 42, 28), Err(StopReason::BadLength));
        let zero = [0u8; FRAME_HEADER_BYTES];
        assert_eq!(
            FrameHeader::parse(&zero).check(&zero, Lsn(5000), 42, 100),
            Err(StopReason::ZeroedSpace)
        );
        for i in 0..frame.len() {
            let mut bad = frame.clone();
            bad[i] ^= 1;
            let raw = header_of(&bad);
            let h = FrameHeader::parse(&raw);
            let ok = h.check(&raw, Lsn(5000), 42, 100).is_ok()
                && h.crc_matches(&raw, &bad[24..24 + (h.len as usize).min(bad.len() - 24)]);
            assert!(!ok, "flip at byte {i} went unnoticed");
        }
    }
}
