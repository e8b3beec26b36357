//! Records stored in the system tree, table catalogs and the metadata blob.
//!
//! ## System tree (owned by `CfId::SYSTEM`)
//! | key | value |
//! |---|---|
//! | `b'C'` + cf id (u64 big-endian) | [`CfDescriptor`] |
//!
//! ## `CfDescriptor` value
//! | size | field |
//! |---|---|
//! | 4+n | name (u32 length + UTF-8) |
//! | 8 | table catalog root page (0 = empty) |
//! | 8 | table catalog entry count |
//! | 8 | next table id |
//! | 8 | checkpoint LSN (WAL records at or below it are in the base) |
//! | 8 | committed version at the checkpoint |
//! | 4 + 16·n | free page ranges inside the CF's extents: (start u64, pages u64) |
//!
//! ## Table catalog (one per CF, owned by that CF): key = table name bytes
//! | size | field |
//! |---|---|
//! | 8 | table id |
//! | 8 | root page (0 = empty) |
//! | 8 | entry count |
//! | 4+n | key type name |
//! | 4+n | value type name |
//!
//! ## Metadata blob (a `Blob` run referenced by the superblock)
//! | size | field |
//! |---|---|
//! | 8 | file length in pages |
//! | 4 + 24·n | extents: (start u64, pages u64, owner cf u64; `u64::MAX` = free) |
//! | 4 + 16·n | free page ranges inside system-owned extents |

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

use crate::error::{Error, Result};
use crate::format::codec::{Reader, Writer};
use crate::types::{CfId, Lsn, PageId, TableId, Version, COUNTER_LIMIT};

/// Owner value marking a free extent in the metadata blob.
pub const FREE_EXTENT_OWNER: u64 = u64::MAX;

/// Key of a CF descriptor in the system tree.
pub fn cf_key(cf: CfId) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(b'C');
    k.extend_from_slice(&cf.0.to_be_bytes());
    k
}

/// Decodes the CF id from a descriptor key.
pub fn decode_cf_key(k: &[u8]) -> Result<CfId> {
    match k.split_first() {
        Some((b'C', id)) => match <[u8; 8]>::try_from(id) {
            Ok(id) => Ok(CfId(u64::from_be_bytes(id))),
            Err(_) => Err(Error::corrupted("bad cf descriptor key", "system tree")),
        },
        _ => Err(Error::corrupted("bad cf descriptor key", "system tree")),
    }
}

/// A run of pages `[start, start + pages)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PageRange {
    /// First page.
    pub start: PageId,
    /// Number of pages (> 0).
    pub pages: u64,
}

impl PageRange {
    /// One past the last page.
    pub fn end(&self) -> u64 {
        self.start.0 + self.pages
    }
}

fn write_ranges(w: &mut Writer, ranges: &[PageRange]) {
    w.u32(ranges.len() as u32);
    for r in ranges {
        w.u64(r.start.0).u64(r.pages);
    }
}

fn read_ranges(r: &mut Reader<'_>) -> Result<Vec<PageRange>> {
    let n = r.count(16)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = PageId(r.u64()?);
        let pages = r.u64()?;
        if pages == 0 || start.0.checked_add(pages).is_none() {
            return Err(Error::corrupted(
                "empty or overflowing page range",
                "ranges",
            ));
        }
        out.push(PageRange { start, pages });
    }
    Ok(out)
}

fn opt_page(v: u64) -> Option<PageId> {
    (v != 0).then_some(PageId(v))
}

/// What the system tree says about one column family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CfDescriptor {
    /// Catalog name.
    pub name: String,
    /// Root of the table catalog tree.
    pub catalog_root: Option<PageId>,
    /// Entries in the table catalog.
    pub catalog_len: u64,
    /// Next table id to hand out.
    pub next_table: TableId,
    /// Last WAL record contained in this checkpoint.
    pub checkpoint_lsn: Lsn,
    /// Version of the CF at the checkpoint.
    pub version: Version,
    /// Free page ranges inside the CF's extents at the checkpoint.
    pub free: Vec<PageRange>,
}

impl CfDescriptor {
    /// Encodes as a system tree value.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.bytes(self.name.as_bytes())
            .u64(self.catalog_root.map_or(0, |p| p.0))
            .u64(self.catalog_len)
            .u64(self.next_table.0)
            .u64(self.checkpoint_lsn.0)
            .u64(self.version.0);
        write_ranges(&mut w, &self.free);
        w.buf
    }

    /// Decodes a system tree value.
    pub fn decode(b: &[u8]) -> Result<CfDescriptor> {
        let mut r = Reader::new(b, "cf descriptor");
        let name = std::str::from_utf8(r.bytes()?)
            .map_err(|_| Error::corrupted("cf name not UTF-8", "cf descriptor"))?
            .to_string();
        let d = CfDescriptor {
            name,
            catalog_root: opt_page(r.u64()?),
            catalog_len: r.u64()?,
            next_table: TableId(r.u64()?),
            checkpoint_lsn: Lsn(r.u64()?),
            version: Version(r.u64()?),
            free: read_ranges(&mut r)?,
        };
        r.finish()?;
        let counters = [d.next_table.0, d.checkpoint_lsn.0, d.version.0];
        if counters.iter().any(|&c| c > COUNTER_LIMIT) {
            return Err(Error::corrupted(
                "next table id, checkpoint LSN or version past its range",
                "cf descriptor",
            ));
        }
        Ok(d)
    }
}

