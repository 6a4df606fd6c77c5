//! Builds a runnable pipeline from a loaded pipeline file.

use crate::checkpoint::coordinator::CoordinatorParts;
use crate::checkpoint::restore::CheckpointError;
use crate::checkpoint::workdir::{WorkDir, new_open_id};
use crate::checkpoint::{
    CheckpointCoordinator, CheckpointMode, CheckpointSettings, CheckpointStore, RestoreFrom,
    StorageLocation,
};
use crate::config::StateBackendKind;
use crate::config::{
    ConfigError, Delivery, KafkaStart, LoadedConfig, SinkConfig, SinkValueFormat, SourceConfig,
    ValueFormatName,
};
use crate::connectors::blackhole::BlackholeSink;
use crate::connectors::file::{
    ExactlyOnceFileSink, FileSource, FileSourceOptions, JsonLinesSink, OutputFormat,
};
use crate::connectors::generator::{GeneratorOptions, GeneratorSource};
use crate::connectors::iceberg::{IcebergCommits, IcebergSink};
use crate::connectors::kafka::{
    DEFAULT_PROGRESS_TOPIC, DEFAULT_TRANSACTIONAL_ID_PREFIX, ExactlyOnceKafkaSink, KafkaSink,
    KafkaSinkOptions, KafkaSource, KafkaSourceOptions, KafkaTransactionOptions, KafkaTransactions,
    StartPosition, ValueFormat,
};
use crate::connectors::schema_registry::{
    ConfluentAvroDecoder, ConfluentAvroEncoder, ConfluentAvroSink, SchemaRegistry,
};
use crate::dataflow::deploy::{DeployError, PluginRole, PluginSwitch, SwapReport, SwitchPort};
use crate::dataflow::{
    DataflowError, ExecutorConfig, FaultPolicy, KeyedStage, Operator, OperatorChain,
    ParallelChains, RunOutcome, Sink, SinkSet, Source, Topology, TransformOperator,
};
use crate::join::{IntervalJoinOperator, IntervalJoinOptions};
use crate::metrics::{OperatorMetrics, PipelineMetrics};
use crate::runtime::PluginAggregator;
use crate::runtime::{PluginInstance, PluginLimits, PluginRuntime};
use crate::state::key_group::KeyGroupRange;
use crate::state::{
    LazyStateBackend, MemoryStateBackend, OperatorScope, RocksStateBackend, StateBackend, StateTtl,
    ttl,
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
    /// Checkpoints could not be read, written or restored.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

impl From<crate::checkpoint::StorageError> for PipelineError {
    fn from(error: crate::checkpoint::StorageError) -> Self {
        PipelineError::Checkpoint(CheckpointError::Storage(error))
    }
}

/// How the sinks of a pipeline write.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SinkMode {
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
    state: Arc<dyn StateBackend>,
    /// Set when the pipeline checkpoints.
    checkpoints: Option<Arc<CheckpointCoordinator>>,
    /// The run's local directory (checkpointed pipelines), removed last.
    workdir: Option<WorkDir>,
    /// The checkpoint this run was restored from.
    restored: Option<u64>,
    /// Plugin swap channels, by operator.
    switches: BTreeMap<String, Arc<PluginSwitch>>,
    /// How long checkpoints may be held for a swap (see [`Deployer::swap`]).
    hold_limit: Option<Duration>,
}

/// Swaps the plugins of a running pipeline's operators at a checkpoint
/// barrier (see [`crate::dataflow::deploy`]), optionally holding later
/// checkpoints while the new version is on probation.
#[derive(Clone)]
pub struct Deployer {
    switches: BTreeMap<String, Arc<PluginSwitch>>,
    metrics: Arc<PipelineMetrics>,
    checkpoints: Option<Arc<CheckpointCoordinator>>,
    /// How long checkpoints may be held (exactly-once Kafka transactions
    /// stay open meanwhile).
    hold_limit: Option<Duration>,
}

