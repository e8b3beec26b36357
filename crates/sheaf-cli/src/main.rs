//! `sheaf`: the command line of sheafdb. Inspects (`info`), checks
//! (`check`), dumps and loads (`dump`, `load`) database files, through
//! sheafdb's public API only.
//!
//! Exit codes: 0 success, 1 the database is corrupted (what and where is
//! printed), 2 anything else failed (the file could not be opened, bad
//! arguments or input, a feature this version of sheafdb lacks). Every
//! error is one line on stderr.

mod check;
mod csv;
mod dump;
mod info;
mod load;
mod maintenance;
mod render;

use std::fmt;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use sheafdb::{Database, Error};

#[derive(Parser)]
#[command(
    name = "sheaf",
    version,
    arg_required_else_help = true,
    about = "Inspect, check, dump and load sheafdb databases",
    after_help = "Exit status: 0 success, 1 the database is corrupted, 2 any other failure \
                  (cannot open, bad arguments or input, unsupported)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the file's format, sizes, superblock, WAL and column families
    /// with their tables (opens read-only).
    Info {
        /// The database file.
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check the integrity of every column family: checksums, tree order,
    /// page ownership, space accounting (opens read-only). Exit status 1
    /// if the database is corrupted.
    Check {
        /// The database file.
        file: PathBuf,
    },
    /// Write the entries of tables to stdout, rendered by their key and
    /// value types (opens read-only).
    Dump {
        /// The database file.
        file: PathBuf,
        /// Only this column family (default: every one).
        #[arg(long, value_name = "NAME")]
        cf: Option<String>,
        /// Only this table (of --cf, or of the default column family).
        #[arg(long, value_name = "NAME")]
        table: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Jsonl)]
        format: Format,
    },
    /// Insert entries read from stdin (as `dump --table` writes them) into
    /// a table, creating the database, column family and table if needed.
    Load {
        /// The database file (created if missing).
        file: PathBuf,
        /// Column family to load into.
        #[arg(long, value_name = "NAME", default_value = "default")]
        cf: String,
        /// Table to load into.
        #[arg(long, value_name = "NAME")]
        table: String,
        /// Key type name, e.g. u64, str, "(u64,str)" (required to create
        /// the table; checked against an existing one).
        #[arg(long, value_name = "TYPE", requires = "value_type")]
        key_type: Option<String>,
        #[arg(
            long,
            value_name = "TYPE",
            requires = "key_type",
            help = "Value type name, e.g. bytes, \"Option<u32>\""
        )]
        value_type: Option<String>,
        /// Input format.
        #[arg(long, value_enum, default_value_t = Format::Jsonl)]
        format: Format,
        /// Rows per transaction (0: the whole input in one transaction).
        #[arg(long, value_name = "ROWS", default_value_t = 100_000)]
        batch: u64,
    },
    /// Shrink the file by moving pages down and truncating it.
    Compact {
        /// The database file.
        file: PathBuf,
    },
    /// Open a database whose WAL is damaged in the middle (`check` and
    /// every open report it as corruption), keeping the log up to the
    /// damage; the commits after it are given up for good. Copy the files
    /// first if they matter.
    SalvageWal {
        /// The database file.
        file: PathBuf,
    },
    /// Open a database whose WAL is missing (deleted, or the data file
    /// copied without it: every open refuses it) as of its last
    /// checkpoint; the commits after it, which only the WAL held, are
    /// given up for good. Put the WAL files back instead if you have them.
    AcceptMissingWal {
        /// The database file.
        file: PathBuf,
    },
    /// Copy the database, consistently, to a new file while it stays in
    /// use.
    Backup {
        /// The database file.
        file: PathBuf,
        /// Where to write the copy (must not exist).
        dest: PathBuf,
    },
}

/// How `dump` writes and `load` reads entries.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One JSON object per line: {"key": …, "value": …}.
    Jsonl,
    /// A header line, then one record per entry; composite types are JSON.
    Csv,
    /// One line per entry: key and value bytes in hex, space-separated.
    Hex,
}

/// A failure: the message (one line) and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

/// Exit code: the database is corrupted.
pub const CORRUPTED: u8 = 1;
/// Exit code: anything else failed.
pub const FAILED: u8 = 2;

impl Failure {
    pub fn new(message: impl fmt::Display) -> Failure {
        Failure {
            code: FAILED,
            message: message.to_string(),
        }
    }

    /// A library error, with what was being done: corruption gives exit
    /// code 1 and names the place.
    pub fn db(context: impl fmt::Display, e: Error) -> Failure {
        match e {
            Error::Corrupted { what, location } => Failure {
                code: CORRUPTED,
                message: format!("{context}: corruption found in {location}: {what}"),
            },
            other => Failure::new(format!("{context}: {other}")),
        }
    }
}

pub type CliResult<T = ()> = Result<T, Failure>;

/// What can be said about `path` before opening it, in one clear line.
fn check_file(path: &Path) -> CliResult {
    let shown = path.display();
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(Failure::new(format!("{shown}: no such file")))
        }
        Err(e) => Err(Failure::new(format!("{shown}: {e}"))),
        Ok(m) if m.is_dir() => Err(Failure::new(format!(
            "{shown}: is a directory, not a database file"
        ))),
        Ok(m) if m.len() == 0 => Err(Failure::new(format!(
            "{shown}: the file is empty, not a sheafdb database"
        ))),
        Ok(_) => Ok(()),
    }
}

