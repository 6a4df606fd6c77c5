//! What a Postgres sink does in the database: rows written, tried and
//! staged, staged rows applied, each database call retried with backoff
//! while the server does not answer.

use super::sql::{Column, Statements};
use crate::metrics::SinkHealth;
use crate::metrics::add;
use crate::sync::lock;
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Row as _, Transaction};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest pause between two tries of a database that does not
/// answer.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a row does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Upsert,
    Delete,
}

impl Op {
    pub(super) fn code(self) -> &'static str {
        match self {
            Op::Upsert => "u",
            Op::Delete => "d",
        }
    }
}

/// A record made a row: its column texts (in column order), version and
/// what it does; `index` is the record's place in the write.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) index: usize,
    pub(super) op: Op,
    pub(super) version: i64,
    pub(super) values: Vec<Option<String>>,
}

/// What the sink and its committer share.
pub(super) struct Shared {
    /// The sink's name (`sink`, `side_outputs.x`).
    pub(super) name: String,
    pub(super) runtime: tokio::runtime::Runtime,
    pub(super) pool: PgPool,
    pub(super) columns: Vec<Column>,
    /// Places of the key columns in `columns`.
    pub(super) key_positions: Vec<usize>,
    pub(super) statements: Statements,
    /// Who stages rows: tenant, pipeline and sink (a restore abandons what
    /// its earlier runs staged and never committed).
    pub(super) owner: String,
    /// This run's id (staged rows carry it: a zombie's are never applied).
    pub(super) open_id: String,
    pub(super) retry_timeout: Duration,
    /// Where retries show (`/metrics`, the dashboard).
    pub(super) health: Arc<SinkHealth>,
    /// Rows deleted once old (`expire`), if asked.
    pub(super) expiry: Option<Expiry>,
}

/// How and how often a sink deletes expired rows.
pub(super) struct Expiry {
    /// The delete statement (`$1`: the age in milliseconds).
    pub(super) statement: String,
    /// The age beyond which a row is deleted, in milliseconds.
    pub(super) after_ms: i64,
    /// The least time between two deletes.
    pub(super) every: Duration,
    /// When the last delete ran (`None`: not yet).
    pub(super) last: Mutex<Option<Instant>>,
}

/// A database error that a retry may cure: the connection, the server
/// going away or starting, a serialization failure or deadlock.
fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_)
        | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08")
                || code.starts_with("57P")
                || code.starts_with("53")
                || code == "40001"
                || code == "40P01"
        }),
        _ => false,
    }
}

/// A database error about the rows sent (a constraint, a value its type
/// cannot hold): those rows are refused, the others written.
fn is_row_error(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("22") || code.starts_with("23") || code == "42804"
        }),
        _ => false,
    }
}

pub(super) fn database_message(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => format!("{} (SQLSTATE {code})", db.message()),
            None => db.message().to_string(),
        },
        other => other.to_string(),
    }
}