impl Deployer {
    /// Runs `component` in every instance of `operator` from a barrier the
    /// source has not injected yet, and waits up to `timeout` for every
    /// instance to report; their reports. With `hold_for` (and checkpoints
    /// on), no checkpoint after the swap barrier is taken until
    /// [`Deployer::release`], which the caller promises within `hold_for`:
    /// the run can then be abandoned and restored from the swap barrier's
    /// checkpoint, with nothing of the new version committed. A hold as
    /// long as an exactly-once Kafka sink's transaction timeout (less an
    /// interval) is refused: the broker would abort the transaction.
    pub fn swap(
        &self,
        operator: &str,
        component: Arc<crate::runtime::PluginComponent>,
        timeout: Duration,
        hold_for: Option<Duration>,
    ) -> Result<Vec<SwapReport>, DeployError> {
        let switch = self
            .switches
            .get(operator)
            .ok_or_else(|| DeployError::NoSuchOperator(operator.to_string()))?;
        if !switch.role().accepts(component.world) {
            return Err(DeployError::WrongWorld {
                operator: operator.to_string(),
                role: switch.role(),
                world: component.world,
            });
        }
        if let (Some(hold), Some(limit)) = (hold_for, self.hold_limit)
            && hold >= limit
        {
            return Err(DeployError::HoldTooLong { hold, limit });
        }
        // Two ahead of the last injected barrier: the next one may be on
        // its way already; this one is certainly not.
        let at = self
            .metrics
            .last_barrier_id
            .load(std::sync::atomic::Ordering::SeqCst)
            + 2;
        if let (Some(_), Some(checkpoints)) = (hold_for, &self.checkpoints) {
            checkpoints.hold_after(at);
        }
        let generation = switch.request(component, at);
        switch
            .wait(generation, timeout)
            .ok_or_else(|| DeployError::Timeout {
                operator: operator.to_string(),
                barrier: at,
                timeout,
            })
    }

    /// Ends a hold on checkpoints taken by [`Deployer::swap`].
    pub fn release(&self) {
        if let Some(checkpoints) = &self.checkpoints {
            checkpoints.release();
        }
    }

    /// The counters of `operator`, summed over its instances.
    pub fn operator_counters(&self, operator: &str) -> crate::dataflow::deploy::PluginCounters {
        let snapshot = self.metrics.snapshot();
        snapshot
            .operators
            .iter()
            .filter(|o| {
                o.name == operator
                    || o.name
                        .strip_prefix(operator)
                        .is_some_and(|rest| rest.starts_with('#'))
            })
            .map(crate::dataflow::deploy::PluginCounters::of)
            .fold(Default::default(), |sum, counters| sum + counters)
    }
}

/// Opens the state backend `loaded`'s `[pipeline]` section asks for.
pub fn open_state_backend(loaded: &LoadedConfig) -> Result<Arc<dyn StateBackend>, PipelineError> {
    let pipeline = &loaded.config.pipeline;
    let backend: Arc<dyn StateBackend> = match pipeline.state_backend {
        StateBackendKind::Memory => Arc::new(MemoryStateBackend::new(crate::window::MERGE_FOLDS)),
        StateBackendKind::Rocksdb => {
            let Some(dir) = &pipeline.state_dir else {
                // State that lives as long as this run starts empty: the
                // database is made when an operator first uses state, so a
                // pipeline that keeps none never pays for one.
                return Ok(Arc::new(LazyStateBackend::new(|| {
                    Ok(Arc::new(RocksStateBackend::temporary(
                        crate::window::MERGE_FOLDS,
                    )?))
                })));
            };
            let backend =
                RocksStateBackend::open(&loaded.resolve_path(dir), crate::window::MERGE_FOLDS)
                    .map_err(|error| loaded.error_at("pipeline.state_dir", error.message))?;
            backend
                .claim_max_parallelism(pipeline.max_parallelism)
                .map_err(|error| loaded.error_at("pipeline.max_parallelism", error.message))?;
            Arc::new(backend)
        }
    };
    Ok(backend)
}

