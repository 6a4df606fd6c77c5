//! Dataflow: sources, chains of operators, sinks, and what flows between them.
//!
//! A pipeline is a [`Source`] feeding an [`OperatorChain`]: operators run one
//! after another in the same thread (Flink's operator chaining) and end in
//! sinks. Records travel in batches; control messages — watermarks and
//! checkpoint barriers — travel in-band between batches ([`StreamElement`]),
//! so every operator sees them in order with the data. The source runs in
//! its own thread, joined to the operators by a bounded channel: when they
//! fall behind, the source blocks (lossless backpressure) and the time it
//! spends blocked is counted. With `workers > 1`, keyed operators run in
//! parallel stages behind key-by exchanges (`parallel`), whose threads
//! combine their inputs in input gates (minimum watermark, aligned
//! barriers).

mod chain;
mod executor;
mod input_gate;
pub(crate) mod parallel;
pub mod swap;
mod transform;

pub use chain::{OperatorChain, SinkSet};
pub use executor::{ExecutorConfig, RunOutcome, Topology, run};
pub use parallel::{KeyedStage, ParallelChains, Partitioner};
pub use transform::{FaultPolicy, OnFaultStorm, TransformOperator};

use crate::metrics::{DeadLetterClass, OperatorMetrics};
use crate::record::Record;
use sluice_json::fields::FieldPath;
use std::sync::Arc;

/// A checkpoint barrier: everything before it belongs to checkpoint `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointBarrier {
    /// Checkpoint id, increasing from 1.
    pub id: u64,
    /// Wall-clock time the barrier was injected, ms since the Unix epoch.
    pub timestamp_ms: i64,
}

/// What travels from the source to the chain.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamElement {
    /// A batch of records.
    Records(Vec<Record>),
    /// Records the source could not read (already marked with a reason);
    /// they go straight to the dead-letter sink.
    DeadLetters(Vec<Record>),
    /// No record with an earlier event time (ms) will follow.
    Watermark(i64),
    /// A checkpoint barrier.
    Barrier(CheckpointBarrier),
    /// A latency marker (Flink's `LatencyMarker`): when the source read
    /// the records just before it. It travels with the records, through
    /// every channel and exchange, without waiting in any operator; where
    /// it reaches the sinks, now minus its time is one sample of the
    /// pipeline's record latency (source read to sink write).
    LatencyMarker(std::time::Instant),
    /// The source is done (end of input or stop requested).
    End,
}

/// What an operator emits while handling one element.
#[derive(Debug, Default)]
pub struct Collector {
    /// Records for the next operator (or the main sink).
    pub main: Vec<Record>,
    /// Records for named side outputs.
    pub side: Vec<(String, Record)>,
    /// Dead-lettered records, already marked with their reason.
    pub dead_letter: Vec<Record>,
}

/// Header set on records sent to a late output.
pub const LATE_ARRIVAL_HEADER: &str = "late_arrival";

/// Where an event-time operator sends records later than it can accept.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LateOutput {
    /// The dead-letter output, with a reason.
    #[default]
    DeadLetter,
    /// A named side output.
    Side(String),
}

impl Collector {
    /// Dead-letters `record` for `operator` (and `plugin`, if any) with
    /// `reason`, counting it in `metrics` under `class`.
    pub fn dead_letter(
        &mut self,
        record: Record,
        class: DeadLetterClass,
        reason: &str,
        operator: &str,
        plugin: Option<&str>,
        metrics: &OperatorMetrics,
    ) {
        metrics.count_dead_letter(class);
        self.dead_letter.push(crate::record::into_dead_letter(
            record, reason, operator, plugin,
        ));
    }

