//! A plugin's packed output, as the host decodes it: any bytes decode to
//! items or stop with an error, never a panic or an unbounded allocation;
//! what decodes encodes again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::OutputItem;

fuzz_target!(|data: &[u8]| {
    let mut again = Vec::new();
    for item in sluice_wire::decode_all::<OutputItem<'_>>(data) {
        let Ok(item) = item else { break };
        if sluice_wire::append(&mut again, &item).is_err() {
            panic!("a decoded item does not encode again: {item:?}");
        }
    }
});
