//! The callbacks of a one-process pipeline's Kafka consumer (a member of
//! its consumer group): where newly assigned partitions start, what a
//! rebalance revoked, consumer lag, offset commit answers.

use super::StartPosition;
use crate::metrics::PartitionMetrics;
use crate::sync::lock;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaResult;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, Statistics, TopicPartitionList};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Partitions revoked during a poll, reported by the rebalance callback
/// (which runs inside `poll` on the source thread).
#[derive(Default)]
pub(super) struct RebalanceLog {
    pub(super) revoked: Vec<(String, i32)>,
}

/// The callbacks of a one-process pipeline's own consumer, a member of
/// its group: rebalances, consumer lag, offset commit answers.
pub(super) struct SourceContext {
    pub(super) log: Arc<Mutex<RebalanceLog>>,
    pub(super) partitions: Arc<PartitionMetrics>,
    pub(super) start: StartPosition,
    /// Partitions whose start position has been applied in this run.
    pub(super) started: Mutex<HashSet<(String, i32)>>,
    /// Offsets of the checkpoint restored: they win over `start`.
    pub(super) restored: Mutex<HashMap<(String, i32), i64>>,
    /// Whether the group rebalances cooperatively (incremental assign and
    /// unassign), from the consumer's `partition.assignment.strategy`.
    /// Known up front: asking librdkafka (`rebalance_protocol()`) from the
    /// rebalance callback of a closing consumer once waited forever (the
    /// question goes to the group's queue, which a closing consumer may no
    /// longer answer), and a SIGTERMed run never exited.
    pub(super) cooperative: bool,
}

/// Whether librdkafka rebalances a group whose members use `strategies`
/// (its `partition.assignment.strategy`) cooperatively: only when every
/// strategy is cooperative (librdkafka refuses a mix).
pub(super) fn is_cooperative(strategies: &str) -> bool {
    strategies
        .split(',')
        .all(|strategy| strategy.trim() == "cooperative-sticky")
}

impl SourceContext {
    /// Sets the start offset of partitions assigned for the first time in
    /// this run (unless starting from committed offsets).
    pub(super) fn apply_start_position(
        &self,
        consumer: &BaseConsumer<Self>,
        assignment: &mut TopicPartitionList,
    ) {
        {
            let restored = lock(&self.restored);
            let mut started = lock(&self.started);
            for mut element in assignment.elements() {
                let key = (element.topic().to_string(), element.partition());
                if let Some(offset) = restored.get(&key)
                    && started.insert(key)
                {
                    tracing::info!(
                        topic = element.topic(),
                        partition = element.partition(),
                        offset,
                        "partition starts at the restored checkpoint's offset"
                    );
                    let _ = element.set_offset(Offset::Offset(*offset));
                }
            }
        }
        let target = match self.start {
            StartPosition::Committed => return,
            start => start.first_offset(),
        };
        let mut started = lock(&self.started);
        let mut first_time = TopicPartitionList::new();
        for element in assignment.elements() {
            if started.insert((element.topic().to_string(), element.partition())) {
                // Offsets below are set on this list; errors are impossible
                // for partitions taken from a valid assignment.
                let _ =
                    first_time.add_partition_offset(element.topic(), element.partition(), target);
            }
        }
        if first_time.count() == 0 {
            return;
        }
        if let StartPosition::Timestamp(_) = self.start {
            match consumer.offsets_for_times(first_time, Duration::from_secs(10)) {
                Ok(resolved) => first_time = resolved,
                Err(error) => {
                    tracing::error!(%error, "cannot look up start offsets by time; starting from committed offsets");
                    return;
                }
            }
        }
        for element in first_time.elements() {
            if let Some(mut assigned) =
                assignment.find_partition(element.topic(), element.partition())
            {
                let _ = assigned.set_offset(element.offset());
            }
        }
    }
}

impl ClientContext for SourceContext {
    /// librdkafka's periodic statistics carry each partition's consumer lag.
    fn stats(&self, statistics: Statistics) {
        for (topic, stats) in &statistics.topics {
            for (partition, p) in &stats.partitions {
                // -1 marks partitions this consumer does not fetch (or the
                // internal "unassigned" partition).
                if *partition >= 0 && p.consumer_lag >= 0 {
                    self.partitions.set_lag(topic, *partition, p.consumer_lag);
                }
            }
        }
    }
}

impl ConsumerContext for SourceContext {
    /// The answer to an offset commit: a refusal (e.g. during a
    /// rebalance) is reported and otherwise harmless, as the records are
    /// read again by whoever owns the partitions next (at-least-once).
    /// (rust-rdkafka 0.39 calls it for librdkafka's own commits only, not
    /// for asynchronous manual ones: its issue #856.)
    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(error) = result {
            tracing::warn!(%error, offsets = ?offsets.to_topic_map(), "offset commit refused");
        }
    }

    /// Assigns and revokes like librdkafka's default (incrementally, as the
    /// group uses the cooperative protocol), setting start offsets in the
    /// assignment itself so that fetching begins exactly there.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        error: RDKafkaRespErr,
        partitions: &mut TopicPartitionList,
    ) {
        let cooperative = self.cooperative;
        let result = match error {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.apply_start_position(consumer, partitions);
                tracing::info!(assigned = ?partitions.to_topic_map(), "Kafka partitions assigned");
                if cooperative {
                    consumer.incremental_assign(partitions)
                } else {
                    consumer.assign(partitions)
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                tracing::info!(revoked = ?partitions.to_topic_map(), "Kafka partitions revoked");
                let mut log = lock(&self.log);
                log.revoked.extend(
                    partitions
                        .elements()
                        .iter()
                        .map(|e| (e.topic().to_string(), e.partition())),
                );
                drop(log);
                if cooperative {
                    consumer.incremental_unassign(partitions)
                } else {
                    consumer.unassign()
                }
            }
            other => {
                tracing::warn!(error = ?other, "Kafka rebalance error");
                if cooperative {
                    Ok(())
                } else {
                    consumer.unassign()
                }
            }
        };
        if let Err(error) = result {
            tracing::error!(%error, "Kafka rebalance could not be applied");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_cooperative;

    #[test]
    fn only_cooperative_strategies_rebalance_cooperatively() {
        assert!(is_cooperative("cooperative-sticky"));
        assert!(is_cooperative(" cooperative-sticky "));
        assert!(!is_cooperative("range,roundrobin"));
        assert!(!is_cooperative("range"));
        assert!(!is_cooperative("cooperative-sticky,range"));
    }
}
