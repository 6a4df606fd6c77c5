//! The transactional producer API, wrapped for exactly-once sinks.

use super::client_config;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaResult;
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

/// A transactional producer: records sent between [`begin`](Self::begin)
/// and [`commit`](Self::commit) become visible to `read_committed` readers
/// together, with the consumer offsets sent in the same transaction, or not
/// at all after [`abort`](Self::abort).
pub struct TransactionalProducer {
    producer: ThreadedProducer<DefaultProducerContext>,
    timeout: Duration,
}

impl TransactionalProducer {
    /// Creates the producer and initialises transactions for
    /// `transactional_id` (fencing any earlier producer with the same id).
    pub fn new(
        bootstrap_servers: &str,
        transactional_id: &str,
        properties: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> KafkaResult<Self> {
        let producer: ThreadedProducer<DefaultProducerContext> = client_config(
            bootstrap_servers,
            &[
                ("transactional.id", transactional_id),
                ("enable.idempotence", "true"),
                ("acks", "all"),
            ],
            properties,
        )
        .create()?;
        producer.init_transactions(timeout)?;
        Ok(TransactionalProducer { producer, timeout })
    }

    /// Starts a transaction.
    pub fn begin(&self) -> KafkaResult<()> {
        self.producer.begin_transaction()
    }

    /// Sends a record within the current transaction.
    pub fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: &[u8],
        headers: &[(&str, &[u8])],
    ) -> KafkaResult<()> {
        let mut owned = OwnedHeaders::new_with_capacity(headers.len());
        for (name, value) in headers {
            owned = owned.insert(KafkaHeader {
                key: name,
                value: Some(*value),
            });
        }
        let mut record = BaseRecord::to(topic).payload(value).headers(owned);
        if let Some(key) = key {
            record = record.key(key);
        }
        self.producer.send(record).map_err(|(error, _)| error)
    }

    /// Adds consumer offsets (`topic`, `partition`, next offset) of `group`
    /// to the current transaction.
    pub fn send_offsets(
        &self,
        offsets: &[(&str, i32, i64)],
        group: &ConsumerGroupMetadata,
    ) -> KafkaResult<()> {
        let mut list = TopicPartitionList::new();
        for (topic, partition, offset) in offsets {
            list.add_partition_offset(topic, *partition, Offset::Offset(*offset))?;
        }
        self.producer
            .send_offsets_to_transaction(&list, group, self.timeout)
    }

    /// Commits the current transaction (flushing its records first).
    pub fn commit(&self) -> KafkaResult<()> {
        self.producer.commit_transaction(self.timeout)
    }

    /// Aborts the current transaction: its records are never visible to
    /// `read_committed` readers.
    pub fn abort(&self) -> KafkaResult<()> {
        self.producer.abort_transaction(self.timeout)
    }
}
