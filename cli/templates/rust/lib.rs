//! {{name}}: a Sluice transform plugin.
//!
//! Build: `sluice plugin build .`
//! Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl`

use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

struct Plugin {
    /// Field every record must have (config key `required_field`).
    required_field: String,
}

impl Transform for Plugin {
    fn init(config: &Config) -> Result<Self, String> {
        Ok(Plugin {
            required_field: config.get("required_field").unwrap_or("id").to_string(),
        })
    }

    /// The JSON fields `process` reads with `record.field`: the host finds
    /// them while it packs each batch, so the plugin parses nothing.
    fn json_fields(&self) -> Vec<String> {
        vec![self.required_field.clone()]
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        // Returning Err sends this record (alone) to the dead-letter output;
        // `record.field` returns one for a value that is not a JSON object.
        if record.field(&self.required_field)?.is_none() {
            out.dead_letter(&format!("missing field `{}`", self.required_field));
            return Ok(());
        }
        out.forward();
        Ok(())
    }
}

export_transform!(Plugin);
