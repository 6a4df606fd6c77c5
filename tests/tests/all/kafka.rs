//! Kafka source and sink against a real Apache Kafka broker
//! (`scripts/dev-services.sh up`; the test command starts it).

use sluice_host::connectors::kafka::{
    KafkaSource, KafkaSourceOptions, StartPosition, TransactionalProducer, ValueFormat,
};
use sluice_host::dataflow::{RunOutcome, Source};
use sluice_host::record::dead_letter_headers as h;
use sluice_tests::kafka::{
    IdentityPipeline, Outgoing, bootstrap, committed, create_topic, produce, read, unique_topic,
};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn pipeline(input: &str, group: &str, output: &str, dead_letter: &str) -> String {
    IdentityPipeline {
        name: "kafka-test",
        input,
        group,
        output,
        dead_letter: Some(dead_letter),
        batch_size: 50,
        checkpoint_interval_ms: 200,
        source_settings: "value_format = \"json\"\nproperties = { \"session.timeout.ms\" = \"6000\" }",
    }
    .toml()
}

#[test]
fn round_trip_keeps_keys_and_headers_dead_letters_bad_json_and_commits_offsets() {
    let (input, output, dead_letter, group) = (
        unique_topic("in"),
        unique_topic("out"),
        unique_topic("dlq"),
        unique_topic("group"),
    );
    create_topic(&input, 3);
    let values: Vec<String> = (0..300)
        .map(|i| {
            if i % 50 == 7 {
                format!("{{broken {i}")
            } else {
                format!("{{\"n\":{i}}}")
            }
        })
        .collect();
    let keys: Vec<String> = (0..300).map(|i| format!("key-{i}")).collect();
    let records: Vec<Outgoing<'_>> = values
        .iter()
        .zip(&keys)
        .map(|(v, k)| Outgoing {
            key: Some(k.as_bytes()),
            value: v.as_bytes(),
            headers: vec![("trace", k.as_bytes()), ("bin", &[0u8, 255][..])],
            timestamp: None,
        })
        .collect();
    produce(&input, &records);

    let (outcome, snapshot) = sluice_tests::run_pipeline_until(
        &pipeline(&input, &group, &output, &dead_letter),
        WAIT,
        |s| {
            // Everything read, and the client has reported zero lag on all
            // three partitions (statistics come every second).
            s.records_out + s.dead_letters >= 300
                && s.source_partitions.len() == 3
                && s.source_partitions.iter().all(|(_, _, p)| p.lag == Some(0))
        },
    );
    assert_eq!(outcome, RunOutcome::Stopped);
    assert_eq!(snapshot.records_in, 300);
    assert_eq!(snapshot.dead_letters, 6);
    let read_per_partition: Vec<u64> = snapshot
        .source_partitions
        .iter()
        .map(|(_, _, p)| p.records)
        .collect();
    assert_eq!(
        read_per_partition.iter().sum::<u64>(),
        300,
        "{read_per_partition:?}"
    );
    assert!(
        read_per_partition.iter().all(|n| *n > 0),
        "keys spread over 3 partitions"
    );
    let delivered = |topic: &str| -> u64 {
        snapshot
            .sink_partitions
            .iter()
            .filter(|(t, _, _)| t == topic)
            .map(|(_, _, p)| p.records)
            .sum()
    };
    assert_eq!(delivered(&output), 294);
    assert_eq!(delivered(&dead_letter), 6);

    let out = read(&output, 1, 294, WAIT);
    assert_eq!(out.len(), 294, "every valid record exactly once");
    for record in &out {
        let key = String::from_utf8(record.key.clone().unwrap()).unwrap();
        let n: usize = key.trim_start_matches("key-").parse().unwrap();
        assert_eq!(record.value, values[n].as_bytes());
        assert_eq!(
            record.headers,
            vec![
                ("trace".to_string(), key.clone().into_bytes()),
                ("bin".to_string(), vec![0, 255])
            ]
        );
    }

    let dead = read(&dead_letter, 1, 6, WAIT);
    assert_eq!(dead.len(), 6);
    for record in &dead {
        let key = String::from_utf8(record.key.clone().unwrap()).unwrap();
        let n: usize = key.trim_start_matches("key-").parse().unwrap();
        assert_eq!(
            record.value,
            values[n].as_bytes(),
            "the original value is kept"
        );
        assert!(
            record
                .header(h::REASON)
                .unwrap()
                .starts_with("invalid JSON value"),
            "{:?}",
            record.headers
        );
        assert_eq!(
            record.header(h::SOURCE_TOPIC).as_deref(),
            Some(input.as_str())
        );
        assert!(
            record.header(h::SOURCE_PARTITION).is_some()
                && record.header(h::SOURCE_OFFSET).is_some()
        );
        assert!(record.header(h::TIME).is_some());
        assert_eq!(
            record.header("trace").as_deref(),
            Some(key.as_str()),
            "original headers are kept"
        );
    }

    // A clean stop commits everything read: committed offsets sum to the input.
    let offsets = committed(&group, &input, 3);
    assert_eq!(
        offsets.iter().map(|o| o.unwrap_or(0)).sum::<i64>(),
        300,
        "{offsets:?}"
    );

    // A restart with the same group reads only what came after.
    produce(
        &input,
        &[Outgoing {
            key: Some(b"key-new"),
            value: b"{\"n\":\"new\"}",
            headers: vec![],
            timestamp: None,
        }],
    );
    let (_, snapshot) = sluice_tests::run_pipeline_until(
        &pipeline(&input, &group, &output, &dead_letter),
        WAIT,
        |s| s.records_out >= 1,
    );
    assert_eq!(
        snapshot.records_in, 1,
        "nothing before the committed offsets is read again"
    );
    assert_eq!(read(&output, 1, 296, Duration::from_secs(2)).len(), 295);
}

