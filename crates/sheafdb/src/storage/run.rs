//! Reference-counted runs of bytes with a header, in one allocation, whose
//! common sizes live on huge pages (design.md "Read path", *Huge pages*).
//!
//! A [`RunArc<H>`] is one pointer to `[count | len | header: H | bytes]`
//! (a [`Run<H>`]); cloning it counts, dropping the last frees it. A
//! [`UniqueRun<H>`] is the only reference, so it derefs mutably; it becomes
//! shared without a copy. A `RunArc` is thin, so an `arc_swap` slot can
//! hold one (`Option<RunArc<H>>` through [`arc_swap::RefCnt`]).
//!
//! Runs of one of the page sizes (4 KiB to 64 KiB) come from
//! [`super::slab`]: 2 MiB regions advised for transparent huge pages,
//! so the page cache's memory costs one TLB entry per 2 MiB instead of one
//! per page (a descent that misses the CPU caches used to miss the TLB as
//! well, on every level). Other lengths use the global allocator.
//!
//! Here because this layer holds the crate's `unsafe` code; `format::page`
//! builds its page runs on it and nothing else uses it.
//!
//! Must not know: pages, B-trees, files.

#![allow(unsafe_code)]

use std::alloc::Layout;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{self, AtomicUsize, Ordering};

use super::slab;

/// A run: its reference count, its length, a header and the bytes, in
/// one allocation (unsized; reached through a [`RunArc`] or
/// [`UniqueRun`]).
#[repr(C)]
pub struct Run<H> {
    count: AtomicUsize,
    len: usize,
    header: H,
    bytes: [u8],
}

impl<H> Run<H> {
    /// The header.
    #[inline]
    pub fn header(&self) -> &H {
        &self.header
    }

    /// The header, mutable (only through a unique reference).
    #[inline]
    pub fn header_mut(&mut self) -> &mut H {
        &mut self.header
    }

    /// The bytes. (Not named `bytes`: `format::page` wraps these in
    /// methods of that name that keep its header in step, and an inherent
    /// method would shadow them.)
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes, mutable (only through a unique reference).
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

/// The allocation of a run of `len` bytes with header `H`, and the offset
/// of its bytes: the layout `#[repr(C)]` gives [`Run<H>`].
fn layout_of<H>(len: usize) -> (Layout, usize) {
    let fields = Layout::new::<AtomicUsize>()
        .extend(Layout::new::<usize>())
        .and_then(|(l, _)| l.extend(Layout::new::<H>()))
        .and_then(|(l, _)| l.extend(Layout::array::<u8>(len)?));
    match fields {
        Ok((l, bytes_at)) => (l.pad_to_align(), bytes_at),
        Err(_) => panic!("a run of {len} bytes does not fit in memory"),
    }
}

/// True if a run of `len` bytes with header `H` is allocated from the
/// huge-page regions.
pub fn on_huge_pages<H>(len: usize) -> bool {
    slab::serves(layout_of::<H>(len).0)
}

/// A shared, immutable run (see the module docs). Never null, so
/// `Option<RunArc<H>>` is one pointer too.
pub struct RunArc<H> {
    ptr: NonNull<u8>,
    _h: PhantomData<H>,
}

// SAFETY: a run is shared between threads like `Arc<Run<H>>`: its count is
// atomic, its bytes immutable while shared, its header reached only by
// `&` (so `H: Sync`) and dropped by whichever thread lets go last (so
// `H: Send`).
unsafe impl<H: Send + Sync> Send for RunArc<H> {}
// SAFETY: as above.
unsafe impl<H: Send + Sync> Sync for RunArc<H> {}

impl<H> RunArc<H> {
    /// A new run of `len` bytes with `header`, its bytes set by `init`
    /// (which must write every byte: it gets them zeroed or copied, see the
    /// constructors).
    fn allocate(header: H, len: usize, init: impl FnOnce(*mut u8)) -> UniqueRun<H> {
        let (layout, bytes_at) = layout_of::<H>(len);
        let p = slab::allocate(layout);
        // SAFETY: `p` is a fresh allocation of `layout`, whose fields lie
        // at the offsets `#[repr(C)]` gives `Run<H>`: count at 0, len right
        // after it (both usize-sized and aligned), the header next, the
        // bytes at `bytes_at`, `len` of them in bounds.
        unsafe {
            p.as_ptr().cast::<AtomicUsize>().write(AtomicUsize::new(1));
            p.as_ptr().cast::<usize>().add(1).write(len);
            let run = Self::fat(p);
            std::ptr::addr_of_mut!((*run).header).write(header);
            let bytes = std::ptr::addr_of_mut!((*run).bytes).cast::<u8>();
            debug_assert_eq!(bytes, p.as_ptr().add(bytes_at));
            init(bytes);
        }
        UniqueRun(RunArc {
            ptr: p,
            _h: PhantomData,
        })
    }

