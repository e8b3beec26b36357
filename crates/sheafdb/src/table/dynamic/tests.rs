//! The dynamic codec against the typed one: for values of many built-in
//! types, the typed and the dynamic encodings are byte-identical, each
//! decodes the other's bytes to the same value, and on arbitrary bytes
//! (random, and truncated encodings) both accept or both refuse.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::{decode_part, encode_part, DynType, DynValue};
use crate::error::Error;
use crate::table::types::{
    encode_key_to_vec, encode_value_to_vec, ArrayElement, Key, KeyPart, Value,
};

/// The dynamic value of a typed one (test-only mirror of the encodings'
/// value model).
trait ToDyn {
    fn to_dyn(&self) -> DynValue;
}

macro_rules! to_dyn_int {
    ($variant:ident: $($t:ty),*) => {$(
        impl ToDyn for $t {
            fn to_dyn(&self) -> DynValue {
                DynValue::$variant((*self).into())
            }
        }
    )*};
}
to_dyn_int!(Unsigned: u8, u16, u32, u64, u128);
to_dyn_int!(Signed: i8, i16, i32, i64, i128);

impl ToDyn for bool {
    fn to_dyn(&self) -> DynValue {
        DynValue::Bool(*self)
    }
}
impl ToDyn for char {
    fn to_dyn(&self) -> DynValue {
        DynValue::Char(*self)
    }
}
impl ToDyn for String {
    fn to_dyn(&self) -> DynValue {
        DynValue::Str(self.clone())
    }
}
impl ToDyn for Vec<u8> {
    fn to_dyn(&self) -> DynValue {
        DynValue::Bytes(self.clone())
    }
}
impl<const N: usize> ToDyn for [u8; N] {
    fn to_dyn(&self) -> DynValue {
        DynValue::Bytes(self.to_vec())
    }
}
impl<T: ArrayElement + ToDyn> ToDyn for Vec<T> {
    fn to_dyn(&self) -> DynValue {
        DynValue::List(self.iter().map(ToDyn::to_dyn).collect())
    }
}
impl<T: ArrayElement + ToDyn, const N: usize> ToDyn for [T; N] {
    fn to_dyn(&self) -> DynValue {
        DynValue::List(self.iter().map(ToDyn::to_dyn).collect())
    }
}
impl ToDyn for () {
    fn to_dyn(&self) -> DynValue {
        DynValue::Unit
    }
}
impl ToDyn for f32 {
    fn to_dyn(&self) -> DynValue {
        DynValue::F32(*self)
    }
}
impl ToDyn for f64 {
    fn to_dyn(&self) -> DynValue {
        DynValue::F64(*self)
    }
}
impl<T: ToDyn> ToDyn for Option<T> {
    fn to_dyn(&self) -> DynValue {
        DynValue::Option(self.as_ref().map(|v| Box::new(v.to_dyn())))
    }
}

macro_rules! to_dyn_tuple {
    ($($t:ident $i:tt),*) => {
        impl<$($t: ToDyn),*> ToDyn for ($($t,)*) {
            fn to_dyn(&self) -> DynValue {
                DynValue::Tuple(vec![$(self.$i.to_dyn()),*])
            }
        }
    };
}
to_dyn_tuple!(A 0);
to_dyn_tuple!(A 0, B 1);
to_dyn_tuple!(A 0, B 1, C 2);
to_dyn_tuple!(A 0, B 1, C 2, D 3);
to_dyn_tuple!(A 0, B 1, C 2, D 3, E 4);
to_dyn_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
to_dyn_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
to_dyn_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// Equal values, floats compared by their bits (NaN payloads included).
fn same(a: &DynValue, b: &DynValue) -> bool {
    match (a, b) {
        (DynValue::F32(x), DynValue::F32(y)) => x.to_bits() == y.to_bits(),
        (DynValue::F64(x), DynValue::F64(y)) => x.to_bits() == y.to_bits(),
        (DynValue::Option(Some(x)), DynValue::Option(Some(y))) => same(x, y),
        (DynValue::Tuple(xs), DynValue::Tuple(ys)) | (DynValue::List(xs), DynValue::List(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same(x, y))
        }
        _ => a == b,
    }
}

fn dyn_of<T: Value>() -> DynType {
    DynType::parse(&T::type_name()).unwrap_or_else(|| panic!("{} does not parse", T::type_name()))
}

