//! Control messages travel in-band: every operator of a chain sees batches,
//! watermarks and checkpoint barriers in source order, and the sinks get
//! every record.

use sluice_host::connectors::generator::{GeneratorOptions, GeneratorSource, Profile};
use sluice_host::dataflow::{
    CheckpointBarrier, Collector, DataflowError, ExecutorConfig, KeyedStage, Operator,
    OperatorChain, ParallelChains, Partitioner, RunOutcome, Sink, SinkSet, Source, SourceBatch,
    run,
};
use sluice_host::metrics::{OperatorMetrics, PipelineMetrics};
use sluice_host::record::{Header, Record};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Records { first_offset: i64, count: usize },
    Watermark(i64),
    Barrier(u64),
    Finish,
}

struct Recording {
    name: String,
    metrics: Arc<OperatorMetrics>,
    log: Arc<Mutex<Vec<Seen>>>,
}

impl Operator for Recording {
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
        self.log.lock().unwrap().push(Seen::Records {
            first_offset: batch[0].source.offset,
            count: batch.len(),
        });
        out.main = batch;
        Ok(())
    }
    fn on_watermark(&mut self, watermark: i64, _out: &mut Collector) -> Result<(), DataflowError> {
        self.log.lock().unwrap().push(Seen::Watermark(watermark));
        Ok(())
    }
    fn on_barrier(
        &mut self,
        barrier: &CheckpointBarrier,
        _out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.log.lock().unwrap().push(Seen::Barrier(barrier.id));
        Ok(())
    }
    fn finish(&mut self, _out: &mut Collector) -> Result<(), DataflowError> {
        self.log.lock().unwrap().push(Seen::Finish);
        Ok(())
    }
}

/// A source that records the checkpoints it is asked to snapshot and told
/// are complete, around a generator.
struct CheckpointedSource {
    inner: GeneratorSource,
    snapshots: Arc<Mutex<Vec<u64>>>,
    completed: Arc<Mutex<Vec<u64>>>,
}

impl Source for CheckpointedSource {
    fn name(&self) -> &str {
        "checkpointed"
    }
    fn next_batch(&mut self, max_records: usize) -> Result<Option<SourceBatch>, DataflowError> {
        self.inner.next_batch(max_records)
    }
    fn snapshot_position(
        &mut self,
        checkpoint_id: u64,
    ) -> Result<serde_json::Value, DataflowError> {
        self.snapshots.lock().unwrap().push(checkpoint_id);
        Ok(serde_json::Value::Null)
    }
    fn on_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), DataflowError> {
        self.completed.lock().unwrap().push(checkpoint_id);
        Ok(())
    }
}

struct CountingSink(Arc<Mutex<Vec<i64>>>);

impl Sink for CountingSink {
    fn name(&self) -> &str {
        "counting"
    }
    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        self.0
            .lock()
            .unwrap()
            .extend(records.iter().map(|r| r.source.offset));
        Ok(())
    }
    fn flush(&mut self) -> Result<(), DataflowError> {
        Ok(())
    }
}

