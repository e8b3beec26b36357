//! Column families (design.md §8): creation and drop through the WAL, the
//! `ColumnFamily` handle, per-CF statistics.
//!
//! Creating or dropping a CF appends one small record and waits for its
//! sync; no data-file write, no header rewrite. `CfId`s come from a counter
//! that is never reset (persisted in the superblock and advanced by replay),
//! so a dropped-then-recreated name never receives the old CF's records.
//! A dropped CF disappears from the system tree at the next checkpoint;
//! its extents return to the shared pool once no snapshot can read them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Database, DbShared};
use crate::error::{Error, Result};
use crate::format::records::CfDescriptor;
use crate::pager::alloc::CfAllocator;
use crate::txn::CfShared;

use super::transaction::{
    table_len_untyped, MultiWriteTransaction, ReadTransaction, WriteTransaction,
};
use crate::types::{CfId, Lsn, TableId, Version};
use crate::wal::record::{CfPart, Op};

/// Longest column family name in bytes.
pub const MAX_CF_NAME: usize = 255;

/// A handle to a column family: cheap to clone, `Send + Sync`. After the
/// CF is dropped, every use returns `CfNotFound`.
#[derive(Clone, Debug)]
pub struct ColumnFamily {
    pub(crate) shared: Arc<DbShared>,
    pub(crate) cf: Arc<CfShared>,
}

/// What a column family holds and occupies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CfStats {
    /// Tables in the CF.
    pub tables: u64,
    /// Entries over all tables.
    pub entries: u64,
    /// Pages of the CF's extents in use (neither free nor waiting).
    pub pages_in_use: u64,
    /// Extents owned.
    pub extents: u64,
    /// Bytes of the CF's extents.
    pub extent_bytes: u64,
    /// Bytes committed but not yet checkpointed.
    pub dirty_bytes: u64,
    /// Bytes of commits held in the CF's write buffer (not yet folded
    /// into its B+trees; they are in the WAL).
    pub buffered_bytes: u64,
}

impl ColumnFamily {
    /// `ForeignHandle` unless this handle is of the database `shared`.
    pub(crate) fn check_belongs_to(&self, shared: &Arc<DbShared>) -> Result<()> {
        if Arc::ptr_eq(&self.shared, shared) {
            Ok(())
        } else {
            Err(Error::ForeignHandle(format!(
                "column family {:?}",
                self.name()
            )))
        }
    }

    /// The CF's name.
    pub fn name(&self) -> &str {
        &self.cf.name
    }

    /// The CF's id (stable for its lifetime, never reused).
    pub fn id(&self) -> CfId {
        self.cf.id
    }

    /// Starts a write transaction on this CF; waits for the one in progress
    /// on the same CF (other CFs do not matter).
    pub fn begin_write(&self) -> Result<WriteTransaction> {
        WriteTransaction::begin(self.shared.clone(), self.cf.clone())
    }

    /// Starts a write transaction on this CF only if no other one is in
    /// progress: `Error::WriterBusy` at once otherwise.
    pub fn try_begin_write(&self) -> Result<WriteTransaction> {
        WriteTransaction::try_begin(self.shared.clone(), self.cf.clone())
    }

    /// A snapshot of this CF. Never blocks.
    pub fn begin_read(&self) -> Result<ReadTransaction> {
        self.shared.health.check_not_closed()?;
        self.cf.check_live()?;
        let rx = ReadTransaction::for_cf(self.shared.clone(), &self.cf);
        // Dropped after the first check: the version we hold may belong
        // to released extents. (Dropped after this one: our hold keeps
        // its extents from being released.)
        self.cf.check_live()?;
        Ok(rx)
    }

    /// Statistics of the CF's latest published version.
    pub fn stats(&self) -> Result<CfStats> {
        self.cf.check_live()?;
        let rx = self.begin_read()?;
        let mut stats = CfStats {
            buffered_bytes: self.cf.current.load().buffer.bytes(),
            ..CfStats::default()
        };
        for name in rx.list_tables()? {
            let (len, _) = table_len_untyped(&rx, &name)?;
            stats.tables += 1;
            stats.entries += len;
        }
        let a = self.cf.alloc.lock();
        let ps = self.shared.space.pager.page_size() as u64;
        let extent_pages: u64 = a.extents().iter().map(|e| e.pages).sum();
        stats.extents = a.extents().len() as u64;
        stats.extent_bytes = extent_pages * ps;
        stats.pages_in_use = extent_pages - a.free_set().pages() - a.pending_set().pages();
        stats.dirty_bytes = a.dirty_pages() * ps;
        Ok(stats)
    }

