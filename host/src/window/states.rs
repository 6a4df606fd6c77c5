//! Window states: one accumulator per key and window, kept in the
//! operator's store (RocksDB by default), with the windows of recently used
//! keys cached in memory.
//!
//! The cache is write-back: changes are written to the store at each
//! checkpoint barrier ([`WindowStates::write_back`]) and when a key is
//! evicted. Past its byte budget, the least recently used keys are evicted
//! (down to 80 % of the budget) at the end of a mini-batch (below). A
//! window not in memory is read back with one point lookup when it is
//! needed, or, for the windows a batch adds to, all with one batched lookup
//! ([`WindowStates::prefetch`]); [`WindowStates::windows_of`] (for
//! sessions, which merge with any window of their key) reads all of a
//! key's windows with one prefix scan. A window only in the store is
//! removed with a blind delete.
//!
//! With a built-in aggregate (and a store without a TTL), a window that is
//! not in memory is not read back to add a batch's records: the batch
//! becomes a partial accumulator written as a merge operand
//! ([`WindowStates::merge_into_store`], [`crate::state::merge`]), and the
//! store folds it into the window's state when the window is read (it
//! fires), flushed or compacted. New windows start that way too: nothing in
//! memory says which windows the store holds (a million keys' worth of
//! such bookkeeping was most of the heap, issue 44), and an operand needs
//! no answer. A window comes into memory when it is read.
//!
//! What a batch does to windows kept in the store is combined in memory
//! over a *mini-batch* (Flink's word for the same buffer in its SQL
//! aggregations) of up to [`super::WindowOperatorOptions::mini_batch_records`]
//! records before the store sees it, so that a window its key's records
//! reach in every batch costs one store access per mini-batch rather than
//! one per batch (each is a memtable search, the larger part of a
//! RocksDB-resident window's cost):
//!
//! * with merges, partial accumulators of the mini-batch are combined and
//!   written as one operand per window ([`WindowStates::write_merges`]);
//! * without (aggregate plugins), the cache is brought back to its budget
//!   only at the end of a mini-batch ([`WindowStates::end_batch`]), so a
//!   window read back for one batch stays for the rest of the mini-batch
//!   and is written once.
//!
//! Nothing reads the store past what waits: every read, delete, eviction
//! and checkpoint writes the partials first, so the mini-batch changes when
//! the store learns of a record, never what it answers. It is bounded:
//! at most [`MINI_BATCH_MAX_WINDOWS`] partials, and the cache at most
//! [`MINI_BATCH_MAX_BYTES`] over its budget, or the mini-batch ends early.

use super::Window;
use super::aggregate::AccumulatorEncoding;
use super::window_map::WindowMap;
use crate::metrics::OperatorMetrics;
use crate::state::key_group::{self, KeyGroupRange};
use crate::state::merge::{self, MergeKind};
use crate::state::{StateError, StateStore, StateUsage, StateWrite};
use foldhash::HashMap;
use std::sync::Arc;

/// One key's window state: the accumulator and how many results it has
/// produced.
#[derive(Debug, Clone)]
pub(super) struct WindowState {
    /// The aggregate's accumulator.
    pub(super) accumulator: Vec<u8>,
    /// Results emitted so far (the next result's `seq`).
    pub(super) emitted: u64,
    /// Changed since it was last written to the store.
    dirty: bool,
    /// Written to the store at least once (so removing it must delete it
    /// there too).
    persisted: bool,
}

impl WindowState {
    /// A new window's state around `accumulator`.
    pub(super) fn new(accumulator: Vec<u8>) -> Self {
        WindowState {
            accumulator,
            emitted: 0,
            dirty: true,
            persisted: false,
        }
    }
}

