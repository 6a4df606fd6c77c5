//! Plumbing between the generated component exports and a [`Transform`].
//! Used by [`crate::export_transform!`]; not part of the public API.

use crate::bindings::sluice::plugin::types as wit;
use crate::emit::{Emitter, Target};
use crate::{Config, Record, Transform};
use sluice_wire::{InputRecord, OutputItem};
use std::any::Any;
use std::cell::RefCell;

thread_local! {
    /// The plugin instance's transform (a component instance is single-threaded).
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Builds the transform from `config` and keeps it for later calls.
pub fn init<T: Transform>(config: Vec<(String, String)>) -> Result<(), String> {
    let transform = T::init(&Config::from_pairs(config))?;
    INSTANCE.with(|slot| *slot.borrow_mut() = Some(Box::new(transform)));
    Ok(())
}

fn with_instance<T: Transform, R>(f: impl FnOnce(&mut T) -> R) -> R {
    INSTANCE.with(|slot| {
        let mut slot = slot.borrow_mut();
        match slot.as_mut().and_then(|b| b.downcast_mut::<T>()) {
            Some(transform) => f(transform),
            // The host always calls `init` first; reaching this is a host bug.
            None => panic!("sluice-sdk: process called before init"),
        }
    })
}

/// Handles a packed batch (see `sluice-wire`).
pub fn process_packed<T: Transform>(batch: &[u8]) -> Vec<u8> {
    let mut output = Vec::with_capacity(batch.len() + batch.len() / 4);
    with_instance::<T, _>(|transform| {
        for (index, decoded) in sluice_wire::decode_all::<InputRecord<'_>>(batch).enumerate() {
            let index = index as u32;
            let record = match decoded {
                Ok(inner) => Record { inner },
                Err(error) => {
                    // The host encodes batches itself; this only guards
                    // against a version mismatch slipping through.
                    let reason = format!("plugin cannot decode packed batch: {error}");
                    let _ = sluice_wire::append(
                        &mut output,
                        &OutputItem::Failed {
                            input: index,
                            reason: &reason,
                        },
                    );
                    break;
                }
            };
            let mark = output.len();
            let result = {
                let mut emitter = Emitter {
                    input_index: index,
                    input: &record,
                    target: Target::Packed(&mut output),
                };
                transform.process(&record, &mut emitter)
            };
            if let Err(reason) = result {
                output.truncate(mark);
                let _ = sluice_wire::append(
                    &mut output,
                    &OutputItem::Failed {
                        input: index,
                        reason: &reason,
                    },
                );
            }
        }
    });
    output
}

/// Handles a typed batch.
pub fn process_typed<T: Transform>(batch: Vec<wit::InputRecord>) -> Vec<wit::RecordOutcome> {
    with_instance::<T, _>(|transform| {
        batch
            .iter()
            .enumerate()
            .map(|(index, typed)| {
                let record = Record::from_typed(typed);
                let mut emits = Vec::new();
                let mut emitter = Emitter {
                    input_index: index as u32,
                    input: &record,
                    target: Target::Typed(&mut emits),
                };
                transform.process(&record, &mut emitter).map(|()| emits)
            })
            .collect()
    })
}
