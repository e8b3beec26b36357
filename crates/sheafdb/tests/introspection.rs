//! What tools such as the `sheaf` command line need from the library
//! (issue 15): `Database::file_info`, table listings with type names and
//! counts, untyped table access, the dynamic codec over a real database,
//! and `check_integrity_with`'s progress.

mod common;

use std::sync::Arc;

use common::builder;
use sheafdb::storage::sim::{CrashPolicy, SimVfs};
use sheafdb::table::dynamic::{DynType, DynValue};
use sheafdb::{Database, Durability, Entry, Error, Result, TableDefinition, TableInfo};

const USERS: TableDefinition<&str, u64> = TableDefinition::new("users");
const EVENTS: TableDefinition<(u64, &str), Option<(u32, String)>> = TableDefinition::new("events");
const FLAGS: TableDefinition<(bool, Option<String>, i16), f64> = TableDefinition::new("flags");

fn fill(db: &Database) -> Result<()> {
    let tx = db.begin_write()?;
    {
        let mut users = tx.open_table(USERS)?;
        for (i, name) in ["ada", "bob", "cy"].iter().enumerate() {
            users.insert(*name, i as u64 * 10)?;
        }
        let mut events = tx.open_table(EVENTS)?;
        events.insert((2, "b\0c"), Some((7, "seven".to_string())))?;
        events.insert((1, "a"), None)?;
    }
    tx.commit()?;
    let other = db.cf_or_create("other")?;
    let tx = other.begin_write()?;
    {
        let mut flags = tx.open_table(FLAGS)?;
        flags.insert((true, None, -3), 1.5)?;
        flags.insert((false, Some("x".into()), 3), f64::NAN)?;
        flags.insert((true, Some(String::new()), i16::MIN), -0.0)?;
    }
    tx.commit()?;
    Ok(())
}

#[test]
fn file_info_describes_the_file_and_the_replay() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i.sheaf");
    let db = Database::builder().page_size(8192).create(&path)?;
    let created = db.file_info()?;
    assert_eq!(created.format_version, 4);
    assert_eq!(created.page_size, 8192);
    assert!(created.clean && created.replayed_records == 0);
    assert!(!created.read_only);
    assert_eq!(created.file_bytes, std::fs::metadata(&path).unwrap().len());
    assert!(created.recorded_file_bytes >= 2 * 8192);
    fill(&db)?;
    db.checkpoint()?;
    let after = db.file_info()?;
    assert!(
        after.generation > created.generation,
        "{after:?} {created:?}"
    );
    assert!(after.replay_start_lsn > created.replay_start_lsn);
    assert!(after.wal_end_lsn >= after.replay_start_lsn);
    db.close()?;

    let db = Database::open_read_only(&path)?;
    let info = db.file_info()?;
    assert!(info.read_only && info.clean, "{info:?}");
    assert_eq!(info.page_size, 8192);
    assert_eq!(info.file_bytes, std::fs::metadata(&path).unwrap().len());
    let wal_files: Vec<u64> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("i.sheaf-wal."))
        .map(|e| e.metadata().unwrap().len())
        .collect();
    assert_eq!(info.wal_segments, wal_files.len() as u64, "{info:?}");
    assert_eq!(info.wal_bytes, wal_files.iter().sum::<u64>(), "{info:?}");
    drop(db);
    Ok(())
}

#[test]
fn file_info_counts_replayed_records_after_a_crash() -> Result<()> {
    let vfs = SimVfs::new();
    let db = builder()
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), "c.sheaf")?;
    for k in 0..20u64 {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::Immediate);
        tx.open_table(USERS)?.insert(format!("u{k}").as_str(), k)?;
        tx.commit()?;
    }
    let crashed = vfs.crash_with(3, CrashPolicy::KeepAll);
    std::mem::forget(db);
    let ro = builder()
        .read_only(true)
        .open_with_vfs(Arc::new(crashed.clone()), "c.sheaf")?;
    let info = ro.file_info()?;
    assert_eq!(info.replayed_records, 20, "{info:?}");
    assert!(!info.clean);
    assert_eq!(info.replayed_records, ro.replayed_records());
    drop(ro);
    // A read-write open replays the same records; after its clean close
    // nothing is left to replay.
    let rw = builder().open_with_vfs(Arc::new(crashed.clone()), "c.sheaf")?;
    assert_eq!(rw.file_info()?.replayed_records, 20);
    rw.close()?;
    let again = builder().open_with_vfs(Arc::new(crashed), "c.sheaf")?;
    assert!(again.file_info()?.clean);
    Ok(())
}

