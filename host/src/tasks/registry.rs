//! The tasks a process runs now: started when the group assigns their
//! partitions, stopped (with a final checkpoint) when it revokes them.

use super::TaskId;
use crate::checkpoint::RestoreFrom;
use crate::config::{LoadedConfig, SinkConfig};
use crate::connectors::kafka::{
    KafkaAssignment, OffsetCommits, SharedReader, TaskOffsets, TaskWake,
};
use crate::dataflow::RunOutcome;
use crate::metrics::PipelineMetrics;
use crate::pipeline::{Pipeline, wasm_files_only};
use crate::runtime::PluginRuntime;
use crate::sync::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// How one task ran in this process.
#[derive(Debug, Clone)]
pub struct TaskReport {
    /// The task.
    pub task: TaskId,
    /// The checkpoint it restored, if any.
    pub restored: Option<u64>,
    /// Records its source read.
    pub records_in: u64,
    /// Records it wrote to the main sink.
    pub records_out: u64,
    /// How it ended, or why it failed.
    pub outcome: Result<RunOutcome, String>,
}

/// Every task a process ran, in the order they ended.
#[derive(Debug, Clone, Default)]
pub struct TasksReport {
    /// One entry per run of a task (a task that moved away and came back
    /// ran twice).
    pub tasks: Vec<TaskReport>,
}

/// What every task of the process is built from.
pub(super) struct TaskPlan {
    /// The pipeline file, its plugins already resolved to component files.
    pub(super) loaded: LoadedConfig,
    /// The process's plugin runtime.
    pub(super) runtime: PluginRuntime,
    /// Commits the tasks' offsets: the process's group member.
    pub(super) commits: Arc<dyn OffsetCommits>,
    /// Reads the records of every task of the stage in this process.
    pub(super) reader: Arc<SharedReader>,
}

/// A task's thread, how to stop it, and how far it got.
struct RunningTask {
    stop: Arc<AtomicBool>,
    /// Ends the task's wait for records, so that it sees `stop` at once.
    wake: TaskWake,
    thread: JoinHandle<TaskReport>,
    phase: Arc<Mutex<TaskPhase>>,
}

/// Where a task is in its life.
#[derive(Clone, Default)]
enum TaskPhase {
    /// Opening: restoring its checkpoint, instantiating plugins.
    #[default]
    Starting,
    /// Restored and running.
    Running {
        restored: Option<u64>,
        metrics: Arc<PipelineMetrics>,
    },
}

/// What a task is doing now, for status pages and probes.
#[derive(Clone)]
pub struct TaskStatus {
    /// The task.
    pub task: TaskId,
    /// The name its checkpoints and metrics go under.
    pub name: String,
    /// Restored and running (else still starting).
    pub running: bool,
    /// The checkpoint it restored.
    pub restored: Option<u64>,
    /// Its counters, once running.
    pub metrics: Option<Arc<PipelineMetrics>>,
}

/// The tasks of one process.
pub(super) struct TaskRegistry {
    plan: TaskPlan,
    running: Mutex<BTreeMap<TaskId, RunningTask>>,
    ended: Mutex<Vec<TaskReport>>,
    /// The first failure of a task that was not asked to stop.
    failure: Arc<Mutex<Option<String>>>,
    /// The process is leaving: assignments that still arrive (while the
    /// members leave the group) start nothing.
    closing: AtomicBool,
    /// The group has given this member an assignment (maybe empty).
    assigned: AtomicBool,
}

impl TaskRegistry {
    pub(super) fn new(plan: TaskPlan) -> Self {
        TaskRegistry {
            plan,
            running: Mutex::new(BTreeMap::new()),
            ended: Mutex::new(Vec::new()),
            failure: Arc::new(Mutex::new(None)),
            closing: AtomicBool::new(false),
            assigned: AtomicBool::new(false),
        }
    }

    /// Whether the group has given this member an assignment yet.
    pub(super) fn assigned(&self) -> bool {
        self.assigned.load(Ordering::Relaxed)
    }

