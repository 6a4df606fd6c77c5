//! The sinks of a pipeline: main, dead-letter and side outputs, each
//! written plainly, at-least-once or exactly-once as its checkpoints ask.

use super::PipelineError;
use crate::bounded::Bounded;
use crate::checkpoint::CheckpointMode;
use crate::checkpoint::workdir::new_open_id;
use crate::config::{LoadedConfig, SinkConfig};
use crate::connectors::blackhole::BlackholeSink;
use crate::connectors::file::{ExactlyOnceFileSink, JsonLinesSink, OutputFormat};
use crate::connectors::iceberg::{IcebergCommits, IcebergSink};
use crate::connectors::kafka::{
    DEFAULT_PROGRESS_TOPIC, DEFAULT_TRANSACTIONAL_ID_PREFIX, ExactlyOnceKafkaSink, KafkaSink,
    KafkaSinkOptions, KafkaTransactionOptions, KafkaTransactions, RepartitionSink,
};
use crate::connectors::kafka::{Delivery, KafkaSinkConfig, SinkValueFormat, TaskOffsets};
use crate::connectors::postgres::PostgresSink;
use crate::connectors::schema_registry::{ConfluentAvroEncoder, ConfluentAvroSink, SchemaRegistry};
use crate::dataflow::{Sink, SinkSet};
use crate::metrics::PipelineMetrics;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How the sinks of a pipeline write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SinkMode {
    /// No checkpoints: files are created afresh, barriers flush.
    Plain,
    /// Checkpoints at-least-once: files continue (`append`) after a
    /// restore.
    AtLeastOnce {
        /// Whether a checkpoint will be restored.
        append: bool,
    },
    /// Checkpoints exactly-once: sinks that can commit in two phases do.
    ExactlyOnce {
        /// This process's database open (names part files).
        open_id: String,
    },
}

/// The main, dead-letter and side-output sinks of `loaded`. A scaled-out
/// task passes its `task_offsets`: exactly-once Kafka sinks commit them in
/// their transactions.
pub(super) fn build_sinks(
    loaded: &LoadedConfig,
    metrics: &PipelineMetrics,
    mode: &SinkMode,
    task_offsets: Option<Arc<TaskOffsets>>,
) -> Result<SinkSet, PipelineError> {
    let config = &loaded.config;
    let mut factory = SinkFactory {
        loaded,
        metrics,
        mode,
        kafka_transactions: None,
        task_offsets,
    };
    let mut side = BTreeMap::new();
    for (name, sink) in &config.side_outputs {
        let field = format!("side_outputs.{name}");
        side.insert(
            name.clone(),
            factory.build(&field, sink, OutputFormat::Value)?,
        );
    }
    let main = factory.build("sink", &config.sink, OutputFormat::Value)?;
    let dead_letter = factory.build("dead_letter", &config.dead_letter, OutputFormat::Record)?;
    let sinks = SinkSet {
        main,
        dead_letter,
        side,
    };
    if let SinkMode::ExactlyOnce { .. } = mode {
        let all = std::iter::once(&sinks.main)
            .chain(sinks.side.values())
            .chain(std::iter::once(&sinks.dead_letter));
        for sink in all.filter(|sink| sink.committer().is_none()) {
            tracing::warn!(
                sink = %sink.name(),
                "this sink cannot commit in two phases: after a restore it may write records again (at-least-once)"
            );
        }
    }
    Ok(sinks)
}

/// Builds the sinks of one pipeline; exactly-once Kafka sinks share one
/// set of transactions.
pub(super) struct SinkFactory<'a> {
    loaded: &'a LoadedConfig,
    metrics: &'a PipelineMetrics,
    mode: &'a SinkMode,
    /// The pipeline's Kafka transactions, and the sink that set them up.
    kafka_transactions: Option<(String, Arc<KafkaTransactions>)>,
    /// A scaled-out task's consumed offsets.
    task_offsets: Option<Arc<TaskOffsets>>,
}