impl Shared {
    /// Runs `attempt` until it succeeds, fails for a reason a retry does
    /// not cure, or the retry time is over; backs off between tries.
    pub(super) fn retry<T>(
        &self,
        what: &str,
        mut attempt: impl FnMut() -> Result<T, sqlx::Error>,
    ) -> Result<T, sqlx::Error> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            match attempt() {
                Err(error) if is_transient(&error) && started.elapsed() < self.retry_timeout => {
                    self.health.not_answered();
                    tracing::warn!(sink = %self.name, %error, ?pause, "PostgreSQL did not answer {what}; trying again");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(MAX_BACKOFF);
                }
                Err(error) if is_transient(&error) => return Err(error),
                other => {
                    self.health.answered();
                    return other;
                }
            }
        }
    }

    /// Deletes the expired rows if `expire` asks and the last delete is
    /// long enough ago.
    pub(super) fn expire_if_due(&self) -> Result<(), sqlx::Error> {
        let Some(expiry) = &self.expiry else {
            return Ok(());
        };
        {
            let mut last = lock(&expiry.last);
            if last.is_some_and(|at| at.elapsed() < expiry.every) {
                return Ok(());
            }
            *last = Some(Instant::now());
        }
        let deleted = self.retry("deleting expired rows", || {
            self.runtime.block_on(
                sqlx::query(&expiry.statement)
                    .bind(expiry.after_ms)
                    .execute(&self.pool),
            )
        })?;
        let rows = deleted.rows_affected();
        if rows > 0 {
            add(&self.health.rows_expired, rows);
            tracing::debug!(sink = %self.name, rows, "deleted expired rows");
        }
        Ok(())
    }

    /// Writes `rows` in one transaction (at-least-once): deletes and
    /// upserts; rows the database refuses are found one by one (each in a
    /// savepoint) and returned with the database's message.
    pub(super) async fn write_rows(
        &self,
        rows: &[Row],
    ) -> Result<Vec<(usize, String)>, sqlx::Error> {
        let mut transaction = self.pool.begin().await?;
        let refused = self.apply_rows(&mut transaction, rows).await?;
        transaction.commit().await?;
        Ok(refused)
    }

    /// Applies `rows` in `transaction`, inside a savepoint: the rows it
    /// refuses, one by one, with the reason.
    pub(super) async fn apply_rows(
        &self,
        transaction: &mut Transaction<'static, Postgres>,
        rows: &[Row],
    ) -> Result<Vec<(usize, String)>, sqlx::Error> {
        sqlx::query("SAVEPOINT sluice_batch")
            .execute(&mut **transaction)
            .await?;
        match self.apply_statements(transaction, rows).await {
            Ok(()) => return Ok(Vec::new()),
            Err(error) if is_row_error(&error) => {}
            Err(error) => return Err(error),
        }
        sqlx::query("ROLLBACK TO SAVEPOINT sluice_batch")
            .execute(&mut **transaction)
            .await?;
        let mut refused = Vec::new();
        for row in rows {
            sqlx::query("SAVEPOINT sluice_row")
                .execute(&mut **transaction)
                .await?;
            match self
                .apply_statements(transaction, std::slice::from_ref(row))
                .await
            {
                Ok(()) => {}
                Err(error) if is_row_error(&error) => {
                    refused.push((row.index, database_message(&error)));
                    sqlx::query("ROLLBACK TO SAVEPOINT sluice_row")
                        .execute(&mut **transaction)
                        .await?;
                }
                Err(error) => return Err(error),
            }
        }
        Ok(refused)
    }

    /// The delete and upsert statements for `rows` (one row per key).
    pub(super) async fn apply_statements(
        &self,
        transaction: &mut Transaction<'static, Postgres>,
        rows: &[Row],
    ) -> Result<(), sqlx::Error> {
        let (deletes, upserts): (Vec<&Row>, Vec<&Row>) =
            rows.iter().partition(|row| row.op == Op::Delete);
        if !deletes.is_empty() {
            let mut query = sqlx::query(&self.statements.delete);
            for &position in &self.key_positions {
                let texts: Vec<Option<String>> = deletes
                    .iter()
                    .map(|row| row.values[position].clone())
                    .collect();
                query = query.bind(texts);
            }
            let versions: Vec<i64> = deletes.iter().map(|row| row.version).collect();
            query.bind(versions).execute(&mut **transaction).await?;
        }
        if !upserts.is_empty() {
            let mut query = sqlx::query(&self.statements.upsert);
            for position in 0..self.columns.len() {
                let texts: Vec<Option<String>> = upserts
                    .iter()
                    .map(|row| row.values[position].clone())
                    .collect();
                query = query.bind(texts);
            }
            let versions: Vec<i64> = upserts.iter().map(|row| row.version).collect();
            query.bind(versions).execute(&mut **transaction).await?;
        }
        Ok(())
    }

    /// Stages `rows` (one per key) for the open epoch (on-checkpoint), in
    /// one transaction, after trying them against the table in a savepoint
    /// that is then rolled back: the rows the table refuses are returned
    /// (for the dead-letter output, in this epoch) and not staged.
    pub(super) async fn try_then_stage(
        &self,
        rows: &[Row],
        first_seq: i64,
    ) -> Result<Vec<(usize, String)>, sqlx::Error> {
        let mut transaction = self.pool.begin().await?;
        let refused = self.apply_rows(&mut transaction, rows).await?;
        sqlx::query("ROLLBACK TO SAVEPOINT sluice_batch")
            .execute(&mut *transaction)
            .await?;
        let accepted: Vec<&Row> = rows
            .iter()
            .filter(|row| !refused.iter().any(|(index, _)| *index == row.index))
            .collect();
        if !accepted.is_empty() {
            let seqs: Vec<i64> = (0..accepted.len() as i64).map(|i| first_seq + i).collect();
            let ops: Vec<&str> = accepted.iter().map(|row| row.op.code()).collect();
            let versions: Vec<i64> = accepted.iter().map(|row| row.version).collect();
            let values: Vec<String> = accepted
                .iter()
                .map(|row| serde_json::to_string(&row.values).unwrap_or_else(|_| "[]".into()))
                .collect();
            sqlx::query(&self.statements.stage)
                .bind(&self.owner)
                .bind(&self.open_id)
                .bind(seqs)
                .bind(ops)
                .bind(versions)
                .bind(values)
                .execute(&mut *transaction)
                .await?;
        }
        transaction.commit().await?;
        Ok(refused)
    }

    /// Applies the rows staged by `open_id` for `checkpoint` (the newest
    /// per key) and removes them from staging, in one transaction. If the
    /// table refuses some (a constraint another writer broke since they
    /// were tried), the others are applied one by one and the refused
    /// ones logged: a published checkpoint's commit must finish.
    pub(super) async fn apply_staged(
        &self,
        open_id: &str,
        checkpoint: i64,
    ) -> Result<(), sqlx::Error> {
        let mut transaction = self.pool.begin().await?;
        sqlx::query("SAVEPOINT sluice_apply")
            .execute(&mut *transaction)
            .await?;
        let applied = sqlx::query(&self.statements.apply_staged)
            .bind(&self.owner)
            .bind(open_id)
            .bind(checkpoint)
            .fetch_one(&mut *transaction)
            .await;
        match applied {
            Ok(_) => {}
            Err(error) if is_row_error(&error) => {
                sqlx::query("ROLLBACK TO SAVEPOINT sluice_apply")
                    .execute(&mut *transaction)
                    .await?;
                let staged = sqlx::query(&self.statements.take_staged)
                    .bind(&self.owner)
                    .bind(open_id)
                    .bind(checkpoint)
                    .fetch_all(&mut *transaction)
                    .await?;
                let rows = newest_per_key(self.staged_rows(&staged)?, &self.key_positions);
                for (_, reason) in self.apply_rows(&mut transaction, &rows).await? {
                    tracing::warn!(sink = %self.name, checkpoint, %reason, "a staged row was refused when its checkpoint was committed; it is not in the table");
                }
            }
            Err(error) => return Err(error),
        }
        transaction.commit().await
    }

    /// Rows read back from staging (`seq, op, version, vals`).
    pub(super) fn staged_rows(
        &self,
        staged: &[sqlx::postgres::PgRow],
    ) -> Result<Vec<Row>, sqlx::Error> {
        let mut rows = Vec::with_capacity(staged.len());
        for row in staged {
            let seq: i64 = row.try_get(0)?;
            let op: String = row.try_get(1)?;
            let version: i64 = row.try_get(2)?;
            let values: Vec<Option<String>> = row.try_get(3)?;
            rows.push(Row {
                index: usize::try_from(seq).unwrap_or(usize::MAX),
                op: if op == "d" { Op::Delete } else { Op::Upsert },
                version,
                values,
            });
        }
        rows.sort_by_key(|row| row.index);
        Ok(rows)
    }
}

