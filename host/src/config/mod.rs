//! The pipeline file (TOML).
//!
//! ```toml
//! [pipeline]
//! name = "quickstart"
//!
//! [source.generator]         # or [source.file]
//! profile = "bronze"
//! count = 10000
//!
//! [[operators]]
//! name = "validate"
//! plugin = "../../plugins/validate-dedup"   # a .wasm file or a plugin crate
//! config = { required = "event_id,amount" }
//!
//! [sink.file]                # or [sink.stdout], [sink.stderr], sink = "blackhole"
//! path = "out/silver.jsonl"
//!
//! [dead_letter.file]
//! path = "out/dead-letter.jsonl"
//! ```
//!
//! Sections that come in kinds name the kind as a sub-table (`[sink.file]`)
//! rather than with a `kind = ...` field: that keeps every field's position
//! known to the parser, so errors inside them are located exactly (ADR 0003).
//!
//! Every error — syntax, unknown or mistyped field, invalid value — names
//! the file, line and field ([`ConfigError`]). Relative paths are relative
//! to the pipeline file's directory.

mod locate;

pub use locate::FieldMap;

use crate::bounded::{AtLeastOne, Bounded, DurationMs, OffsetMs, PositiveDurationMs};
use crate::connectors::SecretMap;
use crate::connectors::file::{FileFormat, OutputFormat};
use crate::connectors::generator::Profile;
use crate::runtime::CallMode;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use crate::bounded::MAX_DURATION_MS;

/// The largest `pipeline.batch_size`.
pub const MAX_BATCH_SIZE: usize = 65_536;

/// The most `pipeline.workers`.
pub const MAX_WORKERS: usize = 1024;

/// The longest CPU deadline of a plugin call or of its instantiation, ms.
pub const MAX_CALL_DEADLINE_MS: u64 = 600_000;

/// A plugin call's CPU deadline, ms.
pub type CallDeadlineMs = Bounded<u64, 1, { MAX_CALL_DEADLINE_MS as i128 }>;

/// A configuration error, located.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}:{column}: {}{message}", file.display(), field.as_ref().map(|f| format!("field `{f}`: ")).unwrap_or_default())]
pub struct ConfigError {
    /// The pipeline file.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// Dotted path of the field, e.g. `operators[0].plugin`.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// The whole pipeline file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Pipeline-wide settings.
    pub pipeline: PipelineSection,
    /// Where records come from.
    pub source: SourceConfig,
    /// Transform operators, applied in order.
    #[serde(default)]
    pub operators: Vec<OperatorConfig>,
    /// The main output.
    pub sink: SinkConfig,
    /// Where dead-lettered records go (default: stderr, whole records).
    #[serde(default = "default_dead_letter")]
    pub dead_letter: SinkConfig,
    /// Sinks for named side outputs.
    #[serde(default)]
    pub side_outputs: BTreeMap<String, SinkConfig>,
    /// Checkpoints to durable storage, restored on restart. Absent: the
    /// pipeline keeps no checkpoint (barriers still flush the sinks and
    /// commit Kafka offsets: at-least-once).
    pub checkpoints: Option<CheckpointsSection>,
    /// How `sluice serve` verifies a plugin version deployed into the
    /// running pipeline before keeping it (`[deploy]`).
    #[serde(default)]
    pub deploy: crate::dataflow::deploy::VerifyPolicy,
}

/// `[checkpoints]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsSection {
    /// `file:///dir`, a path (relative to the pipeline file), or
    /// `s3://bucket/prefix`. Default: `.sluice/checkpoints` beside the
    /// pipeline file. Checkpoints of a pipeline go under
    /// `<storage>/<tenant>/<pipeline>/`.
    pub storage: Option<String>,
    /// Between checkpoints, ms.
    #[serde(default = "default_checkpoint_interval")]
    pub interval_ms: PositiveDurationMs,
    /// A checkpoint not completed within this fails the pipeline, ms.
    #[serde(default = "default_checkpoint_timeout")]
    pub timeout_ms: PositiveDurationMs,
    /// Completed checkpoints kept.
    #[serde(default = "default_retained")]
    pub retained: Bounded<usize, 1, 10_000>,
    /// `exactly-once` (default) or `at-least-once`.
    #[serde(default)]
    pub mode: crate::checkpoint::CheckpointMode,
    /// Checkpoints in flight at once (only 1 is supported).
    #[serde(default = "default_max_concurrent")]
    pub max_concurrent: usize,
    /// S3 settings overriding the AWS environment chain.
    #[serde(default)]
    pub s3: crate::checkpoint::s3::S3Options,
}

fn default_checkpoint_interval() -> PositiveDurationMs {
    Bounded::known(10_000)
}

fn default_checkpoint_timeout() -> PositiveDurationMs {
    Bounded::known(600_000)
}

fn default_retained() -> Bounded<usize, 1, 10_000> {
    Bounded::known(3)
}

fn default_max_concurrent() -> usize {
    1
}