    /// A run holding a copy of `bytes`.
    pub fn from_slice(header: H, bytes: &[u8]) -> UniqueRun<H> {
        // SAFETY: `dst` has room for `bytes.len()` bytes and is a fresh
        // allocation, so the two cannot overlap.
        Self::allocate(header, bytes.len(), |dst| unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len())
        })
    }

    /// A run of `len` zero bytes (one pass over the memory).
    pub fn zeroed(header: H, len: usize) -> UniqueRun<H> {
        // SAFETY: `dst` has room for `len` bytes.
        Self::allocate(header, len, |dst| unsafe {
            std::ptr::write_bytes(dst, 0, len)
        })
    }

    /// The run at `p` as a (fat) pointer.
    ///
    /// # Safety
    /// `p` must point at a live run made by [`RunArc::allocate`].
    #[inline]
    unsafe fn fat(p: NonNull<u8>) -> *mut Run<H> {
        // SAFETY (caller): the length field follows the count.
        let len = unsafe { p.as_ptr().cast::<usize>().add(1).read() };
        std::ptr::slice_from_raw_parts_mut(p.as_ptr(), len) as *mut Run<H>
    }

    #[inline]
    fn run(&self) -> &Run<H> {
        // SAFETY: this reference keeps the run alive; shared access only.
        unsafe { &*Self::fat(self.ptr) }
    }

    /// References held to this run (a snapshot: other threads may change
    /// it at once).
    pub fn count(this: &Self) -> usize {
        this.run().count.load(Ordering::Acquire)
    }

    /// True if this is the only reference.
    pub fn is_unique(&self) -> bool {
        Self::count(self) == 1
    }

    /// The run, mutable, if this is the only reference.
    pub fn get_mut(this: &mut Self) -> Option<&mut Run<H>> {
        // SAFETY: a count of one means no other reference exists, and
        // `&mut self` keeps this one from being cloned meanwhile.
        this.is_unique()
            .then(|| unsafe { &mut *Self::fat(this.ptr) })
    }

    /// The run as the unique owner, if this is the only reference.
    pub fn try_unique(this: Self) -> Result<UniqueRun<H>, Self> {
        match this.is_unique() {
            true => Ok(UniqueRun(this)),
            false => Err(this),
        }
    }

    /// The address of the allocation (tests compare it).
    pub fn heap_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
}

impl<H> Deref for RunArc<H> {
    type Target = Run<H>;
    #[inline]
    fn deref(&self) -> &Run<H> {
        self.run()
    }
}

impl<H> Clone for RunArc<H> {
    #[inline]
    fn clone(&self) -> Self {
        // Relaxed as in `std::sync::Arc`: a new reference is made from one
        // the caller holds, which orders everything it needs.
        let old = self.run().count.fetch_add(1, Ordering::Relaxed);
        if old > isize::MAX as usize {
            // A count this high means references leaked without bound.
            std::process::abort();
        }
        RunArc {
            ptr: self.ptr,
            _h: PhantomData,
        }
    }
}

impl<H> Drop for RunArc<H> {
    fn drop(&mut self) {
        if self.run().count.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Every other holder's use happened before their release; see it.
        atomic::fence(Ordering::Acquire);
        // SAFETY: the count reached zero, so this was the last reference:
        // drop the header in place and free the allocation with the layout
        // it was made with.
        unsafe {
            let run = Self::fat(self.ptr);
            let len = self.ptr.as_ptr().cast::<usize>().add(1).read();
            std::ptr::drop_in_place(std::ptr::addr_of_mut!((*run).header));
            slab::free(self.ptr, layout_of::<H>(len).0);
        }
    }
}

// SAFETY: the pointer is the allocation's address, the same for every
// reference to one run and stable while any exists; `into_ptr` hands the
// reference over without counting and `from_ptr` takes it back; none of
// these panics.
unsafe impl<H> arc_swap::RefCnt for RunArc<H> {
    type Base = u8;

