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
use crate::connectors::kafka::KafkaSourceConfig;
use crate::connectors::kafka::{OffsetCommits, RepartitionAdmin, SharedReader};
use crate::pipeline::PluginResolver;
use crate::runtime::PluginRuntime;
use crate::sync::lock;
use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

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

/// Deletes consumed records of a repartition topic, in a thread of its
/// own: every few seconds, those before the offsets the stage's group has
/// committed.
///
/// The group's committed offsets, not the offsets a task asked to commit:
/// a KIP-848 coordinator refuses a commit from a member whose epoch is
/// stale (a process that lost its partitions and does not know yet), so
/// what it holds comes from the partitions' owners, each the offsets of a
/// completed checkpoint of its own, which the next owner restores (or a
/// newer one). And the broker's answers stay off the tasks' record path.
struct RecordDeleter {
    /// Dropped with the deleter: the thread ends.
    _stop: std::sync::mpsc::Sender<()>,
}

impl RecordDeleter {
    /// Starts deleting from the repartition topic `kafka` reads.
    fn start(kafka: &KafkaSourceConfig, admin: Arc<RepartitionAdmin>) -> Result<Self, String> {
        let Some(topic) = kafka.topics.first().cloned() else {
            return Err("a repartition input names no topic".into());
        };
        let partitions = admin.partitions(&topic)?;
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &kafka.bootstrap_servers)
            .set("group.id", &kafka.group_id)
            .set("group.protocol", "consumer")
            .set("enable.auto.commit", "false")
            // The tasks commit their offsets in their transactions, one
            // open most of the time: a `read_committed` lookup asks for
            // stable offsets and is refused (UNSTABLE_OFFSET_COMMIT) while
            // one is pending, which left half the records undeleted. The
            // offsets of committed transactions are what may be deleted.
            .set("isolation.level", "read_uncommitted");
        let properties = kafka.granted_properties.over(&kafka.properties);
        for (key, value) in crate::connectors::kafka::connection_properties(&properties) {
            config.set(key, value);
        }
        // Never subscribes: it only reads the group's committed offsets.
        let reader: BaseConsumer = config
            .create()
            .map_err(|e| format!("cannot create a reader of committed offsets: {e}"))?;
        let mut all = TopicPartitionList::new();
        for partition in 0..partitions {
            all.add_partition(&topic, partition);
        }
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("sluice-delete-records".into())
            .spawn(move || {
                // Per partition: the committed offset seen last, and the
                // one seen before it changed to that.
                let mut seen: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
                let mut deleted: BTreeMap<i32, i64> = BTreeMap::new();
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(DELETE_INTERVAL) {
                    let committed = match reader.committed_offsets(all.clone(), DELETE_INTERVAL) {
                        Ok(committed) => committed,
                        Err(error) => {
                            tracing::debug!(%error, "committed offsets not read; deleting later");
                            continue;
                        }
                    };
                    let mut due = TopicPartitionList::new();
                    let mut advanced = Vec::new();
                    for element in committed.elements() {
                        let Offset::Offset(offset) = element.offset() else {
                            continue;
                        };
                        let partition = element.partition();
                        let (last, before) = seen.entry(partition).or_insert((offset, 0));
                        if offset > *last {
                            (*last, *before) = (offset, *last);
                        }
                        // Deleted up to the offsets seen *before* the newest:
                        // a restore may fall back from the newest checkpoint
                        // to its parent (its sink commit not found), whose
                        // offsets were committed no later than that.
                        let safe = *before;
                        if deleted.get(&partition).copied().unwrap_or(0) < safe
                            && due
                                .add_partition_offset(&topic, partition, Offset::Offset(safe))
                                .is_ok()
                        {
                            advanced.push((partition, safe));
                        }
                    }
                    if advanced.is_empty() {
                        continue;
                    }
                    match admin.delete_before(&due) {
                        Ok(()) => {
                            tracing::debug!(topic, before = ?advanced, "consumed repartition records deleted");
                            deleted.extend(advanced);
                        }
                        Err(error) => {
                            tracing::warn!(%error, "repartition records not deleted (retried shortly)");
                        }
                    }
                }
            })
            .map_err(|e| format!("cannot start the repartition record deleter: {e}"))?;
        Ok(RecordDeleter { _stop: stop })
    }
}

