//! The shared reader of a scaled-out stage (ADR 0020) against the dev
//! broker: tasks of one process read their own partitions through one
//! consumer, each from the offset it asks for, and a partition that leaves
//! one task and is given to the next starts exactly where the new task
//! says, with nothing left over from the earlier assignment.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use sluice_host::connectors::kafka::{SharedReader, TaskReader, TaskWake};
use sluice_host::metrics::PartitionMetrics;
use sluice_tests::kafka::{bootstrap, create_topic, send, unique_topic};

/// Writes values `p{partition}-{i}` for `range` to `partition` of `topic`.
fn produce(topic: &str, partition: i32, range: std::ops::Range<usize>) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap_or_else(|e| panic!("producer: {e}"));
    for i in range {
        let value = format!("p{partition}-{i}");
        send(
            &producer,
            BaseRecord::<(), _>::to(topic)
                .payload(&value)
                .partition(partition),
        );
    }
    producer
        .flush(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("flush: {e}"));
}

/// A task's reader of `partition` of `topic`, assigned at `start`.
fn task(reader: &SharedReader, topic: &str, partition: i32, start: Offset) -> TaskReader {
    let mut task = reader
        .reader(
            &[topic.to_string()],
            &[partition],
            Arc::new(PartitionMetrics::default()),
            TaskWake::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(topic, partition, start)
        .unwrap_or_else(|e| panic!("{e}"));
    task.start(&offsets).unwrap_or_else(|e| panic!("{e}"));
    task
}

/// Reads `count` records from `task` (60 s at most): (partition, offset,
/// value) of each.
fn read(reader: &SharedReader, task: &TaskReader, count: usize) -> Vec<(i32, i64, String)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut read = Vec::new();
    while read.len() < count {
        assert!(
            Instant::now() < deadline,
            "{} of {count} records read: {read:?}",
            read.len()
        );
        reader.serve();
        if let Some(polled) = task.poll(Duration::from_millis(200)) {
            let message = polled.unwrap_or_else(|e| panic!("{e}"));
            read.push((
                message.partition(),
                message.offset(),
                String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned(),
            ));
        }
    }
    read
}

fn expected(partition: i32, range: std::ops::Range<usize>) -> Vec<(i32, i64, String)> {
    range
        .map(|i| (partition, i as i64, format!("p{partition}-{i}")))
        .collect()
}

#[test]
fn tasks_read_their_own_partitions_from_their_own_offsets_through_one_consumer() {
    let topic = unique_topic("shared-reader");
    create_topic(&topic, 2);
    produce(&topic, 0, 0..100);
    produce(&topic, 1, 0..100);
    let reader = SharedReader::new(
        &bootstrap(),
        &unique_topic("shared-group"),
        &BTreeMap::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"));

    let first = task(&reader, &topic, 0, Offset::Offset(10));
    let other = task(&reader, &topic, 1, Offset::Beginning);
    assert_eq!(read(&reader, &first, 20), expected(0, 10..30));
    assert_eq!(read(&reader, &other, 100), expected(1, 0..100));

    // Partition 0 leaves its task with records fetched and not yet read,
    // and goes to a new task that starts before them, while more arrive.
    drop(first);
    produce(&topic, 0, 100..110);
    let next = task(&reader, &topic, 0, Offset::Offset(5));
    assert_eq!(read(&reader, &next, 105), expected(0, 5..110));
    // Nothing more is there (and nothing of the other partition).
    assert!(next.poll(Duration::from_millis(500)).is_none());

    // The other task reads on, undisturbed.
    produce(&topic, 1, 100..105);
    assert_eq!(read(&reader, &other, 5), expected(1, 100..105));
}
