//! CPU cache hints for bytes already in memory.
//!
//! Owns: [`prefetch`], which asks the CPU to start loading a cache line
//! the caller is about to read. It lives in `storage/` because the crate
//! keeps all of its `unsafe` code here (`lib.rs` denies it elsewhere); it
//! has nothing to do with files.
//!
//! Why: a range scan reads each leaf cell's header and key in slot order,
//! and the cells of a page read from the file are cold. Without a hint
//! every cell is a cache miss taken one after the other; with one issued a
//! few cells ahead, the misses overlap (design.md "Read path", *Range
//! iteration*).
//!
//! Must not know: pages, B-trees, what the bytes mean.
#![allow(unsafe_code)]

/// Hints that the cache line holding `bytes[0]` will be read soon. A hint
/// only: it reads nothing the program can observe, never faults, and does
/// nothing for an empty slice or on targets without such an instruction.
#[inline]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if !bytes.is_empty() {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has
        // (part of the target's baseline). A prefetch never faults and
        // writes nothing; the pointer is in bounds of a live slice anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}
