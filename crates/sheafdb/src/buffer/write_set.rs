//! A write transaction's private writes.
//!
//! Owns: per table, an ordered map key → [`Slot`] (the transaction's last
//! write of each key) and the change in the table's entry count those
//! writes make, so `len()` stays O(1) over the merged view.
//!
//! Must not know: what lies below it (buffers, trees); the caller says
//! whether a key existed before each write.
//!
//! Invariant: `delta` equals (keys put here that did not exist below) −
//! (keys removed here that did); checked against a model in the tests.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::BTreeSet;

use hashbrown::HashTable;
use std::ops::Bound;
use std::sync::Arc;

use super::filter;
use super::{Held, Slot};
use crate::btree::key_prefix;
use crate::types::{IdMap, TableId};

/// Bytes charged per pending write on top of its key and value (map node
/// share, two shared-buffer headers): an estimate, so a transaction of
/// many small writes (removals above all) is bounded like one of few
/// large ones.
pub const ENTRY_OVERHEAD: u64 = 64;

fn charge(key: &[u8], slot: &Slot) -> u64 {
    key.len() as u64 + slot.as_ref().map_or(0, |v| v.len() as u64) + ENTRY_OVERHEAD
}

/// A key with its first eight bytes inline (big-endian, zero-padded), so
/// most comparisons of a sort or an ordered map are one integer compare
/// instead of a pointer chase and a `memcmp`. Orders exactly like the key
/// bytes: a strictly smaller prefix means a smaller key, and equal
/// prefixes fall back to the bytes.
#[derive(Clone, Debug)]
pub struct OrdKey {
    prefix: u64,
    key: Arc<[u8]>,
}

impl PartialEq for OrdKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for OrdKey {}

impl PartialOrd for OrdKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Byte order of two keys given with their [`key_prefix`]: one integer
/// compare unless the first eight bytes tie.
fn key_order(a: (u64, &[u8]), b: (u64, &[u8])) -> Ordering {
    let ord = a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1));
    debug_assert_eq!(ord, a.1.cmp(b.1), "prefix order differs from byte order");
    ord
}

impl Ord for OrdKey {
    fn cmp(&self, other: &Self) -> Ordering {
        key_order((self.prefix, &self.key), (other.prefix, &other.key))
    }
}

impl std::borrow::Borrow<[u8]> for OrdKey {
    fn borrow(&self) -> &[u8] {
        &self.key
    }
}

/// The order of a table's written keys, kept lazily: nothing is kept
/// until the first ordered read (a bulk load or a WAL replay that never
/// reads in order never pays for it; its writes are sorted once, when
/// they are applied). From then on, keys written since the last ordered
/// read wait in `pending`.
#[derive(Debug, Default)]
struct Order {
    /// False until the first ordered read; `sorted` and `pending` are
    /// empty until then.
    live: bool,
    sorted: BTreeSet<OrdKey>,
    pending: Vec<OrdKey>,
}

impl Order {
    /// Notes a key new to the write set, if the order is kept.
    fn note_new(&mut self, key: &Arc<[u8]>, prefix: u64) {
        if self.live {
            self.pending.push(OrdKey {
                prefix,
                key: key.clone(),
            });
        }
    }

    /// Brings the sorted set up to date with every written key: on the
    /// first ordered read, from the keys in `map`.
    fn settle(&mut self, map: &HashTable<Written>) {
        if !self.live {
            debug_assert!(self.sorted.is_empty() && self.pending.is_empty());
            self.pending.extend(map.iter().map(|w| OrdKey {
                prefix: w.prefix,
                key: w.key.clone(),
            }));
            self.live = true;
        }
        if self.pending.is_empty() {
            return;
        }
        self.pending.sort_unstable();
        self.sorted.extend(self.pending.drain(..));
        debug_assert_eq!(self.sorted.len(), map.len(), "order and map disagree");
    }
}

/// One key's last write, with the key's hash (`filter::hash` of table
/// and key: growing the table never reads the key again, and the buffer's
/// filter takes it as is) and its [`key_prefix`] (sorting the writes
/// mostly compares integers beside each other, and the buffer keeps it in
/// its node): a buffered commit moves its writes into the buffer without
/// reading a key's bytes where the heap put them, long out of cache.
#[derive(Debug)]
struct Written {
    hash: u64,
    prefix: u64,
    key: Arc<[u8]>,
    slot: Slot,
}

/// A write leaving its write set for a buffer, with what the buffer
/// would otherwise compute from the key's bytes.
#[derive(Debug)]
pub struct Prepared {
    /// The key.
    pub key: Arc<[u8]>,
    /// `btree::key_prefix(&key)`.
    pub prefix: u64,
    /// `filter::hash(table, &key)`.
    pub hash: u64,
    /// The write.
    pub slot: Slot,
}

