//! `sluice serve`: a long-running host for many tenants' pipelines.
//!
//! * [`auth`]: the admin token (created at the first start, printed once)
//!   and tenants' tokens, stored as digests.
//! * [`admission`]: what a tenant's pipeline file may do (its own paths,
//!   uploaded plugins only).
//! * [`reach`] and [`policy`]: what the admin lets a tenant reach (Kafka
//!   clusters and prefixes, S3 prefixes, catalogs, registries, with
//!   credentials sealed at rest) and how every pipeline file is held to it
//!   (no client property that loads code or reads files).
//! * [`supervisor`]: each pipeline on its own thread, sharing one plugin
//!   runtime; resumed from its last checkpoint when the server restarts.
//! * [`deployments`]: plugin versions swapped into running pipelines at a
//!   barrier, verified, kept or rolled back.
//! * [`logs`]: what plugins log, kept per pipeline for `sluice logs`.
//! * [`operations`]: long operations, pollable, with idempotency keys.
//! * [`api::guard`] and [`audit`]: rate limits, size limits and timeouts on the
//!   API itself, and the audit log of every action.
//! * [`api`]: the REST API (`docs/api.md`).
//!
//! Loopback by default; any other address needs TLS (`--tls-cert`,
//! `--tls-key`) unless `--insecure` says otherwise.

pub mod admission;
pub mod api;
pub mod audit;
pub mod auth;
pub mod deployments;
pub mod errors;
pub mod logs;
pub mod operations;
pub mod policy;
pub mod reach;
pub mod supervisor;

use anyhow::{Context, Result, bail};
use sluice_host::runtime::{PluginRuntime, RuntimeConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

/// How `sluice serve` was asked to run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// Where pipelines, plugins, checkpoints and tokens live.
    pub state_dir: PathBuf,
    /// The address to listen on.
    pub listen: SocketAddr,
    /// A PEM certificate chain and key: serve HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Allow plain HTTP on a non-loopback address.
    pub insecure: bool,
    /// Plugin instances that may exist at once, over all pipelines (the
    /// pooling allocator's slots).
    pub max_instances: u32,
    /// The tenants' default S3 bucket and endpoint.
    pub reach: policy::ServerReach,
    /// Mutating requests per second each caller may make (and in a burst).
    pub rate_limit: (u32, u32),
}

impl ServeOptions {
    /// Options for `state_dir` on `listen`, plain HTTP (loopback only).
    pub fn new(state_dir: PathBuf, listen: SocketAddr) -> Self {
        ServeOptions {
            state_dir,
            listen,
            tls: None,
            insecure: false,
            max_instances: RuntimeConfig::default().max_instances,
            reach: policy::ServerReach::default(),
            rate_limit: (
                api::guard::DEFAULT_MUTATIONS_PER_SECOND,
                api::guard::DEFAULT_MUTATION_BURST,
            ),
        }
    }

    /// Mutating requests per second each caller may make, and in a burst.
    pub fn rate_limit(mut self, per_second: u32, burst: u32) -> Self {
        self.rate_limit = (per_second, burst);
        self
    }

    /// Gives each tenant `s3://<bucket>/tenants/<tenant>/` (on `endpoint`,
    /// or AWS) unless the admin grants it other S3.
    pub fn tenant_bucket(mut self, bucket: Option<String>, endpoint: Option<String>) -> Self {
        self.reach = policy::ServerReach {
            s3_bucket: bucket,
            s3_endpoint: endpoint,
        };
        self
    }

    /// Plugin instances that may exist at once, over all pipelines.
    pub fn max_instances(mut self, slots: u32) -> Self {
        self.max_instances = slots;
        self
    }

    /// Serve HTTPS with this certificate chain and key (PEM files).
    pub fn with_tls(mut self, cert: PathBuf, key: PathBuf) -> Self {
        self.tls = Some((cert, key));
        self
    }

    /// Allow plain HTTP on a non-loopback address.
    pub fn insecure(mut self, insecure: bool) -> Self {
        self.insecure = insecure;
        self
    }
}