    /// Sends a record that arrived too late for `operator` to `late_output`,
    /// marked `late_arrival = true` (with `reason` on the dead-letter
    /// output), counting it in `metrics`: late data is never dropped
    /// silently.
    pub fn late(
        &mut self,
        mut record: Record,
        reason: &str,
        late_output: &LateOutput,
        operator: &str,
        metrics: &OperatorMetrics,
    ) {
        crate::metrics::add(&metrics.late_records, 1);
        record
            .headers
            .push(crate::record::Header::new(LATE_ARRIVAL_HEADER, "true"));
        match late_output {
            LateOutput::DeadLetter => self.dead_letter(
                record,
                DeadLetterClass::Late,
                reason,
                operator,
                None,
                metrics,
            ),
            LateOutput::Side(name) => {
                crate::metrics::add(&metrics.side_out, 1);
                self.side.push((name.clone(), record));
            }
        }
    }

    /// Whether nothing was collected.
    pub fn is_empty(&self) -> bool {
        self.main.is_empty() && self.side.is_empty() && self.dead_letter.is_empty()
    }
}

/// Errors that stop a pipeline.
#[derive(Debug, thiserror::Error)]
pub enum DataflowError {
    /// The source failed.
    #[error("source `{name}` failed: {message}")]
    Source {
        /// Source name.
        name: String,
        /// Why.
        message: String,
    },
    /// An operator failed in a way it could not isolate to records.
    #[error("operator `{name}` failed: {message}")]
    Operator {
        /// Operator name.
        name: String,
        /// Why.
        message: String,
    },
    /// A sink failed.
    #[error("sink `{name}` failed: {message}")]
    Sink {
        /// Sink name.
        name: String,
        /// Why.
        message: String,
    },
    /// An operator's state backend failed (neither a record's fault nor
    /// a plugin's: the pipeline stops and restarts from its checkpoint).
    #[error("operator `{operator}` failed")]
    State {
        /// Operator name.
        operator: String,
        /// The backend's error.
        #[source]
        source: crate::state::StateError,
    },
    /// An operator's plugin faulted where no record is to blame (its
    /// state failed under it, or a fault storm with `on_fault_storm =
    /// "stop"`).
    #[error("operator `{operator}` failed")]
    Plugin {
        /// Operator name.
        operator: String,
        /// The fault.
        #[source]
        source: crate::runtime::PluginFault,
    },
    /// A window's aggregate failed where no record is to blame (a plugin
    /// that faults while merging or finishing).
    #[error("operator `{operator}` failed")]
    Aggregate {
        /// Operator name.
        operator: String,
        /// Why.
        #[source]
        source: crate::runtime::AggregateError,
    },
    /// A checkpoint could not be taken or committed.
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
}

/// Sends `message` on the bounded `channel`, blocking while it is full;
/// the nanoseconds spent blocked (backpressure) go to `blocked`. `false`
/// when the receiver has gone.
pub(crate) fn send_timing_backpressure<T>(
    channel: &crossbeam_channel::Sender<T>,
    message: T,
    blocked: impl FnOnce(u64),
) -> bool {
    match channel.try_send(message) {
        Ok(()) => true,
        Err(crossbeam_channel::TrySendError::Disconnected(_)) => false,
        Err(crossbeam_channel::TrySendError::Full(message)) => {
            let started = std::time::Instant::now();
            let sent = channel.send(message).is_ok();
            blocked(started.elapsed().as_nanos() as u64);
            sent
        }
    }
}

impl DataflowError {
    /// The error and its causes on one line (`a: b: c`), as the CLI
    /// prints it: for places that keep a failure as text.
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(error) = cause {
            text.push_str(": ");
            text.push_str(&error.to_string());
            cause = error.source();
        }
        text
    }

    /// A failure of the state backend under the operator `operator`.
    pub fn state(operator: &str, source: crate::state::StateError) -> Self {
        DataflowError::State {
            operator: operator.to_string(),
            source,
        }
    }

    /// A failure of the operator `name`.
    pub fn operator(name: &str, message: impl std::fmt::Display) -> Self {
        DataflowError::Operator {
            name: name.to_string(),
            message: message.to_string(),
        }
    }
}

