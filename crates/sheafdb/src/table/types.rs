//! Typed keys and values: the traits the table layer is generic over, and
//! the byte encodings of the built-in types.
//!
//! The B+tree orders keys by plain byte comparison (memcmp). A key type
//! therefore has an *order-preserving* encoding: for any two keys `a` and
//! `b`, `a.cmp(&b) == encode(a).cmp(&encode(b))`. Values only need a compact
//! encoding that can be checked when it is read back.
//!
//! Three traits describe a type:
//!
//! * [`Value`]: can be stored as a value. Encoding is compact; decoding
//!   checks the bytes.
//! * [`Key`]: a [`Value`] that also has an order-preserving key encoding of
//!   a *whole* key (the encoding may run to the end of the buffer).
//! * [`KeyPart`]: a [`Key`] whose key encoding is self-delimiting, so it can
//!   stand in a non-final position of a tuple key.
//!
//! Decoding never panics: bytes that are not a valid encoding give
//! [`Error::Corrupted`] with location `"key decode"` or `"value decode"`.
//! Every encoding is canonical: if decoding succeeds, encoding the result
//! gives back the same bytes.
//!
//! # Encodings
//!
//! | Type                       | `type_name`    | Key encoding                                   | Value encoding                 | KeyPart |
//! |----------------------------|----------------|------------------------------------------------|--------------------------------|---------|
//! | `u8` … `u128`              | `"u32"`, …     | big-endian                                     | little-endian                  | yes     |
//! | `i8` … `i128`              | `"i64"`, …     | big-endian, sign bit flipped                   | little-endian                  | yes     |
//! | `bool`                     | `"bool"`       | one byte, `0` or `1`                           | same as key                    | yes     |
//! | `char`                     | `"char"`       | scalar value as `u32` big-endian               | `u32` little-endian            | yes     |
//! | `&str`, `String`, `Cow<str>` | `"str"`      | raw UTF-8                                      | raw UTF-8                      | `String`, `Cow<str>`: escaped (below) |
//! | `&[u8]`, `Vec<u8>`, `Cow<[u8]>` | `"bytes"` | raw bytes                                      | raw bytes                      | `Vec<u8>`, `Cow<[u8]>`: escaped (below) |
//! | `[u8; N]`, `&[u8; N]`      | `"[u8;N]"`     | raw `N` bytes                                  | raw `N` bytes                  | yes     |
//! | `()`                       | `"()"`         | empty                                          | empty                          | yes     |
//! | `Option<T>`                | `"Option<T>"`  | `00` for `None`, `01` + key of `T` for `Some`  | `00` / `01` + value of `T`     | if `T` is (`01` + part of `T`) |
//! | `f32`, `f64`               | `"f32"`, `"f64"` | — (not a key)                                | bits little-endian             | no      |
//! | `[T; N]` (`T` an [`ArrayElement`]) | `"[t;N]"` | keys of the elements, in order       | values of the elements, in order | if `T` is a key (same bytes as the key) |
//! | `Vec<T>` (`T` an [`ArrayElement`]) | `"Vec<t>"` | keys of the elements, in order (below) | values of the elements, in order | if `T` is a key: `01` + key of each element, then `00` |
//! | `(A, B, …, Z)` (1 to 12)   | `"(a,b,…,z)"`  | part of `A`, part of `B`, …, then key of `Z`   | see below                      | if all elements are |
//!
//! **Escaped byte strings.** As a key part, a `String` or `Vec<u8>` is
//! written with every `00` byte replaced by `00 FF`, followed by the
//! terminator `00 00`. The terminator sorts below every escaped byte, so a
//! string sorts before its extensions (`"a"` → `61 00 00` <
//! `"a\0"` → `61 00 FF 00 00` < `"ab"` → `61 62 00 00`), and the decoder
//! can find the end.
//!
//! **Zero-copy decoding.** `&[u8; N]` decodes to a reference into the
//! stored bytes wherever it stands. So do `&str` and `&[u8]` (and
//! `Cow<str>` / `Cow<[u8]>`, to `Cow::Borrowed`) alone, as the last element
//! of a tuple key, and anywhere in a tuple value (whose variable-width
//! elements are length-prefixed, see below); for other key positions see
//! "Strings in non-final positions" below. The types that share a type name
//! share every encoding, so a table written as `(String, u64)` can be read
//! as `(Cow<str>, u64)` and the other way round.
//!
//! **Vectors and arrays.** `Vec<T>` and `[T; N]` hold any [`ArrayElement`]:
//! a [`FixedWidth`] type other than `u8` (the other integers, `bool`,
//! `char`, `f32`, `f64`, `()`, `[u8; M]`, `&[u8; M]`, arrays of these, and
//! tuples of fixed-width types, `u8` included). `Vec<u8>` and `[u8; N]` keep
//! their raw encodings above; leaving `u8` out of [`ArrayElement`] is what
//! keeps the two sets of impls apart. They are keys and key parts when `T`
//! is a key (so not for floats), ordered like their `Ord`: element by
//! element, a shorter vector before its extensions. Every element encoding
//! has the same width, so concatenated element keys compare element by
//! element, and as a whole key a vector that is a proper prefix of another
//! is a byte prefix of it and sorts first: no framing is needed
//! (`Vec<u16>` `[1]` → `00 01` < `[1, 2]` → `00 01 00 02`). A key *part*
//! must also show where it ends and sort before its extensions whatever
//! follows it, so each element is preceded by `01` and the part ends with
//! `00` (`[1]` → `01 00 01 00`, `[]` → `00`): where one vector ends and the
//! other goes on, `00` < `01`. An array needs neither, its length being
//! part of its type. In a `Vec`, an element of width zero (`()`) is written
//! as one `01` byte so the length survives, and decoding work stays
//! proportional to the bytes read.
//!
//! **Tuple values.** Elements are written in order. An element with a fixed
//! width is written raw; a variable-width element is prefixed with its
//! length as a `u32` little-endian, except the last element, which runs to
//! the end. A tuple whose elements are all fixed-width is fixed-width.
//!
//! A 1-tuple has the same encodings as its element, but its own type name
//! (`"(u64,)"`).
//!
//! # Strings in non-final positions of a tuple key
//!
//! A non-final key part must be *self-delimiting* (the decoder must find
//! where it ends) and must keep byte order with whatever follows it. A
//! length prefix is self-delimiting but does not keep byte order: `"b"` →
//! `01 62` sorts before `"ab"` → `02 61 62`, while `"ab" < "b"`. A store
//! that compares keys through the key type's comparison function (as redb
//! does) can use length prefixes; this B+tree compares bytes only (memcmp),
//! so separators and cursors need no type information (see "Custom
//! orderings" below). Under byte comparison, a variable-length part must
//! end in a byte sequence that sorts below every continuation, so that
//! sequence cannot also appear as content: content that contains it has to
//! be rewritten (escaped), and an escaped string is not the stored bytes.
//! So no encoding both keeps byte order and lets every string part be
//! borrowed from the page.
//!
//! sheafdb keeps the escaped form (unchanged, so existing tables read back
//! identically) and offers three decoded types for a non-final string part:
//!
//! * `Cow<'static, str>` / `Cow<'static, [u8]>` decode to `Cow::Borrowed`
//!   (no copy) when the string holds no `00` byte (its escaped form is then
//!   its own bytes followed by `00 00`), and to `Cow::Owned` (an unescaped
//!   copy) otherwise. Use these for zero-copy reads:
//!   `TableDefinition<(Cow<'static, str>, u64, &str), V>`, keys written as
//!   `(Cow::Borrowed("a"), 7, "b")`; a read key's `.0` derefs to `str`.
//! * `String` / `Vec<u8>` always copy.
//! * `&str` / `&[u8]` are not [`KeyPart`]s: their decoded type `&'a str`
//!   cannot hold the copy a part with a `00` byte needs. A tuple decodes to
//!   the tuple of its elements' `SelfType`s, in keys and values alike, and
//!   without specialization or associated type defaults in stable Rust,
//!   giving `&str` another decoded type in non-final key positions would mean
//!   a new required item in every [`Value`] impl and a changed decoded type
//!   for existing tuple values such as `(&str, u64)`. Spelling the
//!   borrowed-or-owned type in the table definition costs nothing at run
//!   time; using `&str` there is a compile error that points here.
//!
//! All three write the same bytes and have the same type name (`"str"` /
//! `"bytes"`), so a table can switch between them. The trade-off of the
//! escaped form: a part costs two bytes more than its content (plus one per
//! `00` byte), and reading a part that holds a `00` byte allocates.
//!
//! ```
//! use std::borrow::Cow;
//! use sheafdb::table::types::{Key, TableDefinition};
//!
//! type Edge = (Cow<'static, str>, u64, &'static str);
//! const EDGES: TableDefinition<Edge, u32> = TableDefinition::new("edges");
//! assert_eq!(EDGES.key_type_name(), "(str,u64,str)"); // as (String, u64, &str)
//!
//! let mut bytes = Vec::new();
//! Edge::encode_key(&(Cow::Borrowed("from"), 7, "to"), &mut bytes);
//! let (from, n, to) = Edge::decode_key(&bytes)?;
//! assert!(matches!(from, Cow::Borrowed("from")));
//! assert_eq!((n, to), (7, "to"));
//! # Ok::<(), sheafdb::Error>(())
//! ```
//!
//! ```compile_fail
//! # use sheafdb::table::types::TableDefinition;
//! // error: `&str` is not a `KeyPart` (use `Cow<'static, str>` there)
//! const EDGES: TableDefinition<(&str, u64, &str), u32> = TableDefinition::new("edges");
//! ```
//!
//! # Custom orderings
//!
//! redb lets a key type supply its own comparison function. That does not
//! fit this design: the B+tree, the write buffer's ordered map, the merged
//! view and the key-prefix separators in branch pages all compare encoded
//! keys as bytes, without knowing the key type (so branch separators can be
//! the shortest byte strings between two pages, and the buffer and WAL
//! replay work on bytes alone). A
//! comparator would have to be threaded through all of them and stored with
//! the table, and a separator shortened by bytes would no longer be a valid
//! bound under it.
//!
//! To order keys another way, encode them into bytes whose byte order *is*
//! that order, in [`Key::encode_key`] (and [`KeyPart::encode_key_part`]):
//! for a descending `u64`, write `!x` big-endian; for case-insensitive text,
//! write the folded string (then a tie-breaker, such as the original, if
//! distinct keys may fold alike); for a field-wise order, write the fields
//! as a tuple's parts. The property tests in this module check exactly
//! `a.cmp(&b) == encode(a).cmp(&encode(b))`; do the same for your type.
//!
//! # Implementing the traits for your own types
//!
//! Implement [`Value`], and [`Key`] if the type is used as a key (plus
//! [`KeyPart`] if it stands in a non-final tuple position, and the markers
//! [`FixedWidth`] and [`ArrayElement`] if all its encodings have one width
//! and it should fill `Vec`s and arrays). The easiest
//! route is to delegate to a built-in type. `type_name` is stored in the
//! table catalog and compared when a table is reopened, so make it unique
//! and never change it. The decode methods must repeat the trait's
//! `where Self: 'a` bound, even for types that borrow nothing.
//!
//! ```
//! use sheafdb::table::types::{ArrayElement, FixedWidth, Key, KeyPart, TableDefinition, Value};
//! use sheafdb::Result;
//!
//! #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
//! struct UserId(u32);
//!
//! impl Value for UserId {
//!     type SelfType<'a> = UserId;
//!
//!     fn fixed_width() -> Option<usize> {
//!         <u32 as Value>::fixed_width()
//!     }
//!     fn encode_value(value: &UserId, out: &mut Vec<u8>) {
//!         u32::encode_value(&value.0, out)
//!     }
//!     fn decode_value<'a>(bytes: &'a [u8]) -> Result<UserId>
//!     where
//!         Self: 'a,
//!     {
//!         u32::decode_value(bytes).map(UserId)
//!     }
//!     fn type_name() -> String {
//!         "myapp::UserId".to_string()
//!     }
//! }
//!
//! impl Key for UserId {
//!     fn encode_key(value: &UserId, out: &mut Vec<u8>) {
//!         u32::encode_key(&value.0, out)
//!     }
//!     fn decode_key<'a>(bytes: &'a [u8]) -> Result<UserId>
//!     where
//!         Self: 'a,
//!     {
//!         u32::decode_key(bytes).map(UserId)
//!     }
//! }
//!
//! impl KeyPart for UserId {
//!     fn encode_key_part(value: &UserId, out: &mut Vec<u8>) {
//!         u32::encode_key_part(&value.0, out)
//!     }
//!     fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(UserId, usize)>
//!     where
//!         Self: 'a,
//!     {
//!         u32::decode_key_part(bytes).map(|(v, n)| (UserId(v), n))
//!     }
//! }
//!
//! // Every encoding of a UserId is 4 bytes, so it can fill vectors and
//! // arrays (as a value, key and key part).
//! impl FixedWidth for UserId {}
//! impl ArrayElement for UserId {}
//!
//! const POSTS: TableDefinition<(UserId, u64), &str> = TableDefinition::new("posts");
//! const FOLLOWERS: TableDefinition<UserId, Vec<UserId>> = TableDefinition::new("followers");
//! assert_eq!(POSTS.name(), "posts");
//! assert_eq!(FOLLOWERS.value_type_name(), "Vec<myapp::UserId>");
//! ```

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use crate::error::{Error, Result};

