//! An operator chain: operators run in sequence in one thread, ending in sinks.

use super::{Collector, DataflowError, Operator, Sink, StreamElement};
use crate::checkpoint::{CheckpointCoordinator, Committable, Committer};
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
    /// Every sink, main first and dead letters last.
    fn all_mut(&mut self) -> impl Iterator<Item = &mut Box<dyn Sink>> {
        std::iter::once(&mut self.main)
            .chain(self.side.values_mut())
            .chain(std::iter::once(&mut self.dead_letter))
    }

    /// Flushes every sink (end of input, or a barrier without checkpoints).
    pub(crate) fn flush_all(&mut self) -> Result<(), DataflowError> {
        self.all_mut().try_for_each(|sink| sink.flush())
    }

    /// Phase one of checkpoint `checkpoint` in every sink: the pre-commits
    /// of the sinks that commit in two phases, by sink name.
    pub(crate) fn pre_commit_all(
        &mut self,
        checkpoint: u64,
    ) -> Result<BTreeMap<String, Committable>, DataflowError> {
        let mut committables = BTreeMap::new();
        for sink in self.all_mut() {
            if let Some(committable) = sink.pre_commit(checkpoint)? {
                // Keyed by committer: sinks sharing one (Kafka sinks share
                // their transaction) pre-commit once.
                let key = sink
                    .committer()
                    .map_or_else(|| sink.name().to_string(), |c| c.name().to_string());
                committables.insert(key, committable);
            }
        }
        Ok(committables)
    }

    /// The committers of the sinks that commit in two phases (one per
    /// name: sinks may share one).
    pub fn committers(&self) -> Vec<Arc<dyn Committer>> {
        let mut committers: Vec<Arc<dyn Committer>> = Vec::new();
        let sinks = std::iter::once(&self.main)
            .chain(self.side.values())
            .chain(std::iter::once(&self.dead_letter));
        for committer in sinks.filter_map(|sink| sink.committer()) {
            if !committers.iter().any(|c| c.name() == committer.name()) {
                committers.push(committer);
            }
        }
        committers
    }
}

/// At a barrier with checkpoints: pre-commits every sink and hands the
/// pre-commits to the coordinator.
pub(crate) fn pre_commit_sinks(
    sinks: &mut SinkSet,
    checkpoint: u64,
    coordinator: &CheckpointCoordinator,
) -> Result<(), DataflowError> {
    let committables = sinks.pre_commit_all(checkpoint)?;
    coordinator.record_pre_commits(checkpoint, committables);
    Ok(())
}

/// Operators chained in one thread, and their sinks.
pub struct OperatorChain {
    operators: Vec<Box<dyn Operator>>,
    sinks: SinkSet,
    metrics: Arc<PipelineMetrics>,
    /// Set when this chain is the whole pipeline and it checkpoints: the
    /// chain then takes part in the snapshot and pre-commits its sinks.
    checkpoints: Option<Arc<CheckpointCoordinator>>,
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
            checkpoints: None,
        }
    }

    /// Makes the chain take part in checkpoints (it runs the whole
    /// pipeline: its operators' state and its sinks are the checkpoint's).
    pub fn set_checkpoints(&mut self, checkpoints: Option<Arc<CheckpointCoordinator>>) {
        self.checkpoints = checkpoints;
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
                match &self.checkpoints {
                    Some(coordinator) => {
                        coordinator.arrive(barrier.id)?;
                        pre_commit_sinks(&mut self.sinks, barrier.id, coordinator)?;
                    }
                    None => self.sinks.flush_all()?,
                }
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
