//! The Iceberg sink: records become rows of an Apache Iceberg table,
//! written as Parquet data files through iceberg-rust and committed
//! exactly once per checkpoint.
//!
//! * Catalog: the SQL catalog on a SQLite file (the embedded default); the
//!   warehouse is a local directory or `s3://bucket/prefix` (the same S3
//!   settings as checkpoints).
//! * Table: `namespace.table`, created if missing from the pipeline file's
//!   `columns` and `partition` spec (`day(at)`, `bucket(16, id)`, ...); an
//!   existing table must have every configured column with the same type
//!   and nothing required that the pipeline does not write — else the
//!   pipeline stops at start-up, naming the column.
//! * Rows (`rows`): a record whose value does not fit the schema goes to
//!   the dead-letter output with the reason.
//! * Two-phase commit (`sink`): each checkpoint barrier closes the
//!   epoch's data files (they also roll at `target_file_size_mb`); they
//!   are the sink's pre-commit, appended to the table (one fast-append
//!   snapshot) once the checkpoint is published. Each snapshot's summary
//!   names the tenant, pipeline, sink and checkpoint id, and a commit whose
//!   checkpoint the table already holds is skipped — so a commit repeated
//!   by a restore is applied exactly once whatever the crash point.
//! * Orphans (`orphans`): data files a crash left behind (written for a
//!   checkpoint that never completed) are deleted on restore.

mod orphans;
mod rows;
mod sink;

pub use sink::{IcebergCommits, IcebergSink};

use crate::checkpoint::s3::S3Options;
use crate::connectors::table_rows::{
    DEAD_LETTER_COLUMNS, DEAD_LETTER_ID, DeadLetterType, TableRows,
};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// `[sink.iceberg]` (also as a dead-letter or side output).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcebergSinkConfig {
    /// The SQL catalog's SQLite file (relative to the pipeline file),
    /// created if missing. Give this or `rest`.
    pub catalog: Option<PathBuf>,
    /// An Iceberg REST catalog instead of the SQLite one.
    pub rest: Option<RestCatalogConfig>,
    /// The catalog's name (readers must use the same one).
    #[serde(default = "default_catalog_name")]
    pub catalog_name: String,
    /// Where table data goes: a directory (relative to the pipeline file)
    /// or `s3://bucket/prefix`. With `rest`, the warehouse the catalog
    /// knows (optional: the server may have a default).
    pub warehouse: Option<String>,
    /// The table's namespace (dots separate levels).
    pub namespace: String,
    /// The table's name.
    pub table: String,
    /// What a row is made of: `value` (default: the record value's
    /// top-level JSON fields, by column name) or `dead-letter` (the record
    /// as it came in with why and where it was dead-lettered: see
    /// [`TableRows::DeadLetter`]).
    #[serde(default)]
    pub rows: TableRows,
    /// The table's columns (for a new table; checked against an existing
    /// one). Absent: the table must exist, or with `rows = "dead-letter"`
    /// the dead-letter columns.
    #[serde(default)]
    pub columns: Vec<IcebergColumn>,
    /// An Avro schema file (`.avsc`, a record of primitive fields) the
    /// columns are derived from instead of `columns`: a field is required
    /// unless it is a union with `null`; `int`, `long`, `float`, `double`,
    /// `boolean`, `string`, `bytes`, `enum` (as string) and the logical
    /// types `date`, `timestamp-millis`/`-micros` (as `timestamptz`),
    /// `local-timestamp-*` (as `timestamp`), `decimal` and `uuid`.
    pub avro_schema: Option<PathBuf>,
    /// Partition fields of a new table: `day(col)`, `hour(col)`,
    /// `month(col)`, `year(col)`, `bucket(N, col)`, `truncate(W, col)`,
    /// `identity(col)` or just `col`.
    #[serde(default)]
    pub partition: Vec<String>,
    /// Data files roll when they reach this size (and at every barrier).
    #[serde(default = "default_target_file_size_mb")]
    pub target_file_size_mb: u64,
    /// S3 settings of an `s3://` warehouse (credentials from the AWS
    /// environment variables).
    #[serde(default)]
    pub s3: S3Options,
}

