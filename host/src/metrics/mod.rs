//! Counters a running pipeline keeps, read by progress lines, summaries,
//! the Prometheus endpoint and the dashboard.
//!
//! All counters are atomics updated by the threads that own the work; readers
//! take a [`PipelineSnapshot`] at any time without stopping the pipeline.
//! Durations are [`DurationHistogram`]s. [`exposition`] turns snapshots into
//! the Prometheus text format; [`status`] into the JSON the dashboard reads.

pub mod exposition;
pub(crate) mod histogram;
pub mod status;

pub use histogram::{DurationHistogram, HistogramSnapshot};

use crate::sync::lock;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How many samples a [`Recent`] keeps.
pub const RECENT_SAMPLES: usize = 20;

/// The latest few samples of something (faults, dead letters), newest
/// last: what an operator looks at first when a pipeline misbehaves.
#[derive(Debug)]
pub struct Recent<T> {
    items: Mutex<VecDeque<T>>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Recent {
            items: Mutex::new(VecDeque::with_capacity(RECENT_SAMPLES)),
        }
    }
}

impl<T: Clone> Recent<T> {
    /// Keeps `item`, forgetting the oldest beyond [`RECENT_SAMPLES`].
    pub fn push(&self, item: T) {
        let mut items = lock(&self.items);
        if items.len() == RECENT_SAMPLES {
            items.pop_front();
        }
        items.push_back(item);
    }

    /// The samples kept, oldest first.
    pub fn list(&self) -> Vec<T> {
        let items = lock(&self.items);
        items.iter().cloned().collect()
    }
}

/// Why a record was dead-lettered, as a class: what the
/// `sluice_dead_letters_total` metric is labelled with (the reason itself is
/// free text, in the record's `sluice.dlq.reason` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeadLetterClass {
    /// The plugin rejected it (its own dead-letter route or failure).
    Rejected,
    /// The plugin faulted on it (trap, CPU deadline, memory limit, bad
    /// output).
    PluginFault,
    /// Later than the allowed lateness.
    Late,
    /// The host could not process it: no key, an event time out of range,
    /// a value an aggregate cannot take.
    Invalid,
}

impl DeadLetterClass {
    /// Every class, in [`DeadLetterClass::index`] order.
    pub const ALL: [DeadLetterClass; 4] = [
        DeadLetterClass::Rejected,
        DeadLetterClass::PluginFault,
        DeadLetterClass::Late,
        DeadLetterClass::Invalid,
    ];

