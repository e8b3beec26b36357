//! Command line and run sequence: parse arguments, make the scratch
//! directory, measure the machine, run one suite, print its table, write
//! JSON and charts, remove the scratch directory.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};

use crate::engines::{EngineKind, Result};
use crate::report::{Machine, Report};
use crate::suites::{self, remove_dir, Ctx, Scale};

/// Side-by-side benchmarks of sheafdb and its peers.
#[derive(Parser, Debug)]
#[command(name = "sheaf-bench", version, about)]
pub struct Cli {
    /// The suite to run.
    #[command(subcommand)]
    pub command: Command,
    /// Shrink sizes about 100x (a smoke run).
    #[arg(long, global = true)]
    pub quick: bool,
    /// Use the large sizes where the suite has them (peers: 5 M pairs).
    #[arg(long, global = true, conflicts_with = "quick")]
    pub full: bool,
    /// Comma-separated engines (sheafdb, redb, lmdb|heed, sqlite, fjall,
    /// rocksdb); default: every engine compiled in.
    #[arg(long, global = true, value_delimiter = ',')]
    pub engines: Option<Vec<String>>,
    /// Also write the results as JSON to this file.
    #[arg(long, global = true)]
    pub json: Option<PathBuf>,
    /// Also draw PNG charts of the scaling data into this directory.
    #[arg(long, global = true)]
    pub plot: Option<PathBuf>,
    /// Parent directory for the databases (default: the system temp dir);
    /// a private subdirectory is made and removed afterwards.
    #[arg(long, global = true)]
    pub dir: Option<PathBuf>,
    /// Seed of all random data and choices.
    #[arg(long, global = true, default_value_t = 0x5eaf)]
    pub seed: u64,
    /// Seconds per timed cell (matrix, seed mixed); default 2, quick 0.02.
    #[arg(long, global = true)]
    pub cell_secs: Option<f64>,
    /// Comma-separated thread counts overriding the scaling workloads' own.
    #[arg(long, global = true, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// Number of 4 KiB write + fdatasync samples of the machine probe.
    #[arg(long, global = true)]
    pub fsync_samples: Option<usize>,
}

/// The suites (and the hidden crash child of `seed`).
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Bulk load, durable and no-sync commits, reads, ranges, removal, size.
    Peers,
    /// Durable commit and point read latency percentiles, insert rate, size.
    Commit,
    /// Read/write mixes x 1..64 threads, no-sync and durable.
    Matrix,
    /// A table used as a job queue: push at the tail, pop the first key.
    Queue,
    /// Concurrent writers per CF, readers, Zipfian mixes, durability modes,
    /// recovery, CF create/drop.
    Seed,
    /// Child process of the seed recovery workload (internal).
    #[command(hide = true)]
    CrashWriter {
        /// Engine to write to.
        #[arg(long)]
        engine: String,
        /// Directory of the database.
        #[arg(long)]
        crash_dir: PathBuf,
        /// Records to commit before aborting.
        #[arg(long)]
        records: usize,
    },
}

