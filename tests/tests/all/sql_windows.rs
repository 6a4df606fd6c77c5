//! SQL window aggregations in real pipelines (a file source, RocksDB
//! state, file sinks): every window table function, every aggregate,
//! `WHERE`, `HAVING`, several and `NULL` keys, with one and two workers,
//! checked against the same query computed here from the records.

use serde_json::{Value, json};
use sluice_tests::{read_json_lines, run_pipeline_to_end};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Event times start here (2023-11-14 22:13:20 UTC).
const BASE: i64 = 1_700_000_000_000;

/// One input record as the model sees it.
#[derive(Debug, Clone)]
struct Input {
    id: i64,
    key: Option<String>,
    user: Option<i64>,
    /// An integer, a double, `NULL`, or a string (which `SUM` cannot take).
    price: Value,
    name: Option<String>,
    ts: i64,
}

/// Records in arrival order: event times unique, out of order within
/// blocks of 8 (80 ms, well within the pipeline's out-of-orderness).
fn inputs() -> Vec<Input> {
    let order = [3, 0, 6, 1, 7, 2, 5, 4];
    let names = ["ann", "bob", "Zoë", "", "dan", "ann"];
    (0..2400)
        .map(|i: i64| {
            let block = i / 8;
            let ts = BASE + (block * 8 + order[(i % 8) as usize]) * 10 + 3;
            Input {
                id: i,
                key: (i % 13 != 5).then(|| format!("k{}", i % 4)),
                user: (i % 17 != 3).then_some(i % 3),
                price: match i % 29 {
                    4 => Value::Null,
                    9 => json!(format!("{i}")),
                    11 => json!(i as f64 / 4.0),
                    _ => json!(i % 50 - 5),
                },
                name: (i % 19 != 2).then(|| names[(i % 6) as usize].to_string()),
                ts,
            }
        })
        .collect()
}

fn line(input: &Input) -> String {
    let mut object = serde_json::Map::new();
    object.insert("id".into(), json!(input.id));
    if let Some(key) = &input.key {
        object.insert("key".into(), json!(key));
    }
    if input.id % 2 == 0 {
        object.insert("user".into(), json!(input.user));
    } else if let Some(user) = input.user {
        object.insert("user".into(), json!(user));
    }
    object.insert("price".into(), input.price.clone());
    if let Some(name) = &input.name {
        object.insert("name".into(), json!(name));
    }
    object.insert("ts".into(), json!(input.ts));
    Value::Object(object).to_string()
}

/// A window `[start, end)`.
type Window = (i64, i64);

/// The windows of a record at `t` (as the query's window function cuts).
#[derive(Debug, Clone, Copy)]
enum Windows {
    Tumble(i64),
    Hop { slide: i64, size: i64 },
    Cumulate { step: i64, size: i64 },
}

impl Windows {
    fn of(self, t: i64) -> Vec<Window> {
        match self {
            Windows::Tumble(size) => {
                let start = t - t.rem_euclid(size);
                vec![(start, start + size)]
            }
            Windows::Hop { slide, size } => {
                let last = t - t.rem_euclid(slide);
                (0..size / slide)
                    .map(|k| last - k * slide)
                    .map(|start| (start, start + size))
                    .collect()
            }
            Windows::Cumulate { step, size } => {
                let start = t - t.rem_euclid(size);
                (1..=size / step)
                    .map(|k| (start, start + k * step))
                    .filter(|(_, end)| *end > t)
                    .collect()
            }
        }
    }
}

/// The aggregates of one window and group, as the model computes them.
#[derive(Debug, Default)]
struct Group {
    rows: i64,
    prices: i64,
    int_sum: i128,
    float_sum: f64,
    any_float: bool,
    distinct_names: BTreeSet<String>,
    min_name: Option<String>,
    max_price: Option<f64>,
    max_price_json: Value,
    /// (event time, name) of the earliest and latest record with a name.
    first_name: Option<(i64, String)>,
    last_price: Option<(i64, Value)>,
}

impl Group {
    fn add(&mut self, input: &Input) {
        self.rows += 1;
        if let Value::Number(n) = &input.price {
            self.prices += 1;
            match n.as_i64() {
                Some(i) => self.int_sum += i128::from(i),
                None => {
                    self.any_float = true;
                    self.float_sum += n.as_f64().unwrap();
                }
            }
            let price = n.as_f64().unwrap();
            if self.max_price.is_none_or(|max| price > max) {
                self.max_price = Some(price);
                self.max_price_json = input.price.clone();
            }
            if self.last_price.as_ref().is_none_or(|(t, _)| input.ts >= *t) {
                self.last_price = Some((input.ts, input.price.clone()));
            }
        }
        if let Some(name) = &input.name {
            self.distinct_names.insert(name.clone());
            if self.min_name.as_ref().is_none_or(|min| name < min) {
                self.min_name = Some(name.clone());
            }
            if self.first_name.as_ref().is_none_or(|(t, _)| input.ts < *t) {
                self.first_name = Some((input.ts, name.clone()));
            }
        }
    }

