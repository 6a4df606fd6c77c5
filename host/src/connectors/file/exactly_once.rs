//! The exactly-once file sink: records of an epoch go to an in-progress part
//! file; once the epoch's checkpoint is published, the part is appended to
//! the output file. The output file therefore only ever holds committed
//! records; in-progress data lives beside it in a hidden directory
//! (`.<file name>.parts/`), which readers ignore.
//!
//! A commit is idempotent, so a restore can always apply it again: the
//! committable of checkpoint N records the output's committed length
//! before N (`offset`) and the part's length; committing truncates the
//! output to `offset`, appends the part, syncs, and only then deletes the
//! part. A crash in the middle leaves a part that the restore appends
//! again; an output longer than `offset + bytes` means a later checkpoint
//! was committed by another process, and the commit refuses (a zombie).
//!
//! A file system has no conditional write, so fencing a zombie (a process
//! paused after it published checkpoint N, woken after a replacement took
//! over) takes a lock: every restore and commit holds an exclusive lock on
//! `.<file name>.parts/LOCK`, the restore records its process's open id in
//! `.<file name>.parts/OWNER`, and a commit whose process is not the owner
//! is refused as fenced. A process stopped while it holds the lock (for the
//! few milliseconds of a commit) makes its replacement wait; that is the
//! price of appending to one file, and the wait is logged.

use super::OutputFormat;
use super::sink::format_line;
use crate::checkpoint::{CommitError, Committable, Committer, parse_committable};
use crate::dataflow::{DataflowError, Sink};
use crate::record::Record;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the sink pre-commits for one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FilePreCommit {
    /// The part file (in the parts directory), if the epoch wrote records.
    part: Option<String>,
    /// Its length.
    bytes: u64,
    /// The output's committed length before this checkpoint.
    offset: u64,
}

/// The output file, its parts directory, and its committed length: shared by
/// the sink and its committer.
#[derive(Debug)]
struct Output {
    name: String,
    path: PathBuf,
    parts: PathBuf,
    /// This process's open id: the owner it records on restore and
    /// expects on commit.
    open_id: String,
    /// Length of the output through the last committed checkpoint.
    committed: AtomicU64,
}

impl Output {
    fn error(&self, error: impl std::fmt::Display) -> CommitError {
        CommitError::failed(&self.name, format!("{}: {error}", self.path.display()))
    }

    /// Takes the exclusive lock on the output (blocking, with a log line
    /// when another process holds it). Dropping the file releases it.
    fn lock(&self) -> Result<std::fs::File, CommitError> {
        let path = self.parts.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| self.error(format!("{}: {e}", path.display())))?;
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                tracing::warn!(sink = %self.name, lock = %path.display(), "another process holds the output's lock (a paused run?): waiting for it");
            }
            Err(std::fs::TryLockError::Error(error)) => {
                return Err(self.error(format!("{}: {error}", path.display())));
            }
        }
        file.lock()
            .map_err(|e| self.error(format!("{}: {e}", path.display())))?;
        Ok(file)
    }

    /// Records this process as the output's owner (under the lock).
    fn take_ownership(&self) -> Result<(), CommitError> {
        let path = self.parts.join(OWNER_FILE);
        let staged = self.parts.join(format!("{OWNER_FILE}.{}", self.open_id));
        std::fs::write(&staged, self.open_id.as_bytes())
            .and_then(|()| std::fs::File::open(&staged)?.sync_all())
            .and_then(|()| std::fs::rename(&staged, &path))
            .map_err(|e| self.error(format!("{}: {e}", path.display())))
    }

    /// Refuses when another process restored the output after this one
    /// (under the lock): this process is a zombie.
    fn check_ownership(&self) -> Result<(), CommitError> {
        let path = self.parts.join(OWNER_FILE);
        let owner = std::fs::read_to_string(&path)
            .map_err(|e| self.error(format!("{}: {e}", path.display())))?;
        if owner != self.open_id {
            return Err(CommitError::fenced(
                &self.name,
                format!(
                    "{}: fenced: run {owner} restored the output after this run ({}) started; this run's commit is refused",
                    self.path.display(),
                    self.open_id
                ),
            ));
        }
        Ok(())
    }

    /// Makes the output end exactly with `commit`'s part (idempotent).
    fn apply(&self, commit: &FilePreCommit) -> Result<(), CommitError> {
        let target = commit.offset + commit.bytes;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(|e| self.error(e))?;
        let length = file.metadata().map_err(|e| self.error(e))?.len();
        let part = commit.part.as_ref().map(|name| self.parts.join(name));
        let part_exists = part.as_ref().is_some_and(|p| p.exists());
        if length > target {
            return Err(self.error(format!(
                "the output is {length} bytes, longer than the {target} bytes committed through this checkpoint: another process committed later checkpoints (this one is fenced)"
            )));
        }
        if length == target && !part_exists {
            self.committed.store(target, Ordering::Relaxed);
            return Ok(());
        }
        if length < commit.offset {
            return Err(self.error(format!(
                "the output is {length} bytes, shorter than the {} bytes committed before this checkpoint",
                commit.offset
            )));
        }
        if let Some(part) = &part {
            if !part_exists {
                return Err(self.error(format!("part file {} is missing", part.display())));
            }
            file.set_len(commit.offset).map_err(|e| self.error(e))?;
            let mut output = std::fs::OpenOptions::new()
                .append(true)
                .open(&self.path)
                .map_err(|e| self.error(e))?;
            let mut input = std::fs::File::open(part)
                .map_err(|e| self.error(format!("{}: {e}", part.display())))?;
            std::io::copy(&mut input, &mut output).map_err(|e| self.error(e))?;
            output.sync_all().map_err(|e| self.error(e))?;
            std::fs::remove_file(part).map_err(|e| self.error(e))?;
        }
        self.committed.store(target, Ordering::Relaxed);
        Ok(())
    }

    /// Removes every part file (uncommitted leftovers).
    fn remove_parts(&self) -> Result<(), CommitError> {
        let entries = match std::fs::read_dir(&self.parts) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(self.error(error)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| self.error(e))?;
            if entry.file_name().to_string_lossy().starts_with(PART_PREFIX) {
                std::fs::remove_file(entry.path()).map_err(|e| self.error(e))?;
            }
        }
        Ok(())
    }

    /// Cuts the output to `length` bytes (created if missing), synced.
    fn truncate(&self, length: u64) -> Result<(), CommitError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.path)
            .map_err(|e| self.error(e))?;
        let current = file.metadata().map_err(|e| self.error(e))?.len();
        if current > length {
            tracing::info!(sink = %self.name, from = current, to = length, "dropping uncommitted output");
        }
        if current != length {
            file.set_len(length.min(current))
                .map_err(|e| self.error(e))?;
            file.sync_all().map_err(|e| self.error(e))?;
        }
        self.committed.store(length.min(current), Ordering::Relaxed);
        Ok(())
    }
}

