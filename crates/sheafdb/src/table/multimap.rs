//! Multimap tables: each key maps to a sorted set of values
//! ([`MultimapTableDefinition`], [`MultimapTable`], [`ReadOnlyMultimapTable`]).
//!
//! A multimap is an ordinary table of the CF whose tree keys are the pairs
//! `(key, value)` and whose values are empty, so it inherits everything an
//! ordinary table has: the write buffer, WAL records and replay, multi-CF
//! transactions, savepoints, snapshots, `check_integrity`, compaction.
//! The pair is encoded as `escape(key) 00 00 value`, where `key` and
//! `value` are their `Key` encodings and `escape` doubles every `00` byte
//! as `00 FF`. That keeps the byte order of pairs the order of `(key,
//! value)`, and makes the key part prefix-free, so all values of a key are
//! one contiguous range (`escape(key) 00 00 ..` up to `escape(key) 00 01`).
//! Values are ordered by their key encoding (the `Key` trait's order).
//!
//! The catalog records the table's key type as `multimap(K,V)` and its
//! value type as `()`: opening it as an ordinary table is
//! `TableTypeMismatch`, and so is opening an ordinary table as a multimap.
//!
//! Must not know: pages, files, the WAL.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use super::access::{encode_bounds, encode_key, KeyGuard, Range, ReadOnlyTable, Table};
use super::types::Key;
use crate::buffer::Held;
use crate::error::{Error, Result};

/// The name and types of a multimap table: each key maps to a set of
/// values, kept sorted by the values' key encoding.
///
/// ```
/// use sheafdb::MultimapTableDefinition;
/// const TAGS: MultimapTableDefinition<&str, &str> = MultimapTableDefinition::new("tags");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = sheafdb::Database::create(dir.path().join("m.sheaf")).unwrap();
/// let tx = db.begin_write()?;
/// {
///     let mut tags = tx.open_multimap_table(TAGS)?;
///     tags.insert("post-1", "rust")?;
///     tags.insert("post-1", "db")?;
///     tags.insert("post-2", "rust")?;
/// }
/// tx.commit()?;
/// let rx = db.begin_read()?;
/// let tags = rx.open_multimap_table(TAGS)?;
/// let values: Vec<String> = tags
///     .get("post-1")?
///     .map(|v| v.map(|v| v.value().to_string()))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(values, ["db", "rust"]);
/// # Ok::<(), sheafdb::Error>(())
/// ```
pub struct MultimapTableDefinition<'a, K: Key + 'static, V: Key + 'static> {
    name: &'a str,
    _marker: PhantomData<fn() -> (K, V)>,
}

impl<'a, K: Key + 'static, V: Key + 'static> MultimapTableDefinition<'a, K, V> {
    /// A definition of the multimap table called `name`.
    pub const fn new(name: &'a str) -> Self {
        MultimapTableDefinition {
            name,
            _marker: PhantomData,
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The key type name the catalog records for it.
    pub fn key_type_name(&self) -> String {
        format!("multimap({},{})", K::type_name(), V::type_name())
    }

    /// The value type name the catalog records for it.
    pub fn value_type_name(&self) -> String {
        "()".to_string()
    }
}

impl<K: Key + 'static, V: Key + 'static> Clone for MultimapTableDefinition<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Key + 'static, V: Key + 'static> Copy for MultimapTableDefinition<'_, K, V> {}

impl<K: Key + 'static, V: Key + 'static> std::fmt::Debug for MultimapTableDefinition<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultimapTableDefinition")
            .field("name", &self.name)
            .field("key", &K::type_name())
            .field("value", &V::type_name())
            .finish()
    }
}

/// The prefix every pair of the key with encoding `key` starts with:
/// `key` with each `00` doubled as `00 FF`, then `00 00`.
fn key_prefix(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 2);
    for &b in key {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
    out
}

/// The smallest byte string above every string that starts with `prefix`
/// (which ends in `00`, so bumping that byte is enough).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    let last = end.last_mut().expect("a key prefix ends in 00 00");
    debug_assert_eq!(*last, 0, "a key prefix ends in 00");
    *last = 1;
    end
}

/// The pair `(key, value)` as a tree key.
pub(super) fn pair(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = key_prefix(key);
    out.extend_from_slice(value);
    out
}

/// Splits a stored pair into its key's encoding and the offset where the
/// value starts. `Corrupted` if it has no terminator or a bad escape.
pub(super) fn split_pair(stored: &[u8]) -> Result<(Vec<u8>, usize)> {
    let bad = |what: &str| Error::corrupted(format!("multimap pair: {what}"), "multimap table");
    let mut key = Vec::new();
    let mut i = 0;
    while i < stored.len() {
        let b = stored[i];
        if b != 0 {
            key.push(b);
            i += 1;
            continue;
        }
        match stored.get(i + 1) {
            Some(0xFF) => key.push(0),
            Some(0) => return Ok((key, i + 2)),
            _ => return Err(bad("a 00 byte that is neither escape nor terminator")),
        }
        i += 2;
    }
    Err(bad("no terminator after the key"))
}

