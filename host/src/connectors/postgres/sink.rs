//! The Postgres sink and its committer (see the module docs of
//! [`super`]).

use super::database::{Expiry, Op, Row, Shared, database_message, newest_per_key};
use super::sql::{Statements, expire_statement, quote_table, value_text};
use super::table::prepare_table;
use super::{PostgresMode, PostgresSetupError, PostgresSinkConfig};
use crate::checkpoint::{CommitError, Committable, Committer, parse_committable};
use crate::connectors::table_rows::{TableRows, dead_letter_row};
use crate::dataflow::{DataflowError, Sink};
use crate::metrics::SinkHealth;
use crate::record::Record;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the sink pre-commits for a checkpoint: its staged rows, by the
/// run that staged them.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PostgresPreCommit {
    /// The run that staged the rows.
    open_id: String,
    /// Rows staged in the epoch (0: nothing to apply).
    rows: u64,
}

/// Writes records as rows of a PostgreSQL table (see [`super`]).
pub struct PostgresSink {
    shared: Arc<Shared>,
    mode: PostgresMode,
    rows: TableRows,
    version_field: Option<String>,
    delete_field: Option<String>,
    batch_rows: usize,
    /// Rows staged in the open epoch (on-checkpoint).
    staged: u64,
    /// The next staged row's sequence number (this run's).
    next_seq: i64,
    rejected: Vec<(Record, String)>,
}

