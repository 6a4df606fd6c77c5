//! The Iceberg sink and its committer (see the module docs of
//! [`super`]).

use super::rows::RowBuffer;
use super::{IcebergSetupError, IcebergSinkConfig};
use crate::checkpoint::{CommitError, Committable, Committer, parse_committable};
use crate::connectors::table_rows::{TableRows, dead_letter_row};
use crate::dataflow::{DataflowError, Sink};
use crate::record::Record;
use arrow_array::RecordBatch;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::{DataFileWriter, DataFileWriterBuilder};
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{Catalog, TableIdent};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// Rows converted into one Arrow batch before it goes to the writer.
const ROWS_PER_BATCH: usize = 4096;

/// The longest at-least-once rows wait for their commit (each commit is a
/// snapshot: committing every write would make thousands).
pub(super) const STRAIGHT_THROUGH_COMMIT_INTERVAL: std::time::Duration =
    std::time::Duration::from_millis(100);

/// Snapshot summary properties naming who committed a snapshot.
const TENANT_PROPERTY: &str = "sluice.tenant";
const PIPELINE_PROPERTY: &str = "sluice.pipeline";
const SINK_PROPERTY: &str = "sluice.sink";
const CHECKPOINT_PROPERTY: &str = "sluice.checkpoint";
const OPEN_ID_PROPERTY: &str = "sluice.open-id";

type FileWriterBuilder =
    DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;

/// The data files of the epoch being written.
enum EpochWriter {
    Unpartitioned(
        Box<
            DataFileWriter<
                ParquetWriterBuilder,
                DefaultLocationGenerator,
                DefaultFileNameGenerator,
            >,
        >,
    ),
    Partitioned {
        writer: Box<FanoutWriter<FileWriterBuilder>>,
        splitter: Box<RecordBatchPartitionSplitter>,
    },
}

/// Who commits to the table: the sink's identity in snapshot summaries.
#[derive(Debug, Clone)]
struct Identity {
    tenant: String,
    pipeline: String,
    sink: String,
}

impl Identity {
    /// A short tag of the identity that starts the names of this sink's
    /// data files (`sluice-<tag>-<open id>-<epoch>-...`), so that files
    /// left behind by a crash can be told from other writers' files.
    fn file_tag(&self) -> String {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(
            format!("{}/{}/{}", self.tenant, self.pipeline, self.sink).as_bytes(),
        );
        hex::encode(&digest[..6])
    }
}

/// What is shared by the sink and its committer.
struct Shared {
    name: String,
    identity: Identity,
    runtime: tokio::runtime::Runtime,
    catalog: Arc<dyn Catalog>,
    ident: TableIdent,
    /// S3 settings of the warehouse (to list its data files).
    s3: crate::checkpoint::s3::S3Options,
}

/// What the sink pre-commits for a checkpoint: its data files.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct IcebergPreCommit {
    /// The process that wrote the files.
    open_id: String,
    /// The partition spec the files were written with.
    spec_id: i32,
    /// Each data file in Iceberg's JSON form.
    files: Vec<String>,
}

/// When an [`IcebergSink`] commits its data files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcebergCommits {
    /// Exactly-once: each checkpoint's files, by the checkpoint's
    /// committer once the checkpoint is published.
    TwoPhase,
    /// At-least-once checkpoints: straight through — written rows are
    /// committed at most `STRAIGHT_THROUGH_COMMIT_INTERVAL` later, and at
    /// each barrier (records since the last checkpoint are written again
    /// after a restore, as with the other sinks).
    EveryWrite,
    /// No checkpoints: at each barrier and at the end.
    AtBarriers,
}

/// Writes records as rows of an Iceberg table (see [`super`]).
pub struct IcebergSink {
    shared: Arc<Shared>,
    commits: IcebergCommits,
    row_source: TableRows,
    open_id: String,
    table: Table,
    rows: RowBuffer,
    writer: Option<EpochWriter>,
    epoch: u64,
    rejected: Vec<(Record, String)>,
    last_commit: std::time::Instant,
}

