//! Plugin call throughput: the identity plugin on 100-byte records, at batch
//! sizes 1, 16, 256 and 1024, through the packed and the typed path, next to
//! a native pass-through operator (the host's own share of the work); and the
//! Nexmark q1 plugin on generated events.
//!
//! `cargo bench -p sluice-benches --bench plugin_call`

#![allow(missing_docs)] // `criterion_group!` defines an undocumented `pub fn`.

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sluice_host::dataflow::{Collector, DataflowError, Operator};
use sluice_host::metrics::OperatorMetrics;
use sluice_host::runtime::{CallMode, PluginLimits};
use sluice_host::{Record, SourcePosition};
use std::sync::Arc;

/// The same allocator as the `sluice` binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BATCH_SIZES: [usize; 4] = [1, 16, 256, 1024];

/// Passes batches through untouched: the baseline without a plugin.
struct PassThrough(Arc<OperatorMetrics>);

impl Operator for PassThrough {
    fn name(&self) -> &str {
        "pass-through"
    }
    fn metrics(&self) -> &Arc<OperatorMetrics> {
        &self.0
    }
    fn process_batch(
        &mut self,
        batch: Vec<Record>,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        out.main = batch;
        Ok(())
    }
}

fn payloads(n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| {
            Record::from_value(
                Bytes::from(vec![b'x'; 100]),
                SourcePosition {
                    topic: "bench".into(),
                    partition: 0,
                    offset: i as i64,
                },
            )
        })
        .collect()
}

fn nexmark(n: u64) -> Vec<Record> {
    use sluice_host::connectors::generator::{GeneratorOptions, GeneratorSource, Profile};
    use sluice_host::dataflow::Source;
    let mut generator = GeneratorSource::new(
        "nexmark",
        GeneratorOptions {
            profile: Profile::Nexmark,
            count: Some(n),
            ..GeneratorOptions::default()
        },
    );
    let mut records = Vec::new();
    while let Ok(Some(batch)) = generator.next_batch(n as usize) {
        records.extend(batch.records);
    }
    records
}

/// Benchmarks `operator` on each batch, reporting records per second.
fn bench_operator(
    c: &mut Criterion,
    group: &str,
    operator: &mut dyn Operator,
    batches: &[Vec<Record>],
) {
    let mut group = c.benchmark_group(group);
    for batch in batches {
        group.throughput(Throughput::Elements(batch.len() as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(batch.len()),
            batch,
            |b, batch| {
                b.iter(|| {
                    let mut out = Collector::default();
                    operator
                        .process_batch(batch.clone(), &mut out)
                        .map(|()| out.main.len())
                })
            },
        );
    }
    group.finish();
}

fn plugin_call(c: &mut Criterion) {
    let runtime = sluice_tests::runtime();
    let store = sluice_tests::state_backend();
    let batches: Vec<Vec<Record>> = BATCH_SIZES.iter().map(|n| payloads(*n)).collect();
    for (mode, label) in [
        (CallMode::Packed, "identity_packed"),
        (CallMode::Typed, "identity_typed"),
    ] {
        let limits = PluginLimits {
            call_mode: mode,
            ..PluginLimits::default()
        };
        let mut identity =
            sluice_tests::operator(&runtime, &store, "bench", "identity", limits, &[]);
        bench_operator(c, label, &mut identity, &batches);
    }
    let mut pass_through = PassThrough(OperatorMetrics::new("pass-through"));
    bench_operator(c, "native_baseline", &mut pass_through, &batches);

    let mut q1 = sluice_tests::operator(
        &runtime,
        &store,
        "bench",
        "currency-convert",
        PluginLimits::default(),
        &[],
    );
    bench_operator(c, "q1_packed", &mut q1, &[nexmark(1024)]);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = plugin_call
}
criterion_main!(benches);
