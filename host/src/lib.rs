//! # sluice-host: the Sluice stream host
//!
//! The host owns what must be correct and fast: reading and writing
//! records, event time, state and checkpoints. User logic runs as sandboxed
//! WebAssembly components called through the `sluice:plugin` WIT
//! interfaces. A tour, in the order a record meets the concepts:
//!
//! 1. A [`pipeline`] is built from its pipeline file ([`config`]; numbers
//!    with a range are [`bounded`] as they are read, and every error names
//!    file, line and field).
//! 2. A source of [`connectors`] (generator, file, Kafka) reads each
//!    [`Record`] and, for JSON, checks it and finds its fields in one pass
//!    (the `sluice-json` crate, below every module here). Its event time
//!    comes from a field or the Kafka timestamp; [`time`] turns the times of
//!    each split into watermarks.
//! 3. The [`dataflow`] carries batches of records, watermarks and
//!    checkpoint barriers through a chain of operators, one thread per
//!    worker, keyed operators after an exchange by key group.
//! 4. Operators: a plugin transform through the [`runtime`] (one shared
//!    wasmtime engine, CPU deadlines, memory limits, hot swap at a
//!    barrier), a [`window`] (built-in or plugin aggregates), an interval
//!    [`join`], a [`sql`] query (compiled by the `sluice-sql` crate). Their
//!    keyed [`state`] lives in RocksDB or memory.
//! 5. At each barrier, [`checkpoint`] snapshots state, source positions and
//!    sink pre-commits to local disk or S3; sinks commit once it is
//!    published (exactly-once Kafka, files, Iceberg).
//! 6. [`metrics`] count all of it for progress lines, run summaries,
//!    Prometheus and the dashboard.
//! 7. A scaled-out pipeline runs as [`tasks`], one per input partition,
//!    shared by every process running it through Kafka's group protocol.
//!
//! Layers: each module uses only modules of the layers below it, lowest
//! first `bounded`, `sync` / `record`, `state` / `time` / `metrics` /
//! `checkpoint`, `runtime` / `dataflow` / `connectors`, `join`, `sql`, `window` /
//! `config` / `pipeline` / `tasks` (`tests/tests/all/layers.rs` prints them and fails
//! on an import circle; ADR 0019).

pub mod bounded;
pub mod checkpoint;
pub mod config;
pub mod connectors;
pub mod dataflow;
pub mod join;
pub mod metrics;
pub mod pipeline;
pub mod record;
pub mod runtime;
pub mod sql;
pub mod state;
pub mod sync;
pub mod tasks;
pub mod time;
pub mod window;

pub use record::{Header, Record, SourcePosition, Topic};
