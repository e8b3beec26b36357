//! Keys and values as text, by their declared types: JSON (the `jsonl`
//! format and composite CSV cells), plain CSV cells, and hex.
//!
//! A table's key and value type names become a [`Codec`]: a built-in type
//! that `sheafdb::table::dynamic` knows is rendered by its value, anything
//! else (a user-defined type) as the hex of its stored bytes. Rendering is
//! driven by the type in both directions, so the text needs no type tags:
//!
//! | type | JSON | CSV cell |
//! |---|---|---|
//! | integers | number (every digit, also for 128 bits) | digits |
//! | `bool` | `true` / `false` | `true` / `false` |
//! | `char`, `str` | string | the text itself |
//! | `bytes`, `[u8;N]`, unknown types | string of lowercase hex | hex |
//! | `()` | `null` | empty |
//! | `f32`, `f64` | number (shortest form that reads back the same), or `"NaN"`, `"inf"`, `"-inf"` | the same, unquoted |
//! | `Option<T>` | `null` for `None`, `T` for `Some` (`[T]` when `T` itself may be `null`: `()` or an `Option`) | JSON |
//! | tuples | array | JSON |
//!
//! A multimap table (catalog key type `multimap(K,V)`) is shown as one
//! entry per pair: its key as `K`, its value as `V` ([`TableCodec`]).

use std::fmt::Write as _;

use serde_json::Value as Json;
use std::borrow::Cow;

use sheafdb::table::dynamic::{
    multimap_pair, multimap_types, split_multimap_pair, DynType, DynValue,
};

/// How one side (key or value) of a table is turned into text and back.
#[derive(Debug, Clone)]
pub enum Codec {
    /// A built-in type: rendered by value.
    Known(DynType),
    /// A type this build does not know: the stored bytes, in hex.
    Raw,
}

impl Codec {
    /// The codec for a key of type `name` (floats are no key types, so a
    /// name containing one is treated as unknown).
    pub fn for_key(name: &str) -> Codec {
        match DynType::parse(name) {
            Some(t) if t.is_key() => Codec::Known(t),
            _ => Codec::Raw,
        }
    }

    /// The codec for a value of type `name`.
    pub fn for_value(name: &str) -> Codec {
        DynType::parse(name).map_or(Codec::Raw, Codec::Known)
    }
}

/// How a table's stored entries become the key and value a user sees,
/// and back. An ordinary table shows them as stored. A multimap table
/// (catalog key type `multimap(K,V)`, value type `()`) stores each pair
/// of a key and one of its values as a tree key: it is shown as that key
/// and that value (the value in its key encoding: multimap values are
/// keys).
#[derive(Debug, Clone)]
pub struct TableCodec {
    pub key: Codec,
    pub value: Codec,
    multimap: bool,
}

impl TableCodec {
    /// The codec of a table with these catalog type names.
    pub fn new(key_type: &str, value_type: &str) -> TableCodec {
        match multimap_types(key_type) {
            Some((k, v)) => TableCodec {
                key: Codec::for_key(k),
                value: Codec::for_key(v),
                multimap: true,
            },
            None => TableCodec {
                key: Codec::for_key(key_type),
                value: Codec::for_value(value_type),
                multimap: false,
            },
        }
    }

    /// The encoding the shown value has: a multimap's values are keys.
    pub fn value_side(&self) -> Side {
        match self.multimap {
            true => Side::Key,
            false => Side::Value,
        }
    }

    /// The key codec, the value codec and the value's encoding.
    pub fn into_parts(self) -> (Codec, Codec, Side) {
        let side = self.value_side();
        (self.key, self.value, side)
    }

    /// The key and value bytes shown for a stored entry (`Corrupted` if
    /// a multimap's tree key is no pair).
    pub fn shown<'a>(
        &self,
        key: &'a [u8],
        value: &'a [u8],
    ) -> sheafdb::Result<(Cow<'a, [u8]>, &'a [u8])> {
        if !self.multimap {
            return Ok((Cow::Borrowed(key), value));
        }
        let (k, v) = split_multimap_pair(key)?;
        Ok((Cow::Owned(k), v))
    }

    /// The stored entry for shown key and value bytes.
    pub fn stored(&self, key: Vec<u8>, value: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
        match self.multimap {
            true => (multimap_pair(&key, &value), Vec::new()),
            false => (key, value),
        }
    }
}

