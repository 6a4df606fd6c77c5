//! Hostile test plugin: writes its packed output by hand and breaks the
//! packed format's contract on chosen records. The host must treat the
//! broken output as a plugin fault and retry record by record.
//!
//! * `fail-twice`: two failures for the record.
//! * `emit-and-fail`: emits the record and also fails it.
//! * `backwards`: emits the record, then an item naming input 0 again.
//! * `time-max` / `time-min`: emits the record with event time `i64::MAX`
//!   / `i64::MIN` (outside the range the host accepts).
//! * anything else: forwarded.
//!
//! The typed export forwards every record (the typed outcome list cannot
//! say two things about one record).

use sluice_sdk::bindings::exports::sluice::plugin::{packed_transformer, transformer};
use sluice_sdk::bindings::sluice::plugin::types::{Emit, InputRecord, OutputRecord, Route};
use sluice_wire::{OutputItem, Route as PackedRoute};

struct Hostile;

impl transformer::Guest for Hostile {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn process_batch(batch: Vec<InputRecord>) -> Vec<Result<Vec<Emit>, String>> {
        batch
            .into_iter()
            .map(|record| {
                Ok(vec![Emit {
                    route: Route::Main,
                    record: OutputRecord {
                        key: record.key,
                        value: record.value,
                        headers: record.headers,
                        event_time: None,
                    },
                }])
            })
            .collect()
    }
}

impl packed_transformer::Guest for Hostile {
    fn process_packed(batch: Vec<u8>) -> Vec<u8> {
        let mut output = Vec::new();
        for (index, decoded) in
            sluice_wire::decode_all::<sluice_wire::InputRecord<'_>>(&batch).enumerate()
        {
            let Ok(record) = decoded else { break };
            let input = index as u32;
            let event_time = match &record.value[..] {
                b"time-max" => Some(i64::MAX),
                b"time-min" => Some(i64::MIN),
                _ => None,
            };
            let emit = OutputItem::Emit {
                input,
                route: PackedRoute::Main,
                record: sluice_wire::OutputRecord {
                    key: record.key,
                    value: record.value,
                    headers: record.headers.clone(),
                    event_time,
                },
            };
            let fail = OutputItem::Failed {
                input,
                reason: "refused",
            };
            let items = match &record.value[..] {
                b"fail-twice" => vec![fail.clone(), fail],
                b"emit-and-fail" => vec![emit, fail],
                b"backwards" => vec![
                    emit,
                    OutputItem::Failed {
                        input: 0,
                        reason: "again",
                    },
                ],
                _ => vec![emit],
            };
            for item in &items {
                let _ = sluice_wire::append(&mut output, item);
            }
        }
        output
    }
}

/// Names no fields: the host calls `process-packed` above.
impl sluice_sdk::bindings::exports::sluice::plugin::projected_packed_transformer::Guest
    for Hostile
{
    fn projected_fields() -> Vec<String> {
        Vec::new()
    }

    fn process_projected_packed(_batch: Vec<u8>) -> Vec<u8> {
        Vec::new()
    }
}

sluice_sdk::bindings::export_world!(Hostile with_types_in sluice_sdk::bindings);
