//! An in-memory [`StateStore`]: the default until RocksDB state lands.

use super::{StateStore, StateUsage};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A sorted in-memory map behind a mutex.
#[derive(Debug, Default)]
pub struct MemoryStateStore {
    entries: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl MemoryStateStore {
    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        // A panic while holding the lock cannot leave the map half-updated
        // (each operation is a single map call), so a poisoned lock is safe.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl StateStore for MemoryStateStore {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.entries().get(key).cloned()
    }

    fn put(&self, key: &[u8], value: &[u8]) {
        self.entries().insert(key.to_vec(), value.to_vec());
    }

    fn delete(&self, key: &[u8]) {
        self.entries().remove(key);
    }

    fn usage(&self, prefix: &[u8]) -> StateUsage {
        let entries = self.entries();
        let mut usage = StateUsage::default();
        for (key, value) in entries
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            usage.keys += 1;
            usage.bytes += (key.len() + value.len()) as u64;
        }
        usage
    }
}
