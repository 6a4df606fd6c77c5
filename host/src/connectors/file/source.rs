//! Reads JSON-lines or Avro object container files.
//!
//! Lines come from a [`LineReader`]: each record's value is a slice of a
//! reused chunk buffer (nothing copied or allocated per line).

use super::line_reader::{CHUNK_BYTES, LineReader};
use crate::dataflow::{DataflowError, Source, SourceBatch};
use crate::record::{
    FieldSpans, ReadFields, Record, SourcePosition, SpanList, Topic, into_dead_letter,
};
use bytes::Bytes;
use serde_json::Value;
use sluice_json::event_time::{event_time_from, event_time_of, json_pointer};
use sluice_json::fields::{
    FieldPath, FieldValue, Spans, check_json, extract_into, extract_into_with_spans,
    extract_with_names, scan_names,
};
use sluice_json::scan::{FieldNames, JsonDocument};
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
    topic: Topic,
    options: FileSourceOptions,
    key_pointer: Option<String>,
    timestamp_pointer: Option<String>,
    /// The key and timestamp fields as read from a JSON line in one pass
    /// (no document built), in that order; empty without either.
    line_fields: Vec<FieldPath>,
    /// The fields the operator after this source reads
    /// ([`Source::read_ahead`]), then `line_fields`: all that one pass over
    /// a JSON line reads.
    fields_read: Vec<FieldPath>,
    /// The first part of `fields_read`, kept on each record
    /// ([`ReadFields`]); `None` when nothing is read ahead.
    read_ahead: Option<Arc<[FieldPath]>>,
    /// The values of `fields_read` for one line, reused from line to line
    /// when they are not read ahead.
    found: Vec<Option<FieldValue>>,
    /// The fields whose spans the plugin after this source reads
    /// ([`Source::project_ahead`]), found in the same pass and kept on
    /// each record ([`FieldSpans`]).
    project_ahead: Option<Arc<[String]>>,
    /// The names of `fields_read` and `project_ahead` laid out for the JSON
    /// scan once, not per line (`None` if a field is nested).
    scan_names: Option<FieldNames>,
    input: Input,
    offset: i64,
}

/// What is known of a line or datum read, before it becomes a record.
enum Parsed {
    /// A `lines` line taken as it is.
    Unchecked,
    /// A JSON line from [`LineReader`] (so followed in its chunk by
    /// [`sluice_json::scan::PADDING`] bytes), not parsed yet.
    JsonLine,
    /// A parsed document (an Avro datum), or why there is none.
    Document(Result<Value, String>),
}

