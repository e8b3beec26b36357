//! Online backup (issue 14): a consistent copy of the whole database at one
//! snapshot, taken while readers and writers keep running, written as a
//! compacted, checkpointed single file that opens without WAL replay.
//!
//! Protocol ([`Database::backup_to`]):
//! 1. Take a database-wide snapshot and, under the registry's change lock
//!    (so no CF is created or dropped in between), the names of its CFs.
//! 2. Create a new database under a temporary name beside the target
//!    (`NAME.backup-N.tmp`, a name no file uses; the target must not exist,
//!    nor WAL files of its name). Copy every CF and table (with
//!    its key and value type names) in key order, in transactions of
//!    about [`BATCH_BYTES`]: each commits by a direct checkpoint (its
//!    record is over the copy's tiny WAL record limit), so the data goes
//!    to the file once, as one appending batch whose pages are packed
//!    full, and memory stays bounded by a batch.
//! 3. Close the copy (a final checkpoint: the WAL holds nothing to
//!    replay), remove its WAL files, rename it to the target, sync the
//!    directory.
//!
//! Crash argument: until the rename is durable the target name does not
//! exist (or a crash makes the rename vanish), and the temporary file is
//! complete and synced before it is renamed, so the target is either
//! absent or the whole backup; never a partial copy under the target's
//! name. The source is only read. A failed backup removes its temporary
//! files; one a crash interrupted leaves them (`NAME.backup-N.tmp` and its
//! WAL files), which are safe to delete.
//!
//! Must not know: page layouts (the copy is made through transactions).

use std::sync::Arc;

use super::transaction::ReadTransaction;
use super::{Database, DbShared};
use crate::error::{Error, Result};
use crate::storage::Vfs;
use crate::txn::Durability;
use crate::types::CfId;

/// Key and value bytes per copy transaction. Each batch goes from the
/// snapshot's pages straight into the copy's tree as one sorted,
/// appending batch (packed pages; `WriteTransaction::append_sorted_unlogged`),
/// and its commit is a direct checkpoint of the copy.
pub(crate) const BATCH_BYTES: u64 = 8 << 20;

/// What one entry weighs in a batch beyond its key and value bytes (its
/// two guards and its place in the batch): a table of tiny entries must
/// not put millions of them in one batch.
const ENTRY_WEIGHT: u64 = 64;

/// Moves entries from `entries` into `batch` until their weight reaches
/// `budget` or the table ends; returns (the batch's weight, whether the
/// table ended). Keys that do not strictly increase (a damaged source)
/// are `Corrupted` where the batch is applied (`btree::apply_sorted`).
fn fill_batch(
    entries: &mut impl Iterator<Item = Result<(SourceKey, SourceValue)>>,
    batch: &mut Vec<Copied>,
    budget: u64,
    done: &mut BackupProgress,
) -> Result<(u64, bool)> {
    let mut weight = 0u64;
    while weight < budget {
        let Some(e) = entries.next() else {
            return Ok((weight, true));
        };
        let (k, v) = e?;
        let bytes = (k.raw_bytes().len() + v.raw_bytes().len()) as u64;
        weight += bytes + ENTRY_WEIGHT;
        done.bytes_copied += bytes;
        done.entries_copied += 1;
        batch.push(Copied(k, v));
    }
    Ok((weight, false))
}

type SourceKey = crate::table::KeyGuard<&'static [u8]>;
type SourceValue = crate::table::AccessGuard<&'static [u8]>;

/// One entry of the snapshot, as the guards the source table handed out
/// (their bytes stay in the source's pages until the batch is applied).
struct Copied(SourceKey, SourceValue);

impl crate::btree::SortedWrite for Copied {
    fn key(&self) -> &[u8] {
        self.0.raw_bytes()
    }

    fn value(&self) -> Option<&[u8]> {
        Some(self.1.raw_bytes())
    }
}

/// How far a backup has got ([`Database::backup_to_with`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupProgress {
    /// Entries copied so far.
    pub entries_copied: u64,
    /// Entries in the snapshot being copied.
    pub entries_total: u64,
    /// Key and value bytes copied so far.
    pub bytes_copied: u64,
}

