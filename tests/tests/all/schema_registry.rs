//! Avro in the Confluent wire format against a real schema registry
//! (Apicurio's Confluent-compatible API, started by
//! `scripts/dev-services.sh up`), with Confluent's own Python client as the
//! independent producer and reader, and pyiceberg reading the table.
//!
//! * Records of two schema versions (a field added with a default) reach
//!   the Silver Iceberg table through the pipeline's reader schema.
//! * A value naming an unknown schema id, one not in the wire format and
//!   one written with a schema the reader schema cannot read are dead
//!   letters with the reason.
//! * A registry outage stops the pipeline with a clear error; a restart
//!   once the registry answers loses nothing.
//! * The Kafka sink writes registry-framed Avro that Confluent's
//!   deserializer reads; a schema the registry refuses stops it at start-up.

use serde_json::{Value, json};
use sluice_tests::kafka::{Outgoing, create_topic, produce, unique_topic};
use sluice_tests::registry::{consume_avro, framed, produce_avro, register, url};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);

const ORDER_V1: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"order_id","type":"long"},
  {"name":"customer","type":"string"},
  {"name":"amount","type":"double"},
  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;

/// Version 2 adds `channel` with a default: BACKWARD compatible.
const ORDER_V2: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"order_id","type":"long"},
  {"name":"customer","type":"string"},
  {"name":"amount","type":"double"},
  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"channel","type":"string","default":"web"}]}"#;

fn order(id: i64, channel: Option<&str>) -> Value {
    let mut order = json!({
        "order_id": id,
        "customer": format!("c{}", id % 5),
        "amount": id as f64 * 1.5,
        "ts": 1_700_000_000_000i64 + id * 1000,
    });
    if let Some(channel) = channel {
        order["channel"] = json!(channel);
    }
    order
}

