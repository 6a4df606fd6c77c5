//! One builder per kind of operator: a plugin transform, a window (with a
//! built-in or plugin aggregate), an interval join.

use super::{PipelineError, PluginResolver};
use crate::config::LoadedConfig;
use crate::dataflow::swap::{PluginSwap, SwapPort};
use crate::dataflow::{FaultPolicy, Operator, TransformOperator};
use crate::join::{IntervalJoinOperator, IntervalJoinOptions, JoinSide, SideSelector};
use crate::metrics::OperatorMetrics;
use crate::runtime::PluginAggregator;
use crate::runtime::{PluginInstance, PluginLimits, PluginRuntime};
use crate::sql::{
    SqlDedupOperator, SqlDedupOptions, SqlJoinOperator, SqlProjectOperator, SqlWindowAggregate,
    SqlWindowOutput, window_spec,
};
use crate::state::key_group::KeyGroupRange;
use crate::state::{OperatorScope, StateBackend, StateMemoryBudget, StateTtl, ttl};
use crate::window::{
    Aggregator, BuiltinAggregate, LateOutput, WindowOperator, WindowOperatorOptions,
};
use std::sync::Arc;
use std::time::Duration;

/// Builds `operators[index]` (for `worker`, when keyed operators run in
/// several workers: each gets its own instance and counters).
pub(super) fn build_operator(
    loaded: &LoadedConfig,
    index: usize,
    runtime: &PluginRuntime,
    state: &Arc<dyn StateBackend>,
    resolve_plugin: PluginResolver<'_>,
    stage_worker: Option<(usize, usize)>,
    swap: Option<&Arc<PluginSwap>>,
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
        ttl: Duration::from_millis(ms.get()),
        clock: ttl::system_clock(),
    });
    let open_store = || {
        state
            .open(&scope, ttl)
            .map_err(|error| loaded.error_at(&format!("operators[{index}]"), error.to_string()))
    };
    if operator.is_sql() {
        return build_sql_operator(loaded, index, worker, open_store, operator_metrics);
    }
    let store = open_store()?;
    if let Some(join) = &operator.join {
        let (left, right) = join
            .sides()
            .map_err(|message| loaded.error_at(&format!("operators[{index}].join"), message))?;
        let options = IntervalJoinOptions {
            name: operator.name.clone(),
            left,
            right,
            lower: join.lower_ms.get(),
            upper: join.upper_ms.get(),
            late_output: late_output(loaded, index)?,
            max_parallelism: config.pipeline.max_parallelism.get(),
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
        deadline: Duration::from_millis(operator.deadline_ms.get()),
        init_deadline: Duration::from_millis(operator.init_deadline_ms.get()),
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
        let spec = window
            .spec()
            .map_err(|message| loaded.error_at(&format!("operators[{index}].window"), message))?;
        let key = WindowKeyChoice::Field(operator.key_field.clone());
        let mut window = build_window_operator(
            loaded,
            index,
            spec,
            key,
            worker,
            aggregator,
            store,
            operator_metrics,
        )?;
        if let Some(swap) = swap {
            window = window.with_swaps(SwapPort::new(swap.clone(), worker.unwrap_or(0)));
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
        .storm_threshold(operator.fault_storm_threshold.get())
        .on_storm(operator.on_fault_storm);
    let mut transform = TransformOperator::new(&operator.name, instance, operator_metrics)
        .with_fault_policy(policy);
    if let Some(swap) = swap {
        transform = transform.with_swaps(SwapPort::new(swap.clone(), worker.unwrap_or(0)));
    }
    Ok(Box::new(transform))
}

/// The SQL operator `operators[index]`: its query compiled at start-up
/// (an error points into the SQL) onto the operator that runs it — a
/// projection, or the window operator (with its state from `open_store`)
/// for a window aggregation.
fn build_sql_operator(
    loaded: &LoadedConfig,
    index: usize,
    worker: Option<usize>,
    open_store: impl FnOnce() -> Result<Arc<dyn crate::state::StateStore>, crate::config::ConfigError>,
    metrics: Arc<OperatorMetrics>,
) -> Result<Box<dyn Operator>, PipelineError> {
    let name = &loaded.config.operators[index].name;
    let (query, _) = loaded.sql_query(index)?;
    let _ = metrics.sql.set(query.trim().to_string());
    match loaded.sql_plan(index)? {
        sluice_sql::Plan::Project(plan) => {
            Ok(Box::new(SqlProjectOperator::new(name, plan, metrics)))
        }
        sluice_sql::Plan::Window(plan) => {
            let plan = Arc::new(plan);
            let key = WindowKeyChoice::Columns(plan.key_paths());
            let window = build_window_operator(
                loaded,
                index,
                window_spec(plan.window),
                key,
                worker,
                Box::new(SqlWindowAggregate::new(plan.clone())),
                open_store()?,
                metrics,
            )?;
            Ok(Box::new(
                window.with_output(Box::new(SqlWindowOutput::new(plan))),
            ))
        }
        sluice_sql::Plan::Join(plan) => {
            let field = format!("operators[{index}].sql");
            let side = |input: &sluice_sql::JoinInput| -> Result<JoinSide, PipelineError> {
                let selector = match (&input.view, &loaded.config.source) {
                    (Some(view), _) => SideSelector::FieldEquals {
                        field: view.column.clone(),
                        value: view.value.clone(),
                    },
                    (None, crate::config::SourceConfig::Kafka(kafka))
                        if kafka.topics.contains(&input.table) =>
                    {
                        SideSelector::Topic(input.table.clone())
                    }
                    (None, _) => {
                        return Err(loaded
                            .error_at(
                                &field,
                                format!(
                                    "`{}` is the whole input: each side of a join is a part of it (a Kafka topic, a Nexmark table)",
                                    input.table
                                ),
                            )
                            .into());
                    }
                };
                let key_field = match &input.key {
                    sluice_json::FieldPath::Top(name) => {
                        format!("/{}", name.replace('~', "~0").replace('/', "~1"))
                    }
                    sluice_json::FieldPath::Pointer(pointer) => pointer.clone(),
                };
                Ok(JoinSide {
                    selector,
                    key_field,
                })
            };
            let options = IntervalJoinOptions {
                name: name.clone(),
                left: side(&plan.left)?,
                right: side(&plan.right)?,
                lower: plan.lower,
                upper: plan.upper,
                late_output: late_output(loaded, index)?,
                max_parallelism: loaded.config.pipeline.max_parallelism.get(),
                key_groups: key_groups(loaded, worker),
                cache_bytes: state_cache_bytes(loaded),
            };
            let join = IntervalJoinOperator::new(options, open_store()?, metrics.clone())
                .map_err(|error| loaded.error_at(&field, error.to_string()))?;
            let project = SqlProjectOperator::after(name, plan.project, metrics);
            Ok(Box::new(SqlJoinOperator::new(join, project)))
        }
        sluice_sql::Plan::Deduplicate(plan) => {
            let options = SqlDedupOptions {
                name: name.clone(),
                order: plan.order,
                late_output: late_output(loaded, index)?,
                max_parallelism: loaded.config.pipeline.max_parallelism.get(),
                key_groups: key_groups(loaded, worker),
            };
            let dedup =
                SqlDedupOperator::new(options, plan, open_store()?, metrics).map_err(|error| {
                    loaded.error_at(&format!("operators[{index}]"), error.to_string())
                })?;
            Ok(Box::new(dedup))
        }
    }
}

/// Where `operators[index]` sends late records.
pub(super) fn late_output(
    loaded: &LoadedConfig,
    index: usize,
) -> Result<LateOutput, PipelineError> {
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
pub(super) fn builtin_aggregate(
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

/// The pipeline's memory for keyed state, `state_cache_mb`.
pub(super) fn state_memory(loaded: &LoadedConfig) -> StateMemoryBudget {
    let megabytes = loaded.config.pipeline.state_cache_mb.get();
    StateMemoryBudget::new(usize::try_from(megabytes.saturating_mul(1 << 20)).unwrap_or(usize::MAX))
}

/// The cache of one instance of a keyed operator: the operators' share of
/// [`state_memory`] split among every keyed operator's instances (one per
/// worker each).
pub(super) fn state_cache_bytes(loaded: &LoadedConfig) -> usize {
    let config = &loaded.config;
    let keyed = config
        .operators
        .iter()
        .filter(|operator| operator.is_keyed())
        .count();
    state_memory(loaded).operator_cache_bytes(keyed * config.pipeline.workers.max(1))
}

/// The key groups a keyed operator's instance for `worker` owns (all of
/// them for the only instance).
pub(super) fn key_groups(loaded: &LoadedConfig, worker: Option<usize>) -> KeyGroupRange {
    let pipeline = &loaded.config.pipeline;
    match worker {
        Some(worker) => {
            KeyGroupRange::for_worker(worker, pipeline.workers, pipeline.max_parallelism.get())
        }
        None => KeyGroupRange::for_worker(0, 1, pipeline.max_parallelism.get()),
    }
}

/// What a window operator built here is keyed by.
pub(super) enum WindowKeyChoice {
    /// `key_field` (`None`: the record key).
    Field(Option<String>),
    /// A SQL query's `GROUP BY` keys.
    Columns(Vec<sluice_json::FieldPath>),
}

/// The window operator of `operators[index]` (its instance for `worker`,
/// if it runs in several), cutting event time as `spec`, keyed by `key`,
/// computing `aggregator`.
#[allow(clippy::too_many_arguments)]
pub(super) fn build_window_operator(
    loaded: &LoadedConfig,
    index: usize,
    spec: crate::window::WindowSpec,
    key: WindowKeyChoice,
    worker: Option<usize>,
    aggregator: Box<dyn Aggregator>,
    store: Arc<dyn crate::state::StateStore>,
    metrics: Arc<OperatorMetrics>,
) -> Result<WindowOperator, PipelineError> {
    let pipeline = &loaded.config.pipeline;
    let operator = &loaded.config.operators[index];
    let late_output = late_output(loaded, index)?;
    let mut options = WindowOperatorOptions::new(operator.name.clone(), spec);
    options.allowed_lateness =
        i64::try_from(operator.allowed_lateness_ms.get()).unwrap_or(i64::MAX);
    match key {
        WindowKeyChoice::Field(field) => options.key_field = field,
        WindowKeyChoice::Columns(columns) => options.key_columns = Some(columns),
    }
    options.late_output = late_output;
    options.max_parallelism = pipeline.max_parallelism.get();
    options.key_groups = key_groups(loaded, worker);
    options.cache_bytes = state_cache_bytes(loaded);
    options.mini_batch_records =
        usize::try_from(pipeline.state_mini_batch_records.get()).unwrap_or(usize::MAX);
    WindowOperator::new(options, aggregator, store, metrics).map_err(|error| {
        loaded
            .error_at(&format!("operators[{index}]"), error.to_string())
            .into()
    })
}

/// How many instances `operators[index]` of `config` runs in: one before
/// the first keyed operator (window, join, SQL window), `workers` from it
/// on.
pub(super) fn operator_instances(config: &crate::config::PipelineConfig, index: usize) -> usize {
    let workers = config.pipeline.workers.max(1);
    let first_keyed = config.operators.iter().position(|op| op.is_keyed());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::test_files::pipeline;

    const WINDOW_THEN_PLUGIN: &str = r#"
[pipeline]
workers = 3

[[operators]]
name = "before"
plugin = "a.wasm"
memory_limit_mb = 10

[[operators]]
name = "counts"
window = { tumbling_ms = 1000 }
aggregate = { function = "count" }

[[operators]]
name = "after"
plugin = "b.wasm"
memory_limit_mb = 20
"#;

    #[test]
    fn operators_run_once_before_the_first_keyed_one_and_per_worker_from_it() {
        // `[pipeline]` again would be a duplicate table: put workers in the
        // generated file's own section instead.
        let plugins = tempfile::tempdir().unwrap();
        let mut text = WINDOW_THEN_PLUGIN.replace("[pipeline]\nworkers = 3\n", "");
        for name in ["a.wasm", "b.wasm"] {
            let file = plugins.path().join(name);
            std::fs::write(&file, b"\0asm").unwrap();
            text = text.replace(
                &format!("\"{name}\""),
                &format!("{:?}", file.display().to_string()),
            );
        }
        let mut loaded = pipeline(&text);
        loaded.config.pipeline.workers = 3;
        let config = &loaded.config;
        assert_eq!(
            (0..3)
                .map(|i| operator_instances(config, i))
                .collect::<Vec<_>>(),
            [1, 3, 3]
        );
        assert_eq!(
            plugin_footprint(config),
            [
                PluginFootprint {
                    operator: "before".into(),
                    instances: 1,
                    memory_mb: 10
                },
                PluginFootprint {
                    operator: "after".into(),
                    instances: 3,
                    memory_mb: 60
                },
            ]
        );
        loaded.config.pipeline.workers = 1;
        assert_eq!(operator_instances(&loaded.config, 2), 1);
    }

    #[test]
    fn late_records_go_to_the_dead_letters_or_a_named_side_output() {
        let window = "[[operators]]\nname = \"w\"\nwindow = { tumbling_ms = 1000 }\naggregate = { function = \"count\" }\n";
        let loaded = pipeline(window);
        assert_eq!(late_output(&loaded, 0).unwrap(), LateOutput::DeadLetter);
        let loaded = pipeline(&format!(
            "{window}late_output = \"late\"\n\n[side_outputs.late]\nblackhole = {{}}\n"
        ));
        assert_eq!(
            late_output(&loaded, 0).unwrap(),
            LateOutput::Side("late".into())
        );
        let loaded = pipeline(&format!("{window}late_output = \"nowhere\"\n"));
        let error = late_output(&loaded, 0).unwrap_err().to_string();
        assert!(error.contains("operators[0].late_output"), "{error}");
    }
}
