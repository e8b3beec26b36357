//! Issue 12: files whose pages are each valid (checksums fixed after the
//! edit) but together impossible. Each case edits a real database file:
//! aliased overflow runs and children, cycles, pointers outside the CF's
//! extents or at pages of the wrong type, a leaf that lost a cell. For
//! each: `check_integrity` reports `Corrupted`; reads, writes + commit, a
//! checkpoint and close give `Corrupted` (or another clean error) or data
//! — never a panic, never a hang. A commit that fails must leave the
//! database readable.

mod common;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{builder, def, files_of, Files};
use sheafdb::storage::sim::SimVfs;
use sheafdb::testing::{PageId, Superblock, SLOT_LEN};
use sheafdb::{Database, Error};

const NAME: &str = "i.sheaf";
const PS: usize = 4096;
const TYPE_BRANCH: u8 = 1;
const TYPE_LEAF: u8 = 2;
const TYPE_OVERFLOW: u8 = 3;

/// Keys with 6,000-byte values (two-page overflow runs), and small ones
/// that give the tree branches.
fn big_key(i: u32) -> Vec<u8> {
    format!("big{i:03}").into_bytes()
}
fn big_value(i: u32) -> Vec<u8> {
    (0..6000u32).map(|j| (i * 7 + j) as u8).collect()
}
fn small_key(i: u32) -> Vec<u8> {
    format!("small{i:04}").into_bytes()
}

fn build() -> Files {
    let vfs = SimVfs::new();
    let db = builder()
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), NAME)
        .unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(def("t")).unwrap();
        for i in 0..24 {
            t.insert(big_key(i).as_slice(), big_value(i).as_slice())
                .unwrap();
        }
        for i in 0..600 {
            t.insert(small_key(i).as_slice(), b"v".as_slice()).unwrap();
        }
    }
    tx.commit().unwrap();
    db.close().unwrap();
    files_of(&vfs)
}

/// A data file image with page-level editing (offsets from the format
/// docs: `format::page` and `btree::node`).
struct Image {
    bytes: Vec<u8>,
}

struct LeafCell {
    /// Offset of the cell in the file.
    at: usize,
    vlen: u32,
    overflow: Option<u64>,
}

impl Image {
    fn u16_at(&self, at: usize) -> usize {
        u16::from_le_bytes(self.bytes[at..at + 2].try_into().unwrap()) as usize
    }
    fn u32_at(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.bytes[at..at + 4].try_into().unwrap())
    }
    fn u64_at(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.bytes[at..at + 8].try_into().unwrap())
    }
    fn set_u64(&mut self, at: usize, v: u64) {
        self.bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// Ids of the pages whose header names them and has type `ty`.
    fn pages(&self, ty: u8) -> Vec<u64> {
        (0..self.bytes.len() / PS)
            .map(|i| i as u64)
            .filter(|&id| {
                let at = id as usize * PS;
                self.bytes[at + 4] == ty && self.u64_at(at + 8) == id
            })
            .collect()
    }

    fn cf_of(&self, id: u64) -> u64 {
        self.u64_at(id as usize * PS + 16)
    }

    /// Recomputes the checksum of the run starting at page `id`.
    fn reseal(&mut self, id: u64) {
        let at = id as usize * PS;
        let npages = self.u32_at(at + 24).max(1) as usize;
        let crc = crc32c::crc32c(&self.bytes[at + 4..at + npages * PS]);
        self.bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }

    fn count(&self, id: u64) -> usize {
        self.u16_at(id as usize * PS + 6)
    }

    fn cell_at(&self, id: u64, i: usize) -> usize {
        id as usize * PS + self.u16_at(id as usize * PS + 48 + 2 * i)
    }

    fn leaf_cells(&self, id: u64) -> Vec<LeafCell> {
        (0..self.count(id))
            .map(|i| {
                let at = self.cell_at(id, i);
                let klen = self.u16_at(at);
                let vlen = self.u32_at(at + 2);
                let overflow = (self.bytes[at + 6] == 1).then(|| self.u64_at(at + 7 + klen));
                LeafCell { at, vlen, overflow }
            })
            .collect()
    }

    /// File offset of branch `id`'s child pointer `i` (`count` = rightmost).
    fn child_at(&self, id: u64, i: usize) -> usize {
        if i == self.count(id) {
            id as usize * PS + 40
        } else {
            self.cell_at(id, i)
        }
    }

    fn user_pages(&self, ty: u8) -> Vec<u64> {
        let mut v = self.pages(ty);
        v.retain(|&p| self.cf_of(p) == 1);
        v
    }
}

