//! One plugin instance: a `Store` with its limits, and batch calls into it.

use super::bindings::{fast, fast_projected, projected, text, typed};
use super::component::PluginComponent;
use super::host_api::PluginState;
use super::limits::{CallLimits, Stopped};
use super::plugin_host::{HostedWorld, PluginHost, SwappablePlugin};
use super::{PluginLimits, RuntimeError};
use crate::metrics::{FaultKind, OperatorMetrics};
use crate::record::{Header, Record};
use crate::state::{OperatorScope, ScopedState, StateStore, key_group};
use bytes::Bytes;
use sluice_wire::projected::same_name;
use sluice_wire::{InputRecord, OutputItem, Route};
use std::sync::Arc;
use std::time::Duration;
use typed::sluice::plugin::types as wit;
use wasmtime::{Store, Trap};

/// How batches cross the component boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallMode {
    /// Packed when the plugin offers it, typed otherwise.
    #[default]
    Auto,
    /// Always the typed `transformer.process-batch`.
    Typed,
    /// Always a packed result: `packed-transformer.process-packed`, or
    /// `text-packed-transformer.process-batch-text` (load fails if the
    /// plugin offers neither).
    Packed,
}

/// The export a batch call goes through (see [`CallMode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPath {
    /// `transformer.process-batch`: typed records both ways.
    Typed,
    /// `packed-transformer.process-packed`: one buffer each way.
    Packed,
    /// `text-packed-transformer.process-batch-text`: typed records in, the
    /// packed result out as ISO-8859-1 text.
    TextPacked,
    /// `projected-transformer.process-projected`: a projected batch (the
    /// fields the plugin reads found by the host) in, the packed result out
    /// as ISO-8859-1 text; `TextPacked` when the plugin names no fields.
    Projected,
    /// `projected-packed-transformer.process-projected-packed`: a projected
    /// batch in, the packed result out as bytes; `Packed` when the plugin
    /// names no fields.
    ProjectedPacked,
}

impl CallPath {
    /// The path a projected path falls back to for a plugin that names no
    /// fields or does not read a batch's format version (itself for the
    /// others).
    fn without_projection(self) -> CallPath {
        match self {
            CallPath::Projected => CallPath::TextPacked,
            CallPath::ProjectedPacked => CallPath::Packed,
            other => other,
        }
    }
}

/// Where an emitted record goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmitRoute {
    /// The main output.
    Main,
    /// A named side output.
    Side(String),
    /// The dead-letter output, with the plugin's reason.
    DeadLetter(String),
}

/// Where a record a plugin emitted came from and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emit {
    /// Index of the input record in the batch.
    pub input: usize,
    /// Where it goes.
    pub route: EmitRoute,
}

/// A record emitted by a plugin for input record `input`, as
/// [`BatchResult::emitted`] shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Emitted<'r> {
    /// Index of the input record in the batch.
    pub input: usize,
    /// Where it goes.
    pub route: &'r EmitRoute,
    /// The record; its source position and (unless the plugin set one) its
    /// event time are the input record's.
    pub record: &'r Record,
}

/// What a batch call produced.
///
/// The emitted records are one list and what each is for another, so
/// that a batch whose records all go to the main output is handed on as
/// the list it is, without moving each record out of a wrapper (moving
/// record structs was ~7 % of a cheap plugin's run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchResult {
    /// Emitted records, grouped by input record in input order.
    pub records: Vec<Record>,
    /// For each of `records` (same index): its input and its route.
    pub emits: Vec<Emit>,
    /// Input records the plugin failed, with its reason.
    pub failed: Vec<(usize, String)>,
}

impl BatchResult {
    /// Adds a record emitted for input `input`.
    pub fn push(&mut self, input: usize, route: EmitRoute, record: Record) {
        self.records.push(record);
        self.emits.push(Emit { input, route });
    }

    /// Each emitted record with its input and route, in order.
    pub fn emitted(&self) -> impl Iterator<Item = Emitted<'_>> {
        self.emits
            .iter()
            .zip(&self.records)
            .map(|(emit, record)| Emitted {
                input: emit.input,
                route: &emit.route,
                record,
            })
    }

    /// Whether the plugin emitted no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// Why a call did not complete. After a fault the instance is poisoned and
/// must be re-created with [`PluginInstance::reinstantiate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginFault {
    /// The kind of fault.
    pub kind: FaultKind,
    /// A one-line description, fit for a dead-letter reason.
    pub message: String,
}

