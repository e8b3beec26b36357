//! Model tests of the buffer layer: one buffer against a version-indexed
//! model, and the merged view (write set over buffers over a tree) against
//! a `BTreeMap`, walked from both ends in random interleavings. Every
//! random test prints its seed in its assertion messages.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::mem::{KeyIndex, MemBuffer};
use super::merge::{self, BufferLayer, BufferWalk, Layer, TreeWalk, Window, WritesLayer};
use super::write_set::{Prepared, WriteSet};
use super::{Held, Slot};
use crate::btree::mem_store::MemStore;
use crate::btree::{self, TreeRoot};
use crate::types::{TableId, Version};

const T1: TableId = TableId(1);
const T2: TableId = TableId(2);

fn key(rng: &mut StdRng) -> Vec<u8> {
    // Few distinct keys of 0 to 2 bytes: plenty of collisions, the empty
    // key, and prefixes of one another. Some are stretched past the eight
    // bytes the buffer compares first (with zeros or 0xff, then one more
    // byte), so keys tie on those eight and differ only after them.
    let len = rng.gen_range(0..3);
    let mut k: Vec<u8> = (0..len).map(|_| rng.gen_range(0..4u8)).collect();
    if rng.gen_bool(0.25) {
        k.resize(8, if rng.gen_bool(0.5) { 0 } else { 0xff });
        k.push(rng.gen_range(0..2u8));
    }
    k
}

/// Takes `T1`'s writes out of `ws`, in the order `into_key_order` yields
/// them.
fn drained_in_key_order(ws: &mut WriteSet) -> Vec<(Vec<u8>, Slot)> {
    let mut got = Vec::new();
    if let Some(w) = ws.take_table(T1) {
        w.into_key_order(|w| got.push((w.key.to_vec(), w.slot)));
    }
    got
}

/// Keys point reads are checked at: some of them written, some not.
fn point_keys() -> [Vec<u8>; 6] {
    [vec![], vec![0], vec![1], vec![1, 2], vec![2], vec![3, 3]]
}

fn slot(rng: &mut StdRng) -> Slot {
    if rng.gen_bool(0.3) {
        None
    } else {
        let n = rng.gen_range(0..5);
        Some((0..n).map(|_| rng.gen()).collect::<Vec<u8>>().into())
    }
}

fn bound(rng: &mut StdRng) -> Bound<Vec<u8>> {
    match rng.gen_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng)),
        _ => Bound::Excluded(key(rng)),
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn in_range(k: &[u8], lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    Window::new(lo, hi).contains(k)
}

/// Every write to one buffer: (table, key) → [(version, slot)], oldest
/// first.
type History = BTreeMap<(TableId, Vec<u8>), Vec<(Version, Slot)>>;

fn newest(h: &[(Version, Slot)], at: Version) -> Option<Slot> {
    h.iter()
        .rev()
        .find(|(v, _)| *v <= at)
        .map(|(_, s)| s.clone())
}

/// Fills a buffer with `versions` commits of a few random writes each.
fn fill(rng: &mut StdRng, buf: &MemBuffer, first: u64, versions: u64, hist: &mut History) {
    fill_indexing(rng, buf, (first, versions), 0, hist)
}

/// [`fill`], with the versions below `replayed` inserted as replay does
/// (not in the key index).
fn fill_indexing(
    rng: &mut StdRng,
    buf: &MemBuffer,
    (first, versions): (u64, u64),
    replayed: u64,
    hist: &mut History,
) {
    for v in first..first + versions {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..rng.gen_range(1..4) {
            let t = if rng.gen_bool(0.7) { T1 } else { T2 };
            let k = key(rng);
            if !seen.insert((t, k.clone())) {
                continue; // one write per key per commit, as a write set gives
            }
            let s = slot(rng);
            let index = if v < replayed {
                KeyIndex::Skip
            } else {
                KeyIndex::Build
            };
            let mut ins = buf.inserting(t, Version(v), index);
            ins.push(Prepared::new(t, Arc::from(&k[..]), s.clone()));
            ins.finish();
            hist.entry((t, k)).or_default().push((Version(v), s));
        }
    }
}

#[test]
fn a_buffer_answers_points_and_seeks_like_its_history() {
    answers_like_its_history(MemBuffer::new, 0);
}

/// The same with every write in the key index from the first commit on.
#[test]
fn an_indexed_buffer_answers_points_and_seeks_like_its_history() {
    answers_like_its_history(|| MemBuffer::with_index(0, 1, 64), 0);
}

