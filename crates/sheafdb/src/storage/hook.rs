//! A [`Vfs`] wrapper that calls a test's hook before each file operation.
//!
//! Owns: forwarding every [`Vfs`] and [`Storage`] call to an inner VFS,
//! after asking a [`Hook`] whether (and when) the operation may go ahead.
//! Tests use it to fail, delay, count, park or panic chosen operations on
//! chosen files without writing a forwarding wrapper each time.
//!
//! Must not know: pages, the WAL's format, what the hook decides.

use std::io;
use std::sync::Arc;

use super::{LockGuard, OpenMode, Storage, Vfs};

/// The file operation a [`Hook`] is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// `read_at`.
    Read,
    /// `write_at` or `write_vectored_at`.
    Write,
    /// `sync_data`.
    Sync,
    /// `set_len`.
    SetLen,
    /// `len`.
    Len,
    /// `punch_hole`.
    PunchHole,
}

/// Decides, before each operation, whether it proceeds.
pub trait Hook: Send + Sync + std::fmt::Debug {
    /// Called before `op` on the file `name`. An error is returned to the
    /// caller instead of doing the operation; the hook may also block or
    /// panic to model a slow or crashing device.
    fn before(&self, name: &str, op: FileOp) -> io::Result<()>;
}

/// True if `name` is one of a database's WAL segment files.
pub fn is_wal_file(name: &str) -> bool {
    name.contains("-wal.")
}

/// A VFS whose files consult `hook` before every read, write, sync,
/// length change and hole punch. Directory operations are forwarded unchanged.
#[derive(Debug, Clone)]
pub struct HookVfs {
    inner: Arc<dyn Vfs>,
    hook: Arc<dyn Hook>,
}

impl HookVfs {
    /// Wraps `inner`, consulting `hook`.
    pub fn new(inner: Arc<dyn Vfs>, hook: Arc<dyn Hook>) -> HookVfs {
        HookVfs { inner, hook }
    }
}

#[derive(Debug)]
struct HookFile {
    inner: Arc<dyn Storage>,
    name: String,
    hook: Arc<dyn Hook>,
}

impl Storage for HookFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.hook.before(&self.name, FileOp::Read)?;
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.hook.before(&self.name, FileOp::Write)?;
        self.inner.write_at(offset, data)
    }
    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.hook.before(&self.name, FileOp::Write)?;
        self.inner.write_vectored_at(offset, bufs)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.hook.before(&self.name, FileOp::Sync)?;
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.hook.before(&self.name, FileOp::Len)?;
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.hook.before(&self.name, FileOp::SetLen)?;
        self.inner.set_len(len)
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.hook.before(&self.name, FileOp::PunchHole)?;
        self.inner.punch_hole(offset, len)
    }
}

impl Vfs for HookVfs {
    fn open(&self, name: &str, mode: OpenMode) -> io::Result<Arc<dyn Storage>> {
        Ok(Arc::new(HookFile {
            inner: self.inner.open(name, mode)?,
            name: name.to_owned(),
            hook: Arc::clone(&self.hook),
        }))
    }
    fn exists(&self, name: &str) -> io::Result<bool> {
        self.inner.exists(name)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir()
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn lock(&self, name: &str) -> io::Result<Box<dyn LockGuard>> {
        self.inner.lock(name)
    }
    fn lock_shared(&self, name: &str) -> io::Result<Box<dyn LockGuard>> {
        self.inner.lock_shared(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::mem::MemVfs;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Fails syncs of WAL files and counts every operation it sees.
    #[derive(Debug, Default)]
    struct FailWalSyncs {
        seen: AtomicU64,
    }

    impl Hook for FailWalSyncs {
        fn before(&self, name: &str, op: FileOp) -> io::Result<()> {
            self.seen.fetch_add(1, Ordering::SeqCst);
            if op == FileOp::Sync && is_wal_file(name) {
                return Err(io::Error::other("injected"));
            }
            Ok(())
        }
    }

    #[test]
    fn the_hook_sees_each_operation_and_its_error_is_returned() {
        let hook = Arc::new(FailWalSyncs::default());
        let vfs = HookVfs::new(Arc::new(MemVfs::new()), hook.clone());
        let data = vfs.open("a.sheaf", OpenMode::CreateNew).unwrap();
        let wal = vfs.open("a.sheaf-wal.0", OpenMode::CreateNew).unwrap();
        data.write_at(0, b"abc").unwrap();
        data.sync_data().unwrap();
        wal.write_vectored_at(0, &[b"x", b"y"]).unwrap();
        assert!(wal.sync_data().is_err());
        let mut buf = [0u8; 2];
        wal.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"xy");
        data.set_len(1).unwrap();
        assert_eq!(data.len().unwrap(), 1);
        // write, sync, write, sync (failed), read, set_len, len.
        assert_eq!(hook.seen.load(Ordering::SeqCst), 7);
        assert_eq!(vfs.list().unwrap().len(), 2);
    }
}
