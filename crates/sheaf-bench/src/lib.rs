//! sheaf-bench: side-by-side benchmarks of sheafdb and the embedded stores
//! its users would pick instead (redb, LMDB through heed, SQLite, fjall, and
//! RocksDB behind a feature), in one process run on one machine, with
//! durability matched and stated per engine.
//!
//! Layout: `engines` (one adapter per engine behind one trait), `workload`
//! (seeded data), `stats`, `machine` (fsync probe), `suites` (peers, commit,
//! matrix, seed), `report` (table + JSON), `plot` (PNG charts) and `cli`
//! (argument parsing and the run sequence).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cli;
pub mod engines;
pub mod machine;
pub mod plot;
pub mod report;
pub mod stats;
pub mod suites;
pub mod workload;
