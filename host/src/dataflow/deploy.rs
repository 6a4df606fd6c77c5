//! Swapping a running operator's plugin at a checkpoint barrier.
//!
//! A [`PluginSwitch`] is shared by every worker instance of one transform
//! operator. A swap request names the barrier at which it applies: a
//! barrier not injected yet, so that every worker swaps at the same
//! barrier. Each worker, when that barrier reaches it (every record before
//! it processed by the old version, none after it), builds the new version
//! beside the old one with the operator's keyed state
//! ([`PluginInstance::swap_component`](crate::runtime::PluginInstance::swap_component))
//! and reports. A worker whose new version fails to start keeps the old
//! one and says why.

use crate::runtime::PluginComponent;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A request to run `component` from barrier `at_barrier` on.
#[derive(Clone)]
struct SwapRequest {
    generation: u64,
    component: Arc<PluginComponent>,
    at_barrier: u64,
}

/// What one worker did with a swap request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapReport {
    /// Which request (see [`PluginSwitch::request`]).
    pub generation: u64,
    /// The worker.
    pub worker: usize,
    /// The barrier it swapped at.
    pub barrier: u64,
    /// Its previous plugin's label, or why the swap failed.
    pub result: Result<String, String>,
    /// When the swap took, from the barrier reaching the worker to the new
    /// version ready (the pause of this worker).
    pub pause: Duration,
}

#[derive(Default)]
struct SwitchState {
    request: Option<SwapRequest>,
    generation: u64,
    reports: Vec<SwapReport>,
}

/// The swap channel of one operator (see the module docs).
pub struct PluginSwitch {
    workers: usize,
    state: Mutex<SwitchState>,
    reported: Condvar,
}

impl PluginSwitch {
    /// A switch for an operator running in `workers` instances.
    pub fn new(workers: usize) -> Arc<Self> {
        Arc::new(PluginSwitch {
            workers: workers.max(1),
            state: Mutex::new(SwitchState::default()),
            reported: Condvar::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, SwitchState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks every worker to run `component` from barrier `at_barrier` on
    /// (one the source has not injected yet); the request's generation.
    pub fn request(&self, component: Arc<PluginComponent>, at_barrier: u64) -> u64 {
        let mut state = self.state();
        state.generation += 1;
        let generation = state.generation;
        state.request = Some(SwapRequest {
            generation,
            component,
            at_barrier,
        });
        generation
    }

    /// For a worker at `barrier` that has applied requests up to
    /// `applied`: the request to apply now, if any.
    pub(crate) fn due(&self, applied: u64, barrier: u64) -> Option<(u64, Arc<PluginComponent>)> {
        let state = self.state();
        let request = state.request.as_ref()?;
        (request.generation > applied && barrier >= request.at_barrier)
            .then(|| (request.generation, request.component.clone()))
    }

    /// A worker's report.
    pub(crate) fn report(&self, report: SwapReport) {
        self.state().reports.push(report);
        self.reported.notify_all();
    }

    /// Waits until every worker reported on request `generation` (or
    /// `timeout` passed: `None`); their reports, by worker.
    pub fn wait(&self, generation: u64, timeout: Duration) -> Option<Vec<SwapReport>> {
        let deadline = Instant::now() + timeout;
        let mut state = self.state();
        loop {
            let reports: Vec<SwapReport> = state
                .reports
                .iter()
                .filter(|r| r.generation == generation)
                .cloned()
                .collect();
            if reports.len() >= self.workers {
                let mut reports = reports;
                reports.sort_by_key(|r| r.worker);
                return Some(reports);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            state = self
                .reported
                .wait_timeout(state, deadline - now)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}
