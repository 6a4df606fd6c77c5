//! The transform operator: a plugin called on batches, with fault isolation.

use super::{Collector, DataflowError, Operator};
use crate::metrics::{DeadLetterClass, OperatorMetrics, add, record_bytes};
use crate::record::Record;
use crate::runtime::{
    BatchResult, Emit, EmitRoute, FaultKind, PluginFault, PluginInstance, SwappablePlugin,
};
use crate::time::check_event_time;
use std::sync::Arc;
use std::time::Duration;

/// What a transform operator does once its plugin has faulted on
/// [`FaultPolicy::storm_threshold`] records in a row (a fault storm).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnFaultStorm {
    /// Stop retrying record by record: a batch that faults is dead-lettered
    /// whole, with the fault as the reason, until a batch succeeds again.
    /// A storm then costs one call and one re-instantiation per batch
    /// instead of one per record.
    #[default]
    DeadLetter,
    /// Stop the operator (and the pipeline) with a report: the records of
    /// the current batch not yet processed are named in the error and,
    /// with checkpoints, replayed by the next run.
    Stop,
}

/// How a transform operator handles plugin faults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FaultPolicy {
    /// Records faulting in a row that make a fault storm.
    pub storm_threshold: u64,
    /// What to do in a storm.
    pub on_storm: OnFaultStorm,
    /// Attempts at re-instantiating the plugin after a fault before the
    /// operator fails.
    pub reinstantiate_attempts: u32,
    /// Wait after the first failed attempt, doubled after each further one.
    pub reinstantiate_backoff: Duration,
}

impl Default for FaultPolicy {
    fn default() -> Self {
        FaultPolicy {
            storm_threshold: 64,
            on_storm: OnFaultStorm::DeadLetter,
            reinstantiate_attempts: 5,
            reinstantiate_backoff: Duration::from_millis(20),
        }
    }
}

impl FaultPolicy {
    /// Sets [`FaultPolicy::storm_threshold`].
    pub fn storm_threshold(mut self, records: u64) -> Self {
        self.storm_threshold = records.max(1);
        self
    }

    /// Sets [`FaultPolicy::on_storm`].
    pub fn on_storm(mut self, action: OnFaultStorm) -> Self {
        self.on_storm = action;
        self
    }
}

/// Runs a transform plugin on every batch.
///
/// When a batch call faults (trap, CPU deadline, memory limit, broken
/// output), the instance is re-created and the batch retried record by
/// record: records that fault alone go to the dead-letter output with the
/// fault as the reason, the others proceed. After
/// [`FaultPolicy::storm_threshold`] faulting records in a row the circuit
/// opens ([`OnFaultStorm`]); the first batch that succeeds closes it.
/// Nothing a plugin does stops the pipeline, except failing to
/// re-instantiate at all (after retries with backoff) or a storm under
/// [`OnFaultStorm::Stop`].
pub struct TransformOperator {
    name: String,
    plugin_label: String,
    instance: PluginInstance,
    metrics: Arc<OperatorMetrics>,
    policy: FaultPolicy,
    /// Records that faulted in a row (reset by any record that did not).
    faults_in_a_row: u64,
    /// Where plugin swaps come from.
    swap: Option<super::swap::SwapPort>,
    /// The JSON fields the plugin (as loaded) reads on the projected path.
    projects_fields: Option<Arc<[String]>>,
}

impl TransformOperator {
    /// A failing state backend is neither the plugin's fault nor the
    /// record's: the operator stops (and with it the pipeline) instead of
    /// dead-lettering records.
    fn stop_on_state_failure(&self, fault: &PluginFault) -> Result<(), DataflowError> {
        if fault.kind == FaultKind::State {
            return Err(DataflowError::Plugin {
                operator: self.name.clone(),
                source: fault.clone(),
            });
        }
        Ok(())
    }

    /// Wraps a plugin instance as the operator `name`. `metrics` must be the
    /// counters the instance reports plugin counters to.
    pub fn new(
        name: impl Into<String>,
        mut instance: PluginInstance,
        metrics: Arc<OperatorMetrics>,
    ) -> Self {
        TransformOperator {
            name: name.into(),
            plugin_label: instance.component().label(),
            projects_fields: instance.projects_fields(),
            instance,
            metrics,
            policy: FaultPolicy::default(),
            faults_in_a_row: 0,
            swap: None,
        }
    }

    /// Takes plugin swaps from `swap`.
    pub fn with_swaps(mut self, swap: super::swap::SwapPort) -> Self {
        self.swap = Some(swap);
        self
    }