/// Why an open failed, in one line.
fn open_failure(path: &Path, e: Error) -> Failure {
    let shown = path.display();
    match e {
        Error::DatabaseAlreadyOpen => Failure::new(format!(
            "{shown}: the database is locked: another process has it open (for writing, \
             or for reading while this command needs to write)"
        )),
        Error::NotADatabase(why) => {
            // The library's reason starts with the file name (and may
            // repeat "not a sheafdb database"): keep what follows.
            let prefix = path
                .file_name()
                .map(|n| format!("{}: ", n.to_string_lossy()))
                .unwrap_or_default();
            let why = why.strip_prefix(prefix.as_str()).unwrap_or(&why);
            let why = why.strip_prefix("not a sheafdb database: ").unwrap_or(why);
            Failure::new(format!("{shown}: not a sheafdb database ({why})"))
        }
        e => {
            // A WAL damaged in its middle: name the command that salvages it.
            let salvageable = e.is_salvageable_wal_damage();
            let missing_wal = e.is_missing_wal();
            let e = match e {
                Error::Corrupted { what, location } if salvageable => {
                    let what = format!("{what}; `sheaf salvage-wal {shown}` does that");
                    Error::Corrupted { what, location }
                }
                Error::WalMismatch(what) if missing_wal => Error::WalMismatch(format!(
                    "{what}; `sheaf accept-missing-wal {shown}` does that"
                )),
                e => e,
            };
            Failure::db(format!("cannot open {shown}"), e)
        }
    }
}

/// Opens an existing database read-only: a shared lock, nothing written,
/// the WAL replayed in memory only.
pub fn open_read_only(path: &Path) -> CliResult<Database> {
    check_file(path)?;
    Database::open_read_only(path).map_err(|e| open_failure(path, e))
}

/// Opens an existing database for writing.
pub fn open_read_write(path: &Path) -> CliResult<Database> {
    check_file(path)?;
    Database::open(path).map_err(|e| open_failure(path, e))
}

/// Opens an existing database for writing, keeping its WAL only up to
/// damage in its middle (`Builder::salvage_damaged_wal`).
pub fn open_salvaging(path: &Path) -> CliResult<Database> {
    check_file(path)?;
    Database::builder()
        .salvage_damaged_wal(true)
        .open(path)
        .map_err(|e| open_failure(path, e))
}

/// Opens an existing database for writing as of its last checkpoint when
/// its WAL is missing (`Builder::accept_missing_wal`).
pub fn open_accepting_missing_wal(path: &Path) -> CliResult<Database> {
    check_file(path)?;
    Database::builder()
        .accept_missing_wal(true)
        .open(path)
        .map_err(|e| open_failure(path, e))
}

/// Opens a database for writing, creating it if the file is missing.
/// An empty file (say, from `mktemp`) is made a database too.
pub fn open_or_create(path: &Path) -> CliResult<Database> {
    if names_existing(path) {
        return open_read_write(path);
    }
    Database::create(path).map_err(|e| open_failure(path, e))
}

/// True if `path` names something to open rather than a database to
/// create: anything but a missing path or an empty file.
pub fn names_existing(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() || m.len() > 0)
}

/// A command line clap refuses: help and version as clap prints them;
/// any other error as one line, exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        _ => {
            // The first paragraph, on one line (a list of missing
            // arguments follows its heading on the next lines).
            let text = e.render().to_string();
            let first: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.is_empty())
                .collect();
            let first = first.join(" ");
            let first = first.strip_prefix("error: ").unwrap_or(&first);
            warn(&format!("sheaf: {first} (see 'sheaf --help')"));
            ExitCode::from(FAILED)
        }
    }
}

/// Writes `line` to stderr, ignoring a failure: `eprintln!` panics when
/// stderr is a closed pipe (exit 101 and a backtrace instead of the
/// command's own status).
pub fn warn(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// True if progress bars should be drawn (stderr is a terminal).
pub fn show_progress() -> bool {
    std::io::stderr().is_terminal()
}

fn run(cli: Cli) -> CliResult {
    match cli.command {
        Command::Info { file, json } => info::run(&file, json),
        Command::Check { file } => check::run(&file),
        Command::Dump {
            file,
            cf,
            table,
            format,
        } => dump::run(&file, cf.as_deref(), table.as_deref(), format),
        Command::Load {
            file,
            cf,
            table,
            key_type,
            value_type,
            format,
            batch,
        } => load::run(&load::Request {
            file: &file,
            cf: &cf,
            table: &table,
            types: key_type.zip(value_type),
            format,
            batch,
        }),
        Command::Compact { file } => maintenance::compact(&file),
        Command::Backup { file, dest } => maintenance::backup(&file, &dest),
        Command::SalvageWal { file } => maintenance::salvage_wal(&file),
        Command::AcceptMissingWal { file } => maintenance::accept_missing_wal(&file),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            warn(&format!("sheaf: {}", f.message));
            ExitCode::from(f.code)
        }
    }
}
