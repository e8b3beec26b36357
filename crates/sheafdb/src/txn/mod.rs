//! Transactions: snapshots, write transactions and version publication.
//!
//! Owns: `CfShared` (per-CF writer lock, published version, allocator),
//! `CfVersion` (an immutable committed state), [`ReadTransaction`] and
//! [`WriteTransaction`].
//!
//! Invariants:
//! - one write transaction per CF at a time (its writer lock); it starts
//!   from the CF's `head` (latest *committed* version), which may be ahead
//!   of the published one because the lock is released right after the WAL
//!   append (early lock release, design.md §4.3b);
//! - `begin_read` only loads the published version (`ArcSwap`), taking no
//!   lock a writer holds;
//! - versions of a CF are published in commit (= LSN) order, each once it
//!   is as durable as its mode promises and every earlier one is published
//!   (`PublishQueue`, design.md §4.3d);
//! - a snapshot holds its version's [`ReclaimBatch`], so no page it can
//!   reach is reused while it lives (design.md §5).

pub mod pages;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::btree::{self, TreeRoot};
use crate::db::DbShared;
use crate::error::{Error, Result};
use crate::format::records::TableMeta;
use crate::pager::alloc::{CfAllocator, ReclaimBatch};
use crate::table::types::{Key, TableDefinition, Value};
use crate::table::{ReadOnlyTable, Table};
use crate::types::{CfId, Lsn, TableId, Version};
use crate::wal::record::{CommitEncoder, Op};

use pages::{ReadPages, TxnPages};

/// How durable a commit is when `commit()` returns (design.md §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Survives power loss when `commit` returns (default).
    #[default]
    Immediate,
    /// Survives a process crash; survives power loss after `sync_interval`.
    Eventual,
    /// Durable only after a later durable commit, `sync()`, a checkpoint or
    /// a clean close.
    None,
}

/// Longest table name in bytes.
pub const MAX_TABLE_NAME: usize = 255;

/// An immutable committed state of one CF.
#[derive(Debug)]
pub(crate) struct CfVersion {
    pub version: Version,
    pub catalog: TreeRoot,
    pub next_table: TableId,
    /// End of the last WAL record included: replay of this CF resumes at
    /// records starting at or after it.
    pub lsn: Lsn,
    /// Pages freed by the commit after this version; released when every
    /// snapshot of this or an older version is gone.
    pub batch: Arc<ReclaimBatch>,
}

/// The published version of every CF at one instant: what a database-wide
/// snapshot pins. Replaced (copy-on-write) on every publication, so taking
/// a snapshot is one atomic load.
#[derive(Debug, Default)]
pub(crate) struct DbVersion {
    /// Sorted by id.
    pub cfs: Vec<(CfId, Arc<CfVersion>)>,
}

impl DbVersion {
    /// The version of `cf` in this snapshot.
    pub fn get(&self, cf: CfId) -> Option<&Arc<CfVersion>> {
        self.cfs
            .binary_search_by_key(&cf, |(id, _)| *id)
            .ok()
            .map(|i| &self.cfs[i].1)
    }

    /// A copy with `updates` applied (`None` removes the CF).
    pub fn with(&self, updates: &[(CfId, Option<Arc<CfVersion>>)]) -> DbVersion {
        let mut cfs = self.cfs.clone();
        for (id, v) in updates {
            match (cfs.binary_search_by_key(id, |(i, _)| *i), v) {
                (Ok(i), Some(v)) => cfs[i].1 = v.clone(),
                (Ok(i), None) => {
                    cfs.remove(i);
                }
                (Err(i), Some(v)) => cfs.insert(i, (*id, v.clone())),
                (Err(_), None) => {}
            }
        }
        DbVersion { cfs }
    }
}

/// Called with each newly published version (under the CF's publication
/// lock, so in order): keeps the database-wide snapshot current.
pub(crate) type OnPublish<'a> = &'a dyn Fn(&Arc<CfVersion>);

/// The writer side of a CF, behind its writer lock.
#[derive(Debug)]
pub(crate) struct WriterSlot {
    /// Latest committed version: where the next write transaction starts.
    pub head: Arc<CfVersion>,
}

/// Where a committed version is on its way to readers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PublishState {
    /// Its committer is waiting for the durability its mode promises.
    Waiting,
    /// Durable enough; publishable once every earlier version is.
    Ready,
    /// Its WAL write or sync failed: nothing after it is ever published.
    Failed(crate::error::PoisonCause),
}

/// Committed versions of one CF not yet visible to readers, in commit order.
#[derive(Debug, Default)]
pub(crate) struct PublishQueue {
    entries: std::collections::VecDeque<(Arc<CfVersion>, PublishState)>,
}

impl CfVersion {
    /// True if no older version of the CF is alive (they would hold this
    /// version's reclaim batch through the chain).
    pub fn batch_is_last(&self) -> bool {
        Arc::strong_count(&self.batch) == 1
    }
}

