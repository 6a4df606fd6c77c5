//! One live instance of a plugin, whatever its world: what the transform
//! ([`super::PluginInstance`]) and aggregate ([`super::PluginAggregator`])
//! operators share — the component, the operator's scope and keyed state,
//! limits and config, the store and the world's exports — and the one way
//! to create and re-create an instance within the instantiation budget.
//!
//! A world is a [`HostedWorld`]: how to find its exports in an instance and
//! how to call its `init`. A hot swap replaces the component of a
//! [`PluginHost`] and re-creates the instance; state, scope and metrics
//! stay.

use super::component::PluginComponent;
use super::host_api::PluginState;
use super::instance::{end_call, init_fault, new_store, start_call};
use super::{PluginLimits, RuntimeError};
use crate::metrics::OperatorMetrics;
use crate::state::{OperatorScope, ScopedState};
use std::sync::Arc;
use wasmtime::Store;
use wasmtime::component::Instance;

/// A running plugin whose version can be replaced while its operator keeps
/// its keyed state: a hot swap (see [`crate::dataflow::swap`]).
pub trait SwappablePlugin {
    /// The component it runs.
    fn running(&self) -> &Arc<PluginComponent>;

    /// Runs `component` (another version of the plugin) from now on, with
    /// the same keyed state, limits and config, and returns the component
    /// it replaced. If the new version cannot be instantiated or its `init`
    /// fails, nothing changes.
    fn swap_component(
        &mut self,
        component: Arc<PluginComponent>,
    ) -> Result<Arc<PluginComponent>, RuntimeError>;
}

/// A WIT world the host runs plugins of.
pub(crate) trait HostedWorld {
    /// The world's exports in one instance.
    type Exports;

    /// Whether `component` implements this world; if not, why (naming the
    /// world it implements instead).
    fn check(component: &PluginComponent) -> Result<(), String>;

    /// The exports of a new `instance` of `component`.
    fn load(
        component: &PluginComponent,
        store: &mut Store<PluginState>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Exports>;

    /// Calls the plugin's `init` with `config`.
    fn init(
        exports: &Self::Exports,
        store: &mut Store<PluginState>,
        config: &[(String, String)],
    ) -> wasmtime::Result<Result<(), String>>;
}

/// A live instance of a plugin of world `W` serving one operator.
pub(crate) struct PluginHost<W: HostedWorld> {
    /// The component it runs.
    pub(crate) component: Arc<PluginComponent>,
    /// The operator it serves (tenant, pipeline, operator).
    pub(crate) scope: OperatorScope,
    /// The operator's keyed state (kept across re-instantiations).
    pub(crate) state: ScopedState,
    /// The operator's counters.
    pub(crate) metrics: Arc<OperatorMetrics>,
    /// CPU and memory limits.
    pub(crate) limits: PluginLimits,
    /// What `init` receives.
    pub(crate) config: Vec<(String, String)>,
    /// The instance's store.
    pub(crate) store: Store<PluginState>,
    /// The instance's exports.
    pub(crate) exports: W::Exports,
    /// The instance's linear memory after its first successful call: what
    /// it needs to work ([`Self::grew_near_memory_limit`]).
    first_call_memory: Option<usize>,
}

impl<W: HostedWorld> PluginHost<W> {
    /// Instantiates `component` for `scope` and calls its `init`.
    pub(crate) fn new(
        component: Arc<PluginComponent>,
        scope: OperatorScope,
        state: ScopedState,
        metrics: Arc<OperatorMetrics>,
        limits: PluginLimits,
        config: Vec<(String, String)>,
    ) -> Result<Self, RuntimeError> {
        let (store, exports) =
            instantiate::<W>(&component, &scope, &state, &metrics, &limits, &config)?;
        metrics.set_plugin(component.identity());
        Ok(PluginHost {
            component,
            scope,
            state,
            metrics,
            limits,
            config,
            store,
            exports,
            first_call_memory: None,
        })
    }

