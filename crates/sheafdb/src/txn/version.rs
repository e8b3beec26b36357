//! Committed versions of a CF and their way to readers.
//!
//! Owns: `CfVersion` (an immutable committed state), `DbVersion` (every
//! CF's published version at one instant), `CfShared` (a CF's writer lock,
//! head, published version, allocator and publication queue) and
//! `WriterGuard` (the held writer lock, which knows its thread).
//!
//! Invariants: versions of a CF are committed, queued and published in
//! version (= LSN) order (asserted in `set_head_version`, `enqueue`,
//! `publish`, `publish_alone`); a published version never goes back; a
//! failed version stops every later one of its CF from being published.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::btree::TreeRoot;
use crate::buffer::ends::EndHints;
use crate::buffer::mem::{FoldNudge, MemBuffer};
use crate::error::{Error, Result};
use crate::lock_rank::{acquire, ranks, Held, Rank, RankedMutex};
use crate::pager::alloc::{CfAllocator, ReclaimBatch};
use crate::types::{CfId, Lsn, TableId, Version};
use crate::wal::LogMarks;

/// An immutable committed state of one CF: its trees (as of `tree_base`)
/// plus the buffered commits after them (design.md "Write buffer").
#[derive(Debug)]
pub(crate) struct CfVersion {
    pub version: Version,
    pub catalog: TreeRoot,
    pub next_table: TableId,
    /// End of the last WAL record included: replay of this CF resumes at
    /// records starting at or after it.
    pub lsn: Lsn,
    /// Pages freed by the commit after this version; released when every
    /// snapshot of this or an older version is gone.
    pub batch: Arc<ReclaimBatch>,
    /// Commits after `tree_base`, which changed no page: read at
    /// `version` (later entries are invisible here). Shared by every
    /// version up to the next commit that writes the trees.
    pub buffer: Arc<MemBuffer>,
    /// Per table, the change in entry count the buffered commits made
    /// (the trees' counts plus this are the tables' lengths).
    pub deltas: Arc<BTreeMap<TableId, i64>>,
    /// Per table, keys this version's live entries lie between (E1,
    /// `buffer::ends`): a walk from an end starts there.
    pub ends: Arc<EndHints>,
    /// The version (and its LSN) whose state the trees hold: what a
    /// checkpoint of this version writes, and where replay resumes.
    pub tree_base: DurableBase,
    /// The catalog decoded once (on the first table opened in a snapshot
    /// of it), shared by every version with the same catalog tree (the
    /// buffered commits after a tree commit change no catalog entry).
    pub tables: Arc<TableCache>,
    /// A fold in rounds under way (design.md "Fold rounds"): the trees
    /// already hold the buffer's entries up to its version for the keys
    /// before its cursor. `None`: the trees hold exactly `tree_base`.
    pub fold: Option<Arc<FoldProgress>>,
}

/// How far a fold in rounds has got. Every round folds the buffer's
/// entries at versions `≤ upto` for the next range of `(table, key)`;
/// `deltas` of the versions meanwhile count relative to the trees as they
/// are (so reads and `len()` stay exact), and their `tree_base` keeps the
/// LSN of the trees before the first round, where replay must resume.
#[derive(Debug, Clone)]
pub(crate) struct FoldProgress {
    /// The version whose entries the rounds fold.
    pub upto: Version,
    /// Its LSN: where replay resumes once the last round is done.
    pub upto_lsn: Lsn,
    /// Keys before this `(table, key)` are folded.
    pub cursor: (TableId, Arc<[u8]>),
    /// Per table, the entry-count change the folded versions make (the
    /// `deltas` of version `upto`): what the rounds must add up to.
    pub expected: Arc<BTreeMap<TableId, i64>>,
    /// Per table, the count change the rounds so far made in the trees.
    pub done: BTreeMap<TableId, i64>,
}

impl FoldProgress {
    /// Where the next round of a fold of `v` starts: where the last one
    /// stopped, or (no fold under way) at the first key, folding `v`.
    pub fn of(v: &CfVersion) -> FoldProgress {
        match &v.fold {
            Some(f) => (**f).clone(),
            None => FoldProgress {
                upto: v.version,
                upto_lsn: v.lsn,
                cursor: (TableId(0), Arc::from(&[][..])),
                expected: v.deltas.clone(),
                done: BTreeMap::new(),
            },
        }
    }

    /// `Corrupted` unless the rounds so far plus `last` (the last round's
    /// changes) changed every table's count by what the folded versions'
    /// deltas say (design 15.2).
    pub fn check_complete(&self, last: &BTreeMap<TableId, i64>) -> Result<()> {
        let mut made = self.done.clone();
        for (id, c) in last {
            *made.entry(*id).or_default() += c;
        }
        made.retain(|_, c| *c != 0);
        let want: BTreeMap<TableId, i64> = (self.expected.iter())
            .filter(|(_, d)| **d != 0)
            .map(|(i, d)| (*i, *d))
            .collect();
        if made != want {
            return Err(Error::corrupted(
                format!("a fold changed the entry counts by {made:?}, the buffer says {want:?}"),
                "table tree",
            ));
        }
        Ok(())
    }

