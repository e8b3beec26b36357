//! Savepoints of a write transaction: go back to an earlier point of the
//! transaction, undoing every change made after it (table writes, tables
//! created, deleted and renamed).
//!
//! Owns: the savepoint list of a [`WriteState`] and the restore, which
//! rebuilds the state from the transaction's base by replaying the prefix
//! of its own WAL record up to the savepoint (design.md "Savepoints").
//!
//! Why replay instead of copying the state at each savepoint: a
//! transaction's private pages are modified in place and its write set is
//! a hash table per table, so a copy would cost the whole transaction's
//! size per savepoint; the logical record is already kept (it is what the
//! commit appends to the WAL), a savepoint is a mark in it, and replaying
//! a prefix through the same rules the API uses gives exactly the state
//! the transaction had there. The cost moves to `restore`, O(ops before
//! the savepoint).
//!
//! Invariants: the record is kept while any savepoint exists, even past
//! `wal_record_max_bytes` (such a transaction then commits by a direct
//! checkpoint); replaying the prefix re-logs exactly the prefix's bytes
//! (checked in debug builds), so earlier savepoints stay valid; restoring
//! to a savepoint discards the savepoints taken after it.
//!
//! Must not know: table handles (the caller checks none is open), the
//! database.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::types::TableId;
use crate::wal::record::{decode_commit, CommitEncoder, EncoderMark, Op};

use super::state::{create_table, WriteState};

/// One savepoint of a write state: its number and where the record stood.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SavepointMark {
    pub seq: u64,
    pub log: EncoderMark,
    /// Where the numbering of `insert_reserve`'s values stood
    /// ([`Reservations::mark`](super::state::Reservations::mark)). A
    /// restore needs `&mut` of the transaction, so no reservation is alive
    /// then: any made since was leaked (`mem::forget`) and goes with the
    /// rest of what came after.
    pub reservations: u64,
}

fn invalid(what: &str) -> Error {
    Error::InvalidArgument(format!("savepoint: {what}"))
}

fn replay_corrupt(what: String) -> Error {
    // The record was built by this transaction: a mismatch is an engine
    // bug or a tree the file damaged (read differently the second time).
    Error::corrupted(format!("savepoint replay: {what}"), "write transaction")
}

impl WriteState {
    /// Takes a savepoint: returns its number. From now on the record is
    /// kept whatever its size. `InvalidArgument` if the transaction has
    /// already outgrown `wal_record_max_bytes` without a savepoint (its
    /// record was dropped), `TransactionFailed` after a failed operation.
    pub fn savepoint(&mut self) -> Result<u64> {
        self.check_not_failed()?;
        let Some(log) = &self.log else {
            return Err(invalid(
                "this transaction outgrew wal_record_max_bytes before its first savepoint \
                 (take the savepoint earlier, or raise Builder::wal_record_max_bytes)",
            ));
        };
        let mark = SavepointMark {
            seq: self.next_savepoint,
            log: log.mark(),
            reservations: self.reserving.mark(),
        };
        self.next_savepoint += 1;
        self.keep_log = true;
        self.savepoints.push(mark);
        Ok(mark.seq)
    }

    /// Goes back to savepoint `seq`: the state is rebuilt from the base by
    /// replaying the record up to the savepoint. Savepoints taken after it
    /// are discarded; it stays valid. A transaction that failed after the
    /// savepoint is usable again if the replay succeeds; if the replay
    /// fails, the transaction is failed.
    pub fn restore_savepoint(&mut self, seq: u64) -> Result<()> {
        let at = (self.savepoints.iter())
            .position(|m| m.seq == seq)
            .ok_or_else(|| {
                invalid(
                    "not valid any more (a restore to an earlier savepoint discarded it), \
                     or of another transaction",
                )
            })?;
        self.savepoints.truncate(at + 1);
        let mark = self.savepoints[at].log;
        let reservations = self.savepoints[at].reservations;
        let mut log = self
            .log
            .take()
            .expect("engine invariant: the record is kept while savepoints exist");
        log.truncate(mark);
        // Kept whole until the replay succeeds: a failed replay leaves a
        // shorter record, and a retry must still find the savepoint's.
        let kept = log.clone();
        let payload = log.finish();
        self.reset_to_base();
        let replayed = self.replay_payload(&payload);
        debug_assert!(
            replayed.is_err()
                || self.log.as_ref().map(CommitEncoder::len_bytes) == Some(mark.len_bytes()),
            "replaying a savepoint's prefix logged other bytes"
        );
        if replayed.is_ok() {
            // A reservation leaked after the savepoint failed every commit
            // after a restore (an adversarial probe); one outstanding at
            // the savepoint and stored after it did too, when the count
            // was put back (another).
            self.reserving.restore(reservations);
        }
        replayed.map_err(|e| {
            self.log = Some(kept);
            self.failed = Some(format!("restoring a savepoint failed: {e}"));
            e
        })
    }

