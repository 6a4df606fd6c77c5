//! What the join keeps per key group in its store, under one key each
//! (after the group's records, before its timers): the last arrival
//! sequence, so that record keys stay unique across runs, and the latest
//! expiry of its records, so that a restored join knows when the records
//! it did not write this run are all gone (from then on its
//! [`super::stored_keys`] filter knows every stored key).
//!
//! A restore reads every key group's entry with one batched lookup: as
//! many keys as key groups, nothing proportional to the state.

use crate::state::key_group::KeyGroupRange;
use crate::state::{StateError, StateStore, StateWrite};
use foldhash::HashMap;

/// Where a buffered record's key has its side, a key group's entry has
/// this.
const GROUP_MARK: [u8; 4] = [0xFF, 0xFF, 0xFF, 0xFE];

/// The store key of key group `group`'s entry.
fn group_key(group: u16) -> Vec<u8> {
    let mut full = group.to_be_bytes().to_vec();
    full.extend_from_slice(&GROUP_MARK);
    full
}

/// One key group's entry.
#[derive(Debug, Clone, Copy)]
struct Group {
    /// The last arrival sequence given to a record.
    last_sequence: u64,
    /// The last sequence of an earlier run: records up to it were not
    /// written by this one.
    restored_sequence: u64,
    /// The latest expiry of a record written.
    max_expiry: i64,
    /// Changed since it was last written.
    changed: bool,
}

impl Group {
    fn encode(&self) -> Vec<u8> {
        let mut value = self.last_sequence.to_be_bytes().to_vec();
        value.extend_from_slice(&self.max_expiry.to_be_bytes());
        value
    }

    /// An entry as stored. A value of 8 bytes (a sequence only) has no
    /// known expiry: its records are never known to be gone.
    fn decode(value: &[u8]) -> Option<Group> {
        let last_sequence = u64::from_be_bytes(value.get(..8)?.try_into().ok()?);
        let max_expiry = match value.get(8..16) {
            Some(bytes) => i64::from_be_bytes(bytes.try_into().ok()?),
            None => i64::MAX,
        };
        Some(Group {
            last_sequence,
            restored_sequence: last_sequence,
            max_expiry,
            changed: false,
        })
    }
}

impl Default for Group {
    fn default() -> Self {
        Group {
            last_sequence: 0,
            restored_sequence: 0,
            max_expiry: i64::MIN,
            changed: false,
        }
    }
}

/// The entries of the key groups one join instance owns.
#[derive(Default)]
pub(super) struct KeyGroups {
    groups: HashMap<u16, Group>,
}

impl KeyGroups {
    /// The entries the store holds for `groups` (one batched lookup), and
    /// the latest expiry of a record they hold (`i64::MIN`: none).
    pub(super) fn restore(
        store: &dyn StateStore,
        groups: KeyGroupRange,
    ) -> Result<(KeyGroups, i64), StateError> {
        let keys: Vec<Vec<u8>> = (groups.start..groups.end).map(group_key).collect();
        let mut restored = KeyGroups::default();
        let mut latest = i64::MIN;
        for (group, value) in (groups.start..groups.end).zip(store.multi_get(&keys)?) {
            if let Some(entry) = value.as_deref().and_then(Group::decode) {
                latest = latest.max(entry.max_expiry);
                restored.groups.insert(group, entry);
            }
        }
        Ok((restored, latest))
    }

    /// The next arrival sequence of a record of key group `group`.
    pub(super) fn next_sequence(&mut self, group: u16) -> u64 {
        let entry = self.groups.entry(group).or_default();
        entry.last_sequence += 1;
        entry.changed = true;
        entry.last_sequence
    }

    /// A record of `group` with `sequence`, expiring at `expiry`, is
    /// written (or was found stored by an earlier version, without an
    /// entry).
    pub(super) fn written(&mut self, group: u16, sequence: u64, expiry: i64) {
        let entry = self.groups.entry(group).or_default();
        entry.last_sequence = entry.last_sequence.max(sequence);
        entry.max_expiry = entry.max_expiry.max(expiry);
        entry.changed = true;
    }

    /// Whether the record of `group` with `sequence` was written by this
    /// run (not restored).
    pub(super) fn written_by_this_run(&self, group: u16, sequence: u64) -> bool {
        self.groups
            .get(&group)
            .is_none_or(|entry| sequence > entry.restored_sequence)
    }

    /// The entries changed since the last call, to write.
    pub(super) fn writes(&mut self) -> impl Iterator<Item = StateWrite> + '_ {
        self.groups
            .iter_mut()
            .filter(|(_, entry)| entry.changed)
            .map(|(group, entry)| {
                entry.changed = false;
                StateWrite::Put(group_key(*group), entry.encode())
            })
    }
}
