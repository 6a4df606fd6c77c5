//! Observability over HTTP, shared by `sluice run --http` and `sluice
//! serve`: the Prometheus endpoint (`GET /metrics`), the JSON status the
//! dashboard reads (`GET /api/v1/status`, `GET
//! /api/v1/pipelines/{name}/status`) and the dashboard itself (`GET /`,
//! static assets embedded in the binary: [`dashboard`]).
//!
//! What a caller sees comes from a [`Pipelines`]: one pipeline for `sluice
//! run`, the caller's tenant's pipelines for `sluice serve` (whose routes
//! authenticate first, then call the same functions). A sampler thread
//! feeds a [`StatusHistory`] every second, so rates, ratios and charts
//! cover the last minutes whenever a page is opened.

pub mod dashboard;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use sluice_host::metrics::PipelineMetrics;
use sluice_host::metrics::exposition::{self, PipelineView};
use sluice_host::metrics::status::{self, StatusHistory};
use sluice_host::sync::lock;
use sluice_host::time::now_ms;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A pipeline as observed: its view plus what the status page shows
/// beside the counters (recent errors, dead-letter samples, deployments).
#[derive(Debug, Clone)]
pub struct Observed {
    /// Counters and identity.
    pub view: PipelineView,
    /// Merged into its status as it is.
    pub extra: Value,
}

/// Where the observability routes find pipelines.
pub trait Pipelines: Send + Sync + 'static {
    /// Every pipeline `tenant` may see (`None`: all of them), cheaply: the
    /// sampler calls this every second.
    fn views(&self, tenant: Option<&str>) -> Vec<PipelineView>;

    /// One pipeline of `tenant` with everything its status page shows.
    fn observe(&self, tenant: Option<&str>, name: &str) -> Option<Observed>;

    /// Adds what only this host knows (deployments) to views about to be
    /// rendered as metrics.
    fn with_deployments(&self, views: Vec<PipelineView>) -> Vec<PipelineView> {
        views
    }
}

/// The Prometheus text for what `tenant` may see.
pub fn metrics_text(pipelines: &dyn Pipelines, tenant: Option<&str>) -> String {
    let views = pipelines.with_deployments(pipelines.views(tenant));
    exposition::render(&views, now_ms())
}

/// `{"pipelines": [...]}`: a summary line per pipeline `tenant` may see.
pub fn status_list(
    pipelines: &dyn Pipelines,
    history: &StatusHistory,
    tenant: Option<&str>,
) -> Value {
    let now = now_ms();
    let list: Vec<Value> = pipelines
        .views(tenant)
        .iter()
        .map(|view| status::pipeline_summary(view, history, now))
        .collect();
    json!({ "pipelines": list })
}

/// The full status of pipeline `name` of `tenant`.
pub fn pipeline_status(
    pipelines: &dyn Pipelines,
    history: &StatusHistory,
    tenant: Option<&str>,
    name: &str,
) -> Option<Value> {
    let observed = pipelines.observe(tenant, name)?;
    Some(status::pipeline_status(
        &observed.view,
        history,
        now_ms(),
        observed.extra,
    ))
}

/// Samples every pipeline into `history` each second until `stop` is set,
/// forgetting pipelines that are gone.
pub fn spawn_sampler(
    pipelines: Arc<dyn Pipelines>,
    history: Arc<StatusHistory>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("sluice-metrics-sampler".into())
        .spawn(move || {
            let mut known: Vec<(String, String)> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let now = now_ms();
                let views = pipelines.views(None);
                let seen: Vec<(String, String)> = views
                    .iter()
                    .map(|v| (v.tenant.clone(), v.pipeline.clone()))
                    .collect();
                for (tenant, pipeline) in known.iter().filter(|k| !seen.contains(k)) {
                    history.forget(tenant, pipeline);
                }
                for view in views {
                    history.record(&view.tenant, &view.pipeline, view.snapshot, now);
                }
                known = seen;
                std::thread::park_timeout(Duration::from_secs(1));
            }
        })
        .context("starting the metrics sampler")
}

