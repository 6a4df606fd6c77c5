//! The fields a plugin reads through the projected batch format
//! ([`sluice_wire::projected`]) for one record: the spans its source found
//! in its own pass ([`crate::record::ReadFields`]) when it found them, else
//! found here by [`sluice_json::projection`].

use sluice_json::projection::{project, slot_of};
use sluice_wire::projected::FieldSlot;

/// The projected slots of `record`'s fields `names`, written to `slots`
/// (cleared first): the spans its source found in its own pass
/// ([`crate::record::FieldSpans`]) if it found these (`true`), else found
/// here ([`sluice_json::projection::project`]; `false`). No names: no slots, and the value is not
/// scanned (a batch sent projected with no fields).
pub(crate) fn record_slots(
    record: &crate::record::Record,
    names: &[String],
    slots: &mut Vec<FieldSlot>,
) -> bool {
    if names.is_empty() {
        slots.clear();
        return false;
    }
    let spans = record
        .read_fields
        .as_deref()
        .and_then(|read| read.spans.as_ref()?.of(names));
    match spans {
        Some(spans) => {
            slots.clear();
            slots.extend(spans.iter().map(|span| slot_of(*span)));
            true
        }
        None => {
            project(&record.value, names, slots);
            false
        }
    }
}
