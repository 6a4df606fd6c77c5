//! Hostile test plugin: traps (panics) on records whose value contains `trap`;
//! forwards every other record. The host must stop it and go on.

use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

struct Hostile;

impl Transform for Hostile {
    fn init(_config: &Config) -> Result<Self, String> {
        Ok(Hostile)
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        if record.value().windows(4).any(|w| w == b"trap") {
            panic!("hostile-trap: refusing this record");
        }
        out.forward();
        Ok(())
    }
}

export_transform!(Hostile);
