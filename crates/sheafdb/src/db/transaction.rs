//! The public transaction types: snapshots ([`ReadTransaction`]), write
//! transactions on one CF ([`WriteTransaction`]) and over several
//! ([`MultiWriteTransaction`]).
//!
//! They live with the engine they call (commit, durability waits, the
//! dirty-page stall); the state they drive is `txn::WriteCore`, which is
//! all a table handle sees.
//!
//! Invariants: a write transaction holds its CF's writer lock from begin
//! until commit or abort (a multi-CF one takes its CFs' locks in ascending
//! id order); a dropped, uncommitted transaction gives every private page
//! back.

use std::sync::Arc;

use crate::btree::TreeRoot;
use crate::error::{Error, Result};
use crate::format::records::TableMeta;
use crate::storage::heap;
use crate::table::types::{Key, TableDefinition, Value};
use crate::table::{
    MultimapTable, MultimapTableDefinition, ReadOnlyMultimapTable, ReadOnlyTable, Table,
};
use crate::txn::pages::ReadPages;
use crate::txn::state::KeyFilterUse;
use crate::txn::{
    check_table_name, check_types, list_catalog, lookup_table, read_catalog, CfShared, CfVersion,
    DbVersion, Durability, KeyIndex, WriteCore, WriteState, WriterGuard,
};
use crate::types::{CfId, TableId};