    /// At a barrier: swaps in a new plugin version if one is due here.
    fn apply_due_swap(&mut self, barrier: u64) {
        let Some(swap) = &mut self.swap else {
            return;
        };
        if swap.apply_due(&self.name, barrier, &mut self.instance) {
            self.plugin_label = self.instance.running().label();
            self.faults_in_a_row = 0;
        }
    }

    /// Replaces the default [`FaultPolicy`].
    pub fn with_fault_policy(mut self, policy: FaultPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Whether the plugin is in a fault storm (the circuit is open).
    pub fn in_fault_storm(&self) -> bool {
        self.faults_in_a_row >= self.policy.storm_threshold
    }

    /// Flushes the plugin's keyed state and measures it for the metrics.
    fn report_state_usage(&self) -> Result<(), DataflowError> {
        let usage = self
            .instance
            .flush_state()
            .map_err(|error| DataflowError::state(&self.name, error))?;
        self.metrics.set_state_usage(usage);
        Ok(())
    }

    /// Re-creates the plugin instance after a fault, retrying with backoff;
    /// `unprocessed` records of the current batch are named in the error if
    /// it cannot be done.
    fn reinstantiate(&mut self, unprocessed: usize) -> Result<(), DataflowError> {
        add(&self.metrics.reinstantiations, 1);
        let mut wait = self.policy.reinstantiate_backoff;
        let mut attempt = 1;
        loop {
            match self.instance.reinstantiate() {
                Ok(()) => return Ok(()),
                Err(error) if attempt < self.policy.reinstantiate_attempts => {
                    tracing::warn!(operator = %self.name, plugin = %self.plugin_label, %error,
                        attempt, retry_in = ?wait, "cannot re-instantiate the plugin; retrying");
                    std::thread::sleep(wait);
                    wait = wait.saturating_mul(2);
                    attempt += 1;
                }
                Err(error) => {
                    return Err(DataflowError::Operator {
                        name: self.name.clone(),
                        message: format!(
                            "{error} (after {attempt} attempts); {unprocessed} records of the current batch were not processed (with checkpoints, the next run processes them again)"
                        ),
                    });
                }
            }
        }
    }

    /// A record processed without a fault ends a run of faults (and a
    /// storm).
    fn record_succeeded(&mut self) {
        if self.in_fault_storm() {
            tracing::info!(operator = %self.name, plugin = %self.plugin_label,
                faulted = self.faults_in_a_row, "the plugin processes records again: the fault storm is over");
        }
        self.faults_in_a_row = 0;
    }

    /// Counts `records` faulting records; reports a storm as it begins.
    fn records_faulted(&mut self, records: usize, fault: &PluginFault) {
        add(&self.metrics.faulted_records, records as u64);
        let before = self.in_fault_storm();
        self.faults_in_a_row = self.faults_in_a_row.saturating_add(records as u64);
        if !before && self.in_fault_storm() {
            tracing::error!(operator = %self.name, plugin = %self.plugin_label, %fault,
                faulted = self.faults_in_a_row, action = ?self.policy.on_storm,
                "fault storm: the plugin faulted on every one of the last records");
        }
    }

    /// The error that stops the operator in a storm under
    /// [`OnFaultStorm::Stop`].
    fn storm_stop(&self, fault: &str, unprocessed: usize) -> DataflowError {
        DataflowError::Operator {
            name: self.name.clone(),
            message: format!(
                "fault storm: the plugin faulted on {} records in a row (last: {fault}); stopping as `on_fault_storm = \"stop\"` asks; {unprocessed} records of the current batch were not processed (with checkpoints, the next run processes them again)",
                self.faults_in_a_row
            ),
        }
    }

    /// `records` during a storm: one call for all of them; if it faults,
    /// they are all dead-lettered with the fault as the reason.
    fn process_in_storm(
        &mut self,
        records: &[Record],
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        if self.policy.on_storm == OnFaultStorm::Stop {
            return Err(self.storm_stop("-", records.len()));
        }
        let fault = match self.instance.call_batch(records) {
            Ok(result) => {
                self.record_succeeded();
                self.route(records, result, out);
                return Ok(());
            }
            Err(fault) => fault,
        };
        self.stop_on_state_failure(&fault)?;
        self.metrics.count_fault(fault.kind, &fault.message);
        self.records_faulted(records.len(), &fault);
        self.reinstantiate(records.len())?;
        let reason = format!(
            "{fault} (fault storm: the plugin faulted on {} records in a row, so its batches are not retried record by record)",
            self.faults_in_a_row
        );
        for record in records {
            self.dead_letter(record.clone(), DeadLetterClass::PluginFault, &reason, out);
        }
        Ok(())
    }

    fn route(&self, batch: &[Record], result: BatchResult, out: &mut Collector) {
        let BatchResult {
            records,
            emits,
            failed,
        } = result;
        let valid_time = |record: &Record| {
            record
                .event_time
                .is_none_or(|t| check_event_time(t).is_ok())
        };
        if out.main.is_empty()
            && emits.iter().all(|emit| emit.route == EmitRoute::Main)
            && records.iter().all(valid_time)
        {
            // The common case: every record to the main output, which takes
            // the list as it is.
            self.metrics
                .count_out_many(records.len() as u64, record_bytes(&records));
            out.main = records;
        } else {
            self.route_each(records, emits, out);
        }
        for (index, reason) in failed {
            if let Some(record) = batch.get(index) {
                self.dead_letter(record.clone(), DeadLetterClass::Rejected, &reason, out);
            }
        }
    }

    /// Routes emitted records one by one (some go elsewhere than the main
    /// output, or carry an event time out of range).
    fn route_each(&self, records: Vec<Record>, emits: Vec<Emit>, out: &mut Collector) {
        out.main.reserve(records.len());
        // Counted once per batch: two atomic adds per record were a few
        // percent of a cheap plugin's record.
        let (mut main_records, mut main_bytes) = (0, 0);
        for (record, emit) in records.into_iter().zip(emits) {
            if let Some(Err(reason)) = record.event_time.map(check_event_time) {
                self.dead_letter(
                    record,
                    DeadLetterClass::Invalid,
                    &format!("the plugin emitted a record whose {reason}"),
                    out,
                );
                continue;
            }
            match emit.route {
                EmitRoute::Main => {
                    main_records += 1;
                    main_bytes += record_bytes(std::slice::from_ref(&record));
                    out.main.push(record);
                }
                EmitRoute::Side(name) => {
                    add(&self.metrics.side_out, 1);
                    out.side.push((name, record));
                }
                EmitRoute::DeadLetter(reason) => {
                    self.dead_letter(record, DeadLetterClass::Rejected, &reason, out)
                }
            }
        }
        self.metrics.count_out_many(main_records, main_bytes);
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
            &self.name,
            Some(&self.plugin_label),
            &self.metrics,
        );
    }
}

