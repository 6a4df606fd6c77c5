//! Nexmark queries written in Flink SQL, run on the generator's events,
//! against the plugin pipelines that compute the same (themselves tested
//! against models in `nexmark_queries` and the plugins' own tests). The
//! generator's stream of events reads as the tables `bid`, `auction` and
//! `person`.

use serde_json::Value;
use sluice_tests::{plugin, read_json_lines, run_pipeline_to_end};
use std::time::Duration;

const EVENTS: u64 = 20_000;

/// Runs `operators` (TOML) on the Nexmark generator's events; returns the
/// output records' values, in order.
fn run(dir: &std::path::Path, name: &str, operators: &str) -> Vec<Value> {
    run_with(dir, name, "", operators)
}

/// [`run`] with more `[pipeline]` settings.
fn run_with(dir: &std::path::Path, name: &str, settings: &str, operators: &str) -> Vec<Value> {
    let output = dir.join(format!("{name}.jsonl"));
    let pipeline = format!(
        "[pipeline]\nname = \"{name}\"\nmax_out_of_orderness_ms = 1000\n{settings}\n\n[source.generator]\nprofile = \"nexmark\"\ncount = {EVENTS}\nevents_per_second = 1_000\nmax_disorder_ms = 500\n\n{operators}\n[sink.file]\npath = {output:?}\n"
    );
    let (_, snapshot) = run_pipeline_to_end(&pipeline, Duration::from_secs(120));
    assert_eq!(snapshot.dead_letters, 0, "{name}: {snapshot:?}");
    read_json_lines(&output)
}

fn sql(query: &str) -> String {
    format!("[[operators]]\nname = \"query\"\nsql = {query:?}\n")
}

fn plugin_operator(name: &str, config: &str) -> String {
    format!(
        "[[operators]]\nname = \"query\"\nplugin = {:?}\nconfig = {{ {config} }}\n",
        plugin(name)
    )
}

#[test]
fn q0_q1_and_q2_in_sql_equal_the_plugin_pipelines() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        // q0, pass-through: the bids as they are (the conversion plugin at
        // a rate of 1).
        (
            "q0",
            "SELECT auction, bidder, price, date_time, extra FROM bid",
            plugin_operator("currency-convert", "rate_per_mille = 1000"),
        ),
        // q1, currency conversion: Flink writes `0.908 * price` (a
        // DECIMAL); in integers, as the plugin computes it.
        (
            "q1",
            "SELECT auction, bidder, price * 908 / 1000 AS price, date_time, extra FROM bid",
            plugin_operator("currency-convert", ""),
        ),
        // q2, selection.
        (
            "q2",
            "SELECT auction, price, bidder FROM bid WHERE MOD(auction, 123) = 0",
            plugin_operator("filter-bids", "modulus = 123"),
        ),
    ];
    for (name, query, plugin_pipeline) in cases {
        let from_sql = run(dir.path(), &format!("{name}-sql"), &sql(query));
        let from_plugin = run(dir.path(), &format!("{name}-plugin"), &plugin_pipeline);
        assert!(!from_sql.is_empty(), "{name}");
        assert_eq!(from_sql, from_plugin, "{name}");
    }
}

#[test]
fn a_window_over_a_view_counts_only_its_events() {
    // Bids per auction over 10 s tumbling windows, from `bid` (the view
    // adds `event_type = 'bid'`): the same as the TOML window after the
    // bid filter.
    let dir = tempfile::tempdir().unwrap();
    let from_sql = run(
        dir.path(),
        "per-auction-sql",
        &sql(
            "SELECT auction, window_end, COUNT(*) AS bids FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) GROUP BY auction, window_start, window_end",
        ),
    );
    let from_toml = run(
        dir.path(),
        "per-auction-toml",
        &format!(
            "{}\n[[operators]]\nname = \"per-auction\"\nwindow = {{ tumbling_ms = 10_000 }}\nkey_field = \"auction\"\naggregate = {{ function = \"count\" }}\n",
            plugin_operator("filter-bids", "modulus = 1")
        ),
    );
    let mut expected: Vec<(u64, i64, u64)> = from_toml
        .iter()
        .map(|r| {
            (
                r["key"].as_u64().unwrap(),
                r["window_end"].as_i64().unwrap(),
                r["result"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut got: Vec<(u64, i64, u64)> = from_sql
        .iter()
        .map(|r| {
            let end = r["window_end"].as_str().unwrap();
            let end = chrono::NaiveDateTime::parse_from_str(end, "%Y-%m-%d %H:%M:%S%.3fZ")
                .unwrap()
                .and_utc()
                .timestamp_millis();
            (
                r["auction"].as_u64().unwrap(),
                end,
                r["bids"].as_u64().unwrap(),
            )
        })
        .collect();
    expected.sort();
    got.sort();
    assert!(expected.len() > 100);
    assert_eq!(got, expected);
}

#[test]
fn q8_as_a_sql_interval_join_equals_the_toml_join() {
    // Persons who opened an auction within 10 s of registering.
    let dir = tempfile::tempdir().unwrap();
    let q8 = sql(
        "SELECT P.id, P.name, A.id AS auction, A.reserve FROM person AS P JOIN auction AS A \
         ON P.id = A.seller AND A.date_time BETWEEN P.date_time AND P.date_time + INTERVAL '10' SECOND",
    );
    let from_sql = run(dir.path(), "q8-sql", &q8);
    let from_toml = run(
        dir.path(),
        "q8-toml",
        "[[operators]]\nname = \"new-users\"\njoin = { left_field = \"event_type\", left_value = \"person\", left_key = \"id\", right_field = \"event_type\", right_value = \"auction\", right_key = \"seller\", lower_ms = 0, upper_ms = 10_000 }\n",
    );
    let mut expected: Vec<String> = from_toml
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r["left"]["id"],
                "name": r["left"]["name"],
                "auction": r["right"]["id"],
                "reserve": r["right"]["reserve"],
            })
            .to_string()
        })
        .collect();
    expected.sort();
    assert!(expected.len() > 10, "{}", expected.len());
    let mut got: Vec<String> = from_sql.iter().map(Value::to_string).collect();
    got.sort();
    assert_eq!(got, expected);
    // Keyed by the join key, the join runs in two workers alike.
    let mut on_two: Vec<String> = run_with(dir.path(), "q8-sql-2", "workers = 2", &q8)
        .iter()
        .map(Value::to_string)
        .collect();
    on_two.sort();
    assert_eq!(on_two, expected);
}

