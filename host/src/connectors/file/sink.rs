//! Writes records as JSON lines.

use crate::dataflow::{DataflowError, Sink};
use crate::record::Record;
use base64::Engine as _;
use serde_json::{Map, Value, json};
use std::io::Write;
use std::path::Path;

/// What each line holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// Only the value: embedded as-is when it is JSON, else as a JSON string
    /// (UTF-8) or `{"base64": ...}`.
    #[default]
    Value,
    /// The whole record: key, value, headers, event time and source
    /// position (what a dead-letter file needs).
    Record,
}

/// A sink writing one JSON document per line to any writer.
pub struct JsonLinesSink {
    name: String,
    writer: std::io::BufWriter<Box<dyn Write + Send>>,
    format: OutputFormat,
    line: Vec<u8>,
}

impl JsonLinesSink {
    /// Writes to `writer`.
    pub fn new(
        name: impl Into<String>,
        writer: Box<dyn Write + Send>,
        format: OutputFormat,
    ) -> Self {
        JsonLinesSink {
            name: name.into(),
            writer: std::io::BufWriter::with_capacity(1 << 16, writer),
            format,
            line: Vec::new(),
        }
    }

    /// Creates (or truncates) the file at `path`, creating parent directories.
    pub fn create(
        name: impl Into<String>,
        path: &Path,
        format: OutputFormat,
    ) -> std::io::Result<Self> {
        Self::open(name, path, format, false)
    }

    /// Opens the file at `path` for appending (created if missing): a
    /// restored at-least-once pipeline continues its output.
    pub fn append(
        name: impl Into<String>,
        path: &Path,
        format: OutputFormat,
    ) -> std::io::Result<Self> {
        Self::open(name, path, format, true)
    }

    fn open(
        name: impl Into<String>,
        path: &Path,
        format: OutputFormat,
        append: bool,
    ) -> std::io::Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)?;
        Ok(Self::new(name, Box::new(file), format))
    }

    fn error(&self, error: impl std::fmt::Display) -> DataflowError {
        DataflowError::Sink {
            name: self.name.clone(),
            message: error.to_string(),
        }
    }
}

impl Sink for JsonLinesSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        for record in records {
            self.line.clear();
            format_line(&mut self.line, record, self.format);
            self.writer
                .write_all(&self.line)
                .map_err(|e| self.error(e))?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DataflowError> {
        self.writer.flush().map_err(|e| self.error(e))
    }
}

/// Appends `record` as one JSON line (with its newline) in `format`.
pub(crate) fn format_line(line: &mut Vec<u8>, record: &Record, format: OutputFormat) {
    match format {
        OutputFormat::Value => write_value(line, &record.value),
        OutputFormat::Record => {
            // Serializing a Value into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *line, &record_to_json(record));
        }
    }
    line.push(b'\n');
}

/// Appends `value` as one line's JSON: raw if it is single-line JSON.
fn write_value(line: &mut Vec<u8>, value: &[u8]) {
    if !value.contains(&b'\n') && serde_json::from_slice::<serde::de::IgnoredAny>(value).is_ok() {
        line.extend_from_slice(value);
    } else {
        // Serializing a Value into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *line, &bytes_to_json(value));
    }
}

/// Bytes as JSON: parsed if JSON, a string if UTF-8, else base64.
pub fn bytes_to_json(bytes: &[u8]) -> Value {
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        return value;
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => Value::String(text.to_string()),
        Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(bytes) }),
    }
}

/// The whole record as a JSON object.
pub fn record_to_json(record: &Record) -> Value {
    let headers: Map<String, Value> = record
        .headers
        .iter()
        .map(|h| {
            let value = match std::str::from_utf8(&h.value) {
                Ok(text) => Value::String(text.to_string()),
                Err(_) => {
                    json!({ "base64": base64::engine::general_purpose::STANDARD.encode(&h.value) })
                }
            };
            (h.key.clone(), value)
        })
        .collect();
    json!({
        "key": record.key.as_deref().map(bytes_to_json),
        "value": bytes_to_json(&record.value),
        "headers": headers,
        "event_time": record.event_time,
        "source": {
            "topic": &*record.source.topic,
            "partition": record.source.partition,
            "offset": record.source.offset,
        },
    })
}