    /// True if the entry of `table`/`key` at `version` is in the trees
    /// already (an earlier round folded it).
    pub fn folded(&self, table: TableId, key: &[u8], version: Version) -> bool {
        version <= self.upto && (table, key) < (self.cursor.0, &*self.cursor.1)
    }
}

/// One table of a decoded catalog: its metadata, and the Rust types it was
/// last opened with successfully (so reopening with them checks nothing
/// and allocates nothing).
#[derive(Debug)]
pub(crate) struct CachedTable {
    pub meta: crate::format::records::TableMeta,
    pub typed: std::sync::OnceLock<(std::any::TypeId, std::any::TypeId)>,
}

/// A catalog tree decoded into a map by table name, built at most once.
#[derive(Debug, Default)]
pub(crate) struct TableCache {
    map: std::sync::OnceLock<std::collections::HashMap<String, CachedTable>>,
}

impl TableCache {
    /// The decoded catalog, if it was decoded already.
    pub fn loaded(&self) -> Option<&std::collections::HashMap<String, CachedTable>> {
        self.map.get()
    }

    /// The decoded catalog, decoding it with `load` the first time (a
    /// failure is returned and nothing cached, so the next call retries).
    pub fn get_or_load(
        &self,
        load: impl FnOnce() -> Result<Vec<(String, crate::format::records::TableMeta)>>,
    ) -> Result<&std::collections::HashMap<String, CachedTable>> {
        if let Some(m) = self.map.get() {
            return Ok(m);
        }
        let map = load()?
            .into_iter()
            .map(|(name, meta)| {
                let t = CachedTable {
                    meta,
                    typed: std::sync::OnceLock::new(),
                };
                (name, t)
            })
            .collect();
        Ok(self.map.get_or_init(|| map))
    }
}

/// The published version of every CF at one instant: what a database-wide
/// snapshot pins. Replaced (copy-on-write) on every publication, so taking
/// a snapshot is one atomic load.
#[derive(Debug, Default)]
pub(crate) struct DbVersion {
    /// Sorted by id.
    pub cfs: Vec<(CfId, Arc<CfVersion>)>,
}

impl DbVersion {
    /// The version of `cf` in this snapshot.
    pub fn get(&self, cf: CfId) -> Option<&Arc<CfVersion>> {
        self.cfs
            .binary_search_by_key(&cf, |(id, _)| *id)
            .ok()
            .map(|i| &self.cfs[i].1)
    }

    /// A copy with `updates` applied (`None` removes the CF).
    pub fn with(&self, updates: &[(CfId, Option<Arc<CfVersion>>)]) -> DbVersion {
        let mut cfs = self.cfs.clone();
        for (id, v) in updates {
            match (cfs.binary_search_by_key(id, |(i, _)| *i), v) {
                (Ok(i), Some(v)) => cfs[i].1 = v.clone(),
                (Ok(i), None) => {
                    cfs.remove(i);
                }
                (Err(i), Some(v)) => cfs.insert(i, (*id, v.clone())),
                (Err(_), None) => {}
            }
        }
        DbVersion { cfs }
    }
}

/// Called with each newly published version (under the CF's publication
/// lock, so in order): keeps the database-wide snapshot current.
pub(crate) type OnPublish<'a> = &'a dyn Fn(&Arc<CfVersion>);

/// The writer side of a CF, behind its writer lock.
#[derive(Debug)]
pub(crate) struct WriterSlot {
    /// Latest committed version: where the next write transaction starts.
    pub head: Arc<CfVersion>,
}

/// Where a committed version is on its way to readers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PublishState {
    /// Its committer is waiting for the durability its mode promises and
    /// marks it (direct and multi-CF commits: their own conditions).
    Waiting,
    /// A logged single-CF commit, durable enough once the log is written
    /// (`synced` false: `Eventual`) or synced (`Immediate`) past `end`.
    /// Any committer that sees the log there publishes it, so a later
    /// commit of the same sync round does not sleep until this one's
    /// thread is scheduled again.
    Log { end: Lsn, synced: bool },
    /// Durable enough; publishable once every earlier version is.
    Ready,
    /// Its WAL write or sync failed: nothing after it is ever published.
    Failed(crate::error::PoisonCause),
}