/// One inconsistency: its name and the edit that makes it.
type Case = (&'static str, fn(&mut Image) -> bool);

fn overflow_alias(img: &mut Image) -> bool {
    for leaf in img.user_pages(TYPE_LEAF) {
        let cells = img.leaf_cells(leaf);
        let runs: Vec<&LeafCell> = cells.iter().filter(|c| c.overflow.is_some()).collect();
        if let [a, b, ..] = runs.as_slice() {
            if a.vlen == b.vlen {
                let klen = img.u16_at(a.at);
                let (at, target) = (a.at + 7 + klen, b.overflow.unwrap());
                img.set_u64(at, target);
                img.reseal(leaf);
                return true;
            }
        }
    }
    false
}

fn overflow_at_a_leaf(img: &mut Image) -> bool {
    let leaves = img.user_pages(TYPE_LEAF);
    for &leaf in &leaves {
        if let Some(c) = img.leaf_cells(leaf).iter().find(|c| c.overflow.is_some()) {
            let klen = img.u16_at(c.at);
            let other = *leaves.iter().find(|&&l| l != leaf).unwrap();
            img.set_u64(c.at + 7 + klen, other);
            img.reseal(leaf);
            return true;
        }
    }
    false
}

fn overflow_past_the_file(img: &mut Image) -> bool {
    let past = (img.bytes.len() / PS) as u64 + 1000;
    for leaf in img.user_pages(TYPE_LEAF) {
        if let Some(c) = img.leaf_cells(leaf).iter().find(|c| c.overflow.is_some()) {
            let klen = img.u16_at(c.at);
            img.set_u64(c.at + 7 + klen, past);
            img.reseal(leaf);
            return true;
        }
    }
    false
}

/// An overflow pointer whose run would pass the last page id.
fn overflow_at_the_last_page_id(img: &mut Image) -> bool {
    for leaf in img.user_pages(TYPE_LEAF) {
        if let Some(c) = img.leaf_cells(leaf).iter().find(|c| c.overflow.is_some()) {
            let klen = img.u16_at(c.at);
            img.set_u64(c.at + 7 + klen, u64::MAX);
            img.reseal(leaf);
            return true;
        }
    }
    false
}

/// Edits child pointer `from` of the first user branch with two or more
/// cells to the value `to(img, branch)` gives.
fn edit_child(img: &mut Image, from: usize, to: impl Fn(&Image, u64) -> u64) -> bool {
    for b in img.user_pages(TYPE_BRANCH) {
        if img.count(b) >= 2 {
            let target = to(img, b);
            let at = img.child_at(b, from);
            img.set_u64(at, target);
            img.reseal(b);
            return true;
        }
    }
    false
}

fn sibling_alias(img: &mut Image) -> bool {
    edit_child(img, 0, |img, b| img.u64_at(img.child_at(b, 1)))
}

fn rightmost_is_first(img: &mut Image) -> bool {
    for b in img.user_pages(TYPE_BRANCH) {
        if img.count(b) >= 2 {
            let first = img.u64_at(img.child_at(b, 0));
            let at = img.child_at(b, img.count(b));
            img.set_u64(at, first);
            img.reseal(b);
            return true;
        }
    }
    false
}

fn child_cycle(img: &mut Image) -> bool {
    edit_child(img, 1, |_, b| b)
}

fn child_past_the_file(img: &mut Image) -> bool {
    let past = (img.bytes.len() / PS) as u64 + 7;
    edit_child(img, 1, move |_, _| past)
}

/// A child id whose byte offset does not fit in a u64.
fn child_at_a_huge_page_id(img: &mut Image) -> bool {
    edit_child(img, 1, |_, _| 1 << 60)
}

fn child_at_an_overflow_run(img: &mut Image) -> bool {
    let run = img.user_pages(TYPE_OVERFLOW)[0];
    edit_child(img, 1, move |_, _| run)
}

fn child_in_the_system_cf(img: &mut Image) -> bool {
    let sys: Vec<u64> = img
        .pages(TYPE_LEAF)
        .into_iter()
        .chain(img.pages(TYPE_BRANCH))
        .filter(|&p| img.cf_of(p) == 0)
        .collect();
    let Some(&target) = sys.first() else {
        return false;
    };
    edit_child(img, 1, move |_, _| target)
}

fn leaf_loses_its_last_cell(img: &mut Image) -> bool {
    for leaf in img.user_pages(TYPE_LEAF) {
        let n = img.count(leaf);
        if n >= 4 {
            let at = leaf as usize * PS + 6;
            img.bytes[at..at + 2].copy_from_slice(&((n - 1) as u16).to_le_bytes());
            img.reseal(leaf);
            return true;
        }
    }
    false
}

/// The current superblock (the slot with the higher generation).
fn superblock(img: &Image) -> Superblock {
    (0..2u8)
        .filter_map(|slot| {
            let at = slot as usize * PS;
            Superblock::decode(&img.bytes[at..at + SLOT_LEN], slot)
                .ok()
                .flatten()
        })
        .max_by_key(|sb| sb.generation)
        .expect("a written superblock")
}

/// The pages reachable from tree root `root`, leaves last of their level.
fn tree_pages(img: &Image, root: u64) -> Vec<u64> {
    let mut out = vec![root];
    let mut i = 0;
    while let Some(&p) = out.get(i) {
        if img.bytes[p as usize * PS + 4] == TYPE_BRANCH {
            for c in 0..=img.count(p) {
                out.push(img.u64_at(img.child_at(p, c)));
            }
        }
        i += 1;
    }
    out
}

/// `(leaf, file offset of the value)` of the cell whose key is `key` in
/// the tree at `root`.
fn value_in(img: &Image, root: u64, key: &[u8]) -> Option<(u64, usize)> {
    for leaf in tree_pages(img, root) {
        if img.bytes[leaf as usize * PS + 4] != TYPE_LEAF {
            continue;
        }
        for c in img.leaf_cells(leaf) {
            let klen = img.u16_at(c.at);
            if c.overflow.is_none() && &img.bytes[c.at + 7..c.at + 7 + klen] == key {
                return Some((leaf, c.at + 7 + klen));
            }
        }
    }
    None
}

/// The CF descriptor of CF 1 in the system tree: `(leaf, value offset)`.
fn descriptor(img: &Image) -> Option<(u64, usize)> {
    let mut key = vec![b'C'];
    key.extend_from_slice(&1u64.to_be_bytes());
    value_in(img, superblock(img).sys_root?.0, &key)
}

/// CF 1's catalog root, from its descriptor.
fn catalog_root(img: &Image) -> Option<u64> {
    let (_, at) = descriptor(img)?;
    let name_len = img.u32_at(at) as usize;
    Some(img.u64_at(at + 4 + name_len))
}

/// `(leaf, value offset)` of table "t"'s catalog entry.
fn value_of(img: &Image) -> Option<(u64, usize)> {
    value_in(img, catalog_root(img)?, b"t")
}

/// Edits the catalog entry of table "t" (`TableMeta`: id, root, len, …).
fn edit_table_meta(img: &mut Image, field: usize, to: impl Fn(&Image, u64, u64) -> u64) -> bool {
    let Some((leaf, at)) = value_of(img) else {
        return false;
    };
    let old = img.u64_at(at + field);
    let new = to(img, leaf, old);
    img.set_u64(at + field, new);
    img.reseal(leaf);
    true
}

fn table_root_at_an_overflow_run(img: &mut Image) -> bool {
    edit_table_meta(img, 8, |img, _, _| img.user_pages(TYPE_OVERFLOW)[0])
}

fn table_root_is_the_catalog(img: &mut Image) -> bool {
    edit_table_meta(img, 8, |_, catalog_leaf, _| catalog_leaf)
}

fn table_count_wrong(img: &mut Image) -> bool {
    edit_table_meta(img, 16, |_, _, len| len + 5)
}

fn catalog_root_at_an_overflow_run(img: &mut Image) -> bool {
    let Some((leaf, at)) = descriptor(img) else {
        return false;
    };
    let name_len = img.u32_at(at) as usize;
    let run = img.user_pages(TYPE_OVERFLOW)[0];
    img.set_u64(at + 4 + name_len, run);
    img.reseal(leaf);
    true
}

fn free_list_names_a_live_page(img: &mut Image) -> bool {
    let Some((leaf, at)) = descriptor(img) else {
        return false;
    };
    let name_len = img.u32_at(at) as usize;
    let ranges = at + 4 + name_len + 5 * 8;
    if img.u32_at(ranges) == 0 {
        return false;
    }
    // A live leaf below the second free range (the first is replaced).
    let below = match img.u32_at(ranges) {
        1 => u64::MAX,
        _ => img.u64_at(ranges + 4 + 16),
    };
    let Some(root) = catalog_root(img) else {
        return false;
    };
    let Some(table_root) = value_in(img, root, b"t").map(|(_, at)| img.u64_at(at + 8)) else {
        return false;
    };
    let Some(live) = tree_pages(img, table_root)
        .into_iter()
        .filter(|&p| p < below)
        .min()
    else {
        return false;
    };
    img.set_u64(ranges + 4, live);
    img.set_u64(ranges + 12, 1);
    img.reseal(leaf);
    true
}

fn extents_overlap(img: &mut Image) -> bool {
    let sb = superblock(img);
    let Some(meta) = sb.meta_page else {
        return false;
    };
    let at = meta.0 as usize * PS + 32; // the blob's payload
    let n = img.u32_at(at + 8) as usize;
    if n < 2 {
        return false;
    }
    let first = at + 12;
    let (start0, pages0) = (img.u64_at(first), img.u64_at(first + 8));
    // The second extent starts inside the first.
    img.set_u64(first + 24, start0 + pages0 / 2);
    img.reseal(meta.0);
    true
}

fn table_root_empty_with_entries(img: &mut Image) -> bool {
    edit_table_meta(img, 8, |_, _, _| 0)
}

fn table_count_near_i64_max(img: &mut Image) -> bool {
    edit_table_meta(img, 16, |_, _, _| i64::MAX as u64 - 1)
}

fn table_count_u64_max(img: &mut Image) -> bool {
    edit_table_meta(img, 16, |_, _, _| u64::MAX)
}

/// The free list's first range names the overflow run of `big_key(0)`,
/// which the first small commit removes (and so frees) after allocating.
fn free_list_names_a_live_overflow_run(img: &mut Image) -> bool {
    let Some((leaf, at)) = descriptor(img) else {
        return false;
    };
    let name_len = img.u32_at(at) as usize;
    let ranges = at + 4 + name_len + 5 * 8;
    if img.u32_at(ranges) == 0 {
        return false;
    }
    let Some(table_root) = catalog_root(img)
        .and_then(|root| value_in(img, root, b"t"))
        .map(|(_, at)| img.u64_at(at + 8))
    else {
        return false;
    };
    let run = tree_pages(img, table_root).into_iter().find_map(|p| {
        if img.bytes[p as usize * PS + 4] != TYPE_LEAF {
            return None;
        }
        img.leaf_cells(p).into_iter().find_map(|c| {
            let klen = img.u16_at(c.at);
            (img.bytes[c.at + 7..c.at + 7 + klen] == big_key(0)[..])
                .then_some(c.overflow)
                .flatten()
        })
    });
    let Some(run) = run else {
        return false;
    };
    img.set_u64(ranges + 4, run);
    img.set_u64(ranges + 12, 2);
    img.reseal(leaf);
    true
}

/// CF 1's checkpoint LSN (descriptor field 4) near the end of the LSN
/// space.
fn checkpoint_lsn_near_u64_max(img: &mut Image) -> bool {
    let Some((leaf, at)) = descriptor(img) else {
        return false;
    };
    let name_len = img.u32_at(at) as usize;
    img.set_u64(at + 4 + name_len + 3 * 8, u64::MAX - 4096);
    img.reseal(leaf);
    true
}

/// CF 1's descriptor key names CF `u64::MAX` instead.
fn descriptor_of_cf_u64_max(img: &mut Image) -> bool {
    let Some((leaf, at)) = descriptor(img) else {
        return false;
    };
    // The key ("C" + id) ends right before the value.
    img.set_u64(at - 8, u64::MAX);
    img.reseal(leaf);
    true
}

const CASES: &[Case] = &[
    ("overflow run shared by two cells", overflow_alias),
    ("overflow pointer at a leaf page", overflow_at_a_leaf),
    ("overflow pointer past the file", overflow_past_the_file),
    (
        "overflow pointer at the last page id",
        overflow_at_the_last_page_id,
    ),
    ("child shared by two branch cells", sibling_alias),
    ("rightmost child is the first child", rightmost_is_first),
    ("child pointing at its own parent", child_cycle),
    ("child past the file", child_past_the_file),
    ("child at an overflow run", child_at_an_overflow_run),
    ("child at a huge page id", child_at_a_huge_page_id),
    ("child in the system CF", child_in_the_system_cf),
    (
        "leaf lost a cell (entry count wrong)",
        leaf_loses_its_last_cell,
    ),
    (
        "table root at an overflow run",
        table_root_at_an_overflow_run,
    ),
    (
        "table root is the catalog's leaf",
        table_root_is_the_catalog,
    ),
    ("table entry count wrong", table_count_wrong),
    (
        "catalog root at an overflow run",
        catalog_root_at_an_overflow_run,
    ),
    ("free list names a live page", free_list_names_a_live_page),
    ("extents overlap", extents_overlap),
    (
        "table root empty but entries counted",
        table_root_empty_with_entries,
    ),
    ("table entry count near i64::MAX", table_count_near_i64_max),
    ("table entry count u64::MAX", table_count_u64_max),
    (
        "free list names a live overflow run",
        free_list_names_a_live_overflow_run,
    ),
    (
        "checkpoint LSN near the end of the LSN space",
        checkpoint_lsn_near_u64_max,
    ),
    ("descriptor of CF u64::MAX", descriptor_of_cf_u64_max),
    (
        "the system extent holding the blob given to CF 77",
        system_extent_to_cf_77,
    ),
    (
        "the system extent holding the blob given to CF 2^62",
        system_extent_to_cf_2_62,
    ),
    ("a CF's extent given to CF 77", cf_extent_to_cf_77),
    (
        "the system tree's root moved into a CF's extent",
        system_root_in_a_cf_extent,
    ),
];

/// Offset in the file of the metadata blob's extent records (after the
/// page header: the file length, `u64`, and the record count, `u32`;
/// each record is start, pages, owner, `u64`s; `format::records`) and
/// their count.
fn extent_records(img: &Image) -> (u64, usize, usize) {
    let meta = superblock(img).meta_page.expect("a metadata blob").0;
    let payload = meta as usize * PS + 32;
    (meta, payload + 12, img.u32_at(payload + 8) as usize)
}

/// Gives the first extent owned by `from` that `pick` accepts (its start
/// and length) to `to`, and fixes the blob's checksum.
fn give_extent(img: &mut Image, from: u64, to: u64, pick: impl Fn(u64, u64) -> bool) -> bool {
    let (meta, records, n) = extent_records(img);
    for i in 0..n {
        let at = records + 24 * i;
        let (start, pages) = (img.u64_at(at), img.u64_at(at + 8));
        if img.u64_at(at + 16) == from && pick(start, pages) {
            img.set_u64(at + 16, to);
            img.reseal(meta);
            return true;
        }
    }
    false
}

/// The system's extent that holds the metadata blob itself goes to a
/// CF that does not exist (an adversarial probe: the open succeeded, and
/// the next checkpoint panicked twice, aborting the process).
fn system_extent_to_cf_77(img: &mut Image) -> bool {
    let meta = extent_records(img).0;
    give_extent(img, 0, 77, |s, n| (s..s + n).contains(&meta))
}

fn system_extent_to_cf_2_62(img: &mut Image) -> bool {
    let meta = extent_records(img).0;
    give_extent(img, 0, 1 << 62, |s, n| (s..s + n).contains(&meta))
}

fn cf_extent_to_cf_77(img: &mut Image) -> bool {
    give_extent(img, 1, 77, |_, _| true)
}

/// The system tree's root copied, its own id fixed, into a never-written
/// page of CF 1's extents (the file lengthened to hold it where the
/// extent's unwritten tail lies past its end), and both superblocks name
/// the copy: every page is valid, but the CF's allocator takes that page
/// for free, and a checkpoint that rewrites the system tree frees it into
/// the system's free space outside the system's extents.
fn system_root_in_a_cf_extent(img: &mut Image) -> bool {
    let Some(root) = superblock(img).sys_root.map(|p| p.0) else {
        return false;
    };
    let (_, records, n) = extent_records(img);
    let unwritten = |img: &Image, p: u64| {
        let at = p as usize * PS;
        img.bytes
            .get(at..at + PS)
            .is_none_or(|b| b.iter().all(|&b| b == 0))
    };
    let target = (0..n)
        .map(|i| records + 24 * i)
        .filter(|&at| img.u64_at(at + 16) == 1)
        .flat_map(|at| img.u64_at(at)..img.u64_at(at) + img.u64_at(at + 8))
        .find(|&p| unwritten(img, p));
    let Some(to) = target else {
        return false;
    };
    let (from, at) = (root as usize * PS, to as usize * PS);
    if img.bytes.len() < at + PS {
        img.bytes.resize(at + PS, 0);
    }
    img.bytes.copy_within(from..from + PS, at);
    img.set_u64(at + 8, to);
    img.reseal(to);
    edit_superblocks(img, |sb| sb.sys_root = Some(PageId(to)))
}

fn acceptable(e: &Error) -> bool {
    matches!(
        e,
        Error::Corrupted { .. } | Error::Poisoned(_) | Error::KeyTooLarge { .. }
    )
}

/// `Ok`, or an error the case explains; panics (failing the test) on any
/// other error.
fn tolerate<T>(case: &str, step: &str, r: sheafdb::Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) if acceptable(&e) => None,
        Err(e) => panic!("{case}: {step} gave an unexpected error: {e:?}"),
    }
}

