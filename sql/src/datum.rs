//! SQL values and types over JSON records.
//!
//! A record's columns are its JSON fields, whose types are not declared:
//! a column's type is known per record ([`Datum`]), an expression's type
//! where its parts fix it ([`SqlType`]). What a query gets wrong about a
//! type that is known when it is bound (`UPPER(1)`, `'a' + 1`) is refused
//! at start-up; what a record gets wrong (`UPPER(amount)` where `amount` is
//! a number) dead-letters that record with the reason.
//!
//! JSON maps onto SQL as: `null` and a missing field → `NULL`; a boolean
//! → `BOOLEAN`; an integer within 64 bits → `BIGINT`; any other number →
//! `DOUBLE`; a string → `STRING`; an object or array → a JSON value, whose
//! fields nested access reads (`payload.amount`).

use serde_json::Value;
use sluice_json::FieldValue;
use std::borrow::Cow;

/// A SQL type, as far as binding knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlType {
    /// `BOOLEAN`.
    Boolean,
    /// `BIGINT` (also what `INT`, `SMALLINT` and `TINYINT` casts give,
    /// range-checked).
    Bigint,
    /// `DOUBLE` (also `FLOAT`, `REAL`, and numeric literals with a point).
    Double,
    /// `STRING` (`VARCHAR`, `CHAR`).
    String,
    /// `TIMESTAMP_LTZ(3)`: milliseconds since the Unix epoch, shown in UTC.
    Timestamp,
    /// An interval of days to milliseconds (`INTERVAL '1' SECOND`).
    Interval,
    /// A JSON object or array (a nested column).
    Json,
    /// Not known until a record is read (a column), or `NULL` itself.
    Unknown,
}

impl SqlType {
    /// The name a message uses.
    pub fn name(self) -> &'static str {
        match self {
            SqlType::Boolean => "BOOLEAN",
            SqlType::Bigint => "BIGINT",
            SqlType::Double => "DOUBLE",
            SqlType::String => "STRING",
            SqlType::Timestamp => "TIMESTAMP_LTZ(3)",
            SqlType::Interval => "INTERVAL",
            SqlType::Json => "JSON",
            SqlType::Unknown => "a type known per record",
        }
    }

    /// Whether a value of this type may be a number (a column may).
    pub fn may_be_numeric(self) -> bool {
        matches!(self, SqlType::Bigint | SqlType::Double | SqlType::Unknown)
    }

    /// Whether a value of this type may be `other`'s.
    pub fn may_be(self, other: SqlType) -> bool {
        self == other || self == SqlType::Unknown || other == SqlType::Unknown
    }
}

