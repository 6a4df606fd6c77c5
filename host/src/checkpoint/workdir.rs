//! The local working directory of a checkpointed pipeline run: its RocksDB
//! database and the snapshots taken from it.
//!
//! Each process gets its own directory, `<root>/<tenant>.<pipeline>.<open
//! id>/` (a [`RunDirectory`]), because two processes of one pipeline may
//! briefly run at once (a zombie and its replacement) and RocksDB locks its
//! directory. A process starting a pipeline removes the directories of that
//! pipeline whose owner is gone, after taking from them the state files a
//! warm restore can use ([`super::warm`]). Nothing here needs to survive: a
//! restore downloads what it did not find from the checkpoint storage.

use super::manifest::StateFile;
use super::warm::WarmFiles;
use crate::state::directory::RunDirectory;
use std::path::{Path, PathBuf};

/// The RocksDB directory in a run's directory.
const DB_DIR: &str = "db";

/// A new id for one database open (one process run of a pipeline): time
/// and randomness, so that object names never collide across restores.
pub(crate) fn new_open_id() -> String {
    let millis = crate::time::now_ms();
    let random: u64 = rand::random();
    format!("{millis:x}-{random:016x}")
}

/// A run's working directory, removed when dropped.
#[derive(Debug)]
pub(crate) struct WorkDir {
    dir: RunDirectory,
}

impl WorkDir {
    /// Creates the directory of this run under `root`, then removes those
    /// of earlier, dead runs of the same pipeline, after linking into this
    /// run's database directory the files of `restoring` that they provably
    /// hold (see [`super::warm`]).
    pub(crate) fn create(
        root: &Path,
        tenant: &str,
        pipeline: &str,
        open_id: &str,
        restoring: &[StateFile],
    ) -> std::io::Result<(Self, WarmFiles)> {
        let prefix = format!("{}.{}.", escape(tenant), escape(pipeline));
        let mut warm = WarmFiles::default();
        let dir = RunDirectory::create_salvaging(root, &prefix, open_id, |dead, dead_id, new| {
            warm.take_from(dead, dead_id, restoring, &new.join(DB_DIR));
        })?;
        Ok((WorkDir { dir }, warm))
    }

    /// The run's directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The RocksDB directory.
    pub(crate) fn db(&self) -> PathBuf {
        self.dir.path().join(DB_DIR)
    }

    /// Where local RocksDB checkpoints are made before upload.
    pub(crate) fn snapshots(&self) -> PathBuf {
        self.dir.path().join("snapshots")
    }
}

fn escape(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
