//! Builds a runnable pipeline from a loaded pipeline file.

use crate::config::StateBackendKind;
use crate::config::{
    ConfigError, KafkaStart, LoadedConfig, SinkConfig, SourceConfig, ValueFormatName,
};
use crate::connectors::blackhole::BlackholeSink;
use crate::connectors::file::{FileSource, FileSourceOptions, JsonLinesSink, OutputFormat};
use crate::connectors::generator::{GeneratorOptions, GeneratorSource};
use crate::connectors::kafka::{
    KafkaSink, KafkaSinkOptions, KafkaSource, KafkaSourceOptions, StartPosition, ValueFormat,
};
use crate::dataflow::{
    DataflowError, ExecutorConfig, KeyedStage, Operator, OperatorChain, ParallelChains, RunOutcome,
    Sink, SinkSet, Source, Topology, TransformOperator,
};
use crate::join::{IntervalJoinOperator, IntervalJoinOptions};
use crate::metrics::{OperatorMetrics, PipelineMetrics};
use crate::runtime::PluginAggregator;
use crate::runtime::{PluginInstance, PluginLimits, PluginRuntime};
use crate::state::key_group::KeyGroupRange;
use crate::state::{
    MemoryStateBackend, OperatorScope, RocksStateBackend, StateBackend, StateTtl, ttl,
};
use crate::time::WatermarkStrategy;
use crate::window::{
    Aggregator, BuiltinAggregate, LateOutput, WindowOperator, WindowOperatorOptions,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Why a pipeline could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The pipeline file is wrong (located).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The pipeline failed while running.
    #[error(transparent)]
    Dataflow(#[from] DataflowError),
}

/// Turns an operator's `plugin` path into a component file. The CLI's
/// resolver builds plugin crate directories; [`wasm_files_only`] accepts
/// only ready components.
pub type PluginResolver<'a> = &'a dyn Fn(&Path) -> Result<PathBuf, String>;

/// A resolver that accepts `.wasm` files and rejects anything else.
pub fn wasm_files_only(path: &Path) -> Result<PathBuf, String> {
    if path.is_file() {
        Ok(path.to_path_buf())
    } else {
        Err(format!(
            "{} is not a component file (build plugin crates with `sluice plugin build`)",
            path.display()
        ))
    }
}

/// A pipeline ready to run.
pub struct Pipeline {
    /// Pipeline name.
    pub name: String,
    source: Box<dyn Source>,
    topology: Topology,
    executor: ExecutorConfig,
    metrics: Arc<PipelineMetrics>,
    /// Kept open (and, if temporary, on disk) while the pipeline lives.
    _state: Arc<dyn StateBackend>,
}

/// Opens the state backend `loaded`'s `[pipeline]` section asks for.
pub fn open_state_backend(loaded: &LoadedConfig) -> Result<Arc<dyn StateBackend>, PipelineError> {
    let pipeline = &loaded.config.pipeline;
    let backend: Arc<dyn StateBackend> = match pipeline.state_backend {
        StateBackendKind::Memory => Arc::new(MemoryStateBackend::default()),
        StateBackendKind::Rocksdb => {
            let opened = match &pipeline.state_dir {
                Some(dir) => RocksStateBackend::open(&loaded.resolve_path(dir)),
                None => RocksStateBackend::temporary(),
            };
            let backend =
                opened.map_err(|error| loaded.error_at("pipeline.state_dir", error.message))?;
            backend
                .claim_max_parallelism(pipeline.max_parallelism)
                .map_err(|error| loaded.error_at("pipeline.max_parallelism", error.message))?;
            Arc::new(backend)
        }
    };
    Ok(backend)
}

impl Pipeline {
    /// Builds the pipeline described by `loaded`: loads and instantiates its
    /// plugins (calling their `init`), opens its source and sinks.
    pub fn build(
        loaded: &LoadedConfig,
        runtime: &PluginRuntime,
        state: Arc<dyn StateBackend>,
        resolve_plugin: PluginResolver<'_>,
    ) -> Result<Self, PipelineError> {
        let config = &loaded.config;
        let metrics = Arc::new(PipelineMetrics::default());
        let source = build_source(loaded, &metrics)?;

        let build = |index: usize, worker: Option<usize>| {
            build_operator(loaded, index, runtime, &state, resolve_plugin, worker)
        };
        // Split before every keyed operator: with several workers, each
        // keyed stage runs in `workers` threads behind a key-by exchange.
        let count = config.operators.len();
        let workers = config.pipeline.workers.max(1);
        let keyed: Vec<usize> = (0..count)
            .filter(|&index| {
                let op = &config.operators[index];
                op.window.is_some() || op.join.is_some()
            })
            .collect();
        let head_end = match keyed.first() {
            Some(&first) if workers > 1 => first,
            _ => count,
        };
        let head = (0..head_end)
            .map(|index| build(index, None))
            .collect::<Result<Vec<_>, _>>()?;
        let mut stages = Vec::new();
        if head_end < count {
            for (position, &start) in keyed.iter().enumerate() {
                let end = keyed.get(position + 1).copied().unwrap_or(count);
                let workers = (0..workers)
                    .map(|worker| {
                        (start..end)
                            .map(|index| build(index, Some(worker)))
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let partitioner = workers[0][0].partitioner().ok_or_else(|| {
                    loaded.error_at(
                        &format!("operators[{start}]"),
                        "a keyed operator has no key to partition by",
                    )
                })?;
                stages.push(KeyedStage {
                    partitioner,
                    workers,
                });
            }
        }

        let mut side = BTreeMap::new();
        for (name, sink) in &config.side_outputs {
            side.insert(
                name.clone(),
                build_sink(
                    loaded,
                    &metrics,
                    &format!("side_outputs.{name}"),
                    sink,
                    OutputFormat::Value,
                )?,
            );
        }
        let sinks = SinkSet {
            main: build_sink(loaded, &metrics, "sink", &config.sink, OutputFormat::Value)?,
            dead_letter: build_sink(
                loaded,
                &metrics,
                "dead_letter",
                &config.dead_letter,
                OutputFormat::Record,
            )?,
            side,
        };
        let executor = ExecutorConfig {
            batch_size: config.pipeline.batch_size,
            channel_capacity: config.pipeline.channel_capacity,
            watermarks: WatermarkStrategy {
                max_out_of_orderness: Duration::from_millis(
                    config.pipeline.max_out_of_orderness_ms,
                ),
                idle_timeout: config.pipeline.idle_timeout_ms.map(Duration::from_millis),
            },
            barrier_interval: (config.pipeline.checkpoint_interval_ms > 0)
                .then(|| Duration::from_millis(config.pipeline.checkpoint_interval_ms)),
        };
        let topology = if stages.is_empty() {
            Topology::Chain(OperatorChain::new(head, sinks, metrics.clone()))
        } else {
            Topology::Parallel(ParallelChains {
                head,
                stages,
                max_parallelism: config.pipeline.max_parallelism,
                sinks,
                side_outputs: config.side_outputs.keys().cloned().collect(),
                channel_capacity: config.pipeline.channel_capacity,
            })
        };
        Ok(Pipeline {
            name: config.pipeline.name.clone(),
            source,
            topology,
            executor,
            metrics,
            _state: state,
        })
    }

    /// The pipeline's live counters.
    pub fn metrics(&self) -> Arc<PipelineMetrics> {
        self.metrics.clone()
    }

    /// Runs until the input ends or `stop` is set.
    pub fn run(self, stop: Arc<AtomicBool>) -> Result<RunOutcome, DataflowError> {
        crate::dataflow::run(
            self.source,
            self.topology,
            self.executor,
            self.metrics,
            stop,
        )
    }
}

/// Builds `operators[index]` (for `worker`, when keyed operators run in
/// several workers: each gets its own instance and counters).
fn build_operator(
    loaded: &LoadedConfig,
    index: usize,
    runtime: &PluginRuntime,
    state: &Arc<dyn StateBackend>,
    resolve_plugin: PluginResolver<'_>,
    worker: Option<usize>,
) -> Result<Box<dyn Operator>, PipelineError> {
    let config = &loaded.config;
    let operator = &config.operators[index];
    let scope = OperatorScope::new(
        &config.pipeline.tenant,
        &config.pipeline.name,
        &operator.name,
    );
    let operator_metrics = OperatorMetrics::new(match worker {
        Some(worker) => format!("{}#{worker}", operator.name),
        None => operator.name.clone(),
    });
    let ttl = operator.state_ttl_ms.map(|ms| StateTtl {
        ttl: Duration::from_millis(ms),
        clock: ttl::system_clock(),
    });
    let store = state
        .open(&scope, ttl)
        .map_err(|error| loaded.error_at(&format!("operators[{index}]"), error.to_string()))?;
    if let Some(join) = &operator.join {
        let (left, right) = join
            .sides()
            .map_err(|message| loaded.error_at(&format!("operators[{index}].join"), message))?;
        let options = IntervalJoinOptions {
            name: operator.name.clone(),
            left,
            right,
            lower: join.lower_ms,
            upper: join.upper_ms,
            late_output: late_output(loaded, index)?,
            max_parallelism: config.pipeline.max_parallelism,
            key_groups: key_groups(loaded, worker),
            cache_bytes: state_cache_bytes(loaded),
        };
        let join = IntervalJoinOperator::new(options, store, operator_metrics)
            .map_err(|error| loaded.error_at(&format!("operators[{index}]"), error.to_string()))?;
        return Ok(Box::new(join));
    }
    let field = format!("operators[{index}].plugin");
    let component = match &operator.plugin {
        Some(plugin) => {
            let path = resolve_plugin(&loaded.resolve_path(plugin))
                .map_err(|message| loaded.error_at(&field, message))?;
            Some(
                runtime
                    .load(path)
                    .map_err(|error| loaded.error_at(&field, error.to_string()))?,
            )
        }
        None => None,
    };
    let limits = PluginLimits {
        deadline: Duration::from_millis(operator.deadline_ms),
        memory_bytes: usize::try_from(operator.memory_limit_mb.saturating_mul(1 << 20))
            .unwrap_or(usize::MAX),
        grant_clock: operator.grant_clock,
        call_mode: operator.call_mode,
    };
    if let Some(window) = &operator.window {
        let aggregator: Box<dyn Aggregator> = match component {
            Some(component) => Box::new(
                PluginAggregator::new(
                    component,
                    scope.clone(),
                    store.clone(),
                    operator_metrics.clone(),
                    limits,
                    operator.plugin_config(),
                )
                .map_err(|error| loaded.error_at(&field, error.to_string()))?,
            ),
            None => Box::new(builtin_aggregate(loaded, index)?),
        };
        return Ok(Box::new(build_window_operator(
            loaded,
            index,
            window,
            worker,
            aggregator,
            store,
            operator_metrics,
        )?));
    }
    let Some(component) = component else {
        return Err(loaded.error_at(&field, "missing").into());
    };
    let instance = PluginInstance::new(
        component,
        scope,
        store,
        operator_metrics.clone(),
        limits,
        operator.plugin_config(),
    )
    .map_err(|error| loaded.error_at(&format!("operators[{index}]"), error.to_string()))?;
    Ok(Box::new(TransformOperator::new(
        &operator.name,
        instance,
        operator_metrics,
    )))
}

/// Where `operators[index]` sends late records.
fn late_output(loaded: &LoadedConfig, index: usize) -> Result<LateOutput, PipelineError> {
    match loaded.config.operators[index].late_output.as_deref() {
        None | Some("dead_letter") => Ok(LateOutput::DeadLetter),
        Some(name) if loaded.config.side_outputs.contains_key(name) => {
            Ok(LateOutput::Side(name.to_string()))
        }
        Some(name) => Err(loaded
            .error_at(
                &format!("operators[{index}].late_output"),
                format!("`{name}` is neither `dead_letter` nor a side output of this pipeline"),
            )
            .into()),
    }
}

/// The built-in aggregate of `operators[index]`.
fn builtin_aggregate(
    loaded: &LoadedConfig,
    index: usize,
) -> Result<BuiltinAggregate, PipelineError> {
    let at = format!("operators[{index}].aggregate");
    let Some(aggregate) = &loaded.config.operators[index].aggregate else {
        return Err(loaded
            .error_at(&at, "a window operator needs an `aggregate` or a `plugin`")
            .into());
    };
    Ok(
        BuiltinAggregate::new(aggregate.function, aggregate.field.as_deref())
            .map_err(|message| loaded.error_at(&at, message))?,
    )
}

/// The memory budget of one instance of a keyed operator: `state_cache_mb`
/// split among the workers.
fn state_cache_bytes(loaded: &LoadedConfig) -> usize {
    let pipeline = &loaded.config.pipeline;
    usize::try_from(
        pipeline.state_cache_mb.saturating_mul(1 << 20) / pipeline.workers.max(1) as u64,
    )
    .unwrap_or(usize::MAX)
}

/// The key groups a keyed operator's instance for `worker` owns (all of
/// them for the only instance).
fn key_groups(loaded: &LoadedConfig, worker: Option<usize>) -> KeyGroupRange {
    let pipeline = &loaded.config.pipeline;
    match worker {
        Some(worker) => {
            KeyGroupRange::for_worker(worker, pipeline.workers, pipeline.max_parallelism)
        }
        None => KeyGroupRange::for_worker(0, 1, pipeline.max_parallelism),
    }
}

/// The window operator of `operators[index]` (its instance for `worker`,
/// if it runs in several), computing `aggregator`.
fn build_window_operator(
    loaded: &LoadedConfig,
    index: usize,
    window: &crate::config::WindowConfig,
    worker: Option<usize>,
    aggregator: Box<dyn Aggregator>,
    store: Arc<dyn crate::state::StateStore>,
    metrics: Arc<OperatorMetrics>,
) -> Result<WindowOperator, PipelineError> {
    let pipeline = &loaded.config.pipeline;
    let operator = &loaded.config.operators[index];
    let at = |field: &str| format!("operators[{index}].{field}");
    let spec = window
        .spec()
        .map_err(|message| loaded.error_at(&at("window"), message))?;
    let late_output = late_output(loaded, index)?;
    let options = WindowOperatorOptions {
        name: operator.name.clone(),
        spec,
        allowed_lateness: i64::try_from(operator.allowed_lateness_ms).unwrap_or(i64::MAX),
        key_field: operator.key_field.clone(),
        late_output,
        max_parallelism: pipeline.max_parallelism,
        key_groups: key_groups(loaded, worker),
        cache_bytes: state_cache_bytes(loaded),
    };
    WindowOperator::new(options, aggregator, store, metrics).map_err(|error| {
        loaded
            .error_at(&format!("operators[{index}]"), error.to_string())
            .into()
    })
}

fn build_source(
    loaded: &LoadedConfig,
    metrics: &PipelineMetrics,
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
                value_bytes: g.value_bytes,
                invalid_ratio: g.invalid_ratio,
                duplicate_ratio: g.duplicate_ratio,
                events_per_second: g.events_per_second,
                max_disorder_ms: g.max_disorder_ms,
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
            let value_format = match k.value_format {
                ValueFormatName::Raw => ValueFormat::Raw,
                ValueFormatName::Json => ValueFormat::Json,
                ValueFormatName::Avro => {
                    let field = "source.kafka.avro_schema";
                    let path = k.avro_schema.as_deref().map(|p| loaded.resolve_path(p));
                    let text = path
                        .as_deref()
                        .map(std::fs::read_to_string)
                        .transpose()
                        .map_err(|e| loaded.error_at(field, e.to_string()))?
                        .unwrap_or_default();
                    let schema = apache_avro::Schema::parse_str(&text)
                        .map_err(|e| loaded.error_at(field, e.to_string()))?;
                    ValueFormat::Avro(Box::new(schema))
                }
            };
            let start = match (k.start_timestamp_ms, k.start) {
                (Some(millis), _) => StartPosition::Timestamp(millis),
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
                        properties: k.properties.clone(),
                        poll_timeout: Duration::from_millis(k.poll_timeout_ms),
                        timestamp_field: k.timestamp_field.clone(),
                    },
                    metrics.source_partitions.clone(),
                )
                .map_err(|error| loaded.error_at("source.kafka", error.to_string()))?,
            )
        }
    })
}

fn build_sink(
    loaded: &LoadedConfig,
    metrics: &PipelineMetrics,
    field: &str,
    sink: &SinkConfig,
    default_format: OutputFormat,
) -> Result<Box<dyn Sink>, PipelineError> {
    Ok(match sink {
        SinkConfig::File { path, format } => {
            let path = loaded.resolve_path(path);
            Box::new(
                JsonLinesSink::create(field, &path, format.unwrap_or(default_format)).map_err(
                    |error| {
                        loaded.error_at(
                            &format!("{field}.file.path"),
                            format!("cannot create {}: {error}", path.display()),
                        )
                    },
                )?,
            )
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
        SinkConfig::Kafka {
            bootstrap_servers,
            topic,
            partition,
            properties,
        } => Box::new(
            KafkaSink::new(
                field,
                KafkaSinkOptions {
                    bootstrap_servers: bootstrap_servers.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                    properties: properties.clone(),
                    flush_timeout: Duration::from_secs(60),
                },
                metrics.sink_partitions.clone(),
            )
            .map_err(|error| loaded.error_at(&format!("{field}.kafka"), error.to_string()))?,
        ),
    })
}