/// A value while an expression is evaluated: borrowed from the record
/// where it can be, so that reading a string column copies nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum<'a> {
    /// `NULL` (JSON `null`, or a missing field).
    Null,
    /// `BOOLEAN`.
    Bool(bool),
    /// `BIGINT`.
    Int(i64),
    /// `DOUBLE`.
    Double(f64),
    /// `STRING`.
    Str(Cow<'a, str>),
    /// `TIMESTAMP_LTZ(3)`, ms since the Unix epoch.
    Timestamp(i64),
    /// An interval, ms.
    Interval(i64),
    /// A JSON object or array (or a number beyond 64 bits).
    Json(Cow<'a, Value>),
}

impl<'a> Datum<'a> {
    /// The value of a field read from a record (`None`: missing).
    pub fn of_field(found: Option<&'a FieldValue>) -> Datum<'a> {
        match found {
            None => Datum::Null,
            Some(FieldValue::Int(i)) => Datum::Int(*i),
            Some(FieldValue::Float(f)) => Datum::Double(*f),
            Some(FieldValue::Str(s)) => Datum::Str(Cow::Borrowed(s)),
            Some(FieldValue::Other(value)) => Datum::of_json(value),
        }
    }

    /// The value of a JSON value.
    pub fn of_json(value: &'a Value) -> Datum<'a> {
        match value {
            Value::Null => Datum::Null,
            Value::Bool(b) => Datum::Bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => Datum::Int(i),
                // An integer beyond i64 stays JSON rather than lose digits.
                (None, Some(f)) if !n.is_u64() => Datum::Double(f),
                _ => Datum::Json(Cow::Borrowed(value)),
            },
            Value::String(s) => Datum::Str(Cow::Borrowed(s)),
            Value::Array(_) | Value::Object(_) => Datum::Json(Cow::Borrowed(value)),
        }
    }

    /// The value of a JSON value's text (a field's span in a record that
    /// has been checked as JSON): a string without escapes is borrowed, not
    /// copied; an error if the text is not one JSON value.
    pub fn of_json_text(text: &'a [u8]) -> Result<Datum<'a>, String> {
        let invalid = |error: &dyn std::fmt::Display| format!("invalid JSON value: {error}");
        match text.first() {
            Some(b'"')
                if text.len() >= 2 && !text.contains(&b'\\') && text.last() == Some(&b'"') =>
            {
                std::str::from_utf8(&text[1..text.len() - 1])
                    .map(|s| Datum::Str(Cow::Borrowed(s)))
                    .map_err(|error| invalid(&error))
            }
            Some(b'"') => serde_json::from_slice::<String>(text)
                .map(|s| Datum::Str(Cow::Owned(s)))
                .map_err(|error| invalid(&error)),
            Some(b'-' | b'0'..=b'9') => {
                let plain_integer = text.iter().all(|b| b.is_ascii_digit() || *b == b'-');
                let parsed = std::str::from_utf8(text).ok().and_then(|text| {
                    if plain_integer {
                        text.parse::<i64>().ok().map(Datum::Int)
                    } else {
                        text.parse::<f64>()
                            .ok()
                            .filter(|f| f.is_finite())
                            .map(Datum::Double)
                    }
                });
                match parsed {
                    Some(datum) => Ok(datum),
                    // An integer beyond 64 bits (kept as JSON), or not a number.
                    None => serde_json::from_slice::<Value>(text)
                        .map(|value| Datum::of_json(&value).into_owned())
                        .map_err(|error| invalid(&error)),
                }
            }
            Some(b't') if text == b"true" => Ok(Datum::Bool(true)),
            Some(b'f') if text == b"false" => Ok(Datum::Bool(false)),
            Some(b'n') if text == b"null" => Ok(Datum::Null),
            _ => serde_json::from_slice::<Value>(text)
                .map(|value| Datum::of_json(&value).into_owned())
                .map_err(|error| invalid(&error)),
        }
    }

    /// The type of this value.
    pub fn sql_type(&self) -> SqlType {
        match self {
            Datum::Null => SqlType::Unknown,
            Datum::Bool(_) => SqlType::Boolean,
            Datum::Int(_) => SqlType::Bigint,
            Datum::Double(_) => SqlType::Double,
            Datum::Str(_) => SqlType::String,
            Datum::Timestamp(_) => SqlType::Timestamp,
            Datum::Interval(_) => SqlType::Interval,
            Datum::Json(_) => SqlType::Json,
        }
    }

    /// Whether this is `NULL`.
    pub fn is_null(&self) -> bool {
        matches!(self, Datum::Null)
    }

    /// The value, owning what it borrowed.
    pub fn into_owned(self) -> Datum<'static> {
        match self {
            Datum::Null => Datum::Null,
            Datum::Bool(b) => Datum::Bool(b),
            Datum::Int(i) => Datum::Int(i),
            Datum::Double(f) => Datum::Double(f),
            Datum::Str(s) => Datum::Str(Cow::Owned(s.into_owned())),
            Datum::Timestamp(t) => Datum::Timestamp(t),
            Datum::Interval(i) => Datum::Interval(i),
            Datum::Json(v) => Datum::Json(Cow::Owned(v.into_owned())),
        }
    }

    /// Appends the value as JSON to `out`; fails for a `DOUBLE` that JSON
    /// cannot hold (NaN, infinities).
    pub fn write_json(&self, out: &mut Vec<u8>) -> Result<(), String> {
        match self {
            Datum::Null => out.extend_from_slice(b"null"),
            Datum::Bool(true) => out.extend_from_slice(b"true"),
            Datum::Bool(false) => out.extend_from_slice(b"false"),
            Datum::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
            Datum::Double(f) => {
                if !f.is_finite() {
                    return Err(format!("{f} cannot be written as JSON"));
                }
                write_serialized(out, f)?;
            }
            Datum::Str(s) => write_serialized(out, s.as_ref())?,
            Datum::Timestamp(ms) => write_serialized(out, &crate::time::format_instant(*ms))?,
            Datum::Interval(ms) => {
                out.extend_from_slice(itoa::Buffer::new().format(*ms).as_bytes())
            }
            Datum::Json(value) => write_serialized(out, value.as_ref())?,
        }
        Ok(())
    }

    /// The value as a string, as `CAST(.. AS STRING)` writes it.
    pub fn to_text(&self) -> Option<Cow<'_, str>> {
        Some(match self {
            Datum::Null => return None,
            Datum::Bool(true) => Cow::Borrowed("TRUE"),
            Datum::Bool(false) => Cow::Borrowed("FALSE"),
            Datum::Int(i) => Cow::Owned(itoa::Buffer::new().format(*i).to_string()),
            Datum::Double(f) => Cow::Owned(double_text(*f)),
            Datum::Str(s) => Cow::Borrowed(s.as_ref()),
            Datum::Timestamp(ms) => Cow::Owned(crate::time::format_timestamp(*ms)),
            Datum::Interval(ms) => Cow::Owned(itoa::Buffer::new().format(*ms).to_string()),
            Datum::Json(value) => Cow::Owned(value.to_string()),
        })
    }
}

/// A double as text: JSON's shortest form where it has one, `NaN` and
/// `Infinity` as Java (and Flink) write them.
pub fn double_text(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_string()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
    } else {
        Value::from(f).to_string()
    }
}

