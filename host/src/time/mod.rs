//! Event time: where a record's timestamp comes from, and watermarks.
//!
//! * [`sluice_json::event_time`]: event time from a field of the record (a JSON pointer
//!   or dotted path, which also addresses fields of Avro values once
//!   decoded), from the Kafka record timestamp, or set by a plugin (an
//!   emitted record's `event-time`).
//! * `watermark`: bounded out-of-orderness per source split (a Kafka
//!   partition), combined by minimum across splits, with idle splits
//!   excluded after a timeout.
//!
//! A watermark `w` promises that no record with event time `<= w` is still
//! to come (records that break the promise are late).
//!
//! Event times must lie in [`MIN_EVENT_TIME`]`..=`[`MAX_EVENT_TIME`] (years
//! 1 to 9999, what ISO-8601 timestamps can write): a record outside it is
//! a dead letter ([`check_event_time`]), wherever its time came from. With
//! times bounded so, window and join arithmetic cannot overflow (it is
//! saturating besides).

pub(crate) mod watermark;

pub use watermark::{SplitId, SplitStatus, SplitWatermarks, WatermarkStrategy};

pub use sluice_json::event_time::{MAX_EVENT_TIME, MIN_EVENT_TIME, check_event_time};

/// Milliseconds since the Unix epoch: the one wall clock of checkpoints,
/// metrics and processing-time decisions (not event time).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The event time of `record` if it has one in the accepted range, else
/// the dead-letter reason.
pub fn checked_event_time(record: &crate::record::Record) -> Result<i64, String> {
    match record.event_time {
        Some(time) => check_event_time(time),
        None => Err("record has no event time".into()),
    }
}
