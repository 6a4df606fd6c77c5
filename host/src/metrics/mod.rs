//! Counters a running pipeline keeps, read by progress lines, summaries,
//! the Prometheus endpoint and the dashboard.
//!
//! All counters are atomics updated by the threads that own the work; readers
//! take a [`PipelineSnapshot`] at any time without stopping the pipeline.
//! Durations are [`DurationHistogram`]s. [`exposition`] turns snapshots into
//! the Prometheus text format; [`status`] into the JSON the dashboard reads.

mod checkpoint;
pub mod exposition;
pub(crate) mod histogram;
mod operator;
pub mod status;

pub use checkpoint::{
    CHECKPOINT_HISTORY, CheckpointMetrics, CheckpointRecord, CheckpointSnapshot, CheckpointStats,
};
pub use histogram::{DurationHistogram, HistogramSnapshot};
pub use operator::{
    DeadLetterClass, DeadLetterSample, FaultKind, FaultSample, OperatorMetrics, OperatorSnapshot,
    PluginIdentity, RECORDS_PROJECTED_AHEAD_COUNTER, RECORDS_READ_AHEAD_COUNTER,
};

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
    /// When a bounded source returned its last record: what follows (the
    /// final watermark, barrier and checkpoint, closing connections) is the
    /// run's tail.
    pub input_ended: std::sync::OnceLock<std::time::Instant>,
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
    /// Whether the sinks' external systems answer (a database that went
    /// away and is being retried).
    pub sink_health: Arc<SinkHealth>,
    /// Checkpoints taken (when the pipeline checkpoints).
    pub checkpoints: Arc<CheckpointMetrics>,
    /// The latest records written to the dead-letter output.
    pub dead_letter_samples: Recent<DeadLetterSample>,
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
            input_ended: std::sync::OnceLock::new(),
            last_barrier_id: AtomicU64::new(0),
            source_backpressured_ns: AtomicU64::new(0),
            idle_splits: AtomicU64::new(0),
            exchange_backpressured_ns: AtomicU64::new(0),
            operators: Mutex::new(Vec::new()),
            source_partitions: Arc::default(),
            sink_partitions: Arc::default(),
            sink_health: Arc::default(),
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
            sink_retries: load(&self.sink_health.retries),
            sink_rows_expired: load(&self.sink_health.rows_expired),
            sink_unavailable_since_ms: self.sink_health.unavailable_since(),
            checkpoints: self.checkpoints.snapshot(),
        }
    }
}

/// Whether the external systems the sinks write to answer: a sink that
/// retries (a database that went away) counts each try here and marks
/// since when it has not been answered, for `/metrics` and the dashboard.
#[derive(Debug, Default)]
pub struct SinkHealth {
    /// Writes and commits tried again.
    pub retries: AtomicU64,
    /// Rows a sink deleted because they expired (a Postgres sink's
    /// `expire`).
    pub rows_expired: AtomicU64,
    /// Since when (ms since the epoch) a sink has not been answered; 0
    /// while every one is.
    unavailable_since_ms: AtomicI64,
}

impl SinkHealth {
    /// A try that failed because the system did not answer.
    pub fn not_answered(&self) {
        add(&self.retries, 1);
        let _ = self.unavailable_since_ms.compare_exchange(
            0,
            crate::time::now_ms(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// A try that the system answered.
    pub fn answered(&self) {
        self.unavailable_since_ms.store(0, Ordering::Relaxed);
    }

    /// Since when a sink has not been answered.
    pub fn unavailable_since(&self) -> Option<i64> {
        let since = self.unavailable_since_ms.load(Ordering::Relaxed);
        (since != 0).then_some(since)
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
    /// Sink writes and commits tried again because their system did not
    /// answer.
    pub sink_retries: u64,
    /// Rows sinks deleted because they expired.
    pub sink_rows_expired: u64,
    /// Since when (ms since the epoch) a sink's system has not answered;
    /// `None` while every one answers.
    pub sink_unavailable_since_ms: Option<i64>,
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
