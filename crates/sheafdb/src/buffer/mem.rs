//! One write buffer: an ordered, versioned, concurrently readable map.
//!
//! Owns: the map `(table, key, version)` → [`Slot`] and its size figures.
//! Entries of one key sort newest first, so a point read at version `v` is
//! one seek to `(table, key, v)`: the first entry there, if it has the same
//! key, is the newest version `≤ v`.
//!
//! Why a skip list (`crossbeam_skiplist::SkipMap`): readers must never wait
//! for the committer that is inserting (design.md §15), and a commit must
//! be visible to a snapshot the moment its version is published. A lock-free
//! skip list gives ordered seeks from both ends and concurrent inserts with
//! readers in flight, and frees memory through epochs, so an entry a reader
//! is looking at is never freed under it. The committer is the only writer
//! of a buffer (commits insert under the CF's commit gate), which also
//! makes its version bookkeeping simple. Entries are never removed: a
//! buffer is dropped whole when no snapshot can read it any more.
//!
//! Must not know: transactions, trees, checkpoints.

use std::borrow::Borrow;
use std::cmp::Ordering as CmpOrdering;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Guard};
use crossbeam_skiplist::base::{Entry, SkipList};

use super::filter::{hash, KeyFilter};
use super::write_set::{self, WriteSet};
use super::{above, below, Held, Slot};
use crate::btree::key_prefix;
use crate::types::{IdHashBuilder, TableId, Version};

/// Bytes charged per entry on top of its key and value for the skip-list
/// node, tower, key struct and reference counts: an estimate, used to
/// decide when to fold and to keep the budget.
pub const ENTRY_OVERHEAD: u64 = 96;

/// Bytes charged on top of [`ENTRY_OVERHEAD`] for an entry that goes into
/// the key index (its allocation and its share of the table): 1 M
/// updates of 632,000 keys grew the process by 49 MiB, about 78 bytes per
/// indexed key (`examples/buffered_reads -- 1000000u`).
pub const INDEX_OVERHEAD: u64 = 80;

/// Where a key sits among the keys of a table: a real key, or past all of
/// them (to seek to a table's last entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Pos<'a> {
    Key(&'a [u8]),
    End,
}

/// A map key as the skip list orders it: table, then key bytes, then
/// version descending (stored as `u64::MAX - version`). The key's first
/// eight bytes (big-endian, [`key_prefix`]) are compared before the key:
/// they order keys the same way where they differ, and sit in the skip
/// list's node, so most comparisons of a seek never touch the key's bytes
/// on the heap (one cache miss fewer per node visited).
trait KeyView {
    fn view(&self) -> (TableId, u64, Pos<'_>, u64);
}

#[derive(Debug)]
struct BufKey {
    table: TableId,
    /// `key_prefix(&key)`.
    prefix: u64,
    key: Arc<[u8]>,
    /// `u64::MAX - version`: newer versions sort first.
    rev: u64,
}

impl BufKey {
    fn version(&self) -> Version {
        Version(u64::MAX - self.rev)
    }

    /// True if `other` is a version of the same key (of any table): the
    /// prefixes first, so most different keys are told apart without
    /// reading their bytes.
    #[inline]
    fn same_key(&self, other: &BufKey) -> bool {
        self.prefix == other.prefix && *self.key == *other.key
    }
}

/// A borrowed search key (no allocation per seek).
struct Probe<'a> {
    table: TableId,
    prefix: u64,
    pos: Pos<'a>,
    rev: u64,
}

impl KeyView for BufKey {
    #[inline]
    fn view(&self) -> (TableId, u64, Pos<'_>, u64) {
        (self.table, self.prefix, Pos::Key(&self.key), self.rev)
    }
}

impl KeyView for Probe<'_> {
    #[inline]
    fn view(&self) -> (TableId, u64, Pos<'_>, u64) {
        (self.table, self.prefix, self.pos, self.rev)
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for BufKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.view() == other.view()
    }
}
impl Eq for dyn KeyView + '_ {}
impl PartialOrd for dyn KeyView + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for dyn KeyView + '_ {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.view().cmp(&other.view())
    }
}

impl PartialEq for BufKey {
    fn eq(&self, other: &Self) -> bool {
        self.view() == other.view()
    }
}
impl Eq for BufKey {}
impl PartialOrd for BufKey {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for BufKey {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.view().cmp(&other.view())
    }
}

