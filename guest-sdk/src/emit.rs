//! Emitting records to the main output, side outputs and the dead-letter
//! output.

use crate::bindings::sluice::plugin::types as wit;
use crate::record::Record;
use sluice_wire::{Bytes, Header, OutputItem, OutputRecord, Route};

/// A record to emit, borrowing its parts. Build it with [`Output::value`] and
/// the builder methods.
#[derive(Debug, Clone, Default)]
pub struct Output<'b> {
    key: Option<&'b [u8]>,
    value: &'b [u8],
    headers: Vec<(&'b str, &'b [u8])>,
    event_time: Option<i64>,
}

impl<'b> Output<'b> {
    /// A record with this value, no key and no headers.
    pub fn value(value: &'b [u8]) -> Self {
        Output {
            value,
            ..Output::default()
        }
    }

    /// Sets the key.
    pub fn key(mut self, key: &'b [u8]) -> Self {
        self.key = Some(key);
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: &'b str, value: &'b [u8]) -> Self {
        self.headers.push((name, value));
        self
    }

    /// Sets the event time (milliseconds since the Unix epoch).
    pub fn event_time(mut self, millis: i64) -> Self {
        self.event_time = Some(millis);
        self
    }
}

thread_local! {
    /// The new value of a replacing emit, the whole new value off the
    /// projected path, or an emitted value's JSON text (reused: a
    /// component instance is single-threaded).
    static REPLACING: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where emitted records are collected: the packed buffer or the typed list.
pub(crate) enum Target<'o> {
    Packed(&'o mut Vec<u8>),
    Typed(&'o mut Vec<wit::Emit>),
}

/// Collects what [`crate::Transform::process`] emits for one input record.
pub struct Emitter<'o> {
    pub(crate) input_index: u32,
    pub(crate) input: &'o Record<'o>,
    pub(crate) target: Target<'o>,
}

impl<'o> Emitter<'o> {
    /// Emits the input record unchanged to the main output.
    pub fn forward(&mut self) {
        let record = self.input.clone();
        self.push(
            Route::Main,
            record.key(),
            record.value(),
            &mut record.headers(),
            None,
        );
    }

    /// Emits `value` to the main output, keeping the input record's key,
    /// headers and event time.
    pub fn emit_value(&mut self, value: &[u8]) {
        let record = self.input.clone();
        self.push(
            Route::Main,
            record.key(),
            value,
            &mut record.headers(),
            None,
        );
    }

    /// Emits the input record with the value of its top-level JSON field
    /// `field` replaced by the JSON text `json` (the field added at the
    /// end if the object has none), keeping its key, headers and event
    /// time; every other byte of the value as it came. `json` must be one
    /// JSON value (e.g. from [`crate::json::quote`]; on the projected path
    /// the host refuses anything else as broken output). On the projected
    /// path ([`crate::Transform::json_fields`]) the host splices the value
    /// and the plugin copies nothing; otherwise the value is split here.
    /// An error (ready to be a dead-letter reason) if the value is not a
    /// JSON object.
    pub fn emit_replacing(&mut self, field: &str, json: &[u8]) -> Result<(), String> {
        self.emit_replacing_with(field, |out| out.extend_from_slice(json))
    }

    /// Like [`Emitter::emit_replacing`], with the new value's JSON text
    /// written by `write_value` into a buffer the SDK reuses.
    pub fn emit_replacing_with(
        &mut self,
        field: &str,
        write_value: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), String> {
        REPLACING.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.clear();
            if self.input.is_projected_object()
                && let Target::Packed(buffer) = &mut self.target
            {
                write_value(&mut scratch);
                sluice_wire::append_emit_replacing(buffer, self.input_index, field, &scratch);
                return Ok(());
            }
            let object = self.input.json_object()?;
            object.write_replacing_with(&mut scratch, field, write_value);
            self.emit_value(&scratch);
            Ok(())
        })
    }

    /// Serializes `value` as JSON and emits it like [`Emitter::emit_value`].
    /// The text is serde_json's, byte for byte (written by
    /// [`crate::json`]'s serializer, which copies strings in one piece).
    pub fn emit_json<T: serde::Serialize>(&mut self, value: &T) -> Result<(), String> {
        REPLACING.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.clear();
            crate::json::to_writer(&mut scratch, value)
                .map_err(|e| format!("cannot encode JSON: {e}"))?;
            self.emit_value(&scratch);
            Ok(())
        })
    }

    /// Emits a record built with [`Output`] to the main output.
    pub fn emit(&mut self, output: Output<'_>) {
        self.push_output(Route::Main, output);
    }

    /// Emits a record to the side output `name` (bound to a sink in the
    /// pipeline file).
    pub fn side(&mut self, name: &str, output: Output<'_>) {
        self.push_output(Route::Side(name), output);
    }

    /// Sends the input record, unchanged, to the dead-letter output with
    /// `reason`.
    pub fn dead_letter(&mut self, reason: &str) {
        let record = self.input.clone();
        self.push(
            Route::DeadLetter(reason),
            record.key(),
            record.value(),
            &mut record.headers(),
            None,
        );
    }

    fn push_output(&mut self, route: Route<'_>, output: Output<'_>) {
        let mut headers = output.headers.iter().copied();
        self.push(
            route,
            output.key,
            output.value,
            &mut headers,
            output.event_time,
        );
    }

    fn push<'h>(
        &mut self,
        route: Route<'_>,
        key: Option<&[u8]>,
        value: &[u8],
        headers: &mut dyn Iterator<Item = (&'h str, &'h [u8])>,
        event_time: Option<i64>,
    ) {
        match &mut self.target {
            Target::Packed(buffer) => {
                let item = OutputItem::Emit {
                    input: self.input_index,
                    route,
                    record: OutputRecord {
                        key: key.map(Bytes::new),
                        value: Bytes::new(value),
                        headers: headers
                            .map(|(key, value)| Header {
                                key,
                                value: Bytes::new(value),
                            })
                            .collect(),
                        event_time,
                    },
                };
                // Encoding into a Vec cannot fail (no size limit, no I/O).
                let _ = sluice_wire::append(buffer, &item);
            }
            Target::Typed(emits) => emits.push(wit::Emit {
                route: match route {
                    Route::Main => wit::Route::Main,
                    Route::Side(name) => wit::Route::Side(name.to_string()),
                    Route::DeadLetter(reason) => wit::Route::DeadLetter(reason.to_string()),
                },
                record: wit::OutputRecord {
                    key: key.map(<[u8]>::to_vec),
                    value: value.to_vec(),
                    headers: headers
                        .map(|(key, value)| wit::Header {
                            key: key.to_string(),
                            value: value.to_vec(),
                        })
                        .collect(),
                    event_time,
                },
            }),
        }
    }
}
