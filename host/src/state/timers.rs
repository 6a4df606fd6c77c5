//! Event-time timers kept in an operator's store (RocksDB by default)
//! beside its state rather than in memory, as Flink keeps its timers in
//! RocksDB: a window's *fire* and *cleanup* timers, a buffered join
//! record's expiry. A million keys' windows held two in-memory entries each
//! (issue 44); here memory holds, per key group and kind, only the earliest
//! time a timer may have.
//!
//! A timer is a time, a key and a *namespace* (Flink's word: what of the
//! key's state it is for, a window or a buffered record), of some *kind*.
//!
//! * **Layout**: a timer is a key of the operator's store in its key's key
//!   group: key group, a mark where the operator's own state keys have
//!   something else (a window state key its key's length, a join record
//!   its side: no key is 4 GiB long, so a group's timers sort after its
//!   state), the kind, the time (sign bit flipped, so that times sort as
//!   numbers), then the key (escaped, so that keys sort as bytes whatever
//!   their lengths) and namespace. A key group's timers of one kind are one
//!   range, ordered by time, key and namespace.
//! * **Writes** wait in memory until the end of the batch, a barrier or
//!   the next read ([`Timers::flush`]); setting a timer twice is one key
//!   written twice.
//! * **Firing**: [`Timers::next_due`] merges the due ranges of every key
//!   group whose earliest time the watermark passed, read a few hundred
//!   timers at a time, in the order of time, key and namespace (the order
//!   of one in-memory queue: results come out as they did).
//! * **Restore** reads the first timer of each key group and kind (one
//!   seek each): nothing proportional to the state.

use crate::state::key_group::{self, KeyGroupRange};
use crate::state::{StateError, StateStore, StateWrite, prefix_end};
use foldhash::HashMap;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};
use std::sync::Arc;

/// The kinds of timer an operator sets (what a timer does when the
/// watermark passes it).
pub(crate) trait TimerKind:
    Copy + Eq + Ord + std::hash::Hash + std::fmt::Debug + 'static
{
    /// Every kind.
    const ALL: &'static [Self];
    /// The byte that files the kind's timers apart in the store.
    fn tag(self) -> u8;
}

/// What of a key's state a timer is for (a window, a buffered record),
/// stored as 16 bytes that sort as the namespaces do.
pub(crate) trait TimerNamespace: Clone + Ord + std::fmt::Debug {
    /// The stored form.
    fn to_bytes(&self) -> [u8; 16];
    /// The namespace of its stored form.
    fn from_bytes(bytes: [u8; 16]) -> Self;
}

/// Where a window state key has its key's length, a timer key has this.
const TIMER_MARK: [u8; 4] = [0xFF; 4];

/// Timers of one key group read at a time while firing.
const CHUNK: usize = 256;

/// Timer writes that wait at most while firing (a watermark may remove a
/// million timers).
const MAX_PENDING: usize = 16 * 1024;

/// The start of every timer key of `kind` in key group `group`.
fn queue_prefix(group: u16, kind: impl TimerKind) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(7 + 8 + 4 + 32 + 16);
    prefix.extend_from_slice(&group.to_be_bytes());
    prefix.extend_from_slice(&TIMER_MARK);
    prefix.push(kind.tag());
    prefix
}

/// A time as bytes that sort as the numbers do.
fn time_bytes(time: i64) -> [u8; 8] {
    ((time as u64) ^ (1 << 63)).to_be_bytes()
}

/// The first timer key of `group` and `kind` at or after `time`.
fn queue_position(group: u16, kind: impl TimerKind, time: i64) -> Vec<u8> {
    let mut position = queue_prefix(group, kind);
    position.extend_from_slice(&time_bytes(time));
    position
}

/// The store key of a timer. The key is escaped (a 0 byte becomes 0, 255)
/// and ends with 0, 0, so that timers of one time sort by key as the keys
/// do (`k3` < `k34` < `k4`), whatever their lengths, then by namespace.
fn timer_key<N: TimerNamespace>(
    group: u16,
    kind: impl TimerKind,
    time: i64,
    key: &[u8],
    namespace: &N,
) -> Vec<u8> {
    let mut full = queue_position(group, kind, time);
    for &byte in key {
        full.push(byte);
        if byte == 0 {
            full.push(0xFF);
        }
    }
    full.extend_from_slice(&[0, 0]);
    full.extend_from_slice(&namespace.to_bytes());
    full
}

/// A timer: its time, key and namespace.
pub(crate) type Timer<N> = (i64, Vec<u8>, N);

