//! `sluice run`: runs one pipeline with live progress and a final summary.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluice_host::checkpoint::RestoreFrom;
use sluice_host::config::{LoadedConfig, SourceConfig};
use sluice_host::dataflow::RunOutcome;
use sluice_host::metrics::PipelineSnapshot;
use sluice_host::pipeline::Pipeline;
use sluice_host::runtime::{PluginRuntime, RuntimeConfig};
use sluice_host::sync::lock;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The result of a run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// How it ended.
    pub outcome: RunOutcome,
    /// Final counters.
    pub snapshot: PipelineSnapshot,
    /// Wall-clock time of the run (after start-up).
    pub elapsed: Duration,
    /// From the end of a bounded input to the end of the run (the final
    /// checkpoint and commits, closing connections).
    pub tail: Option<Duration>,
}

/// How `sluice run` runs a pipeline.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunOptions {
    /// Draw a live progress line on stderr.
    pub progress: bool,
    /// Which checkpoint to restore.
    pub from: RestoreFrom,
    /// Serve `/metrics`, the JSON status and the dashboard here (a
    /// loopback address).
    pub http: Option<std::net::SocketAddr>,
    /// Serve `/healthz` and `/readyz` here (any address: they say nothing
    /// but whether the process is up and its tasks are running), for a
    /// scaled-out run's liveness and readiness probes.
    pub health: Option<std::net::SocketAddr>,
}

impl RunOptions {
    /// Restore `from`, with or without a progress line, no HTTP endpoint.
    pub fn new(progress: bool, from: RestoreFrom) -> Self {
        RunOptions {
            progress,
            from,
            http: None,
            health: None,
        }
    }

    /// Serve the health probes on `address`.
    pub fn with_health(mut self, address: Option<std::net::SocketAddr>) -> Self {
        self.health = address;
        self
    }

    /// Serve metrics, status and the dashboard on `address`.
    pub fn with_http(mut self, address: Option<std::net::SocketAddr>) -> Self {
        self.http = address;
        self
    }
}

/// Loads, builds and runs the pipeline in `file`, restoring `from` if it
/// checkpoints. SIGINT and SIGTERM stop it cleanly (drain, flush, final
/// checkpoint, summary); `progress` draws a live line on stderr.
pub fn run_pipeline(file: &Path, progress: bool, from: &RestoreFrom) -> Result<RunReport> {
    run_pipeline_with(file, &RunOptions::new(progress, from.clone()))
}

/// Runs the pipeline in `file` as `sluice run` does and returns the
/// summary to print: a scaled-out pipeline (`[source.kafka] scale_out`) as
/// the tasks the consumer group gives this process ([`run_tasks`]), any
/// other with [`run_pipeline_with`].
pub fn run_file(file: &Path, options: &RunOptions) -> Result<String> {
    let loaded = LoadedConfig::load(file)?;
    match &loaded.config.source {
        SourceConfig::Kafka(kafka) if kafka.scale_out => run_tasks(file, options),
        _ => Ok(summary(&run_pipeline_with(file, options)?)),
    }
}

/// Runs this process's share of the scaled-out pipeline in `file` until
/// SIGINT or SIGTERM (each task then takes a final checkpoint and the
/// process leaves the group); `SLUICE_INSTANCE` names the process for
/// static group membership (a StatefulSet pod's name). Returns what each
/// task did.
pub fn run_tasks(file: &Path, options: &RunOptions) -> Result<String> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handler")?;
    }
    let loaded = LoadedConfig::load(file)?;
    if options.from != RestoreFrom::Latest {
        anyhow::bail!(
            "a scaled-out pipeline's tasks each restore their own latest checkpoint: --fresh and --from-checkpoint name one checkpoint of a whole pipeline"
        );
    }
    let runtime = PluginRuntime::new(RuntimeConfig::default())?;
    let instance = std::env::var("SLUICE_INSTANCE").ok();
    let board = Arc::new(sluice_host::tasks::TaskBoard::default());
    let _endpoint = match options.http {
        Some(address) => {
            let tasks = Arc::new(crate::observe::RunTasks {
                tenant: loaded.config.pipeline.tenant.clone(),
                board: board.clone(),
            });
            let endpoint = crate::observe::RunEndpoint::start(address, tasks)?;
            eprintln!(
                "metrics on http://{0}/metrics, tasks on http://{0}/api/v1/status",
                endpoint.address
            );
            Some(endpoint)
        }
        None => None,
    };
    let _health = match options.health {
        Some(address) => {
            let ready_board = board.clone();
            let ready = Arc::new(move || ready_board.ready());
            Some(crate::observe::HealthEndpoint::start(address, ready)?)
        }
        None => None,
    };
    let report = sluice_host::tasks::run_tasks(
        &loaded,
        &runtime,
        &crate::build::resolve_plugin,
        instance.as_deref(),
        stop,
        &board,
    )?;
    let mut text = format!(
        "stopped: {} task runs in this process\n",
        report.tasks.len()
    );
    for task in &report.tasks {
        let _ = writeln!(
            text,
            "  task {}: restored {}, in {} out {}, {}",
            task.task.name(),
            task.restored
                .map_or("nothing".to_string(), |id| format!("checkpoint {id}")),
            task.records_in,
            task.records_out,
            match &task.outcome {
                Ok(RunOutcome::Completed) => "completed".to_string(),
                Ok(RunOutcome::Stopped) => "stopped".to_string(),
                Err(error) => format!("failed: {error}"),
            }
        );
    }
    Ok(text)
}

