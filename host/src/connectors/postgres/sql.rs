//! The SQL a Postgres sink sends: quoted names, the column types a
//! pipeline file may declare, record values as the text PostgreSQL casts,
//! and the statements (upsert, delete, staging) built once at start-up.
//!
//! Nothing from a pipeline file is pasted into SQL unchecked: names are
//! quoted identifiers, types come from a fixed list, values are bound
//! parameters.

use std::fmt::Write as _;

/// `name` as a quoted SQL identifier (`"a""b"` for `a"b`).
pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A table name (`name` or `schema.name`) as quoted identifiers.
pub(super) fn quote_table(table: &str) -> Result<String, String> {
    let parts: Vec<&str> = table.split('.').collect();
    if parts.len() > 2 || parts.iter().any(|part| part.is_empty()) {
        return Err(format!(
            "`{table}` is not a table name (`name` or `schema.name`)"
        ));
    }
    Ok(parts
        .iter()
        .map(|part| quote_ident(part))
        .collect::<Vec<_>>()
        .join("."))
}

/// How a record's JSON value becomes the text PostgreSQL reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ValueKind {
    /// `timestamp with time zone`: a number is epoch milliseconds.
    TimestampTz,
    /// `timestamp without time zone`: a number is epoch milliseconds (UTC).
    Timestamp,
    /// `date`: a number is epoch milliseconds.
    Date,
    /// `json`/`jsonb`: any JSON value, as JSON text.
    Json,
    /// Anything else: strings as they are, other values as JSON text.
    Plain,
}

/// One column a sink writes: its name and type as the catalog names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Column {
    /// The column's (and the record field's) name.
    pub(super) name: String,
    /// Its type, as `format_type` spells it (`timestamp with time zone`).
    pub(super) sql_type: String,
}

impl Column {
    /// How values of this column are written.
    pub(super) fn kind(&self) -> ValueKind {
        match self.sql_type.as_str() {
            "timestamp with time zone" => ValueKind::TimestampTz,
            "timestamp without time zone" => ValueKind::Timestamp,
            "date" => ValueKind::Date,
            "json" | "jsonb" => ValueKind::Json,
            _ => ValueKind::Plain,
        }
    }
}

/// The catalog's spelling of a type a pipeline file declares, for the
/// types a sink can write: `smallint`, `integer`, `bigint`, `real`,
/// `double precision`, `numeric[(p[,s])]`, `boolean`, `text`,
/// `varchar(n)`, `char(n)`, `timestamptz`, `timestamp`, `date`, `json`,
/// `jsonb`, `uuid`, `bytea` (and their usual aliases). Anything else is
/// refused: types are pasted into `CREATE TABLE`.
pub(super) fn canonical_type(declared: &str) -> Result<String, String> {
    let lower = declared.to_ascii_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    let spaced = words.join(" ");
    let (base, arguments) = match spaced.split_once('(') {
        Some((base, rest)) => {
            let Some(arguments) = rest.strip_suffix(')') else {
                return Err(format!("`{declared}` is not a type"));
            };
            let arguments: Vec<&str> = arguments.split(',').map(str::trim).collect();
            if arguments
                .iter()
                .any(|a| a.is_empty() || !a.bytes().all(|b| b.is_ascii_digit()) || a.len() > 4)
            {
                return Err(format!("`{declared}`: type arguments are numbers"));
            }
            (base.trim().to_string(), Some(arguments.join(",")))
        }
        None => (spaced, None),
    };
    let with = |name: &str, allowed: usize| -> Result<String, String> {
        match &arguments {
            None => Ok(name.to_string()),
            Some(arguments) if arguments.split(',').count() <= allowed => {
                Ok(format!("{name}({arguments})"))
            }
            Some(_) => Err(format!("`{declared}`: too many type arguments")),
        }
    };
    let plain = |name: &str| -> Result<String, String> {
        match arguments {
            None => Ok(name.to_string()),
            Some(_) => Err(format!("`{declared}` takes no arguments")),
        }
    };
    match base.as_str() {
        "smallint" | "int2" => plain("smallint"),
        "integer" | "int" | "int4" => plain("integer"),
        "bigint" | "int8" => plain("bigint"),
        "real" | "float4" => plain("real"),
        "double precision" | "float8" | "float" => plain("double precision"),
        "numeric" | "decimal" => with("numeric", 2),
        "boolean" | "bool" => plain("boolean"),
        "text" => plain("text"),
        "varchar" | "character varying" => with("character varying", 1),
        "char" | "character" | "bpchar" => with("character", 1),
        "timestamptz" | "timestamp with time zone" => plain("timestamp with time zone"),
        "timestamp" | "timestamp without time zone" => plain("timestamp without time zone"),
        "date" => plain("date"),
        "json" => plain("json"),
        "jsonb" => plain("jsonb"),
        "uuid" => plain("uuid"),
        "bytea" => plain("bytea"),
        _ => Err(format!(
            "`{declared}` is not a type a Postgres sink writes (smallint, integer, bigint, real, double precision, numeric, boolean, text, varchar, char, timestamptz, timestamp, date, json, jsonb, uuid, bytea)"
        )),
    }
}

