//! WAL replay at open (design.md §7 step 4).
//!
//! Records are applied in LSN order. A CF's part of a record is applied
//! only if the record starts at or after the CF's checkpoint LSN (older
//! ones are already in its durable base). Puts and removals go into a
//! write set without reading the tree (blind writes: nothing per record
//! but decoding and an append to a log; the count changes come from the
//! records' `CountChange` ops, or one sorted pass over the written keys),
//! and the CF's replayed changes become a buffered version (no page
//! written at open; the next checkpoint folds it). A catalog operation,
//! or a write set past the fold threshold, applies the pending writes to
//! the trees as one sorted batch; the next record that puts or removes
//! keys first seals what was built as a version of its own, a tree commit
//! whose pages stay dirty until the next checkpoint, exactly like
//! ordinary tree commits (`CfReplay::seal`), and the writes after it are
//! buffered again. A run of catalog records shares one version.
//!
//! Operations name tables by `TableId`; the replayer keeps an id → name map
//! per CF built from the catalog and updated by create/drop/rename records.

use std::ops::Bound;
use std::sync::Arc;

use super::DbShared;
use crate::btree::store::PageRead;
use crate::btree::{self, TreeRoot};
use crate::error::{Error, Result};
use crate::format::records::TableMeta;
use crate::txn::pages::TxnPages;
use crate::txn::state::{check_table_name, lookup_table};
use crate::txn::{CfShared, KeyIndex, TableState, WriteState};
use crate::types::{CfId, IdMap, Lsn, TableId, COUNTER_LIMIT};
use crate::wal::record::{decode_commit, Op};

/// Replay state of one CF.
struct CfReplay {
    cf: Arc<CfShared>,
    state: WriteState,
    names: IdMap<TableId, String>,
    /// A table known to be loaded into `state` (the last one written):
    /// its writes skip the lookups of [`CfReplay::table`]. Cleared by
    /// whatever may unload or rename a table.
    loaded: Option<TableId>,
    last_lsn: Lsn,
    /// The CF's checkpoint LSN (fixed during replay).
    checkpoint_lsn: Lsn,
    /// Write-set bytes past which replay writes the trees instead.
    fold_bytes: u64,
    /// Write-set bytes past which replay settles the blind writes' logs
    /// (they count every write until then): at least `fold_bytes`, and
    /// half of it past what the last settle left.
    settle_at: u64,
    /// Per table with pending writes, their entry-count change as the
    /// records' `CountChange` ops add it up; `None` once a part wrote the
    /// table without one (a version-1 record) or the sum overflowed: then
    /// the written keys are looked up in the tree instead
    /// (`resolve_counts`).
    counts: IdMap<TableId, Option<i64>>,
    /// Set by a `FoldRound` record folding past the checkpoint LSN: the
    /// durable trees may hold some of the replayed writes already, so
    /// the count changes (relative to the state before each commit) do
    /// not add up from the trees' counts, and keys are looked up.
    trees_ahead: bool,
    /// Scratch of `apply_part`: the tables the part wrote, with the count
    /// change it logged for each.
    part_tables: IdMap<TableId, PartCount>,
}

/// Applies WAL records to the CFs of a database being opened.
pub(super) struct Replayer {
    shared: Arc<DbShared>,
    cfs: IdMap<CfId, CfReplay>,
    /// Records applied (to at least one CF).
    pub applied: u64,
    /// LSN of the last record seen: records come in increasing LSN order.
    last_seen: Option<Lsn>,
    /// CFs replay built again from their `CreateCf` record (created after
    /// the durable base), mapped to the first error applying one of their
    /// records gave, if any. Such a CF may have had commits the log does
    /// not hold (a direct commit too large for it goes into the data file
    /// and is in the base only while the CF lives): when it is dropped
    /// later in the log, nothing it held matters, so its records are
    /// skipped after the first that fails; the error stands only if the
    /// log ends with the CF still live.
    rebuilt: IdMap<CfId, Option<Error>>,
}

fn corrupt(what: impl Into<String>) -> Error {
    Error::corrupted(what, "WAL replay")
}

impl Replayer {
    pub(super) fn new(shared: Arc<DbShared>) -> Replayer {
        Replayer {
            shared,
            cfs: IdMap::default(),
            applied: 0,
            last_seen: None,
            rebuilt: IdMap::default(),
        }
    }

