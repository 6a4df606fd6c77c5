//! The Kafka source.

mod assignment;
mod bounded;
mod group_context;

pub use assignment::{KafkaAssignment, OffsetCommits, TaskOffsets};
use bounded::{BoundedRead, PartitionKey, end_offsets};
use group_context::{RebalanceLog, SourceContext};

use super::message::{intern, to_record};
use super::repartition::UpstreamWatermarks;
use super::shared_reader::{READER_SETTINGS, TaskReader};
use super::{ValueFormat, client_config};
use crate::dataflow::{DataflowError, Source, SourceBatch};
use crate::metrics::PartitionMetrics;
use crate::record::{Topic, into_dead_letter};
use crate::sync::lock;
use crate::time::SplitId;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use sluice_json::fields::FieldPath;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where a partition starts when this source is first assigned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartPosition {
    /// The group's committed offset; the earliest offset if there is none.
    #[default]
    Committed,
    /// The earliest offset, ignoring committed offsets.
    Earliest,
    /// The end of the partition, ignoring committed offsets.
    Latest,
    /// The first offset whose timestamp is at or after this (ms since epoch).
    Timestamp(i64),
}

impl StartPosition {
    /// The offset a partition starts at before any lookup (`Offset::Stored`:
    /// the group's committed offset, else the earliest; a time is looked
    /// up by the caller).
    fn first_offset(self) -> Offset {
        match self {
            StartPosition::Committed => Offset::Stored,
            StartPosition::Earliest => Offset::Beginning,
            StartPosition::Latest => Offset::End,
            StartPosition::Timestamp(millis) => Offset::Offset(millis),
        }
    }
}

/// Settings of a [`KafkaSource`].
#[derive(Debug, Clone)]
pub struct KafkaSourceOptions {
    /// `host:port` list.
    pub bootstrap_servers: String,
    /// Topics to subscribe to.
    pub topics: Vec<String>,
    /// Consumer group.
    pub group_id: String,
    /// Where newly assigned partitions start.
    pub start: StartPosition,
    /// How values are read.
    pub value_format: ValueFormat,
    /// Extra librdkafka properties (override the defaults).
    pub properties: BTreeMap<String, String>,
    /// Longest wait for records in one `next_batch`.
    pub poll_timeout: Duration,
    /// Field of the (JSON or Avro) value holding the event time, ms; absent:
    /// the Kafka record timestamp is the event time.
    pub timestamp_field: Option<String>,
    /// Static group membership (`group.instance.id`): a process restarted
    /// with the same id takes its predecessor's partitions at once, with no
    /// rebalance and no wait for the session to time out.
    pub group_instance_id: Option<String>,
    /// Read only up to the end offsets the topics have at start-up, then
    /// end (a bounded read, as Flink's `setBounded(latest)`): backfills,
    /// examples and tests that must finish.
    pub bounded: bool,
    /// Read exactly these partitions instead of joining the group: the
    /// partitions of one task, which its process's group membership owns
    /// (ADR 0020). `None`: subscribe as a member of `group_id`.
    pub assignment: Option<KafkaAssignment>,
    /// The topics are repartition topics (ADR 0020): watermark control
    /// records from the upstream tasks make the source's watermark
    /// ([`UpstreamWatermarks`]) instead of the records' event times.
    pub upstream_watermarks: bool,
}

/// Where a [`KafkaSource`] reads.
enum Reader {
    /// A consumer of its own, a member of the group (one-process
    /// pipelines).
    Group(BaseConsumer<SourceContext>),
    /// A task's partitions, read through its process's shared reader
    /// (scaled-out pipelines, ADR 0020).
    Task(TaskReader),
}

