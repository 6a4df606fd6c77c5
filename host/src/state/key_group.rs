//! Key groups: the unit in which keyed state is partitioned, as in Flink.
//!
//! Every key hashes to one of `max_parallelism` key groups; each worker owns
//! a contiguous range of them, and every state key starts with its key group
//! (two bytes, big-endian), so that a range of key groups is a contiguous
//! range of keys that can later be split off and moved to another worker or
//! host. `max_parallelism` (default 128) is therefore fixed for the life of
//! the state: it bounds how far a pipeline can scale out.

use xxhash_rust::xxh3::xxh3_64;

/// The default number of key groups.
pub const DEFAULT_MAX_PARALLELISM: u16 = 128;

/// The most key groups a pipeline may have (Flink's bound, too).
pub const MAX_KEY_GROUPS: u16 = 32_768;

/// The key group of `key`.
pub fn key_group(key: &[u8], max_parallelism: u16) -> u16 {
    (xxh3_64(key) % u64::from(max_parallelism.max(1))) as u16
}

/// A contiguous range of key groups, `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGroupRange {
    /// First key group of the range.
    pub start: u16,
    /// One past the last key group.
    pub end: u16,
}

impl KeyGroupRange {
    /// The key groups worker `index` of `workers` owns (Flink's
    /// `computeKeyGroupRangeForOperatorIndex`).
    pub fn for_worker(index: usize, workers: usize, max_parallelism: u16) -> KeyGroupRange {
        let workers = workers.max(1);
        let groups = usize::from(max_parallelism);
        let start = (index * groups).div_ceil(workers);
        let end = ((index + 1) * groups).div_ceil(workers);
        KeyGroupRange {
            start: start as u16,
            end: end as u16,
        }
    }

    /// Whether `key_group` is in the range.
    pub fn contains(&self, key_group: u16) -> bool {
        (self.start..self.end).contains(&key_group)
    }
}

/// The worker (of `workers`) that owns `key_group` (Flink's
/// `computeOperatorIndexForKeyGroup`).
pub fn worker_for_key_group(key_group: u16, workers: usize, max_parallelism: u16) -> usize {
    usize::from(key_group) * workers.max(1) / usize::from(max_parallelism.max(1))
}

/// `key` prefixed with its key group: how keyed state is stored.
pub fn prefixed(key_group: u16, key: &[u8]) -> Vec<u8> {
    let mut full = Vec::with_capacity(2 + key.len());
    full.extend_from_slice(&key_group.to_be_bytes());
    full.extend_from_slice(key);
    full
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_ranges_cover_every_key_group_once() {
        for workers in 1..=7 {
            let mut next = 0;
            for index in 0..workers {
                let range = KeyGroupRange::for_worker(index, workers, 128);
                assert_eq!(range.start, next, "{workers} workers");
                for group in range.start..range.end {
                    assert_eq!(worker_for_key_group(group, workers, 128), index);
                }
                next = range.end;
            }
            assert_eq!(next, 128);
        }
    }

    #[test]
    fn keys_spread_over_key_groups() {
        let mut seen = [0u32; 128];
        for i in 0..12_800u32 {
            seen[usize::from(key_group(&i.to_be_bytes(), 128))] += 1;
        }
        assert!(seen.iter().all(|n| (50..150).contains(n)), "{seen:?}");
    }
}
