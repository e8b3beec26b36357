//! A growing Bloom filter over a buffer's `(table, key)` pairs, so a point
//! read of a key the buffer does not hold (most reads) costs one or two
//! cache lines instead of a skip-list search.
//!
//! Owns: the bit array and its growth. One thread adds (the buffer's
//! committer); any number query without a lock. When the filter passes
//! its capacity the adder builds one twice the size from every key so far
//! and swaps it in (`ArcSwap`), so the cost of growth is amortised O(1).
//!
//! Why queries never miss a visible key: a reader's snapshot version is
//! published after the entries it covers were added (and after any swap
//! that preceded them), and the reader loads the filter after taking its
//! snapshot; so the filter it loads holds every key it can see.
//!
//! Must not know: versions, values, the skip list.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::types::TableId;

/// Bits per key the filter is sized for (1–2 % false positives with four
/// probes in one block).
const BITS_PER_KEY: u64 = 10;
/// Keys the first filter is sized for.
const FIRST_CAPACITY: u64 = 1024;

/// The hasher of every filter and write set in this process: seeded at
/// random once (hashbrown's default, foldhash), so keys chosen to collide
/// cannot be computed offline (a write set is a hash table keyed by this
/// hash: colliding keys would make its inserts, and a replay's, quadratic).
/// Nothing on disk depends on it.
fn hasher() -> &'static hashbrown::DefaultHashBuilder {
    static HASHER: std::sync::OnceLock<hashbrown::DefaultHashBuilder> = std::sync::OnceLock::new();
    HASHER.get_or_init(hashbrown::DefaultHashBuilder::default)
}

/// A 64-bit hash of a table id and key.
pub fn hash(table: TableId, key: &[u8]) -> u64 {
    hasher().hash_one((table.0, key))
}

/// One cache line of a filter: every probe of a key falls in one block.
#[derive(Debug)]
#[repr(align(64))]
struct Block([AtomicU64; 8]);

/// Probes per key, all in one block.
const PROBES: u32 = 4;

/// A blocked Bloom filter of a fixed size: the probes of a key all fall in
/// one 64-byte block, so a query or an add touches one cache line (a
/// filter over a million keys does not fit in the CPU's caches, and a
/// write that asks several of them must not miss once per probe). Any
/// number of threads add and query without a lock (an add is visible to
/// a query that happens after it).
#[derive(Debug)]
pub struct Bits {
    blocks: Vec<Block>,
    capacity: u64,
}

impl Bits {
    /// A filter sized for `capacity` keys at 1–2 % false positives (more
    /// keys only raise that rate: a filter never loses a key).
    pub fn new(capacity: u64) -> Bits {
        let nblocks = Bits::bytes_for(capacity) / 64;
        Bits {
            blocks: (0..nblocks)
                .map(|_| Block(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
            capacity,
        }
    }

    /// Keys it was sized for.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes of its bit array.
    pub fn bytes(&self) -> u64 {
        self.blocks.len() as u64 * 64
    }

    /// Bytes the bit array of a filter for `capacity` keys takes: at
    /// least `BITS_PER_KEY` bits a key, a power of two, one block at least.
    pub fn bytes_for(capacity: u64) -> u64 {
        let bits = capacity.saturating_mul(BITS_PER_KEY);
        bits.checked_next_power_of_two().unwrap_or(1 << 63).max(512) / 8
    }

    /// The block of `h` (from its high half) and the bit positions in it
    /// (from its low half, mixed up: nine bits a probe).
    #[inline]
    fn probes(&self, h: u64) -> (&Block, [u32; PROBES as usize]) {
        debug_assert!(self.blocks.len().is_power_of_two());
        let block = &self.blocks[((h >> 32) as usize) & (self.blocks.len() - 1)];
        let x = (h & 0xFFFF_FFFF).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (
            block,
            std::array::from_fn(|i| ((x >> (64 - 9 * (i as u32 + 1))) & 511) as u32),
        )
    }

    /// Adds a key's hash.
    pub fn add(&self, h: u64) {
        let (block, probes) = self.probes(h);
        for p in probes {
            block.0[(p / 64) as usize].fetch_or(1 << (p % 64), Ordering::Release);
        }
    }

    /// False only if no key with this hash was added. Without early
    /// exits: the caller may ask several filters, and their cache misses
    /// then overlap instead of waiting on each other's branches.
    #[inline]
    pub fn may_contain(&self, h: u64) -> bool {
        let (block, probes) = self.probes(h);
        probes.iter().fold(true, |all, &p| {
            all & (block.0[(p / 64) as usize].load(Ordering::Acquire) & (1 << (p % 64)) != 0)
        })
    }
}

/// The filter of one buffer.
#[derive(Debug)]
pub struct KeyFilter {
    bits: ArcSwap<Bits>,
    /// Hashes added so far, to rebuild a larger filter (only the adder
    /// touches it).
    hashes: parking_lot::Mutex<Vec<u64>>,
}

impl Default for KeyFilter {
    fn default() -> Self {
        KeyFilter {
            bits: ArcSwap::from_pointee(Bits::new(FIRST_CAPACITY)),
            hashes: parking_lot::Mutex::new(Vec::new()),
        }
    }
}

impl KeyFilter {
    /// Adds a key's hash (one adder at a time).
    #[cfg(test)]
    pub fn add(&self, h: u64) {
        self.adder().add(h);
    }

    /// An adder holding the adder's lock and the current bits, for many
    /// adds at the cost of one lock and one load (a commit's keys).
    pub fn adder(&self) -> FilterAdder<'_> {
        FilterAdder {
            filter: self,
            hashes: self.hashes.lock(),
            bits: self.bits.load_full(),
        }
    }

    /// False only if no key with this hash was added.
    pub fn may_contain(&self, h: u64) -> bool {
        self.bits.load().may_contain(h)
    }
}

/// Adds hashes to one filter (see [`KeyFilter::adder`]); readers see
/// each add as it is made, and a grown filter as soon as it is built.
pub struct FilterAdder<'f> {
    filter: &'f KeyFilter,
    hashes: parking_lot::MutexGuard<'f, Vec<u64>>,
    bits: Arc<Bits>,
}

