//! The checkpoint coordinator of one running pipeline.
//!
//! It hands out checkpoint ids to the source thread, runs the rendezvous
//! where the threads holding operators take the state snapshot together,
//! collects the sinks' pre-commits, and runs a background thread that
//! uploads, publishes and commits each checkpoint, then tells the source.
//! One checkpoint is in flight at a time (`max_concurrent = 1`): the next
//! barrier is injected only after the previous checkpoint completed.

use super::manifest::{MANIFEST_FORMAT, Manifest, ManifestKind};
use super::restore::{CheckpointError, CheckpointStore};
use super::snapshot::IncrementalUploader;
use super::{CheckpointSettings, CommitKind, Committable, Committer, failpoint};
use crate::metrics::CheckpointStats;
use crate::metrics::{CheckpointMetrics, CheckpointRecord};
use crate::state::RocksStateBackend;
use crate::sync::{lock, wait};
use crossbeam_channel::{Receiver, Sender, unbounded};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// The checkpoint being taken.
struct InFlight {
    id: u64,
    timestamp_ms: i64,
    injected: Instant,
    source: Option<serde_json::Value>,
    /// The local RocksDB checkpoint directory, once taken.
    snapshot: Option<PathBuf>,
    sinks: Option<BTreeMap<String, Committable>>,
    alignment_ms: f64,
    sync_ms: f64,
}

impl InFlight {
    fn is_ready(&self) -> bool {
        self.source.is_some() && self.snapshot.is_some() && self.sinks.is_some()
    }
}

/// Where the threads meet to take the state snapshot.
#[derive(Default)]
struct Rendezvous {
    /// Checkpoint the arrivals are for.
    id: u64,
    arrived: usize,
    first_arrival: Option<Instant>,
    /// The last checkpoint whose snapshot was taken, and how it went.
    done: Option<(u64, Result<(), String>)>,
    /// Set when the pipeline fails: nobody waits any more.
    aborted: Option<String>,
}

/// State the coordinator's threads share.
struct Shared {
    in_flight: Option<InFlight>,
    next_id: u64,
    failure: Option<String>,
    /// No barrier above this id is injected while set (see
    /// [`CheckpointCoordinator::hold_after`]).
    hold_after: Option<u64>,
}

/// Runs the checkpoints of one pipeline (see the module docs).
pub struct CheckpointCoordinator {
    settings: CheckpointSettings,
    store: CheckpointStore,
    backend: Arc<RocksStateBackend>,
    snapshots_dir: PathBuf,
    open_id: String,
    committers: Vec<Arc<dyn Committer>>,
    metrics: Arc<CheckpointMetrics>,
    parties: AtomicUsize,
    shared: Mutex<Shared>,
    rendezvous: Mutex<Rendezvous>,
    arrived: Condvar,
    jobs: Mutex<Option<Sender<InFlight>>>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// What the background thread starts from: the uploader (seeded with
    /// the restored files) and the parent of the first checkpoint.
    start: Mutex<Option<(IncrementalUploader, Option<u64>)>>,
    /// The local snapshot of the last checkpoint uploaded, kept until the
    /// next one is: a warm restore on this machine takes its files
    /// (`super::warm`), also those compaction has since removed from the
    /// database (Flink's local recovery keeps a local copy likewise).
    kept_snapshot: Mutex<Option<PathBuf>>,
}

/// What a coordinator needs besides its settings.
pub struct CoordinatorParts {
    /// The pipeline's checkpoints.
    pub store: CheckpointStore,
    /// The state to snapshot.
    pub backend: Arc<RocksStateBackend>,
    /// Where local RocksDB checkpoints are made (same file system as the
    /// database: they are hard links).
    pub snapshots_dir: PathBuf,
    /// This database open's id (names its uploaded files).
    pub open_id: String,
    /// The first id this process may use (after its fence).
    pub first_id: u64,
    /// The checkpoint restored, if any: the parent of the first one.
    pub restored: Option<Manifest>,
    /// The sinks' committers.
    pub committers: Vec<Arc<dyn Committer>>,
    /// Where figures go.
    pub metrics: Arc<CheckpointMetrics>,
}

