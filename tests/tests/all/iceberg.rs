//! The Iceberg sink against a real SQL catalog (SQLite) and warehouse,
//! read back by an independent reader (pyiceberg): rows equal the model's,
//! each checkpoint is one snapshot naming it, a restore adds nothing, rows
//! that do not fit the schema are dead letters, and a table whose schema
//! does not fit stops the pipeline at start-up.

use serde_json::{Value, json};
use sluice_tests::{iceberg_checkpoints, read_iceberg_table, run_pipeline_to_end};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);

/// What pyiceberg sees in `table` of the catalog in `dir`.
fn read_table(dir: &Path, table: &str) -> Value {
    read_iceberg_table(&dir.join("catalog.db"), &dir.join("warehouse"), table)
}

fn pipeline(dir: &Path, columns: &str) -> String {
    format!(
        r#"
[pipeline]
name = "orders-to-silver"
batch_size = 16

[checkpoints]
storage = "{dir}/checkpoints"
interval_ms = 10

[source.file]
path = "{dir}/orders.jsonl"

[sink.iceberg]
catalog = "{dir}/catalog.db"
warehouse = "{dir}/warehouse"
namespace = "silver"
table = "orders"
columns = {columns}
partition = ["day(at)", "bucket(4, id)"]

[dead_letter.file]
path = "{dir}/dead-letters.jsonl"
format = "record"
"#,
        dir = dir.display()
    )
}

const COLUMNS: &str = r#"[
  { name = "id", type = "long", required = true },
  { name = "customer", type = "string" },
  { name = "amount", type = "decimal(10, 2)" },
  { name = "at", type = "timestamptz", required = true },
]"#;

/// The orders: valid ones and two that do not fit the schema.
fn write_orders(dir: &Path, count: i64) -> Vec<Value> {
    let mut lines = Vec::new();
    let mut valid = Vec::new();
    for id in 0..count {
        let at = 1_700_000_000_000 + id * 3_600_000;
        let order = json!({
            "id": id,
            "customer": format!("c{}", id % 7),
            "amount": format!("{}.{:02}", id % 100, id % 97),
            "at": at,
        });
        lines.push(order.to_string());
        valid.push(order);
    }
    lines.insert(
        lines.len().min(3),
        r#"{"id":"not a number","at":1700000000000}"#.into(),
    );
    lines.insert(
        lines.len().min(7),
        r#"{"customer":"no id","at":1700000000000}"#.into(),
    );
    std::fs::write(dir.join("orders.jsonl"), lines.join("\n") + "\n").unwrap();
    valid
}

/// A row as the model and as pyiceberg print it, comparable.
fn row_key(id: i64, customer: &str, amount: &str) -> (i64, String, String) {
    (id, customer.to_string(), amount.to_string())
}

#[test]
fn rows_reach_an_iceberg_table_once_per_checkpoint_and_pyiceberg_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let valid = write_orders(dir.path(), 20_000);
    let text = pipeline(dir.path(), COLUMNS);
    let (_, snapshot) = run_pipeline_to_end(&text, WAIT);
    assert_eq!(snapshot.dead_letters, 2, "{snapshot:?}");

    let table = read_table(dir.path(), "silver.orders");
    let mut seen: BTreeMap<(i64, String, String), usize> = BTreeMap::new();
    for row in table["rows"].as_array().unwrap() {
        let amount = row["amount"].as_str().unwrap_or_default().to_string();
        *seen
            .entry(row_key(
                row["id"].as_i64().unwrap(),
                row["customer"].as_str().unwrap(),
                &amount,
            ))
            .or_default() += 1;
    }
    let mut expected: BTreeMap<(i64, String, String), usize> = BTreeMap::new();
    for order in &valid {
        // pyiceberg prints decimals with their scale: 7.5 as "7.50".
        let amount = order["amount"].as_str().unwrap();
        let (whole, fraction) = amount.split_once('.').unwrap();
        *expected
            .entry(row_key(
                order["id"].as_i64().unwrap(),
                order["customer"].as_str().unwrap(),
                &format!("{whole}.{fraction:0<2}"),
            ))
            .or_default() += 1;
    }
    assert!(
        seen == expected,
        "rows differ: {} seen, {} expected",
        seen.len(),
        expected.len()
    );

    // One snapshot per checkpoint that wrote rows, each naming the
    // pipeline, the sink and the checkpoint, in increasing order; no data
    // file twice.
    for snapshot in table["snapshots"].as_array().unwrap() {
        assert_eq!(snapshot["summary"]["sluice.pipeline"], "orders-to-silver");
        assert_eq!(snapshot["summary"]["sluice.sink"], "sink");
    }
    let ids = iceberg_checkpoints(&table);
    assert!(ids.len() > 1, "several checkpoints: {ids:?}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // The dead letters say why.
    let dead = std::fs::read_to_string(dir.path().join("dead-letters.jsonl")).unwrap();
    assert_eq!(dead.lines().count(), 2);
    assert!(
        dead.contains("does not fit Iceberg table silver.orders"),
        "{dead}"
    );

    // A restore of the finished run adds nothing.
    let (_, again) = run_pipeline_to_end(&text, WAIT);
    assert_eq!(again.records_in, 0, "{again:?}");
    let after = read_table(dir.path(), "silver.orders");
    assert_eq!(after["rows"].as_array().unwrap().len(), valid.len());
}

