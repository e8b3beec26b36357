//! Cursors: a position in a table that moves both ways and seeks
//! ([`ReadOnlyTable::cursor`], [`Table::cursor`]); a write table's cursor
//! also replaces or removes the entry it is on.
//!
//! A cursor remembers the key it is on, not a page: each move is a seek
//! from that key through the merged view (the transaction's own writes,
//! the write buffer, the tree), so it stays right whatever is written
//! between moves, including through this cursor. Removing the entry it
//! is on leaves it between that key's neighbours.
//!
//! Must not know: pages, files, the WAL.

use std::borrow::Borrow;
use std::ops::Bound;

use super::access::{
    encode_key, encode_value, opt_value, AccessGuard, Entry, Range, ReadOnlyTable, Table,
};
use super::types::{Key, Value};
use crate::error::{Error, Result};

/// Where a cursor stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pos {
    /// Before the first entry.
    Start,
    /// On (or, after a removal, where it was) this key.
    At(Vec<u8>),
    /// Past the last entry.
    End,
}

/// The entry a move lands on, and the position it leaves: on the entry,
/// or at the end it ran off (`back`: the start).
fn land<K: Key + 'static, V: Value + 'static>(
    found: Option<Result<Entry<K, V>>>,
    back: bool,
) -> Result<(Option<Entry<K, V>>, Pos)> {
    match found.transpose()? {
        Some(e) => {
            let pos = Pos::At(e.0.raw_bytes().to_vec());
            Ok((Some(e), pos))
        }
        None => Ok((None, if back { Pos::Start } else { Pos::End })),
    }
}

/// One move from `pos` (`back`: towards smaller keys) over the raw range
/// function `range` of a table.
fn step<'t, K: Key + 'static, V: Value + 'static>(
    pos: &Pos,
    back: bool,
    range: impl FnOnce(Bound<&[u8]>, Bound<&[u8]>) -> Result<Range<'t, K, V>>,
) -> Result<(Option<Entry<K, V>>, Pos)> {
    let (lo, hi) = match (pos, back) {
        (Pos::End, false) | (Pos::Start, true) => return Ok((None, pos.clone())),
        (Pos::Start, false) | (Pos::End, true) => (Bound::Unbounded, Bound::Unbounded),
        (Pos::At(k), false) => (Bound::Excluded(k.as_slice()), Bound::Unbounded),
        (Pos::At(k), true) => (Bound::Unbounded, Bound::Excluded(k.as_slice())),
    };
    let mut r = range(lo, hi)?;
    land(if back { r.next_back() } else { r.next() }, back)
}

/// A seek: the first entry at or after `key` (`back`: at or before it).
fn seek_raw<'t, K: Key + 'static, V: Value + 'static>(
    key: &[u8],
    back: bool,
    range: impl FnOnce(Bound<&[u8]>, Bound<&[u8]>) -> Result<Range<'t, K, V>>,
) -> Result<(Option<Entry<K, V>>, Pos)> {
    if back {
        let mut r = range(Bound::Unbounded, Bound::Included(key))?;
        land(r.next_back(), true)
    } else {
        let mut r = range(Bound::Included(key), Bound::Unbounded)?;
        land(r.next(), false)
    }
}

/// Implements the moves shared by both cursors over `$range`, a method of
/// the cursor's table taking raw bounds.
macro_rules! moves {
    ($range:ident) => {
        /// Moves to the first entry at or after `key`; `None` (and the
        /// cursor past the end) if there is none.
        pub fn seek<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<Entry<K, V>>>
        where
            K: 'k,
        {
            let k = encode_key::<K>(key.borrow());
            let (e, pos) = seek_raw(&k, false, |lo, hi| self.table.$range(lo, hi))?;
            self.pos = pos;
            Ok(e)
        }

        /// Moves to the last entry at or before `key`; `None` (and the
        /// cursor before the start) if there is none.
        pub fn seek_back<'k>(
            &mut self,
            key: impl Borrow<K::SelfType<'k>>,
        ) -> Result<Option<Entry<K, V>>>
        where
            K: 'k,
        {
            let k = encode_key::<K>(key.borrow());
            let (e, pos) = seek_raw(&k, true, |lo, hi| self.table.$range(lo, hi))?;
            self.pos = pos;
            Ok(e)
        }

        /// Moves to the first entry.
        pub fn first(&mut self) -> Result<Option<Entry<K, V>>> {
            self.pos = Pos::Start;
            self.next()
        }

        /// Moves to the last entry.
        pub fn last(&mut self) -> Result<Option<Entry<K, V>>> {
            self.pos = Pos::End;
            self.prev()
        }

        /// Moves to the next entry (the first one if the cursor is before
        /// the start); `None` at the end.
        #[allow(clippy::should_implement_trait)]
        pub fn next(&mut self) -> Result<Option<Entry<K, V>>> {
            let (e, pos) = step(&self.pos, false, |lo, hi| self.table.$range(lo, hi))?;
            self.pos = pos;
            Ok(e)
        }

        /// Moves to the previous entry (the last one if the cursor is past
        /// the end); `None` at the start.
        pub fn prev(&mut self) -> Result<Option<Entry<K, V>>> {
            let (e, pos) = step(&self.pos, true, |lo, hi| self.table.$range(lo, hi))?;
            self.pos = pos;
            Ok(e)
        }

        /// The entry the cursor is on; `None` before the start, past the
        /// end, or after that entry was removed.
        pub fn current(&self) -> Result<Option<Entry<K, V>>> {
            let Pos::At(k) = &self.pos else {
                return Ok(None);
            };
            let mut r = self.table.$range(Bound::Included(k), Bound::Included(k))?;
            r.next().transpose()
        }
    };
}

