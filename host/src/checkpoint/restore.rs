//! The checkpoints of one pipeline in storage: listing, fencing,
//! publication, retention, and the choice of what to restore.

use super::manifest::{
    MANIFESTS_DIR, Manifest, ManifestKind, SHARED_DIR, manifest_id, manifest_key,
};
use super::storage::{CheckpointStorage, StorageError};
use super::{CommitKind, Committer};
use crate::sync::lock;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// What a run starts from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RestoreFrom {
    /// The latest completed checkpoint whose outputs were committed (the
    /// default).
    #[default]
    Latest,
    /// Nothing: state, positions and uncommitted outputs start over.
    Fresh,
    /// This checkpoint id.
    Checkpoint(u64),
}

/// Why checkpoints could not be read, published or restored.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A manifest is unreadable.
    #[error("checkpoint {id}: {message}")]
    Manifest {
        /// Its id.
        id: u64,
        /// What is wrong.
        message: String,
    },
    /// Another process published the id this one wanted: this process is
    /// a zombie and must stop without committing anything.
    #[error(
        "checkpoint {id}: another process has taken over this pipeline; this one has been fenced off and stops"
    )]
    Fenced {
        /// The contested id.
        id: u64,
        /// Whether this process's manifest for `id` was published anyway
        /// (a newer process started right after): it may be restored by
        /// others, so nothing it references may be deleted.
        published: bool,
    },
    /// The coordinator's background thread could not be started.
    #[error("cannot start the checkpoint thread: {0}")]
    Thread(String),
    /// A checkpoint's snapshot failed (here, or in the thread that took it
    /// for every thread of the rendezvous): the pipeline stops.
    #[error("checkpoint failed: {0}")]
    Snapshot(String),
    /// A sink's commit failed (its kind says whether this process was
    /// fenced off).
    #[error(transparent)]
    Commit(#[from] crate::checkpoint::CommitError),
    /// Something else.
    #[error("{0}")]
    Other(String),
}

/// The checkpoints of one pipeline.
#[derive(Clone)]
pub struct CheckpointStore {
    storage: Arc<dyn CheckpointStorage>,
    /// Manifests read or published so far, by id. A manifest is written
    /// once (`put_if_absent`) and never changed, so a copy stays true until
    /// it is deleted: retention reads each one once, not at every
    /// checkpoint (a process with many tasks would otherwise spend most of
    /// its storage requests re-reading the same few manifests).
    manifests: Arc<Mutex<HashMap<u64, Manifest>>>,
}

/// The database open a state object belongs to (`shared/<open>/...`).
fn open_of(object: &str) -> &str {
    object
        .strip_prefix(SHARED_DIR)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default()
}

impl CheckpointStore {
    /// The checkpoints in `storage` (scoped to one pipeline).
    pub fn new(storage: Arc<dyn CheckpointStorage>) -> Self {
        CheckpointStore {
            storage,
            manifests: Arc::default(),
        }
    }

    /// The storage.
    pub fn storage(&self) -> &Arc<dyn CheckpointStorage> {
        &self.storage
    }

    /// Ids of every manifest (completed and fence), ascending.
    pub fn ids(&self) -> Result<Vec<u64>, CheckpointError> {
        let mut ids: Vec<u64> = self
            .storage
            .list(MANIFESTS_DIR)?
            .iter()
            .filter_map(|key| manifest_id(key))
            .collect();
        ids.sort_unstable();
        // Copies of manifests no longer listed are forgotten.
        lock(&self.manifests).retain(|id, _| ids.binary_search(id).is_ok());
        Ok(ids)
    }

    /// The manifest of checkpoint `id`.
    pub fn read(&self, id: u64) -> Result<Manifest, CheckpointError> {
        if let Some(manifest) = lock(&self.manifests).get(&id) {
            return Ok(manifest.clone());
        }
        let bytes = self.storage.get(&manifest_key(id))?;
        let manifest = Manifest::from_bytes(&bytes)
            .map_err(|message| CheckpointError::Manifest { id, message })?;
        lock(&self.manifests).insert(id, manifest.clone());
        Ok(manifest)
    }

    /// Every completed checkpoint's manifest, oldest first.
    pub fn completed(&self) -> Result<Vec<Manifest>, CheckpointError> {
        let mut manifests = Vec::new();
        for id in self.ids()? {
            let manifest = match self.read(id) {
                Ok(manifest) => manifest,
                // Listed, then pruned by another process's retention before
                // it could be read (a task moving between processes): not
                // the newest, which retention keeps.
                Err(CheckpointError::Storage(error)) if error.not_found => continue,
                Err(error) => return Err(error),
            };
            if manifest.kind == ManifestKind::Completed {
                manifests.push(manifest);
            }
        }
        Ok(manifests)
    }