/// The version of a CF its durable base holds, and the end of the WAL it
/// covers (replay of the CF resumes at records starting at or after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DurableBase {
    pub version: Version,
    pub lsn: Lsn,
}

/// Shared state of one column family.
#[derive(Debug)]
pub(crate) struct CfShared {
    pub id: CfId,
    pub name: String,
    pub writer: Arc<Mutex<WriterSlot>>,
    /// [`thread_token`] of the thread holding `writer` through a
    /// [`WriterGuard`] (0: none).
    writer_owner: Arc<std::sync::atomic::AtomicU64>,
    pub current: ArcSwap<CfVersion>,
    pub alloc: Arc<Mutex<CfAllocator>>,
    publish: Mutex<PublishQueue>,
    published: parking_lot::Condvar,
    /// The durable base of this CF.
    pub base: Mutex<DurableBase>,
    /// Set once the CF is dropped: handles to it report `CfNotFound`.
    pub dropped: std::sync::atomic::AtomicBool,
    /// Extents the CF's persisted descriptor accounts for (its free list
    /// covers exactly these); extents claimed later are persisted as free.
    pub persisted_extents: Mutex<Vec<crate::format::records::PageRange>>,
    /// Held by a committer from its WAL append until its version is the
    /// head ([`CfShared::set_head_version`]); taken briefly by a checkpoint
    /// to read the head version, so it never sees a record appended but
    /// not yet installed. Lock order: writer lock, then this, then the WAL.
    pub commit_gate: Mutex<()>,
    /// Version of the latest committed (not necessarily published) state.
    head_version: std::sync::atomic::AtomicU64,
}

impl CfShared {
    /// A CF whose latest state is `version`, also its durable base.
    pub fn new(id: CfId, name: String, alloc: CfAllocator, version: CfVersion) -> CfShared {
        let version = Arc::new(version);
        let head_version = std::sync::atomic::AtomicU64::new(version.version.0);
        CfShared {
            id,
            name,
            persisted_extents: Mutex::new(alloc.extents().to_vec()),
            dropped: std::sync::atomic::AtomicBool::new(false),
            base: Mutex::new(DurableBase {
                version: version.version,
                lsn: version.lsn,
            }),
            writer_owner: Arc::default(),
            writer: Arc::new(Mutex::new(WriterSlot {
                head: version.clone(),
            })),
            current: ArcSwap::new(version),
            alloc: Arc::new(Mutex::new(alloc)),
            publish: Mutex::new(PublishQueue::default()),
            published: parking_lot::Condvar::new(),
            commit_gate: Mutex::new(()),
            head_version,
        }
    }

    /// True if the calling thread holds this CF's writer lock.
    pub fn writer_held_here(&self) -> bool {
        self.writer_owner.load(std::sync::atomic::Ordering::Acquire) == thread_token()
    }

    fn would_deadlock(&self) -> Error {
        Error::WouldDeadlock(format!(
            "this thread already holds the write transaction of column family {:?}",
            self.name
        ))
    }

    fn guard(
        &self,
        guard: parking_lot::ArcMutexGuard<parking_lot::RawMutex, WriterSlot>,
    ) -> WriterGuard {
        self.writer_owner
            .store(thread_token(), std::sync::atomic::Ordering::Release);
        WriterGuard {
            guard,
            owner: self.writer_owner.clone(),
        }
    }

    /// Takes the writer lock, waiting for another thread's transaction;
    /// `WouldDeadlock` at once if this thread holds it.
    pub fn lock_writer(&self) -> Result<WriterGuard> {
        if self.writer_held_here() {
            return Err(self.would_deadlock());
        }
        Ok(self.guard(self.writer.lock_arc()))
    }

    /// Takes the writer lock if it is free; `WriterBusy` (or
    /// `WouldDeadlock` for this thread's own) otherwise.
    pub fn try_lock_writer(&self) -> Result<WriterGuard> {
        if self.writer_held_here() {
            return Err(self.would_deadlock());
        }
        match self.writer.try_lock_arc() {
            Some(g) => Ok(self.guard(g)),
            None => Err(Error::WriterBusy(self.name.clone())),
        }
    }

    /// Records `v` as the latest committed version (under the writer lock,
    /// and under the commit gate when a WAL record was appended for it).
    pub fn set_head_version(&self, v: Version) {
        use std::sync::atomic::Ordering;
        let old = self.head_version.swap(v.0, Ordering::AcqRel);
        assert!(
            old < v.0,
            "cf {}: head version went from {old} to {v}",
            self.id
        );
    }