/// The one pipeline of `sluice run`.
pub struct RunPipeline {
    /// Its tenant.
    pub tenant: String,
    /// Its name.
    pub name: String,
    /// Its counters.
    pub metrics: Arc<PipelineMetrics>,
    /// `running`, then `finished`, `stopped` or `failed`.
    pub state: Mutex<String>,
}

impl RunPipeline {
    fn view(&self) -> PipelineView {
        PipelineView {
            tenant: self.tenant.clone(),
            pipeline: self.name.clone(),
            state: lock(&self.state).clone(),
            snapshot: self.metrics.snapshot(),
            deployments: Vec::new(),
        }
    }
}

impl Pipelines for RunPipeline {
    fn views(&self, _tenant: Option<&str>) -> Vec<PipelineView> {
        vec![self.view()]
    }

    fn observe(&self, _tenant: Option<&str>, name: &str) -> Option<Observed> {
        (name == self.name).then(|| Observed {
            view: self.view(),
            extra: json!({
                "errors": self.metrics.recent_faults(),
                "dead_letter_samples": self.metrics.dead_letter_samples.list(),
            }),
        })
    }
}

/// The tasks a scaled-out `sluice run` owns, each shown as a pipeline
/// named `<pipeline>/tasks/<stage>-<index>` (ADR 0020).
pub struct RunTasks {
    /// The pipeline's tenant.
    pub tenant: String,
    /// What the tasks do now.
    pub board: Arc<sluice_host::tasks::TaskBoard>,
}

impl RunTasks {
    fn task_views(&self) -> Vec<(PipelineView, Arc<PipelineMetrics>)> {
        self.board
            .tasks()
            .into_iter()
            .filter_map(|task| {
                let metrics = task.metrics?;
                Some((
                    PipelineView {
                        tenant: self.tenant.clone(),
                        pipeline: task.name,
                        state: "running".into(),
                        snapshot: metrics.snapshot(),
                        deployments: Vec::new(),
                    },
                    metrics,
                ))
            })
            .collect()
    }
}

impl Pipelines for RunTasks {
    fn views(&self, _tenant: Option<&str>) -> Vec<PipelineView> {
        self.task_views()
            .into_iter()
            .map(|(view, _)| view)
            .collect()
    }

    fn observe(&self, _tenant: Option<&str>, name: &str) -> Option<Observed> {
        self.task_views()
            .into_iter()
            .find(|(view, _)| view.pipeline == name)
            .map(|(view, metrics)| Observed {
                view,
                extra: json!({
                    "errors": metrics.recent_faults(),
                    "dead_letter_samples": metrics.dead_letter_samples.list(),
                }),
            })
    }
}

/// What the routes of `sluice run --http` share.
#[derive(Clone)]
struct RunState {
    pipelines: Arc<dyn Pipelines>,
    history: Arc<StatusHistory>,
}

/// The Prometheus text as a response.
pub fn metrics_response(text: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// The observability routes of `sluice run --http` (no auth: it listens on
/// loopback only).
fn run_router(state: RunState) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(state): State<RunState>| async move {
                metrics_response(metrics_text(state.pipelines.as_ref(), None))
            }),
        )
        .route(
            "/api/v1/status",
            get(|State(state): State<RunState>| async move {
                let mut list = status_list(state.pipelines.as_ref(), &state.history, None);
                list["mode"] = json!("run");
                axum::Json(list)
            }),
        )
        .route(
            "/api/v1/pipelines/{name}/status",
            get(
                |State(state): State<RunState>, Path(name): Path<String>| async move {
                    match pipeline_status(state.pipelines.as_ref(), &state.history, None, &name) {
                        Some(status) => axum::Json(status).into_response(),
                        None => (
                            StatusCode::NOT_FOUND,
                            axum::Json(json!({ "error": "no such pipeline" })),
                        )
                            .into_response(),
                    }
                },
            ),
        )
        .merge(dashboard::routes())
        .with_state(state)
}

