//! Sources and sinks.
//!
//! * [`generator`]: deterministic synthetic records (bronze events, Nexmark,
//!   fixed-size payloads), bounded or unbounded, paced or as fast as possible.
//! * [`file`](mod@file): JSON-lines and Avro object container files in, JSON lines out.
//! * [`blackhole`]: a sink that only counts (benchmarks).
//! * [`kafka`], [`iceberg`]: topics in and out, tables out.
//! * [`postgres`]: rows upserted into a PostgreSQL table.
//! * [`schema_registry`]: Avro in the Confluent wire format, with a registry.
//! * [`table_rows`]: what a table sink's row is (the value's fields, or a
//!   dead-letter row), shared by the Iceberg and Postgres sinks.

pub mod blackhole;
pub mod file;
pub mod generator;
pub mod iceberg;
pub mod kafka;
pub mod postgres;
pub mod schema_registry;
mod secret;
pub mod table_rows;

pub use secret::{Secret, SecretMap};