    /// Applies one record.
    pub(super) fn apply(&mut self, lsn: Lsn, payload: &[u8]) -> Result<()> {
        // The WAL checks LSN continuity frame by frame, so this holds for
        // any file contents.
        assert!(
            self.last_seen.is_none_or(|last| lsn > last),
            "replay went backwards: {lsn:?} after {:?}",
            self.last_seen
        );
        self.last_seen = Some(lsn);
        let parts = decode_commit(payload)?;
        let mut used = false;
        for part in parts {
            if let Some(Op::CreateCf { name }) = part.ops.first() {
                // What `create_cf` could have logged: a user CF's id, below
                // the range every counter stays in and never used by a CF
                // dropped earlier, and a valid name.
                if part.cf == CfId::SYSTEM
                    || part.cf.0 >= COUNTER_LIMIT
                    || super::cf::check_cf_name(name).is_err()
                    || self
                        .shared
                        .registry
                        .dropped
                        .lock()
                        .iter()
                        .any(|c| c.id == part.cf)
                {
                    return Err(corrupt(format!(
                        "record creates column family {} named {name:?}",
                        part.cf
                    )));
                }
                if self.shared.registry.get(part.cf).is_err() {
                    // Created after the durable base: build it again.
                    let cf = self.shared.new_cf_state(part.cf, name, lsn)?;
                    self.shared.registry.register(cf);
                    self.rebuilt.insert(part.cf, None);
                    used = true;
                }
                continue;
            }
            if !self.cfs.contains_key(&part.cf) {
                let Ok(cf) = self.shared.registry.get(part.cf) else {
                    // A CF dropped later (its drop is in the base): nothing to do.
                    continue;
                };
                let r = CfReplay::new(self.shared.clone(), cf)?;
                self.cfs.insert(part.cf, r);
            }
            let r = self.cfs.get_mut(&part.cf).expect("inserted");
            if lsn < r.checkpoint_lsn {
                continue;
            }
            let drops = part.ops.iter().any(|op| matches!(op, Op::DropCf));
            if !drops && matches!(self.rebuilt.get(&part.cf), Some(Some(_))) {
                continue; // waits for its drop (see `rebuilt`)
            }
            if drops {
                if part.cf == CfId::DEFAULT {
                    return Err(corrupt("record drops the default column family"));
                }
                let mut r = self.cfs.remove(&part.cf).expect("present");
                // What replay collected for it since its last version dies
                // with it; versions it sealed go with the CF (their pages
                // are released at the next checkpoint, as a live drop's).
                r.state.pages.rollback();
                self.shared.registry.unregister(&r.cf);
                self.rebuilt.remove(&part.cf);
                used = true;
                continue;
            }
            let writes =
                (part.ops.iter()).any(|op| matches!(op, Op::Put { .. } | Op::Delete { .. }));
            let applied = (|| {
                if writes && r.state.needs_tree_commit() {
                    // Earlier records wrote the trees (a catalog record,
                    // or writes past the fold threshold): they become a
                    // version of their own first, so these writes can be
                    // buffered again. Lazily: a run of catalog records
                    // shares one.
                    r.seal(&self.shared)?;
                }
                r.apply_part(&part.ops)
            })();
            if let Err(e) = applied {
                match self.rebuilt.get_mut(&part.cf) {
                    Some(first) => *first = Some(e),
                    None => return Err(e),
                }
                continue;
            }
            r.last_lsn = lsn;
            // A fold round's marker alone is no replayed commit.
            used |= !(part.ops.iter()).all(|op| matches!(op, Op::FoldRound { .. }));
        }
        self.applied += used as u64;
        Ok(())
    }

    /// Turns every CF's replayed changes into a published version.
    /// `Corrupted` if a CF built again from its `CreateCf` record had a
    /// record that did not apply and the log never dropped it.
    pub(super) fn finish(self) -> Result<()> {
        if let Some(e) = self.rebuilt.into_values().flatten().next() {
            return Err(e);
        }
        for (_, mut r) in self.cfs {
            r.seal(&self.shared)?;
        }
        Ok(())
    }
}