/// Writes replay inserted without the key index are found all the same,
/// before and after indexed writes of the same keys, with the index
/// started part way and filled over several commits.
#[test]
fn a_buffer_with_replayed_writes_answers_like_its_history() {
    answers_like_its_history(|| MemBuffer::with_index(10, 3, 64), 9);
}

/// The same with an index where keys share hashes: a point read whose
/// index entry names another key must still find its own.
#[test]
fn a_buffer_whose_keys_share_index_hashes_answers_like_its_history() {
    answers_like_its_history(|| MemBuffer::with_index(0, 1, 1), 0);
}

fn answers_like_its_history(new: fn() -> MemBuffer, replayed: u64) {
    for seed in 0..200u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let buf = new();
        let mut hist = History::new();
        fill_indexing(&mut rng, &buf, (3, 12), replayed, &mut hist);
        for at in 0..17u64 {
            let at = Version(at);
            for t in [T1, T2] {
                for k in point_keys() {
                    let want = hist.get(&(t, k.clone())).and_then(|h| newest(h, at));
                    assert_eq!(
                        buf.get(t, &k, at),
                        want,
                        "seed {seed} get {t:?} {k:?} at {at:?}"
                    );
                }
                for _ in 0..6 {
                    let (lo, hi) = (bound(&mut rng), bound(&mut rng));
                    let visible: Vec<(Vec<u8>, Slot)> = hist
                        .iter()
                        .filter(|((tt, k), _)| *tt == t && in_range(k, as_ref(&lo), as_ref(&hi)))
                        .filter_map(|((_, k), h)| newest(h, at).map(|s| (k.clone(), s)))
                        .collect();
                    for back in [false, true] {
                        let want = if back {
                            visible.last()
                        } else {
                            visible.first()
                        };
                        // A run of up to `max` keys from the same end.
                        let max = rng.gen_range(1..5);
                        let mut run = std::collections::VecDeque::new();
                        let ended =
                            buf.seek_run(t, (as_ref(&lo), as_ref(&hi)), (at, back), max, &mut run);
                        let run: Vec<(Vec<u8>, Slot)> =
                            run.into_iter().map(|(k, s)| (k.to_vec(), s)).collect();
                        let mut want_run: Vec<_> = visible.clone();
                        if back {
                            want_run.reverse();
                        }
                        want_run.truncate(max);
                        assert_eq!(run, want_run, "seed {seed} run of {max} back {back}");
                        assert_eq!(ended, visible.len() <= max, "seed {seed} run end");
                        let got = buf
                            .seek(t, as_ref(&lo), as_ref(&hi), at, back)
                            .map(|(k, s)| (k.to_vec(), s));
                        assert_eq!(
                            got.as_ref(),
                            want,
                            "seed {seed} seek {t:?} {lo:?}..{hi:?} at {at:?} back {back}"
                        );
                    }
                }
            }
        }
        // A fold (or a fold round, from any key on) reads the newest slot
        // of every key, in order, with its version.
        for (at, from) in [
            (9, (T1, vec![])),
            (14, (T1, vec![2])),
            (6, (T2, vec![1, 2])),
        ] {
            let at = Version(at);
            let folded: Vec<_> = buf
                .newest_from(at, from.0, &from.1)
                .map(|(t, k, v, s)| ((t, k.to_vec()), v, s))
                .collect();
            let want: Vec<_> = hist
                .range(from.clone()..)
                .filter_map(|(tk, h)| {
                    let (v, s) = h.iter().rev().find(|(v, _)| *v <= at)?;
                    Some((tk.clone(), *v, s.clone()))
                })
                .collect();
            assert_eq!(folded, want, "seed {seed} newest_from {from:?} at {at:?}");
        }
    }
}

#[test]
fn buffer_figures_follow_inserts() {
    let buf = MemBuffer::new();
    assert_eq!(buf.versions(), None);
    buf.insert(T1, &b"ab"[..], Version(4), Some(Arc::from(&b"xyz"[..])));
    buf.insert(T1, &b"ab"[..], Version(6), None);
    assert_eq!(buf.versions(), Some((Version(4), Version(6))));
    assert_eq!(buf.entries(), 2);
    assert_eq!(
        buf.bytes(),
        2 + 3 + 2 + 2 * super::mem::KeyIndex::Build.overhead()
    );
    buf.freeze();
    assert!(buf.is_frozen());
}