    #[inline]
    fn into_ptr(me: Self) -> *mut u8 {
        let p = me.ptr.as_ptr();
        std::mem::forget(me);
        p
    }

    #[inline]
    fn as_ptr(me: &Self) -> *mut u8 {
        me.ptr.as_ptr()
    }

    #[inline]
    unsafe fn from_ptr(ptr: *const u8) -> Self {
        RunArc {
            // SAFETY (caller): `ptr` came from `into_ptr`, so is not null.
            ptr: unsafe { NonNull::new_unchecked(ptr.cast_mut()) },
            _h: PhantomData,
        }
    }
}

/// A run with one reference (this one): readable and writable;
/// [`UniqueRun::shareable`] makes it a [`RunArc`] without a copy.
pub struct UniqueRun<H>(RunArc<H>);

impl<H> UniqueRun<H> {
    /// The run, now shareable.
    pub fn shareable(self) -> RunArc<H> {
        self.0
    }
}

impl<H> Deref for UniqueRun<H> {
    type Target = Run<H>;
    #[inline]
    fn deref(&self) -> &Run<H> {
        self.0.run()
    }
}

impl<H> DerefMut for UniqueRun<H> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Run<H> {
        debug_assert!(
            self.0.is_unique(),
            "engine invariant: a unique run has one reference"
        );
        // SAFETY: a `UniqueRun` is the only reference to its run (made
        // only from a fresh allocation or a count of one, never cloned).
        unsafe { &mut *RunArc::fat(self.0.ptr) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A header that counts its drops.
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn runs_of_every_size_hold_their_bytes_and_drop_their_header_once() {
        for len in [0, 1, 7, 4096, 8192, 4095, 65536, 3 * 4096, 200_000] {
            let drops = Arc::new(AtomicUsize::new(0));
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let run = RunArc::from_slice(Counted(drops.clone()), &data).shareable();
            let other = run.clone();
            assert_eq!(RunArc::count(&run), 2);
            assert_eq!(other.data(), &data[..], "{len}");
            drop(run);
            assert_eq!(drops.load(Ordering::SeqCst), 0, "dropped while referenced");
            drop(other);
            assert_eq!(drops.load(Ordering::SeqCst), 1, "{len}: dropped once");
            let zeroed = RunArc::zeroed((), len);
            assert!(zeroed.data().iter().all(|&b| b == 0));
            assert_eq!(zeroed.data().len(), len);
        }
    }

    #[test]
    fn only_a_unique_run_is_writable() {
        let mut owned = RunArc::zeroed(5u32, 4096);
        owned.data_mut()[10] = 9;
        *owned.header_mut() = 6;
        let mut shared = owned.shareable();
        assert_eq!((shared.data()[10], *shared.header()), (9, 6));
        let reader = shared.clone();
        assert!(RunArc::get_mut(&mut shared).is_none(), "shared run written");
        let shared = match RunArc::try_unique(shared) {
            Err(s) => s,
            Ok(_) => panic!("a shared run taken as unique"),
        };
        drop(reader);
        let mut back = RunArc::try_unique(shared).ok().expect("now unique");
        back.data_mut()[10] = 1;
        assert_eq!(back.data()[10], 1);
    }

    #[test]
    fn an_arc_swap_slot_holds_and_hands_out_runs() {
        let run = RunArc::from_slice(1u64, b"abc").shareable();
        let slot: arc_swap::ArcSwapAny<Option<RunArc<u64>>> =
            arc_swap::ArcSwapAny::new(Some(run.clone()));
        {
            let g = slot.load();
            assert_eq!(g.as_ref().map(|r| r.data()), Some(&b"abc"[..]));
        }
        let old = slot.swap(None);
        assert_eq!(old.map(|r| r.heap_ptr()), Some(run.heap_ptr()));
        assert_eq!(RunArc::count(&run), 1, "the slot let go of its reference");
    }

    #[test]
    fn runs_shared_across_threads_are_freed_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let run = RunArc::from_slice(Counted(drops.clone()), &[3u8; 4096]).shareable();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let r = run.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        let c = r.clone();
                        assert_eq!(c.data()[4095], 3);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("reader thread");
        }
        drop(run);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }
}
