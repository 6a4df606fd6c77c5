//! SQL de-duplication (`ROW_NUMBER() OVER (PARTITION BY id ORDER BY ..) AS
//! rn ... WHERE rn = 1`) in real pipelines: by arrival and by event time,
//! with one and two workers, against a model of the same records.

use serde_json::{Value, json};
use sluice_tests::{read_json_lines, run_pipeline_to_end};
use std::collections::BTreeMap;
use std::time::Duration;

/// (arrival index, event id, amount, event time): each id comes three
/// times in a row and again much later; some later copies are earlier in
/// event time (within the out-of-orderness); some records fail the
/// `WHERE`.
fn events() -> Vec<(usize, String, i64, i64)> {
    (0..3000usize)
        .map(|i| {
            let id = match i % 10 {
                9 if i > 900 => format!("e{}", (i - 900) / 3),
                _ => format!("e{}", i / 3),
            };
            let amount = (i % 13) as i64 - 2;
            // Up to 300 ms earlier than arrival order suggests.
            let ts = 1_700_000_000_000 + (i as i64) * 10 - ((i * 37) % 31) as i64 * 10;
            (i, id, amount, ts)
        })
        .collect()
}

fn run(dir: &std::path::Path, settings: &str, order: &str) -> (Vec<Value>, Vec<Value>) {
    let input = dir.join("events.jsonl");
    if !input.exists() {
        let lines: Vec<String> = events()
            .iter()
            .map(|(i, id, amount, ts)| {
                json!({"seq": i, "event_id": id, "amount": amount, "ts": ts}).to_string()
            })
            .collect();
        std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    }
    let output = dir.join("out.jsonl");
    let dead = dir.join("dead.jsonl");
    let _ = std::fs::remove_file(&output);
    let _ = std::fs::remove_file(&dead);
    let query = format!(
        "SELECT event_id, seq, amount, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY event_id ORDER BY {order}) AS rn FROM input WHERE amount >= 0) WHERE rn = 1"
    );
    let pipeline = format!(
        "[pipeline]\nname = \"dedup\"\nbatch_size = 64\nmax_out_of_orderness_ms = 1000\n{settings}\n\n[source.file]\npath = {input:?}\ntimestamp_field = \"ts\"\n\n[[operators]]\nname = \"dedup\"\nsql = {query:?}\nstate_ttl_ms = 600_000\n\n[sink.file]\npath = {output:?}\n\n[dead_letter.file]\npath = {dead:?}\nformat = \"record\"\n"
    );
    run_pipeline_to_end(&pipeline, Duration::from_secs(120));
    (read_json_lines(&output), read_json_lines(&dead))
}

fn sorted(rows: Vec<Value>) -> Vec<String> {
    let mut rows: Vec<String> = rows.iter().map(Value::to_string).collect();
    rows.sort();
    rows
}

fn row(event: &(usize, String, i64, i64)) -> Value {
    json!({"event_id": event.1, "seq": event.0, "amount": event.2, "ts": event.3})
}

#[test]
fn by_arrival_each_ids_first_record_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut first: BTreeMap<String, Value> = BTreeMap::new();
    for event in events().iter().filter(|e| e.2 >= 0) {
        first.entry(event.1.clone()).or_insert_with(|| row(event));
    }
    let expected = sorted(first.into_values().collect());
    assert!(expected.len() > 900);
    for workers in ["workers = 1", "workers = 2"] {
        let (outputs, dead) = run(dir.path(), workers, "PROCTIME()");
        assert!(dead.is_empty(), "{dead:?}");
        assert_eq!(sorted(outputs), expected, "{workers}");
    }
}

#[test]
fn by_event_time_each_ids_earliest_record_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut earliest: BTreeMap<String, (i64, usize, Value)> = BTreeMap::new();
    for event in events().iter().filter(|e| e.2 >= 0) {
        let candidate = (event.3, event.0, row(event));
        earliest
            .entry(event.1.clone())
            .and_modify(|kept| {
                if (candidate.0, candidate.1) < (kept.0, kept.1) {
                    *kept = candidate.clone();
                }
            })
            .or_insert(candidate);
    }
    let expected = sorted(earliest.into_values().map(|(.., row)| row).collect());
    // Some earliest copies arrive after a later copy of their id.
    let by_arrival: BTreeMap<String, i64> =
        events()
            .iter()
            .filter(|e| e.2 >= 0)
            .fold(BTreeMap::new(), |mut first, e| {
                first.entry(e.1.clone()).or_insert(e.3);
                first
            });
    let differ = expected
        .iter()
        .filter(|row| {
            let row: Value = serde_json::from_str(row).unwrap();
            by_arrival[row["event_id"].as_str().unwrap()] != row["ts"].as_i64().unwrap()
        })
        .count();
    assert!(differ > 10, "{differ}");
    for workers in ["workers = 1", "workers = 2"] {
        let (outputs, dead) = run(dir.path(), workers, "ts");
        assert!(dead.is_empty(), "{dead:?}");
        assert_eq!(sorted(outputs), expected, "{workers}");
    }
}
