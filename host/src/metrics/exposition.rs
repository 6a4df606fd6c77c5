//! The Prometheus endpoint's text: every pipeline's counters as metric
//! families, labelled `tenant`, `pipeline`, `operator`, `worker` (and
//! `topic`/`partition` for source splits), never with record keys or
//! offsets.
//!
//! Families are built at each scrape from [`PipelineSnapshot`]s (the
//! pipelines' own atomics are the source of truth; nothing is counted
//! twice), so a deleted pipeline's series disappear with it. The text is
//! written by the `prometheus` crate's encoder in the classic format that
//! Prometheus and `promtool check metrics` read. Names follow Prometheus'
//! conventions: a `sluice_` prefix, base units (`_seconds`, `_bytes`),
//! `_total` on counters.

use super::{HistogramSnapshot, OperatorMetrics, PipelineSnapshot, histogram::BUCKETS_SECONDS};
use ::prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use ::prometheus::{Encoder, TextEncoder};
use std::collections::HashMap;

/// One pipeline as the endpoint shows it.
#[derive(Debug, Clone)]
pub struct PipelineView {
    /// Its tenant.
    pub tenant: String,
    /// Its name.
    pub pipeline: String,
    /// `running`, `finished`, `failed`, ...
    pub state: String,
    /// Its counters.
    pub snapshot: PipelineSnapshot,
    /// Its plugin deployments (`sluice serve` only).
    pub deployments: Vec<DeploymentView>,
}

/// A plugin deployment, for the deploy counters and pause histogram.
#[derive(Debug, Clone)]
pub struct DeploymentView {
    /// The operator whose plugin changed.
    pub operator: String,
    /// `deploy` or `rollback`.
    pub kind: String,
    /// `kept`, `rolled_back`, `swapped`, ...
    pub status: String,
    /// The longest pause of an instance, ms.
    pub pause_ms: f64,
}

/// Metric families being assembled, in the order first named.
#[derive(Default)]
pub struct Exposition {
    families: Vec<MetricFamily>,
    index: HashMap<&'static str, usize>,
}

impl Exposition {
    fn add(&mut self, name: &'static str, help: &'static str, kind: MetricType, metric: Metric) {
        let position = *self.index.entry(name).or_insert_with(|| {
            let mut family = MetricFamily::default();
            family.set_name(name.to_string());
            family.set_help(help.to_string());
            family.set_field_type(kind);
            self.families.push(family);
            self.families.len() - 1
        });
        self.families[position].mut_metric().push(metric);
    }

    /// A counter sample.
    pub fn counter(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let mut counter = Counter::default();
        counter.set_value(value);
        let mut metric = labelled(labels);
        metric.set_counter(counter);
        self.add(name, help, MetricType::COUNTER, metric);
    }

    /// A gauge sample.
    pub fn gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let mut gauge = Gauge::default();
        gauge.set_value(value);
        let mut metric = labelled(labels);
        metric.set_gauge(gauge);
        self.add(name, help, MetricType::GAUGE, metric);
    }

    /// A histogram sample (buckets `BUCKETS_SECONDS`).
    pub fn histogram(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        snapshot: &HistogramSnapshot,
    ) {
        let mut histogram = Histogram::default();
        histogram.set_sample_count(snapshot.count);
        histogram.set_sample_sum(snapshot.sum_seconds);
        histogram.set_bucket(
            BUCKETS_SECONDS
                .iter()
                .zip(&snapshot.cumulative)
                .map(|(&upper, &count)| {
                    let mut bucket = Bucket::default();
                    bucket.set_upper_bound(upper);
                    bucket.set_cumulative_count(count);
                    bucket
                })
                .collect(),
        );
        let mut metric = labelled(labels);
        metric.set_histogram(histogram);
        self.add(name, help, MetricType::HISTOGRAM, metric);
    }

    /// The text format.
    pub fn render(self) -> String {
        let mut text = Vec::new();
        // Encoding into a Vec fails only on invalid families, which the
        // builders above cannot make; an error leaves what was written.
        if let Err(error) = TextEncoder::new().encode(&self.families, &mut text) {
            tracing::error!(%error, "encoding metrics");
        }
        String::from_utf8_lossy(&text).into_owned()
    }
}

