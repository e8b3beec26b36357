//! In-memory files: a [`Vfs`] for tests and ephemeral databases.
//!
//! Owns: a shared map from file name to [`MemFile`] and the set of held
//! locks. Clones of a [`MemVfs`] share both, so two "handles" of one
//! directory see the same files and contend for the same locks.
//!
//! Invariants: same as every [`Storage`]: reads fill the buffer or fail with
//! `UnexpectedEof`; writes past the end zero-fill the gap. Syncs are no-ops
//! (nothing is ever lost). Like POSIX, an open handle keeps working on its
//! file after the name is removed; `lock` creates the named file if it is
//! missing, as [`super::file::FsVfs`] does.
//!
//! Must not know: what the bytes mean.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::file::check_name;
use super::{LockGuard, OpenMode, Storage, Vfs};

/// A directory held in memory. Clones share the same files and locks.
#[derive(Debug, Clone, Default)]
pub struct MemVfs {
    files: Arc<Mutex<BTreeMap<String, Arc<MemFile>>>>,
    locks: LockTable,
}

impl MemVfs {
    /// An empty directory.
    pub fn new() -> MemVfs {
        MemVfs::default()
    }
}

impl Vfs for MemVfs {
    fn open(&self, name: &str, mode: OpenMode) -> io::Result<Arc<dyn Storage>> {
        check_name(name)?;
        let mut files = self.files.lock();
        let existing = files.get(name).cloned();
        let file = match (existing, mode) {
            (Some(_), OpenMode::CreateNew) => return Err(already_exists(name)),
            (Some(f), _) => f,
            (None, OpenMode::Existing | OpenMode::ReadOnly) => return Err(not_found(name)),
            (None, _) => {
                let f = Arc::new(MemFile::default());
                files.insert(name.to_owned(), Arc::clone(&f));
                f
            }
        };
        if mode == OpenMode::ReadOnly {
            return Ok(Arc::new(super::ReadOnlyFile(file)));
        }
        Ok(file as Arc<dyn Storage>)
    }

    fn exists(&self, name: &str) -> io::Result<bool> {
        check_name(name)?;
        Ok(self.files.lock().contains_key(name))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        check_name(name)?;
        match self.files.lock().remove(name) {
            Some(_) => Ok(()),
            None => Err(not_found(name)),
        }
    }

    fn list(&self) -> io::Result<Vec<String>> {
        // BTreeMap keys are already sorted.
        Ok(self.files.lock().keys().cloned().collect())
    }

    fn sync_dir(&self) -> io::Result<()> {
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        check_name(from)?;
        check_name(to)?;
        let mut files = self.files.lock();
        if files.contains_key(to) {
            return Err(already_exists(to));
        }
        let f = files.remove(from).ok_or_else(|| not_found(from))?;
        files.insert(to.to_owned(), f);
        Ok(())
    }

    fn lock(&self, name: &str) -> io::Result<Box<dyn LockGuard>> {
        check_name(name)?;
        self.files
            .lock()
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(MemFile::default()));
        Ok(Box::new(NameLock::acquire(&self.locks, name, false)?))
    }

    fn lock_shared(&self, name: &str) -> io::Result<Box<dyn LockGuard>> {
        check_name(name)?;
        if !self.files.lock().contains_key(name) {
            return Err(not_found(name));
        }
        Ok(Box::new(NameLock::acquire(&self.locks, name, true)?))
    }
}

/// Who holds the lock on a name: one exclusive holder, or this many
/// shared ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    Exclusive,
    Shared(usize),
}

/// The locks of a directory, by name.
pub(crate) type LockTable = Arc<Mutex<HashMap<String, Held>>>;

/// A lock on a name in a shared table; dropping it releases it.
///
/// Used by [`MemVfs`] and [`super::sim::SimVfs`].
#[derive(Debug)]
pub(crate) struct NameLock {
    locks: LockTable,
    name: String,
}

impl NameLock {
    /// Takes `name` in `locks` (shared or exclusive), or fails with
    /// `WouldBlock` if a holder excludes it.
    pub(crate) fn acquire(locks: &LockTable, name: &str, shared: bool) -> io::Result<Self> {
        let mut table = locks.lock();
        let next = match (table.get(name).copied(), shared) {
            (None, false) => Held::Exclusive,
            (None, true) => Held::Shared(1),
            (Some(Held::Shared(n)), true) => Held::Shared(n + 1),
            (Some(_), _) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("{name} is locked by another handle"),
                ))
            }
        };
        table.insert(name.to_owned(), next);
        Ok(NameLock {
            locks: Arc::clone(locks),
            name: name.to_owned(),
        })
    }
}

impl Drop for NameLock {
    fn drop(&mut self) {
        let mut table = self.locks.lock();
        match table.get(&self.name).copied() {
            Some(Held::Shared(n)) if n > 1 => {
                table.insert(self.name.clone(), Held::Shared(n - 1));
            }
            _ => {
                table.remove(&self.name);
            }
        }
    }
}

impl LockGuard for NameLock {}

pub(crate) fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such file"))
}