    /// Writes a fence for a new process (`open_id`): takes the next id, so
    /// that no older process can publish again. Returns the fence's id;
    /// the process's own checkpoints follow it.
    pub fn fence(
        &self,
        tenant: &str,
        pipeline: &str,
        open_id: &str,
    ) -> Result<u64, CheckpointError> {
        for _ in 0..100 {
            let id = self.ids()?.last().copied().unwrap_or(0) + 1;
            let fence = Manifest::fence(id, tenant, pipeline, open_id, crate::time::now_ms());
            if self
                .storage
                .put_if_absent(&manifest_key(id), &fence.to_bytes())?
            {
                return Ok(id);
            }
        }
        Err(CheckpointError::Other(
            "could not take a checkpoint id: another process keeps publishing".into(),
        ))
    }

    /// Publishes `manifest`: fails with [`CheckpointError::Fenced`] if its
    /// id is taken (not published) or a newer one exists (published, but a
    /// newer process has started: this one must not commit).
    pub fn publish(&self, manifest: &Manifest) -> Result<(), CheckpointError> {
        let key = manifest_key(manifest.id);
        if !self.storage.put_if_absent(&key, &manifest.to_bytes())? {
            return Err(CheckpointError::Fenced {
                id: manifest.id,
                published: false,
            });
        }
        lock(&self.manifests).insert(manifest.id, manifest.clone());
        if self
            .ids()?
            .last()
            .is_some_and(|newest| *newest > manifest.id)
        {
            // A newer process started after our id was chosen. Our manifest
            // stays (the newer process may already be restoring it), but we
            // stop before committing anything.
            return Err(CheckpointError::Fenced {
                id: manifest.id,
                published: true,
            });
        }
        Ok(())
    }

    /// Deletes what no retained checkpoint needs: completed manifests
    /// beyond the newest `retained` (the parent of the newest is kept too:
    /// a restore may fall back to it), fences older than the oldest kept
    /// checkpoint, and state files no kept manifest references.
    ///
    /// Runs in the process that just published `published`, and only if
    /// that is still the newest manifest: once a newer process has written
    /// its fence, the older one collects nothing (it could otherwise delete
    /// files the newer one uploaded for a checkpoint not yet published).
    /// Only files of database opens named by a listed manifest are
    /// considered, for the same reason; the fences of opens whose files
    /// are collected go last. Returns the number of objects deleted.
    ///
    /// A process paused after the first check (a zombie) may go on
    /// deleting once a newer process has taken over. That is safe as long
    /// as its view of the manifests is whole: the newer process restored
    /// this process's newest checkpoint or its parent, both kept in that
    /// view, so every file of this process's open the newer one uses is
    /// referenced. A manifest that vanished while the view was read means
    /// a newer process is collecting too: the view is partial, and the
    /// collection stops without deleting anything.
    pub fn collect_garbage(
        &self,
        published: u64,
        retained: usize,
    ) -> Result<usize, CheckpointError> {
        let ids = self.ids()?;
        if ids.last() != Some(&published) {
            return Ok(0);
        }
        let mut manifests = Vec::new();
        for id in &ids {
            match self.read(*id) {
                Ok(manifest) => manifests.push(manifest),
                // Deleted since the listing. This process collects on one
                // thread, so another process's collector did it: a newer
                // process, which has fenced this one off. The view read so
                // far is partial (it may lack the checkpoint the newer
                // process restored), and files it calls unreferenced may
                // be the newer process's restored state: delete nothing.
                Err(CheckpointError::Storage(error)) if error.not_found => {
                    tracing::debug!(
                        checkpoint = id,
                        "a newer process collects this pipeline's checkpoints; this one stops collecting"
                    );
                    return Ok(0);
                }
                Err(error) => return Err(error),
            }
        }
        let completed: Vec<&Manifest> = manifests
            .iter()
            .filter(|m| m.kind == ManifestKind::Completed)
            .collect();
        let mut keep: BTreeSet<u64> = completed
            .iter()
            .rev()
            .take(retained.max(1))
            .map(|m| m.id)
            .collect();
        if let Some(parent) = completed.last().and_then(|m| m.parent) {
            keep.insert(parent);
        }
        let oldest_kept = keep.first().copied().unwrap_or(0);
        // The database opens these manifests name, as writers or through
        // the files they reference (a restored database keeps files of the
        // open it came from): every file that stops being referenced in
        // this pass belongs to one of them.
        let known_opens: HashSet<&str> = manifests
            .iter()
            .map(|m| m.open_id.as_str())
            .chain(
                manifests
                    .iter()
                    .flat_map(|m| m.state.iter().map(|f| open_of(&f.object))),
            )
            .collect();
        let mut referenced: HashSet<&str> = HashSet::new();
        let mut obsolete = Vec::new();
        for manifest in &manifests {
            let kept = match manifest.kind {
                ManifestKind::Completed => keep.contains(&manifest.id),
                ManifestKind::Fence => manifest.id >= oldest_kept,
            };
            if kept {
                referenced.extend(manifest.state.iter().map(|f| f.object.as_str()));
            } else {
                obsolete.push(manifest.id);
            }
        }
        let mut deleted = 0;
        for object in self.storage.list(SHARED_DIR)? {
            if known_opens.contains(open_of(&object)) && !referenced.contains(object.as_str()) {
                self.storage.delete(&object)?;
                deleted += 1;
            }
        }
        for id in obsolete {
            self.storage.delete(&manifest_key(id))?;
            deleted += 1;
        }
        Ok(deleted)
    }

