//! Hostile plugins (infinite loop, unbounded allocation, traps, broken
//! output) are stopped by their deadline or limit; only the offending
//! records are dead-lettered, the operator goes on, and other tenants'
//! plugins are unaffected.
//!
//! `.ci/run` runs these tests with every core saturated by busy processes
//! (`SLUICE_TEST_CPU_LOAD`, see [`sluice_tests::cpu_load`]), where a
//! deadline counted in wall time would punish healthy plugins.

use sluice_host::dataflow::{Collector, FaultPolicy, OnFaultStorm, Operator};
use sluice_host::record::dead_letter_headers as h;
use sluice_host::runtime::PluginLimits;
use sluice_host::{Record, SourcePosition};
use sluice_tests::{CpuLoad, cpu_load, operator, runtime, state_backend};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Every plugin these tests run.
const PLUGINS: &[&str] = &[
    "identity",
    "hostile-loop",
    "hostile-alloc",
    "hostile-trap",
    "hostile-contract",
    "python/hostile",
    "js/hostile",
];

/// The CPU load of a test, started once every plugin of this module is built
/// and compiled (into the shared component cache): the load is there for the
/// plugins' calls and faults, not their builds, which on a cold cache took
/// minutes under it. Tests that arrive while the builds run wait for them.
fn load_after_builds() -> CpuLoad {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let runtime = runtime();
        for name in PLUGINS {
            runtime
                .load(sluice_tests::plugin(name))
                .unwrap_or_else(|error| panic!("loading {name}: {error}"));
        }
    });
    cpu_load()
}

fn batch(values: &[&str]) -> Vec<Record> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            Record::from_value(
                v.as_bytes().to_vec(),
                SourcePosition {
                    topic: "t".into(),
                    partition: 0,
                    offset: i as i64,
                },
            )
        })
        .collect()
}

fn reasons(out: &Collector) -> Vec<String> {
    out.dead_letter
        .iter()
        .map(|r| String::from_utf8_lossy(r.header(h::REASON).unwrap()).into_owned())
        .collect()
}

/// Runs `plugin` on a batch where `bad` marks two records, then on a clean
/// batch; returns the dead-letter reasons of the first batch and the
/// operator's (faults, re-instantiations).
fn survives(plugin: &str, bad: &str, limits: PluginLimits) -> (Vec<String>, (u64, u64)) {
    let runtime = runtime();
    let store = state_backend();
    let mut hostile = operator(&runtime, &store, "evil", plugin, limits, &[]);
    let mut neighbour = operator(
        &runtime,
        &store,
        "good",
        "identity",
        PluginLimits::default(),
        &[],
    );

    let mut out = Collector::default();
    hostile
        .process_batch(batch(&["ok-1", bad, "ok-2", bad, "ok-3"]), &mut out)
        .unwrap();
    let main: Vec<&[u8]> = out.main.iter().map(|r| r.value.as_ref()).collect();
    assert_eq!(
        main,
        vec![&b"ok-1"[..], b"ok-2", b"ok-3"],
        "{plugin}: good records pass in order"
    );
    assert_eq!(
        out.dead_letter.len(),
        2,
        "{plugin}: exactly the bad records are dead-lettered"
    );
    assert!(
        out.dead_letter
            .iter()
            .all(|r| r.value.as_ref() == bad.as_bytes())
    );
    let metrics = hostile_metrics(&hostile);

    let mut after = Collector::default();
    hostile
        .process_batch(batch(&["ok-4", "ok-5"]), &mut after)
        .unwrap();
    assert_eq!(
        after.main.len(),
        2,
        "{plugin}: the operator goes on after faults"
    );

    let mut other = Collector::default();
    neighbour
        .process_batch(batch(&[bad, "fine"]), &mut other)
        .unwrap();
    assert_eq!(other.main.len(), 2, "another tenant's plugin is unaffected");
    (reasons(&out), metrics)
}

