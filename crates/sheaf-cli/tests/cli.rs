//! The `sheaf` binary on databases the tests make with the library: every
//! subcommand, exit codes, one-line errors, a corrupted file, files that
//! are not databases, and dump → load → dump round trips.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value as Json;
use sheafdb::table::types::{Key, KeyPart, Value};
use sheafdb::{Database, MultimapTableDefinition, Result, TableDefinition};

fn sheaf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sheaf"))
}

/// Serializes the tests of this file. A child process started by one
/// test holds copies of the process's file descriptors until it execs,
/// and with them the lock of a database another test just closed; run in
/// parallel, a test could find its own database "locked" for a moment.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A user-defined key type: the command line does not know it, so it
/// renders its bytes in hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Celsius(i32);

impl Value for Celsius {
    type SelfType<'a> = Celsius;
    fn fixed_width() -> Option<usize> {
        Some(4)
    }
    fn encode_value(value: &Celsius, out: &mut Vec<u8>) {
        i32::encode_value(&value.0, out)
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<Celsius>
    where
        Self: 'a,
    {
        i32::decode_value(bytes).map(Celsius)
    }
    fn type_name() -> String {
        "test::Celsius".to_string()
    }
}

impl Key for Celsius {
    fn encode_key(value: &Celsius, out: &mut Vec<u8>) {
        i32::encode_key(&value.0, out)
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<Celsius>
    where
        Self: 'a,
    {
        i32::decode_key(bytes).map(Celsius)
    }
}

impl KeyPart for Celsius {
    fn encode_key_part(value: &Celsius, out: &mut Vec<u8>) {
        i32::encode_key_part(&value.0, out)
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(Celsius, usize)>
    where
        Self: 'a,
    {
        i32::decode_key_part(bytes).map(|(v, n)| (Celsius(v), n))
    }
}

const USERS: TableDefinition<&str, u64> = TableDefinition::new("users");
const EVENTS: TableDefinition<(u64, &str), Option<(u32, String)>> = TableDefinition::new("events");
const SAMPLES: TableDefinition<(String, i64), f64> = TableDefinition::new("samples");
const BLOBS: TableDefinition<[u8; 4], Vec<u8>> = TableDefinition::new("blobs");
const MEMBERS: TableDefinition<(u32, Option<String>), ()> = TableDefinition::new("members");
const FLAGS: TableDefinition<Option<Option<u8>>, (bool, char, i128)> =
    TableDefinition::new("flags");
const READINGS: TableDefinition<(Celsius, u8), Option<Celsius>> = TableDefinition::new("readings");
const TAGS: MultimapTableDefinition<&str, (u64, &str)> = MultimapTableDefinition::new("tags");
/// The value type of `VECTORS`.
type Pairs = (Vec<[u8; 2]>, [char; 2]);
const VECTORS: TableDefinition<Vec<u16>, Pairs> = TableDefinition::new("vectors");

/// (cf, table, key type, value type, entries) of the test database.
const TABLES: [(&str, &str, &str, &str, u64); 9] = [
    ("default", "events", "(u64,str)", "Option<(u32,str)>", 4),
    ("default", "users", "str", "u64", 3),
    ("metrics", "blobs", "[u8;4]", "bytes", 3),
    ("metrics", "samples", "(str,i64)", "f64", 5),
    (
        "metrics",
        "vectors",
        "Vec<u16>",
        "(Vec<[u8;2]>,[char;2])",
        3,
    ),
    ("sets", "flags", "Option<Option<u8>>", "(bool,char,i128)", 3),
    ("sets", "members", "(u32,Option<str>)", "()", 4),
    (
        "sets",
        "readings",
        "(test::Celsius,u8)",
        "Option<test::Celsius>",
        2,
    ),
    ("sets", "tags", "multimap(str,(u64,str))", "()", 4),
];

/// A database with three column families and tables of many types.
fn make_db(path: &Path) -> Result<()> {
    let db = Database::create(path)?;
    let tx = db.begin_write()?;
    {
        let mut users = tx.open_table(USERS)?;
        users.insert("ada", 36)?;
        users.insert("bob", 0)?;
        users.insert("comma, \"quoted\"\nnewline", u64::MAX)?;
        let mut events = tx.open_table(EVENTS)?;
        events.insert((1, "login"), Some((7, "seven".to_string())))?;
        events.insert((1, "a\0b"), None)?;
        events.insert((2, ""), Some((0, String::new())))?;
        events.insert((u64::MAX, "é,\""), Some((u32::MAX, "x\ty".to_string())))?;
    }
    tx.commit()?;
    let metrics = db.cf_or_create("metrics")?;
    let tx = metrics.begin_write()?;
    {
        let mut samples = tx.open_table(SAMPLES)?;
        samples.insert(("cpu".to_string(), -1), 0.1)?;
        samples.insert(("cpu".to_string(), 5), -0.0)?;
        samples.insert(("disk".to_string(), i64::MIN), f64::NAN)?;
        samples.insert(("disk".to_string(), 0), f64::INFINITY)?;
        samples.insert(("mem".to_string(), i64::MAX), 1e300)?;
        let mut blobs = tx.open_table(BLOBS)?;
        blobs.insert([0, 1, 2, 3], vec![])?;
        blobs.insert([255; 4], vec![0, 0, 255])?;
        blobs.insert([9, 9, 9, 9], b"text".to_vec())?;
        let mut vectors = tx.open_table(VECTORS)?;
        vectors.insert(vec![], (vec![], ['a', '\0']))?;
        vectors.insert(vec![1, 2], (vec![[0, 1], [255, 0]], ['é', ',']))?;
        vectors.insert(vec![u16::MAX], (vec![[7, 7]], ['"', '\n']))?;
    }
    tx.commit()?;
    let sets = db.cf_or_create("sets")?;
    let tx = sets.begin_write()?;
    {
        let mut members = tx.open_table(MEMBERS)?;
        members.insert((1, None), ())?;
        members.insert((1, Some("a".to_string())), ())?;
        members.insert((1, Some(String::new())), ())?;
        members.insert((2, Some("b\0".to_string())), ())?;
        let mut flags = tx.open_table(FLAGS)?;
        flags.insert(None, (true, 'x', i128::MIN))?;
        flags.insert(Some(None), (false, '\u{1F600}', 0))?;
        flags.insert(Some(Some(3)), (true, ',', i128::MAX))?;
        let mut readings = tx.open_table(READINGS)?;
        readings.insert((Celsius(-5), 1), Some(Celsius(-5)))?;
        readings.insert((Celsius(20), 2), None)?;
        let mut tags = tx.open_multimap_table(TAGS)?;
        tags.insert("a\0b", (1, "x"))?;
        tags.insert("a\0b", (2, ""))?;
        tags.insert("a", (0, "a\0"))?;
        tags.insert("", (u64::MAX, "é"))?;
    }
    tx.commit()?;
    db.close()
}

struct Fixture {
    dir: tempfile::TempDir,
    path: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("test.sheaf");
    make_db(&path).unwrap();
    Fixture { dir, path }
}

/// Every file of a directory, by name, with its bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.assert().success().get_output().stdout.clone();
    String::from_utf8(out).unwrap()
}

/// Asserts a failure with `code` and exactly one line on stderr, which
/// contains `text`; returns that line.
fn fails(cmd: &mut Command, code: i32, text: &str) -> String {
    let out = cmd.assert().code(code).get_output().clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "stderr is not one line: {err:?}");
    assert!(err.contains(text), "{err:?} lacks {text:?}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn version_and_help_follow_clap_conventions() {
    let _serial = serial();
    sheaf()
        .arg("--version")
        .assert()
        .success()
        .stdout(predicate::str::starts_with(format!(
            "sheaf {}",
            env!("CARGO_PKG_VERSION")
        )));
    for args in [&["help"][..], &["--help"], &["-h"]] {
        sheaf().args(args).assert().success().stdout(
            predicate::str::contains("info")
                .and(predicate::str::contains("check"))
                .and(predicate::str::contains("dump"))
                .and(predicate::str::contains("load"))
                .and(predicate::str::contains("compact"))
                .and(predicate::str::contains("backup"))
                .and(predicate::str::contains("Exit status")),
        );
    }
    sheaf()
        .args(["help", "load"])
        .assert()
        .success()
        .stdout(predicate::str::contains("--key-type"));
    // No command: the help, with clap's exit status 2.
    sheaf()
        .assert()
        .code(2)
        .stderr(predicate::str::contains("Usage: sheaf"));
    // Usage errors: one line, exit status 2.
    fails(sheaf().arg("bogus"), 2, "unrecognized subcommand 'bogus'");
    fails(
        sheaf().args(["dump", "x", "--format", "xml"]),
        2,
        "invalid value 'xml'",
    );
    fails(
        sheaf().args(["load", "x", "--table", "t", "--key-type", "u8"]),
        2,
        "--value-type",
    );
    fails(sheaf().arg("info"), 2, "required");
}

#[test]
fn info_describes_the_file_and_every_table() {
    let _serial = serial();
    let f = fixture();
    let text = stdout_of(sheaf().arg("info").arg(&f.path));
    for needle in [
        "format          version 4, page size 4,096",
        "last close      clean",
        "column family \"metrics\": 3 tables, 11 entries",
        "(test::Celsius,u8)",
        "Option<(u32,str)>",
    ] {
        assert!(text.contains(needle), "{needle:?} not in\n{text}");
    }

    let json: Json =
        serde_json::from_str(&stdout_of(sheaf().arg("info").arg(&f.path).arg("--json"))).unwrap();
    assert_eq!(json["format_version"], 4);
    assert_eq!(json["page_size"], 4096);
    assert_eq!(
        json["file_bytes"].as_u64().unwrap(),
        std::fs::metadata(&f.path).unwrap().len()
    );
    assert!(json["recorded_file_bytes"].as_u64().unwrap() >= 2 * 4096);
    assert!(json["generation"].as_u64().unwrap() >= 1);
    assert!(json["replay_start_lsn"].as_u64().unwrap() >= 4096);
    assert!(json["wal_end_lsn"].as_u64().is_some());
    assert!(json["wal_segments"].as_u64().unwrap() >= 1);
    assert!(json["wal_bytes"].as_u64().unwrap() > 0);
    assert_eq!(json["clean"], true);
    assert_eq!(json["replayed_records"], 0);
    let cfs = json["column_families"].as_array().unwrap();
    let names: Vec<&str> = cfs.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "metrics", "sets"]);
    for c in cfs {
        assert!(c["pages_in_use"].as_u64().unwrap() > 0, "{c}");
        assert!(c["extents"].as_u64().unwrap() >= 1, "{c}");
        assert!(c["extent_bytes"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(c["dirty_bytes"], 0);
        assert_eq!(c["buffered_bytes"], 0);
    }
    let mut listed = Vec::new();
    for c in cfs {
        let mut sum = 0;
        for t in c["tables"].as_array().unwrap() {
            let entries = t["entries"].as_u64().unwrap();
            sum += entries;
            listed.push((
                c["name"].as_str().unwrap().to_string(),
                t["name"].as_str().unwrap().to_string(),
                t["key_type"].as_str().unwrap().to_string(),
                t["value_type"].as_str().unwrap().to_string(),
                entries,
            ));
        }
        assert_eq!(c["entries"].as_u64().unwrap(), sum);
    }
    let expected: Vec<_> = TABLES
        .iter()
        .map(|(c, t, k, v, n)| {
            (
                c.to_string(),
                t.to_string(),
                k.to_string(),
                v.to_string(),
                *n,
            )
        })
        .collect();
    assert_eq!(listed, expected);
}

/// Child side of `info_reports_an_unclean_close`: commits, then dies
/// without closing (the records stay in the WAL, unchecked).
#[test]
fn crash_child() {
    let Ok(path) = std::env::var("SHEAF_CLI_CRASH_DB") else {
        return;
    };
    let db = Database::builder()
        .background_checkpoints(false)
        .create(&path)
        .unwrap();
    for k in 0..5u64 {
        let tx = db.begin_write().unwrap();
        tx.open_table(USERS)
            .unwrap()
            .insert(format!("u{k}").as_str(), k)
            .unwrap();
        tx.commit().unwrap();
    }
    std::process::abort();
}

#[test]
fn info_reports_an_unclean_close_and_reads_the_log() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crashed.sheaf");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env("SHEAF_CLI_CRASH_DB", &path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child did not crash");
    let before = files(dir.path());
    let json: Json =
        serde_json::from_str(&stdout_of(sheaf().arg("info").arg("--json").arg(&path))).unwrap();
    assert_eq!(json["clean"], false);
    assert_eq!(json["replayed_records"], 5);
    let text = stdout_of(sheaf().arg("info").arg(&path));
    assert!(
        text.contains("not clean: an open replays 5 WAL records"),
        "{text}"
    );
    assert!(text.contains("WAL needed      yes"), "{text}");
    assert_eq!(json["wal_required"], true);
    // The records are read (in memory) by dump too.
    let dump = stdout_of(sheaf().args(["dump", "--table", "users"]).arg(&path));
    assert_eq!(dump.lines().count(), 5, "{dump}");
    sheaf().arg("check").arg(&path).assert().success();
    assert_eq!(
        files(dir.path()),
        before,
        "a read-only command changed the files"
    );
}

