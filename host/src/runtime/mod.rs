//! The WebAssembly plugin runtime.
//!
//! One [`PluginRuntime`] per host process holds the shared wasmtime
//! [`Engine`] (pooling allocator, epoch interruption, component model with
//! concurrency support off), the [`Linker`] with the host's imports, and the
//! on-disk [`ComponentCache`]. Pipelines load plugins with
//! [`PluginRuntime::load`] and create one [`PluginInstance`] (one `Store`)
//! per operator, each with its own [`PluginLimits`] and state scope, so that
//! tenants and pipelines share nothing but the engine.

mod aggregate;
mod batch_output;
mod bindings;
mod cache;
mod component;
mod cpu_share;
mod host_api;
mod instance;
mod limits;
mod plugin_host;
mod plugin_output;
mod projection;

pub use crate::metrics::FaultKind;
pub use aggregate::{AggregateError, GroupAdd, PluginAggregator};
pub use cache::{
    CacheOutcome, ComponentCache, DEFAULT_CACHE_MAX_BYTES, DEFAULT_FUNCTION_CACHE_MAX_BYTES,
    FunctionCache, mark_used, prune_least_recently_used, store_bounded, store_file,
};
pub use component::{PluginComponent, PluginWorld};
pub use cpu_share::CpuShare;
pub use instance::{
    BatchResult, CallMode, CallPath, Emit, EmitRoute, Emitted, PluginFault, PluginInstance,
};
pub use plugin_host::SwappablePlugin;

use crate::sync::lock;
use host_api::PluginState;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// The version of the `sluice:plugin` WIT package this host implements.
pub const WIT_PACKAGE_VERSION: &str = "0.1.0";

/// Errors of loading and instantiating plugins.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The engine could not be configured.
    #[error("cannot configure the WebAssembly engine: {0:#}")]
    Engine(wasmtime::Error),
    /// The plugin file could not be read.
    #[error("cannot read plugin {path}: {source}")]
    Read {
        /// The plugin file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid component.
    #[error("{path} is not a valid WebAssembly component: {message}")]
    Compile {
        /// The plugin file.
        path: PathBuf,
        /// The compiler's message.
        message: String,
    },
    /// The plugin was built against another version of the WIT package.
    #[error(
        "{path} was built against sluice:plugin@{plugin_version}, but this host provides sluice:plugin@{host_version}; rebuild the plugin with a matching sluice-sdk"
    )]
    VersionMismatch {
        /// The plugin file.
        path: PathBuf,
        /// Version the plugin uses.
        plugin_version: String,
        /// Version the host implements.
        host_version: String,
    },
    /// The component exports neither a transform nor an aggregate.
    #[error(
        "{path} exports neither sluice:plugin/transformer nor sluice:plugin/aggregator (its exports: {exports})"
    )]
    NotATransform {
        /// The plugin file.
        path: PathBuf,
        /// What it does export.
        exports: String,
    },
    /// The component needs imports the host does not give it.
    #[error("{path} cannot be linked (it needs imports this host does not grant): {message}")]
    Link {
        /// The plugin file.
        path: PathBuf,
        /// The linker's message.
        message: String,
    },
    /// Instantiation failed.
    #[error("cannot instantiate plugin {plugin}: {message}")]
    Instantiate {
        /// The plugin name.
        plugin: String,
        /// Why.
        message: String,
    },
    /// The plugin's `init` returned an error or trapped.
    #[error("plugin {plugin} refused its configuration: {message}")]
    Init {
        /// The plugin name.
        plugin: String,
        /// The plugin's message.
        message: String,
    },
}

/// Process-wide runtime settings.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled components are cached.
    pub cache_dir: PathBuf,
    /// Plugin instances that can exist at once (pooling allocator slots).
    pub max_instances: u32,
    /// Largest linear memory any plugin may have; per-operator limits are
    /// set lower with [`PluginLimits::memory_bytes`].
    pub max_memory_bytes: usize,
    /// How often running plugins check in with their CPU deadline.
    pub epoch_tick: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: ComponentCache::default_dir(),
            max_instances: 128,
            max_memory_bytes: 1 << 30,
            epoch_tick: Duration::from_millis(1),
        }
    }
}