/// Reads records from Kafka topics as a member of a consumer group.
///
/// Offsets are Sluice's: `enable.auto.commit` is off, and the offsets reached
/// at each checkpoint barrier are committed only when the checkpoint
/// completes, i.e. when every sink has flushed everything before it. A crash
/// therefore replays at most the records since the last completed
/// checkpoint (at-least-once), never loses one.
pub struct KafkaSource {
    name: String,
    reader: Reader,
    rebalances: Arc<Mutex<RebalanceLog>>,
    options: KafkaSourceOptions,
    topics: HashMap<String, Topic>,
    /// Next offset to read, per assigned partition.
    positions: BTreeMap<(Topic, i32), i64>,
    /// Positions snapshotted at barriers, waiting for their checkpoint.
    pending: BTreeMap<u64, BTreeMap<(Topic, i32), i64>>,
    /// Records read and lag per partition.
    partitions: Arc<PartitionMetrics>,
    /// With `bounded`: where each partition ended at start-up.
    bounded: Option<BoundedRead>,
    /// `options.timestamp_field` as the field scan reads it.
    timestamp_path: Option<FieldPath>,
    /// A task's partitions are not assigned yet (see
    /// [`KafkaSource::assign_task_partitions`]).
    assign_pending: bool,
    /// With `upstream_watermarks`: what the upstream tasks said.
    upstream: UpstreamWatermarks,
    /// A task's splits, once its partitions are assigned.
    task_splits: Option<Vec<SplitId>>,
    /// The input has been quiet for a while ([`Source::set_quiet`]).
    quiet: bool,
    /// The offsets of the last commit sent by a group member, confirmed
    /// when the source is dropped.
    last_commit: Option<BTreeMap<PartitionKey, i64>>,
}

impl KafkaSource {
    /// Connects and subscribes. Records read and consumer lag per partition
    /// are reported to `partitions`.
    pub fn new(
        name: impl Into<String>,
        options: KafkaSourceOptions,
        partitions: Arc<PartitionMetrics>,
    ) -> Result<Self, DataflowError> {
        let name = name.into();
        let error = |message: String| DataflowError::Source {
            name: name.clone(),
            message,
        };
        let rebalances = Arc::new(Mutex::new(RebalanceLog::default()));
        let topics: Vec<&str> = options.topics.iter().map(String::as_str).collect();
        let reader = match &options.assignment {
            Some(assignment) => Reader::Task(
                assignment
                    .reader
                    .reader(
                        &options.topics,
                        &assignment.partitions,
                        partitions.clone(),
                        assignment.wake.clone(),
                    )
                    .map_err(error)?,
            ),
            None => {
                let mut settings = READER_SETTINGS.to_vec();
                settings.extend([
                    ("group.id", options.group_id.as_str()),
                    ("partition.assignment.strategy", "cooperative-sticky"),
                    ("session.timeout.ms", "10000"),
                ]);
                let mut config =
                    client_config(&options.bootstrap_servers, &settings, &options.properties);
                if let Some(instance) = &options.group_instance_id
                    && !options.properties.contains_key("group.instance.id")
                {
                    config.set("group.instance.id", instance);
                }
                let cooperative = config
                    .get("partition.assignment.strategy")
                    .is_some_and(group_context::is_cooperative);
                let consumer: BaseConsumer<SourceContext> = config
                    .create_with_context(SourceContext {
                        cooperative,
                        log: rebalances.clone(),
                        partitions: partitions.clone(),
                        start: options.start,
                        started: Mutex::new(HashSet::new()),
                        restored: Mutex::new(HashMap::new()),
                    })
                    .map_err(|e| error(format!("cannot create Kafka consumer: {e}")))?;
                Reader::Group(consumer)
            }
        };
        let bounded = if options.bounded {
            let ends = match &reader {
                Reader::Group(consumer) => end_offsets(consumer, &topics),
                Reader::Task(task) => end_offsets(task.consumer(), &topics).map(|mut ends| {
                    ends.retain(|(_, partition), _| {
                        task.partitions()
                            .elements()
                            .iter()
                            .any(|e| e.partition() == *partition)
                    });
                    ends
                }),
            };
            Some(BoundedRead::new(ends.map_err(error)?))
        } else {
            None
        };
        if let Reader::Group(consumer) = &reader {
            consumer
                .subscribe(&topics)
                .map_err(|e| error(format!("cannot subscribe to {topics:?}: {e}")))?;
        }
        let assign_pending = options.assignment.is_some();
        let timestamp_path = options.timestamp_field.as_deref().map(FieldPath::parse);
        Ok(KafkaSource {
            timestamp_path,
            bounded,
            name,
            reader,
            rebalances,
            options,
            topics: HashMap::new(),
            positions: BTreeMap::new(),
            pending: BTreeMap::new(),
            partitions,
            assign_pending,
            upstream: UpstreamWatermarks::default(),
            task_splits: None,
            quiet: false,
            last_commit: None,
        })
    }

