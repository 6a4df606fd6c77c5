//! {{name}}: a Sluice window aggregate plugin.
//!
//! Per key and window: the number of records and the sum of an integer
//! field. Use it in a pipeline as a window operator's `plugin`.
//!
//! Build: `sluice plugin build .`
//! Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl --key-field user --timestamp-field ts`

use serde::{Deserialize, Serialize};
use sluice_sdk::{Aggregate, Config, Record, export_aggregate};

/// What the host keeps per key and window between calls.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Totals {
    count: u64,
    sum: i64,
}

struct Plugin {
    /// The integer field to sum (config key `field`).
    field: String,
}

impl Aggregate for Plugin {
    type Accumulator = Totals;

    fn init(config: &Config) -> Result<Self, String> {
        Ok(Plugin {
            field: config.get("field").unwrap_or("amount").to_string(),
        })
    }

    fn add(&mut self, totals: &mut Totals, record: &Record<'_>) -> Result<(), String> {
        // Returning Err sends this record to the dead-letter output; it
        // does not count. The field is named in `json_fields`, so the host
        // has found it already: nothing is parsed here but its number.
        let amount = record
            .field(&self.field)?
            .and_then(|value| value.as_i64())
            .ok_or_else(|| format!("field `{}` must be an integer", self.field))?;
        totals.count += 1;
        totals.sum = totals.sum.saturating_add(amount);
        Ok(())
    }

    /// Combines two windows' accumulators (session windows that merge).
    fn merge(&mut self, a: Totals, b: Totals) -> Totals {
        Totals {
            count: a.count + b.count,
            sum: a.sum.saturating_add(b.sum),
        }
    }

    /// The window's result.
    fn finish(&mut self, totals: Totals) -> serde_json::Value {
        serde_json::json!({ "count": totals.count, "sum": totals.sum })
    }

    /// The top-level JSON fields `add` reads with `record.field`: the host
    /// finds them in the pass it makes over each record anyway.
    fn json_fields(&self) -> Vec<String> {
        vec![self.field.clone()]
    }
}

export_aggregate!(Plugin);