fn probe(table: TableId, pos: Pos<'_>, rev: u64) -> Probe<'_> {
    let prefix = match pos {
        Pos::Key(k) => key_prefix(k),
        // Past every key: its prefix is the largest, and `End` sorts after
        // a key of the same prefix.
        Pos::End => u64::MAX,
    };
    Probe {
        table,
        prefix,
        pos,
        rev,
    }
}

/// One write buffer of a CF.
pub struct MemBuffer {
    /// The skip list itself, read through epoch guards rather than
    /// counted entries: nothing is ever removed from it, so an entry a
    /// guard reached stays valid as long as the buffer, and a walk pays no
    /// reference-count update and no new pin per step (see
    /// [`MemBuffer::newest_from`] for walks longer than one call).
    map: SkipList<BufKey, Slot>,
    bytes: AtomicU64,
    entries: AtomicU64,
    /// Newest version inserted (0: none yet).
    newest: AtomicU64,
    /// Oldest version inserted (`u64::MAX`: none yet).
    oldest: AtomicU64,
    frozen: AtomicBool,
    /// Which `(table, key)` pairs may be here: lets a point read of a key
    /// the buffer lacks skip the skip list.
    filter: KeyFilter,
    /// The newest write of each key hash (see [`Newest`]): a point read
    /// of a key the buffer holds is one hash probe, not a seek through a
    /// skip list of a million nodes. Kept from [`INDEX_FROM`] entries on.
    index: papaya::HashMap<u64, Newest, IdHashBuilder>,
    /// Writes go into the index as they are inserted (set by the
    /// committer once the buffer holds `index_from` entries).
    indexing: AtomicBool,
    /// Every write is in the index: a key it lacks is not here. Set after
    /// the backfill's last insert (`Release`); a reader loads it before
    /// probing (`Acquire`), so a miss it trusts saw every insert.
    complete: AtomicBool,
    /// The committer's walk over the writes made before `indexing`.
    backfill: parking_lot::Mutex<Backfill>,
    /// Entries at which indexing starts ([`INDEX_FROM`]; tests lower it).
    index_from: u64,
    /// Writes the backfill walks at once ([`BACKFILL_CHUNK`]).
    backfill_chunk: u64,
    /// Keys the buffer before this one indexed: room the index takes
    /// when it starts, so a workload as busy as the last never grows it.
    index_hint: u64,
    /// Tests narrow the index's hashes to make different keys share them.
    #[cfg(test)]
    index_mask: u64,
    /// Tombstones snapshot ranges walked past in this buffer, summed over
    /// readers ([`MemBuffer::note_walked`]).
    walked: AtomicU64,
    /// Called once that sum passes [`WALKED_FOLD_AFTER`].
    nudge: FoldNudge,
}

/// Asks the database's background checkpointer to fold soon, kept by
/// each buffer, which does not know the checkpointer: snapshot ranges
/// that walked many of its tombstones ask for it to be folded
/// ([`MemBuffer::note_walked`], design.md "Tombstone walks").
#[derive(Clone, Default)]
pub struct FoldNudge(Option<std::sync::Arc<dyn Fn() + Send + Sync>>);

impl FoldNudge {
    /// A nudge that calls `ask`.
    pub fn new(ask: impl Fn() + Send + Sync + 'static) -> FoldNudge {
        FoldNudge(Some(std::sync::Arc::new(ask)))
    }

    /// Asks for a fold (nothing for a nudge made by `default`).
    pub fn nudge(&self) {
        if let Some(ask) = &self.0 {
            ask();
        }
    }
}

impl std::fmt::Debug for FoldNudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "FoldNudge"
        } else {
            "FoldNudge(none)"
        })
    }
}

/// Tombstones readers may walk past in one buffer before they ask for it
/// to be folded (design.md "Tombstone walks"): at some 50–100 ns each,
/// a few milliseconds of reading spent on removed keys.
pub const WALKED_FOLD_AFTER: u64 = 65_536;

/// Entries a buffer holds before it indexes its keys. Below this a seek
/// through the skip list stays short and mostly in cache, and commits of
/// a small buffer pay nothing for an index (a no-sync single-row commit
/// ran about a fifth slower with every write indexed: `sheaf-bench peers
/// --engines sheafdb`, 50,000 no-sync single-insert txns, 101k–127k
/// against 129k–164k txn/s, alternating runs).
pub const INDEX_FROM: u64 = 65_536;

/// Writes the backfill walks at once, so the seek that resumes it is paid
/// once per so many; it walks four older writes per new one, so a buffer
/// that starts indexing at `n` entries is complete by `1.25 n`.
pub const BACKFILL_CHUNK: u64 = 256;
const BACKFILL_PER_WRITE: u64 = 4;

