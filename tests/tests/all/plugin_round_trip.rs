//! Records go through real plugin components and come back intact, on both
//! the packed and the typed path.

use bytes::Bytes;
use sluice_host::dataflow::{Collector, Operator};
use sluice_host::metrics::OperatorMetrics;
use sluice_host::runtime::{CallMode, CallPath, EmitRoute, PluginInstance, PluginLimits};
use sluice_host::state::OperatorScope;
use sluice_host::{Header, Record, SourcePosition};
use sluice_tests::{operator, runtime, state_backend};
use std::sync::Arc;

fn sample(n: i64) -> Vec<Record> {
    (0..n)
        .map(|i| Record {
            read_fields: None,
            key: (i % 3 != 0).then(|| Bytes::from(format!("key-{i}"))),
            value: Bytes::from(vec![b'a' + (i % 26) as u8; 100 + i as usize]),
            headers: vec![
                Header::new("trace", format!("t{i}")),
                Header::new("bin", vec![0u8, 255, i as u8]),
            ]
            .into(),
            event_time: (i % 5 != 0).then_some(1_700_000_000_000 + i),
            source: SourcePosition {
                topic: "orders".into(),
                partition: 2,
                offset: 1000 + i,
            },
        })
        .collect()
}

#[test]
fn identity_returns_every_record_unchanged_on_every_path() {
    let runtime = runtime();
    let store = state_backend();
    // Auto: projected batches with no fields (ADR 0027).
    for mode in [CallMode::Auto, CallMode::Packed, CallMode::Typed] {
        let limits = limits_with(mode);
        let mut identity = operator(&runtime, &store, "t", "identity", limits, &[]);
        let input = sample(300);
        let mut out = Collector::default();
        identity.process_batch(input.clone(), &mut out).unwrap();
        assert_eq!(out.main, input, "{mode:?} path changed records");
        assert!(out.dead_letter.is_empty() && out.side.is_empty());
    }
}

