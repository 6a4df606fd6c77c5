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
                Ok(inner) => Record::new(inner, None),
                Err(error) => {
                    // The host encodes batches itself; this only guards
                    // against a version mismatch slipping through.
                    let reason = format!("plugin cannot decode packed batch: {error}");
                    append_failed(&mut output, index, &reason);
                    break;
                }
            };
            process_one(transform, index, &record, &mut output);
        }
    });
    output
}

thread_local! {
    /// The fields the host was told the plugin reads (asked once per
    /// instance): names the projected slots of every batch.
    static PROJECTED_FIELDS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// The top-level JSON fields the transform reads
/// ([`Transform::json_fields`]), kept to read projected batches.
pub fn projected_fields<T: Transform>() -> Vec<String> {
    let fields = with_instance::<T, _>(|transform| transform.json_fields());
    PROJECTED_FIELDS.with(|known| known.borrow_mut().clone_from(&fields));
    fields
}

/// Handles a projected batch (see `sluice_wire::projected`). An empty
/// output (a version this SDK does not read, or a batch whose fields are
/// not the ones named) makes the host send the batch packed instead.
pub fn process_projected_packed<T: Transform>(batch: &[u8]) -> Vec<u8> {
    let projected = match sluice_wire::projected::ProjectedBatch::parse(batch) {
        Ok(Some(projected)) if !projected.is_empty() => projected,
        _ => return Vec::new(),
    };
    PROJECTED_FIELDS.with(|names| {
        let names = names.borrow();
        if names.len() != projected.fields() {
            return Vec::new();
        }
        let mut output = Vec::with_capacity(batch.len() / 2);
        with_instance::<T, _>(|transform| {
            for index in 0..projected.len() {
                let record = match projected.record(index) {
                    Ok(read) => Record::new(read.record, Some((names.as_slice(), read.fields))),
                    Err(error) => {
                        let reason = format!("plugin cannot read projected batch: {error}");
                        append_failed(&mut output, index as u32, &reason);
                        continue;
                    }
                };
                process_one(transform, index as u32, &record, &mut output);
            }
        });
        say_processed(&mut output, projected.len());
        output
    })
}

/// Runs the transform on one record of a packed or projected batch,
/// appending its emits, or its failure alone, to `output`.
fn process_one<T: Transform>(
    transform: &mut T,
    index: u32,
    record: &Record<'_>,
    output: &mut Vec<u8>,
) {
    let mark = output.len();
    let result = {
        let mut emitter = Emitter {
            input_index: index,
            input: record,
            target: Target::Packed(output),
        };
        transform.process(record, &mut emitter)
    };
    if let Err(reason) = result {
        output.truncate(mark);
        append_failed(output, index, &reason);
    }
}

/// Makes the output of a processed projected batch of `records` records
/// non-empty: an empty one would mean "not read" to the host, which would
/// send the batch again ([`OutputItem::NoEmits`]).
fn say_processed(output: &mut Vec<u8>, records: usize) {
    if output.is_empty() && records > 0 {
        let input = (records - 1) as u32;
        // Encoding into a Vec cannot fail (no size limit, no I/O).
        let _ = sluice_wire::append(output, &OutputItem::NoEmits { input });
    }
}

fn append_failed(output: &mut Vec<u8>, input: u32, reason: &str) {
    // Encoding into a Vec cannot fail (no size limit, no I/O).
    let _ = sluice_wire::append(output, &OutputItem::Failed { input, reason });
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
