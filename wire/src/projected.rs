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
//! Slots may share bytes (the records of a batch that share a topic point
//! to one copy of it). A slot whose start is [`ABSENT`] holds nothing; its end then says why:
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

/// Whether two field names are equal, compared in line.
///
/// Field names are short and looked up per record (the host matches each
/// key of a line against the fields it reads; a plugin finds a projected
/// field by name): `==` on two strings of equal length is a call to
/// `memcmp` (the C library's on the host, a function of the module in a
/// guest), ~4 % of a window's source thread (ADR 0015).
#[inline]
pub fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |differ, (x, y)| differ | (x ^ y))
            == 0
}

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
    /// Where the batch starts in `buffer`.
    base: usize,
    records: usize,
    fields: usize,
    pushed: usize,
    /// The range of the last topic written: the records of a batch mostly
    /// share their topic, so its bytes are written once and the slots of
    /// the records after point to them (slots are ranges; nothing says
    /// two may not be the same).
    last_topic: Option<(u32, u32)>,
}

impl<'b> ProjectedBatchWriter<'b> {
    /// Clears `buffer` and writes the header and empty tables of a batch
    /// of `records` records with `fields` fields each.
    pub fn begin(
        buffer: &'b mut Vec<u8>,
        records: usize,
        fields: usize,
    ) -> Result<Self, ProjectedError> {
        buffer.clear();
        Self::append_to(buffer, records, fields)
    }

    /// [`ProjectedBatchWriter::begin`] for a batch that follows what
    /// `buffer` holds already (the groups of an `add-projected` input):
    /// the batch's offsets count from where it starts.
    pub fn append_to(
        buffer: &'b mut Vec<u8>,
        records: usize,
        fields: usize,
    ) -> Result<Self, ProjectedError> {
        let base = buffer.len();
        let data_at = data_offset(records, fields);
        let too_large = |n: usize| u32::try_from(n).map_err(|_| ProjectedError::TooLarge);
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
        buffer.resize(base + data_at, 0);
        Ok(ProjectedBatchWriter {
            buffer,
            base,
            records,
            fields,
            pushed: 0,
            last_topic: None,
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
        let topic = match self.last_topic {
            Some((start, end))
                if self.buffer[self.base + start as usize..self.base + end as usize]
                    == **record.topic =>
            {
                (start, end)
            }
            _ => self.append(record.topic)?,
        };
        self.last_topic = Some(topic);
        let headers_start = self.buffer.len() - self.base;
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
            false => (
                offset(headers_start)?,
                offset(self.buffer.len() - self.base)?,
            ),
        };
        let slots_at = self.base + HEADER_BYTES + index * (FIXED_SLOTS + self.fields) * 8;
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
        let numbers_at =
            self.base + HEADER_BYTES + self.records * (FIXED_SLOTS + self.fields) * 8 + index * 24;
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
        let start = offset(self.buffer.len() - self.base)?;
        self.buffer.extend_from_slice(bytes);
        Ok((start, offset(self.buffer.len() - self.base)?))
    }

    fn append_sized(&mut self, bytes: &[u8]) -> Result<(), ProjectedError> {
        let length = u32::try_from(bytes.len()).map_err(|_| ProjectedError::TooLarge)?;
        self.buffer.extend_from_slice(&length.to_le_bytes());
        self.buffer.extend_from_slice(bytes);
        Ok(())
    }
}

/// A projected batch read in place (the guest side of
/// [`ProjectedBatchWriter`]): [`ProjectedBatch::parse`] checks the header
/// and table sizes, [`ProjectedBatch::record`] gives one record and its
/// fields, checking every range it follows.
#[derive(Debug, Clone, Copy)]
pub struct ProjectedBatch<'b> {
    buffer: &'b [u8],
    records: usize,
    fields: usize,
}

/// One record of a [`ProjectedBatch`]: its parts and its projected fields.
#[derive(Debug, Clone)]
pub struct ProjectedRecord<'b> {
    /// The record, its parts borrowed from the batch.
    pub record: InputRecord<'b>,
    /// Its projected fields.
    pub fields: ProjectedFields<'b>,
}

/// The projected fields of one record, in the order the plugin named them.
#[derive(Debug, Clone, Copy)]
pub struct ProjectedFields<'b> {
    slots: &'b [u8],
    buffer: &'b [u8],
}

/// A projected field of one record, as the host found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectedField<'b> {
    /// The field's value as JSON text.
    At(&'b [u8]),
    /// The object has no such field.
    Missing,
    /// The value is not a well-formed JSON object.
    NotAnObject,
}