impl PublishState {
    /// True if the version may be published once every earlier one is,
    /// given the log's watermarks `log`.
    fn publishable(&self, log: Option<LogMarks>) -> bool {
        match self {
            PublishState::Ready => true,
            PublishState::Log { end, synced } => log.is_some_and(|m| {
                if *synced {
                    m.synced >= *end
                } else {
                    m.written >= *end
                }
            }),
            PublishState::Waiting | PublishState::Failed(_) => false,
        }
    }
}

/// Committed versions of one CF not yet visible to readers, in commit order.
#[derive(Debug, Default)]
pub(crate) struct PublishQueue {
    entries: std::collections::VecDeque<(Arc<CfVersion>, PublishState)>,
}

impl PublishQueue {
    /// Checks, in debug builds, the queue's invariants against the CF's
    /// published version `current`: versions strictly increase front to
    /// back, LSNs never decrease, and every queued version is newer than
    /// the published one. Called after every change to the queue, in debug
    /// builds only (release builds do not even load `current`).
    #[cfg(debug_assertions)]
    fn assert_invariants(&self, current: &CfVersion) {
        let mut prev: Option<&CfVersion> = None;
        for (v, _) in &self.entries {
            assert!(
                v.version > current.version,
                "queued version {} not newer than published {}",
                v.version,
                current.version
            );
            if let Some(p) = prev {
                assert!(
                    p.version < v.version,
                    "publication queue out of version order"
                );
                assert!(p.lsn <= v.lsn, "design.md §11.6: queued LSNs go backwards");
            }
            prev = Some(v);
        }
    }
}

impl CfVersion {
    /// A version whose trees hold all of it (no buffered commits).
    pub fn of_trees(
        version: Version,
        catalog: TreeRoot,
        next_table: TableId,
        lsn: Lsn,
        batch: Arc<ReclaimBatch>,
        nudge: FoldNudge,
    ) -> CfVersion {
        CfVersion {
            version,
            catalog,
            next_table,
            lsn,
            batch,
            buffer: Arc::new(MemBuffer::nudging(nudge)),
            deltas: Arc::default(),
            ends: Arc::default(),
            tree_base: DurableBase { version, lsn },
            tables: Arc::default(),
            fold: None,
        }
    }

    /// Entry-count change of table `id` in the buffered commits.
    pub fn delta(&self, id: TableId) -> i64 {
        self.deltas.get(&id).copied().unwrap_or(0)
    }

    /// True if no older version of the CF is alive (they would hold this
    /// version's reclaim batch through the chain).
    pub fn batch_is_last(&self) -> bool {
        Arc::strong_count(&self.batch) == 1
    }
}

/// What a fold version carries over from the head it replaces: the
/// buffered commits it does not hold in its trees, their count deltas
/// (relative to its trees), where replay must resume for its trees, and
/// how far a fold in rounds has got.
#[derive(Debug)]
pub(crate) struct FoldCarry {
    pub buffer: Arc<MemBuffer>,
    pub deltas: Arc<BTreeMap<TableId, i64>>,
    pub tree_lsn: Lsn,
    /// A round that leaves more to fold: how far the rounds have got.
    pub fold: Option<Arc<FoldProgress>>,
}

impl FoldCarry {
    /// What a fold round carries over from `head`: `changes` (per table,
    /// the count change the round made in the trees) leave the deltas;
    /// with `next` (more rounds to go), the buffer is shared and replay
    /// keeps resuming where it did; without, the rounds are done: the
    /// entries after `progress.upto` go into a new buffer, and replay of
    /// the trees resumes after `upto`. `early` is that new buffer started
    /// before the writer lock was taken ([`FoldCarry::start_rest`]) and
    /// the version it holds entries through; it must have been made from
    /// `head`'s buffer. Only the entries after it are copied here.
    pub fn round(
        head: &CfVersion,
        progress: FoldProgress,
        changes: &BTreeMap<TableId, i64>,
        next: Option<(TableId, Arc<[u8]>)>,
        early: Option<(MemBuffer, Version)>,
    ) -> FoldCarry {
        let mut deltas = (*head.deltas).clone();
        for (id, c) in changes {
            *deltas.entry(*id).or_default() -= c;
        }
        deltas.retain(|_, d| *d != 0);
        let Some(cursor) = next else {
            let rest = Arc::new(FoldCarry::finish_rest(&head.buffer, progress.upto, early));
            return FoldCarry {
                buffer: rest,
                deltas: Arc::new(deltas),
                tree_lsn: progress.upto_lsn,
                fold: None,
            };
        };
        let mut done = progress.done;
        for (id, c) in changes {
            *done.entry(*id).or_default() += c;
        }
        FoldCarry {
            buffer: head.buffer.clone(),
            deltas: Arc::new(deltas),
            tree_lsn: head.tree_base.lsn,
            fold: Some(Arc::new(FoldProgress {
                cursor,
                done,
                ..progress
            })),
        }
    }