/// A `TIMESTAMP_LTZ(3)` as SQL writes it, in ms.
fn ms(text: &Value) -> i64 {
    let text = text.as_str().unwrap();
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.3fZ")
        .unwrap()
        .and_utc()
        .timestamp_millis()
}

#[test]
fn q7_as_a_window_top_n_equals_the_highest_bid_plugin() {
    // The highest bid of every 10 s window; ties go to the earliest, then
    // the lowest auction and bidder ids, as the plugin breaks them.
    let dir = tempfile::tempdir().unwrap();
    let query = "SELECT auction, bidder, price, date_time, window_end FROM ( \
                   SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end \
                                                ORDER BY price DESC, date_time, auction, bidder) AS rownum \
                   FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
                 ) WHERE rownum <= 1";
    let mut got: Vec<(i64, Value)> = run(dir.path(), "q7-sql", &sql(query))
        .into_iter()
        .map(|mut row| {
            let end = ms(&row["window_end"]);
            row.as_object_mut().unwrap().remove("window_end");
            (end, row)
        })
        .collect();
    let plugin = format!(
        "[[operators]]\nname = \"highest-bid\"\nplugin = {:?}\nwindow = {{ tumbling_ms = 10_000 }}\n",
        plugin("highest-bid")
    );
    let mut expected: Vec<(i64, Value)> = run(dir.path(), "q7-plugin", &plugin)
        .into_iter()
        .filter(|r| !r["result"].is_null())
        .map(|r| {
            let mut best = r["result"].clone();
            best.as_object_mut().unwrap().remove("bids_in_window");
            (r["window_end"].as_i64().unwrap(), best)
        })
        .collect();
    got.sort_by_key(|(end, _)| *end);
    expected.sort_by_key(|(end, _)| *end);
    assert!(expected.len() >= 2, "{}", expected.len());
    assert_eq!(got, expected);
}

#[test]
fn q5_as_a_window_aggregation_then_a_top_n_equals_the_hot_items_pipeline() {
    // Bids per auction over 10 s windows every 2 s, then per window the
    // auctions with the most (ties all kept: RANK).
    let dir = tempfile::tempdir().unwrap();
    let counts = "SELECT auction, window_start, window_end, COUNT(*) AS num \
                  FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
                  GROUP BY auction, window_start, window_end";
    let hot = "SELECT window_end, auction, num FROM ( \
                 SELECT *, RANK() OVER (PARTITION BY window_start, window_end ORDER BY num DESC) AS rk \
                 FROM input \
               ) WHERE rk <= 1";
    let operators = format!(
        "[[operators]]\nname = \"counts\"\nsql = {counts:?}\n\n[[operators]]\nname = \"hot\"\nsql = {hot:?}\n"
    );
    let toml = format!(
        "[[operators]]\nname = \"bids\"\nplugin = {:?}\nconfig = {{ modulus = 1 }}\n\n[[operators]]\nname = \"bids-per-auction\"\nwindow = {{ sliding_ms = 10_000, slide_ms = 2_000 }}\nkey_field = \"auction\"\naggregate = {{ function = \"count\" }}\n\n[[operators]]\nname = \"hot-items\"\nplugin = {:?}\nwindow = {{ tumbling_ms = 2_000 }}\nkey_field = \"window_end\"\n",
        plugin("filter-bids"),
        plugin("hot-items")
    );
    let expected: std::collections::BTreeMap<i64, (u64, Vec<u64>)> =
        run(dir.path(), "q5-toml", &toml)
            .iter()
            .map(|r| {
                let result = &r["result"];
                let mut auctions: Vec<u64> = result["auctions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_u64().unwrap())
                    .collect();
                auctions.sort();
                (
                    result["window_end"].as_i64().unwrap(),
                    (result["bids"].as_u64().unwrap(), auctions),
                )
            })
            .collect();
    assert!(expected.len() > 10, "{}", expected.len());
    for settings in ["workers = 1", "workers = 2"] {
        let mut got: std::collections::BTreeMap<i64, (u64, Vec<u64>)> = Default::default();
        for row in run_with(dir.path(), "q5-sql", settings, &operators) {
            let entry = got.entry(ms(&row["window_end"])).or_default();
            entry.0 = row["num"].as_u64().unwrap();
            entry.1.push(row["auction"].as_u64().unwrap());
        }
        for (_, auctions) in got.values_mut() {
            auctions.sort();
        }
        assert_eq!(got, expected, "{settings}");
    }
}
