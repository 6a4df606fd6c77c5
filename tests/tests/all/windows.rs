//! Event-time windows against a reference model.
//!
//! The model below is deliberately naive: it keeps every value of every
//! window in a list and recomputes results from scratch, walking the input
//! in arrival order with the watermark the source would emit (highest event
//! time seen minus the bound, minus one). Property tests then check the
//! window operator against it:
//!
//! * inputs shuffled within the out-of-orderness bound give exactly the
//!   results of the sorted input: every window once, no updates, nothing late;
//! * inputs with records later than that give exactly the model's late
//!   records and its re-fired updates (with their sequence numbers).

use proptest::prelude::*;
use serde_json::json;
use sluice_host::dataflow::{CheckpointBarrier, Collector, Operator};
use sluice_host::metrics::OperatorMetrics;
use sluice_host::record::dead_letter_headers;
use sluice_host::state::key_group::{self, KeyGroupRange};
use sluice_host::state::{MemoryStateBackend, OperatorScope, RocksStateBackend, StateBackend};
use sluice_host::window::MERGE_FOLDS;
use sluice_host::window::{
    BuiltinAggregate, BuiltinFunction, LateOutput, Window, WindowOperator, WindowOperatorOptions,
    WindowResult, WindowSpec,
};
use sluice_host::{Record, SourcePosition};
use std::collections::BTreeMap;

/// One input event: key, event time, value.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Event {
    key: u8,
    time: i64,
    value: i64,
}

fn record(event: &Event, offset: i64) -> Record {
    let mut record = Record::from_value(
        json!({"k": format!("k{}", event.key), "v": event.value}).to_string(),
        SourcePosition {
            topic: "events".into(),
            partition: 0,
            offset,
        },
    );
    record.event_time = Some(event.time);
    record
}

/// What a run produced: every result in emission order, and the offsets of
/// the records sent to the late output.
#[derive(Debug, Default, PartialEq)]
struct Outcome {
    results: Vec<WindowResult>,
    late: Vec<i64>,
}

/// Runs the window operator over `events` in arrival order, one record per
/// batch, each followed by the watermark the source would emit; a final
/// watermark ends the input.
fn run_operator(
    events: &[Event],
    spec: WindowSpec,
    bound: i64,
    lateness: i64,
    backend: &dyn StateBackend,
) -> Outcome {
    run_operator_with_cache(events, spec, bound, lateness, backend, Memory::UNLIMITED)
}

/// How a window operator holds state in memory: at most `cache_bytes` of
/// windows, and partial accumulators of windows kept in the store for
/// mini-batches of `mini_batch_records` (see `WindowOperatorOptions`).
#[derive(Debug, Clone, Copy)]
struct Memory {
    cache_bytes: usize,
    mini_batch_records: usize,
}

impl Memory {
    /// Every window in memory.
    const UNLIMITED: Memory = Memory::cache(usize::MAX);

    /// A cache of `cache_bytes`, default mini-batches.
    const fn cache(cache_bytes: usize) -> Memory {
        Memory {
            cache_bytes,
            mini_batch_records: sluice_host::window::DEFAULT_MINI_BATCH_RECORDS,
        }
    }
}

/// A window operator summing `v` per `k` over the operator state in
/// `backend`, holding state in memory as `memory` says.
fn window_operator(
    spec: WindowSpec,
    lateness: i64,
    backend: &dyn StateBackend,
    memory: Memory,
) -> WindowOperator {
    window_operator_for(spec, lateness, backend, memory, 0, 1)
}

/// [`window_operator`] as worker `worker` of `workers`, owning its range of
/// key groups.
fn window_operator_for(
    spec: WindowSpec,
    lateness: i64,
    backend: &dyn StateBackend,
    memory: Memory,
    worker: usize,
    workers: usize,
) -> WindowOperator {
    let store = backend
        .open(&OperatorScope::new("t", "p", "window"), None)
        .unwrap();
    let mut options = WindowOperatorOptions::new("window", spec);
    options.allowed_lateness = lateness;
    options.key_field = Some("k".into());
    options.late_output = LateOutput::DeadLetter;
    options.cache_bytes = memory.cache_bytes;
    options.mini_batch_records = memory.mini_batch_records;
    options.key_groups = KeyGroupRange::for_worker(worker, workers, options.max_parallelism);
    let aggregate = BuiltinAggregate::new(BuiltinFunction::Sum, Some("v")).unwrap();
    new_operator(options, aggregate, store)
}

/// A window operator named `window` computing `aggregate` over `store`.
fn new_operator(
    options: WindowOperatorOptions,
    aggregate: BuiltinAggregate,
    store: std::sync::Arc<dyn sluice_host::state::StateStore>,
) -> WindowOperator {
    WindowOperator::new(
        options,
        Box::new(aggregate),
        store,
        OperatorMetrics::new("window"),
    )
    .unwrap()
}

/// Feeds `events` (numbered from `first_offset`) one per batch, each
/// followed by the watermark the source would emit.
fn feed(
    operator: &mut WindowOperator,
    events: &[Event],
    first_offset: usize,
    bound: i64,
    max_seen: &mut i64,
    out: &mut Collector,
) {
    for (offset, event) in events.iter().enumerate() {
        operator
            .process_batch(vec![record(event, (first_offset + offset) as i64)], out)
            .unwrap();
        *max_seen = (*max_seen).max(event.time);
        operator.on_watermark(*max_seen - bound - 1, out).unwrap();
    }
}

/// Passes checkpoint barrier 1 to `operator` (it writes its windows back).
fn checkpoint(operator: &mut WindowOperator, out: &mut Collector) {
    let barrier = CheckpointBarrier {
        id: 1,
        timestamp_ms: 0,
    };
    operator.on_barrier(&barrier, out).unwrap();
}

/// [`run_operator`] holding state in memory as `memory` says.
fn run_operator_with_cache(
    events: &[Event],
    spec: WindowSpec,
    bound: i64,
    lateness: i64,
    backend: &dyn StateBackend,
    memory: Memory,
) -> Outcome {
    let mut operator = window_operator(spec, lateness, backend, memory);
    let mut out = Collector::default();
    let mut max_seen = i64::MIN;
    feed(&mut operator, events, 0, bound, &mut max_seen, &mut out);
    operator.on_watermark(i64::MAX, &mut out).unwrap();
    outcome(out)
}

/// The results and late records in what an operator emitted.
fn outcome(out: Collector) -> Outcome {
    let late = out
        .dead_letter
        .iter()
        .map(|r| {
            let reason = r.header(dead_letter_headers::REASON).unwrap();
            assert!(reason.starts_with(b"late arrival"), "{r:?}");
            assert_eq!(
                r.header("late_arrival").map(|v| v.as_ref()),
                Some(&b"true"[..])
            );
            r.source.offset
        })
        .collect();
    let results = out
        .main
        .iter()
        .map(|r| serde_json::from_slice(&r.value).unwrap())
        .collect();
    Outcome { results, late }
}

/// A model result: the sum of a window's values.
fn result(key: u8, window: Window, values: &[i64], seq: u64) -> WindowResult {
    WindowResult {
        key: json!(format!("k{key}")),
        window_start: window.start,
        window_end: window.end,
        result: json!(values.iter().sum::<i64>()),
        update: seq > 0,
        seq,
    }
}

/// The reference model (tumbling and sliding windows).
fn model(events: &[Event], spec: WindowSpec, bound: i64, lateness: i64) -> Outcome {
    let mut values: BTreeMap<(u8, Window), Vec<i64>> = BTreeMap::new();
    let mut fired: BTreeMap<(u8, Window), u64> = BTreeMap::new();
    let mut outcome = Outcome::default();
    let mut watermark = i64::MIN;
    let mut max_seen = i64::MIN;
    for (offset, event) in events.iter().enumerate() {
        let windows = spec.assign(event.time);
        // Windows in start order, as the operator updates them.
        let mut open: Vec<Window> = windows
            .into_iter()
            .filter(|w| w.end - 1 + lateness > watermark)
            .collect();
        open.sort();
        if open.is_empty() {
            outcome.late.push(offset as i64);
        }
        for window in open {
            let id = (event.key, window);
            values.entry(id).or_default().push(event.value);
            if window.end - 1 <= watermark {
                // Already past its end: every record re-fires it.
                let seq = fired.get(&id).copied().unwrap_or(0);
                outcome
                    .results
                    .push(result(event.key, window, &values[&id], seq));
                fired.insert(id, seq + 1);
            }
        }
        max_seen = max_seen.max(event.time);
        let next = (max_seen - bound - 1).max(watermark);
        advance(&mut values, &mut fired, &mut outcome, next, lateness);
        watermark = next;
    }
    advance(&mut values, &mut fired, &mut outcome, i64::MAX, lateness);
    outcome
}