/// A step of the chain that turns batches into outputs.
pub trait Operator: Send {
    /// The operator's name (unique within its pipeline).
    fn name(&self) -> &str;

    /// The operator's counters.
    fn metrics(&self) -> &Arc<OperatorMetrics>;

    /// Handles a batch of records.
    fn process_batch(
        &mut self,
        batch: Vec<Record>,
        out: &mut Collector,
    ) -> Result<(), DataflowError>;

    /// For a keyed operator: the key of a record, which decides the worker
    /// that handles it when the pipeline runs several (`workers`). `None`:
    /// the operator is not keyed.
    fn partitioner(&self) -> Option<Partitioner> {
        None
    }

    /// Top-level or nested fields of each record's JSON value this operator
    /// reads (a window's key and aggregate fields). A source that parses
    /// its records anyway reads them in the same pass when this operator
    /// comes right after it ([`Source::read_ahead`]), and the operator
    /// takes them from [`crate::record::ReadFields`] instead of parsing the
    /// value again.
    fn reads_fields(&self) -> Option<Arc<[FieldPath]>> {
        None
    }

    /// Top-level fields of each record's JSON value whose JSON text this
    /// operator's plugin reads (the projected path). A source that parses
    /// its records anyway finds where they lie in the same pass when this
    /// operator comes right after it ([`Source::project_ahead`]), and the
    /// plugin's batches are packed from [`crate::record::FieldSpans`]
    /// instead of parsing each value again.
    fn projects_fields(&self) -> Option<Arc<[String]>> {
        None
    }

    /// Called when the watermark advances (event-time operators fire here).
    fn on_watermark(&mut self, _watermark: i64, _out: &mut Collector) -> Result<(), DataflowError> {
        Ok(())
    }

    /// After [`Operator::on_watermark`]: whether more is due at that
    /// watermark than the call emitted. The chain then passes on what it
    /// emitted and calls it again with the same watermark, so that a
    /// watermark firing a million windows never holds a million results
    /// in memory. The default: everything is emitted at once.
    fn has_more_to_fire(&self) -> bool {
        false
    }

    /// Called when a checkpoint barrier passes (operators snapshot here).
    fn on_barrier(
        &mut self,
        _barrier: &CheckpointBarrier,
        _out: &mut Collector,
    ) -> Result<(), DataflowError> {
        Ok(())
    }

    /// Called once when the input ends.
    fn finish(&mut self, _out: &mut Collector) -> Result<(), DataflowError> {
        Ok(())
    }
}

/// Produces records.
pub trait Source: Send {
    /// The source's name, for errors and metrics.
    fn name(&self) -> &str;

    /// Reads up to `max_records` records; `Ok(None)` at the end of a bounded
    /// input. May block (for pacing or I/O).
    fn next_batch(&mut self, max_records: usize) -> Result<Option<SourceBatch>, DataflowError>;

    /// The splits (e.g. Kafka partitions) the source reads now, if it knows
    /// them: a split that has produced no record yet then still holds the
    /// watermark back. `None` (the default): splits are learnt from records.
    fn splits(&self) -> Option<Vec<crate::time::SplitId>> {
        None
    }

    /// Whether the input carries its own watermarks (a repartition topic's
    /// control records, [`SourceBatch::watermark`]): the executor then
    /// takes those instead of deriving watermarks from event times.
    fn carries_watermarks(&self) -> bool {
        false
    }

    /// Called just before barrier `checkpoint_id` is injected: the source
    /// remembers its position (e.g. Kafka offsets) as of that barrier and
    /// returns it, to be recorded in the checkpoint. `Null`: the source
    /// cannot resume from a position (a restore then fails).
    fn snapshot_position(
        &mut self,
        _checkpoint_id: u64,
    ) -> Result<serde_json::Value, DataflowError> {
        Ok(serde_json::Value::Null)
    }

