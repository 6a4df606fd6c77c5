//! Duration histograms: plugin call latency, record latency, checkpoint
//! duration.
//!
//! A thin wrapper over the `prometheus` crate's lock-free histogram, with
//! one bucket layout for every duration Sluice measures (1 µs to 30 s, three
//! buckets a decade), so that a dashboard can read quantiles of any of them
//! the same way, and a [`HistogramSnapshot`] that the JSON status and the
//! exposition share.

use prometheus::core::Metric as _;
use std::time::Duration;

/// Upper bounds of the buckets, seconds: 1, 2.5 and 5 of each decade from
/// 1 µs to 5 s, then 10 s and 30 s.
pub(crate) const BUCKETS_SECONDS: [f64; 23] = [
    0.000_001,
    0.000_002_5,
    0.000_005,
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
];

/// A histogram of durations, safe to observe from any thread.
#[derive(Debug, Clone)]
pub struct DurationHistogram {
    inner: prometheus::Histogram,
}

impl Default for DurationHistogram {
    fn default() -> Self {
        let options = prometheus::HistogramOpts::new("duration_seconds", "durations")
            .buckets(BUCKETS_SECONDS.to_vec());
        // The options are constants that the library accepts (a valid
        // name, increasing buckets); `with_opts` cannot refuse them.
        let inner = prometheus::Histogram::with_opts(options)
            .unwrap_or_else(|error| unreachable!("constant histogram options: {error}"));
        DurationHistogram { inner }
    }
}

impl DurationHistogram {
    /// Records one duration.
    pub fn observe(&self, duration: Duration) {
        self.inner.observe(duration.as_secs_f64());
    }

    /// A copy of the counts.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let metric = self.inner.metric();
        let histogram = metric.get_histogram();
        HistogramSnapshot {
            count: histogram.get_sample_count(),
            sum_seconds: histogram.get_sample_sum(),
            cumulative: histogram
                .get_bucket()
                .iter()
                .map(|bucket| bucket.cumulative_count())
                .collect(),
        }
    }
}

/// The counts of a [`DurationHistogram`] at one moment.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct HistogramSnapshot {
    /// Observations.
    pub count: u64,
    /// Their sum, seconds.
    pub sum_seconds: f64,
    /// Observations at or below each of `BUCKETS_SECONDS`.
    pub cumulative: Vec<u64>,
}

impl HistogramSnapshot {
    /// What was observed after `earlier` (a snapshot of the same
    /// histogram): for quantiles over the last interval.
    pub fn since(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        HistogramSnapshot {
            count: self.count.saturating_sub(earlier.count),
            sum_seconds: (self.sum_seconds - earlier.sum_seconds).max(0.0),
            cumulative: self
                .cumulative
                .iter()
                .enumerate()
                .map(|(i, n)| n.saturating_sub(earlier.cumulative.get(i).copied().unwrap_or(0)))
                .collect(),
        }
    }

    /// The `q` quantile (0..=1), seconds, interpolated linearly inside its
    /// bucket as Prometheus' `histogram_quantile` does; `None` without
    /// observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * self.count as f64;
        let mut below = 0u64;
        let mut lower = 0.0;
        for (i, &cumulative) in self.cumulative.iter().enumerate() {
            let upper = BUCKETS_SECONDS.get(i).copied().unwrap_or(f64::INFINITY);
            if cumulative as f64 >= rank && cumulative > below {
                let inside = (rank - below as f64) / (cumulative - below) as f64;
                return Some(lower + (upper - lower) * inside.clamp(0.0, 1.0));
            }
            below = cumulative;
            lower = upper;
        }
        // Above the last bucket: its bound is the best answer there is.
        BUCKETS_SECONDS.last().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_fall_in_the_bucket_of_their_rank() {
        let histogram = DurationHistogram::default();
        for _ in 0..90 {
            histogram.observe(Duration::from_micros(700)); // (0.5 ms, 1 ms]
        }
        for _ in 0..10 {
            histogram.observe(Duration::from_millis(40)); // (25 ms, 50 ms]
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, 100);
        let p50 = snapshot.quantile(0.5).expect("p50");
        assert!((0.000_5..=0.001).contains(&p50), "{p50}");
        let p99 = snapshot.quantile(0.99).expect("p99");
        assert!((0.025..=0.05).contains(&p99), "{p99}");
        assert!((snapshot.sum_seconds - (0.063 + 0.4)).abs() < 1e-9);
        assert_eq!(HistogramSnapshot::default().quantile(0.5), None);
    }

    #[test]
    fn since_counts_only_what_came_after() {
        let histogram = DurationHistogram::default();
        histogram.observe(Duration::from_secs(2));
        let earlier = histogram.snapshot();
        histogram.observe(Duration::from_micros(3));
        let later = histogram.snapshot().since(&earlier);
        assert_eq!(later.count, 1);
        let p50 = later.quantile(0.5).expect("p50");
        assert!((0.000_002_5..=0.000_005).contains(&p50), "{p50}");
    }
}