/// What a backup wrote ([`Database::backup_to`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupReport {
    /// Column families copied.
    pub column_families: u64,
    /// Tables copied.
    pub tables: u64,
    /// Entries copied.
    pub entries: u64,
    /// Size of the backup file in bytes.
    pub file_bytes: u64,
}

/// A name for the copy being built, beside the target: `NAME.backup-N.tmp`
/// with a number no file (and no WAL file of one) in `vfs` uses, so a
/// backup never touches a file it did not create (not even one that
/// happens to have such a name, which may be an open database).
fn temp_name(vfs: &dyn Vfs, name: &str) -> Result<String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(32);
    let files = vfs.list()?;
    for _ in 0..1000 {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = format!("{name}.backup-{:x}.tmp", seed.wrapping_add(n));
        let taken = (files.iter()).any(|f| *f == tmp || crate::wal::is_segment_of(&tmp, f));
        if !taken {
            return Ok(tmp);
        }
    }
    Err(Error::InvalidArgument(format!(
        "no free temporary name for a backup to {name:?}"
    )))
}

/// A snapshot of every CF with the CF names it had then.
fn snapshot_with_names(shared: &Arc<DbShared>) -> (ReadTransaction, Vec<(CfId, String)>) {
    let _change = shared.registry.change.read();
    let rx = ReadTransaction::for_db(shared.clone());
    let cfs = shared.registry.cfs.read();
    let names = cfs.iter().map(|(id, cf)| (*id, cf.name.clone())).collect();
    (rx, names)
}

/// Removes `name` and its WAL files from `vfs` (what is missing is fine).
fn remove_database(vfs: &dyn Vfs, name: &str) -> Result<()> {
    for f in vfs.list()? {
        if f == name || crate::wal::is_segment_of(name, &f) {
            vfs.remove(&f)?;
        }
    }
    Ok(())
}

impl Database {
    /// Writes a consistent copy of the whole database (every column
    /// family, at one snapshot) to `path`, while readers and writers keep
    /// running. The copy is one compacted, checkpointed file: it opens
    /// without WAL replay. Works on a read-only open too (and on a
    /// poisoned database: it only reads). `InvalidArgument` if `path`
    /// exists. See
    /// [`Database::backup_to_with`] for progress.
    pub fn backup_to(&self, path: impl AsRef<std::path::Path>) -> Result<BackupReport> {
        self.backup_to_with(path, |_| {})
    }

