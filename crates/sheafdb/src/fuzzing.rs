//! Entry points for the coverage-guided fuzz targets in `fuzz/` and for the
//! regression tests that replay what they found (`tests/fuzz_inputs.rs`).
//! Each takes arbitrary bytes, runs one decoder (or the whole engine) on
//! them, and must return without panicking or hanging; where a decoder
//! accepts its input, it also checks that encoding and decoding again
//! gives the same value. Not part of the stable API.
//!
//! Owns no format knowledge of its own: it calls the decoders the engine
//! uses. The only help it gives the fuzzer is to fix checksums (and page
//! ids) after choosing bytes, so inputs reach the checks behind them.

use std::sync::{Arc, OnceLock};

use crate::btree::store::PageRead;
use crate::btree::{self, Cursor, TreeRoot};
use crate::db::{Builder, Database};
use crate::error::{Error, Result};
use crate::format::page::{
    page_from_slice, PageBytes as _, PageRef, HEADER_LEN, OFF_CF, OFF_CRC, OFF_ID, OFF_NPAGES,
};
use crate::format::records::{CfDescriptor, MetaBlob, TableMeta};
use crate::format::superblock::Superblock;
use crate::pager::alloc::ExtentMap;
use crate::storage::sim::SimVfs;
use crate::table::types::TableDefinition;
use crate::txn::Durability;
use crate::types::{CfId, PageId};
use crate::wal::record;

/// Page size the page and database targets use.
pub const PAGE_SIZE: usize = 4096;
const MAX_PAGES: usize = 16;

/// Pages `2..` of an image held in memory, read with the checks the pager
/// makes (checksum, own id, owning CF, run length).
struct ImagePages {
    pages: Vec<u8>,
    cf: CfId,
}

impl PageRead for ImagePages {
    fn page_size(&self) -> usize {
        PAGE_SIZE
    }
    fn cf(&self) -> CfId {
        self.cf
    }
    fn read_run(&self, id: PageId, npages: u32) -> Result<PageRef> {
        let first = id.0.checked_sub(2).map(|i| i as usize);
        let range = first.and_then(|f| {
            let start = f.checked_mul(PAGE_SIZE)?;
            Some(start..start.checked_add(npages as usize * PAGE_SIZE)?)
        });
        let Some(bytes) = range.and_then(|r| self.pages.get(r)) else {
            return Err(Error::corrupted_page(id, "run outside the image"));
        };
        let page = page_from_slice(bytes);
        page.verify(id, Some(self.cf))?;
        if page.npages() != npages || npages == 0 {
            return Err(Error::corrupted_page(id, "run length differs"));
        }
        Ok(page.shareable())
    }
}