impl CheckpointCoordinator {
    /// A coordinator; [`CheckpointCoordinator::start`] starts its thread.
    pub fn new(settings: CheckpointSettings, parts: CoordinatorParts) -> Arc<Self> {
        let (restored_files, parent) = match &parts.restored {
            Some(manifest) => (manifest.state.as_slice(), Some(manifest.id)),
            None => (&[][..], None),
        };
        let uploader = IncrementalUploader::new(&parts.open_id, restored_files);
        Arc::new(CheckpointCoordinator {
            settings,
            store: parts.store,
            backend: parts.backend,
            snapshots_dir: parts.snapshots_dir,
            open_id: parts.open_id,
            committers: parts.committers,
            metrics: parts.metrics,
            parties: AtomicUsize::new(1),
            shared: Mutex::new(Shared {
                in_flight: None,
                next_id: parts.first_id,
                hold_after: None,
                failure: None,
            }),
            rendezvous: Mutex::new(Rendezvous::default()),
            arrived: Condvar::new(),
            jobs: Mutex::new(None),
            worker: Mutex::new(None),
            start: Mutex::new(Some((uploader, parent))),
            kept_snapshot: Mutex::new(None),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &CheckpointSettings {
        &self.settings
    }

    /// Sets how many threads meet at each snapshot (every thread holding
    /// operators).
    pub fn set_parties(&self, parties: usize) {
        self.parties.store(parties.max(1), Ordering::Relaxed);
    }

    /// Starts the background thread; completed checkpoint ids are sent on
    /// `acks` (to the source thread).
    pub fn start(self: &Arc<Self>, acks: Sender<u64>) -> Result<(), CheckpointError> {
        let (sender, receiver) = unbounded::<InFlight>();
        *lock(&self.jobs) = Some(sender);
        let coordinator = self.clone();
        let handle = crate::sync::spawn_named("sluice-checkpoints".into(), move || {
            coordinator.run_worker(receiver, acks)
        })
        .map_err(|e| CheckpointError::Thread(e.to_string()))?;
        *lock(&self.worker) = Some(handle);
        Ok(())
    }

    /// Waits for the background thread to finish the checkpoints handed to
    /// it (call after the dataflow has stopped).
    pub fn finish(&self) {
        lock(&self.jobs).take();
        if let Some(handle) = lock(&self.worker).take() {
            let _ = handle.join();
        }
    }

    /// Why checkpointing failed, if it did (the pipeline must then stop).
    pub fn failure(&self) -> Option<String> {
        let shared = lock(&self.shared);
        if let Some(failure) = &shared.failure {
            return Some(failure.clone());
        }
        match &shared.in_flight {
            Some(in_flight) if in_flight.injected.elapsed() > self.settings.timeout => {
                Some(format!(
                    "checkpoint {} did not complete within {} ms",
                    in_flight.id,
                    self.settings.timeout.as_millis()
                ))
            }
            _ => None,
        }
    }

    /// Stops every wait (a thread of the pipeline failed).
    pub fn abort(&self, reason: &str) {
        lock(&self.rendezvous).aborted = Some(reason.to_string());
        self.arrived.notify_all();
        let mut shared = lock(&self.shared);
        if shared.failure.is_none() {
            shared.failure = Some(reason.to_string());
        }
    }

    fn fail(&self, reason: String) {
        crate::metrics::add(&self.metrics.failed, 1);
        tracing::error!(%reason, "checkpoint failed");
        self.abort(&reason);
    }

    /// Reserves the next checkpoint id for a barrier, unless one is still
    /// in flight (or checkpointing failed): `None` then.
    pub fn next_barrier(&self) -> Option<(u64, i64)> {
        let mut shared = lock(&self.shared);
        if shared.in_flight.is_some() || shared.failure.is_some() {
            return None;
        }
        if shared.hold_after.is_some_and(|last| shared.next_id > last) {
            return None;
        }
        let id = shared.next_id;
        shared.next_id += 1;
        let timestamp_ms = crate::time::now_ms();
        shared.in_flight = Some(InFlight {
            id,
            timestamp_ms,
            injected: Instant::now(),
            source: None,
            snapshot: None,
            sinks: None,
            alignment_ms: 0.0,
            sync_ms: 0.0,
        });
        Some((id, timestamp_ms))
    }

    /// Holds checkpoints after `id`: barriers up to `id` are injected as
    /// usual, later ones not until [`Self::release`]. Nothing processed
    /// after barrier `id` is committed meanwhile, so that the run can be
    /// abandoned and restored from checkpoint `id` (a plugin version on
    /// probation that is rolled back leaves no output). A hold longer than a
    /// Kafka sink's transaction timeout aborts its transaction.
    pub fn hold_after(&self, id: u64) {
        lock(&self.shared).hold_after = Some(id);
    }

    /// Ends a hold: checkpoints resume with the next barrier.
    pub fn release(&self) {
        lock(&self.shared).hold_after = None;
    }

    /// Whether checkpoints are held (see [`Self::hold_after`]) and the
    /// held barrier has been injected.
    pub fn is_holding(&self) -> bool {
        let shared = lock(&self.shared);
        shared.hold_after.is_some_and(|last| shared.next_id > last)
    }

    /// Whether a checkpoint is in flight.
    pub fn in_flight(&self) -> bool {
        lock(&self.shared).in_flight.is_some()
    }

    /// Records the source's position for checkpoint `id`.
    pub fn record_source(&self, id: u64, position: serde_json::Value) {
        self.update(id, |in_flight| in_flight.source = Some(position));
    }

    /// Records the sinks' pre-commits for checkpoint `id`.
    pub fn record_pre_commits(&self, id: u64, committables: BTreeMap<String, Committable>) {
        self.update(id, |in_flight| in_flight.sinks = Some(committables));
    }

    fn update(&self, id: u64, change: impl FnOnce(&mut InFlight)) {
        let ready = {
            let mut shared = lock(&self.shared);
            match &mut shared.in_flight {
                Some(in_flight) if in_flight.id == id => {
                    change(in_flight);
                    in_flight.is_ready()
                }
                _ => false,
            }
        };
        if ready {
            self.hand_over(id);
        }
    }

    /// Sends the complete in-flight checkpoint to the background thread
    /// (it stays "in flight" until published).
    fn hand_over(&self, id: u64) {
        let job = {
            let shared = lock(&self.shared);
            match &shared.in_flight {
                Some(in_flight) if in_flight.id == id => InFlight {
                    id,
                    timestamp_ms: in_flight.timestamp_ms,
                    injected: in_flight.injected,
                    source: in_flight.source.clone(),
                    snapshot: in_flight.snapshot.clone(),
                    sinks: in_flight.sinks.clone(),
                    alignment_ms: in_flight.alignment_ms,
                    sync_ms: in_flight.sync_ms,
                },
                _ => return,
            }
        };
        let sent = lock(&self.jobs)
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok());
        if !sent {
            self.fail(format!(
                "checkpoint {id}: the checkpoint thread has stopped"
            ));
        }
    }

    /// Called by every thread holding operators once they have handled
    /// barrier `id` (state written back): blocks until all have, the last
    /// one taking the RocksDB checkpoint for everyone.
    pub fn arrive(&self, id: u64) -> Result<(), CheckpointError> {
        let parties = self.parties.load(Ordering::Relaxed);
        let mut rendezvous = lock(&self.rendezvous);
        if rendezvous.id != id {
            rendezvous.id = id;
            rendezvous.arrived = 0;
            rendezvous.first_arrival = Some(Instant::now());
        }
        rendezvous.arrived += 1;
        if rendezvous.arrived == parties {
            let first_arrival = rendezvous.first_arrival.unwrap_or_else(Instant::now);
            let result = self.take_snapshot(id, first_arrival);
            rendezvous.done = Some((id, result.clone()));
            drop(rendezvous);
            self.arrived.notify_all();
            return result.map_err(CheckpointError::Snapshot);
        }
        loop {
            if let Some(reason) = &rendezvous.aborted {
                return Err(CheckpointError::Snapshot(reason.clone()));
            }
            if let Some((done, result)) = &rendezvous.done
                && *done >= id
            {
                return result.clone().map_err(CheckpointError::Snapshot);
            }
            rendezvous = wait(&self.arrived, rendezvous);
        }
    }

    /// The synchronous part: a native RocksDB checkpoint of every column
    /// family (every thread has written its state back and waits).
    fn take_snapshot(&self, id: u64, first_arrival: Instant) -> Result<(), String> {
        let dir = self.snapshots_dir.join(format!("chk-{id}"));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| format!("cannot clear {}: {e}", dir.display()))?;
        }
        std::fs::create_dir_all(&self.snapshots_dir)
            .map_err(|e| format!("cannot create {}: {e}", self.snapshots_dir.display()))?;
        self.backend
            .create_checkpoint(&dir)
            .map_err(|e| e.to_string())?;
        let now = Instant::now();
        self.update(id, |in_flight| {
            in_flight.snapshot = Some(dir);
            in_flight.alignment_ms =
                ms(first_arrival.saturating_duration_since(in_flight.injected));
            in_flight.sync_ms = ms(now.saturating_duration_since(first_arrival));
        });
        Ok(())
    }

