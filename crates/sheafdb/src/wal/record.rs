//! The payload of a commit record: logical operations per column family.
//!
//! Owns: the commit payload layout, its encoder ([`encode_commit`] and the
//! incremental [`CommitEncoder`], which produce identical bytes) and its
//! zero-copy decoder ([`decode_commit`]). Must not know: frames, segments,
//! B-trees or how operations are applied.
//!
//! # Layout (little-endian)
//!
//! ```text
//! payload := version:u8 (=2; 1 is read too) part_count:u32 part*
//! part    := cf:u64 op_count:u32 op*
//! op      := tag:u8 fields
//! bytes   := len:u32 data[len]          (str: bytes holding UTF-8)
//! ```
//!
//! | tag | op | fields |
//! |----:|----|--------|
//! | 1 | `Put` | table:u64, key:bytes, value:bytes |
//! | 2 | `Delete` | table:u64, key:bytes |
//! | 3 | `ClearTable` | table:u64 |
//! | 4 | `CreateTable` | table:u64, name:str, key_type:str, value_type:str |
//! | 5 | `DropTable` | table:u64 |
//! | 6 | `RenameTable` | table:u64, new_name:str |
//! | 7 | `CreateCf` | name:str (the part's `cf` is the new CF's id) |
//! | 8 | `DropCf` | — |
//! | 9 | `CountChange` | table:u64, delta:i64 |
//! | 10 | `FoldRound` | upto:u64 (an LSN) |
//!
//! Version 2 added `CountChange`: a commit ends each part with one per
//! table it wrote, the change in that table's entry count the part's
//! writes made (so replay never reads a tree to keep `len()` O(1); see
//! `db::recover`). A version-1 record has none, and replay then looks the
//! written keys up instead. Version 2 also added `FoldRound`, the record
//! of a fold round that leaves more to fold. Versions above 2 are refused.
//!
//! A CF may appear in several parts (an incremental encoder starts a new
//! part whenever the CF changes); parts and ops apply in record order.
//! Decoding never panics and never allocates more than the input can hold:
//! every malformed input is `Error::Corrupted`.

#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]

use crate::error::{Error, Result};
use crate::format::codec::{self, Reader};
use crate::types::{CfId, Lsn, TableId};

const PAYLOAD_VERSION: u8 = 2;
/// The oldest payload version still read (no `CountChange` ops).
const OLDEST_PAYLOAD_VERSION: u8 = 1;
/// Offset of the part count in a payload (after the version byte).
const PART_COUNT_AT: usize = 1;
/// Bytes before the first part: version and part count.
const PAYLOAD_HEADER_BYTES: usize = PART_COUNT_AT + 4;
const _: () = assert!(PAYLOAD_HEADER_BYTES == 5, "version:u8 part_count:u32");
/// Smallest possible encoded part (cf and op count).
const MIN_PART_BYTES: usize = 12;
/// Smallest possible encoded op (`DropCf`: the tag alone).
const MIN_OP_BYTES: usize = 1;
const WHAT: &str = "WAL commit record";

const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
const TAG_CLEAR_TABLE: u8 = 3;
const TAG_CREATE_TABLE: u8 = 4;
const TAG_DROP_TABLE: u8 = 5;
const TAG_RENAME_TABLE: u8 = 6;
const TAG_CREATE_CF: u8 = 7;
const TAG_DROP_CF: u8 = 8;
const TAG_COUNT_CHANGE: u8 = 9;
const TAG_FOLD_ROUND: u8 = 10;