    /// The latest committed version, read under the commit gate: every
    /// record appended before this call is installed.
    pub fn head_version_settled(&self) -> Version {
        let _gate = self.commit_gate.lock();
        Version(self.head_version.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Queues `v` for publication; called under the writer lock, so queue
    /// order is commit order.
    pub fn enqueue(&self, v: Arc<CfVersion>) {
        let mut q = self.publish.lock();
        debug_assert!(q
            .entries
            .back()
            .is_none_or(|(last, _)| last.version < v.version));
        q.entries.push_back((v, PublishState::Waiting));
    }

    /// Records whether `version` became as durable as its mode promises,
    /// publishes every ready version at the front of the queue, then waits
    /// until `version` itself is published. `Err(Poisoned)` if it or a
    /// version before it failed.
    pub fn publish(
        &self,
        version: Version,
        durable: Result<()>,
        on_publish: OnPublish<'_>,
    ) -> Result<()> {
        let mut q = self.publish.lock();
        let state = match &durable {
            Ok(()) => PublishState::Ready,
            Err(e) => PublishState::Failed(crate::error::PoisonCause::of(e)),
        };
        if let Some(e) = q.entries.iter_mut().find(|(v, _)| v.version == version) {
            e.1 = state;
        }
        if durable.is_err() {
            // Waiters behind it must see the failure now, not at a timeout.
            self.published.notify_all();
        }
        durable?;
        let mut newest = None;
        while q
            .entries
            .front()
            .is_some_and(|(_, s)| *s == PublishState::Ready)
        {
            newest = q.entries.pop_front().map(|(v, _)| v);
        }
        if let Some(v) = newest {
            let cur = self.current.load();
            debug_assert!(v.version > cur.version, "publication went backwards");
            debug_assert!(
                v.lsn >= cur.lsn,
                "design.md §11.6: published LSNs went backwards"
            );
            self.current.store(v.clone());
            on_publish(&v);
            self.published.notify_all();
        }
        loop {
            if self.current.load().version >= version {
                return Ok(());
            }
            if let Some((_, PublishState::Failed(cause))) = q.entries.front() {
                return Err(Error::Poisoned(cause.clone()));
            }
            self.published
                .wait_for(&mut q, std::time::Duration::from_millis(20));
        }
    }

    /// Blocks until every committed version of this CF is published
    /// (`next = None`) or `next` is the oldest unpublished one. Checks
    /// `healthy` between wake-ups, so a poisoned database does not hang.
    pub fn wait_publication(
        &self,
        next: Option<Version>,
        healthy: &dyn Fn() -> Result<()>,
    ) -> Result<()> {
        let mut q = self.publish.lock();
        loop {
            let ready = match next {
                None => q.entries.is_empty(),
                Some(v) => q.entries.front().is_some_and(|(f, _)| f.version == v),
            };
            if ready {
                return Ok(());
            }
            healthy()?;
            self.published
                .wait_for(&mut q, std::time::Duration::from_millis(20));
        }
    }

    /// Publishes `version`, which must be the only queued one, without
    /// notifying the database-wide snapshot (the caller publishes several
    /// CFs at once).
    pub fn publish_alone(&self, version: &Arc<CfVersion>) {
        let mut q = self.publish.lock();
        let front = q.entries.pop_front();
        assert!(
            front.is_some_and(|(v, _)| v.version == version.version) && q.entries.is_empty(),
            "multi-CF publication out of order in cf {}",
            self.id
        );
        debug_assert!(
            version.lsn >= self.current.load().lsn,
            "design.md §11.6: LSNs went backwards"
        );
        self.current.store(version.clone());
        self.published.notify_all();
    }

    /// Makes the initial version of a just-created CF version 1 (the
    /// creation), leaving the durable base at version 0.
    pub fn bump_created_version(&self) {
        let mut slot = self.writer.lock();
        let v0 = slot.head.clone();
        let v1 = Arc::new(CfVersion {
            version: Version(1),
            catalog: v0.catalog,
            next_table: v0.next_table,
            lsn: Lsn(v0.lsn.0 + 1),
            batch: ReclaimBatch::new(self.alloc.lock().released_sink()),
        });
        v0.batch.seal(Vec::new(), v1.batch.clone());
        self.set_head_version(v1.version);
        slot.head = v1.clone();
        self.current.store(v1);
    }

    /// Errors if the CF was dropped.
    pub fn check_live(&self) -> Result<()> {
        if self.dropped.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::CfNotFound(self.name.clone()));
        }
        Ok(())
    }
}

