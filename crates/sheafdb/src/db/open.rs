//! Opening, creating and recovering a database (design.md §7).
//!
//! Open reads the two superblock slots, the metadata blob (extent table and
//! system free space) and the system tree (CF descriptors). It never walks
//! a user tree, so open time does not grow with the amount of data.

use std::ops::Bound;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::checkpointer::{CheckpointState, SysState, Triggers};
use super::health::Health;
use super::recover::Replayer;
use super::registry::CfRegistry;
use super::{Builder, Database, DbShared, Threads, WalDamage, SYS_EXTENT_POLICY};
use crate::btree::{self, TreeRoot};
use crate::error::{Error, Location, Result, WAL_MISSING_HINT};
use crate::format::page::{PageBytes as _, PageType, MAX_PAGE_SIZE, MIN_PAGE_SIZE};
use crate::format::records::{decode_cf_key, CfDescriptor, MetaBlob};
use crate::format::superblock::{
    fresh_db_id, valid_page_size, Slot, Superblock, WalMark, SLOT_LEN,
};
use crate::pager::alloc::{CfAllocator, ExtentMap, ExtentPolicy, ReclaimBatch};
use crate::pager::space::PageSpace;
use crate::pager::Pager;
use crate::storage::{OpenMode, Storage, Vfs};
use crate::txn::pages::ReadPages;
use crate::txn::{CfShared, CfVersion};
use crate::types::{CfId, Lsn, PageId, TableId, Version};
use crate::wal::{self, WalOptions, FIRST_LSN};

/// Name of the default column family.
pub const DEFAULT_CF_NAME: &str = "default";

pub(super) fn open(
    opts: &Builder,
    vfs: Arc<dyn Vfs>,
    name: &str,
    create: bool,
) -> Result<Database> {
    if !valid_page_size(opts.page_size) {
        return Err(Error::InvalidArgument(format!(
            "page size {} is not a power of two in {MIN_PAGE_SIZE}..={MAX_PAGE_SIZE}",
            opts.page_size
        )));
    }
    opts.check_extent_sizes()?;
    let read_only = opts.read_only;
    if read_only && create {
        return Err(Error::InvalidArgument(
            "a read-only open cannot create a database (use open)".into(),
        ));
    }
    let mode = match (create, read_only) {
        (true, _) => OpenMode::OpenOrCreate,
        (false, false) => OpenMode::Existing,
        (false, true) => OpenMode::ReadOnly,
    };
    if create && !vfs.exists(name)? {
        // Before the file exists: a refused create leaves nothing behind.
        refuse_segment_name(name)?;
        refuse_orphan_wal(&*vfs, name)?;
    }
    let storage = vfs.open(name, mode)?;
    // Readers share the lock; a read-write opener excludes everyone.
    let lock = match read_only {
        true => vfs.lock_shared(name),
        false => vfs.lock(name),
    };
    let lock = lock.map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => Error::DatabaseAlreadyOpen,
        _ => Error::Io(e),
    })?;
    // A crashed process may have left writes in the OS cache that never
    // reached the disk; what open reads must be durable before anything
    // relies on it (recycling WAL segments below the replay start, say).
    // A read-only open relies on nothing durable: it writes nothing.
    if !read_only {
        make_durable(&*vfs, &*storage)?;
    }
    // A new database is anchored from its first open on.
    let mut anchor_kept = true;
    let (shared, superblock_damaged) = match read_superblock(&*storage)? {
        Found::Database(sb, damaged) => {
            anchor_kept = sb.anchor_kept;
            (open_existing(opts, storage, lock, sb)?, damaged)
        }
        Found::Nothing | Found::Unfinished if create => {
            refuse_orphan_wal(&*vfs, name)?;
            (create_new(opts, storage, lock)?, false)
        }
        Found::Nothing => {
            return Err(Error::NotADatabase(format!(
                "{name} is empty (create it with Database::create)"
            )))
        }
        Found::Unfinished => {
            return Err(Error::NotADatabase(format!(
                "{name}: its creation never finished (Database::create starts it over)"
            )))
        }
        Found::Foreign(why) if create => {
            return Err(Error::NotADatabase(format!(
                "{name} exists and is not a sheafdb database ({why}); refusing to overwrite it"
            )))
        }
        Found::Foreign(why) => return Err(Error::NotADatabase(format!("{name}: {why}"))),
    };
    open_wal(&shared, vfs, name, superblock_damaged, anchor_kept)?;
    if !read_only {
        shared.start_threads()?;
    }
    Ok(Database { shared })
}

