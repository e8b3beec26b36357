//! Tools for tests, of sheafdb and of applications built on it: the
//! fault-injecting storage ([`crate::storage::sim`]) lives in `storage`;
//! this module gives access to the pieces of the file format and the WAL
//! that tests and benchmarks need to craft damaged files or measure the
//! log on its own. Not part of the stable API: these follow the format.
//!
//! Owns one helper, [`in_parallel`], which spreads a test's independent
//! cases (crash points, seeds) over the cores; the rest are re-exports.

pub use crate::format::superblock::{Superblock, WalMark, SLOT_LEN};
pub use crate::types::{CfId, Lsn, PageId};
pub use crate::wal::{open as open_wal, ReplaySummary, Wal, WalOptions};

/// Calls `case(i)` for every `i` in `cases`, spread over one thread per
/// core. For the long crash sweeps (every step, every seed) whose cases
/// are independent: run alone they kept one of CI's two cores idle. A
/// panicking case (its message names its step or seed) stops the other
/// threads at their next case once it unwinds (after the panic hook has
/// printed) and fails the caller.
pub fn in_parallel(cases: std::ops::Range<u64>, case: impl Fn(u64) + Sync) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let next = AtomicU64::new(cases.start);
    let failed = AtomicBool::new(false);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                /// Marks the sweep failed when its thread unwinds.
                struct OnPanic<'a>(&'a AtomicBool);
                impl Drop for OnPanic<'_> {
                    fn drop(&mut self) {
                        if std::thread::panicking() {
                            self.0.store(true, Ordering::Relaxed);
                        }
                    }
                }
                let _guard = OnPanic(&failed);
                while !failed.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= cases.end {
                        break;
                    }
                    case(i);
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::in_parallel;
    use std::sync::Mutex;

    #[test]
    fn every_case_runs_exactly_once() {
        let seen = Mutex::new(Vec::new());
        in_parallel(3..503, |i| seen.lock().unwrap().push(i));
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, (3..503).collect::<Vec<_>>());
    }

    #[test]
    fn a_panicking_case_fails_the_sweep_and_stops_it() {
        let ran = std::sync::atomic::AtomicU64::new(0);
        // Cases of 5 ms: the other threads stop once the panic unwinds,
        // which is after the panic hook has printed (with a backtrace,
        // tens of milliseconds), so trivial cases would all have run.
        let r = std::panic::catch_unwind(|| {
            in_parallel(0..1000, |i| {
                ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                assert_ne!(i, 7, "case {i}");
                std::thread::sleep(std::time::Duration::from_millis(5));
            })
        });
        assert!(r.is_err(), "the sweep returned though case 7 panicked");
        let ran = ran.into_inner();
        assert!(
            ran < 1000,
            "the sweep went on after the panic ({ran} cases)"
        );
    }
}
