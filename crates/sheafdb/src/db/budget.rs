//! The database-wide write-buffer budget (design.md "Write buffer",
//! "Memory bound").
//!
//! Counts the bytes of every live CF's *current* buffer (what a fold can
//! give back; frozen buffers kept alive by old snapshots are the readers'
//! and are freed with them). Three thresholds:
//!
//! * `fold_total`: past it, a buffered commit asks the background
//!   checkpointer to fold (as a CF past half its own fold threshold does);
//! * `stall_at` (¾ of the limit): a writer *beginning* a transaction
//!   stalls and folds the largest buffers itself, down to `fold_total`
//!   (bounded in time: it never waits forever for a busy CF);
//! * `limit`: never exceeded (invariant B1). A buffered commit reserves
//!   its bytes before its WAL append; a commit that does not fit writes
//!   its trees instead (folding its own buffer, which frees bytes).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Bytes buffered over all CFs, and the thresholds that bound them.
#[derive(Debug)]
pub(crate) struct BufferBudget {
    used: AtomicU64,
    fold_total: u64,
    limit: u64,
    stalls: AtomicU64,
    /// Stalled writers wait here for bytes to be released.
    freed: Mutex<()>,
    wake: Condvar,
}

impl BufferBudget {
    /// A budget folding past `fold_total` bytes and holding at most
    /// `limit` (`fold_total` is clamped to the limit).
    pub fn new(fold_total: u64, limit: u64) -> BufferBudget {
        assert!(limit > 0, "a buffer limit of 0 bytes");
        BufferBudget {
            used: AtomicU64::new(0),
            fold_total: fold_total.min(limit),
            limit,
            stalls: AtomicU64::new(0),
            freed: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    /// Bytes buffered now, over all CFs.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The hard limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Writers that stalled so far.
    pub fn stalls(&self) -> u64 {
        self.stalls.load(Ordering::Relaxed)
    }

    /// True past the total fold trigger.
    pub fn over_fold_total(&self) -> bool {
        self.used() >= self.fold_total
    }

    /// True at or past the stall mark (¾ of the limit).
    pub fn over_stall_mark(&self) -> bool {
        self.used() >= self.limit - self.limit / 4
    }

    /// Reserves `bytes` for a buffered commit if they fit under the limit
    /// (B1: checked and added in one step, so concurrent committers of
    /// different CFs cannot overshoot together).
    pub fn try_reserve(&self, bytes: u64) -> bool {
        let fits = |used: u64| used.checked_add(bytes).filter(|n| *n <= self.limit);
        let reserved = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, fits)
            .is_ok();
        debug_assert!(self.used() <= self.limit, "B1: buffer bytes over the limit");
        reserved
    }

    /// [`BufferBudget::try_reserve`] as a guard that gives the bytes back
    /// unless [`Reserved::keep`] says they went into a buffer.
    pub fn reserve(&self, bytes: u64) -> Option<Reserved<'_>> {
        // Built only on success (`then_some` would build, and drop, a
        // guard that releases bytes never reserved).
        self.try_reserve(bytes).then(|| Reserved {
            budget: self,
            bytes,
        })
    }

    /// Gives back `bytes`: a reservation whose commit failed, a buffer
    /// folded into the trees, a dropped CF's buffer.
    pub fn release(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        assert!(
            before >= bytes,
            "B2: released {bytes} buffer bytes of {before} accounted"
        );
        let _g = self.freed.lock();
        self.wake.notify_all();
    }

    /// Counts a stall.
    pub fn note_stall(&self) {
        self.stalls.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits up to `timeout` for bytes to be released.
    pub fn wait_release(&self, timeout: Duration) {
        let mut g = self.freed.lock();
        self.wake.wait_for(&mut g, timeout);
    }
}

/// Bytes reserved for a buffered commit; released on drop unless kept.
#[derive(Debug)]
#[must_use = "a reservation is released when dropped"]
pub(crate) struct Reserved<'a> {
    budget: &'a BufferBudget,
    bytes: u64,
}

impl Reserved<'_> {
    /// The commit inserted the reserved bytes into its buffer: they stay
    /// accounted until a fold or a CF drop releases them.
    pub fn keep(mut self) {
        self.bytes = 0;
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_never_pass_the_limit() {
        let b = BufferBudget::new(50, 100);
        assert!(b.try_reserve(60));
        assert!(!b.try_reserve(41), "60 + 41 > 100");
        assert!(b.try_reserve(40));
        assert_eq!(b.used(), 100);
        assert!(b.over_stall_mark() && b.over_fold_total());
        b.release(100);
        assert_eq!(b.used(), 0);
        assert!(!b.over_fold_total());
    }

    #[test]
    fn concurrent_reservations_stay_under_the_limit() {
        let b = std::sync::Arc::new(BufferBudget::new(500, 1000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || (0..1000).filter(|_| b.try_reserve(7)).count() as u64)
            })
            .collect();
        let won: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(won, 1000 / 7, "every reservation that fit, and no more");
        assert_eq!(b.used(), won * 7);
    }

    #[test]
    fn a_refused_reservation_releases_nothing() {
        let b = BufferBudget::new(10, 10);
        assert!(b.try_reserve(8));
        assert!(b.reserve(5).is_none());
        assert_eq!(b.used(), 8, "a refused reservation gave bytes back");
        b.reserve(2).expect("fits").keep();
        assert_eq!(b.used(), 10);
        drop(b.reserve(0));
        assert_eq!(b.used(), 10);
    }

    #[test]
    #[should_panic(expected = "B2")]
    fn releasing_more_than_accounted_is_a_bug() {
        let b = BufferBudget::new(10, 10);
        assert!(b.try_reserve(5));
        b.release(6);
    }
}
