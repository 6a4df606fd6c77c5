//! What a task of a scaled-out pipeline (ADR 0020) reads: the partitions
//! its process's member gave it, the shared reader it reads them through,
//! and the member that commits their offsets once a checkpoint completes.

use super::super::shared_reader::{SharedReader, TaskWake};
use rdkafka::TopicPartitionList;
use std::sync::Arc;

/// The partitions a task reads ([`super::KafkaSourceOptions::assignment`]),
/// where it reads them from, and who commits their offsets for it.
#[derive(Clone)]
pub struct KafkaAssignment {
    /// Partition indexes, the same of every topic (co-partitioned input).
    pub partitions: Vec<i32>,
    /// Commits offsets to the group on the task's behalf: only a member
    /// may commit to a KIP-848 group that has members, and the reader is
    /// not one.
    pub commits: Arc<dyn OffsetCommits>,
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

/// Something that commits consumed offsets to a consumer group: the group
/// member that owns the partitions.
pub trait OffsetCommits: Send + Sync {
    /// Commits `offsets` (next offset to read, per partition)
    /// asynchronously; a refusal is reported, never fatal (the offsets are
    /// informational for a source restored from checkpoints).
    fn commit(&self, offsets: &TopicPartitionList);
}