impl std::fmt::Display for PluginFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The exports of one instance: the typed transformer always, the packed
/// one for `fast-transform` plugins, the text-packed one for
/// `text-transform` plugins, the projected ones for `projected-transform`
/// and `fast-projected-transform` plugins.
pub(crate) struct Bindings {
    typed: typed::Transform,
    fast: Option<fast::FastTransform>,
    text: Option<text::TextTransform>,
    projected: Option<projected::ProjectedTransform>,
    projected_packed: Option<fast_projected::FastProjectedTransform>,
}

/// The transform world: `sluice:plugin/transformer`, plus the packed
/// path when the component exports it.
pub(crate) struct TransformWorld;

impl HostedWorld for TransformWorld {
    type Exports = Bindings;

    fn check(component: &PluginComponent) -> Result<(), String> {
        match component.pre.transformer {
            Some(_) => Ok(()),
            None => Err("not a transform plugin (it implements the aggregate world: use it as a window operator's plugin)".into()),
        }
    }

    fn load(
        component: &PluginComponent,
        store: &mut Store<PluginState>,
        instance: &wasmtime::component::Instance,
    ) -> wasmtime::Result<Bindings> {
        let pre = &component.pre;
        let typed = match &pre.transformer {
            Some(indices) => indices.load(&mut *store, instance)?,
            None => return Err(wasmtime::Error::msg("not a transform plugin")),
        };
        let fast = match &pre.packed {
            Some(indices) => Some(indices.load(&mut *store, instance)?),
            None => None,
        };
        let text = match &pre.text_packed {
            Some(indices) => Some(indices.load(&mut *store, instance)?),
            None => None,
        };
        let projected = match &pre.projected {
            Some(indices) => Some(indices.load(&mut *store, instance)?),
            None => None,
        };
        let projected_packed = match &pre.projected_packed {
            Some(indices) => Some(indices.load(&mut *store, instance)?),
            None => None,
        };
        Ok(Bindings {
            typed,
            fast,
            text,
            projected,
            projected_packed,
        })
    }

    fn init(
        exports: &Bindings,
        store: &mut Store<PluginState>,
        config: &[(String, String)],
    ) -> wasmtime::Result<Result<(), String>> {
        exports
            .typed
            .sluice_plugin_transformer()
            .call_init(store, config)
    }
}

/// The path `component` is called through under `mode`.
fn choose_path(component: &PluginComponent, mode: CallMode) -> Result<CallPath, RuntimeError> {
    let offered = if component.pre.projected_packed.is_some() {
        CallPath::ProjectedPacked
    } else if component.pre.packed.is_some() {
        CallPath::Packed
    } else if component.pre.projected.is_some() {
        CallPath::Projected
    } else if component.pre.text_packed.is_some() {
        CallPath::TextPacked
    } else {
        CallPath::Typed
    };
    match (mode, offered) {
        (CallMode::Typed, _) => Ok(CallPath::Typed),
        (CallMode::Packed, CallPath::Typed) => Err(RuntimeError::Instantiate {
            plugin: component.label(),
            message: "call_mode = \"packed\" but the plugin exports neither sluice:plugin/packed-transformer nor sluice:plugin/text-packed-transformer".into(),
        }),
        (CallMode::Auto | CallMode::Packed, offered) => Ok(offered),
    }
}

/// A live plugin instance serving one operator.
pub struct PluginInstance {
    host: PluginHost<TransformWorld>,
    path: CallPath,
    packed_input: Vec<u8>,
    /// The fields a projected-path plugin reads (asked once: at
    /// [`PluginInstance::projects_fields`] or on its first batch).
    projected_fields: Option<Arc<[String]>>,
    /// One record's field slots (reused).
    field_slots: Vec<sluice_wire::projected::FieldSlot>,
    /// The field slots of the batch being called, record after record
    /// (reused): where the host's splice finds a replaced field.
    batch_slots: Vec<sluice_wire::projected::FieldSlot>,
}

impl PluginInstance {
    /// Flushes the plugin's keyed state to disk and measures it (at a
    /// checkpoint barrier).
    pub fn flush_state(&self) -> Result<crate::state::StateUsage, crate::state::StateError> {
        self.host.state.flush_and_measure()
    }

