//! The merged view: one double-ended, ordered walk over several layers.
//!
//! Layers are given newest first: a write transaction's own writes, then
//! the buffers from newest to oldest, then the tree. For each key the first
//! layer that knows it decides: a put is yielded, a tombstone hides the key
//! in every older layer.
//!
//! The walk keeps a [`Window`] of keys not yet yielded from either end.
//! Each step asks every layer for its first key inside the window (from
//! the chosen end), takes the smallest (or largest), and shrinks the window
//! past it. Stateless layers (buffers, write sets) seek afresh each step,
//! so they may change between steps (a concurrent commit adds entries a
//! snapshot does not see; a write transaction adds its own); the tree layer
//! keeps its cursor, since a tree never changes under a walk.
//!
//! Must not know: what the layers are made of beyond [`Layer`].

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::ops::Bound;

use super::mem::MemBuffer;
use super::write_set::TableWrites;
use super::{above, below, Held, Slot};
use crate::btree::store::PageRead;
use crate::btree::{Cursor, TreeRoot};
use crate::error::Result;
use crate::types::{TableId, Version};

/// Keys not yet yielded: the range still open between the two ends.
#[derive(Debug, Clone)]
pub struct Window {
    lo: Bound<Held>,
    hi: Bound<Held>,
}

fn bound_ref(b: &Bound<Held>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl Window {
    /// The window `(lo, hi)`.
    pub fn new(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Window {
        let own = |b: Bound<&[u8]>| match b {
            Bound::Included(k) => Bound::Included(Held::Shared(k.into())),
            Bound::Excluded(k) => Bound::Excluded(Held::Shared(k.into())),
            Bound::Unbounded => Bound::Unbounded,
        };
        Window {
            lo: own(lo),
            hi: own(hi),
        }
    }

    /// The lower bound.
    pub fn lo(&self) -> Bound<&[u8]> {
        bound_ref(&self.lo)
    }

    /// The upper bound.
    pub fn hi(&self) -> Bound<&[u8]> {
        bound_ref(&self.hi)
    }

    /// True if `key` lies inside the window.
    pub fn contains(&self, key: &[u8]) -> bool {
        !below(key, self.lo()) && !above(key, self.hi())
    }

    /// Closes the window past `key`, just yielded from the front (`back ==
    /// false`) or the back.
    fn consume(&mut self, key: Held, back: bool) {
        debug_assert!(self.contains(&key), "yielded a key outside the window");
        if back {
            self.hi = Bound::Excluded(key);
        } else {
            self.lo = Bound::Excluded(key);
        }
    }
}

/// A key a layer offers, with what the layer says of it.
pub type Candidate = (Held, Option<Held>);

/// One layer of the merged view.
pub trait Layer {
    /// The layer's first key inside `w` from the front (`back == false`) or
    /// the back, with its value (`None`: a tombstone).
    fn peek(&mut self, w: &Window, back: bool) -> Result<Option<Candidate>>;

    /// True if a fold of the CF's buffer removes this layer's tombstones
    /// (its walks count toward a fold request: design.md "Tombstone
    /// walks"); a transaction's own pending writes and the tree do not.
    fn folded_away(&self) -> bool {
        false
    }
}

fn shared(slot: Slot) -> Option<Held> {
    slot.map(Held::Shared)
}

/// A buffer read at a snapshot version.
pub struct BufferLayer<'a> {
    /// The buffer.
    pub buf: &'a MemBuffer,
    /// The table read.
    pub table: TableId,
    /// The snapshot's version: later entries are invisible.
    pub at: Version,
}

impl Layer for BufferLayer<'_> {
    fn peek(&mut self, w: &Window, back: bool) -> Result<Option<Candidate>> {
        Ok(self
            .buf
            .seek(self.table, w.lo(), w.hi(), self.at, back)
            .map(|(k, s)| (k, shared(s))))
    }

    fn folded_away(&self) -> bool {
        true
    }
}

