//! The packed batch encoding of `sluice:plugin/packed-transformer`.
//!
//! Crossing the WebAssembly component boundary costs per list and per string,
//! so the fast path moves a whole batch as one buffer each way:
//!
//! * **Host to plugin**: the concatenation of [`InputRecord`]s, each encoded
//!   with [postcard](https://docs.rs/postcard) (a documented, stable format).
//! * **Plugin to host**: the concatenation of [`OutputItem`]s. Every item names
//!   the index of the input record it belongs to; items of one input record
//!   are contiguous and in input order.
//!
//! Both sides decode without copying: byte and string fields borrow from the
//! buffer. This crate is shared by the host and the guest SDK so that the two
//! can never disagree on the format.
//!
//! # The packed aggregate format (`sluice:plugin/packed-aggregator`)
//!
//! A window operator adds a batch's records to many accumulators at once
//! (one per key and window the batch touches). `add-packed` carries them all
//! in one call, one buffer each way, all items postcard-encoded and
//! concatenated:
//!
//! * **Host to plugin**: an [`AggregateBatch`] header (the format
//!   [`AGGREGATE_FORMAT_VERSION`] and the number of groups), then for each
//!   group an [`AggregateGroup`] (its accumulator and record count) followed
//!   by that many [`InputRecord`]s, in arrival order.
//! * **Plugin to host**: one [`GroupAdded`] per group, in input order: the
//!   new accumulator and the records (by index within the group) that could
//!   not be added, with the reason.
//!
//! A plugin that does not know the batch's version returns an empty buffer;
//! the host then adds group by group through the typed `add`.
//!
//! # The projected aggregate format (`sluice:plugin/projected-aggregator`)
//!
//! The packed `add` with the JSON fields the plugin reads found by the host
//! (as the projected transform has), so that an aggregate reads the field it
//! sums without parsing the record:
//!
//! * **Host to plugin**: an [`AggregateBatch`] header (the format
//!   [`AGGREGATE_PROJECTED_FORMAT_VERSION`] and the number of groups), then
//!   one [`AggregateGroup`] per group (its accumulator and record count),
//!   postcard-encoded; the rest of the buffer is one [`projected`] batch
//!   holding the records of every group, group after group, in arrival
//!   order (its offsets count from its own start).
//! * **Plugin to host**: as for `add-packed`, one [`GroupAdded`] per group.
//!
//! An empty answer makes the host send the batch through `add-packed`.
//!
//! # The projected batch format (`sluice:plugin/projected-transformer`)
//!
//! Fixed-width tables a Python plugin reads without decoding, with the JSON
//! fields it asked for already found by the host: see [`projected`].

#![no_std]
extern crate alloc;

pub mod projected;

use alloc::vec::Vec;
use serde::{Deserialize, Serialize};
pub use serde_bytes::Bytes;

/// A record header (Kafka-style): a string key and opaque bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header<'a> {
    /// Header name.
    pub key: &'a str,
    /// Header value.
    #[serde(borrow)]
    pub value: &'a Bytes,
}

/// A record as the host hands it to a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputRecord<'a> {
    /// The record key, if any.
    #[serde(borrow)]
    pub key: Option<&'a Bytes>,
    /// The record value.
    #[serde(borrow)]
    pub value: &'a Bytes,
    /// Headers in their original order.
    #[serde(borrow)]
    pub headers: Vec<Header<'a>>,
    /// Event time, milliseconds since the Unix epoch.
    pub event_time: Option<i64>,
    /// Topic, file or generator the record came from: UTF-8 text (the host
    /// sends only strings), carried as bytes so that plugins that never read
    /// it do not pay for validating it on every record.
    #[serde(borrow)]
    pub topic: &'a Bytes,
    /// Partition within `topic`.
    pub partition: i32,
    /// Offset within the partition.
    pub offset: i64,
}

/// A record a plugin emits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputRecord<'a> {
    /// The record key, if any.
    #[serde(borrow)]
    pub key: Option<&'a Bytes>,
    /// The record value.
    #[serde(borrow)]
    pub value: &'a Bytes,
    /// Headers of the emitted record.
    #[serde(borrow)]
    pub headers: Vec<Header<'a>>,
    /// Event time; `None` keeps the input record's event time.
    pub event_time: Option<i64>,
}

