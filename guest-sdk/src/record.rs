//! The input record view handed to [`crate::Transform::process`].

use serde::Deserialize;
use sluice_wire::{Bytes, InputRecord};

/// One input record. Fields borrow from the batch the host sent: reading
/// them copies nothing.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    pub(crate) inner: InputRecord<'a>,
}

impl<'a> Record<'a> {
    /// A view of a record the host sent through a typed interface.
    pub(crate) fn from_typed(
        typed: &'a crate::bindings::sluice::plugin::types::InputRecord,
    ) -> Self {
        Record {
            inner: InputRecord {
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
        }
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
    pub fn value_json<T: Deserialize<'a>>(&self) -> Result<T, String> {
        serde_json::from_slice(self.value()).map_err(|e| format!("invalid JSON value: {e}"))
    }

    /// The JSON value's top-level fields, each kept as its source text: read
    /// a few fields without deserialising the record, and write it back with
    /// one field replaced (see [`crate::json`]).
    pub fn json_object(&self) -> Result<crate::json::JsonObject<'a>, String> {
        crate::json::JsonObject::parse(self.value())
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
