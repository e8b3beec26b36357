//! Disk full on a real file (issue 12): a child process runs under a
//! file-size limit (`setrlimit(RLIMIT_FSIZE)`, with `SIGXFSZ` ignored so a
//! write past the limit fails with `EFBIG` instead of killing it) and
//! commits until a commit fails. It must fail cleanly: an error, no panic,
//! no abort. Reopened without the limit, the database holds a prefix of
//! the commits that includes every acknowledged one, passes
//! `check_integrity()` and accepts new commits.
//!
//! The child is this test binary, re-run with `--ignored --exact
//! full_child`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sheafdb::{Database, TableDefinition};

const ROWS: TableDefinition<u64, &[u8]> = TableDefinition::new("rows");
const FILE: &str = "f.sheaf";

fn builder() -> sheafdb::Builder {
    Database::builder()
        .wal_segment_bytes(256 * 1024)
        .wal_record_max_bytes(64 * 1024)
        .checkpoint_triggers(512 * 1024, 1 << 20, 4 << 20)
        .checkpoint_interval(Duration::from_millis(20))
}

fn value(seq: u64) -> Vec<u8> {
    vec![(seq % 251) as u8; 700 + (seq % 5) as usize * 1000]
}

/// The child: limits its file size, then commits rows `1..` (Immediate)
/// until a commit fails; prints `ack n` for each and `failed: …` at the
/// end, and exits normally.
#[test]
#[ignore = "run by a_full_disk_fails_commits_cleanly as a child process"]
fn full_child() {
    let dir = std::env::var("SHEAF_FULL_DIR").expect("SHEAF_FULL_DIR");
    let limit: u64 = std::env::var("SHEAF_FULL_LIMIT").unwrap().parse().unwrap();
    // 0: only the background checkpointer runs (its failure poisons the
    // database, and the next commit says so).
    let every: u64 = std::env::var("SHEAF_FULL_CHECKPOINT_EVERY")
        .unwrap()
        .parse()
        .unwrap();
    // SAFETY: plain libc calls with valid arguments, before any thread of
    // this process opens the file.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let rl = libc::rlimit {
            rlim_cur: limit as libc::rlim_t,
            rlim_max: limit as libc::rlim_t,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &rl), 0);
    }
    let mut out = std::io::stdout().lock();
    let db = match builder().create(Path::new(&dir).join(FILE)) {
        Ok(db) => db,
        Err(e) => {
            writeln!(out, "failed: open: {e}").unwrap();
            return;
        }
    };
    for seq in 1u64.. {
        let r = (|| {
            let tx = db.begin_write()?;
            tx.open_table(ROWS)?.insert(seq, value(seq).as_slice())?;
            tx.commit()?;
            if every > 0 && seq % every == 0 {
                db.checkpoint()?;
            }
            Ok::<(), sheafdb::Error>(())
        })();
        match r {
            Ok(()) => writeln!(out, "ack {seq}").unwrap(),
            Err(e) => {
                writeln!(out, "failed: {e}").unwrap();
                break;
            }
        }
        out.flush().unwrap();
    }
    // Dropping the database after the failure must not panic either (its
    // close tries a checkpoint, which fails again).
    drop(db);
    writeln!(out, "exited").unwrap();
}

fn run_child(dir: &Path, limit: u64, every: u64) -> (std::process::ExitStatus, Vec<String>) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "full_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SHEAF_FULL_DIR", dir)
        .env("SHEAF_FULL_LIMIT", limit.to_string())
        .env("SHEAF_FULL_CHECKPOINT_EVERY", every.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines: Vec<String> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .collect();
    let status = child.wait().unwrap();
    (status, lines)
}

#[test]
fn a_full_disk_fails_commits_cleanly() {
    for (limit, every) in [
        (1 << 20, 50),
        (3 << 20, 7),
        ((5 << 20) + 12345, 0),
        (2 << 20, 0),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (status, lines) = run_child(dir.path(), limit, every);
        let ctx = format!("limit {limit}, explicit checkpoint every {every}");
        assert!(
            status.success(),
            "{ctx}: the child died: {status}; {lines:?}"
        );
        let failed = lines.iter().find(|l| l.contains("failed: "));
        assert!(
            failed.is_some(),
            "{ctx}: no commit failed: {:?}",
            lines.last()
        );
        assert!(
            lines.iter().any(|l| l.contains("exited")),
            "{ctx}: {lines:?}"
        );
        // The highest acknowledged row (the harness may print on the
        // same line as the first one).
        let acked = lines
            .iter()
            .filter_map(|l| l.find("ack ").map(|i| &l[i + 4..]))
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        assert!(
            acked > 10,
            "{ctx}: only {acked} commits before the disk was full"
        );
        eprintln!("{ctx}: {acked} commits, then {}", failed.unwrap());

        // Without the limit: a prefix holding every acknowledged commit.
        let db = builder().open(dir.path().join(FILE)).unwrap();
        let rx = db.begin_read().unwrap();
        let t = rx.open_table(ROWS).unwrap();
        let keys: Vec<u64> = t.iter().unwrap().map(|e| e.unwrap().0.value()).collect();
        let n = keys.len() as u64;
        assert_eq!(keys, (1..=n).collect::<Vec<_>>(), "{ctx}: not a prefix");
        assert!(n >= acked, "{ctx}: {n} rows, {acked} acknowledged");
        // The commit in flight when the disk filled may be there or not
        // (its WAL record may have been written before the failure).
        assert!(
            n <= acked + 1,
            "{ctx}: {n} rows, but only {} attempted",
            acked + 1
        );
        for k in [1, n / 2, n].into_iter().filter(|&k| k > 0) {
            assert_eq!(t.get(k).unwrap().unwrap().value(), value(k).as_slice());
        }
        drop((t, rx));
        db.check_integrity().unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(ROWS)
            .unwrap()
            .insert(n + 1, value(n + 1).as_slice())
            .unwrap();
        tx.commit().unwrap();
        db.checkpoint().unwrap();
        db.close().unwrap();
        let db = builder().open(dir.path().join(FILE)).unwrap();
        let rx = db.begin_read().unwrap();
        assert_eq!(rx.open_table(ROWS).unwrap().len().unwrap(), n + 1);
    }
}