/// A type that can be stored as a value.
pub trait Value: fmt::Debug {
    /// What a reader gets back; borrows from the stored bytes where possible.
    type SelfType<'a>: fmt::Debug
    where
        Self: 'a;

    /// `Some(n)` if every encoding is exactly `n` bytes.
    fn fixed_width() -> Option<usize>;

    /// Appends the value encoding of `value` to `out`.
    fn encode_value(value: &Self::SelfType<'_>, out: &mut Vec<u8>);

    /// Decodes a whole value encoding; bad bytes give `Error::Corrupted`.
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
    where
        Self: 'a;

    /// Stable name stored in the table catalog to detect type changes on
    /// reopen, e.g. `"u64"`, `"str"`, `"(u64,str)"`.
    fn type_name() -> String;
}

/// A type that can be used as a key: it has an order-preserving encoding.
pub trait Key: Value {
    /// Appends the order-preserving encoding of a whole key to `out`.
    fn encode_key(value: &Self::SelfType<'_>, out: &mut Vec<u8>);

    /// Decodes a whole key encoding; bad bytes give `Error::Corrupted`.
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
    where
        Self: 'a;
}

/// A key type that can stand in a non-final position of a tuple key: its
/// key encoding is self-delimiting (a decoder can tell where it ends).
///
/// The part encoding must preserve order and be prefix-free: for `a < b`,
/// `part(a)` followed by anything sorts before `part(b)` followed by
/// anything.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `KeyPart`: it cannot stand in a non-final position of a tuple key",
    note = "`&str` and `&[u8]` can only be last in a tuple key; elsewhere use `Cow<'static, str>` / `Cow<'static, [u8]>` (borrowed unless the part holds a 00 byte) or `String` / `Vec<u8>`, with the same encoding (see `sheafdb::table::types`)"
)]
pub trait KeyPart: Key {
    /// Appends the self-delimiting, order-preserving encoding to `out`.
    fn encode_key_part(value: &Self::SelfType<'_>, out: &mut Vec<u8>);

    /// Decodes a part encoding at the start of `bytes`; returns the value and
    /// how many bytes it consumed. Trailing bytes are left alone.
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(Self::SelfType<'a>, usize)>
    where
        Self: 'a;
}

/// Encodes a whole key into a new vector.
#[cfg(test)]
pub fn encode_key_to_vec<K: Key>(key: &K::SelfType<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(K::fixed_width().unwrap_or(16));
    K::encode_key(key, &mut out);
    out
}

/// Encodes a whole value into a new vector.
#[cfg(test)]
pub fn encode_value_to_vec<V: Value>(value: &V::SelfType<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(V::fixed_width().unwrap_or(16));
    V::encode_value(value, &mut out);
    out
}

// ---------------------------------------------------------------------------
// Table definitions
// ---------------------------------------------------------------------------

/// Names a table and its key and value types; const-constructible.
///
/// ```
/// use sheafdb::table::types::TableDefinition;
/// const USERS: TableDefinition<&str, u64> = TableDefinition::new("users");
/// assert_eq!(USERS.name(), "users");
/// ```
pub struct TableDefinition<'a, K: Key + 'static, V: Value + 'static> {
    name: &'a str,
    _marker: PhantomData<fn() -> (K, V)>,
}

impl<'a, K: Key + 'static, V: Value + 'static> TableDefinition<'a, K, V> {
    /// A definition of the table called `name`.
    pub const fn new(name: &'a str) -> Self {
        TableDefinition {
            name,
            _marker: PhantomData,
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The key type's catalog name ([`Value::type_name`]).
    pub fn key_type_name(&self) -> String {
        K::type_name()
    }

    /// The value type's catalog name ([`Value::type_name`]).
    pub fn value_type_name(&self) -> String {
        V::type_name()
    }
}

impl<K: Key + 'static, V: Value + 'static> Clone for TableDefinition<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Key + 'static, V: Value + 'static> Copy for TableDefinition<'_, K, V> {}

impl<K: Key + 'static, V: Value + 'static> fmt::Debug for TableDefinition<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableDefinition")
            .field("name", &self.name)
            .field("key", &K::type_name())
            .field("value", &V::type_name())
            .finish()
    }
}

// ---------------------------------------------------------------------------
// Decoding helpers
// ---------------------------------------------------------------------------

/// Which kind of decode failed; becomes the error's location.
#[derive(Clone, Copy)]
enum Ctx {
    Key,
    Value,
}

impl Ctx {
    fn err(self, what: impl Into<String>) -> Error {
        let location = match self {
            Ctx::Key => "key decode",
            Ctx::Value => "value decode",
        };
        Error::corrupted(what, location)
    }
}

/// `bytes` as an array of exactly `N` bytes.
fn exact<const N: usize>(bytes: &[u8], ty: &str, ctx: Ctx) -> Result<[u8; N]> {
    <[u8; N]>::try_from(bytes)
        .map_err(|_| ctx.err(format!("{ty} needs {N} bytes, found {}", bytes.len())))
}

/// `bytes` as a reference to an array of exactly `N` bytes.
fn exact_ref<const N: usize>(bytes: &[u8], ctx: Ctx) -> Result<&[u8; N]> {
    <&[u8; N]>::try_from(bytes)
        .map_err(|_| ctx.err(format!("byte array needs {N} bytes, found {}", bytes.len())))
}

/// The first `N` bytes of `bytes` (key parts).
fn leading<const N: usize>(bytes: &[u8], ty: &str) -> Result<[u8; N]> {
    bytes.first_chunk::<N>().copied().ok_or_else(|| {
        Ctx::Key.err(format!(
            "{ty} key part needs {N} bytes, found {}",
            bytes.len()
        ))
    })
}

/// `bytes` without its first `n` bytes.
fn advance(bytes: &[u8], n: usize, ctx: Ctx) -> Result<&[u8]> {
    bytes.get(n..).ok_or_else(|| {
        ctx.err(format!(
            "element claims {n} bytes but only {} remain",
            bytes.len()
        ))
    })
}

/// The single byte of a one-byte encoding.
fn one_byte(bytes: &[u8], ty: &str, ctx: Ctx) -> Result<u8> {
    exact::<1>(bytes, ty, ctx).map(|[b]| b)
}

fn decode_bool(byte: u8, ctx: Ctx) -> Result<bool> {
    match byte {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(ctx.err(format!("bool byte must be 0 or 1, found {b:#04x}"))),
    }
}

fn decode_char(scalar: u32, ctx: Ctx) -> Result<char> {
    char::from_u32(scalar).ok_or_else(|| ctx.err(format!("{scalar:#x} is not a Unicode scalar")))
}

fn decode_utf8(bytes: &[u8], ctx: Ctx) -> Result<&str> {
    std::str::from_utf8(bytes).map_err(|e| ctx.err(format!("invalid UTF-8 in str: {e}")))
}

/// Splits an `Option` encoding into its tag and payload.
fn option_tag(bytes: &[u8], ctx: Ctx) -> Result<(bool, &[u8])> {
    match bytes.split_first() {
        Some((0, rest)) => Ok((false, rest)),
        Some((1, rest)) => Ok((true, rest)),
        Some((t, _)) => Err(ctx.err(format!("Option tag must be 0 or 1, found {t:#04x}"))),
        None => Err(ctx.err("empty Option encoding")),
    }
}

/// The payload of an encoded `None` must be empty.
fn expect_empty(rest: &[u8], what: &str, ctx: Ctx) -> Result<()> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(ctx.err(format!("{} trailing bytes after {what}", rest.len())))
    }
}

// ---------------------------------------------------------------------------
// Escaped byte strings (key parts of String and Vec<u8>)
// ---------------------------------------------------------------------------

const ESCAPE: u8 = 0x00;
const ESCAPED_ZERO: u8 = 0xFF;
const TERMINATOR: u8 = 0x00;

/// Writes `bytes` with `00` → `00 FF`, then the terminator `00 00`.
fn escape_into(bytes: &[u8], out: &mut Vec<u8>) {
    let mut chunks = bytes.split(|&b| b == 0);
    if let Some(first) = chunks.next() {
        out.extend_from_slice(first);
    }
    for chunk in chunks {
        out.extend_from_slice(&[ESCAPE, ESCAPED_ZERO]);
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&[ESCAPE, TERMINATOR]);
}

/// Reverses [`escape_into`]: returns the raw bytes and how many encoded
/// bytes (terminator included) were consumed.
fn unescape(bytes: &[u8]) -> Result<(Vec<u8>, usize)> {
    let mut raw = Vec::with_capacity(bytes.len());
    let mut pos = 0;
    loop {
        let rest = &bytes[pos..];
        let Some(zero) = rest.iter().position(|&b| b == ESCAPE) else {
            return Err(Ctx::Key.err("unterminated escaped string in key"));
        };
        raw.extend_from_slice(&rest[..zero]);
        match rest.get(zero + 1) {
            Some(&TERMINATOR) => return Ok((raw, pos + zero + 2)),
            Some(&ESCAPED_ZERO) => raw.push(0),
            Some(b) => {
                return Err(Ctx::Key.err(format!("bad escape 00 {b:02x} in escaped string in key")))
            }
            None => return Err(Ctx::Key.err("unterminated escaped string in key")),
        }
        pos += zero + 2;
    }
}

// ---------------------------------------------------------------------------
// Integers
// ---------------------------------------------------------------------------

/// Keys are big-endian of `value ^ MIN`: a no-op for unsigned types, and a
/// sign-bit flip for signed ones (so negatives sort first).
macro_rules! impl_int {
    ($($t:ident),* $(,)?) => {$(
        impl Value for $t {
            type SelfType<'a> = $t where Self: 'a;

            fn fixed_width() -> Option<usize> {
                Some(std::mem::size_of::<$t>())
            }
            fn encode_value(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                out.extend_from_slice(&value.to_le_bytes());
            }
            fn decode_value<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
            where
                Self: 'a,
            {
                exact(bytes, stringify!($t), Ctx::Value).map($t::from_le_bytes)
            }
            fn type_name() -> String {
                stringify!($t).to_string()
            }
        }

        impl Key for $t {
            fn encode_key(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                out.extend_from_slice(&(value ^ $t::MIN).to_be_bytes());
            }
            fn decode_key<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
            where
                Self: 'a,
            {
                let raw = exact(bytes, stringify!($t), Ctx::Key)?;
                Ok($t::from_be_bytes(raw) ^ $t::MIN)
            }
        }

        impl KeyPart for $t {
            fn encode_key_part(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                Self::encode_key(value, out);
            }
            fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(Self::SelfType<'a>, usize)>
            where
                Self: 'a,
            {
                let raw = leading(bytes, stringify!($t))?;
                Ok(($t::from_be_bytes(raw) ^ $t::MIN, raw.len()))
            }
        }
    )*};
}

impl_int!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);

// ---------------------------------------------------------------------------
// bool, char
// ---------------------------------------------------------------------------

impl Value for bool {
    type SelfType<'a> = bool;

