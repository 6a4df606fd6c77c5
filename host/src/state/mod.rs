//! Keyed state reached by plugins through the `sluice:plugin/state` interface.
//!
//! Every key is prefixed with a [`OperatorScope`] (tenant, pipeline, operator)
//! before it reaches the store, so plugins and pipelines are isolated from
//! one another. The store is a trait so that the in-memory store used now can
//! be replaced by RocksDB without touching plugins or operators.

mod memory;

pub use memory::MemoryStateStore;

use std::sync::Arc;

/// A byte-keyed store shared by every operator of a host process.
pub trait StateStore: Send + Sync {
    /// The value under `key`.
    fn get(&self, key: &[u8]) -> Option<Vec<u8>>;
    /// Stores `value` under `key`.
    fn put(&self, key: &[u8], value: &[u8]);
    /// Removes `key`.
    fn delete(&self, key: &[u8]);
    /// Number of keys whose full key starts with `prefix`, and their total
    /// size in bytes (keys and values).
    fn usage(&self, prefix: &[u8]) -> StateUsage;
}

/// Size of the state under one prefix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateUsage {
    /// Number of keys.
    pub keys: u64,
    /// Bytes of keys plus values.
    pub bytes: u64,
}

/// Who an operator belongs to: tenant, pipeline and operator name. It
/// prefixes the operator's state keys and tags its plugin's logs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperatorScope {
    /// Tenant name.
    pub tenant: String,
    /// Pipeline name.
    pub pipeline: String,
    /// Operator name within the pipeline.
    pub operator: String,
}

impl OperatorScope {
    /// A scope from its three names.
    pub fn new(
        tenant: impl Into<String>,
        pipeline: impl Into<String>,
        operator: impl Into<String>,
    ) -> Self {
        OperatorScope {
            tenant: tenant.into(),
            pipeline: pipeline.into(),
            operator: operator.into(),
        }
    }

    /// The key prefix for this scope: length-prefixed parts, so that no two
    /// scopes can produce overlapping prefixes.
    pub fn prefix(&self) -> Vec<u8> {
        let mut prefix = Vec::new();
        for part in [&self.tenant, &self.pipeline, &self.operator] {
            prefix.extend_from_slice(&(part.len() as u32).to_be_bytes());
            prefix.extend_from_slice(part.as_bytes());
        }
        prefix
    }
}

/// A store seen through one scope: what a plugin instance gets.
#[derive(Clone)]
pub struct ScopedState {
    store: Arc<dyn StateStore>,
    prefix: Vec<u8>,
}

impl ScopedState {
    /// Scopes `store` to `scope`.
    pub fn new(store: Arc<dyn StateStore>, scope: &OperatorScope) -> Self {
        ScopedState {
            store,
            prefix: scope.prefix(),
        }
    }

    fn full_key(&self, key: &[u8]) -> Vec<u8> {
        let mut full = Vec::with_capacity(self.prefix.len() + key.len());
        full.extend_from_slice(&self.prefix);
        full.extend_from_slice(key);
        full
    }

    /// The value under `key` in this scope.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.store.get(&self.full_key(key))
    }

    /// Stores `value` under `key` in this scope.
    pub fn put(&self, key: &[u8], value: &[u8]) {
        self.store.put(&self.full_key(key), value);
    }

    /// Removes `key` from this scope.
    pub fn delete(&self, key: &[u8]) {
        self.store.delete(&self.full_key(key));
    }

    /// Size of this scope's state.
    pub fn usage(&self) -> StateUsage {
        self.store.usage(&self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(tenant: &str, pipeline: &str, operator: &str) -> OperatorScope {
        OperatorScope::new(tenant, pipeline, operator)
    }

    #[test]
    fn scopes_do_not_see_each_other() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStateStore::default());
        let a = ScopedState::new(store.clone(), &scope("t1", "p", "op"));
        let b = ScopedState::new(store.clone(), &scope("t2", "p", "op"));
        // "ab" + "c" must not collide with "a" + "bc".
        let c = ScopedState::new(store.clone(), &scope("t1", "p", "opx"));
        a.put(b"k", b"1");
        assert_eq!(a.get(b"k"), Some(b"1".to_vec()));
        assert_eq!(b.get(b"k"), None);
        assert_eq!(c.get(b"k"), None);
        assert_eq!(a.usage().keys, 1);
        assert_eq!(b.usage().keys, 0);
        a.delete(b"k");
        assert_eq!(a.get(b"k"), None);
    }
}
