//! Interval join against a brute-force join.

use proptest::prelude::*;
use serde_json::{Value, json};
use sluice_host::dataflow::{CheckpointBarrier, Collector, Operator};
use sluice_host::join::{IntervalJoinOperator, IntervalJoinOptions, JoinSide, SideSelector};
use sluice_host::metrics::OperatorMetrics;
use sluice_host::state::key_group::KeyGroupRange;
use sluice_host::state::{
    MemoryStateBackend, OperatorScope, RocksStateBackend, StateBackend, StateStore,
};
use sluice_host::window::LateOutput;
use sluice_host::window::MERGE_FOLDS;
use sluice_host::{Record, SourcePosition};

/// An order (left) or a payment (right).
#[derive(Debug, Clone, Copy)]
struct Event {
    left: bool,
    key: u8,
    time: i64,
    id: usize,
}

fn side(value: &str) -> JoinSide {
    JoinSide {
        selector: SideSelector::FieldEquals {
            field: "kind".into(),
            value: value.into(),
        },
        key_field: "customer".into(),
    }
}

/// The join of orders and payments by customer over the operator state in
/// `backend`, holding up to `cache_bytes` of new records in memory.
fn join_operator(
    lower: i64,
    upper: i64,
    backend: &dyn StateBackend,
    cache_bytes: usize,
) -> IntervalJoinOperator {
    let store = backend
        .open(&OperatorScope::new("t", "p", "join"), None)
        .unwrap();
    IntervalJoinOperator::new(
        IntervalJoinOptions {
            name: "join".into(),
            left: side("order"),
            right: side("payment"),
            lower,
            upper,
            late_output: LateOutput::DeadLetter,
            max_parallelism: 128,
            key_groups: KeyGroupRange { start: 0, end: 128 },
            cache_bytes,
        },
        store,
        OperatorMetrics::new("join"),
    )
    .unwrap()
}

/// How a run feeds the join.
#[derive(Debug, Clone, Copy)]
struct Feeding {
    /// Records per batch.
    batch: usize,
    /// A checkpoint barrier after every this many batches (0: none).
    barrier_every: usize,
    /// Memory for new records before they go to the store.
    cache_bytes: usize,
}

const ONE_BY_ONE: Feeding = Feeding {
    batch: 1,
    barrier_every: 0,
    cache_bytes: 0,
};

fn feedings() -> impl Strategy<Value = Feeding> {
    (
        1usize..6,
        0usize..4,
        prop::sample::select(vec![0, 200, usize::MAX]),
    )
        .prop_map(|(batch, barrier_every, cache_bytes)| Feeding {
            batch,
            barrier_every,
            cache_bytes,
        })
}

/// Feeds `events` in arrival order as `feeding` says, each batch followed
/// by the source's watermark.
fn feed(
    join: &mut IntervalJoinOperator,
    events: &[Event],
    feeding: Feeding,
    bound: i64,
    max_seen: &mut i64,
    out: &mut Collector,
) {
    for (index, chunk) in events.chunks(feeding.batch.max(1)).enumerate() {
        let records = chunk
            .iter()
            .map(|event| {
                let kind = if event.left { "order" } else { "payment" };
                let mut record = Record::from_value(
                    json!({"kind": kind, "customer": event.key, "id": event.id}).to_string(),
                    SourcePosition {
                        topic: "events".into(),
                        partition: 0,
                        offset: event.id as i64,
                    },
                );
                record.event_time = Some(event.time);
                *max_seen = (*max_seen).max(event.time);
                record
            })
            .collect();
        join.process_batch(records, out).unwrap();
        join.on_watermark(*max_seen - bound - 1, out).unwrap();
        if feeding.barrier_every > 0 && (index + 1) % feeding.barrier_every == 0 {
            let barrier = CheckpointBarrier {
                id: index as u64,
                timestamp_ms: 0,
            };
            join.on_barrier(&barrier, out).unwrap();
        }
    }
}

/// The joined (left id, right id) pairs, sorted, and the ids sent to the
/// late output.
fn joined(out: &Collector) -> (Vec<(u64, u64)>, Vec<u64>) {
    let mut pairs: Vec<(u64, u64)> = out
        .main
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_slice(&r.value).unwrap();
            (
                v["left"]["id"].as_u64().unwrap(),
                v["right"]["id"].as_u64().unwrap(),
            )
        })
        .collect();
    pairs.sort();
    let late = out
        .dead_letter
        .iter()
        .map(|r| r.source.offset as u64)
        .collect();
    (pairs, late)
}

/// The keys of what the join's store holds besides each key group's last
/// arrival sequence (a 6-byte key: group, `FF FF FF FE`): buffered records
/// and their expiry timers.
fn buffered(store: &dyn StateStore) -> Vec<Vec<u8>> {
    store
        .scan(&[])
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| !(key.len() == 6 && key[2..] == [0xFF, 0xFF, 0xFF, 0xFE]))
        .collect()
}

