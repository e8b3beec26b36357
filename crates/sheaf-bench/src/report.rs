//! Results of one suite run: collection, the stdout table and the JSON file.
//!
//! A [`Report`] owns every measurement of a run in the order the suite made
//! them. The table groups them by (workload, metric) into rows with one
//! column per engine (sheafdb first when present), marks the best value of a
//! row with `*`, and adds sheafdb's ratio to the best peer. Missing values
//! carry a note (e.g. "needs sheafdb column families") instead of a number.
//!
//! This module knows nothing about engines' APIs or how values were measured.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::engines::{EngineKind, Result};

/// Which direction of a metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Throughputs.
    Higher,
    /// Latencies and sizes.
    Lower,
}

impl Better {
    fn arrow(self) -> &'static str {
        match self {
            Better::Higher => "↑",
            Better::Lower => "↓",
        }
    }
}

/// One number (or a marker explaining why there is none).
#[derive(Clone, Debug, Serialize)]
pub struct Measurement {
    /// What ran, e.g. "bulk load 1000000 pairs (one txn)".
    pub workload: String,
    /// Engine name.
    pub engine: String,
    /// What was measured, e.g. "throughput" or "p99".
    pub metric: String,
    /// The value; `None` when not measured (see `note`).
    pub value: Option<f64>,
    /// Unit of `value`.
    pub unit: String,
    /// Which direction is better.
    pub better: Better,
    /// Why `value` is missing, or a caveat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Facts about the machine, measured in the same run.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Logical CPUs available to the process.
    pub cpus: usize,
    /// Median latency of a 4 KiB write + fdatasync in the bench directory.
    pub fsync_p50_us: f64,
}

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points in x order.
    pub points: Vec<(f64, f64)>,
}

/// A line chart the suite wants drawn with `--plot`.
#[derive(Clone, Debug)]
pub struct Chart {
    /// File name (no directory), ending in `.png`.
    pub file: String,
    /// Title above the chart.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Whether x is drawn on a log2 scale (thread counts).
    pub log_x: bool,
    /// The lines.
    pub series: Vec<Series>,
}

/// Everything one suite run produced.
pub struct Report {
    /// Suite name.
    pub suite: String,
    /// The command line that produced it.
    pub command: String,
    /// Machine facts.
    pub machine: Machine,
    /// Engines in column order.
    pub engines: Vec<EngineKind>,
    /// Free-text notes printed under the header (layouts, caveats).
    pub notes: Vec<String>,
    /// All measurements in the order they were made.
    pub results: Vec<Measurement>,
    /// Charts for `--plot`.
    pub charts: Vec<Chart>,
    /// Engines that failed, with the error (the run exits non-zero).
    pub failures: Vec<String>,
}

#[derive(Serialize)]
struct JsonDoc<'a> {
    suite: &'a str,
    command: &'a str,
    machine: &'a Machine,
    engines: Vec<JsonEngine>,
    notes: &'a [String],
    results: &'a [Measurement],
}

#[derive(Serialize)]
struct JsonEngine {
    name: &'static str,
    durability: &'static str,
    /// The engine's `SyncMode::Relaxed`, if it has one.
    relaxed: Option<&'static str>,
}

impl Report {
    /// An empty report for `suite` over `engines` (reordered: sheafdb first).
    pub fn new(suite: &str, command: String, machine: Machine, engines: &[EngineKind]) -> Self {
        let mut engines = engines.to_vec();
        engines.sort();
        engines.dedup();
        Report {
            suite: suite.to_string(),
            command,
            machine,
            engines,
            notes: Vec::new(),
            results: Vec::new(),
            charts: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// Records that `engine` failed; the run will exit non-zero.
    pub fn fail(&mut self, engine: EngineKind, err: &dyn std::fmt::Display) {
        eprintln!("[{}] {engine}: FAILED: {err}", self.suite);
        let text = format!("{engine} failed in `{}`: {err}", self.suite);
        self.notes.push(text.clone());
        self.failures.push(text);
    }

    /// Records a measured value.
    pub fn add(
        &mut self,
        workload: &str,
        engine: EngineKind,
        metric: &str,
        value: f64,
        unit: &str,
        better: Better,
    ) {
        assert!(value.is_finite(), "{workload}/{metric}: non-finite value");
        self.results.push(Measurement {
            workload: workload.to_string(),
            engine: engine.name().to_string(),
            metric: metric.to_string(),
            value: Some(value),
            unit: unit.to_string(),
            better,
            note: None,
        });
    }

    /// Records that a cell was not measured, and why.
    pub fn add_missing(
        &mut self,
        workload: &str,
        engine: EngineKind,
        metric: &str,
        unit: &str,
        better: Better,
        why: &str,
    ) {
        self.results.push(Measurement {
            workload: workload.to_string(),
            engine: engine.name().to_string(),
            metric: metric.to_string(),
            value: None,
            unit: unit.to_string(),
            better,
            note: Some(why.to_string()),
        });
    }

    /// Adds a note printed under the header.
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    /// Writes the JSON document to `path`.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        let doc = JsonDoc {
            suite: &self.suite,
            command: &self.command,
            machine: &self.machine,
            engines: self
                .engines
                .iter()
                .map(|k| JsonEngine {
                    name: k.name(),
                    durability: k.durability_note(),
                    relaxed: k.relaxed(),
                })
                .collect(),
            notes: &self.notes,
            results: &self.results,
        };
        let text = serde_json::to_string_pretty(&doc)?;
        std::fs::write(path, text + "\n")?;
        Ok(())
    }