/// One logical operation of a commit, borrowing its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op<'a> {
    /// Insert or replace `key` with `value`.
    Put {
        /// Target table.
        table: TableId,
        /// Encoded key.
        key: &'a [u8],
        /// Encoded value (complete).
        value: &'a [u8],
    },
    /// Remove `key` (no-op if absent).
    Delete {
        /// Target table.
        table: TableId,
        /// Encoded key.
        key: &'a [u8],
    },
    /// Remove every entry of the table.
    ClearTable {
        /// Target table.
        table: TableId,
    },
    /// Create a table.
    CreateTable {
        /// Id of the new table.
        table: TableId,
        /// Its catalog name.
        name: &'a str,
        /// Key type name.
        key_type: &'a str,
        /// Value type name.
        value_type: &'a str,
    },
    /// Drop a table.
    DropTable {
        /// The table.
        table: TableId,
    },
    /// Rename a table.
    RenameTable {
        /// The table.
        table: TableId,
        /// Its new catalog name.
        new_name: &'a str,
    },
    /// Create the part's CF under `name`.
    CreateCf {
        /// Catalog name of the new CF.
        name: &'a str,
    },
    /// Drop the part's CF.
    DropCf,
    /// The writes of this part (its `Put`s and `Delete`s of `table`)
    /// changed the table's entry count by `delta`. Written after them, at
    /// commit; advisory: replay uses it instead of reading the tree, and
    /// the fold that later applies the writes checks it.
    CountChange {
        /// The table.
        table: TableId,
        /// Entries added minus entries removed.
        delta: i64,
    },
    /// A fold round that left more to fold: from this record on, the
    /// part's CF may have trees holding some writes of the records up to
    /// `upto` while their durable base is older (design.md "Fold
    /// rounds"), so replay over such a base cannot use `CountChange`s.
    FoldRound {
        /// The LSN the rounds fold up to (the fold's `upto_lsn`).
        upto: Lsn,
    },
}

/// The operations of one column family within a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CfPart<'a> {
    /// The column family.
    pub cf: CfId,
    /// Its operations, in order.
    pub ops: Vec<Op<'a>>,
}

/// Appends the encoding of `parts` to `out`.
///
/// # Panics
/// If a key, value or name is 4 GiB or longer, or there are 2³² or more
/// parts or ops in a part (callers bound these far lower).
pub fn encode_commit(parts: &[CfPart<'_>], out: &mut Vec<u8>) {
    let mut enc = CommitEncoder::from_vec(std::mem::take(out));
    for part in parts {
        enc.begin_part(part.cf);
        for op in &part.ops {
            enc.push(op);
        }
    }
    *out = enc.finish();
}

/// Builds a commit payload op by op, as a transaction runs.
///
/// Produces the same bytes as [`encode_commit`] given the same parts.
#[derive(Debug, Clone)]
pub struct CommitEncoder {
    buf: Vec<u8>,
    /// Offset of the part count field.
    part_count_at: usize,
    parts: u32,
    /// The open part: its CF, the offset of its op count and the ops so far.
    open_part: Option<OpenPart>,
}

/// A position of a [`CommitEncoder`] ([`CommitEncoder::mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncoderMark {
    len: usize,
    parts: u32,
    open_part: Option<OpenPart>,
}

