//! Avro values in the Confluent wire format, with a Confluent-compatible
//! schema registry: how Debezium and most Kafka producers write Avro.
//!
//! A value is a magic byte `0`, the writer schema's registry id (4 bytes,
//! big-endian) and the Avro binary body. The reader
//! ([`ConfluentAvroDecoder`]) fetches the writer schema by id (once; cached)
//! and resolves it against the pipeline's reader schema, so records
//! written with an older or newer compatible schema read as the reader
//! schema says (a field added with a default reads as the default). The
//! writer ([`ConfluentAvroEncoder`]) registers its schema under a subject
//! at start-up and prefixes every value with the id the registry gave.
//!
//! Failures are told apart by kind, never by message text:
//!
//! * a value that is not in the wire format, a schema id the registry does
//!   not know, a writer schema the reader schema cannot read, a body that
//!   does not decode: [`DecodeError::Invalid`], and the record goes to the
//!   dead-letter output with that reason;
//! * the registry cannot be reached (connection refused, timeout, 502/503):
//!   retried with backoff for `outage_timeout_ms`, then
//!   [`DecodeError::Unavailable`], which stops the pipeline with a clear
//!   error (a restart resumes from the last checkpoint: nothing is lost).
//!
//! The HTTP protocol is `schema_registry_converter`'s; Avro itself is
//! `apache-avro`'s.

use crate::dataflow::{DataflowError, Sink};
use crate::record::Record;
use apache_avro::Schema;
use apache_avro::schema_compatibility::SchemaCompatibility;
use schema_registry_converter::blocking::schema_registry::{
    SrSettings, get_schema_by_id, post_schema,
};
use schema_registry_converter::error::SRCError;
use schema_registry_converter::schema_registry_common::{SchemaType, SuppliedSchema};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first byte of a value in the Confluent wire format.
const MAGIC_BYTE: u8 = 0;
/// Magic byte plus the 4-byte schema id.
const HEADER_LEN: usize = 5;
/// How long an id the registry said it does not know stays known as
/// unknown (a registry replica may catch up).
const UNKNOWN_ID_TTL: Duration = Duration::from_secs(10);

/// `schema_registry = { url = ".." }` of a Kafka source or sink.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaRegistryConfig {
    /// The Confluent-compatible API's base URL, path allowed (Apicurio:
    /// `http://host:8080/apis/ccompat/v7`).
    pub url: String,
    /// One HTTP request's timeout, ms.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// How long the registry may be unreachable before the pipeline stops
    /// with an error, ms.
    #[serde(default = "default_outage_timeout_ms")]
    pub outage_timeout_ms: u64,
    /// Environment variable holding a bearer token, if the registry wants
    /// one (never the token itself in the pipeline file).
    pub token_env: Option<String>,
    /// A bearer token the server grants (a tenant's, set by `sluice
    /// serve` in memory); never read from a pipeline file.
    #[serde(skip)]
    pub granted_token: Option<crate::connectors::Secret>,
}

fn default_request_timeout_ms() -> u64 {
    5_000
}

fn default_outage_timeout_ms() -> u64 {
    60_000
}

/// Why a value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The value itself is wrong (or names a schema that cannot be used):
    /// dead-letter the record with this reason.
    #[error("{0}")]
    Invalid(String),
    /// The registry could not be reached within the outage timeout: stop.
    #[error("{0}")]
    Unavailable(String),
}

/// A registry client: settings plus the retry policy for outages.
#[derive(Debug, Clone)]
pub struct SchemaRegistry {
    url: String,
    settings: SrSettings,
    outage_timeout: Duration,
}