/// `[pipeline]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSection {
    /// Pipeline name (scopes state and logs).
    pub name: String,
    /// Tenant owning the pipeline.
    #[serde(default = "default_tenant")]
    pub tenant: String,
    /// Records per batch.
    #[serde(default = "default_batch_size")]
    pub batch_size: Bounded<usize, 1, { MAX_BATCH_SIZE as i128 }>,
    /// Batches the source may run ahead of the operators.
    #[serde(default = "default_channel_capacity")]
    pub channel_capacity: Bounded<usize, 1, 65_536>,
    /// Interval between checkpoint barriers, ms (0 disables them).
    #[serde(default = "default_barrier_interval")]
    pub checkpoint_interval_ms: DurationMs,
    /// Watermark lag behind the highest event time seen (per split), ms.
    #[serde(default)]
    pub max_out_of_orderness_ms: DurationMs,
    /// After this long without records a source split (Kafka partition) no
    /// longer holds the watermark back, ms; absent: a silent split holds it
    /// back forever.
    pub idle_timeout_ms: Option<PositiveDurationMs>,
    /// Where operator state lives: `rocksdb` (default) or `memory`.
    #[serde(default)]
    pub state_backend: StateBackendKind,
    /// RocksDB directory; by default a temporary directory removed when the
    /// run ends (state lasts one run until checkpoints restore it).
    pub state_dir: Option<PathBuf>,
    /// Worker threads for the keyed operators (windows, joins) and those
    /// after them; each owns a range of key groups.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Number of key groups keyed state is split into (fixed for the life
    /// of the state; bounds parallelism).
    #[serde(default = "default_max_parallelism")]
    pub max_parallelism: MaxParallelism,
    /// Memory a keyed operator keeps state in, MiB (split among its
    /// workers): windows of recently used keys, and join records not yet
    /// written. Beyond it, state lives only in the state backend and is
    /// read back when needed.
    #[serde(default = "default_state_cache_mb")]
    pub state_cache_mb: Bounded<u64, 0, { 1 << 20 }>,
    /// Records over which what windows do to state kept in the backend is
    /// combined in memory before the backend sees it (a mini-batch:
    /// partial aggregates written once per window, windows read back once
    /// and written once); 0: after every batch. Checkpoints and reads
    /// always see all of it.
    #[serde(default = "default_state_mini_batch_records")]
    pub state_mini_batch_records: Bounded<u64, 0, { 1 << 24 }>,
    /// How often the source sends a latency marker, ms (0: never): the
    /// samples of the record latency metric (Flink's
    /// `metrics.latency.interval`).
    #[serde(default = "default_latency_marker_interval")]
    pub latency_marker_interval_ms: DurationMs,
}

fn default_latency_marker_interval() -> DurationMs {
    Bounded::known(200)
}

fn default_state_mini_batch_records() -> Bounded<u64, 0, { 1 << 24 }> {
    Bounded::known(crate::window::DEFAULT_MINI_BATCH_RECORDS as u64)
}

fn default_state_cache_mb() -> Bounded<u64, 0, { 1 << 20 }> {
    Bounded::known((crate::window::DEFAULT_WINDOW_CACHE_BYTES >> 20) as u64)
}

/// `[pipeline] state_backend`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateBackendKind {
    /// RocksDB: state larger than memory, column family per operator.
    #[default]
    Rocksdb,
    /// In memory: for tests and small jobs.
    Memory,
}

fn default_workers() -> usize {
    1
}

/// `pipeline.max_parallelism`: key groups, at least one.
pub type MaxParallelism = Bounded<u16, 1, { crate::state::key_group::MAX_KEY_GROUPS as i128 }>;

fn default_max_parallelism() -> MaxParallelism {
    Bounded::known(crate::state::key_group::DEFAULT_MAX_PARALLELISM)
}

/// `window` of an operator.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// Tumbling windows of this length, ms.
    pub tumbling_ms: Option<u64>,
    /// Sliding windows of this length, ms (with `slide_ms`).
    pub sliding_ms: Option<u64>,
    /// Distance between sliding window starts, ms.
    pub slide_ms: Option<u64>,
    /// Session windows closed by this much inactivity, ms.
    pub session_gap_ms: Option<u64>,
}

impl WindowConfig {
    /// The window kind, or what is wrong with the table.
    pub fn spec(&self) -> Result<crate::window::WindowSpec, String> {
        use crate::window::WindowSpec;
        let positive = |value: u64, name: &str| -> Result<i64, String> {
            match i64::try_from(value) {
                Ok(ms) if ms > 0 && value <= MAX_DURATION_MS => Ok(ms),
                _ => Err(format!(
                    "`{name}` must be a positive number of milliseconds, at most {MAX_DURATION_MS} (100 years) (found {value})"
                )),
            }
        };
        match (self.tumbling_ms, self.sliding_ms, self.slide_ms, self.session_gap_ms) {
            (Some(size), None, None, None) => Ok(WindowSpec::Tumbling {
                size: positive(size, "tumbling_ms")?,
            }),
            (None, Some(size), Some(slide), None) => {
                let (size, slide) = (positive(size, "sliding_ms")?, positive(slide, "slide_ms")?);
                if slide > size {
                    return Err("`slide_ms` must not exceed `sliding_ms`".into());
                }
                Ok(WindowSpec::Sliding { size, slide })
            }
            (None, None, None, Some(gap)) => Ok(WindowSpec::Session {
                gap: positive(gap, "session_gap_ms")?,
            }),
            _ => Err(
                "set exactly one of `tumbling_ms`, `sliding_ms` with `slide_ms`, or `session_gap_ms`"
                    .into(),
            ),
        }
    }
}

/// `join` of an operator: an interval join. Each side is chosen by topic
/// (`left_topic`) or by a field value (`left_field` = `left_value`), and has
/// a key field; right records join left ones with the same key when
/// `left.time + lower_ms <= right.time <= left.time + upper_ms`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinConfig {
    /// Left records: those read from this topic (or file).
    pub left_topic: Option<String>,
    /// Left records: those whose `left_field` is `left_value`.
    pub left_field: Option<String>,
    /// See `left_field`.
    pub left_value: Option<String>,
    /// The left side's join key field.
    pub left_key: String,
    /// Right records: those read from this topic (or file).
    pub right_topic: Option<String>,
    /// Right records: those whose `right_field` is `right_value`.
    pub right_field: Option<String>,
    /// See `right_field`.
    pub right_value: Option<String>,
    /// The right side's join key field.
    pub right_key: String,
    /// Lower bound of `right.time - left.time`, ms.
    #[serde(default)]
    pub lower_ms: OffsetMs,
    /// Upper bound of `right.time - left.time`, ms.
    pub upper_ms: OffsetMs,
}

