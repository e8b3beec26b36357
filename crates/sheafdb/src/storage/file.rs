//! Real files: the [`Vfs`] and [`Storage`] implementations the database uses
//! outside tests.
//!
//! Owns: mapping the storage traits onto POSIX calls — `pread`/`pwrite`
//! (through [`FileExt`]), `pwritev` for vectored writes, `fdatasync`
//! ([`File::sync_data`]), `fsync` of the directory, `flock` for the
//! exclusive database lock ([`File::try_lock`]), and `fallocate` to punch
//! holes (Linux).
//!
//! Invariants: a read either fills its whole buffer or fails
//! (`UnexpectedEof` past the end); a write either writes every byte or fails;
//! `pwritev` partial writes and `EINTR` are retried until done. File names
//! are plain names inside the directory (no separators, not `.`/`..`).
//!
//! Must not know: what the bytes mean.

#![expect(
    clippy::disallowed_types,
    reason = "the one module that opens files (clippy.toml)"
)]
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{LockGuard, OpenMode, Storage, Vfs};

/// Most iovecs one `pwritev` call accepts (POSIX `IOV_MAX` on Linux).
const IOV_MAX: usize = 1024;

/// Rejects names that are not a plain file name inside the directory.
///
/// Shared by every [`Vfs`] implementation so they agree on what is valid.
pub(crate) fn check_name(name: &str) -> io::Result<()> {
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.contains('\\')
        || name.contains('\0');
    if bad {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid file name {name:?}: must be a plain name without separators"),
        ));
    }
    Ok(())
}

/// A directory of real files.
#[derive(Debug, Clone)]
pub struct FsVfs {
    dir: PathBuf,
}

impl FsVfs {
    /// A VFS over the files of `dir` (which must already exist).
    pub fn new(dir: impl Into<PathBuf>) -> FsVfs {
        FsVfs { dir: dir.into() }
    }

    /// The directory this VFS works in.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    fn path(&self, name: &str) -> io::Result<PathBuf> {
        check_name(name)?;
        Ok(self.dir.join(name))
    }
}

/// Open options for `mode`: reading and writing, except `ReadOnly`.
fn open_options(mode: OpenMode) -> OpenOptions {
    let mut opts = OpenOptions::new();
    opts.read(true).write(mode != OpenMode::ReadOnly);
    // Never blocks in `open(2)` (a FIFO would wait for a peer); without
    // effect on the regular files `FsVfs::open` accepts.
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut opts, libc::O_NONBLOCK);
    match mode {
        OpenMode::Existing | OpenMode::ReadOnly => {}
        OpenMode::CreateNew => {
            opts.create_new(true);
        }
        OpenMode::OpenOrCreate => {
            opts.create(true);
        }
    }
    opts
}

impl Vfs for FsVfs {
    fn open(&self, name: &str, mode: OpenMode) -> io::Result<Arc<dyn Storage>> {
        let path = self.path(name)?;
        let shown = path.display().to_string();
        let file = open_options(mode)
            .open(&path)
            .map_err(|e| with_path(&shown, e))?;
        // Only a regular file: opening a FIFO for reading blocked until a
        // writer came (an adversarial probe), and a device is no database.
        if !file.metadata().map_err(|e| with_path(&shown, e))?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{shown} is not a regular file"),
            ));
        }
        let storage = Arc::new(FileStorage::named(file, shown));
        if mode == OpenMode::ReadOnly {
            return Ok(Arc::new(super::ReadOnlyFile(storage)));
        }
        Ok(storage)
    }

    fn exists(&self, name: &str) -> io::Result<bool> {
        let path = self.path(name)?;
        named(&path, path.try_exists())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let path = self.path(name)?;
        named(&path, std::fs::remove_file(&path))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in named(&self.dir, std::fs::read_dir(&self.dir))? {
            let entry = named(&self.dir, entry)?;
            // Names that are not UTF-8 cannot be ours; skip them.
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn sync_dir(&self) -> io::Result<()> {
        named(&self.dir, File::open(&self.dir).and_then(|d| d.sync_all()))
    }

    /// A hard link, then the old name's removal: the link fails if `to`
    /// exists, so no file is ever replaced (`rename(2)` would). A crash
    /// between the two leaves both names on one file.
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (self.path(from)?, self.path(to)?);
        std::fs::hard_link(&from, &to)?;
        std::fs::remove_file(&from)
    }

    fn lock(&self, name: &str) -> io::Result<Box<dyn LockGuard>> {
        self.lock_file(name, OpenMode::OpenOrCreate, File::try_lock)
    }

    fn lock_shared(&self, name: &str) -> io::Result<Box<dyn LockGuard>> {
        self.lock_file(name, OpenMode::ReadOnly, File::try_lock_shared)
    }
}

impl FsVfs {
    /// Opens `name` in `mode` and takes a lock on it with `try_lock`.
    fn lock_file(
        &self,
        name: &str,
        mode: OpenMode,
        try_lock: fn(&File) -> Result<(), TryLockError>,
    ) -> io::Result<Box<dyn LockGuard>> {
        let path = self.path(name)?;
        let file = named(&path, open_options(mode).open(&path))?;
        lock_result(&path.display().to_string(), try_lock(&file), file)
    }
}

