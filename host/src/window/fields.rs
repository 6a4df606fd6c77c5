//! Reading a few fields of a JSON record without building the whole value:
//! the window operator needs a key and a number per record, at hundreds of
//! thousands of records per second.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// A field's value, as far as windows care.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// An integer (within i64).
    Int(i64),
    /// Any other number.
    Float(f64),
    /// A string.
    Str(String),
    /// Anything else (object, array, bool, null, or an integer beyond i64).
    Other(Value),
}

/// The first byte of a window key taken from a field that is not a string:
/// the key is this byte and the value's JSON text. It never starts UTF-8
/// text, so a string key (its UTF-8 bytes) cannot be mistaken for one, and
/// `42` and `"42"` are different keys.
const TYPED_KEY_MARKER: u8 = 0xFF;

impl FieldValue {
    /// The key bytes this value stands for: a string's UTF-8, else its JSON.
    pub fn key_bytes(&self) -> Vec<u8> {
        match self {
            FieldValue::Str(s) => s.as_bytes().to_vec(),
            FieldValue::Int(i) => i.to_string().into_bytes(),
            FieldValue::Float(f) => Value::from(*f).to_string().into_bytes(),
            FieldValue::Other(v) => v.to_string().into_bytes(),
        }
    }

    /// The value as JSON (for messages that show what was found).
    pub fn to_json(&self) -> Value {
        match self {
            FieldValue::Int(i) => Value::from(*i),
            FieldValue::Float(f) => Value::from(*f),
            FieldValue::Str(s) => Value::String(s.clone()),
            FieldValue::Other(v) => v.clone(),
        }
    }

    /// The key bytes of a window keyed by this field value, keeping its
    /// JSON type: a string's UTF-8; any other value as a marker byte and
    /// its JSON text ([`typed_key_json`] gives the value back).
    pub fn typed_key_bytes(&self) -> Vec<u8> {
        match self {
            FieldValue::Str(s) => s.as_bytes().to_vec(),
            other => {
                let mut key = vec![TYPED_KEY_MARKER];
                key.extend_from_slice(&other.key_bytes());
                key
            }
        }
    }
}

/// The JSON value of a key made by [`FieldValue::typed_key_bytes`]: a
/// number stays a number. Other keys are strings (UTF-8, lossy).
pub fn typed_key_json(key: &[u8]) -> Value {
    match key.split_first() {
        Some((&TYPED_KEY_MARKER, json)) => serde_json::from_slice(json)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(json).into_owned())),
        _ => Value::String(String::from_utf8_lossy(key).into_owned()),
    }
}

/// A key made by [`FieldValue::typed_key_bytes`] as a record key: the
/// string's bytes or the value's JSON text, without the marker.
pub fn typed_key_record_bytes(key: &[u8]) -> &[u8] {
    match key.split_first() {
        Some((&TYPED_KEY_MARKER, json)) => json,
        _ => key,
    }
}

fn from_value(value: Value) -> FieldValue {
    match value {
        Value::String(s) => FieldValue::Str(s),
        Value::Number(n) if n.is_i64() => FieldValue::Int(n.as_i64().unwrap_or_default()),
        Value::Number(n) if n.is_f64() => FieldValue::Float(n.as_f64().unwrap_or_default()),
        other => FieldValue::Other(other),
    }
}

/// Where a field is: a top-level name (fast path) or a JSON pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldPath {
    /// A top-level field.
    Top(String),
    /// A nested field, as a JSON pointer.
    Pointer(String),
}

impl FieldPath {
    /// `name`, `a.b` or `/a/b`.
    pub fn parse(field: &str) -> FieldPath {
        let pointer = crate::time::timestamps::json_pointer(field);
        let rest = &pointer[1..];
        if rest.contains('/') || rest.contains('~') {
            FieldPath::Pointer(pointer)
        } else {
            FieldPath::Top(rest.to_string())
        }
    }
}

impl AsRef<FieldPath> for FieldPath {
    fn as_ref(&self) -> &FieldPath {
        self
    }
}

/// Extracts the values of `paths` (owned or borrowed, so that callers keep
/// their paths and build no list per record) from a JSON document; `None`
/// for a field that is missing. Fails if the document is not JSON (or,
/// with top-level paths only, not an object).
pub fn extract<P: AsRef<FieldPath>>(
    document: &[u8],
    paths: &[P],
) -> Result<Vec<Option<FieldValue>>, String> {
    if paths
        .iter()
        .all(|p| matches!(p.as_ref(), FieldPath::Top(_)))
    {
        let names: Vec<&str> = paths
            .iter()
            .map(|p| match p.as_ref() {
                FieldPath::Top(name) => name.as_str(),
                FieldPath::Pointer(pointer) => pointer.as_str(),
            })
            .collect();
        let mut found = vec![None; names.len()];
        let mut deserializer = serde_json::Deserializer::from_slice(document);
        deserializer
            .deserialize_map(FieldsVisitor {
                names: &names,
                found: &mut found,
            })
            .map_err(|e| format!("value is not a JSON object: {e}"))?;
        deserializer
            .end()
            .map_err(|e| format!("value is not a JSON object: {e}"))?;
        return Ok(found);
    }
    let value: Value =
        serde_json::from_slice(document).map_err(|e| format!("value is not JSON: {e}"))?;
    Ok(paths
        .iter()
        .map(|path| {
            let found = match path.as_ref() {
                FieldPath::Top(name) => value.get(name.as_str()),
                FieldPath::Pointer(pointer) => value.pointer(pointer),
            };
            found.cloned().map(from_value)
        })
        .collect())
}

struct FieldsVisitor<'n, 'f> {
    names: &'n [&'n str],
    found: &'f mut Vec<Option<FieldValue>>,
}

impl<'de> Visitor<'de> for FieldsVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if self.names.contains(&key.as_ref()) {
                let value = map.next_value_seed(FieldSeed)?;
                // A field asked for twice is filled twice.
                let mut slots = (0..self.names.len()).filter(|i| self.names[*i] == key);
                if let Some(first) = slots.next() {
                    for other in slots {
                        self.found[other] = Some(value.clone());
                    }
                    self.found[first] = Some(value);
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

struct FieldSeed;

impl<'de> DeserializeSeed<'de> for FieldSeed {
    type Value = FieldValue;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<FieldValue, D::Error> {
        use serde::Deserialize;
        Value::deserialize(deserializer).map(from_value)
    }
}

#[cfg(test)]
mod tests {
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

    proptest::proptest! {
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
}