/// Both decoders refuse (with `Corrupted`) or both give the same value.
fn agree<T: ToDyn>(
    what: &str,
    typed: crate::error::Result<T>,
    dynamic: crate::error::Result<DynValue>,
) -> Result<(), TestCaseError> {
    match (typed, dynamic) {
        (Ok(t), Ok(d)) => prop_assert!(same(&t.to_dyn(), &d), "{what}: {:?} vs {d:?}", t.to_dyn()),
        (Err(a), Err(b)) => {
            prop_assert!(a.is_corrupted(), "{what}: typed {a}");
            prop_assert!(b.is_corrupted(), "{what}: dynamic {b}");
        }
        (Ok(t), Err(e)) => prop_assert!(false, "{what}: typed {:?}, dynamic {e}", t.to_dyn()),
        (Err(e), Ok(d)) => prop_assert!(false, "{what}: typed {e}, dynamic {d:?}"),
    }
    Ok(())
}

/// Value encodings of `v` agree, and both decoders agree on `noise` and
/// on every truncation of the encoding.
fn check_value<T>(v: &T, noise: &[u8]) -> Result<(), TestCaseError>
where
    T: for<'a> Value<SelfType<'a> = T> + ToDyn + 'static,
{
    let ty = dyn_of::<T>();
    prop_assert_eq!(ty.to_string(), T::type_name());
    prop_assert_eq!(ty.fixed_width(), T::fixed_width());
    let typed = encode_value_to_vec::<T>(v);
    prop_assert_eq!(&ty.encode_value(&v.to_dyn()).unwrap(), &typed);
    let back = ty.decode_value(&typed).unwrap();
    prop_assert!(same(&back, &v.to_dyn()));
    prop_assert_eq!(&ty.encode_value(&back).unwrap(), &typed);
    for n in 0..typed.len() {
        agree(
            "value prefix",
            T::decode_value(&typed[..n]),
            ty.decode_value(&typed[..n]),
        )?;
    }
    agree(
        "value noise",
        T::decode_value(noise),
        ty.decode_value(noise),
    )
}

/// [`check_value`], and the same for the key encoding.
fn check_key<T>(v: &T, noise: &[u8]) -> Result<(), TestCaseError>
where
    T: for<'a> Key<SelfType<'a> = T> + ToDyn + 'static,
{
    check_value(v, noise)?;
    let ty = dyn_of::<T>();
    prop_assert!(ty.is_key());
    let typed = encode_key_to_vec::<T>(v);
    prop_assert_eq!(&ty.encode_key(&v.to_dyn()).unwrap(), &typed);
    let back = ty.decode_key(&typed).unwrap();
    prop_assert!(same(&back, &v.to_dyn()));
    for n in 0..typed.len() {
        agree(
            "key prefix",
            T::decode_key(&typed[..n]),
            ty.decode_key(&typed[..n]),
        )?;
    }
    agree("key noise", T::decode_key(noise), ty.decode_key(noise))
}

/// [`check_key`], and the same for the key part encoding (followed by
/// `noise`, which the part must leave alone).
fn check_part<T>(v: &T, noise: &[u8]) -> Result<(), TestCaseError>
where
    T: for<'a> KeyPart<SelfType<'a> = T> + ToDyn + 'static,
{
    check_key(v, noise)?;
    let ty = dyn_of::<T>();
    let mut typed = Vec::new();
    T::encode_key_part(v, &mut typed);
    let mut dynamic = Vec::new();
    encode_part(&ty, &v.to_dyn(), &mut dynamic).unwrap();
    prop_assert_eq!(&dynamic, &typed);
    let len = typed.len();
    typed.extend_from_slice(noise);
    let (back, used) = decode_part(&ty, &typed).unwrap();
    prop_assert!(same(&back, &v.to_dyn()));
    prop_assert_eq!(used, len);
    for bytes in [&typed[..len / 2], noise] {
        match (T::decode_key_part(bytes), decode_part(&ty, bytes)) {
            (Ok((t, a)), Ok((d, b))) => {
                prop_assert!(same(&t.to_dyn(), &d));
                prop_assert_eq!(a, b);
            }
            (Err(a), Err(b)) => prop_assert!(a.is_corrupted() && b.is_corrupted()),
            (t, d) => prop_assert!(
                false,
                "part: typed ok {}, dynamic ok {}",
                t.is_ok(),
                d.is_ok()
            ),
        }
    }
    Ok(())
}

/// Strings over a small alphabet rich in NULs (escapes, prefixes).
fn string() -> impl Strategy<Value = String> {
    let ch = prop_oneof![Just('\0'), Just('a'), Just('\u{ff}'), any::<char>()];
    vec(ch, 0..8).prop_map(String::from_iter)
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
        0..24,
    )
}