impl EncoderMark {
    /// Payload bytes encoded up to the mark.
    pub fn len_bytes(&self) -> usize {
        self.len
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OpenPart {
    cf: CfId,
    op_count_at: usize,
    ops: u32,
}

/// Bytes a new [`CommitEncoder`] reserves: a few small operations.
pub const ENCODER_START_BYTES: usize = 512;

impl Default for CommitEncoder {
    fn default() -> Self {
        CommitEncoder::new()
    }
}

impl CommitEncoder {
    /// An encoder with no parts. Its buffer starts at
    /// [`ENCODER_START_BYTES`], so a small transaction's record is built
    /// without regrowing it (a no-sync single-row commit regrew it four
    /// times, each a `realloc`, about 5 % of the commit's CPU).
    pub fn new() -> CommitEncoder {
        CommitEncoder::from_vec(Vec::with_capacity(ENCODER_START_BYTES))
    }

    /// An encoder that appends to `buf` (whose existing bytes are kept).
    pub fn from_vec(mut buf: Vec<u8>) -> CommitEncoder {
        buf.push(PAYLOAD_VERSION);
        let part_count_at = buf.len();
        buf.extend_from_slice(&0u32.to_le_bytes());
        CommitEncoder {
            buf,
            part_count_at,
            parts: 0,
            open_part: None,
        }
    }

    /// Starts a new part for `cf` (even if the open part is for `cf` too).
    pub fn begin_part(&mut self, cf: CfId) {
        self.close_part();
        self.buf.extend_from_slice(&cf.0.to_le_bytes());
        let op_count_at = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_le_bytes());
        self.open_part = Some(OpenPart {
            cf,
            op_count_at,
            ops: 0,
        });
        self.parts = self.parts.checked_add(1).unwrap_or_else(|| {
            panic!("a commit record with 2^32 parts (one per CF) cannot be built")
        });
    }

    /// Appends `op` to the open part.
    ///
    /// # Panics
    /// If no part was begun.
    pub fn push(&mut self, op: &Op<'_>) {
        let Some(part) = self.open_part.as_mut() else {
            panic!("CommitEncoder::push without begin_part");
        };
        part.ops = part
            .ops
            .checked_add(1)
            .unwrap_or_else(|| panic!("a commit record part with 2^32 ops cannot be built"));
        encode_op(op, &mut self.buf);
    }

    /// Appends `op` for `cf`, starting a new part if the open one is for
    /// another CF (or none is open).
    pub fn push_for(&mut self, cf: CfId, op: &Op<'_>) {
        if self.open_part.map(|p| p.cf) != Some(cf) {
            self.begin_part(cf);
        }
        self.push(op);
    }

    /// Where the encoding stands now: [`CommitEncoder::truncate`] goes
    /// back to it (a savepoint of the transaction being logged).
    pub fn mark(&self) -> EncoderMark {
        EncoderMark {
            len: self.buf.len(),
            parts: self.parts,
            open_part: self.open_part,
        }
    }

    /// Forgets every op pushed after `mark` (which this encoder made).
    ///
    /// # Panics
    /// If `mark` is past what was encoded (a mark of another encoder).
    pub fn truncate(&mut self, mark: EncoderMark) {
        assert!(
            mark.len <= self.buf.len() && mark.len > self.part_count_at,
            "engine invariant: a mark of this encoder's past"
        );
        self.buf.truncate(mark.len);
        self.parts = mark.parts;
        self.open_part = mark.open_part;
    }

    /// Bytes encoded so far (the final payload length).
    pub fn len_bytes(&self) -> usize {
        self.buf.len()
    }

    /// The finished payload (including any bytes `from_vec` was given).
    pub fn finish(mut self) -> Vec<u8> {
        self.close_part();
        let at = self.part_count_at;
        codec::put_u32(&mut self.buf, at, self.parts);
        self.buf
    }

    fn close_part(&mut self) {
        if let Some(part) = self.open_part.take() {
            let at = part.op_count_at;
            codec::put_u32(&mut self.buf, at, part.ops);
        }
    }
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    // Records are bounded by `wal_record_max_bytes` (below 4 GiB) before
    // they are encoded; a longer field is an engine bug.
    let len = u32::try_from(b.len())
        .unwrap_or_else(|_| panic!("WAL field of {} bytes (4 GiB or more)", b.len()));
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(b);
}

fn encode_op(op: &Op<'_>, out: &mut Vec<u8>) {
    match *op {
        Op::Put { table, key, value } => {
            // One growth at most (bulk transactions append many).
            out.reserve(1 + 8 + 4 + key.len() + 4 + value.len());
            out.push(TAG_PUT);
            put_u64(out, table.0);
            put_bytes(out, key);
            put_bytes(out, value);
        }
        Op::Delete { table, key } => {
            out.push(TAG_DELETE);
            put_u64(out, table.0);
            put_bytes(out, key);
        }
        Op::ClearTable { table } => {
            out.push(TAG_CLEAR_TABLE);
            put_u64(out, table.0);
        }
        Op::CreateTable {
            table,
            name,
            key_type,
            value_type,
        } => {
            out.push(TAG_CREATE_TABLE);
            put_u64(out, table.0);
            put_bytes(out, name.as_bytes());
            put_bytes(out, key_type.as_bytes());
            put_bytes(out, value_type.as_bytes());
        }
        Op::DropTable { table } => {
            out.push(TAG_DROP_TABLE);
            put_u64(out, table.0);
        }
        Op::RenameTable { table, new_name } => {
            out.push(TAG_RENAME_TABLE);
            put_u64(out, table.0);
            put_bytes(out, new_name.as_bytes());
        }
        Op::CreateCf { name } => {
            out.push(TAG_CREATE_CF);
            put_bytes(out, name.as_bytes());
        }
        Op::DropCf => out.push(TAG_DROP_CF),
        Op::CountChange { table, delta } => {
            out.push(TAG_COUNT_CHANGE);
            put_u64(out, table.0);
            out.extend_from_slice(&delta.to_le_bytes());
        }
        Op::FoldRound { upto } => {
            out.push(TAG_FOLD_ROUND);
            put_u64(out, upto.0);
        }
    }
}

/// Joins the payloads of several CFs' transactions (each from a
/// [`CommitEncoder`]) into one payload whose parts are theirs in order, for
/// a multi-CF commit. `None` if any is `None` (a log that outgrew the WAL)
/// or there are none.
pub fn merge_payloads(payloads: &[Option<Vec<u8>>]) -> Option<Vec<u8>> {
    let mut parts = 0u32;
    let mut out: Vec<u8> = Vec::new();
    for p in payloads {
        let p = p.as_ref()?;
        let (head, body) = p.split_at_checked(PAYLOAD_HEADER_BYTES)?;
        let (version, count) = head.split_first()?;
        debug_assert_eq!(*version, PAYLOAD_VERSION);
        if out.is_empty() {
            out.push(*version);
            out.extend_from_slice(&0u32.to_le_bytes());
        }
        parts = parts.checked_add(u32::from_le_bytes(count.try_into().ok()?))?;
        out.extend_from_slice(body);
    }
    let count = out.get_mut(PART_COUNT_AT..PAYLOAD_HEADER_BYTES)?;
    count.copy_from_slice(&parts.to_le_bytes());
    Some(out)
}

/// Decodes a commit payload without copying keys, values or names.
pub fn decode_commit(payload: &[u8]) -> Result<Vec<CfPart<'_>>> {
    let mut r = Reader::new(payload, WHAT);
    let version = r.u8()?;
    if !(OLDEST_PAYLOAD_VERSION..=PAYLOAD_VERSION).contains(&version) {
        return Err(corrupted(format!(
            "unknown commit payload version {version} (this sheafdb reads \
             {OLDEST_PAYLOAD_VERSION} to {PAYLOAD_VERSION})"
        )));
    }
    let part_count = r.count(MIN_PART_BYTES)?;
    let mut parts = Vec::with_capacity(part_count);
    for _ in 0..part_count {
        parts.push(decode_part(&mut r)?);
    }
    r.finish()?;
    Ok(parts)
}

