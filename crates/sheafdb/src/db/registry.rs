//! The registry of open column families and the database-wide snapshot.
//!
//! Owns: [`CfRegistry`]: the live CFs by id, the `DbVersion` every
//! database-wide snapshot loads, the next CF id, dropped CFs awaiting
//! release, and the two locks that order CF creation and drop against
//! each other and against checkpoints.
//!
//! Invariants: a CF is in `cfs` exactly when it is in the snapshot's
//! `DbVersion` (both change under `change` write-held, or at open before
//! any reader); CF ids are never reused (`next_id` only grows).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::{Mutex, RwLock};

use crate::lock_rank::{ranks, RankedMutex, RankedRwLock};

use crate::error::{Error, Result};
use crate::txn::{CfShared, DbVersion};
use crate::types::CfId;

/// The live column families of one open database.
#[derive(Debug)]
pub(crate) struct CfRegistry {
    /// Live CFs by id.
    pub cfs: RwLock<BTreeMap<CfId, Arc<CfShared>>>,
    /// Every CF's published version, for database-wide snapshots.
    pub snapshot: ArcSwap<DbVersion>,
    /// Next CF id (never reused; persisted in the superblock).
    pub next_id: AtomicU64,
    /// Serialises CF creation and drop (not on any commit path).
    pub create_drop: RankedMutex<(), { ranks::CREATE_DROP }>,
    /// Write-held by CF creation/drop from their WAL append until the
    /// registry reflects it; read-held by a checkpoint while it samples the
    /// log end, the registry and the snapshot, so it never records a log
    /// end past a CF record it has not seen.
    pub change: RankedRwLock<(), { ranks::CF_CHANGE }>,
    /// Dropped CFs whose descriptor or extents are not released yet.
    pub dropped: Mutex<Vec<Arc<CfShared>>>,
}

impl CfRegistry {
    /// An empty registry whose next CF id is `next_id`.
    pub fn new(next_id: CfId) -> CfRegistry {
        CfRegistry {
            cfs: RwLock::new(BTreeMap::new()),
            snapshot: ArcSwap::from_pointee(DbVersion::default()),
            next_id: AtomicU64::new(next_id.0),
            create_drop: RankedMutex::new(()),
            change: RankedRwLock::new(()),
            dropped: Mutex::new(Vec::new()),
        }
    }

    /// Makes `cf` visible: in the registry and the database-wide snapshot.
    pub fn register(&self, cf: Arc<CfShared>) {
        let v = cf.current.load_full();
        let id = cf.id;
        // Ids are never reused, whatever the file said the next one is.
        self.next_id.fetch_max(id.0 + 1, Ordering::AcqRel);
        let prev = self.cfs.write().insert(id, cf);
        assert!(prev.is_none(), "cf {id} registered twice");
        self.snapshot
            .rcu(|old| Arc::new(old.with(&[(id, Some(v.clone()))])));
    }

    /// Removes `cf` from the registry and the database-wide snapshot and
    /// marks it dropped; its descriptor and extents are released by later
    /// checkpoints.
    pub fn unregister(&self, cf: &Arc<CfShared>) {
        cf.dropped.store(true, Ordering::Release);
        cf.key_filter.release();
        let id = cf.id;
        let removed = self.cfs.write().remove(&id);
        assert!(removed.is_some(), "cf {id} unregistered but not registered");
        self.snapshot.rcu(|old| Arc::new(old.with(&[(id, None)])));
        self.dropped.lock().push(cf.clone());
    }

    /// The CF with id `id`.
    pub fn get(&self, id: CfId) -> Result<Arc<CfShared>> {
        self.cfs
            .read()
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::cf_not_found(id))
    }
}
