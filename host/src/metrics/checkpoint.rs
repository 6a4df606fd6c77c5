//! Checkpoints' figures: each one's durations and sizes, the recent
//! history, and their snapshot.

use super::add;
use super::histogram::DurationHistogram;
use super::histogram::HistogramSnapshot;
use super::load;
use crate::sync::lock;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

/// One completed checkpoint, as the progress line, the summary and the
/// metrics endpoint report it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CheckpointRecord {
    /// Checkpoint id.
    pub id: u64,
    /// When it was published, ms since the Unix epoch.
    pub completed_at_ms: i64,
    /// Its figures.
    pub stats: CheckpointStats,
}

/// How many completed checkpoints [`CheckpointMetrics`] remembers.
pub const CHECKPOINT_HISTORY: usize = 32;

/// Counters of a pipeline's checkpoints.
#[derive(Debug, Default)]
pub struct CheckpointMetrics {
    /// Checkpoints published.
    pub completed: AtomicU64,
    /// Checkpoints that failed (the pipeline then fails and restarts).
    pub failed: AtomicU64,
    /// Bytes uploaded by every published checkpoint.
    pub uploaded_bytes: AtomicU64,
    /// Barrier injection to publication, per published checkpoint.
    pub duration_seconds: DurationHistogram,
    /// The latest completed checkpoints, oldest first.
    pub history: Mutex<std::collections::VecDeque<CheckpointRecord>>,
}

impl CheckpointMetrics {
    /// Records a published checkpoint.
    pub fn record(&self, record: CheckpointRecord) {
        add(&self.completed, 1);
        add(&self.uploaded_bytes, record.stats.uploaded_bytes);
        self.duration_seconds
            .observe(std::time::Duration::from_secs_f64(
                record.stats.total_ms.max(0.0) / 1000.0,
            ));
        let mut history = lock(&self.history);
        if history.len() == CHECKPOINT_HISTORY {
            history.pop_front();
        }
        history.push_back(record);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> CheckpointSnapshot {
        CheckpointSnapshot {
            completed: load(&self.completed),
            failed: load(&self.failed),
            uploaded_bytes: load(&self.uploaded_bytes),
            duration_seconds: self.duration_seconds.snapshot(),
            history: lock(&self.history).iter().cloned().collect(),
        }
    }
}

/// A copy of a pipeline's checkpoint counters.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct CheckpointSnapshot {
    /// Checkpoints published.
    pub completed: u64,
    /// Checkpoints failed.
    pub failed: u64,
    /// Bytes uploaded by every published checkpoint.
    pub uploaded_bytes: u64,
    /// Barrier injection to publication.
    pub duration_seconds: HistogramSnapshot,
    /// The latest completed checkpoints, oldest first.
    pub history: Vec<CheckpointRecord>,
}

impl CheckpointSnapshot {
    /// The latest completed checkpoint.
    pub fn last(&self) -> Option<&CheckpointRecord> {
        self.history.last()
    }
}

/// Figures of one checkpoint.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointStats {
    /// From barrier injection until every operator had taken its snapshot
    /// (includes alignment), ms.
    pub alignment_ms: f64,
    /// The synchronous part: writing state back, flushing it and linking
    /// the RocksDB checkpoint, while records waited, ms.
    pub sync_ms: f64,
    /// The asynchronous part: upload and publication, ms.
    pub async_ms: f64,
    /// From barrier injection to publication, ms.
    pub total_ms: f64,
    /// Size of the whole state snapshot, bytes.
    pub state_bytes: u64,
    /// Bytes uploaded for this checkpoint (new files only).
    pub uploaded_bytes: u64,
    /// Files uploaded for this checkpoint.
    pub uploaded_files: u64,
    /// The sinks' commits after publication, ms (measured after the
    /// manifest was written: 0 in manifests, set in the metrics).
    #[serde(default)]
    pub commit_ms: f64,
}