/// A buffer's walk at a snapshot version, kept between steps. What a
/// buffer shows at a version never changes (later entries are invisible
/// there), so the entries each end found stay the answer until the window
/// moves past them. Each end takes a run of entries per skip-list seek
/// ([`MemBuffer::seek_run`]): two at first, doubling up to
/// [`BufferWalk::MAX_RUN`], so a short range seeks about once and a long
/// scan seeks once per 64 entries, not once per entry.
#[derive(Debug, Default)]
pub struct BufferWalk {
    front: WalkEnd,
    back: WalkEnd,
}

/// One end of a [`BufferWalk`]: the entries found and not yet passed.
#[derive(Debug, Default)]
struct WalkEnd {
    found: VecDeque<(Held, Slot)>,
    /// Nothing lies beyond `found` on this side.
    ended: bool,
    /// Entries taken by the last seek (0: none yet).
    run: usize,
}

impl WalkEnd {
    /// Seeks the next run from the window's edge on this side.
    fn refill(&mut self, layer: &BufferLayer<'_>, w: &Window, back: bool) {
        debug_assert!(self.found.is_empty() && !self.ended);
        self.run = (self.run * 2).clamp(2, BufferWalk::MAX_RUN);
        self.ended = layer.buf.seek_run(
            layer.table,
            (w.lo(), w.hi()),
            (layer.at, back),
            self.run,
            &mut self.found,
        );
    }
}

impl BufferWalk {
    /// The most entries one seek takes.
    pub const MAX_RUN: usize = 64;

    /// This walk as a layer over `buf`'s `table` at version `at`.
    pub fn with<'a>(
        &'a mut self,
        buf: &'a MemBuffer,
        table: TableId,
        at: Version,
    ) -> BufferWalkLayer<'a> {
        BufferWalkLayer {
            walk: self,
            layer: BufferLayer { buf, table, at },
        }
    }
}

/// A [`BufferWalk`] with its buffer, for one step.
pub struct BufferWalkLayer<'a> {
    walk: &'a mut BufferWalk,
    layer: BufferLayer<'a>,
}

impl Layer for BufferWalkLayer<'_> {
    fn folded_away(&self) -> bool {
        true
    }

    fn peek(&mut self, w: &Window, back: bool) -> Result<Option<Candidate>> {
        let end = if back {
            &mut self.walk.back
        } else {
            &mut self.walk.front
        };
        loop {
            if let Some((k, v)) = end.found.front() {
                if w.contains(k) {
                    return Ok(Some((k.clone(), shared(v.clone()))));
                }
                let beyond = if back {
                    !above_lo(k, w)
                } else {
                    !below_hi(k, w)
                };
                if beyond {
                    // The other end has passed it: nothing left on this side.
                    return Ok(None);
                }
                end.found.pop_front(); // handed out from this end
                continue;
            }
            if end.ended {
                return Ok(None);
            }
            end.refill(&self.layer, w, back);
        }
    }
}

/// A write transaction's own writes to one table.
/// (`None`: the transaction wrote nothing to the table.)
pub struct WritesLayer<'a>(pub Option<&'a TableWrites>);

impl Layer for WritesLayer<'_> {
    fn peek(&mut self, w: &Window, back: bool) -> Result<Option<Candidate>> {
        let Some(writes) = self.0 else {
            return Ok(None);
        };
        Ok(writes
            .seek(w.lo(), w.hi(), back)
            .map(|(k, s)| (k, shared(s))))
    }
}

/// A tree's walk, kept between steps: its cursor and the entry each end
/// has read but not yet handed out.
#[derive(Debug)]
pub struct TreeWalk {
    cursor: Cursor,
    front: Option<(Held, Held)>,
    back: Option<(Held, Held)>,
}

impl TreeWalk {
    /// A walk over the keys of `root` inside `w`.
    pub fn new(root: &TreeRoot, w: &Window) -> TreeWalk {
        TreeWalk {
            cursor: Cursor::new(root, w.lo(), w.hi()),
            front: None,
            back: None,
        }
    }

    /// This walk as a layer reading pages from `store`.
    pub fn with<'a, S: PageRead + ?Sized>(&'a mut self, store: &'a S) -> TreeLayer<'a, S> {
        TreeLayer { walk: self, store }
    }
}

