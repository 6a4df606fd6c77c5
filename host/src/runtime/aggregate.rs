//! A plugin implementing the `aggregate` world, as a window operator's
//! [`Aggregator`].
//!
//! The same limits as transforms apply (CPU deadline per call, memory
//! limit). A call that faults poisons the instance, which is re-created:
//! an `add` that faults is retried record by record, and only the records
//! that fault alone are rejected (dead-lettered) with the fault as reason.
//! A fault in `create`, `merge` or `finish` — where no record is to blame —
//! is retried once on a fresh instance and otherwise stops the operator.
//!
//! A plugin of the `text-aggregate` world (the Python SDK's) is called
//! through its string-returning functions (see `text-aggregator` in the WIT
//! package: componentize-py never frees returned byte lists).
//!
//! A plugin of the `fast-aggregate` world gets all the groups of a batch in
//! one `add-packed` call; if that call faults, or the plugin does not read
//! the format version, the batch is added group by group through the typed
//! `add` (where a fault is narrowed down to the records to blame).
//!
//! A plugin of the `fast-projected-aggregate` world (the Rust SDK's) that
//! names the JSON fields it reads gets them found by the host, in one
//! `add-projected` call per batch: the spans the source found in its own
//! pass over each record ([`crate::record::FieldSpans`]), or found here.
//! An answer it does not read goes through `add-packed`; a fault, group by
//! group as above. A `text-projected-aggregate` plugin (the Python and
//! JavaScript SDKs') gets the same call as `add-projected-text`, its answer
//! as a string; it has no `add-packed`, so an answer it does not read goes
//! group by group through `add-text`.

use super::batch_output::latin1_bytes;
use super::bindings::aggregate::Aggregate;
use super::bindings::fast_aggregate::FastAggregate;
use super::bindings::fast_projected_aggregate::FastProjectedAggregate;
use super::bindings::text_aggregate::TextAggregate;
use super::bindings::text_projected_aggregate::TextProjectedAggregate;
use super::bindings::typed::sluice::plugin::types as wit;
use super::component::PluginComponent;
use super::host_api::PluginState;
use super::instance::{classify, end_call, start_call, to_wire_record, to_wit_record};
use super::plugin_host::{HostedWorld, PluginHost, SwappablePlugin};
use super::{PluginLimits, RuntimeError};
use crate::metrics::RECORDS_PROJECTED_AHEAD_COUNTER;
use crate::metrics::{OperatorMetrics, add};
use crate::record::Record;
use crate::state::{OperatorScope, ScopedState, StateStore, key_group};
use sluice_json::FieldValue;
use std::sync::Arc;
use wasmtime::Store;

/// The aggregate world: `sluice:plugin/aggregator`.
pub(crate) struct AggregateWorld;

/// The exports of one aggregate instance: the typed aggregator always, the
/// packed `add` for `fast-aggregate` plugins (and the projected one for
/// `fast-projected-aggregate` plugins), the string-returning functions for
/// `text-aggregate` plugins (and the projected `add` returning a string for
/// `text-projected-aggregate` plugins).
pub(crate) struct AggregateBindings {
    typed: Aggregate,
    fast: Option<FastAggregate>,
    projected: Option<FastProjectedAggregate>,
    text: Option<TextAggregate>,
    text_projected: Option<TextProjectedAggregate>,
}

/// How a call that adds a whole batch went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchAdd {
    /// Every group was added.
    Added,
    /// Not made (the plugin has no such export or reads no fields), or
    /// answered with nothing (a format version it does not read): try the
    /// next way.
    NotTaken,
    /// The plugin faulted (its instance is re-created): add group by
    /// group, where a fault is narrowed down to the records to blame.
    Faulted,
}

/// What an `add` call returns: the new accumulator, and the records (by
/// index) it could not add with the reason.
type Added = (Vec<u8>, Vec<(u32, String)>);

/// The bytes a `text-aggregator` function's string stands for.
fn text_result(text: String) -> wasmtime::Result<Vec<u8>> {
    latin1_bytes(text).map_err(wasmtime::Error::msg)
}