    /// With an [`KafkaSourceOptions::assignment`]: assigns its partitions
    /// to the shared reader, each at the restored checkpoint's offset, else
    /// where `start` says. Done at the first read, after
    /// [`Source::restore_position`].
    fn assign_task_partitions(&mut self) -> Result<(), DataflowError> {
        if !std::mem::take(&mut self.assign_pending) {
            return Ok(());
        }
        let Reader::Task(reader) = &self.reader else {
            return Ok(());
        };
        let mut offsets = TopicPartitionList::new();
        let mut unstarted = TopicPartitionList::new();
        for element in reader.partitions().elements() {
            let (topic, partition) = (element.topic(), element.partition());
            let result = match self.positions.get(&(Topic::new(topic), partition)) {
                Some(offset) => {
                    offsets.add_partition_offset(topic, partition, Offset::Offset(*offset))
                }
                None => unstarted.add_partition_offset(
                    topic,
                    partition,
                    self.options.start.first_offset(),
                ),
            };
            result.map_err(|e| self.error(format!("cannot read {topic}/{partition}: {e}")))?;
        }
        if let StartPosition::Timestamp(_) = self.options.start
            && unstarted.count() > 0
        {
            unstarted = reader
                .consumer()
                .offsets_for_times(unstarted, Duration::from_secs(10))
                .map_err(|e| self.error(format!("cannot look up start offsets by time: {e}")))?;
        }
        for element in unstarted.elements() {
            offsets
                .add_partition_offset(element.topic(), element.partition(), element.offset())
                .map_err(|e| self.error(format!("cannot read {}: {e}", element.topic())))?;
        }
        tracing::info!(source = %self.name, start = ?offsets.to_topic_map(), "task partitions assigned");
        self.task_splits = Some(
            offsets
                .elements()
                .iter()
                .map(|e| (Topic::new(e.topic()), e.partition()))
                .collect(),
        );
        let name = self.name.clone();
        match &mut self.reader {
            Reader::Task(reader) => reader.start(&offsets).map_err(|e| DataflowError::Source {
                name,
                message: format!("cannot assign the task's partitions: {e}"),
            }),
            Reader::Group(_) => Ok(()),
        }
    }

    /// `offsets` (next offset to read, per partition) as librdkafka takes
    /// them.
    fn offset_list(
        &self,
        offsets: &BTreeMap<(Topic, i32), i64>,
    ) -> Result<TopicPartitionList, DataflowError> {
        let mut list = TopicPartitionList::new();
        for ((topic, partition), offset) in offsets {
            list.add_partition_offset(topic, *partition, Offset::Offset(*offset))
                .map_err(|e| self.error(format!("offset of {topic}/{partition}: {e}")))?;
        }
        Ok(list)
    }

    fn error(&self, message: String) -> DataflowError {
        DataflowError::Source {
            name: self.name.clone(),
            message,
        }
    }

    /// Forgets partitions revoked during the last poll: records already
    /// read from them may be read again by the new owner (at-least-once), and
    /// their offsets must not be committed by this member.
    fn apply_rebalances(&mut self) {
        let revoked = {
            let mut log = lock(&self.rebalances);
            std::mem::take(&mut log.revoked)
        };
        for (topic, partition) in revoked {
            let key = (intern(&mut self.topics, &topic), partition);
            self.positions.remove(&key);
            for snapshot in self.pending.values_mut() {
                snapshot.remove(&key);
            }
        }
    }
}

impl KafkaSource {
    /// With `bounded`: whether `offset` lies past the end of the partition
    /// `key` had at start-up.
    fn beyond_bound(&self, key: &PartitionKey, offset: i64) -> bool {
        self.bounded
            .as_ref()
            .is_some_and(|bound| bound.beyond(key, offset))
    }

