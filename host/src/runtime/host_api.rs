//! What a plugin instance's store holds, and the host functions it imports.

use super::bindings::typed::sluice::plugin::{host, state, types};
use super::limits::CallLimits;
use super::plugin_output::{PluginOutput, Stream};
use crate::metrics::OperatorMetrics;
use crate::state::{OperatorScope, ScopedState, StateError};
use std::sync::Arc;
use std::time::Duration;
use wasmtime_wasi::{ResourceTable, WasiCtx, WasiCtxView, WasiView};

/// The data of one plugin instance's `Store`.
pub(crate) struct PluginState {
    pub(crate) scope: OperatorScope,
    pub(crate) state: ScopedState,
    pub(crate) metrics: Arc<OperatorMetrics>,
    /// CPU budget and memory limit of the current call.
    pub(crate) limits: CallLimits,
    /// The plugin's stderr, for fault reasons.
    pub(crate) stderr: PluginOutput,
    /// A state backend failure during the current call.
    pub(crate) state_error: Option<StateError>,
    /// State writes of the current call, applied when it completes
    /// (`None` deletes).
    pending_state: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    wasi: WasiCtx,
    table: ResourceTable,
}

impl PluginState {
    /// State for a new instance. WASI is present only because some
    /// languages' standard libraries import it: no preopened directories, no
    /// network, no environment, clocks frozen at the Unix epoch unless the
    /// pipeline grants the clock; stdout and stderr go to the host log.
    pub(crate) fn new(
        scope: OperatorScope,
        state: ScopedState,
        metrics: Arc<OperatorMetrics>,
        limits: CallLimits,
        grant_clock: bool,
    ) -> Self {
        let shared_scope = Arc::new(scope.clone());
        let stderr = PluginOutput::new(shared_scope.clone(), Stream::Stderr);
        let mut wasi = WasiCtx::builder();
        wasi.stdout(PluginOutput::new(shared_scope, Stream::Stdout))
            .stderr(stderr.clone());
        if !grant_clock {
            wasi.wall_clock(FrozenClock).monotonic_clock(FrozenClock);
        }
        PluginState {
            scope,
            state,
            metrics,
            limits,
            stderr,
            state_error: None,
            pending_state: Default::default(),
            wasi: wasi.build(),
            table: ResourceTable::new(),
        }
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// A clock that always reads zero: what a plugin sees without a clock grant,
/// keeping its output a function of its input.
struct FrozenClock;

impl wasmtime_wasi::HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

impl types::Host for PluginState {}

impl host::Host for PluginState {
    fn log(&mut self, level: types::LogLevel, message: String) {
        let OperatorScope {
            tenant,
            pipeline,
            operator,
        } = &self.scope;
        match level {
            types::LogLevel::Trace => tracing::trace!(%tenant, %pipeline, %operator, "{message}"),
            types::LogLevel::Debug => tracing::debug!(%tenant, %pipeline, %operator, "{message}"),
            types::LogLevel::Info => tracing::info!(%tenant, %pipeline, %operator, "{message}"),
            types::LogLevel::Warn => tracing::warn!(%tenant, %pipeline, %operator, "{message}"),
            types::LogLevel::Error => tracing::error!(%tenant, %pipeline, %operator, "{message}"),
        }
    }

    fn counter_add(&mut self, name: String, delta: u64) {
        self.metrics.add_plugin_counter(&name, delta);
    }
}

impl PluginState {
    /// Keeps a state backend failure for the caller of the plugin (which
    /// stops the pipeline) and turns it into a trap of the current call.
    fn state_failed(&mut self, error: StateError) -> wasmtime::Error {
        let trap = wasmtime::Error::msg(error.to_string());
        self.state_error = Some(error);
        trap
    }
}

impl PluginState {
    /// Applies the state writes of a call that completed.
    pub(crate) fn commit_state(&mut self) -> Result<(), StateError> {
        if self.pending_state.is_empty() {
            return Ok(());
        }
        let writes = std::mem::take(&mut self.pending_state);
        self.state.write(writes)
    }

    /// Forgets the state writes of a call that faulted: its records are
    /// retried (or dead-lettered), so they must not have left state behind.
    pub(crate) fn discard_state(&mut self) {
        self.pending_state.clear();
    }
}

/// Plugin state calls see the writes of the current call at once, but the
/// writes reach the store only when the call completes
/// ([`PluginState::commit_state`]): a call either takes effect entirely or
/// not at all.
impl state::Host for PluginState {
    fn get(&mut self, key: Vec<u8>) -> wasmtime::Result<Option<Vec<u8>>> {
        if let Some(pending) = self.pending_state.get(&key) {
            return Ok(pending.clone());
        }
        self.state.get(&key).map_err(|e| self.state_failed(e))
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> wasmtime::Result<()> {
        self.pending_state.insert(key, Some(value));
        Ok(())
    }

    fn delete(&mut self, key: Vec<u8>) -> wasmtime::Result<()> {
        self.pending_state.insert(key, None);
        Ok(())
    }
}
