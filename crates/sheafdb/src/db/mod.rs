//! The database: open/create/recover, the CF registry, and the public entry
//! points.
//!
//! Owns: [`Database`], [`Builder`], [`DbShared`] (everything a transaction
//! or snapshot needs), the system state (superblock generation, system tree,
//! system allocator) and poisoning.
//!
//! Sees every lower layer; nothing below depends on it except through
//! `DbShared` handles held by transactions.
//!
//! Invariants: exactly one `Database` per file at a time (file lock); after
//! a write or sync fails, the database is poisoned and refuses writes.

mod checkpoint;
mod integrity;
mod open;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::btree::TreeRoot;
use crate::error::{Error, Result};
use crate::format::page::DEFAULT_PAGE_SIZE;
use crate::pager::alloc::{CfAllocator, ExtentMap, ExtentPolicy};
use crate::pager::Pager;
use crate::storage::file::FsVfs;
use crate::storage::{LockGuard, Vfs};
use crate::txn::{CfShared, ReadTransaction, WriteTransaction};
use crate::types::{CfId, PageId};

pub use integrity::IntegrityReport;

/// The system CF's extents: small, they hold only metadata.
const SYS_EXTENT_POLICY: ExtentPolicy = ExtentPolicy {
    first_pages: 16,
    max_pages: 1024,
};

/// Durable system state, changed only by checkpoints (under its lock).
#[derive(Debug)]
pub(crate) struct SysState {
    /// Generation of the current superblock.
    pub generation: u64,
    /// Slot (0 or 1) holding the current superblock.
    pub slot: u8,
    /// Root of the system tree.
    pub root: TreeRoot,
    /// Allocator of system extents.
    pub alloc: Arc<Mutex<CfAllocator>>,
    /// The metadata blob run of the current superblock.
    pub meta_run: Option<(PageId, u32)>,
    /// Next CF id to hand out.
    pub next_cf: CfId,
}

/// Everything shared by the handles of one open database.
#[derive(Debug)]
pub(crate) struct DbShared {
    pub pager: Pager,
    pub extents: Mutex<ExtentMap>,
    pub sys: Mutex<SysState>,
    pub cfs: RwLock<BTreeMap<CfId, Arc<CfShared>>>,
    pub policy: ExtentPolicy,
    poisoned: AtomicBool,
    _lock: Box<dyn LockGuard>,
}

impl DbShared {
    /// Errors if the database refuses writes.
    pub fn check_writable(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// Marks the database unusable for writes until reopened.
    pub fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// The CF with id `id`.
    pub fn cf(&self, id: CfId) -> Result<Arc<CfShared>> {
        self.cfs
            .read()
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::cf_not_found(id))
    }
}

/// Options for creating or opening a database.
#[derive(Debug, Clone)]
pub struct Builder {
    page_size: usize,
    cache_bytes: usize,
    extent_first_bytes: Option<u64>,
    extent_max_bytes: Option<u64>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            page_size: DEFAULT_PAGE_SIZE,
            cache_bytes: 128 << 20,
            extent_first_bytes: None,
            extent_max_bytes: None,
        }
    }
}