/// The lock file in the parts directory.
const LOCK_FILE: &str = "LOCK";
/// The file naming the process that restored the output last.
const OWNER_FILE: &str = "OWNER";
/// How part files' names begin.
const PART_PREFIX: &str = "part-";

/// The committer of an [`ExactlyOnceFileSink`].
struct FileCommitter {
    output: Arc<Output>,
}

impl Committer for FileCommitter {
    fn name(&self) -> &str {
        &self.output.name
    }

    fn commit(&self, _checkpoint: u64, committable: &Committable) -> Result<(), CommitError> {
        let commit = parse_committable(self.name(), committable)?;
        let _lock = self.output.lock()?;
        self.output.check_ownership()?;
        self.output.apply(&commit)
    }

    fn restore(&self, restored: Option<(u64, &Committable)>) -> Result<(), CommitError> {
        let _lock = self.output.lock()?;
        self.output.take_ownership()?;
        match restored {
            Some((_, committable)) => {
                let commit: FilePreCommit = parse_committable(self.name(), committable)?;
                // Drop what abandoned later epochs may have appended, then
                // apply this checkpoint's part (again, if it was).
                let length = std::fs::metadata(&self.output.path).map_or(0, |m| m.len());
                let target = commit.offset + commit.bytes;
                if length > target {
                    self.output.truncate(target)?;
                }
                self.output.apply(&commit)?;
            }
            None => self.output.truncate(0)?,
        }
        self.output.remove_parts()
    }
}

/// A JSON-lines file written exactly once per record across restores (see
/// the module docs).
pub struct ExactlyOnceFileSink {
    output: Arc<Output>,
    format: OutputFormat,
    part: Option<(String, std::io::BufWriter<std::fs::File>)>,
    part_bytes: u64,
    epoch: u64,
    line: Vec<u8>,
}