/// [`survives`], where each bad record must fault the instance: one fault
/// for the batch and one per bad record on the record-by-record retry, each
/// followed by a fresh instance.
fn survives_faulting(plugin: &str, bad: &str, limits: PluginLimits) -> Vec<String> {
    let (reasons, (faults, reinstantiations)) = survives(plugin, bad, limits);
    assert_eq!(
        faults, 3,
        "{plugin}: one fault for the batch, one per bad record"
    );
    assert_eq!(
        reinstantiations, 3,
        "{plugin}: re-instantiated after each fault"
    );
    reasons
}

fn hostile_metrics(op: &sluice_host::dataflow::TransformOperator) -> (u64, u64) {
    let m = op.metrics();
    (
        m.traps.load(Ordering::Relaxed),
        m.reinstantiations.load(Ordering::Relaxed),
    )
}

#[test]
fn infinite_loop_is_interrupted_at_its_cpu_deadline() {
    let _load = load_after_builds();
    let limits = PluginLimits {
        deadline: Duration::from_millis(50),
        ..PluginLimits::default()
    };
    for reason in survives_faulting("hostile-loop", "loop", limits) {
        assert_eq!(
            reason,
            "plugin exceeded its CPU deadline of 50 ms and was interrupted"
        );
    }
}

#[test]
fn unbounded_allocation_is_stopped_at_its_memory_limit() {
    let _load = load_after_builds();
    let limits = PluginLimits {
        memory_bytes: 16 << 20,
        ..PluginLimits::default()
    };
    for reason in survives_faulting("hostile-alloc", "alloc", limits) {
        assert_eq!(reason, "plugin exceeded its memory limit of 16 MiB");
    }
}

/// A plugin whose memory only grows (a guest runtime that never frees:
/// componentize-js keeps every batch it is given) is replaced between
/// batches once it has grown past three quarters of its limit since its
/// first batch, before a batch fails at the limit: no record faults, is
/// dead-lettered or is retried.
#[test]
fn a_leaking_plugin_is_replaced_between_batches_before_its_memory_limit() {
    let _load = load_after_builds();
    let runtime = runtime();
    let store = state_backend();
    let limits = PluginLimits {
        memory_bytes: 16 << 20,
        ..PluginLimits::default()
    };
    let mut leaking = operator(&runtime, &store, "leaky", "hostile-alloc", limits, &[]);
    // 1 MiB kept per batch: 40 batches would need 40 MiB of one instance.
    for round in 0..40 {
        let mut out = Collector::default();
        leaking
            .process_batch(batch(&["ok", "leak", "ok"]), &mut out)
            .unwrap();
        assert_eq!(out.main.len(), 3, "batch {round}");
        assert!(
            out.dead_letter.is_empty(),
            "batch {round}: {:?}",
            reasons(&out)
        );
    }
    let metrics = leaking.metrics();
    assert_eq!(metrics.traps.load(Ordering::Relaxed), 0);
    assert_eq!(metrics.memory_limit_hits.load(Ordering::Relaxed), 0);
    assert_eq!(metrics.faulted_records.load(Ordering::Relaxed), 0);
    // At least one replacement per 12 MiB kept (three quarters of 16).
    let replaced = metrics.reinstantiations.load(Ordering::Relaxed);
    assert!((3..=40).contains(&replaced), "{replaced} replacements");
}

#[test]
fn trap_is_isolated_to_its_record() {
    let _load = load_after_builds();
    for reason in survives_faulting("hostile-trap", "trap", PluginLimits::default()) {
        assert!(reason.starts_with("plugin trapped: "), "{reason}");
        assert!(
            reason.contains("unreachable"),
            "a Rust panic aborts with `unreachable`: {reason}"
        );
    }
}

