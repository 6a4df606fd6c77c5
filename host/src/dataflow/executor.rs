//! Runs a source and a chain: the source in its own thread, the chain in the
//! caller's, joined by a bounded channel, with checkpoint acknowledgements
//! flowing back.

use super::{CheckpointBarrier, DataflowError, OperatorChain, Source, StreamElement};
use crate::checkpoint::CheckpointCoordinator;
use crate::checkpoint::failpoint::{self, Failpoint};
use crate::metrics::{ChannelMetrics, PipelineMetrics, add, record_bytes};
use crate::sync::lock;
use crate::time::{SplitWatermarks, WatermarkStrategy};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, unbounded};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the source waits, at the end, for the chain to confirm the final
/// checkpoint before giving up on committing it.
const FINAL_ACK_TIMEOUT: Duration = Duration::from_secs(60);

/// How soon after a run's first records its first barrier is due (when
/// the barrier interval is longer). A restarted run's output since its
/// restore becomes visible (an exactly-once sink commits it) and safe (a
/// crash no longer replays it) at its first checkpoint: one interval
/// after the restart, the run would have to live that long to make any
/// progress at all. Issue 45 saw a pipeline killed every 0.5–3 s make
/// none in 17 restarts with 1 s checkpoints.
const FIRST_BARRIER_DELAY: Duration = Duration::from_millis(100);

/// How the executor drives a pipeline.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Records per batch read from the source.
    pub batch_size: usize,
    /// Batches the source may run ahead of the chain.
    pub channel_capacity: usize,
    /// How watermarks are derived from the records' event times.
    pub watermarks: WatermarkStrategy,
    /// Interval between checkpoint barriers; `None` injects none (except the
    /// final one when the run ends).
    pub barrier_interval: Option<Duration>,
    /// The per-split watermark state of a restored checkpoint (see
    /// [`SplitWatermarks::snapshot`]).
    pub restored_watermarks: Option<serde_json::Value>,
    /// How often the source sends a latency marker after a batch; `None`:
    /// never.
    pub latency_marker_interval: Option<Duration>,
    /// Inject no barrier while the input is quiet: nothing read and no
    /// watermark for longer than the idle timeout plus two barrier
    /// intervals (that long, so that a sink that writes an idle mark at its
    /// checkpoint gets a barrier after it notices). A checkpoint then would
    /// only repeat the previous one; a process owning many tasks, most of
    /// them quiet, would spend its time taking them (ADR 0020).
    pub skip_quiet_barriers: bool,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            batch_size: 256,
            channel_capacity: 16,
            watermarks: WatermarkStrategy::default(),
            barrier_interval: Some(Duration::from_secs(10)),
            restored_watermarks: None,
            latency_marker_interval: Some(Duration::from_millis(200)),
            skip_quiet_barriers: false,
        }
    }
}

/// What runs after the source: one chain, or a chain split at a key-by
/// into parallel workers.
pub enum Topology {
    /// All operators in one thread.
    Chain(OperatorChain),
    /// Keyed operators in several workers (see `super::parallel`).
    Parallel(super::ParallelChains),
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// The source reached the end of its input and everything was flushed.
    Completed,
    /// A stop was requested; everything read so far was flushed.
    Stopped,
}