/// Also a bounded read: the source ends at the end offset of start-up,
/// past the transactions' control records.
#[test]
fn read_committed_never_sees_an_aborted_transaction() {
    let topic = unique_topic("txn");
    create_topic(&topic, 1);
    let producer = TransactionalProducer::new(
        &bootstrap(),
        &unique_topic("txn-id"),
        &Default::default(),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    producer.begin().unwrap();
    for i in 0..5 {
        producer
            .send(&topic, None, format!("aborted-{i}").as_bytes(), &[])
            .unwrap();
    }
    producer.abort().unwrap();
    producer.begin().unwrap();
    for i in 0..5 {
        producer
            .send(
                &topic,
                Some(b"k"),
                format!("committed-{i}").as_bytes(),
                &[("h", b"v")],
            )
            .unwrap();
    }
    producer.commit().unwrap();

    let mut source = KafkaSource::new(
        "txn",
        KafkaSourceOptions {
            bootstrap_servers: bootstrap(),
            topics: vec![topic.clone()],
            group_id: unique_topic("txn-group"),
            start: StartPosition::Earliest,
            value_format: ValueFormat::Raw,
            properties: [("session.timeout.ms".to_string(), "6000".to_string())].into(),
            poll_timeout: Duration::from_millis(200),
            timestamp_field: None,
            group_instance_id: None,
            bounded: true,
            assignment: None,
            upstream_watermarks: false,
        },
        Default::default(),
    )
    .unwrap();
    // Written after the source started: beyond its bound.
    producer.begin().unwrap();
    producer.send(&topic, None, b"later", &[]).unwrap();
    producer.commit().unwrap();
    let mut values = Vec::new();
    let started = std::time::Instant::now();
    // Records are returned in offset order and the aborted ones come first;
    // the bounded source ends after the last committed one of start-up.
    loop {
        assert!(
            started.elapsed() < WAIT,
            "the bounded source did not end: {values:?}"
        );
        let Some(batch) = source.next_batch(100).unwrap() else {
            break;
        };
        values.extend(
            batch
                .records
                .iter()
                .map(|r| String::from_utf8(r.value.to_vec()).unwrap()),
        );
    }
    assert_eq!(
        values,
        (0..5).map(|i| format!("committed-{i}")).collect::<Vec<_>>()
    );
}

fn consume_all(
    source: &mut KafkaSource,
    expected: usize,
) -> (Vec<sluice_host::Record>, Vec<sluice_host::Record>) {
    let (mut records, mut dead) = (Vec::new(), Vec::new());
    let started = std::time::Instant::now();
    while records.len() + dead.len() < expected && started.elapsed() < WAIT {
        let batch = source.next_batch(100).unwrap().unwrap();
        records.extend(batch.records);
        dead.extend(batch.dead_letters);
    }
    (records, dead)
}

fn source_options(
    topic: &str,
    start: StartPosition,
    value_format: ValueFormat,
) -> KafkaSourceOptions {
    KafkaSourceOptions {
        bootstrap_servers: bootstrap(),
        topics: vec![topic.to_string()],
        group_id: unique_topic("group"),
        start,
        value_format,
        properties: [("session.timeout.ms".to_string(), "6000".to_string())].into(),
        poll_timeout: Duration::from_millis(200),
        timestamp_field: None,
        group_instance_id: None,
        bounded: false,
        assignment: None,
        upstream_watermarks: false,
    }
}

#[test]
fn avro_values_with_a_schema_file_become_json_and_bad_datums_are_dead_lettered() {
    let (input, output, dead_letter, group) = (
        unique_topic("avro-in"),
        unique_topic("avro-out"),
        unique_topic("avro-dlq"),
        unique_topic("avro-group"),
    );
    create_topic(&input, 1);
    let schema_text = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"}]}"#;
    let schema = apache_avro::Schema::parse_str(schema_text).unwrap();
    let datums: Vec<Vec<u8>> = (0..20)
        .map(|i| {
            let mut record = apache_avro::types::Record::new(&schema).unwrap();
            record.put("id", i as i64);
            record.put("item", format!("item-{i}"));
            apache_avro::to_avro_datum(&schema, record).unwrap()
        })
        .collect();
    let mut records: Vec<Outgoing<'_>> = datums
        .iter()
        .map(|d| Outgoing {
            value: d,
            ..Outgoing::default()
        })
        .collect();
    records.push(Outgoing {
        value: b"\xff\xff not avro",
        ..Outgoing::default()
    });
    produce(&input, &records);

    let dir = tempfile::tempdir().unwrap();
    let schema_file = dir.path().join("order.avsc");
    std::fs::write(&schema_file, schema_text).unwrap();
    let text = pipeline(&input, &group, &output, &dead_letter).replace(
        "value_format = \"json\"",
        &format!(
            "value_format = \"avro\"\navro_schema = \"{}\"",
            schema_file.display()
        ),
    );
    let (_, snapshot) =
        sluice_tests::run_pipeline_until(&text, WAIT, |s| s.records_out + s.dead_letters >= 21);
    assert_eq!((snapshot.records_out, snapshot.dead_letters), (20, 1));
    let out = read(&output, 1, 20, WAIT);
    for (i, record) in out.iter().enumerate() {
        let value: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"id": i, "item": format!("item-{i}")})
        );
    }
    let dead = read(&dead_letter, 1, 1, WAIT);
    assert!(
        dead[0]
            .header(h::REASON)
            .unwrap()
            .starts_with("invalid Avro value"),
        "{:?}",
        dead[0].headers
    );
    assert_eq!(dead[0].value, b"\xff\xff not avro");
}

