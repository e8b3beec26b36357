//! Fault-injecting simulation of a disk and its directory (design.md §12).
//!
//! Owns: [`SimVfs`], an in-memory [`Vfs`] that remembers what a power loss
//! could leave behind, builds such post-crash states on request
//! ([`SimVfs::crash`]), and fails chosen I/O operations
//! ([`SimVfs::fail_op`], [`SimVfs::fail_from`]).
//!
//! # The model
//!
//! Files are inodes; the directory maps names to inodes. Each inode has:
//! - a *current* image: what reads see, with every write applied;
//! - a *durable* image: what is on stable media for sure;
//! - the list of *unsynced* operations (`Write { offset, data }`,
//!   `SetLen { len }`) made since its last successful `sync_data`, in order.
//!
//! `sync_data` applies the unsynced list to the durable image (which then
//! equals the current one) and clears it. The directory has a *current*
//! name → inode map and a *durable* one; `sync_dir` copies the current map
//! to the durable one. Creating or removing a name changes only the current
//! map. As with POSIX, a handle keeps its inode after the name is removed.
//!
//! # What `crash` may produce
//!
//! [`SimVfs::crash`] returns a fresh, independent `SimVfs` whose files are one
//! possible post-power-loss state, drawn from a seeded RNG:
//! - each name whose current and durable entries differ (created, removed,
//!   or removed and re-created since the last `sync_dir`) ends up with either
//!   entry, with probability 1/2 each — so an unsynced creation may vanish
//!   and an unsynced removal may be undone;
//! - each surviving inode starts from its durable image, then its unsynced
//!   operations are walked in order; each write is *kept*, *dropped* or
//!   *torn* (1/3 each), and each length change is kept or dropped (1/2).
//!   A torn write is cut at absolute 512-byte sector boundaries
//!   (multiples of [`SECTOR_SIZE`] in the file) and each piece is applied
//!   independently with probability 1/2. Applying past the end zero-fills.
//!
//! [`CrashPolicy::KeepAll`] keeps everything (a process crash: the kernel
//! still writes back its page cache) and [`CrashPolicy::DropAll`] keeps only
//! what was synced (the harshest power loss).
//!
//! # Why this covers a real disk
//!
//! A disk with a volatile write cache and atomic 512-byte sectors may, at a
//! power loss, have persisted any subset of the sectors written since the
//! last flush, in any order, each sector whole (old or new, never a mix).
//! So after the crash, each sector holds either its durable content or the
//! content of one of the unsynced writes that covered it. Tearing decides
//! each (write, sector) pair independently, and the value of a sector is
//! that of the last piece kept for it, or the durable one if none was; so
//! every such per-sector combination, including "an older write won over a
//! newer one" (drop the newer piece), has non-zero probability. Replaying in
//! the original order therefore loses nothing that reordering would add.
//! Writes not aligned to sectors are torn at the sector boundaries they
//! cross, which is where a real disk could split them. File length
//! follows the kept operations: a dropped extending write leaves the file
//! shorter, a torn one may leave zero-filled holes, as a file system that
//! persisted the new size but not all of the data would.
//!
//! Not modelled: bit rot and misdirected writes (the corruption tests flip
//! bytes through [`SimVfs::set_file_bytes`] instead), and Linux's habit of
//! forgetting dirty pages after a failed `fsync` — here a failed
//! `sync_data` makes nothing durable and a later successful one makes
//! everything durable; the database poisons itself on a failed sync anyway.
//!
//! # Error injection
//!
//! Every operation on a file or the directory (open, read_at, write_at,
//! write_vectored_at, sync_data, len, set_len, exists, remove, list,
//! sync_dir) increments one shared counter; [`SimVfs::fail_op`] fails the
//! N-th operation from now and [`SimVfs::fail_from`] fails it and every
//! later one. Taking a lock and the test helpers are not counted.
//!
//! Seeds use a private SplitMix64 generator rather than `rand::StdRng`,
//! whose output may change between `rand` releases: a printed seed must
//! replay the same crash forever. `rand` is also only a dev-dependency.
//!
//! Must not know: what the bytes mean.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::sync::Arc;

use parking_lot::Mutex;

use super::file::check_name;
use super::mem::{
    already_exists, not_found, read_image, resize_image, write_image, zero_range, NameLock,
};
use super::{LockGuard, OpenMode, Storage, Vfs};

/// The unit of atomicity of the simulated disk, in bytes.
pub const SECTOR_SIZE: u64 = 512;

/// An I/O failure to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The operation fails with `EIO` and changes nothing.
    Eio,
    /// The operation fails with `ENOSPC` and changes nothing.
    NoSpace,
    /// A write applies its first half, rounded down to whole sectors (so
    /// nothing below 1024 bytes), as an unsynced write, then fails with
    /// `EIO`. Other operations behave as [`Fault::Eio`].
    ShortWrite,
}

/// How [`SimVfs::crash_with`] treats what was not made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPolicy {
    /// Keep, drop or tear each unsynced operation and directory change at
    /// random (the seed decides).
    Random,
    /// Everything written survives, synced or not (a process crash).
    KeepAll,
    /// Only synced data and synced directory entries survive.
    DropAll,
}

/// A simulated directory with crash and error injection. Clones share state.
#[derive(Clone, Default)]
pub struct SimVfs {
    state: Arc<Mutex<SimState>>,
    locks: super::mem::LockTable,
}

type InodeId = u64;

/// An operation since the last `sync_data`, with offsets already checked to
/// fit in memory (so replaying it cannot fail).
#[derive(Debug, Clone)]
enum PendingOp {
    Write {
        offset: usize,
        data: Vec<u8>,
    },
    SetLen {
        len: usize,
    },
    /// A hole punched: zeros over the part of the range inside the file
    /// when it is applied (torn per sector like a write).
    Zero {
        offset: usize,
        len: usize,
    },
}

#[derive(Debug, Default)]
struct Inode {
    current: Vec<u8>,
    durable: Vec<u8>,
    unsynced: Vec<PendingOp>,
    /// Open handles; an inode with none and no directory entry is freed.
    handles: usize,
}

