//! One plugin instance: a `Store` with its limits, and batch calls into it.

use super::batch_output::{
    Projection, bad_output, decode_output, decode_packed_output, latin1_bytes,
};
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
use sluice_wire::InputRecord;
use std::sync::Arc;
use std::time::Duration;
use typed::sluice::plugin::types as wit;
use wasmtime::{Store, Trap};

/// How batches cross the component boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallMode {
    /// The projected path when the plugin offers it (whether or not it
    /// names fields, ADR 0027), else packed, else typed.
    #[default]
    Auto,
    /// Always the typed `transformer.process-batch`.
    Typed,
    /// Always the packed exports, never projected batches:
    /// `packed-transformer.process-packed`, or
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
    /// fields the plugin reads, if it names any, found by the host) in, the
    /// packed result out as ISO-8859-1 text.
    Projected,
    /// `projected-packed-transformer.process-projected-packed`: a projected
    /// batch in, the packed result out as bytes.
    ProjectedPacked,
}

impl CallPath {
    /// The path a projected path falls back to for a plugin that does not
    /// read a batch's format version (itself for the others).
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

impl std::error::Error for PluginFault {}

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
        (CallMode::Packed, _) if component.pre.packed.is_some() => Ok(CallPath::Packed),
        (CallMode::Packed, _) if component.pre.text_packed.is_some() => Ok(CallPath::TextPacked),
        (CallMode::Packed, _) => Err(RuntimeError::Instantiate {
            plugin: component.label(),
            message: "call_mode = \"packed\" but the plugin exports neither sluice:plugin/packed-transformer nor sluice:plugin/text-packed-transformer".into(),
        }),
        (CallMode::Auto, offered) => Ok(offered),
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

    /// The export batches go through (a `projected-packed-transformer`
    /// plugin that names no fields shows `Packed` once its first batch has
    /// asked; a plugin that does not read projected batches shows
    /// `TextPacked` or `Packed` after its first).
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
        // A plugin that names no fields gets projected batches all the same
        // (no slots for fields, no value scanned): fixed-width tables read
        // in place cost less than decoding postcard records or lifting a
        // typed list (ADR 0027).
        self.projected_fields()?;
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
            // A plugin that does not read this format version (or these
            // fields): the path without projection from now on.
            self.path = self.path.without_projection();
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
        CallLimits::new(
            limits.memory_bytes,
            component.runtime.epoch_tick(),
            component.runtime.epoch_ticker(),
        )
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
