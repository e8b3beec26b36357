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
use crate::buffer::ends::EndHints;
use crate::buffer::merge::{self, BufferWalk, TreeWalk, Window, WritesLayer};
use crate::buffer::Held;
use crate::error::{Error, Result};
use crate::table::dynamic::{self, DynType};
use crate::table::types::{Key, Value};
use crate::txn::pages::{ReadPages, TxnPages};
use crate::txn::{CfVersion, WriteCore, WriteState};
use crate::types::TableId;

/// Declares a guard type: stored bytes of one key or value, decoded on
/// demand by `$decode` (validated once when the guard is made).
macro_rules! guard {
    ($(#[$doc:meta])* $name:ident, $trait:ident, $decode:ident) => {
        $(#[$doc])*
        pub struct $name<T: $trait + 'static> {
            bytes: Held,
            _t: PhantomData<fn() -> T>,
        }

        impl<T: $trait + 'static> std::fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.value())
            }
        }

        impl<T: $trait + 'static> $name<T> {
            pub(crate) fn new(bytes: Held) -> Result<$name<T>> {
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

            /// The stored bytes, still shared with the page.
            #[allow(dead_code, reason = "multimaps split key guards only")]
            pub(crate) fn into_held(self) -> Held {
                self.bytes
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

pub(super) type Entry<K, V> = (KeyGuard<K>, AccessGuard<V>);

pub(super) fn entry<K: Key + 'static, V: Value + 'static>(k: Held, v: Held) -> Result<Entry<K, V>> {
    Ok((KeyGuard::new(k)?, AccessGuard::new(v)?))
}

pub(super) fn opt_value<V: Value + 'static>(b: Option<Held>) -> Result<Option<AccessGuard<V>>> {
    b.map(AccessGuard::new).transpose()
}

pub(super) fn page_value<V: Value + 'static>(b: Option<Bytes>) -> Result<Option<AccessGuard<V>>> {
    opt_value(b.map(Held::Page))
}

pub(super) fn encode_key<K: Key>(k: &K::SelfType<'_>) -> Vec<u8> {
    let mut v = Vec::new();
    K::encode_key(k, &mut v);
    v
}

thread_local! {
    /// A buffer point reads encode their key into, so a lookup allocates
    /// nothing once the thread's buffer is large enough.
    static KEY_BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Runs `f` on the encoding of `k`, in this thread's reusable buffer (a
/// nested call, which finds the buffer taken, uses a fresh one).
pub(super) fn with_key<K: Key, R>(k: &K::SelfType<'_>, f: impl FnOnce(&[u8]) -> R) -> R {
    let mut buf = KEY_BUF.with(|b| b.take());
    buf.clear();
    K::encode_key(k, &mut buf);
    let r = f(&buf);
    // An oversized key (refused by the write that encoded it) must not stay
    // allocated for the thread's life.
    if buf.capacity() <= BUF_KEEP {
        KEY_BUF.with(|b| b.set(buf));
    }
    r
}

thread_local! {
    /// A buffer writes encode their value into (see [`with_key_value`]).
    static VALUE_BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Capacity above which a key or value buffer is freed after use rather
/// than kept: one large value must not stay allocated for the thread's
/// life.
const BUF_KEEP: usize = 64 << 10;

/// Runs `f` on the encodings of `k` and `v`, in this thread's reusable
/// buffers: a write allocates nothing for them (the write set then makes
/// its own copies), where two `Vec`s per write were allocated and freed.
pub(super) fn with_key_value<K: Key, V: Value, R>(
    k: &K::SelfType<'_>,
    v: &V::SelfType<'_>,
    f: impl FnOnce(&[u8], &[u8]) -> R,
) -> R {
    with_key::<K, R>(k, |k| {
        let mut buf = VALUE_BUF.with(|b| b.take());
        buf.clear();
        V::encode_value(v, &mut buf);
        let r = f(k, &buf);
        if buf.capacity() <= BUF_KEEP {
            VALUE_BUF.with(|b| b.set(buf));
        }
        r
    })
}

pub(super) fn encode_value<V: Value>(val: &V::SelfType<'_>) -> Vec<u8> {
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

/// `range`'s bounds, encoded; a bound that includes the least (greatest)
/// key `K` can encode is made open, as it leaves out no key: a walk from
/// an open side may then record the table's end there (design.md "End
/// hints"), so draining a table by `range(0u64..)` in one transaction
/// does not walk its tombstones again per key.
pub(super) fn encode_bounds<'a, K: Key + 'a, KR: Borrow<K::SelfType<'a>>>(
    range: &impl RangeBounds<KR>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let lo = encode_bound::<K, KR>(range.start_bound());
    let hi = encode_bound::<K, KR>(range.end_bound());
    let lo = match lo {
        Bound::Included(k) if is_least_key::<K>(&k) => Bound::Unbounded,
        lo => lo,
    };
    let hi = match hi {
        Bound::Included(k) if is_greatest_key::<K>(&k) => Bound::Unbounded,
        hi => hi,
    };
    (lo, hi)
}

/// True if no encoding of a `K` is below `k`: the empty encoding, or a
/// fixed-width type's all-zero one (every encoding is exactly that wide,
/// `Value::fixed_width`, and keys compare by their bytes).
pub(super) fn is_least_key<K: Key>(k: &[u8]) -> bool {
    k.is_empty() || K::fixed_width() == Some(k.len()) && k.iter().all(|&b| b == 0)
}

/// True if no encoding of a `K` is above `k`: a fixed-width type's
/// all-`FF` one.
pub(super) fn is_greatest_key<K: Key>(k: &[u8]) -> bool {
    K::fixed_width() == Some(k.len()) && k.iter().all(|&b| b == 0xFF)
}

pub(super) fn as_ref_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

enum Source<'t> {
    /// A snapshot: its tree's cursor. The version is held so the
    /// snapshot's pages stay alive.
    Read {
        pages: ReadPages,
        cursor: Cursor,
        _version: Arc<CfVersion>,
    },
    /// A snapshot with buffered commits: the merged view of its buffer (at
    /// its version) over its tree.
    Snapshot {
        pages: ReadPages,
        table: TableId,
        window: Window,
        tree: TreeWalk,
        buffered: BufferWalk,
        version: Arc<CfVersion>,
        /// Tombstones walked and not yet added to the buffer's sum.
        walked: u64,
    },
    /// A write transaction: the merged view of its pending writes over the
    /// table's tree, re-read under the state lock at each step. `made_for`
    /// is the tree root (and whether the base's buffer was folded) the
    /// tree walk was made for: a spill of any table folds the buffer into
    /// every tree, and the walk is then made again from the window.
    Write {
        txn: &'t WriteCore,
        table: TableId,
        window: Window,
        tree: TreeWalk,
        buffered: BufferWalk,
        made_for: (TreeRoot, bool),
        /// Tombstones walked and not yet added to the buffer's sum.
        walked: u64,
        /// Per side (front, back): the window starts where a walk of the
        /// whole table would and nothing was yielded from that side yet,
        /// so the first entry found there is the table's live end, an end
        /// hint (E1). Without it, taking the first entry and removing it
        /// over and over walked every tombstone left before (O(n²)).
        open_ends: [bool; 2],
    },
}

/// A double-ended iterator over a key range, yielding `(key, value)` guards.
pub struct Range<'t, K: Key + 'static, V: Value + 'static> {
    source: Source<'t>,
    done: bool,
    _kv: PhantomData<fn() -> (K, V)>,
}

/// One step of the merged view of `table` in `st` (its pending writes over
/// its tree). Adds the buffered tombstones it walks past to `walked`, and
/// hands the count to the buffer once it reaches [`WALKED_REPORT`]; the
/// fold that asks for is left to the transaction's end
/// ([`WriteState::fold_asked`]; design.md "Tombstone walks").
pub(super) fn merged_step(
    st: &mut WriteState,
    table: TableId,
    window: &mut Window,
    (tree, buffered): (&mut TreeWalk, &mut BufferWalk),
    back: bool,
    walked: &mut u64,
) -> Result<Option<(Held, Held)>> {
    let mut writes = WritesLayer(st.writes.table(table));
    let mut tree = tree.with(&st.pages);
    match st.buffer_at() {
        Some((buf, at)) => {
            let mut buffered = buffered.with(buf, table, at);
            let r = merge::step(
                &mut [&mut writes, &mut buffered, &mut tree],
                window,
                back,
                walked,
            );
            let asked = *walked >= WALKED_REPORT && buf.count_walked(std::mem::take(walked));
            st.fold_asked |= asked;
            r
        }
        None => merge::step(&mut [&mut writes, &mut tree], window, back, walked),
    }
}

impl<'t, K: Key + 'static, V: Value + 'static> Range<'t, K, V> {
    fn step(&mut self, back: bool) -> Option<Result<Entry<K, V>>> {
        if self.done {
            return None;
        }
        let r = match &mut self.source {
            Source::Read { pages, cursor, .. } => {
                let r = if back {
                    cursor.next_back(pages)
                } else {
                    cursor.next(pages)
                };
                r.map(|o| o.map(|(k, v)| (Held::Page(k), Held::Page(v))))
            }
            Source::Snapshot {
                pages,
                table,
                window,
                tree,
                buffered,
                version,
                walked,
            } => {
                let mut buffered = buffered.with(&version.buffer, *table, version.version);
                let mut tree = tree.with(&*pages);
                let r = merge::step(&mut [&mut buffered, &mut tree], window, back, walked);
                if *walked >= WALKED_REPORT {
                    version.buffer.note_walked(std::mem::take(walked));
                }
                r
            }
            Source::Write {
                txn,
                table,
                window,
                tree,
                buffered,
                made_for,
                walked,
                open_ends,
            } => match txn.state() {
                Ok(mut st) => {
                    let tree_now = st.table_by_id(*table).map(|t| t.root());
                    let now = (tree_now.unwrap_or(made_for.0), st.folded);
                    if now != *made_for {
                        *tree = TreeWalk::new(&now.0, window);
                        *buffered = BufferWalk::default();
                        *made_for = now;
                    }
                    let r = merged_step(&mut st, *table, window, (tree, buffered), back, walked);
                    let open = &mut open_ends[usize::from(back)];
                    if let (true, Ok(Some((k, _)))) = (std::mem::take(open), &r) {
                        EndHints::end_into(&mut st.ends, *table, k, back);
                    }
                    r
                }
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

/// A table in a snapshot: its tree plus the buffered commits the snapshot
/// sees.
pub struct ReadOnlyTable<K: Key + 'static, V: Value + 'static> {
    pages: ReadPages,
    id: TableId,
    root: TreeRoot,
    /// Entries, buffered commits included.
    len: u64,
    version: Arc<CfVersion>,
    _kv: PhantomData<fn() -> (K, V)>,
}

/// Tombstones a snapshot range walks before it adds them to its buffer's
/// sum ([`MemBuffer::note_walked`](crate::buffer::mem::MemBuffer::note_walked)):
/// one shared-counter update per so many, not per tombstone.
const WALKED_REPORT: u64 = 256;

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for ReadOnlyTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyTable")
            .field("root", &self.root)
            .finish()
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadOnlyTable<K, V> {
    pub(crate) fn new(
        pages: ReadPages,
        id: TableId,
        root: TreeRoot,
        version: Arc<CfVersion>,
    ) -> Result<Self> {
        let len = root
            .len
            .checked_add_signed(version.delta(id))
            .ok_or_else(|| {
                Error::corrupted(format!("table {id}: entry count below zero"), "table tree")
            })?;
        Ok(ReadOnlyTable {
            pages,
            id,
            root,
            len,
            version,
            _kv: PhantomData,
        })
    }

    /// The snapshot's pages and the table's tree root.
    pub(super) fn tree(&self) -> (&ReadPages, &TreeRoot) {
        (&self.pages, &self.root)
    }

    /// True if the snapshot reads buffered commits above the tree.
    fn buffered(&self) -> bool {
        self.version.buffer.entries() > 0
    }

    /// A range over the snapshot, taking the encoded bounds it keeps.
    pub(super) fn read_range(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
    ) -> Range<'static, K, V> {
        let source = if self.buffered() {
            // The version's end hints skip the removed keys a queue leaves
            // at an end (E1).
            let (l, h) = (self.version.ends).narrow(self.id, as_ref_bound(&lo), as_ref_bound(&hi));
            let window = Window::new(l, h);
            Source::Snapshot {
                pages: self.pages.clone(),
                table: self.id,
                tree: TreeWalk::new(&self.root, &window),
                buffered: BufferWalk::default(),
                window,
                version: self.version.clone(),
                walked: 0,
            }
        } else {
            Source::Read {
                pages: self.pages.clone(),
                cursor: Cursor::with_bounds(&self.root, lo, hi),
                _version: self.version.clone(),
            }
        };
        Range {
            source,
            done: false,
            _kv: PhantomData,
        }
    }

    /// The value stored under `key`.
    pub fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<Option<AccessGuard<V>>>
    where
        K: 'a,
    {
        with_key::<K, _>(key.borrow(), |k| {
            let v = &self.version;
            if let Some(slot) = v.buffer.get(self.id, k, v.version) {
                return opt_value(slot.map(Held::Shared));
            }
            page_value(btree::get(&self.pages, &self.root, k)?)
        })
    }

    /// Entries with keys in `range`, ascending (reverse with `.rev()`).
    pub fn range<'a, KR>(&self, range: impl RangeBounds<KR>) -> Result<Range<'static, K, V>>
    where
        K: 'a,
        KR: Borrow<K::SelfType<'a>>,
    {
        let (start, end) = encode_bounds::<K, KR>(&range);
        Ok(self.read_range(start, end))
    }

    /// All entries, ascending.
    pub fn iter(&self) -> Result<Range<'static, K, V>> {
        Ok(self.read_range(Bound::Unbounded, Bound::Unbounded))
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
        Ok(self.len)
    }

    /// True if the table has no entries.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len == 0)
    }
}

/// A table open in a write transaction. Reads see the transaction's own
/// writes.
///
/// Neither `Send` nor `Sync`: it belongs to the thread using its
/// transaction (a handle used from another thread while this one runs an
/// `extract_if`/`retain` predicate would wait for it for ever).
pub struct Table<'txn, K: Key + 'static, V: Value + 'static> {
    pub(super) txn: &'txn WriteCore,
    pub(super) name: String,
    /// For an untyped handle: the table's built-in types its writes are
    /// checked against.
    check: Option<Box<UntypedCheck>>,
    _not_send: PhantomData<*const ()>,
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

/// What an untyped handle ([`crate::UntypedTable`]) checks its writes
/// against: the table's key and value types where [`DynType`] knows them
/// (`None` for a user-defined type, or `bytes`, whose every byte string
/// is an encoding). A key or value that is not an encoding of its type
/// is refused with `InvalidArgument` before anything is written, so a
/// typed reader never meets it as `Corrupted` data.
#[derive(Debug)]
pub(crate) struct UntypedCheck {
    key: Option<DynType>,
    value: Option<DynType>,
    /// A multimap table's stored key is a pair: the key encodings of its
    /// key and value types (`None` where a type is not built-in).
    multimap: Option<(Option<DynType>, Option<DynType>)>,
}

impl UntypedCheck {
    /// The check for a table of these catalog type names; `None` if
    /// there is nothing to check.
    fn new(key_type: &str, value_type: &str) -> Option<Box<UntypedCheck>> {
        let known = |name: &str| DynType::parse(name).filter(|t| *t != DynType::Bytes);
        let (key, value) = (known(key_type), known(value_type));
        let multimap = (dynamic::multimap_types(key_type))
            .map(|(k, v)| (DynType::parse(k), DynType::parse(v)));
        let checks = key.is_some() || value.is_some() || multimap.is_some();
        checks.then(|| {
            Box::new(UntypedCheck {
                key,
                value,
                multimap,
            })
        })
    }

    fn pair(&self, table: &str, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        if let Some(ty) = &self.key {
            if ty.decode_key(key).is_err() {
                return Err(refuse(table, "key", key.len(), ty));
            }
        }
        if let Some(types) = &self.multimap {
            check_multimap_pair(table, key, types)?;
        }
        if let (Some(ty), Some(v)) = (&self.value, value) {
            if ty.decode_value(v).is_err() {
                return Err(refuse(table, "value", v.len(), ty));
            }
        }
        Ok(())
    }

    /// [`UntypedCheck::pair`] for a reservation: the key, and the value's
    /// length where the value type has one width.
    fn reserve(&self, table: &str, key: &[u8], len: usize) -> Result<()> {
        self.pair(table, key, None)?;
        match &self.value {
            Some(ty) if ty.fixed_width().is_some_and(|w| w != len) => {
                Err(refuse(table, "value", len, ty))
            }
            _ => Ok(()),
        }
    }
}

/// `InvalidArgument` unless `stored` is a multimap pair of key encodings
/// of `types` (each checked where it is built-in).
fn check_multimap_pair(
    table: &str,
    stored: &[u8],
    types: &(Option<DynType>, Option<DynType>),
) -> Result<()> {
    let Ok((key, value)) = dynamic::split_multimap_pair(stored) else {
        return Err(Error::InvalidArgument(format!(
            "table {table:?}: the key ({} bytes) is not a multimap pair (the escaped key, \
             00 00, then the value's key encoding); nothing was written",
            stored.len()
        )));
    };
    for (what, bytes, ty) in [("key", &key[..], &types.0), ("value", value, &types.1)] {
        if let Some(ty) = ty.as_ref().filter(|t| **t != DynType::Bytes) {
            if ty.decode_key(bytes).is_err() {
                return Err(refuse(
                    table,
                    &format!("multimap pair's {what}"),
                    bytes.len(),
                    ty,
                ));
            }
        }
    }
    Ok(())
}

/// The refusal of an untyped write whose `what` (key or value) of `len`
/// bytes is not an encoding of `ty`.
fn refuse(table: &str, what: &str, len: usize, ty: &DynType) -> Error {
    Error::InvalidArgument(format!(
        "table {table:?}: the {what} ({len} bytes) is not an encoding of {ty}, \
         the table's {what} type; nothing was written"
    ))
}

impl<'txn, K: Key + 'static, V: Value + 'static> Table<'txn, K, V> {
    pub(crate) fn new(txn: &'txn WriteCore, name: String) -> Self {
        Table {
            txn,
            name,
            check: None,
            _not_send: PhantomData,
            _kv: PhantomData,
        }
    }

    /// A handle that writes the encodings of `key_type` and `value_type`
    /// (the table's catalog type names) as given bytes: each write's key
    /// and value are checked to be encodings of those types where they
    /// are built-in ([`UntypedCheck`]).
    pub(crate) fn untyped(
        txn: &'txn WriteCore,
        name: String,
        key_type: &str,
        value_type: &str,
    ) -> Self {
        let mut table = Table::new(txn, name);
        table.check = UntypedCheck::new(key_type, value_type);
        table
    }

    /// `InvalidArgument` if this is an untyped handle and a value of `len`
    /// bytes under `key` cannot be an encoding of the table's types (a
    /// bad key, or a fixed-width value type of another width): checked
    /// when `insert_reserve` is asked, while the error can still be
    /// returned rather than fail the transaction at a drop.
    pub(super) fn check_reserve(&self, key: &[u8], len: usize) -> Result<()> {
        match &self.check {
            Some(check) => check.reserve(&self.name, key, len),
            None => Ok(()),
        }
    }

    /// `InvalidArgument` if this is an untyped handle and `key` or `value`
    /// is not an encoding of the table's type: nothing is written.
    pub(super) fn check_pair(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        match &self.check {
            Some(check) => check.pair(&self.name, key, value),
            None => Ok(()),
        }
    }

    /// The table's id, tree root and entry count (pending writes
    /// included), after settling its blind removals ([`Table::delete`]).
    pub(super) fn settled_info(&self, st: &mut WriteState) -> Result<(TableId, TreeRoot, u64)> {
        let (id, _) = self.tree_of(st)?;
        st.settle_deletes(id).map_err(|e| st.fail(e))?;
        st.table_info(&self.name)
    }

    /// The table's id and tree root.
    pub(super) fn tree_of(&self, st: &WriteState) -> Result<(TableId, TreeRoot)> {
        st.table_ref(&self.name)
    }

    /// For a table in direct mode (see `TableState::direct`): runs `f` on
    /// its tree, stores the new root and logs what `log` says. `None` if
    /// the table is not in direct mode. A failure after pages may have
    /// changed fails the transaction.
    fn direct<R>(
        &self,
        st: &mut WriteState,
        f: impl FnOnce(&mut TxnPages, &mut TreeRoot) -> Result<R>,
        log: impl FnOnce(&mut WriteState, TableId, &R),
    ) -> Option<Result<R>> {
        let t = st.tables.get_mut(&self.name).filter(|t| t.direct)?;
        let id = t.meta.id;
        let mut root = t.root();
        let r = f(&mut st.pages, &mut root);
        t.set_root(root);
        Some(r.map_err(|e| st.fail(e)).inspect(|r| log(st, id, r)))
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
        with_key_value::<K, V, _>(key.borrow(), value.borrow(), |k, v| {
            self.check_pair(k, Some(v))?;
            let mut st = self.txn.state()?;
            st.check_not_failed()?;
            btree::check_limits(btree::store::PageRead::page_size(&st.pages), k, v)?;
            let put = |p: &mut TxnPages, r: &mut TreeRoot| btree::insert(p, r, k, v);
            let log = |st: &mut WriteState, table, old: &Option<Bytes>| {
                st.log_write(table, k, Some(v), old.is_some());
            };
            if let Some(old) = self.direct(&mut st, put, log) {
                return page_value(old?);
            }
            let (id, root) = self.tree_of(&st)?;
            let old = st.lookup(id, &root, k)?;
            st.write(id, k, Some(v), &old)?;
            opt_value(old)
        })
    }

    /// Removes `key`; returns the old value.
    pub fn remove<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
    ) -> Result<Option<AccessGuard<V>>>
    where
        K: 'k,
    {
        with_key::<K, _>(key.borrow(), |k| {
            let mut st = self.txn.state()?;
            st.check_not_failed()?;
            let del = |p: &mut TxnPages, r: &mut TreeRoot| btree::remove(p, r, k);
            let log = |st: &mut WriteState, table, old: &Option<Bytes>| {
                if old.is_some() {
                    st.log_write(table, k, None, true);
                }
            };
            if let Some(old) = self.direct(&mut st, del, log) {
                return page_value(old?);
            }
            let (id, root) = self.tree_of(&st)?;
            let old = st.lookup(id, &root, k)?;
            if old.is_some() {
                st.write(id, k, None, &old)?;
            }
            opt_value(old)
        })
    }

    /// Removes `key` if present, without reading what it held: the
    /// cheapest removal in a transaction that removes many keys (`remove`
    /// descends the tree for every key to return its value). The table's
    /// count is settled, one pass in key order over the removed keys, when
    /// `len` asks or at commit; a transaction large enough to be applied
    /// to the tree before commit removes them there in key order.
    pub fn delete<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<()>
    where
        K: 'k,
    {
        with_key::<K, _>(key.borrow(), |k| {
            let mut st = self.txn.state()?;
            st.check_not_failed()?;
            let (id, _) = self.tree_of(&st)?;
            st.delete_blind(id, k)
        })
    }

    /// The value stored under `key` (including this transaction's writes).
    pub fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<Option<AccessGuard<V>>>
    where
        K: 'a,
    {
        with_key::<K, _>(key.borrow(), |k| {
            let st = self.txn.state()?;
            let (id, root) = self.tree_of(&st)?;
            opt_value(st.lookup(id, &root, k)?)
        })
    }

    pub(super) fn write_range(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Result<Range<'_, K, V>> {
        let st = self.txn.state()?;
        let (table, root) = self.tree_of(&st)?;
        let (lo, hi) = st.ends.narrow(table, lo, hi);
        let open_ends = st.ends.open_sides(table, lo, hi);
        let window = Window::new(lo, hi);
        let tree = TreeWalk::new(&root, &window);
        Ok(Range {
            source: Source::Write {
                txn: self.txn,
                table,
                window,
                tree,
                buffered: BufferWalk::default(),
                made_for: (root, st.folded),
                walked: 0,
                open_ends,
            },
            done: false,
            _kv: PhantomData,
        })
    }

    /// Entries with keys in `range`, ascending (reverse with `.rev()`).
    pub fn range<'a, KR>(&self, range: impl RangeBounds<KR>) -> Result<Range<'_, K, V>>
    where
        K: 'a,
        KR: Borrow<K::SelfType<'a>>,
    {
        let (start, end) = encode_bounds::<K, KR>(&range);
        self.write_range(as_ref_bound(&start), as_ref_bound(&end))
    }

    /// All entries, ascending.
    pub fn iter(&self) -> Result<Range<'_, K, V>> {
        self.write_range(Bound::Unbounded, Bound::Unbounded)
    }

    /// The entry with the smallest key.
    pub fn first(&self) -> Result<Option<Entry<K, V>>> {
        self.end(false)
    }

    /// The entry with the largest key.
    pub fn last(&self) -> Result<Option<Entry<K, V>>> {
        self.end(true)
    }

    /// The entry at the front or the back.
    fn end(&self, back: bool) -> Result<Option<Entry<K, V>>> {
        let mut st = self.txn.state()?;
        let found = self.end_entry(&mut st, back)?;
        found.map(|(_, k, v)| entry(k, v)).transpose()
    }

    /// The live entry at one end of the merged view, found from the end
    /// hint; records it as the new hint (E1: nothing live lies before it).
    fn end_entry(&self, st: &mut WriteState, back: bool) -> Result<Option<(TableId, Held, Held)>> {
        let (id, root) = self.tree_of(st)?;
        let (lo, hi) = st.ends.narrow(id, Bound::Unbounded, Bound::Unbounded);
        let mut window = Window::new(lo, hi);
        let mut tree = TreeWalk::new(&root, &window);
        let walks = (&mut tree, &mut BufferWalk::default());
        let Some((k, v)) = merged_step(st, id, &mut window, walks, back, &mut 0)? else {
            return Ok(None);
        };
        EndHints::end_into(&mut st.ends, id, &k, back);
        Ok(Some((id, k, v)))
    }

    /// Removes and returns the entry at one end of the merged view.
    fn pop(&mut self, back: bool) -> Result<Option<Entry<K, V>>> {
        let mut st = self.txn.state()?;
        st.check_not_failed()?;
        let Some((id, k, v)) = self.end_entry(&mut st, back)? else {
            return Ok(None);
        };
        let popped = entry(k.clone(), v.clone())?;
        st.write(id, &k, None, &Some(v))?;
        Ok(Some(popped))
    }

    /// Removes and returns the entry with the smallest key.
    pub fn pop_first(&mut self) -> Result<Option<Entry<K, V>>> {
        self.pop(false)
    }

    /// Removes and returns the entry with the largest key.
    pub fn pop_last(&mut self) -> Result<Option<Entry<K, V>>> {
        self.pop(true)
    }

    /// Number of entries (O(1)), this transaction's writes included.
    pub fn len(&self) -> Result<u64> {
        let mut st = self.txn.state()?;
        Ok(self.settled_info(&mut st)?.2)
    }

    /// True if the table has no entries.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}
