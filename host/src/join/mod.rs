//! Interval join of two keyed streams on event time.
//!
//! A left record `l` and a right record `r` with the same key join when
//! `l.time + lower <= r.time <= l.time + upper` (e.g. orders and the
//! payments made within 10 minutes of them: `lower = 0`, `upper = 600_000`).
//! Both sides are buffered per key in the operator's state; a buffered
//! record is dropped once the watermark guarantees that no partner for it
//! can still arrive. A record at or behind the watermark could miss
//! partners that were already dropped, so it goes to the late output with
//! `late_arrival = true` instead of being joined partially.
//!
//! The two streams come from one source: each record is assigned to a side
//! by its topic (two Kafka topics, for instance) or by a field value (one
//! Nexmark stream of persons and auctions). Records on neither side are not
//! inputs of the join: they are counted (`records_on_neither_side`) and not
//! passed on.
//!
//! A joined record's value is `{"left": <left value>, "right": <right
//! value>}`, its key the join key, its event time the later of the two.

use crate::dataflow::LateOutput;
use crate::dataflow::{CheckpointBarrier, Collector, DataflowError, Operator};
use crate::metrics::{OperatorMetrics, add};
use crate::record::{Record, SourcePosition};
use crate::state::key_group;
use crate::state::{StateError, StateStore, StateWrite};
use crate::window::fields::{FieldPath, FieldValue, extract};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Which records belong to a side.
#[derive(Debug, Clone, PartialEq)]
pub enum SideSelector {
    /// Records read from this topic (or file).
    Topic(String),
    /// Records whose field has this string value.
    FieldEquals {
        /// The field (`event_type`, `a.b`, a JSON pointer).
        field: String,
        /// The value it must have.
        value: String,
    },
}

/// One side of the join.
#[derive(Debug, Clone)]
pub struct JoinSide {
    /// Which records are on this side.
    pub selector: SideSelector,
    /// The field holding the join key.
    pub key_field: String,
}

/// Settings of an [`IntervalJoinOperator`].
#[derive(Debug, Clone)]
pub struct IntervalJoinOptions {
    /// Operator name.
    pub name: String,
    /// The left stream.
    pub left: JoinSide,
    /// The right stream.
    pub right: JoinSide,
    /// Lower bound of `right.time - left.time`, ms (may be negative).
    pub lower: i64,
    /// Upper bound of `right.time - left.time`, ms.
    pub upper: i64,
    /// Where late records go.
    pub late_output: LateOutput,
    /// Key groups of the state.
    pub max_parallelism: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    Left,
    Right,
}

/// A buffered record: (key, event time, arrival sequence) -> record value.
type BufferKey = (Vec<u8>, i64, u64);

#[derive(Debug, Clone)]
struct Buffered {
    value: bytes::Bytes,
    persisted: bool,
    dirty: bool,
}

/// The interval join operator.
pub struct IntervalJoinOperator {
    options: IntervalJoinOptions,
    paths: [(Option<FieldPath>, FieldPath); 2],
    store: Arc<dyn StateStore>,
    metrics: Arc<OperatorMetrics>,
    topic: Arc<str>,
    watermark: i64,
    sequence: u64,
    left: BTreeMap<BufferKey, Buffered>,
    right: BTreeMap<BufferKey, Buffered>,
    /// Buffered records by the watermark that drops them.
    expiries: std::collections::BTreeSet<(i64, Side, BufferKey)>,
}

impl IntervalJoinOperator {
    /// A join over the operator state `store`.
    pub fn new(
        options: IntervalJoinOptions,
        store: Arc<dyn StateStore>,
        metrics: Arc<OperatorMetrics>,
    ) -> Self {
        let paths_of = |side: &JoinSide| {
            let selector = match &side.selector {
                SideSelector::FieldEquals { field, .. } => Some(FieldPath::parse(field)),
                SideSelector::Topic(_) => None,
            };
            (selector, FieldPath::parse(&side.key_field))
        };
        IntervalJoinOperator {
            paths: [paths_of(&options.left), paths_of(&options.right)],
            topic: Arc::from(options.name.as_str()),
            options,
            store,
            metrics,
            watermark: i64::MIN,
            sequence: 0,
            left: BTreeMap::new(),
            right: BTreeMap::new(),
            expiries: std::collections::BTreeSet::new(),
        }
    }

    fn state_error(&self, error: StateError) -> DataflowError {
        DataflowError::Operator {
            name: self.options.name.clone(),
            message: error.to_string(),
        }
    }

