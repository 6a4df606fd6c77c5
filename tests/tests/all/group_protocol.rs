//! What scale-out (issue 39) takes from Kafka's consumer-group protocol,
//! checked against the dev broker (Kafka 4.4) and the librdkafka Sluice
//! links (rust-rdkafka 0.39, librdkafka 2.12): KIP-848's protocol
//! (`group.protocol = "consumer"`) with the server-side `range` assignor
//! gives same-index partitions of co-partitioned topics to one member, so
//! a task = (stage, partition index) can own its partition of every topic
//! it reads; when a second member joins, the partitions split between them
//! without overlap, and every partition is owned by someone. And EOS v2:
//! a transaction that commits consumed offsets with the group metadata of
//! a member's older epoch (a zombie whose partitions moved) is refused.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
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

/// The first member's group metadata from before a second member joined,
/// both members (still in the group), and each one's partitions after.
type Split = (
    rdkafka::consumer::ConsumerGroupMetadata,
    [BaseConsumer; 2],
    Vec<BTreeSet<(String, i32)>>,
);

/// A group of one member on a new two-partition topic, then of two.
fn metadata_before_a_split(name: &str) -> Split {
    let input = unique_topic(&format!("{name}-in"));
    create_topic(&input, 2);
    let group = unique_topic(&format!("{name}-group"));
    let first = member(&group, &[input.as_str()]);
    poll_until(&[&first], |owned| owned[0].len() == 2);
    let before = first.group_metadata().expect("group metadata");
    let second = member(&group, &[input.as_str()]);
    let split = poll_until(&[&first, &second], |owned| {
        owned.iter().all(|o| o.len() == 1)
    });
    (before, [first, second], split)
}

/// A transactional producer with a transaction begun.
fn in_a_transaction(name: &str) -> BaseProducer {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", unique_topic(name))
        .create()
        .expect("a transactional producer");
    producer
        .init_transactions(Duration::from_secs(30))
        .expect("init");
    producer.begin_transaction().expect("begin");
    producer
}

#[test]
fn offsets_committed_with_a_stale_member_epoch_abort_the_transaction() {
    let output = unique_topic("eos-out");
    create_topic(&output, 1);
    // What a zombie holds: the group metadata of its epoch before the
    // partitions moved.
    let (stale, [_first, second], split) = metadata_before_a_split("eos");
    let moved = split[1].iter().next().cloned().expect("a moved partition");

    let producer = in_a_transaction("eos-zombie");
    let timeout = Duration::from_secs(30);
    producer
        .send(BaseRecord::<(), str>::to(&output).payload("from the zombie"))
        .map_err(|(error, _)| error)
        .expect("produce");
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(&moved.0, moved.1, Offset::Offset(0))
        .expect("offsets");
    // The refusal comes from the offset commit (or, at the latest, from
    // the commit of the transaction): either way nothing is committed.
    let sent = producer.send_offsets_to_transaction(&offsets, &stale, timeout);
    let committed = sent.and_then(|()| producer.commit_transaction(timeout));
    // Refused for its generation (the member epoch it carries), not for
    // anything else.
    let code = committed.err().and_then(|error| error.rdkafka_error_code());
    assert!(
        matches!(
            code,
            Some(RDKafkaErrorCode::IllegalGeneration | RDKafkaErrorCode::FencedMemberEpoch)
        ),
        "a zombie's offsets for a partition that moved must not commit: {code:?}"
    );
    // A member with its current metadata commits the same offsets.
    let current = second.group_metadata().expect("group metadata");
    let honest = in_a_transaction("eos-owner");
    honest
        .send_offsets_to_transaction(&offsets, &current, timeout)
        .expect("the owner's offsets");
    honest
        .commit_transaction(timeout)
        .expect("the owner commits");
}