impl Pipeline {
    /// Opens the pipeline described by `loaded` as `sluice run` does: with
    /// `[checkpoints]`, restores `from` (state, source position, sinks'
    /// outputs) and checkpoints as it runs; without, builds it on the
    /// state backend its `[pipeline]` section asks for.
    pub fn open(
        loaded: &LoadedConfig,
        runtime: &PluginRuntime,
        resolve_plugin: PluginResolver<'_>,
        from: &RestoreFrom,
    ) -> Result<Self, PipelineError> {
        let Some(section) = &loaded.config.checkpoints else {
            let state = open_state_backend(loaded)?;
            return Self::build(loaded, runtime, state, resolve_plugin);
        };
        let pipeline = &loaded.config.pipeline;
        let location = checkpoint_location(loaded)?;
        let storage = crate::checkpoint::open_storage(
            &location,
            &section.s3,
            &pipeline.tenant,
            &pipeline.name,
        )?;
        let store = CheckpointStore::new(storage.clone());
        let aborted = storage.abort_incomplete_uploads()?;
        if aborted > 0 {
            tracing::info!(aborted, "aborted uploads a crash left incomplete");
        }
        // Fence first: from here on no earlier process can publish, so
        // what is chosen below stays the latest.
        let open_id = new_open_id();
        let fence = store.fence(&pipeline.tenant, &pipeline.name, &open_id)?;
        let metrics = Arc::new(PipelineMetrics::default());
        let mode = match section.mode {
            CheckpointMode::ExactlyOnce => SinkMode::ExactlyOnce {
                open_id: open_id.clone(),
            },
            CheckpointMode::AtLeastOnce => SinkMode::AtLeastOnce {
                append: *from != RestoreFrom::Fresh && !store.completed()?.is_empty(),
            },
        };
        let sinks = build_sinks(loaded, &metrics, &mode)?;
        let committers = sinks.committers();
        let restored = store.choose(from, &committers)?;
        if let Some(manifest) = &restored
            && manifest.max_parallelism != pipeline.max_parallelism
        {
            return Err(loaded
                .error_at(
                    "pipeline.max_parallelism",
                    format!(
                        "checkpoint {} splits state into {} key groups; it cannot change to {}",
                        manifest.id, manifest.max_parallelism, pipeline.max_parallelism
                    ),
                )
                .into());
        }

        // A fresh local directory; the state comes from the checkpoint alone.
        let root = match &pipeline.state_dir {
            Some(dir) => loaded.resolve_path(dir),
            None => std::env::temp_dir().join("sluice-state"),
        };
        let workdir =
            WorkDir::create(&root, &pipeline.tenant, &pipeline.name, &open_id).map_err(|e| {
                loaded.error_at(
                    "pipeline.state_dir",
                    format!(
                        "cannot create a state directory under {}: {e}",
                        root.display()
                    ),
                )
            })?;
        if let Some(manifest) = &restored {
            crate::checkpoint::snapshot::download(
                storage.as_ref(),
                &manifest.state,
                &workdir.db(),
            )?;
        }
        let backend = RocksStateBackend::open(&workdir.db(), crate::window::MERGE_FOLDS)
            .map_err(|error| loaded.error_at("pipeline.state_dir", error.message))?;
        backend
            .claim_max_parallelism(pipeline.max_parallelism)
            .map_err(|error| loaded.error_at("pipeline.max_parallelism", error.message))?;
        let backend = Arc::new(backend);

        let mut built = Self::assemble(
            loaded,
            runtime,
            backend.clone(),
            resolve_plugin,
            metrics.clone(),
            sinks,
        )?;
        if let Some(manifest) = &restored {
            built
                .source
                .restore_position(&manifest.source["position"])?;
            built.executor.restored_watermarks = Some(manifest.source["watermarks"].clone());
        }
        for committer in &committers {
            let restored_commit = restored.as_ref().map(|manifest| {
                (
                    manifest.id,
                    manifest
                        .sinks
                        .get(committer.name())
                        .cloned()
                        .unwrap_or_default(),
                )
            });
            committer
                .restore(restored_commit.as_ref().map(|(id, c)| (*id, c)))
                .map_err(|e| CheckpointError::Other(e.to_string()))?;
        }
        if let Some(manifest) = &restored {
            tracing::info!(
                checkpoint = manifest.id,
                storage = %storage.describe(),
                "restored"
            );
        }
        let settings = CheckpointSettings {
            storage,
            interval: Duration::from_millis(section.interval_ms),
            timeout: Duration::from_millis(section.timeout_ms),
            retained: section.retained,
            mode: section.mode,
            tenant: pipeline.tenant.clone(),
            pipeline: pipeline.name.clone(),
            max_parallelism: pipeline.max_parallelism,
            workers: pipeline.workers,
        };
        built.executor.barrier_interval = Some(settings.interval);
        built.restored = restored.as_ref().map(|m| m.id);
        built.checkpoints = Some(CheckpointCoordinator::new(
            settings,
            CoordinatorParts {
                store,
                backend,
                snapshots_dir: workdir.snapshots(),
                open_id,
                first_id: fence + 1,
                restored,
                committers,
                metrics: metrics.checkpoints.clone(),
            },
        ));
        built.workdir = Some(workdir);
        Ok(built)
    }

