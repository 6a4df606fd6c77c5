//! Helpers shared by the integration tests and benchmarks: building the
//! example plugins (with the same code as `sluice plugin build`) and setting
//! up plugin operators against the real runtime.

use sluice_host::dataflow::TransformOperator;
use sluice_host::metrics::OperatorMetrics;
use sluice_host::runtime::{PluginInstance, PluginLimits, PluginRuntime, RuntimeConfig};
use sluice_host::state::{MemoryStateBackend, OperatorScope, StateBackend};
use sluice_host::window::MERGE_FOLDS;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The component of the example plugin `name` (a directory under
/// `plugins/`), built once per test process; Python and JavaScript builds
/// of unchanged plugins are reused across processes and clones from
/// [`shared_cache_dir`]`("builds")`.
pub fn plugin(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let component = build_plugin_dir(&repo_root().join("plugins").join(name));
    built.insert(name.to_string(), component.clone());
    component
}

/// Builds the plugin in `dir` (as `sluice plugin build` does), Python and
/// JavaScript builds reused from [`shared_cache_dir`]`("builds")`.
pub fn build_plugin_dir(dir: &Path) -> PathBuf {
    let mut options = sluice_cli::build::BuildOptions::new();
    options.cache = Some(sluice_cli::build::BuildCache::new(shared_cache_dir(
        "builds",
    )));
    sluice_cli::build::build_plugin_with(dir, &options)
        .unwrap_or_else(|error| panic!("building plugin {}: {error:#}", dir.display()))
        .path
}

/// The aggregate plugin `sluice plugin new NAME --world aggregate --lang
/// LANGUAGE` scaffolds (a count and sum of the integer field `field`),
/// made in `parent` and built.
pub fn scaffolded_aggregate(parent: &Path, language: sluice_cli::build::Language) -> PathBuf {
    let dir = sluice_cli::scaffold::new_plugin(
        parent,
        "count-sum",
        language,
        sluice_cli::scaffold::TemplateWorld::Aggregate,
        &sluice_cli::scaffold::default_sdk_path(),
    )
    .unwrap_or_else(|error| panic!("scaffolding an aggregate: {error:#}"));
    build_plugin_dir(&dir)
}

/// `<cargo target directory>/sluice-test-cache/<name>`: a cache shared by
/// every test binary and every clone that builds into the same target
/// directory (CI's clean clones share one), so that a Python or JavaScript
/// plugin is built and compiled once per change, not once per process
/// (each costs 10-30 s). The target directory is the one this test binary
/// was built in (`<target>/<profile>/deps/<binary>`).
pub fn shared_cache_dir(name: &str) -> PathBuf {
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("sluice-test-cache").join(name)
}

/// A runtime whose compiled-component cache is [`shared_cache_dir`]
/// `("components")` (shared by all tests, never in the user's home).
pub fn runtime() -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        cache_dir: shared_cache_dir("components"),
        ..RuntimeConfig::default()
    })
    .unwrap_or_else(|error| panic!("creating runtime: {error}"))
}

/// A fresh in-memory state backend.
pub fn state_backend() -> Arc<dyn StateBackend> {
    Arc::new(MemoryStateBackend::new(MERGE_FOLDS))
}

/// A transform operator running plugin `name` for `tenant`, with `limits`
/// and `config`.
pub fn operator(
    runtime: &PluginRuntime,
    state: &Arc<dyn StateBackend>,
    tenant: &str,
    name: &str,
    limits: PluginLimits,
    config: &[(&str, &str)],
) -> TransformOperator {
    let component = runtime
        .load(plugin(name))
        .unwrap_or_else(|error| panic!("loading {name}: {error}"));
    let scope = OperatorScope::new(tenant, "test", name);
    let store = state
        .open(&scope, None)
        .unwrap_or_else(|error| panic!("opening state of {name}: {error}"));
    let metrics = OperatorMetrics::new(name);
    let config = config
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let instance = PluginInstance::new(component, scope, store, metrics.clone(), limits, config)
        .unwrap_or_else(|error| panic!("instantiating {name}: {error}"));
    TransformOperator::new(name, instance, metrics)
}

/// Loads and builds the pipeline file text `pipeline_toml` (written to a
/// temporary file, returned so that it lives as long as the pipeline).
fn build_pipeline(pipeline_toml: &str) -> (tempfile::TempDir, sluice_host::pipeline::Pipeline) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let file = dir.path().join("pipeline.toml");
    std::fs::write(&file, pipeline_toml).unwrap_or_else(|e| panic!("writing pipeline: {e}"));
    let loaded = sluice_host::config::LoadedConfig::load(&file).unwrap_or_else(|e| panic!("{e}"));
    // As `sluice run` opens it: with `[checkpoints]`, restored and checkpointed.
    let pipeline = sluice_host::pipeline::Pipeline::open(
        &loaded,
        &runtime(),
        &sluice_host::pipeline::wasm_files_only,
        &sluice_host::checkpoint::RestoreFrom::Latest,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    (dir, pipeline)
}