    /// The checkpoint a run starting `from` restores (`None`: start from
    /// nothing). For [`RestoreFrom::Latest`]: the newest completed
    /// checkpoint if every final committer says its commit happened, else
    /// its parent (whose commits happened before its barrier).
    pub fn choose(
        &self,
        from: &RestoreFrom,
        committers: &[Arc<dyn Committer>],
    ) -> Result<Option<Manifest>, CheckpointError> {
        match from {
            RestoreFrom::Fresh => Ok(None),
            RestoreFrom::Checkpoint(id) => {
                let manifest = self.read(*id)?;
                if manifest.kind != ManifestKind::Completed {
                    return Err(CheckpointError::Manifest {
                        id: *id,
                        message: "is a fence, not a completed checkpoint".into(),
                    });
                }
                Ok(Some(manifest))
            }
            RestoreFrom::Latest => {
                let Some(latest) = self.completed()?.pop() else {
                    return Ok(None);
                };
                for committer in committers {
                    if committer.kind() != CommitKind::Final {
                        continue;
                    }
                    let committable = latest
                        .sinks
                        .get(committer.name())
                        .cloned()
                        .unwrap_or_default();
                    let committed = committer.was_committed(latest.id, &committable)?;
                    if !committed {
                        tracing::warn!(
                            checkpoint = latest.id,
                            sink = committer.name(),
                            parent = ?latest.parent,
                            "the sink's commit of the latest checkpoint did not happen: restoring its parent and replaying"
                        );
                        return match latest.parent {
                            Some(parent) => Ok(Some(self.read(parent)?)),
                            None => Ok(None),
                        };
                    }
                }
                Ok(Some(latest))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::manifest::{MANIFEST_FORMAT, StateFile};
    use crate::checkpoint::storage::LocalStorage;
    use crate::metrics::CheckpointStats;
    use std::path::Path;
    use std::sync::Mutex;

    /// A local storage that runs `before_read` (once) just before the
    /// manifest `trigger` is read: another process acting in the middle of
    /// this one's collection.
    struct Interleaved {
        inner: LocalStorage,
        trigger: String,
        before_read: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    }

    impl CheckpointStorage for Interleaved {
        fn describe(&self) -> String {
            self.inner.describe()
        }
        fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
            self.inner.put(key, bytes)
        }
        fn put_file(&self, key: &str, path: &Path) -> Result<u64, StorageError> {
            self.inner.put_file(key, path)
        }
        fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, StorageError> {
            self.inner.put_if_absent(key, bytes)
        }
        fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
            if key == self.trigger {
                let hook = self.before_read.lock().expect("hook").take();
                if let Some(hook) = hook {
                    hook();
                }
            }
            self.inner.get(key)
        }
        fn get_to_file(&self, key: &str, path: &Path) -> Result<(), StorageError> {
            self.inner.get_to_file(key, path)
        }
        fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
            self.inner.list(prefix)
        }
        fn delete(&self, key: &str) -> Result<(), StorageError> {
            self.inner.delete(key)
        }
        fn abort_incomplete_uploads(&self) -> Result<usize, StorageError> {
            self.inner.abort_incomplete_uploads()
        }
    }