/// `r` with an error's message prefixed by `path` (a session-34 probe:
/// "No such file or directory" for a missing directory named nothing).
fn named<T>(path: &Path, r: io::Result<T>) -> io::Result<T> {
    r.map_err(|e| with_path(&path.display().to_string(), e))
}

/// The guard of a `try_lock`/`try_lock_shared` on `file`, or the error.
fn lock_result(
    name: &str,
    locked: Result<(), TryLockError>,
    file: File,
) -> io::Result<Box<dyn LockGuard>> {
    match locked {
        Ok(()) => Ok(Box::new(FileLock { _file: file })),
        Err(TryLockError::WouldBlock) => Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!("{name} is locked by another handle"),
        )),
        Err(TryLockError::Error(e)) => Err(with_path(name, e)),
    }
}

/// Holds an exclusive or shared `flock`; closing the file on drop
/// releases it.
#[derive(Debug)]
struct FileLock {
    _file: File,
}

impl LockGuard for FileLock {}

/// The same error, its message prefixed with the file it concerns (the
/// kind is kept, so callers can still tell a full disk from a bad sector).
fn with_path(path: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{path}: {e}"))
}

/// One open real file.
#[derive(Debug)]
pub struct FileStorage {
    file: File,
    /// Path shown in its I/O errors.
    path: String,
}

impl FileStorage {
    /// Wraps an already open file (which must be readable and writable).
    pub fn new(file: File) -> FileStorage {
        FileStorage::named(file, "(unnamed file)".to_string())
    }

    /// Wraps an open file whose errors name `path`.
    pub fn named(file: File, path: String) -> FileStorage {
        FileStorage { file, path }
    }

    fn name<T>(&self, r: io::Result<T>) -> io::Result<T> {
        r.map_err(|e| with_path(&self.path, e))
    }
}

impl Storage for FileStorage {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.name(self.file.read_exact_at(buf, offset))
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.name(self.file.write_all_at(data, offset))
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.name(pwritev_all(&self.file, offset, bufs))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.name(self.file.sync_data())
    }

    fn len(&self) -> io::Result<u64> {
        self.name(self.file.metadata().map(|m| m.len()))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.name(self.file.set_len(len))
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.name(punch_hole(&self.file, offset, len))
    }
}

/// `fallocate(PUNCH_HOLE | KEEP_SIZE)`: the file system frees the blocks
/// of the range (partial blocks at its ends are zeroed), the length stays.
/// `Unsupported` where the file system or the platform has no such call.
#[cfg(target_os = "linux")]
fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    if len == 0 {
        return Ok(());
    }
    let too_far = || io::Error::new(io::ErrorKind::InvalidInput, "hole past the largest offset");
    let off = libc::off_t::try_from(offset).map_err(|_| too_far())?;
    let n = libc::off_t::try_from(len).map_err(|_| too_far())?;
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    loop {
        // SAFETY: `fallocate` reads no memory of ours; the descriptor is
        // open for writing and lives as long as `file`.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, off, n) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
                return Err(io::Error::new(io::ErrorKind::Unsupported, e))
            }
            _ => return Err(e),
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn punch_hole(_: &File, _: u64, _: u64) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "hole punching is implemented on Linux only",
    ))
}

