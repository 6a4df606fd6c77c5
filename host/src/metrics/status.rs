//! The JSON status the dashboard reads: a pipeline's counters turned into
//! what an operator of the job asks — rates, busy and backpressured ratios
//! per operator coloured by Flink's thresholds, which source split holds
//! the watermark back, latency and lag over the last minutes, the job
//! graph with channel fill, checkpoint history.
//!
//! Rates and ratios need two points in time: a [`StatusHistory`] is fed a
//! snapshot of every pipeline each second (by `sluice run --http` and
//! `sluice serve`) and keeps a few minutes of small samples per pipeline.

use super::exposition::PipelineView;
use super::{OperatorMetrics, OperatorSnapshot, PipelineSnapshot};
use crate::sync::lock;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// Samples kept per pipeline (one a second: five minutes).
pub const HISTORY_SAMPLES: usize = 300;

/// Snapshots the busy and backpressured ratios are computed over (seconds
/// apart): short enough to show a change within seconds, long enough not to
/// flicker.
const RATIO_WINDOW: usize = 3;

/// Flink's backpressure levels: OK up to 10 % of the time backpressured,
/// LOW up to 50 %, HIGH above.
pub fn backpressure_level(ratio: f64) -> &'static str {
    if ratio <= 0.10 {
        "ok"
    } else if ratio <= 0.50 {
        "low"
    } else {
        "high"
    }
}

/// One point of a pipeline's history.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sample {
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// Records read per second since the previous sample.
    pub in_per_s: f64,
    /// Records written to the main sink per second.
    pub out_per_s: f64,
    /// Records dead-lettered per second.
    pub dead_letters_per_s: f64,
    /// Record latency p50 over the interval, ms.
    pub latency_p50_ms: Option<f64>,
    /// Record latency p99 over the interval, ms.
    pub latency_p99_ms: Option<f64>,
    /// Wall clock minus the latest event time written, ms.
    pub event_time_lag_ms: Option<i64>,
    /// Total consumer lag, records.
    pub consumer_lag: Option<i64>,
}

#[derive(Debug, Default)]
struct PipelineHistory {
    samples: VecDeque<Sample>,
    /// The latest snapshots, newest last, with their times.
    recent: VecDeque<(i64, PipelineSnapshot)>,
}

/// The history of every pipeline, keyed by (tenant, pipeline).
#[derive(Debug, Default)]
pub struct StatusHistory {
    pipelines: Mutex<BTreeMap<(String, String), PipelineHistory>>,
}

impl StatusHistory {
    /// Adds the snapshot of `(tenant, pipeline)` taken at `now_ms`.
    pub fn record(&self, tenant: &str, pipeline: &str, snapshot: PipelineSnapshot, now_ms: i64) {
        let mut pipelines = lock(&self.pipelines);
        let history = pipelines
            .entry((tenant.to_string(), pipeline.to_string()))
            .or_default();
        if let Some((then, previous)) = history.recent.back()
            && snapshot.uptime_seconds >= previous.uptime_seconds
        {
            let seconds = ((now_ms - then) as f64 / 1000.0).max(0.001);
            let per_s = |now: u64, before: u64| now.saturating_sub(before) as f64 / seconds;
            let latency = snapshot.record_latency.since(&previous.record_latency);
            let sample = Sample {
                at_ms: now_ms,
                in_per_s: per_s(snapshot.records_in, previous.records_in),
                out_per_s: per_s(snapshot.records_out, previous.records_out),
                dead_letters_per_s: per_s(snapshot.dead_letters, previous.dead_letters),
                latency_p50_ms: latency.quantile(0.5).map(|s| s * 1000.0),
                latency_p99_ms: latency.quantile(0.99).map(|s| s * 1000.0),
                event_time_lag_ms: snapshot.sink_event_time.map(|t| now_ms.saturating_sub(t)),
                consumer_lag: snapshot.total_lag(),
            };
            if history.samples.len() == HISTORY_SAMPLES {
                history.samples.pop_front();
            }
            history.samples.push_back(sample);
        } else {
            // A new run (uptime went back): its counters start over.
            history.recent.clear();
        }
        if history.recent.len() > RATIO_WINDOW {
            history.recent.pop_front();
        }
        history.recent.push_back((now_ms, snapshot));
    }