/// Gives each page of `pages` (numbered from 2) its own id and CF 1, and a
/// valid checksum over the run its header claims (last page first, so a
/// run's checksum covers its later pages as fixed).
fn seal_pages(pages: &mut [u8]) {
    let n = pages.len() / PAGE_SIZE;
    for i in (0..n).rev() {
        let at = i * PAGE_SIZE;
        let Some(page) = pages.get_mut(at..at + PAGE_SIZE) else {
            continue;
        };
        if let Some(id) = page.get_mut(OFF_ID..OFF_ID + 8) {
            id.copy_from_slice(&(i as u64 + 2).to_le_bytes());
        }
        if let Some(cf) = page.get_mut(OFF_CF..OFF_CF + 8) {
            cf.copy_from_slice(&1u64.to_le_bytes());
        }
        let npages = pages
            .get(at + OFF_NPAGES..at + OFF_NPAGES + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(1, u32::from_le_bytes) as usize;
        let end = at + npages.clamp(1, n - i) * PAGE_SIZE;
        let crc = pages.get(at + 4..end).map_or(0, crc32c::crc32c);
        if let Some(c) = pages.get_mut(at + OFF_CRC..at + OFF_CRC + 4) {
            c.copy_from_slice(&crc.to_le_bytes());
        }
    }
}

/// Page decoding and B+tree search: `data` becomes up to 16 pages (ids
/// and checksums fixed), page 2 the root; a few keys taken from `data`
/// are looked up, the tree is walked from both ends and checked whole.
pub fn page_tree(data: &[u8]) {
    let n = data.len().div_ceil(PAGE_SIZE).clamp(1, MAX_PAGES);
    let mut pages = vec![0u8; n * PAGE_SIZE];
    let take = data.len().min(pages.len());
    pages[..take].copy_from_slice(&data[..take]);
    seal_pages(&mut pages);
    let store = ImagePages { pages, cf: CfId(1) };
    let root = TreeRoot {
        root: Some(PageId(2)),
        len: 0,
    };
    for probe in data.chunks(97).take(8).chain([&[][..]]) {
        let key = probe.get(..probe.len().min(24)).unwrap_or_default();
        let _ = btree::get(&store, &root, key);
    }
    for back in [false, true] {
        let mut c = Cursor::new(
            &root,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
        );
        for _ in 0..4096 {
            let step = if back {
                c.next_back(&store)
            } else {
                c.next(&store)
            };
            if !matches!(step, Ok(Some(_))) {
                break;
            }
        }
    }
    let _ = btree::walk(&store, &root, &mut |_, _, _| {});
}

/// The superblock slot and metadata blob decoders (and the extent table
/// built from a blob); what decodes must encode back to the same value.
pub fn superblock_and_meta(data: &[u8]) {
    let _ = Superblock::decode_slot(data, 0);
    if let Ok(blob) = MetaBlob::decode(data) {
        let again = MetaBlob::decode(&blob.encode());
        assert_eq!(again.as_ref().ok(), Some(&blob), "metadata blob round trip");
        let _ = ExtentMap::from_records(blob.file_pages, &blob.extents);
    }
}

/// System-tree values: CF descriptors and table metadata; what decodes
/// must encode back to the same value.
pub fn system_records(data: &[u8]) {
    if let Ok(d) = CfDescriptor::decode(data) {
        assert_eq!(
            CfDescriptor::decode(&d.encode()).ok().as_ref(),
            Some(&d),
            "cf descriptor round trip"
        );
    }
    if let Ok(m) = TableMeta::decode(data) {
        assert_eq!(
            TableMeta::decode(&m.encode()).ok().as_ref(),
            Some(&m),
            "table meta round trip"
        );
    }
}

/// WAL frames and commit records: `data` is split into payloads (each
/// decoded as a commit record, which must re-encode to the same bytes'
/// meaning), appended to a fresh WAL (some synced on their own), which is
/// then damaged at offsets the rest of `data` chooses and replayed; every
/// replayed record must be one that was appended, and a refused open must
/// be a `Corrupted` (damage proven by a later frame) or a WAL mismatch.
pub fn wal(data: &[u8]) {
    let (payloads, damage) = split_payloads(data);
    for p in &payloads {
        commit_record(p);
    }
    let vfs = Arc::new(SimVfs::new());
    let opts = crate::wal::WalOptions::with_segment_bytes(16 * 1024);
    let mut appended = Vec::new();
    {
        let Ok((wal, _)) =
            crate::wal::open(vfs.clone(), "f", opts, crate::types::Lsn(0), &mut |_, _| {
                Ok(())
            })
        else {
            return;
        };
        for p in &payloads {
            if let Ok((_, end)) = wal.append(p) {
                appended.push(p.clone());
                // Some records are synced on their own, so later frames'
                // synced marks vouch for them (the damage witness search).
                if p.first().is_some_and(|b| b & 1 == 1) {
                    let _ = wal.wait_durable(end);
                }
            }
        }
        let _ = wal.sync();
    }
    for name in vfs.file_names() {
        let Some(mut bytes) = vfs.file_bytes(&name) else {
            continue;
        };
        for d in damage.chunks_exact(3) {
            if bytes.is_empty() {
                break;
            }
            let at = usize::from(u16::from_le_bytes([d[0], d[1]])) % bytes.len();
            bytes[at] ^= d[2];
        }
        vfs.set_file_bytes(&name, bytes);
    }
    let mut replayed = Vec::new();
    let opened = crate::wal::open(vfs, "f", opts, crate::types::Lsn(0), &mut |_, p| {
        replayed.push(p.to_vec());
        Ok(())
    });
    if let Err(e) = opened {
        assert!(
            e.is_corrupted() || matches!(e, crate::error::Error::WalMismatch(_)),
            "replay of a damaged WAL failed with {e}"
        );
    }
    for p in &replayed {
        assert!(
            appended.contains(p),
            "replay yielded a record never appended"
        );
    }
}

/// Splits `data` into payloads (a little-endian `u16` length, then that
/// many bytes; a zero length ends the list) and the damage list after.
fn split_payloads(data: &[u8]) -> (Vec<Vec<u8>>, &[u8]) {
    let mut rest = data;
    let mut payloads = Vec::new();
    while let [a, b, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*a, *b]));
        if len == 0 || payloads.len() == 16 {
            return (payloads, tail);
        }
        let (p, tail) = tail.split_at(len.min(tail.len()));
        payloads.push(p.to_vec());
        rest = tail;
    }
    (payloads, rest)
}