    /// With `bounded`: whether this member has read every partition up to
    /// its end offset of start-up (every partition must be assigned to it).
    /// Partitions that have delivered nothing in this run have their start
    /// looked up once (see [`bounded`]).
    fn reached_end(&mut self) -> bool {
        let Some(bound) = &self.bounded else {
            return false;
        };
        let consumer_positions = match &self.reader {
            Reader::Group(consumer) => consumer.position(),
            Reader::Task(task) => task.consumer().position(),
        }
        .ok();
        let position = |key: &PartitionKey| {
            let consumer = consumer_positions
                .as_ref()
                .and_then(|list| list.find_partition(&key.0, key.1))
                .and_then(|element| match element.offset() {
                    Offset::Offset(offset) => Some(offset),
                    _ => None,
                });
            consumer.max(self.positions.get(key).copied())
        };
        let unknown: Vec<PartitionKey> = bound
            .unfinished(position)
            .into_iter()
            .filter_map(|(key, unknown)| unknown.then_some(key))
            .collect();
        if !unknown.is_empty() {
            match self.look_up_starts(&unknown) {
                Ok(starts) => {
                    if let Some(bound) = &mut self.bounded {
                        for (key, offset) in starts {
                            bound.set_start(key, offset);
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(source = %self.name, %error, "cannot look up where partitions start; looking again at the next empty poll");
                    return false;
                }
            }
        }
        let Some(bound) = &self.bounded else {
            return false;
        };
        if !bound.unfinished(position).is_empty() {
            return false;
        }
        // librdkafka's lag, sampled every second, is stale now.
        for (topic, partition) in bound.partitions() {
            self.partitions.set_lag(topic, *partition, 0);
        }
        true
    }

    /// Where `partitions` (which delivered nothing in this run) start, as
    /// `start` says: the group's committed offset (else what
    /// `auto.offset.reset` says), the earliest or latest offset, or the
    /// first at a time.
    fn look_up_starts(
        &self,
        partitions: &[PartitionKey],
    ) -> Result<Vec<(PartitionKey, i64)>, String> {
        const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
        let Some(bound) = &self.bounded else {
            return Ok(Vec::new());
        };
        let watermarks = |key: &PartitionKey| bound.watermarks(key).unwrap_or((0, 0));
        let from_latest = self
            .options
            .properties
            .get("auto.offset.reset")
            .is_some_and(|reset| matches!(reset.as_str(), "latest" | "largest" | "end"));
        let mut list = TopicPartitionList::new();
        for (topic, partition) in partitions {
            let offset = match self.options.start {
                StartPosition::Timestamp(millis) => Offset::Offset(millis),
                _ => Offset::Invalid,
            };
            list.add_partition_offset(topic, *partition, offset)
                .map_err(|e| format!("{topic}/{partition}: {e}"))?;
        }
        let looked_up = match self.options.start {
            StartPosition::Earliest => None,
            // Assigned at or after start-up: at or past the bound.
            StartPosition::Latest => None,
            StartPosition::Committed => Some(match &self.reader {
                Reader::Group(consumer) => consumer.committed_offsets(list, LOOKUP_TIMEOUT),
                Reader::Task(task) => task.consumer().committed_offsets(list, LOOKUP_TIMEOUT),
            }),
            StartPosition::Timestamp(_) => Some(match &self.reader {
                Reader::Group(consumer) => consumer.offsets_for_times(list, LOOKUP_TIMEOUT),
                Reader::Task(task) => task.consumer().offsets_for_times(list, LOOKUP_TIMEOUT),
            }),
        };
        let looked_up = looked_up
            .transpose()
            .map_err(|e| format!("cannot look up start offsets: {e}"))?;
        Ok(partitions
            .iter()
            .map(|key| {
                let (low, high) = watermarks(key);
                let found = looked_up
                    .as_ref()
                    .and_then(|list| list.find_partition(&key.0, key.1))
                    .map(|element| element.offset());
                let start = match (self.options.start, found) {
                    (StartPosition::Earliest, _) => low,
                    (StartPosition::Latest, _) => high,
                    (_, Some(Offset::Offset(offset))) => offset.max(low),
                    // No record at or after the time.
                    (StartPosition::Timestamp(_), _) => high,
                    // No committed offset: `auto.offset.reset`.
                    (_, _) if from_latest => high,
                    (_, _) => low,
                };
                (*key, start)
            })
            .collect())
    }
}

impl Source for KafkaSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn carries_watermarks(&self) -> bool {
        self.options.upstream_watermarks
    }

    /// A quiet task waits for records up to `QUIET_TASK_WAIT` at a time
    /// (a record ends the wait at once; a stop is seen within it).
    fn set_quiet(&mut self, quiet: bool) {
        self.quiet = quiet;
    }

    /// The partitions assigned to this member: a partition that has sent
    /// nothing yet still holds the watermark back (until it is idle).
    fn splits(&self) -> Option<Vec<SplitId>> {
        let consumer = match &self.reader {
            Reader::Group(consumer) => consumer,
            // A task's partitions never change: no round trip through
            // librdkafka's main thread at every read.
            Reader::Task(_) => return self.task_splits.clone(),
        };
        let assignment = consumer.assignment().ok()?;
        Some(
            assignment
                .elements()
                .iter()
                .map(|e| (Topic::new(e.topic()), e.partition()))
                .collect(),
        )
    }

    fn next_batch(&mut self, max_records: usize) -> Result<Option<SourceBatch>, DataflowError> {
        self.assign_task_partitions()?;
        let mut batch = SourceBatch::default();
        let mut read_per_partition: BTreeMap<(Topic, i32), u64> = BTreeMap::new();
        let wait = match (&self.reader, self.quiet) {
            // Woken at once by a record or a stop.
            (Reader::Task(_), true) => QUIET_TASK_WAIT,
            _ => self.options.poll_timeout,
        };
        let deadline = Instant::now() + wait;
        while batch.records.len() + batch.dead_letters.len() < max_records {
            // Wait for the first record up to the deadline; then take only
            // what is already there.
            let wait = if batch.records.is_empty() && batch.dead_letters.is_empty() {
                whole_millis(deadline.saturating_duration_since(Instant::now()))
            } else {
                Duration::ZERO
            };
            // Rebalances reported by the previous poll are applied before the
            // next one (seeking needs no message borrowed from the consumer).
            self.apply_rebalances();
            let polled = match &self.reader {
                Reader::Group(consumer) => consumer.poll(wait),
                Reader::Task(task) => task.poll(wait),
            };
            let message = match polled {
                None => break,
                Some(Ok(message)) => message,
                Some(Err(error)) => {
                    // Transient broker errors are retried by librdkafka; report and go on.
                    tracing::warn!(source = %self.name, %error, "Kafka consumer error");
                    if Instant::now() >= deadline {
                        break;
                    }
                    continue;
                }
            };
            let key = (
                intern(&mut self.topics, message.topic()),
                message.partition(),
            );
            if self.beyond_bound(&key, message.offset()) {
                // Written after a bounded read started: not this run's.
                continue;
            }
            if matches!(self.reader, Reader::Task(_))
                && self
                    .positions
                    .get(&key)
                    .is_some_and(|next| message.offset() < *next)
            {
                // A task never seeks back: a record below its position
                // was fetched for an earlier assignment of the partition.
                tracing::warn!(source = %self.name, partition = message.partition(), offset = message.offset(), "a record below the task's position skipped");
                continue;
            }
            self.positions.insert(key, message.offset() + 1);
            if self.options.upstream_watermarks && UpstreamWatermarks::is_control(message.headers())
            {
                self.upstream
                    .on_control(message.payload().unwrap_or_default())
                    .map_err(|e| self.error(e))?;
                continue;
            }
            *read_per_partition.entry(key).or_default() += 1;
            let decoded = to_record(
                &mut self.topics,
                &mut self.options.value_format,
                self.options
                    .timestamp_field
                    .as_deref()
                    .zip(self.timestamp_path.as_ref()),
                &message,
            )
            .map_err(|message| DataflowError::Source {
                name: self.name.clone(),
                message,
            })?;
            match decoded {
                (record, None) => batch.records.push(record),
                (record, Some(reason)) => {
                    batch
                        .dead_letters
                        .push(into_dead_letter(record, &reason, &self.name, None));
                }
            }
        }
        for ((topic, partition), records) in read_per_partition {
            self.partitions.add_records(&topic, partition, records);
        }
        if batch.records.is_empty() && batch.dead_letters.is_empty() && self.reached_end() {
            return Ok(None);
        }
        if self.options.upstream_watermarks {
            batch.watermark = self.upstream.watermark();
        }
        Ok(Some(batch))
    }

    /// The next offset of every partition read so far:
    /// `{"offsets": [{"topic", "partition", "offset"}, ...]}`.
    fn snapshot_position(
        &mut self,
        checkpoint_id: u64,
    ) -> Result<serde_json::Value, DataflowError> {
        self.apply_rebalances();
        self.pending.insert(checkpoint_id, self.positions.clone());
        if let Some(assignment) = &self.options.assignment
            && assignment.offsets.transactional()
        {
            // For the checkpoint's transaction (EOS v2).
            let offsets = self.offset_list(&self.positions)?;
            assignment.offsets.record(checkpoint_id, offsets);
        }
        let offsets: Vec<serde_json::Value> = self
            .positions
            .iter()
            .map(|((topic, partition), offset)| {
                serde_json::json!({ "topic": &**topic, "partition": partition, "offset": offset })
            })
            .collect();
        if self.options.upstream_watermarks {
            let upstream = serde_json::to_value(&self.upstream)
                .map_err(|e| self.error(format!("cannot record upstream watermarks: {e}")))?;
            return Ok(serde_json::json!({ "offsets": offsets, "upstream": upstream }));
        }
        Ok(serde_json::json!({ "offsets": offsets }))
    }

    /// Partitions in the checkpoint start at its offsets when assigned
    /// (not at the consumer group's); others at the configured start.
    fn restore_position(&mut self, position: &serde_json::Value) -> Result<(), DataflowError> {
        let entries = position
            .get("offsets")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| self.error(format!("unreadable Kafka position {position}")))?;
        let mut restored = HashMap::new();
        for entry in entries {
            let topic = entry.get("topic").and_then(serde_json::Value::as_str);
            let partition = entry.get("partition").and_then(serde_json::Value::as_i64);
            let offset = entry.get("offset").and_then(serde_json::Value::as_i64);
            match (topic, partition.and_then(|p| i32::try_from(p).ok()), offset) {
                (Some(topic), Some(partition), Some(offset)) => {
                    restored.insert((topic.to_string(), partition), offset);
                    let key = (intern(&mut self.topics, topic), partition);
                    self.positions.insert(key, offset);
                }
                _ => return Err(self.error(format!("unreadable Kafka offset {entry}"))),
            }
        }
        if let Reader::Group(consumer) = &self.reader {
            *lock(&consumer.context().restored) = restored;
        }
        if let Some(upstream) = position.get("upstream") {
            self.upstream = serde_json::from_value(upstream.clone())
                .map_err(|e| self.error(format!("unreadable upstream watermarks: {e}")))?;
        }
        Ok(())
    }