    fn sum(&self) -> Value {
        match (self.prices, self.any_float) {
            (0, _) => Value::Null,
            (_, true) => json!(self.int_sum as f64 + self.float_sum),
            (_, false) => json!(i64::try_from(self.int_sum).unwrap()),
        }
    }

    /// Flink's AVG: integer division while every price is an integer.
    fn avg(&self) -> Value {
        match (self.prices, self.any_float) {
            (0, _) => Value::Null,
            (n, true) => json!((self.int_sum as f64 + self.float_sum) / n as f64),
            (n, false) => json!(i64::try_from(self.int_sum / i128::from(n)).unwrap()),
        }
    }
}

/// `ms` as the query writes a `TIMESTAMP_LTZ(3)`.
fn timestamp(ms: i64) -> Value {
    let time = chrono::DateTime::from_timestamp_millis(ms).unwrap();
    json!(time.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string())
}

/// Writes the input and runs `operators` on it with `settings` in
/// `[pipeline]`; returns the outputs and the dead letters.
fn run(dir: &std::path::Path, settings: &str, operators: &str) -> (Vec<Value>, Vec<Value>) {
    let input = dir.join("orders.jsonl");
    if !input.exists() {
        let lines: Vec<String> = inputs().iter().map(line).collect();
        std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    }
    let output = dir.join("out.jsonl");
    let dead = dir.join("dead.jsonl");
    let _ = std::fs::remove_file(&output);
    let _ = std::fs::remove_file(&dead);
    let pipeline = format!(
        "[pipeline]\nname = \"sql-windows\"\nbatch_size = 100\nmax_out_of_orderness_ms = 1000\n{settings}\n\n[source.file]\npath = {input:?}\ntimestamp_field = \"ts\"\n\n{operators}\n[sink.file]\npath = {output:?}\n\n[dead_letter.file]\npath = {dead:?}\nformat = \"record\"\n"
    );
    run_pipeline_to_end(&pipeline, Duration::from_secs(120));
    (read_json_lines(&output), read_json_lines(&dead))
}

/// Doubles rounded (sums of doubles may add in another order), then sorted.
fn normalised(rows: Vec<Value>) -> Vec<String> {
    fn round(value: Value) -> Value {
        match value {
            Value::Number(n) if n.as_i64().is_none() => {
                json!((n.as_f64().unwrap() * 1e6).round() / 1e6)
            }
            Value::Object(map) => map.into_iter().map(|(k, v)| (k, round(v))).collect(),
            other => other,
        }
    }
    let mut rows: Vec<String> = rows.into_iter().map(|row| round(row).to_string()).collect();
    rows.sort();
    rows
}

const EVERY_AGGREGATE: &str = "COUNT(*) AS n, COUNT(price) AS priced, COUNT(DISTINCT name) AS names, \
     SUM(price) AS total, AVG(price) AS mean, MIN(name) AS first_alphabetically, MAX(price) AS top, \
     FIRST_VALUE(name) AS first_name, LAST_VALUE(price) AS last_price";

/// The model's row for a group: the query's keys, then every aggregate.
fn every_aggregate(keys: serde_json::Map<String, Value>, window: Window, group: &Group) -> Value {
    let mut row = keys;
    row.insert("window_start".into(), timestamp(window.0));
    row.insert("window_end".into(), timestamp(window.1));
    row.insert("n".into(), json!(group.rows));
    row.insert("priced".into(), json!(group.prices));
    row.insert("names".into(), json!(group.distinct_names.len()));
    row.insert("total".into(), group.sum());
    row.insert("mean".into(), group.avg());
    row.insert("first_alphabetically".into(), json!(group.min_name));
    row.insert("top".into(), group.max_price_json.clone());
    row.insert(
        "first_name".into(),
        json!(group.first_name.as_ref().map(|(_, n)| n)),
    );
    row.insert(
        "last_price".into(),
        group
            .last_price
            .as_ref()
            .map_or(Value::Null, |(_, p)| p.clone()),
    );
    Value::Object(row)
}

