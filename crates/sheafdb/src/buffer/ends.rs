//! End hints: per table, a key below which (the head) and a key above
//! which (the tail) the merged view holds no live entry (design.md "End
//! hints").
//!
//! A table used as a queue leaves a run of tombstones at its front in the
//! write buffer until the next fold; without a hint every `first` or
//! `pop_first` walks them all (one skip-list entry and one tree entry
//! each), so popping n items cost O(n²). A write transaction that finds
//! the first live key `k` records "nothing live below `k`"; its commit
//! carries the hint into the new version, and the next walk starts at `k`.
//!
//! Owns: [`EndHints`] and the rule that keeps them true.
//!
//! Invariant E1 (kept by [`EndHints::put_into`], checked by
//! `db::commit::end_hint_tests`, the `a_queue_*` model tests in
//! `tests/model.rs` and the suite in `tests/end_hints/`):
//! in the state a set of hints belongs to (a committed version, or a
//! write transaction's view), no live entry of table `t` has a key below
//! `t`'s head or above its tail. A hint is only ever set from a walk that
//! found the live end key, and every put that could break it drops it
//! first; a removal never breaks it. Dropping a hint is always safe (it
//! only costs the walk), so every path that cannot vouch for its hints
//! (WAL replay, a new file) starts with none.
//!
//! Must not know: versions, transactions, trees. What a state is, its
//! owner knows; this holds keys.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::types::TableId;

/// The ends of one table: no live key lies below `head` or above `tail`
/// (`None`: nothing known on that side).
#[derive(Debug, Clone, Default, PartialEq)]
struct TableEnds {
    head: Option<Arc<[u8]>>,
    tail: Option<Arc<[u8]>>,
}

/// Per table, the known ends of its live keys (E1). Small: at most two
/// keys per table a walk found an end of.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndHints(BTreeMap<TableId, TableEnds>);

impl EndHints {
    /// True if no table has a hint.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `(lo, hi)` raised to the head and lowered to the tail of `table`
    /// where they reach past them: the same live keys, fewer dead ones.
    pub fn narrow<'a>(
        &'a self,
        table: TableId,
        lo: Bound<&'a [u8]>,
        hi: Bound<&'a [u8]>,
    ) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
        let Some(e) = self.0.get(&table) else {
            return (lo, hi);
        };
        let lo = match &e.head {
            Some(h) if reaches_below(lo, h) => Bound::Included(&**h),
            _ => lo,
        };
        let hi = match &e.tail {
            Some(t) if reaches_above(hi, t) => Bound::Included(&**t),
            _ => hi,
        };
        (lo, hi)
    }

    /// Per side (front, back): true if the narrowed window `(lo, hi)` of
    /// `table` starts where a walk of the whole table would, so the first
    /// live key a walk finds from that side is the table's end there.
    pub fn open_sides(&self, table: TableId, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> [bool; 2] {
        let whole = self.narrow(table, Bound::Unbounded, Bound::Unbounded);
        [lo == whole.0, hi == whole.1]
    }

    /// [`EndHints::note_put`] on hints shared with a base version: copied
    /// only if the put drops a hint (the common put changes nothing).
    pub fn put_into(hints: &mut Arc<EndHints>, table: TableId, key: &[u8]) {
        if hints.broken_by(table, key) {
            Arc::make_mut(hints).note_put(table, key);
        }
    }

    /// [`EndHints::note_end`] on shared hints, copied only if the end is
    /// new.
    pub fn end_into(hints: &mut Arc<EndHints>, table: TableId, key: &[u8], back: bool) {
        if !hints.is_end(table, key, back) {
            Arc::make_mut(hints).note_end(table, key, back);
        }
    }

    /// [`EndHints::forget`] on shared hints, copied only if `table` has
    /// one.
    pub fn forget_in(hints: &mut Arc<EndHints>, table: TableId) {
        if hints.0.contains_key(&table) {
            Arc::make_mut(hints).forget(table);
        }
    }

    /// True if a put of `key` into `table` lies beyond one of its hints
    /// ([`EndHints::note_put`] would drop it).
    fn broken_by(&self, table: TableId, key: &[u8]) -> bool {
        self.0.get(&table).is_some_and(|e| {
            e.head.as_deref().is_some_and(|h| key < h) || e.tail.as_deref().is_some_and(|t| key > t)
        })
    }

    /// True if `key` is already the hint on that side of `table`.
    fn is_end(&self, table: TableId, key: &[u8], back: bool) -> bool {
        self.0.get(&table).is_some_and(|e| {
            let end = if back { &e.tail } else { &e.head };
            end.as_deref() == Some(key)
        })
    }

    /// Records that a put of `key` into `table` makes it live: a hint it
    /// lies beyond is dropped (E1). Called for every put a write
    /// transaction makes, before it can be read.
    fn note_put(&mut self, table: TableId, key: &[u8]) {
        let Some(e) = self.0.get_mut(&table) else {
            return;
        };
        if e.head.as_deref().is_some_and(|h| key < h) {
            e.head = None;
        }
        if e.tail.as_deref().is_some_and(|t| key > t) {
            e.tail = None;
        }
        if e.head.is_none() && e.tail.is_none() {
            self.0.remove(&table);
        }
    }

    /// Records that `key` is the live entry of `table` a walk from its
    /// front (`back == false`) or back found first: nothing live lies
    /// before it.
    fn note_end(&mut self, table: TableId, key: &[u8], back: bool) {
        let e = self.0.entry(table).or_default();
        let end = if back { &mut e.tail } else { &mut e.head };
        if end.as_deref() != Some(key) {
            *end = Some(Arc::from(key));
        }
        debug_assert!(
            match (&e.head, &e.tail) {
                (Some(h), Some(t)) => h <= t,
                _ => true,
            },
            "E1: a table's head hint lies past its tail"
        );
    }

    /// Forgets `table` (dropped).
    fn forget(&mut self, table: TableId) {
        self.0.remove(&table);
    }
}