#[test]
fn watermarks_and_barriers_reach_every_operator_in_order() {
    let logs: Vec<Arc<Mutex<Vec<Seen>>>> = (0..2).map(|_| Arc::default()).collect();
    let operators: Vec<Box<dyn Operator>> = logs
        .iter()
        .enumerate()
        .map(|(i, log)| {
            Box::new(Recording {
                name: format!("op{i}"),
                metrics: OperatorMetrics::new(format!("op{i}")),
                log: log.clone(),
            }) as Box<dyn Operator>
        })
        .collect();
    let written = Arc::new(Mutex::new(Vec::new()));
    let sinks = SinkSet {
        main: Box::new(CountingSink(written.clone())),
        dead_letter: Box::new(CountingSink(Arc::default())),
        side: BTreeMap::new(),
    };
    let metrics = Arc::new(PipelineMetrics::default());
    let chain = OperatorChain::new(operators, sinks, metrics.clone());
    // 4000 records at 20,000/s last ~200 ms: several 20 ms barrier intervals.
    let snapshots = Arc::new(Mutex::new(Vec::new()));
    let completed = Arc::new(Mutex::new(Vec::new()));
    let source = CheckpointedSource {
        inner: GeneratorSource::new(
            "g",
            GeneratorOptions {
                profile: Profile::Payload,
                count: Some(4000),
                rate: Some(20_000),
                ..GeneratorOptions::default()
            },
        ),
        snapshots: snapshots.clone(),
        completed: completed.clone(),
    };
    let config = ExecutorConfig {
        batch_size: 100,
        channel_capacity: 2,
        watermarks: sluice_host::time::WatermarkStrategy {
            max_out_of_orderness: Duration::from_millis(5),
            idle_timeout: None,
        },
        barrier_interval: Some(Duration::from_millis(20)),
        ..ExecutorConfig::default()
    };
    let outcome = run(
        Box::new(source),
        sluice_host::dataflow::Topology::Chain(chain),
        config,
        metrics.clone(),
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    assert_eq!(
        *written.lock().unwrap(),
        (0..4000).collect::<Vec<i64>>(),
        "every record, in order"
    );

    let first = logs[0].lock().unwrap().clone();
    let second = logs[1].lock().unwrap().clone();
    assert_eq!(
        first, second,
        "both chained operators see the same element sequence"
    );
    assert_eq!(first.last(), Some(&Seen::Finish));

    let watermarks: Vec<i64> = first
        .iter()
        .filter_map(|s| {
            if let Seen::Watermark(w) = s {
                Some(*w)
            } else {
                None
            }
        })
        .collect();
    assert!(
        watermarks.windows(2).all(|w| w[0] < w[1]),
        "watermarks only advance"
    );
    assert_eq!(
        watermarks.last(),
        Some(&i64::MAX),
        "a finished bounded input releases all event time"
    );
    let barriers: Vec<u64> = first
        .iter()
        .filter_map(|s| {
            if let Seen::Barrier(b) = s {
                Some(*b)
            } else {
                None
            }
        })
        .collect();
    assert!(
        barriers.len() >= 2,
        "expected several barriers, got {barriers:?}"
    );
    assert_eq!(barriers, (1..=barriers.len() as u64).collect::<Vec<_>>());
    assert_eq!(metrics.snapshot().barriers, barriers.len() as u64);
    // Every barrier was snapshotted before injection and confirmed after the
    // sinks flushed it, the final one (covering the end of input) included.
    assert_eq!(*snapshots.lock().unwrap(), barriers);
    assert_eq!(*completed.lock().unwrap(), barriers);
    let last_barrier = first
        .iter()
        .rposition(|s| matches!(s, Seen::Barrier(_)))
        .unwrap();
    assert!(
        first[last_barrier..]
            .iter()
            .all(|s| !matches!(s, Seen::Records { .. })),
        "the final barrier follows every record"
    );

    // Each watermark follows the batch that raised it and lags its highest
    // event time by the out-of-orderness bound plus one (a record exactly
    // `bound` late is still on time; events are 1 ms apart here).
    let mut highest_offset = -1;
    for seen in &first {
        match seen {
            Seen::Records {
                first_offset,
                count,
            } => highest_offset = first_offset + *count as i64 - 1,
            Seen::Watermark(w) if *w != i64::MAX => {
                assert_eq!(
                    *w,
                    GeneratorOptions::default().start_time_ms + highest_offset - 5 - 1
                )
            }
            _ => {}
        }
    }
}

/// Tags every record with the number of barriers its operator has seen (its
/// checkpoint epoch).
struct EpochTagger {
    metrics: Arc<OperatorMetrics>,
    barriers: u64,
}

impl Operator for EpochTagger {
    fn name(&self) -> &str {
        "tagger"
    }
    fn metrics(&self) -> &Arc<OperatorMetrics> {
        &self.metrics
    }
    fn process_batch(
        &mut self,
        mut batch: Vec<Record>,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        for record in &mut batch {
            record
                .headers
                .push(Header::new("epoch", self.barriers.to_string()));
        }
        out.main = batch;
        Ok(())
    }
    fn on_barrier(
        &mut self,
        _barrier: &CheckpointBarrier,
        _out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.barriers += 1;
        Ok(())
    }
}

/// Two keyed stages of two workers each, running `make(stage, worker)`,
/// behind `head`, into counting sinks (main output into `written`), with
/// channels of one batch.
fn two_by_two(
    head: Vec<Box<dyn Operator>>,
    written: Arc<Mutex<Vec<i64>>>,
    mut make: impl FnMut(usize, usize) -> Box<dyn Operator>,
) -> ParallelChains {
    let stages = (0..2)
        .map(|stage| {
            let workers: Vec<Vec<Box<dyn Operator>>> =
                (0..2).map(|worker| vec![make(stage, worker)]).collect();
            KeyedStage {
                partitioner: keyed_by_offset(),
                workers,
            }
        })
        .collect();
    ParallelChains {
        head,
        stages,
        max_parallelism: 128,
        sinks: SinkSet {
            main: Box::new(CountingSink(written)),
            dead_letter: Box::new(CountingSink(Arc::default())),
            side: BTreeMap::new(),
        },
        side_outputs: Vec::new(),
        channel_capacity: 1,
    }
}

/// Keys records by their source offset (spreads them over the workers).
fn keyed_by_offset() -> Partitioner {
    Arc::new(|record: &Record| Some(record.source.offset.to_be_bytes().to_vec()))
}

/// A keyed operator (keyed by offset) that checks every record arrives in
/// the epoch it was tagged with: barriers were aligned across its inputs.
/// Slow by `work` per batch, to backpressure what is upstream of it.
struct EpochChecker {
    metrics: Arc<OperatorMetrics>,
    barriers: u64,
    misplaced: Arc<Mutex<Vec<(u64, u64)>>>,
    work: Duration,
}

impl Operator for EpochChecker {
    fn name(&self) -> &str {
        "checker"
    }
    fn metrics(&self) -> &Arc<OperatorMetrics> {
        &self.metrics
    }
    fn partitioner(&self) -> Option<Partitioner> {
        Some(keyed_by_offset())
    }
    fn process_batch(
        &mut self,
        batch: Vec<Record>,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        for record in &batch {
            let epoch: u64 = std::str::from_utf8(record.header("epoch").unwrap())
                .unwrap()
                .parse()
                .unwrap();
            if epoch != self.barriers {
                self.misplaced.lock().unwrap().push((epoch, self.barriers));
            }
        }
        // Stands for real per-batch work.
        std::thread::sleep(self.work);
        out.main = batch;
        Ok(())
    }
    fn on_barrier(
        &mut self,
        _barrier: &CheckpointBarrier,
        _out: &mut Collector,
    ) -> Result<(), DataflowError> {
        self.barriers += 1;
        Ok(())
    }
}

#[test]
fn two_keyed_stages_on_two_workers_align_barriers_and_report_backpressure() {
    let misplaced = Arc::new(Mutex::new(Vec::new()));
    let tagger_metrics = OperatorMetrics::new("tagger");
    let mut stage_metrics = Vec::new();
    let written = Arc::new(Mutex::new(Vec::new()));
    let head: Vec<Box<dyn Operator>> = vec![Box::new(EpochTagger {
        metrics: tagger_metrics.clone(),
        barriers: 0,
    })];
    let parallel = two_by_two(head, written.clone(), |stage, worker| {
        let metrics = OperatorMetrics::new(format!("checker{stage}#{worker}"));
        stage_metrics.push((stage, metrics.clone()));
        Box::new(EpochChecker {
            metrics,
            barriers: 0,
            misplaced: misplaced.clone(),
            // The second stage is slow.
            work: Duration::from_micros(300 * stage as u64),
        })
    });
    let metrics = Arc::new(PipelineMetrics::default());
    let source = GeneratorSource::new(
        "g",
        GeneratorOptions {
            profile: Profile::Payload,
            count: Some(20_000),
            ..GeneratorOptions::default()
        },
    );
    let config = ExecutorConfig {
        batch_size: 50,
        channel_capacity: 1,
        barrier_interval: Some(Duration::from_millis(10)),
        ..ExecutorConfig::default()
    };
    let outcome = run(
        Box::new(source),
        sluice_host::dataflow::Topology::Parallel(parallel),
        config,
        metrics.clone(),
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);

    let mut written = written.lock().unwrap().clone();
    written.sort_unstable();
    assert_eq!(
        written,
        (0..20_000).collect::<Vec<i64>>(),
        "every record once"
    );
    let snapshot = metrics.snapshot();
    assert!(snapshot.barriers >= 3, "{snapshot:?}");
    assert_eq!(
        *misplaced.lock().unwrap(),
        Vec::<(u64, u64)>::new(),
        "records reached the second stage in another epoch than they were tagged in"
    );
    // The slow second stage backpressures the first stage and the head,
    // far more than anything blocks the second stage itself.
    let backpressured = |m: &OperatorMetrics| m.backpressured_ns.load(Ordering::Relaxed);
    assert!(backpressured(&tagger_metrics) > 0);
    let stage_total = |wanted: usize| -> u64 {
        stage_metrics
            .iter()
            .filter(|(stage, _)| *stage == wanted)
            .map(|(_, metrics)| backpressured(metrics))
            .sum()
    };
    for (stage, metrics) in &stage_metrics {
        match stage {
            0 => assert!(backpressured(metrics) > 0, "{}", metrics.name),
            _ => assert!(metrics.busy_ns.load(Ordering::Relaxed) > 0),
        }
    }
    assert!(
        stage_total(1) < stage_total(0),
        "first stage {} ns, second {} ns",
        stage_total(0),
        stage_total(1)
    );
    assert!(snapshot.exchange_backpressured_ns > 0);
}

/// Fails when it sees the record at `offset`.
struct FailAt {
    metrics: Arc<OperatorMetrics>,
    offset: i64,
}

impl Operator for FailAt {
    fn name(&self) -> &str {
        "fail-at"
    }
    fn metrics(&self) -> &Arc<OperatorMetrics> {
        &self.metrics
    }
    fn partitioner(&self) -> Option<Partitioner> {
        Some(keyed_by_offset())
    }
    fn process_batch(
        &mut self,
        batch: Vec<Record>,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        if batch.iter().any(|r| r.source.offset == self.offset) {
            return Err(DataflowError::operator("fail-at", "failed on purpose"));
        }
        out.main = batch;
        Ok(())
    }
}

#[test]
fn a_failing_worker_in_the_last_stage_stops_every_thread_and_reports_why() {
    // Small channels everywhere, so that upstream threads are blocked on
    // full channels when the worker fails: they must all be released.
    let parallel = two_by_two(Vec::new(), Arc::default(), |stage, _| {
        Box::new(FailAt {
            metrics: OperatorMetrics::new("fail-at"),
            // Only the second stage fails; the first fails on nothing (an
            // offset the input does not have).
            offset: if stage == 0 { -1 } else { 5_000 },
        })
    });
    let source = GeneratorSource::new(
        "g",
        GeneratorOptions {
            profile: Profile::Payload,
            count: Some(1_000_000),
            ..GeneratorOptions::default()
        },
    );
    let config = ExecutorConfig {
        batch_size: 10,
        channel_capacity: 1,
        ..ExecutorConfig::default()
    };
    let error = run(
        Box::new(source),
        sluice_host::dataflow::Topology::Parallel(parallel),
        config,
        Arc::new(PipelineMetrics::default()),
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .expect_err("the failure is reported");
    assert!(error.to_string().contains("failed on purpose"), "{error}");
}

/// A source that reads a record every 2 ms for 100 ms, nothing for 400 ms
/// (empty batches, as a poll that times out), records again for 100 ms,
/// then ends; it notes when each checkpoint snapshots its position.
struct QuietInTheMiddle {
    started: std::time::Instant,
    offset: i64,
    snapshots: Arc<Mutex<Vec<Duration>>>,
}

impl QuietInTheMiddle {
    const QUIET: std::ops::Range<Duration> = Duration::from_millis(100)..Duration::from_millis(500);
    const END: Duration = Duration::from_millis(600);
}

impl Source for QuietInTheMiddle {
    fn name(&self) -> &str {
        "quiet-in-the-middle"
    }
    fn next_batch(&mut self, _max_records: usize) -> Result<Option<SourceBatch>, DataflowError> {
        let elapsed = self.started.elapsed();
        if elapsed >= Self::END {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(2));
        let mut batch = SourceBatch::default();
        if !Self::QUIET.contains(&elapsed) {
            self.offset += 1;
            batch.records.push(Record::from_value(
                &b"{}"[..],
                sluice_host::record::SourcePosition {
                    topic: sluice_host::record::Topic::new("quiet"),
                    partition: 0,
                    offset: self.offset,
                },
            ));
        }
        Ok(Some(batch))
    }
    fn snapshot_position(
        &mut self,
        _checkpoint_id: u64,
    ) -> Result<serde_json::Value, DataflowError> {
        self.snapshots.lock().unwrap().push(self.started.elapsed());
        Ok(serde_json::Value::Null)
    }
}

/// When the checkpoints of a [`QuietInTheMiddle`] run snapshot, with
/// barriers every 20 ms and `skip_quiet_barriers` as given.
fn snapshots_of_a_quiet_middle(skip_quiet_barriers: bool) -> Vec<Duration> {
    let sinks = SinkSet {
        main: Box::new(CountingSink(Arc::default())),
        dead_letter: Box::new(CountingSink(Arc::default())),
        side: BTreeMap::new(),
    };
    let metrics = Arc::new(PipelineMetrics::default());
    let chain = OperatorChain::new(Vec::new(), sinks, metrics.clone());
    let snapshots = Arc::new(Mutex::new(Vec::new()));
    let source = QuietInTheMiddle {
        started: std::time::Instant::now(),
        offset: 0,
        snapshots: snapshots.clone(),
    };
    let config = ExecutorConfig {
        barrier_interval: Some(Duration::from_millis(20)),
        skip_quiet_barriers,
        ..ExecutorConfig::default()
    };
    let outcome = run(
        Box::new(source),
        sluice_host::dataflow::Topology::Chain(chain),
        config,
        metrics,
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    snapshots.lock().unwrap().clone()
}

#[test]
fn a_quiet_input_takes_no_checkpoints_when_asked_and_resumes_with_records() {
    // Quiet from 100 ms; barriers go on for two intervals (40 ms) after the
    // last record, then stop until records come back at 500 ms. The margins
    // (60 ms each side) leave room for a slow machine.
    let deep_quiet = Duration::from_millis(200)..Duration::from_millis(440);
    let skipping = snapshots_of_a_quiet_middle(true);
    assert!(
        !skipping.iter().any(|at| deep_quiet.contains(at)),
        "no checkpoint while quiet: {skipping:?}"
    );
    assert!(
        skipping
            .iter()
            .any(|at| *at < QuietInTheMiddle::QUIET.start),
        "checkpoints before the quiet: {skipping:?}"
    );
    assert!(
        skipping.iter().any(|at| *at >= QuietInTheMiddle::QUIET.end),
        "checkpoints once records come back: {skipping:?}"
    );
    // Without it, checkpoints go on through the quiet.
    let every = snapshots_of_a_quiet_middle(false);
    assert!(
        every.iter().any(|at| deep_quiet.contains(at)),
        "checkpoints while quiet: {every:?}"
    );
}
