//! The integration tests of real plugin components through the real
//! runtime, dataflow and connectors, in one test binary (each binary links
//! wasmtime, librdkafka, RocksDB and the S3 client: one link instead of a
//! dozen). `kafka_broker_restart` stays apart: it restarts the shared
//! broker.

mod bronze_to_silver;
mod build_routes;
mod conformance;
mod dead_letters;
mod event_time;
mod group_protocol;
mod hostile_plugins;
mod hot_swap;
mod iceberg;
mod joins;
mod kafka;
mod layers;
mod nexmark_queries;
mod plugin_loading;
mod plugin_round_trip;
mod quickstart;
mod schema_registry;
mod shared_reader;
mod sql;
mod sql_bronze_to_silver;
mod sql_dedup;
mod sql_nexmark;
mod sql_windows;
mod windows;