    /// The class's label value.
    pub fn label(self) -> &'static str {
        match self {
            DeadLetterClass::Rejected => "rejected",
            DeadLetterClass::PluginFault => "plugin_fault",
            DeadLetterClass::Late => "late",
            DeadLetterClass::Invalid => "invalid",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A plugin fault, as kept for "recent errors".
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FaultSample {
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// The operator (instance) whose plugin faulted.
    pub operator: String,
    /// What kind of fault (`Deadline`, `MemoryLimit`, `Trap`, ...).
    pub kind: String,
    /// What the host saw.
    pub message: String,
}

/// A dead-lettered record, as kept for "dead-letter samples".
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetterSample {
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// The operator that dead-lettered it.
    pub operator: String,
    /// Why.
    pub reason: String,
    /// Where it came from: topic (or file, generator), partition, offset.
    pub source: (String, i32, i64),
    /// The start of its value (lossy UTF-8, at most
    /// [`DeadLetterSample::VALUE_PREVIEW`] bytes).
    pub value: String,
}

impl DeadLetterSample {
    /// Bytes of a value a sample keeps.
    pub const VALUE_PREVIEW: usize = 512;

    /// The sample of a record marked by [`crate::record::into_dead_letter`].
    pub fn of(record: &crate::record::Record) -> Self {
        use crate::record::dead_letter_headers as h;
        let header = |name: &str| {
            record
                .header(name)
                .map(|value| String::from_utf8_lossy(value).into_owned())
                .unwrap_or_default()
        };
        let value = &record.value[..record.value.len().min(Self::VALUE_PREVIEW)];
        DeadLetterSample {
            at_ms: header(h::TIME)
                .parse()
                .unwrap_or_else(|_| crate::time::now_ms()),
            operator: header(h::OPERATOR),
            reason: header(h::REASON),
            source: (
                record.source.topic.to_string(),
                record.source.partition,
                record.source.offset,
            ),
            value: String::from_utf8_lossy(value).into_owned(),
        }
    }
}

/// Counters of one operator.
#[derive(Debug, Default)]
pub struct OperatorMetrics {
    /// Operator name (`name#worker` in a keyed stage).
    pub name: String,
    /// The keyed stage it runs in (0: the head, or the whole chain): which
    /// threads, and so which channels, are around it.
    pub stage: usize,
    /// Records handed to the operator.
    pub records_in: AtomicU64,
    /// Records it emitted on its main output.
    pub records_out: AtomicU64,
    /// Records it emitted on side outputs.
    pub side_out: AtomicU64,
    /// Records it dead-lettered.
    pub dead_letters: AtomicU64,
    /// Of the dead letters, how many of each [`DeadLetterClass`].
    pub dead_letter_classes: [AtomicU64; 4],
    /// Records later than the allowed lateness (sent to the late output).
    pub late_records: AtomicU64,
    /// Bytes (key + value) of the records handed to the operator.
    pub bytes_in: AtomicU64,
    /// Bytes (key + value) of the records it emitted on its main output.
    pub bytes_out: AtomicU64,
    /// Calls into its plugin (batches, single records, `init`).
    pub plugin_calls: AtomicU64,
    /// How long its plugin calls took (wall time).
    pub plugin_call_seconds: DurationHistogram,
    /// Linear memory of its plugin instance, bytes (as last grown).
    pub plugin_memory_bytes: AtomicU64,
    /// The plugin it runs: name and sha256 (empty without a plugin).
    pub plugin: Mutex<Option<PluginIdentity>>,
    /// Plugin faults by kind (`Deadline`, `MemoryLimit`, `Trap`, ...).
    pub faults_by_kind: Mutex<BTreeMap<String, u64>>,
    /// Plugin traps (including deadline and memory-limit traps).
    pub traps: AtomicU64,
    /// The latest plugin faults.
    pub recent_faults: Recent<FaultSample>,
    /// Of the traps, calls stopped at their CPU deadline.
    pub deadline_hits: AtomicU64,
    /// Of the traps, calls stopped at the memory limit.
    pub memory_limit_hits: AtomicU64,
    /// Records dead-lettered because the plugin faulted on them (not
    /// records the plugin itself rejected).
    pub faulted_records: AtomicU64,
    /// Times its plugin instance was re-created after a trap.
    pub reinstantiations: AtomicU64,
    /// Time its plugin calls waited for the tenant's CPU share,
    /// nanoseconds.
    pub cpu_throttled_ns: AtomicU64,
    /// Time spent inside the operator, nanoseconds.
    pub busy_ns: AtomicU64,
    /// Time the operator's thread spent blocked handing output to the next
    /// thread (a key-by exchange or the sinks) because it was full,
    /// nanoseconds: downstream backpressure. Operators chained in one thread
    /// share it, as in Flink.
    pub backpressured_ns: AtomicU64,
    /// Counters the plugin reported through `host.counter-add`.
    pub plugin_counters: Mutex<BTreeMap<String, u64>>,
    /// The operator's current event-time watermark (ms; `i64::MIN` before
    /// the first).
    pub watermark: AtomicI64,
    /// Size of the operator's state, bytes (as last measured).
    pub state_bytes: AtomicU64,
    /// The largest state size measured, bytes.
    pub state_peak_bytes: AtomicU64,
    /// Keys in the operator's state (as last measured; an estimate for
    /// RocksDB).
    pub state_keys: AtomicU64,
    /// Size of the operator's state on disk, bytes (as last measured).
    pub state_disk_bytes: AtomicU64,
    /// The largest on-disk size measured, bytes.
    pub state_disk_peak_bytes: AtomicU64,
}

/// The operator counter of records whose key and aggregate fields the
/// window took from its source's parse ([`crate::record::ReadFields`])
/// instead of parsing the value.
pub const RECORDS_READ_AHEAD_COUNTER: &str = "records_read_ahead";

/// The operator counter of records whose fields an aggregate plugin on
/// the projected path got from its source's parse (the spans of
/// [`crate::record::FieldSpans`]) instead of the host finding them while
/// packing the batch.
pub const RECORDS_PROJECTED_AHEAD_COUNTER: &str = "records_projected_ahead";

/// Kinds of plugin faults (the runtime's `PluginFault`), as counted by
/// [`OperatorMetrics::count_fault`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The call ran past its CPU deadline and was interrupted.
    Deadline,
    /// The plugin tried to grow its memory past its limit.
    MemoryLimit,
    /// Any other trap (a panic, `unreachable`, out-of-bounds access, ...).
    Trap,
    /// The plugin returned output that breaks the contract.
    BadOutput,
    /// The state backend failed (not the plugin's fault, nor the record's:
    /// the operator must stop).
    State,
}

/// Which plugin an operator runs, for the `sluice_plugin_info` metric.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PluginIdentity {
    /// Plugin name.
    pub name: String,
    /// SHA-256 of its component, hex.
    pub sha256: String,
}

