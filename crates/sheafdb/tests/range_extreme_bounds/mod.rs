//! Ranges with bounds at the least/greatest key of a
//! type yield exactly what a model filter yields (forward and reverse;
//! write-set state, committed trees, read-only table, multimap,
//! extract_from_if).
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use sheafdb::{Database, Key, MultimapTableDefinition, ReadableTable, TableDefinition, Value};

fn bounds<K: Clone>(pts: &[K]) -> Vec<Bound<K>> {
    let mut v = vec![Bound::Unbounded];
    for p in pts {
        v.push(Bound::Included(p.clone()));
        v.push(Bound::Excluded(p.clone()));
    }
    v
}

fn model<K: Ord + Clone>(stored: &[K], lo: &Bound<K>, hi: &Bound<K>) -> Vec<K> {
    let mut s: Vec<K> = stored.to_vec();
    s.sort();
    s.dedup();
    s.into_iter()
        .filter(|k| (lo.clone(), hi.clone()).contains(k))
        .collect()
}

/// The keys `t` yields over `r`, forward and (put back in order) reverse.
fn keys_both_ways<K, T>(t: &T, r: &(Bound<K>, Bound<K>)) -> (Vec<K>, Vec<K>)
where
    K: Key + 'static + for<'a> Value<SelfType<'a> = K> + Clone,
    T: ReadableTable<K, u8>,
{
    let fwd = t
        .range::<K>(r.clone())
        .unwrap()
        .map(|e| e.unwrap().0.value())
        .collect();
    let mut rev: Vec<K> = t
        .range::<K>(r.clone())
        .unwrap()
        .rev()
        .map(|e| e.unwrap().0.value())
        .collect();
    rev.reverse();
    (fwd, rev)
}

fn check<K>(name: &str, stored: &[K], pts: &[K])
where
    K: Key + 'static + for<'a> Value<SelfType<'a> = K> + Ord + Clone + Debug,
{
    let t: TableDefinition<K, u8> = TableDefinition::new("t");
    let m: MultimapTableDefinition<K, u8> = MultimapTableDefinition::new("m");
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("p.sheaf")).unwrap();
    let bs = bounds(pts);
    let mut checked = 0;
    for phase in 0..2 {
        let tx = db.begin_write().unwrap();
        if phase == 0 {
            let mut tt = tx.open_table(t).unwrap();
            let mut mm = tx.open_multimap_table(m).unwrap();
            for k in stored {
                tt.insert(k.clone(), 1u8).unwrap();
                mm.insert(k.clone(), 1u8).unwrap();
                mm.insert(k.clone(), 0u8).unwrap();
            }
        }
        {
            let tt = tx.open_table(t).unwrap();
            let mm = tx.open_multimap_table(m).unwrap();
            for lo in &bs {
                for hi in &bs {
                    let want = model(stored, lo, hi);
                    let r = (lo.clone(), hi.clone());
                    let (got, rev) = keys_both_ways(&tt, &r);
                    assert_eq!(got, want, "{name} phase {phase} {r:?}");
                    assert_eq!(rev, want, "{name} phase {phase} rev {r:?}");
                    let mut mw: Vec<(K, u8)> = want
                        .iter()
                        .flat_map(|k| [(k.clone(), 0), (k.clone(), 1)])
                        .collect();
                    let mg: Vec<(K, u8)> = mm
                        .range::<K>(r.clone())
                        .unwrap()
                        .map(|e| {
                            let (k, v) = e.unwrap();
                            (k.value(), v.value())
                        })
                        .collect();
                    assert_eq!(mg, mw, "{name} mm phase {phase} {r:?}");
                    let mut mr: Vec<(K, u8)> = mm
                        .range::<K>(r.clone())
                        .unwrap()
                        .rev()
                        .map(|e| {
                            let (k, v) = e.unwrap();
                            (k.value(), v.value())
                        })
                        .collect();
                    mr.reverse();
                    mw.sort();
                    assert_eq!(mr, mw, "{name} mm rev phase {phase} {r:?}");
                    checked += 1;
                }
            }
        }
        tx.commit().unwrap();
        db.checkpoint().unwrap();
    }
    // Read-only and extract_from_if.
    let rx = db.begin_read().unwrap();
    let ro = rx.open_table(t).unwrap();
    for lo in &bs {
        for hi in &bs {
            let want = model(stored, lo, hi);
            let r = (lo.clone(), hi.clone());
            let (got, rev) = keys_both_ways(&ro, &r);
            assert_eq!(got, want, "{name} ro {r:?}");
            assert_eq!(rev, want, "{name} ro rev {r:?}");
        }
    }
    for lo in bs.iter().step_by(3) {
        for hi in bs.iter().step_by(2) {
            let want = model(stored, lo, hi);
            let r = (lo.clone(), hi.clone());
            let tx = db.begin_write().unwrap();
            {
                let mut tt = tx.open_table(t).unwrap();
                let got: Vec<K> = tt
                    .extract_from_if::<K, _>(r.clone(), |_, _| true)
                    .unwrap()
                    .map(|e| e.unwrap().0.value())
                    .collect();
                assert_eq!(got, want, "{name} extract {r:?}");
                let left = tt.len().unwrap() as usize;
                assert_eq!(
                    left,
                    model(stored, &Bound::Unbounded, &Bound::Unbounded).len() - want.len()
                );
            }
            tx.abort().unwrap();
        }
    }
    eprintln!("{name}: {checked} range pairs checked");
}

