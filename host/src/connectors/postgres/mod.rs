//! The PostgreSQL upsert sink: records become rows of a table, keyed by
//! the columns the pipeline names, written with `INSERT ... ON CONFLICT DO
//! UPDATE` through sqlx's connection pool.
//!
//! * **Rows**: each configured column takes the record value's top-level
//!   JSON field of the same name, sent as text and cast by the database to
//!   the column's type (a number into a `timestamptz` column is epoch
//!   milliseconds). The table is checked at start-up: every column exists
//!   with the declared type, the key has a unique index, the version
//!   column is a `bigint`; `create = true` makes a missing table.
//! * **Versions, not two-phase commit**: every row carries a version (a
//!   record field, or the checkpoint that wrote it) and an upsert only
//!   replaces a row whose version is not newer (`WHERE t.version <=
//!   excluded.version`). A replay after a crash writes the same rows
//!   again and never moves one backwards.
//! * **Modes** ([`PostgresMode`]): `on-checkpoint` (the default of an
//!   exactly-once pipeline) stages each epoch's rows in a staging table and
//!   applies them in one transaction when the checkpoint that covers them
//!   completes, so readers see consistent cuts; `at-least-once` writes
//!   each batch as it comes (latency: one batch), and a restore writes the
//!   records since the checkpoint again.
//! * **Deletes**: a record whose `delete_field` is `true` deletes its
//!   key's row (unless the row is newer); `expire` deletes rows older than
//!   a time (checked after writes and commits, by the database's clock).
//! * **Dead-letter tables**: `rows = "dead-letter"` writes dead letters
//!   as rows (the record as it came in, the reason, the operator, where it
//!   was read), keyed by a digest that a replay reproduces.
//! * **Refused rows**: a row the database refuses (a constraint, a value
//!   its column's type cannot hold) goes to the dead-letter output with
//!   the database's message; the rest of its batch is written. A database
//!   that does not answer is retried with backoff for `retry_timeout_ms`.

mod database;
mod sink;
mod sql;
mod table;

pub use sink::PostgresSink;

use crate::bounded::{Bounded, DurationMs, PositiveDurationMs};
use crate::connectors::Secret;
use crate::connectors::table_rows::{
    DEAD_LETTER_COLUMNS, DEAD_LETTER_ID, DeadLetterType, TableRows,
};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `[sink.postgres]` (also as a side output or the dead-letter output).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSinkConfig {
    /// `postgres://user@host:port/database` (a password is better kept in
    /// `url_env`). Give this or `url_env`.
    pub url: Option<String>,
    /// An environment variable holding the URL.
    pub url_env: Option<String>,
    /// Under `sluice serve`: a database the admin granted the tenant, by
    /// name (instead of `url`; the server connects with the grant's URL).
    pub database: Option<String>,
    /// The table: `name` or `schema.name`.
    pub table: String,
    /// The upsert key: the columns whose values name a row (a unique index
    /// on exactly them must exist; `create` makes it the primary key).
    /// With `rows = "dead-letter"` it may be left out: `dead_letter_id`.
    #[serde(default)]
    pub key: Vec<String>,
    /// The columns written, each from the record's field of the same name:
    /// a list of names (types from the table) or a table of names to SQL
    /// types (checked against the table, and what `create` makes). With
    /// `rows = "dead-letter"` it may be left out: the dead-letter columns.
    #[serde(default)]
    pub columns: PostgresColumns,
    /// What a row is made of: `value` (default: the record value's
    /// top-level JSON fields) or `dead-letter` (the record as it came in,
    /// with why and where it was dead-lettered: see
    /// [`TableRows::DeadLetter`]), for a dead-letter table.
    #[serde(default)]
    pub rows: TableRows,
    /// Whether a missing table is created (needs typed `columns`).
    #[serde(default)]
    pub create: bool,
    /// The `bigint` column holding each row's version.
    #[serde(default = "default_version_column")]
    pub version_column: String,
    /// A record field whose integer value is the row's version (e.g. a
    /// sequence number or an event time that grows per key). Without it:
    /// the checkpoint that wrote the row (`on-checkpoint`), or the time of
    /// the write in milliseconds (`at-least-once`, where a replay may then
    /// rewrite a newer row with an older value until it catches up).
    pub version_field: Option<String>,
    /// A record field that, when `true`, deletes its key's row (if the
    /// row's version is not newer) instead of writing one: retractions.
    pub delete_field: Option<String>,
    /// Deletes rows once they are older than a time: `expire = { column =
    /// "window_end", after_ms = 86400000 }`.
    pub expire: Option<PostgresExpiry>,
    /// When rows become visible (default: `on-checkpoint` in an
    /// exactly-once pipeline, else `at-least-once`).
    pub mode: Option<PostgresMode>,
    /// Rows per statement.
    #[serde(default = "default_batch_rows")]
    pub batch_rows: Bounded<usize, 1, 100_000>,
    /// How long a database that does not answer is retried (with backoff)
    /// before the pipeline fails.
    #[serde(default = "default_retry_timeout_ms")]
    pub retry_timeout_ms: DurationMs,
    /// A URL `sluice serve` grants the tenant's pipeline; never read from
    /// a pipeline file.
    #[serde(skip)]
    pub granted_url: Option<Secret>,
}