impl AggregateBindings {
    /// Whether the plugin has a projected `add` (bytes or text).
    fn has_projected(&self) -> bool {
        self.projected.is_some() || self.text_projected.is_some()
    }

    /// `projected-fields` of the plugin's projected `add`.
    fn projected_fields(&self, store: &mut Store<PluginState>) -> wasmtime::Result<Vec<String>> {
        match (&self.projected, &self.text_projected) {
            (Some(projected), _) => projected
                .sluice_plugin_projected_aggregator()
                .call_projected_fields(store),
            (None, Some(text)) => text
                .sluice_plugin_text_projected_aggregator()
                .call_projected_fields(store),
            (None, None) => Err(wasmtime::Error::msg("no projected add")),
        }
    }

    /// `add-projected`, through `add-projected-text` where the plugin has
    /// that instead.
    fn add_projected(
        &self,
        store: &mut Store<PluginState>,
        groups: &[u8],
    ) -> wasmtime::Result<Vec<u8>> {
        match (&self.projected, &self.text_projected) {
            (Some(projected), _) => projected
                .sluice_plugin_projected_aggregator()
                .call_add_projected(store, groups),
            (None, Some(text)) => text
                .sluice_plugin_text_projected_aggregator()
                .call_add_projected_text(store, groups)
                .and_then(text_result),
            (None, None) => Err(wasmtime::Error::msg("no projected add")),
        }
    }

    /// `create`, through `create-text` where the plugin has it.
    fn create(&self, store: &mut Store<PluginState>) -> wasmtime::Result<Vec<u8>> {
        match &self.text {
            Some(text) => text
                .sluice_plugin_text_aggregator()
                .call_create_text(store)
                .and_then(text_result),
            None => self.typed.sluice_plugin_aggregator().call_create(store),
        }
    }

    /// `add`: the new accumulator and the rejected records.
    fn add(
        &self,
        store: &mut Store<PluginState>,
        accumulator: &[u8],
        records: &[wit::InputRecord],
    ) -> wasmtime::Result<Added> {
        match &self.text {
            Some(text) => {
                let added = text.sluice_plugin_text_aggregator().call_add_text(
                    store,
                    accumulator,
                    records,
                )?;
                Ok((text_result(added.accumulator)?, added.rejected))
            }
            None => {
                let added =
                    self.typed
                        .sluice_plugin_aggregator()
                        .call_add(store, accumulator, records)?;
                Ok((added.accumulator, added.rejected))
            }
        }
    }

    /// `merge`.
    fn merge(
        &self,
        store: &mut Store<PluginState>,
        a: &[u8],
        b: &[u8],
    ) -> wasmtime::Result<Vec<u8>> {
        match &self.text {
            Some(text) => text
                .sluice_plugin_text_aggregator()
                .call_merge_text(store, a, b)
                .and_then(text_result),
            None => self
                .typed
                .sluice_plugin_aggregator()
                .call_merge(store, a, b),
        }
    }

    /// `finish`: the result's JSON bytes.
    fn finish(
        &self,
        store: &mut Store<PluginState>,
        accumulator: &[u8],
    ) -> wasmtime::Result<Vec<u8>> {
        match &self.text {
            Some(text) => text
                .sluice_plugin_text_aggregator()
                .call_finish_text(store, accumulator)
                .and_then(text_result),
            None => self
                .typed
                .sluice_plugin_aggregator()
                .call_finish(store, accumulator),
        }
    }
}

impl HostedWorld for AggregateWorld {
    type Exports = AggregateBindings;

    fn check(component: &PluginComponent) -> Result<(), String> {
        match component.pre.aggregator {
            Some(_) => Ok(()),
            None => Err("not an aggregate plugin (it implements a transform world: use it as an operator's plugin)".into()),
        }
    }

