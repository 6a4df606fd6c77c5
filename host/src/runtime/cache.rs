//! The on-disk cache of compiled components.
//!
//! Compiling a component costs 50 ms for a small Rust plugin and up to 30 s
//! for a Python or JavaScript one; loading a compiled artifact costs about a
//! millisecond. Artifacts are keyed by the SHA-256 of the component bytes and
//! by the engine's compatibility hash (wasmtime version and every setting
//! that affects code generation), so a stale artifact is never loaded.

use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where compiled components are kept.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
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
    /// A cache in `dir` (created on first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ComponentCache { dir: dir.into() }
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
        if path.is_file() {
            // SAFETY: artifacts in the cache directory are written only by
            // `store` below from `Component::serialize` of this same engine
            // configuration (the file name carries its compatibility hash).
            if let Ok(component) = unsafe { Component::deserialize_file(engine, &path) } {
                return Ok((component, CacheOutcome::Hit));
            }
            // A corrupt or foreign artifact: fall through and replace it.
        }
        let component = Component::new(engine, wasm)?;
        if let Err(error) = self.store(&path, &component) {
            tracing::warn!(path = %path.display(), %error, "could not cache compiled component");
        }
        Ok((component, CacheOutcome::Miss))
    }

    fn store(&self, path: &Path, component: &Component) -> wasmtime::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let bytes = component.serialize()?;
        // Write to a unique temporary name, then rename: readers never see a
        // partial artifact, and concurrent writers do not clash.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    }
}
