//! A bounded read (`bounded = true`, as Flink's `setBounded(latest)`):
//! each partition is read up to the end offset it had at start-up, then
//! the source ends.
//!
//! A partition is done when its position has reached that end. The
//! position is the first of these that is known: the offset after the
//! last record read, the restored checkpoint's offset, librdkafka's
//! position (which moves past transaction markers that deliver no record),
//! or, for a partition that has delivered nothing in this run, where it
//! starts (the group's committed offset, the earliest or latest offset, an
//! offset by time), looked up once. A run restored at the end of its input,
//! or a finished backfill run again, reads nothing at all: librdkafka's
//! position stays unknown until a record arrives, and without the start
//! the run would wait for one forever.

use crate::record::Topic;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use std::collections::BTreeMap;
use std::time::Duration;

/// A partition: topic and partition number.
pub(super) type PartitionKey = (Topic, i32);

/// The low and high watermark of each partition.
pub(super) type Watermarks = BTreeMap<PartitionKey, (i64, i64)>;

/// The bound of a bounded read and what is known of where its partitions
/// start.
pub(super) struct BoundedRead {
    /// The low and high watermark of each partition at start-up.
    ends: Watermarks,
    /// Where partitions that delivered nothing start, once looked up.
    starts: BTreeMap<PartitionKey, i64>,
}

impl BoundedRead {
    /// A read bounded by `ends`.
    pub(super) fn new(ends: Watermarks) -> Self {
        BoundedRead {
            ends,
            starts: BTreeMap::new(),
        }
    }

    /// The low and high watermark of `key` at start-up.
    pub(super) fn watermarks(&self, key: &PartitionKey) -> Option<(i64, i64)> {
        self.ends.get(key).copied()
    }

    /// Every partition of the read.
    pub(super) fn partitions(&self) -> impl Iterator<Item = &PartitionKey> {
        self.ends.keys()
    }

    /// Whether `offset` lies at or past the end `key` had at start-up (a
    /// partition created since is beyond the bound altogether).
    pub(super) fn beyond(&self, key: &PartitionKey, offset: i64) -> bool {
        self.ends.get(key).is_none_or(|(_, high)| offset >= *high)
    }

    /// The partitions not read to their end yet, given each one's known
    /// position (`None`: unknown), together with whether that position is
    /// unknown (and the start not looked up yet).
    pub(super) fn unfinished(
        &self,
        position: impl Fn(&PartitionKey) -> Option<i64>,
    ) -> Vec<(PartitionKey, bool)> {
        self.ends
            .iter()
            .filter(|(_, (low, high))| high > low)
            .filter_map(|(key, (_, high))| {
                let known = [position(key), self.starts.get(key).copied()]
                    .into_iter()
                    .flatten()
                    .max();
                match known {
                    Some(offset) if offset >= *high => None,
                    Some(_) => Some((*key, false)),
                    None => Some((*key, true)),
                }
            })
            .collect()
    }

    /// Records where `key` starts, as looked up.
    pub(super) fn set_start(&mut self, key: PartitionKey, offset: i64) {
        self.starts.insert(key, offset);
    }
}

/// The low and high watermark of every partition of `topics` now.
pub(super) fn end_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topics: &[&str],
) -> Result<Watermarks, String> {
    let timeout = Duration::from_secs(30);
    let mut ends = BTreeMap::new();
    for topic in topics {
        let metadata = consumer
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| format!("cannot read the partitions of `{topic}`: {e}"))?;
        for found in metadata.topics() {
            if let Some(error) = found.error() {
                return Err(format!("topic `{topic}`: {error:?}"));
            }
            for partition in found.partitions() {
                let (low, high) = consumer
                    .fetch_watermarks(topic, partition.id(), timeout)
                    .map_err(|e| {
                        format!(
                            "cannot read the end offset of `{topic}` [{}]: {e}",
                            partition.id()
                        )
                    })?;
                ends.insert((Topic::new(topic), partition.id()), (low, high));
            }
        }
    }
    Ok(ends)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(partition: i32) -> PartitionKey {
        (Topic::new("t"), partition)
    }

    fn read() -> BoundedRead {
        // Partition 0 holds 0..10, 1 is empty, 2 holds 5..8 (retention
        // deleted the first five).
        BoundedRead::new(
            [(key(0), (0, 10)), (key(1), (3, 3)), (key(2), (5, 8))]
                .into_iter()
                .collect(),
        )
    }

    #[test]
    fn empty_partitions_are_done_and_unknown_positions_ask_for_their_start() {
        let mut bound = read();
        assert_eq!(
            bound.unfinished(|_| None),
            vec![(key(0), true), (key(2), true)]
        );
        // The group committed partition 0's end and 2's middle.
        bound.set_start(key(0), 10);
        bound.set_start(key(2), 6);
        assert_eq!(bound.unfinished(|_| None), vec![(key(2), false)]);
        // A record read moves past the start.
        assert_eq!(
            bound.unfinished(|k| (k == &key(2)).then_some(8)),
            Vec::new()
        );
    }

    #[test]
    fn a_restored_position_at_the_end_is_done_before_anything_is_read() {
        let bound = read();
        let restored = |k: &PartitionKey| match k.1 {
            0 => Some(10),
            2 => Some(8),
            _ => None,
        };
        assert!(bound.unfinished(restored).is_empty());
        assert_eq!(
            bound.unfinished(|k| (k.1 == 0).then_some(9)),
            vec![(key(0), false), (key(2), true)]
        );
    }

    #[test]
    fn records_written_after_start_up_are_beyond_the_bound() {
        let bound = read();
        assert!(!bound.beyond(&key(0), 9));
        assert!(bound.beyond(&key(0), 10));
        assert!(bound.beyond(&key(7), 0), "a partition created since");
    }
}
