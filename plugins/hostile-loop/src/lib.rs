//! Hostile test plugin: spins forever on records whose value contains `loop`;
//! forwards every other record. The host must stop it and go on.

use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

struct Hostile;

impl Transform for Hostile {
    fn init(_config: &Config) -> Result<Self, String> {
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

export_transform!(Hostile);
