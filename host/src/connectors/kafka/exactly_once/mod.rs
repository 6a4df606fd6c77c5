//! Exactly-once Kafka sinks: one Kafka transaction per checkpoint, shared
//! by every Kafka sink of the pipeline (main, dead-letter, side outputs),
//! committed only after the checkpoint is published.
//!
//! librdkafka cannot resume a transaction a dead producer prepared
//! (`init_transactions` aborts it), so Flink's recovery cannot be copied
//! (ADR 0008). Instead, every transaction also writes a *progress record*
//! `{tenant, pipeline, checkpoint}` to a compacted progress topic. On
//! restore, after `init_transactions` has aborted whatever a dead producer
//! left open, a `read_committed` read of the progress topic tells whether
//! the latest checkpoint's transaction committed: if it did, that
//! checkpoint is restored; if not, its parent is restored and the epoch
//! replayed, so state and output always come from the same cut.
//!
//! Two producers alternate (transactional ids `sluice.<tenant>.<pipeline>.0`
//! and `.1`, `sluice.` being the default `transactional_id_prefix`): while checkpoint N's transaction waits for N to be published,
//! records after barrier N go to the other one. That is the whole, fixed
//! set of ids of a pipeline; creating them fences any zombie producer.
//! Epochs without records open no transaction and write no progress record.

mod progress;

use super::sink::{ProgressDelivery, SinkContext, await_deliveries, message};
use super::source::TaskOffsets;
use super::{client_config, connection_properties};
use crate::checkpoint::{CommitError, CommitKind, Committable, Committer, parse_committable};
use crate::dataflow::{DataflowError, Sink};
use crate::metrics::PartitionMetrics;
use crate::record::Record;
use crate::sync::lock;
use progress::{Progress, create_progress_topic, progress_key};
use rdkafka::Offset;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The committer's name in manifests.
pub const KAFKA_TRANSACTIONS: &str = "kafka-transactions";

/// Default progress topic.
pub const DEFAULT_PROGRESS_TOPIC: &str = "sluice-progress";

/// Default start of the transactional ids.
pub const DEFAULT_TRANSACTIONAL_ID_PREFIX: &str = "sluice.";

/// Settings of a pipeline's Kafka transactions.
#[derive(Debug, Clone)]
pub struct KafkaTransactionOptions {
    /// `host:port` list (every exactly-once Kafka sink of the pipeline
    /// writes to this cluster).
    pub bootstrap_servers: String,
    /// Extra librdkafka producer properties.
    pub properties: BTreeMap<String, String>,
    /// What the transactional ids (and the progress reader's group id)
    /// start with.
    pub transactional_id_prefix: String,
    /// Tenant and pipeline: the transactional ids and progress key.
    pub tenant: String,
    /// Pipeline name.
    pub pipeline: String,
    /// The compacted topic progress records go to (created if missing).
    pub progress_topic: String,
    /// `transaction.timeout.ms`: an open transaction older than this is
    /// aborted by the broker.
    pub transaction_timeout: Duration,
    /// Longest wait for one Kafka operation (init, flush, commit).
    pub operation_timeout: Duration,
    /// This process's database open: progress records carry it, so that a
    /// restore only believes progress written by the process that wrote
    /// the checkpoint (never a stale record of an earlier pipeline of the
    /// same name).
    pub open_id: String,
}

/// What the transactions pre-commit for one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TransactionPreCommit {
    /// The producer holding the transaction.
    slot: usize,
    /// Its transactional id (for people reading manifests).
    transactional_id: String,
    /// Records in it (0 and no offsets: no transaction was opened).
    records: u64,
    /// Whether it holds the task's consumed offsets (EOS v2).
    #[serde(default)]
    offsets: bool,
    /// The process that wrote it (and its progress record).
    open_id: String,
    /// Where its progress record landed in the progress topic (partition
    /// 0), if known: a restore reads that record alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    progress_offset: Option<i64>,
}

