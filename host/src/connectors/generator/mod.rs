//! A deterministic generator of synthetic records.
//!
//! The same options and seed always give the same records, so tests can
//! recompute what a pipeline should output. Profiles:
//!
//! * [`Profile::Bronze`]: raw "bronze" order events with personal data, some
//!   invalid (missing field, wrong type, broken JSON) and some duplicated —
//!   the input of the quickstart's validate / dedup / redact job.
//! * [`Profile::Nexmark`]: the Nexmark benchmark's person, auction and bid
//!   events (1 : 3 : 46), with event times and configurable disorder.
//! * [`Profile::Payload`]: fixed-size opaque values (throughput benchmarks).

mod config;

pub use config::GeneratorConfig;
mod bronze;
mod nexmark;

use crate::dataflow::{DataflowError, Source, SourceBatch};
use crate::record::{Headers, Record, SourcePosition, Topic};
use bytes::Bytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::{Duration, Instant};

/// What kind of records to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Order events for the bronze-to-silver quickstart.
    #[default]
    Bronze,
    /// Nexmark person / auction / bid events.
    Nexmark,
    /// Fixed-size payloads.
    Payload,
}

/// Generator settings.
#[derive(Debug, Clone)]
pub struct GeneratorOptions {
    /// Record kind.
    pub profile: Profile,
    /// Records to generate; `None` for an unbounded stream.
    pub count: Option<u64>,
    /// Records per second of wall-clock time; `None` for as fast as possible.
    pub rate: Option<u64>,
    /// Random seed.
    pub seed: u64,
    /// Value size for [`Profile::Payload`].
    pub value_bytes: usize,
    /// Fraction of bronze events that are invalid.
    pub invalid_ratio: f64,
    /// Fraction of bronze events that repeat an earlier event.
    pub duplicate_ratio: f64,
    /// Event time of the first record, ms since the Unix epoch.
    pub start_time_ms: i64,
    /// Event-time spacing: records per second of event time.
    pub events_per_second: u64,
    /// Largest amount an event time is moved back (disorder), ms.
    pub max_disorder_ms: u64,
    /// Encoding of [`Profile::Nexmark`] events.
    pub nexmark_encoding: sluice_nexmark::Encoding,
}

impl Default for GeneratorOptions {
    fn default() -> Self {
        GeneratorOptions {
            profile: Profile::Bronze,
            count: Some(1000),
            rate: None,
            seed: 42,
            value_bytes: 100,
            invalid_ratio: 0.05,
            duplicate_ratio: 0.05,
            start_time_ms: 1_700_000_000_000,
            events_per_second: 1000,
            max_disorder_ms: 0,
            nexmark_encoding: sluice_nexmark::Encoding::Json,
        }
    }
}

/// A [`Source`] of generated records (one partition, offsets from 0).
pub struct GeneratorSource {
    name: String,
    topic: Topic,
    options: GeneratorOptions,
    rng: ChaCha8Rng,
    next_index: u64,
    started: Option<Instant>,
    /// The record pacing counts from (the restored position).
    paced_from: u64,
    bronze: bronze::BronzeState,
    nexmark: nexmark::NexmarkTables,
}

impl GeneratorSource {
    /// A generator named `name`.
    pub fn new(name: impl Into<String>, options: GeneratorOptions) -> Self {
        let name = name.into();
        GeneratorSource {
            topic: Topic::new(&format!("generator:{name}")),
            rng: ChaCha8Rng::seed_from_u64(options.seed),
            nexmark: nexmark::NexmarkTables::new(options.nexmark_encoding),
            name,
            options,
            next_index: 0,
            started: None,
            paced_from: 0,
            bronze: bronze::BronzeState::default(),
        }
    }

    /// Generates record `self.next_index`. Nexmark and payload values are
    /// appended to `batch` (the batch's shared buffer) and returned as a
    /// range of it; bronze values come as their own bytes.
    fn generate(&mut self, batch: &mut Vec<u8>) -> (Option<Bytes>, GeneratedValue, i64) {
        let index = self.next_index;
        self.next_index += 1;
        let o = &self.options;
        let base_time = o.start_time_ms + (index as i64 * 1000) / o.events_per_second.max(1) as i64;
        let event_time = if o.max_disorder_ms > 0 {
            base_time - rand::Rng::random_range(&mut self.rng, 0..=o.max_disorder_ms) as i64
        } else {
            base_time
        };
        let start = batch.len();
        let (key, value) = match o.profile {
            Profile::Bronze => {
                let (key, value) =
                    bronze::generate(&mut self.bronze, &mut self.rng, o, index, event_time);
                (key, GeneratedValue::Own(value))
            }
            Profile::Nexmark => {
                nexmark::generate(&mut self.nexmark, &mut self.rng, index, event_time, batch);
                (None, GeneratedValue::InBatch(start..batch.len()))
            }
            Profile::Payload => {
                payload(batch, index, o.value_bytes);
                (None, GeneratedValue::InBatch(start..batch.len()))
            }
        };
        (key, value, event_time)
    }
}

/// Where a generated value is.
enum GeneratedValue {
    /// Its own bytes.
    Own(Bytes),
    /// A range of the batch buffer.
    InBatch(std::ops::Range<usize>),
}

