//! Reading a few fields of a JSON record and writing it back with one field
//! changed, without building a document.
//!
//! [`Record::value_json`](crate::Record::value_json) deserialises a whole
//! value; most transforms read one or two fields and change one. A
//! [`JsonObject`] is the top-level object split into its fields in one pass
//! (the syntax of the whole value is checked, as serde_json checks it),
//! each field's value kept as its source text: reading a number or a string
//! parses only that field, and [`JsonObject::write_replacing`] copies the
//! unchanged parts of the record as they are.
//!
//! ```
//! # use sluice_sdk::{Emitter, Record};
//! # fn process(record: &Record<'_>, out: &mut Emitter<'_>, buffer: &mut Vec<u8>) -> Result<(), String> {
//! let object = record.json_object()?;
//! let key = object.get("key").and_then(|v| v.as_i64()).ok_or("no integer `key`")?;
//! if key % 10 == 0 {
//!     return Ok(()); // filtered out
//! }
//! let text = object.get("text").and_then(|v| v.as_str()).ok_or("no string `text`")?;
//! buffer.clear();
//! let upper = sluice_sdk::json::quote(&text.to_uppercase());
//! object.write_replacing(buffer, "text", upper.as_bytes());
//! out.emit_value(buffer);
//! # Ok(())
//! # }
//! ```

#[cfg(test)]
mod generated;
mod read;
mod scan;
mod write;

pub(crate) use read::from_slice;
pub(crate) use write::to_writer;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer as _};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// A JSON object's top-level fields, each as its raw source text.
///
/// Fields keep their order and duplicates (as in the source); [`get`]
/// returns the last with a name, as a parsed document
/// (`serde_json::Value`) and the host's projection do.
///
/// [`get`]: JsonObject::get
#[derive(Debug, Clone)]
pub struct JsonObject<'a> {
    source: &'a str,
    fields: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> JsonObject<'a> {
    /// Splits `value` into its top-level fields. The error (not UTF-8, not
    /// JSON, not an object) is ready to be a dead-letter reason.
    pub fn parse(value: &'a [u8]) -> Result<Self, String> {
        let source = std::str::from_utf8(value).map_err(|e| format!("invalid JSON value: {e}"))?;
        let mut deserializer = serde_json::Deserializer::from_str(source);
        let fields = (&mut deserializer)
            .deserialize_map(FieldsVisitor)
            .and_then(|fields| deserializer.end().map(|()| fields))
            .map_err(|e| format!("invalid JSON value: {e}"))?;
        Ok(JsonObject { source, fields })
    }

    /// The value of the (last) field called `name`.
    pub fn get(&self, name: &str) -> Option<JsonField<'a>> {
        self.fields
            .iter()
            .rev()
            .find(|(field, _)| field == name)
            .map(|(_, value)| JsonField { raw: value.get() })
    }

    /// The fields in source order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, JsonField<'a>)> + '_ {
        self.fields
            .iter()
            .map(|(name, value)| (name.as_ref(), JsonField { raw: value.get() }))
    }

    /// The object's source text.
    pub fn source(&self) -> &'a str {
        self.source
    }

    /// Appends the object to `out` with the value of field `name` replaced
    /// by `new_value` (JSON text, e.g. from [`quote`] or a number's digits);
    /// every other byte is copied from the source. Without such a field,
    /// the object is copied with `"name":new_value` added at its end.
    pub fn write_replacing(&self, out: &mut Vec<u8>, name: &str, new_value: &[u8]) {
        self.write_replacing_with(out, name, |out| out.extend_from_slice(new_value));
    }

    /// Like [`Self::write_replacing`], with the new value written by
    /// `write_value` straight into `out` (e.g. with [`quote_into`]): no
    /// buffer of its own for the new value.
    pub fn write_replacing_with(
        &self,
        out: &mut Vec<u8>,
        name: &str,
        write_value: impl FnOnce(&mut Vec<u8>),
    ) {
        match self.get(name) {
            Some(field) => {
                let start = offset_in(self.source, field.raw());
                let end = start + field.raw().len();
                out.extend_from_slice(&self.source.as_bytes()[..start]);
                write_value(out);
                out.extend_from_slice(&self.source.as_bytes()[end..]);
            }
            None => {
                let body = self.source.trim_end();
                // `parse` accepted an object: the text ends with `}`.
                let before_brace = &body[..body.len() - 1];
                out.extend_from_slice(before_brace.as_bytes());
                if !self.fields.is_empty() {
                    out.push(b',');
                }
                quote_into(out, name);
                out.push(b':');
                write_value(out);
                out.push(b'}');
            }
        }
    }
}

/// One field's value, as its JSON source text.
#[derive(Debug, Clone, Copy)]
pub struct JsonField<'a> {
    raw: &'a str,
}

impl<'a> JsonField<'a> {
    /// A field whose JSON text the host found (the projected path): one
    /// well-formed JSON value, checked by the host's parser.
    pub(crate) fn from_host(raw: &'a str) -> Self {
        JsonField { raw }
    }

