//! [`SqlProjectOperator`]: `SELECT ... FROM input [WHERE ...]` on every
//! record.

use crate::dataflow::{Collector, DataflowError, Operator};
use crate::metrics::{DeadLetterClass, OperatorMetrics, record_bytes};
use crate::record::Record;
use bytes::Bytes;
use sluice_json::FieldPath;
use sluice_json::fields::{FieldValue, Spans, extract_into, extract_with_names, scan_names};
use sluice_json::scan::FieldNames;
use sluice_sql::ProjectPlan;
use sluice_sql::expr::Row;
use std::sync::Arc;

/// How the operator reads a record's columns.
enum Columns {
    /// Every column is a top-level field: their spans are found (by the
    /// source's pass, or one scan here) and each value is read from its
    /// text, strings without escapes borrowed rather than copied.
    Spans {
        /// The columns' names, shared with the source that finds them.
        names: Arc<[String]>,
        /// `names` laid out for the scan.
        scan_names: Option<FieldNames>,
    },
    /// Some column is nested: the values are read from a parse of the
    /// whole value.
    Values(Arc<[FieldPath]>),
}

/// Runs a compiled `SELECT ... [WHERE ...]` on every record.
pub struct SqlProjectOperator {
    name: String,
    plan: ProjectPlan,
    columns: Columns,
    metrics: Arc<OperatorMetrics>,
    /// Whether records in and out are counted in `metrics` (not when it
    /// runs after another operator of the same query: [`Self::after`]).
    counts_records: bool,
    /// Reused per record.
    found: Vec<Option<FieldValue>>,
    spans: Vec<Option<(usize, usize)>>,
}

