//! Generated JSON values for the tests that hold this module's reader and
//! writer to serde_json.

use proptest::prelude::*;
use serde_json::Value;

/// Strings made mostly of the characters that matter when reading or
/// escaping: quotes, backslashes, control characters, bytes beyond ASCII.
pub(crate) fn tricky_string() -> impl Strategy<Value = String> {
    let character = prop_oneof![
        4 => prop::sample::select(vec!['a', 'Z', ' ', '/', '1', '\u{7f}']),
        2 => prop::sample::select(vec!['"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\0', '\u{1f}']),
        1 => prop::sample::select(vec!['é', '€', '😀', '\u{2028}']),
        1 => any::<char>(),
    ];
    prop::collection::vec(character, 0..24).prop_map(|chars| chars.into_iter().collect())
}

/// Any JSON value, nested up to four deep.
pub(crate) fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        tricky_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((tricky_string(), inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}