/// Appends a `size`-byte value to `out`: the index in decimal, then filler.
fn payload(out: &mut Vec<u8>, index: u64, size: usize) {
    let start = out.len();
    out.extend_from_slice(index.to_string().as_bytes());
    let written = out.len() - start;
    out.resize(start + size.max(written), b'.');
}

impl Source for GeneratorSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn next_batch(&mut self, max_records: usize) -> Result<Option<SourceBatch>, DataflowError> {
        let remaining = match self.options.count {
            Some(count) => count.saturating_sub(self.next_index),
            None => u64::MAX,
        };
        if remaining == 0 {
            return Ok(None);
        }
        let size = (max_records as u64).min(remaining) as usize;
        if let Some(rate) = self.options.rate.filter(|rate| *rate > 0) {
            // Pace: this batch is due when the records before it have had
            // their share of time at `rate`.
            let started = *self.started.get_or_insert_with(Instant::now);
            let paced = self.next_index - self.paced_from;
            let due = started + Duration::from_secs_f64(paced as f64 / rate as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        // One buffer for the whole batch: values are slices of it, so a
        // record costs no allocation of its own.
        let mut buffer = Vec::with_capacity(size * 128);
        let generated: Vec<_> = (0..size).map(|_| self.generate(&mut buffer)).collect();
        let buffer = Bytes::from(buffer);
        let first_index = self.next_index - size as u64;
        let records = generated
            .into_iter()
            .enumerate()
            .map(|(i, (key, value, event_time))| Record {
                read_fields: None,
                key,
                value: match value {
                    GeneratedValue::Own(bytes) => bytes,
                    GeneratedValue::InBatch(range) => buffer.slice(range),
                },
                headers: Headers::new(),
                event_time: Some(event_time),
                source: SourcePosition {
                    topic: self.topic,
                    partition: 0,
                    offset: (first_index + i as u64) as i64,
                },
            })
            .collect();
        Ok(Some(SourceBatch {
            records,
            dead_letters: Vec::new(),
            watermark: None,
        }))
    }

    /// The index of the next record to generate.
    fn snapshot_position(
        &mut self,
        _checkpoint_id: u64,
    ) -> Result<serde_json::Value, DataflowError> {
        Ok(serde_json::json!({ "next": self.next_index }))
    }

    /// Generates (and drops) the records before the position again: the
    /// generator's random state and duplicate memory depend on them.
    fn restore_position(&mut self, position: &serde_json::Value) -> Result<(), DataflowError> {
        let next = position
            .get("next")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| DataflowError::Source {
                name: self.name.clone(),
                message: format!("unreadable generator position {position}"),
            })?;
        let mut scratch = Vec::new();
        while self.next_index < next {
            scratch.clear();
            self.generate(&mut scratch);
        }
        // Pacing restarts from the position.
        self.started = None;
        self.paced_from = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(options: GeneratorOptions) -> Vec<Record> {
        let mut source = GeneratorSource::new("g", options);
        let mut out = Vec::new();
        while let Some(batch) = source.next_batch(7).unwrap() {
            out.extend(batch.records);
        }
        out
    }

    #[test]
    fn same_seed_same_records_and_count_is_respected() {
        for profile in [Profile::Bronze, Profile::Nexmark, Profile::Payload] {
            let options = GeneratorOptions {
                profile,
                count: Some(100),
                max_disorder_ms: 50,
                ..GeneratorOptions::default()
            };
            let a = all(options.clone());
            assert_eq!(a.len(), 100);
            assert_eq!(a, all(options.clone()));
            let other = all(GeneratorOptions { seed: 7, ..options });
            if profile != Profile::Payload {
                assert_ne!(a, other, "{profile:?} ignores the seed");
            }
        }
    }

    #[test]
    fn a_restored_generator_continues_where_it_stopped() {
        let options = GeneratorOptions {
            count: Some(50),
            duplicate_ratio: 0.3,
            max_disorder_ms: 20,
            ..GeneratorOptions::default()
        };
        let everything = all(options.clone());
        let mut first = GeneratorSource::new("g", options.clone());
        first.next_batch(7).unwrap();
        first.next_batch(7).unwrap();
        let position = first.snapshot_position(1).unwrap();
        let mut restored = GeneratorSource::new("g", options);
        restored.restore_position(&position).unwrap();
        let mut rest = Vec::new();
        while let Some(batch) = restored.next_batch(5).unwrap() {
            rest.extend(batch.records);
        }
        assert_eq!(rest, everything[14..].to_vec());
    }

    #[test]
    fn disorder_stays_within_bound() {
        let options = GeneratorOptions {
            profile: Profile::Nexmark,
            count: Some(1000),
            max_disorder_ms: 200,
            ..GeneratorOptions::default()
        };
        let records = all(options.clone());
        let mut max_seen = i64::MIN;
        let mut out_of_order = 0;
        for record in &records {
            let time = record.event_time.unwrap();
            if time < max_seen {
                out_of_order += 1;
                assert!(max_seen - time <= 200 + 1);
            }
            max_seen = max_seen.max(time);
        }
        assert!(
            out_of_order > 0,
            "disorder was requested but none generated"
        );
    }

    #[test]
    fn payload_has_the_requested_size() {
        let records = all(GeneratorOptions {
            profile: Profile::Payload,
            count: Some(3),
            value_bytes: 100,
            ..GeneratorOptions::default()
        });
        assert!(records.iter().all(|r| r.value.len() == 100));
    }
}
