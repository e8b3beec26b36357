//! The key filter of a CF: a Bloom filter over every `(table, key)` its
//! trees may hold, so a write transaction that puts a key no tree has (the
//! old value of most inserts of new keys) learns that without a descent
//! through a tree of cold pages (design.md "Key filter").
//!
//! Owns: [`CfKeyFilter`] (the filter writers trust, one being built, and
//! the request for a build), [`KeyFilter`] (one sized filter and what it
//! was built from), [`FilterTargets`] (what one write transaction adds its
//! puts to and trusts) and [`FilterBudget`] (the bytes every filter of the
//! database takes, against `Builder::key_filter_memory`).
//!
//! Invariant F1 (kept here and in `db::key_filter::build_cf`): a filter
//! that writers trust, built from version `from` of its CF, holds the hash
//! of every `(table, key)` in a tree of that CF at any version `≥ from`
//! (and in the buffers they fold), whatever transaction put it there:
//! - its build added every key of every tree and buffer of `from`;
//! - it was installed as a target, before `from` was read, under the CF's
//!   writer lock: every later write transaction adds each key it puts
//!   (`WriteState::log_write`) and none was running;
//! - trees gain keys only from puts (folds move buffered puts; compaction
//!   and relocation move pages; replay ran before the build).
//!
//! A put of a key that existed just before adds nothing: the filter holds
//! it already (its earlier put, or the scan, added it). A filter only
//! gains bits, so a key removed stays a (harmless) false positive until
//! the next build, and so does a key an aborted transaction put. Its key
//! count is of new keys only; past its capacity it asks for a new build,
//! sized from the CF's entry count.
//!
//! Must not know: trees, catalogs, the scan (`db::key_filter`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};

use crate::buffer::filter::{hash, Bits};
use crate::types::{TableId, Version};

/// Keys the smallest filter is sized for.
pub const MIN_CAPACITY: u64 = 1 << 16;

/// Keys the largest filter may be sized for (an estimate comes partly
/// from the file: a damaged count must not ask for an impossible size).
pub const MAX_CAPACITY: u64 = 1 << 40;

/// Bytes of key filters in use over the whole database, and their bound;
/// the signal that wakes the thread that builds them.
#[derive(Debug)]
pub struct FilterBudget {
    used: AtomicU64,
    limit: u64,
    /// Tree descents a key filter spared a write transaction since open.
    skipped: AtomicU64,
    /// Filters built (and trusted) since open.
    built: AtomicU64,
    /// Keys the smallest filter is sized for ([`MIN_CAPACITY`]; tests
    /// lower it to make chains grow and builds happen with few keys).
    min_keys: u64,
    signal: Mutex<Signal>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Signal {
    woken: bool,
    shutdown: bool,
}

impl FilterBudget {
    /// A budget of `limit` bytes (0: no filters).
    #[cfg(test)]
    pub fn new(limit: u64) -> FilterBudget {
        FilterBudget::with_min_keys(limit, MIN_CAPACITY)
    }

    /// A budget of `limit` bytes whose smallest filter holds `min_keys`.
    pub fn with_min_keys(limit: u64, min_keys: u64) -> FilterBudget {
        FilterBudget {
            min_keys: min_keys.max(1),
            used: AtomicU64::new(0),
            limit,
            skipped: AtomicU64::new(0),
            built: AtomicU64::new(0),
            signal: Mutex::new(Signal::default()),
            wake: Condvar::new(),
        }
    }

    /// Asks the builder thread to look for CFs that want a build.
    pub fn wake(&self) {
        self.signal.lock().woken = true;
        self.wake.notify_all();
    }

    /// Tells the builder thread to stop (a build in flight is abandoned).
    pub fn shutdown(&self) {
        self.signal.lock().shutdown = true;
        self.wake.notify_all();
    }

    /// True once [`FilterBudget::shutdown`] was called.
    pub fn stopped(&self) -> bool {
        self.signal.lock().shutdown
    }

