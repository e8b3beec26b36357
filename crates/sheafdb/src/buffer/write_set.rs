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

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use super::{Held, Slot};
use crate::types::{IdMap, TableId};

/// Bytes charged per pending write on top of its key and value (map node
/// share, two shared-buffer headers): an estimate, so a transaction of
/// many small writes (removals above all) is bounded like one of few
/// large ones.
pub const ENTRY_OVERHEAD: u64 = 64;

fn charge(key: &[u8], slot: &Slot) -> u64 {
    key.len() as u64 + slot.as_ref().map_or(0, |v| v.len() as u64) + ENTRY_OVERHEAD
}

/// The writes of one table.
#[derive(Debug, Default)]
pub struct TableWrites {
    map: BTreeMap<Arc<[u8]>, Slot>,
    delta: i64,
    bytes: u64,
}

impl TableWrites {
    /// What this transaction wrote to `key`: `Some(slot)` if it wrote it.
    pub fn get(&self, key: &[u8]) -> Option<Slot> {
        self.map.get(key).cloned()
    }

    /// The first written key within `(lo, hi)` from the front or the back.
    pub fn seek(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, back: bool) -> Option<(Held, Slot)> {
        if let (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) =
            (lo, hi)
        {
            // BTreeMap::range panics on an inverted range; it is empty.
            if l > h || (l == h && !matches!((lo, hi), (Bound::Included(_), Bound::Included(_)))) {
                return None;
            }
        }
        let mut r = self.map.range::<[u8], _>((lo, hi));
        let e = if back { r.next_back() } else { r.next() };
        e.map(|(k, v)| (Held::Shared(k.clone()), v.clone()))
    }

    /// Bytes charged (keys, values, per-entry overhead).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Entry-count change of these writes.
    pub fn delta(&self) -> i64 {
        self.delta
    }

    /// Number of keys written.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if nothing was written.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The writes in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<[u8]>, &Slot)> {
        self.map.iter()
    }
}

/// Every table's writes in one transaction.
#[derive(Debug, Default)]
pub struct WriteSet {
    tables: IdMap<TableId, TableWrites>,
    bytes: u64,
}

impl WriteSet {
    /// An empty write set.
    pub fn new() -> WriteSet {
        WriteSet::default()
    }

    /// Records that `key` of `table` becomes `slot`; `existed` says whether
    /// the key had a value just before (in the merged view below and
    /// including this transaction's earlier writes).
    pub fn record(&mut self, table: TableId, key: &[u8], slot: Slot, existed: bool) {
        let t = self.tables.entry(table).or_default();
        t.delta += i64::from(slot.is_some()) - i64::from(existed);
        let add = charge(key, &slot);
        let old = t.map.insert(Arc::from(key), slot);
        let sub = old.map(|o| charge(key, &o)).unwrap_or(0);
        t.bytes = t.bytes + add - sub;
        self.bytes = self.bytes + add - sub;
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
        if let Some(t) = self.tables.remove(&table) {
            self.bytes -= t.bytes;
        }
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
        let mut ids: Vec<TableId> = self.tables.keys().copied().collect();
        ids.sort();
        ids
    }
}
