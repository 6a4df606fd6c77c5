//! What stops a plugin call: a CPU budget measured in the calling thread's
//! CPU time, and a memory limit — each recorded where it fires, so that a
//! fault is classified by what happened, never by matching error text.
//!
//! Why CPU time (ADR 0009): the engine's epoch advances every tick of wall
//! time, and a deadline counted in ticks punishes a plugin for the
//! machine's load — on two cores shared with a build, healthy batches hit
//! it. Epoch interruption stays (it is what reaches into a running loop),
//! but when the tick count runs out, the epoch callback reads the thread's
//! CPU clock (`CLOCK_THREAD_CPUTIME_ID`) and extends the deadline by what
//! is left of the budget; only a call that has really used its CPU time is
//! interrupted. The check costs one `clock_gettime` per expiry, and a call
//! that ends in time costs nothing at all.

use super::EpochTicker;
use super::cpu_share::CpuShare;
use std::sync::Arc;
use std::time::Duration;
use wasmtime::{ResourceLimiter, UpdateDeadline};

/// The CPU time the calling thread has used.
pub(crate) fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write to; the clock id is a
    // constant every Linux kernel supports.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if status != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Which limit stopped a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// The call used its CPU budget.
    CpuBudget,
    /// The plugin asked for more memory than its limit.
    MemoryLimit,
}

/// The limits of one plugin store, checked by wasmtime's epoch callback and
/// resource limiter.
#[derive(Debug)]
pub(crate) struct CallLimits {
    /// Linear memory the instance may grow to.
    memory_bytes: usize,
    /// Length of an epoch tick: how often the engine checks in.
    tick: Duration,
    /// CPU time the current call may use.
    budget: Duration,
    /// The thread's CPU time when the current call started.
    started: Duration,
    /// When the current call started (wall time, for its latency).
    wall_started: std::time::Instant,
    /// Linear memory the instance has grown to, bytes.
    memory_now: usize,
    /// What stopped the current call, if a limit did.
    pub(crate) stopped: Option<Stopped>,
    /// The tenant's CPU share its calls are charged to.
    cpu_share: Option<std::sync::Arc<CpuShare>>,
    /// Advances the epoch while a call runs.
    ticker: Arc<EpochTicker>,
    /// A call started and has not ended (counted by `ticker`). A call that
    /// traps may never be ended: the next start or the drop ends it.
    in_call: bool,
}

impl CallLimits {
    /// Limits of a store whose memory may grow to `memory_bytes`, whose
    /// calls `ticker` times in ticks of `tick`.
    pub(crate) fn new(memory_bytes: usize, tick: Duration, ticker: Arc<EpochTicker>) -> Self {
        CallLimits {
            ticker,
            in_call: false,
            memory_bytes,
            tick,
            budget: Duration::ZERO,
            started: Duration::ZERO,
            wall_started: std::time::Instant::now(),
            memory_now: 0,
            stopped: None,
            cpu_share: None,
        }
    }

    /// Linear memory the instance has grown to, and its limit, in bytes.
    pub(crate) fn memory(&self) -> (usize, usize) {
        (self.memory_now, self.memory_bytes)
    }

    /// Charges this instance's calls to `share` (its tenant's).
    pub(crate) fn with_cpu_share(mut self, share: Option<std::sync::Arc<CpuShare>>) -> Self {
        self.cpu_share = share;
        self
    }

    /// Waits until the tenant is within its CPU share (if it has one);
    /// how long it waited.
    pub(crate) fn wait_turn(&self) -> Duration {
        self.cpu_share
            .as_ref()
            .map_or(Duration::ZERO, |share| share.wait_turn())
    }

    /// Ends a call: charges the CPU time it used to the tenant's share.
    /// Answers how long the call took (wall time) and the memory the
    /// instance has grown to.
    pub(crate) fn end_call(&mut self) -> (Duration, usize) {
        if std::mem::take(&mut self.in_call) {
            self.ticker.call_ended();
        }
        if let Some(share) = &self.cpu_share {
            share.charge(thread_cpu_time().saturating_sub(self.started));
        }
        (self.wall_started.elapsed(), self.memory_now)
    }

    /// Starts a call that may use `budget` of CPU time; returns the epoch
    /// deadline to set, in ticks (wall time is never less than CPU time,
    /// so the first check cannot come too early).
    pub(crate) fn start_call(&mut self, budget: Duration) -> u64 {
        if !std::mem::replace(&mut self.in_call, true) {
            self.ticker.call_started();
        }
        self.budget = budget;
        self.started = thread_cpu_time();
        self.wall_started = std::time::Instant::now();
        self.stopped = None;
        self.ticks(budget)
    }

