//! Tests of the B+tree against a `BTreeMap` model, over the in-memory
//! store of `mem_store` (which panics on double frees and on writes to
//! committed pages).

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::mem_store::MemStore;
use super::store::PageWrite;
use super::*;
use crate::format::page::{PageBytes as _, PageType};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const PS: usize = 4096;

/// Walks the tree and returns (entries, runs visited as first page → pages,
/// pages by type).
fn walk_all(s: &MemStore, root: &TreeRoot) -> (u64, BTreeMap<PageId, u32>, [usize; 3]) {
    let mut runs = BTreeMap::new();
    let mut by_type = [0usize; 3];
    let n = walk(s, root, &mut |id, npages, ty| {
        assert!(runs.insert(id, npages).is_none(), "walk visited {id} twice");
        match ty {
            PageType::Leaf => by_type[0] += 1,
            PageType::Branch => by_type[1] += 1,
            PageType::Overflow => by_type[2] += 1,
            PageType::Blob => panic!("blob in a tree"),
        }
    })
    .unwrap_or_else(|e| panic!("walk failed: {e}"));
    (n, runs, by_type)
}

/// Walks the only tree of `s` and checks that its pages are exactly the
/// live pages of the store (no leak, no dangling page).
fn check_store(s: &MemStore, root: &TreeRoot) -> [usize; 3] {
    let (n, runs, by_type) = walk_all(s, root);
    assert_eq!(n, root.len);
    assert_eq!(
        &runs,
        s.live(),
        "live pages differ from the pages of the tree"
    );
    by_type
}

/// Number of levels of the tree (0 when empty).
fn depth(s: &MemStore, root: &TreeRoot) -> u8 {
    root.root.map_or(0, |id| {
        let page = s.read_page(id).unwrap();
        node::NodeRef::parse(&page, id, s.page_size())
            .unwrap()
            .level()
            + 1
    })
}

fn collect_all(s: &MemStore, root: &TreeRoot) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut c = Cursor::all(root);
    let mut out = Vec::new();
    while let Some((k, v)) = c.next(s).unwrap() {
        out.push((k.to_vec(), v.to_vec()));
    }
    out
}

fn check_model(s: &MemStore, root: &TreeRoot, model: &Model) {
    assert_eq!(root.len, model.len() as u64);
    let got = collect_all(s, root);
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert!(got == want, "tree contents differ from the model");
}

fn value_of(len: usize, tag: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(tag) as u8)
        .collect()
}

thread_local! {
    /// Percentage of long keys `gen_key` makes beyond its usual 15 %.
    static LONG_KEYS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

fn gen_key(rng: &mut StdRng) -> Vec<u8> {
    let r = if rng.gen_range(0..100) < LONG_KEYS.with(|l| l.get()) {
        19
    } else {
        rng.gen_range(0..20)
    };
    match r {
        0..=5 => {
            let n = rng.gen_range(0..7);
            (0..n).map(|_| b"abcd"[rng.gen_range(0..4)]).collect()
        }
        6..=13 => rng.gen_range(0u64..20_000).to_be_bytes().to_vec(),
        14..=16 => {
            let mut k = vec![b'm'; rng.gen_range(10..100)];
            k.extend_from_slice(&rng.gen_range(0u32..500).to_be_bytes());
            k
        }
        _ => {
            let n = rng.gen_range(0..1020);
            let mut k = vec![b'L'; n];
            k.extend_from_slice(&rng.gen_range(0u32..300).to_be_bytes());
            k
        }
    }
}

fn gen_value(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.gen_range(0..20) {
        0..=15 => rng.gen_range(0..40),
        16..=18 => rng.gen_range(40..1500),
        _ => rng.gen_range(1500..20_000),
    };
    value_of(len, rng.gen())
}

fn gen_bound(rng: &mut StdRng) -> Bound<Vec<u8>> {
    match rng.gen_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(gen_key(rng)),
        _ => Bound::Excluded(gen_key(rng)),
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn in_range(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let lo_ok = match lo {
        Bound::Included(l) => k >= l.as_slice(),
        Bound::Excluded(l) => k > l.as_slice(),
        Bound::Unbounded => true,
    };
    let hi_ok = match hi {
        Bound::Included(h) => k <= h.as_slice(),
        Bound::Excluded(h) => k < h.as_slice(),
        Bound::Unbounded => true,
    };
    lo_ok && hi_ok
}

/// Runs a random mix of `next` / `next_back` over a random range and
/// compares with the model.
fn check_range(rng: &mut StdRng, s: &MemStore, root: &TreeRoot, model: &Model) {
    let (lo, hi) = (gen_bound(rng), gen_bound(rng));
    let mut want: VecDeque<(&Vec<u8>, &Vec<u8>)> = model
        .iter()
        .filter(|(k, _)| in_range(k, &lo, &hi))
        .collect();
    let mut c = Cursor::new(root, as_ref(&lo), as_ref(&hi));
    let back_bias = rng.gen_range(0.0..1.0);
    loop {
        let back = rng.gen_bool(back_bias);
        let got = if back {
            c.next_back(s).unwrap()
        } else {
            c.next(s).unwrap()
        };
        let exp = if back {
            want.pop_back()
        } else {
            want.pop_front()
        };
        match (got, exp) {
            (None, None) => break,
            (Some((k, v)), Some((ek, ev))) => {
                assert_eq!(k.as_slice(), ek.as_slice());
                assert!(v.as_slice() == ev.as_slice(), "value differs");
            }
            (g, e) => panic!("range {lo:?}..{hi:?}: got {g:?}, expected {e:?}"),
        }
    }
    // Both ends stay finished.
    assert!(c.next(s).unwrap().is_none());
    assert!(c.next_back(s).unwrap().is_none());
}

fn pick_key(rng: &mut StdRng, model: &Model) -> Vec<u8> {
    if model.is_empty() || rng.gen_bool(0.3) {
        gen_key(rng)
    } else {
        model
            .keys()
            .nth(rng.gen_range(0..model.len()))
            .unwrap()
            .clone()
    }
}

/// One random model run: phases of growth and shrinkage, so splits and
/// merges run at every level.
fn model_run(seed: u64, steps: usize, ps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut s = MemStore::new(ps);
    let mut root = TreeRoot::default();
    let mut model = Model::new();
    let mut max_len = 0;
    let mut max_depth = 0;
    let mut grow = false;
    for step in 0..steps {
        if step % 2000 == 0 {
            grow = !grow || model.is_empty();
            max_depth = max_depth.max(depth(&s, &root));
        }
        let (ins, del) = if grow { (66, 8) } else { (12, 62) };
        let op = rng.gen_range(0..100);
        let op = if op < ins {
            0
        } else if op < ins + del {
            1
        } else {
            op
        };
        match op {
            0 => {
                let (k, v) = (gen_key(&mut rng), gen_value(&mut rng));
                if rng.gen_bool(0.8) {
                    let old = insert(&mut s, &mut root, &k, &v).unwrap();
                    assert_eq!(old.map(|b| b.to_vec()).as_ref(), model.get(&k));
                } else {
                    let replaced = put(&mut s, &mut root, &k, &v).unwrap();
                    assert_eq!(replaced, model.contains_key(&k));
                }
                assert_eq!(
                    get(&s, &root, &k).unwrap().unwrap().as_slice(),
                    v.as_slice()
                );
                model.insert(k, v);
            }
            1 => {
                let k = pick_key(&mut rng, &model);
                if rng.gen_bool(0.8) {
                    let old = remove(&mut s, &mut root, &k).unwrap();
                    assert_eq!(old.map(|b| b.to_vec()), model.remove(&k));
                } else {
                    let found = delete(&mut s, &mut root, &k).unwrap();
                    assert_eq!(found, model.remove(&k).is_some());
                }
                assert!(get(&s, &root, &k).unwrap().is_none());
            }
            70..=79 => {
                let k = pick_key(&mut rng, &model);
                let got = get(&s, &root, &k).unwrap();
                assert_eq!(got.map(|b| b.to_vec()).as_ref(), model.get(&k));
            }
            80..=85 => check_range(&mut rng, &s, &root, &model),
            86..=87 => {
                let got = pop_first(&mut s, &mut root).unwrap();
                let exp = model.pop_first();
                assert_eq!(got.map(|(k, v)| (k.to_vec(), v.to_vec())), exp);
            }
            88..=89 => {
                let got = pop_last(&mut s, &mut root).unwrap();
                let exp = model.pop_last();
                assert_eq!(got.map(|(k, v)| (k.to_vec(), v.to_vec())), exp);
            }
            90 if rng.gen_bool(0.05) => {
                let m = rng.gen_range(2..9);
                let keep = |k: &[u8], v: &[u8]| !(k.len() + v.len()).is_multiple_of(m);
                let before = model.len();
                model.retain(|k, v| keep(k, v));
                let removed = retain(&mut s, &mut root, keep).unwrap();
                assert_eq!(removed, (before - model.len()) as u64);
            }
            91 if rng.gen_bool(0.05) => {
                let m = rng.gen_range(3..9);
                let pick =
                    |k: &[u8], _: &[u8]| k.last().is_some_and(|b| (*b as usize).is_multiple_of(m));
                let want: Vec<_> = model
                    .iter()
                    .filter(|(k, v)| pick(k, v))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                model.retain(|k, v| !pick(k, v));
                let got = drain_filter(&mut s, &mut root, pick).unwrap();
                assert_eq!(got, want);
            }
            92..=95 => s.commit(),
            _ => {
                let got = first(&s, &root).unwrap().map(|(k, _)| k.to_vec());
                assert_eq!(got.as_ref(), model.keys().next());
                let got = last(&s, &root).unwrap().map(|(k, _)| k.to_vec());
                assert_eq!(got.as_ref(), model.keys().next_back());
            }
        }
        assert_eq!(root.len, model.len() as u64, "seed {seed} step {step}");
        max_len = max_len.max(model.len());
        if model.len() < 64 || step % 25 == 0 {
            check_model(&s, &root, &model);
        }
        if step % 100 == 0 {
            check_store(&s, &root);
        }
    }
    check_model(&s, &root, &model);
    let t = check_store(&s, &root);
    eprintln!(
        "seed {seed}: {} entries, pages {t:?}, max {max_len}, depth {max_depth}",
        model.len()
    );
    assert!(max_depth >= 3, "the run never built a tree of depth 3");
    // Empty it completely.
    while let Some((k, _)) = pop_first(&mut s, &mut root).unwrap() {
        assert!(model.remove(k.as_slice()).is_some());
    }
    assert!(model.is_empty());
    assert_eq!(root, TreeRoot::default());
    assert!(
        s.live().is_empty(),
        "pages left after emptying: {:?}",
        s.live()
    );
}

#[test]
fn model_random_4k() {
    for seed in 0..4 {
        model_run(seed, 8100, PS);
    }
}

#[test]
fn model_random_long_keys() {
    LONG_KEYS.with(|l| l.set(80));
    model_run(200, 6100, PS);
    LONG_KEYS.with(|l| l.set(0));
}

#[test]
fn model_random_8k() {
    model_run(100, 8100, 8192);
}

/// A tree of `n` random entries (and its model), committed, with the
/// generator that made them.
fn committed_tree(seed: u64, n: usize) -> (StdRng, MemStore, TreeRoot, Model) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    let mut model = Model::new();
    for _ in 0..n {
        let (k, v) = (gen_key(&mut rng), gen_value(&mut rng));
        insert(&mut s, &mut root, &k, &v).unwrap();
        model.insert(k, v);
    }
    s.commit();
    (rng, s, root, model)
}

#[test]
fn cow_snapshot_survives() {
    let (mut rng, mut s, mut root, mut model) = committed_tree(5, 2000);
    let snap = root;
    let snap_model = model.clone();
    for round in 0..20 {
        for _ in 0..200 {
            let k = pick_key(&mut rng, &model);
            if rng.gen_bool(0.5) {
                let v = gen_value(&mut rng);
                insert(&mut s, &mut root, &k, &v).unwrap();
                model.insert(k, v);
            } else {
                remove(&mut s, &mut root, &k).unwrap();
                model.remove(&k);
            }
        }
        if round % 3 == 0 {
            s.commit();
        }
        check_model(&s, &snap, &snap_model);
        for (k, v) in snap_model.iter().take(50) {
            assert_eq!(get(&s, &snap, k).unwrap().unwrap().as_slice(), v.as_slice());
        }
    }
    check_model(&s, &root, &model);
    check_store(&s, &root);
}

#[test]
fn cursor_survives_mutation_of_another_tree() {
    let mut s = MemStore::new(PS);
    let (mut a, mut b) = (TreeRoot::default(), TreeRoot::default());
    for i in 0u32..3000 {
        insert(&mut s, &mut a, &i.to_be_bytes(), b"a").unwrap();
    }
    let mut c = Cursor::all(&a);
    let mut n = 0u32;
    while let Some((k, v)) = c.next(&s).unwrap() {
        assert_eq!(k.as_slice(), n.to_be_bytes());
        assert_eq!(v.as_slice(), b"a");
        insert(&mut s, &mut b, &n.to_be_bytes(), &[7u8; 100]).unwrap();
        n += 1;
    }
    assert_eq!(n, 3000);
    assert_eq!(b.len, 3000);
}

#[test]
fn returned_bytes_outlive_edits() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    insert(&mut s, &mut root, b"k", b"first").unwrap();
    let v = get(&s, &root, b"k").unwrap().unwrap();
    let old = insert(&mut s, &mut root, b"k", b"second").unwrap().unwrap();
    assert_eq!(v.as_slice(), b"first");
    assert_eq!(old.as_slice(), b"first");
    let removed = remove(&mut s, &mut root, b"k").unwrap().unwrap();
    assert_eq!(removed.as_slice(), b"second");
    assert_eq!(root, TreeRoot::default());
    assert!(s.live().is_empty());
}

