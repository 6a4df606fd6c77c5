//! Hostile test plugin: allocates without bound on records whose value contains `alloc`;
//! forwards every other record. The host must stop it and go on.

use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

struct Hostile;

impl Transform for Hostile {
    fn init(_config: &Config) -> Result<Self, String> {
        Ok(Hostile)
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        if record.value().windows(5).any(|w| w == b"alloc") {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        out.forward();
        Ok(())
    }
}

export_transform!(Hostile);