fn check_table_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_TABLE_NAME {
        return Err(Error::InvalidArgument(format!(
            "table names are 1 to {MAX_TABLE_NAME} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}

fn check_types<K: Key, V: Value>(name: &str, meta: &TableMeta) -> Result<()> {
    let (k, v) = (K::type_name(), V::type_name());
    if meta.key_type != k || meta.value_type != v {
        return Err(Error::TableTypeMismatch {
            table: name.to_string(),
            stored: format!("<{}, {}>", meta.key_type, meta.value_type),
            requested: format!("<{k}, {v}>"),
        });
    }
    Ok(())
}

fn lookup_table<S: btree::store::PageRead>(
    store: &S,
    catalog: &TreeRoot,
    name: &str,
) -> Result<Option<TableMeta>> {
    match btree::get(store, catalog, name.as_bytes())? {
        Some(bytes) => Ok(Some(TableMeta::decode(bytes.as_slice())?)),
        None => Ok(None),
    }
}

fn list_catalog<S: btree::store::PageRead>(store: &S, catalog: &TreeRoot) -> Result<Vec<String>> {
    let mut cursor = btree::Cursor::new(
        catalog,
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
    );
    let mut names = Vec::new();
    while let Some((k, _)) = cursor.next(store)? {
        let name = std::str::from_utf8(k.as_slice())
            .map_err(|_| Error::corrupted("table name not UTF-8", "table catalog"))?;
        names.push(name.to_string());
    }
    Ok(names)
}

/// What a read transaction pins: one CF's version, or every CF's.
#[derive(Debug)]
enum Snap {
    One(CfId, Arc<CfVersion>),
    All(Arc<DbVersion>),
}

/// A consistent read-only snapshot. Never blocks writers and is never
/// blocked by them. From `Database::begin_read` it covers every column
/// family at one instant (a multi-CF commit is visible in all its CFs or in
/// none); from `ColumnFamily::begin_read` it covers that CF only.
/// `open_table` reads the *home* CF (the default CF, or the one it was
/// taken from); `open_table_in` reads any CF the snapshot covers.
#[derive(Debug)]
pub struct ReadTransaction {
    shared: Arc<DbShared>,
    home: CfId,
    snap: Snap,
}

impl ReadTransaction {
    /// A snapshot of one CF.
    pub(crate) fn for_cf(shared: Arc<DbShared>, cf: &CfShared) -> ReadTransaction {
        ReadTransaction {
            shared,
            home: cf.id,
            snap: Snap::One(cf.id, cf.current.load_full()),
        }
    }

    /// A snapshot of every CF; the home CF is the default one.
    pub(crate) fn for_db(shared: Arc<DbShared>) -> ReadTransaction {
        let all = shared.snapshot.load_full();
        ReadTransaction {
            shared,
            home: CfId::DEFAULT,
            snap: Snap::All(all),
        }
    }

    fn version_of(&self, cf: CfId, name: &str) -> Result<(ReadPages, Arc<CfVersion>)> {
        let v = match &self.snap {
            Snap::One(id, v) if *id == cf => Some(v.clone()),
            Snap::One(..) => None,
            Snap::All(all) => all.get(cf).cloned(),
        };
        let v = v.ok_or_else(|| Error::CfNotFound(name.to_string()))?;
        Ok((ReadPages::new(self.shared.clone(), cf), v))
    }

    fn open_in<K: Key + 'static, V: Value + 'static>(
        &self,
        cf: CfId,
        cf_name: &str,
        def: TableDefinition<'_, K, V>,
    ) -> Result<ReadOnlyTable<K, V>> {
        let name = def.name();
        check_table_name(name)?;
        let (pages, version) = self.version_of(cf, cf_name)?;
        let meta = lookup_table(&pages, &version.catalog, name)?
            .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
        check_types::<K, V>(name, &meta)?;
        let root = TreeRoot {
            root: meta.root,
            len: meta.len,
        };
        Ok(ReadOnlyTable::new(pages, root, version))
    }

    /// Opens a table of the home CF for reading. `TableNotFound` if it does
    /// not exist, `TableTypeMismatch` if it was created with other types.
    pub fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<ReadOnlyTable<K, V>> {
        self.open_in(self.home, "default", def)
    }

    /// Opens a table of column family `cf` (which this snapshot must cover).
    pub fn open_table_in<K: Key + 'static, V: Value + 'static>(
        &self,
        cf: &crate::db::ColumnFamily,
        def: TableDefinition<'_, K, V>,
    ) -> Result<ReadOnlyTable<K, V>> {
        self.check_own(cf)?;
        self.open_in(cf.id(), cf.name(), def)
    }

    /// `ForeignHandle` unless `cf` is a handle of this snapshot's database.
    fn check_own(&self, cf: &crate::db::ColumnFamily) -> Result<()> {
        cf.check_belongs_to(&self.shared)
    }

    /// Names of the home CF's tables, sorted.
    pub fn list_tables(&self) -> Result<Vec<String>> {
        let (pages, v) = self.version_of(self.home, "default")?;
        list_catalog(&pages, &v.catalog)
    }

    /// Names of `cf`'s tables, sorted.
    pub fn list_tables_in(&self, cf: &crate::db::ColumnFamily) -> Result<Vec<String>> {
        self.check_own(cf)?;
        let (pages, v) = self.version_of(cf.id(), cf.name())?;
        list_catalog(&pages, &v.catalog)
    }

    /// The version of the home CF this snapshot reads.
    pub fn version(&self) -> u64 {
        match &self.snap {
            Snap::One(_, v) => v.version.0,
            Snap::All(all) => all.get(self.home).map_or(0, |v| v.version.0),
        }
    }
}

/// Entry count and table id of a table, whatever its types.
pub(crate) fn table_len_untyped(rx: &ReadTransaction, name: &str) -> Result<(u64, TableId)> {
    let (pages, v) = rx.version_of(rx.home, "default")?;
    let meta = lookup_table(&pages, &v.catalog, name)?
        .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
    Ok((meta.len, meta.id))
}

/// Per-table state inside a write transaction.
#[derive(Debug)]
pub(crate) struct TableState {
    pub meta: TableMeta,
    pub dirty: bool,
}

impl TableState {
    pub fn root(&self) -> TreeRoot {
        TreeRoot {
            root: self.meta.root,
            len: self.meta.len,
        }
    }

    pub fn set_root(&mut self, r: TreeRoot) {
        if r.root != self.meta.root || r.len != self.meta.len {
            self.meta.root = r.root;
            self.meta.len = r.len;
            self.dirty = true;
        }
    }
}

/// Mutable state of a write transaction, behind one lock so several tables
/// can be open at once.
#[derive(Debug)]
pub(crate) struct WriteState {
    pub cf: CfId,
    pub pages: TxnPages,
    pub base: Arc<CfVersion>,
    pub catalog: TreeRoot,
    pub next_table: TableId,
    pub tables: HashMap<String, TableState>,
    pub catalog_changed: bool,
    /// The logical operations so far, for the WAL record; `None` once the
    /// transaction outgrew `log_max_bytes` and will commit by a direct
    /// checkpoint instead.
    pub log: Option<CommitEncoder>,
    pub log_max_bytes: usize,
    /// Set when an operation failed after it may have changed pages: the
    /// WAL record and the pages may disagree, so only abort is allowed.
    pub failed: Option<String>,
}

impl WriteState {
    /// A fresh state over `base` of `cf`; `log_max_bytes` is `None` for a
    /// state that logs nothing (WAL replay).
    pub fn new(
        shared: Arc<DbShared>,
        cf: &CfShared,
        base: Arc<CfVersion>,
        log_max_bytes: Option<usize>,
    ) -> WriteState {
        WriteState {
            cf: cf.id,
            pages: TxnPages::new(shared, cf.id, cf.alloc.clone()),
            catalog: base.catalog,
            next_table: base.next_table,
            base,
            tables: HashMap::new(),
            catalog_changed: false,
            log: log_max_bytes.map(|_| CommitEncoder::new()),
            log_max_bytes: log_max_bytes.unwrap_or(0),
            failed: None,
        }
    }

    /// Catalog rule shared by the API and WAL replay: adds the new, empty
    /// table `name` described by `meta` (its id at or past `next_table`).
    pub fn catalog_create(&mut self, name: &str, meta: TableMeta) -> Result<()> {
        debug_assert!(meta.root.is_none() && meta.len == 0, "a new table is empty");
        btree::insert(
            &mut self.pages,
            &mut self.catalog,
            name.as_bytes(),
            &meta.encode(),
        )?;
        self.next_table = TableId(self.next_table.0.max(meta.id.0 + 1));
        self.catalog_changed = true;
        self.tables
            .insert(name.to_string(), TableState { meta, dirty: false });
        Ok(())
    }

    /// Catalog rule shared by the API and WAL replay: frees every page of
    /// table `name` (whose current metadata is `meta`) and removes it.
    pub fn catalog_drop(&mut self, name: &str, meta: &TableMeta) -> Result<()> {
        let mut root = TreeRoot {
            root: meta.root,
            len: meta.len,
        };
        btree::clear(&mut self.pages, &mut root)?;
        btree::remove(&mut self.pages, &mut self.catalog, name.as_bytes())?;
        self.tables.remove(name);
        self.catalog_changed = true;
        Ok(())
    }

    /// Catalog rule shared by the API and WAL replay: moves table `from`
    /// (whose current metadata, unflushed changes included, is `meta`) to
    /// the name `to`; its cached state moves with it, clean.
    pub fn catalog_rename(&mut self, from: &str, to: &str, meta: TableMeta) -> Result<()> {
        self.tables.remove(from);
        btree::remove(&mut self.pages, &mut self.catalog, from.as_bytes())?;
        btree::insert(
            &mut self.pages,
            &mut self.catalog,
            to.as_bytes(),
            &meta.encode(),
        )?;
        self.tables
            .insert(to.to_string(), TableState { meta, dirty: false });
        self.catalog_changed = true;
        Ok(())
    }

    /// Records that an operation failed with `e` part-way (unless `e` is
    /// one of the errors raised before anything changes: an oversized key
    /// or value); returns `e`.
    pub fn fail(&mut self, e: Error) -> Error {
        let before_any_change =
            matches!(e, Error::KeyTooLarge { .. } | Error::ValueTooLarge { .. });
        if !before_any_change && self.failed.is_none() {
            self.failed = Some(e.to_string());
        }
        e
    }

    /// `TransactionFailed` once an operation failed part-way.
    pub fn check_not_failed(&self) -> Result<()> {
        match &self.failed {
            Some(cause) => Err(Error::TransactionFailed(cause.clone())),
            None => Ok(()),
        }
    }

    /// Records a logical operation for the WAL record.
    pub fn log(&mut self, op: &Op<'_>) {
        if let Some(enc) = &mut self.log {
            enc.push_for(self.cf, op);
            if enc.len_bytes() > self.log_max_bytes {
                self.log = None;
            }
        }
    }

    /// Writes the metadata of every changed table into the catalog.
    pub fn flush_tables(&mut self) -> Result<()> {
        let mut dirty: Vec<(&String, &mut TableState)> =
            self.tables.iter_mut().filter(|(_, t)| t.dirty).collect();
        dirty.sort_by(|a, b| a.0.cmp(b.0));
        for (name, t) in dirty {
            btree::insert(
                &mut self.pages,
                &mut self.catalog,
                name.as_bytes(),
                &t.meta.encode(),
            )?;
            t.dirty = false;
            self.catalog_changed = true;
        }
        Ok(())
    }

    fn table_meta(&mut self, name: &str) -> Result<Option<TableMeta>> {
        if let Some(t) = self.tables.get(name) {
            return Ok(Some(t.meta.clone()));
        }
        lookup_table(&self.pages, &self.catalog, name)
    }
}

/// Clears [`WriteTransaction::callback_scope`] when dropped.
pub(crate) struct CallbackScope<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for CallbackScope<'_> {
    fn drop(&mut self) {
        self.0.store(0, std::sync::atomic::Ordering::Release);
    }
}

/// A write transaction on one CF. Dropping it without `commit` aborts.
pub struct WriteTransaction {
    shared: Arc<DbShared>,
    cf: Arc<CfShared>,
    state: Mutex<WriteState>,
    /// Names of the tables with a live handle. Its own lock, taken after
    /// `state` (never the other way), so dropping a handle never waits on
    /// the state.
    open_tables: Mutex<HashSet<String>>,
    /// [`thread_token`] of a thread running user code (an `extract_if` or
    /// `retain` closure) while it holds `state`; 0 when none.
    callback_thread: std::sync::atomic::AtomicU64,
    durability: Durability,
    finished: bool,
    lock: Option<WriterGuard>,
}

/// A small non-zero number naming the calling thread (stable for its
/// life), so a lock can tell that its own holder asks for it again.
pub(crate) fn thread_token() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TOKEN.with(|t| *t)
}

/// The held writer lock of a CF. Records the thread that took it, so a
/// second request from that thread fails (`WouldDeadlock`) instead of
/// waiting on itself.
pub(crate) struct WriterGuard {
    guard: parking_lot::ArcMutexGuard<parking_lot::RawMutex, WriterSlot>,
    owner: Arc<std::sync::atomic::AtomicU64>,
}

impl std::ops::Deref for WriterGuard {
    type Target = WriterSlot;
    fn deref(&self) -> &WriterSlot {
        &self.guard
    }
}

impl std::ops::DerefMut for WriterGuard {
    fn deref_mut(&mut self) -> &mut WriterSlot {
        &mut self.guard
    }
}

impl Drop for WriterGuard {
    fn drop(&mut self) {
        // Runs before the field (the mutex guard) is dropped: the owner is
        // cleared while the lock is still held.
        self.owner.store(0, std::sync::atomic::Ordering::Release);
    }
}

impl std::fmt::Debug for WriteTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteTransaction")
            .field("cf", &self.cf.id)
            .field("durability", &self.durability)
            .finish()
    }
}

