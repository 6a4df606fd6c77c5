//! What a plugin's batch call returned, checked against the contract of the
//! packed output format (items name inputs in range and in order; each
//! input has emits or one failure, never both) and turned into records
//! that share the output buffer. A broken contract is the plugin's fault
//! (`BadOutput`), never the record's.

use super::instance::{BatchResult, EmitRoute, PluginFault};
use crate::metrics::FaultKind;
use crate::record::{Header, Record};
use bytes::Bytes;
use sluice_wire::projected::same_name;
use sluice_wire::{OutputItem, Route};

/// The bytes an ISO-8859-1 string stands for (one byte per character
/// U+0000-U+00FF), as `text-packed-transformer` returns them; pure ASCII,
/// the common case, is taken as it is.
pub(crate) fn latin1_bytes(text: String) -> Result<Vec<u8>, String> {
    if text.is_ascii() {
        return Ok(text.into_bytes());
    }
    text.chars()
        .map(|c| {
            u8::try_from(u32::from(c)).map_err(|_| {
                format!(
                    "packed text output holds U+{:04X}, beyond U+00FF (one byte per character)",
                    u32::from(c)
                )
            })
        })
        .collect()
}

/// Turns a packed output buffer into emitted records that share the buffer,
/// enforcing the contract of the packed format: items name inputs in
/// range and in input order, and each input has either emits or one
/// failure, never both and never two failures.
pub(super) fn decode_packed_output(
    output: Bytes,
    inputs: &[Record],
) -> Result<BatchResult, PluginFault> {
    decode_output(output, inputs, None)
}

/// The fields a projected batch carried and where they were found in each
/// input (record after record, `fields.len()` slots each).
pub(super) struct Projection<'p> {
    pub(super) fields: &'p [String],
    pub(super) slots: &'p [sluice_wire::projected::FieldSlot],
}

impl Projection<'_> {
    /// Where the projection found `field` in input `input`, if it was
    /// projected.
    fn slot(&self, input: usize, field: &str) -> Option<sluice_wire::projected::FieldSlot> {
        let index = self.fields.iter().position(|name| same_name(name, field))?;
        self.slots.get(input * self.fields.len() + index).copied()
    }
}