fn restore(files: &Files, image: &Image) -> SimVfs {
    let vfs = SimVfs::new();
    for (n, b) in files {
        vfs.set_file_bytes(n, b.clone());
    }
    vfs.set_file_bytes(NAME, image.bytes.clone());
    vfs
}

fn open(vfs: &SimVfs) -> sheafdb::Result<Database> {
    builder()
        .background_checkpoints(false)
        .open_with_vfs(Arc::new(vfs.clone()), NAME)
}

/// Reads every key and both directions of the table.
fn read_all(case: &str, db: &Database) {
    let Some(rx) = tolerate(case, "begin_read", db.begin_read()) else {
        return;
    };
    let Some(t) = tolerate(case, "open_table", rx.open_table(def("t"))) else {
        return;
    };
    for i in 0..24 {
        if let Some(Some(v)) = tolerate(case, "get", t.get(big_key(i).as_slice())) {
            assert_eq!(v.value().len(), 6000, "{case}: a value of another length");
        }
    }
    for i in (0..600).step_by(7) {
        let _ = tolerate(case, "get", t.get(small_key(i).as_slice()));
    }
    for rev in [false, true] {
        let Some(iter) = tolerate(case, "iter", t.iter()) else {
            continue;
        };
        let items: Box<dyn Iterator<Item = _>> = if rev {
            Box::new(iter.rev())
        } else {
            Box::new(iter)
        };
        for item in items.take(2000) {
            if tolerate(case, "iteration", item).is_none() {
                break;
            }
        }
    }
    let _ = tolerate(case, "len", t.len());
}

