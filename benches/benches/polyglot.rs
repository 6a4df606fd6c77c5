//! The same plugin in four languages: `currency-convert` (Nexmark q1 on JSON
//! events) written in Rust, C, Python and JavaScript.
//!
//! ```text
//! cargo bench -p sluice-benches --bench polyglot
//! ```
//!
//! For each language, prints one row of a markdown table:
//!
//! * component size;
//! * cold start: compiling the component to native code (an empty cache);
//! * warm start: loading the compiled component from the cache, and
//!   creating an instance (instantiate + `init`);
//! * records/s through generator -> plugin -> blackhole, with batches of 256
//!   and with one record per call, each beside its CPU µs per record (the
//!   process's user and system time over the run, per record: the machine
//!   is shared, and wall-clock rates move with its load).
//!
//! Each plugin goes the way a pipeline sends it: Rust and C plugins the
//! packed path (one buffer each way per batch), Python and JavaScript the
//! text-packed one (typed records in, packed outcomes back as a string).

use sluice_benches::cpu_seconds;
use sluice_host::metrics::OperatorMetrics;
use sluice_host::runtime::{PluginInstance, PluginLimits, PluginRuntime, RuntimeConfig};
use sluice_host::state::{MemoryStateBackend, OperatorScope, StateBackend};
use sluice_host::window::MERGE_FOLDS;
use sluice_tests::{plugin, run_pipeline_to_end};
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A language and how many events to generate for its batched and
/// per-record runs (each run takes a few seconds).
struct Language {
    name: &'static str,
    dir: &'static str,
    batched_events: u64,
    per_record_events: u64,
}

const LANGUAGES: [Language; 4] = [
    Language {
        name: "Rust",
        dir: "currency-convert",
        batched_events: 2_000_000,
        per_record_events: 500_000,
    },
    Language {
        name: "C",
        dir: "c/currency-convert",
        batched_events: 1_000_000,
        per_record_events: 500_000,
    },
    Language {
        name: "Python",
        dir: "python/currency-convert",
        batched_events: 100_000,
        per_record_events: 50_000,
    },
    Language {
        name: "JavaScript",
        dir: "js/currency-convert",
        batched_events: 50_000,
        per_record_events: 20_000,
    },
];

fn millis(duration: Duration) -> String {
    format!("{:.1}", duration.as_secs_f64() * 1000.0)
}

/// Events per second through generator -> `component` -> blackhole, and
/// CPU µs per event.
fn throughput(component: &std::path::Path, events: u64, batch_size: usize) -> (f64, f64) {
    let toml = format!(
        "[pipeline]\nname = \"bench-polyglot\"\nbatch_size = {batch_size}\n\n\
         [source.generator]\nprofile = \"nexmark\"\ncount = {events}\n\n\
         [[operators]]\nname = \"q1\"\nplugin = {component:?}\ndeadline_ms = 10000\nmemory_limit_mb = 256\n\n\
         [sink]\nblackhole = {{}}\n"
    );
    let started = Instant::now();
    let cpu_before = cpu_seconds();
    let (_, snapshot) = run_pipeline_to_end(&toml, Duration::from_secs(600));
    let cpu = cpu_seconds() - cpu_before;
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(snapshot.records_in, events);
    assert_eq!(snapshot.dead_letters, 0, "{snapshot:?}");
    (events as f64 / elapsed, cpu / events as f64 * 1e6)
}

fn main() {
    println!(
        "| language | component | cold start (compile) | warm start (load from cache + instantiate) | records/s, batches of 256 | CPU µs/record, batches of 256 | records/s, one record per call | CPU µs/record, one record per call |"
    );
    println!("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |");
    for language in LANGUAGES {
        let component = plugin(language.dir);
        let size = std::fs::metadata(&component).map(|m| m.len()).unwrap_or(0);

        let cache = tempfile::tempdir().expect("temp dir");
        let runtime_with_cache = || {
            PluginRuntime::new(RuntimeConfig {
                cache_dir: cache.path().to_path_buf(),
                ..RuntimeConfig::default()
            })
            .expect("runtime")
        };
        let cold = {
            let runtime = runtime_with_cache();
            let started = Instant::now();
            runtime.load(&component).expect("load");
            started.elapsed()
        };
        let runtime = runtime_with_cache();
        let started = Instant::now();
        let loaded = runtime.load(&component).expect("load");
        let load = started.elapsed();
        let started = Instant::now();
        let scope = OperatorScope::new("bench", "polyglot", "q1");
        let state = MemoryStateBackend::new(MERGE_FOLDS)
            .open(&scope, None)
            .expect("state");
        let instance = PluginInstance::new(
            loaded,
            scope,
            state,
            OperatorMetrics::new("q1"),
            PluginLimits {
                memory_bytes: 256 << 20,
                ..PluginLimits::default()
            },
            Vec::new(),
        )
        .expect("instance");
        let instantiate = started.elapsed();
        drop(instance);

        // Warm the shared test cache, then measure.
        throughput(&component, 1_000, 256);
        let (batched, batched_cpu) = throughput(&component, language.batched_events, 256);
        let (per_record, per_record_cpu) = throughput(&component, language.per_record_events, 1);
        println!(
            "| {} | {:.1} KiB | {} ms | {} ms + {} ms | {:.0} | {:.2} | {:.0} | {:.2} |",
            language.name,
            size as f64 / 1024.0,
            millis(cold),
            millis(load),
            millis(instantiate),
            batched,
            batched_cpu,
            per_record,
            per_record_cpu,
        );
    }
}
