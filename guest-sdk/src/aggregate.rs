//! Aggregate plugins: the accumulator of an event-time window (feature
//! `aggregate`).
//!
//! Implement [`Aggregate`] and export it with [`crate::export_aggregate!`].
//! The host keeps one accumulator per key and window in its state store; the
//! SDK encodes your accumulator type with postcard between calls. The plugin
//! exports the `fast-projected-aggregate` world: besides the typed `add`, one
//! `add-packed` call adds a whole batch to all its keys and windows (the
//! packed aggregate format of `sluice-wire`), and an aggregate that names
//! the JSON fields it reads ([`Aggregate::json_fields`]) gets them found by
//! the host instead (`add-projected`): [`Record::field`] then parses
//! nothing.
//!
//! ```ignore
//! use sluice_sdk::{Aggregate, Config, Record, export_aggregate};
//!
//! struct Count;
//!
//! impl Aggregate for Count {
//!     type Accumulator = u64;
//!     fn init(_config: &Config) -> Result<Self, String> { Ok(Count) }
//!     fn add(&mut self, acc: &mut u64, _record: &Record<'_>) -> Result<(), String> {
//!         *acc += 1;
//!         Ok(())
//!     }
//!     fn merge(&mut self, a: u64, b: u64) -> u64 { a + b }
//!     fn finish(&mut self, acc: u64) -> serde_json::Value { acc.into() }
//! }
//!
//! export_aggregate!(Count);
//! ```

use crate::bindings::sluice::plugin::types as wit;
use crate::{Config, Record};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::any::Any;
use std::cell::RefCell;

/// A window aggregate computed over an accumulator the host stores.
pub trait Aggregate: Sized + 'static {
    /// What is kept per key and window between calls.
    type Accumulator: Serialize + DeserializeOwned + Default + Clone;

    /// Builds the aggregate from the operator's `config` table.
    fn init(config: &Config) -> Result<Self, String>;

    /// Adds one record; `Err(reason)` dead-letters the record (it does not
    /// count) and leaves the accumulator as it was before this record.
    fn add(
        &mut self,
        accumulator: &mut Self::Accumulator,
        record: &Record<'_>,
    ) -> Result<(), String>;

    /// Combines the accumulators of two windows that merge (sessions).
    fn merge(&mut self, a: Self::Accumulator, b: Self::Accumulator) -> Self::Accumulator;

    /// The window's result.
    fn finish(&mut self, accumulator: Self::Accumulator) -> serde_json::Value;

    /// The top-level fields of a JSON object record this aggregate reads
    /// with [`Record::field`] (asked once, after [`Aggregate::init`]). When
    /// it names some, the host finds them natively in the pass it makes
    /// over each record anyway (the projected path): the plugin parses
    /// nothing to read them. The default, none, keeps the packed path.
    fn json_fields(&self) -> Vec<String> {
        Vec::new()
    }
}