macro_rules! same_as_typed {
    ($check:ident: $($name:ident: $t:ty = $strat:expr;)*) => {$(
        proptest! {
            #[test]
            fn $name(v in $strat, n in noise()) {
                $check::<$t>(&v, &n)?;
            }
        }
    )*};
}

same_as_typed! { check_part:
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
    part_empty_array: [u8; 0] = Just([]);
    part_unit: () = Just(());
    part_option_u32: Option<u32> = proptest::option::of(any::<u32>());
    part_option_string: Option<String> = proptest::option::of(string());
    part_option_option: Option<Option<u8>> = proptest::option::of(proptest::option::of(any::<u8>()));
    part_option_unit: Option<()> = proptest::option::of(Just(()));
    part_one_tuple: (u64,) = (any::<u64>(),);
    part_pair: (u64, String) = (any::<u64>(), string());
    part_triple: (i32, String, Vec<u8>) = (any::<i32>(), string(), bytes());
    part_unit_u8: ((), u8) = (Just(()), any::<u8>());
    part_nested: ((u8, String), Option<Vec<u8>>) =
        ((any::<u8>(), string()), proptest::option::of(bytes()));
    part_option_tuple: Option<(String, i16)> = proptest::option::of((string(), any::<i16>()));
    part_vec_u16: Vec<u16> = vec(any::<u16>(), 0..5);
    part_vec_i8: Vec<i8> = vec(any::<i8>(), 0..5);
    part_vec_char: Vec<char> = vec(any::<char>(), 0..4);
    part_vec_unit: Vec<()> = vec(Just(()), 0..4);
    part_vec_pair: Vec<(u8, bool)> = vec((any::<u8>(), any::<bool>()), 0..4);
    part_vec_bytes4: Vec<[u8; 4]> = vec(any::<[u8; 4]>(), 0..4);
    part_array_char: [char; 2] = any::<[char; 2]>();
    part_array_i32: [i32; 3] = any::<[i32; 3]>();
    part_array_nested: [[u16; 2]; 2] = any::<[[u16; 2]; 2]>();
    part_array_empty: [u64; 0] = Just([]);
    part_vec_arrays: Vec<[bool; 2]> = vec(any::<[bool; 2]>(), 0..4);
    part_vec_in_tuple: (Vec<u16>, u8) = (vec(any::<u16>(), 0..4), any::<u8>());
    part_vecs_in_tuple: (Vec<()>, [char; 1], Vec<i64>) =
        (vec(Just(()), 0..3), any::<[char; 1]>(), vec(any::<i64>(), 0..3));
    part_eight: (bool, u8, i8, char, Option<u8>, (), String, Vec<u8>) =
        (any::<bool>(), any::<u8>(), any::<i8>(), any::<char>(), proptest::option::of(any::<u8>()),
         Just(()), string(), bytes());
}

same_as_typed! { check_value:
    value_f32: f32 = any::<f32>();
    value_f64: f64 = any::<f64>();
    value_f64_bits: f64 = any::<u64>().prop_map(f64::from_bits);
    value_option_f32: Option<f32> = proptest::option::of(any::<f32>());
    value_tuple_floats: (f64, String, f32) = (any::<f64>(), string(), any::<f32>());
    value_option_tuple: Option<(u8, f32)> = proptest::option::of((any::<u8>(), any::<f32>()));
    value_strings_first: (String, Option<String>, u8) =
        (string(), proptest::option::of(string()), any::<u8>());
    value_fixed_inner: ((u16, bool), [u8; 3], Vec<u8>) =
        ((any::<u16>(), any::<bool>()), any::<[u8; 3]>(), bytes());
    value_vec_f32: Vec<f32> = vec(any::<f32>(), 0..4);
    value_array_f64: [f64; 2] = any::<[f64; 2]>();
    value_vec_in_tuple: (Vec<u32>, String, [i16; 2]) =
        (vec(any::<u32>(), 0..4), string(), any::<[i16; 2]>());
    value_option_vec: Option<Vec<(u8, char)>> =
        proptest::option::of(vec((any::<u8>(), any::<char>()), 0..3));
}

