//! Bronze to Silver: validates required fields and their types, drops
//! duplicate events by id (remembered in host state), and dead-letters
//! invalid records with the reason.
//!
//! Config:
//! * `required`: comma-separated `field:type` (types: `string`, `integer`,
//!   `number`, `boolean`); strings must be non-empty.
//! * `id_field`: the event id used for de-duplication (default `event_id`).

use serde_json::Value;
use sluice_sdk::{Config, Emitter, Record, Transform, export_transform, host, state};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldType {
    String,
    Integer,
    Number,
    Boolean,
}

impl FieldType {
    fn parse(name: &str) -> Result<Self, String> {
        match name {
            "string" => Ok(FieldType::String),
            "integer" => Ok(FieldType::Integer),
            "number" => Ok(FieldType::Number),
            "boolean" => Ok(FieldType::Boolean),
            other => Err(format!(
                "unknown field type `{other}` (use string, integer, number or boolean)"
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            FieldType::String => "a string",
            FieldType::Integer => "an integer",
            FieldType::Number => "a number",
            FieldType::Boolean => "a boolean",
        }
    }

    fn matches(self, value: &Value) -> bool {
        match self {
            FieldType::String => value.as_str().is_some_and(|s| !s.is_empty()),
            FieldType::Integer => value.is_i64() || value.is_u64(),
            FieldType::Number => value.is_number(),
            FieldType::Boolean => value.is_boolean(),
        }
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(s) if s.is_empty() => "an empty string",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

struct ValidateDedup {
    required: Vec<(String, FieldType)>,
    id_field: String,
}

impl Transform for ValidateDedup {
    fn init(config: &Config) -> Result<Self, String> {
        let required = config
            .list("required")
            .into_iter()
            .map(|entry| {
                let (field, kind) = entry
                    .split_once(':')
                    .ok_or_else(|| format!("required entry `{entry}` must be field:type"))?;
                Ok((field.trim().to_string(), FieldType::parse(kind.trim())?))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(ValidateDedup {
            required,
            id_field: config.get("id_field").unwrap_or("event_id").to_string(),
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        let event: Value = record.value_json()?;
        if !event.is_object() {
            return Err(format!(
                "event must be a JSON object, found {}",
                json_type(&event)
            ));
        }
        for (field, kind) in &self.required {
            match event.get(field) {
                None => return Err(format!("missing required field `{field}`")),
                Some(value) if !kind.matches(value) => {
                    return Err(format!(
                        "field `{field}` must be {}, found {}",
                        kind.name(),
                        json_type(value)
                    ));
                }
                Some(_) => {}
            }
        }
        let id = match event.get(&self.id_field) {
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            Some(other @ Value::Number(_)) => other.to_string(),
            _ => return Err(format!("missing event id field `{}`", self.id_field)),
        };
        let key = format!("seen:{id}");
        if state::get(key.as_bytes()).is_some() {
            host::counter_add("duplicates_dropped", 1);
            return Ok(());
        }
        state::put(key.as_bytes(), b"1");
        host::counter_add("valid", 1);
        out.forward();
        Ok(())
    }
}

export_transform!(ValidateDedup);