    /// Starts no more tasks (the process is leaving the group).
    pub(super) fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }

    /// Starts the tasks of `tasks` that do not run yet, each in its own
    /// thread (opening a task restores its checkpoint, which can take a
    /// while: the caller, the group member's poll, must not wait for it).
    pub(super) fn start(&self, tasks: &BTreeSet<TaskId>) {
        if self.closing.load(Ordering::Relaxed) {
            return;
        }
        self.assigned.store(true, Ordering::Relaxed);
        let mut running = lock(&self.running);
        for &task in tasks {
            if running.contains_key(&task) {
                continue;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let mut loaded = self.plan.loaded.clone();
            loaded.config.pipeline.name = task.scoped_name(&loaded.config.pipeline.name);
            if let SinkConfig::Kafka(kafka) = &mut loaded.config.sink
                && let Some(target) = &mut kafka.repartition
            {
                target.task = task.index;
            }
            let runtime = self.plan.runtime.clone();
            let wake = TaskWake::default();
            let assignment = KafkaAssignment {
                partitions: vec![task.index],
                offsets: Arc::new(TaskOffsets::new(self.plan.commits.clone())),
                reader: self.plan.reader.clone(),
                wake: wake.clone(),
            };
            let failure = self.failure.clone();
            let task_stop = stop.clone();
            let phase = Arc::new(Mutex::new(TaskPhase::Starting));
            let task_phase = phase.clone();
            // Everything the task logs, from any of its threads, names it.
            let span = tracing::info_span!("task", task = %task.name());
            let thread = span.in_scope(|| {
                crate::sync::spawn_named(format!("task-{}", task.name()), move || {
                    let report = run_task(
                        task,
                        &loaded,
                        &runtime,
                        assignment,
                        task_stop.clone(),
                        &task_phase,
                    );
                    if let Err(error) = &report.outcome
                        && !task_stop.load(Ordering::Relaxed)
                    {
                        tracing::error!(task = %task.name(), %error, "task failed");
                        lock(&failure)
                            .get_or_insert_with(|| format!("task {}: {error}", task.name()));
                    }
                    report
                })
            });
            match thread {
                Ok(thread) => {
                    tracing::info!(task = %task.name(), "task starting");
                    running.insert(
                        task,
                        RunningTask {
                            stop,
                            wake,
                            thread,
                            phase,
                        },
                    );
                }
                Err(error) => {
                    lock(&self.failure).get_or_insert_with(|| {
                        format!("cannot start a thread for task {}: {error}", task.name())
                    });
                }
            }
        }
    }

    /// Stops the tasks of `tasks` that run here and waits for them: each
    /// drains, takes a final checkpoint and commits it, so that the process
    /// the task moves to starts where this one ended.
    pub(super) fn stop(&self, tasks: &BTreeSet<TaskId>) {
        let stopping: Vec<(TaskId, RunningTask)> = {
            let mut running = lock(&self.running);
            tasks
                .iter()
                .filter_map(|task| running.remove(task).map(|r| (*task, r)))
                .collect()
        };
        for (_, task) in &stopping {
            task.stop.store(true, Ordering::Relaxed);
            task.wake.wake();
        }
        for (id, task) in stopping {
            let report = task.thread.join().unwrap_or_else(|_| TaskReport {
                task: id,
                restored: None,
                records_in: 0,
                records_out: 0,
                outcome: Err("the task's thread panicked".into()),
            });
            tracing::info!(task = %id.name(), outcome = ?report.outcome, "task stopped");
            lock(&self.ended).push(report);
        }
    }

    /// Stops every task.
    pub(super) fn stop_all(&self) {
        let all: BTreeSet<TaskId> = lock(&self.running).keys().copied().collect();
        self.stop(&all);
    }

    /// The first failure of a task, if one failed while it was meant to run.
    pub(super) fn failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }

    /// The tasks running now.
    pub(super) fn running(&self) -> BTreeSet<TaskId> {
        lock(&self.running).keys().copied().collect()
    }

    /// What each task of this registry is doing now.
    pub(super) fn statuses(&self) -> Vec<TaskStatus> {
        let pipeline = &self.plan.loaded.config.pipeline.name;
        lock(&self.running)
            .iter()
            .map(|(task, running)| {
                let phase = lock(&running.phase).clone();
                let (restored, metrics) = match phase {
                    TaskPhase::Starting => (None, None),
                    TaskPhase::Running { restored, metrics } => (restored, Some(metrics)),
                };
                TaskStatus {
                    task: *task,
                    name: task.scoped_name(pipeline),
                    running: metrics.is_some(),
                    restored,
                    metrics,
                }
            })
            .collect()
    }

    /// Every task that ended so far.
    pub(super) fn report(&self) -> TasksReport {
        TasksReport {
            tasks: lock(&self.ended).clone(),
        }
    }
}

/// Opens task `task` (restoring its latest checkpoint) and runs it until
/// `stop`.
fn run_task(
    task: TaskId,
    loaded: &LoadedConfig,
    runtime: &PluginRuntime,
    assignment: KafkaAssignment,
    stop: Arc<AtomicBool>,
    phase: &Mutex<TaskPhase>,
) -> TaskReport {
    let mut report = TaskReport {
        task,
        restored: None,
        records_in: 0,
        records_out: 0,
        outcome: Ok(RunOutcome::Stopped),
    };
    let pipeline = match Pipeline::open_task(
        loaded,
        runtime,
        &wasm_files_only,
        &RestoreFrom::Latest,
        assignment,
    ) {
        Ok(pipeline) => pipeline,
        Err(error) => {
            report.outcome = Err(error.to_string());
            return report;
        }
    };
    report.restored = pipeline.restored_checkpoint();
    tracing::info!(task = %task.name(), restored = ?report.restored, "task running");
    let metrics: Arc<PipelineMetrics> = pipeline.metrics();
    *lock(phase) = TaskPhase::Running {
        restored: report.restored,
        metrics: metrics.clone(),
    };
    report.outcome = pipeline.run(stop).map_err(|error| error.to_string());
    let snapshot = metrics.snapshot();
    report.records_in = snapshot.records_in;
    report.records_out = snapshot.records_out;
    report
}