    /// Instantiates `component` for the operator `scope`, whose state is
    /// `state_store` (opened for that scope), and calls its `init` with
    /// `config`.
    pub fn new(
        component: Arc<PluginComponent>,
        scope: OperatorScope,
        state_store: Arc<dyn StateStore>,
        metrics: Arc<OperatorMetrics>,
        limits: PluginLimits,
        config: Vec<(String, String)>,
    ) -> Result<Self, RuntimeError> {
        let path = choose_path(&component, limits.call_mode)?;
        let state = ScopedState::new(state_store, key_group::DEFAULT_MAX_PARALLELISM);
        Ok(PluginInstance {
            host: PluginHost::new(component, scope, state, metrics, limits, config)?,
            path,
            packed_input: Vec::new(),
            projected_fields: None,
            field_slots: Vec::new(),
            batch_slots: Vec::new(),
        })
    }

    /// The component this instance runs.
    pub fn component(&self) -> &Arc<PluginComponent> {
        &self.host.component
    }

    /// The export batches go through (a projected-path plugin that names
    /// no fields shows `TextPacked` or `Packed` once its first batch has
    /// asked).
    pub fn call_path(&self) -> CallPath {
        self.path
    }

    /// Replaces the instance with a fresh one (same component, config,
    /// limits and state scope). Needed after any [`PluginFault`].
    pub fn reinstantiate(&mut self) -> Result<(), RuntimeError> {
        self.host.reinstantiate()
    }

    /// Whether the instance's linear memory has grown past three quarters
    /// of its limit since its first batch, so that it is better replaced
    /// between batches ([`PluginInstance::reinstantiate`]) than left to
    /// fail a batch at its limit (see `PluginHost::grew_near_memory_limit`).
    pub fn grew_near_memory_limit(&self) -> bool {
        self.host.grew_near_memory_limit()
    }

    /// Runs the plugin on `records`, within the CPU deadline and memory limit.
    pub fn call_batch(&mut self, records: &[Record]) -> Result<BatchResult, PluginFault> {
        start_call(&mut self.host.store, self.host.limits.deadline);
        self.host.store.data().stderr.clear_recent();
        let result = match self.path {
            CallPath::Packed => self.call_packed(records),
            CallPath::TextPacked => self.call_text_packed(records),
            CallPath::Projected | CallPath::ProjectedPacked => self.call_projected(records),
            CallPath::Typed => self.call_typed(records),
        };
        end_call(&mut self.host.store);
        if result.is_ok() {
            self.host.note_call_memory();
        }
        let state = self.host.store.data_mut();
        let result = match result {
            Ok(result) => state.commit_state().map(|()| result).map_err(|error| {
                state.state_error = Some(error.clone());
                PluginFault {
                    kind: FaultKind::State,
                    message: error.to_string(),
                }
            }),
            Err(fault) => {
                state.discard_state();
                Err(fault)
            }
        };
        result.map_err(|mut fault| {
            if let Some(error) = self.host.store.data_mut().state_error.take() {
                return PluginFault {
                    kind: FaultKind::State,
                    message: error.to_string(),
                };
            }
            // What the plugin printed before it trapped (a panic message,
            // a traceback) says more than the trap itself.
            let printed = self.host.store.data().stderr.recent();
            if fault.kind == FaultKind::Trap && !printed.is_empty() {
                fault.message = format!("{} (plugin stderr: {printed})", fault.message);
            }
            fault
        })
    }

    fn call_packed(&mut self, records: &[Record]) -> Result<BatchResult, PluginFault> {
        let Some(bindings) = &self.host.exports.fast else {
            return Err(bad_output(
                "packed call on a plugin without the packed export".into(),
            ));
        };
        self.packed_input.clear();
        for record in records {
            sluice_wire::append(&mut self.packed_input, &to_wire_record(record))
                .map_err(|e| bad_output(format!("cannot encode batch: {e}")))?;
        }
        let output = bindings
            .sluice_plugin_packed_transformer()
            .call_process_packed(&mut self.host.store, &self.packed_input)
            .map_err(|error| classify(error, &self.host.store, &self.host.limits))?;
        decode_packed_output(Bytes::from(output), records)
    }

    fn call_text_packed(&mut self, records: &[Record]) -> Result<BatchResult, PluginFault> {
        let Some(bindings) = &self.host.exports.text else {
            return Err(bad_output(
                "text-packed call on a plugin without the text-packed export".into(),
            ));
        };
        let batch: Vec<wit::InputRecord> = records.iter().map(to_wit_record).collect();
        let output = bindings
            .sluice_plugin_text_packed_transformer()
            .call_process_batch_text(&mut self.host.store, &batch)
            .map_err(|error| classify(error, &self.host.store, &self.host.limits))?;
        let output = latin1_bytes(output).map_err(bad_output)?;
        decode_packed_output(Bytes::from(output), records)
    }

