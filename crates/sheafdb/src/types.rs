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

/// A fast hasher for maps keyed by the id newtypes (sequential integers):
/// one multiply instead of SipHash. Not for keys an attacker chooses.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
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

/// `HashMap` with [`IdHasher`].
pub type IdMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;
