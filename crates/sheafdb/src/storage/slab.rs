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
//! empty out); a freed block goes on its region's free list, threaded
//! through the free blocks themselves. A region that empties is returned
//! to the system, except one kept per class so that a run freed and
//! allocated again does not map and unmap a region each time.
//!
//! Memory bound: every region with a live block, plus one empty region
//! per class (2 MiB), plus each region's tail (512 bytes at 4 KiB
//! pages). A region stays mapped while any block in it lives, and a free
//! block serves only its own class: like a heap's free chunks, free
//! blocks in a partly used region stay resident (with huge pages, the
//! whole 2 MiB). Taking blocks from the lowest region gathers live runs
//! there, but a worst case (a large transaction's pages freed but for one
//! cached run per region) holds 2 MiB per live run, far above what the
//! cache counts. Returning free blocks inside a region (`MADV_DONTNEED`)
//! would split its huge page; not done.
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

/// One region's blocks.
struct Region {
    /// The region's memory (the pointer every block is derived from).
    base: NonNull<u8>,
    /// The first free block (each free block's first word links the
    /// next), if any.
    free: Option<NonNull<u8>>,
    /// Blocks at the end never handed out yet.
    fresh: usize,
    /// Blocks handed out and not freed.
    live: usize,
}

/// One class's regions, by address.
struct Class {
    regions: BTreeMap<usize, Region>,
    /// Regions with a free or fresh block, by address.
    with_room: BTreeSet<usize>,
    /// The empty region kept for reuse, if any.
    spare: Option<usize>,
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
        }
    }

    /// A block of `class`; `None` if no region could be mapped.
    fn take(&mut self, class: usize) -> Option<NonNull<u8>> {
        let at = match self.with_room.first() {
            Some(&at) => at,
            None => {
                let base = map_region()?;
                let at = base.as_ptr().addr();
                let fresh = blocks_per_region(class);
                let region = Region {
                    base,
                    free: None,
                    fresh,
                    live: 0,
                };
                self.regions.insert(at, region);
                self.with_room.insert(at);
                at
            }
        };
        if self.spare == Some(at) {
            self.spare = None;
        }
        let region = self.regions.get_mut(&at)?;
        let block = match region.free {
            Some(block) => {
                // SAFETY: a free block of this region; its first word links
                // the next free block (written by `give`).
                region.free = unsafe { block.as_ptr().cast::<Option<NonNull<u8>>>().read() };
                block
            }
            None => {
                let index = blocks_per_region(class) - region.fresh;
                region.fresh -= 1;
                // SAFETY: block `index` lies inside the region (`fresh` counts
                // the blocks left at its end).
                unsafe { region.base.add(index * block_size(class)) }
            }
        };
        region.live += 1;
        if region.free.is_none() && region.fresh == 0 {
            self.with_room.remove(&at);
        }
        let offset = block.as_ptr().addr() - at;
        debug_assert!(offset.is_multiple_of(BLOCK_ALIGN) && offset + block_size(class) <= REGION);
        Some(block)
    }

    /// Takes back `block` (handed out by `take`, no longer used).
    fn give(&mut self, block: NonNull<u8>) {
        let at = block.as_ptr().addr() & !(REGION - 1);
        let Some(region) = self.regions.get_mut(&at) else {
            debug_assert!(
                false,
                "engine invariant: a block freed into a region it is not from"
            );
            return; // leaked rather than handed out twice
        };
        // SAFETY: the block is this region's, no longer used by anyone: its
        // first word may link the free list.
        unsafe {
            block
                .as_ptr()
                .cast::<Option<NonNull<u8>>>()
                .write(region.free)
        };
        region.free = Some(block);
        region.live -= 1;
        self.with_room.insert(at);
        if region.live > 0 {
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
                state.lock().give(p);
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
        for (i, b) in blocks.iter().enumerate() {
            // SAFETY: each block is live and block_size(c) long.
            unsafe { std::ptr::write_bytes(b.as_ptr(), i as u8, block_size(c)) };
        }
        assert_eq!(class.regions.len(), 4);
        let last = blocks.pop().expect("a block");
        class.give(last);
        assert_eq!(class.take(c), Some(last), "a freed block is reused first");
        blocks.push(last);
        for b in blocks.drain(..) {
            class.give(b);
        }
        assert_eq!(class.regions.len(), 1, "emptied regions go back but one");
        assert_eq!(class.spare.map(|_| ()), Some(()));
        let again = class.take(c).expect("memory");
        assert!(class.spare.is_none(), "the spare is in use again");
        class.give(again);
        assert_eq!(class.regions.len(), 1);
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