/// How far the committer has filled a buffer's key index.
#[derive(Debug, Default)]
enum Backfill {
    /// Not indexing: the buffer is small.
    #[default]
    Off,
    /// New writes are indexed; older ones are walked from `from` (the
    /// next map key: table, key, reversed version; `None`: the start),
    /// `credit` writes' worth at a time.
    Filling {
        from: Option<(TableId, Arc<[u8]>, u64)>,
        credit: u64,
    },
    /// Every write is indexed.
    Done,
}

/// Whether a batch of writes moves the key index on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyIndex {
    /// Commits: a large buffer starts indexing, and walks older writes
    /// into the index, as commits go in.
    Build,
    /// Replay at open: neither (indexing 100,000 replayed writes cost a
    /// fifth of a reopen: a cold reference count, a random table slot and
    /// an allocation per write). Replay fills buffers no commit has
    /// indexed yet; the first commits after open walk its writes into the
    /// index. Charged no index bytes.
    Skip,
}

impl KeyIndex {
    /// Bytes charged per entry on top of its key and value.
    pub fn overhead(self) -> u64 {
        match self {
            KeyIndex::Build => ENTRY_OVERHEAD + INDEX_OVERHEAD,
            KeyIndex::Skip => ENTRY_OVERHEAD,
        }
    }
}

/// The newest write inserted whose `(table, key)` hashes to an index
/// entry's hash. Why it answers a point read at version `at` whenever
/// it names the key read and `version ≤ at`: a write visible at `at` was
/// inserted before its version was published, so before the read began,
/// and writes go in in version order; so no later write of the key can be
/// visible at `at`. Otherwise (a newer write, or another key with the
/// same hash) the read seeks the skip list. An absent hash means no write
/// of the key is visible here at all, once the index is complete. (A
/// write the backfill walks in is its key's newest: the walk meets a
/// key's versions newest first and inserts only into an absent hash,
/// and every later write of the key replaces the entry.)
#[derive(Debug)]
struct Newest {
    table: TableId,
    key: Arc<[u8]>,
    version: Version,
    slot: Slot,
}

impl std::fmt::Debug for MemBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemBuffer")
            .field("entries", &self.entries())
            .field("bytes", &self.bytes())
            .field("versions", &self.versions())
            .field("frozen", &self.is_frozen())
            .finish()
    }
}

type MapEntry<'a, 'g> = Entry<'a, 'g, BufKey, Slot>;

/// Most writes [`MemBuffer::newest_from`] takes under one epoch guard: a
/// fold walks a buffer of a million writes without holding the global
/// epoch back for the whole walk. Its first chunk is
/// [`NEWEST_FIRST_CHUNK`] and each next one twice the last, so a fold
/// round that stops after a few writes (a round of one page) copies few
/// more than it uses.
const NEWEST_CHUNK: usize = 1024;
const NEWEST_FIRST_CHUNK: usize = 8;

/// One write as a fold reads it.
type Newest4 = (TableId, Arc<[u8]>, Version, Slot);

impl Default for MemBuffer {
    fn default() -> MemBuffer {
        MemBuffer {
            map: SkipList::new(epoch::default_collector().clone()),
            bytes: AtomicU64::default(),
            entries: AtomicU64::default(),
            newest: AtomicU64::default(),
            oldest: AtomicU64::default(),
            frozen: AtomicBool::default(),
            filter: KeyFilter::default(),
            index: papaya::HashMap::default(),
            indexing: AtomicBool::default(),
            complete: AtomicBool::default(),
            backfill: parking_lot::Mutex::default(),
            index_from: 0,
            backfill_chunk: 0,
            index_hint: 0,
            #[cfg(test)]
            index_mask: 0,
            walked: AtomicU64::default(),
            nudge: FoldNudge::default(),
        }
    }
}

impl MemBuffer {
    /// Adds `n` tombstones a reader walked past. The one call that takes
    /// the sum past [`WALKED_FOLD_AFTER`] asks for a fold through the
    /// buffer's nudge (once per buffer) and returns true.
    pub fn note_walked(&self, n: u64) -> bool {
        let crossed = self.count_walked(n);
        if crossed {
            self.nudge.nudge();
        }
        crossed
    }

