//! Keyed state stored by the host.
//!
//! The host scopes every key to the tenant, pipeline and operator (and, on
//! keyed streams, to the current record's key), so plugins cannot see each
//! other's state. State outlives the plugin instance: it survives traps,
//! re-instantiation and hot swaps.

use crate::bindings::sluice::plugin::state as imports;

/// The value stored under `key`, if any.
pub fn get(key: &[u8]) -> Option<Vec<u8>> {
    imports::get(key)
}

/// Stores `value` under `key`.
pub fn put(key: &[u8], value: &[u8]) {
    imports::put(key, value);
}

/// Removes `key`.
pub fn delete(key: &[u8]) {
    imports::delete(key);
}
