//! Storage: the only layer that touches the operating system's file API.
//!
//! Owns: the [`Storage`] trait (one file: positional reads/writes, sync,
//! length) and the [`Vfs`] trait (a directory of such files: open, create,
//! remove, list, directory sync, exclusive lock). Implementations:
//! - [`file::FsVfs`]: real files (pread/pwrite/pwritev, fdatasync, flock);
//! - [`mem::MemVfs`]: in-memory, for tests and ephemeral databases;
//! - [`sim::SimVfs`]: fault-injecting simulation of design.md §12 (durable image
//!   plus unsynced writes; `crash()` keeps, drops or tears each unsynced write
//!   per 512-byte sector; fails the N-th operation on request);
//! - [`hook::HookVfs`]: wraps any of these and asks a test's hook before
//!   each file operation (fail, delay, count, park).
//! - [`hint`]: a CPU cache hint (not a file API; here because this layer
//!   holds the crate's `unsafe` code).
//! - [`run`] and [`slab`]: reference-counted page runs in memory, their
//!   common sizes on huge pages (not a file API either; `unsafe` too).
//! - [`heap`]: freed heap memory given back to the system after a very
//!   large transaction (`unsafe`: a C library call).
//!
//! Must not know: pages, B-trees, the WAL. Offsets and lengths are bytes.
//!
//! Invariants every implementation keeps:
//! - `read_at` fills the whole buffer or returns an error (`UnexpectedEof`
//!   when the range passes the end of the file); never a short read.
//! - `write_at` writes all bytes or returns an error; a write past the end
//!   extends the file (the gap reads as zeros).
//! - After `sync_data` returns `Ok`, every earlier write, hole punch and
//!   length change of that file survives a crash. Creating or removing a file survives a
//!   crash only after `Vfs::sync_dir`.

mod conformance;
pub mod file;
pub mod heap;
pub mod hint;
pub mod hook;
pub mod mem;
pub mod run;
pub mod sim;
pub mod slab;

use std::io;
use std::sync::Arc;

/// One open file.
#[allow(clippy::len_without_is_empty)]
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes all of `data` at `offset`.
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Writes the buffers back to back starting at `offset` (one `pwritev`
    /// where the platform has it).
    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let mut pos = offset;
        for b in bufs {
            self.write_at(pos, b)?;
            pos += b.len() as u64;
        }
        Ok(())
    }
    /// Makes every earlier write and length change durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Truncates or extends (with zeros) to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Gives the blocks of `[offset, offset + len)` back to the file
    /// system (a hole; `fallocate(PUNCH_HOLE)` on Linux): the range reads
    /// as zeros afterwards, the length does not change (a range past the
    /// end is ignored). Durable with the next [`Storage::sync_data`]; a
    /// crash before it may leave any part of the range as it was. The
    /// default refuses (`Unsupported`): the bytes stay, and a database
    /// keeps its free pages allocated.
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this storage cannot punch holes",
        ))
    }
}

/// How [`Vfs::open`] treats a missing or existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Open an existing file; `NotFound` if missing.
    Existing,
    /// Create a new file; `AlreadyExists` if present.
    CreateNew,
    /// Open, creating if missing.
    OpenOrCreate,
    /// Open an existing file for reading only; `NotFound` if missing.
    /// Writes, length changes and syncs through it fail
    /// (`PermissionDenied`), so a read-only database provably changes
    /// nothing.
    ReadOnly,
}

/// A file opened with [`OpenMode::ReadOnly`]: reads pass through, every
/// write, length change or sync fails.
#[derive(Debug)]
pub(crate) struct ReadOnlyFile(pub Arc<dyn Storage>);

fn refused(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{what} through a file opened read-only"),
    )
}

impl Storage for ReadOnlyFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, _: u64, _: &[u8]) -> io::Result<()> {
        Err(refused("write"))
    }
    fn write_vectored_at(&self, _: u64, _: &[&[u8]]) -> io::Result<()> {
        Err(refused("write"))
    }
    fn sync_data(&self) -> io::Result<()> {
        Err(refused("sync"))
    }
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn set_len(&self, _: u64) -> io::Result<()> {
        Err(refused("length change"))
    }
    fn punch_hole(&self, _: u64, _: u64) -> io::Result<()> {
        Err(refused("hole punch"))
    }
}

/// A directory of files: where a database and its WAL live.
pub trait Vfs: Send + Sync + std::fmt::Debug {
    /// Opens `name` (a plain file name, no separators).
    fn open(&self, name: &str, mode: OpenMode) -> io::Result<Arc<dyn Storage>>;
    /// True if `name` exists.
    fn exists(&self, name: &str) -> io::Result<bool>;
    /// Removes `name`.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Names of the entries in the directory, sorted: files, and also
    /// anything else (a directory under a WAL segment's name must make
    /// the open fail, not pass for a missing segment).
    fn list(&self) -> io::Result<Vec<String>>;
    /// Makes file creations and removals durable (fsync of the directory).
    fn sync_dir(&self) -> io::Result<()>;
    /// Renames `from` to `to`; `AlreadyExists` if `to` exists (a file is
    /// never replaced). Atomic (a reader sees one name or the other),
    /// durable after `sync_dir`. The default refuses (`Unsupported`): a
    /// `Vfs` without renames cannot take backups.
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let _ = (from, to);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this Vfs cannot rename files",
        ))
    }
    /// Takes an exclusive lock on `name` for as long as the returned guard
    /// lives. `WouldBlock` if another holder (this process or another) has it.
    fn lock(&self, name: &str) -> io::Result<Box<dyn LockGuard>>;
    /// Takes a shared lock on `name` (read-only openers): any number of
    /// shared holders at once, none while an exclusive one holds it.
    /// `WouldBlock` otherwise. The default takes the exclusive lock (a
    /// `Vfs` without shared locks lets one reader in at a time).
    fn lock_shared(&self, name: &str) -> io::Result<Box<dyn LockGuard>> {
        self.lock(name)
    }
}

/// Releases a [`Vfs::lock`] when dropped.
pub trait LockGuard: Send + Sync + std::fmt::Debug {}