/// The count change one record part logged for a table it wrote.
#[derive(Debug, Clone, Copy)]
enum PartCount {
    /// No `CountChange` for it (yet).
    Unlogged,
    /// The sum of its `CountChange`s.
    Logged(i64),
    /// Its `CountChange`s overflowed: no use.
    Invalid,
}

impl PartCount {
    fn add(&mut self, delta: i64) {
        *self = match *self {
            PartCount::Unlogged => PartCount::Logged(delta),
            PartCount::Logged(d) => d
                .checked_add(delta)
                .map_or(PartCount::Invalid, PartCount::Logged),
            PartCount::Invalid => PartCount::Invalid,
        };
    }
}

impl CfReplay {
    /// Publishes what replay built for this CF since the last seal as one
    /// version, which its replay resumes after: buffered if it only put
    /// and removed keys (open writes no page) and the database-wide
    /// buffer limit allows, else a tree commit. Then goes on from a fresh
    /// state on that version.
    fn seal(&mut self, shared: &Arc<DbShared>) -> Result<()> {
        let bufferable = !self.state.needs_tree_commit();
        if bufferable && self.state.writes.is_empty() {
            return Ok(());
        }
        if bufferable {
            self.resolve_counts()?;
        }
        // Within the database-wide buffer limit, or the trees are
        // written (B1 holds from the first version on).
        let reserved = bufferable
            .then(|| {
                shared
                    .budget
                    .reserve(self.state.buffer_charge(KeyIndex::Skip))
            })
            .flatten();
        let buffered = reserved.is_some();
        if !buffered {
            self.write_trees()?;
            self.state.flush_tables()?;
            self.state.pages.check_frees()?;
        }
        let mut slot = self.cf.writer.lock();
        let version = slot.head.version.next();
        // Replay of this CF resumes after the last applied record.
        let lsn = Lsn(self.last_lsn.0 + 1);
        // Design §11.6: each seal applied at least one record past the
        // version before it (its base's LSN is the checkpoint LSN, or a
        // record's that replay applied).
        debug_assert!(
            lsn > slot.head.lsn,
            "§11.6: replay version at {lsn:?} after {:?}",
            slot.head.lsn
        );
        if buffered {
            // Only puts and removals: they become one buffered version,
            // and open writes no page (design.md "Write buffer").
            let (cf, st) = (&self.cf, &mut self.state);
            super::commit::install_buffered(cf, st, &mut slot, version, lsn, KeyIndex::Skip);
            reserved.into_iter().for_each(|r| r.keep());
        } else {
            shared.install_version(&self.cf, &mut self.state, &mut slot, version, lsn);
        }
        let head = slot.head.clone();
        drop(slot);
        let id = self.cf.id;
        self.cf
            .publish(version, Ok(()), None, &|v| shared.note_published(id, v))?;
        self.state = WriteState::new(shared.space.clone(), &self.cf, head, None);
        self.loaded = None;
        self.settle_at = self.fold_bytes;
        self.counts.clear();
        Ok(())
    }

    /// `Corrupted` unless `name` is a valid table name no table has (a
    /// record naming an existing table would replace its catalog entry).
    fn check_new_name(&self, name: &str) -> Result<()> {
        check_table_name(name).map_err(|e| corrupt(format!("record names a table: {e}")))?;
        if lookup_table(&self.state.pages, &self.state.catalog, name)?.is_some() {
            return Err(corrupt(format!(
                "record creates or renames to table {name:?}, which exists"
            )));
        }
        Ok(())
    }

    fn new(shared: Arc<DbShared>, cf: Arc<CfShared>) -> Result<CfReplay> {
        let base = cf.writer.lock().head.clone();
        let state = WriteState::new(shared.space.clone(), &cf, base, None);
        let mut names = IdMap::default();
        let mut cursor = btree::Cursor::new(&state.catalog, Bound::Unbounded, Bound::Unbounded);
        while let Some((k, v)) = cursor.next(&state.pages)? {
            let meta = TableMeta::decode(v.as_slice())?;
            let name =
                String::from_utf8(k.to_vec()).map_err(|_| corrupt("table name not UTF-8"))?;
            names.insert(meta.id, name);
        }
        let checkpoint_lsn = cf.base.lock().lsn;
        Ok(CfReplay {
            cf,
            state,
            names,
            loaded: None,
            last_lsn: Lsn(0),
            checkpoint_lsn,
            fold_bytes: shared.options.buffer_fold_bytes,
            settle_at: shared.options.buffer_fold_bytes,
            counts: IdMap::default(),
            trees_ahead: false,
            part_tables: IdMap::default(),
        })
    }

