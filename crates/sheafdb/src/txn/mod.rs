//! Transaction state: committed versions, their publication, and the
//! mutable state of a write transaction. The public transaction types that
//! drive it live with the engine they call (`db::txn`).
//!
//! Owns: `CfShared` (per-CF writer lock, published version, allocator,
//! publication queue; [`version`]), `CfVersion` (an immutable committed
//! state), `WriteState`/`WriteCore` (a write transaction's pages, catalog
//! and log, and the rules that change them; [`state`]) and the page stores
//! ([`pages`]).
//!
//! Must not know: the database (`db`), table handles (`table`). It reaches
//! pages only through `pager::space::PageSpace`.
//!
//! Invariants:
//! - one write transaction per CF at a time (its writer lock); it starts
//!   from the CF's `head` (latest *committed* version), which may be ahead
//!   of the published one because the lock is released right after the WAL
//!   append (early lock release, design.md §4.3b);
//! - `begin_read` only loads the published version (`ArcSwap`), taking no
//!   lock a writer holds;
//! - versions of a CF are published in commit (= LSN) order, each once it
//!   is as durable as its mode promises and every earlier one is published
//!   (`PublishQueue`, design.md §4.3d);
//! - a snapshot holds its version's `ReclaimBatch`, so no page it can
//!   reach is reused while it lives (design.md §5).

pub mod key_filter;
pub mod pages;
pub mod savepoint;
pub mod state;
pub mod version;

/// What a buffer calls to ask for a fold (design.md "Tombstone walks").
pub(crate) use crate::buffer::mem::FoldNudge;
/// Whether a commit's writes go into the buffer's key index (replay's
/// do not), as the database layer names it.
pub(crate) use crate::buffer::mem::KeyIndex;
pub(crate) use state::{
    check_table_name, check_types, list_catalog, lookup_table, read_catalog, TableState, WriteCore,
    WriteState, ROUND_BATCH, SPILL_BYTES,
};
pub(crate) use version::{
    CfShared, CfVersion, DbVersion, FoldCarry, FoldMark, FoldProgress, WriterGuard, WriterSlot,
};

/// How durable a commit is when `commit()` returns (design.md §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Survives power loss when `commit` returns (default).
    #[default]
    Immediate,
    /// Survives a process crash; survives power loss after `sync_interval`.
    Eventual,
    /// Durable only after a later durable commit, `sync()`, a checkpoint or
    /// a clean close.
    None,
}

/// Longest table name in bytes.
pub const MAX_TABLE_NAME: usize = 255;

/// Tombstones the merged view walked past on this thread since the last
/// call (tests of the end hints, E1, count the walk they spare).
#[cfg(test)]
pub(crate) fn take_tombstones_walked() -> u64 {
    crate::buffer::merge::SKIPPED.with(|s| s.replace(0))
}
