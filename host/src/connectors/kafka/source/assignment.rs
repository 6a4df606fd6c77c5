//! What a task of a scaled-out pipeline (ADR 0020) reads and how its
//! consumed offsets reach the group: the partitions its process's member
//! gave it, the shared reader it reads them through, and the offsets of
//! each checkpoint, committed in the task's Kafka transaction (EOS v2) or,
//! without one, by the member once the checkpoint completes.

use super::super::shared_reader::{SharedReader, TaskWake};
use crate::sync::lock;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::ConsumerGroupMetadata;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The partitions a task reads ([`super::KafkaSourceOptions::assignment`]),
/// where it reads them from, and who commits their offsets for it.
#[derive(Clone)]
pub struct KafkaAssignment {
    /// Partition indexes, the same of every topic (co-partitioned input).
    pub partitions: Vec<i32>,
    /// The task's consumed offsets, and the member that commits them.
    pub offsets: Arc<TaskOffsets>,
    /// The process's reader of the stage's topics.
    pub reader: Arc<SharedReader>,
    /// Ends the task's wait for records when it must stop.
    pub wake: TaskWake,
}

impl std::fmt::Debug for KafkaAssignment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaAssignment")
            .field("partitions", &self.partitions)
            .finish_non_exhaustive()
    }
}

/// The group member that owns a task's partitions: only a member may
/// commit offsets to a KIP-848 group that has members, and a task's reader
/// is not one.
pub trait OffsetCommits: Send + Sync {
    /// Commits `offsets` (next offset to read, per partition)
    /// asynchronously; a refusal is reported, never fatal (the offsets are
    /// informational for a source restored from checkpoints).
    fn commit(&self, offsets: &TopicPartitionList);

    /// The member's group metadata (its member id and epoch), with which a
    /// transaction commits offsets: a transaction carrying a member epoch
    /// older than the partition's move is refused by the group
    /// coordinator. `None` while the process is not in the group.
    fn group_metadata(&self) -> Option<ConsumerGroupMetadata>;
}

/// A task's consumed offsets per checkpoint. The task's source records them
/// at each barrier; an exactly-once Kafka sink takes them into the
/// checkpoint's transaction (`send_offsets_to_transaction` with the
/// member's group metadata, EOS v2), and then the source leaves them to it.
pub struct TaskOffsets {
    member: Arc<dyn OffsetCommits>,
    at_barrier: Mutex<BTreeMap<u64, TopicPartitionList>>,
    /// A Kafka transaction commits them.
    transactional: AtomicBool,
}

impl TaskOffsets {
    /// The offsets of a task whose partitions `member` owns.
    pub fn new(member: Arc<dyn OffsetCommits>) -> Self {
        TaskOffsets {
            member,
            at_barrier: Mutex::new(BTreeMap::new()),
            transactional: AtomicBool::new(false),
        }
    }

    /// The offsets reached at barrier `checkpoint` (next offset to read,
    /// per partition).
    pub fn record(&self, checkpoint: u64, offsets: TopicPartitionList) {
        if self.transactional() {
            lock(&self.at_barrier).insert(checkpoint, offsets);
        }
    }

    /// The offsets of checkpoint `checkpoint`, for its transaction (older
    /// ones are dropped: checkpoints are taken in order).
    pub(crate) fn take(&self, checkpoint: u64) -> Option<TopicPartitionList> {
        let mut at_barrier = lock(&self.at_barrier);
        let taken = at_barrier.remove(&checkpoint);
        at_barrier.retain(|id, _| *id > checkpoint);
        taken
    }

    /// From now on a Kafka transaction commits the offsets.
    pub(crate) fn set_transactional(&self) {
        self.transactional.store(true, Ordering::Relaxed);
    }

    /// Whether a Kafka transaction commits the offsets.
    pub(crate) fn transactional(&self) -> bool {
        self.transactional.load(Ordering::Relaxed)
    }

    /// The member that owns the task's partitions.
    pub(crate) fn member(&self) -> &dyn OffsetCommits {
        self.member.as_ref()
    }
}
