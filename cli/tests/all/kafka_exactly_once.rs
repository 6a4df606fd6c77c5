//! End-to-end exactly-once with Kafka and S3 checkpoints, proven with
//! SIGKILL: Kafka input (4 partitions, unique ids, 1,000 keys, event times
//! with disorder) → a running count per key in host state (plugin
//! `running-count`) → a tumbling event-time window sum on RocksDB →
//! exactly-once Kafka sinks (windows, counts, dead letters), checkpoints
//! every second to the S3 server of `scripts/dev-services.sh up`.
//!
//! `SLUICE_CHAOS_KILLS` sets the number of kills (default 8, the test
//! command's short version; the soak runs in docs/benchmarks.md use 20 and
//! 100).

use sluice_tests::kafka::{create_topic, read_to_end, unique_topic};
use sluice_tests::outputs::{Verdict, assert_windows_match, commit_progress, window_model};
use sluice_tests::{
    KillOnDrop, Progress, kafka_end_offsets, s3, sigterm_and_wait, wait_until,
    wait_while_progressing,
};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(180);
const PARTITIONS: i32 = 4;
const KEYS: u64 = 1000;
const BOUND_MS: i64 = 500;
const T0: i64 = 1_700_000_000_000;
/// The sinks' `transaction_timeout_ms`. A run's transaction lives from the
/// first record after a barrier until the next checkpoint commits; a
/// transaction the broker aborts on timeout fences its producer, and the
/// run fails (to be restored). 5 s was too short for a debug build on a
/// loaded CI machine: a run drained after a failpoint was fenced by its
/// own slow epoch (which showed as a stall before the harness printed the
/// run's log).
const TRANSACTION_TIMEOUT_MS: u64 = 15_000;
/// Where the pipelines' checkpoints are in their bucket (then tenant and
/// pipeline name).
const CHECKPOINTS_PREFIX: &str = "checkpoints";