    /// Notes the instance's memory after a successful call (the first
    /// one's is what it needs to work).
    pub(crate) fn note_call_memory(&mut self) {
        if self.first_call_memory.is_none() {
            self.first_call_memory = Some(self.store.data().limits.memory().0);
        }
    }

    /// Whether the instance's linear memory has grown past three quarters
    /// of its limit since its first successful call: a guest that keeps
    /// memory it no longer uses (componentize-js keeps a copy of every
    /// batch it is given: ADR 0015, thirteenth step). Replacing it between
    /// batches ([`Self::reinstantiate`]) costs an instantiation; letting it
    /// reach the limit would fail the batch that crosses it, which is then
    /// retried piece by piece. An instance that needed that much from its
    /// first call on is left alone: a new one would too.
    pub(crate) fn grew_near_memory_limit(&self) -> bool {
        let (now, limit) = self.store.data().limits.memory();
        let near = limit / 4 * 3;
        self.first_call_memory
            .is_some_and(|first| first < near && now >= near)
    }

    /// Replaces the instance with a fresh one of the same component (after
    /// a fault poisoned it).
    pub(crate) fn reinstantiate(&mut self) -> Result<(), RuntimeError> {
        let (store, exports) = self.instantiate(&self.component)?;
        self.store = store;
        self.exports = exports;
        self.first_call_memory = None;
        Ok(())
    }

    /// A new instance of `component` for this operator (its scope, state,
    /// limits and config).
    fn instantiate(
        &self,
        component: &PluginComponent,
    ) -> Result<(Store<PluginState>, W::Exports), RuntimeError> {
        instantiate::<W>(
            component,
            &self.scope,
            &self.state,
            &self.metrics,
            &self.limits,
            &self.config,
        )
    }
}

impl<W: HostedWorld> PluginHost<W> {
    /// Swaps in `component` (a new version of the plugin): a fresh instance
    /// of it is created and initialised with the same scope, keyed state,
    /// limits and config; only then does it replace the running one, which
    /// is returned (to roll back to). On an error nothing changes.
    pub(crate) fn swap(
        &mut self,
        component: Arc<PluginComponent>,
    ) -> Result<Arc<PluginComponent>, RuntimeError> {
        let (store, exports) = self.instantiate(&component)?;
        self.store = store;
        self.exports = exports;
        self.first_call_memory = None;
        self.metrics.set_plugin(component.identity());
        Ok(std::mem::replace(&mut self.component, component))
    }
}

/// Creates a store and instance of `component` and calls its `init`, all
/// within the instantiation budget (`limits.init_deadline`).
fn instantiate<W: HostedWorld>(
    component: &PluginComponent,
    scope: &OperatorScope,
    state: &ScopedState,
    metrics: &Arc<OperatorMetrics>,
    limits: &PluginLimits,
    config: &[(String, String)],
) -> Result<(Store<PluginState>, W::Exports), RuntimeError> {
    W::check(component).map_err(|message| RuntimeError::Instantiate {
        plugin: component.label(),
        message,
    })?;
    let mut store = new_store(component, scope, state, metrics, limits);
    start_call(&mut store, limits.init_deadline);
    let instantiate_error =
        |error: wasmtime::Error, store: &Store<PluginState>| RuntimeError::Instantiate {
            plugin: component.label(),
            message: init_fault(error, store, limits).message,
        };
    let instance = component
        .pre
        .instance_pre
        .instantiate(&mut store)
        .map_err(|e| instantiate_error(e, &store))?;
    let exports =
        W::load(component, &mut store, &instance).map_err(|e| instantiate_error(e, &store))?;
    let init_error = |message: String| RuntimeError::Init {
        plugin: component.label(),
        message,
    };
    let initialised = W::init(&exports, &mut store, config);
    end_call(&mut store);
    match initialised {
        Ok(Ok(())) => Ok((store, exports)),
        Ok(Err(message)) => Err(init_error(message)),
        Err(error) => Err(init_error(init_fault(error, &store, limits).message)),
    }
}
