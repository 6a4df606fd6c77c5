//! Cranelift's per-function compilation cache, on disk.
//!
//! Every Python plugin carries the same CPython interpreter and every
//! JavaScript plugin the same JS engine: of a component's tens of thousands
//! of functions only the plugin's own few differ from the last plugin of its
//! language. The component cache ([`super::ComponentCache`]) keys whole
//! components, so each new plugin (and each edit of one) compiled all of
//! them again. This cache keys single functions, by the SHA-256 Cranelift
//! computes over the function's code and the compiler's settings, so a
//! plugin compiles only the functions this host has not compiled before.
//!
//! Each entry is a file `<key>.fn` sealed with the host key
//! ([`super::host_key`]) and bound to its cache key: a file this host did
//! not write, or one moved to another key's name, is never loaded. Tenants
//! share the cache as they share the component cache; an entry is the
//! compiled form of code that hashes to its key, so sharing one changes no
//! plugin's behaviour. The directory is bounded like the component cache
//! (least recently used first), pruned after each component compiled.

use super::host_key::HostKey;
use super::{mark_used, prune_least_recently_used, store_file};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The most bytes of compiled functions a [`FunctionCache`] keeps (the
/// functions of about ten distinct language runtimes).
pub const DEFAULT_FUNCTION_CACHE_MAX_BYTES: u64 = 1 << 30;

/// File name extension of a cached function.
const EXTENSION: &str = "fn";

/// Compiled functions kept on disk for Cranelift to reuse; give it to the
/// engine with `Config::enable_incremental_compilation`.
#[derive(Debug)]
pub struct FunctionCache {
    dir: PathBuf,
    key: HostKey,
    max_bytes: u64,
    hits: AtomicU64,
    stores: AtomicU64,
    /// Whether the directory exists (created once, at the first store).
    dir_created: OnceLock<bool>,
    /// Whether a refused entry was logged: a new host key refuses every
    /// entry at once, and one line says so.
    refusal_logged: AtomicBool,
}

impl FunctionCache {
    /// A cache in `dir` whose files are sealed with `key`.
    pub(crate) fn new(dir: PathBuf, key: HostKey) -> Self {
        FunctionCache {
            dir,
            key,
            max_bytes: DEFAULT_FUNCTION_CACHE_MAX_BYTES,
            hits: AtomicU64::new(0),
            stores: AtomicU64::new(0),
            dir_created: OnceLock::new(),
            refusal_logged: AtomicBool::new(false),
        }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Functions served from the cache and functions stored in it, since
    /// this cache was created.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.stores.load(Ordering::Relaxed),
        )
    }

    /// Removes the least recently used functions until the directory holds
    /// at most its budget. A prune that fails is logged: a cache a little
    /// over its bound is better than a failed compile.
    pub(crate) fn prune(&self) {
        match prune_least_recently_used(&self.dir, EXTENSION, self.max_bytes) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "could not prune the function cache")
            }
        }
    }

    fn path(&self, key: &[u8]) -> PathBuf {
        // Cranelift's keys are SHA-256 digests already; hashing again keeps
        // file names one length whatever a key is.
        let name = hex::encode(Sha256::digest(key));
        self.dir.join(format!("{name}.{EXTENSION}"))
    }
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let path = self.path(key);
        let sealed = std::fs::read(&path).ok()?;
        let Some(code) = self.key.open(key, sealed) else {
            if !self.refusal_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(path = %path.display(), "a cached function this host did not write (or that was changed): compiling it again (further ones are not logged)");
            }
            return None;
        };
        mark_used(&path);
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(Cow::Owned(code))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let Some(sealed) = self.key.seal(key, &value) else {
            return false;
        };
        let dir_created = *self
            .dir_created
            .get_or_init(|| std::fs::create_dir_all(&self.dir).is_ok());
        if !dir_created {
            return false;
        }
        match store_file(&self.path(key), &sealed) {
            Ok(()) => {
                self.stores.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use wasmtime::{CacheStore as _, Config, Engine, Module};

    /// A module of `functions` functions; `variant` changes only the last.
    fn module_text(functions: usize, variant: i32) -> String {
        let mut text = String::from("(module");
        for i in 0..functions {
            let constant = if i + 1 == functions {
                variant
            } else {
                i as i32
            };
            text.push_str(&format!(
                " (func (export \"f{i}\") (param i32) (result i32) local.get 0 i32.const {constant} i32.mul i32.const 7 i32.add)"
            ));
        }
        text.push(')');
        text
    }

    fn engine_with(cache: &Arc<FunctionCache>) -> Engine {
        let mut config = Config::new();
        config
            .enable_incremental_compilation(cache.clone())
            .unwrap();
        Engine::new(&config).unwrap()
    }

    #[test]
    fn a_second_module_compiles_only_the_functions_it_does_not_share() {
        let dir = tempfile::tempdir().unwrap();
        let key = HostKey::new(dir.path());
        let cache = Arc::new(FunctionCache::new(
            dir.path().join("functions"),
            key.clone(),
        ));
        let engine = engine_with(&cache);
        Module::new(&engine, module_text(20, 100)).unwrap();
        // Twenty functions (and their entry trampolines, alike here, so that
        // all but the first come from the cache already).
        let (_, stores) = cache.counts();
        assert!(stores >= 20, "{stores} functions stored");

        // Another engine (another process) compiling a module that differs
        // in one function reuses the other nineteen.
        let again = Arc::new(FunctionCache::new(dir.path().join("functions"), key));
        let module = Module::new(&engine_with(&again), module_text(20, 200)).unwrap();
        let (hits, stores) = again.counts();
        assert!(hits >= 19, "{hits} hits");
        // The changed function and the few pieces of glue around it.
        assert!((1..5).contains(&stores), "{stores} compiled");
        // And the module behaves as the one it was built from.
        let mut store = wasmtime::Store::new(module.engine(), ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let last = instance
            .get_typed_func::<i32, i32>(&mut store, "f19")
            .unwrap();
        assert_eq!(last.call(&mut store, 3).unwrap(), 607);
        let first = instance
            .get_typed_func::<i32, i32>(&mut store, "f1")
            .unwrap();
        assert_eq!(first.call(&mut store, 3).unwrap(), 10);
    }

    #[test]
    fn a_function_this_host_did_not_write_is_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FunctionCache::new(dir.path().join("functions"), HostKey::new(dir.path()));
        assert!(cache.insert(b"key a", b"compiled a".to_vec()));
        assert_eq!(cache.get(b"key a").as_deref(), Some(&b"compiled a"[..]));
        assert_eq!(cache.get(b"key b"), None);

        // Moved under another key's name: refused.
        std::fs::copy(cache.path(b"key a"), cache.path(b"key b")).unwrap();
        assert_eq!(cache.get(b"key b"), None);

        // Another host's cache over the same directory: refused.
        let other = tempfile::tempdir().unwrap();
        let foreign = FunctionCache::new(dir.path().join("functions"), HostKey::new(other.path()));
        assert_eq!(foreign.get(b"key a"), None);
        assert_eq!(cache.counts(), (1, 1));
    }
}
