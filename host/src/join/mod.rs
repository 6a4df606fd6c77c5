//! Interval join of two keyed streams on event time.
//!
//! A left record `l` and a right record `r` with the same key join when
//! `l.time + lower <= r.time <= l.time + upper` (e.g. orders and the
//! payments made within 10 minutes of them: `lower = 0`, `upper = 600_000`).
//! Both sides are buffered per key in the operator's state store (RocksDB
//! by default), ordered by key and event time, so that a record's partners
//! are one range read; a buffered record is dropped once the watermark
//! guarantees that no partner for it can still arrive: each buffered
//! record has an expiry timer, kept in the store beside it
//! (`crate::state::timers`, as the window operator's are), so memory
//! holds nothing per buffered record and a restore reads one timer per key
//! group (issue 44: a million buffered records' in-memory expiries and
//! per-key counts were most of a 430 MB heap). New records wait in memory
//! until the next checkpoint barrier (or until they exceed the operator's
//! share of `state_cache_mb`) before they are written: one that expires
//! before then never touches the store. A record at or behind the watermark
//! could miss partners that were already dropped, so it goes to the late
//! output with `late_arrival = true` instead of being joined partially.
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
use crate::metrics::{DeadLetterClass, OperatorMetrics};
use crate::record::{Headers, Record, SourcePosition, Topic};
use crate::state::key_group::{self, KeyGroupRange};
use crate::state::timers::{TimerKind, TimerNamespace, Timers};
use crate::state::{StateError, StateStore, StateWrite};
use sluice_json::fields::{FieldPath, FieldValue, extract};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

mod groups;
mod stored_keys;

use groups::KeyGroups;
use stored_keys::StoredKeys;

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
    /// The key groups this instance owns (all unless the join runs in
    /// several workers): the buffered records it restores from the store.
    pub key_groups: KeyGroupRange,
    /// How many bytes of new records may wait in memory for the next
    /// barrier before they are written to the store.
    pub cache_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Side {
    Left,
    Right,
}

/// A buffered record's expiry timer is of its side's kind.
impl TimerKind for Side {
    const ALL: &'static [Self] = &[Side::Left, Side::Right];

    fn tag(self) -> u8 {
        self as u8
    }
}

/// Which of a key's buffered records an expiry timer is for: its event
/// time and arrival sequence (its store key, with the side and key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Buffered {
    time: i64,
    sequence: u64,
}

impl TimerNamespace for Buffered {
    fn to_bytes(&self) -> [u8; 16] {
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&sortable_time(self.time));
        bytes[8..].copy_from_slice(&self.sequence.to_be_bytes());
        bytes
    }

    fn from_bytes(bytes: [u8; 16]) -> Self {
        let (time, sequence) = bytes.split_at(8);
        Buffered {
            time: time_from_sortable(time.try_into().unwrap_or_default()),
            sequence: u64::from_be_bytes(sequence.try_into().unwrap_or_default()),
        }
    }
}

/// The part of the operator's memory (`cache_bytes`) its filter of stored
/// keys takes: a quarter, between 1 and 64 MiB (3 counters of 4 M per
/// key: ~2 % false "may hold" at a million keys).
fn filter_bytes(cache_bytes: usize) -> usize {
    (cache_bytes / 4).clamp(1 << 20, 64 << 20)
}

/// Records written or deleted in one write batch.
const WRITE_CHUNK: usize = 4096;

/// Memory of a record waiting for the barrier besides its key (twice) and
/// value: its entries in the pending map and the expiry set and their
/// allocations, measured (issue 44: a million records, `state_cache_mb` 0
/// against 64; 160 bytes held 57 MiB for 36).
const PENDING_OVERHEAD_BYTES: usize = 340;
impl Side {
    fn other(self) -> Side {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }

    fn from_byte(byte: u8) -> Option<Side> {
        match byte {
            0 => Some(Side::Left),
            1 => Some(Side::Right),
            _ => None,
        }
    }
}

/// Event time as bytes that sort like the numbers (sign bit flipped).
fn sortable_time(time: i64) -> [u8; 8] {
    ((time as u64) ^ (1 << 63)).to_be_bytes()
}

