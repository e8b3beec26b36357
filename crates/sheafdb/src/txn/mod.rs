//! Transactions: snapshots, write transactions and version publication.
//!
//! Owns: [`CfShared`] (per-CF writer lock, published version, allocator),
//! [`CfVersion`] (an immutable committed state), [`ReadTransaction`] and
//! [`WriteTransaction`].
//!
//! Invariants:
//! - one write transaction per CF at a time (its writer lock);
//! - `begin_read` only loads the published version (`ArcSwap`), taking no
//!   lock a writer holds;
//! - versions of a CF are published in increasing order, each after it is
//!   as durable as its mode promises (DESIGN §4.3d);
//! - a snapshot holds its version's [`ReclaimBatch`], so no page it can
//!   reach is reused while it lives (DESIGN §5).

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

use pages::{ReadPages, TxnPages};

/// How durable a commit is when `commit()` returns (DESIGN §9).
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
    /// Last WAL record included (0 until the WAL is in use).
    #[allow(dead_code)]
    pub lsn: Lsn,
    /// Pages freed by the commit after this version; released when every
    /// snapshot of this or an older version is gone.
    pub batch: Arc<ReclaimBatch>,
}

/// Shared state of one column family.
#[derive(Debug)]
pub(crate) struct CfShared {
    pub id: CfId,
    pub name: String,
    pub writer: Arc<Mutex<()>>,
    pub current: ArcSwap<CfVersion>,
    pub alloc: Arc<Mutex<CfAllocator>>,
}