#[test]
fn start_positions_latest_and_by_timestamp() {
    // By timestamp: records at or after the given time only.
    let topic = unique_topic("start-ts");
    create_topic(&topic, 1);
    let values: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
    let records: Vec<Outgoing<'_>> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Outgoing {
            value: v.as_bytes(),
            timestamp: Some(1_600_000_000_000 + i as i64 * 1000),
            ..Outgoing::default()
        })
        .collect();
    produce(&topic, &records);
    let mut source = KafkaSource::new(
        "ts",
        source_options(
            &topic,
            StartPosition::Timestamp(1_600_000_005_000),
            ValueFormat::Raw,
        ),
        Default::default(),
    )
    .unwrap();
    let (got, _) = consume_all(&mut source, 5);
    let got: Vec<&[u8]> = got.iter().map(|r| r.value.as_ref()).collect();
    assert_eq!(got, vec![&b"t5"[..], b"t6", b"t7", b"t8", b"t9"]);
    assert_eq!(
        source.next_batch(100).unwrap().unwrap().records.len(),
        0,
        "nothing before t5"
    );

    // Latest: what was there before the source joined is skipped.
    let topic = unique_topic("start-latest");
    create_topic(&topic, 1);
    produce(
        &topic,
        &[Outgoing {
            value: b"old",
            ..Outgoing::default()
        }],
    );
    let mut source = KafkaSource::new(
        "latest",
        source_options(&topic, StartPosition::Latest, ValueFormat::Raw),
        Default::default(),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let mut seen = Vec::new();
    // Keep writing markers until the source (once assigned) receives one.
    while seen.is_empty() && started.elapsed() < WAIT {
        produce(
            &topic,
            &[Outgoing {
                value: b"new",
                ..Outgoing::default()
            }],
        );
        seen.extend(source.next_batch(100).unwrap().unwrap().records);
    }
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|r| r.value.as_ref() == b"new"),
        "the record written before joining is skipped"
    );
}

