//! `check_integrity` (design.md §11): checksums, tree order and key bounds,
//! page ownership, allocator agreement and catalog counts.
//!
//! Progress (`check_integrity_with`): the total is the pages in use when
//! the check begins (extent pages neither free nor waiting for snapshots,
//! over the system and every CF checked), which is exactly what the walk
//! visits when the check passes; each page run visited is reported.
//!
//! Runs with the checkpoint lock and every CF writer lock held, so it sees
//! one quiescent state: for each CF, the pages reachable from its latest
//! version, its free pages and its pending (snapshot-held) pages must be
//! disjoint and must cover its extents exactly.

use std::ops::Bound;
use std::sync::Arc;

use super::DbShared;
use crate::btree::{self, TreeRoot};
use crate::error::{Error, Location, Result};
use crate::format::page::PageType;
use crate::format::records::{decode_cf_key, CfDescriptor, PageRange, TableMeta};
use crate::pager::ranges::RangeSet;
use crate::txn::pages::ReadPages;
use crate::txn::{CfShared, WriterGuard};
use crate::types::{CfId, PageId};

/// What `check_integrity` looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntegrityReport {
    /// Column families checked.
    pub cfs: u64,
    /// Tables checked.
    pub tables: u64,
    /// Entries in all tables.
    pub entries: u64,
    /// Pages reachable from the latest versions (incl. system pages).
    pub pages_in_use: u64,
    /// Pages free or waiting for snapshots.
    pub pages_free: u64,
}

fn bad(what: String) -> Error {
    Error::Corrupted {
        what,
        location: Location::Other("integrity check".into()),
    }
}

/// Progress callback of a check: `(pages visited, pages to visit)`.
pub(super) type ProgressFn<'a> = &'a mut dyn FnMut(u64, u64);

thread_local! {
    /// Set while this thread runs a check's progress callback, which runs
    /// with every writer, every fold mark, the create/drop lock and the
    /// checkpoint lock held.
    static IN_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `WouldDeadlock` if this thread is inside a check's progress callback:
/// `what` (a checkpoint, a compaction, a fold, a CF created) would wait
/// for a lock the check holds on this very thread (found by an
/// adversarial review: those calls hung where `begin_write` already
/// returned `WouldDeadlock`).
pub(super) fn refuse_inside_callback(what: &str) -> Result<()> {
    match inside_callback() {
        true => Err(Error::WouldDeadlock(format!(
            "{what} from inside check_integrity's progress callback: the check holds \
             the locks it needs on this thread"
        ))),
        false => Ok(()),
    }
}

/// True while this thread runs a check's progress callback.
pub(super) fn inside_callback() -> bool {
    IN_CALLBACK.with(std::cell::Cell::get)
}

/// Calls `report` with [`IN_CALLBACK`] set, then puts the flag back as
/// it was, also if `report` panics: a check run from inside another
/// check's callback (another CF's) leaves the outer one's flag set.
/// Before, it cleared the flag for the rest of the outer callback, where
/// a checkpoint then waited for locks its own thread held instead of
/// returning `WouldDeadlock` (found by a session-38 review).
fn call_back(report: &mut dyn FnMut(u64, u64), done: u64, total: u64) {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_CALLBACK.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(IN_CALLBACK.with(|c| c.replace(true)));
    report(done, total);
}

/// Pages visited so far against the pages in use when the check began
/// (what a consistent file makes it visit); reported after every run.
pub(super) struct Progress<'a> {
    done: u64,
    total: u64,
    report: ProgressFn<'a>,
}