/// The start-up error of the pipeline file text `text` (written into
/// `dir`), which must not open.
fn start_up_error(dir: &Path, text: &str) -> String {
    let file = dir.join("changed.toml");
    std::fs::write(&file, text).unwrap();
    let loaded = sluice_host::config::LoadedConfig::load(&file).unwrap();
    match sluice_host::pipeline::Pipeline::open(
        &loaded,
        &sluice_tests::runtime(),
        &sluice_host::pipeline::wasm_files_only,
        &sluice_host::checkpoint::RestoreFrom::Fresh,
    ) {
        Ok(_) => panic!("the pipeline opened:\n{text}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_table_whose_schema_does_not_fit_stops_the_pipeline_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    write_orders(dir.path(), 10);
    run_pipeline_to_end(&pipeline(dir.path(), COLUMNS), WAIT);
    let changed = COLUMNS.replace(
        r#"{ name = "customer", type = "string" }"#,
        r#"{ name = "customer", type = "long" }"#,
    );
    let error = start_up_error(dir.path(), &pipeline(dir.path(), &changed));
    assert!(error.contains("field `sink.iceberg`"), "{error}");
    assert!(
        error.contains("column `customer` is string in the existing table, not long"),
        "{error}"
    );
}

/// A catalog that cannot be opened or created, and a warehouse nothing can
/// be written to (a directory that cannot exist; an S3 bucket that does
/// not exist), stop the pipeline at start-up naming the sink.
#[test]
fn a_missing_catalog_or_an_unwritable_warehouse_stops_the_pipeline_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    write_orders(dir.path(), 10);
    let blocker = dir.path().join("not-a-directory");
    std::fs::write(&blocker, "a file").unwrap();
    let base = pipeline(dir.path(), COLUMNS);

    let catalog = base.replace(
        &format!("catalog = \"{}/catalog.db\"", dir.path().display()),
        &format!("catalog = \"{}/catalog.db\"", blocker.display()),
    );
    let error = start_up_error(dir.path(), &catalog);
    assert!(error.contains("field `sink.iceberg`"), "{error}");
    assert!(error.contains("not-a-directory"), "{error}");

    let warehouse = base.replace(
        &format!("warehouse = \"{}/warehouse\"", dir.path().display()),
        &format!("warehouse = \"{}/warehouse\"", blocker.display()),
    );
    let error = start_up_error(dir.path(), &warehouse);
    assert!(error.contains("field `sink.iceberg`"), "{error}");
    assert!(error.contains("cannot create warehouse"), "{error}");

    // An S3 warehouse in a bucket that does not exist: the table's
    // metadata cannot be written.
    sluice_tests::s3::use_test_credentials();
    let s3 = base
        .replace(
            &format!("catalog = \"{}/catalog.db\"", dir.path().display()),
            &format!("catalog = \"{}/s3-catalog.db\"", dir.path().display()),
        )
        .replace(
            &format!("warehouse = \"{}/warehouse\"", dir.path().display()),
            &format!(
                "warehouse = \"s3://no-such-bucket-{}/warehouse\"\ns3 = {{ endpoint = \"{}\", region = \"us-east-1\" }}",
                std::process::id(),
                sluice_tests::s3::endpoint()
            ),
        );
    let error = start_up_error(dir.path(), &s3);
    assert!(error.contains("field `sink.iceberg`"), "{error}");
    assert!(error.contains("no-such-bucket"), "{error}");
}

/// The same sink against a REST catalog (Apache Iceberg's reference
/// server from the dev services), read back through the same catalog by
/// pyiceberg; a REST catalog that does not answer stops the pipeline at
/// start-up.
#[test]
fn rows_reach_a_table_of_a_rest_catalog_and_pyiceberg_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let valid = write_orders(dir.path(), 500);
    let namespace = format!("rest_{}", std::process::id());
    let rest = |uri: &str| {
        pipeline(dir.path(), COLUMNS)
            .replace(
                &format!(
                    "catalog = \"{dir}/catalog.db\"\nwarehouse = \"{dir}/warehouse\"\nnamespace = \"silver\"",
                    dir = dir.path().display()
                ),
                &format!("rest = {{ uri = \"{uri}\" }}\nnamespace = \"{namespace}\""),
            )
    };
    let text = rest(&sluice_tests::rest_catalog_uri());
    assert!(text.contains("rest = {"), "{text}");
    let (_, snapshot) = run_pipeline_to_end(&text, WAIT);
    assert_eq!(snapshot.dead_letters, 2, "{snapshot:?}");
    let table = sluice_tests::read_iceberg_rest_table(
        &sluice_tests::rest_catalog_uri(),
        &format!("{namespace}.orders"),
    );
    let mut ids: Vec<i64> = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    let mut expected: Vec<i64> = valid.iter().map(|o| o["id"].as_i64().unwrap()).collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);
    let checkpoints = iceberg_checkpoints(&table);
    assert!(!checkpoints.is_empty());
    assert!(
        checkpoints.windows(2).all(|w| w[0] < w[1]),
        "{checkpoints:?}"
    );

    // Nothing listens on port 9: a missing catalog.
    let error = start_up_error(dir.path(), &rest("http://127.0.0.1:9"));
    assert!(error.contains("field `sink.iceberg`"), "{error}");
    assert!(
        error.contains("the REST catalog http://127.0.0.1:9 does not answer"),
        "{error}"
    );
}