/// The same limits hold for plugins whose language runtime (CPython,
/// SpiderMonkey) runs inside the component.
fn interpreted_plugin_is_contained(language: &str, throw_command: &str, thrown: &str) {
    let plugin = format!("{language}/hostile");
    let deadline = PluginLimits {
        deadline: Duration::from_millis(200),
        ..PluginLimits::default()
    };
    for reason in survives_faulting(&plugin, "loop", deadline) {
        assert_eq!(
            reason, "plugin exceeded its CPU deadline of 200 ms and was interrupted",
            "{language}"
        );
    }

    // Growing memory past the limit either traps (the host reports the
    // limit) or surfaces in the language as an out-of-memory error that
    // the SDK turns into the record's reason; either way only the bad
    // records are lost and the operator goes on.
    // A generous deadline, so that the memory limit is what stops it even
    // on a loaded machine.
    let memory = PluginLimits {
        memory_bytes: 96 << 20,
        deadline: Duration::from_secs(10),
        ..PluginLimits::default()
    };
    let (reasons, _) = survives(&plugin, "alloc", memory);
    for reason in reasons {
        assert!(
            reason == "plugin exceeded its memory limit of 96 MiB"
                || reason.to_lowercase().contains("memory"),
            "{language}: {reason}"
        );
    }

    let (reasons, (faults, _)) = survives(&plugin, throw_command, PluginLimits::default());
    assert_eq!(faults, 0, "{language}: an exception is not a fault");
    for reason in reasons {
        assert_eq!(reason, thrown, "{language}");
    }
}

#[test]
fn python_plugin_is_held_to_the_same_limits() {
    let _load = load_after_builds();
    interpreted_plugin_is_contained(
        "python",
        "raise",
        "RuntimeError: hostile plugin raised on purpose",
    );
}

#[test]
fn javascript_plugin_is_held_to_the_same_limits() {
    let _load = load_after_builds();
    interpreted_plugin_is_contained("js", "throw", "Error: hostile plugin threw on purpose");
}

/// What a plugin emits for each of `commands` (one main output each).
fn emitted(plugin: &str, limits: PluginLimits, commands: &[&str]) -> Vec<String> {
    let runtime = runtime();
    let store = state_backend();
    let mut op = operator(&runtime, &store, "curious", plugin, limits, &[]);
    let mut out = Collector::default();
    op.process_batch(batch(commands), &mut out).unwrap();
    assert!(out.dead_letter.is_empty(), "{:?}", reasons(&out));
    out.main
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect()
}

#[test]
fn python_plugin_gets_no_files_network_or_clock_unless_granted() {
    let _load = load_after_builds();
    let seen = emitted(
        "python/hostile",
        PluginLimits::default(),
        &["read-file", "connect", "clock"],
    );
    assert!(seen[0].starts_with("denied: "), "file system: {}", seen[0]);
    assert!(seen[1].starts_with("denied: "), "network: {}", seen[1]);
    assert_eq!(seen[2], "0.0", "the clock reads zero without a grant");

    let granted = PluginLimits {
        grant_clock: true,
        ..PluginLimits::default()
    };
    let seen = emitted("python/hostile", granted, &["clock"]);
    let now: f64 = seen[0].parse().unwrap();
    assert!(now > 1.7e9, "a granted clock is the real one: {now}");
}

#[test]
fn javascript_plugin_gets_no_network_or_clock_unless_granted() {
    let _load = load_after_builds();
    let seen = emitted("js/hostile", PluginLimits::default(), &["clock"]);
    assert_eq!(seen[0], "0", "the clock reads zero without a grant");
    // Built without HTTP: the component cannot even ask for the network (it
    // imports the file system, but the host preopens no directory).
    let described = sluice_cli::inspect::describe(&sluice_tests::plugin("js/hostile")).unwrap();
    assert!(described.contains("wasi:cli/stdout"), "{described}");
    for missing in ["wasi:http", "wasi:sockets"] {
        assert!(
            !described.contains(missing),
            "imports {missing}: {described}"
        );
    }
    let granted = PluginLimits {
        grant_clock: true,
        ..PluginLimits::default()
    };
    let now: f64 = emitted("js/hostile", granted, &["clock"])[0]
        .parse()
        .unwrap();
    assert!(now > 1.7e12, "a granted clock is the real one: {now}");
}