fn info(name: &str, key: &str, value: &str, entries: u64) -> (String, String, String, u64) {
    (name.into(), key.into(), value.into(), entries)
}

fn flat(t: &TableInfo) -> (String, String, String, u64) {
    (
        t.name.clone(),
        t.key_type.clone(),
        t.value_type.clone(),
        t.entries,
    )
}

#[test]
fn tables_are_listed_with_types_and_counts() -> Result<()> {
    let vfs = SimVfs::new();
    let db = builder().create_with_vfs(Arc::new(vfs), "t.sheaf")?;
    fill(&db)?;
    let rx = db.begin_read()?;
    let listed: Vec<_> = rx.list_table_info()?.iter().map(flat).collect();
    assert_eq!(
        listed,
        [
            info("events", "(u64,str)", "Option<(u32,str)>", 2),
            info("users", "str", "u64", 3),
        ]
    );
    let other = db.cf("other")?;
    let listed: Vec<_> = rx.list_table_info_in(&other)?.iter().map(flat).collect();
    assert_eq!(listed, [info("flags", "(bool,Option<str>,i16)", "f64", 3)]);
    assert_eq!(
        flat(&rx.table_info("users")?),
        info("users", "str", "u64", 3)
    );
    assert!(matches!(
        rx.table_info("nope"),
        Err(Error::TableNotFound(_))
    ));
    // Counts include buffered commits and a CF snapshot sees the same.
    let tx = db.begin_write()?;
    tx.open_table(USERS)?.remove("bob")?;
    tx.commit()?;
    let rx = db.default_cf()?.begin_read()?;
    assert_eq!(rx.table_info("users")?.entries, 2);
    Ok(())
}

#[test]
fn untyped_reads_see_the_stored_encodings_in_key_order() -> Result<()> {
    let vfs = SimVfs::new();
    let db = builder().create_with_vfs(Arc::new(vfs), "u.sheaf")?;
    fill(&db)?;
    let rx = db.begin_read()?;
    let events = rx.open_untyped_table("events")?;
    let ty = rx.table_info("events")?;
    let (kt, vt) = (
        DynType::parse(&ty.key_type).unwrap(),
        DynType::parse(&ty.value_type).unwrap(),
    );
    let typed = rx.open_table(EVENTS)?;
    let mut n = 0;
    for (raw, typed) in events.iter()?.zip(typed.iter()?) {
        let ((rk, rv), (tk, tv)) = (raw?, typed?);
        assert_eq!(rk.value(), tk.raw_bytes());
        assert_eq!(rv.value(), tv.raw_bytes());
        let k = kt.decode_key(rk.value())?;
        let v = vt.decode_value(rv.value())?;
        let (id, name) = tk.value();
        assert_eq!(
            k,
            DynValue::Tuple(vec![
                DynValue::Unsigned(id.into()),
                DynValue::Str(name.into())
            ])
        );
        match tv.value() {
            None => assert_eq!(v, DynValue::Option(None)),
            Some((x, s)) => assert_eq!(
                v,
                DynValue::Option(Some(Box::new(DynValue::Tuple(vec![
                    DynValue::Unsigned(x.into()),
                    DynValue::Str(s)
                ]))))
            ),
        }
        n += 1;
    }
    assert_eq!(n, 2);
    assert_eq!(events.len()?, 2);
    let other = db.cf("other")?;
    assert_eq!(rx.open_untyped_table_in(&other, "flags")?.len()?, 3);
    assert!(matches!(
        rx.open_untyped_table("flags"),
        Err(Error::TableNotFound(_))
    ));
    Ok(())
}

