//! A window's key as bytes: the key field's value with its JSON type kept,
//! so that `42` and `"42"` are different keys and a number comes back as
//! a number in the window's result.

use crate::record::Record;
use serde_json::Value;
use sluice_json::FieldValue;
use sluice_json::fields::FieldPath;

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

/// What a window operator keys its records by.
#[derive(Debug, Clone)]
pub(crate) enum WindowKey {
    /// The record key (records without one share the empty key).
    RecordKey,
    /// One field's value, typed ([`typed_key_bytes`]); a record without
    /// the field cannot be keyed.
    Field {
        /// The field.
        path: FieldPath,
        /// As written in the configuration, for messages.
        name: String,
    },
    /// Several fields' values together (SQL's `GROUP BY` keys): the marker
    /// and a JSON array of the values, a missing field as `null` (a group
    /// of its own, as SQL's `NULL` key is).
    Columns(Vec<FieldPath>),
}

impl WindowKey {
    /// The fields the key is read from (read first of a record's fields).
    pub(crate) fn paths(&self) -> &[FieldPath] {
        match self {
            WindowKey::RecordKey => &[],
            WindowKey::Field { path, .. } => std::slice::from_ref(path),
            WindowKey::Columns(paths) => paths,
        }
    }

    /// Appends the key of `record` to `out`, from `values`, the record's
    /// values of [`Self::paths`]; an error if it has none.
    pub(crate) fn write(
        &self,
        values: &[Option<FieldValue>],
        record: &Record,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        match self {
            WindowKey::RecordKey => {
                out.extend_from_slice(record.key.as_deref().unwrap_or_default());
                Ok(())
            }
            WindowKey::Field { name, .. } => match values.first() {
                Some(Some(value)) => {
                    write_typed_key(value, out);
                    Ok(())
                }
                _ => Err(format!("key field `{name}` is missing")),
            },
            WindowKey::Columns(_) => {
                out.push(TYPED_KEY_MARKER);
                out.push(b'[');
                for (index, value) in values.iter().enumerate() {
                    if index > 0 {
                        out.push(b',');
                    }
                    write_json_value(value.as_ref(), out);
                }
                out.push(b']');
                Ok(())
            }
        }
    }

    /// The key of `record` read from its value (`Ok(None)`: it has none).
    pub(crate) fn of_record(&self, record: &Record) -> Result<Option<Vec<u8>>, String> {
        if let (WindowKey::Field { path, .. }, Some(read)) = (self, &record.read_fields)
            && let Some(found) = read.first_value_of(path)
        {
            return Ok(found.as_ref().map(typed_key_bytes));
        }
        let values = match self {
            WindowKey::RecordKey => Vec::new(),
            _ => sluice_json::fields::extract(&record.value, self.paths())?,
        };
        let mut key = Vec::new();
        match self.write(&values, record, &mut key) {
            Ok(()) => Ok(Some(key)),
            Err(_) => Ok(None),
        }
    }

    /// The key's JSON value in a window's result: a field's value as it
    /// was (a number stays a number), the array of a [`Self::Columns`]
    /// key, or the record key as a string.
    pub(crate) fn json(&self, key: &[u8]) -> Value {
        match self {
            WindowKey::RecordKey => Value::String(String::from_utf8_lossy(key).into_owned()),
            WindowKey::Field { .. } | WindowKey::Columns(_) => typed_key_json(key),
        }
    }

    /// The key as a record key: the string's bytes or the value's JSON text.
    pub(crate) fn record_key<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        match self {
            WindowKey::RecordKey => key,
            WindowKey::Field { .. } | WindowKey::Columns(_) => typed_key_record_bytes(key),
        }
    }
}

/// Appends `value` as JSON (`None`: `null`).
fn write_json_value(value: Option<&FieldValue>, out: &mut Vec<u8>) {
    match value {
        None => out.extend_from_slice(b"null"),
        Some(FieldValue::Int(i)) => {
            out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes())
        }
        Some(FieldValue::Str(s)) => {
            // Writing a string to a `Vec` cannot fail.
            let _ = serde_json::to_writer(&mut *out, s);
        }
        Some(other) => out.extend_from_slice(&other.key_bytes()),
    }
}