/// Which side of an entry a codec is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Key,
    Value,
}

impl Side {
    fn decode(self, ty: &DynType, bytes: &[u8]) -> sheafdb::Result<DynValue> {
        match self {
            Side::Key => ty.decode_key(bytes),
            Side::Value => ty.decode_value(bytes),
        }
    }

    fn encode(self, ty: &DynType, v: &DynValue) -> sheafdb::Result<Vec<u8>> {
        match self {
            Side::Key => ty.encode_key(v),
            Side::Value => ty.encode_value(v),
        }
    }
}

pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

pub fn unhex(text: &str) -> Result<Vec<u8>, String> {
    let text = text.trim();
    if !text.len().is_multiple_of(2) {
        return Err(format!("hex {text:?} has an odd number of digits"));
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(format!("{:?} is not a hex digit", c as char)),
    };
    text.as_bytes()
        .chunks(2)
        .map(|pair| Ok(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// A JSON string literal.
fn json_string(s: &str, out: &mut String) {
    out.push_str(&Json::String(s.to_string()).to_string());
}

/// A float as text: the shortest decimal that reads back the same, with
/// an exponent when it is very large or very small (`1e300`), or `NaN`,
/// `inf`, `-inf`.
fn float_text(x: f64, single: bool) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    let plain = x == 0.0 || (1e-5..1e16).contains(&x.abs());
    match (single, plain) {
        (true, true) => format!("{}", x as f32),
        (true, false) => format!("{:e}", x as f32),
        (false, true) => format!("{x}"),
        (false, false) => format!("{x:e}"),
    }
}

/// The number of elements an array type holds (`None` for a `Vec`).
fn array_len(ty: &DynType) -> Option<usize> {
    match ty {
        DynType::Array(_, n) => Some(*n),
        _ => None,
    }
}

fn nullable(ty: &DynType) -> bool {
    matches!(ty, DynType::Unit | DynType::Option(_))
}

/// Appends the JSON of `v`, a value of `ty`.
fn to_json(ty: &DynType, v: &DynValue, out: &mut String) {
    match (ty, v) {
        (_, DynValue::Unsigned(n)) => {
            let _ = write!(out, "{n}");
        }
        (_, DynValue::Signed(n)) => {
            let _ = write!(out, "{n}");
        }
        (_, DynValue::Bool(b)) => {
            let _ = write!(out, "{b}");
        }
        (_, DynValue::Char(c)) => json_string(c.encode_utf8(&mut [0; 4]), out),
        (_, DynValue::Str(s)) => json_string(s, out),
        (_, DynValue::Bytes(b)) => json_string(&hex(b), out),
        (_, DynValue::Unit) => out.push_str("null"),
        (_, DynValue::F32(x)) => float_json(float_text(f64::from(*x), true), out),
        (_, DynValue::F64(x)) => float_json(float_text(*x, false), out),
        (_, DynValue::Option(None)) => out.push_str("null"),
        (DynType::Option(inner), DynValue::Option(Some(x))) => {
            if nullable(inner) {
                out.push('[');
                to_json(inner, x, out);
                out.push(']');
            } else {
                to_json(inner, x, out);
            }
        }
        (DynType::Tuple(types), DynValue::Tuple(values)) => {
            out.push('[');
            for (i, (t, x)) in types.iter().zip(values).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                to_json(t, x, out);
            }
            out.push(']');
        }
        (DynType::List(element) | DynType::Array(element, _), DynValue::List(items)) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                to_json(element, x, out);
            }
            out.push(']');
        }
        // A decoded value always matches its type; keep the output JSON
        // whatever happens.
        _ => out.push_str("null"),
    }
}

fn float_json(text: String, out: &mut String) {
    match text.as_str() {
        "NaN" | "inf" | "-inf" => json_string(&text, out),
        _ => out.push_str(&text),
    }
}