impl Builder {
    /// Page size for a new file (power of two, 4 KiB to 64 KiB). Ignored
    /// when opening an existing file, which keeps its own.
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_size = bytes;
        self
    }

    /// Budget of the clean-page cache (default 128 MiB).
    pub fn cache_size_bytes(mut self, bytes: usize) -> Self {
        self.cache_bytes = bytes;
        self
    }

    /// Size of a column family's first extent and the cap on its growth
    /// step (defaults 1 MiB and 64 MiB).
    pub fn extent_sizes(mut self, first_bytes: u64, max_bytes: u64) -> Self {
        self.extent_first_bytes = Some(first_bytes);
        self.extent_max_bytes = Some(max_bytes);
        self
    }

    fn policy(&self, page_size: usize) -> ExtentPolicy {
        let d = ExtentPolicy::for_page_size(page_size);
        let ps = page_size as u64;
        let first = self
            .extent_first_bytes
            .map_or(d.first_pages, |b| (b / ps).max(1));
        let max = self
            .extent_max_bytes
            .map_or(d.max_pages, |b| (b / ps).max(first));
        ExtentPolicy {
            first_pages: first,
            max_pages: max,
        }
    }

    /// Opens the database at `path`, creating it if missing.
    pub fn create(&self, path: impl AsRef<Path>) -> Result<Database> {
        let (vfs, name) = split_path(path.as_ref())?;
        self.create_with_vfs(Arc::new(vfs), &name)
    }

    /// Opens an existing database at `path`.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Database> {
        let (vfs, name) = split_path(path.as_ref())?;
        self.open_with_vfs(Arc::new(vfs), &name)
    }

    /// Opens `name` in `vfs`, creating it if missing.
    pub fn create_with_vfs(&self, vfs: Arc<dyn Vfs>, name: &str) -> Result<Database> {
        open::open(self, vfs, name, true)
    }

    /// Opens an existing `name` in `vfs`.
    pub fn open_with_vfs(&self, vfs: Arc<dyn Vfs>, name: &str) -> Result<Database> {
        open::open(self, vfs, name, false)
    }
}

fn split_path(path: &Path) -> Result<(FsVfs, String)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::InvalidArgument(format!("{} has no file name", path.display())))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    Ok((FsVfs::new(dir), name.to_string()))
}

/// An open database. Cheap to share: wrap it in an `Arc` or use it from
/// scoped threads; every method takes `&self`.
#[derive(Debug)]
pub struct Database {
    shared: Arc<DbShared>,
}

impl Database {
    /// Opens the database at `path`, creating it if missing, with default
    /// options.
    pub fn create(path: impl AsRef<Path>) -> Result<Database> {
        Builder::default().create(path)
    }

    /// Opens an existing database at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Database> {
        Builder::default().open(path)
    }

    /// Options for creating or opening.
    pub fn builder() -> Builder {
        Builder::default()
    }

    fn default_cf(&self) -> Result<Arc<CfShared>> {
        self.shared.cf(CfId::DEFAULT)
    }

    /// Starts a write transaction on the default column family, waiting for
    /// the one in progress (if any) to finish.
    pub fn begin_write(&self) -> Result<WriteTransaction> {
        WriteTransaction::begin(self.shared.clone(), self.default_cf()?)
    }

    /// Takes a snapshot of the default column family. Never blocks.
    pub fn begin_read(&self) -> Result<ReadTransaction> {
        Ok(ReadTransaction::new(
            self.shared.clone(),
            &*self.default_cf()?,
        ))
    }

    /// Verifies checksums, tree order and key bounds, page ownership,
    /// allocator agreement and catalog counts (DESIGN §11).
    pub fn check_integrity(&self) -> Result<IntegrityReport> {
        integrity::check(&self.shared)
    }

    /// Makes every committed transaction part of the durable base. Every
    /// commit is already checkpointed in this version, so this only checks
    /// that the database is healthy.
    pub fn checkpoint(&self) -> Result<()> {
        self.shared.check_writable()
    }

    /// Makes every committed transaction durable (see [`Durability`]).
    ///
    /// [`Durability`]: crate::Durability
    pub fn sync(&self) -> Result<()> {
        self.shared.check_writable()
    }

    /// Shrinking the file is not implemented yet.
    pub fn compact(&self) -> Result<bool> {
        Err(Error::Unsupported(
            "compact: file shrinking is not implemented yet",
        ))
    }

    /// Page size of the file.
    pub fn page_size(&self) -> usize {
        self.shared.pager.page_size()
    }

    /// Length of the data file in bytes, as recorded by the last checkpoint.
    pub fn file_len_bytes(&self) -> u64 {
        self.shared.extents.lock().file_pages() * self.page_size() as u64
    }
}