/// The epoch being written.
#[derive(Debug, Default)]
struct Epoch {
    /// The producer of this epoch.
    slot: usize,
    /// Whether its transaction has begun.
    open: bool,
    /// Records sent in it.
    records: u64,
    /// The last checkpoint pre-committed.
    pre_committed: Option<u64>,
}

impl TransactionPreCommit {
    /// Whether a transaction was opened (records or offsets in it).
    fn opened(&self) -> bool {
        self.records > 0 || self.offsets
    }
}

/// The transactions of one pipeline, shared by its Kafka sinks and the
/// committer.
pub struct KafkaTransactions {
    options: KafkaTransactionOptions,
    producers: [ThreadedProducer<SinkContext>; 2],
    ids: [String; 2],
    /// Where each producer's last progress record landed.
    progress: [Arc<ProgressDelivery>; 2],
    epoch: Mutex<Epoch>,
    failure: Arc<Mutex<Option<String>>>,
    /// A scaled-out task's consumed offsets, committed in its transactions
    /// (EOS v2), and the last ones committed.
    task_offsets: OnceLock<Arc<TaskOffsets>>,
    sent_offsets: Mutex<Option<HashMap<(String, i32), Offset>>>,
}

fn transaction_error(error: impl std::fmt::Display) -> CommitError {
    CommitError::failed(KAFKA_TRANSACTIONS, error)
}

