//! How much of a read is TLB misses: point and range reads over the tree
//! with the cached pages' memory in 4 KiB or in 2 MiB pages (design.md
//! "Read path", *Huge pages*). Prints figures; it is not a test.
//!
//! Run: `cargo run --release --example huge_page_reads [-- DIR]`, once
//! per heap placement, alternating:
//! - as is: the system allocator, which on Linux with transparent huge
//!   pages at `madvise` maps the heap in 4 KiB pages;
//! - `SHEAF_PAGE_SLAB=1`: allocations of about one page (a cached or
//!   built page run: 4 KiB of bytes and its header) come from 64 MiB
//!   regions aligned to 2 MiB and advised `MADV_HUGEPAGE`, everything
//!   else from the system allocator (what the engine could do for its own
//!   page runs);
//! - `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (glibc 2.35 or later): all
//!   of glibc's heap advised for huge pages.
//!
//! Loads 1,000,000 pairs (the `sheaf-bench peers` shape) in one
//! transaction and checkpoints, so the tree holds them all; then, from
//! one snapshot, times three passes each of 1,000,000 point reads and
//! 500,000 ranges of 10 from random loaded keys, and prints the medians
//! and the huge pages the process held (`AnonHugePages` of
//! `/proc/self/smaps_rollup`). The database lives in a new directory
//! under `DIR` (default: the system temp dir), removed at the end.

mod common;

use std::path::Path;
use std::time::Instant;

use common::{in_scratch_dir, key, load_tree, median, LOAD, T, VALUE};
use sheafdb::{Database, Result};

#[global_allocator]
static HEAP: slab::PageSlab = slab::PageSlab::new();

fn main() -> Result<()> {
    in_scratch_dir("sheafdb-huge-page-reads", std::env::args().nth(1), run)
}

fn run(dir: &Path) -> Result<()> {
    let db = Database::create(dir.join("reads.sheaf"))?;
    load_tree(&db)?;
    let rx = db.begin_read()?;
    let t = rx.open_table(T)?;
    let (mut points, mut ranges) = (Vec::new(), Vec::new());
    for pass in 0..3u64 {
        let start = Instant::now();
        let mut found = 0u64;
        for i in 0..LOAD {
            let k = key((i * 7919 + pass) % LOAD);
            found += u64::from(t.get(&k[..])?.is_some());
        }
        assert_eq!(found, LOAD, "every loaded key reads back");
        points.push(LOAD as f64 / start.elapsed().as_secs_f64());
        let start = Instant::now();
        let mut entries = 0u64;
        for i in 0..LOAD / 2 {
            let k = key((i * 104_729 + pass) % LOAD);
            for e in t.range(&k[..]..)?.take(10) {
                let (k, v) = e?;
                assert_eq!(k.value().len() + v.value().len(), 24 + VALUE.len());
                entries += 1;
            }
        }
        assert!(entries > LOAD / 2, "the ranges read entries");
        ranges.push((LOAD / 2) as f64 / start.elapsed().as_secs_f64());
    }
    println!(
        "heap: {}; point reads {:.0}k/s, ranges of 10 {:.0}k/s (medians of 3 passes, one \
         thread); huge pages held: {}",
        placement(),
        median(points) / 1e3,
        median(ranges) / 1e3,
        huge_pages_held()
    );
    Ok(())
}

fn placement() -> &'static str {
    if slab::enabled() {
        "page runs in huge-page regions (SHEAF_PAGE_SLAB)"
    } else if std::env::var("GLIBC_TUNABLES").is_ok_and(|v| v.contains("hugetlb=1")) {
        "glibc heap advised for huge pages (GLIBC_TUNABLES)"
    } else {
        "system allocator as is"
    }
}

fn huge_pages_held() -> String {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    (rollup.lines())
        .find(|l| l.starts_with("AnonHugePages:"))
        .map_or("unknown".into(), |l| {
            l["AnonHugePages:".len()..].trim().into()
        })
}

/// The `SHEAF_PAGE_SLAB` placement: a global allocator for this
/// measurement only (the engine itself allocates through the global
/// allocator; it holds no `unsafe` outside `storage/`).
mod slab {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::sync::Mutex;

    /// Sizes served from the regions: a 4 KiB page run with its header.
    const SMALLEST: usize = 4096;
    const LARGEST: usize = 4096 + 256;
    /// Every served block takes this much (a multiple of 64).
    const BLOCK: usize = 4096 + 320;
    const HUGE: usize = 2 << 20;
    const REGION: usize = 64 << 20;

    /// Free blocks as a list threaded through the blocks themselves (the
    /// allocator must not allocate), and the unused rest of the newest
    /// region.
    struct Free {
        head: usize,
        next: usize,
        end: usize,
    }

    pub struct PageSlab {
        free: Mutex<Free>,
    }

    static ENABLED: AtomicU8 = AtomicU8::new(0);

    /// True if `SHEAF_PAGE_SLAB` is set (read without allocating).
    pub fn enabled() -> bool {
        match ENABLED.load(Ordering::Relaxed) {
            0 => {
                // SAFETY: getenv reads the environment; no thread of this
                // program changes it.
                let set = !unsafe { libc::getenv(c"SHEAF_PAGE_SLAB".as_ptr()) }.is_null();
                ENABLED.store(if set { 2 } else { 1 }, Ordering::Relaxed);
                set
            }
            v => v == 2,
        }
    }

    impl PageSlab {
        pub const fn new() -> PageSlab {
            PageSlab {
                free: Mutex::new(Free {
                    head: 0,
                    next: 0,
                    end: 0,
                }),
            }
        }
    }

    fn served(l: Layout) -> bool {
        (SMALLEST..=LARGEST).contains(&l.size()) && l.align() <= 64 && enabled()
    }

    /// A new region, aligned to 2 MiB and advised for huge pages; `None`
    /// if the mapping fails.
    fn map_region() -> Option<usize> {
        // SAFETY: an anonymous private mapping of fresh memory; the part
        // past the aligned region is left mapped and unused.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                REGION + HUGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let start = (p as usize).next_multiple_of(HUGE);
        // SAFETY: the range lies inside the mapping just made.
        #[cfg(target_os = "linux")]
        unsafe {
            libc::madvise(start as *mut libc::c_void, REGION, libc::MADV_HUGEPAGE)
        };
        Some(start)
    }

    // SAFETY: blocks are BLOCK bytes, 64-aligned (regions start on 2 MiB
    // boundaries and BLOCK is a multiple of 64), handed out once until
    // freed; every other layout goes to `System`, and the choice depends on
    // the layout only, so `dealloc` sends each block back where it came
    // from.
    unsafe impl GlobalAlloc for PageSlab {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            if !served(l) {
                return unsafe { System.alloc(l) };
            }
            let mut f = self.free.lock().unwrap_or_else(|e| e.into_inner());
            if f.head != 0 {
                let p = f.head;
                // SAFETY: a free block's first word links the next one.
                f.head = unsafe { *(p as *const usize) };
                return p as *mut u8;
            }
            if f.next + BLOCK > f.end {
                let Some(start) = map_region() else {
                    return std::ptr::null_mut();
                };
                (f.next, f.end) = (start, start + REGION);
            }
            let p = f.next;
            f.next += BLOCK;
            p as *mut u8
        }

        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            if !served(l) {
                return unsafe { System.dealloc(p, l) };
            }
            let mut f = self.free.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the block is ours and no longer in use.
            unsafe { *(p as *mut usize) = f.head };
            f.head = p as usize;
        }
    }
}