    /// Builds the pipeline described by `loaded` on `state`, without
    /// checkpoints: loads and instantiates its plugins (calling their
    /// `init`), opens its source and sinks.
    pub fn build(
        loaded: &LoadedConfig,
        runtime: &PluginRuntime,
        state: Arc<dyn StateBackend>,
        resolve_plugin: PluginResolver<'_>,
    ) -> Result<Self, PipelineError> {
        let metrics = Arc::new(PipelineMetrics::default());
        let sinks = build_sinks(loaded, &metrics, &SinkMode::Plain)?;
        Self::assemble(loaded, runtime, state, resolve_plugin, metrics, sinks)
    }

    /// The checkpoint this run restored, if any.
    pub fn restored_checkpoint(&self) -> Option<u64> {
        self.restored
    }

    /// Builds source, operators and topology around `sinks`.
    fn assemble(
        loaded: &LoadedConfig,
        runtime: &PluginRuntime,
        state: Arc<dyn StateBackend>,
        resolve_plugin: PluginResolver<'_>,
        metrics: Arc<PipelineMetrics>,
        sinks: SinkSet,
    ) -> Result<Self, PipelineError> {
        let config = &loaded.config;
        let mut source = build_source(loaded, &metrics)?;

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
        // One swap channel per operator running a plugin, shared by its
        // instances.
        let switches: BTreeMap<String, Arc<PluginSwitch>> = config
            .operators
            .iter()
            .enumerate()
            .filter(|(_, op)| op.join.is_none() && op.plugin.is_some())
            .map(|(index, op)| {
                let instances = operator_instances(config, index);
                let role = match op.window {
                    Some(_) => PluginRole::Aggregate,
                    None => PluginRole::Transform,
                };
                (op.name.clone(), PluginSwitch::new(instances, role))
            })
            .collect();
        let build = |index: usize, worker: Option<(usize, usize)>| {
            let switch = switches.get(&config.operators[index].name);
            build_operator(
                loaded,
                index,
                runtime,
                &state,
                resolve_plugin,
                worker,
                switch,
            )
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
                            .map(|index| build(index, Some((position + 1, worker))))
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

        // The operator right after the source gets the fields it reads
        // from the source's own parse of each record.
        let first = head.first().or_else(|| {
            stages
                .first()
                .and_then(|stage| stage.workers.first()?.first())
        });
        if let Some(fields) = first.and_then(|first| first.reads_fields()) {
            source.read_ahead(fields);
        }
        if let Some(names) = first.and_then(|first| first.projects_fields()) {
            source.project_ahead(names);
        }

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
            restored_watermarks: None,
            latency_marker_interval: (config.pipeline.latency_marker_interval_ms > 0)
                .then(|| Duration::from_millis(config.pipeline.latency_marker_interval_ms)),
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
            state,
            checkpoints: None,
            workdir: None,
            restored: None,
            switches,
            hold_limit: hold_limit(config),
        })
    }

    /// A handle that swaps operators' plugins while the pipeline runs.
    pub fn deployer(&self) -> Deployer {
        Deployer {
            switches: self.switches.clone(),
            metrics: self.metrics.clone(),
            checkpoints: self.checkpoints.clone(),
            hold_limit: self.hold_limit,
        }
    }

    /// The pipeline's live counters.
    pub fn metrics(&self) -> Arc<PipelineMetrics> {
        self.metrics.clone()
    }

    /// Runs until the input ends or `stop` is set (a clean stop takes a
    /// final checkpoint).
    pub fn run(self, stop: Arc<AtomicBool>) -> Result<RunOutcome, DataflowError> {
        let Pipeline {
            source,
            topology,
            executor,
            metrics,
            state,
            checkpoints,
            workdir,
            ..
        } = self;
        let result = crate::dataflow::run(source, topology, executor, metrics, stop, checkpoints);
        // The database closes before its directory goes.
        drop(state);
        drop(workdir);
        result
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
    stage_worker: Option<(usize, usize)>,
    switch: Option<&Arc<PluginSwitch>>,
) -> Result<Box<dyn Operator>, PipelineError> {
    let worker = stage_worker.map(|(_, worker)| worker);
    let config = &loaded.config;
    let operator = &config.operators[index];
    let scope = OperatorScope::new(
        &config.pipeline.tenant,
        &config.pipeline.name,
        &operator.name,
    );
    let operator_metrics = OperatorMetrics::new_in_stage(
        match worker {
            Some(worker) => format!("{}#{worker}", operator.name),
            None => operator.name.clone(),
        },
        stage_worker.map_or(0, |(stage, _)| stage),
    );
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
        init_deadline: Duration::from_millis(operator.init_deadline_ms),
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
        let mut window = build_window_operator(
            loaded,
            index,
            window,
            worker,
            aggregator,
            store,
            operator_metrics,
        )?;
        if let Some(switch) = switch {
            window = window.with_switch(SwitchPort::new(switch.clone(), worker.unwrap_or(0)));
        }
        return Ok(Box::new(window));
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
    let policy = FaultPolicy::default()
        .storm_threshold(operator.fault_storm_threshold)
        .on_storm(operator.on_fault_storm);
    let mut transform = TransformOperator::new(&operator.name, instance, operator_metrics)
        .with_fault_policy(policy);
    if let Some(switch) = switch {
        transform = transform.with_switch(SwitchPort::new(switch.clone(), worker.unwrap_or(0)));
    }
    Ok(Box::new(transform))
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

/// The built-in aggregate of `operators[index]` (`aggregate` or
/// `aggregates`).
fn builtin_aggregate(
    loaded: &LoadedConfig,
    index: usize,
) -> Result<BuiltinAggregate, PipelineError> {
    match loaded.config.operators[index].builtin_aggregate() {
        Some(Ok(aggregate)) => Ok(aggregate),
        Some(Err((field, message))) => Err(loaded
            .error_at(&format!("operators[{index}].{field}"), message)
            .into()),
        None => Err(loaded
            .error_at(
                &format!("operators[{index}].aggregate"),
                "a window operator needs an `aggregate` or a `plugin`",
            )
            .into()),
    }
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
    let mut options = WindowOperatorOptions::new(operator.name.clone(), spec);
    options.allowed_lateness = i64::try_from(operator.allowed_lateness_ms).unwrap_or(i64::MAX);
    options.key_field = operator.key_field.clone();
    options.late_output = late_output;
    options.max_parallelism = pipeline.max_parallelism;
    options.key_groups = key_groups(loaded, worker);
    options.cache_bytes = state_cache_bytes(loaded);
    options.mini_batch_records =
        usize::try_from(pipeline.state_mini_batch_records).unwrap_or(usize::MAX);
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
                        properties: k.granted_properties.over(&k.properties),
                        poll_timeout: Duration::from_millis(k.poll_timeout_ms),
                        timestamp_field: k.timestamp_field.clone(),
                        // A checkpointed pipeline restarts quickly after a
                        // crash: its restart takes over at once.
                        group_instance_id: loaded.config.checkpoints.as_ref().map(|_| {
                            format!(
                                "sluice.{}.{}",
                                loaded.config.pipeline.tenant, loaded.config.pipeline.name
                            )
                        }),
                        bounded: k.bounded,
                    },
                    metrics.source_partitions.clone(),
                )
                .map_err(|error| loaded.error_at("source.kafka", error.to_string()))?,
            )
        }
    })
}

