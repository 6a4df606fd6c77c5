//! The progress topic: every transaction of a pipeline writes a progress
//! record `{tenant, pipeline, checkpoint, open_id}` to it, and a restore
//! reads it to learn whether the latest checkpoint's transaction
//! committed (see the parent module).

use super::{KafkaTransactionOptions, KafkaTransactions};
use crate::connectors::kafka::{client_config, close_in_background, connection_properties};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// A progress record, written inside each transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Progress {
    /// The pipeline's tenant.
    pub(super) tenant: String,
    /// The pipeline.
    pub(super) pipeline: String,
    /// The checkpoint whose transaction holds the record.
    pub(super) checkpoint: u64,
    /// The process that wrote it.
    pub(super) open_id: String,
}

impl KafkaTransactions {
    /// A reader of the progress topic with `isolation` (`read_committed`
    /// or `read_uncommitted`).
    fn progress_reader(
        &self,
        isolation: &str,
    ) -> Result<BaseConsumer<ProgressReaderContext>, String> {
        let reader_group = format!("{}progress-reader", self.options.transactional_id_prefix);
        client_config(
            &self.options.bootstrap_servers,
            &[
                ("group.id", reader_group.as_str()),
                ("isolation.level", isolation),
                ("enable.auto.commit", "false"),
                ("enable.partition.eof", "true"),
            ],
            &connection_properties(&self.options.properties),
        )
        .create_with_context(ProgressReaderContext)
        .map_err(|e| format!("cannot create the progress reader: {e}"))
    }

    /// Whether the progress record of `checkpoint` by `open_id` is the
    /// committed record at `offset` of the progress topic: one record read
    /// instead of the whole topic (a shared progress topic holds every
    /// pipeline's records since its last compaction: reading it took 1.2 s
    /// of a restart on the dev broker). `false` when that record is not
    /// there as expected (aborted, or compacted away after a later one):
    /// the caller then reads the whole topic.
    pub(super) fn progress_at(
        &self,
        offset: i64,
        checkpoint: u64,
        open_id: &str,
    ) -> Result<bool, String> {
        let answer = self.read_progress(
            Offset::Offset(offset),
            (checkpoint, open_id),
            |at, ours| Some(at == offset && ours),
            // Either before a transaction still open (the last stable
            // offset), or past the record: only the latter answers.
            |position| (position > offset).then_some(false),
        )?;
        Ok(answer.unwrap_or(false))
    }

    /// Whether the transaction of `checkpoint`, written by `open_id`,
    /// committed: its progress record is in the progress topic, read
    /// `read_committed` up to the end the topic had when the read began.
    ///
    /// Every transaction of the pipeline was aborted or committed before
    /// (creating the producers fenced them), but other pipelines share the
    /// topic: while one of their transactions is open, a `read_committed`
    /// reader stops at its first record (the last stable offset) and
    /// reports the end of the partition there. Records of this pipeline
    /// after it would then look missing, and a committed checkpoint would
    /// be taken for one that was not (its epoch replayed, its output
    /// written twice). So the read goes on until it has passed the end
    /// taken at its start, waiting for such transactions to end (commit,
    /// abort or the broker's timeout).
    pub(super) fn progress_committed(
        &self,
        checkpoint: u64,
        open_id: &str,
    ) -> Result<bool, String> {
        let topic = self.options.progress_topic.as_str();
        // The end of the partition, committed or not (a `read_committed`
        // client may be told the last stable offset instead).
        let uncommitted = self.progress_reader("read_uncommitted")?;
        let end = uncommitted.fetch_watermarks(topic, 0, self.options.operation_timeout);
        close_in_background(uncommitted);
        let (_, end) =
            end.map_err(|e| format!("cannot read the end of the progress topic {topic}: {e}"))?;
        if end <= 0 {
            return Ok(false);
        }
        let committed = std::cell::Cell::new(false);
        let answer = self.read_progress(
            Offset::Beginning,
            (checkpoint, open_id),
            |at, ours| {
                committed.set(committed.get() || ours);
                (at + 1 >= end).then_some(committed.get())
            },
            // The end reported may be the last stable offset: done only
            // once the read position has passed `end` (past the
            // transaction markers, which are not delivered).
            |position| (position >= end).then_some(committed.get()),
        )?;
        answer.ok_or_else(|| {
            format!(
                "the progress topic {topic} was not read to offset {end} within {:?}: a transaction stayed open",
                self.options.operation_timeout
            )
        })
    }

    /// Reads the progress topic `read_committed` from `start` until
    /// `on_record` (given a record's offset and whether it is the progress
    /// record of `wanted`: checkpoint and open id) or `on_end` (given the
    /// read position at the end of the partition) answers; `None` when
    /// neither did within the operation timeout.
    fn read_progress(
        &self,
        start: Offset,
        wanted: (u64, &str),
        mut on_record: impl FnMut(i64, bool) -> Option<bool>,
        mut on_end: impl FnMut(i64) -> Option<bool>,
    ) -> Result<Option<bool>, String> {
        let topic = self.options.progress_topic.as_str();
        let consumer = self.progress_reader("read_committed")?;
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(topic, 0, start)
            .map_err(|e| e.to_string())?;
        consumer.assign(&assignment).map_err(|e| e.to_string())?;
        let key = progress_key(&self.options);
        let deadline = Instant::now() + self.options.operation_timeout;
        let mut answer = Ok(None);
        while Instant::now() <= deadline {
            let answered = match consumer.poll(Duration::from_millis(200)) {
                None => None,
                Some(Err(KafkaError::PartitionEOF(_))) => consumer
                    .position()
                    .ok()
                    .and_then(|list| {
                        list.find_partition(topic, 0)
                            .and_then(|partition| partition.offset().to_raw())
                    })
                    .and_then(&mut on_end),
                Some(Err(error)) => {
                    answer = Err(format!("reading progress: {error}"));
                    break;
                }
                Some(Ok(message)) => {
                    let ours = message.key() == Some(key.as_bytes())
                        && message
                            .payload()
                            .and_then(|p| serde_json::from_slice::<Progress>(p).ok())
                            .is_some_and(|progress| {
                                (progress.checkpoint, progress.open_id.as_str()) == wanted
                            });
                    on_record(message.offset(), ours)
                }
            };
            if answered.is_some() {
                answer = Ok(answered);
                break;
            }
        }
        close_in_background(consumer);
        answer
    }
}

/// The progress reader's client context. rust-rdkafka hands every consumer
/// error event to the context before returning it from `poll`, and the
/// default context logs it as an error: the end of the progress partition,
/// which the read waits for, filled the logs of every restore with
/// "Global error: PartitionEOF". Other errors are still logged.
struct ProgressReaderContext;

impl rdkafka::ClientContext for ProgressReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::error!(target: "librdkafka", "librdkafka: {error}: {reason}");
        }
    }
}

impl rdkafka::consumer::ConsumerContext for ProgressReaderContext {}

pub(super) fn progress_key(options: &KafkaTransactionOptions) -> String {
    format!("{}/{}", options.tenant, options.pipeline)
}

pub(super) fn create_progress_topic(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Result<(), String> {
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact");
    let results = futures::executor::block_on(admin.create_topics(&[new], &AdminOptions::new()))
        .map_err(|e| format!("cannot create the progress topic {topic}: {e}"))?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(format!("cannot create the progress topic {name}: {code}"));
            }
        }
    }
    Ok(())
}
