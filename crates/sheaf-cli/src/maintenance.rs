//! `sheaf compact FILE`, `sheaf backup FILE DEST` and `sheaf salvage-wal
//! FILE`.
//!
//! Each subcommand calls into the library in exactly one small function
//! ([`compact_db`]: `Database::compact`; [`backup_db`]:
//! `Database::backup_to_with`, online, from a read-only open). A library
//! without the operation (`Error::Unsupported`) gives one "not supported
//! by this version of sheafdb" line and exit status 2.

use std::path::Path;

use sheafdb::{Database, Error};

use crate::info::thousands;
use crate::{
    open_accepting_missing_wal, open_read_only, open_read_write, open_salvaging, CliResult, Failure,
};

/// The failure of an operation this version of sheafdb lacks.
fn unsupported(what: &str) -> Failure {
    Failure::new(format!(
        "{what} is not supported by this version of sheafdb"
    ))
}

/// The one call into the library for `compact`: `Ok(true)` if the file
/// shrank.
fn compact_db(db: &Database) -> CliResult<bool> {
    match db.compact() {
        Err(Error::Unsupported(_)) => Err(unsupported("compact")),
        r => r
            .map(|report| report.reclaimed_bytes() > 0)
            .map_err(|e| Failure::db("compacting", e)),
    }
}

pub fn compact(path: &Path) -> CliResult {
    let db = open_read_write(path)?;
    let before = db.file_info().map(|i| i.file_bytes).unwrap_or(0);
    let shrank = compact_db(&db)?;
    db.close()
        .map_err(|e| Failure::db(format!("closing {}", path.display()), e))?;
    let after = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let line = match shrank {
        true => format!(
            "{}: compacted from {} to {} bytes\n",
            path.display(),
            thousands(before),
            thousands(after)
        ),
        false => format!("{}: nothing to compact\n", path.display()),
    };
    crate::dump::write_all(line.as_bytes())
}

/// The one call into the library for `backup`, with a progress callback
/// `(entries copied, entries to copy)`; returns the backup's entries and
/// size in bytes.
fn backup_db(
    db: &Database,
    dest: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> CliResult<(u64, u64)> {
    let r = db.backup_to_with(dest, |p| progress(p.entries_copied, p.entries_total));
    match r {
        Err(Error::Unsupported(_)) => Err(unsupported("backup")),
        r => r
            .map(|report| (report.entries, report.file_bytes))
            .map_err(|e| Failure::db("backing up", e)),
    }
}

pub fn backup(path: &Path, dest: &Path) -> CliResult {
    let db = open_read_only(path)?;
    if dest.exists() {
        return Err(Failure::new(format!(
            "{}: already exists; backup writes a new file",
            dest.display()
        )));
    }
    let bar = match crate::show_progress() {
        true => indicatif::ProgressBar::new(0).with_style(
            indicatif::ProgressStyle::with_template(
                "backing up {bar:40} {pos}/{len} entries ({eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        ),
        false => indicatif::ProgressBar::hidden(),
    };
    let done = backup_db(&db, dest, &mut |copied, total| {
        bar.set_length(total);
        bar.set_position(copied);
    });
    bar.finish_and_clear();
    let (entries, bytes) = done?;
    let line = format!(
        "{}: backed up to {} ({} entries, {} bytes)\n",
        path.display(),
        dest.display(),
        thousands(entries),
        thousands(bytes)
    );
    crate::dump::write_all(line.as_bytes())
}

/// `accept-missing-wal`: one read-write open as of the last checkpoint of
/// a database whose WAL is missing (the open makes a new WAL and marks the
/// base as needing it again), then a close.
pub fn accept_missing_wal(path: &Path) -> CliResult {
    let shown = path.display();
    // Only a database refused for its missing WAL is opened this way: any
    // other refusal is reported as every command reports it.
    match Database::open_read_only(path) {
        Ok(db) => {
            drop(db);
            let line = format!("{shown}: its WAL is not missing; nothing was changed\n");
            return crate::dump::write_all(line.as_bytes());
        }
        Err(e) if e.is_missing_wal() => {}
        Err(_) => {
            open_read_only(path)?;
        }
    }
    let db = open_accepting_missing_wal(path)?;
    let generation = db
        .file_info()
        .map_err(|e| Failure::db(format!("reading {shown}"), e))?
        .generation;
    db.close()
        .map_err(|e| Failure::db(format!("closing {shown}"), e))?;
    let line = format!(
        "{shown}: opened as of its last checkpoint (now generation {generation}); the \
         commits after it, which only the missing WAL held, are gone\n"
    );
    crate::dump::write_all(line.as_bytes())
}

/// `salvage-wal`: one open that keeps the WAL up to damage in its middle
/// (the library checkpoints there, so later opens agree), then a close.
pub fn salvage_wal(path: &Path) -> CliResult {
    let db = open_salvaging(path)?;
    let line = match db.wal_damage() {
        Some(damage) => format!("{}: salvaged: {damage}\n", path.display()),
        None => format!("{}: the WAL has no damage to salvage\n", path.display()),
    };
    db.close()
        .map_err(|e| Failure::db(format!("closing {}", path.display()), e))?;
    crate::dump::write_all(line.as_bytes())
}
