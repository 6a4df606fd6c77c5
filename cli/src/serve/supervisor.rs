//! Runs the pipelines of every tenant in this process: each on its own
//! thread, all sharing one plugin runtime (one wasmtime engine, one
//! compiled-component cache). A pipeline's directory holds its file, its
//! plugins, checkpoints and state; `desired` in it says whether it should
//! run, so that a restarted server resumes what was running (from the last
//! checkpoint).

use super::auth::TenantLimits;
use super::errors::{CreateError, QuotaExceeded, SwapError};
use super::policy::ServerReach;
use super::reach::TenantReach;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sluice_host::checkpoint::RestoreFrom;
use sluice_host::config::LoadedConfig;
use sluice_host::metrics::exposition::PipelineView;
use sluice_host::metrics::{PipelineMetrics, PipelineSnapshot};
use sluice_host::pipeline::{Pipeline, PluginFootprint, PluginSwapper, plugin_footprint};
use sluice_host::runtime::PluginRuntime;
use sluice_host::sync::lock;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Where a pipeline is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "detail")]
pub enum PipelineState {
    /// Opening: restoring its checkpoint, instantiating plugins.
    Starting,
    /// Processing records.
    Running,
    /// Stopping: draining, final checkpoint.
    Stopping,
    /// Stopped on request (a final checkpoint was taken).
    Stopped,
    /// Its input ended and everything was committed.
    Finished,
    /// It failed; the reason.
    Failed(String),
}

impl PipelineState {
    /// Its name, as the API and the metrics' `state` label give it.
    pub fn label(&self) -> &'static str {
        match self {
            PipelineState::Starting => "starting",
            PipelineState::Running => "running",
            PipelineState::Stopping => "stopping",
            PipelineState::Stopped => "stopped",
            PipelineState::Finished => "finished",
            PipelineState::Failed(_) => "failed",
        }
    }
}

/// What the owner asked for, kept in the pipeline's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Desired {
    /// Run (again after a server restart).
    Running,
    /// Stay stopped.
    Stopped,
}

/// A pipeline the supervisor knows.
struct Entry {
    dir: PathBuf,
    state: PipelineState,
    stop: Arc<AtomicBool>,
    metrics: Option<Arc<PipelineMetrics>>,
    /// Swaps plugins of the running pipeline.
    swapper: Option<PluginSwapper>,
    /// A deployment is under way (one at a time per pipeline).
    deploying: bool,
    /// What its plugins take (counted against its tenant's quotas).
    footprint: Vec<PluginFootprint>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Entry {
    /// A pipeline in `dir` that does not run (yet).
    fn stopped(dir: PathBuf) -> Entry {
        Entry {
            dir,
            state: PipelineState::Stopped,
            stop: Arc::new(AtomicBool::new(false)),
            metrics: None,
            swapper: None,
            deploying: false,
            footprint: Vec::new(),
            thread: None,
        }
    }
}

/// What a pipeline file's plugins take, or nothing if it does not load.
fn footprint_of(file: &Path) -> Vec<PluginFootprint> {
    LoadedConfig::load(file)
        .map(|loaded| plugin_footprint(&loaded.config))
        .unwrap_or_default()
}

/// Rewrites a stored pipeline file that admission would now write
/// differently (see [`super::admission::upgrade`]), by rename.
fn upgrade_stored_file(file: &Path) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return Ok(());
    };
    if let Some(upgraded) = super::admission::upgrade(&text) {
        let temporary = file.with_extension("toml.tmp");
        std::fs::write(&temporary, upgraded)
            .and_then(|()| std::fs::rename(&temporary, file))
            .with_context(|| format!("upgrading {}", file.display()))?;
    }
    Ok(())
}

/// Creates `dir` and the directories above it that are missing, each
/// with mode 0700.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// A pipeline's key: tenant and name.
pub type PipelineKey = (String, String);

/// A pipeline's status, as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineStatus {
    /// Its name.
    pub name: String,
    /// Where it is.
    #[serde(flatten)]
    pub state: PipelineState,
    /// Its counters, once it has started.
    pub metrics: Option<PipelineSnapshot>,
}