/// Rule O13 through the CLI: a crashed database whose WAL was deleted is
/// refused (exit 2, naming the way out), and nothing changes.
#[test]
fn a_crashed_database_without_its_wal_gives_exit_2() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crashed.sheaf");
    crashed_database(&path);
    for (name, _) in files(dir.path()) {
        if name.contains("-wal.") {
            std::fs::remove_file(dir.path().join(name)).unwrap();
        }
    }
    let before = files(dir.path());
    for cmd in ["info", "check"] {
        let err = fails(sheaf().arg(cmd).arg(&path), 2, "sheaf accept-missing-wal");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    assert_eq!(
        files(dir.path()),
        before,
        "a refused command changed the files"
    );
    // Asked for: opened as of the last checkpoint (before the five
    // commits: no table yet), and every command opens it from then on.
    let out = stdout_of(sheaf().arg("accept-missing-wal").arg(&path));
    assert!(out.contains("are gone"), "{out}");
    let check = stdout_of(sheaf().arg("check").arg(&path));
    assert!(check.contains(": ok: "), "{check}");
    let info = stdout_of(sheaf().arg("info").arg(&path));
    assert!(
        info.contains("WAL needed      no"),
        "closed cleanly: {info}"
    );
    // Run again: nothing is missing, nothing changes.
    let again = stdout_of(sheaf().arg("accept-missing-wal").arg(&path));
    assert!(again.contains("not missing"), "{again}");
}