impl WriteTransaction {
    /// Waits for the CF's writer lock and starts from its latest version.
    /// `WouldDeadlock` if this thread already holds it.
    pub(crate) fn begin(shared: Arc<DbShared>, cf: Arc<CfShared>) -> Result<WriteTransaction> {
        Self::begin_with(shared, cf, CfShared::lock_writer)
    }

    /// Starts a write transaction only if the CF's writer is free
    /// (`WriterBusy` otherwise); never waits for another writer.
    pub(crate) fn try_begin(shared: Arc<DbShared>, cf: Arc<CfShared>) -> Result<WriteTransaction> {
        Self::begin_with(shared, cf, CfShared::try_lock_writer)
    }

    fn begin_with(
        shared: Arc<DbShared>,
        cf: Arc<CfShared>,
        lock: impl FnOnce(&CfShared) -> Result<WriterGuard>,
    ) -> Result<WriteTransaction> {
        shared.check_open()?;
        cf.check_live()?;
        if cf.writer_held_here() {
            return Err(cf.would_deadlock());
        }
        shared.stall_if_dirty()?;
        let lock = lock(&cf)?;
        shared.check_open()?;
        cf.check_live()?;
        let log_max = shared.options.wal_record_max_bytes;
        let state = WriteState::new(shared.clone(), &cf, lock.head.clone(), Some(log_max));
        Ok(WriteTransaction {
            shared: shared.clone(),
            cf,
            state: Mutex::new(state),
            open_tables: Mutex::new(HashSet::new()),
            callback_thread: std::sync::atomic::AtomicU64::new(0),
            durability: shared.options.durability,
            finished: false,
            lock: Some(lock),
        })
    }

