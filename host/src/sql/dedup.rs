//! SQL de-duplication (`ROW_NUMBER() OVER (PARTITION BY id ORDER BY ..) AS
//! rn ... WHERE rn = 1`): each key's first row, remembered in the
//! operator's keyed state for `state_ttl_ms`.
//!
//! * By arrival (`ORDER BY PROCTIME()`): a record whose key the state does
//!   not hold is emitted at once and its key remembered; the others are
//!   dropped.
//! * By event time (`ORDER BY ts`): a key's earliest record so far waits in
//!   the state as its candidate, with a timer at its event time; an
//!   earlier one arriving before the watermark passes it takes its place.
//!   When the watermark passes the candidate it is emitted and the key is
//!   remembered as done. A record at or behind the watermark of a key not
//!   yet done goes to the late output (an earlier row may have been
//!   emitted or dropped already).
//!
//! State: the key (behind its key group, so that key-group ranges are key
//! ranges) → `[0]` (done) or `[1]`, the candidate's event time and value.
//! Timers are in the same store (`crate::state::timers`).

use super::SqlProjectOperator;
use crate::dataflow::{CheckpointBarrier, Collector, DataflowError, LateOutput, Operator};
use crate::metrics::{DeadLetterClass, OperatorMetrics, record_bytes};
use crate::record::{Record, SourcePosition, Topic};
use crate::state::key_group::{self, KeyGroupRange};
use crate::state::timers::{TimerKind, TimerNamespace, Timers};
use crate::state::{StateError, StateStore, StateWrite};
use crate::window::key::WindowKey;
use sluice_sql::DedupOrder;
use std::collections::HashMap;
use std::sync::Arc;

/// Candidates emitted by one call of `on_watermark`, at most (the rest
/// after these are passed on: [`Operator::has_more_to_fire`]).
const EMIT_CHUNK: usize = 4096;

/// The state value of a key whose row was emitted.
const DONE: u8 = 0;
/// The state value of a key with a candidate: this, its event time, its
/// value.
const CANDIDATE: u8 = 1;

/// The one kind of timer: a candidate is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Due;

impl TimerKind for Due {
    const ALL: &'static [Self] = &[Due];

    fn tag(self) -> u8 {
        0
    }
}

/// A key has one candidate: its timers need no namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate;

impl TimerNamespace for Candidate {
    fn to_bytes(&self) -> [u8; 16] {
        [0; 16]
    }

    fn from_bytes(_bytes: [u8; 16]) -> Self {
        Candidate
    }
}

/// Settings of a [`SqlDedupOperator`].
pub struct SqlDedupOptions {
    /// Operator name.
    pub name: String,
    /// Which row of a key is kept.
    pub order: DedupOrder,
    /// Where records behind the watermark go (by event time).
    pub late_output: LateOutput,
    /// Key groups of the state.
    pub max_parallelism: u16,
    /// The key groups this instance owns.
    pub key_groups: KeyGroupRange,
}

/// A SQL query's de-duplication (see the module docs).
pub struct SqlDedupOperator {
    options: SqlDedupOptions,
    key: WindowKey,
    /// The inner `WHERE`: records that fail it are not ranked.
    filter: SqlProjectOperator,
    /// The outer `SELECT` of the records kept.
    project: SqlProjectOperator,
    store: Arc<dyn StateStore>,
    timers: Timers<Due, Candidate>,
    metrics: Arc<OperatorMetrics>,
    watermark: i64,
    more_to_emit: bool,
    topic: Topic,
}

impl SqlDedupOperator {
    /// The operator of `plan` over the state `store`, resuming the
    /// candidates' timers the store holds.
    pub fn new(
        options: SqlDedupOptions,
        plan: sluice_sql::DedupPlan,
        store: Arc<dyn StateStore>,
        metrics: Arc<OperatorMetrics>,
    ) -> Result<Self, StateError> {
        let mut timers = Timers::new(store.clone(), options.max_parallelism, options.key_groups);
        timers.restore()?;
        Ok(SqlDedupOperator {
            key: WindowKey::Columns(plan.keys),
            filter: SqlProjectOperator::after(&options.name, plan.filter, metrics.clone()),
            project: SqlProjectOperator::after(&options.name, plan.project, metrics.clone()),
            topic: Topic::new(&options.name),
            options,
            store,
            timers,
            metrics,
            watermark: i64::MIN,
            more_to_emit: false,
        })
    }

    fn state_error(&self, error: StateError) -> DataflowError {
        DataflowError::state(&self.options.name, error)
    }

