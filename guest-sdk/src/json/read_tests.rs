//! The reader against serde_json, its reference: the same visitor calls,
//! values and errors, on well-formed and malformed text.

use super::super::generated::json_value;
use super::*;
use proptest::prelude::*;
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Every call a visitor gets, in order, with what it was given: two
/// readers that give the same trace make the same value of any type.
#[derive(Debug, PartialEq)]
struct Trace(Vec<String>);

impl<'de> Deserialize<'de> for Trace {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut calls = Vec::new();
        d.deserialize_any(Tracer(&mut calls))?;
        Ok(Trace(calls))
    }
}

struct Tracer<'t>(&'t mut Vec<String>);

/// Records one nested value into the same trace.
struct Nested<'t>(&'t mut Vec<String>);

impl<'de> DeserializeSeed<'de> for Nested<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(Tracer(self.0))
    }
}

impl<'de> Visitor<'de> for Tracer<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("anything")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.push(format!("bool {v}"));
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.0.push(format!("i64 {v}"));
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.0.push(format!("u64 {v}"));
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.0.push(format!("f64 {:x}", v.to_bits()));
        Ok(())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.push(format!("str {v:?}"));
        Ok(())
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<(), E> {
        self.0.push(format!("borrowed str {v:?}"));
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.push("unit".into());
        Ok(())
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push("[".into());
        while seq.next_element_seed(Nested(self.0))?.is_some() {}
        self.0.push("]".into());
        Ok(())
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push("{".into());
        while map.next_key_seed(Nested(self.0))?.is_some() {
            map.next_value_seed(Nested(self.0))?;
        }
        self.0.push("}".into());
        Ok(())
    }
}

/// The result of reading `text` as `T`, ours and serde_json's, as text.
fn both<'a, T: Deserialize<'a> + fmt::Debug>(text: &'a [u8]) -> (String, String) {
    let ours = from_slice::<T>(text).map_err(|e| e.to_string());
    let reference = serde_json::from_slice::<T>(text).map_err(|e| e.to_string());
    (format!("{ours:?}"), format!("{reference:?}"))
}

/// Text a writer would produce, and the same with numbers written by
/// hand the ways serde_json does not write them (exponents, -0, big).
fn json_text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        json_value().prop_map(|v| serde_json::to_vec_pretty(&v).unwrap_or_default()),
        prop::sample::select(vec![
            "-0",
            "0",
            "-0.0",
            "1e3",
            "1E+3",
            "2.5e-3",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "123456789012345678901234567890",
            "[1,-0,1.0,0.1]",
            r#"{"a":"\u00e9\ud83d\ude00","b":"\/"}"#,
            r#""\ud800""#,
        ])
        .prop_map(|text| text.as_bytes().to_vec()),
    ]
}

/// `text` with a few bytes changed, inserted or removed.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let tricky = prop::sample::select(vec![
        b'"', b'\\', b',', b':', b'{', b'}', b'[', b']', b'-', b'0', b'.', b'e', b' ', b'n', b't',
        0x00, 0x80, 0xc3, 0xff,
    ]);
    (
        json_text(),
        prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, tricky), 1..4),
    )
        .prop_map(|(mut text, edits)| {
            for (at, kind, byte) in edits {
                if text.is_empty() {
                    text.push(byte);
                    continue;
                }
                let at = at.index(text.len());
                match kind {
                    0 => text[at] = byte,
                    1 => text.insert(at, byte),
                    _ => {
                        text.remove(at);
                    }
                }
            }
            text
        })
}

proptest! {
    #[test]
    fn gives_a_visitor_the_calls_serde_json_gives(text in json_text()) {
        let (ours, reference) = both::<Trace>(&text);
        prop_assert_eq!(ours, reference);
    }

    #[test]
    fn reads_malformed_text_as_serde_json_does(text in mutated()) {
        let (ours, reference) = both::<Trace>(&text);
        prop_assert_eq!(ours, reference);
        let (ours, reference) = both::<Value>(&text);
        prop_assert_eq!(ours, reference);
    }

    #[test]
    fn reads_records_and_malformed_records_as_serde_json_does(
        text in prop_oneof![
            json_value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
            Just(RECORD.as_bytes().to_vec()),
        ],
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
    ) {
        let mut text = text;
        for (at, byte) in edits {
            if !text.is_empty() {
                let at = at.index(text.len());
                text[at] = byte;
            }
        }
        let (ours, reference) = both::<Event<'_>>(&text);
        prop_assert_eq!(ours, reference);
    }
}