impl<'b> ProjectedBatch<'b> {
    /// Reads the header of `buffer`: `Ok(None)` for a format version this
    /// crate does not read, an error for a buffer too short for its tables.
    pub fn parse(buffer: &'b [u8]) -> Result<Option<Self>, ProjectedError> {
        let word = |at: usize| -> Result<u32, ProjectedError> {
            let bytes = buffer.get(at..at + 4).ok_or(ProjectedError::Shape)?;
            let mut word = [0u8; 4];
            word.copy_from_slice(bytes);
            Ok(u32::from_le_bytes(word))
        };
        if word(0)? != PROJECTED_FORMAT_VERSION {
            return Ok(None);
        }
        let records = word(4)? as usize;
        let fields = word(8)? as usize;
        let tables = records
            .checked_mul(FIXED_SLOTS + fields)
            .and_then(|slots| slots.checked_mul(8))
            .and_then(|slots| slots.checked_add(records.checked_mul(24)?))
            .and_then(|tables| tables.checked_add(HEADER_BYTES))
            .ok_or(ProjectedError::Shape)?;
        if tables > buffer.len() {
            return Err(ProjectedError::Shape);
        }
        Ok(Some(ProjectedBatch {
            buffer,
            records,
            fields,
        }))
    }

    /// How many records the batch holds.
    pub fn len(&self) -> usize {
        self.records
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// How many fields each record has.
    pub fn fields(&self) -> usize {
        self.fields
    }

    /// Record `index`; an error if a slot points outside the batch.
    pub fn record(&self, index: usize) -> Result<ProjectedRecord<'b>, ProjectedError> {
        if index >= self.records {
            return Err(ProjectedError::Shape);
        }
        let width = (FIXED_SLOTS + self.fields) * 8;
        let slots_at = HEADER_BYTES + index * width;
        let slots = &self.buffer[slots_at..slots_at + width];
        let numbers_at = HEADER_BYTES + self.records * width + index * 24;
        let number = |i: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&self.buffer[numbers_at + i * 8..numbers_at + i * 8 + 8]);
            i64::from_le_bytes(word)
        };
        let value = slot_bytes(self.buffer, slots, 0)?.unwrap_or_default();
        let key = slot_bytes(self.buffer, slots, 1)?;
        let topic = slot_bytes(self.buffer, slots, 2)?.unwrap_or_default();
        let headers = match slot_bytes(self.buffer, slots, 3)? {
            Some(bytes) => read_headers(bytes)?,
            None => Vec::new(),
        };
        let event_time = number(0);
        Ok(ProjectedRecord {
            record: InputRecord {
                key: key.map(crate::Bytes::new),
                value: crate::Bytes::new(value),
                headers,
                event_time: (event_time != i64::MIN).then_some(event_time),
                topic: crate::Bytes::new(topic),
                partition: i32::try_from(number(1)).map_err(|_| ProjectedError::Shape)?,
                offset: number(2),
            },
            fields: ProjectedFields {
                slots: &slots[FIXED_SLOTS * 8..],
                buffer: self.buffer,
            },
        })
    }
}

impl<'b> ProjectedFields<'b> {
    /// The projected field `index` (in the order the plugin named them);
    /// `None` past the last field.
    pub fn get(&self, index: usize) -> Option<Result<ProjectedField<'b>, ProjectedError>> {
        if index * 8 >= self.slots.len() {
            return None;
        }
        let (start, end) = slot_range(self.slots, index);
        Some(match (start, end) {
            (ABSENT, NOT_AN_OBJECT) => Ok(ProjectedField::NotAnObject),
            (ABSENT, _) => Ok(ProjectedField::Missing),
            _ => self
                .buffer
                .get(start as usize..end as usize)
                .map(ProjectedField::At)
                .ok_or(ProjectedError::Shape),
        })
    }
}

fn slot_range(slots: &[u8], index: usize) -> (u32, u32) {
    let at = index * 8;
    let mut start = [0u8; 4];
    let mut end = [0u8; 4];
    start.copy_from_slice(&slots[at..at + 4]);
    end.copy_from_slice(&slots[at + 4..at + 8]);
    (u32::from_le_bytes(start), u32::from_le_bytes(end))
}

fn slot_bytes<'b>(
    buffer: &'b [u8],
    slots: &[u8],
    index: usize,
) -> Result<Option<&'b [u8]>, ProjectedError> {
    match slot_range(slots, index) {
        (ABSENT, _) => Ok(None),
        (start, end) => buffer
            .get(start as usize..end as usize)
            .map(Some)
            .ok_or(ProjectedError::Shape),
    }
}