/// Ordering rule O2 (docs/design.md): the data file and its directory
/// entry are synced before open trusts the superblock it reads.
fn make_durable(vfs: &dyn Vfs, storage: &dyn Storage) -> Result<()> {
    storage.sync_data()?;
    vfs.sync_dir()?;
    Ok(())
}

fn wal_options(opts: &Builder) -> Result<WalOptions> {
    let mut w = WalOptions::with_segment_bytes(opts.options.wal_segment_bytes);
    w.min_segment_bytes = opts.options.wal_first_segment_bytes.min(w.segment_bytes);
    w.max_record_bytes = w
        .max_record_bytes
        .min(opts.options.wal_record_max_bytes as u64);
    Ok(w)
}

/// Opens the WAL beside the data file and replays it (design.md §7 step 4).
fn open_wal(
    shared: &Arc<DbShared>,
    vfs: Arc<dyn Vfs>,
    name: &str,
    superblock_damaged: bool,
    anchor_kept: bool,
) -> Result<()> {
    let from = shared.ckpt.sys.lock().replay_lsn.max(FIRST_LSN);
    let mut opts = wal_options_for(shared);
    opts.superblock_damaged = superblock_damaged;
    opts.salvage = shared.options.salvage_damaged_wal;
    opts.anchor = wal_anchor(shared, anchor_kept)?;
    opts.log_ended = shared.ckpt.sys.lock().wal_mark == WalMark::NotRequired;
    let mut replayer = Replayer::new(shared.clone());
    let (wal, summary) = wal::open(vfs, name, opts, from, &mut |lsn, payload| {
        replayer.apply(lsn, payload)
    })?;
    refuse_missing_wal(shared, name, &wal)?;
    if std::env::var_os("SHEAF_TRACE").is_some() {
        eprintln!("replay from {from:?}: {summary:?}");
    }
    // Ordering rule O1 (reader side): no new record may get an LSN that a
    // recorded checkpoint already covers, or replay would skip it.
    let mut floor = checkpoint_floor(shared);
    if let Some(damage) = &summary.damage {
        // Salvaged: the new log starts past every damaged use, so none of
        // their frames can vouch for its records at a later open; the
        // checkpoint below makes the prefix the base (rule O10).
        floor = floor.max(damage.log_limit);
        let public = WalDamage::new(damage);
        shared.wal_damage.set(public).expect("one open, one replay");
    }
    if let Some((lsn, _)) = summary.damage_below_start {
        shared
            .wal_damage_passed
            .set(lsn.0)
            .expect("one open, one replay");
    }
    let skipped = wal.skip_to(floor);
    if !shared.health.is_read_only() {
        // Rule O16: the anchor follows the log from here on.
        wal.start_anchoring(announcer(shared))?;
    }
    shared.wal.set(Arc::new(wal)).expect("WAL opened once");
    shared
        .replayed_records
        .store(replayer.applied, std::sync::atomic::Ordering::Relaxed);
    replayer.finish()?;
    if shared.health.is_read_only() {
        return Ok(());
    }
    // Rule O13: a segment file exists durably before any superblock says
    // the WAL is required.
    shared.wal().ensure_file()?;
    shared.ckpt.sys.lock().wal_kept = true;
    if skipped {
        // The log ended before a checkpoint LSN (it was damaged): make a
        // base past the skipped LSNs before anything new is appended.
        shared.checkpoint_all()?;
        // Rules O1 and O10: the skipped LSNs (and a salvaged log's damaged
        // uses) are below the durable replay start now.
        // The floor comes from the files: refuse, never panic, if it was
        // not reached.
        let base = shared.ckpt.sys.lock().replay_lsn;
        if base < floor {
            return Err(Error::corrupted(
                format!(
                    "the checkpoint after moving the WAL past LSN {} left the replay start \
                     at {}",
                    floor.0, base.0
                ),
                "WAL recovery",
            ));
        }
    }
    // A new database, a clean close or an older file: the base says the
    // WAL is required from now on (one superblock write at open).
    let mark = shared.ckpt.sys.lock().wal_mark;
    if mark != WalMark::Required {
        shared.checkpoint_including(Vec::new())?;
    }
    debug_assert_eq!(
        shared.ckpt.sys.lock().wal_mark,
        WalMark::Required,
        "O13: a read-write open leaves a base that requires its WAL"
    );
    Ok(())
}