#[derive(Debug, Default)]
struct SimState {
    inodes: BTreeMap<InodeId, Inode>,
    next_inode: InodeId,
    /// Directory as reads see it.
    dir_now: BTreeMap<String, InodeId>,
    /// Directory as of the last `sync_dir`.
    dir_durable: BTreeMap<String, InodeId>,
    /// Operations counted so far.
    ops: u64,
    /// One-shot faults keyed by absolute operation number.
    fail_at: BTreeMap<u64, Fault>,
    /// Every operation from this absolute number on fails.
    fail_from: Option<(u64, Fault)>,
}

impl SimVfs {
    /// An empty simulated directory.
    pub fn new() -> SimVfs {
        SimVfs::default()
    }

    /// A possible state after a power loss, drawn with `seed`
    /// (`crash_with(seed, CrashPolicy::Random)`).
    pub fn crash(&self, seed: u64) -> SimVfs {
        self.crash_with(seed, CrashPolicy::Random)
    }

    /// A new, independent `SimVfs` holding the files as they would be after
    /// a crash now, under `policy` (see the module doc). It has no locks
    /// held, no unsynced operations, no faults and an operation count of 0.
    /// Handles from `self` keep working on `self`'s state.
    pub fn crash_with(&self, seed: u64, policy: CrashPolicy) -> SimVfs {
        let state = self.state.lock();
        let mut rng = SplitMix64::new(seed);
        let mut images = BTreeMap::new();
        for name in state.all_names() {
            if let Some(id) = state.entry_after_crash(&name, policy, &mut rng) {
                if let Some(inode) = state.inodes.get(&id) {
                    images.insert(name, inode.image_after_crash(policy, &mut rng));
                }
            }
        }
        SimVfs::from_images(images)
    }

    /// The state right after the *process* dies, while the machine keeps
    /// running: a new, independent `SimVfs` whose files read exactly as
    /// now, but whose unsynced writes and directory changes are still
    /// unsynced (the kernel's page cache survived the process, the disk has
    /// not seen it). A later [`SimVfs::crash`] of the result may still drop
    /// or tear them. No locks are held, no faults are armed, the operation
    /// count is 0, and inodes reachable only through handles of the dead
    /// process are gone. Handles from `self` keep working on `self`.
    pub fn process_crash(&self) -> SimVfs {
        let state = self.state.lock();
        let mut next = SimState {
            next_inode: state.next_inode,
            dir_now: state.dir_now.clone(),
            dir_durable: state.dir_durable.clone(),
            ..SimState::default()
        };
        let named: BTreeSet<InodeId> = state
            .dir_now
            .values()
            .chain(state.dir_durable.values())
            .copied()
            .collect();
        for id in named {
            if let Some(inode) = state.inodes.get(&id) {
                next.inodes.insert(
                    id,
                    Inode {
                        current: inode.current.clone(),
                        durable: inode.durable.clone(),
                        unsynced: inode.unsynced.clone(),
                        handles: 0,
                    },
                );
            }
        }
        SimVfs {
            state: Arc::new(Mutex::new(next)),
            locks: Arc::default(),
        }
    }

    /// A directory whose files all exist durably with the given images.
    fn from_images(images: BTreeMap<String, Vec<u8>>) -> SimVfs {
        let mut state = SimState::default();
        for (name, image) in images {
            let id = state.new_inode();
            if let Some(inode) = state.inodes.get_mut(&id) {
                inode.current = image.clone();
                inode.durable = image;
            }
            state.dir_now.insert(name.clone(), id);
            state.dir_durable.insert(name, id);
        }
        SimVfs {
            state: Arc::new(Mutex::new(state)),
            locks: Arc::default(),
        }
    }

    /// Makes the `n`-th operation from now fail with `fault` (`n = 1`: the
    /// next one; `0` is taken as `1`). Later operations are unaffected.
    pub fn fail_op(&self, n: u64, fault: Fault) {
        let mut state = self.state.lock();
        let at = state.ops.saturating_add(n.max(1));
        state.fail_at.insert(at, fault);
    }

    /// Makes the `n`-th operation from now and every later one fail with
    /// `fault` (a dead disk), until [`SimVfs::clear_faults`].
    pub fn fail_from(&self, n: u64, fault: Fault) {
        let mut state = self.state.lock();
        let at = state.ops.saturating_add(n.max(1));
        state.fail_from = Some((at, fault));
    }

    /// Cancels every pending injected fault.
    pub fn clear_faults(&self) {
        let mut state = self.state.lock();
        state.fail_at.clear();
        state.fail_from = None;
    }

    /// Operations counted so far (see the module doc for which count).
    pub fn op_count(&self) -> u64 {
        self.state.lock().ops
    }

    /// The current image of `name` (what a read sees), if it exists.
    pub fn file_bytes(&self, name: &str) -> Option<Vec<u8>> {
        let state = self.state.lock();
        let id = state.dir_now.get(name)?;
        state.inodes.get(id).map(|i| i.current.clone())
    }

    /// The image `name` would have after a [`CrashPolicy::DropAll`] crash:
    /// its synced bytes, or `None` if its entry is not durable.
    pub fn durable_bytes(&self, name: &str) -> Option<Vec<u8>> {
        let state = self.state.lock();
        let id = state.dir_durable.get(name)?;
        state.inodes.get(id).map(|i| i.durable.clone())
    }

    /// Replaces `name` with `bytes`, durably (current and durable image, and
    /// a durable directory entry), creating it if missing. Not counted as
    /// an operation. For corruption tests.
    pub fn set_file_bytes(&self, name: &str, bytes: Vec<u8>) {
        let mut state = self.state.lock();
        let id = match state.dir_now.get(name) {
            Some(&id) => id,
            None => {
                let id = state.new_inode();
                state.dir_now.insert(name.to_owned(), id);
                id
            }
        };
        if let Some(inode) = state.inodes.get_mut(&id) {
            inode.current = bytes.clone();
            inode.durable = bytes;
            inode.unsynced.clear();
        }
        if let Some(old) = state.dir_durable.insert(name.to_owned(), id) {
            state.collect(old);
        }
    }