/// The input [`wal`] splits into `payloads` and no damage.
fn join_payloads(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in payloads
        .iter()
        .filter(|p| !p.is_empty() && p.len() <= 0xFFFF)
    {
        out.extend_from_slice(&(p.len() as u16).to_le_bytes());
        out.extend_from_slice(p);
    }
    out.extend_from_slice(&[0, 0]);
    out
}

/// Seed inputs for every target, taken from the files a real workload
/// makes (the whole-database target's seed database): `(target, input)`.
/// `fuzz/src/seed_corpus.rs` writes them as the corpora; the regression
/// test runs every target on them.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let files = seed_files();
    let data = files
        .iter()
        .find(|(n, _)| n == "d")
        .map(|(_, b)| b.clone())
        .unwrap_or_default();
    let mut out = Vec::new();
    let pages = data.get(2 * PAGE_SIZE..).unwrap_or_default();
    for chunk in pages.chunks(MAX_PAGES * PAGE_SIZE) {
        out.push(("page_tree", chunk.to_vec()));
    }
    for page in pages.chunks(PAGE_SIZE).take(64) {
        out.push(("page_tree", page.to_vec()));
    }
    for slot in 0..2 {
        let at = slot * PAGE_SIZE;
        if let Some(b) = data.get(at..at + crate::format::superblock::SLOT_LEN) {
            out.push(("superblock_and_meta", b.to_vec()));
        }
    }
    let sb = (0..2u8)
        .filter_map(|slot| {
            let at = usize::from(slot) * PAGE_SIZE;
            Superblock::decode(data.get(at..)?, slot).ok().flatten()
        })
        .max_by_key(|sb| sb.generation);
    if let Some(sb) = &sb {
        if let Some(meta) = sb.meta_page {
            let at = meta.0 as usize * PAGE_SIZE + HEADER_LEN;
            if let Some(b) = data.get(at..at + sb.meta_len as usize) {
                out.push(("superblock_and_meta", b.to_vec()));
            }
        }
        for (cf, value) in system_values(&data, sb) {
            if let Ok(d) = CfDescriptor::decode(&value) {
                for meta in catalog_values(&data, cf, &d) {
                    out.push(("system_records", meta));
                }
            }
            out.push(("system_records", value));
        }
    }
    let payloads = sb
        .as_ref()
        .map(|sb| wal_payloads(files, sb))
        .unwrap_or_default();
    for p in &payloads {
        out.push(("commit_record", p.clone()));
    }
    out.push(("wal", join_payloads(&payloads)));
    out.push(("database", Vec::new()));
    out.push(("database", vec![0, 0x10, 0x20, 0, 0x55, 1]));
    out
}

