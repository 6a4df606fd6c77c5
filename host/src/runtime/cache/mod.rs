//! The on-disk cache of compiled components.
//!
//! Compiling a component costs 50 ms for a small Rust plugin and up to 30 s
//! for a Python or JavaScript one; loading a compiled artifact costs about a
//! millisecond. Artifacts are keyed by the SHA-256 of the component bytes and
//! by the engine's compatibility hash (wasmtime version and every setting
//! that affects code generation), so a stale artifact is never loaded.
//!
//! Loading compiled code runs it without validation, so an artifact is
//! trusted only if this host wrote it: each one starts with an HMAC-SHA256
//! of its bytes under a key kept in the cache directory ([`host_key`]). An
//! artifact with a wrong or missing tag — written by another host, copied
//! in, tampered with — is compiled again from the component, never loaded.
//!
//! A component that is not in the cache still compiles only the functions
//! the host has not compiled before ([`functions`]): a new Python or
//! JavaScript plugin shares its interpreter's functions with the last one.
//!
//! The cache is bounded: after each store the least recently used
//! artifacts are removed until the directory holds at most
//! [`DEFAULT_CACHE_MAX_BYTES`] of them (a hit marks an artifact used by
//! touching its modification time). Python and JavaScript artifacts are
//! 35-37 MB each, so without a bound every edit of such a plugin would
//! leave one behind for good.

mod functions;
mod host_key;

pub use functions::{DEFAULT_FUNCTION_CACHE_MAX_BYTES, FunctionCache};

use host_key::HostKey;
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wasmtime::Engine;
use wasmtime::component::Component;

/// The most compiled artifacts a [`ComponentCache`] keeps, in bytes (about
/// a hundred Python or JavaScript plugins, thousands of Rust ones).
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 4 << 30;

/// Removes the least recently used files named `*.<extension>` in `dir`
/// until those left total at most `max_bytes`; a file's modification time
/// is its last use ([`mark_used`]). Files that vanish meanwhile (another
/// process pruning) are skipped. Returns how many it removed.
pub fn prune_least_recently_used(
    dir: &Path,
    extension: &str,
    max_bytes: u64,
) -> std::io::Result<usize> {
    let mut files = Vec::new();
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        if path.extension().is_none_or(|ext| ext != extension) {
            continue;
        }
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        total += metadata.len();
        let used = metadata.modified().unwrap_or(std::time::UNIX_EPOCH);
        files.push((used, metadata.len(), path));
    }
    files.sort();
    let mut removed = 0;
    for (_, len, path) in files {
        if total <= max_bytes {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
        total = total.saturating_sub(len);
    }
    Ok(removed)
}

/// Stores `bytes` at `path`, a file in `dir`, then keeps the `*.<extension>`
/// files of `dir` within `max_bytes` ([`prune_least_recently_used`]).
///
/// The bytes go to a temporary file in `dir` that is then renamed, so a
/// reader never sees a partial file and concurrent writers do not clash.
/// A prune that fails is logged, not returned: the file is stored, and a
/// cache a little over its bound is better than a failed build or load.
pub fn store_bounded(
    dir: &Path,
    path: &Path,
    bytes: &[u8],
    extension: &str,
    max_bytes: u64,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    store_file(path, bytes)?;
    if let Err(error) = prune_least_recently_used(dir, extension, max_bytes) {
        tracing::warn!(dir = %dir.display(), %error, "could not prune the cache");
    }
    Ok(())
}

/// Stores `bytes` at `path` through a temporary file in its directory
/// renamed over it: a reader never sees a partial file, and concurrent
/// writers do not clash (two processes building the same plugin at once
/// left a reader an empty component).
pub fn store_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut staged = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut staged, bytes)?;
    staged.persist(path).map_err(|error| error.error)?;
    Ok(())
}

/// Marks the file at `path` as used now (its modification time), for
/// [`prune_least_recently_used`]. Best effort: a read-only cache still
/// serves hits.
pub fn mark_used(path: &Path) {
    if let Ok(file) = std::fs::File::options().write(true).open(path) {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
}

/// Where compiled components are kept.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
    max_bytes: u64,
    key: HostKey,
    functions: Arc<FunctionCache>,
}

/// Whether a load was served from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded a previously compiled artifact.
    Hit,
    /// Compiled now (and stored the artifact).
    Miss,
}

