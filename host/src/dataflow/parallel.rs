//! Key-by parallelism: the keyed parts of a pipeline run in N worker
//! threads each, every worker owning a range of key groups.
//!
//! ```text
//! source ─▶ head ─▶ key-by ─┬▶ stage 1, worker 0 ─▶ key-by ─┬▶ stage 2, worker 0 ─┐
//!          (stateless)      └▶ stage 1, worker 1 ─▶ key-by ─┴▶ stage 2, worker 1 ─┴▶ merger ─▶ sinks
//! ```
//!
//! A pipeline is split before each keyed operator (window or join) into
//! stages. The head thread runs the operators before the first keyed one;
//! each keyed stage runs in `workers` threads with their own instances of
//! the stage's operators (sharing the operators' state, whose keys they
//! partition by key group). Between stages, a key-by exchange sends each
//! record to the worker owning its key's key group; watermarks, barriers
//! and the end of input go to every worker. A worker reads its inputs (one
//! per upstream instance) through an input gate: minimum watermark,
//! aligned barriers. The merger writes what the stages emit to the sinks,
//! takes the minimum of the last stage's watermarks, and acknowledges a
//! checkpoint barrier once every last-stage worker has passed it.
//!
//! Every channel is bounded: a slow worker backpressures its upstream and,
//! in the end, the source. The time a thread spends blocked handing its
//! output on is its operators' backpressured time (as in Flink, chained
//! operators share their thread's).