/// Runs the server until SIGINT or SIGTERM; pipelines are stopped with a
/// final checkpoint and resume at the next start.
pub fn serve(options: ServeOptions) -> Result<()> {
    if !options.listen.ip().is_loopback() && options.tls.is_none() && !options.insecure {
        bail!(
            "refusing to listen on {} without TLS: give --tls-cert and --tls-key (or --insecure)",
            options.listen
        );
    }
    let plugin_store = options.state_dir.join("plugins");
    supervisor::private_dir(&plugin_store)
        .with_context(|| format!("creating {}", plugin_store.display()))?;
    drop_privileges_for_good()?;
    supervisor::private_dir(&options.state_dir)
        .with_context(|| format!("creating {}", options.state_dir.display()))?;
    reach::check_key()?;
    let (auth, admin_token) = auth::Auth::open(&options.state_dir)?;
    if let Some(token) = admin_token {
        eprintln!(
            "sluice serve: admin token (shown once, stored hashed): {token}\n\
             create a tenant: curl -H 'Authorization: Bearer <admin token>' -d '{{\"name\":\"team-a\"}}' -H 'Content-Type: application/json' http://{}/api/v1/tenants",
            options.listen
        );
    }
    // One engine and one compiled-code cache for every tenant, kept in the
    // state directory (its artifacts carry this host's keyed tag).
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: options.state_dir.join("compiled"),
        max_instances: options.max_instances,
        ..RuntimeConfig::default()
    })?;
    let supervisor =
        supervisor::Supervisor::new(&options.state_dir, runtime, options.reach.clone());
    for (tenant, limits, reach) in auth.tenants() {
        supervisor.set_limits(tenant, limits);
        supervisor.set_reach(tenant, reach);
    }
    supervisor.watch_state_quotas(std::time::Duration::from_secs(1))?;
    let resumed = supervisor.resume_all()?;
    if resumed > 0 {
        eprintln!("sluice serve: resumed {resumed} pipelines");
    }
    let history = Arc::new(sluice_host::metrics::status::StatusHistory::default());
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler =
        crate::observe::spawn_sampler(supervisor.clone(), history.clone(), sampling.clone())?;
    let audit = audit::AuditLog::open(&options.state_dir).context("opening the audit log")?;
    let (per_second, burst) = options.rate_limit;
    let state = api::AppState {
        guard: Arc::new(api::guard::Guard::new(per_second, burst, audit)),
        auth: Arc::new(RwLock::new(auth)),
        supervisor: supervisor.clone(),
        operations: Arc::new(operations::Operations::default()),
        plugin_store,
        logs: logs::global(),
        history,
    };
    let app = api::router(state);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("sluice-serve")
        .enable_all()
        .build()
        .context("starting the server's runtime")?;
    let result = tokio.block_on(async {
        let handle = axum_server::Handle::new();
        let shutdown = handle.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            shutdown.graceful_shutdown(Some(std::time::Duration::from_secs(5)));
        });
        eprintln!(
            "sluice serve: listening on {}://{} (state in {})",
            if options.tls.is_some() {
                "https"
            } else {
                "http"
            },
            options.listen,
            options.state_dir.display()
        );
        match &options.tls {
            Some((cert, key)) => {
                let config = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
                    .await
                    .context("loading the TLS certificate and key")?;
                let mut server = axum_server::bind_rustls(options.listen, config);
                limit_requests(server.http_builder());
                server
                    .handle(handle)
                    .serve(app.into_make_service())
                    .await
                    .context("serving HTTPS")
            }
            None => {
                let mut server = axum_server::bind(options.listen);
                limit_requests(server.http_builder());
                server
                    .handle(handle)
                    .serve(app.into_make_service())
                    .await
                    .context("serving HTTP")
            }
        }
    });
    eprintln!("sluice serve: stopping pipelines (final checkpoints)");
    sampling.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.thread().unpark();
    let _ = sampler.join();
    supervisor.shutdown();
    result
}

/// Request heads: at most [`guard::MAX_HEAD_BYTES`] and
/// [`guard::MAX_HEADERS`] headers, within [`guard::HEAD_TIMEOUT`] (`431`
/// or a closed connection otherwise).
fn limit_requests(
    builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
) {
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(api::guard::HEAD_TIMEOUT)
        .max_buf_size(api::guard::MAX_HEAD_BYTES)
        .max_headers(api::guard::MAX_HEADERS);
}

/// `no_new_privs`: nothing this process or its children execute can gain
/// privileges (setuid binaries, file capabilities), for the rest of its
/// life; the first of the defences in depth of `docs/deploy.md`.
fn drop_privileges_for_good() -> Result<()> {
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes plain integers and
    // touches no memory.
    let result = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if result != 0 {
        bail!(
            "cannot set no_new_privs: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
}
