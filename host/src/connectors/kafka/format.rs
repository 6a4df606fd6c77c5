//! Value formats of Kafka records.

use crate::connectors::schema_registry::{ConfluentAvroDecoder, DecodeError};
use bytes::Bytes;

/// How record values are read.
#[derive(Debug, Clone, Default)]
pub enum ValueFormat {
    /// Bytes as they are.
    #[default]
    Raw,
    /// JSON documents; values that do not parse are dead-lettered.
    Json,
    /// Avro datums (no container, no header) written with this schema,
    /// handed to plugins as JSON; values that do not decode are dead-lettered.
    Avro(Box<apache_avro::Schema>),
    /// Avro in the Confluent wire format (schema id, then the body),
    /// writer schemas fetched from a registry, handed to plugins as JSON.
    ConfluentAvro(Box<ConfluentAvroDecoder>),
}

impl ValueFormat {
    /// The value plugins see, or why the bytes are not a valid value
    /// ([`DecodeError::Invalid`]: dead-letter it) or cannot be read now
    /// ([`DecodeError::Unavailable`]: the schema registry is down).
    pub fn decode(&mut self, value: &[u8]) -> Result<Bytes, DecodeError> {
        match self {
            ValueFormat::ConfluentAvro(decoder) => decoder.decode(value).map(Bytes::from),
            _ => self.decode_plain(value).map_err(DecodeError::Invalid),
        }
    }

    /// The formats that need nothing but the bytes.
    fn decode_plain(&self, value: &[u8]) -> Result<Bytes, String> {
        match self {
            ValueFormat::Raw | ValueFormat::ConfluentAvro(_) => Ok(Bytes::copy_from_slice(value)),
            // UTF-8 throughout, skipped strings too (serde_json's
            // `IgnoredAny` alone does not check the strings it skips).
            ValueFormat::Json => match sluice_json::fields::why_not_json(value) {
                None => Ok(Bytes::copy_from_slice(value)),
                Some(reason) => Err(format!("invalid JSON value: {reason}")),
            },
            ValueFormat::Avro(schema) => {
                let mut reader = value;
                let datum = apache_avro::from_avro_datum(schema, &mut reader, None)
                    .map_err(|error| format!("invalid Avro value: {error}"))?;
                if !reader.is_empty() {
                    return Err(format!(
                        "invalid Avro value: {} trailing bytes",
                        reader.len()
                    ));
                }
                // apache-avro can return a datum for truncated input (a cut
                // string decodes as null): check it against the schema.
                if !datum.validate(schema) {
                    return Err(
                        "invalid Avro value: the decoded datum does not match the schema"
                            .to_string(),
                    );
                }
                let json = serde_json::Value::try_from(datum)
                    .map_err(|error| format!("Avro value has no JSON form: {error}"))?;
                Ok(Bytes::from(json.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_avro_values_are_checked() {
        assert!(ValueFormat::Json.decode(br#"{"a":1}"#).is_ok());
        assert!(
            ValueFormat::Json
                .decode(b"{oops")
                .unwrap_err()
                .to_string()
                .starts_with("invalid JSON value")
        );
        // Invalid UTF-8 inside a string is refused too, in a value long
        // enough for simdjson's check and in a short one.
        let pad = "x".repeat(80);
        for text in [
            format!(r#"{{"a":1,"pad":"{pad}","s":"xy"}}"#),
            r#"{"s":"xy"}"#.to_string(),
        ] {
            assert!(ValueFormat::Json.decode(text.as_bytes()).is_ok());
            let mut value = text.into_bytes();
            let y = value.len() - 3;
            value[y] = 0xff;
            let reason = ValueFormat::Json.decode(&value).unwrap_err().to_string();
            assert!(
                reason.starts_with("invalid JSON value: value is not UTF-8"),
                "{reason}"
            );
        }
        let schema = apache_avro::Schema::parse_str(
            r#"{"type":"record","name":"R","fields":[{"name":"n","type":"long"},{"name":"s","type":"string"}]}"#,
        )
        .unwrap();
        let mut record = apache_avro::types::Record::new(&schema).unwrap();
        record.put("n", 7i64);
        record.put("s", "x");
        let datum = apache_avro::to_avro_datum(&schema, record).unwrap();
        let mut avro = ValueFormat::Avro(Box::new(schema));
        assert_eq!(avro.decode(&datum).unwrap().as_ref(), br#"{"n":7,"s":"x"}"#);
        assert!(
            avro.decode(&[0xff])
                .unwrap_err()
                .to_string()
                .starts_with("invalid Avro value")
        );
    }

    proptest::proptest! {
        /// Untrusted value bytes never make the JSON or Avro decoder panic
        /// (or allocate without bound); what they accept is valid.
        #[test]
        fn arbitrary_values_never_panic(value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let json = ValueFormat::Json.decode(&value);
            proptest::prop_assert_eq!(json.is_ok(), serde_json::from_slice::<serde_json::Value>(&value).is_ok());
            let schema = apache_avro::Schema::parse_str(
                r#"{"type":"record","name":"R","fields":[{"name":"n","type":"long"},{"name":"s","type":"string"},{"name":"a","type":{"type":"array","items":"double"}},{"name":"u","type":["null","bytes"]}]}"#,
            )
            .map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
            if let Ok(decoded) = ValueFormat::Avro(Box::new(schema)).decode(&value) {
                proptest::prop_assert!(serde_json::from_slice::<serde_json::Value>(&decoded).is_ok());
            }
        }
    }
}