/// The WAL anchor the data file holds (rule O16), for open to check the
/// log against: only under a base that says the WAL is required (a clean
/// close needs no log), written by a build that keeps the anchor
/// (`anchor_kept`: format 4; a build of format 3 may have run on the file
/// since the anchor was written), and not when the caller accepts a
/// missing WAL.
fn wal_anchor(shared: &DbShared, anchor_kept: bool) -> Result<Option<wal::Anchor>> {
    let (mark, db_id) = {
        let sys = shared.ckpt.sys.lock();
        (sys.wal_mark, sys.db_id)
    };
    if mark != WalMark::Required || !anchor_kept || shared.options.accept_missing_wal {
        return Ok(None);
    }
    let storage = shared.space.pager.storage();
    if storage.len()? < wal::ANCHOR_OFFSET + wal::ANCHOR_BYTES as u64 {
        return Ok(None);
    }
    let mut sector = vec![0u8; wal::ANCHOR_BYTES];
    storage.read_at(wal::ANCHOR_OFFSET, &mut sector)?;
    Ok(wal::Anchor::decode(&sector, db_id))
}

/// Writes a WAL anchor into the data file and syncs it (rule O16).
fn announcer(shared: &DbShared) -> wal::Announcer {
    let storage = Arc::clone(shared.space.pager.storage());
    wal::Announcer(Arc::new(move |bytes: &[u8]| {
        debug_assert_eq!(bytes.len(), wal::ANCHOR_BYTES);
        storage.write_at(wal::ANCHOR_OFFSET, bytes)?;
        storage.sync_data()
    }))
}

/// Rule O13 (reader side): a base that says the WAL is required, with no
/// segment file beside it, lost the commits since that base (the WAL was
/// deleted, or the data file copied without it): `WalMismatch`, unless
/// `Builder::accept_missing_wal` opens it at the base anyway.
fn refuse_missing_wal(shared: &DbShared, name: &str, wal: &wal::Wal) -> Result<()> {
    let mark = shared.ckpt.sys.lock().wal_mark;
    if mark != WalMark::Required || wal.segment_files() > 0 || shared.options.accept_missing_wal {
        return Ok(());
    }
    Err(Error::WalMismatch(format!(
        "{name} was last checkpointed while its WAL held or could hold newer commits, \
         and no WAL file ({name}-wal.*) is beside it: they were deleted, or the data \
         file was copied without them, and the commits since that checkpoint are \
         missing; nothing was changed. Put the WAL files back {WAL_MISSING_HINT}"
    )))
}

/// The highest LSN the durable base names: the replay start and every
/// CF's checkpoint LSN.
fn checkpoint_floor(shared: &DbShared) -> Lsn {
    let replay = shared.ckpt.sys.lock().replay_lsn;
    shared
        .registry
        .cfs
        .read()
        .values()
        .map(|cf| cf.base.lock().lsn)
        .fold(replay, Lsn::max)
}

fn wal_options_for(shared: &DbShared) -> WalOptions {
    let mut w = WalOptions::with_segment_bytes(shared.options.wal_segment_bytes);
    w.min_segment_bytes = shared.options.wal_first_segment_bytes.min(w.segment_bytes);
    w.read_only = shared.health.is_read_only();
    w.max_record_bytes = w
        .max_record_bytes
        .min(shared.options.wal_record_max_bytes as u64);
    let sys = shared.ckpt.sys.lock();
    w.db_id = sys.db_id;
    w.generation = sys.generation;
    w
}