impl KafkaTransactions {
    /// Checks the transaction timeout against the broker, creates the
    /// progress topic if needed, and initialises both producers: this
    /// fences any earlier process of the pipeline and aborts what it left
    /// open, so that `read_committed` readers (and the progress read) see
    /// past it.
    pub fn new(
        options: KafkaTransactionOptions,
        partitions: Arc<PartitionMetrics>,
    ) -> Result<Arc<Self>, String> {
        let failure = Arc::new(Mutex::new(None));
        let progress = [0, 1].map(|_| {
            Arc::new(ProgressDelivery {
                topic: options.progress_topic.clone(),
                offset: Mutex::new(None),
            })
        });
        let timeout_ms = options.transaction_timeout.as_millis().to_string();
        let create = |slot: usize, id: &str, pid_refused: &Arc<AtomicBool>| {
            client_config(
                &options.bootstrap_servers,
                &[
                    ("transactional.id", id),
                    ("enable.idempotence", "true"),
                    ("acks", "all"),
                    ("linger.ms", "5"),
                    ("transaction.timeout.ms", timeout_ms.as_str()),
                ],
                &options.properties,
            )
            .create_with_context(SinkContext {
                failure: failure.clone(),
                partitions: partitions.clone(),
                span: tracing::Span::current(),
                progress: Some(progress[slot].clone()),
                pid_refused: Some(pid_refused.clone()),
            })
            .map_err(|e| format!("cannot create the transactional producer {id}: {e}"))
        };
        let make = |slot: usize| -> Result<(String, ThreadedProducer<SinkContext>), String> {
            let id = format!(
                "{}{}.{}.{slot}",
                options.transactional_id_prefix, options.tenant, options.pipeline
            );
            let producer = init_transactions(
                || {
                    let pid_refused = Arc::new(AtomicBool::new(false));
                    Ok((create(slot, &id, &pid_refused)?, pid_refused))
                },
                options.operation_timeout,
            )
            .map_err(|e| format!("cannot initialise transactions of {id}: {e}"))?;
            Ok((id, producer))
        };
        // Both producers at once, beside the checks of the broker's
        // settings: a dead predecessor's open transaction makes each
        // `init_transactions` wait for its abort (see `init_transactions`).
        let started = Instant::now();
        let (made0, made1, checked) = std::thread::scope(|scope| {
            let first = scope.spawn(|| make(0));
            let second = scope.spawn(|| make(1));
            let checked = check_broker(&options);
            let joined = |handle: std::thread::ScopedJoinHandle<'_, _>| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err("initialising transactions panicked".into()))
            };
            (joined(first), joined(second), checked)
        });
        checked?;
        let ((id0, producer0), (id1, producer1)) = (made0?, made1?);
        tracing::info!(
            init_ms = started.elapsed().as_secs_f64() * 1000.0,
            "Kafka transactions initialised"
        );
        Ok(Arc::new(KafkaTransactions {
            options,
            producers: [producer0, producer1],
            ids: [id0, id1],
            progress,
            epoch: Mutex::new(Epoch::default()),
            failure,
            task_offsets: OnceLock::new(),
            sent_offsets: Mutex::new(None),
        }))
    }

    /// The committer of these transactions (one per pipeline, whichever
    /// sink hands it out).
    pub(super) fn committer(self: &Arc<Self>) -> Arc<dyn Committer> {
        Arc::new(TransactionCommitter {
            transactions: self.clone(),
        })
    }

    /// Commits the consumed offsets of a scaled-out task in its
    /// transactions from now on, with its member's group metadata (EOS v2):
    /// a process whose member epoch is older than the partitions' move (a
    /// zombie) cannot commit, beside being fenced by the task's
    /// transactional ids.
    pub fn commit_task_offsets(&self, offsets: Arc<TaskOffsets>) {
        offsets.set_transactional();
        let _ = self.task_offsets.set(offsets);
    }

    /// The settings.
    pub fn options(&self) -> &KafkaTransactionOptions {
        &self.options
    }

    fn epoch(&self) -> std::sync::MutexGuard<'_, Epoch> {
        lock(&self.epoch)
    }

    fn delivery_failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }

    /// The producer of `epoch`, its transaction begun (on the epoch's first
    /// record or offsets).
    fn begin(&self, epoch: &mut Epoch) -> Result<&ThreadedProducer<SinkContext>, String> {
        let producer = &self.producers[epoch.slot];
        if !epoch.open {
            producer
                .begin_transaction()
                .map_err(|e| format!("cannot begin a transaction: {e}"))?;
            epoch.open = true;
        }
        Ok(producer)
    }

    /// Sends `message` in the current epoch's transaction (begun on the
    /// first record of the epoch).
    pub(super) fn send(&self, mut message: BaseRecord<'_, [u8], [u8]>) -> Result<(), String> {
        let mut epoch = self.epoch();
        let producer = self.begin(&mut epoch)?;
        let started = Instant::now();
        loop {
            match producer.send(message) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), unsent))
                    if started.elapsed() < self.options.operation_timeout =>
                {
                    // The producer's own thread serves deliveries meanwhile.
                    message = unsent;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((error, _)) => return Err(format!("cannot produce: {error}")),
            }
        }
        epoch.records += 1;
        match self.delivery_failure() {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }

    /// Phase one for checkpoint `checkpoint` (once, whichever sink asks
    /// first): the progress record, then every delivery awaited; the next
    /// epoch goes to the other producer.
    pub(super) fn pre_commit(&self, checkpoint: u64) -> Result<Option<Committable>, String> {
        let mut epoch = self.epoch();
        if epoch.pre_committed == Some(checkpoint) {
            return Ok(None);
        }
        let slot = epoch.slot;
        let records = epoch.records;
        let offsets = self.send_offsets(checkpoint, &mut epoch)?;
        let mut progress_offset = None;
        if epoch.open {
            *lock(&self.progress[slot].offset) = None;
            let progress = serde_json::to_vec(&Progress {
                tenant: self.options.tenant.clone(),
                pipeline: self.options.pipeline.clone(),
                checkpoint,
                open_id: self.options.open_id.clone(),
            })
            .map_err(|e| e.to_string())?;
            let key = progress_key(&self.options);
            let producer = &self.producers[slot];
            producer
                .send(
                    BaseRecord::to(&self.options.progress_topic)
                        .key(key.as_bytes())
                        .payload(&progress)
                        .partition(0),
                )
                .map_err(|(e, _)| format!("cannot write the progress record: {e}"))?;
            // The producer's own thread serves delivery reports.
            await_deliveries(
                || producer.in_flight_count(),
                || std::thread::sleep(Duration::from_millis(1)),
                self.options.operation_timeout,
            )
            .map_err(|undelivered| {
                format!(
                    "{undelivered} records not delivered within {:?}",
                    self.options.operation_timeout
                )
            })?;
            if let Some(failure) = self.delivery_failure() {
                return Err(failure);
            }
            progress_offset = *lock(&self.progress[slot].offset);
        }
        *epoch = Epoch {
            slot: 1 - slot,
            open: false,
            records: 0,
            pre_committed: Some(checkpoint),
        };
        serde_json::to_value(TransactionPreCommit {
            slot,
            transactional_id: self.ids[slot].clone(),
            records,
            offsets,
            open_id: self.options.open_id.clone(),
            progress_offset,
        })
        .map(Some)
        .map_err(|e| e.to_string())
    }

    /// Puts the task's offsets of `checkpoint`, if they moved since the
    /// last ones, into the epoch's transaction (opened for them if need
    /// be); whether it did.
    fn send_offsets(&self, checkpoint: u64, epoch: &mut Epoch) -> Result<bool, String> {
        let Some(task_offsets) = self.task_offsets.get() else {
            return Ok(false);
        };
        let Some(offsets) = task_offsets.take(checkpoint) else {
            return Ok(false);
        };
        let map = offsets.to_topic_map();
        let mut sent = lock(&self.sent_offsets);
        if map.is_empty() || sent.as_ref() == Some(&map) {
            return Ok(false);
        }
        let metadata = task_offsets.member().group_metadata().ok_or_else(|| {
            "the task's offsets cannot be committed: the process is not in the group".to_string()
        })?;
        let producer = self.begin(epoch)?;
        let started = Instant::now();
        producer
            .send_offsets_to_transaction(&offsets, &metadata, self.options.operation_timeout)
            .map_err(|e| format!("the group refused the task's offsets {map:?}: {e}"))?;
        if started.elapsed() > Duration::from_secs(1) {
            tracing::warn!(checkpoint, elapsed = ?started.elapsed(), "the task's offsets took long to reach the transaction");
        }
        tracing::debug!(checkpoint, offsets = ?map, "consumed offsets in the checkpoint's transaction");
        *sent = Some(map);
        Ok(true)
    }
}

