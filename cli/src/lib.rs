//! The `sluice` command's building blocks, as a library so that tests and
//! benchmarks use exactly what the command does.
//!
//! * [`build`]: `sluice plugin build` — plugin crate to component.
//! * [`scaffold`]: `sluice plugin new` — a new plugin crate.
//! * [`inspect`]: `sluice plugin inspect` — what a component is.
//! * [`try_plugin`]: `sluice plugin test` — run a component on sample records.
//! * [`run`]: `sluice run` — run a pipeline file with progress and summary.
//! * [`checkpoints`]: `sluice checkpoints list|show` — a pipeline's checkpoints.
//! * [`sql`]: `sluice sql check|explain` — a pipeline file's queries compiled.
//! * [`serve`]: `sluice serve` — many tenants' pipelines behind a REST API.
//! * [`client`]: `sluice deploy`, `sluice pipelines`, `sluice tenants` — its client.
//! * [`observe`]: `/metrics`, the JSON status and the dashboard, for
//!   `sluice run --http` and `sluice serve`.

pub mod build;
pub mod checkpoints;
pub mod client;
pub mod inspect;
pub mod observe;
pub mod run;
pub mod scaffold;
pub mod serve;
pub mod sql;
pub mod try_plugin;