/// Groups `inputs` that pass `filter` by `key_of` and the windows of
/// `windows`, skipping records whose price is a string (dead letters).
fn model_groups(
    windows: Windows,
    filter: impl Fn(&Input) -> bool,
    key_of: impl Fn(&Input) -> Vec<Value>,
) -> BTreeMap<(String, Window), (Vec<Value>, Group)> {
    let mut groups: BTreeMap<(String, Window), (Vec<Value>, Group)> = BTreeMap::new();
    for input in inputs() {
        if !filter(&input) || input.price.is_string() {
            continue;
        }
        let key = key_of(&input);
        for window in windows.of(input.ts) {
            groups
                .entry((Value::Array(key.clone()).to_string(), window))
                .or_insert_with(|| (key.clone(), Group::default()))
                .1
                .add(&input);
        }
    }
    groups
}

/// The ids of the records `run` dead-lettered, each with the SQL reason.
fn dead_ids(dead: &[Value]) -> Vec<i64> {
    let mut ids: Vec<i64> = dead
        .iter()
        .map(|record| {
            let reason = record["headers"]["sluice.dlq.reason"]
                .as_str()
                .unwrap_or_default();
            assert!(
                reason.contains("SQL: SUM needs a number, found STRING"),
                "{record}"
            );
            let value: Value = serde_json::from_str(record["value"].as_str().unwrap()).unwrap();
            value["id"].as_i64().unwrap()
        })
        .collect();
    ids.sort();
    ids
}

#[test]
fn a_tumbling_window_with_every_aggregate_two_keys_where_and_having_equals_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let query = format!(
        "SELECT key, `user`, window_start, window_end, {EVERY_AGGREGATE} \
         FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' SECOND)) \
         WHERE id % 7 <> 0 GROUP BY window_start, window_end, key, `user` HAVING COUNT(*) > 1"
    );
    let operators = format!("[[operators]]\nname = \"agg\"\nsql = {query:?}\n");
    let groups = model_groups(
        Windows::Tumble(1000),
        |input| input.id % 7 != 0,
        |input| vec![json!(input.key), json!(input.user)],
    );
    let expected: Vec<Value> = groups
        .iter()
        .filter(|(_, (_, group))| group.rows > 1)
        .map(|((_, window), (key, group))| {
            let keys = [
                ("key".to_string(), key[0].clone()),
                ("user".to_string(), key[1].clone()),
            ];
            every_aggregate(keys.into_iter().collect(), *window, group)
        })
        .collect();
    assert!(expected.len() > 100, "{}", expected.len());
    let expected_dead: Vec<i64> = inputs()
        .iter()
        .filter(|input| input.id % 7 != 0 && input.price.is_string())
        .map(|input| input.id)
        .collect();
    for workers in ["workers = 1", "workers = 2"] {
        let (outputs, dead) = run(dir.path(), workers, &operators);
        assert_eq!(
            normalised(outputs),
            normalised(expected.clone()),
            "{workers}"
        );
        assert_eq!(dead_ids(&dead), expected_dead, "{workers}");
    }
}

#[test]
fn hopping_and_cumulating_windows_equal_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "HOP(TABLE input, DESCRIPTOR(ts), INTERVAL '500' MILLISECOND, INTERVAL '2' SECOND)",
            Windows::Hop {
                slide: 500,
                size: 2000,
            },
        ),
        (
            "CUMULATE(TABLE input, DESCRIPTOR(ts), INTERVAL '250' MILLISECOND, INTERVAL '1' SECOND)",
            Windows::Cumulate {
                step: 250,
                size: 1000,
            },
        ),
    ];
    for (function, windows) in cases {
        let query = format!(
            "SELECT key, window_start, window_end, {EVERY_AGGREGATE} FROM TABLE({function}) \
             GROUP BY key, window_start, window_end"
        );
        let operators = format!("[[operators]]\nname = \"agg\"\nsql = {query:?}\n");
        let expected: Vec<Value> = model_groups(windows, |_| true, |input| vec![json!(input.key)])
            .iter()
            .map(|((_, window), (key, group))| {
                let keys = [("key".to_string(), key[0].clone())];
                every_aggregate(keys.into_iter().collect(), *window, group)
            })
            .collect();
        let (outputs, dead) = run(dir.path(), "workers = 2", &operators);
        assert_eq!(normalised(outputs), normalised(expected), "{function}");
        // A record in several windows is dead-lettered once.
        let expected_dead: Vec<i64> = inputs()
            .iter()
            .filter(|input| input.price.is_string())
            .map(|input| input.id)
            .collect();
        assert_eq!(dead_ids(&dead), expected_dead, "{function}");
    }
}