/// Removes and rewrites keys on both sides of the damage, commits,
/// checkpoints (which folds the buffered commit into the trees) and
/// closes.
fn write_all(case: &str, vfs: &SimVfs, db: Database) {
    // A small transaction: a buffered commit, folded by the checkpoint.
    let small = || -> sheafdb::Result<()> {
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(def("t"))?;
            for i in 0..4 {
                t.remove(big_key(i).as_slice())?;
            }
            t.remove(small_key(0).as_slice())?;
            t.insert(small_key(5).as_slice(), b"x".as_slice())?;
        }
        tx.commit()
    };
    let _ = tolerate(case, "small writes + commit", small());
    let r = db.checkpoint();
    let _ = tolerate(case, "checkpoint folding a buffered commit", r);
    read_all(case, &db);
    let run = || -> sheafdb::Result<()> {
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(def("t"))?;
            for i in 0..24 {
                if i % 2 == 0 {
                    t.remove(big_key(i).as_slice())?;
                } else {
                    t.insert(big_key(i).as_slice(), big_value(i + 1).as_slice())?;
                }
            }
            for i in (0..600).step_by(3) {
                t.remove(small_key(i).as_slice())?;
            }
            for i in 600..900 {
                t.insert(small_key(i).as_slice(), b"w".as_slice())?;
            }
        }
        tx.commit()
    };
    let committed = tolerate(case, "writes + commit", run()).is_some();
    // Whatever happened, the database still answers reads (or says it is
    // poisoned).
    read_all(case, &db);
    let _ = tolerate(case, "checkpoint", db.checkpoint());
    read_all(case, &db);
    let _ = tolerate(case, "check_integrity after writes", db.check_integrity());
    let _ = tolerate(case, "close", db.close());
    if committed {
        return;
    }
    // The failed commit logged nothing: after a reopen its writes are
    // absent.
    if let Some(db) = tolerate(case, "reopen", open(vfs)) {
        let rx = tolerate(case, "begin_read", db.begin_read());
        let t = rx.and_then(|rx| tolerate(case, "open_table", rx.open_table(def("t"))));
        if let Some(Some(found)) =
            t.map(|t| tolerate(case, "get", t.get(small_key(650).as_slice())))
        {
            assert!(found.is_none(), "{case}: a failed commit's write survived");
        }
    }
}

