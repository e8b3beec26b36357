//! Freeing large write buffers off the caller's thread.
//!
//! Owns: one process-wide thread (`sheafdb-reclaim`, started on first
//! use) that drops what it is handed, and the bounded queue to it.
//!
//! Why: a buffer of half a million writes holds about two million heap
//! allocations (skip-list nodes, key and value copies, key-index
//! entries), scattered over memory. Freeing them took 300 ms of the
//! 690 ms an explicit checkpoint spent folding 500,000 removals (a CPU
//! profile; design.md "Freeing a folded buffer"), and whoever drops the
//! last reference pays: the folder (`checkpoint()`, `compact()`,
//! `close()`, a stalled writer) or a reader ending an old snapshot.
//!
//! Bounds: the queue holds at most [`QUEUE_DEPTH`] items; a hand-off that
//! finds it full (the thread is behind) drops on the caller's thread, as
//! does every hand-off if the thread could not be started. So at most
//! that many buffers' memory waits to be freed at any time, on top of
//! the buffers in use. Freeing only releases memory: nothing durable or
//! visible depends on when it happens.
//!
//! Must not know: what it frees.

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Mutex, OnceLock};

/// Items queued for the thread at most (see the module doc).
pub const QUEUE_DEPTH: usize = 4;

type Item = Box<dyn Send>;

/// The sending half of the queue; `None` if the thread could not start.
fn queue() -> Option<&'static Mutex<SyncSender<Item>>> {
    static QUEUE: OnceLock<Option<Mutex<SyncSender<Item>>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = sync_channel::<Item>(QUEUE_DEPTH);
            let spawned = std::thread::Builder::new()
                .name("sheafdb-reclaim".into())
                .spawn(move || {
                    // Ends if every sender is gone (never: the sender is
                    // in a static); each item is dropped as it arrives.
                    while let Ok(item) = rx.recv() {
                        drop(item);
                    }
                });
            spawned.ok().map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Drops `item` on the reclaim thread, or here if its queue is full or
/// the thread is missing. Never blocks on the thread.
pub fn drop_later(item: impl Send + 'static) {
    let item: Item = Box::new(item);
    let Some(queue) = queue() else {
        return; // `item` drops here
    };
    // A poisoned lock only means a sender panicked mid-send; the sender
    // itself is still usable.
    let tx = queue.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match tx.try_send(item) {
        Ok(()) => {}
        // Full, or the thread is gone: free it here.
        Err(TrySendError::Full(item) | TrySendError::Disconnected(item)) => drop(item),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;

    /// Counts its drops and the threads they ran on.
    struct Counted(Arc<AtomicUsize>, Arc<Mutex<Vec<std::thread::ThreadId>>>);

    impl Drop for Counted {
        fn drop(&mut self) {
            (self.1.lock().unwrap()).push(std::thread::current().id());
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// One test, not two: both use the one process-wide thread, and a
    /// queue kept full by the second part would make the first part's
    /// items all drop here.
    #[test]
    fn items_are_dropped_once_elsewhere_and_a_full_queue_never_waits() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let threads = Arc::new(Mutex::new(Vec::new()));
        let n = 200;
        for _ in 0..n {
            drop_later(Counted(dropped.clone(), threads.clone()));
        }
        let start = Instant::now();
        while dropped.load(Ordering::SeqCst) < n && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            n,
            "an item was never dropped"
        );
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            n,
            "an item was dropped twice"
        );
        let me = std::thread::current().id();
        let elsewhere = threads.lock().unwrap().iter().filter(|t| **t != me).count();
        assert!(elsewhere > 0, "no item was dropped off the caller's thread");

        // With the thread busy on slow items and the queue full, the
        // caller drops the next item itself instead of waiting for room.
        struct Slow;
        impl Drop for Slow {
            fn drop(&mut self) {
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        let start = Instant::now();
        for _ in 0..QUEUE_DEPTH + 2 {
            drop_later(Slow);
        }
        // Waiting for room would take (QUEUE_DEPTH + 1) × 500 ms; dropping
        // what does not fit here takes at most two of them.
        let took = start.elapsed();
        assert!(
            took < Duration::from_millis(2500),
            "a hand-off waited: {took:?}"
        );
        assert!(
            took >= Duration::from_millis(400),
            "nothing was dropped here although the queue was full: {took:?}"
        );
    }
}
