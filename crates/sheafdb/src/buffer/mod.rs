//! The write buffer (design.md §15): versioned in-memory layers in front of
//! the copy-on-write trees, and the merged view over them.
//!
//! Owns:
//! - [`Held`]: key or value bytes a reader keeps alive (a page range or a
//!   shared heap buffer), so every layer can hand out bytes without copying;
//! - [`mem::MemBuffer`]: one buffer, an ordered concurrent map
//!   `(table, key, version)` → put or tombstone, written by one committer at
//!   a time and read by any number of snapshots without a lock;
//! - [`ends::EndHints`]: per table, keys the live entries lie between,
//!   so a walk from an end skips the tombstones a queue leaves there;
//! - [`filter::KeyFilter`]: a growing Bloom filter per buffer, so a point
//!   read of a key the buffer lacks skips the skip list;
//! - [`write_set::WriteSet`]: a write transaction's private ordered writes
//!   and per-table entry-count deltas;
//! - [`merge`]: the double-ended merged view over a write set, buffers
//!   (newest first) and a tree, where the first layer that knows a key
//!   decides it and a tombstone hides every older layer.
//!
//! Must not know: transactions, the WAL, checkpoints, files. Versions are
//! opaque numbers it compares.
//!
//! Invariants (asserted where kept):
//! - a buffer's versions never go backwards (`MemBuffer::insert`): a
//!   snapshot at version `v` sees exactly the entries with version `≤ v`,
//!   and later inserts never change what it sees;
//! - a frozen buffer is never written again (`MemBuffer::insert`);
//! - the merged view yields strictly increasing keys from the front and
//!   strictly decreasing keys from the back, and the two ends never yield
//!   the same key (`merge::Window`).

pub mod ends;
pub mod filter;
pub mod mem;
pub mod merge;
pub mod write_set;

#[cfg(test)]
mod tests;

use std::ops::Bound;
use std::sync::Arc;

use crate::btree::Bytes;

/// Bytes of a key or value that the holder keeps alive: a range of a tree
/// page, or a buffer's shared copy. Cloning never copies the bytes.
#[derive(Clone)]
pub enum Held {
    /// Bytes inside a tree page (or overflow run).
    Page(Bytes),
    /// Bytes owned by a buffer or write set.
    Shared(Arc<[u8]>),
}

impl Held {
    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Held::Page(b) => b.as_slice(),
            Held::Shared(s) => s,
        }
    }
}

impl Held {
    /// The bytes from offset `from` on (sharing a page; a buffer's bytes
    /// are copied).
    ///
    /// # Panics
    /// If `from` is past the end.
    pub fn suffix(&self, from: usize) -> Held {
        match self {
            Held::Page(b) => Held::Page(b.suffix(from)),
            Held::Shared(s) => Held::Shared(Arc::from(&s[from..])),
        }
    }
}

impl std::ops::Deref for Held {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({:?})", self.as_slice())
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Held) -> bool {
        self.as_slice() == other.as_slice()
    }
}

/// A value as a layer stores it: `Some(bytes)` for a put, `None` for a
/// tombstone (the key was removed at that version).
pub type Slot = Option<Arc<[u8]>>;

/// True if `key` lies below the lower bound `lo`.
pub(crate) fn below(key: &[u8], lo: Bound<&[u8]>) -> bool {
    match lo {
        Bound::Included(l) => key < l,
        Bound::Excluded(l) => key <= l,
        Bound::Unbounded => false,
    }
}

/// True if `key` lies above the upper bound `hi`.
pub(crate) fn above(key: &[u8], hi: Bound<&[u8]>) -> bool {
    match hi {
        Bound::Included(h) => key > h,
        Bound::Excluded(h) => key >= h,
        Bound::Unbounded => false,
    }
}
