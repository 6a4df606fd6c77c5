//! The window operator's timers: set when a window gets state, removed
//! when it goes, found again at restore (ADR 0022: they are keys of the
//! store, see `crate::state::timers`).

use super::WindowOperator;
use crate::state::StateError;
use crate::window::Window;

/// What a window's timer does when the watermark passes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum TimerKind {
    /// The window emits its result.
    Fire,
    /// The window's state is dropped (its allowed lateness is over).
    Cleanup,
}

impl crate::state::timers::TimerKind for TimerKind {
    const ALL: &'static [Self] = &[TimerKind::Fire, TimerKind::Cleanup];

    fn tag(self) -> u8 {
        match self {
            TimerKind::Fire => 0,
            TimerKind::Cleanup => 1,
        }
    }
}

/// The timers of a window operator.
pub(super) type WindowTimers = crate::state::timers::Timers<TimerKind, Window>;

impl WindowOperator {
    /// Finds the timers the store holds for this instance's key groups
    /// (left there by an earlier run on the same state directory): the
    /// earliest of each key group, one seek each. Window states are read
    /// when first needed.
    pub(super) fn restore(&mut self) -> Result<(), StateError> {
        let queues = self.timers.restore()?;
        if queues > 0 {
            self.metrics
                .add_plugin_counter("timer_queues_restored", queues as u64);
        } else if self.states.store().holds_any_of(self.options.key_groups)? {
            // Windows without timers: state of a version that kept timers
            // in memory. Their timers are set once, from a scan.
            let windows = self.states.stored_windows(self.options.key_groups)?;
            tracing::info!(
                operator = %self.options.name,
                windows = windows.len(),
                "window state without timers (written by an earlier version): setting its timers"
            );
            for (key, window, emitted) in &windows {
                match emitted {
                    0 => self.set_timers(key, *window),
                    // Fired already: only its cleanup is due.
                    _ => {
                        let cleanup = self.cleanup_time(window);
                        self.timers.set(TimerKind::Cleanup, key, window, cleanup);
                    }
                }
            }
            self.timers.flush()?;
            self.metrics
                .add_plugin_counter("windows_given_timers", windows.len() as u64);
        }
        Ok(())
    }

    /// Sets the timers of `key`'s `window` (every window with state has
    /// a cleanup timer). Setting them again is harmless: a timer is a key
    /// of the store.
    pub(super) fn set_timers(&mut self, key: &[u8], window: Window) {
        // A window already behind the watermark is fired by its records as
        // they come (see `add_to_window`), not by a timer.
        let fires = window.max_timestamp() > self.watermark;
        if fires {
            self.timers
                .set(TimerKind::Fire, key, &window, window.max_timestamp());
        }
        // Without allowed lateness a window is dropped as it fires: its
        // fire timer is its cleanup timer too (one timer write, not two).
        if !fires || self.options.allowed_lateness > 0 {
            let cleanup = self.cleanup_time(&window);
            self.timers.set(TimerKind::Cleanup, key, &window, cleanup);
        }
    }

    /// Removes the timers of `key`'s `window`.
    pub(super) fn forget_timers(&mut self, key: &[u8], window: Window) {
        self.timers
            .remove(TimerKind::Fire, key, &window, window.max_timestamp());
        let cleanup = self.cleanup_time(&window);
        self.timers
            .remove(TimerKind::Cleanup, key, &window, cleanup);
    }
}
