//! Keys and values of the built-in types handled at run time, by type name:
//! for tools that read and write tables whose Rust types they do not know
//! (the `sheaf` command line's `dump` and `load`).
//!
//! [`DynType::parse`] reads a type name as the table catalog stores it
//! ([`Value::type_name`](super::types::Value::type_name) of a built-in
//! type: `"u64"`, `"str"`, `"[u8;16]"`, `"Option<u32>"`, `"(u64,str)"`,
//! `"(u64,)"`, …) and gives `None` for any other name (a user-defined
//! type, or one containing one). A [`DynType`] decodes key and value
//! bytes into a [`DynValue`] and encodes one back, with exactly the
//! encodings of [`super::types`]: for every value, the bytes are those
//! the typed `Key`/`KeyPart`/`Value` implementations write, and decoding
//! accepts exactly the bytes they accept (and is canonical, like theirs).
//! Bad bytes give `Error::Corrupted` with location `"key decode"` or
//! `"value decode"`, never a panic.
//!
//! `str` and `bytes` stand for both the borrowed and the owned forms
//! (`&str`/`String`, `&[u8]`/`Vec<u8>`): they share a type name and their
//! encodings, and in a non-final position of a tuple key the owned form's
//! escaped part encoding is the only one there is.
//!
//! # Adding a built-in type
//!
//! A type added to `types` gets a variant of [`DynType`] (and of
//! [`DynValue`] if no existing one holds its values), an arm in the
//! parser ([`DynType::parse`]) and in [`fmt::Display`] giving back its
//! `type_name`, and arms in the six codecs below (`fixed_width`, key,
//! key part and value, each encode and decode), each written after the
//! typed implementation it mirrors. The tests compare every type against
//! its typed implementation.

use std::fmt;

use crate::error::{Error, Result};

/// The most values a decode of a zero-width type (`()`, tuples and arrays
/// of them: `[(); N]`, `[[(); 4]; 4]`) may build. Such a decode reads no
/// bytes, so its work is set by the type name alone, which is read from
/// the file: a larger one is treated as a user-defined type (its untyped
/// writes unchecked), so a damaged catalog cannot name a decode of 2^64
/// empty elements, nor nest arrays to multiply them. With the bound, a
/// `Vec` of such elements (one marker byte each) builds at most this many
/// values per byte it reads.
pub const ZERO_WIDTH_NODES_MAX: usize = 64;

/// A built-in key or value type, known by its catalog type name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DynType {
    /// `u8` … `u128`: the width in bytes (1, 2, 4, 8 or 16).
    Unsigned(usize),
    /// `i8` … `i128`: the width in bytes (1, 2, 4, 8 or 16).
    Signed(usize),
    /// `bool`.
    Bool,
    /// `char`.
    Char,
    /// `str`: `&str` or `String`.
    Str,
    /// `bytes`: `&[u8]` or `Vec<u8>`.
    Bytes,
    /// `[u8;N]`: exactly `N` bytes.
    ByteArray(usize),
    /// `()`.
    Unit,
    /// `f32` (values only).
    F32,
    /// `f64` (values only).
    F64,
    /// `Option<T>`.
    Option(Box<DynType>),
    /// A tuple of one or more elements, `(a,)` or `(a,b,…)`.
    Tuple(Vec<DynType>),
    /// `Vec<T>` of a fixed-width element type other than `u8` (an
    /// [`ArrayElement`](super::types::ArrayElement); `Vec<u8>` is `bytes`).
    List(Box<DynType>),
    /// `[T;N]` of a fixed-width element type other than `u8` (`[u8;N]` is
    /// [`DynType::ByteArray`]).
    Array(Box<DynType>, usize),
}

/// A value of a [`DynType`]. Integers of every width share one variant
/// per signedness; byte arrays are [`DynValue::Bytes`] of their length.
#[derive(Debug, Clone, PartialEq)]
pub enum DynValue {
    /// A value of an unsigned integer type.
    Unsigned(u128),
    /// A value of a signed integer type.
    Signed(i128),
    /// A `bool`.
    Bool(bool),
    /// A `char`.
    Char(char),
    /// A `str`.
    Str(String),
    /// A `bytes` or `[u8;N]`.
    Bytes(Vec<u8>),
    /// A `()`.
    Unit,
    /// An `f32` (its bits are kept, NaN payloads included).
    F32(f32),
    /// An `f64` (its bits are kept, NaN payloads included).
    F64(f64),
    /// An `Option<T>`.
    Option(Option<Box<DynValue>>),
    /// A tuple's elements, in order.
    Tuple(Vec<DynValue>),
    /// The elements of a `Vec<T>` or `[T;N]` (not of `u8`: those are
    /// [`DynValue::Bytes`]), in order.
    List(Vec<DynValue>),
}

/// Which encoding failed to decode; becomes the error's location (the
/// same locations the typed decoders use).
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

/// `InvalidArgument`: `value` is not a value of `ty`.
fn mismatch(ty: &DynType, value: &DynValue) -> Error {
    Error::InvalidArgument(format!("{value:?} is not a value of type {ty}"))
}

// ---------------------------------------------------------------------------
// Type names
// ---------------------------------------------------------------------------