fn leaf_ideal(ps: usize, n: usize, cell: usize) -> usize {
    let per_leaf = (ps - 48) / (cell + 2);
    n.div_ceil(per_leaf)
}

#[test]
fn sequential_inserts_fill_leaves() {
    const N: u64 = 100_000;
    let ideal = leaf_ideal(PS, N as usize, 7 + 8 + 8);
    for descending in [false, true] {
        let mut s = MemStore::new(PS);
        let mut root = TreeRoot::default();
        for i in 0..N {
            let i = if descending { N - 1 - i } else { i };
            put(&mut s, &mut root, &i.to_be_bytes(), &i.to_le_bytes()).unwrap();
            if i % 10_000 == 0 {
                s.commit();
            }
        }
        let [leaves, branches, _] = check_store(&s, &root);
        eprintln!("sequential descending={descending}: {leaves} leaves, {branches} branches, ideal {ideal}");
        assert!(
            (leaves as f64) < 1.15 * ideal as f64,
            "descending={descending}: {leaves} leaves, ideal {ideal}"
        );
        assert!(branches <= leaves / 50 + 2, "{branches} branches");
        for i in (0..N).step_by(997) {
            let v = get(&s, &root, &i.to_be_bytes()).unwrap().unwrap();
            assert_eq!(v.as_slice(), i.to_le_bytes());
        }
    }
}

#[test]
fn random_inserts_fill_reasonably() {
    let mut rng = StdRng::seed_from_u64(9);
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    const N: usize = 30_000;
    for _ in 0..N {
        let k: u64 = rng.gen();
        put(&mut s, &mut root, &k.to_be_bytes(), &[1u8; 8]).unwrap();
    }
    let [leaves, _, _] = check_store(&s, &root);
    let ideal = leaf_ideal(PS, N, 23);
    eprintln!("random: {leaves} leaves, ideal {ideal}");
    assert!(leaves < 2 * ideal, "{leaves} leaves, ideal {ideal}");
}

#[test]
fn shrinking_frees_pages() {
    let mut rng = StdRng::seed_from_u64(3);
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    let mut keys: Vec<u64> = (0..50_000).collect();
    for (n, k) in keys.iter().enumerate() {
        put(&mut s, &mut root, &k.to_be_bytes(), &[3u8; 20]).unwrap();
        if n % 5000 == 0 {
            s.commit();
        }
    }
    s.commit();
    // Remove all but 10, in random order.
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.gen_range(0..=i));
    }
    let (doomed, kept) = keys.split_at(keys.len() - 10);
    for (n, k) in doomed.iter().enumerate() {
        assert!(delete(&mut s, &mut root, &k.to_be_bytes()).unwrap());
        if n % 7000 == 0 {
            s.commit();
        }
        if n == 45_000 {
            // 5000 entries left: pages must have been merged along the way.
            let [leaves, _, _] = check_store(&s, &root);
            let ideal = leaf_ideal(PS, 5000, 7 + 8 + 20);
            eprintln!("shrunk to 5000 keys: {leaves} leaves, ideal {ideal}");
            assert!(leaves <= 3 * ideal, "{leaves} leaves, ideal {ideal}");
        }
    }
    let [leaves, branches, _] = check_store(&s, &root);
    eprintln!("shrunk to 10 keys: {leaves} leaves, {branches} branches");
    assert!(
        leaves + branches <= 3,
        "{leaves} leaves, {branches} branches for 10 keys"
    );
    let mut kept = kept.to_vec();
    kept.sort();
    let got: Vec<Vec<u8>> = collect_all(&s, &root).into_iter().map(|(k, _)| k).collect();
    let want: Vec<Vec<u8>> = kept.iter().map(|k| k.to_be_bytes().to_vec()).collect();
    assert_eq!(got, want);
    for k in &kept {
        assert!(delete(&mut s, &mut root, &k.to_be_bytes()).unwrap());
    }
    assert_eq!(root, TreeRoot::default());
    assert!(s.live().is_empty());
}

#[test]
fn shrinking_in_order_frees_pages() {
    for reverse in [false, true] {
        let mut s = MemStore::new(PS);
        let mut root = TreeRoot::default();
        for k in 0u64..20_000 {
            put(&mut s, &mut root, &k.to_be_bytes(), &[3u8; 40]).unwrap();
        }
        s.commit();
        for i in 0u64..19_990 {
            let k = if reverse { 19_999 - i } else { i };
            assert!(delete(&mut s, &mut root, &k.to_be_bytes()).unwrap());
        }
        let [leaves, branches, _] = check_store(&s, &root);
        eprintln!("shrunk in order (reverse={reverse}): {leaves} leaves, {branches} branches");
        assert!(
            leaves + branches <= 3,
            "{leaves} leaves, {branches} branches"
        );
    }
}

#[test]
fn big_keys_and_limits() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    let max = max_key_len(PS);
    assert!(max >= 1024);
    let mut model = Model::new();
    for i in 0u32..600 {
        let mut k = vec![b'x'; 1024];
        k[1000..1004].copy_from_slice(&i.wrapping_mul(2654435761).to_be_bytes());
        let v = value_of((i as usize * 37) % 3000, i as u64);
        insert(&mut s, &mut root, &k, &v).unwrap();
        model.insert(k, v);
    }
    let k = vec![b'y'; max];
    insert(&mut s, &mut root, &k, b"max").unwrap();
    model.insert(k, b"max".to_vec());
    check_model(&s, &root, &model);
    check_store(&s, &root);
    let err = insert(&mut s, &mut root, &vec![0u8; max + 1], b"").unwrap_err();
    assert!(matches!(err, Error::KeyTooLarge { .. }), "{err}");
    // Empty key and empty value.
    insert(&mut s, &mut root, b"", b"").unwrap();
    assert_eq!(get(&s, &root, b"").unwrap().unwrap().as_slice(), b"");
    assert_eq!(first(&s, &root).unwrap().unwrap().0.as_slice(), b"");
    insert(&mut s, &mut root, b"", b"v").unwrap();
    assert_eq!(get(&s, &root, b"").unwrap().unwrap().as_slice(), b"v");
    assert_eq!(
        remove(&mut s, &mut root, b"").unwrap().unwrap().as_slice(),
        b"v"
    );
    assert!(get(&s, &root, b"").unwrap().is_none());
    for k in model.keys() {
        assert!(delete(&mut s, &mut root, k).unwrap());
    }
    assert!(s.live().is_empty());
}

