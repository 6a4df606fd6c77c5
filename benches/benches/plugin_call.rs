//! Plugin call throughput: the identity plugin on 100-byte records, at batch
//! sizes 1, 16, 256 and 1024, through the packed and the typed path. The
//! difference to a native call is the per-record cost of the boundary.
//!
//! `cargo bench -p sluice-benches --bench plugin_call`

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sluice_host::dataflow::{Collector, Operator};
use sluice_host::runtime::{CallMode, PluginLimits};
use sluice_host::{Record, SourcePosition};

fn records(n: usize) -> Vec<Record> {
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

fn plugin_call(c: &mut Criterion) {
    let runtime = sluice_tests::runtime();
    let store = sluice_tests::state_store();
    for (mode, label) in [(CallMode::Packed, "packed"), (CallMode::Typed, "typed")] {
        let mut group = c.benchmark_group(format!("identity_{label}"));
        let limits = PluginLimits {
            call_mode: mode,
            ..PluginLimits::default()
        };
        let mut identity =
            sluice_tests::operator(&runtime, &store, "bench", "identity", limits, &[]);
        for batch_size in [1usize, 16, 256, 1024] {
            let batch = records(batch_size);
            group.throughput(Throughput::Elements(batch_size as u64));
            group.bench_with_input(
                BenchmarkId::from_parameter(batch_size),
                &batch,
                |b, batch| {
                    b.iter(|| {
                        let mut out = Collector::default();
                        identity
                            .process_batch(batch.clone(), &mut out)
                            .map(|()| out.main.len())
                    })
                },
            );
        }
        group.finish();
    }

    // Nexmark q1 (JSON in, JSON out) on generated events: the cost of the
    // plugin's own work on top of the boundary.
    let mut q1 = sluice_tests::operator(
        &runtime,
        &store,
        "bench",
        "currency-convert",
        PluginLimits::default(),
        &[],
    );
    let events = nexmark(1024);
    let mut group = c.benchmark_group("q1_packed");
    group.throughput(Throughput::Elements(events.len() as u64));
    group.bench_with_input(
        BenchmarkId::from_parameter(events.len()),
        &events,
        |b, events| {
            b.iter(|| {
                let mut out = Collector::default();
                q1.process_batch(events.clone(), &mut out)
                    .map(|()| out.main.len())
            })
        },
    );
    group.finish();

    // The same work without a plugin: cloning the batch and moving it through
    // a collector, i.e. what the host does around the call.
    let mut group = c.benchmark_group("native_baseline");
    for batch_size in [1usize, 16, 256, 1024] {
        let batch = records(batch_size);
        group.throughput(Throughput::Elements(batch_size as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(batch_size),
            &batch,
            |b, batch| {
                b.iter(|| {
                    let mut out = Collector::default();
                    out.main.extend(batch.clone());
                    out.main.len()
                })
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = plugin_call
}
criterion_main!(benches);
