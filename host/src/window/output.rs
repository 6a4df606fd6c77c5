//! What a window emits when it fires, where that is not the default
//! [`super::WindowResult`]: a SQL query's row (`crate::sql`).

use super::Window;
use serde_json::Value;

/// Writes the output record of a window as it fires, in place of
/// [`super::WindowResult`].
pub trait WindowOutput: Send {
    /// Writes the output values of the window `window` of the group whose
    /// key is `key` (its JSON value: for SQL's `GROUP BY` keys, an array
    /// of them), from its `accumulator`, each as `emit` takes it: none
    /// (SQL's `HAVING`), one, or several (a Top-N's rows). `Err`: they
    /// cannot be written, and a record naming the window goes to the
    /// dead-letter output with the reason.
    fn write(
        &mut self,
        key: &Value,
        window: Window,
        accumulator: &[u8],
        emit: &mut dyn FnMut(&[u8]),
    ) -> Result<(), String>;
}
