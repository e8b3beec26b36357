//! `sheaf check FILE`: `check_integrity_with` over the whole database
//! (system pages and every column family), with a progress bar of pages
//! on a terminal.

use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};

use crate::info::{plural, thousands};
use crate::{open_read_only, show_progress, CliResult, Failure};

pub fn run(path: &Path) -> CliResult {
    let db = open_read_only(path)?;
    let bar = if show_progress() {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("checking {bar:40} {pos}/{len} pages ({eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let result = db.check_integrity_with(&mut |done, total| {
        if bar.length() != Some(total) {
            bar.set_length(total);
        }
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let report = result.map_err(|e| Failure::db(format!("{}", path.display()), e))?;
    let line = format!(
        "{}: ok: {}, {}, {}, {} in use, {} free\n",
        path.display(),
        plural(report.cfs, "column family", "column families"),
        plural(report.tables, "table", "tables"),
        plural(report.entries, "entry", "entries"),
        plural(report.pages_in_use, "page", "pages"),
        thousands(report.pages_free)
    );
    crate::dump::write_all(line.as_bytes())
}