    fn object(open: &str, name: &str) -> String {
        format!("{SHARED_DIR}{open}/{name}")
    }

    /// Publishes a completed checkpoint of `open` referencing `files`
    /// (the objects written too).
    fn publish_completed(
        store: &CheckpointStore,
        id: u64,
        open: &str,
        parent: Option<u64>,
        files: &[&str],
    ) {
        let mut state = Vec::new();
        for file in files {
            let (owner, name) = file.split_once('/').expect("open/name");
            let key = object(owner, name);
            store.storage().put(&key, b"sst").expect("put state file");
            state.push(StateFile {
                name: name.to_string(),
                object: key,
                bytes: 3,
            });
        }
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            id,
            kind: ManifestKind::Completed,
            tenant: "t".into(),
            pipeline: "p".into(),
            open_id: open.into(),
            parent,
            timestamp_ms: 0,
            max_parallelism: 128,
            workers: 1,
            source: serde_json::Value::Null,
            state,
            sinks: Default::default(),
            stats: CheckpointStats::default(),
        };
        store.publish(&manifest).expect("publish");
    }

    /// Process A's storage in `dir`: its fence (1) and two completed
    /// checkpoints (2, then 3 with 2 as parent).
    fn process_a_checkpointed_twice(dir: &Path) -> (LocalStorage, CheckpointStore) {
        let local = LocalStorage::new(dir);
        let setup = CheckpointStore::new(Arc::new(local.clone()));
        assert_eq!(setup.fence("t", "p", "a").expect("fence"), 1);
        publish_completed(&setup, 2, "a", None, &["a/1.sst"]);
        publish_completed(&setup, 3, "a", Some(2), &["a/1.sst", "a/2.sst"]);
        (local, setup)
    }

    /// Process A (a zombie) is paused in its collection after checkpoint 3
    /// while reading its manifests; process B restores 3, checkpoints
    /// twice and collects A's manifests. A must not then delete the file
    /// of 3 that B's checkpoints still reference.
    #[test]
    fn a_zombie_with_a_partial_view_deletes_nothing() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (local, setup) = process_a_checkpointed_twice(dir.path());

        let newer = setup.clone();
        let process_b = move || {
            assert_eq!(newer.fence("t", "p", "b").expect("fence"), 4);
            // Restored 3; compaction dropped a/1.sst, kept a/2.sst.
            publish_completed(&newer, 5, "b", Some(3), &["a/2.sst", "b/3.sst"]);
            publish_completed(&newer, 6, "b", Some(5), &["a/2.sst", "b/3.sst"]);
            newer.collect_garbage(6, 1).expect("B collects");
        };
        let zombie = CheckpointStore::new(Arc::new(Interleaved {
            inner: local.clone(),
            trigger: manifest_key(3),
            before_read: Mutex::new(Some(Box::new(process_b))),
        }));
        assert_eq!(zombie.collect_garbage(3, 1).expect("A collects"), 0);

        let mut referenced: BTreeSet<String> = BTreeSet::new();
        for id in setup.ids().expect("ids") {
            referenced.insert(manifest_key(id));
            let manifest = setup.read(id).expect("manifest");
            referenced.extend(manifest.state.into_iter().map(|f| f.object));
        }
        let stored: BTreeSet<String> = local.list("").expect("list").into_iter().collect();
        assert_eq!(
            stored, referenced,
            "B's collection left exactly what 5 and 6 need"
        );
        assert!(stored.contains(&object("a", "2.sst")));
    }

    /// A process restoring the latest checkpoint lists the manifests, then
    /// another process's retention deletes the oldest before it is read:
    /// the restore still finds the latest (a scale-out chaos run ended a
    /// process with NoSuchKey here).
    #[test]
    fn a_manifest_pruned_between_listing_and_reading_is_skipped() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (local, _) = process_a_checkpointed_twice(dir.path());
        let pruner = local.clone();
        let restoring = CheckpointStore::new(Arc::new(Interleaved {
            inner: local,
            trigger: manifest_key(1),
            before_read: Mutex::new(Some(Box::new(move || {
                pruner.delete(&manifest_key(1)).expect("prune the fence");
                pruner.delete(&manifest_key(2)).expect("prune checkpoint 2");
            }))),
        }));
        let chosen = restoring
            .choose(&RestoreFrom::Latest, &[])
            .expect("choose")
            .expect("a checkpoint");
        assert_eq!(chosen.id, 3);
    }
}