/// Runs `crash_child` on `path`: five durable commits, then an abort.
fn crashed_database(path: &Path) {
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env("SHEAF_CLI_CRASH_DB", path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child did not crash");
}

/// Byte offsets of the frames in a WAL segment (format 3: 32-byte
/// headers, the payload length at offset 4).
fn frame_offsets(segment: &[u8]) -> Vec<usize> {
    let mut at = 4096;
    let mut out = Vec::new();
    while at + 32 <= segment.len() && segment[at..at + 32].iter().any(|&b| b != 0) {
        out.push(at);
        let len = u32::from_le_bytes(segment[at + 4..at + 8].try_into().unwrap()) as usize;
        at += 32 + len;
    }
    out
}

#[test]
fn a_wal_damaged_in_the_middle_is_reported_then_salvaged() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.sheaf");
    crashed_database(&path);
    let wal_path = dir.path().join("damaged.sheaf-wal.0");
    let mut wal = std::fs::read(&wal_path).unwrap();
    let frames = frame_offsets(&wal);
    assert!(frames.len() >= 5, "{frames:?}");
    // The third commit from the end: two durable commits follow it.
    let damaged = frames[frames.len() - 3];
    wal[damaged + 32 + 2] ^= 0x20;
    std::fs::write(&wal_path, &wal).unwrap();

    fails(sheaf().arg("check").arg(&path), 1, "durable up to");
    fails(sheaf().arg("dump").arg(&path), 1, "`sheaf salvage-wal ");
    let out = stdout_of(sheaf().arg("salvage-wal").arg(&path));
    assert!(
        out.contains("salvaged:") && out.contains("were lost"),
        "{out}"
    );
    sheaf().arg("check").arg(&path).assert().success();
    let dump = stdout_of(sheaf().args(["dump", "--table", "users"]).arg(&path));
    assert_eq!(
        dump.lines().count(),
        2,
        "the commits before the damage: {dump}"
    );
    let out = stdout_of(sheaf().arg("salvage-wal").arg(&path));
    assert!(out.contains("no damage to salvage"), "{out}");
}

