//! The key that proves a cached file was written by this host.
//!
//! Compiled code is loaded without validation, so a cache file is trusted
//! only if it starts with an HMAC-SHA256 tag under a key kept in the cache
//! directory (`.host-key`, mode 0600, created on first use). A file with a
//! wrong or missing tag — written by another host, copied in, tampered
//! with — is treated as absent and compiled again. Both the component cache
//! and the per-function cache ([`super::functions`]) seal their files with
//! the same key.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Length of the tag that starts every sealed file.
const TAG_LEN: usize = 32;

/// The key of one cache directory, read or created on first use. Cheap to
/// clone (clones share the key).
#[derive(Debug, Clone)]
pub(crate) struct HostKey {
    dir: PathBuf,
    key: Arc<OnceLock<Option<[u8; 32]>>>,
}

impl HostKey {
    /// The key kept in `dir/.host-key`.
    pub(crate) fn new(dir: impl Into<PathBuf>) -> Self {
        HostKey {
            dir: dir.into(),
            key: Arc::new(OnceLock::new()),
        }
    }

    /// The key, read or created on first use; `None` if the directory is
    /// not writable (nothing is cached then).
    fn key(&self) -> Option<&[u8; 32]> {
        self.key
            .get_or_init(|| match read_or_create_key(&self.dir) {
                Ok(key) => Some(key),
                Err(error) => {
                    tracing::warn!(dir = %self.dir.display(), %error, "no cache key: compiled code is not cached");
                    None
                }
            })
            .as_ref()
    }

    /// The tag of `parts` (each length-prefixed, so that the split between
    /// them counts), or `None` without a key.
    fn tag(&self, parts: &[&[u8]]) -> Option<Hmac<Sha256>> {
        let mut mac = Hmac::<Sha256>::new_from_slice(self.key()?).ok()?;
        for part in parts {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part);
        }
        Some(mac)
    }

    /// `contents` with the tag of `(context, contents)` in front, ready to
    /// store; `None` without a key. `context` binds the file to what it
    /// is stored under (a function's cache key), so that a sealed file
    /// moved to another name is not trusted there.
    pub(crate) fn seal(&self, context: &[u8], contents: &[u8]) -> Option<Vec<u8>> {
        let tag = self.tag(&[context, contents])?.finalize().into_bytes();
        let mut sealed = Vec::with_capacity(TAG_LEN + contents.len());
        sealed.extend_from_slice(&tag);
        sealed.extend_from_slice(contents);
        Some(sealed)
    }

    /// The contents of `sealed` if its tag is this host's for `context`.
    pub(crate) fn open(&self, context: &[u8], mut sealed: Vec<u8>) -> Option<Vec<u8>> {
        if sealed.len() < TAG_LEN {
            return None;
        }
        let contents = sealed.split_off(TAG_LEN);
        self.tag(&[context, &contents])?
            .verify_slice(&sealed)
            .ok()
            .map(|()| contents)
    }

    /// The contents of the sealed file at `path`, if it exists and carries
    /// this host's tag for `context`; a file with a wrong tag is logged.
    pub(crate) fn read_trusted(&self, path: &Path, context: &[u8]) -> Option<Vec<u8>> {
        let sealed = std::fs::read(path).ok()?;
        let contents = self.open(context, sealed);
        if contents.is_none() {
            tracing::warn!(path = %path.display(), "a cached file this host did not write (or that was changed): compiling again");
        }
        contents
    }
}

/// The key in `dir/.host-key`, created (mode 0600, exclusively: two
/// processes starting at once agree on one) if missing.
fn read_or_create_key(dir: &Path) -> std::io::Result<[u8; 32]> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = dir.join(".host-key");
    let read = |path: &Path| -> std::io::Result<[u8; 32]> {
        let bytes = std::fs::read(path)?;
        bytes.try_into().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the cache key is not 32 bytes",
            )
        })
    };
    if let Ok(key) = read(&path) {
        return Ok(key);
    }
    std::fs::create_dir_all(dir)?;
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
    let temporary = dir.join(format!(".host-key.tmp{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(&key)?;
    file.sync_all()?;
    // Another process may have created it meanwhile: keep the first.
    match std::fs::hard_link(&temporary, &path) {
        Ok(()) => {
            let _ = std::fs::remove_file(&temporary);
            Ok(key)
        }
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = std::fs::remove_file(&temporary);
            read(&path)
        }
        Err(error) => {
            let _ = std::fs::remove_file(&temporary);
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_file_opens_only_under_its_own_context_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let key = HostKey::new(dir.path());
        let sealed = key.seal(b"function a", b"code").unwrap();
        assert_eq!(
            key.open(b"function a", sealed.clone()).as_deref(),
            Some(&b"code"[..])
        );
        // The same bytes stored under another name are not trusted there.
        assert_eq!(key.open(b"function b", sealed.clone()), None);
        // Nor changed bytes, nor a file shorter than a tag.
        let mut changed = sealed.clone();
        *changed.last_mut().unwrap() ^= 1;
        assert_eq!(key.open(b"function a", changed), None);
        assert_eq!(key.open(b"function a", vec![0; 5]), None);
        // Nor another host's file.
        let other = tempfile::tempdir().unwrap();
        assert_eq!(HostKey::new(other.path()).open(b"function a", sealed), None);
    }
}