/// A [`TreeWalk`] with the store it reads from, for one step.
pub struct TreeLayer<'a, S: PageRead + ?Sized> {
    walk: &'a mut TreeWalk,
    store: &'a S,
}

impl<S: PageRead + ?Sized> Layer for TreeLayer<'_, S> {
    fn peek(&mut self, w: &Window, back: bool) -> Result<Option<Candidate>> {
        let walk = &mut *self.walk;
        loop {
            // This end's pending entry; else the cursor's next; else the
            // other end's pending entry (the cursor ends have met).
            let (mine, other) = if back {
                (&mut walk.back, &mut walk.front)
            } else {
                (&mut walk.front, &mut walk.back)
            };
            if mine.is_none() {
                let next = if back {
                    walk.cursor.next_back(self.store)?
                } else {
                    walk.cursor.next(self.store)?
                };
                *mine = match next {
                    Some((k, v)) => Some((Held::Page(k), Held::Page(v))),
                    None => other.take(),
                };
            }
            let Some((k, v)) = mine.as_ref() else {
                return Ok(None);
            };
            if w.contains(k) {
                return Ok(Some((k.clone(), Some(v.clone()))));
            }
            // Outside the window: already yielded from this end (the
            // window moved past it) or from the other end (then nothing
            // inside is left on this side).
            let passed_here = match back {
                false => !below_hi(k, w),
                true => !above_lo(k, w),
            };
            if passed_here {
                return Ok(None);
            }
            *mine = None;
        }
    }
}

/// True if `k` is not past the window's upper bound.
fn below_hi(k: &[u8], w: &Window) -> bool {
    !above(k, w.hi())
}

/// True if `k` is not below the window's lower bound.
fn above_lo(k: &[u8], w: &Window) -> bool {
    !below(k, w.lo())
}

/// The next visible entry of the merged view of `layers` (newest first)
/// inside `w`, from the front or the back; shrinks `w` past every key it
/// looked at, tombstoned ones included, and adds how many of those were
/// tombstones a fold removes ([`Layer::folded_away`]) to `walked`.
pub fn step(
    layers: &mut [&mut dyn Layer],
    w: &mut Window,
    back: bool,
    walked: &mut u64,
) -> Result<Option<(Held, Held)>> {
    loop {
        let mut best: Option<Candidate> = None;
        let mut best_layer = 0;
        for (i, layer) in layers.iter_mut().enumerate() {
            let Some((k, v)) = layer.peek(w, back)? else {
                continue;
            };
            let better = match &best {
                None => true,
                Some((bk, _)) => {
                    let ord = k.as_slice().cmp(bk.as_slice());
                    // An equal key in an older layer is shadowed.
                    if back {
                        ord == Ordering::Greater
                    } else {
                        ord == Ordering::Less
                    }
                }
            };
            if better {
                best = Some((k, v));
                best_layer = i;
            }
        }
        let Some((k, v)) = best else {
            return Ok(None);
        };
        w.consume(k.clone(), back);
        if let Some(v) = v {
            return Ok(Some((k, v)));
        }
        // Asked of tombstones only: entries with values pay nothing.
        *walked += u64::from(layers[best_layer].folded_away());
        #[cfg(test)]
        SKIPPED.with(|s| s.set(s.get() + 1));
    }
}

#[cfg(test)]
thread_local! {
    /// Tombstones [`step`] walked past on this thread (tests of the end
    /// hints count the walk they spare).
    pub static SKIPPED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// What the layers (newest first) say of one key: the first layer that
/// knows it decides. `lookups` are the point reads of the layers above the
/// tree; `tree` reads the tree last.
pub fn get(
    lookups: &mut dyn Iterator<Item = Option<Slot>>,
    tree: impl FnOnce() -> Result<Option<Held>>,
) -> Result<Option<Held>> {
    match lookups.flatten().next() {
        Some(slot) => Ok(shared(slot)),
        None => tree(),
    }
}
