//! Runs a source and a chain: the source in its own thread, the chain in the
//! caller's, joined by a bounded channel.

use super::{CheckpointBarrier, DataflowError, OperatorChain, Source, StreamElement};
use crate::metrics::{PipelineMetrics, add};
use crossbeam_channel::{Sender, TrySendError, bounded};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How the executor drives a pipeline.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Records per batch read from the source.
    pub batch_size: usize,
    /// Batches the source may run ahead of the chain.
    pub channel_capacity: usize,
    /// Watermark = highest event time seen minus this bound.
    pub max_out_of_orderness: Duration,
    /// Interval between checkpoint barriers; `None` injects none.
    pub barrier_interval: Option<Duration>,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            batch_size: 256,
            channel_capacity: 16,
            max_out_of_orderness: Duration::ZERO,
            barrier_interval: Some(Duration::from_secs(10)),
        }
    }
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
pub fn run(
    mut source: Box<dyn Source>,
    mut chain: OperatorChain,
    config: ExecutorConfig,
    metrics: Arc<PipelineMetrics>,
    stop: Arc<AtomicBool>,
) -> Result<RunOutcome, DataflowError> {
    let (sender, receiver) = bounded::<StreamElement>(config.channel_capacity.max(1));
    let source_metrics = metrics.clone();
    let source_stop = stop.clone();
    let source_name = source.name().to_string();
    let source_thread = std::thread::Builder::new()
        .name(format!("sluice-source-{source_name}"))
        .spawn(move || {
            read_source(
                source.as_mut(),
                &sender,
                &config,
                &source_metrics,
                &source_stop,
            )
        })
        .map_err(|error| DataflowError::Source {
            name: source_name.clone(),
            message: format!("cannot start source thread: {error}"),
        })?;

    let mut chain_result = Ok(());
    for element in receiver.iter() {
        match chain.handle(element) {
            Ok(true) => {}
            Ok(false) => break,
            Err(error) => {
                chain_result = Err(error);
                break;
            }
        }
    }
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

/// The source thread: reads batches, derives watermarks, injects barriers.
fn read_source(
    source: &mut dyn Source,
    sender: &Sender<StreamElement>,
    config: &ExecutorConfig,
    metrics: &PipelineMetrics,
    stop: &AtomicBool,
) -> Result<RunOutcome, DataflowError> {
    let out_of_orderness = config.max_out_of_orderness.as_millis() as i64;
    let mut max_event_time: Option<i64> = None;
    let mut last_watermark = i64::MIN;
    let mut next_barrier = config
        .barrier_interval
        .map(|interval| Instant::now() + interval);
    let mut barrier_id = 0;
    let mut outcome = RunOutcome::Stopped;

    while !stop.load(Ordering::Relaxed) {
        let Some(batch) = source.next_batch(config.batch_size)? else {
            outcome = RunOutcome::Completed;
            break;
        };
        add(&metrics.batches, 1);
        add(
            &metrics.records_in,
            (batch.records.len() + batch.dead_letters.len()) as u64,
        );
        for record in &batch.records {
            if let Some(time) = record.event_time {
                max_event_time = Some(max_event_time.map_or(time, |max| max.max(time)));
            }
        }
        if !batch.dead_letters.is_empty()
            && !send(
                sender,
                StreamElement::DeadLetters(batch.dead_letters),
                metrics,
            )
        {
            return Ok(RunOutcome::Stopped);
        }
        if !batch.records.is_empty()
            && !send(sender, StreamElement::Records(batch.records), metrics)
        {
            return Ok(RunOutcome::Stopped);
        }
        if let Some(max) = max_event_time {
            let watermark = max.saturating_sub(out_of_orderness);
            if watermark > last_watermark {
                last_watermark = watermark;
                if !send(sender, StreamElement::Watermark(watermark), metrics) {
                    return Ok(RunOutcome::Stopped);
                }
            }
        }
        if let (Some(due), Some(interval)) = (next_barrier, config.barrier_interval)
            && Instant::now() >= due
        {
            barrier_id += 1;
            next_barrier = Some(Instant::now() + interval);
            let barrier = CheckpointBarrier {
                id: barrier_id,
                timestamp_ms: now_millis(),
            };
            if !send(sender, StreamElement::Barrier(barrier), metrics) {
                return Ok(RunOutcome::Stopped);
            }
        }
    }
    if outcome == RunOutcome::Completed && last_watermark != i64::MAX {
        // A bounded input is complete: every event-time window may fire.
        send(sender, StreamElement::Watermark(i64::MAX), metrics);
    }
    send(sender, StreamElement::End, metrics);
    Ok(outcome)
}

/// Sends `element`, counting the time blocked on a full channel as
/// backpressure. Returns `false` if the chain has gone away.
fn send(sender: &Sender<StreamElement>, element: StreamElement, metrics: &PipelineMetrics) -> bool {
    match sender.try_send(element) {
        Ok(()) => true,
        Err(TrySendError::Disconnected(_)) => false,
        Err(TrySendError::Full(element)) => {
            let blocked = Instant::now();
            let sent = sender.send(element).is_ok();
            add(
                &metrics.source_backpressured_ns,
                blocked.elapsed().as_nanos() as u64,
            );
            sent
        }
    }
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
