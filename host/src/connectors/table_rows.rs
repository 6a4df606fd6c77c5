//! What a table sink's row is made of: the record value's fields, or a
//! dead-letter table's row (the record as it came in, with why and where
//! it was dead-lettered). One shape for every table sink (Iceberg,
//! PostgreSQL), so that a dead-letter table reads the same wherever it is.

use crate::record::Record;
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// `rows` of a table sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TableRows {
    /// The record value's top-level JSON fields, by column name.
    #[default]
    Value,
    /// A dead-letter table's row ([`dead_letter_row`]): `payload` (the
    /// value's exact bytes: text when UTF-8, else base64, said by
    /// `payload_encoding`), `key`, `reason`, `operator`, `plugin`,
    /// `source_topic`, `source_partition`, `source_offset`, `event_time`,
    /// `dead_lettered_at`, `late_arrival`, and `dead_letter_id` (a digest
    /// naming the dead letter, the same when a replay dead-letters it
    /// again: an upsert key).
    DeadLetter,
}

/// The type of a dead-letter column, for each table format to spell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterType {
    /// Text.
    Text,
    /// A 32-bit integer.
    Int,
    /// A 64-bit integer.
    Long,
    /// A time with zone (the row holds epoch milliseconds).
    Timestamp,
    /// True or false.
    Boolean,
}

/// A column of a dead-letter table.
#[derive(Debug, Clone, Copy)]
pub struct DeadLetterColumn {
    /// Its name (the field of [`dead_letter_row`]).
    pub name: &'static str,
    /// Its type.
    pub column_type: DeadLetterType,
    /// Whether every dead letter has a value.
    pub required: bool,
}

const fn column(
    name: &'static str,
    column_type: DeadLetterType,
    required: bool,
) -> DeadLetterColumn {
    DeadLetterColumn {
        name,
        column_type,
        required,
    }
}

/// The columns of a dead-letter table, in order (`dead_letter_id` is
/// last: tables made before it existed lack it, and only sinks that
/// upsert need it).
pub const DEAD_LETTER_COLUMNS: [DeadLetterColumn; 13] = [
    column("payload", DeadLetterType::Text, true),
    column("payload_encoding", DeadLetterType::Text, true),
    column("key", DeadLetterType::Text, false),
    column("reason", DeadLetterType::Text, true),
    column("operator", DeadLetterType::Text, false),
    column("plugin", DeadLetterType::Text, false),
    column("source_topic", DeadLetterType::Text, false),
    column("source_partition", DeadLetterType::Int, false),
    column("source_offset", DeadLetterType::Long, false),
    column("event_time", DeadLetterType::Timestamp, false),
    column("dead_lettered_at", DeadLetterType::Timestamp, false),
    column("late_arrival", DeadLetterType::Boolean, true),
    column("dead_letter_id", DeadLetterType::Text, true),
];

/// The column naming a dead letter (the upsert key of a dead-letter
/// table in a database).
pub const DEAD_LETTER_ID: &str = "dead_letter_id";

/// The row of a dead-letter table for `record` (see
/// [`TableRows::DeadLetter`]).
pub fn dead_letter_row(record: &Record) -> Map<String, Value> {
    use crate::record::dead_letter_headers as h;
    use base64::Engine as _;
    let header = |name: &str| -> Value {
        record
            .header(name)
            .map(|v| Value::String(String::from_utf8_lossy(v).into_owned()))
            .unwrap_or(Value::Null)
    };
    let number = |name: &str| -> Value {
        record
            .header(name)
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<i64>().ok())
            .map_or(Value::Null, Value::from)
    };
    let (payload, encoding) = match std::str::from_utf8(&record.value) {
        Ok(text) => (text.to_string(), "utf8"),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(&record.value),
            "base64",
        ),
    };
    let late = record
        .header(crate::dataflow::LATE_ARRIVAL_HEADER)
        .is_some_and(|v| v.as_ref() == b"true");
    let reason = match header(h::REASON) {
        Value::Null if late => Value::from("late"),
        Value::Null => Value::from("(no reason given)"),
        other => other,
    };
    let mut row = Map::new();
    row.insert(
        DEAD_LETTER_ID.into(),
        dead_letter_id(record, &reason).into(),
    );
    row.insert("payload".into(), payload.into());
    row.insert("payload_encoding".into(), encoding.into());
    row.insert(
        "key".into(),
        record.key.as_deref().map_or(Value::Null, |k| {
            String::from_utf8_lossy(k).into_owned().into()
        }),
    );
    row.insert("reason".into(), reason);
    row.insert("operator".into(), header(h::OPERATOR));
    row.insert("plugin".into(), header(h::PLUGIN));
    row.insert("source_topic".into(), Value::from(&*record.source.topic));
    row.insert(
        "source_partition".into(),
        Value::from(record.source.partition),
    );
    row.insert("source_offset".into(), Value::from(record.source.offset));
    row.insert(
        "event_time".into(),
        record.event_time.map_or(Value::Null, Value::from),
    );
    row.insert("dead_lettered_at".into(), number(h::TIME));
    row.insert("late_arrival".into(), Value::Bool(late));
    row
}

/// A digest of what makes a dead letter this one: where it was read, the
/// operator, the reason, key and value (not when it was dead-lettered, so
/// a replay names it the same).
fn dead_letter_id(record: &Record, reason: &Value) -> String {
    use crate::record::dead_letter_headers as h;
    let mut digest = Sha256::new();
    let mut part = |bytes: &[u8]| {
        digest.update((bytes.len() as u64).to_le_bytes());
        digest.update(bytes);
    };
    part(record.source.topic.as_bytes());
    part(&record.source.partition.to_le_bytes());
    part(&record.source.offset.to_le_bytes());
    part(record.header(h::OPERATOR).map_or(&[][..], |v| v.as_ref()));
    part(reason.as_str().unwrap_or_default().as_bytes());
    part(record.key.as_deref().unwrap_or_default());
    part(&record.value);
    let digest = digest.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{SourcePosition, Topic, into_dead_letter};

    fn record(value: &'static [u8], offset: i64) -> Record {
        let source = SourcePosition {
            topic: Topic::new("orders"),
            partition: 3,
            offset,
        };
        Record::from_value(value, source)
    }

    #[test]
    fn a_dead_letter_keeps_its_id_when_dead_lettered_again_and_others_differ() {
        let first = dead_letter_row(&into_dead_letter(record(b"{}", 7), "bad", "validate", None));
        let again = dead_letter_row(&into_dead_letter(record(b"{}", 7), "bad", "validate", None));
        let other_offset =
            dead_letter_row(&into_dead_letter(record(b"{}", 8), "bad", "validate", None));
        let other_reason = dead_letter_row(&into_dead_letter(
            record(b"{}", 7),
            "worse",
            "validate",
            None,
        ));
        assert_eq!(first[DEAD_LETTER_ID], again[DEAD_LETTER_ID]);
        assert_ne!(first[DEAD_LETTER_ID], other_offset[DEAD_LETTER_ID]);
        assert_ne!(first[DEAD_LETTER_ID], other_reason[DEAD_LETTER_ID]);
        assert_eq!(first["reason"], "bad");
        assert_eq!(first["operator"], "validate");
    }

    #[test]
    fn every_dead_letter_column_is_a_field_of_the_row() {
        let row = dead_letter_row(&into_dead_letter(
            record(&[0xff, 0x00], 1),
            "bad",
            "op",
            None,
        ));
        for column in DEAD_LETTER_COLUMNS {
            assert!(row.contains_key(column.name), "{}", column.name);
        }
        assert_eq!(row["payload_encoding"], "base64");
    }
}
