//! Scale-out (issue 39, ADR 0020): the same pipeline file run by several
//! `sluice run` processes shares the work as tasks, one per input
//! partition, owned through the consumer group (KIP-848). Tasks move when
//! processes come, go cleanly (SIGTERM) or die (SIGKILL); each keeps its
//! own state and checkpoints on S3, and the output stays exactly-once.
//!
//! Input: 8 partitions, a key per record whose partition follows from it
//! (as a Kafka producer partitioning by key does), so a key's records all
//! go to one task → a running count per key in host state (plugin
//! `running-count`) → exactly-once Kafka sinks. A `read_committed` reader
//! must see every id once and, per key, the counts 1..n: state moved with
//! its task.

use sluice_tests::kafka::{committed, create_topic, read_to_end, unique_topic};
use sluice_tests::{
    KillOnDrop, Progress, kafka_end_offsets, s3, sigterm_and_wait, wait_until,
    wait_while_progressing,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(180);
const PARTITIONS: i32 = 8;
const KEYS: u64 = 400;

/// Topics, bucket and pipeline file of one run.
struct Cluster {
    dir: tempfile::TempDir,
    input: String,
    counts: String,
    dead_letters: String,
    group: String,
    /// Records produced so far.
    produced: u64,
    runs: usize,
}

impl Cluster {
    fn new() -> Cluster {
        let bucket = unique_topic("scale-bucket").to_lowercase();
        s3::create_bucket(&bucket);
        let name = unique_topic("scale-out");
        let cluster = Cluster {
            dir: tempfile::Builder::new()
                .prefix("sluice-scale-")
                .disable_cleanup(std::env::var_os("SLUICE_KEEP_TEST_DIRS").is_some())
                .tempdir()
                .expect("temporary directory"),
            input: unique_topic("scale-in"),
            counts: unique_topic("scale-counts"),
            dead_letters: unique_topic("scale-dlq"),
            group: unique_topic("scale-group"),
            produced: 0,
            runs: 0,
        };
        create_topic(&cluster.input, PARTITIONS);
        create_topic(&cluster.counts, 2);
        create_topic(&cluster.dead_letters, 1);
        let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/running-count");
        let bootstrap = sluice_tests::kafka::bootstrap();
        let text = format!(
            r#"[pipeline]
name = "{name}"
batch_size = 200

[checkpoints]
storage = "s3://{bucket}/checkpoints"
interval_ms = 500
mode = "exactly-once"
s3 = {{ endpoint = "{endpoint}", region = "us-east-1" }}

[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{input}"]
group_id = "{group}"
start = "earliest"
value_format = "json"
scale_out = true

[[operators]]
name = "running-count"
plugin = {plugin:?}

[sink.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{counts}"
transaction_timeout_ms = 15000

[side_outputs.counts]
blackhole = {{}}

[dead_letter.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{dead_letters}"
transaction_timeout_ms = 15000
"#,
            endpoint = s3::endpoint(),
            input = cluster.input,
            group = cluster.group,
            counts = cluster.counts,
            dead_letters = cluster.dead_letters,
        );
        std::fs::write(cluster.pipeline(), text).expect("write pipeline");
        cluster
    }

    fn pipeline(&self) -> PathBuf {
        self.dir.path().join("pipeline.toml")
    }

    fn log(&self, run: usize) -> PathBuf {
        self.dir.path().join(format!("run-{run:03}.log"))
    }

    /// Starts one more process of the pipeline; its log is `run-NNN.log`.
    fn spawn(&mut self) -> (usize, KillOnDrop) {
        let run = self.runs;
        self.runs += 1;
        let log = std::fs::File::create(self.log(run)).expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .arg("run")
            .arg(self.pipeline())
            .arg("--quiet")
            .env("SLUICE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log);
        for (name, value) in s3::environment() {
            command.env(name, value);
        }
        (run, KillOnDrop::new(command.spawn().expect("spawn sluice")))
    }

    fn read_log(&self, run: usize) -> String {
        std::fs::read_to_string(self.log(run)).unwrap_or_default()
    }

    /// Produces `records` more inputs: record `i` has key `k{i % KEYS}`
    /// and goes to partition `(i % KEYS) % PARTITIONS`; every 97th has no
    /// key (dead-lettered by the plugin).
    fn produce(&mut self, records: u64) {
        use rdkafka::ClientConfig;
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", sluice_tests::kafka::bootstrap())
            .set("enable.idempotence", "true")
            .set("linger.ms", "20")
            .create()
            .unwrap_or_else(|e| panic!("Kafka producer: {e}"));
        for i in self.produced..self.produced + records {
            let key = i % KEYS;
            let value = if i % 97 == 96 {
                format!(r#"{{"id":{i}}}"#)
            } else {
                format!(r#"{{"id":{i},"key":"k{key}"}}"#)
            };
            sluice_tests::kafka::send(
                &producer,
                BaseRecord::<(), _>::to(&self.input)
                    .payload(value.as_bytes())
                    .partition((key % PARTITIONS as u64) as i32),
            );
        }
        producer
            .flush(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("flushing input: {e}"));
        self.produced += records;
    }

    /// How many input offsets the group committed, or done when all.
    fn commit_progress(&self) -> Progress {
        let ends = kafka_end_offsets(&self.input, PARTITIONS);
        let committed = committed(&self.group, &self.input, PARTITIONS);
        if committed
            .iter()
            .zip(&ends)
            .all(|(committed, end)| *committed == Some(*end))
        {
            return Progress::Done;
        }
        Progress::At(committed.iter().flatten().sum())
    }

    /// Waits until the processes in `runs` committed every input offset
    /// (each task commits its offsets when its checkpoint completes).
    fn wait_until_drained(&self, runs: &mut [(usize, KillOnDrop)]) {
        wait_while_progressing(
            "every input record to be committed",
            WAIT,
            Duration::from_millis(250),
            || {
                for (run, process) in runs.iter_mut() {
                    if let Ok(Some(status)) = process.child().try_wait() {
                        panic!("run {run} ended ({status}): {}", self.read_log(*run));
                    }
                }
                self.commit_progress()
            },
        )
        .unwrap_or_else(|stalled| panic!("{stalled}: {}", self.all_logs()));
    }

    fn all_logs(&self) -> String {
        (0..self.runs)
            .map(|run| format!("--- run {run}\n{}", self.read_log(run)))
            .collect()
    }

    /// Waits until run `run` has `tasks` tasks running.
    fn wait_for_tasks(&self, run: usize, tasks: usize) {
        wait_until(&format!("{tasks} tasks in run {run}"), WAIT, || {
            let log = self.read_log(run);
            log.matches("task running").count() - log.matches("task stopped").count() >= tasks
        });
    }
}

#[test]
fn processes_share_a_pipelines_tasks_and_hand_them_over_exactly_once() {
    let mut cluster = Cluster::new();
    cluster.produce(20_000);
    let mut a = cluster.spawn();
    cluster.wait_for_tasks(a.0, PARTITIONS as usize);
    wait_until("the first run's progress", WAIT, || {
        !matches!(cluster.commit_progress(), Progress::At(0))
    });

    // A second process: the group splits the tasks; A stops the ones that
    // move (final checkpoints), B restores them.
    let b = cluster.spawn();
    cluster.wait_for_tasks(b.0, 1);
    cluster.produce(20_000);
    wait_until("a task moved to B with its state", WAIT, || {
        cluster.read_log(b.0).contains("restored=Some(")
    });
    // A dies: its tasks move to B after the group's session timeout and
    // restore their last committed checkpoints.
    let a_process = a.1.child();
    a_process.kill().expect("SIGKILL");
    a_process.wait().expect("wait");
    cluster.wait_for_tasks(b.0, PARTITIONS as usize);
    cluster.produce(20_000);

    // A third process joins, then B leaves cleanly: C takes everything.
    let c = cluster.spawn();
    cluster.wait_for_tasks(c.0, 1);
    sigterm_and_wait(b.1.into_inner());
    cluster.wait_for_tasks(c.0, PARTITIONS as usize);
    let mut runs = [c];
    cluster.wait_until_drained(&mut runs);
    let [c] = runs;
    sigterm_and_wait(c.1.into_inner());

    // Every id once; per key the counts 1..n.
    let (counts, clean) = read_to_end(&cluster.counts, 2, true);
    assert!(clean, "a transaction is left open on {}", cluster.counts);
    let (dead_letters, clean) = read_to_end(&cluster.dead_letters, 1, true);
    assert!(
        clean,
        "a transaction is left open on {}",
        cluster.dead_letters
    );
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    let mut counts_by_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for record in &counts {
        let value: serde_json::Value = serde_json::from_slice(&record.value).expect("JSON");
        *seen.entry(value["id"].as_u64().expect("id")).or_default() += 1;
        counts_by_key
            .entry(value["key"].as_str().expect("key").to_string())
            .or_default()
            .push(value["count"].as_u64().expect("count"));
    }
    for record in &dead_letters {
        let value: serde_json::Value = serde_json::from_slice(&record.value).expect("JSON");
        *seen.entry(value["id"].as_u64().expect("id")).or_default() += 1;
    }
    let duplicated: Vec<u64> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| *id)
        .collect();
    assert!(
        duplicated.is_empty(),
        "{} ids seen more than once, e.g. {:?}, the last {:?}",
        duplicated.len(),
        &duplicated[..duplicated.len().min(5)],
        duplicated.last()
    );
    let missing: Vec<u64> = (0..cluster.produced)
        .filter(|id| !seen.contains_key(id))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "ids never seen: {missing:?}");
    for (key, mut values) in counts_by_key {
        values.sort_unstable();
        let expected: Vec<u64> = (1..=values.len() as u64).collect();
        assert_eq!(values, expected, "running counts of key {key}");
    }
    // Tasks moved with their state: the later processes restored
    // checkpoints the earlier ones wrote.
    let restored = |run: usize| cluster.read_log(run).matches("restored=Some(").count();
    assert!(restored(1) > 0, "{}", cluster.all_logs());
    assert!(restored(2) > 0, "{}", cluster.all_logs());
}
