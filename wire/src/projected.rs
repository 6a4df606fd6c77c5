//! The projected batch format of `sluice:plugin/projected-transformer`.
//!
//! For plugins whose language makes per-record work expensive (Python runs
//! in an interpreter compiled to WebAssembly), the host does the JSON work
//! it can do natively: the plugin names the top-level fields of a JSON
//! object value it reads, and the host finds them in every record while
//! packing the batch. The plugin then reads a field by slicing the buffer
//! and parses only that field's text, and can emit "the input record with
//! one field's value replaced" ([`crate::OutputItem::EmitReplacing`]),
//! which the host splices natively.
//!
//! The layout is fixed-width tables followed by bytes, so that a guest can
//! read it with its standard library (Python: `struct` and
//! `memoryview.cast`) and build nothing per record until it asks. All
//! integers are little-endian.
//!
//! ```text
//! header   4 × u32   version (PROJECTED_FORMAT_VERSION), records n, fields f, 0
//! slots    n × (4 + f) × 2 × u32
//!          per record, (start, end) byte ranges into the whole buffer:
//!          value, key, topic, headers, then the f fields in the order the
//!          plugin named them
//! numbers  n × 3 × i64   per record: event time (i64::MIN: none),
//!                         partition, offset
//! data     the bytes the slots point into
//! ```
//!
//! A slot whose start is [`ABSENT`] holds nothing; its end then says why:
//! [`MISSING`] (no key; the object has no such field) or
//! [`NOT_AN_OBJECT`] (the value is not a well-formed JSON object encoded
//! in UTF-8: the plugin parses it itself to say why). A field's range is
//! its value's JSON text as it appears in the record (within the value's
//! range); a field that occurs twice is the last occurrence, as in a
//! parsed object. The headers slot holds `u32` count, then per header
//! `u32` name length, name (UTF-8), `u32` value length, value.
//!
//! A plugin that does not know the batch's version returns an empty
//! output; the host then calls `text-packed-transformer` for that batch.

use crate::InputRecord;
use alloc::vec::Vec;

/// The version of the projected batch format that this crate writes.
pub const PROJECTED_FORMAT_VERSION: u32 = 1;

/// The start of a slot that holds nothing.
pub const ABSENT: u32 = u32::MAX;

/// The end of an [`ABSENT`] slot: there is nothing (no key, no such field).
pub const MISSING: u32 = 0;

/// The end of an [`ABSENT`] field slot: the record's value is not a JSON
/// object, so no field could be looked for.
pub const NOT_AN_OBJECT: u32 = 1;

/// Slots per record before the fields: value, key, topic, headers.
pub const FIXED_SLOTS: usize = 4;

/// Bytes of the header.
const HEADER_BYTES: usize = 16;

/// Where one projected field of one record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldSlot {
    /// The field's value is `value[start..end]`.
    At {
        /// First byte, within the record's value.
        start: usize,
        /// One past the last byte, within the record's value.
        end: usize,
    },
    /// The object has no such field.
    Missing,
    /// The value is not a JSON object.
    NotAnObject,
}

/// Why a projected batch could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectedError {
    /// The batch would be 4 GiB or larger (offsets are 32-bit).
    TooLarge,
    /// A record was pushed with a different number of fields, or more
    /// records than announced.
    Shape,
}

impl core::fmt::Display for ProjectedError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ProjectedError::TooLarge => f.write_str("a projected batch must stay below 4 GiB"),
            ProjectedError::Shape => {
                f.write_str("records pushed do not match the batch's announced shape")
            }
        }
    }
}

/// Writes a projected batch into a buffer: [`ProjectedBatchWriter::begin`]
/// with the number of records and fields, then one
/// [`ProjectedBatchWriter::push`] per record.
#[derive(Debug)]
pub struct ProjectedBatchWriter<'b> {
    buffer: &'b mut Vec<u8>,
    records: usize,
    fields: usize,
    pushed: usize,
}