impl IcebergSink {
    /// Opens the catalog and the table (creating it if missing) for the
    /// sink `name` of `tenant`'s `pipeline`; `base` resolves relative
    /// paths; `commits` says when data files are committed.
    pub fn open(
        name: &str,
        config: &IcebergSinkConfig,
        base: &std::path::Path,
        tenant: &str,
        pipeline: &str,
        open_id: &str,
        commits: IcebergCommits,
    ) -> Result<Self, IcebergSetupError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sluice-iceberg")
            .enable_all()
            .build()
            .map_err(|error| IcebergSetupError(format!("cannot start a runtime: {error}")))?;
        let config = &super::with_avro_columns(config, base)?;
        let (catalog, table) = runtime.block_on(async {
            let catalog = super::open_catalog(config, base).await?;
            let table = super::ensure_table(catalog.as_ref(), config).await?;
            super::probe_warehouse(&table, open_id).await?;
            Ok::<_, IcebergSetupError>((catalog, table))
        })?;
        let schema = table.metadata().current_schema().clone();
        let arrow_schema = iceberg::arrow::schema_to_arrow_schema(&schema)
            .map_err(|error| IcebergSetupError(format!("table schema: {error}")))?;
        let rows = RowBuffer::new(&schema, Arc::new(arrow_schema)).map_err(IcebergSetupError)?;
        let ident = table.identifier().clone();
        Ok(IcebergSink {
            shared: Arc::new(Shared {
                name: name.to_string(),
                identity: Identity {
                    tenant: tenant.to_string(),
                    pipeline: pipeline.to_string(),
                    sink: name.to_string(),
                },
                runtime,
                catalog,
                ident,
                s3: config.s3.clone(),
            }),
            commits,
            row_source: config.rows,
            open_id: open_id.to_string(),
            table,
            rows,
            writer: None,
            epoch: 0,
            rejected: Vec::new(),
            last_commit: std::time::Instant::now(),
        })
    }

    fn error(&self, message: impl std::fmt::Display) -> DataflowError {
        DataflowError::Sink {
            name: self.shared.name.clone(),
            message: message.to_string(),
        }
    }

    /// A writer for the current epoch's files.
    async fn new_writer(table: &Table, prefix: String) -> iceberg::Result<EpochWriter> {
        let metadata = table.metadata();
        let schema = metadata.current_schema().clone();
        let parquet = ParquetWriterBuilder::new(WriterProperties::default(), schema.clone());
        let rolling = RollingFileWriterBuilder::new(
            parquet,
            target_file_size(table),
            table.file_io().clone(),
            DefaultLocationGenerator::new(metadata)?,
            DefaultFileNameGenerator::new(prefix, None, DataFileFormat::Parquet),
        );
        let builder = DataFileWriterBuilder::new(rolling);
        let spec = metadata.default_partition_spec().clone();
        if spec.is_unpartitioned() {
            return Ok(EpochWriter::Unpartitioned(Box::new(
                builder.build(None).await?,
            )));
        }
        Ok(EpochWriter::Partitioned {
            writer: Box::new(FanoutWriter::new(builder)),
            splitter: Box::new(RecordBatchPartitionSplitter::try_new_with_computed_values(
                schema, spec,
            )?),
        })
    }

    /// Sends the buffered rows to the epoch's data files.
    fn write_rows(&mut self) -> Result<(), DataflowError> {
        if self.rows.len() == 0 {
            return Ok(());
        }
        let batch = self.rows.finish().map_err(|e| self.error(e))?;
        let prefix = format!(
            "sluice-{}-{}-{}",
            self.shared.identity.file_tag(),
            self.open_id,
            self.epoch
        );
        let shared = self.shared.clone();
        let table = &self.table;
        let writer = &mut self.writer;
        shared
            .runtime
            .block_on(async {
                if writer.is_none() {
                    *writer = Some(Self::new_writer(table, prefix).await?);
                }
                match writer {
                    Some(writer) => write_batch(writer, batch).await,
                    None => Ok(()),
                }
            })
            .map_err(|e| self.error(format!("writing data files: {e}")))
    }

    /// Closes the epoch's data files.
    fn close_epoch(&mut self) -> Result<Vec<DataFile>, DataflowError> {
        self.write_rows()?;
        let Some(writer) = self.writer.take() else {
            return Ok(Vec::new());
        };
        self.shared
            .runtime
            .block_on(async {
                match writer {
                    EpochWriter::Unpartitioned(mut writer) => writer.close().await,
                    EpochWriter::Partitioned { writer, .. } => writer.close().await,
                }
            })
            .map_err(|e| self.error(format!("closing data files: {e}")))
    }

    /// The pre-commit of `files`.
    fn pre_commit_of(&self, files: Vec<DataFile>) -> Result<IcebergPreCommit, DataflowError> {
        let metadata = self.table.metadata();
        let spec = metadata.default_partition_spec();
        let partition_type = spec
            .partition_type(metadata.current_schema())
            .map_err(|e| self.error(e))?;
        let files = files
            .into_iter()
            .map(|file| {
                iceberg::spec::serialize_data_file_to_json(
                    file,
                    &partition_type,
                    metadata.format_version(),
                )
            })
            .collect::<iceberg::Result<Vec<_>>>()
            .map_err(|e| self.error(e))?;
        Ok(IcebergPreCommit {
            open_id: self.open_id.clone(),
            spec_id: spec.spec_id(),
            files,
        })
    }
}