    /// `key`'s entry in the store: its key group, its length, the key.
    fn state_key(&self, key: &[u8]) -> Vec<u8> {
        let group = key_group::key_group(key, self.options.max_parallelism);
        let mut state_key = Vec::with_capacity(6 + key.len());
        state_key.extend_from_slice(&group.to_be_bytes());
        state_key.extend_from_slice(&(key.len() as u32).to_be_bytes());
        state_key.extend_from_slice(key);
        state_key
    }

    /// The records of `passed` (which passed the `WHERE`) with their keys;
    /// a record without one is dead-lettered.
    fn keyed(&self, passed: Vec<Record>, out: &mut Collector) -> Vec<(Vec<u8>, Record)> {
        let mut keyed = Vec::with_capacity(passed.len());
        for record in passed {
            match self.key.of_record(&record) {
                Ok(Some(key)) => keyed.push((key, record)),
                Ok(None) | Err(_) => out.dead_letter(
                    record,
                    DeadLetterClass::Invalid,
                    "SQL: the value is not a JSON object",
                    &self.options.name,
                    None,
                    &self.metrics,
                ),
            }
        }
        keyed
    }

    /// By arrival: the records whose key the state does not hold, the
    /// first of each; their keys remembered.
    fn first_arrivals(
        &mut self,
        keyed: Vec<(Vec<u8>, Record)>,
    ) -> Result<Vec<Record>, DataflowError> {
        let state_keys: Vec<Vec<u8>> = keyed.iter().map(|(key, _)| self.state_key(key)).collect();
        let known = self
            .store
            .multi_get(&state_keys)
            .map_err(|e| self.state_error(e))?;
        let mut kept = Vec::new();
        let mut writes = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (((_, record), state_key), known) in keyed.into_iter().zip(state_keys).zip(known) {
            if known.is_some() || !seen.insert(state_key.clone()) {
                continue;
            }
            writes.push(StateWrite::Put(state_key, vec![DONE]));
            kept.push(record);
        }
        if !writes.is_empty() {
            self.store.write(writes).map_err(|e| self.state_error(e))?;
        }
        Ok(kept)
    }

    /// By event time: each record becomes its key's candidate if it is
    /// earlier than the one waiting (and the key is not done); records
    /// behind the watermark are late.
    fn offer_candidates(
        &mut self,
        keyed: Vec<(Vec<u8>, Record)>,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        let mut distinct: Vec<Vec<u8>> = keyed.iter().map(|(key, _)| key.clone()).collect();
        distinct.sort();
        distinct.dedup();
        let state_keys: Vec<Vec<u8>> = distinct.iter().map(|key| self.state_key(key)).collect();
        let stored = self
            .store
            .multi_get(&state_keys)
            .map_err(|e| self.state_error(e))?;
        // Each key's state as the batch leaves it: done (absent here), or
        // its candidate.
        let mut current: HashMap<Vec<u8>, Option<(i64, Vec<u8>)>> = HashMap::new();
        for (key, stored) in distinct.iter().zip(stored) {
            let state = match stored.as_deref() {
                None => Some(None),
                Some([DONE, ..]) => None,
                Some(bytes) => {
                    candidate_of(bytes).map(|(time, value)| Some((time, value.to_vec())))
                }
            };
            if let Some(state) = state {
                current.insert(key.clone(), state);
            }
        }
        let mut on_time = Vec::with_capacity(keyed.len());
        for (key, record) in keyed {
            if !current.contains_key(&key) {
                continue; // done: a duplicate
            }
            match record.event_time {
                Some(time) if time > self.watermark => on_time.push((key, time, record)),
                _ => {
                    let reason = format!(
                        "late arrival: event time {} is not after the watermark {}: an earlier row of its key may have been emitted or dropped already",
                        record.event_time.unwrap_or_default(),
                        self.watermark
                    );
                    out.late(
                        record,
                        &reason,
                        &self.options.late_output,
                        &self.options.name,
                        &self.metrics,
                    );
                }
            }
        }
        let mut changed: HashMap<Vec<u8>, Option<i64>> = HashMap::new();
        for (key, time, record) in on_time {
            let Some(state) = current.get_mut(&key) else {
                continue; // done
            };
            if state
                .as_ref()
                .is_some_and(|(earliest, _)| *earliest <= time)
            {
                continue;
            }
            let replaced = state.replace((time, record.value.to_vec()));
            changed
                .entry(key)
                .or_insert(replaced.map(|(earlier, _)| earlier));
        }
        let mut writes = Vec::with_capacity(changed.len());
        for (key, replaced) in changed {
            let Some(Some((time, value))) = current.get(&key) else {
                continue;
            };
            if let Some(replaced) = replaced {
                self.timers.remove(Due, &key, &Candidate, replaced);
            }
            self.timers.set(Due, &key, &Candidate, *time);
            let mut bytes = Vec::with_capacity(9 + value.len());
            bytes.push(CANDIDATE);
            bytes.extend_from_slice(&time.to_be_bytes());
            bytes.extend_from_slice(value);
            writes.push(StateWrite::Put(self.state_key(&key), bytes));
        }
        if !writes.is_empty() {
            self.store.write(writes).map_err(|e| self.state_error(e))?;
        }
        self.timers.flush().map_err(|e| self.state_error(e))
    }