    /// Forgets a deleted pipeline.
    pub fn forget(&self, tenant: &str, pipeline: &str) {
        lock(&self.pipelines).remove(&(tenant.to_string(), pipeline.to_string()));
    }

    /// The samples of `(tenant, pipeline)`, oldest first, and the oldest of
    /// its recent snapshots (for ratios over the last seconds).
    fn read(&self, tenant: &str, pipeline: &str) -> (Vec<Sample>, Option<(i64, PipelineSnapshot)>) {
        let pipelines = lock(&self.pipelines);
        match pipelines.get(&(tenant.to_string(), pipeline.to_string())) {
            Some(history) => (
                history.samples.iter().cloned().collect(),
                history.recent.front().cloned(),
            ),
            None => (Vec::new(), None),
        }
    }

    /// The latest sample of `(tenant, pipeline)`.
    pub fn latest(&self, tenant: &str, pipeline: &str) -> Option<Sample> {
        let pipelines = lock(&self.pipelines);
        pipelines
            .get(&(tenant.to_string(), pipeline.to_string()))
            .and_then(|history| history.samples.back().cloned())
    }
}

/// Busy, backpressured and idle shares of the time between two snapshots
/// of an operator.
fn ratios(now: &OperatorSnapshot, before: Option<&OperatorSnapshot>, seconds: f64) -> (f64, f64) {
    let delta = |now: u64, before: Option<u64>| now.saturating_sub(before.unwrap_or(0)) as f64;
    let busy = delta(now.busy_ns, before.map(|b| b.busy_ns)) * 1e-9 / seconds;
    let backpressured =
        delta(now.backpressured_ns, before.map(|b| b.backpressured_ns)) * 1e-9 / seconds;
    (busy.clamp(0.0, 1.0), backpressured.clamp(0.0, 1.0))
}

/// The summary line of a pipeline in the list: state, rates, lag,
/// checkpoint age.
pub fn pipeline_summary(view: &PipelineView, history: &StatusHistory, now_ms: i64) -> Value {
    let s = &view.snapshot;
    let latest = history.latest(&view.tenant, &view.pipeline);
    json!({
        "tenant": view.tenant,
        "name": view.pipeline,
        "state": view.state,
        "records_in": s.records_in,
        "records_out": s.records_out,
        "dead_letters": s.dead_letters,
        "in_per_s": latest.as_ref().map(|l| l.in_per_s),
        "out_per_s": latest.as_ref().map(|l| l.out_per_s),
        "consumer_lag": s.total_lag(),
        "watermark_lag_ms": s.watermark.filter(|w| *w != i64::MAX).map(|w| now_ms.saturating_sub(w)),
        "checkpoint_age_ms": s.checkpoints.last().map(|c| now_ms.saturating_sub(c.completed_at_ms)),
        "sink_retries": s.sink_retries,
        "sink_rows_expired": s.sink_rows_expired,
        "sink_unavailable_ms": s.sink_unavailable_since_ms.map(|since| now_ms.saturating_sub(since)),
    })
}

/// The full status of one pipeline: [`pipeline_summary`] plus the job
/// graph, splits, checkpoints and history. `extra` (recent errors,
/// dead-letter samples, deployments) is merged in as it is.
pub fn pipeline_status(
    view: &PipelineView,
    history: &StatusHistory,
    now_ms: i64,
    extra: Value,
) -> Value {
    let s = &view.snapshot;
    let (samples, oldest) = history.read(&view.tenant, &view.pipeline);
    let (seconds, before) = match &oldest {
        Some((_, snapshot)) if snapshot.uptime_seconds <= s.uptime_seconds => (
            (s.uptime_seconds - snapshot.uptime_seconds).max(0.001),
            Some(snapshot),
        ),
        _ => (s.uptime_seconds.max(0.001), None),
    };
    let mut status = pipeline_summary(view, history, now_ms);
    status["uptime_seconds"] = json!(s.uptime_seconds);
    status["watermark"] = json!(s.watermark);
    status["event_time_lag_ms"] = json!(s.sink_event_time.map(|t| now_ms.saturating_sub(t)));
    status["latency"] = json!({
        "p50_ms": s.record_latency.quantile(0.5).map(|q| q * 1000.0),
        "p99_ms": s.record_latency.quantile(0.99).map(|q| q * 1000.0),
        "samples": s.record_latency.count,
    });
    status["graph"] = graph(s, before, seconds);
    status["splits"] = splits(s, now_ms);
    status["checkpoints"] = json!({
        "completed": s.checkpoints.completed,
        "failed": s.checkpoints.failed,
        "last_age_ms": s.checkpoints.last().map(|c| now_ms.saturating_sub(c.completed_at_ms)),
        "history": s.checkpoints.history,
    });
    status["history"] = json!(samples);
    if let (Value::Object(status), Value::Object(extra)) = (&mut status, extra) {
        status.extend(extra);
    }
    status
}

