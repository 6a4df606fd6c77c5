//! The record-path benchmark's transform: filter on one field, rewrite
//! another. A record whose integer field `filter_field` (default `key`) is a
//! multiple of `modulus` (default 10) is dropped; the others are emitted
//! with the string field `rewrite_field` (default `text`) upper-cased
//! (ASCII), every other byte as it came.
//!
//! `mode = "fields"` (default) names the two fields in
//! [`Transform::json_fields`], so the host finds them (the projected
//! path), reads them with [`Record::field`] and emits the record with one
//! field replaced ([`Emitter::emit_replacing_with`], spliced by the host);
//! `mode = "document"` parses the whole record into a `serde_json::Value`
//! and serialises it again, the way most JSON code does, to measure what
//! the first way saves. `mode = "serde"` is the plugin the README teaches:
//! [`Record::value_json`] into a struct of the benchmark's record shape
//! (`id`, `key`, `text`, `ts`, `user`), `to_uppercase`, [`Emitter::emit_json`]
//! (issue 42 measures it; the filter and rewrite fields are fixed there).

use sluice_sdk::json;
use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};
use std::borrow::Cow;

/// How a record is read and written back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Two fields read from their source text; one replaced on output.
    Fields,
    /// The whole record as a `serde_json::Value`, serialised again.
    Document,
    /// The record deserialised into [`Event`] and serialised again.
    Serde,
}

/// The benchmark's record, as a plugin author following the README would
/// declare it.
#[derive(serde::Deserialize, serde::Serialize)]
struct Event {
    id: i64,
    key: i64,
    text: String,
    ts: i64,
    user: String,
}

struct FilterRewrite {
    filter_field: String,
    modulus: i64,
    rewrite_field: String,
    mode: Mode,
    buffer: Vec<u8>,
}

impl FilterRewrite {
    fn keep(&self, value: Option<i64>) -> Result<bool, String> {
        let value =
            value.ok_or_else(|| format!("field `{}` is not an integer", self.filter_field))?;
        Ok(value % self.modulus != 0)
    }

    fn process_fields(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        if !self.keep(record.field(&self.filter_field)?.and_then(|v| v.as_i64()))? {
            return Ok(());
        }
        let not_a_string = || format!("field `{}` is not a string", self.rewrite_field);
        let field = record
            .field(&self.rewrite_field)?
            .ok_or_else(not_a_string)?;
        let text = field.as_str().ok_or_else(not_a_string)?;
        // The new value is written straight into the SDK's reused buffer;
        // on the projected path the host splices it into the record.
        match text {
            // No escapes: the string's JSON text upper-cased is the
            // upper-cased string's JSON text (ASCII letters only change).
            Cow::Borrowed(_) => out.emit_replacing_with(&self.rewrite_field, |out| {
                let start = out.len();
                out.extend_from_slice(field.raw().as_bytes());
                out[start..].make_ascii_uppercase();
            }),
            Cow::Owned(mut text) => {
                text.make_ascii_uppercase();
                out.emit_replacing_with(&self.rewrite_field, |out| json::quote_into(out, &text))
            }
        }
    }

    fn process_document(
        &mut self,
        record: &Record<'_>,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let mut value = record.value_json_value()?;
        if !self.keep(value.get(&self.filter_field).and_then(|v| v.as_i64()))? {
            return Ok(());
        }
        let text = value
            .get_mut(&self.rewrite_field)
            .filter(|v| v.is_string())
            .ok_or_else(|| format!("field `{}` is not a string", self.rewrite_field))?;
        if let serde_json::Value::String(text) = text {
            text.make_ascii_uppercase();
        }
        self.buffer.clear();
        serde_json::to_writer(&mut self.buffer, &value)
            .map_err(|e| format!("cannot encode JSON: {e}"))?;
        out.emit_value(&self.buffer);
        Ok(())
    }

    fn process_serde(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        let mut event: Event = record.value_json()?;
        if !self.keep(Some(event.key))? {
            return Ok(());
        }
        event.text = event.text.to_uppercase();
        out.emit_json(&event)
    }
}

impl Transform for FilterRewrite {
    fn init(config: &Config) -> Result<Self, String> {
        let modulus: i64 = config.parse_or("modulus", 10)?;
        if modulus <= 0 {
            return Err("config key `modulus`: must be a positive integer".to_string());
        }
        let mode = match config.get("mode").unwrap_or("fields") {
            "fields" => Mode::Fields,
            "document" => Mode::Document,
            "serde" => Mode::Serde,
            other => {
                return Err(format!(
                    "config key `mode`: `{other}` is not `fields`, `document` or `serde`"
                ));
            }
        };
        Ok(FilterRewrite {
            filter_field: config.get("filter_field").unwrap_or("key").to_string(),
            modulus,
            rewrite_field: config.get("rewrite_field").unwrap_or("text").to_string(),
            mode,
            buffer: Vec::with_capacity(256),
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        match self.mode {
            Mode::Fields => self.process_fields(record, out),
            Mode::Document => self.process_document(record, out),
            Mode::Serde => self.process_serde(record, out),
        }
    }

    fn json_fields(&self) -> Vec<String> {
        match self.mode {
            Mode::Fields => vec![self.filter_field.clone(), self.rewrite_field.clone()],
            Mode::Document | Mode::Serde => Vec::new(),
        }
    }
}

export_transform!(FilterRewrite);
