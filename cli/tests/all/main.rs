//! Tests of the `sluice` binary as a user runs it, in one test binary:
//! commands and errors, processes against Kafka killed mid-stream, and
//! checkpoints with restore and exactly-once output under SIGKILL, zombies
//! and failpoints, and the PostgreSQL upsert sink against a real server.

mod api_abuse;
mod bounded_inputs;
mod checkpoints;
mod cli;
mod dashboard;
mod kafka_exactly_once;
mod kafka_processes;
mod observability;
mod postgres;
mod scale_out;
mod serve;
mod state_memory;
mod tenant_reach;
