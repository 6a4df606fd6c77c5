//! Malformed records go to the dead-letter output with a reason, alone.

use sluice_host::connectors::file::{FileSource, FileSourceOptions};
use sluice_host::dataflow::{CheckpointBarrier, Collector, Operator, Source};
use sluice_host::record::dead_letter_headers as h;
use sluice_host::runtime::PluginLimits;
use sluice_host::{Record, SourcePosition};
use sluice_tests::{operator, runtime, state_backend};
use std::sync::atomic::Ordering;

fn reason(record: &Record) -> String {
    String::from_utf8_lossy(
        record
            .header(h::REASON)
            .expect("dead letters carry a reason"),
    )
    .into_owned()
}

#[test]
fn validate_dedup_dead_letters_each_bad_record_with_its_reason() {
    let runtime = runtime();
    let store = state_backend();
    let mut op = operator(
        &runtime,
        &store,
        "t",
        "validate-dedup",
        PluginLimits::default(),
        &[("required", "event_id:string,amount:number")],
    );
    let values: [&[u8]; 6] = [
        br#"{"event_id":"e1","amount":1.5}"#,
        br#"{"event_id":"e2"}"#,
        br#"{"event_id":"e3","amount":"12"}"#,
        br#"{"event_id":"e4","amount":2"#,
        br#"[1,2,3]"#,
        br#"{"event_id":"e1","amount":1.5}"#,
    ];
    let batch: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            Record::from_value(
                v.to_vec(),
                SourcePosition {
                    topic: "bronze".into(),
                    partition: 1,
                    offset: i as i64,
                },
            )
        })
        .collect();
    let mut out = Collector::default();
    op.process_batch(batch, &mut out).unwrap();
    assert_eq!(
        out.main.len(),
        1,
        "only e1 is valid (its repeat is a duplicate)"
    );
    let reasons: Vec<String> = out.dead_letter.iter().map(reason).collect();
    assert_eq!(reasons.len(), 3 + 1);
    assert_eq!(reasons[0], "missing required field `amount`");
    assert_eq!(
        reasons[1],
        "field `amount` must be a number, found a string"
    );
    assert!(
        reasons[2].starts_with("invalid JSON value"),
        "{}",
        reasons[2]
    );
    assert_eq!(reasons[3], "event must be a JSON object, found an array");
    let first = &out.dead_letter[0];
    assert_eq!(
        first.value.as_ref(),
        values[1],
        "the original value is kept"
    );
    assert_eq!(
        first.header(h::SOURCE_OFFSET).map(|v| v.as_ref()),
        Some(&b"1"[..])
    );
    assert_eq!(
        first.header(h::SOURCE_TOPIC).map(|v| v.as_ref()),
        Some(&b"bronze"[..])
    );
    assert_eq!(
        first.header(h::OPERATOR).map(|v| v.as_ref()),
        Some(&b"validate-dedup"[..])
    );
    assert!(
        first
            .header(h::PLUGIN)
            .is_some_and(|p| p.starts_with(b"validate-dedup@"))
    );
    // The ids the plugin keeps in host state are measured at a barrier.
    op.on_barrier(
        &CheckpointBarrier {
            id: 1,
            timestamp_ms: 0,
        },
        &mut out,
    )
    .unwrap();
    let state_bytes = op.metrics().state_bytes.load(Ordering::Relaxed);
    assert!(state_bytes > 0, "plugin state size not reported");
}

#[test]
fn file_source_dead_letters_malformed_lines_and_reads_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.jsonl");
    std::fs::write(&path, "{\"id\":1,\"ts\":10}\nnot json\n\n{\"id\":2}\n{\"id\":3,\"ts\":\"x\"}\n{\"id\":4,\"ts\":40}\n").unwrap();
    let mut source = FileSource::open(
        "file",
        &path,
        FileSourceOptions {
            key_field: Some("id".into()),
            timestamp_field: Some("ts".into()),
            ..FileSourceOptions::default()
        },
    )
    .unwrap();
    let mut records = Vec::new();
    let mut dead = Vec::new();
    while let Some(batch) = source.next_batch(2).unwrap() {
        records.extend(batch.records);
        dead.extend(batch.dead_letters);
    }
    assert_eq!(
        records.iter().map(|r| r.event_time).collect::<Vec<_>>(),
        vec![Some(10), Some(40)]
    );
    assert_eq!(records[1].key.as_deref(), Some(&b"4"[..]));
    let reasons: Vec<String> = dead.iter().map(reason).collect();
    assert_eq!(reasons.len(), 3);
    assert!(
        reasons[0].starts_with("record 2: invalid JSON"),
        "{}",
        reasons[0]
    );
    assert_eq!(reasons[1], "record 4: timestamp field `ts` is missing");
    assert_eq!(
        reasons[2],
        "record 5: timestamp field `ts` is not an integer (found \"x\")"
    );
    assert_eq!(dead[0].value.as_ref(), b"not json");
}

/// A dead letter in a file is the record as it came in: the value's exact
/// bytes (a string when UTF-8, base64 otherwise), never re-serialised JSON
/// that rounds big numbers, drops `1.10`'s zero, merges duplicate keys or
/// re-sorts them; and an event time outside years 1 to 9999 is a dead
/// letter too.
#[test]
fn file_dead_letters_keep_the_exact_input_bytes() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let dead = dir.path().join("dead.jsonl");
    let bad: [&[u8]; 6] = [
        br#"{"n":123456789012345678901234567890}"#,
        br#"{"price":1.10}"#,
        br#"{"b":1,"a":2,"b":3}"#,
        b"\xff\xfe{\"x\":1}",
        br#"{"t":9223372036854775807}"#,
        br#"{"t":-9223372036854775808}"#,
    ];
    let mut text = b"{\"t\":1000}\n".to_vec();
    for line in bad {
        text.extend_from_slice(line);
        text.push(b'\n');
    }
    std::fs::write(&input, &text).unwrap();
    let pipeline = format!(
        r#"
[pipeline]
name = "exact-dead-letters"

[source.file]
path = "{}"
timestamp_field = "t"

[sink]
blackhole = {{}}

[dead_letter.file]
path = "{}"
format = "record"
"#,
        input.display(),
        dead.display()
    );
    let (_, snapshot) =
        sluice_tests::run_pipeline_to_end(&pipeline, std::time::Duration::from_secs(60));
    assert_eq!(snapshot.dead_letters, bad.len() as u64, "{snapshot:?}");
    let written = std::fs::read_to_string(&dead).unwrap();
    let values: Vec<Vec<u8>> = written
        .lines()
        .map(|line| {
            let document: serde_json::Value = serde_json::from_str(line).unwrap();
            let value = document["value"].as_str().unwrap();
            match document["value_encoding"].as_str() {
                Some("utf8") => value.as_bytes().to_vec(),
                Some("base64") => base64::engine::general_purpose::STANDARD
                    .decode(value)
                    .unwrap(),
                other => panic!("value_encoding {other:?} in {line}"),
            }
        })
        .collect();
    let expected: Vec<Vec<u8>> = bad.iter().map(|v| v.to_vec()).collect();
    assert_eq!(values, expected);
    assert!(written.contains("outside the supported range"), "{written}");
}
