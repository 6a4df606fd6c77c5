//! Recovery: how long a pipeline killed with SIGKILL takes to commit
//! output again (issue 45).
//!
//! ```text
//! scripts/dev-services.sh up
//! cargo build --release -p sluice-cli
//! cargo bench -p sluice-benches --bench recovery
//! ```
//!
//! A live topic (4 partitions, `RATE` JSON records/s from a producer
//! thread) → a plugin → an exactly-once Kafka sink, checkpoints every
//! second to the S3 server. Two pipelines: without state (the `identity`
//! plugin) and with 1,000,000 keys of state (`running-count`, a count per
//! key in host state; the topic is first loaded with one record per key).
//! A `read_committed` reader tails the output.
//!
//! 1. **Kill → first committed record**, `RESTARTS` times: the run is
//!    killed (SIGKILL) and started again at once, as a supervisor does; the
//!    time from the kill to the first output record the reader sees after
//!    it (records seen in the first 50 ms are the dead run's last commit,
//!    not the new run's). The next kill comes 0.2–1.5 s after that record.
//!    Printed: p50, p99 (of 20: the largest), and the restore's steps from
//!    the run's log (`SLUICE_LOG=info`: initialising the Kafka
//!    transactions, choosing the checkpoint, downloading, opening).
//! 2. **Kill every 0.5–3 s**, `RESTARTS` times (issue 45's loop): how many
//!    runs committed output before they were killed, and how much.
//!
//! Environment: `SLUICE_BIN` (default `$CARGO_TARGET_DIR/release/sluice`),
//! `RESTARTS` (20), `RATE` (20000), `STATE_KEYS` (1000000), `SKIP_STATELESS`,
//! `SKIP_STATE`, `SKIP_LOOP`, `SLUICE_KEEP_TEST_DIRS` (keep the runs' logs).

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use sluice_tests::kafka::{bootstrap, create_topic, unique_topic};
use sluice_tests::{Chaos, s3};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 4;

/// Records seen this soon after a kill are the dead run's.
const DEAD_RUN_GUARD: Duration = Duration::from_millis(50);

/// Longest wait for a restarted run's first committed record.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(120);

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn skipped(name: &str) -> bool {
    std::env::var_os(name).is_some()
}

fn sluice_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("SLUICE_BIN") {
        return bin.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| sluice_tests::repo_root().join("target"));
    target.join("release").join("sluice")
}

/// Builds `plugin` into a component file (once; later runs reuse it), so
/// that a restart does not ask cargo whether the plugin changed.
fn component(plugin: &str) -> PathBuf {
    let output = std::env::temp_dir().join(format!("sluice-recovery-{plugin}.wasm"));
    let status = Command::new(sluice_bin())
        .args(["plugin", "build"])
        .arg(sluice_tests::repo_root().join("plugins").join(plugin))
        .arg("--output")
        .arg(&output)
        .stdout(Stdio::null())
        .output()
        .expect("sluice plugin build");
    assert!(
        status.status.success(),
        "building {plugin} failed: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    output
}

fn value(i: u64, keys: u64) -> String {
    format!(
        r#"{{"key":"k{}","seq":{i},"payload":"{}"}}"#,
        i % keys,
        "x".repeat(64)
    )
}

/// Produces records `range` (keys modulo `keys`).
fn produce(producer: &BaseProducer, topic: &str, range: std::ops::Range<u64>, keys: u64) {
    for i in range {
        let payload = value(i, keys);
        sluice_tests::kafka::send(producer, BaseRecord::<(), _>::to(topic).payload(&payload));
    }
}

/// Produces `rate` records/s to `topic` until `stop`, continuing the
/// numbering at `next`.
fn live_input(topic: String, rate: u64, keys: u64, next: u64, stop: Arc<AtomicBool>) {
    let producer = sluice_benches::kafka_producer();
    let started = Instant::now();
    let mut sent = 0;
    while !stop.load(Ordering::Relaxed) {
        let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        if due > sent {
            produce(&producer, &topic, next + sent..next + due, keys);
            sent = due;
        }
        producer.poll(Duration::from_millis(5));
    }
    let _ = producer.flush(Duration::from_secs(10));
}

/// What the output reader has seen.
#[derive(Default)]
struct Arrivals {
    /// Records seen before this are not looked at.
    since: Option<Instant>,
    /// The first record seen after `since`.
    first: Option<Instant>,
}

/// Tails `topic` `read_committed` until `stop`.
fn read_output(
    topic: String,
    arrivals: Arc<Mutex<Arrivals>>,
    count: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique_topic("recovery-reader"))
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("consumer");
    consumer.subscribe(&[&topic]).expect("subscribe");
    while !stop.load(Ordering::Relaxed) {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(50)) {
            let now = Instant::now();
            count.fetch_add(1, Ordering::Relaxed);
            let mut seen = arrivals.lock().expect("arrivals");
            if seen.since.is_some_and(|since| now >= since) && seen.first.is_none() {
                seen.first = Some(now);
            }
        }
    }
}