enum Input {
    Lines(LineReader),
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
                Input::Lines(LineReader::new(Box::new(file), CHUNK_BYTES))
            }
            FileFormat::Avro => {
                let reader = apache_avro::Reader::new(std::io::BufReader::new(file))
                    .map_err(|e| open_error(format!("not an Avro object container file: {e}")))?;
                Input::Avro(Box::new(reader))
            }
        };
        let line_fields: Vec<FieldPath> = [&options.key_field, &options.timestamp_field]
            .into_iter()
            .flatten()
            .map(|field| FieldPath::parse(field))
            .collect();
        let names = scan_names(&line_fields, &[]);
        Ok(FileSource {
            topic: Topic::new(&path_name(path)),
            name,
            key_pointer: options.key_field.as_deref().map(json_pointer),
            timestamp_pointer: options.timestamp_field.as_deref().map(json_pointer),
            line_fields: line_fields.clone(),
            fields_read: line_fields,
            read_ahead: None,
            found: Vec::new(),
            project_ahead: None,
            scan_names: names,
            options,
            input,
            offset: 0,
        })
    }

    /// Reads a JSON line's key and timestamp into `record`, or says why it
    /// cannot be a record. The common case takes one pass over the line
    /// that checks its syntax and keeps only the key and timestamp fields;
    /// a line that pass refuses is parsed whole, for the reason.
    ///
    /// The fields read ahead for the next operator are read in the same
    /// pass and kept on the record.
    fn read_line_fields(&mut self, record: &mut Record) -> Result<(), String> {
        let document = if record.value.is_empty() {
            // Not a slice of a chunk (an empty `Bytes` owns nothing).
            JsonDocument::new(&record.value)
        } else {
            // SAFETY: only lines from `LineReader` are `Parsed::JsonLine`,
            // and each is followed by `PADDING` zeroed bytes of its chunk's
            // buffer, which the record's value keeps alive and which are
            // not written while any line of the chunk lives.
            unsafe { JsonDocument::padded(&record.value) }
        };
        if self.fields_read.is_empty() && self.project_ahead.is_none() {
            return check_json(document);
        }
        // The values go into the record when read ahead for the next
        // operator; otherwise one list serves every line.
        let mut found = match self.read_ahead {
            Some(_) => Vec::with_capacity(self.fields_read.len()),
            None => std::mem::take(&mut self.found),
        };
        found.clear();
        let mut spans = SpanList::new();
        let spans_asked = self.project_ahead.as_ref().map(|names| {
            spans.resize(names.len(), None);
            Spans {
                names,
                found: &mut spans[..],
            }
        });
        let scanned = match (&self.scan_names, spans_asked) {
            (Some(names), spans) => {
                extract_with_names(document, names, &self.fields_read, &mut found, spans)
                    .map(|_| ())
            }
            (None, Some(spans)) => {
                extract_into_with_spans(document, &self.fields_read, &mut found, spans).map(|_| ())
            }
            (None, None) => extract_into(document, &self.fields_read, &mut found),
        };
        if scanned.is_err() {
            let parsed = serde_json::from_slice::<Value>(&record.value)
                .map_err(|e| format!("invalid JSON: {e}"));
            return self.read_document_fields(record, parsed);
        };
        // `found` ends with the key's value, then the timestamp's (each if
        // set). They are read where they lie and then truncated away (a
        // `FieldValue` is 40 bytes: moving each out was a measurable part
        // of this loop).
        if self.timestamp_pointer.is_some() {
            let field = self.options.timestamp_field.as_deref().unwrap_or_default();
            record.event_time = Some(event_time_of(found.last().and_then(Option::as_ref), field)?);
            found.truncate(found.len().saturating_sub(1));
        }
        if self.key_pointer.is_some() {
            record.key = match found.last_mut() {
                None | Some(None | Some(FieldValue::Other(Value::Null))) => None,
                Some(Some(FieldValue::Str(text))) => Some(Bytes::from(std::mem::take(text))),
                Some(Some(other)) => Some(Bytes::from(other.key_bytes())),
            };
            found.truncate(found.len().saturating_sub(1));
        } else {
            record.key = None;
        }
        // What is left of `found` are the fields read ahead.
        let spans = self.project_ahead.as_ref().map(|names| FieldSpans {
            names: names.clone(),
            spans,
        });
        match (&self.read_ahead, spans) {
            (Some(paths), spans) => {
                record.read_fields = Some(Box::new(ReadFields {
                    paths: Some(paths.clone()),
                    values: found,
                    spans,
                }))
            }
            (None, spans) => {
                self.found = found;
                record.read_fields = spans.map(|spans| {
                    Box::new(ReadFields {
                        paths: None,
                        values: Vec::new(),
                        spans: Some(spans),
                    })
                });
            }
        }
        Ok(())
    }

    /// The names the JSON scan of a line looks for: `fields_read`, then
    /// `project_ahead`.
    fn names_to_scan(&self) -> Option<FieldNames> {
        let span_names = self.project_ahead.as_deref().unwrap_or_default();
        scan_names(&self.fields_read, span_names)
    }

    /// Reads a parsed document's key and timestamp into `record`, or says
    /// why it cannot be a record.
    fn read_document_fields(
        &self,
        record: &mut Record,
        parsed: Result<Value, String>,
    ) -> Result<(), String> {
        let document = parsed?;
        if let Some(pointer) = &self.timestamp_pointer {
            let field = self.options.timestamp_field.as_deref().unwrap_or_default();
            record.event_time = Some(event_time_from(&document, pointer, field)?);
        }
        if let Some(pointer) = &self.key_pointer {
            record.key = match document.pointer(pointer) {
                None | Some(Value::Null) => None,
                Some(Value::String(text)) => Some(Bytes::from(text.clone())),
                Some(other) => Some(Bytes::from(other.to_string())),
            };
        }
        Ok(())
    }
}

impl Source for FileSource {
    fn name(&self) -> &str {
        &self.name
    }

