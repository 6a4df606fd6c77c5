//! Operator state: RocksDB (or memory) behind one small interface.
//!
//! * A [`StateBackend`] is where a host process keeps state: one RocksDB
//!   instance ([`RocksStateBackend`]) or memory ([`MemoryStateBackend`]).
//! * Each operator opens its own [`StateStore`] from it, identified by its
//!   [`OperatorScope`] (tenant, pipeline, operator): in RocksDB, a column
//!   family. Operators and tenants therefore never share keys.
//! * Keyed state is stored under keys that start with their key group
//!   ([`key_group`]), so that it can later be split and moved.
//! * A store may have a time-to-live (`ttl`): expired values are not
//!   visible and are dropped by compaction.
//!
//! Errors of the backend (I/O, corruption, a full disk) are [`StateError`]s.
//! They are never a record's fault: an operator whose state fails stops the
//! pipeline (to be restarted from its last checkpoint) rather than
//! dead-lettering records. ADR 0006 explains why the plugin-facing WIT
//! `state` interface stays infallible.

mod budget;
pub(crate) mod directory;
pub mod key_group;
mod lazy;
mod memory;
pub(crate) mod merge;
mod rocks;
pub(crate) mod timers;
pub(crate) mod ttl;

pub use budget::{DEFAULT_STATE_MEMORY_BYTES, ROCKSDB_FLOOR_BYTES, RocksMemory, StateMemoryBudget};
pub use lazy::LazyStateBackend;
pub use memory::MemoryStateBackend;
pub use merge::MergeFolds;
pub use rocks::RocksStateBackend;
pub use ttl::{ProcessingClock, StateTtl, system_clock};

use std::sync::Arc;

/// A failure of the state backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("state of operator `{operator}`: {message}")]
pub struct StateError {
    /// The operator whose state failed.
    pub operator: String,
    /// What went wrong.
    pub message: String,
}

/// Where a host process keeps operator state.
pub trait StateBackend: Send + Sync {
    /// Opens (creating it if needed) the state of the operator `scope`,
    /// with an optional time-to-live.
    fn open(
        &self,
        scope: &OperatorScope,
        ttl: Option<StateTtl>,
    ) -> Result<Arc<dyn StateStore>, StateError>;
}

/// A key and its value, as [`StateStore::scan`] returns them.
pub type StateEntry = (Vec<u8>, Vec<u8>);

/// The first key after every key starting with `prefix` (`None`: there is
/// none, the prefix is all `0xFF`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// One write of a [`StateStore::write`] batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateWrite {
    /// Store a value.
    Put(Vec<u8>, Vec<u8>),
    /// Remove a key.
    Delete(Vec<u8>),
    /// Fold an operand (`merge::operand`) into the key's value without
    /// reading it (only where [`StateStore::supports_merge`]).
    Merge(Vec<u8>, Vec<u8>),
}

impl StateWrite {
    /// The key written or removed.
    pub fn key(&self) -> &[u8] {
        match self {
            StateWrite::Put(key, _) | StateWrite::Delete(key) | StateWrite::Merge(key, _) => key,
        }
    }
}

