//! An operator chain: operators run in sequence in one thread, ending in sinks.

use super::{Collector, DataflowError, Operator, Sink, StreamElement};
use crate::checkpoint::{CheckpointCoordinator, Committable, Committer};
use crate::metrics::{PipelineMetrics, add, record_bytes};
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

/// Which of a pipeline's sinks records go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SinkRoute {
    /// The main output.
    Main,
    /// The dead-letter output.
    DeadLetter,
    /// A named side output.
    Side(String),
}

impl SinkSet {
    /// Writes `records` to the sink of `route`, counting them in
    /// `metrics`. Records that sink refuses ([`Sink::take_rejected`]), and
    /// records for a side output without a sink, go to the dead-letter
    /// output with the reason; the dead-letter output refusing a record
    /// stops the pipeline (there is nowhere left to put it).
    pub(crate) fn write(
        &mut self,
        route: &SinkRoute,
        records: &[Record],
        metrics: &PipelineMetrics,
    ) -> Result<(), DataflowError> {
        if records.is_empty() {
            return Ok(());
        }
        let sink = match route {
            SinkRoute::Main => &mut self.main,
            SinkRoute::DeadLetter => &mut self.dead_letter,
            SinkRoute::Side(name) => match self.side.get_mut(name) {
                Some(sink) => sink,
                None => {
                    let reason = format!("no sink is bound to side output `{name}`");
                    let dead: Vec<Record> = records
                        .iter()
                        .map(|record| into_dead_letter(record.clone(), &reason, "pipeline", None))
                        .collect();
                    return self.write(&SinkRoute::DeadLetter, &dead, metrics);
                }
            },
        };
        sink.write(records)?;
        let rejected = sink.take_rejected();
        count_written(route, records, &rejected, metrics);
        let Some((_, first_reason)) = rejected.first() else {
            return Ok(());
        };
        if *route == SinkRoute::DeadLetter {
            return Err(DataflowError::Sink {
                name: sink.name().to_string(),
                message: format!(
                    "the dead-letter output refused {} records, e.g.: {first_reason}",
                    rejected.len()
                ),
            });
        }
        add(&metrics.sink_rejected, rejected.len() as u64);
        let name = sink.name().to_string();
        let dead: Vec<Record> = rejected
            .into_iter()
            .map(|(record, reason)| into_dead_letter(record, &reason, &name, None))
            .collect();
        self.write(&SinkRoute::DeadLetter, &dead, metrics)
    }

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

/// Counts what a sink of `route` took of `records` (all but `rejected`).
fn count_written(
    route: &SinkRoute,
    records: &[Record],
    rejected: &[(Record, String)],
    metrics: &PipelineMetrics,
) {
    if route == &SinkRoute::Main && rejected.is_empty() {
        // The common case: counted in one pass, with the event time.
        metrics.count_sink_write(records);
        return;
    }
    let accepted = (records.len() - rejected.len()) as u64;
    let written_bytes = record_bytes(records)
        .saturating_sub(record_bytes(rejected.iter().map(|(record, _)| record)));
    let (count, byte_count) = match route {
        SinkRoute::Main => (&metrics.records_out, &metrics.bytes_out),
        SinkRoute::DeadLetter => (&metrics.dead_letters, &metrics.dead_letter_bytes),
        SinkRoute::Side(_) => (&metrics.side_out, &metrics.side_bytes),
    };
    add(count, accepted);
    add(byte_count, written_bytes);
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
                    // An operator with much to fire emits it in pieces,
                    // each passed on before the next is made.
                    loop {
                        let mut out = Collector::default();
                        let operator = &mut self.operators[index];
                        timed(operator.as_mut(), |op| op.on_watermark(watermark, &mut out))?;
                        let more = operator.has_more_to_fire();
                        self.route(index, out)?;
                        if !more {
                            break;
                        }
                    }
                    self.operators[index]
                        .metrics()
                        .watermark
                        .store(watermark, Ordering::Relaxed);
                }
                self.sinks.main.on_watermark(watermark)?;
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
            StreamElement::LatencyMarker(read_at) => {
                // Every record read before the marker has been written (or
                // is held by an operator, as windows do).
                self.metrics.record_latency.observe(read_at.elapsed());
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
        self.sinks.write(&SinkRoute::Main, &batch, &self.metrics)
    }

    /// Sends what operator `index` emitted outside `process_batch` onwards.
    fn route(&mut self, index: usize, mut out: Collector) -> Result<(), DataflowError> {
        let main = std::mem::take(&mut out.main);
        self.route_side_and_dead_letters(out)?;
        self.push_from(index + 1, main)
    }

    fn route_side_and_dead_letters(&mut self, out: Collector) -> Result<(), DataflowError> {
        for (name, record) in out.side {
            self.sinks.write(
                &SinkRoute::Side(name),
                std::slice::from_ref(&record),
                &self.metrics,
            )?;
        }
        self.write_dead_letters(out.dead_letter)
    }

    fn write_dead_letters(&mut self, records: Vec<Record>) -> Result<(), DataflowError> {
        // A few of each batch: a fault storm does not copy every record.
        for record in records.iter().take(4) {
            self.metrics
                .dead_letter_samples
                .push(crate::metrics::DeadLetterSample::of(record));
        }
        self.sinks
            .write(&SinkRoute::DeadLetter, &records, &self.metrics)
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
