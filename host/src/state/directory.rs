//! Local directories that belong to one process run (RocksDB databases,
//! snapshots), findable and removable after the process died.
//!
//! A run directory holds its owner's pid. Creating one removes the
//! directories with the same prefix whose owner is gone, so a SIGKILLed
//! run leaves nothing behind for long: the next run of the same pipeline
//! (or of any pipeline, for temporary state) cleans up after it. Dropping
//! one removes it.

use std::path::{Path, PathBuf};

const OWNER_FILE: &str = "owner.pid";

/// A directory owned by this process, removed when dropped.
#[derive(Debug)]
pub(crate) struct RunDirectory {
    dir: PathBuf,
}

impl RunDirectory {
    /// Creates `<root>/<prefix><id>`, then removes the directories
    /// `<root>/<prefix>*` of dead processes.
    pub(crate) fn create(root: &Path, prefix: &str, id: &str) -> std::io::Result<Self> {
        Self::create_salvaging(root, prefix, id, |_, _, _| {})
    }

    /// [`RunDirectory::create`], handing each dead process's directory to
    /// `salvage` before removing it, with its id (the name after `prefix`)
    /// and the new directory: a restart takes what it can use.
    pub(crate) fn create_salvaging(
        root: &Path,
        prefix: &str,
        id: &str,
        mut salvage: impl FnMut(&Path, &str, &Path),
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(root)?;
        let dir = root.join(format!("{prefix}{id}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(OWNER_FILE), std::process::id().to_string())?;
        for entry in std::fs::read_dir(root)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(dead_id) = name.strip_prefix(prefix) else {
                continue;
            };
            if entry.path() == dir || owner_alive(&entry.path()) {
                continue;
            }
            salvage(&entry.path(), dead_id, &dir);
            tracing::info!(dir = %entry.path().display(), "removing the state of a dead run");
            let _ = std::fs::remove_dir_all(entry.path());
        }
        Ok(RunDirectory { dir })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RunDirectory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether the process that owns `dir` still runs. A directory whose owner
/// file is missing or unreadable for more than a minute is abandoned (its
/// creator died between creating it and writing the file).
fn owner_alive(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join(OWNER_FILE)) {
        Ok(text) => text
            .trim()
            .parse::<u32>()
            .is_ok_and(|pid| Path::new(&format!("/proc/{pid}")).exists()),
        Err(_) => std::fs::metadata(dir)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|age| age < std::time::Duration::from_secs(60)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_of_dead_runs_are_removed_and_live_ones_kept() {
        let root = tempfile::tempdir().expect("temporary directory");
        let dead = root.path().join("p.dead");
        std::fs::create_dir_all(&dead).expect("create");
        // No process has pid u32::MAX.
        std::fs::write(dead.join(OWNER_FILE), u32::MAX.to_string()).expect("write");
        let other_pipeline = root.path().join("q.dead");
        std::fs::create_dir_all(&other_pipeline).expect("create");
        std::fs::write(other_pipeline.join(OWNER_FILE), u32::MAX.to_string()).expect("write");
        let live = RunDirectory::create(root.path(), "p.", "one").expect("create");
        let second = RunDirectory::create(root.path(), "p.", "two").expect("create");
        assert!(!dead.exists(), "the dead run's directory is removed");
        assert!(other_pipeline.exists(), "other prefixes are not touched");
        assert!(live.path().exists(), "a live run's directory is kept");
        let path = second.path().to_path_buf();
        drop(second);
        assert!(!path.exists(), "dropped: removed");
    }
}
