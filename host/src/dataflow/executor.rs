//! Runs a source and a chain: the source in its own thread, the chain in the
//! caller's, joined by a bounded channel, with checkpoint acknowledgements
//! flowing back.

use super::{CheckpointBarrier, DataflowError, OperatorChain, Source, StreamElement};
use crate::metrics::{PipelineMetrics, add};
use crate::time::{SplitWatermarks, WatermarkStrategy};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, unbounded};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the source waits, at the end, for the chain to confirm the final
/// checkpoint before giving up on committing it.
const FINAL_ACK_TIMEOUT: Duration = Duration::from_secs(60);

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
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            batch_size: 256,
            channel_capacity: 16,
            watermarks: WatermarkStrategy::default(),
            barrier_interval: Some(Duration::from_secs(10)),
        }
    }
}

/// What runs after the source: one chain, or a chain split at a key-by
/// into parallel workers.
pub enum Topology {
    /// All operators in one thread.
    Chain(OperatorChain),
    /// Keyed operators in several workers (see [`super::parallel`]).
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
/// Every barrier, once the chain has passed it and flushed the sinks, is
/// acknowledged back to the source ([`Source::on_checkpoint_complete`]). When
/// the run ends, a final barrier covers everything read, so a clean stop
/// commits all of it.
pub fn run(
    mut source: Box<dyn Source>,
    topology: Topology,
    config: ExecutorConfig,
    metrics: Arc<PipelineMetrics>,
    stop: Arc<AtomicBool>,
) -> Result<RunOutcome, DataflowError> {
    let (sender, receiver) = bounded::<StreamElement>(config.channel_capacity.max(1));
    let (ack_sender, ack_receiver) = unbounded::<u64>();
    let source_metrics = metrics.clone();
    let source_stop = stop.clone();
    let source_name = source.name().to_string();
    let source_thread = std::thread::Builder::new()
        .name(format!("sluice-source-{source_name}"))
        .spawn(move || {
            let mut reader = SourceReader {
                source: source.as_mut(),
                sender: &sender,
                acks: &ack_receiver,
                config: &config,
                metrics: &source_metrics,
                barrier_id: 0,
            };
            reader.run(&source_stop)
        })
        .map_err(|error| DataflowError::Source {
            name: source_name.clone(),
            message: format!("cannot start source thread: {error}"),
        })?;

    let chain_result = match topology {
        Topology::Chain(mut chain) => {
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
                if let Some(id) = barrier {
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
        ),
    };
    if chain_result.is_err() {
        // Unblock and stop the source; its result no longer matters.
        stop.store(true, Ordering::Relaxed);
    }
    drop(receiver);
    let source_result = source_thread.join().map_err(|_| DataflowError::Source {
        name: source_name,
        message: "source thread panicked".into(),
    })?;
    chain_result?;
    source_result
}

/// The source thread's state: reads batches, derives watermarks, injects
/// barriers and hands acknowledgements back to the source.
struct SourceReader<'a> {
    source: &'a mut dyn Source,
    sender: &'a Sender<StreamElement>,
    acks: &'a Receiver<u64>,
    config: &'a ExecutorConfig,
    metrics: &'a PipelineMetrics,
    barrier_id: u64,
}

impl SourceReader<'_> {
    fn run(&mut self, stop: &AtomicBool) -> Result<RunOutcome, DataflowError> {
        let mut watermarks = SplitWatermarks::new(self.config.watermarks);
        let mut last_watermark = i64::MIN;
        let mut next_barrier = self
            .config
            .barrier_interval
            .map(|interval| Instant::now() + interval);
        let mut outcome = RunOutcome::Stopped;

        while !stop.load(Ordering::Relaxed) {
            self.confirm_acknowledged()?;
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
            watermarks.on_records(&batch.records, now);
            if !batch.dead_letters.is_empty()
                && !self.send(StreamElement::DeadLetters(batch.dead_letters))
            {
                return Ok(RunOutcome::Stopped);
            }
            if !batch.records.is_empty() && !self.send(StreamElement::Records(batch.records)) {
                return Ok(RunOutcome::Stopped);
            }
            // Checked after every read (sources return at least every poll
            // timeout, also without records), so idleness is noticed even
            // when nothing arrives.
            if let Some(watermark) = watermarks.advance(now) {
                last_watermark = watermark;
                if !self.send(StreamElement::Watermark(watermark)) {
                    return Ok(RunOutcome::Stopped);
                }
            }
            self.metrics
                .idle_splits
                .store(watermarks.idle_splits() as u64, Ordering::Relaxed);
            if let (Some(due), Some(interval)) = (next_barrier, self.config.barrier_interval)
                && Instant::now() >= due
            {
                next_barrier = Some(Instant::now() + interval);
                if !self.inject_barrier()? {
                    return Ok(RunOutcome::Stopped);
                }
            }
        }
        if outcome == RunOutcome::Completed && last_watermark != i64::MAX {
            // A bounded input is complete: every event-time window may fire.
            self.send(StreamElement::Watermark(i64::MAX));
        }
        // A final barrier covers everything read; wait for the chain to flush
        // it so the source can commit its final position.
        if self.inject_barrier()? {
            let final_id = self.barrier_id;
            self.send(StreamElement::End);
            let deadline = Instant::now() + FINAL_ACK_TIMEOUT;
            loop {
                match self
                    .acks
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                {
                    Ok(id) => {
                        self.source.on_checkpoint_complete(id)?;
                        if id == final_id {
                            break;
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        tracing::warn!(
                            checkpoint = final_id,
                            "final checkpoint not confirmed in time; not committing it"
                        );
                        break;
                    }
                    // The chain stopped (it failed or was dropped): nothing to commit.
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        }
        Ok(outcome)
    }

    /// Hands every acknowledgement received so far to the source.
    fn confirm_acknowledged(&mut self) -> Result<(), DataflowError> {
        while let Ok(id) = self.acks.try_recv() {
            self.source.on_checkpoint_complete(id)?;
        }
        Ok(())
    }

    /// Snapshots the source position and sends the next barrier. Returns
    /// `false` if the chain has gone away.
    fn inject_barrier(&mut self) -> Result<bool, DataflowError> {
        self.barrier_id += 1;
        self.source.snapshot_position(self.barrier_id)?;
        let barrier = CheckpointBarrier {
            id: self.barrier_id,
            timestamp_ms: now_millis(),
        };
        Ok(self.send(StreamElement::Barrier(barrier)))
    }

    /// Sends `element`, counting the time blocked on a full channel as
    /// backpressure. Returns `false` if the chain has gone away.
    fn send(&self, element: StreamElement) -> bool {
        super::send_timing_backpressure(self.sender, element, |ns| {
            add(&self.metrics.source_backpressured_ns, ns)
        })
    }
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