/// A cursor over a snapshot's table ([`ReadOnlyTable::cursor`]).
pub struct ReadOnlyCursor<'a, K: Key + 'static, V: Value + 'static> {
    table: &'a ReadOnlyTable<K, V>,
    pos: Pos,
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for ReadOnlyCursor<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyCursor")
            .field("pos", &self.pos)
            .finish()
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadOnlyCursor<'_, K, V> {
    moves!(raw_range);
}

impl<K: Key + 'static, V: Value + 'static> ReadOnlyTable<K, V> {
    /// A cursor before the first entry.
    pub fn cursor(&self) -> ReadOnlyCursor<'_, K, V> {
        ReadOnlyCursor {
            table: self,
            pos: Pos::Start,
        }
    }

    pub(super) fn raw_range(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Result<Range<'static, K, V>> {
        Ok(self.read_range(lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec)))
    }
}

/// A cursor over a write transaction's table ([`Table::cursor`]): moves
/// like a [`ReadOnlyCursor`] (seeing the transaction's own writes) and
/// replaces or removes the entry it is on.
///
/// ```
/// use sheafdb::{Database, TableDefinition};
/// const T: TableDefinition<u32, u32> = TableDefinition::new("t");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("c.sheaf")).unwrap();
/// let tx = db.begin_write()?;
/// {
///     let mut t = tx.open_table(T)?;
///     for k in 0..10 {
///         t.insert(k, k)?;
///     }
///     let mut c = t.cursor();
///     let (k, _) = c.seek(5)?.unwrap();
///     assert_eq!(k.value(), 5);
///     c.update(50)?; // 5 -> 50
///     c.next()?;
///     c.remove()?; // removes 6; the cursor stays between 5 and 7
///     assert_eq!(c.next()?.unwrap().0.value(), 7);
///     assert_eq!(c.prev()?.unwrap().1.value(), 50);
/// }
/// tx.commit()?;
/// # Ok::<(), sheafdb::Error>(())
/// ```
pub struct TableCursor<'a, 'txn, K: Key + 'static, V: Value + 'static> {
    table: &'a mut Table<'txn, K, V>,
    pos: Pos,
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for TableCursor<'_, '_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableCursor")
            .field("pos", &self.pos)
            .finish()
    }
}

impl<K: Key + 'static, V: Value + 'static> TableCursor<'_, '_, K, V> {
    moves!(write_range);

    /// The key the cursor is on (even if that entry was removed).
    fn key(&self) -> Result<&[u8]> {
        match &self.pos {
            Pos::At(k) => Ok(k),
            _ => Err(Error::InvalidArgument(
                "cursor is not on an entry (before the start or past the end)".into(),
            )),
        }
    }

    /// Replaces the value of the entry the cursor is on; returns the old
    /// one (`None` if that entry was removed: then it is inserted again).
    pub fn update<'v>(
        &mut self,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<Option<AccessGuard<V>>>
    where
        V: 'v,
    {
        let v = encode_value::<V>(value.borrow());
        let k = self.key()?.to_vec();
        opt_value(self.table.put_raw(&k, Some(&v))?)
    }

    /// Removes the entry the cursor is on; returns it (`None` if it was
    /// removed already). The cursor stays between its neighbours: `next`
    /// and `prev` go to them.
    pub fn remove(&mut self) -> Result<Option<AccessGuard<V>>> {
        let k = self.key()?.to_vec();
        opt_value(self.table.put_raw(&k, None)?)
    }
}

impl<'txn, K: Key + 'static, V: Value + 'static> Table<'txn, K, V> {
    /// A cursor before the first entry.
    pub fn cursor(&mut self) -> TableCursor<'_, 'txn, K, V> {
        TableCursor {
            table: self,
            pos: Pos::Start,
        }
    }
}