#[test]
fn check_passes_on_a_good_database_without_a_progress_bar_when_piped() {
    let _serial = serial();
    let f = fixture();
    let before = files(f.dir.path());
    sheaf()
        .arg("check")
        .arg(&f.path)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "ok: 3 column families, 9 tables, 31 entries",
        ))
        .stderr(predicate::str::is_empty());
    assert_eq!(files(f.dir.path()), before);
}

/// Copies the database's directory, flipping bytes in the middle of page
/// `page` of the data file.
fn corrupt_copy(f: &Fixture, page: u64, page_size: u64) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    for (name, mut bytes) in files(f.dir.path()) {
        if name == "test.sheaf" {
            let at = (page * page_size + page_size / 2) as usize;
            for b in &mut bytes[at..at + 8] {
                *b ^= 0x5A;
            }
        }
        std::fs::write(dir.path().join(&name), bytes).unwrap();
    }
    let path = dir.path().join("test.sheaf");
    (dir, path)
}

#[test]
fn a_corrupted_page_gives_exit_1_and_names_the_page() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("test.sheaf");
    make_db(&path).unwrap();
    {
        // Enough entries for many tree pages.
        let db = Database::open(&path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(USERS).unwrap();
            for k in 0..4000u64 {
                t.insert(format!("user{k:06}").as_str(), k).unwrap();
            }
        }
        tx.commit().unwrap();
        db.close().unwrap();
    }
    let f = Fixture { dir, path };
    let json: Json =
        serde_json::from_str(&stdout_of(sheaf().arg("info").arg("--json").arg(&f.path))).unwrap();
    let page_size = json["page_size"].as_u64().unwrap();
    let data = std::fs::read(&f.path).unwrap();
    let pages = data.len() as u64 / page_size;
    // Pages that were written (unwritten extent space reads as zeros).
    let written: Vec<u64> = (2..pages)
        .filter(|p| {
            let start = (p * page_size) as usize;
            data[start..start + page_size as usize]
                .iter()
                .any(|&b| b != 0)
        })
        .collect();
    assert!(written.len() > 20, "{} written pages", written.len());
    let step = (written.len() / 40).max(1);
    let (mut detected, mut named) = (0, 0);
    for &page in written.iter().step_by(step) {
        let (_keep, copy) = corrupt_copy(&f, page, page_size);
        let out = sheaf().arg("check").arg(&copy).output().unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!err.contains("panicked"), "page {page}: {err}");
        match out.status.code() {
            // An unreachable page (an old version, free space) is not read.
            Some(0) => assert!(err.is_empty(), "{err}"),
            Some(1) => {
                detected += 1;
                assert_eq!(err.lines().count(), 1, "{err}");
                assert!(err.contains("corruption found in page "), "{err}");
                if err.contains(&format!("corruption found in page {page}:")) {
                    named += 1;
                }
            }
            other => panic!("page {page}: exit {other:?}: {err}"),
        }
    }
    eprintln!(
        "{} written pages, {detected} flips detected, {named} named the flipped page",
        written.len()
    );
    assert!(detected >= 10, "{detected} corruptions detected");
    assert!(
        named >= 10,
        "only {named} of {detected} named the flipped page"
    );
}

#[test]
fn files_that_are_not_databases_give_exit_2() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let random = dir.path().join("random.bin");
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let noise: Vec<u8> = (0..65536)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&random, noise).unwrap();
    let empty = dir.path().join("empty.sheaf");
    std::fs::write(&empty, b"").unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "these are notes, not a database\n".repeat(300)).unwrap();
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "hello\n").unwrap();
    let missing = dir.path().join("missing.sheaf");
    for cmd in ["info", "check", "dump"] {
        for (file, msg) in [
            (&random, "not a sheafdb database"),
            (&text, "not a sheafdb database"),
            (&short, "not a sheafdb database"),
            (&empty, "the file is empty, not a sheafdb database"),
            (&missing, "no such file"),
        ] {
            fails(sheaf().arg(cmd).arg(file), 2, msg);
        }
        fails(sheaf().arg(cmd).arg(dir.path()), 2, "is a directory");
    }
    // Loading never overwrites a file that is not a database.
    let before = std::fs::read(&text).unwrap();
    fails(
        sheaf()
            .args([
                "load",
                "--table",
                "t",
                "--key-type",
                "u8",
                "--value-type",
                "u8",
            ])
            .arg(&text)
            .write_stdin(""),
        2,
        "not a sheafdb database",
    );
    assert_eq!(std::fs::read(&text).unwrap(), before);
}

#[test]
fn a_database_open_for_writing_is_reported_as_locked() {
    let _serial = serial();
    let f = fixture();
    let db = Database::open(&f.path).unwrap();
    for cmd in ["info", "check", "dump"] {
        fails(sheaf().arg(cmd).arg(&f.path), 2, "locked");
    }
    drop(db);
    sheaf().arg("info").arg(&f.path).assert().success();
}