/// The job graph: the source, each operator (with its workers), the sinks;
/// each node with its busy and backpressured ratios over the last seconds
/// and a backpressure level, each edge with its channel's fill (edges
/// between operators chained in one thread have no channel).
fn graph(s: &PipelineSnapshot, before: Option<&PipelineSnapshot>, seconds: f64) -> Value {
    let source_backpressure =
        (s.source_backpressured_ns
            .saturating_sub(before.map_or(0, |b| b.source_backpressured_ns)) as f64
            * 1e-9
            / seconds)
            .clamp(0.0, 1.0);
    let mut nodes = vec![json!({
        "id": "source",
        "kind": "source",
        "backpressured_ratio": source_backpressure,
        "level": backpressure_level(source_backpressure),
        "records_out": s.records_in,
    })];
    // Operators by name, in chain order, with their workers.
    let mut order: Vec<(&str, usize)> = Vec::new();
    let mut workers: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let mut queries: BTreeMap<&str, &str> = BTreeMap::new();
    for operator in &s.operators {
        let (name, worker) = OperatorMetrics::operator_and_worker(&operator.name);
        if !order.iter().any(|(n, _)| *n == name) {
            order.push((name, operator.stage));
        }
        if let Some(sql) = &operator.sql {
            queries.insert(name, sql);
        }
        let earlier = before.and_then(|b| b.operators.iter().find(|o| o.name == operator.name));
        let (busy, backpressured) = ratios(operator, earlier, seconds);
        workers.entry(name).or_default().push(json!({
            "worker": worker,
            "busy_ratio": busy,
            "backpressured_ratio": backpressured,
            "idle_ratio": (1.0 - busy - backpressured).max(0.0),
            "level": backpressure_level(backpressured),
            "records_in": operator.records_in,
            "records_out": operator.records_out,
            "dead_letters": operator.dead_letters,
            "watermark": operator.watermark,
            "state_bytes": operator.state_bytes,
        }));
    }
    for (name, stage) in &order {
        let instances = workers.remove(name).unwrap_or_default();
        let max = |field: &str| {
            instances
                .iter()
                .filter_map(|w| w[field].as_f64())
                .fold(0.0, f64::max)
        };
        let backpressured = max("backpressured_ratio");
        nodes.push(json!({
            "id": name,
            "kind": "operator",
            "stage": stage,
            "busy_ratio": max("busy_ratio"),
            "backpressured_ratio": backpressured,
            "level": backpressure_level(backpressured),
            "watermark": instances.iter().filter_map(|w| w["watermark"].as_i64()).min(),
            "workers": instances,
            "sql": queries.get(name),
        }));
    }
    nodes.push(json!({ "id": "sinks", "kind": "sinks", "records_in": s.records_out }));

    // Edges, with the fill of the channels that carry them.
    let fill = |pick: &dyn Fn(&super::ChannelSnapshot) -> bool| -> Value {
        let (queued, capacity) = s
            .channels
            .iter()
            .filter(|c| pick(c))
            .fold((0, 0), |(q, c), ch| (q + ch.queued, c + ch.capacity));
        if capacity == 0 {
            Value::Null
        } else {
            json!({ "queued": queued, "capacity": capacity, "fill": queued as f64 / capacity as f64 })
        }
    };
    let ids: Vec<&str> = std::iter::once("source")
        .chain(order.iter().map(|(n, _)| *n))
        .chain(std::iter::once("sinks"))
        .collect();
    let stages: Vec<usize> = std::iter::once(0)
        .chain(order.iter().map(|(_, stage)| *stage))
        .collect();
    let mut edges = Vec::new();
    for i in 0..ids.len() - 1 {
        let channel = if i == 0 {
            fill(&|c| c.from == "source")
        } else if i + 1 == ids.len() - 1 {
            fill(&|c| c.to == "sinks")
        } else if stages[i + 1] > stages[i] {
            let prefix = format!("stage{}-", stages[i + 1]);
            fill(&|c| c.to.starts_with(&prefix))
        } else {
            Value::Null
        };
        edges.push(json!({ "from": ids[i], "to": ids[i + 1], "channel": channel }));
    }
    json!({ "nodes": nodes, "edges": edges })
}