/// Runs `source` into `chain` until the input ends or `stop` is set, then
/// drains and flushes. Counters go to `metrics`.
///
/// Without `checkpoints`, every barrier, once the chain has passed it and
/// flushed the sinks, is acknowledged back to the source
/// ([`Source::on_checkpoint_complete`]). With them, barrier ids come from
/// the coordinator, the threads holding operators meet at its rendezvous to
/// snapshot state, the sinks pre-commit, and the coordinator acknowledges
/// a barrier once its checkpoint is published and committed. When the run
/// ends, a final barrier covers everything read, so a clean stop commits
/// all of it.
pub fn run(
    mut source: Box<dyn Source>,
    topology: Topology,
    config: ExecutorConfig,
    metrics: Arc<PipelineMetrics>,
    stop: Arc<AtomicBool>,
    checkpoints: Option<Arc<CheckpointCoordinator>>,
) -> Result<RunOutcome, DataflowError> {
    let (sender, receiver) = bounded::<StreamElement>(config.channel_capacity.max(1));
    let source_channel =
        metrics.register_channel("source", "operators", config.channel_capacity.max(1));
    let (ack_sender, ack_receiver) = unbounded::<u64>();
    if let Some(coordinator) = &checkpoints {
        coordinator.set_parties(match &topology {
            Topology::Chain(_) => 1,
            Topology::Parallel(parallel) => parallel.threads(),
        });
        coordinator.start(ack_sender.clone())?;
    }
    let source_checkpoints = checkpoints.clone();
    let source_metrics = metrics.clone();
    let source_stop = stop.clone();
    let source_name = source.name().to_string();
    let source_thread =
        crate::sync::spawn_named(format!("sluice-source-{source_name}"), move || {
            let mut reader = SourceReader {
                source: source.as_mut(),
                sender: &sender,
                channel: &source_channel,
                acks: &ack_receiver,
                config: &config,
                metrics: &source_metrics,
                barrier_id: 0,
                checkpoints: source_checkpoints.as_deref(),
            };
            reader.run(&source_stop)
        })
        .map_err(|error| DataflowError::Source {
            name: source_name.clone(),
            message: format!("cannot start source thread: {error}"),
        })?;

    let chain_result = match topology {
        Topology::Chain(mut chain) => {
            chain.set_checkpoints(checkpoints.clone());
            let mut chain_result = Ok(());
            for element in receiver.iter() {
                let barrier = match &element {
                    StreamElement::Barrier(barrier) => Some(barrier.id),
                    _ => None,
                };
                match chain.handle(element) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(error) => {
                        chain_result = Err(error);
                        break;
                    }
                }
                if let Some(id) = barrier
                    && checkpoints.is_none()
                {
                    // The source may already be gone (stopped); nothing to confirm then.
                    let _ = ack_sender.send(id);
                }
            }
            drop(ack_sender);
            chain_result
        }
        Topology::Parallel(parallel) => super::parallel::drive(
            parallel,
            receiver.clone(),
            ack_sender,
            metrics.clone(),
            &stop,
            checkpoints.clone(),
        ),
    };
    if let Err(error) = &chain_result {
        // Unblock and stop the source; its result no longer matters.
        stop.store(true, Ordering::Relaxed);
        if let Some(coordinator) = &checkpoints {
            coordinator.abort(&error.to_string());
        }
    }
    drop(receiver);
    let source_result = source_thread.join().map_err(|_| DataflowError::Source {
        name: source_name,
        message: "source thread panicked".into(),
    });
    if let Some(coordinator) = &checkpoints {
        coordinator.finish();
    }
    chain_result?;
    source_result?
}

/// How often the source publishes its splits' watermarks to the metrics.
const SPLIT_STATUS_INTERVAL: Duration = Duration::from_millis(250);

/// What came of an attempt to inject a barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Injection {
    /// The barrier is on its way.
    Sent,
    /// The previous checkpoint is still in flight: no barrier now.
    InFlight,
    /// The chain has gone away.
    Closed,
}

/// The source thread's state: reads batches, derives watermarks, injects
/// barriers and hands acknowledgements back to the source.
struct SourceReader<'a> {
    source: &'a mut dyn Source,
    sender: &'a Sender<StreamElement>,
    channel: &'a ChannelMetrics,
    acks: &'a Receiver<u64>,
    config: &'a ExecutorConfig,
    metrics: &'a PipelineMetrics,
    barrier_id: u64,
    checkpoints: Option<&'a CheckpointCoordinator>,
}

