//! Checkpoints: consistent snapshots of a running pipeline, and restores
//! from them.
//!
//! Checkpoint N is taken as in Flink (asynchronous barrier snapshots):
//!
//! 1. The source thread records its position and injects barrier N into
//!    the stream (`CheckpointCoordinator::begin`).
//! 2. Every operator, when barrier N reaches it (aligned over its inputs),
//!    writes its state back to RocksDB. The threads that hold operators
//!    meet at a rendezvous; the last to arrive takes a native RocksDB
//!    checkpoint (hard links, milliseconds): the synchronous part, the only
//!    one records wait for ([`CheckpointCoordinator::arrive`]).
//! 3. The sinks *pre-commit* when the barrier reaches them: flush, wait for
//!    every delivery, hand over what must be committed
//!    ([`crate::dataflow::Sink::pre_commit`]).
//! 4. A background thread uploads the snapshot's new files
//!    (`snapshot`), then publishes the manifest with a conditional create
//!    (`storage`, `manifest`): N is now complete. Only then do the sinks'
//!    [`Committer`]s commit, and the source hears that N is complete.
//!
//! A restore (`restore`) picks the latest completed checkpoint whose
//! commits happened (or its parent, when a sink's commit is known not to
//! have happened), downloads its files into a fresh state directory,
//! rewinds the source and brings every sink's output to exactly that cut.

pub(crate) mod coordinator;
pub(crate) mod failpoint;
pub(crate) mod manifest;
pub(crate) mod restore;
pub(crate) mod s3;
pub(crate) mod snapshot;
pub(crate) mod storage;
pub(crate) mod warm;
pub(crate) mod workdir;

pub use coordinator::CheckpointCoordinator;
pub use failpoint::FAILPOINT_ENV;
pub use manifest::{Manifest, ManifestKind, StateFile, manifest_id, manifest_key};
pub use restore::{CheckpointError, CheckpointStore, RestoreFrom};
pub use s3::{S3Credentials, S3Options, S3Storage};
pub use snapshot::IncrementalUploader;
pub use storage::{CheckpointStorage, LocalStorage, StorageError};

use std::sync::Arc;
use std::time::Duration;

/// What a sink hands over at a barrier to be committed once the checkpoint
/// is published (stored in the manifest, so it must be plain data).
pub type Committable = serde_json::Value;

/// Whether a sink's commit can be redone by another process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitKind {
    /// The commit can be applied again from the committable alone (file
    /// parts appended, table appends keyed by checkpoint id): such commits
    /// run after the final ones, and again on restore.
    Resumable,
    /// Only the process that pre-committed can commit (a Kafka
    /// transaction): such commits run first; on restore, the committer is
    /// asked whether the commit happened, which decides the restore point.
    Final,
}

/// Why a commit failed.
#[derive(Debug, thiserror::Error)]
#[error("commit of sink `{sink}`: {message}")]
pub struct CommitError {
    /// The sink.
    pub sink: String,
    /// Whether this process may go on at all.
    pub kind: CommitFailure,
    /// What went wrong.
    pub message: String,
}

/// The kind of a commit's failure: what the caller decides on, rather than
/// the message's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitFailure {
    /// Another process has taken the output over (it restored after this
    /// one started): this process is a zombie and must stop without
    /// committing anything more.
    Fenced,
    /// Anything else (storage, network, a broker's answer): the checkpoint
    /// fails and the pipeline restarts from the last completed one.
    Failed,
}

impl CommitError {
    /// A commit of `sink` that failed for `message`.
    pub fn failed(sink: impl Into<String>, message: impl std::fmt::Display) -> Self {
        CommitError {
            sink: sink.into(),
            kind: CommitFailure::Failed,
            message: message.to_string(),
        }
    }

    /// A commit of `sink` refused because another process owns the output.
    pub fn fenced(sink: impl Into<String>, message: impl std::fmt::Display) -> Self {
        CommitError {
            sink: sink.into(),
            kind: CommitFailure::Fenced,
            message: message.to_string(),
        }
    }
}

/// Reads the pre-commit of sink `sink` back from a manifest's committable.
pub fn parse_committable<T: serde::de::DeserializeOwned>(
    sink: &str,
    committable: &Committable,
) -> Result<T, CommitError> {
    serde_json::from_value(committable.clone())
        .map_err(|e| CommitError::failed(sink, format!("unreadable pre-commit {committable}: {e}")))
}

/// Phase two of a two-phase sink (Flink's `Committer`, Arroyo's
/// `handle_commit`): makes a pre-committed epoch visible after its
/// checkpoint is published, and resolves pre-commits on restore.
pub trait Committer: Send + Sync {
    /// The sink's name (the key of its committables in manifests).
    fn name(&self) -> &str;