thread_local! {
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
    /// The fields the host was told the aggregate reads (asked once per
    /// instance): names the projected slots of every batch.
    static PROJECTED_FIELDS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn with_instance<A: Aggregate, R>(f: impl FnOnce(&mut A) -> R) -> R {
    INSTANCE.with(|slot| {
        let mut slot = slot.borrow_mut();
        match slot.as_mut().and_then(|b| b.downcast_mut::<A>()) {
            Some(aggregate) => f(aggregate),
            // The host always calls `init` first; reaching this is a host bug.
            None => panic!("sluice-sdk: aggregate called before init"),
        }
    })
}

fn decode<A: Aggregate>(bytes: &[u8]) -> A::Accumulator {
    if bytes.is_empty() {
        return A::Accumulator::default();
    }
    // The host only hands back bytes this plugin produced.
    postcard::from_bytes(bytes).unwrap_or_default()
}

fn encode<A: Aggregate>(accumulator: &A::Accumulator) -> Vec<u8> {
    postcard::to_allocvec(accumulator).unwrap_or_default()
}

#[doc(hidden)]
pub fn init<A: Aggregate>(config: Vec<(String, String)>) -> Result<(), String> {
    let aggregate = A::init(&Config::from_pairs(config))?;
    INSTANCE.with(|slot| *slot.borrow_mut() = Some(Box::new(aggregate)));
    Ok(())
}

#[doc(hidden)]
pub fn create<A: Aggregate>() -> Vec<u8> {
    encode::<A>(&A::Accumulator::default())
}

#[doc(hidden)]
pub fn add<A: Aggregate>(
    accumulator: Vec<u8>,
    records: Vec<wit::InputRecord>,
) -> (Vec<u8>, Vec<(u32, String)>) {
    with_instance::<A, _>(|aggregate| {
        let mut acc = decode::<A>(&accumulator);
        let mut rejected = Vec::new();
        for (index, typed) in records.iter().enumerate() {
            let record = Record::from_typed(typed);
            let before = acc.clone();
            if let Err(reason) = aggregate.add(&mut acc, &record) {
                acc = before;
                rejected.push((index as u32, reason));
            }
        }
        (encode::<A>(&acc), rejected)
    })
}

#[doc(hidden)]
pub fn add_packed<A: Aggregate>(batch: &[u8]) -> Vec<u8> {
    let mut output = Vec::new();
    let mut rest = batch;
    let header = match sluice_wire::take::<sluice_wire::AggregateBatch>(&mut rest) {
        Ok(header) if header.version == sluice_wire::AGGREGATE_FORMAT_VERSION => header,
        // An unknown version (or a malformed buffer): the host falls back
        // to the typed `add`.
        _ => return output,
    };
    with_instance::<A, _>(|aggregate| {
        for _ in 0..header.groups {
            let Ok(group) = sluice_wire::take::<sluice_wire::AggregateGroup<'_>>(&mut rest) else {
                output.clear();
                return;
            };
            let records = (0..group.records).map(|_| {
                sluice_wire::take::<sluice_wire::InputRecord<'_>>(&mut rest)
                    .map(|inner| Record::new(inner, None))
                    .ok()
            });
            if !add_group(aggregate, group.accumulator, records, &mut output) {
                output.clear();
                return;
            }
        }
    });
    output
}

/// The top-level JSON fields the aggregate reads
/// ([`Aggregate::json_fields`]), kept to read projected batches.
#[doc(hidden)]
pub fn projected_fields<A: Aggregate>() -> Vec<String> {
    let fields = with_instance::<A, _>(|aggregate| aggregate.json_fields());
    PROJECTED_FIELDS.with(|known| known.borrow_mut().clone_from(&fields));
    fields
}

/// Adds an `add-projected` batch (the projected aggregate format of
/// `sluice-wire`). An empty output (a version this SDK does not read, a
/// malformed buffer, fields other than the ones named) makes the host send
/// the batch through `add-packed` instead.
#[doc(hidden)]
pub fn add_projected<A: Aggregate>(batch: &[u8]) -> Vec<u8> {
    let mut output = Vec::new();
    let mut rest = batch;
    let header = match sluice_wire::take::<sluice_wire::AggregateBatch>(&mut rest) {
        Ok(header) if header.version == sluice_wire::AGGREGATE_PROJECTED_FORMAT_VERSION => header,
        _ => return output,
    };
    let mut groups = Vec::with_capacity((header.groups as usize).min(rest.len()));
    for _ in 0..header.groups {
        match sluice_wire::take::<sluice_wire::AggregateGroup<'_>>(&mut rest) {
            Ok(group) => groups.push(group),
            Err(_) => return output,
        }
    }
    let projected = match sluice_wire::projected::ProjectedBatch::parse(rest) {
        Ok(Some(projected)) => projected,
        _ => return output,
    };
    let total: u64 = groups.iter().map(|group| u64::from(group.records)).sum();
    PROJECTED_FIELDS.with(|names| {
        let names = names.borrow();
        if names.len() != projected.fields() || total != projected.len() as u64 {
            return;
        }
        with_instance::<A, _>(|aggregate| {
            let mut next = 0usize;
            for group in &groups {
                let first = next;
                next += group.records as usize;
                let records = (first..next).map(|index| {
                    projected
                        .record(index)
                        .map(|read| Record::new(read.record, Some((names.as_slice(), read.fields))))
                        .ok()
                });
                if !add_group(aggregate, group.accumulator, records, &mut output) {
                    output.clear();
                    return;
                }
            }
        });
    });
    output
}

