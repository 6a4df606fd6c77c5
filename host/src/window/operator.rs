//! The window operator: per key and window, an accumulator in state; fired
//! by the watermark; allowed lateness; late output.

use super::aggregate::{AggregateError, Aggregator};
use super::fields::{FieldPath, extract};
use super::{Window, WindowSpec};
use crate::dataflow::{CheckpointBarrier, Collector, DataflowError, LateOutput, Operator};
use crate::metrics::{OperatorMetrics, add};
use crate::record::{Record, SourcePosition};
use crate::state::key_group::{self, DEFAULT_MAX_PARALLELISM};
use crate::state::{StateError, StateStore, StateWrite};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// Settings of a [`WindowOperator`].
#[derive(Debug, Clone)]
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
    /// Where records later than the allowed lateness go.
    pub late_output: LateOutput,
    /// Key groups of the state (see [`key_group`]).
    pub max_parallelism: u16,
}

impl WindowOperatorOptions {
    /// Defaults for a window operator `name` with `spec`.
    pub fn new(name: impl Into<String>, spec: WindowSpec) -> Self {
        WindowOperatorOptions {
            name: name.into(),
            spec,
            allowed_lateness: 0,
            key_field: None,
            late_output: LateOutput::DeadLetter,
            max_parallelism: DEFAULT_MAX_PARALLELISM,
        }
    }
}

/// What a window firing emits (as the JSON value of the output record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowResult {
    /// The key (UTF-8, lossy).
    pub key: String,
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

/// One key's window state: the accumulator and how many results it has
/// produced.
#[derive(Debug, Clone)]
struct WindowState {
    accumulator: Vec<u8>,
    /// Results emitted so far (the next result's `seq`).
    emitted: u64,
    /// Changed since it was last written to the store.
    dirty: bool,
    /// Written to the store at least once (so dropping it must delete it
    /// there too).
    persisted: bool,
}

/// A window's key in the store: key group (so that key-group ranges are key
/// ranges), key length, key, window start and end.
fn store_key(max_parallelism: u16, key: &[u8], window: &Window) -> Vec<u8> {
    let group = key_group::key_group(key, max_parallelism);
    let mut full = Vec::with_capacity(2 + 4 + key.len() + 16);
    full.extend_from_slice(&group.to_be_bytes());
    full.extend_from_slice(&(key.len() as u32).to_be_bytes());
    full.extend_from_slice(key);
    full.extend_from_slice(&window.start.to_be_bytes());
    full.extend_from_slice(&window.end.to_be_bytes());
    full
}

/// Windowed aggregation on event time (see the module docs of
/// [`crate::window`]).
pub struct WindowOperator {
    options: WindowOperatorOptions,
    key_path: Option<FieldPath>,
    aggregator: Box<dyn Aggregator>,
    store: Arc<dyn StateStore>,
    metrics: Arc<OperatorMetrics>,
    topic: Arc<str>,
    watermark: i64,
    /// Window states per key, kept in memory and written to the store at
    /// each checkpoint barrier (a write-back cache over RocksDB).
    windows: HashMap<Vec<u8>, BTreeMap<Window, WindowState>>,
    /// Windows not fired yet, by the time the watermark must pass.
    fire_timers: BTreeSet<(i64, Vec<u8>, Window)>,
    /// Windows with state, by the time their state is dropped.
    cleanup_timers: BTreeSet<(i64, Vec<u8>, Window)>,
}

impl WindowOperator {
    /// A window operator computing `aggregator` over the operator state
    /// `store`.
    pub fn new(
        options: WindowOperatorOptions,
        aggregator: Box<dyn Aggregator>,
        store: Arc<dyn StateStore>,
        metrics: Arc<OperatorMetrics>,
    ) -> Self {
        WindowOperator {
            key_path: options.key_field.as_deref().map(FieldPath::parse),
            topic: Arc::from(options.name.as_str()),
            options,
            aggregator,
            store,
            metrics,
            watermark: i64::MIN,
            windows: HashMap::new(),
            fire_timers: BTreeSet::new(),
            cleanup_timers: BTreeSet::new(),
        }
    }

