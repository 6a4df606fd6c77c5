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

pub mod timestamps;
pub mod watermark;

pub use watermark::{SplitId, SplitWatermarks, WatermarkStrategy};