    /// The path taken when the projected path is not (the plugin names no
    /// fields, or does not read the batch's format version).
    fn call_without_projection(&mut self, records: &[Record]) -> Result<BatchResult, PluginFault> {
        match self.path.without_projection() {
            CallPath::Packed => self.call_packed(records),
            _ => self.call_text_packed(records),
        }
    }

    /// The fields the plugin reads, asked through its projected export on
    /// the first batch.
    fn projected_fields(&mut self) -> Result<&[String], PluginFault> {
        if self.projected_fields.is_none() {
            let exports = &self.host.exports;
            let store = &mut self.host.store;
            let asked = match (&exports.projected_packed, &exports.projected) {
                (Some(bindings), _) => bindings
                    .sluice_plugin_projected_packed_transformer()
                    .call_projected_fields(&mut *store),
                (None, Some(bindings)) => bindings
                    .sluice_plugin_projected_transformer()
                    .call_projected_fields(&mut *store),
                (None, None) => {
                    return Err(bad_output(
                        "projected call on a plugin without a projected export".into(),
                    ));
                }
            };
            let fields = asked.map_err(|error| classify(error, store, &self.host.limits))?;
            self.projected_fields = Some(Arc::from(fields));
        }
        Ok(self.projected_fields.as_deref().unwrap_or_default())
    }

    /// The top-level JSON fields the plugin reads on the projected path,
    /// asked now (within the call deadline) if not yet. `None`: not a
    /// projected-path plugin, or it names none, or asking faulted (the
    /// instance is then replaced, and its first batch asks again and
    /// reports the fault). The source before it can find them in its own
    /// pass ([`crate::dataflow::Operator::projects_fields`]).
    pub fn projects_fields(&mut self) -> Option<Arc<[String]>> {
        if !matches!(self.path, CallPath::Projected | CallPath::ProjectedPacked) {
            return None;
        }
        if self.projected_fields.is_none() {
            start_call(&mut self.host.store, self.host.limits.deadline);
            let asked = self.projected_fields().map(|_| ());
            end_call(&mut self.host.store);
            if asked.is_err() {
                // A fault poisons the instance.
                let _ = self.reinstantiate();
                return None;
            }
        }
        self.projected_fields
            .clone()
            .filter(|fields| !fields.is_empty())
    }

    fn call_projected(&mut self, records: &[Record]) -> Result<BatchResult, PluginFault> {
        use sluice_wire::projected::ProjectedBatchWriter;
        if self.projected_fields()?.is_empty() {
            // The plugin reads no fields: the path without projection from
            // now on.
            self.path = self.path.without_projection();
            return self.call_without_projection(records);
        }
        if records.is_empty() {
            return self.call_without_projection(records);
        }
        let fields = self.projected_fields.as_deref().unwrap_or_default();
        let mut writer =
            ProjectedBatchWriter::begin(&mut self.packed_input, records.len(), fields.len())
                .map_err(|e| bad_output(format!("cannot encode batch: {e}")))?;
        self.batch_slots.clear();
        for record in records {
            super::projection::record_slots(record, fields, &mut self.field_slots);
            writer
                .push(&to_wire_record(record), &self.field_slots)
                .map_err(|e| bad_output(format!("cannot encode batch: {e}")))?;
            self.batch_slots.extend_from_slice(&self.field_slots);
        }
        let exports = &self.host.exports;
        let store = &mut self.host.store;
        let output = match (self.path, &exports.projected_packed, &exports.projected) {
            (CallPath::ProjectedPacked, Some(bindings), _) => bindings
                .sluice_plugin_projected_packed_transformer()
                .call_process_projected_packed(&mut *store, &self.packed_input)
                .map_err(|error| classify(error, store, &self.host.limits))?,
            (_, _, Some(bindings)) => {
                let text = bindings
                    .sluice_plugin_projected_transformer()
                    .call_process_projected(&mut *store, &self.packed_input)
                    .map_err(|error| classify(error, store, &self.host.limits))?;
                latin1_bytes(text).map_err(bad_output)?
            }
            _ => {
                return Err(bad_output(
                    "projected call on a plugin without a projected export".into(),
                ));
            }
        };
        if output.is_empty() {
            // A plugin that does not read this format version.
            return self.call_without_projection(records);
        }
        let projection = Projection {
            fields,
            slots: &self.batch_slots,
        };
        decode_output(Bytes::from(output), records, Some(projection))
    }

