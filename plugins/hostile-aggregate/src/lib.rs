//! Hostile test plugin: a window aggregate that counts records and sums
//! their `amount`, and traps (panics) in `add` on a record whose `trap`
//! field is `true`. It reads both fields on the projected path, so the
//! host must stop the faulting batch call, narrow the fault down to the
//! records to blame and count every other record exactly once.

use serde::{Deserialize, Serialize};
use sluice_sdk::{Aggregate, Config, Record, export_aggregate};

/// What is kept per key and window.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Totals {
    count: u64,
    sum: i64,
}

struct Hostile;

impl Aggregate for Hostile {
    type Accumulator = Totals;

    fn init(_config: &Config) -> Result<Self, String> {
        Ok(Hostile)
    }

    fn add(&mut self, totals: &mut Totals, record: &Record<'_>) -> Result<(), String> {
        if record.field("trap")?.and_then(|flag| flag.as_bool()) == Some(true) {
            panic!("hostile-aggregate: refusing this record");
        }
        let amount = record
            .field("amount")?
            .and_then(|value| value.as_i64())
            .ok_or("field `amount` is not an integer")?;
        totals.count += 1;
        totals.sum += amount;
        Ok(())
    }

    fn merge(&mut self, a: Totals, b: Totals) -> Totals {
        Totals {
            count: a.count + b.count,
            sum: a.sum + b.sum,
        }
    }

    fn finish(&mut self, totals: Totals) -> serde_json::Value {
        serde_json::json!({ "count": totals.count, "sum": totals.sum })
    }

    fn json_fields(&self) -> Vec<String> {
        vec!["amount".to_string(), "trap".to_string()]
    }
}

export_aggregate!(Hostile);
