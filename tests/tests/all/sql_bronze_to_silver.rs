//! The seeds' Bronze → Silver step in SQL, beside its plugin version
//! (`examples/bronze-to-silver`: the `validate-dedup` plugin, then a
//! per-customer tumbling sum), on the bronze generator's events (5 %
//! duplicates, 5 % invalid: a missing or string amount, an empty id, a
//! truncated line): validation as a `WHERE`, de-duplication as Flink's
//! `ROW_NUMBER` pattern, the 1-minute totals as a `TUMBLE`. (The PII mask,
//! a UDF component, is not here yet: issue 40.)

use serde_json::Value;
use sluice_tests::{plugin, read_json_lines, run_pipeline_to_end};
use std::collections::BTreeMap;
use std::time::Duration;

const EVENTS: u64 = 20_000;

const SILVER: &str = "SELECT event_id, user_id, email, card_number, amount, currency, note, ts FROM ( \
    SELECT *, ROW_NUMBER() OVER (PARTITION BY event_id ORDER BY PROCTIME()) AS rn FROM input \
    WHERE event_id <> '' AND user_id IS NOT NULL AND email IS NOT NULL AND card_number IS NOT NULL \
      AND amount > 0 AND currency IS NOT NULL AND ts IS NOT NULL \
  ) WHERE rn = 1";

const TOTALS: &str = "SELECT user_id, window_start, window_end, SUM(amount) AS total \
    FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) \
    GROUP BY user_id, window_start, window_end";

/// Runs `operators` on the bronze events; the outputs.
fn run(dir: &std::path::Path, name: &str, operators: &str) -> Vec<Value> {
    let output = dir.join(format!("{name}.jsonl"));
    let pipeline = format!(
        "[pipeline]\nname = \"{name}\"\nmax_out_of_orderness_ms = 5000\n\n[source.generator]\nprofile = \"bronze\"\ncount = {EVENTS}\nevents_per_second = 200\n\n{operators}\n[sink.file]\npath = {output:?}\n\n[dead_letter]\nblackhole = {{}}\n"
    );
    run_pipeline_to_end(&pipeline, Duration::from_secs(120));
    read_json_lines(&output)
}

fn validate_dedup() -> String {
    format!(
        "[[operators]]\nname = \"validate-dedup\"\nplugin = {:?}\nconfig = {{ required = \"event_id:string,user_id:integer,email:string,card_number:string,amount:number,currency:string,ts:integer\", id_field = \"event_id\" }}\nstate_ttl_ms = 600_000\n",
        plugin("validate-dedup")
    )
}

fn sql_operator(name: &str, query: &str) -> String {
    format!("[[operators]]\nname = \"{name}\"\nsql = {query:?}\nstate_ttl_ms = 600_000\n")
}

fn sorted(rows: &[Value]) -> Vec<String> {
    let mut rows: Vec<String> = rows.iter().map(Value::to_string).collect();
    rows.sort();
    rows
}

#[test]
fn silver_in_sql_equals_the_plugin_version() {
    let dir = tempfile::tempdir().unwrap();
    let from_sql = run(dir.path(), "silver-sql", &sql_operator("silver", SILVER));
    let from_plugin = run(dir.path(), "silver-plugin", &validate_dedup());
    assert!(
        from_plugin.len() > EVENTS as usize * 8 / 10,
        "{}",
        from_plugin.len()
    );
    assert!(from_plugin.len() < EVENTS as usize, "{}", from_plugin.len());
    assert_eq!(sorted(&from_sql), sorted(&from_plugin));
}

#[test]
fn per_customer_minute_totals_in_sql_equal_the_plugin_and_toml_version() {
    let dir = tempfile::tempdir().unwrap();
    let from_sql = run(
        dir.path(),
        "totals-sql",
        &format!(
            "{}\n{}",
            sql_operator("silver", SILVER),
            sql_operator("totals", TOTALS)
        ),
    );
    let from_toml = run(
        dir.path(),
        "totals-toml",
        &format!(
            "{}\n[[operators]]\nname = \"totals\"\nwindow = {{ tumbling_ms = 60_000 }}\nkey_field = \"user_id\"\naggregate = {{ function = \"sum\", field = \"amount\" }}\n",
            validate_dedup()
        ),
    );
    let ms = |text: &Value| {
        chrono::NaiveDateTime::parse_from_str(text.as_str().unwrap(), "%Y-%m-%d %H:%M:%S%.3fZ")
            .unwrap()
            .and_utc()
            .timestamp_millis()
    };
    let cents = |total: &Value| (total.as_f64().unwrap() * 100.0).round() as i64;
    let got: BTreeMap<(i64, i64), i64> = from_sql
        .iter()
        .map(|r| {
            (
                (r["user_id"].as_i64().unwrap(), ms(&r["window_start"])),
                cents(&r["total"]),
            )
        })
        .collect();
    let expected: BTreeMap<(i64, i64), i64> = from_toml
        .iter()
        .map(|r| {
            (
                (
                    r["key"].as_i64().unwrap(),
                    r["window_start"].as_i64().unwrap(),
                ),
                cents(&r["result"]),
            )
        })
        .collect();
    assert!(expected.len() > 100, "{}", expected.len());
    assert_eq!(got.len(), from_sql.len(), "one row per customer and minute");
    assert_eq!(got, expected);
}
