//! Plugin deployments into running pipelines: swap at a barrier, verify,
//! keep or roll back.
//!
//! A deploy loads and checks the uploaded component, then swaps it into
//! every instance of the operator at the next checkpoint barrier
//! ([`PluginSwapper::swap`]). With a verify window (`[deploy]` in the pipeline
//! file, on by default) the new version is on probation: checkpoints after
//! the swap barrier are held, so nothing it produces is committed, and its
//! fault rate, dead-letter rate and deadline hits are judged
//! ([`VerifyPolicy`]). Kept: the pipeline file names the new version, then
//! checkpoints resume. Rolled back: the run is abandoned (no checkpoint
//! after the swap barrier exists) and restarted from the swap barrier's
//! checkpoint with the previous version, which the pipeline file still
//! names and the component cache still holds compiled — state and output
//! then come from one cut, as if the new version had never run.
//!
//! Every deployment is recorded in the pipeline's `deployments.jsonl`: a
//! line when it is swapped and another with the verdict, under one id.

use super::errors::SwapError;
use super::supervisor::{PipelineKey, PipelineState, Supervisor};
use serde::{Deserialize, Serialize};
use sluice_host::config::LoadedConfig;
use sluice_host::dataflow::swap::{PluginSwapError, Verdict, VerifyPolicy};
use sluice_host::pipeline::PluginSwapper;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long every instance has to reach the swap barrier.
const SWAP_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a version on probation is judged.
const JUDGE_EVERY: Duration = Duration::from_millis(50);

/// How many versions of an operator's plugin a pipeline keeps ready for a
/// rollback, the running one included: older ones are unlinked from the
/// pipeline's `plugins/` directory after a deployment.
pub const KEPT_VERSIONS: usize = 5;

/// `deploy` (a new version) or `rollback` (back to a kept one, by hand).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentKind {
    /// A new version.
    Deploy,
    /// Back to a version the operator ran before.
    Rollback,
}

/// Where a deployment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentStatus {
    /// Swapped, without probation (rollbacks; `verify_window_ms = 0`).
    #[default]
    Swapped,
    /// Swapped and on probation: checkpoints are held until the verdict.
    Verifying,
    /// Kept after its verify window.
    Kept,
    /// Rolled back automatically; `outcome` says why.
    RolledBack,
    /// Not swapped; `outcome` says why.
    Refused,
}

impl DeploymentStatus {
    /// Whether the version it deployed runs now (or did until a later
    /// deployment).
    pub fn took_effect(self) -> bool {
        matches!(self, DeploymentStatus::Swapped | DeploymentStatus::Kept)
    }
}

/// One plugin deployment (a swap or a rollback), as recorded in the
/// pipeline's `deployments.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deployment {
    /// Its number in the pipeline's history (from 1).
    #[serde(default)]
    pub id: u64,
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// Who asked (the tenant).
    pub by: String,
    /// The operator.
    pub operator: String,
    /// The plugin it ran before (sha256).
    pub from: String,
    /// The plugin it runs now (sha256).
    pub to: String,
    /// A new version or a rollback.
    pub kind: DeploymentKind,
    /// The barrier every instance swapped at.
    pub barrier: u64,
    /// The longest pause of an instance, ms (building the new version at
    /// the barrier).
    pub pause_ms: f64,
    /// Where it is.
    #[serde(default)]
    pub status: DeploymentStatus,
    /// What happened, in words.
    pub outcome: String,
}

/// A deploy request.
#[derive(Debug, Clone)]
pub struct SwapRequest<'a> {
    /// The pipeline.
    pub key: &'a PipelineKey,
    /// The operator whose plugin changes.
    pub operator: &'a str,
    /// The uploaded component (sha256).
    pub digest: &'a str,
    /// Where uploaded components are.
    pub plugin_store: &'a Path,
    /// A new version, or back to an old one.
    pub kind: DeploymentKind,
    /// Who asks.
    pub by: &'a str,
}

