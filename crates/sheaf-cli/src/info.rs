//! `sheaf info FILE [--json]`: what `Database::file_info`,
//! `ColumnFamily::stats` and the table catalog say about a file.

use std::io::Write;
use std::path::Path;

use serde_json::{json, Value as Json};
use sheafdb::{CfStats, Database, FileInfo, TableInfo};

use crate::{open_read_only, CliResult, Failure};

/// One column family: its statistics and its tables.
struct CfReport {
    name: String,
    stats: CfStats,
    tables: Vec<TableInfo>,
}

fn gather(db: &Database) -> sheafdb::Result<(FileInfo, Vec<CfReport>)> {
    let file = db.file_info()?;
    let rx = db.begin_read()?;
    let mut cfs = Vec::new();
    for name in db.list_cfs()? {
        let cf = db.cf(&name)?;
        cfs.push(CfReport {
            stats: cf.stats()?,
            tables: rx.list_table_info_in(&cf)?,
            name,
        });
    }
    Ok((file, cfs))
}

pub fn run(path: &Path, as_json: bool) -> CliResult {
    let db = open_read_only(path)?;
    let (file, cfs) =
        gather(&db).map_err(|e| Failure::db(format!("reading {}", path.display()), e))?;
    let text = if as_json {
        let mut s =
            serde_json::to_string_pretty(&to_json(path, &file, &cfs)).map_err(Failure::new)?;
        s.push('\n');
        s
    } else {
        to_text(path, &file, &cfs)
    };
    crate::dump::write_all(text.as_bytes())
}

fn to_json(path: &Path, f: &FileInfo, cfs: &[CfReport]) -> Json {
    let cfs: Vec<Json> = cfs
        .iter()
        .map(|c| {
            let tables: Vec<Json> = c
                .tables
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "key_type": t.key_type,
                        "value_type": t.value_type,
                        "entries": t.entries,
                    })
                })
                .collect();
            json!({
                "name": c.name,
                "tables": tables,
                "entries": c.stats.entries,
                "pages_in_use": c.stats.pages_in_use,
                "extents": c.stats.extents,
                "extent_bytes": c.stats.extent_bytes,
                "dirty_bytes": c.stats.dirty_bytes,
                "buffered_bytes": c.stats.buffered_bytes,
            })
        })
        .collect();
    json!({
        "file": path.display().to_string(),
        "format_version": f.format_version,
        "page_size": f.page_size,
        "file_bytes": f.file_bytes,
        "recorded_file_bytes": f.recorded_file_bytes,
        "wal_bytes": f.wal_bytes,
        "wal_segments": f.wal_segments,
        "generation": f.generation,
        "replay_start_lsn": f.replay_start_lsn,
        "wal_end_lsn": f.wal_end_lsn,
        "clean": f.clean,
        "replayed_records": f.replayed_records,
        "wal_required": f.wal_required,
        "column_families": cfs,
    })
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A byte count, short: `512 bytes`, `1.0 MiB`.
fn short(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut x = n as f64 / 1024.0;
    let mut unit = 0;
    while x >= 1024.0 && unit + 1 < UNITS.len() {
        x /= 1024.0;
        unit += 1;
    }
    format!("{x:.1} {}", UNITS[unit])
}

/// A byte count for people: `1,048,576 bytes (1.0 MiB)`.
fn bytes(n: u64) -> String {
    if n < 1024 {
        return short(n);
    }
    format!("{} bytes ({})", thousands(n), short(n))
}

pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// `s` as one cell of the table listing: quoted and escaped (as the
/// column family names are) if it holds a control character, so a table
/// named with a newline cannot break the layout (a session-33 probe).
fn one_line(s: &str) -> String {
    match s.chars().any(char::is_control) {
        true => format!("{s:?}"),
        false => s.to_string(),
    }
}

/// One row of the table listing: name, key and value types padded to
/// their column's width, entries right-aligned. Padded by hand: a format
/// width over 65,535 panics, and a type name may be longer than that.
fn table_line(row: &[String; 4], widths: &[usize; 4]) -> String {
    let pad = |cell: &str, width: usize| " ".repeat(width.saturating_sub(cell.chars().count()));
    let mut line = String::new();
    for (cell, &width) in row[..3].iter().zip(widths) {
        line.push_str("  ");
        line.push_str(cell);
        line.push_str(&pad(cell, width));
    }
    line.push_str("  ");
    line.push_str(&pad(&row[3], widths[3]));
    line.push_str(&row[3]);
    line
}

fn to_text(path: &Path, f: &FileInfo, cfs: &[CfReport]) -> String {
    let mut out = Vec::new();
    let w = &mut out;
    let _ = writeln!(w, "file            {}", path.display());
    let _ = writeln!(
        w,
        "format          version {}, page size {}",
        f.format_version,
        thousands(u64::from(f.page_size))
    );
    let _ = writeln!(w, "data file       {}", bytes(f.file_bytes));
    let _ = writeln!(
        w,
        "WAL             {} in {}",
        bytes(f.wal_bytes),
        plural(f.wal_segments, "segment file", "segment files")
    );
    let _ = writeln!(
        w,
        "superblock      generation {}, WAL replay starts at LSN {}, log ends at LSN {}",
        f.generation, f.replay_start_lsn, f.wal_end_lsn
    );
    let close = if f.clean {
        "clean (an open replays no WAL record)".to_string()
    } else {
        format!(
            "not clean: an open replays {}",
            plural(f.replayed_records, "WAL record", "WAL records")
        )
    };
    let _ = writeln!(w, "last close      {close}");
    let needed = match f.wal_required {
        true => "yes: commits since the last checkpoint may be only in the WAL",
        false => "no: the data file alone holds every commit (closed cleanly)",
    };
    let _ = writeln!(w, "WAL needed      {needed}");
    for c in cfs {
        let s = &c.stats;
        let _ = writeln!(w);
        let _ = writeln!(
            w,
            "column family {:?}: {}, {}, {} in use, {} ({})",
            c.name,
            plural(s.tables, "table", "tables"),
            plural(s.entries, "entry", "entries"),
            plural(s.pages_in_use, "page", "pages"),
            plural(s.extents, "extent", "extents"),
            short(s.extent_bytes)
        );
        if s.dirty_bytes > 0 || s.buffered_bytes > 0 {
            let _ = writeln!(
                w,
                "  not yet checkpointed: {} dirty, {} buffered",
                short(s.dirty_bytes),
                short(s.buffered_bytes)
            );
        }
        if c.tables.is_empty() {
            continue;
        }
        let rows: Vec<[String; 4]> = c
            .tables
            .iter()
            .map(|t| {
                [
                    one_line(&t.name),
                    one_line(&t.key_type),
                    one_line(&t.value_type),
                    thousands(t.entries),
                ]
            })
            .collect();
        let header = ["table", "key", "value", "entries"].map(String::from);
        let mut widths = [0usize; 4];
        for row in std::iter::once(&header).chain(&rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&header).chain(&rows) {
            let line = table_line(row, &widths);
            let _ = writeln!(w, "{line}");
        }
    }
    String::from_utf8(out).unwrap_or_default()
}