    /// [`Database::backup_to`], calling `progress` after every batch of
    /// entries copied.
    pub fn backup_to_with(
        &self,
        path: impl AsRef<std::path::Path>,
        progress: impl FnMut(BackupProgress),
    ) -> Result<BackupReport> {
        let path = path.as_ref();
        // Checked here, where the path is known, so the errors name it: a
        // missing directory gave a bare `NotFound`, and a dangling symlink
        // (which `exists` follows) "File exists" after the whole copy.
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(Error::InvalidArgument(format!(
                "backup target {} exists; remove it or choose another name",
                path.display()
            )));
        }
        let (vfs, name) = super::split_path(path)?;
        if !vfs.dir().is_dir() {
            return Err(Error::InvalidArgument(format!(
                "backup target {}: the directory {} does not exist",
                path.display(),
                vfs.dir().display()
            )));
        }
        self.backup_to_vfs(Arc::new(vfs), &name, progress)
    }

    /// [`Database::backup_to_with`] into file `name` of `vfs`.
    pub fn backup_to_vfs(
        &self,
        vfs: Arc<dyn Vfs>,
        name: &str,
        mut progress: impl FnMut(BackupProgress),
    ) -> Result<BackupReport> {
        // Only reads: a read-only or poisoned database can be backed up.
        self.shared.health.check_not_closed()?;
        super::integrity::refuse_inside_callback("a backup")?;
        if vfs.exists(name)? {
            return Err(Error::InvalidArgument(format!(
                "backup target {name:?} exists; remove it or choose another name"
            )));
        }
        super::open::refuse_segment_name(name)?;
        // WAL files of the target's name (a database whose data file was
        // deleted) would be taken as the backup's own at its first open.
        if let Some(stale) = (vfs.list()?)
            .into_iter()
            .find(|f| crate::wal::is_segment_of(name, f))
        {
            return Err(Error::InvalidArgument(format!(
                "{stale:?} is a WAL file of another database named {name:?}; remove it or \
                 choose another name"
            )));
        }
        let tmp = temp_name(&*vfs, name)?;
        // Best effort, on an error or a panic (of the progress callback):
        // the copy is incomplete and only this call knows it. Before, a
        // panicking callback left the temporary files behind.
        let mut cleanup = RemoveIncomplete {
            vfs: &*vfs,
            tmp: &tmp,
            armed: true,
        };
        let r = self.backup_into(&vfs, &tmp, name, &mut progress);
        cleanup.armed = r.is_err();
        drop(cleanup);
        r
    }

    /// Builds the copy under `tmp` and renames it to `name`.
    fn backup_into(
        &self,
        vfs: &Arc<dyn Vfs>,
        tmp: &str,
        name: &str,
        progress: &mut dyn FnMut(BackupProgress),
    ) -> Result<BackupReport> {
        let (rx, cfs) = snapshot_with_names(&self.shared);
        let copy = Database::builder()
            .page_size(self.page_size())
            .background_checkpoints(false)
            .wal_record_max_bytes(4096)
            .wal_first_segment_bytes(64 << 10)
            .cache_size_bytes(16 << 20)
            // Small first extents: a small database makes a small backup
            // (extents still grow with the data, up to the usual cap).
            .extent_sizes(64 << 10, 64 << 20)
            .durability(Durability::None)
            // The copy never asks for an old value: no key filter.
            .key_filter_memory(0)
            .create_with_vfs(vfs.clone(), tmp)?;
        let mut report = BackupReport::default();
        let mut done = BackupProgress::default();
        for (id, cf_name) in &cfs {
            let tables = rx.list_info_in(*id, cf_name)?;
            done.entries_total += tables.iter().map(|t| t.entries).sum::<u64>();
        }
        progress(done);
        for (id, cf_name) in &cfs {
            let target = copy.cf_or_create(cf_name)?;
            report.column_families += 1;
            // One transaction takes several small tables, or part of a
            // large one: it commits once it holds `BATCH_BYTES`.
            let mut tx = target.begin_write()?;
            let mut held = 0u64;
            for info in rx.list_info_in(*id, cf_name)? {
                let source = rx.open_untyped_in(*id, cf_name, &info.name)?;
                let mut entries = source.iter()?;
                let table = (&*info.name, &*info.key_type, &*info.value_type);
                loop {
                    let mut batch: Vec<Copied> = Vec::new();
                    // Under `BATCH_BYTES`: the transaction commits once it
                    // holds that much.
                    let budget = BATCH_BYTES - held;
                    let (weight, ended) = fill_batch(&mut entries, &mut batch, budget, &mut done)?;
                    // Also creates the table: empty tables are copied too.
                    tx.append_sorted_unlogged(table, &batch)?;
                    drop(batch);
                    held += weight;
                    if held >= BATCH_BYTES {
                        tx.commit()?;
                        progress(done);
                        tx = target.begin_write()?;
                        held = 0;
                    }
                    if ended {
                        break;
                    }
                }
                report.tables += 1;
            }
            tx.commit()?;
            progress(done);
        }
        drop(rx);
        report.entries = done.entries_copied;
        copy.close()?;
        // The copy is complete and synced; only now does it get the name
        // (the rename fails rather than replace a file made meanwhile).
        finish(&**vfs, tmp, name)?;
        report.file_bytes = vfs.open(name, crate::storage::OpenMode::ReadOnly)?.len()?;
        Ok(report)
    }
}

