//! The Kafka connector's sections of a pipeline file: `[source.kafka]` and
//! `[sink.kafka]` (also as a side output or the dead letters).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::bounded::{Bounded, PositiveDurationMs};
use crate::connectors::SecretMap;

/// `[source.kafka]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceConfig {
    /// `host:port` list.
    pub bootstrap_servers: String,
    /// Topics to read.
    pub topics: Vec<String>,
    /// Consumer group.
    pub group_id: String,
    /// `committed` (default; earliest when none), `earliest` or `latest`.
    #[serde(default)]
    pub start: KafkaStart,
    /// Start at the first record at or after this time instead (ms).
    pub start_timestamp_ms: Option<Bounded<i64, 0, { crate::time::MAX_EVENT_TIME as i128 }>>,
    /// `raw` (default), `json`, `avro` or `avro-confluent`.
    #[serde(default)]
    pub value_format: ValueFormatName,
    /// Avro schema file (`.avsc`): the writer schema of `value_format =
    /// "avro"`; with `avro-confluent`, the reader schema values are
    /// resolved to (absent: each value is read as written).
    pub avro_schema: Option<PathBuf>,
    /// The schema registry of `value_format = "avro-confluent"`.
    pub schema_registry: Option<crate::connectors::schema_registry::SchemaRegistryConfig>,
    /// Extra librdkafka consumer properties.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// The cluster's connection properties (security protocol, SASL, TLS)
    /// that `sluice serve` grants in memory; never read from a file.
    #[serde(skip)]
    pub granted_properties: SecretMap,
    /// Field of the value (JSON, or Avro decoded) holding the event time in
    /// ms (`date_time`, `a.b` or a JSON pointer); absent: the Kafka record
    /// timestamp.
    pub timestamp_field: Option<String>,
    /// Longest wait for records in one poll, ms.
    #[serde(default = "default_poll_timeout_ms")]
    pub poll_timeout_ms: Bounded<u64, 1, 60_000>,
    /// Read up to the end offsets the topics have at start-up, then end
    /// (a bounded read: backfills, examples); default: run until stopped.
    #[serde(default)]
    pub bounded: bool,
    /// Every process running this pipeline file shares its partitions: a
    /// task per partition index, owned through the consumer group
    /// (KIP-848), each with its own state and checkpoints (ADR 0020).
    /// Needs `[checkpoints]`; keyed operators must key by what the input
    /// is partitioned by until repartition topics land.
    #[serde(default)]
    pub scale_out: bool,
    /// The topics are a scaled-out pipeline's repartition topic: set for
    /// the stage after a key-by (ADR 0020), never from a file.
    #[serde(skip)]
    pub repartition_input: bool,
}

/// `start` of a Kafka source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KafkaStart {
    /// Committed offsets of the group (earliest when none).
    #[default]
    Committed,
    /// Earliest offsets.
    Earliest,
    /// Latest offsets.
    Latest,
}

/// `value_format` of a Kafka source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ValueFormatName {
    /// Bytes as they are.
    #[default]
    Raw,
    /// JSON, validated.
    Json,
    /// Avro datums with `avro_schema`, handed to plugins as JSON.
    Avro,
    /// Avro in the Confluent wire format (magic byte, schema id, body),
    /// writer schemas from `schema_registry`, handed to plugins as JSON.
    AvroConfluent,
}

/// `[sink.kafka]` (and a side output's or the dead letters').
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkConfig {
    /// `host:port` list.
    pub bootstrap_servers: String,
    /// Topic.
    pub topic: String,
    /// Fixed partition; absent partitions by key.
    pub partition: Option<Bounded<i32, 0, { i128::MAX }>>,
    /// Extra librdkafka producer properties.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// The cluster's connection properties that `sluice serve` grants
    /// in memory; never read from a file.
    #[serde(skip)]
    pub granted_properties: SecretMap,
    /// `exactly-once` (the default when `[checkpoints] mode =
    /// "exactly-once"`: records become visible when their checkpoint
    /// commits) or `at-least-once`.
    pub delivery: Option<Delivery>,
    /// Compacted topic for the progress records of exactly-once
    /// transactions (default `sluice-progress`).
    pub progress_topic: Option<String>,
    /// What the pipeline's transactional ids start with (default
    /// `sluice.`; the ids are `<prefix><tenant>.<pipeline>.<0|1>`), so
    /// that prefixed ACLs can grant them.
    pub transactional_id_prefix: Option<String>,
    /// `transaction.timeout.ms` of exactly-once transactions (default:
    /// the larger of 60 s and three checkpoint intervals).
    pub transaction_timeout_ms: Option<PositiveDurationMs>,
    /// `json` (default: values as they are) or `avro-confluent`
    /// (JSON values encoded with `avro_schema`, registered in
    /// `schema_registry` under `subject`; values that do not fit are
    /// dead-lettered).
    #[serde(default)]
    pub value_format: SinkValueFormat,
    /// The Avro schema file of `value_format = "avro-confluent"`.
    pub avro_schema: Option<PathBuf>,
    /// The registry of `value_format = "avro-confluent"`.
    pub schema_registry: Option<Box<crate::connectors::schema_registry::SchemaRegistryConfig>>,
    /// The registry subject (default `<topic>-value`, Confluent's
    /// topic-name strategy).
    pub subject: Option<String>,
    /// Set by scale-out when this sink writes a repartition topic between
    /// two stages (ADR 0020); never from a file.
    #[serde(skip)]
    pub repartition: Option<super::RepartitionTarget>,
}

/// `value_format` of a Kafka sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SinkValueFormat {
    /// Values as they are (JSON from plugins).
    #[default]
    Json,
    /// Avro in the Confluent wire format, with a registered schema.
    AvroConfluent,
}

/// `delivery` of a Kafka sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// One transaction per checkpoint.
    ExactlyOnce,
    /// Idempotent producer, flushed at each barrier.
    AtLeastOnce,
}

fn default_poll_timeout_ms() -> Bounded<u64, 1, 60_000> {
    Bounded::known(100)
}
