//! The serializer against serde_json, its reference: the same bytes, or
//! the same error, for every value.

use super::super::generated::{json_value, tricky_string};
use super::*;
use proptest::prelude::*;
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// What `to_writer` appends after a prefix, or its error's message.
fn ours<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, String> {
    let mut out = b"prefix".to_vec();
    match to_writer(&mut out, value) {
        Ok(()) => Ok(out.split_off(6)),
        Err(error) => {
            assert_eq!(out, b"prefix", "an error leaves the buffer as it was");
            Err(error.to_string())
        }
    }
}

fn reference<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, String> {
    serde_json::to_vec(value).map_err(|e| e.to_string())
}

proptest! {
    #[test]
    fn writes_any_json_value_as_serde_json_does(value in json_value()) {
        prop_assert_eq!(ours(&value), reference(&value));
    }

    #[test]
    fn writes_any_string_as_serde_json_does(text in tricky_string()) {
        prop_assert_eq!(ours(&text), reference(&text));
        let mut quoted = Vec::new();
        super::super::quote_into(&mut quoted, &text);
        prop_assert_eq!(Ok(quoted), reference(&text));
    }

    #[test]
    fn writes_floats_as_serde_json_does(a in any::<f64>(), b in any::<f32>()) {
        prop_assert_eq!(ours(&(a, b)), reference(&(a, b)));
    }
}

/// A record with every shape serde derives.
#[derive(Serialize)]
struct Everything<'a> {
    id: i64,
    small: (i8, u8, i16, u16, i32, u32),
    wide: (i128, u128),
    floats: (f32, f64, f64, f32),
    letter: char,
    text: &'a str,
    missing: Option<String>,
    present: Option<u32>,
    unit: (),
    empty: Empty,
    wrapped: Wrapped,
    list: Vec<Shape>,
    empty_list: Vec<u8>,
    bytes: Bytes<'a>,
    by_name: BTreeMap<&'a str, i32>,
    by_letter: BTreeMap<char, bool>,
    by_variant: BTreeMap<Kind, u8>,
    raw: &'a RawValue,
}

#[derive(Serialize)]
struct Empty;

#[derive(Serialize)]
struct Wrapped(String);

#[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Plain,
    Fancy,
}

#[derive(Serialize)]
enum Shape {
    Point,
    Circle(f64),
    Pair(i32, i32),
    NoPair(),
    Rect { w: u32, h: u32 },
    Nothing {},
}

/// Serialised with `serialize_bytes`.
struct Bytes<'a>(&'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

#[test]
fn writes_every_shape_serde_derives_as_serde_json_does() {
    let raw = RawValue::from_string(r#"{ "kept" : [1, 2] }"#.to_string()).unwrap();
    let everything = Everything {
        id: -7,
        small: (-8, 200, -300, 60000, -70000, 4_000_000_000),
        wide: (i128::MIN, u128::MAX),
        floats: (1.5, f64::NAN, f64::INFINITY, -0.0),
        letter: '"',
        text: "tab\there \"quoted\" é \u{1} end",
        missing: None,
        present: Some(3),
        unit: (),
        empty: Empty,
        wrapped: Wrapped("w\\".to_string()),
        list: vec![
            Shape::Point,
            Shape::Circle(2.25),
            Shape::Pair(-1, 1),
            Shape::NoPair(),
            Shape::Rect { w: 3, h: 4 },
            Shape::Nothing {},
        ],
        empty_list: Vec::new(),
        bytes: Bytes(&[0, 127, 255]),
        by_name: [("b", 2), ("a\n", 1)].into_iter().collect(),
        by_letter: [('x', true), ('\\', false)].into_iter().collect(),
        by_variant: [(Kind::Plain, 1), (Kind::Fancy, 2)].into_iter().collect(),
        raw: &raw,
    };
    let written = ours(&everything);
    assert_eq!(written, reference(&everything));
    let text = String::from_utf8(written.unwrap()).unwrap();
    assert!(text.contains(r#""raw":{ "kept" : [1, 2] }"#), "{text}");
}

#[test]
fn keys_serde_json_writes_its_own_way_are_written_by_it() {
    let by_number: BTreeMap<i64, &str> = [(-1, "a"), (2, "b")].into_iter().collect();
    assert_eq!(ours(&by_number), reference(&by_number));
    assert_eq!(ours(&by_number).unwrap(), br#"{"-1":"a","2":"b"}"#);
    let by_bool: BTreeMap<bool, u8> = [(true, 1)].into_iter().collect();
    assert_eq!(ours(&by_bool), reference(&by_bool));
    let by_float: BTreeMap<String, BTreeMap<u8, f32>> =
        [("x".to_string(), [(1, 0.5)].into_iter().collect())]
            .into_iter()
            .collect();
    assert_eq!(ours(&by_float), reference(&by_float));
}

#[test]
fn refuses_what_serde_json_refuses_with_its_error() {
    let by_list: BTreeMap<Vec<u8>, u8> = [(vec![1], 1)].into_iter().collect();
    let refused = ours(&by_list);
    assert_eq!(refused, reference(&by_list));
    assert_eq!(refused.unwrap_err(), "key must be a string");

    struct Failing;
    impl Serialize for Failing {
        fn serialize<S: ser::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(ser::Error::custom("the plugin's own reason"))
        }
    }
    assert_eq!(
        ours(&(1, Failing)).unwrap_err(),
        "the plugin's own reason".to_string()
    );
}