const RECORD: &str = r#"{"id":1000001,"key":-3,"text":"hello \"world\"","user":"user-0001",
    "ts":1767225600000,"score":0.25,"tags":["a","b"],"nested":{"x":1,"y":[true,null]},
    "kind":"Plain","shape":{"Circle":2.5},"raw":{"kept" : [1, 2]},"by_id":{"7":"seven"},
    "extra":{"ignored":[1,{"deep":"x"}]},"maybe":null,"any":[1,"two",3.5],"big":12345678901234567890123}"#;

/// A record with most of what a plugin declares.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Event<'a> {
    id: u64,
    key: i64,
    text: String,
    user: &'a str,
    ts: i64,
    score: f64,
    tags: Vec<String>,
    nested: Nested2,
    kind: Kind,
    shape: Shape,
    #[serde(borrow)]
    raw: &'a RawValue,
    by_id: BTreeMap<u32, String>,
    maybe: Option<i32>,
    any: Value,
    big: f64,
    #[serde(default)]
    missing: Option<HashMap<String, u8>>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Nested2 {
    x: u8,
    y: (bool, Option<u8>),
}

#[derive(Debug, Deserialize)]
enum Kind {
    Plain,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
enum Shape {
    Circle(f64),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Strict {
    a: u8,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Flat {
    a: u8,
    #[serde(flatten)]
    rest: BTreeMap<String, Value>,
}

#[test]
fn reads_a_record_with_every_kind_of_field_as_serde_json_does() {
    let (ours, reference) = both::<Event<'_>>(RECORD.as_bytes());
    assert!(ours.starts_with("Ok("), "{ours}");
    assert_eq!(ours, reference);
}

#[test]
fn refuses_what_serde_json_refuses_with_its_words() {
    for text in [
        r#"{"a":1,"a":2}"#,
        r#"{"a":1,"b":2}"#,
        r#"{"a":"1"}"#,
        r#"{"a":300}"#,
        r#"{}"#,
        r#"{"a":1} x"#,
        r#"{"a":1,}"#,
        r#"[1]"#,
        "",
    ] {
        let (ours, reference) = both::<Strict>(text.as_bytes());
        assert_eq!(ours, reference, "{text}");
        let (ours, reference) = both::<Flat>(text.as_bytes());
        assert_eq!(ours, reference, "{text}");
    }
    let (ours, _) = both::<Strict>(br#"{"a":1,"a":2}"#);
    assert!(
        ours.contains("duplicate field `a` at line 1 column"),
        "{ours}"
    );
}

#[test]
fn borrows_strings_without_escapes_from_the_record() {
    #[derive(Deserialize)]
    struct Both<'a> {
        #[serde(borrow)]
        plain: std::borrow::Cow<'a, str>,
        #[serde(borrow)]
        escaped: std::borrow::Cow<'a, str>,
    }
    let text = br#"{"plain":"abc","escaped":"a\nb"}"#;
    let read: Both<'_> = from_slice(text).unwrap();
    assert!(matches!(read.plain, std::borrow::Cow::Borrowed("abc")));
    assert!(matches!(&read.escaped, std::borrow::Cow::Owned(s) if s == "a\nb"));
    let refused = from_slice::<HashMap<&str, &str>>(text).unwrap_err();
    assert_eq!(
        refused.to_string(),
        serde_json::from_slice::<HashMap<&str, &str>>(text)
            .unwrap_err()
            .to_string()
    );
}

#[test]
fn nesting_deeper_than_serde_json_reads_is_refused_as_it_refuses_it() {
    for depth in [99, 100, 101, 127, 128, 129, 200] {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let (ours, reference) = both::<Value>(text.as_bytes());
        assert_eq!(ours, reference, "depth {depth}");
    }
}

proptest! {
    /// Eight bytes are eight digits exactly when each is one, and their
    /// value is the decimal number they spell.
    #[test]
    fn eight_digits_reads_what_a_byte_loop_reads(
        chunk in prop::array::uniform8(prop_oneof![
            4 => b'0'..=b'9',
            1 => prop::sample::select(vec![b'/', b':', b'.', b'-', b'e', 0x00, 0xb0, 0xff, 0x36 + 0x80]),
        ]),
    ) {
        let by_bytes = chunk.iter().all(u8::is_ascii_digit).then(|| {
            chunk.iter().fold(0u64, |value, digit| value * 10 + u64::from(digit - b'0'))
        });
        prop_assert_eq!(eight_digits(&chunk), by_bytes);
    }
}