/// A batch whose plugin sends records to several places is routed record
/// by record: `running-count` emits each keyed record to the main output
/// and to the side output `counts`, and fails a record without a key (a
/// dead letter), on both call paths. (A batch that goes only to the main
/// output is handed on as one list: `identity_returns_every_record...`.)
#[test]
fn main_side_and_dead_letter_outputs_of_one_batch_each_get_theirs() {
    let runtime = runtime();
    let store = state_backend();
    for mode in [CallMode::Packed, CallMode::Typed] {
        let limits = limits_with(mode);
        // A tenant per path: the counts are kept in state.
        let tenant = format!("{mode:?}");
        let mut counter = operator(&runtime, &store, &tenant, "running-count", limits, &[]);
        let values = [
            r#"{"key":"a"}"#,
            r#"{"other":1}"#,
            r#"{"key":"a"}"#,
            r#"{"key":7}"#,
        ];
        let input: Vec<Record> = sample(4)
            .into_iter()
            .zip(values)
            .map(|(record, value)| Record {
                value: Bytes::from(value),
                ..record
            })
            .collect();
        let mut out = Collector::default();
        counter.process_batch(input.clone(), &mut out).unwrap();
        let counts = |records: Vec<&Record>| -> Vec<(String, u64)> {
            records
                .into_iter()
                .map(|r| {
                    let value: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
                    (
                        value["key"].to_string(),
                        value["count"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        };
        let expected = vec![
            ("\"a\"".to_string(), 1),
            ("\"a\"".to_string(), 2),
            ("7".to_string(), 1),
        ];
        assert_eq!(counts(out.main.iter().collect()), expected, "{mode:?}");
        assert!(
            out.side.iter().all(|(name, _)| name == "counts"),
            "{mode:?}"
        );
        assert_eq!(
            counts(out.side.iter().map(|(_, record)| record).collect()),
            expected,
            "{mode:?}"
        );
        assert_eq!(out.dead_letter.len(), 1, "{mode:?}");
        assert_eq!(out.dead_letter[0].value, input[1].value, "{mode:?}");
    }
}

/// Runs the currency-convert plugin (Nexmark q1) on 2,000 generated events
/// in `encoding`, batch by batch; returns each batch's input and output.
fn run_q1(encoding: sluice_nexmark::Encoding) -> Vec<(Vec<Record>, Vec<Record>)> {
    use sluice_host::connectors::generator::{GeneratorOptions, GeneratorSource, Profile};
    use sluice_host::dataflow::Source;
    let runtime = runtime();
    let store = state_backend();
    let config = match encoding {
        sluice_nexmark::Encoding::Json => "json",
        sluice_nexmark::Encoding::Binary => "binary",
    };
    let mut q1 = operator(
        &runtime,
        &store,
        "t",
        "currency-convert",
        PluginLimits::default(),
        &[("encoding", config)],
    );
    let mut generator = GeneratorSource::new(
        "nexmark",
        GeneratorOptions {
            profile: Profile::Nexmark,
            count: Some(2000),
            nexmark_encoding: encoding,
            ..GeneratorOptions::default()
        },
    );
    let mut batches = Vec::new();
    while let Some(batch) = generator.next_batch(256).unwrap() {
        let mut out = Collector::default();
        q1.process_batch(batch.records.clone(), &mut out).unwrap();
        batches.push((batch.records, out.main));
    }
    batches
}

#[test]
fn currency_convert_computes_q1_for_every_bid() {
    let mut bids = 0;
    for (inputs, outputs) in run_q1(sluice_nexmark::Encoding::Json) {
        let expected: Vec<serde_json::Value> = inputs
            .iter()
            .filter_map(|r| {
                let event: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
                (event["event_type"] == "bid").then(|| {
                    serde_json::json!({
                        "auction": event["auction"],
                        "bidder": event["bidder"],
                        "price": event["price"].as_u64().unwrap() * 908 / 1000,
                        "date_time": event["date_time"],
                        "extra": event["extra"],
                    })
                })
            })
            .collect();
        let got: Vec<serde_json::Value> = outputs
            .iter()
            .map(|r| serde_json::from_slice(&r.value).unwrap())
            .collect();
        assert_eq!(got, expected);
        bids += got.len();
    }
    assert!(
        bids > 1500,
        "nexmark proportions give ~92% bids, got {bids}"
    );
}

#[test]
fn plugin_state_is_scoped_per_tenant() {
    let runtime = runtime();
    let store = state_backend();
    let config = [("required", "event_id:string")];
    let mut tenant_a = operator(
        &runtime,
        &store,
        "a",
        "validate-dedup",
        PluginLimits::default(),
        &config,
    );
    let mut tenant_b = operator(
        &runtime,
        &store,
        "b",
        "validate-dedup",
        PluginLimits::default(),
        &config,
    );
    let event = || {
        vec![Record::from_value(
            &br#"{"event_id":"e1"}"#[..],
            SourcePosition {
                topic: "t".into(),
                partition: 0,
                offset: 0,
            },
        )]
    };
    for op in [&mut tenant_a, &mut tenant_b] {
        let mut out = Collector::default();
        op.process_batch(event(), &mut out).unwrap();
        assert_eq!(out.main.len(), 1, "first sight of e1 in each tenant passes");
        let mut again = Collector::default();
        op.process_batch(event(), &mut again).unwrap();
        assert!(
            again.main.is_empty(),
            "a duplicate within the tenant is dropped"
        );
    }
}

#[test]
fn currency_convert_computes_q1_on_binary_nexmark_events() {
    use sluice_nexmark::{Encoding, Event};
    let mut bids = 0;
    for (inputs, outputs) in run_q1(Encoding::Binary) {
        let expected: Vec<Event<'_>> = inputs
            .iter()
            .filter_map(
                |r| match Event::decode(Encoding::Binary, &r.value).unwrap() {
                    Event::Bid(mut bid) => {
                        bid.price = bid.price * 908 / 1000;
                        Some(Event::Bid(bid))
                    }
                    _ => None,
                },
            )
            .collect();
        let got: Vec<Event<'_>> = outputs
            .iter()
            .map(|r| Event::decode(Encoding::Binary, &r.value).unwrap())
            .collect();
        assert_eq!(got, expected);
        bids += got.len();
    }
    assert!(bids > 1500, "{bids}");
}

/// A Python plugin that forwards what it reads keeps its memory flat.
/// componentize-py never frees a byte list an export returns: through the
/// typed `process-batch` the plugin's memory grew by every value it emitted
/// (about 200 bytes per record here, ~23 MiB over this run) until it hit
/// its limit and was re-instantiated. The Python SDK's `text-transform`
/// world returns the batch's outcomes in a string, which is freed.
#[test]
fn a_python_plugin_forwarding_every_record_keeps_its_memory_flat() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let text = "x".repeat(150);
    let mut lines = String::new();
    let records = 120_000;
    for i in 0..records {
        // Keys 1..=7: never a multiple of the plugin's modulus, 10, so
        // every record is emitted.
        lines.push_str(&format!(
            "{{\"id\":{i},\"key\":{},\"text\":\"{text}\",\"ts\":{}}}\n",
            i % 7 + 1,
            1_700_000_000_000i64 + i
        ));
    }
    std::fs::write(&input, lines).unwrap();
    let plugin = sluice_tests::plugin("python/filter-rewrite");
    let toml = format!(
        "[pipeline]\nname = \"python-memory\"\nbatch_size = 256\n\n[source.file]\npath = {input:?}\n\n\
         [[operators]]\nname = \"filter-rewrite\"\nplugin = {plugin:?}\nmemory_limit_mb = 32\n\n[sink]\nblackhole = {{}}\n"
    );
    let (_, snapshot) =
        sluice_tests::run_pipeline_to_end(&toml, std::time::Duration::from_secs(600));
    let operator = &snapshot.operators[0];
    assert_eq!(operator.records_out, records as u64, "{operator:?}");
    assert_eq!(operator.memory_limit_hits, 0, "{operator:?}");
    assert_eq!(operator.reinstantiations, 0, "{operator:?}");
    assert!(
        operator.plugin_memory_bytes < 24 << 20,
        "plugin memory grew to {} bytes",
        operator.plugin_memory_bytes
    );
}

/// An instance of the test plugin `plugin` under `mode` and `config`, and
/// its operator's counters.
fn plugin_instance(
    plugin: &str,
    mode: CallMode,
    config: &[(&str, &str)],
) -> (PluginInstance, Arc<OperatorMetrics>) {
    let runtime = runtime();
    let component = runtime
        .load(sluice_tests::plugin(plugin))
        .unwrap_or_else(|e| panic!("load {plugin}: {e}"));
    let scope = OperatorScope::new("t", "test", plugin);
    let store = state_backend().open(&scope, None).expect("state");
    let limits = limits_with(mode);
    let config = config
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let metrics = OperatorMetrics::new(plugin);
    let instance = PluginInstance::new(component, scope, store, metrics.clone(), limits, config)
        .expect("instantiate");
    (instance, metrics)
}

/// A record of the field-probe test: JSON `value`, and for the first a key,
/// a header and an event time.
fn probe_record(value: &str, index: i64) -> Record {
    let first = index == 0;
    Record {
        read_fields: None,
        key: first.then(|| Bytes::from_static(b"k\x00")),
        value: Bytes::from(value.to_string()),
        headers: match first {
            true => vec![Header::new("h", vec![1u8, 2])].into(),
            false => Default::default(),
        },
        event_time: first.then_some(1_700_000_000_000),
        source: SourcePosition {
            topic: "in".into(),
            partition: 1,
            offset: 10 + index,
        },
    }
}

/// What one input record led to: its index and an emitted value or a
/// failure's reason.
type ByInput = Vec<(usize, String)>;

/// Runs a field-probe plugin (`python/field-probe` or the Rust
/// `field-probe`) on `values` under `mode` and `config`; returns the path
/// it took, each emitted value (by input) and each failure.
fn run_field_probe(
    plugin: &str,
    values: &[&str],
    mode: CallMode,
    config: &[(&str, &str)],
) -> (CallPath, ByInput, ByInput) {
    let (mut instance, _) = plugin_instance(plugin, mode, config);
    let records: Vec<Record> = (0..)
        .zip(values)
        .map(|(i, value)| probe_record(value, i))
        .collect();
    let result = instance.call_batch(&records).expect("batch");
    for emitted in result.emitted() {
        let input = &records[emitted.input];
        assert_eq!(*emitted.route, EmitRoute::Main);
        assert_eq!(emitted.record.key, input.key);
        assert_eq!(emitted.record.headers, input.headers);
        assert_eq!(emitted.record.event_time, input.event_time);
        assert_eq!(emitted.record.source, input.source);
    }
    let emitted = result
        .emitted()
        .map(|e| {
            let value = String::from_utf8(e.record.value.to_vec()).expect("UTF-8 output");
            (e.input, value)
        })
        .collect();
    (instance.call_path(), emitted, result.failed)
}

/// The Python SDK's field API reads the same values and writes the same
/// records whether the host found the fields (projected path) or the
/// plugin parsed the records itself (projected with no fields,
/// text-packed, typed).
#[test]
fn python_field_reads_and_replacing_emits_agree_on_every_path() {
    let values = [
        r#"{"a":1,"s":"x\"y","n":-5,"u":[1,2]}"#,
        r#"{"a":{"nested":true},"s":"caf\u00e9","n":12345678901234567890}"#,
        "[1,2]",
        r#"{"a":1"#,
        "{}",
        r#"{"s":"plain","n":0}"#,
    ];
    let probe = "python/field-probe";
    let (path, projected, failed) = run_field_probe(probe, &values, CallMode::Auto, &[]);
    assert_eq!(path, CallPath::Projected);
    let first = values[0];
    assert_eq!(
        projected[..3],
        [
            (
                0,
                format!(
                    r#"{{"a":1,"s":"x\"y","n":-5,"missing":"default","undeclared":[1,2],"key":"6b00","headers":[["h","0102"]],"event_time":1700000000000,"source":["in",1,10],"value_length":{}}}"#,
                    first.len()
                )
            ),
            (0, r#"{"a":1,"s":"X\"Y","n":-5,"u":[1,2]}"#.to_string()),
            (
                0,
                r#"{"a":1,"s":"x\"y","n":-5,"u":[1,2],"added":[1,{"x":null},"té\"xt"]}"#
                    .to_string()
            ),
        ]
    );
    // A number beyond 64 bits keeps its text; an escaped string is decoded.
    assert!(
        projected.contains(&(
            1,
            r#"{"a":{"nested":true},"s":"CAFÉ","n":12345678901234567890}"#.to_string()
        )),
        "{projected:#?}"
    );
    // An empty object gets the added field.
    assert!(projected.contains(&(4, r#"{"added":[1,{"x":null},"té\"xt"]}"#.to_string())));
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert_eq!(
        failed[0],
        (
            2,
            "invalid JSON value: a record must be a JSON object".to_string()
        )
    );
    assert_eq!(failed[1].0, 3);
    assert!(failed[1].1.starts_with("invalid JSON value"), "{failed:?}");

    // Naming no fields, the batch still comes projected (ADR 0027), with
    // no fields found: the plugin parses each record, the host splices.
    for (mode, config, expected_path) in [
        (CallMode::Auto, [("project", "no")], CallPath::Projected),
        (CallMode::Packed, [("project", "yes")], CallPath::TextPacked),
        (CallMode::Typed, [("project", "yes")], CallPath::Typed),
    ] {
        let (path, emitted, failed_here) = run_field_probe(probe, &values, mode, &config);
        assert_eq!(path, expected_path);
        assert_eq!(emitted.len(), projected.len(), "{mode:?} {config:?}");
        for (here, there) in emitted.iter().zip(&projected) {
            if here == there {
                continue;
            }
            // Without the host's splice the record is encoded again, so an
            // escape elsewhere in it (record 1's `caf\u00e9`) is written
            // as the character: the same JSON, other bytes.
            assert_eq!(here.0, 1, "{mode:?} {config:?}: {here:?} vs {there:?}");
            let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
            assert_eq!(json(&here.1), json(&there.1), "{mode:?} {config:?}");
        }
        assert_eq!(failed_here, failed, "{mode:?} {config:?}");
    }

    // Projected only: the splice keeps every other byte as it came
    // (spaces, a repeated name: the last is the field, as when parsed).
    let (_, spliced, _) = run_field_probe(
        probe,
        &[r#"{ "s" : "one", "s":"two" , "n":1 }"#],
        CallMode::Auto,
        &[],
    );
    assert_eq!(
        spliced[1].1, r#"{ "s" : "one", "s":"TWO" , "n":1 }"#,
        "{spliced:#?}"
    );
    assert!(spliced[0].1.contains(r#""s":"two""#), "{spliced:#?}");
}

/// The values the Rust and C field probes are run on.
const FIELD_PROBE_VALUES: [&str; 6] = [
    r#"{"a":1,"s":"x\"y","n":-5,"u":[1,2]}"#,
    r#"{"a":{"nested":true},"s":"caf\u00e9","n":12345678901234567890}"#,
    "[1,2]",
    r#"{"a":1"#,
    "{}",
    r#"{ "s" : "one", "s":"two" , "n":1 }"#,
];

/// The Rust SDK's field API (`Record::field`, `Emitter::emit_replacing`)
/// reads the same fields and writes the same bytes on the projected path
/// (the host finds the fields and splices the replaced value) as on the
/// packed and typed paths (the plugin splits the record itself).
#[test]
fn rust_field_reads_and_replacing_emits_agree_on_every_path() {
    let values = FIELD_PROBE_VALUES;
    let probe = "field-probe";
    let (path, projected, failed) = run_field_probe(probe, &values, CallMode::Auto, &[]);
    assert_eq!(path, CallPath::ProjectedPacked);
    let first = values[0];
    assert_eq!(
        projected[..3],
        [
            (
                0,
                format!(
                    r#"{{"a":"1","event_time":1700000000000,"headers":[["h","0102"]],"key":"6b00","missing":"default","n":"-5","s":"x\"y","source":["in",1,10],"undeclared":[1,2],"value_length":{}}}"#,
                    first.len()
                )
            ),
            (0, r#"{"a":1,"s":"X\"Y","n":-5,"u":[1,2]}"#.to_string()),
            (
                0,
                r#"{"a":1,"s":"x\"y","n":-5,"u":[1,2],"added":[1,{"x":null},"t\u00e9\"xt"]}"#
                    .to_string()
            ),
        ]
    );
    // A number beyond 64 bits keeps its text; an escaped string is decoded
    // (and written back quoted); every other byte stays as it came.
    assert!(
        projected.contains(&(
            1,
            r#"{"a":{"nested":true},"s":"CAFÉ","n":12345678901234567890}"#.to_string()
        )),
        "{projected:#?}"
    );
    // An empty object gets the added field; of a repeated name the last is
    // the field, and spaces stay.
    assert!(projected.contains(&(4, r#"{"added":[1,{"x":null},"t\u00e9\"xt"]}"#.to_string())));
    assert!(
        projected.contains(&(5, r#"{ "s" : "one", "s":"TWO" , "n":1 }"#.to_string())),
        "{projected:#?}"
    );
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert_eq!(failed[0].0, 2);
    assert_eq!(failed[1].0, 3);
    for (_, reason) in &failed {
        assert!(reason.starts_with("invalid JSON value"), "{failed:?}");
    }

    // Projected with no fields, packed and typed: the plugin splits the
    // record itself with the same splice, so the bytes are the same.
    for (mode, config, expected) in [
        (
            CallMode::Auto,
            [("project", "no")],
            CallPath::ProjectedPacked,
        ),
        (CallMode::Packed, [("project", "yes")], CallPath::Packed),
        (CallMode::Typed, [("project", "yes")], CallPath::Typed),
    ] {
        let (path, emitted, failed_here) = run_field_probe(probe, &values, mode, &config);
        assert_eq!(path, expected);
        assert_eq!(emitted, projected, "{mode:?} {config:?}");
        assert_eq!(failed_here, failed, "{mode:?} {config:?}");
    }
}

/// The C SDK's field API (`sluice_field`, `sluice_emit_replacing`) on the
/// projected, packed and typed paths writes what the Rust SDK's does on
/// the projected path, byte for byte: the same fields read, the same
/// splices (the host's, or the C SDK's own), the same records failed.
#[test]
fn c_field_reads_and_replacing_emits_agree_with_rust_on_every_path() {
    let values = FIELD_PROBE_VALUES;
    let (_, expected, expected_failed) =
        run_field_probe("field-probe", &values, CallMode::Auto, &[]);
    assert_eq!(expected.len(), 11, "{expected:#?}");
    let failed_inputs: Vec<usize> = expected_failed.iter().map(|(input, _)| *input).collect();
    assert_eq!(failed_inputs, [2, 3]);
    for (mode, config, expected_path) in [
        (
            CallMode::Auto,
            [("project", "yes")],
            CallPath::ProjectedPacked,
        ),
        (
            CallMode::Auto,
            [("project", "no")],
            CallPath::ProjectedPacked,
        ),
        (CallMode::Packed, [("project", "yes")], CallPath::Packed),
        (CallMode::Typed, [("project", "yes")], CallPath::Typed),
    ] {
        let (path, emitted, failed) = run_field_probe("c/field-probe", &values, mode, &config);
        assert_eq!(path, expected_path);
        assert_eq!(emitted, expected, "{mode:?} {config:?}");
        let inputs: Vec<usize> = failed.iter().map(|(input, _)| *input).collect();
        assert_eq!(inputs, failed_inputs, "{mode:?} {config:?}: {failed:?}");
        for (_, reason) in &failed {
            assert!(reason.starts_with("invalid JSON value"), "{failed:?}");
        }
    }
}

/// A projected batch none of whose records emits anything is processed
/// once, in every SDK: an empty output would mean "format not read" to the
/// host, which would send the batch again (a second time for each record's
/// state writes and counters), so the SDKs answer `NoEmits`.
#[test]
fn a_projected_batch_that_emits_nothing_is_processed_once() {
    let records: Vec<Record> = (0..3)
        .map(|i| probe_record(&format!(r#"{{"a":{i},"s":"t"}}"#), i))
        .collect();
    for (plugin, path) in [
        ("field-probe", CallPath::ProjectedPacked),
        ("c/field-probe", CallPath::ProjectedPacked),
        ("python/field-probe", CallPath::Projected),
        ("js/field-probe", CallPath::Projected),
    ] {
        // Each record counted, none emitted.
        let (mut instance, metrics) = plugin_instance(plugin, CallMode::Auto, &[("drop", "yes")]);
        for batch in 1..=2 {
            let result = instance.call_batch(&records).expect("batch");
            assert!(result.is_empty(), "{plugin}: {:?}", result.records);
            assert!(result.failed.is_empty(), "{plugin}: {:?}", result.failed);
            assert_eq!(instance.call_path(), path, "{plugin}");
            let processed = metrics
                .plugin_counters
                .lock()
                .unwrap()
                .get("processed")
                .copied();
            assert_eq!(processed, Some(3 * batch), "{plugin}, batch {batch}");
        }
    }
}

/// The JavaScript SDK's field API (`record.field`, `out.emitReplacing`)
/// writes what the Python SDK's does, byte for byte, on each path: the
/// projected one (the host finds the fields and splices), the projected
/// one with no fields (the plugin names none: it parses the record; the
/// host finds the field it replaces), the text-packed one and the typed
/// one; the same records fail.
#[test]
fn js_field_reads_and_replacing_emits_agree_with_python_on_every_path() {
    let values = FIELD_PROBE_VALUES;
    for (mode, config, expected_path) in [
        (CallMode::Auto, [("project", "yes")], CallPath::Projected),
        (CallMode::Auto, [("project", "no")], CallPath::Projected),
        (CallMode::Packed, [("project", "yes")], CallPath::TextPacked),
        (CallMode::Typed, [("project", "yes")], CallPath::Typed),
    ] {
        let (_, expected, expected_failed) =
            run_field_probe("python/field-probe", &values, mode, &config);
        let (path, emitted, failed) = run_field_probe("js/field-probe", &values, mode, &config);
        assert_eq!(path, expected_path);
        assert_eq!(emitted, expected, "{mode:?} {config:?}");
        assert_eq!(failed.len(), 2, "{mode:?} {config:?}: {failed:?}");
        // The same records fail, the non-object with the same reason; a
        // parse error's wording is each parser's own.
        assert_eq!(failed[0], expected_failed[0], "{mode:?} {config:?}");
        assert_eq!(failed[1].0, expected_failed[1].0);
        assert!(failed[1].1.starts_with("invalid JSON value"), "{failed:?}");
    }
}

/// The default limits, calling the plugin the `mode` way.
fn limits_with(mode: CallMode) -> PluginLimits {
    PluginLimits {
        call_mode: mode,
        ..PluginLimits::default()
    }
}

/// Runs an SDK's own test script (`program args... script`, the script a
/// path in the repository) and fails with its output unless it passes.
fn sdk_test_script_passes(program: &str, args: &[&str], script: &str) {
    let output = std::process::Command::new(program)
        .args(args)
        .arg(sluice_tests::repo_root().join(script))
        .output()
        .unwrap_or_else(|e| panic!("running {program} (which the plugin builds need too): {e}"));
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The Python SDK's fast JSON routes (a batch's values parsed in a few
/// calls, the C encoder) answer as its reference ones do, in a native
/// Python (`guest-sdk/python/test_sluice_json.py`).
#[test]
fn python_sdk_json_reads_and_writes_as_its_reference_does() {
    sdk_test_script_passes("python3", &[], "guest-sdk/python/test_sluice_json.py");
}

/// The JavaScript SDK's `parseJson` reads through the engine's own parser
/// (native code) wherever that reads as the SDK's parser does (issue 42):
/// `guest-sdk/js/sluice-json.test.mjs` holds it to the SDK's parser, value
/// for value and error for error, on generated and mutated text.
#[test]
fn js_sdk_json_reads_as_its_own_parser_does() {
    sdk_test_script_passes("node", &["--test"], "guest-sdk/js/sluice-json.test.mjs");
}
