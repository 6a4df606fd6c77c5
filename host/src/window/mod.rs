//! Event-time windows: tumbling, sliding (hopping) and session windows,
//! aggregated per key, fired by the watermark, with allowed lateness.
//!
//! * [`WindowSpec`] assigns a record's event time to windows.
//! * `aggregate`: how a window's records become its result — built-in
//!   count / sum / min / max / avg over a field, or a plugin's
//!   create / add / merge / finish over an accumulator the host stores.
//! * `states` keeps one accumulator per key and window in the operator's
//!   store (RocksDB), with recently used keys' windows cached in memory.
//! * [`WindowOutput`]: what a window emits where that is not a
//!   [`WindowResult`] (a SQL query's row).
//! * [`WindowOperator`] assigns records to windows, fires a window when the
//!   watermark passes its end, keeps it `allowed_lateness` longer so that
//!   each late record within it re-fires an updated result (marked
//!   `update: true` with a sequence number), and sends records later than
//!   that to the late output with `late_arrival = true`.
//!
//! Times are milliseconds since the Unix epoch. A window `[start, end)`
//! holds event times `start <= t < end`; its results carry event time
//! `end - 1` (Flink's `maxTimestamp`).

pub(crate) mod aggregate;
mod builtin;
pub(crate) mod key;
mod operator;
mod output;
mod plugin_aggregate;
mod states;
mod window_map;

/// How the state backend folds the merge operands of windows kept in the
/// store (built-in aggregates; see `crate::state::merge`): given to every
/// state backend a pipeline opens.
pub const MERGE_FOLDS: crate::state::MergeFolds = crate::state::MergeFolds {
    window_state: states::fold_window_state,
    window_accumulators: builtin::fold_accumulators,
};

pub use crate::dataflow::{LATE_ARRIVAL_HEADER, LateOutput};
pub use crate::metrics::{RECORDS_PROJECTED_AHEAD_COUNTER, RECORDS_READ_AHEAD_COUNTER};
pub use aggregate::{AccumulatorEncoding, AggregateError, Aggregator, GroupAdd};
pub use builtin::{BuiltinAggregate, BuiltinFunction};
pub use operator::{
    DEFAULT_MINI_BATCH_RECORDS, DEFAULT_WINDOW_CACHE_BYTES, WindowOperator, WindowOperatorOptions,
    WindowResult,
};
pub use output::WindowOutput;

/// A window `[start, end)` of event time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    /// First event time in the window.
    pub start: i64,
    /// One past the last event time in the window.
    pub end: i64,
}

/// A window is what of a key's state its timers are for: stored as its
/// start and end, big-endian (so that windows sort as their bytes do).
impl crate::state::timers::TimerNamespace for Window {
    fn to_bytes(&self) -> [u8; 16] {
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&self.start.to_be_bytes());
        bytes[8..].copy_from_slice(&self.end.to_be_bytes());
        bytes
    }

    fn from_bytes(bytes: [u8; 16]) -> Self {
        let (start, end) = bytes.split_at(8);
        Window {
            start: i64::from_be_bytes(start.try_into().unwrap_or_default()),
            end: i64::from_be_bytes(end.try_into().unwrap_or_default()),
        }
    }
}

impl Window {
    /// The latest event time in the window: the watermark must pass it for
    /// the window to fire.
    pub fn max_timestamp(&self) -> i64 {
        self.end.saturating_sub(1)
    }

