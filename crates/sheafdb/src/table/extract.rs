//! Removing entries chosen by a predicate: [`Table::extract_if`] (lazy:
//! only the entries the iterator yields are removed), its range-restricted
//! form [`Table::extract_from_if`], and [`Table::retain`] /
//! [`Table::retain_in`].
//!
//! The predicate is user code run while the transaction's state is
//! locked: using the same transaction from it is `WouldDeadlock`, and a
//! predicate that panics leaves the transaction failed (it can only be
//! aborted, or restored to a savepoint), never half-applied and
//! committable.
//!
//! Must not know: pages, files, the WAL.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use super::access::{as_ref_bound, encode_bounds, entry, merged_step, Entry, Table};
use super::types::{Key, Value};
use crate::buffer::ends::EndHints;
use crate::buffer::merge::{BufferWalk, TreeWalk, Window};
use crate::buffer::Held;
use crate::error::Result;

/// The iterator of [`Table::extract_if`] and [`Table::extract_from_if`]:
/// each entry it yields (those the predicate accepts, in key order) is
/// removed from the table as it is yielded. Entries after the last one
/// taken are left alone, so dropping it early removes only what was seen.
///
/// ```
/// use sheafdb::{Database, TableDefinition};
/// const T: TableDefinition<u32, u32> = TableDefinition::new("t");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("x.sheaf")).unwrap();
/// let tx = db.begin_write()?;
/// {
///     let mut t = tx.open_table(T)?;
///     for k in 0..10 {
///         t.insert(k, k)?;
///     }
///     // Takes the first two even keys only: 4, 6 and 8 stay.
///     let taken: Vec<u32> = t
///         .extract_if(|k, _| k % 2 == 0)?
///         .take(2)
///         .map(|e| e.map(|(k, _)| k.value()))
///         .collect::<Result<_, _>>()?;
///     assert_eq!(taken, [0, 2]);
///     assert_eq!(t.len()?, 8);
/// }
/// tx.commit()?;
/// # Ok::<(), sheafdb::Error>(())
/// ```
pub struct ExtractIf<'a, 'txn, K, V, F>
where
    K: Key + 'static,
    V: Value + 'static,
    F: FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
{
    table: &'a mut Table<'txn, K, V>,
    /// Keys not yet looked at.
    window: Window,
    /// Nothing live lies below the window (it began at the table's
    /// front, and everything looked at so far was removed): the first
    /// entry kept is the table's first (an end hint, E1).
    at_front: bool,
    /// The window reaches the table's back: once the walk ends, nothing
    /// live lies past `last_kept` (the tail's end hint).
    to_back: bool,
    /// The last entry looked at and kept (only while `to_back`).
    last_kept: Option<Held>,
    /// Buffered tombstones walked and not yet added to the buffer's sum
    /// (design.md "Tombstone walks").
    walked: u64,
    predicate: F,
    done: bool,
    _kv: PhantomData<fn() -> (K, V)>,
}

impl<K, V, F> std::fmt::Debug for ExtractIf<'_, '_, K, V, F>
where
    K: Key + 'static,
    V: Value + 'static,
    F: FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtractIf")
            .field("table", &self.table.name)
            .finish()
    }
}