impl SinkFactory<'_> {
    fn build(
        &mut self,
        field: &str,
        sink: &SinkConfig,
        default_format: OutputFormat,
    ) -> Result<Box<dyn Sink>, PipelineError> {
        let loaded = self.loaded;
        Ok(match sink {
            SinkConfig::File(file) => {
                let path = loaded.resolve_path(&file.path);
                let format = file.format.unwrap_or(default_format);
                let error = |error: std::io::Error| {
                    loaded.error_at(
                        &format!("{field}.file.path"),
                        format!("cannot create {}: {error}", path.display()),
                    )
                };
                match self.mode {
                    SinkMode::Plain | SinkMode::AtLeastOnce { append: false } => {
                        Box::new(JsonLinesSink::create(field, &path, format).map_err(error)?)
                    }
                    SinkMode::AtLeastOnce { append: true } => {
                        Box::new(JsonLinesSink::append(field, &path, format).map_err(error)?)
                    }
                    SinkMode::ExactlyOnce { open_id } => Box::new(
                        ExactlyOnceFileSink::new(field, &path, format, open_id).map_err(error)?,
                    ),
                }
            }
            SinkConfig::Stdout { format } => Box::new(JsonLinesSink::new(
                field,
                Box::new(std::io::stdout()),
                format.unwrap_or(default_format),
            )),
            SinkConfig::Stderr { format } => Box::new(JsonLinesSink::new(
                field,
                Box::new(std::io::stderr()),
                format.unwrap_or(default_format),
            )),
            SinkConfig::Blackhole {} => Box::new(BlackholeSink),
            SinkConfig::Iceberg(iceberg) => {
                let (open_id, commits) = match self.mode {
                    SinkMode::ExactlyOnce { open_id } => {
                        (open_id.clone(), IcebergCommits::TwoPhase)
                    }
                    SinkMode::AtLeastOnce { .. } => (new_open_id(), IcebergCommits::EveryWrite),
                    SinkMode::Plain => (new_open_id(), IcebergCommits::AtBarriers),
                };
                let base = loaded
                    .file
                    .parent()
                    .unwrap_or_else(|| std::path::Path::new("."));
                let pipeline = &loaded.config.pipeline;
                Box::new(
                    IcebergSink::open(
                        field,
                        iceberg,
                        base,
                        &pipeline.tenant,
                        &pipeline.name,
                        &open_id,
                        commits,
                    )
                    .map_err(|error| loaded.error_at(&format!("{field}.iceberg"), error.0))?,
                )
            }
            SinkConfig::Postgres(postgres) => {
                let pipeline = &loaded.config.pipeline;
                let (open_id, exactly_once) = match self.mode {
                    SinkMode::ExactlyOnce { open_id } => (open_id.clone(), true),
                    SinkMode::AtLeastOnce { .. } | SinkMode::Plain => (new_open_id(), false),
                };
                let owner = format!("{}/{}/{field}", pipeline.tenant, pipeline.name);
                Box::new(
                    PostgresSink::open(
                        field,
                        postgres,
                        &owner,
                        &open_id,
                        exactly_once,
                        self.metrics.sink_health.clone(),
                    )
                    .map_err(|error| {
                        let at = match error.field.as_str() {
                            "" => format!("{field}.postgres"),
                            name => format!("{field}.postgres.{name}"),
                        };
                        loaded.error_at(&at, error.message)
                    })?,
                )
            }
            SinkConfig::Kafka(kafka) => {
                // Set up (and register) the encoding first: a registry that
                // refuses the schema stops the pipeline before any output.
                let encoder = match kafka.value_format {
                    SinkValueFormat::Json => None,
                    SinkValueFormat::AvroConfluent => {
                        let schema_field = format!("{field}.kafka.avro_schema");
                        let registry_field = format!("{field}.kafka.schema_registry");
                        let schema = kafka
                            .avro_schema
                            .as_deref()
                            .ok_or_else(|| {
                                loaded.error_at(&schema_field, "`avro-confluent` needs it")
                            })
                            .and_then(|path| loaded.avro_schema(&schema_field, path))?;
                        let registry = kafka
                            .schema_registry
                            .as_ref()
                            .ok_or_else(|| {
                                loaded.error_at(&registry_field, "`avro-confluent` needs it")
                            })
                            .and_then(|config| {
                                SchemaRegistry::new(config)
                                    .map_err(|why| loaded.error_at(&registry_field, why))
                            })?;
                        let subject = kafka
                            .subject
                            .clone()
                            .unwrap_or_else(|| format!("{}-value", kafka.topic));
                        Some(
                            ConfluentAvroEncoder::register(&registry, &subject, schema)
                                .map_err(|why| loaded.error_at(&registry_field, why.to_string()))?,
                        )
                    }
                };
                let sink = self.kafka_sink(field, kafka)?;
                match encoder {
                    Some(encoder) => Box::new(ConfluentAvroSink::new(sink, encoder)),
                    None => sink,
                }
            }
        })
    }

    /// A Kafka sink, exactly-once or not, of the sink config `kafka`.
    fn kafka_sink(
        &mut self,
        field: &str,
        kafka: &KafkaSinkConfig,
    ) -> Result<Box<dyn Sink>, PipelineError> {
        let loaded = self.loaded;
        let delivery = &kafka.delivery;
        Ok({
            let exactly_once = matches!(self.mode, SinkMode::ExactlyOnce { .. })
                && *delivery != Some(Delivery::AtLeastOnce);
            if exactly_once {
                let transactions = self.kafka_transactions(field, kafka)?;
                match &kafka.repartition {
                    Some(target) => Box::new(RepartitionSink::exactly_once(
                        field,
                        target.clone(),
                        transactions,
                    )),
                    None => Box::new(ExactlyOnceKafkaSink::new(
                        field,
                        kafka.topic.clone(),
                        kafka.partition.map(Bounded::get),
                        transactions,
                    )),
                }
            } else {
                if *delivery == Some(Delivery::ExactlyOnce) {
                    return Err(loaded
                            .error_at(
                                &format!("{field}.kafka.delivery"),
                                "exactly-once delivery needs `[checkpoints]` with mode = \"exactly-once\"",
                            )
                            .into());
                }
                let sink = KafkaSink::new(
                    field,
                    KafkaSinkOptions {
                        bootstrap_servers: kafka.bootstrap_servers.clone(),
                        topic: kafka.topic.clone(),
                        partition: kafka.partition.map(Bounded::get),
                        properties: kafka.granted_properties.over(&kafka.properties),
                        flush_timeout: Duration::from_secs(60),
                    },
                    self.metrics.sink_partitions.clone(),
                )
                .map_err(|error| loaded.error_at(&format!("{field}.kafka"), error.to_string()))?;
                match &kafka.repartition {
                    Some(target) => {
                        Box::new(RepartitionSink::at_least_once(field, target.clone(), sink))
                    }
                    None => Box::new(sink),
                }
            }
        })
    }

    /// The pipeline's Kafka transactions, set up by the first exactly-once
    /// Kafka sink; later ones must name the same cluster and settings (one
    /// transaction spans them all).
    fn kafka_transactions(
        &mut self,
        field: &str,
        kafka: &KafkaSinkConfig,
    ) -> Result<Arc<KafkaTransactions>, PipelineError> {
        let loaded = self.loaded;
        let checkpoints = loaded.config.checkpoints.as_ref();
        let interval_ms = checkpoints.map_or(0, |c| c.interval_ms.get());
        let options = KafkaTransactionOptions {
            bootstrap_servers: kafka.bootstrap_servers.clone(),
            properties: kafka.granted_properties.over(&kafka.properties),
            transactional_id_prefix: kafka
                .transactional_id_prefix
                .clone()
                .unwrap_or_else(|| DEFAULT_TRANSACTIONAL_ID_PREFIX.to_string()),
            tenant: loaded.config.pipeline.tenant.clone(),
            pipeline: loaded.config.pipeline.name.clone(),
            progress_topic: kafka
                .progress_topic
                .clone()
                .unwrap_or_else(|| DEFAULT_PROGRESS_TOPIC.to_string()),
            transaction_timeout: Duration::from_millis(transaction_timeout(
                kafka.transaction_timeout_ms.map(Bounded::get),
                interval_ms,
            )),
            operation_timeout: Duration::from_secs(60),
            open_id: match self.mode {
                SinkMode::ExactlyOnce { open_id } => open_id.clone(),
                _ => String::new(),
            },
        };
        if let Some((first, transactions)) = &self.kafka_transactions {
            let shared = &transactions.options();
            if shared.bootstrap_servers != options.bootstrap_servers
                || shared.properties != options.properties
                || shared.progress_topic != options.progress_topic
                || shared.transactional_id_prefix != options.transactional_id_prefix
                || shared.transaction_timeout != options.transaction_timeout
            {
                return Err(loaded
                    .error_at(
                        &format!("{field}.kafka"),
                        format!(
                            "exactly-once Kafka sinks share one transaction: this one must name the same cluster, properties, progress topic, transactional id prefix and transaction timeout as `{first}`"
                        ),
                    )
                    .into());
            }
            return Ok(transactions.clone());
        }
        if options.transaction_timeout.as_millis() <= u128::from(interval_ms) {
            return Err(loaded
                .error_at(
                    &format!("{field}.kafka.transaction_timeout_ms"),
                    format!(
                        "must exceed checkpoints.interval_ms = {interval_ms}: a transaction stays open for an interval plus the checkpoint's duration"
                    ),
                )
                .into());
        }
        let transactions = KafkaTransactions::new(options, self.metrics.sink_partitions.clone())
            .map_err(|message| loaded.error_at(&format!("{field}.kafka"), message))?;
        if let Some(offsets) = &self.task_offsets {
            transactions.commit_task_offsets(offsets.clone());
        }
        self.kafka_transactions = Some((field.to_string(), transactions.clone()));
        Ok(transactions)
    }
}