#[test]
fn large_value_round_trips() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    let v = value_of(20 << 20, 11);
    insert(&mut s, &mut root, b"big", &v).unwrap();
    insert(&mut s, &mut root, b"small", b"s").unwrap();
    s.commit();
    assert!(get(&s, &root, b"big").unwrap().unwrap().as_slice() == v.as_slice());
    check_store(&s, &root);
    // Replacing frees the run; removing frees the new one.
    let old = insert(&mut s, &mut root, b"big", &v[..5000])
        .unwrap()
        .unwrap();
    assert!(old.as_slice() == v.as_slice());
    check_store(&s, &root);
    assert_eq!(
        remove(&mut s, &mut root, b"big")
            .unwrap()
            .unwrap()
            .as_slice(),
        &v[..5000]
    );
    check_store(&s, &root);
}

#[test]
#[ignore = "allocates ~1 GiB; run with --ignored in release"]
fn value_of_256_mib() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    let v = value_of(256 << 20, 1);
    insert(&mut s, &mut root, b"huge", &v).unwrap();
    assert!(get(&s, &root, b"huge").unwrap().unwrap().as_slice() == v.as_slice());
    check_store(&s, &root);
    assert!(max_value_len() >= 256 << 20);
}

#[test]
fn clear_frees_everything() {
    let mut rng = StdRng::seed_from_u64(8);
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    let mut other = TreeRoot::default();
    insert(&mut s, &mut other, b"o", b"other").unwrap();
    for _ in 0..3000 {
        let (k, v) = (gen_key(&mut rng), gen_value(&mut rng));
        insert(&mut s, &mut root, &k, &v).unwrap();
    }
    s.commit();
    let before = s.frees;
    let (_, runs, _) = walk_all(&s, &root);
    clear(&mut s, &mut root).unwrap();
    assert_eq!(s.frees - before, runs.len() as u64);
    assert_eq!(root, TreeRoot::default());
    check_store(&s, &other);
}

#[test]
fn empty_and_inverted_ranges() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    for i in 0u8..100 {
        insert(&mut s, &mut root, &[i], &[i]).unwrap();
    }
    type Bounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);
    let cases: [Bounds; 3] = [
        (Bound::Included(&[50]), Bound::Included(&[10])),
        (Bound::Excluded(&[50]), Bound::Excluded(&[50])),
        (Bound::Included(&[50]), Bound::Excluded(&[50])),
    ];
    for (lo, hi) in cases {
        let mut c = Cursor::new(&root, lo, hi);
        assert!(c.next(&s).unwrap().is_none());
        let mut c = Cursor::new(&root, lo, hi);
        assert!(c.next_back(&s).unwrap().is_none());
    }
    let mut c = Cursor::new(&root, Bound::Included(&[50]), Bound::Included(&[50]));
    assert_eq!(c.next_back(&s).unwrap().unwrap().0.as_slice(), &[50]);
    assert!(c.next(&s).unwrap().is_none());
}

/// Flips bytes of a valid tree's pages; reads must give Ok or Err.
#[test]
fn corruption_never_panics() {
    let mut rng = StdRng::seed_from_u64(77);
    let mut base = MemStore::new(PS);
    let mut root = TreeRoot::default();
    let mut keys = Vec::new();
    for i in 0..1500u32 {
        let k = if i % 3 == 0 {
            gen_key(&mut rng)
        } else {
            (i * 7919).to_be_bytes().to_vec()
        };
        let v = gen_value(&mut rng);
        insert(&mut base, &mut root, &k, &v).unwrap();
        keys.push(k);
    }
    base.commit();
    let runs: Vec<(PageId, u32)> = base.live().iter().map(|(a, b)| (*a, *b)).collect();
    let mut errors = 0;
    for seed in 0..400 {
        let mut s = base.clone();
        let flips = rng.gen_range(1..6);
        for _ in 0..flips {
            let (id, npages) = runs[rng.gen_range(0..runs.len())];
            let len = npages as usize * PS;
            let off = if rng.gen_bool(0.6) {
                rng.gen_range(0..len.min(160))
            } else {
                rng.gen_range(0..len)
            };
            let byte = if rng.gen_bool(0.5) {
                rng.gen()
            } else {
                s.read_run(id, npages).unwrap().bytes()[off] ^ (1 << rng.gen_range(0..8))
            };
            s.corrupt(id, off, byte);
        }
        let mut failed = walk(&s, &root, &mut |_, _, _| {}).is_err();
        for k in keys.iter().step_by(37) {
            failed |= get(&s, &root, k).is_err();
        }
        for (lo, hi) in [(0u8, 255u8), (3, 200)] {
            let (lo, hi) = ([lo], [hi]);
            let mut c = Cursor::new(&root, Bound::Included(&lo[..]), Bound::Excluded(&hi[..]));
            let mut n = 0;
            loop {
                let r = if (n + seed) % 3 == 0 {
                    c.next_back(&s)
                } else {
                    c.next(&s)
                };
                match r {
                    Ok(Some(_)) => n += 1,
                    Ok(None) => break,
                    Err(e) => {
                        assert!(e.is_corrupted(), "{e}");
                        failed = true;
                        break;
                    }
                }
                assert!(n <= 100_000, "seed {seed}: cursor does not terminate");
            }
        }
        errors += failed as usize;
    }
    eprintln!("corruption: {errors} of 400 detected");
    assert!(errors > 100, "only {errors} corruptions detected");
}

/// Mutating a corrupted tree must give Ok or Err, never a panic (the
/// store is told to tolerate the bad frees corruption leads to).
#[test]
fn corrupted_tree_mutations_never_panic() {
    let mut rng = StdRng::seed_from_u64(78);
    let mut base = MemStore::new(PS);
    let mut root = TreeRoot::default();
    for _ in 0..1200 {
        let (k, v) = (gen_key(&mut rng), gen_value(&mut rng));
        insert(&mut base, &mut root, &k, &v).unwrap();
    }
    base.commit();
    base.lenient = true;
    let runs: Vec<(PageId, u32)> = base.live().iter().map(|(a, b)| (*a, *b)).collect();
    let (mut errors, mut bad_frees) = (0, 0);
    for _ in 0..300 {
        let mut s = base.clone();
        let mut root = root;
        for _ in 0..rng.gen_range(2..10) {
            let (id, npages) = runs[rng.gen_range(0..runs.len())];
            let off = rng.gen_range(0..(npages as usize * PS).min(400));
            s.corrupt(id, off, rng.gen());
        }
        for _ in 0..200 {
            let k = gen_key(&mut rng);
            let r = match rng.gen_range(0..7) {
                0 | 1 => insert(&mut s, &mut root, &k, &gen_value(&mut rng)).map(drop),
                2 | 3 => remove(&mut s, &mut root, &k).map(drop),
                4 => pop_first(&mut s, &mut root).map(drop),
                5 => pop_last(&mut s, &mut root).map(drop),
                _ => {
                    let batch = gen_batch(&mut rng, &Model::new(), 40);
                    apply_sorted(&mut s, &mut root, &batch.writes)
                }
            };
            if let Err(e) = r {
                assert!(e.is_corrupted(), "{e}");
                errors += 1;
                break;
            }
        }
        let _ = walk(&s, &root, &mut |_, _, _| {});
        let _ = clear(&mut s, &mut root);
        bad_frees += s.bad_frees;
    }
    eprintln!("corrupted mutations: {errors} errors, {bad_frees} bad frees");
    assert!(errors > 30, "only {errors} errors");
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(Vec<u8>, usize),
        Remove(Vec<u8>),
        PopFirst,
        PopLast,
        Commit,
    }

    fn op() -> impl Strategy<Value = Op> {
        let key = proptest::collection::vec(0u8..4, 0..6);
        prop_oneof![
            4 => (key.clone(), prop_oneof![0usize..20, 1000usize..3000]).prop_map(|(k, n)| Op::Insert(k, n)),
            2 => key.prop_map(Op::Remove),
            1 => Just(Op::PopFirst),
            1 => Just(Op::PopLast),
            1 => Just(Op::Commit),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn ops_match_model(ops in proptest::collection::vec(op(), 1..300)) {
            let mut s = MemStore::new(PS);
            let mut root = TreeRoot::default();
            let mut model = Model::new();
            for op in ops {
                match op {
                    Op::Insert(k, n) => {
                        let v = value_of(n, k.len() as u64);
                        let old = insert(&mut s, &mut root, &k, &v).unwrap().map(|b| b.to_vec());
                        prop_assert_eq!(old, model.insert(k, v));
                    }
                    Op::Remove(k) => {
                        let old = remove(&mut s, &mut root, &k).unwrap().map(|b| b.to_vec());
                        prop_assert_eq!(old, model.remove(&k));
                    }
                    Op::PopFirst => {
                        let got = pop_first(&mut s, &mut root).unwrap();
                        prop_assert_eq!(got.map(|(k, v)| (k.to_vec(), v.to_vec())), model.pop_first());
                    }
                    Op::PopLast => {
                        let got = pop_last(&mut s, &mut root).unwrap();
                        prop_assert_eq!(got.map(|(k, v)| (k.to_vec(), v.to_vec())), model.pop_last());
                    }
                    Op::Commit => s.commit(),
                }
                check_model(&s, &root, &model);
            }
            check_store(&s, &root);
        }
    }
}