    fn call_typed(&mut self, records: &[Record]) -> Result<BatchResult, PluginFault> {
        let batch: Vec<wit::InputRecord> = records.iter().map(to_wit_record).collect();
        let outcomes = self
            .host
            .exports
            .typed
            .sluice_plugin_transformer()
            .call_process_batch(&mut self.host.store, &batch)
            .map_err(|error| classify(error, &self.host.store, &self.host.limits))?;
        if outcomes.len() != records.len() {
            return Err(bad_output(format!(
                "plugin returned {} outcomes for {} records",
                outcomes.len(),
                records.len()
            )));
        }
        let mut result = BatchResult::default();
        for (index, (outcome, input)) in outcomes.into_iter().zip(records).enumerate() {
            match outcome {
                Err(reason) => result.failed.push((index, reason)),
                Ok(emits) => {
                    for emit in emits {
                        let route = match emit.route {
                            wit::Route::Main => EmitRoute::Main,
                            wit::Route::Side(name) => EmitRoute::Side(name),
                            wit::Route::DeadLetter(reason) => EmitRoute::DeadLetter(reason),
                        };
                        let out = emit.record;
                        result.push(
                            index,
                            route,
                            Record {
                                read_fields: None,
                                key: out.key.map(Bytes::from),
                                value: Bytes::from(out.value),
                                headers: out
                                    .headers
                                    .into_iter()
                                    .map(|h| Header::new(h.key, h.value))
                                    .collect(),
                                event_time: out.event_time.or(input.event_time),
                                source: input.source.clone(),
                            },
                        );
                    }
                }
            }
        }
        Ok(result)
    }
}

/// A store for one instance of `component`, with its memory limit, CPU
/// budget and host state.
pub(crate) fn new_store(
    component: &PluginComponent,
    scope: &OperatorScope,
    state: &ScopedState,
    metrics: &Arc<OperatorMetrics>,
    limits: &PluginLimits,
) -> Store<PluginState> {
    let data = PluginState::new(
        scope.clone(),
        state.clone(),
        metrics.clone(),
        CallLimits::new(limits.memory_bytes, component.runtime.epoch_tick())
            .with_cpu_share(component.runtime.cpu_share(&scope.tenant)),
        limits.grant_clock,
    );
    let mut store = Store::new(component.runtime.engine(), data);
    store.limiter(|state| &mut state.limits);
    store.epoch_deadline_callback(|mut store| Ok(store.data_mut().limits.on_epoch_deadline()));
    store
}

/// Starts a call into `store` that may use `budget` of CPU time, once the
/// tenant is within its CPU share (the wait counts as throttled time).
pub(crate) fn start_call(store: &mut Store<PluginState>, budget: Duration) {
    let waited = store.data().limits.wait_turn();
    if !waited.is_zero() {
        crate::metrics::add(
            &store.data().metrics.cpu_throttled_ns,
            waited.as_nanos() as u64,
        );
    }
    let ticks = store.data_mut().limits.start_call(budget);
    store.set_epoch_deadline(ticks);
}

/// Ends a call started with [`start_call`]: charges its CPU time to the
/// tenant's share.
pub(crate) fn end_call(store: &mut Store<PluginState>) {
    let data = store.data_mut();
    let (took, memory) = data.limits.end_call();
    crate::metrics::add(&data.metrics.plugin_calls, 1);
    data.metrics.plugin_call_seconds.observe(took);
    data.metrics
        .plugin_memory_bytes
        .store(memory as u64, std::sync::atomic::Ordering::Relaxed);
}

/// [`classify`] for instantiation and `init`, whose CPU budget is
/// `limits.init_deadline`.
pub(crate) fn init_fault(
    error: wasmtime::Error,
    store: &Store<PluginState>,
    limits: &PluginLimits,
) -> PluginFault {
    let mut fault = classify(error, store, limits);
    if fault.kind == FaultKind::Deadline {
        fault.message = format!(
            "instantiation and init used their CPU budget of {} ms and were interrupted",
            limits.init_deadline.as_millis()
        );
    }
    fault
}

/// `record` as the packed formats carry it (borrowing from it).
pub(crate) fn to_wire_record(record: &Record) -> InputRecord<'_> {
    InputRecord {
        key: record.key.as_deref().map(sluice_wire::Bytes::new),
        value: sluice_wire::Bytes::new(&record.value),
        headers: record
            .headers
            .iter()
            .map(|h| sluice_wire::Header {
                key: &h.key,
                value: sluice_wire::Bytes::new(&h.value),
            })
            .collect(),
        event_time: record.event_time,
        topic: sluice_wire::Bytes::new(record.source.topic.as_bytes()),
        partition: record.source.partition,
        offset: record.source.offset,
    }
}