/// Runs pipelines (see the module docs).
pub struct Supervisor {
    root: PathBuf,
    runtime: PluginRuntime,
    entries: Mutex<BTreeMap<PipelineKey, Entry>>,
    /// Every tenant's limits.
    limits: Mutex<BTreeMap<String, TenantLimits>>,
    /// Every tenant's reach (credentials unsealed, in memory only).
    reach: Mutex<BTreeMap<String, TenantReach>>,
    /// Server-wide reach (the tenants' default S3 bucket).
    server_reach: ServerReach,
}

impl Supervisor {
    /// A supervisor keeping pipelines under `root/tenants/`.
    pub fn new(root: &Path, runtime: PluginRuntime, server_reach: ServerReach) -> Arc<Supervisor> {
        Arc::new(Supervisor {
            root: root.to_path_buf(),
            runtime,
            entries: Mutex::new(BTreeMap::new()),
            limits: Mutex::new(BTreeMap::new()),
            reach: Mutex::new(BTreeMap::new()),
            server_reach,
        })
    }

    /// Sets `tenant`'s reach; its pipelines that no longer fit it are
    /// stopped and marked failed with the reason, which is returned per
    /// pipeline.
    pub fn set_reach(&self, tenant: &str, reach: &TenantReach) -> Vec<(String, String)> {
        lock(&self.reach).insert(tenant.to_string(), reach.clone());
        let mut outside = Vec::new();
        for key in self.keys_of(tenant) {
            let file = self.pipeline_dir(&key).join("pipeline.toml");
            let Ok(mut loaded) = LoadedConfig::load(&file) else {
                continue;
            };
            if let Err(error) = self.hold_to_reach(&key.0, &mut loaded) {
                let reason = format!("outside the tenant's reach: {error}");
                let running = self.entries().get(&key).is_some_and(|e| {
                    matches!(e.state, PipelineState::Running | PipelineState::Starting)
                });
                if running && self.stop(&key).is_ok() {
                    self.set_state(&key, PipelineState::Failed(reason.clone()));
                }
                outside.push((key.1.clone(), reason));
            }
        }
        outside
    }

    /// Holds a pipeline file of `tenant` to its reach, filling in what
    /// was granted (see [`super::policy`]).
    pub fn hold_to_reach(
        &self,
        tenant: &str,
        loaded: &mut LoadedConfig,
    ) -> Result<(), sluice_host::config::ConfigError> {
        let reach = lock(&self.reach).get(tenant).cloned().unwrap_or_default();
        super::policy::apply(loaded, tenant, &reach, &self.server_reach)
    }

    /// Sets `tenant`'s limits: its CPU share applies to plugin instances
    /// created from now on, the other limits to requests from now on.
    pub fn set_limits(&self, tenant: &str, limits: &TenantLimits) {
        self.runtime.set_cpu_share(tenant, limits.cpu_cores);
        lock(&self.limits).insert(tenant.to_string(), limits.clone());
    }

    fn limits_of(&self, tenant: &str) -> TenantLimits {
        lock(&self.limits).get(tenant).cloned().unwrap_or_default()
    }

    /// Refuses a new pipeline of `tenant` taking `footprint` if the
    /// tenant's pipelines would then run more plugin instances or memory
    /// than its limits, keeping room for the largest operator to hold two
    /// versions during a swap.
    fn check_plugin_quota(
        &self,
        tenant: &str,
        footprint: &[PluginFootprint],
    ) -> Result<(), QuotaExceeded> {
        let limits = self.limits_of(tenant);
        let entries = self.entries();
        let reserved: Vec<&PluginFootprint> = entries
            .iter()
            .filter(|((t, _), _)| t == tenant)
            .flat_map(|(_, entry)| entry.footprint.iter())
            .chain(footprint)
            .collect();
        let total = |of: fn(&PluginFootprint) -> u64| reserved.iter().map(|f| of(f)).sum::<u64>();
        let room =
            |of: fn(&PluginFootprint) -> u64| reserved.iter().map(|f| of(f)).max().unwrap_or(0);
        let (instances, memory) = (total(|f| f.instances), total(|f| f.memory_mb));
        let (swap_instances, swap_memory) = (room(|f| f.instances), room(|f| f.memory_mb));
        if instances + swap_instances > limits.max_plugin_instances {
            return Err(QuotaExceeded(format!(
                "tenant `{tenant}` may run {} plugin instances; its pipelines with this one need {instances}, plus {swap_instances} to swap a version",
                limits.max_plugin_instances
            )));
        }
        if memory + swap_memory > limits.max_plugin_memory_mb {
            return Err(QuotaExceeded(format!(
                "tenant `{tenant}` may give its plugins {} MiB of memory; its pipelines with this one need {memory} MiB, plus {swap_memory} MiB to swap a version",
                limits.max_plugin_memory_mb
            )));
        }
        Ok(())
    }