/// Runs the pipeline file text `pipeline_toml` in a thread until its
/// counters satisfy `done`, then stops it cleanly (which flushes the sinks
/// and commits source offsets). Returns the outcome and final counters.
/// Fails the test if that takes longer than `timeout` or the run ends early.
pub fn run_pipeline_until(
    pipeline_toml: &str,
    timeout: std::time::Duration,
    done: impl Fn(&sluice_host::metrics::PipelineSnapshot) -> bool,
) -> (
    sluice_host::dataflow::RunOutcome,
    sluice_host::metrics::PipelineSnapshot,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (_dir, pipeline) = build_pipeline(pipeline_toml);
    let metrics = pipeline.metrics();
    let stop = Arc::new(AtomicBool::new(false));
    let handle = {
        let stop = stop.clone();
        std::thread::spawn(move || pipeline.run(stop))
    };
    let started = std::time::Instant::now();
    loop {
        let snapshot = metrics.snapshot();
        if done(&snapshot) {
            break;
        }
        assert!(
            started.elapsed() < timeout,
            "pipeline incomplete after {timeout:?}: {snapshot:?}"
        );
        assert!(!handle.is_finished(), "pipeline ended early: {snapshot:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let outcome = handle
        .join()
        .unwrap_or_else(|_| panic!("pipeline thread panicked"))
        .unwrap_or_else(|e| panic!("{e}"));
    (outcome, metrics.snapshot())
}

/// The JSON lines of the file at `path` (none if it is missing), each
/// parsed: what a file sink or a `format = "record"` dead-letter file
/// wrote.
pub fn read_json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{}: {e}: {line}", path.display()))
        })
        .collect()
}

/// Runs the pipeline file text `pipeline_toml` (with a bounded source) to
/// its end. Fails the test if that takes longer than `timeout`.
pub fn run_pipeline_to_end(
    pipeline_toml: &str,
    timeout: std::time::Duration,
) -> (
    sluice_host::dataflow::RunOutcome,
    sluice_host::metrics::PipelineSnapshot,
) {
    use std::sync::atomic::AtomicBool;
    let (_dir, pipeline) = build_pipeline(pipeline_toml);
    let metrics = pipeline.metrics();
    let handle = std::thread::spawn(move || pipeline.run(Arc::new(AtomicBool::new(false))));
    wait_until("the pipeline to end", timeout, || handle.is_finished());
    let outcome = handle
        .join()
        .unwrap_or_else(|_| panic!("pipeline thread panicked"))
        .unwrap_or_else(|e| panic!("{e}"));
    (outcome, metrics.snapshot())
}

/// Polls `condition` every 20 ms until it holds; fails the test, naming
/// `what`, after `timeout`.
pub fn wait_until(what: &str, timeout: std::time::Duration, condition: impl FnMut() -> bool) {
    wait_until_else(what, timeout, condition, String::new);
}