fn decode_part<'a>(r: &mut Reader<'a>) -> Result<CfPart<'a>> {
    let cf = CfId(r.u64()?);
    let op_count = r.count(MIN_OP_BYTES)?;
    let mut ops = Vec::with_capacity(op_count);
    for _ in 0..op_count {
        ops.push(decode_op(r)?);
    }
    Ok(CfPart { cf, ops })
}

fn decode_op<'a>(r: &mut Reader<'a>) -> Result<Op<'a>> {
    let tag = r.u8()?;
    let op = match tag {
        TAG_PUT => Op::Put {
            table: TableId(r.u64()?),
            key: r.bytes()?,
            value: r.bytes()?,
        },
        TAG_DELETE => Op::Delete {
            table: TableId(r.u64()?),
            key: r.bytes()?,
        },
        TAG_CLEAR_TABLE => Op::ClearTable {
            table: TableId(r.u64()?),
        },
        TAG_CREATE_TABLE => Op::CreateTable {
            table: TableId(r.u64()?),
            name: read_str(r)?,
            key_type: read_str(r)?,
            value_type: read_str(r)?,
        },
        TAG_DROP_TABLE => Op::DropTable {
            table: TableId(r.u64()?),
        },
        TAG_RENAME_TABLE => Op::RenameTable {
            table: TableId(r.u64()?),
            new_name: read_str(r)?,
        },
        TAG_CREATE_CF => Op::CreateCf { name: read_str(r)? },
        TAG_DROP_CF => Op::DropCf,
        TAG_COUNT_CHANGE => Op::CountChange {
            table: TableId(r.u64()?),
            delta: i64::from_le_bytes(r.u64()?.to_le_bytes()),
        },
        TAG_FOLD_ROUND => Op::FoldRound {
            upto: Lsn(r.u64()?),
        },
        other => return Err(corrupted(format!("unknown op tag {other}"))),
    };
    Ok(op)
}

fn read_str<'a>(r: &mut Reader<'a>) -> Result<&'a str> {
    std::str::from_utf8(r.bytes()?).map_err(|_| corrupted("name is not UTF-8".to_owned()))
}