/// Names of the integer types with their width and signedness.
const INTEGERS: [(&str, usize, bool); 10] = [
    ("u8", 1, false),
    ("u16", 2, false),
    ("u32", 4, false),
    ("u64", 8, false),
    ("u128", 16, false),
    ("i8", 1, true),
    ("i16", 2, true),
    ("i32", 4, true),
    ("i64", 8, true),
    ("i128", 16, true),
];

/// A recursive-descent reader of type names; spaces between tokens are
/// skipped (the library writes none, people may type some).
struct Parser<'a> {
    rest: &'a str,
    /// Types open around the one being read (bounded by
    /// [`MAX_TYPE_DEPTH`]: a name read from a file nests as deep as it
    /// likes, and recursion past the stack aborted the process).
    depth: usize,
}

/// How deeply type names may nest (`Option<(Option<…`); deeper names are
/// not recognised (an adversarial probe overflowed the CLI's stack with a
/// name of 200,000 `(` stored in a catalog).
pub const MAX_TYPE_DEPTH: usize = 64;

impl Parser<'_> {
    fn skip_spaces(&mut self) {
        self.rest = self.rest.trim_start();
    }

    /// Consumes `token` if the input continues with it.
    fn eat(&mut self, token: &str) -> bool {
        self.skip_spaces();
        match self.rest.strip_prefix(token) {
            Some(r) => {
                self.rest = r;
                true
            }
            None => false,
        }
    }

    /// An identifier-like word (`u64`, `Option`, `str`, `myapp::Id`…).
    fn word(&mut self) -> &str {
        self.skip_spaces();
        let end = self
            .rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(self.rest.len());
        let (w, r) = self.rest.split_at(end);
        self.rest = r;
        w
    }

    fn number(&mut self) -> Option<usize> {
        self.skip_spaces();
        let end = self
            .rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(self.rest.len());
        let (digits, r) = self.rest.split_at(end);
        self.rest = r;
        // `[u8;N]` is written with `N` in decimal, without leading zeros.
        if digits.len() > 1 && digits.starts_with('0') {
            return None;
        }
        digits.parse().ok()
    }

    fn ty(&mut self) -> Option<DynType> {
        if self.depth >= MAX_TYPE_DEPTH {
            return None;
        }
        self.depth += 1;
        let ty = self.ty_inner();
        self.depth -= 1;
        ty
    }

    fn ty_inner(&mut self) -> Option<DynType> {
        if self.eat("(") {
            return self.tuple_rest();
        }
        if self.eat("[") {
            let element = self.ty()?;
            if !self.eat(";") {
                return None;
            }
            let n = self.number()?;
            if !self.eat("]") {
                return None;
            }
            return match element {
                DynType::Unsigned(1) => Some(DynType::ByteArray(n)),
                // Arrays of zero-width elements too: `parse` bounds the
                // values their decode builds (`zero_width_parts_bounded`).
                e => e.is_array_element().then(|| DynType::Array(Box::new(e), n)),
            };
        }
        let word = self.word();
        if let Some(&(_, width, signed)) = INTEGERS.iter().find(|(n, ..)| *n == word) {
            return Some(match signed {
                true => DynType::Signed(width),
                false => DynType::Unsigned(width),
            });
        }
        match word {
            "bool" => Some(DynType::Bool),
            "char" => Some(DynType::Char),
            "str" => Some(DynType::Str),
            "bytes" => Some(DynType::Bytes),
            "f32" => Some(DynType::F32),
            "f64" => Some(DynType::F64),
            "Option" => {
                if !self.eat("<") {
                    return None;
                }
                let inner = self.ty()?;
                self.eat(">").then(|| DynType::Option(Box::new(inner)))
            }
            // `Vec<u8>` is named `bytes`: not an element type here.
            "Vec" => {
                if !self.eat("<") {
                    return None;
                }
                let inner = self.ty()?;
                (self.eat(">") && inner.is_array_element()).then(|| DynType::List(Box::new(inner)))
            }
            _ => None,
        }
    }

    /// After `(`: `)` (unit), `a,)` (1-tuple) or `a,b,…)`.
    fn tuple_rest(&mut self) -> Option<DynType> {
        if self.eat(")") {
            return Some(DynType::Unit);
        }
        let mut elements = vec![self.ty()?];
        loop {
            if self.eat(")") {
                // `(a)` is not a tuple name; `(a,)` is.
                return (elements.len() > 1).then_some(DynType::Tuple(elements));
            }
            if !self.eat(",") {
                return None;
            }
            if self.eat(")") {
                return (elements.len() == 1).then_some(DynType::Tuple(elements));
            }
            elements.push(self.ty()?);
        }
    }
}

impl DynType {
    /// The type whose catalog name is `name`, if it is a built-in type
    /// this module knows; `None` otherwise (a user-defined type, or a
    /// composite containing one). Spaces between tokens are allowed;
    /// [`fmt::Display`] gives the name back as the library writes it.
    /// Names nested deeper than [`MAX_TYPE_DEPTH`] are `None`.
    pub fn parse(name: &str) -> Option<DynType> {
        let mut p = Parser {
            rest: name,
            depth: 0,
        };
        let ty = p.ty()?;
        p.skip_spaces();
        (p.rest.is_empty() && ty.zero_width_parts_bounded()).then_some(ty)
    }