/// [`wait_until`], failing with what `explain` says too (a process's log,
/// say), so that a timeout in CI can be understood afterwards.
pub fn wait_until_else(
    what: &str,
    timeout: std::time::Duration,
    mut condition: impl FnMut() -> bool,
    explain: impl FnOnce() -> String,
) {
    let started = std::time::Instant::now();
    while !condition() {
        if started.elapsed() >= timeout {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                explain()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// What a [`wait_while_progressing`] probe saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The awaited condition holds.
    Done,
    /// Not yet; how far the work has come (a count that only grows while
    /// the work moves, such as committed input offsets).
    At(i64),
}

/// Polls `probe` every `interval` until it reports [`Progress::Done`];
/// returns an error naming `what` when the amount it reports has not grown
/// for `stall_timeout`. For waits whose length depends on how loaded the
/// machine is (a debug build draining a topic beside other tests): a slow
/// run passes, a stuck one fails (the caller adds what explains it, such
/// as the run's log).
pub fn wait_while_progressing(
    what: &str,
    stall_timeout: std::time::Duration,
    interval: std::time::Duration,
    mut probe: impl FnMut() -> Progress,
) -> Result<(), String> {
    let mut best = i64::MIN;
    let mut since = std::time::Instant::now();
    loop {
        match probe() {
            Progress::Done => return Ok(()),
            Progress::At(amount) if amount > best => {
                best = amount;
                since = std::time::Instant::now();
            }
            Progress::At(amount) => {
                if since.elapsed() >= stall_timeout {
                    return Err(format!(
                        "no progress for {stall_timeout:?} waiting for {what} (stuck at {amount})"
                    ));
                }
            }
        }
        std::thread::sleep(interval);
    }
}

/// A child process (a `sluice run` or `sluice serve`) killed if the test
/// fails while it runs, so that a failed check does not leave it running,
/// and taking a core, for the rest of the test run.
pub struct KillOnDrop(Option<std::process::Child>);

impl KillOnDrop {
    /// Holds `child` until the test stops it or fails.
    pub fn new(child: std::process::Child) -> Self {
        KillOnDrop(Some(child))
    }

    /// The process.
    pub fn child(&mut self) -> &mut std::process::Child {
        self.0
            .as_mut()
            .expect("the process is held until into_inner")
    }

    /// The process, no longer killed on drop (the test stops it itself).
    pub fn into_inner(mut self) -> std::process::Child {
        self.0.take().expect("the process is held until into_inner")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts a run with `spawn` and kills it with SIGKILL, `kills` times, each
/// at a random moment: most often once `progress` (committed output) grew
/// past its value at the run's start, sometimes while the run is still
/// restoring. Returns how many kills landed before the run ended by
/// itself (a kill after the end proves nothing).
pub fn sigkill_at_random_moments(
    kills: usize,
    mut spawn: impl FnMut() -> std::process::Child,
    progress: impl Fn() -> u64,
    timeout: std::time::Duration,
) -> usize {
    let mut chaos = Chaos::new();
    let mut landed_mid_stream = 0;
    for _ in 0..kills {
        let before = progress();
        let mut child = spawn();
        let started = std::time::Instant::now();
        if chaos.below(4) > 0 {
            wait_until("the output to grow", timeout, || {
                progress() > before || child.try_wait().ok().flatten().is_some()
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(chaos.below(300)));
        if child.try_wait().ok().flatten().is_none() {
            landed_mid_stream += 1;
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(started.elapsed() < timeout, "a run outlived {timeout:?}");
    }
    landed_mid_stream
}

/// How long a `sluice run` may take to exit after SIGTERM (its final
/// checkpoint, on a loaded machine, in a debug build) before
/// [`sigterm_and_wait`] kills it and fails: a run that never exits fails
/// its test instead of holding CI until its time limit.
pub const SIGTERM_EXIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(180);

/// Sends SIGTERM to `child` (a `sluice run`), waits for it (at most
/// [`SIGTERM_EXIT_LIMIT`]), asserts a clean exit and returns what it
/// printed on stderr.
pub fn sigterm_and_wait(child: std::process::Child) -> String {
    let pid = child.id().to_string();
    let status = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(&pid)
        .status()
        .unwrap_or_else(|e| panic!("kill: {e}"));
    assert!(status.success(), "kill -TERM failed");
    // Waited for in a thread that also drains the child's pipes, so that a
    // run that does not exit can be killed and reported.
    let (sender, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    let output = match exited.recv_timeout(SIGTERM_EXIT_LIMIT) {
        Ok(output) => output.unwrap_or_else(|e| panic!("waiting for sluice: {e}")),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid])
                .status();
            panic!("sluice (pid {pid}) did not exit within {SIGTERM_EXIT_LIMIT:?} of SIGTERM");
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "SIGTERM must end the run cleanly: {stderr}"
    );
    stderr
}

/// Helpers for tests against the Kafka broker that `scripts/dev-services.sh
/// up` starts (or `$SLUICE_KAFKA_BOOTSTRAP`).
pub mod kafka {
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::{Offset, TopicPartitionList};
    use std::time::{Duration, Instant};

    /// The broker's address.
    pub fn bootstrap() -> String {
        std::env::var("SLUICE_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".to_string())
    }

    /// The lines of the dev broker's log (`scripts/dev-services.sh`) that
    /// contain `text` (e.g. a transactional id): its transaction
    /// coordinator logs every transaction it initialises, fences or times
    /// out. Empty when the log is elsewhere.
    pub fn broker_log_lines(text: &str) -> Vec<String> {
        let data =
            std::env::var("SLUICE_KAFKA_DATA").unwrap_or_else(|_| "/tmp/sluice-kafka".to_string());
        std::fs::read_to_string(std::path::Path::new(&data).join("broker.log"))
            .map(|log| {
                log.lines()
                    .filter(|line| line.contains(text))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A topic name no other test (or earlier run) uses.
    pub fn unique_topic(prefix: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        format!("{prefix}-{}-{nanos}", std::process::id())
    }

    /// A record as read back from Kafka.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Read {
        /// Key.
        pub key: Option<Vec<u8>>,
        /// Value.
        pub value: Vec<u8>,
        /// Headers, in order.
        pub headers: Vec<(String, Vec<u8>)>,
        /// Partition.
        pub partition: i32,
        /// Offset.
        pub offset: i64,
    }

    impl Read {
        /// The value of the first header named `name`, as text.
        pub fn header(&self, name: &str) -> Option<String> {
            self.headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        }
    }

    /// Creates `topic` with `partitions` partitions (idempotent producer
    /// writes create topics with one partition otherwise).
    pub fn create_topic(topic: &str, partitions: i32) {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        use rdkafka::client::DefaultClientContext;
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .create()
            .unwrap_or_else(|e| {
                panic!("Kafka admin client: {e} (is the broker up? scripts/dev-services.sh up)")
            });
        // Test records carry event times from 2023 as their Kafka
        // timestamps: with time-based retention the broker would delete
        // their segments as soon as they roll.
        let topics =
            [NewTopic::new(topic, partitions, TopicReplication::Fixed(1))
                .set("retention.ms", "-1")];
        let results =
            futures::executor::block_on(admin.create_topics(&topics, &AdminOptions::new()));
        for result in results.unwrap_or_else(|e| {
            panic!("creating {topic}: {e} (is the broker up? scripts/dev-services.sh up)")
        }) {
            if let Err((name, code)) = result {
                panic!("creating {name}: {code}");
            }
        }
    }

    /// A pipeline file reading Kafka topic `input` as group `group`, through
    /// the identity plugin, into Kafka topic `output`.
    #[derive(Debug, Clone)]
    pub struct IdentityPipeline<'a> {
        /// Pipeline name.
        pub name: &'a str,
        /// Input topic.
        pub input: &'a str,
        /// Consumer group.
        pub group: &'a str,
        /// Output topic.
        pub output: &'a str,
        /// Dead-letter topic, if any (default: stderr).
        pub dead_letter: Option<&'a str>,
        /// `pipeline.batch_size`.
        pub batch_size: usize,
        /// `pipeline.checkpoint_interval_ms`.
        pub checkpoint_interval_ms: u64,
        /// Extra lines for `[source.kafka]`, e.g. `value_format = "json"`.
        pub source_settings: &'a str,
    }

    impl IdentityPipeline<'_> {
        /// The pipeline file's text.
        pub fn toml(&self) -> String {
            let identity = super::plugin("identity");
            let bootstrap = bootstrap();
            let mut text = format!(
                "[pipeline]\nname = \"{name}\"\nbatch_size = {batch}\ncheckpoint_interval_ms = {checkpoint}\n\n\
                 [source.kafka]\nbootstrap_servers = \"{bootstrap}\"\ntopics = [\"{input}\"]\ngroup_id = \"{group}\"\n{settings}\n\n\
                 [[operators]]\nname = \"identity\"\nplugin = \"{identity}\"\n\n\
                 [sink.kafka]\nbootstrap_servers = \"{bootstrap}\"\ntopic = \"{output}\"\n",
                name = self.name,
                batch = self.batch_size,
                checkpoint = self.checkpoint_interval_ms,
                input = self.input,
                group = self.group,
                settings = self.source_settings,
                identity = identity.display(),
                output = self.output,
            );
            if let Some(dead_letter) = self.dead_letter {
                text.push_str(&format!(
                    "\n[dead_letter.kafka]\nbootstrap_servers = \"{bootstrap}\"\ntopic = \"{dead_letter}\"\n"
                ));
            }
            text
        }
    }

    /// Produces records with keys and values `k000000`, `k000001`, ... for
    /// `range`.
    pub fn produce_keys(topic: &str, range: std::ops::Range<usize>) {
        let keys: Vec<String> = range.map(|i| format!("k{i:06}")).collect();
        let records: Vec<Outgoing<'_>> = keys
            .iter()
            .map(|k| Outgoing {
                key: Some(k.as_bytes()),
                value: k.as_bytes(),
                ..Outgoing::default()
            })
            .collect();
        produce(topic, &records);
    }

    /// A record to produce.
    #[derive(Debug, Clone, Default)]
    pub struct Outgoing<'a> {
        /// Key.
        pub key: Option<&'a [u8]>,
        /// Value.
        pub value: &'a [u8],
        /// Headers.
        pub headers: Vec<(&'a str, &'a [u8])>,
        /// Record timestamp (ms); `None` lets the producer set it.
        pub timestamp: Option<i64>,
    }

    /// Sends `record`, waiting while the producer's queue is full; any
    /// other error fails the test.
    pub fn send<K, P>(producer: &BaseProducer, mut record: BaseRecord<'_, K, P>)
    where
        K: rdkafka::message::ToBytes + ?Sized,
        P: rdkafka::message::ToBytes + ?Sized,
    {
        use rdkafka::error::KafkaError;
        use rdkafka::types::RDKafkaErrorCode;
        loop {
            match producer.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), unsent)) => {
                    record = unsent;
                    producer.poll(Duration::from_millis(5));
                }
                Err((error, _)) => panic!("producing: {error}"),
            }
        }
    }

    /// Produces `records` to `topic` and waits until all are acknowledged.
    pub fn produce(topic: &str, records: &[Outgoing<'_>]) {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .set("enable.idempotence", "true")
            .create()
            .unwrap_or_else(|e| panic!("Kafka producer: {e}"));
        for outgoing in records {
            let mut owned = OwnedHeaders::new();
            for (name, value) in &outgoing.headers {
                owned = owned.insert(Header {
                    key: name,
                    value: Some(*value),
                });
            }
            let mut record = BaseRecord::to(topic).payload(outgoing.value).headers(owned);
            if let Some(key) = outgoing.key {
                record = record.key(key);
            }
            if let Some(timestamp) = outgoing.timestamp {
                record = record.timestamp(timestamp);
            }
            send(&producer, record);
        }
        producer
            .flush(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("flushing: {e} (is the broker up?)"));
    }

    /// A consumer assigned `topic` partitions `0..partitions` from their
    /// beginning, with its own group, reading with `isolation`
    /// (`read_committed` or `read_uncommitted`) and, if `eof`, reporting
    /// the end of each partition.
    fn reader(topic: &str, partitions: i32, isolation: &str, eof: bool) -> BaseConsumer {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .set("group.id", unique_topic("reader"))
            .set("isolation.level", isolation)
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", if eof { "true" } else { "false" })
            .create()
            .unwrap_or_else(|e| panic!("Kafka consumer: {e}"));
        let mut assignment = TopicPartitionList::new();
        for partition in 0..partitions {
            assignment
                .add_partition_offset(topic, partition, Offset::Beginning)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        consumer
            .assign(&assignment)
            .unwrap_or_else(|e| panic!("assign: {e}"));
        consumer
    }

    /// A consumed message as a [`Read`].
    fn to_read(message: &rdkafka::message::BorrowedMessage<'_>) -> Read {
        Read {
            key: message.key().map(<[u8]>::to_vec),
            value: message.payload().unwrap_or_default().to_vec(),
            headers: message
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                        .collect()
                })
                .unwrap_or_default(),
            partition: message.partition(),
            offset: message.offset(),
        }
    }

    /// Reads `topic` (all partitions, `read_committed`) until `expected`
    /// records arrived or `timeout` passed; returns what arrived.
    pub fn read(topic: &str, partitions: i32, expected: usize, timeout: Duration) -> Vec<Read> {
        let consumer = reader(topic, partitions, "read_committed", false);
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        while out.len() < expected && Instant::now() < deadline {
            if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
                out.push(to_read(&message));
            }
        }
        out
    }

    /// Every record of `topic` partitions `0..partitions`, read to the end
    /// with `read_committed` (`committed = true`) or `read_uncommitted`;
    /// and whether every partition's end as seen by the reader is its high
    /// watermark (with `read_committed`: no transaction is left open, which
    /// would hold the reader back at the last stable offset).
    pub fn read_to_end(topic: &str, partitions: i32, committed: bool) -> (Vec<Read>, bool) {
        let isolation = match committed {
            true => "read_committed",
            false => "read_uncommitted",
        };
        let consumer = reader(topic, partitions, isolation, true);
        let highs = crate::kafka_end_offsets(topic, partitions);
        let mut ended = std::collections::BTreeMap::new();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        while ended.len() < partitions as usize {
            assert!(
                Instant::now() < deadline,
                "reading {topic} to its end timed out"
            );
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(message)) => out.push(to_read(&message)),
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(partition))) => {
                    let position = consumer
                        .position()
                        .ok()
                        .and_then(|p| p.find_partition(topic, partition).map(|e| e.offset()));
                    ended.insert(partition, position);
                }
                Some(Err(error)) => panic!("reading {topic}: {error}"),
                None => {}
            }
        }
        let at_high_watermark = ended.iter().all(|(partition, position)| {
            matches!(position, Some(Offset::Offset(o)) if *o == highs[*partition as usize])
                || highs[*partition as usize] == 0
        });
        (out, at_high_watermark)
    }

    /// A `read_committed` reader that keeps what it read, for tests that
    /// wait until some output has arrived without reading it all again.
    pub struct Tail {
        consumer: BaseConsumer,
        /// Every record read so far.
        pub records: Vec<Read>,
    }

    impl Tail {
        /// Reads `topic` partitions `0..partitions` from the beginning.
        pub fn new(topic: &str, partitions: i32) -> Tail {
            Tail {
                consumer: reader(topic, partitions, "read_committed", false),
                records: Vec::new(),
            }
        }

        /// Reads what has arrived (waiting at most 100 ms for the first
        /// record); returns how many records it has now.
        pub fn catch_up(&mut self) -> usize {
            let mut wait = Duration::from_millis(100);
            while let Some(polled) = self.consumer.poll(wait) {
                if let Ok(message) = polled {
                    self.records.push(to_read(&message));
                }
                wait = Duration::ZERO;
            }
            self.records.len()
        }
    }

    /// The group's committed offsets of `topic` partitions `0..partitions`.
    pub fn committed(group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .set("group.id", group)
            .create()
            .unwrap_or_else(|e| panic!("Kafka consumer: {e}"));
        let mut list = TopicPartitionList::new();
        for partition in 0..partitions {
            list.add_partition(topic, partition);
        }
        // A broker that has just started answers "not coordinator" until
        // it has loaded the group metadata: ask again until it answers.
        let deadline = Instant::now() + Duration::from_secs(60);
        let committed = loop {
            match consumer.committed_offsets(list.clone(), Duration::from_secs(10)) {
                Ok(committed) => break committed,
                Err(error) if Instant::now() < deadline => {
                    eprintln!("committed offsets of {group}: {error}; asking again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(error) => panic!("committed offsets: {error}"),
            }
        };
        (0..partitions)
            .map(
                |p| match committed.find_partition(topic, p).map(|e| e.offset()) {
                    Some(Offset::Offset(offset)) => Some(offset),
                    _ => None,
                },
            )
            .collect()
    }
}

/// The partition's end offset (next offset to be written), per partition.
pub fn kafka_end_offsets(topic: &str, partitions: i32) -> Vec<i64> {
    kafka_watermarks(topic, partitions)
        .into_iter()
        .map(|(_, high)| high)
        .collect()
}

/// The first offset still stored of each partition `0..partitions` of
/// `topic` (above 0 where records were deleted).
pub fn kafka_low_offsets(topic: &str, partitions: i32) -> Vec<i64> {
    kafka_watermarks(topic, partitions)
        .into_iter()
        .map(|(low, _)| low)
        .collect()
}

/// The (low, high) watermarks of each partition `0..partitions` of `topic`.
fn kafka_watermarks(topic: &str, partitions: i32) -> Vec<(i64, i64)> {
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka::bootstrap())
        .create()
        .unwrap_or_else(|e| panic!("Kafka consumer: {e}"));
    (0..partitions)
        // A topic not yet written to may not exist: (0, 0).
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, std::time::Duration::from_secs(10))
                .unwrap_or_default()
        })
        .collect()
}