fn run_case(files: &Files, (name, edit): Case) {
    let mut img = Image {
        bytes: files[NAME].clone(),
    };
    assert!(edit(&mut img), "{name}: the edit found nothing to change");
    let vfs = restore(files, &img);
    match open(&vfs) {
        Ok(db) => {
            let r = db.check_integrity();
            assert!(
                matches!(r, Err(Error::Corrupted { .. })),
                "{name}: check_integrity gave {r:?}"
            );
            drop(db);
        }
        Err(e) => {
            assert!(acceptable(&e), "{name}: open gave {e:?}");
            return;
        }
    }
    let vfs = restore(files, &img);
    let db = match open(&vfs) {
        Ok(db) => db,
        Err(e) => return assert!(acceptable(&e), "{name}: open gave {e:?}"),
    };
    read_all(name, &db);
    write_all(name, &vfs, db);
}

#[test]
fn checksum_valid_inconsistencies_give_errors_not_panics() {
    let files = build();
    let mut failures = Vec::new();
    for &case in CASES {
        let files = files.clone();
        let (tx, rx) = mpsc::channel();
        let worker = std::thread::spawn(move || {
            run_case(&files, case);
            tx.send(()).unwrap();
        });
        // A hang guard, not a timing.
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(()) => worker.join().unwrap(),
            Err(mpsc::RecvTimeoutError::Timeout) => failures.push(format!("{}: hung", case.0)),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let e = worker.join().unwrap_err();
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{}: panicked: {msg}", case.0));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every byte of the metadata blob's payload set to 0, 1, 0x40 and 0xFF
/// in turn, its checksum fixed: open, a commit and a checkpoint give
/// data or errors, never a panic (an adversarial probe found an extent
/// owner whose edit made the checkpoint panic twice and abort).
/// Open refuses a system tree page outside the system's extents: before,
/// the file opened, a column family's allocator could hand the page out
/// as free, and only the first checkpoint that rewrote the system tree
/// found it (its check of the runs it releases).
#[test]
fn a_system_tree_page_in_a_cf_extent_is_refused_at_open() {
    let files = build();
    let mut img = Image {
        bytes: files[NAME].clone(),
    };
    assert!(
        system_root_in_a_cf_extent(&mut img),
        "no page to move the root to"
    );
    match open(&restore(&files, &img)) {
        Err(Error::Corrupted { what, .. }) => {
            assert!(what.contains("outside the system's extents"), "{what}")
        }
        Err(e) => panic!("open gave another error: {e:?}"),
        Ok(_) => panic!("open accepted a system tree page in a CF's extent"),
    }
}

#[test]
fn every_byte_of_the_metadata_blob_edited_gives_errors_not_panics() {
    let files = build();
    let whole = Image {
        bytes: files[NAME].clone(),
    };
    let meta = superblock(&whole).meta_page.expect("a metadata blob").0;
    let len = whole.u32_at(meta as usize * PS + 28) as usize;
    edit_blob_bytes(&files, 0..len);
    // The larger database's blob: the lowest and highest byte of each
    // extent's owner only (the probe's edit was one of them), to keep
    // the run short.
    let files = build_rich();
    let (_, records, n) = extent_records(&Image {
        bytes: files[NAME].clone(),
    });
    let payload = records - 12;
    let owners = (0..n).flat_map(|i| {
        let owner = records - payload + 24 * i + 16;
        [owner, owner + 7]
    });
    edit_blob_bytes(&files, owners);
}

/// A database of several CFs with overflow values, multimap tables, a
/// dropped CF, a compaction and a crash after one more commit: its
/// system extents hold no free range (the probe's layout).
fn build_rich() -> Files {
    const MM: sheafdb::MultimapTableDefinition<&[u8], &[u8]> =
        sheafdb::MultimapTableDefinition::new("mm");
    let vfs = SimVfs::new();
    let db = builder()
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), NAME)
        .unwrap();
    let mut seed = 7u64;
    let mut next = |below: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % below
    };
    let a = db.cf_or_create("a").unwrap();
    let b = db.cf_or_create("b").unwrap();
    let gone = db.cf_or_create("gone").unwrap();
    for round in 0..6u8 {
        for cf in [&db.default_cf().unwrap(), &a, &b, &gone] {
            let tx = cf.begin_write().unwrap();
            {
                let mut t = tx.open_table(def("t")).unwrap();
                for i in 0..150 {
                    let k = format!("k{:05}", next(2000));
                    let len = if i % 37 == 0 {
                        3000 + next(17000)
                    } else {
                        1 + next(199)
                    };
                    t.insert(k.as_bytes(), vec![round; len as usize].as_slice())
                        .unwrap();
                }
                for _ in 0..30 {
                    t.remove(format!("k{:05}", next(2000)).as_bytes()).unwrap();
                }
                let mut m = tx.open_multimap_table(MM).unwrap();
                for i in 0..40 {
                    let (k, v) = (format!("m{}", i % 7), format!("v{round}-{i}"));
                    m.insert(k.as_bytes(), v.as_bytes()).unwrap();
                }
            }
            tx.commit().unwrap();
        }
        if round == 2 {
            db.checkpoint().unwrap();
            let tx = db.begin_write_cfs(&[&a, &b]).unwrap();
            for cf in [&a, &b] {
                let mut t = tx.open_table(cf, def("x")).unwrap();
                t.insert(b"x".as_slice(), b"1".as_slice()).unwrap();
            }
            tx.commit().unwrap();
        }
    }
    drop(gone);
    db.drop_cf("gone").unwrap();
    db.checkpoint().unwrap();
    db.compact().unwrap();
    let tx = a.begin_write().unwrap();
    let mut t = tx.open_table(def("t")).unwrap();
    t.insert(b"after".as_slice(), b"c".as_slice()).unwrap();
    drop(t);
    tx.commit().unwrap();
    drop((a, b));
    let crashed = vfs.process_crash();
    drop(db);
    files_of(&crashed)
}