/// The text of `value` for a column of `kind` (`None`: SQL NULL), or why
/// the value cannot be one.
pub(super) fn value_text(
    value: Option<&serde_json::Value>,
    kind: ValueKind,
) -> Result<Option<String>, String> {
    use serde_json::Value;
    let Some(value) = value else {
        return Ok(None);
    };
    Ok(match (value, kind) {
        (Value::Null, _) => None,
        (Value::String(text), ValueKind::Json) => Some(value_json(value, text)),
        (Value::String(text), _) => Some(text.clone()),
        (
            Value::Number(number),
            ValueKind::TimestampTz | ValueKind::Timestamp | ValueKind::Date,
        ) => {
            let millis = number
                .as_i64()
                .ok_or_else(|| format!("{number} is not a time in epoch milliseconds"))?;
            let time = chrono::DateTime::from_timestamp_millis(millis)
                .ok_or_else(|| format!("{millis} ms is out of range for a time"))?;
            Some(match kind {
                ValueKind::TimestampTz => time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
                ValueKind::Date => time.format("%Y-%m-%d").to_string(),
                _ => time.format("%Y-%m-%dT%H:%M:%S%.3f").to_string(),
            })
        }
        (other, _) => Some(other.to_string()),
    })
}

fn value_json(value: &serde_json::Value, text: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| format!("{text:?}"))
}

/// The statements of one sink, built once from its checked columns.
#[derive(Debug, Clone)]
pub(super) struct Statements {
    /// Upserts rows given as one `text[]` per column and a `bigint[]` of
    /// versions: `$1..$n`, `$n+1`.
    pub(super) upsert: String,
    /// Deletes the rows of keys given as one `text[]` per key column and a
    /// `bigint[]` of versions, where the stored version is not newer.
    pub(super) delete: String,
    /// Creates the staging table if missing.
    pub(super) create_staging: String,
    /// Stages rows: `$1` owner, `$2` open id, `$3` seq[], `$4` op[] (`u`
    /// or `d`), `$5` version[], `$6` `text[]` of JSON arrays of the
    /// column texts.
    pub(super) stage: String,
    /// Marks the open epoch's staged rows (`checkpoint IS NULL`) of `$1`
    /// owner, `$2` open id as checkpoint `$3`'s.
    pub(super) seal: String,
    /// [`Statements::seal`], the rows' version becoming the checkpoint's
    /// id too (a sink without a version field).
    pub(super) seal_with_version: String,
    /// Applies the staged rows of `$1` owner, `$2` open id, `$3`
    /// checkpoint (the newest row per key), deletes them, and returns how
    /// many were staged.
    pub(super) apply_staged: String,
    /// Deletes staged rows of `$1` owner that a restore of checkpoint `$2`
    /// abandons (unsealed, or of a later checkpoint).
    pub(super) abandon_staged: String,
    /// Deletes the staged rows of `$1` owner, `$2` open id, `$3`
    /// checkpoint and returns them (seq, op, version, values) for a
    /// row-by-row apply.
    pub(super) take_staged: String,
}