/// [`run_pipeline`] with every option.
pub fn run_pipeline_with(file: &Path, options: &RunOptions) -> Result<RunReport> {
    let progress = options.progress;
    // First of all, so that a stop asked for while the pipeline opens
    // (restoring a checkpoint, compiling plugins, joining the consumer
    // group) is a clean stop once it has opened, not the default action's
    // death by signal.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handler")?;
    }
    let loaded = LoadedConfig::load(file)?;
    let runtime = PluginRuntime::new(RuntimeConfig::default())?;
    let pipeline = Pipeline::open(
        &loaded,
        &runtime,
        &crate::build::resolve_plugin,
        &options.from,
    )?;
    let restored = pipeline.restored_checkpoint();
    if let Some(id) = restored {
        eprintln!("restored checkpoint {id}");
    }
    let metrics = pipeline.metrics();
    let observed = Arc::new(crate::observe::RunPipeline {
        tenant: loaded.config.pipeline.tenant.clone(),
        name: loaded.config.pipeline.name.clone(),
        metrics: metrics.clone(),
        state: std::sync::Mutex::new("running".into()),
    });
    let endpoint = match options.http {
        Some(address) => {
            let endpoint = crate::observe::RunEndpoint::start(address, observed.clone())?;
            eprintln!(
                "metrics on http://{0}/metrics, dashboard on http://{0}/",
                endpoint.address
            );
            Some(endpoint)
        }
        None => None,
    };

    let started = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let progress_thread = progress.then(|| {
        let metrics = metrics.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            let mut last = metrics.snapshot();
            let mut last_at = Instant::now();
            while !done.load(Ordering::Relaxed) {
                std::thread::park_timeout(Duration::from_millis(500));
                let now = metrics.snapshot();
                let seconds = last_at.elapsed().as_secs_f64().max(1e-9);
                let rate = |a: u64, b: u64| (a.saturating_sub(b)) as f64 / seconds;
                let lag = now
                    .total_lag()
                    .map(|lag| format!(" lag {lag}"))
                    .unwrap_or_default();
                let checkpoint = now
                    .checkpoints
                    .last()
                    .map(|last| {
                        format!(
                            " | chk {} {:.0} ms, age {:.1} s",
                            last.id,
                            last.stats.total_ms,
                            (sluice_host::time::now_ms() - last.completed_at_ms) as f64
                                / 1000.0
                        )
                    })
                    .unwrap_or_default();
                bar.set_message(format!(
                    "in {:>9.0}/s  out {:>9.0}/s  dlq {:>7.0}/s  | total in {} out {} dlq {}{lag}{checkpoint}",
                    rate(now.records_in, last.records_in),
                    rate(now.records_out, last.records_out),
                    rate(now.dead_letters, last.dead_letters),
                    now.records_in,
                    now.records_out,
                    now.dead_letters
                ));
                bar.tick();
                last = now;
                last_at = Instant::now();
            }
            bar.finish_and_clear();
        })
    });

    let result = pipeline.run(stop);
    *lock(&observed.state) = match &result {
        Ok(RunOutcome::Completed) => "finished".into(),
        Ok(RunOutcome::Stopped) => "stopped".into(),
        Err(_) => "failed".into(),
    };
    drop(endpoint);
    done.store(true, Ordering::Relaxed);
    if let Some(thread) = progress_thread {
        thread.thread().unpark();
        let _ = thread.join();
    }
    let outcome = result?;
    Ok(RunReport {
        outcome,
        snapshot: metrics.snapshot(),
        elapsed: started.elapsed(),
        tail: metrics.input_ended.get().map(Instant::elapsed),
    })
}