#[test]
fn untyped_writes_check_type_names_and_read_back_typed() -> Result<()> {
    let vfs = SimVfs::new();
    let db = builder().create_with_vfs(Arc::new(vfs), "w.sheaf")?;
    fill(&db)?;
    let kt = DynType::parse("(u64,str)").unwrap();
    let vt = DynType::parse("Option<(u32,str)>").unwrap();
    let tx = db.begin_write()?;
    {
        let r = tx.open_untyped_table("events", "u64", "Option<(u32,str)>");
        assert!(matches!(r, Err(Error::TableTypeMismatch { .. })), "{r:?}");
        let mut events = tx.open_untyped_table("events", "(u64,str)", "Option<(u32,str)>")?;
        let key = DynValue::Tuple(vec![DynValue::Unsigned(0), DynValue::Str("z".into())]);
        let value = DynValue::Option(Some(Box::new(DynValue::Tuple(vec![
            DynValue::Unsigned(9),
            DynValue::Str("nine".into()),
        ]))));
        events.insert(
            kt.encode_key(&key)?.as_slice(),
            vt.encode_value(&value)?.as_slice(),
        )?;
        // A new table gets the given type names.
        let mut fresh = tx.open_untyped_table("fresh", "i32", "[u8;2]")?;
        let k = DynType::parse("i32")
            .unwrap()
            .encode_key(&DynValue::Signed(-5))?;
        fresh.insert(k.as_slice(), [1u8, 2].as_slice())?;
    }
    tx.commit()?;
    let rx = db.begin_read()?;
    let events = rx.open_table(EVENTS)?;
    assert_eq!(events.len()?, 3);
    assert_eq!(
        events.first()?.unwrap().1.value(),
        Some((9, "nine".to_string()))
    );
    let fresh: TableDefinition<i32, [u8; 2]> = TableDefinition::new("fresh");
    assert_eq!(rx.open_table(fresh)?.get(-5)?.unwrap().value(), [1, 2]);
    // In a multi-CF transaction too.
    let other = db.cf("other")?;
    let default = db.default_cf()?;
    let tx = db.begin_write_cfs(&[&default, &other])?;
    {
        let mut t = tx.open_untyped_table(&other, "flags", "(bool,Option<str>,i16)", "f64")?;
        let k = DynType::parse("(bool,Option<str>,i16)")
            .unwrap()
            .encode_key(&DynValue::Tuple(vec![
                DynValue::Bool(false),
                DynValue::Option(None),
                DynValue::Signed(0),
            ]))?;
        t.insert(k.as_slice(), 2.5f64.to_bits().to_le_bytes().as_slice())?;
    }
    tx.commit()?;
    let flags = db.begin_read()?.open_table_in(&other, FLAGS)?;
    assert_eq!(flags.get((false, None, 0))?.unwrap().value(), 2.5);
    Ok(())
}

/// Untyped writes into `Vec<T>` and `[T;N]` tables (`T` not `u8`) and
/// into multimap tables were not checked at all: the dynamic layer did not
/// know those types, so any bytes were stored and typed readers met them
/// as `Corrupted` while `check_integrity` passed (an adversarial probe).
/// Now both are decoded before anything is written.
#[test]
fn untyped_writes_into_vector_array_and_multimap_tables_are_checked() -> Result<()> {
    const LISTS: TableDefinition<Vec<u16>, [char; 2]> = TableDefinition::new("lists");
    const MM: sheafdb::MultimapTableDefinition<u32, &str> =
        sheafdb::MultimapTableDefinition::new("mm");
    let db = builder().create_with_vfs(Arc::new(SimVfs::new()), "lists.sheaf")?;
    let refused = |r: Result<()>, what: &str| match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(what), "{what}: {m}"),
        other => panic!("{what}: {other:?}"),
    };
    let tx = db.begin_write()?;
    tx.open_table(LISTS)?.insert(vec![1u16, 2], ['a', 'b'])?;
    tx.open_multimap_table(MM)?.insert(1, "a")?;
    {
        let mut t = tx.open_untyped_table("lists", "Vec<u16>", "[char;2]")?;
        let ab: Vec<u8> = ['x', 'y']
            .iter()
            .flat_map(|c| u32::from(*c).to_le_bytes())
            .collect();
        // Three bytes are not whole u16s; one byte is not two chars.
        refused(
            t.insert(&[0u8, 1, 2][..], &ab[..]).map(drop),
            "key (3 bytes)",
        );
        refused(
            t.insert(&[0u8, 3][..], &[0xffu8][..]).map(drop),
            "value (1 bytes)",
        );
        // Eight bytes of the right width, but not chars.
        refused(
            t.insert(&[0u8, 3][..], &[0xffu8; 8][..]).map(drop),
            "not an encoding of [char;2]",
        );
        t.insert(&[0u8, 3, 0, 4][..], &ab[..])?;
        assert_eq!(t.len()?, 2);

        let mut m = tx.open_untyped_table("mm", &MM.key_type_name(), &MM.value_type_name())?;
        // No terminator after the key: not a pair.
        refused(
            m.insert(&[1u8, 2][..], &[][..]).map(drop),
            "not a multimap pair",
        );
        // A pair whose key part (empty) is no u32.
        refused(
            m.insert(&[0u8, 0, b'z'][..], &[][..]).map(drop),
            "multimap pair's key",
        );
        // A pair of a u32 and a str (the value's key encoding: raw UTF-8).
        let two = 2u32.to_be_bytes();
        let pair = sheafdb::table::dynamic::multimap_pair(&two, &[0xff]);
        refused(
            m.insert(&pair[..], &[][..]).map(drop),
            "multimap pair's value",
        );
        let pair = sheafdb::table::dynamic::multimap_pair(&two, b"two");
        m.insert(&pair[..], &[][..])?;
    }
    tx.commit()?;
    let rx = db.begin_read()?;
    let lists = rx.open_table(LISTS)?;
    let all: Vec<(Vec<u16>, [char; 2])> = lists
        .iter()?
        .map(|e| e.map(|(k, v)| (k.value(), v.value())))
        .collect::<Result<_>>()?;
    assert_eq!(all, [(vec![1, 2], ['a', 'b']), (vec![3, 4], ['x', 'y'])]);
    let mm = rx.open_multimap_table(MM)?;
    let twos: Vec<String> = mm
        .get(2)?
        .map(|v| v.map(|v| v.value().to_string()))
        .collect::<Result<_>>()?;
    assert_eq!(twos, ["two"]);
    assert_eq!(mm.len()?, 2);
    assert!(db.check_integrity().is_ok());
    Ok(())
}

