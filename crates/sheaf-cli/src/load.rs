//! `sheaf load FILE --cf NAME --table NAME [--key-type T --value-type T]
//! [--format jsonl|csv|hex] [--batch ROWS] < input`: inserts (or
//! replaces) the entries of a one-table dump, in transactions of `ROWS`
//! rows (0: one transaction), with a progress bar of rows on a terminal.
//!
//! The table's types come from the table when it exists (the flags, if
//! given, must name the same types: `TableTypeMismatch` otherwise) and
//! from the flags when it is created. On a bad row, the rows of the
//! transactions committed before it stay; the message says how many.

use std::io::{self, BufRead, IsTerminal};
use std::path::Path;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use serde_json::Value as Json;
use sheafdb::table::dynamic::DynType;
use sheafdb::{ColumnFamily, Error};

use crate::info::{plural, thousands};
use crate::render::{unhex, Side, TableCodec};
use crate::{csv, open_or_create, show_progress, CliResult, Failure, Format};

/// What to load, from the command line.
pub struct Request<'a> {
    pub file: &'a Path,
    pub cf: &'a str,
    pub table: &'a str,
    /// Key and value type names given with `--key-type`/`--value-type`.
    pub types: Option<(String, String)>,
    pub format: Format,
    pub batch: u64,
}

/// One input row: the line it starts on, its key and value encodings.
type Row = (u64, Vec<u8>, Vec<u8>);

/// A type name as the catalog writes it, when it is a built-in type.
fn canonical(name: &str, side: &str) -> String {
    if let Some((k, v)) = sheafdb::table::dynamic::multimap_types(name) {
        // A multimap's pairs: its key and value types, each a key type.
        return format!(
            "multimap({},{})",
            canonical(k, "key"),
            canonical(v, "value")
        );
    }
    match DynType::parse(name) {
        Some(t) => t.to_string(),
        None => {
            crate::warn(&format!(
                "sheaf: note: {side} type {name:?} is not a built-in type: its {side}s are read \
                 as hex bytes"
            ));
            name.to_string()
        }
    }
}

/// The key and value type names to open the table with.
fn table_types(cf: &ColumnFamily, req: &Request<'_>) -> CliResult<(String, String)> {
    let rx = cf
        .begin_read()
        .map_err(|e| Failure::db("starting a snapshot", e))?;
    match (rx.table_info(req.table), &req.types) {
        (Ok(_), Some((k, v))) | (Err(Error::TableNotFound(_)), Some((k, v))) => {
            Ok((canonical(k, "key"), canonical(v, "value")))
        }
        (Ok(info), None) => Ok((info.key_type, info.value_type)),
        (Err(Error::TableNotFound(_)), None) => Err(Failure::new(format!(
            "column family {:?} has no table {:?}: give --key-type and --value-type to create it",
            req.cf, req.table
        ))),
        (Err(e), _) => Err(Failure::db(format!("reading table {:?}", req.table), e)),
    }
}

/// The key and value type names of a table not in the database yet (its
/// file or column family does not exist): given, or the load is refused.
fn new_table_types(req: &Request<'_>) -> CliResult<(String, String)> {
    match &req.types {
        Some((k, v)) => Ok((canonical(k, "key"), canonical(v, "value"))),
        None => Err(Failure::new(format!(
            "column family {:?} has no table {:?}: give --key-type and --value-type to create it",
            req.cf, req.table
        ))),
    }
}