/// `(cf, descriptor value)` of every CF in the system tree of `data`.
fn system_values(data: &[u8], sb: &Superblock) -> Vec<(CfId, Vec<u8>)> {
    let store = ImagePages {
        pages: data.get(2 * PAGE_SIZE..).unwrap_or_default().to_vec(),
        cf: CfId::SYSTEM,
    };
    let root = TreeRoot {
        root: sb.sys_root,
        len: sb.sys_len,
    };
    let mut c = Cursor::new(
        &root,
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
    );
    let mut out = Vec::new();
    while let Ok(Some((k, v))) = c.next(&store) {
        let cf = k
            .as_slice()
            .strip_prefix(b"C")
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes);
        if let Some(cf) = cf {
            out.push((CfId(cf), v.as_slice().to_vec()));
        }
    }
    out
}

/// The table metadata values of `cf`'s catalog.
fn catalog_values(data: &[u8], cf: CfId, d: &CfDescriptor) -> Vec<Vec<u8>> {
    let store = ImagePages {
        pages: data.get(2 * PAGE_SIZE..).unwrap_or_default().to_vec(),
        cf,
    };
    let root = TreeRoot {
        root: d.catalog_root,
        len: d.catalog_len,
    };
    let mut c = Cursor::new(
        &root,
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
    );
    let mut out = Vec::new();
    while let Ok(Some((_, v))) = c.next(&store) {
        out.push(v.as_slice().to_vec());
    }
    out
}

/// The commit records in the seed database's WAL (whose segments carry
/// the identity `sb` names).
fn wal_payloads(files: &[(String, Vec<u8>)], sb: &Superblock) -> Vec<Vec<u8>> {
    let vfs = SimVfs::new();
    for (n, b) in files.iter().filter(|(n, _)| n.contains("-wal")) {
        vfs.set_file_bytes(n, b.clone());
    }
    let mut opts = crate::wal::WalOptions::with_segment_bytes(64 * 1024);
    opts.db_id = sb.db_id;
    opts.generation = sb.generation;
    let mut out = Vec::new();
    let _ = crate::wal::open(
        Arc::new(vfs),
        "d",
        opts,
        crate::types::Lsn(0),
        &mut |_, p| {
            out.push(p.to_vec());
            Ok(())
        },
    );
    out
}

/// A commit record: if it decodes, its encoding decodes to the same parts.
pub fn commit_record(payload: &[u8]) {
    if let Ok(parts) = record::decode_commit(payload) {
        let mut out = Vec::new();
        record::encode_commit(&parts, &mut out);
        let again = record::decode_commit(&out);
        assert_eq!(
            again.as_ref().ok(),
            Some(&parts),
            "commit record round trip"
        );
    }
}

const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("t");
const U: TableDefinition<u64, u64> = TableDefinition::new("u");

/// The database the whole-database target damages: two CFs, a few
/// tables, small and overflow values, a checkpoint, then buffered commits
/// only in the WAL. Built once per process.
fn seed_files() -> &'static Vec<(String, Vec<u8>)> {
    static FILES: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    FILES.get_or_init(|| {
        let vfs = SimVfs::new();
        let build = || -> Result<()> {
            let db = fuzz_builder().create_with_vfs(Arc::new(vfs.clone()), "d")?;
            let other = db.cf_or_create("other")?;
            let tx = db.begin_write()?;
            {
                let mut t = tx.open_table(T)?;
                for i in 0u32..120 {
                    let v = vec![i as u8; if i % 17 == 0 { 5000 } else { 20 }];
                    t.insert(format!("key{i:04}").as_bytes(), v.as_slice())?;
                }
                tx.open_table(U)?.insert(7, 8)?;
            }
            tx.commit()?;
            let tx = other.begin_write()?;
            tx.open_table(U)?.insert(1, 2)?;
            tx.commit()?;
            db.checkpoint()?;
            for i in 0u64..20 {
                let tx = db.begin_write()?;
                tx.open_table(U)?.insert(100 + i, i)?;
                tx.commit()?;
            }
            // A crash: the last commits are only in the WAL.
            let crashed = vfs.crash_with(0, crate::storage::sim::CrashPolicy::KeepAll);
            drop((other, db));
            *CRASHED.lock() = Some(crashed);
            Ok(())
        };
        build().expect("the seed database builds");
        let crashed = CRASHED.lock().take().expect("set by the build");
        crashed
            .file_names()
            .into_iter()
            .filter_map(|n| crashed.file_bytes(&n).map(|b| (n, b)))
            .collect()
    })
}

