//! Kafka connectors on `rdkafka` (librdkafka).
//!
//! * [`KafkaSource`]: a consumer-group member (cooperative rebalancing,
//!   `read_committed`) whose offsets Sluice owns: nothing is auto-committed;
//!   the offsets reached at a checkpoint barrier are committed once every sink
//!   has flushed everything before it (at-least-once).
//! * [`KafkaSink`]: an idempotent producer; key and headers kept; delivery
//!   errors retried by librdkafka, and a permanent failure fails the pipeline.
//! * [`ExactlyOnceKafkaSink`]: in a checkpointed exactly-once pipeline,
//!   every Kafka sink writes into one transaction per checkpoint
//!   ([`KafkaTransactions`]), committed after the checkpoint is published.
//! * [`TransactionalProducer`]: the transactional API (init, begin, send
//!   offsets, commit, abort), for exactly-once sinks.

mod config;
mod exactly_once;
mod format;
mod message;
mod partitioner;
mod repartition;
mod shared_reader;
mod sink;
mod source;
mod transactions;

pub use config::{
    Delivery, KafkaSinkConfig, KafkaSourceConfig, KafkaStart, SinkValueFormat, ValueFormatName,
};
pub use exactly_once::{
    DEFAULT_PROGRESS_TOPIC, DEFAULT_TRANSACTIONAL_ID_PREFIX, ExactlyOnceKafkaSink,
    KAFKA_TRANSACTIONS, KafkaTransactionOptions, KafkaTransactions,
};
pub use format::ValueFormat;
pub use partitioner::KeyPartitioner;
pub use repartition::{
    CONTROL_HEADER, RepartitionAdmin, RepartitionSink, RepartitionTarget, UpstreamMark,
    UpstreamWatermarks, partition_for_key,
};
pub use shared_reader::{ReaderContext, SharedReader, TaskReader, TaskWake};
pub use sink::{KafkaSink, KafkaSinkOptions};
pub use source::{
    KafkaAssignment, KafkaSource, KafkaSourceOptions, OffsetCommits, StartPosition, TaskOffsets,
};
pub use transactions::TransactionalProducer;

use rdkafka::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use std::collections::BTreeMap;

/// A librdkafka client configuration from the bootstrap servers and extra
/// properties (which override the defaults set by the caller).
pub(crate) fn client_config(
    bootstrap_servers: &str,
    defaults: &[(&str, &str)],
    properties: &BTreeMap<String, String>,
) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap_servers);
    for (key, value) in defaults {
        config.set(*key, *value);
    }
    for (key, value) in properties {
        config.set(key, value);
    }
    config
}

/// The properties of `properties` that say how to reach and authenticate
/// with the cluster (security protocol, SASL, TLS, sockets, DNS): what a
/// pipeline's admin client and progress reader need beside its producers,
/// without the producer tuning they would warn about.
pub(crate) fn connection_properties(
    properties: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    properties
        .iter()
        .filter(|(key, _)| {
            ["security.", "sasl.", "ssl.", "ssl_", "socket.", "broker."]
                .iter()
                .any(|prefix| key.starts_with(prefix))
                || key.as_str() == "client.dns.lookup"
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// Drops `consumer` on a thread of its own. rust-rdkafka's drop of a
/// consumer with a group id polls for the close in steps of 100 ms: a
/// reader that only assigned a partition (the progress reads of a
/// restart) made the restart wait that long for nothing.
pub(crate) fn close_in_background<C>(consumer: rdkafka::consumer::BaseConsumer<C>)
where
    C: rdkafka::consumer::ConsumerContext + 'static,
{
    // Should the thread not start, the consumer is dropped here.
    let _ = std::thread::Builder::new()
        .name("kafka-close".into())
        .spawn(move || drop(consumer));
}

/// Logs a librdkafka log line as rust-rdkafka's default client context
/// does (target `librdkafka`), for contexts that log it in a span of their
/// own.
pub(crate) fn log_client_message(level: RDKafkaLogLevel, facility: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => {
            tracing::error!(target: "librdkafka", "librdkafka: {facility} {message}")
        }
        RDKafkaLogLevel::Warning => {
            tracing::warn!(target: "librdkafka", "librdkafka: {facility} {message}")
        }
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", "librdkafka: {facility} {message}")
        }
        RDKafkaLogLevel::Debug => {
            tracing::debug!(target: "librdkafka", "librdkafka: {facility} {message}")
        }
    }
}