/// Drops the copy's WAL files (it was closed cleanly: nothing to replay)
/// and gives the data file its name, durably.
fn finish(vfs: &dyn Vfs, tmp: &str, name: &str) -> Result<()> {
    for f in vfs.list()? {
        if crate::wal::is_segment_of(tmp, &f) {
            vfs.remove(&f)?;
        }
    }
    vfs.rename(tmp, name)?;
    vfs.sync_dir()?;
    Ok(())
}

/// Removes an incomplete backup's files when dropped armed (an error, or
/// unwinding from a panic of the progress callback).
struct RemoveIncomplete<'a> {
    vfs: &'a dyn Vfs,
    tmp: &'a str,
    armed: bool,
}

impl Drop for RemoveIncomplete<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = remove_database(self.vfs, self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::db::Database;
    use crate::error::{Error, Result};
    use crate::storage::mem::MemVfs;
    use crate::table::types::TableDefinition;

    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
    const TYPES: (&str, &str, &str) = ("t", "u64", "bytes");

    fn db_with(n: u64) -> Result<Database> {
        let db = Database::builder()
            .page_size(4096)
            .create_with_vfs(Arc::new(MemVfs::new()), "a.sheaf")?;
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(T)?;
            for k in 0..n {
                t.insert(k * 2, &[1u8; 100][..])?;
            }
        }
        tx.commit()?;
        Ok(db)
    }

    /// Review finding: a key over its limit is found at the leaf it goes
    /// to, after earlier leaves of the batch were written. The write must
    /// fail the transaction (only abort is allowed), not leave the part
    /// of the batch before it to be committed.
    #[test]
    fn an_oversized_key_in_an_unlogged_batch_fails_the_transaction() -> Result<()> {
        for loaded in [0, 2000] {
            let db = db_with(loaded)?;
            let tx = db.begin_write()?;
            let mut batch: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..2000u64)
                .map(|k| ((k * 2 + 1).to_be_bytes().to_vec(), Some(vec![2u8; 3000])))
                .collect();
            batch.push((vec![0xff; 4000], Some(vec![3u8; 10])));
            let r = tx.append_sorted_unlogged(TYPES, &batch);
            assert!(matches!(r, Err(Error::KeyTooLarge { .. })), "{r:?}");
            assert!(
                matches!(tx.commit(), Err(Error::TransactionFailed(_))),
                "a transaction with part of a batch applied committed"
            );
            assert_eq!(db.begin_read()?.open_table(T)?.len()?, loaded);
            db.check_integrity()?;
        }
        Ok(())
    }

    /// The one put that bypasses `log_write` adds its keys to the key
    /// filter itself (F1): a later write of one of them must find its old
    /// value, not take the filter's "absent" for it.
    #[test]
    fn unlogged_appends_go_into_the_key_filter() -> Result<()> {
        let db = db_with(2000)?; // a new database: its filter is trusted
        let tx = db.begin_write()?;
        let batch: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..2000u64)
            .map(|k| ((k * 2 + 1).to_be_bytes().to_vec(), Some(vec![2u8; 10])))
            .collect();
        tx.append_sorted_unlogged(TYPES, &batch)?;
        tx.commit()?;
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(T)?;
            for k in 0..2000u64 {
                let old = t.insert(k * 2 + 1, &[3u8; 10][..])?;
                assert_eq!(old.map(|g| g.value().to_vec()), Some(vec![2u8; 10]), "{k}");
            }
            assert_eq!(t.len()?, 4000);
        }
        tx.commit()?;
        Ok(())
    }

    /// Review finding: a savepoint's restore replays the WAL record, which
    /// an unlogged batch is not in: the batch is refused under one.
    #[test]
    fn an_unlogged_batch_under_a_savepoint_is_refused() -> Result<()> {
        let db = db_with(10)?;
        let tx = db.begin_write()?;
        let _sp = tx.savepoint()?;
        let batch = vec![(100u64.to_be_bytes().to_vec(), Some(vec![1u8]))];
        let r = tx.append_sorted_unlogged(TYPES, &batch);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        tx.abort()?;
        assert_eq!(db.begin_read()?.open_table(T)?.len()?, 10);
        Ok(())
    }
}
