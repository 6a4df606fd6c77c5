//! Hostile test plugin: allocates without bound on records whose value
//! contains `alloc`; keeps 1 MiB for good on records whose value contains
//! `leak` (memory that only grows, as a guest runtime that never frees
//! does); forwards every other record, and the leaking ones.
//! The host must stop it and go on.

use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

struct Hostile {
    /// What `leak` records kept.
    leaked: Vec<Vec<u8>>,
}

impl Transform for Hostile {
    fn init(_config: &Config) -> Result<Self, String> {
        Ok(Hostile { leaked: Vec::new() })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        let value = record.value();
        if value.windows(5).any(|w| w == b"alloc") {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        if value.windows(4).any(|w| w == b"leak") {
            self.leaked.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&self.leaked);
        }
        out.forward();
        Ok(())
    }
}

export_transform!(Hostile);
