//! Swapping a running operator's plugin at a checkpoint barrier.
//!
//! A [`PluginSwap`] is shared by every worker instance of one operator
//! that runs a plugin (a transform, or a window's aggregate). A swap
//! request names the barrier at which it applies: a barrier not injected
//! yet, so that every worker swaps at the same barrier. Each worker holds a
//! [`SwapPort`]; when that barrier reaches it (every record before it
//! processed by the old version, none after it), it builds the new version
//! beside the old one with the operator's keyed state
//! ([`SwappablePlugin::swap_component`]) and reports. A worker whose new
//! version fails to start keeps the old one and says why.

use crate::runtime::{PluginComponent, PluginWorld, SwappablePlugin};
use crate::sync::lock;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What an operator's plugin does: which worlds may replace it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginRole {
    /// A transform (`transform`, `fast-transform` or `text-transform` world).
    Transform,
    /// A window's aggregate function (`aggregate` world).
    Aggregate,
}

impl PluginRole {
    /// Whether a component of `world` can take this role.
    pub fn accepts(self, world: PluginWorld) -> bool {
        match self {
            PluginRole::Transform => !world.is_aggregate(),
            PluginRole::Aggregate => world.is_aggregate(),
        }
    }
}

impl std::fmt::Display for PluginRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PluginRole::Transform => "a transform",
            PluginRole::Aggregate => "a window aggregate",
        })
    }
}

/// Why a swap was not done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PluginSwapError {
    /// No operator of that name runs a plugin.
    #[error("no operator `{0}` with a plugin")]
    NoSuchOperator(String),
    /// The new component implements a world the operator cannot run.
    #[error("`{operator}` runs {role} plugin; this component implements the {world} world")]
    WrongWorld {
        /// The operator.
        operator: String,
        /// What its plugin does.
        role: PluginRole,
        /// The new component's world.
        world: PluginWorld,
    },
    /// The requested hold on checkpoints is as long as the pipeline's
    /// exactly-once Kafka transactions may stay open.
    #[error(
        "a verify window of {hold:?} holds checkpoints longer than the Kafka sinks' transactions allow ({limit:?}: transaction_timeout_ms less an interval); shorten [deploy] verify_window_ms or raise transaction_timeout_ms"
    )]
    HoldTooLong {
        /// The hold asked for.
        hold: Duration,
        /// The longest hold allowed.
        limit: Duration,
    },
    /// Not every instance reached the swap barrier in time (the pipeline
    /// may be stalled or stopping); instances that did may have swapped.
    #[error("not every instance of `{operator}` reached barrier {barrier} within {timeout:?}")]
    Timeout {
        /// The operator.
        operator: String,
        /// The barrier the swap was due at.
        barrier: u64,
        /// How long it waited.
        timeout: Duration,
    },
}

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
    /// Which request (see [`PluginSwap::request`]).
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
pub struct PluginSwap {
    workers: usize,
    role: PluginRole,
    state: Mutex<SwitchState>,
    reported: Condvar,
}

impl PluginSwap {
    /// A swap for an operator whose plugin does `role`, running in
    /// `workers` instances.
    pub fn new(workers: usize, role: PluginRole) -> Arc<Self> {
        Arc::new(PluginSwap {
            workers: workers.max(1),
            role,
            state: Mutex::new(SwitchState::default()),
            reported: Condvar::new(),
        })
    }

    /// What the operator's plugin does.
    pub fn role(&self) -> PluginRole {
        self.role
    }

    fn state(&self) -> MutexGuard<'_, SwitchState> {
        lock(&self.state)
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

/// One worker's end of a [`PluginSwap`]: at each barrier it applies a
/// swap that is due there to the worker's plugin and reports.
pub struct SwapPort {
    swap: Arc<PluginSwap>,
    worker: usize,
    /// The last request this worker applied.
    applied: u64,
}

impl SwapPort {
    /// The end of `swap` for worker `worker`.
    pub fn new(swap: Arc<PluginSwap>, worker: usize) -> Self {
        SwapPort {
            swap,
            worker,
            applied: 0,
        }
    }