/// A key or value that is not an encoding of the table's built-in type
/// is refused at the write (`InvalidArgument`, nothing written), on every
/// path that stores a value; before, the bytes were stored and a typed
/// reader met them as `Corrupted`. User-defined types and `bytes` take
/// any bytes.
#[test]
fn untyped_writes_of_bad_encodings_are_refused_and_write_nothing() -> Result<()> {
    const NUMS: TableDefinition<u64, u64> = TableDefinition::new("nums");
    let db = builder().create_with_vfs(Arc::new(SimVfs::new()), "bad.sheaf")?;
    let refused = |r: Result<()>, what: &str| match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(what), "{m}"),
        other => panic!("{what}: {other:?}"),
    };
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_untyped_table("nums", "u64", "u64")?;
        let eight = 7u64.to_be_bytes();
        refused(t.insert(&eight[..3], &eight[..]).map(drop), "key (3 bytes)");
        refused(
            t.insert(&eight[..], &eight[..5]).map(drop),
            "value (5 bytes)",
        );
        // The entry API and in-place reservations check too.
        match t.entry(&eight[..])? {
            Entry::Vacant(v) => refused(v.insert(&b"no"[..]).map(drop), "value (2 bytes)"),
            Entry::Occupied(_) => panic!("nothing was written"),
        }
        // A reservation of the wrong width is refused when asked for, so a
        // drop cannot fail the transaction over it.
        refused(t.insert_reserve(&eight[..], 4).map(drop), "value (4 bytes)");
        refused(t.insert_reserve(&eight[..3], 8).map(drop), "key (3 bytes)");

        assert_eq!(t.len()?, 0, "a refused write wrote something");
        t.insert(&eight[..], &42u64.to_le_bytes()[..])?;
        // A string key must be UTF-8; a user-defined type takes anything.
        let mut s = tx.open_untyped_table("names", "str", "bytes")?;
        refused(
            s.insert(&[0xff, 0xfe][..], &[1u8][..]).map(drop),
            "not an encoding of str",
        );
        s.insert(&b"ok"[..], &[0xffu8][..])?;
        let mut own = tx.open_untyped_table("own", "my::Point", "my::Shape")?;
        own.insert(&[1u8][..], &[2u8, 3][..])?;
    }
    {
        // Bytes of the right width that are still no encoding (a `char`
        // past the last scalar value) are refused when stored.
        let mut c = tx.open_untyped_table("chars", "u8", "char")?;
        let mut r = c.insert_reserve(&[1u8][..], 4)?;
        r.copy_from_slice(&0x11_0000u32.to_le_bytes());
        refused(r.finish().map(drop), "not an encoding of char");
        let mut r = c.insert_reserve(&[2u8][..], 4)?;
        r.copy_from_slice(&u32::from('x').to_le_bytes());
        r.finish()?;
        assert_eq!(c.len()?, 1);
    }
    tx.commit()?;
    let rx = db.begin_read()?;
    let nums = rx.open_table(NUMS)?;
    assert_eq!(nums.len()?, 1);
    assert_eq!(nums.get(7)?.map(|v| v.value()), Some(42));
    for e in nums.iter()? {
        e?;
    }
    Ok(())
}