    fn on_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), DataflowError> {
        let Some(offsets) = self.pending.remove(&checkpoint_id) else {
            return Ok(());
        };
        // Older snapshots are covered by this one.
        self.pending.retain(|id, _| *id > checkpoint_id);
        if offsets.is_empty() {
            return Ok(());
        }
        let commit = self.offset_list(&offsets)?;
        let consumer = match (&self.reader, &self.options.assignment) {
            (Reader::Group(consumer), _) => consumer,
            // The checkpoint's transaction has committed them.
            (Reader::Task(_), Some(assignment)) if assignment.offsets.transactional() => {
                return Ok(());
            }
            (Reader::Task(_), Some(assignment)) => {
                assignment.offsets.member().commit(&commit);
                return Ok(());
            }
            (Reader::Task(_), None) => return Ok(()),
        };
        // Asynchronous: a synchronous commit blocks the source thread (and
        // with it every barrier) until the group coordinator answers, and
        // librdkafka can leave such a request waiting when the coordinator's
        // broker goes away (the likely cause of a two-minute source stall
        // after a broker restart in CI, ADR 0008). The answer arrives in `poll`
        // (`commit_callback`); the offsets are only informational for a
        // restore from a checkpoint, and a lost commit replays records
        // (at-least-once), never skips them.
        match consumer.commit(&commit, CommitMode::Async) {
            Ok(()) => self.last_commit = Some(offsets),
            Err(error) => {
                tracing::warn!(source = %self.name, %error, checkpoint = checkpoint_id, "offset commit refused");
            }
        }
        Ok(())
    }
}