/// The model's watermark step: fire every window whose end it passed, in
/// end order (then key, then start, as the operator's timers), and forget
/// windows past their lateness.
fn advance(
    values: &mut BTreeMap<(u8, Window), Vec<i64>>,
    fired: &mut BTreeMap<(u8, Window), u64>,
    outcome: &mut Outcome,
    watermark: i64,
    lateness: i64,
) {
    let mut due: Vec<(i64, String, Window, u8)> = values
        .keys()
        .filter(|(key, window)| {
            window.end - 1 <= watermark && !fired.contains_key(&(*key, *window))
        })
        .map(|(key, window)| (window.end - 1, format!("k{key}"), *window, *key))
        .collect();
    due.sort();
    for (_, _, window, key) in due {
        outcome
            .results
            .push(result(key, window, &values[&(key, window)], 0));
        fired.insert((key, window), 1);
    }
    let expired: Vec<(u8, Window)> = values
        .keys()
        .filter(|(_, window)| (window.end - 1).saturating_add(lateness) <= watermark)
        .copied()
        .collect();
    for id in expired {
        values.remove(&id);
        fired.remove(&id);
    }
}

/// The last result per key and window: what a consumer keeping the highest
/// `seq` ends up with.
fn latest(results: &[WindowResult]) -> BTreeMap<(String, i64, i64), serde_json::Value> {
    let mut latest = BTreeMap::new();
    for r in results {
        latest.insert(
            (r.key.to_string(), r.window_start, r.window_end),
            r.result.clone(),
        );
    }
    latest
}

fn specs() -> impl Strategy<Value = WindowSpec> {
    prop_oneof![
        (1i64..50).prop_map(|size| WindowSpec::Tumbling { size }),
        (1i64..10, 1i64..5).prop_map(|(slides, slide)| WindowSpec::Sliding {
            size: slide * slides,
            slide
        }),
    ]
}

/// Events with increasing times, then delayed by up to `bound` each: an
/// arrival order within the out-of-orderness bound.
fn within_bound(bound: i64) -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec((0u8..4, 0i64..20, -50i64..50, 0i64..=bound), 1..60).prop_map(|items| {
        let mut time = 0;
        let mut events: Vec<(i64, Event)> = items
            .into_iter()
            .map(|(key, step, value, delay)| {
                time += step;
                (time + delay, Event { key, time, value })
            })
            .collect();
        events.sort_by_key(|(arrival, _)| *arrival);
        events.into_iter().map(|(_, e)| e).collect()
    })
}