#[test]
fn dump_renders_keys_and_values_by_type() {
    let _serial = serial();
    let f = fixture();
    let users = stdout_of(sheaf().args(["dump", "--table", "users"]).arg(&f.path));
    assert_eq!(
        users,
        "{\"key\":\"ada\",\"value\":36}\n{\"key\":\"bob\",\"value\":0}\n\
         {\"key\":\"comma, \\\"quoted\\\"\\nnewline\",\"value\":18446744073709551615}\n"
    );
    let events = stdout_of(sheaf().args(["dump", "--table", "events"]).arg(&f.path));
    assert_eq!(
        events.lines().next().unwrap(),
        "{\"key\":[1,\"a\\u0000b\"],\"value\":null}"
    );
    let flags = stdout_of(
        sheaf()
            .args([
                "dump", "--cf", "sets", "--table", "flags", "--format", "csv",
            ])
            .arg(&f.path),
    );
    assert_eq!(
        flags,
        "key,value\nnull,\"[true,\"\"x\"\",-170141183460469231731687303715884105728]\"\n\
         [null],\"[false,\"\"\u{1F600}\"\",0]\"\n\
         [3],\"[true,\"\",\"\",170141183460469231731687303715884105727]\"\n"
    );
    let samples = stdout_of(
        sheaf()
            .args(["dump", "--cf", "metrics", "--table", "samples"])
            .arg(&f.path),
    );
    assert!(
        samples.contains("{\"key\":[\"cpu\",-1],\"value\":0.1}"),
        "{samples}"
    );
    assert!(samples.contains("\"value\":\"NaN\""), "{samples}");
    assert!(samples.contains("\"value\":\"inf\""), "{samples}");
    assert!(samples.contains("\"value\":-0}"), "{samples}");
    // Vectors and arrays of fixed-width elements are JSON arrays.
    let vectors = stdout_of(
        sheaf()
            .args(["dump", "--cf", "metrics", "--table", "vectors"])
            .arg(&f.path),
    );
    assert_eq!(
        vectors,
        "{\"key\":[],\"value\":[[],[\"a\",\"\\u0000\"]]}\n\
         {\"key\":[1,2],\"value\":[[\"0001\",\"ff00\"],[\"é\",\",\"]]}\n\
         {\"key\":[65535],\"value\":[[\"0707\"],[\"\\\"\",\"\\n\"]]}\n"
    );
    // A user-defined type is shown as the hex of its bytes.
    let readings = stdout_of(
        sheaf()
            .args(["dump", "--cf", "sets", "--table", "readings"])
            .arg(&f.path),
    );
    assert_eq!(
        readings,
        "{\"key\":\"7ffffffb01\",\"value\":\"01fbffffff\"}\n{\"key\":\"8000001402\",\"value\":\"00\"}\n"
    );
    // A multimap table: one line per pair of a key and one of its values.
    let tags = stdout_of(
        sheaf()
            .args(["dump", "--cf", "sets", "--table", "tags"])
            .arg(&f.path),
    );
    assert_eq!(
        tags,
        "{\"key\":\"\",\"value\":[18446744073709551615,\"é\"]}\n\
         {\"key\":\"a\",\"value\":[0,\"a\\u0000\"]}\n\
         {\"key\":\"a\\u0000b\",\"value\":[1,\"x\"]}\n\
         {\"key\":\"a\\u0000b\",\"value\":[2,\"\"]}\n"
    );
    let hex = stdout_of(
        sheaf()
            .args(["dump", "--table", "users", "--format", "hex"])
            .arg(&f.path),
    );
    assert_eq!(
        hex.lines().take(2).collect::<Vec<_>>(),
        [
            "# cf \"default\" table \"users\" key \"str\" value \"u64\"",
            "616461 2400000000000000"
        ]
    );
}

#[test]
fn a_whole_dump_names_cf_and_table_on_every_line() {
    let _serial = serial();
    let f = fixture();
    let all = stdout_of(sheaf().arg("dump").arg(&f.path));
    let mut per_table = std::collections::BTreeMap::new();
    for line in all.lines() {
        let j: Json = serde_json::from_str(line).unwrap();
        let key = (
            j["cf"].as_str().unwrap().to_string(),
            j["table"].as_str().unwrap().to_string(),
        );
        assert!(j.get("key").is_some() && j.get("value").is_some(), "{line}");
        *per_table.entry(key).or_insert(0u64) += 1;
    }
    let expected: std::collections::BTreeMap<_, _> = TABLES
        .iter()
        .map(|(c, t, _, _, n)| ((c.to_string(), t.to_string()), *n))
        .collect();
    assert_eq!(per_table, expected);
    let one_cf = stdout_of(
        sheaf()
            .args(["dump", "--cf", "metrics", "--format", "csv"])
            .arg(&f.path),
    );
    assert!(one_cf.starts_with("cf,table,key,value\n"), "{one_cf}");
    assert_eq!(one_cf.lines().count(), 1 + 11);
    // Such a dump does not load into one table.
    let out = tempfile::tempdir().unwrap();
    let dst = out.path().join("dst.sheaf");
    fails(
        sheaf()
            .args([
                "load",
                "--table",
                "t",
                "--key-type",
                "u8",
                "--value-type",
                "u8",
            ])
            .arg(&dst)
            .write_stdin(all),
        2,
        "dump one table with --table",
    );
    fails(
        sheaf().args(["dump", "--cf", "nope"]).arg(&f.path),
        2,
        "no column family \"nope\"",
    );
    fails(
        sheaf().args(["dump", "--table", "nope"]).arg(&f.path),
        2,
        "no table \"nope\" in column family \"default\"",
    );
}