    /// The last round's new buffer, started without the writer lock: the
    /// entries of `buffer` after `upto` through `published`, a version
    /// already published (so every entry through it is in `buffer`:
    /// commits insert before they publish). Under the lock,
    /// [`FoldCarry::round`] copies only the commits made since, so
    /// writers wait for those rather than for every commit made during
    /// the whole fold (design.md "Fold rounds", *The carry*).
    pub fn start_rest(
        buffer: &MemBuffer,
        upto: Version,
        published: Version,
    ) -> (MemBuffer, Version) {
        let rest = MemBuffer::after(buffer);
        let through = published.max(upto);
        for (table, key, version, slot) in buffer.entries_between(upto, Some(through)) {
            rest.insert(table, key, version, slot);
        }
        (rest, through)
    }

    /// The last round's new buffer: `buffer`'s entries after `upto`; with
    /// `early` ([`FoldCarry::start_rest`] of the same buffer and `upto`),
    /// only those after the version it reached are copied now.
    pub fn finish_rest(
        buffer: &MemBuffer,
        upto: Version,
        early: Option<(MemBuffer, Version)>,
    ) -> MemBuffer {
        let (rest, through) = early.unwrap_or_else(|| (MemBuffer::after(buffer), upto));
        debug_assert!(through >= upto, "an early carry from before the fold");
        for (table, key, version, slot) in buffer.entries_between(through, None) {
            rest.insert(table, key, version, slot);
        }
        // The early copy relied on every write of a published version being
        // in the buffer: one inserted after it looked would be missing here.
        debug_assert_eq!(
            rest.entries(),
            buffer.entries_between(upto, None).len() as u64,
            "the carry lost or doubled a buffered write"
        );
        rest
    }
}

#[cfg(test)]
mod carry_tests {
    use super::*;

    /// An entry as plain bytes: table, key, version, value (`None`: removed).
    type Plain = (TableId, Vec<u8>, Version, Option<Vec<u8>>);

    /// Every entry of `b`, in version order.
    fn entries(b: &MemBuffer) -> Vec<Plain> {
        (b.entries_between(Version(0), None).into_iter())
            .map(|(t, k, v, s)| (t, k.to_vec(), v, s.map(|s| s.to_vec())))
            .collect()
    }

    /// A carry started early and finished under the lock holds exactly
    /// what one made at once holds, for every split point.
    #[test]
    fn an_early_carry_finishes_with_the_entries_of_a_carry_made_at_once() {
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let buffer = MemBuffer::new();
        for v in 1..=60u64 {
            // A few writes per version, keys repeating across versions,
            // some removals.
            let mut keys: Vec<u8> = (0..1 + next() % 3).map(|_| (next() % 16) as u8).collect();
            keys.sort_unstable();
            keys.dedup();
            let table = TableId(1 + next() % 2);
            for k in keys {
                let slot = (next() % 4 != 0).then(|| Arc::from(&[k, v as u8][..]));
                buffer.insert(table, vec![k], Version(v), slot);
            }
        }
        for upto in [0u64, 1, 17, 40, 60] {
            let whole = entries(&FoldCarry::finish_rest(&buffer, Version(upto), None));
            assert_eq!(
                whole,
                entries(&buffer)
                    .into_iter()
                    .filter(|e| e.2 > Version(upto))
                    .collect::<Vec<_>>()
            );
            for published in [upto, upto + 1, 45, 60, 70] {
                let early = FoldCarry::start_rest(&buffer, Version(upto), Version(published));
                let split = entries(&FoldCarry::finish_rest(&buffer, Version(upto), Some(early)));
                assert_eq!(split, whole, "upto {upto}, published {published}");
            }
        }
    }
}

#[cfg(test)]
mod publish_tests {
    use super::*;
    use crate::pager::alloc::ExtentPolicy;

    fn cf() -> CfShared {
        let policy = ExtentPolicy {
            first_pages: 4,
            max_pages: 16,
        };
        let alloc = CfAllocator::new(CfId(1), policy, vec![], &[]).unwrap();
        let v0 = version_of(&alloc, 0, 100);
        CfShared::new(CfId(1), "c".into(), alloc, v0)
    }

    fn version_of(alloc: &CfAllocator, v: u64, lsn: u64) -> CfVersion {
        let batch = ReclaimBatch::new(alloc.released_sink());
        CfVersion::of_trees(
            Version(v),
            TreeRoot::default(),
            TableId(1),
            Lsn(lsn),
            batch,
            FoldNudge::default(),
        )
    }