#[test]
fn a_faulting_call_leaves_no_state_behind() {
    let _load = load_after_builds();
    let mut op = hostile_trap();
    let mut out = Collector::default();
    // The batch call counts ok-1 and then traps on `trap`; the retry counts
    // ok-1 again, alone. Only the retry's write may survive.
    op.process_batch(batch(&["ok-1", "trap", "ok-2"]), &mut out)
        .unwrap();
    assert_eq!(out.dead_letter.len(), 1);
    let mut counts = Collector::default();
    op.process_batch(
        batch(&["count:ok-1", "count:ok-2", "count:trap"]),
        &mut counts,
    )
    .unwrap();
    let counts: Vec<&[u8]> = counts.main.iter().map(|r| r.value.as_ref()).collect();
    assert_eq!(counts, vec![&b"1"[..], b"1", b"0"]);
}

#[test]
fn python_stderr_reaches_the_host_and_the_dead_letter_reason() {
    let _load = load_after_builds();
    let (reasons, (faults, _)) =
        survives("python/hostile", "print-and-abort", PluginLimits::default());
    assert!(faults >= 1, "abort is a trap");
    for reason in reasons {
        assert!(reason.starts_with("plugin trapped: "), "{reason}");
        assert!(
            reason.contains("hostile python says goodbye"),
            "what the plugin printed to stderr is in the reason: {reason}"
        );
    }
}

/// The `hostile-trap` plugin as an operator with the default limits.
fn hostile_trap() -> sluice_host::dataflow::TransformOperator {
    operator(
        &runtime(),
        &state_backend(),
        "t",
        "hostile-trap",
        PluginLimits::default(),
        &[],
    )
}

fn values(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect()
}

#[test]
fn packed_output_that_breaks_the_contract_is_a_fault_retried_record_by_record() {
    let _load = load_after_builds();
    let runtime = runtime();
    let store = state_backend();
    let limits = PluginLimits {
        call_mode: sluice_host::runtime::CallMode::Packed,
        ..PluginLimits::default()
    };
    let mut op = operator(&runtime, &store, "t", "hostile-contract", limits, &[]);
    let mut out = Collector::default();
    op.process_batch(
        batch(&[
            "ok-1",
            "fail-twice",
            "ok-2",
            "emit-and-fail",
            "backwards",
            "ok-3",
        ]),
        &mut out,
    )
    .unwrap();
    assert_eq!(values(&out.main), ["ok-1", "ok-2", "ok-3"]);
    assert_eq!(
        values(&out.dead_letter),
        ["fail-twice", "emit-and-fail", "backwards"],
        "one dead letter per bad input, nothing emitted for it"
    );
    let why = reasons(&out);
    assert!(
        why[0].contains("two failures for input record 0"),
        "{why:?}"
    );
    assert!(
        why[1].contains("both emitted records and failed"),
        "{why:?}"
    );
    assert_eq!(hostile_metrics(&op).0, 4, "the batch and each bad record");

    // Event times a plugin sets outside years 1 to 9999 are dead letters.
    let mut out = Collector::default();
    op.process_batch(batch(&["time-max", "ok", "time-min"]), &mut out)
        .unwrap();
    assert_eq!(values(&out.main), ["ok"]);
    assert_eq!(values(&out.dead_letter), ["time-max", "time-min"]);
    for reason in reasons(&out) {
        assert!(reason.contains("outside the supported range"), "{reason}");
    }
}