    /// Names of the files that exist now, sorted. Not counted.
    pub fn file_names(&self) -> Vec<String> {
        self.state.lock().dir_now.keys().cloned().collect()
    }
}

impl fmt::Debug for SimVfs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("SimVfs")
            .field("files", &state.dir_now.keys().collect::<Vec<_>>())
            .field("ops", &state.ops)
            .finish_non_exhaustive()
    }
}

impl SimState {
    /// Counts one operation and returns the fault injected into it, if any.
    fn begin_op(&mut self) -> Option<Fault> {
        self.ops += 1;
        if let Some(fault) = self.fail_at.remove(&self.ops) {
            return Some(fault);
        }
        match self.fail_from {
            Some((from, fault)) if self.ops >= from => Some(fault),
            _ => None,
        }
    }

    /// `begin_op`, turning any fault into its error.
    fn check_op(&mut self) -> io::Result<()> {
        match self.begin_op() {
            Some(fault) => Err(fault_error(fault)),
            None => Ok(()),
        }
    }

    fn new_inode(&mut self) -> InodeId {
        let id = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(id, Inode::default());
        id
    }

    /// Frees `id` if no handle and no directory entry refers to it.
    fn collect(&mut self, id: InodeId) {
        let referenced = self.dir_now.values().any(|&i| i == id)
            || self.dir_durable.values().any(|&i| i == id)
            || self.inodes.get(&id).is_some_and(|i| i.handles > 0);
        if !referenced {
            self.inodes.remove(&id);
        }
    }

    fn inode(&mut self, id: InodeId) -> io::Result<&mut Inode> {
        // Handles keep their inode alive, so this only fails on a bug.
        self.inodes
            .get_mut(&id)
            .ok_or_else(|| io::Error::other(format!("simulated inode {id} vanished")))
    }

    /// Every name in the current or the durable directory, sorted.
    fn all_names(&self) -> BTreeSet<String> {
        self.dir_now
            .keys()
            .chain(self.dir_durable.keys())
            .cloned()
            .collect()
    }

    /// Which inode (if any) `name` refers to after a crash.
    fn entry_after_crash(
        &self,
        name: &str,
        policy: CrashPolicy,
        rng: &mut SplitMix64,
    ) -> Option<InodeId> {
        let now = self.dir_now.get(name).copied();
        let durable = self.dir_durable.get(name).copied();
        if now == durable {
            return now;
        }
        match policy {
            CrashPolicy::KeepAll => now,
            CrashPolicy::DropAll => durable,
            CrashPolicy::Random if rng.coin() => now,
            CrashPolicy::Random => durable,
        }
    }
}

impl Inode {
    /// The image this inode has after a crash under `policy`.
    fn image_after_crash(&self, policy: CrashPolicy, rng: &mut SplitMix64) -> Vec<u8> {
        match policy {
            CrashPolicy::KeepAll => self.current.clone(),
            CrashPolicy::DropAll => self.durable.clone(),
            CrashPolicy::Random => {
                let mut image = self.durable.clone();
                for op in &self.unsynced {
                    apply_at_random(&mut image, op, rng);
                }
                image
            }
        }
    }

    /// Applies `data` at `offset` to the current image and records it as
    /// unsynced.
    fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        write_image(&mut self.current, offset, data)?;
        // write_image succeeded, so the offset fits in a usize.
        let offset = usize::try_from(offset).map_err(io::Error::other)?;
        self.unsynced.push(PendingOp::Write {
            offset,
            data: data.to_vec(),
        });
        Ok(())
    }

    /// Punches a hole: zeros over the range's part inside the file now,
    /// recorded as unsynced (the length does not change).
    fn punch_hole(&mut self, offset: u64, len: u64) {
        let zeroed = zero_range(&mut self.current, offset, len);
        if !zeroed.is_empty() {
            self.unsynced.push(PendingOp::Zero {
                offset: zeroed.start,
                len: zeroed.len(),
            });
        }
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        resize_image(&mut self.current, len)?;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        self.unsynced.push(PendingOp::SetLen { len });
        Ok(())
    }

    /// Makes every unsynced operation durable.
    fn sync(&mut self) {
        for op in std::mem::take(&mut self.unsynced) {
            apply(&mut self.durable, &op);
        }
        debug_assert!(self.durable.len() == self.current.len());
    }
}

/// Replays `op` on `image`.
fn apply(image: &mut Vec<u8>, op: &PendingOp) {
    match op {
        PendingOp::Write { offset, data } => put(image, *offset, data),
        PendingOp::SetLen { len } => image.resize(*len, 0),
        PendingOp::Zero { offset, len } => {
            zero_range(image, *offset as u64, *len as u64);
        }
    }
}

/// Keeps, drops or tears `op` on `image` as the RNG decides.
fn apply_at_random(image: &mut Vec<u8>, op: &PendingOp, rng: &mut SplitMix64) {
    match op {
        PendingOp::SetLen { .. } => {
            if rng.coin() {
                apply(image, op);
            }
        }
        PendingOp::Zero { offset, len } => match rng.below(3) {
            0 => apply(image, op),
            1 => {}
            _ => {
                for (at, piece) in sector_spans(*offset, *len) {
                    if rng.coin() {
                        zero_range(image, at as u64, piece as u64);
                    }
                }
            }
        },
        PendingOp::Write { offset, data } => match rng.below(3) {
            0 => put(image, *offset, data),
            1 => {}
            _ => {
                for (start, piece) in sector_pieces(*offset, data) {
                    if rng.coin() {
                        put(image, start, piece);
                    }
                }
            }
        },
    }
}

/// Splits `[offset, offset + len)` at absolute sector boundaries:
/// `(offset, length)` of each piece, in order.
fn sector_spans(offset: usize, len: usize) -> Vec<(usize, usize)> {
    const SECTOR: usize = SECTOR_SIZE as usize;
    let end = offset + len;
    let mut spans = Vec::with_capacity(len / SECTOR + 2);
    let mut at = offset;
    while at < end {
        let piece = (SECTOR - at % SECTOR).min(end - at);
        spans.push((at, piece));
        at += piece;
    }
    spans
}

