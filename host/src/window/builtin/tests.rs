//! Built-in aggregates against what SQL's functions compute, and their
//! accumulators through the store's encoding and merge fold.

use super::*;
use crate::record::{Record, SourcePosition};

fn record(json: &str) -> Record {
    let source = SourcePosition {
        topic: "test".into(),
        partition: 0,
        offset: 0,
    };
    Record::from_value(json.as_bytes().to_vec(), source)
}

fn run(aggregate: &mut BuiltinAggregate, values: &[&str]) -> (Value, Vec<(usize, String)>) {
    let records: Vec<Record> = values.iter().map(|v| record(v)).collect();
    let refs: Vec<&Record> = records.iter().collect();
    let mut acc = aggregate.create().expect("create");
    let rejected = aggregate.add(&mut acc, &refs).expect("add");
    (aggregate.finish(&acc).expect("finish"), rejected)
}

/// Fields the window operator read are used as they are: the record
/// is not parsed again (here the record says otherwise, to tell).
#[test]
fn groups_with_fields_read_by_the_operator_are_added_from_them() {
    let mut aggregate = BuiltinAggregate::columns(&[
        ("n", BuiltinFunction::Count, None),
        ("total", BuiltinFunction::Sum, Some("v")),
    ])
    .expect("columns");
    assert_eq!(aggregate.input_fields(), &[FieldPath::parse("v")]);
    let records = [record(r#"{"v":1}"#), record(r#"{"v":2}"#)];
    let read = [vec![Some(FieldValue::Int(5))], vec![None]];
    let records: Vec<&Record> = records.iter().collect();
    let read: Vec<&[Option<FieldValue>]> = read.iter().map(Vec::as_slice).collect();
    let mut groups = [GroupAdd {
        accumulator: aggregate.create().expect("create"),
        records: &records,
        fields: &read,
        rejected: Vec::new(),
    }];
    aggregate.add_groups(&mut groups).expect("add");
    let [group] = groups;
    assert_eq!(
        group.rejected,
        vec![(1, "field `v` is missing".to_string())]
    );
    assert_eq!(
        aggregate.finish(&group.accumulator).expect("finish"),
        serde_json::json!({"n": 1, "total": 5})
    );
}

#[test]
fn several_columns_come_from_one_window_as_an_object() {
    let mut aggregate = BuiltinAggregate::columns(&[
        ("n", BuiltinFunction::Count, None),
        ("total", BuiltinFunction::Sum, Some("amount")),
        ("largest", BuiltinFunction::Max, Some("amount")),
        ("longest_note", BuiltinFunction::Max, Some("length(note)")),
        (
            "shortest_note",
            BuiltinFunction::Min,
            Some("length( note )"),
        ),
    ])
    .expect("columns");
    let (result, rejected) = run(
        &mut aggregate,
        &[
            r#"{"amount": 3, "note": "héllo"}"#,
            r#"{"amount": 9, "note": ""}"#,
            r#"{"amount": 2, "note": "a longer note"}"#,
        ],
    );
    assert!(rejected.is_empty(), "{rejected:?}");
    assert_eq!(
        result,
        serde_json::json!({"n": 3, "total": 14, "largest": 9, "longest_note": 13, "shortest_note": 0})
    );
}

#[test]
fn a_record_missing_one_column_counts_in_none_and_says_why() {
    let mut aggregate = BuiltinAggregate::columns(&[
        ("n", BuiltinFunction::Count, None),
        ("chars", BuiltinFunction::Sum, Some("length(name)")),
    ])
    .expect("columns");
    let (result, rejected) = run(
        &mut aggregate,
        &[r#"{"name": "ab"}"#, r#"{"other": 1}"#, r#"{"name": 7}"#],
    );
    assert_eq!(result, serde_json::json!({"n": 1, "chars": 2}));
    assert_eq!(rejected.len(), 2);
    assert_eq!(rejected[0].0, 1);
    assert!(rejected[0].1.contains("`name` is missing"), "{rejected:?}");
    assert!(rejected[1].1.contains("not a string"), "{rejected:?}");
}

#[test]
fn merged_accumulators_equal_one_accumulator_over_all_records() {
    let columns = [
        ("n", BuiltinFunction::Count, None),
        ("avg", BuiltinFunction::Avg, Some("x")),
        ("min", BuiltinFunction::Min, Some("x")),
    ];
    let mut aggregate = BuiltinAggregate::columns(&columns).expect("columns");
    let values = [
        r#"{"x": 4}"#,
        r#"{"x": 1.5}"#,
        r#"{"x": -2}"#,
        r#"{"x": 8}"#,
    ];
    let records: Vec<Record> = values.iter().map(|v| record(v)).collect();
    let (mut a, mut b) = (aggregate.create().unwrap(), aggregate.create().unwrap());
    aggregate.add(&mut a, &[&records[0], &records[1]]).unwrap();
    aggregate.add(&mut b, &[&records[2], &records[3]]).unwrap();
    let merged = aggregate.merge(&a, &b).unwrap();
    let (whole, _) = run(&mut aggregate, &values);
    assert_eq!(aggregate.finish(&merged).unwrap(), whole);
    assert_eq!(whole, serde_json::json!({"n": 4, "avg": 2.875, "min": -2}));
}

#[test]
fn one_unnamed_aggregate_keeps_its_scalar_result_and_state_format() {
    let mut aggregate = BuiltinAggregate::new(BuiltinFunction::Sum, Some("x")).unwrap();
    let (result, _) = run(&mut aggregate, &[r#"{"x": 2}"#, r#"{"x": 5}"#]);
    assert_eq!(result, serde_json::json!(7));
    // Accumulators stored before several columns existed still read.
    let old = postcard::to_allocvec(&Accumulator {
        count: 2,
        int_sum: 7,
        ..Accumulator::default()
    })
    .unwrap();
    let encoding = aggregate.accumulator_encoding();
    let in_memory = encoding.read_stored(&old);
    assert_eq!(aggregate.finish(&in_memory).unwrap(), serde_json::json!(7));
}

/// Accumulators are a fixed layout in memory and postcard in the
/// store: every value survives the layout, and the stored form is the
/// one earlier releases wrote (and the merge operator folds), for one
/// column and for a list of them.
#[test]
fn accumulators_are_stored_as_they_always_were() {
    let values = [
        Accumulator::default(),
        Accumulator {
            count: 3,
            int_sum: -(1i128 << 70),
            float_sum: 2.5,
            any_float: true,
            min: Some(Number::Int(i64::MIN)),
            max: Some(Number::Float(-0.125)),
        },
        Accumulator {
            count: u64::MAX,
            int_sum: 42,
            min: Some(Number::Float(f64::INFINITY)),
            max: Some(Number::Int(i64::MAX)),
            ..Accumulator::default()
        },
    ];
    let mut in_memory = Vec::new();
    write_columns(&values, &mut in_memory);
    let mut read = Vec::new();
    read_columns(&in_memory, &mut read, 0);
    assert_eq!(read, values);

    let list = AccumulatorEncoding::Builtin { list: true };
    let mut stored = Vec::new();
    list.write_stored(&in_memory, &mut stored);
    assert_eq!(stored, postcard::to_allocvec(&values[..]).unwrap());
    assert_eq!(list.read_stored(&stored), in_memory);

    let one = AccumulatorEncoding::Builtin { list: false };
    let mut single = Vec::new();
    write_columns(&values[1..2], &mut single);
    let mut stored = vec![9];
    one.write_stored(&single, &mut stored);
    assert_eq!(stored[1..], postcard::to_allocvec(&values[1]).unwrap());
    assert_eq!(one.read_stored(&stored[1..]), single);

    // Plugins' accumulators are theirs: stored as they are.
    let mut stored = Vec::new();
    AccumulatorEncoding::AsIs.write_stored(b"opaque", &mut stored);
    assert_eq!(stored, b"opaque");
    assert_eq!(AccumulatorEncoding::AsIs.read_stored(b"opaque"), b"opaque");
}

#[test]
fn bad_columns_are_refused_with_the_reason() {
    let error = |columns: &[(&str, BuiltinFunction, Option<&str>)]| {
        BuiltinAggregate::columns(columns).expect_err("refused")
    };
    assert!(error(&[]).contains("empty"));
    assert!(
        error(&[
            ("a", BuiltinFunction::Count, None),
            ("a", BuiltinFunction::Count, None)
        ])
        .contains("used twice")
    );
    assert!(error(&[("s", BuiltinFunction::Sum, None)]).contains("needs a `field`"));
    assert!(
        error(&[("u", BuiltinFunction::Max, Some("upper(name)"))]).contains("unknown function")
    );
    assert!(error(&[("u", BuiltinFunction::Max, Some("length(name"))]).contains("without its"));
}