    /// The header: machine, engines' durability settings, notes.
    pub fn header(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "== suite `{}` ==", self.suite);
        let _ = writeln!(s, "command: {}", self.command);
        let _ = writeln!(
            s,
            "machine: {} cpus; fdatasync p50 (4 KiB write) {:.0} µs — the floor of one durable commit",
            self.machine.cpus, self.machine.fsync_p50_us
        );
        for k in &self.engines {
            let relaxed = k.relaxed().map(|r| format!("; relaxed: {r}"));
            let _ = writeln!(
                s,
                "  {:<8} {}{}",
                k.name(),
                k.durability_note(),
                relaxed.unwrap_or_default()
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }

    /// The results table (see the module doc).
    pub fn table(&self) -> String {
        let rows = self.row_keys();
        let with_ratio = self.engines.contains(&EngineKind::Sheafdb) && self.engines.len() > 1;
        let mut header = vec!["workload".to_string(), "metric".to_string()];
        header.extend(self.engines.iter().map(|k| k.name().to_string()));
        if with_ratio {
            header.push("sheafdb/best peer".to_string());
        }
        let mut lines = vec![header];
        for key in &rows {
            lines.push(self.render_row(key, with_ratio));
        }
        let mut out = layout_columns(&lines);
        out.push_str(&self.missing_notes());
        out.push_str(
            "(* best in row; ↑ higher is better, ↓ lower is better; \
             ratio = sheafdb value / best peer value)\n",
        );
        out
    }

    fn row_keys(&self) -> Vec<RowKey> {
        let mut seen = BTreeSet::new();
        let mut rows = Vec::new();
        for m in &self.results {
            let key = RowKey {
                workload: m.workload.clone(),
                metric: m.metric.clone(),
                unit: m.unit.clone(),
                better: m.better,
            };
            if seen.insert((key.workload.clone(), key.metric.clone())) {
                rows.push(key);
            }
        }
        rows
    }

    fn value_of(&self, key: &RowKey, engine: EngineKind) -> Option<&Measurement> {
        self.results.iter().rev().find(|m| {
            m.engine == engine.name() && m.workload == key.workload && m.metric == key.metric
        })
    }

    fn render_row(&self, key: &RowKey, with_ratio: bool) -> Vec<String> {
        let values: Vec<Option<f64>> = self
            .engines
            .iter()
            .map(|&k| self.value_of(key, k).and_then(|m| m.value))
            .collect();
        let best = best_of(values.iter().flatten().copied(), key.better);
        let mut cells = vec![
            key.workload.clone(),
            format!("{} [{}] {}", key.metric, key.unit, key.better.arrow()),
        ];
        for (i, &k) in self.engines.iter().enumerate() {
            cells.push(match values[i] {
                Some(v) => {
                    let star = if Some(v) == best { "*" } else { "" };
                    format!("{}{star}", format_value(v, &key.unit))
                }
                None if self.value_of(key, k).is_some() => "N/A".to_string(),
                None => "-".to_string(),
            });
        }
        if with_ratio {
            cells.push(self.ratio_cell(key, &values));
        }
        cells
    }

    fn ratio_cell(&self, key: &RowKey, values: &[Option<f64>]) -> String {
        let sheaf = self
            .engines
            .iter()
            .position(|&k| k == EngineKind::Sheafdb)
            .and_then(|i| values[i]);
        let peers = self
            .engines
            .iter()
            .zip(values)
            .filter(|(k, _)| **k != EngineKind::Sheafdb)
            .filter_map(|(_, v)| *v);
        match (sheaf, best_of(peers, key.better)) {
            (Some(s), Some(p)) if p != 0.0 => format!("{:.2}x", s / p),
            _ => "-".to_string(),
        }
    }

    fn missing_notes(&self) -> String {
        let mut seen = BTreeSet::new();
        let mut out = String::new();
        for m in self.results.iter().filter(|m| m.value.is_none()) {
            let why = m.note.clone().unwrap_or_default();
            if seen.insert((m.engine.clone(), why.clone())) {
                let _ = writeln!(out, "N/A for {}: {why}", m.engine);
            }
        }
        out
    }
}

struct RowKey {
    workload: String,
    metric: String,
    unit: String,
    better: Better,
}

fn best_of(values: impl Iterator<Item = f64>, better: Better) -> Option<f64> {
    values.reduce(|a, b| match better {
        Better::Higher => a.max(b),
        Better::Lower => a.min(b),
    })
}

/// Formats `v` for a table cell: bytes in binary units, everything else
/// with three significant digits and a k/M/G suffix for large numbers.
pub fn format_value(v: f64, unit: &str) -> String {
    if unit == "bytes" {
        return format_bytes(v);
    }
    let (scaled, suffix) = if v.abs() >= 1e9 {
        (v / 1e9, "G")
    } else if v.abs() >= 1e6 {
        (v / 1e6, "M")
    } else if v.abs() >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    format!("{}{suffix}", three_digits(scaled))
}

fn three_digits(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".to_string()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.01 {
        format!("{v:.2}")
    } else {
        format!("{v:.2e}")
    }
}

