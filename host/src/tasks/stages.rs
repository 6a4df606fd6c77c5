//! The stages of a scaled-out pipeline: it is cut before every operator
//! with a `key_by`. Each stage is a pipeline of its own to the tasks that
//! run it: stage 0 reads the pipeline's source, a later stage the
//! repartition topic the stage before it writes; the last stage writes the
//! pipeline's sinks, the others their repartition topic. Dead letters and
//! side outputs go where the file says from every stage.

use crate::config::{ConfigError, LoadedConfig, SinkConfig, SourceConfig};
use crate::connectors::kafka::{
    KafkaSinkConfig, KafkaSourceConfig, KafkaStart, RepartitionTarget, ValueFormatName,
};
use std::time::Duration;

/// One stage and the view of the pipeline file its tasks run.
pub(super) struct Stage {
    /// Its index (0: the source's stage).
    pub(super) index: u32,
    /// The stage's pipeline: its source, operators and sinks.
    pub(super) loaded: LoadedConfig,
}

impl Stage {
    /// The stage's Kafka source (its input topics and consumer group).
    pub(super) fn source(&self) -> Option<&KafkaSourceConfig> {
        match &self.loaded.config.source {
            SourceConfig::Kafka(kafka) => Some(kafka),
            _ => None,
        }
    }

    /// The repartition topic the stage writes, if it is not the last.
    pub(super) fn repartition(&self) -> Option<&RepartitionTarget> {
        match &self.loaded.config.sink {
            SinkConfig::Kafka(kafka) => kafka.repartition.as_ref(),
            _ => None,
        }
    }
}

/// The repartition topic before operator `operator`.
pub(super) fn repartition_topic(loaded: &LoadedConfig, operator: &str) -> String {
    let pipeline = &loaded.config.pipeline;
    format!(
        "{}.{}.{operator}-repartition",
        pipeline.tenant, pipeline.name
    )
}

/// Cuts `loaded` (a scaled-out pipeline whose source topics have
/// `partitions` partitions) into its stages.
pub(super) fn plan(loaded: &LoadedConfig, partitions: i32) -> Result<Vec<Stage>, ConfigError> {
    let config = &loaded.config;
    let SourceConfig::Kafka(source) = &config.source else {
        return Err(loaded.error_at("source", "only a Kafka source can be scaled out"));
    };
    let mut starts: Vec<usize> = config
        .operators
        .iter()
        .enumerate()
        .filter(|(_, op)| op.key_by.is_some())
        .map(|(index, _)| index)
        .collect();
    starts.insert(0, 0);
    starts.dedup();
    let mut stages = Vec::with_capacity(starts.len());
    for (position, &start) in starts.iter().enumerate() {
        let end = starts
            .get(position + 1)
            .copied()
            .unwrap_or(config.operators.len());
        let mut view = loaded.clone();
        view.config.operators = config.operators[start..end].to_vec();
        let index = u32::try_from(position).unwrap_or(u32::MAX);
        if position > 0 {
            let operator = &config.operators[start].name;
            view.config.source =
                SourceConfig::Kafka(repartition_source(source, loaded, operator, index));
        }
        if let Some(&next) = starts.get(position + 1) {
            let operator = &config.operators[next];
            let target = RepartitionTarget {
                topic: repartition_topic(loaded, &operator.name),
                partitions,
                key_field: operator.key_by.clone().unwrap_or_default(),
                max_parallelism: config.pipeline.max_parallelism.get(),
                task: 0,
                tasks: partitions,
                idle_timeout: config
                    .pipeline
                    .idle_timeout_ms
                    .map(|ms| Duration::from_millis(ms.get())),
            };
            view.config.sink = SinkConfig::Kafka(Box::new(repartition_sink(loaded, target)?));
        }
        stages.push(Stage {
            index,
            loaded: view,
        });
    }
    Ok(stages)
}

