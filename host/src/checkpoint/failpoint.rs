//! Failpoints: crash the process at a chosen step of checkpointing, so that
//! tests can prove that every crash point recovers.
//!
//! Set `SLUICE_CHECKPOINT_FAILPOINT` to one of the names below (optionally
//! `name@N`: only from checkpoint N on; `name[@N]:stop` stops the process
//! with SIGSTOP instead of killing it, to make a zombie that a test wakes
//! later). Only this module reads the variable; without it, [`hit`] costs
//! one relaxed load.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable naming the failpoint.
pub const FAILPOINT_ENV: &str = "SLUICE_CHECKPOINT_FAILPOINT";

/// A step of checkpointing or restore where the process can be killed.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failpoint {
    /// State files uploaded, manifest not yet published.
    AfterStateUpload,
    /// Manifest published, sinks not yet committed.
    AfterManifest,
    /// In the middle of uploading a state file.
    DuringUpload,
    /// In the middle of a restore (state partly downloaded).
    DuringRestore,
    /// A sink's commit reached the external system, and the committer
    /// has not returned yet (its outcome unknown to the process).
    DuringSinkCommit,
    /// A bounded source has returned its last record; the final barrier
    /// is not sent yet.
    AtEndOfInput,
    /// The final checkpoint of a bounded run has completed (and the
    /// source has been told); the process has not exited yet.
    AfterFinalCheckpoint,
}

impl Failpoint {
    fn name(self) -> &'static str {
        match self {
            Failpoint::AfterStateUpload => "after-state-upload",
            Failpoint::AfterManifest => "after-manifest",
            Failpoint::DuringUpload => "during-upload",
            Failpoint::DuringRestore => "during-restore",
            Failpoint::DuringSinkCommit => "during-sink-commit",
            Failpoint::AtEndOfInput => "at-end-of-input",
            Failpoint::AfterFinalCheckpoint => "after-final-checkpoint",
        }
    }
}

/// The checkpoint being taken (for `name@N`).
static CURRENT_CHECKPOINT: AtomicU64 = AtomicU64::new(0);

/// Records which checkpoint is being taken.
pub(crate) fn set_checkpoint(id: u64) {
    CURRENT_CHECKPOINT.store(id, Ordering::Relaxed);
}

/// The configured failpoint: its name, the first checkpoint it applies
/// to, and whether it stops (SIGSTOP) rather than kills.
struct Configured {
    name: String,
    from: u64,
    stop: bool,
}

fn configured() -> Option<&'static Configured> {
    static CONFIGURED: OnceLock<Option<Configured>> = OnceLock::new();
    CONFIGURED
        .get_or_init(|| {
            let value = std::env::var(FAILPOINT_ENV).ok()?;
            let (point, stop) = match value.strip_suffix(":stop") {
                Some(point) => (point, true),
                None => (value.as_str(), false),
            };
            let (name, from) = match point.split_once('@') {
                Some((name, from)) => (name, from.parse().unwrap_or(0)),
                None => (point, 0),
            };
            Some(Configured {
                name: name.to_string(),
                from,
                stop,
            })
        })
        .as_ref()
}

/// Kills the process (SIGKILL: no destructor, no flush), or stops it
/// (SIGSTOP), if `point` is the configured failpoint.
pub(crate) fn hit(point: Failpoint) {
    let Some(configured) = configured() else {
        return;
    };
    if configured.name != point.name()
        || CURRENT_CHECKPOINT.load(Ordering::Relaxed) < configured.from
    {
        return;
    }
    let (signal, what) = if configured.stop {
        (libc::SIGSTOP, "stopping")
    } else {
        (libc::SIGKILL, "killing")
    };
    eprintln!("failpoint {}: {what} the process", configured.name);
    // raise(3) directs the signal at this thread, which therefore stops (or
    // dies) before it returns; kill(2) on the pid would let the kernel pick
    // another thread and this one run on for a while.
    // SAFETY: raise(3) has no memory-safety preconditions.
    unsafe {
        libc::raise(signal);
    }
}