    /// Watches the tenants' state on disk every `every`: a tenant over its
    /// `max_state_mb` has its largest running pipeline stopped (final
    /// checkpoint) and marked failed with the reason. Ends with the server.
    pub fn watch_state_quotas(self: &Arc<Self>, every: std::time::Duration) -> Result<()> {
        let supervisor = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("sluice-quotas".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(every);
                    let Some(supervisor) = supervisor.upgrade() else {
                        return;
                    };
                    supervisor.enforce_state_quotas();
                }
            })
            .context("starting the quota watcher")?;
        Ok(())
    }

    fn enforce_state_quotas(&self) {
        let mut by_tenant: BTreeMap<String, Vec<(PipelineKey, u64)>> = BTreeMap::new();
        for (key, entry) in self.entries().iter() {
            if entry.state != PipelineState::Running {
                continue;
            }
            let Some(metrics) = &entry.metrics else {
                continue;
            };
            let bytes: u64 = metrics
                .snapshot()
                .operators
                .iter()
                .map(|o| o.state_disk_bytes)
                .sum();
            by_tenant
                .entry(key.0.clone())
                .or_default()
                .push((key.clone(), bytes));
        }
        for (tenant, pipelines) in by_tenant {
            let limit_mb = self.limits_of(&tenant).max_state_mb;
            let total: u64 = pipelines.iter().map(|(_, bytes)| bytes).sum();
            if total <= limit_mb.saturating_mul(1 << 20) {
                continue;
            }
            let Some((key, bytes)) = pipelines.into_iter().max_by_key(|(_, bytes)| *bytes) else {
                continue;
            };
            let reason = format!(
                "quota: tenant `{tenant}` holds {} MiB of state, over its {limit_mb} MiB; this pipeline ({} MiB) was stopped",
                total >> 20,
                bytes >> 20
            );
            tracing::warn!(tenant = %key.0, pipeline = %key.1, %reason, "state quota");
            if self.stop(&key).is_ok() {
                self.set_state(&key, PipelineState::Failed(reason));
            }
        }
    }

    /// The directory of a pipeline.
    pub fn pipeline_dir(&self, key: &PipelineKey) -> PathBuf {
        self.root
            .join("tenants")
            .join(&key.0)
            .join("pipelines")
            .join(&key.1)
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<PipelineKey, Entry>> {
        lock(&self.entries)
    }

    /// Finds the pipelines stored under the root and starts those whose
    /// owner wanted them running.
    pub fn resume_all(self: &Arc<Self>) -> Result<usize> {
        let tenants = self.root.join("tenants");
        let mut resumed = 0;
        for tenant in read_dir_names(&tenants)? {
            for name in read_dir_names(&tenants.join(&tenant).join("pipelines"))? {
                let key = (tenant.clone(), name);
                let dir = self.pipeline_dir(&key);
                upgrade_stored_file(&dir.join("pipeline.toml"))?;
                let desired = read_desired(&dir);
                let mut entry = Entry::stopped(dir);
                entry.footprint = footprint_of(&entry.dir.join("pipeline.toml"));
                self.entries().insert(key.clone(), entry);
                if desired == Desired::Running {
                    self.start(&key)?;
                    resumed += 1;
                }
            }
        }
        Ok(resumed)
    }

    /// The tenant's pipelines.
    pub fn count(&self, tenant: &str) -> usize {
        self.entries().keys().filter(|(t, _)| t == tenant).count()
    }

    /// Whether the pipeline exists.
    pub fn exists(&self, key: &PipelineKey) -> bool {
        self.entries().contains_key(key)
    }

    /// Stores a new pipeline (its file `text`, the plugins `plugins` from
    /// `plugin_store`) and starts it. Whatever fails, nothing of it is
    /// left behind (a directory left would be resumed at the next start).
    pub fn create(
        self: &Arc<Self>,
        key: &PipelineKey,
        text: &str,
        plugins: &[String],
        plugin_store: &Path,
    ) -> Result<(), CreateError> {
        let dir = self.pipeline_dir(key);
        let footprint = match self.store(key, &dir, text, plugins, plugin_store) {
            Ok(footprint) => footprint,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(error);
            }
        };
        let mut entry = Entry::stopped(dir);
        entry.footprint = footprint;
        self.entries().insert(key.clone(), entry);
        Ok(self.start(key)?)
    }

    /// Writes a new pipeline's directory and checks its file (it loads,
    /// fits the tenant's reach and quotas); what its plugins take.
    fn store(
        &self,
        key: &PipelineKey,
        dir: &Path,
        text: &str,
        plugins: &[String],
        plugin_store: &Path,
    ) -> Result<Vec<PluginFootprint>, CreateError> {
        // Only the server's user may enter a pipeline's directory (its
        // tenant's outputs, state and checkpoints).
        private_dir(&dir.join("plugins")).with_context(|| format!("creating {}", dir.display()))?;
        for digest in plugins {
            let stored = plugin_store.join(format!("{digest}.wasm"));
            let linked = dir.join("plugins").join(format!("{digest}.wasm"));
            if !linked.exists() {
                std::fs::hard_link(&stored, &linked)
                    .or_else(|_| std::fs::copy(&stored, &linked).map(drop))
                    .with_context(|| format!("linking plugin {digest}"))?;
            }
        }
        std::fs::write(dir.join("pipeline.toml"), text).context("writing the pipeline file")?;
        // Refuse a file that does not load, or that takes the tenant over
        // its reach or quotas, before anything runs.
        let mut loaded = LoadedConfig::load(&dir.join("pipeline.toml"))?;
        self.hold_to_reach(&key.0, &mut loaded)?;
        let footprint = plugin_footprint(&loaded.config);
        self.check_plugin_quota(&key.0, &footprint)?;
        Ok(footprint)
    }

    /// Starts a stopped, finished or failed pipeline (restoring its last
    /// checkpoint) on its own thread.
    pub fn start(self: &Arc<Self>, key: &PipelineKey) -> Result<()> {
        let stop = Arc::new(AtomicBool::new(false));
        let dir = {
            let mut entries = self.entries();
            let entry = entries
                .get_mut(key)
                .with_context(|| format!("no pipeline {}", key.1))?;
            if matches!(
                entry.state,
                PipelineState::Starting | PipelineState::Running | PipelineState::Stopping
            ) {
                return Ok(());
            }
            if let Some(thread) = entry.thread.take() {
                let _ = thread.join();
            }
            entry.state = PipelineState::Starting;
            entry.stop = stop.clone();
            entry.metrics = None;
            entry.swapper = None;
            entry.dir.clone()
        };
        write_desired(&dir, Desired::Running)?;
        let supervisor = Arc::clone(self);
        let thread_key = key.clone();
        let thread = std::thread::Builder::new()
            .name(format!("pipeline-{}-{}", key.0, key.1))
            .spawn(move || supervisor.run(&thread_key, &dir, stop))
            .context("starting the pipeline's thread")?;
        if let Some(entry) = self.entries().get_mut(key) {
            entry.thread = Some(thread);
        }
        Ok(())
    }

    /// The pipeline's thread: open, run until stopped or ended.
    fn run(&self, key: &PipelineKey, dir: &Path, stop: Arc<AtomicBool>) {
        let opened = LoadedConfig::load(&dir.join("pipeline.toml"))
            .and_then(|mut loaded| {
                self.hold_to_reach(&key.0, &mut loaded)?;
                Ok(loaded)
            })
            .map_err(anyhow::Error::from)
            .and_then(|loaded| {
                Pipeline::open(
                    &loaded,
                    &self.runtime,
                    &sluice_host::pipeline::wasm_files_only,
                    &RestoreFrom::Latest,
                )
                .map_err(anyhow::Error::from)
            });
        let pipeline = match opened {
            Ok(pipeline) => pipeline,
            Err(error) => {
                self.set_state(key, PipelineState::Failed(format!("{error:#}")));
                return;
            }
        };
        if let Some(entry) = self.entries().get_mut(key) {
            entry.metrics = Some(pipeline.metrics());
            entry.swapper = Some(pipeline.swapper());
            entry.state = PipelineState::Running;
        }
        let outcome = pipeline.run(stop.clone());
        let state = match outcome {
            Err(error) => PipelineState::Failed(error.chain()),
            Ok(_) if stop.load(Ordering::Relaxed) => PipelineState::Stopped,
            Ok(_) => PipelineState::Finished,
        };
        if state == PipelineState::Finished {
            let _ = write_desired(dir, Desired::Stopped);
        }
        self.set_state(key, state);
    }

    fn set_state(&self, key: &PipelineKey, state: PipelineState) {
        if let Some(entry) = self.entries().get_mut(key) {
            entry.state = state;
        }
    }

    /// Stops the pipeline (drain, final checkpoint) and waits for it.
    pub fn stop(&self, key: &PipelineKey) -> Result<()> {
        let thread = {
            let mut entries = self.entries();
            let entry = entries
                .get_mut(key)
                .with_context(|| format!("no pipeline {}", key.1))?;
            write_desired(&entry.dir, Desired::Stopped)?;
            entry.stop.store(true, Ordering::Relaxed);
            if matches!(
                entry.state,
                PipelineState::Running | PipelineState::Starting
            ) {
                entry.state = PipelineState::Stopping;
            }
            entry.thread.take()
        };
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        Ok(())
    }

    /// Stops the pipeline and deletes it with its directory.
    pub fn delete(&self, key: &PipelineKey) -> Result<()> {
        self.stop(key)?;
        let entry = self.entries().remove(key);
        if let Some(entry) = entry {
            std::fs::remove_dir_all(&entry.dir)
                .with_context(|| format!("deleting {}", entry.dir.display()))?;
        }
        Ok(())
    }

    /// The status of one pipeline.
    pub fn status(&self, key: &PipelineKey) -> Option<PipelineStatus> {
        let entries = self.entries();
        let entry = entries.get(key)?;
        Some(PipelineStatus {
            name: key.1.clone(),
            state: entry.state.clone(),
            metrics: entry.metrics.as_ref().map(|m| m.snapshot()),
        })
    }

    /// The live counters of the pipeline's current run, if it has one.
    pub fn pipeline_metrics(&self, key: &PipelineKey) -> Option<Arc<PipelineMetrics>> {
        self.entries().get(key)?.metrics.clone()
    }

    /// Every pipeline of `tenant` (`None`: of every tenant) that has run
    /// in this process, as the metrics endpoint and the dashboard show it.
    pub fn views(&self, tenant: Option<&str>) -> Vec<PipelineView> {
        self.entries()
            .iter()
            .filter(|((t, _), _)| tenant.is_none_or(|tenant| tenant == t))
            .filter_map(|((t, name), entry)| {
                Some(PipelineView {
                    tenant: t.clone(),
                    pipeline: name.clone(),
                    state: entry.state.label().to_string(),
                    snapshot: entry.metrics.as_ref()?.snapshot(),
                    deployments: Vec::new(),
                })
            })
            .collect()
    }

    /// The status of every pipeline of `tenant`.
    pub fn list(&self, tenant: &str) -> Vec<PipelineStatus> {
        self.keys_of(tenant)
            .iter()
            .filter_map(|key| self.status(key))
            .collect()
    }

    /// The keys of `tenant`'s pipelines.
    fn keys_of(&self, tenant: &str) -> Vec<PipelineKey> {
        self.entries()
            .keys()
            .filter(|(t, _)| t == tenant)
            .cloned()
            .collect()
    }

    /// Claims the running pipeline for a deployment: its directory and
    /// swapper. Refused while another deployment of it is under way.
    pub(super) fn begin_deployment(
        &self,
        key: &PipelineKey,
    ) -> Result<(PathBuf, PluginSwapper), SwapError> {
        let mut entries = self.entries();
        let entry = entries.get_mut(key).ok_or(SwapError::NotFound)?;
        match (&entry.state, &entry.swapper) {
            (PipelineState::Running, Some(swapper)) if !entry.deploying => {
                entry.deploying = true;
                Ok((entry.dir.clone(), swapper.clone()))
            }
            (PipelineState::Running, _) => Err(SwapError::Refused(format!(
                "pipeline `{}` has a deployment under way (on probation)",
                key.1
            ))),
            (state, _) => Err(SwapError::Refused(format!(
                "pipeline `{}` is not running ({state:?})",
                key.1
            ))),
        }
    }

    /// Ends the deployment [`Self::begin_deployment`] claimed.
    pub(super) fn end_deployment(&self, key: &PipelineKey) {
        if let Some(entry) = self.entries().get_mut(key) {
            entry.deploying = false;
        }
    }

    /// Where the pipeline is, if it exists.
    pub(super) fn state(&self, key: &PipelineKey) -> Option<PipelineState> {
        self.entries().get(key).map(|entry| entry.state.clone())
    }

    /// The pipeline's directory, if it exists.
    pub(super) fn dir_of(&self, key: &PipelineKey) -> Option<PathBuf> {
        self.entries().get(key).map(|entry| entry.dir.clone())
    }

    /// The plugin runtime all pipelines share.
    pub(super) fn runtime(&self) -> &PluginRuntime {
        &self.runtime
    }

    /// Abandons the pipeline's run without a final checkpoint (its
    /// checkpoints are held: nothing after the hold is committed) and, if
    /// its owner wants it running, starts it again from its last
    /// checkpoint with the plugins its file names.
    pub(super) fn restart_abandoning(self: &Arc<Self>, key: &PipelineKey) {
        let thread = {
            let mut entries = self.entries();
            let Some(entry) = entries.get_mut(key) else {
                return;
            };
            entry.stop.store(true, Ordering::Relaxed);
            entry.thread.take()
        };
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        let Some(dir) = self.dir_of(key) else {
            return;
        };
        if read_desired(&dir) == Desired::Running
            && let Err(error) = self.start(key)
        {
            self.set_state(key, PipelineState::Failed(format!("{error:#}")));
        }
    }

    /// Stops every pipeline (server shutdown); their `desired` stays, so
    /// they resume at the next start.
    pub fn shutdown(&self) {
        let threads: Vec<_> = {
            let mut entries = self.entries();
            entries
                .values_mut()
                .filter_map(|entry| {
                    entry.stop.store(true, Ordering::Relaxed);
                    entry.thread.take()
                })
                .collect()
        };
        for thread in threads {
            let _ = thread.join();
        }
    }
}

