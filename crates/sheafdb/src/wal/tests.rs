//! WAL tests over `MemVfs` and the fault-injecting `SimVfs`.

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use super::frame::{encode_frame, FramePlace, StopReason};
use super::segment::SegmentHeader;
use super::*;
use crate::storage::hook::{FileOp, Hook, HookVfs};
use crate::storage::mem::MemVfs;
use crate::storage::sim::{CrashPolicy, Fault, SimVfs};
use crate::types::COUNTER_LIMIT;
use rand::{Rng as _, SeedableRng as _};

const DB: &str = "db";
/// Small segments so tests cross many of them.
const SEG: u64 = 16 * 1024;

type Records = Vec<(Lsn, Vec<u8>)>;

fn opts(segment_bytes: u64) -> WalOptions {
    WalOptions::with_segment_bytes(segment_bytes)
}

/// A payload that names `tag` and has `len >= 8` bytes.
fn payload(tag: u64, len: usize) -> Vec<u8> {
    let mut p = tag.to_le_bytes().to_vec();
    p.extend((8..len.max(8)).map(|i| b'a' + ((tag as usize + i) % 26) as u8));
    p
}

/// Opens the WAL and collects every replayed record.
fn open_collect(vfs: Arc<dyn Vfs>, seg: u64, from: Lsn) -> (Wal, Records, ReplaySummary) {
    let mut got = Vec::new();
    let (wal, summary) = open(vfs, DB, opts(seg), from, &mut |lsn, p| {
        got.push((lsn, p.to_vec()));
        Ok(())
    })
    .expect("open WAL");
    assert_eq!(summary.records_replayed, got.len() as u64);
    (wal, got, summary)
}

fn sim_arc(sim: &SimVfs) -> Arc<dyn Vfs> {
    Arc::new(sim.clone())
}

/// Appends `count` records (sizes cycling over `sizes`), syncing at the end.
fn append_n(wal: &Wal, first_tag: u64, count: u64, sizes: &[usize]) -> Records {
    let mut out = Vec::new();
    for i in 0..count {
        let p = payload(first_tag + i, sizes[i as usize % sizes.len()]);
        let (lsn, end) = wal.append(&p).unwrap();
        assert_eq!(end.0 - lsn.0, (FRAME_HEADER_BYTES + p.len()) as u64);
        out.push((lsn, p));
    }
    wal.sync().unwrap();
    out
}

/// After reopening, appending and reopening again, exactly `expected` plus
/// the new records come back (nothing older resurrects).
fn check_reopen_cycle(vfs: Arc<dyn Vfs>, seg: u64, expected: &Records, ctx: &str) {
    let (wal, got, _) = open_collect(Arc::clone(&vfs), seg, Lsn(0));
    assert_eq!(got, *expected, "{ctx}: first reopen");
    let new = append_n(&wal, 1_000_000, 7, &[40, 300, 2000]);
    if let (Some(last), Some(first_new)) = (expected.last(), new.first()) {
        assert!(first_new.0 > last.0, "{ctx}: new LSNs grow");
    }
    drop(wal);
    let (wal, got, _) = open_collect(Arc::clone(&vfs), seg, Lsn(0));
    let mut all = expected.clone();
    all.extend(new.iter().cloned());
    assert_eq!(got, all, "{ctx}: reopen after new appends");
    drop(wal);
    let (_, again, _) = open_collect(vfs, seg, Lsn(0));
    assert_eq!(again, all, "{ctx}: reopen is stable");
}

/// The segment file (name, offset) holding the frame at `lsn`: the use with
/// the highest sequence number whose range contains it.
fn locate(sim: &SimVfs, lsn: Lsn) -> (String, usize) {
    let mut best: Option<(u64, String, usize)> = None;
    for name in sim.file_names() {
        let bytes = sim.file_bytes(&name).unwrap();
        let Some(h) = SegmentHeader::decode(&bytes[..bytes.len().min(4096)]) else {
            continue;
        };
        if h.start_lsn <= lsn && lsn < h.limit_lsn() && best.as_ref().is_none_or(|b| b.0 < h.seq) {
            let off = (HEADER_BLOCK_BYTES + lsn.0 - h.start_lsn.0) as usize;
            best = Some((h.seq, name, off));
        }
    }
    let (_, name, off) = best.expect("some use holds the LSN");
    (name, off)
}

fn edit_file(sim: &SimVfs, name: &str, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = sim.file_bytes(name).unwrap();
    f(&mut bytes);
    sim.set_file_bytes(name, bytes);
}

fn wal_files(names: &[String]) -> usize {
    names.iter().filter(|n| n.starts_with("db-wal.")).count()
}

/// Runs `f` on a thread; fails the test if it does not finish in `limit`.
fn with_watchdog<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("watchdog: no result within {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the watched worker panicked"),
    }
}

// ---------------------------------------------------------------- round trips

#[test]
fn new_wal_is_empty() {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let (wal, got, s) = open_collect(Arc::clone(&vfs), SEG, Lsn(0));
    assert!(got.is_empty());
    assert_eq!(s.stop, StopReason::NoLog);
    assert_eq!(wal.next_lsn(), FIRST_LSN);
    assert_eq!(wal.segment_files(), 0);
    // Nothing is written until something is appended.
    assert!(vfs.list().unwrap().is_empty());
    wal.sync().unwrap();
    assert_eq!(wal.stats().syncs, 0);
}

#[test]
fn marks_follow_the_watermarks_without_passing_them() {
    // `Wal::marks` reads copies stored after each round; publication
    // relies on them never being ahead of what was written and synced.
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let (wal, _, _) = open_collect(Arc::clone(&vfs), SEG, Lsn(0));
    let start = wal.marks();
    assert_eq!((start.written, start.synced), (FIRST_LSN, FIRST_LSN));
    let (_, end) = wal.append(&payload(1, 100)).unwrap();
    // Appended, not written: the marks have not moved.
    assert_eq!(wal.marks(), start);
    wal.wait_written(end).unwrap();
    let m = wal.marks();
    assert_eq!(m.written, end);
    assert!(m.synced < end && m.synced <= wal.synced_lsn());
    wal.wait_durable(end).unwrap();
    let m = wal.marks();
    assert_eq!((m.written, m.synced), (end, end));
    assert_eq!(m.synced, wal.synced_lsn());
}

#[test]
fn round_trip_across_segments_from_any_lsn() {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let (wal, _, _) = open_collect(Arc::clone(&vfs), SEG, Lsn(0));
    let records = append_n(&wal, 0, 1500, &[10, 200, 51, 900, 8, 3000]);
    let stats = wal.stats();
    assert!(stats.segments_created >= 10, "{stats:?}");
    assert_eq!(stats.records, 1500);
    drop(wal);

    let (_, got, s) = open_collect(Arc::clone(&vfs), SEG, Lsn(0));
    assert_eq!(got, records);
    assert_eq!(s.records_skipped, 0);
    assert_eq!(s.last_record_lsn, Some(records.last().unwrap().0));
    let end = Lsn(records.last().unwrap().0 .0
        + (FRAME_HEADER_BYTES + records.last().unwrap().1.len()) as u64);
    assert_eq!(s.end_lsn, end);

    let mut froms: Vec<Lsn> = vec![Lsn(0), FIRST_LSN, end, Lsn(end.0 + 1)];
    for i in (0..records.len()).step_by(97) {
        froms.push(records[i].0);
        froms.push(Lsn(records[i].0 .0 + 1));
        froms.push(Lsn(records[i].0 .0 - 1));
    }
    for from in froms {
        let mut got = Vec::new();
        let (_, s) = open(Arc::clone(&vfs), DB, opts(SEG), from, &mut |lsn, p| {
            got.push((lsn, p.to_vec()));
            Ok(())
        })
        .unwrap();
        let want: Records = records.iter().filter(|r| r.0 >= from).cloned().collect();
        assert_eq!(got, want, "from {from:?}");
        assert_eq!(s.end_lsn, end, "from {from:?}");
    }
}

#[test]
fn reopen_continues_in_a_fresh_use() {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let (wal, _, _) = open_collect(Arc::clone(&vfs), SEG, Lsn(0));
    let mut all = append_n(&wal, 0, 10, &[100]);
    drop(wal);
    for round in 1..5u64 {
        let (wal, got, s) = open_collect(Arc::clone(&vfs), SEG, Lsn(0));
        assert_eq!(got, all, "round {round}");
        assert_eq!(wal.next_lsn(), s.end_lsn);
        all.extend(append_n(&wal, round * 100, 10, &[100]));
        // Each reopen starts a new use (in a new or free file).
        assert_eq!(
            wal.stats().segments_created + wal.stats().segments_recycled,
            1
        );
    }
}

#[test]
fn large_records_round_trip() {
    // Sizes that take each framing path: shared buffer, own buffer hashed
    // under the lock, own buffer with a precomputed and combined crc.
    let seg = 1 << 20;
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let (wal, _, _) = open_collect(Arc::clone(&vfs), seg, Lsn(0));
    let sizes = [
        100,
        20_000,
        16 * 1024,
        16 * 1024 + 1,
        128 * 1024,
        300_000,
        900_000,
        60,
    ];
    let records = append_n(&wal, 0, 24, &sizes);
    drop(wal);
    let (_, got, _) = open_collect(vfs, seg, Lsn(0));
    assert_eq!(got, records);
}

#[test]
fn apply_error_aborts_open() {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let (wal, _, _) = open_collect(Arc::clone(&vfs), SEG, Lsn(0));
    append_n(&wal, 0, 5, &[10]);
    drop(wal);
    let mut calls = 0;
    let err = open(vfs, DB, opts(SEG), Lsn(0), &mut |_, _| {
        calls += 1;
        if calls == 3 {
            Err(Error::corrupted("bad record", "test"))
        } else {
            Ok(())
        }
    })
    .unwrap_err();
    assert!(err.is_corrupted());
    assert_eq!(calls, 3);
}

#[test]
fn record_size_limits() {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let (wal, _, _) = open_collect(Arc::clone(&vfs), SEG, Lsn(0));
    let max = wal.options().max_record_bytes as usize;
    assert_eq!(max as u64, SEG - 4096 - FRAME_HEADER_BYTES as u64);
    assert!(matches!(
        wal.append(&vec![1; max + 1]),
        Err(Error::ValueTooLarge { .. })
    ));
    let mut records = append_n(&wal, 0, 1, &[100]);
    records.extend(append_n(&wal, 1, 1, &[max]));
    records.extend(append_n(&wal, 2, 1, &[max]));
    records.extend(append_n(&wal, 3, 1, &[8]));
    // Empty payloads are records too.
    let (lsn, end) = wal.append(b"").unwrap();
    assert_eq!(end.0 - lsn.0, FRAME_HEADER_BYTES as u64);
    wal.sync().unwrap();
    records.push((lsn, Vec::new()));
    drop(wal);
    let (_, got, _) = open_collect(vfs, SEG, Lsn(0));
    assert_eq!(got, records);

    let bad = [
        WalOptions::with_segment_bytes(4096),
        WalOptions::with_segment_bytes(10_000),
        WalOptions {
            max_record_bytes: SEG,
            ..WalOptions::with_segment_bytes(SEG)
        },
    ];
    for o in bad {
        let r = open(Arc::new(MemVfs::new()), DB, o, Lsn(0), &mut |_, _| Ok(()));
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{o:?}");
    }
}

#[test]
fn waiting_past_the_end_is_an_error_not_a_hang() {
    let (wal, _, _) = open_collect(Arc::new(MemVfs::new()), SEG, Lsn(0));
    let (_, end) = wal.append(b"x").unwrap();
    assert!(matches!(
        wal.wait_durable(Lsn(end.0 + 1)),
        Err(Error::InvalidArgument(_))
    ));
    wal.wait_written(end).unwrap();
    assert!(wal.has_unsynced());
    wal.wait_durable(end).unwrap();
    assert!(!wal.has_unsynced());
    assert_eq!(wal.synced_lsn(), end);
}

