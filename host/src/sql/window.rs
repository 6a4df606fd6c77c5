//! A SQL window aggregation's parts for the window operator: the
//! aggregate ([`SqlWindowAggregate`]: `WHERE` and the aggregate calls over
//! each record's fields) and the output ([`SqlWindowOutput`]: each
//! window's row written as the `SELECT` list says).

use crate::record::Record;
use crate::window::{AggregateError, Aggregator, GroupAdd, Window, WindowOutput, WindowSpec};
use serde_json::Value;
use sluice_json::fields::{FieldPath, FieldValue, extract};
use sluice_sql::aggregate::{self, Accumulator, encode};
use sluice_sql::expr::Row;
use sluice_sql::{Datum, WindowFunction, WindowPlan};
use std::sync::Arc;

/// The window operator's spec for a query's window table function.
pub fn window_spec(function: WindowFunction) -> WindowSpec {
    match function {
        WindowFunction::Tumble { size } => WindowSpec::Tumbling { size },
        WindowFunction::Hop { slide, size } => WindowSpec::Sliding { size, slide },
        WindowFunction::Session { gap } => WindowSpec::Session { gap },
        WindowFunction::Cumulate { step, size } => WindowSpec::Cumulative { size, step },
    }
}

/// A window aggregation's `WHERE` and aggregate calls, as the window
/// operator's [`Aggregator`]: the accumulator of a window is the calls'
/// accumulators together ([`sluice_sql::aggregate::encode`]).
pub struct SqlWindowAggregate {
    plan: Arc<WindowPlan>,
    /// Reused while adding: a window's accumulators decoded.
    decoded: Vec<Accumulator>,
}

impl SqlWindowAggregate {
    /// The aggregate of `plan`.
    pub fn new(plan: Arc<WindowPlan>) -> Self {
        SqlWindowAggregate {
            plan,
            decoded: Vec::new(),
        }
    }

    /// Adds `count` records to the window's `accumulator`: record `i`'s
    /// row from `row_of(i)` and its event time from `time_of(i)`; returns
    /// the records that could not be added, with the reason.
    fn add_rows<'f>(
        &mut self,
        accumulator: &mut Vec<u8>,
        count: usize,
        mut row_of: impl FnMut(usize) -> Result<std::borrow::Cow<'f, [Option<FieldValue>]>, String>,
        time_of: impl Fn(usize) -> i64,
    ) -> Result<Vec<(usize, String)>, AggregateError> {
        let mut decoded = std::mem::take(&mut self.decoded);
        match decode_into(accumulator, &mut decoded) {
            Ok(()) => {}
            Err(error) => {
                self.decoded = decoded;
                return Err(error);
            }
        }
        let mut rejected = Vec::new();
        for index in 0..count {
            let added = row_of(index).and_then(|fields| {
                self.plan
                    .add(&mut decoded, Row::Fields(&fields), time_of(index))
                    .map_err(|error| format!("SQL: {error}"))
            });
            if let Err(reason) = added {
                rejected.push((index, reason));
            }
        }
        encode(&decoded, accumulator);
        self.decoded = decoded;
        Ok(rejected)
    }
}

/// `bytes` decoded into `decoded` (its contents replaced).
fn decode_into(bytes: &[u8], decoded: &mut Vec<Accumulator>) -> Result<(), AggregateError> {
    aggregate::decode_into(bytes, decoded).ok_or_else(|| {
        AggregateError("a window's stored state is not this query's accumulators".to_string())
    })
}

impl Aggregator for SqlWindowAggregate {
    fn create(&mut self) -> Result<Vec<u8>, AggregateError> {
        let mut bytes = Vec::new();
        encode(&self.plan.create(), &mut bytes);
        Ok(bytes)
    }

    fn add(
        &mut self,
        accumulator: &mut Vec<u8>,
        records: &[&Record],
    ) -> Result<Vec<(usize, String)>, AggregateError> {
        let plan = self.plan.clone();
        self.add_rows(
            accumulator,
            records.len(),
            |index| extract(&records[index].value, &plan.columns).map(std::borrow::Cow::Owned),
            |index| records[index].event_time.unwrap_or_default(),
        )
    }

