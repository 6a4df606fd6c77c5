//! Adding a batch's records to their windows: group by group for
//! tumbling and sliding windows (in memory, or as merge operands to windows
//! kept only in the store), record by record for session windows, which
//! merge as they grow.

use super::Group;
use super::WindowOperator;
use super::timing::TimerKind;
use crate::dataflow::Collector;
use crate::dataflow::DataflowError;
use crate::record::Record;
use crate::window::Window;
use crate::window::aggregate::GroupAdd;
use crate::window::states::WindowState;
use sluice_json::fields::FieldValue;
use std::collections::BTreeMap;

/// Where a batch's records for one window are added.
#[derive(Debug, Clone, Copy)]
enum AddTarget {
    /// To the window's accumulator in memory.
    Cached,
    /// To a new window's accumulator, put in memory.
    NewInMemory,
    /// To a partial accumulator folded into the window's state in the
    /// store (a merge operand): the window is not in memory.
    Store,
}

impl WindowOperator {
    /// Adds records (of one key and window) to the window; a window that
    /// has already fired re-fires once per record.
    pub(super) fn add_to_window(
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
            .states
            .contains(key, window)
            .map_err(|e| self.state_error(e))?;
        let mut accepted = 0;
        let mut offset = 0;
        for chunk in chunks {
            let state = self.state_mut(key, window)?;
            let mut accumulator = std::mem::take(&mut state.accumulator);
            let previous_len = accumulator.len();
            let added = self.aggregator.add(&mut accumulator, chunk);
            self.states
                .put_accumulator(key, window, accumulator, previous_len);
            let failed = added.map_err(|e| self.aggregate_error(e))?;
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

    /// Adds a batch's records to windows that have not fired yet, all in
    /// one [`Aggregator::add_groups`] call: `groups` are keys and windows
    /// with their records' indices in `batch` as a range of `order`
    /// (arrival order); `fields` holds each record's values of
    /// `record_fields` (see [`Self::process_batch`]).
    pub(super) fn add_to_waiting_windows(
        &mut self,
        batch: &[Record],
        fields: &[Option<FieldValue>],
        order: &[usize],
        groups: Vec<Group<'_>>,
        rejected: &mut BTreeMap<usize, String>,
    ) -> Result<(), DataflowError> {
        // Windows kept only in the store take the batch's records as a
        // partial accumulator folded in by the store, where it can (built-in
        // aggregates): no read. Otherwise they are read back first, all
        // with one lookup.
        let merges = self.states.merges();
        if !merges {
            self.states
                .prefetch(groups.iter().map(|group| (group.key, group.window)))
                .map_err(|e| self.state_error(e))?;
        }
        // The aggregate's fields of record `i`: after the key field.
        let stride = self.record_fields.len();
        let first = self.key_only_fields;
        let hand_fields = stride > first;
        // Every group's records and fields, group after group, in `order`:
        // each group takes its range of these two lists.
        let records: Vec<&Record> = order.iter().map(|&i| &batch[i]).collect();
        let record_fields: Vec<&[Option<FieldValue>]> = if hand_fields {
            order
                .iter()
                .map(|&i| &fields[i * stride + first..(i + 1) * stride])
                .collect()
        } else {
            Vec::new()
        };
        let mut adds = Vec::with_capacity(groups.len());
        let mut targets = Vec::with_capacity(groups.len());
        let mut previous_lens = Vec::with_capacity(groups.len());
        // Windows in memory or in the mini-batch first; the others are
        // looked up together below.
        let mut taken: Vec<Option<(Vec<u8>, AddTarget)>> = Vec::with_capacity(groups.len());
        for group in &groups {
            taken.push(if merges {
                match self.states.take_cached_accumulator(group.key, group.window) {
                    Some(accumulator) => Some((accumulator, AddTarget::Cached)),
                    None => self
                        .states
                        .take_partial(group.key, group.window)
                        .map(|partial| (partial, AddTarget::Store)),
                }
            } else {
                let found = self
                    .states
                    .take_accumulator(group.key, group.window)
                    .map_err(|e| self.state_error(e))?;
                found.map(|accumulator| (accumulator, AddTarget::Cached))
            });
        }
        // While memory has room, new windows go there: one batched lookup
        // tells them from windows the store holds (without reading those
        // into memory). Past the budget nothing is looked up: any other
        // window takes a partial accumulator folded in by the store (one
        // per mini-batch), without a read, and, as it may be new, has its
        // timers set (setting a timer twice is harmless).
        let unknown = groups
            .iter()
            .zip(&taken)
            .filter(|(_, taken)| taken.is_none())
            .map(|(group, _)| (group.key, group.window));
        let room = !merges || self.states.has_room();
        let absent = match merges && room {
            true => self
                .states
                .absent(unknown)
                .map_err(|e| self.state_error(e))?,
            false => Default::default(),
        };
        for (group, taken) in groups.iter().zip(taken) {
            let (accumulator, target) = match taken {
                Some(taken) => taken,
                // Not in the store either (without merges, `take_accumulator`
                // looked).
                None if !merges || absent.contains(&(group.key, group.window)) => (
                    self.new_window(group.key, group.window)?,
                    AddTarget::NewInMemory,
                ),
                None => {
                    if !room {
                        self.set_timers(group.key, group.window);
                    }
                    (self.empty_accumulator()?, AddTarget::Store)
                }
            };
            targets.push(target);
            previous_lens.push(accumulator.len());
            adds.push(GroupAdd {
                accumulator,
                records: &records[group.members.clone()],
                fields: if hand_fields {
                    &record_fields[group.members.clone()]
                } else {
                    &[]
                },
                rejected: Vec::new(),
            });
        }
        let result = self.aggregator.add_groups(&mut adds);
        let outcomes = groups.iter().zip(adds).zip(targets).zip(previous_lens);
        for (((group, add), target), previous_len) in outcomes {
            let (key, window) = (group.key, group.window);
            let indices = &order[group.members.clone()];
            let accepted = add.records.len().saturating_sub(add.rejected.len());
            for (index, reason) in add.rejected {
                if let Some(&at) = indices.get(index) {
                    rejected.entry(at).or_insert(reason);
                }
            }
            match (target, accepted) {
                // Every record was rejected: a new window never had any
                // content. It has timers and no state.
                (AddTarget::NewInMemory, 0) => self.forget_timers(key, window),
                // A window in the store (or not: its timers then find no
                // state, which is harmless) takes no partial.
                (AddTarget::Store, 0) => {}
                (AddTarget::Store, _) => {
                    self.states.merge_into_store(key, window, add.accumulator);
                }
                (AddTarget::NewInMemory, _) => {
                    self.states
                        .insert(key, window, WindowState::new(add.accumulator));
                }
                (AddTarget::Cached, _) => {
                    self.states
                        .put_accumulator(key, window, add.accumulator, previous_len);
                }
            }
        }
        result.map_err(|e| self.aggregate_error(e))
    }

    /// Session windows: the record's `[t, t + gap)` merges with every
    /// session of its key it touches.
    pub(super) fn add_to_session(
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
            .states
            .windows_of(key)
            .map_err(|e| self.state_error(e))?
            .into_iter()
            .filter(|w| w.intersects(&merged))
            .collect();
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
        state.emitted = emitted;
        let previous_len = state.accumulator.len();
        if let Some(accumulator) = accumulator {
            self.states
                .put_accumulator(key, merged, accumulator, previous_len);
        }
        if emitted > 0 {
            // A session that had fired became a new (larger) window: it is
            // no longer waiting to fire for the first time.
            self.timers
                .remove(TimerKind::Fire, key, &merged, merged.max_timestamp());
        }
        self.add_to_window(key, merged, &[record], rejected, &[index], out)?;
        Ok(true)
    }
}