/// Limits and grants of one plugin instance.
#[derive(Debug, Clone)]
pub struct PluginLimits {
    /// CPU time (of the calling thread, not wall time) one call (one batch)
    /// may use before it is interrupted.
    pub deadline: Duration,
    /// CPU time instantiation and the plugin's `init` may use together.
    pub init_deadline: Duration,
    /// Linear memory the instance may grow to.
    pub memory_bytes: usize,
    /// Whether the plugin may read the real clock (otherwise it reads zero).
    pub grant_clock: bool,
    /// Typed or packed calls.
    pub call_mode: CallMode,
}

impl Default for PluginLimits {
    fn default() -> Self {
        PluginLimits {
            deadline: Duration::from_millis(100),
            init_deadline: Duration::from_secs(2),
            memory_bytes: 64 << 20,
            grant_clock: false,
            call_mode: CallMode::Auto,
        }
    }
}

/// The shared plugin runtime. Cheap to clone.
#[derive(Clone)]
pub struct PluginRuntime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    engine: Engine,
    linker: Linker<PluginState>,
    cache: ComponentCache,
    epoch_tick: Duration,
    /// Advances the epoch while plugin calls run.
    ticker: Arc<EpochTicker>,
    /// The epoch ticker thread, started with the first plugin loaded, or
    /// why it could not start: then no plugin loads, since none would have
    /// a CPU deadline.
    ticker_started: std::sync::OnceLock<Result<(), String>>,
    /// CPU shares by tenant (tenants without one are not limited).
    cpu_shares: std::sync::Mutex<std::collections::HashMap<String, Arc<CpuShare>>>,
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        self.ticker.stop();
    }
}

/// Set to `1`, plugins' compiled functions are named in
/// `/tmp/perf-PID.map`, so that `perf report` shows a plugin's own
/// functions instead of bare addresses (for profiling plugins; off by
/// default, it costs a file write per loaded module).
pub const PERF_MAP_VARIABLE: &str = "SLUICE_WASM_PERF_MAP";

