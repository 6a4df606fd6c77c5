//! The transform operator: a plugin called on batches, with fault isolation.

use super::{Collector, DataflowError, Operator};
use crate::metrics::{OperatorMetrics, add};
use crate::record::Record;
use crate::runtime::{BatchResult, EmitRoute, FaultKind, PluginFault, PluginInstance};
use std::sync::Arc;

/// Runs a transform plugin on every batch.
///
/// When a batch call faults (trap, CPU deadline, memory limit, broken
/// output), the instance is re-created and the batch retried record by
/// record: records that fault alone go to the dead-letter output with the
/// fault as the reason, the others proceed. Nothing a plugin does stops the
/// pipeline, except failing to re-instantiate at all.
pub struct TransformOperator {
    name: String,
    plugin_label: String,
    instance: PluginInstance,
    metrics: Arc<OperatorMetrics>,
}

impl TransformOperator {
    /// A failing state backend is neither the plugin's fault nor the
    /// record's: the operator stops (and with it the pipeline) instead of
    /// dead-lettering records.
    fn stop_on_state_failure(&self, fault: &PluginFault) -> Result<(), DataflowError> {
        if fault.kind == FaultKind::State {
            return Err(DataflowError::Operator {
                name: self.name.clone(),
                message: fault.message.clone(),
            });
        }
        Ok(())
    }

    /// Wraps a plugin instance as the operator `name`. `metrics` must be the
    /// counters the instance reports plugin counters to.
    pub fn new(
        name: impl Into<String>,
        instance: PluginInstance,
        metrics: Arc<OperatorMetrics>,
    ) -> Self {
        TransformOperator {
            name: name.into(),
            plugin_label: instance.component().label(),
            instance,
            metrics,
        }
    }

    /// Flushes the plugin's keyed state and measures it for the metrics.
    fn report_state_usage(&self) -> Result<(), DataflowError> {
        let usage = self
            .instance
            .flush_state()
            .map_err(|error| DataflowError::Operator {
                name: self.name.clone(),
                message: error.to_string(),
            })?;
        self.metrics.set_state_usage(usage);
        Ok(())
    }

    fn reinstantiate(&mut self) -> Result<(), DataflowError> {
        add(&self.metrics.reinstantiations, 1);
        self.instance
            .reinstantiate()
            .map_err(|error| DataflowError::Operator {
                name: self.name.clone(),
                message: error.to_string(),
            })
    }

    fn route(&self, batch: &[Record], result: BatchResult, out: &mut Collector) {
        for emitted in result.emitted {
            match emitted.route {
                EmitRoute::Main => {
                    add(&self.metrics.records_out, 1);
                    out.main.push(emitted.record);
                }
                EmitRoute::Side(name) => {
                    add(&self.metrics.side_out, 1);
                    out.side.push((name, emitted.record));
                }
                EmitRoute::DeadLetter(reason) => self.dead_letter(emitted.record, &reason, out),
            }
        }
        for (index, reason) in result.failed {
            if let Some(record) = batch.get(index) {
                self.dead_letter(record.clone(), &reason, out);
            }
        }
    }

    fn dead_letter(&self, record: Record, reason: &str, out: &mut Collector) {
        out.dead_letter(
            record,
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

    fn process_batch(
        &mut self,
        batch: Vec<Record>,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        add(&self.metrics.records_in, batch.len() as u64);
        let fault = match self.instance.call_batch(&batch) {
            Ok(result) => {
                self.route(&batch, result, out);
                return Ok(());
            }
            Err(fault) => fault,
        };
        self.stop_on_state_failure(&fault)?;
        add(&self.metrics.traps, 1);
        tracing::warn!(operator = %self.name, plugin = %self.plugin_label, %fault,
            records = batch.len(), "plugin faulted on a batch; retrying record by record");
        self.reinstantiate()?;
        for record in &batch {
            match self.instance.call_batch(std::slice::from_ref(record)) {
                Ok(result) => self.route(std::slice::from_ref(record), result, out),
                Err(fault) => {
                    self.stop_on_state_failure(&fault)?;
                    add(&self.metrics.traps, 1);
                    self.dead_letter(record.clone(), &fault.message, out);
                    self.reinstantiate()?;
                }
            }
        }
        Ok(())
    }

    fn on_barrier(
        &mut self,
        _barrier: &super::CheckpointBarrier,
        _out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.report_state_usage()
    }

    fn finish(&mut self, _out: &mut Collector) -> Result<(), DataflowError> {
        self.report_state_usage()
    }
}