impl JoinConfig {
    /// The two sides, or what is wrong with the table.
    pub fn sides(&self) -> Result<(crate::join::JoinSide, crate::join::JoinSide), String> {
        use crate::join::{JoinSide, SideSelector};
        let side = |name: &str,
                    topic: &Option<String>,
                    field: &Option<String>,
                    value: &Option<String>,
                    key: &str|
         -> Result<JoinSide, String> {
            let selector = match (topic, field, value) {
                (Some(topic), None, None) => SideSelector::Topic(topic.clone()),
                (None, Some(field), Some(value)) => SideSelector::FieldEquals {
                    field: field.clone(),
                    value: value.clone(),
                },
                _ => {
                    return Err(format!(
                        "set either `{name}_topic` or both `{name}_field` and `{name}_value`"
                    ));
                }
            };
            Ok(JoinSide {
                selector,
                key_field: key.to_string(),
            })
        };
        if self.lower_ms > self.upper_ms {
            return Err("`lower_ms` must not exceed `upper_ms`".into());
        }
        Ok((
            side(
                "left",
                &self.left_topic,
                &self.left_field,
                &self.left_value,
                &self.left_key,
            )?,
            side(
                "right",
                &self.right_topic,
                &self.right_field,
                &self.right_value,
                &self.right_key,
            )?,
        ))
    }
}

/// `aggregate` of a window operator.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateConfig {
    /// `count`, `sum`, `min`, `max` or `avg`.
    pub function: crate::window::BuiltinFunction,
    /// The numeric field (`price`, `a.b`, a JSON pointer) or `length(field)`
    /// of a string field; not for `count`.
    pub field: Option<String>,
}

/// One of `aggregates = [..]` of a window operator: a named column of the
/// window's result object.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedAggregateConfig {
    /// The column's name in the result object.
    pub name: String,
    /// `count`, `sum`, `min`, `max` or `avg`.
    pub function: crate::window::BuiltinFunction,
    /// As [`AggregateConfig::field`].
    pub field: Option<String>,
}

/// `[source]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum SourceConfig {
    /// Generated records.
    Generator(GeneratorConfig),
    /// A JSON-lines or Avro file.
    File(FileSourceConfig),
    /// Kafka topics, as a consumer-group member.
    Kafka(KafkaSourceConfig),
}

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

/// `[source.generator]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorConfig {
    /// `bronze`, `nexmark` or `payload`.
    #[serde(default)]
    pub profile: Profile,
    /// Records to generate; absent for unbounded.
    pub count: Option<u64>,
    /// Records per second; absent for as fast as possible.
    pub rate: Option<u64>,
    /// Random seed.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Value size of the `payload` profile.
    #[serde(default = "default_value_bytes")]
    pub value_bytes: Bounded<usize, 0, { 16 << 20 }>,
    /// Fraction of invalid `bronze` events.
    #[serde(default = "default_ratio")]
    pub invalid_ratio: f64,
    /// Fraction of duplicated `bronze` events.
    #[serde(default = "default_ratio")]
    pub duplicate_ratio: f64,
    /// Event-time rate: records per second of event time.
    #[serde(default = "default_events_per_second")]
    pub events_per_second: u64,
    /// Largest event-time disorder, ms.
    #[serde(default)]
    pub max_disorder_ms: DurationMs,
    /// Encoding of `nexmark` events: `json` (default) or `binary`.
    #[serde(default)]
    pub encoding: sluice_nexmark::Encoding,
}

/// `[source.file]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSourceConfig {
    /// The file.
    pub path: PathBuf,
    /// `jsonl` or `avro`.
    #[serde(default)]
    pub format: FileFormat,
    /// Field that becomes the key.
    pub key_field: Option<String>,
    /// Field holding the event time (ms).
    pub timestamp_field: Option<String>,
}