/// Adds one group's `records` (`None`: a record the buffer does not hold)
/// to the accumulator `accumulator` and appends its [`sluice_wire::GroupAdded`]
/// to `output`; `false` if a record could not be read (the host then sends
/// the batch another way).
fn add_group<'r, A: Aggregate>(
    aggregate: &mut A,
    accumulator: &[u8],
    records: impl Iterator<Item = Option<Record<'r>>>,
    output: &mut Vec<u8>,
) -> bool {
    let mut acc = decode::<A>(accumulator);
    let mut rejected = Vec::new();
    for (index, record) in records.enumerate() {
        let Some(record) = record else {
            return false;
        };
        let before = acc.clone();
        if let Err(reason) = aggregate.add(&mut acc, &record) {
            acc = before;
            rejected.push((index as u32, reason));
        }
    }
    let accumulator = encode::<A>(&acc);
    let added = sluice_wire::GroupAdded {
        accumulator: sluice_wire::Bytes::new(&accumulator),
        rejected: rejected
            .iter()
            .map(|(index, reason)| sluice_wire::Rejected {
                index: *index,
                reason,
            })
            .collect(),
    };
    // Encoding into a Vec cannot fail (no size limit, no I/O).
    let _ = sluice_wire::append(output, &added);
    true
}

#[doc(hidden)]
pub fn merge<A: Aggregate>(a: Vec<u8>, b: Vec<u8>) -> Vec<u8> {
    with_instance::<A, _>(|aggregate| {
        encode::<A>(&aggregate.merge(decode::<A>(&a), decode::<A>(&b)))
    })
}

#[doc(hidden)]
pub fn finish<A: Aggregate>(accumulator: Vec<u8>) -> Vec<u8> {
    with_instance::<A, _>(|aggregate| {
        let mut result = Vec::new();
        // serde_json's text (an error: nothing, as before).
        let _ = crate::json::to_writer(&mut result, &aggregate.finish(decode::<A>(&accumulator)));
        result
    })
}

/// Exports an [`Aggregate`] implementation as the plugin's component
/// exports (the `aggregate` world). Use it once per plugin crate.
#[macro_export]
macro_rules! export_aggregate {
    ($aggregate:ty) => {
        struct SluiceExports;

        impl $crate::bindings::exports::sluice::plugin::aggregator::Guest for SluiceExports {
            fn init(config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>) -> ::std::result::Result<(), ::std::string::String> {
                $crate::aggregate::init::<$aggregate>(config)
            }

            fn create() -> ::std::vec::Vec<u8> {
                $crate::aggregate::create::<$aggregate>()
            }

            fn add(
                accumulator: ::std::vec::Vec<u8>,
                records: ::std::vec::Vec<$crate::bindings::sluice::plugin::types::InputRecord>,
            ) -> $crate::bindings::exports::sluice::plugin::aggregator::Added {
                let (accumulator, rejected) = $crate::aggregate::add::<$aggregate>(accumulator, records);
                $crate::bindings::exports::sluice::plugin::aggregator::Added { accumulator, rejected }
            }

            fn merge(a: ::std::vec::Vec<u8>, b: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                $crate::aggregate::merge::<$aggregate>(a, b)
            }

            fn finish(accumulator: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                $crate::aggregate::finish::<$aggregate>(accumulator)
            }
        }

        impl $crate::bindings::exports::sluice::plugin::packed_aggregator::Guest for SluiceExports {
            fn add_packed(groups: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                $crate::aggregate::add_packed::<$aggregate>(&groups)
            }
        }

        impl $crate::bindings::exports::sluice::plugin::projected_aggregator::Guest for SluiceExports {
            fn projected_fields() -> ::std::vec::Vec<::std::string::String> {
                $crate::aggregate::projected_fields::<$aggregate>()
            }

            fn add_projected(groups: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                $crate::aggregate::add_projected::<$aggregate>(&groups)
            }
        }

        $crate::bindings::export_world!(SluiceExports with_types_in $crate::bindings);
    };
}