/// Splits a write of `data` at `offset` at absolute sector boundaries:
/// `(offset, bytes)` of each piece, in order.
fn sector_pieces(offset: usize, data: &[u8]) -> Vec<(usize, &[u8])> {
    (sector_spans(offset, data.len()).into_iter())
        .map(|(at, n)| (at, &data[at - offset..at - offset + n]))
        .collect()
}

/// Writes `data` at `offset` (already checked to fit), zero-filling a gap.
fn put(image: &mut Vec<u8>, offset: usize, data: &[u8]) {
    let end = offset + data.len();
    if end > image.len() {
        image.resize(end, 0);
    }
    image[offset..end].copy_from_slice(data);
}

/// Bytes of a write that a [`Fault::ShortWrite`] lets through.
fn short_write_len(len: usize) -> usize {
    const SECTOR: usize = SECTOR_SIZE as usize;
    let half = len / 2;
    half - half % SECTOR
}

/// The error an injected fault produces.
fn fault_error(fault: Fault) -> io::Error {
    match fault {
        Fault::Eio | Fault::ShortWrite => io::Error::from_raw_os_error(libc::EIO),
        Fault::NoSpace => io::Error::from_raw_os_error(libc::ENOSPC),
    }
}

impl Vfs for SimVfs {
    fn open(&self, name: &str, mode: OpenMode) -> io::Result<Arc<dyn Storage>> {
        let mut state = self.state.lock();
        state.check_op()?;
        check_name(name)?;
        let id = match (state.dir_now.get(name).copied(), mode) {
            (Some(_), OpenMode::CreateNew) => return Err(already_exists(name)),
            (Some(id), _) => id,
            (None, OpenMode::Existing | OpenMode::ReadOnly) => return Err(not_found(name)),
            (None, _) => {
                let id = state.new_inode();
                state.dir_now.insert(name.to_owned(), id);
                id
            }
        };
        state.inode(id)?.handles += 1;
        let file = Arc::new(SimFile {
            state: Arc::clone(&self.state),
            id,
        });
        if mode == OpenMode::ReadOnly {
            return Ok(Arc::new(super::ReadOnlyFile(file)));
        }
        Ok(file)
    }

    fn exists(&self, name: &str) -> io::Result<bool> {
        let mut state = self.state.lock();
        state.check_op()?;
        check_name(name)?;
        Ok(state.dir_now.contains_key(name))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut state = self.state.lock();
        state.check_op()?;
        check_name(name)?;
        let id = state.dir_now.remove(name).ok_or_else(|| not_found(name))?;
        state.collect(id);
        Ok(())
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut state = self.state.lock();
        state.check_op()?;
        Ok(state.dir_now.keys().cloned().collect())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        state.check_op()?;
        let now = state.dir_now.clone();
        let old = std::mem::replace(&mut state.dir_durable, now);
        for id in old.into_values() {
            state.collect(id);
        }
        Ok(())
    }

    /// The directory entry moves at once; after a crash before the next
    /// `sync_dir`, each of the two names independently holds what it held
    /// before or after (a stricter model than a journaling file system,
    /// which keeps the pair consistent).
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut state = self.state.lock();
        state.check_op()?;
        check_name(from)?;
        check_name(to)?;
        if state.dir_now.contains_key(to) {
            return Err(already_exists(to));
        }
        let id = state.dir_now.remove(from).ok_or_else(|| not_found(from))?;
        state.dir_now.insert(to.to_owned(), id);
        Ok(())
    }

    fn lock(&self, name: &str) -> io::Result<Box<dyn LockGuard>> {
        check_name(name)?;
        {
            let mut state = self.state.lock();
            if !state.dir_now.contains_key(name) {
                let id = state.new_inode();
                state.dir_now.insert(name.to_owned(), id);
            }
        }
        Ok(Box::new(NameLock::acquire(&self.locks, name, false)?))
    }

    fn lock_shared(&self, name: &str) -> io::Result<Box<dyn LockGuard>> {
        check_name(name)?;
        if !self.state.lock().dir_now.contains_key(name) {
            return Err(not_found(name));
        }
        Ok(Box::new(NameLock::acquire(&self.locks, name, true)?))
    }
}

/// An open simulated file: an inode of a shared [`SimState`].
struct SimFile {
    state: Arc<Mutex<SimState>>,
    id: InodeId,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile").field("inode", &self.id).finish()
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut state = self.state.lock();
        if let Some(inode) = state.inodes.get_mut(&self.id) {
            inode.handles = inode.handles.saturating_sub(1);
        }
        state.collect(self.id);
    }
}

impl SimFile {
    /// One counted write of `data` at `offset`, with fault injection.
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut state = self.state.lock();
        let fault = state.begin_op();
        let inode = state.inode(self.id)?;
        match fault {
            None => inode.write(offset, data),
            Some(Fault::ShortWrite) => {
                let keep = short_write_len(data.len());
                if keep > 0 {
                    inode.write(offset, &data[..keep])?;
                }
                Err(fault_error(Fault::ShortWrite))
            }
            Some(fault) => Err(fault_error(fault)),
        }
    }
}

