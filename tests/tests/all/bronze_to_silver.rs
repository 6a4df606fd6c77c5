//! The lakehouse example (`examples/bronze-to-silver/`) end to end against
//! the dev services, as its README commands run it: its own producer
//! (Confluent's Avro serializer, the registry) writes Bronze events, the
//! example pipeline runs to the end of the topic, and pyiceberg and a Kafka
//! consumer find what the producer says a correct pipeline makes of them.

use sluice_tests::kafka::{bootstrap, broker_log_lines, read_to_end, unique_topic};
use sluice_tests::{repo_root, tools_python};

/// Runs the example's `produce.py` into `topic`; its account of the events.
fn produce(topic: &str, count: u64) -> serde_json::Value {
    let output = std::process::Command::new(tools_python())
        .arg(repo_root().join("examples/bronze-to-silver/produce.py"))
        .args(["--topic", topic, "--count", &count.to_string()])
        .args([
            "--bootstrap",
            &bootstrap(),
            "--registry",
            &sluice_tests::registry::url(),
        ])
        .output()
        .unwrap_or_else(|e| panic!("produce.py: {e}"));
    assert!(
        output.status.success(),
        "produce.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("produce.py output: {e}"))
}

#[test]
fn the_bronze_to_silver_example_runs_to_the_end_and_its_tables_hold_what_they_must() {
    let root = repo_root();
    let dir = tempfile::tempdir().unwrap();
    let (input, totals) = (unique_topic("orders-bronze"), unique_topic("minute-totals"));
    let expected = produce(&input, 5_000);

    // The example as it is, with built plugins, absolute paths and this
    // test's topics and output directory.
    let example = root.join("examples/bronze-to-silver");
    let text = std::fs::read_to_string(example.join("pipeline.toml"))
        .unwrap()
        .replace(
            "../../plugins/validate-dedup",
            &sluice_tests::plugin("validate-dedup").display().to_string(),
        )
        .replace(
            "../../plugins/pii-redact",
            &sluice_tests::plugin("pii-redact").display().to_string(),
        )
        .replace(
            "../../out/bronze-to-silver/",
            &format!("{}/", dir.path().display()),
        )
        .replace(
            "\"order.avsc\"",
            &format!("\"{}\"", example.join("order.avsc").display()),
        )
        .replace("\"orders-bronze\"", &format!("\"{input}\""))
        .replace(
            "group_id = \"bronze-to-silver\"",
            &format!("group_id = \"{input}\""),
        )
        .replace("\"customer-minute-totals\"\n", &format!("\"{totals}\"\n"))
        .replace("127.0.0.1:9092", &bootstrap())
        .replace(
            "http://127.0.0.1:8081/apis/ccompat/v7",
            &sluice_tests::registry::url(),
        );
    assert!(text.contains(&totals), "{text}");
    let pipeline = dir.path().join("pipeline.toml");
    std::fs::write(&pipeline, &text).unwrap();
    let report = sluice_cli::run::run_pipeline(
        &pipeline,
        false,
        &sluice_host::checkpoint::RestoreFrom::Latest,
    )
    .unwrap_or_else(|e| panic!("{e:#}"));

    let output = std::process::Command::new(tools_python())
        .arg(example.join("query.py"))
        .args([
            "--lake",
            &format!("{}/lake", dir.path().display()),
            "--json",
        ])
        .output()
        .unwrap_or_else(|e| panic!("query.py: {e}"));
    assert!(
        output.status.success(),
        "query.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tables: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        tables["silver_rows"], expected["valid"],
        "{tables} {expected}"
    );
    assert_eq!(tables["silver_distinct_event_ids"], expected["valid"]);
    assert_eq!(tables["emails_in_clear"], 0);
    let invalid = expected["invalid"].as_u64().unwrap();
    let late = expected["late"].as_u64().unwrap();
    assert!(late > 0 && invalid > 0, "{expected}");
    assert_eq!(
        tables["dead_letters"].as_u64(),
        Some(invalid + late),
        "{tables}"
    );
    assert_eq!(tables["late_arrivals"].as_u64(), Some(late), "{tables}");

    // One total per customer and minute (nothing arrives within the
    // allowed lateness, so no window fires twice), summing to the on-time
    // events' amounts.
    let windows = expected["windows"].as_u64().unwrap() as usize;
    let (results, complete) = read_to_end(&totals, 1, true);
    assert!(complete, "{totals} not read to its end");
    if results.len() != windows {
        // What was written, committed or not, and what the run reported:
        // tells a transaction that was aborted from results never written.
        let (written, _) = read_to_end(&totals, 1, false);
        panic!(
            "{} window results committed, {windows} expected; {} written (committed or not), last offsets {:?} / {:?}, the topic's first and end offsets {:?} / {:?} (records deleted when the first is above 0); run: {:?} in {:?}, {} records out, {} barriers, watermark {:?}, checkpoints {:?}; the broker on its transactions:\n{}",
            results.len(),
            written.len(),
            results.last().map(|r| r.offset),
            written.last().map(|r| r.offset),
            sluice_tests::kafka_low_offsets(&totals, 1),
            sluice_tests::kafka_end_offsets(&totals, 1),
            report.outcome,
            report.elapsed,
            report.snapshot.records_out,
            report.snapshot.barriers,
            report.snapshot.watermark,
            report.snapshot.checkpoints,
            broker_log_lines("sluice.default.bronze-to-silver").join("\n"),
        );
    }
    let sum: f64 = results
        .iter()
        .map(|r| {
            let value: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
            value["result"].as_f64().unwrap()
        })
        .sum();
    let total = expected["total_amount"].as_f64().unwrap();
    assert!((sum - total).abs() < 0.01, "{sum} != {total}");
}
