//! Key-by parallelism: the keyed part of a pipeline runs in N worker
//! threads, each owning a range of key groups.
//!
//! ```text
//! source ─▶ head chain ─▶ key-by exchange ─┬▶ worker 0 (keyed operators) ─┐
//!           (stateless     (bounded          ├▶ worker 1                   ├▶ sinks
//!            operators)     channels)        └▶ ...                        ┘  (merger)
//! ```
//!
//! The head thread runs the operators before the first keyed one and sends
//! each record to the worker owning its key's key group; watermarks,
//! barriers and the end of input go to every worker. Each worker runs its
//! own instances of the keyed operators (sharing the operator's state, whose
//! keys they partition by key group). The merger writes what all of them
//! emit to the sinks, takes the minimum of the workers' watermarks, and
//! acknowledges a checkpoint barrier once every worker has passed it (barrier
//! alignment). All channels are bounded: a slow worker backpressures the
//! head and the source, and the time the head spends blocked on a worker is
//! counted per worker.

use super::{DataflowError, OperatorChain, Sink, SinkSet, StreamElement};
use crate::metrics::{PipelineMetrics, add};
use crate::record::Record;
use crate::state::key_group;
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded, unbounded};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The key of a record at the key-by exchange (`None`: no key; such
/// records go to worker 0, whose operator dead-letters them).
pub type Partitioner = Arc<dyn Fn(&Record) -> Option<Vec<u8>> + Send + Sync>;

/// A pipeline split at its first keyed operator.
pub struct ParallelChains {
    /// Operators before the key-by, in a chain whose sinks are set by
    /// [`ParallelChains`] itself.
    pub head: Vec<Box<dyn super::Operator>>,
    /// One chain of keyed operators per worker.
    pub workers: Vec<Vec<Box<dyn super::Operator>>>,
    /// How records are keyed at the exchange.
    pub partitioner: Partitioner,
    /// Key groups (must match the operators' state).
    pub max_parallelism: u16,
    /// The real sinks, written by the merger.
    pub sinks: SinkSet,
    /// Side output names (forwarded to the merger).
    pub side_outputs: Vec<String>,
    /// Capacity of each worker's input channel, in batches.
    pub channel_capacity: usize,
}

/// Where an output record goes.
#[derive(Debug, Clone)]
enum Route {
    Main,
    DeadLetter,
    Side(String),
}

/// What the merger receives.
enum ToMerger {
    Output(Route, Vec<Record>),
    Watermark(usize, i64),
    BarrierPassed(u64),
    Ended,
    Failed(DataflowError),
}

/// A sink that hands records to the merger.
struct ForwardSink {
    route: Route,
    merger: Sender<ToMerger>,
}

impl Sink for ForwardSink {
    fn name(&self) -> &str {
        "exchange"
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        self.merger
            .send(ToMerger::Output(self.route.clone(), records.to_vec()))
            .map_err(|_| DataflowError::Operator {
                name: "exchange".into(),
                message: "the sinks have stopped".into(),
            })
    }

    fn flush(&mut self) -> Result<(), DataflowError> {
        Ok(())
    }
}

/// The head chain's main output: the key-by exchange.
#[derive(Clone)]
struct ExchangeSink {
    partitioner: Partitioner,
    max_parallelism: u16,
    workers: Vec<Sender<StreamElement>>,
    backpressured_ns: Arc<Vec<std::sync::atomic::AtomicU64>>,
}

impl ExchangeSink {
    fn send(&self, worker: usize, element: StreamElement) -> Result<(), DataflowError> {
        let disconnected = || DataflowError::Operator {
            name: "exchange".into(),
            message: format!("worker {worker} has stopped"),
        };
        match self.workers[worker].try_send(element) {
            Ok(()) => Ok(()),
            Err(TrySendError::Disconnected(_)) => Err(disconnected()),
            Err(TrySendError::Full(element)) => {
                let blocked = Instant::now();
                let sent = self.workers[worker].send(element);
                add(
                    &self.backpressured_ns[worker],
                    blocked.elapsed().as_nanos() as u64,
                );
                sent.map_err(|_| disconnected())
            }
        }
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

fn forward_sinks(
    merger: &Sender<ToMerger>,
    side_outputs: &[String],
    main: Box<dyn Sink>,
) -> SinkSet {
    SinkSet {
        main,
        dead_letter: Box::new(ForwardSink {
            route: Route::DeadLetter,
            merger: merger.clone(),
        }),
        side: side_outputs
            .iter()
            .map(|name| {
                let sink: Box<dyn Sink> = Box::new(ForwardSink {
                    route: Route::Side(name.clone()),
                    merger: merger.clone(),
                });
                (name.clone(), sink)
            })
            .collect(),
    }
}

/// Runs the parallel topology over `input` (elements from the source
/// thread), acknowledging completed barriers on `acks`.
pub(crate) fn drive(
    parallel: ParallelChains,
    input: Receiver<StreamElement>,
    acks: Sender<u64>,
    metrics: Arc<PipelineMetrics>,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(), DataflowError> {
    let ParallelChains {
        head,
        workers,
        partitioner,
        max_parallelism,
        mut sinks,
        side_outputs,
        channel_capacity,
    } = parallel;
    let worker_count = workers.len();
    let (merger_sender, merger) = unbounded::<ToMerger>();
    // Chain-level counters of the head and workers are not the pipeline's:
    // the merger counts what reaches the sinks.
    let scratch = Arc::new(PipelineMetrics::default());
    for operator in head.iter().chain(workers.iter().flatten()) {
        metrics.register_operator(operator.metrics().clone());
    }

    let mut worker_inputs = Vec::new();
    let mut threads = Vec::new();
    for (index, operators) in workers.into_iter().enumerate() {
        let (sender, receiver) = bounded::<StreamElement>(channel_capacity.max(1));
        worker_inputs.push(sender);
        let main: Box<dyn Sink> = Box::new(ForwardSink {
            route: Route::Main,
            merger: merger_sender.clone(),
        });
        let mut chain = OperatorChain::new(
            operators,
            forward_sinks(&merger_sender, &side_outputs, main),
            scratch.clone(),
        );
        let to_merger = merger_sender.clone();
        let thread = std::thread::Builder::new()
            .name(format!("sluice-worker-{index}"))
            .spawn(move || {
                for element in receiver.iter() {
                    let after = match &element {
                        StreamElement::Watermark(w) => Some(ToMerger::Watermark(index, *w)),
                        StreamElement::Barrier(b) => Some(ToMerger::BarrierPassed(b.id)),
                        StreamElement::End => Some(ToMerger::Ended),
                        _ => None,
                    };
                    let ended = matches!(element, StreamElement::End);
                    if let Err(error) = chain.handle(element) {
                        let _ = to_merger.send(ToMerger::Failed(error));
                        return;
                    }
                    if let Some(message) = after {
                        let _ = to_merger.send(message);
                    }
                    if ended {
                        return;
                    }
                }
            })
            .map_err(|error| DataflowError::Operator {
                name: "exchange".into(),
                message: format!("cannot start worker thread: {error}"),
            })?;
        threads.push(thread);
    }

    // The head thread: head operators, then the exchange.
    let backpressured: Arc<Vec<std::sync::atomic::AtomicU64>> = Arc::new(
        (0..worker_count)
            .map(|_| std::sync::atomic::AtomicU64::new(0))
            .collect(),
    );
    let exchange = ExchangeSink {
        partitioner,
        max_parallelism,
        workers: worker_inputs.clone(),
        backpressured_ns: backpressured.clone(),
    };
    let broadcast = exchange.clone();
    drop(worker_inputs);
    let mut head_chain = OperatorChain::new(
        head,
        forward_sinks(&merger_sender, &side_outputs, Box::new(exchange)),
        scratch,
    );
    let head_to_merger = merger_sender.clone();
    let head_metrics = metrics.clone();
    let head_thread = std::thread::Builder::new()
        .name("sluice-head".into())
        .spawn(move || {
            for element in input.iter() {
                let control = match &element {
                    StreamElement::Watermark(_)
                    | StreamElement::Barrier(_)
                    | StreamElement::End => Some(element.clone()),
                    _ => None,
                };
                let result = head_chain.handle(element).and_then(|_| match &control {
                    Some(control) => (0..broadcast.workers.len())
                        .try_for_each(|worker| broadcast.send(worker, control.clone())),
                    None => Ok(()),
                });
                let blocked: u64 = broadcast
                    .backpressured_ns
                    .iter()
                    .map(|n| n.load(Ordering::Relaxed))
                    .sum();
                head_metrics
                    .exchange_backpressured_ns
                    .store(blocked, Ordering::Relaxed);
                if let Err(error) = result {
                    let _ = head_to_merger.send(ToMerger::Failed(error));
                    return;
                }
                if matches!(control, Some(StreamElement::End)) {
                    return;
                }
            }
        })
        .map_err(|error| DataflowError::Operator {
            name: "exchange".into(),
            message: format!("cannot start head thread: {error}"),
        })?;
    drop(merger_sender);

    // The merger, on this thread.
    let mut watermarks: Vec<i64> = vec![i64::MIN; worker_count];
    let mut barriers: BTreeMap<u64, usize> = BTreeMap::new();
    let mut ended = 0;
    let mut result = Ok(());
    for message in merger.iter() {
        match message {
            ToMerger::Output(route, records) => {
                let written = match route {
                    Route::Main => sinks.main.write(&records).map(|()| &metrics.records_out),
                    Route::DeadLetter => sinks
                        .dead_letter
                        .write(&records)
                        .map(|()| &metrics.dead_letters),
                    Route::Side(name) => match sinks.side.get_mut(&name) {
                        Some(sink) => sink.write(&records).map(|()| &metrics.side_out),
                        None => Ok(&metrics.side_out),
                    },
                };
                match written {
                    Ok(counter) => add(counter, records.len() as u64),
                    Err(error) => {
                        result = Err(error);
                        break;
                    }
                }
            }
            ToMerger::Watermark(worker, watermark) => {
                watermarks[worker] = watermark;
                let combined = watermarks.iter().copied().min().unwrap_or(i64::MIN);
                if combined != i64::MIN {
                    metrics.watermark.store(combined, Ordering::Relaxed);
                }
            }
            ToMerger::BarrierPassed(id) => {
                let passed = barriers.entry(id).or_default();
                *passed += 1;
                if *passed == worker_count {
                    barriers.remove(&id);
                    if let Err(error) = flush_all(&mut sinks) {
                        result = Err(error);
                        break;
                    }
                    add(&metrics.barriers, 1);
                    let _ = acks.send(id);
                }
            }
            ToMerger::Ended => {
                ended += 1;
                if ended == worker_count {
                    result = flush_all(&mut sinks);
                    break;
                }
            }
            ToMerger::Failed(error) => {
                result = Err(error);
                break;
            }
        }
    }
    drop(merger);
    if result.is_err() {
        // Stop the source (it then ends the head and the workers) and do
        // not make it wait for acknowledgements that will not come.
        stop.store(true, Ordering::Relaxed);
        drop(acks);
    }
    let _ = head_thread.join();
    for thread in threads {
        let _ = thread.join();
    }
    result
}

fn flush_all(sinks: &mut SinkSet) -> Result<(), DataflowError> {
    sinks.main.flush()?;
    for sink in sinks.side.values_mut() {
        sink.flush()?;
    }
    sinks.dead_letter.flush()
}