impl Prepared {
    /// `slot` written to `key` of `table`, with its prefix and hash.
    pub fn new(table: TableId, key: Arc<[u8]>, slot: Slot) -> Prepared {
        Prepared {
            prefix: key_prefix(&key),
            hash: filter::hash(table, &key),
            key,
            slot,
        }
    }
}

/// Key order of two writes.
fn written_order(a: &Written, b: &Written) -> Ordering {
    key_order((a.prefix, &a.key), (b.prefix, &b.key))
}

/// The writes of one table: a hash table from key to its last write (point
/// reads, which every insert and remove makes for the old value, cost one
/// hash probe) and the keys' order, built as ordered reads need it.
///
/// Blind writes (WAL replay, which never reads what it writes) go to
/// `log` instead, in the order they were made: an append per write, no
/// hash probe at a random place in a growing table. The log is sorted
/// once, keeping each key's last write ([`TableWrites::settle_log`]), when
/// its writes are counted or applied. Reads see the log too (newest
/// first), but linearly: nothing reads a table's writes while it has one.
#[derive(Debug)]
pub struct TableWrites {
    /// The table (part of every key's hash).
    table: TableId,
    map: HashTable<Written>,
    order: RefCell<Order>,
    /// Blind writes not in `map`, newer than every write in it: in log
    /// order, or, once `log_settled`, in key order, one per key.
    log: Vec<Written>,
    log_settled: bool,
    delta: i64,
    /// Set by a write whose key's earlier presence was not given (WAL
    /// replay): `delta` is unknown until [`TableWrites::resolve`].
    blind: bool,
    /// Bytes charged: of the map's writes and of every write in the log
    /// (a key written twice there counts twice until the log is settled).
    bytes: u64,
}

impl TableWrites {
    fn new(table: TableId) -> TableWrites {
        TableWrites {
            table,
            map: HashTable::new(),
            order: RefCell::default(),
            log: Vec::new(),
            log_settled: true,
            delta: 0,
            blind: false,
            bytes: 0,
        }
    }

    fn find(&self, key: &[u8]) -> Option<&Written> {
        if let Some(w) = self.log.iter().rev().find(|w| *w.key == *key) {
            return Some(w);
        }
        let hash = filter::hash(self.table, key);
        self.map.find(hash, |w| *w.key == *key)
    }

    /// What this transaction wrote to `key`: `Some(slot)` if it wrote it.
    pub fn get(&self, key: &[u8]) -> Option<Slot> {
        self.find(key).map(|w| w.slot.clone())
    }

    /// The first written key within `(lo, hi)` from the front or the back.
    pub fn seek(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, back: bool) -> Option<(Held, Slot)> {
        if let (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) =
            (lo, hi)
        {
            // BTreeSet::range panics on an inverted range; it is empty.
            if l > h || (l == h && !matches!((lo, hi), (Bound::Included(_), Bound::Included(_)))) {
                return None;
            }
        }
        let mut order = self.order.borrow_mut();
        order.settle(&self.map);
        let mut r = order.sorted.range::<[u8], _>((lo, hi));
        let in_map = if back { r.next_back() } else { r.next() }.map(|k| &k.key);
        // The log's keys are not in the order (see the type's doc).
        let in_range = |k: &[u8]| std::ops::RangeBounds::<[u8]>::contains(&(lo, hi), k);
        let in_log = self.log.iter().map(|w| &w.key).filter(|k| in_range(k));
        let in_log = if back { in_log.max() } else { in_log.min() };
        let key = match (in_map, in_log) {
            (Some(m), Some(l)) => (if (l < m) != back { l } else { m }).clone(),
            (m, l) => m.or(l)?.clone(),
        };
        let slot = self.find(&key).map(|w| w.slot.clone());
        debug_assert!(slot.is_some(), "an ordered key without a write");
        Some((Held::Shared(key), slot?))
    }

    /// Bytes charged (keys, values, per-entry overhead).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Entry-count change of these writes; `None` while blind writes are
    /// unresolved.
    pub fn delta(&self) -> Option<i64> {
        (!self.blind).then_some(self.delta)
    }

    /// Computes the entry-count change of blind writes: `existed` says,
    /// for each written key in key order, whether it was present before
    /// this write set.
    pub fn resolve(
        &mut self,
        mut existed: impl FnMut(&[u8]) -> crate::error::Result<bool>,
    ) -> crate::error::Result<()> {
        if !self.blind {
            return Ok(());
        }
        self.settle_log();
        let mut keys: Vec<&Written> = self.map.iter().collect();
        keys.sort_unstable_by(|a, b| written_order(a, b));
        let mut delta = 0;
        for w in keys.into_iter().chain(&self.log) {
            delta += i64::from(w.slot.is_some()) - i64::from(existed(&w.key)?);
        }
        self.delta = delta;
        self.blind = false;
        Ok(())
    }

