//! One key of a write table at a time: the entry API
//! ([`Table::entry`]: `or_insert`, `or_insert_with`, `or_insert_with_key`,
//! `and_modify`, …),
//! [`Table::get_mut`] and [`Table::insert_reserve`] (a value of known
//! length written in place).
//!
//! Each handle holds the table mutably and the key's encoding, so nothing
//! else can change the key while it lives; the lookup that made it is not
//! repeated.
//!
//! Must not know: pages, files, the WAL.

use std::borrow::Borrow;

use super::access::{encode_key, encode_value, opt_value, AccessGuard, KeyGuard, Table};
use super::types::{Key, Value};
use crate::btree;
use crate::buffer::Held;
use crate::error::{Error, Result};

impl<'txn, K: Key + 'static, V: Value + 'static> Table<'txn, K, V> {
    /// The value at the encoded `key`, read through the transaction's own
    /// writes.
    fn get_raw(&self, key: &[u8]) -> Result<Option<Held>> {
        let st = self.txn.state()?;
        let (id, root) = self.tree_of(&st)?;
        st.lookup(id, &root, key)
    }

    /// Writes `value` (`None`: removes) at the encoded `key`; returns the
    /// old value.
    pub(super) fn put_raw(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<Option<Held>> {
        if value.is_some() {
            self.check_pair(key, value)?;
        }
        let mut st = self.txn.state()?;
        st.check_not_failed()?;
        if let Some(v) = value {
            btree::check_limits(btree::store::PageRead::page_size(&st.pages), key, v)?;
        }
        let (id, root) = self.tree_of(&st)?;
        let old = st.lookup(id, &root, key)?;
        if value.is_some() || old.is_some() {
            st.write(id, key, value, &old)?;
        }
        Ok(old)
    }

    /// The entry of `key`: occupied (with its value) or vacant.
    pub fn entry<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<Entry<'_, 'txn, K, V>>
    where
        K: 'k,
    {
        let key = encode_key::<K>(key.borrow());
        Ok(match opt_value::<V>(self.get_raw(&key)?)? {
            Some(value) => Entry::Occupied(OccupiedEntry {
                table: self,
                key,
                value,
            }),
            None => Entry::Vacant(VacantEntry { table: self, key }),
        })
    }

    /// The value of `key`, as a handle that can replace or remove it;
    /// `None` if the key is absent.
    pub fn get_mut<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
    ) -> Result<Option<OccupiedEntry<'_, 'txn, K, V>>>
    where
        K: 'k,
    {
        Ok(match self.entry(key)? {
            Entry::Occupied(o) => Some(o),
            Entry::Vacant(_) => None,
        })
    }
}

/// A key of a write table ([`Table::entry`]).
///
/// ```
/// use sheafdb::{Database, TableDefinition};
/// const COUNTS: TableDefinition<&str, u64> = TableDefinition::new("counts");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("e.sheaf")).unwrap();
/// let tx = db.begin_write()?;
/// {
///     let mut t = tx.open_table(COUNTS)?;
///     for word in ["a", "b", "a"] {
///         t.entry(word)?.and_modify(|n| n + 1)?.or_insert(1)?;
///     }
///     assert_eq!(t.get("a")?.unwrap().value(), 2);
///     if let Some(mut b) = t.get_mut("b")? {
///         b.insert(10)?;
///     }
/// }
/// tx.commit()?;
/// # Ok::<(), sheafdb::Error>(())
/// ```
pub enum Entry<'a, 'txn, K: Key + 'static, V: Value + 'static> {
    /// The key has a value.
    Occupied(OccupiedEntry<'a, 'txn, K, V>),
    /// The key is absent.
    Vacant(VacantEntry<'a, 'txn, K, V>),
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for Entry<'_, '_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Entry::Occupied(o) => f.debug_tuple("Occupied").field(&o.value).finish(),
            Entry::Vacant(_) => f.write_str("Vacant"),
        }
    }
}