/// Raw (key, value) bytes of a table.
fn raw_entries(path: &Path, cf: &str, table: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let db = Database::open_read_only(path).unwrap();
    let cf = db.cf(cf).unwrap();
    let rx = db.begin_read().unwrap();
    let t = rx.open_untyped_table_in(&cf, table).unwrap();
    t.iter()
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            (k.value().to_vec(), v.value().to_vec())
        })
        .collect()
}

#[test]
fn dump_load_dump_round_trips_every_table_in_every_format() {
    let _serial = serial();
    let f = fixture();
    let out = tempfile::tempdir().unwrap();
    for (i, format) in ["jsonl", "csv", "hex"].into_iter().enumerate() {
        let dst = out.path().join(format!("copy{i}.sheaf"));
        for (cf, table, key_type, value_type, entries) in TABLES {
            let dump = |path: &Path| {
                stdout_of(
                    sheaf()
                        .args(["dump", "--cf", cf, "--table", table, "--format", format])
                        .arg(path),
                )
            };
            let first = dump(&f.path);
            let loaded = stdout_of(
                sheaf()
                    .args(["load", "--cf", cf, "--table", table, "--format", format])
                    .args(["--key-type", key_type, "--value-type", value_type])
                    .arg(&dst)
                    .write_stdin(first.clone()),
            );
            assert!(
                loaded.contains(&format!("loaded {entries} rows into table \"{table}\"")),
                "{loaded}"
            );
            let second = dump(&dst);
            assert_eq!(first, second, "{format} {cf}/{table}");
            // NaN keeps no payload through text; everything else is the
            // same bytes.
            if table != "samples" {
                assert_eq!(
                    raw_entries(&f.path, cf, table),
                    raw_entries(&dst, cf, table),
                    "{format} {cf}/{table}"
                );
            }
        }
        sheaf().arg("check").arg(&dst).assert().success();
    }
}

#[test]
fn load_uses_the_table_types_and_checks_its_input() {
    let _serial = serial();
    let f = fixture();
    // An existing table: its own types, no flags needed.
    let loaded = stdout_of(
        sheaf()
            .args(["load", "--table", "users"])
            .arg(&f.path)
            .write_stdin("{\"key\":\"zed\",\"value\":1}\n\n{\"key\":\"ada\",\"value\":37}\n"),
    );
    assert!(loaded.contains("loaded 2 rows"), "{loaded}");
    let users = stdout_of(sheaf().args(["dump", "--table", "users"]).arg(&f.path));
    assert!(users.contains("{\"key\":\"ada\",\"value\":37}"), "{users}");
    assert!(users.contains("{\"key\":\"zed\",\"value\":1}"), "{users}");
    // Types that differ from the table's.
    fails(
        sheaf()
            .args([
                "load",
                "--table",
                "users",
                "--key-type",
                "u64",
                "--value-type",
                "u64",
            ])
            .arg(&f.path)
            .write_stdin(""),
        2,
        "stores <str, u64>",
    );
    // A new table needs its types.
    fails(
        sheaf()
            .args(["load", "--table", "fresh"])
            .arg(&f.path)
            .write_stdin(""),
        2,
        "give --key-type and --value-type",
    );
    // Bad rows name their line; earlier transactions stay.
    let err = fails(
        sheaf()
            .args(["load", "--table", "users", "--batch", "1"])
            .arg(&f.path)
            .write_stdin("{\"key\":\"k1\",\"value\":1}\n{\"key\":\"k2\",\"value\":-1}\n"),
        2,
        "line 2: value:",
    );
    assert!(
        err.contains("1 row was committed before it, in 1 transaction"),
        "{err}"
    );
    for (format, input, msg) in [
        ("jsonl", "not json\n", "line 1: not JSON"),
        ("jsonl", "{\"key\":\"a\"}\n", "line 1: no \"value\" field"),
        (
            "jsonl",
            "{\"key\":1,\"value\":1}\n",
            "line 1: key: expected a string",
        ),
        ("csv", "k,v\n", "line 1: expected the header line key,value"),
        ("csv", "key,value\nonly\n", "line 2: expected 2 cells"),
        (
            "csv",
            "key,value\na,x\n",
            "line 2: value: \"x\" is not an integer",
        ),
        ("hex", "61 zz\n", "line 1: value:"),
        ("hex", "61 0100\n", "line 1: value: u64 needs 8 bytes"),
        // Binary input (`< /dev/zero` read one endless line into memory).
        ("jsonl", "\0\0\0\0", "line 1: reading the input: a NUL byte"),
        (
            "hex",
            "61 0100000000000000\n\0\n",
            "line 2: reading the input: a NUL byte",
        ),
    ] {
        fails(
            sheaf()
                .args(["load", "--table", "users", "--format", format])
                .arg(&f.path)
                .write_stdin(input),
            2,
            msg,
        );
    }
    sheaf().arg("check").arg(&f.path).assert().success();
}