#[test]
fn walk_detects_bad_count_and_shared_pages() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    for i in 0u32..2000 {
        insert(&mut s, &mut root, &i.to_be_bytes(), &[0u8; 30]).unwrap();
    }
    s.commit();
    let bad = TreeRoot {
        root: root.root,
        len: root.len + 1,
    };
    assert!(walk(&s, &bad, &mut |_, _, _| {})
        .unwrap_err()
        .is_corrupted());
    // Point the root's second child at its first: a shared page.
    let rid = root.root.unwrap();
    let page = s.read_page(rid).unwrap();
    let node = node::NodeRef::parse(&page, rid, PS).unwrap();
    let first_child = node.child(0).unwrap();
    let off = node.cell_bytes(1).unwrap().as_ptr() as usize - page.bytes().as_ptr() as usize;
    drop(page);
    for (i, b) in first_child.0.to_le_bytes().iter().enumerate() {
        s.corrupt(rid, off + i, *b);
    }
    assert!(walk(&s, &root, &mut |_, _, _| {})
        .unwrap_err()
        .is_corrupted());
}

/// Rough throughput numbers: `cargo test --release -- --ignored bench_rough --nocapture`.
#[test]
#[ignore = "timing, not a test"]
fn bench_rough() {
    use std::time::Instant;
    const N: u64 = 1_000_000;
    let mut s = MemStore::new(PS);
    s.keep_freed = false;
    let mut root = TreeRoot::default();
    let mut rng = StdRng::seed_from_u64(1);
    let keys: Vec<u64> = (0..N).map(|_| rng.gen()).collect();
    let t = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        put(&mut s, &mut root, &k.to_be_bytes(), &[1u8; 16]).unwrap();
        if i % 1000 == 999 {
            s.commit();
        }
    }
    eprintln!("random put: {:?}/op", t.elapsed() / N as u32);
    s.commit();
    let t = Instant::now();
    for k in &keys {
        assert!(get(&s, &root, &k.to_be_bytes()).unwrap().is_some());
    }
    eprintln!("random get: {:?}/op", t.elapsed() / N as u32);
    let t = Instant::now();
    let mut c = Cursor::all(&root);
    while c.next(&s).unwrap().is_some() {}
    eprintln!("scan: {:?}/entry", t.elapsed() / N as u32);
    let t = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        assert!(delete(&mut s, &mut root, &k.to_be_bytes()).unwrap());
        if i % 1000 == 999 {
            s.commit();
        }
    }
    eprintln!("random delete: {:?}/op", t.elapsed() / N as u32);
    assert!(s.live().is_empty());
}

/// A sorted batch of random writes over `model`'s keys and new ones, and
/// the model after it.
struct Batch {
    writes: Vec<BatchWrite>,
    after: Model,
}

fn gen_batch(rng: &mut StdRng, model: &Model, n: usize) -> Batch {
    let mut writes: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    for _ in 0..n {
        let k = if rng.gen_bool(0.4) {
            pick_key(rng, model)
        } else {
            gen_key(rng)
        };
        let v = rng.gen_bool(0.7).then(|| gen_value(rng));
        writes.insert(k, v);
    }
    let mut after = model.clone();
    for (k, v) in &writes {
        match v {
            Some(v) => after.insert(k.clone(), v.clone()),
            None => after.remove(k),
        };
    }
    let writes = writes
        .into_iter()
        .map(|(k, v)| (Arc::from(k), v.map(Arc::from)))
        .collect();
    Batch { writes, after }
}

/// Random sorted batches (puts and removals, long keys, overflow values,
/// sizes from one write to thousands), with commits between them, against
/// a model: contents, counts, and no page leaked or shared.
#[test]
fn batches_match_a_model() {
    for seed in 0..6 {
        let mut rng = StdRng::seed_from_u64(1000 + seed);
        LONG_KEYS.with(|l| l.set(if seed % 3 == 2 { 30 } else { 0 }));
        let mut s = MemStore::new(if seed % 2 == 0 { PS } else { 8192 });
        let mut root = TreeRoot::default();
        let mut model = Model::new();
        let mut max_depth = 0;
        for round in 0..60 {
            let n = match rng.gen_range(0..4) {
                0 => rng.gen_range(1..4),
                1 => rng.gen_range(4..100),
                _ => rng.gen_range(100..3000),
            };
            // Shrink phases: mostly removals of present keys.
            let batch = if round % 10 >= 7 {
                let mut writes: Vec<BatchWrite> = Vec::new();
                for k in model.keys() {
                    if rng.gen_bool(0.6) {
                        writes.push((Arc::from(k.as_slice()), None));
                    }
                }
                let mut after = model.clone();
                for (k, _) in &writes {
                    after.remove(&k[..]);
                }
                Batch { writes, after }
            } else {
                gen_batch(&mut rng, &model, n)
            };
            apply_sorted(&mut s, &mut root, &batch.writes).unwrap();
            model = batch.after;
            check_model(&s, &root, &model);
            check_store(&s, &root);
            max_depth = max_depth.max(depth(&s, &root));
            if rng.gen_bool(0.5) {
                s.commit();
            }
        }
        eprintln!(
            "batch seed {seed}: {} entries, depth {max_depth}",
            model.len()
        );
        assert!(max_depth >= 3, "seed {seed} never built a tree of depth 3");
        let all: Vec<BatchWrite> = model
            .keys()
            .map(|k| (Arc::from(k.as_slice()), None))
            .collect();
        apply_sorted(&mut s, &mut root, &all).unwrap();
        assert_eq!(
            root,
            TreeRoot::default(),
            "seed {seed}: tree left after removing all"
        );
        assert!(
            s.live().is_empty(),
            "seed {seed}: pages left: {:?}",
            s.live()
        );
    }
    LONG_KEYS.with(|l| l.set(0));
}

/// A batch is the same as its writes applied one by one.
#[test]
fn a_batch_equals_single_writes() {
    let mut rng = StdRng::seed_from_u64(77);
    let (mut a, mut b) = (MemStore::new(PS), MemStore::new(PS));
    let (mut ra, mut rb) = (TreeRoot::default(), TreeRoot::default());
    let mut model = Model::new();
    for _ in 0..30 {
        let n = rng.gen_range(1..2000);
        let batch = gen_batch(&mut rng, &model, n);
        apply_sorted(&mut a, &mut ra, &batch.writes).unwrap();
        for (k, v) in &batch.writes {
            match v {
                Some(v) => drop(insert(&mut b, &mut rb, k, v).unwrap()),
                None => drop(remove(&mut b, &mut rb, k).unwrap()),
            }
        }
        model = batch.after;
        assert_eq!(collect_all(&a, &ra), collect_all(&b, &rb));
        assert_eq!(ra.len, rb.len);
        a.commit();
        b.commit();
    }
}

/// Loading random keys into an empty tree in one batch fills every leaf
/// but the last; appending batches past the last key keeps them full.
#[test]
fn a_batch_into_an_empty_tree_packs_its_pages() {
    const N: usize = 50_000;
    let mut rng = StdRng::seed_from_u64(5);
    let mut keys: Vec<u64> = (0..N).map(|_| rng.gen()).collect();
    keys.sort_unstable();
    keys.dedup();
    let writes: Vec<BatchWrite> = keys.iter().map(|&k| put_u64(k, 8)).collect();
    let ideal = leaf_ideal(PS, writes.len(), 7 + 8 + 8);
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    apply_sorted(&mut s, &mut root, &writes).unwrap();
    let [leaves, branches, _] = check_store(&s, &root);
    eprintln!("one batch: {leaves} leaves, {branches} branches, ideal {ideal}");
    assert!(leaves <= ideal + 1, "{leaves} leaves, ideal {ideal}");
    // Appends in batches of 1,000 past the last key, committed between.
    let (mut s, mut root) = (MemStore::new(PS), TreeRoot::default());
    for chunk in writes.chunks(1000) {
        apply_sorted(&mut s, &mut root, chunk).unwrap();
        s.commit();
    }
    let [leaves, _, _] = check_store(&s, &root);
    eprintln!("appended batches: {leaves} leaves, ideal {ideal}");
    assert!(
        (leaves as f64) < 1.05 * ideal as f64,
        "{leaves} leaves, ideal {ideal}"
    );
    // Random batches into a large tree stay reasonably full.
    let (mut s, mut root) = (MemStore::new(PS), TreeRoot::default());
    let mut shuffled = writes.clone();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, rng.gen_range(0..=i));
    }
    for chunk in shuffled.chunks(5000) {
        let mut chunk = chunk.to_vec();
        chunk.sort_by(|a, b| a.0.cmp(&b.0));
        apply_sorted(&mut s, &mut root, &chunk).unwrap();
        s.commit();
    }
    let [leaves, _, _] = check_store(&s, &root);
    eprintln!("random batches: {leaves} leaves, ideal {ideal}");
    assert!(leaves < 2 * ideal, "{leaves} leaves, ideal {ideal}");
}

/// A put of the big-endian `k` with a value of `value_len` bytes.
fn put_u64(k: u64, value_len: usize) -> BatchWrite {
    (
        Arc::from(&k.to_be_bytes()[..]),
        Some(Arc::from(vec![1u8; value_len])),
    )
}

/// A removal of the big-endian `k`.
fn remove_u64(k: u64) -> BatchWrite {
    (Arc::from(&k.to_be_bytes()[..]), None)
}

fn put_batch(keys: &[Vec<u8>]) -> Vec<BatchWrite> {
    keys.iter()
        .map(|k| (Arc::from(&k[..]), Some(Arc::from(&b"v"[..]))))
        .collect()
}

