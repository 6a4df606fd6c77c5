//! An operator chain: operators run in sequence in one thread, ending in sinks.

use super::{Collector, DataflowError, Operator, Sink, StreamElement};
use crate::metrics::{PipelineMetrics, add};
use crate::record::{Record, into_dead_letter};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The sinks at the end of a chain: main, dead-letter and named side outputs.
pub struct SinkSet {
    /// The main output.
    pub main: Box<dyn Sink>,
    /// The dead-letter output.
    pub dead_letter: Box<dyn Sink>,
    /// Side outputs by name.
    pub side: BTreeMap<String, Box<dyn Sink>>,
}

impl SinkSet {
    fn flush_all(&mut self) -> Result<(), DataflowError> {
        self.main.flush()?;
        for sink in self.side.values_mut() {
            sink.flush()?;
        }
        self.dead_letter.flush()
    }
}

/// Operators chained in one thread, and their sinks.
pub struct OperatorChain {
    operators: Vec<Box<dyn Operator>>,
    sinks: SinkSet,
    metrics: Arc<PipelineMetrics>,
}

impl OperatorChain {
    /// Chains `operators` (in order) into `sinks`.
    pub fn new(
        operators: Vec<Box<dyn Operator>>,
        sinks: SinkSet,
        metrics: Arc<PipelineMetrics>,
    ) -> Self {
        for operator in &operators {
            metrics.register_operator(operator.metrics().clone());
        }
        OperatorChain {
            operators,
            sinks,
            metrics,
        }
    }

    /// Handles one element. Returns `false` after [`StreamElement::End`].
    pub fn handle(&mut self, element: StreamElement) -> Result<bool, DataflowError> {
        match element {
            StreamElement::Records(batch) => self.push_from(0, batch)?,
            StreamElement::DeadLetters(records) => self.write_dead_letters(records)?,
            StreamElement::Watermark(watermark) => {
                for index in 0..self.operators.len() {
                    let mut out = Collector::default();
                    let operator = &mut self.operators[index];
                    timed(operator.as_mut(), |op| op.on_watermark(watermark, &mut out))?;
                    self.operators[index]
                        .metrics()
                        .watermark
                        .store(watermark, Ordering::Relaxed);
                    self.route(index, out)?;
                }
                self.metrics.watermark.store(watermark, Ordering::Relaxed);
            }
            StreamElement::Barrier(barrier) => {
                for index in 0..self.operators.len() {
                    let mut out = Collector::default();
                    let operator = &mut self.operators[index];
                    timed(operator.as_mut(), |op| op.on_barrier(&barrier, &mut out))?;
                    self.route(index, out)?;
                }
                self.sinks.flush_all()?;
                add(&self.metrics.barriers, 1);
            }
            StreamElement::End => {
                for index in 0..self.operators.len() {
                    let mut out = Collector::default();
                    let operator = &mut self.operators[index];
                    timed(operator.as_mut(), |op| op.finish(&mut out))?;
                    self.route(index, out)?;
                }
                self.sinks.flush_all()?;
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Runs `batch` through the operators from `start` on, then the main sink.
    fn push_from(&mut self, start: usize, mut batch: Vec<Record>) -> Result<(), DataflowError> {
        for index in start..self.operators.len() {
            if batch.is_empty() {
                return Ok(());
            }
            let mut out = Collector::default();
            let operator = &mut self.operators[index];
            timed(operator.as_mut(), |op| op.process_batch(batch, &mut out))?;
            batch = std::mem::take(&mut out.main);
            self.route_side_and_dead_letters(out)?;
        }
        if !batch.is_empty() {
            self.sinks.main.write(&batch)?;
            add(&self.metrics.records_out, batch.len() as u64);
        }
        Ok(())
    }

    /// Sends what operator `index` emitted outside `process_batch` onwards.
    fn route(&mut self, index: usize, mut out: Collector) -> Result<(), DataflowError> {
        let main = std::mem::take(&mut out.main);
        self.route_side_and_dead_letters(out)?;
        self.push_from(index + 1, main)
    }

    fn route_side_and_dead_letters(&mut self, out: Collector) -> Result<(), DataflowError> {
        let mut dead_letters = out.dead_letter;
        for (name, record) in out.side {
            match self.sinks.side.get_mut(&name) {
                Some(sink) => {
                    sink.write(std::slice::from_ref(&record))?;
                    add(&self.metrics.side_out, 1);
                }
                None => dead_letters.push(into_dead_letter(
                    record,
                    &format!("no sink is bound to side output `{name}`"),
                    "pipeline",
                    None,
                )),
            }
        }
        self.write_dead_letters(dead_letters)
    }

    fn write_dead_letters(&mut self, records: Vec<Record>) -> Result<(), DataflowError> {
        if !records.is_empty() {
            self.sinks.dead_letter.write(&records)?;
            add(&self.metrics.dead_letters, records.len() as u64);
        }
        Ok(())
    }
}

/// Runs `work` on `operator`, adding the time it takes to the operator's
/// busy time (records, watermarks that fire windows, barriers that write
/// state back: all of it is the operator's work).
fn timed<T>(
    operator: &mut dyn Operator,
    work: impl FnOnce(&mut dyn Operator) -> Result<T, DataflowError>,
) -> Result<T, DataflowError> {
    let started = Instant::now();
    let result = work(operator);
    add(
        &operator.metrics().busy_ns,
        started.elapsed().as_nanos() as u64,
    );
    result
}