/// Helpers for tests against the S3 server that `scripts/dev-services.sh up`
/// starts (moto, or `$SLUICE_S3_ENDPOINT`).
pub mod s3 {
    use sluice_host::checkpoint::CheckpointStorage as _;

    /// The server's endpoint URL.
    pub fn endpoint() -> String {
        std::env::var("SLUICE_S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9000".to_string())
    }

    /// Credentials and region for the test server, as environment
    /// variables for a `sluice` process.
    pub fn environment() -> Vec<(&'static str, &'static str)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "sluice-test"),
            ("AWS_SECRET_ACCESS_KEY", "sluice-test"),
            ("AWS_REGION", "us-east-1"),
        ]
    }

    /// Puts [`environment`] into this test process's environment, where
    /// S3 clients opened in-process read their credentials.
    pub fn use_test_credentials() {
        for (name, value) in environment() {
            // SAFETY: every test sets the same values, before its clients
            // read them.
            unsafe { std::env::set_var(name, value) };
        }
    }

    /// Creates `bucket` (PUT on the bucket, path style; moto needs no
    /// signature for it).
    pub fn create_bucket(bucket: &str) {
        let endpoint = endpoint();
        let address = endpoint.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address).unwrap_or_else(|e| {
            panic!("S3 server at {endpoint}: {e} (scripts/dev-services.sh up)")
        });
        use std::io::{Read as _, Write as _};
        let request = format!(
            "PUT /{bucket} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "creating bucket {bucket}: {response}"
        );
    }

    /// The storage the pipeline `tenant`/`pipeline` checkpoints to in
    /// `s3://bucket/prefix`.
    pub fn storage(bucket: &str, prefix: &str) -> sluice_host::checkpoint::S3Storage {
        use_test_credentials();
        sluice_host::checkpoint::S3Storage::connect(
            bucket,
            prefix,
            &sluice_host::checkpoint::S3Options {
                endpoint: Some(endpoint()),
                region: Some("us-east-1".into()),
                path_style: Some(true),
                multipart_threshold_bytes: None,
                credentials: None,
            },
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Multipart uploads started and neither completed nor aborted, under
    /// `storage`'s root (aborts them).
    pub fn abort_incomplete(storage: &sluice_host::checkpoint::S3Storage) -> usize {
        storage
            .abort_incomplete_uploads()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every key under the storage's root.
    pub fn keys(storage: &sluice_host::checkpoint::S3Storage) -> Vec<String> {
        storage.list("").unwrap_or_else(|e| panic!("{e}"))
    }
}

/// How many SIGKILLs the long chaos tests deal: `SLUICE_CHAOS_KILLS`, or 8.
/// The test command runs this short version (random moments, so that runs
/// add up to more schedules); soak runs set 20 or 100
/// (docs/benchmarks.md, "Chaos runs").
pub fn chaos_kills() -> usize {
    std::env::var("SLUICE_CHAOS_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
}

/// Random moments for chaos tests: a small xorshift generator whose seed
/// (from the clock) is printed, so that a failing schedule can be told.
pub struct Chaos(u64);

impl Chaos {
    /// A generator seeded from the clock (the seed is printed).
    pub fn new() -> Chaos {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        eprintln!("chaos seed {seed}");
        Chaos(seed)
    }

    /// A number in `0..bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound.max(1)
    }
}

impl Default for Chaos {
    fn default() -> Self {
        Chaos::new()
    }
}

/// The environment variable that puts the hostile-plugin tests under CPU
/// load: `N` busy processes per core run while each test does.
pub const CPU_LOAD_ENV: &str = "SLUICE_TEST_CPU_LOAD";

/// Busy processes that saturate the machine's cores while this lives (when
/// [`CPU_LOAD_ENV`] is set; nothing otherwise): fault isolation must hold
/// on a loaded machine, where wall-clock time and CPU time part ways.
pub struct CpuLoad(Vec<std::process::Child>);

/// Starts the load [`CPU_LOAD_ENV`] asks for.
pub fn cpu_load() -> CpuLoad {
    let per_core: usize = std::env::var(CPU_LOAD_ENV)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let busy = (0..per_core * cores)
        .map(|_| {
            std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .unwrap_or_else(|e| panic!("starting a busy process: {e}"))
        })
        .collect();
    CpuLoad(busy)
}

impl CpuLoad {
    /// Whether busy processes are running.
    pub fn is_loaded(&self) -> bool {
        !self.0.is_empty()
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The Python with pyiceberg (installed by `scripts/setup-toolchain.sh`;
/// `SLUICE_TOOLS_PYTHON` overrides it).
pub fn tools_python() -> String {
    std::env::var("SLUICE_TOOLS_PYTHON").unwrap_or_else(|_| {
        format!(
            "{}/.cache/sluice/venv-tools/bin/python",
            std::env::var("HOME").unwrap_or_default()
        )
    })
}

/// What pyiceberg, an independent reader, sees in `table` (`ns.name`) of
/// the SQL catalog `sluice` in `catalog_db` with its warehouse directory
/// `warehouse`: `{"rows": [...], "snapshots": [{"summary": ...}, ...] (in
/// commit order), "files": [...]}`.
pub fn read_iceberg_table(catalog_db: &Path, warehouse: &Path, table: &str) -> serde_json::Value {
    read_iceberg(
        &catalog_db.display().to_string(),
        &format!("file://{}", warehouse.display()),
        table,
    )
}

/// What pyiceberg sees in `table` of the SQL catalog `catalog_db` whose
/// warehouse is `warehouse` (e.g. `s3://bucket/prefix` on the test S3
/// server).
pub fn read_iceberg_table_at(catalog_db: &Path, warehouse: &str, table: &str) -> serde_json::Value {
    read_iceberg(&catalog_db.display().to_string(), warehouse, table)
}

/// What pyiceberg sees in `table` of the REST catalog at `uri`.
pub fn read_iceberg_rest_table(uri: &str, table: &str) -> serde_json::Value {
    read_iceberg(uri, "", table)
}

/// The URI of the Iceberg REST catalog that `scripts/dev-services.sh up`
/// starts (or `$SLUICE_REST_CATALOG_URI`).
pub fn rest_catalog_uri() -> String {
    std::env::var("SLUICE_REST_CATALOG_URI").unwrap_or_else(|_| "http://127.0.0.1:8181".into())
}

fn read_iceberg(catalog: &str, warehouse: &str, table: &str) -> serde_json::Value {
    let output = std::process::Command::new(tools_python())
        .arg(repo_root().join("tests/python/read_iceberg.py"))
        .arg("sluice")
        .arg(catalog)
        .arg(warehouse)
        .arg(table)
        .output()
        .unwrap_or_else(|e| panic!("running pyiceberg ({}): {e}", tools_python()));
    assert!(
        output.status.success(),
        "pyiceberg failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("pyiceberg output: {e}"))
}

/// The checkpoint ids in the snapshot summaries of a table read by
/// [`read_iceberg_table`], in commit order; fails the test if a data file
/// is referenced twice.
pub fn iceberg_checkpoints(table: &serde_json::Value) -> Vec<u64> {
    let files: Vec<&str> = table["files"]
        .as_array()
        .map(|files| files.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    let distinct: std::collections::BTreeSet<&&str> = files.iter().collect();
    assert_eq!(
        distinct.len(),
        files.len(),
        "a data file is referenced twice"
    );
    table["snapshots"]
        .as_array()
        .map(|snapshots| {
            snapshots
                .iter()
                .filter_map(|s| s["summary"]["sluice.checkpoint"].as_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A line of a `format = "record"` output without what differs between two
/// runs of the same input: when, and by which plugin build, a record was
/// dead-lettered. Lines that are not JSON come back as they are.
pub fn comparable_record_line(line: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(mut record) => {
            if let Some(headers) = record["headers"].as_object_mut() {
                headers.remove("sluice.dlq.time");
                headers.remove("sluice.dlq.plugin");
            }
            record.to_string()
        }
        Err(_) => line.to_string(),
    }
}

/// Helpers for tests against the schema registry that
/// `scripts/dev-services.sh up` starts (Apicurio's Confluent-compatible
/// API, or `$SLUICE_REGISTRY_URL`), with Confluent's own Python client as
/// the independent producer and reader (`tests/python/confluent_avro.py`).
pub mod registry {
    use std::path::Path;

    /// The Confluent-compatible API's base URL.
    pub fn url() -> String {
        std::env::var("SLUICE_REGISTRY_URL")
            .unwrap_or_else(|_| "http://127.0.0.1:8081/apis/ccompat/v7".to_string())
    }

    fn confluent_avro(arguments: &[&str], stdin: &str) -> String {
        use std::io::Write as _;
        let mut child = std::process::Command::new(super::tools_python())
            .arg(super::repo_root().join("tests/python/confluent_avro.py"))
            .args(arguments)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("running confluent_avro.py ({}): {e}", super::tools_python())
            });
        if let Some(mut input) = child.stdin.take() {
            input
                .write_all(stdin.as_bytes())
                .unwrap_or_else(|e| panic!("writing to confluent_avro.py: {e}"));
        }
        let output = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("confluent_avro.py: {e}"));
        assert!(
            output.status.success(),
            "confluent_avro.py {arguments:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Produces `values` to `topic` with Confluent's Avro serializer,
    /// which registers `schema_file` under `<topic>-value`; returns the
    /// schema id the values carry.
    pub fn produce_avro(topic: &str, schema_file: &Path, values: &[serde_json::Value]) -> u32 {
        let lines: String = values.iter().map(|v| format!("{v}\n")).collect();
        let printed = confluent_avro(
            &[
                "produce",
                &crate::kafka::bootstrap(),
                &url(),
                topic,
                &schema_file.display().to_string(),
            ],
            &lines,
        );
        let summary: serde_json::Value =
            serde_json::from_str(&printed).unwrap_or_else(|e| panic!("{e}: {printed}"));
        assert_eq!(summary["produced"].as_u64(), Some(values.len() as u64));
        summary["schema_id"]
            .as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .unwrap_or_else(|| panic!("no schema id in {printed}"))
    }

    /// Reads `count` values of `topic` (read_committed) with Confluent's
    /// Avro deserializer: `(schema id, value)` each.
    pub fn consume_avro(topic: &str, count: usize) -> Vec<(u32, serde_json::Value)> {
        let printed = confluent_avro(
            &[
                "consume",
                &crate::kafka::bootstrap(),
                &url(),
                topic,
                &count.to_string(),
            ],
            "",
        );
        printed
            .lines()
            .map(|line| {
                let read: serde_json::Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
                let id = read["schema_id"].as_u64().unwrap_or_default() as u32;
                (id, read["value"].clone())
            })
            .collect()
    }

    /// Registers `schema` (JSON text) under `subject` with a plain HTTP
    /// call (curl); the registry's answer, e.g. `{"id": 7}` or a 409 error.
    pub fn register(subject: &str, schema: &str) -> serde_json::Value {
        let body = serde_json::json!({ "schema": schema }).to_string();
        let output = std::process::Command::new("curl")
            .args(["-s", "-X", "POST", "-H"])
            .arg("Content-Type: application/vnd.schemaregistry.v1+json")
            .arg("--data")
            .arg(body)
            .arg(format!("{}/subjects/{subject}/versions", url()))
            .output()
            .unwrap_or_else(|e| panic!("curl: {e}"));
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "registry answer: {e}: {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }

    /// `body` framed in the Confluent wire format with schema `id`.
    pub fn framed(id: u32, body: &[u8]) -> Vec<u8> {
        let mut value = vec![0u8];
        value.extend_from_slice(&id.to_be_bytes());
        value.extend_from_slice(body);
        value
    }
}

/// What exactly-once tests check in a pipeline's Kafka outputs: every
/// input id once (counts or dead letters), running counts 1..n per key,
/// and window sums equal to a model of the input.
pub mod outputs {
    use crate::Progress;
    use crate::kafka::{committed, read_to_end};
    use std::collections::BTreeMap;

    /// Whether `group` committed every offset of `topic` (done), or how
    /// many it did.
    pub fn commit_progress(group: &str, topic: &str, partitions: i32) -> Progress {
        let ends = crate::kafka_end_offsets(topic, partitions);
        let committed = committed(group, topic, partitions);
        if committed
            .iter()
            .zip(&ends)
            .all(|(committed, end)| *committed == Some(*end))
        {
            return Progress::Done;
        }
        Progress::At(committed.iter().flatten().sum())
    }

    /// What a `read_committed` reader of a running-count pipeline's outputs
    /// sees, against ids `0..total`.
    pub struct Verdict {
        /// Ids seen more than once.
        pub duplicated: Vec<u64>,
        /// Some ids never seen (at most five).
        pub missing: Vec<u64>,
        /// The running counts seen per key.
        pub counts_by_key: BTreeMap<String, Vec<u64>>,
        /// Dead letters `expected_dead_letter` did not expect (say, late).
        pub unexpected_dead_letters: Vec<String>,
    }

    impl Verdict {
        /// Reads `counts` (values with `id`, `key`, `count`) and
        /// `dead_letters` (values with `id`) to their ends; a dead letter
        /// whose id `expected_dead_letter` refuses is unexpected. Fails if
        /// a transaction is left open on either.
        pub fn read(
            counts: (&str, i32),
            dead_letters: (&str, i32),
            total: u64,
            expected_dead_letter: impl Fn(u64) -> bool,
        ) -> Verdict {
            let (count_records, clean) = read_to_end(counts.0, counts.1, true);
            assert!(clean, "a transaction is left open on {}", counts.0);
            let (dead, clean) = read_to_end(dead_letters.0, dead_letters.1, true);
            assert!(clean, "a transaction is left open on {}", dead_letters.0);
            let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
            let mut counts_by_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
            for record in &count_records {
                let value: serde_json::Value = serde_json::from_slice(&record.value).expect("JSON");
                *seen.entry(value["id"].as_u64().expect("id")).or_default() += 1;
                counts_by_key
                    .entry(value["key"].as_str().expect("key").to_string())
                    .or_default()
                    .push(value["count"].as_u64().expect("count"));
            }
            let mut unexpected_dead_letters = Vec::new();
            for record in &dead {
                let value: serde_json::Value = serde_json::from_slice(&record.value).expect("JSON");
                let id = value["id"].as_u64().expect("id");
                if !expected_dead_letter(id) {
                    unexpected_dead_letters.push(format!("{value} ({:?})", record.headers));
                }
                *seen.entry(id).or_default() += 1;
            }
            Verdict {
                duplicated: seen
                    .iter()
                    .filter(|(_, n)| **n > 1)
                    .map(|(id, _)| *id)
                    .collect(),
                missing: (0..total)
                    .filter(|id| !seen.contains_key(id))
                    .take(5)
                    .collect(),
                counts_by_key,
                unexpected_dead_letters,
            }
        }

        /// Fails unless every id was seen once, no dead letter was
        /// unexpected, and each key's running counts are exactly 1..n
        /// (state and output from the same cut).
        pub fn assert_exactly_once(self) {
            assert!(
                self.duplicated.is_empty(),
                "{} ids seen more than once, e.g. {:?}, the last {:?}",
                self.duplicated.len(),
                &self.duplicated[..self.duplicated.len().min(5)],
                self.duplicated.last()
            );
            assert!(
                self.missing.is_empty(),
                "ids never seen: {:?}",
                self.missing
            );
            assert!(
                self.unexpected_dead_letters.is_empty(),
                "unexpected dead letters: {:?}",
                &self.unexpected_dead_letters[..self.unexpected_dead_letters.len().min(3)]
            );
            for (key, mut values) in self.counts_by_key {
                values.sort_unstable();
                let expected: Vec<u64> = (1..=values.len() as u64).collect();
                assert_eq!(values, expected, "running counts of key {key}");
            }
        }
    }

    /// The sums of `amount` per `key` and 1 s tumbling window of `ts` over
    /// the JSON `inputs` (inputs without a key are left out): what a
    /// `window = { tumbling_ms = 1000 }` sum per key must write.
    pub fn window_model(inputs: impl Iterator<Item = String>) -> BTreeMap<(String, i64), f64> {
        let mut model = BTreeMap::new();
        for input in inputs {
            let value: serde_json::Value = serde_json::from_str(&input).expect("JSON");
            let Some(key) = value["key"].as_str() else {
                continue;
            };
            let ts = value["ts"].as_i64().expect("ts");
            *model
                .entry((key.to_string(), ts - ts.rem_euclid(1000)))
                .or_default() += value["amount"].as_f64().expect("amount");
        }
        model
    }

    /// Fails unless `topic` holds each window result once, none of them an
    /// update (a late record), and they equal `model`.
    pub fn assert_windows_match(
        topic: &str,
        partitions: i32,
        model: &BTreeMap<(String, i64), f64>,
    ) {
        let (windows, clean) = read_to_end(topic, partitions, true);
        assert!(clean, "a transaction is left open on {topic}");
        let mut results: BTreeMap<(String, i64), f64> = BTreeMap::new();
        for record in &windows {
            let value: serde_json::Value = serde_json::from_slice(&record.value).expect("JSON");
            let key = (
                value["key"].as_str().expect("key").to_string(),
                value["window_start"].as_i64().expect("window_start"),
            );
            assert_eq!(value["update"], false, "no record is late: {value}");
            let previous = results.insert(key.clone(), value["result"].as_f64().expect("result"));
            assert!(previous.is_none(), "window {key:?} written twice");
        }
        assert_eq!(results.len(), model.len(), "number of windows");
        assert!(&results == model, "window sums differ from the model");
    }
}

/// Helpers for tests against the PostgreSQL server that
/// `scripts/dev-services.sh up` starts (or `$SLUICE_POSTGRES_URL`), through
/// `psql`, an independent client.
pub mod postgres {
    use std::process::Command;

    /// The server's URL.
    pub fn url() -> String {
        std::env::var("SLUICE_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:55432/postgres".to_string())
    }

    /// A table name no other test uses (`prefix_<pid>_<n>`).
    pub fn unique_table(prefix: &str) -> String {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        format!(
            "{prefix}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Runs `sql` (one or more statements) and returns what it printed:
    /// one line per row, columns separated by `|`.
    pub fn psql(sql: &str) -> String {
        let output = Command::new("psql")
            .args([
                url().as_str(),
                "-X",
                "-q",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ])
            .output()
            .unwrap_or_else(|e| panic!("psql: {e} (scripts/dev-services.sh up installs it)"));
        assert!(
            output.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The rows `query` returns, a line each (`a|b|c`).
    pub fn rows(query: &str) -> Vec<String> {
        psql(query).lines().map(str::to_string).collect()
    }

    /// Stops the server (cutting its sessions), keeping its data.
    pub fn stop() {
        services("stop-postgres");
    }

    /// Starts the server [`stop`] stopped.
    pub fn start() {
        services("start-postgres");
    }

    fn services(command: &str) {
        let status = Command::new(super::repo_root().join("scripts/dev-services.sh"))
            .arg(command)
            .status()
            .unwrap_or_else(|e| panic!("dev-services.sh: {e}"));
        assert!(status.success(), "dev-services.sh {command} failed");
    }
}
