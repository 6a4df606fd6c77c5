//! Scale-out: one pipeline across many processes (ADR 0020).
//!
//! A scaled-out pipeline (`[source.kafka] scale_out = true`) is cut into
//! *tasks*, one per partition index of its input topics. Every process
//! running the pipeline file joins the source's consumer group with
//! KIP-848's protocol (`group.protocol = "consumer"`); the broker's `range`
//! assignor decides which process owns which partitions, and so which
//! tasks. Nothing else coordinates the processes.
//!
//! A task is the pipeline on its partitions alone: its own state, its own
//! checkpoints (`<pipeline>/tasks/<stage>-<index>/` in the checkpoint
//! storage), its own transactional ids and progress records. So a task
//! moves between processes by itself: the process it moves to fences the
//! one it left (the task's checkpoint fence and its transactional ids) and
//! restores the task's last committed checkpoint.
//!
//! * [`TaskId`]: (stage, partition index) and the names derived from it.
//! * [`run_tasks`]: what `sluice run` does with a scaled-out pipeline.

mod membership;
mod registry;
mod stages;

pub use membership::{ScaleOutError, run_tasks};
pub use registry::{TaskReport, TaskStatus, TasksReport};

use registry::TaskRegistry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What a process's tasks are doing now: for its status page, its
/// metrics and its readiness probe. [`run_tasks`] fills it in.
#[derive(Default)]
pub struct TaskBoard {
    stages: Mutex<Vec<Arc<TaskRegistry>>>,
    joined: AtomicBool,
}

impl TaskBoard {
    /// Every task the process owns now, stage by stage.
    pub fn tasks(&self) -> Vec<TaskStatus> {
        crate::sync::lock(&self.stages)
            .iter()
            .flat_map(|stage| stage.statuses())
            .collect()
    }

    /// Whether every group of the process has given it an assignment and
    /// every task it owns is restored and running (what a readiness probe
    /// asks).
    pub fn ready(&self) -> bool {
        self.joined.load(Ordering::Relaxed)
            && crate::sync::lock(&self.stages)
                .iter()
                .all(|stage| stage.assigned())
            && self.tasks().iter().all(|task| task.running)
    }

    fn add_stage(&self, tasks: Arc<TaskRegistry>) {
        crate::sync::lock(&self.stages).push(tasks);
    }

    fn set_joined(&self, joined: bool) {
        self.joined.store(joined, Ordering::Relaxed);
    }
}

/// A task: the pipeline stage `stage` on partition `index` of its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    /// The stage (0: the stage reading the pipeline's source).
    pub stage: u32,
    /// The partition index of every input topic the task reads.
    pub index: i32,
}

impl TaskId {
    /// `<stage>-<index>`, as logs and manifests name the task.
    pub fn name(&self) -> String {
        format!("{}-{}", self.stage, self.index)
    }

    /// The name the task's checkpoints, local state, transactional ids and
    /// progress records go under: `<pipeline>/tasks/<stage>-<index>`.
    pub fn scoped_name(&self, pipeline: &str) -> String {
        format!("{pipeline}/tasks/{}", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_names_put_it_under_its_pipeline() {
        let task = TaskId { stage: 0, index: 7 };
        assert_eq!(task.name(), "0-7");
        assert_eq!(task.scoped_name("orders"), "orders/tasks/0-7");
    }
}
