//! The file source reads Avro object container files (written here with
//! apache-avro, an independent writer) into JSON records.

use apache_avro::types::Record as AvroRecord;
use apache_avro::{Schema, Writer};
use sluice_host::connectors::file::{FileFormat, FileSource, FileSourceOptions};
use sluice_host::dataflow::Source;
use sluice_host::record::dead_letter_headers as h;

const SCHEMA: &str = r#"{
  "type": "record", "name": "Order",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "event_timestamp", "type": "long"},
    {"name": "email", "type": "string"},
    {"name": "tags", "type": {"type": "array", "items": "string"}}
  ]
}"#;

fn write_orders(n: i64) -> Vec<u8> {
    let schema = Schema::parse_str(SCHEMA).unwrap();
    let mut writer = Writer::new(&schema, Vec::new());
    for i in 0..n {
        let mut record = AvroRecord::new(writer.schema()).unwrap();
        record.put("id", i);
        record.put("event_timestamp", 1_700_000_000_000 + i);
        record.put("email", format!("user{i}@example.com"));
        record.put(
            "tags",
            apache_avro::types::Value::Array(vec![apache_avro::types::Value::String("a".into())]),
        );
        writer.append(record).unwrap();
        if i % 10 == 9 {
            writer.flush().unwrap(); // several blocks
        }
    }
    writer.into_inner().unwrap()
}

fn options() -> FileSourceOptions {
    FileSourceOptions {
        format: FileFormat::Avro,
        key_field: Some("id".into()),
        timestamp_field: Some("event_timestamp".into()),
    }
}

#[test]
fn avro_container_file_becomes_json_records_with_key_and_event_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.avro");
    std::fs::write(&path, write_orders(25)).unwrap();
    let mut source = FileSource::open("orders", &path, options()).unwrap();
    let mut records = Vec::new();
    while let Some(batch) = source.next_batch(8).unwrap() {
        assert!(batch.dead_letters.is_empty());
        records.extend(batch.records);
    }
    assert_eq!(records.len(), 25);
    for (i, record) in records.iter().enumerate() {
        let value: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"id": i, "event_timestamp": 1_700_000_000_000i64 + i as i64, "email": format!("user{i}@example.com"), "tags": ["a"]})
        );
        assert_eq!(record.key.as_deref(), Some(i.to_string().as_bytes()));
        assert_eq!(record.event_time, Some(1_700_000_000_000 + i as i64));
        assert_eq!(record.source.offset, i as i64);
    }
}

#[test]
fn corrupt_avro_block_is_dead_lettered_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.avro");
    let mut bytes = write_orders(30);
    let len = bytes.len();
    bytes.truncate(len - 40); // cut into the last block
    std::fs::write(&path, bytes).unwrap();
    let mut source = FileSource::open("orders", &path, options()).unwrap();
    let mut good = 0;
    let mut dead = Vec::new();
    while let Some(batch) = source.next_batch(100).unwrap() {
        good += batch.records.len();
        dead.extend(batch.dead_letters);
    }
    assert_eq!(good, 20, "the two intact blocks are read");
    assert_eq!(dead.len(), 1);
    let reason = String::from_utf8_lossy(dead[0].header(h::REASON).unwrap()).into_owned();
    assert!(reason.contains("cannot decode Avro datum"), "{reason}");
}

#[test]
fn a_file_that_is_not_avro_fails_at_open_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not.avro");
    std::fs::write(&path, b"{\"json\": true}\n").unwrap();
    let error = FileSource::open("orders", &path, options())
        .err()
        .expect("must fail");
    assert!(error.to_string().contains("not.avro"), "{error}");
}