/// A stored pair as guards of its key and its value.
fn decode_pair<K: Key + 'static, V: Key + 'static>(
    stored: Held,
) -> Result<(KeyGuard<K>, KeyGuard<V>)> {
    let (key, at) = split_pair(&stored)?;
    let k = KeyGuard::new(Held::Shared(key.into()))?;
    let v = KeyGuard::new(stored.suffix(at))?;
    Ok((k, v))
}

/// Tree-key bounds of the pairs whose keys lie in `range`.
fn pair_bounds<'a, K: Key + 'a, KR: Borrow<K::SelfType<'a>>>(
    range: &impl RangeBounds<KR>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    // A bound at the least (greatest) key leaves out no pair: open, so a
    // walk from it may record the table's end (`access::encode_bounds`).
    let (lo, hi) = encode_bounds::<K, KR>(range);
    let lo = match lo {
        Bound::Included(k) => Bound::Included(key_prefix(&k)),
        Bound::Excluded(k) => Bound::Included(prefix_end(&key_prefix(&k))),
        Bound::Unbounded => Bound::Unbounded,
    };
    let hi = match hi {
        Bound::Included(k) => Bound::Excluded(prefix_end(&key_prefix(&k))),
        Bound::Excluded(k) => Bound::Excluded(key_prefix(&k)),
        Bound::Unbounded => Bound::Unbounded,
    };
    (lo, hi)
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The stored pairs, as the untyped table underneath sees them.
type Pairs<'t> = Range<'t, &'static [u8], ()>;

/// The values of one key, in order ([`MultimapTable::get`]); double-ended.
pub struct MultimapValues<'t, V: Key + 'static> {
    pairs: Pairs<'t>,
    /// Length of the key's prefix (where each value starts).
    skip: usize,
    _v: PhantomData<fn() -> V>,
}

impl<V: Key + 'static> std::fmt::Debug for MultimapValues<'_, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultimapValues").finish()
    }
}

impl<V: Key + 'static> MultimapValues<'_, V> {
    fn value(
        &self,
        e: Result<(KeyGuard<&'static [u8]>, super::AccessGuard<()>)>,
    ) -> Result<KeyGuard<V>> {
        let stored = e?.0.into_held();
        if stored.len() < self.skip {
            return Err(Error::corrupted(
                "multimap pair shorter than its key",
                "multimap table",
            ));
        }
        KeyGuard::new(stored.suffix(self.skip))
    }
}

impl<V: Key + 'static> Iterator for MultimapValues<'_, V> {
    type Item = Result<KeyGuard<V>>;
    fn next(&mut self) -> Option<Self::Item> {
        let e = self.pairs.next()?;
        Some(self.value(e))
    }
}

impl<V: Key + 'static> DoubleEndedIterator for MultimapValues<'_, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let e = self.pairs.next_back()?;
        Some(self.value(e))
    }
}

/// `(key, value)` pairs in order ([`MultimapTable::range`]); double-ended.
pub struct MultimapRange<'t, K: Key + 'static, V: Key + 'static> {
    pairs: Pairs<'t>,
    _kv: PhantomData<fn() -> (K, V)>,
}

impl<K: Key + 'static, V: Key + 'static> std::fmt::Debug for MultimapRange<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultimapRange").finish()
    }
}

impl<K: Key + 'static, V: Key + 'static> Iterator for MultimapRange<'_, K, V> {
    type Item = Result<(KeyGuard<K>, KeyGuard<V>)>;
    fn next(&mut self) -> Option<Self::Item> {
        let e = self.pairs.next()?;
        Some(e.and_then(|(k, _)| decode_pair(k.into_held())))
    }
}

impl<K: Key + 'static, V: Key + 'static> DoubleEndedIterator for MultimapRange<'_, K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let e = self.pairs.next_back()?;
        Some(e.and_then(|(k, _)| decode_pair(k.into_held())))
    }
}

