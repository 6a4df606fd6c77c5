//! Checkpoint storage: where manifests and state files go.
//!
//! Two backends behind one small, synchronous interface:
//!
//! * [`LocalStorage`] (`file:///dir`): the embedded default, so a pipeline
//!   checkpoints with no service running.
//! * `S3Storage` (`s3://bucket/prefix`, see [`super::s3`]): any
//!   S3-compatible server, through aws-sdk-s3.
//!
//! Keys are `/`-separated paths relative to the pipeline's root. The one
//! operation the publication protocol depends on is
//! [`CheckpointStorage::put_if_absent`]: a create that fails when the key
//! exists (`If-None-Match: *` on S3, a hard link on a file system), so two
//! processes can never both publish checkpoint N.

use std::path::{Path, PathBuf};

/// A failure of the checkpoint storage.
#[derive(Debug, thiserror::Error)]
#[error("checkpoint storage {location}: {message}")]
pub struct StorageError {
    /// The storage and key concerned.
    pub location: String,
    /// What went wrong.
    pub message: String,
    /// The key does not exist (as opposed to the storage failing).
    pub not_found: bool,
}

/// Where checkpoints of one pipeline are kept.
pub trait CheckpointStorage: Send + Sync {
    /// A URI for messages (`file:///...`, `s3://...`).
    fn describe(&self) -> String;
    /// Stores `bytes` under `key`, replacing what was there.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError>;
    /// Stores the file at `path` under `key` (large files in parts);
    /// returns its size.
    fn put_file(&self, key: &str, path: &Path) -> Result<u64, StorageError>;
    /// Stores `bytes` under `key` only if nothing is there: `Ok(false)`
    /// when the key already exists (someone else published it).
    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, StorageError>;
    /// The object under `key`.
    fn get(&self, key: &str) -> Result<Vec<u8>, StorageError>;
    /// Writes the object under `key` to the file `path`.
    fn get_to_file(&self, key: &str, path: &Path) -> Result<(), StorageError>;
    /// Every key starting with `prefix`, sorted.
    fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError>;
    /// Removes `key` (no error if it is already gone).
    fn delete(&self, key: &str) -> Result<(), StorageError>;
    /// Aborts uploads in parts that were started and never completed (a
    /// process killed during an upload); returns how many.
    fn abort_incomplete_uploads(&self) -> Result<usize, StorageError>;
}

/// Checkpoints in a local directory (`file:///dir`).
///
/// Files are written under a temporary name and renamed into place, so a
/// reader never sees half a file; [`CheckpointStorage::put_if_absent`] is a
/// hard link, which fails if the target exists.
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
}

impl LocalStorage {
    /// Storage rooted at `root` (created when first written).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalStorage { root: root.into() }
    }

    fn path(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    fn error(&self, key: &str, error: impl std::fmt::Display) -> StorageError {
        StorageError {
            location: format!("{}", self.path(key).display()),
            message: error.to_string(),
            not_found: false,
        }
    }

    fn io_error(&self, key: &str, error: std::io::Error) -> StorageError {
        StorageError {
            not_found: error.kind() == std::io::ErrorKind::NotFound,
            ..self.error(key, error)
        }
    }

    /// A temporary path beside `key`'s, unique to this process and call.
    fn temporary(&self, key: &str) -> Result<PathBuf, StorageError> {
        let path = self.path(key);
        let parent = path
            .parent()
            .ok_or_else(|| self.error(key, "key has no parent directory"))?;
        std::fs::create_dir_all(parent).map_err(|e| self.error(key, e))?;
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let unique = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(parent.join(format!(
            ".{name}.{}-{unique}.incomplete",
            std::process::id()
        )))
    }

    /// Writes `bytes` to a new temporary file beside `key` and syncs it.
    fn write_temporary(&self, key: &str, bytes: &[u8]) -> Result<PathBuf, StorageError> {
        use std::io::Write as _;
        let temporary = self.temporary(key)?;
        let mut file = std::fs::File::create(&temporary).map_err(|e| self.error(key, e))?;
        file.write_all(bytes).map_err(|e| self.error(key, e))?;
        file.sync_all().map_err(|e| self.error(key, e))?;
        Ok(temporary)
    }
}

