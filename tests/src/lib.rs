//! Helpers shared by the integration tests and benchmarks: building the
//! example plugins (with the same code as `sluice plugin build`) and setting
//! up plugin operators against the real runtime.

use sluice_host::dataflow::TransformOperator;
use sluice_host::metrics::OperatorMetrics;
use sluice_host::runtime::{PluginInstance, PluginLimits, PluginRuntime, RuntimeConfig};
use sluice_host::state::{MemoryStateStore, OperatorScope, StateStore};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The component of the example plugin `name` (a directory under
/// `plugins/`), built once per test process.
pub fn plugin(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let dir = repo_root().join("plugins").join(name);
    let component = sluice_cli::build::build_plugin(&dir, None, false)
        .unwrap_or_else(|error| panic!("building plugin {name}: {error:#}"))
        .path;
    built.insert(name.to_string(), component.clone());
    component
}

/// A runtime whose compiled-component cache lives in the build's target
/// directory (shared by all tests, never in the user's home).
pub fn runtime() -> PluginRuntime {
    let cache_dir = repo_root().join("target").join("test-component-cache");
    PluginRuntime::new(RuntimeConfig {
        cache_dir,
        ..RuntimeConfig::default()
    })
    .unwrap_or_else(|error| panic!("creating runtime: {error}"))
}

/// A fresh in-memory state store.
pub fn state_store() -> Arc<dyn StateStore> {
    Arc::new(MemoryStateStore::default())
}

/// A transform operator running plugin `name` for `tenant`, with `limits`
/// and `config`.
pub fn operator(
    runtime: &PluginRuntime,
    store: &Arc<dyn StateStore>,
    tenant: &str,
    name: &str,
    limits: PluginLimits,
    config: &[(&str, &str)],
) -> TransformOperator {
    let component = runtime
        .load(plugin(name))
        .unwrap_or_else(|error| panic!("loading {name}: {error}"));
    let scope = OperatorScope::new(tenant, "test", name);
    let metrics = OperatorMetrics::new(name);
    let config = config
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let instance = PluginInstance::new(
        component,
        scope,
        store.clone(),
        metrics.clone(),
        limits,
        config,
    )
    .unwrap_or_else(|error| panic!("instantiating {name}: {error}"));
    TransformOperator::new(name, instance, metrics)
}
