//! A window's key as bytes: the key field's value with its JSON type kept,
//! so that `42` and `"42"` are different keys and a number comes back as
//! a number in the window's result.

use serde_json::Value;
use sluice_json::FieldValue;

/// The first byte of a window key taken from a field that is not a string:
/// the key is this byte and the value's JSON text. It never starts UTF-8
/// text, so a string key (its UTF-8 bytes) cannot be mistaken for one, and
/// `42` and `"42"` are different keys.
const TYPED_KEY_MARKER: u8 = 0xFF;

/// The key bytes of a window keyed by `value`, keeping its JSON type: a
/// string's UTF-8; any other value as a marker byte and its JSON text
/// ([`typed_key_json`] gives the value back).
pub(crate) fn typed_key_bytes(value: &FieldValue) -> Vec<u8> {
    let mut key = Vec::new();
    write_typed_key(value, &mut key);
    key
}

/// Appends [`typed_key_bytes`] of `value` to `out` (keys of a batch share
/// one buffer).
pub(crate) fn write_typed_key(value: &FieldValue, out: &mut Vec<u8>) {
    match value {
        FieldValue::Str(s) => out.extend_from_slice(s.as_bytes()),
        FieldValue::Int(i) => {
            out.push(TYPED_KEY_MARKER);
            // itoa: a few times cheaper than `write!`'s formatting
            // machinery, once per record of an integer-keyed window.
            out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes());
        }
        other => {
            out.push(TYPED_KEY_MARKER);
            out.extend_from_slice(&other.key_bytes());
        }
    }
}

/// The JSON value of a key made by [`typed_key_bytes`]: a
/// number stays a number. Other keys are strings (UTF-8, lossy).
pub(crate) fn typed_key_json(key: &[u8]) -> Value {
    match key.split_first() {
        Some((&TYPED_KEY_MARKER, json)) => serde_json::from_slice(json)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(json).into_owned())),
        _ => Value::String(String::from_utf8_lossy(key).into_owned()),
    }
}

/// A key made by [`typed_key_bytes`] as a record key: the
/// string's bytes or the value's JSON text, without the marker.
pub(crate) fn typed_key_record_bytes(key: &[u8]) -> &[u8] {
    match key.split_first() {
        Some((&TYPED_KEY_MARKER, json)) => json,
        _ => key,
    }
}
