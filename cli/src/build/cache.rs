//! Reusing a Python or JavaScript build whose inputs have not changed.
//!
//! componentize-py and componentize-js take 10–30 s per plugin, and their
//! output differs byte for byte from one build of the same inputs to the
//! next (two builds of `plugins/python/pii-redact` in a row give different
//! SHA-256s). So a rebuild costs its own time and also misses the host's
//! compiled-component cache ([`sluice_host::runtime::ComponentCache`], keyed
//! by the component's bytes): another 10–30 s of Cranelift at the next run.
//!
//! A build is therefore served from this cache when everything it reads is
//! unchanged, as cargo does for a fresh crate. The key is a SHA-256 over:
//!
//! * the plugin directory's files (paths and contents), outside `target/`
//!   and hidden directories;
//! * the SDKs and the WIT package embedded in this binary;
//! * the build recipe: the source of this module and its siblings, so a
//!   change to how a language is built never serves an old component;
//! * the toolchain: the tool command and the installed tool's size and
//!   modification time (a reinstall or upgrade changes them).
//!
//! Rust plugins are left to cargo, which already knows when a crate is
//! fresh; C builds take about a second and are not cached.
//!
//! Bounded like the compiled-component cache: after each store the least
//! recently used components go until at most [`DEFAULT_BUILD_CACHE_MAX_BYTES`]
//! are left (a hit marks a component used).

use super::{Language, sdk};
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The build recipe's source: a change to any of it changes every key.
const RECIPE: [&str; 5] = [
    include_str!("mod.rs"),
    include_str!("cache.rs"),
    include_str!("python.rs"),
    include_str!("javascript.rs"),
    include_str!("sdk.rs"),
];

/// The most a [`BuildCache`] keeps, in bytes (Python and JavaScript
/// components are 12-18 MB: about sixty of them).
pub const DEFAULT_BUILD_CACHE_MAX_BYTES: u64 = 1 << 30;

/// A directory of components built from known inputs, one file per key.
#[derive(Debug, Clone)]
pub struct BuildCache {
    dir: PathBuf,
}

impl BuildCache {
    /// A cache in `dir` (created on first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        BuildCache { dir: dir.into() }
    }

    /// The default directory: `$SLUICE_BUILD_CACHE_DIR`, else `builds`
    /// beside the compiled-component cache (`~/.cache/sluice/builds`).
    pub fn default_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("SLUICE_BUILD_CACHE_DIR") {
            return PathBuf::from(dir);
        }
        let components = sluice_host::runtime::ComponentCache::default_dir();
        components
            .parent()
            .map(|parent| parent.join("builds"))
            .unwrap_or_else(|| components.join("builds"))
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether builds of `language` are cached (Python and JavaScript).
    pub fn caches(language: Language) -> bool {
        matches!(language, Language::Python | Language::JavaScript)
    }

    /// The key of a build of the plugin in `plugin_dir`, written in
    /// `language` with `tool` (the command the build runs).
    pub fn key(&self, plugin_dir: &Path, language: Language, tool: &OsStr) -> Result<String> {
        let mut hasher = Sha256::new();
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        field(env!("CARGO_PKG_VERSION").as_bytes());
        field(language.name().as_bytes());
        for text in RECIPE {
            field(text.as_bytes());
        }
        for text in [
            sdk::WIT,
            sdk::PYTHON_SDK,
            sdk::PYTHON_JSON,
            sdk::JS_SDK,
            sdk::JS_JSON,
            sdk::JS_STATE,
            sdk::JS_NO_STATE,
        ] {
            field(text.as_bytes());
        }
        field(tool.as_encoded_bytes());
        field(tool_identity(tool).as_bytes());
        for (relative, contents) in plugin_files(plugin_dir)? {
            field(relative.as_os_str().as_encoded_bytes());
            field(&contents);
        }
        Ok(hex::encode(hasher.finalize()))
    }

    /// The component stored under `key`, if any.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        let path = self.path(key);
        let component = std::fs::read(&path).ok()?;
        sluice_host::runtime::mark_used(&path);
        Some(component)
    }

    /// Stores `component` under `key` (atomically: a concurrent build never
    /// reads half a component), keeping the cache within its bound.
    pub fn put(&self, key: &str, component: &[u8]) -> Result<()> {
        let path = self.path(key);
        sluice_host::runtime::store_bounded(
            &self.dir,
            &path,
            component,
            "wasm",
            DEFAULT_BUILD_CACHE_MAX_BYTES,
        )
        .with_context(|| format!("writing {}", path.display()))
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.wasm"))
    }
}

/// What identifies the installed `tool`: its resolved path, size and
/// modification time (empty if it cannot be found; the build then fails
/// anyway).
fn tool_identity(tool: &OsStr) -> String {
    let Ok(path) = which::which(tool) else {
        return String::new();
    };
    let resolved = std::fs::canonicalize(&path).unwrap_or(path);
    match std::fs::metadata(&resolved) {
        Ok(metadata) => format!(
            "{} {} {:?}",
            resolved.display(),
            metadata.len(),
            metadata.modified().ok()
        ),
        Err(_) => resolved.display().to_string(),
    }
}

/// The files a build of `dir` may read, as (path relative to `dir`,
/// contents), in path order: everything outside `target/` and hidden
/// directories.
fn plugin_files(dir: &Path) -> Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut files = Vec::new();
    let entries = walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|entry| {
            let name = entry.file_name();
            entry.depth() == 0
                || !(name == "target"
                    || name == "__pycache__"
                    || name.as_encoded_bytes().starts_with(b"."))
        });
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        if !entry.file_type().is_file() {
            continue;
        }
        let contents = std::fs::read(entry.path())
            .with_context(|| format!("reading {}", entry.path().display()))?;
        let relative = entry
            .path()
            .strip_prefix(dir)
            .unwrap_or(entry.path())
            .to_path_buf();
        files.push((relative, contents));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_follows_the_plugins_files_and_nothing_under_target() {
        let plugin = tempfile::tempdir().unwrap();
        let cache = BuildCache::new(plugin.path().join("cache"));
        std::fs::write(plugin.path().join("app.py"), "x = 1\n").unwrap();
        let tool = OsStr::new("componentize-py");
        let key = |cache: &BuildCache| cache.key(plugin.path(), Language::Python, tool).unwrap();
        let first = key(&cache);
        assert_eq!(key(&cache), first, "same inputs, same key");

        std::fs::create_dir_all(plugin.path().join("target/sluice")).unwrap();
        std::fs::write(plugin.path().join("target/sluice/app.wasm"), "built").unwrap();
        assert_eq!(key(&cache), first, "build outputs are not inputs");

        std::fs::write(plugin.path().join("helper.py"), "y = 2\n").unwrap();
        let with_module = key(&cache);
        assert_ne!(with_module, first, "a new module is an input");

        std::fs::write(plugin.path().join("app.py"), "x = 2\n").unwrap();
        assert_ne!(key(&cache), with_module, "an edit is an input");
        assert_ne!(
            cache
                .key(plugin.path(), Language::JavaScript, tool)
                .unwrap(),
            key(&cache),
            "the language is an input"
        );
    }

    #[test]
    fn a_stored_component_is_served_by_its_key_only() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BuildCache::new(dir.path().join("builds"));
        assert_eq!(cache.get("abc"), None);
        cache.put("abc", b"component").unwrap();
        assert_eq!(cache.get("abc").as_deref(), Some(&b"component"[..]));
        assert_eq!(cache.get("abd"), None);
    }
}
