//! Warm restores: a restart on the same machine takes the state files its
//! dead predecessor left behind, where they provably are the checkpoint's,
//! instead of downloading them again (issue 45, ADR 0024).
//!
//! An SST file never changes once written, and within one database open
//! its number is never reused (see [`super::snapshot`]). So a dead run's
//! file `N` is the checkpoint's file `N` when the checkpoint's object for
//! it is one that run uploaded (`shared/<its open id>/N`) or one it
//! restored (listed in the `restored.json` it wrote at its start), and the
//! sizes agree. Nothing else is trusted: every other file is downloaded.
//! The file is looked for in the dead run's database and in the local
//! snapshot of its last checkpoint, which it keeps until the next one.
//! Taken files are hard links into the new run's database directory, made
//! before the dead run's directory is removed.

use super::manifest::{SHARED_DIR, StateFile};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// The file a run's directory lists its restored SST files in (name →
/// object).
pub(crate) const RESTORED_LIST: &str = "restored.json";

/// The SST files of a checkpoint that a restore found locally.
#[derive(Debug, Default)]
pub(crate) struct WarmFiles {
    /// Names of the files linked into the new database directory.
    taken: HashSet<String>,
    /// Their bytes.
    bytes: u64,
}

impl WarmFiles {
    /// Links into `db` the files of `wanted` that the dead run `open_id`
    /// left in its directory `dead` and that are provably the same (see the
    /// module docs).
    pub(crate) fn take_from(
        &mut self,
        dead: &Path,
        open_id: &str,
        wanted: &[StateFile],
        db: &Path,
    ) {
        let restored: BTreeMap<String, String> = std::fs::read(dead.join(RESTORED_LIST))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        for file in wanted {
            if !file.name.ends_with(".sst") || self.taken.contains(&file.name) {
                continue;
            }
            let written_there = file.object == format!("{SHARED_DIR}{open_id}/{}", file.name);
            let restored_there = restored.get(&file.name) == Some(&file.object);
            if !written_there && !restored_there {
                continue;
            }
            let Some(local) = local_copy(dead, &file.name, file.bytes) else {
                continue;
            };
            if std::fs::create_dir_all(db).is_err() {
                return;
            }
            if std::fs::hard_link(&local, db.join(&file.name)).is_ok() {
                self.taken.insert(file.name.clone());
                self.bytes += file.bytes;
            }
        }
    }

    /// Whether `file` was taken (and need not be downloaded).
    pub(crate) fn has(&self, file: &StateFile) -> bool {
        self.taken.contains(&file.name)
    }

    /// The bytes taken.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// The dead run's copy of the SST file `name` with `bytes` bytes: in its
/// database, or in the local snapshot of its last checkpoint (which keeps
/// files compaction has removed from the database since).
fn local_copy(dead: &Path, name: &str, bytes: u64) -> Option<std::path::PathBuf> {
    let in_snapshots = std::fs::read_dir(dead.join("snapshots"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join(name));
    std::iter::once(dead.join("db").join(name))
        .chain(in_snapshots)
        .find(|path| std::fs::metadata(path).is_ok_and(|m| m.len() == bytes))
}

/// Writes the list of `files`' SST objects into `run_dir`, for the warm
/// restore of whichever run follows this one.
pub(crate) fn record_restored(run_dir: &Path, files: &[StateFile]) -> std::io::Result<()> {
    let list: BTreeMap<&str, &str> = files
        .iter()
        .filter(|file| file.name.ends_with(".sst"))
        .map(|file| (file.name.as_str(), file.object.as_str()))
        .collect();
    let bytes = serde_json::to_vec(&list).map_err(std::io::Error::other)?;
    std::fs::write(run_dir.join(RESTORED_LIST), bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, object: &str, bytes: u64) -> StateFile {
        StateFile {
            name: name.into(),
            object: object.into(),
            bytes,
        }
    }

    /// A dead run `dead-open` that restored `000007.sst` from run `older`
    /// and wrote `000009.sst` and `000011.sst` itself.
    fn dead_run(root: &Path) -> std::path::PathBuf {
        let dead = root.join("p.dead-open");
        std::fs::create_dir_all(dead.join("db")).unwrap();
        for (name, bytes) in [("000007.sst", 7), ("000009.sst", 9), ("000011.sst", 11)] {
            std::fs::write(dead.join("db").join(name), vec![b'x'; bytes]).unwrap();
        }
        std::fs::write(dead.join("db").join("MANIFEST-000012"), b"m").unwrap();
        record_restored(
            &dead,
            &[file(
                "000007.sst",
                &format!("{SHARED_DIR}older/000007.sst"),
                7,
            )],
        )
        .unwrap();
        dead
    }

    #[test]
    fn files_the_dead_run_wrote_or_restored_are_taken_others_downloaded() {
        let root = tempfile::tempdir().unwrap();
        let dead = dead_run(root.path());
        let db = root.path().join("p.new/db");
        let wanted = [
            // Restored by the dead run from the same object: taken.
            file("000007.sst", &format!("{SHARED_DIR}older/000007.sst"), 7),
            // Written by it: taken.
            file(
                "000009.sst",
                &format!("{SHARED_DIR}dead-open/000009.sst"),
                9,
            ),
            // Same name, written by another open: a different file.
            file("000011.sst", &format!("{SHARED_DIR}other/000011.sst"), 11),
            // Written by it, but the size differs: not trusted.
            file(
                "000013.sst",
                &format!("{SHARED_DIR}dead-open/000013.sst"),
                13,
            ),
            // Not an SST file: always downloaded.
            file(
                "MANIFEST-000012",
                &format!("{SHARED_DIR}dead-open/chk-3/MANIFEST-000012"),
                1,
            ),
        ];
        let mut warm = WarmFiles::default();
        warm.take_from(&dead, "dead-open", &wanted, &db);
        let taken: Vec<bool> = wanted.iter().map(|f| warm.has(f)).collect();
        assert_eq!(taken, [true, true, false, false, false]);
        assert_eq!(warm.bytes(), 16);
        assert_eq!(std::fs::read(db.join("000009.sst")).unwrap(), vec![b'x'; 9]);
        // The links outlive the dead run's directory.
        std::fs::remove_dir_all(&dead).unwrap();
        assert_eq!(std::fs::read(db.join("000007.sst")).unwrap(), vec![b'x'; 7]);
    }

    #[test]
    fn a_file_compacted_away_since_the_last_checkpoint_is_taken_from_its_snapshot() {
        let root = tempfile::tempdir().unwrap();
        let dead = dead_run(root.path());
        let snapshot = dead.join("snapshots/chk-3");
        std::fs::create_dir_all(&snapshot).unwrap();
        std::fs::rename(dead.join("db/000009.sst"), snapshot.join("000009.sst")).unwrap();
        let wanted = [file(
            "000009.sst",
            &format!("{SHARED_DIR}dead-open/000009.sst"),
            9,
        )];
        let mut warm = WarmFiles::default();
        warm.take_from(&dead, "dead-open", &wanted, &root.path().join("new/db"));
        assert!(warm.has(&wanted[0]));
    }

    #[test]
    fn a_restored_file_of_another_object_is_not_taken() {
        let root = tempfile::tempdir().unwrap();
        let dead = dead_run(root.path());
        let wanted = [file(
            "000007.sst",
            &format!("{SHARED_DIR}elsewhere/000007.sst"),
            7,
        )];
        let mut warm = WarmFiles::default();
        warm.take_from(&dead, "dead-open", &wanted, &root.path().join("new/db"));
        assert!(!warm.has(&wanted[0]));
    }
}