    fn load(
        component: &PluginComponent,
        store: &mut Store<PluginState>,
        instance: &wasmtime::component::Instance,
    ) -> wasmtime::Result<AggregateBindings> {
        let typed = match &component.pre.aggregator {
            Some(indices) => indices.load(&mut *store, instance)?,
            None => return Err(wasmtime::Error::msg("not an aggregate plugin")),
        };
        let fast = match &component.pre.packed_aggregator {
            Some(indices) => Some(indices.load(&mut *store, instance)?),
            None => None,
        };
        let projected = match &component.pre.projected_aggregator {
            Some(indices) => Some(indices.load(&mut *store, instance)?),
            None => None,
        };
        let text = match &component.pre.text_aggregator {
            Some(indices) => Some(indices.load(&mut *store, instance)?),
            None => None,
        };
        let text_projected = match &component.pre.text_projected_aggregator {
            Some(indices) => Some(indices.load(&mut *store, instance)?),
            None => None,
        };
        Ok(AggregateBindings {
            typed,
            fast,
            projected,
            text,
            text_projected,
        })
    }

    fn init(
        exports: &AggregateBindings,
        store: &mut Store<PluginState>,
        config: &[(String, String)],
    ) -> wasmtime::Result<Result<(), String>> {
        exports
            .typed
            .sluice_plugin_aggregator()
            .call_init(store, config)
    }
}

/// A failure no record is to blame for (e.g. a plugin that faults while
/// merging): the window operator stops.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AggregateError(pub String);

/// One key and window's part of a batch, for the window's
/// `Aggregator::add_groups` (and [`PluginAggregator::add_groups`]).
#[derive(Debug)]
pub struct GroupAdd<'r> {
    /// The window's accumulator: updated in place.
    pub accumulator: Vec<u8>,
    /// The records to add, in arrival order (a part of one list for the
    /// whole batch).
    pub records: &'r [&'r Record],
    /// Each record's values of the aggregate's `input_fields`, in that
    /// order, when the window operator read them (one entry per record);
    /// empty otherwise, and the aggregate reads the records itself.
    pub fields: &'r [&'r [Option<FieldValue>]],
    /// Set by `add_groups`: the records (by index in `records`) that could
    /// not be added, with the reason.
    pub rejected: Vec<(usize, String)>,
}

/// An aggregate plugin instance.
pub struct PluginAggregator {
    host: PluginHost<AggregateWorld>,
    /// The `add-packed` (or `add-projected`) input, reused from batch to
    /// batch.
    packed_input: Vec<u8>,
    /// The top-level JSON fields the plugin reads on the projected path:
    /// `None` until asked (once per plugin version), empty if it names
    /// none (or asking faulted).
    projected_fields: Option<Arc<[String]>>,
    /// One record's projected slots (reused).
    field_slots: Vec<sluice_wire::projected::FieldSlot>,
}

impl PluginAggregator {
    /// Instantiates `component` (an `aggregate` plugin) for the operator
    /// `scope` and calls its `init` with `config`.
    pub fn new(
        component: Arc<PluginComponent>,
        scope: OperatorScope,
        state_store: Arc<dyn StateStore>,
        metrics: Arc<OperatorMetrics>,
        limits: PluginLimits,
        config: Vec<(String, String)>,
    ) -> Result<Self, RuntimeError> {
        let state = ScopedState::new(state_store, key_group::DEFAULT_MAX_PARALLELISM);
        Ok(PluginAggregator {
            host: PluginHost::new(component, scope, state, metrics, limits, config)?,
            packed_input: Vec::new(),
            projected_fields: None,
            field_slots: Vec::new(),
        })
    }

    fn reinstantiate(&mut self) -> Result<(), AggregateError> {
        add(&self.host.metrics.reinstantiations, 1);
        self.host
            .reinstantiate()
            .map_err(|error| AggregateError(error.to_string()))
    }

    /// Runs `call` within the deadline; on a fault, re-creates the instance
    /// and returns the fault's description.
    fn call<T>(
        &mut self,
        call: impl Fn(&AggregateBindings, &mut Store<PluginState>) -> wasmtime::Result<T>,
    ) -> Result<T, String> {
        start_call(&mut self.host.store, self.host.limits.deadline);
        let result = call(&self.host.exports, &mut self.host.store);
        end_call(&mut self.host.store);
        match result {
            Ok(value) => Ok(value),
            Err(error) => {
                let fault = classify(error, &self.host.store, &self.host.limits);
                self.host.metrics.count_fault(fault.kind, &fault.message);
                tracing::warn!(plugin = %self.host.component.label(), %fault, "aggregate plugin faulted");
                self.reinstantiate().map_err(|e| e.0)?;
                Err(fault.message)
            }
        }
    }