/// `record` as the typed interfaces carry it (copied).
pub(crate) fn to_wit_record(record: &Record) -> wit::InputRecord {
    wit::InputRecord {
        key: record.key.as_ref().map(|k| k.to_vec()),
        value: record.value.to_vec(),
        headers: record
            .headers
            .iter()
            .map(|h| wit::Header {
                key: h.key.clone(),
                value: h.value.to_vec(),
            })
            .collect(),
        event_time: record.event_time,
        source: wit::SourcePosition {
            topic: record.source.topic.to_string(),
            partition: record.source.partition,
            offset: record.source.offset,
        },
    }
}

/// The bytes an ISO-8859-1 string stands for (one byte per character
/// U+0000-U+00FF), as `text-packed-transformer` returns them; pure ASCII,
/// the common case, is taken as it is.
pub(crate) fn latin1_bytes(text: String) -> Result<Vec<u8>, String> {
    if text.is_ascii() {
        return Ok(text.into_bytes());
    }
    text.chars()
        .map(|c| {
            u8::try_from(u32::from(c)).map_err(|_| {
                format!(
                    "packed text output holds U+{:04X}, beyond U+00FF (one byte per character)",
                    u32::from(c)
                )
            })
        })
        .collect()
}

/// Turns a packed output buffer into emitted records that share the buffer,
/// enforcing the contract of the packed format: items name inputs in
/// range and in input order, and each input has either emits or one
/// failure, never both and never two failures.
fn decode_packed_output(output: Bytes, inputs: &[Record]) -> Result<BatchResult, PluginFault> {
    decode_output(output, inputs, None)
}

/// The fields a projected batch carried and where they were found in each
/// input (record after record, `fields.len()` slots each).
struct Projection<'p> {
    fields: &'p [String],
    slots: &'p [sluice_wire::projected::FieldSlot],
}

impl Projection<'_> {
    /// Where the projection found `field` in input `input`, if it was
    /// projected.
    fn slot(&self, input: usize, field: &str) -> Option<sluice_wire::projected::FieldSlot> {
        let index = self.fields.iter().position(|name| same_name(name, field))?;
        self.slots.get(input * self.fields.len() + index).copied()
    }
}

/// [`decode_packed_output`] for the output of a projected batch, whose
/// replacing emits splice where the projection found the field.
fn decode_output(
    output: Bytes,
    inputs: &[Record],
    projection: Option<Projection<'_>>,
) -> Result<BatchResult, PluginFault> {
    let mut result = BatchResult::default();
    // Most plugins emit about one record per input: sized once rather than
    // grown by doubling (each step copying every emit so far).
    result.records.reserve(inputs.len());
    result.emits.reserve(inputs.len());
    let mut contract = OutputContract::default();
    // The values of replacing emits, one after another in one buffer per
    // batch; each record's value is set to its slice once all are written.
    let mut spliced = Vec::new();
    let mut spliced_ranges: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
    for item in sluice_wire::decode_output_items(&output) {
        let item = item.map_err(|e| bad_output(format!("malformed packed output: {e}")))?;
        let input_of = |index: u32| {
            inputs.get(index as usize).ok_or_else(|| {
                bad_output(format!(
                    "output names input record {index} of a batch of {}",
                    inputs.len()
                ))
            })
        };
        match item {
            OutputItem::EmitReplacing { input, field, json } => {
                let source = input_of(input)?;
                contract.emitted(input)?;
                let known = projection
                    .as_ref()
                    .and_then(|projection| projection.slot(input as usize, field));
                if spliced.is_empty() {
                    // About one value per input, each about as long.
                    let input_bytes: usize = inputs.iter().map(|input| input.value.len()).sum();
                    spliced.reserve(input_bytes + input_bytes / 8);
                }
                let start = spliced.len();
                sluice_json::projection::replace_field_into(
                    &source.value,
                    field,
                    json,
                    known,
                    &mut spliced,
                )
                .map_err(|reason| bad_output(format!("input record {input}: {reason}")))?;
                spliced_ranges.push((result.records.len(), start..spliced.len()));
                result.push(
                    input as usize,
                    EmitRoute::Main,
                    Record {
                        read_fields: None,
                        key: source.key.clone(),
                        value: Bytes::new(),
                        headers: source.headers.clone(),
                        event_time: source.event_time,
                        source: source.source.clone(),
                    },
                );
            }
            OutputItem::NoEmits { input } => {
                input_of(input)?;
                contract.no_emits(input)?;
            }
            OutputItem::Failed { input, reason } => {
                input_of(input)?;
                contract.failed(input)?;
                result.failed.push((input as usize, reason.to_string()));
            }
            OutputItem::Emit {
                input,
                route,
                record,
            } => {
                let source = input_of(input)?;
                contract.emitted(input)?;
                let route = match route {
                    Route::Main => EmitRoute::Main,
                    Route::Side(name) => EmitRoute::Side(name.to_string()),
                    Route::DeadLetter(reason) => EmitRoute::DeadLetter(reason.to_string()),
                };
                result.push(
                    input as usize,
                    route,
                    Record {
                        read_fields: None,
                        key: record.key.map(|k| output.slice_ref(k)),
                        value: output.slice_ref(record.value),
                        headers: record
                            .headers
                            .iter()
                            .map(|h| Header::new(h.key, output.slice_ref(h.value)))
                            .collect(),
                        event_time: record.event_time.or(source.event_time),
                        source: source.source.clone(),
                    },
                );
            }
        }
    }
    let spliced = Bytes::from(spliced);
    for (emitted, range) in spliced_ranges {
        result.records[emitted].value = spliced.slice(range);
    }
    Ok(result)
}