impl CfShared {
    /// A CF whose latest state is `version`.
    pub fn new(id: CfId, name: String, alloc: CfAllocator, version: CfVersion) -> CfShared {
        CfShared {
            id,
            name,
            writer: Arc::new(Mutex::new(())),
            current: ArcSwap::from_pointee(version),
            alloc: Arc::new(Mutex::new(alloc)),
        }
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

/// A consistent read-only view of one CF. Never blocks writers and is never
/// blocked by them. Cheap: holding one costs the pages it keeps alive.
#[derive(Debug)]
pub struct ReadTransaction {
    pages: ReadPages,
    version: Arc<CfVersion>,
}

impl ReadTransaction {
    pub(crate) fn new(shared: Arc<DbShared>, cf: &CfShared) -> ReadTransaction {
        ReadTransaction {
            pages: ReadPages::new(shared, cf.id),
            version: cf.current.load_full(),
        }
    }

    /// Opens a table for reading. `TableNotFound` if it does not exist,
    /// `TableTypeMismatch` if it was created with other types.
    pub fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<ReadOnlyTable<K, V>> {
        let name = def.name();
        check_table_name(name)?;
        let meta = lookup_table(&self.pages, &self.version.catalog, name)?
            .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
        check_types::<K, V>(name, &meta)?;
        Ok(ReadOnlyTable::new(
            self.pages.clone(),
            TreeRoot {
                root: meta.root,
                len: meta.len,
            },
            self.version.clone(),
        ))
    }

    /// Names of all tables, sorted.
    pub fn list_tables(&self) -> Result<Vec<String>> {
        list_catalog(&self.pages, &self.version.catalog)
    }

    /// The version this snapshot reads.
    pub fn version(&self) -> u64 {
        self.version.version.0
    }
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
    pub pages: TxnPages,
    pub base: Arc<CfVersion>,
    pub catalog: TreeRoot,
    pub next_table: TableId,
    pub tables: HashMap<String, TableState>,
    pub open: HashSet<String>,
    pub catalog_changed: bool,
}

impl WriteState {
    /// Writes the metadata of every changed table into the catalog.
    fn flush_tables(&mut self) -> Result<()> {
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

/// A write transaction on one CF. Dropping it without `commit` aborts.
pub struct WriteTransaction {
    shared: Arc<DbShared>,
    cf: Arc<CfShared>,
    state: Mutex<WriteState>,
    durability: Durability,
    finished: bool,
    _lock: parking_lot::ArcMutexGuard<parking_lot::RawMutex, ()>,
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
    pub(crate) fn begin(shared: Arc<DbShared>, cf: Arc<CfShared>) -> Result<WriteTransaction> {
        shared.check_writable()?;
        let lock = cf.writer.lock_arc();
        let base = cf.current.load_full();
        let pages = TxnPages::new(shared.clone(), cf.id, cf.alloc.clone());
        let state = WriteState {
            pages,
            catalog: base.catalog,
            next_table: base.next_table,
            base,
            tables: HashMap::new(),
            open: HashSet::new(),
            catalog_changed: false,
        };
        Ok(WriteTransaction {
            shared,
            cf,
            state: Mutex::new(state),
            durability: Durability::default(),
            finished: false,
            _lock: lock,
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

    pub(crate) fn state(&self) -> parking_lot::MutexGuard<'_, WriteState> {
        self.state.lock()
    }

    /// Opens (creating if needed) a table for reading and writing. Several
    /// tables may be open at once; the same one only once.
    pub fn open_table<'txn, K: Key + 'static, V: Value + 'static>(
        &'txn self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Table<'txn, K, V>> {
        let name = def.name();
        check_table_name(name)?;
        let mut st = self.state.lock();
        if st.open.contains(name) {
            return Err(Error::TableAlreadyOpen(name.to_string()));
        }
        if !st.tables.contains_key(name) {
            let meta = match lookup_table(&st.pages, &st.catalog, name)? {
                Some(meta) => meta,
                None => self.create_table::<K, V>(&mut st, name)?,
            };
            st.tables
                .insert(name.to_string(), TableState { meta, dirty: false });
        }
        check_types::<K, V>(name, &st.tables[name].meta)?;
        st.open.insert(name.to_string());
        Ok(Table::new(self, name.to_string()))
    }

    fn create_table<K: Key, V: Value>(&self, st: &mut WriteState, name: &str) -> Result<TableMeta> {
        let meta = TableMeta {
            id: st.next_table,
            root: None,
            len: 0,
            key_type: K::type_name(),
            value_type: V::type_name(),
        };
        st.next_table = TableId(st.next_table.0 + 1);
        let WriteState { pages, catalog, .. } = &mut *st;
        btree::insert(pages, catalog, name.as_bytes(), &meta.encode())?;
        st.catalog_changed = true;
        Ok(meta)
    }

    /// Called by a table handle when it is dropped.
    pub(crate) fn close_table(&self, name: &str) {
        self.state.lock().open.remove(name);
    }

    /// Deletes a table and frees its pages. `Ok(false)` if it did not exist.
    pub fn delete_table(&self, name: &str) -> Result<bool> {
        check_table_name(name)?;
        let mut st = self.state.lock();
        if st.open.contains(name) {
            return Err(Error::TableAlreadyOpen(name.to_string()));
        }
        let Some(meta) = st.table_meta(name)? else {
            return Ok(false);
        };
        let WriteState { pages, catalog, .. } = &mut *st;
        let mut root = TreeRoot {
            root: meta.root,
            len: meta.len,
        };
        btree::clear(pages, &mut root)?;
        btree::remove(pages, catalog, name.as_bytes())?;
        st.tables.remove(name);
        st.catalog_changed = true;
        Ok(true)
    }

    /// Renames table `from` to `to`. `TableNotFound` if `from` is missing,
    /// `TableExists` if `to` exists.
    pub fn rename_table(&self, from: &str, to: &str) -> Result<()> {
        check_table_name(from)?;
        check_table_name(to)?;
        let mut st = self.state.lock();
        if st.open.contains(from) || st.open.contains(to) {
            return Err(Error::TableAlreadyOpen(from.to_string()));
        }
        let meta = st
            .table_meta(from)?
            .ok_or_else(|| Error::TableNotFound(from.to_string()))?;
        if st.table_meta(to)?.is_some() {
            return Err(Error::TableExists(to.to_string()));
        }
        st.tables.remove(from);
        let WriteState { pages, catalog, .. } = &mut *st;
        btree::remove(pages, catalog, from.as_bytes())?;
        btree::insert(pages, catalog, to.as_bytes(), &meta.encode())?;
        st.catalog_changed = true;
        Ok(())
    }

    /// Names of all tables (including ones created in this transaction).
    pub fn list_tables(&self) -> Result<Vec<String>> {
        let st = self.state.lock();
        list_catalog(&st.pages, &st.catalog)
    }

    /// Commits: after `Ok`, the changes are durable per the durability mode
    /// and visible to new snapshots, including this thread's.
    pub fn commit(mut self) -> Result<()> {
        self.finished = true;
        let mut st = self.state.lock();
        if !st.open.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "tables still open at commit: {:?}",
                st.open
            )));
        }
        st.flush_tables()?;
        if !st.catalog_changed && !st.pages.is_dirty() {
            return Ok(());
        }
        let result = self.shared.commit_cf(&self.cf, &mut st, self.durability);
        if result.is_err() {
            st.pages.rollback();
        }
        result
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
