//! The source of a pipeline, from its `[source]` section.

use super::PipelineError;
use crate::config::{LoadedConfig, SourceConfig};
use crate::connectors::file::{FileSource, FileSourceOptions};
use crate::connectors::generator::{GeneratorOptions, GeneratorSource};
use crate::connectors::kafka::{
    KafkaAssignment, KafkaSource, KafkaSourceOptions, StartPosition, ValueFormat,
};
use crate::connectors::kafka::{KafkaStart, ValueFormatName};
use crate::connectors::schema_registry::{ConfluentAvroDecoder, SchemaRegistry};
use crate::dataflow::Source;
use crate::metrics::PipelineMetrics;
use std::time::Duration;

/// Builds the `[source]` section's source; `task`: the partitions of one
/// task of a scaled-out Kafka pipeline (ADR 0020) instead of a group
/// member's.
pub(super) fn build_source(
    loaded: &LoadedConfig,
    metrics: &PipelineMetrics,
    task: Option<KafkaAssignment>,
) -> Result<Box<dyn Source>, PipelineError> {
    let name = loaded.config.pipeline.name.clone();
    Ok(match &loaded.config.source {
        SourceConfig::Generator(g) => Box::new(GeneratorSource::new(
            name,
            GeneratorOptions {
                profile: g.profile,
                count: g.count,
                rate: g.rate,
                seed: g.seed,
                value_bytes: g.value_bytes.get(),
                invalid_ratio: g.invalid_ratio,
                duplicate_ratio: g.duplicate_ratio,
                events_per_second: g.events_per_second,
                max_disorder_ms: g.max_disorder_ms.get(),
                nexmark_encoding: g.encoding,
                ..GeneratorOptions::default()
            },
        )),
        SourceConfig::File(f) => Box::new(
            FileSource::open(
                name,
                &loaded.resolve_path(&f.path),
                FileSourceOptions {
                    format: f.format,
                    key_field: f.key_field.clone(),
                    timestamp_field: f.timestamp_field.clone(),
                },
            )
            .map_err(|error| loaded.error_at("source.file.path", error.to_string()))?,
        ),
        SourceConfig::Kafka(k) => {
            let field = "source.kafka.avro_schema";
            let schema = k
                .avro_schema
                .as_deref()
                .map(|path| loaded.avro_schema(field, path))
                .transpose()?;
            let value_format = match (k.value_format, schema) {
                (ValueFormatName::Raw, _) => ValueFormat::Raw,
                (ValueFormatName::Json, _) => ValueFormat::Json,
                (ValueFormatName::Avro, Some(schema)) => ValueFormat::Avro(Box::new(schema)),
                (ValueFormatName::Avro, None) => {
                    return Err(loaded.error_at(field, "`avro` needs `avro_schema`").into());
                }
                (ValueFormatName::AvroConfluent, reader) => {
                    let field = "source.kafka.schema_registry";
                    let registry = k
                        .schema_registry
                        .as_ref()
                        .ok_or_else(|| loaded.error_at(field, "`avro-confluent` needs it"))
                        .and_then(|config| {
                            SchemaRegistry::new(config).map_err(|why| loaded.error_at(field, why))
                        })?;
                    ValueFormat::ConfluentAvro(Box::new(ConfluentAvroDecoder::new(
                        registry, reader,
                    )))
                }
            };
            let start = match (k.start_timestamp_ms, k.start) {
                (Some(millis), _) => StartPosition::Timestamp(millis.get()),
                (None, KafkaStart::Committed) => StartPosition::Committed,
                (None, KafkaStart::Earliest) => StartPosition::Earliest,
                (None, KafkaStart::Latest) => StartPosition::Latest,
            };
            Box::new(
                KafkaSource::new(
                    name,
                    KafkaSourceOptions {
                        bootstrap_servers: k.bootstrap_servers.clone(),
                        topics: k.topics.clone(),
                        group_id: k.group_id.clone(),
                        start,
                        value_format,
                        properties: k.granted_properties.over(&k.properties),
                        poll_timeout: Duration::from_millis(k.poll_timeout_ms.get()),
                        timestamp_field: k.timestamp_field.clone(),
                        // A checkpointed pipeline restarts quickly after a
                        // crash: its restart takes over at once. (A task's
                        // consumer joins no group: its process's membership
                        // does.)
                        group_instance_id: loaded
                            .config
                            .checkpoints
                            .as_ref()
                            .filter(|_| task.is_none())
                            .map(|_| {
                                format!(
                                    "sluice.{}.{}",
                                    loaded.config.pipeline.tenant, loaded.config.pipeline.name
                                )
                            }),
                        bounded: k.bounded,
                        assignment: task,
                        upstream_watermarks: k.repartition_input,
                    },
                    metrics.source_partitions.clone(),
                )
                .map_err(|error| loaded.error_at("source.kafka", error.to_string()))?,
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::test_files::pipeline;

    #[test]
    fn the_source_is_named_after_its_pipeline() {
        let loaded = pipeline("");
        let source = build_source(&loaded, &PipelineMetrics::default(), None).unwrap();
        assert_eq!(source.name(), "p");
    }

    #[test]
    fn a_file_source_that_cannot_be_read_fails_to_build_naming_its_path() {
        let mut loaded = pipeline("");
        loaded.config.source =
            SourceConfig::File(toml::from_str("path = \"/nonexistent/in.jsonl\"").unwrap());
        let error = build_source(&loaded, &PipelineMetrics::default(), None)
            .err()
            .map(|e| e.to_string());
        assert!(error.is_some_and(|e| e.contains("/nonexistent/in.jsonl")));
    }
}