/// The HTTP endpoint of `sluice run --http`: serves until dropped.
pub struct RunEndpoint {
    /// The address it listens on (the port the system chose for `:0`).
    pub address: SocketAddr,
    stop: Arc<AtomicBool>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    sampler: Option<std::thread::JoinHandle<()>>,
}

impl RunEndpoint {
    /// Serves `pipelines`' metrics, status and dashboard on `listen`, which
    /// must be a loopback address (these routes have no authentication):
    /// the one pipeline of a run, or the tasks of a scaled-out one.
    pub fn start(listen: SocketAddr, pipelines: Arc<dyn Pipelines>) -> Result<RunEndpoint> {
        if !listen.ip().is_loopback() {
            bail!(
                "--http {listen}: `sluice run` serves its metrics and dashboard without authentication, so only on a loopback address (use `sluice serve` for more)"
            );
        }
        let listener = std::net::TcpListener::bind(listen)
            .with_context(|| format!("--http: listening on {listen}"))?;
        listener
            .set_nonblocking(true)
            .context("--http: configuring the socket")?;
        let address = listener.local_addr().context("--http: its address")?;
        let history = Arc::new(StatusHistory::default());
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = spawn_sampler(pipelines.clone(), history.clone(), stop.clone())?;
        let app = run_router(RunState { pipelines, history });
        let (shutdown, thread) = serve_in_thread(listener, app, "--http")?;
        Ok(RunEndpoint {
            address,
            stop,
            shutdown: Some(shutdown),
            thread: Some(thread),
            sampler: Some(sampler),
        })
    }
}

impl Drop for RunEndpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(sampler) = self.sampler.take() {
            sampler.thread().unpark();
            let _ = sampler.join();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `/healthz` (the process answers) and `/readyz` (what `ready` says) on
/// any address: Kubernetes probes reach a pod from outside its loopback,
/// and these routes tell nothing about the data. Serves until dropped.
pub struct HealthEndpoint {
    /// The address it listens on.
    pub address: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HealthEndpoint {
    /// Serves the probes on `listen`.
    pub fn start(
        listen: SocketAddr,
        ready: Arc<dyn Fn() -> bool + Send + Sync>,
    ) -> Result<HealthEndpoint> {
        let listener = std::net::TcpListener::bind(listen)
            .with_context(|| format!("--health: listening on {listen}"))?;
        listener
            .set_nonblocking(true)
            .context("--health: configuring the socket")?;
        let address = listener.local_addr().context("--health: its address")?;
        let app = Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route(
                "/readyz",
                get(move || {
                    let ready = ready.clone();
                    async move {
                        match ready() {
                            true => (StatusCode::OK, "ready\n"),
                            false => (StatusCode::SERVICE_UNAVAILABLE, "starting\n"),
                        }
                    }
                }),
            );
        let (shutdown, thread) = serve_in_thread(listener, app, "--health")?;
        Ok(HealthEndpoint {
            address,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }
}

impl Drop for HealthEndpoint {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves `app` on `listener` in a thread of its own (a current-thread
/// tokio runtime) until the returned sender is used or dropped; `what`
/// names the endpoint in errors.
fn serve_in_thread(
    listener: std::net::TcpListener,
    app: Router,
    what: &'static str,
) -> Result<(
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
)> {
    let (shutdown, shutdown_signal) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .with_context(|| format!("{what}: starting its runtime"))?;
    let thread = std::thread::Builder::new()
        .name("sluice-http".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => listener,
                    Err(error) => {
                        tracing::error!(%error, "{what}: the listener");
                        return;
                    }
                };
                let served = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = shutdown_signal.await;
                    })
                    .await;
                if let Err(error) = served {
                    tracing::error!(%error, "{what}: serving");
                }
            });
        })
        .with_context(|| format!("{what}: starting its thread"))?;
    Ok((shutdown, thread))
}