use super::{ColumnFamily, DbShared};

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
        let all = shared.registry.snapshot.load_full();
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
        Ok((ReadPages::new(self.shared.space.clone(), cf), v))
    }

    fn open_in<K: Key + 'static, V: Value + 'static>(
        &self,
        cf: CfId,
        cf_name: &str,
        def: TableDefinition<'_, K, V>,
    ) -> Result<ReadOnlyTable<K, V>> {
        self.open_named(cf, cf_name, def.name(), true)
    }

    /// Opens table `name` of `cf` as a `ReadOnlyTable<K, V>`. If `typed`,
    /// `K` and `V` must be the stored types (`TableTypeMismatch`);
    /// otherwise any table opens (untyped access).
    fn open_named<K: Key + 'static, V: Value + 'static>(
        &self,
        cf: CfId,
        cf_name: &str,
        name: &str,
        typed: bool,
    ) -> Result<ReadOnlyTable<K, V>> {
        check_table_name(name)?;
        let (pages, version) = self.version_of(cf, cf_name)?;
        let tables = version
            .tables
            .get_or_load(|| read_catalog(&pages, &version.catalog))?;
        let t = tables
            .get(name)
            .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
        let types = (std::any::TypeId::of::<K>(), std::any::TypeId::of::<V>());
        if typed && t.typed.get() != Some(&types) {
            // First open with these types (or others since): compare the
            // type names once; later opens with them allocate nothing.
            check_types(name, &t.meta, &K::type_name(), &V::type_name())?;
            let _ = t.typed.set(types);
        }
        let (id, root) = (
            t.meta.id,
            TreeRoot {
                root: t.meta.root,
                len: t.meta.len,
            },
        );
        ReadOnlyTable::new(pages, id, root, version)
    }

    /// Opens a table of the home CF for reading. `TableNotFound` if it does
    /// not exist, `TableTypeMismatch` if it was created with other types.
    pub fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<ReadOnlyTable<K, V>> {
        self.open_in(self.home, "default", def)
    }

    /// Opens a multimap table of the home CF for reading. `TableNotFound`
    /// if it does not exist, `TableTypeMismatch` if it was created with
    /// other types or is not a multimap.
    pub fn open_multimap_table<K: Key + 'static, V: Key + 'static>(
        &self,
        def: MultimapTableDefinition<'_, K, V>,
    ) -> Result<ReadOnlyMultimapTable<K, V>> {
        self.open_multimap_in(self.home, "default", def)
    }

    /// Opens a multimap table of column family `cf`.
    pub fn open_multimap_table_in<K: Key + 'static, V: Key + 'static>(
        &self,
        cf: &ColumnFamily,
        def: MultimapTableDefinition<'_, K, V>,
    ) -> Result<ReadOnlyMultimapTable<K, V>> {
        self.check_own(cf)?;
        self.open_multimap_in(cf.id(), cf.name(), def)
    }

    fn open_multimap_in<K: Key + 'static, V: Key + 'static>(
        &self,
        cf: CfId,
        cf_name: &str,
        def: MultimapTableDefinition<'_, K, V>,
    ) -> Result<ReadOnlyMultimapTable<K, V>> {
        let info = self.info_in(cf, cf_name, def.name())?;
        let (k, v) = (def.key_type_name(), def.value_type_name());
        if info.key_type != k || info.value_type != v {
            return Err(Error::TableTypeMismatch {
                table: def.name().to_string(),
                stored: format!("<{}, {}>", info.key_type, info.value_type),
                requested: format!("<{k}, {v}>"),
            });
        }
        let inner = self.open_named(cf, cf_name, def.name(), false)?;
        Ok(ReadOnlyMultimapTable::new(inner))
    }

    /// Ends the snapshot (as dropping it does). Tables opened from it keep
    /// reading it until they are dropped too.
    pub fn close(self) -> Result<()> {
        drop(self);
        Ok(())
    }

    /// Opens a table of column family `cf` (which this snapshot must cover).
    pub fn open_table_in<K: Key + 'static, V: Value + 'static>(
        &self,
        cf: &ColumnFamily,
        def: TableDefinition<'_, K, V>,
    ) -> Result<ReadOnlyTable<K, V>> {
        self.check_own(cf)?;
        self.open_in(cf.id(), cf.name(), def)
    }

    /// `ForeignHandle` unless `cf` is a handle of this snapshot's database.
    fn check_own(&self, cf: &ColumnFamily) -> Result<()> {
        cf.check_belongs_to(&self.shared)
    }

    /// Names of the home CF's tables, sorted.
    pub fn list_tables(&self) -> Result<Vec<String>> {
        let (pages, v) = self.version_of(self.home, "default")?;
        list_catalog(&pages, &v.catalog)
    }

    /// Names of `cf`'s tables, sorted.
    pub fn list_tables_in(&self, cf: &ColumnFamily) -> Result<Vec<String>> {
        self.check_own(cf)?;
        let (pages, v) = self.version_of(cf.id(), cf.name())?;
        list_catalog(&pages, &v.catalog)
    }

    /// Opens table `name` of the home CF without knowing its types: keys
    /// and values are their stored encodings (see [`UntypedReadTable`]).
    /// `TableNotFound` if it does not exist. [`ReadTransaction::table_info`]
    /// tells the types the bytes encode.
    pub fn open_untyped_table(&self, name: &str) -> Result<UntypedReadTable> {
        self.open_named(self.home, "default", name, false)
    }

    /// [`ReadTransaction::open_untyped_table`] for a table of `cf`.
    pub fn open_untyped_table_in(&self, cf: &ColumnFamily, name: &str) -> Result<UntypedReadTable> {
        self.check_own(cf)?;
        self.open_named(cf.id(), cf.name(), name, false)
    }

    /// Name, key and value type names and entry count of table `name` of
    /// the home CF. `TableNotFound` if it does not exist.
    pub fn table_info(&self, name: &str) -> Result<TableInfo> {
        self.info_in(self.home, "default", name)
    }

    /// [`ReadTransaction::table_info`] for a table of `cf`.
    pub fn table_info_in(&self, cf: &ColumnFamily, name: &str) -> Result<TableInfo> {
        self.check_own(cf)?;
        self.info_in(cf.id(), cf.name(), name)
    }

    /// [`TableInfo`] of every table of the home CF, sorted by name.
    pub fn list_table_info(&self) -> Result<Vec<TableInfo>> {
        self.list_info_in(self.home, "default")
    }

    /// [`TableInfo`] of every table of `cf`, sorted by name.
    pub fn list_table_info_in(&self, cf: &ColumnFamily) -> Result<Vec<TableInfo>> {
        self.check_own(cf)?;
        self.list_info_in(cf.id(), cf.name())
    }

    /// Opens table `name` of `cf` untyped (keys and values as stored).
    pub(super) fn open_untyped_in(
        &self,
        cf: CfId,
        cf_name: &str,
        name: &str,
    ) -> Result<UntypedReadTable> {
        self.open_named(cf, cf_name, name, false)
    }

    /// The CFs this snapshot covers, by id (sorted): those that existed
    /// when it was taken, whatever was created or dropped since.
    pub(super) fn cf_ids(&self) -> Vec<CfId> {
        match &self.snap {
            Snap::One(id, _) => vec![*id],
            Snap::All(all) => all.cfs.iter().map(|(id, _)| *id).collect(),
        }
    }

    pub(super) fn list_info_in(&self, cf: CfId, cf_name: &str) -> Result<Vec<TableInfo>> {
        let (pages, v) = self.version_of(cf, cf_name)?;
        let names = list_catalog(&pages, &v.catalog)?;
        names
            .iter()
            .map(|name| self.info_in(cf, cf_name, name))
            .collect()
    }

    fn info_in(&self, cf: CfId, cf_name: &str, name: &str) -> Result<TableInfo> {
        check_table_name(name)?;
        let (pages, v) = self.version_of(cf, cf_name)?;
        let meta = lookup_table(&pages, &v.catalog, name)?
            .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
        Ok(TableInfo {
            name: name.to_string(),
            entries: len_at(&v, &meta, name)?,
            key_type: meta.key_type,
            value_type: meta.value_type,
        })
    }

    /// The version of the home CF this snapshot reads.
    pub fn version(&self) -> u64 {
        match &self.snap {
            Snap::One(_, v) => v.version.0,
            Snap::All(all) => all.get(self.home).map_or(0, |v| v.version.0),
        }
    }
}

