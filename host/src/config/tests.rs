//! The pipeline file's parsing and validation, against files that name
//! what they get wrong.

use super::*;
use std::path::Path;

const GOOD: &str = r#"
[pipeline]
name = "p"

[source.generator]
count = 10

[sink]
blackhole = {}
"#;

fn parse(text: &str) -> Result<LoadedConfig, ConfigError> {
    LoadedConfig::parse(Path::new("p.toml"), text)
}

#[test]
fn minimal_file_parses_with_defaults() {
    let loaded = parse(GOOD).unwrap();
    assert_eq!(loaded.config.pipeline.batch_size.get(), 256);
    assert!(matches!(
        loaded.config.dead_letter,
        SinkConfig::Stderr { .. }
    ));
}

#[test]
fn unknown_field_names_file_line_and_field() {
    let text = GOOD.replace("count = 10", "count = 10\nrat = 5");
    let error = parse(&text).unwrap_err();
    assert_eq!(
        (error.line, error.field.as_deref()),
        (7, Some("source.generator.rat")),
        "{error}"
    );
    assert!(error.message.contains("unknown field `rat`"), "{error}");
    assert!(error.to_string().starts_with("p.toml:7:"), "{error}");
}

#[test]
fn wrong_type_names_the_field() {
    let text = GOOD.replace("count = 10", "count = \"ten\"");
    let error = parse(&text).unwrap_err();
    assert_eq!(
        (error.line, error.field.as_deref()),
        (6, Some("source.generator.count")),
        "{error}"
    );
}

#[test]
fn invalid_value_is_located() {
    let text = GOOD.replace("count = 10", "count = 10\nrate = 0");
    let error = parse(&text).unwrap_err();
    assert_eq!(
        (error.line, error.field.as_deref()),
        (7, Some("source.generator.rate")),
        "{error}"
    );
}

#[test]
fn numeric_settings_out_of_bounds_name_file_line_and_field() {
    let operator = "[[operators]]\nname = \"w\"\nwindow = { tumbling_ms = 1000 }\naggregate = { function = \"count\" }\n";
    let cases = [
        (
            "[pipeline]\nname = \"p\"\nworkers = 0\n",
            "pipeline.workers",
        ),
        (
            "[pipeline]\nname = \"p\"\nworkers = 200\n",
            "pipeline.workers",
        ),
        (
            "[pipeline]\nname = \"p\"\nmax_parallelism = 0\n",
            "pipeline.max_parallelism",
        ),
        (
            "[pipeline]\nname = \"p\"\nmax_parallelism = 40000\n",
            "pipeline.max_parallelism",
        ),
        (
            "[pipeline]\nname = \"p\"\nbatch_size = 0\n",
            "pipeline.batch_size",
        ),
        (
            "[pipeline]\nname = \"p\"\nbatch_size = 10000000\n",
            "pipeline.batch_size",
        ),
        (
            "[pipeline]\nname = \"p\"\nchannel_capacity = 0\n",
            "pipeline.channel_capacity",
        ),
        (
            "[pipeline]\nname = \"p\"\nidle_timeout_ms = 0\n",
            "pipeline.idle_timeout_ms",
        ),
        (
            "[pipeline]\nname = \"p\"\nmax_out_of_orderness_ms = 9223372036854775807\n",
            "pipeline.max_out_of_orderness_ms",
        ),
        (
            "[pipeline]\nname = \"p\"\n[checkpoints]\ninterval_ms = 0\n",
            "checkpoints.interval_ms",
        ),
        (
            "[pipeline]\nname = \"p\"\n[checkpoints]\nretained = 0\n",
            "checkpoints.retained",
        ),
    ];
    for (head, field) in cases {
        let text = format!("{head}{}", GOOD.replace("[pipeline]\nname = \"p\"\n", ""));
        let error = parse(&text)
            .err()
            .unwrap_or_else(|| panic!("{field} accepted"));
        assert_eq!(error.field.as_deref(), Some(field), "{error}");
        assert!(error.line > 0, "{error}");
    }
    for (setting, field) in [
        ("deadline_ms = 0", "operators[0].deadline_ms"),
        ("init_deadline_ms = 0", "operators[0].init_deadline_ms"),
        ("memory_limit_mb = 0", "operators[0].memory_limit_mb"),
        ("memory_limit_mb = 5000", "operators[0].memory_limit_mb"),
        (
            "fault_storm_threshold = 0",
            "operators[0].fault_storm_threshold",
        ),
        (
            "allowed_lateness_ms = 9223372036854775807",
            "operators[0].allowed_lateness_ms",
        ),
        ("state_ttl_ms = 0", "operators[0].state_ttl_ms"),
    ] {
        let text = format!("{GOOD}{operator}{setting}\n");
        let error = parse(&text)
            .err()
            .unwrap_or_else(|| panic!("{setting} accepted"));
        assert_eq!(error.field.as_deref(), Some(field), "{error}");
        assert_eq!(error.line, GOOD.lines().count() + 5, "{error}");
    }
    // Beyond i64: not TOML, refused where it stands.
    let text = format!("{GOOD}{operator}deadline_ms = 18446744073709551615\n");
    let error = parse(&text).expect_err("an integer beyond i64");
    assert_eq!(error.line, GOOD.lines().count() + 5, "{error}");
    let huge_window = format!(
        "{GOOD}{}",
        operator.replace("tumbling_ms = 1000", "tumbling_ms = 9223372036854775807")
    );
    let error = parse(&huge_window).expect_err("a window of 292 million years");
    assert_eq!(
        error.field.as_deref(),
        Some("operators[0].window"),
        "{error}"
    );
}