impl<'a> Progress<'a> {
    /// A progress of `total` pages, reported to `report` (first `(0, total)`).
    fn start(total: u64, report: ProgressFn<'a>) -> Progress<'a> {
        call_back(report, 0, total);
        Progress {
            done: 0,
            total,
            report,
        }
    }

    /// `npages` more pages were visited. A damaged file may make the walk
    /// visit more pages than it should: the count stops at the total.
    fn visited(&mut self, npages: u64) {
        self.done = (self.done + npages).min(self.total);
        call_back(self.report, self.done, self.total);
    }

    /// The check passed: every page is accounted for.
    fn finish(&mut self) {
        debug_assert!(self.done <= self.total, "progress past its total");
        if self.done != self.total {
            self.done = self.total;
            call_back(self.report, self.done, self.total);
        }
    }
}

/// Pages of an allocator's extents that are in use (neither free nor
/// waiting for snapshots).
fn in_use(alloc: &crate::pager::alloc::CfAllocator) -> u64 {
    let extent_pages: u64 = alloc.extents().iter().map(|e| e.pages).sum();
    extent_pages.saturating_sub(alloc.free_set().pages() + alloc.pending_set().pages())
}

/// Collects the pages of a tree into `set`, failing on a page visited twice.
fn walk_into<S: btree::store::PageRead>(
    store: &S,
    root: &TreeRoot,
    set: &mut RangeSet,
    progress: &mut Progress<'_>,
) -> Result<u64> {
    let mut dup = None;
    let n = btree::walk(
        store,
        root,
        &mut |id: PageId, npages: u32, _ty: PageType| {
            if !set.insert(id.0, npages as u64) && dup.is_none() {
                dup = Some(id);
            }
            progress.visited(npages as u64);
        },
    )?;
    if let Some(id) = dup {
        return Err(Error::corrupted_page(id, "page reachable twice"));
    }
    Ok(n)
}

fn extents_set(extents: &[PageRange]) -> RangeSet {
    let mut s = RangeSet::new();
    for e in extents {
        s.insert(e.start.0, e.pages);
    }
    s
}

/// Checks that `used`, `free` and `pending` partition `extents`.
fn check_partition(
    cf: CfId,
    extents: &RangeSet,
    used: &RangeSet,
    free: &RangeSet,
    pending: &RangeSet,
) -> Result<()> {
    for r in used.iter() {
        if !extents.contains_all(r.start.0, r.pages) {
            return Err(Error::corrupted_page(
                r.start,
                format!("page in use outside the extents of cf {cf}"),
            ));
        }
        if free.intersects(r.start.0, r.pages) || pending.intersects(r.start.0, r.pages) {
            return Err(Error::corrupted_page(
                r.start,
                format!("page in use is also marked free in cf {cf}"),
            ));
        }
    }
    let total = used.pages() + free.pages() + pending.pages();
    if total != extents.pages() {
        return Err(bad(format!(
            "cf {cf}: {} used + {} free + {} pending pages != {} extent pages (leak or overlap)",
            used.pages(),
            free.pages(),
            pending.pages(),
            extents.pages()
        )));
    }
    Ok(())
}

/// The live CFs, their writers (locked) and the create/drop lock.
type Quiet<'a> = (
    Vec<Arc<crate::txn::CfShared>>,
    Vec<crate::txn::WriterGuard>,
    crate::lock_rank::RankedGuard<'a, ()>,
);

/// Every live CF with its writer locked, and the create/drop lock held
/// (after the writers: the order `drop_cf` uses), retried until the CFs
/// locked are the live ones. `WouldDeadlock` if this thread holds a writer.
fn quiesce(shared: &DbShared) -> Result<Quiet<'_>> {
    loop {
        let cfs: Vec<_> = shared.registry.cfs.read().values().cloned().collect();
        let Some(writers) = lock_all(&cfs)? else {
            continue;
        };
        let no_create_drop = shared.registry.create_drop.lock();
        let live: Vec<CfId> = shared.registry.cfs.read().keys().copied().collect();
        let locked: Vec<CfId> = cfs.iter().map(|c| c.id).collect();
        if live == locked {
            return Ok((cfs, writers, no_create_drop));
        }
    }
}