/// [`decode_packed_output`] for the output of a projected batch, whose
/// replacing emits splice where the projection found the field.
pub(super) fn decode_output(
    output: Bytes,
    inputs: &[Record],
    projection: Option<Projection<'_>>,
) -> Result<BatchResult, PluginFault> {
    let mut result = BatchResult::default();
    // Most plugins emit about one record per input: sized once rather than
    // grown by doubling (each step copying every emit so far).
    result.records.reserve(inputs.len());
    result.emits.reserve(inputs.len());
    let mut contract = OutputContract::default();
    // The values of replacing emits, one after another in one buffer per
    // batch; each record's value is set to its slice once all are written.
    let mut spliced = Vec::new();
    let mut spliced_ranges: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
    for item in sluice_wire::decode_output_items(&output) {
        let item = item.map_err(|e| bad_output(format!("malformed packed output: {e}")))?;
        let input_of = |index: u32| {
            inputs.get(index as usize).ok_or_else(|| {
                bad_output(format!(
                    "output names input record {index} of a batch of {}",
                    inputs.len()
                ))
            })
        };
        match item {
            OutputItem::EmitReplacing { input, field, json } => {
                let source = input_of(input)?;
                contract.emitted(input)?;
                let known = projection
                    .as_ref()
                    .and_then(|projection| projection.slot(input as usize, field));
                if spliced.is_empty() {
                    // About one value per input, each about as long.
                    let input_bytes: usize = inputs.iter().map(|input| input.value.len()).sum();
                    spliced.reserve(input_bytes + input_bytes / 8);
                }
                let start = spliced.len();
                sluice_json::projection::replace_field_into(
                    &source.value,
                    field,
                    json,
                    known,
                    &mut spliced,
                )
                .map_err(|reason| bad_output(format!("input record {input}: {reason}")))?;
                spliced_ranges.push((result.records.len(), start..spliced.len()));
                result.push(
                    input as usize,
                    EmitRoute::Main,
                    Record {
                        read_fields: None,
                        key: source.key.clone(),
                        value: Bytes::new(),
                        headers: source.headers.clone(),
                        event_time: source.event_time,
                        source: source.source.clone(),
                    },
                );
            }
            OutputItem::NoEmits { input } => {
                input_of(input)?;
                contract.no_emits(input)?;
            }
            OutputItem::Failed { input, reason } => {
                input_of(input)?;
                contract.failed(input)?;
                result.failed.push((input as usize, reason.to_string()));
            }
            OutputItem::Emit {
                input,
                route,
                record,
            } => {
                let source = input_of(input)?;
                contract.emitted(input)?;
                let route = match route {
                    Route::Main => EmitRoute::Main,
                    Route::Side(name) => EmitRoute::Side(name.to_string()),
                    Route::DeadLetter(reason) => EmitRoute::DeadLetter(reason.to_string()),
                };
                result.push(
                    input as usize,
                    route,
                    Record {
                        read_fields: None,
                        key: record.key.map(|k| output.slice_ref(k)),
                        value: output.slice_ref(record.value),
                        headers: record
                            .headers
                            .iter()
                            .map(|h| Header::new(h.key, output.slice_ref(h.value)))
                            .collect(),
                        event_time: record.event_time.or(source.event_time),
                        source: source.source.clone(),
                    },
                );
            }
        }
    }
    let spliced = Bytes::from(spliced);
    for (emitted, range) in spliced_ranges {
        result.records[emitted].value = spliced.slice(range);
    }
    Ok(result)
}

/// What the packed output said so far about the input it is at.
#[derive(Debug, Default)]
struct OutputContract {
    /// The input the last item named, if any.
    current: Option<u32>,
    /// Whether that input has emits.
    emitted: bool,
    /// Whether that input failed.
    failed: bool,
}

impl OutputContract {
    /// Moves to `input`, refusing to go back.
    fn at(&mut self, input: u32) -> Result<(), PluginFault> {
        match self.current {
            Some(current) if input < current => Err(bad_output(format!(
                "output items out of order: input record {input} after input record {current}"
            ))),
            Some(current) if input == current => Ok(()),
            _ => {
                *self = OutputContract {
                    current: Some(input),
                    emitted: false,
                    failed: false,
                };
                Ok(())
            }
        }
    }

    fn failed(&mut self, input: u32) -> Result<(), PluginFault> {
        self.at(input)?;
        if self.failed {
            return Err(bad_output(format!("two failures for input record {input}")));
        }
        if self.emitted {
            return Err(bad_output(format!(
                "input record {input} both emitted records and failed"
            )));
        }
        self.failed = true;
        Ok(())
    }

    /// `input` said it emitted nothing: it must not have emitted or
    /// failed already.
    fn no_emits(&mut self, input: u32) -> Result<(), PluginFault> {
        self.at(input)?;
        if self.failed || self.emitted {
            return Err(bad_output(format!(
                "input record {input} said it emitted nothing after emitting or failing"
            )));
        }
        Ok(())
    }

    fn emitted(&mut self, input: u32) -> Result<(), PluginFault> {
        self.at(input)?;
        if self.failed {
            return Err(bad_output(format!(
                "input record {input} both failed and emitted records"
            )));
        }
        self.emitted = true;
        Ok(())
    }
}

