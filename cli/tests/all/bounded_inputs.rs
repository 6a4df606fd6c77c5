//! Bounded inputs end (issue 45), proven on `sluice run` processes for
//! each bounded source: a generator with `count`, a file, and Kafka with
//! `bounded = true` (a topic whose partitions end in transaction markers,
//! one of them empty). For each: a run to the end; the finished pipeline
//! run again (it ends in seconds, reads nothing, changes nothing); a run
//! killed right after its last record, then run again; and a run killed
//! after its final checkpoint, then run again (restored at the end of its
//! input, and warm: it takes the killed run's state files); for Kafka also the same consumer group without the
//! checkpoints (it starts at the group's committed offsets, the end).
//! Every run has a timeout that fails the test instead of hanging
//! CI, and every output equals the uninterrupted run's, whose window
//! counts add up to the records read. Last, an end whose windows take
//! longer to fire than the checkpoint timeout still commits its final
//! checkpoint.

use sluice_tests::{KillOnDrop, comparable_record_line, wait_until_else};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a run that reads the whole input may take (a debug build on a
/// loaded CI machine).
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest a run with nothing left to read may take: start-up, restore,
/// the final checkpoint.
const FINISHED_TIMEOUT: Duration = Duration::from_secs(30);

/// Records per input; keys per input.
const RECORDS: u64 = 6_000;
const KEYS: u64 = 40;

/// 2023-11-14T22:13:20Z: event times of record `i` are 10 ms apart.
const T0: u64 = 1_700_000_000_000;

/// The value of input record `i`.
fn record(i: u64) -> String {
    format!(r#"{{"id":{i},"key":"k{}","ts":{}}}"#, i % KEYS, T0 + i * 10)
}

/// One of the bounded sources, as its pipeline section.
#[derive(Clone)]
enum Input {
    Generator,
    File,
    Kafka { topic: String },
}

impl Input {
    /// The `[source.*]` section; `label` makes a Kafka consumer group of
    /// the job's own (committed offsets are per group).
    fn section(&self, label: &str) -> String {
        match self {
            Input::Generator => format!(
                "[source.generator]\nprofile = \"bronze\"\ncount = {RECORDS}\nseed = 7\n\
                 invalid_ratio = 0.0\nduplicate_ratio = 0.0\n"
            ),
            Input::File => {
                "[source.file]\npath = \"../input.jsonl\"\ntimestamp_field = \"ts\"\n".into()
            }
            Input::Kafka { topic } => format!(
                "[source.kafka]\nbootstrap_servers = \"{}\"\ntopics = [\"{topic}\"]\n\
                 group_id = \"{topic}-{label}\"\nbounded = true\ntimestamp_field = \"ts\"\n",
                sluice_tests::kafka::bootstrap()
            ),
        }
    }

    /// The field the window is keyed by.
    fn key_field(&self) -> &'static str {
        match self {
            Input::Generator => "user_id",
            Input::File | Input::Kafka { .. } => "key",
        }
    }
}

/// A pipeline of its own directory under a shared parent: the input,
/// keyed one-second windows counting records, exactly-once file output,
/// checkpoints every 100 ms in a local directory.
struct Job {
    dir: PathBuf,
    runs: usize,
}

impl Job {
    fn new(parent: &Path, input: &Input, label: &str) -> Job {
        let text = format!(
            r#"[pipeline]
name = "bounded"
state_dir = "state"
batch_size = 128
max_out_of_orderness_ms = 100

[checkpoints]
storage = "checkpoints"
interval_ms = 100

{source}
[[operators]]
name = "per-key"
window = {{ tumbling_ms = 1000 }}
key_field = "{key}"
aggregate = {{ function = "count" }}

[sink.file]
path = "out/windows.jsonl"
"#,
            source = input.section(label),
            key = input.key_field(),
        );
        Job::with_pipeline(parent, label, &text)
    }

    /// A job running the pipeline file text `pipeline`, in `parent/label`.
    fn with_pipeline(parent: &Path, label: &str, pipeline: &str) -> Job {
        let dir = parent.join(label);
        std::fs::create_dir_all(&dir).expect("job directory");
        std::fs::write(dir.join("pipeline.toml"), pipeline).expect("write pipeline");
        Job { dir, runs: 0 }
    }

    /// Runs the pipeline with `env`; fails the test when it outlives
    /// `timeout`. Returns whether it exited successfully, and its stderr.
    fn run(&mut self, env: &[(&str, &str)], timeout: Duration) -> (bool, String) {
        self.runs += 1;
        let log = self.dir.join(format!("run-{}.log", self.runs));
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .current_dir(&self.dir)
            .args(["run", "pipeline.toml", "--quiet"])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("create log"))
            .spawn()
            .expect("spawn sluice");
        let mut child = KillOnDrop::new(child);
        let started = Instant::now();
        let mut status = None;
        wait_until_else(
            "the run to end",
            timeout,
            || {
                status = child.child().try_wait().ok().flatten();
                status.is_some()
            },
            || std::fs::read_to_string(&log).unwrap_or_default(),
        );
        let stderr = std::fs::read_to_string(&log).unwrap_or_default();
        eprintln!(
            "{}: run {} took {:.2} s",
            self.dir.display(),
            self.runs,
            started.elapsed().as_secs_f64()
        );
        (status.is_some_and(|s| s.success()), stderr)
    }

    /// Runs to the end; returns the records it read (from its summary).
    fn run_to_end(&mut self, timeout: Duration) -> u64 {
        let (success, stderr) = self.run(&[], timeout);
        assert!(success, "the run failed:\n{stderr}");
        records_in(&stderr)
    }

    /// Runs until the failpoint `at` kills it.
    fn kill_at(&mut self, at: &str) {
        let (success, stderr) =
            self.run(&[(sluice_host::checkpoint::FAILPOINT_ENV, at)], RUN_TIMEOUT);
        assert!(
            !success && stderr.contains(&format!("failpoint {at}")),
            "the failpoint {at} did not kill the run:\n{stderr}"
        );
    }

    /// The window results written, as a multiset of comparable lines.
    fn outputs(&self) -> BTreeMap<String, usize> {
        let text = std::fs::read_to_string(self.dir.join("out/windows.jsonl")).unwrap_or_default();
        let mut lines = BTreeMap::new();
        for line in text.lines() {
            *lines.entry(comparable_record_line(line)).or_insert(0) += 1;
        }
        lines
    }
}

