//! Untyped writes to tables whose built-in key type holds arrays of
//! zero-width elements (`[(); N]`, whose only encoding is no bytes) are
//! checked like every other built-in type: bytes that are no encoding get
//! `InvalidArgument`, so a typed reader never meets them as `Corrupted`
//! (a session-35 probe found them accepted: the type-name parser refused
//! such arrays, and an unparsed name is a user-defined type, unchecked).

use sheafdb::{Database, Error, Key, TableDefinition, Value};

/// Bytes an untyped handle of `K`'s table accepted out of `bad`, and the
/// typed reads that then failed.
fn accepted<K: Key + 'static>(db: &Database, name: &str, bad: &[&[u8]]) -> (Vec<Vec<u8>>, usize) {
    let tx = db.begin_write().unwrap();
    drop(tx.open_table(TableDefinition::<K, u8>::new(name)).unwrap());
    let mut taken = Vec::new();
    {
        let mut ut = tx
            .open_untyped_table(name, &<K as Value>::type_name(), "u8")
            .unwrap();
        for b in bad {
            match ut.insert(*b, [1u8].as_slice()) {
                Ok(_) => taken.push(b.to_vec()),
                Err(Error::InvalidArgument(_)) => {}
                Err(e) => panic!("{name}: {e}"),
            }
        }
    }
    let t = tx.open_table(TableDefinition::<K, u8>::new(name)).unwrap();
    let failed = t.iter().unwrap().filter(|e| e.is_err()).count();
    drop(t);
    tx.abort().unwrap();
    (taken, failed)
}

macro_rules! check_types {
    ($db:expr, $bad:expr, $($name:literal => $t:ty),* $(,)?) => {{
        let mut wrong = Vec::new();
        $(
            let (taken, failed) = accepted::<$t>($db, $name, $bad);
            if failed > 0 {
                wrong.push(format!("{} ({}): accepted {taken:?}, {failed} typed reads fail",
                    $name, <$t as Value>::type_name()));
            }
        )*
        wrong
    }};
}

#[test]
fn untyped_writes_to_zero_width_array_keys_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("z.sheaf")).unwrap();
    let bad: &[&[u8]] = &[&[0xFE; 37], &[1], &[2, 2, 2], &[0, 0, 0], &[0xFF; 3], &[]];
    let wrong = check_types!(&db, bad,
        "arr_unit3" => [(); 3],
        "arr_unit1" => [(); 1],
        "arr_unit0" => [(); 0],
        "arr_arr_unit" => [[(); 2]; 2],
        "vec_arr_unit" => Vec<[(); 2]>,
        "t_arr_unit" => (u8, [(); 2]),
        "opt_arr_unit" => Option<[(); 2]>,
        "arr_i8_2" => [i8; 2],
        "vec_unit" => Vec<()>,
        "opt_unit" => Option<()>,
        "tuple_units" => ((), (), u8),
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The valid encodings still go in and read back through the typed table.
#[test]
fn valid_zero_width_array_keys_still_write_and_read_untyped() {
    const T: TableDefinition<(u8, [(); 2]), u8> = TableDefinition::new("t");
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("v.sheaf")).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        t.insert((4u8, [(); 2]), 9u8).unwrap();
    }
    let encoded = {
        let t = tx.open_table(T).unwrap();
        let (k, _) = t.iter().unwrap().next().unwrap().unwrap();
        k.raw_bytes().to_vec()
    };
    {
        let name = <(u8, [(); 2]) as Value>::type_name();
        let mut ut = tx.open_untyped_table("t", &name, "u8").unwrap();
        let mut again = encoded.clone();
        again[0] = 5;
        ut.insert(again.as_slice(), [8u8].as_slice()).unwrap();
    }
    let t = tx.open_table(T).unwrap();
    let keys: Vec<u8> = t.iter().unwrap().map(|e| e.unwrap().0.value().0).collect();
    assert_eq!(keys, [4, 5]);
}