/// A warehouse on S3 (the dev services' S3 server): the table is read back
/// from S3 by pyiceberg, and on restore a data file of this sink that no
/// snapshot references (as a crash leaves behind) is deleted while another
/// writer's file is left alone.
#[test]
fn an_s3_warehouse_is_written_read_back_and_cleaned_of_orphans_on_restore() {
    use sluice_host::checkpoint::CheckpointStorage as _;
    sluice_tests::s3::use_test_credentials();
    let dir = tempfile::tempdir().unwrap();
    let valid = write_orders(dir.path(), 300);
    let bucket = format!("iceberg-{}", std::process::id());
    sluice_tests::s3::create_bucket(&bucket);
    let warehouse = format!("s3://{bucket}/warehouse");
    let text = pipeline(dir.path(), COLUMNS).replace(
        &format!("warehouse = \"{}/warehouse\"", dir.path().display()),
        &format!(
            "warehouse = \"{warehouse}\"\ns3 = {{ endpoint = \"{}\", region = \"us-east-1\" }}",
            sluice_tests::s3::endpoint()
        ),
    );
    let (_, snapshot) = run_pipeline_to_end(&text, WAIT);
    assert_eq!(snapshot.dead_letters, 2, "{snapshot:?}");
    let table = sluice_tests::read_iceberg_table_at(
        &dir.path().join("catalog.db"),
        &warehouse,
        "silver.orders",
    );
    assert_eq!(table["rows"].as_array().unwrap().len(), valid.len());
    let files: Vec<&str> = table["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        files
            .iter()
            .all(|f| f.starts_with(&format!("{warehouse}/"))),
        "{files:?}"
    );

    // What a crash leaves: a file of this sink no snapshot references.
    let name = files[0].rsplit('/').next().unwrap();
    let tag: Vec<&str> = name.splitn(3, '-').take(2).collect();
    let data = sluice_tests::s3::storage(&bucket, "warehouse/silver/orders/data");
    let orphan = format!("{}-crashed-9-00001.parquet", tag.join("-"));
    data.put(&orphan, b"never committed").unwrap();
    data.put("other-writer-00001.parquet", b"not ours").unwrap();
    let (_, again) = run_pipeline_to_end(&text, WAIT);
    assert_eq!(again.records_in, 0, "{again:?}");
    let keys = data.list("").unwrap();
    assert!(!keys.contains(&orphan), "{keys:?}");
    assert!(
        keys.contains(&"other-writer-00001.parquet".to_string()),
        "{keys:?}"
    );
    let after = sluice_tests::read_iceberg_table_at(
        &dir.path().join("catalog.db"),
        &warehouse,
        "silver.orders",
    );
    assert_eq!(after["rows"].as_array().unwrap().len(), valid.len());
}

