//! The lock order of ARCHITECTURE.md as data, checked per thread in debug
//! builds.
//!
//! Owns: [`Rank`] (one per ordered lock) and the wrappers
//! [`RankedMutex`]/[`RankedRwLock`] whose guards record, per thread, which
//! ranks are held. In debug builds taking a lock whose rank is not above
//! every rank the thread holds panics with both names: a lock-order
//! inversion is caught where it happens, not when two threads finally
//! deadlock on it. Release builds keep only the plain locks (the guard's
//! bookkeeping compiles to nothing).
//!
//! Invariants: a thread takes ranked locks in increasing rank; only ranks
//! that say so ([`Rank::nests`]) may be held twice (several CFs' writer
//! locks or transaction states, taken in `CfId` order by multi-CF
//! transactions).

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The ordered locks, lowest first: a thread holding one may only take
/// locks of a higher rank (ARCHITECTURE.md, "Locks, in the order they may
/// be taken").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// `cf.writer`: one write transaction of a CF.
    Writer = 10,
    /// `WriteCore.state`: one table operation, or a commit up to its
    /// return.
    TxnState = 12,
    /// `WriteCore.open_tables`.
    OpenTables = 14,
    /// `db.registry.create_drop`: one CF creation or drop.
    CreateDrop = 20,
    /// `db.health.close_gate`: a commit in flight (read) or close (write).
    CloseGate = 30,
    /// `db.ckpt.sys`: one checkpoint.
    Sys = 40,
    /// `db.registry.change`: a CF record until the registry shows it.
    CfChange = 50,
    /// `cf.commit_gate`: a WAL append until the version is the CF's head.
    CommitGate = 60,
    /// `cf.publish`: the publication queue.
    Publish = 90,
    /// The WAL's state (group commit).
    WalState = 100,
}

impl Rank {
    /// True if a thread may hold this rank more than once.
    #[cfg(debug_assertions)]
    pub fn nests(self) -> bool {
        matches!(self, Rank::Writer | Rank::TxnState | Rank::CommitGate)
    }
}

#[cfg(debug_assertions)]
thread_local! {
    static HELD: std::cell::RefCell<Vec<Rank>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Proof that this thread recorded `rank` as held; forgets it when
/// dropped. Not `Send`: the record is per thread.
#[derive(Debug)]
pub struct Held {
    #[cfg(debug_assertions)]
    rank: Rank,
    _not_send: PhantomData<*const ()>,
}

/// Records that this thread is about to take a lock of `rank`; in debug
/// builds panics if it holds a lock that must come after it.
pub fn acquire(rank: Rank) -> Held {
    #[cfg(debug_assertions)]
    HELD.with(|h| {
        let mut held = h.borrow_mut();
        if let Some(top) = held.iter().max() {
            let ok = *top < rank || (*top == rank && rank.nests());
            assert!(
                ok,
                "lock order: taking {rank:?} while holding {held:?} (ARCHITECTURE.md lock order)"
            );
        }
        held.push(rank);
    });
    #[cfg(not(debug_assertions))]
    let _ = rank;
    Held {
        #[cfg(debug_assertions)]
        rank,
        _not_send: PhantomData,
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        HELD.with(|h| {
            let mut held = h.borrow_mut();
            let at = held.iter().rposition(|r| *r == self.rank);
            debug_assert!(at.is_some(), "released {:?} not recorded", self.rank);
            if let Some(i) = at {
                held.remove(i);
            }
        });
    }
}

/// The ranks this thread holds (the record exists in debug builds only).
#[cfg(all(test, debug_assertions))]
pub fn held_here() -> Vec<Rank> {
    HELD.with(|h| h.borrow().clone())
}

/// Set aside while user code runs under an engine lock (an `extract_if`
/// closure under its transaction's state): what the user's code takes is
/// ordered by the user, not by this table. Restores the record on drop.
#[derive(Debug)]
pub struct Suspended {
    #[cfg(debug_assertions)]
    saved: Vec<Rank>,
    _not_send: PhantomData<*const ()>,
}

/// Sets this thread's record aside until the returned value is dropped.
pub fn suspend() -> Suspended {
    Suspended {
        #[cfg(debug_assertions)]
        saved: HELD.with(|h| std::mem::take(&mut *h.borrow_mut())),
        _not_send: PhantomData,
    }
}

impl Drop for Suspended {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        HELD.with(|h| {
            // What the user's code still holds (a transaction it began
            // and kept) stays recorded, after the engine's own.
            let mut held = h.borrow_mut();
            let kept = std::mem::take(&mut *held);
            *held = std::mem::take(&mut self.saved);
            held.extend(kept);
        });
    }
}

/// A mutex with a rank.
#[derive(Debug, Default)]
pub struct RankedMutex<T, const R: u8> {
    inner: Mutex<T>,
}

/// A guard of a [`RankedMutex`]: the lock, and the per-thread record.
#[derive(Debug)]
pub struct RankedGuard<'a, T> {
    // Field order: the lock is released before the record is dropped.
    guard: MutexGuard<'a, T>,
    _held: Held,
}

impl<T> Deref for RankedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for RankedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<'a, T> RankedGuard<'a, T> {
    /// The plain guard, for a condition variable wait.
    pub fn inner(&mut self) -> &mut MutexGuard<'a, T> {
        &mut self.guard
    }
}

