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
    /// position (what a dead-letter file needs). Key and value are their
    /// exact bytes — a string when they are UTF-8, base64 otherwise, said
    /// by `key_encoding` / `value_encoding` — never re-serialised JSON, so
    /// that a dead letter is the record as it came in.
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
    /// restored at-least-once pipeline continues its output. A torn last
    /// line (the previous run died while writing it) is cut off first: its
    /// record was not part of a completed checkpoint and is written again.
    pub fn append(
        name: impl Into<String>,
        path: &Path,
        format: OutputFormat,
    ) -> std::io::Result<Self> {
        cut_torn_line(path)?;
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

/// Truncates the file at `path` after its last newline (nothing if it is
/// missing, empty or ends with a newline).
fn cut_torn_line(path: &Path) -> std::io::Result<()> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    let length = file.metadata()?.len();
    // Scan back in blocks for the last newline.
    let mut end = length;
    let mut block = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(block.len() as u64);
        let size = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block[..size])?;
        if let Some(position) = block[..size].iter().rposition(|b| *b == b'\n') {
            let keep = start + position as u64 + 1;
            if keep < length {
                file.set_len(keep)?;
            }
            return Ok(());
        }
        end = start;
    }
    // No newline at all: the whole file is one torn line.
    if length > 0 {
        file.set_len(0)?;
    }
    Ok(())
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
            let _ = serde_json::to_writer(&mut *line, &record_to_exact_json(record));
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

/// A header value: a string when UTF-8, else `{"base64": ...}`.
fn header_to_json(value: &[u8]) -> Value {
    match std::str::from_utf8(value) {
        Ok(text) => Value::String(text.to_string()),
        Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(value) }),
    }
}

fn headers_to_json(record: &Record) -> Map<String, Value> {
    record
        .headers
        .iter()
        .map(|h| (h.key.clone(), header_to_json(&h.value)))
        .collect()
}

fn source_to_json(record: &Record) -> Value {
    json!({
        "topic": &*record.source.topic,
        "partition": record.source.partition,
        "offset": record.source.offset,
    })
}

/// The whole record as a JSON object for people to read: key and value
/// parsed when they are JSON (numbers may lose digits; see
/// [`record_to_exact_json`] for what sinks write).
pub fn record_to_json(record: &Record) -> Value {
    json!({
        "key": record.key.as_deref().map(bytes_to_json),
        "value": bytes_to_json(&record.value),
        "headers": headers_to_json(record),
        "event_time": record.event_time,
        "source": source_to_json(record),
    })
}

/// Exact bytes as JSON: the text when UTF-8, else base64; and which.
fn exact_bytes(bytes: &[u8]) -> (Value, &'static str) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (Value::String(text.to_string()), "utf8"),
        Err(_) => (
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
            "base64",
        ),
    }
}

/// The whole record as a JSON object keeping its exact bytes (the
/// [`OutputFormat::Record`] lines).
pub fn record_to_exact_json(record: &Record) -> Value {
    let mut object = Map::new();
    match record.key.as_deref().map(exact_bytes) {
        Some((key, encoding)) => {
            object.insert("key".into(), key);
            object.insert("key_encoding".into(), encoding.into());
        }
        None => {
            object.insert("key".into(), Value::Null);
        }
    }
    let (value, encoding) = exact_bytes(&record.value);
    object.insert("value".into(), value);
    object.insert("value_encoding".into(), encoding.into());
    object.insert("headers".into(), Value::Object(headers_to_json(record)));
    object.insert("event_time".into(), record.event_time.into());
    object.insert("source".into(), source_to_json(record));
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_cut_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        for (before, after) in [
            ("{\"a\":1}\n{\"b\":2}\n", "{\"a\":1}\n{\"b\":2}\n"),
            ("{\"a\":1}\n{\"b\":", "{\"a\":1}\n"),
            ("{\"b\":", ""),
            ("", ""),
        ] {
            std::fs::write(&path, before).unwrap();
            cut_torn_line(&path).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), after, "{before:?}");
        }
        cut_torn_line(&dir.path().join("missing.jsonl")).unwrap();
    }
    use crate::record::SourcePosition;

    #[test]
    fn record_lines_keep_the_exact_bytes() {
        for (input, encoding) in [
            (&b"{\"n\":123456789012345678901234567890}"[..], "utf8"),
            (b"{\"price\":1.10}", "utf8"),
            (b"{\"b\":1,\"a\":2,\"b\":3}", "utf8"),
            (b"not json at all", "utf8"),
            (b"\xff\xfe\x00binary", "base64"),
        ] {
            let record = Record::from_value(
                input.to_vec(),
                SourcePosition {
                    topic: "t".into(),
                    partition: 0,
                    offset: 0,
                },
            );
            let mut line = Vec::new();
            format_line(&mut line, &record, OutputFormat::Record);
            let document: Value = serde_json::from_slice(&line).expect("one JSON line");
            assert_eq!(document["value_encoding"], encoding);
            let text = document["value"].as_str().expect("a string");
            let bytes = match encoding {
                "utf8" => text.as_bytes().to_vec(),
                _ => base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .expect("base64"),
            };
            assert_eq!(bytes, input, "the value's bytes, exactly");
        }
    }
}
