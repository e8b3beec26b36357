//! `sheaf dump FILE [--cf NAME] [--table NAME] [--format jsonl|csv|hex]`:
//! the entries of one table, or of every table, from one read-only
//! snapshot of the whole database, in key order.
//!
//! With `--table`, the output is exactly what `load` reads: `{"key": …,
//! "value": …}` lines, a `key,value` CSV, or `KEYHEX VALUEHEX` lines
//! (after a `# cf … table … key … value …` comment). Without it, every
//! table (of `--cf`, or of every column family) is written, and each
//! JSON line or CSV record also names its `cf` and `table`; hex output
//! starts each table with its comment line.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use sheafdb::{ColumnFamily, ReadTransaction, TableInfo};

use crate::render::{hex, Side, TableCodec};
use crate::{csv, open_read_only, CliResult, Failure, Format};

/// Writes `bytes` to stdout. A closed pipe (`sheaf dump … | head`) ends
/// the output quietly.
pub fn write_all(bytes: &[u8]) -> CliResult {
    let mut out = io::stdout().lock();
    finish(out.write_all(bytes).and_then(|()| out.flush()))
}

/// The result of writing to stdout: a closed pipe is not a failure.
fn finish(r: io::Result<()>) -> CliResult {
    match r {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::new(format!("writing the output: {e}"))),
        Ok(()) => Ok(()),
    }
}

/// Why a dump stopped: the output failed, or the database did.
enum Stop {
    Output(io::Error),
    Db(Failure),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Stop {
        Stop::Output(e)
    }
}

/// The tables to dump: (column family, table).
fn selection(
    db: &sheafdb::Database,
    rx: &ReadTransaction,
    cf: Option<&str>,
    table: Option<&str>,
) -> CliResult<Vec<(ColumnFamily, TableInfo)>> {
    let cf_names = match (cf, table) {
        (Some(name), _) => vec![name.to_string()],
        (None, Some(_)) => vec!["default".to_string()],
        (None, None) => db
            .list_cfs()
            .map_err(|e| Failure::db("listing column families", e))?,
    };
    let mut out = Vec::new();
    for name in cf_names {
        let handle = db
            .cf(&name)
            .map_err(|_| Failure::new(format!("no column family {name:?}")))?;
        match table {
            Some(t) => {
                let info = rx.table_info_in(&handle, t).map_err(|e| match e {
                    sheafdb::Error::TableNotFound(_) => {
                        Failure::new(format!("no table {t:?} in column family {name:?}"))
                    }
                    e => Failure::db(format!("reading table {t:?}"), e),
                })?;
                out.push((handle, info));
            }
            None => {
                let infos = rx
                    .list_table_info_in(&handle)
                    .map_err(|e| Failure::db(format!("listing the tables of {name:?}"), e))?;
                out.extend(infos.into_iter().map(|i| (handle.clone(), i)));
            }
        }
    }
    Ok(out)
}

pub fn run(path: &Path, cf: Option<&str>, table: Option<&str>, format: Format) -> CliResult {
    let db = open_read_only(path)?;
    let rx = db
        .begin_read()
        .map_err(|e| Failure::db("starting a snapshot", e))?;
    let tables = selection(&db, &rx, cf, table)?;
    let named = table.is_none();
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let result = (|| -> Result<(), Stop> {
        if format == Format::Csv {
            let header: &[&str] = match named {
                true => &["cf", "table", "key", "value"],
                false => &["key", "value"],
            };
            out.write_all(csv::line(header).as_bytes())?;
        }
        for (cf, info) in &tables {
            dump_table(&rx, cf, info, format, named, &mut out)?;
        }
        out.flush()?;
        Ok(())
    })();
    match result {
        Ok(()) => Ok(()),
        Err(Stop::Output(e)) => finish(Err(e)),
        Err(Stop::Db(f)) => {
            let _ = out.flush();
            Err(f)
        }
    }
}

fn dump_table(
    rx: &ReadTransaction,
    cf: &ColumnFamily,
    info: &TableInfo,
    format: Format,
    named: bool,
    out: &mut impl Write,
) -> Result<(), Stop> {
    let context = || format!("table {:?} of column family {:?}", info.name, cf.name());
    let db_err = |e| Stop::Db(Failure::db(context(), e));
    let table = rx.open_untyped_table_in(cf, &info.name).map_err(db_err)?;
    let codec = TableCodec::new(&info.key_type, &info.value_type);
    let (kc, vc, vside) = (&codec.key, &codec.value, codec.value_side());
    if format == Format::Hex {
        let q = |s: &str| serde_json::Value::from(s).to_string();
        writeln!(
            out,
            "# cf {} table {} key {} value {}",
            q(cf.name()),
            q(&info.name),
            q(&info.key_type),
            q(&info.value_type)
        )?;
    }
    let prefix = named.then(|| {
        let mut p = String::from("{\"cf\":");
        p.push_str(&serde_json::Value::from(cf.name()).to_string());
        p.push_str(",\"table\":");
        p.push_str(&serde_json::Value::from(info.name.as_str()).to_string());
        p.push(',');
        p
    });
    let mut line = String::new();
    for entry in table.iter().map_err(db_err)? {
        let (k, v) = entry.map_err(db_err)?;
        let (k, v) = codec.shown(k.value(), v.value()).map_err(db_err)?;
        let k: &[u8] = &k;
        line.clear();
        match format {
            Format::Jsonl => {
                line.push_str(prefix.as_deref().unwrap_or("{"));
                line.push_str("\"key\":");
                kc.json(Side::Key, k, &mut line).map_err(db_err)?;
                line.push_str(",\"value\":");
                vc.json(vside, v, &mut line).map_err(db_err)?;
                line.push_str("}\n");
            }
            Format::Csv => {
                let key = kc.cell(Side::Key, k).map_err(db_err)?;
                let value = vc.cell(vside, v).map_err(db_err)?;
                line = match named {
                    true => csv::line(&[cf.name(), &info.name, &key, &value]),
                    false => csv::line(&[&key, &value]),
                };
            }
            Format::Hex => {
                line.push_str(&hex(k));
                line.push(' ');
                line.push_str(&hex(v));
                line.push('\n');
            }
        }
        out.write_all(line.as_bytes())?;
    }
    Ok(())
}