/// The start of every store key of `key`'s windows: key group (so that
/// key-group ranges are key ranges), key length, key.
fn store_key_prefix(max_parallelism: u16, key: &[u8]) -> Vec<u8> {
    let group = key_group::key_group(key, max_parallelism);
    let mut prefix = Vec::with_capacity(2 + 4 + key.len());
    prefix.extend_from_slice(&group.to_be_bytes());
    prefix.extend_from_slice(&(key.len() as u32).to_be_bytes());
    prefix.extend_from_slice(key);
    prefix
}

/// A window's key in the store: its key's prefix, window start and end.
fn store_key(max_parallelism: u16, key: &[u8], window: &Window) -> Vec<u8> {
    let mut full = store_key_prefix(max_parallelism, key);
    full.extend_from_slice(&window.start.to_be_bytes());
    full.extend_from_slice(&window.end.to_be_bytes());
    full
}

/// The key and window of a store key (`None`: not a window's key).
fn parse_store_key(full: &[u8]) -> Option<(&[u8], Window)> {
    let length = u32::from_be_bytes(full.get(2..6)?.try_into().ok()?) as usize;
    let key = full.get(6..6 + length)?;
    let rest = full.get(6 + length..)?;
    if rest.len() != 16 {
        return None;
    }
    let start = i64::from_be_bytes(rest[..8].try_into().ok()?);
    let end = i64::from_be_bytes(rest[8..].try_into().ok()?);
    Some((key, Window { start, end }))
}

/// A window state as stored: results emitted so far, then the accumulator
/// in its stored form.
fn encode_state(encoding: AccumulatorEncoding, state: &WindowState) -> Vec<u8> {
    let mut value = Vec::with_capacity(8 + state.accumulator.len());
    value.extend_from_slice(&state.emitted.to_le_bytes());
    encoding.write_stored(&state.accumulator, &mut value);
    value
}

/// A window state read back from the store (`None`: not a window state).
fn decode_state(encoding: AccumulatorEncoding, value: &[u8]) -> Option<WindowState> {
    let emitted = u64::from_le_bytes(value.get(..8)?.try_into().ok()?);
    Some(WindowState {
        accumulator: encoding.read_stored(&value[8..]),
        emitted,
        dirty: false,
        persisted: true,
    })
}

/// The stored window state `existing` (`None`: none yet) with the partial
/// accumulators `partials` of a built-in aggregate folded in, in order (a
/// list of them per column when `list`): the fold of window merge operands
/// (see [`crate::state::merge`]). Results emitted so far stay as they were.
/// `None`: something is not a window state or accumulator.
pub(crate) fn fold_window_state(
    list: bool,
    existing: Option<&[u8]>,
    partials: &[&[u8]],
) -> Option<Vec<u8>> {
    let mut accumulators: Vec<&[u8]> = Vec::with_capacity(1 + partials.len());
    let emitted = match existing {
        Some(value) => {
            let emitted = u64::from_le_bytes(value.get(..8)?.try_into().ok()?);
            accumulators.push(&value[8..]);
            emitted
        }
        None => 0,
    };
    accumulators.extend_from_slice(partials);
    let folded = super::builtin::fold_accumulators(list, &accumulators)?;
    let mut value = Vec::with_capacity(8 + folded.len());
    value.extend_from_slice(&emitted.to_le_bytes());
    value.extend_from_slice(&folded);
    Some(value)
}

/// Approximate memory of one window's state, for the cache's budget: what
/// the process's resident memory grows by per cached window, measured
/// (issue 44: a million windows of a count and a sum, `state_cache_mb`
/// 0 against 64; the map entry, the key, the window list and the
/// accumulator are a fraction of it, the hash table's spare capacity and
/// the allocator's pages the rest). 96 bytes made a 128 MiB budget hold
/// ~520 MiB; 400, 58 MiB for 48.
fn window_bytes(key: &[u8], state: &WindowState) -> usize {
    const OVERHEAD: usize = 512;
    OVERHEAD + key.len() + state.accumulator.len()
}