#[test]
fn type_names_parse_and_print_back() {
    let names = [
        u8::type_name(),
        u128::type_name(),
        i8::type_name(),
        i64::type_name(),
        bool::type_name(),
        char::type_name(),
        <&str>::type_name(),
        <&[u8]>::type_name(),
        <[u8; 16]>::type_name(),
        <()>::type_name(),
        f32::type_name(),
        f64::type_name(),
        <Option<u32>>::type_name(),
        <(u64,)>::type_name(),
        <(u64, &str)>::type_name(),
        <((), u8)>::type_name(),
        <(Option<(u8, bool)>, Vec<u8>)>::type_name(),
        <Option<Option<()>>>::type_name(),
        <Vec<u32>>::type_name(),
        <[char; 4]>::type_name(),
        <Vec<[u8; 2]>>::type_name(),
        <[[u16; 2]; 3]>::type_name(),
        <(Vec<()>, [bool; 0])>::type_name(),
        <Option<Vec<(u8, i64)>>>::type_name(),
    ];
    for name in names {
        let ty = DynType::parse(&name).unwrap_or_else(|| panic!("{name} does not parse"));
        assert_eq!(ty.to_string(), name);
    }
    assert_eq!(
        DynType::parse(" ( u64 , Option< str > , [ u8 ; 4 ] ) ").map(|t| t.to_string()),
        Some("(u64,Option<str>,[u8;4])".to_string())
    );
    assert_eq!(
        DynType::parse("(str,u8)"),
        Some(DynType::Tuple(vec![DynType::Str, DynType::Unsigned(1)]))
    );
}

/// Arrays of zero-width elements parse up to a bound (their only encoding
/// is no bytes, so untyped writes are checked); past it a name from a
/// damaged catalog cannot ask for a decode of that many empty elements.
#[test]
fn zero_width_arrays_parse_up_to_a_bound() {
    let unit3 = DynType::parse("[();3]").expect("parses");
    assert_eq!(unit3.fixed_width(), Some(0));
    assert!(unit3.decode_key(&[]).is_ok());
    assert!(unit3.decode_key(&[0]).is_err());
    let most = super::ZERO_WIDTH_NODES_MAX - 1;
    assert!(DynType::parse(&format!("[();{most}]")).is_some());
    assert_eq!(DynType::parse(&format!("[();{}]", most + 1)), None);
    assert!(DynType::parse("[[();1];1]").is_some());
    assert!(DynType::parse("[[();4];4]").is_some(), "21 values");
    // Nesting multiplies: 1 + 8 * (1 + 8) values.
    assert_eq!(DynType::parse("[[();8];8]"), None);
    assert_eq!(DynType::parse("[[[();4096];4096];4096]"), None);
    assert_eq!(DynType::parse("[((),[();40]);2]"), None);
    // A `Vec` of zero-width elements builds their values per byte it reads:
    // bounded the same way, as are zero-width tuples anywhere.
    assert!(DynType::parse("Vec<[();2]>").is_some());
    assert_eq!(DynType::parse("Vec<[();64]>"), None);
    assert_eq!(DynType::parse("Vec<([();40],[();40])>"), None);
    let units = vec!["()"; 70].join(",");
    assert_eq!(DynType::parse(&format!("(u8,({units}))")), None);
    assert!(
        DynType::parse(&format!("(u8,{units})")).is_some(),
        "not zero-width"
    );
}

#[test]
fn unknown_type_names_give_none() {
    for name in [
        "",
        "test::Celsius",
        "(test::Celsius,str)",
        "Option<test::Celsius>",
        "Vec<u8>",
        "Vec<str>",
        "Vec<Option<u8>>",
        "[str;2]",
        "[();4097]",
        "[[();1];4097]",
        "[();18446744073709551615]",
        "Vec<u32",
        "[u32;4",
        "[u8;]",
        "[u8;04]",
        "(u64)",
        "(u64,str,)",
        "(,)",
        "u64 u64",
        "Option<u8",
        "Option",
        "u63",
        "String",
        "(u8,))",
    ] {
        assert_eq!(DynType::parse(name), None, "{name:?}");
    }
}