/// What the packed output said so far about the input it is at.
#[derive(Debug, Default)]
struct OutputContract {
    /// The input the last item named, if any.
    current: Option<u32>,
    /// Whether that input has emits.
    emitted: bool,
    /// Whether that input failed.
    failed: bool,
}

impl OutputContract {
    /// Moves to `input`, refusing to go back.
    fn at(&mut self, input: u32) -> Result<(), PluginFault> {
        match self.current {
            Some(current) if input < current => Err(bad_output(format!(
                "output items out of order: input record {input} after input record {current}"
            ))),
            Some(current) if input == current => Ok(()),
            _ => {
                *self = OutputContract {
                    current: Some(input),
                    emitted: false,
                    failed: false,
                };
                Ok(())
            }
        }
    }

    fn failed(&mut self, input: u32) -> Result<(), PluginFault> {
        self.at(input)?;
        if self.failed {
            return Err(bad_output(format!("two failures for input record {input}")));
        }
        if self.emitted {
            return Err(bad_output(format!(
                "input record {input} both emitted records and failed"
            )));
        }
        self.failed = true;
        Ok(())
    }

    /// `input` said it emitted nothing: it must not have emitted or
    /// failed already.
    fn no_emits(&mut self, input: u32) -> Result<(), PluginFault> {
        self.at(input)?;
        if self.failed || self.emitted {
            return Err(bad_output(format!(
                "input record {input} said it emitted nothing after emitting or failing"
            )));
        }
        Ok(())
    }

    fn emitted(&mut self, input: u32) -> Result<(), PluginFault> {
        self.at(input)?;
        if self.failed {
            return Err(bad_output(format!(
                "input record {input} both failed and emitted records"
            )));
        }
        self.emitted = true;
        Ok(())
    }
}

fn bad_output(message: String) -> PluginFault {
    PluginFault {
        kind: FaultKind::BadOutput,
        message,
    }
}

/// Describes a failed call in one line and says what kind of fault it was:
/// by the limit the store recorded as stopping it, else by the trap code.
pub(crate) fn classify(
    error: wasmtime::Error,
    store: &Store<PluginState>,
    limits: &PluginLimits,
) -> PluginFault {
    let stopped = store.data().limits.stopped;
    if stopped == Some(Stopped::CpuBudget) || error.downcast_ref::<Trap>() == Some(&Trap::Interrupt)
    {
        return PluginFault {
            kind: FaultKind::Deadline,
            message: format!(
                "plugin exceeded its CPU deadline of {} ms and was interrupted",
                limits.deadline.as_millis()
            ),
        };
    }
    if stopped == Some(Stopped::MemoryLimit) {
        return PluginFault {
            kind: FaultKind::MemoryLimit,
            message: format!(
                "plugin exceeded its memory limit of {} MiB",
                limits.memory_bytes >> 20
            ),
        };
    }
    let cause = match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => error.root_cause().to_string(),
    };
    PluginFault {
        kind: FaultKind::Trap,
        message: format!("plugin trapped: {cause}"),
    }
}

impl SwappablePlugin for PluginInstance {
    fn running(&self) -> &Arc<PluginComponent> {
        &self.host.component
    }