#[test]
fn several_builtin_aggregates_parse_and_bad_ones_name_their_field() {
    let operator = "[[operators]]\nname = \"w\"\nwindow = { tumbling_ms = 1000 }\n";
    let good = format!(
        "{GOOD}{operator}aggregates = [\n  {{ name = \"n\", function = \"count\" }},\n  {{ name = \"longest\", function = \"max\", field = \"length(note)\" }},\n]\n"
    );
    let loaded = parse(&good).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        loaded.config.operators[0].builtin_aggregate(),
        Some(Ok(_))
    ));
    for (setting, message) in [
        (
            "aggregates = [{ name = \"n\", function = \"count\" }, { name = \"n\", function = \"count\" }]",
            "used twice",
        ),
        (
            "aggregates = [{ name = \"u\", function = \"max\", field = \"upper(note)\" }]",
            "unknown function",
        ),
        ("aggregates = []", "empty"),
        (
            "aggregate = { function = \"count\" }\naggregates = [{ name = \"n\", function = \"count\" }]",
            "not both",
        ),
    ] {
        let error = parse(&format!("{GOOD}{operator}{setting}\n"))
            .err()
            .unwrap_or_else(|| panic!("{setting} accepted"));
        assert_eq!(
            error.field.as_deref(),
            Some("operators[0].aggregates"),
            "{error}"
        );
        assert!(error.line > GOOD.lines().count(), "{error}");
        assert!(error.to_string().contains(message), "{setting}: {error}");
    }
}

#[test]
fn a_scaled_out_source_needs_checkpoints_and_no_bound() {
    let kafka = "[pipeline]\nname = \"p\"\n\n[source.kafka]\nbootstrap_servers = \"b:9092\"\ntopics = [\"in\"]\ngroup_id = \"g\"\nscale_out = true\n{extra}\n[sink]\nblackhole = {}\n";
    let file = |extra: &str| kafka.replace("{extra}", extra);
    for (extra, message) in [
        ("", "add `[checkpoints]`"),
        ("bounded = true\n[checkpoints]\n", "cannot be shared"),
    ] {
        let error = parse(&file(extra)).unwrap_err();
        assert_eq!(
            error.field.as_deref(),
            Some("source.kafka.scale_out"),
            "{error}"
        );
        assert_eq!(error.line, 8, "{error}");
        assert!(error.message.contains(message), "{error}");
    }
    let loaded = parse(&file("[checkpoints]\n")).unwrap();
    assert!(matches!(&loaded.config.source, SourceConfig::Kafka(k) if k.scale_out));
}

#[test]
fn syntax_error_is_located() {
    let text = GOOD.replace("count = 10", "count = = 10");
    let error = parse(&text).unwrap_err();
    assert_eq!(error.line, 6, "{error}");
}

proptest::proptest! {
    /// Any text as a pipeline file: an error or a config, never a
    /// panic, and an error located within the file.
    #[test]
    fn arbitrary_pipeline_text_never_panics(text in "\\PC{0,200}") {
        if let Err(error) = parse(&text) {
            proptest::prop_assert!(error.line <= text.lines().count() + 1, "{}", error);
        }
    }

    /// A valid file with one line replaced by a random setting.
    #[test]
    fn mutated_pipeline_files_never_panic(
        line in 0usize..8,
        key in "[a-z_]{1,20}",
        value in "(-?[0-9]{1,22}|\"[a-z./]{0,10}\"|true|\\{ *\\}|\\[[0-9, ]{0,6}\\])",
    ) {
        let mut lines: Vec<String> = GOOD.lines().map(str::to_string).collect();
        let index = line.min(lines.len() - 1);
        lines[index] = format!("{key} = {value}");
        let text = lines.join("\n");
        if let Err(error) = parse(&text) {
            proptest::prop_assert!(error.line <= lines.len() + 1, "{}", error);
        }
    }
}