impl Statements {
    /// The statements for `table` (quoted), `columns`, the `key` columns
    /// (names among them) and the version column.
    pub(super) fn new(table: &str, columns: &[Column], key: &[String], version: &str) -> Self {
        let names: Vec<String> = columns.iter().map(|c| quote_ident(&c.name)).collect();
        let version_q = quote_ident(version);
        let key_q: Vec<String> = key.iter().map(|k| quote_ident(k)).collect();
        let casts: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("u.c{i}::{}", c.sql_type))
            .collect();
        let unnest_args: Vec<String> = (1..=columns.len())
            .map(|n| format!("${n}::text[]"))
            .chain(std::iter::once(format!("${}::bigint[]", columns.len() + 1)))
            .collect();
        let aliases: Vec<String> = (0..columns.len())
            .map(|i| format!("c{i}"))
            .chain(std::iter::once("v".to_string()))
            .collect();
        let updates: Vec<String> = names
            .iter()
            .filter(|name| !key_q.contains(name))
            .chain(std::iter::once(&version_q))
            .map(|name| format!("{name} = EXCLUDED.{name}"))
            .collect();
        let mut upsert = String::new();
        let _ = write!(
            upsert,
            "INSERT INTO {table} ({}, {version_q}) SELECT {}, u.v FROM UNNEST({}) AS u({}) \
             ON CONFLICT ({}) DO UPDATE SET {} WHERE {table}.{version_q} <= EXCLUDED.{version_q}",
            names.join(", "),
            casts.join(", "),
            unnest_args.join(", "),
            aliases.join(", "),
            key_q.join(", "),
            updates.join(", "),
        );
        let key_positions: Vec<usize> = key
            .iter()
            .filter_map(|k| columns.iter().position(|c| &c.name == k))
            .collect();
        let key_args: Vec<String> = (1..=key.len())
            .map(|n| format!("${n}::text[]"))
            .chain(std::iter::once(format!("${}::bigint[]", key.len() + 1)))
            .collect();
        let key_aliases: Vec<String> = (0..key.len())
            .map(|i| format!("k{i}"))
            .chain(std::iter::once("v".to_string()))
            .collect();
        let key_match: Vec<String> = key_positions
            .iter()
            .enumerate()
            .map(|(i, &p)| format!("t.{} = d.k{i}::{}", names[p], columns[p].sql_type))
            .collect();
        let delete = format!(
            "DELETE FROM {table} AS t USING UNNEST({}) AS d({}) WHERE {} AND t.{version_q} <= d.v",
            key_args.join(", "),
            key_aliases.join(", "),
            key_match.join(" AND "),
        );
        let staging = staging_of(table);
        let create_staging = format!(
            "CREATE TABLE IF NOT EXISTS {staging} (owner text NOT NULL, open_id text NOT NULL, \
             checkpoint bigint, seq bigint NOT NULL, op \"char\" NOT NULL, version bigint NOT NULL, \
             vals text[] NOT NULL)"
        );
        let stage = format!(
            "INSERT INTO {staging} (owner, open_id, seq, op, version, vals) \
             SELECT $1, $2, s, o::\"char\", v, ARRAY(SELECT jsonb_array_elements_text(j::jsonb)) \
             FROM UNNEST($3::bigint[], $4::text[], $5::bigint[], $6::text[]) AS x(s, o, v, j)"
        );
        let seal = format!(
            "UPDATE {staging} SET checkpoint = $3 WHERE owner = $1 AND open_id = $2 AND checkpoint IS NULL"
        );
        let seal_with_version = format!(
            "UPDATE {staging} SET checkpoint = $3, version = $3 WHERE owner = $1 AND open_id = $2 AND checkpoint IS NULL"
        );
        // The newest staged row per key; deletes and upserts apply in one
        // statement each, on the rows the CTE took out of staging.
        let staged_key: Vec<String> = key_positions
            .iter()
            .map(|&p| format!("vals[{}]::{}", p + 1, columns[p].sql_type))
            .collect();
        let staged_casts: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("vals[{}]::{}", i + 1, c.sql_type))
            .collect();
        let staged_key_match: Vec<String> = key_positions
            .iter()
            .enumerate()
            .map(|(i, &p)| format!("t.{} = {}", names[p], staged_key[i]))
            .collect();
        let apply_staged = format!(
            "WITH staged AS (DELETE FROM {staging} WHERE owner = $1 AND open_id = $2 AND checkpoint = $3 \
             RETURNING seq, op, version, vals), \
             newest AS (SELECT DISTINCT ON ({keys}) op, version, vals FROM staged ORDER BY {keys}, version DESC, seq DESC), \
             deleted AS (DELETE FROM {table} AS t USING newest WHERE newest.op = 'd' AND {key_match} \
             AND t.{version_q} <= newest.version RETURNING 1), \
             upserted AS (INSERT INTO {table} ({names}, {version_q}) SELECT {casts}, version FROM newest \
             WHERE op = 'u' ON CONFLICT ({key_cols}) DO UPDATE SET {updates} \
             WHERE {table}.{version_q} <= EXCLUDED.{version_q} RETURNING 1) \
             SELECT (SELECT count(*) FROM staged), (SELECT count(*) FROM deleted), (SELECT count(*) FROM upserted)",
            keys = staged_key.join(", "),
            key_match = staged_key_match.join(" AND "),
            names = names.join(", "),
            casts = staged_casts.join(", "),
            key_cols = key_q.join(", "),
            updates = updates.join(", "),
        );
        let abandon_staged = format!(
            "DELETE FROM {staging} WHERE owner = $1 AND (checkpoint IS NULL OR checkpoint > $2)"
        );
        let take_staged = format!(
            "DELETE FROM {staging} WHERE owner = $1 AND open_id = $2 AND checkpoint = $3 \
             RETURNING seq, op::text, version, vals"
        );
        Statements {
            upsert,
            delete,
            create_staging,
            stage,
            seal,
            seal_with_version,
            apply_staged,
            abandon_staged,
            take_staged,
        }
    }
}