impl SchemaRegistry {
    /// A client for `config` (no request is made yet).
    pub fn new(config: &SchemaRegistryConfig) -> Result<Self, String> {
        let url = config.url.trim_end_matches('/').to_string();
        let mut builder = SrSettings::new_builder(url.clone());
        builder.set_timeout(Duration::from_millis(config.request_timeout_ms.max(1)));
        if let Some(token) = &config.granted_token {
            builder.set_token_authorization(token.expose());
        } else if let Some(variable) = &config.token_env {
            let token = std::env::var(variable)
                .map_err(|_| format!("environment variable `{variable}` is not set"))?;
            builder.set_token_authorization(&token);
        }
        let settings = builder
            .build()
            .map_err(|error| format!("schema registry {url}: {}", describe(&error)))?;
        Ok(SchemaRegistry {
            url,
            settings,
            outage_timeout: Duration::from_millis(config.outage_timeout_ms),
        })
    }

    /// The base URL (for messages).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs `call`, retrying while the registry is unreachable (errors the
    /// client marks retriable) for up to the outage timeout.
    fn with_retries<T>(
        &self,
        what: &str,
        mut call: impl FnMut() -> Result<T, SRCError>,
    ) -> Result<T, DecodeError> {
        let started = Instant::now();
        let mut backoff = Duration::from_millis(50);
        loop {
            match call() {
                Ok(value) => return Ok(value),
                Err(error) if error.retriable => {
                    if started.elapsed() >= self.outage_timeout {
                        return Err(DecodeError::Unavailable(format!(
                            "schema registry {} unreachable for {} ms ({what}): {}",
                            self.url,
                            started.elapsed().as_millis(),
                            describe(&error)
                        )));
                    }
                    tracing::warn!(registry = %self.url, error = %describe(&error), "schema registry unreachable; retrying");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                Err(error) => {
                    return Err(DecodeError::Invalid(format!(
                        "schema registry {} refused {what}: {}",
                        self.url,
                        describe(&error)
                    )));
                }
            }
        }
    }

    /// The Avro schema registered under `id`.
    pub fn schema_by_id(&self, id: u32) -> Result<Schema, DecodeError> {
        let registered = self.with_retries(&format!("schema id {id}"), || {
            get_schema_by_id(id, &self.settings)
        })?;
        if registered.schema_type != SchemaType::Avro {
            return Err(DecodeError::Invalid(format!(
                "schema id {id} is a {:?} schema, not Avro",
                registered.schema_type
            )));
        }
        if !registered.references.is_empty() {
            return Err(DecodeError::Invalid(format!(
                "schema id {id} uses schema references, which Sluice does not resolve yet"
            )));
        }
        Schema::parse_str(&registered.schema).map_err(|error| {
            DecodeError::Invalid(format!(
                "schema id {id} is not a valid Avro schema: {error}"
            ))
        })
    }

    /// Registers `schema` under `subject` (or finds it there) and returns
    /// its id. The registry's compatibility rules apply: an incompatible
    /// schema is refused.
    pub fn register(&self, subject: &str, schema: &Schema) -> Result<u32, DecodeError> {
        let text = schema.canonical_form();
        let registered = self.with_retries(&format!("registering under `{subject}`"), || {
            post_schema(
                &self.settings,
                subject.to_string(),
                SuppliedSchema::new(None, SchemaType::Avro, text.clone()),
            )
        })?;
        Ok(registered.id)
    }
}

/// The error and its cause, as one line.
fn describe(error: &SRCError) -> String {
    match &error.cause {
        Some(cause) => format!("{}: {cause}", error.error),
        None => error.error.clone(),
    }
}

/// A writer schema, and whether the reader schema can read it.
#[derive(Debug, Clone)]
struct WriterSchema {
    schema: Arc<Schema>,
    readable: Result<(), String>,
}

/// Decodes Confluent-framed Avro values to JSON.
#[derive(Debug, Clone)]
pub struct ConfluentAvroDecoder {
    registry: SchemaRegistry,
    reader: Option<Arc<Schema>>,
    writers: HashMap<u32, WriterSchema>,
    unknown: HashMap<u32, (Instant, String)>,
}

impl ConfluentAvroDecoder {
    /// A decoder fetching writer schemas from `registry`; with a reader
    /// schema, values are resolved to it (schema evolution), without one
    /// they are read as written.
    pub fn new(registry: SchemaRegistry, reader: Option<Schema>) -> Self {
        ConfluentAvroDecoder {
            registry,
            reader: reader.map(Arc::new),
            writers: HashMap::new(),
            unknown: HashMap::new(),
        }
    }

