//! Forwards every record unchanged. Used by benchmarks (the cost of the
//! plugin boundary itself) and round-trip tests.

use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

/// The identity transform.
struct Identity;

impl Transform for Identity {
    fn init(_config: &Config) -> Result<Self, String> {
        Ok(Identity)
    }

    fn process(&mut self, _record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        out.forward();
        Ok(())
    }
}

export_transform!(Identity);
