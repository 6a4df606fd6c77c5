//! Counters a running pipeline keeps, read by progress lines and summaries.
//!
//! All counters are atomics updated by the threads that own the work; readers
//! take a [`PipelineSnapshot`] at any time without stopping the pipeline.

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
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        if items.len() == RECENT_SAMPLES {
            items.pop_front();
        }
        items.push_back(item);
    }

    /// The samples kept, oldest first.
    pub fn list(&self) -> Vec<T> {
        let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        items.iter().cloned().collect()
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
                .unwrap_or_else(|_| crate::checkpoint::now_ms()),
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
    /// Operator name.
    pub name: String,
    /// Records handed to the operator.
    pub records_in: AtomicU64,
    /// Records it emitted on its main output.
    pub records_out: AtomicU64,
    /// Records it emitted on side outputs.
    pub side_out: AtomicU64,
    /// Records it dead-lettered.
    pub dead_letters: AtomicU64,
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

impl OperatorMetrics {
    /// Counts a plugin fault (a trap, and its kind) and keeps it among the
    /// recent ones.
    pub fn count_fault(&self, fault: &crate::runtime::PluginFault) {
        add(&self.traps, 1);
        match fault.kind {
            crate::runtime::FaultKind::Deadline => add(&self.deadline_hits, 1),
            crate::runtime::FaultKind::MemoryLimit => add(&self.memory_limit_hits, 1),
            _ => {}
        }
        self.recent_faults.push(FaultSample {
            at_ms: crate::checkpoint::now_ms(),
            operator: self.name.clone(),
            kind: format!("{:?}", fault.kind),
            message: fault.message.clone(),
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
        Arc::new(OperatorMetrics {
            name: name.into(),
            watermark: AtomicI64::new(i64::MIN),
            ..OperatorMetrics::default()
        })
    }

    /// Adds `delta` to the plugin counter `name`.
    pub fn add_plugin_counter(&self, name: &str, delta: u64) {
        let mut counters = self
            .plugin_counters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *counters.entry(name.to_string()).or_default() += delta;
    }

    fn snapshot(&self) -> OperatorSnapshot {
        OperatorSnapshot {
            name: self.name.clone(),
            records_in: load(&self.records_in),
            records_out: load(&self.records_out),
            side_out: load(&self.side_out),
            dead_letters: load(&self.dead_letters),
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
            plugin_counters: self
                .plugin_counters
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone(),
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
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
    /// Records written to the main sink.
    pub records_out: AtomicU64,
    /// Records written to side-output sinks.
    pub side_out: AtomicU64,
    /// Records written to the dead-letter sink.
    pub dead_letters: AtomicU64,
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
    pub stats: crate::checkpoint::CheckpointStats,
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
    /// The latest completed checkpoints, oldest first.
    pub history: Mutex<std::collections::VecDeque<CheckpointRecord>>,
}

impl CheckpointMetrics {
    /// Records a published checkpoint.
    pub fn record(&self, record: CheckpointRecord) {
        add(&self.completed, 1);
        let mut history = self
            .history
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
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
            history: self
                .history
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .iter()
                .cloned()
                .collect(),
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
            records_out: AtomicU64::new(0),
            side_out: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
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
        let operators = self
            .operators
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut faults: Vec<FaultSample> = operators
            .iter()
            .flat_map(|operator| operator.recent_faults.list())
            .collect();
        faults.sort_by_key(|fault| fault.at_ms);
        faults
    }

    /// Registers an operator's counters (in chain order).
    pub fn register_operator(&self, operator: Arc<OperatorMetrics>) {
        self.operators
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(operator);
    }

    /// A consistent-enough copy of every counter.
    pub fn snapshot(&self) -> PipelineSnapshot {
        PipelineSnapshot {
            records_in: load(&self.records_in),
            records_out: load(&self.records_out),
            side_out: load(&self.side_out),
            dead_letters: load(&self.dead_letters),
            batches: load(&self.batches),
            watermark: watermark_value(&self.watermark),
            barriers: load(&self.barriers),
            source_backpressured_ns: load(&self.source_backpressured_ns),
            idle_splits: load(&self.idle_splits),
            exchange_backpressured_ns: load(&self.exchange_backpressured_ns),
            operators: self
                .operators
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
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
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OperatorSnapshot {
    /// Operator name.
    pub name: String,
    /// Records in.
    pub records_in: u64,
    /// Records out on the main output.
    pub records_out: u64,
    /// Records out on side outputs.
    pub side_out: u64,
    /// Records dead-lettered.
    pub dead_letters: u64,
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
    /// Records read.
    pub records_in: u64,
    /// Records written to the main sink.
    pub records_out: u64,
    /// Records written to side outputs.
    pub side_out: u64,
    /// Records written to the dead-letter sink.
    pub dead_letters: u64,
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
