//! The audit log: one JSON line per admin and tenant action (every
//! mutating request) and per refused request (401, 403, 429), in
//! `<state-dir>/audit.jsonl` (mode 0600): when, who, what, the answer.
//! Never a token, a request body or a credential. At 64 MiB the file is
//! rotated to `audit.jsonl.1` (one generation kept).

use serde::Serialize;
use sluice_host::sync::lock;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file size at which the log is rotated.
const ROTATE_AT: u64 = 64 << 20;

/// One action, as written.
#[derive(Debug, Serialize)]
pub struct AuditEntry<'a> {
    /// When the answer was given, ms since the epoch.
    pub at_ms: i64,
    /// `admin`, `tenant`, or `anonymous` (no or an unknown token).
    pub who: &'a str,
    /// The tenant, for a tenant's token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<&'a str>,
    /// The HTTP method.
    pub method: &'a str,
    /// The path (no query string).
    pub path: &'a str,
    /// The answer's status.
    pub status: u16,
    /// `ok` (2xx), `refused` (4xx) or `failed` (5xx).
    pub outcome: &'static str,
}

/// The log file, appended to by every request handler.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl AuditLog {
    /// Opens (or creates) `audit.jsonl` in `state_dir`.
    pub fn open(state_dir: &Path) -> std::io::Result<AuditLog> {
        let path = state_dir.join("audit.jsonl");
        let file = open_append(&path)?;
        Ok(AuditLog {
            path,
            file: Mutex::new(file),
        })
    }

    /// Appends `entry`. A write that fails is reported on the server's
    /// log and does not fail the request.
    pub fn record(&self, entry: &AuditEntry<'_>) {
        let Ok(mut line) = serde_json::to_vec(entry) else {
            return;
        };
        line.push(b'\n');
        let mut file = lock(&self.file);
        if file.metadata().is_ok_and(|m| m.len() >= ROTATE_AT) {
            let rotated = self.path.with_extension("jsonl.1");
            if let Err(error) = std::fs::rename(&self.path, &rotated)
                .and_then(|()| open_append(&self.path))
                .map(|fresh| *file = fresh)
            {
                tracing::warn!(%error, "cannot rotate the audit log");
            }
        }
        if let Err(error) = file.write_all(&line) {
            tracing::warn!(%error, "cannot write the audit log");
        }
    }
}

/// The outcome word of a status.
pub fn outcome(status: u16) -> &'static str {
    match status {
        200..=399 => "ok",
        400..=499 => "refused",
        _ => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_json_lines_in_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::open(dir.path()).unwrap();
        for status in [201, 403] {
            log.record(&AuditEntry {
                at_ms: 1,
                who: "tenant",
                tenant: Some("team-a"),
                method: "POST",
                path: "/api/v1/pipelines",
                status,
                outcome: outcome(status),
            });
        }
        let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["outcome"], "refused");
        assert_eq!(lines[0]["tenant"], "team-a");
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join("audit.jsonl"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