    /// Sets how durable `commit` makes this transaction.
    pub fn set_durability(&mut self, d: Durability) {
        self.durability = d;
    }

    /// The durability `commit` will provide.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The transaction's state; `WouldDeadlock` if this thread holds it
    /// already (an `extract_if`/`retain` closure that uses the transaction).
    pub(crate) fn state(&self) -> Result<parking_lot::MutexGuard<'_, WriteState>> {
        use std::sync::atomic::Ordering;
        if self.callback_thread.load(Ordering::Acquire) == thread_token() {
            return Err(Error::WouldDeadlock(
                "an extract_if/retain closure used its own write transaction; collect what \
                 it needs first, or use a read transaction"
                    .into(),
            ));
        }
        Ok(self.state.lock())
    }

    /// Marks user code running on this thread while it holds the state;
    /// cleared when the returned guard is dropped.
    pub(crate) fn callback_scope(&self) -> CallbackScope<'_> {
        self.callback_thread
            .store(thread_token(), std::sync::atomic::Ordering::Release);
        CallbackScope(&self.callback_thread)
    }

    /// Opens (creating if needed) a table for reading and writing. Several
    /// tables may be open at once; the same one only once.
    pub fn open_table<'txn, K: Key + 'static, V: Value + 'static>(
        &'txn self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Table<'txn, K, V>> {
        let name = def.name();
        check_table_name(name)?;
        let mut st = self.state()?;
        let mut open = self.open_tables.lock();
        if open.contains(name) {
            return Err(Error::TableAlreadyOpen(name.to_string()));
        }
        if !st.tables.contains_key(name) {
            match lookup_table(&st.pages, &st.catalog, name)? {
                Some(meta) => {
                    st.tables
                        .insert(name.to_string(), TableState { meta, dirty: false });
                }
                None => {
                    st.check_not_failed()?;
                    self.create_table::<K, V>(&mut st, name)
                        .map_err(|e| st.fail(e))?;
                }
            }
        }
        check_types::<K, V>(name, &st.tables[name].meta)?;
        open.insert(name.to_string());
        Ok(Table::new(self, name.to_string()))
    }

    fn create_table<K: Key, V: Value>(&self, st: &mut WriteState, name: &str) -> Result<()> {
        let meta = TableMeta {
            id: st.next_table,
            root: None,
            len: 0,
            key_type: K::type_name(),
            value_type: V::type_name(),
        };
        st.log(&Op::CreateTable {
            table: meta.id,
            name,
            key_type: &meta.key_type,
            value_type: &meta.value_type,
        });
        st.catalog_create(name, meta)
    }

    /// Called by a table handle when it is dropped.
    pub(crate) fn close_table(&self, name: &str) {
        self.open_tables.lock().remove(name);
    }

    fn check_closed(&self, names: &[&str]) -> Result<()> {
        let open = self.open_tables.lock();
        match names.iter().find(|n| open.contains(**n)) {
            Some(n) => Err(Error::TableAlreadyOpen((*n).to_string())),
            None => Ok(()),
        }
    }

    /// Deletes a table and frees its pages. `Ok(false)` if it did not exist.
    pub fn delete_table(&self, name: &str) -> Result<bool> {
        check_table_name(name)?;
        let mut st = self.state()?;
        st.check_not_failed()?;
        self.check_closed(&[name])?;
        let Some(meta) = st.table_meta(name)? else {
            return Ok(false);
        };
        st.catalog_drop(name, &meta).map_err(|e| st.fail(e))?;
        st.log(&Op::DropTable { table: meta.id });
        Ok(true)
    }

    /// Renames table `from` to `to`. `TableNotFound` if `from` is missing,
    /// `TableExists` if `to` exists.
    pub fn rename_table(&self, from: &str, to: &str) -> Result<()> {
        check_table_name(from)?;
        check_table_name(to)?;
        let mut st = self.state()?;
        st.check_not_failed()?;
        self.check_closed(&[from, to])?;
        let meta = st
            .table_meta(from)?
            .ok_or_else(|| Error::TableNotFound(from.to_string()))?;
        if st.table_meta(to)?.is_some() {
            return Err(Error::TableExists(to.to_string()));
        }
        let id = meta.id;
        st.catalog_rename(from, to, meta).map_err(|e| st.fail(e))?;
        st.log(&Op::RenameTable {
            table: id,
            new_name: to,
        });
        Ok(())
    }

    /// Names of all tables (including ones created in this transaction).
    pub fn list_tables(&self) -> Result<Vec<String>> {
        let st = self.state()?;
        list_catalog(&st.pages, &st.catalog)
    }

    /// Commits: after `Ok`, the changes are durable per the durability mode
    /// and visible to new snapshots, including this thread's. After a
    /// failed operation (`TransactionFailed`), with a table handle still
    /// alive, or on any error, nothing is committed and every change is
    /// discarded.
    pub fn commit(mut self) -> Result<()> {
        self.finished = true;
        let lock = self.lock.take().expect("writer lock held until commit");
        let result = self.commit_with(lock);
        if result.is_err() {
            // A no-op once the pages were handed to the allocator.
            self.state.get_mut().pages.rollback();
        }
        result
    }

    fn commit_with(&self, lock: WriterGuard) -> Result<()> {
        let mut st = self.state()?;
        st.check_not_failed()?;
        {
            let open = self.open_tables.lock();
            if !open.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "tables still open at commit: {open:?}"
                )));
            }
        }
        st.flush_tables()?;
        if !st.catalog_changed && !st.pages.is_dirty() {
            // Nothing to log, but the state this transaction read must be
            // as durable as its mode promises.
            drop(lock);
            self.shared.check_open()?;
            return self.shared.wait_durability(st.base.lsn, self.durability);
        }
        self.shared.commit(&self.cf, &mut st, lock, self.durability)
    }

    /// Discards every change.
    pub fn abort(mut self) -> Result<()> {
        self.finished = true;
        self.state.lock().pages.rollback();
        Ok(())
    }
}