impl Supervisor {
    /// Swaps an operator's plugin in the running pipeline to an uploaded
    /// component at the next barrier (see the module docs). Answers once
    /// every instance runs it: a new version on probation is judged
    /// afterwards, on a thread of its own.
    pub fn swap_plugin(
        self: &Arc<Self>,
        request: &SwapRequest<'_>,
    ) -> Result<Deployment, SwapError> {
        let key = request.key;
        let (dir, swapper) = self.begin_deployment(key)?;
        let result = self.swap_claimed(request, &dir, &swapper);
        if !matches!(&result, Ok(d) if d.status == DeploymentStatus::Verifying) {
            self.end_deployment(key);
        }
        result
    }

    fn swap_claimed(
        self: &Arc<Self>,
        request: &SwapRequest<'_>,
        dir: &Path,
        swapper: &PluginSwapper,
    ) -> Result<Deployment, SwapError> {
        let file = dir.join("pipeline.toml");
        let from = plugin_of(&file, request.operator)?;
        let component = self.load_uploaded(dir, request.digest, request.plugin_store)?;
        let mut loaded = LoadedConfig::load(&file).map_err(|e| SwapError::Failed(e.to_string()))?;
        // The file is held to the tenant's reach again: a grant narrowed
        // since the pipeline was created refuses the swap.
        self.hold_to_reach(&request.key.0, &mut loaded)
            .map_err(|e| SwapError::Invalid(e.to_string()))?;
        let policy = loaded.config.deploy.clone();
        let window = Duration::from_millis(policy.verify_window_ms.get());
        let verify = request.kind == DeploymentKind::Deploy && !window.is_zero();
        // The verdict comes within the window plus a judging interval.
        let hold = verify.then(|| window + JUDGE_EVERY * 4);
        let reports = swapper
            .swap(request.operator, component, SWAP_TIMEOUT, hold)
            .map_err(|error| {
                swapper.release();
                match error {
                    PluginSwapError::Timeout { .. } => SwapError::Failed(error.to_string()),
                    _ => SwapError::Refused(error.to_string()),
                }
            })?;
        let mut deployment = Deployment {
            id: next_deployment_id(dir),
            at_ms: sluice_host::time::now_ms(),
            by: request.by.to_string(),
            operator: request.operator.to_string(),
            from,
            to: request.digest.to_string(),
            kind: request.kind,
            barrier: reports.first().map(|r| r.barrier).unwrap_or_default(),
            pause_ms: reports
                .iter()
                .map(|r| r.pause.as_secs_f64() * 1000.0)
                .fold(0.0, f64::max),
            status: DeploymentStatus::Swapped,
            outcome: "swapped".into(),
        };
        let failures: Vec<String> = reports
            .iter()
            .filter_map(|r| {
                r.result
                    .as_ref()
                    .err()
                    .map(|e| format!("instance {}: {e}", r.worker))
            })
            .collect();
        if !failures.is_empty() {
            // Instances that did swap keep running the new version until the
            // pipeline restarts from its file (which names the old one).
            swapper.release();
            deployment.status = DeploymentStatus::Refused;
            deployment.outcome = failures.join("; ");
            record_deployment(dir, &deployment).map_err(|e| SwapError::Failed(e.to_string()))?;
            return Err(SwapError::Refused(deployment.outcome));
        }
        if !verify {
            set_plugin(&file, request.operator, request.digest)?;
            record_deployment(dir, &deployment).map_err(|e| SwapError::Failed(e.to_string()))?;
            prune_plugins(dir);
            return Ok(deployment);
        }
        deployment.status = DeploymentStatus::Verifying;
        deployment.outcome = format!("on probation for {} ms", window.as_millis());
        record_deployment(dir, &deployment).map_err(|e| SwapError::Failed(e.to_string()))?;
        let baseline = swapper.operator_counters(request.operator);
        let probation = Probation {
            key: request.key.clone(),
            dir: dir.to_path_buf(),
            swapper: swapper.clone(),
            deployment: deployment.clone(),
            policy,
            baseline,
            started: Instant::now(),
        };
        let supervisor = Arc::clone(self);
        std::thread::Builder::new()
            .name(format!("verify-{}-{}", request.key.0, request.key.1))
            .spawn(move || supervisor.judge(probation))
            .map_err(|e| SwapError::Failed(format!("starting the verification: {e}")))?;
        Ok(deployment)
    }