impl PostgresSink {
    /// Connects, checks (or creates) the table and, for `on-checkpoint`,
    /// the staging table. `owner` names the pipeline and sink (tenant,
    /// pipeline, sink field); `open_id` this run; `exactly_once` whether
    /// the pipeline's checkpoints are (the default mode follows it);
    /// retries show in `health`.
    pub fn open(
        name: &str,
        config: &PostgresSinkConfig,
        owner: &str,
        open_id: &str,
        exactly_once: bool,
        health: Arc<SinkHealth>,
    ) -> Result<Self, PostgresSetupError> {
        let config = &config.resolved();
        let mode = config.mode.unwrap_or(if exactly_once {
            PostgresMode::OnCheckpoint
        } else {
            PostgresMode::AtLeastOnce
        });
        if mode == PostgresMode::OnCheckpoint && !exactly_once {
            return Err(PostgresSetupError::new(
                "mode",
                "`on-checkpoint` needs `[checkpoints] mode = \"exactly-once\"`",
            ));
        }
        let url = match (&config.granted_url, &config.url, &config.url_env) {
            (Some(granted), _, _) => granted.expose().to_string(),
            (None, Some(url), None) => url.clone(),
            (None, None, Some(variable)) => std::env::var(variable).map_err(|_| {
                PostgresSetupError::new("url_env", format!("`{variable}` is not set"))
            })?,
            (None, None, None) if config.database.is_some() => {
                return Err(PostgresSetupError::new(
                    "database",
                    "a granted database is named under `sluice serve` only; give `url` or `url_env`",
                ));
            }
            _ => {
                return Err(PostgresSetupError::new(
                    "url",
                    "give `url` or `url_env` (one of them)",
                ));
            }
        };
        if config.key.is_empty() {
            return Err(PostgresSetupError::new("key", "name at least one column"));
        }
        let table = quote_table(&config.table).map_err(|m| PostgresSetupError::new("table", m))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| PostgresSetupError::new("", format!("cannot start a runtime: {e}")))?;
        let retry_timeout = Duration::from_millis(config.retry_timeout_ms.get());
        // The pool starts its upkeep task on the runtime it is made in.
        let _entered = runtime.enter();
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy(&url)
            .map_err(|e| PostgresSetupError::new("url", format!("not a PostgreSQL URL: {e}")))?;
        let columns = runtime.block_on(prepare_table(&pool, config, &table))?;
        let key_positions = config
            .key
            .iter()
            .map(|key| {
                columns.iter().position(|c| &c.name == key).ok_or_else(|| {
                    PostgresSetupError::new("key", format!("`{key}` is not one of the `columns`"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let statements = Statements::new(&table, &columns, &config.key, &config.version_column);
        let expiry = match &config.expire {
            None => None,
            Some(expire) => {
                let column = columns
                    .iter()
                    .find(|c| c.name == expire.column)
                    .ok_or_else(|| {
                        PostgresSetupError::new(
                            "expire.column",
                            format!("`{}` is not one of the `columns`", expire.column),
                        )
                    })?;
                let statement = expire_statement(&table, column)
                    .map_err(|m| PostgresSetupError::new("expire.column", m))?;
                let after_ms = expire.after_ms.get();
                Some(Expiry {
                    statement,
                    after_ms: i64::try_from(after_ms).unwrap_or(i64::MAX),
                    every: expire.check_every(),
                    last: Mutex::new(None),
                })
            }
        };
        if mode == PostgresMode::OnCheckpoint {
            runtime
                .block_on(sqlx::query(&statements.create_staging).execute(&pool))
                .map_err(|e| {
                    PostgresSetupError::new(
                        "table",
                        format!("cannot create the staging table: {}", database_message(&e)),
                    )
                })?;
        }
        let shared = Arc::new(Shared {
            name: name.to_string(),
            runtime,
            pool,
            columns,
            key_positions,
            statements,
            owner: owner.to_string(),
            open_id: open_id.to_string(),
            retry_timeout,
            health,
            expiry,
        });
        Ok(PostgresSink {
            shared,
            mode,
            rows: config.rows,
            version_field: config.version_field.clone(),
            delete_field: config.delete_field.clone(),
            batch_rows: config.batch_rows.get(),
            staged: 0,
            next_seq: 0,
            rejected: Vec::new(),
        })
    }

    /// The row of `record` (its place in the write: `index`), or why it
    /// cannot be one.
    fn row(&self, index: usize, record: &Record, write_ms: i64) -> Result<Row, String> {
        let value = match self.rows {
            TableRows::Value => serde_json::from_slice(&record.value)
                .map_err(|e| format!("the value is not JSON: {e}"))?,
            TableRows::DeadLetter => serde_json::Value::Object(dead_letter_row(record)),
        };
        let object = value
            .as_object()
            .ok_or("the value is not a JSON object (its fields are the columns)")?;
        let op = match &self.delete_field {
            Some(field) if object.get(field) == Some(&serde_json::Value::Bool(true)) => Op::Delete,
            _ => Op::Upsert,
        };
        let version = match &self.version_field {
            Some(field) => object
                .get(field)
                .and_then(serde_json::Value::as_i64)
                .ok_or_else(|| format!("the version field `{field}` is not an integer"))?,
            // Staged rows take their checkpoint's id when the epoch is
            // sealed; until then the highest version, so that the trial
            // against the table always updates (and checks) the row.
            None if self.mode == PostgresMode::OnCheckpoint => i64::MAX,
            None => write_ms,
        };
        let mut values = Vec::with_capacity(self.shared.columns.len());
        for (position, column) in self.shared.columns.iter().enumerate() {
            let is_key = self.shared.key_positions.contains(&position);
            if op == Op::Delete && !is_key {
                values.push(None);
                continue;
            }
            let text = value_text(object.get(&column.name), column.kind())
                .map_err(|why| format!("column `{}`: {why}", column.name))?;
            if is_key && text.is_none() {
                return Err(format!("the key column `{}` has no value", column.name));
            }
            values.push(text);
        }
        Ok(Row {
            index,
            op,
            version,
            values,
        })
    }

    /// Deletes expired rows if it is time (at-least-once: the committer
    /// does it after each commit in on-checkpoint mode).
    fn expire_if_due(&self) -> Result<(), DataflowError> {
        self.shared
            .expire_if_due()
            .map_err(|e| self.error(format!("PostgreSQL: {}", database_message(&e))))
    }

    fn error(&self, message: impl Into<String>) -> DataflowError {
        DataflowError::Sink {
            name: self.shared.name.clone(),
            message: message.into(),
        }
    }
}

impl Sink for PostgresSink {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        let write_ms = crate::time::now_ms();
        for (first, chunk) in records.chunks(self.batch_rows).enumerate() {
            let offset = first * self.batch_rows;
            let mut rows = Vec::with_capacity(chunk.len());
            for (place, record) in chunk.iter().enumerate() {
                match self.row(offset + place, record, write_ms) {
                    Ok(row) => rows.push(row),
                    Err(reason) => self.rejected.push((record.clone(), reason)),
                }
            }
            if rows.is_empty() {
                continue;
            }
            let shared = &self.shared;
            let refused = match self.mode {
                PostgresMode::AtLeastOnce => {
                    let rows = newest_per_key(rows, &shared.key_positions);
                    shared.retry("a write", || {
                        shared.runtime.block_on(shared.write_rows(&rows))
                    })
                }
                PostgresMode::OnCheckpoint => {
                    let rows = newest_per_key(rows, &shared.key_positions);
                    let first_seq = self.next_seq;
                    let refused = shared.retry("staging rows", || {
                        shared
                            .runtime
                            .block_on(shared.try_then_stage(&rows, first_seq))
                    });
                    if let Ok(refused) = &refused {
                        self.next_seq += rows.len() as i64;
                        self.staged += (rows.len() - refused.len()) as u64;
                    }
                    refused
                }
            }
            .map_err(|e| self.error(format!("PostgreSQL: {}", database_message(&e))))?;
            for (index, reason) in refused {
                if let Some(record) = records.get(index) {
                    self.rejected.push((record.clone(), reason));
                }
            }
        }
        if self.mode == PostgresMode::AtLeastOnce {
            self.expire_if_due()?;
        }
        Ok(())
    }

    /// Rows are written (or staged) by `write` itself.
    fn flush(&mut self) -> Result<(), DataflowError> {
        Ok(())
    }

    fn take_rejected(&mut self) -> Vec<(Record, String)> {
        std::mem::take(&mut self.rejected)
    }

    /// On-checkpoint: the open epoch's staged rows become checkpoint
    /// `checkpoint`'s, applied once it is published.
    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Committable>, DataflowError> {
        if self.mode == PostgresMode::AtLeastOnce {
            self.expire_if_due()?;
            return Ok(None);
        }
        let shared = &self.shared;
        let id = i64::try_from(checkpoint).map_err(|_| self.error("checkpoint id too large"))?;
        if self.staged > 0 {
            shared
                .retry("sealing an epoch", || {
                    shared.runtime.block_on(
                        sqlx::query(match self.version_field {
                            Some(_) => &shared.statements.seal,
                            None => &shared.statements.seal_with_version,
                        })
                        .bind(&shared.owner)
                        .bind(&shared.open_id)
                        .bind(id)
                        .execute(&shared.pool),
                    )
                })
                .map_err(|e| self.error(format!("PostgreSQL: {}", database_message(&e))))?;
        }
        let pre_commit = PostgresPreCommit {
            open_id: shared.open_id.clone(),
            rows: std::mem::take(&mut self.staged),
        };
        serde_json::to_value(pre_commit)
            .map(Some)
            .map_err(|e| self.error(e.to_string()))
    }

    fn committer(&self) -> Option<Arc<dyn Committer>> {
        match self.mode {
            PostgresMode::OnCheckpoint => Some(Arc::new(PostgresCommitter {
                shared: self.shared.clone(),
            })),
            PostgresMode::AtLeastOnce => None,
        }
    }
}

/// Applies a checkpoint's staged rows once it is published; on restore,
/// applies the restored checkpoint's if they are still staged and drops
/// what abandoned epochs staged.
struct PostgresCommitter {
    shared: Arc<Shared>,
}

impl Committer for PostgresCommitter {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn commit(&self, checkpoint: u64, committable: &Committable) -> Result<(), CommitError> {
        let pre_commit: PostgresPreCommit = parse_committable(&self.shared.name, committable)?;
        let shared = &self.shared;
        let failed = |e: sqlx::Error| CommitError::failed(&shared.name, database_message(&e));
        if pre_commit.rows > 0 {
            let id = i64::try_from(checkpoint)
                .map_err(|_| CommitError::failed(&shared.name, "checkpoint id too large"))?;
            shared
                .retry("a commit", || {
                    shared
                        .runtime
                        .block_on(shared.apply_staged(&pre_commit.open_id, id))
                })
                .map_err(failed)?;
        }
        shared.expire_if_due().map_err(failed)
    }

    fn restore(&self, restored: Option<(u64, &Committable)>) -> Result<(), CommitError> {
        let shared = &self.shared;
        let restored_id = restored.map_or(0, |(id, _)| id);
        let id = i64::try_from(restored_id)
            .map_err(|_| CommitError::failed(&shared.name, "checkpoint id too large"))?;
        shared
            .retry("dropping abandoned rows", || {
                shared.runtime.block_on(
                    sqlx::query(&shared.statements.abandon_staged)
                        .bind(&shared.owner)
                        .bind(id)
                        .execute(&shared.pool),
                )
            })
            .map_err(|e| CommitError::failed(&shared.name, database_message(&e)))?;
        match restored {
            // Its commit may not have happened: applying it again applies
            // whatever is still staged (nothing, if it had).
            Some((checkpoint, committable)) => self.commit(checkpoint, committable),
            None => Ok(()),
        }
    }
}