    /// JSON lines only: a `lines` file without key or timestamp field is
    /// not parsed, and Avro datums are parsed whole.
    fn read_ahead(&mut self, fields: Arc<[FieldPath]>) {
        if fields.is_empty() || !matches!(self.input, Input::Lines(_)) {
            return;
        }
        self.fields_read = fields.iter().chain(&self.line_fields).cloned().collect();
        self.read_ahead = Some(fields);
        self.scan_names = self.names_to_scan();
    }

    /// JSON lines only, whose key and timestamp fields (if any) are
    /// top-level: the spans come from the one pass over a top-level object.
    fn project_ahead(&mut self, names: Arc<[String]>) {
        let top_level = self
            .fields_read
            .iter()
            .all(|path| matches!(path, FieldPath::Top(_)));
        if names.is_empty() || !top_level || !matches!(self.input, Input::Lines(_)) {
            return;
        }
        self.project_ahead = Some(names);
        self.scan_names = self.names_to_scan();
    }

    fn next_batch(&mut self, max_records: usize) -> Result<Option<SourceBatch>, DataflowError> {
        let mut batch = SourceBatch::default();
        // Sized once rather than grown by doubling (bounded: a very large
        // batch size grows as it fills).
        batch.records.reserve(max_records.min(8192));
        let mut read = 0;
        while read < max_records {
            let (raw, parsed) = match &mut self.input {
                Input::Done => break,
                Input::Lines(lines) => {
                    let line = lines.next_line().map_err(|e| DataflowError::Source {
                        name: self.name.clone(),
                        message: format!("read error: {e}"),
                    })?;
                    let Some(mut line) = line else {
                        self.input = Input::Done;
                        break;
                    };
                    while line.last().is_some_and(|b| *b == b'\r') {
                        line.truncate(line.len() - 1);
                    }
                    if !line.iter().any(|b| !b.is_ascii_whitespace()) {
                        self.offset += 1;
                        continue;
                    }
                    let unchecked =
                        self.options.format == FileFormat::Lines && self.line_fields.is_empty();
                    let parsed = if unchecked {
                        Parsed::Unchecked
                    } else {
                        Parsed::JsonLine
                    };
                    (line, parsed)
                }
                Input::Avro(reader) => match reader.next() {
                    None => {
                        self.input = Input::Done;
                        break;
                    }
                    Some(Ok(datum)) => match Value::try_from(datum) {
                        Ok(value) => (Bytes::from(value.to_string()), Parsed::Document(Ok(value))),
                        Err(e) => (
                            Bytes::new(),
                            Parsed::Document(Err(format!("Avro datum has no JSON form: {e}"))),
                        ),
                    },
                    Some(Err(e)) => {
                        // A corrupt block cannot be skipped reliably: report it
                        // and end the file here.
                        let reason = format!("cannot decode Avro datum: {e}");
                        self.input = Input::Done;
                        (Bytes::new(), Parsed::Document(Err(reason)))
                    }
                },
            };
            let position = SourcePosition {
                topic: self.topic,
                partition: 0,
                offset: self.offset,
            };
            let line_number = self.offset + 1;
            self.offset += 1;
            read += 1;
            // The record owns the line from here on: nothing is cloned per
            // record, and a refused line becomes its dead letter as read.
            let mut record = Record::from_value(raw, position);
            let checked = match parsed {
                Parsed::Unchecked => Ok(()),
                Parsed::JsonLine => self.read_line_fields(&mut record),
                Parsed::Document(document) => self.read_document_fields(&mut record, document),
            };
            match checked {
                Ok(()) => batch.records.push(record),
                Err(reason) => {
                    record.key = None;
                    record.event_time = None;
                    batch.dead_letters.push(into_dead_letter(
                        record,
                        &format!("record {line_number}: {reason}"),
                        &self.name,
                        None,
                    ))
                }
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

    /// Steps over the lines (Avro: datums) before the position, without
    /// making records of them (a restore at line 1 M had spent 560 ms
    /// checking and dropping a million records).
    fn restore_position(&mut self, position: &Value) -> Result<(), DataflowError> {
        let target = position
            .get("offset")
            .and_then(Value::as_i64)
            .ok_or_else(|| DataflowError::Source {
                name: self.name.clone(),
                message: format!("unreadable file position {position}"),
            })?;
        while self.offset < target {
            if !self.skip_one()? {
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

impl FileSource {
    /// Moves past the next line or datum as reading it would (a blank line
    /// counts, as in [`Source::next_batch`]); `false` at the end.
    fn skip_one(&mut self) -> Result<bool, DataflowError> {
        let skipped = match &mut self.input {
            Input::Done => false,
            Input::Lines(lines) => lines
                .next_line()
                .map_err(|e| DataflowError::Source {
                    name: self.name.clone(),
                    message: format!("read error: {e}"),
                })?
                .is_some(),
            Input::Avro(reader) => match reader.next() {
                None => false,
                Some(Ok(_)) => true,
                // As when read: the corrupt block is one dead letter, and
                // the end of the file.
                Some(Err(_)) => {
                    self.input = Input::Done;
                    self.offset += 1;
                    return Ok(true);
                }
            },
        };
        match skipped {
            true => self.offset += 1,
            false => self.input = Input::Done,
        }
        Ok(skipped)
    }
}

fn path_name(path: &Path) -> String {
    PathBuf::from(path).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_checked_on_its_own_bytes_whatever_follows_it_in_its_chunk() {
        // Lines cut short that the bytes after them (the next line, or the
        // padding after the last) would complete, read whole and split
        // across chunks of every size.
        let lines = [
            r#"{"ts":1,"a":"x"}"#,
            r#"{"ts":2,"a":"x"#,
            r#""}"#,
            r#"{"ts":3"#,
            r#","a":1}"#,
            r#"{"ts":4,"a":[1,"é"]}"#,
            r#"{"ts":5,"a":tru"#,
        ];
        let text = lines.join("\n");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, &text).unwrap();
        for chunk_bytes in [1, 5, 16, 40, 1 << 20] {
            let options = FileSourceOptions {
                timestamp_field: Some("ts".to_string()),
                ..FileSourceOptions::default()
            };
            let mut source = FileSource::open("file", &path, options).unwrap();
            let file = std::io::Cursor::new(text.clone().into_bytes());
            source.input = Input::Lines(LineReader::new(Box::new(file), chunk_bytes));
            let (mut times, mut refused) = (Vec::new(), Vec::new());
            while let Some(batch) = source.next_batch(3).unwrap() {
                times.extend(batch.records.iter().map(|record| record.event_time));
                refused.extend(batch.dead_letters.iter().map(|dead| dead.value.to_vec()));
            }
            assert_eq!(times, [Some(1), Some(4)], "chunks of {chunk_bytes}");
            let expected: Vec<Vec<u8>> = [1, 2, 3, 4, 6]
                .map(|line| lines[line].as_bytes().to_vec())
                .to_vec();
            assert_eq!(refused, expected, "chunks of {chunk_bytes}");
        }
    }

    #[test]
    fn a_restore_at_every_position_reads_what_follows_it_in_a_full_read() {
        let text = "{\"ts\":1}\n\n{\"ts\":2}\nnot json\r\n  \n{\"ts\":3}\n{\"ts\":4}";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, text).unwrap();
        let options = || FileSourceOptions {
            timestamp_field: Some("ts".to_string()),
            ..FileSourceOptions::default()
        };
        // (offset, event time or dead letter) of everything read from `source`.
        let read_all = |source: &mut FileSource| {
            let mut read = Vec::new();
            while let Some(batch) = source.next_batch(2).unwrap() {
                read.extend(
                    batch
                        .records
                        .iter()
                        .map(|r| (r.source.offset, r.event_time)),
                );
                read.extend(batch.dead_letters.iter().map(|r| (r.source.offset, None)));
            }
            read.sort();
            read
        };
        let full = read_all(&mut FileSource::open("file", &path, options()).unwrap());
        assert_eq!(full.len(), 5, "{full:?}");
        let lines = text.lines().count() as i64;
        for position in 0..=lines {
            let mut source = FileSource::open("file", &path, options()).unwrap();
            source
                .restore_position(&serde_json::json!({ "offset": position }))
                .unwrap();
            let rest: Vec<_> = full
                .iter()
                .filter(|(at, _)| *at >= position)
                .cloned()
                .collect();
            assert_eq!(read_all(&mut source), rest, "restored at {position}");
        }
        let mut source = FileSource::open("file", &path, options()).unwrap();
        let error = source
            .restore_position(&serde_json::json!({ "offset": lines + 1 }))
            .unwrap_err();
        assert!(error.to_string().contains("fewer than"), "{error}");
    }

    /// Reads every batch of a JSON-lines file with `options`, the plugin
    /// after the source asking for `names`.
    fn read_projecting(
        text: &str,
        options: FileSourceOptions,
        names: &[&str],
    ) -> (Vec<Record>, Vec<Record>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, text).unwrap();
        let mut source = FileSource::open("file", &path, options).unwrap();
        source.project_ahead(names.iter().map(|n| n.to_string()).collect());
        let (mut records, mut dead) = (Vec::new(), Vec::new());
        while let Some(batch) = source.next_batch(100).unwrap() {
            records.extend(batch.records);
            dead.extend(batch.dead_letters);
        }
        (records, dead)
    }

    /// The spans of `record`, as the text they point at.
    fn span_texts(record: &Record) -> Option<Vec<Option<String>>> {
        let spans = record.read_fields.as_ref()?.spans.as_ref()?;
        Some(
            spans
                .spans
                .iter()
                .map(|span| {
                    span.map(|(start, end)| {
                        String::from_utf8(record.value[start..end].to_vec()).unwrap()
                    })
                })
                .collect(),
        )
    }

    #[test]
    fn the_fields_a_plugin_reads_are_found_in_the_pass_that_reads_the_timestamp() {
        let text = concat!(
            "{\"ts\":5,\"text\":\"a \\\"b\\\"\",\"n\":[1, 2],\"text\":\"last\"}\n",
            "{\"ts\":6}\n",
            "[1,2]\n",
            "{\"ts\":7,\"text\":\"\u{e9}\"}\n",
        );
        let options = FileSourceOptions {
            timestamp_field: Some("ts".into()),
            ..FileSourceOptions::default()
        };
        let (records, dead) = read_projecting(text, options, &["n", "text", "ts"]);
        assert_eq!(records.len(), 3, "{dead:?}");
        assert_eq!(records[0].event_time, Some(5));
        // Of a repeated name the last, as the host's own projection and a
        // parsed document take it; a field asked for by the source itself
        // (the timestamp) too.
        assert_eq!(
            span_texts(&records[0]),
            Some(vec![
                Some("[1, 2]".to_string()),
                Some("\"last\"".to_string()),
                Some("5".to_string())
            ])
        );
        assert_eq!(
            span_texts(&records[1]),
            Some(vec![None, None, Some("6".to_string())])
        );
        assert_eq!(
            span_texts(&records[2]),
            Some(vec![
                None,
                Some("\"\u{e9}\"".to_string()),
                Some("7".to_string())
            ])
        );
        // Not an object: a dead letter here, since the timestamp is missing.
        assert_eq!(dead.len(), 1);

        // Without a timestamp the line is still checked in the same pass;
        // a line that is JSON but not an object passes without spans (the
        // host projects it and tells the plugin), invalid UTF-8 anywhere is
        // not JSON.
        let text = "{\"text\":\"x\",\"other\":\"\u{e9}\"}\n[1,2]\n";
        let (records, dead) = read_projecting(text, FileSourceOptions::default(), &["text"]);
        assert_eq!(records.len(), 2);
        assert!(dead.is_empty());
        assert_eq!(
            span_texts(&records[0]),
            Some(vec![Some("\"x\"".to_string())])
        );
        assert_eq!(span_texts(&records[1]), None);
        let mut invalid = b"{\"text\":\"x\",\"other\":\"".to_vec();
        invalid.extend_from_slice(b"\xff\"}\n");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, &invalid).unwrap();
        let mut source = FileSource::open("file", &path, FileSourceOptions::default()).unwrap();
        source.project_ahead(Arc::from(vec!["text".to_string()]));
        let batch = source.next_batch(10).unwrap().unwrap();
        assert!(batch.records.is_empty());
        assert_eq!(batch.dead_letters.len(), 1);

        // The same without any field read (no timestamp, no plugin's
        // fields): the line is still checked whole, its skipped string too.
        let mut source = FileSource::open("file", &path, FileSourceOptions::default()).unwrap();
        let batch = source.next_batch(10).unwrap().unwrap();
        assert!(batch.records.is_empty());
        assert_eq!(batch.dead_letters.len(), 1);
    }
}