/// What the first pages of a data file hold.
enum Found {
    /// A valid superblock (the higher generation of the two slots), and
    /// whether the other slot was damaged (did not decode).
    Database(Superblock, bool),
    /// Nothing: an empty file (or the zeros a torn creation marker may
    /// leave: at most one zero-filled slot).
    Nothing,
    /// Only a creation marker: `create` never finished.
    Unfinished,
    /// Not a sheafdb file (no magic anywhere, or non-zero bytes with no
    /// slot): the reason.
    Foreign(String),
}

/// Reads both slots; the valid one with the higher generation wins.
fn read_superblock(storage: &dyn Storage) -> Result<Found> {
    let len = storage.len()?;
    if len == 0 {
        return Ok(Found::Nothing);
    }
    if len < SLOT_LEN as u64 {
        let mut head = vec![0u8; len as usize];
        storage.read_at(0, &mut head)?;
        return Ok(if head.iter().all(|&b| b == 0) {
            Found::Nothing
        } else {
            Found::Foreign(format!("{len} bytes, shorter than a superblock"))
        });
    }
    let slot0 = read_slot(storage, 0, len)?;
    let s0 = slot0.as_deref().map(|b| Superblock::decode_slot(b, 0));
    // Slot 1 sits one page in; the page size comes from slot 0 when it is
    // valid, otherwise every legal size is tried.
    let sizes: Vec<usize> = match &s0 {
        Some(Ok(Slot::Written(sb))) => vec![sb.page_size as usize],
        _ => (12..=16).map(|s| 1usize << s).collect(),
    };
    let mut s1 = None;
    for ps in sizes {
        if let Some(b) = read_slot(storage, ps as u64, len)? {
            match Superblock::decode_slot(&b, 1) {
                Ok(Slot::Written(sb)) if sb.page_size as usize == ps => {
                    s1 = Some(Ok(Slot::Written(sb)));
                    break;
                }
                Ok(Slot::Written(_)) => {}
                other => {
                    s1.get_or_insert(other);
                }
            }
        }
    }
    pick_slot(s0, s1, len)
}

fn read_slot(storage: &dyn Storage, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
    if len < offset + SLOT_LEN as u64 {
        return Ok(None);
    }
    let mut b = vec![0u8; SLOT_LEN];
    storage.read_at(offset, &mut b)?;
    Ok(Some(b))
}

type SlotRead = Option<Result<Slot>>;

/// The valid superblock with the higher generation; otherwise what the
/// slots say: a damaged sheafdb slot (`Corrupted`) wins over a foreign one.
fn pick_slot(s0: SlotRead, s1: SlotRead, len: u64) -> Result<Found> {
    let mut best: Option<Superblock> = None;
    let (mut corrupted, mut foreign, mut creating) = (None, None, false);
    for s in [s0, s1].into_iter().flatten() {
        match s {
            Ok(Slot::Written(sb)) => {
                if best.is_none_or(|b| sb.generation > b.generation) {
                    best = Some(sb);
                }
            }
            Ok(Slot::Creating { .. }) => creating = true,
            Ok(Slot::Empty) => {}
            Err(e @ Error::NotADatabase(_)) => {
                foreign.get_or_insert(e);
            }
            Err(e) => {
                corrupted.get_or_insert(e);
            }
        }
    }
    if let Some(sb) = best {
        return Ok(Found::Database(sb, corrupted.is_some()));
    }
    if let Some(e) = corrupted {
        return Err(e);
    }
    if creating {
        return Ok(Found::Unfinished);
    }
    if let Some(e) = foreign {
        return Ok(Found::Foreign(e.to_string()));
    }
    // Both slots zero: a torn creation marker leaves at most one slot of
    // zeros; a longer zero-filled file is someone else's.
    if len <= SLOT_LEN as u64 {
        Ok(Found::Nothing)
    } else {
        Ok(Found::Foreign(format!("{len} bytes with no superblock")))
    }
}

/// Refuses a new database (or backup) named like a WAL segment of another
/// (`NAME-wal.N`): opening `NAME` would take it for a segment of its log
/// and delete it when the log shrinks (found by an adversarial review).
pub(super) fn refuse_segment_name(name: &str) -> Result<()> {
    match crate::wal::segment_owner(name) {
        Some(owner) => Err(Error::InvalidArgument(format!(
            "{name:?} is the name of a WAL file of a database named {owner:?}; \
             choose a name that does not end in \"-wal.\" and a number"
        ))),
        None => Ok(()),
    }
}