    /// Queues versions 1..=n, version `i` a logged commit ending at LSN
    /// `100 * (i + 1)`, durable once synced (`Immediate`).
    fn queue(cf: &CfShared, n: u64) {
        for i in 1..=n {
            let v = Arc::new(version_of(&cf.alloc.lock(), i, 100 * (i + 1)));
            cf.enqueue(v);
            cf.await_log(Version(i), Lsn(100 * (i + 1)), true);
        }
    }

    fn marks(written: u64, synced: u64) -> Option<LogMarks> {
        Some(LogMarks {
            written: Lsn(written),
            synced: Lsn(synced),
        })
    }

    #[test]
    fn a_later_commit_of_the_same_sync_publishes_the_earlier_ones() {
        // The committers of versions 1 and 2 have not come back from their
        // WAL waits (not scheduled yet); the one of version 3 has. One sync
        // covered all three: version 3 publishes all of them and does not
        // wait for the other two threads.
        let cf = cf();
        queue(&cf, 3);
        let published = std::cell::Cell::new(0);
        cf.publish(Version(3), Ok(()), marks(400, 400), &|v| {
            published.set(v.version.0)
        })
        .unwrap();
        assert_eq!(cf.current.load().version, Version(3));
        assert_eq!(published.get(), 3);
        // The late committers find their versions published.
        cf.publish(Version(1), Ok(()), marks(400, 400), &|_| {})
            .unwrap();
        cf.publish(Version(2), Ok(()), marks(400, 400), &|_| {})
            .unwrap();
        assert_eq!(cf.current.load().version, Version(3));
    }

    #[test]
    fn a_version_past_the_sync_stays_queued() {
        let cf = cf();
        queue(&cf, 3);
        // Version 2's committer is back from a sync that reached LSN 300:
        // versions 1 and 2 (ends 200, 300) are published, version 3 (end
        // 400, only written) may not be for an `Immediate` promise.
        cf.mark(Version(2), &Ok(()), marks(400, 300), &|_| {});
        assert_eq!(cf.current.load().version, Version(2));
        // Its own committer marks it after its sync.
        cf.mark(Version(3), &Ok(()), marks(400, 400), &|_| {});
        assert_eq!(cf.current.load().version, Version(3));
    }

    #[test]
    fn written_is_enough_for_eventual_and_waiting_versions_wait_for_their_owner() {
        let cf = cf();
        let v1 = Arc::new(version_of(&cf.alloc.lock(), 1, 200));
        cf.enqueue(v1);
        // Eventual: publishable once written past its end.
        cf.await_log(Version(1), Lsn(200), false);
        // Version 2 did not describe its log end (a direct or multi-CF
        // commit): only its own committer publishes it.
        cf.enqueue(Arc::new(version_of(&cf.alloc.lock(), 2, 300)));
        cf.enqueue(Arc::new(version_of(&cf.alloc.lock(), 3, 400)));
        cf.await_log(Version(3), Lsn(400), true);
        cf.mark(Version(3), &Ok(()), marks(400, 400), &|_| {});
        assert_eq!(cf.current.load().version, Version(1));
        cf.mark(Version(2), &Ok(()), None, &|_| {});
        assert_eq!(cf.current.load().version, Version(3));
    }

    #[test]
    fn a_failed_version_stops_publication_and_fails_the_later_ones() {
        let cf = cf();
        queue(&cf, 2);
        let failed = Err(Error::Poisoned(crate::error::PoisonCause::new(
            "sync failed",
        )));
        assert!(cf.publish(Version(1), failed, None, &|_| {}).is_err());
        // Whatever the log says, nothing after a failed version is shown.
        cf.mark(Version(2), &Ok(()), marks(300, 300), &|_| {});
        assert_eq!(cf.current.load().version, Version(0));
        assert!(matches!(
            cf.wait_published(Version(2)),
            Err(Error::Poisoned(_))
        ));
    }
}

/// The version of a CF its durable base holds, and the end of the WAL it
/// covers (replay of the CF resumes at records starting at or after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DurableBase {
    pub version: Version,
    pub lsn: Lsn,
}

