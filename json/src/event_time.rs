//! Taking a record's event time from one of its fields, and the range of
//! event times Sluice accepts.
//!
//! Event times must lie in [`MIN_EVENT_TIME`]`..=`[`MAX_EVENT_TIME`] (years
//! 1 to 9999, what ISO-8601 timestamps can write): a record outside it is
//! a dead letter ([`check_event_time`]), wherever its time came from.

use serde_json::Value;

use crate::fields::FieldValue;
pub use crate::fields::json_pointer;

/// The earliest event time accepted: 0001-01-01T00:00:00Z, in ms.
pub const MIN_EVENT_TIME: i64 = -62_135_596_800_000;
/// The latest event time accepted: 9999-12-31T23:59:59.999Z, in ms.
pub const MAX_EVENT_TIME: i64 = 253_402_300_799_999;

/// `time` if it is in the accepted range, else the dead-letter reason.
pub fn check_event_time(time: i64) -> Result<i64, String> {
    if (MIN_EVENT_TIME..=MAX_EVENT_TIME).contains(&time) {
        Ok(time)
    } else {
        Err(format!(
            "event time {time} is outside the supported range {MIN_EVENT_TIME}..={MAX_EVENT_TIME} (years 1 to 9999, in ms since the Unix epoch)"
        ))
    }
}

/// The event time (ms since the Unix epoch) in `document` at `pointer`
/// (made by [`json_pointer`] from the configured `field`), or why there is
/// none: the record then goes to the dead-letter output with that reason.
pub fn event_time_from(document: &Value, pointer: &str, field: &str) -> Result<i64, String> {
    match document.pointer(pointer) {
        Some(Value::Number(n)) if n.as_i64().is_some() => n
            .as_i64()
            .ok_or_else(|| format!("timestamp field `{field}` is not an integer"))
            .and_then(check_event_time),
        Some(other) => Err(format!(
            "timestamp field `{field}` is not an integer (found {other})"
        )),
        None => Err(format!("timestamp field `{field}` is missing")),
    }
}

/// The event time in a field's value as read by the one-pass field scan
/// (`None`: the record has no such field), or why there is none: the same
/// reasons as [`event_time_from`].
pub fn event_time_of(value: Option<&FieldValue>, field: &str) -> Result<i64, String> {
    match value {
        Some(FieldValue::Int(time)) => check_event_time(*time),
        Some(other) => Err(format!(
            "timestamp field `{field}` is not an integer (found {})",
            other.to_json()
        )),
        None => Err(format!("timestamp field `{field}` is missing")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nested_integer_fields() {
        let doc: Value = serde_json::json!({"a": {"t": 1700}, "s": "x"});
        assert_eq!(json_pointer("a.t"), "/a/t");
        assert_eq!(event_time_from(&doc, &json_pointer("a.t"), "a.t"), Ok(1700));
        assert!(
            event_time_from(&doc, "/s", "s")
                .unwrap_err()
                .contains("not an integer")
        );
        assert!(
            event_time_from(&doc, "/b", "b")
                .unwrap_err()
                .contains("missing")
        );
    }

    #[test]
    fn event_times_outside_years_1_to_9999_are_refused() {
        for (time, ok) in [
            (super::MIN_EVENT_TIME, true),
            (super::MAX_EVENT_TIME, true),
            (super::MIN_EVENT_TIME - 1, false),
            (super::MAX_EVENT_TIME + 1, false),
            (i64::MAX, false),
            (i64::MIN, false),
        ] {
            let doc = serde_json::json!({ "t": time });
            let result = event_time_from(&doc, "/t", "t");
            assert_eq!(result.is_ok(), ok, "{time}: {result:?}");
            if !ok {
                assert!(
                    result.unwrap_err().contains("outside the supported range"),
                    "{time}"
                );
            }
        }
    }
}