impl SourceReader<'_> {
    fn run(&mut self, stop: &AtomicBool) -> Result<RunOutcome, DataflowError> {
        let mut watermarks = SplitWatermarks::new(self.config.watermarks);
        if let Some(restored) = &self.config.restored_watermarks {
            watermarks.restore(restored, Instant::now());
        }
        let mut last_watermark = i64::MIN;
        let mut next_barrier = self
            .config
            .barrier_interval
            .map(|interval| Instant::now() + interval);
        // Whether this run has read anything yet (its first barrier comes
        // soon after, see `FIRST_BARRIER_DELAY`).
        let mut read_any = false;
        let mut outcome = RunOutcome::Stopped;
        let mut next_marker = Instant::now();
        let mut next_split_status = Instant::now();
        // When something last happened that a checkpoint would record, and
        // whether it happened after the last barrier sent.
        let mut last_change = Instant::now();
        let mut changed_since_barrier = true;
        // Whether the source was last told its input is quiet.
        let mut was_quiet = false;
        let quiet_after = self
            .config
            .barrier_interval
            .map(|interval| self.config.watermarks.idle_timeout.unwrap_or_default() + interval * 2);

        while !stop.load(Ordering::Relaxed) {
            self.confirm_acknowledged()?;
            self.check_checkpoints()?;
            let Some(batch) = self.source.next_batch(self.config.batch_size)? else {
                outcome = RunOutcome::Completed;
                break;
            };
            let now = Instant::now();
            if let Some(splits) = self.source.splits() {
                watermarks.set_splits(&splits, now);
            }
            add(&self.metrics.batches, 1);
            add(
                &self.metrics.records_in,
                (batch.records.len() + batch.dead_letters.len()) as u64,
            );
            add(
                &self.metrics.bytes_in,
                record_bytes(batch.records.iter().chain(&batch.dead_letters)),
            );
            add(
                &self.metrics.source_dead_letters,
                batch.dead_letters.len() as u64,
            );
            let carried = if self.source.carries_watermarks() {
                Some(batch.watermark)
            } else {
                watermarks.on_records(&batch.records, now);
                None
            };
            let read = !batch.records.is_empty();
            if read || !batch.dead_letters.is_empty() {
                last_change = now;
                changed_since_barrier = true;
                if !read_any {
                    read_any = true;
                    next_barrier = next_barrier.map(|due| due.min(now + FIRST_BARRIER_DELAY));
                }
            }
            if !batch.dead_letters.is_empty()
                && !self.send(StreamElement::DeadLetters(batch.dead_letters))
            {
                return Ok(RunOutcome::Stopped);
            }
            if read && !self.send(StreamElement::Records(batch.records)) {
                return Ok(RunOutcome::Stopped);
            }
            if let Some(interval) = self.config.latency_marker_interval
                && read
                && now >= next_marker
            {
                next_marker = now + interval;
                if !self.send(StreamElement::LatencyMarker(now)) {
                    return Ok(RunOutcome::Stopped);
                }
            }
            // Checked after every read (sources return at least every poll
            // timeout, also without records), so idleness is noticed even
            // when nothing arrives.
            let next = match carried {
                Some(carried) => carried.filter(|w| *w > last_watermark),
                None => watermarks.advance(now),
            };
            if let Some(watermark) = next {
                last_watermark = watermark;
                last_change = now;
                changed_since_barrier = true;
                if !self.send(StreamElement::Watermark(watermark)) {
                    return Ok(RunOutcome::Stopped);
                }
            }
            self.metrics
                .idle_splits
                .store(watermarks.idle_splits() as u64, Ordering::Relaxed);
            if now >= next_split_status {
                next_split_status = now + SPLIT_STATUS_INTERVAL;
                *lock(&self.metrics.source_splits) = watermarks.statuses();
            }
            let quiet = self.config.skip_quiet_barriers
                && !changed_since_barrier
                && quiet_after.is_some_and(|after| now.duration_since(last_change) > after);
            if quiet != was_quiet {
                was_quiet = quiet;
                self.source.set_quiet(quiet);
            }
            if let (Some(due), Some(interval)) = (next_barrier, self.config.barrier_interval)
                && Instant::now() >= due
            {
                match quiet {
                    // Nothing to record: look again an interval later.
                    true => next_barrier = Some(Instant::now() + interval),
                    false => match self.inject_barrier(&watermarks)? {
                        Injection::Sent => {
                            next_barrier = Some(Instant::now() + interval);
                            changed_since_barrier = false;
                        }
                        // Try again with the next batch.
                        Injection::InFlight => {}
                        Injection::Closed => return Ok(RunOutcome::Stopped),
                    },
                }
            }
        }
        if outcome == RunOutcome::Completed {
            let _ = self.metrics.input_ended.set(Instant::now());
            failpoint::hit(Failpoint::AtEndOfInput);
        }
        if outcome == RunOutcome::Completed && last_watermark != i64::MAX {
            // A bounded input is complete: every event-time window may fire.
            self.send(StreamElement::Watermark(i64::MAX));
            self.wait_for_the_final_firing(stop)?;
        }
        // A final barrier covers everything read; wait for the chain to flush
        // it (and, with checkpoints, for its checkpoint to complete) so the
        // source can commit its final position.
        if let Some(checkpoints) = self.checkpoints {
            // Checkpoints held (a plugin version on probation): the end of
            // the input waits for the verdict; a stop abandons what was
            // processed since the held barrier (no final checkpoint).
            while checkpoints.is_holding() && !stop.load(Ordering::Relaxed) {
                self.check_checkpoints()?;
                if let Ok(id) = self.acks.recv_timeout(Duration::from_millis(50)) {
                    self.source.on_checkpoint_complete(id)?;
                }
            }
            // One checkpoint at a time: the final one follows the one in flight.
            while checkpoints.in_flight() {
                self.check_checkpoints()?;
                if let Ok(id) = self.acks.recv_timeout(Duration::from_millis(50)) {
                    self.source.on_checkpoint_complete(id)?;
                }
            }
        }
        if self.inject_barrier(&watermarks)? == Injection::Sent {
            let final_id = self.barrier_id;
            self.send(StreamElement::End);
            let timeout = self
                .checkpoints
                .map_or(FINAL_ACK_TIMEOUT, |c| c.settings().timeout);
            let deadline = Instant::now() + timeout;
            loop {
                self.check_checkpoints()?;
                let wait = deadline
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100));
                match self.acks.recv_timeout(wait) {
                    Ok(id) => {
                        self.source.on_checkpoint_complete(id)?;
                        if id == final_id {
                            if self.checkpoints.is_some() {
                                failpoint::hit(Failpoint::AfterFinalCheckpoint);
                            }
                            break;
                        }
                    }
                    Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                    // The run must not end as if complete: its output since
                    // the last checkpoint is not committed.
                    Err(RecvTimeoutError::Timeout) => {
                        return Err(DataflowError::operator(
                            "checkpoints",
                            format!(
                                "the final checkpoint {final_id} was not confirmed within {} ms: \
                                 what was read since the last one is not committed (a run again \
                                 processes it)",
                                timeout.as_millis()
                            ),
                        ));
                    }
                    // The chain stopped (it failed or was dropped): nothing to commit.
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        }
        Ok(outcome)
    }

    /// Waits until the end of the input's watermark has reached the sinks:
    /// every window has fired. The final barrier follows, and its checkpoint
    /// timeout then counts the checkpoint alone: issue 45 saw a bounded run
    /// with 10 M windows give up its final commit because firing them all
    /// took longer than the timeout. Ends early on a stop or a failure
    /// (a failed chain stops the run and aborts the checkpoints).
    fn wait_for_the_final_firing(&mut self, stop: &AtomicBool) -> Result<(), DataflowError> {
        while self.metrics.watermark.load(Ordering::Relaxed) != i64::MAX
            && !stop.load(Ordering::Relaxed)
        {
            self.check_checkpoints()?;
            match self.acks.recv_timeout(Duration::from_millis(20)) {
                Ok(id) => self.source.on_checkpoint_complete(id)?,
                Err(RecvTimeoutError::Timeout) => {}
                // The chain is gone: nothing more will fire.
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        Ok(())
    }

    /// Fails the source thread (and so the run) if checkpointing failed.
    fn check_checkpoints(&self) -> Result<(), DataflowError> {
        match self.checkpoints.and_then(CheckpointCoordinator::failure) {
            Some(reason) => Err(DataflowError::operator("checkpoints", reason)),
            None => Ok(()),
        }
    }

    /// Hands every acknowledgement received so far to the source.
    fn confirm_acknowledged(&mut self) -> Result<(), DataflowError> {
        while let Ok(id) = self.acks.try_recv() {
            self.source.on_checkpoint_complete(id)?;
        }
        Ok(())
    }

    /// Snapshots the source position (and, for the checkpoint, the
    /// watermark state) and sends the next barrier.
    fn inject_barrier(&mut self, watermarks: &SplitWatermarks) -> Result<Injection, DataflowError> {
        let (id, timestamp_ms) = match self.checkpoints {
            Some(checkpoints) => match checkpoints.next_barrier() {
                Some(next) => next,
                None => return Ok(Injection::InFlight),
            },
            None => (self.barrier_id + 1, crate::time::now_ms()),
        };
        self.barrier_id = id;
        self.metrics
            .last_barrier_id
            .store(id, std::sync::atomic::Ordering::SeqCst);
        let position = self.source.snapshot_position(id)?;
        if let Some(checkpoints) = self.checkpoints {
            checkpoints.record_source(
                id,
                serde_json::json!({ "position": position, "watermarks": watermarks.snapshot() }),
            );
        }
        let barrier = CheckpointBarrier { id, timestamp_ms };
        Ok(match self.send(StreamElement::Barrier(barrier)) {
            true => Injection::Sent,
            false => Injection::Closed,
        })
    }

    /// Sends `element`, counting the time blocked on a full channel as
    /// backpressure. Returns `false` if the chain has gone away.
    fn send(&self, element: StreamElement) -> bool {
        let sent = super::send_timing_backpressure(self.sender, element, |ns| {
            add(&self.metrics.source_backpressured_ns, ns)
        });
        self.channel
            .queued
            .store(self.sender.len() as u64, Ordering::Relaxed);
        sent
    }
}