#[test]
fn extremes_u8() {
    check::<u8>("u8", &[0, 1, 2, 100, 254, 255], &[0, 1, 2, 128, 254, 255]);
    check::<u8>("u8 no extremes", &[1, 2, 100, 254], &[0, 1, 254, 255]);
}
#[test]
fn extremes_i16() {
    check::<i16>(
        "i16",
        &[i16::MIN, i16::MIN + 1, -1, 0, 1, i16::MAX - 1, i16::MAX],
        &[i16::MIN, i16::MIN + 1, -1, 0, i16::MAX - 1, i16::MAX],
    );
}
#[test]
fn extremes_u128() {
    check::<u128>(
        "u128",
        &[0, 1, u128::MAX],
        &[0, 1, u128::MAX - 1, u128::MAX],
    );
}
#[test]
fn extremes_bool_unit_char() {
    check::<bool>("bool", &[false, true], &[false, true]);
    check::<bool>("bool t", &[true], &[false, true]);
    check::<()>("unit", &[()], &[()]);
    check::<char>("char", &['\0', 'a', char::MAX], &['\0', 'a', char::MAX]);
}
#[test]
fn extremes_arrays_tuples_options() {
    check::<[u8; 2]>(
        "[u8;2]",
        &[[0, 0], [0, 1], [255, 254], [255, 255]],
        &[[0, 0], [0, 1], [255, 255]],
    );
    check::<[i8; 2]>(
        "[i8;2]",
        &[[i8::MIN; 2], [0, 0], [i8::MAX; 2]],
        &[[i8::MIN; 2], [i8::MAX; 2]],
    );
    check::<(u8, i8)>(
        "(u8,i8)",
        &[(0, i8::MIN), (0, 0), (255, i8::MAX)],
        &[(0, i8::MIN), (255, i8::MAX)],
    );
    check::<(u8, [(); 2])>(
        "(u8,[();2])",
        &[(0, [(); 2]), (255, [(); 2])],
        &[(0, [(); 2]), (255, [(); 2])],
    );
    check::<Option<u8>>(
        "Option<u8>",
        &[None, Some(0), Some(255)],
        &[None, Some(0), Some(255)],
    );
    check::<Vec<u16>>(
        "Vec<u16>",
        &[vec![], vec![0], vec![0, 0], vec![65535]],
        &[vec![], vec![0], vec![65535], vec![65535, 65535]],
    );
    check::<String>(
        "String",
        &["".into(), "\0".into(), "a".into()],
        &["".into(), "\0".into()],
    );
    check::<Vec<u8>>(
        "Vec<u8>",
        &[vec![], vec![0], vec![255]],
        &[vec![], vec![0], vec![255]],
    );
    check::<(String, u8)>(
        "(String,u8)",
        &[("".into(), 0), ("".into(), 255), ("\0".into(), 0)],
        &[("".into(), 0), ("".into(), 255)],
    );
}