impl OperatorMetrics {
    /// Counts a dead letter of `class`.
    pub fn count_dead_letter(&self, class: DeadLetterClass) {
        add(&self.dead_letters, 1);
        add(&self.dead_letter_classes[class.index()], 1);
    }

    /// Counts `records` handed to the operator, and their bytes.
    pub fn count_in(&self, records: &[crate::record::Record]) {
        add(&self.records_in, records.len() as u64);
        add(&self.bytes_in, record_bytes(records));
    }

    /// Counts one record emitted on the main output, and its bytes.
    pub fn count_out(&self, record: &crate::record::Record) {
        add(&self.records_out, 1);
        add(&self.bytes_out, record_bytes(std::slice::from_ref(record)));
    }

    /// Counts `records` emitted on the main output, of `bytes` in all
    /// ([`record_bytes`]): [`OperatorMetrics::count_out`] for a batch.
    pub fn count_out_many(&self, records: u64, bytes: u64) {
        add(&self.records_out, records);
        add(&self.bytes_out, bytes);
    }

    /// Records which plugin the operator runs (at start and at a swap).
    pub fn set_plugin(&self, plugin: PluginIdentity) {
        *lock(&self.plugin) = Some(plugin);
    }

    /// Counts a plugin fault (a trap, and its kind) and keeps it among the
    /// recent ones.
    pub fn count_fault(&self, kind: FaultKind, message: &str) {
        add(&self.traps, 1);
        *lock(&self.faults_by_kind)
            .entry(format!("{kind:?}"))
            .or_default() += 1;
        match kind {
            FaultKind::Deadline => add(&self.deadline_hits, 1),
            FaultKind::MemoryLimit => add(&self.memory_limit_hits, 1),
            _ => {}
        }
        self.recent_faults.push(FaultSample {
            at_ms: crate::time::now_ms(),
            operator: self.name.clone(),
            kind: format!("{kind:?}"),
            message: message.to_string(),
        });
    }

    /// Records a measurement of the operator's state.
    pub fn set_state_usage(&self, usage: crate::state::StateUsage) {
        self.state_bytes.store(usage.bytes, Ordering::Relaxed);
        self.state_peak_bytes
            .fetch_max(usage.bytes, Ordering::Relaxed);
        self.state_keys.store(usage.keys, Ordering::Relaxed);
        self.state_disk_bytes
            .store(usage.disk_bytes, Ordering::Relaxed);
        self.state_disk_peak_bytes
            .fetch_max(usage.disk_bytes, Ordering::Relaxed);
    }

    /// New zeroed counters for operator `name`.
    pub fn new(name: impl Into<String>) -> Arc<Self> {
        Self::new_in_stage(name, 0)
    }

    /// New zeroed counters for operator `name` running in keyed stage
    /// `stage` (0: the head, or the whole chain).
    pub fn new_in_stage(name: impl Into<String>, stage: usize) -> Arc<Self> {
        Arc::new(OperatorMetrics {
            name: name.into(),
            stage,
            watermark: AtomicI64::new(i64::MIN),
            ..OperatorMetrics::default()
        })
    }

