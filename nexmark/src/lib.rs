//! Nexmark benchmark events, shared by Sluice's generator and by plugins.
//!
//! Field names follow the Nexmark schema used by Flink's implementation;
//! prices are in cents. Two encodings of the same [`Event`]:
//!
//! * [`Encoding::Json`]: a flat JSON object with an `event_type` field
//!   (`"person"`, `"auction"`, `"bid"`): readable, and what most examples use.
//! * [`Encoding::Binary`]: postcard, with strings borrowed on decode: what a
//!   throughput benchmark wants (Flink's Nexmark, likewise, moves binary
//!   objects rather than text).

use serde::{Deserialize, Serialize};

/// A person registering.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person<'a> {
    /// Person id.
    pub id: u64,
    /// Name.
    pub name: &'a str,
    /// E-mail address.
    pub email_address: &'a str,
    /// Card number.
    pub credit_card: &'a str,
    /// City.
    pub city: &'a str,
    /// State.
    pub state: &'a str,
    /// Event time, ms since the Unix epoch.
    pub date_time: i64,
    /// Padding.
    pub extra: &'a str,
}

/// An auction opening.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Auction<'a> {
    /// Auction id.
    pub id: u64,
    /// Item name.
    pub item_name: &'a str,
    /// Description.
    pub description: &'a str,
    /// Starting price, cents.
    pub initial_bid: u64,
    /// Reserve price, cents.
    pub reserve: u64,
    /// Event time, ms since the Unix epoch.
    pub date_time: i64,
    /// Closing time, ms since the Unix epoch.
    pub expires: i64,
    /// Seller (person id).
    pub seller: u64,
    /// Category.
    pub category: u64,
    /// Padding.
    pub extra: &'a str,
}

/// A bid on an auction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bid<'a> {
    /// Auction id.
    pub auction: u64,
    /// Bidder (person id).
    pub bidder: u64,
    /// Price, cents.
    pub price: u64,
    /// Channel.
    pub channel: &'a str,
    /// URL.
    pub url: &'a str,
    /// Event time, ms since the Unix epoch.
    pub date_time: i64,
    /// Padding.
    pub extra: &'a str,
}

/// One Nexmark event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event_type", rename_all = "lowercase")]
pub enum Event<'a> {
    /// A person.
    #[serde(borrow)]
    Person(Person<'a>),
    /// An auction.
    #[serde(borrow)]
    Auction(Auction<'a>),
    /// A bid.
    #[serde(borrow)]
    Bid(Bid<'a>),
}

/// [`Event`] as postcard encodes it: externally tagged (the variant index
/// first), because postcard cannot decode internally tagged enums.
#[derive(Serialize)]
enum BinaryRef<'r, 'a> {
    Person(&'r Person<'a>),
    Auction(&'r Auction<'a>),
    Bid(&'r Bid<'a>),
}

/// The decoding side of [`BinaryRef`].
#[derive(Deserialize)]
enum Binary<'a> {
    #[serde(borrow)]
    Person(Person<'a>),
    #[serde(borrow)]
    Auction(Auction<'a>),
    #[serde(borrow)]
    Bid(Bid<'a>),
}

/// How events are encoded in record values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Flat JSON objects with `event_type`.
    #[default]
    Json,
    /// postcard.
    Binary,
}

impl std::str::FromStr for Encoding {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "json" => Ok(Encoding::Json),
            "binary" => Ok(Encoding::Binary),
            other => Err(format!(
                "unknown Nexmark encoding `{other}` (json or binary)"
            )),
        }
    }
}

/// Why bytes are not an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'a> Event<'a> {
    /// Appends the encoding of this event to `out`.
    pub fn encode(&self, encoding: Encoding, out: &mut Vec<u8>) {
        // Encoding into a Vec cannot fail: no size limit, no I/O, and every
        // field serializes.
        let _ = match encoding {
            Encoding::Json => serde_json::to_writer(&mut *out, self).map_err(|e| e.to_string()),
            Encoding::Binary => postcard::to_extend(&self.as_binary(), std::mem::take(out))
                .map(|filled| *out = filled)
                .map_err(|e| e.to_string()),
        };
    }

    /// Decodes an event, borrowing strings from `bytes` where the encoding
    /// allows (JSON strings with escapes are rejected: generated events have
    /// none).
    pub fn decode(encoding: Encoding, bytes: &'a [u8]) -> Result<Self, DecodeError> {
        match encoding {
            Encoding::Json => serde_json::from_slice(bytes)
                .map_err(|e| DecodeError(format!("invalid Nexmark JSON: {e}"))),
            Encoding::Binary => postcard::from_bytes(bytes)
                .map(|binary| match binary {
                    Binary::Person(p) => Event::Person(p),
                    Binary::Auction(a) => Event::Auction(a),
                    Binary::Bid(b) => Event::Bid(b),
                })
                .map_err(|e| DecodeError(format!("invalid Nexmark binary event: {e}"))),
        }
    }

    fn as_binary(&self) -> BinaryRef<'_, 'a> {
        match self {
            Event::Person(p) => BinaryRef::Person(p),
            Event::Auction(a) => BinaryRef::Auction(a),
            Event::Bid(b) => BinaryRef::Bid(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_encodings_round_trip() {
        let events = [
            Event::Bid(Bid {
                auction: 1000,
                bidder: 1001,
                price: 12345,
                channel: "Google",
                url: "https://www.nexmark.com/1/item.htm?query=1",
                date_time: 1_700_000_000_000,
                extra: "",
            }),
            Event::Person(Person {
                id: 7,
                name: "Peter Paul",
                email_address: "peter.paul@example.com",
                credit_card: "1234 5678 9012 3456",
                city: "Boise",
                state: "ID",
                date_time: 1,
                extra: "",
            }),
        ];
        for encoding in [Encoding::Json, Encoding::Binary] {
            for event in &events {
                let mut bytes = Vec::new();
                event.encode(encoding, &mut bytes);
                assert_eq!(&Event::decode(encoding, &bytes).unwrap(), event);
            }
        }
        let mut json = Vec::new();
        events[0].encode(Encoding::Json, &mut json);
        assert!(
            json.starts_with(br#"{"event_type":"bid","auction":1000"#),
            "{}",
            String::from_utf8_lossy(&json)
        );
    }
}