/// How often committed repartition records are deleted.
const DELETE_INTERVAL: Duration = Duration::from_secs(2);

/// Commits a task's offsets (those of a completed checkpoint) through the
/// process's group member of its stage (for a stage reading a repartition
/// topic, [`RecordDeleter`] then deletes what the group holds).
struct MemberCommits {
    member: Mutex<Weak<BaseConsumer<MemberContext>>>,
}

impl OffsetCommits for MemberCommits {
    fn commit(&self, offsets: &TopicPartitionList) {
        let Some(member) = lock(&self.member).upgrade() else {
            return;
        };
        if let Err(error) = member.commit(offsets, CommitMode::Async) {
            tracing::warn!(%error, "task offset commit refused");
        }
    }

    fn group_metadata(&self) -> Option<rdkafka::consumer::ConsumerGroupMetadata> {
        lock(&self.member).upgrade()?.group_metadata()
    }
}

/// One stage's group member and its tasks. The member can be made again:
/// a process restarted under the same instance name before the broker
/// noticed its predecessor died is refused (`UNRELEASED_INSTANCE_ID`, fatal
/// for the client) until the predecessor's session times out.
struct StageMember {
    index: u32,
    kafka: KafkaSourceConfig,
    /// `group.instance.id`, with static membership.
    instance_id: Option<String>,
    tasks: Arc<TaskRegistry>,
    commits: Arc<MemberCommits>,
    /// Reads the records of the stage's tasks in this process.
    reader: Arc<SharedReader>,
    /// For a stage reading a repartition topic.
    _deleter: Option<RecordDeleter>,
    member: Option<Arc<BaseConsumer<MemberContext>>>,
    /// When to make the member again after it was refused.
    rejoin_at: Option<Instant>,
}

impl StageMember {
    /// The stage's tasks, not yet in the group.
    fn new(
        stage: Stage,
        runtime: &PluginRuntime,
        instance: Option<&str>,
        admin: &Arc<RepartitionAdmin>,
    ) -> Result<Self, ScaleOutError> {
        let Some(kafka) = stage.source().cloned() else {
            return Err(stage
                .loaded
                .error_at("source", "only a Kafka source can be scaled out")
                .into());
        };
        let commits = Arc::new(MemberCommits {
            member: Mutex::new(Weak::new()),
        });
        let deleter = match kafka.repartition_input {
            true => Some(
                RecordDeleter::start(&kafka, admin.clone()).map_err(|message| {
                    ScaleOutError::Membership {
                        group: kafka.group_id.clone(),
                        message,
                    }
                })?,
            ),
            false => None,
        };
        let pipeline = &stage.loaded.config.pipeline;
        let instance_id = instance.map(|instance| {
            format!(
                "sluice.{}.{}.{}.{instance}",
                pipeline.tenant, pipeline.name, stage.index
            )
        });
        let index = stage.index;
        let reader = Arc::new(
            SharedReader::new(
                &kafka.bootstrap_servers,
                &kafka.group_id,
                &kafka.granted_properties.over(&kafka.properties),
            )
            .map_err(|e| ScaleOutError::Membership {
                group: kafka.group_id.clone(),
                message: format!("cannot create the stage's reader: {e}"),
            })?,
        );
        let tasks = Arc::new(TaskRegistry::new(TaskPlan {
            loaded: stage.loaded,
            runtime: runtime.clone(),
            commits: commits.clone(),
            reader: reader.clone(),
        }));
        Ok(StageMember {
            index,
            kafka,
            instance_id,
            tasks,
            commits,
            reader,
            _deleter: deleter,
            member: None,
            rejoin_at: None,
        })
    }

