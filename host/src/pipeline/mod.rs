//! Builds a runnable pipeline from a loaded pipeline file.
//!
//! [`Pipeline::open`] (with checkpoints: restore, then run) and
//! [`Pipeline::build`] (without) assemble what the builders beside this
//! file make, one per kind of part, each knowing its config sections:
//!
//! * `sources`: the `[source]` section's source.
//! * `operators`: each `[[operators]]` entry (plugin transform, window with
//!   a built-in or plugin aggregate, interval join), once or per worker.
//! * `sinks`: main, dead-letter and side-output sinks, plain, at-least-once
//!   or exactly-once as `[checkpoints]` says.
//! * `swapper`: the [`PluginSwapper`] that hot-swaps plugins of the running
//!   pipeline.

mod operators;
mod sinks;
mod sources;
mod swapper;

pub use operators::{PluginFootprint, plugin_footprint};
use operators::{build_operator, operator_instances};
use sinks::{SinkMode, build_sinks, hold_limit};
use sources::build_source;
pub use swapper::PluginSwapper;

use crate::checkpoint::coordinator::CoordinatorParts;
use crate::checkpoint::restore::CheckpointError;
use crate::checkpoint::workdir::{WorkDir, new_open_id};
use crate::checkpoint::{
    CheckpointCoordinator, CheckpointMode, CheckpointSettings, CheckpointStore, RestoreFrom,
    StorageLocation,
};
use crate::config::StateBackendKind;
use crate::config::{ConfigError, LoadedConfig};
use crate::connectors::kafka::KafkaAssignment;
use crate::dataflow::swap::{PluginRole, PluginSwap};
use crate::dataflow::{
    DataflowError, ExecutorConfig, KeyedStage, OperatorChain, ParallelChains, RunOutcome, SinkSet,
    Source, Topology,
};
use crate::metrics::PipelineMetrics;
use crate::runtime::PluginRuntime;
use crate::state::{LazyStateBackend, MemoryStateBackend, RocksStateBackend, StateBackend};
use crate::time::WatermarkStrategy;
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
    swaps: BTreeMap<String, Arc<PluginSwap>>,
    /// How long checkpoints may be held for a swap (see [`PluginSwapper::swap`]).
    hold_limit: Option<Duration>,
}

