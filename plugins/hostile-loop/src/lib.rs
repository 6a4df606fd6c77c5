//! Hostile test plugin: spins forever on records whose value contains `loop`;
//! forwards every other record. The host must stop it and go on. With
//! `init_spin_millions = N` in its config, `init` first spins N million
//! times (for tests of the instantiation budget).

use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

struct Hostile;

impl Transform for Hostile {
    fn init(config: &Config) -> Result<Self, String> {
        if let Some(millions) = config.get("init_spin_millions") {
            let millions: u64 = millions
                .parse()
                .map_err(|_| format!("init_spin_millions: not a number: {millions}"))?;
            spin(millions.saturating_mul(1_000_000));
        }
        Ok(Hostile)
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        if record.value().windows(4).any(|w| w == b"loop") {
            let mut spins: u64 = 0;
            loop {
                spins = std::hint::black_box(spins.wrapping_add(1));
            }
        }
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