    /// The call path (packed, text-packed or typed) is chosen again for the
    /// new component.
    fn swap_component(
        &mut self,
        component: Arc<PluginComponent>,
    ) -> Result<Arc<PluginComponent>, RuntimeError> {
        let path = choose_path(&component, self.host.limits.call_mode)?;
        let previous = self.host.swap(component)?;
        self.path = path;
        self.projected_fields = None;
        Ok(previous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SourcePosition;
    use proptest::prelude::*;
    use sluice_wire::OutputRecord;

    #[test]
    fn latin1_text_stands_for_bytes() {
        assert_eq!(latin1_bytes("ab".into()).unwrap(), b"ab");
        let every_byte: String = (0u8..=255).map(char::from).collect();
        assert_eq!(
            latin1_bytes(every_byte).unwrap(),
            (0u8..=255).collect::<Vec<u8>>()
        );
        assert!(latin1_bytes("€".into()).unwrap_err().contains("U+20AC"));
    }

    fn inputs(count: usize) -> Vec<Record> {
        (0..count)
            .map(|i| {
                Record::from_value(
                    format!("{i}").into_bytes(),
                    SourcePosition {
                        topic: "t".into(),
                        partition: 0,
                        offset: i as i64,
                    },
                )
            })
            .collect()
    }

    fn emit(input: u32) -> OutputItem<'static> {
        OutputItem::Emit {
            input,
            route: Route::Main,
            record: OutputRecord {
                key: None,
                value: sluice_wire::Bytes::new(b"x"),
                headers: Vec::new(),
                event_time: None,
            },
        }
    }

    fn failed(input: u32) -> OutputItem<'static> {
        OutputItem::Failed {
            input,
            reason: "no",
        }
    }

    fn decode(items: &[OutputItem<'_>], batch: usize) -> Result<BatchResult, PluginFault> {
        let mut buffer = Vec::new();
        for item in items {
            sluice_wire::append(&mut buffer, item).expect("encode");
        }
        decode_packed_output(Bytes::from(buffer), &inputs(batch))
    }

    #[test]
    fn packed_output_that_keeps_the_contract_is_accepted() {
        let result = decode(&[emit(0), emit(0), failed(1), emit(3)], 4).expect("valid");
        assert_eq!(result.emitted().count(), 3);
        assert_eq!(result.failed, vec![(1, "no".to_string())]);
        // Saying an input emitted nothing changes nothing.
        let no_emits = |input| OutputItem::NoEmits { input };
        let result = decode(&[no_emits(0), emit(1), no_emits(3)], 4).expect("valid");
        assert_eq!(result.emitted().count(), 1);
        assert!(result.failed.is_empty());
    }

    #[test]
    fn each_contract_violation_is_a_bad_output_fault() {
        for (items, says) in [
            (
                vec![failed(0), failed(0)],
                "two failures for input record 0",
            ),
            (vec![emit(1), failed(1)], "both emitted records and failed"),
            (vec![failed(1), emit(1)], "both failed and emitted records"),
            (vec![emit(2), emit(1)], "out of order"),
            (vec![emit(5)], "input record 5 of a batch of 3"),
            (
                vec![emit(1), OutputItem::NoEmits { input: 1 }],
                "said it emitted nothing after emitting",
            ),
            (
                vec![failed(0), OutputItem::NoEmits { input: 0 }],
                "said it emitted nothing after emitting or failing",
            ),
            (vec![OutputItem::NoEmits { input: 3 }], "input record 3"),
        ] {
            let fault = decode(&items, 3).expect_err(says);
            assert_eq!(fault.kind, FaultKind::BadOutput);
            assert!(fault.message.contains(says), "{}", fault.message);
        }
    }

    proptest! {
        /// Whatever bytes a plugin returns, decoding them either fails with
        /// a bad-output fault or yields a result within the contract; it
        /// never panics.
        #[test]
        fn arbitrary_packed_output_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512), batch in 0usize..8) {
            match decode_packed_output(Bytes::from(bytes), &inputs(batch)) {
                Ok(result) => {
                    let mut failed = std::collections::BTreeSet::new();
                    for (index, _) in &result.failed {
                        prop_assert!(*index < batch);
                        prop_assert!(failed.insert(*index), "two failures");
                    }
                    for emitted in result.emitted() {
                        prop_assert!(emitted.input < batch);
                        prop_assert!(!failed.contains(&emitted.input));
                    }
                }
                Err(fault) => prop_assert_eq!(fault.kind, FaultKind::BadOutput),
            }
        }
    }
}
