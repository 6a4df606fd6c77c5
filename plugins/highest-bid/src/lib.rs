//! Nexmark q7: the highest bid in each window.
//!
//! `SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN (SELECT
//! MAX(price) AS maxprice, window_end FROM TUMBLE(bid, 10s)) B1 ON B.price =
//! B1.maxprice AND B.date_time BETWEEN window_end - 10s AND window_end`.
//!
//! As a window aggregate: the accumulator is the highest bid so far (ties
//! go to the earliest, then the lowest auction id, so that the result does
//! not depend on arrival order); `finish` returns it. Events other than bids
//! do not count. Used with a tumbling window on the bids' event time.

use serde::{Deserialize, Serialize};
use sluice_sdk::{Aggregate, Config, Record, export_aggregate};

/// The fields of a Nexmark bid that q7 reads.
#[derive(Deserialize)]
struct Event<'a> {
    event_type: &'a str,
    #[serde(default)]
    auction: u64,
    #[serde(default)]
    bidder: u64,
    #[serde(default)]
    price: u64,
    #[serde(default)]
    date_time: i64,
}

/// The best bid so far.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Best {
    bids: u64,
    top: Option<(u64, i64, u64, u64)>,
}

impl Best {
    /// Whether `candidate` (price, date_time, auction, bidder) beats the
    /// current top: higher price, then earlier, then lower auction id.
    fn offer(&mut self, candidate: (u64, i64, u64, u64)) {
        let better = match self.top {
            None => true,
            Some(top) => {
                (
                    candidate.0,
                    std::cmp::Reverse((candidate.1, candidate.2, candidate.3)),
                ) > (top.0, std::cmp::Reverse((top.1, top.2, top.3)))
            }
        };
        if better {
            self.top = Some(candidate);
        }
    }
}

struct HighestBid;

impl Aggregate for HighestBid {
    type Accumulator = Best;

    fn init(_config: &Config) -> Result<Self, String> {
        Ok(HighestBid)
    }

    fn add(&mut self, best: &mut Best, record: &Record<'_>) -> Result<(), String> {
        let event: Event<'_> = record.value_json()?;
        if event.event_type == "bid" {
            best.bids += 1;
            best.offer((event.price, event.date_time, event.auction, event.bidder));
        }
        Ok(())
    }

    fn merge(&mut self, mut a: Best, b: Best) -> Best {
        a.bids += b.bids;
        if let Some(top) = b.top {
            a.offer(top);
        }
        a
    }

    fn finish(&mut self, best: Best) -> serde_json::Value {
        match best.top {
            Some((price, date_time, auction, bidder)) => serde_json::json!({
                "auction": auction,
                "bidder": bidder,
                "price": price,
                "date_time": date_time,
                "bids_in_window": best.bids,
            }),
            None => serde_json::Value::Null,
        }
    }
}

export_aggregate!(HighestBid);
