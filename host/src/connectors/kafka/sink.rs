//! The Kafka sink.

use super::client_config;
use crate::dataflow::{DataflowError, Sink};
use crate::metrics::PartitionMetrics;
use crate::record::Record;
use crate::sync::lock;
use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Settings of a [`KafkaSink`].
#[derive(Debug, Clone)]
pub struct KafkaSinkOptions {
    /// `host:port` list.
    pub bootstrap_servers: String,
    /// Topic written to.
    pub topic: String,
    /// Write every record to this partition; `None` partitions by key.
    pub partition: Option<i32>,
    /// Extra librdkafka properties (override the defaults).
    pub properties: BTreeMap<String, String>,
    /// Longest wait for outstanding deliveries on flush.
    pub flush_timeout: Duration,
}

/// Remembers the first delivery failure, reported by librdkafka's delivery
/// callback (which runs inside `poll`/`flush` on the sink's thread), and
/// counts deliveries per partition.
pub(super) struct SinkContext {
    pub(super) failure: Arc<Mutex<Option<String>>>,
    pub(super) partitions: Arc<PartitionMetrics>,
    /// The span the producer was made in (a scaled-out task's): what
    /// librdkafka logs for it, from its own threads, names the task.
    pub(super) span: tracing::Span,
    /// An exactly-once producer's progress topic, and where its last
    /// progress record landed (see [`super::exactly_once`]).
    pub(super) progress: Option<Arc<ProgressDelivery>>,
    /// Set when the broker refuses a transactional producer's request for
    /// a producer id (librdkafka logs `GETPID`; see
    /// [`super::exactly_once`]'s `init_transactions`).
    pub(super) pid_refused: Option<Arc<std::sync::atomic::AtomicBool>>,
}

/// Where the last progress record a transactional producer wrote landed:
/// its offset lets a restore look at that one record instead of reading
/// the whole progress topic.
#[derive(Debug)]
pub(super) struct ProgressDelivery {
    /// The progress topic.
    pub(super) topic: String,
    /// The offset of the last progress record delivered.
    pub(super) offset: Mutex<Option<i64>>,
}

/// Waits until nothing is in flight (`in_flight` returns 0), calling
/// `serve` (which serves delivery reports or waits a millisecond) meanwhile;
/// `Err` with the number still in flight after `timeout`.
///
/// librdkafka's own `flush` waits for the last delivery reports in steps of
/// 100 ms: every checkpoint barrier stalled the pipeline for 100 ms, which
/// was most of the p99 latency (docs/benchmarks.md).
pub(super) fn await_deliveries(
    in_flight: impl Fn() -> i32,
    mut serve: impl FnMut(),
    timeout: Duration,
) -> Result<(), i32> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let remaining = in_flight();
        if remaining == 0 {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(remaining);
        }
        serve();
    }
}

/// The Kafka message for `record` (key, headers and event time kept), to
/// `topic` and, if set, `partition`.
pub(super) fn message<'a>(
    topic: &'a str,
    partition: Option<i32>,
    record: &'a Record,
) -> BaseRecord<'a, [u8], [u8]> {
    let mut message = BaseRecord::to(topic).payload(record.value.as_ref());
    if !record.headers.is_empty() {
        // librdkafka allocates a header list even when empty: only
        // build one when there are headers.
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for header in &record.headers {
            headers = headers.insert(KafkaHeader {
                key: &header.key,
                value: Some(header.value.as_ref()),
            });
        }
        message = message.headers(headers);
    }
    if let Some(key) = &record.key {
        message = message.key(key.as_ref());
    }
    if let Some(partition) = partition {
        message = message.partition(partition);
    }
    if let Some(time) = record.event_time {
        message = message.timestamp(time);
    }
    message
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        // A warning (with `debug` set, librdkafka also logs successes
        // under this facility, at debug level).
        if facility == "GETPID"
            && (level as i32) <= (RDKafkaLogLevel::Warning as i32)
            && let Some(refused) = &self.pid_refused
        {
            refused.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.span
            .in_scope(|| super::log_client_message(level, facility, message));
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.span
            .in_scope(|| tracing::error!(target: "librdkafka", "librdkafka: {error}: {reason}"));
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _opaque: ()) {
        use rdkafka::message::Message;
        if let Ok(message) = result {
            self.partitions
                .add_records(message.topic(), message.partition(), 1);
            if let Some(progress) = &self.progress
                && message.topic() == progress.topic
            {
                *lock(&progress.offset) = Some(message.offset());
            }
        }
        if let Err((error, message)) = result {
            let mut failure = lock(&self.failure);
            if failure.is_none() {
                *failure = Some(format!(
                    "delivery to {}/{} failed permanently: {error}",
                    message.topic(),
                    message.partition()
                ));
            }
        }
    }
}