#[test]
fn sink_partitions_by_key_or_writes_to_an_explicit_partition() {
    use sluice_host::connectors::kafka::{KafkaSink, KafkaSinkOptions};
    use sluice_host::dataflow::Sink;
    let records: Vec<sluice_host::Record> = (0..60)
        .map(|i| {
            let mut record = sluice_host::Record::from_value(
                format!("v{i}").into_bytes(),
                sluice_host::SourcePosition {
                    topic: "t".into(),
                    partition: 0,
                    offset: i,
                },
            );
            record.key = Some(format!("key-{}", i % 6).into_bytes().into());
            record
        })
        .collect();
    for explicit in [Some(2), None] {
        let topic = unique_topic("sink-partition");
        create_topic(&topic, 3);
        let mut sink = KafkaSink::new(
            "sink",
            KafkaSinkOptions {
                bootstrap_servers: bootstrap(),
                topic: topic.clone(),
                partition: explicit,
                properties: Default::default(),
                flush_timeout: Duration::from_secs(30),
            },
            Default::default(),
        )
        .unwrap();
        sink.write(&records).unwrap();
        sink.flush().unwrap();
        let out = read(&topic, 3, 60, WAIT);
        assert_eq!(out.len(), 60);
        match explicit {
            Some(partition) => assert!(out.iter().all(|r| r.partition == partition)),
            None => {
                let mut partition_of_key = std::collections::HashMap::new();
                for record in &out {
                    let previous = partition_of_key.insert(record.key.clone(), record.partition);
                    assert!(
                        previous.is_none_or(|p| p == record.partition),
                        "one key, one partition"
                    );
                }
                let used: std::collections::BTreeSet<i32> =
                    partition_of_key.values().copied().collect();
                assert!(
                    used.len() > 1,
                    "six keys spread over more than one partition"
                );
            }
        }
    }
}

#[test]
fn a_permanent_delivery_failure_stops_the_pipeline_naming_the_sink() {
    // Nothing listens on port 1: every delivery times out after 1 s.
    let (input, group) = (unique_topic("fail-in"), unique_topic("fail-group"));
    create_topic(&input, 1);
    produce(
        &input,
        &[Outgoing {
            value: b"{\"n\":1}",
            ..Outgoing::default()
        }],
    );
    let text = pipeline(&input, &group, "unused", "unused-dlq").replace(
        &format!("[sink.kafka]\nbootstrap_servers = \"{}\"", bootstrap()),
        "[sink.kafka]\nbootstrap_servers = \"127.0.0.1:1\"\nproperties = { \"message.timeout.ms\" = \"1000\" }",
    );
    assert!(text.contains("127.0.0.1:1"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pipeline.toml");
    std::fs::write(&file, text).unwrap();
    let loaded = sluice_host::config::LoadedConfig::load(&file).unwrap();
    let pipeline = sluice_host::pipeline::Pipeline::build(
        &loaded,
        &sluice_tests::runtime(),
        sluice_tests::state_backend(),
        &sluice_host::pipeline::wasm_files_only,
    )
    .unwrap();
    // The run ends by itself, with an error: never a silent drop.
    let error = pipeline
        .run(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
            false,
        )))
        .expect_err("an undeliverable record must fail the run");
    let message = error.to_string();
    assert!(message.starts_with("sink `sink` failed:"), "{message}");
    assert!(
        message.contains("timed out") || message.contains("not delivered"),
        "{message}"
    );
}

#[test]
fn transaction_commits_records_and_consumer_offsets_together() {
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let (topic, group) = (
        unique_topic("txn-offsets"),
        unique_topic("txn-offsets-group"),
    );
    create_topic(&topic, 1);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", &group)
        .create()
        .unwrap();
    let metadata = consumer.group_metadata().expect("group metadata");
    let producer = TransactionalProducer::new(
        &bootstrap(),
        &unique_topic("txn-offsets-id"),
        &Default::default(),
        Duration::from_secs(30),
    )
    .unwrap();
    producer.begin().unwrap();
    producer.send(&topic, None, b"with-offsets", &[]).unwrap();
    producer
        .send_offsets(&[(topic.as_str(), 0, 42)], &metadata)
        .unwrap();
    producer.commit().unwrap();
    assert_eq!(committed(&group, &topic, 1), vec![Some(42)]);
    assert_eq!(read(&topic, 1, 1, WAIT).len(), 1);
}