    /// Whether the commit can be redone after a crash.
    fn kind(&self) -> CommitKind {
        CommitKind::Resumable
    }

    /// Commits what the sink pre-committed for `checkpoint`.
    fn commit(&self, checkpoint: u64, committable: &Committable) -> Result<(), CommitError>;

    /// On restore, for [`CommitKind::Final`] committers: whether the commit
    /// of `checkpoint` happened (learnt from the external system, never
    /// assumed).
    fn was_committed(
        &self,
        _checkpoint: u64,
        _committable: &Committable,
    ) -> Result<bool, CommitError> {
        Ok(true)
    }

    /// On restore: makes the sink's output exactly what checkpoint
    /// `restored` committed (applying its commit again if needed and
    /// dropping what later, abandoned epochs left); `None`: a fresh start
    /// (drop every uncommitted leftover).
    fn restore(&self, restored: Option<(u64, &Committable)>) -> Result<(), CommitError>;
}

/// `[checkpoints] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckpointMode {
    /// Sinks that can commit in two phases do: after a restore, every
    /// record is in the output exactly once.
    #[default]
    ExactlyOnce,
    /// Sinks write straight through: after a restore, records since the
    /// checkpoint are written again (state is still restored exactly).
    AtLeastOnce,
}

/// How a pipeline checkpoints.
#[derive(Clone)]
pub struct CheckpointSettings {
    /// Where checkpoints go (already scoped to the pipeline).
    pub storage: Arc<dyn CheckpointStorage>,
    /// Between barrier injections.
    pub interval: Duration,
    /// A checkpoint not completed in this time fails the pipeline.
    pub timeout: Duration,
    /// Completed checkpoints kept (besides the parent of the latest).
    pub retained: usize,
    /// Exactly-once or at-least-once sinks.
    pub mode: CheckpointMode,
    /// Tenant of the pipeline.
    pub tenant: String,
    /// Pipeline name.
    pub pipeline: String,
    /// Key groups of the state.
    pub max_parallelism: u16,
    /// Workers of the keyed operators.
    pub workers: usize,
}

impl std::fmt::Debug for CheckpointSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointSettings")
            .field("storage", &self.storage.describe())
            .field("interval", &self.interval)
            .field("timeout", &self.timeout)
            .field("retained", &self.retained)
            .field("mode", &self.mode)
            .finish()
    }
}

/// Where a pipeline file says checkpoints go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageLocation {
    /// A local directory.
    Local(std::path::PathBuf),
    /// An S3 bucket and key prefix.
    S3 {
        /// Bucket.
        bucket: String,
        /// Key prefix (no leading or trailing `/`; may be empty).
        prefix: String,
    },
}

/// Parses `[checkpoints] storage`: `file:///dir`, `s3://bucket/prefix`, or
/// a path relative to the pipeline file.
pub fn storage_location(
    text: &str,
    pipeline_file: &std::path::Path,
) -> Result<StorageLocation, String> {
    if let Some(rest) = text.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("`{text}` names no bucket (s3://bucket/prefix)"));
        }
        return Ok(StorageLocation::S3 {
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
        });
    }
    let path = match text.strip_prefix("file://") {
        Some(path) if path.starts_with('/') => std::path::PathBuf::from(path),
        Some(path) => {
            return Err(format!(
                "`file://{path}` is not absolute: write file:///absolute/dir or a plain relative path"
            ));
        }
        None if text.contains("://") => {
            return Err(format!(
                "`{text}`: only file:// and s3:// checkpoint storage are supported"
            ));
        }
        None => {
            let path = std::path::Path::new(text);
            match (path.is_absolute(), pipeline_file.parent()) {
                (false, Some(dir)) => dir.join(path),
                _ => path.to_path_buf(),
            }
        }
    };
    // Absolute, so that messages and `checkpoints list` say where it is.
    Ok(StorageLocation::Local(
        std::path::absolute(&path).unwrap_or(path),
    ))
}

/// The storage of one pipeline's checkpoints: `<location>/<tenant>/<pipeline>/`.
pub fn open_storage(
    location: &StorageLocation,
    s3_options: &s3::S3Options,
    tenant: &str,
    pipeline: &str,
) -> Result<Arc<dyn CheckpointStorage>, StorageError> {
    match location {
        StorageLocation::Local(root) => Ok(Arc::new(LocalStorage::new(
            root.join(tenant).join(pipeline),
        ))),
        StorageLocation::S3 { bucket, prefix } => {
            let prefix = [prefix.as_str(), tenant, pipeline]
                .iter()
                .filter(|part| !part.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join("/");
            Ok(Arc::new(s3::S3Storage::connect(
                bucket, &prefix, s3_options,
            )?))
        }
    }
}
