//! The local working directory of a checkpointed pipeline run: its RocksDB
//! database and the snapshots taken from it.
//!
//! Each process gets its own directory, `<root>/<tenant>.<pipeline>.<open
//! id>/`, because two processes of one pipeline may briefly run at once (a
//! zombie and its replacement) and RocksDB locks its directory. The
//! directory holds the owner's pid; a process starting a pipeline removes
//! the directories of that pipeline whose owner is gone, so a crash leaves
//! nothing behind for long. Nothing here needs to survive: a restore
//! downloads its state from the checkpoint storage.

use std::path::{Path, PathBuf};

/// A new id for one database open (one process run of a pipeline): time
/// and randomness, so that object names never collide across restores.
pub fn new_open_id() -> String {
    let millis = super::now_ms();
    let random: u64 = rand::random();
    format!("{millis:x}-{random:016x}")
}

const OWNER_FILE: &str = "owner.pid";

/// A run's working directory, removed when dropped.
#[derive(Debug)]
pub struct WorkDir {
    dir: PathBuf,
}

impl WorkDir {
    /// Creates the directory of this run under `root`, after removing
    /// those of earlier, dead runs of the same pipeline.
    pub fn create(
        root: &Path,
        tenant: &str,
        pipeline: &str,
        open_id: &str,
    ) -> std::io::Result<Self> {
        let prefix = format!("{}.{}.", escape(tenant), escape(pipeline));
        std::fs::create_dir_all(root)?;
        for entry in std::fs::read_dir(root)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) && !owner_alive(&entry.path()) {
                tracing::info!(dir = %entry.path().display(), "removing the state of a dead run");
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = root.join(format!("{prefix}{open_id}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(OWNER_FILE), std::process::id().to_string())?;
        Ok(WorkDir { dir })
    }

    /// The RocksDB directory.
    pub fn db(&self) -> PathBuf {
        self.dir.join("db")
    }

    /// Where local RocksDB checkpoints are made before upload.
    pub fn snapshots(&self) -> PathBuf {
        self.dir.join("snapshots")
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
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

/// Whether the process that owns `dir` still runs (a directory without a
/// readable owner is being created: treated as alive).
fn owner_alive(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join(OWNER_FILE)) else {
        return true;
    };
    let Ok(pid) = text.trim().parse::<u32>() else {
        return false;
    };
    Path::new(&format!("/proc/{pid}")).exists()
}
