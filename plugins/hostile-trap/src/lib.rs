//! Hostile test plugin: traps (panics) on records whose value contains `trap`;
//! forwards every other record. The host must stop it and go on.
//!
//! It also counts in host state how often it has seen each value (before it
//! decides to trap), and a record `count:<value>` emits that count: a fault
//! must leave no state behind, so a retried record is counted once.

use sluice_sdk::{Config, Emitter, Record, Transform, export_transform, state};

struct Hostile;

impl Transform for Hostile {
    fn init(_config: &Config) -> Result<Self, String> {
        Ok(Hostile)
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        let value = record.value();
        if let Some(counted) = value.strip_prefix(b"count:") {
            let count = state::get(&[b"seen:", counted].concat()).unwrap_or_default();
            out.emit_value(if count.is_empty() { b"0" } else { &count });
            return Ok(());
        }
        let key = [b"seen:", value].concat();
        let seen: u64 = state::get(&key)
            .and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok())
            .unwrap_or(0);
        state::put(&key, (seen + 1).to_string().as_bytes());
        if value.windows(4).any(|w| w == b"trap") {
            panic!("hostile-trap: refusing this record");
        }
        out.forward();
        Ok(())
    }
}

export_transform!(Hostile);