/// Entry counts come from the file: an empty tree that counts entries,
/// and a count a batch would carry past `u64::MAX` (or past `i64::MAX`
/// on the way), are `Corrupted`, never an assertion, an overflow or a
/// count that wraps.
#[test]
fn entry_counts_the_file_makes_impossible_are_corrupt() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot { root: None, len: 5 };
    let r = apply_sorted(&mut s, &mut root, &put_batch(&[b"a".to_vec()]));
    assert!(r.unwrap_err().is_corrupted());

    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    insert(&mut s, &mut root, b"a", b"v").unwrap();
    s.commit();
    let keys = [b"b".to_vec(), b"c".to_vec()];
    // Past i64::MAX: still a count a u64 holds.
    let mut big = TreeRoot {
        len: i64::MAX as u64,
        ..root
    };
    apply_sorted(&mut s.clone(), &mut big, &put_batch(&keys)).unwrap();
    assert_eq!(big.len, i64::MAX as u64 + 2);
    // Past u64::MAX: corrupt (it used to wrap to a small count).
    let mut full = TreeRoot {
        len: u64::MAX,
        ..root
    };
    let r = apply_sorted(&mut s, &mut full, &put_batch(&keys));
    assert!(r.unwrap_err().is_corrupted());
}

/// A branch without separators whose only child pointer names itself,
/// reached when a removal leaves the root with one child: `Corrupted`
/// (the root collapse followed the pointer forever, freeing the page each
/// time).
#[test]
fn a_root_collapse_onto_a_self_pointing_branch_is_corrupt() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    let mut i = 0u32;
    let (left, right) = loop {
        insert(&mut s, &mut root, &i.to_be_bytes(), &[1u8; 100]).unwrap();
        i += 1;
        let rid = root.root.unwrap();
        let page = s.read_page(rid).unwrap();
        let n = node::NodeRef::parse(&page, rid, PS).unwrap();
        if !n.is_leaf() {
            assert_eq!(n.count(), 1, "the root has two leaves");
            break (n.child(0).unwrap(), n.child(1).unwrap());
        }
    };
    s.commit();
    let left_keys: Vec<Vec<u8>> = {
        let page = s.read_page(left).unwrap();
        let n = node::NodeRef::parse(&page, left, PS).unwrap();
        (0..n.count())
            .map(|c| n.leaf_key(c).unwrap().to_vec())
            .collect()
    };
    // The right leaf becomes a branch at the root's own level, with no
    // separator, whose only child is itself.
    let mut b = node::NodeBuilder::new(PS, right, s.cf(), 1);
    b.set_rightmost(right);
    let fake = b.finish();
    for (off, byte) in fake.bytes().iter().enumerate() {
        s.corrupt(right, off, *byte);
    }
    let removals: Vec<BatchWrite> = left_keys
        .iter()
        .map(|k| (Arc::from(&k[..]), None))
        .collect();
    let r = apply_sorted(&mut s, &mut root, &removals);
    assert!(r.unwrap_err().is_corrupted());
}

/// A root leaf whose header claims its cell area is full while it has no
/// cell: an insert that must split it finds nothing to split and says
/// `Corrupted` (it failed a debug assertion before).
#[test]
fn a_leaf_too_full_for_its_first_cell_is_corrupt() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    insert(&mut s, &mut root, b"a", b"v").unwrap();
    s.commit();
    let id = root.root.unwrap();
    // Count 0, content start right after the (empty) slot array.
    for (off, byte) in [(6, 0), (7, 0), (32, 48), (33, 0), (34, 0), (35, 0)] {
        s.corrupt(id, off, byte);
    }
    root.len = 0;
    let r = insert(&mut s, &mut root, b"b", &[2u8; 100]);
    assert!(r.unwrap_err().is_corrupted());
}

/// An overflow pointer whose run passes the last page id: clearing the
/// tree (a dropped table) marks the run's pages without reading it, and
/// says `Corrupted` (the page arithmetic overflowed before).
#[test]
fn clearing_a_run_past_the_last_page_id_is_corrupt() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    insert(&mut s, &mut root, b"big", &[7u8; 6000]).unwrap();
    s.commit();
    let id = root.root.unwrap();
    let at = {
        let page = s.read_page(id).unwrap();
        let n = node::NodeRef::parse(&page, id, PS).unwrap();
        let cell = n.leaf_cell(0).unwrap();
        assert!(matches!(cell.value, node::ValueLoc::Overflow { .. }));
        cell.key_off + cell.key.len()
    };
    for (i, b) in u64::MAX.to_le_bytes().iter().enumerate() {
        s.corrupt(id, at + i, *b);
    }
    s.lenient = true;
    assert!(clear(&mut s, &mut root).unwrap_err().is_corrupted());
}

/// Batches of random inserts into a packed tree (a bulk load, then folds
/// of a write buffer) rewrite each run of touched leaves packed: the bytes
/// a leaf gains flow into the next leaf of the run instead of splitting
/// every full leaf in two. Removing half the keys the same way packs the
/// survivors.
#[test]
fn dense_batches_into_a_packed_tree_keep_it_packed() {
    const N: usize = 40_000;
    let mut rng = StdRng::seed_from_u64(9);
    let mut keys: Vec<u64> = (0..N + N / 5).map(|_| rng.gen()).collect();
    keys.sort_unstable();
    keys.dedup();
    // Puts of `keys` with 150-byte values, as one batch, committed.
    let put_all = |s: &mut MemStore, root: &mut TreeRoot, keys: &[u64]| {
        let batch: Vec<BatchWrite> = keys.iter().map(|&k| put_u64(k, 150)).collect();
        apply_sorted(s, root, &batch).unwrap();
        s.commit();
    };
    let (base, extra): (Vec<u64>, Vec<u64>) = keys.iter().partition(|_| rng.gen_bool(5.0 / 6.0));
    let (mut s, mut root) = (MemStore::new(PS), TreeRoot::default());
    put_all(&mut s, &mut root, &base);
    // The extra keys in rounds of 512 consecutive keys, as a fold does.
    for chunk in extra.chunks(512) {
        put_all(&mut s, &mut root, chunk);
    }
    let [leaves, _, _] = check_store(&s, &root);
    let ideal = leaf_ideal(PS, keys.len(), 7 + 8 + 150);
    eprintln!("dense inserts: {leaves} leaves, ideal {ideal}");
    assert!(
        (leaves as f64) < 1.25 * ideal as f64,
        "{leaves} leaves, ideal {ideal}"
    );
    // A sparse batch next (about one key per eight leaves): the tenth the
    // runs left free takes each key without a split (packed full, every
    // touched leaf would split in two).
    let mut sparse: Vec<u64> = (0..leaves / 8).map(|_| rng.gen()).collect();
    sparse.sort_unstable();
    sparse.dedup();
    sparse.retain(|k| keys.binary_search(k).is_err());
    put_all(&mut s, &mut root, &sparse);
    let [after, _, _] = check_store(&s, &root);
    eprintln!("sparse inserts: {after} leaves, {leaves} before");
    assert!(
        after <= leaves + leaves / 50,
        "{} sparse inserts split {} leaves",
        sparse.len(),
        after - leaves
    );
    let removes: Vec<BatchWrite> = keys.iter().step_by(2).map(|&k| remove_u64(k)).collect();
    for chunk in removes.chunks(512) {
        apply_sorted(&mut s, &mut root, chunk).unwrap();
        s.commit();
    }
    let [leaves, _, _] = check_store(&s, &root);
    let ideal = leaf_ideal(PS, root.len as usize, 7 + 8 + 150);
    eprintln!("dense removals: {leaves} leaves, ideal {ideal}");
    assert!(
        (leaves as f64) < 1.25 * ideal as f64,
        "{leaves} leaves, ideal {ideal}"
    );
}

/// Key `i` of the run tests, ordered by `i`: for `long` percent of the
/// buckets of 64 keys a long filler after the bucket number, so keys (and
/// the separators between them) are long: deep trees from few entries.
fn run_key(i: u32, long: u32) -> Vec<u8> {
    let b = i / 64;
    let mut k = b.to_be_bytes().to_vec();
    let h = b.wrapping_mul(2_654_435_761) >> 7;
    if h % 100 < long {
        // Up to the longest key a 4 KiB page takes.
        let n = ((h % 1400) as usize).min(max_key_len(PS) - 8);
        k.extend(std::iter::repeat_n(b'L', n));
    }
    k.extend_from_slice(&i.to_be_bytes());
    k
}

fn run_value(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.gen_range(0..40) {
        0 => 0,
        1..=30 => rng.gen_range(1..120),
        31..=36 => rng.gen_range(120..1500),
        37 => rng.gen_range(1500..3000),
        _ => rng.gen_range(3000..9000),
    };
    value_of(len, rng.gen())
}

/// A batch over keys `lo..hi` of the key space: each key taken with
/// probability `density`, then put (new or replacing) or removed.
fn window_batch(
    rng: &mut StdRng,
    model: &Model,
    (lo, hi): (u32, u32),
    density: f64,
    put_share: f64,
    long: u32,
) -> Batch {
    let mut writes = Vec::new();
    let mut after = model.clone();
    for i in lo..hi {
        if !rng.gen_bool(density) {
            continue;
        }
        let k = run_key(i, long);
        if rng.gen_bool(put_share) {
            let v = run_value(rng);
            after.insert(k.clone(), v.clone());
            writes.push((Arc::from(k), Some(Arc::from(v))));
        } else {
            after.remove(&k);
            writes.push((Arc::from(k), None));
        }
    }
    Batch { writes, after }
}

