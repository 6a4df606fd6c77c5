//! Swapping the plugin of a running operator (the primitive `sluice serve`'s
//! hot swap stands on): the new version is instantiated and initialised
//! beside the old one, with the operator's keyed state, and replaces it
//! only if that works. Here the de-duplicating plugin goes from Rust to
//! Python and back mid-stream: ids seen by one version are duplicates for
//! the next, because the state lives in the host, not in the plugin.

use sluice_host::record::{Record, SourcePosition};
use sluice_host::runtime::{EmitRoute, PluginInstance, PluginLimits, SwappablePlugin};
use sluice_host::state::OperatorScope;
use sluice_tests::{plugin, runtime, state_backend};
use std::sync::Arc;

/// Orders `ids` as records (every required field valid).
fn orders(ids: std::ops::Range<u32>) -> Vec<Record> {
    ids.map(|id| {
        let value = serde_json::json!({
            "event_id": format!("e{id}"),
            "user_id": id % 7,
            "amount": 10.5,
        });
        Record::from_value(
            value.to_string(),
            SourcePosition {
                topic: "orders".into(),
                partition: 0,
                offset: i64::from(id),
            },
        )
    })
    .collect()
}

/// The event ids the instance forwards from `records`.
fn forwarded(instance: &mut PluginInstance, records: &[Record]) -> Vec<String> {
    let result = instance
        .call_batch(records)
        .unwrap_or_else(|fault| panic!("{fault:?}"));
    assert!(result.failed.is_empty(), "{:?}", result.failed);
    result
        .emitted()
        .filter(|e| *e.route == EmitRoute::Main)
        .map(|e| {
            let value: serde_json::Value = serde_json::from_slice(&e.record.value).unwrap();
            value["event_id"].as_str().unwrap().to_string()
        })
        .collect()
}

fn ids(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|id| format!("e{id}")).collect()
}

#[test]
fn a_swapped_plugin_keeps_the_operators_state_across_languages_and_back() {
    let runtime = runtime();
    let state = state_backend();
    let rust = runtime.load(plugin("validate-dedup")).unwrap();
    let python = runtime.load(plugin("python/validate-dedup")).unwrap();
    let scope = OperatorScope::new("tenant", "swap", "dedup");
    let store = state.open(&scope, None).unwrap();
    let metrics = sluice_host::metrics::OperatorMetrics::new("dedup");
    let config = vec![
        (
            "required".to_string(),
            "event_id:string,user_id:integer,amount:number".to_string(),
        ),
        ("id_field".to_string(), "event_id".to_string()),
    ];
    let mut instance = PluginInstance::new(
        rust.clone(),
        scope,
        store,
        metrics,
        PluginLimits::default(),
        config,
    )
    .unwrap();
    assert_eq!(forwarded(&mut instance, &orders(0..50)), ids(0..50));

    // v2 (Python): ids 25..50 were seen by v1.
    let previous = instance.swap_component(python.clone()).unwrap();
    assert!(Arc::ptr_eq(&previous, &rust));
    assert!(Arc::ptr_eq(instance.running(), &python));
    assert_eq!(forwarded(&mut instance, &orders(25..75)), ids(50..75));

    // A plugin of another world is refused; the running version stays.
    let aggregate = runtime.load(plugin("hot-items")).unwrap();
    let Err(refused) = instance.swap_component(aggregate) else {
        panic!("an aggregate plugin replaced a transform");
    };
    assert!(
        refused.to_string().contains("not a transform plugin"),
        "{refused}"
    );
    assert!(Arc::ptr_eq(instance.running(), &python));

    // Back to v1 (a rollback): ids up to 75 are known.
    let previous = instance.swap_component(previous).unwrap();
    assert!(Arc::ptr_eq(&previous, &python));
    assert_eq!(forwarded(&mut instance, &orders(70..80)), ids(75..80));
}