    /// Whether two windows overlap or touch (sessions merge then).
    fn intersects(&self, other: &Window) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    /// The smallest window covering both.
    fn cover(&self, other: &Window) -> Window {
        Window {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// How event time is cut into windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSpec {
    /// Fixed-size, non-overlapping windows aligned to the epoch.
    Tumbling {
        /// Window length, ms.
        size: i64,
    },
    /// Fixed-size windows starting every `slide` ms (a record is in
    /// `size / slide` windows).
    Sliding {
        /// Window length, ms.
        size: i64,
        /// Distance between window starts, ms.
        slide: i64,
    },
    /// Per key, activity separated by gaps of at least `gap` ms.
    Session {
        /// Inactivity that closes a session, ms.
        gap: i64,
    },
    /// Within each epoch-aligned span of `size` ms, one window from its
    /// start to every multiple of `step` (SQL's `CUMULATE`: running totals
    /// that fire every `step`); `size` is a multiple of `step`.
    Cumulative {
        /// Length of the largest window, ms.
        size: i64,
        /// Distance between window ends, ms.
        step: i64,
    },
}

impl WindowSpec {
    /// The windows a record with event time `t` belongs to (for sessions:
    /// its own `[t, t + gap)`, merged later with the key's other sessions).
    pub fn assign(&self, t: i64) -> Vec<Window> {
        // Saturating throughout: with event times checked against
        // `time::MAX_EVENT_TIME` nothing here can overflow, but a window
        // must never wrap around even if an unchecked time slips in.
        match *self {
            WindowSpec::Tumbling { size } => {
                let start = t.saturating_sub(t.rem_euclid(size));
                vec![Window {
                    start,
                    end: start.saturating_add(size),
                }]
            }
            WindowSpec::Sliding { size, slide } => {
                let last_start = t.saturating_sub(t.rem_euclid(slide));
                let mut windows = Vec::with_capacity((size / slide) as usize + 1);
                let mut start = last_start;
                while start > t.saturating_sub(size) {
                    windows.push(Window {
                        start,
                        end: start.saturating_add(size),
                    });
                    match start.checked_sub(slide) {
                        Some(earlier) => start = earlier,
                        None => break,
                    }
                }
                windows
            }
            WindowSpec::Session { gap } => vec![Window {
                start: t,
                end: t.saturating_add(gap),
            }],
            WindowSpec::Cumulative { size, step } => {
                let start = t.saturating_sub(t.rem_euclid(size));
                let last_end = start.saturating_add(size);
                // The first end past `t`, then every `step` up to the span's.
                let mut end = start.saturating_add((t - start) / step * step + step);
                let mut windows = Vec::with_capacity(((last_end - end) / step) as usize + 1);
                while end <= last_end {
                    windows.push(Window { start, end });
                    match end.checked_add(step) {
                        Some(next) if next > end => end = next,
                        _ => break,
                    }
                }
                windows
            }
        }
    }

    /// Whether windows of this kind merge (sessions).
    pub fn is_merging(&self) -> bool {
        matches!(self, WindowSpec::Session { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_at_the_limits_of_event_time_never_wrap_around() {
        use crate::time::{MAX_EVENT_TIME, MIN_EVENT_TIME};
        let specs = [
            WindowSpec::Tumbling { size: 1000 },
            WindowSpec::Sliding {
                size: 3000,
                slide: 1000,
            },
            WindowSpec::Session { gap: 500 },
            WindowSpec::Cumulative {
                size: 3000,
                step: 1000,
            },
        ];
        for spec in specs {
            for t in [MIN_EVENT_TIME, MAX_EVENT_TIME, i64::MIN, i64::MAX, 0] {
                let windows = spec.assign(t);
                let checked = crate::time::check_event_time(t).is_ok();
                assert!(!checked || !windows.is_empty(), "{spec:?} at {t}");
                for window in windows {
                    assert!(window.start <= window.end, "{spec:?} at {t}: {window:?}");
                    if checked {
                        assert!(
                            window.start <= t && t <= window.max_timestamp(),
                            "{spec:?} at {t}: {window:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn tumbling_and_sliding_assignment() {
        let tumbling = WindowSpec::Tumbling { size: 10 };
        assert_eq!(tumbling.assign(25), vec![Window { start: 20, end: 30 }]);
        assert_eq!(tumbling.assign(-1), vec![Window { start: -10, end: 0 }]);
        let sliding = WindowSpec::Sliding { size: 10, slide: 5 };
        assert_eq!(
            sliding.assign(12),
            vec![Window { start: 10, end: 20 }, Window { start: 5, end: 15 }]
        );
        for t in -20..40 {
            for w in sliding.assign(t) {
                assert!(w.start <= t && t < w.end);
            }
            assert_eq!(sliding.assign(t).len(), 2);
        }
    }

    #[test]
    fn cumulative_windows_share_a_start_and_end_every_step_after_the_time() {
        let spec = WindowSpec::Cumulative { size: 30, step: 10 };
        let windows = |start, ends: &[i64]| -> Vec<Window> {
            ends.iter().map(|&end| Window { start, end }).collect()
        };
        assert_eq!(spec.assign(0), windows(0, &[10, 20, 30]));
        assert_eq!(spec.assign(15), windows(0, &[20, 30]));
        assert_eq!(spec.assign(29), windows(0, &[30]));
        assert_eq!(spec.assign(30), windows(30, &[40, 50, 60]));
        assert_eq!(spec.assign(-1), windows(-30, &[0]));
        for t in -100..100 {
            for w in spec.assign(t) {
                assert!(w.start <= t && t < w.end && (w.end - w.start) % 10 == 0);
            }
        }
    }
}