#[test]
#[should_panic(expected = "versions went backwards")]
fn a_buffer_refuses_an_older_version() {
    let buf = MemBuffer::new();
    buf.insert(T1, &b"a"[..], Version(5), None);
    buf.insert(T1, &b"b"[..], Version(4), None);
}

#[test]
#[should_panic(expected = "frozen")]
fn a_frozen_buffer_refuses_inserts() {
    let buf = MemBuffer::new();
    buf.freeze();
    buf.insert(T1, &b"a"[..], Version(5), None);
}

/// A tree, two buffers over it and a write set over those, with the
/// model of what the merged view must show at each version.
struct Stack {
    store: MemStore,
    root: TreeRoot,
    older: MemBuffer,
    newer: MemBuffer,
    writes: WriteSet,
    hist: History,
    tree: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Stack {
    fn new(rng: &mut StdRng) -> Stack {
        let mut store = MemStore::new(512);
        let mut root = TreeRoot::default();
        let mut tree = BTreeMap::new();
        for _ in 0..rng.gen_range(0..40) {
            let k = key(rng);
            let v: Vec<u8> = (0..rng.gen_range(0..300)).map(|_| rng.gen()).collect();
            btree::insert(&mut store, &mut root, &k, &v).unwrap();
            tree.insert(k, v);
        }
        store.commit();
        let (older, newer) = (MemBuffer::new(), MemBuffer::new());
        let mut hist = History::new();
        fill(rng, &older, 1, 6, &mut hist);
        fill(rng, &newer, 7, 6, &mut hist);
        Stack {
            store,
            root,
            older,
            newer,
            writes: WriteSet::new(),
            hist,
            tree,
        }
    }

    /// T1 as the merged view shows it at `at` (with or without the write
    /// set).
    fn model(&self, at: Version, with_writes: bool) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = self.tree.clone();
        let apply = |m: &mut BTreeMap<Vec<u8>, Vec<u8>>, k: &[u8], s: &Slot| match s {
            Some(v) => {
                m.insert(k.to_vec(), v.to_vec());
            }
            None => {
                m.remove(k);
            }
        };
        for ((t, k), h) in &self.hist {
            if let (true, Some(s)) = (*t == T1, newest(h, at)) {
                apply(&mut m, k, &s);
            }
        }
        if let Some(w) = self.writes.table(T1).filter(|_| with_writes) {
            let mut after: Option<Held> = None;
            loop {
                let lo = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                let Some((k, s)) = w.seek(lo, Bound::Unbounded, false) else {
                    break;
                };
                apply(&mut m, &k, &s);
                after = Some(k);
            }
        }
        m
    }

    fn get(&self, k: &[u8], at: Version) -> Option<Vec<u8>> {
        let w = self.writes.table(T1);
        let mut lookups = [
            w.and_then(|w| w.get(k)),
            self.newer.get(T1, k, at),
            self.older.get(T1, k, at),
        ]
        .into_iter();
        merge::get(&mut lookups, || {
            Ok(btree::get(&self.store, &self.root, k)?.map(Held::Page))
        })
        .unwrap()
        .map(|h| h.to_vec())
    }
}

/// Walks the merged view of T1 inside `(lo, hi)` at `at`, taking each step
/// from the end `rng` picks; returns the entries in key order.
fn walk(
    stack: &Stack,
    rng: &mut StdRng,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
    at: Version,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut w = Window::new(lo, hi);
    let mut tree = TreeWalk::new(&stack.root, &w);
    // The newer buffer through a kept walk, the older one sought afresh.
    let mut newer = BufferWalk::default();
    let (mut front, mut back) = (Vec::new(), Vec::new());
    let (mut front_done, mut back_done) = (false, false);
    while !(front_done && back_done) {
        let from_back = if front_done {
            true
        } else if back_done {
            false
        } else {
            rng.gen_bool(0.5)
        };
        let mut l0 = WritesLayer(stack.writes.table(T1));
        let mut l1 = newer.with(&stack.newer, T1, at);
        let mut l2 = BufferLayer {
            buf: &stack.older,
            table: T1,
            at,
        };
        let mut l3 = tree.with(&stack.store);
        let mut layers: [&mut dyn Layer; 4] = [&mut l0, &mut l1, &mut l2, &mut l3];
        match merge::step(&mut layers, &mut w, from_back, &mut 0).unwrap() {
            Some((k, v)) if from_back => back.push((k.to_vec(), v.to_vec())),
            Some((k, v)) => front.push((k.to_vec(), v.to_vec())),
            None if from_back => back_done = true,
            None => front_done = true,
        }
    }
    back.reverse();
    front.extend(back);
    front
}

