//! Repartition topics: the key-by between two stages of a scaled-out
//! pipeline (ADR 0020).
//!
//! The upstream task writes each record into its Kafka transaction, keyed
//! by the key-by field, to the partition of the key's key group (Flink's
//! operator index, `key_group * partitions / max_parallelism`, so that a
//! partition holds a contiguous range of key groups). Records keep their
//! value, headers and event time (the Kafka timestamp).
//!
//! Watermarks cross the hop as *control records*: at each checkpoint the
//! upstream task writes its watermark, and whether it is idle, to every
//! partition (only when they changed). A downstream task reads one
//! partition, in which every upstream task's records and control records
//! arrive in order; its watermark is the minimum over the upstream tasks
//! that are not idle, once it has heard from all of them
//! ([`UpstreamWatermarks`]). So a downstream window sees the watermark it
//! would see in one process: the minimum over the source's partitions.

use super::exactly_once::KafkaTransactions;
use super::sink::{KafkaSink, message};
use super::{client_config, connection_properties};
use crate::checkpoint::{Committable, Committer};
use crate::dataflow::{DataflowError, Sink};
use crate::record::{Header, Record, SourcePosition, Topic};
use crate::state::key_group::{key_group, worker_for_key_group};
use bytes::Bytes;
use rdkafka::TopicPartitionList;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::BaseRecord;
use serde::{Deserialize, Serialize};
use sluice_json::fields::{FieldPath, extract_into};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The header that marks a control record (its value says which).
pub const CONTROL_HEADER: &str = "sluice.control";

/// [`CONTROL_HEADER`]'s value on a watermark control record.
const WATERMARK_CONTROL: &[u8] = b"watermark";

/// What an upstream task says about its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamMark {
    /// The upstream task's partition index.
    pub task: i32,
    /// How many upstream tasks there are (the upstream stage's partitions).
    pub tasks: i32,
    /// Its watermark (`i64::MIN`: none yet).
    pub watermark: i64,
    /// Whether it has been idle for the idle timeout: it then holds no
    /// downstream watermark back.
    pub idle: bool,
}

/// Where a repartition sink writes, and for which upstream task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepartitionTarget {
    /// The repartition topic.
    pub topic: String,
    /// Its partition count (the downstream stage's tasks).
    pub partitions: i32,
    /// The key-by field of the record value.
    pub key_field: String,
    /// The pipeline's key groups.
    pub max_parallelism: u16,
    /// This upstream task's index.
    pub task: i32,
    /// How many upstream tasks there are.
    pub tasks: i32,
    /// After how long without records this task counts as idle.
    pub idle_timeout: Option<Duration>,
}

/// The partition of the repartition topic a key goes to.
pub fn partition_for_key(key: &[u8], partitions: i32, max_parallelism: u16) -> i32 {
    let group = key_group(key, max_parallelism);
    let partitions = usize::try_from(partitions.max(1)).unwrap_or(1);
    i32::try_from(worker_for_key_group(group, partitions, max_parallelism)).unwrap_or(0)
}

/// How a repartition sink writes: in the task's transactions
/// (exactly-once), or with an idempotent producer flushed at each
/// checkpoint (at-least-once).
enum Writer {
    Transactions(Arc<KafkaTransactions>),
    Producer(Box<KafkaSink>),
}

impl Writer {
    fn send(&self, message: BaseRecord<'_, [u8], [u8]>) -> Result<(), String> {
        match self {
            Writer::Transactions(transactions) => transactions.send(message),
            Writer::Producer(sink) => sink.send(message).map_err(|e| e.to_string()),
        }
    }
}

/// Writes records to a repartition topic, with watermark control records
/// at each checkpoint.
pub struct RepartitionSink {
    name: String,
    target: RepartitionTarget,
    key_path: [FieldPath; 1],
    writer: Writer,
    /// The latest watermark that reached the sink.
    watermark: i64,
    /// The last mark written (written again only when it changes).
    written: Option<(i64, bool)>,
    last_record: Instant,
    rejected: Vec<(Record, String)>,
}

