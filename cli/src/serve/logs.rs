//! Plugin logs per pipeline: what plugins write through `host.log` and to
//! their stdout/stderr, kept in memory for `sluice logs` (tail, `--since`,
//! `--follow`).
//!
//! The host logs those lines with `tracing`, tagged with tenant, pipeline
//! and operator. [`CaptureLayer`] is a `tracing` layer that files every
//! event carrying a tenant and a pipeline under that pipeline in a
//! [`LogStore`]: a ring of the last [`LINES_KEPT`] lines per pipeline, each
//! numbered so that a follower asks for what came after the last one it
//! saw. A tenant reads only its own pipelines' lines (the API scopes by
//! the caller's tenant).

use serde::Serialize;
use sluice_host::sync::lock;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

/// Lines kept per pipeline.
pub const LINES_KEPT: usize = 2_000;

/// Longest line kept, bytes; the rest is cut.
const MAX_LINE: usize = 4_096;

/// One log line of a pipeline.
#[derive(Debug, Clone, Serialize)]
pub struct LogLine {
    /// Its number (increasing over the server's life).
    pub seq: u64,
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub level: &'static str,
    /// The operator whose plugin wrote it (empty for the host).
    pub operator: String,
    /// The line.
    pub message: String,
}

/// The log lines of every pipeline (see the module docs).
#[derive(Debug, Default)]
pub struct LogStore {
    lines: Mutex<HashMap<(String, String), VecDeque<LogLine>>>,
    next_seq: AtomicU64,
}

impl LogStore {
    fn lines(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), VecDeque<LogLine>>> {
        lock(&self.lines)
    }

    /// Files a line under the pipeline `(tenant, pipeline)`.
    pub fn push(&self, tenant: &str, pipeline: &str, mut line: LogLine) {
        line.seq = self.next_seq.fetch_add(1, Ordering::Relaxed) + 1;
        let mut lines = self.lines();
        let kept = lines
            .entry((tenant.to_string(), pipeline.to_string()))
            .or_default();
        if kept.len() == LINES_KEPT {
            kept.pop_front();
        }
        kept.push_back(line);
    }

    /// The pipeline's lines numbered above `after` and written at or after
    /// `since_ms`, oldest first, at most `limit` (the newest ones).
    pub fn read(
        &self,
        tenant: &str,
        pipeline: &str,
        after: u64,
        since_ms: i64,
        limit: usize,
    ) -> Vec<LogLine> {
        let lines = self.lines();
        let Some(kept) = lines.get(&(tenant.to_string(), pipeline.to_string())) else {
            return Vec::new();
        };
        let matching: Vec<&LogLine> = kept
            .iter()
            .filter(|line| line.seq > after && line.at_ms >= since_ms)
            .collect();
        let skip = matching.len().saturating_sub(limit);
        matching.into_iter().skip(skip).cloned().collect()
    }

    /// Forgets a deleted pipeline's lines.
    pub fn remove(&self, tenant: &str, pipeline: &str) {
        self.lines()
            .remove(&(tenant.to_string(), pipeline.to_string()));
    }
}

/// The log store of this process (filled when `main` installed
/// [`CaptureLayer`], which it does for `sluice serve`).
pub fn global() -> std::sync::Arc<LogStore> {
    static STORE: std::sync::OnceLock<std::sync::Arc<LogStore>> = std::sync::OnceLock::new();
    STORE.get_or_init(Default::default).clone()
}

/// Files tagged `tracing` events in a [`LogStore`].
pub struct CaptureLayer(pub std::sync::Arc<LogStore>);

/// The fields of an event that matter here.
#[derive(Default)]
struct Fields {
    tenant: Option<String>,
    pipeline: Option<String>,
    operator: String,
    message: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record(field, format!("{value:?}"));
    }
}

impl Fields {
    fn record(&mut self, field: &Field, value: String) {
        match field.name() {
            "tenant" => self.tenant = Some(value),
            "pipeline" => self.pipeline = Some(value),
            "operator" => self.operator = value,
            "message" => self.message = value,
            _ => {}
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CaptureLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _context: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let (Some(tenant), Some(pipeline)) = (fields.tenant, fields.pipeline) else {
            return;
        };
        let mut message = fields.message;
        if message.len() > MAX_LINE {
            let mut end = MAX_LINE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warn",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        self.0.push(
            &tenant,
            &pipeline,
            LogLine {
                seq: 0,
                at_ms: sluice_host::time::now_ms(),
                level,
                operator: fields.operator,
                message,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(message: &str) -> LogLine {
        LogLine {
            seq: 0,
            at_ms: 1_000,
            level: "info",
            operator: "op".into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_pipeline_reads_only_its_own_lines_after_the_last_it_saw() {
        let store = LogStore::default();
        store.push("a", "p", line("one"));
        store.push("b", "p", line("other tenant"));
        store.push("a", "p", line("two"));
        let all = store.read("a", "p", 0, 0, 100);
        assert_eq!(
            all.iter().map(|l| l.message.as_str()).collect::<Vec<_>>(),
            ["one", "two"]
        );
        let after = store.read("a", "p", all[0].seq, 0, 100);
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].message, "two");
        assert_eq!(store.read("a", "p", 0, 0, 1)[0].message, "two");
        assert!(store.read("a", "p", 0, 2_000, 100).is_empty());
        store.remove("a", "p");
        assert!(store.read("a", "p", 0, 0, 100).is_empty());
    }

    #[test]
    fn the_ring_keeps_the_newest_lines() {
        let store = LogStore::default();
        for i in 0..LINES_KEPT + 5 {
            store.push("a", "p", line(&i.to_string()));
        }
        let kept = store.read("a", "p", 0, 0, usize::MAX);
        assert_eq!(kept.len(), LINES_KEPT);
        assert_eq!(kept[0].message, "5");
    }
}