    /// True if every zero-width part of the type (an array, tuple or `()`
    /// whose encoding is no bytes, anywhere in it: a `Vec`'s element, a
    /// tuple's field) builds at most [`ZERO_WIDTH_NODES_MAX`] values when
    /// decoded.
    fn zero_width_parts_bounded(&self) -> bool {
        if self.fixed_width() == Some(0) {
            return self.zero_width_nodes() <= ZERO_WIDTH_NODES_MAX;
        }
        match self {
            DynType::Option(inner) | DynType::List(inner) | DynType::Array(inner, _) => {
                inner.zero_width_parts_bounded()
            }
            DynType::Tuple(elements) => elements.iter().all(DynType::zero_width_parts_bounded),
            _ => true,
        }
    }

    /// `Some(n)` if every encoding (key and value) is exactly `n` bytes,
    /// as `Value::fixed_width` says for the typed form.
    pub fn fixed_width(&self) -> Option<usize> {
        match self {
            DynType::Unsigned(w) | DynType::Signed(w) | DynType::ByteArray(w) => Some(*w),
            DynType::Bool => Some(1),
            DynType::Char | DynType::F32 => Some(4),
            DynType::F64 => Some(8),
            DynType::Unit => Some(0),
            DynType::Str | DynType::Bytes | DynType::Option(_) | DynType::List(_) => None,
            DynType::Array(element, n) => element.fixed_width()?.checked_mul(*n),
            DynType::Tuple(elements) => elements
                .iter()
                .try_fold(0usize, |acc, e| acc.checked_add(e.fixed_width()?)),
        }
    }

    /// The values a decode of this zero-width type builds (1 for any other
    /// type's own node); at most [`ZERO_WIDTH_NODES_MAX`] for a parsed
    /// type.
    fn zero_width_nodes(&self) -> usize {
        match self {
            DynType::Tuple(elements) => elements
                .iter()
                .fold(1usize, |acc, e| acc.saturating_add(e.zero_width_nodes())),
            DynType::Array(element, n) => n
                .saturating_mul(element.zero_width_nodes())
                .saturating_add(1),
            _ => 1,
        }
    }

    /// True if the type can be a key: it contains no float.
    pub fn is_key(&self) -> bool {
        match self {
            DynType::F32 | DynType::F64 => false,
            DynType::Option(inner) | DynType::List(inner) | DynType::Array(inner, _) => {
                inner.is_key()
            }
            DynType::Tuple(elements) => elements.iter().all(DynType::is_key),
            _ => true,
        }
    }

    /// True if `Vec<T>` and `[T;N]` of this type are the element
    /// encodings of `types` (an `ArrayElement`): fixed-width, and not
    /// `u8`, whose vectors and arrays are raw bytes.
    fn is_array_element(&self) -> bool {
        *self != DynType::Unsigned(1) && self.fixed_width().is_some()
    }

    fn check_key(&self) -> Result<()> {
        if self.is_key() {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{self} is not a key type (floats cannot be keys)"
            )))
        }
    }

    /// Decodes a whole key encoding. `InvalidArgument` if the type is not
    /// a key type; bad bytes give `Corrupted`.
    pub fn decode_key(&self, bytes: &[u8]) -> Result<DynValue> {
        self.check_key()?;
        decode_key(self, bytes)
    }

    /// Decodes a whole value encoding; bad bytes give `Corrupted`.
    pub fn decode_value(&self, bytes: &[u8]) -> Result<DynValue> {
        decode_value(self, bytes)
    }

    /// The key encoding of `value`. `InvalidArgument` if the type is not
    /// a key type or `value` is not one of its values (a wrong variant,
    /// an integer out of range, a byte array of another length).
    pub fn encode_key(&self, value: &DynValue) -> Result<Vec<u8>> {
        self.check_key()?;
        let mut out = Vec::new();
        encode_key(self, value, &mut out)?;
        Ok(out)
    }

    /// The value encoding of `value`. `InvalidArgument` if `value` is not
    /// one of the type's values (or a tuple element's encoding reaches
    /// 4 GiB).
    pub fn encode_value(&self, value: &DynValue) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        encode_value(self, value, &mut out)?;
        Ok(out)
    }
}

impl fmt::Display for DynType {
    /// The catalog type name, exactly as `Value::type_name` writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DynType::Unsigned(w) => write!(f, "u{}", w * 8),
            DynType::Signed(w) => write!(f, "i{}", w * 8),
            DynType::Bool => f.write_str("bool"),
            DynType::Char => f.write_str("char"),
            DynType::Str => f.write_str("str"),
            DynType::Bytes => f.write_str("bytes"),
            DynType::ByteArray(n) => write!(f, "[u8;{n}]"),
            DynType::Unit => f.write_str("()"),
            DynType::F32 => f.write_str("f32"),
            DynType::F64 => f.write_str("f64"),
            DynType::Option(inner) => write!(f, "Option<{inner}>"),
            DynType::List(element) => write!(f, "Vec<{element}>"),
            DynType::Array(element, n) => write!(f, "[{element};{n}]"),
            DynType::Tuple(elements) => {
                f.write_str("(")?;
                for (i, e) in elements.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{e}")?;
                }
                if elements.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Scalars
// ---------------------------------------------------------------------------

/// `InvalidArgument` unless `width` is an integer width this module can
/// hold (1 to 16 bytes; the built-in types use 1, 2, 4, 8 and 16).
fn check_width(ty: &DynType, width: usize) -> Result<()> {
    if (1..=16).contains(&width) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{ty}: integers are 1 to 16 bytes wide"
        )))
    }
}