/// A watermark for the summary, with how far it is behind the wall clock
/// (Flink's watermark lag).
fn watermark_text(watermark: Option<i64>, now_ms: i64) -> String {
    match watermark {
        None => "none".into(),
        Some(i64::MAX) => "end of input".into(),
        Some(w) => format!("{w} (lag {} ms)", now_ms.saturating_sub(w)),
    }
}

/// The process's peak resident memory so far, MiB (Linux's `VmHWM`;
/// `None` where there is none): what the run needed at most, for sizing
/// and for the budget `state_cache_mb` sets (docs/pipeline-file.md).
fn peak_resident_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// The end-of-run summary printed by `sluice run`.
pub fn summary(report: &RunReport) -> String {
    let s = &report.snapshot;
    let seconds = report.elapsed.as_secs_f64().max(1e-9);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut text = String::new();
    let tail = report
        .tail
        .map(|tail| {
            format!(
                " ({:.0} ms after the end of the input)",
                tail.as_secs_f64() * 1e3
            )
        })
        .unwrap_or_default();
    let _ = writeln!(
        text,
        "{} in {:.2} s{tail}: {} records in ({:.0}/s), {} out, {} to side outputs, {} dead-lettered",
        match report.outcome {
            RunOutcome::Completed => "completed",
            RunOutcome::Stopped => "stopped",
        },
        seconds,
        s.records_in,
        s.records_in as f64 / seconds,
        s.records_out,
        s.side_out,
        s.dead_letters
    );
    let _ = writeln!(
        text,
        "barriers {}, watermark {}, source backpressured {:.1} ms",
        s.barriers,
        watermark_text(s.watermark, now_ms),
        s.source_backpressured_ns as f64 / 1e6
    );
    if let Some(peak) = peak_resident_mib() {
        let _ = writeln!(text, "peak resident memory {peak} MiB");
    }
    if cfg!(debug_assertions) {
        // The README's quickstart runs a debug build (it shares the test
        // build and compiles in half the time); its rates are not Sluice's.
        let _ = writeln!(
            text,
            "debug build: rates and memory are not representative (`cargo run --release` builds the optimised binary)"
        );
    }
    let checkpoints = &s.checkpoints;
    if checkpoints.completed + checkpoints.failed > 0 {
        let _ = write!(
            text,
            "checkpoints {} completed, {} failed",
            checkpoints.completed, checkpoints.failed
        );
        if let Some(last) = checkpoints.last() {
            let st = &last.stats;
            let _ = write!(
                text,
                "; last {}: {:.1} ms (sync {:.1} ms, alignment {:.1} ms, async {:.1} ms), state {} bytes, uploaded {} bytes in {} files, age {:.1} s",
                last.id,
                st.total_ms,
                st.sync_ms,
                st.alignment_ms,
                st.async_ms,
                st.state_bytes,
                st.uploaded_bytes,
                st.uploaded_files,
                (now_ms - last.completed_at_ms) as f64 / 1000.0
            );
        }
        let _ = writeln!(text);
    }
    for (topic, partition, stats) in &s.source_partitions {
        let lag = stats
            .lag
            .map_or("unknown".to_string(), |lag| lag.to_string());
        let _ = writeln!(
            text,
            "  source {topic}/{partition}: in {} lag {lag}",
            stats.records
        );
    }
    for (topic, partition, stats) in &s.sink_partitions {
        let _ = writeln!(text, "  sink {topic}/{partition}: out {}", stats.records);
    }
    for op in &s.operators {
        let _ = writeln!(
            text,
            "  operator {}: in {} out {} side {} dlq {} traps {} restarts {} busy {:.1}% backpressured {:.1}%",
            op.name,
            op.records_in,
            op.records_out,
            op.side_out,
            op.dead_letters,
            op.traps,
            op.reinstantiations,
            op.busy_ns as f64 / 1e9 / seconds * 100.0,
            op.backpressured_ns as f64 / 1e9 / seconds * 100.0
        );
        if op.plugin_memory_bytes > 0 {
            let _ = writeln!(
                text,
                "    plugin memory {:.1} MiB",
                op.plugin_memory_bytes as f64 / f64::from(1 << 20)
            );
        }
        if op.state_peak_bytes > 0 || op.watermark.is_some() {
            let _ = writeln!(
                text,
                "    state {} bytes ({} keys), peak {} bytes, on disk {} bytes (peak {}); watermark {}",
                op.state_bytes,
                op.state_keys,
                op.state_peak_bytes,
                op.state_disk_bytes,
                op.state_disk_peak_bytes,
                watermark_text(op.watermark, now_ms)
            );
        }
        for (name, value) in &op.plugin_counters {
            let _ = writeln!(text, "    {name} = {value}");
        }
    }
    text
}