fn corrupted(what: String) -> Error {
    Error::corrupted(what, WHAT)
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
    use proptest::prelude::*;

    #[test]
    fn merged_payloads_decode_to_every_part_in_order() {
        let mut a = CommitEncoder::new();
        a.push_for(CfId(3), &Op::DropTable { table: TableId(1) });
        a.push_for(CfId(4), &Op::ClearTable { table: TableId(2) });
        let mut b = CommitEncoder::new();
        b.push_for(
            CfId(9),
            &Op::Delete {
                table: TableId(5),
                key: b"k",
            },
        );
        let merged = merge_payloads(&[Some(a.finish()), Some(b.finish())]).unwrap();
        let parts = decode_commit(&merged).unwrap();
        let cfs: Vec<CfId> = parts.iter().map(|p| p.cf).collect();
        assert_eq!(cfs, vec![CfId(3), CfId(4), CfId(9)]);
        assert_eq!(
            parts[2].ops,
            vec![Op::Delete {
                table: TableId(5),
                key: b"k"
            }]
        );
        assert_eq!(
            merge_payloads(&[Some(vec![PAYLOAD_VERSION, 0, 0, 0, 0]), None]),
            None
        );
        assert_eq!(merge_payloads(&[]), None);
    }

    /// Owned mirror of `Op`, so proptest can generate it.
    #[derive(Debug, Clone)]
    enum OwnedOp {
        Put(u64, Vec<u8>, Vec<u8>),
        Delete(u64, Vec<u8>),
        Clear(u64),
        Create(u64, String, String, String),
        Drop(u64),
        Rename(u64, String),
        CreateCf(String),
        DropCf,
        Count(u64, i64),
        FoldRound(u64),
    }

    impl OwnedOp {
        fn as_op(&self) -> Op<'_> {
            match self {
                OwnedOp::Put(t, k, v) => Op::Put {
                    table: TableId(*t),
                    key: k,
                    value: v,
                },
                OwnedOp::Delete(t, k) => Op::Delete {
                    table: TableId(*t),
                    key: k,
                },
                OwnedOp::Clear(t) => Op::ClearTable { table: TableId(*t) },
                OwnedOp::Create(t, n, k, v) => Op::CreateTable {
                    table: TableId(*t),
                    name: n,
                    key_type: k,
                    value_type: v,
                },
                OwnedOp::Drop(t) => Op::DropTable { table: TableId(*t) },
                OwnedOp::Rename(t, n) => Op::RenameTable {
                    table: TableId(*t),
                    new_name: n,
                },
                OwnedOp::CreateCf(n) => Op::CreateCf { name: n },
                OwnedOp::DropCf => Op::DropCf,
                OwnedOp::Count(t, d) => Op::CountChange {
                    table: TableId(*t),
                    delta: *d,
                },
                OwnedOp::FoldRound(l) => Op::FoldRound { upto: Lsn(*l) },
            }
        }
    }

    fn op_strategy() -> impl Strategy<Value = OwnedOp> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..40);
        let text = || "\\PC{0,12}";
        prop_oneof![
            (any::<u64>(), bytes(), bytes()).prop_map(|(t, k, v)| OwnedOp::Put(t, k, v)),
            (any::<u64>(), bytes()).prop_map(|(t, k)| OwnedOp::Delete(t, k)),
            any::<u64>().prop_map(OwnedOp::Clear),
            (any::<u64>(), text(), text(), text())
                .prop_map(|(t, n, k, v)| OwnedOp::Create(t, n, k, v)),
            any::<u64>().prop_map(OwnedOp::Drop),
            (any::<u64>(), text()).prop_map(|(t, n)| OwnedOp::Rename(t, n)),
            text().prop_map(OwnedOp::CreateCf),
            Just(OwnedOp::DropCf),
            (any::<u64>(), any::<i64>()).prop_map(|(t, d)| OwnedOp::Count(t, d)),
            any::<u64>().prop_map(OwnedOp::FoldRound),
        ]
    }

    fn parts_strategy() -> impl Strategy<Value = Vec<(u64, Vec<OwnedOp>)>> {
        proptest::collection::vec(
            (0u64..5, proptest::collection::vec(op_strategy(), 0..8)),
            0..5,
        )
    }

    fn borrow(parts: &[(u64, Vec<OwnedOp>)]) -> Vec<CfPart<'_>> {
        parts
            .iter()
            .map(|(cf, ops)| CfPart {
                cf: CfId(*cf),
                ops: ops.iter().map(OwnedOp::as_op).collect(),
            })
            .collect()
    }

    proptest! {
        #[test]
        fn round_trip(owned in parts_strategy()) {
            let parts = borrow(&owned);
            let mut out = Vec::new();
            encode_commit(&parts, &mut out);
            prop_assert_eq!(decode_commit(&out).unwrap(), parts.clone());

            // The incremental encoder gives the same bytes.
            let mut enc = CommitEncoder::new();
            for p in &parts {
                enc.begin_part(p.cf);
                for op in &p.ops {
                    enc.push(op);
                }
            }
            prop_assert_eq!(enc.len_bytes(), out.len());
            prop_assert_eq!(enc.finish(), out.clone());

            // Every strict prefix is rejected, without panicking.
            for cut in 0..out.len() {
                prop_assert!(decode_commit(&out[..cut]).is_err());
            }
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_commit(&bytes);
            let mut versioned = vec![PAYLOAD_VERSION];
            versioned.extend_from_slice(&bytes);
            let _ = decode_commit(&versioned);
        }

        #[test]
        fn mutated_records_never_panic(owned in parts_strategy(), at in any::<usize>(), xor in 1u8..=255) {
            let mut out = Vec::new();
            encode_commit(&borrow(&owned), &mut out);
            let i = at % out.len();
            out[i] ^= xor;
            if let Err(e) = decode_commit(&out) {
                prop_assert!(e.is_corrupted());
            }
        }
    }

    #[test]
    fn version_one_payloads_are_read_and_newer_ones_refused() {
        let put = Op::Put {
            table: TableId(1),
            key: b"k",
            value: b"v",
        };
        let mut enc = CommitEncoder::new();
        enc.push_for(CfId(2), &put);
        let mut bytes = enc.finish();
        assert_eq!(bytes[0], PAYLOAD_VERSION);
        bytes[0] = OLDEST_PAYLOAD_VERSION;
        assert_eq!(decode_commit(&bytes).unwrap()[0].ops, vec![put]);
        bytes[0] = PAYLOAD_VERSION + 1;
        let e = decode_commit(&bytes).unwrap_err();
        assert!(e.is_corrupted(), "{e}");
        assert!(e.to_string().contains("version 3"), "{e}");
    }

    #[test]
    fn count_changes_keep_their_sign() {
        for delta in [i64::MIN, -1, 0, 1, i64::MAX] {
            let op = Op::CountChange {
                table: TableId(7),
                delta,
            };
            let mut enc = CommitEncoder::new();
            enc.push_for(CfId(1), &op);
            assert_eq!(decode_commit(&enc.finish()).unwrap()[0].ops, vec![op]);
        }
    }

    #[test]
    fn push_for_groups_consecutive_ops() {
        let mut enc = CommitEncoder::new();
        let put = Op::Put {
            table: TableId(1),
            key: b"k",
            value: b"v",
        };
        enc.push_for(CfId(2), &put);
        enc.push_for(CfId(2), &Op::DropTable { table: TableId(3) });
        enc.push_for(CfId(5), &Op::CreateCf { name: "new" });
        enc.push_for(CfId(2), &Op::DropCf);
        let bytes = enc.finish();
        let parts = decode_commit(&bytes).unwrap();
        assert_eq!(
            parts,
            vec![
                CfPart {
                    cf: CfId(2),
                    ops: vec![put, Op::DropTable { table: TableId(3) }]
                },
                CfPart {
                    cf: CfId(5),
                    ops: vec![Op::CreateCf { name: "new" }]
                },
                CfPart {
                    cf: CfId(2),
                    ops: vec![Op::DropCf]
                },
            ]
        );
    }

    #[test]
    fn encode_appends_to_existing_bytes() {
        let mut out = b"xyz".to_vec();
        encode_commit(&[], &mut out);
        assert_eq!(&out[..3], b"xyz");
        assert_eq!(decode_commit(&out[3..]).unwrap(), vec![]);
    }

    #[test]
    fn bad_inputs_are_corrupted() {
        // Huge counts are refused before allocating.
        let mut huge = vec![PAYLOAD_VERSION];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_commit(&huge).unwrap_err().is_corrupted());
        // Unknown version, tag, non-UTF-8 name, trailing bytes.
        assert!(decode_commit(&[9, 0, 0, 0, 0]).unwrap_err().is_corrupted());
        let mut out = Vec::new();
        encode_commit(
            &[CfPart {
                cf: CfId(1),
                ops: vec![Op::CreateCf { name: "ab" }],
            }],
            &mut out,
        );
        let tag_at = 1 + 4 + 8 + 4;
        let mut bad_tag = out.clone();
        bad_tag[tag_at] = 99;
        assert!(decode_commit(&bad_tag).unwrap_err().is_corrupted());
        let mut bad_utf8 = out.clone();
        bad_utf8[tag_at + 1 + 4] = 0xFF;
        assert!(decode_commit(&bad_utf8).unwrap_err().is_corrupted());
        let mut trailing = out.clone();
        trailing.push(0);
        assert!(decode_commit(&trailing).unwrap_err().is_corrupted());
        assert!(decode_commit(&[]).unwrap_err().is_corrupted());
    }
}