    /// The table with `id`, loaded into the state.
    fn table(&mut self, id: TableId) -> Result<&mut TableState> {
        let name = self
            .names
            .get(&id)
            .ok_or_else(|| corrupt(format!("record names unknown table {id}")))?;
        let st = &mut self.state;
        if !st.tables.contains_key(name.as_str()) {
            let v = btree::get(&st.pages, &st.catalog, name.as_bytes())?
                .ok_or_else(|| corrupt(format!("table {name:?} missing from the catalog")))?;
            let meta = TableMeta::decode(v.as_slice())?;
            st.tables.insert(name.clone(), TableState::loaded(meta));
        }
        Ok(st.tables.get_mut(name.as_str()).expect("inserted"))
    }

    fn with_tree(
        &mut self,
        id: TableId,
        f: impl FnOnce(&mut TxnPages, &mut TreeRoot) -> Result<()>,
    ) -> Result<()> {
        self.table(id)?;
        let name = &self.names[&id];
        let st = &mut self.state;
        let table = st.tables.get_mut(name.as_str()).expect("loaded above");
        let mut root = table.root();
        let r = f(&mut st.pages, &mut root);
        table.set_root(root);
        r
    }

    /// Records a put (`Some`) or removal of `key` in the replay's write
    /// set, blind (the tree is not read). Past the fold threshold the
    /// pending writes are applied to the trees as one batch.
    fn write(&mut self, id: TableId, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        // Only keys and values a commit could hold were logged.
        let ps = self.state.pages.page_size();
        btree::check_limits(ps, key, value.unwrap_or_default())
            .map_err(|e| corrupt(format!("record writes to table {id}: {e}")))?;
        if self.loaded != Some(id) {
            self.table(id)?;
            self.loaded = Some(id);
        }
        // (A cheap stand-in for "loaded": a drop or rename that left the
        // cache stale would leave the id without a name.)
        debug_assert!(self.names.contains_key(&id), "{id} not loaded");
        let st = &mut self.state;
        st.writes.record_blind(id, key, value.map(Arc::from));
        if st.writes.bytes() > self.settle_at {
            // The blind writes count every write until settled: a log
            // that rewrote the same keys may fit once each is kept once.
            // Past the threshold with each key once, the trees are
            // written; else the next settle waits for half a threshold
            // more (so settling stays linear; the log holds at most 1.5
            // thresholds).
            st.writes.settle_logs();
            if st.writes.bytes() > self.fold_bytes {
                self.write_trees()?;
            }
            let kept = self.state.writes.bytes();
            self.settle_at = self.fold_bytes.max(kept + self.fold_bytes / 2);
        }
        Ok(())
    }

    /// Applies the pending writes to the trees (one sorted batch per
    /// table); the version replay makes is then a tree commit.
    fn write_trees(&mut self) -> Result<()> {
        // Applying the writes counts them, and the version replay makes is
        // then a tree commit, which never uses the logged counts.
        self.counts.clear();
        self.state.fold_base()?;
        self.state.apply_writes()
    }