/// The windows of one key held in memory.
#[derive(Debug, Default)]
struct CachedKey {
    windows: WindowMap,
    /// The cache clock when the key was last used (for LRU eviction).
    last_used: u64,
    /// Whether every window the key has is here (its windows in the store
    /// were read: [`WindowStates::windows_of`]); eviction takes a key's
    /// windows all at once.
    complete: bool,
    /// Approximate memory of the windows.
    bytes: usize,
}

/// The window states of one operator instance (see the module docs).
pub(super) struct WindowStates {
    store: Arc<dyn StateStore>,
    metrics: Arc<OperatorMetrics>,
    max_parallelism: u16,
    /// Memory budget of the cache, bytes.
    budget: usize,
    /// Window states of recently used keys.
    cache: HashMap<Vec<u8>, CachedKey>,
    /// Approximate memory of `cache`, bytes.
    cached_bytes: usize,
    /// Advanced by [`WindowStates::tick`]: the LRU clock.
    clock: u64,
    /// How the store folds partial accumulators into a window's state, if
    /// it can for this aggregate (see [`Self::merge_into_store`]).
    merge: Option<MergeKind>,
    /// How accumulators are written to the store.
    encoding: AccumulatorEncoding,
    /// Partial accumulators of windows kept only in the store, not yet
    /// written as merge operands (the mini-batch, see the module docs), by
    /// key.
    partials: HashMap<Vec<u8>, Vec<(Window, Vec<u8>)>>,
    /// Windows in `partials`.
    partial_windows: usize,
    /// Records of the mini-batch so far.
    mini_batch_seen: usize,
    /// Records of a whole mini-batch (0: each batch is one).
    mini_batch_records: usize,
}

/// At most this many windows' partial accumulators wait in a mini-batch
/// (a built-in accumulator is tens of bytes a column: ~1–4 MiB).
pub(super) const MINI_BATCH_MAX_WINDOWS: usize = 16 * 1024;

/// Window states written to the store at a time when many are (at a
/// barrier, an eviction): one write batch of all of them went into one
/// memtable whole, and it and the list of writes doubled a full cache's
/// memory at every checkpoint (issue 44).
const WRITE_CHUNK: usize = 4096;

/// The cache holds at most this much over its budget during a mini-batch.
pub(super) const MINI_BATCH_MAX_BYTES: usize = 4 << 20;

impl WindowStates {
    /// Window states in `store`, keyed under `max_parallelism` key groups,
    /// caching up to `budget` bytes in memory; `merge`: how the aggregate's
    /// partial accumulators fold in the store, if they can (used only when
    /// the store supports merges), combined over mini-batches of
    /// `mini_batch_records`; `encoding`: how accumulators are stored.
    pub(super) fn new(
        store: Arc<dyn StateStore>,
        metrics: Arc<OperatorMetrics>,
        max_parallelism: u16,
        budget: usize,
        merge: Option<MergeKind>,
        encoding: AccumulatorEncoding,
        mini_batch_records: usize,
    ) -> Self {
        let merge = merge.filter(|_| store.supports_merge());
        WindowStates {
            merge,
            encoding,
            partials: HashMap::default(),
            partial_windows: 0,
            mini_batch_seen: 0,
            mini_batch_records,
            store,
            metrics,
            max_parallelism,
            budget,
            cache: HashMap::default(),
            cached_bytes: 0,
            clock: 0,
        }
    }

    /// Every window the store holds for the key groups `groups`, with the
    /// results it emitted: state written before timers were kept in the
    /// store (their timers are set from it, once). A full scan.
    pub(super) fn stored_windows(
        &mut self,
        groups: KeyGroupRange,
    ) -> Result<Vec<(Vec<u8>, Window, u64)>, StateError> {
        let mut windows = Vec::new();
        for (full, value) in self.store.range_of_key_groups(groups)? {
            if let (Some((key, window)), Some(state)) =
                (parse_store_key(&full), decode_state(self.encoding, &value))
            {
                windows.push((key.to_vec(), window, state.emitted));
            }
        }
        Ok(windows)
    }

