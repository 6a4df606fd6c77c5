//! Window plans compiled and run on rows.

use super::*;
use crate::plan::{Plan, compile};

fn window(sql: &str) -> WindowPlan {
    let catalog = Catalog::input(["bids".to_string()]).with_time_column("ts");
    match compile(sql, &catalog) {
        Ok(Plan::Window(plan)) => plan,
        Ok(other) => panic!("not a window plan: {other:?}"),
        Err(error) => panic!("{}", error.show(sql)),
    }
}

fn error(sql: &str) -> String {
    let catalog = Catalog::input(["bids".to_string()]).with_time_column("ts");
    match compile(sql, &catalog) {
        Ok(plan) => panic!("compiled: {plan:?}"),
        Err(error) => error.show(sql),
    }
}

#[test]
fn window_functions_compile_with_positional_and_named_arguments() {
    let plan = window(
        "SELECT key, window_start, window_end, COUNT(*) AS cnt, SUM(CHAR_LENGTH(`value`)) AS total_len \
         FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND)) \
         GROUP BY key, window_start, window_end",
    );
    assert_eq!(plan.window, WindowFunction::Tumble { size: 1000 });
    assert_eq!(plan.key_paths(), [FieldPath::Top("key".into())]);
    assert_eq!(plan.aggregates.len(), 2);
    let plan = window(
        "SELECT auction, COUNT(*) FROM TABLE(HOP(DATA => TABLE bids, TIMECOL => DESCRIPTOR(ts), SLIDE => INTERVAL '2' SECOND, SIZE => INTERVAL '10' SECOND)) GROUP BY auction, window_start, window_end",
    );
    assert_eq!(
        plan.window,
        WindowFunction::Hop {
            slide: 2000,
            size: 10_000
        }
    );
    let plan = window(
        "SELECT user, window_start, COUNT(*) FROM TABLE(SESSION(TABLE input PARTITION BY user, DESCRIPTOR(ts), INTERVAL '5' MINUTE)) GROUP BY user, window_start, window_end",
    );
    assert_eq!(plan.window, WindowFunction::Session { gap: 300_000 });
    let plan = window(
        "SELECT window_end, SUM(price) FROM TABLE(CUMULATE(TABLE input, DESCRIPTOR(rowtime), INTERVAL '1' MINUTE, INTERVAL '1' HOUR)) GROUP BY window_start, window_end",
    );
    assert_eq!(
        plan.window,
        WindowFunction::Cumulate {
            step: 60_000,
            size: 3_600_000
        }
    );
    assert!(plan.keys.is_empty());
}

#[test]
fn a_window_row_becomes_the_selected_columns_and_having_drops_rows() {
    let plan = window(
        "SELECT key, window_start, COUNT(*) * 10 AS tens, MAX(price) AS top \
         FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND)) \
         WHERE price > 0 GROUP BY window_start, window_end, key HAVING COUNT(*) > 1",
    );
    let record = |key: &str, price: i64| {
        vec![
            Some(sluice_json::FieldValue::Str(key.into())),
            Some(sluice_json::FieldValue::Int(price)),
        ]
    };
    let mut accumulators = plan.create();
    for (price, time) in [(3, 5), (-1, 6), (7, 7)] {
        let row = record("a", price);
        if plan.passes(Row::Fields(&row)).unwrap() {
            plan.add(&mut accumulators, Row::Fields(&row), time)
                .unwrap();
        }
    }
    let written = |accumulators: &[Accumulator]| {
        let mut rows = Vec::new();
        let keys = [Datum::Str("a".into())];
        plan.write_rows(&keys, 0, 1000, accumulators, &mut |row| {
            rows.push(String::from_utf8(row.to_vec()).unwrap())
        })
        .unwrap();
        rows
    };
    assert_eq!(
        written(&accumulators),
        [r#"{"key":"a","window_start":"1970-01-01 00:00:00.000Z","tens":20,"top":7}"#]
    );
    let mut single = plan.create();
    plan.add(&mut single, Row::Fields(&record("b", 1)), 1)
        .unwrap();
    assert!(written(&single).is_empty());
    let text = plan.explain();
    assert!(text.contains("having:  (COUNT(*) > 1)"), "{text}");
    assert!(text.contains("tens = (COUNT(*) * 10)"), "{text}");
}

#[test]
fn a_record_one_aggregate_cannot_take_counts_in_none() {
    let plan = window(
        "SELECT COUNT(*) AS n, SUM(amount) AS s FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
    );
    let mut accumulators = plan.create();
    let text = [Some(sluice_json::FieldValue::Str("x".into()))];
    let error = plan
        .add(&mut accumulators, Row::Fields(&text), 0)
        .unwrap_err();
    assert!(error.0.contains("SUM needs a number"), "{error}");
    assert_eq!(accumulators, plan.create());
}

#[test]
fn window_queries_refuse_what_would_change_their_meaning() {
    let tumble = "FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND))";
    let cases = [
        (format!("SELECT key, COUNT(*) {tumble} GROUP BY window_start, window_end"), "`key` is neither a GROUP BY key"),
        (format!("SELECT COUNT(*) {tumble} GROUP BY key"), "groups by the window"),
        (format!("SELECT COUNT(*) {tumble} WHERE window_start > 0 GROUP BY window_start, window_end"), "filter on window columns with HAVING"),
        (format!("SELECT SUM(COUNT(*)) {tumble} GROUP BY window_start, window_end"), "do not nest"),
        (format!("SELECT SUM(DISTINCT x) {tumble} GROUP BY window_start, window_end"), "only COUNT(DISTINCT x)"),
        (format!("SELECT SUM('a') {tumble} GROUP BY window_start, window_end"), "SUM needs a number"),
        (format!("SELECT * {tumble} GROUP BY window_start, window_end"), "`*` in a window aggregation"),
        (format!("SELECT COUNT(*) {tumble} GROUP BY UPPER(k), window_start, window_end"), "grouping by an expression"),
        ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(other), INTERVAL '1' SECOND)) GROUP BY window_start, window_end".to_string(), "`other` is not the event time"),
        ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE elsewhere, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY window_start, window_end".to_string(), "unknown table `elsewhere`"),
        ("SELECT COUNT(*) FROM TABLE(HOP(TABLE input, DESCRIPTOR(ts), INTERVAL '3' SECOND, INTERVAL '10' SECOND)) GROUP BY window_start, window_end".to_string(), "whole multiple"),
        ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '1' SECOND)) GROUP BY window_start, window_end".to_string(), "a window OFFSET"),
        ("SELECT k, COUNT(*) FROM TABLE(SESSION(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY k, window_start, window_end".to_string(), "a SESSION window is per key"),
        ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE input PARTITION BY k, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY window_start, window_end".to_string(), "PARTITION BY is for SESSION"),
        ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '0' SECOND)) GROUP BY window_start, window_end".to_string(), "positive INTERVAL"),
        ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts))) GROUP BY window_start, window_end".to_string(), "needs its SIZE argument"),
        ("SELECT COUNT(*) FROM TABLE(SLIDE(TABLE input, DESCRIPTOR(ts))) GROUP BY window_start, window_end".to_string(), "not a window table function"),
    ];
    for (sql, expected) in cases {
        let shown = error(&sql);
        assert!(shown.contains(expected), "{sql}\n{shown}");
        assert!(shown.contains('^'), "no position: {sql}\n{shown}");
    }
}