#[test]
fn a_sql_operator_compiles_its_query_at_load() {
    let text = GOOD.replace(
        "[sink]",
        "[[operators]]\nname = \"q\"\nsql = \"SELECT id, UPPER(name) AS name FROM input WHERE amount > 1\"\n\n[sink]",
    );
    let loaded = parse(&text).unwrap();
    assert!(loaded.config.operators[0].is_sql());
    assert!(matches!(
        loaded.sql_plan(0),
        Ok(sluice_sql::Plan::Project(_))
    ));
}

#[test]
fn a_sql_error_points_into_the_query_inside_the_pipeline_file() {
    // The query's second line holds the error: line 12 of the file, the
    // column of `UPPR` there.
    let text = GOOD.replace(
        "[sink]",
        "[[operators]]\nname = \"q\"\nsql = \"\"\"\nSELECT id,\n       UPPR(name) AS name\nFROM input\"\"\"\n\n[sink]",
    );
    let error = parse(&text).unwrap_err();
    assert_eq!(
        (error.line, error.column, error.field.as_deref()),
        (12, 8, Some("operators[0].sql")),
        "{error}"
    );
    assert!(error.message.contains("unknown function `UPPR`"), "{error}");
    assert!(
        error
            .message
            .ends_with("         UPPR(name) AS name\n         ^"),
        "{error}"
    );
}

#[test]
fn a_sql_file_error_names_the_sql_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("q.sql"),
        "SELECT a\nFROM input\nWHERE a +\n",
    )
    .unwrap();
    let file = dir.path().join("p.toml");
    let text = GOOD.replace(
        "[sink]",
        "[[operators]]\nname = \"q\"\nsql_file = \"q.sql\"\n\n[sink]",
    );
    let error = LoadedConfig::parse(&file, &text).unwrap_err();
    assert_eq!(error.file, dir.path().join("q.sql"), "{error}");
    assert_eq!((error.line, error.column), (3, 10), "{error}");
}

#[test]
fn a_sql_operator_takes_nothing_a_plugin_or_window_takes() {
    let text = GOOD.replace(
        "[sink]",
        "[[operators]]\nname = \"q\"\nsql = \"SELECT * FROM input\"\nwindow = { tumbling_ms = 1000 }\n\n[sink]",
    );
    let error = parse(&text).unwrap_err();
    assert_eq!(
        error.field.as_deref(),
        Some("operators[0].window"),
        "{error}"
    );
    let text = GOOD.replace(
        "[sink]",
        "[[operators]]\nname = \"q\"\nsql = \"SELECT * FROM input\"\nsql_file = \"q.sql\"\n\n[sink]",
    );
    let error = parse(&text).unwrap_err();
    assert!(error.message.contains("not both"), "{error}");
}

#[test]
fn a_sql_window_is_keyed_and_names_the_event_time_the_pipeline_reads() {
    let per_second = "SELECT customer_id, window_start, window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY customer_id, window_start, window_end";
    let cascade = |time: &str| {
        format!(
            "SELECT window_start, window_end, SUM(n) AS n FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR({time}), INTERVAL '1' MINUTE)) GROUP BY window_start, window_end"
        )
    };
    let operators = |second: &str| {
        GOOD.replace(
            "[sink]",
            &format!(
                "[[operators]]\nname = \"first\"\nsql = {per_second:?}\n\n[[operators]]\nname = \"second\"\nsql = {second:?}\n\n[sink]"
            ),
        )
    };
    // The bronze generator's event time is `ts`; after a window it is the
    // window's `window_time`.
    let loaded = parse(&operators(&cascade("window_time"))).unwrap();
    assert!(loaded.config.operators.iter().all(|op| op.is_keyed()));
    let error = parse(&operators(&cascade("ts"))).unwrap_err();
    assert_eq!(error.field.as_deref(), Some("operators[1].sql"), "{error}");
    assert!(
        error.message.contains("`ts` is not the event time")
            && error.message.contains("`window_time`"),
        "{error}"
    );
    // A projection is not keyed.
    let loaded = parse(&GOOD.replace(
        "[sink]",
        "[[operators]]\nname = \"q\"\nsql = \"SELECT * FROM input\"\n\n[sink]",
    ))
    .unwrap();
    assert!(!loaded.config.operators[0].is_keyed());
    // A SQL window fires once: no allowed lateness.
    let text = GOOD.replace(
        "[sink]",
        &format!("[[operators]]\nname = \"q\"\nsql = {per_second:?}\nallowed_lateness_ms = 1000\n\n[sink]"),
    );
    let error = parse(&text).unwrap_err();
    assert_eq!(
        error.field.as_deref(),
        Some("operators[0].allowed_lateness_ms"),
        "{error}"
    );
}
