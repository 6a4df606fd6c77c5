//! Locks that survive a panicking holder, and threads that keep their
//! starter's log context.
//!
//! A lock whose holder panicked is "poisoned": `lock()` returns an error
//! carrying the guard. Sluice's critical sections leave their data
//! consistent at every step (one map operation, a counter, a swapped
//! value), and a panic in one operator is already contained and reported
//! where it happens, so poisoning says nothing more: these helpers take the
//! guard either way, in one place instead of at every lock.

use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;

/// Locks `mutex`, poisoned or not.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Read-locks `lock`, poisoned or not.
pub fn read<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Write-locks `lock`, poisoned or not.
pub fn write<T: ?Sized>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits on `condvar` with `guard`, poisoned or not.
pub fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar
        .wait(guard)
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts a thread called `name` that runs `work` inside the tracing span
/// current where it is started: a process runs many tasks, and a line
/// logged by one of a task's threads (its source, exchange or checkpoint
/// thread) says which task it belongs to.
pub fn spawn_named<T, F>(name: String, work: F) -> std::io::Result<JoinHandle<T>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let span = tracing::Span::current();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || span.in_scope(work))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_poisoned_by_a_panic_is_still_taken() {
        let mutex = std::sync::Arc::new(Mutex::new(1));
        let held = mutex.clone();
        let _ = std::thread::spawn(move || {
            let _guard = held.lock();
            panic!("poison it");
        })
        .join();
        assert!(mutex.is_poisoned());
        *lock(&mutex) += 1;
        assert_eq!(*lock(&mutex), 2);
        let rw = RwLock::new(3);
        *write(&rw) += 1;
        assert_eq!(*read(&rw), 4);
    }
}
