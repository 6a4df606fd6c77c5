//! How a window's records become its result.
//!
//! An [`Aggregator`] works on an opaque accumulator (bytes) that the window
//! operator stores in its state: `create` an empty one, `add` records to it,
//! `merge` two (when session windows merge), `finish` it into the result.
//! The built-in aggregates are in [`super::builtin`]; plugins implement the
//! same four steps through the `aggregate` WIT world
//! (`super::plugin_aggregate`).

use crate::record::Record;
pub use crate::runtime::{AggregateError, GroupAdd};
use crate::state::merge::MergeKind;
use serde_json::Value;
use sluice_json::fields::{FieldPath, FieldValue};

pub use super::builtin::AccumulatorEncoding;

/// Computes window results from records, through an accumulator.
pub trait Aggregator: Send {
    /// A new, empty accumulator.
    fn create(&mut self) -> Result<Vec<u8>, AggregateError>;

    /// Adds `records` (all of one key and window) to `accumulator`.
    /// Returns the records that could not be added, by index, with the
    /// reason: they go to the dead-letter output and do not count.
    fn add(
        &mut self,
        accumulator: &mut Vec<u8>,
        records: &[&Record],
    ) -> Result<Vec<(usize, String)>, AggregateError>;

    /// Adds each group's records to its accumulator: every key and window
    /// a batch touches, in one call where the aggregate can (a plugin with
    /// the packed `add`). Each group's `rejected` is set as [`Self::add`]
    /// returns it.
    fn add_groups(&mut self, groups: &mut [GroupAdd<'_>]) -> Result<(), AggregateError> {
        add_group_by_group(self, groups)
    }

    /// Combines two accumulators (of windows that merge).
    fn merge(&mut self, a: &[u8], b: &[u8]) -> Result<Vec<u8>, AggregateError>;

    /// The window's result.
    fn finish(&mut self, accumulator: &[u8]) -> Result<Value, AggregateError>;

    /// The plugin computing it, if a plugin does (to swap its version);
    /// `None` for built-in aggregates.
    fn plugin(&mut self) -> Option<&mut dyn crate::runtime::SwappablePlugin> {
        None
    }

    /// The fields of a JSON record this aggregate reads itself (built-in
    /// aggregates; plugins read records on their own: none). The window
    /// operator reads them in the same pass over the record as its key
    /// field and hands them over in [`GroupAdd::fields`], so that a record
    /// is parsed once.
    fn input_fields(&self) -> &[FieldPath] {
        &[]
    }

    /// Whether `record`, whose [`Self::input_fields`] have the values
    /// `fields`, is aggregated at all (SQL's `WHERE`): a record that is not
    /// is skipped, neither added nor dead-lettered; `Err`: the record
    /// cannot be judged (a dead letter). Every record, by default.
    fn accepts(&self, _record: &Record, _fields: &[Option<FieldValue>]) -> Result<bool, String> {
        Ok(true)
    }

    /// The top-level fields of a JSON record whose text this aggregate's
    /// plugin reads (the projected path: asked once, within the plugin's
    /// call deadline). A source that parses its records anyway finds where
    /// they lie in the same pass when the window comes right after it
    /// ([`crate::dataflow::Operator::projects_fields`]); `None` (built-in
    /// aggregates, plugins without the projected `add`): nothing to find.
    fn projects_fields(&mut self) -> Option<std::sync::Arc<[String]>> {
        None
    }

    /// How the state store can fold this aggregate's accumulators itself
    /// (built-in aggregates: host code; see `crate::state::merge`), so
    /// that a window kept only in the store takes a batch's partial
    /// accumulator without being read back. `None` (plugins): the window
    /// is read, added to and written again.
    fn store_merge(&self) -> Option<MergeKind> {
        None
    }

    /// How the accumulators are written to the state store, where not as
    /// they are in memory (built-in aggregates).
    fn accumulator_encoding(&self) -> AccumulatorEncoding {
        AccumulatorEncoding::AsIs
    }
}

/// [`Aggregator::add_groups`] as one [`Aggregator::add`] per group.
pub(crate) fn add_group_by_group<A: Aggregator + ?Sized>(
    aggregator: &mut A,
    groups: &mut [GroupAdd<'_>],
) -> Result<(), AggregateError> {
    for group in groups {
        group.rejected = aggregator.add(&mut group.accumulator, group.records)?;
    }
    Ok(())
}