    /// The store the window states are in.
    pub(super) fn store(&self) -> &dyn StateStore {
        self.store.as_ref()
    }

    /// Advances the LRU clock (once per batch and per watermark).
    pub(super) fn tick(&mut self) {
        self.clock += 1;
    }

    /// Whether `key` has a `window` (read back into memory if it is only in
    /// the store).
    pub(super) fn contains(&mut self, key: &[u8], window: Window) -> Result<bool, StateError> {
        if let Some(cached) = self.cache.get_mut(key) {
            cached.last_used = self.clock;
            if cached.windows.contains_key(&window) {
                return Ok(true);
            }
        }
        self.write_merges()?;
        let stored = self
            .store
            .get(&store_key(self.max_parallelism, key, &window))?;
        match stored
            .as_deref()
            .and_then(|value| decode_state(self.encoding, value))
        {
            Some(state) => {
                self.insert_loaded(key, window, state);
                self.metrics.add_plugin_counter("state_cache_loads", 1);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The state of `key`'s `window` if it is only in the store, read
    /// without keeping it in memory (a window that fires and is dropped at
    /// once: reading it into the cache would only evict others). `None`:
    /// it is in memory, or has no state.
    pub(super) fn read_stored(
        &mut self,
        key: &[u8],
        window: Window,
    ) -> Result<Option<WindowState>, StateError> {
        let cached = self
            .cache
            .get(key)
            .is_some_and(|cached| cached.windows.contains_key(&window));
        if cached {
            return Ok(None);
        }
        self.write_merges()?;
        let stored = self
            .store
            .get(&store_key(self.max_parallelism, key, &window))?;
        Ok(stored
            .as_deref()
            .and_then(|value| decode_state(self.encoding, value)))
    }

    /// Reads the windows of `wanted` that are only in the store back into
    /// memory, with one batched lookup (a batch's windows, before they are
    /// added to; [`Self::contains`] would read them one by one).
    pub(super) fn prefetch<'k>(
        &mut self,
        wanted: impl IntoIterator<Item = (&'k [u8], Window)>,
    ) -> Result<(), StateError> {
        let mut missing: Vec<(&'k [u8], Window)> = Vec::new();
        for (key, window) in wanted {
            let cached = self
                .cache
                .get(key)
                .is_some_and(|cached| cached.windows.contains_key(&window));
            if !cached {
                missing.push((key, window));
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        self.write_merges()?;
        let store_keys: Vec<Vec<u8>> = missing
            .iter()
            .map(|(key, window)| store_key(self.max_parallelism, key, window))
            .collect();
        let found = self.store.multi_get(&store_keys)?;
        let mut loaded = 0;
        for ((key, window), value) in missing.into_iter().zip(found) {
            if let Some(state) = value
                .as_deref()
                .and_then(|value| decode_state(self.encoding, value))
            {
                self.insert_loaded(key, window, state);
                loaded += 1;
            }
        }
        // Counted once per batch: the counter is behind a lock.
        if loaded > 0 {
            self.metrics.add_plugin_counter("state_cache_loads", loaded);
        }
        Ok(())
    }

    /// The state of `key`'s `window`, if it has one, to change: it is
    /// marked as changed (written back at the next barrier).
    pub(super) fn get_mut(
        &mut self,
        key: &[u8],
        window: Window,
    ) -> Result<Option<&mut WindowState>, StateError> {
        if !self.contains(key, window)? {
            return Ok(None);
        }
        let Some(state) = self
            .cache
            .get_mut(key)
            .and_then(|cached| cached.windows.get_mut(&window))
        else {
            return Ok(None);
        };
        state.dirty = true;
        Ok(Some(state))
    }

    /// Takes the accumulator of `key`'s `window` out, to add to it (read
    /// back from the store if it is only there): the state stays, marked
    /// changed, until [`Self::put_accumulator`] gives it back. `None`: the
    /// window has no state.
    pub(super) fn take_accumulator(
        &mut self,
        key: &[u8],
        window: Window,
    ) -> Result<Option<Vec<u8>>, StateError> {
        if let Some(accumulator) = self.take_cached_accumulator(key, window) {
            return Ok(Some(accumulator));
        }
        Ok(self
            .get_mut(key, window)?
            .map(|state| std::mem::take(&mut state.accumulator)))
    }

    /// Whether a partial accumulator can be folded into a window kept only
    /// in the store without reading it ([`Self::merge_into_store`]).
    pub(super) fn merges(&self) -> bool {
        self.merge.is_some()
    }

    /// Whether the memory budget has room for another window.
    pub(super) fn has_room(&self) -> bool {
        self.cached_bytes < self.budget
    }

    /// Of `wanted` windows, those that are nowhere: not in memory, not in
    /// the mini-batch, not in the store (one batched lookup, which reads
    /// nothing into memory). A new window among them can go to memory
    /// without hiding a stored one.
    pub(super) fn absent<'k>(
        &self,
        wanted: impl IntoIterator<Item = (&'k [u8], Window)>,
    ) -> Result<foldhash::HashSet<(&'k [u8], Window)>, StateError> {
        let unknown: Vec<(&'k [u8], Window)> = wanted
            .into_iter()
            .filter(|(key, window)| {
                let cached = self
                    .cache
                    .get(*key)
                    .is_some_and(|cached| cached.windows.contains_key(window));
                let partial = self
                    .partials
                    .get(*key)
                    .is_some_and(|windows| windows.iter().any(|(w, _)| w == window));
                !cached && !partial
            })
            .collect();
        if unknown.is_empty() {
            return Ok(Default::default());
        }
        let store_keys: Vec<Vec<u8>> = unknown
            .iter()
            .map(|(key, window)| store_key(self.max_parallelism, key, window))
            .collect();
        let found = self.store.multi_get(&store_keys)?;
        Ok(unknown
            .into_iter()
            .zip(found)
            .filter(|(_, found)| found.is_none())
            .map(|(wanted, _)| wanted)
            .collect())
    }

    /// The partial accumulator of `key`'s `window` waiting in the
    /// mini-batch, taken out to add a batch's records to (put back with
    /// [`Self::merge_into_store`]). `None`: it has none.
    pub(super) fn take_partial(&mut self, key: &[u8], window: Window) -> Option<Vec<u8>> {
        let windows = self.partials.get_mut(key)?;
        let at = windows.iter().position(|(w, _)| *w == window)?;
        self.partial_windows -= 1;
        Some(windows.swap_remove(at).1)
    }

    /// Folds `partial`, an accumulator of records added to `key`'s
    /// `window`, into the window's state in the store, without
    /// reading it: it waits in the mini-batch and is written as a merge
    /// operand by [`Self::write_merges`]. Only for windows not in memory,
    /// where [`Self::merges`], after [`Self::take_partial`] took the
    /// window's earlier partial.
    pub(super) fn merge_into_store(&mut self, key: &[u8], window: Window, partial: Vec<u8>) {
        if self.merge.is_none() {
            return;
        }
        match self.partials.get_mut(key) {
            Some(windows) => windows.push((window, partial)),
            None => {
                self.partials.insert(key.to_vec(), vec![(window, partial)]);
            }
        }
        self.partial_windows += 1;
        if let Some(cached) = self.cache.get_mut(key) {
            cached.last_used = self.clock;
            cached.complete = false;
        }
    }

    /// Ends a batch of `records` records (0: a watermark): once the
    /// mini-batch is complete (or at its memory bounds), writes its
    /// partial accumulators and evicts the cache down to its budget.
    pub(super) fn end_batch(&mut self, records: usize) -> Result<(), StateError> {
        self.mini_batch_seen += records;
        let due = self.mini_batch_seen >= self.mini_batch_records
            || self.partial_windows >= MINI_BATCH_MAX_WINDOWS
            || self.cached_bytes > self.budget.saturating_add(MINI_BATCH_MAX_BYTES);
        if due {
            self.mini_batch_seen = 0;
            self.write_merges()?;
            self.evict_over_budget()?;
        }
        Ok(())
    }

    /// Writes the mini-batch's partial accumulators to the store as merge
    /// operands (one write batch); before anything reads the store.
    pub(super) fn write_merges(&mut self) -> Result<(), StateError> {
        if self.partial_windows == 0 {
            return Ok(());
        }
        let Some(kind) = self.merge else {
            return Ok(());
        };
        let mut merges = Vec::with_capacity(self.partial_windows);
        let mut stored = Vec::new();
        for (key, windows) in self.partials.drain() {
            for (window, partial) in windows {
                stored.clear();
                self.encoding.write_stored(&partial, &mut stored);
                merges.push(StateWrite::Merge(
                    store_key(self.max_parallelism, &key, &window),
                    merge::operand(kind, &stored),
                ));
            }
        }
        self.partial_windows = 0;
        let written = merges.len() as u64;
        self.store.write(merges)?;
        self.metrics.add_plugin_counter("state_merges", written);
        Ok(())
    }

    /// [`Self::take_accumulator`] for a window in memory; `None`: it is
    /// not in memory (it may be in the store).
    pub(super) fn take_cached_accumulator(
        &mut self,
        key: &[u8],
        window: Window,
    ) -> Option<Vec<u8>> {
        let cached = self.cache.get_mut(key)?;
        cached.last_used = self.clock;
        let state = cached.windows.get_mut(&window)?;
        state.dirty = true;
        Some(std::mem::take(&mut state.accumulator))
    }

    /// Every window of `key` (all read into memory: one prefix scan, unless
    /// the key's windows were all read since it was last evicted).
    pub(super) fn windows_of(&mut self, key: &[u8]) -> Result<Vec<Window>, StateError> {
        let complete = self.cache.get(key).is_some_and(|cached| cached.complete);
        if !complete {
            self.write_merges()?;
            let prefix = store_key_prefix(self.max_parallelism, key);
            for (full, value) in self.store.scan(&prefix)? {
                let Some((_, window)) = parse_store_key(&full) else {
                    continue;
                };
                let cached = self
                    .cache
                    .get(key)
                    .is_some_and(|cached| cached.windows.contains_key(&window));
                if let (false, Some(state)) = (cached, decode_state(self.encoding, &value)) {
                    self.insert(key, window, state);
                    self.metrics.add_plugin_counter("state_cache_loads", 1);
                }
            }
        }
        Ok(match self.cache.get_mut(key) {
            Some(cached) => {
                cached.complete = true;
                cached.last_used = self.clock;
                cached.windows.keys().copied().collect()
            }
            None => Vec::new(),
        })
    }

    /// Puts `key`'s `window` state into memory.
    pub(super) fn insert(&mut self, key: &[u8], window: Window, state: WindowState) {
        let bytes = window_bytes(key, &state);
        let cached = self.cache.entry(key.to_vec()).or_default();
        cached.last_used = self.clock;
        cached.bytes += bytes;
        cached.windows.insert(window, state);
        self.cached_bytes += bytes;
    }

    /// Puts a state read back from the store into memory (the caller
    /// counts it in `state_cache_loads`).
    fn insert_loaded(&mut self, key: &[u8], window: Window, state: WindowState) {
        self.insert(key, window, state);
    }

    /// Replaces the accumulator of `key`'s `window` (in memory; its
    /// previous one was `previous_len` bytes long) and marks it changed.
    pub(super) fn put_accumulator(
        &mut self,
        key: &[u8],
        window: Window,
        accumulator: Vec<u8>,
        previous_len: usize,
    ) {
        let Some(cached) = self.cache.get_mut(key) else {
            return;
        };
        let Some(state) = cached.windows.get_mut(&window) else {
            return;
        };
        let grown = accumulator.len();
        state.accumulator = accumulator;
        state.dirty = true;
        cached.bytes = (cached.bytes + grown).saturating_sub(previous_len);
        self.cached_bytes = (self.cached_bytes + grown).saturating_sub(previous_len);
    }

    /// Removes `key`'s `window` from memory and the store; its state if it
    /// was in memory.
    pub(super) fn remove(
        &mut self,
        key: &[u8],
        window: Window,
    ) -> Result<Option<WindowState>, StateError> {
        let state = match self.cache.get_mut(key) {
            Some(cached) => {
                let state = cached.windows.remove(&window);
                if let Some(state) = &state {
                    let bytes = window_bytes(key, state);
                    cached.bytes = cached.bytes.saturating_sub(bytes);
                    self.cached_bytes = self.cached_bytes.saturating_sub(bytes);
                }
                if cached.windows.is_empty() {
                    self.cached_bytes = self.cached_bytes.saturating_sub(cached.bytes);
                    self.cache.remove(key);
                }
                state
            }
            None => None,
        };
        let stored = match &state {
            Some(state) => state.persisted,
            // Not in memory: only in the store, if anywhere (a blind
            // delete costs no read).
            None => true,
        };
        if stored {
            self.write_merges()?;
            self.store
                .delete(&store_key(self.max_parallelism, key, &window))?;
        }
        Ok(state)
    }

    /// Evicts the least recently used keys, writing their changed windows to
    /// the store, until the cache is down to 80 % of its budget.
    fn evict_over_budget(&mut self) -> Result<(), StateError> {
        if self.cached_bytes <= self.budget {
            return Ok(());
        }
        let target = self.budget / 10 * 8;
        let mut by_age: Vec<(u64, usize, &Vec<u8>)> = self
            .cache
            .iter()
            .map(|(key, cached)| (cached.last_used, cached.bytes, key))
            .collect();
        by_age.sort_unstable_by_key(|(last_used, ..)| *last_used);
        let mut remaining = self.cached_bytes;
        let mut victims = Vec::new();
        for (_, bytes, key) in by_age {
            if remaining <= target {
                break;
            }
            remaining = remaining.saturating_sub(bytes);
            victims.push(key.clone());
        }
        let mut writes = Vec::new();
        let mut evicted = 0;
        for key in victims {
            let Some(cached) = self.cache.remove(&key) else {
                continue;
            };
            for (window, state) in cached.windows.iter() {
                if state.dirty {
                    writes.push(StateWrite::Put(
                        store_key(self.max_parallelism, &key, window),
                        encode_state(self.encoding, state),
                    ));
                }
            }
            if writes.len() >= WRITE_CHUNK {
                self.store.write(std::mem::take(&mut writes))?;
            }
            self.cached_bytes = self.cached_bytes.saturating_sub(cached.bytes);
            evicted += cached.windows.len() as u64;
        }
        if evicted > 0 {
            self.metrics
                .add_plugin_counter("state_cache_evictions", evicted);
        }
        if !writes.is_empty() {
            self.store.write(writes)?;
        }
        Ok(())
    }

    /// Writes every changed window to the store, flushes it to disk and
    /// measures it (at a checkpoint barrier and at the end).
    pub(super) fn write_back(&mut self) -> Result<StateUsage, StateError> {
        self.write_merges()?;
        let mut writes = Vec::new();
        let changed = self
            .cache
            .iter_mut()
            .flat_map(|(key, cached)| cached.windows.iter_mut().map(move |(w, s)| (key, w, s)))
            .filter(|(_, _, s)| s.dirty);
        for (key, window, state) in changed {
            state.dirty = false;
            state.persisted = true;
            let full = store_key(self.max_parallelism, key, window);
            writes.push(StateWrite::Put(full, encode_state(self.encoding, state)));
            if writes.len() >= WRITE_CHUNK {
                self.store.write(std::mem::take(&mut writes))?;
            }
        }
        if !writes.is_empty() {
            self.store.write(writes)?;
        }
        self.store.flush_and_measure()
    }
}
