//! `sluice run` processes against a real Kafka broker: a `kill -9` mid-stream
//! loses no record, and two processes in one consumer group share the
//! partitions. (`scripts/dev-services.sh up`; the test command starts it.)

use sluice_tests::kafka::{
    IdentityPipeline, committed, create_topic, produce_keys, read, unique_topic,
};
use sluice_tests::{kafka_end_offsets, sigterm_and_wait, wait_until};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

fn pipeline(dir: &Path, name: &str, input: &str, group: &str, output: &str) -> PathBuf {
    let file = dir.join(format!("{name}.toml"));
    let text = IdentityPipeline {
        name,
        input,
        group,
        output,
        dead_letter: None,
        batch_size: 20,
        checkpoint_interval_ms: 50,
        source_settings: "properties = { \"session.timeout.ms\" = \"6000\", \"heartbeat.interval.ms\" = \"500\" }",
    }
    .toml();
    std::fs::write(&file, text).unwrap();
    file
}

fn spawn(pipeline: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("run")
        .arg(pipeline)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn distinct_keys(topic: &str, at_least: usize) -> (BTreeSet<Vec<u8>>, usize) {
    let records = read(topic, 1, at_least, WAIT);
    let total = records.len();
    (records.into_iter().filter_map(|r| r.key).collect(), total)
}

#[test]
fn kill_dash_nine_mid_stream_then_restart_loses_no_record() {
    const RECORDS: usize = 30_000;
    let dir = tempfile::tempdir().unwrap();
    let (input, output, group) = (
        unique_topic("kill-in"),
        unique_topic("kill-out"),
        unique_topic("kill-group"),
    );
    create_topic(&input, 4);
    // Half of the input before the kill and half after it, so the restarted
    // run always has records to read however fast the first run was.
    produce_keys(&input, 0..RECORDS / 2);
    let file = pipeline(dir.path(), "kill", &input, &group, &output);

    let mut first = spawn(&file);
    wait_until("some output", WAIT, || {
        kafka_end_offsets(&output, 1)[0] >= 2_000
    });
    first.kill().unwrap(); // SIGKILL: no flush, no final commit
    first.wait().unwrap();
    let committed_after_kill: i64 = committed(&group, &input, 4)
        .iter()
        .map(|o| o.unwrap_or(0))
        .sum();
    assert!(
        (committed_after_kill as usize) <= RECORDS / 2,
        "committed {committed_after_kill} of the {} records produced",
        RECORDS / 2
    );
    produce_keys(&input, RECORDS / 2..RECORDS);

    let second = spawn(&file);
    wait_until("the restarted run to commit everything", WAIT, || {
        committed(&group, &input, 4)
            .iter()
            .map(|o| o.unwrap_or(0))
            .sum::<i64>() as usize
            == RECORDS
    });
    sigterm_and_wait(second);

    let written = kafka_end_offsets(&output, 1)[0] as usize;
    let (keys, total) = distinct_keys(&output, written);
    assert_eq!(total, written);
    assert_eq!(
        keys.len(),
        RECORDS,
        "every key reaches the output at least once"
    );
    // At-least-once: records after the last completed checkpoint before the
    // kill are written again, nothing else.
    let duplicates = total - RECORDS;
    assert!(
        duplicates <= RECORDS - committed_after_kill as usize,
        "{duplicates} duplicates"
    );
}

#[test]
fn two_processes_in_one_group_share_the_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let input = unique_topic("share-in");
    let group = unique_topic("share-group");
    let (out_a, out_b) = (unique_topic("share-out-a"), unique_topic("share-out-b"));
    create_topic(&input, 4);
    let a = spawn(&pipeline(dir.path(), "a", &input, &group, &out_a));

    // Keep producing while the group changes, so both members get records.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (input, stop) = (input.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut next = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                produce_keys(&input, next..next + 200);
                next += 200;
                std::thread::sleep(Duration::from_millis(50));
            }
            next
        })
    };
    wait_until("process a to write", WAIT, || {
        kafka_end_offsets(&out_a, 1)[0] > 0
    });
    let b = spawn(&pipeline(dir.path(), "b", &input, &group, &out_b));
    wait_until("process b to get partitions and write", WAIT, || {
        kafka_end_offsets(&out_b, 1)[0] > 0
    });
    let a_before = kafka_end_offsets(&out_a, 1)[0];
    wait_until(
        "process a to keep writing after the rebalance",
        WAIT,
        || kafka_end_offsets(&out_a, 1)[0] > a_before,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let produced = producer.join().unwrap();

    wait_until("the group to commit everything produced", WAIT, || {
        committed(&group, &input, 4)
            .iter()
            .map(|o| o.unwrap_or(0))
            .sum::<i64>() as usize
            == produced
    });
    sigterm_and_wait(a);
    sigterm_and_wait(b);

    let (keys_a, _) = distinct_keys(&out_a, kafka_end_offsets(&out_a, 1)[0] as usize);
    let (keys_b, _) = distinct_keys(&out_b, kafka_end_offsets(&out_b, 1)[0] as usize);
    assert!(
        !keys_a.is_empty() && !keys_b.is_empty(),
        "both members processed records"
    );
    let all: BTreeSet<Vec<u8>> = keys_a.union(&keys_b).cloned().collect();
    assert_eq!(
        all.len(),
        produced,
        "every produced key was processed by one of them"
    );
}
