//! Checkpoint costs: the synchronous part (what records wait for), the
//! total, and the bytes uploaded, for two states.
//!
//! ```text
//! cargo bench -p sluice-benches --bench checkpoint
//! ```
//!
//! 1. A RocksDB state of 1,000,000 keys (17-byte keys, 32-byte values)
//!    checkpointed to local storage, then 10 intervals in each of which 1 %
//!    of the keys change: per checkpoint, the native RocksDB checkpoint
//!    (sync), the upload of new files (async) and the bytes uploaded against
//!    the state's size.
//! 2. Nexmark q5 (2,000,000 events, both keyed stages, 2 workers) with
//!    `[checkpoints]` every second to local storage: the figures the
//!    pipeline itself records for each checkpoint.

use sluice_host::checkpoint::IncrementalUploader;
use sluice_host::checkpoint::LocalStorage;
use sluice_host::state::{OperatorScope, RocksStateBackend, StateBackend, StateWrite};
use sluice_host::window::MERGE_FOLDS;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const KEYS: u64 = 1_000_000;
const INTERVALS: u64 = 10;

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:013}").into_bytes()
}

fn value(i: u64, version: u64) -> Vec<u8> {
    let mut value = format!("{i:016}{version:016}").into_bytes();
    value.truncate(32);
    value
}

/// The 1 M-key state: one row per checkpoint.
fn large_state() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let backend = RocksStateBackend::open(&dir.path().join("db"), MERGE_FOLDS, Default::default())
        .expect("RocksDB");
    let store = backend
        .open(&OperatorScope::new("t", "bench", "state"), None)
        .expect("store");
    let storage = LocalStorage::new(dir.path().join("checkpoints"));
    let mut uploader = IncrementalUploader::new("bench", &[]);
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(10_000) {
        let writes = chunk
            .iter()
            .map(|i| StateWrite::Put(key(*i), value(*i, 0)))
            .collect();
        store.write(writes).expect("write");
    }
    println!(
        "| checkpoint | keys changed | state bytes | uploaded bytes | uploaded % | sync ms | upload ms |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    for checkpoint in 0..=INTERVALS {
        let changed = if checkpoint == 0 { KEYS } else { KEYS / 100 };
        if checkpoint > 0 {
            let writes = (0..changed)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let i = seed % KEYS;
                    StateWrite::Put(key(i), value(i, checkpoint))
                })
                .collect();
            store.write(writes).expect("write");
        }
        let snapshot = dir.path().join(format!("snapshot-{checkpoint}"));
        let sync = Instant::now();
        store.flush().expect("flush");
        backend.create_checkpoint(&snapshot).expect("checkpoint");
        let sync = sync.elapsed();
        let upload = Instant::now();
        let uploaded = uploader
            .upload(&storage, &snapshot, checkpoint + 1)
            .expect("upload");
        let upload = upload.elapsed();
        std::fs::remove_dir_all(&snapshot).expect("remove snapshot");
        uploader.retain_only(&uploaded.files);
        let state: u64 = uploaded.files.iter().map(|f| f.bytes).sum();
        println!(
            "| {} | {changed} | {state} | {} | {:.1} | {:.1} | {:.1} |",
            checkpoint + 1,
            uploaded.bytes,
            uploaded.bytes as f64 * 100.0 / state.max(1) as f64,
            ms(sync),
            ms(upload)
        );
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// q5 with checkpoints: the recorded figures of every checkpoint.
fn q5() {
    let storage = tempfile::tempdir().expect("temporary directory");
    let text = format!(
        r#"[pipeline]
name = "bench-q5-checkpoints"
batch_size = 1024
workers = 2

[checkpoints]
storage = "{}"
interval_ms = 1000

[source.generator]
profile = "nexmark"
count = 2_000_000
events_per_second = 10_000

[[operators]]
name = "bids"
plugin = "{}"
config = {{ modulus = 1 }}

[[operators]]
name = "bids-per-auction"
window = {{ sliding_ms = 10_000, slide_ms = 2_000 }}
key_field = "auction"
aggregate = {{ function = "count" }}

[[operators]]
name = "hot-items"
plugin = "{}"
window = {{ tumbling_ms = 2_000 }}
key_field = "window_end"

[sink]
blackhole = {{}}
"#,
        storage.path().display(),
        sluice_tests::plugin("filter-bids").display(),
        sluice_tests::plugin("hot-items").display(),
    );
    let started = Instant::now();
    let cpu = sluice_benches::cpu_seconds();
    let (_, snapshot) = sluice_tests::run_pipeline_to_end(&text, Duration::from_secs(600));
    let cpu = sluice_benches::cpu_seconds() - cpu;
    let elapsed = started.elapsed();
    let history = &snapshot.checkpoints.history;
    println!(
        "\nq5, 2 workers: {} records in {:.1} s ({:.0}/s, {:.2} CPU µs/record) with {} checkpoints\n",
        snapshot.records_in,
        elapsed.as_secs_f64(),
        snapshot.records_in as f64 / elapsed.as_secs_f64(),
        cpu * 1e6 / snapshot.records_in.max(1) as f64,
        snapshot.checkpoints.completed
    );
    println!(
        "| q5 checkpoints (last {}) | median | p90 | max |",
        history.len()
    );
    println!("| --- | --- | --- | --- |");
    let row = |name: &str, mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        let at = |p: f64| values[((values.len() - 1) as f64 * p).round() as usize];
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} |",
            at(0.5),
            at(0.9),
            at(1.0)
        );
    };
    if history.is_empty() {
        return;
    }
    row("sync ms", history.iter().map(|c| c.stats.sync_ms).collect());
    row(
        "alignment ms",
        history.iter().map(|c| c.stats.alignment_ms).collect(),
    );
    row(
        "total ms",
        history.iter().map(|c| c.stats.total_ms).collect(),
    );
    row(
        "state KiB",
        history
            .iter()
            .map(|c| c.stats.state_bytes as f64 / 1024.0)
            .collect(),
    );
    row(
        "uploaded KiB",
        history
            .iter()
            .map(|c| c.stats.uploaded_bytes as f64 / 1024.0)
            .collect(),
    );
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    large_state();
    q5();
}