    /// Waits to be woken or for `timeout`; false once shut down.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        let mut s = self.signal.lock();
        if !s.woken && !s.shutdown {
            self.wake.wait_for(&mut s, timeout);
        }
        s.woken = false;
        !s.shutdown
    }

    /// Bytes the filters take now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The bound (`Builder::key_filter_memory`).
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Counts tree descents a transaction's filters spared.
    pub fn note_skips(&self, n: u64) {
        self.skipped.fetch_add(n, Ordering::Relaxed);
    }

    /// Filters built since open.
    pub fn built(&self) -> u64 {
        self.built.load(Ordering::Acquire)
    }

    /// Tree descents spared since open.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Takes `bytes` if they fit under the limit.
    fn try_take(&self, bytes: u64) -> bool {
        let mut cur = self.used.load(Ordering::Acquire);
        loop {
            let Some(next) = cur.checked_add(bytes).filter(|n| *n <= self.limit) else {
                return false;
            };
            match self
                .used
                .compare_exchange(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    fn give_back(&self, bytes: u64) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        assert!(before >= bytes, "key filter budget released twice");
    }
}

/// One filter of a CF: its bits, the version its build read, and how many
/// keys went in (past its capacity its false positives grow, and the
/// filter asks for a new build).
#[derive(Debug)]
pub struct KeyFilter {
    bits: Bits,
    /// The version its build scanned; trusted by writers whose base is at
    /// or past it (F1). `None` while the build runs.
    from: std::sync::OnceLock<Version>,
    keys: AtomicU64,
    budget: Arc<FilterBudget>,
}

impl KeyFilter {
    /// A filter for `capacity` keys, if the budget has room for it.
    pub fn new(capacity: u64, budget: &Arc<FilterBudget>) -> Option<KeyFilter> {
        let capacity = capacity.max(budget.min_keys);
        if capacity > MAX_CAPACITY || !budget.try_take(Bits::bytes_for(capacity)) {
            return None;
        }
        let bits = Bits::new(capacity);
        debug_assert_eq!(bits.bytes(), Bits::bytes_for(capacity));
        Some(KeyFilter {
            bits,
            from: std::sync::OnceLock::new(),
            keys: AtomicU64::new(0),
            budget: budget.clone(),
        })
    }

    /// Adds `key` of `table`; true once the filter holds more keys than
    /// it was sized for.
    pub fn add(&self, table: TableId, key: &[u8]) -> bool {
        self.add_hash(hash(table, key))
    }

    fn add_hash(&self, h: u64) -> bool {
        self.bits.add(h);
        self.keys.fetch_add(1, Ordering::Relaxed) + 1 > self.bits.capacity()
    }

    /// Keys it was sized for.
    pub fn capacity(&self) -> u64 {
        self.bits.capacity()
    }

    /// The budget it is charged to (the database's).
    pub fn budget(&self) -> &FilterBudget {
        &self.budget
    }

    /// Bytes of its bits.
    pub fn bytes(&self) -> u64 {
        self.bits.bytes()
    }

    /// Marks the build done: it read version `from`.
    pub fn finish(&self, from: Version) {
        let set = self.from.set(from);
        assert!(set.is_ok(), "a key filter was built twice");
    }

    /// The version it was built from; `None` while its build runs.
    pub fn from(&self) -> Option<Version> {
        self.from.get().copied()
    }
}

impl Drop for KeyFilter {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes());
    }
}

/// What a write transaction adds its puts to and trusts.
#[derive(Debug, Default)]
pub struct FilterTargets {
    /// Trusted together by writers at or past `chain[0]`'s `from`: the
    /// first was built by a scan; each later one was added, empty, under
    /// the writer lock when the one before it filled (see
    /// [`CfKeyFilter::extend`]), and every new key since went into the
    /// last. A key is absent only if every one of them says so.
    pub chain: Vec<Arc<KeyFilter>>,
    /// Being built: gets every new key, trusted by nobody yet.
    pub building: Option<Arc<KeyFilter>>,
}