/// Another writer appends to the same table (through the REST catalog)
/// while the pipeline commits a snapshot every few milliseconds: commits
/// that lose the race are retried on the refreshed table, and both writers'
/// rows are there exactly once.
#[test]
fn commits_racing_another_writer_are_retried_and_nothing_is_lost_or_doubled() {
    let dir = tempfile::tempdir().unwrap();
    let namespace = format!("race_{}", std::process::id());
    let uri = sluice_tests::rest_catalog_uri();
    // Paced generated orders (about 4 s), a checkpoint every 10 ms: a
    // snapshot commit every few milliseconds for the other writer to race.
    let count = 8_000;
    let text = format!(
        r#"
[pipeline]
name = "race"
batch_size = 16

[checkpoints]
storage = "{dir}/checkpoints"
interval_ms = 10

[source.generator]
profile = "bronze"
count = {count}
rate = 2000
invalid_ratio = 0.0
duplicate_ratio = 0.0

[sink.iceberg]
rest = {{ uri = "{uri}" }}
namespace = "{namespace}"
table = "orders"
columns = [
  {{ name = "event_id", type = "string", required = true }},
  {{ name = "user_id", type = "long" }},
  {{ name = "ts", type = "timestamptz" }},
]
"#,
        dir = dir.path().display()
    );
    let table = format!("{namespace}.orders");
    let other_writer = std::process::Command::new(sluice_tests::tools_python())
        .arg(sluice_tests::repo_root().join("tests/python/append_iceberg.py"))
        .args([&uri, &table, "60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (_, snapshot) = run_pipeline_to_end(&text, WAIT);
    let output = other_writer.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the other writer failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let other: Value = serde_json::from_slice(&output.stdout).unwrap();
    eprintln!(
        "other writer: {other}; pipeline checkpoints: {}; last: {:?}",
        snapshot.checkpoints.completed,
        snapshot.checkpoints.last()
    );

    let read = sluice_tests::read_iceberg_rest_table(&uri, &table);
    let rows = read["rows"].as_array().unwrap();
    let ours: std::collections::BTreeSet<&str> = rows
        .iter()
        .filter_map(|row| row["event_id"].as_str())
        .filter(|id| id.starts_with("evt-"))
        .collect();
    let theirs = rows
        .iter()
        .filter(|row| {
            row["event_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("other-"))
        })
        .count();
    assert_eq!(ours.len(), count, "every generated order once");
    assert_eq!(theirs, 60, "every row of the other writer once");
    assert_eq!(rows.len(), count + 60, "nothing doubled");
    let checkpoints = iceberg_checkpoints(&read);
    assert!(
        checkpoints.windows(2).all(|w| w[0] < w[1]),
        "{checkpoints:?}"
    );
}

/// Dead letters into a Bronze dead-letter table: the payload as it came
/// in, the reason, where it came from and the `late_arrival` flag as
/// columns.
#[test]
fn dead_letters_land_in_a_bronze_table_with_reason_and_source() {
    let dir = tempfile::tempdir().unwrap();
    write_orders(dir.path(), 100);
    let text = pipeline(dir.path(), COLUMNS).replace(
        &format!(
            "[dead_letter.file]\npath = \"{}/dead-letters.jsonl\"\nformat = \"record\"\n",
            dir.path().display()
        ),
        &format!(
            "[dead_letter.iceberg]\ncatalog = \"{dir}/catalog.db\"\nwarehouse = \"{dir}/warehouse\"\nnamespace = \"bronze\"\ntable = \"dead_letters\"\nrows = \"dead-letter\"\npartition = [\"day(dead_lettered_at)\"]\n",
            dir = dir.path().display()
        ),
    );
    assert!(text.contains("[dead_letter.iceberg]"), "{text}");
    run_pipeline_to_end(&text, WAIT);
    let table = read_table(dir.path(), "bronze.dead_letters");
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let payloads: Vec<&str> = rows.iter().filter_map(|r| r["payload"].as_str()).collect();
    assert!(
        payloads.contains(&r#"{"id":"not a number","at":1700000000000}"#),
        "{payloads:?}"
    );
    assert!(
        payloads.contains(&r#"{"customer":"no id","at":1700000000000}"#),
        "{payloads:?}"
    );
    for row in rows {
        assert_eq!(row["payload_encoding"], "utf8");
        assert!(
            row["reason"]
                .as_str()
                .unwrap()
                .contains("does not fit Iceberg table silver.orders"),
            "{row}"
        );
        assert_eq!(row["late_arrival"], false);
        assert!(row["source_offset"].as_i64().is_some(), "{row}");
        assert!(!row["dead_lettered_at"].is_null(), "{row}");
    }
}