/// Runs the join over `events` in arrival order as `feeding` says, then
/// ends the input; returns [`joined`]. Every buffered record must be gone
/// from the store by then.
fn run_join(
    events: &[Event],
    lower: i64,
    upper: i64,
    bound: i64,
    feeding: Feeding,
    backend: &dyn StateBackend,
) -> (Vec<(u64, u64)>, Vec<u64>) {
    let mut join = join_operator(lower, upper, backend, feeding.cache_bytes);
    let mut out = Collector::default();
    let mut max_seen = i64::MIN;
    feed(&mut join, events, feeding, bound, &mut max_seen, &mut out);
    join.on_watermark(i64::MAX, &mut out).unwrap();
    join.finish(&mut out).unwrap();
    let store = backend
        .open(&OperatorScope::new("t", "p", "join"), None)
        .unwrap();
    assert_eq!(
        buffered(store.as_ref()),
        Vec::<Vec<u8>>::new(),
        "expired records stay in the store"
    );
    joined(&out)
}

/// Events with increasing times (from -50, so negative times too), each
/// delayed by at most `bound`, in arrival order: none is late.
fn in_bound_events(items: Vec<(bool, u8, i64, i64)>, bound: i64) -> Vec<Event> {
    let mut time = -50;
    let mut events: Vec<(i64, Event)> = items
        .into_iter()
        .enumerate()
        .map(|(id, (left, key, step, delay))| {
            time += step;
            (
                time + delay.min(bound),
                Event {
                    left,
                    key,
                    time,
                    id,
                },
            )
        })
        .collect();
    events.sort_by_key(|(arrival, e)| (*arrival, e.id));
    events.into_iter().map(|(_, e)| e).collect()
}

/// Every (order, payment) pair with the same customer and the payment
/// within [order + lower, order + upper].
fn brute_force(events: &[Event], lower: i64, upper: i64) -> Vec<(u64, u64)> {
    let mut pairs = Vec::new();
    for l in events.iter().filter(|e| e.left) {
        for r in events.iter().filter(|e| !e.left) {
            if l.key == r.key && l.time + lower <= r.time && r.time <= l.time + upper {
                pairs.push((l.id as u64, r.id as u64));
            }
        }
    }
    pairs.sort();
    pairs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn interval_join_equals_a_brute_force_join(
        lower in -20i64..10,
        width in 0i64..30,
        bound in 0i64..20,
        feeding in feedings(),
        items in prop::collection::vec((any::<bool>(), 0u8..4, 0i64..10, 0i64..20), 1..80),
    ) {
        let upper = lower + width;
        let events = in_bound_events(items, bound);
        let (pairs, late) =
            run_join(&events, lower, upper, bound, feeding, &MemoryStateBackend::new(MERGE_FOLDS));
        prop_assert!(late.is_empty(), "late: {late:?}");
        prop_assert_eq!(pairs, brute_force(&events, lower, upper));
    }

    #[test]
    fn a_restarted_join_resumes_the_records_its_store_holds(
        lower in -20i64..10,
        width in 0i64..30,
        bound in 0i64..20,
        items in prop::collection::vec((any::<bool>(), 0u8..4, 0i64..10, 0i64..20), 1..80),
        split in 0.0f64..1.0,
        feeding in feedings(),
    ) {
        let upper = lower + width;
        let events = in_bound_events(items, bound);
        let split = (events.len() as f64 * split) as usize;
        let backend = MemoryStateBackend::new(MERGE_FOLDS);
        let mut out = Collector::default();
        let mut max_seen = i64::MIN;
        {
            // The first run stops right after a checkpoint barrier.
            let mut first = join_operator(lower, upper, &backend, feeding.cache_bytes);
            feed(&mut first, &events[..split], feeding, bound, &mut max_seen, &mut out);
            first.on_barrier(&CheckpointBarrier { id: 99, timestamp_ms: 0 }, &mut out).unwrap();
        }
        let mut second = join_operator(lower, upper, &backend, feeding.cache_bytes);
        feed(&mut second, &events[split..], feeding, bound, &mut max_seen, &mut out);
        second.on_watermark(i64::MAX, &mut out).unwrap();
        let store = backend.open(&OperatorScope::new("t", "p", "join"), None).unwrap();
        prop_assert_eq!(
            buffered(store.as_ref()),
            Vec::<Vec<u8>>::new(),
            "records of the first run were not expired by the second"
        );
        let (pairs, late) = joined(&out);
        prop_assert!(late.is_empty(), "late: {late:?}");
        prop_assert_eq!(pairs, brute_force(&events, lower, upper));
    }
}

#[test]
fn orders_and_payments_within_ten_minutes_on_rocksdb() {
    let minute = 60_000;
    let e = |left, key, time, id| Event {
        left,
        key,
        time,
        id,
    };
    let events = [
        e(true, 1, 0, 0),            // order of customer 1 at 0
        e(false, 1, 5 * minute, 1),  // paid after 5 minutes: joins
        e(false, 2, 6 * minute, 2),  // another customer: no order
        e(true, 2, 7 * minute, 3),   // order after the payment: no join
        e(false, 1, 11 * minute, 4), // 11 minutes after order 0: too late to join
        e(false, 2, 15 * minute, 5), // pays order 3 after 8 minutes: joins
        e(true, 1, 30 * minute, 6),  // pushes the watermark to 30 min - 1 ms
        e(false, 1, 20 * minute, 7), // behind the watermark: late output
    ];
    let backend = RocksStateBackend::temporary(MERGE_FOLDS, Default::default()).unwrap();
    let (pairs, late) = run_join(&events, 0, 10 * minute, 0, ONE_BY_ONE, &backend);
    assert_eq!(pairs, vec![(0, 1), (3, 5)]);
    assert_eq!(late, vec![7]);
}