/// `value` as big-endian bytes of the type's width: unsigned as is,
/// signed in two's complement.
fn int_bytes(ty: &DynType, value: &DynValue) -> Result<Vec<u8>> {
    if let DynType::Unsigned(w) | DynType::Signed(w) = ty {
        check_width(ty, *w)?;
    }
    let (raw, width) = match (ty, value) {
        (DynType::Unsigned(w), DynValue::Unsigned(v)) => {
            if *w < 16 && *v >> (w * 8) != 0 {
                return Err(mismatch(ty, value));
            }
            (*v, *w)
        }
        (DynType::Signed(w), DynValue::Signed(v)) => {
            let shift = 128 - w * 8;
            if (v << shift) >> shift != *v {
                return Err(mismatch(ty, value));
            }
            (*v as u128, *w)
        }
        _ => return Err(mismatch(ty, value)),
    };
    Ok(raw.to_be_bytes()[16 - width..].to_vec())
}

/// The integer of `ty` in `bytes` (exactly its width, big-endian).
fn int_value(ty: &DynType, be: &[u8]) -> DynValue {
    let mut full = [0u8; 16];
    full[16 - be.len()..].copy_from_slice(be);
    let raw = u128::from_be_bytes(full);
    match ty {
        DynType::Signed(w) => {
            let shift = 128 - w * 8;
            DynValue::Signed(((raw as i128) << shift) >> shift)
        }
        _ => DynValue::Unsigned(raw),
    }
}

/// Integer key bytes: big-endian, with the sign bit flipped for signed.
fn int_key(ty: &DynType, value: &DynValue, out: &mut Vec<u8>) -> Result<()> {
    let mut b = int_bytes(ty, value)?;
    if let (DynType::Signed(_), Some(first)) = (ty, b.first_mut()) {
        *first ^= 0x80;
    }
    out.extend_from_slice(&b);
    Ok(())
}

fn int_from_key(ty: &DynType, bytes: &[u8]) -> DynValue {
    let mut b = bytes.to_vec();
    if let (DynType::Signed(_), Some(first)) = (ty, b.first_mut()) {
        *first ^= 0x80;
    }
    int_value(ty, &b)
}

fn int_from_value(ty: &DynType, le: &[u8]) -> DynValue {
    let be: Vec<u8> = le.iter().rev().copied().collect();
    int_value(ty, &be)
}

/// `bytes` if it is exactly `n` bytes long.
fn exact<'b>(bytes: &'b [u8], n: usize, ty: &DynType, ctx: Ctx) -> Result<&'b [u8]> {
    if bytes.len() == n {
        Ok(bytes)
    } else {
        Err(ctx.err(format!("{ty} needs {n} bytes, found {}", bytes.len())))
    }
}

/// The first `n` bytes of `bytes` (key parts).
fn leading<'b>(bytes: &'b [u8], n: usize, ty: &DynType) -> Result<&'b [u8]> {
    bytes.get(..n).ok_or_else(|| {
        Ctx::Key.err(format!(
            "{ty} key part needs {n} bytes, found {}",
            bytes.len()
        ))
    })
}

fn bool_of(byte: u8, ctx: Ctx) -> Result<DynValue> {
    match byte {
        0 => Ok(DynValue::Bool(false)),
        1 => Ok(DynValue::Bool(true)),
        b => Err(ctx.err(format!("bool byte must be 0 or 1, found {b:#04x}"))),
    }
}

fn char_of(scalar: u32, ctx: Ctx) -> Result<DynValue> {
    char::from_u32(scalar)
        .map(DynValue::Char)
        .ok_or_else(|| ctx.err(format!("{scalar:#x} is not a Unicode scalar")))
}

fn str_of(bytes: Vec<u8>, ctx: Ctx) -> Result<DynValue> {
    String::from_utf8(bytes)
        .map(DynValue::Str)
        .map_err(|e| ctx.err(format!("invalid UTF-8 in str: {}", e.utf8_error())))
}

fn u32_of(four: &[u8], big_endian: bool) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(four);
    if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
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

fn expect_empty(rest: &[u8], what: &str, ctx: Ctx) -> Result<()> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(ctx.err(format!("{} trailing bytes after {what}", rest.len())))
    }
}

/// The raw bytes of a `str`, `bytes` or `[u8;N]` value.
fn byte_string<'v>(ty: &DynType, value: &'v DynValue) -> Result<&'v [u8]> {
    match (ty, value) {
        (DynType::Str, DynValue::Str(s)) => Ok(s.as_bytes()),
        (DynType::Bytes, DynValue::Bytes(b)) => Ok(b),
        (DynType::ByteArray(n), DynValue::Bytes(b)) if b.len() == *n => Ok(b),
        _ => Err(mismatch(ty, value)),
    }
}

