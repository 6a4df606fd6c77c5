//! One operator's counters: records in and out, dead letters by class,
//! plugin faults by kind, state size, and their snapshot.

use super::Recent;
use super::add;
use super::histogram::DurationHistogram;
use super::histogram::HistogramSnapshot;
use super::load;
use super::record_bytes;
use super::watermark_value;
use crate::sync::lock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

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
    /// Every class, in `DeadLetterClass::index` order.
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
    /// The query of a SQL operator, as written (set once, when it is
    /// built), for the dashboard.
    pub sql: std::sync::OnceLock<String>,
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

    pub(super) fn snapshot(&self) -> OperatorSnapshot {
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
            sql: self.sql.get().cloned(),
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
    /// The query of a SQL operator.
    pub sql: Option<String>,
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