impl<'a, 'txn, K: Key + 'static, V: Value + 'static> Entry<'a, 'txn, K, V> {
    /// The value, inserting `default` first if the key is absent.
    pub fn or_insert<'v>(self, default: impl Borrow<V::SelfType<'v>>) -> Result<AccessGuard<V>>
    where
        V: 'v,
    {
        match self {
            Entry::Occupied(o) => Ok(o.value),
            Entry::Vacant(v) => v.insert(default),
        }
    }

    /// The value, inserting what `default` returns first if the key is
    /// absent (`default` is not called otherwise).
    pub fn or_insert_with<'v, B>(self, default: impl FnOnce() -> B) -> Result<AccessGuard<V>>
    where
        V: 'v,
        B: Borrow<V::SelfType<'v>>,
    {
        match self {
            Entry::Occupied(o) => Ok(o.value),
            Entry::Vacant(v) => v.insert(default()),
        }
    }

    /// The value, inserting what `default` makes of the key first if the
    /// key is absent (`default` is not called otherwise).
    pub fn or_insert_with_key<'v, B>(
        self,
        default: impl FnOnce(K::SelfType<'_>) -> B,
    ) -> Result<AccessGuard<V>>
    where
        V: 'v,
        B: Borrow<V::SelfType<'v>>,
    {
        match self {
            Entry::Occupied(o) => Ok(o.value),
            Entry::Vacant(v) => {
                let bytes = encode_value::<V>(default(v.key()?).borrow());
                v.insert_raw(bytes)
            }
        }
    }

    /// If the key has a value, replaces it with what `f` makes of it.
    pub fn and_modify<'v, B>(self, f: impl FnOnce(V::SelfType<'_>) -> B) -> Result<Self>
    where
        V: 'v,
        B: Borrow<V::SelfType<'v>>,
    {
        match self {
            Entry::Occupied(mut o) => {
                let new = encode_value::<V>(f(o.value.value()).borrow());
                o.set_raw(new)?;
                Ok(Entry::Occupied(o))
            }
            vacant => Ok(vacant),
        }
    }

    /// The encoded key.
    pub fn key_bytes(&self) -> &[u8] {
        match self {
            Entry::Occupied(o) => &o.key,
            Entry::Vacant(v) => &v.key,
        }
    }
}

/// A key with a value ([`Entry::Occupied`], [`Table::get_mut`]).
pub struct OccupiedEntry<'a, 'txn, K: Key + 'static, V: Value + 'static> {
    table: &'a mut Table<'txn, K, V>,
    key: Vec<u8>,
    value: AccessGuard<V>,
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for OccupiedEntry<'_, '_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OccupiedEntry")
            .field("value", &self.value)
            .finish()
    }
}

impl<K: Key + 'static, V: Value + 'static> OccupiedEntry<'_, '_, K, V> {
    /// The current value.
    pub fn value(&self) -> V::SelfType<'_> {
        self.value.value()
    }

    /// The key.
    pub fn key(&self) -> Result<K::SelfType<'_>> {
        K::decode_key(&self.key)
    }

    fn set_raw(&mut self, new: Vec<u8>) -> Result<AccessGuard<V>> {
        self.table.put_raw(&self.key, Some(&new))?;
        let old = std::mem::replace(&mut self.value, AccessGuard::new(Held::Shared(new.into()))?);
        Ok(old)
    }

    /// Replaces the value; returns the old one.
    pub fn insert<'v>(&mut self, value: impl Borrow<V::SelfType<'v>>) -> Result<AccessGuard<V>>
    where
        V: 'v,
    {
        self.set_raw(encode_value::<V>(value.borrow()))
    }

    /// Removes the key; returns its value.
    pub fn remove(self) -> Result<AccessGuard<V>> {
        self.table.put_raw(&self.key, None)?;
        Ok(self.value)
    }

    /// Removes the key; returns it and its value.
    pub fn remove_entry(self) -> Result<(KeyGuard<K>, AccessGuard<V>)> {
        self.table.put_raw(&self.key, None)?;
        Ok((key_guard(self.key)?, self.value))
    }
}

/// An absent key ([`Entry::Vacant`]).
pub struct VacantEntry<'a, 'txn, K: Key + 'static, V: Value + 'static> {
    table: &'a mut Table<'txn, K, V>,
    key: Vec<u8>,
}

impl<K: Key + 'static, V: Value + 'static> VacantEntry<'_, '_, K, V> {
    /// The key.
    pub fn key(&self) -> Result<K::SelfType<'_>> {
        K::decode_key(&self.key)
    }

    /// Inserts `value`; returns it.
    pub fn insert<'v>(self, value: impl Borrow<V::SelfType<'v>>) -> Result<AccessGuard<V>>
    where
        V: 'v,
    {
        self.insert_raw(encode_value::<V>(value.borrow()))
    }

    /// The key, giving up the entry without inserting.
    pub fn into_key(self) -> Result<KeyGuard<K>> {
        key_guard(self.key)
    }

    fn insert_raw(self, bytes: Vec<u8>) -> Result<AccessGuard<V>> {
        self.table.put_raw(&self.key, Some(&bytes))?;
        AccessGuard::new(Held::Shared(bytes.into()))
    }
}

/// A guard over an entry's encoded key, given up by the entry.
fn key_guard<K: Key + 'static>(key: Vec<u8>) -> Result<KeyGuard<K>> {
    KeyGuard::new(Held::Shared(key.into()))
}