    /// The value as JSON text.
    pub fn decode(&mut self, value: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let (id, body) = split_header(value)?;
        let writer = self.writer(id)?;
        if let Err(why) = &writer.readable {
            return Err(DecodeError::Invalid(why.clone()));
        }
        let schema = writer.schema.clone();
        let mut reader = body;
        let datum = apache_avro::from_avro_datum(&schema, &mut reader, self.reader.as_deref())
            .map_err(|error| {
                DecodeError::Invalid(format!(
                    "invalid Avro value (writer schema id {id}): {error}"
                ))
            })?;
        if !reader.is_empty() {
            return Err(DecodeError::Invalid(format!(
                "invalid Avro value (writer schema id {id}): {} trailing bytes",
                reader.len()
            )));
        }
        let json = serde_json::Value::try_from(datum).map_err(|error| {
            DecodeError::Invalid(format!("Avro value has no JSON form: {error}"))
        })?;
        serde_json::to_vec(&json)
            .map_err(|error| DecodeError::Invalid(format!("Avro value has no JSON form: {error}")))
    }

    /// The writer schema of `id`, fetched once.
    fn writer(&mut self, id: u32) -> Result<&WriterSchema, DecodeError> {
        if let Some((since, why)) = self.unknown.get(&id) {
            if since.elapsed() < UNKNOWN_ID_TTL {
                return Err(DecodeError::Invalid(why.clone()));
            }
            self.unknown.remove(&id);
        }
        if !self.writers.contains_key(&id) {
            let schema = match self.registry.schema_by_id(id) {
                Ok(schema) => schema,
                Err(DecodeError::Invalid(why)) => {
                    let why = format!("unknown or unusable writer schema id {id}: {why}");
                    self.unknown.insert(id, (Instant::now(), why.clone()));
                    return Err(DecodeError::Invalid(why));
                }
                Err(unavailable) => return Err(unavailable),
            };
            let readable = match &self.reader {
                Some(reader) => SchemaCompatibility::can_read(&schema, reader).map_err(|error| {
                    format!("writer schema id {id} is incompatible with the reader schema: {error}")
                }),
                None => Ok(()),
            };
            self.writers.insert(
                id,
                WriterSchema {
                    schema: Arc::new(schema),
                    readable,
                },
            );
        }
        self.writers
            .get(&id)
            .ok_or_else(|| DecodeError::Invalid(format!("writer schema id {id} vanished")))
    }
}

/// The schema id and Avro body of a framed value.
fn split_header(value: &[u8]) -> Result<(u32, &[u8]), DecodeError> {
    match value {
        [MAGIC_BYTE, a, b, c, d, body @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), body)),
        _ if value.len() < HEADER_LEN => Err(DecodeError::Invalid(format!(
            "not in the Confluent wire format: {} bytes, shorter than the 5-byte header",
            value.len()
        ))),
        _ => Err(DecodeError::Invalid(format!(
            "not in the Confluent wire format: magic byte is {:#04x}, not 0x00",
            value[0]
        ))),
    }
}

/// Encodes JSON values as Confluent-framed Avro with a registered schema.
#[derive(Debug, Clone)]
pub struct ConfluentAvroEncoder {
    schema: Arc<Schema>,
    id: u32,
}

impl ConfluentAvroEncoder {
    /// Registers `schema` under `subject` and encodes with the id given.
    pub fn register(
        registry: &SchemaRegistry,
        subject: &str,
        schema: Schema,
    ) -> Result<Self, DecodeError> {
        let id = registry.register(subject, &schema)?;
        Ok(ConfluentAvroEncoder {
            schema: Arc::new(schema),
            id,
        })
    }