/// The transactions of an exactly-once pipeline `name` sharing the
/// progress topic `progress`.
fn transactions(
    name: &str,
    progress: &str,
    open_id: &str,
) -> std::sync::Arc<sluice_host::connectors::kafka::KafkaTransactions> {
    use sluice_host::connectors::kafka::{
        DEFAULT_TRANSACTIONAL_ID_PREFIX, KafkaTransactionOptions, KafkaTransactions,
    };
    KafkaTransactions::new(
        KafkaTransactionOptions {
            bootstrap_servers: bootstrap(),
            properties: Default::default(),
            transactional_id_prefix: DEFAULT_TRANSACTIONAL_ID_PREFIX.into(),
            tenant: "default".into(),
            pipeline: name.into(),
            progress_topic: progress.into(),
            transaction_timeout: Duration::from_secs(60),
            operation_timeout: Duration::from_secs(30),
            open_id: open_id.into(),
        },
        Default::default(),
    )
    .unwrap_or_else(|e| panic!("transactions of {name}: {e}"))
}

/// Writes one record into the current transaction of `sink` and
/// pre-commits checkpoint `checkpoint`: the transaction, with its progress
/// record, is then open until committed.
fn pre_commit_one(
    sink: &mut sluice_host::connectors::kafka::ExactlyOnceKafkaSink,
    checkpoint: u64,
) -> sluice_host::checkpoint::Committable {
    use sluice_host::dataflow::Sink;
    use sluice_host::record::{Record, SourcePosition};
    let record = Record::from_value(
        &b"{}"[..],
        SourcePosition {
            topic: "test".into(),
            partition: 0,
            offset: checkpoint as i64,
        },
    );
    sink.write(&[record]).expect("write");
    sink.pre_commit(checkpoint)
        .expect("pre-commit")
        .expect("a committable")
}

/// A restore must find its pipeline's committed progress record even
/// while another pipeline sharing the progress topic has a transaction
/// open before it: a `read_committed` reader reports the end of the
/// partition at that transaction (the last stable offset), and stopping
/// there took a committed checkpoint for an uncommitted one (its epoch
/// replayed: output written twice).
#[test]
fn a_committed_checkpoint_is_found_behind_another_pipelines_open_transaction() {
    use sluice_host::connectors::kafka::ExactlyOnceKafkaSink;
    let progress = unique_topic("progress");
    let output = unique_topic("eo-out");
    create_topic(&output, 1);
    let (mine, other) = (unique_topic("mine"), unique_topic("other"));

    // The other pipeline opens a transaction with its progress record and
    // leaves it open.
    let other_transactions = transactions(&other, &progress, "other-open");
    let mut other_sink =
        ExactlyOnceKafkaSink::new("out", &output, None, other_transactions.clone());
    let other_committable = pre_commit_one(&mut other_sink, 1);

    // This one commits checkpoint 1 after it.
    let my_transactions = transactions(&mine, &progress, "my-open");
    let mut my_sink = ExactlyOnceKafkaSink::new("out", &output, None, my_transactions.clone());
    let committable = pre_commit_one(&mut my_sink, 1);
    let committer = sluice_host::dataflow::Sink::committer(&my_sink).expect("a committer");
    committer.commit(1, &committable).expect("commit");

    // Restarted, it asks whether checkpoint 1 committed; the other
    // pipeline's transaction ends a moment later.
    let restarted = transactions(&mine, &progress, "my-restarted-open");
    let restarted_sink = ExactlyOnceKafkaSink::new("out", &output, None, restarted);
    let ender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let other_committer =
            sluice_host::dataflow::Sink::committer(&other_sink).expect("a committer");
        other_committer
            .commit(1, &other_committable)
            .expect("the other pipeline commits");
    });
    let restarted_committer =
        sluice_host::dataflow::Sink::committer(&restarted_sink).expect("a committer");
    let started = std::time::Instant::now();
    let found = restarted_committer
        .was_committed(1, &committable)
        .expect("progress read");
    ender.join().expect("the other pipeline");
    assert!(
        found,
        "checkpoint 1 committed, but the progress read (after {:?}) did not find it",
        started.elapsed()
    );
    // And a checkpoint that never committed is not found.
    assert!(
        !restarted_committer
            .was_committed(2, &committable)
            .expect("progress read")
    );
}