pub fn run(req: &Request<'_>) -> CliResult {
    // Nothing is created before the table's types are known and the first
    // row parses: a refused load used to leave a new file or column family
    // behind.
    let existing = if crate::names_existing(req.file) {
        Some(crate::open_read_write(req.file)?)
    } else {
        None
    };
    let found = match &existing {
        Some(db) => match db.cf(req.cf) {
            Ok(cf) => Some(cf),
            Err(Error::CfNotFound(_)) => None,
            Err(e) => return Err(Failure::db(format!("column family {:?}", req.cf), e)),
        },
        None => None,
    };
    let (key_type, value_type) = match &found {
        Some(cf) => table_types(cf, req)?,
        None => new_table_types(req)?,
    };
    let codec = TableCodec::new(&key_type, &value_type);
    if io::stdin().is_terminal() {
        crate::warn("sheaf: reading rows from the terminal (end with Ctrl-D)");
    }
    let stdin = io::stdin().lock();
    let types = (key_type.as_str(), value_type.as_str());
    let mut rows = rows(stdin, req.format, codec.clone(), types).peekable();
    if let Some(Err(msg)) = rows.peek() {
        return Err(Failure::new(format!("{msg}; nothing was loaded")));
    }
    let db = match existing {
        Some(db) => db,
        None => open_or_create(req.file)?,
    };
    let cf = match found {
        Some(cf) => cf,
        None => db
            .cf_or_create(req.cf)
            .map_err(|e| Failure::db(format!("column family {:?}", req.cf), e))?,
    };
    let bar = progress();
    let mut total = 0u64;
    let mut commits = 0u64;
    let committed = |total, commits| {
        format!(
            "{} committed before it, in {}",
            plural(total, "row was", "rows were"),
            plural(commits, "transaction", "transactions")
        )
    };
    loop {
        let tx = cf
            .begin_write()
            .map_err(|e| Failure::db("starting a transaction", e))?;
        let mut n = 0u64;
        let mut done = false;
        {
            let mut table = tx
                .open_untyped_table(req.table, &key_type, &value_type)
                .map_err(|e| Failure::db(format!("opening table {:?}", req.table), e))?;
            while req.batch == 0 || n < req.batch {
                let Some(row) = rows.next() else {
                    done = true;
                    break;
                };
                let (line, k, v) = row
                    .map_err(|msg| Failure::new(format!("{msg}; {}", committed(total, commits))))?;
                let (k, v) = codec.stored(k, v);
                table.insert(k.as_slice(), v.as_slice()).map_err(|e| {
                    Failure::new(format!("line {line}: {e}; {}", committed(total, commits)))
                })?;
                n += 1;
                bar.inc(1);
            }
        }
        // The first transaction commits even when empty: it creates the table.
        if n > 0 || commits == 0 {
            tx.commit().map_err(|e| {
                Failure::db(format!("committing; {}", committed(total, commits)), e)
            })?;
            commits += 1;
            total += n;
        }
        if done {
            break;
        }
    }
    bar.finish_and_clear();
    db.close()
        .map_err(|e| Failure::db(format!("closing {}", req.file.display()), e))?;
    let line = format!(
        "loaded {} into table {:?} of column family {:?} ({})\n",
        plural(total, "row", "rows"),
        req.table,
        req.cf,
        plural(commits, "transaction", "transactions")
    );
    crate::dump::write_all(line.as_bytes())
}

fn progress() -> ProgressBar {
    if !show_progress() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    let style =
        ProgressStyle::with_template("{spinner} loading: {human_pos} rows, {rate} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .with_key(
                "rate",
                |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{} rows/s", thousands(state.per_sec() as u64));
                },
            );
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// The rows of `input` in `format`, encoded with `codecs`.
fn rows<'a, R: BufRead + 'a>(
    input: R,
    format: Format,
    codecs: TableCodec,
    types: (&str, &str),
) -> Box<dyn Iterator<Item = Result<Row, String>> + 'a> {
    match format {
        Format::Jsonl => Box::new(jsonl_rows(input, codecs)),
        Format::Csv => Box::new(csv_rows(input, codecs)),
        Format::Hex => {
            let types = (types.0.to_string(), types.1.to_string());
            Box::new(hex_rows(input, codecs, types))
        }
    }
}

/// The key and value type names of a hex dump's `# cf "…" table "…" key
/// "…" value "…"` line (`None` for another comment).
fn header_types(comment: &str) -> Option<(String, String)> {
    let mut rest = comment.trim_start();
    let mut names = Vec::with_capacity(4);
    for word in ["cf", "table", "key", "value"] {
        rest = rest.strip_prefix(word)?.trim_start();
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<String>();
        names.push(values.next()?.ok()?);
        rest = rest.get(values.byte_offset()..)?.trim_start();
    }
    let value = names.pop()?;
    let key = names.pop()?;
    Some((key, value))
}

/// True if two catalog type names name the same type (spelled alike, or
/// parsed to the same built-in type).
fn same_type(a: &str, b: &str) -> bool {
    a == b
        || matches!((DynType::parse(a), DynType::parse(b)), (Some(x), Some(y)) if x.to_string() == y.to_string())
}

/// Numbered lines of `input`, blank ones (spaces only) skipped.
fn lines<R: BufRead>(input: R) -> impl Iterator<Item = Result<(u64, String), String>> {
    lines_skipping(input, |l| l.trim().is_empty())
}

/// Numbered lines of `input`, those `skip` says are blank left out.
fn lines_skipping<R: BufRead>(
    input: R,
    skip: fn(&str) -> bool,
) -> impl Iterator<Item = Result<(u64, String), String>> {
    let mut input = input;
    let mut n = 0u64;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        n += 1;
        let mut text = String::new();
        // JSON lines and hex rows never hold a raw NUL.
        match csv::read_text_line(&mut input, &mut text, false) {
            Ok(0) => None,
            Ok(_) => {
                if text.ends_with('\n') {
                    text.pop();
                    if text.ends_with('\r') {
                        text.pop();
                    }
                }
                Some(Ok((n, text)))
            }
            Err(e) => {
                failed = true;
                Some(Err(format!("line {n}: reading the input: {e}")))
            }
        }
    })
    .filter(move |r| !matches!(r, Ok((_, l)) if skip(l)))
}

