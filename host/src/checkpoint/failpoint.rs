//! Failpoints: crash the process at a chosen step of checkpointing, so that
//! tests can prove that every crash point recovers.
//!
//! Set `SLUICE_CHECKPOINT_FAILPOINT` to one of the names below (optionally
//! `name@N`: only from checkpoint N on). Only this module reads the variable;
//! without it, [`hit`] costs one relaxed load.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable naming the failpoint.
pub const FAILPOINT_ENV: &str = "SLUICE_CHECKPOINT_FAILPOINT";

/// A step of checkpointing or restore where the process can be killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// State files uploaded, manifest not yet published.
    AfterStateUpload,
    /// Manifest published, sinks not yet committed.
    AfterManifest,
    /// In the middle of uploading a state file.
    DuringUpload,
    /// In the middle of a restore (state partly downloaded).
    DuringRestore,
}

impl Failpoint {
    fn name(self) -> &'static str {
        match self {
            Failpoint::AfterStateUpload => "after-state-upload",
            Failpoint::AfterManifest => "after-manifest",
            Failpoint::DuringUpload => "during-upload",
            Failpoint::DuringRestore => "during-restore",
        }
    }
}

/// The checkpoint being taken (for `name@N`).
static CURRENT_CHECKPOINT: AtomicU64 = AtomicU64::new(0);

/// Records which checkpoint is being taken.
pub(crate) fn set_checkpoint(id: u64) {
    CURRENT_CHECKPOINT.store(id, Ordering::Relaxed);
}

fn configured() -> Option<&'static (String, u64)> {
    static CONFIGURED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    CONFIGURED
        .get_or_init(|| {
            let value = std::env::var(FAILPOINT_ENV).ok()?;
            match value.split_once('@') {
                Some((name, from)) => Some((name.to_string(), from.parse().unwrap_or(0))),
                None => Some((value, 0)),
            }
        })
        .as_ref()
}

/// Kills the process (SIGKILL: no destructor, no flush) if `point` is the
/// configured failpoint.
pub(crate) fn hit(point: Failpoint) {
    let Some((name, from)) = configured() else {
        return;
    };
    if name == point.name() && CURRENT_CHECKPOINT.load(Ordering::Relaxed) >= *from {
        eprintln!("failpoint {name}: killing the process");
        // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
