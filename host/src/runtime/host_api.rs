//! What a plugin instance's store holds, and the host functions it imports.

use super::bindings::typed::sluice::plugin::{host, state, types};
use super::plugin_output::{PluginOutput, Stream};
use crate::metrics::OperatorMetrics;
use crate::state::{OperatorScope, ScopedState};
use std::sync::Arc;
use std::time::Duration;
use wasmtime::StoreLimits;
use wasmtime_wasi::{ResourceTable, WasiCtx, WasiCtxView, WasiView};

/// The data of one plugin instance's `Store`.
pub struct PluginState {
    pub(crate) scope: OperatorScope,
    pub(crate) state: ScopedState,
    pub(crate) metrics: Arc<OperatorMetrics>,
    pub(crate) limits: StoreLimits,
    /// The plugin's stderr, for fault reasons.
    pub(crate) stderr: PluginOutput,
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
        limits: StoreLimits,
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

impl state::Host for PluginState {
    fn get(&mut self, key: Vec<u8>) -> Option<Vec<u8>> {
        self.state.get(&key)
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.state.put(&key, &value);
    }

    fn delete(&mut self, key: Vec<u8>) {
        self.state.delete(&key);
    }
}