/// The Bronze -> Silver pipeline (validate and de-duplicate generated
/// orders) with `plugin` as its operator, paced so that a swap lands
/// mid-stream; barriers every 50 ms.
fn paced_pipeline(dir: &std::path::Path, plugin: &std::path::Path) -> std::path::PathBuf {
    let text = format!(
        r#"[pipeline]
name = "swap"
batch_size = 64
checkpoint_interval_ms = 50

[source.generator]
profile = "bronze"
count = 40000
rate = 5000
seed = 7

[[operators]]
name = "validate-dedup"
plugin = "{plugin}"
config = {{ required = "event_id:string,user_id:integer,email:string,card_number:string,amount:number,currency:string,ts:integer", id_field = "event_id" }}

[sink.file]
path = "{dir}/silver.jsonl"

[dead_letter.file]
path = "{dir}/dead-letters.jsonl"
"#,
        plugin = plugin.display(),
        dir = dir.display()
    );
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn open(file: &std::path::Path) -> sluice_host::pipeline::Pipeline {
    let loaded = sluice_host::config::LoadedConfig::load(file).unwrap_or_else(|e| panic!("{e}"));
    sluice_host::pipeline::Pipeline::open(
        &loaded,
        &runtime(),
        &sluice_host::pipeline::wasm_files_only,
        &sluice_host::checkpoint::RestoreFrom::Fresh,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Under load, the operator's plugin goes from Rust to Python at a barrier
/// while the pipeline runs: the output equals a run without the swap (the
/// two versions write the same bytes), so no record was lost, repeated or
/// seen by both versions, and duplicates that straddle the swap are still
/// dropped (the state carried over).
#[test]
fn a_plugin_swapped_at_a_barrier_under_load_changes_nothing_in_the_output() {
    let reference = tempfile::tempdir().unwrap();
    let rust = plugin("validate-dedup");
    open(&paced_pipeline(reference.path(), &rust))
        .run(Arc::new(std::sync::atomic::AtomicBool::new(false)))
        .unwrap();

    // Built and compiled before the run: only the swap itself is timed.
    let python = runtime().load(plugin("python/validate-dedup")).unwrap();
    let swapped = tempfile::tempdir().unwrap();
    let pipeline = open(&paced_pipeline(swapped.path(), &rust));
    let swapper = pipeline.swapper();
    let metrics = pipeline.metrics();
    let run = std::thread::spawn(move || {
        pipeline.run(Arc::new(std::sync::atomic::AtomicBool::new(false)))
    });
    sluice_tests::wait_until(
        "a quarter of the input",
        std::time::Duration::from_secs(60),
        || metrics.snapshot().records_in >= 10_000,
    );
    let before = metrics.snapshot().records_in;
    eprintln!(
        "swap requested after barrier {} ({} barriers at the sinks, {before} records in)",
        metrics
            .last_barrier_id
            .load(std::sync::atomic::Ordering::SeqCst),
        metrics.snapshot().barriers
    );
    let reports = swapper
        .swap(
            "validate-dedup",
            python,
            std::time::Duration::from_secs(60),
            None,
        )
        .unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(reports[0].result.is_ok(), "{reports:?}");
    assert!(
        metrics.snapshot().records_in < 40_000 && before < 40_000,
        "the swap must land mid-stream"
    );
    run.join().unwrap().unwrap();
    for output in ["silver.jsonl", "dead-letters.jsonl"] {
        let expected = std::fs::read_to_string(reference.path().join(output)).unwrap();
        let got = std::fs::read_to_string(swapped.path().join(output)).unwrap();
        assert!(!expected.is_empty());
        // Dead letters carry when and by which plugin build they were
        // rejected, and a JSON parser's message is its language's: the
        // records and the rest of the reasons must match.
        let normalize = |text: &str| -> Vec<String> {
            text.lines()
                .map(|line| {
                    let line = sluice_tests::comparable_record_line(line);
                    let Ok(mut record) = serde_json::from_str::<serde_json::Value>(&line) else {
                        return line;
                    };
                    if let Some(headers) = record["headers"].as_object_mut()
                        && headers
                            .get("sluice.dlq.reason")
                            .and_then(|r| r.as_str())
                            .is_some_and(|r| r.starts_with("invalid JSON value"))
                    {
                        headers.insert("sluice.dlq.reason".into(), "invalid JSON value".into());
                    }
                    record.to_string()
                })
                .collect()
        };
        let (normalized, normalized_expected) = (normalize(&got), normalize(&expected));
        if let Some((a, b)) = normalized
            .iter()
            .zip(&normalized_expected)
            .find(|(a, b)| a != b)
        {
            panic!("{output} differs from the run without a swap:\n{a}\n{b}");
        }
        assert_eq!(normalized.len(), normalized_expected.len(), "{output}");
        if output == "dead-letters.jsonl" {
            // Which version rejected each malformed record, in input order:
            // Rust's serde says "line L column C", Python's json "(char N)".
            // One swap from Rust to Python, after the swap was asked for.
            let versions: Vec<(i64, bool)> = got
                .lines()
                .filter_map(|line| {
                    let record: serde_json::Value = serde_json::from_str(line).ok()?;
                    let reason = record["headers"]["sluice.dlq.reason"].as_str()?;
                    reason.starts_with("invalid JSON value").then(|| {
                        (
                            record["source"]["offset"].as_i64().unwrap_or(-1),
                            reason.contains("(char "),
                        )
                    })
                })
                .collect();
            let swap = versions
                .iter()
                .position(|(_, python)| *python)
                .expect("no record reached the new version");
            assert!(swap > 0, "no record reached the old version");
            assert!(
                versions[swap..].iter().all(|(_, python)| *python),
                "a record went back to the old version"
            );
            assert!(
                versions[swap].0 as u64 >= before,
                "the new version saw a record from before the swap was asked for"
            );
        }
    }
}

/// Nexmark bids counted and summed per auction in 1 s tumbling windows by
/// the aggregate plugin `aggregate`, in two workers, paced so that a swap
/// lands mid-stream; barriers every 50 ms.
fn window_pipeline(dir: &std::path::Path, aggregate: &std::path::Path) -> std::path::PathBuf {
    let text = format!(
        r#"[pipeline]
name = "window-swap"
batch_size = 64
checkpoint_interval_ms = 50
workers = 2
max_out_of_orderness_ms = 200

[source.generator]
profile = "nexmark"
count = 40000
rate = 8000
events_per_second = 4000
max_disorder_ms = 100
seed = 5

[[operators]]
name = "bids"
plugin = "{filter}"
config = {{ modulus = 1 }}

[[operators]]
name = "count-sum"
plugin = "{plugin}"
window = {{ tumbling_ms = 1000 }}
key_field = "auction"
config = {{ field = "price" }}

[sink.file]
path = "{dir}/windows.jsonl"
"#,
        filter = plugin("filter-bids").display(),
        plugin = aggregate.display(),
        dir = dir.display()
    );
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// The window results of a run: (key, window end) -> (count, sum, version).
fn window_results(dir: &std::path::Path) -> Vec<(String, i64, u64, i64, u64)> {
    let text = std::fs::read_to_string(dir.join("windows.jsonl")).unwrap();
    text.lines()
        .map(|line| {
            let r: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                // A numeric key field: the key is a JSON number.
                r["key"].as_u64().expect("a numeric key").to_string(),
                r["window_end"].as_i64().unwrap_or_default(),
                r["result"]["count"].as_u64().unwrap_or_default(),
                r["result"]["sum"].as_i64().unwrap_or_default(),
                r["result"]["version"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

/// Under load, a keyed window's aggregate plugin goes from v1 to v2 at a
/// barrier in both workers: every window's count and sum equal a run that
/// never swapped (windows open across the swap carry their accumulators
/// over, nothing is lost or counted twice), windows fired before the swap
/// say v1 and every window fired after it says v2.
#[test]
fn a_window_aggregate_swapped_at_a_barrier_in_every_worker_keeps_per_key_results_continuous() {
    let v1 = plugin("count-sum");
    let reference = tempfile::tempdir().unwrap();
    open(&window_pipeline(reference.path(), &v1))
        .run(Arc::new(std::sync::atomic::AtomicBool::new(false)))
        .unwrap();
    let expected = window_results(reference.path());
    assert!(expected.len() > 100, "{} windows", expected.len());

    let v2 = runtime().load(plugin("count-sum-v2")).unwrap();
    let swapped = tempfile::tempdir().unwrap();
    let pipeline = open(&window_pipeline(swapped.path(), &v1));
    let swapper = pipeline.swapper();
    let metrics = pipeline.metrics();
    let run = std::thread::spawn(move || {
        pipeline.run(Arc::new(std::sync::atomic::AtomicBool::new(false)))
    });
    sluice_tests::wait_until(
        "a quarter of the input",
        std::time::Duration::from_secs(60),
        || metrics.snapshot().records_in >= 10_000,
    );
    eprintln!(
        "swap requested after barrier {} ({} records in)",
        metrics
            .last_barrier_id
            .load(std::sync::atomic::Ordering::SeqCst),
        metrics.snapshot().records_in
    );
    // Refused: a transform cannot replace a window's aggregate.
    let transform = runtime().load(plugin("identity")).unwrap();
    let refused = swapper.swap(
        "count-sum",
        transform,
        std::time::Duration::from_secs(5),
        None,
    );
    assert!(
        matches!(
            refused,
            Err(sluice_host::dataflow::swap::PluginSwapError::WrongWorld { .. })
        ),
        "{refused:?}"
    );
    let reports = match swapper.swap("count-sum", v2, std::time::Duration::from_secs(60), None) {
        Ok(reports) => reports,
        Err(error) => panic!("{error}; the run ended with {:?}", run.join()),
    };
    assert_eq!(reports.len(), 2, "one report per worker: {reports:?}");
    assert!(reports.iter().all(|r| r.result.is_ok()), "{reports:?}");
    assert_eq!(
        reports[0].barrier, reports[1].barrier,
        "both workers swapped at the same barrier"
    );
    assert!(
        metrics.snapshot().records_in < 40_000,
        "the swap must land mid-stream"
    );
    run.join().unwrap().unwrap();

    let got = window_results(swapped.path());
    let strip = |results: &[(String, i64, u64, i64, u64)]| {
        let mut windows: Vec<(String, i64, u64, i64)> = results
            .iter()
            .map(|(key, end, count, sum, _)| (key.clone(), *end, *count, *sum))
            .collect();
        windows.sort();
        windows
    };
    assert!(
        strip(&got) == strip(&expected),
        "window results differ from the run without a swap"
    );
    // Watermarks and barriers reach both workers in stream order, so every
    // window fired before the swap barrier ends before every window fired
    // after it.
    assert!(got.iter().all(|r| r.4 == 1 || r.4 == 2), "versions");
    let last_v1 = got.iter().filter(|r| r.4 == 1).map(|r| r.1).max();
    let first_v2 = got.iter().filter(|r| r.4 == 2).map(|r| r.1).min();
    let (Some(last_v1), Some(first_v2)) = (last_v1, first_v2) else {
        panic!("both versions must have fired windows: {last_v1:?} {first_v2:?}");
    };
    assert!(
        last_v1 < first_v2,
        "v1 fired a window ending at {last_v1}, after v2 fired one ending at {first_v2}"
    );
}