/// Checks the transaction timeout against the broker's limit and creates
/// the progress topic if it is missing.
fn check_broker(options: &KafkaTransactionOptions) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = client_config(
        &options.bootstrap_servers,
        &[],
        &connection_properties(&options.properties),
    )
    .create()
    .map_err(|e| format!("cannot create a Kafka admin client: {e}"))?;
    check_transaction_timeout(&admin, options)?;
    create_progress_topic(&admin, &options.progress_topic)
}

/// How long one `init_transactions` call waits before looking whether the
/// broker refused the producer id (the call resumes where it was).
const INIT_STEP: Duration = Duration::from_millis(25);

/// Pause before a fresh producer asks again for a refused producer id; it
/// doubles with every refusal, up to librdkafka's own 500 ms, so that a
/// broker that keeps refusing (one that is down) does not see a new client
/// every few milliseconds.
const INIT_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// The longest pause between fresh producers.
const INIT_RETRY_PAUSE_MAX: Duration = Duration::from_millis(500);

/// A producer made by `create` with its transactions initialised, within
/// `timeout`.
///
/// When a dead process left a transaction open under the same
/// transactional id, the broker answers the first request for a producer
/// id with `CONCURRENT_TRANSACTIONS` while it aborts that transaction
/// (milliseconds), and librdkafka asks again only after its fixed 500 ms
/// PID timer: most of a restart's time (issue 45). The producer's log says
/// when its request was refused (`GETPID`, the flag `create` hands back);
/// a fresh producer then asks again 20 ms later, as the Java client's
/// 20 ms retry does (then 40, 80, ... up to 500 ms, should the broker go on
/// refusing). Without that log line this is one long wait, as before.
fn init_transactions(
    create: impl Fn() -> Result<(ThreadedProducer<SinkContext>, Arc<AtomicBool>), String>,
    timeout: Duration,
) -> Result<ThreadedProducer<SinkContext>, String> {
    let deadline = Instant::now() + timeout;
    let mut pause = INIT_RETRY_PAUSE;
    loop {
        let (producer, refused) = create()?;
        loop {
            let step = INIT_STEP.min(deadline.saturating_duration_since(Instant::now()));
            match producer.init_transactions(step) {
                Ok(()) => return Ok(producer),
                Err(error) if Instant::now() >= deadline => return Err(error.to_string()),
                // Still waiting: go on unless the broker refused.
                Err(error)
                    if error.rdkafka_error_code() == Some(RDKafkaErrorCode::OperationTimedOut) =>
                {
                    if refused.load(Ordering::Relaxed) {
                        break;
                    }
                }
                // Refused, and librdkafka gave up on this producer.
                Err(error)
                    if error.rdkafka_error_code()
                        == Some(RDKafkaErrorCode::ConcurrentTransactions)
                        || matches!(&error, KafkaError::Transaction(e) if e.is_retriable()) =>
                {
                    break;
                }
                Err(error) => return Err(error.to_string()),
            }
        }
        drop(producer);
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(INIT_RETRY_PAUSE_MAX);
    }
}

