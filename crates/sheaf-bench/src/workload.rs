//! Workload data: seeded keys and values, and key choosers.
//!
//! Everything is derived from one `u64` seed so a run is repeatable. Keys
//! are stored flat (one allocation); values are fixed-length windows into a
//! shared pool of random bytes, so a 5 M-pair data set costs only its keys.
//! Nothing here knows about engines' APIs or timing.

use std::ops::Range;

use rand::rngs::StdRng;
use rand::{Rng, RngExt, SeedableRng};

use crate::engines::KvRef;

/// Size of the random pool values are cut from.
const VALUE_POOL_BYTES: usize = 1 << 20;

/// A seeded random number generator.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// A fixed set of random keys with values of one length.
pub struct Dataset {
    key_len: usize,
    val_len: usize,
    keys: Vec<u8>,
    pool: Vec<u8>,
}

impl Dataset {
    /// `n` random keys of `key_len` bytes and values of `val_len` bytes.
    pub fn random(n: usize, key_len: usize, val_len: usize, seed: u64) -> Self {
        assert!(key_len >= 8, "keys shorter than 8 bytes may collide");
        let mut r = rng(seed);
        let mut keys = vec![0u8; n * key_len];
        r.fill_bytes(&mut keys);
        let mut pool = vec![0u8; VALUE_POOL_BYTES + val_len];
        r.fill_bytes(&mut pool);
        Dataset {
            key_len,
            val_len,
            keys,
            pool,
        }
    }

    /// `n` distinct 8-byte keys (a bijective mix of the index, so no
    /// collisions) with values of `val_len` bytes.
    pub fn distinct_u64(n: usize, val_len: usize, seed: u64) -> Self {
        let mut keys = Vec::with_capacity(n * 8);
        for i in 0..n as u64 {
            keys.extend_from_slice(&mix64(i ^ seed.rotate_left(17)).to_be_bytes());
        }
        let mut pool = vec![0u8; VALUE_POOL_BYTES + val_len];
        rng(seed).fill_bytes(&mut pool);
        Dataset {
            key_len: 8,
            val_len,
            keys,
            pool,
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len() / self.key_len
    }

    /// Whether the data set has no keys.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Key `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        &self.keys[i * self.key_len..(i + 1) * self.key_len]
    }

    /// Value `i` (a window of the pool; `version` picks another window, for
    /// updates that must change the value).
    pub fn value(&self, i: usize, version: usize) -> &[u8] {
        let spread = (i.wrapping_mul(7919) ^ version.wrapping_mul(104_729)) % VALUE_POOL_BYTES;
        &self.pool[spread..spread + self.val_len]
    }

    /// Pairs `range` as borrowed slices, ready for a write call.
    pub fn pairs(&self, range: Range<usize>) -> Vec<KvRef<'_>> {
        range.map(|i| (self.key(i), self.value(i, 0))).collect()
    }

    /// Keys of `indices`.
    pub fn keys_of(&self, indices: impl Iterator<Item = usize>) -> Vec<&[u8]> {
        indices.map(|i| self.key(i)).collect()
    }
}

/// A bijective 64-bit mixer (splitmix64 finaliser).
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `n` uniformly random indices below `bound`.
pub fn uniform_indices(n: usize, bound: usize, seed: u64) -> Vec<usize> {
    let mut r = rng(seed);
    (0..n).map(|_| r.random_range(0..bound)).collect()
}

/// Scrambled Zipfian index chooser (the YCSB generator, Gray et al.): a few
/// keys are hot, and the hot keys are spread over the key space.
pub struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zeta_n: f64,
    eta: f64,
}

impl Zipfian {
    /// YCSB's default skew.
    pub const DEFAULT_THETA: f64 = 0.99;

    /// A chooser over `0..n` with skew `theta` (0 < theta < 1).
    pub fn new(n: usize, theta: f64) -> Self {
        assert!(n >= 2, "zipfian needs at least two items");
        assert!(theta > 0.0 && theta < 1.0, "theta out of range");
        let n = n as u64;
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zeta_n = zeta(n);
        let zeta_2 = zeta(2);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n);
        Zipfian {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta_n,
            eta,
        }
    }

    /// The next index, in `0..n`.
    pub fn sample(&self, r: &mut impl Rng) -> usize {
        let u: f64 = r.random();
        let uz = u * self.zeta_n;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            let v = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
            v.min(self.n - 1)
        };
        (mix64(rank) % self.n) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_is_repeatable_and_sized() {
        let a = Dataset::random(100, 24, 150, 7);
        let b = Dataset::random(100, 24, 150, 7);
        assert_eq!(a.len(), 100);
        assert_eq!(a.key(42), b.key(42));
        assert_eq!(a.key(42).len(), 24);
        assert_eq!(a.value(42, 0).len(), 150);
        assert_ne!(a.value(42, 0), a.value(42, 1));
        assert_eq!(a.pairs(10..20).len(), 10);
    }

    #[test]
    fn distinct_keys_do_not_collide() {
        let d = Dataset::distinct_u64(10_000, 8, 3);
        let mut keys: Vec<&[u8]> = (0..d.len()).map(|i| d.key(i)).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), 10_000);
    }

    #[test]
    fn zipfian_is_skewed_and_in_range() {
        let z = Zipfian::new(1_000, Zipfian::DEFAULT_THETA);
        let mut r = rng(1);
        let mut counts = vec![0u32; 1_000];
        for _ in 0..100_000 {
            counts[z.sample(&mut r)] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top10: u32 = counts[..10].iter().sum();
        // Under a uniform choice the top 10 of 1,000 would get about 1%.
        assert!(top10 > 20_000, "top 10 keys got only {top10} of 100000");
    }
}