impl ExactlyOnceFileSink {
    /// A sink named `name` writing to `path`; `open_id` makes its part
    /// names unique to this process. The output is left as it is until the
    /// committer's restore brings it to the restored checkpoint.
    pub fn new(
        name: &str,
        path: &Path,
        format: OutputFormat,
        open_id: &str,
    ) -> std::io::Result<Self> {
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "output".into());
        let parts = path
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(format!(".{file_name}.parts"));
        std::fs::create_dir_all(&parts)?;
        let committed = std::fs::metadata(path).map_or(0, |m| m.len());
        Ok(ExactlyOnceFileSink {
            output: Arc::new(Output {
                name: name.to_string(),
                path: path.to_path_buf(),
                parts,
                open_id: open_id.to_string(),
                committed: AtomicU64::new(committed),
            }),
            format,
            part: None,
            part_bytes: 0,
            epoch: 0,
            line: Vec::new(),
        })
    }

    fn error(&self, error: impl std::fmt::Display) -> DataflowError {
        DataflowError::Sink {
            name: self.output.name.clone(),
            message: error.to_string(),
        }
    }
}

impl Sink for ExactlyOnceFileSink {
    fn name(&self) -> &str {
        &self.output.name
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        if records.is_empty() {
            return Ok(());
        }
        if self.part.is_none() {
            let name = format!(
                "{PART_PREFIX}{}-{}.inprogress",
                self.output.open_id, self.epoch
            );
            let file =
                std::fs::File::create(self.output.parts.join(&name)).map_err(|e| self.error(e))?;
            self.part = Some((name, std::io::BufWriter::with_capacity(1 << 16, file)));
            self.part_bytes = 0;
        }
        let Some((_, writer)) = &mut self.part else {
            return Ok(());
        };
        for record in records {
            self.line.clear();
            format_line(&mut self.line, record, self.format);
            if let Err(error) = writer.write_all(&self.line) {
                return Err(self.error(error));
            }
            self.part_bytes += self.line.len() as u64;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DataflowError> {
        match &mut self.part {
            Some((_, writer)) => writer.flush().map_err(|e| DataflowError::Sink {
                name: self.output.name.clone(),
                message: e.to_string(),
            }),
            None => Ok(()),
        }
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Committable>, DataflowError> {
        let part = match self.part.take() {
            Some((name, writer)) => {
                let file = writer.into_inner().map_err(|e| self.error(e.error()))?;
                file.sync_all().map_err(|e| self.error(e))?;
                Some(name)
            }
            None => None,
        };
        self.epoch = checkpoint;
        let pre_commit = FilePreCommit {
            part,
            bytes: std::mem::take(&mut self.part_bytes),
            // The previous checkpoint committed before this barrier came.
            offset: self.output.committed.load(Ordering::Relaxed),
        };
        serde_json::to_value(&pre_commit)
            .map(Some)
            .map_err(|e| self.error(e))
    }

    fn committer(&self) -> Option<Arc<dyn Committer>> {
        Some(Arc::new(FileCommitter {
            output: self.output.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::CommitFailure;
    use crate::record::test_record as record;

    #[test]
    fn only_committed_epochs_reach_the_output_and_commits_repeat_safely() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("out.jsonl");
        let mut sink =
            ExactlyOnceFileSink::new("sink", &path, OutputFormat::Value, "a").expect("sink");
        let committer = sink.committer().expect("committer");
        committer.restore(None).expect("fresh start");
        sink.write(&[record("1"), record("2")]).expect("write");
        let first = sink
            .pre_commit(1)
            .expect("pre-commit")
            .expect("committable");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "", "not yet");
        committer.commit(1, &first).expect("commit");
        committer
            .commit(1, &first)
            .expect("a commit applied twice is fine");
        sink.write(&[record("3")]).expect("write");
        let second = sink
            .pre_commit(2)
            .expect("pre-commit")
            .expect("committable");
        sink.write(&[record("4")])
            .expect("write in epoch 3, never committed");
        sink.flush().expect("flush");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "1\n2\n");

        // A crash after checkpoint 2 was published, before its commit: the
        // restore applies it, and epoch 3's part is dropped.
        let restarted =
            ExactlyOnceFileSink::new("sink", &path, OutputFormat::Value, "b").expect("sink");
        restarted
            .committer()
            .expect("committer")
            .restore(Some((2, &second)))
            .expect("restore");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "1\n2\n3\n");
        let parts = std::fs::read_dir(dir.path().join(".out.jsonl.parts"))
            .expect("parts")
            .filter(|entry| {
                entry
                    .as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(PART_PREFIX))
            })
            .count();
        assert_eq!(parts, 0, "leftover parts are removed");

        // Restoring checkpoint 1 (its parent) cuts checkpoint 2's records.
        restarted
            .committer()
            .expect("committer")
            .restore(Some((1, &first)))
            .expect("restore");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "1\n2\n");

        // The first process, woken after "b" restored, is fenced: its
        // commit of checkpoint 2 changes nothing.
        let refused = committer
            .commit(2, &second)
            .expect_err("a zombie's commit is refused");
        assert_eq!(refused.kind, CommitFailure::Fenced, "{refused:?}");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "1\n2\n");
    }
}