/// One pipeline under test: its directory, topics and running process.
struct Setup {
    dir: tempfile::TempDir,
    output: String,
    arrivals: Arc<Mutex<Arrivals>>,
    committed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    child: Option<Child>,
    runs: usize,
}

impl Setup {
    fn new(label: &str, plugin: &str, keys: u64, preload: u64, rate: u64) -> Setup {
        let input = unique_topic(&format!("recovery-{label}-in"));
        let output = unique_topic(&format!("recovery-{label}-out"));
        create_topic(&input, PARTITIONS);
        create_topic(&output, PARTITIONS);
        if preload > 0 {
            let producer = sluice_benches::kafka_producer();
            produce(&producer, &input, 0..preload, keys);
            producer.flush(Duration::from_secs(120)).expect("flush");
        }
        let bucket = unique_topic("recovery").to_lowercase();
        s3::create_bucket(&bucket);
        let dir = tempfile::Builder::new()
            .prefix("sluice-recovery-")
            .disable_cleanup(std::env::var_os("SLUICE_KEEP_TEST_DIRS").is_some())
            .tempdir()
            .expect("temporary directory");
        let text = format!(
            r#"[pipeline]
name = "{name}"
batch_size = 1024
state_dir = "state"

[checkpoints]
storage = "s3://{bucket}/checkpoints"
interval_ms = 1000
mode = "exactly-once"
s3 = {{ endpoint = "{endpoint}", region = "us-east-1" }}

[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{input}"]
group_id = "{input}"
start = "earliest"
value_format = "json"

[[operators]]
name = "{plugin}"
plugin = "{component}"

[sink.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{output}"
"#,
            name = unique_topic(&format!("recovery-{label}")),
            endpoint = s3::endpoint(),
            bootstrap = bootstrap(),
            component = component(plugin).display(),
        );
        std::fs::write(dir.path().join("pipeline.toml"), text).expect("write pipeline");
        let stop = Arc::new(AtomicBool::new(false));
        let arrivals = Arc::new(Mutex::new(Arrivals::default()));
        let committed = Arc::new(AtomicU64::new(0));
        let threads = vec![
            {
                let (input, stop) = (input.clone(), stop.clone());
                std::thread::spawn(move || live_input(input, rate, keys, preload, stop))
            },
            {
                let (output, arrivals, committed, stop) = (
                    output.clone(),
                    arrivals.clone(),
                    committed.clone(),
                    stop.clone(),
                );
                std::thread::spawn(move || read_output(output, arrivals, committed, stop))
            },
        ];
        Setup {
            dir,
            output,
            arrivals,
            committed,
            stop,
            threads,
            child: None,
            runs: 0,
        }
    }

    fn log(&self, run: usize) -> PathBuf {
        self.dir.path().join(format!("run-{run}.log"))
    }

    /// Starts a run; records seen from `since` on count as its output.
    fn start(&mut self, since: Instant) {
        {
            let mut arrivals = self.arrivals.lock().expect("arrivals");
            arrivals.since = Some(since);
            arrivals.first = None;
        }
        self.runs += 1;
        let log = std::fs::File::create(self.log(self.runs)).expect("log");
        let child = Command::new(sluice_bin())
            .current_dir(self.dir.path())
            .args(["run", "pipeline.toml", "--quiet"])
            .envs(s3::environment())
            .env("SLUICE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn sluice");
        self.child = Some(child);
    }

    /// SIGKILLs the run; returns when it is gone.
    fn kill(&mut self) -> Instant {
        let killed = Instant::now();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        killed
    }

    /// Waits for the run's first committed record; `None` after `timeout`
    /// or when the run ended.
    fn first_record(&mut self, timeout: Duration) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(first) = self.arrivals.lock().expect("arrivals").first {
                return Some(first);
            }
            if let Some(child) = &mut self.child
                && child.try_wait().ok().flatten().is_some()
            {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }

    /// The restore's steps (ms), the bytes restored and those of them
    /// taken from the dead run's directory, from run `run`'s `restored`
    /// log line.
    fn restore_steps(&self, run: usize) -> Option<[f64; 6]> {
        let log = std::fs::read_to_string(self.log(run)).ok()?;
        let line = log.lines().find(|line| line.contains(" restored "))?;
        let field = |name: &str| -> Option<f64> {
            let start = line.find(&format!(" {name}="))? + name.len() + 2;
            line[start..].split_whitespace().next()?.parse().ok()
        };
        Some([
            field("sinks_ms")?,
            field("choose_ms")?,
            field("download_ms")?,
            field("open_ms")?,
            field("restored_bytes")?,
            field("reused_bytes").unwrap_or(0.0),
        ])
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.kill();
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        eprintln!(
            "output topic {}: {} records committed",
            self.output,
            self.committed.load(Ordering::Relaxed)
        );
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Part 1 for one pipeline.
fn kill_to_first_record(setup: &mut Setup, restarts: usize, warm_up: u64) {
    let mut chaos = Chaos::new();
    setup.start(Instant::now());
    // Warm: the state loaded and checkpointed, the component compiled.
    let deadline = Instant::now() + Duration::from_secs(600);
    while setup.committed.load(Ordering::Relaxed) < warm_up.max(1) {
        assert!(Instant::now() < deadline, "the first run did not catch up");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let mut samples = Vec::new();
    let mut steps = Vec::new();
    for _ in 0..restarts {
        let killed = setup.kill();
        setup.start(killed + DEAD_RUN_GUARD);
        let Some(first) = setup.first_record(RECOVERY_TIMEOUT) else {
            panic!(
                "restart {} ended, or committed nothing within {RECOVERY_TIMEOUT:?}: {}",
                setup.runs,
                std::fs::read_to_string(setup.log(setup.runs)).unwrap_or_default()
            );
        };
        let ms = (first - killed).as_secs_f64() * 1000.0;
        let step = setup.restore_steps(setup.runs);
        eprintln!(
            "restart {}: {ms:.0} ms to the first committed record; restore steps {step:?}",
            setup.runs
        );
        samples.push(ms);
        steps.extend(step);
        std::thread::sleep(Duration::from_millis(200 + chaos.below(1300)));
    }
    samples.sort_by(f64::total_cmp);
    let mean_step = |i: usize| steps.iter().map(|s| s[i]).sum::<f64>() / steps.len().max(1) as f64;
    println!(
        "| kill -> first committed record | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} / {:.0} / {:.0} / {:.0} |",
        samples.len(),
        percentile(&samples, 50.0),
        percentile(&samples, 99.0),
        samples[0],
        samples[samples.len() - 1],
        mean_step(0),
        mean_step(1),
        mean_step(2),
        mean_step(3),
    );
}

/// Part 2 for one pipeline: kills every 0.5–3 s.
fn kill_loop(setup: &mut Setup, restarts: usize) {
    let mut chaos = Chaos::new();
    let mut progressed = 0;
    let before = setup.committed.load(Ordering::Relaxed);
    for _ in 0..restarts {
        let killed = setup.kill();
        let at_start = setup.committed.load(Ordering::Relaxed);
        setup.start(killed + DEAD_RUN_GUARD);
        std::thread::sleep(Duration::from_millis(500 + chaos.below(2500)));
        if setup.arrivals.lock().expect("arrivals").first.is_some()
            && setup.committed.load(Ordering::Relaxed) > at_start
        {
            progressed += 1;
        }
    }
    println!(
        "| kill every 0.5-3 s | {restarts} | runs that committed output: {progressed} | records committed: {} |",
        setup.committed.load(Ordering::Relaxed) - before
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    assert!(
        Path::new(&sluice_bin()).exists(),
        "{} missing: cargo build --release -p sluice-cli",
        sluice_bin().display()
    );
    let restarts = setting("RESTARTS", 20) as usize;
    let rate = setting("RATE", 20_000);
    let state_keys = setting("STATE_KEYS", 1_000_000);
    println!(
        "| what | restarts | p50 ms | p99 ms | min ms | max ms | restore steps, mean ms: transactions / choose / download / open |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | --- |");
    if !skipped("SKIP_STATELESS") {
        println!("| **without state** (identity) | | | | | | |");
        let mut setup = Setup::new("stateless", "identity", 1000, 0, rate);
        kill_to_first_record(&mut setup, restarts, 1);
        if !skipped("SKIP_LOOP") {
            kill_loop(&mut setup, restarts);
        }
    }
    if !skipped("SKIP_STATE") {
        println!("| **{state_keys} keys of state** (running-count) | | | | | | |");
        let mut setup = Setup::new("state", "running-count", state_keys, state_keys, rate);
        kill_to_first_record(&mut setup, restarts, state_keys);
        if !skipped("SKIP_LOOP") {
            kill_loop(&mut setup, restarts);
        }
    }
}
