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
//! * **Refused rows**: a row the database refuses (a constraint, a value
//!   its column's type cannot hold) goes to the dead-letter output with
//!   the database's message; the rest of its batch is written. A database
//!   that does not answer is retried with backoff for `retry_timeout_ms`.

mod database;
mod sink;
mod sql;
mod table;

pub use sink::PostgresSink;

use crate::bounded::{Bounded, DurationMs};
use crate::connectors::Secret;
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
    pub key: Vec<String>,
    /// The columns written, each from the record's field of the same name:
    /// a list of names (types from the table) or a table of names to SQL
    /// types (checked against the table, and what `create` makes).
    pub columns: PostgresColumns,
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