    /// The value's JSON text, exactly as in the record.
    pub fn raw(&self) -> &'a str {
        self.raw
    }

    /// The value as a signed integer, if it is one that fits.
    pub fn as_i64(&self) -> Option<i64> {
        self.number_text()?.parse().ok()
    }

    /// The value as an unsigned integer, if it is one that fits.
    pub fn as_u64(&self) -> Option<u64> {
        let text = self.raw();
        if text.starts_with(|c: char| c.is_ascii_digit()) {
            text.parse().ok()
        } else {
            None
        }
    }

    /// The value as a floating-point number, if it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        self.number_text()?.parse().ok()
    }

    /// The value's text if it is a number (JSON numbers start with a digit
    /// or `-`; the parse checks the rest).
    fn number_text(&self) -> Option<&'a str> {
        let text = self.raw();
        text.starts_with(|c: char| c == '-' || c.is_ascii_digit())
            .then_some(text)
    }

    /// The value as a string, if it is one: borrowed from the record unless
    /// it contains escapes.
    pub fn as_str(&self) -> Option<Cow<'a, str>> {
        let text = self.raw();
        let inner = text.strip_prefix('"')?.strip_suffix('"')?;
        if !inner.contains('\\') {
            return Some(Cow::Borrowed(inner));
        }
        serde_json::from_str::<String>(text).ok().map(Cow::Owned)
    }

    /// The value as a boolean, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self.raw() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }

    /// Whether the value is `null`.
    pub fn is_null(&self) -> bool {
        self.raw() == "null"
    }

    /// Deserialises the value into `T` (objects, arrays, anything serde
    /// reads); strings may borrow from the record.
    pub fn deserialize<T: Deserialize<'a>>(&self) -> Result<T, String> {
        from_slice(self.raw().as_bytes()).map_err(|e| format!("invalid JSON value: {e}"))
    }
}

/// `text` as a JSON string literal, quotes included.
pub fn quote(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len() + 2);
    write::write_str(&mut out, text);
    // Quotes, the text's own UTF-8 and ASCII escapes: UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// Appends `text` as a JSON string literal, quotes included, to `out`
/// (what [`quote`] returns, without a `String` of its own).
pub fn quote_into(out: &mut Vec<u8>, text: &str) {
    write::write_str(out, text);
}

/// Why the fast reader or writer of this module gave up on a value: the
/// caller then runs serde_json, whose result (or error, with its wording)
/// is the answer. It carries nothing: serde_json says what went wrong.
#[derive(Debug)]
pub(crate) struct Fallback;

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("handed to serde_json")
    }
}

impl std::error::Error for Fallback {}

impl serde::ser::Error for Fallback {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Fallback
    }
}

impl serde::de::Error for Fallback {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Fallback
    }
}

/// Where `part` (a sub-slice of `whole`) starts in `whole`.
fn offset_in(whole: &str, part: &str) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

/// Visits the top-level object, keeping each value as its source text.
struct FieldsVisitor;

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = Vec<(Cow<'de, str>, &'de RawValue)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some(name) = map.next_key_seed(FieldName)? {
            let value: &'de RawValue = map.next_value()?;
            fields.push((name, value));
        }
        Ok(fields)
    }
}

/// A field name, borrowed from the source unless it contains escapes.
struct FieldName;

impl<'de> DeserializeSeed<'de> for FieldName {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for FieldName {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E: de::Error>(self, name: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(name))
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_without_a_document() {
        let object =
            JsonObject::parse(br#"{"id":7,"key":-3,"text":"a\"b","ok":true,"n":null,"x":1.5}"#)
                .unwrap();
        assert_eq!(object.get("id").unwrap().as_u64(), Some(7));
        assert_eq!(object.get("key").unwrap().as_i64(), Some(-3));
        assert_eq!(object.get("key").unwrap().as_u64(), None);
        assert_eq!(object.get("text").unwrap().as_str().unwrap(), "a\"b");
        assert_eq!(object.get("ok").unwrap().as_bool(), Some(true));
        assert!(object.get("n").unwrap().is_null());
        assert_eq!(object.get("x").unwrap().as_f64(), Some(1.5));
        assert_eq!(object.get("x").unwrap().as_i64(), None);
        assert_eq!(object.get("text").unwrap().as_i64(), None);
        assert!(object.get("missing").is_none());
    }

    #[test]
    fn replaces_one_field_and_copies_the_rest() {
        let source = br#"{ "id": 7, "text": "abc" , "ts": 1}"#;
        let object = JsonObject::parse(source).unwrap();
        let mut out = Vec::new();
        object.write_replacing(&mut out, "text", quote("ABC").as_bytes());
        assert_eq!(out, br#"{ "id": 7, "text": "ABC" , "ts": 1}"#);
        out.clear();
        object.write_replacing(&mut out, "new", b"[1]");
        assert_eq!(out, br#"{ "id": 7, "text": "abc" , "ts": 1,"new":[1]}"#);
        out.clear();
        object.write_replacing_with(&mut out, "text", |out| quote_into(out, "x\"y"));
        assert_eq!(out, br#"{ "id": 7, "text": "x\"y" , "ts": 1}"#);
        out.clear();
        object.write_replacing_with(&mut out, "n\u{e9}w", |out| out.push(b'2'));
        assert_eq!(
            out,
            "{ \"id\": 7, \"text\": \"abc\" , \"ts\": 1,\"n\u{e9}w\":2}".as_bytes()
        );
        let empty = JsonObject::parse(b"{}").unwrap();
        out.clear();
        empty.write_replacing(&mut out, "a", b"1");
        assert_eq!(out, br#"{"a":1}"#);
    }

    #[test]
    fn refuses_what_is_not_one_object() {
        for bad in [
            &b"[1]"[..],
            b"{\"a\":}",
            b"{\"a\":1} x",
            b"{\"a\":1",
            b"\xff",
        ] {
            let error = JsonObject::parse(bad).unwrap_err();
            assert!(error.starts_with("invalid JSON value"), "{error}");
        }
    }

    #[test]
    fn escaped_field_names_are_decoded() {
        let object = JsonObject::parse(br#"{"t\u0065xt":"v"}"#).unwrap();
        assert_eq!(object.get("text").unwrap().as_str().unwrap(), "v");
    }
}