impl RepartitionSink {
    /// A sink `name` writing to `target` within `transactions`.
    pub fn exactly_once(
        name: impl Into<String>,
        target: RepartitionTarget,
        transactions: Arc<KafkaTransactions>,
    ) -> Self {
        Self::new(name.into(), target, Writer::Transactions(transactions))
    }

    /// A sink `name` writing to `target` through `producer`'s idempotent
    /// producer (at-least-once: a restore writes records again).
    pub fn at_least_once(
        name: impl Into<String>,
        target: RepartitionTarget,
        producer: KafkaSink,
    ) -> Self {
        Self::new(name.into(), target, Writer::Producer(Box::new(producer)))
    }

    fn new(name: String, target: RepartitionTarget, writer: Writer) -> Self {
        RepartitionSink {
            name,
            key_path: [FieldPath::parse(&target.key_field)],
            target,
            writer,
            watermark: i64::MIN,
            written: None,
            last_record: Instant::now(),
            rejected: Vec::new(),
        }
    }

    fn error(&self, message: String) -> DataflowError {
        DataflowError::Sink {
            name: self.name.clone(),
            message: format!("{}: {message}", self.target.topic),
        }
    }

    /// The key-by field's value of `record` as key bytes, or why there is
    /// none.
    fn key_of(&self, record: &Record) -> Result<Vec<u8>, String> {
        let mut found = Vec::with_capacity(1);
        extract_into(&record.value, &self.key_path, &mut found)
            .map_err(|e| format!("key-by field `{}`: {e}", self.target.key_field))?;
        match found.first().and_then(Option::as_ref) {
            Some(value) => Ok(value.key_bytes()),
            None => Err(format!(
                "no key-by field `{}` to repartition by",
                self.target.key_field
            )),
        }
    }

    /// Writes this task's mark to every partition if it changed.
    fn write_mark(&mut self) -> Result<(), DataflowError> {
        let idle = self
            .target
            .idle_timeout
            .is_some_and(|timeout| self.last_record.elapsed() >= timeout);
        let mark = (self.watermark, idle);
        if self.written == Some(mark) || (self.watermark == i64::MIN && !idle) {
            return Ok(());
        }
        let payload = serde_json::to_vec(&UpstreamMark {
            task: self.target.task,
            tasks: self.target.tasks,
            watermark: self.watermark,
            idle,
        })
        .map_err(|e| self.error(e.to_string()))?;
        let mut control = Record::from_value(
            payload,
            SourcePosition {
                topic: Topic::new(&self.target.topic),
                partition: -1,
                offset: -1,
            },
        );
        control.headers.push(Header::new(
            CONTROL_HEADER,
            Bytes::from_static(WATERMARK_CONTROL),
        ));
        for partition in 0..self.target.partitions {
            let sent = self
                .writer
                .send(message(&self.target.topic, Some(partition), &control));
            sent.map_err(|e| self.error(e))?;
        }
        self.written = Some(mark);
        Ok(())
    }
}

