//! File-level facts about an open database ([`FileInfo`]), for tools such
//! as `sheaf info`: the format, the durable superblock, the files' sizes
//! and what the open replayed.
//!
//! Everything here is read from state the database already keeps (the
//! system state under the checkpoint lock, the WAL's layout, the data
//! file's length); nothing is written, so it works on a read-only open.

use std::sync::atomic::Ordering;

use super::{Database, DbShared};
use crate::error::{Location, Result};
use crate::format::superblock::WalMark;
use crate::format::FORMAT_VERSION;
use crate::table::TableStats;
use crate::wal::FIRST_LSN;

/// What [`Database::file_info`] reports about the data file and its WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileInfo {
    /// On-disk format version of the data file (this build reads and
    /// writes only its own).
    pub format_version: u32,
    /// Page size of the file in bytes (fixed at creation).
    pub page_size: u32,
    /// Generation of the current superblock: how many checkpoints the
    /// file has seen since it was created.
    pub generation: u64,
    /// WAL position (LSN) replay starts from at the next open: every
    /// commit below it is in the data file.
    pub replay_start_lsn: u64,
    /// WAL position the next record would get (the end of the log).
    pub wal_end_lsn: u64,
    /// Length of the data file in bytes, as the file system reports it.
    pub file_bytes: u64,
    /// Length of the data file as the last checkpoint recorded it (extent
    /// space included; the file may be shorter where extents were never
    /// written).
    pub recorded_file_bytes: u64,
    /// Bytes of the WAL segment files.
    pub wal_bytes: u64,
    /// Number of WAL segment files.
    pub wal_segments: u64,
    /// WAL records the open replayed (in memory only for a read-only open).
    pub replayed_records: u64,
    /// True if the open replayed no record: the last close was clean (or
    /// everything committed before a crash had been checkpointed).
    pub clean: bool,
    /// True if the data file's last checkpoint needs its WAL: commits
    /// since it may be only in the `NAME-wal.*` files, and an open without
    /// them is refused (rule O13). False after a clean close: the data
    /// file alone holds every commit. True for a file written before the
    /// mark existed (nothing tells).
    pub wal_required: bool,
    /// True if the database was opened read-only.
    pub read_only: bool,
}

impl DbShared {
    fn file_info(&self) -> Result<FileInfo> {
        // The superblock state is behind a lock an integrity check holds
        // across its progress callback: refused there, not waited for.
        super::integrity::refuse_inside_callback("file_info")?;
        let (generation, replay_lsn, wal_mark) = {
            let sys = self.ckpt.sys.lock();
            (sys.generation, sys.replay_lsn, sys.wal_mark)
        };
        let page_size = self.space.pager.page_size();
        let file_pages = self.space.extents.lock().file_pages();
        let file_bytes = self.space.pager.storage().len()?;
        let wal = self.wal();
        let replayed = self.replayed_records.load(Ordering::Relaxed);
        Ok(FileInfo {
            format_version: FORMAT_VERSION,
            page_size: u32::try_from(page_size).expect("page sizes are at most 64 KiB"),
            generation,
            replay_start_lsn: replay_lsn.max(FIRST_LSN).0,
            wal_end_lsn: wal.next_lsn().0,
            file_bytes,
            recorded_file_bytes: file_pages * page_size as u64,
            wal_bytes: wal.file_bytes(),
            wal_segments: wal.segment_files() as u64,
            replayed_records: replayed,
            clean: replayed == 0,
            wal_required: wal_mark != WalMark::NotRequired,
            read_only: self.health.is_read_only(),
        })
    }
}

impl Database {
    /// Facts about the data file and its WAL: format version, page size,
    /// superblock generation, replay start, file sizes, and how many WAL
    /// records this open replayed. Waits for a checkpoint in progress (it
    /// reads the system state the checkpoint holds); writes nothing.
    pub fn file_info(&self) -> Result<FileInfo> {
        self.shared.health.check_not_closed()?;
        self.shared.file_info()
    }
}

/// What the whole database holds at one snapshot ([`Database::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DatabaseStats {
    /// Column families.
    pub column_families: u64,
    /// Tables over all column families.
    pub tables: u64,
    /// Every table's [`TableStats`] summed (`tree_height`: the tallest).
    pub totals: TableStats,
    /// Length of the data file in bytes.
    pub file_bytes: u64,
}

impl Database {
    /// Stats of every table of every column family at one snapshot,
    /// summed (reads every page of every table tree once: a maintenance
    /// call, like `check_integrity`). Per table: `ReadableTable::stats`.
    pub fn stats(&self) -> Result<DatabaseStats> {
        let rx = self.begin_read()?;
        let mut s = DatabaseStats {
            file_bytes: self.shared.space.pager.storage().len()?,
            totals: TableStats {
                page_size: self.page_size() as u64,
                ..TableStats::default()
            },
            ..DatabaseStats::default()
        };
        // The snapshot's own CFs: the live list may name a CF created or
        // dropped since it was taken (an adversarial probe: `stats()`
        // failed with `CfNotFound` beside a thread creating and dropping
        // CFs; tests/introspection.rs).
        for id in rx.cf_ids() {
            let label = format!("cf {id}");
            s.column_families += 1;
            for info in rx.list_info_in(id, &label)? {
                s.totals
                    .add(&rx.open_untyped_in(id, &label, &info.name)?.stats()?);
                s.tables += 1;
            }
        }
        Ok(s)
    }
}

/// Damage in the middle of the WAL that an open salvaged around
/// ([`crate::Builder::salvage_damaged_wal`], [`crate::Database::wal_damage`]):
/// the frame at `lost_from_lsn` was damaged after it had been synced (a
/// later frame proves it), so the commits from there on were given up.
/// With `reason` `FileCut` the segment file was cut short after frames
/// of its use: the witness is then that use's header (at offset 0, its
/// first LSN), which says how long the file was, and `durable_to_lsn` is
/// `lost_from_lsn` (what the lost part held is unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalDamage {
    /// LSN of the damaged frame: the first commit given up.
    pub lost_from_lsn: u64,
    /// Where the damaged frame is (segment file and byte offset).
    pub at: Location,
    /// What was wrong with it, e.g. `ChecksumMismatch`.
    pub reason: String,
    /// LSN of the later frame whose synced mark proves the damaged one
    /// had been synced.
    pub witness_lsn: u64,
    /// Where that frame is.
    pub witness_at: Location,
    /// The log was durable up to this LSN when the witness was written:
    /// the commits below it, from `lost_from_lsn` on, were acknowledged.
    pub durable_to_lsn: u64,
    /// All of the above in a sentence (the one replay's error gives).
    description: String,
}

impl WalDamage {
    /// The public form of what replay found.
    pub(crate) fn new(d: &crate::wal::LogDamage) -> WalDamage {
        WalDamage {
            lost_from_lsn: d.stop_lsn.0,
            at: d.stop_at.clone(),
            reason: format!("{:?}", d.stop),
            witness_lsn: d.witness_lsn.0,
            witness_at: d.witness_at.clone(),
            durable_to_lsn: d.synced.0,
            description: d.to_string(),
        }
    }
}

impl std::fmt::Display for WalDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; they were lost", self.description)
    }
}
