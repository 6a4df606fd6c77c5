//! A packed input batch, as a plugin's SDK decodes it: any bytes decode to
//! records or stop with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::InputRecord;

fuzz_target!(|data: &[u8]| {
    for record in sluice_wire::decode_all::<InputRecord<'_>>(data) {
        let Ok(record) = record else { break };
        let mut again = Vec::new();
        if sluice_wire::append(&mut again, &record).is_err() {
            panic!("a decoded record does not encode again: {record:?}");
        }
    }
});