/// `rest = { uri = ".." }` of an Iceberg sink: a catalog speaking the
/// Iceberg REST protocol (Polaris, Gravitino, Lakekeeper, Nessie,
/// Unity, Apache's reference server).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestCatalogConfig {
    /// The catalog's base URI (`http://host:8181`).
    pub uri: String,
    /// Environment variable holding a bearer token, if the catalog wants
    /// one.
    pub token_env: Option<String>,
    /// Environment variable holding an OAuth2 client credential
    /// (`client_id:client_secret`), if the catalog wants one.
    pub credential_env: Option<String>,
    /// Further catalog properties, as iceberg-rust's REST catalog takes
    /// them (e.g. `prefix`, `oauth2-server-uri`, `scope`).
    #[serde(default)]
    pub properties: std::collections::BTreeMap<String, String>,
    /// Properties the server adds (a tenant's granted `token` or
    /// `credential`); never read from a pipeline file.
    #[serde(skip)]
    pub granted_properties: crate::connectors::SecretMap,
}

fn default_catalog_name() -> String {
    "sluice".into()
}

fn default_target_file_size_mb() -> u64 {
    128
}

/// A column of `[sink.iceberg] columns`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcebergColumn {
    /// The column (and JSON field) name.
    pub name: String,
    /// `boolean`, `int`, `long`, `float`, `double`, `decimal(P, S)`,
    /// `string`, `binary`, `date`, `timestamp` or `timestamptz`.
    #[serde(rename = "type")]
    pub column_type: String,
    /// Whether every row must have it.
    #[serde(default)]
    pub required: bool,
}

/// The columns of an Avro record schema (see
/// [`IcebergSinkConfig::avro_schema`]).
pub fn columns_from_avro(schema: &apache_avro::Schema) -> Result<Vec<IcebergColumn>, String> {
    use apache_avro::Schema as Avro;
    let Avro::Record(record) = schema else {
        return Err("the Avro schema must be a record".into());
    };
    record
        .fields
        .iter()
        .map(|field| {
            let (inner, required) = match &field.schema {
                Avro::Union(union) => {
                    let variants = union.variants();
                    let others: Vec<&Avro> =
                        variants.iter().filter(|v| **v != Avro::Null).collect();
                    match others.as_slice() {
                        [only] if variants.len() == 2 => (*only, false),
                        _ => {
                            return Err(format!(
                                "field `{}`: only unions of null and one type map to a column",
                                field.name
                            ));
                        }
                    }
                }
                other => (other, true),
            };
            let column_type = match inner {
                Avro::Boolean => "boolean".to_string(),
                Avro::Int => "int".to_string(),
                Avro::Long => "long".to_string(),
                Avro::Float => "float".to_string(),
                Avro::Double => "double".to_string(),
                Avro::String | Avro::Enum(_) | Avro::Uuid => "string".to_string(),
                Avro::Bytes => "binary".to_string(),
                Avro::Date => "date".to_string(),
                Avro::TimestampMillis | Avro::TimestampMicros => "timestamptz".to_string(),
                Avro::LocalTimestampMillis | Avro::LocalTimestampMicros => "timestamp".to_string(),
                Avro::Decimal(decimal) => format!("decimal({}, {})", decimal.precision, decimal.scale),
                other => {
                    return Err(format!(
                        "field `{}`: Avro type {other:?} has no column type yet (nested types are not supported)",
                        field.name
                    ));
                }
            };
            Ok(IcebergColumn {
                name: field.name.clone(),
                column_type,
                required,
            })
        })
        .collect()
}

/// Errors of setting up an Iceberg sink (reported at start-up).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct IcebergSetupError(pub String);

impl IcebergSinkConfig {
    /// The configured columns, or for a dead-letter table without them,
    /// the dead-letter columns.
    pub fn effective_columns(&self) -> Vec<IcebergColumn> {
        if self.columns.is_empty() && self.rows == TableRows::DeadLetter {
            // The digest naming a dead letter is for tables that upsert;
            // an Iceberg dead-letter table appends.
            return DEAD_LETTER_COLUMNS
                .iter()
                .filter(|column| column.name != DEAD_LETTER_ID)
                .map(|column| IcebergColumn {
                    name: column.name.to_string(),
                    column_type: match column.column_type {
                        DeadLetterType::Text => "string",
                        DeadLetterType::Int => "int",
                        DeadLetterType::Long => "long",
                        DeadLetterType::Timestamp => "timestamptz",
                        DeadLetterType::Boolean => "boolean",
                    }
                    .to_string(),
                    required: column.required,
                })
                .collect();
        }
        self.columns.clone()
    }