impl<'b> ProjectedBatchWriter<'b> {
    /// Clears `buffer` and writes the header and empty tables of a batch
    /// of `records` records with `fields` fields each.
    pub fn begin(
        buffer: &'b mut Vec<u8>,
        records: usize,
        fields: usize,
    ) -> Result<Self, ProjectedError> {
        let data_at = data_offset(records, fields);
        let too_large = |n: usize| u32::try_from(n).map_err(|_| ProjectedError::TooLarge);
        buffer.clear();
        buffer.reserve(data_at);
        for word in [
            PROJECTED_FORMAT_VERSION,
            too_large(records)?,
            too_large(fields)?,
            0,
        ] {
            buffer.extend_from_slice(&word.to_le_bytes());
        }
        too_large(data_at)?;
        buffer.resize(data_at, 0);
        Ok(ProjectedBatchWriter {
            buffer,
            records,
            fields,
            pushed: 0,
        })
    }

    /// Appends `record` with its `fields` (as many as announced).
    pub fn push(
        &mut self,
        record: &InputRecord<'_>,
        fields: &[FieldSlot],
    ) -> Result<(), ProjectedError> {
        if fields.len() != self.fields || self.pushed == self.records {
            return Err(ProjectedError::Shape);
        }
        let index = self.pushed;
        let value = self.append(record.value)?;
        let key = match record.key {
            Some(key) => self.append(key)?,
            None => (ABSENT, MISSING),
        };
        let topic = self.append(record.topic)?;
        let headers_start = self.buffer.len();
        if !record.headers.is_empty() {
            let count =
                u32::try_from(record.headers.len()).map_err(|_| ProjectedError::TooLarge)?;
            self.buffer.extend_from_slice(&count.to_le_bytes());
            for header in &record.headers {
                self.append_sized(header.key.as_bytes())?;
                self.append_sized(header.value)?;
            }
        }
        let headers = match record.headers.is_empty() {
            true => (ABSENT, MISSING),
            false => (offset(headers_start)?, offset(self.buffer.len())?),
        };
        let slots_at = HEADER_BYTES + index * (FIXED_SLOTS + self.fields) * 8;
        let mut slot = slots_at;
        let mut write_slot = |buffer: &mut Vec<u8>, (start, end): (u32, u32)| {
            buffer[slot..slot + 4].copy_from_slice(&start.to_le_bytes());
            buffer[slot + 4..slot + 8].copy_from_slice(&end.to_le_bytes());
            slot += 8;
        };
        for fixed in [value, key, topic, headers] {
            write_slot(self.buffer, fixed);
        }
        for field in fields {
            let range = match *field {
                FieldSlot::At { start, end } if start <= end && end <= record.value.len() => {
                    (value.0 + offset(start)?, value.0 + offset(end)?)
                }
                FieldSlot::At { .. } => return Err(ProjectedError::Shape),
                FieldSlot::Missing => (ABSENT, MISSING),
                FieldSlot::NotAnObject => (ABSENT, NOT_AN_OBJECT),
            };
            write_slot(self.buffer, range);
        }
        let numbers_at = HEADER_BYTES + self.records * (FIXED_SLOTS + self.fields) * 8 + index * 24;
        let numbers = [
            record.event_time.unwrap_or(i64::MIN),
            i64::from(record.partition),
            record.offset,
        ];
        for (i, number) in numbers.iter().enumerate() {
            let at = numbers_at + i * 8;
            self.buffer[at..at + 8].copy_from_slice(&number.to_le_bytes());
        }
        self.pushed += 1;
        Ok(())
    }

