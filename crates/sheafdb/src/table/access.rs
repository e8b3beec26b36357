//! Typed table handles over the B+tree: [`Table`] (in a write transaction)
//! and [`ReadOnlyTable`] (in a snapshot), with zero-copy guards and
//! double-ended range iterators.
//!
//! Keys are encoded with the order-preserving `Key` encoding, values with
//! the `Value` encoding (see [`super::types`]). A guard holds the page its
//! bytes live in, so `value()` borrows from the page without copying; the
//! bytes are decoded once when the guard is made (so corrupt bytes give an
//! error there) and again, infallibly, on each `value()` call.
//!
//! Must not know: pages layouts, files, the WAL.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use crate::btree::{self, Bytes, Cursor, TreeRoot};
use crate::error::{Error, Result};
use crate::table::types::{Key, Value};
use crate::txn::pages::ReadPages;
use crate::txn::{CfVersion, WriteCore, WriteState};
use crate::types::TableId;
use crate::wal::record::Op;

#[derive(Debug)]
enum Stored {
    Page(Bytes),
    Owned(Vec<u8>),
}

impl Stored {
    fn as_slice(&self) -> &[u8] {
        match self {
            Stored::Page(b) => b.as_slice(),
            Stored::Owned(v) => v,
        }
    }
}

/// Declares a guard type: stored bytes of one key or value, decoded on
/// demand by `$decode` (validated once when the guard is made).
macro_rules! guard {
    ($(#[$doc:meta])* $name:ident, $trait:ident, $decode:ident) => {
        $(#[$doc])*
        pub struct $name<T: $trait + 'static> {
            bytes: Stored,
            _t: PhantomData<fn() -> T>,
        }

        impl<T: $trait + 'static> std::fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.value())
            }
        }

        impl<T: $trait + 'static> $name<T> {
            fn new(bytes: Stored) -> Result<$name<T>> {
                T::$decode(bytes.as_slice())?;
                Ok($name {
                    bytes,
                    _t: PhantomData,
                })
            }

            /// The decoded contents, borrowing from the page where the type
            /// allows.
            pub fn value(&self) -> T::SelfType<'_> {
                T::$decode(self.bytes.as_slice()).expect("validated when the guard was made")
            }

            /// The encoded bytes.
            pub fn raw_bytes(&self) -> &[u8] {
                self.bytes.as_slice()
            }
        }
    };
}

guard!(
    /// A stored value. `value()` borrows from the page it lives in.
    AccessGuard,
    Value,
    decode_value
);
guard!(
    /// A stored key. `value()` borrows from the page it lives in.
    KeyGuard,
    Key,
    decode_key
);

type Entry<K, V> = (KeyGuard<K>, AccessGuard<V>);

fn entry<K: Key + 'static, V: Value + 'static>(k: Bytes, v: Bytes) -> Result<Entry<K, V>> {
    Ok((
        KeyGuard::new(Stored::Page(k))?,
        AccessGuard::new(Stored::Page(v))?,
    ))
}

fn opt_value<V: Value + 'static>(b: Option<Bytes>) -> Result<Option<AccessGuard<V>>> {
    b.map(|b| AccessGuard::new(Stored::Page(b))).transpose()
}

fn encode_key<K: Key>(k: &K::SelfType<'_>) -> Vec<u8> {
    let mut v = Vec::new();
    K::encode_key(k, &mut v);
    v
}

fn encode_value<V: Value>(val: &V::SelfType<'_>) -> Vec<u8> {
    let mut v = Vec::new();
    V::encode_value(val, &mut v);
    v
}

fn encode_bound<'a, K: Key + 'a, KR: Borrow<K::SelfType<'a>>>(b: Bound<&KR>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(encode_key::<K>(k.borrow())),
        Bound::Excluded(k) => Bound::Excluded(encode_key::<K>(k.borrow())),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn as_ref_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

enum Source<'t> {
    /// The version is held so the snapshot's pages stay alive.
    Read(ReadPages, #[allow(dead_code)] Arc<CfVersion>),
    Write(&'t WriteCore),
}

/// A double-ended iterator over a key range, yielding `(key, value)` guards.
pub struct Range<'t, K: Key + 'static, V: Value + 'static> {
    source: Source<'t>,
    cursor: Cursor,
    done: bool,
    _kv: PhantomData<fn() -> (K, V)>,
}