/// Issue 9 point 7: a new database never adopts an existing WAL. Segment
/// files beside a file being created belong to a database whose data
/// file is gone; they may hold its only copy of some commits.
fn refuse_orphan_wal(vfs: &dyn Vfs, name: &str) -> Result<()> {
    let orphans: Vec<String> = vfs
        .list()?
        .into_iter()
        .filter(|f| wal::is_segment_of(name, f))
        .collect();
    if orphans.is_empty() {
        return Ok(());
    }
    Err(Error::WalMismatch(format!(
        "{orphans:?} exist but {name} holds no database: refusing to create a new database \
         over another one's WAL (move the segments away if they are not needed)"
    )))
}

fn user_policy(opts: &Builder, page_size: usize) -> ExtentPolicy {
    opts.policy(page_size)
}

fn new_shared(
    opts: &Builder,
    storage: Arc<dyn Storage>,
    lock: Box<dyn crate::storage::LockGuard>,
    page_size: usize,
    extents: ExtentMap,
    sys: SysState,
) -> Result<Arc<DbShared>> {
    let next_cf = sys.next_cf;
    wal_options(opts)?;
    let ckpt = CheckpointState::new(sys, Triggers::new(&opts.options, page_size));
    Ok(Arc::new(DbShared {
        space: Arc::new(
            PageSpace::new(
                Pager::new(storage, page_size, opts.cache_bytes),
                extents,
                user_policy(opts, page_size),
            )
            .holding(lock),
        ),
        registry: CfRegistry::new(next_cf),
        fold_nudge: ckpt.fold_nudge(),
        ckpt,
        health: Health::new(opts.read_only),
        budget: super::budget::BufferBudget::new(
            opts.options.buffer_total_bytes,
            opts.options.buffer_limit_bytes,
        ),
        wal: OnceLock::new(),
        options: opts.options.clone(),
        replayed_records: AtomicU64::new(0),
        carried: Default::default(),
        filter_budget: Arc::new(crate::txn::key_filter::FilterBudget::with_min_keys(
            opts.options.key_filter_memory,
            opts.options.key_filter_min_keys,
        )),
        wal_damage: OnceLock::new(),
        wal_damage_passed: OnceLock::new(),
        threads: parking_lot::Mutex::new(Threads::default()),
    }))
}

pub(super) fn new_cf(
    shared: &DbShared,
    id: CfId,
    name: String,
    mut alloc: CfAllocator,
    desc: &CfDescriptor,
) -> CfShared {
    alloc.set_base_version(desc.version);
    alloc.set_dirty_counter(shared.ckpt.dirty_pages.clone());
    alloc.set_release_watch(shared.ckpt.wakeup.clone());
    let batch = ReclaimBatch::new(alloc.released_sink());
    let catalog = TreeRoot {
        root: desc.catalog_root,
        len: desc.catalog_len,
    };
    let version = CfVersion::of_trees(
        desc.version,
        catalog,
        desc.next_table,
        desc.checkpoint_lsn,
        batch,
        shared.fold_nudge.clone(),
    );
    CfShared::new(id, name, alloc, version)
}

