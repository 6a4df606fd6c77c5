//! Event time on a real Kafka source: per-partition watermarks, idle
//! partitions, and the windows they fire.

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use sluice_tests::kafka::{bootstrap, committed, create_topic, unique_topic};
use sluice_tests::run_pipeline_until;
use std::time::Duration;

/// Writes `count` records `{"n": i, "user": "u<i % 3>"}` with event times
/// 1_000, 2_000, ... to partition `partition` of `topic`.
fn produce_to_partition(topic: &str, partition: i32, count: i64) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    for i in 1..=count {
        let value = format!("{{\"n\":{i},\"user\":\"u{}\"}}", i % 3);
        producer
            .send(
                BaseRecord::<(), _>::to(topic)
                    .partition(partition)
                    .payload(&value)
                    .timestamp(i * 1_000),
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

fn pipeline(topic: &str, idle_timeout: &str) -> String {
    format!(
        "[pipeline]\nname = \"idle\"\nbatch_size = 50\nmax_out_of_orderness_ms = 500\n{idle_timeout}\n\n\
         [source.kafka]\nbootstrap_servers = \"{}\"\ntopics = [\"{topic}\"]\ngroup_id = \"{}\"\nstart = \"earliest\"\npoll_timeout_ms = 100\nproperties = {{ \"session.timeout.ms\" = \"6000\" }}\n\n\
         [[operators]]\nname = \"per-10s\"\nwindow = {{ tumbling_ms = 10_000 }}\naggregate = {{ function = \"count\" }}\n\n\
         [sink]\nblackhole = {{}}\n",
        bootstrap(),
        unique_topic("idle-group"),
    )
}

/// One partition of two carries all the data; the other is silent. With an
/// idle timeout the silent partition stops holding the watermark back after
/// the timeout and the windows fire; without one the watermark never moves
/// and no window fires (the failure mode the setting exists for).
#[test]
fn a_silent_partition_holds_the_watermark_back_until_idle() {
    let topic = unique_topic("idle");
    create_topic(&topic, 2);
    produce_to_partition(&topic, 0, 100);

    // Records at 1 s .. 100 s: the windows ending at 10 s .. 90 s close
    // once the watermark reaches 99_499 (100_000 minus the 500 ms bound,
    // minus one); the one ending at 100 s stays open.
    let (_, snapshot) = run_pipeline_until(
        &pipeline(&topic, "idle_timeout_ms = 1000"),
        Duration::from_secs(60),
        |s| s.records_out >= 9,
    );
    assert_eq!(snapshot.watermark, Some(99_499), "{snapshot:?}");
    assert_eq!(snapshot.records_out, 9, "{snapshot:?}");
    // The silent partition is idle (by now the drained one may be too).
    assert!(snapshot.idle_splits >= 1, "{snapshot:?}");

    // Without the setting: everything is read, the source polls on (each
    // poll returns within 100 ms), and the watermark stays where it was.
    let read_all_at = std::cell::Cell::new(None);
    let (_, snapshot) = run_pipeline_until(&pipeline(&topic, ""), Duration::from_secs(60), |s| {
        if s.records_in < 100 {
            return false;
        }
        let batches = read_all_at.get().unwrap_or(s.batches);
        read_all_at.set(Some(batches));
        // Twenty more empty polls: ~2 s, twice the idle timeout above.
        s.batches >= batches + 20
    });
    assert_eq!(snapshot.records_in, 100);
    assert_eq!(snapshot.watermark, None, "{snapshot:?}");
    assert_eq!(snapshot.records_out, 0, "no window fired: {snapshot:?}");
}

/// Windows keyed by user on two workers, reading both partitions of a
/// topic: every window closes once both partitions pass it, and a clean
/// stop commits every offset read (the workers' merger acknowledges the
/// checkpoint barriers back to the source).
#[test]
fn keyed_windows_on_two_workers_fire_and_commit_their_kafka_offsets() {
    let topic = unique_topic("keyed-windows");
    create_topic(&topic, 2);
    produce_to_partition(&topic, 0, 100);
    produce_to_partition(&topic, 1, 100);
    let group = unique_topic("keyed-windows-group");
    let pipeline = format!(
        "[pipeline]\nname = \"keyed\"\nbatch_size = 20\nmax_out_of_orderness_ms = 500\nworkers = 2\ncheckpoint_interval_ms = 200\n\n\
         [source.kafka]\nbootstrap_servers = \"{}\"\ntopics = [\"{topic}\"]\ngroup_id = \"{group}\"\nstart = \"earliest\"\npoll_timeout_ms = 100\nproperties = {{ \"session.timeout.ms\" = \"6000\" }}\n\n\
         [[operators]]\nname = \"per-user\"\nwindow = {{ tumbling_ms = 10_000 }}\nkey_field = \"user\"\naggregate = {{ function = \"count\" }}\n\n\
         [sink]\nblackhole = {{}}\n",
        bootstrap(),
    );
    // Windows ending at 10 s .. 90 s close at watermark 99_499, for each of
    // the three users: 27 results.
    let (_, snapshot) =
        run_pipeline_until(&pipeline, Duration::from_secs(60), |s| s.records_out >= 27);
    assert_eq!(snapshot.records_out, 27, "{snapshot:?}");
    assert_eq!(snapshot.records_in, 200, "{snapshot:?}");
    let per_worker: Vec<u64> = snapshot
        .operators
        .iter()
        .filter(|op| op.name.starts_with("per-user#"))
        .map(|op| op.records_in)
        .collect();
    assert_eq!(per_worker.len(), 2, "{snapshot:?}");
    assert_eq!(per_worker.iter().sum::<u64>(), 200, "{per_worker:?}");
    assert_eq!(committed(&group, &topic, 2), vec![Some(100), Some(100)]);
}