/// A value type whose encoding is its bytes as given, so a value can be
/// written in place ([`Table::insert_reserve`]): `&[u8]` and `Vec<u8>`.
/// Implement it for your own `Value` only if every byte string is a valid
/// encoding of it.
pub trait MutInPlaceValue: Value {}

impl MutInPlaceValue for &[u8] {}
impl MutInPlaceValue for Vec<u8> {}

impl<'txn, K: Key + 'static, V: MutInPlaceValue + 'static> Table<'txn, K, V> {
    /// Reserves a value of `len` bytes (zeroed) under `key`, to be written
    /// in place through the returned handle; it is stored when the handle
    /// is finished ([`ReservedValue::finish`]) or dropped.
    /// `ValueTooLarge`/`KeyTooLarge` at once if it cannot fit. Through an
    /// untyped handle, `InvalidArgument` at once if the key is not an
    /// encoding of the table's key type or `len` is not the width of its
    /// fixed-width value type; bytes written that are still not an
    /// encoding of the value type are refused when stored (`finish`
    /// returns `InvalidArgument`; a drop fails the transaction, as any
    /// failure to store a dropped reservation does).
    pub fn insert_reserve<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        len: usize,
    ) -> Result<ReservedValue<'_, 'txn, K, V>>
    where
        K: 'k,
    {
        let key = encode_key::<K>(key.borrow());
        // Checked before the buffer is allocated: an impossible length is
        // an error, not an allocation failure.
        let max = btree::max_value_len();
        if len > max {
            return Err(Error::ValueTooLarge { len, max });
        }
        self.check_reserve(&key, len)?;
        let bytes = vec![0; len];
        let id = {
            let mut st = self.txn.state()?;
            st.check_not_failed()?;
            let ps = btree::store::PageRead::page_size(&st.pages);
            btree::check_limits(ps, &key, &[])?;
            st.reserving.take()
        };
        Ok(ReservedValue {
            table: self,
            id,
            key,
            bytes,
            stored: false,
        })
    }
}

/// A value being written in place ([`Table::insert_reserve`]). Derefs to
/// its bytes; stored by [`ReservedValue::finish`], or when dropped (a
/// failure then fails the transaction: `commit` reports it). Dropped by a
/// panic, it is not stored and the transaction fails.
pub struct ReservedValue<'a, 'txn, K: Key + 'static, V: Value + 'static> {
    table: &'a mut Table<'txn, K, V>,
    /// Its number among the transaction's reservations.
    id: u64,
    key: Vec<u8>,
    bytes: Vec<u8>,
    stored: bool,
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for ReservedValue<'_, '_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReservedValue")
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl<K: Key + 'static, V: Value + 'static> std::ops::Deref for ReservedValue<'_, '_, K, V> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl<K: Key + 'static, V: Value + 'static> std::ops::DerefMut for ReservedValue<'_, '_, K, V> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl<K: Key + 'static, V: Value + 'static> AsMut<[u8]> for ReservedValue<'_, '_, K, V> {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl<K: Key + 'static, V: Value + 'static> ReservedValue<'_, '_, K, V> {
    fn store(&mut self) -> Result<Option<AccessGuard<V>>> {
        self.stored = true;
        self.unreserve();
        let old = self.table.put_raw(&self.key, Some(&self.bytes))?;
        opt_value(old)
    }

    /// This value no longer counts as handed out (stored, or dropped by
    /// a panic).
    fn unreserve(&mut self) {
        if let Ok(mut st) = self.table.txn.state() {
            st.reserving.release(self.id);
        }
    }

    /// Stores the value; returns the key's old value.
    pub fn finish(mut self) -> Result<Option<AccessGuard<V>>> {
        self.store()
    }
}

impl<K: Key + 'static, V: Value + 'static> Drop for ReservedValue<'_, '_, K, V> {
    fn drop(&mut self) {
        if !self.stored && std::thread::panicking() {
            // Dropped by a panic while the value was being written: its
            // bytes are unfinished. Not stored, and the transaction fails,
            // so it cannot commit without the value it was promised.
            self.unreserve();
            if let Ok(mut st) = self.table.txn.state() {
                let _ = st.fail_with(Error::InvalidArgument(
                    "a panic interrupted writing a reserved value".into(),
                ));
            }
            return;
        }
        if !self.stored {
            if let Err(e) = self.store() {
                // Nothing to return it to: the transaction is failed, so
                // `commit` reports it instead of committing without it.
                if let Ok(mut st) = self.table.txn.state() {
                    let _ = st.fail_with(e);
                }
            }
        }
    }
}