#[test]
fn the_merged_view_matches_a_model_from_both_ends() {
    for seed in 0..300u64 {
        let mut rng = StdRng::seed_from_u64(1000 + seed);
        let mut stack = Stack::new(&mut rng);
        // The transaction's own writes, with existence taken from the view.
        let at = Version(rng.gen_range(0..14));
        for _ in 0..rng.gen_range(0..6) {
            let k = key(&mut rng);
            let existed = stack.get(&k, at).is_some();
            stack.writes.record(T1, &k, slot(&mut rng), existed);
        }
        let model = stack.model(at, true);
        let base_len = stack.model(at, false).len();
        let delta = stack.writes.table(T1).map_or(0, |w| w.delta().unwrap());
        assert_eq!(
            base_len as i64 + delta,
            model.len() as i64,
            "seed {seed}: len delta"
        );
        for k in [vec![], vec![0], vec![1], vec![2, 3], vec![3, 3]] {
            assert_eq!(
                stack.get(&k, at),
                model.get(&k).cloned(),
                "seed {seed} get {k:?}"
            );
        }
        for _ in 0..8 {
            let (lo, hi) = (bound(&mut rng), bound(&mut rng));
            let want: Vec<(Vec<u8>, Vec<u8>)> = model
                .iter()
                .filter(|(k, _)| in_range(k, as_ref(&lo), as_ref(&hi)))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let got = walk(&stack, &mut rng, as_ref(&lo), as_ref(&hi), at);
            assert_eq!(got, want, "seed {seed} range {lo:?}..{hi:?} at {at:?}");
        }
    }
}

#[test]
fn write_set_bytes_and_drops() {
    let mut ws = WriteSet::new();
    ws.record(T1, b"k", Some(Arc::from(&b"vv"[..])), false);
    ws.record(T1, b"k", None, true);
    ws.record(T2, b"j", Some(Arc::from(&b"1"[..])), true);
    let per = super::write_set::ENTRY_OVERHEAD;
    assert_eq!(ws.bytes(), (1 + per) + (1 + 1 + per));
    assert_eq!(ws.table(T1).unwrap().delta(), Some(0));
    assert_eq!(ws.table(T1).unwrap().len(), 1, "one key, written twice");
    assert_eq!(ws.table(T2).unwrap().delta(), Some(0));
    assert_eq!(ws.tables(), vec![T1, T2]);
    ws.drop_table(T2);
    assert_eq!(ws.bytes(), 1 + per);
    assert!(ws.table(T2).is_none());
    assert!(!ws.is_empty());
}

/// `TableWrites::into_key_order` gives each written key once, with its last
/// write, in byte order (keys that tie on their first eight bytes
/// included), as a model map does.
#[test]
fn a_write_sets_sorted_view_matches_a_model() {
    for seed in 0..200u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut ws = WriteSet::new();
        let mut model: std::collections::BTreeMap<Vec<u8>, Slot> = Default::default();
        for _ in 0..rng.gen_range(0..60) {
            let (k, s) = (key(&mut rng), slot(&mut rng));
            ws.record(T1, &k, s.clone(), model.contains_key(&k));
            model.insert(k, s);
        }
        let want: Vec<(Vec<u8>, Slot)> = model.into_iter().collect();
        assert_eq!(drained_in_key_order(&mut ws), want, "seed {seed}");
    }
}

