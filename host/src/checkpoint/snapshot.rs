//! Incremental RocksDB snapshots: upload what the last checkpoint does not
//! already hold, download a checkpoint's files to restore it.
//!
//! A native RocksDB checkpoint is a directory of hard links to the live SST
//! files plus copies of MANIFEST, CURRENT and OPTIONS. SST files never
//! change once written, and within one database open their numbers are
//! never reused, so an SST file uploaded once is referenced by every later
//! manifest that still needs it. Numbers *are* reused after a restore (the
//! restored database continues from its own MANIFEST's counter), so every
//! object name carries the id of the database open that wrote it:
//! `shared/<open id>/<file>`. The small descriptor files are uploaded with
//! every checkpoint, under `shared/<open id>/chk-<id>/`.

use super::manifest::{SHARED_DIR, StateFile};
use super::storage::{CheckpointStorage, StorageError};
use super::warm::WarmFiles;
use std::collections::HashMap;
use std::path::Path;

/// What uploading one snapshot did.
#[derive(Debug, Default)]
pub struct Uploaded {
    /// Every file of the snapshot, with the object that holds it.
    pub files: Vec<StateFile>,
    /// Bytes uploaded now.
    pub bytes: u64,
    /// Files uploaded now.
    pub count: u64,
    /// The objects written now (to delete if the checkpoint is never
    /// published).
    pub new_objects: Vec<String>,
}

/// Uploads snapshots of one database open, each sending only the SST files
/// not uploaded before.
#[derive(Debug)]
pub struct IncrementalUploader {
    open_id: String,
    /// SST file name -> (object, size) of every SST file known to be stored.
    stored: HashMap<String, (String, u64)>,
}

impl IncrementalUploader {
    /// An uploader for the database open `open_id`, which already holds the
    /// SST files of `restored` (the manifest it was restored from).
    pub fn new(open_id: &str, restored: &[StateFile]) -> Self {
        let stored = restored
            .iter()
            .filter(|file| is_sst(&file.name))
            .map(|file| (file.name.clone(), (file.object.clone(), file.bytes)))
            .collect();
        IncrementalUploader {
            open_id: open_id.to_string(),
            stored,
        }
    }

    /// Uploads the snapshot in `dir` (taken for checkpoint `id`): new SST
    /// files and every descriptor file.
    pub fn upload(
        &mut self,
        storage: &dyn CheckpointStorage,
        dir: &Path,
        id: u64,
    ) -> Result<Uploaded, StorageError> {
        let local_error = |error: std::io::Error| StorageError {
            location: dir.display().to_string(),
            message: error.to_string(),
            not_found: false,
        };
        let mut names: Vec<(String, u64)> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(local_error)? {
            let entry = entry.map_err(local_error)?;
            let size = entry.metadata().map_err(local_error)?.len();
            names.push((entry.file_name().to_string_lossy().into_owned(), size));
        }
        names.sort();
        let mut uploaded = Uploaded::default();
        for (name, size) in names {
            let sst = is_sst(&name);
            if sst
                && let Some((object, stored_size)) = self.stored.get(&name)
                && *stored_size == size
            {
                uploaded.files.push(StateFile {
                    name,
                    object: object.clone(),
                    bytes: size,
                });
                continue;
            }
            let object = if sst {
                format!("{SHARED_DIR}{}/{name}", self.open_id)
            } else {
                format!("{SHARED_DIR}{}/chk-{id}/{name}", self.open_id)
            };
            let bytes = match storage.put_file(&object, &dir.join(&name)) {
                Ok(bytes) => bytes,
                Err(error) => {
                    // Nothing will reference what this call uploaded (a run
                    // whose snapshot directory vanished — a zombie whose
                    // replacement cleaned up — fails here): remove it.
                    for object in &uploaded.new_objects {
                        let _ = storage.delete(object);
                    }
                    self.stored
                        .retain(|_, (object, _)| !uploaded.new_objects.contains(object));
                    return Err(error);
                }
            };
            uploaded.bytes += bytes;
            uploaded.count += 1;
            uploaded.new_objects.push(object.clone());
            if sst {
                self.stored.insert(name.clone(), (object.clone(), bytes));
            }
            uploaded.files.push(StateFile {
                name,
                object,
                bytes,
            });
        }
        Ok(uploaded)
    }

    /// Forgets SST files no longer in `files` (the latest manifest): they
    /// were compacted away and cannot come back in this open.
    pub fn retain_only(&mut self, files: &[StateFile]) {
        let keep: std::collections::HashSet<&str> =
            files.iter().map(|file| file.name.as_str()).collect();
        self.stored.retain(|name, _| keep.contains(name.as_str()));
    }
}

fn is_sst(name: &str) -> bool {
    name.ends_with(".sst")
}

/// Downloads every file of a snapshot into `dir` (created), except those
/// a warm restore already linked there; returns the bytes downloaded.
pub(crate) fn download(
    storage: &dyn CheckpointStorage,
    files: &[StateFile],
    dir: &Path,
    warm: &WarmFiles,
) -> Result<u64, StorageError> {
    std::fs::create_dir_all(dir).map_err(|e| StorageError {
        location: dir.display().to_string(),
        message: e.to_string(),
        not_found: false,
    })?;
    let mut downloaded = 0;
    for (index, file) in files.iter().enumerate() {
        if index == files.len() / 2 {
            super::failpoint::hit(super::failpoint::Failpoint::DuringRestore);
        }
        if warm.has(file) {
            continue;
        }
        storage.get_to_file(&file.object, &dir.join(&file.name))?;
        downloaded += file.bytes;
    }
    Ok(downloaded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::storage::LocalStorage;

    /// An upload that fails part-way (here: a "file" that cannot be read)
    /// leaves nothing behind in the storage and forgets what it uploaded.
    #[test]
    fn a_failed_upload_removes_what_it_uploaded() {
        let storage_dir = tempfile::tempdir().unwrap();
        let storage = LocalStorage::new(storage_dir.path());
        let snapshot = tempfile::tempdir().unwrap();
        std::fs::write(snapshot.path().join("000001.sst"), b"sst one").unwrap();
        std::fs::create_dir(snapshot.path().join("000002.sst")).unwrap();
        let mut uploader = IncrementalUploader::new("open-a", &[]);
        assert!(uploader.upload(&storage, snapshot.path(), 1).is_err());
        assert!(
            storage.list("").unwrap().is_empty(),
            "{:?}",
            storage.list("")
        );
        // Uploaded again next time, not taken as already stored.
        std::fs::remove_dir(snapshot.path().join("000002.sst")).unwrap();
        let uploaded = uploader.upload(&storage, snapshot.path(), 2).unwrap();
        assert_eq!(uploaded.new_objects.len(), 1);
        assert_eq!(storage.list("").unwrap().len(), 1);
    }
}