#[test]
fn floats_are_values_only() {
    for name in ["f32", "Option<f64>", "(u8,f32)", "((f64,),u8)"] {
        let ty = DynType::parse(name).unwrap();
        assert!(!ty.is_key(), "{name}");
        assert!(matches!(
            ty.decode_key(&[0; 8]),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            ty.encode_key(&DynValue::F32(1.0)),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(DynType::parse("(u8,Option<str>)").unwrap().is_key());
}

#[test]
fn values_of_another_type_are_refused() {
    let refused = |ty: &str, v: DynValue| {
        let ty = DynType::parse(ty).unwrap();
        assert!(
            matches!(ty.encode_value(&v), Err(Error::InvalidArgument(_))),
            "{ty} value {v:?}"
        );
        if ty.is_key() {
            assert!(
                matches!(ty.encode_key(&v), Err(Error::InvalidArgument(_))),
                "{ty} key {v:?}"
            );
        }
    };
    refused("u8", DynValue::Unsigned(256));
    refused("u64", DynValue::Signed(1));
    refused("i8", DynValue::Signed(-129));
    refused("i8", DynValue::Signed(128));
    refused("u128", DynValue::Str("1".into()));
    refused("[u8;4]", DynValue::Bytes(vec![1, 2, 3]));
    refused("str", DynValue::Bytes(vec![]));
    refused("(u8,u8)", DynValue::Tuple(vec![DynValue::Unsigned(1)]));
    refused("Option<u8>", DynValue::Unsigned(1));
    refused("()", DynValue::Option(None));
    refused("f32", DynValue::F64(1.0));
    // Extremes are accepted.
    let i128_min = DynType::parse("i128").unwrap();
    assert_eq!(
        i128_min.encode_key(&DynValue::Signed(i128::MIN)).unwrap(),
        encode_key_to_vec::<i128>(&i128::MIN)
    );
    let u128_max = DynType::parse("u128").unwrap();
    assert_eq!(
        u128_max
            .encode_value(&DynValue::Unsigned(u128::MAX))
            .unwrap(),
        encode_value_to_vec::<u128>(&u128::MAX)
    );
}

#[test]
fn unusual_integer_widths_are_errors_not_panics() {
    for ty in [
        DynType::Unsigned(0),
        DynType::Signed(17),
        DynType::Unsigned(64),
    ] {
        assert!(ty.decode_key(&[0; 64]).is_err());
        assert!(ty.decode_value(&[0; 64]).is_err());
        assert!(ty.encode_key(&DynValue::Unsigned(0)).is_err());
        assert!(ty.encode_value(&DynValue::Signed(0)).is_err());
    }
}

#[test]
fn decode_errors_name_the_encoding() {
    let location = |e: Error| match e {
        Error::Corrupted { location, .. } => location.to_string(),
        other => panic!("expected corruption, got {other}"),
    };
    let ty = DynType::parse("(str,u8)").unwrap();
    assert_eq!(location(ty.decode_key(b"ab").unwrap_err()), "key decode");
    assert_eq!(
        location(ty.decode_value(&[9, 0, 0, 0]).unwrap_err()),
        "value decode"
    );
}

#[test]
fn multimap_type_names_and_pairs() {
    use crate::table::dynamic::{multimap_pair, multimap_types, split_multimap_pair};
    assert_eq!(multimap_types("multimap(str,u64)"), Some(("str", "u64")));
    assert_eq!(
        multimap_types("multimap((u64,str),Option<(u8,bytes)>)"),
        Some(("(u64,str)", "Option<(u8,bytes)>"))
    );
    assert_eq!(multimap_types("(str,u64)"), None);
    assert_eq!(multimap_types("multimap(str)"), None);
    // The catalog's own name for a multimap of these types.
    let def: crate::table::MultimapTableDefinition<(u64, &str), Option<u8>> =
        crate::table::MultimapTableDefinition::new("m");
    assert_eq!(
        multimap_types(&def.key_type_name()),
        Some(("(u64,str)", "Option<u8>"))
    );
    for (k, v) in [(&b"a\0b"[..], &b"\0\0"[..]), (b"", b""), (b"\xff", b"x\0")] {
        let stored = multimap_pair(k, v);
        let (k2, v2) = split_multimap_pair(&stored).unwrap();
        assert_eq!((k2.as_slice(), v2), (k, v));
    }
    assert!(split_multimap_pair(b"no terminator").is_err());
    assert!(split_multimap_pair(b"bad\0escape").is_err());
}

/// A type name nested past the limit is not recognised instead of
/// recursing off the stack (a catalog name of 200,000 `(` aborted the
/// CLI); nesting up to the limit still parses.
#[test]
fn deeply_nested_type_names_are_refused_not_a_stack_overflow() {
    let deep = "(".repeat(200_000);
    assert_eq!(DynType::parse(&deep), None);
    let options = "Option<".repeat(100_000) + "u8" + &">".repeat(100_000);
    assert_eq!(DynType::parse(&options), None);
    let depth = super::MAX_TYPE_DEPTH - 1;
    let fits = "Option<".repeat(depth) + "u8" + &">".repeat(depth);
    let mut ty = DynType::parse(&fits).expect("within the limit");
    for _ in 0..depth {
        ty = match ty {
            DynType::Option(inner) => *inner,
            other => panic!("{other:?}"),
        };
    }
    assert_eq!(ty, DynType::Unsigned(1));
}
