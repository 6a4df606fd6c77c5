//! A trap storm against a healthy run: 100,000 records through the
//! `hostile-trap` plugin (stateful: it counts every value in host state),
//! once all healthy, once all trapping — with the fault-storm circuit
//! breaker (the default) and without it (threshold never reached: one
//! re-instantiation per record). Batches of 256, the default limits.
//! Target: the storm within 3× of the healthy run.
//!
//! `cargo bench -p sluice-benches --bench fault_storm`
//! (`SLUICE_TEST_CPU_LOAD=1` runs it beside a busy process per core.)

use sluice_host::dataflow::{Collector, FaultPolicy, Operator};
use sluice_host::runtime::PluginLimits;
use sluice_host::{Record, SourcePosition};
use std::time::Instant;

/// The same allocator as the `sluice` binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RECORDS: usize = 100_000;
const BATCH: usize = 256;

fn batches(prefix: &str, count: usize) -> Vec<Vec<Record>> {
    let records: Vec<Record> = (0..count)
        .map(|i| {
            Record::from_value(
                format!("{prefix}-{i}").into_bytes(),
                SourcePosition {
                    topic: "bench".into(),
                    partition: 0,
                    offset: i as i64,
                },
            )
        })
        .collect();
    records.chunks(BATCH).map(<[Record]>::to_vec).collect()
}

/// Runs `batches` through a fresh operator; returns (wall s, CPU s, out,
/// dead letters).
fn run(policy: FaultPolicy, batches: Vec<Vec<Record>>) -> (f64, f64, usize, usize) {
    let runtime = sluice_tests::runtime();
    let store = sluice_tests::state_backend();
    let mut operator = sluice_tests::operator(
        &runtime,
        &store,
        "bench",
        "hostile-trap",
        PluginLimits::default(),
        &[],
    )
    .with_fault_policy(policy);
    let (mut out_count, mut dead) = (0, 0);
    let cpu = sluice_benches::cpu_seconds();
    let started = Instant::now();
    for batch in batches {
        let mut out = Collector::default();
        if let Err(error) = operator.process_batch(batch, &mut out) {
            panic!("the operator failed: {error}");
        }
        out_count += out.main.len();
        dead += out.dead_letter.len();
    }
    (
        started.elapsed().as_secs_f64(),
        sluice_benches::cpu_seconds() - cpu,
        out_count,
        dead,
    )
}

fn main() {
    let _load = sluice_tests::cpu_load();
    // Build and compile the plugin before anything is timed.
    let _ = run(FaultPolicy::default(), batches("warm", BATCH));
    let healthy = run(FaultPolicy::default(), batches("ok", RECORDS));
    let storm = run(FaultPolicy::default(), batches("trap", RECORDS));
    let unbroken = run(
        FaultPolicy::default().storm_threshold(u64::MAX),
        batches("trap", RECORDS),
    );
    println!(
        "| run ({RECORDS} records, batches of {BATCH}) | wall s | records/s | CPU µs/record | out | dead letters | × healthy (wall) | × healthy (CPU) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, (wall, cpu, out, dead)) in [
        ("healthy", healthy),
        ("trap storm, circuit breaker (default)", storm),
        ("trap storm, no circuit breaker", unbroken),
    ] {
        println!(
            "| {name} | {wall:.3} | {:.0} | {:.2} | {out} | {dead} | {:.2} | {:.2} |",
            RECORDS as f64 / wall,
            cpu * 1e6 / RECORDS as f64,
            wall / healthy.0,
            cpu / healthy.1,
        );
    }
}