impl<K, V, F> ExtractIf<'_, '_, K, V, F>
where
    K: Key + 'static,
    V: Value + 'static,
    F: FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
{
    /// Finds the next entry the predicate takes, removes it and returns it.
    fn advance(&mut self) -> Result<Option<Entry<K, V>>> {
        let table = &*self.table;
        let mut st = table.txn.state()?;
        st.check_not_failed()?;
        let (id, root) = table.tree_of(&st)?;
        // A fresh walk of the tree per call: a removal may have applied the
        // table's writes to its tree since the last one (a spill).
        let mut tree = TreeWalk::new(&root, &self.window);
        let mut buffered = BufferWalk::default();
        loop {
            let step = merged_step(
                &mut st,
                id,
                &mut self.window,
                (&mut tree, &mut buffered),
                false,
                &mut self.walked,
            )?;
            let Some((k, v)) = step else {
                if let Some(k) = self.last_kept.take() {
                    // A `retain` that removed a table's back: the next walk
                    // from the back starts at the last key it kept.
                    EndHints::end_into(&mut st.ends, id, &k, true);
                }
                return Ok(None);
            };
            let take = {
                let _scope = table.txn.callback_scope();
                (self.predicate)(K::decode_key(&k)?, V::decode_value(&v)?)
            };
            if take {
                let out = entry(k.clone(), v.clone())?;
                st.write(id, &k, None, &Some(v))?;
                if self.at_front {
                    // Nothing live lies below `k`, now removed: the next
                    // walk from the front (this one's next call, or a new
                    // one) skips every tombstone up to it (E1).
                    EndHints::end_into(&mut st.ends, id, &k, false);
                }
                return Ok(Some(out));
            }
            if std::mem::take(&mut self.at_front) {
                // A `retain` that removed a table's front leaves the next
                // walk from the front nothing to skip.
                EndHints::end_into(&mut st.ends, id, &k, false);
            }
            if self.to_back {
                self.last_kept = Some(k);
            }
        }
    }
}

impl<K, V, F> Iterator for ExtractIf<'_, '_, K, V, F>
where
    K: Key + 'static,
    V: Value + 'static,
    F: FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
{
    type Item = Result<Entry<K, V>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.advance().transpose();
        if !matches!(r, Some(Ok(_))) {
            self.done = true;
        }
        r
    }
}

impl<'txn, K: Key + 'static, V: Value + 'static> Table<'txn, K, V> {
    fn extract_between<F>(
        &mut self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        predicate: F,
    ) -> Result<ExtractIf<'_, 'txn, K, V, F>>
    where
        F: FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
    {
        let st = self.txn.state()?;
        st.check_not_failed()?;
        let (id, _) = self.tree_of(&st)?;
        let (lo, hi) = st.ends.narrow(id, lo, hi);
        let [at_front, to_back] = st.ends.open_sides(id, lo, hi);
        let window = Window::new(lo, hi);
        drop(st);
        Ok(ExtractIf {
            window,
            at_front,
            to_back,
            last_kept: None,
            walked: 0,
            table: self,
            predicate,
            done: false,
            _kv: PhantomData,
        })
    }

    /// An iterator that removes and yields, in key order, the entries for
    /// which `predicate` returns true. Only the entries it yields are
    /// removed: dropping it early leaves the rest (as
    /// `BTreeMap::extract_if`).
    pub fn extract_if<F>(&mut self, predicate: F) -> Result<ExtractIf<'_, 'txn, K, V, F>>
    where
        F: FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
    {
        self.extract_between(Bound::Unbounded, Bound::Unbounded, predicate)
    }

    /// [`Table::extract_if`] over the keys in `range` only.
    pub fn extract_from_if<'a, KR, F>(
        &mut self,
        range: impl RangeBounds<KR>,
        predicate: F,
    ) -> Result<ExtractIf<'_, 'txn, K, V, F>>
    where
        K: 'a,
        KR: Borrow<K::SelfType<'a>>,
        F: FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
    {
        let (start, end) = encode_bounds::<K, KR>(&range);
        self.extract_between(as_ref_bound(&start), as_ref_bound(&end), predicate)
    }

    /// Keeps only the entries for which `f` returns true. Returns how many
    /// were removed.
    pub fn retain(
        &mut self,
        mut f: impl FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
    ) -> Result<u64> {
        let removed = self.extract_if(|k, v| !f(k, v))?;
        count(removed)
    }

    /// [`Table::retain`] over the keys in `range` only: entries outside it
    /// are kept whatever `f` says (it is not called for them).
    pub fn retain_in<'a, KR>(
        &mut self,
        range: impl RangeBounds<KR>,
        mut f: impl FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
    ) -> Result<u64>
    where
        K: 'a,
        KR: Borrow<K::SelfType<'a>>,
    {
        let removed = self.extract_from_if(range, |k, v| !f(k, v))?;
        count(removed)
    }
}

/// Runs `it` to the end, counting its entries; the first error ends it.
fn count<T>(it: impl Iterator<Item = Result<T>>) -> Result<u64> {
    let mut n = 0;
    for e in it {
        e?;
        n += 1;
    }
    Ok(n)
}