    /// The registry's id of the schema.
    pub fn schema_id(&self) -> u32 {
        self.id
    }

    /// `json` (a JSON document) as a framed Avro value, or why it does not
    /// fit the schema.
    pub fn encode(&self, json: &[u8]) -> Result<Vec<u8>, String> {
        let document: serde_json::Value =
            serde_json::from_slice(json).map_err(|error| format!("value is not JSON: {error}"))?;
        let value = apache_avro::types::Value::from(document)
            .resolve(&self.schema)
            .map_err(|error| format!("value does not fit the Avro schema: {error}"))?;
        let body = apache_avro::to_avro_datum(&self.schema, value)
            .map_err(|error| format!("value does not fit the Avro schema: {error}"))?;
        let mut framed = Vec::with_capacity(HEADER_LEN + body.len());
        framed.push(MAGIC_BYTE);
        framed.extend_from_slice(&self.id.to_be_bytes());
        framed.extend_from_slice(&body);
        Ok(framed)
    }
}

/// A sink whose record values are encoded as Confluent-framed Avro before
/// they reach the sink it wraps (a Kafka sink); a value that does not fit
/// the schema is refused ([`Sink::take_rejected`]) and dead-lettered.
pub struct ConfluentAvroSink {
    inner: Box<dyn Sink>,
    encoder: ConfluentAvroEncoder,
    rejected: Vec<(Record, String)>,
}

impl ConfluentAvroSink {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn Sink>, encoder: ConfluentAvroEncoder) -> Self {
        ConfluentAvroSink {
            inner,
            encoder,
            rejected: Vec::new(),
        }
    }
}

impl Sink for ConfluentAvroSink {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        let mut encoded = Vec::with_capacity(records.len());
        for record in records {
            match self.encoder.encode(&record.value) {
                Ok(value) => {
                    let mut record = record.clone();
                    record.value = value.into();
                    encoded.push(record);
                }
                Err(why) => self.rejected.push((record.clone(), why)),
            }
        }
        self.inner.write(&encoded)
    }

    fn flush(&mut self) -> Result<(), DataflowError> {
        self.inner.flush()
    }

    fn take_rejected(&mut self) -> Vec<(Record, String)> {
        let mut rejected = std::mem::take(&mut self.rejected);
        rejected.extend(self.inner.take_rejected());
        rejected
    }

    fn pre_commit(
        &mut self,
        checkpoint: u64,
    ) -> Result<Option<crate::checkpoint::Committable>, DataflowError> {
        self.inner.pre_commit(checkpoint)
    }

    fn committer(&self) -> Option<Arc<dyn crate::checkpoint::Committer>> {
        self.inner.committer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_checked() {
        assert_eq!(split_header(&[0, 0, 0, 1, 7, 42]), Ok((263, &[42u8][..])));
        assert!(
            matches!(split_header(&[0, 0, 1]), Err(DecodeError::Invalid(why)) if why.contains("shorter"))
        );
        assert!(
            matches!(split_header(b"{\"a\":1}"), Err(DecodeError::Invalid(why)) if why.contains("magic byte is 0x7b"))
        );
    }

    #[test]
    fn an_unreachable_registry_is_unavailable_after_the_outage_timeout() {
        // Nothing listens on port 9 (discard) here: connections are refused.
        let registry = SchemaRegistry::new(&SchemaRegistryConfig {
            url: "http://127.0.0.1:9".into(),
            request_timeout_ms: 200,
            outage_timeout_ms: 300,
            token_env: None,
            granted_token: None,
        })
        .unwrap();
        let mut decoder = ConfluentAvroDecoder::new(registry, None);
        match decoder.decode(&[0, 0, 0, 0, 1, 2]) {
            Err(DecodeError::Unavailable(why)) => assert!(why.contains("unreachable"), "{why}"),
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
}
