//! Corruption: flip bytes of a database file and read everything back.
//! The only acceptable outcomes are an error (`Corrupted`, or
//! `NotADatabase` for a damaged magic/version) or exactly the committed
//! data — never a panic, never wrong data. A flip inside the current
//! superblock slot may legitimately fall back to the previous slot, i.e.
//! the state of the commit before the last one.

mod common;

use std::sync::Arc;

use common::{dump, files_of, open_sim, random_writes, Files, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sheafdb::storage::sim::SimVfs;
use sheafdb::Error;

fn restore(files: &Files, name: &str, bytes: Vec<u8>) -> SimVfs {
    let vfs = SimVfs::new();
    for (n, b) in files {
        if n != name {
            vfs.set_file_bytes(n, b.clone());
        }
    }
    vfs.set_file_bytes(name, bytes);
    vfs
}

fn build() -> (Vec<u8>, Model, Model) {
    let vfs = SimVfs::new();
    let db = open_sim(&vfs, "c.sheaf").unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let mut model = Model::new();
    let mut previous = Model::new();
    for _ in 0..4 {
        previous = model.clone();
        let tx = db.begin_write().unwrap();
        random_writes(&tx, &mut model, &mut rng, 60).unwrap();
        tx.commit().unwrap();
    }
    drop(db);
    FILES.with(|f| *f.borrow_mut() = files_of(&vfs));
    (vfs.file_bytes("c.sheaf").unwrap(), model, previous)
}

thread_local! {
    static FILES: std::cell::RefCell<Files> = const { std::cell::RefCell::new(Files::new()) };
}

/// `WalMismatch`: a data file cut to nothing (or to a foreign shape)
/// beside its WAL is refused rather than recreated over the WAL.
fn acceptable(e: &Error) -> bool {
    matches!(
        e,
        Error::Corrupted { .. } | Error::NotADatabase(_) | Error::WalMismatch(_)
    )
}

fn check_flip(image: &[u8], pos: usize, xor: u8, model: &Model, previous: &Model) {
    let mut bytes = image.to_vec();
    bytes[pos] ^= xor;
    let vfs = FILES.with(|f| restore(&f.borrow(), "c.sheaf", bytes));
    let db = match open_sim(&vfs, "c.sheaf") {
        Ok(db) => db,
        Err(e) => {
            assert!(acceptable(&e), "flip at {pos}: open gave {e:?}");
            return;
        }
    };
    match dump(&db) {
        Ok(state) => {
            let in_superblock = pos < 2 * 4096;
            assert!(
                &state == model || (in_superblock && &state == previous),
                "flip at byte {pos} (page {}) returned wrong data",
                pos / 4096
            );
        }
        Err(e) => assert!(acceptable(&e), "flip at {pos}: read gave {e:?}"),
    }
    if let Err(e) = db.check_integrity() {
        assert!(acceptable(&e), "flip at {pos}: check_integrity gave {e:?}");
    }
}

#[test]
fn flipped_bytes_give_errors_or_correct_data() {
    let (image, model, previous) = build();
    assert!(
        image.len() > 8 * 4096,
        "database too small to be interesting"
    );
    let mut rng = StdRng::seed_from_u64(3);
    // Every byte of the superblock sectors, then a large sample of the rest.
    let mut positions: Vec<usize> = (0..512).chain(4096..4096 + 512).collect();
    let stride = (image.len() / 6000).max(1);
    positions.extend(
        (2 * 4096..image.len())
            .step_by(stride)
            .map(|p| p + rng.gen_range(0..stride))
            .filter(|&p| p < image.len()),
    );
    for pos in positions {
        let xor = 1u8 << rng.gen_range(0..8);
        check_flip(&image, pos, xor, &model, &previous);
    }
}

#[test]
fn truncated_files_give_errors_or_correct_data() {
    let (image, model, previous) = build();
    for cut in (0..image.len()).step_by(4096 / 2).chain([image.len() - 1]) {
        let vfs = FILES.with(|f| restore(&f.borrow(), "c.sheaf", image[..cut].to_vec()));
        match open_sim(&vfs, "c.sheaf") {
            Ok(db) => match dump(&db) {
                Ok(state) => assert!(
                    state == model || state == previous || (cut == 0 && state.is_empty()),
                    "truncated to {cut}: wrong data"
                ),
                Err(e) => assert!(acceptable(&e), "truncated to {cut}: {e:?}"),
            },
            Err(e) => assert!(acceptable(&e), "truncated to {cut}: open gave {e:?}"),
        }
    }
}

/// After a crash (no clean close), recovery replays the WAL. A flipped
/// byte anywhere in the WAL must give an error or the committed data:
/// every commit here was acknowledged durable before the next began, so
/// each frame's synced mark vouches for the frame before it and damage to
/// any frame but the last is `Corrupted`, never a silent prefix (damage to
/// the last one cannot be told from a torn tail: the commit before it).
/// With `salvage_damaged_wal` the same images open as a committed prefix,
/// and `wal_damage` says so exactly when the strict open refused.
#[test]
fn flipped_wal_bytes_give_an_error_or_every_acknowledged_commit() {
    let vfs = SimVfs::new();
    // Every record in one segment file, the one the flips damage (with a
    // smaller first file the last commits, the torn-tail case among them,
    // went to a second file no flip reached).
    let db = common::builder()
        .wal_first_segment_bytes(256 << 10)
        .create_with_vfs(Arc::new(vfs.clone()), "w.sheaf")
        .unwrap();
    let mut rng = StdRng::seed_from_u64(21);
    let mut models = vec![Model::new()];
    for _ in 0..12 {
        let mut m = models.last().unwrap().clone();
        let tx = db.begin_write().unwrap();
        random_writes(&tx, &mut m, &mut rng, 15).unwrap();
        tx.commit().unwrap();
        models.push(m);
    }
    let crashed = vfs.crash_with(0, sheafdb::storage::sim::CrashPolicy::KeepAll);
    drop(db);
    let files = files_of(&crashed);
    let segments = files.keys().filter(|n| n.contains("-wal")).count();
    assert_eq!(segments, 1, "one WAL segment holds every record");
    let (wal_name, wal) = files
        .iter()
        .find(|(n, _)| n.contains("-wal"))
        .map(|(n, b)| (n.clone(), b.clone()))
        .expect("a WAL segment exists");
    // Where the records are: the non-zero prefix of the segment.
    let used = wal.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
    assert!(used > 4096, "expected records in the WAL");
    let (last, before_last) = (&models[12], &models[11]);
    let (mut refused, mut salvageable, mut salvaged_count) = (0, 0, 0);
    for i in 0..1500 {
        // Most flips in the records, some in the segment header.
        let pos = match i % 10 {
            0 => rng.gen_range(0..80),
            _ => rng.gen_range(4096..used),
        };
        let mut bytes = wal.clone();
        bytes[pos] ^= 1 << (i % 8);
        let v = restore(&files, &wal_name, bytes);
        let mut said_salvageable = false;
        let strict = match open_sim(&v, "w.sheaf") {
            Ok(db) => {
                let state =
                    dump(&db).unwrap_or_else(|e| panic!("flip at WAL byte {pos}: read gave {e:?}"));
                assert!(
                    state == *last || state == *before_last,
                    "flip at WAL byte {pos}: acknowledged commits were dropped silently"
                );
                db.check_integrity().unwrap();
                true
            }
            Err(e) => {
                assert!(acceptable(&e), "flip at WAL byte {pos}: open gave {e:?}");
                refused += 1;
                said_salvageable = e.is_salvageable_wal_damage();
                salvageable += usize::from(said_salvageable);
                false
            }
        };

        let salvaged = common::builder()
            .salvage_damaged_wal(true)
            .open_with_vfs(std::sync::Arc::new(v.clone()), "w.sheaf");
        match salvaged {
            Ok(db) => {
                let state = dump(&db).unwrap();
                assert!(models.contains(&state), "flip at WAL byte {pos}: salvage");
                assert_eq!(
                    db.wal_damage().is_some(),
                    !strict,
                    "flip at WAL byte {pos}: damage reported iff the strict open refused"
                );
                // The refusal said so exactly when the salvage opens.
                assert_eq!(
                    said_salvageable, !strict,
                    "flip at WAL byte {pos}: is_salvageable_wal_damage"
                );
                salvaged_count += usize::from(!strict);
                db.check_integrity().unwrap();
                drop(db);
                // The salvage is final: a plain open now gives the same.
                let again = open_sim(&v, "w.sheaf").unwrap();
                assert_eq!(
                    dump(&again).unwrap(),
                    state,
                    "flip at WAL byte {pos}: reopen"
                );
            }
            Err(e) => {
                assert!(
                    !strict && acceptable(&e),
                    "flip at WAL byte {pos}: salvage gave {e:?}"
                );
                assert!(
                    !said_salvageable,
                    "flip at WAL byte {pos}: called salvageable, salvage gave {e:?}"
                );
            }
        }
    }
    assert!(refused > 100, "only {refused} flips were refused");
    assert!(
        salvageable == salvaged_count && salvaged_count > 0,
        "{salvageable} refusals called salvageable, {salvaged_count} salvaged"
    );
}
