//! Byte layouts of everything stored in the data file, and their codecs.
//!
//! Owns: the common page header ([`page`]), the superblock ([`superblock`]),
//! and the records of the system tree ([`records`]). Every layout is a table
//! at the top of its module and in `docs/design.md`.
//!
//! Must not know: how pages are cached, allocated or organised into trees.
//! All integers are little-endian fixed width. Decoders never panic: any byte
//! sequence gives a value or `Error::Corrupted`.

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

pub mod codec;
pub mod page;
pub mod records;
pub mod superblock;

/// Version of the on-disk format written by this build.
pub const FORMAT_VERSION: u32 = 4;

/// The format before the WAL anchor (rule O16): read, with the anchor not
/// trusted (an earlier build does not keep it up to date), and upgraded
/// by the next checkpoint.
pub const FORMAT_VERSION_NO_ANCHOR: u32 = 3;

/// The format before the superblock's WAL mark (design.md "Format version
/// history"): read as a mark of `WalMark::Unknown`, and upgraded by the
/// first checkpoint of a read-write open.
pub const FORMAT_VERSION_NO_WAL_MARK: u32 = 2;