/// Batches of every density (one key in a thousand to every key of a
/// window) and mixes (mostly puts, mostly removals, all removals of a
/// window), over trees with long keys and overflow values, with commits
/// after some batches only and single writes between them: after each
/// batch the contents, the count and the pages (none leaked, none
/// dangling) match, and an older committed snapshot still reads as it was.
#[test]
fn batches_of_every_density_match_a_model() {
    const SPACE: u32 = 6000;
    let seeds: u64 = std::env::var("RUN_SEEDS").map_or(12, |v| v.parse().unwrap());
    let one_seed = |seed: u64| {
        let mut rng = StdRng::seed_from_u64(5000 + seed);
        let long = [0, 10, 40, 90, 100][seed as usize % 5];
        let ps = if seed % 6 == 5 { 8192 } else { PS };
        let mut s = MemStore::new(ps);
        let mut root = TreeRoot::default();
        let mut model = Model::new();
        // A committed root and what it held.
        let mut snap: Option<(TreeRoot, Model)> = None;
        let mut max_depth = 0;
        for round in 0..70 {
            let width = match rng.gen_range(0..4) {
                0 => rng.gen_range(1..50),
                1 => rng.gen_range(50..600),
                _ => SPACE,
            };
            let lo = rng.gen_range(0..SPACE - width.min(SPACE - 1));
            let hi = (lo + width).min(SPACE);
            let density = [0.001, 0.01, 0.05, 0.2, 0.5, 0.9, 1.0][rng.gen_range(0..7)];
            let put_share = match round % 10 {
                0..=5 => [1.0, 0.9, 0.6][rng.gen_range(0..3)],
                6 | 7 => [0.3, 0.1][rng.gen_range(0..2)],
                _ => 0.0,
            };
            let batch = window_batch(&mut rng, &model, (lo, hi), density, put_share, long);
            let ctx = format!(
                "seed {seed} round {round}: {} writes in {lo}..{hi}, density {density}, puts {put_share}",
                batch.writes.len()
            );
            apply_sorted(&mut s, &mut root, &batch.writes).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            model = batch.after;
            assert_eq!(root.len, model.len() as u64, "{ctx}");
            let got = collect_all(&s, &root);
            let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            assert!(got == want, "{ctx}: contents differ from the model");
            check_store(&s, &root);
            max_depth = max_depth.max(depth(&s, &root));
            if let Some((r, want)) = &snap {
                let got: Model = collect_all(&s, r).into_iter().collect();
                assert!(got == *want, "{ctx}: a snapshot changed");
            }
            // Some single writes between batches.
            for _ in 0..rng.gen_range(0..20) {
                let k = run_key(rng.gen_range(0..SPACE), long);
                if rng.gen_bool(0.6) {
                    let v = run_value(&mut rng);
                    insert(&mut s, &mut root, &k, &v).unwrap();
                    model.insert(k, v);
                } else {
                    remove(&mut s, &mut root, &k).unwrap();
                    model.remove(&k);
                }
            }
            check_store(&s, &root);
            if rng.gen_bool(0.5) {
                s.commit();
                if rng.gen_bool(0.3) {
                    snap = Some((root, model.clone()));
                }
            }
        }
        eprintln!(
            "density seed {seed}: {} entries, max depth {max_depth}",
            model.len()
        );
        let all: Vec<BatchWrite> = model
            .keys()
            .map(|k| (Arc::from(k.as_slice()), None))
            .collect();
        apply_sorted(&mut s, &mut root, &all).unwrap();
        assert_eq!(root, TreeRoot::default(), "seed {seed}");
        assert!(s.live().is_empty(), "seed {seed}: pages left");
    };
    // Two threads, odd and even seeds: the seeds are independent, and run
    // one after another they were most of the unit tests' time in CI.
    std::thread::scope(|s| {
        for half in 0..2 {
            s.spawn(move || (half..seeds).step_by(2).for_each(one_seed));
        }
    });
}

/// Points child `k` of branch `pid` (a committed page) at `to`, bypassing
/// the store's checks (a damaged file).
fn damage_child(s: &mut MemStore, pid: PageId, k: usize, to: PageId) {
    let mut buf = crate::format::page::page_from_slice(s.read_page(pid).unwrap().bytes());
    node::set_child(&mut buf, k, to).unwrap();
    for (off, byte) in buf.bytes().iter().enumerate() {
        s.corrupt(pid, off, *byte);
    }
}

/// The branches at level 1 of a tree, with their children.
fn level1_branches(s: &MemStore, root: &TreeRoot) -> Vec<(PageId, Vec<PageId>)> {
    let mut out = Vec::new();
    let mut todo = vec![root.root.unwrap()];
    while let Some(id) = todo.pop() {
        let page = s.read_page(id).unwrap();
        let n = node::NodeRef::parse(&page, id, s.page_size()).unwrap();
        if n.is_leaf() {
            continue;
        }
        let kids: Vec<PageId> = (0..=n.count()).map(|c| n.child(c).unwrap()).collect();
        if n.level() == 1 {
            out.push((id, kids));
        } else {
            todo.extend(kids);
        }
    }
    out
}

/// A parent whose child pointer names a page it should not (a sibling
/// again, the parent, the root, a branch, an overflow run, a page that
/// does not exist) under dense batches that take runs through it: `Ok` or
/// `Corrupted`, never a panic (the store tolerates the bad frees that
/// follow, but not writes to committed pages).
#[test]
fn damaged_siblings_under_dense_batches_are_corrupt_not_a_panic() {
    // Long enough keys for a tree of depth 3.
    let dkey = |i: u32| -> Arc<[u8]> {
        let mut k = i.to_be_bytes().to_vec();
        k.extend_from_slice(&[b'd'; 200]);
        Arc::from(k)
    };
    let mut base = MemStore::new(PS);
    let mut root = TreeRoot::default();
    let mut rng = StdRng::seed_from_u64(61);
    let keys: Vec<u32> = (0..6000).map(|i| i * 4).collect();
    let writes: Vec<BatchWrite> = keys
        .iter()
        .map(|&i| {
            let v = if i % 97 == 0 { 5000 } else { 60 };
            (dkey(i), Some(Arc::from(value_of(v, i as u64))))
        })
        .collect();
    apply_sorted(&mut base, &mut root, &writes).unwrap();
    base.commit();
    base.lenient = true;
    assert!(depth(&base, &root) >= 3, "depth {}", depth(&base, &root));
    let parents = level1_branches(&base, &root);
    let live: Vec<(PageId, u32)> = base.live().iter().map(|(a, b)| (*a, *b)).collect();
    let (mut errors, mut oks) = (0, 0);
    for trial in 0..600u64 {
        let mut s = base.clone();
        let mut root = root;
        let (pid, kids) = &parents[rng.gen_range(0..parents.len())];
        let k = rng.gen_range(1..kids.len());
        let to = match rng.gen_range(0..7) {
            0 => kids[k - 1],
            1 => kids[rng.gen_range(0..kids.len())],
            2 => *pid,
            3 => root.root.unwrap(),
            4 => parents[rng.gen_range(0..parents.len())].0,
            5 => live[rng.gen_range(0..live.len())].0,
            _ => PageId(1 << 40),
        };
        damage_child(&mut s, *pid, k, to);
        if trial % 2 == 1 {
            // Private pages first: a sparse batch copies some paths.
            let few: Vec<BatchWrite> = (0..20)
                .map(|_| rng.gen_range(0..24_000u32) | 1)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .map(|i| (dkey(i), Some(Arc::from(&b"p"[..]))))
                .collect();
            if apply_sorted(&mut s, &mut root, &few).is_err() {
                errors += 1;
                continue;
            }
        }
        let density = [0.05, 0.3, 1.0][rng.gen_range(0..3)];
        let put_share = [0.0, 0.5, 1.0][rng.gen_range(0..3)];
        let mut batch: Vec<BatchWrite> = Vec::new();
        for i in 0..24_000u32 {
            if rng.gen_bool(density / 4.0) {
                let v = rng.gen_bool(put_share).then(|| Arc::from(&b"v"[..]));
                batch.push((dkey(i), v));
            }
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let r = apply_sorted(&mut s, &mut root, &batch);
            let _ = walk(&s, &root, &mut |_, _, _| {});
            r
        }));
        match r {
            Ok(Ok(())) => oks += 1,
            Ok(Err(e)) => {
                assert!(e.is_corrupted(), "trial {trial}: {e}");
                errors += 1;
            }
            Err(_) => panic!("trial {trial}: child {k} of {pid} -> {to}: panicked"),
        }
    }
    eprintln!("damaged siblings: {errors} errors, {oks} ok");
    assert!(errors > 200, "only {errors} errors");
}

/// The free space of a damaged file names a committed leaf that a batch's
/// run takes as a sibling: the allocator hands it out while the run is
/// rewritten (as the first leaf's new page, or as a page the merged cells
/// spill into), and the run then frees it as a replaced sibling. That
/// must be `Corrupted`, as copy-on-write refuses a page of its own path;
/// it used to free the page the tree had just written and went on naming
/// (an `Ok` batch over a tree that lost its keys).
#[test]
fn free_space_naming_a_run_sibling_is_corrupt() {
    for first_private in [false, true] {
        let mut s = MemStore::new(PS);
        let mut root = TreeRoot::default();
        let writes: Vec<BatchWrite> = (0..2000u32)
            .map(|i| {
                (
                    Arc::from(&(i * 2).to_be_bytes()[..]),
                    Some(Arc::from(&[3u8; 100][..])),
                )
            })
            .collect();
        apply_sorted(&mut s, &mut root, &writes).unwrap();
        s.commit();
        let rid = root.root.unwrap();
        let (a, b, n) = {
            let page = s.read_page(rid).unwrap();
            let node = node::NodeRef::parse(&page, rid, PS).unwrap();
            assert_eq!(node.level(), 1);
            (node.child(0).unwrap(), node.child(1).unwrap(), node.count())
        };
        let first_key = |s: &MemStore, id: PageId| {
            let page = s.read_page(id).unwrap();
            let node = node::NodeRef::parse(&page, id, PS).unwrap();
            node.leaf_key(0).unwrap().to_vec()
        };
        let (ka, kb) = (first_key(&s, a), first_key(&s, b));
        // The path private (a write in the last leaf), and the run's
        // first leaf too if asked.
        insert(&mut s, &mut root, &u32::MAX.to_be_bytes(), b"x").unwrap();
        let mut ka_new = ka.clone();
        ka_new.push(0);
        if first_private {
            insert(&mut s, &mut root, &ka_new, b"y").unwrap();
        }
        assert!(s.is_private(root.root.unwrap()));
        let a_now = {
            let rid = root.root.unwrap();
            let page = s.read_page(rid).unwrap();
            let node = node::NodeRef::parse(&page, rid, PS).unwrap();
            assert_eq!(node.count(), n, "no split yet");
            assert_eq!(node.child(1).unwrap(), b);
            node.child(0).unwrap()
        };
        assert_eq!(s.is_private(a_now), first_private);
        assert!(!s.is_private(b));
        s.hand_out.push(b);
        let batch: Vec<BatchWrite> = vec![
            (Arc::from(&ka[..]), Some(Arc::from(&[4u8; 100][..]))),
            (Arc::from(&kb[..]), Some(Arc::from(&[5u8; 100][..]))),
        ];
        let r = apply_sorted(&mut s, &mut root, &batch);
        assert!(
            s.hand_out.is_empty(),
            "first_private {first_private}: the batch never allocated"
        );
        match r {
            Err(e) => assert!(e.is_corrupted(), "first_private {first_private}: {e}"),
            Ok(()) => {
                let walked = walk(&s, &root, &mut |_, _, _| {});
                panic!(
                    "first_private {first_private}: the batch succeeded; walk: {walked:?}, \
                     {b} live: {}",
                    s.live().contains_key(&b)
                );
            }
        }
    }
}

