//! Firing a window: its accumulator becomes its output records — a
//! [`WindowResult`], or what the operator's [`WindowOutput`] writes (a SQL
//! query's rows) — or, where that fails, a dead letter naming the window.

use super::{WindowOperator, WindowResult};
use crate::dataflow::{Collector, DataflowError};
use crate::metrics::DeadLetterClass;
use crate::record::{Headers, Record, SourcePosition};
use crate::state::key_group;
use crate::window::Window;
use crate::window::aggregate::{AggregateError, Aggregator};
use crate::window::output::WindowOutput;

/// A window's output values as it fires.
enum Rendered {
    /// The values to emit (none: SQL's `HAVING` dropped the window).
    Values(Vec<Vec<u8>>),
    /// They cannot be written: the reason.
    Failed(String),
}

/// The output value of `window` of the group `key_json` from its
/// `accumulator`: what `output` writes, or a [`WindowResult`].
fn render(
    aggregator: &mut dyn Aggregator,
    output: Option<&mut (dyn WindowOutput + 'static)>,
    key_json: &serde_json::Value,
    window: Window,
    seq: u64,
    accumulator: &[u8],
) -> Result<Rendered, AggregateError> {
    if let Some(output) = output {
        let mut values = Vec::new();
        let written = output.write(key_json, window, accumulator, &mut |value| {
            values.push(value.to_vec())
        });
        return Ok(match written {
            Ok(()) => Rendered::Values(values),
            Err(reason) => Rendered::Failed(reason),
        });
    }
    let result = WindowResult {
        key: key_json.clone(),
        window_start: window.start,
        window_end: window.end,
        result: aggregator.finish(accumulator)?,
        update: seq > 0,
        seq,
    };
    Ok(Rendered::Values(vec![
        serde_json::to_vec(&result).unwrap_or_default(),
    ]))
}

impl WindowOperator {
    /// Emits the current result of `key`'s `window`.
    pub(super) fn fire(
        &mut self,
        key: &[u8],
        window: Window,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        // A window in the store that is dropped at this watermark too
        // (no allowed lateness left) is read without going through memory.
        let stored = match self.cleanup_time(&window) <= self.watermark {
            true => self
                .states
                .read_stored(key, window)
                .map_err(|e| self.state_error(e))?,
            false => None,
        };
        let name = &self.options.name;
        let key_json = self.key.json(key);
        let (seq, rendered) = match stored {
            Some(state) => (
                state.emitted,
                render(
                    self.aggregator.as_mut(),
                    self.output.as_deref_mut(),
                    &key_json,
                    window,
                    state.emitted,
                    &state.accumulator,
                ),
            ),
            None => match self.states.get_mut(key, window) {
                Ok(Some(state)) => {
                    let seq = state.emitted;
                    state.emitted += 1;
                    (
                        seq,
                        render(
                            self.aggregator.as_mut(),
                            self.output.as_deref_mut(),
                            &key_json,
                            window,
                            seq,
                            &state.accumulator,
                        ),
                    )
                }
                Ok(None) => return Ok(()),
                Err(error) => return Err(DataflowError::operator(name, error)),
            },
        };
        if seq > 0 {
            self.metrics.add_plugin_counter("updates", 1);
        }
        let key_bytes = key;
        let record_key = self.key.record_key(key);
        let values = match rendered.map_err(|e| self.aggregate_error(e))? {
            Rendered::Values(values) => values,
            Rendered::Failed(reason) => {
                let about = serde_json::json!({
                    "key": key_json,
                    "window_start": window.start,
                    "window_end": window.end,
                });
                let record = Record {
                    read_fields: None,
                    key: (!record_key.is_empty())
                        .then(|| bytes::Bytes::copy_from_slice(record_key)),
                    value: serde_json::to_vec(&about).unwrap_or_default().into(),
                    headers: Headers::new(),
                    event_time: Some(window.max_timestamp()),
                    source: SourcePosition {
                        topic: self.topic,
                        partition: i32::from(key_group::key_group(
                            key,
                            self.options.max_parallelism,
                        )),
                        offset: seq as i64,
                    },
                };
                self.dead_letter(record, DeadLetterClass::Invalid, &reason, out);
                return Ok(());
            }
        };
        let key = (!record_key.is_empty()).then(|| bytes::Bytes::copy_from_slice(record_key));
        let partition = i32::from(key_group::key_group(
            key_bytes,
            self.options.max_parallelism,
        ));
        for value in values {
            let record = Record {
                read_fields: None,
                key: key.clone(),
                value: value.into(),
                headers: Headers::new(),
                event_time: Some(window.max_timestamp()),
                source: SourcePosition {
                    topic: self.topic,
                    partition,
                    offset: seq as i64,
                },
            };
            self.metrics.count_out(&record);
            out.main.push(record);
        }
        Ok(())
    }
}
