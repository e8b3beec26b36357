//! The mutable state of a write transaction and the catalog rules.
//!
//! Owns: `WriteState` (private pages, table catalog, cached table
//! metadata, the WAL record being built), `WriteCore` (that state behind
//! its lock, plus the set of open table handles, as table handles see it)
//! and the one implementation of each catalog rule (create, drop, rename),
//! used by the API and by WAL replay alike.
//!
//! Invariants: a failed operation that may have changed pages marks the
//! state failed, after which only abort is possible; user code run under
//! the state lock (an `extract_if`/`retain` closure) cannot take it again
//! (`WouldDeadlock` instead of a self-deadlock).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::btree::{self, TreeRoot};
use crate::buffer::ends::EndHints;
use crate::buffer::merge;
use crate::buffer::write_set::WriteSet;
use crate::buffer::Held;
use crate::error::{Error, Result};
use crate::format::records::TableMeta;
use crate::lock_rank::{ranks, suspend, RankedGuard, RankedMutex, Suspended};
use crate::pager::space::PageSpace;
use crate::types::{CfId, IdMap, TableId};
use crate::wal::record::{CommitEncoder, Op};

use super::key_filter::{self, FilterTargets};
use super::pages::TxnPages;
use super::version::{thread_token, CachedTable, CfShared, CfVersion};
use super::MAX_TABLE_NAME;

/// Pending write bytes (keys and values) of one table past which they are
/// applied to its tree before commit, bounding a large transaction's
/// memory to about its pages plus this much (`Builder::txn_spill_bytes`
/// sets it per database; this is the default). Below it a transaction's
/// writes can commit into the write buffer, whose folds go in rounds and
/// need free space for one round only; past it they are applied to the
/// tree, copying every leaf they touch at once.
pub(crate) const SPILL_BYTES: u64 = 64 << 20;

/// Keys a fold round applies to one table's tree at a time (it checks its
/// page budget between batches).
pub(crate) const ROUND_BATCH: usize = 512;

/// What a fold round did ([`WriteState::fold_round`]).
#[derive(Debug)]
pub(crate) struct RoundOutcome {
    /// Per table, the change in the tree's entry count.
    pub changes: std::collections::BTreeMap<TableId, i64>,
    /// Where the next round starts; `None` if this one reached the end.
    pub next: Option<(TableId, Arc<[u8]>)>,
}

/// `Corrupted` unless a tree's entry count is `expected`: reads and writes
/// of the tree disagreed on which keys exist (a tree the file damaged).
fn check_count(what: &str, root: &TreeRoot, expected: i128) -> Result<()> {
    if i128::from(root.len) != expected {
        return Err(Error::corrupted(
            format!("{what}: {} entries, expected {expected}", root.len),
            "table tree",
        ));
    }
    Ok(())
}