/// Refuses a `transaction.timeout.ms` above the broker's
/// `transaction.max.timeout.ms` (the producer would fail later, less
/// clearly).
fn check_transaction_timeout(
    admin: &AdminClient<DefaultClientContext>,
    options: &KafkaTransactionOptions,
) -> Result<(), String> {
    // A transport failure can come back at once (a broker restarting or
    // busy accepting connections): tried again, with a short pause, within
    // one operation timeout in all.
    let deadline = Instant::now() + options.operation_timeout;
    let metadata = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match admin.inner().fetch_metadata(None, left) {
            Ok(metadata) => break metadata,
            Err(e) if Instant::now() + Duration::from_millis(200) < deadline => {
                tracing::debug!(error = %e, "Kafka metadata not fetched yet; trying again");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => {
                return Err(format!(
                    "cannot reach Kafka at {}: {e}",
                    options.bootstrap_servers
                ));
            }
        }
    };
    let Some(broker) = metadata.brokers().first() else {
        return Err("the Kafka cluster reported no broker".into());
    };
    let described = futures::executor::block_on(admin.describe_configs(
        &[ResourceSpecifier::Broker(broker.id())],
        &AdminOptions::new().request_timeout(Some(options.operation_timeout)),
    ))
    .map_err(|e| format!("cannot read the broker's configuration: {e}"))?;
    for resource in described.into_iter().flatten() {
        if let Some(entry) = resource.get("transaction.max.timeout.ms")
            && let Some(max) = entry.value.as_deref().and_then(|v| v.parse::<u128>().ok())
            && options.transaction_timeout.as_millis() > max
        {
            return Err(format!(
                "transaction_timeout_ms = {} exceeds the broker's transaction.max.timeout.ms = {max}",
                options.transaction_timeout.as_millis()
            ));
        }
    }
    Ok(())
}

/// Commits (and resolves on restore) the pipeline's Kafka transactions.
struct TransactionCommitter {
    transactions: Arc<KafkaTransactions>,
}

impl Committer for TransactionCommitter {
    fn name(&self) -> &str {
        KAFKA_TRANSACTIONS
    }

    fn kind(&self) -> CommitKind {
        CommitKind::Final
    }