impl FilterTargets {
    /// Adds a put of a new `key` to `table` to the chain's last filter
    /// and the one being built; true if the last is now past its capacity.
    pub fn add(&self, table: TableId, key: &[u8]) -> bool {
        let h = hash(table, key);
        if let Some(b) = &self.building {
            b.add_hash(h);
        }
        self.chain.last().is_some_and(|f| f.add_hash(h))
    }

    /// True if the chain is trusted at `base` (F1) and says no tree holds
    /// `key` of `table`.
    pub fn lacks(&self, base: Version, table: TableId, key: &[u8]) -> bool {
        let Some(first) = self.chain.first() else {
            return false;
        };
        if first.from().is_none_or(|from| from > base) {
            return false;
        }
        let h = hash(table, key);
        // Every filter asked, no early exit: the chain's cache misses
        // overlap (an absent key must be asked of all of them anyway).
        self.chain
            .iter()
            .fold(true, |absent, f| absent & !f.bits.may_contain(h))
    }
}

/// How much larger each filter added to a chain is than the one before:
/// a CF that grows from nothing to a million keys holds three filters
/// (for 65,536, 262,144 and 1,048,576 keys), each probed for an absent
/// key; the fourth asks for a build that replaces them (after growth by
/// 64 times, so the scans cost O(1) per key put).
pub const GROWTH: u64 = 4;

/// A chain longer than this asks for a build that replaces it with one
/// filter (fewer probes, fewer false positives).
pub const MAX_CHAIN: usize = 3;

/// The key filters of one CF.
#[derive(Debug)]
pub struct CfKeyFilter {
    targets: ArcSwap<FilterTargets>,
    /// A build is wanted: none ran yet, or the chain grew too long.
    wanted: AtomicBool,
    /// Held for a whole build: one at a time (taken before the writer
    /// lock, never while holding it).
    pub build_lock: Mutex<()>,
}

impl Default for CfKeyFilter {
    fn default() -> Self {
        CfKeyFilter {
            targets: ArcSwap::from_pointee(FilterTargets::default()),
            wanted: AtomicBool::new(true),
            build_lock: Mutex::new(()),
        }
    }
}

impl CfKeyFilter {
    /// The targets a write transaction beginning now uses (call under the
    /// CF's writer lock).
    pub fn targets(&self) -> Arc<FilterTargets> {
        self.targets.load_full()
    }

    /// Asks for a new build; true if none was asked for yet.
    pub fn want_build(&self) -> bool {
        !self.wanted.swap(true, Ordering::AcqRel)
    }

    /// Takes the request for a build, if there is one.
    pub fn take_request(&self) -> bool {
        self.wanted.swap(false, Ordering::AcqRel)
    }

    /// Installs `f` to be built: every write transaction that begins from
    /// now on adds its new keys to it. Call under the CF's writer lock
    /// (F1) and `build_lock`.
    pub fn install(&self, f: Arc<KeyFilter>) {
        self.targets.rcu(|cur| {
            assert!(cur.building.is_none(), "two key filter builds at once");
            FilterTargets {
                chain: cur.chain.clone(),
                building: Some(f.clone()),
            }
        });
    }