// ---------------------------------------------------------------------------
// Escaped byte strings (key parts of str and bytes), as `types` writes them
// ---------------------------------------------------------------------------

/// Writes `bytes` with `00` → `00 FF`, then the terminator `00 00`.
fn escape_into(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// Reverses [`escape_into`]: the raw bytes and how many encoded bytes
/// (terminator included) were consumed.
fn unescape(bytes: &[u8]) -> Result<(Vec<u8>, usize)> {
    let mut raw = Vec::with_capacity(bytes.len());
    let mut it = bytes.iter().copied().enumerate();
    while let Some((_, b)) = it.next() {
        if b != 0 {
            raw.push(b);
            continue;
        }
        match it.next() {
            Some((i, 0)) => return Ok((raw, i + 1)),
            Some((_, 0xFF)) => raw.push(0),
            Some((_, e)) => {
                return Err(Ctx::Key.err(format!("bad escape 00 {e:02x} in escaped string in key")))
            }
            None => break,
        }
    }
    Err(Ctx::Key.err("unterminated escaped string in key"))
}

// ---------------------------------------------------------------------------
// Vectors and arrays of fixed-width elements, as `types` writes them
// ---------------------------------------------------------------------------

/// The byte that stands for each zero-width element of a `Vec`, and
/// precedes each element in a `Vec` key part.
const ELEMENT: u8 = 0x01;
/// The end of a `Vec` key part.
const END: u8 = 0x00;

/// An encoder of one element (`encode_key` or `encode_value`).
type EncodeFn = fn(&DynType, &DynValue, &mut Vec<u8>) -> Result<()>;
/// A decoder of one whole element (`decode_key` or `decode_value`).
type DecodeFn = fn(&DynType, &[u8]) -> Result<DynValue>;

/// The elements of `value`, a `Vec` or (with `len`) an array of `ty`.
fn items_of<'v>(ty: &DynType, value: &'v DynValue, len: Option<usize>) -> Result<&'v [DynValue]> {
    match value {
        DynValue::List(items) if len.is_none_or(|n| n == items.len()) => Ok(items),
        _ => Err(mismatch(ty, value)),
    }
}

/// Writes `items` with `encode`, each zero-width one as [`ELEMENT`] if
/// `mark_empty` (a `Vec`; an array's length is in its type).
fn encode_items(
    element: &DynType,
    items: &[DynValue],
    mark_empty: bool,
    out: &mut Vec<u8>,
    encode: EncodeFn,
) -> Result<()> {
    let marked = mark_empty && element.fixed_width() == Some(0);
    for item in items {
        if marked {
            out.push(ELEMENT);
        }
        encode(element, item, out)?;
    }
    Ok(())
}

/// The width every encoding of an array element has.
fn element_width(element: &DynType, ctx: Ctx) -> Result<usize> {
    (element.fixed_width()).ok_or_else(|| ctx.err(format!("{element} has no fixed width")))
}

/// A whole `Vec` of `element` (a value, or a key that runs to the end).
fn decode_list(element: &DynType, bytes: &[u8], ctx: Ctx, decode: DecodeFn) -> Result<DynValue> {
    let items = match element_width(element, ctx)? {
        0 => (bytes.iter())
            .map(|&b| match b {
                ELEMENT => decode(element, &[]),
                b => Err(ctx.err(format!(
                    "zero-width element marker must be 01, found {b:#04x}"
                ))),
            })
            .collect::<Result<_>>()?,
        width if bytes.len().is_multiple_of(width) => (bytes.chunks_exact(width))
            .map(|chunk| decode(element, chunk))
            .collect::<Result<_>>()?,
        width => {
            return Err(ctx.err(format!(
                "{} bytes are not whole elements of {width} bytes",
                bytes.len()
            )))
        }
    };
    Ok(DynValue::List(items))
}

/// An array `[element;n]` from exactly `n` times the element's width.
fn decode_array(
    element: &DynType,
    n: usize,
    bytes: &[u8],
    ctx: Ctx,
    decode: DecodeFn,
) -> Result<DynValue> {
    let width = element_width(element, ctx)?;
    if width.checked_mul(n) != Some(bytes.len()) {
        return Err(ctx.err(format!(
            "[{element};{n}] needs {n} elements of {width} bytes, found {} bytes",
            bytes.len()
        )));
    }
    let items = match width {
        // Parsing admits no zero-width array of more than no elements.
        0 => (0..n)
            .map(|_| decode(element, &[]))
            .collect::<Result<_>>()?,
        _ => (bytes.chunks_exact(width))
            .map(|chunk| decode(element, chunk))
            .collect::<Result<_>>()?,
    };
    Ok(DynValue::List(items))
}

/// A `Vec` key part: each element after [`ELEMENT`], then [`END`].
fn encode_list_part(element: &DynType, items: &[DynValue], out: &mut Vec<u8>) -> Result<()> {
    for item in items {
        out.push(ELEMENT);
        encode_key(element, item, out)?;
    }
    out.push(END);
    Ok(())
}