    /// The Iceberg schema of the columns (field ids from 1 in order).
    pub fn schema(&self) -> Result<Schema, String> {
        let fields = self
            .effective_columns()
            .iter()
            .enumerate()
            .map(|(index, column)| {
                let primitive = parse_type(&column.column_type)
                    .map_err(|why| format!("column `{}`: {why}", column.name))?;
                let id = index as i32 + 1;
                let field = if column.required {
                    NestedField::required(id, &column.name, Type::Primitive(primitive))
                } else {
                    NestedField::optional(id, &column.name, Type::Primitive(primitive))
                };
                Ok(Arc::new(field))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Schema::builder()
            .with_fields(fields)
            .build()
            .map_err(|error| format!("invalid schema: {error}"))
    }

    /// The partition spec of `partition`, bound to `schema`'s field ids.
    pub fn partition_spec(&self, schema: &Schema) -> Result<UnboundPartitionSpec, String> {
        // The first spec of a new table: id 0 (REST catalogs want the id
        // spelled out).
        let mut spec = UnboundPartitionSpec::builder().with_spec_id(0);
        for text in &self.partition {
            let (transform, column, name) = parse_partition_field(text)?;
            let field = schema
                .field_by_name(&column)
                .ok_or_else(|| format!("partition `{text}`: no column `{column}`"))?;
            spec = spec
                .add_partition_field(field.id, name, transform)
                .map_err(|error| format!("partition `{text}`: {error}"))?;
        }
        Ok(spec.build())
    }

    /// The table identifier.
    pub fn table_ident(&self) -> Result<TableIdent, String> {
        let namespace = NamespaceIdent::from_strs(self.namespace.split('.'))
            .map_err(|error| format!("namespace `{}`: {error}", self.namespace))?;
        Ok(TableIdent::new(namespace, self.table.clone()))
    }
}

/// Parses an Iceberg primitive type name.
fn parse_type(text: &str) -> Result<PrimitiveType, String> {
    let text = text.trim();
    Ok(match text {
        "boolean" => PrimitiveType::Boolean,
        "int" => PrimitiveType::Int,
        "long" => PrimitiveType::Long,
        "float" => PrimitiveType::Float,
        "double" => PrimitiveType::Double,
        "string" => PrimitiveType::String,
        "binary" => PrimitiveType::Binary,
        "date" => PrimitiveType::Date,
        "timestamp" => PrimitiveType::Timestamp,
        "timestamptz" => PrimitiveType::Timestamptz,
        _ => {
            let inner = text
                .strip_prefix("decimal(")
                .and_then(|rest| rest.strip_suffix(')'))
                .ok_or_else(|| format!("unknown type `{text}` (boolean, int, long, float, double, decimal(P, S), string, binary, date, timestamp, timestamptz)"))?;
            let (precision, scale) = inner
                .split_once(',')
                .ok_or_else(|| format!("`{text}`: write decimal(P, S)"))?;
            let precision: u32 = precision
                .trim()
                .parse()
                .map_err(|_| format!("`{text}`: precision is not a number"))?;
            let scale: u32 = scale
                .trim()
                .parse()
                .map_err(|_| format!("`{text}`: scale is not a number"))?;
            if !(1..=38).contains(&precision) || scale > precision {
                return Err(format!(
                    "`{text}`: precision must be 1 to 38 and scale at most the precision"
                ));
            }
            PrimitiveType::Decimal { precision, scale }
        }
    })
}

/// `day(at)` → (day, `at`, `at_day`); `bucket(16, id)` → (bucket[16],
/// `id`, `id_bucket`); `col` → identity.
fn parse_partition_field(text: &str) -> Result<(Transform, String, String), String> {
    let text = text.trim();
    let Some((function, rest)) = text.split_once('(') else {
        return Ok((Transform::Identity, text.to_string(), text.to_string()));
    };
    let arguments = rest
        .strip_suffix(')')
        .ok_or_else(|| format!("partition `{text}`: missing `)`"))?;
    let arguments: Vec<&str> = arguments.split(',').map(str::trim).collect();
    let function = function.trim();
    let (transform, column) = match (function, arguments.as_slice()) {
        ("identity", [column]) => (Transform::Identity, *column),
        ("year", [column]) => (Transform::Year, *column),
        ("month", [column]) => (Transform::Month, *column),
        ("day", [column]) => (Transform::Day, *column),
        ("hour", [column]) => (Transform::Hour, *column),
        ("bucket", [count, column]) => (
            Transform::Bucket(
                count
                    .parse()
                    .map_err(|_| format!("partition `{text}`: `{count}` is not a number"))?,
            ),
            *column,
        ),
        ("truncate", [width, column]) => (
            Transform::Truncate(
                width
                    .parse()
                    .map_err(|_| format!("partition `{text}`: `{width}` is not a number"))?,
            ),
            *column,
        ),
        _ => {
            return Err(format!(
                "partition `{text}`: write day(col), hour(col), month(col), year(col), bucket(N, col), truncate(W, col), identity(col) or col"
            ));
        }
    };
    Ok((
        transform,
        column.to_string(),
        format!("{column}_{function}"),
    ))
}

/// The catalog of `config`; `base` resolves relative paths.
pub(crate) async fn open_catalog(
    config: &IcebergSinkConfig,
    base: &std::path::Path,
) -> Result<Arc<dyn Catalog>, IcebergSetupError> {
    match (&config.catalog, &config.rest) {
        (Some(path), None) => open_sql_catalog(config, path, base).await,
        (None, Some(rest)) => open_rest_catalog(config, rest).await,
        _ => Err(IcebergSetupError(
            "give `catalog` (a SQLite file) or `rest = { uri = \"..\" }`, one of them".into(),
        )),
    }
}

/// The SQL catalog on the SQLite file `path`, created if missing, with its
/// warehouse.
async fn open_sql_catalog(
    config: &IcebergSinkConfig,
    path: &std::path::Path,
    base: &std::path::Path,
) -> Result<Arc<dyn Catalog>, IcebergSetupError> {
    let catalog_path = base.join(path);
    if let Some(parent) = catalog_path.parent() {
        std::fs::create_dir_all(parent).map_err(|error| {
            IcebergSetupError(format!("cannot create {}: {error}", parent.display()))
        })?;
    }
    let Some(warehouse) = &config.warehouse else {
        return Err(IcebergSetupError(
            "a SQLite catalog needs `warehouse` (a directory or s3://bucket/prefix)".into(),
        ));
    };
    let warehouse = if warehouse.contains("://") {
        warehouse.clone()
    } else {
        let path = base.join(warehouse);
        std::fs::create_dir_all(&path).map_err(|error| {
            IcebergSetupError(format!(
                "cannot create warehouse {}: {error}",
                path.display()
            ))
        })?;
        let path = path
            .canonicalize()
            .map_err(|error| IcebergSetupError(format!("warehouse {}: {error}", path.display())))?;
        format!("file://{}", path.display())
    };
    let mut props = HashMap::from([
        (
            "uri".to_string(),
            format!("sqlite:{}?mode=rwc", catalog_path.display()),
        ),
        ("warehouse".to_string(), warehouse),
        ("sql_bind_style".to_string(), "QMark".to_string()),
    ]);
    props.extend(s3_properties(&config.s3));
    let what = format!("the Iceberg catalog {}", catalog_path.display());
    let catalog = load_catalog(
        iceberg_catalog_sql::SqlCatalogBuilder::default(),
        &config.catalog_name,
        props,
        &what,
    )
    .await?;
    Ok(Arc::new(catalog))
}

/// Loads a catalog with `builder`, reading and writing table files through
/// OpenDAL (local files and S3); `what` names it in the error.
async fn load_catalog<B: CatalogBuilder>(
    builder: B,
    name: &str,
    props: HashMap<String, String>,
    what: &str,
) -> Result<B::C, IcebergSetupError> {
    builder
        .with_storage_factory(Arc::new(
            iceberg_storage_opendal::OpenDalResolvingStorageFactory::new(),
        ))
        .load(name, props)
        .await
        .map_err(|error| IcebergSetupError(format!("cannot open {what}: {error}")))
}

/// A REST catalog client; the catalog is asked for its configuration now,
/// so that a catalog that does not answer stops the pipeline at start-up.
async fn open_rest_catalog(
    config: &IcebergSinkConfig,
    rest: &RestCatalogConfig,
) -> Result<Arc<dyn Catalog>, IcebergSetupError> {
    let mut props: HashMap<String, String> = rest.properties.clone().into_iter().collect();
    props.insert("uri".into(), rest.uri.clone());
    if let Some(warehouse) = &config.warehouse {
        props.insert("warehouse".into(), warehouse.clone());
    }
    for (variable, property) in [
        (&rest.token_env, "token"),
        (&rest.credential_env, "credential"),
    ] {
        if let Some(variable) = variable {
            let value = std::env::var(variable).map_err(|_| {
                IcebergSetupError(format!("environment variable `{variable}` is not set"))
            })?;
            props.insert(property.into(), value);
        }
    }
    props.extend(rest.granted_properties.exposed());
    props.extend(s3_properties(&config.s3));
    let what = format!("the REST catalog {}", rest.uri);
    let catalog = load_catalog(
        iceberg_catalog_rest::RestCatalogBuilder::default(),
        &config.catalog_name,
        props,
        &what,
    )
    .await?;
    catalog.list_namespaces(None).await.map_err(|error| {
        IcebergSetupError(format!(
            "the REST catalog {} does not answer: {error}",
            rest.uri
        ))
    })?;
    Ok(Arc::new(catalog))
}

/// `config` with its columns derived from its `avro_schema`, if it names
/// one (`base` resolves the path).
pub(crate) fn with_avro_columns(
    config: &IcebergSinkConfig,
    base: &std::path::Path,
) -> Result<IcebergSinkConfig, IcebergSetupError> {
    let mut config = config.clone();
    if let Some(path) = &config.avro_schema {
        if !config.columns.is_empty() {
            return Err(IcebergSetupError(
                "give `columns` or `avro_schema`, not both".into(),
            ));
        }
        let path = base.join(path);
        let text = std::fs::read_to_string(&path).map_err(|error| {
            IcebergSetupError(format!("cannot read {}: {error}", path.display()))
        })?;
        let schema = apache_avro::Schema::parse_str(&text).map_err(|error| {
            IcebergSetupError(format!("invalid Avro schema {}: {error}", path.display()))
        })?;
        config.columns = columns_from_avro(&schema)
            .map_err(|why| IcebergSetupError(format!("{}: {why}", path.display())))?;
    }
    Ok(config)
}

/// Writes and deletes a small file where the table's data files go, so that
/// an unwritable warehouse stops the pipeline at start-up rather than at
/// its first checkpoint.
pub(crate) async fn probe_warehouse(
    table: &iceberg::table::Table,
    open_id: &str,
) -> Result<(), IcebergSetupError> {
    let location = format!(
        "{}/data/.sluice-write-probe-{open_id}",
        table.metadata().location().trim_end_matches('/')
    );
    let unwritable = |error: iceberg::Error| {
        IcebergSetupError(format!(
            "the warehouse is not writable ({location}): {error}"
        ))
    };
    let file_io = table.file_io();
    file_io
        .new_output(&location)
        .map_err(unwritable)?
        .write(bytes::Bytes::from_static(b"sluice"))
        .await
        .map_err(unwritable)?;
    file_io.delete(&location).await.map_err(unwritable)
}

/// FileIO properties of an S3 warehouse: the endpoint and region of the
/// pipeline file, the granted credentials or else those of the AWS
/// environment variables.
fn s3_properties(options: &S3Options) -> Vec<(String, String)> {
    let mut props = Vec::new();
    if let Some(endpoint) = &options.endpoint {
        props.push(("s3.endpoint".into(), endpoint.clone()));
    }
    if let Some(region) = options
        .region
        .clone()
        .or_else(|| std::env::var("AWS_REGION").ok())
    {
        props.push(("s3.region".into(), region));
    }
    if options.path_style.unwrap_or(options.endpoint.is_some()) {
        props.push(("s3.path-style-access".into(), "true".into()));
    }
    if let Some(credentials) = &options.credentials {
        props.push(("s3.access-key-id".into(), credentials.access_key_id.clone()));
        props.push((
            "s3.secret-access-key".into(),
            credentials.secret_access_key.clone(),
        ));
        if let Some(token) = &credentials.session_token {
            props.push(("s3.session-token".into(), token.clone()));
        }
        return props;
    }
    for (variable, property) in [
        ("AWS_ACCESS_KEY_ID", "s3.access-key-id"),
        ("AWS_SECRET_ACCESS_KEY", "s3.secret-access-key"),
        ("AWS_SESSION_TOKEN", "s3.session-token"),
    ] {
        if let Ok(value) = std::env::var(variable) {
            props.push((property.into(), value));
        }
    }
    props
}

/// Loads the table, creating its namespace and the table itself if
/// missing; refuses an existing table whose schema does not fit. Several
/// writers may open the table at once (the tasks of a scaled-out pipeline):
/// a creation that fails because another writer created the namespace or
/// the table in the meantime is not an error, the table is loaded.
pub(crate) async fn ensure_table(
    catalog: &dyn Catalog,
    config: &IcebergSinkConfig,
) -> Result<iceberg::table::Table, IcebergSetupError> {
    let ident = config.table_ident().map_err(IcebergSetupError)?;
    let table_exists = || async {
        catalog
            .table_exists(&ident)
            .await
            .map_err(|error| IcebergSetupError(format!("catalog: {error}")))
    };
    if !table_exists().await? {
        match create_table(catalog, config, &ident).await {
            Ok(table) => return Ok(table),
            // Created by another writer meanwhile: load it below.
            Err(_) if table_exists().await? => {}
            Err(error) => return Err(error),
        }
    }
    let table = catalog
        .load_table(&ident)
        .await
        .map_err(|error| IcebergSetupError(format!("cannot load table {ident}: {error}")))?;
    check_schema(config, table.metadata().current_schema()).map_err(IcebergSetupError)?;
    Ok(table)
}

/// Creates the table `ident` (and its namespace, unless it exists).
async fn create_table(
    catalog: &dyn Catalog,
    config: &IcebergSinkConfig,
    ident: &TableIdent,
) -> Result<iceberg::table::Table, IcebergSetupError> {
    if config.effective_columns().is_empty() {
        return Err(IcebergSetupError(format!(
            "table {ident} does not exist and no `columns` are given to create it"
        )));
    }
    let schema = config.schema().map_err(IcebergSetupError)?;
    let spec = config.partition_spec(&schema).map_err(IcebergSetupError)?;
    let namespace = ident.namespace().clone();
    let namespace_exists = || async {
        catalog
            .namespace_exists(&namespace)
            .await
            .map_err(|error| IcebergSetupError(format!("catalog: {error}")))
    };
    if !namespace_exists().await? {
        let created = catalog.create_namespace(&namespace, HashMap::new()).await;
        // Another writer may have created it meanwhile.
        if let Err(error) = created
            && !namespace_exists().await?
        {
            return Err(IcebergSetupError(format!(
                "cannot create namespace {namespace:?}: {error}"
            )));
        }
    }
    let creation = TableCreation::builder()
        .name(config.table.clone())
        .schema(schema)
        .partition_spec(spec)
        .build();
    catalog
        .create_table(&namespace, creation)
        .await
        .map_err(|error| IcebergSetupError(format!("cannot create table {ident}: {error}")))
}

/// An existing table fits when it has every configured column with the
/// same type, and requires no column the configuration lacks.
fn check_schema(config: &IcebergSinkConfig, table: &Schema) -> Result<(), String> {
    let wanted = config.schema()?;
    for field in wanted.as_struct().fields() {
        let Some(existing) = table.field_by_name(&field.name) else {
            return Err(format!(
                "the existing table has no column `{}` (its schema: {})",
                field.name,
                describe(table)
            ));
        };
        if existing.field_type != field.field_type {
            return Err(format!(
                "column `{}` is {} in the existing table, not {}",
                field.name, existing.field_type, field.field_type
            ));
        }
    }
    if !config.effective_columns().is_empty() {
        for existing in table.as_struct().fields() {
            if existing.required && wanted.field_by_name(&existing.name).is_none() {
                return Err(format!(
                    "the existing table requires column `{}`, which the pipeline does not write",
                    existing.name
                ));
            }
        }
    }
    Ok(())
}

fn describe(schema: &Schema) -> String {
    schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name, f.field_type))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_partition_fields_parse() {
        assert_eq!(
            parse_type("decimal(10, 2)"),
            Ok(PrimitiveType::Decimal {
                precision: 10,
                scale: 2
            })
        );
        assert!(parse_type("decimal(2, 5)").is_err());
        assert!(parse_type("text").unwrap_err().contains("unknown type"));
        assert_eq!(
            parse_partition_field("bucket(16, id)"),
            Ok((Transform::Bucket(16), "id".into(), "id_bucket".into()))
        );
        assert_eq!(
            parse_partition_field("day(at)"),
            Ok((Transform::Day, "at".into(), "at_day".into()))
        );
        assert_eq!(
            parse_partition_field("region"),
            Ok((Transform::Identity, "region".into(), "region".into()))
        );
        assert!(parse_partition_field("week(at)").is_err());
    }
}
