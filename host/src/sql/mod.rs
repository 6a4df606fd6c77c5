//! Operators that run SQL queries (`sql = "SELECT ..."` in a pipeline
//! file): the query is compiled by `sluice_sql` once, at start-up, and run
//! here on every batch with no plugin and no JSON document per record.
//!
//! * [`SqlProjectOperator`] runs `SELECT ... FROM input [WHERE ...]`: it
//!   reads the fields the query names (from the source's own parse of each
//!   record when it comes right after the source:
//!   [`crate::dataflow::Operator::reads_fields`]), evaluates the condition,
//!   and writes the output record's JSON directly, copying the text of
//!   plain columns ([`crate::dataflow::Operator::projects_fields`]). A
//!   record the query cannot evaluate (a string where a number is needed,
//!   an overflow, a value that is not a JSON object) goes to the
//!   dead-letter output with the reason; the others of its batch are
//!   unaffected.
//! * A window aggregation (`FROM TABLE(TUMBLE(...)) GROUP BY ...`) runs on
//!   the same [`crate::window::WindowOperator`] a TOML window does: the
//!   query's `GROUP BY` keys are its key, [`SqlWindowAggregate`] its
//!   aggregate (the query's `WHERE` and aggregate calls) and
//!   [`SqlWindowOutput`] what a window emits (the `SELECT` list over the
//!   window's row, `HAVING`).
//! * An interval join (`FROM person P JOIN auction A ON P.id = A.seller
//!   AND A.date_time BETWEEN ...`) runs on [`crate::join::IntervalJoinOperator`],
//!   its output projected by the query's `SELECT` and `WHERE` in the same
//!   operator ([`SqlJoinOperator`]).
//! * De-duplication (`ROW_NUMBER() OVER (PARTITION BY id ORDER BY ..) = 1`)
//!   keeps each key's first row in keyed state ([`SqlDedupOperator`]).

mod dedup;
mod join;
mod project;
mod window;

pub use dedup::{SqlDedupOperator, SqlDedupOptions};
pub use join::SqlJoinOperator;
pub use project::SqlProjectOperator;
pub use window::{SqlWindowAggregate, SqlWindowOutput, window_spec};
