//! # sluice-host: the Sluice stream host
//!
//! The host owns what must be correct and fast: reading and writing records,
//! event time, state and checkpoints. User logic runs as sandboxed
//! WebAssembly components called through the `sluice:plugin` WIT interfaces.
//!
//! Modules, in the order data flows:
//!
//! * [`connectors`]: sources (generator, file) and sinks (file, stdout, blackhole).
//! * [`dataflow`]: the stream elements (record batches, watermarks, barriers),
//!   the [`dataflow::Operator`] trait, operator chains and the executor.
//! * [`runtime`]: the WebAssembly plugin runtime (one shared engine, compiled
//!   component cache, pooling allocator, CPU deadlines, memory limits).
//! * [`state`]: keyed state that plugins reach through the `state` interface.
//! * [`checkpoint`]: consistent snapshots of state, source positions and
//!   sink pre-commits, stored on a local disk or S3, and restores from them.
//! * [`config`]: the pipeline file, with errors that name file, line and field.
//! * [`pipeline`]: builds a runnable pipeline from its config.
//! * [`metrics`]: counters shown by progress lines and run summaries.
//!
//! Reading JSON records (the simdjson pass, field paths, event times from
//! fields) is the `sluice-json` crate, below every module here.

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
pub mod state;
pub mod sync;
pub mod time;
pub mod window;

pub use record::{Header, Record, SourcePosition, Topic};