/// The newest row of each key in `rows`: the highest version, and of
/// equal versions the last (their order is the records'). One statement
/// must not touch a row twice, and a record older than one after it in
/// the batch would not win in the table either.
pub(super) fn newest_per_key(rows: Vec<Row>, key_positions: &[usize]) -> Vec<Row> {
    let mut newest: HashMap<Vec<Option<String>>, usize> = HashMap::with_capacity(rows.len());
    for (place, row) in rows.iter().enumerate() {
        let key = key_positions
            .iter()
            .map(|&p| row.values[p].clone())
            .collect();
        match newest.get(&key) {
            Some(&kept) if rows[kept].version > row.version => {}
            _ => {
                newest.insert(key, place);
            }
        }
    }
    let mut keep: Vec<usize> = newest.into_values().collect();
    keep.sort_unstable();
    let mut rows: Vec<Option<Row>> = rows.into_iter().map(Some).collect();
    keep.into_iter()
        .filter_map(|place| rows.get_mut(place).and_then(Option::take))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(index: usize, key: &str, version: i64, value: &str) -> Row {
        Row {
            index,
            op: Op::Upsert,
            version,
            values: vec![Some(key.into()), Some(value.into())],
        }
    }

    #[test]
    fn the_newest_row_of_a_key_is_its_highest_version_then_its_last() {
        let rows = vec![
            row(0, "a", 1, "a1"),
            row(1, "b", 2, "b2"),
            row(2, "a", 3, "a3"),
            row(3, "b", 1, "b1 older, later"),
            row(4, "c", 1, "c first"),
            row(5, "c", 1, "c last"),
        ];
        let kept: Vec<(usize, Option<String>)> = newest_per_key(rows, &[0])
            .into_iter()
            .map(|row| (row.index, row.values[1].clone()))
            .collect();
        assert_eq!(
            kept,
            [
                (1, Some("b2".to_string())),
                (2, Some("a3".to_string())),
                (5, Some("c last".to_string()))
            ]
        );
    }
}