impl Drop for KafkaSource {
    /// Waits (at most `FINAL_COMMIT_WAIT`) until the group holds the last
    /// offsets committed, so that a run that ends or stops cleanly leaves
    /// its last completed checkpoint's offsets committed.
    ///
    /// The group is asked, not the commit's answer awaited: rust-rdkafka
    /// (0.39) never calls `commit_callback` for an asynchronous manual
    /// commit (its issue #856), so a count of answers never went down and
    /// every bounded run waited the whole 10 s it then allowed.
    fn drop(&mut self) {
        let (Reader::Group(consumer), Some(sent)) = (&self.reader, self.last_commit.take()) else {
            return;
        };
        let Ok(list) = self.offset_list(&sent) else {
            return;
        };
        let deadline = Instant::now() + FINAL_COMMIT_WAIT;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                tracing::warn!(source = %self.name, "offset commits not confirmed in time; a restart without a checkpoint reads their records again");
                return;
            }
            let held = consumer.committed_offsets(list.clone(), remaining);
            let confirmed = held.as_ref().is_ok_and(|held| {
                sent.iter().all(|((topic, partition), offset)| {
                    held.find_partition(topic, *partition)
                        .is_some_and(|e| matches!(e.offset(), Offset::Offset(o) if o >= *offset))
                })
            });
            if confirmed {
                return;
            }
            std::thread::sleep(COMMIT_CONFIRM_INTERVAL.min(remaining));
        }
    }
}