/// A Kafka sink's transaction timeout, ms: as set, or three checkpoint
/// intervals and at least a minute.
pub(super) fn transaction_timeout(set: Option<u64>, interval_ms: u64) -> u64 {
    set.unwrap_or(interval_ms.saturating_mul(3).max(60_000))
}

/// How long checkpoints of the pipeline `config` may be held: less than
/// its exactly-once Kafka sinks' transaction timeout minus an interval
/// (`None`: no such sink, no limit).
pub(super) fn hold_limit(config: &crate::config::PipelineConfig) -> Option<Duration> {
    let checkpoints = config.checkpoints.as_ref()?;
    if checkpoints.mode != CheckpointMode::ExactlyOnce {
        return None;
    }
    std::iter::once(&config.sink)
        .chain(std::iter::once(&config.dead_letter))
        .chain(config.side_outputs.values())
        .filter_map(|sink| match sink {
            SinkConfig::Kafka(kafka) => Some(transaction_timeout(
                kafka.transaction_timeout_ms.map(Bounded::get),
                checkpoints.interval_ms.get(),
            )),
            _ => None,
        })
        .min()
        .map(|timeout| Duration::from_millis(timeout.saturating_sub(checkpoints.interval_ms.get())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::test_files::pipeline;

    #[test]
    fn transactions_outlive_three_intervals_and_at_least_a_minute() {
        assert_eq!(transaction_timeout(Some(5_000), 1_000), 5_000);
        assert_eq!(transaction_timeout(None, 1_000), 60_000);
        assert_eq!(transaction_timeout(None, 30_000), 90_000);
    }

    #[test]
    fn checkpoints_are_held_less_than_the_shortest_transaction_less_an_interval() {
        let kafka = |section: &str, timeout: u64| {
            format!(
                "[{section}.kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\ntopic = \"t\"\ntransaction_timeout_ms = {timeout}\n"
            )
        };
        let checkpoints = "[checkpoints]\ninterval_ms = 1000\nmode = \"exactly-once\"\n";
        let mut loaded = pipeline(&format!("{checkpoints}{}", kafka("dead_letter", 90_000)));
        assert_eq!(
            hold_limit(&loaded.config),
            Some(Duration::from_millis(89_000))
        );
        loaded.config.checkpoints = None;
        assert_eq!(hold_limit(&loaded.config), None, "no checkpoints, no hold");
        let loaded = pipeline(&format!(
            "{}{}",
            checkpoints.replace("exactly-once", "at-least-once"),
            kafka("dead_letter", 90_000)
        ));
        assert_eq!(hold_limit(&loaded.config), None, "no transactions");
    }
}