    /// The operator's name without its worker, and the worker (`name#w`
    /// names worker `w` of a keyed stage; others are worker 0).
    pub fn operator_and_worker(name: &str) -> (&str, usize) {
        match name.rsplit_once('#') {
            Some((operator, worker)) => match worker.parse() {
                Ok(worker) => (operator, worker),
                Err(_) => (name, 0),
            },
            None => (name, 0),
        }
    }

    /// Adds `delta` to the plugin counter `name`.
    pub fn add_plugin_counter(&self, name: &str, delta: u64) {
        let mut counters = lock(&self.plugin_counters);
        *counters.entry(name.to_string()).or_default() += delta;
    }

    fn snapshot(&self) -> OperatorSnapshot {
        OperatorSnapshot {
            name: self.name.clone(),
            stage: self.stage,
            records_in: load(&self.records_in),
            records_out: load(&self.records_out),
            bytes_in: load(&self.bytes_in),
            bytes_out: load(&self.bytes_out),
            side_out: load(&self.side_out),
            dead_letters: load(&self.dead_letters),
            dead_letter_classes: DeadLetterClass::ALL
                .iter()
                .map(|class| {
                    (
                        class.label().to_string(),
                        load(&self.dead_letter_classes[class.index()]),
                    )
                })
                .collect(),
            late_records: load(&self.late_records),
            plugin_calls: load(&self.plugin_calls),
            plugin_call_seconds: self.plugin_call_seconds.snapshot(),
            plugin_memory_bytes: load(&self.plugin_memory_bytes),
            plugin: lock(&self.plugin).clone(),
            faults_by_kind: lock(&self.faults_by_kind).clone(),
            traps: load(&self.traps),
            deadline_hits: load(&self.deadline_hits),
            memory_limit_hits: load(&self.memory_limit_hits),
            faulted_records: load(&self.faulted_records),
            reinstantiations: load(&self.reinstantiations),
            cpu_throttled_ns: load(&self.cpu_throttled_ns),
            busy_ns: load(&self.busy_ns),
            backpressured_ns: load(&self.backpressured_ns),
            watermark: watermark_value(&self.watermark),
            state_bytes: load(&self.state_bytes),
            state_peak_bytes: load(&self.state_peak_bytes),
            state_keys: load(&self.state_keys),
            state_disk_bytes: load(&self.state_disk_bytes),
            state_disk_peak_bytes: load(&self.state_disk_peak_bytes),
            plugin_counters: lock(&self.plugin_counters).clone(),
        }
    }
}

/// Counters of one topic-partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PartitionStats {
    /// Records read from it (sources) or delivered to it (sinks).
    pub records: u64,
    /// Consumer lag: records in the partition not yet read (sources only;
    /// `None` until the client has reported it).
    pub lag: Option<i64>,
}

/// Per topic-partition counters, shared between a connector (which updates
/// them) and the pipeline's metrics (which report them).
#[derive(Debug, Default)]
pub struct PartitionMetrics {
    entries: Mutex<BTreeMap<(String, i32), PartitionStats>>,
}

impl PartitionMetrics {
    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, i32), PartitionStats>> {
        lock(&self.entries)
    }

    /// Adds `records` to `topic`/`partition`.
    pub fn add_records(&self, topic: &str, partition: i32, records: u64) {
        self.entries()
            .entry((topic.to_string(), partition))
            .or_default()
            .records += records;
    }

    /// Sets the consumer lag of `topic`/`partition`.
    pub fn set_lag(&self, topic: &str, partition: i32, lag: i64) {
        self.entries()
            .entry((topic.to_string(), partition))
            .or_default()
            .lag = Some(lag);
    }

    /// A copy of every partition's counters, sorted by topic and partition.
    pub fn snapshot(&self) -> Vec<(String, i32, PartitionStats)> {
        self.entries()
            .iter()
            .map(|((topic, partition), stats)| (topic.clone(), *partition, *stats))
            .collect()
    }
}