    fn run_worker(&self, jobs: Receiver<InFlight>, acks: Sender<u64>) {
        let Some((mut uploader, mut parent)) = lock(&self.start).take() else {
            return;
        };
        for job in jobs.iter() {
            let id = job.id;
            match self.complete(job, &mut uploader, parent) {
                Ok(()) => {
                    parent = Some(id);
                    lock(&self.shared).in_flight = None;
                    // The source may have stopped waiting; nothing to tell then.
                    let _ = acks.send(id);
                }
                Err(error) => {
                    self.fail(format!("checkpoint {id}: {error}"));
                    return;
                }
            }
        }
    }

    /// Uploads, publishes and commits one checkpoint.
    fn complete(
        &self,
        job: InFlight,
        uploader: &mut IncrementalUploader,
        parent: Option<u64>,
    ) -> Result<(), CheckpointError> {
        let id = job.id;
        failpoint::set_checkpoint(id);
        let started = Instant::now();
        let storage = self.store.storage();
        let dir = job
            .snapshot
            .ok_or_else(|| CheckpointError::Other("no state snapshot".into()))?;
        let uploaded = uploader.upload(storage.as_ref(), &dir, id)?;
        if let Some(previous) = lock(&self.kept_snapshot).replace(dir)
            && let Err(error) = std::fs::remove_dir_all(&previous)
        {
            tracing::warn!(dir = %previous.display(), %error, "cannot remove a local snapshot");
        }
        failpoint::hit(failpoint::Failpoint::AfterStateUpload);
        let sinks = job.sinks.unwrap_or_default();
        let mut manifest = Manifest {
            format: MANIFEST_FORMAT,
            id,
            kind: ManifestKind::Completed,
            tenant: self.settings.tenant.clone(),
            pipeline: self.settings.pipeline.clone(),
            open_id: self.open_id.clone(),
            parent,
            timestamp_ms: job.timestamp_ms,
            max_parallelism: self.settings.max_parallelism,
            workers: self.settings.workers,
            source: job.source.unwrap_or_default(),
            state: uploaded.files.clone(),
            sinks,
            stats: CheckpointStats {
                alignment_ms: job.alignment_ms,
                sync_ms: job.sync_ms,
                async_ms: 0.0,
                total_ms: 0.0,
                state_bytes: 0,
                uploaded_bytes: uploaded.bytes,
                uploaded_files: uploaded.count,
                commit_ms: 0.0,
            },
        };
        manifest.stats.state_bytes = manifest.state_bytes();
        manifest.stats.async_ms = ms(started.elapsed());
        manifest.stats.total_ms = ms(job.injected.elapsed());
        if let Err(error) = self.store.publish(&manifest) {
            // Never published (its id was taken): the files uploaded for it
            // alone are garbage. A manifest that was published, or whose
            // publication failed in an unknown way, keeps its files.
            if let CheckpointError::Fenced {
                published: false, ..
            } = error
            {
                for object in &uploaded.new_objects {
                    let _ = storage.delete(object);
                }
            }
            return Err(error);
        }
        failpoint::hit(failpoint::Failpoint::AfterManifest);
        let committing = Instant::now();
        self.commit(&manifest)?;
        manifest.stats.commit_ms = ms(committing.elapsed());
        uploader.retain_only(&manifest.state);
        self.store.collect_garbage(id, self.settings.retained)?;
        self.metrics.record(CheckpointRecord {
            id,
            completed_at_ms: crate::time::now_ms(),
            stats: manifest.stats.clone(),
        });
        tracing::debug!(checkpoint = id, stats = ?manifest.stats, "checkpoint completed");
        Ok(())
    }

    /// Commits every sink's pre-commit of `manifest`: final commits (Kafka
    /// transactions) first, so that a resumable commit never runs for a
    /// checkpoint whose final commit did not happen.
    fn commit(&self, manifest: &Manifest) -> Result<(), CheckpointError> {
        for kind in [CommitKind::Final, CommitKind::Resumable] {
            for committer in self.committers.iter().filter(|c| c.kind() == kind) {
                if let Some(committable) = manifest.sinks.get(committer.name()) {
                    committer.commit(manifest.id, committable)?;
                }
            }
        }
        Ok(())
    }
}

fn ms(duration: std::time::Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