    /// Drops every change: private pages back to the allocator, catalog,
    /// tables and write set as the base has them, an empty record. The
    /// savepoint list is kept (the caller trims it).
    fn reset_to_base(&mut self) {
        self.pages.rollback();
        self.catalog = self.base.catalog;
        self.next_table = self.base.next_table;
        self.tables.clear();
        self.writes = crate::buffer::write_set::WriteSet::new();
        self.folded = false;
        debug_assert!(self.carry.is_none(), "a fold made aside has no savepoints");
        self.catalog_changed = false;
        self.log = Some(CommitEncoder::new());
        self.log_counts.clear();
        self.unsettled.clear();
        // The replay's puts keep the base's hints true (`log_write`); the
        // ends found since the base may not hold for the prefix.
        self.ends = self.base.ends.clone();
        self.failed = None;
    }

    /// Applies the operations of `payload` (this transaction's own record)
    /// through the rules the API uses, logging each again.
    fn replay_payload(&mut self, payload: &[u8]) -> Result<()> {
        let parts = decode_commit(payload)?;
        let mut names = self.names_by_id()?;
        for part in &parts {
            if part.cf != self.cf {
                return Err(replay_corrupt(format!("a part for cf {}", part.cf)));
            }
            for op in &part.ops {
                self.replay_op(op, &mut names)?;
            }
        }
        Ok(())
    }

    fn replay_op(&mut self, op: &Op<'_>, names: &mut HashMap<TableId, String>) -> Result<()> {
        let name_of = |names: &HashMap<TableId, String>, id: TableId| {
            names
                .get(&id)
                .cloned()
                .ok_or_else(|| replay_corrupt(format!("unknown table {id}")))
        };
        match *op {
            Op::Put { table, key, value } => {
                let name = name_of(names, table)?;
                self.load_table(&name)?;
                let (id, root) = self.table_ref(&name)?;
                let old = self.lookup(id, &root, key)?;
                self.write(id, key, Some(value), &old)
            }
            Op::Delete { table, key } => {
                let name = name_of(names, table)?;
                self.load_table(&name)?;
                let (id, root) = self.table_ref(&name)?;
                // A blind removal (`Table::delete`) logs keys that may
                // have been missing: replayed as a counted write of what
                // the lookup finds (it logs the same operation again).
                let old = self.lookup(id, &root, key)?;
                self.write(id, key, None, &old)
            }
            Op::CreateTable {
                table,
                name,
                key_type,
                value_type,
            } => {
                if table != self.next_table {
                    return Err(replay_corrupt(format!("table {name:?} created as {table}")));
                }
                create_table(self, name, key_type, value_type)?;
                names.insert(table, name.to_string());
                Ok(())
            }
            Op::DropTable { table } => {
                let name = name_of(names, table)?;
                self.drop_table_logged(&name)?;
                names.remove(&table);
                Ok(())
            }
            Op::RenameTable { table, new_name } => {
                let name = name_of(names, table)?;
                self.rename_table_logged(&name, new_name)?;
                names.insert(table, new_name.to_string());
                Ok(())
            }
            Op::ClearTable { .. }
            | Op::CreateCf { .. }
            | Op::DropCf
            | Op::CountChange { .. }
            | Op::FoldRound { .. } => Err(replay_corrupt(format!(
                "an operation write transactions do not log: {op:?}"
            ))),
        }
    }
}