/// How long a quiet task's source waits for records at a time (instead of
/// the poll timeout): a process owning many quiet tasks spent much of its
/// idle time waking them every 100 ms (`docs/benchmarks.md`).
const QUIET_TASK_WAIT: Duration = Duration::from_secs(1);

/// How long a Kafka source waits for its last offset commit to be held by
/// the group when it is dropped (a commit takes milliseconds; a broker that
/// does not answer must not hold the end of a run).
const FINAL_COMMIT_WAIT: Duration = Duration::from_secs(1);

/// How often a dropped source asks the group whether it holds its last
/// offset commit.
const COMMIT_CONFIRM_INTERVAL: Duration = Duration::from_millis(10);

/// `wait` rounded up to whole milliseconds, as a consumer poll's timeout.
///
/// rust-rdkafka hands librdkafka the timeout in whole milliseconds, rounded
/// down, and polls again until its own clock says the timeout has passed:
/// with a remainder under a millisecond it polls with 0 ms, again and
/// again, for up to a millisecond at the end of every wait. An idle source
/// waits `poll_timeout` (100 ms) at a time, so that spin was ~1 % of a core
/// per idle pipeline. A whole-millisecond timeout ends when librdkafka's
/// wait does.
fn whole_millis(wait: Duration) -> Duration {
    Duration::from_millis(u64::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_waits_are_whole_milliseconds_rounded_up() {
        assert_eq!(whole_millis(Duration::ZERO), Duration::ZERO);
        assert_eq!(
            whole_millis(Duration::from_micros(1)),
            Duration::from_millis(1)
        );
        assert_eq!(
            whole_millis(Duration::from_micros(99_001)),
            Duration::from_millis(100)
        );
        assert_eq!(
            whole_millis(Duration::from_millis(100)),
            Duration::from_millis(100)
        );
    }
}