/// The time, key and namespace of a timer's store key (`None`: not one).
fn parse_timer_key<N: TimerNamespace>(full: &[u8]) -> Option<Timer<N>> {
    let rest = full.get(7..)?;
    let time = (u64::from_be_bytes(rest.get(..8)?.try_into().ok()?) ^ (1 << 63)) as i64;
    let mut key = Vec::new();
    let mut at = 8;
    loop {
        match (*rest.get(at)?, rest.get(at + 1).copied()) {
            (0, Some(0)) => break,
            (0, Some(0xFF)) => {
                key.push(0);
                at += 2;
            }
            (0, _) => return None,
            (byte, _) => {
                key.push(byte);
                at += 1;
            }
        }
    }
    let namespace: [u8; 16] = rest.get(at + 2..)?.try_into().ok()?;
    Some((time, key, N::from_bytes(namespace)))
}

/// The due timers of one key group being fired: read in chunks.
struct DueQueue<N> {
    /// Read and not yet handed out, in order.
    read: VecDeque<Timer<N>>,
    /// Where the next chunk starts (after the last timer read).
    next_from: Vec<u8>,
    /// Whether every due timer of the group has been read.
    exhausted: bool,
}

/// A firing in progress: the watermark it fires for and, per key group,
/// what is left of its due timers; `heap` holds each group's next timer.
struct Firing<K, N> {
    kind: K,
    watermark: i64,
    queues: HashMap<u16, DueQueue<N>>,
    heap: BinaryHeap<Reverse<(Timer<N>, u16)>>,
}

/// The timers of one operator instance, of kinds `K` for namespaces `N`
/// (see the module docs).
pub(crate) struct Timers<K, N> {
    store: Arc<dyn StateStore>,
    max_parallelism: u16,
    groups: KeyGroupRange,
    /// Per kind and key group that may hold timers, the earliest time one
    /// may have: never later than its earliest timer (removing a timer
    /// leaves it, until the group's timers are next read).
    heads: BTreeSet<(i64, K, u16)>,
    /// The entry of `heads` of each kind and key group that has one.
    head_of: HashMap<(K, u16), i64>,
    /// Timer writes not yet in the store.
    pending: Vec<StateWrite>,
    /// The firing in progress, if any.
    firing: Option<Firing<K, N>>,
}

impl<K: TimerKind, N: TimerNamespace> Timers<K, N> {
    /// The timers in `store` of the key groups `groups` (of
    /// `max_parallelism`); [`Self::restore`] finds those already there.
    pub(crate) fn new(
        store: Arc<dyn StateStore>,
        max_parallelism: u16,
        groups: KeyGroupRange,
    ) -> Self {
        Timers {
            store,
            max_parallelism,
            groups,
            heads: BTreeSet::new(),
            head_of: HashMap::default(),
            pending: Vec::new(),
            firing: None,
        }
    }

    /// Finds the earliest timer of each key group and kind the store holds
    /// (left by an earlier run on the same state): one seek each. Returns
    /// how many key groups and kinds have timers.
    pub(crate) fn restore(&mut self) -> Result<usize, StateError> {
        for group in self.groups.start..self.groups.end {
            for &kind in K::ALL {
                self.read_head(group, kind, i64::MIN)?;
            }
        }
        Ok(self.head_of.len())
    }

    /// Sets the `kind` timer of `key`'s `namespace` at `time`.
    pub(crate) fn set(&mut self, kind: K, key: &[u8], namespace: &N, time: i64) {
        let group = key_group::key_group(key, self.max_parallelism);
        self.pending.push(StateWrite::Put(
            timer_key(group, kind, time, key, namespace),
            Vec::new(),
        ));
        match self.head_of.get(&(kind, group)) {
            Some(&head) if head <= time => {}
            head => {
                if let Some(&head) = head {
                    self.heads.remove(&(head, kind, group));
                }
                self.heads.insert((time, kind, group));
                self.head_of.insert((kind, group), time);
            }
        }
    }

    /// Removes the `kind` timer of `key`'s `namespace` at `time` (if set).
    pub(crate) fn remove(&mut self, kind: K, key: &[u8], namespace: &N, time: i64) {
        let group = key_group::key_group(key, self.max_parallelism);
        self.pending.push(StateWrite::Delete(timer_key(
            group, kind, time, key, namespace,
        )));
    }

