//! Identifier newtypes shared by every layer.
//!
//! Every id that crosses a module boundary is one of these; a bare `u64`
//! never does. On disk they are stored little-endian, fixed width.

use std::fmt;

macro_rules! id_newtype {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub u64);

        impl $name {
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_newtype!(
    /// Index of a page in the data file (byte offset = id × page size).
    PageId
);
id_newtype!(
    /// Column family id. Never reused within one database file.
    CfId
);
id_newtype!(
    /// Table id, unique within its column family and never reused there.
    TableId
);
id_newtype!(
    /// A committed state of one column family. Strictly increasing.
    Version
);
id_newtype!(
    /// Log sequence number of a WAL record. Strictly increasing.
    Lsn
);

/// Above every value an engine counter reaches: versions, superblock
/// generations, CF and table ids grow by one per commit, checkpoint or
/// creation, and an LSN counts logged bytes (4 EiB). The decoders refuse
/// larger values from the files, so the arithmetic on them (the next id,
/// a WAL use's end) never overflows.
pub const COUNTER_LIMIT: u64 = 1 << 62;

impl CfId {
    /// Owner of the system tree, allocator metadata and superblocks.
    pub const SYSTEM: CfId = CfId(0);
    /// The column family behind the single-CF API (`Database::begin_write`).
    pub const DEFAULT: CfId = CfId(1);
}

impl PageId {
    /// Byte offset of this page in a file of `page_size`-byte pages.
    #[inline]
    pub fn offset(self, page_size: usize) -> u64 {
        self.0 * page_size as u64
    }

    /// The page `n` pages after this one.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, n: u64) -> PageId {
        PageId(self.0 + n)
    }
}

impl Version {
    /// The version after this one.
    #[inline]
    pub fn next(self) -> Version {
        Version(self.0 + 1)
    }
}

/// A fast hasher for maps keyed by the id newtypes: a multiply and a
/// finaliser instead of SipHash. Ids come from files too (table ids in
/// WAL records, page ids in pointers), so it starts from a seed drawn at
/// random once per process ([`IdHashBuilder`]) and mixes every input bit
/// into the bucket bits: ids chosen to collide (sharing their low bits,
/// say) cannot be computed offline. (Unseeded, with no finaliser, ids
/// `i << 40` all fell into one bucket: replay of 80,000 such tables ran
/// 17 times slower; found by review. hashbrown's default hasher, which
/// the write sets use for keys, was tried in its place: it put 20,000 ids
/// `i << 20` in 5,313 of 65,536 buckets, where this one fills about
/// 17,000, see the test below.)
#[derive(Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // MurmurHash3's 64-bit finaliser: a bijection in which every
        // input bit reaches every output bit.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Builds [`IdHasher`]s from the process's seed (read once per map).
#[derive(Clone, Copy)]
pub struct IdHashBuilder(u64);

impl Default for IdHashBuilder {
    fn default() -> Self {
        static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        IdHashBuilder(*SEED.get_or_init(|| {
            std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u64)
        }))
    }
}

impl std::hash::BuildHasher for IdHashBuilder {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.0)
    }
}

/// `HashMap` with [`IdHasher`].
pub type IdMap<K, V> = std::collections::HashMap<K, V, IdHashBuilder>;

/// `HashSet` with [`IdHasher`].
pub type IdSet<K> = std::collections::HashSet<K, IdHashBuilder>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// Ids that differ only in high bits, or only in low ones, spread
    /// over a table's bucket bits (the low bits hashbrown indexes by).
    #[test]
    fn ids_sharing_their_low_bits_spread_over_buckets() {
        let b = IdHashBuilder::default();
        for shift in [0, 20, 40, 48] {
            let buckets: std::collections::HashSet<u64> = (0..20_000u64)
                .map(|i| b.hash_one(TableId(i << shift)) & 0xffff)
                .collect();
            // 20,000 random draws from 65,536 buckets hit about 17,200.
            assert!(
                buckets.len() > 15_000,
                "shift {shift}: {} buckets",
                buckets.len()
            );
        }
    }
}