/// Counters of one pipeline.
#[derive(Debug)]
pub struct PipelineMetrics {
    /// Records read by the source (including ones it dead-lettered).
    pub records_in: AtomicU64,
    /// Bytes (key + value) of the records read by the source.
    pub bytes_in: AtomicU64,
    /// Records the source could not read (dead-lettered as `decode`).
    pub source_dead_letters: AtomicU64,
    /// Records written to the main sink.
    pub records_out: AtomicU64,
    /// Bytes written to the main sink.
    pub bytes_out: AtomicU64,
    /// Records written to side-output sinks.
    pub side_out: AtomicU64,
    /// Bytes written to side-output sinks.
    pub side_bytes: AtomicU64,
    /// Records written to the dead-letter sink.
    pub dead_letters: AtomicU64,
    /// Bytes written to the dead-letter sink.
    pub dead_letter_bytes: AtomicU64,
    /// Records a sink refused (e.g. not fitting a table's schema), then
    /// dead-lettered.
    pub sink_rejected: AtomicU64,
    /// Source read to sink write, as measured by latency markers (see
    /// [`crate::dataflow::StreamElement::LatencyMarker`]).
    pub record_latency: DurationHistogram,
    /// The highest event time written to the main sink (ms; `i64::MIN`
    /// before the first): end-to-end event-time lag is now minus this.
    pub sink_event_time: AtomicI64,
    /// Watermark and idleness per source split, as last published by the
    /// source.
    pub source_splits: Mutex<Vec<crate::time::SplitStatus>>,
    /// How full the pipeline's channels are.
    pub channels: Mutex<Vec<Arc<ChannelMetrics>>>,
    /// When the metrics were created (the run started): busy and
    /// backpressured time are parts of the time since.
    pub started: std::time::Instant,
    /// Batches read by the source.
    pub batches: AtomicU64,
    /// Current watermark at the sinks (milliseconds; `i64::MIN` before the first).
    pub watermark: AtomicI64,
    /// Checkpoint barriers that reached the sinks.
    pub barriers: AtomicU64,
    /// The id of the last barrier the source injected (a plugin swap is
    /// requested for a later one).
    pub last_barrier_id: AtomicU64,
    /// Time the source spent blocked on a full channel (backpressure), ns.
    pub source_backpressured_ns: AtomicU64,
    /// Source splits currently idle (not holding the watermark back).
    pub idle_splits: AtomicU64,
    /// Time the key-by exchanges spent blocked on full worker channels, ns
    /// (summed over the threads that send into them).
    pub exchange_backpressured_ns: AtomicU64,
    /// Per-operator counters, in chain order.
    pub operators: Mutex<Vec<Arc<OperatorMetrics>>>,
    /// Records read and lag per source topic-partition (Kafka sources).
    pub source_partitions: Arc<PartitionMetrics>,
    /// Records delivered per sink topic-partition (Kafka sinks).
    pub sink_partitions: Arc<PartitionMetrics>,
    /// Checkpoints taken (when the pipeline checkpoints).
    pub checkpoints: Arc<CheckpointMetrics>,
    /// The latest records written to the dead-letter output.
    pub dead_letter_samples: Recent<DeadLetterSample>,
}

/// One completed checkpoint, as the progress line, the summary and the
/// metrics endpoint report it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CheckpointRecord {
    /// Checkpoint id.
    pub id: u64,
    /// When it was published, ms since the Unix epoch.
    pub completed_at_ms: i64,
    /// Its figures.
    pub stats: CheckpointStats,
}

/// How many completed checkpoints [`CheckpointMetrics`] remembers.
pub const CHECKPOINT_HISTORY: usize = 32;

/// Counters of a pipeline's checkpoints.
#[derive(Debug, Default)]
pub struct CheckpointMetrics {
    /// Checkpoints published.
    pub completed: AtomicU64,
    /// Checkpoints that failed (the pipeline then fails and restarts).
    pub failed: AtomicU64,
    /// Bytes uploaded by every published checkpoint.
    pub uploaded_bytes: AtomicU64,
    /// Barrier injection to publication, per published checkpoint.
    pub duration_seconds: DurationHistogram,
    /// The latest completed checkpoints, oldest first.
    pub history: Mutex<std::collections::VecDeque<CheckpointRecord>>,
}

