//! `sluice sql check|explain`: a pipeline file's queries compiled without
//! running anything — whether they are valid (an error points into the SQL
//! with line, column and a caret), and what operators they became.

use sluice_host::config::{LoadedConfig, OperatorConfig, SinkConfig, SourceConfig};
use std::path::Path;

/// Loads `pipeline` (which compiles every query): a line saying how many
/// SQL operators it has, or the first error, located.
pub fn check(pipeline: &Path) -> anyhow::Result<String> {
    let loaded = LoadedConfig::load(pipeline)?;
    let queries = loaded
        .config
        .operators
        .iter()
        .filter(|op| op.is_sql())
        .count();
    Ok(format!(
        "{}: valid, {queries} SQL operator{}\n",
        pipeline.display(),
        if queries == 1 { "" } else { "s" }
    ))
}

/// The operator graph of `pipeline` as it would run: the source, each
/// operator (a SQL operator with its query and what it became), the sinks.
pub fn explain(pipeline: &Path) -> anyhow::Result<String> {
    let loaded = LoadedConfig::load(pipeline)?;
    let config = &loaded.config;
    let mut text = format!("pipeline {}\n", config.pipeline.name);
    text.push_str(&format!("source: {}\n", source(&config.source)));
    for (index, operator) in config.operators.iter().enumerate() {
        text.push_str(&format!("operator {}: {}\n", operator.name, kind(operator)));
        if operator.is_sql() {
            let (query, _) = loaded.sql_query(index)?;
            for line in query.trim().lines() {
                text.push_str(&format!("    | {line}\n"));
            }
            let plan = loaded.sql_plan(index)?;
            text.push_str(match plan {
                sluice_sql::Plan::Project(_) => {
                    "  becomes a projection: one record per record that passes\n"
                }
                sluice_sql::Plan::Window(_) => {
                    "  becomes a window operator keyed by the GROUP BY keys: one record per window and group as the watermark passes the window's end\n"
                }
                sluice_sql::Plan::Join(_) => {
                    "  becomes an interval join keyed by the join keys, then a projection of each joined pair\n"
                }
                sluice_sql::Plan::Deduplicate(_) => {
                    "  becomes a de-duplication keyed by the partition keys (state_ttl_ms bounds how long a key is remembered)\n"
                }
            });
            for line in plan.explain().lines() {
                text.push_str(&format!("  {line}\n"));
            }
        }
    }
    text.push_str(&format!("sink: {}\n", sink(&config.sink)));
    text.push_str(&format!("dead letters: {}\n", sink(&config.dead_letter)));
    for (name, side) in &config.side_outputs {
        text.push_str(&format!("side output {name}: {}\n", sink(side)));
    }
    Ok(text)
}

fn kind(operator: &OperatorConfig) -> String {
    if operator.is_sql() {
        "SQL".to_string()
    } else if operator.join.is_some() {
        "interval join".to_string()
    } else if let Some(window) = &operator.window {
        let aggregate = match &operator.plugin {
            Some(plugin) => format!("plugin {}", plugin.display()),
            None => "built-in aggregate".to_string(),
        };
        match window.spec() {
            Ok(spec) => format!("window {spec:?}, {aggregate}"),
            Err(_) => format!("window, {aggregate}"),
        }
    } else {
        match &operator.plugin {
            Some(plugin) => format!("plugin {}", plugin.display()),
            None => "transform".to_string(),
        }
    }
}

fn source(source: &SourceConfig) -> String {
    match source {
        SourceConfig::Generator(_) => "generator".to_string(),
        SourceConfig::File(file) => format!("file {}", file.path.display()),
        SourceConfig::Kafka(kafka) => format!("Kafka topics {}", kafka.topics.join(", ")),
    }
}

fn sink(sink: &SinkConfig) -> String {
    match sink {
        SinkConfig::File(file) => format!("file {}", file.path.display()),
        SinkConfig::Stdout { .. } => "standard output".to_string(),
        SinkConfig::Stderr { .. } => "standard error".to_string(),
        SinkConfig::Blackhole {} => "blackhole".to_string(),
        SinkConfig::Iceberg(_) => "Iceberg table".to_string(),
        SinkConfig::Kafka(kafka) => format!("Kafka topic {}", kafka.topic),
        SinkConfig::Postgres(_) => "PostgreSQL table".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_shows_each_query_and_what_it_became_and_check_locates_errors() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("orders.jsonl");
        std::fs::write(&input, "{}\n").unwrap();
        let file = dir.path().join("p.toml");
        let pipeline = format!(
            "[pipeline]\nname = \"p\"\n\n[source.file]\npath = {input:?}\n\n[[operators]]\nname = \"big\"\nsql = \"SELECT id, UPPER(name) AS name FROM orders WHERE amount > 10\"\n\n[sink]\nblackhole = {{}}\n"
        );
        std::fs::write(&file, &pipeline).unwrap();
        let explained = explain(&file).unwrap();
        assert!(explained.contains("operator big: SQL\n"), "{explained}");
        assert!(
            explained.contains(
                "  where:   (amount > 10)\n  columns: id = id (copied), name = UPPER(name)\n"
            ),
            "{explained}"
        );
        assert!(check(&file).unwrap().contains("valid, 1 SQL operator\n"));
        // A window query: what the window operator keeps and emits.
        let window = format!(
            "[pipeline]\nname = \"p\"\n\n[source.file]\npath = {input:?}\ntimestamp_field = \"ts\"\n\n[[operators]]\nname = \"totals\"\nsql = \"SELECT name, window_end, SUM(amount) AS total FROM TABLE(HOP(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '5' MINUTE)) GROUP BY name, window_start, window_end HAVING COUNT(*) > 2\"\n\n[sink]\nblackhole = {{}}\n"
        );
        std::fs::write(&file, &window).unwrap();
        let explained = explain(&file).unwrap();
        for expected in [
            "becomes a window operator keyed by the GROUP BY keys",
            "window:  HOP slide 60000 ms, size 300000 ms on event time `ts`",
            "keys:    name",
            "aggregates: SUM(amount), COUNT(*)",
            "having:  (COUNT(*) > 2)",
            "columns: name = name, window_end = window_end, total = SUM(amount)",
        ] {
            assert!(explained.contains(expected), "{expected}\n{explained}");
        }
        std::fs::write(&file, pipeline.replace("AS name", "AS id")).unwrap();
        let error = check(&file).unwrap_err().to_string();
        assert!(error.contains("p.toml:9:"), "{error}");
        assert!(
            error.contains("two output columns are named `id`"),
            "{error}"
        );
    }
}