impl IcebergSink {
    /// Commits what was written so far, straight away (at-least-once).
    fn commit_now(&mut self) -> Result<(), DataflowError> {
        self.last_commit = std::time::Instant::now();
        let files = self.close_epoch()?;
        if files.is_empty() {
            return Ok(());
        }
        let pre_commit = self.pre_commit_of(files)?;
        self.epoch += 1;
        self.shared
            .commit(None, &pre_commit)
            .map_err(|e| self.error(e.message))
    }
}

async fn write_batch(writer: &mut EpochWriter, batch: RecordBatch) -> iceberg::Result<()> {
    match writer {
        EpochWriter::Unpartitioned(writer) => writer.write(batch).await,
        EpochWriter::Partitioned { writer, splitter } => {
            for (key, part) in splitter.split(&batch)? {
                writer.write(key, part).await?;
            }
            Ok(())
        }
    }
}

fn target_file_size(table: &Table) -> usize {
    table
        .metadata()
        .properties()
        .get("write.target-file-size-bytes")
        .and_then(|v| v.parse().ok())
        .unwrap_or(128 << 20)
}

impl Sink for IcebergSink {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        let mut accepted = 0;
        for record in records {
            let pushed = match self.row_source {
                TableRows::Value => self.rows.push(&record.value),
                TableRows::DeadLetter => self.rows.push_fields(&dead_letter_row(record)),
            };
            match pushed {
                Ok(()) => accepted += 1,
                Err(reason) => self.rejected.push((
                    record.clone(),
                    format!("does not fit Iceberg table {}: {reason}", self.shared.ident),
                )),
            }
            if self.rows.len() >= ROWS_PER_BATCH {
                self.write_rows()?;
            }
        }
        if self.commits == IcebergCommits::EveryWrite
            && accepted > 0
            && self.last_commit.elapsed() >= STRAIGHT_THROUGH_COMMIT_INTERVAL
        {
            self.commit_now()?;
        }
        Ok(())
    }

    fn take_rejected(&mut self) -> Vec<(Record, String)> {
        std::mem::take(&mut self.rejected)
    }

    fn flush(&mut self) -> Result<(), DataflowError> {
        match self.commits {
            // Rows become visible with their checkpoint, not before.
            IcebergCommits::TwoPhase => Ok(()),
            IcebergCommits::EveryWrite | IcebergCommits::AtBarriers => self.commit_now(),
        }
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Committable>, DataflowError> {
        if self.commits != IcebergCommits::TwoPhase {
            self.flush()?;
            return Ok(None);
        }
        let files = self.close_epoch()?;
        let pre_commit = self.pre_commit_of(files)?;
        self.epoch = checkpoint;
        serde_json::to_value(&pre_commit)
            .map(Some)
            .map_err(|e| self.error(e))
    }

    fn committer(&self) -> Option<Arc<dyn Committer>> {
        if self.commits != IcebergCommits::TwoPhase {
            return None;
        }
        Some(Arc::new(IcebergCommitter {
            shared: self.shared.clone(),
        }))
    }
}