    /// Trusts `f` from now on, alone: it holds every key of the trees and
    /// buffers of the version its build read (or, empty, of a CF that had
    /// none), and every new key put since it was installed. Writers that
    /// still hold the chain before drop it when they end.
    ///
    /// Returns false, changing nothing, if `f` is no longer the filter
    /// being built: the CF was dropped meanwhile ([`CfKeyFilter::release`]
    /// cleared it). The build's scan runs without the writer lock, so a
    /// `drop_cf` can come between; this was an assertion, and an
    /// adversarial probe (a CF created, filled and dropped in a loop while
    /// another thread built filters) panicked the builder thread on it.
    pub fn promote(&self, f: &Arc<KeyFilter>) -> bool {
        assert!(f.from().is_some(), "promoted before its build finished");
        let mut promoted = false;
        self.targets.rcu(|cur| {
            promoted = cur.building.as_ref().is_some_and(|b| Arc::ptr_eq(b, f));
            if !promoted {
                return FilterTargets {
                    chain: cur.chain.clone(),
                    building: cur.building.clone(),
                };
            }
            FilterTargets {
                chain: vec![f.clone()],
                building: None,
            }
        });
        if promoted {
            f.budget.built.fetch_add(1, Ordering::AcqRel);
        }
        promoted
    }

    /// The build of the installed filter failed: it goes, the chain stays.
    pub fn abandon(&self) {
        self.targets.rcu(|cur| FilterTargets {
            chain: cur.chain.clone(),
            building: None,
        });
    }

    /// Drops every filter (the CF was dropped): their bytes go back to
    /// the budget once no transaction holds them, not when the last
    /// handle of the CF goes.
    pub fn release(&self) {
        self.targets.store(Arc::new(FilterTargets::default()));
    }