    /// Judges a version on probation until the verdict, then keeps it or
    /// rolls it back (see the module docs).
    fn judge(self: Arc<Self>, probation: Probation) {
        let Probation {
            key,
            dir,
            swapper,
            mut deployment,
            policy,
            baseline,
            started,
        } = probation;
        let window = Duration::from_millis(policy.verify_window_ms.get());
        let verdict = loop {
            if self.state(&key) != Some(PipelineState::Running) {
                break Verdict::RollBack("the pipeline stopped during verification".into());
            }
            let seen = swapper
                .operator_counters(&deployment.operator)
                .since(baseline);
            match policy.judge(seen, started.elapsed() >= window) {
                Verdict::Undecided => std::thread::sleep(JUDGE_EVERY),
                verdict => break verdict,
            }
        };
        let file = dir.join("pipeline.toml");
        match verdict {
            Verdict::Keep(detail) => {
                // The file names the new version before any checkpoint
                // holds its output: a restart from then on runs it.
                match set_plugin(&file, &deployment.operator, &deployment.to) {
                    Ok(()) => {
                        deployment.status = DeploymentStatus::Kept;
                        deployment.outcome = detail;
                        swapper.release();
                    }
                    Err(error) => {
                        deployment.status = DeploymentStatus::RolledBack;
                        deployment.outcome = format!("recording the new version failed: {error:?}");
                        self.restart_abandoning(&key);
                    }
                }
            }
            Verdict::RollBack(reason) => {
                tracing::warn!(pipeline = %key.1, operator = %deployment.operator, %reason,
                    "new plugin version rolled back");
                deployment.status = DeploymentStatus::RolledBack;
                deployment.outcome = reason;
                self.restart_abandoning(&key);
            }
            Verdict::Undecided => {}
        }
        if let Err(error) = record_deployment(&dir, &deployment) {
            tracing::error!(%error, "recording a deployment's verdict");
        }
        if deployment.status == DeploymentStatus::Kept {
            prune_plugins(&dir);
        }
        self.end_deployment(&key);
    }

    /// Loads the uploaded component `digest` for the pipeline in `dir`
    /// (linking it into the pipeline's plugins first): a component of
    /// another WIT version fails to load here, before anything changes.
    fn load_uploaded(
        &self,
        dir: &Path,
        digest: &str,
        plugin_store: &Path,
    ) -> Result<Arc<sluice_host::runtime::PluginComponent>, SwapError> {
        let linked = dir.join("plugins").join(format!("{digest}.wasm"));
        if !linked.exists() {
            let stored = plugin_store.join(format!("{digest}.wasm"));
            std::fs::hard_link(&stored, &linked)
                .or_else(|_| std::fs::copy(&stored, &linked).map(drop))
                .map_err(|e| {
                    SwapError::Refused(format!("plugin sha256:{digest} was not uploaded: {e}"))
                })?;
        }
        self.runtime()
            .load(linked)
            .map_err(|e| SwapError::Refused(e.to_string()))
    }

    /// The pipeline's deployments, oldest first, each in its latest state.
    pub fn deployments(&self, key: &PipelineKey) -> Option<Vec<Deployment>> {
        let dir = self.dir_of(key)?;
        Some(read_deployments(&dir))
    }

    /// The versions `operator` keeps (sha256 digests): the one it runs
    /// first, then the ones it ran before, newest first
    /// ([`KEPT_VERSIONS`] at most). Any of them is a rollback target.
    pub fn kept_versions(
        &self,
        key: &PipelineKey,
        operator: &str,
    ) -> Result<Vec<String>, SwapError> {
        let dir = self.dir_of(key).ok_or(SwapError::NotFound)?;
        let current = plugin_of(&dir.join("pipeline.toml"), operator)?;
        Ok(kept_versions(&read_deployments(&dir), operator, &current))
    }