fn read_headers(mut bytes: &[u8]) -> Result<Vec<crate::Header<'_>>, ProjectedError> {
    fn take<'h>(bytes: &mut &'h [u8], n: usize) -> Result<&'h [u8], ProjectedError> {
        if bytes.len() < n {
            return Err(ProjectedError::Shape);
        }
        let (taken, rest) = bytes.split_at(n);
        *bytes = rest;
        Ok(taken)
    }
    fn sized<'h>(bytes: &mut &'h [u8]) -> Result<&'h [u8], ProjectedError> {
        let mut length = [0u8; 4];
        length.copy_from_slice(take(bytes, 4)?);
        take(bytes, u32::from_le_bytes(length) as usize)
    }
    let mut count = [0u8; 4];
    count.copy_from_slice(take(&mut bytes, 4)?);
    let count = u32::from_le_bytes(count) as usize;
    let mut headers = Vec::with_capacity(count.min(bytes.len() / 8));
    for _ in 0..count {
        let key = core::str::from_utf8(sized(&mut bytes)?).map_err(|_| ProjectedError::Shape)?;
        let value = sized(&mut bytes)?;
        headers.push(crate::Header {
            key,
            value: crate::Bytes::new(value),
        });
    }
    Ok(headers)
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
    fn records_of_one_topic_share_its_bytes_and_read_back_their_own() {
        let record = |topic: &'static [u8], offset| InputRecord {
            key: None,
            value: Bytes::new(b"{}"),
            headers: vec![],
            event_time: None,
            topic: Bytes::new(topic),
            partition: 0,
            offset,
        };
        let topics: [&[u8]; 4] = [b"orders", b"orders", b"refunds", b"orders"];
        let mut buffer = Vec::new();
        let mut writer = ProjectedBatchWriter::begin(&mut buffer, 4, 0).unwrap();
        for (offset, topic) in topics.iter().enumerate() {
            writer.push(&record(topic, offset as i64), &[]).unwrap();
        }
        for (index, topic) in topics.iter().enumerate() {
            assert_eq!(slot(&buffer, 0, index, 2), Ok(*topic));
        }
        // `orders` written for the first, `refunds` for the third and
        // `orders` again for the fourth: the second shares the first's.
        let data = &buffer[data_offset(4, 0)..];
        assert_eq!(data, &b"{}orders{}{}refunds{}orders"[..]);
    }

    #[test]
    fn the_reader_gives_back_what_the_writer_wrote() {
        let value = br#"{"a":1,"b":"x"}"#;
        let record = InputRecord {
            key: Some(Bytes::new(b"k")),
            value: Bytes::new(value),
            headers: vec![
                Header {
                    key: "h",
                    value: Bytes::new(b"hv"),
                },
                Header {
                    key: "empty",
                    value: Bytes::new(b""),
                },
            ],
            event_time: None,
            topic: Bytes::new(b"topic"),
            partition: -1,
            offset: 42,
        };
        let mut buffer = Vec::new();
        let mut writer = ProjectedBatchWriter::begin(&mut buffer, 1, 3).unwrap();
        let slots = [
            FieldSlot::At { start: 11, end: 14 },
            FieldSlot::Missing,
            FieldSlot::NotAnObject,
        ];
        writer.push(&record, &slots).unwrap();
        let batch = ProjectedBatch::parse(&buffer).unwrap().unwrap();
        assert_eq!((batch.len(), batch.fields()), (1, 3));
        let read = batch.record(0).unwrap();
        assert_eq!(read.record, record);
        assert_eq!(read.fields.get(0), Some(Ok(ProjectedField::At(b"\"x\""))));
        assert_eq!(read.fields.get(1), Some(Ok(ProjectedField::Missing)));
        assert_eq!(read.fields.get(2), Some(Ok(ProjectedField::NotAnObject)));
        assert_eq!(read.fields.get(3), None);
        assert!(batch.record(1).is_err());

        // Another version is not read; a short buffer or a range outside
        // the batch is an error, not a panic.
        let mut other = buffer.clone();
        other[0] = 9;
        assert!(ProjectedBatch::parse(&other).unwrap().is_none());
        assert!(ProjectedBatch::parse(&buffer[..40]).is_err());
        let mut outside = buffer.clone();
        outside[HEADER_BYTES + 4..HEADER_BYTES + 8].copy_from_slice(&u32::MAX.to_le_bytes()[..]);
        outside[HEADER_BYTES + 4] = 0xfe;
        assert!(
            ProjectedBatch::parse(&outside)
                .unwrap()
                .unwrap()
                .record(0)
                .is_err()
        );
    }

    #[test]
    fn a_batch_after_other_bytes_reads_back_from_its_own_start() {
        let value = br#"{"a":1,"b":"x"}"#;
        let record = InputRecord {
            key: Some(Bytes::new(b"k")),
            value: Bytes::new(value),
            headers: vec![Header {
                key: "h",
                value: Bytes::new(b"hv"),
            }],
            event_time: Some(5),
            topic: Bytes::new(b"topic"),
            partition: 2,
            offset: 9,
        };
        let slots = [FieldSlot::At { start: 5, end: 6 }, FieldSlot::Missing];
        let mut alone = Vec::new();
        let mut writer = ProjectedBatchWriter::begin(&mut alone, 1, 2).unwrap();
        writer.push(&record, &slots).unwrap();

        let mut after = b"groups".to_vec();
        let mut writer = ProjectedBatchWriter::append_to(&mut after, 1, 2).unwrap();
        writer.push(&record, &slots).unwrap();
        assert!(writer.is_complete());
        assert_eq!(&after[..6], b"groups");
        assert_eq!(&after[6..], &alone[..], "the same bytes as a batch alone");
        let batch = ProjectedBatch::parse(&after[6..]).unwrap().unwrap();
        let read = batch.record(0).unwrap();
        assert_eq!(read.record, record);
        assert_eq!(read.fields.get(0), Some(Ok(ProjectedField::At(b"1"))));
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
