//! Per-split watermarks with idleness.
//!
//! Each split (a Kafka partition; a file or generator is one split) keeps
//! the highest event time it has produced. Its watermark is that minus the
//! out-of-orderness bound, minus one (as Flink's bounded out-of-orderness:
//! a record exactly `bound` late is still on time); the source's watermark is the minimum over its
//! splits, so a slow partition holds the whole stream back, as it must.
//!
//! A split that produces nothing for `idle_timeout` is marked idle and no
//! longer counts, so one quiet partition cannot freeze every window; it
//! counts again as soon as it produces a record. Without an idle timeout, a
//! silent split holds the watermark back forever (the failure mode the
//! setting exists for). The emitted watermark never goes backwards.

use crate::record::{Record, Topic};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A source split: topic (or file, or generator) and partition.
pub type SplitId = (Topic, i32);

/// How watermarks are derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatermarkStrategy {
    /// How far behind the highest event time seen the watermark stays.
    pub max_out_of_orderness: Duration,
    /// After how long without records a split stops holding the watermark
    /// back; `None`: never.
    pub idle_timeout: Option<Duration>,
}

#[derive(Debug)]
struct SplitState {
    max_event_time: Option<i64>,
    last_record: Instant,
    idle: bool,
}

/// The watermark of a source with several splits.
#[derive(Debug)]
pub struct SplitWatermarks {
    strategy: WatermarkStrategy,
    splits: HashMap<SplitId, SplitState>,
    emitted: Option<i64>,
}

impl SplitWatermarks {
    /// No splits yet.
    pub fn new(strategy: WatermarkStrategy) -> Self {
        SplitWatermarks {
            strategy,
            splits: HashMap::new(),
            emitted: None,
        }
    }

    /// Declares the splits the source currently reads (e.g. after a Kafka
    /// rebalance), so that a split that has produced nothing yet still holds
    /// the watermark back. Splits no longer listed are forgotten.
    pub fn set_splits(&mut self, splits: &[SplitId], now: Instant) {
        self.splits.retain(|id, _| splits.contains(id));
        for id in splits {
            self.splits.entry(*id).or_insert(SplitState {
                max_event_time: None,
                last_record: now,
                idle: false,
            });
        }
    }

    /// Accounts for records read at `now`.
    pub fn on_records(&mut self, records: &[Record], now: Instant) {
        // Highest event time per split in this batch: batches hold few
        // splits, so a short list beats a map lookup per record.
        let mut batch_max: Vec<(Topic, i32, i64)> = Vec::new();
        for record in records {
            let Some(time) = record.event_time else {
                continue;
            };
            let (topic, partition) = (record.source.topic, record.source.partition);
            match batch_max
                .iter_mut()
                .find(|(t, p, _)| *p == partition && *t == topic)
            {
                Some((_, _, max)) => *max = (*max).max(time),
                None => batch_max.push((topic, partition, time)),
            }
        }
        for (topic, partition, max) in batch_max {
            let state = self.splits.entry((topic, partition)).or_insert(SplitState {
                max_event_time: None,
                last_record: now,
                idle: false,
            });
            state.max_event_time = Some(state.max_event_time.map_or(max, |m| m.max(max)));
            state.last_record = now;
            state.idle = false;
        }
    }

    /// The watermark to emit at `now`, if it advanced since the last call.
    pub fn advance(&mut self, now: Instant) -> Option<i64> {
        if let Some(timeout) = self.strategy.idle_timeout {
            for state in self.splits.values_mut() {
                state.idle = now.duration_since(state.last_record) >= timeout;
            }
        }
        let of = |max_event_time: i64| self.split_watermark(max_event_time);
        let mut combined: Option<i64> = None;
        for state in self.splits.values().filter(|s| !s.idle) {
            // An active split without records yet holds everything back.
            let split = of(state.max_event_time?);
            combined = Some(combined.map_or(split, |c| c.min(split)));
        }
        if self.splits.values().all(|s| s.idle) {
            // Every split idle: nothing holds the watermark back, and it is
            // where the last split to go idle would have left it, whatever
            // the order in which their timeouts expired.
            combined = self
                .splits
                .values()
                .filter_map(|s| s.max_event_time.map(of))
                .max();
        }
        let watermark = combined?;
        if self.emitted.is_some_and(|emitted| watermark <= emitted) {
            return None;
        }
        self.emitted = Some(watermark);
        Some(watermark)
    }

    /// The highest event time seen per split, for a checkpoint: restored
    /// with [`SplitWatermarks::restore`], the watermark continues where it
    /// was instead of starting over (a split with nothing more to read
    /// would otherwise hold it back for ever).
    pub fn snapshot(&self) -> serde_json::Value {
        let splits: Vec<serde_json::Value> = self
            .splits
            .iter()
            .filter_map(|((topic, partition), state)| {
                state.max_event_time.map(|time| {
                    serde_json::json!({ "topic": &**topic, "partition": partition, "max_event_time": time })
                })
            })
            .collect();
        serde_json::json!({ "splits": splits, "emitted": self.emitted })
    }

