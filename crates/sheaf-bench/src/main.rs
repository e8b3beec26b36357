//! The `sheaf-bench` binary: see `sheaf_bench::cli` and the README.
#![deny(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    sheaf_bench::cli::main()
}