/// Opens the state backend `loaded`'s `[pipeline]` section asks for.
pub fn open_state_backend(loaded: &LoadedConfig) -> Result<Arc<dyn StateBackend>, PipelineError> {
    let pipeline = &loaded.config.pipeline;
    let memory = operators::state_memory(loaded).rocksdb();
    let backend: Arc<dyn StateBackend> = match pipeline.state_backend {
        StateBackendKind::Memory => Arc::new(MemoryStateBackend::new(crate::window::MERGE_FOLDS)),
        StateBackendKind::Rocksdb => {
            let Some(dir) = &pipeline.state_dir else {
                // State that lives as long as this run starts empty: the
                // database is made when an operator first uses state, so a
                // pipeline that keeps none never pays for one.
                return Ok(Arc::new(LazyStateBackend::new(move || {
                    Ok(Arc::new(RocksStateBackend::temporary(
                        crate::window::MERGE_FOLDS,
                        memory,
                    )?))
                })));
            };
            let backend = RocksStateBackend::open(
                &loaded.resolve_path(dir),
                crate::window::MERGE_FOLDS,
                memory,
            )
            .map_err(|error| loaded.error_at("pipeline.state_dir", error.message))?;
            backend
                .claim_max_parallelism(pipeline.max_parallelism.get())
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
        Self::open_with(loaded, runtime, resolve_plugin, from, None)
    }

    /// Opens one task of a scaled-out pipeline (ADR 0020) as
    /// [`Pipeline::open`] does, reading only `assignment`'s partitions.
    /// `loaded` is the task's view of the pipeline file: its name is the
    /// task's ([`crate::tasks::TaskId::scoped_name`]), so that its
    /// checkpoints, local state, transactional ids and progress records are
    /// the task's own.
    pub fn open_task(
        loaded: &LoadedConfig,
        runtime: &PluginRuntime,
        resolve_plugin: PluginResolver<'_>,
        from: &RestoreFrom,
        assignment: KafkaAssignment,
    ) -> Result<Self, PipelineError> {
        Self::open_with(loaded, runtime, resolve_plugin, from, Some(assignment))
    }

    fn open_with(
        loaded: &LoadedConfig,
        runtime: &PluginRuntime,
        resolve_plugin: PluginResolver<'_>,
        from: &RestoreFrom,
        task: Option<KafkaAssignment>,
    ) -> Result<Self, PipelineError> {
        let is_task = task.is_some();
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
        tracing::debug!(fence, %open_id, "earlier runs fenced off");
        let metrics = Arc::new(PipelineMetrics::default());
        let mode = match section.mode {
            CheckpointMode::ExactlyOnce => SinkMode::ExactlyOnce {
                open_id: open_id.clone(),
            },
            CheckpointMode::AtLeastOnce => SinkMode::AtLeastOnce {
                append: *from != RestoreFrom::Fresh && !store.completed()?.is_empty(),
            },
        };
        let building_sinks = std::time::Instant::now();
        let sinks = build_sinks(
            loaded,
            &metrics,
            &mode,
            task.as_ref().map(|task| task.offsets.clone()),
        )?;
        let sinks_ms = building_sinks.elapsed().as_secs_f64() * 1000.0;
        let committers = sinks.committers();
        let choosing = std::time::Instant::now();
        let restored = store.choose(from, &committers)?;
        let choose_ms = choosing.elapsed().as_secs_f64() * 1000.0;
        if let Some(manifest) = &restored
            && manifest.max_parallelism != pipeline.max_parallelism.get()
        {
            return Err(loaded
                .error_at(
                    "pipeline.max_parallelism",
                    format!(
                        "checkpoint {} splits state into {} key groups; it cannot change to {}",
                        manifest.id,
                        manifest.max_parallelism,
                        pipeline.max_parallelism.get()
                    ),
                )
                .into());
        }

        // A fresh local directory; the state comes from the checkpoint alone.
        let root = match &pipeline.state_dir {
            Some(dir) => loaded.resolve_path(dir),
            None => std::env::temp_dir().join("sluice-state"),
        };
        let restoring = restored.as_ref().map_or(&[][..], |m| &m.state[..]);
        let state_dir_error = |e: std::io::Error| {
            loaded.error_at(
                "pipeline.state_dir",
                format!(
                    "cannot create a state directory under {}: {e}",
                    root.display()
                ),
            )
        };
        let (workdir, warm) =
            WorkDir::create(&root, &pipeline.tenant, &pipeline.name, &open_id, restoring)
                .map_err(state_dir_error)?;
        let mut download_ms = 0.0;
        let mut downloaded_bytes = 0;
        if let Some(manifest) = &restored {
            let started = std::time::Instant::now();
            downloaded_bytes = crate::checkpoint::snapshot::download(
                storage.as_ref(),
                &manifest.state,
                &workdir.db(),
                &warm,
            )?;
            download_ms = started.elapsed().as_secs_f64() * 1000.0;
            // For the warm restore of the next run.
            crate::checkpoint::warm::record_restored(workdir.path(), &manifest.state)
                .map_err(state_dir_error)?;
        }
        let backend = RocksStateBackend::open(
            &workdir.db(),
            crate::window::MERGE_FOLDS,
            operators::state_memory(loaded).rocksdb(),
        )
        .map_err(|error| loaded.error_at("pipeline.state_dir", error.message))?;
        backend
            .claim_max_parallelism(pipeline.max_parallelism.get())
            .map_err(|error| loaded.error_at("pipeline.max_parallelism", error.message))?;
        let backend = Arc::new(backend);

        let assembling = std::time::Instant::now();
        let mut built = Self::assemble(
            loaded,
            runtime,
            backend.clone(),
            resolve_plugin,
            metrics.clone(),
            sinks,
            task,
        )?;
        // Opening the operators on the restored state (their timers'
        // heads, join key groups: nothing proportional to the state, issue
        // 44); the source's seek to its position comes after.
        let open_ms = assembling.elapsed().as_secs_f64() * 1000.0;
        // A task of a scaled-out pipeline is one of many a process owns:
        // while its input is quiet it takes no checkpoints.
        built.executor.skip_quiet_barriers = is_task;
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
                .map_err(CheckpointError::from)?;
        }
        if let Some(manifest) = &restored {
            tracing::info!(
                checkpoint = manifest.id,
                written_by = %manifest.open_id,
                fence,
                storage = %storage.describe(),
                restored_bytes = manifest.state.iter().map(|file| file.bytes).sum::<u64>(),
                downloaded_bytes,
                reused_bytes = warm.bytes(),
                sinks_ms,
                choose_ms,
                download_ms,
                open_ms,
                "restored"
            );
        }
        let settings = CheckpointSettings {
            storage,
            interval: Duration::from_millis(section.interval_ms.get()),
            timeout: Duration::from_millis(section.timeout_ms.get()),
            retained: section.retained.get(),
            mode: section.mode,
            tenant: pipeline.tenant.clone(),
            pipeline: pipeline.name.clone(),
            max_parallelism: pipeline.max_parallelism.get(),
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
        let sinks = build_sinks(loaded, &metrics, &SinkMode::Plain, None)?;
        Self::assemble(loaded, runtime, state, resolve_plugin, metrics, sinks, None)
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
        task: Option<KafkaAssignment>,
    ) -> Result<Self, PipelineError> {
        let config = &loaded.config;
        let mut source = build_source(loaded, &metrics, task)?;

        // Split before every keyed operator: with several workers, each
        // keyed stage runs in `workers` threads behind a key-by exchange.
        let count = config.operators.len();
        let workers = config.pipeline.workers.max(1);
        let keyed: Vec<usize> = (0..count)
            .filter(|&index| config.operators[index].is_keyed())
            .collect();
        let head_end = match keyed.first() {
            Some(&first) if workers > 1 => first,
            _ => count,
        };
        // One swap channel per operator running a plugin, shared by its
        // instances.
        let swaps: BTreeMap<String, Arc<PluginSwap>> = config
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
                (op.name.clone(), PluginSwap::new(instances, role))
            })
            .collect();
        let build = |index: usize, worker: Option<(usize, usize)>| {
            let swap = swaps.get(&config.operators[index].name);
            build_operator(loaded, index, runtime, &state, resolve_plugin, worker, swap)
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
            batch_size: config.pipeline.batch_size.get(),
            channel_capacity: config.pipeline.channel_capacity.get(),
            watermarks: WatermarkStrategy {
                max_out_of_orderness: Duration::from_millis(
                    config.pipeline.max_out_of_orderness_ms.get(),
                ),
                idle_timeout: config
                    .pipeline
                    .idle_timeout_ms
                    .map(|ms| Duration::from_millis(ms.get())),
            },
            barrier_interval: (config.pipeline.checkpoint_interval_ms.get() > 0)
                .then(|| Duration::from_millis(config.pipeline.checkpoint_interval_ms.get())),
            restored_watermarks: None,
            latency_marker_interval: (config.pipeline.latency_marker_interval_ms.get() > 0)
                .then(|| Duration::from_millis(config.pipeline.latency_marker_interval_ms.get())),
            skip_quiet_barriers: false,
        };
        let topology = if stages.is_empty() {
            Topology::Chain(OperatorChain::new(head, sinks, metrics.clone()))
        } else {
            Topology::Parallel(ParallelChains {
                head,
                stages,
                max_parallelism: config.pipeline.max_parallelism.get(),
                sinks,
                side_outputs: config.side_outputs.keys().cloned().collect(),
                channel_capacity: config.pipeline.channel_capacity.get(),
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
            swaps,
            hold_limit: hold_limit(config),
        })
    }

    /// A handle that swaps operators' plugins while the pipeline runs.
    pub fn swapper(&self) -> PluginSwapper {
        PluginSwapper {
            swaps: self.swaps.clone(),
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

#[cfg(test)]
pub(super) mod test_files {
    //! Pipeline files for the builders' unit tests.

    use crate::config::LoadedConfig;
    use std::path::Path;

    /// A generator into a blackhole, with `extra` appended (more sections).
    pub(crate) fn pipeline(extra: &str) -> LoadedConfig {
        let text = format!(
            "[pipeline]\nname = \"p\"\n\n[source.generator]\ncount = 10\n\n[sink]\nblackhole = {{}}\n\n{extra}"
        );
        match LoadedConfig::parse(Path::new("/pipelines/p.toml"), &text) {
            Ok(loaded) => loaded,
            Err(error) => panic!("{error}\n{text}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_component_files_are_plugins_without_a_builder() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.wasm");
        std::fs::write(&file, b"\0asm").unwrap();
        assert_eq!(wasm_files_only(&file).unwrap(), file);
        let error = wasm_files_only(dir.path()).unwrap_err();
        assert!(error.contains("sluice plugin build"), "{error}");
    }

    #[test]
    fn checkpoints_go_beside_the_file_unless_told() {
        let loaded = test_files::pipeline("[checkpoints]\ninterval_ms = 1000\n");
        assert_eq!(
            checkpoint_location(&loaded).unwrap(),
            StorageLocation::Local(PathBuf::from("/pipelines/.sluice/checkpoints"))
        );
        let loaded = test_files::pipeline("[checkpoints]\nstorage = \"s3://b/p\"\n");
        assert!(matches!(
            checkpoint_location(&loaded).unwrap(),
            StorageLocation::S3 { .. }
        ));
    }

    #[test]
    fn a_pipeline_builds_and_runs_to_its_end() {
        let loaded = test_files::pipeline("");
        let runtime = PluginRuntime::new(crate::runtime::RuntimeConfig::default()).unwrap();
        let state = open_state_backend(&loaded).unwrap();
        let pipeline = Pipeline::build(&loaded, &runtime, state, &wasm_files_only).unwrap();
        let metrics = pipeline.metrics();
        pipeline.run(Arc::new(AtomicBool::new(false))).unwrap();
        let count = |counter: &std::sync::atomic::AtomicU64| {
            counter.load(std::sync::atomic::Ordering::Relaxed)
        };
        assert_eq!(
            (count(&metrics.records_in), count(&metrics.records_out)),
            (10, 10)
        );
    }
}
