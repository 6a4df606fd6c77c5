//! The window operator: per key and window, an accumulator in state; fired
//! by the watermark; allowed lateness; late output.

mod add;
mod fire;
mod timing;

use crate::dataflow::swap::SwapPort;
use crate::dataflow::{CheckpointBarrier, Collector, DataflowError, LateOutput, Operator};
use crate::metrics::{DeadLetterClass, OperatorMetrics};
use crate::record::{Record, Topic};
use crate::state::key_group::{DEFAULT_MAX_PARALLELISM, KeyGroupRange};
use crate::state::{StateError, StateStore};
use crate::time::checked_event_time;
use crate::window::aggregate::{AggregateError, Aggregator};
use crate::window::key::WindowKey;
use crate::window::output::WindowOutput;
use crate::window::states::{WindowState, WindowStates};
use crate::window::{Window, WindowSpec};
use serde::{Deserialize, Serialize};
use sluice_json::fields::{FieldPath, FieldValue, extract_into};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;
use timing::{TimerKind, WindowTimers};

/// Settings of a [`WindowOperator`] (start from
/// [`WindowOperatorOptions::new`]: fields may be added).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WindowOperatorOptions {
    /// Operator name.
    pub name: String,
    /// How event time is cut into windows.
    pub spec: WindowSpec,
    /// How long after a window fired late records still update it, ms.
    pub allowed_lateness: i64,
    /// Field holding the key (`user`, `a.b`, `/a/b`); `None`: the record key
    /// (records without one share the empty key).
    pub key_field: Option<String>,
    /// SQL's `GROUP BY` keys, in place of `key_field`: the key is these
    /// fields' values together, a missing one as `NULL` (a group of its
    /// own); the result's `key` is the array of them.
    pub key_columns: Option<Vec<FieldPath>>,
    /// Where records later than the allowed lateness go.
    pub late_output: LateOutput,
    /// Key groups of the state (see [`crate::state::key_group`]).
    pub max_parallelism: u16,
    /// The key groups this instance owns (all of them unless the operator
    /// runs in several workers): the windows it restores from the store.
    pub key_groups: KeyGroupRange,
    /// Roughly how many bytes of window state this instance keeps in
    /// memory; beyond that, the least recently used keys' windows are
    /// written to the store and dropped from memory (read back when their
    /// key comes again or a window of theirs fires), at the end of each
    /// mini-batch.
    pub cache_bytes: usize,
    /// Records of a mini-batch: what the windows kept in the store take
    /// over that many records is combined in memory before the store sees
    /// it — partial accumulators written as merge operands (built-in
    /// aggregates), windows read back once and written once (aggregate
    /// plugins). 0: at the end of every batch. The store is never read
    /// past what waits; see `super::states`.
    pub mini_batch_records: usize,
}

/// Windows fired (or dropped) by one call of `on_watermark`: the results
/// of a watermark that fires more are passed on in pieces of this many.
const FIRE_CHUNK: usize = 4096;

/// Default [`WindowOperatorOptions::mini_batch_records`]: 16 batches of
/// the default size.
pub const DEFAULT_MINI_BATCH_RECORDS: usize = 16 * 1024;

/// Default [`WindowOperatorOptions::cache_bytes`]: 128 MiB.
pub const DEFAULT_WINDOW_CACHE_BYTES: usize = 128 << 20;

impl WindowOperatorOptions {
    /// Defaults for a window operator `name` with `spec`.
    pub fn new(name: impl Into<String>, spec: WindowSpec) -> Self {
        WindowOperatorOptions {
            name: name.into(),
            spec,
            allowed_lateness: 0,
            key_field: None,
            key_columns: None,
            late_output: LateOutput::DeadLetter,
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            key_groups: KeyGroupRange {
                start: 0,
                end: DEFAULT_MAX_PARALLELISM,
            },
            cache_bytes: DEFAULT_WINDOW_CACHE_BYTES,
            mini_batch_records: DEFAULT_MINI_BATCH_RECORDS,
        }
    }
}