/// What lets a task that keeps its partition through a rebalance go on
/// committing its offsets in its transactions (ADR 0020): the group
/// metadata its member had before another member joined (an older member
/// epoch) is still accepted for a partition the member kept, while it is
/// refused for one that moved (the test above). So transactions in flight
/// in the processes that keep their tasks do not abort at a rebalance.
#[test]
fn offsets_of_a_partition_that_stayed_commit_with_the_epoch_before_a_rebalance() {
    let (before, _members, split) = metadata_before_a_split("eos-stay");
    let stayed = split[0]
        .iter()
        .next()
        .cloned()
        .expect("a partition that stayed");
    let producer = in_a_transaction("eos-stayer");
    let timeout = Duration::from_secs(30);
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(&stayed.0, stayed.1, Offset::Offset(0))
        .expect("offsets");
    producer
        .send_offsets_to_transaction(&offsets, &before, timeout)
        .expect("offsets of a partition that stayed, with the epoch before the rebalance");
    producer
        .commit_transaction(timeout)
        .expect("the transaction commits");
}

/// The process's member as a scaled-out task's offsets see it.
struct Member(std::sync::Arc<BaseConsumer>);

impl sluice_host::connectors::kafka::OffsetCommits for Member {
    fn commit(&self, _offsets: &TopicPartitionList) {
        panic!("the task's transaction commits its offsets; the member must not");
    }

    fn group_metadata(&self) -> Option<rdkafka::consumer::ConsumerGroupMetadata> {
        self.0.group_metadata()
    }
}

/// A scaled-out task's exactly-once Kafka sink commits the task's consumed
/// offsets in the checkpoint's transaction (EOS v2): after the commit the
/// group holds them, with nothing from the member itself; offsets that did
/// not move open no transaction.
#[test]
fn a_tasks_transaction_commits_its_consumed_offsets_with_its_members_metadata() {
    use sluice_host::connectors::kafka::{
        DEFAULT_TRANSACTIONAL_ID_PREFIX, ExactlyOnceKafkaSink, KafkaTransactionOptions,
        KafkaTransactions, TaskOffsets,
    };
    use sluice_host::dataflow::Sink;
    let input = unique_topic("eos2-in");
    let output = unique_topic("eos2-out");
    create_topic(&input, 2);
    create_topic(&output, 1);
    let group = unique_topic("eos2-group");
    let member = std::sync::Arc::new(member(&group, &[input.as_str()]));
    poll_until(&[&member], |owned| owned[0].len() == 2);

    let offsets = std::sync::Arc::new(TaskOffsets::new(std::sync::Arc::new(Member(
        member.clone(),
    ))));
    let transactions = KafkaTransactions::new(
        KafkaTransactionOptions {
            bootstrap_servers: bootstrap(),
            properties: Default::default(),
            transactional_id_prefix: DEFAULT_TRANSACTIONAL_ID_PREFIX.into(),
            tenant: "default".into(),
            pipeline: unique_topic("eos2-task"),
            progress_topic: unique_topic("eos2-progress"),
            transaction_timeout: Duration::from_secs(60),
            operation_timeout: Duration::from_secs(30),
            open_id: "eos2".into(),
        },
        Default::default(),
    )
    .expect("transactions");
    transactions.commit_task_offsets(offsets.clone());
    let mut sink = ExactlyOnceKafkaSink::new("out", &output, None, transactions);
    let committer = sink.committer().expect("a committer");

    let at = |first: i64, second: i64| {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&input, 0, Offset::Offset(first))
            .expect("offset");
        list.add_partition_offset(&input, 1, Offset::Offset(second))
            .expect("offset");
        list
    };
    // Checkpoint 1: offsets moved, no record written: a transaction holds
    // just the offsets.
    offsets.record(1, at(7, 3));
    let committable = sink
        .pre_commit(1)
        .expect("pre-commit")
        .expect("a committable");
    committer.commit(1, &committable).expect("commit");
    let committed = member
        .committed_offsets(at(0, 0), Duration::from_secs(10))
        .expect("committed offsets");
    assert_eq!(
        committed.to_topic_map(),
        at(7, 3).to_topic_map(),
        "the group holds the task's offsets"
    );
    // Checkpoint 2: the same offsets: nothing to commit.
    offsets.record(2, at(7, 3));
    let committable = sink
        .pre_commit(2)
        .expect("pre-commit")
        .expect("a committable");
    assert_eq!(committable["offsets"], false, "{committable}");
    assert_eq!(committable["records"], 0, "{committable}");
    committer.commit(2, &committable).expect("commit");
}