/// Writes records to a Kafka topic with an idempotent producer.
///
/// Keys and headers are kept. librdkafka retries transient delivery errors
/// (without duplicates: the producer is idempotent); a delivery that still
/// fails stops the pipeline at the next write or flush with the reason —
/// never a silent drop. `flush` waits for every outstanding delivery, so a
/// checkpoint (and the offsets it commits) only completes after its records
/// are in Kafka.
pub struct KafkaSink {
    name: String,
    topic: String,
    partition: Option<i32>,
    producer: BaseProducer<SinkContext>,
    failure: Arc<Mutex<Option<String>>>,
    flush_timeout: Duration,
}

impl KafkaSink {
    /// Creates the producer. Deliveries per partition are counted in
    /// `partitions`.
    pub fn new(
        name: impl Into<String>,
        options: KafkaSinkOptions,
        partitions: Arc<PartitionMetrics>,
    ) -> Result<Self, DataflowError> {
        let name = name.into();
        let config = client_config(
            &options.bootstrap_servers,
            &[
                ("enable.idempotence", "true"),
                ("acks", "all"),
                ("linger.ms", "5"),
                ("compression.type", "none"),
            ],
            &options.properties,
        );
        let failure = Arc::new(Mutex::new(None));
        let producer = config
            .create_with_context(SinkContext {
                progress: None,
                pid_refused: None,
                failure: failure.clone(),
                partitions,
                span: tracing::Span::current(),
            })
            .map_err(|e| DataflowError::Sink {
                name: name.clone(),
                message: format!("cannot create Kafka producer: {e}"),
            })?;
        Ok(KafkaSink {
            name,
            topic: options.topic,
            partition: options.partition,
            producer,
            failure,
            flush_timeout: options.flush_timeout,
        })
    }

    /// Sends `message` (to any topic and partition it names), serving
    /// deliveries while the local queue is full.
    pub(super) fn send(
        &self,
        mut message: BaseRecord<'_, [u8], [u8]>,
    ) -> Result<(), DataflowError> {
        loop {
            match self.producer.send(message) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), unsent)) => {
                    // The local queue is full: serve deliveries, then retry.
                    message = unsent;
                    self.producer.poll(Duration::from_millis(10));
                    self.check_deliveries()?;
                }
                Err((error, _)) => {
                    return Err(DataflowError::Sink {
                        name: self.name.clone(),
                        message: format!("cannot produce to {}: {error}", self.topic),
                    });
                }
            }
        }
    }

    fn check_deliveries(&self) -> Result<(), DataflowError> {
        let failure = lock(&self.failure).clone();
        match failure {
            None => Ok(()),
            Some(message) => Err(DataflowError::Sink {
                name: self.name.clone(),
                message,
            }),
        }
    }
}

impl Sink for KafkaSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        for record in records {
            self.send(message(&self.topic, self.partition, record))?;
        }
        self.producer.poll(Duration::ZERO);
        self.check_deliveries()
    }

    fn flush(&mut self) -> Result<(), DataflowError> {
        let producer = &self.producer;
        await_deliveries(
            || producer.in_flight_count(),
            || {
                producer.poll(Duration::from_millis(1));
            },
            self.flush_timeout,
        )
        .map_err(|undelivered| DataflowError::Sink {
            name: self.name.clone(),
            message: format!(
                "{undelivered} records not delivered to {} within {:?}",
                self.topic, self.flush_timeout
            ),
        })?;
        self.check_deliveries()
    }
}