fn time_from_sortable(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// The start of the store keys of `side`'s records with `key`: key group,
/// side, key length, key.
fn buffer_prefix(max_parallelism: u16, side: Side, key: &[u8]) -> Vec<u8> {
    let group = key_group::key_group(key, max_parallelism);
    let mut prefix = Vec::with_capacity(2 + 1 + 4 + key.len() + 16);
    prefix.extend_from_slice(&group.to_be_bytes());
    prefix.push(side as u8);
    prefix.extend_from_slice(&(key.len() as u32).to_be_bytes());
    prefix.extend_from_slice(key);
    prefix
}

/// A buffered record's store key: its key's prefix, event time, arrival
/// sequence (so records with equal key and time stay distinct).
fn buffer_key(prefix: &[u8], time: i64, sequence: u64) -> Vec<u8> {
    let mut full = Vec::with_capacity(prefix.len() + 16);
    full.extend_from_slice(prefix);
    full.extend_from_slice(&sortable_time(time));
    full.extend_from_slice(&sequence.to_be_bytes());
    full
}

/// The side, key, event time and sequence of a buffered record's store
/// key.
fn parse_buffer_key(full: &[u8]) -> Option<(Side, &[u8], Buffered)> {
    let side = Side::from_byte(*full.get(2)?)?;
    let length = u32::from_be_bytes(full.get(3..7)?.try_into().ok()?) as usize;
    let key = full.get(7..7 + length)?;
    let rest: [u8; 16] = full.get(7 + length..)?.try_into().ok()?;
    Some((side, key, Buffered::from_bytes(rest)))
}

/// Which side a record is on and its join key, read from its value.
#[derive(Clone)]
struct SideClassifier {
    left: JoinSide,
    right: JoinSide,
    /// Per side: the selector field (if selected by a field) and the key
    /// field.
    paths: [(Option<FieldPath>, FieldPath); 2],
}

impl SideClassifier {
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
        for (index, (side, options)) in [(Side::Left, &self.left), (Side::Right, &self.right)]
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
}

/// The interval join operator.
pub struct IntervalJoinOperator {
    options: IntervalJoinOptions,
    classifier: Arc<SideClassifier>,
    store: Arc<dyn StateStore>,
    metrics: Arc<OperatorMetrics>,
    topic: Topic,
    watermark: i64,
    /// Per key group: the last arrival sequence, the latest expiry.
    groups: KeyGroups,
    /// Which sides and keys may have records in the store.
    stored: StoredKeys,
    /// Until the watermark passes this, records restored from the store
    /// may be there that `stored` does not know of.
    restored_until: i64,
    /// Records not written to the store yet, by store key: written at the
    /// next barrier, or when they exceed `cache_bytes`.
    pending: BTreeMap<Vec<u8>, bytes::Bytes>,
    /// Approximate memory of `pending` and `pending_expiries`.
    pending_bytes: usize,
    /// The records of `pending` by the watermark that drops them:
    /// (expiry, store key). Written records have timers in the store.
    pending_expiries: BTreeSet<(i64, Vec<u8>)>,
    /// Expiry timers of written records.
    timers: Timers<Side, Buffered>,
}

impl IntervalJoinOperator {
    /// A join over the operator state `store`, resuming the records the
    /// store holds for its key groups.
    pub fn new(
        options: IntervalJoinOptions,
        store: Arc<dyn StateStore>,
        metrics: Arc<OperatorMetrics>,
    ) -> Result<Self, StateError> {
        let paths_of = |side: &JoinSide| {
            let selector = match &side.selector {
                SideSelector::FieldEquals { field, .. } => Some(FieldPath::parse(field)),
                SideSelector::Topic(_) => None,
            };
            (selector, FieldPath::parse(&side.key_field))
        };
        let classifier = SideClassifier {
            paths: [paths_of(&options.left), paths_of(&options.right)],
            left: options.left.clone(),
            right: options.right.clone(),
        };
        let timers = Timers::new(store.clone(), options.max_parallelism, options.key_groups);
        let mut operator = IntervalJoinOperator {
            classifier: Arc::new(classifier),
            topic: Topic::new(&options.name),
            options,
            store,
            metrics,
            watermark: i64::MIN,
            groups: KeyGroups::default(),
            stored: StoredKeys::new(0),
            restored_until: i64::MIN,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            pending_expiries: BTreeSet::new(),
            timers,
        };
        operator.restore()?;
        Ok(operator)
    }

    /// Finds the expiry timers the store holds for this instance's key
    /// groups (left by an earlier run on the same state directory): one
    /// seek per key group and side. Records buffered by a version that
    /// kept their expiries in memory get their timers once, from a scan.
    fn restore(&mut self) -> Result<(), StateError> {
        self.stored = StoredKeys::new(filter_bytes(self.options.cache_bytes));
        let (groups, restored_until) =
            KeyGroups::restore(self.store.as_ref(), self.options.key_groups)?;
        self.groups = groups;
        self.restored_until = restored_until;
        let queues = self.timers.restore()?;
        if queues > 0 {
            self.metrics
                .add_plugin_counter("timer_queues_restored", queues as u64);
            return Ok(());
        }
        if !self.store.holds_any_of(self.options.key_groups)? {
            return Ok(());
        }
        let mut given = 0;
        for (full, _) in self.store.range_of_key_groups(self.options.key_groups)? {
            let Some((side, key, buffered)) = parse_buffer_key(&full) else {
                continue;
            };
            let group = key_group::key_group(key, self.options.max_parallelism);
            let expiry = self.expiry(side, buffered.time);
            self.groups.written(group, buffered.sequence, expiry);
            self.stored.add(&full[..full.len() - 16]);
            self.timers.set(side, key, &buffered, expiry);
            given += 1;
        }
        tracing::info!(
            operator = %self.options.name,
            records = given,
            "join records without expiry timers (buffered by an earlier version): setting their timers"
        );
        self.metrics
            .add_plugin_counter("records_given_timers", given as u64);
        self.write_pending().map_err(|error| StateError {
            operator: self.options.name.clone(),
            message: error.to_string(),
        })
    }

    fn state_error(&self, error: StateError) -> DataflowError {
        DataflowError::state(&self.options.name, error)
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
        let record = Record {
            read_fields: None,
            key: (!key.is_empty()).then(|| bytes::Bytes::copy_from_slice(key)),
            value: value.into(),
            headers: Headers::new(),
            event_time: Some(time),
            source: SourcePosition {
                topic: self.topic,
                partition: i32::from(key_group::key_group(key, self.options.max_parallelism)),
                offset: 0,
            },
        };
        self.metrics.count_out(&record);
        out.main.push(record);
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

    /// Writes the records waiting in memory to the store, with their
    /// expiry timers and the key groups' last sequences.
    fn write_pending(&mut self) -> Result<(), DataflowError> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_expiries.clear();
        self.pending_bytes = 0;
        let mut writes = Vec::with_capacity(pending.len().min(WRITE_CHUNK));
        for (full, value) in pending {
            if let Some((side, key, buffered)) = parse_buffer_key(&full) {
                let expiry = self.expiry(side, buffered.time);
                let group = key_group::key_group(key, self.options.max_parallelism);
                self.groups.written(group, buffered.sequence, expiry);
                self.stored.add(&full[..full.len() - 16]);
                self.timers.set(side, key, &buffered, expiry);
            }
            writes.push(StateWrite::Put(full, value.to_vec()));
            if writes.len() >= WRITE_CHUNK {
                self.store
                    .write(std::mem::take(&mut writes))
                    .map_err(|e| self.state_error(e))?;
            }
        }
        writes.extend(self.groups.writes());
        if !writes.is_empty() {
            self.store.write(writes).map_err(|e| self.state_error(e))?;
        }
        self.timers.flush().map_err(|e| self.state_error(e))
    }

    /// Writes the records waiting in memory, flushes the state to disk and
    /// measures it for the metrics (at a barrier and at the end).
    fn checkpoint_state(&mut self) -> Result<(), DataflowError> {
        self.write_pending()?;
        let usage = self
            .store
            .flush_and_measure()
            .map_err(|e| self.state_error(e))?;
        self.metrics.set_state_usage(usage);
        Ok(())
    }

    /// Joins one record with the other side's buffered records and buffers
    /// it.
    fn join(
        &mut self,
        side: Side,
        key: Vec<u8>,
        record: Record,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        let time = record.event_time.unwrap_or_default();
        // Partner times: right in [t + lower, t + upper] for a left record,
        // left in [t - upper, t - lower] for a right record.
        let (from, to) = match side {
            Side::Left => (
                time.saturating_add(self.options.lower),
                time.saturating_add(self.options.upper),
            ),
            Side::Right => (
                time.saturating_sub(self.options.upper),
                time.saturating_sub(self.options.lower),
            ),
        };
        let max_parallelism = self.options.max_parallelism;
        let partners_prefix = buffer_prefix(max_parallelism, side.other(), &key);
        let start = buffer_key(&partners_prefix, from, 0);
        let mut end = buffer_key(&partners_prefix, to, u64::MAX);
        end.push(0); // past the last sequence at `to`: the range includes it
        let mut partners: Vec<(Vec<u8>, bytes::Bytes)> = Vec::new();
        if self.watermark < self.restored_until || self.stored.may_hold(&partners_prefix) {
            partners = self
                .store
                .range(&start, Some(&end))
                .map_err(|e| self.state_error(e))?
                .into_iter()
                .map(|(k, v)| (k, bytes::Bytes::from(v)))
                .collect();
        }
        partners.extend(
            self.pending
                .range(start..end)
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        partners.sort_by(|a, b| a.0.cmp(&b.0));
        for (partner_key, partner) in partners {
            let Some((_, _, buffered)) = parse_buffer_key(&partner_key) else {
                continue;
            };
            let joined_time = time.max(buffered.time);
            match side {
                Side::Left => self.emit(&key, &record.value, &partner, joined_time, out),
                Side::Right => self.emit(&key, &partner, &record.value, joined_time, out),
            }
        }
        let group = key_group::key_group(&key, max_parallelism);
        let sequence = self.groups.next_sequence(group);
        let own = buffer_key(&buffer_prefix(max_parallelism, side, &key), time, sequence);
        self.pending_expiries
            .insert((self.expiry(side, time), own.clone()));
        self.pending_bytes += 2 * own.len() + record.value.len() + PENDING_OVERHEAD_BYTES;
        self.pending.insert(own, record.value);
        Ok(())
    }
}

impl Operator for IntervalJoinOperator {
    fn name(&self) -> &str {
        &self.options.name
    }

    fn partitioner(&self) -> Option<crate::dataflow::Partitioner> {
        let classifier = self.classifier.clone();
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
        self.metrics.count_in(&batch);
        for record in batch {
            let time = match crate::time::checked_event_time(&record) {
                Ok(time) => time,
                Err(reason) => {
                    out.dead_letter(
                        record,
                        DeadLetterClass::Invalid,
                        &reason,
                        &self.options.name,
                        None,
                        &self.metrics,
                    );
                    continue;
                }
            };
            match self.classifier.classify(&record) {
                // Neither side: not an input of the join (counted, not
                // passed on).
                Ok(None) => self
                    .metrics
                    .add_plugin_counter("records_on_neither_side", 1),
                // Behind the watermark: partners it should meet may already
                // have been dropped, so it is late rather than half-joined.
                Ok(Some(_)) if time <= self.watermark => self.late(record, out),
                Ok(Some((side, key))) => self.join(side, key, record, out)?,
                Err(reason) => out.dead_letter(
                    record,
                    DeadLetterClass::Invalid,
                    &reason,
                    &self.options.name,
                    None,
                    &self.metrics,
                ),
            }
        }
        if self.pending_bytes
            > self
                .options
                .cache_bytes
                .saturating_sub(filter_bytes(self.options.cache_bytes))
        {
            self.write_pending()?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, _out: &mut Collector) -> Result<(), DataflowError> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        // Records never written: nothing to delete.
        while let Some((expiry, _)) = self.pending_expiries.first() {
            if *expiry > watermark {
                break;
            }
            if let Some((_, full)) = self.pending_expiries.pop_first()
                && let Some(value) = self.pending.remove(&full)
            {
                self.pending_bytes = self
                    .pending_bytes
                    .saturating_sub(2 * full.len() + value.len() + PENDING_OVERHEAD_BYTES);
            }
        }
        // Written records: their timers say which.
        let max_parallelism = self.options.max_parallelism;
        let mut deletes = Vec::new();
        for &side in Side::ALL {
            while let Some((_, key, buffered)) = self
                .timers
                .next_due(side, watermark)
                .map_err(|e| self.state_error(e))?
            {
                let prefix = buffer_prefix(max_parallelism, side, &key);
                let group = key_group::key_group(&key, max_parallelism);
                if self.groups.written_by_this_run(group, buffered.sequence) {
                    self.stored.remove(&prefix);
                }
                deletes.push(StateWrite::Delete(buffer_key(
                    &prefix,
                    buffered.time,
                    buffered.sequence,
                )));
                if deletes.len() >= WRITE_CHUNK {
                    self.store
                        .write(std::mem::take(&mut deletes))
                        .map_err(|e| self.state_error(e))?;
                }
            }
        }
        if !deletes.is_empty() {
            self.store.write(deletes).map_err(|e| self.state_error(e))?;
        }
        self.timers.flush().map_err(|e| self.state_error(e))
    }

    fn on_barrier(
        &mut self,
        _barrier: &CheckpointBarrier,
        _out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.checkpoint_state()
    }

    fn finish(&mut self, _out: &mut Collector) -> Result<(), DataflowError> {
        self.checkpoint_state()
    }
}
