//! SQL operators in real pipelines: a file source, queries compiled at
//! start-up, file sinks; outputs and dead letters checked against the
//! same query computed here from the records.

use serde_json::{Value, json};
use sluice_tests::{read_json_lines, run_pipeline_to_end};
use std::time::Duration;

/// Records with every shape the query meets: typical ones, missing and
/// null fields, an `amount` that is a string (the query cannot compare
/// it: dead-lettered), nested payloads, strings with escapes and
/// multi-byte characters, values that are JSON but not objects.
fn input_lines() -> Vec<String> {
    let names = ["ann", "Bé\"r\\t", "😀 zoë", "", "line\nbreak"];
    (0..3000)
        .map(|i: i64| match i % 11 {
            0 => format!("[{i}, \"not an object\"]"),
            1 => json!({ "id": i, "amount": format!("{i}") }).to_string(),
            2 => json!({ "id": i, "name": null, "amount": i }).to_string(),
            3 => json!({ "id": i, "amount": i, "payload": { "amount": i * 3 } }).to_string(),
            _ => json!({
                "id": i,
                "name": names[(i % 5) as usize],
                "amount": i % 97,
                "payload": { "amount": i, "note": "x" },
                "extra": [1, 2, { "k": "v" }],
            })
            .to_string(),
        })
        .collect()
}

/// What the query below makes of `record`: `Ok(Some(output))`, `Ok(None)`
/// when filtered out, `Err(())` when dead-lettered.
fn model(record: &Value) -> Result<Option<Value>, ()> {
    let Some(object) = record.as_object() else {
        return Err(());
    };
    let amount = match object.get("amount") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(n.as_i64().ok_or(())?),
        Some(_) => return Err(()),
    };
    let name = match object.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(()),
    };
    // WHERE amount > 10 AND name IS NOT NULL
    let passes = match (amount, &name) {
        (Some(amount), Some(_)) => amount > 10,
        _ => false,
    };
    if !passes {
        return Ok(None);
    }
    let nested = record
        .pointer("/payload/amount")
        .cloned()
        .unwrap_or(Value::Null);
    Ok(Some(json!({
        "id": object.get("id").cloned().unwrap_or(Value::Null),
        "name": name.map(|n| n.to_uppercase()),
        "nested": nested,
        "doubled": amount.map(|a| a * 2),
        "label": format!("#{}", object.get("id").and_then(Value::as_i64).unwrap_or(-1)),
    })))
}

const QUERY: &str = "SELECT id, UPPER(name) AS name, payload.amount AS nested, amount * 2 AS doubled, \
     '#' || CAST(id AS STRING) AS label FROM orders WHERE amount > 10 AND name IS NOT NULL";

/// Runs `operators` (TOML) on the input lines; returns the outputs and the
/// dead letters (as records: value and headers).
fn run(dir: &std::path::Path, operators: &str) -> (Vec<Value>, Vec<Value>) {
    let input = dir.join("orders.jsonl");
    if !input.exists() {
        std::fs::write(&input, input_lines().join("\n") + "\n").unwrap();
    }
    let output = dir.join("out.jsonl");
    let dead = dir.join("dead.jsonl");
    let _ = std::fs::remove_file(&output);
    let _ = std::fs::remove_file(&dead);
    let pipeline = format!(
        "[pipeline]\nname = \"sql\"\nbatch_size = 100\n\n[source.file]\npath = {input:?}\n\n{operators}\n[sink.file]\npath = {output:?}\n\n[dead_letter.file]\npath = {dead:?}\nformat = \"record\"\n"
    );
    run_pipeline_to_end(&pipeline, Duration::from_secs(60));
    (read_json_lines(&output), read_json_lines(&dead))
}

fn expected() -> (Vec<Value>, Vec<i64>) {
    let mut outputs = Vec::new();
    let mut dead = Vec::new();
    for (line, text) in input_lines().iter().enumerate() {
        let record: Value = serde_json::from_str(text).unwrap();
        match model(&record) {
            Ok(Some(output)) => outputs.push(output),
            Ok(None) => {}
            Err(()) => dead.push(line as i64),
        }
    }
    (outputs, dead)
}

/// The offsets (line numbers) of dead-lettered records, checking each
/// carries the SQL reason and the operator's name.
fn dead_offsets(dead: &[Value], operator: &str) -> Vec<i64> {
    dead.iter()
        .map(|record| {
            let headers = &record["headers"];
            let reason = headers["sluice.dlq.reason"].as_str().unwrap_or_default();
            assert!(reason.starts_with("SQL: "), "{record}");
            assert_eq!(headers["sluice.dlq.operator"], operator, "{record}");
            headers["sluice.dlq.source.offset"]
                .as_str()
                .and_then(|offset| offset.parse().ok())
                .unwrap_or_else(|| panic!("no offset: {record}"))
        })
        .collect()
}

#[test]
fn a_sql_filter_and_projection_gives_the_models_records_and_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let (outputs, dead) = run(
        dir.path(),
        &format!("[[operators]]\nname = \"orders\"\nsql = {QUERY:?}\n"),
    );
    let (expected_outputs, expected_dead) = expected();
    assert!(expected_outputs.len() > 1000 && expected_dead.len() > 500);
    assert_eq!(outputs, expected_outputs);
    assert_eq!(dead_offsets(&dead, "orders"), expected_dead);
    // A string amount is dead-lettered with what was wrong.
    let reason = dead
        .iter()
        .filter_map(|record| record["headers"]["sluice.dlq.reason"].as_str())
        .find(|reason| reason.contains("STRING"))
        .unwrap_or_default();
    assert!(
        reason.contains("cannot compare STRING '1' with BIGINT 10"),
        "{reason}"
    );
}

#[test]
fn a_query_after_another_reads_the_records_it_made() {
    // The second operator's records come from the first (not the source's
    // parse): it reads each value itself.
    let dir = tempfile::tempdir().unwrap();
    let (outputs, dead) = run(
        dir.path(),
        &format!(
            "[[operators]]\nname = \"objects\"\nsql = \"SELECT * FROM input WHERE id IS NOT NULL\"\n\n[[operators]]\nname = \"orders\"\nsql = {QUERY:?}\n"
        ),
    );
    let (expected_outputs, expected_dead) = expected();
    assert_eq!(outputs, expected_outputs);
    // Non-objects fail the first query (`id` of an array), the rest the
    // second.
    let mut offsets = dead_offsets(
        &dead
            .iter()
            .filter(|r| r["headers"]["sluice.dlq.operator"] == "objects")
            .cloned()
            .collect::<Vec<_>>(),
        "objects",
    );
    offsets.extend(dead_offsets(
        &dead
            .iter()
            .filter(|r| r["headers"]["sluice.dlq.operator"] == "orders")
            .cloned()
            .collect::<Vec<_>>(),
        "orders",
    ));
    offsets.sort();
    assert_eq!(offsets, expected_dead);
}