fn labelled(labels: &[(&str, &str)]) -> Metric {
    let mut metric = Metric::default();
    metric.set_label(
        labels
            .iter()
            .map(|(name, value)| {
                let mut pair = LabelPair::default();
                pair.set_name(name.to_string());
                pair.set_value(value.to_string());
                pair
            })
            .collect(),
    );
    metric
}

/// `sluice_build_info`: the version of this binary.
pub fn build_info(out: &mut Exposition) {
    out.gauge(
        "sluice_build_info",
        "The running Sluice build (value 1).",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
}

const NS: f64 = 1e-9;

/// Adds every family of `view` at wall-clock time `now_ms` (for ages and
/// lags).
pub fn pipeline(out: &mut Exposition, view: &PipelineView, now_ms: i64) {
    let s = &view.snapshot;
    let base = [
        ("tenant", view.tenant.as_str()),
        ("pipeline", view.pipeline.as_str()),
    ];
    let with = |extra: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        base.iter()
            .map(|(k, v)| (*k, v.to_string()))
            .chain(extra.iter().map(|(k, v)| (*k, v.to_string())))
            .collect()
    };
    // Owned label lists, borrowed as the builders want them.
    fn refs<'a>(labels: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
        labels.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }
    let lag_seconds = |time_ms: i64| (now_ms.saturating_sub(time_ms)) as f64 / 1000.0;

    out.gauge(
        "sluice_pipeline_running",
        "Whether the pipeline is running (1) or not (0); `state` says where it is.",
        &refs(&with(&[("state", &view.state)])),
        f64::from(u8::from(view.state == "running")),
    );
    out.gauge(
        "sluice_pipeline_uptime_seconds",
        "Time since the pipeline's current run started.",
        &base,
        s.uptime_seconds,
    );

    // Source.
    out.counter(
        "sluice_source_records_total",
        "Records read by the source (including ones it could not decode).",
        &base,
        s.records_in as f64,
    );
    out.counter(
        "sluice_source_bytes_total",
        "Bytes (keys and values) read by the source.",
        &base,
        s.bytes_in as f64,
    );
    out.counter(
        "sluice_source_backpressured_seconds_total",
        "Time the source waited for the operators (a full channel).",
        &base,
        s.source_backpressured_ns as f64 * NS,
    );
    out.gauge(
        "sluice_source_idle_splits",
        "Source splits currently idle (not holding the watermark back).",
        &base,
        s.idle_splits as f64,
    );
    for (topic, partition, stats) in &s.source_partitions {
        let labels = with(&[("topic", topic), ("partition", &partition.to_string())]);
        out.counter(
            "sluice_source_partition_records_total",
            "Records read per source topic-partition.",
            &refs(&labels),
            stats.records as f64,
        );
        if let Some(lag) = stats.lag {
            out.gauge(
                "sluice_source_consumer_lag_records",
                "Records in the partition not yet read (consumer lag).",
                &refs(&labels),
                lag as f64,
            );
        }
    }
    for split in &s.source_splits {
        let labels = with(&[
            ("topic", &split.topic),
            ("partition", &split.partition.to_string()),
        ]);
        if let Some(watermark) = split.watermark {
            out.gauge(
                "sluice_source_split_watermark_seconds",
                "The split's watermark (event time, seconds since the Unix epoch).",
                &refs(&labels),
                watermark as f64 / 1000.0,
            );
            out.gauge(
                "sluice_source_split_watermark_lag_seconds",
                "Wall clock minus the split's watermark.",
                &refs(&labels),
                lag_seconds(watermark),
            );
        }
        out.gauge(
            "sluice_source_split_idle",
            "Whether the split is idle (1): idle splits do not hold the watermark back.",
            &refs(&labels),
            f64::from(u8::from(split.idle)),
        );
    }

    // Operators.
    let now_seconds = s.uptime_seconds;
    for operator in &s.operators {
        let (name, worker) = OperatorMetrics::operator_and_worker(&operator.name);
        let worker = worker.to_string();
        let labels = with(&[("operator", name), ("worker", &worker)]);
        let labels = refs(&labels);
        let o = operator;
        out.counter(
            "sluice_operator_records_in_total",
            "Records handed to the operator.",
            &labels,
            o.records_in as f64,
        );
        out.counter(
            "sluice_operator_records_out_total",
            "Records the operator emitted on its main output.",
            &labels,
            o.records_out as f64,
        );
        out.counter(
            "sluice_operator_side_output_records_total",
            "Records the operator emitted on side outputs.",
            &labels,
            o.side_out as f64,
        );
        out.counter(
            "sluice_operator_bytes_in_total",
            "Bytes (keys and values) handed to the operator.",
            &labels,
            o.bytes_in as f64,
        );
        out.counter(
            "sluice_operator_bytes_out_total",
            "Bytes (keys and values) the operator emitted on its main output.",
            &labels,
            o.bytes_out as f64,
        );
        for (class, count) in &o.dead_letter_classes {
            let mut classed = labels.clone();
            classed.push(("class", class.as_str()));
            out.counter(
                "sluice_dead_letters_total",
                "Records dead-lettered, by where and by reason class.",
                &classed,
                *count as f64,
            );
        }
        out.counter(
            "sluice_late_records_total",
            "Records later than the allowed lateness, sent to the late output.",
            &labels,
            o.late_records as f64,
        );
        let busy = o.busy_ns as f64 * NS;
        let backpressured = o.backpressured_ns as f64 * NS;
        out.counter(
            "sluice_operator_busy_seconds_total",
            "Time the operator spent working (Flink's busyTimeMsPerSecond, as a counter).",
            &labels,
            busy,
        );
        out.counter(
            "sluice_operator_backpressured_seconds_total",
            "Time the operator's thread waited for a full downstream channel.",
            &labels,
            backpressured,
        );
        out.counter(
            "sluice_operator_idle_seconds_total",
            "Time the operator was neither busy nor backpressured.",
            &labels,
            (now_seconds - busy - backpressured).max(0.0),
        );
        if let Some(watermark) = o.watermark.filter(|w| *w != i64::MAX) {
            out.gauge(
                "sluice_operator_watermark_seconds",
                "The operator's current input watermark (event time, seconds since the Unix epoch).",
                &labels,
                watermark as f64 / 1000.0,
            );
            out.gauge(
                "sluice_operator_watermark_lag_seconds",
                "Wall clock minus the operator's watermark.",
                &labels,
                lag_seconds(watermark),
            );
        }
        out.gauge(
            "sluice_operator_state_bytes",
            "Size of the operator's state, live (memtables and live data).",
            &labels,
            o.state_bytes as f64,
        );
        out.gauge(
            "sluice_operator_state_disk_bytes",
            "Size of the operator's state on disk (SST files).",
            &labels,
            o.state_disk_bytes as f64,
        );
        out.gauge(
            "sluice_operator_state_keys",
            "Keys in the operator's state (an estimate on RocksDB).",
            &labels,
            o.state_keys as f64,
        );
        let Some(plugin) = &o.plugin else {
            continue;
        };
        let mut info = labels.clone();
        info.push(("plugin", plugin.name.as_str()));
        info.push(("sha256", plugin.sha256.as_str()));
        out.gauge(
            "sluice_plugin_info",
            "The plugin an operator runs, by its component's sha256 (value 1).",
            &info,
            1.0,
        );
        out.counter(
            "sluice_plugin_calls_total",
            "Calls into the operator's plugin.",
            &labels,
            o.plugin_calls as f64,
        );
        out.histogram(
            "sluice_plugin_call_duration_seconds",
            "Duration of plugin calls (wall time).",
            &labels,
            &o.plugin_call_seconds,
        );
        for kind in ["Deadline", "MemoryLimit", "Trap", "BadOutput", "State"] {
            let mut kinded = labels.clone();
            kinded.push(("kind", kind));
            out.counter(
                "sluice_plugin_faults_total",
                "Plugin faults by kind (classified from the limit that fired and the trap code).",
                &kinded,
                o.faults_by_kind.get(kind).copied().unwrap_or(0) as f64,
            );
        }
        out.counter(
            "sluice_plugin_deadline_hits_total",
            "Plugin calls stopped at their CPU deadline.",
            &labels,
            o.deadline_hits as f64,
        );
        out.counter(
            "sluice_plugin_reinstantiations_total",
            "Plugin instances re-created after a fault.",
            &labels,
            o.reinstantiations as f64,
        );
        out.counter(
            "sluice_plugin_cpu_throttled_seconds_total",
            "Time plugin calls waited for the tenant's CPU share.",
            &labels,
            o.cpu_throttled_ns as f64 * NS,
        );
        out.gauge(
            "sluice_plugin_memory_bytes",
            "Linear memory of the plugin instance.",
            &labels,
            o.plugin_memory_bytes as f64,
        );
    }

    // Sinks.
    for (sink, records, bytes) in [
        ("main", s.records_out, s.bytes_out),
        ("side", s.side_out, s.side_bytes),
        ("dead-letter", s.dead_letters, s.dead_letter_bytes),
    ] {
        let labels = with(&[("sink", sink)]);
        out.counter(
            "sluice_sink_records_total",
            "Records written, per sink.",
            &refs(&labels),
            records as f64,
        );
        out.counter(
            "sluice_sink_bytes_total",
            "Bytes (keys and values) written, per sink.",
            &refs(&labels),
            bytes as f64,
        );
    }
    for (class, count) in [
        ("decode", s.source_dead_letters),
        ("sink_rejected", s.sink_rejected),
    ] {
        let operator = if class == "decode" { "source" } else { "sink" };
        out.counter(
            "sluice_dead_letters_total",
            "Records dead-lettered, by where and by reason class.",
            &refs(&with(&[
                ("operator", operator),
                ("worker", "0"),
                ("class", class),
            ])),
            count as f64,
        );
    }
    out.counter(
        "sluice_sink_retries_total",
        "Sink writes and commits tried again because their system (a database) did not answer.",
        &refs(&with(&[])),
        s.sink_retries as f64,
    );
    out.counter(
        "sluice_sink_rows_expired_total",
        "Rows sinks deleted from their tables because they expired (a Postgres sink's `expire`).",
        &refs(&with(&[])),
        s.sink_rows_expired as f64,
    );
    out.gauge(
        "sluice_sink_unavailable",
        "1 while a sink's system (a database) does not answer and is being retried.",
        &refs(&with(&[])),
        if s.sink_unavailable_since_ms.is_some() {
            1.0
        } else {
            0.0
        },
    );
    for (topic, partition, stats) in &s.sink_partitions {
        out.counter(
            "sluice_sink_partition_records_total",
            "Records delivered per sink topic-partition.",
            &refs(&with(&[
                ("topic", topic),
                ("partition", &partition.to_string()),
            ])),
            stats.records as f64,
        );
    }
    if let Some(watermark) = s.watermark.filter(|w| *w != i64::MAX) {
        out.gauge(
            "sluice_pipeline_watermark_seconds",
            "The watermark at the sinks (event time, seconds since the Unix epoch).",
            &base,
            watermark as f64 / 1000.0,
        );
    }
    if let Some(event_time) = s.sink_event_time {
        out.gauge(
            "sluice_event_time_lag_seconds",
            "Wall clock minus the latest event time written to the main sink: end-to-end event-time lag.",
            &base,
            lag_seconds(event_time),
        );
    }
    out.histogram(
        "sluice_record_latency_seconds",
        "Source read to sink write, sampled by latency markers.",
        &base,
        &s.record_latency,
    );
    for channel in &s.channels {
        let labels = with(&[("from", &channel.from), ("to", &channel.to)]);
        out.gauge(
            "sluice_channel_queued_batches",
            "Batches queued in a channel between two threads.",
            &refs(&labels),
            channel.queued as f64,
        );
        out.gauge(
            "sluice_channel_capacity_batches",
            "Capacity of a channel between two threads.",
            &refs(&labels),
            channel.capacity as f64,
        );
    }

    // Checkpoints.
    let c = &s.checkpoints;
    out.counter(
        "sluice_checkpoints_completed_total",
        "Checkpoints published.",
        &base,
        c.completed as f64,
    );
    out.counter(
        "sluice_checkpoints_failed_total",
        "Checkpoints that failed.",
        &base,
        c.failed as f64,
    );
    out.counter(
        "sluice_checkpoint_uploaded_bytes_total",
        "Bytes uploaded by published checkpoints (new state files only).",
        &base,
        c.uploaded_bytes as f64,
    );
    out.histogram(
        "sluice_checkpoint_duration_seconds",
        "Barrier injection to publication, per checkpoint.",
        &base,
        &c.duration_seconds,
    );
    if let Some(last) = c.last() {
        out.gauge(
            "sluice_checkpoint_last_completed_age_seconds",
            "Time since the latest checkpoint was published.",
            &base,
            lag_seconds(last.completed_at_ms),
        );
        out.gauge(
            "sluice_checkpoint_last_size_bytes",
            "Size of the latest checkpoint's state.",
            &base,
            last.stats.state_bytes as f64,
        );
        out.gauge(
            "sluice_checkpoint_last_uploaded_bytes",
            "Bytes the latest checkpoint uploaded.",
            &base,
            last.stats.uploaded_bytes as f64,
        );
        out.gauge(
            "sluice_checkpoint_last_sync_seconds",
            "The synchronous part of the latest checkpoint (what records waited for).",
            &base,
            last.stats.sync_ms / 1000.0,
        );
        out.gauge(
            "sluice_checkpoint_last_alignment_seconds",
            "Barrier alignment of the latest checkpoint.",
            &base,
            last.stats.alignment_ms / 1000.0,
        );
    }

    // Deployments (`sluice serve`).
    if view.deployments.is_empty() {
        return;
    }
    let mut counts: std::collections::BTreeMap<(&str, &str, &str), u64> = Default::default();
    let pauses = super::DurationHistogram::default();
    for d in &view.deployments {
        *counts
            .entry((d.operator.as_str(), d.kind.as_str(), d.status.as_str()))
            .or_default() += 1;
        pauses.observe(std::time::Duration::from_secs_f64(
            d.pause_ms.max(0.0) / 1000.0,
        ));
    }
    for ((operator, kind, status), count) in counts {
        out.counter(
            "sluice_deployments_total",
            "Plugin deployments and rollbacks, by outcome.",
            &refs(&with(&[
                ("operator", operator),
                ("kind", kind),
                ("status", status),
            ])),
            count as f64,
        );
    }
    out.histogram(
        "sluice_deploy_pause_seconds",
        "The pause of each plugin swap (the longest of its instances).",
        &base,
        &pauses.snapshot(),
    );
}

/// The whole endpoint's text for `views`.
pub fn render(views: &[PipelineView], now_ms: i64) -> String {
    let mut out = Exposition::default();
    build_info(&mut out);
    for view in views {
        pipeline(&mut out, view, now_ms);
    }
    out.render()
}