/// Entry count of table `name` (described by `meta`) at version `v`: its
/// tree's count plus the buffered commits' change.
fn len_at(v: &CfVersion, meta: &TableMeta, name: &str) -> Result<u64> {
    meta.len
        .checked_add_signed(v.delta(meta.id))
        .ok_or_else(|| {
            Error::corrupted(
                format!("table {name:?}: entry count below zero"),
                "table tree",
            )
        })
}

/// Entry count and table id of a table, whatever its types.
pub(crate) fn table_len_untyped(rx: &ReadTransaction, name: &str) -> Result<(u64, TableId)> {
    let (pages, v) = rx.version_of(rx.home, "default")?;
    let meta = lookup_table(&pages, &v.catalog, name)?
        .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
    Ok((len_at(&v, &meta, name)?, meta.id))
}

/// What a snapshot knows about one table without knowing its Rust types
/// ([`ReadTransaction::table_info`], [`ReadTransaction::list_table_info`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableInfo {
    /// The table's name.
    pub name: String,
    /// The key type's catalog name, as [`Value::type_name`] wrote it when
    /// the table was created (`"u64"`, `"(u64,str)"`, `"myapp::UserId"`).
    pub key_type: String,
    /// The value type's catalog name.
    pub value_type: String,
    /// Entries in the table at this snapshot.
    pub entries: u64,
}

/// A table read without knowing its types: keys and values are the stored
/// encodings of the table's key and value types (`table::types` documents
/// them; `table::dynamic` decodes the built-in ones). Iteration is in key
/// order, as for a typed table.
pub type UntypedReadTable = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// A table written without knowing its types: keys and values given as
/// their encodings (`table::dynamic` makes them for the built-in types).
/// Where the table's key or value type is built-in, a write whose key or
/// value is not an encoding of it is refused with `InvalidArgument` and
/// writes nothing. The bytes of a user-defined type are stored as given:
/// they must be valid encodings of it, or a typed reader of them gets
/// `Error::Corrupted`.
pub type UntypedTable<'txn> = Table<'txn, &'static [u8], &'static [u8]>;