impl Shared {
    fn commit_error(&self, message: impl std::fmt::Display) -> CommitError {
        CommitError::failed(
            &self.name,
            format!("Iceberg table {}: {message}", self.ident),
        )
    }

    /// Deletes this sink's data files that no snapshot references (see
    /// [`super::orphans`]); run on restore, after the restored checkpoint
    /// is committed, before anything new is written.
    fn remove_orphans(&self) -> Result<(), CommitError> {
        let table = self
            .runtime
            .block_on(self.catalog.load_table(&self.ident))
            .map_err(|e| self.commit_error(format!("cannot load: {e}")))?;
        let data = format!("{}/data", table.metadata().location().trim_end_matches('/'));
        let prefix = format!("sluice-{}-", self.identity.file_tag());
        let written = super::orphans::list_files(&data, &prefix, &self.s3)
            .map_err(|e| self.commit_error(format!("listing data files: {e}")))?;
        if written.is_empty() {
            return Ok(());
        }
        let referenced = self
            .runtime
            .block_on(super::orphans::referenced_files(&table))
            .map_err(|e| self.commit_error(format!("reading manifests: {e}")))?;
        let file_io = table.file_io();
        let mut removed = 0;
        for path in written.iter().filter(|path| !referenced.contains(*path)) {
            let location = match path.starts_with('/') {
                true => format!("file://{path}"),
                false => path.clone(),
            };
            self.runtime
                .block_on(file_io.delete(&location))
                .map_err(|e| self.commit_error(format!("deleting orphan {location}: {e}")))?;
            tracing::info!(sink = %self.name, file = %location, "deleted a data file no snapshot references (left by a crash)");
            removed += 1;
        }
        if removed > 0 {
            tracing::info!(sink = %self.name, removed, "orphan data files deleted");
        }
        Ok(())
    }

    /// The highest checkpoint of this sink the table holds.
    fn last_committed(&self, table: &Table) -> Option<u64> {
        table
            .metadata()
            .snapshots()
            .filter_map(|snapshot| {
                let properties = &snapshot.summary().additional_properties;
                let ours = properties.get(TENANT_PROPERTY) == Some(&self.identity.tenant)
                    && properties.get(PIPELINE_PROPERTY) == Some(&self.identity.pipeline)
                    && properties.get(SINK_PROPERTY) == Some(&self.identity.sink);
                ours.then(|| properties.get(CHECKPOINT_PROPERTY)?.parse().ok())
                    .flatten()
            })
            .max()
    }

