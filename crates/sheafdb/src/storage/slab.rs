//! Memory for page runs: 2 MiB regions advised for transparent huge
//! pages, cut into blocks of one page run each (design.md "Read path",
//! *Huge pages*).
//!
//! A run of exactly one page (4, 8, 16, 32 or 64 KiB of bytes, plus its
//! count, length and header: at most [`HEADER_ROOM`] bytes) takes a block
//! of its page size's class; any other allocation goes to the global
//! allocator. Which one serves an allocation depends on its layout only,
//! so [`free`] finds its way back without a lookup.
//!
//! Each class keeps its regions by address. A block is taken from the
//! lowest region with room (so live blocks gather low and high regions
//! empty out); each region marks its free blocks in a bitmap (kept
//! outside the blocks, whose memory may be given back). A region that
//! empties is returned to the system, except one kept per class so that
//! a run freed and allocated again does not map and unmap a region each
//! time.
//!
//! Memory bound: while a class's regions (but its spare) hold at most
//! twice the blocks in use, nothing is given back but empty regions, and
//! every region keeps its huge page. Past that (the class is
//! *wasteful*), a region whose live blocks fall to a quarter of its
//! blocks at a free goes *sparse*: the whole system pages of its free
//! blocks are given back (`MADV_DONTNEED`, which splits its huge page: a
//! sparse region gains little from one). While it stays sparse, the
//! blocks freed in it are noted as *pending*, and their pages are given
//! back in one pass once they pass half the live ones, until allocations
//! fill it to half again. So resident memory stays within twice the live
//! runs' bytes while the class is not wasteful; past it, a dense region
//! holds at most four times its live blocks' bytes, and a sparse one its
//! live blocks, half as many pending ones, and the system pages they
//! share with free neighbours (at most two per live block), plus one
//! empty region per class. Regions that fell to a quarter while the class
//! was not wasteful keep their pages until their next free finds it
//! wasteful. Before the gate every region reaching a quarter went sparse:
//! after a fold replaced a tree's leaves, most cached pages sat in split
//! regions, and point reads over them ran a fifth to a third slower
//! (`examples/fold_reads`; design.md "Read path", *Huge pages*). Before
//! the release, a large transaction's pages freed but for the runs the
//! cache kept held 2 MiB per region with one live run: 86 MiB resident
//! for a 16 MiB cache after 200,000 updates in one transaction
//! (`examples/cache_memory`). Before the pending blocks, each
//! block freed in a sparse region gave its pages back on its own: one
//! `madvise` and one TLB shootdown per page run freed, 6–8 % of a
//! `compact()` (design.md "Read path", *Huge pages*).
//!
//! The class locks are not held across `fork`: a process that forks while
//! another thread allocates a page run may deadlock in the child on its
//! first one (glibc's malloc guards against that; this does not).
//!
//! Must not know: pages, B-trees, files.

#![allow(unsafe_code)]

use std::alloc::Layout;
use std::collections::{BTreeMap, BTreeSet};
use std::ptr::NonNull;

use parking_lot::Mutex;

/// Bytes of one region: one huge page on x86-64 and arm64 (4 KiB base
/// pages).
const REGION: usize = 2 << 20;
/// Room for a run's count, length and header beside its bytes.
pub const HEADER_ROOM: usize = 64;
/// Page sizes with a class: 4 KiB << 0..CLASSES.
const CLASSES: usize = 5;
/// Block alignment (a cache line).
const BLOCK_ALIGN: usize = 64;

const _: () = assert!(HEADER_ROOM.is_multiple_of(BLOCK_ALIGN));
const _: () = assert!(((4096 << (CLASSES - 1)) + HEADER_ROOM) * 16 < REGION);
const _: () = assert!(REGION / (4096 + HEADER_ROOM) <= FREE_WORDS * 64);

/// The class serving `layout`, if any.
fn class_of(layout: Layout) -> Option<usize> {
    if layout.align() > BLOCK_ALIGN {
        return None;
    }
    (0..CLASSES).find(|&c| {
        let page = 4096usize << c;
        layout.size() > page && layout.size() <= page + HEADER_ROOM
    })
}

