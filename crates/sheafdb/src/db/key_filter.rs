//! Builds the CFs' key filters (`txn::key_filter`, design.md "Key
//! filter") on the `sheafdb-keyfilter` thread, or at once for tests.
//!
//! Owns: the build of one CF's filter ([`build_cf`]: the F1 protocol)
//! and the thread's loop (woken through `FilterBudget::wake`).
//!
//! Invariant F1's half kept here: a filter is installed as a target under
//! the CF's writer lock and before the version it scans is read, so every
//! put not in that version goes into it; it is trusted only once the scan
//! of every tree and the buffer of that version has added every key.
//! A build that fails or is stopped is abandoned (the filter trusted
//! before stays); a failure is not the database's: the trees are read
//! again by the transactions that need them, which report it.
//!
//! Must not know: how a write transaction uses the filter (`txn::state`).

use std::ops::Bound;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::DbShared;
use crate::btree::{self, TreeRoot};
use crate::error::{Error, Result};
use crate::format::records::TableMeta;
use crate::txn::key_filter::KeyFilter;
use crate::txn::pages::ReadPages;
use crate::txn::{CfShared, CfVersion};

/// How often the thread looks for CFs that want a build when nothing
/// woke it (a new CF).
const POLL: Duration = Duration::from_millis(200);

/// How soon it tries again a CF whose writer was busy (a transaction may
/// be loading a large table that wants a filter the moment it commits).
const BUSY_RETRY: Duration = Duration::from_millis(5);

/// Keys scanned between looks at the stop signal.
const STOP_CHECK_KEYS: u64 = 4096;

/// Whether a build waits for a CF's writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The background thread: a busy CF is tried again later.
    Try,
    /// `Database::build_key_filters`: waits for the writer.
    Block,
}

/// The `sheafdb-keyfilter` thread: builds the filters CFs want until the
/// database closes. Holds the database only while it builds.
pub(crate) fn builder_loop(weak: Weak<DbShared>) {
    let mut timeout = POLL;
    loop {
        let Some(shared) = weak.upgrade() else { return };
        let work = shared.filter_budget.clone();
        drop(shared); // (not held while waiting: the database may close)
        if !work.wait(timeout) {
            return;
        }
        let Some(shared) = weak.upgrade() else { return };
        if shared.health.check_writable().is_err() {
            continue;
        }
        // A failed build leaves the CF with the filter it had until it
        // asks again; the transactions read the trees, and report errors.
        timeout = match build_all(&shared, Wait::Try) {
            Ok(Built::WriterBusy) => BUSY_RETRY,
            Ok(Built::NoRoom | Built::Done) | Err(_) => POLL,
        };
    }
}

/// What a pass of builds did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Built {
    /// Every CF that wanted a filter got one, or has no room for it.
    Done,
    /// A CF's writer was busy: it still wants one.
    WriterBusy,
    /// A CF's filter did not fit in the budget: it still wants one.
    NoRoom,
}

/// Builds the filter of every CF that wants one (with `Wait::Block`,
/// of every CF).
pub(crate) fn build_all(shared: &Arc<DbShared>, wait: Wait) -> Result<Built> {
    let cfs: Vec<Arc<CfShared>> = shared.registry.cfs.read().values().cloned().collect();
    // A caller holding any CF's writer would wait for the others' while
    // theirs may wait for its own: refused before any wait.
    if let Some(cf) = cfs
        .iter()
        .find(|cf| wait == Wait::Block && cf.writer_held_here())
    {
        return Err(cf.would_deadlock());
    }
    let mut built = Built::Done;
    for cf in cfs {
        let wanted = cf.key_filter.take_request();
        if !wanted && wait == Wait::Try {
            continue;
        }
        match build_cf(shared, &cf, wait) {
            Ok(Built::Done) => {}
            Ok(Built::WriterBusy) => built = Built::WriterBusy,
            Ok(Built::NoRoom) if built == Built::Done => built = Built::NoRoom,
            Ok(Built::NoRoom) => {}
            // Not asked again: a damaged page or an I/O error in the scan
            // would fail every retry, and a large CF's scan is costly.
            // The CF keeps the chain it had (or none) until it asks again
            // (its chain grown past three); its writers read the trees,
            // and report the damage.
            Err(e) => return Err(e),
        }
        if shared.filter_budget.stopped() {
            break;
        }
    }
    Ok(built)
}