fn create_new(
    opts: &Builder,
    storage: Arc<dyn Storage>,
    lock: Box<dyn crate::storage::LockGuard>,
) -> Result<Arc<DbShared>> {
    let ps = opts.page_size;
    let db_id = fresh_db_id();
    // The creation marker first (durably): a crash before the first
    // superblock leaves a file `create` may start over on.
    storage.set_len(0)?;
    storage.write_at(0, &Superblock::encode_creating(ps as u32, db_id))?;
    storage.sync_data()?;
    let sys_alloc = CfAllocator::new(CfId::SYSTEM, SYS_EXTENT_POLICY, vec![], &[])?;
    let sys = SysState {
        generation: 0,
        slot: 1,
        root: TreeRoot::default(),
        alloc: Arc::new(Mutex::new(sys_alloc)),
        meta_run: None,
        next_cf: CfId(CfId::DEFAULT.0 + 1),
        replay_lsn: FIRST_LSN,
        db_id,
        written_pages: 2,
        file_pages: 2,
        // No WAL file yet (rule O13): the open makes one, then marks it.
        wal_mark: WalMark::NotRequired,
        wal_kept: false,
    };
    let shared = new_shared(opts, storage, lock, ps, ExtentMap::new(2), sys)?;
    let desc = CfDescriptor {
        name: DEFAULT_CF_NAME.to_string(),
        catalog_root: None,
        catalog_len: 0,
        next_table: TableId(1),
        checkpoint_lsn: Lsn(0),
        version: Version(0),
        free: vec![],
    };
    let alloc = CfAllocator::new(CfId::DEFAULT, shared.space.policy, vec![], &[])?;
    let cf = new_cf(&shared, CfId::DEFAULT, desc.name.clone(), alloc, &desc);
    shared.registry.register(Arc::new(cf));
    {
        let mut sys = shared.ckpt.sys.lock();
        shared.write_checkpoint(&mut sys, &[], vec![(CfId::DEFAULT, Some(desc))], FIRST_LSN)?;
    }
    Ok(shared)
}

fn open_existing(
    opts: &Builder,
    storage: Arc<dyn Storage>,
    lock: Box<dyn crate::storage::LockGuard>,
    sb: Superblock,
) -> Result<Arc<DbShared>> {
    let ps = sb.page_size as usize;
    check_not_truncated(&*storage, &sb)?;
    let meta_page = sb
        .meta_page
        .ok_or_else(|| Error::corrupted("no metadata blob", "superblock"))?;
    // Read the blob before the cache exists: verified, not cached.
    let probe = Pager::new(storage.clone(), ps, 0);
    let run = probe.read_uncached(meta_page, sb.meta_npages, Some(CfId::SYSTEM))?;
    if run.page_type() != Some(PageType::Blob)
        || run.payload_len() != sb.meta_len
        || sb.meta_len as usize > run.len() - crate::format::page::HEADER_LEN
    {
        return Err(Error::corrupted_page(
            meta_page,
            "metadata blob header mismatch",
        ));
    }
    let payload = &run.bytes()[crate::format::page::HEADER_LEN..][..sb.meta_len as usize];
    let meta = MetaBlob::decode(payload)?;
    if meta.file_pages != sb.file_pages {
        return Err(Error::Corrupted {
            what: "metadata blob and superblock disagree on the file length".into(),
            location: Location::Page(meta_page),
        });
    }
    let extents = ExtentMap::from_records(meta.file_pages, &meta.extents)?;
    let sys_alloc = CfAllocator::new(
        CfId::SYSTEM,
        SYS_EXTENT_POLICY,
        extents.extents_of(CfId::SYSTEM),
        &meta.sys_free,
    )?;
    let slot = current_slot(&*storage, ps, &sb)?;
    let sys = SysState {
        generation: sb.generation,
        slot,
        root: TreeRoot {
            root: sb.sys_root,
            len: sb.sys_len,
        },
        alloc: Arc::new(Mutex::new(sys_alloc)),
        meta_run: Some((meta_page, sb.meta_npages)),
        next_cf: sb.next_cf,
        replay_lsn: sb.replay_lsn,
        db_id: sb.db_id,
        written_pages: sb.written_pages,
        file_pages: sb.file_pages,
        wal_mark: sb.wal_mark,
        wal_kept: false,
    };
    let shared = new_shared(opts, storage, lock, ps, extents, sys)?;
    check_system_pages(&shared)?;
    load_cfs(&shared)?;
    if !shared.registry.cfs.read().contains_key(&CfId::DEFAULT) {
        return Err(Error::corrupted(
            "default column family missing",
            "system tree",
        ));
    }
    check_extent_owners(&shared)?;
    Ok(shared)
}

