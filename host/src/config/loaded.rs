//! A pipeline file read, located and validated: [`LoadedConfig`], which
//! every builder asks for its sections and for errors that name the file,
//! line and field.

use std::path::{Path, PathBuf};

use super::{
    CheckpointsSection, ConfigError, FieldMap, MAX_WORKERS, PipelineConfig, SinkConfig,
    SourceConfig, StateBackendKind,
};
use crate::connectors::kafka::{SinkValueFormat, ValueFormatName};

/// A parsed and validated pipeline file, with what is needed to locate
/// later errors (e.g. a plugin that fails to load) in it.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The configuration.
    pub config: PipelineConfig,
    /// The file it came from.
    pub file: PathBuf,
    fields: FieldMap,
}

impl LoadedConfig {
    /// Reads, parses and validates the pipeline file at `file`.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|error| ConfigError {
            file: file.to_path_buf(),
            line: 0,
            column: 0,
            field: None,
            message: format!("cannot read pipeline file: {error}"),
        })?;
        Self::parse(file, &text)
    }

    /// Parses and validates `text` as if read from `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfigError> {
        let fields = FieldMap::new(text);
        let config: PipelineConfig = toml::from_str(text).map_err(|error| {
            let offset = error.span().map_or(0, |span| span.start);
            let (line, column) = fields.line_column(offset);
            ConfigError {
                file: file.to_path_buf(),
                line,
                column,
                field: fields.field_at(offset).map(str::to_string),
                message: error.message().trim().to_string(),
            }
        })?;
        if let Some((message, offset)) = fields.refused() {
            let (line, column) = fields.line_column(offset);
            return Err(ConfigError {
                file: file.to_path_buf(),
                line,
                column,
                field: None,
                message: message.to_string(),
            });
        }
        let mut loaded = LoadedConfig {
            config,
            file: file.to_path_buf(),
            fields,
        };
        // Which SQL operators are keyed, in order (a query's event-time
        // column depends on the windows before it); a query that does not
        // compile is reported, located, by `validate`.
        for index in 0..loaded.config.operators.len() {
            if loaded.config.operators[index].is_sql() {
                let keyed = loaded.sql_plan(index).is_ok_and(|plan| plan.is_keyed());
                loaded.config.operators[index].sql_keyed = keyed;
            }
        }
        loaded.validate()?;
        Ok(loaded)
    }

    /// An error about `field` (dotted path), located in the file.
    pub fn error_at(&self, field: &str, message: impl Into<String>) -> ConfigError {
        let (line, column) = self
            .fields
            .span_of(field)
            .map_or((0, 0), |span| self.fields.line_column(span.start));
        ConfigError {
            file: self.file.clone(),
            line,
            column,
            field: Some(field.to_string()),
            message: message.into(),
        }
    }

    /// The query of the SQL operator `operators[index]` (from `sql`, or
    /// read from `sql_file`) and the field it came from.
    pub fn sql_query(&self, index: usize) -> Result<(String, &'static str), ConfigError> {
        let operator = &self.config.operators[index];
        match (&operator.sql, &operator.sql_file) {
            (Some(sql), None) => Ok((sql.clone(), "sql")),
            (None, Some(file)) => {
                let path = self.resolve_path(file);
                std::fs::read_to_string(&path)
                    .map(|sql| (sql, "sql_file"))
                    .map_err(|error| {
                        self.error_at(
                            &format!("operators[{index}].sql_file"),
                            format!("cannot read {}: {error}", path.display()),
                        )
                    })
            }
            (Some(_), Some(_)) => Err(self.error_at(
                &format!("operators[{index}].sql_file"),
                "give the query in `sql` or in `sql_file`, not both",
            )),
            (None, None) => Err(self.error_at(
                &format!("operators[{index}]"),
                "not a SQL operator (no `sql` or `sql_file`)",
            )),
        }
    }

    /// The query of `operators[index]` compiled, or an error pointing into
    /// the SQL: in the `.sql` file of `sql_file`, or inside the pipeline
    /// file's `sql` string where its text stands there as it is (no escapes).
    pub fn sql_plan(&self, index: usize) -> Result<sluice_sql::Plan, ConfigError> {
        let (sql, field) = self.sql_query(index)?;
        let catalog = self.sql_catalog(index);
        sluice_sql::compile(&sql, &catalog).map_err(|error| {
            let shown = error.show(&sql);
            let excerpt = shown.split_once('\n').map_or("", |(_, rest)| rest);
            let message = if excerpt.is_empty() {
                error.message.clone()
            } else {
                format!("{}\n{excerpt}", error.message)
            };
            let path = format!("operators[{index}].{field}");
            if field == "sql_file"
                && let Some(file) = &self.config.operators[index].sql_file
            {
                return ConfigError {
                    file: self.resolve_path(file),
                    line: usize::try_from(error.line).unwrap_or(0),
                    column: usize::try_from(error.column).unwrap_or(0),
                    field: Some(path),
                    message,
                };
            }
            let mut located = self.error_at(&path, message);
            if let Some((line, column)) = self.position_in_string(&path, &sql, &error) {
                located.line = line;
                located.column = column;
            }
            located
        })
    }

    /// What the query of `operators[index]` may read: its input as
    /// `input` (and the source's table names; the first operator also the
    /// source's views, Nexmark's `bid`, `auction` and `person`), and the
    /// event time's
    /// column — the source's, or `window_time` after a window (whose
    /// results carry their window's last millisecond as event time).
    fn sql_catalog(&self, index: usize) -> sluice_sql::Catalog {
        let source = &self.config.source;
        let mut catalog = sluice_sql::Catalog::input(source.table_names());
        // The parts of a stream of several kinds of events, for the
        // operator that reads the source's records as they are.
        if index == 0 {
            for (name, column, value) in source.table_views() {
                catalog = catalog.with_view(name, column, value);
            }
        }
        // An earlier SQL operator is a window if its own query is one
        // (compiled against its own catalog: earlier indexes only).
        let after_window =
            self.config.operators[..index]
                .iter()
                .enumerate()
                .any(|(earlier, op)| {
                    op.window.is_some()
                        || (op.sql_keyed
                            && matches!(self.sql_plan(earlier), Ok(sluice_sql::Plan::Window(_))))
                });
        match after_window {
            true => catalog.with_time_column("window_time"),
            false => match source.time_column() {
                Some(column) => catalog.with_time_column(column),
                None => catalog,
            },
        }
    }

    /// Where `error`'s position in `sql`, the value of the string field
    /// `path`, stands in the pipeline file, if the text stands there as it
    /// is.
    fn position_in_string(
        &self,
        path: &str,
        sql: &str,
        error: &sluice_sql::SqlError,
    ) -> Option<(usize, usize)> {
        let span = self.fields.span_of(path)?;
        let field_text = self.fields.text().get(span.clone())?;
        let start = span.start + field_text.find(sql)?;
        let line_index = usize::try_from(error.line).ok()?.checked_sub(1)?;
        let line_start: usize = sql
            .split_inclusive('\n')
            .take(line_index)
            .map(str::len)
            .sum();
        let line = sql.get(line_start..)?.lines().next().unwrap_or("");
        let column_bytes: usize = line
            .chars()
            .take(usize::try_from(error.column).ok()?.saturating_sub(1))
            .map(char::len_utf8)
            .sum();
        Some(self.fields.line_column(start + line_start + column_bytes))
    }

    /// Checks the SQL operator `operators[index]`: a query and nothing a
    /// plugin, window or join operator takes; the query compiles.
    fn validate_sql_operator(&self, index: usize) -> Result<(), ConfigError> {
        let operator = &self.config.operators[index];
        let others = [
            ("plugin", operator.plugin.is_some()),
            ("window", operator.window.is_some()),
            ("aggregate", operator.aggregate.is_some()),
            ("aggregates", operator.aggregates.is_some()),
            ("join", operator.join.is_some()),
            ("key_field", operator.key_field.is_some()),
            ("key_by", operator.key_by.is_some()),
        ];
        if let Some((field, _)) = others.iter().find(|(_, set)| *set) {
            return Err(self.error_at(
                &format!("operators[{index}].{field}"),
                format!("a SQL operator takes no `{field}`: the query says what it does"),
            ));
        }
        let plan = self.sql_plan(index)?;
        if !plan.is_keyed() {
            return Ok(());
        }
        if operator.allowed_lateness_ms.get() > 0 {
            return Err(self.error_at(
                &format!("operators[{index}].allowed_lateness_ms"),
                "a SQL window emits each window once, when the watermark passes its end (as Flink SQL does); later records go to `late_output`",
            ));
        }
        if let SourceConfig::Kafka(kafka) = &self.config.source
            && kafka.scale_out
        {
            return Err(self.error_at(
                &format!("operators[{index}].sql"),
                "SQL window aggregations do not run in scaled-out pipelines yet; run this pipeline in one process (with `workers`)",
            ));
        }
        Ok(())
    }

    /// `path` relative to the pipeline file's directory.
    pub fn resolve_path(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            return path.to_path_buf();
        }
        self.file
            .parent()
            .map(|dir| dir.join(path))
            .unwrap_or_else(|| path.to_path_buf())
    }

    /// The Avro schema in the file `path` (relative to the pipeline file)
    /// named by `field`, or an error located at `field`.
    pub fn avro_schema(
        &self,
        field: &str,
        path: &Path,
    ) -> Result<apache_avro::Schema, ConfigError> {
        let path = self.resolve_path(path);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| self.error_at(field, format!("cannot read {}: {e}", path.display())))?;
        apache_avro::Schema::parse_str(&text).map_err(|e| {
            self.error_at(
                field,
                format!("invalid Avro schema {}: {e}", path.display()),
            )
        })
    }

    /// The numeric settings whose bounds depend on something else (another
    /// field, the runtime): every other number is a [`Bounded`], checked as
    /// it is read.
    fn validate_numbers(&self) -> Result<(), ConfigError> {
        let c = &self.config;
        let p = &c.pipeline;
        let max_parallelism = p.max_parallelism.get();
        let most_workers = usize::from(max_parallelism).min(MAX_WORKERS);
        if p.workers == 0 || p.workers > most_workers {
            return Err(self.error_at(
                "pipeline.workers",
                format!(
                    "must be between 1 and {most_workers} (at most `max_parallelism` = {max_parallelism}, each worker owns key groups) (found {})",
                    p.workers
                ),
            ));
        }
        let memory_mb = (crate::runtime::RuntimeConfig::default().max_memory_bytes >> 20) as i128;
        for (index, operator) in c.operators.iter().enumerate() {
            if !(1..=memory_mb).contains(&i128::from(operator.memory_limit_mb)) {
                return Err(self.error_at(
                    &format!("operators[{index}].memory_limit_mb"),
                    format!(
                        "must be between 1 and {memory_mb} (the largest memory a plugin instance can have here; a 32-bit WebAssembly memory cannot exceed 4096) (found {})",
                        operator.memory_limit_mb
                    ),
                ));
            }
        }
        let sinks = [("sink", &c.sink), ("dead_letter", &c.dead_letter)]
            .into_iter()
            .map(|(name, sink)| (name.to_string(), sink))
            .chain(
                c.side_outputs
                    .iter()
                    .map(|(name, sink)| (format!("side_outputs.{name}"), sink)),
            );
        for (name, sink) in sinks {
            if let SinkConfig::Iceberg(iceberg) = sink {
                match (&iceberg.catalog, &iceberg.rest, &iceberg.warehouse) {
                    (Some(_), Some(_), _) | (None, None, _) => {
                        return Err(self.error_at(
                            &format!("{name}.iceberg"),
                            "give `catalog` (a SQLite file) or `rest = { uri = \"..\" }`, one of them",
                        ));
                    }
                    (Some(_), None, None) => {
                        return Err(self.error_at(
                            &format!("{name}.iceberg"),
                            "a SQLite catalog needs `warehouse` (a directory or s3://bucket/prefix)",
                        ));
                    }
                    _ => {}
                }
                if iceberg.avro_schema.is_some() && !iceberg.columns.is_empty() {
                    return Err(self.error_at(
                        &format!("{name}.iceberg.avro_schema"),
                        "give `columns` or `avro_schema`, not both",
                    ));
                }
                if let Some(schema) = &iceberg.avro_schema {
                    let schema =
                        self.avro_schema(&format!("{name}.iceberg.avro_schema"), schema)?;
                    crate::connectors::iceberg::columns_from_avro(&schema).map_err(|why| {
                        self.error_at(&format!("{name}.iceberg.avro_schema"), why)
                    })?;
                }
            }
            if let SinkConfig::Kafka(kafka) = sink
                && kafka.value_format == SinkValueFormat::AvroConfluent
            {
                let Some(schema) = &kafka.avro_schema else {
                    return Err(self.error_at(
                        &format!("{name}.kafka.value_format"),
                        "`avro-confluent` needs `avro_schema`",
                    ));
                };
                self.avro_schema(&format!("{name}.kafka.avro_schema"), schema)?;
                if kafka.schema_registry.is_none() {
                    return Err(self.error_at(
                        &format!("{name}.kafka.value_format"),
                        "`avro-confluent` needs `schema_registry = { url = \"..\" }`",
                    ));
                }
            }
        }
        Ok(())
    }

    fn validate_deploy(&self) -> Result<(), ConfigError> {
        let deploy = &self.config.deploy;
        for (field, rate) in [
            ("max_fault_rate", deploy.max_fault_rate),
            ("max_dead_letter_rate", deploy.max_dead_letter_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(self.error_at(&format!("deploy.{field}"), "must be between 0 and 1"));
            }
        }
        Ok(())
    }

    fn validate_checkpoints(&self, checkpoints: &CheckpointsSection) -> Result<(), ConfigError> {
        if checkpoints.max_concurrent != 1 {
            return Err(self.error_at(
                "checkpoints.max_concurrent",
                "only 1 is supported: a checkpoint starts after the previous one completed",
            ));
        }
        if self.config.pipeline.state_backend != StateBackendKind::Rocksdb {
            return Err(self.error_at(
                "pipeline.state_backend",
                "checkpoints need the `rocksdb` state backend",
            ));
        }
        if let Some(storage) = &checkpoints.storage {
            crate::checkpoint::storage_location(storage, &self.file)
                .map_err(|message| self.error_at("checkpoints.storage", message))?;
        }
        Ok(())
    }

    /// `key_by` starts a stage of a scaled-out pipeline: only there, not on
    /// a join (whose inputs are its sides), and a keyed operator after it
    /// keys by the same field.
    fn validate_key_by(&self) -> Result<(), ConfigError> {
        let c = &self.config;
        let scaled_out = matches!(&c.source, SourceConfig::Kafka(k) if k.scale_out);
        let mut stage_key: Option<&str> = None;
        for (index, operator) in c.operators.iter().enumerate() {
            if let Some(key) = &operator.key_by {
                let field = format!("operators[{index}].key_by");
                if !scaled_out {
                    return Err(self.error_at(
                        &field,
                        "a key-by starts a stage of a scaled-out pipeline: set `[source.kafka] scale_out = true`",
                    ));
                }
                if operator.join.is_some() {
                    return Err(self.error_at(&field, "a join is keyed by its sides"));
                }
                if key.trim().is_empty() {
                    return Err(self.error_at(&field, "name a field of the value"));
                }
                stage_key = Some(key);
            }
            if let Some(stage_key) = stage_key
                && operator.window.is_some()
                && operator.key_field.as_deref() != Some(stage_key)
            {
                return Err(self.error_at(
                    &format!("operators[{index}].key_field"),
                    format!("this stage is keyed by `{stage_key}` (the key-by before it): key the window by it too"),
                ));
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let c = &self.config;
        if c.pipeline.name.trim().is_empty() {
            return Err(self.error_at("pipeline.name", "must not be empty"));
        }
        self.validate_numbers()?;
        self.validate_deploy()?;
        match &c.source {
            SourceConfig::Generator(g) => {
                if g.rate == Some(0) {
                    return Err(self.error_at(
                        "source.generator.rate",
                        "must be at least 1 (omit it for no pacing)",
                    ));
                }
                for (field, ratio) in [
                    ("invalid_ratio", g.invalid_ratio),
                    ("duplicate_ratio", g.duplicate_ratio),
                ] {
                    if !(0.0..=1.0).contains(&ratio) {
                        return Err(self.error_at(
                            &format!("source.generator.{field}"),
                            "must be between 0 and 1",
                        ));
                    }
                }
                if g.events_per_second == 0 {
                    return Err(
                        self.error_at("source.generator.events_per_second", "must be at least 1")
                    );
                }
            }
            SourceConfig::File(f) => {
                let path = self.resolve_path(&f.path);
                if !path.is_file() {
                    return Err(self.error_at(
                        "source.file.path",
                        format!("no such file: {}", path.display()),
                    ));
                }
            }
            SourceConfig::Kafka(k) => {
                if k.topics.is_empty() {
                    return Err(self.error_at("source.kafka.topics", "name at least one topic"));
                }
                if k.value_format == ValueFormatName::Avro && k.avro_schema.is_none() {
                    return Err(
                        self.error_at("source.kafka.value_format", "`avro` needs `avro_schema`")
                    );
                }
                if k.value_format == ValueFormatName::AvroConfluent && k.schema_registry.is_none() {
                    return Err(self.error_at(
                        "source.kafka.value_format",
                        "`avro-confluent` needs `schema_registry = { url = \"..\" }`",
                    ));
                }
                if let Some(schema) = &k.avro_schema {
                    self.avro_schema("source.kafka.avro_schema", schema)?;
                }
                if k.scale_out && c.checkpoints.is_none() {
                    return Err(self.error_at(
                        "source.kafka.scale_out",
                        "tasks keep their state in checkpoints every process reads: add `[checkpoints]` (with a storage all of them reach)",
                    ));
                }
                if k.scale_out && k.bounded {
                    return Err(self.error_at(
                        "source.kafka.scale_out",
                        "a bounded read ends when one process has read every partition; it cannot be shared",
                    ));
                }
            }
        }
        if let Some(checkpoints) = &c.checkpoints {
            self.validate_checkpoints(checkpoints)?;
        }
        self.validate_key_by()?;
        let mut names = std::collections::BTreeSet::new();
        for (index, operator) in c.operators.iter().enumerate() {
            if !names.insert(operator.name.as_str()) {
                return Err(self.error_at(
                    &format!("operators[{index}].name"),
                    format!("duplicate operator name `{}`", operator.name),
                ));
            }
            if operator.is_sql() {
                self.validate_sql_operator(index)?;
                continue;
            }
            if let Some(join) = &operator.join {
                if operator.plugin.is_some() || operator.window.is_some() {
                    return Err(self.error_at(
                        &format!("operators[{index}].join"),
                        "a join operator takes no `plugin` or `window`",
                    ));
                }
                join.sides().map_err(|message| {
                    self.error_at(&format!("operators[{index}].join"), message)
                })?;
                continue;
            }
            let builtin = operator.builtin_aggregate();
            if let Some(Err((field, message))) = &builtin {
                return Err(self.error_at(&format!("operators[{index}].{field}"), message.clone()));
            }
            let builtin_field = match operator.aggregates {
                Some(_) => "aggregates",
                None => "aggregate",
            };
            match (&operator.plugin, &operator.window, &builtin) {
                (Some(plugin), None, None) => {
                    let plugin = self.resolve_path(plugin);
                    if !plugin.exists() {
                        return Err(self.error_at(
                            &format!("operators[{index}].plugin"),
                            format!(
                                "no such plugin file or crate directory: {}",
                                plugin.display()
                            ),
                        ));
                    }
                }
                (None, Some(window), Some(_)) => {
                    window.spec().map_err(|message| {
                        self.error_at(&format!("operators[{index}].window"), message)
                    })?;
                }
                (Some(plugin), Some(window), None) => {
                    window.spec().map_err(|message| {
                        self.error_at(&format!("operators[{index}].window"), message)
                    })?;
                    let plugin = self.resolve_path(plugin);
                    if !plugin.exists() {
                        return Err(self.error_at(
                            &format!("operators[{index}].plugin"),
                            format!(
                                "no such aggregate plugin file or directory: {}",
                                plugin.display()
                            ),
                        ));
                    }
                }
                (None, Some(_), None) => {
                    return Err(self.error_at(
                        &format!("operators[{index}].window"),
                        "a window operator needs an `aggregate` (built-in) or a `plugin` (aggregate world)",
                    ));
                }
                (Some(_), Some(_), Some(_)) => {
                    return Err(self.error_at(
                        &format!("operators[{index}].plugin"),
                        "a window operator with a built-in aggregate takes no plugin",
                    ));
                }
                (_, None, Some(_)) => {
                    return Err(self.error_at(
                        &format!("operators[{index}].{builtin_field}"),
                        format!("`{builtin_field}` needs a `window`"),
                    ));
                }
                (None, None, None) => {
                    return Err(self.error_at(
                        &format!("operators[{index}]"),
                        "an operator needs a `plugin` (transform), a `window` with an `aggregate`, a `join` or a `sql` query",
                    ));
                }
            }
        }
        Ok(())
    }
}