/// The state of one operator: a sorted map of byte keys to byte values.
pub trait StateStore: Send + Sync {
    /// The value under `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError>;
    /// The values under `keys`, in the order of `keys` (RocksDB: one
    /// batched lookup, cheaper than a `get` per key).
    fn multi_get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StateError> {
        keys.iter().map(|key| self.get(key)).collect()
    }
    /// Stores `value` under `key`.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StateError>;
    /// Removes `key`.
    fn delete(&self, key: &[u8]) -> Result<(), StateError>;
    /// Applies `writes` atomically, in order.
    fn write(&self, writes: Vec<StateWrite>) -> Result<(), StateError>;
    /// Whether [`StateWrite::Merge`] works here (not in a store with a
    /// time-to-live: its values carry an expiry stamp that operands do not).
    fn supports_merge(&self) -> bool {
        false
    }
    /// Every live entry with `from <= key < to` (no upper bound if `to` is
    /// `None`), in key order.
    fn range(&self, from: &[u8], to: Option<&[u8]>) -> Result<Vec<StateEntry>, StateError> {
        self.range_limit(from, to, usize::MAX)
    }
    /// The first `limit` live entries with `from <= key < to`, in key
    /// order: a range read in pieces (the window operator's timers).
    fn range_limit(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<StateEntry>, StateError>;
    /// Every live entry whose key starts with `prefix`, in key order.
    fn scan(&self, prefix: &[u8]) -> Result<Vec<StateEntry>, StateError> {
        self.range(prefix, prefix_end(prefix).as_deref())
    }
    /// Every live entry of the key groups `groups` (keyed state keys start
    /// with their key group: one range read).
    fn range_of_key_groups(
        &self,
        groups: key_group::KeyGroupRange,
    ) -> Result<Vec<StateEntry>, StateError> {
        self.range(&groups.start.to_be_bytes(), Some(&groups.end.to_be_bytes()))
    }
    /// Whether the store holds anything in the key groups `groups` (one
    /// seek).
    fn holds_any_of(&self, groups: key_group::KeyGroupRange) -> Result<bool, StateError> {
        let first = self.range_limit(
            &groups.start.to_be_bytes(),
            Some(&groups.end.to_be_bytes()),
            1,
        )?;
        Ok(!first.is_empty())
    }
    /// How much state there is (estimated for RocksDB).
    fn usage(&self) -> Result<StateUsage, StateError>;
    /// Drops expired values and reclaims their space now (compaction does
    /// it in the background anyway).
    fn compact(&self) -> Result<(), StateError>;
    /// Makes everything written so far durable (RocksDB: flushes the
    /// column family's memtables to SST files; its write-ahead log is off,
    /// so operators call this at each checkpoint barrier).
    fn flush(&self) -> Result<(), StateError>;
    /// [`StateStore::flush`], then [`StateStore::usage`]: what an operator
    /// does at a checkpoint barrier.
    fn flush_and_measure(&self) -> Result<StateUsage, StateError> {
        self.flush()?;
        self.usage()
    }
}

/// Size of an operator's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateUsage {
    /// Number of keys (an estimate for RocksDB).
    pub keys: u64,
    /// Bytes of keys plus values (for RocksDB: live data in SST files plus
    /// memtables).
    pub bytes: u64,
    /// Bytes on disk (RocksDB: SST files of the operator's column family;
    /// memtables not flushed yet are not on disk; 0 in memory).
    pub disk_bytes: u64,
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

/// An operator's store as its plugin sees it through the WIT `state`
/// interface: each plugin key is stored under its own key group.
#[derive(Clone)]
pub struct ScopedState {
    store: Arc<dyn StateStore>,
    max_parallelism: u16,
}

impl ScopedState {
    /// The plugin view of `store`.
    pub fn new(store: Arc<dyn StateStore>, max_parallelism: u16) -> Self {
        ScopedState {
            store,
            max_parallelism,
        }
    }

    fn full_key(&self, key: &[u8]) -> Vec<u8> {
        key_group::prefixed(key_group::key_group(key, self.max_parallelism), key)
    }

    /// The value under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.store.get(&self.full_key(key))
    }