/// A batch that removes nearly every key shrinks the runs' parents; each
/// parent left under a quarter full merges with a sibling, so the tree
/// does not keep a level of near-empty branches (13 leaves under 3
/// branches at depth 3 before).
#[test]
fn a_batch_removing_nearly_everything_leaves_a_shallow_tree() {
    let keys: Vec<u64> = (0..200_000u64).map(|i| i * 7919).collect();
    let puts: Vec<BatchWrite> = keys.iter().map(|&k| put_u64(k, 8)).collect();
    let (mut s, mut root) = (MemStore::new(PS), TreeRoot::default());
    apply_sorted(&mut s, &mut root, &puts).unwrap();
    s.commit();
    let removes: Vec<BatchWrite> = (keys.iter().enumerate())
        .filter(|(i, _)| i % 200 != 0)
        .map(|(_, &k)| remove_u64(k))
        .collect();
    apply_sorted(&mut s, &mut root, &removes).unwrap();
    s.commit();
    let [leaves, branches, _] = check_store(&s, &root);
    let d = depth(&s, &root);
    eprintln!(
        "{} entries: {leaves} leaves, {branches} branches, depth {d}",
        root.len
    );
    assert_eq!(root.len, 1000);
    assert!(
        d <= 2 && branches <= 1,
        "depth {d}, {branches} branches for {leaves} leaves"
    );
}

/// The file's free space names a committed one-page overflow run, and an
/// allocation of the batch step that replaces that value hands it out
/// (here: the leaf's copy). Freeing the old value's run would then free
/// the page the new leaf is in: `Corrupted` instead (the step checks that
/// runs named by a committed leaf are still committed before freeing).
#[test]
fn free_space_naming_a_replaced_overflow_run_is_corrupt() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    let big = vec![3u8; 2000];
    let writes: Vec<BatchWrite> = (0..50u32)
        .map(|i| {
            (
                Arc::from(&(i * 2).to_be_bytes()[..]),
                Some(Arc::from(&big[..])),
            )
        })
        .collect();
    apply_sorted(&mut s, &mut root, &writes).unwrap();
    s.commit();
    let rid = root.root.unwrap();
    let run = {
        let page = s.read_page(rid).unwrap();
        let node = node::NodeRef::parse(&page, rid, PS).unwrap();
        assert!(node.is_leaf(), "50 overflow values fit one leaf");
        super::mutate::overflow_run(PS, node.leaf_cell(0).unwrap().value)
    };
    let (id, npages) = run.expect("a 2,000-byte value overflows");
    assert_eq!(npages, 1, "a one-page run");
    s.hand_out.push(id);
    let batch: Vec<BatchWrite> = vec![(
        Arc::from(&0u32.to_be_bytes()[..]),
        Some(Arc::from(&b"small"[..])),
    )];
    let r = apply_sorted(&mut s, &mut root, &batch);
    assert!(s.hand_out.is_empty(), "the step allocated the named run");
    match r {
        Err(e) => assert!(e.is_corrupted(), "{e}"),
        Ok(()) => panic!("a batch freed the page its new leaf {:?} is in", root.root),
    }
}

/// A batch whose keys do not strictly increase (out of order, or a key
/// twice) is `Corrupted` and leaves the tree as it was: repacks and
/// backups build batches from another tree's pages, which a damaged file
/// can hand out in any order. Before, only a debug assertion looked.
#[test]
fn a_batch_out_of_order_is_corrupted_and_changes_nothing() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    let base: Vec<BatchWrite> = (0..500u64).map(|k| put_u64(k * 2, 100)).collect();
    apply_sorted(&mut s, &mut root, &base).unwrap();
    s.commit();
    let before = root;
    for bad in [
        vec![put_u64(7, 10), put_u64(5, 10), put_u64(9, 10)],
        vec![put_u64(3, 10), put_u64(3, 10)],
    ] {
        let r = apply_sorted(&mut s, &mut root, &bad);
        assert!(matches!(r, Err(Error::Corrupted { .. })), "{r:?}");
        assert_eq!(root, before, "a refused batch changed the tree");
    }
    assert!(check_store(&s, &root)[0] > 0);
    assert_eq!(get(&s, &root, &7u64.to_be_bytes()).unwrap(), None);
}

/// A store serving a [`MemStore`]'s committed runs the way the page cache
/// does: as slot guards, whose pages the tree may give a search index.
struct Cached {
    page_size: usize,
    cf: crate::types::CfId,
    slots: std::collections::HashMap<
        PageId,
        arc_swap::ArcSwapAny<Option<crate::format::page::PageThin>>,
    >,
}

impl Cached {
    fn over(s: &MemStore) -> Cached {
        let slots = (s.live().iter())
            .map(|(&id, &n)| {
                (
                    id,
                    arc_swap::ArcSwapAny::new(Some(s.read_run(id, n).unwrap())),
                )
            })
            .collect();
        Cached {
            page_size: s.page_size(),
            cf: s.cf(),
            slots,
        }
    }

    /// Leaves and branches that carry a search index.
    fn indexed(&self) -> (usize, usize) {
        let (mut leaves, mut branches) = (0, 0);
        for (&id, slot) in &self.slots {
            let page = slot.load_full().unwrap();
            let Ok(node) = NodeRef::parse(&page, id, self.page_size) else {
                continue; // an overflow run
            };
            if page.index_or(|_| None).is_some() {
                *(if node.is_leaf() {
                    &mut leaves
                } else {
                    &mut branches
                }) += 1;
            }
        }
        (leaves, branches)
    }
}

impl store::PageRead for Cached {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn cf(&self) -> crate::types::CfId {
        self.cf
    }

    fn read_run(&self, id: PageId, _npages: u32) -> Result<crate::format::page::PageRef> {
        (self.slots.get(&id).and_then(|s| s.load_full()))
            .ok_or_else(|| Error::corrupted_page(id, "no such page"))
    }

    fn read_handle(&self, id: PageId, _npages: u32) -> Result<crate::format::page::PageHandle> {
        (self.slots.get(&id))
            .and_then(|s| crate::format::page::PageHandle::guarded(s.load()))
            .ok_or_else(|| Error::corrupted_page(id, "no such page"))
    }
}

/// Walking leaves from one end (range steps, repacks, backups, integrity
/// walks, stats) builds no leaf index, however often; searching a leaf a
/// second time does, and every answer stays the same.
#[test]
fn scans_build_no_leaf_index_and_searches_do() {
    let (_, s, root, model) = committed_tree(11, 2000);
    let cached = Cached::over(&s);
    for _ in 0..3 {
        let mut front = Cursor::all(&root);
        let mut n = 0;
        while front.next(&cached).unwrap().is_some() {
            n += 1;
        }
        let mut back = Cursor::all(&root);
        while back.next_back(&cached).unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 2 * model.len());
        assert_eq!(walk(&cached, &root, &mut |_, _, _| ()).unwrap(), root.len);
        tree_stats(&cached, &root).unwrap();
    }
    assert_eq!(cached.indexed().0, 0, "a scan built a leaf's index");
    let (k, v) = model.iter().nth(700).unwrap();
    for _ in 0..2 {
        assert_eq!(
            get(&cached, &root, k).unwrap().unwrap().as_slice(),
            v.as_slice()
        );
    }
    let (leaves, branches) = cached.indexed();
    assert_eq!(leaves, 1, "the leaf searched twice has no index");
    assert!(branches > 0, "a descent indexed no branch");
    for (k, v) in &model {
        assert_eq!(
            get(&cached, &root, k).unwrap().unwrap().as_slice(),
            v.as_slice()
        );
    }
}

/// A store's `Debug` names its runs, not their bytes (printing every
/// byte made 786,537 characters for a 256 KiB run).
#[test]
fn store_debug_output_stays_small() {
    let (_, s, _, _) = committed_tree(5, 2000);
    let pages = s.live().len();
    assert!(pages > 20, "{pages} pages");
    let text = format!("{s:?}");
    assert!(
        text.len() < 64 * pages + 200,
        "{} characters of Debug for {pages} runs",
        text.len()
    );
}

/// The leaves of a tree in key order (the walk visits children in order).
fn leaves_in_order(s: &MemStore, root: &TreeRoot) -> Vec<PageId> {
    let mut leaves = Vec::new();
    walk(s, root, &mut |id, _, ty| {
        if ty == PageType::Leaf {
            leaves.push(id);
        }
    })
    .unwrap();
    leaves
}

