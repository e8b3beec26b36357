//! What every table handle can read: the [`ReadableTable`] trait, shared by
//! [`ReadOnlyTable`] (a snapshot) and [`Table`] (a write transaction, its
//! own writes included), so generic code can take either; and
//! [`TableStats`], what a table's pages hold.
//!
//! Must not know: pages layouts (the counts come from `btree::tree_stats`),
//! files, the WAL.

use std::borrow::Borrow;
use std::ops::RangeBounds;

use super::access::{AccessGuard, Entry, Range, ReadOnlyTable, Table};
use super::types::{Key, Value};
use crate::btree::{self, TreeStats};
use crate::error::Result;

/// Reads shared by [`ReadOnlyTable`] and [`Table`]. Each method is the
/// inherent method of the same name.
///
/// ```
/// use sheafdb::{Database, ReadableTable, Result, TableDefinition};
/// const T: TableDefinition<u32, u64> = TableDefinition::new("t");
///
/// fn total(t: &impl ReadableTable<u32, u64>) -> Result<u64> {
///     t.iter()?.map(|e| e.map(|(_, v)| v.value())).sum()
/// }
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("r.sheaf")).unwrap();
/// let tx = db.begin_write()?;
/// {
///     let mut t = tx.open_table(T)?;
///     t.insert(1, 5)?;
///     t.insert(2, 7)?;
///     assert_eq!(total(&t)?, 12); // a write table
/// }
/// tx.commit()?;
/// assert_eq!(total(&db.begin_read()?.open_table(T)?)?, 12); // a snapshot's
/// # Ok::<(), sheafdb::Error>(())
/// ```
pub trait ReadableTable<K: Key + 'static, V: Value + 'static> {
    /// The value stored under `key`.
    fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<Option<AccessGuard<V>>>
    where
        K: 'a;

    /// Entries with keys in `range`, ascending (reverse with `.rev()`).
    fn range<'a, KR>(&self, range: impl RangeBounds<KR>) -> Result<Range<'_, K, V>>
    where
        K: 'a,
        KR: Borrow<K::SelfType<'a>>;

    /// All entries, ascending.
    fn iter(&self) -> Result<Range<'_, K, V>>;

    /// The entry with the smallest key.
    fn first(&self) -> Result<Option<Entry<K, V>>>;

    /// The entry with the largest key.
    fn last(&self) -> Result<Option<Entry<K, V>>>;

    /// Number of entries (O(1)).
    fn len(&self) -> Result<u64>;

    /// True if the table has no entries.
    fn is_empty(&self) -> Result<bool>;

    /// What the table's pages hold (reads every page of its tree once).
    fn stats(&self) -> Result<TableStats>;
}

/// What a table holds and how its pages are used
/// ([`ReadableTable::stats`]). Entries not yet folded into the tree (in
/// the write buffer, or pending in a write transaction) count in
/// `entries` but have no pages yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableStats {
    /// Entries, as `len()` counts them.
    pub entries: u64,
    /// Entries stored in the tree's pages.
    pub tree_entries: u64,
    /// Levels of the tree (0 for a table without pages).
    pub tree_height: u32,
    /// Leaf pages.
    pub leaf_pages: u64,
    /// Branch pages.
    pub branch_pages: u64,
    /// Pages of overflow runs (values too large for a leaf).
    pub overflow_pages: u64,
    /// Bytes of keys and values stored in the tree's pages.
    pub stored_bytes: u64,
    /// Bytes of page headers, slots, cell headers and separators.
    pub metadata_bytes: u64,
    /// Bytes of the tree's pages that hold nothing.
    pub fragmented_bytes: u64,
    /// Page size in bytes.
    pub page_size: u64,
}

impl TableStats {
    pub(crate) fn of(tree: TreeStats, entries: u64, page_size: usize) -> TableStats {
        TableStats {
            entries,
            tree_entries: tree.entries,
            tree_height: tree.height,
            leaf_pages: tree.leaf_pages,
            branch_pages: tree.branch_pages,
            overflow_pages: tree.overflow_pages,
            stored_bytes: tree.stored_bytes,
            metadata_bytes: tree.metadata_bytes,
            fragmented_bytes: tree.fragmented_bytes,
            page_size: page_size as u64,
        }
    }

    /// Pages of the tree, all kinds.
    pub fn total_pages(&self) -> u64 {
        self.leaf_pages + self.branch_pages + self.overflow_pages
    }

    /// Adds `other`'s counts to these (the height is the taller one's).
    pub(crate) fn add(&mut self, other: &TableStats) {
        self.entries += other.entries;
        self.tree_entries += other.tree_entries;
        self.tree_height = self.tree_height.max(other.tree_height);
        self.leaf_pages += other.leaf_pages;
        self.branch_pages += other.branch_pages;
        self.overflow_pages += other.overflow_pages;
        self.stored_bytes += other.stored_bytes;
        self.metadata_bytes += other.metadata_bytes;
        self.fragmented_bytes += other.fragmented_bytes;
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadOnlyTable<K, V> {
    /// What the table's pages hold (reads every page of its tree once).
    pub fn stats(&self) -> Result<TableStats> {
        let (pages, root) = self.tree();
        let tree = btree::tree_stats(pages, root)?;
        Ok(TableStats::of(
            tree,
            self.len()?,
            btree::store::PageRead::page_size(pages),
        ))
    }
}

impl<K: Key + 'static, V: Value + 'static> Table<'_, K, V> {
    /// What the table's pages hold (reads every page of its tree once;
    /// this transaction's pending writes count in `entries` only).
    pub fn stats(&self) -> Result<TableStats> {
        let mut st = self.txn.state()?;
        let (_, root, len) = self.settled_info(&mut st)?;
        let tree = btree::tree_stats(&st.pages, &root)?;
        let ps = btree::store::PageRead::page_size(&st.pages);
        Ok(TableStats::of(tree, len, ps))
    }
}

/// Implements [`ReadableTable`] by the inherent methods.
macro_rules! readable {
    ($($ty:tt)*) => {
        impl<K: Key + 'static, V: Value + 'static> ReadableTable<K, V> for $($ty)* {
            fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<Option<AccessGuard<V>>>
            where
                K: 'a,
            {
                <$($ty)*>::get(self, key)
            }

            fn range<'a, KR>(&self, range: impl RangeBounds<KR>) -> Result<Range<'_, K, V>>
            where
                K: 'a,
                KR: Borrow<K::SelfType<'a>>,
            {
                <$($ty)*>::range(self, range)
            }

            fn iter(&self) -> Result<Range<'_, K, V>> {
                <$($ty)*>::iter(self)
            }

            fn first(&self) -> Result<Option<Entry<K, V>>> {
                <$($ty)*>::first(self)
            }

            fn last(&self) -> Result<Option<Entry<K, V>>> {
                <$($ty)*>::last(self)
            }

            fn len(&self) -> Result<u64> {
                <$($ty)*>::len(self)
            }

            fn is_empty(&self) -> Result<bool> {
                <$($ty)*>::is_empty(self)
            }

            fn stats(&self) -> Result<TableStats> {
                <$($ty)*>::stats(self)
            }
        }
    };
}

readable!(ReadOnlyTable<K, V>);
readable!(Table<'_, K, V>);