/// The statement deleting the rows of `table` (quoted) whose `column` holds
/// a time more than `$1` milliseconds before the database's now, or why
/// the column cannot hold a time.
pub(super) fn expire_statement(table: &str, column: &Column) -> Result<String, String> {
    let name = quote_ident(&column.name);
    let age = "$1::bigint * interval '1 millisecond'";
    let older_than = match column.sql_type.as_str() {
        "timestamp with time zone" => format!("now() - {age}"),
        "timestamp without time zone" => format!("(now() AT TIME ZONE 'UTC') - {age}"),
        "date" => format!("((now() AT TIME ZONE 'UTC') - {age})::date"),
        "bigint" => "(extract(epoch FROM now()) * 1000)::bigint - $1::bigint".to_string(),
        other => {
            return Err(format!(
                "column `{}` is {other}: a time must be a timestamptz, timestamp, date, or bigint of epoch milliseconds",
                column.name
            ));
        }
    };
    Ok(format!("DELETE FROM {table} WHERE {name} < {older_than}"))
}

/// The staging table of a quoted table name (`"s"."t"` →
/// `"s"."t_sluice_staging"`).
fn staging_of(quoted_table: &str) -> String {
    match quoted_table.strip_suffix('"') {
        Some(open) => format!("{open}_sluice_staging\""),
        None => format!("{quoted_table}_sluice_staging"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_quoted_and_a_quote_inside_one_is_doubled() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_table("s.t").as_deref(), Ok("\"s\".\"t\""));
        assert!(quote_table("a.b.c").is_err());
        assert!(quote_table(".t").is_err());
        assert_eq!(staging_of("\"s\".\"t\""), "\"s\".\"t_sluice_staging\"");
    }

    #[test]
    fn declared_types_take_the_catalogs_spelling_and_anything_else_is_refused() {
        for (declared, canonical) in [
            ("BIGINT", "bigint"),
            ("int8", "bigint"),
            ("int", "integer"),
            ("float8", "double precision"),
            ("double   precision", "double precision"),
            ("timestamptz", "timestamp with time zone"),
            ("timestamp", "timestamp without time zone"),
            ("numeric(12, 2)", "numeric(12,2)"),
            ("varchar(20)", "character varying(20)"),
            ("bool", "boolean"),
            ("jsonb", "jsonb"),
        ] {
            assert_eq!(
                canonical_type(declared).as_deref(),
                Ok(canonical),
                "{declared}"
            );
        }
        for refused in [
            "bigint); DROP TABLE x; --",
            "text[]",
            "numeric(1,2,3)",
            "varchar(x)",
            "bigint(4)",
            "money",
            "",
        ] {
            assert!(canonical_type(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn values_become_the_text_postgres_casts_and_times_are_epoch_milliseconds() {
        let column = |sql_type: &str| Column {
            name: "c".into(),
            sql_type: sql_type.into(),
        };
        let text = |value: serde_json::Value, sql_type: &str| {
            value_text(Some(&value), column(sql_type).kind())
        };
        assert_eq!(text(json!("abc"), "text"), Ok(Some("abc".into())));
        assert_eq!(text(json!(42), "bigint"), Ok(Some("42".into())));
        assert_eq!(text(json!(true), "boolean"), Ok(Some("true".into())));
        assert_eq!(text(json!(null), "bigint"), Ok(None));
        assert_eq!(value_text(None, ValueKind::Plain), Ok(None));
        assert_eq!(
            text(json!(1_767_225_600_000_i64), "timestamp with time zone"),
            Ok(Some("2026-01-01T00:00:00.000Z".into()))
        );
        assert_eq!(
            text(json!(1_767_225_600_000_i64), "date"),
            Ok(Some("2026-01-01".into()))
        );
        assert_eq!(
            text(json!("2026-01-01T00:00:00Z"), "timestamp with time zone"),
            Ok(Some("2026-01-01T00:00:00Z".into()))
        );
        assert!(text(json!(1.5), "timestamp with time zone").is_err());
        assert_eq!(text(json!("x"), "jsonb"), Ok(Some("\"x\"".into())));
        assert_eq!(
            text(json!({"a": [1]}), "jsonb"),
            Ok(Some("{\"a\":[1]}".into()))
        );
    }

    #[test]
    fn rows_expire_by_a_time_column_and_other_columns_are_refused() {
        let column = |sql_type: &str| Column {
            name: "ends".into(),
            sql_type: sql_type.into(),
        };
        assert_eq!(
            expire_statement("\"t\"", &column("timestamp with time zone")).as_deref(),
            Ok("DELETE FROM \"t\" WHERE \"ends\" < now() - $1::bigint * interval '1 millisecond'")
        );
        assert_eq!(
            expire_statement("\"t\"", &column("bigint")).as_deref(),
            Ok(
                "DELETE FROM \"t\" WHERE \"ends\" < (extract(epoch FROM now()) * 1000)::bigint - $1::bigint"
            )
        );
        assert!(expire_statement("\"t\"", &column("date")).is_ok());
        assert!(expire_statement("\"t\"", &column("text")).is_err());
        assert!(expire_statement("\"t\"", &column("integer")).is_err());
    }

    #[test]
    fn the_upsert_only_replaces_rows_whose_version_is_not_newer() {
        let columns = vec![
            Column {
                name: "id".into(),
                sql_type: "bigint".into(),
            },
            Column {
                name: "n".into(),
                sql_type: "integer".into(),
            },
        ];
        let statements = Statements::new("\"t\"", &columns, &["id".to_string()], "sluice_version");
        assert_eq!(
            statements.upsert,
            "INSERT INTO \"t\" (\"id\", \"n\", \"sluice_version\") SELECT u.c0::bigint, u.c1::integer, u.v \
             FROM UNNEST($1::text[], $2::text[], $3::bigint[]) AS u(c0, c1, v) ON CONFLICT (\"id\") \
             DO UPDATE SET \"n\" = EXCLUDED.\"n\", \"sluice_version\" = EXCLUDED.\"sluice_version\" \
             WHERE \"t\".\"sluice_version\" <= EXCLUDED.\"sluice_version\""
        );
        assert_eq!(
            statements.delete,
            "DELETE FROM \"t\" AS t USING UNNEST($1::text[], $2::bigint[]) AS d(k0, v) \
             WHERE t.\"id\" = d.k0::bigint AND t.\"sluice_version\" <= d.v"
        );
    }
}