/// `Corrupted` unless the system's own pages lie in the system's extents:
/// the metadata blob's run, and every page and run of the system tree,
/// which must also be whole. A checkpoint frees the old blob and the tree
/// pages it rewrites into the system's free space: a run outside the
/// system's extents broke the allocator's invariant (a panic in debug
/// builds, free space in no extent in release builds; an adversarial probe
/// edited one owner in the blob and fixed its checksum), and until then a
/// column family's allocator could hand such a page out as free. The walk
/// reads each system page once (a few pages, thousands of column families
/// taking tens), and also checks the tree's order and its count before any
/// descriptor is used.
fn check_system_pages(shared: &Arc<DbShared>) -> Result<()> {
    let (root, blob) = {
        let sys = shared.ckpt.sys.lock();
        (sys.root, sys.meta_run)
    };
    let pages = ReadPages::new(shared.space.clone(), CfId::SYSTEM);
    let mut runs: Vec<(PageId, u32)> = blob.into_iter().collect();
    btree::walk(&pages, &root, &mut |id, npages, _| runs.push((id, npages)))?;
    let sys = shared.ckpt.sys.lock();
    let outside = sys.alloc.lock().first_unowned(&runs);
    match outside {
        None => Ok(()),
        Some((id, _)) if Some(id) == blob.map(|(p, _)| p) => Err(Error::corrupted_page(
            id,
            "the metadata blob lies outside the system's extents",
        )),
        Some((id, _)) => Err(Error::corrupted_page(
            id,
            "a page of the system tree lies outside the system's extents",
        )),
    }
}

/// `Corrupted` if the extent map gives an extent to a column family the
/// system tree does not name: a checkpoint writes an extent as owned only
/// with its owner's descriptor (`to_records_as_persisted`), so such an
/// owner is damage, and its pages would be nobody's.
fn check_extent_owners(shared: &DbShared) -> Result<()> {
    let cfs = shared.registry.cfs.read();
    let extents = shared.space.extents.lock();
    let stranger = extents
        .owners()
        .find(|cf| *cf != CfId::SYSTEM && !cfs.contains_key(cf));
    match stranger {
        None => Ok(()),
        Some(cf) => Err(Error::corrupted(
            format!(
                "an extent is owned by column family {cf}, which the system tree does not name"
            ),
            "extent map",
        )),
    }
}

/// Issue 9 point 8: every page a checkpoint wrote must still be in the
/// file. (The recorded file length also counts extent space never written,
/// so it cannot tell a truncated file from a sparse one.) This also bounds
/// every run the superblock names before anything is allocated for it.
fn check_not_truncated(storage: &dyn Storage, sb: &Superblock) -> Result<()> {
    let len = storage.len()?;
    let need = sb.written_pages.saturating_mul(u64::from(sb.page_size));
    if len < need {
        return Err(Error::Corrupted {
            what: format!(
                "the data file is {len} bytes but its checkpoints wrote {need}: it was truncated"
            ),
            location: Location::Other("data file length".into()),
        });
    }
    Ok(())
}

/// Which slot holds `sb` (the other one is written next).
fn current_slot(storage: &dyn Storage, ps: usize, sb: &Superblock) -> Result<u8> {
    let mut b = vec![0u8; SLOT_LEN];
    storage.read_at(0, &mut b)?;
    Ok(match Superblock::decode(&b, 0) {
        Ok(Some(s0)) if s0 == *sb => 0,
        _ => {
            debug_assert!(ps >= SLOT_LEN);
            1
        }
    })
}

fn load_cfs(shared: &Arc<DbShared>) -> Result<()> {
    let root = shared.ckpt.sys.lock().root;
    let pages = ReadPages::new(shared.space.clone(), CfId::SYSTEM);
    let mut cursor = btree::Cursor::new(
        &root,
        Bound::Included(b"C".as_slice()),
        Bound::Excluded(b"D".as_slice()),
    );
    let extents = shared.space.extents.lock().clone();
    while let Some((k, v)) = cursor.next(&pages)? {
        let id = decode_cf_key(k.as_slice())?;
        if id == CfId::SYSTEM || id.0 >= crate::types::COUNTER_LIMIT {
            return Err(Error::corrupted(
                format!("descriptor of column family {id}"),
                "system tree",
            ));
        }
        let desc = CfDescriptor::decode(v.as_slice())?;
        let alloc = CfAllocator::new(id, shared.space.policy, extents.extents_of(id), &desc.free)?;
        let cf = new_cf(shared, id, desc.name.clone(), alloc, &desc);
        shared.registry.register(Arc::new(cf));
    }
    Ok(())
}
