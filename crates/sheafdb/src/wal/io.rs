//! The I/O side of the writer: executes pending steps on segment files.
//!
//! Owns: the open segment file handles, creating and preallocating segment
//! files (each to the size its first use's header names), deleting files
//! the writer gives back, writing headers and frame runs, and syncing
//! every file written since the last sync. Exactly one I/O leader uses it at a time (it is moved
//! out of the WAL state for the duration of a round, so no lock is held
//! during I/O).
//!
//! Invariant: after `sync_dirty` returns `Ok`, every byte written through
//! this value before the call is durable; a created file's directory entry
//! is durable before any record is written into it.
//!
//! Must not know: LSN assignment, group commit, payloads.

use std::io;
use std::sync::Arc;

use super::anchor::{Anchor, AnchorKind, Announcer};
use super::layout::{FrameRun, Step};
use super::segment::{segment_name, SegmentHeader, UseLink, HEADER_BLOCK_BYTES, LINK_OFFSET};
use crate::storage::{OpenMode, Storage, Vfs};
use crate::types::Lsn;

/// Size of each zero-filling write when preallocating a segment.
const PREALLOCATE_CHUNK_BYTES: u64 = 1 << 20;

/// Segment files and what was written to them since the last sync.
#[derive(Debug)]
pub(crate) struct SegmentIo {
    vfs: Arc<dyn Vfs>,
    db_name: String,
    files: Vec<Option<Arc<dyn Storage>>>,
    /// Size each slot's file was written for (its current use's header).
    sizes: Vec<u64>,
    /// Slots written since their last `sync_data`, in first-write order.
    dirty: Vec<usize>,
    /// A use's header was written since the last `sync_dirty` (rule O11).
    header_unsynced: bool,
    /// Writes the WAL anchor into the data file (rule O16); `None` for a
    /// log without a data file (the WAL's own tests) or a read-only one.
    announcer: Option<Announcer>,
    /// The durable `Begun` anchor; `None` once an `Ended` anchor stands
    /// (or before the first).
    anchored: Option<Anchor>,
}

/// What one call to [`SegmentIo::write_steps`] did, for statistics.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WriteReport {
    pub bytes: u64,
    pub writes: u64,
}

impl SegmentIo {
    /// I/O over the already open segment files `files` (by slot).
    pub fn new(
        vfs: Arc<dyn Vfs>,
        db_name: &str,
        files: Vec<Option<Arc<dyn Storage>>>,
    ) -> SegmentIo {
        SegmentIo {
            vfs,
            db_name: db_name.to_owned(),
            sizes: vec![0; files.len()],
            files,
            dirty: Vec::new(),
            header_unsynced: false,
            announcer: None,
            anchored: None,
        }
    }

    /// From now on, anchors go through `announcer` (rule O16).
    pub fn set_announcer(&mut self, announcer: Announcer) {
        self.announcer = Some(announcer);
    }

    /// Writes `anchor` (durably) if there is an announcer, and remembers
    /// the use a `Begun` anchor names.
    pub fn announce(&mut self, anchor: Anchor) -> io::Result<()> {
        let Some(announce) = &self.announcer else {
            return Ok(());
        };
        debug_assert!(
            !self.header_unsynced || anchor.kind == AnchorKind::Ended,
            "O16: a use anchored before its header is durable"
        );
        (announce.0)(&anchor.encode())?;
        self.anchored = (anchor.kind == AnchorKind::Begun).then_some(anchor);
        Ok(())
    }

    /// Rule O16: before the file of the use `(seq, salt)`, which ended at
    /// `end`, is overwritten or deleted, a `Begun` anchor naming it is
    /// replaced by an `Ended` one (the use lies below the release point,
    /// so below the replay start of a durable checkpoint): an open after
    /// a crash then does not miss it.
    pub fn unanchor(&mut self, (seq, salt, end): (u64, u64, Lsn)) -> io::Result<()> {
        let Some(begun) = self.anchored.filter(|a| (a.seq, a.salt) == (seq, salt)) else {
            return Ok(());
        };
        debug_assert!(self.announcer.is_some(), "anchored without an announcer");
        self.announce(Anchor {
            kind: AnchorKind::Ended,
            lsn: end,
            ..begun
        })
    }

