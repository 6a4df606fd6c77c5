//! The input record view handed to [`crate::Transform::process`].

use crate::json::{JsonField, JsonObject};
use serde::Deserialize;
use sluice_wire::projected::{ProjectedField, ProjectedFields, same_name};
use sluice_wire::{Bytes, InputRecord};

/// One input record. Fields borrow from the batch the host sent: reading
/// them copies nothing.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    pub(crate) inner: InputRecord<'a>,
    /// The fields the host found in the value (the projected path) and
    /// their names, in the order [`crate::Transform::json_fields`] gave.
    pub(crate) projected: Option<(&'a [String], ProjectedFields<'a>)>,
}

impl<'a> Record<'a> {
    /// A record the host sent packed, with the fields it found, if any.
    pub(crate) fn new(
        inner: InputRecord<'a>,
        projected: Option<(&'a [String], ProjectedFields<'a>)>,
    ) -> Self {
        Record { inner, projected }
    }

    /// Whether the host found this record's fields (the projected path)
    /// in a value that is a JSON object: a replacing emit is then spliced
    /// by the host.
    #[cfg(not(feature = "aggregate"))]
    pub(crate) fn is_projected_object(&self) -> bool {
        self.projected.as_ref().is_some_and(|(_, fields)| {
            matches!(
                fields.get(0),
                Some(Ok(ProjectedField::At(_) | ProjectedField::Missing))
            )
        })
    }

    /// The top-level field `name` of the JSON object value: `Ok(None)` if
    /// the object has no such field, an error (ready to be a dead-letter
    /// reason) if the value is not a JSON object. A field named in
    /// [`crate::Transform::json_fields`] was found by the host (nothing is
    /// parsed here); for any other, or off the projected path, the value
    /// is parsed on each call (to read several such fields, split it once
    /// with [`Record::json_object`]). Of duplicate names, the last.
    pub fn field(&self, name: &str) -> Result<Option<JsonField<'a>>, String> {
        if let Some((names, fields)) = &self.projected
            && let Some(index) = names.iter().position(|known| same_name(known, name))
        {
            match fields.get(index) {
                Some(Ok(ProjectedField::At(text))) => {
                    return Ok(Some(JsonField::from_host(host_checked_text(text)?)));
                }
                Some(Ok(ProjectedField::Missing)) => return Ok(None),
                // Not an object: the parse below says why.
                Some(Ok(ProjectedField::NotAnObject)) | Some(Err(_)) | None => {}
            }
        }
        Ok(self.json_object()?.get(name))
    }

    /// A view of a record the host sent through a typed interface.
    pub(crate) fn from_typed(
        typed: &'a crate::bindings::sluice::plugin::types::InputRecord,
    ) -> Self {
        Record::new(
            InputRecord {
                key: typed.key.as_deref().map(Bytes::new),
                value: Bytes::new(&typed.value),
                headers: typed
                    .headers
                    .iter()
                    .map(|h| sluice_wire::Header {
                        key: &h.key,
                        value: Bytes::new(&h.value),
                    })
                    .collect(),
                event_time: typed.event_time,
                topic: Bytes::new(typed.source.topic.as_bytes()),
                partition: typed.source.partition,
                offset: typed.source.offset,
            },
            None,
        )
    }

    /// The record key, if any.
    pub fn key(&self) -> Option<&'a [u8]> {
        self.inner.key.map(|k| &**k)
    }

    /// The record value.
    pub fn value(&self) -> &'a [u8] {
        let value: &'a Bytes = self.inner.value;
        value
    }

    /// The value as UTF-8 text.
    pub fn value_str(&self) -> Result<&'a str, String> {
        std::str::from_utf8(self.value()).map_err(|e| format!("value is not UTF-8: {e}"))
    }

    /// Deserializes the JSON value into `T` (strings may borrow from the
    /// record). The error says what is wrong, ready to be a dead-letter reason.
    /// The value or error is serde_json's (read by [`crate::json`]'s
    /// reader, which takes a shorter path through common values).
    pub fn value_json<T: Deserialize<'a>>(&self) -> Result<T, String> {
        crate::json::from_slice(self.value()).map_err(|e| format!("invalid JSON value: {e}"))
    }

    /// The JSON value's top-level fields, each kept as its source text: read
    /// a few fields without deserialising the record, and write it back with
    /// one field replaced (see [`crate::json`]).
    pub fn json_object(&self) -> Result<JsonObject<'a>, String> {
        JsonObject::parse(self.value())
    }

    /// Parses the JSON value into a [`serde_json::Value`].
    pub fn value_json_value(&self) -> Result<serde_json::Value, String> {
        self.value_json()
    }

    /// Decodes the value as one Avro datum (no container, no header) written
    /// with `schema`.
    pub fn value_avro(
        &self,
        schema: &apache_avro::Schema,
    ) -> Result<apache_avro::types::Value, String> {
        let mut reader = self.value();
        apache_avro::from_avro_datum(schema, &mut reader, None)
            .map_err(|e| format!("invalid Avro value: {e}"))
    }

    /// Headers in their original order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + '_ {
        self.inner.headers.iter().map(|h| (h.key, &**h.value))
    }

    /// The value of the first header named `name`.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.inner
            .headers
            .iter()
            .find(|h| h.key == name)
            .map(|h| &**h.value)
    }

    /// Event time in milliseconds since the Unix epoch, if known.
    pub fn event_time(&self) -> Option<i64> {
        self.inner.event_time
    }

    /// Topic, file or generator the record was read from. (The host sends
    /// UTF-8 only; the check happens here, on use, not for every record.)
    pub fn topic(&self) -> &'a str {
        let topic: &'a Bytes = self.inner.topic;
        std::str::from_utf8(topic).unwrap_or_default()
    }

    /// Source partition.
    pub fn partition(&self) -> i32 {
        self.inner.partition
    }

    /// Offset in the source partition.
    pub fn offset(&self) -> i64 {
        self.inner.offset
    }
}

/// A projected field's text. The host sends a field only from a value it
/// checked to be UTF-8 as a whole (else the slot says "not an object"), and
/// a JSON value's text starts and ends with ASCII bytes, so the range is
/// UTF-8 too when both its ends are ASCII: checking those two bytes stands
/// for checking every byte again here (~3 % of a filter plugin's record,
/// ADR 0015). A range that does not end on ASCII bytes is checked whole.
fn host_checked_text(text: &[u8]) -> Result<&str, String> {
    let ascii_ends = match (text.first(), text.last()) {
        (Some(first), Some(last)) => first.is_ascii() && last.is_ascii(),
        _ => true,
    };
    if ascii_ends {
        // SAFETY: the bytes are a sub-range of a value the host checked to
        // be UTF-8, starting and ending at ASCII bytes (never inside a
        // multi-byte sequence), so they are UTF-8 themselves.
        return Ok(unsafe { std::str::from_utf8_unchecked(text) });
    }
    std::str::from_utf8(text).map_err(|e| format!("invalid JSON value: {e}"))
}
