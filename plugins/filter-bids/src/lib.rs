//! Nexmark q2: bids on selected auctions.
//!
//! `SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0`, plus the
//! bidder (which later queries key sessions by).
//! Config: `modulus` (default 123; 1 keeps every bid).

use serde::{Deserialize, Serialize};
use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

#[derive(Deserialize)]
struct Event<'a> {
    event_type: &'a str,
    #[serde(default)]
    auction: u64,
    #[serde(default)]
    bidder: u64,
    #[serde(default)]
    price: u64,
}

#[derive(Serialize)]
struct Selected {
    auction: u64,
    price: u64,
    bidder: u64,
}

struct FilterBids {
    modulus: u64,
}

impl Transform for FilterBids {
    fn init(config: &Config) -> Result<Self, String> {
        let modulus: u64 = config.parse_or("modulus", 123)?;
        if modulus == 0 {
            return Err("modulus must be at least 1".into());
        }
        Ok(FilterBids { modulus })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        let event: Event<'_> = record.value_json()?;
        if event.event_type == "bid" && event.auction % self.modulus == 0 {
            out.emit_json(&Selected {
                auction: event.auction,
                price: event.price,
                bidder: event.bidder,
            })?;
        }
        Ok(())
    }
}

export_transform!(FilterBids);