/// Numbers write transactions, so a savepoint is only restored in the
/// transaction that took it.
static NEXT_TXN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_txn_token() -> u64 {
    NEXT_TXN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A point of a write transaction to go back to
/// ([`WriteTransaction::savepoint`], [`MultiWriteTransaction::savepoint`]).
///
/// Restoring it ([`WriteTransaction::restore_savepoint`]) undoes every
/// change the transaction made after it: writes, and tables created,
/// deleted or renamed. Savepoints nest: restoring one discards those
/// taken after it and keeps it (it can be restored again). A savepoint
/// lives only as long as its transaction; it does not survive commit
/// (persistent savepoints are not supported: see the README).
///
/// ```
/// use sheafdb::{Database, TableDefinition};
/// const T: TableDefinition<u64, &str> = TableDefinition::new("t");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("s.sheaf")).unwrap();
/// let mut tx = db.begin_write()?;
/// tx.open_table(T)?.insert(1, "kept")?;
/// let sp = tx.savepoint()?;
/// tx.open_table(T)?.insert(2, "undone")?;
/// tx.delete_table("t")?;
/// tx.restore_savepoint(&sp)?; // the insert of 2 and the delete are undone
/// assert_eq!(tx.open_table(T)?.len()?, 1);
/// tx.commit()?;
/// # Ok::<(), sheafdb::Error>(())
/// ```
#[derive(Debug)]
pub struct Savepoint {
    txn: u64,
    /// Per CF of the transaction, the savepoint's number in its state.
    marks: Vec<(CfId, u64)>,
}

fn foreign_savepoint() -> Error {
    Error::InvalidArgument("savepoint: taken in another transaction".into())
}

/// A write transaction on one CF. Dropping it without `commit` aborts.
///
/// It is `Send`: it may be built on one thread and committed on another.
/// The thread that uses it last holds its CF's writer lock as far as
/// `WouldDeadlock` detection knows (every method records the caller); a
/// thread that received a transaction and, before using it, begins
/// another on the same CF waits for it, like for any other thread's. It
/// is not `Sync`: one thread uses it at a time (its table handles are
/// neither `Send` nor `Sync`).
pub struct WriteTransaction {
    shared: Arc<DbShared>,
    cf: Arc<CfShared>,
    core: WriteCore,
    durability: Durability,
    finished: bool,
    lock: Option<WriterGuard>,
    /// This transaction's number (savepoints carry it).
    token: u64,
    /// `Send` but not `Sync`.
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
    /// Last, so it drops after the state it frees.
    heap: GiveBackOnDrop,
}

/// Gives freed heap memory back to the system when dropped, if the
/// transaction it ends held [`heap::GIVE_BACK_FROM`] bytes of writes or
/// more (design.md "Memory bound", *Large transactions*).
#[derive(Debug, Default)]
struct GiveBackOnDrop {
    due: bool,
    /// The owner gives back instead: a [`MultiWriteTransaction`], once
    /// every part has released its writer lock.
    deferred: bool,
}

impl Drop for GiveBackOnDrop {
    fn drop(&mut self) {
        if self.due && !self.deferred {
            heap::give_back();
        }
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
        // A busy writer is `WriterBusy` at once, before the stalls of
        // `begin_with` (which may fold other CFs' buffers first: 0.7 s for
        // 24 MiB in an adversarial probe). A writer taken between this
        // look and the lock below is still refused, after the stall.
        shared.check_open()?;
        cf.check_live()?;
        if !cf.writer_held_here() && cf.writer.is_locked() {
            return Err(Error::WriterBusy(cf.name.clone()));
        }
        Self::begin_with(shared, cf, CfShared::try_lock_writer)
    }

    fn begin_with(
        shared: Arc<DbShared>,
        cf: Arc<CfShared>,
        lock: impl FnOnce(&CfShared) -> Result<WriterGuard>,
    ) -> Result<WriteTransaction> {
        shared.check_open()?;
        cf.check_live()?;
        // Fails fast (WouldDeadlock) before the dirty-page stall below.
        if cf.writer_held_here() {
            return Err(cf.would_deadlock());
        }
        shared.stall_if_dirty()?;
        shared.stall_if_buffered()?;
        let lock = lock(&cf)?;
        shared.check_open()?;
        cf.check_live()?;
        let log_max = shared.options.wal_record_max_bytes;
        let mut state =
            WriteState::new(shared.space.clone(), &cf, lock.head.clone(), Some(log_max));
        state.spill_bytes = shared.options.txn_spill_bytes;
        // Under the writer lock: a filter installed later sees this
        // transaction finished (F1).
        state.key_filter = (shared.filter_budget.limit() > 0).then(|| KeyFilterUse {
            targets: cf.key_filter.targets(),
            cf: cf.clone(),
            skipped: Default::default(),
            grow_failed: false,
        });
        Ok(WriteTransaction {
            durability: shared.options.durability,
            shared,
            cf,
            core: WriteCore::new(state),
            finished: false,
            lock: Some(lock),
            token: next_txn_token(),
            _not_sync: std::marker::PhantomData,
            heap: GiveBackOnDrop::default(),
        })
    }

    /// Records the calling thread as the writer lock's holder (the
    /// transaction may have moved threads), so that thread's own
    /// `begin_write` of this CF is `WouldDeadlock`, not a hang.
    fn claim(&self) {
        if let Some(lock) = &self.lock {
            lock.claim_for_this_thread();
        }
    }

    /// Takes a savepoint: [`WriteTransaction::restore_savepoint`] goes
    /// back to this point. Cheap (a mark in the transaction's record);
    /// from the first savepoint on, the transaction keeps its record in
    /// memory until it ends, even past `Builder::wal_record_max_bytes`
    /// (it then commits by a direct checkpoint). `InvalidArgument` if it
    /// already outgrew that limit before its first savepoint.
    pub fn savepoint(&self) -> Result<Savepoint> {
        self.claim();
        let seq = self.core.state()?.savepoint()?;
        Ok(Savepoint {
            txn: self.token,
            marks: vec![(self.cf.id, seq)],
        })
    }

    /// Undoes every change made after `savepoint` was taken. Savepoints
    /// taken after it become invalid; it stays valid. Costs a replay of
    /// the transaction's operations up to the savepoint. A transaction
    /// that failed after the savepoint (`TransactionFailed`) is usable
    /// again once this succeeds. `InvalidArgument` for a savepoint of
    /// another transaction or one a restore discarded.
    pub fn restore_savepoint(&mut self, savepoint: &Savepoint) -> Result<()> {
        self.claim();
        match savepoint.marks[..] {
            [(cf, seq)] if savepoint.txn == self.token && cf == self.cf.id => {
                self.core.restore_savepoint(seq)
            }
            _ => Err(foreign_savepoint()),
        }
    }

    /// Sets how durable `commit` makes this transaction.
    pub fn set_durability(&mut self, d: Durability) {
        self.claim();
        self.durability = d;
    }

    /// The durability `commit` will provide.
    pub fn durability(&self) -> Durability {
        self.claim();
        self.durability
    }

    /// Opens (creating if needed) a table for reading and writing. Several
    /// tables may be open at once; the same one only once.
    pub fn open_table<'txn, K: Key + 'static, V: Value + 'static>(
        &'txn self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Table<'txn, K, V>> {
        self.claim();
        let name = def.name();
        let ids = (std::any::TypeId::of::<K>(), std::any::TypeId::of::<V>());
        self.core
            .open_table_typed(name, ids, || (K::type_name(), V::type_name()))?;
        Ok(Table::new(&self.core, name.to_string()))
    }

    /// Opens (creating if needed) a multimap table for reading and
    /// writing (see [`MultimapTableDefinition`]).
    pub fn open_multimap_table<'txn, K: Key + 'static, V: Key + 'static>(
        &'txn self,
        def: MultimapTableDefinition<'_, K, V>,
    ) -> Result<MultimapTable<'txn, K, V>> {
        self.claim();
        let name = def.name();
        (self.core).open_table(name, &def.key_type_name(), &def.value_type_name())?;
        Ok(MultimapTable::new(Table::new(&self.core, name.to_string())))
    }

    /// Opens (creating if needed) table `name` without Rust types: the
    /// table's key and value type names are `key_type` and `value_type`
    /// (as [`Value::type_name`] writes them), checked like a typed open
    /// (`TableTypeMismatch`), and keys and values are given and returned
    /// as their encodings (see [`UntypedTable`]).
    pub fn open_untyped_table<'txn>(
        &'txn self,
        name: &str,
        key_type: &str,
        value_type: &str,
    ) -> Result<UntypedTable<'txn>> {
        self.claim();
        self.core.open_table(name, key_type, value_type)?;
        Ok(Table::untyped(
            &self.core,
            name.to_string(),
            key_type,
            value_type,
        ))
    }

    /// Applies `batch` (keys strictly increasing) to table `name` (of
    /// these key and value type names, created if needed), unlogged: for
    /// `Database::backup_to`'s copy only (`WriteState::append_sorted_unlogged`).
    pub(crate) fn append_sorted_unlogged<W: crate::btree::SortedWrite>(
        &self,
        table: (&str, &str, &str),
        batch: &[W],
    ) -> Result<()> {
        self.claim();
        self.core.append_sorted_unlogged(table, batch)
    }

    /// Deletes a table and frees its pages. `Ok(false)` if it did not exist.
    pub fn delete_table(&self, name: &str) -> Result<bool> {
        self.claim();
        self.core.delete_table(name)
    }

    /// Renames table `from` to `to`. `TableNotFound` if `from` is missing,
    /// `TableExists` if another table is named `to` (renaming a table to
    /// its own name changes nothing, as in redb).
    pub fn rename_table(&self, from: &str, to: &str) -> Result<()> {
        self.claim();
        self.core.rename_table(from, to)
    }

    /// Names of all tables (including ones created in this transaction).
    pub fn list_tables(&self) -> Result<Vec<String>> {
        self.claim();
        self.core.list_tables()
    }

    /// Commits: after `Ok`, the changes are durable per the durability mode
    /// and visible to new snapshots, including this thread's. After a
    /// failed operation (`TransactionFailed`), with a table handle still
    /// alive, or on any error, nothing is committed and every change is
    /// discarded.
    pub fn commit(mut self) -> Result<()> {
        self.claim();
        self.finished = true;
        self.note_heap_bytes();
        let lock = self.take_lock()?;
        let result = self.commit_with(lock);
        if result.is_err() {
            // A no-op once the pages were handed to the allocator.
            self.core.state_mut().pages.rollback();
        }
        result
    }

    /// Asks for freed memory to be given back once this transaction is
    /// dropped if its writes hold that much now (a commit consumes them).
    fn note_heap_bytes(&mut self) {
        self.heap.due |= self.core.state_mut().heap_bytes() >= heap::GIVE_BACK_FROM;
    }

    /// The writer lock, held from begin until commit takes it.
    fn take_lock(&mut self) -> Result<WriterGuard> {
        self.lock
            .take()
            .ok_or_else(|| Error::InvalidArgument("write transaction already committed".into()))
    }

    fn commit_with(&self, lock: WriterGuard) -> Result<()> {
        let mut st = self.core.state()?;
        st.check_not_failed()?;
        self.core.check_none_open()?;
        // (Settling blind removals reads the trees: a failure fails the
        // commit, which rolls the pages back.)
        let payload = st.finish_log()?;
        // An import goes to the trees now, to be written once
        // (`DbShared::commit` decides, once its pages are written).
        let import = payload
            .as_ref()
            .is_some_and(|p| self.shared.may_write_once(self.durability, p.len()))
            && st.fills_small_tables();
        // Past the database-wide buffer limit (the reservation fails),
        // this commit folds the buffer itself; so does one too large to
        // buffer (`DbShared::bufferable_charge`).
        let charge = st.buffer_charge(KeyIndex::Build);
        let bufferable = !import
            && !st.needs_tree_commit()
            && self.shared.bufferable_charge(charge)
            && payload
                .as_ref()
                .is_some_and(|p| p.len() as u64 <= self.shared.wal().options().max_record_bytes);
        let reserved = bufferable
            .then(|| self.shared.budget.reserve(charge))
            .flatten();
        if let (Some(r), Some(p)) = (reserved, &payload) {
            if st.writes.is_empty() {
                return self.commit_nothing(&st, lock);
            }
            return (self.shared).commit_buffered(&self.cf, &mut st, lock, self.durability, p, r);
        }
        // The trees are written: the buffered commits first, then ours.
        st.fold_base().map_err(|e| st.fail(e))?;
        st.apply_writes().map_err(|e| st.fail(e))?;
        st.flush_tables()?;
        if !st.catalog_changed && !st.pages.is_dirty() {
            return self.commit_nothing(&st, lock);
        }
        (self.shared).commit(&self.cf, &mut st, lock, self.durability, payload)
    }

    /// Commits a transaction that changed nothing: no record, but it is as
    /// durable as its mode promises, and like any durable commit it makes
    /// the whole log so far as durable, every column family's earlier
    /// `None` commits included (README: such a commit survives "a later
    /// durable commit"). Before, it waited only for its own CF's version,
    /// so another CF's `None` commit was lost to a crash after it (a
    /// session-34 probe).
    fn commit_nothing(&self, st: &WriteState, lock: WriterGuard) -> Result<()> {
        drop(lock);
        self.shared.check_open()?;
        let end = self.shared.wal().next_lsn();
        debug_assert!(end >= st.base.lsn, "the log ends before a version it holds");
        self.shared.wait_durability(end, self.durability)
    }

    /// Discards every change.
    pub fn abort(mut self) -> Result<()> {
        self.claim();
        self.finished = true;
        self.core.state_mut().pages.rollback();
        Ok(())
    }
}