    /// The side and key of `record`; `Ok(None)` if it belongs to neither
    /// side.
    fn classify(&self, record: &Record) -> Result<Option<(Side, Vec<u8>)>, String> {
        // Every field either side may need, read from the value in one pass
        // (and only if a field is needed at all).
        let mut wanted: Vec<&FieldPath> = Vec::with_capacity(4);
        let mut slot_of = |path| match wanted.iter().position(|p| *p == path) {
            Some(slot) => slot,
            None => {
                wanted.push(path);
                wanted.len() - 1
            }
        };
        let mut slots = [(None, 0); 2];
        for (index, (selector, key)) in self.paths.iter().enumerate() {
            let selector_slot = selector.as_ref().map(&mut slot_of);
            slots[index] = (selector_slot, slot_of(key));
        }
        let mut fields: Option<Vec<Option<FieldValue>>> = None;
        let read = |fields: &mut Option<Vec<Option<FieldValue>>>| -> Result<(), String> {
            if fields.is_none() {
                *fields = Some(extract(&record.value, &wanted)?);
            }
            Ok(())
        };
        for (index, (side, options)) in [
            (Side::Left, &self.options.left),
            (Side::Right, &self.options.right),
        ]
        .into_iter()
        .enumerate()
        {
            let (selector_slot, key_slot) = slots[index];
            let selected = match (&options.selector, selector_slot) {
                (SideSelector::Topic(topic), _) => *record.source.topic == **topic,
                (SideSelector::FieldEquals { value, .. }, Some(slot)) => {
                    read(&mut fields)?;
                    matches!(
                        fields.as_ref().and_then(|f| f[slot].as_ref()),
                        Some(FieldValue::Str(found)) if found == value
                    )
                }
                (SideSelector::FieldEquals { .. }, None) => false,
            };
            if !selected {
                continue;
            }
            read(&mut fields)?;
            return match fields.as_ref().and_then(|f| f[key_slot].as_ref()) {
                Some(key) => Ok(Some((side, key.key_bytes()))),
                None => Err(format!("join key field `{}` is missing", options.key_field)),
            };
        }
        Ok(None)
    }

    /// The last event time a record of `side` at `time` can still meet a
    /// partner at: after the watermark passes it, the record is dropped.
    fn expiry(&self, side: Side, time: i64) -> i64 {
        match side {
            // A left record meets right records up to time + upper.
            Side::Left => time.saturating_add(self.options.upper),
            // A right record meets left records from time - upper to
            // time - lower; it is needed while left records up to
            // time - lower can arrive.
            Side::Right => time.saturating_sub(self.options.lower),
        }
    }

    fn emit(&self, key: &[u8], left: &[u8], right: &[u8], time: i64, out: &mut Collector) {
        let mut value = Vec::with_capacity(left.len() + right.len() + 20);
        value.extend_from_slice(b"{\"left\":");
        value.extend_from_slice(left);
        value.extend_from_slice(b",\"right\":");
        value.extend_from_slice(right);
        value.push(b'}');
        add(&self.metrics.records_out, 1);
        out.main.push(Record {
            key: (!key.is_empty()).then(|| bytes::Bytes::copy_from_slice(key)),
            value: value.into(),
            headers: Vec::new(),
            event_time: Some(time),
            source: SourcePosition {
                topic: self.topic.clone(),
                partition: i32::from(key_group::key_group(key, self.options.max_parallelism)),
                offset: 0,
            },
        });
    }