    /// Checks this CF's trees and space (see `Database::check_integrity`).
    pub fn check_integrity(&self) -> Result<super::IntegrityReport> {
        self.check_integrity_with(&mut |_, _| {})
    }

    /// [`ColumnFamily::check_integrity`] with progress reports
    /// `(pages_done, pages_total)`, as [`Database::check_integrity_with`]
    /// gives them; the total is this CF's pages in use. The callback runs
    /// with this CF's writer held: it must not write to it.
    pub fn check_integrity_with(
        &self,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<super::IntegrityReport> {
        self.shared.health.check_not_closed()?;
        self.cf.check_live()?;
        /// Joins as the check returns, or unwinds from a panicking
        /// callback that closed the database first.
        struct JoinIfClosed<'a>(&'a super::DbShared);
        impl Drop for JoinIfClosed<'_> {
            fn drop(&mut self) {
                self.0.join_threads_if_closed();
            }
        }
        let _join = JoinIfClosed(&self.shared);
        super::integrity::check_cf(&self.shared, &self.cf, progress)
    }
}

pub(super) fn check_cf_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_CF_NAME {
        return Err(Error::InvalidArgument(format!(
            "column family names are 1 to {MAX_CF_NAME} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}

impl DbShared {
    fn cf_by_name(&self, name: &str) -> Option<Arc<CfShared>> {
        self.registry
            .cfs
            .read()
            .values()
            .find(|c| c.name == name)
            .cloned()
    }

    /// Builds the in-memory state of a CF created by the record at `lsn`.
    pub(crate) fn new_cf_state(&self, id: CfId, name: &str, lsn: Lsn) -> Result<Arc<CfShared>> {
        let desc = CfDescriptor {
            name: name.to_string(),
            catalog_root: None,
            catalog_len: 0,
            next_table: TableId(1),
            checkpoint_lsn: lsn,
            version: Version(0),
            free: vec![],
        };
        let alloc = CfAllocator::new(id, self.space.policy, vec![], &[])?;
        let cf = super::open::new_cf(self, id, name.to_string(), alloc, &desc);
        // Version 1 is the creation itself: newer than the (empty) durable
        // base, so the next checkpoint records the CF.
        cf.bump_created_version();
        Ok(Arc::new(cf))
    }

    /// Appends a CF record; returns (start, end) LSNs. Callers hold
    /// `registry.change` for writing until the registry reflects the record.
    fn append_cf_record(&self, cf: CfId, op: Op<'_>) -> Result<(Lsn, Lsn)> {
        let mut payload = Vec::new();
        crate::wal::record::encode_commit(&[CfPart { cf, ops: vec![op] }], &mut payload);
        // A failed append changes nothing (the WAL poisons itself on I/O).
        self.wal().append(&payload)
    }

    /// Waits for a CF record's sync, before the registry shows it (under
    /// `registry.change`): no other thread sees a CF created, or misses
    /// one dropped, before the change is durable, so a crash never undoes
    /// what a lookup already reported. The record may be written, so a
    /// failure poisons.
    fn wait_cf_record(&self, end: Lsn) -> Result<()> {
        self.wal().wait_durable(end).inspect_err(|e| self.poison(e))
    }

    fn create_cf(self: &Arc<Self>, name: &str) -> Result<Arc<CfShared>> {
        let _open = self.health.enter_commit()?;
        let id = CfId(self.registry.next_id.fetch_add(1, Ordering::AcqRel));
        let _change = self.registry.change.write();
        let (lsn, end) = self.append_cf_record(id, Op::CreateCf { name })?;
        let cf = self.new_cf_state(id, name, lsn)?;
        self.wait_cf_record(end)?;
        self.registry.register(cf.clone());
        Ok(cf)
    }
}

impl Database {
    fn handle(&self, cf: Arc<CfShared>) -> ColumnFamily {
        ColumnFamily {
            shared: self.shared.clone(),
            cf,
        }
    }

    /// Creates a column family. `CfExists` if the name is taken.
    pub fn create_cf(&self, name: &str) -> Result<ColumnFamily> {
        check_cf_name(name)?;
        self.shared.check_open()?;
        super::integrity::refuse_inside_callback("creating a column family")?;
        let cf = {
            let _registry = self.shared.registry.create_drop.lock();
            if self.shared.cf_by_name(name).is_some() {
                return Err(Error::CfExists(name.to_string()));
            }
            self.shared.create_cf(name)?
        };
        // (After the CF lock: a writer lock ranks below it.)
        super::key_filter::start_empty(&self.shared, &cf)?;
        Ok(self.handle(cf))
    }

    /// `ForeignHandle` unless `cf` is a handle of this database.
    fn check_own(&self, cf: &ColumnFamily) -> Result<()> {
        cf.check_belongs_to(&self.shared)
    }

    /// The column family `name`. `CfNotFound` if there is none.
    pub fn cf(&self, name: &str) -> Result<ColumnFamily> {
        self.shared
            .cf_by_name(name)
            .map(|cf| self.handle(cf))
            .ok_or_else(|| Error::CfNotFound(name.to_string()))
    }

    /// The column family `name`, created if missing. Two threads calling
    /// this at once get the same CF.
    pub fn cf_or_create(&self, name: &str) -> Result<ColumnFamily> {
        check_cf_name(name)?;
        if let Some(cf) = self.shared.cf_by_name(name) {
            return Ok(self.handle(cf));
        }
        self.shared.check_open()?;
        super::integrity::refuse_inside_callback("creating a column family")?;
        let cf = {
            let _registry = self.shared.registry.create_drop.lock();
            if let Some(cf) = self.shared.cf_by_name(name) {
                return Ok(self.handle(cf));
            }
            self.shared.create_cf(name)?
        };
        super::key_filter::start_empty(&self.shared, &cf)?;
        Ok(self.handle(cf))
    }

    /// Drops a column family and all its tables. Waits for its writer in
    /// progress, if any. The default CF cannot be dropped.
    pub fn drop_cf(&self, name: &str) -> Result<()> {
        self.shared.check_open()?;
        // The writer lock first, the create/drop lock after (ARCHITECTURE.md
        // lock order): waiting for the CF's writer while holding the
        // create/drop lock would deadlock with that writer's own
        // `create_cf`. `WouldDeadlock` if this thread holds the writer.
        let (cf, writer, _registry) = loop {
            let cf = self
                .shared
                .cf_by_name(name)
                .ok_or_else(|| Error::CfNotFound(name.to_string()))?;
            if cf.id == CfId::DEFAULT {
                return Err(Error::InvalidArgument(
                    "the default column family cannot be dropped".into(),
                ));
            }
            let writer = cf.lock_writer()?;
            let registry = self.shared.registry.create_drop.lock();
            // Another drop may have won the race while this one waited (and
            // a create may have reused the name): look the name up again.
            if cf.check_live().is_ok() {
                break (cf, writer, registry);
            }
        };
        cf.wait_publication(None, &|| self.shared.health.check_writable())?;
        let _open = self.shared.health.enter_commit()?;
        let _change = self.shared.registry.change.write();
        let (_, end) = self.shared.append_cf_record(cf.id, Op::DropCf)?;
        self.shared.wait_cf_record(end)?;
        self.shared.registry.unregister(&cf);
        // B2: a dropped CF's buffer leaves the budget (no commit can reach
        // it: we hold its writer lock, and it is no longer live).
        self.shared.budget.release(writer.head.buffer.bytes());
        Ok(())
    }

    /// Names of all column families (the default one included), sorted.
    pub fn list_cfs(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .shared
            .registry
            .cfs
            .read()
            .values()
            .map(|c| c.name.clone())
            .collect();
        names.sort();
        Ok(names)
    }

    /// The default column family's handle.
    pub fn default_cf(&self) -> Result<ColumnFamily> {
        Ok(self.handle(self.shared.registry.get(CfId::DEFAULT)?))
    }

    /// A write transaction over several column families, committed
    /// atomically with one WAL record. Locks them in `CfId` order up front.
    pub fn begin_write_cfs(&self, cfs: &[&ColumnFamily]) -> Result<MultiWriteTransaction> {
        for c in cfs {
            self.check_own(c)?;
            c.cf.check_live()?;
        }
        let arcs = cfs.iter().map(|c| c.cf.clone()).collect();
        MultiWriteTransaction::begin(self.shared.clone(), arcs)
    }
}