    /// [`MemBuffer::note_walked`] without the nudge: true for the one
    /// call that takes the sum past [`WALKED_FOLD_AFTER`], whose caller
    /// asks for the fold itself (a write transaction, once it no longer
    /// holds the writer lock the fold needs).
    pub fn count_walked(&self, n: u64) -> bool {
        let before = self.walked.fetch_add(n, Ordering::Relaxed);
        before < WALKED_FOLD_AFTER && before.saturating_add(n) >= WALKED_FOLD_AFTER
    }

    /// Starts the sum of walked tombstones again: a fold asked for gave
    /// up (the CF's writer stayed busy, `Fold::Busy`), and nothing else
    /// would ask again, so the next walks past [`WALKED_FOLD_AFTER`] do.
    pub fn rearm_walked(&self) {
        self.walked.store(0, Ordering::Relaxed);
    }

    /// An empty, writable buffer that asks for its fold through `nudge`.
    pub fn nudging(nudge: FoldNudge) -> MemBuffer {
        MemBuffer {
            nudge,
            ..MemBuffer::new()
        }
    }

    /// What this buffer calls to ask for a fold.
    pub fn nudge(&self) -> &FoldNudge {
        &self.nudge
    }

    /// An empty, writable buffer.
    pub fn new() -> MemBuffer {
        MemBuffer {
            oldest: AtomicU64::new(u64::MAX),
            index_from: INDEX_FROM,
            backfill_chunk: BACKFILL_CHUNK,
            #[cfg(test)]
            index_mask: u64::MAX,
            ..MemBuffer::default()
        }
    }

    /// An empty buffer to follow `prev` (a fold's new buffer): if its key
    /// index starts, it takes room for as many keys as `prev` indexed, so
    /// a workload as busy as the last one never grows it (growing moves
    /// every entry while commits wait). Nothing is allocated before then.
    pub fn after(prev: &MemBuffer) -> MemBuffer {
        MemBuffer {
            index_hint: prev.index.len() as u64,
            index_from: prev.index_from,
            backfill_chunk: prev.backfill_chunk,
            #[cfg(test)]
            index_mask: prev.index_mask,
            nudge: prev.nudge.clone(),
            ..MemBuffer::new()
        }
    }

    /// A buffer that indexes its keys from `from` entries on, walking
    /// older writes in `chunk` at a time, with only `bits` bits of each
    /// key's hash (fewer than 64: most keys share an index entry with
    /// others, and reads must then seek the skip list).
    #[cfg(test)]
    pub fn with_index(from: u64, chunk: u64, bits: u32) -> MemBuffer {
        MemBuffer {
            index_from: from,
            backfill_chunk: chunk,
            index_mask: u64::MAX >> (64 - bits),
            ..MemBuffer::new()
        }
    }

    /// True once every write is in the key index.
    #[cfg(test)]
    pub fn index_complete(&self) -> bool {
        self.complete.load(Ordering::Acquire)
    }

    /// The key index's hash for a key hashing to `h`.
    #[inline]
    fn index_hash(&self, h: u64) -> u64 {
        #[cfg(test)]
        let h = h & self.index_mask;
        h
    }

    /// Records that `key` of `table` became `slot` at `version`. Called by
    /// one thread at a time (the committer, under its CF's commit gate),
    /// with versions that never go backwards; readers may run meanwhile
    /// and see the entry only once their snapshot reaches `version`.
    /// The key is shared, not copied, when the caller has it shared.
    /// (A commit inserts its writes as a batch: [`MemBuffer::inserting`].)
    pub fn insert(&self, table: TableId, key: impl Into<Arc<[u8]>>, version: Version, slot: Slot) {
        let key: Arc<[u8]> = key.into();
        let mut ins = self.inserting(table, version, KeyIndex::Build);
        ins.push(write_set::Prepared::new(table, key, slot));
        ins.finish();
    }