/// `[[operators]]`: a transform plugin.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorConfig {
    /// Operator name, unique in the pipeline.
    pub name: String,
    /// A component `.wasm` file, or a plugin directory to build: a transform,
    /// or for a window operator an aggregate (absent with a built-in
    /// `aggregate`).
    pub plugin: Option<PathBuf>,
    /// Makes this a window operator: `{ tumbling_ms = .. }`,
    /// `{ sliding_ms = .., slide_ms = .. }` or `{ session_gap_ms = .. }`.
    pub window: Option<WindowConfig>,
    /// A window operator's built-in aggregate: `{ function = "count" }`, or
    /// `sum`, `min`, `max`, `avg` with a numeric `field` (or
    /// `length(field)`); the window's result is its value.
    pub aggregate: Option<AggregateConfig>,
    /// Several built-in aggregates in one window, each with a `name`
    /// (`[{ name = "n", function = "count" }, { name = "total", function =
    /// "sum", field = "amount" }]`): the result is an object of them.
    #[serde(default)]
    pub aggregates: Option<Vec<NamedAggregateConfig>>,
    /// Makes this an interval join of two streams (see [`JoinConfig`]).
    pub join: Option<JoinConfig>,
    /// A window operator's key: a field of the value (`user`, `a.b`, a JSON
    /// pointer); absent: the record key.
    pub key_field: Option<String>,
    /// How long after a window fired late records still update it, ms.
    #[serde(default)]
    pub allowed_lateness_ms: DurationMs,
    /// Where records later than the allowed lateness go: `dead_letter`
    /// (default) or the name of a side output.
    pub late_output: Option<String>,
    /// Values handed to the plugin's `init` (as strings).
    #[serde(default)]
    pub config: BTreeMap<String, toml::Value>,
    /// CPU time a plugin call (one batch) may use, ms: the calling
    /// thread's CPU time, so a loaded machine does not shorten it.
    #[serde(default = "default_deadline_ms")]
    pub deadline_ms: CallDeadlineMs,
    /// CPU time instantiating the plugin and its `init` may use, ms.
    #[serde(default = "default_init_deadline_ms")]
    pub init_deadline_ms: CallDeadlineMs,
    /// Records faulting in a row (traps, deadlines, memory limit) that make
    /// a fault storm.
    #[serde(default = "default_fault_storm_threshold")]
    pub fault_storm_threshold: AtLeastOne,
    /// In a fault storm: `dead-letter` (default: faulting batches go to the
    /// dead-letter output whole, without a retry per record) or `stop`.
    #[serde(default)]
    pub on_fault_storm: crate::dataflow::OnFaultStorm,
    /// Memory limit, MiB.
    #[serde(default = "default_memory_limit_mb")]
    pub memory_limit_mb: u64,
    /// `auto`, `typed` or `packed`.
    #[serde(default)]
    pub call_mode: CallMode,
    /// Let the plugin read the real clock.
    #[serde(default)]
    pub grant_clock: bool,
    /// Time-to-live of the operator's state after its last write, ms
    /// (processing time); absent keeps state until it is deleted.
    pub state_ttl_ms: Option<PositiveDurationMs>,
}

impl OperatorConfig {
    /// The built-in aggregate this operator names (`aggregate` or
    /// `aggregates`), if any; `Err((field, message))` when it is invalid,
    /// `field` relative to the operator (`aggregate`, `aggregates`).
    pub fn builtin_aggregate(
        &self,
    ) -> Option<Result<crate::window::BuiltinAggregate, (&'static str, String)>> {
        match (&self.aggregate, &self.aggregates) {
            (None, None) => None,
            (Some(_), Some(_)) => Some(Err((
                "aggregates",
                "name either `aggregate` (one) or `aggregates` (several), not both".to_string(),
            ))),
            (Some(one), None) => Some(
                crate::window::BuiltinAggregate::new(one.function, one.field.as_deref())
                    .map_err(|message| ("aggregate", message)),
            ),
            (None, Some(several)) => {
                let columns: Vec<_> = several
                    .iter()
                    .map(|c| (c.name.as_str(), c.function, c.field.as_deref()))
                    .collect();
                Some(
                    crate::window::BuiltinAggregate::columns(&columns)
                        .map_err(|message| ("aggregates", message)),
                )
            }
        }
    }

    /// `config` as the string pairs a plugin's `init` receives: strings as
    /// they are, arrays joined with commas, other values in TOML syntax.
    pub fn plugin_config(&self) -> Vec<(String, String)> {
        self.config
            .iter()
            .map(|(key, value)| (key.clone(), toml_value_to_string(value)))
            .collect()
    }
}

fn toml_value_to_string(value: &toml::Value) -> String {
    match value {
        toml::Value::String(text) => text.clone(),
        toml::Value::Array(items) => items
            .iter()
            .map(toml_value_to_string)
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    }
}