impl Sink for RepartitionSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        self.last_record = Instant::now();
        for record in records {
            let key = match self.key_of(record) {
                Ok(key) => key,
                Err(reason) => {
                    self.rejected.push((record.clone(), reason));
                    continue;
                }
            };
            let partition =
                partition_for_key(&key, self.target.partitions, self.target.max_parallelism);
            let message = message(&self.target.topic, Some(partition), record).key(&key);
            let sent = self.writer.send(message);
            sent.map_err(|e| self.error(e))?;
        }
        Ok(())
    }

    fn take_rejected(&mut self) -> Vec<(Record, String)> {
        std::mem::take(&mut self.rejected)
    }

    /// Exactly-once, records become visible downstream only when their
    /// checkpoint commits; at-least-once, when delivered.
    fn flush(&mut self) -> Result<(), DataflowError> {
        match &mut self.writer {
            Writer::Transactions(_) => Ok(()),
            Writer::Producer(sink) => sink.flush(),
        }
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<(), DataflowError> {
        self.watermark = self.watermark.max(watermark);
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Committable>, DataflowError> {
        self.write_mark()?;
        match &mut self.writer {
            Writer::Transactions(transactions) => {
                let pre_committed = transactions.pre_commit(checkpoint);
                pre_committed.map_err(|e| self.error(e))
            }
            Writer::Producer(sink) => sink.flush().map(|()| None),
        }
    }

    fn committer(&self) -> Option<Arc<dyn Committer>> {
        match &self.writer {
            Writer::Transactions(transactions) => Some(transactions.committer()),
            Writer::Producer(_) => None,
        }
    }
}

/// The admin operations of repartition topics: create them, count a
/// topic's partitions, delete what downstream tasks have committed.
pub struct RepartitionAdmin {
    admin: AdminClient<DefaultClientContext>,
}

impl RepartitionAdmin {
    /// An admin client of the cluster at `bootstrap_servers` (with the
    /// connection settings of `properties`).
    pub fn new(
        bootstrap_servers: &str,
        properties: &BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let admin = client_config(bootstrap_servers, &[], &connection_properties(properties))
            .create()
            .map_err(|e| format!("cannot create a Kafka admin client: {e}"))?;
        Ok(RepartitionAdmin { admin })
    }

    /// How many partitions `topic` has.
    pub fn partitions(&self, topic: &str) -> Result<i32, String> {
        self.known_partitions(topic)?
            .ok_or_else(|| format!("topic `{topic}`: no such topic"))
    }

    /// The partition count of `topic`; `None` while the broker does not
    /// know it.
    fn known_partitions(&self, topic: &str) -> Result<Option<i32>, String> {
        let metadata = self
            .admin
            .inner()
            .fetch_metadata(Some(topic), ADMIN_TIMEOUT)
            .map_err(|e| format!("cannot read the partitions of `{topic}`: {e}"))?;
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Ok(None);
        };
        match found.error() {
            Some(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) => {
                Ok(None)
            }
            Some(error) => Err(format!("topic `{topic}`: {error:?}")),
            None => i32::try_from(found.partitions().len())
                .map(Some)
                .map_err(|e| e.to_string()),
        }
    }

    /// The partition count of `topic`, which another process has just
    /// created: the broker may answer "unknown topic" for a moment after
    /// the creation (its metadata follows the controller's), so this asks
    /// again for up to `ADMIN_TIMEOUT`. (Three processes starting at once
    /// saw it: one failed at start-up with `UNKNOWN_TOPIC_OR_PART`.)
    fn created_partitions(&self, topic: &str) -> Result<i32, String> {
        let deadline = Instant::now() + ADMIN_TIMEOUT;
        loop {
            if let Some(partitions) = self.known_partitions(topic)? {
                return Ok(partitions);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "topic `{topic}`: created, yet unknown to the broker after {ADMIN_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Creates `topic` with `partitions` partitions (the broker's default
    /// replication), or checks that the one there has as many.
    pub fn ensure_topic(&self, topic: &str, partitions: i32) -> Result<(), String> {
        let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
        let results =
            futures::executor::block_on(self.admin.create_topics(&[new], &AdminOptions::new()))
                .map_err(|e| format!("cannot create the repartition topic {topic}: {e}"))?;
        for result in results {
            match result {
                Ok(_) => tracing::info!(topic, partitions, "repartition topic created"),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {
                    let existing = self.created_partitions(topic)?;
                    if existing != partitions {
                        return Err(format!(
                            "the repartition topic {topic} has {existing} partitions, the stage before it {partitions}: a pipeline's partition count cannot change (delete the topic and the pipeline's checkpoints to start over)"
                        ));
                    }
                }
                Err((name, code)) => {
                    return Err(format!(
                        "cannot create the repartition topic {name}: {code}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Deletes the records before `offsets` (each partition's next offset
    /// to read, committed by the downstream task): repartition topics do
    /// not grow.
    pub fn delete_before(&self, offsets: &TopicPartitionList) -> Result<(), String> {
        let options = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
        futures::executor::block_on(self.admin.delete_records(offsets, &options))
            .map_err(|e| format!("cannot delete consumed repartition records: {e}"))?;
        Ok(())
    }
}

/// Longest wait for one admin operation.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// A downstream task's view of its upstream tasks' marks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamWatermarks {
    /// The latest mark of each upstream task heard from.
    marks: BTreeMap<i32, UpstreamMark>,
}

impl UpstreamWatermarks {
    /// Whether `headers` mark a watermark control record.
    pub fn is_control(headers: Option<&rdkafka::message::BorrowedHeaders>) -> bool {
        use rdkafka::message::Headers;
        headers.is_some_and(|headers| {
            headers
                .iter()
                .any(|h| h.key == CONTROL_HEADER && h.value == Some(WATERMARK_CONTROL))
        })
    }

    /// Takes in a control record's payload.
    pub fn on_control(&mut self, payload: &[u8]) -> Result<(), String> {
        let mark: UpstreamMark = serde_json::from_slice(payload)
            .map_err(|e| format!("unreadable watermark control record: {e}"))?;
        let entry = self.marks.entry(mark.task).or_insert(mark);
        // A task's watermark never goes back (a task restored elsewhere
        // may repeat an older one).
        let watermark = entry.watermark.max(mark.watermark);
        *entry = UpstreamMark { watermark, ..mark };
        Ok(())
    }

    /// The watermark downstream: the minimum over the upstream tasks that
    /// are not idle (the maximum when all are), once every upstream task
    /// has been heard from.
    pub fn watermark(&self) -> Option<i64> {
        let expected = self.marks.values().map(|m| m.tasks).max()?;
        if self.marks.len() < usize::try_from(expected).unwrap_or(usize::MAX) {
            return None;
        }
        let active = self.marks.values().filter(|m| !m.idle).map(|m| m.watermark);
        let watermark = match active.clone().min() {
            Some(min) => min,
            None => self.marks.values().map(|m| m.watermark).max()?,
        };
        (watermark != i64::MIN).then_some(watermark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(task: i32, watermark: i64, idle: bool) -> Vec<u8> {
        serde_json::to_vec(&UpstreamMark {
            task,
            tasks: 3,
            watermark,
            idle,
        })
        .unwrap()
    }

    #[test]
    fn the_downstream_watermark_waits_for_every_upstream_task_and_skips_idle_ones() {
        let mut marks = UpstreamWatermarks::default();
        marks.on_control(&mark(0, 100, false)).unwrap();
        marks.on_control(&mark(1, 50, false)).unwrap();
        assert_eq!(marks.watermark(), None, "task 2 not heard from");
        marks.on_control(&mark(2, 70, false)).unwrap();
        assert_eq!(marks.watermark(), Some(50));
        // Task 1 goes idle: it holds nothing back.
        marks.on_control(&mark(1, 50, true)).unwrap();
        assert_eq!(marks.watermark(), Some(70));
        // A task never goes back, even when a restored one repeats itself.
        marks.on_control(&mark(2, 60, false)).unwrap();
        assert_eq!(marks.watermark(), Some(70));
        // A task that never saw a record but is idle does not block.
        let mut marks = UpstreamWatermarks::default();
        marks.on_control(&mark(0, i64::MIN, true)).unwrap();
        marks.on_control(&mark(1, 40, false)).unwrap();
        marks.on_control(&mark(2, 30, false)).unwrap();
        assert_eq!(marks.watermark(), Some(30));
        for all_idle in [&mark(1, 40, true), &mark(2, 30, true)] {
            marks.on_control(all_idle).unwrap();
        }
        assert_eq!(marks.watermark(), Some(40), "all idle: the highest");
        assert!(marks.on_control(b"{").is_err());
    }

    #[test]
    fn a_partition_holds_a_contiguous_range_of_key_groups() {
        let max_parallelism = 128;
        let mut seen: BTreeMap<i32, (u16, u16)> = BTreeMap::new();
        for group in 0..max_parallelism {
            let partition = i32::try_from(worker_for_key_group(group, 8, max_parallelism)).unwrap();
            let range = seen.entry(partition).or_insert((group, group));
            assert_eq!(range.1 + u16::from(range.1 != group), group, "contiguous");
            range.1 = group;
        }
        assert_eq!(seen.len(), 8);
        for key in [&b"k1"[..], b"k2", b"user-77"] {
            let partition = partition_for_key(key, 8, max_parallelism);
            let group = key_group(key, max_parallelism);
            let (start, end) = seen[&partition];
            assert!((start..=end).contains(&group));
        }
    }
}