    /// Starts inserting writes of `table` at `version` (one commit's):
    /// the checks, the filter's lock and the size figures are paid once
    /// per batch, not per write. The figures include the batch after
    /// [`Inserting::finish`], which must come before `version` is
    /// published.
    pub fn inserting(&self, table: TableId, version: Version, index: KeyIndex) -> Inserting<'_> {
        assert!(
            !self.frozen.load(Ordering::Acquire),
            "insert into a frozen buffer"
        );
        let newest = self.newest.load(Ordering::Relaxed);
        assert!(
            version.0 >= newest,
            "buffer versions went backwards: {} after {newest}",
            version.0
        );
        debug_assert!(
            index == KeyIndex::Build || !self.indexing.load(Ordering::Relaxed),
            "replay into a buffer that commits have indexed (its writes would be charged no index bytes)"
        );
        Inserting {
            buf: self,
            table,
            version,
            filter: self.filter.adder(),
            guard: epoch::pin(),
            mode: index,
            index: (self.indexing.load(Ordering::Acquire)).then(|| self.index.pin()),
            charge: 0,
            count: 0,
        }
    }

    /// The bytes inserting `writes` charges (what a buffered commit
    /// reserves in the database-wide budget).
    pub fn charge_of(writes: &WriteSet, index: KeyIndex) -> u64 {
        writes.bytes() + writes.entries() * (index.overhead() - write_set::ENTRY_OVERHEAD)
    }

    /// Marks the buffer read-only (a fold is about to read it whole).
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::Release);
    }

    /// True once [`MemBuffer::freeze`] ran.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Acquire)
    }

    /// Bytes the buffer charges (keys, values and per-entry overhead).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Number of entries (versions of keys) inserted.
    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Oldest and newest version inserted, if any.
    pub fn versions(&self) -> Option<(Version, Version)> {
        let newest = self.newest.load(Ordering::Acquire);
        let oldest = self.oldest.load(Ordering::Acquire);
        (oldest <= newest).then_some((Version(oldest), Version(newest)))
    }

    /// What this buffer says of `key` at version `at`: `Some(slot)` if it
    /// has a version `≤ at` of the key (the newest such), `None` if the
    /// key is unknown here at `at`.
    pub fn get(&self, table: TableId, key: &[u8], at: Version) -> Option<Slot> {
        let h = hash(table, key);
        if self.entries() == 0 || !self.filter.may_contain(h) {
            return None;
        }
        if let Some(found) = self.ask_index(table, key, h, at) {
            return found;
        }
        let p = probe(table, Pos::Key(key), u64::MAX - at.0);
        let guard = epoch::pin();
        let e = (self.map).lower_bound(Bound::Included(&p as &dyn KeyView), &guard)?;
        let k = e.key();
        (k.table == table && *k.key == *key).then(|| e.value().clone())
    }

    /// What the key index says of `key` (hashing to `h`) at `at`, if it
    /// decides: `Some(Some(slot))` its newest write `≤ at`, `Some(None)`
    /// none here (the index is complete and lacks the hash). `None`: ask
    /// the skip list (no index yet, another key or a newer write under
    /// the hash, or an incomplete index without the hash).
    fn ask_index(&self, table: TableId, key: &[u8], h: u64, at: Version) -> Option<Option<Slot>> {
        // Before the probe: if the index was complete, every insert the
        // backfill made is seen by the probe.
        let complete = self.complete.load(Ordering::Acquire);
        if !complete && !self.indexing.load(Ordering::Relaxed) {
            return None;
        }
        let index = self.index.pin();
        match index.get(&self.index_hash(h)) {
            None if complete => Some(None),
            Some(n) if n.table == table && n.version <= at && *n.key == *key => {
                Some(Some(n.slot.clone()))
            }
            _ => None,
        }
    }

    /// After a commit's batch of `written` writes: starts indexing once
    /// the buffer holds `index_from` entries, and walks older writes into
    /// the index, [`BACKFILL_PER_WRITE`] per new write, a chunk at a time.
    /// Called by the committer only (the lock is never contended).
    fn advance_index(&self, written: u64) {
        // Most commits: a small buffer, or a complete index. Told without
        // the lock (the committer wrote both flags).
        let small = !self.indexing.load(Ordering::Relaxed) && self.entries() < self.index_from;
        if small || self.complete.load(Ordering::Relaxed) {
            return;
        }
        let mut fill = self.backfill.lock();
        if matches!(*fill, Backfill::Off) {
            if self.entries() < self.index_from {
                return;
            }
            // Room for twice the writes so far (or as many keys as the
            // last buffer indexed): the first buffer of a busy CF, which
            // has no hint, then rarely grows its index (papaya's
            // incremental resize cost a no-sync single-row commit about
            // an eighth of its time while it ran: `help_copy` in a
            // profile of 50,000 commits into a 100,000-write buffer).
            let room = (2 * self.entries()).max(self.index_hint);
            self.index.pin().reserve(room as usize);
            self.indexing.store(true, Ordering::Release);
            *fill = Backfill::Filling {
                from: None,
                credit: 0,
            };
        }
        let Backfill::Filling { from, credit } = &mut *fill else {
            return;
        };
        *credit += written * BACKFILL_PER_WRITE;
        if *credit < self.backfill_chunk {
            return;
        }
        match self.backfill_from(from.take(), std::mem::take(credit)) {
            Some(next) => *from = Some(next),
            None => {
                // After the walk's last insert: a reader that sees the
                // flag sees them all.
                self.complete.store(true, Ordering::Release);
                *fill = Backfill::Done;
            }
        }
    }

    /// Walks up to `max` writes from `from` into the index, each whose
    /// hash it lacks. The next map key to walk from, or `None` at the end.
    fn backfill_from(
        &self,
        from: Option<(TableId, Arc<[u8]>, u64)>,
        max: u64,
    ) -> Option<(TableId, Arc<[u8]>, u64)> {
        let start = match &from {
            None => Bound::Unbounded,
            Some((t, k, rev)) => Bound::Included(probe(*t, Pos::Key(k), *rev)),
        };
        let index = self.index.pin();
        let guard = epoch::pin();
        let mut cur = self.map.lower_bound(as_dyn(&start), &guard);
        let mut walked = 0;
        while let Some(e) = cur {
            let k = e.key();
            if walked == max {
                return Some((k.table, k.key.clone(), k.rev));
            }
            walked += 1;
            // A key's versions come newest first: the first one walked
            // takes an absent hash, older ones find it taken.
            let h = self.index_hash(hash(k.table, &k.key));
            if index.get(&h).is_none() {
                let n = Newest {
                    table: k.table,
                    key: k.key.clone(),
                    version: k.version(),
                    slot: e.value().clone(),
                };
                index.insert(h, n);
            }
            cur = e.next();
        }
        None
    }

    /// The first key of `table` within `(lo, hi)` that has a version `≤ at`
    /// here, from the front (`back == false`) or the back, with its newest
    /// such slot.
    pub fn seek(
        &self,
        table: TableId,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        at: Version,
        back: bool,
    ) -> Option<(Held, Slot)> {
        let mut first = None;
        self.visible(table, (lo, hi), at, back, |k, s| {
            first = Some((Held::Shared(k.clone()), s.clone()));
            false
        });
        first
    }

    /// Up to `max` keys of `table` within `(lo, hi)` with a version `≤ at`,
    /// in order from the front (`back == false`) or the back, each with
    /// its newest such slot, appended to `out`. True if the range holds no
    /// more than those (`out` got fewer than `max`, or exactly the last).
    /// What a walk takes in one seek instead of seeking once per key.
    pub fn seek_run(
        &self,
        table: TableId,
        (lo, hi): (Bound<&[u8]>, Bound<&[u8]>),
        (at, back): (Version, bool),
        max: usize,
        out: &mut VecDeque<(Held, Slot)>,
    ) -> bool {
        debug_assert!(max > 0, "a run of no keys");
        let mut taken = 0;
        self.visible(table, (lo, hi), at, back, |k, s| {
            if taken == max {
                return false;
            }
            out.push_back((Held::Shared(k.clone()), s.clone()));
            taken += 1;
            true
        })
    }

    /// Calls `visit` with each key of `table` within `(lo, hi)` that has a
    /// version `≤ at`, and its newest such slot, in order from the front or
    /// the back, until `visit` returns false. True if the range ran out
    /// first.
    fn visible(
        &self,
        table: TableId,
        (lo, hi): (Bound<&[u8]>, Bound<&[u8]>),
        at: Version,
        back: bool,
        visit: impl FnMut(&Arc<[u8]>, &Slot) -> bool,
    ) -> bool {
        if back {
            self.visible_back(table, (lo, hi), at, visit)
        } else {
            self.visible_front(table, (lo, hi), at, visit)
        }
    }

    fn visible_front(
        &self,
        table: TableId,
        (lo, hi): (Bound<&[u8]>, Bound<&[u8]>),
        at: Version,
        mut visit: impl FnMut(&Arc<[u8]>, &Slot) -> bool,
    ) -> bool {
        let start = match lo {
            Bound::Included(k) => Bound::Included(probe(table, Pos::Key(k), 0)),
            Bound::Excluded(k) => Bound::Excluded(probe(table, Pos::Key(k), u64::MAX)),
            Bound::Unbounded => Bound::Included(probe(table, Pos::Key(&[]), 0)),
        };
        let guard = epoch::pin();
        let mut cur = self.map.lower_bound(as_dyn(&start), &guard);
        // A key's versions come newest first: the first visible one is its
        // newest `≤ at`, the rest of the key is skipped.
        let mut last: Option<MapEntry<'_, '_>> = None;
        while let Some(e) = cur {
            let k = e.key();
            if k.table != table || above(&k.key, hi) {
                return true;
            }
            let seen = last.as_ref().is_some_and(|l| l.key().same_key(k));
            if !seen && k.version() <= at {
                if !visit(&k.key, e.value()) {
                    return false;
                }
                last = Some(e.clone());
            }
            cur = e.next();
        }
        true
    }

    fn visible_back(
        &self,
        table: TableId,
        (lo, hi): (Bound<&[u8]>, Bound<&[u8]>),
        at: Version,
        mut visit: impl FnMut(&Arc<[u8]>, &Slot) -> bool,
    ) -> bool {
        let start = match hi {
            Bound::Included(k) => Bound::Included(probe(table, Pos::Key(k), u64::MAX)),
            Bound::Excluded(k) => Bound::Excluded(probe(table, Pos::Key(k), 0)),
            Bound::Unbounded => Bound::Excluded(probe(table, Pos::End, 0)),
        };
        let guard = epoch::pin();
        let mut cur = self.map.upper_bound(as_dyn(&start), &guard);
        // Going back, a key's versions come oldest first: the last visible
        // one seen before the key changes is the newest `≤ at`.
        let mut best: Option<MapEntry<'_, '_>> = None;
        while let Some(e) = cur {
            let k = e.key();
            if k.table != table || below(&k.key, lo) {
                break;
            }
            if let Some(b) = best.take_if(|b| !b.key().same_key(k)) {
                if !visit(&b.key().key, b.value()) {
                    return false;
                }
            }
            if k.version() <= at {
                best = Some(e.clone());
            }
            cur = e.prev();
        }
        best.is_none_or(|b| visit(&b.key().key, b.value()))
    }

    /// Calls `f` with the table and key of every entry, puts and
    /// tombstones, at every version (a key filter's build: a superset of
    /// the keys a fold can put into the trees).
    pub fn visit_keys(&self, mut f: impl FnMut(TableId, &[u8])) {
        let guard = epoch::pin();
        for e in self.map.iter(&guard) {
            f(e.key().table, &e.key().key);
        }
    }

    /// Every entry newer than `after` and at most `through` (`None`: no
    /// upper bound), in version order (keys in order within a version):
    /// what stays buffered when a fold covers the versions up to `after`.
    pub fn entries_between(
        &self,
        after: Version,
        through: Option<Version>,
    ) -> Vec<(TableId, Arc<[u8]>, Version, Slot)> {
        // Nothing was written after `after` (a fold no commit overtook):
        // no walk over every entry to find that out.
        if self.versions().is_none_or(|(_, newest)| newest <= after) {
            return Vec::new();
        }
        let guard = epoch::pin();
        let mut out: Vec<_> = (self.map.iter(&guard))
            .filter(|e| e.key().version() > after && through.is_none_or(|t| e.key().version() <= t))
            .map(|e| {
                let k = e.key();
                (k.table, k.key.clone(), k.version(), e.value().clone())
            })
            .collect();
        out.sort_by_key(|(_, _, v, _)| *v);
        out
    }

    /// Every key of every table from `(table, key)` on, in `(table, key)`
    /// order, with its newest slot at version `≤ at` and that version:
    /// what a fold applies to the trees (a fold round resumes where the
    /// last one stopped; a full fold skips what rounds folded already).
    pub fn newest_from<'a>(
        &'a self,
        at: Version,
        table: TableId,
        key: &[u8],
    ) -> impl Iterator<Item = Newest4> + 'a {
        // Taken a chunk at a time, each under a guard of its own; the next
        // chunk starts after every version of the last key taken.
        let mut from = Some((table, Arc::<[u8]>::from(key), true));
        let mut chunk = VecDeque::new();
        let mut size = NEWEST_FIRST_CHUNK;
        std::iter::from_fn(move || {
            if chunk.is_empty() {
                let (t, k, first) = from.take()?;
                from = self.newest_chunk(at, (t, &k, first), size, &mut chunk);
                size = (2 * size).min(NEWEST_CHUNK);
            }
            chunk.pop_front()
        })
    }

    /// Up to `max` writes for [`MemBuffer::newest_from`], from `(table,
    /// key)` (itself included if `first`, else only the keys after it),
    /// appended to `out`. Where the next chunk starts, or `None` at the
    /// end.
    fn newest_chunk(
        &self,
        at: Version,
        (table, key, first): (TableId, &[u8], bool),
        max: usize,
        out: &mut VecDeque<Newest4>,
    ) -> Option<(TableId, Arc<[u8]>, bool)> {
        debug_assert!(max > 0, "a chunk of no writes");
        let start = match first {
            true => Bound::Included(probe(table, Pos::Key(key), 0)),
            false => Bound::Excluded(probe(table, Pos::Key(key), u64::MAX)),
        };
        let guard = epoch::pin();
        let mut cur = self.map.lower_bound(as_dyn(&start), &guard);
        // The entry last taken: older versions of its key are skipped.
        let mut last: Option<MapEntry<'_, '_>> = None;
        while let Some(e) = cur {
            cur = e.next();
            let k = e.key();
            if k.version() > at {
                continue;
            }
            let seen =
                (last.as_ref()).is_some_and(|l| l.key().table == k.table && l.key().same_key(k));
            if seen {
                continue;
            }
            if out.len() == max {
                // Resume before this key: every version of the last one
                // taken is behind it.
                let l = last.as_ref().map(|l| l.key())?;
                return Some((l.table, l.key.clone(), false));
            }
            out.push_back((k.table, k.key.clone(), k.version(), e.value().clone()));
            last = Some(e);
        }
        None
    }
}

