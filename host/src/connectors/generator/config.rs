//! `[source.generator]`: what the generator makes, how many and how fast.

use serde::Deserialize;

use super::Profile;
use crate::bounded::{Bounded, DurationMs};

/// `[source.generator]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorConfig {
    /// `bronze`, `nexmark` or `payload`.
    #[serde(default)]
    pub profile: Profile,
    /// Records to generate; absent for unbounded.
    pub count: Option<u64>,
    /// Records per second; absent for as fast as possible.
    pub rate: Option<u64>,
    /// Random seed.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Value size of the `payload` profile.
    #[serde(default = "default_value_bytes")]
    pub value_bytes: Bounded<usize, 0, { 16 << 20 }>,
    /// Fraction of invalid `bronze` events.
    #[serde(default = "default_ratio")]
    pub invalid_ratio: f64,
    /// Fraction of duplicated `bronze` events.
    #[serde(default = "default_ratio")]
    pub duplicate_ratio: f64,
    /// Event-time rate: records per second of event time.
    #[serde(default = "default_events_per_second")]
    pub events_per_second: u64,
    /// Largest event-time disorder, ms.
    #[serde(default)]
    pub max_disorder_ms: DurationMs,
    /// Encoding of `nexmark` events: `json` (default) or `binary`.
    #[serde(default)]
    pub encoding: sluice_nexmark::Encoding,
}

fn default_seed() -> u64 {
    42
}

fn default_value_bytes() -> Bounded<usize, 0, { 16 << 20 }> {
    Bounded::known(100)
}

fn default_ratio() -> f64 {
    0.05
}

fn default_events_per_second() -> u64 {
    1000
}