/// Shared state of one column family.
#[derive(Debug)]
pub(crate) struct CfShared {
    pub id: CfId,
    pub name: String,
    pub writer: Arc<Mutex<WriterSlot>>,
    /// [`thread_token`] of the thread holding `writer` through a
    /// [`WriterGuard`] (0: none).
    writer_owner: Arc<std::sync::atomic::AtomicU64>,
    pub current: ArcSwap<CfVersion>,
    pub alloc: Arc<Mutex<CfAllocator>>,
    publish: RankedMutex<PublishQueue, { ranks::PUBLISH }>,
    published: parking_lot::Condvar,
    /// The durable base of this CF.
    pub base: Mutex<DurableBase>,
    /// Set once the CF is dropped: handles to it report `CfNotFound`.
    pub dropped: std::sync::atomic::AtomicBool,
    /// Extents the CF's persisted descriptor accounts for (its free list
    /// covers exactly these); extents claimed later are persisted as free.
    pub persisted_extents: Mutex<Vec<crate::format::records::PageRange>>,
    /// Held by a committer from its WAL append until its version is the
    /// head ([`CfShared::set_head_version`]); taken briefly by a checkpoint
    /// to read the head version, so it never sees a record appended but
    /// not yet installed. Lock order: writer lock, then this, then the WAL.
    pub commit_gate: RankedMutex<(), { ranks::COMMIT_GATE }>,
    /// Version of the latest committed (not necessarily published) state.
    head_version: std::sync::atomic::AtomicU64,
    /// Set while a fold of this CF is being made aside (one at a time).
    folding: std::sync::atomic::AtomicBool,
    /// Set when the file was cut and this CF's extents shrank: the next
    /// checkpoint rewrites its descriptor (whose free list must lie in
    /// its extents) even if it has no new commit.
    pub extents_changed: std::sync::atomic::AtomicBool,
    /// The Bloom filter over its trees' keys (design.md "Key filter").
    pub key_filter: super::key_filter::CfKeyFilter,
}

impl CfShared {
    /// True while a direct commit is between its checkpoint (which made
    /// its version this CF's durable base) and its publication: the base
    /// is ahead of the published version. Checkpoints skip the CF then
    /// (writing the published version would take the commit back out), so
    /// compaction changes none of its extents meanwhile (`cut_tail`,
    /// `pool_free_space`). Stable under the checkpoint lock, which every
    /// base change holds.
    pub fn base_ahead_of_published(&self) -> bool {
        self.base.lock().version > self.current.load().tree_base.version
    }

    /// A CF whose latest state is `version`, also its durable base.
    pub fn new(id: CfId, name: String, alloc: CfAllocator, version: CfVersion) -> CfShared {
        let version = Arc::new(version);
        let head_version = std::sync::atomic::AtomicU64::new(version.version.0);
        CfShared {
            id,
            name,
            persisted_extents: Mutex::new(alloc.extents().to_vec()),
            dropped: std::sync::atomic::AtomicBool::new(false),
            base: Mutex::new(DurableBase {
                version: version.version,
                lsn: version.lsn,
            }),
            writer_owner: Arc::default(),
            writer: Arc::new(Mutex::new(WriterSlot {
                head: version.clone(),
            })),
            current: ArcSwap::new(version),
            alloc: Arc::new(Mutex::new(alloc)),
            publish: RankedMutex::new(PublishQueue::default()),
            published: parking_lot::Condvar::new(),
            commit_gate: RankedMutex::new(()),
            head_version,
            folding: std::sync::atomic::AtomicBool::new(false),
            extents_changed: std::sync::atomic::AtomicBool::new(false),
            key_filter: Default::default(),
        }
    }

