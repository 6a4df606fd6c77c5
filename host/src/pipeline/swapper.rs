//! The [`PluginSwapper`]: a running pipeline's plugin hot swaps, from outside
//! its threads.

use crate::checkpoint::CheckpointCoordinator;
use crate::dataflow::swap::{PluginSwap, PluginSwapError, SwapReport};
use crate::metrics::PipelineMetrics;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Swaps the plugins of a running pipeline's operators at a checkpoint
/// barrier (see [`crate::dataflow::swap`]), optionally holding later
/// checkpoints while the new version is on probation.
#[derive(Clone)]
pub struct PluginSwapper {
    pub(super) swaps: BTreeMap<String, Arc<PluginSwap>>,
    pub(super) metrics: Arc<PipelineMetrics>,
    pub(super) checkpoints: Option<Arc<CheckpointCoordinator>>,
    /// How long checkpoints may be held (exactly-once Kafka transactions
    /// stay open meanwhile).
    pub(super) hold_limit: Option<Duration>,
}

impl PluginSwapper {
    /// Runs `component` in every instance of `operator` from a barrier the
    /// source has not injected yet, and waits up to `timeout` for every
    /// instance to report; their reports. With `hold_for` (and checkpoints
    /// on), no checkpoint after the swap barrier is taken until
    /// [`PluginSwapper::release`], which the caller promises within `hold_for`:
    /// the run can then be abandoned and restored from the swap barrier's
    /// checkpoint, with nothing of the new version committed. A hold as
    /// long as an exactly-once Kafka sink's transaction timeout (less an
    /// interval) is refused: the broker would abort the transaction.
    pub fn swap(
        &self,
        operator: &str,
        component: Arc<crate::runtime::PluginComponent>,
        timeout: Duration,
        hold_for: Option<Duration>,
    ) -> Result<Vec<SwapReport>, PluginSwapError> {
        let swap = self
            .swaps
            .get(operator)
            .ok_or_else(|| PluginSwapError::NoSuchOperator(operator.to_string()))?;
        if !swap.role().accepts(component.world) {
            return Err(PluginSwapError::WrongWorld {
                operator: operator.to_string(),
                role: swap.role(),
                world: component.world,
            });
        }
        if let (Some(hold), Some(limit)) = (hold_for, self.hold_limit)
            && hold >= limit
        {
            return Err(PluginSwapError::HoldTooLong { hold, limit });
        }
        // Two ahead of the last injected barrier: the next one may be on
        // its way already; this one is certainly not.
        let at = self
            .metrics
            .last_barrier_id
            .load(std::sync::atomic::Ordering::SeqCst)
            + 2;
        if let (Some(_), Some(checkpoints)) = (hold_for, &self.checkpoints) {
            checkpoints.hold_after(at);
        }
        let generation = swap.request(component, at);
        swap.wait(generation, timeout)
            .ok_or_else(|| PluginSwapError::Timeout {
                operator: operator.to_string(),
                barrier: at,
                timeout,
            })
    }

    /// Ends a hold on checkpoints taken by [`PluginSwapper::swap`].
    pub fn release(&self) {
        if let Some(checkpoints) = &self.checkpoints {
            checkpoints.release();
        }
    }

    /// The counters of `operator`, summed over its instances.
    pub fn operator_counters(&self, operator: &str) -> crate::dataflow::swap::PluginCounters {
        let snapshot = self.metrics.snapshot();
        snapshot
            .operators
            .iter()
            .filter(|o| {
                o.name == operator
                    || o.name
                        .strip_prefix(operator)
                        .is_some_and(|rest| rest.starts_with('#'))
            })
            .map(crate::dataflow::swap::PluginCounters::of)
            .fold(Default::default(), |sum, counters| sum + counters)
    }
}
