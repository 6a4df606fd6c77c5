//! The quickstart pipeline, run as `sluice run` runs it, checked record by
//! record against an independent model of what it must do.

use serde_json::Value;
use sluice_host::connectors::generator::{GeneratorOptions, GeneratorSource, Profile};
use sluice_host::dataflow::Source;
use std::collections::HashSet;

fn read_json_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn mask_email(email: &str) -> String {
    let (local, domain) = email.split_once('@').unwrap();
    format!("{}***@{domain}", &local[..1])
}

fn mask_card(card: &str) -> String {
    let digits = card.chars().filter(char::is_ascii_digit).count();
    let mut seen = 0;
    card.chars()
        .map(|c| {
            if c.is_ascii_digit() {
                seen += 1;
                if digits - seen < 4 { c } else { '*' }
            } else {
                c
            }
        })
        .collect()
}

#[test]
fn quickstart_output_matches_the_model_record_by_record() {
    let root = sluice_tests::repo_root();
    let dir = tempfile::tempdir().unwrap();
    // The example, with its plugins as built components and outputs in a temp dir.
    let text = std::fs::read_to_string(root.join("examples/quickstart/pipeline.toml"))
        .unwrap()
        .replace(
            "../../plugins/validate-dedup",
            &sluice_tests::plugin("validate-dedup").display().to_string(),
        )
        .replace(
            "../../plugins/pii-redact",
            &sluice_tests::plugin("pii-redact").display().to_string(),
        )
        .replace("../../out/quickstart/", "");
    let pipeline = dir.path().join("pipeline.toml");
    std::fs::write(&pipeline, &text).unwrap();
    let report = sluice_cli::run::run_pipeline(
        &pipeline,
        false,
        &sluice_host::checkpoint::RestoreFrom::Latest,
    )
    .unwrap();

    // The model: regenerate the same input and apply the rules in plain Rust.
    let mut generator = GeneratorSource::new(
        "quickstart",
        GeneratorOptions {
            profile: Profile::Bronze,
            count: Some(20_000),
            seed: 42,
            invalid_ratio: 0.05,
            duplicate_ratio: 0.05,
            ..GeneratorOptions::default()
        },
    );
    let mut expected_silver = Vec::new();
    let mut expected_dead = Vec::new();
    let mut seen = HashSet::new();
    while let Some(batch) = generator.next_batch(1000).unwrap() {
        for record in batch.records {
            let Ok(mut event) = serde_json::from_slice::<Value>(&record.value) else {
                expected_dead.push("invalid JSON");
                continue;
            };
            if event.get("amount").is_none() {
                expected_dead.push("missing required field `amount`");
                continue;
            }
            if !event["amount"].is_number() {
                expected_dead.push("field `amount` must be a number");
                continue;
            }
            if event["event_id"] == "" {
                expected_dead.push("field `event_id` must be a string");
                continue;
            }
            if !seen.insert(event["event_id"].as_str().unwrap().to_string()) {
                continue;
            }
            event["email"] = Value::String(mask_email(event["email"].as_str().unwrap()));
            event["card_number"] = Value::String(mask_card(event["card_number"].as_str().unwrap()));
            let note = event["note"].as_str().unwrap().to_string();
            if let Some(at) = note.find("receipt to ") {
                let email = &note[at + "receipt to ".len()..];
                event["note"] = Value::String(format!(
                    "{}{}",
                    &note[..at + "receipt to ".len()],
                    mask_email(email)
                ));
            }
            expected_silver.push(event);
        }
    }

    let silver = read_json_lines(&dir.path().join("silver.jsonl"));
    assert_eq!(silver.len(), expected_silver.len());
    for (index, (got, want)) in silver.iter().zip(&expected_silver).enumerate() {
        assert_eq!(got, want, "silver record {index} differs");
    }

    let dead = read_json_lines(&dir.path().join("dead-letter.jsonl"));
    assert_eq!(dead.len(), expected_dead.len());
    for (got, want) in dead.iter().zip(&expected_dead) {
        let reason = got["headers"]["sluice.dlq.reason"].as_str().unwrap();
        assert!(
            reason.contains(want),
            "dead-letter reason `{reason}` should mention `{want}`"
        );
    }

    let s = &report.snapshot;
    assert_eq!(s.records_in, 20_000);
    assert_eq!(s.records_out as usize, expected_silver.len());
    assert_eq!(s.dead_letters as usize, expected_dead.len());
    let dedup = &s.operators[0];
    let dropped = dedup
        .plugin_counters
        .get("duplicates_dropped")
        .copied()
        .unwrap_or(0);
    assert_eq!(dedup.records_in, 20_000);
    assert_eq!(
        dedup.records_out + dedup.dead_letters + dropped,
        20_000,
        "every record is accounted for"
    );
    assert!(
        dropped > 500,
        "the generator made ~5% duplicates; dropped {dropped}"
    );
}