/// A repack copies every entry (inline and overflow values) into new
/// leaves filled until the next entry would not fit, frees exactly the
/// old tree's runs, and keeps the count; trees of 0, 1 and a few entries
/// too.
#[test]
fn repack_copies_every_entry_into_full_new_pages() {
    for (seed, n) in [
        (0u64, 0usize),
        (1, 1),
        (2, 5),
        (3, 300),
        (4, 3000),
        (5, 6000),
    ] {
        let (mut rng, mut s, mut root, mut model) = committed_tree(910 + seed, n);
        // Removing a third leaves the leaves part empty.
        let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        for k in keys.iter().step_by(3) {
            remove(&mut s, &mut root, k).unwrap();
            model.remove(k);
        }
        if n > 0 {
            let (k, v) = (gen_key(&mut rng), value_of(9000, seed));
            insert(&mut s, &mut root, &k, &v).unwrap();
            model.insert(k, v);
        }
        s.commit();
        let (_, old_runs, old_types) = walk_all(&s, &root);
        let frees_before = s.frees;
        let (new, freed) = repack(&mut s, &root).unwrap();
        s.commit();
        let old_pages: u64 = old_runs.values().map(|&p| u64::from(p)).sum();
        assert_eq!(freed, old_pages, "seed {seed}: pages freed");
        assert_eq!(s.frees - frees_before, old_runs.len() as u64, "seed {seed}");
        // The store's live pages are exactly the new tree's: the old tree
        // is gone, nothing leaked.
        let types = check_store(&s, &new);
        check_model(&s, &new, &model);
        assert!(
            types[0] <= old_types[0],
            "seed {seed}: more leaves than before"
        );
        assert_eq!(types[2], old_types[2], "seed {seed}: overflow runs");
        let leaves = leaves_in_order(&s, &new);
        for w in leaves.windows(2) {
            let (a, b) = (s.read_page(w[0]).unwrap(), s.read_page(w[1]).unwrap());
            let a = node::NodeRef::parse(&a, w[0], PS).unwrap();
            let b = node::NodeRef::parse(&b, w[1], PS).unwrap();
            let next = b.leaf_cell_raw(0).unwrap().1.len() + node::SLOT_LEN;
            assert!(
                a.used() + next > node::usable(PS),
                "seed {seed}: leaf {} took {} bytes and left room for the next entry",
                w[0],
                a.used()
            );
        }
    }
}

/// Writes `id` as child `i` of the branch `page` (bypassing the store).
fn corrupt_child(s: &mut MemStore, page: PageId, i: usize, id: PageId) {
    let bytes = s.read_page(page).unwrap();
    let off = crate::format::codec::read_u16(bytes.bytes(), node::NODE_HEADER_LEN + i * 2) as usize;
    for (j, b) in id.0.to_le_bytes().into_iter().enumerate() {
        s.corrupt(page, off + j, b);
    }
}

/// A page reachable twice (repeated keys) and an overflow run two cells
/// name (same length, so each copy succeeds) are `Corrupted`, and the old
/// tree is left whole: nothing is freed.
#[test]
fn repack_refuses_a_tree_with_a_page_reachable_twice() {
    let (_, base, root, _) = committed_tree(920, 3000);
    let root_id = root.root.unwrap();
    let mut s = base.clone();
    let first = {
        let page = s.read_page(root_id).unwrap();
        node::NodeRef::parse(&page, root_id, PS)
            .unwrap()
            .child(0)
            .unwrap()
    };
    corrupt_child(&mut s, root_id, 1, first);
    let frees = s.frees;
    let e = repack(&mut s, &root).unwrap_err();
    assert!(e.is_corrupted(), "{e}");
    assert_eq!(s.frees, frees, "a failed repack freed pages");

    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    for k in 0u32..40 {
        insert(
            &mut s,
            &mut root,
            &k.to_be_bytes(),
            &value_of(6000, u64::from(k)),
        )
        .unwrap();
    }
    s.commit();
    // Cell 1's overflow pointer is set to cell 0's run.
    let leaf = leaves_in_order(&s, &root)[0];
    let (ptr_off, run0) = {
        let page = s.read_page(leaf).unwrap();
        let n = node::NodeRef::parse(&page, leaf, PS).unwrap();
        let c0 = n.leaf_cell(0).unwrap();
        let c1 = n.leaf_cell(1).unwrap();
        let node::ValueLoc::Overflow { id, .. } = c0.value else {
            panic!("an inline value of 6000 bytes")
        };
        (c1.key_off + c1.key.len(), id)
    };
    for (j, b) in run0.0.to_le_bytes().into_iter().enumerate() {
        s.corrupt(leaf, ptr_off + j, b);
    }
    let frees = s.frees;
    let e = repack(&mut s, &root).unwrap_err();
    assert!(e.is_corrupted(), "{e}");
    assert_eq!(s.frees, frees, "a failed repack freed pages");
}

/// Repacking a tree with flipped bytes gives `Corrupted` with nothing
/// freed, or a tree that walks clean; never a panic.
#[test]
fn repack_of_a_corrupted_tree_never_panics_nor_frees_on_failure() {
    let (mut rng, base, root, _) = committed_tree(930, 1500);
    let runs: Vec<(PageId, u32)> = base.live().iter().map(|(a, b)| (*a, *b)).collect();
    let (mut failed, mut copied) = (0, 0);
    for _ in 0..300 {
        let mut s = base.clone();
        s.lenient = true;
        for _ in 0..rng.gen_range(1..5) {
            let (id, npages) = runs[rng.gen_range(0..runs.len())];
            let off = rng.gen_range(0..(npages as usize * PS).min(300));
            s.corrupt(id, off, rng.gen());
        }
        let frees = s.frees;
        match repack(&mut s, &root) {
            Ok((new, _)) => {
                walk(&s, &new, &mut |_, _, _| {}).unwrap();
                copied += 1;
            }
            Err(e) => {
                assert!(e.is_corrupted(), "{e}");
                assert_eq!(s.frees, frees, "a failed repack freed pages");
                failed += 1;
            }
        }
    }
    eprintln!("repack of corrupted trees: {failed} failed, {copied} copied");
    assert!(failed > 50, "only {failed} of 300 corruptions detected");
}

/// A repack of a tree the same transaction changed before (some of its
/// pages private, as after a fold of the buffer into it) frees those
/// pages too and copies the changed contents.
#[test]
fn repack_after_changes_in_the_same_transaction() {
    let (mut rng, mut s, mut root, mut model) = committed_tree(940, 2000);
    for _ in 0..300 {
        let (k, v) = (gen_key(&mut rng), gen_value(&mut rng));
        insert(&mut s, &mut root, &k, &v).unwrap();
        model.insert(k, v);
    }
    let (_, old_runs, _) = walk_all(&s, &root);
    assert!(
        old_runs.keys().any(|&id| s.is_private(id)),
        "the changes left no private page"
    );
    let (new, freed) = repack(&mut s, &root).unwrap();
    assert_eq!(freed, old_runs.values().map(|&p| u64::from(p)).sum::<u64>());
    check_store(&s, &new);
    check_model(&s, &new, &model);
}

/// A file whose free space names a live page of the tree being repacked:
/// an allocation of the copy hands out a leaf the copy has already read.
/// The repack is `Corrupted` and frees nothing (freeing the old tree would
/// free a page the copy now uses).
#[test]
fn repack_refuses_free_space_that_names_a_page_it_read() {
    let (_, mut s, root, _) = committed_tree(950, 3000);
    let first_leaf = leaves_in_order(&s, &root)[0];
    assert!(!s.is_private(first_leaf));
    // The copy's first allocation comes after the first leaf was read.
    s.hand_out.push(first_leaf);
    assert_repack_refused(&mut s, &root, "free space naming a live page");
    assert!(s.hand_out.is_empty(), "the copy never allocated");
}

/// `repack` of `root` fails `Corrupted` (over `what`) and frees nothing.
fn assert_repack_refused(s: &mut MemStore, root: &TreeRoot, what: &str) {
    let frees = s.frees;
    let e = repack(s, root).expect_err(&format!("a repack over {what} succeeded"));
    assert!(e.is_corrupted(), "{what}: {e}");
    assert_eq!(s.frees, frees, "{what}: a failed repack freed pages");
}

/// Free space that names an overflow run the copy has not read yet: the
/// copy's first overflow value is written into it, and the cell that owns
/// it would then read the copy's bytes as its own value. `Corrupted`,
/// nothing freed (found by review: it gave a key another key's value).
#[test]
fn repack_refuses_free_space_that_names_an_overflow_run_not_read_yet() {
    let mut s = MemStore::new(PS);
    let mut root = TreeRoot::default();
    for i in 0..50u32 {
        let v = value_of(2000, u64::from(i));
        insert(&mut s, &mut root, &(i * 2).to_be_bytes(), &v).unwrap();
    }
    s.commit();
    let leaf = leaves_in_order(&s, &root)[0];
    let last_run = {
        let page = s.read_page(leaf).unwrap();
        let n = node::NodeRef::parse(&page, leaf, PS).unwrap();
        let node::ValueLoc::Overflow { id, .. } = n.leaf_cell(n.count() - 1).unwrap().value else {
            panic!("a 2000-byte value inline")
        };
        id
    };
    s.hand_out.push(last_run);
    assert_repack_refused(&mut s, &root, "free space naming a live run");
    assert!(s.hand_out.is_empty(), "the copy never allocated");
}

/// Branches whose children are all one page, level after level, down to
/// an empty leaf: a tree of `levels + 1` pages with 2^levels paths and no
/// key to repeat. The repack refuses it at the second visit instead of
/// walking every path (found by review: 264 ms at 20 levels, growing 4x
/// every two levels).
#[test]
fn repack_refuses_a_shared_empty_subtree_at_once() {
    let mut s = MemStore::new(PS);
    let leaf = s.alloc(1).unwrap();
    s.install(leaf, node::NodeBuilder::new(PS, leaf, s.cf(), 0).finish());
    let mut below = leaf;
    let key = [7u8];
    for level in 1..=60u8 {
        let id = s.alloc(1).unwrap();
        let mut b = node::NodeBuilder::new(PS, id, s.cf(), level);
        b.push(&node::NewCell::Branch {
            child: below,
            key: &key,
        })
        .unwrap();
        b.set_rightmost(below);
        s.install(id, b.finish());
        below = id;
    }
    s.commit();
    let root = TreeRoot {
        root: Some(below),
        len: 0,
    };
    assert_repack_refused(&mut s, &root, "a page reachable twice");
}