static CRASHED: parking_lot::Mutex<Option<SimVfs>> = parking_lot::Mutex::new(None);

fn fuzz_builder() -> Builder {
    Database::builder()
        .page_size(PAGE_SIZE)
        .cache_size_bytes(1 << 20)
        .background_checkpoints(false)
        .wal_segment_bytes(64 * 1024)
        .wal_record_max_bytes(16 * 1024)
        .durability(Durability::Immediate)
}

/// The whole engine on a damaged database: `data` is a list of edits of
/// the seed database's files (file, offset, byte, and whether to fix the
/// touched page's checksum, so checksum-valid inconsistencies are
/// explored too). The result is opened and read, written, committed,
/// checkpointed, checked and closed; any error is fine, a panic is not.
pub fn database(data: &[u8]) {
    let files = seed_files();
    let mut images: Vec<(String, Vec<u8>)> = files.clone();
    for e in data.chunks_exact(6) {
        let Some((name, bytes)) = images.get_mut(usize::from(e[0]) % files.len()) else {
            continue;
        };
        if bytes.is_empty() {
            continue;
        }
        let at = u32::from_le_bytes([e[1], e[2], e[3], 0]) as usize % bytes.len();
        bytes[at] = e[4];
        if e[5] & 1 == 1 && !name.contains("-wal") {
            reseal_page_at(bytes, at);
        }
    }
    let vfs = SimVfs::new();
    for (n, b) in &images {
        vfs.set_file_bytes(n, b.clone());
    }
    let Ok(db) = fuzz_builder().open_with_vfs(Arc::new(vfs), "d") else {
        return;
    };
    let _ = exercise(&db);
    let _ = db.check_integrity();
    let _ = db.close();
}

/// Recomputes the checksum of the page holding byte `at` of a data file
/// image, over the run its header claims.
fn reseal_page_at(bytes: &mut [u8], at: usize) {
    let start = at / PAGE_SIZE * PAGE_SIZE;
    if start < 2 * PAGE_SIZE {
        return; // the superblocks have their own checksum
    }
    let npages = bytes
        .get(start + OFF_NPAGES..start + OFF_NPAGES + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(1, u32::from_le_bytes)
        .clamp(1, 64) as usize;
    let end = (start + npages * PAGE_SIZE).min(bytes.len());
    if end < start + HEADER_LEN {
        return;
    }
    let crc = bytes.get(start + 4..end).map_or(0, crc32c::crc32c);
    if let Some(c) = bytes.get_mut(start..start + 4) {
        c.copy_from_slice(&crc.to_le_bytes());
    }
}

fn exercise(db: &Database) -> Result<()> {
    {
        let rx = db.begin_read()?;
        let t = rx.open_table(T)?;
        for e in t.iter()?.take(500) {
            e?;
        }
        for e in t.iter()?.rev().take(500) {
            e?;
        }
        let _ = t.get(b"key0017".as_slice())?;
        let _ = t.len()?;
    }
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(T)?;
        t.remove(b"key0034".as_slice())?;
        t.insert(b"key0051".as_slice(), vec![9u8; 6000].as_slice())?;
        t.insert(b"new".as_slice(), b"v".as_slice())?;
        let mut u = tx.open_table(U)?;
        u.remove(7)?;
        u.insert(200, 1)?;
    }
    tx.commit()?;
    db.checkpoint()?;
    let other = db.cf("other")?;
    let tx = other.begin_write()?;
    tx.open_table(U)?.insert(3, 4)?;
    tx.commit()?;
    db.checkpoint()
}