/// The value of `ty` that `j` writes (the inverse of [`to_json`]).
fn from_json(ty: &DynType, j: &Json) -> Result<DynValue, String> {
    let wrong = || format!("expected {}, found {j}", expected(ty));
    Ok(match ty {
        DynType::Unsigned(_) => match j {
            Json::Number(n) => DynValue::Unsigned(n.as_str().parse().map_err(|_| wrong())?),
            _ => return Err(wrong()),
        },
        DynType::Signed(_) => match j {
            Json::Number(n) => DynValue::Signed(n.as_str().parse().map_err(|_| wrong())?),
            _ => return Err(wrong()),
        },
        DynType::Bool => DynValue::Bool(j.as_bool().ok_or_else(wrong)?),
        DynType::Char => DynValue::Char(one_char(j.as_str().ok_or_else(wrong)?)?),
        DynType::Str => DynValue::Str(j.as_str().ok_or_else(wrong)?.to_string()),
        DynType::Bytes | DynType::ByteArray(_) => {
            DynValue::Bytes(unhex(j.as_str().ok_or_else(wrong)?)?)
        }
        DynType::Unit => match j {
            Json::Null => DynValue::Unit,
            _ => return Err(wrong()),
        },
        DynType::F32 => DynValue::F32(parse_float(&float_source(j).ok_or_else(wrong)?)?),
        DynType::F64 => DynValue::F64(parse_float(&float_source(j).ok_or_else(wrong)?)?),
        DynType::Option(inner) => match j {
            Json::Null => DynValue::Option(None),
            Json::Array(items) if nullable(inner) => match items.as_slice() {
                [x] => DynValue::Option(Some(Box::new(from_json(inner, x)?))),
                _ => return Err(wrong()),
            },
            _ if nullable(inner) => return Err(wrong()),
            x => DynValue::Option(Some(Box::new(from_json(inner, x)?))),
        },
        DynType::Tuple(types) => match j {
            Json::Array(items) if items.len() == types.len() => DynValue::Tuple(
                types
                    .iter()
                    .zip(items)
                    .map(|(t, x)| from_json(t, x))
                    .collect::<Result<_, _>>()?,
            ),
            _ => return Err(wrong()),
        },
        DynType::List(element) | DynType::Array(element, _) => match j {
            Json::Array(items) if array_len(ty).is_none_or(|n| n == items.len()) => DynValue::List(
                (items.iter())
                    .map(|x| from_json(element, x))
                    .collect::<Result<_, _>>()?,
            ),
            _ => return Err(wrong()),
        },
        _ => {
            return Err(format!(
                "type {ty} is not supported by this version of sheaf"
            ))
        }
    })
}

/// What a JSON value of `ty` looks like, for error messages.
fn expected(ty: &DynType) -> String {
    match ty {
        DynType::Unsigned(_) | DynType::Signed(_) => format!("an integer ({ty})"),
        DynType::Bool => "true or false".into(),
        DynType::Char => "a string of one character".into(),
        DynType::Str => "a string".into(),
        DynType::Bytes => "a string of hex digits".into(),
        DynType::ByteArray(n) => format!("a string of {} hex digits", n * 2),
        DynType::Unit => "null".into(),
        DynType::F32 | DynType::F64 => "a number, \"NaN\", \"inf\" or \"-inf\"".into(),
        DynType::Option(inner) if nullable(inner) => {
            format!("null or a one-element array ({ty})")
        }
        DynType::Option(_) => format!("null or a value ({ty})"),
        DynType::Tuple(t) => format!("an array of {} elements ({ty})", t.len()),
        DynType::List(_) => format!("an array ({ty})"),
        DynType::Array(_, n) => format!("an array of {n} elements ({ty})"),
        _ => ty.to_string(),
    }
}