/// Every writer of `cfs`, or `None` after waiting for a busy one. Never
/// waits for one while holding another: a thread that holds the writer of
/// one CF and begins a transaction on another would otherwise wait for
/// this check while it waits for that thread, forever (found by an
/// adversarial review). So a busy writer makes it let go of those it took
/// and wait for that one alone; the caller starts over.
fn lock_all(cfs: &[Arc<CfShared>]) -> Result<Option<Vec<WriterGuard>>> {
    let mut writers = Vec::with_capacity(cfs.len());
    for c in cfs {
        match c.try_lock_writer() {
            Ok(w) => writers.push(w),
            Err(Error::WriterBusy(_)) => {
                drop(writers);
                drop(c.lock_writer()?);
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(writers))
}

/// B1/B2: the budget's count equals the bytes of every live CF's current
/// buffer, and is within the limit. Checked with every CF's writer held and
/// no CF created or dropped meanwhile (retried if the set changed before
/// its locks were taken).
fn check_buffer_budget(shared: &Arc<DbShared>) -> Result<()> {
    let (_cfs, writers, _no_create_drop) = quiesce(shared)?;
    let held: u64 = writers.iter().map(|w| w.head.buffer.bytes()).sum();
    let used = shared.budget.used();
    if used != held || used > shared.budget.limit() {
        return Err(bad(format!(
            "buffer budget counts {used} bytes, the CFs' buffers hold {held} (limit {})",
            shared.budget.limit()
        )));
    }
    Ok(())
}

pub(super) fn check(shared: &Arc<DbShared>, report_to: ProgressFn<'_>) -> Result<IntegrityReport> {
    check_buffer_budget(shared)?;
    // Quiesce: no writer of any CF, no CF created or dropped (retried if
    // the set changed before the locks were taken), no checkpoint.
    // `WouldDeadlock` if this thread holds one of the writers (it would
    // wait on itself). Without the create/drop lock, a CF created or
    // dropped meanwhile was reported as corruption ("system tree lists cf
    // 81, which is neither open nor dropped", "page in use outside the
    // extents of cf 124"; adversarial probe).
    let (cfs, writers, _no_create_drop) = quiesce(shared)?;
    let mut _folds = Vec::with_capacity(cfs.len());
    for c in &cfs {
        _folds.push(no_fold_running(shared, c)?);
    }
    let sys = shared.ckpt.sys.lock();
    let mut report = IntegrityReport::default();
    let total =
        in_use(&sys.alloc.lock()) + cfs.iter().map(|c| in_use(&c.alloc.lock())).sum::<u64>();
    let mut progress = Progress::start(total, report_to);

    let sys_pages = ReadPages::new(shared.space.clone(), CfId::SYSTEM);
    let mut sys_used = RangeSet::new();
    walk_into(&sys_pages, &sys.root, &mut sys_used, &mut progress)?;
    if let Some((p, n)) = sys.meta_run {
        if !sys_used.insert(p.0, n as u64) {
            return Err(Error::corrupted_page(
                p,
                "metadata blob overlaps the system tree",
            ));
        }
        progress.visited(n as u64);
    }
    {
        let alloc = sys.alloc.lock();
        let ext = extents_set(alloc.extents());
        check_partition(
            CfId::SYSTEM,
            &ext,
            &sys_used,
            alloc.free_set(),
            &alloc.pending_set(),
        )?;
        report.pages_free += alloc.free_set().pages();
    }
    report.pages_in_use += sys_used.pages();

    let mut on_disk = Vec::new();
    let mut cursor = btree::Cursor::new(
        &sys.root,
        Bound::Included(b"C".as_slice()),
        Bound::Excluded(b"D".as_slice()),
    );
    while let Some((k, v)) = cursor.next(&sys_pages)? {
        on_disk.push((
            decode_cf_key(k.as_slice())?,
            CfDescriptor::decode(v.as_slice())?,
        ));
    }
    let dropped: Vec<CfId> = shared
        .registry
        .dropped
        .lock()
        .iter()
        .map(|c| c.id)
        .collect();
    for (id, _) in &on_disk {
        if !cfs.iter().any(|c| c.id == *id) && !dropped.contains(id) {
            return Err(bad(format!(
                "system tree lists cf {id}, which is neither open nor dropped"
            )));
        }
    }

    for (cf, writer) in cfs.iter().zip(&writers) {
        let r = check_one(shared, cf, &writer.head, &mut progress)?;
        report.cfs += r.cfs;
        report.tables += r.tables;
        report.entries += r.entries;
        report.pages_in_use += r.pages_in_use;
        report.pages_free += r.pages_free;
    }
    progress.finish();
    Ok(report)
}

/// Checks one CF's trees and space; the caller holds its writer lock, and
/// `version` is its head: the latest committed version, which the
/// allocator's state describes (a commit hands its pages to the allocator
/// before it is published, so the published version can be older).
fn check_one(
    shared: &Arc<DbShared>,
    cf: &Arc<crate::txn::CfShared>,
    version: &crate::txn::CfVersion,
    progress: &mut Progress<'_>,
) -> Result<IntegrityReport> {
    let mut report = IntegrityReport::default();
    let pages = ReadPages::new(shared.space.clone(), cf.id);
    let mut used = RangeSet::new();
    let n_tables = walk_into(&pages, &version.catalog, &mut used, progress)?;
    let mut cursor = btree::Cursor::new(&version.catalog, Bound::Unbounded, Bound::Unbounded);
    let mut seen_ids = std::collections::HashSet::new();
    while let Some((name, v)) = cursor.next(&pages)? {
        let meta = TableMeta::decode(v.as_slice())?;
        if !seen_ids.insert(meta.id) || meta.id >= version.next_table {
            return Err(bad(format!(
                "cf {}: table id {} reused or unissued",
                cf.id, meta.id
            )));
        }
        let root = TreeRoot {
            root: meta.root,
            len: meta.len,
        };
        let entries = walk_into(&pages, &root, &mut used, progress).map_err(|e| match e {
            Error::Corrupted { what, location } => Error::Corrupted {
                what: format!(
                    "table {:?}: {what}",
                    String::from_utf8_lossy(name.as_slice())
                ),
                location,
            },
            other => other,
        })?;
        report.entries += entries;
    }
    let alloc = cf.alloc.lock();
    let ext = extents_set(alloc.extents());
    check_partition(cf.id, &ext, &used, alloc.free_set(), &alloc.pending_set())?;
    report.cfs += 1;
    report.tables += n_tables;
    report.pages_in_use += used.pages();
    report.pages_free += alloc.free_set().pages() + alloc.pending_set().pages();

    Ok(report)
}

/// `check_integrity` for one CF: its trees, its space accounting.
pub(super) fn check_cf(
    shared: &Arc<DbShared>,
    cf: &Arc<crate::txn::CfShared>,
    report_to: ProgressFn<'_>,
) -> Result<IntegrityReport> {
    let writer = cf.lock_writer()?;
    let _fold = no_fold_running(shared, cf)?;
    let total = in_use(&cf.alloc.lock());
    let mut progress = Progress::start(total, report_to);
    let report = check_one(shared, cf, &writer.head, &mut progress)?;
    progress.finish();
    Ok(report)
}

/// Waits until no fold of `cf` is being made aside and keeps one from
/// starting: a fold's private pages are allocated but reachable from no
/// version, and would read as a leak. A running fold ends soon: its last
/// step needs the writer lock the caller holds and gives up after 50 ms.
fn no_fold_running<'a>(
    shared: &DbShared,
    cf: &'a crate::txn::CfShared,
) -> Result<crate::txn::FoldMark<'a>> {
    loop {
        if let Some(mark) = cf.begin_fold() {
            return Ok(mark);
        }
        shared.health.check_not_closed()?;
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
