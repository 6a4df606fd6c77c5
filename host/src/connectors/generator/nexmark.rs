//! Nexmark events: persons, auctions and bids in the benchmark's 1 : 3 : 46
//! proportions, encoded as JSON or binary ([`sluice_nexmark`]).

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use sluice_nexmark::{Auction, Bid, Encoding, Event, Person};

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
const URLS: usize = 1000;

/// Strings computed once, so that generating a bid allocates nothing but
/// its encoded bytes.
pub(super) struct NexmarkTables {
    encoding: Encoding,
    urls: Vec<String>,
    /// (name, e-mail) for every pair of first names.
    people: Vec<(String, String)>,
}

impl NexmarkTables {
    pub(super) fn new(encoding: Encoding) -> Self {
        let people = NAMES
            .iter()
            .flat_map(|first| NAMES.iter().map(move |last| format!("{first} {last}")))
            .map(|name| {
                let email = format!("{}@example.com", name.replace(' ', ".").to_lowercase());
                (name, email)
            })
            .collect();
        NexmarkTables {
            encoding,
            urls: (0..URLS)
                .map(|n| format!("https://www.nexmark.com/{n}/item.htm?query=1"))
                .collect(),
            people,
        }
    }
}

/// Generates event `index` and appends its encoding to `out`.
pub(super) fn generate(
    tables: &mut NexmarkTables,
    rng: &mut ChaCha8Rng,
    index: u64,
    event_time: i64,
    out: &mut Vec<u8>,
) {
    let epoch = index / PROPORTION_DENOMINATOR;
    let offset = index % PROPORTION_DENOMINATOR;
    let persons_so_far = epoch + 1;
    let auctions_so_far = epoch * AUCTION_PROPORTION
        + offset
            .saturating_sub(PERSON_PROPORTION)
            .min(AUCTION_PROPORTION);
    let card;
    let item_name;
    let event = if offset < PERSON_PROPORTION {
        let (name, email) = &tables.people[rng.random_range(0..tables.people.len())];
        card = format!(
            "{:04} {:04} {:04} {:04}",
            rng.random_range(0..10000),
            rng.random_range(0..10000),
            rng.random_range(0..10000),
            rng.random_range(0..10000)
        );
        Event::Person(Person {
            id: FIRST_ID + epoch,
            name,
            email_address: email,
            credit_card: &card,
            city: CITIES[rng.random_range(0..CITIES.len())],
            state: STATES[rng.random_range(0..STATES.len())],
            date_time: event_time,
            extra: "",
        })
    } else if offset < PERSON_PROPORTION + AUCTION_PROPORTION {
        let initial_bid = rng.random_range(100..10_000);
        item_name = format!("item-{}", rng.random_range(0..10_000));
        Event::Auction(Auction {
            id: FIRST_ID + auctions_so_far,
            item_name: &item_name,
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
        Event::Bid(Bid {
            auction,
            bidder: FIRST_ID + rng.random_range(0..persons_so_far),
            price: rng.random_range(100..10_000_000),
            channel: CHANNELS[rng.random_range(0..CHANNELS.len())],
            url: &tables.urls[rng.random_range(0..URLS)],
            date_time: event_time,
            extra: "",
        })
    };
    event.encode(tables.encoding, out);
}