    /// Marks a fold of this CF as running; `None` if one already is. The
    /// mark is cleared when the returned guard is dropped.
    pub fn begin_fold(&self) -> Option<FoldMark<'_>> {
        use std::sync::atomic::Ordering;
        if self.folding.swap(true, Ordering::AcqRel) {
            return None; // (a mark made here would clear the other's flag)
        }
        Some(FoldMark(&self.folding))
    }

    /// True if the calling thread holds this CF's writer lock.
    pub fn writer_held_here(&self) -> bool {
        self.writer_owner.load(std::sync::atomic::Ordering::Acquire) == thread_token()
    }

    /// The error for a second writer-lock request from its holder.
    pub fn would_deadlock(&self) -> Error {
        Error::WouldDeadlock(format!(
            "this thread already holds the write transaction of column family {:?}",
            self.name
        ))
    }

    /// Wraps the writer lock's guard, recording this thread as its owner.
    /// The lock order was checked when `rank` was acquired; the record is
    /// not kept, because a write transaction may move to another thread
    /// (`WriteTransaction: Send`) and the writer rank is the lowest, so no
    /// later acquisition needs it to be checked.
    fn guard(
        &self,
        guard: parking_lot::ArcMutexGuard<parking_lot::RawMutex, WriterSlot>,
        rank: Held,
    ) -> WriterGuard {
        drop(rank);
        self.writer_owner
            .store(thread_token(), std::sync::atomic::Ordering::Release);
        WriterGuard {
            guard,
            owner: self.writer_owner.clone(),
        }
    }

    /// Takes the writer lock, waiting for another thread's transaction;
    /// `WouldDeadlock` at once if this thread holds it.
    pub fn lock_writer(&self) -> Result<WriterGuard> {
        if self.writer_held_here() {
            return Err(self.would_deadlock());
        }
        let rank = acquire(Rank::Writer);
        Ok(self.guard(self.writer.lock_arc(), rank))
    }

    /// Takes the writer lock, waiting at most `wait` for another thread's
    /// transaction; `WriterBusy` after that, `WouldDeadlock` for this
    /// thread's own.
    pub fn lock_writer_within(&self, wait: std::time::Duration) -> Result<WriterGuard> {
        if self.writer_held_here() {
            return Err(self.would_deadlock());
        }
        let rank = acquire(Rank::Writer);
        match self.writer.try_lock_arc_for(wait) {
            Some(g) => Ok(self.guard(g, rank)),
            None => Err(Error::WriterBusy(self.name.clone())),
        }
    }

    /// Takes the writer lock if it is free; `WriterBusy` (or
    /// `WouldDeadlock` for this thread's own) otherwise.
    pub fn try_lock_writer(&self) -> Result<WriterGuard> {
        if self.writer_held_here() {
            return Err(self.would_deadlock());
        }
        let rank = acquire(Rank::Writer);
        match self.writer.try_lock_arc() {
            Some(g) => Ok(self.guard(g, rank)),
            None => Err(Error::WriterBusy(self.name.clone())),
        }
    }

    /// Records `v` as the latest committed version (under the writer lock,
    /// and under the commit gate when a WAL record was appended for it).
    pub fn set_head_version(&self, v: Version) {
        use std::sync::atomic::Ordering;
        let old = self.head_version.swap(v.0, Ordering::AcqRel);
        assert!(
            old < v.0,
            "cf {}: head version went from {old} to {v}",
            self.id
        );
    }

    /// The latest committed version, read under the commit gate: every
    /// record appended before this call is installed.
    pub fn head_version_settled(&self) -> Version {
        let _gate = self.commit_gate.lock();
        Version(self.head_version.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Queues `v` for publication; called under the writer lock, so queue
    /// order is commit order.
    pub fn enqueue(&self, v: Arc<CfVersion>) {
        let mut q = self.publish.lock();
        debug_assert!(q
            .entries
            .back()
            .is_none_or(|(last, _)| last.version < v.version));
        q.entries.push_back((v, PublishState::Waiting));
        #[cfg(debug_assertions)]
        q.assert_invariants(&self.current.load());
    }

    /// Records that queued `version` (a logged commit, under the writer
    /// lock) is durable enough once the log is written (`synced` false)
    /// or synced past `end`: see [`PublishState::Log`].
    pub fn await_log(&self, version: Version, end: Lsn, synced: bool) {
        let mut q = self.publish.lock();
        // Queued last, under the same writer lock.
        let last = q.entries.back_mut().expect("await_log after enqueue");
        assert_eq!(last.0.version, version, "await_log for another version");
        debug_assert_eq!(last.1, PublishState::Waiting);
        last.1 = PublishState::Log { end, synced };
    }

    /// Records whether `version` became as durable as its mode promises,
    /// publishes every ready version at the front of the queue, then waits
    /// until `version` itself is published. `Err(Poisoned)` if it or a
    /// version before it failed. `log` (the WAL's watermarks, read after
    /// `durable` was known) also makes publishable the queued versions
    /// [`CfShared::await_log`] described.
    pub fn publish(
        &self,
        version: Version,
        durable: Result<()>,
        log: Option<LogMarks>,
        on_publish: OnPublish<'_>,
    ) -> Result<()> {
        self.mark(version, &durable, log, on_publish);
        durable?;
        self.wait_published(version)
    }

    /// The first half of [`CfShared::publish`]: records `version`'s state
    /// and publishes the publishable prefix of the queue, without waiting.
    pub fn mark(
        &self,
        version: Version,
        durable: &Result<()>,
        log: Option<LogMarks>,
        on_publish: OnPublish<'_>,
    ) {
        let mut q = self.publish.lock();
        let state = match durable {
            Ok(()) => PublishState::Ready,
            Err(e) => PublishState::Failed(crate::error::PoisonCause::of(e)),
        };
        if let Some(e) = q.entries.iter_mut().find(|(v, _)| v.version == version) {
            e.1 = state;
        }
        if durable.is_err() {
            // Waiters behind it must see the failure now, not at a timeout.
            self.published.notify_all();
            return;
        }
        let mut newest = None;
        while q.entries.front().is_some_and(|(_, s)| s.publishable(log)) {
            newest = q.entries.pop_front().map(|(v, _)| v);
        }
        if let Some(v) = newest {
            let cur = self.current.load();
            debug_assert!(v.version > cur.version, "publication went backwards");
            debug_assert!(
                v.lsn >= cur.lsn,
                "design.md §11.6: published LSNs went backwards"
            );
            self.current.store(v.clone());
            on_publish(&v);
            self.published.notify_all();
        }
        #[cfg(debug_assertions)]
        q.assert_invariants(&self.current.load());
    }

    /// The second half of [`CfShared::publish`]: waits until `version` is
    /// published; `Err(Poisoned)` if a version before it failed.
    pub fn wait_published(&self, version: Version) -> Result<()> {
        if self.current.load().version >= version {
            return Ok(());
        }
        let mut q = self.publish.lock();
        loop {
            if self.current.load().version >= version {
                return Ok(());
            }
            if let Some((_, PublishState::Failed(cause))) = q.entries.front() {
                return Err(Error::Poisoned(cause.clone()));
            }
            self.published
                .wait_for(q.inner(), std::time::Duration::from_millis(20));
        }
    }

    /// Blocks until every committed version of this CF is published
    /// (`next = None`) or `next` is the oldest unpublished one. Checks
    /// `healthy` between wake-ups, so a poisoned database does not hang.
    pub fn wait_publication(
        &self,
        next: Option<Version>,
        healthy: &dyn Fn() -> Result<()>,
    ) -> Result<()> {
        let mut q = self.publish.lock();
        loop {
            let ready = match next {
                None => q.entries.is_empty(),
                Some(v) => q.entries.front().is_some_and(|(f, _)| f.version == v),
            };
            if ready {
                return Ok(());
            }
            healthy()?;
            self.published
                .wait_for(q.inner(), std::time::Duration::from_millis(20));
        }
    }

    /// Publishes `version`, which must be the only queued one, without
    /// notifying the database-wide snapshot (the caller publishes several
    /// CFs at once).
    pub fn publish_alone(&self, version: &Arc<CfVersion>) {
        let mut q = self.publish.lock();
        let front = q.entries.pop_front();
        assert!(
            front.is_some_and(|(v, _)| v.version == version.version) && q.entries.is_empty(),
            "multi-CF publication out of order in cf {}",
            self.id
        );
        debug_assert!(
            version.lsn >= self.current.load().lsn,
            "design.md §11.6: LSNs went backwards"
        );
        self.current.store(version.clone());
        #[cfg(debug_assertions)]
        q.assert_invariants(version);
        self.published.notify_all();
    }

    /// Makes the initial version of a just-created CF version 1 (the
    /// creation), leaving the durable base at version 0.
    pub fn bump_created_version(&self) {
        let mut slot = self.writer.lock();
        let v0 = slot.head.clone();
        debug_assert_eq!(v0.buffer.entries(), 0, "a new CF has buffered commits");
        let v1 = Arc::new(CfVersion::of_trees(
            Version(1),
            v0.catalog,
            v0.next_table,
            Lsn(v0.lsn.0 + 1),
            ReclaimBatch::new(self.alloc.lock().released_sink()),
            v0.buffer.nudge().clone(),
        ));
        v0.batch.seal(Vec::new(), v1.batch.clone());
        self.set_head_version(v1.version);
        slot.head = v1.clone();
        self.current.store(v1);
    }

    /// Errors if the CF was dropped.
    pub fn check_live(&self) -> Result<()> {
        if self.dropped.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::CfNotFound(self.name.clone()));
        }
        Ok(())
    }
}