/// Blind writes (WAL replay) leave the count change unknown until it is
/// resolved against what existed before: the result is what tracked
/// writes would have counted.
#[test]
fn blind_writes_resolve_to_the_tracked_count() {
    let mut rng = StdRng::seed_from_u64(31);
    for _ in 0..50 {
        let before: BTreeSet<u8> = (0..40u8).filter(|_| rng.gen_bool(0.5)).collect();
        let (mut tracked, mut blind) = (WriteSet::new(), WriteSet::new());
        let mut now = before.clone();
        for _ in 0..60 {
            let k = rng.gen_range(0..40u8);
            let slot = rng.gen_bool(0.6).then(|| Arc::from(&[k][..]));
            tracked.record(T1, &[k], slot.clone(), now.contains(&k));
            blind.record_blind(T1, &[k], slot.clone());
            if slot.is_some() {
                now.insert(k);
            } else {
                now.remove(&k);
            }
        }
        let want = now.len() as i64 - before.len() as i64;
        assert_eq!(tracked.table(T1).unwrap().delta(), Some(want));
        assert_eq!(blind.table(T1).unwrap().delta(), None, "unresolved");
        let mut asked = Vec::new();
        blind
            .with_table_mut(T1, |w| {
                w.resolve(|k| {
                    asked.push(k.to_vec());
                    Ok(before.contains(&k[0]))
                })
            })
            .unwrap()
            .unwrap();
        assert_eq!(blind.table(T1).unwrap().delta(), Some(want));
        assert!(asked.windows(2).all(|w| w[0] < w[1]), "keys asked in order");
        assert_eq!(tracked.bytes(), blind.bytes());
    }
}

/// A write set fed blind writes (kept in a log until settled), tracked
/// writes and settles in any order reads, seeks (both directions, every
/// bound) and yields in key order exactly the last write of each key; its
/// bytes, once settled, are those of a set that saw only the last writes.
#[test]
fn blind_write_logs_read_and_settle_like_the_map() {
    let mut rng = StdRng::seed_from_u64(47);
    let key = |rng: &mut StdRng| vec![rng.gen_range(0..30u8); rng.gen_range(1..3)];
    let bound = |rng: &mut StdRng, k: Vec<u8>| match rng.gen_range(0..3) {
        0 => Bound::Included(k),
        1 => Bound::Excluded(k),
        _ => Bound::Unbounded,
    };
    for case in 0..300 {
        let mut ws = WriteSet::new();
        let mut model: BTreeMap<Vec<u8>, Slot> = BTreeMap::new();
        for _ in 0..rng.gen_range(1..80) {
            let k = key(&mut rng);
            let slot = rng.gen_bool(0.7).then(|| Arc::from(&k[..]));
            match rng.gen_range(0..10) {
                0..=5 => ws.record_blind(T1, &k, slot.clone()),
                6 | 7 => {
                    let existed = model.get(&k).is_some_and(Option::is_some);
                    ws.record(T1, &k, slot.clone(), existed);
                }
                _ => {
                    ws.settle_logs();
                    continue;
                }
            }
            model.insert(k, slot);
            let w = ws.table(T1).expect("written");
            let probe = key(&mut rng);
            assert_eq!(w.get(&probe), model.get(&probe).cloned(), "case {case}");
            let (lk, hk) = (key(&mut rng), key(&mut rng));
            let (lo, hi) = (bound(&mut rng, lk), bound(&mut rng, hk));
            fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
                b.as_ref().map(Vec::as_slice)
            }
            let valid = match (&lo, &hi) {
                (Bound::Included(l), Bound::Included(h)) => l <= h,
                (
                    Bound::Included(l) | Bound::Excluded(l),
                    Bound::Included(h) | Bound::Excluded(h),
                ) => l < h,
                _ => true,
            };
            for back in [false, true] {
                let got = w
                    .seek(as_ref(&lo), as_ref(&hi), back)
                    .map(|(k, s)| (k.to_vec(), s));
                let mut r = valid
                    .then(|| model.range::<Vec<u8>, _>((lo.clone(), hi.clone())))
                    .into_iter()
                    .flatten();
                let want = if back { r.next_back() } else { r.next() };
                let want = want.map(|(k, s)| (k.clone(), s.clone()));
                assert_eq!(got, want, "case {case} back {back}");
            }
        }
        ws.settle_logs();
        let mut last_only = WriteSet::new();
        for (k, s) in &model {
            last_only.record(T1, k, s.clone(), false);
        }
        assert_eq!(ws.bytes(), last_only.bytes(), "case {case}");
        assert_eq!(ws.entries(), model.len() as u64, "case {case}");
        let want: Vec<(Vec<u8>, Slot)> = model.into_iter().collect();
        assert_eq!(drained_in_key_order(&mut ws), want, "case {case}");
    }
}

/// A log of blind writes that is never settled by hand still yields one
/// write per key, the last, in key order (replay's path).
#[test]
fn an_unsettled_blind_log_yields_each_keys_last_write() {
    let mut ws = WriteSet::new();
    for round in 0..3u8 {
        for k in (0..50u8).rev() {
            ws.record_blind(T1, &[k], Some(Arc::from(&[k, round][..])));
        }
    }
    assert_eq!(ws.entries(), 150, "unsettled: an upper bound");
    let want: Vec<(Vec<u8>, Slot)> = (0..50u8)
        .map(|k| (vec![k], Some(Arc::from(&[k, 2][..]))))
        .collect();
    assert_eq!(drained_in_key_order(&mut ws), want);
}