fn format_bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < UNITS.len() {
        x /= 1024.0;
        i += 1;
    }
    format!("{} {}", three_digits(x), UNITS[i])
}

fn layout_columns(lines: &[Vec<String>]) -> String {
    let cols = lines.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            lines
                .iter()
                .filter_map(|l| l.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let mut text = String::new();
        for (c, cell) in line.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c < 2 {
                let _ = write!(text, "{cell}{}  ", " ".repeat(pad));
            } else {
                let _ = write!(text, "{}{cell}  ", " ".repeat(pad));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        let machine = Machine {
            cpus: 2,
            fsync_p50_us: 100.0,
        };
        let engines = [EngineKind::Redb, EngineKind::Sheafdb, EngineKind::Lmdb];
        let mut r = Report::new("peers", "x".into(), machine, &engines);
        r.add(
            "load",
            EngineKind::Redb,
            "throughput",
            100.0,
            "ops/s",
            Better::Higher,
        );
        r.add(
            "load",
            EngineKind::Sheafdb,
            "throughput",
            50.0,
            "ops/s",
            Better::Higher,
        );
        r.add(
            "load",
            EngineKind::Lmdb,
            "throughput",
            200.0,
            "ops/s",
            Better::Higher,
        );
        r.add("lat", EngineKind::Redb, "p50", 3.0, "µs", Better::Lower);
        r.add_missing(
            "lat",
            EngineKind::Sheafdb,
            "p50",
            "µs",
            Better::Lower,
            "needs CFs",
        );
        r
    }

    #[test]
    fn sheafdb_is_first_and_best_is_marked() {
        let r = sample();
        assert_eq!(r.engines[0], EngineKind::Sheafdb);
        let t = r.table();
        assert!(t.contains("200*"), "{t}");
        assert!(t.contains("0.25x"), "{t}");
        assert!(t.contains("N/A for sheafdb: needs CFs"), "{t}");
    }

    #[test]
    fn json_has_the_documented_shape() {
        let r = sample();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        r.write_json(&path).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["suite"], "peers");
        assert_eq!(v["machine"]["cpus"], 2);
        assert_eq!(v["results"][0]["better"], "higher");
        assert_eq!(v["results"].as_array().unwrap().len(), 5);
        assert!(v["results"][4]["value"].is_null());
    }

    #[test]
    fn values_format_readably() {
        assert_eq!(format_value(1_234_567.0, "ops/s"), "1.23M");
        assert_eq!(format_value(12_345.0, "ops/s"), "12.3k");
        assert_eq!(format_value(1234.0, "ops/s"), "1234");
        assert_eq!(format_value(0.5, "µs"), "0.50");
        assert_eq!(format_value(3.0 * 1024.0 * 1024.0, "bytes"), "3.00 MiB");
    }
}
