//! A state backend opened when an operator first uses its state.
//!
//! `sluice run` keeps state in a temporary RocksDB unless told otherwise.
//! Opening one (a directory, a MANIFEST, background threads) costs ~4-5 ms
//! of CPU, a quarter of the start-up of a pipeline that keeps no state at
//! all: a file copied to a sink, a stateless filter plugin (ADR 0015,
//! eighteenth step). [`LazyStateBackend`] hands each operator a store that
//! opens the backend, then the operator's own store, the first time it is
//! read or written; a store never used costs nothing and reports no state.
//!
//! Only for state that starts empty (a temporary database): a store that
//! was never opened answers [`StateStore::usage`] and [`StateStore::flush`]
//! as an empty one would, which would be wrong for a database holding
//! state from before. Errors opening the backend surface at the first use
//! of state, as any [`StateError`] does (the operator stops the pipeline).

use super::{
    OperatorScope, StateBackend, StateEntry, StateError, StateStore, StateTtl, StateUsage,
    StateWrite,
};
use std::sync::{Arc, OnceLock};

/// Opens the real backend (run at most once).
type OpenBackend = Box<dyn Fn() -> Result<Arc<dyn StateBackend>, StateError> + Send + Sync>;

/// A backend opened by its first operator that uses state; see the module
/// documentation.
#[derive(Clone)]
pub struct LazyStateBackend {
    shared: Arc<Shared>,
}

/// What every store of one [`LazyStateBackend`] shares.
struct Shared {
    open: OpenBackend,
    backend: OnceLock<Result<Arc<dyn StateBackend>, StateError>>,
}

impl Shared {
    fn backend(&self) -> Result<&Arc<dyn StateBackend>, StateError> {
        self.backend
            .get_or_init(|| (self.open)())
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl LazyStateBackend {
    /// A backend that `open` creates on first use. `open` must give a
    /// backend whose stores all start empty.
    pub fn new(
        open: impl Fn() -> Result<Arc<dyn StateBackend>, StateError> + Send + Sync + 'static,
    ) -> Self {
        LazyStateBackend {
            shared: Arc::new(Shared {
                open: Box::new(open),
                backend: OnceLock::new(),
            }),
        }
    }

    /// Whether the backend has been opened (an operator used its state).
    pub fn is_open(&self) -> bool {
        self.shared.backend.get().is_some()
    }
}

impl std::fmt::Debug for LazyStateBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyStateBackend")
            .field("open", &self.is_open())
            .finish()
    }
}

impl StateBackend for LazyStateBackend {
    fn open(
        &self,
        scope: &OperatorScope,
        ttl: Option<StateTtl>,
    ) -> Result<Arc<dyn StateStore>, StateError> {
        Ok(Arc::new(LazyStateStore {
            shared: self.shared.clone(),
            scope: scope.clone(),
            ttl,
            store: OnceLock::new(),
        }))
    }
}

/// One operator's store, opened on its first read or write.
struct LazyStateStore {
    shared: Arc<Shared>,
    scope: OperatorScope,
    ttl: Option<StateTtl>,
    store: OnceLock<Result<Arc<dyn StateStore>, StateError>>,
}

impl LazyStateStore {
    /// The real store, opened (with the backend) if it is not yet.
    fn store(&self) -> Result<&Arc<dyn StateStore>, StateError> {
        self.store
            .get_or_init(|| {
                let opened = self
                    .shared
                    .backend()
                    .and_then(|backend| backend.open(&self.scope, self.ttl.clone()));
                opened.map_err(|mut error| {
                    error.operator.clone_from(&self.scope.operator);
                    error
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The real store if it was opened.
    fn opened(&self) -> Option<&Arc<dyn StateStore>> {
        self.store.get().and_then(|opened| opened.as_ref().ok())
    }
}

impl StateStore for LazyStateStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.store()?.get(key)
    }

    fn multi_get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StateError> {
        self.store()?.multi_get(keys)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.store()?.put(key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<(), StateError> {
        self.store()?.delete(key)
    }

    fn write(&self, writes: Vec<StateWrite>) -> Result<(), StateError> {
        self.store()?.write(writes)
    }

    fn supports_merge(&self) -> bool {
        self.store().is_ok_and(|store| store.supports_merge())
    }

    fn range_limit(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<StateEntry>, StateError> {
        self.store()?.range_limit(from, to, limit)
    }

    /// An unopened store is empty: nothing was ever written to it.
    fn usage(&self) -> Result<StateUsage, StateError> {
        match self.opened() {
            Some(store) => store.usage(),
            None => Ok(StateUsage::default()),
        }
    }

    /// An unopened store has nothing to compact.
    fn compact(&self) -> Result<(), StateError> {
        match self.opened() {
            Some(store) => store.compact(),
            None => Ok(()),
        }
    }

    /// An unopened store has nothing to flush.
    fn flush(&self) -> Result<(), StateError> {
        match self.opened() {
            Some(store) => store.flush(),
            None => Ok(()),
        }
    }
}
