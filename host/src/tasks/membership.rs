//! A process's membership in a scaled-out pipeline's consumer group: the
//! group decides which tasks the process runs.
//!
//! The member subscribes to the source's topics with KIP-848's protocol
//! and the broker's `range` assignor (same-index partitions of every topic
//! go to one member, so a task gets its partition of each). It never reads
//! records itself: an assigned partition is paused at once and its task
//! reads it with a consumer of its own. A revoked partition's task is
//! stopped inside the rebalance callback, before the partition is released,
//! so that its final checkpoint is committed before the next owner
//! restores it.

use super::registry::{TaskPlan, TaskRegistry, TasksReport};
use super::stages::{self, Stage};
use super::{TaskBoard, TaskId};
use crate::config::{ConfigError, LoadedConfig, SourceConfig};
use crate::connectors::kafka::{OffsetCommits, RepartitionAdmin};
use crate::pipeline::PluginResolver;
use crate::runtime::PluginRuntime;
use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaResult;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientConfig, TopicPartitionList};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

/// Why a scaled-out pipeline could not run.
#[derive(Debug, thiserror::Error)]
pub enum ScaleOutError {
    /// The pipeline file is wrong for scale-out (located).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The process could not join or stay in the group.
    #[error("group membership of `{group}`: {message}")]
    Membership {
        /// The consumer group.
        group: String,
        /// What went wrong.
        message: String,
    },
    /// A task failed (the process stops its other tasks and ends, to be
    /// restarted: its tasks move meanwhile).
    #[error("{0}")]
    Task(String),
}

/// The group member's callbacks: rebalances start and stop the stage's
/// tasks.
struct MemberContext {
    stage: u32,
    tasks: Arc<TaskRegistry>,
}

impl ClientContext for MemberContext {}

/// The tasks of stage `stage` that read `partitions`.
fn tasks_of(stage: u32, partitions: &TopicPartitionList) -> BTreeSet<TaskId> {
    partitions
        .elements()
        .iter()
        .map(|element| TaskId {
            stage,
            index: element.partition(),
        })
        .collect()
}

impl ConsumerContext for MemberContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        error: RDKafkaRespErr,
        partitions: &mut TopicPartitionList,
    ) {
        let result = match error {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                tracing::info!(assigned = ?partitions.to_topic_map(), "partitions assigned to this process");
                // The member only holds the partitions: their tasks read them.
                let result = consumer
                    .incremental_assign(partitions)
                    .and_then(|()| consumer.pause(partitions));
                self.tasks.start(&tasks_of(self.stage, partitions));
                result
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                tracing::info!(revoked = ?partitions.to_topic_map(), "partitions revoked from this process");
                self.tasks.stop(&tasks_of(self.stage, partitions));
                consumer.incremental_unassign(partitions)
            }
            other => {
                tracing::warn!(error = ?other, "Kafka rebalance error");
                Ok(())
            }
        };
        if let Err(error) = result {
            tracing::error!(%error, "Kafka rebalance could not be applied");
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(error) = result {
            tracing::warn!(%error, offsets = ?offsets.to_topic_map(), "task offset commit refused");
        }
    }
}

/// Commits a task's offsets through the process's group member of its
/// stage; for a stage reading a repartition topic, then deletes what it
/// committed (the offsets are those of a completed checkpoint, whose
/// transaction committed: no restore reads before them again).
struct MemberCommits {
    member: OnceLock<Weak<BaseConsumer<MemberContext>>>,
    repartition: Option<Arc<RepartitionAdmin>>,
}

impl OffsetCommits for MemberCommits {
    fn commit(&self, offsets: &TopicPartitionList) {
        let Some(member) = self.member.get().and_then(Weak::upgrade) else {
            return;
        };
        if let Err(error) = member.commit(offsets, CommitMode::Async) {
            tracing::warn!(%error, "task offset commit refused");
        }
        if let Some(admin) = &self.repartition
            && let Err(error) = admin.delete_before(offsets)
        {
            tracing::warn!(%error, "repartition records not deleted (they are deleted with the next commit)");
        }
    }
}

/// One stage's group member and its tasks.
struct StageMember {
    member: Arc<BaseConsumer<MemberContext>>,
    tasks: Arc<TaskRegistry>,
}