/// True if the lower bound `lo` admits keys below `h`.
fn reaches_below(lo: Bound<&[u8]>, h: &[u8]) -> bool {
    match lo {
        Bound::Unbounded => true,
        Bound::Included(l) | Bound::Excluded(l) => l < h,
    }
}

/// True if the upper bound `hi` admits keys above `t`.
fn reaches_above(hi: Bound<&[u8]>, t: &[u8]) -> bool {
    match hi {
        Bound::Unbounded => true,
        Bound::Included(x) | Bound::Excluded(x) => x > t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: TableId = TableId(7);

    #[test]
    fn narrow_raises_only_bounds_that_reach_past_the_hint() {
        let mut e = EndHints::default();
        e.note_end(T, b"m", false);
        e.note_end(T, b"t", true);
        let u = Bound::Unbounded;
        assert_eq!(
            e.narrow(T, u, u),
            (Bound::Included(&b"m"[..]), Bound::Included(&b"t"[..]))
        );
        let (lo, hi) = e.narrow(T, Bound::Excluded(b"a"), Bound::Excluded(b"z"));
        assert_eq!(
            (lo, hi),
            (Bound::Included(&b"m"[..]), Bound::Included(&b"t"[..]))
        );
        // Bounds inside the hints stay as they are.
        let (lo, hi) = e.narrow(T, Bound::Excluded(b"m"), Bound::Excluded(b"t"));
        assert_eq!(
            (lo, hi),
            (Bound::Excluded(&b"m"[..]), Bound::Excluded(&b"t"[..]))
        );
        let (lo, hi) = e.narrow(T, Bound::Included(b"p"), Bound::Included(b"q"));
        assert_eq!(
            (lo, hi),
            (Bound::Included(&b"p"[..]), Bound::Included(&b"q"[..]))
        );
        // Another table has no hint.
        assert_eq!(e.narrow(TableId(8), u, u), (u, u));
    }

    #[test]
    fn a_put_beyond_a_hint_drops_it_and_one_inside_keeps_it() {
        let mut e = EndHints::default();
        e.note_end(T, b"m", false);
        e.note_end(T, b"t", true);
        assert!(!e.broken_by(T, b"p") && e.is_end(T, b"m", false) && e.is_end(T, b"t", true));
        e.note_put(T, b"p");
        assert!(!e.is_empty());
        assert!(e.broken_by(T, b"a") && e.broken_by(T, b"z"));
        e.note_put(T, b"a");
        let u = Bound::Unbounded;
        assert_eq!(e.narrow(T, u, u), (u, Bound::Included(&b"t"[..])));
        e.note_put(T, b"z");
        assert_eq!(e.narrow(T, u, u), (u, u));
        assert!(e.is_empty(), "a table with no hint left is forgotten");
    }

    #[test]
    fn forget_drops_a_table() {
        let mut e = EndHints::default();
        e.note_end(T, b"m", false);
        e.forget(T);
        assert!(e.is_empty());
    }
}