impl ComponentCache {
    /// A cache in `dir` (created on first store), holding at most
    /// [`DEFAULT_CACHE_MAX_BYTES`] of artifacts.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir: PathBuf = dir.into();
        let key = HostKey::new(&dir);
        ComponentCache {
            functions: Arc::new(FunctionCache::new(dir.join("functions"), key.clone())),
            key,
            dir,
            max_bytes: DEFAULT_CACHE_MAX_BYTES,
        }
    }

    /// The same cache holding at most `max_bytes` of artifacts (the least
    /// recently used go first).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// The default cache directory: `$SLUICE_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/sluice/components`, else `~/.cache/sluice/components`.
    pub fn default_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("SLUICE_CACHE_DIR") {
            return PathBuf::from(dir);
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("sluice").join("components")
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The per-function cache in `<dir>/functions`, for the engine that
    /// compiles through this cache (`Config::enable_incremental_compilation`).
    pub fn functions(&self) -> &Arc<FunctionCache> {
        &self.functions
    }

    /// The artifact path for `wasm` compiled by `engine`.
    pub fn artifact_path(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        let content = hex::encode(Sha256::digest(wasm));
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        self.dir
            .join(format!("{content}-{:016x}.cwasm", hasher.finish()))
    }

    /// Loads `wasm` compiled, from the cache or by compiling and storing it.
    pub fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let path = self.artifact_path(engine, wasm);
        if let Some(artifact) = self.key.read_trusted(&path, artifact_context(&path)) {
            // SAFETY: the artifact carries this host's tag: it was written
            // by `store` below from `Component::serialize` of this same
            // engine configuration (the file name carries its
            // compatibility hash) and not changed since.
            if let Ok(component) = unsafe { Component::deserialize(engine, artifact) } {
                mark_used(&path);
                return Ok((component, CacheOutcome::Hit));
            }
            // An artifact of another engine build: fall through and replace it.
        }
        let component = Component::new(engine, wasm)?;
        self.functions.prune();
        if let Err(error) = self.store(&path, &component) {
            tracing::warn!(path = %path.display(), %error, "could not cache compiled component");
        }
        Ok((component, CacheOutcome::Miss))
    }

    fn store(&self, path: &Path, component: &Component) -> wasmtime::Result<()> {
        let artifact = component.serialize()?;
        let sealed = self
            .key
            .seal(artifact_context(path), &artifact)
            .ok_or_else(|| wasmtime::Error::msg("no cache key"))?;
        store_bounded(&self.dir, path, &sealed, "cwasm", self.max_bytes)?;
        Ok(())
    }
}

/// What an artifact's tag binds it to: its file name (the component's
/// digest and the engine's compatibility hash).
fn artifact_context(path: &Path) -> &[u8] {
    path.file_name()
        .map(|name| name.as_encoded_bytes())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_removes_the_least_recently_used_files_down_to_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let at = |seconds| std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
        for (name, used) in [("a", 3), ("b", 1), ("c", 2), ("d", 4)] {
            let path = dir.path().join(format!("{name}.cwasm"));
            std::fs::write(&path, [0u8; 100]).unwrap();
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(at(used)).unwrap();
        }
        std::fs::write(dir.path().join(".host-key"), [0u8; 32]).unwrap();
        // b (used first) then c go; a and d fit in 250 bytes.
        assert_eq!(
            prune_least_recently_used(dir.path(), "cwasm", 250).unwrap(),
            2
        );
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, [".host-key", "a.cwasm", "d.cwasm"]);

        // A use makes a file the last to go.
        mark_used(&dir.path().join("a.cwasm"));
        assert_eq!(
            prune_least_recently_used(dir.path(), "cwasm", 100).unwrap(),
            1
        );
        assert!(dir.path().join("a.cwasm").exists());
        assert!(!dir.path().join("d.cwasm").exists());
    }

    #[test]
    fn a_cache_over_its_budget_drops_the_older_artifact_first() {
        let engine = Engine::default();
        let texts = ["(component)", "(component (core module))"];
        // Each artifact's size, from an unbounded cache.
        let sizes = tempfile::tempdir().unwrap();
        let unbounded = ComponentCache::new(sizes.path());
        let size = |text: &str| {
            unbounded.load(&engine, text.as_bytes()).unwrap();
            std::fs::metadata(unbounded.artifact_path(&engine, text.as_bytes()))
                .unwrap()
                .len()
        };
        let budget = size(texts[0]) + size(texts[1]) - 1;

        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path()).with_max_bytes(budget);
        for text in texts {
            assert_eq!(
                cache.load(&engine, text.as_bytes()).unwrap().1,
                CacheOutcome::Miss
            );
        }
        assert!(!cache.artifact_path(&engine, texts[0].as_bytes()).exists());
        assert_eq!(
            cache.load(&engine, texts[1].as_bytes()).unwrap().1,
            CacheOutcome::Hit
        );
    }

    const COMPONENT: &str = "(component)";

    #[test]
    fn only_artifacts_this_host_wrote_are_loaded() {
        let engine = Engine::default();
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path());
        assert_eq!(
            cache.load(&engine, COMPONENT.as_bytes()).unwrap().1,
            CacheOutcome::Miss
        );
        assert_eq!(
            cache.load(&engine, COMPONENT.as_bytes()).unwrap().1,
            CacheOutcome::Hit
        );
        let path = cache.artifact_path(&engine, COMPONENT.as_bytes());

        // Changed after it was written: compiled again (and replaced).
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            cache.load(&engine, COMPONENT.as_bytes()).unwrap().1,
            CacheOutcome::Miss
        );
        assert_eq!(
            cache.load(&engine, COMPONENT.as_bytes()).unwrap().1,
            CacheOutcome::Hit
        );

        // Another host's artifact (another key): never loaded.
        let other = tempfile::tempdir().unwrap();
        let foreign = ComponentCache::new(other.path());
        foreign.load(&engine, COMPONENT.as_bytes()).unwrap();
        std::fs::copy(foreign.artifact_path(&engine, COMPONENT.as_bytes()), &path).unwrap();
        let fresh = ComponentCache::new(dir.path());
        assert_eq!(
            fresh.load(&engine, COMPONENT.as_bytes()).unwrap().1,
            CacheOutcome::Miss
        );

        // The key is private to its owner.
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join(".host-key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