/// True if an allocation of `layout` comes from a region (tests check that
/// page runs do).
pub fn serves(layout: Layout) -> bool {
    class_of(layout).is_some()
}

fn block_size(class: usize) -> usize {
    (4096 << class) + HEADER_ROOM
}

fn blocks_per_region(class: usize) -> usize {
    REGION / block_size(class)
}

/// Words of a region's free-block bitmap (class 0 has the most blocks).
const FREE_WORDS: usize = (REGION / ((4096) + HEADER_ROOM)).div_ceil(64);

/// Bytes the system maps memory in (the unit `MADV_DONTNEED` gives back).
const OS_PAGE: usize = 4096;

/// One region's blocks.
struct Region {
    /// The region's memory (the pointer every block is derived from).
    base: NonNull<u8>,
    /// Bit `i` set: block `i` is free (never handed out, or freed).
    free: [u64; FREE_WORDS],
    /// Blocks handed out and not freed.
    live: usize,
    /// The region went sparse (at most a quarter of its blocks live): the
    /// whole system pages of its free blocks were given back, and blocks
    /// freed since are `pending`, until it is half full again.
    released: bool,
    /// Bit `i` set: block `i` was freed while the region was sparse and
    /// its pages were not given back yet (always a subset of `free`).
    pending: [u64; FREE_WORDS],
}

/// A region's bitmap of blocks (`Region::free`, `Region::pending`).
type Bits = [u64; FREE_WORDS];