/// From a review: a reservation of a width no `u64` has, dropped rather
/// than finished (which the docs allow), failed the whole transaction
/// when its store was refused at the drop, losing the writes before it.
/// The width is refused when the reservation is asked for instead.
#[test]
fn a_reservation_of_the_wrong_width_is_refused_before_it_can_be_dropped() -> Result<()> {
    const NUMS: TableDefinition<u64, u64> = TableDefinition::new("nums");
    let db = builder().create_with_vfs(Arc::new(SimVfs::new()), "d.sheaf")?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_untyped_table("nums", "u64", "u64")?;
        t.insert(&1u64.to_be_bytes()[..], &7u64.to_le_bytes()[..])?;
        match t.insert_reserve(&2u64.to_be_bytes()[..], 3) {
            Err(Error::InvalidArgument(_)) => {}
            Ok(mut r) => r.copy_from_slice(&[1, 2, 3]), // dropped: stored, refused
            Err(e) => return Err(e),
        }
        t.insert(&3u64.to_be_bytes()[..], &9u64.to_le_bytes()[..])?;
    }
    tx.commit()?;
    let rx = db.begin_read()?;
    let nums = rx.open_table(NUMS)?;
    assert_eq!(nums.len()?, 2);
    assert_eq!(nums.get(3)?.map(|v| v.value()), Some(9));
    Ok(())
}

#[test]
fn check_progress_counts_every_page_in_use() -> Result<()> {
    let vfs = SimVfs::new();
    let db = builder().create_with_vfs(Arc::new(vfs), "p.sheaf")?;
    fill(&db)?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(TableDefinition::<u64, &[u8]>::new("big"))?;
        for k in 0..3000u64 {
            t.insert(k, [7u8; 100].as_slice())?;
        }
        t.insert(u64::MAX, vec![1u8; 20_000].as_slice())?;
    }
    tx.commit()?;
    db.checkpoint()?;
    let mut calls = Vec::new();
    let report = db.check_integrity_with(&mut |done, total| calls.push((done, total)))?;
    let total = calls[0].1;
    assert_eq!(calls[0], (0, total));
    assert_eq!(*calls.last().unwrap(), (total, total));
    assert!(calls
        .windows(2)
        .all(|w| w[0].0 <= w[1].0 && w[0].1 == w[1].1));
    assert_eq!(total, report.pages_in_use, "{report:?}");
    assert!(calls.len() > 50, "{} reports", calls.len());
    assert_eq!(db.check_integrity()?, report);

    let cf = db.default_cf()?;
    let mut last = (0, 0);
    let r = cf.check_integrity_with(&mut |done, total| last = (done, total))?;
    assert_eq!(last, (r.pages_in_use, r.pages_in_use));
    assert_eq!(cf.stats()?.pages_in_use, r.pages_in_use);
    Ok(())
}

#[test]
fn database_stats_beside_cf_creation_and_drops_never_fail() -> Result<()> {
    // An adversarial probe: `Database::stats` walked the live CF list and
    // failed with `CfNotFound` for a CF dropped (or created) after its
    // snapshot was taken, about ten times a second beside a thread
    // creating and dropping CFs. It now walks the snapshot's own CFs.
    const ROWS: TableDefinition<u64, &[u8]> = TableDefinition::new("rows");
    let db = builder().create_with_vfs(
        Arc::new(sheafdb::storage::mem::MemVfs::new()),
        "churn.sheaf",
    )?;
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| -> Result<()> {
        let churn = s.spawn(|| -> Result<u64> {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let name = format!("q{}", n % 4);
                if db.cf(&name).is_ok() {
                    db.drop_cf(&name)?;
                } else {
                    let cf = db.create_cf(&name)?;
                    let tx = cf.begin_write()?;
                    tx.open_table(ROWS)?.insert(n, [1u8; 100].as_slice())?;
                    tx.commit()?;
                }
                n += 1;
            }
            Ok(n)
        });
        let start = std::time::Instant::now();
        let mut calls = 0;
        let result = (|| -> Result<()> {
            while start.elapsed() < std::time::Duration::from_secs(3) {
                let stats = db.stats()?;
                // The default CF and at most the four churned ones, each
                // with at most its one table.
                assert!((1..=5).contains(&stats.column_families), "{stats:?}");
                assert!(stats.tables <= 4, "{stats:?}");
                calls += 1;
            }
            Ok(())
        })();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let churned = churn.join().expect("the churn thread panicked")?;
        result?;
        assert!(
            calls > 0 && churned > 10,
            "{calls} stats calls, {churned} creations and drops"
        );
        Ok(())
    })?;
    db.check_integrity()?;
    Ok(())
}