impl Drop for WriteTransaction {
    fn drop(&mut self) {
        if !self.finished {
            self.state.get_mut().pages.rollback();
        }
    }
}

/// A write transaction over several column families, committed as one WAL
/// record: all or nothing, also across a crash. Takes the writer locks of
/// its CFs in ascending `CfId` order when it begins.
pub struct MultiWriteTransaction {
    txns: Vec<WriteTransaction>,
    durability: Durability,
}

impl std::fmt::Debug for MultiWriteTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<CfId> = self.txns.iter().map(|t| t.cf.id).collect();
        f.debug_struct("MultiWriteTransaction")
            .field("cfs", &ids)
            .finish()
    }
}

impl MultiWriteTransaction {
    /// Locks `cfs` (any order, duplicates ignored) in ascending id order.
    pub(crate) fn begin(shared: Arc<DbShared>, mut cfs: Vec<Arc<CfShared>>) -> Result<Self> {
        cfs.sort_by_key(|c| c.id);
        cfs.dedup_by_key(|c| c.id);
        if cfs.is_empty() {
            return Err(Error::InvalidArgument(
                "a transaction needs at least one column family".into(),
            ));
        }
        let mut txns = Vec::with_capacity(cfs.len());
        for cf in cfs {
            txns.push(WriteTransaction::begin(shared.clone(), cf)?);
        }
        Ok(MultiWriteTransaction {
            durability: shared.options.durability,
            txns,
        })
    }