fn pipeline(dir: &Path, topic: &str, registry: &str, outage_timeout_ms: u64) -> String {
    format!(
        r#"
[pipeline]
name = "registry-to-silver"
batch_size = 64

[checkpoints]
storage = "{dir}/checkpoints"
interval_ms = 100

[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
group_id = "{topic}-group"
value_format = "avro-confluent"
avro_schema = "{dir}/order-v2.avsc"
schema_registry = {{ url = "{registry}", outage_timeout_ms = {outage_timeout_ms}, request_timeout_ms = 500 }}
timestamp_field = "ts"

[sink.iceberg]
catalog = "{dir}/catalog.db"
warehouse = "{dir}/warehouse"
namespace = "silver"
table = "orders"
avro_schema = "{dir}/order-v2.avsc"
partition = ["day(ts)"]

[dead_letter.file]
path = "{dir}/dead-letters.jsonl"
format = "record"
"#,
        dir = dir.display(),
        bootstrap = sluice_tests::kafka::bootstrap(),
    )
}

/// Opens the pipeline file at `file` as `sluice run` would (restoring its
/// latest checkpoint, if any); the start-up error as text.
fn open(file: &Path) -> Result<sluice_host::pipeline::Pipeline, String> {
    let loaded = sluice_host::config::LoadedConfig::load(file).map_err(|e| e.to_string())?;
    sluice_host::pipeline::Pipeline::open(
        &loaded,
        &sluice_tests::runtime(),
        &sluice_host::pipeline::wasm_files_only,
        &sluice_host::checkpoint::RestoreFrom::Latest,
    )
    .map_err(|e| e.to_string())
}

fn write_schemas(dir: &Path) {
    std::fs::write(dir.join("order-v1.avsc"), ORDER_V1).unwrap();
    std::fs::write(dir.join("order-v2.avsc"), ORDER_V2).unwrap();
}

#[test]
fn two_schema_versions_reach_the_silver_table_and_bad_values_are_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    write_schemas(dir.path());
    let topic = unique_topic("registry-orders");
    create_topic(&topic, 2);

    let v1: Vec<Value> = (0..300).map(|id| order(id, None)).collect();
    let v2: Vec<Value> = (300..600)
        .map(|id| order(id, Some(if id % 2 == 0 { "app" } else { "store" })))
        .collect();
    let v1_id = produce_avro(&topic, &dir.path().join("order-v1.avsc"), &v1);
    let v2_id = produce_avro(&topic, &dir.path().join("order-v2.avsc"), &v2);
    assert_ne!(v1_id, v2_id, "two versions, two ids");

    // A schema the reader schema cannot read (`amount` a string), under
    // another subject, and a value written with it.
    let incompatible_schema = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"order_id","type":"long"},{"name":"customer","type":"string"},{"name":"amount","type":"string"},{"name":"ts","type":"long"}]}"#;
    let answer = register(&unique_topic("elsewhere-value"), incompatible_schema);
    let incompatible_id = answer["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("registering: {answer}")) as u32;
    let schema = apache_avro::Schema::parse_str(incompatible_schema).unwrap();
    let mut record = apache_avro::types::Record::new(&schema).unwrap();
    record.put("order_id", 1i64);
    record.put("customer", "c1");
    record.put("amount", "a lot");
    record.put("ts", 1_700_000_000_000i64);
    let incompatible = framed(
        incompatible_id,
        &apache_avro::to_avro_datum(&schema, record).unwrap(),
    );
    let unknown = framed(2_000_000_000, &[2, 4, 6]);
    produce(
        &topic,
        &[
            Outgoing {
                value: &unknown,
                ..Outgoing::default()
            },
            Outgoing {
                value: br#"{"order_id": 1}"#,
                ..Outgoing::default()
            },
            Outgoing {
                value: &incompatible,
                ..Outgoing::default()
            },
        ],
    );

    let text = pipeline(dir.path(), &topic, &url(), 30_000);
    let (_, snapshot) = sluice_tests::run_pipeline_until(&text, WAIT, |s| {
        s.records_out >= 600 && s.dead_letters >= 3 && s.checkpoints.completed >= 1
    });
    assert_eq!(
        (snapshot.records_out, snapshot.dead_letters),
        (600, 3),
        "{snapshot:?}"
    );

    // Every order once, read through the v2 reader schema: v1 orders with
    // the default channel.
    let table = sluice_tests::read_iceberg_table(
        &dir.path().join("catalog.db"),
        &dir.path().join("warehouse"),
        "silver.orders",
    );
    let mut rows: BTreeMap<i64, (String, String)> = BTreeMap::new();
    for row in table["rows"].as_array().unwrap() {
        let id = row["order_id"].as_i64().unwrap();
        let previous = rows.insert(
            id,
            (
                row["customer"].as_str().unwrap().to_string(),
                row["channel"].as_str().unwrap().to_string(),
            ),
        );
        assert!(previous.is_none(), "order {id} twice");
    }
    assert_eq!(rows.len(), 600);
    for (id, (customer, channel)) in &rows {
        assert_eq!(customer, &format!("c{}", id % 5));
        let expected = match id {
            0..300 => "web",
            _ if id % 2 == 0 => "app",
            _ => "store",
        };
        assert_eq!(channel, expected, "order {id}");
    }

    let dead = std::fs::read_to_string(dir.path().join("dead-letters.jsonl")).unwrap();
    assert!(
        dead.contains("unknown or unusable writer schema id 2000000000"),
        "{dead}"
    );
    assert!(
        dead.contains("not in the Confluent wire format: magic byte is 0x7b"),
        "{dead}"
    );
    assert!(
        dead.contains(&format!(
            "writer schema id {incompatible_id} is incompatible with the reader schema"
        )),
        "{dead}"
    );
}