/// `columns` of a Postgres sink.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PostgresColumns {
    /// Names only: the table must exist, and gives the types.
    Names(Vec<String>),
    /// Names and SQL types (`bigint`, `text`, `timestamptz`, `numeric(12,2)`,
    /// `jsonb`, ...).
    Typed(BTreeMap<String, String>),
}

impl Default for PostgresColumns {
    fn default() -> Self {
        PostgresColumns::Names(Vec::new())
    }
}

impl PostgresColumns {
    fn is_empty(&self) -> bool {
        match self {
            PostgresColumns::Names(names) => names.is_empty(),
            PostgresColumns::Typed(typed) => typed.is_empty(),
        }
    }
}

/// `expire` of a Postgres sink: a row whose `column` holds a time more
/// than `after_ms` before now (the database's clock, so that every process
/// of a pipeline agrees) is deleted. Checked after writes and commits, at
/// most every `check_every_ms`. A replay after a restore may write an
/// expired row again; the next check deletes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresExpiry {
    /// One of the `columns`: `timestamptz`, `timestamp`, `date`, or a
    /// `bigint` of milliseconds since the epoch.
    pub column: String,
    /// How long after its time a row is kept.
    pub after_ms: PositiveDurationMs,
    /// The least time between two checks (each is a `DELETE` scanning the
    /// column, or its index). Default: a tenth of `after_ms`, between 1 s
    /// and 1 min; 0 checks after every write and commit.
    pub check_every_ms: Option<DurationMs>,
}

impl PostgresExpiry {
    /// The least time between two checks.
    fn check_every(&self) -> std::time::Duration {
        use std::time::Duration;
        match self.check_every_ms {
            Some(every) => Duration::from_millis(every.get()),
            None => Duration::from_millis(self.after_ms.get() / 10)
                .clamp(Duration::from_secs(1), Duration::from_secs(60)),
        }
    }
}

impl PostgresSinkConfig {
    /// The configuration with what `rows = "dead-letter"` may leave out
    /// filled in: the dead-letter columns, keyed by `dead_letter_id`.
    fn resolved(&self) -> PostgresSinkConfig {
        let mut config = self.clone();
        if config.rows == TableRows::DeadLetter {
            if config.columns.is_empty() {
                config.columns = PostgresColumns::Typed(
                    DEAD_LETTER_COLUMNS
                        .iter()
                        .map(|column| {
                            let sql_type = match column.column_type {
                                DeadLetterType::Text => "text",
                                DeadLetterType::Int => "integer",
                                DeadLetterType::Long => "bigint",
                                DeadLetterType::Timestamp => "timestamptz",
                                DeadLetterType::Boolean => "boolean",
                            };
                            (column.name.to_string(), sql_type.to_string())
                        })
                        .collect(),
                );
            }
            if config.key.is_empty() {
                config.key = vec![DEAD_LETTER_ID.to_string()];
            }
        }
        config
    }
}

/// When a Postgres sink's rows become visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PostgresMode {
    /// Each batch as it comes (one transaction per batch).
    AtLeastOnce,
    /// Each checkpoint's rows, in one transaction, once the checkpoint is
    /// published (needs `[checkpoints] mode = "exactly-once"`).
    OnCheckpoint,
}

fn default_version_column() -> String {
    "sluice_version".into()
}

fn default_batch_rows() -> Bounded<usize, 1, 100_000> {
    Bounded::known(1_000)
}

fn default_retry_timeout_ms() -> DurationMs {
    Bounded::known(300_000)
}

/// Why a Postgres sink could not start: the message names the setting or
/// column at fault.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct PostgresSetupError {
    /// The field under `[sink.postgres]` at fault (`table`, `columns.x`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl PostgresSetupError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        PostgresSetupError {
            field: field.into(),
            message: message.into(),
        }
    }
}