impl Storage for SimFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut state = self.state.lock();
        state.check_op()?;
        read_image(&state.inode(self.id)?.current, offset, buf)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write(offset, data)
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.write(offset, &bufs.concat())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        state.check_op()?;
        state.inode(self.id)?.sync();
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let mut state = self.state.lock();
        state.check_op()?;
        Ok(state.inode(self.id)?.current.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.state.lock();
        state.check_op()?;
        state.inode(self.id)?.set_len(len)
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut state = self.state.lock();
        state.check_op()?;
        state.inode(self.id)?.punch_hole(offset, len);
        Ok(())
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and fixed forever, so a
/// seed replays the same crash in every future build.
struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability 1/2.
    fn coin(&mut self) -> bool {
        self.next_u64() >> 63 == 1
    }

    /// Uniform in `0..n` (`n` small, so the modulo bias is negligible).
    fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conformance() {
        crate::storage::conformance::run_all(&|| Box::new(SimVfs::new()));
    }

    const SEEDS: u64 = 300;

    fn create(vfs: &SimVfs, name: &str) -> Arc<dyn Storage> {
        vfs.open(name, OpenMode::CreateNew).unwrap()
    }

    /// A file `name` holding `bytes`, synced and with its entry synced.
    fn durable_file(vfs: &SimVfs, name: &str, bytes: &[u8]) -> Arc<dyn Storage> {
        let f = create(vfs, name);
        f.write_at(0, bytes).unwrap();
        f.sync_data().unwrap();
        vfs.sync_dir().unwrap();
        f
    }

    fn raw_os_error(r: io::Result<impl fmt::Debug>) -> Option<i32> {
        r.unwrap_err().raw_os_error()
    }

    /// An unsynced hole is kept, dropped or torn per sector by a crash
    /// (each sector either its old bytes or zeros, the length unchanged;
    /// over the seeds every outcome occurs); a synced one is durable.
    #[test]
    fn a_crash_keeps_drops_or_tears_an_unsynced_hole_per_sector() {
        const SECTOR: usize = SECTOR_SIZE as usize;
        let old = vec![0x5au8; 8 * SECTOR];
        let (mut kept, mut dropped, mut torn) = (false, false, false);
        for seed in 0..SEEDS {
            let vfs = SimVfs::new();
            let f = durable_file(&vfs, "f", &old);
            f.punch_hole(SECTOR as u64, 6 * SECTOR as u64).unwrap();
            f.punch_hole(20 * SECTOR as u64, 4 * SECTOR as u64).unwrap();
            let image = vfs.crash(seed).file_bytes("f").unwrap();
            assert_eq!(
                image.len(),
                old.len(),
                "seed {seed}: a hole changed the length"
            );
            let sectors: Vec<bool> = (image.chunks(SECTOR))
                .map(|c| {
                    let zero = c.iter().all(|&b| b == 0);
                    assert!(zero || c == &old[..SECTOR], "seed {seed}: a mixed sector");
                    zero
                })
                .collect();
            assert!(!sectors[0] && !sectors[7], "seed {seed}: outside the hole");
            let holes = sectors[1..7].iter().filter(|&&z| z).count();
            kept |= holes == 6;
            dropped |= holes == 0;
            torn |= holes > 0 && holes < 6;
        }
        assert!(kept && dropped && torn, "{kept} {dropped} {torn}");
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "f", &old);
        f.punch_hole(0, 8 * SECTOR as u64).unwrap();
        f.sync_data().unwrap();
        let image = vfs.crash(1).file_bytes("f").unwrap();
        assert!(image.len() == old.len() && image.iter().all(|&b| b == 0));
    }

    #[test]
    fn matches_mem_file_under_random_operations() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let vfs = SimVfs::new();
        let sim = create(&vfs, "a");
        let mem = crate::storage::mem::MemFile::default();
        for _ in 0..2000 {
            match rng.gen_range(0..10) {
                0 => {
                    let len = rng.gen_range(0..6000);
                    sim.set_len(len).unwrap();
                    mem.set_len(len).unwrap();
                }
                1 => sim.sync_data().unwrap(),
                _ => {
                    let offset = rng.gen_range(0..5000);
                    let data = vec![rng.gen::<u8>(); rng.gen_range(0..1500)];
                    sim.write_at(offset, &data).unwrap();
                    mem.write_at(offset, &data).unwrap();
                }
            }
            assert_eq!(sim.len().unwrap(), mem.len().unwrap());
        }
        let len = mem.len().unwrap() as usize;
        let mut expected = vec![0u8; len];
        mem.read_at(0, &mut expected).unwrap();
        assert_eq!(vfs.file_bytes("a").unwrap(), expected);
        let after = vfs.crash_with(0, CrashPolicy::KeepAll);
        assert_eq!(after.file_bytes("a").unwrap(), expected);
        sim.sync_data().unwrap();
        vfs.sync_dir().unwrap();
        assert_eq!(vfs.durable_bytes("a").unwrap(), expected);
    }

    #[test]
    fn basic_round_trip_and_eof() {
        let vfs = SimVfs::new();
        let f = create(&vfs, "a");
        f.write_at(4, b"data").unwrap();
        let mut buf = [9u8; 8];
        f.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"\0\0\0\0data");
        assert_eq!(f.len().unwrap(), 8);
        let err = f.read_at(5, &mut buf[..4]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        f.set_len(2).unwrap();
        assert_eq!(vfs.file_bytes("a").unwrap(), vec![0, 0]);
        assert_eq!(
            vfs.open("a", OpenMode::CreateNew).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(
            vfs.open("zz", OpenMode::Existing).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn vectored_write_is_one_operation() {
        let vfs = SimVfs::new();
        let f = create(&vfs, "a");
        let before = vfs.op_count();
        f.write_vectored_at(1, &[b"ab", b"", b"cde"]).unwrap();
        assert_eq!(vfs.op_count(), before + 1);
        assert_eq!(vfs.file_bytes("a").unwrap(), b"\0abcde");
    }

    #[test]
    fn sync_makes_durable_equal_current() {
        let vfs = SimVfs::new();
        let f = create(&vfs, "a");
        f.write_at(0, &[1; 3000]).unwrap();
        f.set_len(1000).unwrap();
        f.write_at(1500, &[2; 10]).unwrap();
        f.write_at(10, &[3; 600]).unwrap();
        assert_eq!(vfs.durable_bytes("a"), None, "entry not synced yet");
        f.sync_data().unwrap();
        vfs.sync_dir().unwrap();
        assert_eq!(vfs.durable_bytes("a"), vfs.file_bytes("a"));
    }

    #[test]
    fn synced_data_always_survives_crash() {
        let vfs = SimVfs::new();
        let old: Vec<u8> = (0..4096u32).map(|i| (i % 253) as u8).collect();
        let f = durable_file(&vfs, "data", &old);
        let g = durable_file(&vfs, "other", b"untouched");
        f.write_at(4096, &[7; 5000]).unwrap(); // unsynced, after the synced part
        create(&vfs, "new").write_at(0, b"x").unwrap(); // unsynced creation
        drop(g);
        for seed in 0..SEEDS {
            let after = vfs.crash(seed);
            let bytes = after.file_bytes("data").unwrap();
            assert_eq!(&bytes[..4096], &old[..], "seed {seed}");
            assert_eq!(after.file_bytes("other").unwrap(), b"untouched");
        }
    }

    #[test]
    fn keep_all_keeps_everything() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", &[1; 2000]);
        f.write_at(100, &[2; 3000]).unwrap();
        f.set_len(2500).unwrap();
        durable_file(&vfs, "gone", b"x");
        vfs.remove("gone").unwrap();
        create(&vfs, "new").write_at(0, b"fresh").unwrap();
        let after = vfs.crash_with(42, CrashPolicy::KeepAll);
        assert_eq!(after.file_names(), vfs.file_names());
        for name in vfs.file_names() {
            assert_eq!(after.file_bytes(&name), vfs.file_bytes(&name), "{name}");
        }
        assert_eq!(after.file_names(), vec!["a", "new"]);
    }

    #[test]
    fn drop_all_keeps_only_synced() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", &[1; 2000]);
        f.write_at(100, &[2; 3000]).unwrap();
        durable_file(&vfs, "removed", b"back");
        vfs.remove("removed").unwrap();
        let n = create(&vfs, "new");
        n.write_at(0, b"fresh").unwrap();
        n.sync_data().unwrap(); // data synced but the entry is not
        let after = vfs.crash_with(42, CrashPolicy::DropAll);
        assert_eq!(after.file_names(), vec!["a", "removed"]);
        assert_eq!(after.file_bytes("a").unwrap(), vec![1; 2000]);
        assert_eq!(after.file_bytes("removed").unwrap(), b"back");
        assert_eq!(after.file_bytes("a"), vfs.durable_bytes("a"));
    }

    #[test]
    fn process_crash_keeps_what_reads_see_but_makes_nothing_durable() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", &[1; 2000]);
        f.write_at(100, &[2; 3000]).unwrap();
        durable_file(&vfs, "gone", b"x");
        vfs.remove("gone").unwrap();
        create(&vfs, "new").write_at(0, b"fresh").unwrap();
        let _lock = vfs.lock("a").unwrap();
        let after = vfs.process_crash();
        // Reads see everything written; the dead process's lock is gone.
        assert_eq!(after.file_names(), vec!["a", "new"]);
        assert_eq!(after.file_bytes("a"), vfs.file_bytes("a"));
        assert_eq!(after.file_bytes("new").unwrap(), b"fresh");
        drop(after.lock("a").unwrap());
        // ... but nothing more is durable: a power loss now drops it all.
        let cut = after.crash_with(1, CrashPolicy::DropAll);
        assert_eq!(cut.file_names(), vec!["a", "gone"]);
        assert_eq!(cut.file_bytes("a").unwrap(), vec![1; 2000]);
        // A sync in the new process makes the old writes durable.
        let g = after.open("a", OpenMode::Existing).unwrap();
        g.sync_data().unwrap();
        after.sync_dir().unwrap();
        let cut = after.crash_with(2, CrashPolicy::DropAll);
        assert_eq!(cut.file_bytes("a"), vfs.file_bytes("a"));
        assert_eq!(cut.file_names(), vec!["a", "new"]);
        // The old handle still works on the old state only.
        f.write_at(0, &[9; 10]).unwrap();
        assert_eq!(after.file_bytes("a").unwrap()[0], 1);
    }

    /// Classifies each 512-byte sector of `image` as old (`0xAA`), new
    /// (`0xBB`) or mixed.
    fn sector_states(image: &[u8]) -> Vec<Option<u8>> {
        image
            .chunks(SECTOR_SIZE as usize)
            .map(|s| s.iter().all(|&b| b == s[0]).then_some(s[0]))
            .collect()
    }

    #[test]
    fn unsynced_write_is_kept_dropped_or_torn() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", &[0xAA; 4096]);
        f.write_at(0, &[0xBB; 4096]).unwrap();
        let (mut kept, mut dropped, mut torn) = (0, 0, 0);
        for seed in 0..SEEDS {
            let image = vfs.crash(seed).file_bytes("a").unwrap();
            assert_eq!(image.len(), 4096);
            let sectors = sector_states(&image);
            assert!(
                sectors.iter().all(|s| s.is_some()),
                "seed {seed}: torn sector"
            );
            if sectors.iter().all(|&s| s == Some(0xBB)) {
                kept += 1;
            } else if sectors.iter().all(|&s| s == Some(0xAA)) {
                dropped += 1;
            } else {
                torn += 1;
            }
        }
        assert!(
            kept > 0 && dropped > 0 && torn > 0,
            "{kept} {dropped} {torn}"
        );
    }

    #[test]
    fn tear_boundaries_are_absolute_sector_multiples() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", &[0x11; 4096]);
        // Unaligned write covering bytes 300..3000.
        f.write_at(300, &[0x22; 2700]).unwrap();
        let mut saw_mix = false;
        for seed in 0..SEEDS {
            let image = vfs.crash(seed).file_bytes("a").unwrap();
            assert_eq!(image.len(), 4096);
            assert!(image[..300].iter().all(|&b| b == 0x11));
            assert!(image[3000..].iter().all(|&b| b == 0x11));
            // Within the written range, each sector's part is all old or all new.
            let mut states = BTreeSet::new();
            for sector in 0..6usize {
                let lo = (sector * 512).max(300);
                let hi = ((sector + 1) * 512).min(3000);
                let part = &image[lo..hi];
                assert!(
                    part.iter().all(|&b| b == part[0]),
                    "seed {seed} sector {sector}"
                );
                states.insert(part[0]);
            }
            saw_mix |= states.len() == 2;
        }
        assert!(saw_mix);
    }

    #[test]
    fn sector_pieces_split_at_absolute_boundaries() {
        let data = [0u8; 1500];
        let pieces: Vec<(usize, usize)> = sector_pieces(300, &data)
            .into_iter()
            .map(|(o, p)| (o, p.len()))
            .collect();
        assert_eq!(
            pieces,
            vec![(300, 212), (512, 512), (1024, 512), (1536, 264)]
        );
        assert_eq!(sector_pieces(1024, &[0; 512]).len(), 1);
        assert!(sector_pieces(7, &[]).is_empty());
    }

    #[test]
    fn torn_extending_write_zero_fills_holes() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", b"");
        f.write_at(0, &[0xBB; 2048]).unwrap();
        let mut lens = BTreeSet::new();
        for seed in 0..SEEDS {
            let image = vfs.crash(seed).file_bytes("a").unwrap();
            assert_eq!(image.len() % 512, 0);
            for s in sector_states(&image) {
                assert!(s == Some(0) || s == Some(0xBB), "seed {seed}");
            }
            lens.insert(image.len());
        }
        assert!(lens.contains(&0) && lens.contains(&2048) && lens.len() > 2);
    }

    #[test]
    fn unsynced_set_len_is_kept_or_dropped() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", &[5; 1000]);
        f.set_len(10).unwrap();
        let lens: BTreeSet<usize> = (0..SEEDS)
            .map(|seed| vfs.crash(seed).file_bytes("a").unwrap().len())
            .collect();
        assert_eq!(lens, BTreeSet::from([10, 1000]));
    }

    #[test]
    fn unsynced_creation_may_vanish_synced_never() {
        let vfs = SimVfs::new();
        let f = create(&vfs, "new");
        f.write_at(0, b"abc").unwrap();
        f.sync_data().unwrap();
        let outcomes: BTreeSet<Option<Vec<u8>>> = (0..SEEDS)
            .map(|seed| vfs.crash(seed).file_bytes("new"))
            .collect();
        assert_eq!(outcomes, BTreeSet::from([None, Some(b"abc".to_vec())]));

        vfs.sync_dir().unwrap();
        for seed in 0..SEEDS {
            assert_eq!(vfs.crash(seed).file_bytes("new").unwrap(), b"abc");
        }
    }

    #[test]
    fn unsynced_removal_may_be_undone() {
        let vfs = SimVfs::new();
        durable_file(&vfs, "old", b"durable");
        vfs.remove("old").unwrap();
        let outcomes: BTreeSet<Option<Vec<u8>>> = (0..SEEDS)
            .map(|seed| vfs.crash(seed).file_bytes("old"))
            .collect();
        assert_eq!(outcomes, BTreeSet::from([None, Some(b"durable".to_vec())]));
        vfs.sync_dir().unwrap();
        for seed in 0..SEEDS {
            assert_eq!(vfs.crash(seed).file_bytes("old"), None);
        }
    }

    #[test]
    fn removed_and_recreated_name_is_old_or_new() {
        let vfs = SimVfs::new();
        durable_file(&vfs, "f", b"old");
        vfs.remove("f").unwrap();
        let f = create(&vfs, "f");
        f.write_at(0, b"new").unwrap();
        f.sync_data().unwrap();
        let outcomes: BTreeSet<Option<Vec<u8>>> = (0..SEEDS)
            .map(|seed| vfs.crash(seed).file_bytes("f"))
            .collect();
        assert_eq!(
            outcomes,
            BTreeSet::from([Some(b"old".to_vec()), Some(b"new".to_vec())])
        );
    }

    #[test]
    fn same_seed_same_image() {
        let build = || {
            let vfs = SimVfs::new();
            let f = durable_file(&vfs, "a", &[1; 8192]);
            for i in 0..20u64 {
                f.write_at(i * 300, &[i as u8 + 2; 700]).unwrap();
            }
            create(&vfs, "b").write_at(0, &[9; 2000]).unwrap();
            vfs
        };
        let (x, y) = (build(), build());
        let image = |v: &SimVfs, seed| {
            let after = v.crash(seed);
            (after.file_bytes("a"), after.file_bytes("b"))
        };
        let mut distinct = BTreeSet::new();
        for seed in 0..50 {
            let a = image(&x, seed);
            assert_eq!(a, image(&x, seed), "seed {seed}");
            assert_eq!(a, image(&y, seed), "seed {seed}");
            distinct.insert(a);
        }
        assert!(distinct.len() > 10);
    }

    #[test]
    fn crash_result_is_independent_and_fresh() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", b"abc");
        let _lock = vfs.lock("lock").unwrap();
        vfs.fail_from(1000, Fault::Eio);
        let after = vfs.crash(1);
        assert_eq!(after.op_count(), 0);
        // No locks carried over; "lock" was never dir-synced, so it may be gone.
        let _l = after.lock("lock").unwrap();
        // Writes on either side do not leak to the other.
        after
            .open("a", OpenMode::Existing)
            .unwrap()
            .write_at(0, b"XYZ")
            .unwrap();
        f.write_at(0, b"old").unwrap();
        assert_eq!(vfs.file_bytes("a").unwrap(), b"old");
        assert_eq!(after.file_bytes("a").unwrap(), b"XYZ");
        // The new one has everything durable already.
        assert_eq!(after.durable_bytes("a").unwrap(), b"abc");
        assert_eq!(
            after.crash_with(0, CrashPolicy::DropAll).file_names(),
            after.file_names()
        );
    }

    #[test]
    fn fail_op_fails_exactly_the_nth_operation() {
        let vfs = SimVfs::new();
        let f = create(&vfs, "a");
        f.write_at(0, b"abcd").unwrap();
        let start = vfs.op_count();
        vfs.fail_op(3, Fault::Eio);
        let mut buf = [0u8; 4];
        f.read_at(0, &mut buf).unwrap(); // 1
        f.len().unwrap(); // 2
        assert_eq!(raw_os_error(f.sync_data()), Some(libc::EIO)); // 3
        f.sync_data().unwrap(); // 4
        vfs.list().unwrap(); // 5
        assert_eq!(vfs.op_count(), start + 5);
    }

    #[test]
    fn fail_op_counts_directory_operations() {
        let vfs = SimVfs::new();
        vfs.fail_op(1, Fault::NoSpace);
        assert_eq!(
            raw_os_error(vfs.open("a", OpenMode::CreateNew)),
            Some(libc::ENOSPC)
        );
        assert!(vfs.file_names().is_empty(), "failed open creates nothing");
        vfs.fail_op(2, Fault::Eio);
        create(&vfs, "a");
        assert!(vfs.sync_dir().is_err());
        assert_eq!(
            vfs.durable_bytes("a"),
            None,
            "failed sync_dir is not durable"
        );
        for n in 1..=4 {
            vfs.fail_op(n, Fault::Eio);
        }
        assert!(vfs.exists("a").is_err());
        assert!(vfs.list().is_err());
        assert!(vfs.remove("a").is_err());
        assert!(vfs.sync_dir().is_err());
        assert!(vfs.exists("a").unwrap());
    }

    #[test]
    fn fail_from_keeps_failing_until_cleared() {
        let vfs = SimVfs::new();
        let f = create(&vfs, "a");
        vfs.fail_from(2, Fault::Eio);
        f.write_at(0, b"ok").unwrap();
        for _ in 0..10 {
            assert_eq!(raw_os_error(f.write_at(0, b"no")), Some(libc::EIO));
            assert!(f.len().is_err());
            assert!(vfs.list().is_err());
        }
        vfs.clear_faults();
        assert_eq!(vfs.file_bytes("a").unwrap(), b"ok");
        f.write_at(0, b"go").unwrap();
        assert_eq!(vfs.file_bytes("a").unwrap(), b"go");
    }

    #[test]
    fn failed_sync_makes_nothing_durable() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", &[1; 1024]);
        f.write_at(0, &[2; 1024]).unwrap();
        vfs.fail_op(1, Fault::Eio);
        assert!(f.sync_data().is_err());
        assert_eq!(vfs.durable_bytes("a").unwrap(), vec![1; 1024]);
        let after = vfs.crash_with(0, CrashPolicy::DropAll);
        assert_eq!(after.file_bytes("a").unwrap(), vec![1; 1024]);
        f.sync_data().unwrap();
        assert_eq!(vfs.durable_bytes("a").unwrap(), vec![2; 1024]);
    }

    #[test]
    fn short_write_leaves_a_partial_unsynced_write() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", &[1; 4096]);
        vfs.fail_op(1, Fault::ShortWrite);
        assert_eq!(raw_os_error(f.write_at(0, &[2; 3000])), Some(libc::EIO));
        // Half of 3000 is 1500, rounded down to 1024.
        let image = vfs.file_bytes("a").unwrap();
        assert!(image[..1024].iter().all(|&b| b == 2));
        assert!(image[1024..].iter().all(|&b| b == 1));
        assert_eq!(vfs.durable_bytes("a").unwrap(), vec![1; 4096]);
        // Under 1024 bytes, nothing is written.
        vfs.fail_op(1, Fault::ShortWrite);
        assert!(f.write_vectored_at(2000, &[&[3; 500], &[3; 500]]).is_err());
        assert_eq!(vfs.file_bytes("a").unwrap(), image);
        // On a non-write, ShortWrite is plain EIO.
        vfs.fail_op(1, Fault::ShortWrite);
        assert_eq!(raw_os_error(f.len()), Some(libc::EIO));
    }

    #[test]
    fn short_write_len_rounds_to_sectors() {
        assert_eq!(short_write_len(0), 0);
        assert_eq!(short_write_len(1023), 0);
        assert_eq!(short_write_len(1024), 512);
        assert_eq!(short_write_len(3000), 1024);
        assert_eq!(short_write_len(8192), 4096);
    }

    #[test]
    fn nospace_write_changes_nothing() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", b"abc");
        vfs.fail_op(1, Fault::NoSpace);
        assert_eq!(raw_os_error(f.write_at(0, &[0; 5000])), Some(libc::ENOSPC));
        assert_eq!(vfs.file_bytes("a").unwrap(), b"abc");
    }

    #[test]
    fn handle_outlives_removal() {
        let vfs = SimVfs::new();
        let f = durable_file(&vfs, "a", b"abc");
        vfs.remove("a").unwrap();
        vfs.sync_dir().unwrap();
        f.write_at(3, b"d").unwrap();
        assert_eq!(f.len().unwrap(), 4);
        assert_eq!(vfs.file_bytes("a"), None);
        drop(f);
        assert!(vfs.state.lock().inodes.is_empty(), "inode freed");
    }

    #[test]
    fn set_file_bytes_is_durable() {
        let vfs = SimVfs::new();
        let f = create(&vfs, "a");
        f.write_at(0, b"unsynced").unwrap();
        vfs.set_file_bytes("a", b"corrupt".to_vec());
        vfs.set_file_bytes("b", b"new".to_vec());
        let mut buf = [0u8; 7];
        f.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"corrupt");
        for seed in 0..20 {
            let after = vfs.crash(seed);
            assert_eq!(after.file_bytes("a").unwrap(), b"corrupt");
            assert_eq!(after.file_bytes("b").unwrap(), b"new");
        }
    }

    #[test]
    fn locks_are_exclusive_and_shared_by_clones() {
        let vfs = SimVfs::new();
        let g = vfs.lock("l").unwrap();
        assert_eq!(
            vfs.clone().lock("l").unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        drop(g);
        let _g = vfs.clone().lock("l").unwrap();
        assert!(vfs.file_names().contains(&"l".to_owned()));
    }

    #[test]
    fn bad_input_errors_instead_of_panicking() {
        let vfs = SimVfs::new();
        assert_eq!(
            vfs.open("a/b", OpenMode::OpenOrCreate).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let f = create(&vfs, "a");
        assert!(f.write_at(u64::MAX, b"x").is_err());
        assert!(f.set_len(u64::MAX).is_err());
        let mut buf = [0u8; 1];
        assert!(f.read_at(u64::MAX, &mut buf).is_err());
        // Nothing bogus was recorded: a crash still works.
        assert_eq!(
            vfs.crash(3).file_bytes("a").map(|b| b.len()).unwrap_or(0),
            0
        );
    }
}