/// Where an emitted record goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Route<'a> {
    /// The main output.
    Main,
    /// A named side output.
    Side(&'a str),
    /// The dead-letter output, with the reason.
    DeadLetter(&'a str),
}

/// One entry of a packed output buffer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputItem<'a> {
    /// Input record `input` produced `record` on `route`.
    Emit {
        /// Index of the input record in the batch.
        input: u32,
        /// Where the record goes.
        #[serde(borrow)]
        route: Route<'a>,
        /// The emitted record.
        #[serde(borrow)]
        record: OutputRecord<'a>,
    },
    /// Input record `input` failed; the host dead-letters it with `reason`.
    /// A failed record has no `Emit` items.
    Failed {
        /// Index of the input record in the batch.
        input: u32,
        /// Why it failed.
        reason: &'a str,
    },
    /// Input record `input` emitted again on the main output with the
    /// value of its top-level JSON field `field` replaced by the JSON text
    /// `json` (added at the end of the object if it has no such field);
    /// every other byte of the value, the key, headers and event time are
    /// the input record's. The host does the splice, so a plugin need not
    /// serialise the record again (the projected path's emit; any packed
    /// output may use it). The input's value must be a JSON object and
    /// `json` one JSON value, or the output breaks the contract.
    EmitReplacing {
        /// Index of the input record in the batch.
        input: u32,
        /// The top-level field replaced.
        field: &'a str,
        /// Its new value, as JSON text.
        #[serde(borrow)]
        json: &'a Bytes,
    },
    /// Input record `input` emitted nothing and did not fail, said out
    /// loud. Optional (an input no item names emitted nothing), except in
    /// one place: on the projected paths an empty output means "the plugin
    /// does not read this batch's format" and makes the host send the
    /// batch again another way, so an SDK whose projected batch emitted
    /// nothing at all writes this item (for the batch's last input) to
    /// say the batch was processed, and no record is processed twice.
    NoEmits {
        /// Index of the input record in the batch.
        input: u32,
    },
}

/// The version of the packed aggregate format that this crate writes and
/// reads (the first field of [`AggregateBatch`]).
pub const AGGREGATE_FORMAT_VERSION: u32 = 1;

/// The version of the projected aggregate format that this crate writes
/// and reads (the first field of the [`AggregateBatch`] of an
/// `add-projected` input).
pub const AGGREGATE_PROJECTED_FORMAT_VERSION: u32 = 1;

/// The header of an `add-packed` (or `add-projected`) input buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregateBatch {
    /// The format version: [`AGGREGATE_FORMAT_VERSION`].
    pub version: u32,
    /// Number of [`AggregateGroup`]s that follow.
    pub groups: u32,
}

/// One key and window of an `add-packed` input: its accumulator, then
/// `records` [`InputRecord`]s follow (in an `add-projected` input, its
/// records are the next `records` of the projected batch after the groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregateGroup<'a> {
    /// The accumulator as the plugin last returned it (empty: a new window
    /// whose accumulator `create` made empty).
    #[serde(borrow)]
    pub accumulator: &'a Bytes,
    /// How many input records follow.
    pub records: u32,
}

/// One group's result in an `add-packed` output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupAdded<'a> {
    /// The new accumulator.
    #[serde(borrow)]
    pub accumulator: &'a Bytes,
    /// Records not added (they do not count; the host dead-letters them).
    #[serde(borrow)]
    pub rejected: Vec<Rejected<'a>>,
}

/// A record an aggregate could not add.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected<'a> {
    /// Index of the record within its group.
    pub index: u32,
    /// Why.
    pub reason: &'a str,
}

/// Why a packed buffer could not be encoded or decoded.
pub type Error = postcard::Error;

/// Appends the postcard encoding of `item` to `buffer`.
pub fn append<T: Serialize>(buffer: &mut Vec<u8>, item: &T) -> Result<(), Error> {
    postcard::to_extend(item, core::mem::take(buffer)).map(|filled| *buffer = filled)
}