#[test]
fn a_registry_outage_stops_the_pipeline_and_a_restart_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write_schemas(dir.path());
    let topic = unique_topic("registry-outage");
    create_topic(&topic, 1);
    let orders: Vec<Value> = (0..50).map(|id| order(id, Some("app"))).collect();
    produce_avro(&topic, &dir.path().join("order-v2.avsc"), &orders);

    // Nothing listens on port 9 (discard): every request is refused.
    let down = pipeline(
        dir.path(),
        &topic,
        "http://127.0.0.1:9/apis/ccompat/v7",
        500,
    );
    let file = dir.path().join("down.toml");
    std::fs::write(&file, &down).unwrap();
    let pipeline_down = open(&file).unwrap_or_else(|e| panic!("{e}"));
    let error = match pipeline_down.run(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
        false,
    ))) {
        Ok(outcome) => panic!("the pipeline ran without its registry: {outcome:?}"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains("schema registry http://127.0.0.1:9/apis/ccompat/v7 unreachable"),
        "{error}"
    );

    // The registry is back: every order arrives, none was dead-lettered.
    let text = pipeline(dir.path(), &topic, &url(), 30_000);
    let (_, snapshot) = sluice_tests::run_pipeline_until(&text, WAIT, |s| {
        s.records_out >= 50 && s.checkpoints.completed >= 1
    });
    assert_eq!((snapshot.records_out, snapshot.dead_letters), (50, 0));
    let table = sluice_tests::read_iceberg_table(
        &dir.path().join("catalog.db"),
        &dir.path().join("warehouse"),
        "silver.orders",
    );
    assert_eq!(table["rows"].as_array().unwrap().len(), 50);
}

fn kafka_avro_sink_pipeline(dir: &Path, topic: &str, schema_file: &str) -> String {
    format!(
        r#"
[pipeline]
name = "avro-out"
batch_size = 16

[source.file]
path = "{dir}/orders.jsonl"

[sink.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
value_format = "avro-confluent"
avro_schema = "{dir}/{schema_file}"
schema_registry = {{ url = "{registry}" }}

[dead_letter.file]
path = "{dir}/dead-letters.jsonl"
format = "record"
"#,
        dir = dir.display(),
        bootstrap = sluice_tests::kafka::bootstrap(),
        registry = url(),
    )
}

#[test]
fn the_kafka_sink_writes_registry_framed_avro_that_confluent_reads() {
    let dir = tempfile::tempdir().unwrap();
    write_schemas(dir.path());
    let topic = unique_topic("avro-out");
    let mut lines: Vec<String> = (0..40)
        .map(|id| order(id, Some("store")).to_string())
        .collect();
    // Without `channel` the schema's default fills it; a string amount
    // does not fit.
    lines.push(order(40, None).to_string());
    lines.push(r#"{"order_id":41,"customer":"c1","amount":"lots","ts":1}"#.to_string());
    std::fs::write(dir.path().join("orders.jsonl"), lines.join("\n") + "\n").unwrap();

    let text = kafka_avro_sink_pipeline(dir.path(), &topic, "order-v2.avsc");
    let (_, snapshot) = sluice_tests::run_pipeline_to_end(&text, WAIT);
    assert_eq!(
        (snapshot.records_out, snapshot.dead_letters),
        (41, 1),
        "{snapshot:?}"
    );
    let read = consume_avro(&topic, 41);
    let ids: std::collections::BTreeSet<u32> = read.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 1, "one registered schema: {ids:?}");
    for (index, (_, value)) in read.iter().enumerate() {
        let id = index as i64;
        assert_eq!(value["order_id"], json!(id));
        assert_eq!(value["customer"], json!(format!("c{}", id % 5)));
        let channel = if id == 40 { "web" } else { "store" };
        assert_eq!(value["channel"], json!(channel), "{value}");
    }
    let dead = std::fs::read_to_string(dir.path().join("dead-letters.jsonl")).unwrap();
    assert!(dead.contains("does not fit the Avro schema"), "{dead}");

    // A schema the subject's compatibility rule refuses (a new field
    // without a default) stops the pipeline at start-up.
    std::fs::write(
        dir.path().join("order-v3.avsc"),
        ORDER_V2.replace(
            r#"{"name":"channel","type":"string","default":"web"}"#,
            r#"{"name":"channel","type":"string","default":"web"},{"name":"coupon","type":"string"}"#,
        ),
    )
    .unwrap();
    let file = dir.path().join("v3.toml");
    std::fs::write(
        &file,
        kafka_avro_sink_pipeline(dir.path(), &topic, "order-v3.avsc"),
    )
    .unwrap();
    let error = match open(&file) {
        Ok(_) => panic!("an incompatible schema was accepted"),
        Err(error) => error,
    };
    assert!(
        error.contains("field `sink.kafka.schema_registry`"),
        "{error}"
    );
    assert!(error.contains("409"), "{error}");
}