#[test]
fn a_healthy_stateful_plugin_dead_letters_nothing() {
    let load = load_after_builds();
    let mut op = hostile_trap();
    let values: Vec<String> = (0..50_000).map(|i| format!("ok-{i}")).collect();
    let mut passed = 0;
    for chunk in values.chunks(256) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let mut out = Collector::default();
        op.process_batch(batch(&chunk), &mut out).unwrap();
        assert!(
            out.dead_letter.is_empty(),
            "loaded: {}: {:?}",
            load.is_loaded(),
            reasons(&out)
        );
        passed += out.main.len();
    }
    assert_eq!(passed, values.len());
    assert_eq!(
        hostile_metrics(&op),
        (0, 0),
        "no fault, no re-instantiation"
    );
}

#[test]
fn a_trap_storm_of_100k_records_is_dead_lettered_whole_and_then_ends() {
    let _load = load_after_builds();
    let mut op = hostile_trap();
    let storm: Vec<String> = (0..100_000).map(|i| format!("trap-{i}")).collect();
    let (mut main, mut dead) = (0, 0);
    let mut last_reason = String::new();
    for chunk in storm.chunks(256) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let mut out = Collector::default();
        op.process_batch(batch(&chunk), &mut out).unwrap();
        main += out.main.len();
        dead += out.dead_letter.len();
        last_reason = reasons(&out).pop().unwrap_or_default();
    }
    assert_eq!((main, dead), (0, storm.len()), "every record dead-lettered");
    assert!(op.in_fault_storm());
    assert!(last_reason.contains("fault storm"), "{last_reason}");
    let (_, reinstantiations) = hostile_metrics(&op);
    assert!(
        reinstantiations < 1_000,
        "one re-instantiation per batch in a storm, not one per record: {reinstantiations}"
    );

    // The first batch that succeeds ends the storm; a bad record is then
    // isolated alone again.
    let mut out = Collector::default();
    op.process_batch(batch(&["ok-1", "ok-2"]), &mut out)
        .unwrap();
    assert_eq!(out.main.len(), 2);
    assert!(!op.in_fault_storm());
    let mut out = Collector::default();
    op.process_batch(batch(&["ok-3", "trap", "ok-4"]), &mut out)
        .unwrap();
    assert_eq!(values(&out.main), ["ok-3", "ok-4"]);
    assert_eq!(values(&out.dead_letter), ["trap"]);
}

#[test]
fn a_storm_under_stop_fails_the_operator_and_counts_what_it_did_not_process() {
    let _load = load_after_builds();
    let mut op = hostile_trap().with_fault_policy(
        FaultPolicy::default()
            .storm_threshold(4)
            .on_storm(OnFaultStorm::Stop),
    );
    let storm: Vec<String> = (0..10).map(|i| format!("trap-{i}")).collect();
    let storm: Vec<&str> = storm.iter().map(String::as_str).collect();
    let mut out = Collector::default();
    let error = op
        .process_batch(batch(&storm), &mut out)
        .expect_err("a storm stops the operator")
        .to_string();
    assert!(error.contains("fault storm"), "{error}");
    assert_eq!(out.dead_letter.len(), 4, "the records that made the storm");
    assert!(
        error.contains("6 records of the current batch were not processed"),
        "in = dead letters + unprocessed: {error}"
    );
}

#[test]
fn instantiation_and_init_have_their_own_cpu_budget() {
    let _load = load_after_builds();
    let runtime = runtime();
    let store = state_backend();
    let component = runtime
        .load(sluice_tests::plugin("hostile-loop"))
        .expect("load");
    let scope = sluice_host::state::OperatorScope::new("t", "test", "slow-init");
    let limits = PluginLimits {
        init_deadline: Duration::from_millis(100),
        ..PluginLimits::default()
    };
    let error = sluice_host::runtime::PluginInstance::new(
        component,
        scope.clone(),
        store.open(&scope, None).expect("state"),
        sluice_host::metrics::OperatorMetrics::new("slow-init"),
        limits,
        vec![("init_spin_millions".into(), "1000000".into())],
    )
    .err()
    .expect("an init that never ends is stopped")
    .to_string();
    assert!(
        error.contains("instantiation and init used their CPU budget of 100 ms"),
        "{error}"
    );
}