impl CheckpointMetrics {
    /// Records a published checkpoint.
    pub fn record(&self, record: CheckpointRecord) {
        add(&self.completed, 1);
        add(&self.uploaded_bytes, record.stats.uploaded_bytes);
        self.duration_seconds
            .observe(std::time::Duration::from_secs_f64(
                record.stats.total_ms.max(0.0) / 1000.0,
            ));
        let mut history = lock(&self.history);
        if history.len() == CHECKPOINT_HISTORY {
            history.pop_front();
        }
        history.push_back(record);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> CheckpointSnapshot {
        CheckpointSnapshot {
            completed: load(&self.completed),
            failed: load(&self.failed),
            uploaded_bytes: load(&self.uploaded_bytes),
            duration_seconds: self.duration_seconds.snapshot(),
            history: lock(&self.history).iter().cloned().collect(),
        }
    }
}

/// A copy of a pipeline's checkpoint counters.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct CheckpointSnapshot {
    /// Checkpoints published.
    pub completed: u64,
    /// Checkpoints failed.
    pub failed: u64,
    /// Bytes uploaded by every published checkpoint.
    pub uploaded_bytes: u64,
    /// Barrier injection to publication.
    pub duration_seconds: HistogramSnapshot,
    /// The latest completed checkpoints, oldest first.
    pub history: Vec<CheckpointRecord>,
}

impl CheckpointSnapshot {
    /// The latest completed checkpoint.
    pub fn last(&self) -> Option<&CheckpointRecord> {
        self.history.last()
    }
}

impl Default for PipelineMetrics {
    fn default() -> Self {
        PipelineMetrics {
            records_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            source_dead_letters: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            side_out: AtomicU64::new(0),
            side_bytes: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
            dead_letter_bytes: AtomicU64::new(0),
            sink_rejected: AtomicU64::new(0),
            record_latency: DurationHistogram::default(),
            sink_event_time: AtomicI64::new(i64::MIN),
            source_splits: Mutex::new(Vec::new()),
            channels: Mutex::new(Vec::new()),
            started: std::time::Instant::now(),
            batches: AtomicU64::new(0),
            watermark: AtomicI64::new(i64::MIN),
            barriers: AtomicU64::new(0),
            last_barrier_id: AtomicU64::new(0),
            source_backpressured_ns: AtomicU64::new(0),
            idle_splits: AtomicU64::new(0),
            exchange_backpressured_ns: AtomicU64::new(0),
            operators: Mutex::new(Vec::new()),
            source_partitions: Arc::default(),
            sink_partitions: Arc::default(),
            checkpoints: Arc::default(),
            dead_letter_samples: Recent::default(),
        }
    }
}

impl PipelineMetrics {
    /// The latest plugin faults of every operator, oldest first.
    pub fn recent_faults(&self) -> Vec<FaultSample> {
        let operators = lock(&self.operators);
        let mut faults: Vec<FaultSample> = operators
            .iter()
            .flat_map(|operator| operator.recent_faults.list())
            .collect();
        faults.sort_by_key(|fault| fault.at_ms);
        faults
    }

    /// Registers a channel between two threads; the sender updates its
    /// fill.
    pub fn register_channel(&self, from: &str, to: &str, capacity: usize) -> Arc<ChannelMetrics> {
        let channel = Arc::new(ChannelMetrics {
            from: from.to_string(),
            to: to.to_string(),
            capacity: capacity as u64,
            queued: AtomicU64::new(0),
        });
        lock(&self.channels).push(channel.clone());
        channel
    }

    /// Counts records written to the main sink: records, bytes, the latest
    /// event time.
    pub fn count_sink_write(&self, records: &[crate::record::Record]) {
        add(&self.records_out, records.len() as u64);
        add(&self.bytes_out, record_bytes(records));
        if let Some(latest) = records.iter().filter_map(|r| r.event_time).max() {
            self.sink_event_time.fetch_max(latest, Ordering::Relaxed);
        }
    }

    /// Registers an operator's counters (in chain order).
    pub fn register_operator(&self, operator: Arc<OperatorMetrics>) {
        lock(&self.operators).push(operator);
    }