/// A sink.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
// Built once per sink at start-up: the size of the Kafka variant costs
// nothing, and boxing it would only make every match on it longer.
#[allow(clippy::large_enum_variant)]
pub enum SinkConfig {
    /// JSON lines to a file.
    File {
        /// The file (created or truncated).
        path: PathBuf,
        /// `value` or `record`.
        #[serde(default)]
        format: Option<OutputFormat>,
    },
    /// JSON lines to standard output.
    Stdout {
        /// `value` or `record`.
        #[serde(default)]
        format: Option<OutputFormat>,
    },
    /// JSON lines to standard error.
    Stderr {
        /// `value` or `record`.
        #[serde(default)]
        format: Option<OutputFormat>,
    },
    /// Discards records (`[sink.blackhole]` or `sink = { blackhole = {} }`).
    Blackhole {},
    /// Rows of an Apache Iceberg table (exactly-once with checkpoints).
    Iceberg(Box<crate::connectors::iceberg::IcebergSinkConfig>),
    /// A Kafka topic (idempotent producer).
    Kafka {
        /// `host:port` list.
        bootstrap_servers: String,
        /// Topic.
        topic: String,
        /// Fixed partition; absent partitions by key.
        partition: Option<Bounded<i32, 0, { i128::MAX }>>,
        /// Extra librdkafka producer properties.
        #[serde(default)]
        properties: BTreeMap<String, String>,
        /// The cluster's connection properties that `sluice serve` grants
        /// in memory; never read from a file.
        #[serde(skip)]
        granted_properties: SecretMap,
        /// `exactly-once` (the default when `[checkpoints] mode =
        /// "exactly-once"`: records become visible when their checkpoint
        /// commits) or `at-least-once`.
        delivery: Option<Delivery>,
        /// Compacted topic for the progress records of exactly-once
        /// transactions (default `sluice-progress`).
        progress_topic: Option<String>,
        /// What the pipeline's transactional ids start with (default
        /// `sluice.`; the ids are `<prefix><tenant>.<pipeline>.<0|1>`), so
        /// that prefixed ACLs can grant them.
        transactional_id_prefix: Option<String>,
        /// `transaction.timeout.ms` of exactly-once transactions (default:
        /// the larger of 60 s and three checkpoint intervals).
        transaction_timeout_ms: Option<PositiveDurationMs>,
        /// `json` (default: values as they are) or `avro-confluent`
        /// (JSON values encoded with `avro_schema`, registered in
        /// `schema_registry` under `subject`; values that do not fit are
        /// dead-lettered).
        #[serde(default)]
        value_format: SinkValueFormat,
        /// The Avro schema file of `value_format = "avro-confluent"`.
        avro_schema: Option<PathBuf>,
        /// The registry of `value_format = "avro-confluent"`.
        schema_registry: Option<Box<crate::connectors::schema_registry::SchemaRegistryConfig>>,
        /// The registry subject (default `<topic>-value`, Confluent's
        /// topic-name strategy).
        subject: Option<String>,
    },
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

fn default_dead_letter() -> SinkConfig {
    SinkConfig::Stderr {
        format: Some(OutputFormat::Record),
    }
}
fn default_tenant() -> String {
    "default".into()
}
fn default_batch_size() -> Bounded<usize, 1, { MAX_BATCH_SIZE as i128 }> {
    Bounded::known(256)
}
fn default_channel_capacity() -> Bounded<usize, 1, 65_536> {
    Bounded::known(16)
}
fn default_barrier_interval() -> DurationMs {
    Bounded::known(10_000)
}
fn default_seed() -> u64 {
    42
}
fn default_value_bytes() -> Bounded<usize, 0, { 16 << 20 }> {
    Bounded::known(100)
}
fn default_ratio() -> f64 {
    0.05
}
fn default_events_per_second() -> u64 {
    1000
}
fn default_poll_timeout_ms() -> Bounded<u64, 1, 60_000> {
    Bounded::known(100)
}
fn default_deadline_ms() -> CallDeadlineMs {
    Bounded::known(100)
}
fn default_memory_limit_mb() -> u64 {
    64
}
fn default_init_deadline_ms() -> CallDeadlineMs {
    Bounded::known(2_000)
}
fn default_fault_storm_threshold() -> AtLeastOne {
    Bounded::known(64)
}

/// A parsed and validated pipeline file, with what is needed to locate
/// later errors (e.g. a plugin that fails to load) in it.
#[derive(Debug)]
pub struct LoadedConfig {
    /// The configuration.
    pub config: PipelineConfig,
    /// The file it came from.
    pub file: PathBuf,
    fields: FieldMap,
}

impl LoadedConfig {
    /// Reads, parses and validates the pipeline file at `file`.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|error| ConfigError {
            file: file.to_path_buf(),
            line: 0,
            column: 0,
            field: None,
            message: format!("cannot read pipeline file: {error}"),
        })?;
        Self::parse(file, &text)
    }

    /// Parses and validates `text` as if read from `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfigError> {
        let fields = FieldMap::new(text);
        let config: PipelineConfig = toml::from_str(text).map_err(|error| {
            let offset = error.span().map_or(0, |span| span.start);
            let (line, column) = fields.line_column(offset);
            ConfigError {
                file: file.to_path_buf(),
                line,
                column,
                field: fields.field_at(offset).map(str::to_string),
                message: error.message().trim().to_string(),
            }
        })?;
        if let Some((message, offset)) = fields.refused() {
            let (line, column) = fields.line_column(offset);
            return Err(ConfigError {
                file: file.to_path_buf(),
                line,
                column,
                field: None,
                message: message.to_string(),
            });
        }
        let loaded = LoadedConfig {
            config,
            file: file.to_path_buf(),
            fields,
        };
        loaded.validate()?;
        Ok(loaded)
    }

    /// An error about `field` (dotted path), located in the file.
    pub fn error_at(&self, field: &str, message: impl Into<String>) -> ConfigError {
        let (line, column) = self
            .fields
            .span_of(field)
            .map_or((0, 0), |span| self.fields.line_column(span.start));
        ConfigError {
            file: self.file.clone(),
            line,
            column,
            field: Some(field.to_string()),
            message: message.into(),
        }
    }

    /// `path` relative to the pipeline file's directory.
    pub fn resolve_path(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            return path.to_path_buf();
        }
        self.file
            .parent()
            .map(|dir| dir.join(path))
            .unwrap_or_else(|| path.to_path_buf())
    }

    /// The Avro schema in the file `path` (relative to the pipeline file)
    /// named by `field`, or an error located at `field`.
    pub fn avro_schema(
        &self,
        field: &str,
        path: &Path,
    ) -> Result<apache_avro::Schema, ConfigError> {
        let path = self.resolve_path(path);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| self.error_at(field, format!("cannot read {}: {e}", path.display())))?;
        apache_avro::Schema::parse_str(&text).map_err(|e| {
            self.error_at(
                field,
                format!("invalid Avro schema {}: {e}", path.display()),
            )
        })
    }

    /// The numeric settings whose bounds depend on something else (another
    /// field, the runtime): every other number is a [`Bounded`], checked as
    /// it is read.
    fn validate_numbers(&self) -> Result<(), ConfigError> {
        let c = &self.config;
        let p = &c.pipeline;
        let max_parallelism = p.max_parallelism.get();
        let most_workers = usize::from(max_parallelism).min(MAX_WORKERS);
        if p.workers == 0 || p.workers > most_workers {
            return Err(self.error_at(
                "pipeline.workers",
                format!(
                    "must be between 1 and {most_workers} (at most `max_parallelism` = {max_parallelism}, each worker owns key groups) (found {})",
                    p.workers
                ),
            ));
        }
        let memory_mb = (crate::runtime::RuntimeConfig::default().max_memory_bytes >> 20) as i128;
        for (index, operator) in c.operators.iter().enumerate() {
            if !(1..=memory_mb).contains(&i128::from(operator.memory_limit_mb)) {
                return Err(self.error_at(
                    &format!("operators[{index}].memory_limit_mb"),
                    format!(
                        "must be between 1 and {memory_mb} (the largest memory a plugin instance can have here; a 32-bit WebAssembly memory cannot exceed 4096) (found {})",
                        operator.memory_limit_mb
                    ),
                ));
            }
        }
        let sinks = [("sink", &c.sink), ("dead_letter", &c.dead_letter)]
            .into_iter()
            .map(|(name, sink)| (name.to_string(), sink))
            .chain(
                c.side_outputs
                    .iter()
                    .map(|(name, sink)| (format!("side_outputs.{name}"), sink)),
            );
        for (name, sink) in sinks {
            if let SinkConfig::Iceberg(iceberg) = sink {
                match (&iceberg.catalog, &iceberg.rest, &iceberg.warehouse) {
                    (Some(_), Some(_), _) | (None, None, _) => {
                        return Err(self.error_at(
                            &format!("{name}.iceberg"),
                            "give `catalog` (a SQLite file) or `rest = { uri = \"..\" }`, one of them",
                        ));
                    }
                    (Some(_), None, None) => {
                        return Err(self.error_at(
                            &format!("{name}.iceberg"),
                            "a SQLite catalog needs `warehouse` (a directory or s3://bucket/prefix)",
                        ));
                    }
                    _ => {}
                }
                if iceberg.avro_schema.is_some() && !iceberg.columns.is_empty() {
                    return Err(self.error_at(
                        &format!("{name}.iceberg.avro_schema"),
                        "give `columns` or `avro_schema`, not both",
                    ));
                }
                if let Some(schema) = &iceberg.avro_schema {
                    let schema =
                        self.avro_schema(&format!("{name}.iceberg.avro_schema"), schema)?;
                    crate::connectors::iceberg::columns_from_avro(&schema).map_err(|why| {
                        self.error_at(&format!("{name}.iceberg.avro_schema"), why)
                    })?;
                }
            }
            if let SinkConfig::Kafka {
                value_format: SinkValueFormat::AvroConfluent,
                avro_schema,
                schema_registry,
                ..
            } = sink
            {
                let Some(schema) = avro_schema else {
                    return Err(self.error_at(
                        &format!("{name}.kafka.value_format"),
                        "`avro-confluent` needs `avro_schema`",
                    ));
                };
                self.avro_schema(&format!("{name}.kafka.avro_schema"), schema)?;
                if schema_registry.is_none() {
                    return Err(self.error_at(
                        &format!("{name}.kafka.value_format"),
                        "`avro-confluent` needs `schema_registry = { url = \"..\" }`",
                    ));
                }
            }
        }
        Ok(())
    }

    fn validate_deploy(&self) -> Result<(), ConfigError> {
        let deploy = &self.config.deploy;
        for (field, rate) in [
            ("max_fault_rate", deploy.max_fault_rate),
            ("max_dead_letter_rate", deploy.max_dead_letter_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(self.error_at(&format!("deploy.{field}"), "must be between 0 and 1"));
            }
        }
        Ok(())
    }

    fn validate_checkpoints(&self, checkpoints: &CheckpointsSection) -> Result<(), ConfigError> {
        if checkpoints.max_concurrent != 1 {
            return Err(self.error_at(
                "checkpoints.max_concurrent",
                "only 1 is supported: a checkpoint starts after the previous one completed",
            ));
        }
        if self.config.pipeline.state_backend != StateBackendKind::Rocksdb {
            return Err(self.error_at(
                "pipeline.state_backend",
                "checkpoints need the `rocksdb` state backend",
            ));
        }
        if let Some(storage) = &checkpoints.storage {
            crate::checkpoint::storage_location(storage, &self.file)
                .map_err(|message| self.error_at("checkpoints.storage", message))?;
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let c = &self.config;
        if c.pipeline.name.trim().is_empty() {
            return Err(self.error_at("pipeline.name", "must not be empty"));
        }
        self.validate_numbers()?;
        self.validate_deploy()?;
        match &c.source {
            SourceConfig::Generator(g) => {
                if g.rate == Some(0) {
                    return Err(self.error_at(
                        "source.generator.rate",
                        "must be at least 1 (omit it for no pacing)",
                    ));
                }
                for (field, ratio) in [
                    ("invalid_ratio", g.invalid_ratio),
                    ("duplicate_ratio", g.duplicate_ratio),
                ] {
                    if !(0.0..=1.0).contains(&ratio) {
                        return Err(self.error_at(
                            &format!("source.generator.{field}"),
                            "must be between 0 and 1",
                        ));
                    }
                }
                if g.events_per_second == 0 {
                    return Err(
                        self.error_at("source.generator.events_per_second", "must be at least 1")
                    );
                }
            }
            SourceConfig::File(f) => {
                let path = self.resolve_path(&f.path);
                if !path.is_file() {
                    return Err(self.error_at(
                        "source.file.path",
                        format!("no such file: {}", path.display()),
                    ));
                }
            }
            SourceConfig::Kafka(k) => {
                if k.topics.is_empty() {
                    return Err(self.error_at("source.kafka.topics", "name at least one topic"));
                }
                if k.value_format == ValueFormatName::Avro && k.avro_schema.is_none() {
                    return Err(
                        self.error_at("source.kafka.value_format", "`avro` needs `avro_schema`")
                    );
                }
                if k.value_format == ValueFormatName::AvroConfluent && k.schema_registry.is_none() {
                    return Err(self.error_at(
                        "source.kafka.value_format",
                        "`avro-confluent` needs `schema_registry = { url = \"..\" }`",
                    ));
                }
                if let Some(schema) = &k.avro_schema {
                    self.avro_schema("source.kafka.avro_schema", schema)?;
                }
            }
        }
        if let Some(checkpoints) = &c.checkpoints {
            self.validate_checkpoints(checkpoints)?;
        }
        let mut names = std::collections::BTreeSet::new();
        for (index, operator) in c.operators.iter().enumerate() {
            if !names.insert(operator.name.as_str()) {
                return Err(self.error_at(
                    &format!("operators[{index}].name"),
                    format!("duplicate operator name `{}`", operator.name),
                ));
            }
            if let Some(join) = &operator.join {
                if operator.plugin.is_some() || operator.window.is_some() {
                    return Err(self.error_at(
                        &format!("operators[{index}].join"),
                        "a join operator takes no `plugin` or `window`",
                    ));
                }
                join.sides().map_err(|message| {
                    self.error_at(&format!("operators[{index}].join"), message)
                })?;
                continue;
            }
            let builtin = operator.builtin_aggregate();
            if let Some(Err((field, message))) = &builtin {
                return Err(self.error_at(&format!("operators[{index}].{field}"), message.clone()));
            }
            let builtin_field = match operator.aggregates {
                Some(_) => "aggregates",
                None => "aggregate",
            };
            match (&operator.plugin, &operator.window, &builtin) {
                (Some(plugin), None, None) => {
                    let plugin = self.resolve_path(plugin);
                    if !plugin.exists() {
                        return Err(self.error_at(
                            &format!("operators[{index}].plugin"),
                            format!(
                                "no such plugin file or crate directory: {}",
                                plugin.display()
                            ),
                        ));
                    }
                }
                (None, Some(window), Some(_)) => {
                    window.spec().map_err(|message| {
                        self.error_at(&format!("operators[{index}].window"), message)
                    })?;
                }
                (Some(plugin), Some(window), None) => {
                    window.spec().map_err(|message| {
                        self.error_at(&format!("operators[{index}].window"), message)
                    })?;
                    let plugin = self.resolve_path(plugin);
                    if !plugin.exists() {
                        return Err(self.error_at(
                            &format!("operators[{index}].plugin"),
                            format!(
                                "no such aggregate plugin file or directory: {}",
                                plugin.display()
                            ),
                        ));
                    }
                }
                (None, Some(_), None) => {
                    return Err(self.error_at(
                        &format!("operators[{index}].window"),
                        "a window operator needs an `aggregate` (built-in) or a `plugin` (aggregate world)",
                    ));
                }
                (Some(_), Some(_), Some(_)) => {
                    return Err(self.error_at(
                        &format!("operators[{index}].plugin"),
                        "a window operator with a built-in aggregate takes no plugin",
                    ));
                }
                (_, None, Some(_)) => {
                    return Err(self.error_at(
                        &format!("operators[{index}].{builtin_field}"),
                        format!("`{builtin_field}` needs a `window`"),
                    ));
                }
                (None, None, None) => {
                    return Err(self.error_at(
                        &format!("operators[{index}]"),
                        "an operator needs a `plugin` (transform) or a `window` with an `aggregate`",
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[pipeline]
name = "p"

[source.generator]
count = 10

[sink]
blackhole = {}
"#;

    fn parse(text: &str) -> Result<LoadedConfig, ConfigError> {
        LoadedConfig::parse(Path::new("p.toml"), text)
    }

    #[test]
    fn minimal_file_parses_with_defaults() {
        let loaded = parse(GOOD).unwrap();
        assert_eq!(loaded.config.pipeline.batch_size.get(), 256);
        assert!(matches!(
            loaded.config.dead_letter,
            SinkConfig::Stderr { .. }
        ));
    }

    #[test]
    fn unknown_field_names_file_line_and_field() {
        let text = GOOD.replace("count = 10", "count = 10\nrat = 5");
        let error = parse(&text).unwrap_err();
        assert_eq!(
            (error.line, error.field.as_deref()),
            (7, Some("source.generator.rat")),
            "{error}"
        );
        assert!(error.message.contains("unknown field `rat`"), "{error}");
        assert!(error.to_string().starts_with("p.toml:7:"), "{error}");
    }

    #[test]
    fn wrong_type_names_the_field() {
        let text = GOOD.replace("count = 10", "count = \"ten\"");
        let error = parse(&text).unwrap_err();
        assert_eq!(
            (error.line, error.field.as_deref()),
            (6, Some("source.generator.count")),
            "{error}"
        );
    }

    #[test]
    fn invalid_value_is_located() {
        let text = GOOD.replace("count = 10", "count = 10\nrate = 0");
        let error = parse(&text).unwrap_err();
        assert_eq!(
            (error.line, error.field.as_deref()),
            (7, Some("source.generator.rate")),
            "{error}"
        );
    }

    #[test]
    fn numeric_settings_out_of_bounds_name_file_line_and_field() {
        let operator = "[[operators]]\nname = \"w\"\nwindow = { tumbling_ms = 1000 }\naggregate = { function = \"count\" }\n";
        let cases = [
            (
                "[pipeline]\nname = \"p\"\nworkers = 0\n",
                "pipeline.workers",
            ),
            (
                "[pipeline]\nname = \"p\"\nworkers = 200\n",
                "pipeline.workers",
            ),
            (
                "[pipeline]\nname = \"p\"\nmax_parallelism = 0\n",
                "pipeline.max_parallelism",
            ),
            (
                "[pipeline]\nname = \"p\"\nmax_parallelism = 40000\n",
                "pipeline.max_parallelism",
            ),
            (
                "[pipeline]\nname = \"p\"\nbatch_size = 0\n",
                "pipeline.batch_size",
            ),
            (
                "[pipeline]\nname = \"p\"\nbatch_size = 10000000\n",
                "pipeline.batch_size",
            ),
            (
                "[pipeline]\nname = \"p\"\nchannel_capacity = 0\n",
                "pipeline.channel_capacity",
            ),
            (
                "[pipeline]\nname = \"p\"\nidle_timeout_ms = 0\n",
                "pipeline.idle_timeout_ms",
            ),
            (
                "[pipeline]\nname = \"p\"\nmax_out_of_orderness_ms = 9223372036854775807\n",
                "pipeline.max_out_of_orderness_ms",
            ),
            (
                "[pipeline]\nname = \"p\"\n[checkpoints]\ninterval_ms = 0\n",
                "checkpoints.interval_ms",
            ),
            (
                "[pipeline]\nname = \"p\"\n[checkpoints]\nretained = 0\n",
                "checkpoints.retained",
            ),
        ];
        for (head, field) in cases {
            let text = format!("{head}{}", GOOD.replace("[pipeline]\nname = \"p\"\n", ""));
            let error = parse(&text)
                .err()
                .unwrap_or_else(|| panic!("{field} accepted"));
            assert_eq!(error.field.as_deref(), Some(field), "{error}");
            assert!(error.line > 0, "{error}");
        }
        for (setting, field) in [
            ("deadline_ms = 0", "operators[0].deadline_ms"),
            ("init_deadline_ms = 0", "operators[0].init_deadline_ms"),
            ("memory_limit_mb = 0", "operators[0].memory_limit_mb"),
            ("memory_limit_mb = 5000", "operators[0].memory_limit_mb"),
            (
                "fault_storm_threshold = 0",
                "operators[0].fault_storm_threshold",
            ),
            (
                "allowed_lateness_ms = 9223372036854775807",
                "operators[0].allowed_lateness_ms",
            ),
            ("state_ttl_ms = 0", "operators[0].state_ttl_ms"),
        ] {
            let text = format!("{GOOD}{operator}{setting}\n");
            let error = parse(&text)
                .err()
                .unwrap_or_else(|| panic!("{setting} accepted"));
            assert_eq!(error.field.as_deref(), Some(field), "{error}");
            assert_eq!(error.line, GOOD.lines().count() + 5, "{error}");
        }
        // Beyond i64: not TOML, refused where it stands.
        let text = format!("{GOOD}{operator}deadline_ms = 18446744073709551615\n");
        let error = parse(&text).expect_err("an integer beyond i64");
        assert_eq!(error.line, GOOD.lines().count() + 5, "{error}");
        let huge_window = format!(
            "{GOOD}{}",
            operator.replace("tumbling_ms = 1000", "tumbling_ms = 9223372036854775807")
        );
        let error = parse(&huge_window).expect_err("a window of 292 million years");
        assert_eq!(
            error.field.as_deref(),
            Some("operators[0].window"),
            "{error}"
        );
    }

    #[test]
    fn several_builtin_aggregates_parse_and_bad_ones_name_their_field() {
        let operator = "[[operators]]\nname = \"w\"\nwindow = { tumbling_ms = 1000 }\n";
        let good = format!(
            "{GOOD}{operator}aggregates = [\n  {{ name = \"n\", function = \"count\" }},\n  {{ name = \"longest\", function = \"max\", field = \"length(note)\" }},\n]\n"
        );
        let loaded = parse(&good).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            loaded.config.operators[0].builtin_aggregate(),
            Some(Ok(_))
        ));
        for (setting, message) in [
            (
                "aggregates = [{ name = \"n\", function = \"count\" }, { name = \"n\", function = \"count\" }]",
                "used twice",
            ),
            (
                "aggregates = [{ name = \"u\", function = \"max\", field = \"upper(note)\" }]",
                "unknown function",
            ),
            ("aggregates = []", "empty"),
            (
                "aggregate = { function = \"count\" }\naggregates = [{ name = \"n\", function = \"count\" }]",
                "not both",
            ),
        ] {
            let error = parse(&format!("{GOOD}{operator}{setting}\n"))
                .err()
                .unwrap_or_else(|| panic!("{setting} accepted"));
            assert_eq!(
                error.field.as_deref(),
                Some("operators[0].aggregates"),
                "{error}"
            );
            assert!(error.line > GOOD.lines().count(), "{error}");
            assert!(error.to_string().contains(message), "{setting}: {error}");
        }
    }

    #[test]
    fn syntax_error_is_located() {
        let text = GOOD.replace("count = 10", "count = = 10");
        let error = parse(&text).unwrap_err();
        assert_eq!(error.line, 6, "{error}");
    }

    proptest::proptest! {
        /// Any text as a pipeline file: an error or a config, never a
        /// panic, and an error located within the file.
        #[test]
        fn arbitrary_pipeline_text_never_panics(text in "\\PC{0,200}") {
            if let Err(error) = parse(&text) {
                proptest::prop_assert!(error.line <= text.lines().count() + 1, "{}", error);
            }
        }

        /// A valid file with one line replaced by a random setting.
        #[test]
        fn mutated_pipeline_files_never_panic(
            line in 0usize..8,
            key in "[a-z_]{1,20}",
            value in "(-?[0-9]{1,22}|\"[a-z./]{0,10}\"|true|\\{ *\\}|\\[[0-9, ]{0,6}\\])",
        ) {
            let mut lines: Vec<String> = GOOD.lines().map(str::to_string).collect();
            let index = line.min(lines.len() - 1);
            lines[index] = format!("{key} = {value}");
            let text = lines.join("\n");
            if let Err(error) = parse(&text) {
                proptest::prop_assert!(error.line <= lines.len() + 1, "{}", error);
            }
        }
    }
}