    /// Groups whose fields the window operator read are added from them;
    /// others as [`Self::add`] would.
    fn add_groups(&mut self, groups: &mut [GroupAdd<'_>]) -> Result<(), AggregateError> {
        for group in groups {
            if group.fields.len() != group.records.len() {
                group.rejected = self.add(&mut group.accumulator, group.records)?;
                continue;
            }
            let (fields, records) = (group.fields, group.records);
            group.rejected = self.add_rows(
                &mut group.accumulator,
                fields.len(),
                |index| Ok(std::borrow::Cow::Borrowed(fields[index])),
                |index| records[index].event_time.unwrap_or_default(),
            )?;
        }
        Ok(())
    }

    fn merge(&mut self, a: &[u8], b: &[u8]) -> Result<Vec<u8>, AggregateError> {
        let (mut left, mut right) = (Vec::new(), Vec::new());
        decode_into(a, &mut left)?;
        decode_into(b, &mut right)?;
        let mut bytes = Vec::new();
        encode(&self.plan.merge(&left, &right), &mut bytes);
        Ok(bytes)
    }

    /// The aggregates' results as a JSON array (the window's row is
    /// written by [`SqlWindowOutput`]; this serves the generic path).
    fn finish(&mut self, accumulator: &[u8]) -> Result<Value, AggregateError> {
        let mut decoded = Vec::new();
        decode_into(accumulator, &mut decoded)?;
        let mut values = Vec::with_capacity(decoded.len());
        for (call, accumulator) in self.plan.aggregates.iter().zip(&decoded) {
            let datum = call
                .finish(accumulator)
                .map_err(|error| AggregateError(format!("SQL: {error}")))?;
            let mut json = Vec::new();
            datum.write_json(&mut json).map_err(AggregateError)?;
            values.push(serde_json::from_slice(&json).unwrap_or(Value::Null));
        }
        Ok(Value::Array(values))
    }

    fn input_fields(&self) -> &[FieldPath] {
        &self.plan.columns
    }

    /// A record passes when its value is a JSON object (the query's
    /// columns are an object's fields: anything else is a dead letter, as
    /// in a projection) and it meets the `WHERE` condition.
    fn accepts(&self, record: &Record, fields: &[Option<FieldValue>]) -> Result<bool, String> {
        let first = record.value.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            return Err("SQL: the value is not a JSON object".to_string());
        }
        self.plan
            .passes(Row::Fields(fields))
            .map_err(|error| format!("SQL: {error}"))
    }
}

/// A window aggregation's `SELECT` list and `HAVING`, written for each
/// window as it fires.
pub struct SqlWindowOutput {
    plan: Arc<WindowPlan>,
}

impl SqlWindowOutput {
    /// The output of `plan`.
    pub fn new(plan: Arc<WindowPlan>) -> Self {
        SqlWindowOutput { plan }
    }
}