    /// Sets the count change of blind writes to `delta`, as the records
    /// that logged them say (WAL replay). `Corrupted` if no set of these
    /// writes could make it (more entries added or removed than keys
    /// written); a wrong but possible figure is caught when the writes are
    /// folded into the tree (design 15.2).
    pub fn resolve_counted(&mut self, delta: i64) -> crate::error::Result<()> {
        if !self.blind {
            return Ok(());
        }
        self.settle_log();
        if delta.unsigned_abs() > self.len() as u64 {
            return Err(crate::error::Error::corrupted(
                format!("a count change of {delta} from {} written keys", self.len()),
                "WAL replay",
            ));
        }
        self.delta = delta;
        self.blind = false;
        Ok(())
    }

    /// Number of keys written: exact once the log is settled (else an
    /// upper bound).
    pub fn len(&self) -> usize {
        self.map.len() + self.log.len()
    }

    /// True if nothing was written.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty() && self.log.is_empty()
    }

    /// Puts the log in key order, keeping each key's last write, so it
    /// holds one write per key; then, if the map has writes too, moves
    /// the log's into it (they are newer). Bytes charged are those of the
    /// writes kept.
    pub fn settle_log(&mut self) {
        if !self.log_settled {
            // Stable: the writes of one key stay in log order, last last.
            self.log.sort_by(written_order);
            let bytes = &mut self.bytes;
            // `dedup_by` keeps the first of a run: it takes the later
            // write's slot, and the earlier one is dropped.
            self.log.dedup_by(|later, kept| {
                let same = later.prefix == kept.prefix && later.key == kept.key;
                if same {
                    std::mem::swap(&mut later.slot, &mut kept.slot);
                    *bytes -= charge(&later.key, &later.slot);
                }
                same
            });
            self.log_settled = true;
        }
        if !self.map.is_empty() {
            self.absorb_log();
        }
    }

    /// Moves the log's writes into the map (they are newer than its).
    fn absorb_log(&mut self) {
        self.log_settled = true;
        for w in std::mem::take(&mut self.log) {
            let (key, slot) = (w.key, w.slot);
            self.bytes -= charge(&key, &slot);
            self.record(&key, slot, None);
        }
    }

    /// The writes in key order, one per key, consuming them.
    fn into_ordered(mut self) -> Vec<Written> {
        self.settle_log();
        if self.map.is_empty() {
            return self.log;
        }
        let mut v: Vec<Written> = self.map.into_iter().collect();
        v.sort_unstable_by(written_order);
        v
    }

    /// Passes each write to `f` in key order, consuming them: each key
    /// and value moves (a buffered commit's into its buffer) without
    /// touching its reference count, twice (a clone, then the write set's
    /// drop), on a cache line the commit has long left. In key order: a
    /// skip list takes keys in order much faster than at random, as each
    /// search retraces the last one's path through the cache. A single
    /// write is passed with no sort and no allocation (a single-row
    /// commit).
    pub fn into_key_order(self, mut f: impl FnMut(Prepared)) {
        let prepared = |w: Written| Prepared {
            key: w.key,
            prefix: w.prefix,
            hash: w.hash,
            slot: w.slot,
        };
        if self.map.len() <= 1 && self.log.is_empty() {
            self.map.into_iter().for_each(|w| f(prepared(w)));
            return;
        }
        self.into_ordered().into_iter().for_each(|w| f(prepared(w)));
    }

    /// The writes in key order, consuming them (to apply them).
    pub fn into_sorted(self) -> Vec<crate::btree::BatchWrite> {
        let v = self.into_ordered();
        debug_assert!(
            v.windows(2).all(|w| w[0].key < w[1].key),
            "keys not unique and sorted"
        );
        v.into_iter().map(|w| (w.key, w.slot)).collect()
    }

    /// Records the write (`existed`: whether the key was present just
    /// before; `None`: unknown, a blind write).
    fn record(&mut self, key: &[u8], slot: Slot, existed: Option<bool>) {
        match existed {
            Some(e) => self.delta += i64::from(slot.is_some()) - i64::from(e),
            None => self.blind = true,
        }
        if !self.log.is_empty() {
            // This write is newer than the log's.
            self.absorb_log();
        }
        let add = charge(key, &slot);
        let hash = filter::hash(self.table, key);
        let sub = match self.map.find_mut(hash, |w| *w.key == *key) {
            Some(old) => {
                let sub = charge(key, &old.slot);
                old.slot = slot;
                sub
            }
            None => {
                let key: Arc<[u8]> = Arc::from(key);
                let prefix = key_prefix(&key);
                self.order.get_mut().note_new(&key, prefix);
                let w = Written {
                    hash,
                    prefix,
                    key,
                    slot,
                };
                self.map.insert_unique(hash, w, |w| w.hash);
                0
            }
        };
        self.bytes = self.bytes + add - sub;
    }

    /// Appends a blind write to the log.
    fn append_blind(&mut self, key: &[u8], slot: Slot) {
        self.blind = true;
        self.bytes += charge(key, &slot);
        let key: Arc<[u8]> = Arc::from(key);
        let w = Written {
            hash: filter::hash(self.table, &key),
            prefix: key_prefix(&key),
            key,
            slot,
        };
        // Keys appended in increasing order keep a settled log settled.
        self.log_settled &= (self.log.last()).is_none_or(|l| written_order(l, &w).is_lt());
        self.log.push(w);
    }
}

