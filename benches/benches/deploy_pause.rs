//! Deploy pause: how long a hot swap stops a running operator.
//!
//! The Bronze -> Silver validate-and-deduplicate operator (keyed state in
//! the host) runs on paced generated orders with a barrier every 20 ms;
//! its plugin is swapped 25 times (alternating between two loaded copies of
//! the same component, so that every swap builds a new instance with the
//! state kept), once for the Rust plugin and once for the Python one. The
//! pause of a swap is what the worker reports: from the swap barrier
//! reaching it (the last record of the old version done) to the new version
//! ready for the next record. CPU µs per record cover the whole run.
//!
//! `cargo bench -p sluice-benches --bench deploy_pause`

use sluice_host::config::LoadedConfig;
use sluice_host::pipeline::{Pipeline, wasm_files_only};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// The same allocator as the `sluice` binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SWAPS: usize = 25;

fn pipeline_file(dir: &std::path::Path, plugin: &std::path::Path) -> std::path::PathBuf {
    let text = format!(
        r#"[pipeline]
name = "deploy-pause"
batch_size = 64
checkpoint_interval_ms = 20

[source.generator]
profile = "bronze"
count = 100000000
rate = 20000
seed = 3

[[operators]]
name = "validate-dedup"
plugin = "{plugin}"
config = {{ required = "event_id:string,user_id:integer,email:string,card_number:string,amount:number,currency:string,ts:integer", id_field = "event_id" }}

[sink.blackhole]
"#,
        plugin = plugin.display()
    );
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, text).expect("write the pipeline file");
    file
}

/// Swaps `plugin` in and out `SWAPS` times; the pauses (ms, sorted),
/// records processed and CPU seconds used.
fn measure(plugin: &str) -> (Vec<f64>, u64, f64) {
    let runtime = sluice_tests::runtime();
    let path = sluice_tests::plugin(plugin);
    let versions = [
        runtime.load(path.clone()).expect("load"),
        runtime.load(path.clone()).expect("load"),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let loaded = LoadedConfig::load(&pipeline_file(dir.path(), &path)).expect("config");
    let pipeline = Pipeline::open(
        &loaded,
        &runtime,
        &wasm_files_only,
        &sluice_host::checkpoint::RestoreFrom::Fresh,
    )
    .expect("open");
    let (swapper, metrics) = (pipeline.swapper(), pipeline.metrics());
    let stop = Arc::new(AtomicBool::new(false));
    let cpu = sluice_benches::cpu_seconds();
    let run = {
        let stop = stop.clone();
        std::thread::spawn(move || pipeline.run(stop))
    };
    let mut pauses = Vec::new();
    for swap in 0..SWAPS {
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        let reports = swapper
            .swap(
                "validate-dedup",
                versions[swap % 2].clone(),
                Duration::from_secs(60),
                None,
            )
            .expect("swap");
        assert!(reports.iter().all(|r| r.result.is_ok()), "{reports:?}");
        let pause = reports
            .iter()
            .map(|r| r.pause.as_secs_f64() * 1000.0)
            .fold(0.0, f64::max);
        pauses.push(pause);
        eprintln!(
            "{plugin} swap {swap}: pause {pause:.2} ms, request to report {:.0} ms",
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    run.join().expect("run thread").expect("run");
    let cpu = sluice_benches::cpu_seconds() - cpu;
    pauses.sort_by(f64::total_cmp);
    (pauses, metrics.snapshot().records_in, cpu)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn main() {
    println!(
        "| plugin | swaps | pause p50 ms | pause p99 ms | pause max ms | records | CPU µs/record |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for plugin in ["validate-dedup", "python/validate-dedup"] {
        let (pauses, records, cpu) = measure(plugin);
        println!(
            "| {plugin} | {} | {:.2} | {:.2} | {:.2} | {records} | {:.2} |",
            pauses.len(),
            percentile(&pauses, 0.5),
            percentile(&pauses, 0.99),
            pauses.last().copied().unwrap_or_default(),
            cpu * 1e6 / records.max(1) as f64,
        );
    }
}