    /// What a rollback swaps to: `operator` (or, if `None`, the operator of
    /// the latest deployment that took effect) goes to the kept version
    /// whose digest starts with `to` (at least 8 hex digits, `sha256:`
    /// allowed), or, without `to`, to the version it ran before the
    /// current one. Answers the operator and the full digest.
    pub fn rollback_target(
        &self,
        key: &PipelineKey,
        operator: Option<&str>,
        to: Option<&str>,
    ) -> Result<(String, String), SwapError> {
        let dir = self.dir_of(key).ok_or(SwapError::NotFound)?;
        let deployments = read_deployments(&dir);
        let operator = match operator {
            Some(operator) => operator.to_string(),
            None => deployments
                .iter()
                .rev()
                .find(|d| d.status.took_effect())
                .map(|d| d.operator.clone())
                .ok_or_else(|| SwapError::Refused("no deployment to roll back".into()))?,
        };
        let current = plugin_of(&dir.join("pipeline.toml"), &operator)?;
        let kept = kept_versions(&deployments, &operator, &current);
        let listed = || {
            kept.iter()
                .map(|d| format!("sha256:{}", &d[..d.len().min(12)]))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let digest = match to {
            None => kept.get(1).cloned().ok_or_else(|| {
                SwapError::Refused(format!(
                    "`{operator}` has no earlier version to roll back to"
                ))
            })?,
            Some(to) => {
                let prefix = to
                    .strip_prefix("sha256:")
                    .unwrap_or(to)
                    .to_ascii_lowercase();
                if prefix.len() < 8 || !prefix.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(SwapError::Refused(format!(
                        "`{to}` is not a version: give at least 8 hex digits of its sha256"
                    )));
                }
                let matching: Vec<&String> =
                    kept.iter().filter(|d| d.starts_with(&prefix)).collect();
                match matching.as_slice() {
                    [digest] if **digest == current => {
                        return Err(SwapError::Refused(format!(
                            "`{operator}` already runs sha256:{prefix}"
                        )));
                    }
                    [digest] => (*digest).clone(),
                    [] => {
                        return Err(SwapError::Refused(format!(
                            "sha256:{prefix} is not a kept version of `{operator}` (kept: {})",
                            listed()
                        )));
                    }
                    _ => {
                        return Err(SwapError::Refused(format!(
                            "sha256:{prefix} names more than one kept version of `{operator}`"
                        )));
                    }
                }
            }
        };
        Ok((operator, digest))
    }
}

/// The versions an operator keeps, from its deployment history: `current`
/// first, then every version a deployment that took effect swapped from or
/// to, newest first, each once, [`KEPT_VERSIONS`] at most.
fn kept_versions(deployments: &[Deployment], operator: &str, current: &str) -> Vec<String> {
    let mut kept = vec![current.to_string()];
    for deployment in deployments
        .iter()
        .rev()
        .filter(|d| d.operator == operator && d.status.took_effect())
    {
        for digest in [&deployment.to, &deployment.from] {
            if kept.len() < KEPT_VERSIONS && !kept.contains(digest) {
                kept.push(digest.clone());
            }
        }
    }
    kept
}

