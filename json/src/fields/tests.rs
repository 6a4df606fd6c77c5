//! Field extraction against serde_json's own reading of the same documents.

use super::*;

#[test]
fn extracts_top_level_and_nested_fields() {
    let doc = br#"{"a":1,"b":"x","c":{"d":2.5},"e":[1]}"#;
    let a = FieldPath::parse("a");
    let b = FieldPath::parse("b");
    let d = FieldPath::parse("c.d");
    let z = FieldPath::parse("z");
    assert_eq!(
        extract(doc, &[&a, &b, &z]).unwrap(),
        vec![
            Some(FieldValue::Int(1)),
            Some(FieldValue::Str("x".into())),
            None
        ]
    );
    assert_eq!(
        extract(doc, &[&d]).unwrap(),
        vec![Some(FieldValue::Float(2.5))]
    );
    assert!(extract(b"[1,2]", &[&a]).is_err());
    assert!(extract(b"{\"a\":1} x", &[&a]).is_err());
}

#[test]
fn keys_match_after_unescaping_and_every_slot_of_a_field_is_filled() {
    // `"t\u0073"` is the key `ts`; `b` is asked for twice; `s` only
    // for its span, `ts` for both its value and its span.
    let doc = br#"{"a":[1,{"x":2}],"t\u0073":7,"b":"z","s":"\u00e9","ts2":1}"#;
    let a = FieldPath::parse("a");
    let ts = FieldPath::parse("ts");
    let b = FieldPath::parse("b");
    let mut found = vec![Some(FieldValue::Int(-1))];
    let names = ["s".to_string(), "ts".to_string(), "none".to_string()];
    let mut spans = [None; 3];
    let entries = extract_into_with_spans(
        doc,
        &[&a, &b, &ts, &b],
        &mut found,
        Spans {
            names: &names,
            found: &mut spans,
        },
    )
    .unwrap();
    assert_eq!(entries, 5);
    assert_eq!(
        found,
        vec![
            Some(FieldValue::Int(-1)),
            Some(FieldValue::Other(serde_json::json!([1, {"x": 2}]))),
            Some(FieldValue::Str("z".into())),
            Some(FieldValue::Int(7)),
            Some(FieldValue::Str("z".into())),
        ]
    );
    let text = |span: Option<(usize, usize)>| span.map(|(start, end)| &doc[start..end]);
    assert_eq!(text(spans[0]), Some(&br#""\u00e9""#[..]));
    assert_eq!(text(spans[1]), Some(&b"7"[..]));
    assert_eq!(spans[2], None);
    // A refused document leaves the list as it was.
    assert!(extract_into(b"{\"a\":1,}", &[&a], &mut found).is_err());
    assert_eq!(found.len(), 5);
}

#[test]
fn a_value_must_be_utf8_everywhere_even_in_skipped_strings() {
    let a = FieldPath::parse("a");
    let bad = b"{\"a\":1,\"skipped\":\"\xff\"}";
    let reason = extract(bad, &[&a]).unwrap_err();
    assert!(reason.contains("not UTF-8"), "{reason}");
    assert!(check_json(bad).unwrap_err().contains("not UTF-8"));
    assert!(check_json(b"[1,\"\xc3\"]").is_err());
    // Non-ASCII text, written out or escaped, is fine.
    let good = "{\"a\":2,\"t\":\"\u{e9}t\u{e9}\",\"e\":\"\\u00e9\"}";
    assert_eq!(
        extract(good.as_bytes(), &[&a]).unwrap(),
        vec![Some(FieldValue::Int(2))]
    );
    assert!(check_json(good.as_bytes()).is_ok());
    assert!(
        check_json(b"{\"a\":1} x")
            .unwrap_err()
            .starts_with("invalid JSON")
    );
}

/// The serde_json pass of [`extract_into_with_spans`] alone: what the
/// simdjson pass must agree with.
fn serde_scan(document: &[u8], paths: &[&FieldPath], span_names: &[String]) -> Option<ScanResult> {
    let text = utf8_text(document).ok()?;
    let mut found = vec![None; paths.len()];
    let mut spans = vec![None; span_names.len()];
    let spans_asked = Spans {
        names: span_names,
        found: &mut spans,
    };
    let entries = scan_top_level(text, paths, &mut found, Some(spans_asked)).ok()?;
    Some((entries, found, spans))
}

/// Fields of a document, values found and spans found.
type ScanResult = (usize, Vec<Option<FieldValue>>, Vec<Option<(usize, usize)>>);

/// The simdjson pass alone (`None`: handed back to serde_json).
fn simd_scan(document: &[u8], paths: &[&FieldPath], span_names: &[String]) -> Option<ScanResult> {
    let mut found = vec![None; paths.len()];
    let mut spans = vec![None; span_names.len()];
    let mut spans_asked = Spans {
        names: span_names,
        found: &mut spans,
    };
    let names = scan_names(paths, span_names)?;
    let entries = scan_top_level_simd(document.into(), &names, &mut found, Some(&mut spans_asked))?;
    Some((entries, found, spans))
}

/// Checks that the simdjson pass, where it takes `document`, finds
/// what serde_json's finds; returns whether it took it.
fn passes_agree(document: &[u8]) -> bool {
    let [a, ts, text] = ["a", "ts", "text"].map(FieldPath::parse);
    let paths = [&a, &ts, &text, &a];
    let span_names = ["text".to_string(), "a".to_string(), "b".to_string()];
    if scan::check(document.into()) {
        assert!(serde_json::from_slice::<IgnoredAny>(document).is_ok());
    }
    let Some(simd) = simd_scan(document, &paths, &span_names) else {
        return false;
    };
    assert_eq!(
        Some(&simd),
        serde_scan(document, &paths, &span_names).as_ref(),
        "{:?}",
        String::from_utf8_lossy(document)
    );
    true
}

#[test]
fn the_simdjson_pass_finds_what_serde_json_finds() {
    let taken = [
        r#"{"id":1,"key":705,"text":"gaq xbf","ts":1767225600000,"user":"user-0000"}"#,
        r#" { "a" : [1, {"x": [true, null]}] , "ts" : -0 , "text" : "\"\u00e9\n" } "#,
        r#"{"a":1.5e3,"ts":18446744073709551615,"text":"\ud83d\ude00","b":{}}"#,
        r#"{"a":-9223372036854775808,"a":2,"t\u0073":3,"text":null,"b":false}"#,
        "{\"text\":\"\u{e9}t\u{e9}\",\"ts\":0.1}",
        "{}",
    ];
    for document in taken {
        assert!(
            passes_agree(document.as_bytes()),
            "{document} was handed back"
        );
    }
    let handed_back: [&[u8]; 6] = [
        br#"{"a":1,}"#,
        br#"{"a":"\x"}"#,
        br#"{"a":1e400}"#,
        b"{\"a\":\"\xff\"}",
        br#"[1]"#,
        br#"{"a":1} {"#,
    ];
    for document in handed_back {
        assert!(!passes_agree(document));
        assert!(serde_scan(document, &[&FieldPath::parse("a")], &[]).is_none());
    }
}

#[test]
fn plain_strings_are_told_apart_from_everything_else() {
    for plain in [r#""""#, r#""abc def""#, "\"\u{e9}t\u{e9} \u{1f600}\""] {
        assert!(is_plain_json_string(plain.as_bytes()), "{plain}");
        assert!(check_json(plain.as_bytes()).is_ok());
    }
    let not_plain: [&[u8]; 9] = [
        br#""a\nb""#,
        br#""a"b""#,
        br#"""#,
        br#" "a""#,
        br#""a" "#,
        b"\"a\tb\"",
        b"\"\xc3\"",
        b"\"\xff\"",
        b"42",
    ];
    for document in not_plain {
        assert!(!is_plain_json_string(document), "{document:?}");
    }
    // Escapes and spaces around the string are the full check's to judge.
    assert!(check_json(br#""a\nb""#).is_ok());
    assert!(check_json(br#" "a" "#).is_ok());
    assert!(check_json(b"\"\xff\"").is_err());
    assert!(check_json(b"\"a\tb\"").is_err());
}

proptest::proptest! {
    /// A document taken as a plain string is one JSON string in
    /// UTF-8, as serde_json and std read it; and any text without
    /// quotes, backslashes or control characters, quoted, is taken.
    #[test]
    fn plain_strings_are_json_strings(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
        text in "[^\"\\\\\\x00-\\x1f]{0,60}",
    ) {
        let mut quoted = vec![b'"'];
        quoted.extend_from_slice(&bytes);
        quoted.push(b'"');
        for document in [&bytes[..], &quoted[..]] {
            if is_plain_json_string(document) {
                proptest::prop_assert!(serde_json::from_slice::<String>(document).is_ok());
                proptest::prop_assert!(std::str::from_utf8(document).is_ok());
            }
        }
        let plain = format!("\"{text}\"");
        proptest::prop_assert!(is_plain_json_string(plain.as_bytes()));
    }

    /// Wherever the simdjson pass takes a document, serde_json's pass
    /// finds the same values, spans and number of fields: which one ran
    /// never changes a record.
    #[test]
    fn the_simdjson_pass_agrees_with_serde_json_on_json_shaped_text(
        document in r#" ?\{ ?("(a|ts|text|b|t\\u0073|x)" ?: ?(-?(0|[1-9][0-9]{0,20})(\.[0-9]{1,5})?([eE][+-]?[0-9]{1,3})?|"([a-z \u{e9}\u{1f600}]|\\[nt"\\/]|\\u00[0-9a-f]{2}|\\ud83d\\ude00)*"|\{("b":(true|false|null|\[1,"x"\]),?){0,2}\}|\[(null|1|"y"|\[\]),?(2|\{\})?\]|null|true|false) ?,? ?){0,5}\} ?"#,
        cut in proptest::prelude::any::<proptest::sample::Index>(),
        flip in proptest::prelude::any::<u8>(),
    ) {
        let bytes = document.as_bytes();
        passes_agree(bytes);
        // And on the same text broken: truncated, or one byte changed.
        let at = cut.index(bytes.len().max(1));
        passes_agree(&bytes[..at.min(bytes.len())]);
        let mut changed = bytes.to_vec();
        if let Some(byte) = changed.get_mut(at) {
            *byte = flip;
        }
        passes_agree(&changed);
    }

    /// Untrusted record bytes never make field extraction panic, and
    /// whatever it accepts is JSON.
    #[test]
    fn arbitrary_documents_never_panic(document in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
        let a = FieldPath::parse("a");
        let nested = FieldPath::parse("a.b");
        for paths in [vec![&a], vec![&nested], vec![&a, &nested]] {
            if extract(&document, &paths).is_ok() {
                proptest::prop_assert!(serde_json::from_slice::<Value>(&document).is_ok());
            }
        }
    }

    /// The same for JSON-shaped text, which reaches deeper.
    #[test]
    fn json_shaped_documents_never_panic(document in r#"\{("[ab]":(-?[0-9]{1,25}(\.[0-9]{0,5})?|"[a-z]*"|\{"b":[0-9e+.-]{1,8}\}|null|true|\[\]),?){0,4}\}"#) {
        let a = FieldPath::parse("a");
        let nested = FieldPath::parse("a.b");
        let _ = extract(document.as_bytes(), &[&a]);
        let _ = extract(document.as_bytes(), &[&nested]);
    }
}
