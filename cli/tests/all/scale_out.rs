//! Scale-out (issue 39, ADR 0020): the same pipeline file run by several
//! `sluice run` processes shares the work as tasks, one per input
//! partition, owned through the consumer group (KIP-848). Tasks move when
//! processes come, go cleanly (SIGTERM) or die (SIGKILL); each keeps its
//! own state and checkpoints on S3, and the output stays exactly-once.
//!
//! Two shapes, over 8 input partitions:
//!
//! * keys that follow the partitions (as a producer partitioning by key
//!   writes them) → a running count per key in host state (plugin
//!   `running-count`) → exactly-once Kafka: one stage, no repartition.
//! * keys spread over every partition (round-robin) → a stateless plugin →
//!   key-by the key field → the running count and a tumbling event-time
//!   window sum: two stages and a repartition topic, watermarks crossing
//!   it as control records.
//!
//! A `read_committed` reader must see every id once, per key the counts
//! 1..n (state moved with its task), and the window sums of a model
//! computed from the input, none of them late.

use crate::serve::free_port;
use sluice_tests::kafka::{Tail, create_topic, unique_topic};
use sluice_tests::outputs::{Verdict, assert_windows_match, commit_progress, window_model};
use sluice_tests::{
    KillOnDrop, Progress, s3, sigterm_and_wait, wait_until, wait_while_progressing,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(180);
const PARTITIONS: i32 = 8;
const KEYS: u64 = 400;
const T0: i64 = 1_700_000_000_000;

/// How the input is keyed and what the pipeline does with it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Keys follow the partitions; one stage.
    KeyedByPartition,
    /// Keys over every partition; a key-by into a second stage with a
    /// window.
    KeyBy,
    /// As [`Shape::KeyedByPartition`], the counts into an Iceberg table of
    /// the dev services' REST catalog, in this namespace: every task
    /// commits its own snapshots to the one table.
    Iceberg(&'static str),
}

/// The input record `i` of `shape`: every 97th has no key (dead-lettered
/// by the plugin); event times 2 ms apart with up to 200 ms of disorder.
fn input_value(i: u64) -> String {
    let ts = T0 + i as i64 * 2 - ((i * 7919) % 200) as i64;
    let amount = i % 7 + 1;
    if i % 97 == 96 {
        format!(r#"{{"id":{i},"amount":{amount},"ts":{ts}}}"#)
    } else {
        format!(
            r#"{{"id":{i},"key":"k{}","amount":{amount},"ts":{ts}}}"#,
            i % KEYS
        )
    }
}

/// The partition of input record `i`.
fn input_partition(shape: Shape, i: u64) -> i32 {
    match shape {
        Shape::KeyedByPartition | Shape::Iceberg(_) => ((i % KEYS) % PARTITIONS as u64) as i32,
        Shape::KeyBy => (i % PARTITIONS as u64) as i32,
    }
}

/// Topics, bucket and pipeline file of one run.
struct Cluster {
    shape: Shape,
    /// The pipeline's name.
    name: String,
    dir: tempfile::TempDir,
    input: String,
    counts: String,
    windows: String,
    dead_letters: String,
    group: String,
    /// Records produced so far.
    produced: u64,
    runs: usize,
}

impl Cluster {
    fn new(shape: Shape) -> Cluster {
        Self::with_mode(shape, "exactly-once")
    }

    /// A cluster whose pipeline checkpoints in `mode`.
    fn with_mode(shape: Shape, mode: &str) -> Cluster {
        let bucket = unique_topic("scale-bucket").to_lowercase();
        s3::create_bucket(&bucket);
        let name = unique_topic("scale-out");
        let cluster = Cluster {
            shape,
            name: name.clone(),
            windows: unique_topic("scale-windows"),
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
        create_topic(&cluster.windows, 2);
        create_topic(&cluster.dead_letters, 1);
        let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/running-count");
        let bootstrap = sluice_tests::kafka::bootstrap();
        let identity = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/identity");
        let operators = match shape {
            Shape::KeyedByPartition => format!(
                r#"[[operators]]
name = "running-count"
plugin = {plugin:?}

[sink.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{counts}"
# An epoch's transaction stays open while the checkpoint before it
# uploads: under CI load uploads took up to 9 s, and 15 s was outlived.
# And a killed process's open transaction holds back every read of the
# shared progress topic until it times out: within a restore's 60 s wait.
transaction_timeout_ms = 30000

[side_outputs.counts]
blackhole = {{}}
"#,
                counts = cluster.counts,
            ),
            Shape::Iceberg(namespace) => format!(
                r#"[[operators]]
name = "running-count"
plugin = {plugin:?}

[sink.iceberg]
rest = {{ uri = "{uri}" }}
namespace = "{namespace}"
table = "counts"
columns = [
  {{ name = "id", type = "long", required = true }},
  {{ name = "key", type = "string", required = true }},
  {{ name = "count", type = "long", required = true }},
]

[side_outputs.counts]
blackhole = {{}}
"#,
                uri = sluice_tests::rest_catalog_uri(),
            ),
            Shape::KeyBy => format!(
                r#"[[operators]]
name = "stateless"
plugin = {identity:?}

[[operators]]
name = "running-count"
plugin = {plugin:?}
key_by = "key"

[[operators]]
name = "sum-per-key"
window = {{ tumbling_ms = 1000 }}
key_field = "key"
aggregate = {{ function = "sum", field = "amount" }}

[sink.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{windows}"
transaction_timeout_ms = 30000

[side_outputs.counts.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{counts}"
transaction_timeout_ms = 30000
"#,
                counts = cluster.counts,
                windows = cluster.windows,
            ),
        };
        let text = format!(
            r#"[pipeline]
name = "{name}"
batch_size = 200
max_out_of_orderness_ms = 500

[checkpoints]
storage = "s3://{bucket}/checkpoints"
interval_ms = 500
mode = "{mode}"
s3 = {{ endpoint = "{endpoint}", region = "us-east-1", multipart_threshold_bytes = 1 }}

[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{input}"]
group_id = "{group}"
start = "earliest"
value_format = "json"
timestamp_field = "ts"
scale_out = true

{operators}
[dead_letter.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{dead_letters}"
transaction_timeout_ms = 30000
"#,
            endpoint = s3::endpoint(),
            input = cluster.input,
            group = cluster.group,
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
        self.spawn_with(&[])
    }

    /// [`Cluster::spawn`] with extra environment variables.
    fn spawn_with(&mut self, env: &[(&str, &str)]) -> (usize, KillOnDrop) {
        self.spawn_with_args(env, &[])
    }

    /// [`Cluster::spawn`] with extra environment variables and arguments.
    fn spawn_with_args(&mut self, env: &[(&str, &str)], args: &[&str]) -> (usize, KillOnDrop) {
        let run = self.runs;
        self.runs += 1;
        let log = std::fs::File::create(self.log(run)).expect("log file");
        let mut command = Command::new(sluice_binary());
        command
            .arg("run")
            .arg(self.pipeline())
            .arg("--quiet")
            .args(args)
            .env(
                "SLUICE_LOG",
                std::env::var("SLUICE_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::null())
            .stderr(log);
        for (name, value) in s3::environment().into_iter().chain(env.iter().copied()) {
            command.env(name, value);
        }
        (run, KillOnDrop::new(command.spawn().expect("spawn sluice")))
    }

    fn read_log(&self, run: usize) -> String {
        std::fs::read_to_string(self.log(run)).unwrap_or_default()
    }

    /// A cluster on the same topics, to produce from another thread.
    fn clone_topics(&self) -> Cluster {
        Cluster {
            shape: self.shape,
            name: self.name.clone(),
            dir: tempfile::tempdir().expect("temporary directory"),
            input: self.input.clone(),
            counts: self.counts.clone(),
            windows: self.windows.clone(),
            dead_letters: self.dead_letters.clone(),
            group: self.group.clone(),
            produced: self.produced,
            runs: 0,
        }
    }

    /// One record per partition (key `end`) far ahead in event time, so
    /// that every window of the records before it fires.
    fn produce_sentinels(&mut self) {
        use rdkafka::ClientConfig;
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", sluice_tests::kafka::bootstrap())
            .create()
            .unwrap_or_else(|e| panic!("Kafka producer: {e}"));
        let ts = T0 + self.produced as i64 * 2 + 100_000;
        for partition in 0..PARTITIONS {
            let id = self.produced + partition as u64;
            let value = format!(r#"{{"id":{id},"key":"end","amount":0,"ts":{ts}}}"#);
            sluice_tests::kafka::send(
                &producer,
                BaseRecord::<(), _>::to(&self.input)
                    .payload(value.as_bytes())
                    .partition(partition),
            );
        }
        producer
            .flush(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("flushing sentinels: {e}"));
        self.produced += PARTITIONS as u64;
    }

    /// Produces `records` more inputs ([`input_value`], to
    /// [`input_partition`]).
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
            let value = input_value(i);
            sluice_tests::kafka::send(
                &producer,
                BaseRecord::<(), _>::to(&self.input)
                    .payload(value.as_bytes())
                    .partition(input_partition(self.shape, i)),
            );
        }
        producer
            .flush(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("flushing input: {e}"));
        self.produced += records;
    }

    /// How many input offsets the group committed, or done when all.
    fn commit_progress(&self) -> Progress {
        commit_progress(&self.group, &self.input, PARTITIONS)
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

    /// Waits until run `run` has `tasks` tasks running; fails at once,
    /// with its log, when one of its tasks failed.
    fn wait_for_tasks(&self, run: usize, tasks: usize) {
        sluice_tests::wait_until_else(
            &format!("{tasks} tasks in run {run}"),
            WAIT,
            || {
                let log = self.read_log(run);
                assert!(!log.contains("outcome=Err"), "a task failed: {log}");
                running_tasks(self, run) >= tasks
            },
            || self.all_logs(),
        );
    }
}

/// What a `read_committed` reader of the counts and dead letters sees
/// (only records without a key are expected as dead letters: none late).
fn verdict(cluster: &Cluster) -> Verdict {
    Verdict::read(
        (&cluster.counts, 2),
        (&cluster.dead_letters, 1),
        cluster.produced,
        |id| id % 97 == 96,
    )
}

/// The exactly-once checks: every input id once, counts 1..n per key.
fn assert_exactly_once(cluster: &Cluster) {
    verdict(cluster).assert_exactly_once();
}

#[test]
fn processes_share_a_pipelines_tasks_and_hand_them_over_exactly_once() {
    let mut cluster = Cluster::new(Shape::KeyedByPartition);
    cluster.produce(20_000);
    let (health, http) = (free_port(), free_port());
    let mut a = cluster.spawn_with_args(
        &[],
        &[
            "--health",
            &format!("127.0.0.1:{health}"),
            "--http",
            &format!("127.0.0.1:{http}"),
        ],
    );
    let get = |port: u16, path: &str| {
        reqwest::blocking::get(format!("http://127.0.0.1:{port}{path}"))
            .ok()
            .map(|response| {
                (
                    response.status().as_u16(),
                    response.text().unwrap_or_default(),
                )
            })
    };
    // Ready once every task it owns is restored and running.
    wait_until("the first run to be ready", WAIT, || {
        matches!(get(health, "/readyz"), Some((200, _)))
    });
    assert_eq!(running_tasks(&cluster, a.0), PARTITIONS as usize);
    assert!(matches!(get(health, "/healthz"), Some((200, _))));
    wait_until("the first run's progress", WAIT, || {
        !matches!(cluster.commit_progress(), Progress::At(0))
    });
    // Its status lists its tasks, each with its counters.
    let (status, body) = get(http, "/api/v1/status").expect("status");
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let names: Vec<&str> = listed["pipelines"]
        .as_array()
        .expect("pipelines")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names.len(), PARTITIONS as usize, "{body}");
    assert!(names.iter().all(|n| n.contains("/tasks/0-")), "{body}");

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

    assert_exactly_once(&cluster);
    // The checkpoints list shows each task with its latest checkpoint.
    let mut command = Command::new(sluice_binary());
    command
        .args(["checkpoints", "list"])
        .arg(cluster.pipeline())
        .envs(s3::environment());
    let listed = command.output().expect("sluice checkpoints list");
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    for index in 0..PARTITIONS {
        assert!(
            text.lines()
                .any(|line| line.trim_start().starts_with(&format!("0-{index} "))),
            "task 0-{index} listed: {text}"
        );
    }
    // Tasks moved with their state: the later processes restored
    // checkpoints the earlier ones wrote.
    let restored = |run: usize| cluster.read_log(run).matches("restored=Some(").count();
    assert!(restored(1) > 0, "{}", cluster.all_logs());
    assert!(restored(2) > 0, "{}", cluster.all_logs());
}

/// The window sums a model computes from inputs `0..records`.
fn model_of(records: u64) -> BTreeMap<(String, i64), f64> {
    window_model((0..records).map(input_value))
}

/// Every window result once, none an update (late), equal to the model.
fn assert_windows_match_the_model(cluster: &Cluster, records: u64) {
    assert_windows_match(&cluster.windows, 2, &model_of(records));
}

/// Produces input records in chunks while `producing` holds (and at
/// least `at_least` of them), from another thread: the processes change
/// while input arrives.
/// Clears its flag when dropped: on the way out, also of a panic.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

fn produce_while(
    mut sender: Cluster,
    producing: &std::sync::atomic::AtomicBool,
    at_least: u64,
) -> u64 {
    let mut produced = 0;
    while producing.load(std::sync::atomic::Ordering::Relaxed) || produced < at_least {
        sender.produce(5_000);
        produced += 5_000;
        std::thread::sleep(Duration::from_millis(100));
    }
    produced
}

/// Produces one sentinel per partition, then waits until the running
/// processes `runs` wrote every record (counts or dead letters) and every
/// window of the model, as long as that output grows; a process that ends
/// meanwhile fails the test with the logs.
fn wait_for_every_output(cluster: &mut Cluster, runs: &mut [(usize, KillOnDrop)]) {
    let records = cluster.produced;
    // One record per partition far ahead in event time: every window of
    // the input fires.
    cluster.produce_sentinels();
    let expected_ids = cluster.produced;
    let windows_expected = match cluster.shape {
        Shape::KeyBy => model_of(records).len(),
        Shape::KeyedByPartition | Shape::Iceberg(_) => 0,
    };
    let mut counts = Tail::new(&cluster.counts, 2);
    let mut dead_letters = Tail::new(&cluster.dead_letters, 1);
    let mut windows = Tail::new(&cluster.windows, 2);
    // Distinct ids out so far (at-least-once writes some twice), and how
    // many records of each tail have been looked at.
    let mut ids = std::collections::HashSet::new();
    let mut looked_at = [0, 0];
    wait_while_progressing(
        "every record and window out",
        WAIT,
        Duration::from_millis(250),
        || {
            for (run, process) in runs.iter_mut() {
                if let Ok(Some(status)) = process.child().try_wait() {
                    panic!("run {run} ended ({status}): {}", cluster.all_logs());
                }
            }
            for (tail, looked_at) in [&mut counts, &mut dead_letters]
                .into_iter()
                .zip(&mut looked_at)
            {
                tail.catch_up();
                for record in &tail.records[*looked_at..] {
                    let value: serde_json::Value =
                        serde_json::from_slice(&record.value).expect("JSON");
                    ids.insert(value["id"].as_u64().expect("id"));
                }
                *looked_at = tail.records.len();
            }
            let out = ids.len();
            let fired = windows.catch_up();
            if out as u64 >= expected_ids && fired >= windows_expected {
                Progress::Done
            } else {
                Progress::At((out + fired) as i64)
            }
        },
    )
    .unwrap_or_else(|stalled| panic!("{stalled}: {}", cluster.all_logs()));
}

/// A port free now on loopback.
/// Tasks running in run `run` now (its log's starts minus stops).
fn running_tasks(cluster: &Cluster, run: usize) -> usize {
    let log = cluster.read_log(run);
    log.matches("task running")
        .count()
        .saturating_sub(log.matches("task stopped").count())
}

/// Tasks of stage `stage` running in run `run` now.
fn running_tasks_of_stage(cluster: &Cluster, run: usize, stage: usize) -> usize {
    let log = cluster.read_log(run);
    log.matches(&format!("task running task={stage}-"))
        .count()
        .saturating_sub(log.matches(&format!("task stopped task={stage}-")).count())
}

/// Three processes; `kills` times a random one is SIGKILLed at a random
/// moment and started again (one of the restarts with a failpoint that
/// kills it in the middle of a task's snapshot upload); with `zombie`, one
/// is SIGSTOPped until its tasks moved, then resumed. Input arrives all
/// along. A victim is always a process that owns a task (one that owns
/// none has nothing to lose or repeat). With `until_repeated`, a victim
/// runs a counting task (stage 1) and is killed while counts are being
/// written, and the kills go on (up to four times `kills`) until the counts
/// show an id written twice: a kill right after a checkpoint may leave
/// nothing to write again.
fn chaos(cluster: &mut Cluster, kills: usize, zombie: bool, records: u64, until_repeated: bool) {
    let mut chaos = sluice_tests::Chaos::new();
    let total_tasks = 2 * PARTITIONS as usize;
    let mut slots: Vec<(usize, KillOnDrop)> = (0..3).map(|_| cluster.spawn()).collect();
    let producing = std::sync::atomic::AtomicBool::new(true);
    let produced = std::thread::scope(|scope| {
        let sender = cluster.clone_topics();
        let producing = &producing;
        let producer = scope.spawn(move || produce_while(sender, producing, records));
        // A failing check ends the producer too (else the scope, and the
        // test with its processes, would wait for it for ever).
        let _stop_producing = StopOnDrop(producing);
        let failpoint_at = kills / 3;
        // The run with the failpoint is left alone until it has killed
        // itself (at its first snapshot upload from checkpoint 3 on).
        let mut failpoint_slot: Option<usize> = None;
        let mut counts = until_repeated.then(|| Tail::new(&cluster.counts, 2));
        let (mut ids, mut looked_at, mut repeated) = (std::collections::HashSet::new(), 0, false);
        let mut kill = 0;
        while kill < kills || (until_repeated && !repeated) {
            assert!(
                kill < kills * 4,
                "{kill} kills and no id written twice: {}",
                cluster.all_logs()
            );
            std::thread::sleep(Duration::from_millis(chaos.below(1_500)));
            if let Some(slot) = failpoint_slot
                && let Ok(Some(_)) = slots[slot].1.child().try_wait()
            {
                assert!(
                    cluster.read_log(slots[slot].0).contains("failpoint"),
                    "{}",
                    cluster.all_logs()
                );
                slots[slot] = cluster.spawn();
                failpoint_slot = None;
            }
            let mut candidates = Vec::new();
            wait_until("a process that owns a task", WAIT, || {
                candidates = (0..3)
                    .filter(|s| Some(*s) != failpoint_slot)
                    .filter(|s| match until_repeated {
                        true => running_tasks_of_stage(cluster, slots[*s].0, 1) > 0,
                        false => running_tasks(cluster, slots[*s].0) > 0,
                    })
                    .collect();
                !candidates.is_empty()
            });
            if let Some(tail) = counts.as_mut() {
                let before = tail.records.len();
                wait_until("counts being written", WAIT, || tail.catch_up() > before);
            }
            let slot = candidates[chaos.below(candidates.len() as u64) as usize];
            let (run, process) = &mut slots[slot];
            if let Some(status) = process.child().try_wait().expect("try_wait") {
                panic!("run {run} ended ({status}): {}", cluster.all_logs());
            }
            process.child().kill().expect("SIGKILL");
            process.child().wait().expect("wait");
            slots[slot] = if kill == failpoint_at {
                failpoint_slot = Some(slot);
                cluster.spawn_with(&[(sluice_host::checkpoint::FAILPOINT_ENV, "during-upload@3")])
            } else {
                cluster.spawn()
            };
            if zombie && kill == kills / 2 {
                // A zombie: stopped until the others own every task, then
                // woken. Whatever it still tries to commit is fenced.
                let Some(zombie_slot) = (0..3).find(|s| Some(*s) != failpoint_slot && *s != slot)
                else {
                    unreachable!("three slots");
                };
                // It must own a task (a just restarted one may not yet), or
                // it would have nothing to be fenced from.
                let candidate = slots[zombie_slot].0;
                wait_until("the zombie-to-be to own a task", WAIT, || {
                    if let Ok(Some(status)) = slots[zombie_slot].1.child().try_wait() {
                        panic!(
                            "run {candidate} ended ({status}): {}",
                            cluster.read_log(candidate)
                        );
                    }
                    running_tasks(cluster, candidate) > 0
                });
                let (run, process) = &mut slots[zombie_slot];
                let pid = process.child().id().to_string();
                let signal = |name: &str| {
                    let status = Command::new("kill")
                        .args([name, &pid])
                        .status()
                        .expect("kill");
                    assert!(status.success(), "kill {name}");
                };
                signal("-STOP");
                let stopped = *run;
                wait_until("the zombie's tasks to move", WAIT, || {
                    slots
                        .iter()
                        .filter(|(other, _)| *other != stopped)
                        .map(|(other, _)| running_tasks(cluster, *other))
                        .sum::<usize>()
                        >= total_tasks
                });
                signal("-CONT");
                // Awake, it finds its tasks gone; what it still tries to
                // publish or commit is refused.
                wait_until("the zombie to be fenced", WAIT, || {
                    cluster.read_log(stopped).contains("fenced")
                });
            }
            if let Some(tail) = counts.as_mut() {
                tail.catch_up();
                for record in &tail.records[looked_at..] {
                    let value: serde_json::Value =
                        serde_json::from_slice(&record.value).expect("JSON");
                    repeated |= !ids.insert(value["id"].as_u64().expect("id"));
                }
                looked_at = tail.records.len();
            }
            kill += 1;
        }
        if let Some(slot) = failpoint_slot {
            wait_until("the failpoint to kill its run", WAIT, || {
                matches!(slots[slot].1.child().try_wait(), Ok(Some(_)))
            });
        }
        producing.store(false, std::sync::atomic::Ordering::Relaxed);
        producer.join().expect("producer")
    });
    cluster.produced = produced;
    // The failpoint run may have killed itself since: start it again.
    for slot in &mut slots {
        if let Ok(Some(_)) = slot.1.child().try_wait() {
            assert!(
                cluster.read_log(slot.0).contains("failpoint"),
                "run {} ended: {}",
                slot.0,
                cluster.all_logs()
            );
            *slot = cluster.spawn();
        }
    }
    wait_for_every_output(cluster, &mut slots);
    for (_, process) in slots {
        sigterm_and_wait(process.into_inner());
    }
}

#[test]
fn sigkills_a_zombie_and_a_failpoint_leave_a_key_by_pipeline_exactly_once() {
    let kills = sluice_tests::chaos_kills();
    let mut exact = Cluster::new(Shape::KeyBy);
    eprintln!("run logs in {}", exact.dir.path().display());
    chaos(&mut exact, kills, true, 100_000, false);
    assert_exactly_once(&exact);
    let records = exact.produced - PARTITIONS as u64;
    assert_windows_match_the_model(&exact, records);
    assert!(
        exact.all_logs().contains("failpoint during-upload"),
        "the failpoint fired"
    );

    // The same kills with at-least-once checkpoints: the check can tell.
    let mut loose = Cluster::with_mode(Shape::KeyBy, "at-least-once");
    chaos(&mut loose, 4, false, 60_000, true);
    let verdict = verdict(&loose);
    assert!(
        verdict.missing.is_empty(),
        "at-least-once loses nothing either"
    );
    assert!(
        !verdict.duplicated.is_empty(),
        "at-least-once must have written records again after kills"
    );
}

#[test]
fn a_key_by_pipeline_rescales_one_two_three_two_one_exactly_once() {
    let records: u64 = std::env::var("SLUICE_SCALE_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300_000);
    let mut cluster = Cluster::new(Shape::KeyBy);
    eprintln!("run logs in {}", cluster.dir.path().display());
    let stages = 2;
    let first = cluster.spawn();
    cluster.wait_for_tasks(first.0, stages * PARTITIONS as usize);
    let producing = std::sync::atomic::AtomicBool::new(true);
    let produced = std::thread::scope(|scope| {
        let sender = cluster.clone_topics();
        let producing = &producing;
        let producer = scope.spawn(move || produce_while(sender, producing, records));
        // A failing check ends the producer too (else the scope, and the
        // test with its processes, would wait for it for ever).
        let _stop_producing = StopOnDrop(producing);
        // 1 -> 2 -> 3 processes, then the first two leave cleanly.
        let second = cluster.spawn();
        cluster.wait_for_tasks(second.0, 1);
        let third = cluster.spawn();
        cluster.wait_for_tasks(third.0, 1);
        sigterm_and_wait(first.1.into_inner());
        cluster.wait_for_tasks(third.0, 2);
        sigterm_and_wait(second.1.into_inner());
        cluster.wait_for_tasks(third.0, stages * PARTITIONS as usize);
        producing.store(false, std::sync::atomic::Ordering::Relaxed);
        let produced = producer.join().expect("producer");
        (third, produced)
    });
    let (last, produced) = produced;
    cluster.produced = produced;
    let mut runs = vec![last];
    wait_for_every_output(&mut cluster, &mut runs);
    let last = runs.remove(0);
    sigterm_and_wait(last.1.into_inner());
    assert_exactly_once(&cluster);
    assert_windows_match_the_model(&cluster, produced);
    // What the second stage committed is deleted from the repartition
    // topic (the last commits may not be yet: the process is gone).
    let repartition = format!("default.{}.running-count-repartition", cluster.name);
    let deleted: i64 = sluice_tests::kafka_low_offsets(&repartition, PARTITIONS)
        .iter()
        .sum();
    assert!(
        deleted >= produced as i64 / 2,
        "only {deleted} offsets deleted from {repartition} ({produced} records went through it)"
    );
    eprintln!("{deleted} offsets of {produced} records deleted from {repartition}");
    // Tasks moved with their state.
    let restored = |run: usize| cluster.read_log(run).matches("restored=Some(").count();
    assert!(restored(1) + restored(2) > 0, "{}", cluster.all_logs());
}

#[test]
fn the_kubernetes_example_runs_a_valid_scaled_out_pipeline() {
    let manifest = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/scale-out/configmap.yaml"),
    )
    .expect("configmap.yaml");
    let text: String = manifest
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("pipeline.toml: |"))
        .skip(1)
        .map(|line| format!("{}\n", line.strip_prefix("    ").unwrap_or(line)))
        .collect();
    let loaded = sluice_host::config::LoadedConfig::parse(
        Path::new("/etc/sluice/pipeline/pipeline.toml"),
        &text,
    )
    .unwrap_or_else(|error| panic!("{error}\n{text}"));
    assert!(matches!(
        &loaded.config.source,
        sluice_host::config::SourceConfig::Kafka(kafka) if kafka.scale_out
    ));
    assert!(loaded.config.operators.iter().any(|op| op.key_by.is_some()));
}

#[test]
fn a_process_restarted_under_its_instance_name_gets_its_tasks_back() {
    let mut cluster = Cluster::new(Shape::KeyedByPartition);
    cluster.produce(5_000);
    let a = cluster.spawn_with(&[("SLUICE_INSTANCE", "a")]);
    cluster.wait_for_tasks(a.0, PARTITIONS as usize);
    let b = cluster.spawn_with(&[("SLUICE_INSTANCE", "b")]);
    cluster.wait_for_tasks(b.0, 1);
    wait_until("the tasks to settle on A and B", WAIT, || {
        running_tasks(&cluster, a.0) + running_tasks(&cluster, b.0) == PARTITIONS as usize
    });
    let a_tasks = running_tasks(&cluster, a.0);
    let b_starts = |cluster: &Cluster| cluster.read_log(b.0).matches("task starting").count();
    let b_started = b_starts(&cluster);
    // A rolling restart: A stops cleanly (final checkpoints, a static
    // member's leave) and comes back under its name within the session
    // timeout. Its tasks wait for it: B is given none of them.
    sigterm_and_wait(a.1.into_inner());
    let again = cluster.spawn_with(&[("SLUICE_INSTANCE", "a")]);
    cluster.wait_for_tasks(again.0, a_tasks);
    assert_eq!(
        b_starts(&cluster),
        b_started,
        "B took over A's tasks: {}",
        cluster.all_logs()
    );
    // A crash: the name stays taken until the dead member's session times
    // out; the restart asks again until then, and gets tasks again.
    let (_, mut crashed) = again;
    crashed.child().kill().expect("SIGKILL");
    crashed.child().wait().expect("wait");
    let last = cluster.spawn_with(&[("SLUICE_INSTANCE", "a")]);
    cluster.wait_for_tasks(last.0, 1);
    cluster.produce(5_000);
    wait_while_progressing(
        "every input record to be committed",
        WAIT,
        Duration::from_millis(250),
        || cluster.commit_progress(),
    )
    .unwrap_or_else(|stalled| panic!("{stalled}: {}", cluster.all_logs()));
    sigterm_and_wait(last.1.into_inner());
    sigterm_and_wait(b.1.into_inner());
    assert_exactly_once(&cluster);
}

#[test]
fn tasks_of_two_processes_write_one_iceberg_table_exactly_once() {
    let namespace: &'static str =
        Box::leak(format!("scale_{}", std::process::id()).into_boxed_str());
    let mut cluster = Cluster::new(Shape::Iceberg(namespace));
    cluster.produce(10_000);
    let a = cluster.spawn();
    cluster.wait_for_tasks(a.0, PARTITIONS as usize);
    let b = cluster.spawn();
    cluster.wait_for_tasks(b.0, 1);
    cluster.produce(10_000);
    wait_until("a task moved to B with its state", WAIT, || {
        cluster.read_log(b.0).contains("restored=Some(")
    });
    // A dies with its tasks' files written and maybe not committed.
    let (_, mut a) = a;
    a.child().kill().expect("SIGKILL");
    a.child().wait().expect("wait");
    cluster.produce(10_000);
    let mut runs = [b];
    cluster.wait_until_drained(&mut runs);
    let [b] = runs;
    sigterm_and_wait(b.1.into_inner());

    let table = sluice_tests::read_iceberg_rest_table(
        &sluice_tests::rest_catalog_uri(),
        &format!("{namespace}.counts"),
    );
    let rows = table["rows"].as_array().expect("rows");
    let mut ids: BTreeMap<u64, usize> = BTreeMap::new();
    let mut counts_by_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for row in rows {
        *ids.entry(row["id"].as_u64().expect("id")).or_default() += 1;
        counts_by_key
            .entry(row["key"].as_str().expect("key").to_string())
            .or_default()
            .push(row["count"].as_u64().expect("count"));
    }
    let keyed = (0..cluster.produced).filter(|id| id % 97 != 96);
    for id in keyed {
        assert_eq!(ids.get(&id), Some(&1), "id {id} in the table once");
    }
    assert_eq!(
        ids.len() as u64,
        cluster.produced - cluster.produced / 97,
        "only keyed ids"
    );
    for (key, mut values) in counts_by_key {
        values.sort_unstable();
        let expected: Vec<u64> = (1..=values.len() as u64).collect();
        assert_eq!(values, expected, "running counts of key {key}");
    }
}

/// The `sluice` binary the processes run: `$SLUICE_TEST_BIN` if set (a
/// copy, so that a long loop of these tests keeps its binary while the
/// tree is rebuilt), else the one cargo built with this test.
fn sluice_binary() -> String {
    std::env::var("SLUICE_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sluice").to_string())
}
