//! Which keys may have records in the join's store: a counting Bloom
//! filter, so that a record whose key has no partners stored skips the
//! range read (most of a join's CPU when its keys are many: a million keys
//! at 30 µs per record without it, issue 44).
//!
//! A key (side and key: the records' store key prefix) counts up when one
//! of its records is written and down when one is deleted; a key none of
//! whose counters is 0 *may* have records, one with a 0 counter has none.
//! Counters that reach 255 stay there (never a false "none"). Its size is
//! fixed (a part of the operator's memory budget), so it never grows with
//! the keys: with more keys than it was made for, more lookups answer
//! "may" and read the store, as they would without it.

/// Counters per key.
const HASHES: u64 = 3;

/// A counting Bloom filter of the keys with stored records.
pub(super) struct StoredKeys {
    counters: Vec<u8>,
}

impl StoredKeys {
    /// A filter of `bytes` counters (at least one).
    pub(super) fn new(bytes: usize) -> Self {
        StoredKeys {
            counters: vec![0; bytes.max(1)],
        }
    }

    /// The counters of `prefix`.
    fn slots(&self, prefix: &[u8]) -> impl Iterator<Item = usize> + use<> {
        // Two halves of one 64-bit hash make every slot (Kirsch and
        // Mitzenmacher's double hashing).
        let hash = xxhash_rust::xxh3::xxh3_64_with_seed(prefix, 0x6a6f696e);
        let (first, second) = (hash & 0xFFFF_FFFF, (hash >> 32) | 1);
        let size = self.counters.len() as u64;
        (0..HASHES).map(move |i| (first.wrapping_add(i.wrapping_mul(second)) % size) as usize)
    }

    /// One more record of `prefix` is stored.
    pub(super) fn add(&mut self, prefix: &[u8]) {
        for slot in self.slots(prefix) {
            let counter = &mut self.counters[slot];
            *counter = counter.saturating_add(1);
        }
    }

    /// One record of `prefix` is no longer stored.
    pub(super) fn remove(&mut self, prefix: &[u8]) {
        for slot in self.slots(prefix) {
            let counter = &mut self.counters[slot];
            // A full counter may stand for more than it can count: it
            // stays full.
            if *counter != u8::MAX {
                *counter = counter.saturating_sub(1);
            }
        }
    }

    /// Whether records of `prefix` may be stored (`false`: none are).
    pub(super) fn may_hold(&self, prefix: &[u8]) -> bool {
        self.slots(prefix).all(|slot| self.counters[slot] > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a model (a count per key): never "none" for a key with
        /// records, whatever the order of adds and removes, even in a
        /// filter too small for its keys.
        #[test]
        fn a_key_with_records_is_never_missed(
            operations in proptest::collection::vec((0u8..40, any::<bool>()), 1..400),
            bytes in 1usize..64,
        ) {
            let mut filter = StoredKeys::new(bytes);
            let mut model = std::collections::HashMap::<u8, usize>::new();
            for (key, add) in operations {
                let count = model.entry(key).or_default();
                if add {
                    *count += 1;
                    filter.add(&[key]);
                } else if *count > 0 {
                    *count -= 1;
                    filter.remove(&[key]);
                }
                for (key, count) in &model {
                    if *count > 0 {
                        prop_assert!(filter.may_hold(&[*key]));
                    }
                }
            }
        }
    }

    #[test]
    fn a_roomy_filter_says_none_for_most_keys_it_never_saw() {
        let mut filter = StoredKeys::new(1 << 16);
        for key in 0u32..5_000 {
            filter.add(&key.to_be_bytes());
        }
        let false_positives = (5_000u32..15_000)
            .filter(|key| filter.may_hold(&key.to_be_bytes()))
            .count();
        // 3 counters of 65,536 per key at 5,000 keys: ~1 %.
        assert!(false_positives < 300, "{false_positives} of 10,000");
        for key in 0u32..5_000 {
            filter.remove(&key.to_be_bytes());
        }
        assert!((0u32..5_000).all(|key| !filter.may_hold(&key.to_be_bytes())));
    }
}