/// What a window firing emits (as the JSON value of the output record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowResult {
    /// The key: with `key_field`, the field's JSON value (a number stays a
    /// number); otherwise the record key as a string (UTF-8, lossy).
    pub key: serde_json::Value,
    /// Window start, ms.
    pub window_start: i64,
    /// Window end (exclusive), ms.
    pub window_end: i64,
    /// The aggregate's result.
    pub result: serde_json::Value,
    /// Whether this corrects an earlier result for the same key and window
    /// (a late record arrived within the allowed lateness).
    pub update: bool,
    /// 0 for the first result of a key and window, then 1, 2, ... for each
    /// update: a consumer keeps the highest.
    pub seq: u64,
}

/// One key and window of a batch (tumbling and sliding windows): its
/// records' indices in the batch are `members`, a range of the batch's
/// grouped order.
struct Group<'k> {
    key: &'k [u8],
    window: Window,
    members: Range<usize>,
}

/// Why a record of a batch cannot be added to a window.
enum Unusable {
    /// Its event time or key cannot be read: a dead letter of class
    /// `Invalid`.
    Invalid(String),
    /// The aggregate does not take it (SQL's `WHERE`): skipped.
    Skipped,
    /// The aggregate cannot read it: rejected as the aggregate would.
    Rejected(String),
}

/// Windowed aggregation on event time (see the module docs of
/// [`crate::window`]).
///
/// Window states live in the operator's store (RocksDB by default); the
/// states of recently used keys are also kept in memory, up to
/// [`WindowOperatorOptions::cache_bytes`], and written back at each
/// checkpoint barrier and when a key is evicted. Timers (when a window fires
/// and when its state is dropped) are kept in the store too
/// (ADR 0022): at start-up, nothing is rebuilt.
pub struct WindowOperator {
    options: WindowOperatorOptions,
    /// What records are keyed by; its fields are read first.
    key: WindowKey,
    /// How many of `record_fields` are the key's alone: the aggregate's
    /// own fields follow them. 0 when the aggregate's fields begin with
    /// the key's (a SQL query reads its `GROUP BY` keys first), so that
    /// they are read once.
    key_only_fields: usize,
    /// The fields read from each record in one pass: the key field (if
    /// any), then the aggregate's [`Aggregator::input_fields`].
    record_fields: Arc<[FieldPath]>,
    /// The batch's values of `record_fields`, `record_fields.len()` per
    /// record (kept between batches for its allocation).
    field_values: Vec<Option<FieldValue>>,
    /// The keys of the batch being processed, one after the other (reused).
    key_bytes: Vec<u8>,
    aggregator: Box<dyn Aggregator>,
    metrics: Arc<OperatorMetrics>,
    topic: Topic,
    watermark: i64,
    /// Window states: in the store, recently used ones also in memory.
    states: WindowStates,
    /// When windows fire and when their states are dropped.
    timers: WindowTimers,
    /// Whether the last watermark has windows left to fire or drop (at
    /// most [`FIRE_CHUNK`] per call of `on_watermark`).
    more_to_fire: bool,
    /// Where swaps of the aggregate plugin come from.
    swap: Option<SwapPort>,
    /// The JSON fields the aggregate plugin (as loaded) reads on the
    /// projected path ([`Aggregator::projects_fields`]).
    projects_fields: Option<Arc<[String]>>,
    /// What a window emits, where not a [`WindowResult`].
    output: Option<Box<dyn WindowOutput>>,
}