/// The source splits, with the one(s) holding the watermark back marked:
/// an active split without records yet, or the active split(s) with the
/// lowest watermark when others are ahead of it.
fn splits(s: &PipelineSnapshot, now_ms: i64) -> Value {
    let active: Vec<_> = s.source_splits.iter().filter(|split| !split.idle).collect();
    let waiting = active.iter().any(|split| split.watermark.is_none());
    let lowest = active.iter().filter_map(|split| split.watermark).min();
    let highest = active.iter().filter_map(|split| split.watermark).max();
    let lag_of = |topic: &str, partition: i32| {
        s.source_partitions
            .iter()
            .find(|(t, p, _)| t == topic && *p == partition)
            .and_then(|(_, _, stats)| stats.lag)
    };
    let list: Vec<Value> = s
        .source_splits
        .iter()
        .map(|split| {
            let holding_back = !split.idle
                && if waiting {
                    split.watermark.is_none()
                } else {
                    active.len() > 1 && split.watermark == lowest && lowest < highest
                };
            json!({
                "topic": split.topic,
                "partition": split.partition,
                "watermark": split.watermark,
                "watermark_lag_ms": split.watermark.map(|w| now_ms.saturating_sub(w)),
                "idle": split.idle,
                "holding_back": holding_back,
                "consumer_lag": lag_of(&split.topic, split.partition),
            })
        })
        .collect();
    json!(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::PipelineMetrics;
    use crate::time::SplitStatus;
    use std::sync::atomic::Ordering;

    fn view(snapshot: PipelineSnapshot) -> PipelineView {
        PipelineView {
            tenant: "t".into(),
            pipeline: "p".into(),
            state: "running".into(),
            snapshot,
            deployments: Vec::new(),
        }
    }

    #[test]
    fn levels_follow_flinks_thresholds() {
        assert_eq!(backpressure_level(0.0), "ok");
        assert_eq!(backpressure_level(0.10), "ok");
        assert_eq!(backpressure_level(0.11), "low");
        assert_eq!(backpressure_level(0.50), "low");
        assert_eq!(backpressure_level(0.51), "high");
    }

    #[test]
    fn rates_come_from_consecutive_snapshots_and_the_slow_split_is_marked() {
        let metrics = PipelineMetrics::default();
        let history = StatusHistory::default();
        let mut first = metrics.snapshot();
        first.uptime_seconds = 1.0;
        history.record("t", "p", first, 1_000);
        metrics.records_in.store(500, Ordering::Relaxed);
        *metrics.source_splits.lock().unwrap() = vec![
            SplitStatus {
                topic: "in".into(),
                partition: 0,
                watermark: Some(10_000),
                idle: false,
            },
            SplitStatus {
                topic: "in".into(),
                partition: 1,
                watermark: Some(2_000),
                idle: false,
            },
        ];
        let mut second = metrics.snapshot();
        second.uptime_seconds = 3.0;
        history.record("t", "p", second.clone(), 3_000);
        let latest = history.latest("t", "p").expect("a sample");
        assert_eq!(latest.in_per_s, 250.0);
        let status = pipeline_status(&view(second), &history, 3_000, json!({}));
        assert_eq!(status["splits"][0]["holding_back"], false);
        assert_eq!(status["splits"][1]["holding_back"], true);
        assert_eq!(status["graph"]["nodes"][0]["id"], "source");
        history.forget("t", "p");

        // A SQL operator's node carries its query.
        let query = crate::metrics::OperatorMetrics::new("q");
        let _ = query.sql.set("SELECT a FROM input".into());
        metrics.register_operator(query);
        let third = metrics.snapshot();
        let status = pipeline_status(&view(third), &history, 3_000, json!({}));
        assert_eq!(status["graph"]["nodes"][1]["id"], "q");
        assert_eq!(status["graph"]["nodes"][1]["sql"], "SELECT a FROM input");
        history.forget("t", "p");
        assert!(history.latest("t", "p").is_none());
    }
}