pub(crate) fn already_exists(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{name} already exists"),
    )
}

/// One in-memory file.
#[derive(Debug, Default)]
pub struct MemFile {
    data: RwLock<Vec<u8>>,
}

impl Storage for MemFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        read_image(&self.data.read(), offset, buf)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        write_image(&mut self.data.write(), offset, data)
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let mut image = self.data.write();
        let mut pos = offset;
        for b in bufs {
            write_image(&mut image, pos, b)?;
            pos += b.len() as u64;
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.data.read().len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        resize_image(&mut self.data.write(), len)
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        zero_range(&mut self.data.write(), offset, len);
        Ok(())
    }
}

/// Zeroes the part of `[offset, offset + len)` inside `image` (a hole
/// punched: the length does not change, a range past the end is ignored).
/// Returns that part.
pub(crate) fn zero_range(image: &mut [u8], offset: u64, len: u64) -> std::ops::Range<usize> {
    let size = image.len() as u64;
    // Both are at most the image's length, so they fit in a usize.
    let start = offset.min(size) as usize;
    let end = offset.saturating_add(len).min(size) as usize;
    image[start..end].fill(0);
    start..end
}

/// Truncates or zero-extends `image` to `len` bytes; an error (not an abort)
/// when the memory cannot be had.
pub(crate) fn resize_image(image: &mut Vec<u8>, len: u64) -> io::Result<()> {
    let len = to_usize(len)?;
    if len > image.len() {
        image.try_reserve(len - image.len()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("cannot grow in-memory file to {len} bytes: {e}"),
            )
        })?;
    }
    image.resize(len, 0);
    Ok(())
}

/// Converts a file offset or length to `usize`, failing (not panicking) when
/// it cannot be held in memory.
pub(crate) fn to_usize(n: u64) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("offset {n} too large for an in-memory file"),
        )
    })
}

/// Copies `image[offset..offset + buf.len()]` into `buf`; `UnexpectedEof`
/// if that range passes the end of `image`.
pub(crate) fn read_image(image: &[u8], offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let range = usize::try_from(offset)
        .ok()
        .and_then(|start| Some(start..start.checked_add(buf.len())?))
        .filter(|r| r.end <= image.len());
    match range {
        Some(r) => {
            buf.copy_from_slice(&image[r]);
            Ok(())
        }
        None => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "read of {} bytes at {offset} passes the end ({} bytes)",
                buf.len(),
                image.len()
            ),
        )),
    }
}

/// Writes `data` at `offset` into `image`, zero-filling any gap past the end.
pub(crate) fn write_image(image: &mut Vec<u8>, offset: u64, data: &[u8]) -> io::Result<()> {
    let start = to_usize(offset)?;
    let end = start
        .checked_add(data.len())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "write end overflows"))?;
    if end > image.len() {
        resize_image(image, end as u64)?;
    }
    image[start..end].copy_from_slice(data);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conformance() {
        crate::storage::conformance::run_all(&|| Box::new(MemVfs::new()));
    }

    #[test]
    fn huge_offsets_error_instead_of_panicking() {
        let vfs = MemVfs::new();
        let f = vfs.open("a", OpenMode::CreateNew).unwrap();
        assert!(f.write_at(u64::MAX, b"x").is_err());
        assert!(f.set_len(u64::MAX).is_err());
        assert!(f.write_at(u64::MAX / 2, b"x").is_err());
        assert_eq!(f.len().unwrap(), 0);
    }

    #[test]
    fn open_modes_list_remove() {
        let vfs = MemVfs::new();
        let err = vfs.open("a", OpenMode::Existing).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        vfs.open("b", OpenMode::CreateNew).unwrap();
        let a = vfs.open("a", OpenMode::OpenOrCreate).unwrap();
        a.write_at(0, b"data").unwrap();
        let err = vfs.open("a", OpenMode::CreateNew).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(vfs.open("a", OpenMode::Existing).unwrap().len().unwrap(), 4);
        assert_eq!(vfs.list().unwrap(), vec!["a", "b"]);
        vfs.remove("a").unwrap();
        assert!(!vfs.exists("a").unwrap());
        assert_eq!(vfs.remove("a").unwrap_err().kind(), io::ErrorKind::NotFound);
        // The old handle still works on the unlinked file.
        assert_eq!(a.len().unwrap(), 4);
        vfs.sync_dir().unwrap();
    }

    #[test]
    fn clones_share_files() {
        let vfs = MemVfs::new();
        let other = vfs.clone();
        vfs.open("a", OpenMode::CreateNew)
            .unwrap()
            .write_at(0, b"x")
            .unwrap();
        let f = other.open("a", OpenMode::Existing).unwrap();
        assert_eq!(f.len().unwrap(), 1);
    }

    #[test]
    fn separate_vfs_do_not_share() {
        let a = MemVfs::new();
        let b = MemVfs::new();
        let _g = a.lock("l").unwrap();
        let _h = b.lock("l").unwrap();
        a.open("f", OpenMode::CreateNew).unwrap();
        assert!(!b.exists("f").unwrap());
    }
}