    /// A consistent-enough copy of every counter.
    pub fn snapshot(&self) -> PipelineSnapshot {
        PipelineSnapshot {
            uptime_seconds: self.started.elapsed().as_secs_f64(),
            records_in: load(&self.records_in),
            bytes_in: load(&self.bytes_in),
            source_dead_letters: load(&self.source_dead_letters),
            records_out: load(&self.records_out),
            bytes_out: load(&self.bytes_out),
            side_out: load(&self.side_out),
            side_bytes: load(&self.side_bytes),
            dead_letters: load(&self.dead_letters),
            dead_letter_bytes: load(&self.dead_letter_bytes),
            sink_rejected: load(&self.sink_rejected),
            record_latency: self.record_latency.snapshot(),
            sink_event_time: watermark_value(&self.sink_event_time),
            source_splits: lock(&self.source_splits).clone(),
            channels: lock(&self.channels)
                .iter()
                .map(|c| ChannelSnapshot {
                    from: c.from.clone(),
                    to: c.to.clone(),
                    capacity: c.capacity,
                    queued: load(&c.queued),
                })
                .collect(),
            batches: load(&self.batches),
            watermark: watermark_value(&self.watermark),
            barriers: load(&self.barriers),
            source_backpressured_ns: load(&self.source_backpressured_ns),
            idle_splits: load(&self.idle_splits),
            exchange_backpressured_ns: load(&self.exchange_backpressured_ns),
            operators: lock(&self.operators)
                .iter()
                .map(|op| op.snapshot())
                .collect(),
            source_partitions: self.source_partitions.snapshot(),
            sink_partitions: self.sink_partitions.snapshot(),
            checkpoints: self.checkpoints.snapshot(),
        }
    }
}

fn watermark_value(watermark: &AtomicI64) -> Option<i64> {
    let value = watermark.load(Ordering::Relaxed);
    (value != i64::MIN).then_some(value)
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// Adds `delta` to a counter.
pub fn add(counter: &AtomicU64, delta: u64) {
    counter.fetch_add(delta, Ordering::Relaxed);
}

/// A copy of an operator's counters.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OperatorSnapshot {
    /// Operator name.
    pub name: String,
    /// Keyed stage (0: head or whole chain).
    pub stage: usize,
    /// Records in.
    pub records_in: u64,
    /// Records out on the main output.
    pub records_out: u64,
    /// Bytes in.
    pub bytes_in: u64,
    /// Bytes out on the main output.
    pub bytes_out: u64,
    /// Records out on side outputs.
    pub side_out: u64,
    /// Records dead-lettered.
    pub dead_letters: u64,
    /// Dead letters by class label.
    pub dead_letter_classes: BTreeMap<String, u64>,
    /// Records later than the allowed lateness.
    pub late_records: u64,
    /// Plugin calls.
    pub plugin_calls: u64,
    /// Plugin call durations.
    pub plugin_call_seconds: HistogramSnapshot,
    /// Plugin instance memory, bytes.
    pub plugin_memory_bytes: u64,
    /// The plugin it runs.
    pub plugin: Option<PluginIdentity>,
    /// Plugin faults by kind.
    pub faults_by_kind: BTreeMap<String, u64>,
    /// Plugin traps.
    pub traps: u64,
    /// Of the traps, CPU deadline hits.
    pub deadline_hits: u64,
    /// Of the traps, memory-limit hits.
    pub memory_limit_hits: u64,
    /// Records dead-lettered because the plugin faulted on them.
    pub faulted_records: u64,
    /// Plugin re-instantiations.
    pub reinstantiations: u64,
    /// Time plugin calls waited for the tenant's CPU share, ns.
    pub cpu_throttled_ns: u64,
    /// Busy time, ns.
    pub busy_ns: u64,
    /// Backpressured time (blocked on a full downstream channel), ns.
    pub backpressured_ns: u64,
    /// Current event-time watermark, ms.
    pub watermark: Option<i64>,
    /// State size, bytes.
    pub state_bytes: u64,
    /// Largest state size measured, bytes.
    pub state_peak_bytes: u64,
    /// Keys in state.
    pub state_keys: u64,
    /// State on disk, bytes.
    pub state_disk_bytes: u64,
    /// Largest state on disk measured, bytes.
    pub state_disk_peak_bytes: u64,
    /// Plugin-reported counters.
    pub plugin_counters: BTreeMap<String, u64>,
}

impl OperatorSnapshot {
    /// How far the operator's event time is behind the wall clock (`now_ms`,
    /// ms since the epoch): Flink's watermark lag.
    pub fn watermark_lag_ms(&self, now_ms: i64) -> Option<i64> {
        self.watermark.map(|w| now_ms.saturating_sub(w))
    }
}