/// Reverses [`encode_list_part`]: the `Vec` and the bytes it used.
fn decode_list_part(element: &DynType, bytes: &[u8]) -> Result<(DynValue, usize)> {
    let width = element_width(element, Ctx::Key)?;
    let mut items = Vec::new();
    let mut rest = bytes;
    loop {
        match rest.split_first() {
            Some((&END, _)) => return Ok((DynValue::List(items), bytes.len() - rest.len() + 1)),
            Some((&ELEMENT, after)) => {
                let Some((item, after)) = after.split_at_checked(width) else {
                    return Err(Ctx::Key.err(format!(
                        "Vec key part element needs {width} bytes, found {}",
                        after.len()
                    )));
                };
                items.push(decode_key(element, item)?);
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

// ---------------------------------------------------------------------------
// Key encodings
// ---------------------------------------------------------------------------

/// A whole key (`Key::encode_key`).
fn encode_key(ty: &DynType, value: &DynValue, out: &mut Vec<u8>) -> Result<()> {
    match (ty, value) {
        (DynType::Unsigned(_) | DynType::Signed(_), _) => int_key(ty, value, out),
        (DynType::Str | DynType::Bytes | DynType::ByteArray(_), _) => {
            out.extend_from_slice(byte_string(ty, value)?);
            Ok(())
        }
        (DynType::Option(inner), DynValue::Option(Some(v))) => {
            out.push(1);
            encode_key(inner, v, out)
        }
        (DynType::Tuple(types), DynValue::Tuple(values)) if types.len() == values.len() => {
            let (last_t, init_t) = types.split_last().ok_or_else(|| mismatch(ty, value))?;
            let (last_v, init_v) = values.split_last().ok_or_else(|| mismatch(ty, value))?;
            for (t, v) in init_t.iter().zip(init_v) {
                encode_part(t, v, out)?;
            }
            encode_key(last_t, last_v, out)
        }
        (DynType::List(e), _) => encode_items(e, items_of(ty, value, None)?, true, out, encode_key),
        (DynType::Array(e, n), _) => {
            encode_items(e, items_of(ty, value, Some(*n))?, false, out, encode_key)
        }
        _ => encode_fixed_key(ty, value, out),
    }
}

/// A key part (`KeyPart::encode_key_part`): self-delimiting.
fn encode_part(ty: &DynType, value: &DynValue, out: &mut Vec<u8>) -> Result<()> {
    match (ty, value) {
        (DynType::Str | DynType::Bytes, _) => {
            escape_into(byte_string(ty, value)?, out);
            Ok(())
        }
        (DynType::Option(inner), DynValue::Option(Some(v))) => {
            out.push(1);
            encode_part(inner, v, out)
        }
        (DynType::Tuple(types), DynValue::Tuple(values)) if types.len() == values.len() => {
            for (t, v) in types.iter().zip(values) {
                encode_part(t, v, out)?;
            }
            Ok(())
        }
        (DynType::List(e), _) => encode_list_part(e, items_of(ty, value, None)?, out),
        _ => encode_key(ty, value, out),
    }
}

/// The keys whose whole and part encodings are the same: integers,
/// `bool`, `char`, `()` and `None`.
fn encode_fixed_key(ty: &DynType, value: &DynValue, out: &mut Vec<u8>) -> Result<()> {
    match (ty, value) {
        (DynType::Bool, DynValue::Bool(b)) => out.push(u8::from(*b)),
        (DynType::Char, DynValue::Char(c)) => out.extend_from_slice(&u32::from(*c).to_be_bytes()),
        (DynType::Unit, DynValue::Unit) => {}
        (DynType::Option(_), DynValue::Option(None)) => out.push(0),
        _ => return Err(mismatch(ty, value)),
    }
    Ok(())
}

/// Decodes a whole key (`Key::decode_key`).
fn decode_key(ty: &DynType, bytes: &[u8]) -> Result<DynValue> {
    let ctx = Ctx::Key;
    match ty {
        DynType::Unsigned(w) | DynType::Signed(w) => {
            check_width(ty, *w)?;
            Ok(int_from_key(ty, exact(bytes, *w, ty, ctx)?))
        }
        DynType::Bool => bool_of(exact(bytes, 1, ty, ctx)?[0], ctx),
        DynType::Char => char_of(u32_of(exact(bytes, 4, ty, ctx)?, true), ctx),
        DynType::Str => str_of(bytes.to_vec(), ctx),
        DynType::Bytes => Ok(DynValue::Bytes(bytes.to_vec())),
        DynType::ByteArray(n) => Ok(DynValue::Bytes(exact(bytes, *n, ty, ctx)?.to_vec())),
        DynType::Unit => expect_empty(bytes, "()", ctx).map(|()| DynValue::Unit),
        DynType::Option(inner) => match option_tag(bytes, ctx)? {
            (false, rest) => expect_empty(rest, "None", ctx).map(|()| DynValue::Option(None)),
            (true, rest) => Ok(DynValue::Option(Some(Box::new(decode_key(inner, rest)?)))),
        },
        DynType::Tuple(types) => {
            let Some((last, init)) = types.split_last() else {
                return Err(ctx.err("empty tuple type"));
            };
            let mut values = Vec::with_capacity(types.len());
            let mut rest = bytes;
            for t in init {
                let (v, used) = decode_part(t, rest)?;
                values.push(v);
                rest = rest.get(used..).unwrap_or_default();
            }
            values.push(decode_key(last, rest)?);
            Ok(DynValue::Tuple(values))
        }
        DynType::List(e) => decode_list(e, bytes, ctx, decode_key),
        DynType::Array(e, n) => decode_array(e, *n, bytes, ctx, decode_key),
        DynType::F32 | DynType::F64 => Err(ctx.err(format!("{ty} is not a key type"))),
    }
}

/// Decodes a key part at the start of `bytes` (`KeyPart::decode_key_part`):
/// the value and the bytes it used.
fn decode_part(ty: &DynType, bytes: &[u8]) -> Result<(DynValue, usize)> {
    let ctx = Ctx::Key;
    match ty {
        DynType::Unsigned(w) | DynType::Signed(w) => {
            check_width(ty, *w)?;
            Ok((int_from_key(ty, leading(bytes, *w, ty)?), *w))
        }
        DynType::Bool => Ok((bool_of(leading(bytes, 1, ty)?[0], ctx)?, 1)),
        DynType::Char => Ok((char_of(u32_of(leading(bytes, 4, ty)?, true), ctx)?, 4)),
        DynType::Str => {
            let (raw, used) = unescape(bytes)?;
            Ok((str_of(raw, ctx)?, used))
        }
        DynType::Bytes => {
            let (raw, used) = unescape(bytes)?;
            Ok((DynValue::Bytes(raw), used))
        }
        DynType::ByteArray(n) => Ok((DynValue::Bytes(leading(bytes, *n, ty)?.to_vec()), *n)),
        DynType::Unit => Ok((DynValue::Unit, 0)),
        DynType::Option(inner) => match option_tag(bytes, ctx)? {
            (false, _) => Ok((DynValue::Option(None), 1)),
            (true, rest) => {
                let (v, used) = decode_part(inner, rest)?;
                Ok((DynValue::Option(Some(Box::new(v))), used + 1))
            }
        },
        DynType::Tuple(types) => {
            let mut values = Vec::with_capacity(types.len());
            let mut used = 0;
            for t in types {
                let (v, n) = decode_part(t, bytes.get(used..).unwrap_or_default())?;
                values.push(v);
                used += n;
            }
            Ok((DynValue::Tuple(values), used))
        }
        DynType::List(e) => decode_list_part(e, bytes),
        DynType::Array(e, n) => {
            let len = element_width(e, ctx)?
                .checked_mul(*n)
                .ok_or_else(|| ctx.err(format!("{ty} is wider than memory")))?;
            Ok((
                decode_array(e, *n, leading(bytes, len, ty)?, ctx, decode_key)?,
                len,
            ))
        }
        DynType::F32 | DynType::F64 => Err(ctx.err(format!("{ty} is not a key type"))),
    }
}

// ---------------------------------------------------------------------------
// Value encodings
// ---------------------------------------------------------------------------

/// A whole value (`Value::encode_value`).
fn encode_value(ty: &DynType, value: &DynValue, out: &mut Vec<u8>) -> Result<()> {
    match (ty, value) {
        (DynType::Unsigned(_) | DynType::Signed(_), _) => {
            out.extend(int_bytes(ty, value)?.iter().rev());
        }
        (DynType::Bool, DynValue::Bool(b)) => out.push(u8::from(*b)),
        (DynType::Char, DynValue::Char(c)) => out.extend_from_slice(&u32::from(*c).to_le_bytes()),
        (DynType::Str | DynType::Bytes | DynType::ByteArray(_), _) => {
            out.extend_from_slice(byte_string(ty, value)?);
        }
        (DynType::Unit, DynValue::Unit) => {}
        (DynType::F32, DynValue::F32(x)) => out.extend_from_slice(&x.to_bits().to_le_bytes()),
        (DynType::F64, DynValue::F64(x)) => out.extend_from_slice(&x.to_bits().to_le_bytes()),
        (DynType::Option(_), DynValue::Option(None)) => out.push(0),
        (DynType::Option(inner), DynValue::Option(Some(v))) => {
            out.push(1);
            encode_value(inner, v, out)?;
        }
        (DynType::Tuple(types), DynValue::Tuple(values)) if types.len() == values.len() => {
            let (last_t, init_t) = types.split_last().ok_or_else(|| mismatch(ty, value))?;
            let (last_v, init_v) = values.split_last().ok_or_else(|| mismatch(ty, value))?;
            for (t, v) in init_t.iter().zip(init_v) {
                encode_element(t, v, out)?;
            }
            encode_value(last_t, last_v, out)?;
        }
        (DynType::List(e), _) => {
            encode_items(e, items_of(ty, value, None)?, true, out, encode_value)?;
        }
        (DynType::Array(e, n), _) => {
            encode_items(e, items_of(ty, value, Some(*n))?, false, out, encode_value)?;
        }
        _ => return Err(mismatch(ty, value)),
    }
    Ok(())
}

/// A non-final tuple element's value: raw if fixed-width, else with its
/// length as a `u32` little-endian prefix.
fn encode_element(ty: &DynType, value: &DynValue, out: &mut Vec<u8>) -> Result<()> {
    if ty.fixed_width().is_some() {
        return encode_value(ty, value, out);
    }
    let len_at = out.len();
    out.extend_from_slice(&[0; 4]);
    encode_value(ty, value, out)?;
    let len = u32::try_from(out.len() - len_at - 4)
        .map_err(|_| Error::InvalidArgument(format!("a {ty} tuple element of 4 GiB or more")))?;
    out[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// Decodes a whole value (`Value::decode_value`).
fn decode_value(ty: &DynType, bytes: &[u8]) -> Result<DynValue> {
    let ctx = Ctx::Value;
    match ty {
        DynType::Unsigned(w) | DynType::Signed(w) => {
            check_width(ty, *w)?;
            Ok(int_from_value(ty, exact(bytes, *w, ty, ctx)?))
        }
        DynType::Bool => bool_of(exact(bytes, 1, ty, ctx)?[0], ctx),
        DynType::Char => char_of(u32_of(exact(bytes, 4, ty, ctx)?, false), ctx),
        DynType::Str => str_of(bytes.to_vec(), ctx),
        DynType::Bytes => Ok(DynValue::Bytes(bytes.to_vec())),
        DynType::ByteArray(n) => Ok(DynValue::Bytes(exact(bytes, *n, ty, ctx)?.to_vec())),
        DynType::Unit => expect_empty(bytes, "()", ctx).map(|()| DynValue::Unit),
        DynType::F32 => {
            let bits = u32_of(exact(bytes, 4, ty, ctx)?, false);
            Ok(DynValue::F32(f32::from_bits(bits)))
        }
        DynType::F64 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(exact(bytes, 8, ty, ctx)?);
            Ok(DynValue::F64(f64::from_bits(u64::from_le_bytes(b))))
        }
        DynType::Option(inner) => match option_tag(bytes, ctx)? {
            (false, rest) => expect_empty(rest, "None", ctx).map(|()| DynValue::Option(None)),
            (true, rest) => Ok(DynValue::Option(Some(Box::new(decode_value(inner, rest)?)))),
        },
        DynType::Tuple(types) => {
            let Some((last, init)) = types.split_last() else {
                return Err(ctx.err("empty tuple type"));
            };
            let mut values = Vec::with_capacity(types.len());
            let mut rest = bytes;
            for t in init {
                let (element, after) = split_element(t, rest)?;
                values.push(decode_value(t, element)?);
                rest = after;
            }
            values.push(decode_value(last, rest)?);
            Ok(DynValue::Tuple(values))
        }
        DynType::List(e) => decode_list(e, bytes, ctx, decode_value),
        DynType::Array(e, n) => decode_array(e, *n, bytes, ctx, decode_value),
    }
}

/// A non-final tuple element's bytes and the bytes after it.
fn split_element<'b>(ty: &DynType, bytes: &'b [u8]) -> Result<(&'b [u8], &'b [u8])> {
    let ctx = Ctx::Value;
    let (len, rest) = match ty.fixed_width() {
        Some(width) => (width, bytes),
        None => {
            let Some((raw, rest)) = bytes.split_first_chunk::<4>() else {
                return Err(ctx.err(format!(
                    "tuple element length needs 4 bytes, found {}",
                    bytes.len()
                )));
            };
            let len = usize::try_from(u32::from_le_bytes(*raw))
                .map_err(|_| ctx.err("tuple element length overflows usize"))?;
            (len, rest)
        }
    };
    rest.split_at_checked(len).ok_or_else(|| {
        ctx.err(format!(
            "tuple element of {len} bytes but only {} remain",
            rest.len()
        ))
    })
}

/// The key and value type names of a multimap table whose catalog key
/// type is `key_type` (`multimap(K,V)`, see
/// [`MultimapTableDefinition`](super::MultimapTableDefinition)); `None`
/// for any other table.
pub fn multimap_types(key_type: &str) -> Option<(&str, &str)> {
    let inner = key_type.strip_prefix("multimap(")?.strip_suffix(')')?;
    // The comma between K and V is the one outside every bracket.
    let mut depth = 0i32;
    for (at, c) in inner.char_indices() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | '>' | ']' => depth -= 1,
            ',' if depth == 0 => return Some((&inner[..at], &inner[at + 1..])),
            _ => {}
        }
    }
    None
}

/// A multimap table's stored tree key split into the key encoding of its
/// key and of its value (`Corrupted` if it is no such pair).
pub fn split_multimap_pair(stored: &[u8]) -> Result<(Vec<u8>, &[u8])> {
    let (key, at) = super::multimap::split_pair(stored)?;
    let value = stored
        .get(at..)
        .ok_or_else(|| Error::corrupted("multimap pair: value past the end", "multimap table"))?;
    Ok((key, value))
}

/// The stored tree key of a multimap table's pair: `key` and `value` are
/// the key encodings of the pair's key and value (the stored value is
/// `()`, no bytes).
pub fn multimap_pair(key: &[u8], value: &[u8]) -> Vec<u8> {
    super::multimap::pair(key, value)
}

#[cfg(test)]
mod tests;
