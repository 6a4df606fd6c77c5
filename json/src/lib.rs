//! # sluice-json: how Sluice reads JSON records
//!
//! Every JSON record a source reads is checked whole and a few of its
//! fields are read (event time, key, the numbers a window adds up, the
//! fields a plugin asked for) in one pass, without building the record's
//! value. This crate is that pass and everything built on it; it depends on
//! nothing in the host, so that every layer of the host may use it.
//!
//! In the order a record meets them:
//!
//! * [`scan`]: simdjson's On-Demand walk over a document (C++, built by
//!   `build.rs`), which checks it and finds a few top-level fields;
//!   serde_json decides whatever it hands back.
//! * [`fields`]: field paths (`name`, `a.b`, `/a/b`), the values found at
//!   them ([`FieldValue`]), and the extraction that uses [`scan`] where it
//!   can.
//! * [`event_time`]: a record's event time from one of its fields, and the
//!   range of event times Sluice accepts.
//! * [`projection`]: where a plugin's fields lie in a record (the
//!   projected batch format of `sluice_wire`), and the splice that replaces
//!   one field's value.

pub mod event_time;
pub mod fields;
pub mod projection;
pub mod scan;

pub use fields::{FieldPath, FieldValue};