impl WindowOperator {
    /// A window operator computing `aggregator` over the operator state
    /// `store`, resuming the windows the store holds for its key groups.
    pub fn new(
        options: WindowOperatorOptions,
        mut aggregator: Box<dyn Aggregator>,
        store: Arc<dyn StateStore>,
        metrics: Arc<OperatorMetrics>,
    ) -> Result<Self, StateError> {
        let store_for_timers = store.clone();
        let states = WindowStates::new(
            store,
            metrics.clone(),
            options.max_parallelism,
            options.cache_bytes,
            aggregator.store_merge(),
            aggregator.accumulator_encoding(),
            options.mini_batch_records,
        );
        let key = match (&options.key_columns, &options.key_field) {
            (Some(columns), _) => WindowKey::Columns(columns.clone()),
            (None, Some(field)) => WindowKey::Field {
                path: FieldPath::parse(field),
                name: field.clone(),
            },
            (None, None) => WindowKey::RecordKey,
        };
        let key_paths = key.paths();
        let shared = !key_paths.is_empty() && aggregator.input_fields().starts_with(key_paths);
        let key_only_fields = if shared { 0 } else { key_paths.len() };
        let record_fields = key_paths[..key_only_fields]
            .iter()
            .chain(aggregator.input_fields())
            .cloned()
            .collect();
        let projects_fields = aggregator.projects_fields();
        let timers = WindowTimers::new(
            store_for_timers,
            options.max_parallelism,
            options.key_groups,
        );
        let mut operator = WindowOperator {
            key,
            key_only_fields,
            record_fields,
            field_values: Vec::new(),
            key_bytes: Vec::new(),
            topic: Topic::new(&options.name),
            options,
            aggregator,
            metrics,
            watermark: i64::MIN,
            states,
            timers,
            more_to_fire: false,
            swap: None,
            projects_fields,
            output: None,
        };
        operator.restore()?;
        Ok(operator)
    }

    /// Emits what `output` writes when a window fires, in place of a
    /// [`WindowResult`].
    pub fn with_output(mut self, output: Box<dyn WindowOutput>) -> Self {
        self.output = Some(output);
        self
    }

    /// Takes swaps of its aggregate plugin from `swap`.
    pub fn with_swaps(mut self, swap: SwapPort) -> Self {
        self.swap = Some(swap);
        self
    }

    fn aggregate_error(&self, error: AggregateError) -> DataflowError {
        DataflowError::Aggregate {
            operator: self.options.name.clone(),
            source: error,
        }
    }

    fn state_error(&self, error: StateError) -> DataflowError {
        DataflowError::state(&self.options.name, error)
    }

    /// Reads `record`'s event time and `record_fields` (appending exactly
    /// `record_fields.len()` values to `fields`): its key, or why it cannot
    /// be added.
    /// Reads `record`'s key (appended to `keys`; the range it takes is
    /// returned) and the aggregate's fields (appended to `fields`).
    ///
    /// The fields come from the record's [`crate::record::ReadFields`] when its source
    /// read them (the value is then not parsed again), else from the value.
    /// `read_ahead` counts the records whose fields came from the source.
    fn read_record(
        &self,
        record: &mut Record,
        fields: &mut Vec<Option<FieldValue>>,
        keys: &mut Vec<u8>,
        read_ahead: &mut u64,
    ) -> Result<Range<usize>, Unusable> {
        let start = fields.len();
        let stride = self.record_fields.len();
        let unread = |fields: &mut Vec<Option<FieldValue>>| fields.resize(start + stride, None);
        if let Err(reason) = checked_event_time(record) {
            unread(fields);
            return Err(Unusable::Invalid(reason));
        }
        let taken = record
            .read_fields
            .as_mut()
            .and_then(|read| read.take_values_of(&self.record_fields));
        // The spans stay for the aggregate plugin's projected batch.
        if record
            .read_fields
            .as_ref()
            .is_some_and(|read| read.spans.is_none())
        {
            record.read_fields = None;
        }
        if let Some(mut values) = taken {
            *read_ahead += 1;
            fields.append(&mut values);
        } else if stride > 0
            && let Err(reason) = extract_into(&record.value, &self.record_fields, fields)
        {
            unread(fields);
            // Unreadable for the key field is an invalid record; for the
            // aggregate's fields alone, one the aggregate cannot add.
            return Err(match self.key.paths().is_empty() {
                false => Unusable::Invalid(reason),
                true => Unusable::Rejected(reason),
            });
        }
        let key_values = &fields[start..start + self.key.paths().len()];
        let aggregate_values = &fields[start + self.key_only_fields..];
        match self.aggregator.accepts(record, aggregate_values) {
            Ok(true) => {}
            Ok(false) => return Err(Unusable::Skipped),
            Err(reason) => return Err(Unusable::Invalid(reason)),
        }
        let key_start = keys.len();
        match self.key.write(key_values, record, keys) {
            Ok(()) => Ok(key_start..keys.len()),
            Err(reason) => {
                keys.truncate(key_start);
                Err(Unusable::Invalid(reason))
            }
        }
    }

