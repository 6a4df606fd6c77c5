//! Event time: where a record's timestamp comes from, and watermarks.
//!
//! * [`timestamps`]: event time from a field of the record (a JSON pointer
//!   or dotted path, which also addresses fields of Avro values once
//!   decoded), from the Kafka record timestamp, or set by a plugin (an
//!   emitted record's `event-time`).
//! * [`watermark`]: bounded out-of-orderness per source split (a Kafka
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

pub mod timestamps;
pub mod watermark;

pub use watermark::{SplitId, SplitWatermarks, WatermarkStrategy};

/// The earliest event time accepted: 0001-01-01T00:00:00Z, in ms.
pub const MIN_EVENT_TIME: i64 = -62_135_596_800_000;
/// The latest event time accepted: 9999-12-31T23:59:59.999Z, in ms.
pub const MAX_EVENT_TIME: i64 = 253_402_300_799_999;

/// `time` if it is in the accepted range, else the dead-letter reason.
pub fn check_event_time(time: i64) -> Result<i64, String> {
    if (MIN_EVENT_TIME..=MAX_EVENT_TIME).contains(&time) {
        Ok(time)
    } else {
        Err(format!(
            "event time {time} is outside the supported range {MIN_EVENT_TIME}..={MAX_EVENT_TIME} (years 1 to 9999, in ms since the Unix epoch)"
        ))
    }
}

/// The event time of `record` if it has one in the accepted range, else
/// the dead-letter reason.
pub fn checked_event_time(record: &crate::record::Record) -> Result<i64, String> {
    match record.event_time {
        Some(time) => check_event_time(time),
        None => Err("record has no event time".into()),
    }
}