/// Clears a CF's "fold running" mark when dropped.
pub(crate) struct FoldMark<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for FoldMark<'_> {
    fn drop(&mut self) {
        let was = self.0.swap(false, std::sync::atomic::Ordering::AcqRel);
        debug_assert!(was, "a fold mark cleared twice");
    }
}

/// A small non-zero number naming the calling thread (stable for its
/// life), so a lock can tell that its own holder asks for it again.
pub(crate) fn thread_token() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TOKEN.with(|t| *t)
}

/// The held writer lock of a CF. Records the thread that took it, so a
/// second request from that thread fails (`WouldDeadlock`) instead of
/// waiting on itself.
pub(crate) struct WriterGuard {
    guard: parking_lot::ArcMutexGuard<parking_lot::RawMutex, WriterSlot>,
    owner: Arc<std::sync::atomic::AtomicU64>,
}

impl WriterGuard {
    /// Records the calling thread as the one holding this lock (a write
    /// transaction used from another thread than the one that began it),
    /// so `WouldDeadlock` checks name the right thread.
    pub fn claim_for_this_thread(&self) {
        self.owner
            .store(thread_token(), std::sync::atomic::Ordering::Release);
    }
}

impl std::ops::Deref for WriterGuard {
    type Target = WriterSlot;
    fn deref(&self) -> &WriterSlot {
        &self.guard
    }
}

impl std::ops::DerefMut for WriterGuard {
    fn deref_mut(&mut self) -> &mut WriterSlot {
        &mut self.guard
    }
}

impl Drop for WriterGuard {
    fn drop(&mut self) {
        // Runs before the field (the mutex guard) is dropped: the owner is
        // cleared while the lock is still held.
        self.owner.store(0, std::sync::atomic::Ordering::Release);
    }
}