/// Window-state memory budgets: none (every key's windows go back to the
/// store after each batch), a few windows, unlimited; with windows kept in
/// the store, partial accumulators written after every batch, every two
/// (the tests feed one record a batch) or at the default mini-batch.
fn cache_sizes() -> impl Strategy<Value = Memory> {
    let memory = |cache_bytes, mini_batch_records| Memory {
        cache_bytes,
        mini_batch_records,
    };
    prop::sample::select(vec![
        memory(0, 0),
        memory(0, 2),
        Memory::cache(0),
        memory(400, 0),
        memory(400, 2),
        Memory::UNLIMITED,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn shuffles_within_the_bound_give_the_results_of_sorted_input(
        spec in specs(),
        (bound, events) in (0i64..30).prop_flat_map(|bound| (Just(bound), within_bound(bound))),
        memory in cache_sizes(),
    ) {
        let backend = MemoryStateBackend::new(MERGE_FOLDS);
        let outcome = run_operator_with_cache(&events, spec, bound, 0, &backend, memory);
        let mut sorted = events.clone();
        sorted.sort_by_key(|e| e.time);
        let expected = model(&sorted, spec, 0, 0);
        prop_assert!(outcome.late.is_empty(), "late: {:?}", outcome.late);
        prop_assert!(outcome.results.iter().all(|r| !r.update));
        prop_assert_eq!(latest(&outcome.results), latest(&expected.results));
        prop_assert_eq!(outcome.results.len(), expected.results.len());
    }

    #[test]
    fn late_records_are_counted_and_re_fire_exactly_as_the_model(
        spec in specs(),
        bound in 0i64..10,
        lateness in 0i64..40,
        events in prop::collection::vec((0u8..3, 0i64..200, -50i64..50), 1..80),
        memory in cache_sizes(),
    ) {
        let events: Vec<Event> = events
            .into_iter()
            .map(|(key, time, value)| Event { key, time, value })
            .collect();
        let backend = MemoryStateBackend::new(MERGE_FOLDS);
        let outcome = run_operator_with_cache(&events, spec, bound, lateness, &backend, memory);
        let expected = model(&events, spec, bound, lateness);
        prop_assert_eq!(&outcome.late, &expected.late);
        prop_assert_eq!(&outcome.results, &expected.results);
    }

    #[test]
    fn a_restarted_operator_resumes_the_windows_its_store_holds(
        spec in specs(),
        (bound, events) in (0i64..30).prop_flat_map(|bound| (Just(bound), within_bound(bound))),
        split in 0.0f64..1.0,
        memory in cache_sizes(),
        workers_after in 1usize..4,
    ) {
        // The first run stops after a checkpoint barrier, part-way through;
        // the second opens the same state and reads the rest, rescaled to
        // `workers_after` workers that each restore their key groups.
        let backend = MemoryStateBackend::new(MERGE_FOLDS);
        let split = (events.len() as f64 * split) as usize;
        let mut max_seen = i64::MIN;
        let mut first_out = Collector::default();
        {
            let mut first = window_operator(spec, 0, &backend, memory);
            feed(&mut first, &events[..split], 0, bound, &mut max_seen, &mut first_out);
            checkpoint(&mut first, &mut first_out);
        }
        let mut workers: Vec<WindowOperator> = (0..workers_after)
            .map(|worker| window_operator_for(spec, 0, &backend, memory, worker, workers_after))
            .collect();
        let partitioner = workers[0].partitioner().unwrap();
        let mut out = Collector::default();
        for (offset, event) in events[split..].iter().enumerate() {
            let record = record(event, (split + offset) as i64);
            let key = partitioner(&record).unwrap();
            let worker = key_group::worker_for_key_group(
                key_group::key_group(&key, 128),
                workers_after,
                128,
            );
            workers[worker].process_batch(vec![record], &mut out).unwrap();
            max_seen = max_seen.max(event.time);
            for operator in &mut workers {
                operator.on_watermark(max_seen - bound - 1, &mut out).unwrap();
            }
        }
        for operator in &mut workers {
            operator.on_watermark(i64::MAX, &mut out).unwrap();
        }
        let mut results = outcome(first_out).results;
        results.extend(outcome(out).results);
        let mut sorted = events.clone();
        sorted.sort_by_key(|e| e.time);
        let expected = model(&sorted, spec, 0, 0);
        prop_assert_eq!(latest(&results), latest(&expected.results));
        prop_assert_eq!(results.len(), expected.results.len());
    }
}

#[test]
fn sessions_resume_after_a_restart_on_the_same_rocksdb_directory() {
    let spec = WindowSpec::Session { gap: 10 };
    let e = |key, time, value| Event { key, time, value };
    let dir = tempfile::tempdir().unwrap();
    let mut max_seen = i64::MIN;
    let mut out = Collector::default();
    {
        let backend = RocksStateBackend::open(dir.path(), MERGE_FOLDS, Default::default()).unwrap();
        let mut first = window_operator(spec, 0, &backend, Memory::UNLIMITED);
        // k0's session [0, 15) and k1's [3, 13) are open (watermark 4).
        feed(
            &mut first,
            &[e(0, 0, 1), e(1, 3, 7), e(0, 5, 2)],
            0,
            0,
            &mut max_seen,
            &mut out,
        );
        checkpoint(&mut first, &mut out);
    }
    assert!(out.main.is_empty(), "nothing fired before the restart");
    let backend = RocksStateBackend::open(dir.path(), MERGE_FOLDS, Default::default()).unwrap();
    // Windows go back to the store after every batch: restored sessions
    // merge with new records read back from RocksDB.
    let mut second = window_operator(spec, 0, &backend, Memory::cache(0));
    // 12 extends k0's session to [0, 22); 10 extends k1's to [3, 20).
    feed(
        &mut second,
        &[e(0, 12, 4), e(1, 10, 1)],
        3,
        0,
        &mut max_seen,
        &mut out,
    );
    second.on_watermark(i64::MAX, &mut out).unwrap();
    let results = outcome(out).results;
    assert_eq!(
        results,
        vec![
            result(1, Window { start: 3, end: 20 }, &[7, 1], 0),
            result(0, Window { start: 0, end: 22 }, &[1, 2, 4], 0),
        ]
    );
    assert!(second.metrics().plugin_counters.lock().unwrap()["timer_queues_restored"] >= 2);
}

#[test]
fn allowed_lateness_re_fires_updates_and_later_records_are_late() {
    let spec = WindowSpec::Tumbling { size: 10 };
    let e = |key, time, value| Event { key, time, value };
    // Window [0, 10) fires when 25 arrives (watermark 14 with bound 10);
    // 5 arrives within the 10 ms lateness (re-fire, seq 1); 3 arrives after
    // 40 pushed the watermark to 29, past 9 + 10: late.
    let events = [
        e(0, 1, 1),
        e(0, 2, 2),
        e(0, 25, 5),
        e(0, 5, 10),
        e(0, 40, 1),
        e(0, 3, 100),
    ];
    let backend = RocksStateBackend::temporary(MERGE_FOLDS, Default::default()).unwrap();
    let outcome = run_operator(&events, spec, 10, 10, &backend);
    assert_eq!(outcome, model(&events, spec, 10, 10));
    let first: Vec<(i64, serde_json::Value, bool, u64)> = outcome
        .results
        .iter()
        .filter(|r| r.window_start == 0)
        .map(|r| (r.window_end, r.result.clone(), r.update, r.seq))
        .collect();
    assert_eq!(
        first,
        vec![(10, json!(3), false, 0), (10, json!(13), true, 1)]
    );
    assert_eq!(outcome.late, vec![5]);
}

#[test]
fn sessions_merge_and_fire_after_the_gap() {
    let spec = WindowSpec::Session { gap: 10 };
    let e = |key, time, value| Event { key, time, value };
    // Key 0: 1, 5 and 12 form one session [1, 22); 40 starts another. Key 1
    // arrives out of order (8 then 2): one session [2, 18).
    let events = [
        e(0, 1, 1),
        e(1, 8, 10),
        e(0, 12, 3),
        e(1, 2, 20),
        e(0, 5, 2),
        e(0, 40, 7),
    ];
    for backend in [
        Box::new(MemoryStateBackend::new(MERGE_FOLDS)) as Box<dyn StateBackend>,
        Box::new(RocksStateBackend::temporary(MERGE_FOLDS, Default::default()).unwrap()),
    ] {
        let outcome = run_operator(&events, spec, 20, 0, backend.as_ref());
        let got: Vec<(String, i64, i64, serde_json::Value)> = outcome
            .results
            .iter()
            .map(|r| {
                (
                    r.key.as_str().unwrap_or_default().to_string(),
                    r.window_start,
                    r.window_end,
                    r.result.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("k1".into(), 2, 18, json!(30)),
                ("k0".into(), 1, 22, json!(6)),
                ("k0".into(), 40, 50, json!(7)),
            ]
        );
        assert!(outcome.late.is_empty());
    }
}

/// Nexmark q7 end to end on RocksDB state: generated events, a tumbling
/// window of 10 s whose accumulator is computed by the `highest-bid`
/// aggregate plugin, against the highest bid per window computed here from
/// the same events.
#[test]
fn nexmark_q7_highest_bid_plugin_matches_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let results = dir.path().join("q7.jsonl");
    let source = "[source.generator]\nprofile = \"nexmark\"\ncount = 30000\nseed = 3\nevents_per_second = 1000\nmax_disorder_ms = 400";
    sluice_tests::run_pipeline_to_end(
        &format!("[pipeline]\nname = \"events\"\n\n{source}\n\n[sink.file]\npath = {events:?}\n"),
        std::time::Duration::from_secs(120),
    );
    let plugin = sluice_tests::plugin("highest-bid");
    let (_, snapshot) = sluice_tests::run_pipeline_to_end(
        &format!(
            "[pipeline]\nname = \"q7\"\nmax_out_of_orderness_ms = 400\n\n{source}\n\n\
             [[operators]]\nname = \"q7\"\nplugin = {plugin:?}\nwindow = {{ tumbling_ms = 10000 }}\n\n\
             [sink.file]\npath = {results:?}\n"
        ),
        std::time::Duration::from_secs(120),
    );
    assert_eq!(snapshot.dead_letters, 0, "{snapshot:?}");

    // The model: highest price per 10 s window; ties to the earliest bid,
    // then the lowest auction id.
    let mut best: BTreeMap<i64, (u64, i64, u64, u64)> = BTreeMap::new();
    for line in std::fs::read_to_string(&events).unwrap().lines() {
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        if event["event_type"] != "bid" {
            continue;
        }
        let time = event["date_time"].as_i64().unwrap();
        let bid = (
            event["price"].as_u64().unwrap(),
            time,
            event["auction"].as_u64().unwrap(),
            event["bidder"].as_u64().unwrap(),
        );
        let entry = best.entry(time - time.rem_euclid(10_000)).or_insert(bid);
        if (bid.0, std::cmp::Reverse((bid.1, bid.2)))
            > (entry.0, std::cmp::Reverse((entry.1, entry.2)))
        {
            *entry = bid;
        }
    }
    let mut got: BTreeMap<i64, (u64, i64, u64, u64)> = BTreeMap::new();
    for line in std::fs::read_to_string(&results).unwrap().lines() {
        let result: WindowResult = serde_json::from_str(line).unwrap();
        assert!(
            !result.update,
            "in-order input within the bound: {result:?}"
        );
        assert_eq!(result.window_end - result.window_start, 10_000);
        let r = &result.result;
        got.insert(
            result.window_start,
            (
                r["price"].as_u64().unwrap(),
                r["date_time"].as_i64().unwrap(),
                r["auction"].as_u64().unwrap(),
                r["bidder"].as_u64().unwrap(),
            ),
        );
    }
    assert!(best.len() >= 3, "{best:?}");
    assert_eq!(got, best);
}

/// Runs `aggregate` in tumbling 10 ms windows keyed by field `k` (memory
/// state) over `(event time, value)` records, then fires every window.
fn run_keyed_by_k(aggregate: BuiltinAggregate, records: &[(i64, &str)]) -> Collector {
    run_keyed_by_k_in_batches(
        aggregate,
        sluice_host::window::DEFAULT_WINDOW_CACHE_BYTES,
        &[records],
    )
}

/// [`run_keyed_by_k`] over several batches, keeping at most `cache_bytes`
/// of window state in memory.
fn run_keyed_by_k_in_batches(
    aggregate: BuiltinAggregate,
    cache_bytes: usize,
    batches: &[&[(i64, &str)]],
) -> Collector {
    let store = MemoryStateBackend::new(MERGE_FOLDS)
        .open(&OperatorScope::new("t", "p", "window"), None)
        .unwrap();
    let mut options = WindowOperatorOptions::new("window", WindowSpec::Tumbling { size: 10 });
    options.key_field = Some("k".into());
    options.cache_bytes = cache_bytes;
    let mut operator = new_operator(options, aggregate, store);
    let position = SourcePosition {
        topic: "events".into(),
        partition: 0,
        offset: 0,
    };
    let mut out = Collector::default();
    for records in batches {
        let batch = records
            .iter()
            .map(|&(time, value)| {
                let mut record = Record::from_value(value.to_string(), position.clone());
                record.event_time = Some(time);
                record
            })
            .collect();
        operator.process_batch(batch, &mut out).unwrap();
    }
    operator.on_watermark(i64::MAX, &mut out).unwrap();
    out
}

/// A rejected record that would have opened a key's new window leaves that
/// key's other windows alone, also when they are only in the store (no
/// cache: every window is evicted after its batch).
#[test]
fn a_rejected_record_in_a_new_window_keeps_the_keys_stored_windows() {
    let aggregate = BuiltinAggregate::new(BuiltinFunction::Sum, Some("v")).unwrap();
    let out = run_keyed_by_k_in_batches(
        aggregate,
        0,
        &[
            &[(1, r#"{"k":"a","v":1}"#)],
            &[(15, r#"{"k":"a","v":"x"}"#)],
        ],
    );
    let results: Vec<WindowResult> = out
        .main
        .iter()
        .map(|r| serde_json::from_slice(&r.value).unwrap())
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!((results[0].window_start, results[0].window_end), (0, 10));
    assert_eq!(results[0].result, json!(1));
    assert_eq!(out.dead_letter.len(), 1);
}

#[test]
fn records_the_aggregate_rejects_are_dead_lettered_and_open_no_window() {
    let aggregate = BuiltinAggregate::new(BuiltinFunction::Sum, Some("v")).unwrap();
    let out = run_keyed_by_k(
        aggregate,
        &[
            (1, r#"{"k":"a","v":1}"#),
            (2, r#"{"k":"a","v":"x"}"#),
            (15, r#"{"k":"b","v":"y"}"#),
        ],
    );
    let results: Vec<WindowResult> = out
        .main
        .iter()
        .map(|r| serde_json::from_slice(&r.value).unwrap())
        .collect();
    assert_eq!(
        results.len(),
        1,
        "only key a's window [0, 10) fires: {results:?}"
    );
    assert_eq!(results[0].result, json!(1));
    assert_eq!(out.dead_letter.len(), 2);
    for dead in &out.dead_letter {
        let reason = dead.header(dead_letter_headers::REASON).unwrap();
        assert!(
            reason.starts_with(b"cannot aggregate: field `v` is not a number"),
            "{reason:?}"
        );
    }
}

#[test]
fn a_state_directory_keeps_its_number_of_key_groups() {
    let dir = tempfile::tempdir().unwrap();
    let open = |max_parallelism: u16| {
        let file = dir.path().join("pipeline.toml");
        std::fs::write(
            &file,
            format!(
                "[pipeline]\nname = \"p\"\nstate_dir = \"state\"\nmax_parallelism = {max_parallelism}\n\n[source.generator]\ncount = 1\n\n[sink]\nblackhole = {{}}\n"
            ),
        )
        .unwrap();
        let loaded = sluice_host::config::LoadedConfig::load(&file).unwrap();
        sluice_host::pipeline::open_state_backend(&loaded).map(drop)
    };
    open(128).expect("first use records 128 key groups");
    open(128).expect("the same number again");
    let error = open(256).expect_err("a different number is refused");
    let text = error.to_string();
    assert!(text.contains("pipeline.max_parallelism"), "{text}");
    assert!(text.contains("128 key groups"), "{text}");
}

/// A window keyed by a field gives the key back with its JSON type: a
/// numeric field's key is a number, `42` and `"42"` are different keys, and
/// the output record's key is the value's text (no marker).
#[test]
fn window_results_keep_the_json_type_of_the_key_field() {
    let aggregate = BuiltinAggregate::new(BuiltinFunction::Count, None).unwrap();
    let out = run_keyed_by_k(
        aggregate,
        &[
            (1, r#"{"k":42}"#),
            (2, r#"{"k":42}"#),
            (3, r#"{"k":"42"}"#),
            (4, r#"{"k":1.5}"#),
            (5, r#"{"k":true}"#),
        ],
    );
    let mut got: Vec<(serde_json::Value, u64, Option<Vec<u8>>)> = out
        .main
        .iter()
        .map(|r| {
            let result: WindowResult = serde_json::from_slice(&r.value).unwrap();
            let count = result.result.as_u64().unwrap();
            (result.key, count, r.key.as_ref().map(|k| k.to_vec()))
        })
        .collect();
    got.sort_by_key(|(key, _, _)| key.to_string());
    assert_eq!(
        got,
        vec![
            (json!("42"), 1, Some(b"42".to_vec())),
            (json!(1.5), 1, Some(b"1.5".to_vec())),
            (json!(42), 2, Some(b"42".to_vec())),
            (json!(true), 1, Some(b"true".to_vec())),
        ]
    );
}

/// `aggregates` through a pipeline file: count, sum, max and the length of
/// a string field per numeric key and tumbling window, from a JSON-lines
/// file, against a model computed here; a record without the string field
/// goes to the dead-letter output and counts in no column.
#[test]
fn several_builtin_aggregates_in_one_window_match_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("orders.jsonl");
    let output = dir.path().join("windows.jsonl");
    let dead = dir.path().join("dead.jsonl");
    let notes = ["", "short", "a longer note", "héllo wörld"];
    let mut text = String::new();
    let mut model: BTreeMap<(u64, i64), (u64, i64, i64, u64)> = BTreeMap::new();
    for i in 0..2_000u64 {
        let (user, t, amount) = (i % 7, (i * 37 % 5_000) as i64, (i % 13) as i64 - 3);
        if i % 101 == 0 {
            text.push_str(&format!(
                "{{\"user\":{user},\"t\":{t},\"amount\":{amount}}}\n"
            ));
            continue;
        }
        let note = notes[(i % 4) as usize];
        text.push_str(&format!(
            "{{\"user\":{user},\"t\":{t},\"amount\":{amount},\"note\":{note:?}}}\n"
        ));
        let entry = model
            .entry((user, t - t % 1_000))
            .or_insert((0, 0, i64::MIN, 0));
        entry.0 += 1;
        entry.1 += amount;
        entry.2 = entry.2.max(amount);
        entry.3 = entry.3.max(note.chars().count() as u64);
    }
    std::fs::write(&input, text).unwrap();
    let pipeline = format!(
        r#"
[pipeline]
name = "several-aggregates"
max_out_of_orderness_ms = 5000

[source.file]
path = "{}"
timestamp_field = "t"

[[operators]]
name = "per-user"
window = {{ tumbling_ms = 1000 }}
key_field = "user"
aggregates = [
  {{ name = "orders", function = "count" }},
  {{ name = "total", function = "sum", field = "amount" }},
  {{ name = "largest", function = "max", field = "amount" }},
  {{ name = "longest_note", function = "max", field = "length(note)" }},
]

[sink.file]
path = "{}"

[dead_letter.file]
path = "{}"
"#,
        input.display(),
        output.display(),
        dead.display()
    );
    let (_, snapshot) =
        sluice_tests::run_pipeline_to_end(&pipeline, std::time::Duration::from_secs(60));
    assert_eq!(snapshot.dead_letters, 20, "{snapshot:?}");
    let mut got: BTreeMap<(u64, i64), (u64, i64, i64, u64)> = BTreeMap::new();
    for line in std::fs::read_to_string(&output).unwrap().lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = r["key"]
            .as_u64()
            .unwrap_or_else(|| panic!("a numeric key: {line}"));
        let c = &r["result"];
        got.insert(
            (key, r["window_start"].as_i64().unwrap()),
            (
                c["orders"].as_u64().unwrap(),
                c["total"].as_i64().unwrap(),
                c["largest"].as_i64().unwrap(),
                c["longest_note"].as_u64().unwrap(),
            ),
        );
    }
    assert_eq!(got, model);
    let dead_letters = std::fs::read_to_string(&dead).unwrap();
    assert!(
        dead_letters.contains("field `note` is missing"),
        "{dead_letters}"
    );
}

/// Counts a record of `user` at `ts` with `amount` in a model of 1 s
/// count-and-sum windows per user.
fn count_in_model(
    model: &mut BTreeMap<(String, i64), (u64, i64)>,
    user: String,
    ts: i64,
    amount: i64,
) {
    let entry = model.entry((user, ts - ts % 1000)).or_default();
    entry.0 += 1;
    entry.1 += amount;
}

/// The results `count-sum` wrote to the file sink at `path`: (count, sum)
/// by string key and window start.
fn count_sum_results(path: &std::path::Path) -> BTreeMap<(String, i64), (u64, i64)> {
    let mut got = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let result: WindowResult = serde_json::from_str(line).unwrap();
        let key = result.key.as_str().unwrap().to_string();
        got.insert(
            (key, result.window_start),
            (
                result.result["count"].as_u64().unwrap(),
                result.result["sum"].as_i64().unwrap(),
            ),
        );
    }
    got
}

/// What [`run_user_windows`] gives back.
struct UserWindows {
    snapshot: sluice_host::metrics::PipelineSnapshot,
    /// (count, sum) by user and window start.
    results: BTreeMap<(String, i64), (u64, i64)>,
    /// The dead-letter file's text.
    dead_letters: String,
}

impl UserWindows {
    /// The window operator's snapshot.
    fn totals(&self) -> &sluice_host::metrics::OperatorSnapshot {
        self.snapshot
            .operators
            .iter()
            .find(|o| o.name.starts_with("totals"))
            .expect("the totals operator")
    }
}

/// Runs the JSON lines `input` (fields `user`, `ts`, ...) through the
/// operators `before`, then 1 s tumbling windows per `user` computed by
/// the aggregate `plugin` (a count-sum: operator `totals`, with the lines
/// `operator` added to its table, e.g. its `config`), into a file sink, dead letters into a file, with the `[pipeline]`
/// settings `settings`.
fn run_user_windows(
    dir: &std::path::Path,
    case: &str,
    input: &std::path::Path,
    settings: &str,
    before: &str,
    plugin: &std::path::Path,
    operator: &str,
) -> UserWindows {
    let results = dir.join(format!("{case}.jsonl"));
    let dead = dir.join(format!("{case}-dead.jsonl"));
    let (_, snapshot) = sluice_tests::run_pipeline_to_end(
        &format!(
            "[pipeline]\nname = \"{case}\"\n{settings}\n\n\
             [source.file]\npath = {input:?}\ntimestamp_field = \"ts\"\n\n\
             {before}\
             [[operators]]\nname = \"totals\"\nplugin = {plugin:?}\n{operator}\n\
             window = {{ tumbling_ms = 1000 }}\nkey_field = \"user\"\n\n\
             [sink.file]\npath = {results:?}\n\n\
             [dead_letter.file]\npath = {dead:?}\n"
        ),
        std::time::Duration::from_secs(120),
    );
    UserWindows {
        snapshot,
        results: count_sum_results(&results),
        dead_letters: std::fs::read_to_string(&dead).unwrap_or_default(),
    }
}

/// A Rust aggregate plugin (`count-sum`, which exports the packed and the
/// projected `add`) gets all the keys and windows of a batch in one call:
/// the same results and dead letters as a model, with fewer plugin calls
/// than one `add` per key and window.
#[test]
fn the_packed_aggregate_path_adds_a_whole_batch_in_one_call() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut lines = String::new();
    let mut model: BTreeMap<(String, i64), (u64, i64)> = BTreeMap::new();
    let mut bad = 0;
    for i in 0..600i64 {
        let user = format!("u{}", i % 7);
        let ts = i * 10;
        if i % 50 == 13 {
            lines.push_str(&format!(
                "{{\"user\":\"{user}\",\"ts\":{ts},\"amount\":\"x\"}}\n"
            ));
            bad += 1;
            continue;
        }
        lines.push_str(&format!(
            "{{\"user\":\"{user}\",\"ts\":{ts},\"amount\":{i}}}\n"
        ));
        count_in_model(&mut model, user, ts, i);
    }
    std::fs::write(&input, lines).unwrap();
    let plugin = sluice_tests::plugin("count-sum");
    let run = run_user_windows(
        dir.path(),
        "packed",
        &input,
        "batch_size = 1000",
        "",
        &plugin,
        "config = { field = \"amount\" }",
    );
    assert_eq!(run.snapshot.dead_letters, bad, "{:?}", run.snapshot);
    assert_eq!(run.results, model);
    // One batch of 600 records over 42 keys and windows: `init`, the
    // `projected-fields` it reads, a `create` and a `finish` per window, and
    // one `add-projected` (the typed path would make one `add` per window:
    // 3 calls per window).
    let operator = run.totals();
    let windows = model.len() as u64;
    assert_eq!(operator.plugin_calls, 2 + 2 * windows + 1, "{operator:?}");
}

/// An aggregate plugin that names the JSON field it reads (`count-sum`:
/// the summed field) gets it found by the host: by the file source in the
/// pass that reads each line's timestamp and key when the window comes
/// right after it, by the host while packing the batch when a transform
/// made the records. Both give the model's results and dead letters, for
/// one worker and for several, with the field anywhere in the record,
/// escaped keys, duplicates (the last counts) and values that are not
/// integers; so do the Python and JavaScript SDKs' batched
/// `add-projected-text`.
#[test]
fn the_projected_aggregate_path_sums_the_field_wherever_it_is_found() {
    use sluice_host::window::RECORDS_PROJECTED_AHEAD_COUNTER;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut lines = String::new();
    let mut model: BTreeMap<(String, i64), (u64, i64)> = BTreeMap::new();
    let mut bad = 0;
    for i in 0..3000i64 {
        let user = format!("u{}", i % 11);
        let ts = i * 7;
        let line = match i % 9 {
            // Not an integer: a dead letter with the plugin's reason.
            4 if i % 2 == 0 => {
                bad += 1;
                format!("{{\"user\":\"{user}\",\"ts\":{ts},\"amount\":\"{i}\"}}")
            }
            // The field first, an escaped name and a nested object around it.
            1 => format!(
                "{{\"amount\":{i},\"n\":{{\"amount\":-1}},\"q\\\"\":1,\"user\":\"{user}\",\"ts\":{ts}}}"
            ),
            // Twice: the last counts, as in a parsed object.
            2 => format!("{{\"user\":\"{user}\",\"amount\":-5,\"ts\":{ts},\"amount\":{i}}}"),
            // Missing: a dead letter.
            3 if i % 2 == 1 => {
                bad += 1;
                format!("{{\"user\":\"{user}\",\"ts\":{ts}}}")
            }
            _ => format!(
                "{{\"user\":\"{user}\",\"ts\":{ts},\"text\":\"a \\\"b\\\" c\",\"amount\":{i}}}"
            ),
        };
        lines.push_str(&line);
        lines.push('\n');
        if !line.contains(&format!("\"amount\":{i}")) {
            continue;
        }
        count_in_model(&mut model, user, ts, i);
    }
    std::fs::write(&input, lines).unwrap();
    let rust = sluice_tests::plugin("count-sum");
    // The Python and JavaScript templates `sluice plugin new --world
    // aggregate` makes (each in its own directory).
    let scaffolded = |language, name: &str| {
        let parent = dir.path().join(name);
        std::fs::create_dir_all(&parent).unwrap();
        sluice_tests::scaffolded_aggregate(&parent, language)
    };
    let python = scaffolded(sluice_cli::build::Language::Python, "python");
    let js = scaffolded(sluice_cli::build::Language::JavaScript, "js");
    // The Python template without `json_fields`: a Python aggregate has no
    // packed `add`, so it still gets whole batches (no field found; each
    // record parsed in Python).
    let python_without_fields = {
        let parent = dir.path().join("python-without-fields");
        std::fs::create_dir_all(&parent).unwrap();
        let plugin = sluice_cli::scaffold::new_plugin(
            &parent,
            "count-sum",
            sluice_cli::build::Language::Python,
            sluice_cli::scaffold::TemplateWorld::Aggregate,
            &sluice_cli::scaffold::default_sdk_path(),
        )
        .unwrap();
        let app = plugin.join("app.py");
        let text = std::fs::read_to_string(&app).unwrap();
        let without = text.replace("self.json_fields = (self.field,)", "pass");
        assert_ne!(without, text, "the template names its field");
        std::fs::write(&app, without).unwrap();
        sluice_tests::build_plugin_dir(&plugin)
    };
    let identity = sluice_tests::plugin("identity");
    let all = 3000;
    let after_identity = format!("[[operators]]\nname = \"identity\"\nplugin = {identity:?}\n\n");
    for (case, count_sum, before, workers, found_by_source) in [
        ("found-by-the-source", &rust, "", 1, all),
        ("found-by-the-source-two-workers", &rust, "", 2, all),
        ("found-by-the-host", &rust, after_identity.as_str(), 1, 0),
        // The Python and JavaScript SDKs' `add-projected-text`: the same
        // batch and answer, as a string.
        ("python-found-by-the-source", &python, "", 1, all),
        ("python-found-by-the-host", &python, &after_identity, 1, 0),
        ("js-found-by-the-source", &js, "", 1, all),
        ("js-found-by-the-host", &js, &after_identity, 1, 0),
        ("python-without-fields", &python_without_fields, "", 1, 0),
    ] {
        let run = run_user_windows(
            dir.path(),
            case,
            &input,
            &format!("batch_size = 256\nworkers = {workers}"),
            before,
            count_sum,
            "config = { field = \"amount\" }",
        );
        assert_eq!(run.snapshot.dead_letters, bad, "{case}: {:?}", run.snapshot);
        let scaffolded = [&python, &js, &python_without_fields];
        let reason = match scaffolded.contains(&count_sum) {
            true => "field `amount` must be an integer",
            false => "field `amount` is not an integer",
        };
        assert_eq!(
            run.dead_letters.matches(reason).count(),
            bad as usize,
            "{case}: {}",
            run.dead_letters
        );
        assert_eq!(run.results, model, "{case}");
        // Where the plugin's field was found: by the source in its own
        // pass (every record), or by the host (none counted).
        let projected_ahead: u64 = run
            .snapshot
            .operators
            .iter()
            .filter(|o| o.name.starts_with("totals"))
            .filter_map(|o| o.plugin_counters.get(RECORDS_PROJECTED_AHEAD_COUNTER))
            .sum();
        assert_eq!(projected_ahead, found_by_source, "{case}");
        // One `add-projected` call per batch of 256 (12), not one `add` per
        // key and window of each batch (~30 each): beside `init`,
        // `projected-fields` and a `create` and a `finish` per window.
        if workers == 1 {
            let windows = model.len() as u64;
            let calls = run.totals().plugin_calls;
            assert!(
                calls <= 2 + 2 * windows + 3000_u64.div_ceil(256),
                "{case}: {calls} calls for {windows} windows"
            );
        }
    }
}

/// An aggregate plugin that traps on some records (`hostile-aggregate`, on
/// the projected path) loses only those: the batch call that faults is
/// redone group by group and the group that faults record by record, so
/// each trapping record is a dead letter counted as a plugin fault, every
/// other record counts once, and the run goes on to its end.
#[test]
fn an_aggregate_plugin_that_traps_on_a_record_loses_only_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut lines = String::new();
    let mut model: BTreeMap<(String, i64), (u64, i64)> = BTreeMap::new();
    let mut traps = 0;
    for i in 0..1000i64 {
        let user = format!("u{}", i % 13);
        let ts = i * 5;
        let trap = i % 97 == 5;
        lines.push_str(&format!(
            "{{\"user\":\"{user}\",\"ts\":{ts},\"trap\":{trap},\"amount\":{i}}}\n"
        ));
        if trap {
            traps += 1;
            continue;
        }
        count_in_model(&mut model, user, ts, i);
    }
    std::fs::write(&input, lines).unwrap();
    let plugin = sluice_tests::plugin("hostile-aggregate");
    let run = run_user_windows(
        dir.path(),
        "trapping",
        &input,
        "batch_size = 200",
        "",
        &plugin,
        "",
    );
    assert_eq!(run.results, model);
    let operator = run.totals();
    assert_eq!(run.snapshot.dead_letters, traps, "{:?}", run.snapshot);
    assert_eq!(operator.faulted_records, traps, "{operator:?}");
    assert!(operator.traps >= traps, "{operator:?}");
}

/// An aggregate plugin whose memory grows with every batch
/// (`hostile-aggregate` keeps 1 MiB per `leak` record, one per batch) is
/// replaced between batches once it has grown past three quarters of its
/// limit: 40 MiB kept in all against a 16 MiB limit, yet no call meets the
/// limit, no record is lost and every window is the model's.
#[test]
fn a_leaking_aggregate_plugin_is_replaced_between_batches_before_its_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut lines = String::new();
    let mut model: BTreeMap<(String, i64), (u64, i64)> = BTreeMap::new();
    let batch = 50;
    for i in 0..40 * batch {
        let user = format!("u{}", i % 7);
        let ts = i * 3;
        let leak = i % batch == 0;
        lines.push_str(&format!(
            "{{\"user\":\"{user}\",\"ts\":{ts},\"leak\":{leak},\"amount\":{i}}}\n"
        ));
        count_in_model(&mut model, user, ts, i);
    }
    std::fs::write(&input, lines).unwrap();
    let plugin = sluice_tests::plugin("hostile-aggregate");
    let run = run_user_windows(
        dir.path(),
        "leaking",
        &input,
        &format!("batch_size = {batch}"),
        "",
        &plugin,
        "memory_limit_mb = 16",
    );
    assert_eq!(run.results, model);
    let operator = run.totals();
    assert_eq!(run.snapshot.dead_letters, 0, "{:?}", run.snapshot);
    assert_eq!(operator.memory_limit_hits, 0, "{operator:?}");
    assert_eq!(operator.traps, 0, "{operator:?}");
    assert_eq!(operator.faulted_records, 0, "{operator:?}");
    // At least one replacement per 12 MiB kept (three quarters of 16).
    assert!(
        (3..=40).contains(&operator.reinstantiations),
        "{operator:?}"
    );
}

/// The fields a window reads (key and aggregate fields) are read by a file
/// source in the pass that checks each line, and the window takes them from
/// the record instead of parsing the value again: results are the same as
/// when the window parses every value itself, and a record's read fields
/// are what the window uses.
#[test]
fn a_window_after_a_file_source_takes_the_fields_the_source_read() {
    use sluice_host::connectors::file::{FileSource, FileSourceOptions};
    use sluice_host::dataflow::Source;
    use sluice_json::fields::{FieldValue, extract};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.jsonl");
    let mut lines = String::new();
    for i in 0..200i64 {
        // Keys with escapes, missing values, nested objects and arrays
        // around the fields read.
        let key = if i % 7 == 0 {
            "k\\\"q".to_string()
        } else {
            format!("k{}", i % 5)
        };
        let value = if i % 11 == 0 {
            String::new()
        } else {
            format!(",\"v\":{}", i * 3 - 50)
        };
        lines.push_str(&format!(
            "{{\"n\":{{\"v\":[1,2]}},\"k\":\"{key}\"{value},\"ts\":{}}}\n",
            i * 3
        ));
    }
    lines.push_str("not json\n[1,2]\n{\"ts\":700}\n");
    std::fs::write(&path, lines).unwrap();
    let options = FileSourceOptions {
        timestamp_field: Some("ts".into()),
        ..FileSourceOptions::default()
    };
    let spec = WindowSpec::Tumbling { size: 50 };

    let backend = MemoryStateBackend::new(MERGE_FOLDS);
    let mut reading_ahead = window_operator(spec, 0, &backend, Memory::UNLIMITED);
    let fields = reading_ahead.reads_fields().expect("a window reads fields");
    assert_eq!(fields.len(), 2, "the key field and the summed field");
    let mut source = FileSource::open("file", &path, options.clone()).unwrap();
    source.read_ahead(fields.clone());
    let mut records = Vec::new();
    let mut dead_letters = 0;
    while let Some(batch) = source.next_batch(64).unwrap() {
        records.extend(batch.records);
        dead_letters += batch.dead_letters.len();
    }
    assert_eq!(dead_letters, 2, "the line that is not JSON and the array");
    for record in &records {
        let read = record.read_fields.as_ref().expect("fields read ahead");
        assert_eq!(read.paths.as_deref(), Some(&fields[..]));
        assert_eq!(read.values, extract(&record.value, &fields).unwrap());
    }

    // The same records with nothing read ahead: the window parses them.
    let parsing: Vec<Record> = records
        .iter()
        .cloned()
        .map(|mut record| {
            record.read_fields = None;
            record
        })
        .collect();
    let run = |operator: &mut WindowOperator, records: Vec<Record>| {
        let mut out = Collector::default();
        for batch in records.chunks(16) {
            operator.process_batch(batch.to_vec(), &mut out).unwrap();
        }
        operator.on_watermark(i64::MAX, &mut out).unwrap();
        out
    };
    let ahead = run(&mut reading_ahead, records.clone());
    let other_backend = MemoryStateBackend::new(MERGE_FOLDS);
    let parsed = run(
        &mut window_operator(spec, 0, &other_backend, Memory::UNLIMITED),
        parsing,
    );
    assert!(ahead.main.len() > 10, "{}", ahead.main.len());
    assert_eq!(ahead.main, parsed.main);
    assert_eq!(ahead.dead_letter.len(), parsed.dead_letter.len());
    assert!(!ahead.dead_letter.is_empty(), "the record without key");

    // The window uses what was read: a record whose read fields name
    // another key is counted under that key.
    let mut record = records[1].clone();
    if let Some(read) = record.read_fields.as_mut() {
        read.values[0] = Some(FieldValue::Str("read-ahead".into()));
    }
    let third_backend = MemoryStateBackend::new(MERGE_FOLDS);
    let out = run(
        &mut window_operator(spec, 0, &third_backend, Memory::UNLIMITED),
        vec![record],
    );
    let result: WindowResult = serde_json::from_slice(&out.main[0].value).unwrap();
    assert_eq!(result.key, json!("read-ahead"));
}

/// A pipeline hands a window's fields to the file source before it: every
/// record reaches the window with its fields read (on one worker and on
/// two, behind the key-by exchange), and with an operator between them,
/// which makes new records, the window parses each value itself.
#[test]
fn a_pipeline_has_its_file_source_read_ahead_for_a_window_right_after_it() {
    use sluice_host::window::RECORDS_READ_AHEAD_COUNTER;

    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let lines: String = (0..3000)
        .map(|i| format!("{{\"k\":\"k{}\",\"v\":{i},\"ts\":{}}}\n", i % 13, i * 7))
        .collect();
    std::fs::write(&input, lines).unwrap();
    let identity = sluice_tests::plugin("identity");
    let run = |workers: usize, between: &str| -> u64 {
        let text = format!(
            r#"
[pipeline]
name = "read-ahead"
workers = {workers}

[source.file]
path = "{input}"
timestamp_field = "ts"
{between}
[[operators]]
name = "window"
window = {{ tumbling_ms = 1000 }}
key_field = "k"
aggregates = [{{ name = "sum", function = "sum", field = "v" }}]

[sink.file]
path = "{output}"
"#,
            input = input.display(),
            output = dir
                .path()
                .join(format!("out-{workers}-{}.jsonl", between.len()))
                .display(),
        );
        let file = dir.path().join("pipeline.toml");
        std::fs::write(&file, text).unwrap();
        let loaded =
            sluice_host::config::LoadedConfig::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let pipeline = sluice_host::pipeline::Pipeline::open(
            &loaded,
            &sluice_tests::runtime(),
            &sluice_host::pipeline::wasm_files_only,
            &sluice_host::checkpoint::RestoreFrom::Fresh,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let metrics = pipeline.metrics();
        pipeline
            .run(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
                false,
            )))
            .unwrap_or_else(|e| panic!("{e}"));
        let snapshot = metrics.snapshot();
        let windows: Vec<_> = snapshot
            .operators
            .iter()
            .filter(|op| op.name == "window" || op.name.starts_with("window#"))
            .collect();
        assert_eq!(windows.iter().map(|op| op.records_in).sum::<u64>(), 3000);
        windows
            .iter()
            .map(|op| {
                op.plugin_counters
                    .get(RECORDS_READ_AHEAD_COUNTER)
                    .copied()
                    .unwrap_or(0)
            })
            .sum()
    };
    assert_eq!(run(1, ""), 3000, "one worker");
    assert_eq!(run(2, ""), 3000, "two workers");
    let transform = format!(
        "\n[[operators]]\nname = \"identity\"\nplugin = \"{}\"\n",
        identity.display()
    );
    assert_eq!(run(1, &transform), 0, "an operator in between");
}

/// Windows kept only in RocksDB (`state_cache_mb = 0`) with built-in
/// aggregates take each batch as a merge operand (no read): RocksDB folds
/// the operands when a window fires, and in its flushes and compactions,
/// also after a restart on the same directory. Results equal a model, for
/// one built-in function and for several (`aggregates = [..]`), with
/// negative and float values; with a little memory, windows created in
/// memory and evicted take operands on top of their stored state; a TTL
/// store, which cannot merge, gives the same results by reading windows
/// back. Mini-batches combine several batches' partials into one operand
/// per window, and read a window back once for several batches when the
/// store cannot merge; written after every batch, there is about one
/// operand (or read) per window and batch.
#[test]
fn windows_kept_in_rocksdb_fold_merge_operands_across_flushes_compactions_and_a_restart() {
    const KEYS: u64 = 40;
    const BATCHES: u64 = 600;
    const PER_BATCH: u64 = 100;
    let scope = OperatorScope::new("t", "p", "window");
    // Record `i`: key, event time (1 ms apart, so each 1 s window takes
    // ten batches), value; every third value is a float.
    let value_of = |i: u64| -> serde_json::Value {
        let v = (i * 7919 % 201) as i64 - 100;
        if i.is_multiple_of(3) {
            json!(v as f64 + 0.5)
        } else {
            json!(v)
        }
    };
    let batch = |b: u64| -> Vec<Record> {
        (b * PER_BATCH..(b + 1) * PER_BATCH)
            .map(|i| {
                let value = json!({ "k": i % KEYS, "v": value_of(i) }).to_string();
                let mut record = Record::from_value(
                    value,
                    SourcePosition {
                        topic: "events".into(),
                        partition: 0,
                        offset: i as i64,
                    },
                );
                record.event_time = Some(i as i64);
                record
            })
            .collect()
    };
    // (key, window start) -> (count, sum, min, max)
    let mut model: BTreeMap<(u64, i64), (u64, f64, f64, f64)> = BTreeMap::new();
    for i in 0..BATCHES * PER_BATCH {
        let v = value_of(i).as_f64().unwrap();
        let entry =
            model
                .entry((i % KEYS, i as i64 / 1000 * 1000))
                .or_insert((0, 0.0, f64::MAX, f64::MIN));
        entry.0 += 1;
        entry.1 += v;
        entry.2 = entry.2.min(v);
        entry.3 = entry.3.max(v);
    }
    let aggregate = |columns: bool| {
        if columns {
            BuiltinAggregate::columns(&[
                ("n", BuiltinFunction::Count, None),
                ("sum", BuiltinFunction::Sum, Some("v")),
                ("min", BuiltinFunction::Min, Some("v")),
                ("max", BuiltinFunction::Max, Some("v")),
            ])
            .unwrap()
        } else {
            BuiltinAggregate::new(BuiltinFunction::Sum, Some("v")).unwrap()
        }
    };
    // Mini-batches of 0 records write each batch's operands at its end;
    // 250 records (2.5 batches) combine a few batches' partials (each
    // window takes ten batches), written part-way through windows.
    for (columns, ttl, cache_bytes, mini_batch_records) in [
        (false, false, 0, 0),
        (false, false, 0, 250),
        (true, false, 0, 0),
        (true, false, 0, 250),
        (true, false, 2_000, 0),
        (true, false, 2_000, 250),
        (true, true, 0, 0),
        (true, true, 0, 250),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let operator = |backend: &RocksStateBackend| {
            let ttl = ttl.then(|| sluice_host::state::StateTtl {
                ttl: std::time::Duration::from_secs(3600),
                clock: sluice_host::state::system_clock(),
            });
            let store = backend.open(&scope, ttl).unwrap();
            let mut options =
                WindowOperatorOptions::new("window", WindowSpec::Tumbling { size: 1000 });
            options.key_field = Some("k".into());
            options.cache_bytes = cache_bytes;
            options.mini_batch_records = mini_batch_records;
            new_operator(options, aggregate(columns), store)
        };
        let mut out = Collector::default();
        let mut merges = 0;
        let mut loads = 0;
        let restart_after = BATCHES / 2;
        {
            let backend =
                RocksStateBackend::open(dir.path(), MERGE_FOLDS, Default::default()).unwrap();
            let mut first = operator(&backend);
            for b in 0..restart_after {
                first.process_batch(batch(b), &mut out).unwrap();
                // The watermark trails by 300 ms.
                first
                    .on_watermark((b * PER_BATCH) as i64 - 300, &mut out)
                    .unwrap();
                if b == restart_after / 2 {
                    // Operands of open windows folded by a compaction.
                    backend.open(&scope, None).unwrap().compact().unwrap();
                }
            }
            checkpoint(&mut first, &mut out);
            let counters = first.metrics().plugin_counters.lock().unwrap().clone();
            merges += counters.get("state_merges").copied().unwrap_or(0);
            loads += counters.get("state_cache_loads").copied().unwrap_or(0);
        }
        let backend = RocksStateBackend::open(dir.path(), MERGE_FOLDS, Default::default()).unwrap();
        let mut second = operator(&backend);
        for b in restart_after..BATCHES {
            second.process_batch(batch(b), &mut out).unwrap();
            second
                .on_watermark((b * PER_BATCH) as i64 - 300, &mut out)
                .unwrap();
        }
        second.on_watermark(i64::MAX, &mut out).unwrap();
        let counters = second.metrics().plugin_counters.lock().unwrap().clone();
        assert!(counters["timer_queues_restored"] > 0, "{counters:?}");
        merges += counters.get("state_merges").copied().unwrap_or(0);
        loads += counters.get("state_cache_loads").copied().unwrap_or(0);
        let case =
            format!("columns {columns}, cache {cache_bytes}, mini-batch {mini_batch_records}");
        if ttl {
            assert_eq!(merges, 0, "a store with a TTL cannot merge");
            // Without merges, windows are read back: once per batch that
            // touches them, or once per mini-batch.
            let per_batch = BATCHES * KEYS;
            if mini_batch_records == 0 {
                assert!(loads >= per_batch / 2, "{loads} loads ({case})");
            } else {
                assert!(
                    (per_batch / 10..per_batch / 2).contains(&loads),
                    "{loads} loads ({case})"
                );
            }
        } else if mini_batch_records == 0 {
            // Most windows a batch touches are one operand (40 keys).
            assert!(
                merges >= BATCHES * KEYS / 4,
                "{merges} merge operands ({case})"
            );
        } else {
            // A window's ten batches take about one operand per
            // mini-batch: fewer than one per batch, more than one.
            assert!(
                (BATCHES * KEYS / 10..BATCHES * KEYS / 2).contains(&merges),
                "{merges} merge operands ({case})"
            );
        }
        let mut got: BTreeMap<(u64, i64), (u64, f64, f64, f64)> = BTreeMap::new();
        for record in &out.main {
            let result: WindowResult = serde_json::from_slice(&record.value).unwrap();
            assert!(!result.update, "{result:?}");
            let key = (result.key.as_u64().unwrap(), result.window_start);
            let r = &result.result;
            let row = if columns {
                (
                    r["n"].as_u64().unwrap(),
                    r["sum"].as_f64().unwrap(),
                    r["min"].as_f64().unwrap(),
                    r["max"].as_f64().unwrap(),
                )
            } else {
                let expected = model[&key];
                (expected.0, r.as_f64().unwrap(), expected.2, expected.3)
            };
            assert!(got.insert(key, row).is_none(), "{key:?} fired twice");
        }
        assert_eq!(got.len(), model.len(), "ttl {ttl}, {case}");
        for (key, expected) in &model {
            let row = got[key];
            assert_eq!(
                (row.0, row.2, row.3),
                (expected.0, expected.2, expected.3),
                "{key:?}"
            );
            assert!(
                (row.1 - expected.1).abs() < 1e-6,
                "{key:?}: {row:?} vs {expected:?}"
            );
        }
    }
}

/// `[pipeline] state_mini_batch_records` reaches the window operator: a
/// pipeline whose windows live in RocksDB (`state_cache_mb = 0`) gives the
/// same results with mini-batches of one batch and of the default size,
/// with fewer merge operands for the larger; a value out of range stops it
/// at start-up naming the field.
#[test]
fn the_pipelines_mini_batch_setting_changes_how_often_rocksdb_is_written_not_the_results() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let lines: String = (0..20_000)
        .map(|i| format!("{{\"k\":{},\"v\":{i},\"ts\":{i}}}\n", i % 50))
        .collect();
    std::fs::write(&input, lines).unwrap();
    let text = |mini_batch: &str, output: &std::path::Path| {
        format!(
            r#"
[pipeline]
name = "mini-batch"
batch_size = 100
state_cache_mb = 0
{mini_batch}

[source.file]
path = "{input}"
timestamp_field = "ts"

[[operators]]
name = "window"
window = {{ tumbling_ms = 1000 }}
key_field = "k"
aggregates = [{{ name = "n", function = "count" }}, {{ name = "sum", function = "sum", field = "v" }}]

[sink.file]
path = "{output}"
"#,
            input = input.display(),
            output = output.display(),
        )
    };
    let run = |mini_batch: &str| -> (Vec<String>, u64) {
        let output = dir.path().join(format!("out-{}.jsonl", mini_batch.len()));
        let (_, snapshot) = sluice_tests::run_pipeline_to_end(
            &text(mini_batch, &output),
            std::time::Duration::from_secs(60),
        );
        let merges = snapshot
            .operators
            .iter()
            .filter_map(|op| op.plugin_counters.get("state_merges"))
            .sum();
        let mut results: Vec<String> = std::fs::read_to_string(&output)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        results.sort();
        (results, merges)
    };
    let (every_batch, every_batch_merges) = run("state_mini_batch_records = 0");
    let (default, default_merges) = run("");
    // 20 windows of 50 keys.
    assert_eq!(every_batch.len(), 1000);
    assert_eq!(every_batch, default);
    // Each batch of 100 records touches the 50 keys' window: 50 operands
    // a batch, 200 batches; mini-batches of 16,384 records write about one
    // a window: two when one straddles a mini-batch's end, more when
    // firings (which write what is pending before they read) come often,
    // as on a loaded machine (2,050 with four tests at a time on 2 cores).
    assert!(every_batch_merges >= 9_000, "{every_batch_merges}");
    assert!(default_merges <= 3_000, "{default_merges}");
    let file = dir.path().join("pipeline.toml");
    let out = dir.path().join("never.jsonl");
    std::fs::write(&file, text("state_mini_batch_records = 100000000", &out)).unwrap();
    let error = match sluice_host::config::LoadedConfig::load(&file) {
        Ok(_) => panic!("an out-of-range mini-batch was accepted"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains("pipeline.toml") && error.contains("state_mini_batch_records"),
        "{error}"
    );
}

/// A watermark that fires more windows than one call of `on_watermark`
/// emits: the rest come from the next calls at the same watermark (the
/// chain calls again while `has_more_to_fire`), each window once, in the
/// order of time and key, on RocksDB with a cache too small for them (most
/// are read back from the store as they fire).
#[test]
fn a_watermark_firing_many_windows_emits_them_in_pieces_in_order() {
    let backend = RocksStateBackend::temporary(MERGE_FOLDS, Default::default()).unwrap();
    let spec = WindowSpec::Tumbling { size: 10 };
    let mut operator = window_operator(spec, 0, &backend, Memory::cache(64 << 10));
    // 40 keys x 300 windows, in one batch: nothing fires before the end.
    let events: Vec<Event> = (0..12_000i64)
        .map(|i| Event {
            key: (i % 40) as u8,
            time: (i / 40) * 10,
            value: i,
        })
        .collect();
    let mut out = Collector::default();
    let batch = events
        .iter()
        .enumerate()
        .map(|(offset, event)| record(event, offset as i64))
        .collect();
    operator.process_batch(batch, &mut out).unwrap();
    assert!(out.main.is_empty());
    let mut pieces = Vec::new();
    loop {
        let mut piece = Collector::default();
        operator.on_watermark(i64::MAX, &mut piece).unwrap();
        pieces.push(piece.main.len());
        out.main.extend(piece.main);
        if !operator.has_more_to_fire() {
            break;
        }
    }
    assert!(
        pieces.len() >= 3 && pieces.iter().all(|&n| n <= 4096),
        "{pieces:?}"
    );
    // By window end, then key as the operator orders keys ("k1" < "k10").
    let mut expected: BTreeMap<(i64, String), (Window, Vec<i64>, u8)> = BTreeMap::new();
    for event in &events {
        let window = spec.assign(event.time)[0];
        expected
            .entry((window.end, format!("k{}", event.key)))
            .or_insert((window, Vec::new(), event.key))
            .1
            .push(event.value);
    }
    let expected: Vec<WindowResult> = expected
        .into_values()
        .map(|(window, values, key)| result(key, window, &values, 0))
        .collect();
    assert_eq!(outcome(out).results, expected);
}

/// State written before timers were kept in the store (windows without
/// timer keys) gets its timers from one scan at the first restore, and its
/// windows fire as if nothing had changed.
#[test]
fn windows_stored_without_timers_get_them_at_restore_and_fire() {
    let backend = MemoryStateBackend::new(MERGE_FOLDS);
    let spec = WindowSpec::Tumbling { size: 10 };
    let events: Vec<Event> = (0..50i64)
        .map(|i| Event {
            key: (i % 5) as u8,
            time: i,
            value: i,
        })
        .collect();
    let mut out = Collector::default();
    {
        let mut first = window_operator(spec, 0, &backend, Memory::cache(0));
        let batch = events
            .iter()
            .enumerate()
            .map(|(offset, event)| record(event, offset as i64))
            .collect();
        first.process_batch(batch, &mut out).unwrap();
        checkpoint(&mut first, &mut out);
    }
    // Timer keys have 0xFFFFFFFF where a window's key has its length.
    let store = backend
        .open(&OperatorScope::new("t", "p", "window"), None)
        .unwrap();
    let timers: Vec<Vec<u8>> = store
        .range(&[], None)
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| key.get(2..6) == Some(&[0xFF; 4][..]))
        .collect();
    assert!(!timers.is_empty());
    for key in timers {
        store.delete(&key).unwrap();
    }
    let mut second = window_operator(spec, 0, &backend, Memory::cache(0));
    second.on_watermark(i64::MAX, &mut out).unwrap();
    let counters = second.metrics().plugin_counters.lock().unwrap().clone();
    assert_eq!(counters["windows_given_timers"], 25, "{counters:?}");
    let order = |r: &WindowResult| (r.window_start, r.key.to_string());
    let mut results = outcome(out).results;
    results.sort_by_key(order);
    let mut expected = model(&events, spec, 1_000, 0).results;
    expected.sort_by_key(order);
    assert_eq!(results, expected);
}