    /// The chain's last filter is full: adds an empty one [`GROWTH`] times
    /// its capacity, which takes every new key from now on. Call under
    /// the CF's writer lock (F1: no other transaction adds meanwhile, and
    /// the caller uses the returned targets from now on). `None` if there
    /// is no chain or no room in the budget (new keys go on into the full
    /// filter: more false positives, never a false "absent").
    pub fn extend(&self) -> Option<Arc<FilterTargets>> {
        let cur = self.targets.load_full();
        let last = cur.chain.last()?;
        if last.keys.load(Ordering::Relaxed) <= last.bits.capacity() {
            return Some(cur); // a build replaced the chain meanwhile
        }
        // Four times larger if that fits, else twice, else as large.
        let sizes = [GROWTH, 2, 1].map(|g| last.bits.capacity().saturating_mul(g));
        let next = Arc::new(
            sizes
                .iter()
                .find_map(|&c| KeyFilter::new(c, &last.budget))?,
        );
        next.finish(Version(0)); // (trust comes from the chain's first)
        let mut longer = None;
        self.targets.rcu(|cur| {
            let mut chain = cur.chain.clone();
            chain.push(next.clone());
            let t = Arc::new(FilterTargets {
                chain,
                building: cur.building.clone(),
            });
            longer = Some(t.clone());
            t
        });
        longer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refuses_a_filter_past_it_and_takes_back_a_dropped_one() {
        let budget = Arc::new(FilterBudget::new(Bits::bytes_for(MIN_CAPACITY) * 2));
        let a = KeyFilter::new(1, &budget).expect("fits");
        let b = KeyFilter::new(MIN_CAPACITY, &budget).expect("fits");
        assert!(KeyFilter::new(1, &budget).is_none(), "over the budget");
        assert_eq!(budget.used(), a.bytes() + b.bytes());
        drop(a);
        assert!(KeyFilter::new(1, &budget).is_some(), "room again");
        drop(b);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_size_no_budget_could_hold_is_refused_before_any_allocation() {
        // (An estimate summed from a damaged file's table lengths.)
        let budget = Arc::new(FilterBudget::new(u64::MAX));
        assert!(KeyFilter::new(u64::MAX, &budget).is_none());
        assert!(KeyFilter::new(MAX_CAPACITY + 1, &budget).is_none());
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_filter_is_trusted_only_once_built_and_only_from_its_version() {
        let budget = Arc::new(FilterBudget::new(u64::MAX));
        let cf = CfKeyFilter::default();
        assert!(cf.take_request(), "a new CF wants a build");
        assert!(!cf.take_request(), "taken once");
        let f = Arc::new(KeyFilter::new(10, &budget).unwrap());
        cf.install(f.clone());
        let t = cf.targets();
        t.add(TableId(1), b"k");
        assert!(!t.lacks(Version(100), TableId(1), b"zz"), "still building");
        f.finish(Version(7));
        cf.promote(&f);
        assert_eq!(budget.built(), 1);
        let t = cf.targets();
        assert!(
            !t.lacks(Version(6), TableId(1), b"zz"),
            "a base before the build"
        );
        assert!(t.lacks(Version(7), TableId(1), b"zz"));
        assert!(!t.lacks(Version(7), TableId(1), b"k"), "kept the put");
        assert!(t.building.is_none());
    }

    #[test]
    fn a_build_that_ends_after_its_cf_was_dropped_is_not_promoted() {
        let budget = Arc::new(FilterBudget::new(u64::MAX));
        let cf = CfKeyFilter::default();
        let f = Arc::new(KeyFilter::new(10, &budget).unwrap());
        cf.install(f.clone());
        // drop_cf while the build scans, without the writer lock.
        cf.release();
        f.finish(Version(3));
        assert!(!cf.promote(&f), "promoted into a dropped CF");
        let t = cf.targets();
        assert!(t.chain.is_empty() && t.building.is_none());
        assert!(!t.lacks(Version(9), TableId(1), b"k"), "nothing trusted");
        assert_eq!(budget.built(), 0);
    }

    #[test]
    fn a_full_chain_grows_and_keeps_every_key_it_took() {
        let budget = Arc::new(FilterBudget::new(u64::MAX));
        let cf = CfKeyFilter::default();
        let f = Arc::new(KeyFilter::new(0, &budget).unwrap());
        cf.install(f.clone());
        f.finish(Version(1));
        cf.promote(&f);
        let mut t = cf.targets();
        let key = |i: u64| i.to_be_bytes();
        let mut extended = 0;
        for i in 0..MIN_CAPACITY * 5 {
            if t.add(TableId(5), &key(i)) {
                t = cf.extend().expect("room to grow");
                extended += 1;
            }
        }
        // 65,536 keys fill the first; the second takes 262,144.
        assert_eq!(extended, 1);
        assert_eq!(t.chain.len(), 2);
        assert_eq!(t.chain[1].bits.capacity(), MIN_CAPACITY * GROWTH);
        for i in (0..MIN_CAPACITY * 5).step_by(97) {
            assert!(!t.lacks(Version(1), TableId(5), &key(i)), "lost {i}");
        }
        let strangers = (0..10_000u64)
            .filter(|i| !t.lacks(Version(1), TableId(6), &key(*i)))
            .count();
        assert!(strangers < 500, "{strangers} false positives in 10,000");
        // A build in flight keeps getting every new key across growth.
        let b = Arc::new(KeyFilter::new(0, &budget).unwrap());
        cf.install(b.clone());
        let t = cf.targets();
        t.add(TableId(5), b"late");
        assert!(b.bits.may_contain(hash(TableId(5), b"late")));
        assert!(!t.lacks(Version(1), TableId(5), b"late"));
    }

    #[test]
    fn a_full_filter_says_so_and_every_key_added_stays_found() {
        let budget = Arc::new(FilterBudget::new(u64::MAX));
        let f = KeyFilter::new(1, &budget).unwrap();
        let cap = MIN_CAPACITY;
        let mut full_at = None;
        for i in 0..cap + 10 {
            if f.add(TableId(2), &i.to_be_bytes()) && full_at.is_none() {
                full_at = Some(i);
            }
        }
        assert_eq!(full_at, Some(cap), "full after its capacity");
        let has = |t: u64, i: u64| f.bits.may_contain(hash(TableId(t), &i.to_be_bytes()));
        assert!((0..cap + 10).all(|i| has(2, i)));
        let strangers = (0..10_000u64).filter(|i| has(3, *i)).count();
        assert!(strangers < 500, "{strangers} false positives in 10,000");
    }
}