impl FilterAdder<'_> {
    /// Adds a key's hash.
    pub fn add(&mut self, h: u64) {
        self.hashes.push(h);
        if self.hashes.len() as u64 > self.bits.capacity {
            let bigger = Bits::new(self.bits.capacity * 2);
            for &x in self.hashes.iter() {
                bigger.add(x);
            }
            self.bits = Arc::new(bigger);
            self.filter.bits.store(self.bits.clone());
        } else {
            self.bits.add(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_blocked_filter_lets_few_strangers_by() {
        for capacity in [1_000u64, 100_000] {
            let bits = Bits::new(capacity);
            assert_eq!(bits.bytes() % 64, 0, "whole blocks");
            let h = |i: u64| hash(TableId(1), &i.to_be_bytes());
            (0..capacity).for_each(|i| bits.add(h(i)));
            assert!((0..capacity).all(|i| bits.may_contain(h(i))));
            let strangers = (capacity..capacity + 100_000)
                .filter(|&i| bits.may_contain(h(i)))
                .count();
            eprintln!("{capacity}: {strangers} of 100,000 strangers pass");
            assert!(strangers < 2_500, "{capacity}: {strangers} of 100,000");
        }
    }

    #[test]
    fn added_keys_are_always_found_and_most_others_are_not() {
        let f = KeyFilter::default();
        for i in 0..50_000u64 {
            // Alone, or in batches of up to 5,000 through one adder
            // (which grows the filter under it).
            if i % 10_000 < 5_000 {
                f.add(hash(TableId(3), &i.to_be_bytes()));
            } else if i % 10_000 == 5_000 {
                let mut a = f.adder();
                for j in i..i + 5_000 {
                    a.add(hash(TableId(3), &j.to_be_bytes()));
                    // Visible to readers at once, across growth.
                    if j % 997 == 0 {
                        assert!(f.may_contain(hash(TableId(3), &j.to_be_bytes())));
                    }
                }
            }
            // Everything added so far, across growth, is still found.
            if i % 997 == 0 {
                for j in 0..=i {
                    assert!(
                        f.may_contain(hash(TableId(3), &j.to_be_bytes())),
                        "lost {j}"
                    );
                }
            }
        }
        let false_positives = (50_000..150_000u64)
            .filter(|i| f.may_contain(hash(TableId(3), &i.to_be_bytes())))
            .count();
        assert!(
            false_positives < 3_000,
            "{false_positives} false positives in 100,000"
        );
        // Another table with the same key is another key.
        let other = (0..10_000u64)
            .filter(|i| f.may_contain(hash(TableId(4), &i.to_be_bytes())))
            .count();
        assert!(other < 300, "{other}");
    }

    /// Keys built to collide under an unseeded hash (the MurmurHash3
    /// finaliser chained over 8-byte words, this module's hash before):
    /// `k1 ‖ (mix(mix(table ^ C) ^ k1) ^ X)` all had one hash, so a write
    /// set of them was one long probe chain (20,000 inserts in 1.8 s
    /// instead of 15 ms). Seeded at random, they spread.
    #[test]
    fn keys_built_to_collide_offline_do_not_collide() {
        fn mix(mut h: u64) -> u64 {
            h ^= h >> 33;
            h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
            h ^= h >> 33;
            h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
            h ^ (h >> 33)
        }
        let table = 1u64;
        let h0 = mix(table ^ 0x5851_f42d_4c95_7f2d);
        let hashes: std::collections::HashSet<u64> = (0..10_000u64)
            .map(|k1| {
                let mut k = k1.to_le_bytes().to_vec();
                k.extend_from_slice(&(mix(h0 ^ k1) ^ 0x1234_5678).to_le_bytes());
                hash(TableId(table), &k)
            })
            .collect();
        assert!(hashes.len() > 9_990, "{} distinct hashes", hashes.len());
    }

    #[test]
    fn hashes_spread_short_and_long_keys() {
        let mut seen = std::collections::HashSet::new();
        for len in 0..40usize {
            for b in 0..=255u8 {
                seen.insert(hash(TableId(1), &vec![b; len]));
            }
        }
        assert_eq!(seen.len(), 39 * 256 + 1, "the empty key is one key");
    }
}