#[test]
fn load_commits_in_batches_and_creates_what_is_missing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("new.sheaf");
    let input: String = (0..250u32)
        .map(|i| format!("{{\"key\":[{i},null],\"value\":\"{i:x}\"}}\n"))
        .collect();
    let loaded = stdout_of(
        sheaf()
            .args(["load", "--cf", "fresh", "--table", "t", "--batch", "100"])
            .args(["--key-type", "(u32, Option<str>)", "--value-type", "str"])
            .arg(&dst)
            .write_stdin(input),
    );
    assert_eq!(
        loaded,
        "loaded 250 rows into table \"t\" of column family \"fresh\" (3 transactions)\n"
    );
    let json: Json =
        serde_json::from_str(&stdout_of(sheaf().arg("info").arg("--json").arg(&dst))).unwrap();
    let cf = &json["column_families"][1];
    assert_eq!(cf["name"], "fresh");
    assert_eq!(cf["tables"][0]["key_type"], "(u32,Option<str>)");
    assert_eq!(cf["tables"][0]["entries"], 250);
    assert_eq!(json["clean"], true);
    // One transaction for everything.
    let loaded = stdout_of(
        sheaf()
            .args(["load", "--cf", "fresh", "--table", "t", "--batch", "0"])
            .arg(&dst)
            .write_stdin("{\"key\":[1000,\"x\"],\"value\":\"y\"}\n".repeat(3)),
    );
    assert!(
        loaded.contains("loaded 3 rows") && loaded.ends_with("(1 transaction)\n"),
        "{loaded}"
    );
}

#[test]
fn compact_and_backup_keep_the_data() {
    let _serial = serial();
    let f = fixture();
    let dest = f.dir.path().join("backup.sheaf");
    let before = stdout_of(sheaf().arg("dump").arg(&f.path));
    let out = stdout_of(sheaf().arg("compact").arg(&f.path));
    assert!(
        out.contains("compacted from") || out.contains("nothing to compact"),
        "{out}"
    );
    assert_eq!(stdout_of(sheaf().arg("dump").arg(&f.path)), before);
    sheaf().arg("check").arg(&f.path).assert().success();
    let out = stdout_of(sheaf().arg("backup").arg(&f.path).arg(&dest));
    assert!(
        out.contains("backed up to") && out.contains("entries"),
        "{out}"
    );
    // The backup is one file that dumps the same and checks clean; its
    // info says it replays nothing.
    assert!(dest.exists());
    let wal = f.dir.path().join("backup.sheaf-wal.0");
    assert!(!wal.exists(), "a backup has no WAL beside it");
    assert_eq!(stdout_of(sheaf().arg("dump").arg(&dest)), before);
    sheaf().arg("check").arg(&dest).assert().success();
    let info = stdout_of(sheaf().arg("info").arg("--json").arg(&dest));
    assert!(info.contains("\"clean\": true"), "{info}");
    // A second backup onto it is refused.
    fails(
        sheaf().arg("backup").arg(&f.path).arg(&dest),
        2,
        "already exists",
    );
    // Errors about the files come first.
    fails(
        sheaf()
            .arg("backup")
            .arg(f.dir.path().join("none"))
            .arg(&dest),
        2,
        "no such file",
    );
    fails(
        sheaf().arg("backup").arg(&f.path).arg(&f.path),
        2,
        "already exists",
    );
}

#[test]
fn a_closed_pipe_ends_a_dump_quietly() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.sheaf");
    {
        let db = Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(USERS).unwrap();
            for k in 0..50_000u64 {
                t.insert(format!("user{k:08}").as_str(), k).unwrap();
            }
        }
        tx.commit().unwrap();
        db.close().unwrap();
    }
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sheaf"))
        .args(["dump", "--table", "users"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The read end is dropped here: later writes fail with EPIPE.
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A table whose type name is longer than 65,535 characters (the library
/// takes any length): `info` lists it instead of panicking on a format
/// width. Found by an adversarial probe.
#[test]
fn info_lists_a_table_with_a_very_long_type_name() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.sheaf");
    let long = "x".repeat(70_000);
    {
        let db = Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_untyped_table("t", &long, "u8")
            .unwrap()
            .insert(b"k".as_slice(), b"\x01".as_slice())
            .unwrap();
        tx.commit().unwrap();
        db.close().unwrap();
    }
    let text = stdout_of(sheaf().arg("info").arg(&path));
    let row = (text.lines())
        .find(|l| l.contains(&long))
        .unwrap_or_else(|| {
            panic!(
                "no row names the type in\n{}",
                &text[..text.len().min(2000)]
            )
        });
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, ["t", long.as_str(), "u8", "1"]);
}

/// A row whose key and value both encode to no bytes (`""` in a
/// `<str, ()>` set) dumps in hex as a line of one space; the load took
/// that for a blank line, dropped the row and still reported success (an
/// adversarial probe).
#[test]
fn a_hex_row_of_empty_key_and_value_survives_dump_and_load() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("s.sheaf"), dir.path().join("d.sheaf"));
    {
        let db = Database::create(&src).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx
                .open_table(TableDefinition::<&str, ()>::new("set"))
                .unwrap();
            t.insert("", ()).unwrap();
            t.insert("a", ()).unwrap();
        }
        tx.commit().unwrap();
        db.close().unwrap();
    }
    let dump = |path: &Path| {
        stdout_of(
            sheaf()
                .args(["dump", "--table", "set", "--format", "hex"])
                .arg(path),
        )
    };
    let first = dump(&src);
    let loaded = stdout_of(
        sheaf()
            .args(["load", "--table", "set", "--format", "hex"])
            .args(["--key-type", "str", "--value-type", "()"])
            .arg(&dst)
            .write_stdin(first.clone()),
    );
    assert!(loaded.contains("loaded 2 rows"), "{loaded}");
    assert_eq!(dump(&dst), first);
}

// Findings of the session-33 CLI probe, each failing before its fix.

