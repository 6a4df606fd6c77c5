//! Taking a record's event time from one of its fields.

use serde_json::Value;

/// `a.b`, `a` or `/a/b` as a JSON pointer.
pub fn json_pointer(field: &str) -> String {
    if field.starts_with('/') {
        field.to_string()
    } else {
        format!("/{}", field.replace('.', "/"))
    }
}

/// The event time (ms since the Unix epoch) in `document` at `pointer`
/// (made by [`json_pointer`] from the configured `field`), or why there is
/// none: the record then goes to the dead-letter output with that reason.
pub fn event_time_from(document: &Value, pointer: &str, field: &str) -> Result<i64, String> {
    match document.pointer(pointer) {
        Some(Value::Number(n)) if n.as_i64().is_some() => n
            .as_i64()
            .ok_or_else(|| format!("timestamp field `{field}` is not an integer")),
        Some(other) => Err(format!(
            "timestamp field `{field}` is not an integer (found {other})"
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
}