fn float_source(j: &Json) -> Option<String> {
    match j {
        Json::Number(n) => Some(n.as_str().to_string()),
        Json::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// A float from its text, refusing a finite number the type cannot hold:
/// `str::parse` saturates to an infinity, or to zero for a number too
/// small, and such a load went through silently before (integers out of
/// range were refused).
fn parse_float<F: std::str::FromStr + Copy + Into<f64>>(text: &str) -> Result<F, String> {
    let t = text.trim();
    let v: F = t.parse().map_err(|_| format!("{text:?} is not a number"))?;
    let x: f64 = v.into();
    let unsigned = t.trim_start_matches(['+', '-']).to_ascii_lowercase();
    let mantissa = unsigned.split('e').next().unwrap_or("");
    let overflow = x.is_infinite() && !unsigned.starts_with("inf");
    let underflow = x == 0.0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if overflow || underflow {
        return Err(format!("{text:?} is out of the type's range"));
    }
    Ok(v)
}

fn one_char(s: &str) -> Result<char, String> {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => Ok(c),
        _ => Err(format!("expected one character, found {s:?}")),
    }
}

impl Codec {
    /// Decodes stored bytes (`Corrupted` if they do not decode as the type).
    fn decode(&self, side: Side, bytes: &[u8]) -> sheafdb::Result<Option<(DynType, DynValue)>> {
        match self {
            Codec::Known(ty) => Ok(Some((ty.clone(), side.decode(ty, bytes)?))),
            Codec::Raw => Ok(None),
        }
    }

    /// `Ok` if `bytes` decode as the type (always, for an unknown type).
    pub fn check(&self, side: Side, bytes: &[u8]) -> Result<(), String> {
        self.decode(side, bytes).map(drop).map_err(|e| match e {
            sheafdb::Error::Corrupted { what, .. } => what,
            e => e.to_string(),
        })
    }

    /// Stored bytes as JSON.
    pub fn json(&self, side: Side, bytes: &[u8], out: &mut String) -> sheafdb::Result<()> {
        match self.decode(side, bytes)? {
            Some((ty, v)) => to_json(&ty, &v, out),
            None => json_string(&hex(bytes), out),
        }
        Ok(())
    }

    /// Stored bytes as one CSV cell's text (before CSV quoting).
    pub fn cell(&self, side: Side, bytes: &[u8]) -> sheafdb::Result<String> {
        let Some((ty, v)) = self.decode(side, bytes)? else {
            return Ok(hex(bytes));
        };
        Ok(match (&ty, &v) {
            (_, DynValue::Str(s)) => s.clone(),
            (_, DynValue::Char(c)) => c.to_string(),
            (_, DynValue::Bytes(b)) => hex(b),
            (_, DynValue::Unsigned(n)) => n.to_string(),
            (_, DynValue::Signed(n)) => n.to_string(),
            (_, DynValue::Bool(b)) => b.to_string(),
            (_, DynValue::Unit) => String::new(),
            (_, DynValue::F32(x)) => float_text(f64::from(*x), true),
            (_, DynValue::F64(x)) => float_text(*x, false),
            _ => {
                let mut s = String::new();
                to_json(&ty, &v, &mut s);
                s
            }
        })
    }

    /// The stored bytes a JSON value stands for.
    pub fn parse_json(&self, side: Side, j: &Json) -> Result<Vec<u8>, String> {
        match self {
            Codec::Raw => match j {
                Json::String(s) => unhex(s),
                _ => Err(format!(
                    "expected a string of hex digits (the type is not built in), found {j}"
                )),
            },
            Codec::Known(ty) => {
                let v = from_json(ty, j)?;
                side.encode(ty, &v).map_err(|e| e.to_string())
            }
        }
    }

    /// The stored bytes a CSV cell stands for.
    pub fn parse_cell(&self, side: Side, cell: &str) -> Result<Vec<u8>, String> {
        let ty = match self {
            Codec::Raw => return unhex(cell),
            Codec::Known(ty) => ty,
        };
        let v = match ty {
            DynType::Str => DynValue::Str(cell.to_string()),
            DynType::Char => DynValue::Char(one_char(cell)?),
            DynType::Bytes | DynType::ByteArray(_) => DynValue::Bytes(unhex(cell)?),
            DynType::Unsigned(_) => DynValue::Unsigned(
                cell.trim()
                    .parse()
                    .map_err(|_| format!("{cell:?} is not an integer ({ty})"))?,
            ),
            DynType::Signed(_) => DynValue::Signed(
                cell.trim()
                    .parse()
                    .map_err(|_| format!("{cell:?} is not an integer ({ty})"))?,
            ),
            DynType::Bool => DynValue::Bool(
                cell.trim()
                    .parse()
                    .map_err(|_| format!("{cell:?} is not true or false"))?,
            ),
            DynType::Unit if cell.is_empty() => DynValue::Unit,
            DynType::Unit => return Err(format!("expected an empty cell for (), found {cell:?}")),
            DynType::F32 => DynValue::F32(parse_float(cell)?),
            DynType::F64 => DynValue::F64(parse_float(cell)?),
            _ => {
                let j: Json = serde_json::from_str(cell)
                    .map_err(|e| format!("{cell:?} is not JSON ({ty} cells are JSON): {e}"))?;
                from_json(ty, &j)?
            }
        };
        side.encode(ty, &v).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip_json(name: &str, side: Side, text: &str) {
        let codec = match side {
            Side::Key => Codec::for_key(name),
            Side::Value => Codec::for_value(name),
        };
        let j: Json = serde_json::from_str(text).unwrap();
        let bytes = codec.parse_json(side, &j).unwrap();
        let mut out = String::new();
        codec.json(side, &bytes, &mut out).unwrap();
        assert_eq!(out, text, "{name}");
        let cell = codec.cell(side, &bytes).unwrap();
        assert_eq!(
            codec.parse_cell(side, &cell).unwrap(),
            bytes,
            "{name} cell {cell:?}"
        );
    }

    #[test]
    fn json_round_trips_by_type() {
        for (name, text) in [
            ("u128", "340282366920938463463374607431768211455"),
            ("i128", "-170141183460469231731687303715884105728"),
            ("i8", "-5"),
            ("bool", "true"),
            ("char", "\"\u{e9}\""),
            ("str", "\"a,\\\"b\\\"\\nc\""),
            ("bytes", "\"00ff10\""),
            ("[u8;2]", "\"abcd\""),
            ("()", "null"),
            ("Option<u8>", "null"),
            ("Option<u8>", "7"),
            ("Option<()>", "[null]"),
            ("Option<Option<u8>>", "[null]"),
            ("Option<Option<u8>>", "[3]"),
            ("Option<Option<u8>>", "null"),
            ("(u64,str)", "[1,\"x\"]"),
            ("(u64,)", "[1]"),
            ("((u8,bool),Option<str>)", "[[1,false],\"s\"]"),
            ("my::Type", "\"0102\""),
        ] {
            round_trip_json(name, Side::Key, text);
            round_trip_json(name, Side::Value, text);
        }
        for (name, text) in [
            ("f64", "0.1"),
            ("f64", "1e300"),
            ("f64", "-2.5e-7"),
            ("f64", "123456789012345.6"),
            ("f64", "-0"),
            ("f64", "\"NaN\""),
            ("f64", "\"-inf\""),
            ("f32", "0.1"),
            ("f32", "3.4028235e38"),
            ("(f32,str)", "[1.5,\"x\"]"),
        ] {
            round_trip_json(name, Side::Value, text);
        }
    }

    #[test]
    fn bad_json_is_a_clear_error() {
        let c = Codec::for_key("u8");
        let err = c
            .parse_json(Side::Key, &serde_json::json!(256))
            .unwrap_err();
        assert!(err.contains("not a value of type u8"), "{err}");
        let err = c
            .parse_json(Side::Key, &serde_json::json!("x"))
            .unwrap_err();
        assert!(err.contains("expected an integer (u8)"), "{err}");
        let c = Codec::for_key("(u8,str)");
        let err = c
            .parse_json(Side::Key, &serde_json::json!([1]))
            .unwrap_err();
        assert!(err.contains("array of 2 elements"), "{err}");
        assert!(unhex("abc").is_err());
        assert!(unhex("zz").is_err());
    }

    #[test]
    fn float_keys_are_raw() {
        assert!(matches!(Codec::for_key("f64"), Codec::Raw));
        assert!(matches!(Codec::for_value("f64"), Codec::Known(_)));
    }
}
