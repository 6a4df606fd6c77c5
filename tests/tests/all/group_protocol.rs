//! What scale-out (issue 39) takes from Kafka's consumer-group protocol,
//! checked against the dev broker (Kafka 4.4) and the librdkafka Sluice
//! links (rust-rdkafka 0.39, librdkafka 2.12): KIP-848's protocol
//! (`group.protocol = "consumer"`) with the server-side `range` assignor
//! gives same-index partitions of co-partitioned topics to one member, so
//! a task = (stage, partition index) can own its partition of every topic
//! it reads; when a second member joins, the partitions split between them
//! without overlap, and every partition is owned by someone.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use sluice_tests::kafka::{bootstrap, create_topic, unique_topic};

/// A member of `group` on the KIP-848 protocol, subscribed to `topics`.
fn member(group: &str, topics: &[&str]) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .set("group.protocol", "consumer")
        .set("group.remote.assignor", "range")
        .set("enable.auto.commit", "false")
        .create()
        .expect("a KIP-848 consumer");
    consumer.subscribe(topics).expect("subscribe");
    consumer
}

/// The (topic, partition) pairs `consumer` owns now.
fn owned(consumer: &BaseConsumer) -> BTreeSet<(String, i32)> {
    consumer
        .assignment()
        .expect("assignment")
        .elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

/// Polls every member until `done` holds for their assignments (the
/// protocol's heartbeats run inside `poll`), or fails after 60 s.
fn poll_until(
    members: &[&BaseConsumer],
    done: impl Fn(&[BTreeSet<(String, i32)>]) -> bool,
) -> Vec<BTreeSet<(String, i32)>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for member in members {
            let _ = member.poll(Duration::from_millis(50));
        }
        let assignments: Vec<_> = members.iter().map(|m| owned(m)).collect();
        if done(&assignments) {
            return assignments;
        }
        assert!(
            Instant::now() < deadline,
            "the group did not settle: {assignments:?}"
        );
    }
}

/// The partition indices of a member's assignment, per topic.
fn indices(assignment: &BTreeSet<(String, i32)>, topic: &str) -> BTreeSet<i32> {
    assignment
        .iter()
        .filter(|(t, _)| t == topic)
        .map(|(_, p)| *p)
        .collect()
}

#[test]
fn the_range_assignor_keeps_same_index_partitions_together_as_members_join() {
    let a = unique_topic("co-a");
    let b = unique_topic("co-b");
    create_topic(&a, 4);
    create_topic(&b, 4);
    let group = unique_topic("kip848");
    let topics = [a.as_str(), b.as_str()];

    let first = member(&group, &topics);
    let alone = poll_until(&[&first], |owned| owned[0].len() == 8);
    assert_eq!(indices(&alone[0], &a), (0..4).collect());

    let second = member(&group, &topics);
    let split = poll_until(&[&first, &second], |owned| {
        owned.iter().all(|o| !o.is_empty()) && owned.iter().map(BTreeSet::len).sum::<usize>() == 8
    });
    let all: BTreeSet<_> = split.iter().flatten().cloned().collect();
    assert_eq!(all.len(), 8, "every partition owned once: {split:?}");
    for assignment in &split {
        // A member owns partition i of `a` exactly when it owns partition i
        // of `b`: a task's inputs stay with the task.
        assert_eq!(
            indices(assignment, &a),
            indices(assignment, &b),
            "co-partitioned topics split alike: {split:?}"
        );
    }
}