/// The [`Rank`] with discriminant `r` (the const parameter of the ranked
/// wrappers).
const fn rank_of(r: u8) -> Rank {
    match r {
        10 => Rank::Writer,
        20 => Rank::CreateDrop,
        30 => Rank::CloseGate,
        40 => Rank::Sys,
        50 => Rank::CfChange,
        60 => Rank::CommitGate,
        12 => Rank::TxnState,
        14 => Rank::OpenTables,
        90 => Rank::Publish,
        100 => Rank::WalState,
        _ => panic!("no such rank"),
    }
}

impl<T, const R: u8> RankedMutex<T, R> {
    /// The rank of this lock (checked when the type is instantiated).
    pub const RANK: Rank = rank_of(R);

    /// A mutex holding `value`.
    pub const fn new(value: T) -> Self {
        RankedMutex {
            inner: Mutex::new(value),
        }
    }

    /// Takes the lock (rank-checked in debug builds).
    pub fn lock(&self) -> RankedGuard<'_, T> {
        let held = acquire(Self::RANK);
        RankedGuard {
            guard: self.inner.lock(),
            _held: held,
        }
    }

    /// Mutable access through exclusive ownership (no lock taken).
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }
}

/// A reader-writer lock with a rank.
#[derive(Debug, Default)]
pub struct RankedRwLock<T, const R: u8> {
    inner: RwLock<T>,
}

/// A shared guard of a [`RankedRwLock`].
#[derive(Debug)]
pub struct RankedRead<'a, T> {
    _guard: RwLockReadGuard<'a, T>,
    _held: Held,
}

/// An exclusive guard of a [`RankedRwLock`].
#[derive(Debug)]
pub struct RankedWrite<'a, T> {
    _guard: RwLockWriteGuard<'a, T>,
    _held: Held,
}

impl<T, const R: u8> RankedRwLock<T, R> {
    /// The rank of this lock.
    pub const RANK: Rank = rank_of(R);

    /// A lock holding `value`.
    pub const fn new(value: T) -> Self {
        RankedRwLock {
            inner: RwLock::new(value),
        }
    }

    /// Takes the lock shared (rank-checked in debug builds).
    pub fn read(&self) -> RankedRead<'_, T> {
        let held = acquire(Self::RANK);
        RankedRead {
            _guard: self.inner.read(),
            _held: held,
        }
    }

    /// Takes the lock exclusively (rank-checked in debug builds).
    pub fn write(&self) -> RankedWrite<'_, T> {
        let held = acquire(Self::RANK);
        RankedWrite {
            _guard: self.inner.write(),
            _held: held,
        }
    }
}

/// Rank discriminants as const parameters of the wrappers.
pub mod ranks {
    use super::Rank;
    /// [`Rank::CreateDrop`].
    pub const CREATE_DROP: u8 = Rank::CreateDrop as u8;
    /// [`Rank::CloseGate`].
    pub const CLOSE_GATE: u8 = Rank::CloseGate as u8;
    /// [`Rank::Sys`].
    pub const SYS: u8 = Rank::Sys as u8;
    /// [`Rank::CfChange`].
    pub const CF_CHANGE: u8 = Rank::CfChange as u8;
    /// [`Rank::CommitGate`].
    pub const COMMIT_GATE: u8 = Rank::CommitGate as u8;
    /// [`Rank::TxnState`].
    pub const TXN_STATE: u8 = Rank::TxnState as u8;
    /// [`Rank::OpenTables`].
    pub const OPEN_TABLES: u8 = Rank::OpenTables as u8;
    /// [`Rank::Publish`].
    pub const PUBLISH: u8 = Rank::Publish as u8;
    /// [`Rank::WalState`].
    pub const WAL_STATE: u8 = Rank::WalState as u8;
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn increasing_ranks_are_allowed_and_released_ranks_forgotten() {
        let a: RankedMutex<u32, { ranks::SYS }> = RankedMutex::new(1);
        let b: RankedMutex<u32, { ranks::PUBLISH }> = RankedMutex::new(2);
        {
            let _ga = a.lock();
            let _gb = b.lock();
            assert_eq!(held_here(), [Rank::Sys, Rank::Publish]);
        }
        assert!(held_here().is_empty());
        // Taken alone, in any order: no edge.
        drop(b.lock());
        drop(a.lock());
    }

    #[test]
    fn an_inversion_panics_with_both_names() {
        let r = std::thread::spawn(|| {
            let a: RankedMutex<u32, { ranks::SYS }> = RankedMutex::new(1);
            let b: RankedMutex<u32, { ranks::PUBLISH }> = RankedMutex::new(2);
            let _gb = b.lock();
            let _ga = a.lock();
        })
        .join();
        let msg = r.expect_err("inversion must panic");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("taking Sys while holding [Publish]"), "{msg}");
    }

    #[test]
    fn nesting_ranks_may_repeat_others_may_not() {
        let w1 = acquire(Rank::Writer);
        let w2 = acquire(Rank::Writer);
        drop(w1);
        drop(w2);
        let r = std::thread::spawn(|| {
            let _s1 = acquire(Rank::Sys);
            let _s2 = acquire(Rank::Sys);
        })
        .join();
        assert!(r.is_err(), "Sys twice must panic");
    }
}
