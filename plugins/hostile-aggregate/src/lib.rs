//! Hostile test plugin: a window aggregate that counts records and sums
//! their `amount`, and traps (panics) in `add` on a record whose `trap`
//! field is `true`. It reads its fields on the projected path, so the
//! host must stop the faulting batch call, narrow the fault down to the
//! records to blame and count every other record exactly once.
//!
//! A record whose `leak` field is `true` makes it keep 1 MiB it never
//! uses again (as a guest runtime that never frees its inputs does): the
//! host must replace the instance before the leak reaches its memory
//! limit, losing nothing.

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
        if record.field("leak")?.and_then(|flag| flag.as_bool()) == Some(true) {
            // Written, so that the pages are really the instance's.
            std::hint::black_box(Box::leak(vec![1u8; 1 << 20].into_boxed_slice()));
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
        vec!["amount".to_string(), "trap".to_string(), "leak".to_string()]
    }
}

export_aggregate!(Hostile);