    /// Whether every announced record was pushed.
    pub fn is_complete(&self) -> bool {
        self.pushed == self.records
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(u32, u32), ProjectedError> {
        let start = offset(self.buffer.len())?;
        self.buffer.extend_from_slice(bytes);
        Ok((start, offset(self.buffer.len())?))
    }

    fn append_sized(&mut self, bytes: &[u8]) -> Result<(), ProjectedError> {
        let length = u32::try_from(bytes.len()).map_err(|_| ProjectedError::TooLarge)?;
        self.buffer.extend_from_slice(&length.to_le_bytes());
        self.buffer.extend_from_slice(bytes);
        Ok(())
    }
}

/// Where the data of a batch of `records` records with `fields` fields
/// starts.
fn data_offset(records: usize, fields: usize) -> usize {
    HEADER_BYTES + records * (FIXED_SLOTS + fields) * 8 + records * 24
}

fn offset(position: usize) -> Result<u32, ProjectedError> {
    match u32::try_from(position) {
        Ok(position) if position != ABSENT => Ok(position),
        _ => Err(ProjectedError::TooLarge),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bytes, Header};
    use alloc::vec;

    fn u32_at(buffer: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(buffer[at..at + 4].try_into().unwrap())
    }

    fn i64_at(buffer: &[u8], at: usize) -> i64 {
        i64::from_le_bytes(buffer[at..at + 8].try_into().unwrap())
    }

    /// The slot `slot` of record `record` as the bytes it points at, or
    /// the reason it is absent.
    fn slot(buffer: &[u8], fields: usize, record: usize, slot: usize) -> Result<&[u8], u32> {
        let at = HEADER_BYTES + (record * (FIXED_SLOTS + fields) + slot) * 8;
        let (start, end) = (u32_at(buffer, at), u32_at(buffer, at + 4));
        match start {
            ABSENT => Err(end),
            _ => Ok(&buffer[start as usize..end as usize]),
        }
    }

    #[test]
    fn a_batch_reads_back_through_its_tables() {
        let value = br#"{"a":1,"b":"x"}"#;
        let first = InputRecord {
            key: Some(Bytes::new(b"k")),
            value: Bytes::new(value),
            headers: vec![Header {
                key: "h",
                value: Bytes::new(b"hv"),
            }],
            event_time: Some(7),
            topic: Bytes::new(b"topic"),
            partition: 3,
            offset: 42,
        };
        let second = InputRecord {
            key: None,
            value: Bytes::new(b"[1]"),
            headers: vec![],
            event_time: None,
            topic: Bytes::new(b""),
            partition: 0,
            offset: -1,
        };
        let mut buffer = Vec::new();
        let mut writer = ProjectedBatchWriter::begin(&mut buffer, 2, 2).unwrap();
        writer
            .push(
                &first,
                &[FieldSlot::At { start: 11, end: 14 }, FieldSlot::Missing],
            )
            .unwrap();
        assert!(!writer.is_complete());
        writer
            .push(&second, &[FieldSlot::NotAnObject, FieldSlot::NotAnObject])
            .unwrap();
        assert!(writer.is_complete());
        assert_eq!(
            writer.push(&second, &[FieldSlot::Missing, FieldSlot::Missing]),
            Err(ProjectedError::Shape)
        );

        assert_eq!(
            [0, 4, 8, 12].map(|at| u32_at(&buffer, at)),
            [PROJECTED_FORMAT_VERSION, 2, 2, 0]
        );
        assert_eq!(slot(&buffer, 2, 0, 0), Ok(&value[..]));
        assert_eq!(slot(&buffer, 2, 0, 1), Ok(&b"k"[..]));
        assert_eq!(slot(&buffer, 2, 0, 2), Ok(&b"topic"[..]));
        assert_eq!(
            slot(&buffer, 2, 0, 3),
            Ok(&b"\x01\0\0\0\x01\0\0\0h\x02\0\0\0hv"[..])
        );
        assert_eq!(slot(&buffer, 2, 0, 4), Ok(&b"\"x\""[..]));
        assert_eq!(slot(&buffer, 2, 0, 5), Err(MISSING));
        assert_eq!(slot(&buffer, 2, 1, 0), Ok(&b"[1]"[..]));
        assert_eq!(slot(&buffer, 2, 1, 1), Err(MISSING));
        assert_eq!(slot(&buffer, 2, 1, 3), Err(MISSING));
        assert_eq!(slot(&buffer, 2, 1, 4), Err(NOT_AN_OBJECT));
        let numbers = HEADER_BYTES + 2 * (FIXED_SLOTS + 2) * 8;
        assert_eq!(
            [0, 1, 2, 3, 4, 5].map(|i| i64_at(&buffer, numbers + i * 8)),
            [7, 3, 42, i64::MIN, 0, -1]
        );
    }

    #[test]
    fn a_field_outside_its_value_is_refused() {
        let record = InputRecord {
            key: None,
            value: Bytes::new(b"{}"),
            headers: vec![],
            event_time: None,
            topic: Bytes::new(b""),
            partition: 0,
            offset: 0,
        };
        let mut buffer = Vec::new();
        let mut writer = ProjectedBatchWriter::begin(&mut buffer, 1, 1).unwrap();
        assert_eq!(
            writer.push(&record, &[FieldSlot::At { start: 1, end: 3 }]),
            Err(ProjectedError::Shape)
        );
    }
}