    fn aggregate_error(&self, error: AggregateError) -> DataflowError {
        DataflowError::Operator {
            name: self.options.name.clone(),
            message: error.0,
        }
    }

    fn state_error(&self, error: StateError) -> DataflowError {
        DataflowError::Operator {
            name: self.options.name.clone(),
            message: error.to_string(),
        }
    }

    /// The key of `record`, or why it has none.
    fn key_of(&self, record: &Record) -> Result<Vec<u8>, String> {
        match &self.key_path {
            None => Ok(record
                .key
                .as_deref()
                .map(<[u8]>::to_vec)
                .unwrap_or_default()),
            Some(path) => match extract(&record.value, &[path])?.pop().flatten() {
                Some(value) => Ok(value.key_bytes()),
                None => Err(format!(
                    "key field `{}` is missing",
                    self.options.key_field.as_deref().unwrap_or_default()
                )),
            },
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
            .windows
            .get(key)
            .is_some_and(|windows| windows.contains_key(&window));
        if !exists {
            // A window already behind the watermark is fired by its records
            // as they come (see `add_to_window`), not by a timer.
            if window.max_timestamp() > self.watermark {
                self.fire_timers
                    .insert((window.max_timestamp(), key.to_vec(), window));
            }
            self.cleanup_timers
                .insert((self.cleanup_time(&window), key.to_vec(), window));
            let accumulator = self
                .aggregator
                .create()
                .map_err(|e| self.aggregate_error(e))?;
            let state = WindowState {
                accumulator,
                emitted: 0,
                dirty: true,
                persisted: false,
            };
            self.windows
                .entry(key.to_vec())
                .or_default()
                .insert(window, state);
        }
        let name = &self.options.name;
        self.windows
            .get_mut(key)
            .and_then(|windows| windows.get_mut(&window))
            .ok_or_else(|| DataflowError::Operator {
                name: name.clone(),
                message: "window state vanished".into(),
            })
    }

    /// Removes `key`'s `window` (state, timers, stored copy).
    fn drop_window(
        &mut self,
        key: &[u8],
        window: Window,
    ) -> Result<Option<WindowState>, DataflowError> {
        let state = match self.windows.get_mut(key) {
            Some(windows) => {
                let state = windows.remove(&window);
                if windows.is_empty() {
                    self.windows.remove(key);
                }
                state
            }
            None => None,
        };
        self.fire_timers
            .remove(&(window.max_timestamp(), key.to_vec(), window));
        self.cleanup_timers
            .remove(&(self.cleanup_time(&window), key.to_vec(), window));
        if state.as_ref().is_some_and(|s| s.persisted) {
            self.store
                .delete(&store_key(self.options.max_parallelism, key, &window))
                .map_err(|e| self.state_error(e))?;
        }
        Ok(state)
    }

    /// Emits the current result of `key`'s `window`.
    fn fire(
        &mut self,
        key: &[u8],
        window: Window,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        let Some(state) = self.windows.get_mut(key).and_then(|w| w.get_mut(&window)) else {
            return Ok(());
        };
        let seq = state.emitted;
        state.emitted += 1;
        state.dirty = true;
        let finished = self.aggregator.finish(&state.accumulator);
        let result = WindowResult {
            key: String::from_utf8_lossy(key).into_owned(),
            window_start: window.start,
            window_end: window.end,
            result: finished.map_err(|e| self.aggregate_error(e))?,
            update: seq > 0,
            seq,
        };
        if seq > 0 {
            self.metrics.add_plugin_counter("updates", 1);
        }
        let value = serde_json::to_vec(&result).unwrap_or_default();
        let record = Record {
            key: (!key.is_empty()).then(|| bytes::Bytes::copy_from_slice(key)),
            value: value.into(),
            headers: Vec::new(),
            event_time: Some(window.max_timestamp()),
            source: SourcePosition {
                topic: self.topic.clone(),
                partition: i32::from(key_group::key_group(key, self.options.max_parallelism)),
                offset: seq as i64,
            },
        };
        add(&self.metrics.records_out, 1);
        out.main.push(record);
        Ok(())
    }

    fn dead_letter(&self, record: Record, reason: &str, out: &mut Collector) {
        out.dead_letter(record, reason, &self.options.name, None, &self.metrics);
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

    /// Adds records (of one key and window) to the window; a window that
    /// has already fired re-fires once per record.
    fn add_to_window(
        &mut self,
        key: &[u8],
        window: Window,
        records: &[&Record],
        rejected: &mut BTreeMap<usize, String>,
        indices: &[usize],
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        let already_fired = window.max_timestamp() <= self.watermark;
        let chunks: Vec<&[&Record]> = if already_fired {
            records.chunks(1).collect()
        } else {
            vec![records]
        };
        let created = !self
            .windows
            .get(key)
            .is_some_and(|windows| windows.contains_key(&window));
        let mut accepted = 0;
        let mut offset = 0;
        for chunk in chunks {
            let state = self.state_mut(key, window)?;
            let mut accumulator = std::mem::take(&mut state.accumulator);
            let failed = self
                .aggregator
                .add(&mut accumulator, chunk)
                .map_err(|e| self.aggregate_error(e))?;
            let state = self.state_mut(key, window)?;
            state.accumulator = accumulator;
            state.dirty = true;
            let all_failed = failed.len() == chunk.len();
            accepted += chunk.len() - failed.len();
            for (index, reason) in failed {
                rejected.entry(indices[offset + index]).or_insert(reason);
            }
            if already_fired && !all_failed {
                self.fire(key, window, out)?;
            }
            offset += chunk.len();
        }
        if created && accepted == 0 {
            // Every record was rejected: the window never had any content.
            self.drop_window(key, window)?;
        }
        Ok(())
    }

    /// Session windows: the record's `[t, t + gap)` merges with every
    /// session of its key it touches.
    fn add_to_session(
        &mut self,
        key: &[u8],
        record: &Record,
        index: usize,
        rejected: &mut BTreeMap<usize, String>,
        out: &mut Collector,
    ) -> Result<bool, DataflowError> {
        let time = record.event_time.unwrap_or_default();
        let mut merged = self.options.spec.assign(time)[0];
        let touching: Vec<Window> = self
            .windows
            .get(key)
            .map(|windows| {
                windows
                    .keys()
                    .filter(|w| w.intersects(&merged))
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        for window in &touching {
            merged = merged.cover(window);
        }
        if self.is_late(&merged) {
            return Ok(false);
        }
        let mut accumulator: Option<Vec<u8>> = None;
        let mut emitted = 0;
        for window in touching {
            if let Some(state) = self.drop_window(key, window)? {
                emitted = emitted.max(state.emitted);
                accumulator = Some(match accumulator {
                    None => state.accumulator,
                    Some(acc) => self
                        .aggregator
                        .merge(&acc, &state.accumulator)
                        .map_err(|e| self.aggregate_error(e))?,
                });
            }
        }
        let state = self.state_mut(key, merged)?;
        if let Some(accumulator) = accumulator {
            state.accumulator = accumulator;
        }
        state.emitted = emitted;
        if emitted > 0 {
            // A session that had fired became a new (larger) window: it is
            // no longer waiting to fire for the first time.
            self.fire_timers
                .remove(&(merged.max_timestamp(), key.to_vec(), merged));
        }
        self.add_to_window(key, merged, &[record], rejected, &[index], out)?;
        Ok(true)
    }

    /// Writes changed window states to the store.
    fn flush(&mut self) -> Result<(), DataflowError> {
        let mut writes = Vec::new();
        let dirty = self
            .windows
            .iter_mut()
            .flat_map(|(key, windows)| windows.iter_mut().map(move |(w, s)| (key, w, s)))
            .filter(|(_, _, s)| s.dirty);
        for (key, window, state) in dirty {
            state.dirty = false;
            state.persisted = true;
            let mut value = Vec::with_capacity(8 + state.accumulator.len());
            value.extend_from_slice(&state.emitted.to_le_bytes());
            value.extend_from_slice(&state.accumulator);
            let full = store_key(self.options.max_parallelism, key, window);
            writes.push(StateWrite::Put(full, value));
        }
        if !writes.is_empty() {
            self.store.write(writes).map_err(|e| self.state_error(e))?;
        }
        let usage = self.store.usage().map_err(|e| self.state_error(e))?;
        self.metrics.set_state_usage(usage.bytes, usage.keys);
        Ok(())
    }
}

impl Operator for WindowOperator {
    fn name(&self) -> &str {
        &self.options.name
    }

    fn partitioner(&self) -> Option<crate::dataflow::Partitioner> {
        let path = self.key_path.clone();
        Some(Arc::new(move |record: &Record| match &path {
            None => Some(
                record
                    .key
                    .as_deref()
                    .map(<[u8]>::to_vec)
                    .unwrap_or_default(),
            ),
            Some(path) => extract(&record.value, &[path])
                .ok()?
                .pop()
                .flatten()
                .map(|value| value.key_bytes()),
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
        add(&self.metrics.records_in, batch.len() as u64);
        let mut rejected: BTreeMap<usize, String> = BTreeMap::new();
        let mut late: BTreeSet<usize> = BTreeSet::new();
        let mut keys: Vec<Option<Vec<u8>>> = Vec::with_capacity(batch.len());
        let mut reasons: BTreeMap<usize, String> = BTreeMap::new();
        for (index, record) in batch.iter().enumerate() {
            if record.event_time.is_none() {
                reasons.insert(index, "record has no event time".into());
                keys.push(None);
                continue;
            }
            match self.key_of(record) {
                Ok(key) => keys.push(Some(key)),
                Err(reason) => {
                    reasons.insert(index, reason);
                    keys.push(None);
                }
            }
        }

        if self.options.spec.is_merging() {
            for (index, record) in batch.iter().enumerate() {
                let Some(key) = keys[index].clone() else {
                    continue;
                };
                if !self.add_to_session(&key, record, index, &mut rejected, out)? {
                    late.insert(index);
                }
            }
        } else {
            // Group by key and window, keeping record order within a group,
            // so that each window's accumulator is updated once per batch.
            let mut groups: BTreeMap<(&[u8], Window), Vec<usize>> = BTreeMap::new();
            for (index, record) in batch.iter().enumerate() {
                let (Some(key), Some(time)) = (&keys[index], record.event_time) else {
                    continue;
                };
                let mut on_time = false;
                for window in self.options.spec.assign(time) {
                    if !self.is_late(&window) {
                        on_time = true;
                        groups
                            .entry((key.as_slice(), window))
                            .or_default()
                            .push(index);
                    }
                }
                if !on_time {
                    late.insert(index);
                }
            }
            for ((key, window), indices) in groups {
                let records: Vec<&Record> = indices.iter().map(|i| &batch[*i]).collect();
                self.add_to_window(key, window, &records, &mut rejected, &indices, out)?;
            }
        }

        for (index, record) in batch.into_iter().enumerate() {
            if let Some(reason) = reasons.remove(&index) {
                self.dead_letter(record, &reason, out);
            } else if late.contains(&index) {
                self.late(record, out);
            } else if let Some(reason) = rejected.remove(&index) {
                self.dead_letter(record, &format!("cannot aggregate: {reason}"), out);
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<(), DataflowError> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        while let Some((time, key, window)) = self.fire_timers.first().cloned() {
            if time > watermark {
                break;
            }
            self.fire_timers.pop_first();
            self.fire(&key, window, out)?;
        }
        while let Some((time, key, window)) = self.cleanup_timers.first().cloned() {
            if time > watermark {
                break;
            }
            self.drop_window(&key, window)?;
        }
        Ok(())
    }

    fn on_barrier(
        &mut self,
        _barrier: &CheckpointBarrier,
        _out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.flush()
    }

    fn finish(&mut self, _out: &mut Collector) -> Result<(), DataflowError> {
        self.flush()
    }
}
