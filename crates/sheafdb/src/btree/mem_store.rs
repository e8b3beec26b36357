//! In-memory page store for the tree's tests.
//!
//! Committed and private runs live in one map; `commit()` turns the private
//! runs into committed ones. Freed committed runs stay readable (snapshots
//! taken earlier still read them) but are no longer live and never reused;
//! freed private runs are reused at once. Every misuse the real store would
//! reject panics here: double free, freeing an unknown run or with the wrong
//! length, installing or mutating a non-private run, a header that does not
//! name the run it is installed at.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::btree::store::{PageRead, PageWrite};
use crate::error::{Error, Result};
use crate::format::page::{make_mut, PageBuf, PageBytes as _, PageOwned, PageRef};
use crate::types::{CfId, PageId};

#[derive(Clone)]
pub(crate) struct MemStore {
    page_size: usize,
    cf: CfId,
    /// Contents of every run ever installed and not reused.
    data: HashMap<PageId, PageRef>,
    /// Runs referenced by the current state: first page → pages.
    live: BTreeMap<PageId, u32>,
    private: HashSet<PageId>,
    /// Freed private runs, reusable by size.
    reusable: Vec<(PageId, u32)>,
    next: u64,
    pub allocs: u64,
    pub frees: u64,
    /// Keep freed committed runs readable (for snapshots); off for
    /// benchmarks that would otherwise keep every version in memory.
    pub keep_freed: bool,
    /// Count bad frees in `bad_frees` instead of panicking (for mutating
    /// deliberately corrupted trees).
    pub lenient: bool,
    pub bad_frees: u64,
    /// Pages the next single-page allocations hand out first, live or not
    /// (a file whose free space names live pages). A live one becomes
    /// private with no contents until installed, as in the real store.
    pub hand_out: Vec<PageId>,
}

impl MemStore {
    pub fn new(page_size: usize) -> MemStore {
        MemStore {
            page_size,
            cf: CfId(7),
            data: HashMap::new(),
            live: BTreeMap::new(),
            private: HashSet::new(),
            reusable: Vec::new(),
            next: 2,
            allocs: 0,
            frees: 0,
            keep_freed: true,
            lenient: false,
            bad_frees: 0,
            hand_out: Vec::new(),
        }
    }

    /// Makes every private run committed.
    pub fn commit(&mut self) {
        for id in self.private.drain() {
            assert!(
                self.data.contains_key(&id),
                "run {id} allocated but never installed"
            );
        }
        self.reusable.clear();
    }

    /// The live runs: first page → pages.
    pub fn live(&self) -> &BTreeMap<PageId, u32> {
        &self.live
    }

    /// Overwrites one byte of a stored run, bypassing everything.
    pub fn corrupt(&mut self, id: PageId, offset: usize, byte: u8) {
        let page = self.data.get_mut(&id).expect("known page");
        make_mut(page).bytes_mut()[offset] = byte;
    }
}

impl std::fmt::Debug for MemStore {
    /// The live runs by id and length, not their bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemStore")
            .field("cf", &self.cf)
            .field("live", &self.live)
            .field("private", &self.private)
            .finish_non_exhaustive()
    }
}

impl PageRead for MemStore {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn cf(&self) -> CfId {
        self.cf
    }

    fn read_run(&self, id: PageId, npages: u32) -> Result<PageRef> {
        match self.data.get(&id) {
            Some(p) if p.len() == npages as usize * self.page_size => Ok(p.clone()),
            Some(_) => Err(Error::corrupted_page(id, "run length mismatch")),
            None => Err(Error::corrupted_page(id, "no such page")),
        }
    }
}

impl PageWrite for MemStore {
    fn is_private(&self, id: PageId) -> bool {
        self.private.contains(&id)
    }

    fn alloc(&mut self, npages: u32) -> Result<PageId> {
        assert!(npages > 0);
        self.allocs += 1;
        if npages == 1 {
            if let Some(id) = self.hand_out.pop() {
                self.live.insert(id, 1);
                self.data.remove(&id);
                self.private.insert(id);
                return Ok(id);
            }
        }
        let id = match self.reusable.iter().position(|&(_, n)| n == npages) {
            Some(i) => self.reusable.swap_remove(i).0,
            None => {
                let id = PageId(self.next);
                self.next += npages as u64;
                id
            }
        };
        assert!(self.live.insert(id, npages).is_none());
        self.private.insert(id);
        Ok(id)
    }

    fn install(&mut self, id: PageId, page: PageOwned) {
        assert!(self.private.contains(&id), "install into non-private {id}");
        let npages = self.live[&id];
        assert_eq!(page.len(), npages as usize * self.page_size);
        assert_eq!(page.page_id(), id, "header names another page");
        assert_eq!(page.cf(), self.cf);
        assert_eq!(page.npages(), npages);
        self.data.insert(id, page.shareable());
    }

    fn get_mut(&mut self, id: PageId) -> Result<&mut PageBuf> {
        assert!(self.private.contains(&id), "get_mut of non-private {id}");
        let page = self.data.get_mut(&id).expect("private page installed");
        Ok(make_mut(page))
    }

    fn free(&mut self, id: PageId, npages: u32) {
        self.frees += 1;
        if self.lenient && self.live.get(&id) != Some(&npages) {
            self.bad_frees += 1;
            return;
        }
        match self.live.remove(&id) {
            Some(n) => assert_eq!(n, npages, "free of {id} with the wrong length"),
            None => panic!("double free or free of unknown run {id}"),
        }
        if self.private.remove(&id) {
            self.data.remove(&id);
            self.reusable.push((id, npages));
        } else if !self.keep_freed {
            self.data.remove(&id);
        }
    }
}