impl Command {
    fn suite_name(&self) -> &'static str {
        match self {
            Command::Peers => "peers",
            Command::Commit => "commit",
            Command::Matrix => "matrix",
            Command::Queue => "queue",
            Command::Seed => "seed",
            Command::CrashWriter { .. } => "crash-writer",
        }
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("sheaf-bench: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs what `cli` asks; `Ok(false)` when some engine failed.
pub fn run(cli: &Cli) -> Result<bool> {
    if let Command::CrashWriter {
        engine,
        crash_dir,
        records,
    } = &cli.command
    {
        let kind = parse_engine(engine)?;
        suites::seed::crash_writer(kind, crash_dir, *records, cli.seed)?;
        unreachable!("crash_writer aborts the process");
    }
    let engines = select_engines(cli.engines.as_deref())?;
    let scratch = Scratch::create(cli.dir.as_deref())?;
    let result = run_suite(cli, engines, scratch.path());
    drop(scratch);
    result
}

fn run_suite(cli: &Cli, engines: Vec<EngineKind>, root: &Path) -> Result<bool> {
    let scale = match (cli.quick, cli.full) {
        (true, _) => Scale::Quick,
        (_, true) => Scale::Full,
        _ => Scale::Default,
    };
    let samples = cli
        .fsync_samples
        .unwrap_or(if scale == Scale::Quick { 200 } else { 500 });
    eprintln!(
        "measuring fdatasync latency ({samples} samples) in {}",
        root.display()
    );
    let machine = Machine {
        cpus: crate::machine::cpus(),
        fsync_p50_us: crate::machine::fsync_p50_us(root, samples)?,
    };
    let default_cell = if scale == Scale::Quick { 0.02 } else { 2.0 };
    let ctx = Ctx {
        engines: engines.clone(),
        scale,
        root: root.to_path_buf(),
        seed: cli.seed,
        cell: Duration::from_secs_f64(cli.cell_secs.unwrap_or(default_cell).max(0.001)),
        threads: cli.threads.clone(),
        exe: std::env::current_exe().ok(),
    };
    let suite = cli.command.suite_name();
    let mut rep = Report::new(suite, command_line(), machine, &engines);
    match cli.command {
        Command::Peers => suites::peers::run(&ctx, &mut rep)?,
        Command::Commit => suites::commit::run(&ctx, &mut rep)?,
        Command::Matrix => suites::matrix::run(&ctx, &mut rep)?,
        Command::Queue => suites::queue::run(&ctx, &mut rep)?,
        Command::Seed => suites::seed::run(&ctx, &mut rep)?,
        Command::CrashWriter { .. } => unreachable!("handled before"),
    }
    print!("{}\n{}", rep.header(), rep.table());
    emit_files(cli, &rep)?;
    Ok(rep.failures.is_empty())
}

fn emit_files(cli: &Cli, rep: &Report) -> Result<()> {
    if let Some(path) = &cli.json {
        rep.write_json(path)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &cli.plot {
        for file in crate::plot::write_charts(dir, &rep.charts)? {
            eprintln!("wrote {file}");
        }
    }
    Ok(())
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("sheaf-bench {}", args.join(" "))
}

fn parse_engine(name: &str) -> Result<EngineKind> {
    let kind = EngineKind::parse(name).ok_or_else(|| format!("unknown engine `{name}`"))?;
    if !kind.compiled_in() {
        return Err(format!(
            "engine `{kind}` is not compiled in; rebuild with `--features {}`",
            kind.name()
        )
        .into());
    }
    Ok(kind)
}

/// The engines to run, sheafdb first, each once.
pub fn select_engines(names: Option<&[String]>) -> Result<Vec<EngineKind>> {
    let mut kinds = match names {
        None => EngineKind::defaults(),
        Some(names) => names
            .iter()
            .filter(|n| !n.trim().is_empty())
            .map(|n| parse_engine(n))
            .collect::<Result<Vec<_>>>()?,
    };
    kinds.sort();
    kinds.dedup();
    if kinds.is_empty() {
        return Err("no engines selected".into());
    }
    Ok(kinds)
}

/// The run's private scratch directory; removed on drop.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn create(parent: Option<&Path>) -> Result<Self> {
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = parent.join(format!("sheaf-bench-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        Ok(Scratch { path })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove_dir(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_are_deduplicated_and_ordered() {
        let names = vec![
            "sqlite".to_string(),
            "redb".into(),
            "heed".into(),
            "redb".into(),
        ];
        let kinds = select_engines(Some(&names)).unwrap();
        assert_eq!(
            kinds,
            vec![EngineKind::Redb, EngineKind::Lmdb, EngineKind::Sqlite]
        );
        assert!(select_engines(Some(&["bogus".to_string()])).is_err());
    }

    #[test]
    fn cli_accepts_suite_and_global_flags_in_any_order() {
        let cli =
            Cli::try_parse_from(["sheaf-bench", "--quick", "peers", "--engines", "redb,lmdb"])
                .unwrap();
        assert!(cli.quick);
        assert!(matches!(cli.command, Command::Peers));
        assert_eq!(cli.engines.unwrap(), vec!["redb", "lmdb"]);
    }
}