/// Where `[checkpoints] storage` points (default: `.sluice/checkpoints`
/// beside the pipeline file).
pub fn checkpoint_location(loaded: &LoadedConfig) -> Result<StorageLocation, PipelineError> {
    let storage = loaded
        .config
        .checkpoints
        .as_ref()
        .and_then(|c| c.storage.clone())
        .unwrap_or_else(|| ".sluice/checkpoints".to_string());
    crate::checkpoint::storage_location(&storage, &loaded.file)
        .map_err(|message| loaded.error_at("checkpoints.storage", message).into())
}

/// The main, dead-letter and side-output sinks of `loaded`.
fn build_sinks(
    loaded: &LoadedConfig,
    metrics: &PipelineMetrics,
    mode: &SinkMode,
) -> Result<SinkSet, PipelineError> {
    let config = &loaded.config;
    let mut factory = SinkFactory {
        loaded,
        metrics,
        mode,
        kafka_transactions: None,
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
struct SinkFactory<'a> {
    loaded: &'a LoadedConfig,
    metrics: &'a PipelineMetrics,
    mode: &'a SinkMode,
    /// The pipeline's Kafka transactions, and the sink that set them up.
    kafka_transactions: Option<(String, Arc<KafkaTransactions>)>,
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
            SinkConfig::File { path, format } => {
                let path = loaded.resolve_path(path);
                let format = format.unwrap_or(default_format);
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
            SinkConfig::Kafka {
                topic,
                value_format,
                avro_schema,
                schema_registry,
                subject,
                ..
            } => {
                // Set up (and register) the encoding first: a registry that
                // refuses the schema stops the pipeline before any output.
                let encoder = match value_format {
                    SinkValueFormat::Json => None,
                    SinkValueFormat::AvroConfluent => {
                        let schema_field = format!("{field}.kafka.avro_schema");
                        let registry_field = format!("{field}.kafka.schema_registry");
                        let schema = avro_schema
                            .as_deref()
                            .ok_or_else(|| {
                                loaded.error_at(&schema_field, "`avro-confluent` needs it")
                            })
                            .and_then(|path| loaded.avro_schema(&schema_field, path))?;
                        let registry = schema_registry
                            .as_ref()
                            .ok_or_else(|| {
                                loaded.error_at(&registry_field, "`avro-confluent` needs it")
                            })
                            .and_then(|config| {
                                SchemaRegistry::new(config)
                                    .map_err(|why| loaded.error_at(&registry_field, why))
                            })?;
                        let subject = subject.clone().unwrap_or_else(|| format!("{topic}-value"));
                        Some(
                            ConfluentAvroEncoder::register(&registry, &subject, schema)
                                .map_err(|why| loaded.error_at(&registry_field, why.to_string()))?,
                        )
                    }
                };
                let sink = self.kafka_sink(field, sink)?;
                match encoder {
                    Some(encoder) => Box::new(ConfluentAvroSink::new(sink, encoder)),
                    None => sink,
                }
            }
        })
    }

    /// A Kafka sink, exactly-once or not, of the sink config `sink`.
    fn kafka_sink(
        &mut self,
        field: &str,
        sink: &SinkConfig,
    ) -> Result<Box<dyn Sink>, PipelineError> {
        let loaded = self.loaded;
        let SinkConfig::Kafka {
            bootstrap_servers,
            topic,
            partition,
            properties,
            granted_properties,
            delivery,
            ..
        } = sink
        else {
            return Err(loaded.error_at(field, "not a Kafka sink").into());
        };
        Ok({
            let exactly_once = matches!(self.mode, SinkMode::ExactlyOnce { .. })
                && *delivery != Some(Delivery::AtLeastOnce);
            if exactly_once {
                let transactions = self.kafka_transactions(field, sink)?;
                Box::new(ExactlyOnceKafkaSink::new(
                    field,
                    topic.clone(),
                    *partition,
                    transactions,
                ))
            } else {
                if *delivery == Some(Delivery::ExactlyOnce) {
                    return Err(loaded
                            .error_at(
                                &format!("{field}.kafka.delivery"),
                                "exactly-once delivery needs `[checkpoints]` with mode = \"exactly-once\"",
                            )
                            .into());
                }
                Box::new(
                    KafkaSink::new(
                        field,
                        KafkaSinkOptions {
                            bootstrap_servers: bootstrap_servers.clone(),
                            topic: topic.clone(),
                            partition: *partition,
                            properties: granted_properties.over(properties),
                            flush_timeout: Duration::from_secs(60),
                        },
                        self.metrics.sink_partitions.clone(),
                    )
                    .map_err(|error| {
                        loaded.error_at(&format!("{field}.kafka"), error.to_string())
                    })?,
                )
            }
        })
    }

    /// The pipeline's Kafka transactions, set up by the first exactly-once
    /// Kafka sink; later ones must name the same cluster and settings (one
    /// transaction spans them all).
    fn kafka_transactions(
        &mut self,
        field: &str,
        sink: &SinkConfig,
    ) -> Result<Arc<KafkaTransactions>, PipelineError> {
        let loaded = self.loaded;
        let SinkConfig::Kafka {
            bootstrap_servers,
            properties,
            granted_properties,
            progress_topic,
            transactional_id_prefix,
            transaction_timeout_ms,
            ..
        } = sink
        else {
            return Err(loaded.error_at(field, "not a Kafka sink").into());
        };
        let checkpoints = loaded.config.checkpoints.as_ref();
        let interval_ms = checkpoints.map_or(0, |c| c.interval_ms);
        let options = KafkaTransactionOptions {
            bootstrap_servers: bootstrap_servers.clone(),
            properties: granted_properties.over(properties),
            transactional_id_prefix: transactional_id_prefix
                .clone()
                .unwrap_or_else(|| DEFAULT_TRANSACTIONAL_ID_PREFIX.to_string()),
            tenant: loaded.config.pipeline.tenant.clone(),
            pipeline: loaded.config.pipeline.name.clone(),
            progress_topic: progress_topic
                .clone()
                .unwrap_or_else(|| DEFAULT_PROGRESS_TOPIC.to_string()),
            transaction_timeout: Duration::from_millis(transaction_timeout(
                *transaction_timeout_ms,
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
        self.kafka_transactions = Some((field.to_string(), transactions.clone()));
        Ok(transactions)
    }
}

/// A Kafka sink's transaction timeout, ms: as set, or three checkpoint
/// intervals and at least a minute.
fn transaction_timeout(set: Option<u64>, interval_ms: u64) -> u64 {
    set.unwrap_or(interval_ms.saturating_mul(3).max(60_000))
}

/// How long checkpoints of the pipeline `config` may be held: less than
/// its exactly-once Kafka sinks' transaction timeout minus an interval
/// (`None`: no such sink, no limit).
fn hold_limit(config: &crate::config::PipelineConfig) -> Option<Duration> {
    let checkpoints = config.checkpoints.as_ref()?;
    if checkpoints.mode != CheckpointMode::ExactlyOnce {
        return None;
    }
    std::iter::once(&config.sink)
        .chain(std::iter::once(&config.dead_letter))
        .chain(config.side_outputs.values())
        .filter_map(|sink| match sink {
            SinkConfig::Kafka {
                transaction_timeout_ms,
                ..
            } => Some(transaction_timeout(
                *transaction_timeout_ms,
                checkpoints.interval_ms,
            )),
            _ => None,
        })
        .min()
        .map(|timeout| Duration::from_millis(timeout.saturating_sub(checkpoints.interval_ms)))
}

/// How many instances `operators[index]` of `config` runs in: one before
/// the first keyed operator (window or join), `workers` from it on.
fn operator_instances(config: &crate::config::PipelineConfig, index: usize) -> usize {
    let workers = config.pipeline.workers.max(1);
    let first_keyed = config
        .operators
        .iter()
        .position(|op| op.window.is_some() || op.join.is_some());
    match first_keyed {
        Some(first) if workers > 1 && index >= first => workers,
        _ => 1,
    }
}

/// What one operator's plugin takes of a host: instances and their memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginFootprint {
    /// The operator.
    pub operator: String,
    /// Plugin instances it runs (one per worker of its stage).
    pub instances: u64,
    /// Their memory limits together, MiB.
    pub memory_mb: u64,
}

/// The plugin footprint of every operator of `config` that runs a plugin
/// (what a server's quotas count).
pub fn plugin_footprint(config: &crate::config::PipelineConfig) -> Vec<PluginFootprint> {
    config
        .operators
        .iter()
        .enumerate()
        .filter(|(_, op)| op.plugin.is_some())
        .map(|(index, op)| {
            let instances = operator_instances(config, index) as u64;
            PluginFootprint {
                operator: op.name.clone(),
                instances,
                memory_mb: instances.saturating_mul(op.memory_limit_mb),
            }
        })
        .collect()
}