impl PluginRuntime {
    /// Creates the engine and the linker (the epoch ticker thread starts
    /// with the first plugin loaded).
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        let mut pooling = PoolingAllocationConfig::new();
        pooling
            .total_component_instances(config.max_instances)
            .total_core_instances(config.max_instances * 8)
            .total_memories(config.max_instances * 2)
            .total_tables(config.max_instances * 8)
            // Plugins run on the calling thread's stack (no async calls,
            // no fibers): a pool of fiber stacks would only cost one
            // mprotect per slot at start-up (~4 ms of CPU for 1,000).
            .total_stacks(0)
            .max_memories_per_component(4)
            .max_tables_per_component(16)
            .max_core_instance_size(4 << 20)
            .max_component_instance_size(4 << 20)
            .max_memory_size(config.max_memory_bytes);
        let mut wasm = Config::new();
        wasm.wasm_component_model(true)
            .concurrency_support(false)
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
        if std::env::var_os(PERF_MAP_VARIABLE).is_some_and(|v| v == "1") {
            wasm.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let cache = ComponentCache::new(config.cache_dir);
        wasm.enable_incremental_compilation(cache.functions().clone())
            .map_err(RuntimeError::Engine)?;
        let engine = Engine::new(&wasm).map_err(RuntimeError::Engine)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(RuntimeError::Engine)?;
        bindings::typed::Transform::add_to_linker::<_, HasSelf<PluginState>>(
            &mut linker,
            |state| state,
        )
        .map_err(RuntimeError::Engine)?;

        Ok(PluginRuntime {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                cache,
                epoch_tick: config.epoch_tick,
                ticker: Arc::new(EpochTicker::default()),
                ticker_started: std::sync::OnceLock::new(),
                cpu_shares: Default::default(),
            }),
        })
    }

    /// Limits the plugins of `tenant` to `cores` CPUs from their next
    /// instantiation on (`None`: no limit). See [`CpuShare`].
    pub fn set_cpu_share(&self, tenant: &str, cores: Option<f64>) {
        let mut shares = lock(&self.inner.cpu_shares);
        match cores {
            Some(cores) => {
                shares.insert(tenant.to_string(), Arc::new(CpuShare::new(cores)));
            }
            None => {
                shares.remove(tenant);
            }
        }
    }

    /// The CPU share of `tenant`'s plugins, if it has one.
    pub(crate) fn cpu_share(&self, tenant: &str) -> Option<Arc<CpuShare>> {
        lock(&self.inner.cpu_shares).get(tenant).cloned()
    }

    /// The shared engine.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The compiled-component cache.
    pub fn cache(&self) -> &ComponentCache {
        &self.inner.cache
    }

    /// Reads, compiles (or loads from cache), version-checks and links the
    /// plugin at `path`. Done once per plugin version, off the hot path.
    pub fn load(&self, path: impl Into<PathBuf>) -> Result<Arc<PluginComponent>, RuntimeError> {
        self.start_epoch_ticker()?;
        component::load(self, path.into()).map(Arc::new)
    }

    /// Starts the epoch ticker thread, once: every plugin call's CPU
    /// deadline depends on it.
    fn start_epoch_ticker(&self) -> Result<(), RuntimeError> {
        let inner = &self.inner;
        inner
            .ticker_started
            .get_or_init(|| {
                spawn_epoch_ticker(inner.engine.clone(), inner.epoch_tick, &inner.ticker)
                    .map_err(|error| format!("cannot start the epoch ticker thread: {error}"))
            })
            .clone()
            .map_err(|message| RuntimeError::Engine(wasmtime::Error::msg(message)))
    }

    /// How often the engine's epoch advances.
    fn epoch_tick(&self) -> Duration {
        self.inner.epoch_tick
    }

    /// The epoch ticker, told of every plugin call.
    pub(crate) fn epoch_ticker(&self) -> Arc<EpochTicker> {
        self.inner.ticker.clone()
    }
}

/// Advances the engine's epoch every tick while a plugin call runs: how
/// often a running plugin checks its CPU time against its deadline.
///
/// Only while a call runs: a process owning many quiet tasks spent 1.9 %
/// of a core on a thread waking every millisecond for nothing
/// (`docs/benchmarks.md`). Every call into a plugin starts with
/// [`CallLimits::start_call`](limits::CallLimits), which counts it here
/// and wakes the thread; the deadline it sets counts ticks from then on.
#[derive(Debug, Default)]
pub(crate) struct EpochTicker {
    /// Plugin calls running now.
    calls: AtomicUsize,
    /// The ticker thread, woken when a call starts.
    thread: std::sync::OnceLock<std::thread::Thread>,
    stop: AtomicBool,
}

impl EpochTicker {
    /// A plugin call starts: the epoch must advance until it ends.
    pub(crate) fn call_started(&self) {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0
            && let Some(thread) = self.thread.get()
        {
            thread.unpark();
        }
    }

    /// A call counted by [`call_started`](Self::call_started) ended.
    pub(crate) fn call_ended(&self) {
        self.calls.fetch_sub(1, Ordering::SeqCst);
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// Starts the thread of `ticker`: advances `engine`'s epoch every `tick`
/// while a call runs, sleeps while none does.
fn spawn_epoch_ticker(
    engine: Engine,
    tick: Duration,
    ticker: &Arc<EpochTicker>,
) -> std::io::Result<()> {
    let state = ticker.clone();
    let handle = std::thread::Builder::new()
        .name("sluice-epoch".into())
        .spawn(move || {
            while !state.stop.load(Ordering::SeqCst) {
                if state.calls.load(Ordering::SeqCst) == 0 {
                    // Woken by the next call (or spuriously: checked again).
                    std::thread::park();
                    continue;
                }
                std::thread::sleep(tick);
                engine.increment_epoch();
            }
        })?;
    // Set before any plugin is loaded, so before any call can start.
    let _ = ticker.thread.set(handle.thread().clone());
    Ok(())
}
