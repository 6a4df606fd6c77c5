//! Nexmark q5 (hot items), second stage: the auctions with the most bids in
//! each sliding window.
//!
//! Input: the results of a window operator counting bids per auction over
//! sliding windows (`{"key": <auction>, "window_end": .., "result":
//! <count>, ...}`; a key of digits in a string is read too), grouped by `window_end` in a tumbling window of the
//! slide's length. Output: `{"window_end": .., "bids": <max count>,
//! "auctions": [<auction ids with that count, ascending>]}`.

use serde::{Deserialize, Serialize};
use sluice_sdk::{Aggregate, Config, Record, export_aggregate};

/// A first-stage window result (the fields q5 reads).
#[derive(Deserialize)]
struct Counted {
    key: serde_json::Value,
    window_end: i64,
    result: u64,
}

/// The auction id of a window result's key: a number, or digits in a
/// string.
fn auction_of(key: &serde_json::Value) -> Result<u64, String> {
    match key {
        serde_json::Value::Number(number) => number
            .as_u64()
            .ok_or_else(|| format!("auction key {number} is not an unsigned integer")),
        serde_json::Value::String(text) => text
            .parse()
            .map_err(|e| format!("auction key {text:?} is not a number: {e}")),
        other => Err(format!("auction key {other} is not a number")),
    }
}

/// The leaders so far.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Leaders {
    window_end: i64,
    bids: u64,
    auctions: Vec<u64>,
}

impl Leaders {
    fn offer(&mut self, bids: u64, auctions: &[u64]) {
        if bids > self.bids {
            self.bids = bids;
            self.auctions.clear();
        }
        if bids == self.bids {
            for auction in auctions {
                if let Err(at) = self.auctions.binary_search(auction) {
                    self.auctions.insert(at, *auction);
                }
            }
        }
    }
}

struct HotItems;

impl Aggregate for HotItems {
    type Accumulator = Leaders;

    fn init(_config: &Config) -> Result<Self, String> {
        Ok(HotItems)
    }

    fn add(&mut self, leaders: &mut Leaders, record: &Record<'_>) -> Result<(), String> {
        let counted: Counted = record.value_json()?;
        let auction = auction_of(&counted.key)?;
        leaders.window_end = leaders.window_end.max(counted.window_end);
        leaders.offer(counted.result, &[auction]);
        Ok(())
    }

    fn merge(&mut self, mut a: Leaders, b: Leaders) -> Leaders {
        a.window_end = a.window_end.max(b.window_end);
        a.offer(b.bids, &b.auctions);
        a
    }

    fn finish(&mut self, leaders: Leaders) -> serde_json::Value {
        serde_json::json!({
            "window_end": leaders.window_end,
            "bids": leaders.bids,
            "auctions": leaders.auctions,
        })
    }
}

export_aggregate!(HotItems);
