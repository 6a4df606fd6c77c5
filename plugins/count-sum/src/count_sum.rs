//! The count and sum of a numeric field per key and window, shared by the
//! plugin's two versions (`count-sum` and `count-sum-v2`): both keep the same
//! accumulator, so a window started by one is finished by the other, and
//! each says in the result which version finished it.

use serde::{Deserialize, Serialize};
use sluice_sdk::{Aggregate, Config, Record};

/// What is kept per key and window.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Totals {
    count: u64,
    sum: i64,
}

/// The aggregate, as plugin version `VERSION`.
pub struct CountSum<const VERSION: u32> {
    field: String,
}

impl<const VERSION: u32> Aggregate for CountSum<VERSION> {
    type Accumulator = Totals;

    /// `field`: the integer field to sum (default `price`).
    fn init(config: &Config) -> Result<Self, String> {
        Ok(CountSum {
            field: config.get("field").unwrap_or("price").to_string(),
        })
    }

    fn add(&mut self, totals: &mut Totals, record: &Record<'_>) -> Result<(), String> {
        // Only the summed field is read: found by the host (it is named in
        // `json_fields`), or, off the projected path, from the record split
        // into its fields' texts, never deserialised into a document.
        let amount = record
            .field(&self.field)?
            .and_then(|value| value.as_i64())
            .ok_or_else(|| format!("field `{}` is not an integer", self.field))?;
        totals.count += 1;
        totals.sum = totals
            .sum
            .checked_add(amount)
            .ok_or_else(|| format!("the sum of `{}` overflows", self.field))?;
        Ok(())
    }

    fn merge(&mut self, a: Totals, b: Totals) -> Totals {
        Totals {
            count: a.count + b.count,
            sum: a.sum.saturating_add(b.sum),
        }
    }

    fn finish(&mut self, totals: Totals) -> serde_json::Value {
        serde_json::json!({ "count": totals.count, "sum": totals.sum, "version": VERSION })
    }

    /// The summed field, found by the host in its own pass over each record.
    fn json_fields(&self) -> Vec<String> {
        vec![self.field.clone()]
    }
}