    /// At barrier `barrier` of operator `operator`: swaps `plugin` to the
    /// requested version if a swap is due here, and reports. Whether the
    /// plugin was swapped.
    pub(crate) fn apply_due(
        &mut self,
        operator: &str,
        barrier: u64,
        plugin: &mut dyn SwappablePlugin,
    ) -> bool {
        let Some((generation, component)) = self.swap.due(self.applied, barrier) else {
            return false;
        };
        let started = Instant::now();
        let result = plugin
            .swap_component(component)
            .map(|previous| previous.label())
            .map_err(|error| error.to_string());
        let pause = started.elapsed();
        let worker = self.worker;
        tracing::info!(%operator, worker, barrier, ?result, ?pause, "plugin swap");
        let swapped = result.is_ok();
        self.swap.report(SwapReport {
            generation,
            worker,
            barrier,
            result,
            pause,
        });
        self.applied = generation;
        swapped
    }
}

/// The counters a new plugin version is judged by (summed over an
/// operator's instances).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginCounters {
    /// Records handed to the operator.
    pub records_in: u64,
    /// Records dead-lettered because the plugin faulted on them.
    pub faulted_records: u64,
    /// Records dead-lettered for any reason.
    pub dead_letters: u64,
    /// Calls stopped at the CPU deadline.
    pub deadline_hits: u64,
}

impl PluginCounters {
    /// The counters of one operator instance.
    pub fn of(snapshot: &crate::metrics::OperatorSnapshot) -> Self {
        PluginCounters {
            records_in: snapshot.records_in,
            faulted_records: snapshot.faulted_records,
            dead_letters: snapshot.dead_letters,
            deadline_hits: snapshot.deadline_hits,
        }
    }

    /// What happened between `earlier` and these counters.
    pub fn since(self, earlier: PluginCounters) -> PluginCounters {
        PluginCounters {
            records_in: self.records_in.saturating_sub(earlier.records_in),
            faulted_records: self.faulted_records.saturating_sub(earlier.faulted_records),
            dead_letters: self.dead_letters.saturating_sub(earlier.dead_letters),
            deadline_hits: self.deadline_hits.saturating_sub(earlier.deadline_hits),
        }
    }
}

impl std::ops::Add for PluginCounters {
    type Output = PluginCounters;

    fn add(self, other: PluginCounters) -> PluginCounters {
        PluginCounters {
            records_in: self.records_in + other.records_in,
            faulted_records: self.faulted_records + other.faulted_records,
            dead_letters: self.dead_letters + other.dead_letters,
            deadline_hits: self.deadline_hits + other.deadline_hits,
        }
    }
}

/// How a new plugin version is judged after a swap: for `window` after
/// the swap barrier, its fault rate, dead-letter rate and deadline hits
/// are held against thresholds; a version over any of them is rolled back
/// (the `[deploy]` section of a pipeline file).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct VerifyPolicy {
    /// How long a new version is on probation, ms (0: no verification,
    /// the swap is kept at once).
    pub verify_window_ms: crate::bounded::DurationMs,
    /// Largest share of records the plugin may fault on (trap, deadline,
    /// memory limit, broken output).
    pub max_fault_rate: f64,
    /// Largest share of records that may be dead-lettered for any reason.
    pub max_dead_letter_rate: f64,
    /// Most calls that may hit the CPU deadline.
    pub max_deadline_hits: u64,
    /// Rates are judged before the window ends only once this many records
    /// went through the new version (so a first unlucky record does not
    /// decide).
    pub min_records: u64,
}

impl Default for VerifyPolicy {
    fn default() -> Self {
        VerifyPolicy {
            verify_window_ms: crate::bounded::Bounded::known(10_000),
            max_fault_rate: 0.001,
            max_dead_letter_rate: 0.05,
            max_deadline_hits: 10,
            min_records: 200,
        }
    }
}

/// The verdict on a version on probation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not decided yet: keep watching.
    Undecided,
    /// Keep it (the reason says over how many records).
    Keep(String),
    /// Roll it back, for this reason.
    RollBack(String),
}