impl CheckpointStorage for LocalStorage {
    fn describe(&self) -> String {
        format!("file://{}", self.root.display())
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let temporary = self.write_temporary(key, bytes)?;
        std::fs::rename(&temporary, self.path(key)).map_err(|e| self.error(key, e))
    }

    fn put_file(&self, key: &str, path: &Path) -> Result<u64, StorageError> {
        let temporary = self.temporary(key)?;
        let size = std::fs::copy(path, &temporary).map_err(|e| self.error(key, e))?;
        super::failpoint::hit(super::failpoint::Failpoint::DuringUpload);
        std::fs::File::open(&temporary)
            .and_then(|file| file.sync_all())
            .map_err(|e| self.error(key, e))?;
        std::fs::rename(&temporary, self.path(key)).map_err(|e| self.error(key, e))?;
        Ok(size)
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, StorageError> {
        let temporary = self.write_temporary(key, bytes)?;
        let linked = std::fs::hard_link(&temporary, self.path(key));
        let _ = std::fs::remove_file(&temporary);
        match linked {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(error) => Err(self.error(key, error)),
        }
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        std::fs::read(self.path(key)).map_err(|e| self.io_error(key, e))
    }

    fn get_to_file(&self, key: &str, path: &Path) -> Result<(), StorageError> {
        std::fs::copy(self.path(key), path)
            .map(drop)
            .map_err(|e| self.error(key, e))
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let mut keys = Vec::new();
        let mut pending = vec![self.root.clone()];
        while let Some(dir) = pending.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return Err(self.error(prefix, error)),
            };
            for entry in entries {
                let entry = entry.map_err(|e| self.error(prefix, e))?;
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                    continue;
                }
                let Ok(relative) = path.strip_prefix(&self.root) else {
                    continue;
                };
                let key = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                if key.starts_with(prefix) && !is_incomplete(&key) {
                    keys.push(key);
                }
            }
        }
        keys.sort();
        Ok(keys)
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        match std::fs::remove_file(self.path(key)) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(self.error(key, error)),
        }
        // Drop directories left empty (one per database open).
        let mut dir = self.path(key).parent().map(Path::to_path_buf);
        while let Some(current) = dir {
            if current == self.root || std::fs::remove_dir(&current).is_err() {
                break;
            }
            dir = current.parent().map(Path::to_path_buf);
        }
        Ok(())
    }

    /// Temporary files of writes that never completed (the process died
    /// between write and rename).
    fn abort_incomplete_uploads(&self) -> Result<usize, StorageError> {
        let mut removed = 0;
        let mut pending = vec![self.root.clone()];
        while let Some(dir) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                } else if is_incomplete(&path.to_string_lossy())
                    && std::fs::remove_file(&path).is_ok()
                {
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}

fn is_incomplete(key: &str) -> bool {
    key.ends_with(".incomplete")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_published_once() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let storage = LocalStorage::new(dir.path());
        assert!(storage.put_if_absent("m/1.json", b"first").expect("put"));
        assert!(!storage.put_if_absent("m/1.json", b"second").expect("put"));
        assert_eq!(storage.get("m/1.json").expect("get"), b"first");
        storage.put("s/a/x", b"x").expect("put");
        assert_eq!(
            storage.list("").expect("list"),
            vec!["m/1.json".to_string(), "s/a/x".to_string()]
        );
        assert_eq!(storage.list("s/").expect("list"), vec!["s/a/x".to_string()]);
        storage.delete("s/a/x").expect("delete");
        storage.delete("s/a/x").expect("deleting twice is fine");
        assert!(!dir.path().join("s").exists(), "empty directories go too");
    }
}