/// Reads shared by both multimap handles, over the untyped table's raw
/// range function.
macro_rules! multimap_reads {
    ($life:lifetime, $raw:ident) => {
        /// The values of `key`, in order (empty if it has none).
        pub fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<MultimapValues<$life, V>>
        where
            K: 'k,
        {
            let prefix = key_prefix(&encode_key::<K>(key.borrow()));
            let end = prefix_end(&prefix);
            Ok(MultimapValues {
                pairs: (self.inner).$raw(Bound::Included(&prefix), Bound::Excluded(&end))?,
                skip: prefix.len(),
                _v: PhantomData,
            })
        }

        /// The `(key, value)` pairs whose keys lie in `range`, in order.
        pub fn range<'a, KR>(
            &self,
            range: impl RangeBounds<KR>,
        ) -> Result<MultimapRange<$life, K, V>>
        where
            K: 'a,
            KR: Borrow<K::SelfType<'a>>,
        {
            let (lo, hi) = pair_bounds::<K, KR>(&range);
            Ok(MultimapRange {
                pairs: (self.inner).$raw(as_ref(&lo), as_ref(&hi))?,
                _kv: PhantomData,
            })
        }

        /// Every `(key, value)` pair, in order.
        pub fn iter(&self) -> Result<MultimapRange<$life, K, V>> {
            Ok(MultimapRange {
                pairs: self.inner.iter()?,
                _kv: PhantomData,
            })
        }

        /// Number of `(key, value)` pairs (O(1)).
        pub fn len(&self) -> Result<u64> {
            self.inner.len()
        }

        /// True if the table holds no pair.
        pub fn is_empty(&self) -> Result<bool> {
            self.inner.is_empty()
        }

        /// Number of values of `key` (reads them: O(values of the key)).
        pub fn value_count<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<u64>
        where
            K: 'k,
        {
            let mut n = 0;
            for v in self.get(key)? {
                v?;
                n += 1;
            }
            Ok(n)
        }
    };
}

/// A multimap table in a snapshot.
pub struct ReadOnlyMultimapTable<K: Key + 'static, V: Key + 'static> {
    inner: ReadOnlyTable<&'static [u8], ()>,
    _kv: PhantomData<fn() -> (K, V)>,
}

impl<K: Key + 'static, V: Key + 'static> std::fmt::Debug for ReadOnlyMultimapTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyMultimapTable").finish()
    }
}

impl<K: Key + 'static, V: Key + 'static> ReadOnlyMultimapTable<K, V> {
    pub(crate) fn new(inner: ReadOnlyTable<&'static [u8], ()>) -> Self {
        ReadOnlyMultimapTable {
            inner,
            _kv: PhantomData,
        }
    }

    multimap_reads!('static, raw_range);
}

/// A multimap table open in a write transaction; reads see the
/// transaction's own writes.
pub struct MultimapTable<'txn, K: Key + 'static, V: Key + 'static> {
    inner: Table<'txn, &'static [u8], ()>,
    _kv: PhantomData<fn() -> (K, V)>,
}

impl<K: Key + 'static, V: Key + 'static> std::fmt::Debug for MultimapTable<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultimapTable").finish()
    }
}

impl<'txn, K: Key + 'static, V: Key + 'static> MultimapTable<'txn, K, V> {
    pub(crate) fn new(inner: Table<'txn, &'static [u8], ()>) -> Self {
        MultimapTable {
            inner,
            _kv: PhantomData,
        }
    }

    multimap_reads!('_, write_range);

    /// Adds `value` to `key`'s values; returns true if it was there
    /// already (then nothing changes).
    ///
    /// The key and the value are stored together as one tree key, so the
    /// key size limit bounds the pair: `Error::KeyTooLarge` reports the
    /// pair's stored length (both encodings, the key's `00` bytes doubled,
    /// and two bytes between them), not the key's alone.
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<bool>
    where
        K: 'k,
        V: 'v,
    {
        let p = Self::pair_of(key.borrow(), value.borrow());
        if self.inner.get(p.as_slice())?.is_some() {
            return Ok(true);
        }
        self.inner.insert(p.as_slice(), ())?;
        Ok(false)
    }

    /// Removes `value` from `key`'s values; returns true if it was there.
    pub fn remove<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<bool>
    where
        K: 'k,
        V: 'v,
    {
        let p = Self::pair_of(key.borrow(), value.borrow());
        Ok(self.inner.remove(p.as_slice())?.is_some())
    }

    /// The stored form of the pair `(key, value)`.
    fn pair_of(key: &K::SelfType<'_>, value: &V::SelfType<'_>) -> Vec<u8> {
        pair(&encode_key::<K>(key), &encode_key::<V>(value))
    }

    /// Removes every value of `key`; returns how many there were.
    pub fn remove_all<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<u64>
    where
        K: 'k,
    {
        let prefix = key_prefix(&encode_key::<K>(key.borrow()));
        let end = prefix_end(&prefix);
        self.inner
            .retain_in(prefix.as_slice()..end.as_slice(), |_, _| false)
    }
}