    fn fixed_width() -> Option<usize> {
        Some(1)
    }
    fn encode_value(value: &bool, out: &mut Vec<u8>) {
        out.push(u8::from(*value));
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<bool>
    where
        Self: 'a,
    {
        decode_bool(one_byte(bytes, "bool", Ctx::Value)?, Ctx::Value)
    }
    fn type_name() -> String {
        "bool".to_string()
    }
}

impl Key for bool {
    fn encode_key(value: &bool, out: &mut Vec<u8>) {
        out.push(u8::from(*value));
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<bool>
    where
        Self: 'a,
    {
        decode_bool(one_byte(bytes, "bool", Ctx::Key)?, Ctx::Key)
    }
}

impl KeyPart for bool {
    fn encode_key_part(value: &bool, out: &mut Vec<u8>) {
        Self::encode_key(value, out);
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(bool, usize)>
    where
        Self: 'a,
    {
        let [b] = leading(bytes, "bool")?;
        Ok((decode_bool(b, Ctx::Key)?, 1))
    }
}

impl Value for char {
    type SelfType<'a> = char;

    fn fixed_width() -> Option<usize> {
        Some(4)
    }
    fn encode_value(value: &char, out: &mut Vec<u8>) {
        out.extend_from_slice(&u32::from(*value).to_le_bytes());
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<char>
    where
        Self: 'a,
    {
        let raw = exact(bytes, "char", Ctx::Value)?;
        decode_char(u32::from_le_bytes(raw), Ctx::Value)
    }
    fn type_name() -> String {
        "char".to_string()
    }
}

impl Key for char {
    fn encode_key(value: &char, out: &mut Vec<u8>) {
        out.extend_from_slice(&u32::from(*value).to_be_bytes());
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<char>
    where
        Self: 'a,
    {
        let raw = exact(bytes, "char", Ctx::Key)?;
        decode_char(u32::from_be_bytes(raw), Ctx::Key)
    }
}

impl KeyPart for char {
    fn encode_key_part(value: &char, out: &mut Vec<u8>) {
        Self::encode_key(value, out);
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(char, usize)>
    where
        Self: 'a,
    {
        let raw = leading(bytes, "char")?;
        Ok((decode_char(u32::from_be_bytes(raw), Ctx::Key)?, 4))
    }
}

// ---------------------------------------------------------------------------
// Floats (values only)
// ---------------------------------------------------------------------------

macro_rules! impl_float {
    ($($t:ident),* $(,)?) => {$(
        impl Value for $t {
            type SelfType<'a> = $t;

            fn fixed_width() -> Option<usize> {
                Some(std::mem::size_of::<$t>())
            }
            fn encode_value(value: &$t, out: &mut Vec<u8>) {
                out.extend_from_slice(&value.to_bits().to_le_bytes());
            }
            fn decode_value<'a>(bytes: &'a [u8]) -> Result<$t>
where
Self: 'a,
{
                exact(bytes, stringify!($t), Ctx::Value).map($t::from_le_bytes)
            }
            fn type_name() -> String {
                stringify!($t).to_string()
            }
        }
    )*};
}

impl_float!(f32, f64);

// ---------------------------------------------------------------------------
// Strings and byte strings
// ---------------------------------------------------------------------------

impl Value for &str {
    type SelfType<'a>
        = &'a str
    where
        Self: 'a;

    fn fixed_width() -> Option<usize> {
        None
    }
    fn encode_value(value: &&str, out: &mut Vec<u8>) {
        out.extend_from_slice(value.as_bytes());
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<&'a str>
    where
        Self: 'a,
    {
        decode_utf8(bytes, Ctx::Value)
    }
    fn type_name() -> String {
        "str".to_string()
    }
}

impl Key for &str {
    fn encode_key(value: &&str, out: &mut Vec<u8>) {
        out.extend_from_slice(value.as_bytes());
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<&'a str>
    where
        Self: 'a,
    {
        decode_utf8(bytes, Ctx::Key)
    }
}

impl Value for String {
    type SelfType<'a> = String;

    fn fixed_width() -> Option<usize> {
        None
    }
    fn encode_value(value: &String, out: &mut Vec<u8>) {
        out.extend_from_slice(value.as_bytes());
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<String>
    where
        Self: 'a,
    {
        decode_utf8(bytes, Ctx::Value).map(str::to_owned)
    }
    fn type_name() -> String {
        "str".to_string()
    }
}

impl Key for String {
    fn encode_key(value: &String, out: &mut Vec<u8>) {
        out.extend_from_slice(value.as_bytes());
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<String>
    where
        Self: 'a,
    {
        decode_utf8(bytes, Ctx::Key).map(str::to_owned)
    }
}

impl KeyPart for String {
    fn encode_key_part(value: &String, out: &mut Vec<u8>) {
        escape_into(value.as_bytes(), out);
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(String, usize)>
    where
        Self: 'a,
    {
        let (raw, used) = unescape(bytes)?;
        let s = String::from_utf8(raw)
            .map_err(|e| Ctx::Key.err(format!("invalid UTF-8 in str: {}", e.utf8_error())))?;
        Ok((s, used))
    }
}

impl Value for &[u8] {
    type SelfType<'a>
        = &'a [u8]
    where
        Self: 'a;