    fn cleanup_time(&self, window: &Window) -> i64 {
        window
            .max_timestamp()
            .saturating_add(self.options.allowed_lateness)
    }

    /// Whether `window` is past its allowed lateness: it takes no more
    /// records.
    fn is_late(&self, window: &Window) -> bool {
        self.cleanup_time(window) <= self.watermark
    }

    /// The state of `key`'s `window`, created if new.
    fn state_mut(&mut self, key: &[u8], window: Window) -> Result<&mut WindowState, DataflowError> {
        let exists = self
            .states
            .contains(key, window)
            .map_err(|e| self.state_error(e))?;
        if !exists {
            let accumulator = self.new_window(key, window)?;
            self.states
                .insert(key, window, WindowState::new(accumulator));
        }
        let name = &self.options.name;
        match self.states.get_mut(key, window) {
            Ok(Some(state)) => Ok(state),
            Ok(None) => Err(DataflowError::operator(name, "window state vanished")),
            Err(error) => Err(DataflowError::operator(name, error)),
        }
    }

    /// Sets the timers of `key`'s new `window` and returns its empty
    /// accumulator (the caller puts the state in).
    fn new_window(&mut self, key: &[u8], window: Window) -> Result<Vec<u8>, DataflowError> {
        self.set_timers(key, window);
        self.empty_accumulator()
    }

    /// An empty accumulator (a new window's, or a partial one for records
    /// to be folded into a window's state in the store).
    fn empty_accumulator(&mut self) -> Result<Vec<u8>, DataflowError> {
        self.aggregator
            .create()
            .map_err(|e| self.aggregate_error(e))
    }

    /// Removes `key`'s `window` (state, timers, stored copy).
    fn drop_window(
        &mut self,
        key: &[u8],
        window: Window,
    ) -> Result<Option<WindowState>, DataflowError> {
        self.forget_timers(key, window);
        self.states
            .remove(key, window)
            .map_err(|e| self.state_error(e))
    }

    fn dead_letter(
        &self,
        record: Record,
        class: DeadLetterClass,
        reason: &str,
        out: &mut Collector,
    ) {
        out.dead_letter(
            record,
            class,
            reason,
            &self.options.name,
            None,
            &self.metrics,
        );
    }

    /// Sends a record later than the allowed lateness to the late output.
    fn late(&self, record: Record, out: &mut Collector) {
        let reason = format!(
            "late arrival: event time {} is behind the watermark {} by more than the allowed lateness of {} ms",
            record.event_time.unwrap_or_default(),
            self.watermark,
            self.options.allowed_lateness
        );
        out.late(
            record,
            &reason,
            &self.options.late_output,
            &self.options.name,
            &self.metrics,
        );
    }

    /// Writes timers and changed window states to the store and measures
    /// it.
    fn write_back(&mut self) -> Result<(), DataflowError> {
        self.timers.flush().map_err(|e| self.state_error(e))?;
        let usage = self.states.write_back().map_err(|e| self.state_error(e))?;
        self.metrics.set_state_usage(usage);
        Ok(())
    }
}

impl Operator for WindowOperator {
    fn name(&self) -> &str {
        &self.options.name
    }

    fn reads_fields(&self) -> Option<Arc<[FieldPath]>> {
        Some(self.record_fields.clone())
    }

