//! A Kafka message as a [`Record`]: key, value decoded by the source's
//! format, headers, event time (the record timestamp or a field of the
//! value), and why it must be dead-lettered when it cannot be read.

use super::ValueFormat;
use crate::connectors::schema_registry::DecodeError;
use crate::record::{Header, Record, SourcePosition, Topic};
use crate::time::check_event_time;
use bytes::Bytes;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use sluice_json::event_time::{event_time_from, event_time_of, json_pointer};
use sluice_json::fields::{FieldPath, extract_into};
use std::collections::HashMap;

/// The interned name of `topic`, looked up in this source's own map first
/// (a message's topic is a `&str` from librdkafka: the map saves taking
/// the process-wide interner's lock per message).
pub(super) fn intern(topics: &mut HashMap<String, Topic>, topic: &str) -> Topic {
    if let Some(known) = topics.get(topic) {
        return *known;
    }
    let interned = Topic::new(topic);
    topics.insert(topic.to_string(), interned);
    interned
}

/// Turns a Kafka message into a record, with the reason it must be
/// dead-lettered if its value is invalid (the record then keeps the raw
/// value); `Err` when the value cannot be decoded now (its schema registry
/// is unreachable).
pub(super) fn to_record(
    topics: &mut HashMap<String, Topic>,
    format: &mut ValueFormat,
    timestamp_field: Option<(&str, &FieldPath)>,
    message: &BorrowedMessage<'_>,
) -> Result<(Record, Option<String>), String> {
    Ok({
        let source = SourcePosition {
            topic: intern(topics, message.topic()),
            partition: message.partition(),
            offset: message.offset(),
        };
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|h| {
                        Header::new(h.key, Bytes::copy_from_slice(h.value.unwrap_or_default()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let raw = Bytes::copy_from_slice(message.payload().unwrap_or_default());
        let mut record = Record {
            read_fields: None,
            key: message.key().map(Bytes::copy_from_slice),
            value: raw.clone(),
            headers,
            event_time: message.timestamp().to_millis(),
            source,
        };
        if message.payload().is_none() && !matches!(format, ValueFormat::Raw) {
            return Ok((record, Some("record has no value (tombstone)".to_string())));
        }
        match format.decode(&raw) {
            Ok(value) => {
                record.value = value;
                if let Some((field, path)) = timestamp_field {
                    let time = event_time_in(&record.value, field, path);
                    match time {
                        Ok(time) => record.event_time = Some(time),
                        Err(reason) => {
                            record.value = raw;
                            return Ok((record, Some(reason)));
                        }
                    }
                } else if let Some(Err(reason)) = record.event_time.map(check_event_time) {
                    // A producer may set any record timestamp.
                    record.value = raw;
                    return Ok((record, Some(reason)));
                }
                (record, None)
            }
            Err(DecodeError::Invalid(reason)) => (record, Some(reason)),
            Err(DecodeError::Unavailable(why)) => return Err(why),
        }
    })
}

/// The event time in a decoded value's field `field` (at `path`), or why
/// there is none. The field scan reads it in one pass (simdjson for a
/// top-level field); a value that pass refuses is parsed whole, for the
/// reason, as before the scan.
fn event_time_in(value: &[u8], field: &str, path: &FieldPath) -> Result<i64, String> {
    let mut found = Vec::with_capacity(1);
    match extract_into(value, std::slice::from_ref(path), &mut found) {
        Ok(()) => event_time_of(found.first().and_then(Option::as_ref), field),
        Err(_) => serde_json::from_slice::<serde_json::Value>(value)
            .map_err(|e| format!("timestamp field `{field}`: value is not JSON: {e}"))
            .and_then(|document| event_time_from(&document, &json_pointer(field), field)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The event time as read before the field scan: the value parsed whole.
    fn parsed_whole(value: &[u8], field: &str) -> Result<i64, String> {
        serde_json::from_slice::<serde_json::Value>(value)
            .map_err(|e| format!("timestamp field `{field}`: value is not JSON: {e}"))
            .and_then(|document| event_time_from(&document, &json_pointer(field), field))
    }

    #[test]
    fn the_event_time_is_read_in_one_pass_with_the_reasons_of_a_whole_parse() {
        let pad = "x".repeat(80);
        let values = [
            format!(r#"{{"id":1,"text":"{pad}","ts":1767225600000}}"#),
            format!(r#"{{"id":1,"text":"{pad}","ts":"soon"}}"#),
            format!(r#"{{"id":1,"text":"{pad}","ts":1.5}}"#),
            format!(r#"{{"id":1,"text":"{pad}","ts":-99999999999999999}}"#),
            format!(r#"{{"id":1,"text":"{pad}"}}"#),
            format!(r#"{{"id":1,"text":"{pad}","meta":{{"ts":7}}}}"#),
            r#"{"ts":5}"#.to_string(),
            r#"[1,2]"#.to_string(),
            r#"{"ts":5"#.to_string(),
        ];
        for field in ["ts", "meta.ts"] {
            let path = FieldPath::parse(field);
            for value in &values {
                assert_eq!(
                    event_time_in(value.as_bytes(), field, &path),
                    parsed_whole(value.as_bytes(), field),
                    "{field} in {value}"
                );
            }
        }
        let path = FieldPath::parse("ts");
        assert_eq!(
            event_time_in(values[0].as_bytes(), "ts", &path),
            Ok(1767225600000)
        );
        assert_eq!(
            event_time_in(
                values[5].as_bytes(),
                "meta.ts",
                &FieldPath::parse("meta.ts")
            ),
            Ok(7)
        );
    }
}