    /// Deletes slot `slot`'s file (the writer gave it back: it holds no
    /// use replay could need, so a deletion a crash undoes is harmless).
    pub fn remove(&mut self, slot: usize) -> io::Result<()> {
        debug_assert!(
            !self.dirty.contains(&slot),
            "a file with unsynced writes is deleted"
        );
        if let Some(f) = self.files.get_mut(slot) {
            *f = None;
        }
        match self.vfs.remove(&segment_name(&self.db_name, slot)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Executes `steps` in order (no sync).
    pub fn write_steps(&mut self, steps: &[Step]) -> io::Result<WriteReport> {
        let mut report = WriteReport::default();
        for step in steps {
            match step {
                Step::Begin {
                    slot,
                    header,
                    preallocate,
                    replaces,
                } => {
                    if let Some(old) = replaces {
                        self.unanchor(*old)?;
                    }
                    self.begin_use(*slot, header, *preallocate)?;
                    self.anchor_use(header)?;
                }
                Step::Link { slot, link } => self.link_use(*slot, link)?,
                Step::Frames(run) => {
                    self.write_run(run)?;
                    report.bytes += run.len_bytes();
                    report.writes += 1;
                }
            }
        }
        Ok(report)
    }

    /// True if some written bytes are not yet synced.
    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// `sync_data` on every file written since its last sync.
    pub fn sync_dirty(&mut self) -> io::Result<()> {
        for &slot in &self.dirty {
            self.file(slot)?.sync_data()?;
        }
        self.dirty.clear();
        self.header_unsynced = false;
        Ok(())
    }

    fn file(&self, slot: usize) -> io::Result<&Arc<dyn Storage>> {
        self.files
            .get(slot)
            .and_then(Option::as_ref)
            .ok_or_else(|| io::Error::other(format!("WAL segment slot {slot} is not open")))
    }

    /// Opens slot `slot`'s file in `mode` if this value has no handle on
    /// it: a file to preallocate, or a spare (`make_spare` keeps no
    /// handle; every other file is opened at open). Returns whether it
    /// opened it now.
    fn ensure_open(&mut self, slot: usize, mode: OpenMode) -> io::Result<bool> {
        if self.files.get(slot).is_some_and(Option::is_some) {
            return Ok(false);
        }
        let file = (self.vfs).open(&segment_name(&self.db_name, slot), mode)?;
        if self.files.len() <= slot {
            self.files.resize(slot + 1, None);
        }
        self.files[slot] = Some(file);
        Ok(true)
    }

    /// Rule O11: a use's header is durable before a later use's header is
    /// written. Syncs first if a header written since the last sync is
    /// not yet durable. Without it, power loss could keep a later use's
    /// header and lose an earlier one's in a file with no older header
    /// to fall back on (a spare, or a header-less file found at open),
    /// and open would find a log starting past its replay start (review
    /// finding; `wal::tests::a_crash_after_a_spare_is_taken_keeps_the_log_openable`).
    fn headers_in_order(&mut self) -> io::Result<()> {
        if self.header_unsynced {
            self.sync_dirty()?;
        }
        debug_assert!(!self.header_unsynced, "a header is still unsynced");
        Ok(())
    }

    fn mark_dirty(&mut self, slot: usize) {
        if !self.dirty.contains(&slot) {
            self.dirty.push(slot);
        }
        debug_assert!(
            self.dirty.contains(&slot),
            "a written slot is not marked dirty"
        );
    }

    /// Writes the header of a new use; creates and zero-fills the file
    /// first if asked (then syncs it and the directory).
    fn begin_use(
        &mut self,
        slot: usize,
        header: &SegmentHeader,
        preallocate: bool,
    ) -> io::Result<()> {
        debug_assert!(header.seq >= 1, "a use without a sequence number");
        debug_assert!(header.salt != 0, "a use without a salt");
        let block = header.encode();
        if self.sizes.len() <= slot {
            self.sizes.resize(slot + 1, 0);
        }
        self.sizes[slot] = header.segment_bytes;
        if preallocate {
            // Its header is synced at once: earlier ones first (O11).
            self.headers_in_order()?;
            return self.preallocate(slot, &block, header.segment_bytes);
        }
        self.ensure_open(slot, OpenMode::Existing)?;
        self.headers_in_order()?;
        self.file(slot)?.write_at(0, &block)?;
        self.mark_dirty(slot);
        self.header_unsynced = true;
        Ok(())
    }

    /// Rule O16: the new use's header is durable, then the anchor names
    /// it (durably), before any frame of the use is written: a crash never
    /// leaves an anchor naming a use whose header is not on disk, and
    /// every frame of a use has a durable anchor (or a successor's)
    /// naming it or a later use.
    fn anchor_use(&mut self, header: &SegmentHeader) -> io::Result<()> {
        if self.announcer.is_none() {
            return Ok(());
        }
        self.headers_in_order()?;
        debug_assert!(!self.header_unsynced, "O16: the header is not durable");
        self.announce(Anchor::begun(header))
    }

    /// Rule O15: writes `link` into slot `slot`'s header block (the use
    /// the one just begun continues) and makes it durable, after the new
    /// use's header and before any frame of the new use. A durable link
    /// whose use is missing at open is then damage, never a crash: the
    /// use it names had a durable header first. And every frame of the
    /// new use, once written, has a durable link behind it.
    fn link_use(&mut self, slot: usize, link: &UseLink) -> io::Result<()> {
        self.headers_in_order()?;
        self.ensure_open(slot, OpenMode::Existing)?;
        self.file(slot)?.write_at(LINK_OFFSET, &link.encode())?;
        self.mark_dirty(slot);
        self.sync_dirty()?;
        debug_assert!(self.dirty.is_empty(), "O15: a link is not durable");
        Ok(())
    }

    /// Creates (if missing) slot `slot`'s file, fills it with zeros up to
    /// exactly `segment_bytes`, makes that durable, then writes
    /// `header_block` and makes it durable.
    ///
    /// The header goes in last: a fill that fails (a full disk, an I/O
    /// error) leaves a file without a header, which the next open takes
    /// for free space. Written first, it left a use in a file shorter than
    /// its header says, with no frame: the open after it kept the use, a
    /// later checkpoint moved the replay start past its start, and every
    /// open after a clean close refused the log as cut short (rule O14; a
    /// session-34 probe).
    fn preallocate(
        &mut self,
        slot: usize,
        header_block: &[u8],
        segment_bytes: u64,
    ) -> io::Result<()> {
        let created = self.ensure_open(slot, OpenMode::OpenOrCreate)?;
        let file = Arc::clone(self.file(slot)?);
        zero_fill(&*file, 0, segment_bytes)?;
        file.sync_data()?;
        if created {
            self.vfs.sync_dir()?;
        }
        file.write_at(0, header_block)?;
        file.sync_data()?;
        Ok(())
    }

    fn write_run(&mut self, run: &FrameRun) -> io::Result<()> {
        debug_assert!(
            run.offset + run.len_bytes() <= self.sizes.get(run.slot).copied().unwrap_or(0),
            "frames written past their segment's end"
        );
        debug_assert!(
            run.offset >= HEADER_BLOCK_BYTES,
            "frames written over a header block"
        );
        debug_assert!(!run.bufs.is_empty(), "an empty frame run was written");
        let file = self.file(run.slot)?;
        // O14: frames go only into a file already at its use's full length.
        debug_assert!(
            file.len().map_or(true, |len| len >= self.sizes[run.slot]),
            "frames written into a segment file shorter than its use"
        );
        let bufs: Vec<&[u8]> = run.bufs.iter().map(Vec::as_slice).collect();
        file.write_vectored_at(run.offset, &bufs)?;
        self.mark_dirty(run.slot);
        Ok(())
    }
}

/// Makes slot `slot`'s file of `db_name` a spare segment: created (or
/// reused, if a file of no use has the name), `segment_bytes` of zeros
/// (no header: open takes it for a free file of that size), synced, and
/// its directory entry synced. Keeps no handle on it.
pub(crate) fn make_spare(
    vfs: &dyn Vfs,
    db_name: &str,
    slot: usize,
    segment_bytes: u64,
) -> io::Result<()> {
    debug_assert!(
        super::segment::is_valid_segment_bytes(segment_bytes),
        "a spare of an invalid size"
    );
    let file = vfs.open(&segment_name(db_name, slot), OpenMode::OpenOrCreate)?;
    zero_fill(&*file, 0, segment_bytes)?;
    file.sync_data()?;
    vfs.sync_dir()
}

/// Writes zeros over `from .. to` of `file` and makes it exactly `to`
/// bytes long.
fn zero_fill(file: &dyn Storage, from: u64, to: u64) -> io::Result<()> {
    let zeros = vec![0u8; PREALLOCATE_CHUNK_BYTES as usize];
    let mut pos = from;
    while pos < to {
        let n = (to - pos).min(PREALLOCATE_CHUNK_BYTES);
        file.write_at(pos, &zeros[..n as usize])?;
        pos += n;
    }
    if file.len()? != to {
        file.set_len(to)?;
    }
    Ok(())
}