impl<'t, K: Key + 'static, V: Value + 'static> Range<'t, K, V> {
    fn step(&mut self, back: bool) -> Option<Result<Entry<K, V>>> {
        if self.done {
            return None;
        }
        let r = match &self.source {
            Source::Read(pages, _) => {
                if back {
                    self.cursor.next_back(pages)
                } else {
                    self.cursor.next(pages)
                }
            }
            Source::Write(txn) => match txn.state() {
                Ok(st) if back => self.cursor.next_back(&st.pages),
                Ok(st) => self.cursor.next(&st.pages),
                Err(e) => Err(e),
            },
        };
        match r {
            Ok(Some((k, v))) => Some(entry(k, v)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl<K: Key + 'static, V: Value + 'static> Iterator for Range<'_, K, V> {
    type Item = Result<Entry<K, V>>;
    fn next(&mut self) -> Option<Self::Item> {
        self.step(false)
    }
}

impl<K: Key + 'static, V: Value + 'static> DoubleEndedIterator for Range<'_, K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.step(true)
    }
}

/// A table in a snapshot.
pub struct ReadOnlyTable<K: Key + 'static, V: Value + 'static> {
    pages: ReadPages,
    root: TreeRoot,
    version: Arc<CfVersion>,
    _kv: PhantomData<fn() -> (K, V)>,
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for ReadOnlyTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyTable")
            .field("root", &self.root)
            .finish()
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadOnlyTable<K, V> {
    pub(crate) fn new(pages: ReadPages, root: TreeRoot, version: Arc<CfVersion>) -> Self {
        ReadOnlyTable {
            pages,
            root,
            version,
            _kv: PhantomData,
        }
    }

    /// The value stored under `key`.
    pub fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<Option<AccessGuard<V>>>
    where
        K: 'a,
    {
        let k = encode_key::<K>(key.borrow());
        opt_value(btree::get(&self.pages, &self.root, &k)?)
    }

    /// Entries with keys in `range`, ascending (reverse with `.rev()`).
    pub fn range<'a, KR>(&self, range: impl RangeBounds<KR>) -> Result<Range<'static, K, V>>
    where
        K: 'a,
        KR: Borrow<K::SelfType<'a>>,
    {
        let start = encode_bound::<K, KR>(range.start_bound());
        let end = encode_bound::<K, KR>(range.end_bound());
        let cursor = Cursor::new(&self.root, as_ref_bound(&start), as_ref_bound(&end));
        Ok(Range {
            source: Source::Read(self.pages.clone(), self.version.clone()),
            cursor,
            done: false,
            _kv: PhantomData,
        })
    }

    /// All entries, ascending.
    pub fn iter(&self) -> Result<Range<'static, K, V>> {
        let cursor = Cursor::new(&self.root, Bound::Unbounded, Bound::Unbounded);
        Ok(Range {
            source: Source::Read(self.pages.clone(), self.version.clone()),
            cursor,
            done: false,
            _kv: PhantomData,
        })
    }

    /// The entry with the smallest key.
    pub fn first(&self) -> Result<Option<Entry<K, V>>> {
        self.iter()?.next().transpose()
    }

    /// The entry with the largest key.
    pub fn last(&self) -> Result<Option<Entry<K, V>>> {
        self.iter()?.next_back().transpose()
    }

    /// Number of entries (O(1)).
    pub fn len(&self) -> Result<u64> {
        Ok(self.root.len)
    }

    /// True if the table has no entries.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.root.len == 0)
    }
}

fn log_popped(st: &mut WriteState, table: TableId, popped: &Option<(Bytes, Bytes)>) {
    if let Some((k, _)) = popped {
        st.log(&Op::Delete {
            table,
            key: k.as_slice(),
        });
    }
}

/// A table open in a write transaction. Reads see the transaction's own
/// writes.
pub struct Table<'txn, K: Key + 'static, V: Value + 'static> {
    txn: &'txn WriteCore,
    name: String,
    _kv: PhantomData<fn() -> (K, V)>,
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for Table<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("name", &self.name).finish()
    }
}

impl<K: Key + 'static, V: Value + 'static> Drop for Table<'_, K, V> {
    fn drop(&mut self) {
        self.txn.close_table(&self.name);
    }
}

impl<'txn, K: Key + 'static, V: Value + 'static> Table<'txn, K, V> {
    pub(crate) fn new(txn: &'txn WriteCore, name: String) -> Self {
        Table {
            txn,
            name,
            _kv: PhantomData,
        }
    }

    /// Runs `f` on the tree of this table, stores the new root, then lets
    /// `log` record the logical operation for the WAL. If `f` fails after
    /// it may have changed pages, the transaction is marked failed (see
    /// [`WriteState::fail`]): it can then only be aborted.
    fn with_tree<R>(
        &self,
        f: impl FnOnce(&mut crate::txn::pages::TxnPages, &mut TreeRoot) -> Result<R>,
        log: impl FnOnce(&mut WriteState, TableId, &R),
    ) -> Result<R> {
        let mut guard = self.txn.state()?;
        let st = &mut *guard;
        st.check_not_failed()?;
        let table = st
            .tables
            .get_mut(&self.name)
            .ok_or_else(|| Error::TableNotFound(self.name.clone()))?;
        let id = table.meta.id;
        let mut root = table.root();
        let r = f(&mut st.pages, &mut root);
        table.set_root(root);
        let r = r.map_err(|e| st.fail(e))?;
        log(st, id, &r);
        Ok(r)
    }

    fn root(&self) -> Result<TreeRoot> {
        let st = self.txn.state()?;
        st.tables
            .get(&self.name)
            .map(|t| t.root())
            .ok_or_else(|| Error::TableNotFound(self.name.clone()))
    }