/// A copy of a pipeline's counters.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PipelineSnapshot {
    /// Seconds since the run started.
    pub uptime_seconds: f64,
    /// Records read.
    pub records_in: u64,
    /// Bytes read.
    pub bytes_in: u64,
    /// Records the source could not read.
    pub source_dead_letters: u64,
    /// Records written to the main sink.
    pub records_out: u64,
    /// Bytes written to the main sink.
    pub bytes_out: u64,
    /// Records written to side outputs.
    pub side_out: u64,
    /// Bytes written to side outputs.
    pub side_bytes: u64,
    /// Records written to the dead-letter sink.
    pub dead_letters: u64,
    /// Bytes written to the dead-letter sink.
    pub dead_letter_bytes: u64,
    /// Records a sink refused.
    pub sink_rejected: u64,
    /// Source read to sink write.
    pub record_latency: HistogramSnapshot,
    /// The highest event time written to the main sink, ms.
    pub sink_event_time: Option<i64>,
    /// Watermark and idleness per source split.
    pub source_splits: Vec<crate::time::SplitStatus>,
    /// Channel fill.
    pub channels: Vec<ChannelSnapshot>,
    /// Batches read.
    pub batches: u64,
    /// Watermark at the sinks.
    pub watermark: Option<i64>,
    /// Barriers that reached the sinks.
    pub barriers: u64,
    /// Source backpressure time, ns.
    pub source_backpressured_ns: u64,
    /// Source splits currently idle.
    pub idle_splits: u64,
    /// Key-by exchange backpressure time, ns.
    pub exchange_backpressured_ns: u64,
    /// Operators in chain order.
    pub operators: Vec<OperatorSnapshot>,
    /// Source topic-partitions: records read and consumer lag.
    pub source_partitions: Vec<(String, i32, PartitionStats)>,
    /// Sink topic-partitions: records delivered.
    pub sink_partitions: Vec<(String, i32, PartitionStats)>,
    /// Checkpoints.
    pub checkpoints: CheckpointSnapshot,
}

impl PipelineSnapshot {
    /// Total consumer lag over the source partitions that reported one.
    pub fn total_lag(&self) -> Option<i64> {
        let lags: Vec<i64> = self
            .source_partitions
            .iter()
            .filter_map(|(_, _, s)| s.lag)
            .collect();
        (!lags.is_empty()).then(|| lags.iter().sum())
    }
}

/// Bytes of keys and values of `records`.
pub fn record_bytes<'a>(records: impl IntoIterator<Item = &'a crate::record::Record>) -> u64 {
    records
        .into_iter()
        .map(|r| (r.value.len() + r.key.as_ref().map_or(0, |k| k.len())) as u64)
        .sum()
}

/// Figures of one checkpoint.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointStats {
    /// From barrier injection until every operator had taken its snapshot
    /// (includes alignment), ms.
    pub alignment_ms: f64,
    /// The synchronous part: writing state back, flushing it and linking
    /// the RocksDB checkpoint, while records waited, ms.
    pub sync_ms: f64,
    /// The asynchronous part: upload and publication, ms.
    pub async_ms: f64,
    /// From barrier injection to publication, ms.
    pub total_ms: f64,
    /// Size of the whole state snapshot, bytes.
    pub state_bytes: u64,
    /// Bytes uploaded for this checkpoint (new files only).
    pub uploaded_bytes: u64,
    /// Files uploaded for this checkpoint.
    pub uploaded_files: u64,
    /// The sinks' commits after publication, ms (measured after the
    /// manifest was written: 0 in manifests, set in the metrics).
    #[serde(default)]
    pub commit_ms: f64,
}

/// A bounded channel between two threads of a pipeline.
#[derive(Debug)]
pub struct ChannelMetrics {
    /// The sending thread.
    pub from: String,
    /// The receiving thread.
    pub to: String,
    /// Capacity, messages (batches).
    pub capacity: u64,
    /// Messages queued, as the sender last saw.
    pub queued: AtomicU64,
}

/// A copy of a [`ChannelMetrics`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChannelSnapshot {
    /// The sending thread.
    pub from: String,
    /// The receiving thread.
    pub to: String,
    /// Capacity, messages.
    pub capacity: u64,
    /// Messages queued.
    pub queued: u64,
}