fn write_serialized<T: serde::Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> Result<(), String> {
    serde_json::to_writer(out, value).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_map_onto_sql_types() {
        let values: Value =
            serde_json::json!([null, true, 3, 1.5, "s", {"a": 1}, 18446744073709551615u64]);
        let types: Vec<_> = values
            .as_array()
            .unwrap()
            .iter()
            .map(|v| Datum::of_json(v).sql_type())
            .collect();
        assert_eq!(
            types,
            [
                SqlType::Unknown,
                SqlType::Boolean,
                SqlType::Bigint,
                SqlType::Double,
                SqlType::String,
                SqlType::Json,
                SqlType::Json
            ]
        );
    }

    #[test]
    fn json_text_reads_as_its_value_borrowing_plain_strings() {
        let cases: [(&[u8], Datum<'_>); 9] = [
            (b"\"abc\"", Datum::Str(Cow::Borrowed("abc"))),
            (b"\"a\\\"b\"", Datum::Str("a\"b".into())),
            (b"-12", Datum::Int(-12)),
            (b"1.5e2", Datum::Double(150.0)),
            (b"true", Datum::Bool(true)),
            (b"null", Datum::Null),
            (
                b"18446744073709551615",
                Datum::Json(Cow::Owned(serde_json::json!(18446744073709551615u64))),
            ),
            (b"[1]", Datum::Json(Cow::Owned(serde_json::json!([1])))),
            (b"\"\\u00e9\"", Datum::Str("\u{e9}".into())),
        ];
        for (text, expected) in cases {
            assert_eq!(
                Datum::of_json_text(text),
                Ok(expected),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        assert!(matches!(
            Datum::of_json_text(b"\"abc\""),
            Ok(Datum::Str(Cow::Borrowed(_)))
        ));
        assert!(Datum::of_json_text(b"nul").is_err());
        assert!(Datum::of_json_text(b"\"\xff\"").is_err());
    }

    #[test]
    fn values_are_written_as_json() {
        let mut out = Vec::new();
        for datum in [
            Datum::Null,
            Datum::Int(-3),
            Datum::Double(2.0),
            Datum::Str("a\"b".into()),
            Datum::Timestamp(0),
        ] {
            datum.write_json(&mut out).unwrap();
            out.push(b' ');
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "null -3 2.0 \"a\\\"b\" \"1970-01-01 00:00:00.000Z\" "
        );
        assert!(Datum::Double(f64::NAN).write_json(&mut Vec::new()).is_err());
    }
}