impl Drop for WriteTransaction {
    fn drop(&mut self) {
        self.note_heap_bytes();
        let st = self.core.state_mut();
        if !self.finished {
            st.pages.rollback();
        }
        // Its walks passed many buffered tombstones (design.md "Tombstone
        // walks"): the fold is asked for now, as the writer lock it needs
        // is given up (a fold that finds the lock held gives up).
        if st.fold_asked {
            self.shared.fold_nudge.nudge();
        }
    }
}

/// A write transaction over several column families, committed as one WAL
/// record: all or nothing, also across a crash. Takes the writer locks of
/// its CFs in ascending `CfId` order when it begins.
pub struct MultiWriteTransaction {
    txns: Vec<WriteTransaction>,
    durability: Durability,
    token: u64,
}

impl std::fmt::Debug for MultiWriteTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<CfId> = self.txns.iter().map(|t| t.cf.id).collect();
        f.debug_struct("MultiWriteTransaction")
            .field("cfs", &ids)
            .finish()
    }
}

impl Drop for MultiWriteTransaction {
    /// Its parts end in order, each releasing its writer lock as it drops;
    /// the heap is given back once, after the last (a part's own
    /// give-back, tens of milliseconds, ran while the later parts still
    /// held their CFs' writer locks, and once per large part).
    fn drop(&mut self) {
        let mut due = false;
        for t in &mut self.txns {
            t.note_heap_bytes();
            due |= t.heap.due;
            t.heap.deferred = true;
        }
        self.txns.clear();
        if due {
            heap::give_back();
        }
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
            token: next_txn_token(),
        })
    }

    /// Takes a savepoint of every CF of the transaction (see
    /// [`WriteTransaction::savepoint`]).
    pub fn savepoint(&self) -> Result<Savepoint> {
        let mut marks = Vec::with_capacity(self.txns.len());
        for t in &self.txns {
            t.claim();
            marks.push((t.cf.id, t.core.state()?.savepoint()?));
        }
        Ok(Savepoint {
            txn: self.token,
            marks,
        })
    }

    /// Undoes every change made in every CF after `savepoint` (see
    /// [`WriteTransaction::restore_savepoint`]).
    pub fn restore_savepoint(&mut self, savepoint: &Savepoint) -> Result<()> {
        if savepoint.txn != self.token || savepoint.marks.len() != self.txns.len() {
            return Err(foreign_savepoint());
        }
        for (t, &(cf, seq)) in self.txns.iter_mut().zip(&savepoint.marks) {
            debug_assert_eq!(t.cf.id, cf, "marks are in the transaction's CF order");
            t.claim();
            t.core.restore_savepoint(seq)?;
        }
        Ok(())
    }

    /// The part of this transaction for `cf`, which must be a handle of
    /// this transaction's database (a same-numbered CF of another database
    /// is `ForeignHandle`) and one of its CFs.
    fn txn_for(&self, cf: &ColumnFamily) -> Result<&WriteTransaction> {
        self.claim_all();
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
        cf: &ColumnFamily,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Table<'txn, K, V>> {
        self.txn_for(cf)?.open_table(def)
    }

    /// Opens (creating if needed) a multimap table of `cf`, which must be
    /// one of the transaction's column families.
    pub fn open_multimap_table<'txn, K: Key + 'static, V: Key + 'static>(
        &'txn self,
        cf: &ColumnFamily,
        def: MultimapTableDefinition<'_, K, V>,
    ) -> Result<MultimapTable<'txn, K, V>> {
        self.txn_for(cf)?.open_multimap_table(def)
    }

    /// [`WriteTransaction::open_untyped_table`] for a table of `cf`, which
    /// must be one of the transaction's column families.
    pub fn open_untyped_table<'txn>(
        &'txn self,
        cf: &ColumnFamily,
        name: &str,
        key_type: &str,
        value_type: &str,
    ) -> Result<UntypedTable<'txn>> {
        self.txn_for(cf)?
            .open_untyped_table(name, key_type, value_type)
    }

    /// Deletes a table of `cf`.
    pub fn delete_table(&self, cf: &ColumnFamily, name: &str) -> Result<bool> {
        self.txn_for(cf)?.delete_table(name)
    }

    /// Sets how durable `commit` makes the transaction.
    pub fn set_durability(&mut self, d: Durability) {
        self.claim_all();
        self.durability = d;
    }

    /// Makes this thread the owner of every CF's writer lock (the thread
    /// that last called the transaction): a `begin_write` on one of its
    /// CFs from here is then `WouldDeadlock`, not a wait on itself. A call
    /// through one CF's part claimed only that part before, so a
    /// transaction moved to another thread hung there on the others.
    fn claim_all(&self) {
        for t in &self.txns {
            t.claim();
        }
    }

    /// Commits every CF's changes atomically.
    pub fn commit(mut self) -> Result<()> {
        let shared = self.txns[0].shared.clone();
        let mut parts = Vec::with_capacity(self.txns.len());
        for t in &mut self.txns {
            t.claim();
            t.finished = true;
            t.note_heap_bytes();
            let lock = t.take_lock()?;
            parts.push((t.cf.clone(), lock));
        }
        let mut guards = Vec::with_capacity(self.txns.len());
        for t in &self.txns {
            guards.push(t.core.state()?);
        }
        // As in a one-CF commit: every table handle must be dropped (one
        // forgotten with `mem::forget` is refused, naming the table).
        let usable: Result<()> = (guards.iter().zip(&self.txns))
            .try_for_each(|(g, t)| g.check_not_failed().and_then(|()| t.core.check_none_open()));
        if let Err(e) = usable {
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

#[cfg(test)]
mod give_back_tests {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::Arc;

    use crate::db::Database;
    use crate::error::Result;
    use crate::storage::heap::ON_GIVE_BACK;
    use crate::storage::mem::MemVfs;
    use crate::table::types::TableDefinition;

    /// A multi-CF transaction whose first part held 32 MiB gives the heap
    /// back once, after every part released its writer lock (a part gave
    /// it back as it dropped, the later parts' locks still held), whether
    /// it commits or is dropped.
    #[test]
    fn a_multi_cf_transaction_gives_back_once_with_no_writer_lock_held() -> Result<()> {
        const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
        let db = Database::builder().create_with_vfs(Arc::new(MemVfs::new()), "g.sheaf")?;
        let (a, b) = (db.cf_or_create("a")?, db.cf_or_create("b")?);
        let value = vec![7u8; 1 << 20];
        for commit in [false, true] {
            let calls = Rc::new(Cell::new(0));
            let locked = Rc::new(Cell::new(0));
            let cfs = [a.cf.clone(), b.cf.clone()];
            let (c, l) = (calls.clone(), locked.clone());
            ON_GIVE_BACK.with(|f| {
                *f.borrow_mut() = Some(Box::new(move || {
                    c.set(c.get() + 1);
                    l.set(l.get() + cfs.iter().filter(|cf| cf.writer.is_locked()).count());
                }))
            });
            let tx = db.begin_write_cfs(&[&a, &b])?;
            {
                let mut t = tx.open_table(&a, T)?;
                for i in 0..40u64 {
                    t.insert(i, &value[..])?;
                }
                tx.open_table(&b, T)?.insert(1, &value[..1])?;
            }
            if commit {
                tx.commit()?;
            } else {
                drop(tx);
            }
            ON_GIVE_BACK.with(|f| f.borrow_mut().take());
            assert_eq!(calls.get(), 1, "commit {commit}: give-backs");
            assert_eq!(locked.get(), 0, "commit {commit}: writer locks held then");
        }
        Ok(())
    }
}