/// What a CF's table catalog says about one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMeta {
    /// Id, unique in the CF.
    pub id: TableId,
    /// Root page of the table's tree.
    pub root: Option<PageId>,
    /// Number of entries.
    pub len: u64,
    /// `Key::type_name()` the table was created with.
    pub key_type: String,
    /// `Value::type_name()` the table was created with.
    pub value_type: String,
}

impl TableMeta {
    /// Encodes as a catalog value.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(self.id.0)
            .u64(self.root.map_or(0, |p| p.0))
            .u64(self.len)
            .bytes(self.key_type.as_bytes())
            .bytes(self.value_type.as_bytes());
        w.buf
    }

    /// Decodes a catalog value.
    pub fn decode(b: &[u8]) -> Result<TableMeta> {
        let mut r = Reader::new(b, "table meta");
        let id = TableId(r.u64()?);
        let root = opt_page(r.u64()?);
        let len = r.u64()?;
        let utf8 = |b: &[u8]| {
            std::str::from_utf8(b)
                .map(str::to_string)
                .map_err(|_| Error::corrupted("type name not UTF-8", "table meta"))
        };
        let key_type = utf8(r.bytes()?)?;
        let value_type = utf8(r.bytes()?)?;
        r.finish()?;
        Ok(TableMeta {
            id,
            root,
            len,
            key_type,
            value_type,
        })
    }
}

/// One extent of the extent table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentRecord {
    /// Pages covered.
    pub range: PageRange,
    /// Owner, `None` for a free extent.
    pub owner: Option<CfId>,
}

/// The metadata blob: global extent table and the system CF's free space.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetaBlob {
    /// File length in pages.
    pub file_pages: u64,
    /// Every extent, sorted by start.
    pub extents: Vec<ExtentRecord>,
    /// Free ranges inside system extents.
    pub sys_free: Vec<PageRange>,
}

impl MetaBlob {
    /// Encodes the blob payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(self.file_pages);
        w.u32(self.extents.len() as u32);
        for e in &self.extents {
            w.u64(e.range.start.0)
                .u64(e.range.pages)
                .u64(e.owner.map_or(FREE_EXTENT_OWNER, |c| c.0));
        }
        write_ranges(&mut w, &self.sys_free);
        w.buf
    }

    /// Decodes the blob payload.
    pub fn decode(b: &[u8]) -> Result<MetaBlob> {
        let mut r = Reader::new(b, "metadata blob");
        let file_pages = r.u64()?;
        let n = r.count(24)?;
        let mut extents = Vec::with_capacity(n);
        for _ in 0..n {
            let start = PageId(r.u64()?);
            let pages = r.u64()?;
            let owner = r.u64()?;
            if pages == 0 || start.0.checked_add(pages).is_none() {
                return Err(Error::corrupted("bad extent", "metadata blob"));
            }
            extents.push(ExtentRecord {
                range: PageRange { start, pages },
                owner: (owner != FREE_EXTENT_OWNER).then_some(CfId(owner)),
            });
        }
        let sys_free = read_ranges(&mut r)?;
        r.finish()?;
        Ok(MetaBlob {
            file_pages,
            extents,
            sys_free,
        })
    }
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests index and unwrap their own fixtures"
)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_round_trip_and_truncation() {
        let d = CfDescriptor {
            name: "orders".into(),
            catalog_root: Some(PageId(77)),
            catalog_len: 3,
            next_table: TableId(4),
            checkpoint_lsn: Lsn(99),
            version: Version(12),
            free: vec![PageRange {
                start: PageId(10),
                pages: 5,
            }],
        };
        let b = d.encode();
        assert_eq!(CfDescriptor::decode(&b).unwrap(), d);
        for cut in 0..b.len() {
            assert!(CfDescriptor::decode(&b[..cut]).is_err());
        }
    }

    #[test]
    fn table_meta_round_trip() {
        let m = TableMeta {
            id: TableId(3),
            root: None,
            len: 0,
            key_type: "u64".into(),
            value_type: "str".into(),
        };
        assert_eq!(TableMeta::decode(&m.encode()).unwrap(), m);
    }

    #[test]
    fn meta_blob_round_trip_and_huge_count_rejected() {
        let m = MetaBlob {
            file_pages: 100,
            extents: vec![
                ExtentRecord {
                    range: PageRange {
                        start: PageId(2),
                        pages: 16,
                    },
                    owner: Some(CfId::SYSTEM),
                },
                ExtentRecord {
                    range: PageRange {
                        start: PageId(18),
                        pages: 82,
                    },
                    owner: None,
                },
            ],
            sys_free: vec![],
        };
        let mut b = m.encode();
        assert_eq!(MetaBlob::decode(&b).unwrap(), m);
        b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(MetaBlob::decode(&b).is_err());
    }
}
