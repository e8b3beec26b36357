//! Bounds-checked little-endian reader and writer used by every record codec.
//!
//! The reader never panics and never allocates from a length field without
//! first checking that many bytes remain.

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

use crate::error::{Error, Result};

/// The `N` bytes at `off`: the caller has checked the bounds; if it has
/// not, debug builds stop and release builds read zeros (never a panic on
/// file contents).
#[inline]
fn bytes_at<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let got = off
        .checked_add(N)
        .and_then(|end| b.get(off..end))
        .and_then(|s| <[u8; N]>::try_from(s).ok());
    debug_assert!(got.is_some(), "read of {N} bytes at {off} past {}", b.len());
    got.unwrap_or([0; N])
}

/// Reads a little-endian u64 at `off` (caller guarantees bounds).
#[inline]
pub fn read_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(bytes_at(b, off))
}

/// Reads a little-endian u32 at `off` (caller guarantees bounds).
#[inline]
pub fn read_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(bytes_at(b, off))
}

/// Reads a little-endian u16 at `off` (caller guarantees bounds).
#[inline]
pub fn read_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(bytes_at(b, off))
}

/// Reads byte `off` (caller guarantees bounds; see [`read_u64`]).
#[inline]
pub fn read_u8(b: &[u8], off: usize) -> u8 {
    u8::from_le_bytes(bytes_at(b, off))
}

/// The `len` bytes at `off`, or `None` past the end of `b`.
#[inline]
pub fn slice_at(b: &[u8], off: usize, len: usize) -> Option<&[u8]> {
    b.get(off..off.checked_add(len)?)
}

/// Writes `src` into the engine-owned buffer `dst` at `off`. Encoders size
/// their buffers from their own layout constants, so a write past the end
/// is an engine bug (it panics), never a property of file contents.
#[inline]
pub fn put_bytes(dst: &mut [u8], off: usize, src: &[u8]) {
    let len = dst.len();
    match off
        .checked_add(src.len())
        .and_then(|end| dst.get_mut(off..end))
    {
        Some(d) => d.copy_from_slice(src),
        None => panic!("encoder wrote {} bytes at {off} into {len}", src.len()),
    }
}

/// Writes a little-endian u64 at `off` (see [`put_bytes`]).
#[inline]
pub fn put_u64(dst: &mut [u8], off: usize, v: u64) {
    put_bytes(dst, off, &v.to_le_bytes());
}

/// Writes a little-endian u32 at `off` (see [`put_bytes`]).
#[inline]
pub fn put_u32(dst: &mut [u8], off: usize, v: u32) {
    put_bytes(dst, off, &v.to_le_bytes());
}

/// Writes a little-endian u16 at `off` (see [`put_bytes`]).
#[inline]
pub fn put_u16(dst: &mut [u8], off: usize, v: u16) {
    put_bytes(dst, off, &v.to_le_bytes());
}

/// Writes byte `v` at `off` (see [`put_bytes`]).
#[inline]
pub fn put_u8(dst: &mut [u8], off: usize, v: u8) {
    put_bytes(dst, off, &[v]);
}

/// Seals an engine-built record: the crc32c of `b[..crc_at]`, written at
/// `crc_at` (the layout every fixed record of the file format shares:
/// superblock slots, segment headers, continuation records, the WAL
/// anchor). A `crc_at` past the buffer is an engine bug ([`put_bytes`]).
#[inline]
pub fn seal_crc(b: &mut [u8], crc_at: usize) {
    let crc = crc32c::crc32c(b.get(..crc_at).unwrap_or_default());
    put_u32(b, crc_at, crc);
}

/// True if bytes read from a file carry the crc [`seal_crc`] writes: the
/// crc32c of `b[..crc_at]` at `crc_at`. False when `b` is too short.
#[inline]
pub fn crc_holds(b: &[u8], crc_at: usize) -> bool {
    match (b.get(..crc_at), slice_at(b, crc_at, 4)) {
        (Some(body), Some(_)) => read_u32(b, crc_at) == crc32c::crc32c(body),
        _ => false,
    }
}

/// Appends little-endian fields to a byte vector.
#[derive(Default, Debug)]
pub struct Writer {
    /// The encoded bytes.
    pub buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Writer {
        Writer::default()
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u32 length then the bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v);
        self
    }
}

/// Reads little-endian fields from a byte slice, reporting truncation and
/// bad lengths as `Corrupted` with the given context.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `data`; `what` names the record in error messages.
    pub fn new(data: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { data, pos: 0, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let Some(s) = slice_at(self.data, self.pos, n) else {
            return Err(Error::corrupted(
                format!("{} truncated (need {n} bytes at {})", self.what, self.pos),
                self.what,
            ));
        };
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(bytes_at(self.take(N)?, 0))
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8> {
        self.array::<1>().map(u8::from_le_bytes)
    }
    /// Reads a u32.
    pub fn u32(&mut self) -> Result<u32> {
        self.array().map(u32::from_le_bytes)
    }
    /// Reads a u64.
    pub fn u64(&mut self) -> Result<u64> {
        self.array().map(u64::from_le_bytes)
    }
    /// Reads a u32 length then that many bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// Reads a count of items each at least `min_item_len` bytes long,
    /// rejecting counts the remaining bytes cannot hold.
    pub fn count(&mut self, min_item_len: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item_len.max(1)) > self.remaining() {
            return Err(Error::corrupted(
                format!("{}: count {n} exceeds the record", self.what),
                self.what,
            ));
        }
        Ok(n)
    }
    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }
    /// Errors unless every byte was consumed.
    pub fn finish(&self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(Error::corrupted(
                format!("{}: {} trailing bytes", self.what, self.remaining()),
                self.what,
            ));
        }
        Ok(())
    }
}