fn bit(bits: &Bits, i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

fn set_bit(bits: &mut Bits, i: usize, on: bool) {
    match on {
        true => bits[i / 64] |= 1 << (i % 64),
        false => bits[i / 64] &= !(1 << (i % 64)),
    }
}

impl Region {
    fn new(base: NonNull<u8>, class: usize) -> Region {
        let mut free = [0u64; FREE_WORDS];
        for i in 0..blocks_per_region(class) {
            set_bit(&mut free, i, true);
        }
        Region {
            base,
            free,
            live: 0,
            released: false,
            pending: [0; FREE_WORDS],
        }
    }

    fn is_free(&self, i: usize) -> bool {
        bit(&self.free, i)
    }

    /// The lowest free block, if any.
    fn first_free(&self) -> Option<usize> {
        (self.free.iter().enumerate())
            .find(|(_, w)| **w != 0)
            .map(|(at, w)| at * 64 + w.trailing_zeros() as usize)
    }

    /// Gives back the whole system pages of every run of free blocks
    /// (the region just went sparse).
    fn release_free(&mut self, class: usize) {
        let n = blocks_per_region(class);
        let mut i = 0;
        while i < n {
            if !self.is_free(i) {
                i += 1;
                continue;
            }
            let start = i;
            while i < n && self.is_free(i) {
                i += 1;
            }
            self.release_bytes(class, start, i);
        }
        self.released = true;
    }

    fn is_pending(&self, i: usize) -> bool {
        bit(&self.pending, i)
    }

    /// Notes free block `i` of a sparse region as pending, and gives back
    /// the pages of every pending block once they pass half the live
    /// ones (so a sparse region holds at most half as many free blocks'
    /// pages as live blocks, and gives them back in a pass per that many
    /// frees instead of a system call per free: a region emptying one
    /// block at a time makes a logarithmic number of passes).
    fn note_pending(&mut self, class: usize, i: usize) {
        debug_assert!(self.released && self.is_free(i) && !self.is_pending(i));
        set_bit(&mut self.pending, i, true);
        if 2 * self.pending_count() > self.live {
            self.release_pending(class);
        }
    }

    /// Gives back the whole system pages inside each run of pending
    /// blocks, widened by the free neighbours it touches (a system page
    /// spans at most two blocks: every block is longer than one).
    fn release_pending(&mut self, class: usize) {
        let n = blocks_per_region(class);
        let mut i = 0;
        while i < n {
            if !self.is_pending(i) {
                i += 1;
                continue;
            }
            let mut start = i;
            while i < n && self.is_pending(i) {
                i += 1;
            }
            if start > 0 && self.is_free(start - 1) {
                start -= 1;
            }
            let end = if i < n && self.is_free(i) { i + 1 } else { i };
            self.release_bytes(class, start, end);
        }
        self.clear_pending();
    }

    fn clear_pending(&mut self) {
        self.pending = [0; FREE_WORDS];
    }

    /// Blocks pending (a count over a few words: kept in no field, so it
    /// cannot drift from the bitmap).
    fn pending_count(&self) -> usize {
        self.pending.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Gives back the whole system pages inside blocks `start..end`, all
    /// free (the region's tail with the last block).
    fn release_bytes(&self, class: usize, start: usize, end: usize) {
        debug_assert!((start..end).all(|b| self.is_free(b)));
        let from = (start * block_size(class)).next_multiple_of(OS_PAGE);
        let to = match end == blocks_per_region(class) {
            true => REGION,
            false => end * block_size(class) / OS_PAGE * OS_PAGE,
        };
        if from < to {
            // SAFETY: `from..to` lies inside the region, in free blocks no
            // one uses; they may read back as zeros.
            unsafe { discard(self.base.add(from), to - from) };
        }
    }
}

/// One class's regions, by address.
struct Class {
    regions: BTreeMap<usize, Region>,
    /// Regions with a free block, by address.
    with_room: BTreeSet<usize>,
    /// The empty region kept for reuse, if any.
    spare: Option<usize>,
    /// Blocks handed out and not freed, over all regions.
    live: usize,
}

// SAFETY: a class owns its regions' memory outright; the raw pointers in
// it are never shared outside the mutex that holds the class.
unsafe impl Send for Class {}

impl Class {
    const fn new() -> Class {
        Class {
            regions: BTreeMap::new(),
            with_room: BTreeSet::new(),
            spare: None,
            live: 0,
        }
    }

    /// True if the class's regions (but the spare) hold more than twice
    /// the blocks in use: only then does a region going sparse give its
    /// free pages back. Giving them back splits the region's huge page
    /// (`MADV_DONTNEED` on part of it), and every run later placed in it
    /// costs TLB misses to read; below the mark the memory is bounded by
    /// the class as a whole instead.
    fn wasteful(&self, class: usize) -> bool {
        debug_assert_eq!(
            self.live,
            self.regions.values().map(|r| r.live).sum::<usize>(),
            "the class's live count drifted from its regions'"
        );
        let mapped = self.regions.len() - usize::from(self.spare.is_some());
        mapped * blocks_per_region(class) > 2 * self.live
    }

    /// A block of `class`; `None` if no region could be mapped.
    fn take(&mut self, class: usize) -> Option<NonNull<u8>> {
        let at = match self.with_room.first() {
            Some(&at) => at,
            None => {
                let base = map_region()?;
                let at = base.as_ptr().addr();
                self.regions.insert(at, Region::new(base, class));
                self.with_room.insert(at);
                at
            }
        };
        if self.spare == Some(at) {
            self.spare = None;
        }
        let region = self.regions.get_mut(&at)?;
        let index = region.first_free()?;
        set_bit(&mut region.free, index, false);
        set_bit(&mut region.pending, index, false);
        region.live += 1;
        self.live += 1;
        if region.released && 2 * region.live >= blocks_per_region(class) {
            region.released = false; // dense again: frees keep their pages
            region.clear_pending();
        }
        if region.first_free().is_none() {
            self.with_room.remove(&at);
        }
        // SAFETY: block `index` lies inside the region.
        let block = unsafe { region.base.add(index * block_size(class)) };
        let offset = index * block_size(class);
        debug_assert!(offset.is_multiple_of(BLOCK_ALIGN) && offset + block_size(class) <= REGION);
        Some(block)
    }

    /// Takes back `block` (handed out by `take`, no longer used).
    fn give(&mut self, class: usize, block: NonNull<u8>) {
        let at = block.as_ptr().addr() & !(REGION - 1);
        let Some(region) = self.regions.get_mut(&at) else {
            debug_assert!(
                false,
                "engine invariant: a block freed into a region it is not from"
            );
            return; // leaked rather than handed out twice
        };
        let offset = block.as_ptr().addr() - at;
        let index = offset / block_size(class);
        debug_assert!(offset.is_multiple_of(block_size(class)) && !region.is_free(index));
        set_bit(&mut region.free, index, true);
        region.live -= 1;
        self.live -= 1;
        self.with_room.insert(at);
        let live = region.live;
        if region.released {
            region.note_pending(class, index);
        } else if live > 0 && 4 * live <= blocks_per_region(class) && self.wasteful(class) {
            if let Some(region) = self.regions.get_mut(&at) {
                region.release_free(class);
            }
        }
        if live > 0 {
            return;
        }
        match self.spare {
            None => self.spare = Some(at),
            Some(_) => {
                self.with_room.remove(&at);
                if let Some(region) = self.regions.remove(&at) {
                    unmap_region(region.base);
                }
            }
        }
    }
}

static CLASS_STATE: [Mutex<Class>; CLASSES] = [
    Mutex::new(Class::new()),
    Mutex::new(Class::new()),
    Mutex::new(Class::new()),
    Mutex::new(Class::new()),
    Mutex::new(Class::new()),
];

/// Memory for `layout` (never zero-sized): a block if a class serves it,
/// else from the global allocator. Aborts like `std` on exhaustion.
pub fn allocate(layout: Layout) -> NonNull<u8> {
    debug_assert!(layout.size() > 0);
    let p = match class_of(layout) {
        Some(c) => CLASS_STATE.get(c).and_then(|state| state.lock().take(c)),
        // SAFETY: the layout has a non-zero size.
        None => NonNull::new(unsafe { std::alloc::alloc(layout) }),
    };
    match p {
        Some(p) => p,
        None => std::alloc::handle_alloc_error(layout),
    }
}

/// Frees memory [`allocate`] gave for `layout`.
///
/// # Safety
/// `p` came from `allocate(layout)` with this same layout, and nothing uses
/// it any more.
pub unsafe fn free(p: NonNull<u8>, layout: Layout) {
    match class_of(layout) {
        Some(c) => {
            if let Some(state) = CLASS_STATE.get(c) {
                state.lock().give(c, p);
            }
        }
        // SAFETY (caller): the global allocator gave `p` for `layout`.
        None => unsafe { std::alloc::dealloc(p.as_ptr(), layout) },
    }
}

/// A new region aligned to [`REGION`] and advised for huge pages; `None` if
/// the system has no memory for it.
#[cfg(all(target_os = "linux", not(miri)))]
fn map_region() -> Option<NonNull<u8>> {
    // SAFETY: an anonymous private mapping of fresh memory, twice the
    // region so an aligned region lies inside; the parts around it are
    // unmapped again, so the region is the whole mapping.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            2 * REGION,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        let p = p.cast::<u8>();
        let head = p.addr().next_multiple_of(REGION) - p.addr();
        let base = p.add(head);
        if head > 0 {
            libc::munmap(p.cast(), head);
        }
        let tail = REGION - head;
        if tail > 0 {
            libc::munmap(base.add(REGION).cast(), tail);
        }
        // A hint: without it (or where THP is off) the region is still
        // memory, in small pages.
        libc::madvise(base.cast(), REGION, libc::MADV_HUGEPAGE);
        NonNull::new(base)
    }
}

/// Gives the system pages of `len` bytes at `p` back (they read as zeros
/// when touched again); a hint: a failure leaves them resident.
///
/// # Safety
/// `p..p + len` lies in a region, whole system pages, used by no one.
#[cfg(all(target_os = "linux", not(miri)))]
unsafe fn discard(p: NonNull<u8>, len: usize) {
    debug_assert!(p.as_ptr().addr().is_multiple_of(OS_PAGE) && len.is_multiple_of(OS_PAGE));
    // SAFETY (caller): whole pages of our own mapping that nothing uses.
    unsafe { libc::madvise(p.as_ptr().cast(), len, libc::MADV_DONTNEED) };
}

/// Memory from the global allocator is not given back piecemeal.
#[cfg(not(all(target_os = "linux", not(miri))))]
unsafe fn discard(_p: NonNull<u8>, _len: usize) {}

#[cfg(all(target_os = "linux", not(miri)))]
fn unmap_region(base: NonNull<u8>) {
    // SAFETY: `base` is a whole region from `map_region` with no block in
    // use.
    unsafe { libc::munmap(base.as_ptr().cast(), REGION) };
}

/// Under Miri (no `mmap`) and off Linux (no `MADV_HUGEPAGE`): regions from
/// the global allocator, aligned the same way, in whatever pages it has.
#[cfg(not(all(target_os = "linux", not(miri))))]
fn map_region() -> Option<NonNull<u8>> {
    let layout = Layout::from_size_align(REGION, REGION).ok()?;
    // SAFETY: a non-zero size.
    NonNull::new(unsafe { std::alloc::alloc(layout) })
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn unmap_region(base: NonNull<u8>) {
    if let Ok(layout) = Layout::from_size_align(REGION, REGION) {
        // SAFETY: `base` came from `map_region` with this layout.
        unsafe { std::alloc::dealloc(base.as_ptr(), layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_layout(class: usize) -> Layout {
        Layout::from_size_align((4096 << class) + 48, 8).expect("layout")
    }

    /// Writes `byte(i)` over every byte of block `blocks[i]`, each live
    /// and of class `c` (so the test touches, and later checks, its pages).
    fn fill(blocks: &[NonNull<u8>], c: usize, byte: impl Fn(usize) -> u8) {
        for (i, b) in blocks.iter().enumerate() {
            // SAFETY: each block is live and block_size(c) long.
            unsafe { std::ptr::write_bytes(b.as_ptr(), byte(i), block_size(c)) };
        }
    }

    #[test]
    fn only_one_page_runs_have_a_class() {
        assert_eq!(class_of(page_layout(0)), Some(0));
        assert_eq!(class_of(page_layout(4)), Some(4));
        for size in [
            16,
            4096,
            4096 + HEADER_ROOM + 1,
            3 * 4096 + 48,
            (1 << 17) + 48,
        ] {
            let l = Layout::from_size_align(size, 8).expect("layout");
            assert_eq!(class_of(l), None, "{size}");
        }
        let aligned = Layout::from_size_align(4096 + 48, 128).expect("layout");
        assert_eq!(class_of(aligned), None);
    }

    /// Blocks never overlap while live, are reused once freed, and a
    /// region that empties goes back (all but one spare).
    #[test]
    fn blocks_are_distinct_reused_and_regions_given_back() {
        // A class of its own so that other tests' runs do not interfere.
        let mut class = Class::new();
        let c = 1;
        let n = blocks_per_region(c) * 3 + 5;
        let mut blocks: Vec<NonNull<u8>> = (0..n).map(|_| class.take(c).expect("memory")).collect();
        let mut addrs: Vec<usize> = blocks.iter().map(|b| b.as_ptr().addr()).collect();
        addrs.sort_unstable();
        for w in addrs.windows(2) {
            assert!(w[1] - w[0] >= block_size(c), "blocks overlap");
        }
        fill(&blocks, c, |i| i as u8);
        assert_eq!(class.regions.len(), 4);
        let last = blocks.pop().expect("a block");
        class.give(c, last);
        assert_eq!(class.take(c), Some(last), "a freed block is reused first");
        blocks.push(last);
        for b in blocks.drain(..) {
            class.give(c, b);
        }
        assert_eq!(class.regions.len(), 1, "emptied regions go back but one");
        assert_eq!(class.spare.map(|_| ()), Some(()));
        let again = class.take(c).expect("memory");
        assert!(class.spare.is_none(), "the spare is in use again");
        class.give(c, again);
        assert_eq!(class.regions.len(), 1);
        let spare = class.spare.take().expect("spare");
        let region = class.regions.remove(&spare).expect("the spare region");
        unmap_region(region.base);
    }

    /// System pages of `len` bytes at `p` that are resident.
    #[cfg(all(target_os = "linux", not(miri)))]
    fn resident_pages(p: NonNull<u8>, len: usize) -> usize {
        let mut vec = vec![0u8; len.div_ceil(OS_PAGE)];
        // SAFETY: `p..p + len` is mapped (a live region); `vec` has a byte
        // per page.
        let r = unsafe { libc::mincore(p.as_ptr().cast(), len, vec.as_mut_ptr()) };
        assert_eq!(r, 0, "mincore");
        vec.iter().filter(|b| **b & 1 != 0).count()
    }

    /// A region left with few live blocks gives the pages of its free
    /// blocks back to the system and keeps its live blocks' bytes; blocks
    /// freed while it is sparse give theirs back together once they
    /// pass half the live ones; filled to half again, it keeps freed
    /// blocks' pages. (Without the release every touched
    /// page stayed resident: a region with one live run held 2 MiB.)
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn a_sparse_region_gives_its_free_pages_back() {
        let mut class = Class::new();
        let c = 0;
        let n = blocks_per_region(c);
        let blocks: Vec<NonNull<u8>> = (0..n).map(|_| class.take(c).expect("memory")).collect();
        assert_eq!(class.regions.len(), 1, "one region holds them all");
        let base = class.regions.values().next().expect("region").base;
        fill(&blocks, c, |i| (i % 251) as u8 + 1);
        let all = REGION / OS_PAGE;
        assert_eq!(resident_pages(base, REGION), all, "every page touched");
        // Keep every eighth block: an eighth live, under a quarter.
        let kept: Vec<usize> = (0..n).step_by(8).collect();
        for (i, b) in blocks.iter().enumerate() {
            if i % 8 != 0 {
                class.give(c, *b);
            }
        }
        let region = class.regions.values().next().expect("region");
        assert!(region.released, "a region an eighth full is sparse");
        let pending = region.pending_count();
        assert!(2 * pending <= kept.len(), "{pending} pending");
        let resident = resident_pages(base, REGION);
        assert!(
            resident <= 2 * (kept.len() + pending) + 1,
            "{resident} of {all} pages resident for {} live and {pending} pending blocks",
            kept.len()
        );
        for &i in &kept {
            // SAFETY: block `i` is live.
            let bytes = unsafe { std::slice::from_raw_parts(blocks[i].as_ptr(), block_size(c)) };
            assert!(
                bytes.iter().all(|&b| b == (i % 251) as u8 + 1),
                "block {i} lost its bytes"
            );
        }
        // Freed while sparse: pending, until the pending blocks pass half
        // the live ones; then all of them go in one pass.
        let before = resident_pages(base, REGION);
        let mut freed = Vec::new();
        for &i in &kept[1..] {
            class.give(c, blocks[i]);
            freed.push(i);
            let region = class.regions.values().next().expect("region");
            if region.pending_count() == 0 {
                break;
            }
            assert!(2 * region.pending_count() <= region.live);
            assert_eq!(
                resident_pages(base, REGION),
                before,
                "a pending block's pages went before their turn"
            );
        }
        let live = kept.len() - freed.len();
        assert!(freed.len() > 1 && freed.len() < kept.len() - 1, "{freed:?}");
        assert_eq!(
            2 * (pending + freed.len()),
            live + 1,
            "released as the pending blocks passed half the live ones"
        );
        let resident = resident_pages(base, REGION);
        assert!(
            resident < before && resident <= 2 * live + 1,
            "{resident} pages resident for {live} live blocks (before: {before})"
        );
        // Refilled to half: dense again, frees keep their pages.
        let refill: Vec<NonNull<u8>> = (0..n / 2).map(|_| class.take(c).expect("memory")).collect();
        assert!(!class.regions.values().next().expect("region").released);
        fill(&refill, c, |_| 9);
        let before = resident_pages(base, REGION);
        class.give(c, refill[0]);
        assert_eq!(
            resident_pages(base, REGION),
            before,
            "a dense region's free kept its pages"
        );
        for b in refill.into_iter().skip(1) {
            class.give(c, b);
        }
        for i in kept.into_iter().filter(|i| !freed.contains(i)) {
            class.give(c, blocks[i]);
        }
        assert_eq!(class.regions.len(), 1, "the last region stays as the spare");
        let spare = class.spare.take().expect("spare");
        let region = class.regions.remove(&spare).expect("the spare region");
        unmap_region(region.base);
    }

    /// A region going sparse keeps its pages (and its huge page) while
    /// the class's regions hold at most twice the blocks in use; once
    /// they hold more, the next block freed in it gives its free pages
    /// back. (Before, every region going sparse gave them back: after a
    /// fold replaced a tree's leaves, most cached pages sat in regions
    /// split into small pages, and point reads over them ran a fifth
    /// to a third slower: `examples/fold_reads`.)
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn regions_go_sparse_only_when_the_class_holds_twice_its_live_blocks() {
        let mut class = Class::new();
        let c = 0;
        let n = blocks_per_region(c);
        let blocks: Vec<NonNull<u8>> = (0..3 * n).map(|_| class.take(c).expect("memory")).collect();
        assert_eq!(class.regions.len(), 3);
        fill(&blocks, c, |_| 5);
        // Region `at` (the first one filled) an eighth full, the others
        // full: 3 regions for 2.125 regions' worth of live blocks.
        let (a, rest) = blocks.split_at(n);
        let at = a[0].as_ptr().addr() & !(REGION - 1);
        let base = class.regions[&at].base;
        let first = |class: &Class| class.regions[&at].released;
        for (i, b) in a.iter().enumerate() {
            if i % 8 != 0 {
                class.give(c, *b);
            }
        }
        assert!(!class.wasteful(c));
        assert!(
            !first(&class),
            "a region went sparse in a class that is not wasteful"
        );
        assert_eq!(resident_pages(base, REGION), REGION / OS_PAGE);
        // Empty most of the other two: now the class is wasteful.
        let mut kept: Vec<NonNull<u8>> = Vec::new();
        for (i, b) in rest.iter().enumerate() {
            if i % 16 == 0 {
                kept.push(*b);
            } else {
                class.give(c, *b);
            }
        }
        assert!(class.wasteful(c));
        // The next free in the first region gives its free pages back.
        class.give(c, a[8]);
        assert!(
            first(&class),
            "a sparse region of a wasteful class kept its pages"
        );
        let live = n.div_ceil(8) - 1;
        assert!(resident_pages(base, REGION) <= 2 * live + 1);
        for (i, b) in a.iter().enumerate() {
            if i % 8 == 0 && i != 8 {
                class.give(c, *b);
            }
        }
        for b in kept {
            class.give(c, b);
        }
        assert_eq!(class.live, 0);
        assert_eq!(class.regions.len(), 1, "the last region stays as the spare");
        let spare = class.spare.take().expect("spare");
        let region = class.regions.remove(&spare).expect("the spare region");
        unmap_region(region.base);
    }

    #[test]
    fn allocate_and_free_serve_both_kinds() {
        for layout in [
            page_layout(0),
            page_layout(2),
            Layout::from_size_align(100, 8).expect("l"),
        ] {
            let p = allocate(layout);
            // SAFETY: `p` is `layout.size()` bytes, ours until freed.
            unsafe {
                std::ptr::write_bytes(p.as_ptr(), 0xAB, layout.size());
                free(p, layout);
            }
        }
    }
}