    /// Inserts or replaces; returns the old value.
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<Option<AccessGuard<V>>>
    where
        K: 'k,
        V: 'v,
    {
        let k = encode_key::<K>(key.borrow());
        let v = encode_value::<V>(value.borrow());
        let old = self.with_tree(
            |pages, root| btree::insert(pages, root, &k, &v),
            |st, table, _| {
                st.log(&Op::Put {
                    table,
                    key: &k,
                    value: &v,
                })
            },
        )?;
        opt_value(old)
    }

    /// Removes `key`; returns the old value.
    pub fn remove<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
    ) -> Result<Option<AccessGuard<V>>>
    where
        K: 'k,
    {
        let k = encode_key::<K>(key.borrow());
        let old = self.with_tree(
            |pages, root| btree::remove(pages, root, &k),
            |st, table, old| {
                if old.is_some() {
                    st.log(&Op::Delete { table, key: &k })
                }
            },
        )?;
        opt_value(old)
    }

    /// The value stored under `key` (including this transaction's writes).
    pub fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<Option<AccessGuard<V>>>
    where
        K: 'a,
    {
        let k = encode_key::<K>(key.borrow());
        let st = self.txn.state()?;
        let root = st
            .tables
            .get(&self.name)
            .map(|t| t.root())
            .ok_or_else(|| Error::TableNotFound(self.name.clone()))?;
        opt_value(btree::get(&st.pages, &root, &k)?)
    }

    /// Entries with keys in `range`, ascending (reverse with `.rev()`).
    pub fn range<'a, KR>(&self, range: impl RangeBounds<KR>) -> Result<Range<'_, K, V>>
    where
        K: 'a,
        KR: Borrow<K::SelfType<'a>>,
    {
        let start = encode_bound::<K, KR>(range.start_bound());
        let end = encode_bound::<K, KR>(range.end_bound());
        let root = self.root()?;
        Ok(Range {
            source: Source::Write(self.txn),
            cursor: Cursor::new(&root, as_ref_bound(&start), as_ref_bound(&end)),
            done: false,
            _kv: PhantomData,
        })
    }

    /// All entries, ascending.
    pub fn iter(&self) -> Result<Range<'_, K, V>> {
        let root = self.root()?;
        Ok(Range {
            source: Source::Write(self.txn),
            cursor: Cursor::new(&root, Bound::Unbounded, Bound::Unbounded),
            done: false,
            _kv: PhantomData,
        })
    }

    /// The entry with the smallest key.
    pub fn first(&self) -> Result<Option<Entry<K, V>>> {
        self.iter()?.next().transpose()
    }

    /// The entry with the largest key.
    pub fn last(&self) -> Result<Option<Entry<K, V>>> {
        self.iter()?.next_back().transpose()
    }

    /// Removes and returns the entry with the smallest key.
    pub fn pop_first(&mut self) -> Result<Option<Entry<K, V>>> {
        let popped = self.with_tree(btree::pop_first, log_popped)?;
        popped.map(|(k, v)| entry(k, v)).transpose()
    }

    /// Removes and returns the entry with the largest key.
    pub fn pop_last(&mut self) -> Result<Option<Entry<K, V>>> {
        let popped = self.with_tree(btree::pop_last, log_popped)?;
        popped.map(|(k, v)| entry(k, v)).transpose()
    }

    /// Keeps only the entries for which `f` returns true. Returns how many
    /// were removed.
    pub fn retain(
        &mut self,
        mut f: impl FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
    ) -> Result<u64> {
        let removed = self.extract_if(|k, v| !f(k, v))?;
        Ok(removed.len() as u64)
    }

    /// Removes the entries for which `f` returns true and returns them.
    pub fn extract_if(
        &mut self,
        mut f: impl FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
    ) -> Result<Vec<Entry<K, V>>> {
        let mut failure = None;
        let txn = self.txn;
        let removed = self.with_tree(
            |pages, root| {
                // The closure is user code run under the state lock: using
                // this transaction from it is an error, not a self-deadlock.
                let _scope = txn.callback_scope();
                btree::drain_filter(pages, root, |k, v| {
                    match (K::decode_key(k), V::decode_value(v)) {
                        (Ok(k), Ok(v)) => f(k, v),
                        (Err(e), _) | (_, Err(e)) => {
                            failure.get_or_insert(e);
                            false
                        }
                    }
                })
            },
            |st, table, removed| {
                for (key, _) in removed {
                    st.log(&Op::Delete { table, key });
                }
            },
        )?;
        if let Some(e) = failure {
            return Err(e);
        }
        removed
            .into_iter()
            .map(|(k, v)| {
                Ok((
                    KeyGuard::new(Stored::Owned(k))?,
                    AccessGuard::new(Stored::Owned(v))?,
                ))
            })
            .collect()
    }

    /// Number of entries (O(1)).
    pub fn len(&self) -> Result<u64> {
        Ok(self.root()?.len)
    }

    /// True if the table has no entries.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.root()?.len == 0)
    }
}
