//! A running count per key, kept in host state: every record goes on with
//! `"count": n` added, n being how many records of its key came so far (and
//! to the side output `counts`, when the pipeline binds one). After a
//! restore, state and output must come from the same cut: the counts a
//! reader sees for a key are exactly 1, 2, ..., n.
//!
//! Config: `key_field` (default `key`): a string or integer field. A record
//! without it is dead-lettered.

use serde_json::Value;
use sluice_sdk::{Config, Emitter, Output, Record, Transform, export_transform, state};

struct RunningCount {
    key_field: String,
}

impl Transform for RunningCount {
    fn init(config: &Config) -> Result<Self, String> {
        Ok(RunningCount {
            key_field: config.get("key_field").unwrap_or("key").to_string(),
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        let mut event: Value = record.value_json()?;
        let key = match event.get(&self.key_field) {
            Some(Value::String(key)) if !key.is_empty() => key.clone(),
            Some(key @ Value::Number(_)) => key.to_string(),
            _ => return Err(format!("missing key field `{}`", self.key_field)),
        };
        let count = state::get(key.as_bytes())
            .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_slice()).ok())
            .map_or(0, u64::from_be_bytes)
            + 1;
        state::put(key.as_bytes(), &count.to_be_bytes());
        if let Some(object) = event.as_object_mut() {
            object.insert("count".into(), Value::from(count));
        }
        let value = serde_json::to_vec(&event).map_err(|e| e.to_string())?;
        out.emit(Output::value(&value).key(key.as_bytes()));
        out.side("counts", Output::value(&value).key(key.as_bytes()));
        Ok(())
    }
}

export_transform!(RunningCount);