impl WindowOutput for SqlWindowOutput {
    fn write(
        &mut self,
        key: &Value,
        window: Window,
        accumulator: &[u8],
        emit: &mut dyn FnMut(&[u8]),
    ) -> Result<(), String> {
        let mut accumulators = Vec::new();
        decode_into(accumulator, &mut accumulators).map_err(|error| error.0)?;
        // The key is the array of the GROUP BY keys' values (see
        // `WindowKey::Columns`).
        let keys: Vec<Datum<'_>> = match key {
            Value::Array(values) => values.iter().map(Datum::of_json).collect(),
            _ => Vec::new(),
        };
        self.plan
            .write_rows(&keys, window.start, window.end, &accumulators, emit)
            .map_err(|error| format!("SQL: {error}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::{Collector, Operator};
    use crate::metrics::OperatorMetrics;
    use crate::record::test_record;
    use crate::state::{MemoryStateBackend, OperatorScope, StateBackend};
    use crate::window::{MERGE_FOLDS, WindowOperator, WindowOperatorOptions};

    /// The window operator of `sql`, with `cache_bytes` of window state in
    /// memory (0: every window kept only in the store).
    fn operator(sql: &str, cache_bytes: usize) -> WindowOperator {
        let catalog = sluice_sql::Catalog::input([]).with_time_column("ts");
        let Ok(sluice_sql::Plan::Window(plan)) = sluice_sql::compile(sql, &catalog) else {
            panic!("not a window query: {sql}");
        };
        let plan = Arc::new(plan);
        let store = MemoryStateBackend::new(MERGE_FOLDS)
            .open(&OperatorScope::new("t", "p", "q"), None)
            .unwrap();
        let mut options = WindowOperatorOptions::new("q", window_spec(plan.window));
        options.key_columns = Some(plan.key_paths());
        options.cache_bytes = cache_bytes;
        let aggregate = Box::new(SqlWindowAggregate::new(plan.clone()));
        WindowOperator::new(options, aggregate, store, OperatorMetrics::new("q"))
            .unwrap()
            .with_output(Box::new(SqlWindowOutput::new(plan)))
    }

    fn at(time: i64, value: &str) -> Record {
        let mut record = test_record(value);
        record.event_time = Some(time);
        record
    }

    fn values(records: &[Record]) -> Vec<String> {
        records
            .iter()
            .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn non_objects_and_late_records_go_to_the_dead_letters_and_the_rest_is_counted() {
        let mut op = operator(
            "SELECT k, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '0.01' SECOND)) GROUP BY k, window_start, window_end",
            1 << 20,
        );
        let mut out = Collector::default();
        op.process_batch(
            vec![
                at(1, r#"{"k":"a"}"#),
                at(2, "[1]"),
                at(3, r#"{"k":null}"#),
                at(4, "7"),
            ],
            &mut out,
        )
        .unwrap();
        op.on_watermark(10, &mut out).unwrap();
        op.process_batch(vec![at(5, r#"{"k":"a"}"#)], &mut out)
            .unwrap();
        op.on_watermark(i64::MAX, &mut out).unwrap();
        let mut rows = values(&out.main);
        rows.sort();
        assert_eq!(rows, [r#"{"k":"a","n":1}"#, r#"{"k":null,"n":1}"#]);
        // Two values that are not objects, one record behind the watermark.
        assert_eq!(out.dead_letter.len(), 3, "{out:?}");
    }

    #[test]
    fn sessions_merge_their_accumulators_also_when_kept_only_in_the_store() {
        for cache_bytes in [0, 1 << 20] {
            let mut op = operator(
                "SELECT k, window_start, window_end, COUNT(*) AS n, MIN(v) AS low, LAST_VALUE(v) AS last_v, COUNT(DISTINCT v) AS kinds \
                 FROM TABLE(SESSION(TABLE input PARTITION BY k, DESCRIPTOR(ts), INTERVAL '0.01' SECOND)) GROUP BY k, window_start, window_end",
                cache_bytes,
            );
            let mut out = Collector::default();
            // 0 and 20 open two sessions; 10 joins them into one.
            for batch in [
                vec![at(0, r#"{"k":"a","v":5}"#)],
                vec![at(20, r#"{"k":"a","v":3}"#)],
                vec![at(10, r#"{"k":"a","v":5}"#), at(100, r#"{"k":"a","v":9}"#)],
            ] {
                op.process_batch(batch, &mut out).unwrap();
            }
            op.on_watermark(i64::MAX, &mut out).unwrap();
            assert_eq!(
                values(&out.main),
                [
                    r#"{"k":"a","window_start":"1970-01-01 00:00:00.000Z","window_end":"1970-01-01 00:00:00.030Z","n":3,"low":3,"last_v":3,"kinds":2}"#,
                    r#"{"k":"a","window_start":"1970-01-01 00:00:00.100Z","window_end":"1970-01-01 00:00:00.110Z","n":1,"low":9,"last_v":9,"kinds":1}"#,
                ],
                "cache {cache_bytes}"
            );
        }
    }
}