/// The input record `i`: every 499th has no key (dead-lettered by the
/// plugin); event times go 2 ms apart with up to 200 ms of disorder.
fn input_value(i: u64) -> String {
    let ts = T0 + i as i64 * 2 - ((i * 7919) % 200) as i64;
    let amount = i % 7 + 1;
    if i % 499 == 498 {
        format!(r#"{{"id":{i},"amount":{amount},"ts":{ts}}}"#)
    } else {
        format!(
            r#"{{"id":{i},"key":"k{}","amount":{amount},"ts":{ts}}}"#,
            i % KEYS
        )
    }
}

/// Produces `records` inputs round-robin over the partitions, then one
/// sentinel per partition far ahead in event time, so that every window of
/// the real records fires.
fn produce_input(topic: &str, records: u64) {
    use rdkafka::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", sluice_tests::kafka::bootstrap())
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .create()
        .unwrap_or_else(|e| panic!("Kafka producer: {e}"));
    let sentinel_ts = T0 + records as i64 * 2 + 100_000;
    let values = (0..records)
        .map(input_value)
        .chain((0..PARTITIONS as u64).map(|p| {
            format!(
                r#"{{"id":{},"key":"end","amount":0,"ts":{sentinel_ts}}}"#,
                records + p
            )
        }));
    for (i, value) in values.enumerate() {
        sluice_tests::kafka::send(
            &producer,
            BaseRecord::<(), _>::to(topic)
                .payload(value.as_bytes())
                .partition(i as i32 % PARTITIONS),
        );
    }
    producer
        .flush(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("flushing input: {e}"));
}

/// Topics, bucket and pipeline file of one run.
struct Setup {
    dir: tempfile::TempDir,
    input: String,
    windows: String,
    counts: String,
    dead_letters: String,
    group: String,
    bucket: String,
    records: u64,
    /// The pipeline's checkpoint storage, to watch checkpoints complete.
    storage: sluice_host::checkpoint::S3Storage,
    /// Runs started (names their logs).
    runs: std::sync::atomic::AtomicUsize,
    /// The pipeline's name: unique, since a pipeline's transactional ids
    /// are derived from it (two tests sharing one would fence each other).
    name: String,
}

impl Setup {
    fn new(records: u64, mode: &str) -> Setup {
        let bucket = unique_topic("eo-bucket").to_lowercase();
        s3::create_bucket(&bucket);
        let name = unique_topic("exactly-once");
        let setup = Setup {
            storage: s3::storage(&bucket, &format!("{CHECKPOINTS_PREFIX}/default/{name}")),
            name,
            dir: tempfile::Builder::new()
                .prefix("sluice-eo-")
                .disable_cleanup(std::env::var_os("SLUICE_KEEP_TEST_DIRS").is_some())
                .tempdir()
                .expect("temporary directory"),
            input: unique_topic("eo-in"),
            windows: unique_topic("eo-windows"),
            counts: unique_topic("eo-counts"),
            dead_letters: unique_topic("eo-dlq"),
            group: unique_topic("eo-group"),
            bucket,
            records,
            runs: std::sync::atomic::AtomicUsize::new(0),
        };
        create_topic(&setup.input, PARTITIONS);
        for topic in [&setup.windows, &setup.counts, &setup.dead_letters] {
            create_topic(topic, 2);
        }
        produce_input(&setup.input, records);
        let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/running-count");
        let bootstrap = sluice_tests::kafka::bootstrap();
        let text = format!(
            r#"[pipeline]
name = "{name}"
batch_size = 200
workers = 2
max_out_of_orderness_ms = {BOUND_MS}

[checkpoints]
storage = "s3://{bucket}/{CHECKPOINTS_PREFIX}"
interval_ms = 1000
mode = "{mode}"
s3 = {{ endpoint = "{endpoint}", region = "us-east-1", multipart_threshold_bytes = 1 }}

[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{input}"]
group_id = "{group}"
start = "earliest"
value_format = "json"
timestamp_field = "ts"
properties = {{ "session.timeout.ms" = "6000", "heartbeat.interval.ms" = "500" }}

[[operators]]
name = "running-count"
plugin = {plugin:?}

[[operators]]
name = "sum-per-key"
window = {{ tumbling_ms = 1000 }}
key_field = "key"
aggregate = {{ function = "sum", field = "amount" }}

[sink.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{windows}"
transaction_timeout_ms = {TRANSACTION_TIMEOUT_MS}

[side_outputs.counts.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{counts}"
transaction_timeout_ms = {TRANSACTION_TIMEOUT_MS}

[dead_letter.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{dead_letters}"
transaction_timeout_ms = {TRANSACTION_TIMEOUT_MS}
"#,
            name = setup.name,
            bucket = setup.bucket,
            endpoint = s3::endpoint(),
            input = setup.input,
            group = setup.group,
            windows = setup.windows,
            counts = setup.counts,
            dead_letters = setup.dead_letters,
        );
        std::fs::write(setup.pipeline(), text).expect("write pipeline");
        setup
    }

    fn pipeline(&self) -> PathBuf {
        self.dir.path().join("pipeline.toml")
    }

    fn spawn(&self) -> Child {
        self.spawn_with(&[])
    }

    /// Starts a run with extra environment variables; its stderr goes to
    /// `run-NNN.log` in the directory.
    fn spawn_with(&self, env: &[(&str, &str)]) -> Child {
        let run = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = std::fs::File::create(self.dir.path().join(format!("run-{run:03}.log")))
            .expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .arg("run")
            .arg(self.pipeline())
            .arg("--quiet")
            .env("SLUICE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log);
        for (name, value) in s3::environment().into_iter().chain(env.iter().copied()) {
            command.env(name, value);
        }
        command.spawn().expect("spawn sluice")
    }

    /// What the latest run wrote on stderr.
    fn last_log(&self) -> String {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .expect("directory")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        logs.last()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .unwrap_or_default()
    }

    /// The newest manifest id (completed or fence).
    fn newest_manifest(&self) -> u64 {
        s3::keys(&self.storage)
            .iter()
            .filter_map(|key| sluice_host::checkpoint::manifest_id(key))
            .max()
            .unwrap_or(0)
    }

    /// Records written to the outputs so far, committed or not.
    fn written(&self) -> i64 {
        [&self.windows, &self.counts, &self.dead_letters]
            .iter()
            .map(|topic| kafka_end_offsets(topic, 2).iter().sum::<i64>())
            .sum()
    }

    /// Whether the group committed every input offset (the checkpoint
    /// covering all input completed: offsets are committed after it).
    fn drained(&self) -> bool {
        self.commit_progress() == Progress::Done
    }

    /// How many input offsets the group committed, or done when it
    /// committed all of them.
    fn commit_progress(&self) -> Progress {
        commit_progress(&self.group, &self.input, PARTITIONS)
    }

    /// Waits until the group committed every input offset: as long as
    /// `run` (a debug build, possibly on a loaded machine) keeps
    /// committing. Fails when commits stall for [`WAIT`], or at once, with
    /// its log, when `run` ends before the input is committed.
    fn wait_until_drained(&self, run: &mut Child) {
        wait_while_progressing(
            "every input record to be committed",
            WAIT,
            Duration::from_millis(250),
            || {
                let progress = self.commit_progress();
                if progress != Progress::Done
                    && let Ok(Some(status)) = run.try_wait()
                {
                    panic!(
                        "the run ended ({status}) before every input record was committed ({progress:?}): {}",
                        self.last_log()
                    );
                }
                progress
            },
        )
        .unwrap_or_else(|stalled| panic!("{stalled}: {}", self.last_log()));
    }
}

/// Runs the pipeline until all input is committed and it has completed a
/// checkpoint of its own, then stops it cleanly. (After a failpoint on a
/// fast machine everything may be committed before this run starts: the
/// checkpoint says it is past opening and running.)
fn drain(setup: &Setup) {
    let newest = setup.newest_manifest();
    let mut last = KillOnDrop::new(setup.spawn());
    setup.wait_until_drained(last.child());
    wait_until("a checkpoint of the draining run", WAIT, || {
        setup.newest_manifest() > newest || last.child().try_wait().ok().flatten().is_some()
    });
    let last = last.into_inner();
    sigterm_and_wait(last);
}

/// The exactly-once checks after a run: nothing lost or duplicated, window
/// sums equal the model.
fn assert_exactly_once(setup: &Setup) {
    verdict(setup).assert_exactly_once();
    assert_windows_match_the_model(setup);
}

/// Kills the pipeline's process `kills` times at random moments (each
/// after it wrote something), once with an outage longer than the
/// transaction timeout, then runs it until all input is committed and
/// stops it cleanly.
fn chaos(setup: &Setup, kills: usize) {
    let mut chaos = sluice_tests::Chaos::new();
    let mut random = move |bound: u64| chaos.below(bound);
    for kill in 0..kills {
        let before = setup.written();
        let newest = setup.newest_manifest();
        let mut child = KillOnDrop::new(setup.spawn());
        wait_until("output from the restarted run", WAIT, || {
            setup.written() > before
                || child.child().try_wait().ok().flatten().is_some()
                || setup.drained()
        });
        assert!(
            !setup.drained(),
            "the input ran out after {kill} of {kills} kills: give the test more records"
        );
        // The first kill and one in three of the others come after the run
        // completed a checkpoint of its own (its fence is the first new
        // manifest), the others while it may still be restoring or in its
        // first epoch. The first one waits so that the last run always has
        // a checkpoint to restore.
        if kill == 0 || random(3) == 0 {
            wait_until("a checkpoint of the restarted run", WAIT, || {
                setup.newest_manifest() >= newest + 2
                    || child.child().try_wait().ok().flatten().is_some()
            });
        }
        std::thread::sleep(Duration::from_millis(random(400)));
        let child = child.child();
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!(
                "run {kill} ended by itself ({status}): {}",
                setup.last_log()
            );
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
        if kill == kills / 2 {
            // Down longer than transaction.timeout.ms: the broker aborts
            // the open transaction itself (at its next check).
            std::thread::sleep(Duration::from_millis(TRANSACTION_TIMEOUT_MS + 2_000));
        }
    }
    let mut last = KillOnDrop::new(setup.spawn());
    let started = Instant::now();
    setup.wait_until_drained(last.child());
    eprintln!("drained in {:?}", started.elapsed());
    let last = last.into_inner();
    sigterm_and_wait(last);
    let log = setup.last_log();
    assert!(log.contains("restored checkpoint"), "{log}");
}

/// What a `read_committed` reader of the counts and dead letters sees.
fn verdict(setup: &Setup) -> Verdict {
    Verdict::read(
        (&setup.counts, 2),
        (&setup.dead_letters, 2),
        setup.records + PARTITIONS as u64,
        |id| id % 499 == 498,
    )
}

fn assert_windows_match_the_model(setup: &Setup) {
    let model = window_model((0..setup.records).map(input_value));
    assert_windows_match(&setup.windows, 2, &model);
}

/// Every object in the bucket is a retained manifest or referenced by one.
fn assert_bucket_is_clean(setup: &Setup) {
    let keys = s3::keys(&setup.storage);
    let store = sluice_host::checkpoint::CheckpointStore::new(std::sync::Arc::new(s3::storage(
        &setup.bucket,
        &format!("{CHECKPOINTS_PREFIX}/default/{}", setup.name),
    )));
    let mut referenced = BTreeSet::new();
    for id in store.ids().expect("ids") {
        referenced.insert(sluice_host::checkpoint::manifest_key(id));
        let manifest = store.read(id).expect("manifest");
        referenced.extend(manifest.state.iter().map(|f| f.object.clone()));
    }
    let stored: BTreeSet<String> = keys.into_iter().collect();
    assert_eq!(
        stored, referenced,
        "objects no retained manifest references"
    );
    let completed = store.completed().expect("completed");
    assert!(
        (1..=4).contains(&completed.len()),
        "{} kept",
        completed.len()
    );
}

#[test]
fn sigkill_loop_with_kafka_and_s3_is_exactly_once_and_at_least_once_is_not() {
    let kills = sluice_tests::chaos_kills();
    // Enough input that every run has records left to process: a run
    // processes ~10,000 records before it is killed on a loaded machine,
    // ~20,000 on a quiet one (16 kills took 300,000 on 2026-12-04).
    let records = (kills as u64 * 40_000).max(300_000);
    let exact = Setup::new(records, "exactly-once");
    eprintln!("run logs in {}", exact.dir.path().display());
    chaos(&exact, kills);
    assert_exactly_once(&exact);
    let (uncommitted, _) = read_to_end(&exact.counts, 2, false);
    let (committed, _) = read_to_end(&exact.counts, 2, true);
    assert!(
        uncommitted.len() > committed.len(),
        "aborted transactions happened: a read_uncommitted reader saw {} records, read_committed {}",
        uncommitted.len(),
        committed.len()
    );
    assert_bucket_is_clean(&exact);

    // The same with at-least-once sinks: the check can tell.
    let loose = Setup::new(150_000, "at-least-once");
    chaos(&loose, 4);
    let result = verdict(&loose);
    assert!(
        result.missing.is_empty(),
        "at-least-once loses nothing either"
    );
    assert!(
        !result.duplicated.is_empty(),
        "at-least-once sinks must have written records again after kills"
    );
}

#[test]
fn a_kafka_zombie_is_fenced_and_every_failpoint_recovers_exactly_once() {
    // Zombie: SIGSTOP a run after it completed a checkpoint, let a second
    // run take over and finish, then SIGCONT the first.
    let setup = Setup::new(60_000, "exactly-once");
    let mut zombie = KillOnDrop::new(setup.spawn());
    wait_until("a checkpoint of the first run", WAIT, || {
        setup.newest_manifest() >= 2
    });
    let status = Command::new("kill")
        .args(["-STOP", &zombie.child().id().to_string()])
        .status()
        .expect("kill -STOP");
    assert!(status.success());
    drain(&setup);
    let taken_over = setup.written();
    let status = Command::new("kill")
        .args(["-CONT", &zombie.child().id().to_string()])
        .status()
        .expect("kill -CONT");
    assert!(status.success());
    // Its producers were fenced by the second run's, its checkpoint ids
    // taken by the second run's fence: whatever it tries next fails (which
    // error comes first depends on where it was stopped).
    let exit = zombie.child().wait().expect("wait for the zombie");
    let log = std::fs::read_to_string(setup.dir.path().join("run-000.log")).unwrap_or_default();
    assert!(!exit.success(), "the zombie must fail, not go on: {log}");
    assert_exactly_once(&setup);
    assert_bucket_is_clean(&setup);
    // Whatever the zombie wrote after waking up, nobody reads it committed.
    assert!(setup.written() >= taken_over);

    // Killed after publishing a checkpoint, before its transaction
    // committed: the restart must restore the checkpoint before it.
    let setup = Setup::new(60_000, "exactly-once");
    let output = setup
        .spawn_with(&[(sluice_host::checkpoint::FAILPOINT_ENV, "after-manifest@4")])
        .wait_with_output()
        .expect("wait");
    assert!(!output.status.success(), "the failpoint must kill the run");
    drain(&setup);
    let log = setup.last_log();
    assert!(log.contains("restoring its parent"), "{log}");
    assert_exactly_once(&setup);

    // Killed in the middle of a multipart upload (every file is uploaded
    // in parts here): the restart aborts the upload and goes on.
    let setup = Setup::new(60_000, "exactly-once");
    let output = setup
        .spawn_with(&[(sluice_host::checkpoint::FAILPOINT_ENV, "during-upload@4")])
        .wait_with_output()
        .expect("wait");
    assert!(!output.status.success(), "the failpoint must kill the run");
    drain(&setup);
    assert_eq!(
        s3::abort_incomplete(&setup.storage),
        0,
        "the restart aborted the interrupted upload"
    );
    assert_exactly_once(&setup);
    assert_bucket_is_clean(&setup);

    // Killed after the state upload, before the manifest; then killed in
    // the middle of the restore that follows.
    let setup = Setup::new(60_000, "exactly-once");
    for failpoint in ["after-state-upload@4", "during-restore"] {
        let output = setup
            .spawn_with(&[(sluice_host::checkpoint::FAILPOINT_ENV, failpoint)])
            .wait_with_output()
            .expect("wait");
        assert!(!output.status.success(), "{failpoint} must kill the run");
    }
    drain(&setup);
    assert_exactly_once(&setup);
    assert_bucket_is_clean(&setup);
}