/// Writes every byte of `bufs` back to back at `offset`, calling `pwritev`
/// with at most [`IOV_MAX`] buffers at a time and resuming after partial
/// writes and `EINTR`.
fn pwritev_all(file: &File, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
    let mut bufs: Vec<&[u8]> = bufs.iter().copied().filter(|b| !b.is_empty()).collect();
    let mut pos = offset;
    let mut start = 0;
    while start < bufs.len() {
        let end = bufs.len().min(start + IOV_MAX);
        let written = match pwritev_once(file, pos, &bufs[start..end]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        pos += written as u64;
        start = advance(&mut bufs, start, written);
    }
    Ok(())
}

/// Consumes `written` bytes from `bufs[start..]`: drops the buffers fully
/// written and trims the first partly written one. Returns the new start.
fn advance(bufs: &mut [&[u8]], mut start: usize, mut written: usize) -> usize {
    while written > 0 {
        let first = bufs[start];
        if written >= first.len() {
            written -= first.len();
            start += 1;
        } else {
            bufs[start] = &first[written..];
            written = 0;
        }
    }
    start
}

/// One `pwritev` call over `bufs` (at most [`IOV_MAX`] of them).
fn pwritev_once(file: &File, offset: u64, bufs: &[&[u8]]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;

    debug_assert!(!bufs.is_empty() && bufs.len() <= IOV_MAX);
    let iovecs: Vec<libc::iovec> = bufs
        .iter()
        .map(|b| libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        })
        .collect();
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "write offset out of range"))?;
    // `iovecs.len()` is at most IOV_MAX (1024), so it fits in a c_int.
    let count = iovecs.len() as libc::c_int;
    // SAFETY: `iovecs` points to `count` valid iovec structs, each describing
    // a live, initialised byte slice borrowed from `bufs` for the duration of
    // the call; pwritev only reads from them (the `*mut` is an artefact of the
    // C signature). The fd is open for as long as `file` is borrowed.
    let n = unsafe { libc::pwritev(file.as_raw_fd(), iovecs.as_ptr(), count, offset) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // n >= 0 and at most the total length of the buffers, so it fits a usize.
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vfs() -> (tempfile::TempDir, FsVfs) {
        let dir = tempfile::tempdir().unwrap();
        let vfs = FsVfs::new(dir.path());
        (dir, vfs)
    }

    #[test]
    fn conformance() {
        let dirs = std::sync::Mutex::new(Vec::new());
        crate::storage::conformance::run_all(&|| {
            let (d, vfs) = vfs();
            dirs.lock().unwrap().push(d);
            Box::new(vfs)
        });
    }

    #[test]
    fn io_errors_name_the_file() {
        let (d, v) = vfs();
        let err = match v.open("missing", OpenMode::Existing) {
            Err(e) => e,
            Ok(_) => panic!("opened a missing file"),
        };
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("missing"), "{err}");
        let f = v.open("f", OpenMode::OpenOrCreate).unwrap();
        let mut buf = [0u8; 10];
        let err = f.read_at(100, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        let shown = err.to_string();
        assert!(
            shown.contains(&d.path().join("f").display().to_string()),
            "{shown}"
        );
    }

    /// On this platform's file systems (ext4, xfs, tmpfs) a punched hole
    /// frees its blocks: the allocated size drops, the length stays, the
    /// range reads as zeros.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_punched_hole_frees_its_blocks() {
        use std::os::unix::fs::MetadataExt;
        let (dir, vfs) = vfs();
        let f = vfs.open("h", OpenMode::CreateNew).unwrap();
        let data = vec![0xabu8; 4 << 20];
        f.write_at(0, &data).unwrap();
        f.sync_data().unwrap();
        let meta = || std::fs::metadata(dir.path().join("h")).unwrap();
        let before = meta().blocks() * 512;
        f.punch_hole(1 << 20, 2 << 20).unwrap();
        f.sync_data().unwrap();
        let after = meta().blocks() * 512;
        assert_eq!(meta().len(), 4 << 20, "the length stays");
        assert!(
            after + (2 << 20) <= before,
            "allocated {before} bytes, {after} after a 2 MiB hole"
        );
        let mut buf = vec![1u8; 4 << 20];
        f.read_at(0, &mut buf).unwrap();
        assert!(buf[..1 << 20].iter().all(|&b| b == 0xab));
        assert!(buf[1 << 20..3 << 20].iter().all(|&b| b == 0));
        assert!(buf[3 << 20..].iter().all(|&b| b == 0xab));
    }

    #[test]
    fn vectored_write_of_nothing_is_ok() {
        let (_d, vfs) = vfs();
        let f = vfs.open("a", OpenMode::CreateNew).unwrap();
        f.write_vectored_at(0, &[]).unwrap();
        f.write_vectored_at(0, &[b"", b""]).unwrap();
        assert_eq!(f.len().unwrap(), 0);
    }

    #[test]
    fn advance_trims_partial_buffer() {
        let a: &[u8] = b"abc";
        let b: &[u8] = b"defg";
        let mut bufs = [a, b];
        let start = advance(&mut bufs, 0, 5);
        assert_eq!(start, 1);
        assert_eq!(bufs[1], b"fg");
        assert_eq!(advance(&mut bufs, 1, 2), 2);
    }

    #[test]
    fn list_remove_exists_sync_dir() {
        let (d, vfs) = vfs();
        vfs.open("b", OpenMode::CreateNew).unwrap();
        vfs.open("a", OpenMode::CreateNew).unwrap();
        std::fs::create_dir(d.path().join("subdir")).unwrap();
        vfs.sync_dir().unwrap();
        assert_eq!(vfs.list().unwrap(), vec!["a", "b", "subdir"]);
        std::fs::remove_dir(d.path().join("subdir")).unwrap();
        vfs.remove("a").unwrap();
        assert!(!vfs.exists("a").unwrap());
        assert_eq!(vfs.list().unwrap(), vec!["b"]);
        let err = vfs.remove("a").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        vfs.sync_dir().unwrap();
    }

    #[test]
    fn errors_name_the_path() {
        let d = tempfile::tempdir().unwrap();
        let vfs = FsVfs::new(d.path().join("nodir"));
        let errs = [
            vfs.list().unwrap_err(),
            vfs.sync_dir().unwrap_err(),
            vfs.lock("x").unwrap_err(),
            vfs.lock_shared("x").unwrap_err(),
            vfs.remove("x").unwrap_err(),
        ];
        for err in errs {
            assert_eq!(err.kind(), io::ErrorKind::NotFound);
            assert!(err.to_string().contains("nodir"), "{err}");
        }
    }

    #[test]
    fn lock_conflicts_across_vfs_instances() {
        let (d, vfs) = vfs();
        let other = FsVfs::new(d.path());
        let _g = vfs.lock("l").unwrap();
        let err = other.lock("l").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }
}