/// Appends [`OutputItem::EmitReplacing`] `{ input, field, json }` to
/// `buffer`, byte for byte as [`append`] encodes it (postcard: the variant
/// index, `input`, then `field` and `json` each as a length and its
/// bytes), without going through serde.
///
/// The projected path's emit, once per record: serde's encoder pushed the
/// value through postcard's byte-at-a-time output, ~4 % of a filter
/// plugin's batch (ADR 0015, eighteenth step). The test
/// `emit_replacing_is_encoded_as_serde_encodes_it` holds the two equal.
pub fn append_emit_replacing(buffer: &mut Vec<u8>, input: u32, field: &str, json: &[u8]) {
    buffer.reserve(4 * MAX_VARINT_BYTES + field.len() + json.len());
    push_varint(buffer, u64::from(EMIT_REPLACING_VARIANT));
    push_varint(buffer, u64::from(input));
    push_varint(buffer, field.len() as u64);
    buffer.extend_from_slice(field.as_bytes());
    push_varint(buffer, json.len() as u64);
    buffer.extend_from_slice(json);
}

/// `OutputItem::EmitReplacing`'s position among the variants: the first
/// byte of its postcard encoding.
const EMIT_REPLACING_VARIANT: u8 = 2;

/// Decodes the output item at the front of `buffer` and advances past it:
/// [`take`] for an [`OutputItem`], with the projected path's
/// [`OutputItem::EmitReplacing`] read without serde when every number in
/// it (input, lengths) is below 2^28 and in its shortest form, as
/// [`append_emit_replacing`] and postcard write them. Anything else, and
/// anything malformed, is decoded by postcard, so the result and the
/// errors are postcard's (test `output_items_decode_as_postcard_decodes_them`).
pub fn take_output_item<'a>(buffer: &mut &'a [u8]) -> Result<OutputItem<'a>, Error> {
    if let Some((item, rest)) = emit_replacing_from(buffer) {
        *buffer = rest;
        return Ok(item);
    }
    take(buffer)
}

/// An [`OutputItem::EmitReplacing`] at the front of `bytes` and the rest,
/// if it is one and well formed; `None` leaves the decision to postcard.
fn emit_replacing_from(bytes: &[u8]) -> Option<(OutputItem<'_>, &[u8])> {
    let (&EMIT_REPLACING_VARIANT, rest) = bytes.split_first()? else {
        return None;
    };
    let (input, rest) = varint_from(rest)?;
    let input = u32::try_from(input).ok()?;
    let (field_length, rest) = varint_from(rest)?;
    let (field, rest) = rest.split_at_checked(usize::try_from(field_length).ok()?)?;
    let field = core::str::from_utf8(field).ok()?;
    let (json_length, rest) = varint_from(rest)?;
    let (json, rest) = rest.split_at_checked(usize::try_from(json_length).ok()?)?;
    let item = OutputItem::EmitReplacing {
        input,
        field,
        json: Bytes::new(json),
    };
    Some((item, rest))
}

/// A varint of at most four bytes (values below 2^28: inputs, lengths)
/// in its shortest form, and the rest; `None` for anything else.
fn varint_from(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (index, byte) in bytes.iter().take(4).enumerate() {
        value |= u64::from(byte & 0x7F) << (7 * index);
        if byte & 0x80 == 0 {
            // A last byte of 0 after others is a longer form than needed.
            return (index == 0 || *byte != 0).then(|| (value, &bytes[index + 1..]));
        }
    }
    None
}

/// The most bytes a postcard varint of a `u64` takes.
const MAX_VARINT_BYTES: usize = 10;

/// Appends `value` as postcard encodes unsigned integers and lengths: base
/// 128, least significant group first, the high bit set on every byte but
/// the last.
fn push_varint(buffer: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        buffer.push((value as u8) | 0x80);
        value >>= 7;
    }
    buffer.push(value as u8);
}