// ---------------------------------------------------------------- tails

/// A synced log on a `SimVfs` spanning several segments.
fn sim_log(count: u64) -> (SimVfs, Records) {
    let sim = SimVfs::new();
    let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    let records = append_n(&wal, 0, count, &[100, 37, 700, 260]);
    assert!(wal.stats().segments_created >= 3);
    (sim, records)
}

fn end_of(r: &(Lsn, Vec<u8>)) -> Lsn {
    Lsn(r.0 .0 + (FRAME_HEADER_BYTES + r.1.len()) as u64)
}

/// A segment file is full length (synced) before its first frame goes in,
/// so one cut short after frames of its use was damaged, not torn by a
/// crash: the open refuses it, and a salvage opens the prefix and reports
/// the damage. A file cut before any frame of its use (a crash while it
/// was being zero-filled) ends the log there.
#[test]
fn truncated_file() {
    let mut refused = 0;
    for cut_back in [1u64, 10, 24, 25, 500, 1500] {
        let (sim, records) = sim_log(100);
        let end = end_of(records.last().unwrap());
        let (name, off) = locate(&sim, Lsn(end.0 - 1));
        let cut_lsn = Lsn(end.0 - cut_back);
        let cut_off = off + 1 - cut_back as usize;
        edit_file(&sim, &name, |b| b.truncate(cut_off));
        let expected: Records = records
            .iter()
            .filter(|r| end_of(r) <= cut_lsn)
            .cloned()
            .collect();
        assert!(expected.len() < records.len());
        let ctx = format!("cut back {cut_back}");
        let frames_before_cut = expected.iter().any(|r| locate(&sim, r.0).0 == name);
        if !frames_before_cut {
            let (_, got, s) = open_collect(sim_arc(&sim), SEG, Lsn(0));
            assert_eq!(got, expected, "{ctx}");
            assert_eq!(s.stop, StopReason::FileEnd, "{ctx}");
            check_reopen_cycle(sim_arc(&sim), SEG, &expected, &ctx);
            continue;
        }
        let err = open(sim_arc(&sim), DB, opts(SEG), Lsn(0), &mut |_, _| Ok(()))
            .err()
            .unwrap_or_else(|| panic!("{ctx}: the cut went unnoticed"));
        assert!(err.is_corrupted(), "{ctx}: {err}");
        assert!(err.to_string().contains("cut short"), "{ctx}: {err}");
        refused += 1;
        let mut got = Vec::new();
        let (wal, s) = open(sim_arc(&sim), DB, salvage_opts(), Lsn(0), &mut |lsn, p| {
            got.push((lsn, p.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(got, expected, "{ctx}");
        assert_eq!(s.stop, StopReason::FileCut, "{ctx}");
        let d = s.damage.clone().expect("the cut is reported");
        assert_eq!(d.stop_lsn, end_of(expected.last().unwrap()), "{ctx}");
        assert!(d.to_string().contains("cut short"), "{ctx}: {d}");
        // The salvaged log continues past every damaged use, and a later
        // open from there neither refuses nor resurrects anything.
        assert!(wal.skip_to(d.log_limit));
        let new = append_n(&wal, 5000, 30, &[90, 400]);
        drop(wal);
        let (_, again, s2) = open_collect(sim_arc(&sim), SEG, d.log_limit);
        assert_eq!(again, new, "{ctx}");
        assert_eq!(s2.damage, None, "{ctx}");
    }
    assert!(
        refused >= 4,
        "only {refused} cuts fell after frames of their use"
    );
}

/// A newest use's file cut into its header block after its records were
/// synced: its predecessor's link (rule O15) proves the file had its full
/// length, so this is a cut, not a crash during its zero fill. (Before
/// O15 the whole use was dropped without a word.) A salvage keeps the
/// records before the use.
#[test]
fn truncated_header_of_a_linked_use_is_a_cut() {
    let (sim, records) = sim_log(100);
    let last = records.last().unwrap();
    let (name, _) = locate(&sim, last.0);
    let start = SegmentHeader::decode(&sim.file_bytes(&name).unwrap()[..4096])
        .unwrap()
        .start_lsn;
    edit_file(&sim, &name, |b| b.truncate(100));
    let err = open(sim_arc(&sim), DB, opts(SEG), Lsn(0), &mut |_, _| Ok(()))
        .expect_err("a cut linked use");
    assert!(
        err.is_corrupted() && err.to_string().contains("cut short"),
        "{err}"
    );
    let mut got = Vec::new();
    let (_, s) = open(sim_arc(&sim), DB, salvage_opts(), Lsn(0), &mut |lsn, p| {
        got.push((lsn, p.to_vec()));
        Ok(())
    })
    .expect("salvage");
    let expected: Records = records.iter().filter(|r| r.0 < start).cloned().collect();
    assert_eq!(got, expected);
    assert_eq!(s.damage.map(|d| d.stop), Some(StopReason::FileCut));
}

#[test]
fn zeroed_region() {
    let (sim, records) = sim_log(100);
    let k = 90;
    let (name, off) = locate(&sim, records[k].0);
    edit_file(&sim, &name, |b| b[off..off + 300].fill(0));
    let (_, got, s) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    assert_eq!(got, records[..k].to_vec());
    assert_eq!(s.stop, StopReason::ZeroedSpace);
    assert_eq!(s.end_lsn, records[k].0);
    assert_eq!(
        s.stopped_at,
        Some(crate::error::Location::File {
            name: name.clone(),
            offset: off as u64
        })
    );
    check_reopen_cycle(sim_arc(&sim), SEG, &records[..k].to_vec(), "zeroed");
}

#[test]
fn flipped_byte_in_the_middle_stops_replay_there() {
    let (sim, records) = sim_log(200);
    // A record in a middle segment: later segments hold valid records that
    // must never be returned.
    let k = 80;
    let (name, off) = locate(&sim, records[k].0);
    let (last_name, _) = locate(&sim, records.last().unwrap().0);
    assert_ne!(
        name, last_name,
        "record {k} must not be in the last segment"
    );
    for at in [off + 30, off + 2, off + 12, off + 20] {
        let sim = sim.crash_with(0, CrashPolicy::KeepAll);
        edit_file(&sim, &name, |b| b[at] ^= 0x10);
        let (_, got, s) = open_collect(sim_arc(&sim), SEG, Lsn(0));
        assert_eq!(got, records[..k].to_vec(), "flip at {at}");
        assert_eq!(s.end_lsn, records[k].0);
        assert!(s.uses_abandoned >= 1, "{s:?}");
        check_reopen_cycle(sim_arc(&sim), SEG, &records[..k].to_vec(), "flipped byte");
    }
}

#[test]
fn lsn_discontinuity_stops_replay() {
    let (sim, records) = sim_log(100);
    let k = 60;
    let (name, off) = locate(&sim, records[k].0);
    edit_file(&sim, &name, |b| {
        let salt = u64::from_le_bytes(b[off + 16..off + 24].try_into().unwrap());
        // A well-formed frame with a valid crc and salt, but the wrong LSN.
        let place = FramePlace {
            lsn: Lsn(records[k].0 .0 + 24),
            salt,
            synced: Lsn(0),
        };
        let forged = encode_frame(place, &records[k].1);
        b[off..off + forged.len()].copy_from_slice(&forged);
    });
    let (_, got, s) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    assert_eq!(got, records[..k].to_vec());
    assert_eq!(s.stop, StopReason::LsnMismatch);
    check_reopen_cycle(sim_arc(&sim), SEG, &records[..k].to_vec(), "lsn gap");
}

/// Builds a log where slot 0 was recycled: returns the vfs, the release
/// point, the records at or after it, and the old salt of slot 0.
fn recycled_log() -> (SimVfs, Lsn, Records, u64) {
    let sim = SimVfs::new();
    let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    // 488-byte frames: 25 per 12 KiB use, aligned at the same offsets in
    // every use.
    let size = 488 - FRAME_HEADER_BYTES;
    let first_use = append_n(&wal, 0, 25, &[size]);
    let old_salt = u64::from_le_bytes(
        sim.file_bytes("db-wal.0").unwrap()[24..32]
            .try_into()
            .unwrap(),
    );
    let rest = append_n(&wal, 25, 50, &[size]);
    let release = rest[0].0;
    assert_eq!(
        release,
        end_of(first_use.last().unwrap()),
        "use 2 starts here"
    );
    wal.release_before(release);
    let more = append_n(&wal, 75, 5, &[size]);
    assert_eq!(wal.stats().segments_recycled, 1);
    assert_eq!(wal.segment_files(), 3);
    let mut kept = rest;
    kept.extend(more);
    (sim, release, kept, old_salt)
}

#[test]
fn stale_records_of_a_recycled_segment_are_rejected() {
    let (sim, release, kept, _) = recycled_log();
    let (_, got, s) = open_collect(sim_arc(&sim), SEG, release);
    assert_eq!(got, kept);
    // The frame after the new use's records is an old, intact one.
    assert_eq!(s.stop, StopReason::StaleSalt);
    check_reopen_cycle(sim_arc(&sim), SEG, &kept, "recycled");
}

#[test]
fn stale_salt_alone_rejects_a_frame() {
    let (sim, release, kept, old_salt) = recycled_log();
    let end = end_of(kept.last().unwrap());
    let (name, off) = locate(&sim, end);
    assert_eq!(name, "db-wal.0");
    // An old-use frame made to look continuous: right LSN, valid crc, but
    // the previous use's salt.
    edit_file(&sim, &name, |b| {
        let place = FramePlace {
            lsn: end,
            salt: old_salt,
            synced: Lsn(0),
        };
        let forged = encode_frame(place, &payload(999, 100));
        b[off..off + forged.len()].copy_from_slice(&forged);
    });
    let (_, got, s) = open_collect(sim_arc(&sim), SEG, release);
    assert_eq!(got, kept);
    assert_eq!(s.stop, StopReason::StaleSalt);
}

#[test]
fn torn_tail_after_crash() {
    for seed in 0..200u64 {
        let sim = SimVfs::new();
        let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
        let synced = append_n(&wal, 0, 20, &[300, 50]);
        let mut all = synced.clone();
        for i in 0..(seed % 40) {
            let p = payload(100 + i, 30 + (i as usize * 97) % 700);
            let (lsn, end) = wal.append(&p).unwrap();
            wal.wait_written(end).unwrap();
            all.push((lsn, p));
        }
        let crashed = sim.crash(seed);
        drop(wal);
        let (_, got, _) = open_collect(sim_arc(&crashed), SEG, Lsn(0));
        assert!(
            got.len() >= synced.len(),
            "seed {seed}: lost synced records"
        );
        assert_eq!(got, all[..got.len()].to_vec(), "seed {seed}: not a prefix");
        check_reopen_cycle(sim_arc(&crashed), SEG, &got, &format!("seed {seed}"));
    }
}

// ---------------------------------------------------------------- crashes

/// Several threads append with `wait_durable`; a crash image is taken at a
/// seed-chosen moment. Returns (all records in LSN order, acknowledged end
/// before the crash, the crash image).
fn concurrent_crash_run(seed: u64, threads: u64, per_thread: u64) -> (Records, Lsn, SimVfs) {
    let sim = SimVfs::new();
    let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    let wal = Arc::new(wal);
    let log = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(Mutex::new(Lsn(0)));
    let appended = Arc::new(AtomicUsize::new(0));
    let crash_after = (seed.wrapping_mul(2_654_435_761) % (threads * per_thread + 10)) as usize;
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (wal, log, acked, appended) = (
                Arc::clone(&wal),
                Arc::clone(&log),
                Arc::clone(&acked),
                Arc::clone(&appended),
            );
            thread::spawn(move || {
                for i in 0..per_thread {
                    let p = payload(t * 1000 + i, 20 + ((seed + t * 7 + i * 13) % 400) as usize);
                    let (lsn, end) = wal.append(&p).unwrap();
                    log.lock().push((lsn, p));
                    appended.fetch_add(1, Ordering::SeqCst);
                    // Mixed: mostly durable waits, some written-only.
                    if (i + t) % 4 == 3 {
                        wal.wait_written(end).unwrap();
                    } else {
                        wal.wait_durable(end).unwrap();
                        let mut a = acked.lock();
                        *a = (*a).max(end);
                    }
                }
            })
        })
        .collect();
    let crash = {
        let start = Instant::now();
        while appended.load(Ordering::SeqCst) < crash_after
            && start.elapsed() < Duration::from_secs(10)
            && workers.iter().any(|w| !w.is_finished())
        {
            thread::yield_now();
        }
        let acked_before = *acked.lock();
        (acked_before, sim.crash(seed))
    };
    for w in workers {
        w.join().unwrap();
    }
    let mut all = log.lock().clone();
    all.sort();
    (all, crash.0, crash.1)
}

#[test]
fn crash_with_concurrent_durable_commits() {
    for seed in 0..300u64 {
        let (all, acked, image) = concurrent_crash_run(seed, 4, 25);
        let (_, got, s) = open_collect(sim_arc(&image), SEG, Lsn(0));
        assert_eq!(got, all[..got.len()].to_vec(), "seed {seed}: not a prefix");
        assert!(
            s.end_lsn >= acked,
            "seed {seed}: acknowledged up to {acked:?} but replay ended at {:?}",
            s.end_lsn
        );
        if seed % 10 == 0 {
            check_reopen_cycle(sim_arc(&image), SEG, &got, &format!("seed {seed}"));
        }
    }
}

#[test]
fn crash_while_recycling() {
    for seed in 0..150u64 {
        let sim = SimVfs::new();
        let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
        let mut all: Records = Vec::new();
        let mut acked = Lsn(0);
        let mut released = Lsn(0);
        let steps = 100 + seed % 200;
        for i in 0..steps {
            let p = payload(i, 50 + ((seed * 31 + i * 17) % 600) as usize);
            let (lsn, end) = wal.append(&p).unwrap();
            all.push((lsn, p));
            if i % 3 == 0 {
                wal.wait_durable(end).unwrap();
                acked = end;
                // "Checkpoint" everything 30 records back.
                if all.len() > 30 {
                    released = all[all.len() - 30].0;
                    wal.release_before(released);
                }
            } else if i % 3 == 1 {
                wal.wait_written(end).unwrap();
            }
        }
        let image = sim.crash(seed);
        assert!(
            wal.segment_files() <= 6,
            "seed {seed}: {} files",
            wal.segment_files()
        );
        drop(wal);
        let (_, got, _) = open_collect(sim_arc(&image), SEG, released);
        let want: Records = all.iter().filter(|r| r.0 >= released).cloned().collect();
        assert_eq!(got, want[..got.len()].to_vec(), "seed {seed}: not a prefix");
        let got_end = got.last().map_or(released, end_of);
        assert!(got_end >= acked, "seed {seed}: lost acknowledged records");
    }
}

// ---------------------------------------------------------------- poisoning

#[derive(Debug, Default)]
struct Outcome {
    all: Records,
    acked: Lsn,
    first_error_seen: bool,
}

/// A small single-threaded workload; checks poisoning rules as it goes.
fn poison_workload(sim: &SimVfs, ctx: &str) -> Outcome {
    let mut out = Outcome::default();
    let wal = match open(sim_arc(sim), DB, opts(SEG), Lsn(0), &mut |_, _| Ok(())) {
        Ok((wal, _)) => wal,
        Err(e) => {
            assert!(matches!(e, Error::Io(_)), "{ctx}: open failed with {e:?}");
            out.first_error_seen = true;
            return out;
        }
    };
    let check = |r: Result<()>, out: &mut Outcome, wal: &Wal| match r {
        Ok(()) => assert!(!out.first_error_seen, "{ctx}: success after an error"),
        Err(e) => {
            if out.first_error_seen {
                assert!(matches!(e, Error::Poisoned(_)), "{ctx}: later error {e:?}");
            } else {
                assert!(matches!(e, Error::Io(_)), "{ctx}: first error {e:?}");
                out.first_error_seen = true;
            }
            assert!(wal.is_poisoned(), "{ctx}");
        }
    };
    for i in 0..40u64 {
        let p = payload(i, 100 + (i as usize * 211) % 1500);
        match wal.append(&p) {
            Ok((lsn, end)) => {
                out.all.push((lsn, p));
                let r = match i % 3 {
                    0 => wal.wait_durable(end),
                    1 => wal.wait_written(end),
                    _ => Ok(()),
                };
                if r.is_ok() && i % 3 == 0 {
                    out.acked = end;
                }
                check(r, &mut out, &wal);
            }
            Err(e) => {
                assert!(matches!(e, Error::Poisoned(_)), "{ctx}: append error {e:?}");
                assert!(out.first_error_seen, "{ctx}");
            }
        }
    }
    let r = wal.sync();
    check(r, &mut out, &wal);
    out
}

#[test]
fn io_errors_poison_and_reopen_shows_a_prefix() {
    let clean = SimVfs::new();
    poison_workload(&clean, "no fault");
    let total_ops = clean.op_count();
    assert!(total_ops > 20);
    for fault in [Fault::Eio, Fault::NoSpace, Fault::ShortWrite] {
        for n in 1..=total_ops + 1 {
            let ctx = format!("{fault:?} at op {n}");
            let sim = SimVfs::new();
            sim.fail_op(n, fault);
            let out = poison_workload(&sim, &ctx);
            sim.clear_faults();
            for (image, what) in [
                (sim.crash_with(n, CrashPolicy::KeepAll), "process crash"),
                (sim.crash(n), "power loss"),
            ] {
                let (_, got, s) = open_collect(sim_arc(&image), SEG, Lsn(0));
                assert_eq!(
                    got,
                    out.all[..got.len()].to_vec(),
                    "{ctx} {what}: not a prefix"
                );
                assert!(
                    s.end_lsn >= out.acked,
                    "{ctx} {what}: lost acknowledged records"
                );
            }
        }
    }
}

#[test]
fn dead_disk_poisons_every_thread_without_hanging() {
    for n in [5u64, 20, 60, 150] {
        with_watchdog(Duration::from_secs(60), move || {
            let sim = SimVfs::new();
            let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
            let wal = Arc::new(wal);
            sim.fail_from(n, Fault::Eio);
            let io_errors = Arc::new(AtomicUsize::new(0));
            let workers: Vec<_> = (0..8u64)
                .map(|t| {
                    let (wal, io_errors) = (Arc::clone(&wal), Arc::clone(&io_errors));
                    thread::spawn(move || {
                        let mut failed = false;
                        for i in 0..50 {
                            let r = wal
                                .append(&payload(t * 100 + i, 200))
                                .and_then(|(_, end)| wal.wait_durable(end));
                            match r {
                                Ok(()) => assert!(!failed, "success after failure"),
                                Err(Error::Io(_)) => {
                                    io_errors.fetch_add(1, Ordering::SeqCst);
                                    failed = true;
                                }
                                Err(Error::Poisoned(_)) => failed = true,
                                Err(e) => panic!("unexpected {e:?}"),
                            }
                        }
                        failed
                    })
                })
                .collect();
            let saw_failure: Vec<bool> = workers.into_iter().map(|w| w.join().unwrap()).collect();
            assert!(
                saw_failure.iter().any(|&f| f),
                "n {n}: nobody saw the dead disk"
            );
            assert!(wal.is_poisoned());
            assert_eq!(
                io_errors.load(Ordering::SeqCst),
                1,
                "only the leader sees Io"
            );
            assert!(matches!(wal.append(b"late"), Err(Error::Poisoned(_))));
            assert!(matches!(wal.sync(), Err(Error::Poisoned(_))));
        });
    }
}

// ---------------------------------------------------------------- group commit

/// A hook that makes `sync_data` take a while, like a real disk.
#[derive(Debug)]
struct SlowSync(Duration);

impl Hook for SlowSync {
    fn before(&self, _name: &str, op: FileOp) -> io::Result<()> {
        if op == FileOp::Sync {
            thread::sleep(self.0);
        }
        Ok(())
    }
}

#[test]
fn group_commit_stress() {
    const THREADS: u64 = 16;
    const PER_THREAD: u64 = 2000;
    const REPEATS: u64 = 3;
    with_watchdog(Duration::from_secs(120), || {
        let vfs: Arc<dyn Vfs> = Arc::new(HookVfs::new(
            Arc::new(MemVfs::new()),
            Arc::new(SlowSync(Duration::from_micros(100))),
        ));
        let mut expected_total = 0u64;
        for rep in 0..REPEATS {
            let (wal, before, _) = open_collect(Arc::clone(&vfs), 1 << 20, Lsn(0));
            assert_eq!(before.len() as u64, expected_total);
            let wal = Arc::new(wal);
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let wal = Arc::clone(&wal);
                    thread::spawn(move || {
                        for i in 0..PER_THREAD {
                            let tag = (rep << 40) | (t << 20) | i;
                            let (_, end) = wal.append(&payload(tag, 50)).unwrap();
                            // A quarter of the threads use written-only waits.
                            if t % 4 == 3 {
                                wal.wait_written(end).unwrap();
                            } else {
                                wal.wait_durable(end).unwrap();
                                assert!(wal.synced_lsn() >= end);
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            wal.sync().unwrap();
            let stats = wal.stats();
            let commits = THREADS * PER_THREAD;
            assert_eq!(stats.records, commits);
            assert!(
                stats.syncs * 3 < commits,
                "group commit did not share syncs: {stats:?}"
            );
            expected_total += commits;
            drop(wal);
            // Every record replays, each thread's in its order.
            let (_, got, _) = open_collect(Arc::clone(&vfs), 1 << 20, Lsn(0));
            assert_eq!(got.len() as u64, expected_total);
            let mut next = std::collections::HashMap::new();
            let mut seen = HashSet::new();
            for (_, p) in &got {
                let tag = u64::from_le_bytes(p[..8].try_into().unwrap());
                assert!(seen.insert(tag), "record {tag:#x} twice");
                let key = tag >> 20;
                let i = tag & 0xF_FFFF;
                let want = next.entry(key).or_insert(0u64);
                assert_eq!(i, *want, "thread order");
                *want += 1;
            }
        }
    });
}

// ---------------------------------------------------------------- recycling

#[test]
fn recycling_keeps_the_file_count_bounded() {
    let sim = SimVfs::new();
    let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    let mut all: Records = Vec::new();
    let mut released = Lsn(0);
    let mut max_files = 0;
    for i in 0..5000u64 {
        let p = payload(i, 150 + (i as usize * 37) % 200);
        let (lsn, end) = wal.append(&p).unwrap();
        all.push((lsn, p));
        if i % 10 == 0 {
            wal.wait_durable(end).unwrap();
        }
        if i >= 60 && i % 20 == 0 {
            released = all[i as usize - 60].0;
            wal.release_before(released);
        }
        max_files = max_files.max(wal_files(&sim.file_names()));
    }
    wal.sync().unwrap();
    let stats = wal.stats();
    // ~1.3 MB of records through 12 KiB uses: ~100 uses in a handful of files.
    assert!(stats.segments_recycled > 80, "{stats:?}");
    assert!(max_files <= 5, "{max_files} segment files");
    assert_eq!(wal.segment_files(), wal_files(&sim.file_names()));
    drop(wal);
    let want: Records = all.iter().filter(|r| r.0 >= released).cloned().collect();
    let (_, got, _) = open_collect(sim_arc(&sim), SEG, released);
    assert_eq!(got, want);
    // Files are preallocated to the segment size once and then overwritten.
    for name in sim.file_names() {
        assert_eq!(sim.file_bytes(&name).unwrap().len() as u64, SEG, "{name}");
    }
}

#[test]
fn abandoned_and_mis_sized_segments_are_reused() {
    let (sim, records) = sim_log(200);
    // Damage a middle segment: every later use is abandoned.
    let k = 80;
    let (name, off) = locate(&sim, records[k].0);
    edit_file(&sim, &name, |b| b[off + 30] ^= 1);
    // A stray segment file of the wrong size, with no valid header.
    // (Its first bytes are zeros: anything else not a segment's is
    // refused as another program's file, and kept.)
    let mut stray = vec![7u8; 5000];
    stray[..8].fill(0);
    sim.set_file_bytes("db-wal.20", stray);
    let files_before = wal_files(&sim.file_names());
    let (wal, got, s) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    assert_eq!(got, records[..k].to_vec());
    assert!(s.uses_abandoned >= 1);
    let new = append_n(&wal, 5000, 100, &[300]);
    let stats = wal.stats();
    assert_eq!(stats.segments_created, 0, "{stats:?}");
    assert!(stats.segments_recycled >= 2);
    assert_eq!(wal_files(&sim.file_names()), files_before);
    drop(wal);
    let mut all = records[..k].to_vec();
    all.extend(new);
    check_reopen_cycle(sim_arc(&sim), SEG, &all, "abandoned reuse");
    assert_eq!(sim.file_bytes("db-wal.20").unwrap().len() as u64, SEG);
}

// ---------------------------------------------------------------- flusher

#[test]
fn flusher_syncs_eventual_commits_and_stops_on_drop() {
    let (wal, _, _) = open_collect(Arc::new(MemVfs::new()), SEG, Lsn(0));
    let wal = Arc::new(wal);
    let handle = wal
        .start_flusher(Duration::from_millis(2), false, Box::new(|_| {}))
        .unwrap();
    let (_, end) = wal.append(b"eventual").unwrap();
    wal.wait_written(end).unwrap();
    let start = Instant::now();
    while wal.synced_lsn() < end {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "flusher never synced"
        );
        thread::sleep(Duration::from_millis(1));
    }
    let t = Instant::now();
    drop(handle);
    assert!(t.elapsed() < Duration::from_secs(5));

    // The flusher does not keep the WAL alive, and exits once it is gone.
    let handle = wal
        .start_flusher(Duration::from_millis(1), false, Box::new(|_| {}))
        .unwrap();
    let weak = Arc::downgrade(&wal);
    drop(wal);
    thread::sleep(Duration::from_millis(20));
    assert!(weak.upgrade().is_none());
    drop(handle);
}

#[test]
fn wal_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Wal>();
    check::<FlusherHandle>();
    let _unused = AtomicBool::new(false);
}

use parking_lot::Mutex;

// ------------------------------------------------- gaps in the log (issue 9)

/// The header block of a segment file.
fn header_block(sim: &SimVfs, name: &str) -> Vec<u8> {
    sim.file_bytes(name).unwrap()[..HEADER_BLOCK_BYTES as usize].to_vec()
}

#[test]
fn lost_header_of_a_recycled_segment_ends_replay_instead_of_skipping_to_a_later_use() {
    let sim = SimVfs::new();
    let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    let size = 488 - FRAME_HEADER_BYTES;
    let _use1 = append_n(&wal, 0, 25, &[size]);
    let use1_header = header_block(&sim, "db-wal.0");
    let uses23 = append_n(&wal, 25, 50, &[size]);
    let release = uses23[0].0;
    wal.release_before(release);
    // Use 4 recycles slot 0; use 5 needs a new file (nothing else is free).
    let uses45 = append_n(&wal, 75, 50, &[size]);
    assert_eq!(wal.stats().segments_recycled, 1);
    assert_eq!(wal.segment_files(), 4);
    drop(wal);
    // Power cut: the recycled header of use 4 never reached the disk (the
    // old header of use 1 is back), while use 5's header survived.
    edit_file(&sim, "db-wal.0", |b| {
        b[..HEADER_BLOCK_BYTES as usize].copy_from_slice(&use1_header)
    });
    // Rule O15 makes this state impossible after a crash (use 3's file
    // names use 4, whose header was durable before the link): the open
    // refuses it as a missing use and changes nothing.
    let before = all_files(&sim);
    let err = open(sim_arc(&sim), DB, opts(SEG), release, &mut |_, _| Ok(()))
        .expect_err("a use named by a link and gone is damage");
    assert!(
        err.is_corrupted() && err.to_string().contains("use missing"),
        "{err}"
    );
    assert!(before == all_files(&sim), "a refused open changed the WAL");
    // A salvage replays everything up to the lost use, and nothing after
    // it: a prefix, never a skip to a later use.
    let mut got = Vec::new();
    let (_, s) = open(sim_arc(&sim), DB, salvage_opts(), release, &mut |lsn, p| {
        got.push((lsn, p.to_vec()));
        Ok(())
    })
    .expect("salvage");
    assert_eq!(got, uses23, "replay must stop at the gap");
    assert!(got.iter().all(|r| uses45.iter().all(|n| n.0 != r.0)));
    assert_eq!(s.uses_replayed, 2);
    assert!(s.uses_abandoned >= 1);
    assert_eq!(s.damage.map(|d| d.stop), Some(StopReason::UseMissing));
}

/// Rule O15: a log of three uses, synced, with the newest use's file
/// deleted, emptied, zeroed or replaced by a copy of an older use's file
/// afterwards. Before, each opened the prefix without a word (the commits
/// of the newest use silently gone); now each is refused as a missing use
/// and changes nothing, and a salvage opens the prefix.
#[test]
fn a_newest_segment_deleted_zeroed_or_replaced_is_refused() {
    let size = 488 - FRAME_HEADER_BYTES;
    type Damage = fn(&SimVfs, &str);
    let setups: [(&str, Damage); 4] = [
        ("deleted", |sim, newest| sim.remove(newest).unwrap()),
        ("emptied", |sim, newest| {
            edit_file(sim, newest, |b| b.truncate(100))
        }),
        ("zeroed", |sim, newest| {
            edit_file(sim, newest, |b| b.fill(0))
        }),
        ("replaced by an older use's file", |sim, newest| {
            // Moved over it (a copy beside the original is refused as two
            // names for one use).
            let old = sim.file_bytes("db-wal.0").unwrap();
            edit_file(sim, newest, |b| *b = old.clone());
            sim.remove("db-wal.0").unwrap();
        }),
    ];
    for (what, damage) in setups {
        let sim = SimVfs::new();
        let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
        let records = append_n(&wal, 0, 60, &[size]);
        wal.sync().unwrap();
        assert_eq!(wal.segment_files(), 3, "{what}: three uses");
        drop(wal);
        let newest = "db-wal.2";
        let first_lost = records
            .iter()
            .position(|r| locate(&sim, r.0).0 == newest)
            .unwrap();
        damage(&sim, newest);
        let before = all_files(&sim);
        let err = open(sim_arc(&sim), DB, opts(SEG), Lsn(0), &mut |_, _| Ok(())).expect_err(what);
        assert!(err.is_corrupted(), "{what}: {err}");
        assert!(
            err.to_string().contains("db-wal."),
            "{what}: names a WAL file: {err}"
        );
        assert!(
            before == all_files(&sim),
            "{what}: a refused open changed the WAL"
        );
        let mut got = Vec::new();
        let (_, s) = open(sim_arc(&sim), DB, salvage_opts(), Lsn(0), &mut |lsn, p| {
            got.push((lsn, p.to_vec()));
            Ok(())
        })
        .expect(what);
        assert!(got == records[..first_lost], "{what}: not the prefix");
        let d = s.damage.expect("salvage reports the damage");
        assert_eq!(d.stop_lsn, records[first_lost].0, "{what}");
        // A file cut to its header still holds the use: a cut (O14 and
        // O15), not a missing use.
        let reason = match what {
            "emptied" => StopReason::FileCut,
            _ => StopReason::UseMissing,
        };
        assert_eq!(d.stop, reason, "{what}");
    }
}

/// The links never make a crash look like damage (rule O15's order: the
/// new use's header durable, then the link, then the new use's frames):
/// the disk dies at every storage operation of a log switching through
/// new and recycled files, then a power cut keeps a random part of what
/// was not synced. The reopen must report no damage and keep every
/// record acknowledged durable.
#[test]
fn a_power_cut_at_any_switch_step_is_never_taken_for_a_missing_use() {
    let size = 488 - FRAME_HEADER_BYTES;
    for n in 1..260u64 {
        let sim = SimVfs::new();
        let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
        sim.fail_from(n, Fault::Eio);
        let (mut acked, mut from) = (Lsn(0), Lsn(0));
        for i in 0..80u64 {
            let Ok((lsn, end)) = wal.append(&payload(i, size)) else {
                break;
            };
            if i % 2 == 1 {
                if wal.wait_durable(end).is_err() {
                    break;
                }
                acked = end;
                if i == 31 {
                    // A checkpoint at this durable record: the uses
                    // below it are recycled by later switches.
                    from = lsn;
                    wal.release_before(from);
                }
            }
        }
        let image = sim.crash(n);
        drop(wal);
        let (_, got, s) = open_collect(sim_arc(&image), SEG, from);
        assert_eq!(s.damage, None, "n {n}");
        let got_end = got.last().map_or(from, end_of);
        assert!(got_end >= acked, "n {n}: lost acknowledged records");
    }
}

#[test]
fn a_log_that_starts_after_the_replay_start_is_refused() {
    let (sim, release, _, _) = recycled_log();
    // The data file would ask for records from the very first use, which
    // was recycled: those records are gone.
    let files_before: Vec<Vec<u8>> = sim
        .file_names()
        .iter()
        .map(|n| sim.file_bytes(n).unwrap())
        .collect();
    let err = open(sim_arc(&sim), DB, opts(SEG), FIRST_LSN, &mut |_, _| Ok(()))
        .expect_err("a gap before the first use must not be skipped");
    assert!(err.is_corrupted(), "{err}");
    assert!(err.to_string().contains("missing"), "{err}");
    let files_after: Vec<Vec<u8>> = sim
        .file_names()
        .iter()
        .map(|n| sim.file_bytes(n).unwrap())
        .collect();
    assert!(
        files_before == files_after,
        "a refused open changed the WAL"
    );
    // From the release point the same log replays fine.
    let (_, got, _) = open_collect(sim_arc(&sim), SEG, release);
    assert!(!got.is_empty());
}

// ------------------------------------- damage in the middle of the log

/// A log on a `SimVfs` where every record was acknowledged durable before
/// the next was appended (so each frame's synced mark vouches for the one
/// before it), spanning several segments.
fn durable_log(count: u64) -> (SimVfs, Records) {
    let sim = SimVfs::new();
    let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    let mut records = Vec::new();
    for i in 0..count {
        let p = payload(i, [100, 37, 700, 260][i as usize % 4]);
        let (lsn, end) = wal.append(&p).unwrap();
        wal.wait_durable(end).unwrap();
        records.push((lsn, p));
    }
    assert!(wal.stats().segments_created >= 3);
    (sim, records)
}

fn all_files(sim: &SimVfs) -> Vec<(String, Vec<u8>)> {
    let mut names = sim.file_names();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let b = sim.file_bytes(&n).unwrap();
            (n, b)
        })
        .collect()
}

fn salvage_opts() -> WalOptions {
    WalOptions {
        salvage: true,
        ..opts(SEG)
    }
}

/// The damage error, or a panic naming what the open returned instead.
fn expect_damage(sim: &SimVfs, ctx: &str) -> Error {
    match open(sim_arc(sim), DB, opts(SEG), Lsn(0), &mut |_, _| Ok(())) {
        Ok((_, s)) => panic!("{ctx}: damage went unnoticed, replay stopped with {s:?}"),
        Err(e) => {
            assert!(e.is_corrupted(), "{ctx}: {e}");
            assert!(e.to_string().contains("durable up to"), "{ctx}: {e}");
            e
        }
    }
}

#[test]
fn a_damaged_durable_frame_followed_by_later_commits_is_corruption() {
    let (sim, records) = durable_log(200);
    // Records in the first, a middle and the last segment; every field of
    // the frame header and the payload.
    for k in [3usize, 80, 150, 198] {
        let (name, off) = locate(&sim, records[k].0);
        for (what, at) in [
            ("crc", off),
            ("len", off + 5),
            ("lsn", off + 9),
            ("salt", off + 17),
            ("synced mark", off + 25),
            ("payload", off + FRAME_HEADER_BYTES + 3),
        ] {
            let ctx = format!("record {k}, {what} flipped");
            let img = sim.crash_with(0, CrashPolicy::KeepAll);
            edit_file(&img, &name, |b| b[at] ^= 0x04);
            let before = all_files(&img);
            let err = expect_damage(&img, &ctx);
            assert_eq!(
                all_files(&img),
                before,
                "{ctx}: a refused open changed the WAL"
            );
            let stop_lsn = records[k].0 .0;
            assert!(
                err.to_string().contains(&format!("LSN {stop_lsn} ")),
                "{ctx}: {err}"
            );
        }
    }
}

#[test]
fn damage_hiding_the_next_frame_is_found_by_searching_the_segment() {
    let (sim, records) = durable_log(200);
    // The last segment's first records: a length that points nowhere
    // useful leaves only a search for the salt.
    let last = records.last().unwrap().0;
    let (last_name, _) = locate(&sim, last);
    let k = (0..records.len())
        .find(|&k| locate(&sim, records[k].0).0 == last_name)
        .unwrap()
        + 1;
    assert!(
        k + 3 < records.len(),
        "the last segment holds several records"
    );
    let (name, off) = locate(&sim, records[k].0);
    for bits in [0x0100_0000u32, 0x0000_0100, 0x0000_0001] {
        let img = sim.crash_with(0, CrashPolicy::KeepAll);
        edit_file(&img, &name, |b| {
            let len = u32::from_le_bytes(b[off + 4..off + 8].try_into().unwrap());
            b[off + 4..off + 8].copy_from_slice(&(len ^ bits).to_le_bytes());
        });
        expect_damage(&img, &format!("length xor {bits:#x}"));
    }
    // A damaged salt at the right position is not a stale frame.
    let img = sim.crash_with(0, CrashPolicy::KeepAll);
    edit_file(&img, &name, |b| b[off + 16] ^= 0x80);
    expect_damage(&img, "salt");
}

#[test]
fn damage_to_the_last_durable_frame_reads_as_a_torn_tail() {
    // Nothing written after it can vouch for it: the documented limit.
    let (sim, records) = durable_log(200);
    let k = records.len() - 1;
    let (name, off) = locate(&sim, records[k].0);
    edit_file(&sim, &name, |b| b[off + FRAME_HEADER_BYTES + 1] ^= 0x01);
    let (_, got, s) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    assert_eq!(got, records[..k].to_vec());
    assert_eq!(s.stop, StopReason::ChecksumMismatch);
    assert_eq!(s.damage, None);
}

#[test]
fn damage_before_the_replay_start_is_walked_past_to_the_frame_at_the_start() {
    let (sim, records) = durable_log(200);
    // A damaged record in the last segment, before the replay start: the
    // walk starts at the use's first frame and stops at the damage.
    let (last_name, _) = locate(&sim, records.last().unwrap().0);
    let first_in_last = (0..records.len())
        .find(|&k| locate(&sim, records[k].0).0 == last_name)
        .unwrap();
    let k = first_in_last + 1;
    assert!(k + 4 < records.len());
    let (name, off) = locate(&sim, records[k].0);
    edit_file(&sim, &name, |b| b[off + FRAME_HEADER_BYTES + 1] ^= 0x01);
    // Records from k + 3 on are needed and were durable (rule O1): replay
    // resumes at the whole frame at the start, and the base holds the rest.
    let from = records[k + 3].0;
    let (_, got, s) = open_collect(sim_arc(&sim), SEG, from);
    assert_eq!(got, records[k + 3..].to_vec());
    assert_eq!(
        s.damage_below_start,
        Some((records[k].0, StopReason::ChecksumMismatch))
    );
    assert_eq!(s.end_lsn, end_of(records.last().unwrap()));
    assert_eq!(s.damage, None);
    // A base past every record needs none of them: the log just ends.
    let past = end_of(records.last().unwrap());
    let (_, got, s) = open_collect(sim_arc(&sim), SEG, past);
    assert!(got.is_empty());
    assert_eq!(s.end_lsn, records[k].0);
    assert_eq!(s.damage, None);
    // The log continues after the resumed walk, and reopens the same way.
    let (wal, _, _) = open_collect(sim_arc(&sim), SEG, from);
    let new = append_n(&wal, 9000, 5, &[60, 700]);
    drop(wal);
    let (_, again, _) = open_collect(sim_arc(&sim), SEG, from);
    assert_eq!(again, [&records[k + 3..], &new[..]].concat());
}

#[test]
fn salvage_opens_the_prefix_and_the_salvaged_log_stays_consistent() {
    let (sim, records) = durable_log(200);
    let k = 80;
    let (name, off) = locate(&sim, records[k].0);
    edit_file(&sim, &name, |b| b[off + FRAME_HEADER_BYTES + 1] ^= 0x01);
    expect_damage(&sim, "before salvage");
    let mut got = Vec::new();
    let (wal, s) = open(sim_arc(&sim), DB, salvage_opts(), Lsn(0), &mut |lsn, p| {
        got.push((lsn, p.to_vec()));
        Ok(())
    })
    .unwrap();
    assert_eq!(got, records[..k].to_vec());
    let d = s.damage.clone().expect("the damage is reported");
    assert_eq!(d.stop_lsn, records[k].0);
    assert!(d.synced > d.stop_lsn && d.witness_lsn > d.stop_lsn);
    assert!(d.log_limit > end_of(records.last().unwrap()));
    // What the database does next: continue past every damaged use (and
    // checkpoint there, so later opens replay from it).
    assert!(wal.skip_to(d.log_limit));
    let new = append_n(&wal, 5000, 30, &[90, 400]);
    drop(wal);
    let (_, again, s2) = open_collect(sim_arc(&sim), SEG, d.log_limit);
    assert_eq!(again, new);
    assert_eq!(s2.damage, None, "old frames no longer vouch for anything");
}

#[test]
fn torn_tails_of_durable_logs_are_never_taken_for_damage() {
    // Per-record durable waits, then written-only appends a crash tears
    // (every tear policy): the marks advance, but never past the tear.
    for seed in 0..150u64 {
        let sim = SimVfs::new();
        let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
        let mut all = Vec::new();
        for i in 0..(5 + seed % 25) {
            let p = payload(i, 30 + (i as usize * 53) % 900);
            let (lsn, end) = wal.append(&p).unwrap();
            wal.wait_durable(end).unwrap();
            all.push((lsn, p));
        }
        let durable = all.len();
        for i in 0..(seed % 40) {
            let p = payload(100 + i, 30 + (i as usize * 97) % 1500);
            let (lsn, end) = wal.append(&p).unwrap();
            wal.wait_written(end).unwrap();
            all.push((lsn, p));
        }
        let crashed = sim.crash(seed);
        drop(wal);
        let (_, got, s) = open_collect(sim_arc(&crashed), SEG, Lsn(0));
        assert!(got.len() >= durable, "seed {seed}: lost durable records");
        assert_eq!(got, all[..got.len()].to_vec(), "seed {seed}: not a prefix");
        assert_eq!(s.damage, None, "seed {seed}");
        check_reopen_cycle(sim_arc(&crashed), SEG, &got, &format!("seed {seed}"));
    }
}

#[test]
fn segments_of_format_2_are_still_replayed() {
    use super::frame::{encode_v2_frame, FrameFormat};
    let sim = SimVfs::new();
    let header = SegmentHeader {
        seq: 1,
        salt: 0x1234_5678,
        prev_salt: 0,
        start_lsn: FIRST_LSN,
        segment_bytes: SEG,
        db_id: 0,
        generation: 0,
        frames: FrameFormat::V2,
    };
    let mut file = header.encode();
    let mut records = Vec::new();
    let mut lsn = FIRST_LSN;
    for i in 0..20 {
        let p = payload(i, 50 + i as usize * 10);
        let frame = encode_v2_frame(lsn, header.salt, &p);
        file.extend_from_slice(&frame);
        records.push((lsn, p));
        lsn = Lsn(lsn.0 + frame.len() as u64);
    }
    file.resize(SEG as usize, 0);
    sim.set_file_bytes("db-wal.0", file);
    let (wal, got, s) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    assert_eq!(got, records);
    assert_eq!(s.end_lsn, lsn);
    // New records go in a format-3 use that continues the old one.
    let new = append_n(&wal, 100, 10, &[60]);
    drop(wal);
    let (_, got, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    let mut all = records;
    all.extend(new);
    assert_eq!(got, all);
}

#[test]
fn a_segment_of_an_unknown_format_is_refused_not_reused() {
    let (sim, _) = sim_log(100);
    edit_file(&sim, "db-wal.0", |b| {
        b[8..12].copy_from_slice(&9u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..72]);
        b[72..76].copy_from_slice(&crc.to_le_bytes());
    });
    let before = all_files(&sim);
    let err = open(sim_arc(&sim), DB, opts(SEG), Lsn(0), &mut |_, _| Ok(())).unwrap_err();
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    assert!(err.to_string().contains("version 9"), "{err}");
    assert_eq!(all_files(&sim), before);
}

#[test]
fn a_damaged_segment_header_does_not_hide_durable_records() {
    let (sim, records) = durable_log(200);
    let (last_name, _) = locate(&sim, records.last().unwrap().0);
    let (middle_name, _) = locate(&sim, records[80].0);
    assert_ne!(last_name, middle_name);
    for (name, byte) in [(&last_name, 20), (&middle_name, 41), (&last_name, 72)] {
        let img = sim.crash_with(0, CrashPolicy::KeepAll);
        edit_file(&img, name, |b| b[byte] ^= 0x02);
        let before = all_files(&img);
        expect_damage(&img, &format!("{name} header byte {byte}"));
        assert_eq!(all_files(&img), before);
    }
    // The only segment of a small log: replay finds no use at all.
    let sim = SimVfs::new();
    let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    for i in 0..5 {
        let (_, end) = wal.append(&payload(i, 40)).unwrap();
        wal.wait_durable(end).unwrap();
    }
    drop(wal);
    assert_eq!(wal_files(&sim.file_names()), 1);
    edit_file(&sim, "db-wal.0", |b| b[30] ^= 0x01);
    expect_damage(&sim, "the only segment's header");
}

#[test]
fn damage_to_both_salt_and_lsn_is_still_found_by_the_length() {
    // Found by review: a header whose salt and LSN were both damaged reads
    // as a stale frame of an earlier use, which is where logs end.
    let (sim, records) = durable_log(200);
    let k = records.len() - 10;
    let (name, off) = locate(&sim, records[k].0);
    edit_file(&sim, &name, |b| b[off + 8..off + 24].fill(0));
    expect_damage(&sim, "salt and LSN zeroed");
}

#[test]
fn garbage_in_a_headerless_file_decides_nothing_in_a_salvage() {
    // Found by review: the first frame of a file with a damaged header
    // was trusted without its crc, so garbage claiming an LSN near the
    // counters' limit moved the salvaged log there, where new segment
    // headers are invalid and every later record was lost.
    let (sim, records) = durable_log(200);
    let (name, off) = locate(&sim, records[80].0);
    edit_file(&sim, &name, |b| b[off + FRAME_HEADER_BYTES + 1] ^= 0x01);
    let mut junk = vec![0xA5u8; 8192];
    // A header that starts with the magic and fails its crc (a file with
    // no magic at all is refused as another program's).
    junk[..8].copy_from_slice(b"SHEAFWAL");
    junk[4096 + 8..4096 + 16].copy_from_slice(&(COUNTER_LIMIT - 12288).to_le_bytes());
    sim.set_file_bytes("db-wal.9", junk);
    let (wal, s) = open(
        sim_arc(&sim),
        DB,
        salvage_opts(),
        Lsn(0),
        &mut |_, _| Ok(()),
    )
    .unwrap();
    let d = s.damage.clone().expect("damage found");
    assert!(
        d.log_limit.0 < 1 << 40,
        "garbage set the limit: {:?}",
        d.log_limit
    );
    assert!(wal.skip_to(d.log_limit));
    let new = append_n(&wal, 5000, 30, &[90, 400]);
    drop(wal);
    let (_, again, s2) = open_collect(sim_arc(&sim), SEG, d.log_limit);
    assert_eq!(again, new, "records acknowledged after the salvage");
    assert_eq!(s2.damage, None);
}

#[test]
fn a_salvage_that_could_not_continue_the_log_is_refused() {
    // A whole use claiming LSNs next to the limit: the salvaged log would
    // have to start past them, where no segment header is valid.
    let (sim, records) = durable_log(200);
    let (name, off) = locate(&sim, records[80].0);
    edit_file(&sim, &name, |b| b[off + FRAME_HEADER_BYTES + 1] ^= 0x01);
    let far = SegmentHeader {
        seq: 1_000,
        salt: 77,
        prev_salt: 0,
        start_lsn: Lsn(COUNTER_LIMIT - SEG),
        segment_bytes: SEG,
        db_id: 0,
        generation: 0,
        frames: super::frame::FrameFormat::V3,
    };
    let mut file = far.encode();
    file.resize(SEG as usize, 0);
    sim.set_file_bytes("db-wal.9", file);
    let err = open(
        sim_arc(&sim),
        DB,
        salvage_opts(),
        Lsn(0),
        &mut |_, _| Ok(()),
    )
    .unwrap_err();
    assert!(
        err.is_corrupted() && err.to_string().contains("cannot be salvaged"),
        "{err}"
    );
}

/// One crash-cycle run for `no_damage_is_reported_over_crash_cycles`:
/// rounds of appends (durable, written-only or neither, sizes from 8 B to
/// 6 KB), checkpoints at random record ends (release, give back files,
/// retire the open one), then a crash of a random kind, then a reopen
/// that must report no damage and keep every durable record.
fn crash_cycles(seed: u64, rounds: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let wopts = || WalOptions {
        min_segment_bytes: 8 * 1024,
        max_record_bytes: 6000,
        ..opts(32 * 1024)
    };
    let reopen = |sim: &SimVfs, from: Lsn, read_only: bool, ctx: &str| {
        let mut got = Vec::new();
        let o = WalOptions {
            read_only,
            anchor: read_anchor(sim),
            ..wopts()
        };
        let (wal, s) = open(sim_arc(sim), DB, o, from, &mut |l, p| {
            got.push((l, p.to_vec()));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
        assert_eq!(s.damage, None, "{ctx}");
        // Rule O16: the anchor follows the log, so every crash below also
        // checks that no anchor ever names a use a crash lost.
        wal.start_anchoring(sim_announcer(sim)).unwrap();
        (wal, got)
    };
    let mut sim = SimVfs::new();
    let mut from = FIRST_LSN;
    let mut log: Records = Vec::new();
    let mut tag = 0u64;
    for round in 0..rounds {
        let ctx = format!("seed {seed} round {round}");
        let (wal, got) = reopen(&sim, from, false, &ctx);
        let want: Records = log.iter().filter(|r| r.0 >= from).cloned().collect();
        assert!(want.starts_with(&got), "{ctx}: not a prefix");
        log = got;
        let mut appended: Vec<(Lsn, Vec<u8>, Lsn)> = Vec::new();
        for _ in 0..rng.gen_range(0..60) {
            let len = match rng.gen_bool(0.1) {
                true => rng.gen_range(2000..6000),
                false => rng.gen_range(8..600),
            };
            let mut p = tag.to_le_bytes().to_vec();
            tag += 1;
            p.resize(len, (tag % 251) as u8);
            let (lsn, end) = wal.append(&p).unwrap();
            appended.push((lsn, p, end));
            match rng.gen_range(0..10) {
                0..=2 => wal.wait_durable(end).unwrap(),
                3..=5 => wal.wait_written(end).unwrap(),
                _ => {}
            }
            if rng.gen_bool(0.06) {
                // A checkpoint: durable through the end, based at a record
                // end, the rest released and files given back.
                wal.sync().unwrap();
                let ends: Vec<Lsn> = appended
                    .iter()
                    .map(|a| a.2)
                    .filter(|&e| e >= from)
                    .collect();
                from = match rng.gen_bool(0.5) || ends.is_empty() {
                    true => wal.next_lsn(),
                    false => ends[rng.gen_range(0..ends.len())],
                };
                wal.release_before(from);
                let retire = [Retire::No, Retire::Large, Retire::Any][rng.gen_range(0..3)];
                let keep = [0u64, 8192, 64 * 1024][rng.gen_range(0..3)];
                let _ = wal.give_back(keep, retire);
            }
        }
        let synced = wal.synced_lsn();
        log.extend(appended.iter().map(|r| (r.0, r.1.clone())));
        let crash_seed = rng.gen();
        let crashed = match rng.gen_range(0..5) {
            0 => sim.crash_with(crash_seed, CrashPolicy::Random),
            1 => sim.crash_with(crash_seed, CrashPolicy::DropAll),
            2 => sim.process_crash(),
            3 => {
                // A process crash, a read-only look, then a power cut.
                let after = sim.process_crash();
                drop(reopen(&after, from, true, &ctx));
                after.crash(crash_seed)
            }
            _ => sim.crash_with(crash_seed, CrashPolicy::KeepAll),
        };
        drop(wal);
        sim = crashed;
        let (wal, got) = reopen(&sim, from, false, &ctx);
        let want: Records = log.iter().filter(|r| r.0 >= from).cloned().collect();
        assert!(
            want.starts_with(&got),
            "{ctx}: not a prefix after the crash"
        );
        let durable = want
            .iter()
            .rposition(|r| {
                appended
                    .iter()
                    .find(|a| a.0 == r.0)
                    .is_none_or(|a| a.2 <= synced)
            })
            .map_or(0, |i| i + 1);
        assert!(got.len() >= durable, "{ctx}: lost durable records");
        drop(wal);
        log = got;
    }
}

#[test]
fn no_damage_is_reported_over_crash_cycles() {
    // From the review of the synced marks: crashes of every kind, after
    // checkpoints, give-backs and retirements, with the marks advancing.
    for seed in 0..200 {
        crash_cycles(seed, 8);
    }
}

// ---------------------------------------------------------------- anchor

/// The file a WAL-only test keeps its anchor in (a data file stands in).
const ANCHOR_FILE: &str = "db";

/// Writes anchors into [`ANCHOR_FILE`] on `sim`, durably.
fn sim_announcer(sim: &SimVfs) -> Announcer {
    let file = sim
        .open(ANCHOR_FILE, crate::storage::OpenMode::OpenOrCreate)
        .unwrap();
    Announcer(Arc::new(move |bytes: &[u8]| {
        file.write_at(ANCHOR_OFFSET, bytes)?;
        file.sync_data()
    }))
}

/// The anchor in [`ANCHOR_FILE`] on `sim` (database identity 0), if any.
fn read_anchor(sim: &SimVfs) -> Option<Anchor> {
    let bytes = sim.file_bytes(ANCHOR_FILE)?;
    let at = ANCHOR_OFFSET as usize;
    Anchor::decode(bytes.get(at..at + ANCHOR_BYTES)?, 0)
}

/// Rule O16: with the log on one use (the first of a new log, which no
/// file links to) and a spare beside it, the use's file deleted after a
/// crash. Without the anchor the open found a file (the spare), no use,
/// and opened an empty log; with it the open is refused and changes
/// nothing. After a clean give-back of a fully checkpointed log the same
/// anchor lets the open through.
#[test]
fn the_anchor_refuses_a_log_whose_newest_use_is_gone() {
    let sim = SimVfs::new();
    let o = || WalOptions {
        anchor: read_anchor(&sim),
        ..opts(SEG)
    };
    let (wal, _) = open(sim_arc(&sim), DB, o(), Lsn(0), &mut |_, _| Ok(())).unwrap();
    wal.start_anchoring(sim_announcer(&sim)).unwrap();
    let mut records = Records::new();
    while wal.state.lock().layout.open_half_full() != Some(true) {
        records.extend(append_n(&wal, records.len() as u64, 1, &[700]));
    }
    assert_eq!(wal.segment_files(), 1, "one use");
    assert!(wal.prepare_spare().unwrap(), "a spare beside the only use");
    assert_eq!(read_anchor(&sim).map(|a| a.kind), Some(AnchorKind::Begun));
    drop(wal);
    let image = sim.crash(1);
    let names = image.file_names();
    assert!(names.contains(&"db-wal.0".to_string()) && names.contains(&"db-wal.1".to_string()));
    Vfs::remove(&image, "db-wal.0").unwrap();
    let anchored = WalOptions {
        anchor: read_anchor(&image),
        ..opts(SEG)
    };
    let before = all_files(&image);
    let err = open(sim_arc(&image), DB, anchored, Lsn(0), &mut |_, _| Ok(()))
        .expect_err("the anchored use is gone");
    assert!(matches!(err, Error::WalMismatch(_)), "{err}");
    assert!(err.to_string().contains("segment use 1"), "{err}");
    assert!(before == all_files(&image), "a refused open changed a file");
    // The records are all there without the deletion.
    let (_, got, _) = open_collect(sim_arc(&sim.crash(1)), SEG, Lsn(0));
    assert!(got == records);
}

/// Rule O16 over a give-back: a log wholly checkpointed retires its
/// (large) open file and gives it back; the anchor moves to "ended"
/// first, so the open after a crash accepts a log with no use at all.
#[test]
fn a_given_back_anchored_use_does_not_fail_the_next_open() {
    let sim = SimVfs::new();
    let o = WalOptions {
        min_segment_bytes: 8192,
        ..opts(64 * 1024)
    };
    let (wal, _) = open(sim_arc(&sim), DB, o, Lsn(0), &mut |_, _| Ok(())).unwrap();
    wal.start_anchoring(sim_announcer(&sim)).unwrap();
    let records = append_n(&wal, 0, 80, &[400]);
    let end = end_of(records.last().unwrap());
    wal.release_before(end);
    assert!(
        wal.give_back(0, Retire::Any).unwrap() > 0,
        "files given back"
    );
    assert_eq!(read_anchor(&sim).map(|a| a.kind), Some(AnchorKind::Ended));
    drop(wal);
    for seed in 0..20 {
        let image = sim.crash(seed);
        let anchored = WalOptions {
            anchor: read_anchor(&image),
            ..o
        };
        let (_, s) = open(sim_arc(&image), DB, anchored, end, &mut |_, _| Ok(()))
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(s.records_replayed, 0);
    }
}

// ---------------------------------------------------------------- spares

/// Storage operations one spare of a half-full log of `SEG` takes.
fn ops_to_make_a_spare() -> u64 {
    let sim = SimVfs::new();
    let (wal, _) = half_full_log(&sim);
    let ops = sim.op_count();
    assert!(wal.prepare_spare().unwrap(), "no spare was made");
    sim.op_count() - ops
}

/// A log whose open use is past half full, every record durable.
fn half_full_log(sim: &SimVfs) -> (Wal, Records) {
    half_full_log_with(sim, opts(SEG))
}

/// [`half_full_log`] with options `o`.
fn half_full_log_with(sim: &SimVfs, o: WalOptions) -> (Wal, Records) {
    let (wal, _) = open(sim_arc(sim), DB, o, Lsn(0), &mut |_, _| Ok(())).expect("open WAL");
    let mut all = Records::new();
    while wal.state.lock().layout.open_half_full() != Some(true) {
        all.extend(append_n(&wal, all.len() as u64, 1, &[700]));
    }
    (wal, all)
}

/// Options whose files grow from 8 KiB (4 KiB of frames) to 32 KiB.
fn growing_opts() -> WalOptions {
    WalOptions {
        min_segment_bytes: 8 * 1024,
        ..opts(32 * 1024)
    }
}

/// Every power loss (200 seeds, random and drop-all) of `sim` leaves a
/// log that opens with replay from `from`.
fn opens_after_every_power_loss(sim: &SimVfs, o: WalOptions, from: Lsn) {
    for seed in 0..200u64 {
        for policy in [CrashPolicy::Random, CrashPolicy::DropAll] {
            let image = sim.crash_with(seed, policy);
            let r = open(sim_arc(&image), DB, o, from, &mut |_, _| Ok(()));
            assert!(r.is_ok(), "seed {seed}, {policy:?}: {:?}", r.err());
        }
    }
}

/// A spare is made ahead of the switch, the switch takes it (no file made
/// while commits wait), and a crash at any operation of its making, or a
/// failed one, loses no durable record, poisons nothing, and leaves a
/// log that reopens, continues and reopens again with every record.
#[test]
fn spares_are_taken_by_the_switch_and_safe_at_every_step_of_their_making() {
    // Unfaulted: the spare is made, then taken.
    let sim = SimVfs::new();
    let (wal, mut all) = half_full_log(&sim);
    let files = wal.segment_files();
    assert!(wal.prepare_spare().unwrap(), "no spare was made");
    let spare_ops = ops_to_make_a_spare();
    // Open, zero-fill, sync, directory sync at least.
    assert!(spare_ops >= 4, "{spare_ops} operations made a spare");
    assert_eq!(wal.segment_files(), files + 1);
    // The spare is durable, its directory entry too: a power loss right
    // now keeps the whole zero-filled file (else the first commits into
    // it would sync its zeros, or lose it).
    let spare = super::segment::segment_name(DB, files);
    let len = sim.file_bytes(&spare).map(|b| b.len());
    assert!(len.is_some_and(|n| n > 0), "no spare file named {spare}");
    assert_eq!(
        sim.durable_bytes(&spare),
        sim.file_bytes(&spare),
        "the spare is not durable"
    );
    let image = sim.crash_with(0, CrashPolicy::DropAll);
    assert_eq!(
        image.file_bytes(&spare).map(|b| b.len()),
        len,
        "the spare's entry was lost"
    );
    assert!(!wal.prepare_spare().unwrap(), "a second spare for one use");
    let created = wal.stats().segments_created;
    let before = wal.state.lock().layout.next_lsn;
    let mut tag = 10_000;
    while wal.segment_files() == files + 1 && wal.stats().segments_recycled == 0 {
        all.extend(append_n(&wal, tag, 1, &[700]));
        tag += 1;
        let switched = wal.state.lock().layout.open_start() > Some(before);
        if switched {
            break;
        }
    }
    assert!(
        wal.state.lock().layout.open_start() > Some(before),
        "the log never switched"
    );
    assert_eq!(
        wal.stats().segments_created,
        created,
        "the switch made a file"
    );
    assert_eq!(wal.segment_files(), files + 1, "the switch made a file");
    drop(wal);
    check_reopen_cycle(sim_arc(&sim), SEG, &all, "after the spare was taken");

    // A fault at each operation of the making, then a crash.
    for n in 1..=spare_ops {
        for policy in [
            CrashPolicy::Random,
            CrashPolicy::DropAll,
            CrashPolicy::KeepAll,
        ] {
            let ctx = format!("fault at spare op {n}, {policy:?}");
            let sim = SimVfs::new();
            let (wal, mut all) = half_full_log(&sim);
            sim.fail_from(n, Fault::Eio);
            assert!(
                wal.prepare_spare().is_err(),
                "{ctx}: the fault was not seen"
            );
            sim.clear_faults();
            assert!(!wal.is_poisoned(), "{ctx}: a failed spare poisoned the log");
            assert!(
                !wal.prepare_spare().unwrap(),
                "{ctx}: retried in the same use"
            );
            // Commits go on, across the switch.
            all.extend(append_n(&wal, 20_000, 30, &[700]));
            let image = sim.crash_with(n, policy);
            drop(wal);
            check_reopen_cycle(sim_arc(&image), SEG, &all, &ctx);
        }
    }
}

/// Review finding: a spare taken by a use whose records were only
/// written, then a recycled file taken by the next use, then power loss
/// that kept the second header and lost the spare's: open refused the
/// log as starting past its replay start. Headers now become durable in
/// use order (rule O11).
#[test]
fn a_crash_after_a_spare_is_taken_keeps_the_log_openable() {
    let wopts = growing_opts();
    let sim = SimVfs::new();
    // Use 1 in slot 0 past half, then the spare (slot 1).
    let (wal, _) = half_full_log_with(&sim, wopts);
    assert!(wal.prepare_spare().unwrap());
    // Fill use 1 exactly, durable; a checkpoint covers the whole log.
    let open_start = wal.state.lock().layout.open_start().unwrap();
    let room = 4096 - (wal.next_lsn().0 - open_start.0) as usize;
    append_n(&wal, 100, 1, &[room - FRAME_HEADER_BYTES]);
    assert_eq!(wal.state.lock().layout.open_start(), Some(open_start));
    let from = wal.next_lsn();
    wal.release_before(from);
    // Use 2 starts at `from` in the spare: written, not synced.
    let (_, e) = wal.append(&payload(200, 100)).unwrap();
    wal.wait_written(e).unwrap();
    assert_eq!(wal.state.lock().layout.open_start(), Some(from));
    // Too large for the rest of use 2: use 3 recycles slot 0.
    let (_, e) = wal.append(&payload(201, 13_000)).unwrap();
    wal.wait_written(e).unwrap();
    assert!(wal.state.lock().layout.open_start() > Some(from));
    drop(wal);
    opens_after_every_power_loss(&sim, wopts, from);
}

/// Review finding: a spare that failed left its partial file on disk,
/// uncounted by the writer. It is removed now (after a one-shot fault at
/// any operation of the making, the files on disk are the writer's).
#[test]
fn a_failed_spare_leaves_no_file_behind() {
    let spare_ops = ops_to_make_a_spare();
    for n in 1..=spare_ops {
        let sim = SimVfs::new();
        let (wal, _) = half_full_log(&sim);
        sim.fail_op(n, Fault::NoSpace);
        let made = wal.prepare_spare();
        let on_disk = wal_files(&sim.file_names());
        assert_eq!(
            on_disk,
            wal.segment_files(),
            "fault at spare op {n} ({made:?}): a file the writer does not count"
        );
    }
}

/// A spare on a slow disk never holds up an `Eventual` commit's sync:
/// the flusher makes spares on a thread of its own (review finding: it
/// made them itself, and its syncs waited as long).
#[test]
fn a_slow_spare_does_not_delay_eventual_syncs() {
    #[derive(Debug)]
    struct SlowSpare;
    impl Hook for SlowSpare {
        fn before(&self, name: &str, op: FileOp) -> io::Result<()> {
            // Slot 1 is where the first spare goes.
            if name.ends_with("-wal.1") && op == FileOp::Write {
                thread::sleep(Duration::from_millis(400));
            }
            Ok(())
        }
    }
    let sim = SimVfs::new();
    let vfs: Arc<dyn Vfs> = Arc::new(HookVfs::new(sim_arc(&sim), Arc::new(SlowSpare)));
    let (wal, _) = open(vfs, DB, opts(SEG), Lsn(0), &mut |_, _| Ok(())).unwrap();
    let wal = Arc::new(wal);
    let mut tag = 0;
    while wal.state.lock().layout.open_half_full() != Some(true) {
        append_n(&wal, tag, 1, &[700]);
        tag += 1;
    }
    let flusher = wal
        .start_flusher(Duration::from_millis(5), true, Box::new(|_| {}))
        .unwrap();
    // Until the spare is under way (its number reserved).
    let start = Instant::now();
    while !wal.state.lock().layout.spare_in_progress() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no spare was started"
        );
        thread::sleep(Duration::from_millis(1));
    }
    let (_, end) = wal.append(&payload(77, 100)).unwrap();
    let written = Instant::now();
    while wal.synced_lsn() < end {
        assert!(
            written.elapsed() < Duration::from_millis(300),
            "an Eventual record waited for the spare to be synced"
        );
        thread::sleep(Duration::from_millis(1));
    }
    assert!(
        wal.state.lock().layout.spare_in_progress(),
        "the spare was not slow"
    );
    drop(flusher);
    assert!(
        !wal.state.lock().layout.spare_in_progress(),
        "the flusher left a spare running"
    );
}

/// The append that finds a spare due wakes the flusher: the spare is made
/// long before the flusher's next tick (10 s here). At the tick alone, a
/// log growing by 1 MiB commits reached the switch before its spare was
/// made, and the switching commit zero-filled its file itself
/// (`examples/cf_writers`).
///
/// Also with an interval past the end of the clock (`Duration::MAX`, a
/// never-ticking flusher): the first version of the wake added it to the
/// clock and panicked in the flusher thread, which then made no spare.
#[test]
fn an_append_that_finds_a_spare_due_wakes_the_flusher() {
    for interval in [Duration::from_secs(10), Duration::MAX] {
        spare_made_on_wake(interval);
    }
}

fn spare_made_on_wake(interval: Duration) {
    let sim = SimVfs::new();
    let (wal, _) = open(sim_arc(&sim), DB, opts(SEG), Lsn(0), &mut |_, _| Ok(())).unwrap();
    let wal = Arc::new(wal);
    let flusher = wal.start_flusher(interval, true, Box::new(|_| {})).unwrap();
    let mut tag = 0;
    while !wal.state.lock().layout.spare_due() {
        append_n(&wal, tag, 1, &[700]);
        tag += 1;
    }
    let asked = Instant::now();
    while !wal.state.lock().layout.has_spare() {
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{interval:?}: no spare was made before the flusher's tick"
        );
        thread::sleep(Duration::from_millis(1));
    }
    assert!(!wal.state.lock().layout.spare_due(), "a spare is still due");
    drop(flusher);
}

/// Review finding (the variant the first fix missed): a spare left by a
/// process crash is a header-less free file at reopen; taken by the
/// reopened log's first use, with a later use recycling another file
/// before a sync, power loss must still leave a log that opens (rule O11:
/// headers become durable in use order).
#[test]
fn a_spare_left_by_a_crash_and_taken_after_reopen_keeps_the_log_openable() {
    let wopts = growing_opts();
    let sim = SimVfs::new();
    let (wal, _) = half_full_log_with(&sim, wopts);
    assert!(wal.prepare_spare().unwrap());
    let from = wal.next_lsn();
    drop(wal);
    let image = sim.process_crash();
    let (wal, _) = open(sim_arc(&image), DB, wopts, from, &mut |_, _| Ok(())).unwrap();
    wal.release_before(from);
    for (i, len) in [100usize, 13_000, 13_000, 100].into_iter().enumerate() {
        let (_, e) = wal.append(&payload(300 + i as u64, len)).unwrap();
        wal.wait_written(e).unwrap();
    }
    drop(wal);
    opens_after_every_power_loss(&image, wopts, from);
}

/// Review finding: an idle log's give-back deleted its unused spare and
/// the next tick made another, at every give-back, each twice the size.
/// A spare given back unused is not remade for the same use, and the next
/// new file keeps its size.
#[test]
fn a_spare_given_back_unused_is_not_remade_for_the_same_use() {
    let sim = SimVfs::new();
    let (wal, _) = half_full_log(&sim);
    let created = wal.stats().segments_created;
    assert!(wal.prepare_spare().unwrap());
    let spare_bytes = wal.file_bytes();
    wal.release_before(wal.next_lsn());
    wal.give_back(0, Retire::No).unwrap();
    assert_eq!(wal.segment_files(), 1, "the unused spare was kept");
    for _ in 0..5 {
        assert!(
            !wal.prepare_spare().unwrap(),
            "the spare was remade for the same use"
        );
    }
    assert_eq!(wal.stats().segments_created, created + 1);
    assert!(wal.file_bytes() < spare_bytes);
}

/// From a session-34 review of rule O15: a power cut after a switch's
/// header and link were durable but before the new use's first frame was,
/// a reopen, a checkpoint at the log end (the replay start is exactly
/// where the empty use starts) and a give-back that keeps the older file:
/// its link names a use no file holds, at the replay start. Nothing was
/// lost, and the open must succeed (the check is strict: only a use that
/// starts past the replay start must be there).
#[test]
fn an_empty_linked_use_given_back_is_not_a_missing_use() {
    let size = 488 - FRAME_HEADER_BYTES;
    let sim = SimVfs::new();
    let (wal, _, _) = open_collect(sim_arc(&sim), SEG, Lsn(0));
    let records = append_n(&wal, 0, 25, &[size]);
    assert_eq!(wal.segment_files(), 1);
    let s = wal.next_lsn();
    let (lsn, end) = wal.append(&payload(99, size)).unwrap();
    assert_eq!(lsn, s, "the record switched to a new use");
    wal.wait_written(end).unwrap();
    assert_eq!(wal.segment_files(), 2);
    let image = sim.crash_with(0, CrashPolicy::DropAll);
    drop(wal);
    let (wal, got, sum) = open_collect(sim_arc(&image), SEG, Lsn(0));
    assert!(got == records);
    assert_eq!((sum.damage, wal.next_lsn()), (None, s));
    wal.release_before(s);
    wal.give_back(0, Retire::Large).unwrap();
    drop(wal);
    open(sim_arc(&image), DB, opts(SEG), s, &mut |_, _| Ok(()))
        .unwrap_or_else(|e| panic!("a whole log was refused: {e}"));
}

/// From the same review: one damaged byte in the magic of a live
/// segment's header is damage to report (and salvage past), not another
/// program's file to refuse as foreign.
#[test]
fn a_flipped_bit_in_a_live_segments_magic_is_damage_not_a_foreign_file() {
    let (sim, records) = sim_log(100);
    let (name, _) = locate(&sim, records.last().unwrap().0);
    edit_file(&sim, &name, |b| b[3] ^= 0x10);
    if let Err(e) = open(sim_arc(&sim), DB, opts(SEG), Lsn(0), &mut |_, _| Ok(())) {
        assert!(
            !e.to_string().contains("not one"),
            "reported as foreign: {e}"
        );
    }
    open(
        sim_arc(&sim),
        DB,
        salvage_opts(),
        Lsn(0),
        &mut |_, _| Ok(()),
    )
    .unwrap_or_else(|e| panic!("a salvage cannot open past it: {e}"));
}

// ------------------------------------------------- rules kept twice

/// Random power-loss draws per cut, besides the one that drops every
/// unsynced write.
const DRAWS_PER_CUT: u64 = 24;

/// While armed, records before every `sync_data` the states a power loss
/// at that moment could leave on `sim`: every unsynced write dropped, and
/// [`DRAWS_PER_CUT`] random keep/drop/tear draws (seeded by the cut's
/// number). A rule kept twice is kept by one step alone at a cut between
/// that step's sync and the later sync that also covers it.
#[derive(Debug, Default)]
struct PowerCuts {
    sim: SimVfs,
    armed: AtomicBool,
    images: Mutex<Vec<(String, SimVfs)>>,
}

impl Hook for PowerCuts {
    fn before(&self, name: &str, op: FileOp) -> io::Result<()> {
        if op != FileOp::Sync || !self.armed.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut images = self.images.lock();
        let cut = images.len() as u64 / (DRAWS_PER_CUT + 1);
        let at = format!("cut {cut}, before a sync of {name}");
        let all = self.sim.crash_with(0, CrashPolicy::DropAll);
        images.push((format!("{at}, unsynced writes dropped"), all));
        for draw in 0..DRAWS_PER_CUT {
            let seed = cut * 1000 + draw;
            images.push((format!("{at}, seed {seed}"), self.sim.crash(seed)));
        }
        Ok(())
    }
}

impl PowerCuts {
    /// A fresh `SimVfs` and the hooked VFS over it.
    fn new() -> (Arc<PowerCuts>, Arc<dyn Vfs>) {
        let cuts = Arc::new(PowerCuts::default());
        let vfs = HookVfs::new(sim_arc(&cuts.sim), Arc::clone(&cuts) as Arc<dyn Hook>);
        (cuts, Arc::new(vfs))
    }

    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Disarms and returns every state recorded, with its context.
    fn take(&self) -> Vec<(String, SimVfs)> {
        self.armed.store(false, Ordering::SeqCst);
        let images = std::mem::take(&mut *self.images.lock());
        assert!(!images.is_empty(), "no sync while armed");
        images
    }
}

/// Opens `image` from `from` (with the anchor it holds): the open must
/// succeed and report no damage.
fn opens_without_damage(image: &SimVfs, o: WalOptions, from: Lsn, ctx: &str) -> (Wal, Records) {
    let mut got = Records::new();
    let o = WalOptions {
        anchor: read_anchor(image),
        ..o
    };
    let (wal, s) = open(sim_arc(image), DB, o, from, &mut |l, p| {
        got.push((l, p.to_vec()));
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
    assert_eq!(s.damage, None, "{ctx}");
    (wal, got)
}

/// Rule O16's "ended" anchor before a recycled file's new header
/// (`SegmentIo::unanchor`, from `Step::Begin { replaces }`). A log wholly
/// checkpointed retires its open use and keeps its file; a record too
/// large for that file makes the next use regrow the same file, whose
/// zero fill (synced) wipes the anchored use's header. A power cut before
/// the new header is synced leaves no file holding the anchored use or a
/// use continuing it: with the anchor still "begun", the open refused a
/// log that lost nothing. (The give-back path is
/// `a_given_back_anchored_use_does_not_fail_the_next_open`.)
#[test]
fn a_power_cut_while_an_anchored_use_s_file_is_regrown_keeps_the_log_openable() {
    let o = growing_opts();
    let (cuts, vfs) = PowerCuts::new();
    let (wal, _) = open(vfs, DB, o, Lsn(0), &mut |_, _| Ok(())).unwrap();
    wal.start_anchoring(sim_announcer(&cuts.sim)).unwrap();
    append_n(&wal, 0, 4, &[700]);
    let from = wal.next_lsn();
    wal.release_before(from);
    wal.give_back(u64::MAX, Retire::Any).unwrap();
    let anchored = read_anchor(&cuts.sim).map(|a| (a.kind, a.seq));
    assert_eq!(anchored, Some((AnchorKind::Begun, 1)), "use 1 is anchored");
    cuts.arm();
    let records = append_n(&wal, 10, 1, &[6000]);
    let images = cuts.take();
    assert_eq!(wal.segment_files(), 1, "the use took the retired file");
    let len = cuts.sim.file_bytes("db-wal.0").map(|b| b.len() as u64);
    assert!(len > Some(o.min_segment_bytes), "the file was not regrown");
    drop(wal);
    for (ctx, image) in images {
        let (_, got) = opens_without_damage(&image, o, from, &ctx);
        assert!(records.starts_with(&got), "{ctx}: not a prefix");
    }
}

/// Rule O14's fill sync (`SegmentIo::preallocate`): a new file's zeros
/// are durable before its header is written. The header's own sync
/// covers the fill too, but a power cut before it may keep the header
/// and lose zeros: a use in a file shorter than its header says. The
/// open after it ends the log there; then a checkpoint at the log end
/// and a clean close; the open after that must still succeed (with the
/// header written first, the session-34 probe found it refused as cut).
#[test]
fn a_power_cut_before_a_new_file_s_header_is_synced_leaves_no_short_use() {
    let o = growing_opts();
    let (cuts, vfs) = PowerCuts::new();
    let (wal, _) = open(vfs, DB, o, Lsn(0), &mut |_, _| Ok(())).unwrap();
    let mut records = append_n(&wal, 0, 4, &[700]);
    let synced = records.len(); // durable before any cut
    assert_eq!(wal.segment_files(), 1);
    cuts.arm();
    records.extend(append_n(&wal, 10, 3, &[700]));
    let images = cuts.take();
    assert_eq!(wal.segment_files(), 2, "no switch to a new file");
    drop(wal);
    for (ctx, image) in images {
        let (wal, got) = opens_without_damage(&image, o, FIRST_LSN, &ctx);
        assert!(records.starts_with(&got), "{ctx}: not a prefix");
        assert!(
            got.len() >= synced,
            "{ctx}: a record synced before the cuts lost"
        );
        append_n(&wal, 100, 2, &[700]);
        let end = wal.next_lsn();
        wal.release_before(end);
        let _ = wal.give_back(0, Retire::Any);
        drop(wal);
        let closed = WalOptions {
            log_ended: true,
            ..o
        };
        opens_without_damage(&image, closed, end, &format!("{ctx}, after a close"));
    }
}

/// Rule O11's call in `begin_use` (before a new file's header, which
/// `preallocate` syncs at once), on a log with no anchor (the WAL on its
/// own, as `sheafdb::testing::Wal`), where no anchor write syncs the
/// headers before the next one. The first use takes the header-less
/// file `ensure_file` made (nothing links to it; its header is only
/// written), and the same round fills it and begins a use in a new file.
/// A cut after the second header's sync and before the first's kept the
/// second and lost the first: the open found a log starting past its
/// replay start and refused it, though nothing acknowledged was lost.
#[test]
fn a_power_cut_between_two_headers_of_one_round_keeps_the_log_openable() {
    let o = growing_opts();
    let (cuts, vfs) = PowerCuts::new();
    let (wal, _) = open(vfs, DB, o, Lsn(0), &mut |_, _| Ok(())).unwrap();
    wal.ensure_file().unwrap();
    assert_eq!(wal.segment_files(), 1);
    cuts.arm();
    let mut end = FIRST_LSN;
    for i in 0..8 {
        end = wal.append(&payload(i, 700)).unwrap().1;
    }
    wal.sync().unwrap();
    let images = cuts.take();
    assert_eq!(wal.segment_files(), 2, "no switch in the round");
    assert_eq!(wal.synced_lsn(), end);
    drop(wal);
    for (ctx, image) in images {
        opens_without_damage(&image, o, FIRST_LSN, &ctx);
    }
}

/// Rule O15's order (`link_use` makes the new use's header durable before
/// writing the link), on a log with no anchor (which would sync the
/// header first). One round writes frames of use 2 (slot 1), begins use
/// 3 in slot 0 (recycled at its size: its header is only written) and
/// links it from slot 1. Synced in first-write order, slot 1 and its link
/// became durable before the header the link names: a cut between the
/// two syncs left a link to a use no file holds, past the replay start,
/// and the open reported damage where a crash had lost nothing
/// acknowledged.
#[test]
fn a_power_cut_between_a_link_and_its_use_s_header_is_not_damage() {
    let o = WalOptions {
        min_segment_bytes: SEG,
        ..opts(SEG)
    };
    let (cuts, vfs) = PowerCuts::new();
    let (wal, _) = open(vfs, DB, o, Lsn(0), &mut |_, _| Ok(())).unwrap();
    let mut records = Records::new();
    while wal.segment_files() < 2 {
        records.extend(append_n(&wal, records.len() as u64, 1, &[700]));
    }
    records.extend(append_n(&wal, 100, 2, &[700]));
    let from = wal.next_lsn();
    wal.release_before(from);
    let open_start = wal.state.lock().layout.open_start();
    cuts.arm();
    let mut tag = 200;
    while wal.state.lock().layout.open_start() == open_start {
        records.push((wal.append(&payload(tag, 700)).unwrap().0, payload(tag, 700)));
        tag += 1;
    }
    wal.sync().unwrap();
    let images = cuts.take();
    assert_eq!(wal.segment_files(), 2, "use 3 did not recycle slot 0");
    drop(wal);
    for (ctx, image) in images {
        let (_, got) = opens_without_damage(&image, o, from, &ctx);
        let want: Records = records.iter().filter(|r| r.0 >= from).cloned().collect();
        assert!(want.starts_with(&got), "{ctx}: not a prefix");
    }
}
