//! One consumer per process and stage that reads the records of every task
//! of the stage the process runs (ADR 0020).
//!
//! Why shared: a librdkafka client costs threads, a statistics report a
//! second and a fetch request per `fetch.wait.max.ms` whether or not
//! anything arrives. A consumer per task made 100 idle tasks cost a fifth
//! of a core; one per stage costs that once (`docs/benchmarks.md`).
//!
//! The reader joins no group: the process's group member decides which
//! tasks run here (as before), and each task assigns its own partitions to
//! the reader when it has restored its checkpoint, at the offsets it wants
//! (`incremental_assign` outside any rebalance: nothing can start the
//! partition's fetcher elsewhere and override them). Before that, the task
//! takes its partitions' queues away from the reader's own queue
//! (`split_partition_queue`), so that their records reach it alone; it
//! waits on a channel that librdkafka signals when one of its queues stops
//! being empty, so an idle task sleeps until a record (or its stop)
//! arrives. When the task ends, its partitions are unassigned.
//!
//! (An earlier attempt made the group member itself the reader: its
//! rebalance callback had to wait for every new task's start offsets, and
//! one task that never finished opening stalled the process's membership.)

use super::client_config;
use crate::metrics::PartitionMetrics;
use crate::sync::lock;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaResult;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{ClientContext, Statistics, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Settings of every consumer that reads records for Sluice: a group
/// member of a one-process pipeline and a stage's shared reader alike.
pub(crate) const READER_SETTINGS: [(&str, &str); 6] = [
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
    ("isolation.level", "read_committed"),
    ("auto.offset.reset", "earliest"),
    // Consumer lag per partition, for metrics.
    ("statistics.interval.ms", "1000"),
    // librdkafka's 500 ms default let a fetch sit on the broker long
    // enough to dominate the p99 latency (docs/benchmarks.md).
    ("fetch.wait.max.ms", "100"),
];

/// The shared reader's callbacks: consumer lag, routed to the metrics of
/// the task reading each partition.
pub struct ReaderContext {
    lag: Mutex<HashMap<(String, i32), Arc<PartitionMetrics>>>,
}

impl ClientContext for ReaderContext {
    /// librdkafka's periodic statistics carry each partition's consumer
    /// lag, reported to the metrics of the task that reads the partition.
    fn stats(&self, statistics: Statistics) {
        let lag = lock(&self.lag);
        for (topic, stats) in &statistics.topics {
            for (partition, p) in &stats.partitions {
                if *partition >= 0
                    && p.consumer_lag >= 0
                    && let Some(metrics) = lag.get(&(topic.clone(), *partition))
                {
                    metrics.set_lag(topic, *partition, p.consumer_lag);
                }
            }
        }
    }
}

impl ConsumerContext for ReaderContext {}

/// A process's reader of one stage's input topics (see the module docs).
pub struct SharedReader {
    consumer: Arc<BaseConsumer<ReaderContext>>,
}

impl SharedReader {
    /// A reader of `group_id`'s topics (the group's committed offsets are
    /// where a task without a checkpoint starts); `properties` are the
    /// pipeline's consumer properties.
    pub fn new(
        bootstrap_servers: &str,
        group_id: &str,
        properties: &BTreeMap<String, String>,
    ) -> KafkaResult<SharedReader> {
        let mut settings = READER_SETTINGS.to_vec();
        settings.push(("group.id", group_id));
        let mut config = client_config(bootstrap_servers, &settings, properties);
        // It joins no group: the process's member does.
        config.remove("group.instance.id");
        let consumer = config.create_with_context(ReaderContext {
            lag: Mutex::new(HashMap::new()),
        })?;
        Ok(SharedReader {
            consumer: Arc::new(consumer),
        })
    }

    /// Serves the reader's own queue (statistics, errors) without waiting.
    /// Records never arrive there: every assigned partition's queue
    /// belongs to its task.
    pub fn serve(&self) {
        while let Some(polled) = self.consumer.poll(Duration::ZERO) {
            match polled {
                Ok(message) => tracing::error!(
                    topic = message.topic(),
                    partition = message.partition(),
                    offset = message.offset(),
                    "a record reached the shared reader's own queue instead of its task's"
                ),
                Err(error) => tracing::warn!(%error, "shared Kafka reader"),
            }
        }
    }

    /// Takes the queues of partitions `partitions` of every topic of
    /// `topics` for one task; their lag goes to `metrics`; a record
    /// arriving in one of them wakes `wake`. Nothing is read until the
    /// task [starts](TaskReader::start) them.
    pub fn reader(
        &self,
        topics: &[String],
        partitions: &[i32],
        metrics: Arc<PartitionMetrics>,
        wake: TaskWake,
    ) -> Result<TaskReader, String> {
        let mut queues = Vec::new();
        let mut all = TopicPartitionList::new();
        for topic in topics {
            for &partition in partitions {
                let mut queue = self
                    .consumer
                    .split_partition_queue(topic, partition)
                    .ok_or_else(|| {
                        format!("cannot read `{topic}` [{partition}]: not a valid partition")
                    })?;
                let wake = wake.clone();
                queue.set_nonempty_callback(move || wake.wake());
                queues.push(queue);
                all.add_partition(topic, partition);
                lock(&self.consumer.context().lag)
                    .insert((topic.clone(), partition), metrics.clone());
            }
        }
        Ok(TaskReader {
            consumer: self.consumer.clone(),
            queues,
            wake,
            next_queue: std::cell::Cell::new(0),
            assigned: false,
            partitions: all,
        })
    }
}

/// Wakes a task that waits for records: librdkafka when a record arrives
/// in one of its queues, its process when the task must stop. Clones wake
/// the same task.
#[derive(Clone)]
pub struct TaskWake {
    channel: Arc<WakeChannel>,
}

struct WakeChannel {
    sender: SyncSender<()>,
    receiver: Mutex<Receiver<()>>,
}

impl Default for TaskWake {
    fn default() -> Self {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        TaskWake {
            channel: Arc::new(WakeChannel {
                sender,
                receiver: Mutex::new(receiver),
            }),
        }
    }
}

impl TaskWake {
    /// Ends the task's current (or next) wait.
    pub fn wake(&self) {
        // Full: a wake-up is pending already.
        let _ = self.channel.sender.try_send(());
    }

    /// Waits up to `timeout` for a wake-up; whether one came.
    fn wait(&self, timeout: Duration) -> bool {
        match lock(&self.channel.receiver).recv_timeout(timeout) {
            Ok(()) => true,
            Err(RecvTimeoutError::Timeout) => false,
            // Impossible: the channel holds its own sender.
            Err(RecvTimeoutError::Disconnected) => false,
        }
    }
}

/// One task's partitions, read through its process's [`SharedReader`].
pub struct TaskReader {
    consumer: Arc<BaseConsumer<ReaderContext>>,
    queues: Vec<PartitionQueue<ReaderContext>>,
    /// Woken by librdkafka when a queue stops being empty.
    wake: TaskWake,
    /// The queue asked first at the next poll.
    next_queue: std::cell::Cell<usize>,
    /// Whether the partitions have been assigned to the reader.
    assigned: bool,
    /// Every partition the task reads.
    partitions: TopicPartitionList,
}

impl TaskReader {
    /// The shared consumer, for lookups (offsets by time, watermarks,
    /// positions).
    pub fn consumer(&self) -> &BaseConsumer<ReaderContext> {
        &self.consumer
    }

    /// The task's partitions (offsets unset).
    pub fn partitions(&self) -> &TopicPartitionList {
        &self.partitions
    }

    /// Assigns the task's partitions to the reader, each at its offset in
    /// `offsets` (`Offset::Stored`: the group's committed offset, else the
    /// earliest). Once per reader.
    pub fn start(&mut self, offsets: &TopicPartitionList) -> KafkaResult<()> {
        if self.assigned {
            return Ok(());
        }
        self.consumer.incremental_assign(offsets)?;
        self.assigned = true;
        Ok(())
    }

    /// The next record of any of the task's partitions, waiting up to
    /// `wait` for one; `None` if none came (or the task was woken to stop).
    pub fn poll(&self, wait: Duration) -> Option<KafkaResult<BorrowedMessage<'_>>> {
        if let Some(message) = self.poll_queues() {
            return Some(message);
        }
        // Woken with nothing to read: asked to stop (or a wake-up left from
        // a record already taken); the caller looks at why and comes back.
        if self.wake.wait(wait) {
            return self.poll_queues();
        }
        None
    }

    /// The next record of any of the task's queues, without waiting; the
    /// queues take turns being asked first, so that a busy one does not
    /// starve the others.
    fn poll_queues(&self) -> Option<KafkaResult<BorrowedMessage<'_>>> {
        let first = self.next_queue.get();
        self.next_queue.set((first + 1) % self.queues.len().max(1));
        let (before, after) = self.queues.split_at(first.min(self.queues.len()));
        after
            .iter()
            .chain(before)
            .find_map(|queue| queue.poll(Duration::ZERO))
    }
}

impl Drop for TaskReader {
    /// The task's partitions leave the reader, and their lag is no longer
    /// this task's to report.
    fn drop(&mut self) {
        if self.assigned
            && let Err(error) = self.consumer.incremental_unassign(&self.partitions)
        {
            tracing::warn!(%error, partitions = ?self.partitions.to_topic_map(), "cannot unassign a task's partitions from the shared reader");
        }
        let mut lag = lock(&self.consumer.context().lag);
        for element in self.partitions.elements() {
            lag.remove(&(element.topic().to_string(), element.partition()));
        }
    }
}