    fn projects_fields(&self) -> Option<Arc<[String]>> {
        self.projects_fields.clone()
    }

    fn partitioner(&self) -> Option<crate::dataflow::Partitioner> {
        let key = self.key.clone();
        Some(Arc::new(move |record: &Record| {
            key.of_record(record).ok().flatten()
        }))
    }

    fn metrics(&self) -> &Arc<OperatorMetrics> {
        &self.metrics
    }

    fn process_batch(
        &mut self,
        batch: Vec<Record>,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.metrics.count_in(&batch);
        self.states.tick();
        let records = batch.len();
        let mut rejected: BTreeMap<usize, String> = BTreeMap::new();
        let mut late: BTreeSet<usize> = BTreeSet::new();
        // Each record's key as a range of `key_bytes` (one buffer, reused
        // from batch to batch: no allocation per record).
        let mut keys: Vec<Option<Range<usize>>> = Vec::with_capacity(batch.len());
        let mut key_bytes = std::mem::take(&mut self.key_bytes);
        key_bytes.clear();
        let mut reasons: BTreeMap<usize, String> = BTreeMap::new();
        // One pass over each record for the key field and the aggregate's
        // fields; `fields` holds `record_fields.len()` values per record.
        let mut fields = std::mem::take(&mut self.field_values);
        fields.clear();
        let mut batch = batch;
        let mut read_ahead = 0;
        for (index, record) in batch.iter_mut().enumerate() {
            let key = self.read_record(record, &mut fields, &mut key_bytes, &mut read_ahead);
            match key {
                Ok(key) => keys.push(Some(key)),
                Err(Unusable::Invalid(reason)) => {
                    reasons.insert(index, reason);
                    keys.push(None);
                }
                Err(Unusable::Rejected(reason)) => {
                    rejected.insert(index, reason);
                    keys.push(None);
                }
                Err(Unusable::Skipped) => keys.push(None),
            }
        }

        if read_ahead > 0 {
            // Shown in the run summary: records this window did not parse.
            self.metrics
                .add_plugin_counter(crate::metrics::RECORDS_READ_AHEAD_COUNTER, read_ahead);
        }

        if self.options.spec.is_merging() {
            for (index, record) in batch.iter().enumerate() {
                let Some(key) = keys[index].clone() else {
                    continue;
                };
                let key = &key_bytes[key];
                if !self.add_to_session(key, record, index, &mut rejected, out)? {
                    late.insert(index);
                }
            }
        } else {
            // Group by key and window, keeping record order within a group,
            // so that each window's accumulator is updated once per batch.
            // Groups are in the order of their first record (a hash map
            // finds them: a batch touches hundreds of keys, and ordering
            // them all compared keys byte by byte); only re-fired groups,
            // which emit, are put in key and window order.
            let mut groups: Vec<Group<'_>> = Vec::new();
            // (group, record index) for every window a record is in, in
            // arrival order.
            let mut members: Vec<(usize, usize)> = Vec::with_capacity(batch.len());
            let mut group_of: foldhash::HashMap<(&[u8], Window), usize> =
                foldhash::HashMap::with_capacity_and_hasher(batch.len(), Default::default());
            for (index, record) in batch.iter().enumerate() {
                let (Some(key), Some(time)) = (&keys[index], record.event_time) else {
                    continue;
                };
                let key = &key_bytes[key.clone()];
                let mut on_time = false;
                for window in self.options.spec.assign(time) {
                    if !self.is_late(&window) {
                        on_time = true;
                        let next = groups.len();
                        let group = *group_of.entry((key, window)).or_insert(next);
                        if group == next {
                            groups.push(Group {
                                key,
                                window,
                                members: 0..0,
                            });
                        }
                        groups[group].members.end += 1;
                        members.push((group, index));
                    }
                }
                if !on_time {
                    late.insert(index);
                }
            }
            // Each group's records as one range of a batch-wide list
            // (arrival order within a group): no list per group.
            let mut next = 0;
            for group in &mut groups {
                let count = group.members.end;
                group.members = next..next;
                next += count;
            }
            let mut order = vec![0; members.len()];
            for &(group, index) in &members {
                let members = &mut groups[group].members;
                order[members.end] = index;
                members.end += 1;
            }
            let (mut fired, waiting): (Vec<_>, Vec<_>) = groups
                .into_iter()
                .partition(|group| group.window.max_timestamp() <= self.watermark);
            // Fired already: re-fired record by record, emitting updates in
            // key and window order (the rare case; only these are sorted).
            fired.sort_unstable_by(|a, b| (a.key, a.window).cmp(&(b.key, b.window)));
            for group in fired {
                let indices = &order[group.members];
                let records: Vec<&Record> = indices.iter().map(|i| &batch[*i]).collect();
                self.add_to_window(
                    group.key,
                    group.window,
                    &records,
                    &mut rejected,
                    indices,
                    out,
                )?;
            }
            self.add_to_waiting_windows(&batch, &fields, &order, waiting, &mut rejected)?;
        }
        self.field_values = fields;
        self.key_bytes = key_bytes;

        // Most batches have no record to send on: they are dropped where
        // they are (taking each 144-byte record out to look at it was ~2 %
        // of a window's run).
        if !(reasons.is_empty() && late.is_empty() && rejected.is_empty()) {
            for (index, record) in batch.into_iter().enumerate() {
                if let Some(reason) = reasons.remove(&index) {
                    self.dead_letter(record, DeadLetterClass::Invalid, &reason, out);
                } else if late.contains(&index) {
                    self.late(record, out);
                } else if let Some(reason) = rejected.remove(&index) {
                    self.dead_letter(
                        record,
                        DeadLetterClass::Rejected,
                        &format!("cannot aggregate: {reason}"),
                        out,
                    );
                }
            }
        }
        self.states
            .end_batch(records)
            .map_err(|e| self.state_error(e))?;
        self.timers.flush().map_err(|e| self.state_error(e))
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<(), DataflowError> {
        let continuing = self.more_to_fire && watermark == self.watermark;
        if watermark <= self.watermark && !continuing {
            return Ok(());
        }
        self.watermark = watermark;
        self.more_to_fire = false;
        self.states.tick();
        // Fire timers first, then cleanup timers; at most FIRE_CHUNK
        // windows a call (the rest after these are passed on:
        // `has_more_to_fire`).
        let mut handled = 0;
        for kind in [TimerKind::Fire, TimerKind::Cleanup] {
            while handled < FIRE_CHUNK {
                let due = self
                    .timers
                    .next_due(kind, watermark)
                    .map_err(|e| self.state_error(e))?;
                let Some((_, key, window)) = due else {
                    break;
                };
                if kind == TimerKind::Fire {
                    self.fire(&key, window, out)?;
                }
                // A cleanup timer drops the state; so does a fire timer
                // without allowed lateness (it was the cleanup timer too:
                // `set_timers`).
                if kind == TimerKind::Cleanup || self.options.allowed_lateness == 0 {
                    self.states
                        .remove(&key, window)
                        .map_err(|e| self.state_error(e))?;
                }
                handled += 1;
            }
            if handled == FIRE_CHUNK {
                self.more_to_fire = true;
                break;
            }
        }
        self.states.end_batch(0).map_err(|e| self.state_error(e))?;
        self.timers.flush().map_err(|e| self.state_error(e))
    }

    fn has_more_to_fire(&self) -> bool {
        self.more_to_fire
    }

    fn on_barrier(
        &mut self,
        barrier: &CheckpointBarrier,
        _out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.write_back()?;
        if let (Some(swap), Some(plugin)) = (&mut self.swap, self.aggregator.plugin()) {
            swap.apply_due(&self.options.name, barrier.id, plugin);
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Collector) -> Result<(), DataflowError> {
        self.write_back()
    }
}
