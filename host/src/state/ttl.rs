//! State time-to-live: values carry the processing time after which they
//! expire; expired values are invisible to reads and dropped by compaction
//! (RocksDB's compaction filter, or [`super::StateStore::compact`] in
//! memory), so they are neither seen nor kept forever.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where state TTL reads the time: milliseconds since the Unix epoch. Tests
/// substitute a clock they advance by hand.
pub type ProcessingClock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The wall clock.
pub fn system_clock() -> ProcessingClock {
    Arc::new(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    })
}

/// How long state lives after its last write, and the clock it is measured
/// against.
#[derive(Clone)]
pub struct StateTtl {
    /// Time to live after the last write.
    pub ttl: Duration,
    /// The clock.
    pub clock: ProcessingClock,
}

impl std::fmt::Debug for StateTtl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateTtl").field("ttl", &self.ttl).finish()
    }
}

impl StateTtl {
    /// `value` stamped with its expiry time.
    pub fn wrap(&self, value: &[u8]) -> Vec<u8> {
        let expires = (self.clock)().saturating_add(self.ttl.as_millis() as i64);
        let mut stamped = Vec::with_capacity(8 + value.len());
        stamped.extend_from_slice(&expires.to_be_bytes());
        stamped.extend_from_slice(value);
        stamped
    }

    /// The value inside `stamped`, or `None` if it has expired (or is not a
    /// stamped value).
    pub fn unwrap(&self, mut stamped: Vec<u8>) -> Option<Vec<u8>> {
        if is_expired(&stamped, (self.clock)()) {
            return None;
        }
        stamped.drain(..8);
        Some(stamped)
    }
}

/// Whether a stamped value has expired at `now`.
pub(crate) fn is_expired(stamped: &[u8], now: i64) -> bool {
    match stamped.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
        Some(bytes) => i64::from_be_bytes(bytes) <= now,
        None => true,
    }
}

/// `value` as stored by a store with `ttl` (stamped with its expiry, or as
/// it is without a TTL).
pub(crate) fn stamp(ttl: Option<&StateTtl>, value: &[u8]) -> Vec<u8> {
    match ttl {
        Some(ttl) => ttl.wrap(value),
        None => value.to_vec(),
    }
}

/// The live value of `stored` in a store with `ttl`: `None` if expired.
pub(crate) fn live(ttl: Option<&StateTtl>, stored: Vec<u8>) -> Option<Vec<u8>> {
    match ttl {
        Some(ttl) => ttl.unwrap(stored),
        None => Some(stored),
    }
}
