//! Nexmark q1: bids with their price converted from dollars to euros.
//!
//! `SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid`.
//! Prices are integer cents; the conversion is done in integer arithmetic
//! (`price * rate_per_mille / 1000`) so that every language computes the
//! same bytes. Events other than bids are dropped.
//!
//! Config: `rate_per_mille` (default 908); `encoding`: `json` (default) or
//! `binary` (Nexmark events as encoded by `sluice-nexmark`; the output is a
//! binary bid with the converted price).

use serde::{Deserialize, Serialize};
use sluice_nexmark::{self as nexmark, Encoding};
use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};
use std::borrow::Cow;

/// The fields of a Nexmark event that q1 reads (borrowed from the record
/// unless a string contains escapes).
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow)]
    event_type: Cow<'a, str>,
    #[serde(default)]
    auction: u64,
    #[serde(default)]
    bidder: u64,
    #[serde(default)]
    price: u64,
    #[serde(default)]
    date_time: i64,
    #[serde(default, borrow)]
    extra: Cow<'a, str>,
}

#[derive(Serialize)]
struct ConvertedBid<'a> {
    auction: u64,
    bidder: u64,
    price: u64,
    date_time: i64,
    extra: &'a str,
}

struct CurrencyConvert {
    rate_per_mille: u64,
    encoding: Encoding,
    buffer: Vec<u8>,
}

impl Transform for CurrencyConvert {
    fn init(config: &Config) -> Result<Self, String> {
        Ok(CurrencyConvert {
            rate_per_mille: config.parse_or("rate_per_mille", 908)?,
            encoding: config.parse_or("encoding", Encoding::Json)?,
            buffer: Vec::with_capacity(256),
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        if self.encoding == Encoding::Binary {
            return self.process_binary(record, out);
        }
        let event: Event<'_> = record.value_json()?;
        if event.event_type != "bid" {
            return Ok(());
        }
        let price = self.convert(event.price)?;
        self.buffer.clear();
        serde_json::to_writer(
            &mut self.buffer,
            &ConvertedBid {
                auction: event.auction,
                bidder: event.bidder,
                price,
                date_time: event.date_time,
                extra: &event.extra,
            },
        )
        .map_err(|e| format!("cannot encode JSON: {e}"))?;
        out.emit_value(&self.buffer);
        Ok(())
    }
}

impl CurrencyConvert {
    /// Cents in dollars to cents in euros, failing (rather than wrapping)
    /// on overflow.
    fn convert(&self, price: u64) -> Result<u64, String> {
        price
            .checked_mul(self.rate_per_mille)
            .map(|scaled| scaled / 1000)
            .ok_or_else(|| {
                "price * rate_per_mille overflows an unsigned 64-bit integer".to_string()
            })
    }

    fn process_binary(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        let event =
            nexmark::Event::decode(Encoding::Binary, record.value()).map_err(|e| e.to_string())?;
        if let nexmark::Event::Bid(mut bid) = event {
            bid.price = self.convert(bid.price)?;
            self.buffer.clear();
            nexmark::Event::Bid(bid).encode(Encoding::Binary, &mut self.buffer);
            out.emit_value(&self.buffer);
        }
        Ok(())
    }
}

export_transform!(CurrencyConvert);