impl VerifyPolicy {
    /// Judges `seen` (the new version's counters since the swap);
    /// `window_over` says whether the verify window has ended.
    pub fn judge(&self, seen: PluginCounters, window_over: bool) -> Verdict {
        if seen.deadline_hits > self.max_deadline_hits {
            return Verdict::RollBack(format!(
                "{} CPU deadline hits (at most {} allowed)",
                seen.deadline_hits, self.max_deadline_hits
            ));
        }
        let enough = seen.records_in >= self.min_records || (window_over && seen.records_in > 0);
        if enough {
            let rate = |n: u64| n as f64 / seen.records_in as f64;
            if rate(seen.faulted_records) > self.max_fault_rate {
                return Verdict::RollBack(format!(
                    "faulted on {} of {} records ({:.2} %, at most {:.2} % allowed)",
                    seen.faulted_records,
                    seen.records_in,
                    100.0 * rate(seen.faulted_records),
                    100.0 * self.max_fault_rate
                ));
            }
            if rate(seen.dead_letters) > self.max_dead_letter_rate {
                return Verdict::RollBack(format!(
                    "dead-lettered {} of {} records ({:.2} %, at most {:.2} % allowed)",
                    seen.dead_letters,
                    seen.records_in,
                    100.0 * rate(seen.dead_letters),
                    100.0 * self.max_dead_letter_rate
                ));
            }
        }
        if window_over {
            return Verdict::Keep(format!(
                "verified over {} records: {} faulted, {} dead letters, {} deadline hits",
                seen.records_in, seen.faulted_records, seen.dead_letters, seen.deadline_hits
            ));
        }
        Verdict::Undecided
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(records_in: u64, faulted_records: u64, dead_letters: u64) -> PluginCounters {
        PluginCounters {
            records_in,
            faulted_records,
            dead_letters,
            deadline_hits: 0,
        }
    }

    #[test]
    fn a_version_faulting_on_one_percent_is_rolled_back_once_enough_records_passed() {
        let policy = VerifyPolicy::default();
        assert_eq!(policy.judge(seen(100, 1, 1), false), Verdict::Undecided);
        let Verdict::RollBack(reason) = policy.judge(seen(1_000, 10, 10), false) else {
            panic!("1 % faults must roll back");
        };
        assert!(reason.contains("10 of 1000"), "{reason}");
    }

    #[test]
    fn a_healthy_version_is_kept_when_the_window_ends_and_not_before() {
        let policy = VerifyPolicy::default();
        assert_eq!(policy.judge(seen(50_000, 0, 2), false), Verdict::Undecided);
        assert!(matches!(
            policy.judge(seen(50_000, 0, 2), true),
            Verdict::Keep(_)
        ));
        assert!(matches!(
            policy.judge(seen(0, 0, 0), true),
            Verdict::Keep(_)
        ));
    }

    #[test]
    fn deadline_hits_and_dead_letters_have_their_own_limits() {
        let policy = VerifyPolicy::default();
        let hits = PluginCounters {
            deadline_hits: 11,
            ..seen(10, 0, 0)
        };
        assert!(matches!(policy.judge(hits, false), Verdict::RollBack(_)));
        assert!(matches!(
            policy.judge(seen(1_000, 0, 60), false),
            Verdict::RollBack(_)
        ));
        assert!(matches!(
            policy.judge(seen(1_000, 0, 40), true),
            Verdict::Keep(_)
        ));
    }

    #[test]
    fn roles_accept_only_their_worlds() {
        assert!(PluginRole::Transform.accepts(PluginWorld::FastTransform));
        assert!(PluginRole::Transform.accepts(PluginWorld::FastProjectedTransform));
        assert!(!PluginRole::Aggregate.accepts(PluginWorld::FastProjectedTransform));
        assert!(PluginRole::Transform.accepts(PluginWorld::Transform));
        assert!(PluginRole::Transform.accepts(PluginWorld::TextTransform));
        assert!(!PluginRole::Aggregate.accepts(PluginWorld::TextTransform));
        assert!(PluginRole::Transform.accepts(PluginWorld::ProjectedTransform));
        assert!(!PluginRole::Aggregate.accepts(PluginWorld::ProjectedTransform));
        assert!(!PluginRole::Transform.accepts(PluginWorld::Aggregate));
        assert!(PluginRole::Aggregate.accepts(PluginWorld::Aggregate));
        assert!(PluginRole::Aggregate.accepts(PluginWorld::FastAggregate));
        assert!(!PluginRole::Transform.accepts(PluginWorld::FastAggregate));
        assert!(PluginRole::Aggregate.accepts(PluginWorld::FastProjectedAggregate));
        assert!(!PluginRole::Transform.accepts(PluginWorld::FastProjectedAggregate));
        assert!(!PluginRole::Aggregate.accepts(PluginWorld::FastTransform));
    }
}