fn jsonl_rows<R: BufRead>(
    input: R,
    codec: TableCodec,
) -> impl Iterator<Item = Result<Row, String>> {
    let (kc, vc, vside) = codec.into_parts();
    lines(input).map(move |l| {
        let (n, text) = l?;
        let at = |msg: String| format!("line {n}: {msg}");
        let j: Json = serde_json::from_str(&text).map_err(|e| at(format!("not JSON: {e}")))?;
        let Json::Object(obj) = j else {
            return Err(at("expected an object with \"key\" and \"value\"".into()));
        };
        if obj.contains_key("cf") || obj.contains_key("table") {
            return Err(at(
                "the line names a cf and table (a dump of several tables); dump one table \
                 with --table to load it"
                    .into(),
            ));
        }
        let field = |name: &str| {
            obj.get(name)
                .ok_or_else(|| at(format!("no \"{name}\" field")))
        };
        let k = kc
            .parse_json(Side::Key, field("key")?)
            .map_err(|e| at(format!("key: {e}")))?;
        let v = vc
            .parse_json(vside, field("value")?)
            .map_err(|e| at(format!("value: {e}")))?;
        Ok((n, k, v))
    })
}

fn csv_rows<R: BufRead>(input: R, codec: TableCodec) -> impl Iterator<Item = Result<Row, String>> {
    let (kc, vc, vside) = codec.into_parts();
    let mut reader = csv::Reader::new(input);
    let mut header_seen = false;
    std::iter::from_fn(move || loop {
        let record = match reader.next_record()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let n = record.line;
        let at = |msg: &str| format!("line {n}: {msg}");
        if !header_seen {
            header_seen = true;
            match record.cells.as_slice() {
                [k, v] if k == "key" && v == "value" => continue,
                [c, t, ..] if c == "cf" && t == "table" => {
                    return Some(Err(at(
                        "a dump of several tables (cf,table,key,value); dump one table with \
                         --table to load it",
                    )))
                }
                _ => return Some(Err(at("expected the header line key,value"))),
            }
        }
        return Some(match record.cells.as_slice() {
            [k, v] => kc
                .parse_cell(Side::Key, k)
                .map_err(|e| at(&format!("key: {e}")))
                .and_then(|k| {
                    vc.parse_cell(vside, v)
                        .map(|v| (n, k, v))
                        .map_err(|e| at(&format!("value: {e}")))
                }),
            cells => Err(at(&format!("expected 2 cells, found {}", cells.len()))),
        });
    })
}

/// Hex rows; keys and values of built-in types must decode as their type.
fn hex_rows<R: BufRead>(
    input: R,
    codec: TableCodec,
    (key_type, value_type): (String, String),
) -> impl Iterator<Item = Result<Row, String>> {
    let (kc, vc, vside) = codec.into_parts();
    let mut tables = 0;
    // Only an empty line is blank: a row whose key and value both encode
    // to no bytes is dumped as a line of one space (an adversarial probe:
    // the load skipped it and reported success).
    lines_skipping(input, str::is_empty).filter_map(move |l| {
        let (n, text) = match l {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        let at = |msg: String| format!("line {n}: {msg}");
        if let Some(comment) = text.strip_prefix('#') {
            if comment.trim_start().starts_with("cf ") {
                tables += 1;
                if tables > 1 {
                    return Some(Err(at(
                        "a second table begins (a dump of several tables); dump one table \
                         with --table to load it"
                            .into(),
                    )));
                }
                // The dump's types must be the table's: hex bytes of another
                // type of the same width decoded silently as this one.
                if let Some((k, v)) = header_types(comment) {
                    if !same_type(&k, &key_type) || !same_type(&v, &value_type) {
                        return Some(Err(at(format!(
                            "the dump's table has key type {k:?} and value type {v:?}, the \
                             table loaded into {key_type:?} and {value_type:?}"
                        ))));
                    }
                }
            }
            return None;
        }
        // The first space ends the key: an empty key's line starts with it.
        let line = text.trim_end();
        let (k, v) = line.split_once(' ').unwrap_or((line, ""));
        let (k, v) = (k.trim(), v.trim());
        let k = unhex(k).and_then(|k| kc.check(Side::Key, &k).map(|()| k));
        let v = unhex(v).and_then(|v| vc.check(vside, &v).map(|()| v));
        Some(match (k, v) {
            (Ok(k), Ok(v)) => Ok((n, k, v)),
            (Err(e), _) => Err(at(format!("key: {e}"))),
            (_, Err(e)) => Err(at(format!("value: {e}"))),
        })
    })
}
