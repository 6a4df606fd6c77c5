//! In-memory state: for tests and for pipelines that declare
//! `state_backend = "memory"`.

use super::merge::MergeFolds;
use super::{
    OperatorScope, StateBackend, StateEntry, StateError, StateStore, StateTtl, StateUsage,
    StateWrite,
};
use crate::sync::lock;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Keeps every operator's state in a sorted map in memory.
#[derive(Debug)]
pub struct MemoryStateBackend {
    stores: Mutex<BTreeMap<Vec<u8>, Arc<MemoryStateStore>>>,
    folds: MergeFolds,
}

impl MemoryStateBackend {
    /// An empty backend whose merge operands fold by `folds`.
    pub fn new(folds: MergeFolds) -> Self {
        MemoryStateBackend {
            stores: Mutex::default(),
            folds,
        }
    }
}

impl StateBackend for MemoryStateBackend {
    fn open(
        &self,
        scope: &OperatorScope,
        ttl: Option<StateTtl>,
    ) -> Result<Arc<dyn StateStore>, StateError> {
        let mut stores = lock(&self.stores);
        let store = stores
            .entry(scope.prefix())
            .or_insert_with(|| {
                Arc::new(MemoryStateStore {
                    entries: Mutex::default(),
                    ttl,
                    folds: self.folds,
                })
            })
            .clone();
        Ok(store)
    }
}

/// One operator's in-memory state.
#[derive(Debug)]
pub(super) struct MemoryStateStore {
    entries: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
    ttl: Option<StateTtl>,
    folds: MergeFolds,
}

impl MemoryStateStore {
    fn entries(&self) -> MutexGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        // Each operation is a single map call, so a panic while holding the
        // lock cannot leave the map half-updated: a poisoned lock is safe.
        lock(&self.entries)
    }

    fn stamp(&self, value: &[u8]) -> Vec<u8> {
        super::ttl::stamp(self.ttl.as_ref(), value)
    }

    fn live(&self, stored: Vec<u8>) -> Option<Vec<u8>> {
        super::ttl::live(self.ttl.as_ref(), stored)
    }
}

impl StateStore for MemoryStateStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        let stored = self.entries().get(key).cloned();
        Ok(stored.and_then(|value| self.live(value)))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        let stamped = self.stamp(value);
        self.entries().insert(key.to_vec(), stamped);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<(), StateError> {
        self.entries().remove(key);
        Ok(())
    }

    fn write(&self, writes: Vec<StateWrite>) -> Result<(), StateError> {
        let mut entries = self.entries();
        for write in writes {
            match write {
                StateWrite::Put(key, value) => {
                    entries.insert(key, self.stamp(&value));
                }
                StateWrite::Delete(key) => {
                    entries.remove(&key);
                }
                StateWrite::Merge(key, operand) => {
                    let existing = entries.get(&key).map(Vec::as_slice);
                    let merged = match self.ttl {
                        None => {
                            super::merge::full_merge(&self.folds, existing, [operand.as_slice()])
                        }
                        Some(_) => None,
                    };
                    let Some(merged) = merged else {
                        return Err(StateError {
                            operator: "*".into(),
                            message: "a merge operand does not fold into its key's value".into(),
                        });
                    };
                    entries.insert(key, merged);
                }
            }
        }
        Ok(())
    }

    fn supports_merge(&self) -> bool {
        self.ttl.is_none()
    }

    fn range_limit(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<StateEntry>, StateError> {
        let entries = self.entries();
        Ok(entries
            .range(from.to_vec()..)
            .take_while(|(key, _)| to.is_none_or(|to| key.as_slice() < to))
            .filter_map(|(key, value)| self.live(value.clone()).map(|v| (key.clone(), v)))
            .take(limit)
            .collect())
    }

    fn usage(&self) -> Result<StateUsage, StateError> {
        let entries = self.entries();
        Ok(StateUsage {
            keys: entries.len() as u64,
            bytes: entries
                .iter()
                .map(|(k, v)| (k.len() + v.len()) as u64)
                .sum(),
            disk_bytes: 0,
        })
    }

    fn flush(&self) -> Result<(), StateError> {
        Ok(())
    }

    fn compact(&self) -> Result<(), StateError> {
        if let Some(ttl) = &self.ttl {
            let now = (ttl.clock)();
            self.entries()
                .retain(|_, value| !super::ttl::is_expired(value, now));
        }
        Ok(())
    }
}