/// Runs the tasks of the scaled-out pipeline `loaded` that the group gives
/// this process, until `stop` is set (every task then takes a final
/// checkpoint and the process leaves the group) or a task fails.
///
/// `board` shows what the tasks are doing meanwhile. `instance`: a stable
/// name of this process (a StatefulSet pod's), for
/// static membership: a process restarted under the same name gets its
/// tasks back without a rebalance. Without one, the process's tasks move
/// as soon as it leaves.
pub fn run_tasks(
    loaded: &LoadedConfig,
    runtime: &PluginRuntime,
    resolve_plugin: PluginResolver<'_>,
    instance: Option<&str>,
    stop: Arc<AtomicBool>,
    board: &TaskBoard,
) -> Result<TasksReport, ScaleOutError> {
    let SourceConfig::Kafka(kafka) = &loaded.config.source else {
        return Err(loaded
            .error_at("source", "only a Kafka source can be scaled out")
            .into());
    };
    let mut resolved = loaded.clone();
    // Plugins are resolved (crates built) once, not per task.
    for (index, operator) in resolved.config.operators.iter_mut().enumerate() {
        if let Some(plugin) = &operator.plugin {
            let component = resolve_plugin(&loaded.resolve_path(plugin))
                .map_err(|why| loaded.error_at(&format!("operators[{index}].plugin"), why))?;
            operator.plugin = Some(component);
        }
    }
    let cluster_error = |message: String| ScaleOutError::Membership {
        group: kafka.group_id.clone(),
        message,
    };
    let properties = kafka.granted_properties.over(&kafka.properties);
    let admin = Arc::new(
        RepartitionAdmin::new(&kafka.bootstrap_servers, &properties).map_err(cluster_error)?,
    );
    let partitions = source_partitions(&admin, &kafka.topics).map_err(cluster_error)?;
    let stages = stages::plan(&resolved, partitions)?;
    for stage in &stages {
        if let Some(target) = stage.repartition() {
            admin
                .ensure_topic(&target.topic, target.partitions)
                .map_err(cluster_error)?;
        }
    }
    let mut members = Vec::with_capacity(stages.len());
    for stage in stages {
        let member = join_stage(stage, runtime, instance, &admin)?;
        board.add_stage(member.tasks.clone());
        members.push(member);
    }
    board.set_joined(true);

    let mut failure = None;
    while !stop.load(Ordering::Relaxed) && failure.is_none() {
        for stage in &members {
            // Rebalance callbacks run in here; records never arrive (every
            // assigned partition is paused).
            if let Some(Err(error)) = stage.member.poll(POLL_WAIT / members.len().max(1) as u32) {
                tracing::warn!(%error, "group member error");
            }
            failure = failure.or_else(|| stage.tasks.failure());
        }
    }
    let mut report = TasksReport::default();
    board.set_joined(false);
    for stage in &members {
        stage.tasks.close();
    }
    for stage in &members {
        tracing::info!(tasks = ?stage.tasks.running(), "stopping the tasks, then leaving the group");
        stage.tasks.stop_all();
        // Leaves the group (the revoke callback finds no task left).
        stage.member.unsubscribe();
        report.tasks.extend(stage.tasks.report().tasks);
    }
    drop(members);
    match failure {
        Some(error) => Err(ScaleOutError::Task(error)),
        None => Ok(report),
    }
}

/// How long the members are polled per round (shared among them).
const POLL_WAIT: Duration = Duration::from_millis(100);

/// The partition count of the source topics (co-partitioned: all the
/// same).
fn source_partitions(admin: &RepartitionAdmin, topics: &[String]) -> Result<i32, String> {
    let mut counts = topics
        .iter()
        .map(|topic| admin.partitions(topic).map(|count| (topic, count)))
        .collect::<Result<Vec<_>, _>>()?;
    counts.sort_by_key(|(_, count)| *count);
    match (counts.first(), counts.last()) {
        (Some((_, low)), Some((_, high))) if low == high => Ok(*low),
        (Some((a, low)), Some((b, high))) => Err(format!(
            "a task reads the same partition of every topic: `{a}` has {low} partitions, `{b}` {high}"
        )),
        _ => Err("no source topic".to_string()),
    }
}

/// Joins stage `stage`'s consumer group with a member whose assignment
/// starts and stops the stage's tasks.
fn join_stage(
    stage: Stage,
    runtime: &PluginRuntime,
    instance: Option<&str>,
    admin: &Arc<RepartitionAdmin>,
) -> Result<StageMember, ScaleOutError> {
    let Some(kafka) = stage.source().cloned() else {
        return Err(stage
            .loaded
            .error_at("source", "only a Kafka source can be scaled out")
            .into());
    };
    let group = kafka.group_id.clone();
    let membership_error = |message: String| ScaleOutError::Membership {
        group: group.clone(),
        message,
    };
    let commits = Arc::new(MemberCommits {
        member: OnceLock::new(),
        repartition: kafka.repartition_input.then(|| admin.clone()),
    });
    let tenant = stage.loaded.config.pipeline.tenant.clone();
    let pipeline = stage.loaded.config.pipeline.name.clone();
    let tasks = Arc::new(TaskRegistry::new(TaskPlan {
        loaded: stage.loaded,
        runtime: runtime.clone(),
        commits: commits.clone(),
    }));
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &kafka.bootstrap_servers)
        .set("group.id", &kafka.group_id)
        .set("group.protocol", "consumer")
        .set("group.remote.assignor", "range")
        .set("enable.auto.commit", "false")
        // Paused at once; nothing worth buffering.
        .set("queued.max.messages.kbytes", "64");
    let properties = kafka.granted_properties.over(&kafka.properties);
    for (key, value) in crate::connectors::kafka::connection_properties(&properties) {
        config.set(key, value);
    }
    if let Some(instance) = instance {
        config.set(
            "group.instance.id",
            format!("sluice.{tenant}.{pipeline}.{}.{instance}", stage.index),
        );
    }
    let member: Arc<BaseConsumer<MemberContext>> = Arc::new(
        config
            .create_with_context(MemberContext {
                stage: stage.index,
                tasks: tasks.clone(),
            })
            .map_err(|e| membership_error(format!("cannot create the group member: {e}")))?,
    );
    let _ = commits.member.set(Arc::downgrade(&member));
    let topics: Vec<&str> = kafka.topics.iter().map(String::as_str).collect();
    member
        .subscribe(&topics)
        .map_err(|e| membership_error(format!("cannot subscribe to {topics:?}: {e}")))?;
    tracing::info!(group = %kafka.group_id, stage = stage.index, ?instance, "joined the group; tasks follow its assignment");
    Ok(StageMember { member, tasks })
}
