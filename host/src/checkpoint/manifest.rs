//! The manifest: what one checkpoint is made of.
//!
//! A checkpoint is published by writing its manifest, after every file it
//! names is stored. The manifest records the source positions, every state
//! file (with the object holding it), the sinks' pre-commits, and the
//! checkpoint it builds on (`parent`), which is what a restore falls back
//! to when the sinks' commit of this one is known not to have happened.
//!
//! A *fence* manifest carries no state: a process writes one when it
//! starts, taking the next id, so that an older process still running (a
//! zombie) can never publish again (its next id is taken).

use serde::{Deserialize, Serialize};

use crate::metrics::CheckpointStats;
use std::collections::BTreeMap;

/// Version of the manifest format.
pub(crate) const MANIFEST_FORMAT: u32 = 1;

/// Directory of manifests under a pipeline's root.
pub(crate) const MANIFESTS_DIR: &str = "manifests/";

/// Directory of state files under a pipeline's root (one subdirectory per
/// database open).
pub(crate) const SHARED_DIR: &str = "shared/";

/// The storage key of checkpoint `id`'s manifest (zero-padded, so keys sort
/// like ids).
pub fn manifest_key(id: u64) -> String {
    format!("{MANIFESTS_DIR}{id:020}.json")
}

/// The id of a manifest key, if it is one.
pub fn manifest_id(key: &str) -> Option<u64> {
    key.strip_prefix(MANIFESTS_DIR)?
        .strip_suffix(".json")?
        .parse()
        .ok()
}

/// What a manifest stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ManifestKind {
    /// A completed checkpoint: state, positions and pre-commits.
    Completed,
    /// A process started here: ids up to this one belong to earlier
    /// processes, which can no longer publish.
    Fence,
}

/// One file of a state snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFile {
    /// File name in the RocksDB directory.
    pub name: String,
    /// Storage key holding it.
    pub object: String,
    /// Size in bytes.
    pub bytes: u64,
}

/// A checkpoint's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// `MANIFEST_FORMAT`.
    pub format: u32,
    /// Checkpoint id.
    pub id: u64,
    /// Completed checkpoint or fence.
    pub kind: ManifestKind,
    /// Tenant of the pipeline.
    pub tenant: String,
    /// Pipeline name.
    pub pipeline: String,
    /// The database open (process) that wrote it.
    pub open_id: String,
    /// The checkpoint this one builds on, whose outputs were committed
    /// before this one's barrier (or which this process restored).
    pub parent: Option<u64>,
    /// Wall-clock time of the barrier, ms since the Unix epoch.
    pub timestamp_ms: i64,
    /// Key groups of the state.
    pub max_parallelism: u16,
    /// Workers of the keyed operators when it was taken.
    pub workers: usize,
    /// The source's position.
    pub source: serde_json::Value,
    /// Every file of the state snapshot.
    pub state: Vec<StateFile>,
    /// Pre-commits of the sinks, by sink name (only sinks that commit in
    /// two phases).
    pub sinks: BTreeMap<String, serde_json::Value>,
    /// Figures.
    pub stats: CheckpointStats,
}

impl Manifest {
    /// A fence manifest for `id`, written by `open_id`.
    pub fn fence(id: u64, tenant: &str, pipeline: &str, open_id: &str, timestamp_ms: i64) -> Self {
        Manifest {
            format: MANIFEST_FORMAT,
            id,
            kind: ManifestKind::Fence,
            tenant: tenant.to_string(),
            pipeline: pipeline.to_string(),
            open_id: open_id.to_string(),
            parent: None,
            timestamp_ms,
            max_parallelism: 0,
            workers: 0,
            source: serde_json::Value::Null,
            state: Vec::new(),
            sinks: BTreeMap::new(),
            stats: CheckpointStats::default(),
        }
    }

    /// Serialized (pretty JSON: manifests are small and read by people).
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing plain data to a Vec cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Parses a manifest, refusing unknown formats.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| format!("unreadable manifest: {e}"))?;
        if manifest.format != MANIFEST_FORMAT {
            return Err(format!(
                "manifest format {} is not supported (this host reads {MANIFEST_FORMAT})",
                manifest.format
            ));
        }
        Ok(manifest)
    }

    /// Total bytes of the state snapshot.
    pub fn state_bytes(&self) -> u64 {
        self.state.iter().map(|f| f.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_keys_sort_like_ids_and_parse_back() {
        assert!(manifest_key(9) < manifest_key(10));
        assert_eq!(manifest_id(&manifest_key(12345)), Some(12345));
        assert_eq!(manifest_id("manifests/x.json"), None);
        assert_eq!(manifest_id("shared/00000000000000000001.json"), None);
    }
}