fn read_dir_names(dir: &Path) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error).with_context(|| format!("listing {}", dir.display())),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        if entry.path().is_dir()
            && let Some(name) = entry.file_name().to_str()
        {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

fn read_desired(dir: &Path) -> Desired {
    std::fs::read_to_string(dir.join("desired.json"))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Desired::Stopped)
}

fn write_desired(dir: &Path, desired: Desired) -> Result<()> {
    let path = dir.join("desired.json");
    let temporary = dir.join("desired.json.tmp");
    std::fs::write(&temporary, serde_json::to_string(&desired)?)
        .with_context(|| format!("writing {}", temporary.display()))?;
    std::fs::rename(&temporary, &path).with_context(|| format!("writing {}", path.display()))
}

/// What the metrics endpoint and the dashboard see of `sluice serve`: the
/// caller's tenant's pipelines (every tenant's for the admin's scrape).
impl crate::observe::Pipelines for Supervisor {
    fn views(&self, tenant: Option<&str>) -> Vec<sluice_host::metrics::exposition::PipelineView> {
        Supervisor::views(self, tenant)
    }

    fn observe(&self, tenant: Option<&str>, name: &str) -> Option<crate::observe::Observed> {
        let tenant = tenant?;
        let key: PipelineKey = (tenant.to_string(), name.to_string());
        let view = Supervisor::views(self, Some(tenant))
            .into_iter()
            .find(|view| view.pipeline == name)?;
        let metrics = self.pipeline_metrics(&key)?;
        Some(crate::observe::Observed {
            view,
            extra: serde_json::json!({
                "errors": metrics.recent_faults(),
                "dead_letter_samples": metrics.dead_letter_samples.list(),
                "deployments": self.deployments(&key).unwrap_or_default(),
            }),
        })
    }

    fn with_deployments(
        &self,
        mut views: Vec<sluice_host::metrics::exposition::PipelineView>,
    ) -> Vec<sluice_host::metrics::exposition::PipelineView> {
        for view in &mut views {
            let key: PipelineKey = (view.tenant.clone(), view.pipeline.clone());
            view.deployments = self
                .deployments(&key)
                .unwrap_or_default()
                .iter()
                .map(|d| sluice_host::metrics::exposition::DeploymentView {
                    operator: d.operator.clone(),
                    kind: serde_json::to_value(d.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    status: serde_json::to_value(d.status)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    pause_ms: d.pause_ms,
                })
                .collect();
        }
        views
    }
}