/// Point reads at every version after every commit, while the key index
/// starts part way, fills over later commits and completes; with full
/// and with narrowed hashes, and with replayed writes first.
#[test]
fn point_reads_match_the_history_while_the_index_fills() {
    let mut completed = 0;
    for seed in 0..300u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let bits = if seed % 3 == 0 { 2 } else { 64 };
        let from = rng.gen_range(0..12);
        let buf = MemBuffer::with_index(from, rng.gen_range(1..6), bits);
        let replayed = if seed % 2 == 0 {
            rng.gen_range(1..8)
        } else {
            0
        };
        let mut hist = History::new();
        for v in 1..24u64 {
            fill_indexing(&mut rng, &buf, (v, 1), replayed, &mut hist);
            for at in 0..=v {
                for t in [T1, T2] {
                    for k in point_keys() {
                        let want = hist
                            .get(&(t, k.clone()))
                            .and_then(|h| newest(h, Version(at)));
                        assert_eq!(
                            buf.get(t, &k, Version(at)),
                            want,
                            "seed {seed} after commit {v}: get {t:?} {k:?} at {at}"
                        );
                    }
                }
            }
        }
        completed += buf.index_complete() as u32;
    }
    // The walk finished in most cases, so complete indexes were read too.
    assert!(completed > 100, "only {completed} of 300 indexes completed");
}

/// Readers at a published version see exactly the commits up to it while
/// the committer keeps inserting newer ones.
#[test]
fn readers_see_exactly_their_version_during_inserts() {
    readers_see_their_version(MemBuffer::new());
    // The key index starts at 1,000 entries and fills while they read.
    readers_see_their_version(MemBuffer::with_index(1_000, 64, 64));
}

fn readers_see_their_version(buf: MemBuffer) {
    let buf = Arc::new(buf);
    let published = Arc::new(AtomicU64::new(0));
    const N: u64 = 20_000;
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (buf, published) = (buf.clone(), published.clone());
            std::thread::spawn(move || {
                let mut checks = 0u64;
                loop {
                    let at = Version(published.load(Ordering::Acquire));
                    // Commit v put key v (big-endian) and removed key v-1.
                    let first = buf.seek(T1, Bound::Unbounded, Bound::Unbounded, at, false);
                    let last = buf.seek(T1, Bound::Unbounded, Bound::Unbounded, at, true);
                    if at.0 == 0 {
                        assert!(first.is_none() && last.is_none());
                    } else {
                        // Keys 1..at-1 are tombstones at `at`; key `at` is put.
                        let k = at.0.to_be_bytes();
                        assert_eq!(buf.get(T1, &k, at).map(|s| s.is_some()), Some(true));
                        let (lk, ls) = last.unwrap();
                        assert_eq!(&*lk, &k[..], "newest key at {at:?}");
                        assert!(ls.is_some());
                        let next = (at.0 + 1).to_be_bytes();
                        assert_eq!(buf.get(T1, &next, at), None, "a future commit leaked");
                    }
                    checks += 1;
                    if at.0 == N {
                        return checks;
                    }
                }
            })
        })
        .collect();
    for v in 1..=N {
        let k = v.to_be_bytes();
        buf.insert(T1, &k[..], Version(v), Some(Arc::from(&k[..])));
        if v > 1 {
            buf.insert(T1, &(v - 1).to_be_bytes()[..], Version(v), None);
        }
        published.store(v, Ordering::Release);
    }
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

/// `entries_between` at the edges of a buffer's versions: nothing after
/// the newest (answered without a walk), exactly the newest version's
/// writes after the one before it, nothing from an empty buffer.
#[test]
fn entries_between_ends_at_the_newest_version() {
    let empty = MemBuffer::new();
    assert!(empty.entries_between(Version(0), None).is_empty());
    let buf = MemBuffer::new();
    for v in 1..=3u64 {
        for k in [b"a", b"b"] {
            let value: Arc<[u8]> = Arc::from(&[v as u8][..]);
            buf.insert(TableId(1), k.to_vec(), Version(v), Some(value));
        }
    }
    assert!(buf.entries_between(Version(3), None).is_empty());
    assert!(buf.entries_between(Version(4), Some(Version(9))).is_empty());
    let last = buf.entries_between(Version(2), None);
    let got: Vec<(Vec<u8>, Version)> = last.iter().map(|e| (e.1.to_vec(), e.2)).collect();
    assert_eq!(
        got,
        [(b"a".to_vec(), Version(3)), (b"b".to_vec(), Version(3))]
    );
    assert_eq!(buf.entries_between(Version(0), Some(Version(2))).len(), 4);
}

