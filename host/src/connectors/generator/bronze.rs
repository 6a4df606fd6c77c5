//! Raw "bronze" order events: valid ones, invalid ones and duplicates.

use super::GeneratorOptions;
use bytes::Bytes;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use std::collections::VecDeque;

const FIRST_NAMES: [&str; 8] = [
    "ada", "alan", "grace", "edsger", "barbara", "ken", "margaret", "dennis",
];
const CURRENCIES: [&str; 3] = ["USD", "EUR", "GBP"];
/// How far back a duplicate may reach.
const RECENT: usize = 32;

/// Recently generated valid events, for duplicates.
#[derive(Debug, Default)]
pub(super) struct BronzeState {
    recent: VecDeque<(Bytes, Bytes)>,
}

/// Generates event `index`: a duplicate of a recent event, an invalid event,
/// or a fresh valid one. Returns (key, value).
pub(super) fn generate(
    state: &mut BronzeState,
    rng: &mut ChaCha8Rng,
    options: &GeneratorOptions,
    index: u64,
    event_time: i64,
) -> (Option<Bytes>, Bytes) {
    let roll: f64 = rng.random();
    if roll < options.duplicate_ratio && !state.recent.is_empty() {
        let pick = rng.random_range(0..state.recent.len());
        let (key, value) = state.recent[pick].clone();
        return (Some(key), value);
    }
    let user_id: u32 = rng.random_range(1..500);
    let name = FIRST_NAMES[rng.random_range(0..FIRST_NAMES.len())];
    let email = format!("{name}.{user_id}@example.com");
    let card = format!(
        "4{:03} {:04} {:04} {:04}",
        rng.random_range(0..1000),
        rng.random_range(0..10000),
        rng.random_range(0..10000),
        rng.random_range(0..10000)
    );
    let cents: u32 = rng.random_range(100..100_000);
    let amount = f64::from(cents) / 100.0;
    let currency = CURRENCIES[rng.random_range(0..CURRENCIES.len())];
    let note = if rng.random_bool(0.3) {
        format!("please send the receipt to {name}@mail.example.org")
    } else {
        "no note".to_string()
    };
    let mut event = json!({
        "event_id": format!("evt-{index:08}"),
        "user_id": user_id,
        "email": email,
        "card_number": card,
        "amount": amount,
        "currency": currency,
        "note": note,
        "ts": event_time,
    });
    let key = Bytes::from(user_id.to_string());

    let invalid = roll < options.duplicate_ratio + options.invalid_ratio;
    let value = if invalid {
        match rng.random_range(0..4) {
            0 => {
                event.as_object_mut().map(|o| o.remove("amount"));
                Bytes::from(event.to_string())
            }
            1 => {
                event["amount"] = json!(format!("{amount}"));
                Bytes::from(event.to_string())
            }
            2 => {
                event["event_id"] = json!("");
                Bytes::from(event.to_string())
            }
            _ => {
                let text = event.to_string();
                Bytes::from(text[..text.len() / 2].to_string())
            }
        }
    } else {
        let value = Bytes::from(event.to_string());
        if state.recent.len() == RECENT {
            state.recent.pop_front();
        }
        state.recent.push_back((key.clone(), value.clone()));
        value
    };
    (Some(key), value)
}