    /// Continues from a [`SplitWatermarks::snapshot`]; unreadable entries
    /// are skipped (the watermark then starts lower, never wrong).
    pub fn restore(&mut self, snapshot: &serde_json::Value, now: Instant) {
        let entries = snapshot["splits"].as_array().cloned().unwrap_or_default();
        for entry in entries {
            let (Some(topic), Some(partition), Some(time)) = (
                entry["topic"].as_str(),
                entry["partition"]
                    .as_i64()
                    .and_then(|p| i32::try_from(p).ok()),
                entry["max_event_time"].as_i64(),
            ) else {
                continue;
            };
            self.splits.insert(
                (Topic::new(topic), partition),
                SplitState {
                    max_event_time: Some(time),
                    last_record: now,
                    idle: false,
                },
            );
        }
        self.emitted = snapshot["emitted"].as_i64();
    }

    /// The watermark of a split whose highest event time is
    /// `max_event_time`. `- 1`: a record exactly `bound` behind the highest
    /// event time is still on time (the watermark promises nothing at or
    /// before it is still to come).
    fn split_watermark(&self, max_event_time: i64) -> i64 {
        let bound = self.strategy.max_out_of_orderness.as_millis() as i64;
        max_event_time.saturating_sub(bound).saturating_sub(1)
    }

    /// Every split's watermark and idleness, sorted by topic and
    /// partition: which split holds the watermark back.
    pub fn statuses(&self) -> Vec<SplitStatus> {
        let mut statuses: Vec<SplitStatus> = self
            .splits
            .iter()
            .map(|((topic, partition), state)| SplitStatus {
                topic: topic.to_string(),
                partition: *partition,
                watermark: state.max_event_time.map(|t| self.split_watermark(t)),
                idle: state.idle,
            })
            .collect();
        statuses.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        statuses
    }

    /// Splits currently idle.
    pub fn idle_splits(&self) -> usize {
        self.splits.values().filter(|s| s.idle).count()
    }
}

/// A source split's watermark, as the source last published it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SplitStatus {
    /// Topic (or file, or generator).
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The split's watermark, ms (`None` before its first record).
    pub watermark: Option<i64>,
    /// Whether it is idle (not holding the source's watermark back).
    pub idle: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SourcePosition;

    fn record(partition: i32, time: i64, topic: &Topic) -> Record {
        let mut record = Record::from_value(
            Vec::new(),
            SourcePosition {
                topic: *topic,
                partition,
                offset: 0,
            },
        );
        record.event_time = Some(time);
        record
    }

    #[test]
    fn minimum_over_splits_minus_the_bound() {
        let topic = Topic::new("t");
        let now = Instant::now();
        let mut marks = SplitWatermarks::new(WatermarkStrategy {
            max_out_of_orderness: Duration::from_millis(10),
            idle_timeout: None,
        });
        marks.on_records(&[record(0, 100, &topic), record(1, 50, &topic)], now);
        assert_eq!(marks.advance(now), Some(39));
        marks.on_records(&[record(1, 200, &topic)], now);
        assert_eq!(marks.advance(now), Some(89));
        // Never backwards, and only emitted when it moves.
        marks.on_records(&[record(0, 95, &topic)], now);
        assert_eq!(marks.advance(now), None);
    }

    #[test]
    fn a_silent_split_holds_back_until_it_is_idle() {
        let topic = Topic::new("t");
        let start = Instant::now();
        for idle_timeout in [None, Some(Duration::from_millis(500))] {
            let mut marks = SplitWatermarks::new(WatermarkStrategy {
                max_out_of_orderness: Duration::ZERO,
                idle_timeout,
            });
            marks.set_splits(&[(topic, 0), (topic, 1)], start);
            marks.on_records(&[record(0, 1_000, &topic)], start);
            assert_eq!(marks.advance(start), None, "split 1 has said nothing yet");
            let later = start + Duration::from_millis(600);
            marks.on_records(&[record(0, 2_000, &topic)], later);
            match idle_timeout {
                None => assert_eq!(marks.advance(later), None, "frozen without a timeout"),
                Some(_) => {
                    assert_eq!(marks.advance(later), Some(1_999));
                    assert_eq!(marks.idle_splits(), 1);
                    // The split wakes up with older data: it counts again, but
                    // the watermark does not go back.
                    marks.on_records(&[record(1, 1_500, &topic)], later);
                    assert_eq!(marks.advance(later), None);
                    marks.on_records(&[record(1, 2_500, &topic), record(0, 3_000, &topic)], later);
                    assert_eq!(marks.advance(later), Some(2_499));
                }
            }
        }
    }

    #[test]
    fn splits_that_go_idle_together_release_the_watermark() {
        // A drained split and a silent one whose timeouts expire at the
        // same check: the drained split's watermark is emitted, as if the
        // silent one had gone idle first.
        let topic = Topic::new("t");
        let start = Instant::now();
        let mut marks = SplitWatermarks::new(WatermarkStrategy {
            max_out_of_orderness: Duration::ZERO,
            idle_timeout: Some(Duration::from_millis(500)),
        });
        marks.set_splits(&[(topic, 0), (topic, 1)], start);
        marks.on_records(&[record(0, 1_000, &topic)], start);
        assert_eq!(marks.advance(start), None);
        let later = start + Duration::from_millis(600);
        assert_eq!(marks.advance(later), Some(999));
        assert_eq!(marks.idle_splits(), 2);
    }
}