/// [`every_byte_of_the_metadata_blob_edited_gives_errors_not_panics`] on
/// one database, for the bytes of its blob's payload at `offsets`.
fn edit_blob_bytes(files: &Files, offsets: impl IntoIterator<Item = usize>) {
    let img = Image {
        bytes: files[NAME].clone(),
    };
    let meta = superblock(&img).meta_page.expect("a metadata blob").0;
    let len = img.u32_at(meta as usize * PS + 28) as usize;
    let mut failures = Vec::new();
    for at in offsets {
        assert!(at < len, "byte {at} of a blob of {len}");
        for value in [0u8, 1, 0x40, 0xFF] {
            let mut edited = Image {
                bytes: img.bytes.clone(),
            };
            edited.bytes[meta as usize * PS + 32 + at] = value;
            edited.reseal(meta);
            let vfs = restore(files, &edited);
            let r = no_panic(move || {
                let Ok(db) = open(&vfs) else { return };
                let _ = db.check_integrity();
                let _ = db.begin_write().and_then(|tx| {
                    tx.open_table(def("t"))?
                        .insert(small_key(7).as_slice(), b"e".as_slice())?;
                    tx.commit()
                });
                let _ = db.checkpoint();
                let _ = db.close();
            });
            if let Err(m) = r {
                failures.push(format!("blob byte {at} = {value:#04x}: {m}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Runs `f` on its own thread; `Err(message)` if it panicked.
fn no_panic(f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::spawn(f).join().map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// Sets a field of both superblock slots (both, so open cannot fall back
/// to the other slot).
fn edit_superblocks(img: &mut Image, edit: impl Fn(&mut Superblock)) -> bool {
    let mut edited = 0;
    for slot in 0..2u8 {
        let at = slot as usize * PS;
        if let Ok(Some(mut sb)) = Superblock::decode(&img.bytes[at..at + SLOT_LEN], slot) {
            edit(&mut sb);
            img.bytes[at..at + SLOT_LEN].copy_from_slice(&sb.encode());
            edited += 1;
        }
    }
    edited > 0
}

/// Sets field `i` (0: catalog root, 1: count, 2: next table id, 3:
/// checkpoint LSN, 4: version) of CF 1's descriptor.
fn edit_descriptor(img: &mut Image, i: usize, v: u64) -> bool {
    let Some((leaf, at)) = descriptor(img) else {
        return false;
    };
    let name_len = img.u32_at(at) as usize;
    img.set_u64(at + 4 + name_len + i * 8, v);
    img.reseal(leaf);
    true
}

/// The superblock and the metadata blob agree on a file length near the
/// end of `u64` pages: a new extent would be claimed past it.
fn file_length_near_u64_max(img: &mut Image) -> bool {
    let pages = u64::MAX - 5;
    let meta = superblock(img).meta_page.expect("a metadata blob").0;
    img.set_u64(meta as usize * PS + 32, pages);
    img.reseal(meta);
    edit_superblocks(img, |sb| sb.file_pages = pages)
}

/// A counter the files name (an LSN, a version, a generation, a table or
/// CF id, the file length) near the end of `u64`: the engine would count
/// past it. Open refuses each; before, a commit, a table or CF creation,
/// an extent claim or a checkpoint overflowed.
#[test]
fn counters_near_the_end_of_u64_are_refused() {
    let files = build();
    let edits: [Case; 7] = [
        ("CF checkpoint LSN", checkpoint_lsn_near_u64_max),
        ("superblock replay LSN", |img| {
            edit_superblocks(img, |sb| {
                sb.replay_lsn = sheafdb::testing::Lsn(u64::MAX - 4096)
            })
        }),
        ("superblock generation", |img| {
            edit_superblocks(img, |sb| sb.generation = u64::MAX)
        }),
        ("next CF id", |img| {
            edit_superblocks(img, |sb| sb.next_cf = sheafdb::testing::CfId(u64::MAX))
        }),
        ("CF version", |img| edit_descriptor(img, 4, u64::MAX)),
        ("next table id", |img| edit_descriptor(img, 2, u64::MAX)),
        ("file length in pages", file_length_near_u64_max),
    ];
    let mut failures = Vec::new();
    for (what, edit) in edits {
        let mut img = Image {
            bytes: files[NAME].clone(),
        };
        assert!(edit(&mut img), "{what}: nothing edited");
        let vfs = restore(&files, &img);
        let opened = Arc::new(std::sync::Mutex::new(None));
        let seen = opened.clone();
        let run = no_panic(move || {
            let r = open(&vfs).map(|db| {
                let tx = db.begin_write().unwrap();
                tx.open_table(def("t"))
                    .unwrap()
                    .insert(b"k".as_slice(), b"v".as_slice())
                    .unwrap();
                let _ = tx.commit();
                let _ = db.checkpoint();
                let tx = db.begin_write().unwrap();
                let _ = tx.open_table(def("new table")).map(drop);
                let _ = tx.commit();
                // A new CF's first pages need a new extent.
                if let Ok(cf) = db.cf_or_create("new cf") {
                    let tx = cf.begin_write().unwrap();
                    if let Ok(mut t) = tx.open_table(def("x")) {
                        let _ = t.insert(b"k".as_slice(), b"v".as_slice());
                    }
                    let _ = tx.commit();
                    let _ = db.checkpoint();
                }
                let _ = db.close();
            });
            *seen.lock().unwrap() = Some(r.map_err(|e| e.to_string()));
        });
        let r = opened.lock().unwrap().take();
        match (run, r) {
            (Err(panic), _) => failures.push(format!("{what}: panicked: {panic}")),
            (Ok(()), Some(Err(e))) if e.contains("range") => {}
            (Ok(()), r) => failures.push(format!("{what}: open gave {r:?}")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// WAL records the engine never writes, appended with valid frames to the
// log of a cleanly closed database (tables "t", id 1, and "u", id 2).
// Replay must refuse each with `Corrupted`, never panic or apply it
// silently.

/// One op of a commit record (layout: `wal/record.rs`).
enum WalOp<'a> {
    Put(u64, &'a [u8], &'a [u8]),
    CreateTable(u64, &'a str),
    RenameTable(u64, &'a str),
    DropTable(u64),
    CreateCf(&'a str),
    DropCf,
    /// `CountChange` (table, delta): payload version 2 only.
    Count(u64, i64),
}

fn field(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// One part of a commit record: a CF id and its ops.
type Part<'a> = (u64, Vec<WalOp<'a>>);

/// A commit payload with one part per `(cf, ops)`: version 1, or 2 if an
/// op needs it.
fn commit_payload(parts: &[Part]) -> Vec<u8> {
    let counted = (parts.iter()).any(|(_, ops)| ops.iter().any(|o| matches!(o, WalOp::Count(..))));
    let mut out = vec![if counted { 2u8 } else { 1u8 }];
    out.extend_from_slice(&(parts.len() as u32).to_le_bytes());
    for (cf, ops) in parts {
        out.extend_from_slice(&cf.to_le_bytes());
        out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
        for op in ops {
            match op {
                WalOp::Put(table, k, v) => {
                    out.push(1);
                    out.extend_from_slice(&table.to_le_bytes());
                    field(&mut out, k);
                    field(&mut out, v);
                }
                WalOp::CreateTable(table, name) => {
                    out.push(4);
                    out.extend_from_slice(&table.to_le_bytes());
                    for f in [name.as_bytes(), b"bytes", b"bytes"] {
                        field(&mut out, f);
                    }
                }
                WalOp::RenameTable(table, name) => {
                    out.push(6);
                    out.extend_from_slice(&table.to_le_bytes());
                    field(&mut out, name.as_bytes());
                }
                WalOp::DropTable(table) => {
                    out.push(5);
                    out.extend_from_slice(&table.to_le_bytes());
                }
                WalOp::CreateCf(name) => {
                    out.push(7);
                    field(&mut out, name.as_bytes());
                }
                WalOp::DropCf => out.push(8),
                WalOp::Count(table, delta) => {
                    out.push(9);
                    out.extend_from_slice(&table.to_le_bytes());
                    out.extend_from_slice(&delta.to_le_bytes());
                }
            }
        }
    }
    out
}

/// A cleanly closed database with tables "t" (id 1) and "u" (id 2).
fn build_two_tables() -> Files {
    let vfs = SimVfs::new();
    let db = builder()
        .background_checkpoints(false)
        .create_with_vfs(Arc::new(vfs.clone()), NAME)
        .unwrap();
    let tx = db.begin_write().unwrap();
    for name in ["t", "u"] {
        let mut t = tx.open_table(def(name)).unwrap();
        for i in 0..50 {
            t.insert(small_key(i).as_slice(), b"v".as_slice()).unwrap();
        }
    }
    tx.commit().unwrap();
    db.close().unwrap();
    files_of(&vfs)
}

/// `files` with `payloads` appended to the WAL as records after its end,
/// and the base marked as needing its WAL, as an open that went on to
/// commit them would have left it (a cleanly closed base beside records
/// past its end is refused as another copy's log).
fn with_records(files: &Files, payloads: &[Vec<u8>]) -> SimVfs {
    let mut required = Image {
        bytes: files[NAME].clone(),
    };
    assert!(edit_superblocks(&mut required, |sb| {
        sb.wal_mark = sheafdb::testing::WalMark::Required;
    }));
    let vfs = restore(files, &required);
    let sb = superblock(&Image {
        bytes: files[NAME].clone(),
    });
    let mut opts = sheafdb::testing::WalOptions::with_segment_bytes(256 * 1024);
    opts.db_id = sb.db_id;
    opts.generation = sb.generation;
    let (wal, _) = sheafdb::testing::open_wal(
        Arc::new(vfs.clone()),
        NAME,
        opts,
        sb.replay_lsn,
        &mut |_, _| Ok(()),
    )
    .unwrap();
    for p in payloads {
        wal.append(p).unwrap();
    }
    wal.sync().unwrap();
    vfs
}

/// The control: a well-formed record is replayed into table "t".
#[test]
fn a_crafted_wal_record_is_replayed() {
    let files = build_two_tables();
    let vfs = with_records(
        &files,
        &[commit_payload(&[(
            1,
            vec![WalOp::Put(1, b"from-wal", b"w")],
        )])],
    );
    let db = open(&vfs).unwrap();
    let rx = db.begin_read().unwrap();
    let t = rx.open_table(def("t")).unwrap();
    let v = t.get(b"from-wal".as_slice()).unwrap().unwrap();
    assert_eq!(v.value(), b"w");
    assert_eq!(t.len().unwrap(), 51);
}

/// A table renamed between two writes of one record keeps its id: both
/// writes land in it, under its new name (replay reloads the table it
/// last wrote after any catalog op).
#[test]
fn writes_around_a_replayed_rename_land_in_the_renamed_table() {
    let files = build_two_tables();
    let vfs = with_records(
        &files,
        &[
            commit_payload(&[(
                1,
                vec![
                    WalOp::Put(1, b"from-wal-a", b"1"),
                    WalOp::RenameTable(1, "x"),
                    WalOp::Put(1, b"from-wal-b", b"2"),
                ],
            )]),
            commit_payload(&[(1, vec![WalOp::Put(1, b"from-wal-c", b"3")])]),
        ],
    );
    let db = open(&vfs).unwrap();
    let rx = db.begin_read().unwrap();
    assert!(matches!(
        rx.open_table(def("t")),
        Err(Error::TableNotFound(_))
    ));
    let t = rx.open_table(def("x")).unwrap();
    for (k, v) in [
        (b"from-wal-a", b"1"),
        (b"from-wal-b", b"2"),
        (b"from-wal-c", b"3"),
    ] {
        assert_eq!(t.get(k.as_slice()).unwrap().unwrap().value(), v);
    }
    assert_eq!(t.len().unwrap(), 53);
    assert_eq!(rx.open_table(def("u")).unwrap().len().unwrap(), 50);
    drop((t, rx));
    db.check_integrity().unwrap();
}

/// A version-2 record's count change is what `len()` shows after replay
/// (the tree is not read); a count no set of the record's writes could
/// make refuses the open; a possible but wrong one (a record no commit
/// wrote) is caught when the fold applies the writes, as `Corrupted`.
#[test]
fn crafted_count_changes_are_used_checked_or_caught_by_the_fold() {
    let files = build_two_tables();
    let new_key = |delta| {
        commit_payload(&[(
            1,
            vec![WalOp::Put(1, b"from-wal", b"w"), WalOp::Count(1, delta)],
        )])
    };
    // Right: one new key.
    let db = open(&with_records(&files, &[new_key(1)])).unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(rx.open_table(def("t")).unwrap().len().unwrap(), 51);
    drop(rx);
    db.checkpoint().unwrap();
    db.check_integrity().unwrap();
    drop(db);
    // Impossible: two entries added by one written key.
    match open(&with_records(&files, &[new_key(2)])) {
        Err(e) => assert!(e.is_corrupted(), "{e}"),
        Ok(_) => panic!("a count change of 2 from one key was accepted"),
    }
    // Possible but wrong: the key is new, the record says it was not.
    let db = open(&with_records(&files, &[new_key(0)])).unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(rx.open_table(def("t")).unwrap().len().unwrap(), 50);
    drop(rx);
    let e = db.checkpoint().unwrap_err();
    assert!(acceptable(&e), "{e}");
}

#[test]
fn wal_records_no_commit_could_log_are_corrupt() {
    let files = build_two_tables();
    let long_key = vec![b'k'; 5000];
    let cases: Vec<(&str, Vec<Part>)> = vec![
        (
            "write a table, drop it, then write it again",
            vec![(
                1,
                vec![
                    WalOp::Put(1, b"a", b"v"),
                    WalOp::DropTable(1),
                    WalOp::Put(1, b"b", b"v"),
                ],
            )],
        ),
        (
            "write a table, drop it, then write it again in a second part",
            vec![
                (1, vec![WalOp::Put(1, b"a", b"v"), WalOp::DropTable(1)]),
                (1, vec![WalOp::Put(1, b"b", b"v")]),
            ],
        ),
        (
            "create table with id u64::MAX",
            vec![(1, vec![WalOp::CreateTable(u64::MAX, "x")])],
        ),
        (
            "rename a table onto another, then write the other",
            vec![(
                1,
                vec![WalOp::RenameTable(1, "u"), WalOp::Put(2, b"k", b"v")],
            )],
        ),
        (
            "create a table over an existing name, then write the old one",
            vec![(
                1,
                vec![WalOp::CreateTable(3, "t"), WalOp::Put(1, b"k", b"v")],
            )],
        ),
        (
            "create a table with a live table's id",
            vec![(
                1,
                vec![WalOp::CreateTable(2, "x"), WalOp::Put(2, b"k", b"v")],
            )],
        ),
        (
            "create a table with an empty name",
            vec![(1, vec![WalOp::CreateTable(3, "")])],
        ),
        (
            "a key longer than any page holds",
            vec![(1, vec![WalOp::Put(1, &long_key, b"v")])],
        ),
        (
            "create column family u64::MAX",
            vec![(u64::MAX, vec![WalOp::CreateCf("z")])],
        ),
        (
            "create the system column family",
            vec![(0, vec![WalOp::CreateCf("z")])],
        ),
        (
            "drop the default column family",
            vec![(1, vec![WalOp::DropCf])],
        ),
        (
            "create, drop and create again one column family id",
            vec![
                (5, vec![WalOp::CreateCf("z")]),
                (5, vec![WalOp::DropCf]),
                (5, vec![WalOp::CreateCf("z")]),
            ],
        ),
    ];
    let mut failures = Vec::new();
    for (what, parts) in cases {
        let vfs = with_records(&files, &[commit_payload(&parts)]);
        let result = Arc::new(std::sync::Mutex::new(None));
        let seen = result.clone();
        let run = no_panic(move || {
            let r = open(&vfs).map(|db| {
                // Whatever open accepted must not panic later either.
                read_all("after replay", &db);
                let _ = db.checkpoint();
                let _ = db.close();
            });
            *seen.lock().unwrap() = Some(r);
        });
        let opened = result.lock().unwrap().take();
        match (run, opened) {
            (Err(panic), _) => failures.push(format!("{what}: panicked: {panic}")),
            (Ok(()), Some(Err(Error::Corrupted { .. }))) => {}
            (Ok(()), r) => failures.push(format!("{what}: open gave {r:?}")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Two catalog entries share a table id ("u" takes "t"'s): a buffered
/// commit to "t" is keyed by that id, and the fold that writes it into
/// the trees must not pick "u" for it. The fold says `Corrupted`; before,
/// it wrote the key into "u" and "t" lost it.
#[test]
fn a_fold_refuses_two_tables_with_one_id() {
    let files = build_two_tables();
    let mut img = Image {
        bytes: files[NAME].clone(),
    };
    let (leaf, at) = catalog_root(&img)
        .and_then(|root| value_in(&img, root, b"u"))
        .expect("table u's catalog entry");
    assert_eq!(img.u64_at(at), 2, "u is table 2");
    img.set_u64(at, 1);
    img.reseal(leaf);
    let vfs = restore(&files, &img);
    let db = open(&vfs).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_table(def("t"))
        .unwrap()
        .insert(b"only-in-t".as_slice(), b"v".as_slice())
        .unwrap();
    tx.commit().unwrap();
    let r = db.checkpoint();
    assert!(matches!(r, Err(Error::Corrupted { .. })), "{r:?}");
}