/// `InvalidArgument` unless `name` is a valid table name.
pub(crate) fn check_table_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_TABLE_NAME {
        return Err(Error::InvalidArgument(format!(
            "table names are 1 to {MAX_TABLE_NAME} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}

/// `TableTypeMismatch` unless table `name` (described by `meta`) was
/// created with key type `k` and value type `v`.
pub(crate) fn check_types(name: &str, meta: &TableMeta, k: &str, v: &str) -> Result<()> {
    if meta.key_type != k || meta.value_type != v {
        return Err(Error::TableTypeMismatch {
            table: name.to_string(),
            stored: format!("<{}, {}>", meta.key_type, meta.value_type),
            requested: format!("<{k}, {v}>"),
        });
    }
    Ok(())
}

/// The catalog entry of table `name`, if it exists.
pub(crate) fn lookup_table<S: btree::store::PageRead>(
    store: &S,
    catalog: &TreeRoot,
    name: &str,
) -> Result<Option<TableMeta>> {
    match btree::get(store, catalog, name.as_bytes())? {
        Some(bytes) => Ok(Some(TableMeta::decode(bytes.as_slice())?)),
        None => Ok(None),
    }
}

/// Tables in a catalog that a write transaction's typed open decodes
/// whole, to share with later opens (`WriteCore::open_table_typed`): a
/// bounded, one-time cost per catalog version. A larger catalog is used
/// only once a reader decoded it; until then a writer looks its table up
/// in the catalog tree.
const WRITER_DECODES_CATALOG_UPTO: u64 = 16;

/// Every entry of the catalog, in name order.
pub(crate) fn read_catalog<S: btree::store::PageRead>(
    store: &S,
    catalog: &TreeRoot,
) -> Result<Vec<(String, TableMeta)>> {
    let mut cursor = btree::Cursor::all(catalog);
    let mut all = Vec::new();
    while let Some((k, v)) = cursor.next(store)? {
        let name = String::from_utf8(k.to_vec())
            .map_err(|_| Error::corrupted("table name not UTF-8", "table catalog"))?;
        all.push((name, TableMeta::decode(v.as_slice())?));
    }
    Ok(all)
}

/// Table `name` as `st`'s base version decoded its catalog, if `st` reads
/// that catalog untouched and has not loaded the table yet (`None`: look
/// it up). A writer decodes a catalog of at most
/// [`WRITER_DECODES_CATALOG_UPTO`] tables itself; one that does not decode
/// whole (a damaged entry of another table, a failed read) is left to the
/// lookup, which reads only the entry asked for.
fn base_catalog_entry<'s>(st: &'s WriteState, name: &str) -> Option<&'s CachedTable> {
    if st.tables.contains_key(name) || st.catalog_changed || st.catalog != st.base.catalog {
        return None;
    }
    let tables = &st.base.tables;
    let catalog = match tables.loaded() {
        Some(catalog) => catalog,
        None if st.catalog.len <= WRITER_DECODES_CATALOG_UPTO => tables
            .get_or_load(|| read_catalog(&st.pages, &st.catalog))
            .ok()?,
        None => return None,
    };
    catalog.get(name)
}

/// Names of the catalog's tables, sorted.
pub(crate) fn list_catalog<S: btree::store::PageRead>(
    store: &S,
    catalog: &TreeRoot,
) -> Result<Vec<String>> {
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

/// Per-table state inside a write transaction.
#[derive(Debug)]
pub(crate) struct TableState {
    pub meta: TableMeta,
    pub dirty: bool,
    /// Set once the table's pending writes outgrew the spill size and were
    /// applied: for the rest of the transaction its writes go straight to
    /// its tree (one descent per write instead of a lookup now and an
    /// apply at commit), and its write set stays empty.
    pub direct: bool,
}

impl TableState {
    /// The state of a table as loaded from the catalog (or just created).
    pub fn loaded(meta: TableMeta) -> TableState {
        TableState {
            meta,
            dirty: false,
            direct: false,
        }
    }

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

/// The reserved values of a write transaction not yet stored
/// ([`WriteState::reserving`]), by number: a savepoint restore forgets
/// exactly those handed out after the savepoint, whatever happened to the
/// ones before it.
#[derive(Debug, Default)]
pub(crate) struct Reservations {
    /// The number the next reservation gets.
    next: u64,
    /// Numbers handed out and neither stored nor dropped.
    live: std::collections::BTreeSet<u64>,
}

impl Reservations {
    /// Hands out a new reservation number.
    pub fn take(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        let fresh = self.live.insert(id);
        debug_assert!(fresh, "reservation numbers never repeat");
        id
    }

    /// Reservation `id` was stored or dropped.
    pub fn release(&mut self, id: u64) {
        let was_live = self.live.remove(&id);
        debug_assert!(was_live, "reservation {id} released twice");
    }

    /// Reservations neither stored nor dropped.
    pub fn outstanding(&self) -> usize {
        self.live.len()
    }

    /// Where the numbering stands (a savepoint's mark).
    pub fn mark(&self) -> u64 {
        self.next
    }

    /// Back to a savepoint taken at `mark`: reservations handed out since
    /// are gone with everything else after it (a restore needs `&mut` of
    /// the transaction, so none of them is alive: they were leaked). Those
    /// from before it stay outstanding only if they still are: one stored
    /// after the savepoint is not handed out again.
    pub fn restore(&mut self, mark: u64) {
        self.live.retain(|&id| id < mark);
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
    /// Writes not yet applied to the tables' trees (applied in key order
    /// at commit, or earlier for a table whose writes grow past
    /// `spill_bytes`).
    pub writes: WriteSet,
    /// Set once the base's buffered commits were applied to this
    /// transaction's trees (before any tree write): from then on the trees
    /// hold them and reads skip the buffer.
    pub folded: bool,
    /// For a fold made aside (`DbShared::fold_cf`): what its version keeps
    /// buffered; `None` for every other commit (its version has an empty
    /// buffer).
    pub carry: Option<super::version::FoldCarry>,
    pub catalog_changed: bool,
    /// Reserved values handed out (`Table::insert_reserve`) and neither
    /// stored nor dropped: one forgotten (`mem::forget`) would otherwise
    /// vanish from a commit that reports success (found by an adversarial
    /// review). The commit refuses while any is.
    pub reserving: Reservations,
    /// The logical operations so far, for the WAL record; `None` once the
    /// transaction outgrew `log_max_bytes` and will commit by a direct
    /// checkpoint instead.
    pub log: Option<CommitEncoder>,
    /// Per table written while `log` is kept, the change in its entry
    /// count the logged writes made: appended to the record at commit as
    /// `Op::CountChange`, so replay need not look keys up in the trees.
    pub log_counts: IdMap<TableId, i64>,
    pub log_max_bytes: usize,
    /// Set when an operation failed after it may have changed pages: the
    /// WAL record and the pages may disagree, so only abort is allowed.
    pub failed: Option<String>,
    /// Savepoints taken and still valid, oldest first (`txn::savepoint`).
    pub(super) savepoints: Vec<super::savepoint::SavepointMark>,
    /// Number of the next savepoint.
    pub(super) next_savepoint: u64,
    /// Set by the first savepoint: the record is kept past
    /// `log_max_bytes` (a restore replays it).
    pub(super) keep_log: bool,
    /// A walk of this transaction took its buffer's sum of walked
    /// tombstones past the fold mark (design.md "Tombstone walks"): the
    /// fold is asked for when the transaction ends, not while it holds
    /// the writer lock the fold needs.
    pub fold_asked: bool,
    /// Pending write bytes of one table (with pages) past which they are
    /// applied to its tree ([`SPILL_BYTES`] unless the database says).
    pub spill_bytes: u64,
    /// The most bytes the write set and log record held at once, noted
    /// as each operation is logged ([`WriteState::heap_bytes`]).
    heap_high: u64,
    /// The CF's key filters as this transaction began (under the writer
    /// lock): every put is added to them, and a trusted one spares the
    /// tree descent of a key it lacks (F1, `txn::key_filter`). `None` for
    /// states that are not a user's write transaction (folds, replay,
    /// compaction), which neither add nor trust.
    pub key_filter: Option<KeyFilterUse>,
    /// Per table, keys `Table::delete` removed without looking them up
    /// (recorded as removals of missing keys) until
    /// [`WriteState::settle_deletes`] finds which existed.
    pub unsettled: IdMap<TableId, KeyList>,
    /// The ends of the tables' live keys in this transaction's view (E1,
    /// `buffer::ends`): the base's, kept true by every put
    /// ([`WriteState::log_write`]) and narrowed by walks that find an
    /// end. Shared with the base until changed.
    pub ends: Arc<EndHints>,
}

/// Keys in one allocation (a large removal lists hundreds of thousands).
#[derive(Debug, Default)]
pub(crate) struct KeyList {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl KeyList {
    fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    /// The keys in key order (duplicates kept: a key is listed once, as
    /// a second removal finds the first in the write set).
    fn sorted(&self) -> Vec<&[u8]> {
        let mut start = 0;
        let mut keys: Vec<&[u8]> = (self.ends.iter())
            .map(|&end| {
                let k = &self.bytes[start..end];
                start = end;
                k
            })
            .collect();
        keys.sort_unstable();
        keys
    }
}

/// A write transaction's use of its CF's key filters.
#[derive(Debug)]
pub(crate) struct KeyFilterUse {
    pub targets: Arc<FilterTargets>,
    pub cf: Arc<CfShared>,
    /// Tree descents the chain spared this transaction: added to the
    /// database's count once, when it ends (a shared counter touched per
    /// write would be one cache line for the writers of every CF).
    pub skipped: std::cell::Cell<u64>,
    /// Set once this transaction could not grow the chain (no room): it
    /// does not try again for every new key.
    pub grow_failed: bool,
}

impl KeyFilterUse {
    /// Adds a put of a new `key` of table `id`, growing the chain if that
    /// filled its last filter (once per transaction, if it cannot).
    fn add(&mut self, id: TableId, key: &[u8]) {
        if self.targets.add(id, key) && !self.grow_failed {
            self.grow();
        }
    }

    /// The chain's last filter filled: a larger one takes the new keys
    /// from now on (this transaction holds the writer lock, F1); a chain
    /// grown too long, or one the budget cannot extend, asks the builder
    /// thread for one filter in its place.
    fn grow(&mut self) {
        let longer = self.cf.key_filter.extend();
        let too_long = match longer {
            Some(t) => {
                self.targets = t;
                self.targets.chain.len() > key_filter::MAX_CHAIN
            }
            None => {
                self.grow_failed = true;
                true
            }
        };
        if too_long && self.cf.key_filter.want_build() {
            // (Every filter holds the database's budget and its signal.)
            if let Some(f) = self.targets.chain.first() {
                f.budget().wake();
            }
        }
    }
}

impl Drop for KeyFilterUse {
    fn drop(&mut self) {
        let skipped = self.skipped.get();
        if let Some(f) = self.targets.chain.first().filter(|_| skipped > 0) {
            f.budget().note_skips(skipped);
        }
    }
}

impl WriteState {
    /// A fresh state over `base` of `cf`; `log_max_bytes` is `None` for a
    /// state that logs nothing (WAL replay).
    pub fn new(
        space: Arc<PageSpace>,
        cf: &CfShared,
        base: Arc<CfVersion>,
        log_max_bytes: Option<usize>,
    ) -> WriteState {
        WriteState {
            cf: cf.id,
            pages: TxnPages::new(space, cf.id, cf.alloc.clone()),
            catalog: base.catalog,
            next_table: base.next_table,
            tables: HashMap::new(),
            writes: WriteSet::new(),
            folded: false,
            carry: None,
            catalog_changed: false,
            reserving: Reservations::default(),
            log: log_max_bytes.map(|_| CommitEncoder::new()),
            log_counts: IdMap::default(),
            log_max_bytes: log_max_bytes.unwrap_or(0),
            failed: None,
            savepoints: Vec::new(),
            next_savepoint: 0,
            keep_log: false,
            fold_asked: false,
            spill_bytes: SPILL_BYTES,
            heap_high: 0,
            key_filter: None,
            unsettled: IdMap::default(),
            // Replay (no log) puts entries without `log_write`: it starts
            // with no hint, so it has none to keep.
            ends: match log_max_bytes {
                Some(_) => base.ends.clone(),
                None => Arc::default(),
            },
            base,
        }
    }

    /// The loaded state of table `id` (tables are keyed by name; a
    /// transaction loads few, so this is a short scan).
    pub fn table_by_id(&self, id: TableId) -> Option<&TableState> {
        self.tables.values().find(|t| t.meta.id == id)
    }

    /// [`WriteState::table_by_id`], mutable.
    pub fn table_by_id_mut(&mut self, id: TableId) -> Option<&mut TableState> {
        self.tables.values_mut().find(|t| t.meta.id == id)
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
            .insert(name.to_string(), TableState::loaded(meta));
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
        self.writes.drop_table(meta.id);
        self.unsettled.remove(&meta.id);
        EndHints::forget_in(&mut self.ends, meta.id);
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
        self.tables.insert(to.to_string(), TableState::loaded(meta));
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

    /// Records `e` as the transaction's failure whatever it is (a change
    /// that could not be made after the call that asked for it returned);
    /// returns `e`.
    pub fn fail_with(&mut self, e: Error) -> Error {
        if self.failed.is_none() {
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
            // Before the record is dropped here, or the write set spilled
            // to the trees (`spill_if_large`): what they held is freed then.
            let held = self.writes.bytes().saturating_add(enc.len_bytes() as u64);
            self.heap_high = self.heap_high.max(held);
            if enc.len_bytes() > self.log_max_bytes && !self.keep_log {
                self.log = None;
            }
        }
    }

    /// The finished WAL record (`None` if the transaction outgrew it): the
    /// logged operations, then each written table's count change, by table
    /// id so the bytes do not depend on hash order.
    ///
    /// Removals of keys not looked up (`Table::delete`) are settled first:
    /// the record's counts are exact, as replay relies on them.
    pub fn finish_log(&mut self) -> Result<Option<Vec<u8>>> {
        if self.reserving.outstanding() > 0 {
            let e = Error::InvalidArgument(format!(
                "{} reserved value(s) never stored (a ReservedValue was forgotten): \
                 the transaction cannot commit without them",
                self.reserving.outstanding()
            ));
            return Err(self.fail(e));
        }
        if self.log.is_none() {
            return Ok(None);
        }
        self.settle_all_deletes()?;
        let Some(mut enc) = self.log.take() else {
            return Ok(None);
        };
        let mut counts: Vec<(TableId, i64)> = self.log_counts.drain().collect();
        counts.sort_unstable();
        for (table, delta) in counts {
            enc.push_for(self.cf, &Op::CountChange { table, delta });
        }
        Ok(Some(enc.finish()))
    }

    /// Removes `key` of table `id` without reading what it held
    /// (`Table::delete`). A key this transaction wrote is removed as
    /// `remove` would (its presence is known). Any other is logged and
    /// recorded as the removal of a missing key, and listed as unsettled:
    /// whether it existed below this transaction's writes is looked up
    /// later, for all such keys at once in key order
    /// ([`WriteState::settle_deletes`]: `len`, the commit's record, a
    /// spill), so a large removal costs no random descent per key. A
    /// table in direct mode removes from its tree now (the descent is
    /// paid there anyway).
    pub fn delete_blind(&mut self, id: TableId, key: &[u8]) -> Result<()> {
        // A key too long to be stored is not there: nothing to remove or
        // log (as `remove` finds nothing). Review finding: logged, it made
        // WAL replay, which checks every key's length, call the record
        // corrupt and refuse the database.
        let ps = btree::store::PageRead::page_size(&self.pages);
        if btree::check_limits(ps, key, &[]).is_err() {
            return Ok(());
        }
        let table = self.tables.values_mut().find(|t| t.meta.id == id);
        if let Some(t) = table.filter(|t| t.direct) {
            let mut root = t.root();
            let removed = btree::remove(&mut self.pages, &mut root, key);
            t.set_root(root);
            if removed.map_err(|e| self.fail(e))?.is_some() {
                self.log_write(id, key, None, true);
            }
            return Ok(());
        }
        match self.writes.table(id).and_then(|w| w.get(key)) {
            // Already removed by this transaction: nothing to do.
            Some(None) => return Ok(()),
            Some(Some(_)) => {
                self.log_write(id, key, None, true);
                self.writes.record(id, key, None, true);
            }
            None => {
                self.log(&Op::Delete { table: id, key });
                self.writes.record(id, key, None, false);
                self.unsettled.entry(id).or_default().push(key);
            }
        }
        self.spill_if_large(id)
    }

    /// Looks up, below this transaction's writes (its base's buffer, then
    /// the table's tree), every key [`WriteState::delete_blind`] recorded
    /// as missing, in key order so consecutive keys share their path
    /// through the tree; each that existed lowers the table's count change
    /// (and the record's) by one. Must run before anything reads the
    /// count or changes what lies below the writes (a spill).
    pub fn settle_deletes(&mut self, id: TableId) -> Result<()> {
        let Some(keys) = self.unsettled.remove(&id) else {
            return Ok(());
        };
        let root = (self.table_by_id(id))
            .ok_or_else(|| {
                Error::corrupted(
                    format!("removals from table {id}, which has no state"),
                    "table catalog",
                )
            })?
            .root();
        let mut existed = 0i64;
        for key in keys.sorted() {
            existed += i64::from(self.lookup_below(id, &root, key)?.is_some());
        }
        self.writes.adjust_delta(id, -existed);
        if self.log.is_some() {
            *self.log_counts.entry(id).or_default() -= existed;
        }
        Ok(())
    }

    /// [`WriteState::settle_deletes`] for every table.
    pub fn settle_all_deletes(&mut self) -> Result<()> {
        if self.unsettled.is_empty() {
            // Every commit comes here: no allocation when nothing waits.
            return Ok(());
        }
        let ids: Vec<TableId> = self.unsettled.keys().copied().collect();
        for id in ids {
            self.settle_deletes(id)?;
        }
        Ok(())
    }

    /// Logs that `key` of table `id` becomes `value` (`None`: removed;
    /// `existed`: it had a value just before) and adds the write's count
    /// change to the table's `log_counts`. Every logged put and removal
    /// goes through here, so the record's `CountChange`s cover them all.
    pub fn log_write(&mut self, id: TableId, key: &[u8], value: Option<&[u8]>, existed: bool) {
        if value.is_some() {
            // E1: the key is live from now on.
            EndHints::put_into(&mut self.ends, id, key);
        }
        // A key that existed is in the filters already (F1).
        if let (Some(f), Some(_), false) = (&mut self.key_filter, value, existed) {
            f.add(id, key);
        }
        match value {
            Some(value) => self.log(&Op::Put {
                table: id,
                key,
                value,
            }),
            None => self.log(&Op::Delete { table: id, key }),
        }
        if self.log.is_some() {
            let change = i64::from(value.is_some()) - i64::from(existed);
            *self.log_counts.entry(id).or_default() += change;
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

    /// The buffer this transaction reads below its own writes, and the
    /// version it reads it at (`None` once folded into the trees).
    pub fn buffer_at(&self) -> Option<(&crate::buffer::mem::MemBuffer, crate::types::Version)> {
        (!self.folded).then(|| (&*self.base.buffer, self.base.version))
    }

    /// Entry count of table `meta` as this transaction sees it, before its
    /// own pending writes: the tree's count plus the buffered commits'
    /// change (unless they were folded into the tree).
    pub fn base_len(&self, meta: &TableMeta) -> Result<u64> {
        let delta = if self.folded {
            0
        } else {
            self.base.delta(meta.id)
        };
        meta.len.checked_add_signed(delta).ok_or_else(|| {
            Error::corrupted(
                format!("table {}: entry count below zero", meta.id),
                "table tree",
            )
        })
    }

    /// Applies the base's buffered commits to the trees (each table's
    /// newest entry per key at the base version, in key order; entries of
    /// tables deleted since are dropped), so this transaction can write
    /// the trees. Idempotent. On an error the caller fails the transaction.
    pub fn fold_base(&mut self) -> Result<()> {
        if self.folded {
            return Ok(());
        }
        self.folded = true;
        let base = self.base.clone();
        if base.buffer.entries() == 0 {
            return Ok(());
        }
        let names = self.names_by_id()?;
        let mut current: Option<TableId> = None;
        let mut batch: Vec<btree::BatchWrite> = Vec::new();
        for (id, key, version, slot) in base.buffer.newest_from(base.version, TableId(0), &[]) {
            // Rounds of a fold under way put this one in the trees already
            // (the deltas count relative to the trees as they are).
            if (base.fold.as_ref()).is_some_and(|f| f.folded(id, &key, version)) {
                continue;
            }
            if current != Some(id) {
                self.fold_table(current.take(), &names, &mut batch, &base)?;
                current = Some(id);
            }
            batch.push((key, slot));
        }
        self.fold_table(current, &names, &mut batch, &base)
    }

    /// One round of a fold in rounds (design.md "Fold rounds"): applies
    /// the base's buffered entries at versions `≤ upto`, from `from` on in
    /// `(table, key)` order, to the trees, in batches of at most
    /// [`ROUND_BATCH`] keys, until this store holds `budget_pages` private
    /// pages or the entries run out. Returns each table's count change and
    /// where the next round starts (`None`: nothing left). The state only
    /// writes the trees (it is marked folded: nothing reads through it).
    pub fn fold_round(
        &mut self,
        upto: crate::types::Version,
        from: &(TableId, Arc<[u8]>),
        budget_pages: u64,
    ) -> Result<RoundOutcome> {
        self.folded = true;
        let base = self.base.clone();
        let names = self.names_by_id()?;
        let mut changes = std::collections::BTreeMap::new();
        let mut it = base.buffer.newest_from(upto, from.0, &from.1).peekable();
        let mut batch: Vec<btree::BatchWrite> = Vec::new();
        let mut table: Option<TableId> = None;
        // Batches of ROUND_BATCH keys (the margin of `round_budget` is
        // sized for them); only a budget under 32 pages (tests) makes them
        // smaller, so rounds of a page or two still stop often.
        let batch_keys = ROUND_BATCH
            .min(usize::try_from(budget_pages.saturating_mul(16)).unwrap_or(ROUND_BATCH));
        loop {
            let next = it.peek().map(|(id, key, _, _)| (*id, key.clone()));
            let full = batch.len() >= batch_keys;
            if let Some(id) = table.filter(|&id| full || next.as_ref().is_none_or(|n| n.0 != id)) {
                self.apply_round_batch(id, &names, &mut batch, &mut changes)?;
                if next.is_some() && self.pages.private_pages() >= budget_pages {
                    return Ok(RoundOutcome { changes, next });
                }
            }
            let Some((id, key, _, slot)) = it.next() else {
                debug_assert!(batch.is_empty(), "a round left entries unapplied");
                return Ok(RoundOutcome {
                    changes,
                    next: None,
                });
            };
            table = Some(id);
            batch.push((key, slot));
        }
    }

    /// Applies one batch of a fold round to table `id`'s tree and adds its
    /// count change to `changes`. Entries of a table gone since are
    /// dropped (as a full fold drops them).
    fn apply_round_batch(
        &mut self,
        id: TableId,
        names: &HashMap<TableId, String>,
        batch: &mut Vec<btree::BatchWrite>,
        changes: &mut std::collections::BTreeMap<TableId, i64>,
    ) -> Result<()> {
        let writes = std::mem::take(batch);
        let Some(name) = names.get(&id) else {
            return Ok(());
        };
        self.load_table(name)?;
        let t = self.tables.get_mut(name).expect("loaded above");
        let mut root = t.root();
        let before = i128::from(root.len);
        let applied = btree::apply_sorted(&mut self.pages, &mut root, &writes);
        t.set_root(root);
        applied?;
        let change = i64::try_from(i128::from(root.len) - before).map_err(|_| {
            Error::corrupted(
                format!("table {name:?}: a fold round's count change"),
                "table tree",
            )
        })?;
        *changes.entry(id).or_default() += change;
        Ok(())
    }

    /// Applies one table's buffered writes (`batch`, in key order) to its
    /// tree and checks its count against the buffered delta. A table
    /// deleted since (or renamed away and deleted) is skipped.
    fn fold_table(
        &mut self,
        id: Option<TableId>,
        names: &HashMap<TableId, String>,
        batch: &mut Vec<btree::BatchWrite>,
        base: &CfVersion,
    ) -> Result<()> {
        let writes = std::mem::take(batch);
        let Some(name) = id.and_then(|id| names.get(&id)) else {
            return Ok(());
        };
        self.load_table(name)?;
        let t = self.tables.get_mut(name).expect("loaded above");
        let mut root = t.root();
        // The count comes from the file: wide arithmetic, no overflow.
        let expected = i128::from(t.meta.len) + i128::from(base.delta(t.meta.id));
        let applied = btree::apply_sorted(&mut self.pages, &mut root, &writes);
        t.set_root(root);
        applied?;
        check_count(&format!("table {name:?} after folding"), &root, expected)
    }

    /// Every table of this transaction's catalog by id.
    pub(super) fn names_by_id(&self) -> Result<HashMap<TableId, String>> {
        let mut names = HashMap::new();
        for name in list_catalog(&self.pages, &self.catalog)? {
            let id = match self.tables.get(&name) {
                Some(t) => t.meta.id,
                None => match lookup_table(&self.pages, &self.catalog, &name)? {
                    Some(meta) => meta.id,
                    None => continue,
                },
            };
            if let Some(other) = names.insert(id, name) {
                // Buffered writes of the two would go to one of them.
                return Err(Error::corrupted(
                    format!("tables {other:?} and another share id {id}"),
                    "table catalog",
                ));
            }
        }
        Ok(names)
    }

    /// Compaction: moves every page of every table tree and of the
    /// catalog at or past page `limit` below it (the allocator must only
    /// hand out pages below it). The base's buffered commits are folded
    /// first. Returns the pages moved.
    pub fn relocate_trees(&mut self, limit: crate::types::PageId) -> Result<u64> {
        self.fold_base()?;
        let mut moved = 0;
        for name in list_catalog(&self.pages, &self.catalog)? {
            self.load_table(&name)?;
            let t = self.tables.get_mut(&name).expect("loaded above");
            let mut root = t.root();
            let r = btree::relocate(&mut self.pages, &mut root, limit);
            t.set_root(root);
            moved += r?;
        }
        self.flush_tables()?;
        let catalog = btree::relocate(&mut self.pages, &mut self.catalog, limit)?;
        if catalog > 0 {
            self.catalog_changed = true;
        }
        debug_assert!(
            self.catalog.root.is_none_or(|r| r < limit),
            "the catalog stayed past the limit"
        );
        Ok(moved + catalog)
    }

    /// Full compaction: rebuilds every table tree with its pages packed
    /// ([`btree::repack`]: entries streamed in key order into full new
    /// leaves), freeing the old tree; the allocator's limit keeps the new
    /// pages below page `limit`. Then the catalog moves below it too.
    /// Returns the pages the old trees held.
    pub fn repack_trees(&mut self, limit: crate::types::PageId) -> Result<u64> {
        self.fold_base()?;
        let mut old_pages = 0;
        for name in list_catalog(&self.pages, &self.catalog)? {
            self.load_table(&name)?;
            let old = self.tables[&name].root();
            let (new, freed) = btree::repack(&mut self.pages, &old)?;
            check_count(
                &format!("table {name:?} repacked"),
                &new,
                i128::from(old.len),
            )?;
            old_pages += freed;
            self.tables
                .get_mut(&name)
                .expect("loaded above")
                .set_root(new);
            debug_assert!(
                new.root.is_none_or(|r| r < limit),
                "a repacked root past the limit"
            );
        }
        self.flush_tables()?;
        let catalog = btree::relocate(&mut self.pages, &mut self.catalog, limit)?;
        if catalog > 0 {
            self.catalog_changed = true;
        }
        Ok(old_pages + catalog)
    }

    /// Loads table `name`'s state from the catalog if not loaded yet.
    pub(super) fn load_table(&mut self, name: &str) -> Result<()> {
        if !self.tables.contains_key(name) {
            let meta = lookup_table(&self.pages, &self.catalog, name)?
                .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
            self.tables
                .insert(name.to_string(), TableState::loaded(meta));
        }
        Ok(())
    }

    /// The bytes inserting this transaction's writes into a buffer
    /// charges (what a buffered commit reserves in the budget).
    pub fn buffer_charge(&self, index: super::KeyIndex) -> u64 {
        crate::buffer::mem::MemBuffer::charge_of(&self.writes, index)
    }

    /// True if this transaction writes each table it writes more entries
    /// than the table held before it (new or small tables: an import),
    /// so its trees' new pages will be about the size of its record.
    pub fn fills_small_tables(&self) -> bool {
        let ids = self.writes.tables();
        !ids.is_empty()
            && ids.iter().all(|&id| {
                let writes = self.writes.table(id).map_or(0, |w| w.len() as i128);
                self.table_by_id(id).is_some_and(|t| {
                    i128::from(t.meta.len) + i128::from(self.base.delta(id)) < writes
                })
            })
    }

    /// Heap bytes the transaction's writes held at most: the write set and
    /// the log record being built, now or before a spill to the trees or
    /// the record's drop freed them (its pages are not counted: they are
    /// freed to regions of their own, `storage::slab`).
    pub fn heap_bytes(&self) -> u64 {
        let log = self.log.as_ref().map_or(0, |l| l.len_bytes() as u64);
        self.writes.bytes().saturating_add(log).max(self.heap_high)
    }

    /// True if committing must write the trees: the buffer was folded, the
    /// catalog changed, or pages were written.
    pub fn needs_tree_commit(&self) -> bool {
        self.folded || self.catalog_changed || self.pages.is_dirty()
    }

    /// Applies every table's pending writes to its tree, tables by id and
    /// keys in order (so each leaf is copied once per batch).
    pub fn apply_writes(&mut self) -> Result<()> {
        for id in self.writes.tables() {
            self.apply_table_writes(id)?;
        }
        Ok(())
    }

    /// Applies the pending writes of table `id` to its tree, in key order.
    /// On an error the state is inconsistent: the caller fails the
    /// transaction.
    pub fn apply_table_writes(&mut self, id: TableId) -> Result<()> {
        // Before the tree (and the buffer below it) change: the unsettled
        // removals are looked up against what lay below them.
        self.settle_deletes(id)?;
        self.fold_base()?;
        let Some(writes) = self.writes.take_table(id) else {
            return Ok(());
        };
        // Writes are recorded only through a loaded table; a table renamed
        // or created over (WAL records replay refuses) would leave them
        // without one.
        // (Through the field, not `table_by_id_mut`: `self.pages` is
        // borrowed beside it.)
        let table = (self.tables.values_mut())
            .find(|t| t.meta.id == id)
            .ok_or_else(|| {
                Error::corrupted(
                    format!("writes to table {id}, which has no state"),
                    "table catalog",
                )
            })?;
        debug_assert!(!table.direct, "a direct table has pending writes");
        let mut root = table.root();
        // Blind writes (replay) have no count to check: applying them
        // counts what they added and removed.
        let expected = writes.delta().map(|d| i128::from(root.len) + i128::from(d));
        let sorted = writes.into_sorted();
        let applied = btree::apply_sorted(&mut self.pages, &mut root, &sorted);
        drop_in_address_order(sorted);
        table.set_root(root);
        applied?;
        match expected {
            Some(n) => check_count(&format!("table {id} after its writes"), &root, n),
            None => Ok(()),
        }
    }

    /// Table `name`'s id, tree root and entry count (pending writes
    /// included). `TableNotFound` unless it is loaded.
    /// Unsettled removals ([`WriteState::delete_blind`]) must be settled
    /// first.
    pub fn table_info(&self, name: &str) -> Result<(TableId, TreeRoot, u64)> {
        let t = self
            .tables
            .get(name)
            .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
        let id = t.meta.id;
        debug_assert!(
            !self.unsettled.contains_key(&id),
            "table {name:?}: a count asked for before its removals were settled"
        );
        let delta = self.writes.table(id).map_or(Some(0), |w| w.delta());
        let delta = delta.expect("a transaction's own writes are never blind");
        let len = self
            .base_len(&t.meta)?
            .checked_add_signed(delta)
            .ok_or_else(|| {
                Error::corrupted(
                    format!("table {name:?}: entry count below zero"),
                    "table tree",
                )
            })?;
        Ok((id, t.root(), len))
    }

    /// Table `name`'s id and tree root. `TableNotFound` unless it is loaded.
    pub fn table_ref(&self, name: &str) -> Result<(TableId, TreeRoot)> {
        let t = self
            .tables
            .get(name)
            .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
        Ok((t.meta.id, t.root()))
    }

    /// What the merged view (pending writes over the base's buffer over
    /// the tree `root`) of table `id` holds at `key`.
    pub fn lookup(&self, id: TableId, root: &TreeRoot, key: &[u8]) -> Result<Option<Held>> {
        let own = self.writes.table(id).and_then(|w| w.get(key));
        merge::get(&mut std::iter::once(own), || {
            self.lookup_below(id, root, key)
        })
    }

    /// What lies below this transaction's writes at `key` of table `id`:
    /// the base's buffer (at the base version) over the tree `root`.
    fn lookup_below(&self, id: TableId, root: &TreeRoot, key: &[u8]) -> Result<Option<Held>> {
        let buffered = self.buffer_at().and_then(|(buf, at)| buf.get(id, key, at));
        merge::get(&mut std::iter::once(buffered), || {
            // An empty tree answers at once; asking the filter would cost a
            // probe of its bits per write of a bulk load into a new table.
            if root.root.is_none() || self.tree_lacks(id, key) {
                return Ok(None);
            }
            Ok(btree::get(&self.pages, root, key)?.map(Held::Page))
        })
    }

    /// True if the trusted key filter says no tree of this transaction
    /// holds `key` of table `id` (F1: the base is at or past the version
    /// the filter was built from, and this transaction's own puts went
    /// into it).
    fn tree_lacks(&self, id: TableId, key: &[u8]) -> bool {
        let Some(f) = &self.key_filter else {
            return false;
        };
        let lacks = f.targets.lacks(self.base.version, id, key);
        if lacks {
            f.skipped.set(f.skipped.get() + 1);
        }
        lacks
    }

    /// Logs that `key` of table `id` becomes `value` (`None`: removed) and
    /// records it in the write set (the old value was `old`), or, for a
    /// table in direct mode, applies it to the tree. A table with pages
    /// whose pending writes outgrow `spill_bytes` has them applied to its
    /// tree now and switches to direct mode (an empty table keeps them
    /// all, so a bulk load fills its pages). A failure applying fails the
    /// transaction.
    pub fn write(
        &mut self,
        id: TableId,
        key: &[u8],
        value: Option<&[u8]>,
        old: &Option<Held>,
    ) -> Result<()> {
        self.log_write(id, key, value, old.is_some());
        let table = self.tables.values_mut().find(|t| t.meta.id == id);
        if let Some(t) = table.filter(|t| t.direct) {
            // Direct mode: the write goes to the tree now.
            let mut root = t.root();
            let r = match value {
                Some(v) => btree::insert(&mut self.pages, &mut root, key, v).map(drop),
                None => btree::remove(&mut self.pages, &mut root, key).map(drop),
            };
            t.set_root(root);
            return r.map_err(|e| self.fail(e));
        }
        self.writes
            .record(id, key, value.map(Arc::from), old.is_some());
        self.spill_if_large(id)
    }

    /// Applies table `id`'s pending writes to its tree and switches it to
    /// direct mode once they outgrow `spill_bytes`. A table whose tree is
    /// empty keeps every write pending: applied once, in key order, at
    /// commit, they fill its pages (a bulk load).
    fn spill_if_large(&mut self, id: TableId) -> Result<()> {
        let has_pages = self.table_by_id(id).is_some_and(|t| t.meta.root.is_some());
        if has_pages
            && self
                .writes
                .table(id)
                .is_some_and(|w| w.bytes() > self.spill_bytes)
        {
            self.apply_table_writes(id).map_err(|e| self.fail(e))?;
            if let Some(t) = self.table_by_id_mut(id) {
                t.direct = true;
            }
        }
        Ok(())
    }

    /// Applies `batch` (keys strictly increasing) to table `name`'s tree
    /// at once, without logging it: the transaction then commits by a
    /// direct checkpoint, as one that outgrew its WAL record does, and no
    /// record carries these entries. Only for a file that is not a
    /// database until it is complete (`Database::backup_to`'s copy, renamed
    /// into place once closed): entries go from the source's pages into
    /// packed pages with no write set in between. A failure part-way fails
    /// the transaction.
    pub fn append_sorted_unlogged<W: btree::SortedWrite>(
        &mut self,
        name: &str,
        batch: &[W],
    ) -> Result<()> {
        self.check_not_failed()?;
        if !self.savepoints.is_empty() {
            // A savepoint's restore replays the record, which these
            // entries would not be in.
            return Err(Error::InvalidArgument(
                "an unlogged write under a savepoint".into(),
            ));
        }
        let id = (self.tables.get(name))
            .ok_or_else(|| Error::TableNotFound(name.to_string()))?
            .meta
            .id;
        self.apply_table_writes(id).map_err(|e| self.fail(e))?;
        self.log = None;
        // Unlogged puts bypass `log_write`: their keys go into the key
        // filters here (F1), all of them (whether they existed is not
        // known; a false positive costs only a descent).
        if let Some(f) = &mut self.key_filter {
            for w in batch.iter().filter(|w| w.value().is_some()) {
                f.add(id, w.key());
            }
        }
        // ... and past any end hint (E1): the table's hints go.
        EndHints::forget_in(&mut self.ends, id);
        let table = self.tables.get_mut(name).expect("looked up above");
        let mut root = table.root();
        let applied = btree::apply_sorted(&mut self.pages, &mut root, batch);
        table.set_root(root);
        // Whatever the error (even a key or value over its limit, found
        // at the leaf it goes to): earlier leaves of the batch are
        // written already.
        applied.map_err(|e| self.fail_with(e))
    }

    /// Deletes table `name` (freeing its pages) and logs it. `Ok(false)`
    /// if it does not exist; a failure part-way fails the transaction.
    pub fn drop_table_logged(&mut self, name: &str) -> Result<bool> {
        let Some(meta) = self.table_meta(name)? else {
            return Ok(false);
        };
        self.catalog_drop(name, &meta).map_err(|e| self.fail(e))?;
        self.log(&Op::DropTable { table: meta.id });
        // Its writes died with it: no count change to log.
        self.log_counts.remove(&meta.id);
        Ok(true)
    }

    /// Renames table `from` to `to` and logs it. `TableNotFound` if `from`
    /// is missing, `TableExists` if `to` exists; a failure part-way fails
    /// the transaction.
    pub fn rename_table_logged(&mut self, from: &str, to: &str) -> Result<()> {
        let meta = self
            .table_meta(from)?
            .ok_or_else(|| Error::TableNotFound(from.to_string()))?;
        if from == to {
            return Ok(()); // as redb: a table renamed to its own name stays
        }
        if self.table_meta(to)?.is_some() {
            return Err(Error::TableExists(to.to_string()));
        }
        let id = meta.id;
        self.catalog_rename(from, to, meta)
            .map_err(|e| self.fail(e))?;
        self.log(&Op::RenameTable {
            table: id,
            new_name: to,
        });
        Ok(())
    }

    fn table_meta(&mut self, name: &str) -> Result<Option<TableMeta>> {
        if let Some(t) = self.tables.get(name) {
            return Ok(Some(t.meta.clone()));
        }
        lookup_table(&self.pages, &self.catalog, name)
    }
}

/// Clears [`WriteCore::callback_scope`] when dropped.
/// The lock-rank record is set aside meanwhile (user code orders its own
/// locks).
/// If the user code panics, the transaction is marked failed (see
/// [`WriteCore::state`]): a predicate that panicked part-way through a
/// `retain`/`extract_if` must not leave a half-applied change committable.
pub(crate) struct CallbackScope<'a> {
    thread: &'a std::sync::atomic::AtomicU64,
    panicked: &'a std::sync::atomic::AtomicBool,
    _ranks: Suspended,
}

impl Drop for CallbackScope<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.panicked
                .store(true, std::sync::atomic::Ordering::Release);
        }
        self.thread.store(0, std::sync::atomic::Ordering::Release);
    }
}

/// A write transaction's state as table handles see it: the state behind
/// its lock, the names of the tables with a live handle, and the thread
/// (if any) running user code under the state lock.
#[derive(Debug)]
pub(crate) struct WriteCore {
    state: RankedMutex<WriteState, { ranks::TXN_STATE }>,
    /// Names of the tables with a live handle. Its own lock, taken after
    /// `state` (never the other way), so dropping a handle never waits on
    /// the state.
    open_tables: RankedMutex<HashSet<String>, { ranks::OPEN_TABLES }>,
    /// [`thread_token`] of a thread running user code (an `extract_if` or
    /// `retain` closure) while it holds `state`; 0 when none.
    callback_thread: std::sync::atomic::AtomicU64,
    /// Set when such user code panicked: the next access to the state
    /// marks the transaction failed (the panic may have left a change
    /// half made).
    callback_panicked: std::sync::atomic::AtomicBool,
}

impl WriteCore {
    /// A core over `state`, with no table open.
    pub fn new(state: WriteState) -> WriteCore {
        WriteCore {
            state: RankedMutex::new(state),
            open_tables: RankedMutex::new(HashSet::new()),
            callback_thread: std::sync::atomic::AtomicU64::new(0),
            callback_panicked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The transaction's state; `WouldDeadlock` if this thread holds it
    /// already (an `extract_if`/`retain` closure that uses the transaction).
    pub fn state(&self) -> Result<RankedGuard<'_, WriteState>> {
        use std::sync::atomic::Ordering;
        if self.callback_thread.load(Ordering::Acquire) == thread_token() {
            return Err(Error::WouldDeadlock(
                "an extract_if/retain closure used its own write transaction; collect what \
                 it needs first, or use a read transaction"
                    .into(),
            ));
        }
        let mut st = self.state.lock();
        if self.callback_panicked.load(Ordering::Acquire) && st.failed.is_none() {
            st.failed = Some("a retain/extract_if predicate panicked".into());
        }
        Ok(st)
    }

    /// The state, through exclusive access (no lock needed).
    pub fn state_mut(&mut self) -> &mut WriteState {
        self.state.get_mut()
    }

    /// Restores savepoint `seq` (`WriteState::restore_savepoint`): the
    /// state is rebuilt, so a predicate's panic after the savepoint no
    /// longer fails the transaction.
    pub fn restore_savepoint(&mut self, seq: u64) -> Result<()> {
        self.state.get_mut().restore_savepoint(seq)?;
        self.callback_panicked
            .store(false, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Marks user code running on this thread while it holds the state;
    /// cleared when the returned guard is dropped.
    pub fn callback_scope(&self) -> CallbackScope<'_> {
        self.callback_thread
            .store(thread_token(), std::sync::atomic::Ordering::Release);
        CallbackScope {
            thread: &self.callback_thread,
            panicked: &self.callback_panicked,
            _ranks: suspend(),
        }
    }

    /// [`WriteCore::open_table`] for Rust types whose ids are `ids`; their
    /// type names are asked of `names` only when needed, and never while
    /// this transaction's locks are held (they are the caller's code). A
    /// table of the base version's catalog that this transaction has not
    /// touched, opened before with these types, is taken from the catalog
    /// the base decoded once (`CfVersion::tables`, shared with read
    /// transactions): no catalog page read, no type name built. Any other
    /// open takes [`WriteCore::open_table`], and a first open with these
    /// types that succeeds there records them for the next.
    pub fn open_table_typed(
        &self,
        name: &str,
        ids: (std::any::TypeId, std::any::TypeId),
        names: impl FnOnce() -> (String, String),
    ) -> Result<()> {
        check_table_name(name)?;
        let mut st = self.state()?;
        let Some(cached) = base_catalog_entry(&st, name) else {
            drop(st);
            let (k, v) = names();
            return self.open_table(name, &k, &v);
        };
        if cached.typed.get() != Some(&ids) {
            let base = st.base.clone();
            drop(st);
            let (k, v) = names();
            self.open_table(name, &k, &v)?;
            if let Some(t) = base.tables.loaded().and_then(|c| c.get(name)) {
                let _ = t.typed.set(ids);
            }
            return Ok(());
        }
        let mut open = self.open_tables.lock();
        if open.contains(name) {
            return Err(Error::TableAlreadyOpen(name.to_string()));
        }
        // The decoded entry is the tree's (a failed read proves nothing
        // either way: the fast path itself reads no page).
        #[cfg(debug_assertions)]
        if let Ok(found) = lookup_table(&st.pages, &st.catalog, name) {
            debug_assert_eq!(
                found.as_ref(),
                Some(&cached.meta),
                "the base's decoded catalog disagrees with the catalog tree"
            );
        }
        let meta = cached.meta.clone();
        st.tables.insert(name.to_string(), TableState::loaded(meta));
        open.insert(name.to_string());
        Ok(())
    }

    /// Registers a handle on table `name` (creating the table if needed)
    /// whose types are `key_type`/`value_type`. The same table is open
    /// at most once.
    pub fn open_table(&self, name: &str, key_type: &str, value_type: &str) -> Result<()> {
        check_table_name(name)?;
        let mut st = self.state()?;
        let mut open = self.open_tables.lock();
        if open.contains(name) {
            return Err(Error::TableAlreadyOpen(name.to_string()));
        }
        if !st.tables.contains_key(name) {
            match lookup_table(&st.pages, &st.catalog, name)? {
                Some(meta) => {
                    st.tables.insert(name.to_string(), TableState::loaded(meta));
                }
                None => {
                    st.check_not_failed()?;
                    create_table(&mut st, name, key_type, value_type).map_err(|e| st.fail(e))?;
                }
            }
        }
        check_types(name, &st.tables[name].meta, key_type, value_type)?;
        open.insert(name.to_string());
        Ok(())
    }

    /// Opens (creating if needed) table `name` of these types and applies
    /// `batch` to it unlogged ([`WriteState::append_sorted_unlogged`]).
    pub fn append_sorted_unlogged<W: btree::SortedWrite>(
        &self,
        (name, key_type, value_type): (&str, &str, &str),
        batch: &[W],
    ) -> Result<()> {
        self.open_table(name, key_type, value_type)?;
        self.close_table(name);
        self.state()?.append_sorted_unlogged(name, batch)
    }

    /// Called by a table handle when it is dropped.
    pub fn close_table(&self, name: &str) {
        let was_open = self.open_tables.lock().remove(name);
        debug_assert!(was_open, "table {name:?} closed but not open");
    }

    fn check_closed(&self, names: &[&str]) -> Result<()> {
        let open = self.open_tables.lock();
        match names.iter().find(|n| open.contains(**n)) {
            Some(n) => Err(Error::TableAlreadyOpen((*n).to_string())),
            None => Ok(()),
        }
    }

    /// `InvalidArgument` while a table handle is alive (commit needs all
    /// of them dropped).
    pub fn check_none_open(&self) -> Result<()> {
        let open = self.open_tables.lock();
        if !open.is_empty() {
            let mut names: Vec<&String> = open.iter().collect();
            names.sort();
            return Err(Error::InvalidArgument(format!(
                "tables still open at commit: {names:?}"
            )));
        }
        Ok(())
    }

    /// Deletes a table and frees its pages. `Ok(false)` if it did not exist.
    pub fn delete_table(&self, name: &str) -> Result<bool> {
        check_table_name(name)?;
        let mut st = self.state()?;
        st.check_not_failed()?;
        self.check_closed(&[name])?;
        st.drop_table_logged(name)
    }

    /// Renames table `from` to `to`. `TableNotFound` if `from` is missing,
    /// `TableExists` if `to` exists.
    pub fn rename_table(&self, from: &str, to: &str) -> Result<()> {
        check_table_name(from)?;
        check_table_name(to)?;
        let mut st = self.state()?;
        st.check_not_failed()?;
        self.check_closed(&[from, to])?;
        st.rename_table_logged(from, to)
    }

    /// Names of all tables (including ones created in this transaction).
    pub fn list_tables(&self) -> Result<Vec<String>> {
        let st = self.state()?;
        list_catalog(&st.pages, &st.catalog)
    }
}

/// Creates the empty table `name` through the catalog rule, logging it.
pub(super) fn create_table(
    st: &mut WriteState,
    name: &str,
    key_type: &str,
    value_type: &str,
) -> Result<()> {
    let meta = TableMeta {
        id: st.next_table,
        root: None,
        len: 0,
        key_type: key_type.to_string(),
        value_type: value_type.to_string(),
    };
    st.log(&Op::CreateTable {
        table: meta.id,
        name,
        key_type: &meta.key_type,
        value_type: &meta.value_type,
    });
    st.catalog_create(name, meta)
}

/// Drops a large batch of writes in the order their keys were allocated
/// rather than in key order (see design.md "Batches": the frees then walk
/// the heap forward instead of missing the cache on every entry).
fn drop_in_address_order(mut writes: Vec<btree::BatchWrite>) {
    if writes.len() >= 4096 {
        writes.sort_unstable_by_key(|(k, _)| Arc::as_ptr(k).cast::<u8>() as usize);
    }
    drop(writes);
}