    /// Appends `pre_commit`'s files as one snapshot for `checkpoint`,
    /// unless the table already holds that checkpoint of this sink
    /// (`None`: at-least-once, straight away, no checkpoint named). The
    /// catalog's compare-and-swap makes a conflicting writer retry
    /// (iceberg-rust retries on a refreshed table); any other failure is
    /// an error, never assumed either way: a restore looks again.
    fn commit(
        &self,
        checkpoint: Option<u64>,
        pre_commit: &IcebergPreCommit,
    ) -> Result<(), CommitError> {
        self.runtime.block_on(async {
            let table = self
                .catalog
                .load_table(&self.ident)
                .await
                .map_err(|e| self.commit_error(format!("cannot load: {e}")))?;
            if let Some(checkpoint) = checkpoint
                && self
                    .last_committed(&table)
                    .is_some_and(|last| last >= checkpoint)
            {
                return Ok(());
            }
            if pre_commit.files.is_empty() {
                return Ok(());
            }
            let metadata = table.metadata();
            let schema = metadata.current_schema();
            let spec = metadata
                .partition_spec_by_id(pre_commit.spec_id)
                .ok_or_else(|| {
                    self.commit_error(format!("no partition spec {}", pre_commit.spec_id))
                })?;
            let partition_type = spec
                .partition_type(schema)
                .map_err(|e| self.commit_error(e))?;
            let files = pre_commit
                .files
                .iter()
                .map(|json| {
                    iceberg::spec::deserialize_data_file_from_json(
                        json,
                        pre_commit.spec_id,
                        &partition_type,
                        schema,
                    )
                })
                .collect::<iceberg::Result<Vec<_>>>()
                .map_err(|e| self.commit_error(format!("unreadable pre-commit: {e}")))?;
            let mut properties = HashMap::from([
                (TENANT_PROPERTY.to_string(), self.identity.tenant.clone()),
                (
                    PIPELINE_PROPERTY.to_string(),
                    self.identity.pipeline.clone(),
                ),
                (SINK_PROPERTY.to_string(), self.identity.sink.clone()),
                (OPEN_ID_PROPERTY.to_string(), pre_commit.open_id.clone()),
            ]);
            if let Some(checkpoint) = checkpoint {
                properties.insert(CHECKPOINT_PROPERTY.to_string(), checkpoint.to_string());
            }
            let transaction = Transaction::new(&table);
            let append = transaction
                .fast_append()
                .add_data_files(files)
                .set_snapshot_properties(properties);
            let transaction = append
                .apply(transaction)
                .map_err(|e| self.commit_error(e))?;
            transaction
                .commit(self.catalog.as_ref())
                .await
                .map_err(|e| self.commit_error(format!("commit failed: {e}")))?;
            crate::checkpoint::failpoint::hit(
                crate::checkpoint::failpoint::Failpoint::DuringSinkCommit,
            );
            Ok(())
        })
    }
}

/// Attempts at committing one checkpoint before the run fails (a restore
/// then commits it, again only if the table does not hold it).
const COMMIT_ATTEMPTS: u32 = 5;

/// Commits an [`IcebergSink`]'s checkpoints.
struct IcebergCommitter {
    shared: Arc<Shared>,
}

impl Committer for IcebergCommitter {
    fn name(&self) -> &str {
        &self.shared.name
    }

    /// Commits, retrying a failed attempt (an error or a lost answer) a few
    /// times with backoff. Each attempt first reads the table again and
    /// skips the commit if the table holds the checkpoint: an attempt whose
    /// outcome is unknown is never assumed to have failed or succeeded.
    fn commit(&self, checkpoint: u64, committable: &Committable) -> Result<(), CommitError> {
        let pre_commit = parse_committable(self.name(), committable)?;
        let mut backoff = std::time::Duration::from_millis(50);
        for _ in 1..COMMIT_ATTEMPTS {
            match self.shared.commit(Some(checkpoint), &pre_commit) {
                Ok(()) => return Ok(()),
                Err(error) => {
                    tracing::warn!(sink = %self.name(), checkpoint, %error, "Iceberg commit failed; reading the table again and retrying");
                    std::thread::sleep(backoff);
                    backoff *= 2;
                }
            }
        }
        self.shared.commit(Some(checkpoint), &pre_commit)
    }

    fn restore(&self, restored: Option<(u64, &Committable)>) -> Result<(), CommitError> {
        // The restored checkpoint's files are committed if the table does
        // not hold them yet; files of later, abandoned epochs are never
        // referenced by the table.
        if let Some((checkpoint, committable)) = restored {
            self.commit(checkpoint, committable)?;
        }
        self.shared.remove_orphans()
    }
}
