//! field-probe (Rust): a test plugin for the SDK's field API.
//!
//! For each record it emits, as JSON, what [`Record::field`] and the
//! record's other accessors returned (fields as their JSON text), then the
//! record with field `s` upper-cased and with a field `added` added
//! ([`Emitter::emit_replacing`]). It names its fields in
//! [`Transform::json_fields`] (config `project = "no"`: names none), so the
//! same plugin runs through the host's projected path or the packed one
//! (or the typed one), and they must agree. The Python plugin of the same
//! name does the same with the Python SDK. With config `drop = "yes"` it
//! emits nothing and counts each record it processes (plugin counter
//! `processed`): how a test sees that no record is processed twice.

use serde_json::{Value, json};
use sluice_sdk::json::{JsonField, quote};
use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

struct FieldProbe {
    project: bool,
    drop: bool,
}

/// A field as JSON (its source text parsed), `null` when missing.
fn as_json(field: Option<JsonField<'_>>) -> Result<Value, String> {
    match field {
        Some(field) => serde_json::from_str(field.raw()).map_err(|e| e.to_string()),
        None => Ok(Value::Null),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Transform for FieldProbe {
    fn init(config: &Config) -> Result<Self, String> {
        Ok(FieldProbe {
            project: config.get("project").unwrap_or("yes") == "yes",
            drop: config.get("drop") == Some("yes"),
        })
    }

    fn json_fields(&self) -> Vec<String> {
        match self.project {
            true => ["a", "s", "missing", "n"].map(String::from).to_vec(),
            false => Vec::new(),
        }
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        if self.drop {
            sluice_sdk::host::counter_add("processed", 1);
            return Ok(());
        }
        let s = record.field("s")?;
        let missing = record.field("missing")?;
        let probe = json!({
            "a": record.field("a")?.map(|f| f.raw()),
            "s": s.and_then(|f| f.as_str()),
            "n": record.field("n")?.map(|f| f.raw()),
            "missing": if missing.is_none() { json!("default") } else { as_json(missing)? },
            "undeclared": as_json(record.field("u")?)?,
            "key": record.key().map(hex),
            "headers": record.headers().map(|(name, value)| vec![name.to_string(), hex(value)]).collect::<Vec<_>>(),
            "event_time": record.event_time(),
            "source": [json!(record.topic()), json!(record.partition()), json!(record.offset())],
            "value_length": record.value().len(),
        });
        out.emit_json(&probe)?;
        if let Some(text) = s.and_then(|f| f.as_str()) {
            out.emit_replacing("s", quote(&text.to_uppercase()).as_bytes())?;
        }
        out.emit_replacing("added", br#"[1,{"x":null},"t\u00e9\"xt"]"#)
    }
}

export_transform!(FieldProbe);