/// `newest_from` over more writes than one chunk of its walk holds: every
/// key from the start on, once, with its newest version `≤ at`, across
/// tables, whatever the start and however the chunk edges fall among a
/// key's versions.
#[test]
fn newest_from_walks_past_its_chunks_like_the_history() {
    let mut rng = StdRng::seed_from_u64(0x5EED_0F01D);
    let buf = MemBuffer::new();
    // (table, key) -> versions written, oldest first.
    type Versions = Vec<(Version, Slot)>;
    let mut hist: BTreeMap<(TableId, Vec<u8>), Versions> = BTreeMap::new();
    for v in 1..=40u64 {
        for _ in 0..150 {
            let table = TableId(1 + rng.gen_range(0..3));
            let k = rng.gen_range(0u32..3000).to_be_bytes().to_vec();
            if hist
                .get(&(table, k.clone()))
                .is_some_and(|h| h.last().unwrap().0 == Version(v))
            {
                continue; // one write of a key per version, as a commit makes
            }
            let s = slot(&mut rng);
            buf.insert(table, k.clone(), Version(v), s.clone());
            hist.entry((table, k)).or_default().push((Version(v), s));
        }
    }
    let starts = [
        (40, (1, 0u32)),
        (25, (1, 0)),
        (7, (2, 1500)),
        (40, (3, 2999)),
        (0, (1, 0)),
    ];
    for (i, (at, start)) in starts.into_iter().enumerate() {
        let (at, start) = (
            Version(at),
            (TableId(start.0), start.1.to_be_bytes().to_vec()),
        );
        let want: Vec<_> = (hist.range(start.clone()..))
            .filter_map(|((t, k), h)| {
                let (v, s) = h.iter().rev().find(|(v, _)| *v <= at)?;
                Some((*t, k.clone(), *v, s.clone()))
            })
            .collect();
        let got: Vec<_> = (buf.newest_from(at, start.0, &start.1))
            .map(|(t, k, v, s)| (t, k.to_vec(), v, s))
            .collect();
        if i < 2 {
            assert!(want.len() > 2048, "the walk spans several chunks");
        }
        assert_eq!(got, want, "at {at:?} from {start:?}");
    }
}

#[test]
fn walked_tombstones_ask_for_a_fold_once() {
    use super::mem::{FoldNudge, WALKED_FOLD_AFTER};
    let asked = Arc::new(AtomicU64::new(0));
    let counter = asked.clone();
    let nudge = FoldNudge::new(move || {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    let b = MemBuffer::nudging(nudge);
    assert!(
        !b.note_walked(WALKED_FOLD_AFTER - 1),
        "asked below the mark"
    );
    assert!(b.note_walked(1), "the crossing asks");
    assert!(!b.note_walked(WALKED_FOLD_AFTER), "asked twice");
    assert_eq!(asked.load(Ordering::Relaxed), 1, "the nudge is called once");
    // A fold that gave up re-arms it: the walks ask again past the mark.
    b.rearm_walked();
    assert!(!b.count_walked(WALKED_FOLD_AFTER - 1));
    assert!(b.note_walked(1), "a re-armed buffer asks again");
    assert_eq!(asked.load(Ordering::Relaxed), 2);
    b.rearm_walked();
    assert!(
        b.count_walked(WALKED_FOLD_AFTER),
        "counting alone reports the crossing"
    );
    assert_eq!(
        asked.load(Ordering::Relaxed),
        2,
        "counting alone does not nudge"
    );
    // A fold's next buffer asks through the same nudge, afresh.
    let next = MemBuffer::after(&b);
    assert!(next.note_walked(WALKED_FOLD_AFTER));
    assert_eq!(asked.load(Ordering::Relaxed), 3);
    let c = MemBuffer::new();
    assert!(c.note_walked(WALKED_FOLD_AFTER * 3), "one big walk asks");
    assert!(!c.note_walked(1));
}