    /// Continues from `position` (what [`Source::snapshot_position`]
    /// returned for the checkpoint being restored) instead of the start.
    fn restore_position(&mut self, position: &serde_json::Value) -> Result<(), DataflowError> {
        Err(DataflowError::Source {
            name: self.name().to_string(),
            message: format!("this source cannot resume from a checkpoint (position {position})"),
        })
    }

    /// Called once every sink has flushed everything before barrier
    /// `checkpoint_id`: the position snapshotted for it is now safe to commit
    /// (at-least-once; exactly-once sinks will commit here too).
    fn on_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<(), DataflowError> {
        Ok(())
    }

    /// Asks the source to read `fields` of each JSON record it parses
    /// anyway, in the same pass, and keep them on the record
    /// ([`crate::record::ReadFields`]) for the operator after it
    /// ([`Operator::reads_fields`]). The default ignores it: the operator
    /// then reads the fields itself.
    fn read_ahead(&mut self, _fields: Arc<[FieldPath]>) {}

    /// Asks the source to find where the top-level fields `names` lie in
    /// each JSON record it parses anyway, in the same pass, and keep the
    /// spans on the record ([`crate::record::FieldSpans`]) for the plugin
    /// after it ([`Operator::projects_fields`]). The default ignores it:
    /// the host then finds them while packing the plugin's batch.
    fn project_ahead(&mut self, _names: Arc<[String]>) {}

    /// Tells the source whether its input has been quiet for a while (no
    /// record, no watermark change, no checkpoint due): it may then wait
    /// longer for records in [`next_batch`](Self::next_batch), as long as a
    /// record still ends the wait at once. The default ignores it.
    fn set_quiet(&mut self, _quiet: bool) {}
}

/// One read from a source.
#[derive(Debug, Default)]
pub struct SourceBatch {
    /// Records read.
    pub records: Vec<Record>,
    /// Input the source could not turn into records, marked with a reason.
    pub dead_letters: Vec<Record>,
    /// The source's watermark now, from a source that
    /// [carries watermarks](Source::carries_watermarks).
    pub watermark: Option<i64>,
}

/// Consumes records.
pub trait Sink: Send {
    /// The sink's name, for errors.
    fn name(&self) -> &str;

    /// Writes records (buffering is allowed until [`Sink::flush`]).
    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError>;

    /// Makes everything written so far durable / visible.
    fn flush(&mut self) -> Result<(), DataflowError>;

    /// The watermark reached the sinks: every record before it has been
    /// written. A sink feeding another stage (a repartition topic) passes
    /// it on; the default ignores it.
    fn on_watermark(&mut self, _watermark: i64) -> Result<(), DataflowError> {
        Ok(())
    }

    /// The records the last [`Sink::write`] refused because they do not
    /// fit the sink (e.g. a table's schema), with the reason: the pipeline
    /// sends them to the dead-letter output. The default refuses nothing.
    fn take_rejected(&mut self) -> Vec<(Record, String)> {
        Vec::new()
    }

    /// Phase one of a two-phase commit, at checkpoint barrier `checkpoint`:
    /// flush, wait for every delivery, and return what
    /// [`Committer::commit`] needs to make this epoch's records visible
    /// (recorded in the checkpoint's manifest). The default is
    /// at-least-once: flush, nothing to commit.
    ///
    /// [`Committer::commit`]: crate::checkpoint::Committer::commit
    fn pre_commit(
        &mut self,
        _checkpoint: u64,
    ) -> Result<Option<crate::checkpoint::Committable>, DataflowError> {
        self.flush()?;
        Ok(None)
    }

    /// Phase two, for sinks that commit in two phases: the committer runs
    /// after the checkpoint is published (on the checkpoint thread) and on
    /// restore. `None` (the default): the sink is at-least-once.
    fn committer(&self) -> Option<std::sync::Arc<dyn crate::checkpoint::Committer>> {
        None
    }
}