/// Decodes one item of type `T` from the front of `buffer` and advances it
/// past the item (for buffers that mix item types, as the packed aggregate
/// input does).
pub fn take<'a, T: Deserialize<'a>>(buffer: &mut &'a [u8]) -> Result<T, Error> {
    let (item, rest) = postcard::take_from_bytes::<T>(buffer)?;
    *buffer = rest;
    Ok(item)
}

/// Iterates over the items concatenated in `buffer`, borrowing from it.
///
/// Yields an error (and then stops) if the buffer is truncated or malformed.
pub fn decode_all<'a, T: Deserialize<'a>>(buffer: &'a [u8]) -> DecodeAll<'a, T> {
    DecodeAll {
        rest: buffer,
        failed: false,
        take: take::<T>,
    }
}

/// [`decode_all`] for a plugin's packed output, each item read with
/// [`take_output_item`].
pub fn decode_output_items(buffer: &[u8]) -> DecodeAll<'_, OutputItem<'_>> {
    DecodeAll {
        rest: buffer,
        failed: false,
        take: take_output_item,
    }
}

/// Iterator returned by [`decode_all`] and [`decode_output_items`].
pub struct DecodeAll<'a, T> {
    rest: &'a [u8],
    failed: bool,
    take: fn(&mut &'a [u8]) -> Result<T, Error>,
}

impl<'a, T> Iterator for DecodeAll<'a, T> {
    type Item = Result<T, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        let item = (self.take)(&mut self.rest);
        self.failed = item.is_err();
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn output_items_decode_as_postcard_decodes_them() {
        let mut buffers: Vec<Vec<u8>> = Vec::new();
        for input in [0, 5, 200, 70_000, u32::MAX] {
            for length in [0usize, 3, 127, 128, 20_000] {
                let json = vec![b'x'; length];
                let mut buffer = Vec::new();
                append_emit_replacing(&mut buffer, input, "text", &json);
                // Read without postcard when its numbers fit the fast path.
                assert_eq!(
                    emit_replacing_from(&buffer).is_some(),
                    input < 1 << 28,
                    "input {input}, length {length}"
                );
                append(&mut buffer, &OutputItem::NoEmits { input }).unwrap();
                buffers.push(buffer);
            }
        }
        // Damaged and unusual encodings: truncated at every length, a bad
        // UTF-8 field name, a length past the end, varints in a longer
        // form than needed and too long for a u32.
        let mut damaged = Vec::new();
        for buffer in &buffers {
            for end in 0..buffer.len().min(40) {
                damaged.push(buffer[..end].to_vec());
            }
        }
        damaged.push(vec![2, 0, 1, 0xFF, 0]);
        damaged.push(vec![2, 0, 4, b't', b'e', b'x', b't', 9, b'1']);
        damaged.push(vec![2, 0x80, 0x00, 1, b'f', 1, b'1']);
        damaged.push(vec![2, 0x80, 0x80, 0x80, 0x80, 0x10, 1, b'f', 1, b'1']);
        damaged.push(vec![2, 0x85, 0x80, 0x80, 0x80, 0x01, 1, b'f', 1, b'1']);
        damaged.push(vec![2, 0, 0x81, 0x00, b'f', 1, b'1']);
        buffers.extend(damaged);
        for buffer in &buffers {
            let mut fast = &buffer[..];
            let mut by_postcard = &buffer[..];
            loop {
                let expected = take::<OutputItem<'_>>(&mut by_postcard);
                let got = take_output_item(&mut fast);
                assert_eq!(got, expected, "{buffer:?}");
                assert_eq!(fast, by_postcard, "{buffer:?}");
                if expected.is_err() || by_postcard.is_empty() {
                    break;
                }
            }
        }
    }

    #[test]
    fn emit_replacing_is_encoded_as_serde_encodes_it() {
        // Lengths around each varint width, inputs across several widths.
        for input in [0, 1, 127, 128, 300, 16_383, 16_384, u32::MAX] {
            for length in [0usize, 1, 127, 128, 129, 16_383, 16_384, 70_000] {
                let json: Vec<u8> = (0..length).map(|i| b'a' + (i % 26) as u8).collect();
                let field = core::str::from_utf8(&json[..length.min(200)]).unwrap();
                let mut by_serde = vec![9u8];
                append(
                    &mut by_serde,
                    &OutputItem::EmitReplacing {
                        input,
                        field,
                        json: Bytes::new(&json),
                    },
                )
                .unwrap();
                let mut by_hand = vec![9u8];
                append_emit_replacing(&mut by_hand, input, field, &json);
                assert_eq!(by_hand, by_serde, "input {input}, length {length}");
                let decoded: OutputItem<'_> = postcard::from_bytes(&by_hand[1..]).unwrap();
                assert_eq!(
                    decoded,
                    OutputItem::EmitReplacing {
                        input,
                        field,
                        json: Bytes::new(&json),
                    }
                );
            }
        }
    }

    #[test]
    fn aggregate_batches_round_trip() {
        let record = InputRecord {
            key: None,
            value: Bytes::new(b"{}"),
            headers: vec![],
            event_time: Some(5),
            topic: Bytes::new(b"t"),
            partition: 0,
            offset: 1,
        };
        let mut buffer = Vec::new();
        let header = AggregateBatch {
            version: AGGREGATE_FORMAT_VERSION,
            groups: 2,
        };
        append(&mut buffer, &header).unwrap();
        for (accumulator, records) in [(&b"a"[..], 1u32), (&b""[..], 2)] {
            let group = AggregateGroup {
                accumulator: Bytes::new(accumulator),
                records,
            };
            append(&mut buffer, &group).unwrap();
            for _ in 0..records {
                append(&mut buffer, &record).unwrap();
            }
        }
        let mut rest = buffer.as_slice();
        assert_eq!(take::<AggregateBatch>(&mut rest).unwrap(), header);
        let first: AggregateGroup<'_> = take(&mut rest).unwrap();
        assert_eq!((&**first.accumulator, first.records), (&b"a"[..], 1));
        assert_eq!(take::<InputRecord<'_>>(&mut rest).unwrap(), record);
        let second: AggregateGroup<'_> = take(&mut rest).unwrap();
        assert_eq!(second.records, 2);
        assert_eq!(take::<InputRecord<'_>>(&mut rest).unwrap(), record);
        assert_eq!(take::<InputRecord<'_>>(&mut rest).unwrap(), record);
        assert!(rest.is_empty());
        assert!(take::<AggregateGroup<'_>>(&mut rest).is_err());
    }

    #[test]
    fn input_records_round_trip_borrowing_from_the_buffer() {
        let records = vec![
            InputRecord {
                key: Some(Bytes::new(b"k1")),
                value: Bytes::new(b"{\"a\":1}"),
                headers: vec![Header {
                    key: "h",
                    value: Bytes::new(b"v"),
                }],
                event_time: Some(1_700_000_000_000),
                topic: Bytes::new(b"bids"),
                partition: 3,
                offset: 42,
            },
            InputRecord {
                key: None,
                value: Bytes::new(b""),
                headers: vec![],
                event_time: None,
                topic: Bytes::new(b""),
                partition: 0,
                offset: -1,
            },
        ];
        let mut buffer = Vec::new();
        for record in &records {
            append(&mut buffer, record).unwrap();
        }
        let decoded: Vec<InputRecord<'_>> = decode_all(&buffer).map(|r| r.unwrap()).collect();
        assert_eq!(decoded, records);
        let value_ptr = decoded[0].value.as_ptr() as usize;
        let range = buffer.as_ptr() as usize..buffer.as_ptr() as usize + buffer.len();
        assert!(
            range.contains(&value_ptr),
            "value must borrow from the buffer"
        );
    }

    #[test]
    fn truncated_buffer_yields_one_error_then_stops() {
        let mut buffer = Vec::new();
        let item = OutputItem::Failed {
            input: 7,
            reason: "bad record",
        };
        append(&mut buffer, &item).unwrap();
        buffer.truncate(buffer.len() - 2);
        let mut items = decode_all::<OutputItem<'_>>(&buffer);
        assert!(items.next().unwrap().is_err());
        assert!(items.next().is_none());
    }
}
