//! # sluice-sql: Flink SQL on Sluice's operators
//!
//! A pipeline operator may be a query (`sql = "SELECT ..."`): its input
//! stream is the table `input`, its columns the fields of each record's
//! JSON value, and the rows it produces become its output records. This
//! crate parses the query (sqlparser, with Flink's dialect), binds it, and
//! compiles it into plans the host's operators run; it knows nothing of
//! the host, so that the whole of SQL can be tested on its own.
//!
//! In the order a query meets them:
//!
//! * [`dialect`]: Flink SQL's syntax where sqlparser's generic dialect
//!   lacks it (table arguments of window functions, backtick identifiers).
//! * [`plan`]: the statement checked against the supported subset and
//!   compiled ([`compile`]); everything else refused with its position
//!   ([`SqlError`]).
//! * [`aggregate`]: the aggregate functions of window queries and their
//!   accumulators.
//! * [`rank`]: the top rows of a window (`ROW_NUMBER() OVER (..)`).
//! * [`expr`]: scalar expressions, bound once and evaluated per record
//!   over the fields the source's parse already found.
//! * [`datum`] and [`time`]: SQL values over JSON, and time functions.

pub mod aggregate;
pub mod datum;
pub mod dialect;
mod error;
pub mod expr;
pub mod plan;
pub mod rank;
pub mod time;

pub use datum::{Datum, SqlType};
pub use error::SqlError;
pub use expr::{EvalError, Expr};
pub use plan::{
    Catalog, DedupOrder, DedupPlan, JoinInput, JoinPlan, Output, Plan, ProjectPlan, ROWTIME,
    TableView, WindowFunction, WindowPlan, compile,
};