use super::chain::SinkRoute;
use super::input_gate::InputGate;
use super::{
    DataflowError, Operator, OperatorChain, Sink, SinkSet, StreamElement, send_timing_backpressure,
};
use crate::checkpoint::CheckpointCoordinator;
use crate::metrics::{ChannelMetrics, OperatorMetrics, PipelineMetrics, add};
use crate::record::Record;
use crate::state::key_group;
use crossbeam_channel::{Receiver, Sender, bounded};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The key of a record at the key-by exchange (`None`: no key; such
/// records go to worker 0, whose operator dead-letters them).
pub type Partitioner = Arc<dyn Fn(&Record) -> Option<Vec<u8>> + Send + Sync>;

/// A pipeline split into a head and keyed stages.
pub struct ParallelChains {
    /// Operators before the first keyed one (one instance).
    pub head: Vec<Box<dyn Operator>>,
    /// The keyed stages, in order.
    pub stages: Vec<KeyedStage>,
    /// Key groups (must match the operators' state).
    pub max_parallelism: u16,
    /// The real sinks, written by the merger.
    pub sinks: SinkSet,
    /// Side output names (forwarded to the merger).
    pub side_outputs: Vec<String>,
    /// Capacity of each channel, in batches.
    pub channel_capacity: usize,
}

impl ParallelChains {
    /// Threads that hold operators: the head and every worker of every
    /// stage (they meet at each checkpoint's snapshot).
    pub fn threads(&self) -> usize {
        1 + self.stages.iter().map(|s| s.workers.len()).sum::<usize>()
    }
}

/// A keyed operator and the operators after it up to the next keyed one,
/// in one instance per worker.
pub struct KeyedStage {
    /// How records are keyed at the exchange in front of the stage.
    pub partitioner: Partitioner,
    /// One chain of the stage's operators per worker.
    pub workers: Vec<Vec<Box<dyn Operator>>>,
}

/// What the merger receives.
enum ToMerger {
    Output(SinkRoute, Vec<Record>),
    Watermark(usize, i64),
    LatencyMarker(std::time::Instant),
    BarrierPassed(u64),
    Ended,
    Failed(DataflowError),
}

/// The operators of one thread, whose backpressured time is counted when
/// the thread blocks on a full channel.
#[derive(Clone, Default)]
struct Backpressure {
    operators: Vec<Arc<OperatorMetrics>>,
    pipeline: Option<Arc<PipelineMetrics>>,
}

impl Backpressure {
    /// Sends `message` on `channel`, counting the time blocked on a full
    /// channel. `Err` when the receiver has gone.
    fn send<T>(&self, channel: &Sender<T>, message: T) -> Result<(), ()> {
        let sent = send_timing_backpressure(channel, message, |ns| {
            for operator in &self.operators {
                add(&operator.backpressured_ns, ns);
            }
            if let Some(pipeline) = &self.pipeline {
                add(&pipeline.exchange_backpressured_ns, ns);
            }
        });
        if sent { Ok(()) } else { Err(()) }
    }
}

/// A sink that hands records to the merger.
struct ForwardSink {
    route: SinkRoute,
    merger: Sender<ToMerger>,
    backpressure: Backpressure,
    channel: Arc<ChannelMetrics>,
}

impl Sink for ForwardSink {
    fn name(&self) -> &str {
        "exchange"
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        let sent = self.backpressure.send(
            &self.merger,
            ToMerger::Output(self.route.clone(), records.to_vec()),
        );
        self.channel
            .queued
            .store(self.merger.len() as u64, Ordering::Relaxed);
        sent.map_err(|()| DataflowError::operator("exchange", "the sinks have stopped"))
    }

    fn flush(&mut self) -> Result<(), DataflowError> {
        Ok(())
    }
}

/// A key-by exchange: one instance's main output, split by key group over
/// the next stage's workers.
#[derive(Clone)]
struct ExchangeSink {
    partitioner: Partitioner,
    max_parallelism: u16,
    workers: Vec<Sender<StreamElement>>,
    /// The fill of each worker's channel.
    channels: Vec<Arc<ChannelMetrics>>,
    backpressure: Backpressure,
}

impl ExchangeSink {
    fn send(&self, worker: usize, element: StreamElement) -> Result<(), DataflowError> {
        let sent = self.backpressure.send(&self.workers[worker], element);
        if let Some(channel) = self.channels.get(worker) {
            channel
                .queued
                .store(self.workers[worker].len() as u64, Ordering::Relaxed);
        }
        sent.map_err(|()| {
            DataflowError::operator("exchange", format!("worker {worker} has stopped"))
        })
    }

    /// Sends a watermark, barrier or the end to every worker.
    fn broadcast(&self, element: &StreamElement) -> Result<(), DataflowError> {
        (0..self.workers.len()).try_for_each(|worker| self.send(worker, element.clone()))
    }
}

impl Sink for ExchangeSink {
    fn name(&self) -> &str {
        "key-by"
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        let count = self.workers.len();
        let mut batches: Vec<Vec<Record>> = vec![Vec::new(); count];
        for record in records {
            let worker = match (self.partitioner)(record) {
                Some(key) => key_group::worker_for_key_group(
                    key_group::key_group(&key, self.max_parallelism),
                    count,
                    self.max_parallelism,
                ),
                None => 0,
            };
            batches[worker].push(record.clone());
        }
        for (worker, batch) in batches.into_iter().enumerate() {
            if !batch.is_empty() {
                self.send(worker, StreamElement::Records(batch))?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DataflowError> {
        Ok(())
    }
}

/// Where an instance sends its main output and control elements.
enum Downstream {
    /// The key-by exchange into the next stage.
    Exchange(ExchangeSink),
    /// The merger (the last stage; `usize` is the worker's index).
    Merger(usize),
}

/// What every instance is wired to: the merger (with the side outputs it
/// serves), the scratch counters of instance chains, the checkpoints.
struct Wiring<'a> {
    merger: &'a Sender<ToMerger>,
    /// The fill of the channel into the merger.
    merger_channel: &'a Arc<ChannelMetrics>,
    side_outputs: &'a [String],
    scratch: &'a Arc<PipelineMetrics>,
    checkpoints: &'a Option<Arc<CheckpointCoordinator>>,
}

/// One thread: an input gate, a chain, and where its output goes.
struct Instance {
    name: String,
    gate: InputGate,
    chain: OperatorChain,
    downstream: Downstream,
    merger: Sender<ToMerger>,
    checkpoints: Option<Arc<CheckpointCoordinator>>,
}

impl Instance {
    /// Builds the instance running `operators`, reading `inputs`, writing
    /// its main output to `downstream` and everything else to `merger`.
    fn new(
        name: String,
        operators: Vec<Box<dyn Operator>>,
        inputs: Vec<Receiver<StreamElement>>,
        mut downstream: Downstream,
        wiring: &Wiring<'_>,
    ) -> Self {
        let &Wiring {
            merger,
            merger_channel,
            side_outputs,
            scratch,
            checkpoints,
        } = wiring;
        let backpressure = Backpressure {
            operators: operators.iter().map(|op| op.metrics().clone()).collect(),
            pipeline: None,
        };
        let forward = |route: SinkRoute| -> Box<dyn Sink> {
            Box::new(ForwardSink {
                route,
                merger: merger.clone(),
                backpressure: backpressure.clone(),
                channel: merger_channel.clone(),
            })
        };
        let main = match &mut downstream {
            Downstream::Exchange(exchange) => {
                exchange.backpressure.operators = backpressure.operators.clone();
                Box::new(exchange.clone())
            }
            Downstream::Merger(_) => forward(SinkRoute::Main),
        };
        let sinks = SinkSet {
            main,
            dead_letter: forward(SinkRoute::DeadLetter),
            side: side_outputs
                .iter()
                .map(|name| (name.clone(), forward(SinkRoute::Side(name.clone()))))
                .collect(),
        };
        Instance {
            name,
            gate: InputGate::new(inputs),
            chain: OperatorChain::new(operators, sinks, scratch.clone()),
            downstream,
            merger: merger.clone(),
            checkpoints: checkpoints.clone(),
        }
    }

    /// Runs until the end of the input or a failure (reported to the merger).
    fn run(mut self) {
        while let Some(element) = self.gate.next() {
            let control = match &element {
                StreamElement::Watermark(_)
                | StreamElement::Barrier(_)
                | StreamElement::LatencyMarker(_)
                | StreamElement::End => Some(element.clone()),
                _ => None,
            };
            let result = self.chain.handle(element).and_then(|_| match &control {
                Some(control) => {
                    self.pass_on(control)?;
                    // After passing the barrier on (so the next stage can
                    // reach it too): meet the other threads for the snapshot.
                    match (control, &self.checkpoints) {
                        (StreamElement::Barrier(barrier), Some(coordinator)) => {
                            Ok(coordinator.arrive(barrier.id)?)
                        }
                        _ => Ok(()),
                    }
                }
                None => Ok(()),
            });
            if let Err(error) = result {
                let _ = self.merger.send(ToMerger::Failed(error));
                return;
            }
            if matches!(control, Some(StreamElement::End)) {
                return;
            }
        }
    }

    /// Passes a control element the chain has handled downstream.
    fn pass_on(&self, control: &StreamElement) -> Result<(), DataflowError> {
        match &self.downstream {
            Downstream::Exchange(exchange) => exchange.broadcast(control),
            Downstream::Merger(worker) => {
                let message = match control {
                    StreamElement::Watermark(w) => ToMerger::Watermark(*worker, *w),
                    StreamElement::Barrier(b) => ToMerger::BarrierPassed(b.id),
                    StreamElement::LatencyMarker(read_at) => ToMerger::LatencyMarker(*read_at),
                    _ => ToMerger::Ended,
                };
                self.merger
                    .send(message)
                    .map_err(|_| DataflowError::operator(&self.name, "the sinks have stopped"))
            }
        }
    }

    fn spawn(self) -> Result<std::thread::JoinHandle<()>, DataflowError> {
        let name = self.name.clone();
        crate::sync::spawn_named(format!("sluice-{name}"), move || self.run()).map_err(|error| {
            DataflowError::operator("exchange", format!("cannot start thread {name}: {error}"))
        })
    }
}

/// Runs the parallel topology over `input` (elements from the source
/// thread), acknowledging completed barriers on `acks`.
pub(crate) fn drive(
    parallel: ParallelChains,
    input: Receiver<StreamElement>,
    acks: Sender<u64>,
    metrics: Arc<PipelineMetrics>,
    stop: &AtomicBool,
    checkpoints: Option<Arc<CheckpointCoordinator>>,
) -> Result<(), DataflowError> {
    let ParallelChains {
        head,
        stages,
        max_parallelism,
        mut sinks,
        side_outputs,
        channel_capacity,
    } = parallel;
    let capacity = channel_capacity.max(1);
    let last_workers = stages.last().map_or(1, |stage| stage.workers.len());
    // Every instance can hold `capacity` messages for the merger.
    let threads_count = 1 + stages.iter().map(|s| s.workers.len()).sum::<usize>();
    let (merger_sender, merger) = bounded::<ToMerger>(capacity * threads_count);
    let merger_channel = metrics.register_channel("workers", "sinks", capacity * threads_count);
    // Chain-level counters of the instances are not the pipeline's: the
    // merger counts what reaches the sinks.
    let scratch = Arc::new(PipelineMetrics::default());
    for operator in head
        .iter()
        .chain(stages.iter().flat_map(|s| s.workers.iter().flatten()))
    {
        metrics.register_operator(operator.metrics().clone());
    }

    let wiring = Wiring {
        merger: &merger_sender,
        merger_channel: &merger_channel,
        side_outputs: &side_outputs,
        scratch: &scratch,
        checkpoints: &checkpoints,
    };
    // Build from the last stage back, so each stage knows the exchange
    // into the next one.
    let widths: Vec<usize> = stages.iter().map(|stage| stage.workers.len()).collect();
    let mut instances: Vec<Instance> = Vec::new();
    let mut next: Option<NextStage> = None;
    for (stage_index, stage) in stages.into_iter().enumerate().rev() {
        let upstream = match stage_index {
            0 => 1,
            _ => widths[stage_index - 1],
        };
        let (senders, mut receivers) = channel_grid(upstream, stage.workers.len(), capacity);
        for (worker, operators) in stage.workers.into_iter().enumerate().rev() {
            let name = format!("stage{}-worker{worker}", stage_index + 1);
            let downstream = match &next {
                Some(next) => {
                    Downstream::Exchange(exchange(next, (worker, &name), max_parallelism, &metrics))
                }
                None => Downstream::Merger(worker),
            };
            instances.push(Instance::new(
                name,
                operators,
                receivers.pop().unwrap_or_default(),
                downstream,
                &wiring,
            ));
        }
        next = Some((senders, stage.partitioner, stage_index + 1));
    }
    let head_downstream = match &next {
        Some(next) => Downstream::Exchange(exchange(next, (0, "head"), max_parallelism, &metrics)),
        None => Downstream::Merger(0),
    };
    instances.push(Instance::new(
        "head".into(),
        head,
        vec![input],
        head_downstream,
        &wiring,
    ));
    drop(next);

    let mut threads = Vec::new();
    for instance in instances {
        match instance.spawn() {
            Ok(thread) => threads.push(thread),
            Err(error) => {
                stop.store(true, Ordering::Relaxed);
                if let Some(coordinator) = &checkpoints {
                    coordinator.abort(&error.to_string());
                }
                drop(merger_sender);
                drop(merger);
                for thread in threads {
                    let _ = thread.join();
                }
                return Err(error);
            }
        }
    }
    drop(merger_sender);
    let result = merge(
        merger,
        last_workers,
        &mut sinks,
        &metrics,
        &acks,
        checkpoints.as_deref(),
    );
    if let Err(error) = &result {
        // Stop the source (it then ends the head and the workers) and do
        // not make it wait for acknowledgements that will not come; free
        // the threads waiting for a snapshot.
        stop.store(true, Ordering::Relaxed);
        if let Some(coordinator) = &checkpoints {
            coordinator.abort(&error.to_string());
        }
        drop(acks);
    }
    for thread in threads {
        let _ = thread.join();
    }
    result
}

/// Bounded channels from `upstream` instances to `workers`: the senders by
/// upstream instance, the receivers by worker.
#[allow(clippy::type_complexity)]
fn channel_grid(
    upstream: usize,
    workers: usize,
    capacity: usize,
) -> (
    Vec<Vec<Sender<StreamElement>>>,
    Vec<Vec<Receiver<StreamElement>>>,
) {
    let mut senders = vec![Vec::with_capacity(workers); upstream];
    let mut receivers = vec![Vec::with_capacity(upstream); workers];
    for from in senders.iter_mut() {
        for to in receivers.iter_mut() {
            let (sender, receiver) = bounded(capacity);
            from.push(sender);
            to.push(receiver);
        }
    }
    (senders, receivers)
}

/// The channels into a stage by upstream instance, its key and its number.
type NextStage = (Vec<Vec<Sender<StreamElement>>>, Partitioner, usize);

/// The exchange upstream instance `index` (named `from`) uses to reach the
/// next stage.
fn exchange(
    next: &NextStage,
    (index, from): (usize, &str),
    max_parallelism: u16,
    metrics: &Arc<PipelineMetrics>,
) -> ExchangeSink {
    let (channels, partitioner, stage) = next;
    let workers = channels.get(index).cloned().unwrap_or_default();
    let fills = workers
        .iter()
        .enumerate()
        .map(|(worker, sender)| {
            metrics.register_channel(
                from,
                &format!("stage{stage}-worker{worker}"),
                sender.capacity().unwrap_or(0),
            )
        })
        .collect();
    ExchangeSink {
        partitioner: partitioner.clone(),
        max_parallelism,
        workers,
        channels: fills,
        backpressure: Backpressure {
            operators: Vec::new(),
            pipeline: Some(metrics.clone()),
        },
    }
}

/// The merger: writes every stage's output to the sinks, combines the last
/// stage's watermarks and acknowledges barriers all its workers passed.
///
/// It writes what arrives at once, without aligning barriers over the
/// instances that send it output: with checkpoints, every instance meets
/// the others at the snapshot ([`CheckpointCoordinator::arrive`]) after
/// passing a barrier, so nothing an instance sends after barrier N reaches
/// the merger before every last-stage worker's `BarrierPassed(N)` (and the
/// pre-commit of N). Snapshots that no longer stop every thread would need
/// alignment here.
fn merge(
    merger: Receiver<ToMerger>,
    worker_count: usize,
    sinks: &mut SinkSet,
    metrics: &PipelineMetrics,
    acks: &Sender<u64>,
    checkpoints: Option<&CheckpointCoordinator>,
) -> Result<(), DataflowError> {
    let mut watermarks: Vec<i64> = vec![i64::MIN; worker_count];
    let mut barriers: BTreeMap<u64, usize> = BTreeMap::new();
    let mut ended = 0;
    for message in merger.iter() {
        match message {
            ToMerger::Output(route, records) => sinks.write(&route, &records, metrics)?,
            ToMerger::LatencyMarker(read_at) => metrics.record_latency.observe(read_at.elapsed()),
            ToMerger::Watermark(worker, watermark) => {
                watermarks[worker] = watermark;
                let combined = watermarks.iter().copied().min().unwrap_or(i64::MIN);
                if combined != i64::MIN {
                    sinks.main.on_watermark(combined)?;
                    metrics.watermark.store(combined, Ordering::Relaxed);
                }
            }
            ToMerger::BarrierPassed(id) => {
                let passed = barriers.entry(id).or_default();
                *passed += 1;
                if *passed == worker_count {
                    barriers.remove(&id);
                    add(&metrics.barriers, 1);
                    match checkpoints {
                        // The coordinator acknowledges once it is published.
                        Some(coordinator) => {
                            super::chain::pre_commit_sinks(sinks, id, coordinator)?
                        }
                        None => {
                            sinks.flush_all()?;
                            let _ = acks.send(id);
                        }
                    }
                }
            }
            ToMerger::Ended => {
                ended += 1;
                if ended == worker_count {
                    return sinks.flush_all();
                }
            }
            ToMerger::Failed(error) => return Err(error),
        }
    }
    Err(DataflowError::operator(
        "exchange",
        "every worker stopped before the end of the input",
    ))
}