    fn late(&self, record: Record, out: &mut Collector) {
        let reason = format!(
            "late arrival: event time {} can no longer be joined (watermark {})",
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

    fn store_key(&self, side: Side, key: &BufferKey) -> Vec<u8> {
        let (k, time, sequence) = key;
        let group = key_group::key_group(k, self.options.max_parallelism);
        let mut full = Vec::with_capacity(2 + 1 + 4 + k.len() + 16);
        full.extend_from_slice(&group.to_be_bytes());
        full.push(side as u8);
        full.extend_from_slice(&(k.len() as u32).to_be_bytes());
        full.extend_from_slice(k);
        full.extend_from_slice(&time.to_be_bytes());
        full.extend_from_slice(&sequence.to_be_bytes());
        full
    }

    /// Writes buffered records not yet in the store.
    fn flush(&mut self) -> Result<(), DataflowError> {
        let mut writes = Vec::new();
        for side in [Side::Left, Side::Right] {
            let keys: Vec<BufferKey> = self
                .buffer(side)
                .iter()
                .filter(|(_, b)| b.dirty)
                .map(|(k, _)| k.clone())
                .collect();
            for key in keys {
                let full = self.store_key(side, &key);
                if let Some(buffered) = self.buffer_mut(side).get_mut(&key) {
                    buffered.dirty = false;
                    buffered.persisted = true;
                    writes.push(StateWrite::Put(full, buffered.value.to_vec()));
                }
            }
        }
        if !writes.is_empty() {
            self.store.write(writes).map_err(|e| self.state_error(e))?;
        }
        let usage = self.store.usage().map_err(|e| self.state_error(e))?;
        self.metrics.set_state_usage(usage.bytes, usage.keys);
        Ok(())
    }

    fn buffer(&self, side: Side) -> &BTreeMap<BufferKey, Buffered> {
        match side {
            Side::Left => &self.left,
            Side::Right => &self.right,
        }
    }

    fn buffer_mut(&mut self, side: Side) -> &mut BTreeMap<BufferKey, Buffered> {
        match side {
            Side::Left => &mut self.left,
            Side::Right => &mut self.right,
        }
    }

    /// Joins one record with the other side's buffer and buffers it.
    fn join(&mut self, side: Side, key: Vec<u8>, record: Record, out: &mut Collector) {
        let time = record.event_time.unwrap_or_default();
        // Partner times: right in [t + lower, t + upper] for a left record,
        // left in [t - upper, t - lower] for a right record.
        let (from, to, partners) = match side {
            Side::Left => (
                time.saturating_add(self.options.lower),
                time.saturating_add(self.options.upper),
                &self.right,
            ),
            Side::Right => (
                time.saturating_sub(self.options.upper),
                time.saturating_sub(self.options.lower),
                &self.left,
            ),
        };
        let matches: Vec<(i64, bytes::Bytes)> = partners
            .range((key.clone(), from, 0)..=(key.clone(), to, u64::MAX))
            .map(|((_, t, _), b)| (*t, b.value.clone()))
            .collect();
        for (partner_time, partner) in matches {
            let joined_time = time.max(partner_time);
            match side {
                Side::Left => self.emit(&key, &record.value, &partner, joined_time, out),
                Side::Right => self.emit(&key, &partner, &record.value, joined_time, out),
            }
        }
        self.sequence += 1;
        let sequence = self.sequence;
        self.expiries
            .insert((self.expiry(side, time), side, (key.clone(), time, sequence)));
        self.buffer_mut(side).insert(
            (key, time, sequence),
            Buffered {
                value: record.value,
                persisted: false,
                dirty: true,
            },
        );
    }
}

impl Operator for IntervalJoinOperator {
    fn name(&self) -> &str {
        &self.options.name
    }

    fn partitioner(&self) -> Option<crate::dataflow::Partitioner> {
        // Classifying needs only the options and field paths: a copy of the
        // operator's, without its buffers.
        let classifier = IntervalJoinOperator::new(
            self.options.clone(),
            self.store.clone(),
            OperatorMetrics::new(""),
        );
        Some(Arc::new(move |record: &Record| {
            classifier
                .classify(record)
                .ok()
                .flatten()
                .map(|(_, key)| key)
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
        for record in batch {
            let Some(time) = record.event_time else {
                out.dead_letter(
                    record,
                    "record has no event time",
                    &self.options.name,
                    None,
                    &self.metrics,
                );
                continue;
            };
            match self.classify(&record) {
                // Neither side: not an input of the join (counted, not
                // passed on).
                Ok(None) => self
                    .metrics
                    .add_plugin_counter("records_on_neither_side", 1),
                // Behind the watermark: partners it should meet may already
                // have been dropped, so it is late rather than half-joined.
                Ok(Some(_)) if time <= self.watermark => self.late(record, out),
                Ok(Some((side, key))) => self.join(side, key, record, out),
                Err(reason) => {
                    out.dead_letter(record, &reason, &self.options.name, None, &self.metrics)
                }
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, _out: &mut Collector) -> Result<(), DataflowError> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        let mut deletes = Vec::new();
        while let Some((expiry, side, key)) = self.expiries.first().cloned() {
            if expiry > watermark {
                break;
            }
            self.expiries.pop_first();
            if let Some(buffered) = self.buffer_mut(side).remove(&key)
                && buffered.persisted
            {
                deletes.push(StateWrite::Delete(self.store_key(side, &key)));
            }
        }
        if !deletes.is_empty() {
            self.store.write(deletes).map_err(|e| self.state_error(e))?;
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
