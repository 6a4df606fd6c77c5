//! A Postgres sink's table at start-up: checked against the pipeline
//! file's columns (or created), its key's unique index found.

use super::database::database_message;
use super::sql::{Column, canonical_type, quote_ident};
use super::{PostgresColumns, PostgresSetupError, PostgresSinkConfig};
use sqlx::Row as _;
use sqlx::postgres::PgPool;
use std::collections::HashMap;

/// Checks the table against the configuration (creating it with `create`)
/// and returns the columns written, with the table's types.
pub(super) async fn prepare_table(
    pool: &PgPool,
    config: &PostgresSinkConfig,
    table: &str,
) -> Result<Vec<Column>, PostgresSetupError> {
    let declared: Vec<(String, Option<String>)> = match &config.columns {
        PostgresColumns::Names(names) => names.iter().map(|n| (n.clone(), None)).collect(),
        PostgresColumns::Typed(typed) => typed
            .iter()
            .map(|(name, declared)| {
                canonical_type(declared)
                    .map(|canonical| (name.clone(), Some(canonical)))
                    .map_err(|m| PostgresSetupError::new(format!("columns.{name}"), m))
            })
            .collect::<Result<_, _>>()?,
    };
    if declared.is_empty() {
        return Err(PostgresSetupError::new(
            "columns",
            "name at least one column",
        ));
    }
    if declared
        .iter()
        .any(|(name, _)| *name == config.version_column)
    {
        return Err(PostgresSetupError::new(
            "version_column",
            format!("`{}` is also one of the `columns`", config.version_column),
        ));
    }
    let unreachable = |e: sqlx::Error| {
        PostgresSetupError::new(
            "url",
            format!("cannot reach PostgreSQL: {}", database_message(&e)),
        )
    };
    let mut existing = table_columns(pool, table).await.map_err(unreachable)?;
    if existing.is_none() && config.create {
        let mut definitions = Vec::new();
        for (name, sql_type) in &declared {
            let Some(sql_type) = sql_type else {
                return Err(PostgresSetupError::new(
                    "columns",
                    "`create = true` needs the columns' types (`columns = { name = \"type\", ... }`)",
                ));
            };
            definitions.push(format!("{} {sql_type}", quote_ident(name)));
        }
        let keys: Vec<String> = config.key.iter().map(|k| quote_ident(k)).collect();
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {table} ({}, {} bigint NOT NULL, PRIMARY KEY ({}))",
            definitions.join(", "),
            quote_ident(&config.version_column),
            keys.join(", ")
        );
        sqlx::query(&create).execute(pool).await.map_err(|e| {
            PostgresSetupError::new(
                "table",
                format!("cannot create {}: {}", config.table, database_message(&e)),
            )
        })?;
        existing = table_columns(pool, table).await.map_err(unreachable)?;
    }
    let Some(existing) = existing else {
        return Err(PostgresSetupError::new(
            "table",
            format!(
                "table `{}` does not exist (create it, or set `create = true` with typed columns)",
                config.table
            ),
        ));
    };
    let mut columns = Vec::with_capacity(declared.len());
    for (name, sql_type) in declared {
        let Some(actual) = existing.get(&name) else {
            return Err(PostgresSetupError::new(
                format!("columns.{name}"),
                format!("table `{}` has no column `{name}`", config.table),
            ));
        };
        if let Some(sql_type) = &sql_type
            && sql_type != actual
        {
            return Err(PostgresSetupError::new(
                format!("columns.{name}"),
                format!(
                    "column `{name}` of `{}` is {actual}, not {sql_type}",
                    config.table
                ),
            ));
        }
        columns.push(Column {
            name,
            sql_type: actual.clone(),
        });
    }
    match existing.get(&config.version_column) {
        Some(version) if version == "bigint" => {}
        Some(other) => {
            return Err(PostgresSetupError::new(
                "version_column",
                format!(
                    "column `{}` of `{}` is {other}, not bigint",
                    config.version_column, config.table
                ),
            ));
        }
        None => {
            return Err(PostgresSetupError::new(
                "version_column",
                format!(
                    "table `{}` has no column `{}` (a bigint holding each row's version)",
                    config.table, config.version_column
                ),
            ));
        }
    }
    if !key_is_unique(pool, table, &config.key)
        .await
        .map_err(unreachable)?
    {
        return Err(PostgresSetupError::new(
            "key",
            format!(
                "no unique index of `{}` is on exactly ({}): an upsert needs one",
                config.table,
                config.key.join(", ")
            ),
        ));
    }
    Ok(columns)
}

/// The columns of `table` and their types (`format_type`), or `None` if
/// it does not exist.
async fn table_columns(
    pool: &PgPool,
    table: &str,
) -> Result<Option<HashMap<String, String>>, sqlx::Error> {
    let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(table)
        .fetch_one(pool)
        .await?;
    if exists.is_none() {
        return Ok(None);
    }
    let rows = sqlx::query(
        "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute \
         WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped",
    )
    .bind(table)
    .fetch_all(pool)
    .await?;
    let mut columns = HashMap::with_capacity(rows.len());
    for row in rows {
        columns.insert(row.try_get(0)?, row.try_get(1)?);
    }
    Ok(Some(columns))
}

/// Whether a unique index of `table` is on exactly the `key` columns.
async fn key_is_unique(pool: &PgPool, table: &str, key: &[String]) -> Result<bool, sqlx::Error> {
    let indexes: Vec<Vec<String>> = sqlx::query_scalar(
        "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i \
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
         WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indpred IS NULL \
         GROUP BY i.indexrelid",
    )
    .bind(table)
    .fetch_all(pool)
    .await?;
    let mut wanted: Vec<String> = key.to_vec();
    wanted.sort();
    wanted.dedup();
    Ok(indexes.contains(&wanted))
}
