//! Nexmark events: persons, auctions and bids in the benchmark's 1 : 3 : 46
//! proportions, as flat JSON objects with an `event_type` field.
//!
//! Field names follow the Nexmark schema used by Flink's implementation
//! (`auction`, `bidder`, `price`, `channel`, `url`, `date_time`, `extra`, ...);
//! prices are in cents.

use bytes::Bytes;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

const PROPORTION_DENOMINATOR: u64 = 50;
const PERSON_PROPORTION: u64 = 1;
const AUCTION_PROPORTION: u64 = 3;
const FIRST_ID: u64 = 1000;
const HOT_AUCTIONS: u64 = 100;
const NAMES: [&str; 6] = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky"];
const CITIES: [&str; 5] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
];
const STATES: [&str; 4] = ["AZ", "CA", "ID", "OR"];
const CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];

/// A person registering.
#[derive(Serialize)]
struct Person<'a> {
    event_type: &'a str,
    id: u64,
    name: String,
    email_address: String,
    credit_card: String,
    city: &'a str,
    state: &'a str,
    date_time: i64,
    extra: &'a str,
}

/// An auction opening.
#[derive(Serialize)]
struct Auction<'a> {
    event_type: &'a str,
    id: u64,
    item_name: String,
    description: &'a str,
    initial_bid: u64,
    reserve: u64,
    date_time: i64,
    expires: i64,
    seller: u64,
    category: u64,
    extra: &'a str,
}

/// A bid on an auction.
#[derive(Serialize)]
struct Bid<'a> {
    event_type: &'a str,
    auction: u64,
    bidder: u64,
    price: u64,
    channel: &'a str,
    url: String,
    date_time: i64,
    extra: &'a str,
}

/// Generates event `index` as JSON.
pub(super) fn generate(rng: &mut ChaCha8Rng, index: u64, event_time: i64) -> Bytes {
    let epoch = index / PROPORTION_DENOMINATOR;
    let offset = index % PROPORTION_DENOMINATOR;
    let persons_so_far = epoch + 1;
    let auctions_so_far = epoch * AUCTION_PROPORTION
        + offset
            .saturating_sub(PERSON_PROPORTION)
            .min(AUCTION_PROPORTION);
    let json = if offset < PERSON_PROPORTION {
        let name = format!(
            "{} {}",
            NAMES[rng.random_range(0..NAMES.len())],
            NAMES[rng.random_range(0..NAMES.len())]
        );
        serde_json::to_vec(&Person {
            event_type: "person",
            id: FIRST_ID + epoch,
            email_address: format!("{}@example.com", name.replace(' ', ".").to_lowercase()),
            name,
            credit_card: format!(
                "{:04} {:04} {:04} {:04}",
                rng.random_range(0..10000),
                rng.random_range(0..10000),
                rng.random_range(0..10000),
                rng.random_range(0..10000)
            ),
            city: CITIES[rng.random_range(0..CITIES.len())],
            state: STATES[rng.random_range(0..STATES.len())],
            date_time: event_time,
            extra: "",
        })
    } else if offset < PERSON_PROPORTION + AUCTION_PROPORTION {
        let initial_bid = rng.random_range(100..10_000);
        serde_json::to_vec(&Auction {
            event_type: "auction",
            id: FIRST_ID + auctions_so_far,
            item_name: format!("item-{}", rng.random_range(0..10_000)),
            description: "",
            initial_bid,
            reserve: initial_bid + rng.random_range(0..10_000),
            date_time: event_time,
            expires: event_time + rng.random_range(1_000..20_000),
            seller: FIRST_ID + rng.random_range(0..persons_so_far),
            category: 10 + rng.random_range(0..5),
            extra: "",
        })
    } else {
        // Most bids go to recent ("hot") auctions.
        let auction = if rng.random_bool(0.9) {
            let hot = HOT_AUCTIONS.min(auctions_so_far.max(1));
            FIRST_ID + auctions_so_far.max(1) - 1 - rng.random_range(0..hot)
        } else {
            FIRST_ID + rng.random_range(0..auctions_so_far.max(1))
        };
        serde_json::to_vec(&Bid {
            event_type: "bid",
            auction,
            bidder: FIRST_ID + rng.random_range(0..persons_so_far),
            price: rng.random_range(100..10_000_000),
            channel: CHANNELS[rng.random_range(0..CHANNELS.len())],
            url: format!(
                "https://www.nexmark.com/{}/item.htm?query=1",
                rng.random_range(0..1000)
            ),
            date_time: event_time,
            extra: "",
        })
    };
    // Serializing these structs into a Vec cannot fail.
    Bytes::from(json.unwrap_or_default())
}