impl Operator for TransformOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn metrics(&self) -> &Arc<OperatorMetrics> {
        &self.metrics
    }

    fn projects_fields(&self) -> Option<Arc<[String]>> {
        self.projects_fields.clone()
    }

    fn process_batch(
        &mut self,
        batch: Vec<Record>,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.metrics.count_in(&batch);
        if self.in_fault_storm() {
            return self.process_in_storm(&batch, out);
        }
        if self.instance.grew_near_memory_limit() {
            // Replaced before it fails a batch at its memory limit.
            tracing::debug!(operator = %self.name, plugin = %self.plugin_label,
                "plugin memory grew near its limit since its first batch; replacing the instance between batches");
            self.reinstantiate(batch.len())?;
        }
        let fault = match self.instance.call_batch(&batch) {
            Ok(result) => {
                if !batch.is_empty() {
                    self.record_succeeded();
                }
                self.route(&batch, result, out);
                return Ok(());
            }
            Err(fault) => fault,
        };
        self.stop_on_state_failure(&fault)?;
        self.metrics.count_fault(fault.kind, &fault.message);
        tracing::warn!(operator = %self.name, plugin = %self.plugin_label, %fault,
            records = batch.len(), "plugin faulted on a batch; retrying record by record");
        self.reinstantiate(batch.len())?;
        for (index, record) in batch.iter().enumerate() {
            if self.in_fault_storm() {
                return match self.policy.on_storm {
                    OnFaultStorm::Stop => Err(self.storm_stop(&fault.message, batch.len() - index)),
                    OnFaultStorm::DeadLetter => self.process_in_storm(&batch[index..], out),
                };
            }
            match self.instance.call_batch(std::slice::from_ref(record)) {
                Ok(result) => {
                    self.record_succeeded();
                    self.route(std::slice::from_ref(record), result, out);
                }
                Err(fault) => {
                    self.stop_on_state_failure(&fault)?;
                    self.metrics.count_fault(fault.kind, &fault.message);
                    self.records_faulted(1, &fault);
                    self.dead_letter(
                        record.clone(),
                        DeadLetterClass::PluginFault,
                        &fault.message,
                        out,
                    );
                    self.reinstantiate(batch.len() - index - 1)?;
                }
            }
        }
        Ok(())
    }

    fn on_barrier(
        &mut self,
        barrier: &super::CheckpointBarrier,
        _out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.report_state_usage()?;
        self.apply_due_swap(barrier.id);
        Ok(())
    }

    fn finish(&mut self, _out: &mut Collector) -> Result<(), DataflowError> {
        self.report_state_usage()
    }
}
