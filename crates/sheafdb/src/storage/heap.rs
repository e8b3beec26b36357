//! Giving freed heap memory back to the system after a transaction far
//! larger than the engine's own memory limits (design.md "Memory
//! bound", *Large transactions*).
//!
//! A write transaction's write set is as large as the caller makes it:
//! loading a million pairs in one transaction builds a few hundred MiB of
//! small heap allocations. Once they are freed, glibc's allocator keeps
//! the memory for reuse: only free space at the top of its heap is
//! returned on `free`, so a process that loaded once with a 16 MiB page
//! cache went on holding about 16 times that (`examples/cache_memory`).
//! [`give_back`] asks the allocator to return every whole free page it
//! holds (`malloc_trim(0)`): about 45 ms for 235 MiB on the development
//! machine, against the seconds such a transaction took. Memory the
//! engine bounds itself (the write buffer, the page cache) is not given
//! back: it is reused by the next commits.
//!
//! Elsewhere (another C library, Miri) it does nothing.

#![allow(unsafe_code)]

/// Bytes of writes from which a transaction's end gives memory back: a
/// quarter of the default write-buffer total (a transaction smaller than
/// that frees no more than the buffer reuses), and large enough that the
/// give-back (a few milliseconds for this much) is a small part of the
/// transaction's own time (about 0.3 s for 150,000 inserts).
pub const GIVE_BACK_FROM: u64 = 32 << 20;

/// Returns the allocator's whole free pages to the system; true if any
/// was returned. May take tens of milliseconds on a heap of hundreds of
/// MiB: call it only after freeing about [`GIVE_BACK_FROM`] bytes or more.
pub fn give_back() -> bool {
    #[cfg(test)]
    ON_GIVE_BACK.with(|f| {
        if let Some(f) = &*f.borrow() {
            f();
        }
    });
    #[cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]
    {
        // SAFETY: `malloc_trim` only walks and advises glibc's own free
        // lists, under its arena locks; no memory in use is touched.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu", not(miri))))]
    {
        false
    }
}

#[cfg(test)]
thread_local! {
    /// Called by [`give_back`] on its thread (tests look at the locks held
    /// then).
    pub static ON_GIVE_BACK: std::cell::RefCell<Option<Box<dyn Fn()>>> =
        const { std::cell::RefCell::new(None) };
}