/// The records the window results (`Job::outputs`) count, all together.
fn records_counted(outputs: &BTreeMap<String, usize>) -> u64 {
    outputs
        .iter()
        .map(|(line, times)| {
            let value: serde_json::Value = serde_json::from_str(line).expect("JSON output");
            value["result"].as_u64().expect("a count") * *times as u64
        })
        .sum()
}

/// The record count a run's summary reports.
fn records_in(stderr: &str) -> u64 {
    stderr
        .lines()
        .filter(|line| line.starts_with("completed in "))
        .find_map(|line| {
            let (_, rest) = line.split_once(": ")?;
            let (count, _) = rest.split_once(" records in")?;
            count.parse().ok()
        })
        .unwrap_or_else(|| panic!("no record count in the summary:\n{stderr}"))
}

/// The number `name=N` in the run's `restored` log line.
fn log_field(stderr: &str, name: &str) -> u64 {
    stderr
        .lines()
        .filter(|line| line.contains(" restored "))
        .find_map(|line| {
            let start = line.find(&format!(" {name}="))? + name.len() + 2;
            line[start..].split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no {name} in the restore's log line:\n{stderr}"))
}

/// The four runs of the module docs for one bounded source.
fn bounded_input_ends(input: Input) {
    let parent = tempfile::tempdir().expect("temporary directory");
    if let Input::File = input {
        let text: String = (0..RECORDS).map(|i| record(i) + "\n").collect();
        std::fs::write(parent.path().join("input.jsonl"), text).expect("write input");
    }

    let mut reference = Job::new(parent.path(), &input, "reference");
    assert_eq!(reference.run_to_end(RUN_TIMEOUT), RECORDS);
    let expected = reference.outputs();
    assert_eq!(
        records_counted(&expected),
        RECORDS,
        "the windows count every record once"
    );

    // The finished pipeline run again: restored at the end of its input.
    assert_eq!(reference.run_to_end(FINISHED_TIMEOUT), 0);
    assert_eq!(
        reference.outputs(),
        expected,
        "a second run changed the output"
    );

    // Kafka: the same consumer group without the checkpoints starts at the
    // offsets the group committed, the end.
    if let Input::Kafka { .. } = input {
        let elsewhere = tempfile::tempdir().expect("temporary directory");
        let mut fresh = Job::new(elsewhere.path(), &input, "reference");
        assert_eq!(fresh.run_to_end(FINISHED_TIMEOUT), 0);
    }

    // Killed right after its last record: the restart replays what
    // followed the last checkpoint, and ends.
    let mut at_end = Job::new(parent.path(), &input, "at-end-of-input");
    at_end.kill_at("at-end-of-input");
    at_end.run_to_end(RUN_TIMEOUT);
    assert_eq!(at_end.outputs(), expected, "killed at the end of the input");
    assert_eq!(at_end.run_to_end(FINISHED_TIMEOUT), 0);

    // Killed after the final checkpoint: the restart has nothing to read.
    let mut after_final = Job::new(parent.path(), &input, "after-final-checkpoint");
    after_final.kill_at("after-final-checkpoint");
    let (success, stderr) = after_final.run(&[("SLUICE_LOG", "info")], FINISHED_TIMEOUT);
    assert!(success, "the run failed:\n{stderr}");
    assert_eq!(records_in(&stderr), 0);
    // A warm restore: the killed run's SST files are taken, not downloaded.
    let reused = log_field(&stderr, "reused_bytes");
    assert!(
        reused > 0
            && reused
                == log_field(&stderr, "restored_bytes") - log_field(&stderr, "downloaded_bytes"),
        "the restore did not take the dead run's state files:\n{stderr}"
    );
    assert_eq!(
        after_final.outputs(),
        expected,
        "killed after the final checkpoint"
    );
}

#[test]
fn a_generator_with_a_count_ends_after_a_restore_at_its_end() {
    bounded_input_ends(Input::Generator);
}

#[test]
fn a_file_ends_after_a_restore_at_its_end() {
    bounded_input_ends(Input::File);
}

/// Three partitions: one written in transactions (it ends in a commit
/// marker, an offset no record is read at), one without (it ends in a
/// record), one empty.
#[test]
fn a_bounded_kafka_read_ends_after_a_restore_at_its_end() {
    use rdkafka::ClientConfig;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let topic = sluice_tests::kafka::unique_topic("bounded");
    sluice_tests::kafka::create_topic(&topic, 3);
    let producer = |transactional: bool| {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", sluice_tests::kafka::bootstrap())
            .set("enable.idempotence", "true");
        if transactional {
            config.set("transactional.id", format!("{topic}-producer"));
        }
        let producer: ThreadedProducer<DefaultProducerContext> =
            config.create().expect("Kafka producer");
        producer
    };
    let send = |producer: &ThreadedProducer<DefaultProducerContext>, i: u64| {
        let value = record(i);
        producer
            .send(
                BaseRecord::<(), _>::to(&topic)
                    .payload(value.as_bytes())
                    .partition((i % 2) as i32),
            )
            .map_err(|(e, _)| e)
            .expect("send");
    };
    let timeout = Duration::from_secs(30);
    let transactional = producer(true);
    transactional
        .init_transactions(timeout)
        .expect("init transactions");
    for half in [0..RECORDS / 2, RECORDS / 2..RECORDS] {
        transactional.begin_transaction().expect("begin");
        for i in half.filter(|i| i % 2 == 0) {
            send(&transactional, i);
        }
        transactional.commit_transaction(timeout).expect("commit");
    }
    let plain = producer(false);
    for i in (0..RECORDS).filter(|i| i % 2 == 1) {
        send(&plain, i);
    }
    plain.flush(timeout).expect("flush");
    bounded_input_ends(Input::Kafka { topic });
}

/// The end of a bounded input fires every window before the final barrier.
/// A firing that outlasts the checkpoint timeout (300,000 windows against
/// 1 s here) must not cost the run its final checkpoint: the output is
/// committed whole, and a run again reads nothing.
#[test]
fn a_final_firing_longer_than_the_checkpoint_timeout_still_commits_the_end() {
    const WINDOWS: u64 = 300_000;
    let parent = tempfile::tempdir().expect("temporary directory");
    let input: String = (0..WINDOWS)
        .map(|i| format!("{{\"id\":{i},\"key\":\"k{i}\",\"ts\":{}}}\n", T0 + i))
        .collect();
    std::fs::write(parent.path().join("input.jsonl"), input).expect("write input");
    let pipeline = r#"[pipeline]
name = "long-final-firing"
state_dir = "state"
batch_size = 1024

[checkpoints]
storage = "checkpoints"
interval_ms = 600000
timeout_ms = 1000

[source.file]
path = "../input.jsonl"
timestamp_field = "ts"

[[operators]]
name = "per-key"
window = { tumbling_ms = 3600000 }
key_field = "key"
aggregate = { function = "count" }

[sink.file]
path = "out/windows.jsonl"
"#;
    let mut job = Job::with_pipeline(parent.path(), "job", pipeline);
    let (success, stderr) = job.run(&[], RUN_TIMEOUT);
    assert!(success, "the run failed:\n{stderr}");
    assert!(
        !stderr.contains("not confirmed"),
        "the final checkpoint was given up:\n{stderr}"
    );
    let outputs = job.outputs();
    assert_eq!(outputs.len() as u64, WINDOWS, "one result per key's window");
    assert_eq!(
        records_counted(&outputs),
        WINDOWS,
        "the windows count every record once"
    );
    assert_eq!(job.run_to_end(FINISHED_TIMEOUT), 0, "the end was committed");
}