    /// Stores `value` under `key`.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.store.put(&self.full_key(key), value)
    }

    /// Removes `key`.
    pub fn delete(&self, key: &[u8]) -> Result<(), StateError> {
        self.store.delete(&self.full_key(key))
    }

    /// Applies plugin-key writes (`None` deletes) atomically.
    pub fn write(
        &self,
        writes: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    ) -> Result<(), StateError> {
        let writes = writes
            .into_iter()
            .map(|(key, value)| {
                let key = self.full_key(&key);
                match value {
                    Some(value) => StateWrite::Put(key, value),
                    None => StateWrite::Delete(key),
                }
            })
            .collect();
        self.store.write(writes)
    }

    /// Size of the state.
    pub fn usage(&self) -> Result<StateUsage, StateError> {
        self.store.usage()
    }

    /// Flushes the state to disk and measures it (at a checkpoint
    /// barrier).
    pub fn flush_and_measure(&self) -> Result<StateUsage, StateError> {
        self.store.flush_and_measure()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::Duration;

    fn scope(tenant: &str, pipeline: &str, operator: &str) -> OperatorScope {
        OperatorScope::new(tenant, pipeline, operator)
    }

    fn backends() -> Vec<(&'static str, Box<dyn StateBackend>)> {
        vec![
            (
                "memory",
                Box::new(MemoryStateBackend::new(crate::window::MERGE_FOLDS)),
            ),
            (
                "rocksdb",
                Box::new(
                    RocksStateBackend::temporary(crate::window::MERGE_FOLDS, Default::default())
                        .expect("temporary RocksDB"),
                ),
            ),
            ("lazy rocksdb", Box::new(lazy_rocksdb())),
        ]
    }

    fn lazy_rocksdb() -> LazyStateBackend {
        LazyStateBackend::new(|| {
            Ok(Arc::new(RocksStateBackend::temporary(
                crate::window::MERGE_FOLDS,
                Default::default(),
            )?))
        })
    }

    #[test]
    fn a_lazy_backend_opens_when_an_operator_first_uses_its_state() {
        let backend = lazy_rocksdb();
        let stateless = backend.open(&scope("t", "p", "filter"), None).unwrap();
        let counting = backend.open(&scope("t", "p", "count"), None).unwrap();
        stateless.flush().unwrap();
        stateless.compact().unwrap();
        assert_eq!(stateless.usage().unwrap(), StateUsage::default());
        assert_eq!(counting.usage().unwrap(), StateUsage::default());
        assert!(!backend.is_open(), "nothing read or wrote state yet");
        counting.put(b"k", b"1").unwrap();
        assert!(backend.is_open());
        assert_eq!(counting.get(b"k").unwrap(), Some(b"1".to_vec()));
        assert_eq!(counting.usage().unwrap().keys, 1);
        // The other operator's store opens in the same database, empty.
        assert_eq!(stateless.get(b"k").unwrap(), None);
        assert_eq!(stateless.usage().unwrap().keys, 0);
    }

    #[test]
    fn a_lazy_backend_that_cannot_open_fails_each_use_of_state() {
        let backend = LazyStateBackend::new(|| {
            Err(StateError {
                operator: "*".into(),
                message: "no space left".into(),
            })
        });
        let store = backend.open(&scope("t", "p", "count"), None).unwrap();
        assert_eq!(store.usage().unwrap(), StateUsage::default());
        let error = store.put(b"k", b"1").unwrap_err();
        assert_eq!(error.operator, "count");
        assert!(error.message.contains("no space left"), "{error}");
        assert!(store.get(b"k").is_err());
        assert!(!store.supports_merge());
    }

    #[test]
    fn scopes_do_not_see_each_other() {
        for (name, backend) in backends() {
            let open = |s: OperatorScope| ScopedState::new(backend.open(&s, None).unwrap(), 128);
            let a = open(scope("t1", "p", "op"));
            let b = open(scope("t2", "p", "op"));
            // "ab" + "c" must not collide with "a" + "bc".
            let c = open(scope("t1", "p", "opx"));
            let d = open(scope("t1", "p/op", ""));
            a.put(b"k", b"1").unwrap();
            assert_eq!(a.get(b"k").unwrap(), Some(b"1".to_vec()), "{name}");
            for other in [&b, &c, &d] {
                assert_eq!(other.get(b"k").unwrap(), None, "{name}");
            }
            assert_eq!(a.usage().unwrap().keys, 1, "{name}");
            assert_eq!(b.usage().unwrap().keys, 0, "{name}");
            a.delete(b"k").unwrap();
            assert_eq!(a.get(b"k").unwrap(), None, "{name}");
        }
    }

    #[test]
    fn scan_and_batches_see_keys_in_order() {
        for (name, backend) in backends() {
            let store = backend.open(&scope("t", "p", "op"), None).unwrap();
            store
                .write(vec![
                    StateWrite::Put(b"a/2".to_vec(), b"2".to_vec()),
                    StateWrite::Put(b"a/1".to_vec(), b"1".to_vec()),
                    StateWrite::Put(b"b/1".to_vec(), b"x".to_vec()),
                    StateWrite::Delete(b"a/2".to_vec()),
                ])
                .unwrap();
            let keys: Vec<Vec<u8>> = store
                .scan(b"a/")
                .unwrap()
                .into_iter()
                .map(|e| e.0)
                .collect();
            assert_eq!(keys, vec![b"a/1".to_vec()], "{name}");
            store
                .write(vec![
                    StateWrite::Put(b"a/3".to_vec(), b"3".to_vec()),
                    StateWrite::Put(b"a/5".to_vec(), b"5".to_vec()),
                    StateWrite::Put(vec![0xFF, 0xFF], b"last".to_vec()),
                ])
                .unwrap();
            let keys = |from: &[u8], to: Option<&[u8]>| -> Vec<Vec<u8>> {
                store
                    .range(from, to)
                    .unwrap()
                    .into_iter()
                    .map(|e| e.0)
                    .collect()
            };
            assert_eq!(
                keys(b"a/1", Some(b"a/5")),
                vec![b"a/1".to_vec(), b"a/3".to_vec()],
                "{name}: the upper bound is exclusive"
            );
            assert_eq!(
                keys(b"b", None),
                vec![b"b/1".to_vec(), vec![0xFF, 0xFF]],
                "{name}"
            );
            assert_eq!(
                store.scan(&[0xFF]).unwrap().len(),
                1,
                "{name}: a prefix of 0xFF bytes has no upper bound"
            );
        }
    }

    #[test]
    fn the_end_of_a_prefix_is_its_successor() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn state_with_a_ttl_survives_reopening_the_database_and_still_expires() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let now = Arc::new(AtomicI64::new(1_000));
        let ttl = StateTtl {
            ttl: Duration::from_millis(100),
            clock: {
                let now = now.clone();
                Arc::new(move || now.load(Ordering::Relaxed))
            },
        };
        {
            let backend =
                RocksStateBackend::open(dir.path(), crate::window::MERGE_FOLDS, Default::default())
                    .expect("open");
            let store = backend
                .open(&scope("t", "p", "dedup"), Some(ttl.clone()))
                .expect("open store");
            store.put(b"seen", b"1").expect("put");
            store.flush().expect("flush");
        }
        let backend =
            RocksStateBackend::open(dir.path(), crate::window::MERGE_FOLDS, Default::default())
                .expect("reopen");
        let store = backend
            .open(&scope("t", "p", "dedup"), Some(ttl))
            .expect("reopen store");
        assert_eq!(store.get(b"seen").expect("get"), Some(b"1".to_vec()));
        now.store(1_200, Ordering::Relaxed);
        assert_eq!(store.get(b"seen").expect("get"), None, "expired");
        store.compact().expect("compact");
        assert_eq!(
            store.usage().expect("usage").keys,
            0,
            "dropped by compaction"
        );
    }

    #[test]
    fn expired_state_is_invisible_and_then_gone() {
        for (name, backend) in backends() {
            let now = Arc::new(AtomicI64::new(1_000));
            let clock: ProcessingClock = {
                let now = now.clone();
                Arc::new(move || now.load(Ordering::Relaxed))
            };
            let ttl = StateTtl {
                ttl: Duration::from_millis(100),
                clock,
            };
            let store = backend.open(&scope("t", "p", "ttl"), Some(ttl)).unwrap();
            for i in 0..1000u32 {
                // Incompressible values, so that sizes on disk mean something.
                let value: Vec<u8> = (0..8u32)
                    .flat_map(|j| {
                        xxhash_rust::xxh3::xxh3_128(&(i * 8 + j).to_be_bytes()).to_be_bytes()
                    })
                    .collect();
                store.put(&i.to_be_bytes(), &value).unwrap();
            }
            store.compact().unwrap();
            let before = store.usage().unwrap();
            assert!(before.bytes > 100_000, "{name}: {before:?}");
            now.store(1_050, Ordering::Relaxed);
            store.put(b"fresh", b"1").unwrap();
            assert!(store.get(&7u32.to_be_bytes()).unwrap().is_some(), "{name}");
            now.store(1_100, Ordering::Relaxed);
            assert_eq!(
                store.get(&7u32.to_be_bytes()).unwrap(),
                None,
                "{name}: expired"
            );
            assert_eq!(store.get(b"fresh").unwrap(), Some(b"1".to_vec()), "{name}");
            assert_eq!(
                store.scan(b"").unwrap().len(),
                1,
                "{name}: scan skips expired"
            );
            store.compact().unwrap();
            let after = store.usage().unwrap();
            assert!(
                after.bytes < before.bytes / 10 && after.keys <= 1,
                "{name}: {before:?} -> {after:?}"
            );
        }
    }
}