/// Every table's writes in one transaction.
#[derive(Debug, Default)]
pub struct WriteSet {
    tables: IdMap<TableId, TableWrites>,
    /// The sum of the tables' bytes, kept by every change made through
    /// the set ([`WriteSet::update`]): replay compares it with the fold
    /// threshold at every write, over any number of tables.
    bytes: u64,
}

impl WriteSet {
    /// An empty write set.
    pub fn new() -> WriteSet {
        WriteSet::default()
    }

    /// Runs `f` on the writes of `table` (created if missing) and brings
    /// the total bytes up to date with what it changed.
    fn update<R>(&mut self, table: TableId, f: impl FnOnce(&mut TableWrites) -> R) -> R {
        let t = (self.tables.entry(table)).or_insert_with(|| TableWrites::new(table));
        let before = t.bytes;
        let r = f(t);
        self.bytes = (self.bytes - before)
            .checked_add(t.bytes)
            .expect("write-set bytes overflow");
        r
    }

    /// Records that `key` of `table` becomes `slot`; `existed` says whether
    /// the key had a value just before (in the merged view below and
    /// including this transaction's earlier writes).
    pub fn record(&mut self, table: TableId, key: &[u8], slot: Slot, existed: bool) {
        self.update(table, |t| t.record(key, slot, Some(existed)));
    }

    /// Records that `key` of `table` becomes `slot` without knowing
    /// whether it existed before (WAL replay, which must not read the tree
    /// per record): the table's count change is computed later, by
    /// [`TableWrites::resolve`], or by applying the writes.
    pub fn record_blind(&mut self, table: TableId, key: &[u8], slot: Slot) {
        self.update(table, |t| t.append_blind(key, slot));
    }

    /// Moves `table`'s count change by `by`: a removal recorded as of a
    /// missing key (`Table::delete`, which does not look) whose key turned
    /// out to exist when its transaction settled it.
    pub fn adjust_delta(&mut self, table: TableId, by: i64) {
        self.update(table, |t| {
            debug_assert!(!t.blind, "a settled count moved on blind writes");
            t.delta += by;
        });
    }

    /// Settles every table's log of blind writes
    /// ([`TableWrites::settle_log`]): [`WriteSet::bytes`] then counts
    /// each key's last write only.
    pub fn settle_logs(&mut self) {
        self.tables.values_mut().for_each(TableWrites::settle_log);
        self.bytes = self.tables.values().map(TableWrites::bytes).sum();
    }

    /// Runs `f` on the writes of `table`, if any (to resolve their count
    /// change).
    pub fn with_table_mut<R>(
        &mut self,
        table: TableId,
        f: impl FnOnce(&mut TableWrites) -> R,
    ) -> Option<R> {
        self.tables
            .contains_key(&table)
            .then(|| self.update(table, f))
    }

    /// The writes of `table`, if any.
    pub fn table(&self, table: TableId) -> Option<&TableWrites> {
        self.tables.get(&table)
    }

    /// Removes and returns the writes of `table` (to apply them).
    pub fn take_table(&mut self, table: TableId) -> Option<TableWrites> {
        let t = self.tables.remove(&table)?;
        self.bytes -= t.bytes;
        Some(t)
    }

    /// Forgets every write of `table` (the table was deleted).
    pub fn drop_table(&mut self, table: TableId) {
        self.take_table(table);
    }

    /// Keys written over all tables.
    pub fn entries(&self) -> u64 {
        self.tables.values().map(|t| t.len() as u64).sum()
    }

    /// Bytes charged over all tables.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// True if no table has a write.
    pub fn is_empty(&self) -> bool {
        self.tables.values().all(TableWrites::is_empty)
    }

    /// The tables with writes, by id.
    pub fn tables(&self) -> Vec<TableId> {
        debug_assert_eq!(
            self.bytes,
            self.tables.values().map(TableWrites::bytes).sum::<u64>(),
            "the write set's total bytes drifted from its tables'"
        );
        let mut ids: Vec<TableId> = self.tables.keys().copied().collect();
        ids.sort();
        ids
    }
}