    /// [`Self::call`] for calls no record is to blame for: retried once.
    fn call_retrying<T>(
        &mut self,
        what: &str,
        call: impl Fn(&AggregateBindings, &mut Store<PluginState>) -> wasmtime::Result<T>,
    ) -> Result<T, AggregateError> {
        match self.call(&call) {
            Ok(value) => Ok(value),
            Err(_) => self.call(&call).map_err(|message| {
                AggregateError(format!(
                    "aggregate plugin {} failed in `{what}`: {message}",
                    self.host.component.label()
                ))
            }),
        }
    }
}

impl PluginAggregator {
    /// All `groups` in one `add-packed` call.
    fn add_packed(&mut self, groups: &mut [GroupAdd<'_>]) -> Result<BatchAdd, AggregateError> {
        if self.host.exports.fast.is_none() {
            return Ok(BatchAdd::NotTaken);
        }
        self.add_batch(
            groups,
            "add-packed",
            |_, input, groups| {
                encode_groups(input, sluice_wire::AGGREGATE_FORMAT_VERSION, groups, true)
            },
            |b, store, input| match &b.fast {
                Some(fast) => fast
                    .sluice_plugin_packed_aggregator()
                    .call_add_packed(store, input),
                None => Err(wasmtime::Error::msg("no packed add")),
            },
        )
    }

    /// One call adding every group of a batch: `encode` writes its input
    /// (into the buffer reused from batch to batch), `call` makes it, and
    /// the answer (`call_name`'s) sets each group's accumulator.
    fn add_batch(
        &mut self,
        groups: &mut [GroupAdd<'_>],
        call_name: &str,
        encode: impl FnOnce(&mut Self, &mut Vec<u8>, &[GroupAdd<'_>]) -> Result<(), AggregateError>,
        call: impl Fn(&AggregateBindings, &mut Store<PluginState>, &[u8]) -> wasmtime::Result<Vec<u8>>,
    ) -> Result<BatchAdd, AggregateError> {
        let mut input = std::mem::take(&mut self.packed_input);
        input.clear();
        let encoded = encode(self, &mut input, groups);
        if let Err(error) = encoded {
            self.packed_input = input;
            return Err(error);
        }
        let output = self.call(|b, store| call(b, store, &input));
        self.packed_input = input;
        match output {
            Ok(output) => self.take_added(groups, &output, call_name),
            Err(_) => Ok(BatchAdd::Faulted),
        }
    }

    /// The fields the plugin reads on the projected path, asked now
    /// (within the call deadline) if not yet; `None` if it has no
    /// projected `add`, or names no field and has the packed `add` (which
    /// then serves it). A plugin whose answer faults is taken to name none.
    /// A `text-projected-aggregate` plugin (no packed `add`) that names
    /// none still gets whole batches, with no field found.
    /// The top-level fields the plugin reads on the projected path
    /// (asked once), or `None` if it has no projected `add`.
    pub fn projected_fields(&mut self) -> Option<Arc<[String]>> {
        if !self.host.exports.has_projected() {
            return None;
        }
        if self.projected_fields.is_none() {
            let asked = self.call(|b, store| b.projected_fields(store));
            self.projected_fields = Some(Arc::from(asked.unwrap_or_default()));
        }
        let batches_without_fields = self.host.exports.fast.is_none();
        self.projected_fields
            .clone()
            .filter(|fields| !fields.is_empty() || batches_without_fields)
    }

    /// All `groups` in one `add-projected` call: the records as one
    /// projected batch, each with the fields the plugin reads, found by
    /// the source in its own pass or here.
    fn add_projected(&mut self, groups: &mut [GroupAdd<'_>]) -> Result<BatchAdd, AggregateError> {
        let Some(fields) = self.projected_fields() else {
            return Ok(BatchAdd::NotTaken);
        };
        self.add_batch(
            groups,
            "add-projected",
            |this, input, groups| this.encode_projected(input, &fields, groups),
            |b, store, input| b.add_projected(store, input),
        )
    }

    /// Writes the `add-projected` input for `groups` into `input`: the
    /// group table, then the records of every group as one projected batch.
    fn encode_projected(
        &mut self,
        input: &mut Vec<u8>,
        fields: &[String],
        groups: &[GroupAdd<'_>],
    ) -> Result<(), AggregateError> {
        let projected_error = |e: sluice_wire::projected::ProjectedError| {
            AggregateError(format!("cannot encode a projected batch: {e}"))
        };
        encode_groups(
            input,
            sluice_wire::AGGREGATE_PROJECTED_FORMAT_VERSION,
            groups,
            false,
        )?;
        let records = groups.iter().map(|group| group.records.len()).sum();
        let mut writer =
            sluice_wire::projected::ProjectedBatchWriter::append_to(input, records, fields.len())
                .map_err(projected_error)?;
        let mut found_by_source = 0;
        for record in groups.iter().flat_map(|group| group.records) {
            if super::projection::record_slots(record, fields, &mut self.field_slots) {
                found_by_source += 1;
            }
            writer
                .push(&to_wire_record(record), &self.field_slots)
                .map_err(projected_error)?;
        }
        if found_by_source > 0 {
            self.host
                .metrics
                .add_plugin_counter(RECORDS_PROJECTED_AHEAD_COUNTER, found_by_source);
        }
        Ok(())
    }

    /// Sets each group's accumulator and rejected records from the
    /// plugin's answer to `call` (one `GroupAdded` per group).
    fn take_added(
        &self,
        groups: &mut [GroupAdd<'_>],
        output: &[u8],
        call: &str,
    ) -> Result<BatchAdd, AggregateError> {
        let decoded: Result<Vec<sluice_wire::GroupAdded<'_>>, _> =
            sluice_wire::decode_all(output).collect();
        let decoded = match decoded {
            Ok(decoded) if decoded.len() == groups.len() => decoded,
            Ok(decoded) if decoded.is_empty() => return Ok(BatchAdd::NotTaken),
            Ok(decoded) => {
                return Err(AggregateError(format!(
                    "aggregate plugin {} answered {} groups of {} in `{call}`",
                    self.host.component.label(),
                    decoded.len(),
                    groups.len()
                )));
            }
            Err(error) => {
                return Err(AggregateError(format!(
                    "aggregate plugin {} returned a malformed `{call}` output: {error}",
                    self.host.component.label()
                )));
            }
        };
        for (group, added) in groups.iter_mut().zip(decoded) {
            group.accumulator.clear();
            group.accumulator.extend_from_slice(added.accumulator);
            group.rejected = added
                .rejected
                .into_iter()
                .filter(|r| (r.index as usize) < group.records.len())
                .map(|r| (r.index as usize, r.reason.to_string()))
                .collect();
        }
        Ok(BatchAdd::Added)
    }
}

/// Appends the header and group table of a packed (`with_records`: each
/// group followed by its records) or projected aggregate input.
fn encode_groups(
    input: &mut Vec<u8>,
    version: u32,
    groups: &[GroupAdd<'_>],
    with_records: bool,
) -> Result<(), AggregateError> {
    let encode_error =
        |e: sluice_wire::Error| AggregateError(format!("cannot encode a packed batch: {e}"));
    let header = sluice_wire::AggregateBatch {
        version,
        groups: groups.len() as u32,
    };
    sluice_wire::append(input, &header).map_err(encode_error)?;
    for group in groups {
        let head = sluice_wire::AggregateGroup {
            accumulator: sluice_wire::Bytes::new(&group.accumulator),
            records: group.records.len() as u32,
        };
        sluice_wire::append(input, &head).map_err(encode_error)?;
        if with_records {
            for record in group.records {
                sluice_wire::append(input, &to_wire_record(record)).map_err(encode_error)?;
            }
        }
    }
    Ok(())
}

impl SwappablePlugin for PluginAggregator {
    fn running(&self) -> &Arc<PluginComponent> {
        &self.host.component
    }

    /// Accumulators stay in the window state: the new version must read
    /// the old version's accumulator format.
    fn swap_component(
        &mut self,
        component: Arc<PluginComponent>,
    ) -> Result<Arc<PluginComponent>, RuntimeError> {
        let previous = self.host.swap(component)?;
        // The new version names its own fields.
        self.projected_fields = None;
        Ok(previous)
    }
}

/// The steps of a window's aggregate (its `Aggregator` in
/// `crate::window::aggregate`, which delegates here).
impl PluginAggregator {
    /// A new, empty accumulator.
    pub fn create(&mut self) -> Result<Vec<u8>, AggregateError> {
        self.call_retrying("create", |b, store| b.create(store))
    }

    /// Adds `records` (all of one key and window) to `accumulator`;
    /// the records that could not be added, by index, with the reason.
    pub fn add(
        &mut self,
        accumulator: &mut Vec<u8>,
        records: &[&Record],
    ) -> Result<Vec<(usize, String)>, AggregateError> {
        let inputs: Vec<_> = records.iter().map(|r| to_wit_record(r)).collect();
        let batch = self.call(|b, store| b.add(store, accumulator, &inputs));
        if let Ok((added, rejected)) = batch {
            *accumulator = added;
            return Ok(rejected
                .into_iter()
                .map(|(index, reason)| (index as usize, reason))
                .collect());
        }
        // Record by record: only the records that fault alone are rejected.
        let mut rejected = Vec::new();
        for (index, input) in inputs.iter().enumerate() {
            let one = std::slice::from_ref(input);
            match self.call(|b, store| b.add(store, accumulator, one)) {
                Ok((added, refused)) => {
                    *accumulator = added;
                    if let Some((_, reason)) = refused.into_iter().next() {
                        rejected.push((index, reason));
                    }
                }
                Err(fault) => {
                    add(&self.host.metrics.faulted_records, 1);
                    rejected.push((index, fault));
                }
            }
        }
        Ok(rejected)
    }

    /// A batch's groups, in one call where the plugin can. An instance
    /// whose memory grew near its limit since its first batch is replaced
    /// first (the accumulators are the host's, so nothing is lost), as
    /// transforms are, rather than left to fail a batch at the limit.
    pub fn add_groups(&mut self, groups: &mut [GroupAdd<'_>]) -> Result<(), AggregateError> {
        if self.host.grew_near_memory_limit() {
            tracing::debug!(plugin = %self.host.component.label(),
                "aggregate plugin memory grew near its limit since its first batch; replacing the instance between batches");
            self.reinstantiate()?;
        }
        let mut added = self.add_projected(groups)?;
        if added == BatchAdd::NotTaken {
            added = self.add_packed(groups)?;
        }
        let result = match added {
            BatchAdd::Added => Ok(()),
            BatchAdd::NotTaken | BatchAdd::Faulted => self.add_group_by_group(groups),
        };
        if result.is_ok() {
            self.host.note_call_memory();
        }
        result
    }

    /// Combines two accumulators (of windows that merge).
    pub fn merge(&mut self, a: &[u8], b: &[u8]) -> Result<Vec<u8>, AggregateError> {
        self.call_retrying("merge", |bindings, store| bindings.merge(store, a, b))
    }

    /// The window's result.
    pub fn finish(&mut self, accumulator: &[u8]) -> Result<serde_json::Value, AggregateError> {
        let bytes = self.call_retrying("finish", |b, store| b.finish(store, accumulator))?;
        serde_json::from_slice(&bytes).map_err(|error| {
            AggregateError(format!(
                "aggregate plugin {} returned a result that is not JSON: {error}",
                self.host.component.label()
            ))
        })
    }

    /// [`Self::add_groups`] as one [`Self::add`] per group.
    fn add_group_by_group(&mut self, groups: &mut [GroupAdd<'_>]) -> Result<(), AggregateError> {
        for group in groups {
            group.rejected = self.add(&mut group.accumulator, group.records)?;
        }
        Ok(())
    }
}