/// Writes of one table going into a buffer at one version (see
/// [`MemBuffer::inserting`]).
pub struct Inserting<'b> {
    buf: &'b MemBuffer,
    table: TableId,
    version: Version,
    filter: super::filter::FilterAdder<'b>,
    /// One pin for the whole batch.
    guard: Guard,
    /// Whether the batch moves the index on.
    mode: KeyIndex,
    /// `None`: the buffer is not indexing yet.
    index: Option<papaya::HashMapRef<'b, u64, Newest, IdHashBuilder, papaya::LocalGuard<'b>>>,
    charge: u64,
    count: u64,
}

impl Inserting<'_> {
    /// Says that about `n` writes follow: a large batch (a replayed log,
    /// a big commit) grows the key index once instead of step by step.
    pub fn expect(&mut self, n: usize) {
        if let Some(index) = self.index.as_ref().filter(|_| n >= 1024) {
            index.reserve(n);
        }
    }

    /// Inserts one write.
    pub fn push(&mut self, w: write_set::Prepared) {
        debug_assert_eq!(w.prefix, key_prefix(&w.key), "a stale key prefix");
        debug_assert_eq!(w.hash, hash(self.table, &w.key), "a stale key hash");
        let write_set::Prepared {
            key,
            prefix,
            hash: h,
            slot,
        } = w;
        self.charge +=
            key.len() as u64 + slot.as_ref().map_or(0, |v| v.len() as u64) + self.mode.overhead();
        self.count += 1;
        self.filter.add(h);
        // Indexed: the key and value are shared with the index entry
        // (otherwise the key is not cloned: replay's keys' counts sit on
        // cold lines).
        let newest = self.index.is_some().then(|| Newest {
            table: self.table,
            key: key.clone(),
            version: self.version,
            slot: slot.clone(),
        });
        let k = BufKey {
            table: self.table,
            prefix,
            key,
            rev: u64::MAX - self.version.0,
        };
        let e = self.buf.map.get_or_insert(k, slot, &self.guard);
        debug_assert_eq!(e.key().version(), self.version);
        e.release(&self.guard);
        if let (Some(index), Some(n)) = (&self.index, newest) {
            index.insert(self.buf.index_hash(h), n);
        }
    }

    /// Brings the buffer's figures up to date with the batch.
    pub fn finish(self) {
        let (buf, v) = (self.buf, self.version.0);
        drop(self.filter);
        drop(self.index);
        if self.count == 0 {
            return;
        }
        buf.newest.store(v, Ordering::Release);
        buf.oldest.fetch_min(v, Ordering::AcqRel);
        buf.bytes.fetch_add(self.charge, Ordering::Relaxed);
        buf.entries.fetch_add(self.count, Ordering::Relaxed);
        if self.mode == KeyIndex::Build {
            buf.advance_index(self.count);
        }
    }
}

fn as_dyn<'a>(b: &'a Bound<Probe<'a>>) -> Bound<&'a (dyn KeyView + 'a)> {
    match b {
        Bound::Included(p) => Bound::Included(p as &dyn KeyView),
        Bound::Excluded(p) => Bound::Excluded(p as &dyn KeyView),
        Bound::Unbounded => Bound::Unbounded,
    }
}