/// Builds a new key filter for `cf` and has writers trust it (F1).
fn build_cf(shared: &Arc<DbShared>, cf: &Arc<CfShared>, wait: Wait) -> Result<Built> {
    let _one_build = match wait {
        // (`build_all` refused a caller holding a writer: another caller
        // may hold this lock while it waits for that writer.)
        Wait::Block => cf.key_filter.build_lock.lock(),
        Wait::Try => match cf.key_filter.build_lock.try_lock() {
            Some(g) => g,
            None => {
                // (`start_empty` may hold it, and may yet give up.)
                cf.key_filter.want_build();
                return Ok(Built::WriterBusy);
            }
        },
    };
    // Sized and allocated before the writer lock (zeroing a large filter
    // takes a while), from the published version; checked again against
    // the latest commit under the lock.
    //
    // The version is held before the CF is checked live, as a reader
    // does: once it is held, a drop cannot give its pages back
    // (`release_dropped` counts it). Read the other way round, or not
    // checked at all, a CF dropped after `build_all` listed it had its
    // pages given to another CF before the estimate read them ("page
    // belongs to cf 322 not cf 324", checksum mismatches: an adversarial
    // kill campaign, CFs created and dropped beside writers of others).
    let published_version = cf.current.load_full();
    if cf.check_live().is_err() {
        return Ok(Built::Done);
    }
    let published = estimate_keys(shared, cf, &published_version)?;
    drop(published_version);
    let Some(mut filter) = KeyFilter::new(published.saturating_mul(2), &shared.filter_budget)
    else {
        return Ok(no_room(cf));
    };
    let (head, filter) = {
        let lock = match wait {
            Wait::Block => cf.lock_writer()?,
            Wait::Try => match cf.try_lock_writer() {
                Ok(lock) => lock,
                Err(Error::WriterBusy(_)) => {
                    cf.key_filter.want_build();
                    return Ok(Built::WriterBusy);
                }
                Err(e) => return Err(e),
            },
        };
        if cf.check_live().is_err() {
            return Ok(Built::Done); // dropped meanwhile: nothing to build
        }
        // The latest commit may be ahead of the published version (early
        // lock release: a large load just committed): resized then.
        let keys = estimate_keys(shared, cf, &lock.head)?;
        if keys > filter.capacity() {
            drop(filter);
            match KeyFilter::new(keys.saturating_mul(2), &shared.filter_budget) {
                Some(f) => filter = f,
                None => return Ok(no_room(cf)),
            }
        }
        let filter = Arc::new(filter);
        cf.key_filter.install(filter.clone());
        (lock.head.clone(), filter)
    };
    match scan(shared, cf, &head, &filter) {
        Ok(true) => {
            filter.finish(head.version);
            cf.key_filter.promote(&filter);
            Ok(Built::Done)
        }
        Ok(false) => {
            cf.key_filter.abandon();
            Ok(Built::Done)
        }
        Err(e) => {
            cf.key_filter.abandon();
            Err(e)
        }
    }
}

/// No room in the budget for `cf`'s filter: it goes without for now and
/// asks again (the thread looks every `POLL`, taking no writer lock
/// before the room is there; memory comes back when a CF is dropped or a
/// build replaces a chain).
fn no_room(cf: &CfShared) -> Built {
    cf.key_filter.want_build();
    Built::NoRoom
}

/// Gives every CF that holds no key (a new database's, a CF just created)
/// a trusted, empty filter at once, with no scan: nothing can be in its
/// trees, and no write transaction is running (F1: taken under its writer
/// lock, which a CF that was just opened or created has free).
pub(crate) fn start_empty(shared: &DbShared, cf: &CfShared) -> Result<()> {
    if shared.filter_budget.limit() == 0 || shared.health.is_read_only() {
        return Ok(());
    }
    // Never waits: a build under way (or a writer that came first)
    // leaves the CF to the background thread, which it asks.
    let Some(_one_build) = cf.key_filter.build_lock.try_lock() else {
        cf.key_filter.want_build();
        return Ok(());
    };
    let Ok(lock) = cf.try_lock_writer() else {
        cf.key_filter.want_build();
        return Ok(());
    };
    let head = &lock.head;
    if head.catalog.root.is_some() || head.buffer.entries() > 0 {
        return Ok(());
    }
    let Some(filter) = KeyFilter::new(0, &shared.filter_budget) else {
        return Ok(());
    };
    let filter = Arc::new(filter);
    cf.key_filter.install(filter.clone());
    filter.finish(head.version);
    cf.key_filter.promote(&filter);
    cf.key_filter.take_request();
    Ok(())
}

/// About how many keys version `v` of `cf` holds: its tables' lengths
/// plus its buffered writes.
///
/// The lengths come from the file: a damaged one may be huge, and then
/// the filter is too large for the budget ([`KeyFilter::new`] refuses
/// any size past `MAX_CAPACITY`), never allocated.
fn estimate_keys(shared: &DbShared, cf: &CfShared, v: &CfVersion) -> Result<u64> {
    let store = ReadPages::new(shared.space.clone(), cf.id);
    let mut n = v.buffer.entries();
    let mut tables = btree::Cursor::new(&v.catalog, Bound::Unbounded, Bound::Unbounded);
    while let Some((_, meta)) = tables.next(&store)? {
        n = n.saturating_add(TableMeta::decode(meta.as_slice())?.len);
    }
    Ok(n)
}

/// Adds every key of every tree and buffer entry of `head` (which the
/// caller's `Arc` keeps readable) to `filter`; false if the database
/// began to close first.
fn scan(shared: &DbShared, cf: &CfShared, head: &CfVersion, filter: &KeyFilter) -> Result<bool> {
    let store = ReadPages::new(shared.space.clone(), cf.id);
    let mut scanned = 0u64;
    let mut tables = btree::Cursor::new(&head.catalog, Bound::Unbounded, Bound::Unbounded);
    while let Some((_, meta)) = tables.next(&store)? {
        let meta = TableMeta::decode(meta.as_slice())?;
        let root = TreeRoot {
            root: meta.root,
            len: meta.len,
        };
        let mut keys = btree::Cursor::new(&root, Bound::Unbounded, Bound::Unbounded);
        while let Some((key, _)) = keys.next(&store)? {
            filter.add(meta.id, key.as_slice());
            scanned += 1;
            if scanned.is_multiple_of(STOP_CHECK_KEYS) && shared.filter_budget.stopped() {
                return Ok(false);
            }
        }
    }
    head.buffer.visit_keys(|table, key| {
        filter.add(table, key);
    });
    Ok(true)
}