pub(super) fn bad_output(message: String) -> PluginFault {
    PluginFault {
        kind: FaultKind::BadOutput,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SourcePosition;
    use proptest::prelude::*;
    use sluice_wire::OutputRecord;

    #[test]
    fn latin1_text_stands_for_bytes() {
        assert_eq!(latin1_bytes("ab".into()).unwrap(), b"ab");
        let every_byte: String = (0u8..=255).map(char::from).collect();
        assert_eq!(
            latin1_bytes(every_byte).unwrap(),
            (0u8..=255).collect::<Vec<u8>>()
        );
        assert!(latin1_bytes("€".into()).unwrap_err().contains("U+20AC"));
    }

    fn inputs(count: usize) -> Vec<Record> {
        (0..count)
            .map(|i| {
                Record::from_value(
                    format!("{i}").into_bytes(),
                    SourcePosition {
                        topic: "t".into(),
                        partition: 0,
                        offset: i as i64,
                    },
                )
            })
            .collect()
    }

    fn emit(input: u32) -> OutputItem<'static> {
        OutputItem::Emit {
            input,
            route: Route::Main,
            record: OutputRecord {
                key: None,
                value: sluice_wire::Bytes::new(b"x"),
                headers: Vec::new(),
                event_time: None,
            },
        }
    }

    fn failed(input: u32) -> OutputItem<'static> {
        OutputItem::Failed {
            input,
            reason: "no",
        }
    }

    fn decode(items: &[OutputItem<'_>], batch: usize) -> Result<BatchResult, PluginFault> {
        let mut buffer = Vec::new();
        for item in items {
            sluice_wire::append(&mut buffer, item).expect("encode");
        }
        decode_packed_output(Bytes::from(buffer), &inputs(batch))
    }

    #[test]
    fn packed_output_that_keeps_the_contract_is_accepted() {
        let result = decode(&[emit(0), emit(0), failed(1), emit(3)], 4).expect("valid");
        assert_eq!(result.emitted().count(), 3);
        assert_eq!(result.failed, vec![(1, "no".to_string())]);
        // Saying an input emitted nothing changes nothing.
        let no_emits = |input| OutputItem::NoEmits { input };
        let result = decode(&[no_emits(0), emit(1), no_emits(3)], 4).expect("valid");
        assert_eq!(result.emitted().count(), 1);
        assert!(result.failed.is_empty());
    }

    #[test]
    fn each_contract_violation_is_a_bad_output_fault() {
        for (items, says) in [
            (
                vec![failed(0), failed(0)],
                "two failures for input record 0",
            ),
            (vec![emit(1), failed(1)], "both emitted records and failed"),
            (vec![failed(1), emit(1)], "both failed and emitted records"),
            (vec![emit(2), emit(1)], "out of order"),
            (vec![emit(5)], "input record 5 of a batch of 3"),
            (
                vec![emit(1), OutputItem::NoEmits { input: 1 }],
                "said it emitted nothing after emitting",
            ),
            (
                vec![failed(0), OutputItem::NoEmits { input: 0 }],
                "said it emitted nothing after emitting or failing",
            ),
            (vec![OutputItem::NoEmits { input: 3 }], "input record 3"),
        ] {
            let fault = decode(&items, 3).expect_err(says);
            assert_eq!(fault.kind, FaultKind::BadOutput);
            assert!(fault.message.contains(says), "{}", fault.message);
        }
    }

    proptest! {
        /// Whatever bytes a plugin returns, decoding them either fails with
        /// a bad-output fault or yields a result within the contract; it
        /// never panics.
        #[test]
        fn arbitrary_packed_output_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512), batch in 0usize..8) {
            match decode_packed_output(Bytes::from(bytes), &inputs(batch)) {
                Ok(result) => {
                    let mut failed = std::collections::BTreeSet::new();
                    for (index, _) in &result.failed {
                        prop_assert!(*index < batch);
                        prop_assert!(failed.insert(*index), "two failures");
                    }
                    for emitted in result.emitted() {
                        prop_assert!(emitted.input < batch);
                        prop_assert!(!failed.contains(&emitted.input));
                    }
                }
                Err(fault) => prop_assert_eq!(fault.kind, FaultKind::BadOutput),
            }
        }
    }
}