/// A load refused before its first row (no such table and no types, or a
/// first row that does not parse) creates no file and no column family.
#[test]
fn a_refused_load_creates_nothing() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.sheaf");
    fails(
        sheaf()
            .args(["load", db.to_str().unwrap(), "--table", "t"])
            .write_stdin("{\"key\":1,\"value\":1}\n"),
        2,
        "give --key-type and --value-type",
    );
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
    sheaf()
        .args(["load", db.to_str().unwrap(), "--table", "t"])
        .args(["--key-type", "u64", "--value-type", "u64"])
        .write_stdin("{\"key\":1,\"value\":1}\n")
        .assert()
        .success();
    let names = |d: &Path| files(d).into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    let before = names(dir.path());
    for (cf, types) in [("typo", false), ("typo2", true)] {
        let mut cmd = sheaf();
        cmd.args(["load", db.to_str().unwrap(), "--cf", cf, "--table", "t"]);
        if types {
            cmd.args(["--key-type", "u64", "--value-type", "u64"]);
            fails(cmd.write_stdin("garbage\n"), 2, "nothing was loaded");
        } else {
            fails(cmd.write_stdin("{\"key\":1,\"value\":1}\n"), 2, "no table");
        }
    }
    assert_eq!(names(dir.path()), before, "a refused load made files");
    let info = stdout_of(sheaf().args(["info", db.to_str().unwrap()]));
    assert!(!info.contains("typo"), "{info}");
}

/// Floats out of the type's range are refused like integers out of
/// range, not stored as an infinity or zero.
#[test]
fn a_float_out_of_range_is_refused() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("f.sheaf");
    let load = |ty: &str, value: &str| {
        let mut cmd = sheaf();
        cmd.args(["load", db.to_str().unwrap(), "--table", ty])
            .args(["--key-type", "u8", "--value-type", ty])
            .write_stdin(format!("{{\"key\":1,\"value\":{value}}}\n"));
        cmd
    };
    for (ty, value) in [("f32", "1e39"), ("f32", "1e-50"), ("f64", "\"1e999\"")] {
        fails(&mut load(ty, value), 2, "out of the type's range");
    }
    for (ty, value) in [
        ("f32", "3.4e38"),
        ("f32", "0e5"),
        ("f64", "\"inf\""),
        ("f64", "-0.0"),
    ] {
        load(ty, value).assert().success();
    }
}

/// A quoted CSV cell that never closes ends at the record size bound, not
/// by taking the whole input into memory: here, a closed quote is missing
/// in an input that ends, and the error names the record's line.
#[test]
fn an_unclosed_csv_quote_is_a_clear_error() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.sheaf");
    fails(
        sheaf()
            .args([
                "load",
                db.to_str().unwrap(),
                "--table",
                "t",
                "--format",
                "csv",
            ])
            .args(["--key-type", "u64", "--value-type", "u64"])
            .write_stdin("key,value\n1,\"open\n2,more\n"),
        2,
        "line 2: a quoted cell is never closed",
    );
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
}

/// An error reported to a closed stderr exits with its own status, not a
/// panic of `eprintln!` (101).
#[test]
fn an_error_to_a_closed_stderr_keeps_its_exit_status() {
    let _s = serial();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sheaf"))
        .args(["check", "/nonexistent/x.sheaf"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take()); // the read end closes: writes get EPIPE
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(2), "{status:?}");
}

/// A hex dump loaded into a table of other types is refused: the bytes of
/// an `i64`/`f64` table decoded silently as `u64`/`i64` before (the same
/// widths), although the dump's header names its types.
#[test]
fn a_hex_dump_of_other_types_is_refused() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.sheaf"), dir.path().join("b.sheaf"));
    sheaf()
        .args(["load", a.to_str().unwrap(), "--table", "t"])
        .args(["--key-type", "i64", "--value-type", "f64"])
        .write_stdin("{\"key\":-1,\"value\":-1.5}\n")
        .assert()
        .success();
    let hex = stdout_of(sheaf().args([
        "dump",
        a.to_str().unwrap(),
        "--table",
        "t",
        "--format",
        "hex",
    ]));
    let load_hex = |key: &str, value: &str| {
        let mut cmd = sheaf();
        cmd.args([
            "load",
            b.to_str().unwrap(),
            "--table",
            "t",
            "--format",
            "hex",
        ])
        .args(["--key-type", key, "--value-type", value])
        .write_stdin(hex.clone());
        cmd
    };
    fails(
        &mut load_hex("u64", "i64"),
        2,
        "key type \"i64\" and value type \"f64\"",
    );
    assert!(!b.exists(), "a refused load created the file");
    load_hex("i64", "f64").assert().success();
    let again = stdout_of(sheaf().args([
        "dump",
        b.to_str().unwrap(),
        "--table",
        "t",
        "--format",
        "hex",
    ]));
    assert_eq!(again, hex);
}

/// A table name with a newline is shown quoted and escaped on one line
/// of `info`, like a column family name (before, it broke the listing
/// into a line that looked like another table; a session-33 probe).
#[test]
fn a_table_name_with_a_newline_stays_on_one_info_line() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nl.sheaf");
    {
        const T: sheafdb::TableDefinition<u64, u64> =
            sheafdb::TableDefinition::new("first\nu64  u64  7");
        let db = sheafdb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(T).unwrap().insert(1, 1).unwrap();
        tx.commit().unwrap();
        db.close().unwrap();
    }
    let text = stdout_of(sheaf().arg("info").arg(&path));
    assert!(text.contains("\"first\\nu64  u64  7\""), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with("u64  u64  7")),
        "a name broke a line:\n{text}"
    );
}
