//! The checkpoint protocol (DESIGN §6), run synchronously by every commit
//! in this version of the engine.
//!
//! Steps: (1) write the transaction's private runs; (2) record the CF's new
//! descriptor (catalog root, free space) in the system tree, copy-on-write;
//! (3) write a new metadata blob (extent table, system free space) into
//! fresh system pages; (4) `fdatasync`; (5) write the superblock to the
//! slot that is not current, `fdatasync`; (6) only now release the system
//! pages the previous base used, and publish the new CF version.
//!
//! Crash argument: until step 5 completes, the current superblock and every
//! page it reaches are untouched (new data goes only to pages that are free
//! in the current base), so a crash recovers the previous state. A torn
//! superblock write fails its checksum and the other slot is used.
//! Invariant 4 (DESIGN §11): the data file is synced before the superblock
//! that references it is written, and generations strictly increase.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{DbShared, SysState};
use crate::btree;
use crate::error::{Error, Result};
use crate::format::page::{pages_for_payload, PageBuf, PageRef, PageType, HEADER_LEN};
use crate::format::records::{cf_key, CfDescriptor, MetaBlob};
use crate::format::superblock::Superblock;
use crate::pager::alloc::{CfAllocator, ReclaimBatch};
use crate::pager::ranges::RangeSet;
use crate::txn::pages::TxnPages;
use crate::txn::{CfShared, CfVersion, Durability, WriteState};
use crate::types::{CfId, Lsn, PageId};

impl DbShared {
    /// Commits `st` on `cf` by a checkpoint, then publishes the version.
    pub(crate) fn commit_cf(
        self: &Arc<Self>,
        cf: &CfShared,
        st: &mut WriteState,
        _durability: Durability,
    ) -> Result<()> {
        self.check_writable()?;
        let runs = st.pages.private_runs();
        let freed = st.pages.take_freed();
        let next_version = st.base.version.next();
        let desc = {
            let mut alloc = cf.alloc.lock();
            for &(p, n) in &freed {
                alloc.free_pending(p, n);
            }
            CfDescriptor {
                name: cf.name.clone(),
                catalog_root: st.catalog.root,
                catalog_len: st.catalog.len,
                next_table: st.next_table,
                checkpoint_lsn: Lsn(0),
                version: next_version,
                free: alloc.durable_free().to_vec(),
            }
        };
        {
            let mut sys = self.sys.lock();
            if let Err(e) = self.write_checkpoint(&mut sys, &runs, vec![(cf.id, desc)]) {
                self.poison();
                return Err(e);
            }
        }
        st.pages.mark_committed();
        let new_batch = ReclaimBatch::new(cf.alloc.lock().released_sink());
        st.base.batch.seal(freed, new_batch.clone());
        let version = CfVersion {
            version: next_version,
            catalog: st.catalog,
            next_table: st.next_table,
            lsn: Lsn(0),
            batch: new_batch,
        };
        cf.current.store(Arc::new(version));
        Ok(())
    }

    /// Writes `runs` and the given CF descriptors as a new durable base.
    pub(crate) fn write_checkpoint(
        self: &Arc<Self>,
        sys: &mut SysState,
        runs: &[(PageId, PageRef)],
        descriptors: Vec<(CfId, CfDescriptor)>,
    ) -> Result<()> {
        let mut sp = TxnPages::new(self.clone(), CfId::SYSTEM, sys.alloc.clone());
        let result = self.write_checkpoint_inner(sys, &mut sp, runs, descriptors);
        if result.is_err() {
            sp.rollback();
        }
        result
    }

    fn write_checkpoint_inner(
        self: &Arc<Self>,
        sys: &mut SysState,
        sp: &mut TxnPages,
        runs: &[(PageId, PageRef)],
        descriptors: Vec<(CfId, CfDescriptor)>,
    ) -> Result<()> {
        let mut root = sys.root;
        for (cf, desc) in &descriptors {
            btree::insert(sp, &mut root, &cf_key(*cf), &desc.encode())?;
        }
        if let Some((p, n)) = sys.meta_run {
            btree::store::PageWrite::free(sp, p, n);
        }
        // System pages the previous base still uses: free in the new base,
        // reusable only once it is durable.
        let released = sp.take_freed();
        let mut released_set = RangeSet::new();
        for &(p, n) in &released {
            let ok = released_set.insert(p.0, n as u64);
            assert!(ok, "system page {p} freed twice in one checkpoint");
        }
        let meta = self.build_meta(sp, &sys.alloc.clone(), &released_set)?;
        let mut all: Vec<(PageId, PageRef)> = runs.to_vec();
        all.extend(sp.private_runs());
        self.pager.write_runs(&all)?;
        self.pager.sync()?;
        let sb = Superblock {
            page_size: self.pager.page_size() as u32,
            generation: sys.generation + 1,
            sys_root: root.root,
            sys_len: root.len,
            meta_page: Some(meta.0),
            meta_npages: meta.1,
            meta_len: meta.2,
            file_pages: meta.3,
            next_cf: sys.next_cf,
            wal_epoch: 0,
        };
        let slot = 1 - sys.slot;
        let offset = slot as u64 * self.pager.page_size() as u64;
        self.pager.storage().write_at(offset, &sb.encode())?;
        self.pager.sync()?;
        // The new base is durable.
        sys.generation += 1;
        sys.slot = slot;
        sys.root = root;
        sys.meta_run = Some((meta.0, meta.1));
        sp.mark_committed();
        let mut alloc = sys.alloc.lock();
        for (p, n) in released {
            alloc.free_now(p, n);
        }
        Ok(())
    }

    /// Allocates and fills the metadata blob. Returns (first page, pages,
    /// payload length, file pages). The blob describes the allocator state
    /// including its own pages, so its run is allocated before encoding,
    /// with slack, and retried if the encoding outgrew it.
    fn build_meta(
        &self,
        sp: &mut TxnPages,
        sys_alloc: &Mutex<CfAllocator>,
        released: &RangeSet,
    ) -> Result<(PageId, u32, u32, u64)> {
        use crate::btree::store::PageWrite;
        let ps = self.pager.page_size();
        let mut slack = 256usize;
        for _attempt in 0..8 {
            let estimate = self.encode_meta(sys_alloc, released).len() + slack;
            let npages = pages_for_payload(ps, estimate);
            let id = sp.alloc(npages)?;
            let blob = self.encode_meta(sys_alloc, released);
            if HEADER_LEN + blob.len() <= npages as usize * ps {
                let mut run = PageBuf::new_run(ps, npages, PageType::Blob, id, CfId::SYSTEM);
                run.bytes_mut()[HEADER_LEN..HEADER_LEN + blob.len()].copy_from_slice(&blob);
                run.set_payload_len(blob.len() as u32);
                sp.install(id, run);
                let file_pages = self.extents.lock().file_pages();
                return Ok((id, npages, blob.len() as u32, file_pages));
            }
            sp.free(id, npages);
            slack *= 4;
        }
        Err(Error::corrupted(
            "metadata blob size did not converge",
            "checkpoint",
        ))
    }

    fn encode_meta(&self, sys_alloc: &Mutex<CfAllocator>, released: &RangeSet) -> Vec<u8> {
        let mut sys_free = sys_alloc.lock().durable_free();
        let ok = sys_free.insert_all(released);
        assert!(ok, "released system pages were already free");
        let extents = self.extents.lock();
        MetaBlob {
            file_pages: extents.file_pages(),
            extents: extents.to_records(),
            sys_free: sys_free.to_vec(),
        }
        .encode()
    }
}