    /// Writes the timers set and removed since the last flush (at the end
    /// of a batch, before a checkpoint, before timers are read).
    pub(crate) fn flush(&mut self) -> Result<(), StateError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.store.write(std::mem::take(&mut self.pending))
    }

    /// The next `kind` timer due at `watermark` (its time at or before it),
    /// in the order of time, key and namespace, removed as it is handed out;
    /// `None` once there is none. Call until `None` for one watermark and
    /// kind, setting no timer meanwhile.
    pub(crate) fn next_due(
        &mut self,
        kind: K,
        watermark: i64,
    ) -> Result<Option<Timer<N>>, StateError> {
        let started = self
            .firing
            .as_ref()
            .is_some_and(|f| f.kind == kind && f.watermark == watermark);
        if !started {
            self.start_firing(kind, watermark)?;
        }
        if self.pending.len() >= MAX_PENDING {
            // Timers already handed out: the next reads start after them.
            self.flush()?;
        }
        let Some(mut firing) = self.firing.take() else {
            return Ok(None);
        };
        let Some(Reverse((timer, group))) = firing.heap.pop() else {
            return Ok(None);
        };
        self.pending.push(StateWrite::Delete(timer_key(
            group, kind, timer.0, &timer.1, &timer.2,
        )));
        let next = match firing.queues.get_mut(&group) {
            Some(queue) => self.next_of(queue, group, kind, watermark)?,
            None => None,
        };
        match next {
            Some(next) => firing.heap.push(Reverse((next, group))),
            None => {
                firing.queues.remove(&group);
                // Every due timer of the group is out: its earliest is now
                // after the watermark.
                self.read_head(group, kind, watermark.saturating_add(1))?;
            }
        }
        self.firing = Some(firing);
        Ok(Some(timer))
    }

    /// Starts firing the `kind` timers due at `watermark`: the due key
    /// groups' first chunks.
    fn start_firing(&mut self, kind: K, watermark: i64) -> Result<(), StateError> {
        self.flush()?;
        let due: Vec<(i64, u16)> = self
            .heads
            .iter()
            .take_while(|(time, ..)| *time <= watermark)
            .filter(|(_, k, _)| *k == kind)
            .map(|(head, _, group)| (*head, *group))
            .collect();
        let mut firing = Firing {
            kind,
            watermark,
            queues: HashMap::default(),
            heap: BinaryHeap::new(),
        };
        for (head, group) in due {
            // From the head, not the start of the queue: the timers fired
            // before it are tombstones until compaction drops them, and a
            // read from the start stepped over every one of them (a join
            // expiring records at every watermark: 5x its CPU, issue 44).
            let mut queue = DueQueue {
                read: VecDeque::new(),
                next_from: queue_position(group, kind, head),
                exhausted: false,
            };
            match self.next_of(&mut queue, group, kind, watermark)? {
                Some(first) => {
                    firing.heap.push(Reverse((first, group)));
                    firing.queues.insert(group, queue);
                }
                // Its timers were removed: nothing is due after all.
                None => self.read_head(group, kind, watermark.saturating_add(1))?,
            }
        }
        self.firing = Some(firing);
        Ok(())
    }

    /// The next due timer of `queue` (reading its next chunk if needed).
    fn next_of(
        &self,
        queue: &mut DueQueue<N>,
        group: u16,
        kind: K,
        watermark: i64,
    ) -> Result<Option<Timer<N>>, StateError> {
        if queue.read.is_empty() && !queue.exhausted {
            let end = match watermark.checked_add(1) {
                Some(after) => Some(queue_position(group, kind, after)),
                None => prefix_end(&queue_prefix(group, kind)),
            };
            let chunk = self
                .store
                .range_limit(&queue.next_from, end.as_deref(), CHUNK)?;
            queue.exhausted = chunk.len() < CHUNK;
            if let Some((last, _)) = chunk.last() {
                queue.next_from = last.clone();
                queue.next_from.push(0);
            }
            queue
                .read
                .extend(chunk.iter().filter_map(|(full, _)| parse_timer_key(full)));
        }
        Ok(queue.read.pop_front())
    }

    /// Sets the head of `group` and `kind` to its first timer at or after
    /// `from` (none: the group has no such timer).
    fn read_head(&mut self, group: u16, kind: K, from: i64) -> Result<(), StateError> {
        if let Some(head) = self.head_of.remove(&(kind, group)) {
            self.heads.remove(&(head, kind, group));
        }
        let first = self.store.range_limit(
            &queue_position(group, kind, from),
            prefix_end(&queue_prefix(group, kind)).as_deref(),
            1,
        )?;
        if let Some((time, ..)) = first
            .first()
            .and_then(|(full, _)| parse_timer_key::<N>(full))
        {
            self.heads.insert((time, kind, group));
            self.head_of.insert((kind, group), time);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{MemoryStateBackend, OperatorScope, StateBackend};
    use crate::window::Window;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    enum TimerKind {
        Fire,
        Cleanup,
    }

    impl super::TimerKind for TimerKind {
        const ALL: &'static [Self] = &[TimerKind::Fire, TimerKind::Cleanup];
        fn tag(self) -> u8 {
            self as u8
        }
    }

    type Timers = super::Timers<TimerKind, Window>;

    fn store() -> Arc<dyn StateStore> {
        MemoryStateBackend::new(crate::window::MERGE_FOLDS)
            .open(&OperatorScope::new("t", "p", "w"), None)
            .expect("store")
    }

    fn window(start: i64) -> Window {
        Window {
            start,
            end: start + 10,
        }
    }

    fn drain(timers: &mut Timers, kind: TimerKind, watermark: i64) -> Vec<(i64, Vec<u8>)> {
        let mut due = Vec::new();
        while let Some((time, key, _)) = timers.next_due(kind, watermark).expect("due") {
            due.push((time, key));
        }
        due
    }

    #[test]
    fn timers_fire_in_order_of_time_and_key_across_key_groups_and_only_once() {
        let store = store();
        let groups = KeyGroupRange { start: 0, end: 128 };
        let mut timers = Timers::new(store.clone(), 128, groups);
        let mut expected = Vec::new();
        // More timers than a chunk, over many key groups, times out of order.
        for i in 0..2_000i64 {
            let key = format!("k{}", i % 700).into_bytes();
            let time = (i * 7919) % 1_000 - 500;
            timers.set(TimerKind::Fire, &key, &window(time), time);
            expected.push((time, key));
        }
        timers.set(TimerKind::Cleanup, b"k1", &window(0), 5);
        timers.flush().expect("flush");
        expected.sort();
        expected.dedup();
        let early: Vec<_> = expected.iter().filter(|(t, _)| *t <= 0).cloned().collect();
        assert_eq!(drain(&mut timers, TimerKind::Fire, 0), early);
        assert!(drain(&mut timers, TimerKind::Fire, 0).is_empty(), "once");
        // A restore finds what is left, from the store alone.
        let mut restored = Timers::new(store, 128, groups);
        assert!(restored.restore().expect("restore") > 0);
        let late: Vec<_> = expected.iter().filter(|(t, _)| *t > 0).cloned().collect();
        assert_eq!(drain(&mut restored, TimerKind::Fire, i64::MAX), late);
        assert_eq!(
            drain(&mut restored, TimerKind::Cleanup, i64::MAX),
            [(5, b"k1".to_vec())]
        );
    }

    #[test]
    fn a_removed_timer_does_not_fire_and_a_group_elsewhere_is_not_read() {
        let store = store();
        let mut timers = Timers::new(store, 128, KeyGroupRange { start: 0, end: 128 });
        timers.set(TimerKind::Fire, b"a", &window(0), 10);
        timers.set(TimerKind::Fire, b"b", &window(0), 10);
        timers.remove(TimerKind::Fire, b"a", &window(0), 10);
        timers.set(TimerKind::Fire, b"c", &window(100), 100);
        assert_eq!(
            drain(&mut timers, TimerKind::Fire, 50),
            [(10, b"b".to_vec())]
        );
        assert_eq!(
            drain(&mut timers, TimerKind::Fire, 100),
            [(100, b"c".to_vec())]
        );
    }

    #[test]
    fn timer_keys_sort_after_their_groups_window_keys_and_by_time() {
        let a = timer_key(3, TimerKind::Fire, -5, b"k", &window(0));
        let b = timer_key(3, TimerKind::Fire, 7, b"a", &window(0));
        assert!(a < b, "negative times first");
        assert_eq!(
            parse_timer_key::<Window>(&a),
            Some((-5, b"k".to_vec(), window(0)))
        );
        // Keys of one time sort as keys do, whatever their lengths and
        // bytes (0 included).
        let mut keys: Vec<Vec<u8>> = vec![
            b"k34".to_vec(),
            b"k4".to_vec(),
            b"k3".to_vec(),
            vec![b'k', 0],
            vec![b'k', 0, 0],
            vec![b'k', 0, 1],
            b"k".to_vec(),
            vec![b'k', 0xFF],
        ];
        let mut encoded: Vec<Vec<u8>> = keys
            .iter()
            .map(|key| timer_key(3, TimerKind::Fire, 7, key, &window(0)))
            .collect();
        keys.sort();
        encoded.sort();
        let decoded: Vec<Vec<u8>> = encoded
            .iter()
            .map(|full| parse_timer_key::<Window>(full).expect("a timer key").1)
            .collect();
        assert_eq!(decoded, keys);
        // A window state key of group 3: group, key length, key, window.
        // (Timers follow: the mark is where a state key has its length.)
        let mut state = 3u16.to_be_bytes().to_vec();
        state.extend_from_slice(&(1u32).to_be_bytes());
        state.extend_from_slice(b"k");
        assert!(state < a);
        assert!(a < 4u16.to_be_bytes().to_vec());
    }
}