    fn error(&self, message: String) -> ScaleOutError {
        ScaleOutError::Membership {
            group: self.kafka.group_id.clone(),
            message,
        }
    }

    /// Joins the stage's consumer group with a member whose assignment
    /// starts and stops the stage's tasks.
    fn join(&mut self) -> Result<(), ScaleOutError> {
        let kafka = &self.kafka;
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
        if let Some(instance_id) = &self.instance_id {
            config.set("group.instance.id", instance_id);
        }
        let member: Arc<BaseConsumer<MemberContext>> = Arc::new(
            config
                .create_with_context(MemberContext {
                    stage: self.index,
                    tasks: self.tasks.clone(),
                })
                .map_err(|e| self.error(format!("cannot create the group member: {e}")))?,
        );
        *lock(&self.commits.member) = Arc::downgrade(&member);
        let topics: Vec<&str> = kafka.topics.iter().map(String::as_str).collect();
        member
            .subscribe(&topics)
            .map_err(|e| self.error(format!("cannot subscribe to {topics:?}: {e}")))?;
        tracing::info!(group = %kafka.group_id, stage = self.index, instance = ?self.instance_id, "joined the group; tasks follow its assignment");
        self.member = Some(member);
        Ok(())
    }

    /// Serves the member's callbacks for up to `wait`; makes it again once
    /// a refused instance name may be free.
    fn poll(&mut self, wait: Duration) -> Result<(), ScaleOutError> {
        self.reader.serve();
        let Some(member) = &self.member else {
            if self.rejoin_at.is_some_and(|at| Instant::now() >= at) {
                self.rejoin_at = None;
                self.join()?;
            } else {
                std::thread::sleep(wait);
            }
            return Ok(());
        };
        match member.poll(wait) {
            Some(Err(KafkaError::MessageConsumptionFatal(
                RDKafkaErrorCode::UnreleasedInstanceId,
            ))) => {
                tracing::warn!(
                    instance = ?self.instance_id,
                    "this instance name is still the member of a process that died, until its session times out: joining again"
                );
                self.tasks.stop_all();
                self.member = None;
                self.rejoin_at = Some(Instant::now() + REJOIN_WAIT);
            }
            Some(Err(KafkaError::MessageConsumptionFatal(code))) => {
                return Err(self.error(format!("the group member failed: {code}")));
            }
            Some(Err(error)) => tracing::warn!(%error, "group member error"),
            _ => {}
        }
        Ok(())
    }

    /// Stops the tasks (final checkpoints) and leaves the group (the
    /// revoke callback then finds no task left).
    fn leave(&self) -> Vec<super::TaskReport> {
        tracing::info!(tasks = ?self.tasks.running(), "stopping the tasks, then leaving the group");
        self.tasks.stop_all();
        if let Some(member) = &self.member {
            member.unsubscribe();
        }
        self.tasks.report().tasks
    }
}

/// How long a member refused for its instance name waits before it asks
/// again.
const REJOIN_WAIT: Duration = Duration::from_secs(1);

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
        let mut member = StageMember::new(stage, runtime, instance, &admin)?;
        member.join()?;
        board.add_stage(member.tasks.clone());
        members.push(member);
    }
    board.set_joined(true);

    let wait = POLL_WAIT / u32::try_from(members.len().max(1)).unwrap_or(1);
    let mut failure = None;
    while !stop.load(Ordering::Relaxed) && failure.is_none() {
        for stage in &mut members {
            // Rebalance callbacks run in here; records never arrive (every
            // assigned partition is paused).
            if let Err(error) = stage.poll(wait) {
                failure = Some(error);
                break;
            }
            failure = stage.tasks.failure().map(ScaleOutError::Task);
            if failure.is_some() {
                break;
            }
        }
    }
    let mut report = TasksReport::default();
    board.set_joined(false);
    for stage in &members {
        stage.tasks.close();
    }
    for stage in &members {
        report.tasks.extend(stage.leave());
    }
    drop(members);
    match failure {
        Some(error) => Err(error),
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