    /// The part of this transaction for `cf`, which must be a handle of
    /// this transaction's database (a same-numbered CF of another database
    /// is `ForeignHandle`) and one of its CFs.
    fn txn_for(&self, cf: &crate::db::ColumnFamily) -> Result<&WriteTransaction> {
        let t = self
            .txns
            .iter()
            .find(|t| t.cf.id == cf.id())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "column family {:?} is not part of this transaction",
                    cf.name()
                ))
            })?;
        if !Arc::ptr_eq(&t.cf, &cf.cf) {
            return Err(Error::ForeignHandle(format!(
                "column family {:?}",
                cf.name()
            )));
        }
        Ok(t)
    }

    /// Opens (creating if needed) a table of `cf`, which must be one of the
    /// transaction's column families.
    pub fn open_table<'txn, K: Key + 'static, V: Value + 'static>(
        &'txn self,
        cf: &crate::db::ColumnFamily,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Table<'txn, K, V>> {
        self.txn_for(cf)?.open_table(def)
    }

    /// Deletes a table of `cf`.
    pub fn delete_table(&self, cf: &crate::db::ColumnFamily, name: &str) -> Result<bool> {
        self.txn_for(cf)?.delete_table(name)
    }

    /// Sets how durable `commit` makes the transaction.
    pub fn set_durability(&mut self, d: Durability) {
        self.durability = d;
    }

    /// Commits every CF's changes atomically.
    pub fn commit(mut self) -> Result<()> {
        let shared = self.txns[0].shared.clone();
        let mut parts = Vec::with_capacity(self.txns.len());
        for t in &mut self.txns {
            t.finished = true;
            let lock = t.lock.take().expect("writer lock held until commit");
            parts.push((t.cf.clone(), lock));
        }
        let mut guards = Vec::with_capacity(self.txns.len());
        for t in &self.txns {
            guards.push(t.state()?);
        }
        let flushed: Result<()> = guards.iter_mut().try_for_each(|g| {
            g.check_not_failed()?;
            g.flush_tables()
        });
        if let Err(e) = flushed {
            for g in guards.iter_mut() {
                g.pages.rollback();
            }
            return Err(e);
        }
        let mut states: Vec<&mut WriteState> = guards.iter_mut().map(|g| &mut **g).collect();
        let result = shared.commit_multi(&mut parts, &mut states, self.durability);
        if result.is_err() {
            for st in states {
                st.pages.rollback();
            }
        }
        result
    }

    /// Discards every change.
    pub fn abort(self) -> Result<()> {
        drop(self);
        Ok(())
    }
}
