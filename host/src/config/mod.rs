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
use crate::connectors::file::OutputFormat;
use crate::runtime::CallMode;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

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
    pub deploy: crate::dataflow::swap::VerifyPolicy,
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
    /// Memory for the pipeline's keyed state, MiB: RocksDB's write buffers
    /// and block cache, the windows of recently used keys and join records
    /// not yet written, shared out among the keyed operators and their
    /// workers (`state::StateMemoryBudget`). Beyond it, state lives only on
    /// disk and is read back when needed.
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
    Bounded::known((crate::state::DEFAULT_STATE_MEMORY_BYTES >> 20) as u64)
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
    Generator(crate::connectors::generator::GeneratorConfig),
    /// A JSON-lines or Avro file.
    File(crate::connectors::file::FileSourceConfig),
    /// Kafka topics, as a consumer-group member.
    Kafka(crate::connectors::kafka::KafkaSourceConfig),
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
    /// Makes this a SQL operator: one query over the operator's input (the
    /// table `input`), e.g. `SELECT id, UPPER(name) AS name FROM input
    /// WHERE amount > 10` (docs/sql.md).
    pub sql: Option<String>,
    /// As `sql`, the query read from this file (relative to the pipeline
    /// file).
    pub sql_file: Option<PathBuf>,
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
    /// A key-by before this operator: records reach it partitioned by this
    /// field of the value, which becomes their record key. In a scaled-out
    /// pipeline a new stage starts here, fed by a repartition topic
    /// (ADR 0020).
    pub key_by: Option<String>,
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
    /// Set when the file is loaded: this is a SQL operator whose query
    /// keeps state per key (a window aggregation), so it runs where keyed
    /// operators run.
    #[serde(skip)]
    pub sql_keyed: bool,
}

impl SourceConfig {
    /// The names a SQL query may read this source's records by, beside
    /// `input`: a Kafka source's topics, a file source's file stem.
    pub fn table_names(&self) -> Vec<String> {
        match self {
            SourceConfig::Kafka(kafka) => kafka.topics.clone(),
            SourceConfig::File(file) => file
                .path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .map(|stem| vec![stem.to_string()])
                .unwrap_or_default(),
            SourceConfig::Generator(_) => Vec::new(),
        }
    }

    /// The tables a SQL query reading this source's records may name that
    /// are a part of them, as (name, column, value): the Nexmark
    /// generator's `bid`, `auction` and `person` (by `event_type`).
    pub fn table_views(&self) -> Vec<(&'static str, &'static str, &'static str)> {
        use crate::connectors::generator::Profile;
        match self {
            SourceConfig::Generator(generator) if generator.profile == Profile::Nexmark => vec![
                ("bid", "event_type", "bid"),
                ("auction", "event_type", "auction"),
                ("person", "event_type", "person"),
            ],
            _ => Vec::new(),
        }
    }

    /// The field of a record its event time comes from, which a SQL
    /// window's `DESCRIPTOR` may name: the `timestamp_field` of a file or
    /// Kafka source, the generator's event-time field (`date_time` of
    /// Nexmark events, `ts` of bronze ones); `None` where the event time is
    /// no field (Kafka's record timestamps).
    pub fn time_column(&self) -> Option<String> {
        use crate::connectors::generator::Profile;
        match self {
            SourceConfig::Kafka(kafka) => kafka.timestamp_field.clone(),
            SourceConfig::File(file) => file.timestamp_field.clone(),
            SourceConfig::Generator(generator) => match generator.profile {
                Profile::Nexmark => Some("date_time".to_string()),
                Profile::Bronze => Some("ts".to_string()),
                Profile::Payload => None,
            },
        }
    }
}

impl OperatorConfig {
    /// Whether this is a SQL operator (`sql` or `sql_file`).
    pub fn is_sql(&self) -> bool {
        self.sql.is_some() || self.sql_file.is_some()
    }

    /// Whether this operator keeps state per key (a window, a join, a SQL
    /// window aggregation): with several workers it runs once per worker,
    /// behind a key-by exchange.
    pub fn is_keyed(&self) -> bool {
        self.window.is_some() || self.join.is_some() || self.sql_keyed
    }

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
pub enum SinkConfig {
    /// JSON lines to a file.
    File(crate::connectors::file::FileSinkConfig),
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
    Kafka(Box<crate::connectors::kafka::KafkaSinkConfig>),
    /// Rows upserted into a PostgreSQL table (exactly-once by versions).
    Postgres(Box<crate::connectors::postgres::PostgresSinkConfig>),
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

mod loaded;
#[cfg(test)]
mod tests;

pub use loaded::LoadedConfig;