/// The source of the stage that starts at `operator`: its repartition
/// topic, read by its own consumer group.
fn repartition_source(
    source: &KafkaSourceConfig,
    loaded: &LoadedConfig,
    operator: &str,
    stage: u32,
) -> KafkaSourceConfig {
    KafkaSourceConfig {
        topics: vec![repartition_topic(loaded, operator)],
        group_id: format!("{}.stage-{stage}", source.group_id),
        start: KafkaStart::Earliest,
        start_timestamp_ms: None,
        // Values cross the hop as they are.
        value_format: ValueFormatName::Raw,
        avro_schema: None,
        schema_registry: None,
        timestamp_field: None,
        bounded: false,
        repartition_input: true,
        ..source.clone()
    }
}

/// The sink writing a repartition topic: on the cluster, and with the
/// transaction settings, of the pipeline's first Kafka sink (exactly-once
/// Kafka sinks of a pipeline share one transaction), else of its source.
fn repartition_sink(
    loaded: &LoadedConfig,
    target: RepartitionTarget,
) -> Result<KafkaSinkConfig, ConfigError> {
    let config = &loaded.config;
    let first_kafka_sink = std::iter::once(&config.sink)
        .chain(config.side_outputs.values())
        .chain(std::iter::once(&config.dead_letter))
        .find_map(|sink| match sink {
            SinkConfig::Kafka(kafka) => Some(kafka),
            _ => None,
        });
    let mut sink = match (first_kafka_sink, &config.source) {
        (Some(kafka), _) => KafkaSinkConfig::clone(kafka),
        (None, SourceConfig::Kafka(source)) => {
            let mut sink: KafkaSinkConfig = serde_json::from_value(serde_json::json!({
                "bootstrap_servers": source.bootstrap_servers,
                "topic": target.topic,
                "properties": crate::connectors::kafka::connection_properties(&source.properties),
            }))
            .map_err(|e| loaded.error_at("source.kafka", e.to_string()))?;
            sink.granted_properties = source.granted_properties.clone();
            sink
        }
        (None, _) => return Err(loaded.error_at("source", "only a Kafka source can be scaled out")),
    };
    sink.topic = target.topic.clone();
    sink.partition = None;
    sink.delivery = None;
    sink.value_format = Default::default();
    sink.avro_schema = None;
    sink.schema_registry = None;
    sink.subject = None;
    sink.repartition = Some(target);
    Ok(sink)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipeline_is_cut_before_every_key_by() {
        let text = r#"
[pipeline]
name = "orders"

[checkpoints]
storage = "s3://b/c"

[source.kafka]
bootstrap_servers = "k:9092"
topics = ["in"]
group_id = "g"
value_format = "json"
timestamp_field = "ts"
scale_out = true

[[operators]]
name = "clean"
plugin = "clean.wasm"

[[operators]]
name = "count"
plugin = "count.wasm"
key_by = "user"

[[operators]]
name = "sum"
window = { tumbling_ms = 1000 }
key_field = "user"
aggregate = { function = "count" }

[sink.kafka]
bootstrap_servers = "k:9092"
topic = "out"
"#;
        let dir = tempfile::tempdir().unwrap();
        for plugin in ["clean.wasm", "count.wasm"] {
            std::fs::write(dir.path().join(plugin), b"\0asm").unwrap();
        }
        let loaded = LoadedConfig::parse(&dir.path().join("orders.toml"), text).unwrap();
        let stages = plan(&loaded, 8).unwrap();
        assert_eq!(stages.len(), 2);
        let names = |stage: &Stage| -> Vec<String> {
            stage
                .loaded
                .config
                .operators
                .iter()
                .map(|op| op.name.clone())
                .collect()
        };
        assert_eq!(names(&stages[0]), ["clean"]);
        assert_eq!(names(&stages[1]), ["count", "sum"]);
        let target = stages[0].repartition().unwrap();
        assert_eq!(target.topic, "default.orders.count-repartition");
        assert_eq!((target.partitions, target.tasks), (8, 8));
        assert_eq!(target.key_field, "user");
        let input = stages[1].source().unwrap();
        assert_eq!(input.topics, std::slice::from_ref(&target.topic));
        assert_eq!(input.group_id, "g.stage-1");
        assert!(input.repartition_input && input.timestamp_field.is_none());
        assert!(stages[1].repartition().is_none());
        assert_eq!(stages[0].source().unwrap().topics, ["in"]);
    }
}
