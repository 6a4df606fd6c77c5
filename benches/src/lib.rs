//! Benchmarks for Sluice. See `benches/plugin_call.rs` (criterion) and
//! `benches/pipeline.sh` (end-to-end runs); results in `docs/benchmarks.md`.