impl SqlProjectOperator {
    /// An operator `name` running `plan`.
    pub fn new(name: &str, plan: ProjectPlan, metrics: Arc<OperatorMetrics>) -> Self {
        let columns = match plan.top_level_names() {
            Some(names) => {
                let names: Arc<[String]> = names.into();
                let scan_names = scan_names::<FieldPath>(&[], &names);
                Columns::Spans { names, scan_names }
            }
            None => Columns::Values(plan.columns.clone().into()),
        };
        SqlProjectOperator {
            name: name.to_string(),
            plan,
            columns,
            metrics,
            counts_records: true,
            found: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// `plan` run on what another operator of the same query emits (a
    /// join's records): its records are counted there, not again here;
    /// its dead letters are counted in `metrics`.
    pub(crate) fn after(name: &str, plan: ProjectPlan, metrics: Arc<OperatorMetrics>) -> Self {
        SqlProjectOperator {
            counts_records: false,
            ..SqlProjectOperator::new(name, plan, metrics)
        }
    }

    /// Finds the query's columns in `record`: their spans into
    /// `self.spans`, or their values into `self.found`; from what the
    /// source found when it did, else from the value. An error when the
    /// value is not a JSON object.
    fn find_columns(&mut self, record: &mut Record) -> Result<(), String> {
        self.found.clear();
        self.spans.clear();
        let value = &record.value;
        // A nested path is read from a whole parse, which finds nothing
        // (rather than failing) in an array or a scalar: the query's
        // columns are an object's fields, so anything else fails here.
        let first = value.iter().find(|b| !b.is_ascii_whitespace());
        if !self.plan.columns.is_empty() && first != Some(&b'{') {
            return Err("the value is not a JSON object".to_string());
        }
        match &self.columns {
            Columns::Spans { names, scan_names } => {
                let found_ahead = record
                    .read_fields
                    .as_deref()
                    .and_then(|read| read.spans.as_ref()?.of(names));
                if let Some(spans) = found_ahead {
                    self.spans.extend_from_slice(spans);
                    return Ok(());
                }
                self.spans.resize(names.len(), None);
                let spans = Spans {
                    names,
                    found: &mut self.spans,
                };
                match scan_names {
                    Some(scan_names) => {
                        extract_with_names::<FieldPath>(
                            &value[..],
                            scan_names,
                            &[],
                            &mut self.found,
                            Some(spans),
                        )?;
                    }
                    None => {
                        sluice_json::fields::extract_into_with_spans::<FieldPath>(
                            &value[..],
                            &[],
                            &mut self.found,
                            spans,
                        )?;
                    }
                }
                Ok(())
            }
            Columns::Values(paths) => {
                let read_ahead = record
                    .read_fields
                    .as_deref_mut()
                    .and_then(|read| read.take_values_of(paths));
                match read_ahead {
                    Some(values) => {
                        self.found = values;
                        Ok(())
                    }
                    None => extract_into(&record.value[..], paths, &mut self.found),
                }
            }
        }
    }

    /// The row of a record whose columns [`Self::find_columns`] found in
    /// `text` (its value).
    fn row<'r>(&'r self, text: &'r [u8]) -> Row<'r> {
        match &self.columns {
            Columns::Spans { .. } => Row::Spans {
                text,
                spans: &self.spans,
            },
            Columns::Values(_) => Row::Fields(&self.found),
        }
    }

    /// What the query makes of `record`: whether it passes (its output
    /// value appended to `out` if so), or why it cannot be evaluated.
    fn evaluate(
        &mut self,
        record: &mut Record,
        whole: bool,
        out: &mut Vec<u8>,
    ) -> Result<bool, String> {
        self.find_columns(record)?;
        let value = &record.value[..];
        let row = self.row(value);
        if !self.plan.passes(row).map_err(|error| error.to_string())? {
            return Ok(false);
        }
        if !whole {
            let spans = matches!(self.columns, Columns::Spans { .. }).then_some(&self.spans[..]);
            self.plan
                .write(row, value, spans, out)
                .map_err(|error| error.to_string())?;
        }
        Ok(true)
    }
}

impl Operator for SqlProjectOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn metrics(&self) -> &Arc<OperatorMetrics> {
        &self.metrics
    }

    fn process_batch(
        &mut self,
        batch: Vec<Record>,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        if self.counts_records {
            self.metrics.count_in(&batch);
        }
        let whole = matches!(self.plan.output, sluice_sql::Output::Whole);
        // Every output value of the batch goes into one buffer, shared by
        // the records as slices of it: one allocation per batch.
        let mut values = Vec::new();
        let mut passed: Vec<(Record, std::ops::Range<usize>)> = Vec::new();
        for mut record in batch {
            let start = values.len();
            let outcome = self.evaluate(&mut record, whole, &mut values);
            record.read_fields = None;
            match outcome {
                Ok(false) => {}
                Ok(true) => passed.push((record, start..values.len())),
                Err(reason) => {
                    values.truncate(start);
                    out.dead_letter(
                        record,
                        DeadLetterClass::Invalid,
                        &format!("SQL: {reason}"),
                        &self.name,
                        None,
                        &self.metrics,
                    );
                }
            }
        }
        let values = Bytes::from(values);
        let emitted = passed.len();
        out.main
            .extend(passed.into_iter().map(|(mut record, range)| {
                if !whole {
                    record.value = values.slice(range);
                }
                record
            }));
        if self.counts_records {
            let emitted_records = &out.main[out.main.len() - emitted..];
            self.metrics
                .count_out_many(emitted as u64, record_bytes(emitted_records));
        }
        Ok(())
    }

    fn reads_fields(&self) -> Option<Arc<[FieldPath]>> {
        match &self.columns {
            Columns::Values(paths) if !paths.is_empty() => Some(paths.clone()),
            _ => None,
        }
    }

    fn projects_fields(&self) -> Option<Arc<[String]>> {
        match &self.columns {
            Columns::Spans { names, .. } if !names.is_empty() => Some(names.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_record as record;

    fn operator(sql: &str) -> SqlProjectOperator {
        let Ok(sluice_sql::Plan::Project(plan)) =
            sluice_sql::compile(sql, &sluice_sql::Catalog::input([]))
        else {
            panic!("not a projection: {sql}");
        };
        SqlProjectOperator::new("q", plan, OperatorMetrics::new("q"))
    }

    #[test]
    fn a_value_that_is_not_an_object_is_dead_lettered() {
        for sql in [
            "SELECT id FROM input WHERE a > 1",
            "SELECT * FROM input WHERE a > 1",
            "SELECT UPPER(b) AS b FROM input",
            "SELECT x.y FROM input",
        ] {
            let mut op = operator(sql);
            let mut out = Collector::default();
            op.process_batch(
                vec![
                    record("[1, 2]"),
                    record("\"x\""),
                    record("{\"id\": 1, \"a\": 2, \"b\": \"q\"}"),
                ],
                &mut out,
            )
            .unwrap();
            assert_eq!(out.dead_letter.len(), 2, "{sql}: {out:?}");
            assert_eq!(out.main.len(), 1, "{sql}");
        }
    }

    #[test]
    fn records_the_source_read_ahead_give_the_same_verdicts() {
        use crate::connectors::file::{FileSource, FileSourceOptions};
        use crate::dataflow::Source;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(
            &path,
            "[0, \"not an object\"]\n{\"id\":1,\"amount\":20,\"name\":\"a\"}\n\"str\"\n{\"id\":2,\"amount\":\"3\",\"name\":\"b\"}\n",
        )
        .unwrap();
        // Nested columns (values read ahead) and top-level ones (spans).
        for (sql, expected) in [
            (
                "SELECT id, UPPER(name) AS name, p.q AS q FROM input WHERE amount > 10 AND name IS NOT NULL",
                &b"{\"id\":1,\"name\":\"A\",\"q\":null}"[..],
            ),
            (
                "SELECT id, UPPER(name) AS name FROM input WHERE amount > 10 AND name IS NOT NULL",
                &b"{\"id\":1,\"name\":\"A\"}"[..],
            ),
        ] {
            let mut op = operator(sql);
            let mut source = FileSource::open("file", &path, FileSourceOptions::default()).unwrap();
            assert!(op.reads_fields().is_some() != op.projects_fields().is_some());
            if let Some(fields) = op.reads_fields() {
                source.read_ahead(fields);
            }
            if let Some(names) = op.projects_fields() {
                source.project_ahead(names);
            }
            let batch = source.next_batch(10).unwrap().unwrap();
            let mut out = Collector::default();
            op.process_batch(batch.records, &mut out).unwrap();
            assert_eq!(out.main.len(), 1, "{out:?}");
            assert_eq!(&out.main[0].value[..], expected);
            assert_eq!(out.dead_letter.len(), 3, "{out:?}");
        }
    }
}