/// Unlinks from the pipeline's `plugins/` directory every component that
/// is no operator's kept version (the uploaded store keeps its copy).
fn prune_plugins(dir: &Path) {
    let Ok(document) = read_document(&dir.join("pipeline.toml")) else {
        return;
    };
    let deployments = read_deployments(dir);
    let operators: Vec<String> = document
        .get("operators")
        .and_then(toml_edit::Item::as_array_of_tables)
        .map(|tables| {
            tables
                .iter()
                .filter_map(|t| t.get("name").and_then(toml_edit::Item::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut keep: Vec<String> = Vec::new();
    for operator in &operators {
        if let Ok(current) = plugin_of(&dir.join("pipeline.toml"), operator) {
            keep.extend(kept_versions(&deployments, operator, &current));
        }
    }
    let Ok(entries) = std::fs::read_dir(dir.join("plugins")) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(digest) = name.to_str().and_then(|n| n.strip_suffix(".wasm")) else {
            continue;
        };
        if !keep.iter().any(|k| k == digest)
            && let Err(error) = std::fs::remove_file(entry.path())
        {
            tracing::warn!(%error, plugin = digest, "unlinking an old plugin version");
        }
    }
}

/// A version on probation.
struct Probation {
    key: PipelineKey,
    dir: PathBuf,
    swapper: PluginSwapper,
    deployment: Deployment,
    policy: VerifyPolicy,
    baseline: sluice_host::dataflow::swap::PluginCounters,
    started: Instant,
}

/// The operator's table in a pipeline document.
fn operator_table<'a>(
    document: &'a mut toml_edit::DocumentMut,
    operator: &str,
) -> Result<&'a mut toml_edit::Table, SwapError> {
    document
        .get_mut("operators")
        .and_then(toml_edit::Item::as_array_of_tables_mut)
        .and_then(|operators| {
            operators
                .iter_mut()
                .find(|t| t.get("name").and_then(toml_edit::Item::as_str) == Some(operator))
        })
        .ok_or_else(|| SwapError::Refused(format!("no operator `{operator}`")))
}

fn read_document(file: &Path) -> Result<toml_edit::DocumentMut, SwapError> {
    let text = std::fs::read_to_string(file).map_err(|e| SwapError::Failed(e.to_string()))?;
    text.parse()
        .map_err(|e| SwapError::Failed(format!("{}: {e}", file.display())))
}

/// The digest of the plugin `operator` runs, as the pipeline file names it.
fn plugin_of(file: &Path, operator: &str) -> Result<String, SwapError> {
    let mut document = read_document(file)?;
    let table = operator_table(&mut document, operator)?;
    table
        .get("plugin")
        .and_then(toml_edit::Item::as_str)
        .and_then(|p| p.strip_prefix("plugins/"))
        .and_then(|p| p.strip_suffix(".wasm"))
        .map(str::to_string)
        .ok_or_else(|| SwapError::Refused(format!("`{operator}` runs no uploaded plugin")))
}

/// Makes the pipeline file name `digest` as `operator`'s plugin (written
/// aside and renamed: a crash leaves the old file or the new one).
fn set_plugin(file: &Path, operator: &str, digest: &str) -> Result<(), SwapError> {
    let mut document = read_document(file)?;
    operator_table(&mut document, operator)?
        .insert("plugin", toml_edit::value(format!("plugins/{digest}.wasm")));
    let temporary = file.with_extension("toml.tmp");
    std::fs::write(&temporary, document.to_string())
        .and_then(|()| std::fs::rename(&temporary, file))
        .map_err(|e| SwapError::Failed(format!("recording the new version: {e}")))
}

fn read_deployments(dir: &Path) -> Vec<Deployment> {
    let text = std::fs::read_to_string(dir.join("deployments.jsonl")).unwrap_or_default();
    let mut deployments: Vec<Deployment> = Vec::new();
    for deployment in text
        .lines()
        .filter_map(|line| serde_json::from_str::<Deployment>(line).ok())
    {
        match deployments
            .iter_mut()
            .find(|d| d.id != 0 && d.id == deployment.id)
        {
            Some(earlier) => *earlier = deployment,
            None => deployments.push(deployment),
        }
    }
    deployments
}

fn next_deployment_id(dir: &Path) -> u64 {
    read_deployments(dir)
        .iter()
        .map(|d| d.id)
        .max()
        .unwrap_or(0)
        + 1
}

fn record_deployment(dir: &Path, deployment: &Deployment) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("deployments.jsonl"))?;
    let line = serde_json::to_string(deployment).map_err(std::io::Error::other)?;
    writeln!(file, "{line}")?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(operator: &str, from: &str, to: &str, status: DeploymentStatus) -> Deployment {
        Deployment {
            id: 0,
            at_ms: 0,
            by: "t".into(),
            operator: operator.into(),
            from: from.into(),
            to: to.into(),
            kind: DeploymentKind::Deploy,
            barrier: 1,
            pause_ms: 0.0,
            status,
            outcome: String::new(),
        }
    }

    #[test]
    fn kept_versions_are_the_running_one_then_earlier_ones_newest_first() {
        use DeploymentStatus::*;
        let history = vec![
            deployment("a", "v0", "v1", Kept),
            deployment("b", "w0", "w1", Kept),
            deployment("a", "v1", "v2", RolledBack),
            deployment("a", "v1", "v3", Kept),
            deployment("a", "v3", "v0", Swapped),
        ];
        // v2 never took effect; v0 appears once; b's versions are its own.
        assert_eq!(kept_versions(&history, "a", "v0"), ["v0", "v3", "v1"]);
        assert_eq!(kept_versions(&history, "b", "w1"), ["w1", "w0"]);
        assert_eq!(kept_versions(&history, "c", "x"), ["x"]);
        let long: Vec<Deployment> = (0..10)
            .map(|i| deployment("a", &format!("v{i}"), &format!("v{}", i + 1), Kept))
            .collect();
        assert_eq!(
            kept_versions(&long, "a", "v10"),
            ["v10", "v9", "v8", "v7", "v6"]
        );
    }
}