    fn fixed_width() -> Option<usize> {
        None
    }
    fn encode_value(value: &&[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<&'a [u8]>
    where
        Self: 'a,
    {
        Ok(bytes)
    }
    fn type_name() -> String {
        "bytes".to_string()
    }
}

impl Key for &[u8] {
    fn encode_key(value: &&[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<&'a [u8]>
    where
        Self: 'a,
    {
        Ok(bytes)
    }
}

impl Value for Vec<u8> {
    type SelfType<'a> = Vec<u8>;

    fn fixed_width() -> Option<usize> {
        None
    }
    fn encode_value(value: &Vec<u8>, out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<Vec<u8>>
    where
        Self: 'a,
    {
        Ok(bytes.to_vec())
    }
    fn type_name() -> String {
        "bytes".to_string()
    }
}

impl Key for Vec<u8> {
    fn encode_key(value: &Vec<u8>, out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<Vec<u8>>
    where
        Self: 'a,
    {
        Ok(bytes.to_vec())
    }
}

impl KeyPart for Vec<u8> {
    fn encode_key_part(value: &Vec<u8>, out: &mut Vec<u8>) {
        escape_into(value, out);
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(Vec<u8>, usize)>
    where
        Self: 'a,
    {
        unescape(bytes)
    }
}

// ---------------------------------------------------------------------------
// Borrowed-or-owned strings: Cow<str>, Cow<[u8]>
// ---------------------------------------------------------------------------

/// [`unescape`] that borrows: the raw bytes of the escaped part at the start
/// of `bytes` (borrowed when the part holds no escaped `00`, a copy
/// otherwise) and how many encoded bytes it used.
fn unescape_cow(bytes: &[u8]) -> Result<(Cow<'_, [u8]>, usize)> {
    let Some(zero) = bytes.iter().position(|&b| b == ESCAPE) else {
        return Err(Ctx::Key.err("unterminated escaped string in key"));
    };
    match (bytes.get(..zero), bytes.get(zero + 1)) {
        (Some(raw), Some(&TERMINATOR)) => Ok((Cow::Borrowed(raw), zero + 2)),
        _ => unescape(bytes).map(|(raw, used)| (Cow::Owned(raw), used)),
    }
}

/// UTF-8 check of a [`unescape_cow`] result, keeping it borrowed or owned.
fn cow_utf8(raw: Cow<'_, [u8]>) -> Result<Cow<'_, str>> {
    match raw {
        Cow::Borrowed(b) => decode_utf8(b, Ctx::Key).map(Cow::Borrowed),
        Cow::Owned(v) => String::from_utf8(v)
            .map(Cow::Owned)
            .map_err(|e| Ctx::Key.err(format!("invalid UTF-8 in str: {}", e.utf8_error()))),
    }
}

/// A string that borrows from the stored bytes where it can: the type to
/// use for a string in a non-final tuple key position (see the module doc).
/// Same encodings and type name (`"str"`) as `&str` and `String`.
impl Value for Cow<'_, str> {
    type SelfType<'a>
        = Cow<'a, str>
    where
        Self: 'a;

    fn fixed_width() -> Option<usize> {
        None
    }
    fn encode_value(value: &Cow<'_, str>, out: &mut Vec<u8>) {
        out.extend_from_slice(value.as_bytes());
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<Cow<'a, str>>
    where
        Self: 'a,
    {
        decode_utf8(bytes, Ctx::Value).map(Cow::Borrowed)
    }
    fn type_name() -> String {
        "str".to_string()
    }
}

impl Key for Cow<'_, str> {
    fn encode_key(value: &Cow<'_, str>, out: &mut Vec<u8>) {
        out.extend_from_slice(value.as_bytes());
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<Cow<'a, str>>
    where
        Self: 'a,
    {
        decode_utf8(bytes, Ctx::Key).map(Cow::Borrowed)
    }
}

impl KeyPart for Cow<'_, str> {
    fn encode_key_part(value: &Cow<'_, str>, out: &mut Vec<u8>) {
        escape_into(value.as_bytes(), out);
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(Cow<'a, str>, usize)>
    where
        Self: 'a,
    {
        let (raw, used) = unescape_cow(bytes)?;
        Ok((cow_utf8(raw)?, used))
    }
}

/// Bytes that borrow from the stored bytes where they can: the type to use
/// for bytes in a non-final tuple key position (see the module doc). Same
/// encodings and type name (`"bytes"`) as `&[u8]` and `Vec<u8>`.
impl Value for Cow<'_, [u8]> {
    type SelfType<'a>
        = Cow<'a, [u8]>
    where
        Self: 'a;

    fn fixed_width() -> Option<usize> {
        None
    }
    fn encode_value(value: &Cow<'_, [u8]>, out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<Cow<'a, [u8]>>
    where
        Self: 'a,
    {
        Ok(Cow::Borrowed(bytes))
    }
    fn type_name() -> String {
        "bytes".to_string()
    }
}

impl Key for Cow<'_, [u8]> {
    fn encode_key(value: &Cow<'_, [u8]>, out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<Cow<'a, [u8]>>
    where
        Self: 'a,
    {
        Ok(Cow::Borrowed(bytes))
    }
}

impl KeyPart for Cow<'_, [u8]> {
    fn encode_key_part(value: &Cow<'_, [u8]>, out: &mut Vec<u8>) {
        escape_into(value, out);
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(Cow<'a, [u8]>, usize)>
    where
        Self: 'a,
    {
        unescape_cow(bytes)
    }
}

// ---------------------------------------------------------------------------
// Fixed byte arrays, unit
// ---------------------------------------------------------------------------

impl<const N: usize> Value for [u8; N] {
    type SelfType<'a> = [u8; N];

    fn fixed_width() -> Option<usize> {
        Some(N)
    }
    fn encode_value(value: &[u8; N], out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<[u8; N]>
    where
        Self: 'a,
    {
        exact(bytes, "byte array", Ctx::Value)
    }
    fn type_name() -> String {
        format!("[u8;{N}]")
    }
}

impl<const N: usize> Key for [u8; N] {
    fn encode_key(value: &[u8; N], out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<[u8; N]>
    where
        Self: 'a,
    {
        exact(bytes, "byte array", Ctx::Key)
    }
}

impl<const N: usize> KeyPart for [u8; N] {
    fn encode_key_part(value: &[u8; N], out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<([u8; N], usize)>
    where
        Self: 'a,
    {
        Ok((leading(bytes, "byte array")?, N))
    }
}

/// The same bytes and type name as `[u8; N]`, decoded without copying.
impl<const N: usize> Value for &[u8; N] {
    type SelfType<'a>
        = &'a [u8; N]
    where
        Self: 'a;

    fn fixed_width() -> Option<usize> {
        Some(N)
    }
    fn encode_value(value: &&[u8; N], out: &mut Vec<u8>) {
        out.extend_from_slice(*value);
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<&'a [u8; N]>
    where
        Self: 'a,
    {
        exact_ref(bytes, Ctx::Value)
    }
    fn type_name() -> String {
        format!("[u8;{N}]")
    }
}

impl<const N: usize> Key for &[u8; N] {
    fn encode_key(value: &&[u8; N], out: &mut Vec<u8>) {
        out.extend_from_slice(*value);
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<&'a [u8; N]>
    where
        Self: 'a,
    {
        exact_ref(bytes, Ctx::Key)
    }
}

impl<const N: usize> KeyPart for &[u8; N] {
    fn encode_key_part(value: &&[u8; N], out: &mut Vec<u8>) {
        out.extend_from_slice(*value);
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(&'a [u8; N], usize)>
    where
        Self: 'a,
    {
        let head = bytes.first_chunk::<N>().ok_or_else(|| {
            Ctx::Key.err(format!(
                "byte array key part needs {N} bytes, found {}",
                bytes.len()
            ))
        })?;
        Ok((head, N))
    }
}

impl Value for () {
    type SelfType<'a> = ();

    fn fixed_width() -> Option<usize> {
        Some(0)
    }
    fn encode_value(_value: &(), _out: &mut Vec<u8>) {}
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<()>
    where
        Self: 'a,
    {
        expect_empty(bytes, "()", Ctx::Value)
    }
    fn type_name() -> String {
        "()".to_string()
    }
}

impl Key for () {
    fn encode_key(_value: &(), _out: &mut Vec<u8>) {}
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<()>
    where
        Self: 'a,
    {
        expect_empty(bytes, "()", Ctx::Key)
    }
}

impl KeyPart for () {
    fn encode_key_part(_value: &(), _out: &mut Vec<u8>) {}
    fn decode_key_part<'a>(_bytes: &'a [u8]) -> Result<((), usize)>
    where
        Self: 'a,
    {
        Ok(((), 0))
    }
}

// ---------------------------------------------------------------------------
// Option
// ---------------------------------------------------------------------------

impl<T: Value> Value for Option<T> {
    type SelfType<'a>
        = Option<T::SelfType<'a>>
    where
        Self: 'a;

    fn fixed_width() -> Option<usize> {
        None
    }
    fn encode_value(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
        match value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                T::encode_value(v, out);
            }
        }
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
    where
        Self: 'a,
    {
        match option_tag(bytes, Ctx::Value)? {
            (false, rest) => expect_empty(rest, "None", Ctx::Value).map(|()| None),
            (true, rest) => T::decode_value(rest).map(Some),
        }
    }
    fn type_name() -> String {
        format!("Option<{}>", T::type_name())
    }
}

impl<T: Key> Key for Option<T> {
    fn encode_key(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
        match value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                T::encode_key(v, out);
            }
        }
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
    where
        Self: 'a,
    {
        match option_tag(bytes, Ctx::Key)? {
            (false, rest) => expect_empty(rest, "None", Ctx::Key).map(|()| None),
            (true, rest) => T::decode_key(rest).map(Some),
        }
    }
}

impl<T: KeyPart> KeyPart for Option<T> {
    fn encode_key_part(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
        match value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                T::encode_key_part(v, out);
            }
        }
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(Self::SelfType<'a>, usize)>
    where
        Self: 'a,
    {
        match option_tag(bytes, Ctx::Key)? {
            (false, _) => Ok((None, 1)),
            (true, rest) => {
                let (v, used) = T::decode_key_part(rest)?;
                Ok((Some(v), used + 1))
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Fixed-width element types: Vec<T>, [T; N]
// ---------------------------------------------------------------------------

/// A type whose encodings all have one width: [`Value::fixed_width`] is
/// `Some(w)`, every value encoding is `w` bytes and, if the type is a
/// [`Key`], so is every key encoding and every key-part encoding.
///
/// Implemented for the integers, `bool`, `char`, `f32`, `f64`, `()`,
/// `[u8; N]`, `&[u8; N]`, `[T; N]` of an [`ArrayElement`], and tuples of
/// fixed-width types. Implement it for your own type when the above holds
/// (for example one that delegates to a built-in fixed-width type); a type
/// that breaks the promise decodes as [`Error::Corrupted`], never as a
/// panic.
pub trait FixedWidth: Value {}

/// A [`FixedWidth`] type that `Vec<T>` and `[T; N]` hold: every fixed-width
/// type except `u8`, whose `Vec<u8>` and `[u8; N]` have their own (raw
/// byte) encodings.
///
/// If `T` is also a [`Key`] whose key encoding preserves order, `Vec<T>` and
/// `[T; N]` are keys and key parts ordered like their `Ord`: by element,
/// a shorter vector before its extensions.
pub trait ArrayElement: FixedWidth {}

macro_rules! impl_fixed_width {
    ($($t:ty),* $(,)?) => {$(
        impl FixedWidth for $t {}
        impl ArrayElement for $t {}
    )*};
}

impl FixedWidth for u8 {}
impl_fixed_width!(
    u16,
    u32,
    u64,
    u128,
    i8,
    i16,
    i32,
    i64,
    i128,
    bool,
    char,
    f32,
    f64,
    ()
);

impl<const N: usize> FixedWidth for [u8; N] {}
impl<const N: usize> ArrayElement for [u8; N] {}
impl<const N: usize> FixedWidth for &[u8; N] {}
impl<const N: usize> ArrayElement for &[u8; N] {}

/// The marker byte that stands for each element of zero width (`()`) in a
/// `Vec`, and before each element in a `Vec` key part.
const ELEMENT: u8 = 0x01;
/// The end of a `Vec` key part.
const END: u8 = 0x00;

/// The width of an array element, which [`FixedWidth`] promises.
fn element_width<T: Value>(ctx: Ctx) -> Result<usize> {
    T::fixed_width().ok_or_else(|| {
        ctx.err(format!(
            "{} is an array element without a fixed width",
            T::type_name()
        ))
    })
}

/// Writes the elements of a `Vec<T>` whole (a value, or a key that runs to
/// the end): each element's encoding, or the [`ELEMENT`] byte for an
/// element of zero width.
fn encode_elements<'x, T: Value + 'x>(
    items: &[T::SelfType<'x>],
    out: &mut Vec<u8>,
    encode: impl Fn(&T::SelfType<'x>, &mut Vec<u8>),
) {
    let zero_width = T::fixed_width() == Some(0);
    for item in items {
        if zero_width {
            out.push(ELEMENT);
        }
        encode(item, out);
    }
}

/// Reverses [`encode_elements`]: `bytes` must be whole elements.
fn decode_elements<'a, T: Value + 'a>(
    bytes: &'a [u8],
    ctx: Ctx,
    decode: impl Fn(&'a [u8]) -> Result<T::SelfType<'a>>,
) -> Result<Vec<T::SelfType<'a>>> {
    match element_width::<T>(ctx)? {
        0 => bytes
            .iter()
            .map(|&b| match b {
                ELEMENT => decode(&[]),
                b => Err(ctx.err(format!(
                    "zero-width element marker must be 01, found {b:#04x}"
                ))),
            })
            .collect(),
        width if bytes.len().is_multiple_of(width) => {
            bytes.chunks_exact(width).map(decode).collect()
        }
        width => Err(ctx.err(format!(
            "{} bytes are not whole elements of {width} bytes",
            bytes.len()
        ))),
    }
}

/// `N` elements of `T` from exactly `N` times its width.
fn decode_array<'a, T: Value + 'a, const N: usize>(
    bytes: &'a [u8],
    ctx: Ctx,
    decode: impl Fn(&'a [u8]) -> Result<T::SelfType<'a>>,
) -> Result<[T::SelfType<'a>; N]> {
    let width = element_width::<T>(ctx)?;
    let expected = width.checked_mul(N);
    if expected != Some(bytes.len()) {
        return Err(ctx.err(format!(
            "[{};{N}] needs {N} elements of {width} bytes, found {} bytes",
            T::type_name(),
            bytes.len()
        )));
    }
    let items: Vec<_> = if width == 0 {
        (0..N).map(|_| decode(&[])).collect::<Result<_>>()?
    } else {
        bytes
            .chunks_exact(width)
            .map(decode)
            .collect::<Result<_>>()?
    };
    <[T::SelfType<'a>; N]>::try_from(items).map_err(|_| ctx.err("array length"))
}

impl<T: ArrayElement> Value for Vec<T> {
    type SelfType<'a>
        = Vec<T::SelfType<'a>>
    where
        Self: 'a;

    fn fixed_width() -> Option<usize> {
        None
    }
    fn encode_value(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
        encode_elements::<T>(value, out, T::encode_value);
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
    where
        Self: 'a,
    {
        decode_elements::<T>(bytes, Ctx::Value, T::decode_value)
    }
    fn type_name() -> String {
        format!("Vec<{}>", T::type_name())
    }
}

impl<T: ArrayElement + Key> Key for Vec<T> {
    fn encode_key(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
        encode_elements::<T>(value, out, T::encode_key);
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
    where
        Self: 'a,
    {
        decode_elements::<T>(bytes, Ctx::Key, T::decode_key)
    }
}

impl<T: ArrayElement + Key> KeyPart for Vec<T> {
    fn encode_key_part(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
        for item in value {
            out.push(ELEMENT);
            T::encode_key(item, out);
        }
        out.push(END);
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(Self::SelfType<'a>, usize)>
    where
        Self: 'a,
    {
        let width = element_width::<T>(Ctx::Key)?;
        let mut items = Vec::new();
        let mut rest = bytes;
        loop {
            match rest.split_first() {
                Some((&END, _)) => return Ok((items, bytes.len() - rest.len() + 1)),
                Some((&ELEMENT, after)) => {
                    let Some((item, after)) = after.split_at_checked(width) else {
                        return Err(Ctx::Key.err(format!(
                            "Vec key part element needs {width} bytes, found {}",
                            after.len()
                        )));
                    };
                    items.push(T::decode_key(item)?);
                    rest = after;
                }
                Some((b, _)) => {
                    return Err(Ctx::Key.err(format!(
                        "Vec key part marker must be 00 or 01, found {b:#04x}"
                    )))
                }
                None => return Err(Ctx::Key.err("unterminated Vec key part")),
            }
        }
    }
}

impl<T: ArrayElement, const N: usize> Value for [T; N] {
    type SelfType<'a>
        = [T::SelfType<'a>; N]
    where
        Self: 'a;

    fn fixed_width() -> Option<usize> {
        T::fixed_width()?.checked_mul(N)
    }
    fn encode_value(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
        for item in value {
            T::encode_value(item, out);
        }
    }
    fn decode_value<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
    where
        Self: 'a,
    {
        decode_array::<T, N>(bytes, Ctx::Value, T::decode_value)
    }
    fn type_name() -> String {
        format!("[{};{N}]", T::type_name())
    }
}

impl<T: ArrayElement + Key, const N: usize> Key for [T; N] {
    fn encode_key(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
        for item in value {
            T::encode_key(item, out);
        }
    }
    fn decode_key<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
    where
        Self: 'a,
    {
        decode_array::<T, N>(bytes, Ctx::Key, T::decode_key)
    }
}

impl<T: ArrayElement + Key, const N: usize> KeyPart for [T; N] {
    fn encode_key_part(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
        Self::encode_key(value, out);
    }
    fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(Self::SelfType<'a>, usize)>
    where
        Self: 'a,
    {
        let len = Self::fixed_width().ok_or_else(|| Ctx::Key.err("array width overflows usize"))?;
        let Some(head) = bytes.get(..len) else {
            return Err(Ctx::Key.err(format!(
                "{} key part needs {len} bytes, found {}",
                Self::type_name(),
                bytes.len()
            )));
        };
        Ok((Self::decode_key(head)?, len))
    }
}

impl<T: ArrayElement, const N: usize> FixedWidth for [T; N] {}
impl<T: ArrayElement, const N: usize> ArrayElement for [T; N] {}

// ---------------------------------------------------------------------------
// Tuples
// ---------------------------------------------------------------------------

/// Sum of the element widths, if every element is fixed-width.
fn sum_widths(widths: &[Option<usize>]) -> Option<usize> {
    widths
        .iter()
        .try_fold(0usize, |acc, w| acc.checked_add((*w)?))
}

/// `"(a,b,c)"`, or `"(a,)"` for a 1-tuple.
fn tuple_type_name(names: &[String]) -> String {
    match names {
        [one] => format!("({one},)"),
        _ => format!("({})", names.join(",")),
    }
}

/// Writes a non-final tuple element's value: raw if fixed-width, else with a
/// `u32` little-endian length prefix ([`element_len_prefix`]).
fn encode_value_element<T: Value>(value: &T::SelfType<'_>, out: &mut Vec<u8>) {
    if T::fixed_width().is_some() {
        T::encode_value(value, out);
        return;
    }
    let len_at = out.len();
    out.extend_from_slice(&[0; 4]);
    T::encode_value(value, out);
    let len = element_len_prefix(out.len() - len_at - 4);
    out[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
}

/// The length prefix of a tuple element of `len` bytes: `u32::MAX` for
/// one of 4 GiB or more. Such an element makes the whole value longer
/// than any value may be, so the write fails with `ValueTooLarge` before
/// anything is stored (it panicked here before; found by an adversarial
/// probe).
fn element_len_prefix(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// Reads a non-final tuple element's value; returns it and the bytes after it.
fn decode_value_element<'a, T: Value + 'a>(bytes: &'a [u8]) -> Result<(T::SelfType<'a>, &'a [u8])> {
    let (len, rest) = match T::fixed_width() {
        Some(width) => (width, bytes),
        None => split_value_len(bytes)?,
    };
    let Some((element, after)) = rest.split_at_checked(len) else {
        return Err(Ctx::Value.err(format!(
            "tuple element of {len} bytes but only {} remain",
            rest.len()
        )));
    };
    Ok((T::decode_value(element)?, after))
}

/// Splits the `u32` little-endian length prefix off the start of `bytes`.
fn split_value_len(bytes: &[u8]) -> Result<(usize, &[u8])> {
    let (raw, rest) = bytes.split_first_chunk::<4>().ok_or_else(|| {
        Ctx::Value.err(format!(
            "tuple element length needs 4 bytes, found {}",
            bytes.len()
        ))
    })?;
    let len = usize::try_from(u32::from_le_bytes(*raw))
        .map_err(|_| Ctx::Value.err("tuple element length overflows usize"))?;
    Ok((len, rest))
}

/// Implements the traits for one tuple arity. The non-final elements are
/// listed before the `;`, the final one after it, each as
/// `TypeParam variable index`.
macro_rules! impl_tuple {
    ($($init:ident $iv:ident $ii:tt),* ; $last:ident $lv:ident $li:tt) => {
        impl<$($init: Value,)* $last: Value> Value for ($($init,)* $last,) {
            type SelfType<'a>
                = ($($init::SelfType<'a>,)* $last::SelfType<'a>,)
            where
                Self: 'a;

            fn fixed_width() -> Option<usize> {
                sum_widths(&[$($init::fixed_width(),)* $last::fixed_width()])
            }
            fn encode_value(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                $(encode_value_element::<$init>(&value.$ii, out);)*
                $last::encode_value(&value.$li, out);
            }
            fn decode_value<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
            where
                Self: 'a,
            {
                let rest = bytes;
                $(let ($iv, rest) = decode_value_element::<$init>(rest)?;)*
                let $lv = $last::decode_value(rest)?;
                Ok(($($iv,)* $lv,))
            }
            fn type_name() -> String {
                tuple_type_name(&[$($init::type_name(),)* $last::type_name()])
            }
        }

        impl<$($init: FixedWidth,)* $last: FixedWidth> FixedWidth for ($($init,)* $last,) {}
        impl<$($init: FixedWidth,)* $last: FixedWidth> ArrayElement for ($($init,)* $last,) {}

        impl<$($init: KeyPart,)* $last: Key> Key for ($($init,)* $last,) {
            fn encode_key(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                $($init::encode_key_part(&value.$ii, out);)*
                $last::encode_key(&value.$li, out);
            }
            fn decode_key<'a>(bytes: &'a [u8]) -> Result<Self::SelfType<'a>>
            where
                Self: 'a,
            {
                let rest = bytes;
                $(
                    let ($iv, used) = $init::decode_key_part(rest)?;
                    let rest = advance(rest, used, Ctx::Key)?;
                )*
                let $lv = $last::decode_key(rest)?;
                Ok(($($iv,)* $lv,))
            }
        }

        impl<$($init: KeyPart,)* $last: KeyPart> KeyPart for ($($init,)* $last,) {
            fn encode_key_part(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                $($init::encode_key_part(&value.$ii, out);)*
                $last::encode_key_part(&value.$li, out);
            }
            fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(Self::SelfType<'a>, usize)>
            where
                Self: 'a,
            {
                let rest = bytes;
                $(
                    let ($iv, used) = $init::decode_key_part(rest)?;
                    let rest = advance(rest, used, Ctx::Key)?;
                )*
                let ($lv, used) = $last::decode_key_part(rest)?;
                let rest = advance(rest, used, Ctx::Key)?;
                Ok((($($iv,)* $lv,), bytes.len() - rest.len()))
            }
        }
    };
}

impl_tuple!(; A a 0);
impl_tuple!(A a 0; B b 1);
impl_tuple!(A a 0, B b 1; C c 2);
impl_tuple!(A a 0, B b 1, C c 2; D d 3);
impl_tuple!(A a 0, B b 1, C c 2, D d 3; E e 4);
impl_tuple!(A a 0, B b 1, C c 2, D d 3, E e 4; F f 5);
impl_tuple!(A a 0, B b 1, C c 2, D d 3, E e 4, F f 5; G g 6);
impl_tuple!(A a 0, B b 1, C c 2, D d 3, E e 4, F f 5, G g 6; H h 7);
impl_tuple!(A a 0, B b 1, C c 2, D d 3, E e 4, F f 5, G g 6, H h 7; I i 8);
impl_tuple!(A a 0, B b 1, C c 2, D d 3, E e 4, F f 5, G g 6, H h 7, I i 8; J j 9);
impl_tuple!(A a 0, B b 1, C c 2, D d 3, E e 4, F f 5, G g 6, H h 7, I i 8, J j 9; K k 10);
impl_tuple!(A a 0, B b 1, C c 2, D d 3, E e 4, F f 5, G g 6, H h 7, I i 8, J j 9, K k 10; L l 11);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// A tuple element of 4 GiB or more gets a saturated prefix instead of
    /// a panic, and a value holding one is past the value limit, so the
    /// write is refused with `ValueTooLarge` (not tested by encoding one:
    /// that takes over 4 GiB of memory).
    #[test]
    fn an_element_of_4_gib_saturates_its_prefix_and_is_past_the_value_limit() {
        assert_eq!(element_len_prefix(0), 0);
        assert_eq!(element_len_prefix(u32::MAX as usize), u32::MAX);
        let huge = u32::MAX as usize + 1;
        assert_eq!(element_len_prefix(huge), u32::MAX);
        assert!(huge > crate::btree::max_value_len());
    }

    // ---- strategies -------------------------------------------------------

    /// Strings over a small alphabet rich in NULs, so prefixes, equal
    /// elements and escapes come up often.
    fn string() -> impl Strategy<Value = String> {
        let ch = prop_oneof![
            Just('\0'),
            Just('a'),
            Just('b'),
            Just('\u{ff}'),
            any::<char>()
        ];
        vec(ch, 0..8).prop_map(String::from_iter)
    }

    /// `&'static str` keys for tuples, with prefixes and NULs.
    fn static_str() -> impl Strategy<Value = &'static str> {
        proptest::sample::select(&["", "\0", "a", "a\0", "a\0b", "ab", "b", "\u{ff}"][..])
    }

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        vec(
            prop_oneof![Just(0u8), Just(1), Just(0xFF), any::<u8>()],
            0..10,
        )
    }

    /// Random bytes biased towards tags, escapes and terminators.
    fn noise() -> impl Strategy<Value = Vec<u8>> {
        vec(
            prop_oneof![Just(0u8), Just(1), Just(0xFF), any::<u8>()],
            0..32,
        )
    }

    // ---- generic checks ---------------------------------------------------

    /// Decoding arbitrary bytes must not panic; failures are `Corrupted`,
    /// successes are canonical (re-encoding gives the same bytes).
    fn fuzz_value<'a, T: Value + 'a>(bytes: &'a [u8]) {
        match T::decode_value(bytes) {
            Ok(v) => assert_eq!(encode_value_to_vec::<T>(&v), bytes, "{}", T::type_name()),
            Err(e) => assert!(e.is_corrupted(), "{e}"),
        }
    }

    fn fuzz_key<'a, T: Key + 'a>(bytes: &'a [u8]) {
        fuzz_value::<T>(bytes);
        match T::decode_key(bytes) {
            Ok(v) => assert_eq!(encode_key_to_vec::<T>(&v), bytes, "{}", T::type_name()),
            Err(e) => assert!(e.is_corrupted(), "{e}"),
        }
    }

    fn fuzz_part<'a, T: KeyPart + 'a>(bytes: &'a [u8]) {
        fuzz_key::<T>(bytes);
        match T::decode_key_part(bytes) {
            Ok((v, used)) => {
                assert!(used <= bytes.len());
                let mut enc = Vec::new();
                T::encode_key_part(&v, &mut enc);
                assert_eq!(enc, &bytes[..used], "{}", T::type_name());
            }
            Err(e) => assert!(e.is_corrupted(), "{e}"),
        }
    }

    fn part_of<T: KeyPart>(value: &T::SelfType<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        T::encode_key_part(value, &mut out);
        out
    }

    // ---- property tests ---------------------------------------------------

    /// Order preservation, round trips of key and value encodings, fixed
    /// widths, and no panics on truncated encodings.
    macro_rules! key_props {
        ($($name:ident: $t:ty = $strat:expr;)*) => {$(
            proptest! {
                #[test]
                fn $name(a in $strat, b in $strat) {
                    let (ka, kb) = (encode_key_to_vec::<$t>(&a), encode_key_to_vec::<$t>(&b));
                    prop_assert_eq!(a.cmp(&b), ka.cmp(&kb));
                    prop_assert_eq!(<$t as Key>::decode_key(&ka).unwrap(), a.clone());
                    let va = encode_value_to_vec::<$t>(&a);
                    prop_assert_eq!(<$t as Value>::decode_value(&va).unwrap(), a.clone());
                    if let Some(width) = <$t as Value>::fixed_width() {
                        prop_assert_eq!(ka.len(), width);
                        prop_assert_eq!(va.len(), width);
                    }
                    for n in 0..ka.len() {
                        fuzz_key::<$t>(&ka[..n]);
                    }
                    for n in 0..va.len() {
                        fuzz_value::<$t>(&va[..n]);
                    }
                }
            }
        )*};
    }

    /// Part encodings round trip with trailing bytes, report their length,
    /// and keep order whatever follows them.
    macro_rules! part_props {
        ($($name:ident: $t:ty = $strat:expr;)*) => {$(
            proptest! {
                #[test]
                fn $name(a in $strat, b in $strat, sa in noise(), sb in noise()) {
                    let (mut pa, mut pb) = (part_of::<$t>(&a), part_of::<$t>(&b));
                    let len = pa.len();
                    pa.extend_from_slice(&sa);
                    pb.extend_from_slice(&sb);
                    let (decoded, used) = <$t as KeyPart>::decode_key_part(&pa).unwrap();
                    prop_assert_eq!(decoded, a.clone());
                    prop_assert_eq!(used, len);
                    if a != b {
                        prop_assert_eq!(a.cmp(&b), pa.cmp(&pb));
                    }
                    for n in 0..len {
                        fuzz_part::<$t>(&pa[..n]);
                    }
                }
            }
        )*};
    }

    /// Value-only types (floats inside): the value encoding round trips
    /// (re-encoding the decoded value gives the same bytes, which for these
    /// bit-exact encodings means the same bits, NaNs included), has the
    /// fixed width, and truncations do not panic.
    macro_rules! value_props {
        ($($name:ident: $t:ty = $strat:expr;)*) => {$(
            proptest! {
                #[test]
                fn $name(a in $strat) {
                    let va = encode_value_to_vec::<$t>(&a);
                    let back = <$t as Value>::decode_value(&va).unwrap();
                    prop_assert_eq!(encode_value_to_vec::<$t>(&back), va.clone());
                    if let Some(width) = <$t as Value>::fixed_width() {
                        prop_assert_eq!(va.len(), width);
                    }
                    for n in 0..va.len() {
                        fuzz_value::<$t>(&va[..n]);
                    }
                }
            }
        )*};
    }

    /// Small element ranges so equal elements and prefixes come up often.
    fn short_vec<S: Strategy>(element: S) -> impl Strategy<Value = Vec<S::Value>> {
        vec(element, 0..5)
    }

    /// `&'static [u8; 2]` elements for borrowed arrays.
    fn static_pair() -> impl Strategy<Value = &'static [u8; 2]> {
        proptest::sample::select(&[&[0u8, 0], &[0, 1], &[1, 0], &[0xFF, 0xFF]][..])
    }

    key_props! {
        key_vec_u32: Vec<u32> = short_vec(0u32..3);
        key_vec_u32_any: Vec<u32> = short_vec(any::<u32>());
        key_vec_u8_pairs: Vec<[u8; 2]> = short_vec(any::<[u8; 2]>());
        key_vec_i16: Vec<i16> = short_vec(-2i16..2);
        key_vec_i128: Vec<i128> = short_vec(any::<i128>());
        key_vec_u128: Vec<u128> = short_vec(0u128..2);
        key_vec_bool: Vec<bool> = short_vec(any::<bool>());
        key_vec_char: Vec<char> = short_vec(prop_oneof![Just('a'), any::<char>()]);
        key_vec_unit: Vec<()> = short_vec(Just(()));
        key_vec_tuple: Vec<(u8, i32)> = short_vec((0u8..2, -1i32..1));
        key_vec_unit_tuple: Vec<((), u8)> = short_vec((Just(()), 0u8..2));
        key_vec_arrays: Vec<[u16; 2]> = short_vec(any::<[u16; 2]>());
        key_vec_borrowed_arrays: Vec<&'static [u8; 2]> = short_vec(static_pair());
        key_borrowed_arrays_in_tuple: (&'static [u8; 2], u8, &'static [u8; 2]) =
            (static_pair(), 0u8..2, static_pair());
        key_array_u32: [u32; 3] = any::<[u32; 3]>();
        key_array_i8: [i8; 4] = any::<[i8; 4]>();
        key_array_bool: [bool; 2] = any::<[bool; 2]>();
        key_array_char: [char; 2] = any::<[char; 2]>();
        key_array_unit: [(); 3] = Just([(); 3]);
        key_array_empty: [u64; 0] = Just([]);
        key_array_nested: [[u8; 2]; 2] = any::<[[u8; 2]; 2]>();
        key_array_of_arrays: [[i16; 2]; 2] = any::<[[i16; 2]; 2]>();
        key_array_tuples: [(u8, char); 2] = any::<[(u8, char); 2]>();
        key_vec_first: (Vec<u32>, u8) = (short_vec(0u32..3), 0u8..2);
        key_vec_middle: (u8, Vec<u32>, u8) = (0u8..2, short_vec(0u32..3), 0u8..2);
        key_vec_last: (u8, Vec<u32>) = (0u8..2, short_vec(0u32..3));
        key_vecs_and_arrays: (Vec<()>, Vec<u16>, [i8; 2], Vec<bool>) =
            (short_vec(Just(())), short_vec(0u16..2), any::<[i8; 2]>(), short_vec(any::<bool>()));
        key_array_in_tuple: ([u16; 2], String, [u16; 2]) =
            (any::<[u16; 2]>(), string(), any::<[u16; 2]>());
        key_option_vec: (Option<Vec<u32>>, u8) =
            (proptest::option::of(short_vec(0u32..2)), 0u8..2);
        key_twelve_new_types: (Vec<u8>, Vec<u16>, [u32; 2], Cow<'static, str>, Vec<()>, u8,
                               Cow<'static, [u8]>, Vec<(u8, bool)>, [char; 1], i8, Vec<i64>, &'static str) =
            (bytes(), short_vec(0u16..2), any::<[u32; 2]>(), string().prop_map(Cow::Owned),
             short_vec(Just(())), 0u8..2, bytes().prop_map(Cow::Owned),
             short_vec((0u8..2, any::<bool>())), any::<[char; 1]>(), -1i8..1,
             short_vec(-1i64..1), static_str());
    }

    part_props! {
        part_vec_u32: Vec<u32> = short_vec(0u32..3);
        part_vec_unit: Vec<()> = short_vec(Just(()));
        part_vec_tuple: Vec<(u8, char)> = short_vec((0u8..2, Just('a')));
        part_vec_arrays: Vec<[u8; 2]> = short_vec(any::<[u8; 2]>());
        part_array_u16: [u16; 2] = any::<[u16; 2]>();
        part_array_unit: [(); 2] = Just([(); 2]);
        part_array_nested: [[u8; 2]; 2] = any::<[[u8; 2]; 2]>();
        part_vec_pair: (Vec<i16>, Vec<i16>) = (short_vec(-1i16..1), short_vec(-1i16..1));
    }

    value_props! {
        value_vec_f64: Vec<f64> = short_vec(any::<f64>());
        value_vec_f32: Vec<f32> = short_vec(any::<f32>());
        value_array_f64: [f64; 2] = any::<[f64; 2]>();
        value_vec_float_tuples: Vec<(f32, u8)> = short_vec(any::<(f32, u8)>());
        value_vec_float_arrays: Vec<[f64; 2]> = short_vec(any::<[f64; 2]>());
        value_vecs_in_tuple: (Vec<f32>, String, Vec<u8>, [f64; 1]) =
            (short_vec(any::<f32>()), string(), bytes(), any::<[f64; 1]>());
        value_twelve: (f32, f64, Vec<f32>, u8, u8, u8, u8, u8, u8, Vec<(u8, f64)>, [f32; 2], Vec<f64>) =
            (any::<f32>(), any::<f64>(), short_vec(any::<f32>()), any::<u8>(), any::<u8>(),
             any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>(),
             short_vec(any::<(u8, f64)>()), any::<[f32; 2]>(), short_vec(any::<f64>()));
    }

    key_props! {
        key_u8: u8 = any::<u8>();
        key_u16: u16 = any::<u16>();
        key_u32: u32 = any::<u32>();
        key_u64: u64 = any::<u64>();
        key_u128: u128 = any::<u128>();
        key_i8: i8 = any::<i8>();
        key_i16: i16 = any::<i16>();
        key_i32: i32 = any::<i32>();
        key_i64: i64 = any::<i64>();
        key_i128: i128 = any::<i128>();
        key_i64_small: i64 = -3i64..3;
        key_bool: bool = any::<bool>();
        key_char: char = any::<char>();
        key_string: String = string();
        key_bytes: Vec<u8> = bytes();
        key_array: [u8; 4] = any::<[u8; 4]>();
        key_unit: () = Just(());
        key_option_u32: Option<u32> = proptest::option::of(0u32..4);
        key_option_string: Option<String> = proptest::option::of(string());
        key_triple: (u32, String, i64) = (0u32..3, string(), -2i64..2);
        key_string_bytes: (String, Vec<u8>) = (string(), bytes());
        key_unit_u8: ((), u8) = (Just(()), any::<u8>());
        key_one_tuple: (u64,) = (any::<u64>(),);
        key_nested: ((u8, String), Option<Vec<u8>>) =
            ((0u8..2, string()), proptest::option::of(bytes()));
        key_eight: (bool, u8, i8, char, Option<u8>, (), String, Vec<u8>) =
            (any::<bool>(), 0u8..2, -1i8..1, Just('x'), proptest::option::of(0u8..2),
             Just(()), string(), bytes());
        key_cow_str: Cow<'static, str> = string().prop_map(Cow::Owned);
        key_cow_bytes: Cow<'static, [u8]> = bytes().prop_map(Cow::Owned);
        key_cow_str_u64_str: (Cow<'static, str>, u64, &'static str) =
            (string().prop_map(Cow::Owned), 0u64..2, static_str());
        key_cows_everywhere: (Cow<'static, [u8]>, Cow<'static, str>, u8, Cow<'static, str>) =
            (bytes().prop_map(Cow::Owned), string().prop_map(Cow::Owned), 0u8..2,
             string().prop_map(Cow::Owned));
        key_nine: (u8, String, bool, i16, Option<u8>, (), char, Vec<u8>, u32) =
            (0u8..2, string(), any::<bool>(), -1i16..1, proptest::option::of(0u8..2),
             Just(()), Just('x'), bytes(), any::<u32>());
        key_ten: (u8, u8, u8, u8, u8, u8, u8, u8, String, i32) =
            (0u8..2, 0u8..2, 0u8..2, 0u8..2, 0u8..2, 0u8..2, 0u8..2, 0u8..2, string(), any::<i32>());
        key_eleven: (String, u8, u8, u8, u8, u8, u8, u8, u8, u8, Vec<u8>) =
            (string(), 0u8..2, 0u8..2, 0u8..2, 0u8..2, 0u8..2, 0u8..2, 0u8..2, 0u8..2, 0u8..2, bytes());
        key_twelve: (bool, u8, i8, char, Option<u8>, (), String, Vec<u8>, u16, i64, [u8; 2], String) =
            (any::<bool>(), 0u8..2, -1i8..1, Just('x'), proptest::option::of(0u8..2),
             Just(()), string(), bytes(), 0u16..2, -1i64..1, any::<[u8; 2]>(), string());
    }

    part_props! {
        part_u8: u8 = any::<u8>();
        part_u16: u16 = any::<u16>();
        part_u32: u32 = any::<u32>();
        part_u64: u64 = any::<u64>();
        part_u128: u128 = any::<u128>();
        part_i8: i8 = any::<i8>();
        part_i16: i16 = any::<i16>();
        part_i32: i32 = any::<i32>();
        part_i64: i64 = any::<i64>();
        part_i128: i128 = any::<i128>();
        part_bool: bool = any::<bool>();
        part_char: char = any::<char>();
        part_string: String = string();
        part_bytes: Vec<u8> = bytes();
        part_array: [u8; 4] = any::<[u8; 4]>();
        part_option_u32: Option<u32> = proptest::option::of(0u32..4);
        part_option_string: Option<String> = proptest::option::of(string());
        part_triple: (u32, String, i64) = (0u32..3, string(), -2i64..2);
        part_string_bytes: (String, Vec<u8>) = (string(), bytes());
        part_unit_u8: ((), u8) = (Just(()), any::<u8>());
        part_cow_str: Cow<'static, str> = string().prop_map(Cow::Owned);
        part_cow_bytes: Cow<'static, [u8]> = bytes().prop_map(Cow::Owned);
        part_cow_pair: (Cow<'static, str>, Cow<'static, [u8]>) =
            (string().prop_map(Cow::Owned), bytes().prop_map(Cow::Owned));
        part_twelve: (bool, u8, i8, char, Option<u8>, (), String, Vec<u8>, u16, i64, [u8; 2], String) =
            (any::<bool>(), 0u8..2, -1i8..1, Just('x'), proptest::option::of(0u8..2),
             Just(()), string(), bytes(), 0u16..2, -1i64..1, any::<[u8; 2]>(), string());
    }

    proptest! {
        #[test]
        fn str_and_slice_match_owned_forms(a in string(), b in string(), x in bytes()) {
            let (ka, kb) = (
                encode_key_to_vec::<&str>(&a.as_str()),
                encode_key_to_vec::<&str>(&b.as_str()),
            );
            prop_assert_eq!(a.cmp(&b), ka.cmp(&kb));
            prop_assert_eq!(&ka, &encode_key_to_vec::<String>(&a));
            prop_assert_eq!(<&str>::decode_key(&ka).unwrap(), a.as_str());
            prop_assert_eq!(<&str>::decode_value(&ka).unwrap(), a.as_str());
            let kx = encode_key_to_vec::<&[u8]>(&x.as_slice());
            prop_assert_eq!(&kx, &x);
            prop_assert_eq!(<&[u8]>::decode_key(&kx).unwrap(), x.as_slice());
            prop_assert_eq!(<&[u8]>::decode_value(&kx).unwrap(), x.as_slice());
        }

        #[test]
        fn cow_parts_match_owned_forms(a in string(), x in bytes(), n in any::<u64>(), t in static_str()) {
            let cow = Cow::Borrowed(a.as_str());
            prop_assert_eq!(part_of::<Cow<'static, str>>(&cow), part_of::<String>(&a));
            let cow_x = Cow::Borrowed(x.as_slice());
            prop_assert_eq!(part_of::<Cow<'static, [u8]>>(&cow_x), part_of::<Vec<u8>>(&x));
            let key = encode_key_to_vec::<(Cow<'static, str>, u64, &str)>(&(cow.clone(), n, t));
            prop_assert_eq!(&key, &encode_key_to_vec::<(String, u64, &str)>(&(a.clone(), n, t)));
            let (back, m, tail) = <(Cow<'static, str>, u64, &str)>::decode_key(&key).unwrap();
            prop_assert_eq!((back.as_ref(), m, tail), (a.as_str(), n, t));
            // Borrowed exactly when the part holds no 00 byte.
            prop_assert_eq!(matches!(back, Cow::Borrowed(_)), !a.contains('\0'));
            if let Cow::Borrowed(b) = back {
                prop_assert_eq!(b.as_ptr(), key.as_ptr());
            }
            let value = encode_value_to_vec::<(Cow<'static, str>, u64)>(&(cow.clone(), n));
            prop_assert_eq!(&value, &encode_value_to_vec::<(String, u64)>(&(a.clone(), n)));
            let (v, _) = <(Cow<'static, str>, u64)>::decode_value(&value).unwrap();
            prop_assert!(matches!(v, Cow::Borrowed(_)));
            let x_part = part_of::<Vec<u8>>(&x);
            let (raw, used) = <Cow<'static, [u8]>>::decode_key_part(&x_part).unwrap();
            prop_assert_eq!((raw.as_ref(), used), (x.as_slice(), x_part.len()));
            prop_assert_eq!(matches!(raw, Cow::Borrowed(_)), !x.contains(&0));
        }

        #[test]
        fn byte_array_refs_match_arrays(a in any::<[u8; 4]>(), b in any::<[u8; 4]>(), tail in noise()) {
            let (ka, kb) = (encode_key_to_vec::<&[u8; 4]>(&&a), encode_key_to_vec::<&[u8; 4]>(&&b));
            prop_assert_eq!(&ka, &encode_key_to_vec::<[u8; 4]>(&a));
            prop_assert_eq!(&encode_value_to_vec::<&[u8; 4]>(&&a), &encode_value_to_vec::<[u8; 4]>(&a));
            prop_assert_eq!(a.cmp(&b), ka.cmp(&kb));
            let back = <&[u8; 4]>::decode_key(&ka).unwrap();
            prop_assert_eq!(back, &a);
            prop_assert_eq!(back.as_ptr(), ka.as_ptr());
            prop_assert_eq!(<&[u8; 4]>::decode_value(&ka).unwrap(), &a);
            let mut part = part_of::<&[u8; 4]>(&&a);
            part.extend_from_slice(&tail);
            let (p, used) = <&[u8; 4]>::decode_key_part(&part).unwrap();
            prop_assert_eq!((p, used), (&a, 4));
            let pair = encode_key_to_vec::<(&[u8; 4], &[u8; 4])>(&(&a, &b));
            prop_assert_eq!(<(&[u8; 4], &[u8; 4])>::decode_key(&pair).unwrap(), (&a, &b));
            for n in 0..4 {
                fuzz_part::<&[u8; 4]>(&ka[..n]);
            }
        }

        #[test]
        fn borrowed_tuple_round_trips(n in any::<u64>(), s in string(), o in proptest::option::of(string())) {
            let key = encode_key_to_vec::<(u64, &str)>(&(n, s.as_str()));
            prop_assert_eq!(<(u64, &str)>::decode_key(&key).unwrap(), (n, s.as_str()));
            let value = encode_value_to_vec::<(Option<String>, &str)>(&(o.clone(), s.as_str()));
            prop_assert_eq!(
                <(Option<String>, &str)>::decode_value(&value).unwrap(),
                (o, s.as_str())
            );
        }

        #[test]
        fn floats_round_trip_bits(x in any::<f64>(), y in any::<f32>()) {
            let vx = encode_value_to_vec::<f64>(&x);
            prop_assert_eq!(f64::decode_value(&vx).unwrap().to_bits(), x.to_bits());
            let vy = encode_value_to_vec::<f32>(&y);
            prop_assert_eq!(f32::decode_value(&vy).unwrap().to_bits(), y.to_bits());
        }

        #[test]
        fn decoding_random_bytes_never_panics(b in noise()) {
            let b = b.as_slice();
            fuzz_part::<u8>(b);
            fuzz_part::<u16>(b);
            fuzz_part::<u32>(b);
            fuzz_part::<u64>(b);
            fuzz_part::<u128>(b);
            fuzz_part::<i8>(b);
            fuzz_part::<i16>(b);
            fuzz_part::<i32>(b);
            fuzz_part::<i64>(b);
            fuzz_part::<i128>(b);
            fuzz_part::<bool>(b);
            fuzz_part::<char>(b);
            fuzz_part::<String>(b);
            fuzz_part::<Vec<u8>>(b);
            fuzz_part::<[u8; 4]>(b);
            fuzz_part::<()>(b);
            fuzz_part::<Option<u32>>(b);
            fuzz_part::<Option<String>>(b);
            fuzz_part::<(u32, String, i64)>(b);
            fuzz_part::<(String, Vec<u8>)>(b);
            fuzz_part::<((), u8)>(b);
            fuzz_part::<(bool, u8, i8, char, Option<u8>, (), String, Vec<u8>)>(b);
            fuzz_part::<(u8, String, bool, i16, Option<u8>, (), char, Vec<u8>, u32)>(b);
            fuzz_part::<(bool, u8, i8, char, Option<u8>, (), String, Vec<u8>, u16, i64, [u8; 2], String)>(b);
            fuzz_key::<(u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, String, &str)>(b);
            fuzz_value::<(u8, String, u8, u8, u8, u8, u8, u8, u8, f64, Option<u8>, &[u8])>(b);
            fuzz_part::<Cow<'static, str>>(b);
            fuzz_part::<Cow<'static, [u8]>>(b);
            fuzz_part::<(Cow<'static, str>, Cow<'static, [u8]>)>(b);
            fuzz_part::<&[u8; 4]>(b);
            fuzz_key::<(Cow<'static, str>, u64, &str)>(b);
            fuzz_key::<&str>(b);
            fuzz_part::<Vec<u32>>(b);
            fuzz_part::<Vec<()>>(b);
            fuzz_part::<Vec<char>>(b);
            fuzz_part::<Vec<(u8, bool)>>(b);
            fuzz_part::<Vec<[u8; 2]>>(b);
            fuzz_part::<Vec<&[u8; 2]>>(b);
            fuzz_part::<[u16; 2]>(b);
            fuzz_part::<[(); 2]>(b);
            fuzz_part::<[[u8; 2]; 2]>(b);
            fuzz_part::<[char; 2]>(b);
            fuzz_part::<(Vec<u16>, [bool; 2], Vec<()>)>(b);
            fuzz_value::<Vec<f64>>(b);
            fuzz_value::<[f32; 2]>(b);
            fuzz_value::<(Vec<f32>, u8, Vec<f64>)>(b);
            fuzz_key::<&[u8]>(b);
            fuzz_key::<Option<&str>>(b);
            fuzz_key::<(u64, &str)>(b);
            fuzz_key::<(String, Option<u8>, &[u8])>(b);
            fuzz_value::<f32>(b);
            fuzz_value::<f64>(b);
            fuzz_value::<(f64, String, &str)>(b);
            fuzz_value::<Option<(u8, f32)>>(b);
        }
    }

    // ---- specific cases ---------------------------------------------------

    #[test]
    fn empty_string_key() {
        assert!(encode_key_to_vec::<&str>(&"").is_empty());
        assert_eq!(<&str>::decode_key(&[]).unwrap(), "");
        assert_eq!(String::decode_key(&[]).unwrap(), "");
        assert_eq!(part_of::<String>(&String::new()), [0, 0]);
        assert_eq!(
            String::decode_key_part(&[0, 0, 7]).unwrap(),
            (String::new(), 2)
        );
        let empty = encode_key_to_vec::<(String, u8)>(&(String::new(), 9));
        let a = encode_key_to_vec::<(String, u8)>(&("a".to_string(), 0));
        assert!(empty < a);
    }

    #[test]
    fn nul_bytes_in_non_final_strings_keep_order() {
        let mut keys: Vec<(String, u8)> = ["a\0", "a", "a\0\0", "ab", "", "\0", "a\u{1}"]
            .iter()
            .flat_map(|s| [(s.to_string(), 0), (s.to_string(), 255)])
            .collect();
        let mut by_encoding = keys.clone();
        by_encoding.sort_by_key(encode_key_to_vec::<(String, u8)>);
        keys.sort();
        assert_eq!(by_encoding, keys);
        assert_eq!(part_of::<String>(&"a".into()), b"a\0\0");
        assert_eq!(part_of::<String>(&"a\0".into()), b"a\0\xff\0\0");
        assert_eq!(part_of::<String>(&"a\0\0".into()), b"a\0\xff\0\xff\0\0");
        assert_eq!(part_of::<String>(&"ab".into()), b"ab\0\0");
    }

    #[test]
    fn integer_and_option_layouts() {
        assert_eq!(encode_key_to_vec::<i16>(&-1), [0x7F, 0xFF]);
        assert_eq!(encode_key_to_vec::<i16>(&0), [0x80, 0x00]);
        assert_eq!(encode_key_to_vec::<u32>(&0x0102_0304), [1, 2, 3, 4]);
        assert_eq!(encode_value_to_vec::<u32>(&0x0102_0304), [4, 3, 2, 1]);
        assert_eq!(encode_key_to_vec::<char>(&'A'), [0, 0, 0, 0x41]);
        assert_eq!(encode_key_to_vec::<Option<u8>>(&None), [0]);
        assert_eq!(encode_key_to_vec::<Option<u8>>(&Some(5)), [1, 5]);
        assert_eq!(encode_value_to_vec::<Option<&str>>(&Some("hi")), b"\x01hi");
    }

    #[test]
    fn tuple_value_layout() {
        let v = encode_value_to_vec::<(String, u8)>(&("ab".into(), 7));
        assert_eq!(v, [2, 0, 0, 0, b'a', b'b', 7]);
        let v = encode_value_to_vec::<(u8, String)>(&(7, "ab".into()));
        assert_eq!(v, [7, b'a', b'b']);
        let v = encode_value_to_vec::<(u16, (), bool)>(&(0x0102, (), true));
        assert_eq!(v, [2, 1, 1]);
        type Twelve = (
            u8,
            &'static str,
            u8,
            u8,
            u8,
            u8,
            u8,
            u8,
            u8,
            u8,
            Vec<u8>,
            &'static str,
        );
        let twelve = (1, "ab", 2, 3, 4, 5, 6, 7, 8, 9, vec![0], "z");
        let v = encode_value_to_vec::<Twelve>(&twelve);
        assert_eq!(
            v,
            [1, 2, 0, 0, 0, b'a', b'b', 2, 3, 4, 5, 6, 7, 8, 9, 1, 0, 0, 0, 0, b'z']
        );
        assert_eq!(<Twelve>::decode_value(&v).unwrap(), twelve);
        type TwelveKey = (
            u8,
            String,
            u8,
            u8,
            u8,
            u8,
            u8,
            u8,
            u8,
            u8,
            Vec<u8>,
            &'static str,
        );
        let twelve = (1, "ab".into(), 2, 3, 4, 5, 6, 7, 8, 9, vec![0], "z");
        let k = encode_key_to_vec::<TwelveKey>(&twelve);
        assert_eq!(
            k,
            [1, b'a', b'b', 0, 0, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0xFF, 0, 0, b'z']
        );
    }

    #[test]
    fn vec_and_array_layouts() {
        let v: Vec<u16> = vec![1, 0x0203];
        assert_eq!(encode_value_to_vec::<Vec<u16>>(&v), [1, 0, 3, 2]);
        assert_eq!(encode_key_to_vec::<Vec<u16>>(&v), [0, 1, 2, 3]);
        assert_eq!(part_of::<Vec<u16>>(&v), [1, 0, 1, 1, 2, 3, 0]);
        assert_eq!(part_of::<Vec<u16>>(&vec![]), [0]);
        assert_eq!(encode_key_to_vec::<Vec<i8>>(&vec![-1, 0]), [0x7F, 0x80]);
        assert_eq!(encode_value_to_vec::<Vec<()>>(&vec![(); 3]), [1, 1, 1]);
        assert_eq!(encode_key_to_vec::<Vec<()>>(&vec![(); 2]), [1, 1]);
        assert_eq!(part_of::<Vec<()>>(&vec![(); 2]), [1, 1, 0]);
        assert_eq!(encode_key_to_vec::<[u16; 2]>(&[1, 2]), [0, 1, 0, 2]);
        assert_eq!(encode_value_to_vec::<[u16; 2]>(&[1, 2]), [1, 0, 2, 0]);
        assert!(encode_key_to_vec::<[(); 4]>(&[(); 4]).is_empty());
        assert_eq!(
            encode_value_to_vec::<Vec<(u8, f32)>>(&vec![(7, 1.0)]),
            [7, 0, 0, 0x80, 0x3F]
        );
        // A vector sorts before its extensions, as a whole key and as a part.
        let mut keys: Vec<(Vec<u16>, u8)> = [vec![], vec![0], vec![0, 0], vec![0, 1], vec![1]]
            .into_iter()
            .flat_map(|v| [(v.clone(), 0), (v, 255)])
            .collect();
        let mut by_encoding = keys.clone();
        by_encoding.sort_by_key(encode_key_to_vec::<(Vec<u16>, u8)>);
        keys.sort();
        assert_eq!(by_encoding, keys);
    }

    #[test]
    fn bad_vec_and_array_bytes_are_corrupted() {
        let location = |r: Result<()>| match r {
            Err(Error::Corrupted { location, .. }) => location.to_string(),
            other => panic!("expected corruption, got {other:?}"),
        };
        let value = "value decode";
        let key = "key decode";
        assert_eq!(location(<Vec<u32>>::decode_value(&[0; 5]).map(drop)), value);
        assert_eq!(location(<Vec<u32>>::decode_key(&[0; 3]).map(drop)), key);
        assert_eq!(location(<Vec<()>>::decode_value(&[1, 2]).map(drop)), value);
        assert_eq!(location(<Vec<()>>::decode_key(&[0]).map(drop)), key);
        assert_eq!(location(<Vec<bool>>::decode_key(&[2]).map(drop)), key);
        assert_eq!(
            location(<Vec<u16>>::decode_key_part(&[1, 0]).map(drop)),
            key
        );
        assert_eq!(
            location(<Vec<u16>>::decode_key_part(&[1, 0, 1]).map(drop)),
            key
        );
        assert_eq!(
            location(<Vec<u16>>::decode_key_part(&[1, 0, 1, 2]).map(drop)),
            key
        );
        assert_eq!(
            location(<Vec<u16>>::decode_key_part(&[2, 0, 0]).map(drop)),
            key
        );
        assert_eq!(location(<Vec<u16>>::decode_key_part(&[]).map(drop)), key);
        assert_eq!(location(<[u16; 2]>::decode_value(&[0; 3]).map(drop)), value);
        assert_eq!(
            location(<[u16; 2]>::decode_key_part(&[0; 3]).map(drop)),
            key
        );
        assert_eq!(location(<[(); 2]>::decode_key(&[0]).map(drop)), key);
        assert_eq!(
            location(<[char; 1]>::decode_key(&[0, 0xD8, 0, 0]).map(drop)),
            key
        );
        assert_eq!(location(<&[u8; 2]>::decode_value(&[0; 3]).map(drop)), value);
        assert_eq!(location(<&[u8; 2]>::decode_key_part(&[0]).map(drop)), key);
    }

    #[test]
    fn bad_bytes_are_corrupted_with_location() {
        let key_err = |r: Result<()>| match r {
            Err(Error::Corrupted { location, .. }) => location.to_string(),
            other => panic!("expected corruption, got {other:?}"),
        };
        assert_eq!(key_err(bool::decode_key(&[2]).map(drop)), "key decode");
        assert_eq!(key_err(bool::decode_value(&[]).map(drop)), "value decode");
        assert_eq!(
            key_err(char::decode_key(&0xD800u32.to_be_bytes()).map(drop)),
            "key decode"
        );
        assert_eq!(
            key_err(char::decode_value(&0x11_0000u32.to_le_bytes()).map(drop)),
            "value decode"
        );
        assert_eq!(key_err(<&str>::decode_key(&[0xC3]).map(drop)), "key decode");
        assert_eq!(key_err(u64::decode_key(&[1, 2, 3]).map(drop)), "key decode");
        assert_eq!(
            key_err(u64::decode_value(&[0; 9]).map(drop)),
            "value decode"
        );
        assert_eq!(
            key_err(String::decode_key_part(b"ab").map(drop)),
            "key decode"
        );
        assert_eq!(
            key_err(String::decode_key_part(b"a\0\x01\0\0").map(drop)),
            "key decode"
        );
        assert_eq!(
            key_err(String::decode_key_part(b"a\0").map(drop)),
            "key decode"
        );
        assert_eq!(
            key_err(<Option<u8>>::decode_key(&[2, 0]).map(drop)),
            "key decode"
        );
        assert_eq!(
            key_err(<Option<u8>>::decode_key(&[0, 0]).map(drop)),
            "key decode"
        );
        assert_eq!(key_err(<()>::decode_value(&[0]).map(drop)), "value decode");
        // Length prefix larger than what remains.
        let r = <(String, u8)>::decode_value(&[9, 0, 0, 0, b'a', 1]).map(drop);
        assert_eq!(key_err(r), "value decode");
        let r = <(String, u8)>::decode_value(&[0xFF, 0xFF, 0xFF, 0xFF]).map(drop);
        assert_eq!(key_err(r), "value decode");
        let r = <(String, u8)>::decode_value(&[0, 0]).map(drop);
        assert_eq!(key_err(r), "value decode");
    }

    #[test]
    fn str_decodes_without_copying() {
        let stored = b"hello".to_vec();
        let s = <&str>::decode_value(&stored).unwrap();
        assert_eq!(s.as_ptr(), stored.as_ptr());
        let (_, tail) = <(u8, &[u8])>::decode_key(&stored).unwrap();
        assert_eq!(tail.as_ptr(), stored[1..].as_ptr());
    }

    #[test]
    fn type_names() {
        assert_eq!(u64::type_name(), "u64");
        assert_eq!(i128::type_name(), "i128");
        assert_eq!(bool::type_name(), "bool");
        assert_eq!(char::type_name(), "char");
        assert_eq!(<&str>::type_name(), "str");
        assert_eq!(String::type_name(), "str");
        assert_eq!(<&[u8]>::type_name(), "bytes");
        assert_eq!(<Vec<u8>>::type_name(), "bytes");
        assert_eq!(<[u8; 16]>::type_name(), "[u8;16]");
        assert_eq!(<&[u8; 16]>::type_name(), "[u8;16]");
        assert_eq!(<Vec<u32>>::type_name(), "Vec<u32>");
        assert_eq!(<Vec<[u8; 16]>>::type_name(), "Vec<[u8;16]>");
        assert_eq!(<Vec<(u8, i32)>>::type_name(), "Vec<(u8,i32)>");
        assert_eq!(<Vec<()>>::type_name(), "Vec<()>");
        assert_eq!(<[u32; 3]>::type_name(), "[u32;3]");
        assert_eq!(<[[u8; 2]; 4]>::type_name(), "[[u8;2];4]");
        assert_eq!(<[f64; 2]>::type_name(), "[f64;2]");
        assert_eq!(<Cow<'static, str>>::type_name(), "str");
        assert_eq!(<Cow<'static, [u8]>>::type_name(), "bytes");
        assert_eq!(
            <(Cow<'static, str>, u64, &str)>::type_name(),
            <(String, u64, &str)>::type_name()
        );
        assert_eq!(<()>::type_name(), "()");
        assert_eq!(f32::type_name(), "f32");
        assert_eq!(f64::type_name(), "f64");
        assert_eq!(<Option<u32>>::type_name(), "Option<u32>");
        assert_eq!(<Option<&str>>::type_name(), "Option<str>");
        assert_eq!(<(u64,)>::type_name(), "(u64,)");
        assert_eq!(<(u64, &str)>::type_name(), "(u64,str)");
        assert_eq!(<(u32, String, i64)>::type_name(), "(u32,str,i64)");
        assert_eq!(<((), u8)>::type_name(), "((),u8)");
        assert_eq!(
            <(u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, &str)>::type_name(),
            "(u8,u8,u8,u8,u8,u8,u8,u8,u8,u8,u8,str)"
        );
        assert_eq!(
            <(Option<(u8, bool)>, Vec<u8>)>::type_name(),
            "(Option<(u8,bool)>,bytes)"
        );
    }

    #[test]
    fn fixed_widths() {
        assert_eq!(u8::fixed_width(), Some(1));
        assert_eq!(u128::fixed_width(), Some(16));
        assert_eq!(i64::fixed_width(), Some(8));
        assert_eq!(bool::fixed_width(), Some(1));
        assert_eq!(char::fixed_width(), Some(4));
        assert_eq!(f32::fixed_width(), Some(4));
        assert_eq!(f64::fixed_width(), Some(8));
        assert_eq!(<[u8; 7]>::fixed_width(), Some(7));
        assert_eq!(<&[u8; 7]>::fixed_width(), Some(7));
        assert_eq!(<[u32; 3]>::fixed_width(), Some(12));
        assert_eq!(<[[u16; 2]; 3]>::fixed_width(), Some(12));
        assert_eq!(<[(); 5]>::fixed_width(), Some(0));
        assert_eq!(<[f64; 0]>::fixed_width(), Some(0));
        assert_eq!(<Vec<u32>>::fixed_width(), None);
        assert_eq!(<([u16; 2], u8)>::fixed_width(), Some(5));
        assert_eq!(<[(u8, char); 2]>::fixed_width(), Some(10));
        assert_eq!(<Cow<'static, str>>::fixed_width(), None);
        assert_eq!(<Cow<'static, [u8]>>::fixed_width(), None);
        assert_eq!(<()>::fixed_width(), Some(0));
        assert_eq!(<&str>::fixed_width(), None);
        assert_eq!(String::fixed_width(), None);
        assert_eq!(<&[u8]>::fixed_width(), None);
        assert_eq!(<Vec<u8>>::fixed_width(), None);
        assert_eq!(<Option<u32>>::fixed_width(), None);
        assert_eq!(<(u32, u64)>::fixed_width(), Some(12));
        assert_eq!(<((), u8)>::fixed_width(), Some(1));
        assert_eq!(<(u32, String)>::fixed_width(), None);
        assert_eq!(
            <(u8, u8, u8, u8, u8, u8, u8, [u8; 3])>::fixed_width(),
            Some(10)
        );
        assert_eq!(
            <(u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u16, [u8; 3])>::fixed_width(),
            Some(15)
        );
    }

    #[test]
    fn table_definitions_are_const() {
        const T: TableDefinition<&str, u64> = TableDefinition::new("t");
        const U: TableDefinition<(u64, &str), Option<String>> = TableDefinition::new("u");
        let copy = T;
        let cloned = Clone::clone(&U);
        assert_eq!(T.name(), "t");
        assert_eq!(copy.name(), "t");
        assert_eq!(cloned.name(), "u");
        assert_eq!(T.key_type_name(), "str");
        assert_eq!(U.key_type_name(), "(u64,str)");
        assert_eq!(U.value_type_name(), "Option<str>");
        assert_eq!(
            format!("{T:?}"),
            r#"TableDefinition { name: "t", key: "str", value: "u64" }"#
        );
        fn send_sync<X: Send + Sync>(_: X) {}
        send_sync(U);
    }

    /// A user-defined key type, delegating to `i32`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    struct Celsius(i32);

    impl Value for Celsius {
        type SelfType<'a> = Celsius;

        fn fixed_width() -> Option<usize> {
            <i32 as Value>::fixed_width()
        }
        fn encode_value(value: &Celsius, out: &mut Vec<u8>) {
            i32::encode_value(&value.0, out);
        }
        fn decode_value<'a>(bytes: &'a [u8]) -> Result<Celsius>
        where
            Self: 'a,
        {
            i32::decode_value(bytes).map(Celsius)
        }
        fn type_name() -> String {
            "test::Celsius".to_string()
        }
    }

    impl Key for Celsius {
        fn encode_key(value: &Celsius, out: &mut Vec<u8>) {
            i32::encode_key(&value.0, out);
        }
        fn decode_key<'a>(bytes: &'a [u8]) -> Result<Celsius>
        where
            Self: 'a,
        {
            i32::decode_key(bytes).map(Celsius)
        }
    }

    impl KeyPart for Celsius {
        fn encode_key_part(value: &Celsius, out: &mut Vec<u8>) {
            i32::encode_key_part(&value.0, out);
        }
        fn decode_key_part<'a>(bytes: &'a [u8]) -> Result<(Celsius, usize)>
        where
            Self: 'a,
        {
            i32::decode_key_part(bytes).map(|(v, n)| (Celsius(v), n))
        }
    }

    key_props! {
        key_user_type: Celsius = any::<i32>().prop_map(Celsius);
        key_user_in_tuple: (Celsius, String) = ((-2i32..2).prop_map(Celsius), string());
    }

    #[test]
    fn user_type_works_in_definitions_and_tuples() {
        const READINGS: TableDefinition<(Celsius, &str), Option<Celsius>> =
            TableDefinition::new("readings");
        assert_eq!(READINGS.key_type_name(), "(test::Celsius,str)");
        assert_eq!(READINGS.value_type_name(), "Option<test::Celsius>");
        let cold = encode_key_to_vec::<(Celsius, &str)>(&(Celsius(-5), "z"));
        let warm = encode_key_to_vec::<(Celsius, &str)>(&(Celsius(3), "a"));
        assert!(cold < warm);
        let v = encode_value_to_vec::<Option<Celsius>>(&Some(Celsius(-1)));
        assert_eq!(
            <Option<Celsius>>::decode_value(&v).unwrap(),
            Some(Celsius(-1))
        );
    }
}
