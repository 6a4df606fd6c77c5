//! Services the host offers: logging and counters.

use crate::bindings::sluice::plugin::host as imports;
pub use crate::bindings::sluice::plugin::types::LogLevel;

/// Writes `message` to the host's log at `level`, tagged with the plugin.
pub fn log(level: LogLevel, message: &str) {
    imports::log(level, message);
}

/// Logs at info level.
pub fn info(message: &str) {
    log(LogLevel::Info, message);
}

/// Logs at warn level.
pub fn warn(message: &str) {
    log(LogLevel::Warn, message);
}

/// Adds `delta` to the counter `name`; counters appear in the run summary.
pub fn counter_add(name: &str, delta: u64) {
    imports::counter_add(name, delta);
}