    /// Commits the checkpoint's transaction. A failure or a timeout is an
    /// unknown outcome: the pipeline fails, and the restore learns from
    /// the progress topic whether the commit happened.
    fn commit(&self, checkpoint: u64, committable: &Committable) -> Result<(), CommitError> {
        let pre_commit: TransactionPreCommit = parse_committable(KAFKA_TRANSACTIONS, committable)?;
        if !pre_commit.opened() {
            return Ok(());
        }
        let producer = self
            .transactions
            .producers
            .get(pre_commit.slot)
            .ok_or_else(|| transaction_error(format!("no producer slot {}", pre_commit.slot)))?;
        producer
            .commit_transaction(self.transactions.options.operation_timeout)
            .map_err(|e| {
                // A newer process's producer with the same transactional
                // id fenced this one: it is a zombie, not unlucky.
                let fenced = matches!(
                    e.rdkafka_error_code(),
                    Some(
                        RDKafkaErrorCode::Fenced
                            | RDKafkaErrorCode::ProducerFenced
                            | RDKafkaErrorCode::InvalidProducerEpoch
                    )
                );
                let message = format!(
                    "commit of checkpoint {checkpoint} ({}): outcome unknown, resolved on restore: {e}",
                    pre_commit.transactional_id
                );
                if fenced {
                    CommitError::fenced(KAFKA_TRANSACTIONS, message)
                } else {
                    transaction_error(message)
                }
            })
    }

    fn was_committed(
        &self,
        checkpoint: u64,
        committable: &Committable,
    ) -> Result<bool, CommitError> {
        let pre_commit: TransactionPreCommit = parse_committable(KAFKA_TRANSACTIONS, committable)?;
        if !pre_commit.opened() {
            return Ok(true);
        }
        if let Some(offset) = pre_commit.progress_offset {
            let started = Instant::now();
            let found = self
                .transactions
                .progress_at(offset, checkpoint, &pre_commit.open_id)
                .map_err(transaction_error)?;
            tracing::debug!(
                checkpoint,
                offset,
                found,
                read_ms = started.elapsed().as_secs_f64() * 1000.0,
                "progress record looked up at its offset"
            );
            if found {
                return Ok(true);
            }
        }
        self.transactions
            .progress_committed(checkpoint, &pre_commit.open_id)
            .map_err(transaction_error)
    }

    /// Nothing to redo: creating the producers aborted whatever a dead
    /// process left open.
    fn restore(&self, _restored: Option<(u64, &Committable)>) -> Result<(), CommitError> {
        Ok(())
    }
}

/// One Kafka sink of an exactly-once pipeline: writes into the pipeline's
/// current transaction.
pub struct ExactlyOnceKafkaSink {
    name: String,
    topic: String,
    partition: Option<i32>,
    transactions: Arc<KafkaTransactions>,
}

impl ExactlyOnceKafkaSink {
    /// A sink `name` writing to `topic` (and `partition`, if set) within
    /// `transactions`.
    pub fn new(
        name: impl Into<String>,
        topic: impl Into<String>,
        partition: Option<i32>,
        transactions: Arc<KafkaTransactions>,
    ) -> Self {
        ExactlyOnceKafkaSink {
            name: name.into(),
            topic: topic.into(),
            partition,
            transactions,
        }
    }

    fn error(&self, message: String) -> DataflowError {
        DataflowError::Sink {
            name: self.name.clone(),
            message,
        }
    }
}

impl Sink for ExactlyOnceKafkaSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        for record in records {
            self.transactions
                .send(message(&self.topic, self.partition, record))
                .map_err(|e| self.error(format!("{}: {e}", self.topic)))?;
        }
        Ok(())
    }

    /// Records become visible only when their checkpoint commits.
    fn flush(&mut self) -> Result<(), DataflowError> {
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Committable>, DataflowError> {
        self.transactions
            .pre_commit(checkpoint)
            .map_err(|e| self.error(e))
    }

    fn committer(&self) -> Option<Arc<dyn Committer>> {
        Some(self.transactions.committer())
    }
}
