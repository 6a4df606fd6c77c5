//! Hostile test plugin: spins forever on records whose value contains `loop`;
//! forwards every other record. The host must stop it and go on. With
//! `init_spin_millions = N` in its config, `init` first spins N million
//! times (for tests of the instantiation budget); with
//! `record_spin_thousands = N`, it spins N thousand times on every record
//! it forwards (a slow operator, for backpressure tests).

use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

struct Hostile {
    record_spins: u64,
}

impl Transform for Hostile {
    fn init(config: &Config) -> Result<Self, String> {
        if let Some(millions) = config.get("init_spin_millions") {
            let millions: u64 = millions
                .parse()
                .map_err(|_| format!("init_spin_millions: not a number: {millions}"))?;
            spin(millions.saturating_mul(1_000_000));
        }
        let record_spins = match config.get("record_spin_thousands") {
            Some(thousands) => thousands
                .parse::<u64>()
                .map_err(|_| format!("record_spin_thousands: not a number: {thousands}"))?
                .saturating_mul(1_000),
            None => 0,
        };
        Ok(Hostile { record_spins })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        if record.value().windows(4).any(|w| w == b"loop") {
            let mut spins: u64 = 0;
            loop {
                spins = std::hint::black_box(spins.wrapping_add(1));
            }
        }
        spin(self.record_spins);
        out.forward();
        Ok(())
    }
}

/// Spins `times` times.
fn spin(times: u64) {
    let mut spins: u64 = 0;
    for _ in 0..times {
        spins = std::hint::black_box(spins.wrapping_add(1));
    }
}

export_transform!(Hostile);