#[test]
fn session_windows_per_key_equal_the_model() {
    let dir = tempfile::tempdir().unwrap();
    // Sessions of a key: records of that key at most 120 ms apart.
    let query = "SELECT key, window_start, window_end, COUNT(*) AS n, SUM(id) AS ids, \
                 FIRST_VALUE(id) AS first_id, LAST_VALUE(id) AS last_id, MAX(ts) AS last_ts \
                 FROM TABLE(SESSION(TABLE input PARTITION BY key, DESCRIPTOR(ts), INTERVAL '120' MILLISECOND)) \
                 WHERE id % 5 <> 1 GROUP BY key, window_start, window_end";
    let operators = format!("[[operators]]\nname = \"sessions\"\nsql = {query:?}\n");
    let mut by_key: BTreeMap<String, Vec<Input>> = BTreeMap::new();
    for input in inputs().into_iter().filter(|i| i.id % 5 != 1) {
        by_key
            .entry(json!(input.key).to_string())
            .or_default()
            .push(input);
    }
    let mut expected = Vec::new();
    for (key, mut records) in by_key {
        records.sort_by_key(|r| r.ts);
        let mut sessions: Vec<Vec<Input>> = Vec::new();
        for record in records {
            match sessions.last_mut() {
                // Windows that touch merge, as in Flink.
                Some(session) if record.ts <= session.last().unwrap().ts + 120 => {
                    session.push(record)
                }
                _ => sessions.push(vec![record]),
            }
        }
        for session in sessions {
            let start = session[0].ts;
            let end = session.last().unwrap().ts + 120;
            expected.push(json!({
                "key": serde_json::from_str::<Value>(&key).unwrap(),
                "window_start": timestamp(start),
                "window_end": timestamp(end),
                "n": session.len(),
                "ids": session.iter().map(|r| r.id).sum::<i64>(),
                "first_id": session[0].id,
                "last_id": session.last().unwrap().id,
                "last_ts": session.last().unwrap().ts,
            }));
        }
    }
    assert!(expected.len() > 50, "{}", expected.len());
    for workers in ["workers = 1", "workers = 2"] {
        let (outputs, dead) = run(dir.path(), workers, &operators);
        assert!(dead.is_empty(), "{dead:?}");
        assert_eq!(
            normalised(outputs),
            normalised(expected.clone()),
            "{workers}"
        );
    }
}

#[test]
fn a_window_over_another_windows_results_cascades_on_window_time() {
    // Per key and second, then per 5 s over those rows: the second query's
    // event time is the first's `window_time` (its rows' event time).
    let dir = tempfile::tempdir().unwrap();
    let first = "SELECT key, window_start, window_end, window_time, COUNT(*) AS n \
                 FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND)) \
                 GROUP BY key, window_start, window_end";
    let second = "SELECT window_start, window_end, SUM(n) AS total, COUNT(*) AS key_seconds, MAX(n) AS busiest \
                  FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(window_time), INTERVAL '5' SECOND)) \
                  GROUP BY window_start, window_end";
    let operators = format!(
        "[[operators]]\nname = \"per-second\"\nsql = {first:?}\n\n[[operators]]\nname = \"per-5s\"\nsql = {second:?}\n"
    );
    let mut seconds: BTreeMap<(String, i64), i64> = BTreeMap::new();
    for input in inputs() {
        let start = input.ts - input.ts.rem_euclid(1000);
        *seconds
            .entry((json!(input.key).to_string(), start))
            .or_default() += 1;
    }
    let mut fives: BTreeMap<i64, (i64, i64, i64)> = BTreeMap::new();
    for ((_, start), n) in seconds {
        let window_time = start + 999;
        let five = window_time - window_time.rem_euclid(5000);
        let entry = fives.entry(five).or_default();
        entry.0 += n;
        entry.1 += 1;
        entry.2 = entry.2.max(n);
    }
    let expected: Vec<Value> = fives
        .into_iter()
        .map(|(start, (total, key_seconds, busiest))| {
            json!({
                "window_start": timestamp(start),
                "window_end": timestamp(start + 5000),
                "total": total,
                "key_seconds": key_seconds,
                "busiest": busiest,
            })
        })
        .collect();
    let (outputs, dead) = run(dir.path(), "workers = 2", &operators);
    assert!(dead.is_empty(), "{dead:?}");
    assert_eq!(normalised(outputs), normalised(expected));
}