    /// Applies the ops of one record part, then adds the part's
    /// `CountChange`s to the counts of the tables it wrote. A table the
    /// part wrote without one (a version-1 record), or whose sum
    /// overflowed (a crafted record), is left to be looked up.
    fn apply_part(&mut self, ops: &[Op<'_>]) -> Result<()> {
        // Reused from part to part: no allocation per record.
        let mut written = std::mem::take(&mut self.part_tables);
        written.clear();
        let mut last = None;
        for op in ops {
            match *op {
                Op::Put { table, .. } | Op::Delete { table, .. } if last != Some(table) => {
                    written.entry(table).or_insert(PartCount::Unlogged);
                    last = Some(table);
                }
                Op::CountChange { table, delta } => {
                    if let Some(c) = written.get_mut(&table) {
                        c.add(delta);
                    }
                }
                Op::FoldRound { upto } if upto > self.checkpoint_lsn => self.trees_ahead = true,
                _ => {}
            }
            self.apply(op)?;
        }
        for (&table, &change) in &written {
            let sum = self.counts.entry(table).or_insert(Some(0));
            *sum = match change {
                PartCount::Logged(d) => sum.and_then(|a| a.checked_add(d)),
                PartCount::Unlogged | PartCount::Invalid => None,
            };
        }
        self.part_tables = written;
        Ok(())
    }

    /// Finds each table's count change for a buffered version: the sum of
    /// its records' `CountChange`s where they cover every pending write,
    /// else one pass over the written keys in order, looking each up in
    /// the tree.
    fn resolve_counts(&mut self) -> Result<()> {
        let st = &mut self.state;
        debug_assert_eq!(st.base.buffer.entries(), 0, "replay over a buffer");
        // One pass over the loaded tables, not one per written table.
        let roots: IdMap<TableId, TreeRoot> = (st.tables.values())
            .map(|t| (t.meta.id, t.root()))
            .collect();
        for id in st.writes.tables() {
            let root = *(roots.get(&id))
                .ok_or_else(|| corrupt(format!("writes to unloaded table {id}")))?;
            let pages = &st.pages;
            let counted = match self.trees_ahead {
                true => None,
                false => self.counts.get(&id).copied().flatten(),
            };
            let resolved = st.writes.with_table_mut(id, |w| match counted {
                Some(delta) => w.resolve_counted(delta),
                None => w.resolve(|k| Ok(btree::get(pages, &root, k)?.is_some())),
            });
            resolved.transpose()?;
        }
        Ok(())
    }

    fn apply(&mut self, op: &Op<'_>) -> Result<()> {
        let keeps_tables = matches!(
            op,
            Op::Put { .. } | Op::Delete { .. } | Op::CountChange { .. } | Op::FoldRound { .. }
        );
        if !keeps_tables {
            // A catalog op may unload or rename the table last written.
            self.loaded = None;
        }
        match *op {
            Op::Put { table, key, value } => self.write(table, key, Some(value)),
            Op::Delete { table, key } => self.write(table, key, None),
            Op::ClearTable { table } => {
                self.write_trees()?;
                self.with_tree(table, |p, r| btree::clear(p, r).map(|_| ()))
            }
            Op::CreateTable {
                table,
                name,
                key_type,
                value_type,
            } => self.create_table(table, name, key_type, value_type),
            Op::DropTable { table } => self.drop_table(table),
            Op::RenameTable { table, new_name } => self.rename_table(table, new_name),
            // Read per part by `apply_part`.
            Op::CountChange { .. } | Op::FoldRound { .. } => Ok(()),
            Op::CreateCf { .. } | Op::DropCf => Err(Error::Unsupported(
                "column family records in the WAL need a newer sheafdb",
            )),
        }
    }

    fn create_table(
        &mut self,
        id: TableId,
        name: &str,
        key_type: &str,
        value_type: &str,
    ) -> Result<()> {
        // The rules `create_table` follows: a new id (never a live one,
        // and below the range ids stay in), a valid name not taken.
        if id.0 >= COUNTER_LIMIT || self.names.contains_key(&id) {
            return Err(corrupt(format!(
                "record creates table {name:?} with id {id}, in use or out of range"
            )));
        }
        self.check_new_name(name)?;
        self.write_trees()?;
        let meta = TableMeta {
            id,
            root: None,
            len: 0,
            key_type: key_type.to_string(),
            value_type: value_type.to_string(),
        };
        self.state.catalog_create(name, meta)?;
        self.names.insert(id, name.to_string());
        Ok(())
    }

    fn drop_table(&mut self, id: TableId) -> Result<()> {
        self.write_trees()?;
        let meta = self.table(id)?.meta.clone();
        let name = self
            .names
            .remove(&id)
            .ok_or_else(|| corrupt("dropped table has no name"))?;
        self.state.catalog_drop(&name, &meta)
    }

    fn rename_table(&mut self, id: TableId, new_name: &str) -> Result<()> {
        self.check_new_name(new_name)?;
        self.write_trees()?;
        let meta = self.table(id)?.meta.clone();
        let old = self
            .names
            .insert(id, new_name.to_string())
            .ok_or_else(|| corrupt("renamed table has no name"))?;
        self.state.catalog_rename(&old, new_name, meta)
    }
}
