//! Reads JSON-lines or Avro object container files.

use crate::dataflow::{DataflowError, Source, SourceBatch};
use crate::record::{Record, SourcePosition, into_dead_letter};
use crate::time::timestamps::{event_time_from, json_pointer};
use bytes::Bytes;
use serde_json::Value;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    /// One JSON document per line; each line's bytes become the value.
    #[default]
    Jsonl,
    /// One record per line, its bytes taken as they are: nothing is
    /// checked, so a plugin sees malformed input itself (unless a key or
    /// timestamp field is set, which needs the line parsed as JSON).
    Lines,
    /// An Avro object container file; each datum becomes a JSON value.
    Avro,
}

/// How records are made from the file's contents.
#[derive(Debug, Clone, Default)]
pub struct FileSourceOptions {
    /// Format of the file.
    pub format: FileFormat,
    /// Field whose value becomes the record key (`user_id`, `a.b` or a JSON
    /// pointer such as `/a/b`).
    pub key_field: Option<String>,
    /// Field holding the event time in milliseconds since the Unix epoch.
    pub timestamp_field: Option<String>,
}

/// A bounded source over one file. Malformed lines (invalid JSON, missing or
/// non-numeric timestamp) go to the dead-letter output with the reason; the
/// rest of the file is read on.
pub struct FileSource {
    name: String,
    topic: Arc<str>,
    options: FileSourceOptions,
    key_pointer: Option<String>,
    timestamp_pointer: Option<String>,
    input: Input,
    offset: i64,
}

enum Input {
    Lines(Box<dyn BufRead + Send>),
    Avro(Box<apache_avro::Reader<'static, std::io::BufReader<std::fs::File>>>),
    Done,
}

impl FileSource {
    /// Opens `path`.
    pub fn open(
        name: impl Into<String>,
        path: &Path,
        options: FileSourceOptions,
    ) -> Result<Self, DataflowError> {
        let name = name.into();
        let open_error = |message: String| DataflowError::Source {
            name: name.clone(),
            message: format!("cannot read {}: {message}", path.display()),
        };
        let file = std::fs::File::open(path).map_err(|e| open_error(e.to_string()))?;
        let input = match options.format {
            FileFormat::Jsonl | FileFormat::Lines => {
                Input::Lines(Box::new(std::io::BufReader::new(file)))
            }
            FileFormat::Avro => {
                let reader = apache_avro::Reader::new(std::io::BufReader::new(file))
                    .map_err(|e| open_error(format!("not an Avro object container file: {e}")))?;
                Input::Avro(Box::new(reader))
            }
        };
        Ok(FileSource {
            topic: Arc::from(path_name(path).as_str()),
            name,
            key_pointer: options.key_field.as_deref().map(json_pointer),
            timestamp_pointer: options.timestamp_field.as_deref().map(json_pointer),
            options,
            input,
            offset: 0,
        })
    }

    /// Turns one JSON document into a record, or says why it cannot be one.
    fn to_record(
        &self,
        raw: Bytes,
        parsed: Result<Value, String>,
        position: SourcePosition,
    ) -> Result<Record, String> {
        let document = parsed?;
        let mut record = Record::from_value(raw, position);
        if let Some(pointer) = &self.key_pointer {
            record.key = match document.pointer(pointer) {
                None | Some(Value::Null) => None,
                Some(Value::String(text)) => Some(Bytes::from(text.clone())),
                Some(other) => Some(Bytes::from(other.to_string())),
            };
        }
        if let Some(pointer) = &self.timestamp_pointer {
            let field = self.options.timestamp_field.as_deref().unwrap_or_default();
            record.event_time = Some(event_time_from(&document, pointer, field)?);
        }
        Ok(record)
    }
}

impl Source for FileSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn next_batch(&mut self, max_records: usize) -> Result<Option<SourceBatch>, DataflowError> {
        let mut batch = SourceBatch::default();
        let mut read = 0;
        while read < max_records {
            let (raw, parsed) = match &mut self.input {
                Input::Done => break,
                Input::Lines(lines) => {
                    let mut line = Vec::new();
                    let n =
                        lines
                            .read_until(b'\n', &mut line)
                            .map_err(|e| DataflowError::Source {
                                name: self.name.clone(),
                                message: format!("read error: {e}"),
                            })?;
                    if n == 0 {
                        self.input = Input::Done;
                        break;
                    }
                    while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                        line.pop();
                    }
                    if line.iter().all(u8::is_ascii_whitespace) {
                        self.offset += 1;
                        continue;
                    }
                    let unchecked = self.options.format == FileFormat::Lines
                        && self.key_pointer.is_none()
                        && self.timestamp_pointer.is_none();
                    let parsed = if unchecked {
                        Ok(Value::Null)
                    } else {
                        serde_json::from_slice::<Value>(&line)
                            .map_err(|e| format!("invalid JSON: {e}"))
                    };
                    (Bytes::from(line), parsed)
                }
                Input::Avro(reader) => match reader.next() {
                    None => {
                        self.input = Input::Done;
                        break;
                    }
                    Some(Ok(datum)) => match Value::try_from(datum) {
                        Ok(value) => (Bytes::from(value.to_string()), Ok(value)),
                        Err(e) => (
                            Bytes::new(),
                            Err(format!("Avro datum has no JSON form: {e}")),
                        ),
                    },
                    Some(Err(e)) => {
                        // A corrupt block cannot be skipped reliably: report it
                        // and end the file here.
                        let reason = format!("cannot decode Avro datum: {e}");
                        self.input = Input::Done;
                        (Bytes::new(), Err(reason))
                    }
                },
            };
            let position = SourcePosition {
                topic: self.topic.clone(),
                partition: 0,
                offset: self.offset,
            };
            let line_number = self.offset + 1;
            self.offset += 1;
            read += 1;
            match self.to_record(raw.clone(), parsed, position.clone()) {
                Ok(record) => batch.records.push(record),
                Err(reason) => batch.dead_letters.push(into_dead_letter(
                    Record::from_value(raw, position),
                    &format!("record {line_number}: {reason}"),
                    &self.name,
                    None,
                )),
            }
        }
        if read == 0 && matches!(self.input, Input::Done) {
            return Ok(None);
        }
        Ok(Some(batch))
    }

    /// The number of lines (Avro: datums) consumed.
    fn snapshot_position(&mut self, _checkpoint_id: u64) -> Result<Value, DataflowError> {
        Ok(serde_json::json!({ "offset": self.offset }))
    }

    /// Reads (and drops) the records before the position.
    fn restore_position(&mut self, position: &Value) -> Result<(), DataflowError> {
        let target = position
            .get("offset")
            .and_then(Value::as_i64)
            .ok_or_else(|| DataflowError::Source {
                name: self.name.clone(),
                message: format!("unreadable file position {position}"),
            })?;
        // One record at a time: a batch could read past blank lines and
        // overshoot the position.
        while self.offset < target {
            if self.next_batch(1)?.is_none() {
                return Err(DataflowError::Source {
                    name: self.name.clone(),
                    message: format!(
                        "the file has {} records, fewer than the checkpoint's position {target}: it changed since",
                        self.offset
                    ),
                });
            }
        }
        Ok(())
    }
}

fn path_name(path: &Path) -> String {
    PathBuf::from(path).display().to_string()
}
