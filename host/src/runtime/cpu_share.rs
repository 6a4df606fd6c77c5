//! A tenant's share of the host's CPU for its plugins.
//!
//! Each plugin call already measures its own CPU time (the thread's CPU
//! clock, see [`super::limits`]). A [`CpuShare`] is a token bucket of CPU
//! time shared by every plugin instance of one tenant: it fills at `cores`
//! CPU-seconds per second (up to a short burst), each call is charged what
//! it used, and a call does not start while the bucket is in debt — the
//! calling thread sleeps until the tenant is back within its share. A
//! busy-looping tenant thus gets its share and no more (each of its calls
//! still stops at its CPU deadline), whatever it does, and other tenants'
//! pipelines keep the rest of the machine.
//!
//! Fuel was measured for deadlines and rejected (ADR 0009: +11 % to +40 %
//! per call); the CPU clock is read twice per call here, which costs about
//! 0.1 µs.

use crate::sync::lock;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How much CPU time a tenant may run ahead of its rate.
const BURST: Duration = Duration::from_millis(100);

/// Longest single wait before the bucket is looked at again.
const MAX_WAIT: Duration = Duration::from_millis(250);

/// A tenant's CPU share (see the module docs).
#[derive(Debug)]
pub struct CpuShare {
    cores: f64,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// CPU seconds the tenant may still use (negative: in debt).
    tokens: f64,
    last_refill: Instant,
}

impl CpuShare {
    /// A share of `cores` CPUs (e.g. 0.5: half of one core).
    pub fn new(cores: f64) -> Self {
        let cores = if cores.is_finite() && cores > 0.0 {
            cores
        } else {
            f64::MIN_POSITIVE
        };
        CpuShare {
            cores,
            bucket: Mutex::new(Bucket {
                tokens: cores * BURST.as_secs_f64(),
                last_refill: Instant::now(),
            }),
        }
    }

    /// The share, in cores.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    fn refilled(&self) -> std::sync::MutexGuard<'_, Bucket> {
        let mut bucket = lock(&self.bucket);
        let now = Instant::now();
        let elapsed = now.duration_since(bucket.last_refill).as_secs_f64();
        bucket.tokens =
            (bucket.tokens + elapsed * self.cores).min(self.cores * BURST.as_secs_f64());
        bucket.last_refill = now;
        bucket
    }

    /// Charges a call's CPU time.
    pub(crate) fn charge(&self, used: Duration) {
        self.refilled().tokens -= used.as_secs_f64();
    }

    /// Waits (sleeping) until the tenant is within its share again; how
    /// long it waited.
    pub(crate) fn wait_turn(&self) -> Duration {
        let started = Instant::now();
        loop {
            let debt = -self.refilled().tokens;
            if debt <= 0.0 {
                return started.elapsed();
            }
            let wait = Duration::from_secs_f64(debt / self.cores).min(MAX_WAIT);
            std::thread::sleep(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_in_debt_waits_for_its_share_to_refill() {
        let share = CpuShare::new(0.5);
        assert!(share.wait_turn() < Duration::from_millis(20), "no debt yet");
        // 100 ms of CPU at half a core: about 200 ms to pay back, less the
        // 50 ms burst it had.
        share.charge(Duration::from_millis(100));
        let waited = share.wait_turn();
        assert!(waited >= Duration::from_millis(80), "waited {waited:?}");
        assert!(waited < Duration::from_secs(2), "waited {waited:?}");
    }

    #[test]
    fn nonsense_shares_are_clamped_not_divided_by() {
        assert!(CpuShare::new(0.0).cores() > 0.0);
        assert!(CpuShare::new(f64::NAN).cores() > 0.0);
    }
}