    /// The epoch callback: interrupt if the call used its budget, else
    /// check again when it could have.
    pub(crate) fn on_epoch_deadline(&mut self) -> UpdateDeadline {
        let used = thread_cpu_time().saturating_sub(self.started);
        match self.budget.checked_sub(used) {
            Some(left) if !left.is_zero() => UpdateDeadline::Continue(self.ticks(left)),
            _ => {
                self.stopped = Some(Stopped::CpuBudget);
                UpdateDeadline::Interrupt
            }
        }
    }

    fn ticks(&self, time: Duration) -> u64 {
        let ticks = time.as_nanos() / self.tick.as_nanos().max(1);
        u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
    }
}

impl Drop for CallLimits {
    /// A call that never ended (its store dropped after a trap) stops
    /// counting.
    fn drop(&mut self) {
        if self.in_call {
            self.ticker.call_ended();
        }
    }
}

/// The error a memory grow past the limit traps with (found again by type
/// when the fault is classified).
#[derive(Debug, thiserror::Error)]
#[error("plugin asked for {desired} bytes of memory, over its limit of {limit}")]
pub(crate) struct MemoryLimitExceeded {
    desired: usize,
    limit: usize,
}

impl ResourceLimiter for CallLimits {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.stopped = Some(Stopped::MemoryLimit);
            return Err(MemoryLimitExceeded {
                desired,
                limit: self.memory_bytes,
            }
            .into());
        }
        self.memory_now = desired;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables are bounded by the pooling allocator's slots.
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ticker_counts_a_call_once_until_it_ends_or_its_store_goes() {
        let ticker = Arc::new(EpochTicker::default());
        let calls = || ticker.calls.load(std::sync::atomic::Ordering::SeqCst);
        let mut limits = CallLimits::new(1 << 20, Duration::from_millis(1), ticker.clone());
        assert_eq!(calls(), 0);
        limits.start_call(Duration::from_millis(10));
        assert_eq!(calls(), 1);
        // A call that trapped was never ended: the next start replaces it.
        limits.start_call(Duration::from_millis(10));
        assert_eq!(calls(), 1);
        limits.end_call();
        limits.end_call();
        assert_eq!(calls(), 0);
        let mut other = CallLimits::new(1 << 20, Duration::from_millis(1), ticker.clone());
        other.start_call(Duration::from_millis(10));
        limits.start_call(Duration::from_millis(10));
        assert_eq!(calls(), 2);
        drop(other);
        drop(limits);
        assert_eq!(calls(), 0);
    }

    #[test]
    fn the_budget_counts_cpu_time_not_waiting() {
        let mut limits = CallLimits::new(
            1 << 20,
            Duration::from_millis(1),
            Arc::new(EpochTicker::default()),
        );
        assert_eq!(limits.start_call(Duration::from_millis(50)), 50);
        // Waiting uses no CPU time: the deadline is extended.
        std::thread::sleep(Duration::from_millis(60));
        assert!(matches!(
            limits.on_epoch_deadline(),
            UpdateDeadline::Continue(_)
        ));
        assert_eq!(limits.stopped, None);
        // Spinning does.
        let spin = std::time::Instant::now();
        while thread_cpu_time().saturating_sub(limits.started) < Duration::from_millis(55) {
            assert!(spin.elapsed() < Duration::from_secs(60), "no CPU time");
        }
        assert!(matches!(
            limits.on_epoch_deadline(),
            UpdateDeadline::Interrupt
        ));
        assert_eq!(limits.stopped, Some(Stopped::CpuBudget));
    }

    #[test]
    fn growing_past_the_memory_limit_is_recorded() {
        let mut limits = CallLimits::new(
            1 << 20,
            Duration::from_millis(1),
            Arc::new(EpochTicker::default()),
        );
        assert!(limits.memory_growing(0, 1 << 20, None).is_ok_and(|ok| ok));
        let error = limits
            .memory_growing(1 << 20, 2 << 20, None)
            .expect_err("over the limit");
        assert!(error.downcast_ref::<MemoryLimitExceeded>().is_some());
        assert_eq!(limits.stopped, Some(Stopped::MemoryLimit));
    }
}