    /// Passes `kept` through the query's `SELECT` into `out`, counting
    /// them out.
    fn emit(&mut self, kept: Vec<Record>, out: &mut Collector) -> Result<(), DataflowError> {
        if kept.is_empty() {
            return Ok(());
        }
        let before = out.main.len();
        self.project.process_batch(kept, out)?;
        let emitted = &out.main[before..];
        self.metrics
            .count_out_many(emitted.len() as u64, record_bytes(emitted));
        Ok(())
    }
}

/// The event time and value of a candidate's state bytes.
fn candidate_of(bytes: &[u8]) -> Option<(i64, &[u8])> {
    match bytes.split_first() {
        Some((&CANDIDATE, rest)) if rest.len() >= 8 => {
            let (time, value) = rest.split_at(8);
            Some((i64::from_be_bytes(time.try_into().ok()?), value))
        }
        _ => None,
    }
}

impl Operator for SqlDedupOperator {
    fn name(&self) -> &str {
        &self.options.name
    }

    fn metrics(&self) -> &Arc<OperatorMetrics> {
        &self.metrics
    }

    fn partitioner(&self) -> Option<crate::dataflow::Partitioner> {
        let key = self.key.clone();
        Some(Arc::new(move |record: &Record| {
            key.of_record(record).ok().flatten()
        }))
    }

    fn process_batch(
        &mut self,
        batch: Vec<Record>,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.metrics.count_in(&batch);
        let mut passed = Collector::default();
        self.filter.process_batch(batch, &mut passed)?;
        out.dead_letter.append(&mut passed.dead_letter);
        let keyed = self.keyed(passed.main, out);
        match self.options.order {
            DedupOrder::Arrival => {
                let kept = self.first_arrivals(keyed)?;
                self.emit(kept, out)
            }
            DedupOrder::EventTime => self.offer_candidates(keyed, out),
        }
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<(), DataflowError> {
        let continuing = self.more_to_emit && watermark == self.watermark;
        if watermark <= self.watermark && !continuing {
            return Ok(());
        }
        self.watermark = watermark;
        self.more_to_emit = false;
        if self.options.order == DedupOrder::Arrival {
            return Ok(());
        }
        let mut due = Vec::new();
        while due.len() < EMIT_CHUNK {
            let next = self
                .timers
                .next_due(Due, watermark)
                .map_err(|e| self.state_error(e))?;
            let Some((time, key, _)) = next else {
                break;
            };
            due.push((time, key));
        }
        self.more_to_emit = due.len() == EMIT_CHUNK;
        let state_keys: Vec<Vec<u8>> = due.iter().map(|(_, key)| self.state_key(key)).collect();
        let stored = self
            .store
            .multi_get(&state_keys)
            .map_err(|e| self.state_error(e))?;
        let mut kept = Vec::new();
        let mut writes = Vec::new();
        for (((time, key), state_key), stored) in due.into_iter().zip(state_keys).zip(stored) {
            let Some((candidate_time, value)) = stored.as_deref().and_then(candidate_of) else {
                continue;
            };
            if candidate_time != time {
                continue;
            }
            let mut record = Record::from_value(
                value.to_vec(),
                SourcePosition {
                    topic: self.topic,
                    partition: i32::from(key_group::key_group(&key, self.options.max_parallelism)),
                    offset: time,
                },
            );
            record.event_time = Some(time);
            kept.push(record);
            writes.push(StateWrite::Put(state_key, vec![DONE]));
        }
        if !writes.is_empty() {
            self.store.write(writes).map_err(|e| self.state_error(e))?;
        }
        self.timers.flush().map_err(|e| self.state_error(e))?;
        self.emit(kept, out)
    }

    fn has_more_to_fire(&self) -> bool {
        self.more_to_emit
    }

    fn on_barrier(
        &mut self,
        _barrier: &CheckpointBarrier,
        _out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.timers.flush().map_err(|e| self.state_error(e))
    }

    fn finish(&mut self, _out: &mut Collector) -> Result<(), DataflowError> {
        self.timers.flush().map_err(|e| self.state_error(e))
    }
}
