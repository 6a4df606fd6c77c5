//! JSON record values to Arrow columns of an Iceberg schema.
//!
//! Each record's value is parsed once and its top-level fields are
//! appended to one Arrow builder per column. A value that does not fit —
//! not a JSON object, a required column missing or null, a value of the
//! wrong type or out of range — is refused with the reason and nothing of
//! it is appended (the sink sends it to the dead-letter output). Fields
//! that are not columns are ignored.
//!
//! Conversions: integers to `int` / `long` (range-checked), numbers to
//! `float` / `double`, numbers or numeric strings to `decimal(p, s)`
//! (exact: from the number's text), strings to `string`, base64 strings
//! to `binary`, `YYYY-MM-DD` strings or day numbers to `date`, and
//! RFC 3339 strings or milliseconds since the epoch (Sluice's event-time
//! unit) to `timestamp` / `timestamptz` (stored in microseconds).

use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder,
    Float64Builder, Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef as ArrowSchemaRef;
use base64::Engine as _;
use iceberg::spec::{PrimitiveType, Schema, Type};
use serde_json::Value;

/// One column: its name, whether it is required, and its builder.
struct Column {
    name: String,
    required: bool,
    kind: ColumnKind,
}

/// The builder of a column, by Iceberg type.
enum ColumnKind {
    Boolean(BooleanBuilder),
    Int(Int32Builder),
    Long(Int64Builder),
    Float(Float32Builder),
    Double(Float64Builder),
    Decimal {
        builder: Decimal128Builder,
        precision: u32,
        scale: u32,
    },
    String(StringBuilder),
    Binary(BinaryBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
}

/// Rows being gathered into one Arrow record batch.
pub(crate) struct RowBuffer {
    schema: ArrowSchemaRef,
    columns: Vec<Column>,
    rows: usize,
}

impl RowBuffer {
    /// A buffer for `schema` (top-level primitive columns only), whose
    /// Arrow form is `arrow_schema` (with Iceberg field ids).
    pub(crate) fn new(schema: &Schema, arrow_schema: ArrowSchemaRef) -> Result<Self, String> {
        let columns = schema
            .as_struct()
            .fields()
            .iter()
            .map(|field| {
                let Type::Primitive(primitive) = field.field_type.as_ref() else {
                    return Err(format!(
                        "column `{}`: nested types are not supported yet",
                        field.name
                    ));
                };
                Ok(Column {
                    name: field.name.clone(),
                    required: field.required,
                    kind: ColumnKind::new(primitive)?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(RowBuffer {
            schema: arrow_schema,
            columns,
            rows: 0,
        })
    }

    /// Rows gathered so far.
    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    /// Appends the record value `value` as a row, or says why it does not
    /// fit (then nothing is appended).
    pub(crate) fn push(&mut self, value: &[u8]) -> Result<(), String> {
        let document: Value =
            serde_json::from_slice(value).map_err(|error| format!("value is not JSON: {error}"))?;
        let Value::Object(fields) = document else {
            return Err("value is not a JSON object".into());
        };
        self.push_fields(&fields)
    }

    /// Appends a row of `fields` by column name, or says why it does not
    /// fit (then nothing is appended).
    pub(crate) fn push_fields(
        &mut self,
        fields: &serde_json::Map<String, Value>,
    ) -> Result<(), String> {
        // Convert every column first, so that a refused row appends nothing.
        let mut converted = Vec::with_capacity(self.columns.len());
        for column in &self.columns {
            let value = match fields.get(&column.name) {
                None | Some(Value::Null) if column.required => {
                    return Err(format!("required column `{}` is missing", column.name));
                }
                None | Some(Value::Null) => None,
                Some(value) => Some(
                    column
                        .kind
                        .convert(value)
                        .map_err(|why| format!("column `{}`: {why}", column.name))?,
                ),
            };
            converted.push(value);
        }
        for (column, value) in self.columns.iter_mut().zip(converted) {
            column.kind.append(value);
        }
        self.rows += 1;
        Ok(())
    }

    /// The gathered rows as a record batch; the buffer starts empty again.
    pub(crate) fn finish(&mut self) -> Result<RecordBatch, String> {
        let arrays: Vec<ArrayRef> = self
            .columns
            .iter_mut()
            .map(|column| column.kind.finish())
            .collect();
        self.rows = 0;
        RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|error| format!("cannot build an Arrow batch: {error}"))
    }
}

/// A JSON value converted for one column.
enum Converted {
    Boolean(bool),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Decimal(i128),
    String(String),
    Binary(Vec<u8>),
    Date(i32),
    Timestamp(i64),
}

impl ColumnKind {
    fn new(primitive: &PrimitiveType) -> Result<Self, String> {
        Ok(match primitive {
            PrimitiveType::Boolean => ColumnKind::Boolean(BooleanBuilder::new()),
            PrimitiveType::Int => ColumnKind::Int(Int32Builder::new()),
            PrimitiveType::Long => ColumnKind::Long(Int64Builder::new()),
            PrimitiveType::Float => ColumnKind::Float(Float32Builder::new()),
            PrimitiveType::Double => ColumnKind::Double(Float64Builder::new()),
            PrimitiveType::Decimal { precision, scale } => {
                let builder = Decimal128Builder::new()
                    .with_precision_and_scale(*precision as u8, *scale as i8)
                    .map_err(|error| format!("decimal({precision}, {scale}): {error}"))?;
                ColumnKind::Decimal {
                    builder,
                    precision: *precision,
                    scale: *scale,
                }
            }
            PrimitiveType::String => ColumnKind::String(StringBuilder::new()),
            PrimitiveType::Binary => ColumnKind::Binary(BinaryBuilder::new()),
            PrimitiveType::Date => ColumnKind::Date(Date32Builder::new()),
            PrimitiveType::Timestamp => ColumnKind::Timestamp(TimestampMicrosecondBuilder::new()),
            PrimitiveType::Timestamptz => {
                ColumnKind::Timestamp(TimestampMicrosecondBuilder::new().with_timezone("+00:00"))
            }
            other => return Err(format!("type {other} is not supported yet")),
        })
    }

    fn convert(&self, value: &Value) -> Result<Converted, String> {
        let found = || format!("expected {}, found {value}", self.expected());
        Ok(match self {
            ColumnKind::Boolean(_) => Converted::Boolean(value.as_bool().ok_or_else(found)?),
            ColumnKind::Int(_) => Converted::Int(
                value
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(found)?,
            ),
            ColumnKind::Long(_) => Converted::Long(value.as_i64().ok_or_else(found)?),
            ColumnKind::Float(_) => Converted::Float(value.as_f64().ok_or_else(found)? as f32),
            ColumnKind::Double(_) => Converted::Double(value.as_f64().ok_or_else(found)?),
            ColumnKind::Decimal {
                precision, scale, ..
            } => {
                let text = match value {
                    Value::Number(number) => number.to_string(),
                    Value::String(text) => text.clone(),
                    _ => return Err(found()),
                };
                Converted::Decimal(parse_decimal(&text, *precision, *scale)?)
            }
            ColumnKind::String(_) => Converted::String(value.as_str().ok_or_else(found)?.into()),
            ColumnKind::Binary(_) => Converted::Binary(
                base64::engine::general_purpose::STANDARD
                    .decode(value.as_str().ok_or_else(found)?)
                    .map_err(|error| format!("not base64: {error}"))?,
            ),
            ColumnKind::Date(_) => Converted::Date(match value {
                Value::String(text) => chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
                    .map_err(|error| format!("not a YYYY-MM-DD date: {error}"))?
                    .signed_duration_since(chrono::NaiveDate::default())
                    .num_days()
                    .try_into()
                    .map_err(|_| found())?,
                _ => value
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(found)?,
            }),
            ColumnKind::Timestamp(_) => Converted::Timestamp(match value {
                Value::String(text) => chrono::DateTime::parse_from_rfc3339(text)
                    .map_err(|error| format!("not an RFC 3339 timestamp: {error}"))?
                    .timestamp_micros(),
                _ => {
                    let ms = value.as_i64().ok_or_else(found)?;
                    crate::time::check_event_time(ms)?;
                    ms * 1000
                }
            }),
        })
    }

    fn expected(&self) -> &'static str {
        match self {
            ColumnKind::Boolean(_) => "a boolean",
            ColumnKind::Int(_) => "an integer within 32 bits",
            ColumnKind::Long(_) => "an integer within 64 bits",
            ColumnKind::Float(_) | ColumnKind::Double(_) => "a number",
            ColumnKind::Decimal { .. } => "a decimal number",
            ColumnKind::String(_) => "a string",
            ColumnKind::Binary(_) => "a base64 string",
            ColumnKind::Date(_) => "a date (YYYY-MM-DD or days since 1970-01-01)",
            ColumnKind::Timestamp(_) => "a timestamp (RFC 3339 or ms since the epoch)",
        }
    }

    fn append(&mut self, value: Option<Converted>) {
        match (self, value) {
            (ColumnKind::Boolean(b), Some(Converted::Boolean(v))) => b.append_value(v),
            (ColumnKind::Int(b), Some(Converted::Int(v))) => b.append_value(v),
            (ColumnKind::Long(b), Some(Converted::Long(v))) => b.append_value(v),
            (ColumnKind::Float(b), Some(Converted::Float(v))) => b.append_value(v),
            (ColumnKind::Double(b), Some(Converted::Double(v))) => b.append_value(v),
            (ColumnKind::Decimal { builder, .. }, Some(Converted::Decimal(v))) => {
                builder.append_value(v)
            }
            (ColumnKind::String(b), Some(Converted::String(v))) => b.append_value(v),
            (ColumnKind::Binary(b), Some(Converted::Binary(v))) => b.append_value(v),
            (ColumnKind::Date(b), Some(Converted::Date(v))) => b.append_value(v),
            (ColumnKind::Timestamp(b), Some(Converted::Timestamp(v))) => b.append_value(v),
            (kind, _) => kind.append_null(),
        }
    }

    fn append_null(&mut self) {
        match self {
            ColumnKind::Boolean(b) => b.append_null(),
            ColumnKind::Int(b) => b.append_null(),
            ColumnKind::Long(b) => b.append_null(),
            ColumnKind::Float(b) => b.append_null(),
            ColumnKind::Double(b) => b.append_null(),
            ColumnKind::Decimal { builder, .. } => builder.append_null(),
            ColumnKind::String(b) => b.append_null(),
            ColumnKind::Binary(b) => b.append_null(),
            ColumnKind::Date(b) => b.append_null(),
            ColumnKind::Timestamp(b) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            ColumnKind::Boolean(b) => ArrayBuilder::finish(b),
            ColumnKind::Int(b) => ArrayBuilder::finish(b),
            ColumnKind::Long(b) => ArrayBuilder::finish(b),
            ColumnKind::Float(b) => ArrayBuilder::finish(b),
            ColumnKind::Double(b) => ArrayBuilder::finish(b),
            ColumnKind::Decimal { builder, .. } => ArrayBuilder::finish(builder),
            ColumnKind::String(b) => ArrayBuilder::finish(b),
            ColumnKind::Binary(b) => ArrayBuilder::finish(b),
            ColumnKind::Date(b) => ArrayBuilder::finish(b),
            ColumnKind::Timestamp(b) => ArrayBuilder::finish(b),
        }
    }
}

/// `text` (e.g. `-12.30`, `1e2` is refused) as an unscaled decimal with
/// `scale` digits after the point and at most `precision` digits in all.
fn parse_decimal(text: &str, precision: u32, scale: u32) -> Result<i128, String> {
    let invalid = || format!("`{text}` is not a decimal number");
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .chars()
            .chain(fraction.chars())
            .all(|c| c.is_ascii_digit())
    {
        return Err(invalid());
    }
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > scale as usize {
        return Err(format!(
            "`{text}` has more than {scale} digits after the point"
        ));
    }
    let whole = whole.trim_start_matches('0');
    if whole.len() + scale as usize > precision as usize {
        return Err(format!(
            "`{text}` does not fit decimal({precision}, {scale})"
        ));
    }
    let unscaled = format!("{whole}{fraction:0<width$}", width = scale as usize);
    let magnitude: i128 = if unscaled.is_empty() {
        0
    } else {
        unscaled.parse().map_err(|_| invalid())?
    };
    Ok(if negative { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::NestedField;
    use std::sync::Arc;

    fn buffer() -> RowBuffer {
        let schema = Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "name",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::optional(
                    3,
                    "amount",
                    Type::Primitive(PrimitiveType::Decimal {
                        precision: 10,
                        scale: 2,
                    }),
                )),
                Arc::new(NestedField::optional(
                    4,
                    "at",
                    Type::Primitive(PrimitiveType::Timestamptz),
                )),
            ])
            .build()
            .expect("schema");
        let arrow = iceberg::arrow::schema_to_arrow_schema(&schema).expect("arrow schema");
        RowBuffer::new(&schema, Arc::new(arrow)).expect("buffer")
    }

    #[test]
    fn rows_that_fit_become_a_batch_and_others_are_refused_whole() {
        let mut rows = buffer();
        rows.push(br#"{"id":1,"name":"a","amount":"12.30","at":1700000000000,"extra":true}"#)
            .expect("fits");
        rows.push(br#"{"id":2,"at":"2024-01-02T03:04:05Z"}"#)
            .expect("fits");
        for (value, why) in [
            (
                &br#"{"name":"no id"}"#[..],
                "required column `id` is missing",
            ),
            (br#"{"id":"3"}"#, "column `id`: expected an integer"),
            (br#"{"id":4,"amount":1.234}"#, "more than 2 digits"),
            (
                br#"{"id":5,"amount":123456789.5}"#,
                "does not fit decimal(10, 2)",
            ),
            (br#"[1]"#, "not a JSON object"),
            (
                br#"{"id":6,"at":9223372036854775807}"#,
                "outside the supported range",
            ),
        ] {
            let refused = rows.push(value).expect_err(why);
            assert!(refused.contains(why), "{refused}");
        }
        assert_eq!(rows.len(), 2);
        let batch = rows.finish().expect("batch");
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(rows.len(), 0);
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(parse_decimal("12.30", 10, 2), Ok(1230));
        assert_eq!(parse_decimal("-0.05", 10, 2), Ok(-5));
        assert_eq!(parse_decimal("7", 10, 2), Ok(700));
        assert!(parse_decimal("1e2", 10, 2).is_err());
        assert!(parse_decimal(".", 10, 2).is_err());
    }
}
