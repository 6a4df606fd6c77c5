//! Operators that run SQL queries (`sql = "SELECT ..."` in a pipeline
//! file): the query is compiled by `sluice_sql` once, at start-up, and run
//! here on every batch with no plugin and no JSON document per record.
//!
//! [`SqlProjectOperator`] runs `SELECT ... FROM input [WHERE ...]`: it reads
//! the fields the query names (from the source's own parse of each record
//! when it comes right after the source: [`Operator::reads_fields`]),
//! evaluates the condition, and writes the output record's JSON directly,
//! copying the text of plain columns ([`Operator::projects_fields`]). A
//! record the query cannot evaluate (a string where a number is needed, an
//! overflow, a value that is not a JSON object) goes to the dead-letter
//! output with the reason; the others of its batch are unaffected.

use crate::dataflow::{Collector, DataflowError, Operator};
use crate::metrics::{DeadLetterClass, OperatorMetrics, record_bytes};
use crate::record::Record;
use bytes::Bytes;
use sluice_json::FieldPath;
use sluice_json::fields::{FieldValue, Spans, extract_into, extract_with_names, scan_names};
use sluice_json::scan::FieldNames;
use sluice_sql::ProjectPlan;
use std::sync::Arc;

/// Runs a compiled `SELECT ... [WHERE ...]` on every record.
pub struct SqlProjectOperator {
    name: String,
    plan: ProjectPlan,
    /// The fields the query reads, shared with the source that reads them
    /// ahead.
    columns: Arc<[FieldPath]>,
    /// The top-level fields whose JSON text output columns copy.
    copied: Arc<[String]>,
    /// `columns` and `copied` laid out for the scan, when every column is
    /// a top-level field (else each value is parsed whole).
    scan_names: Option<FieldNames>,
    metrics: Arc<OperatorMetrics>,
    /// Reused per record.
    found: Vec<Option<FieldValue>>,
    spans: Vec<Option<(usize, usize)>>,
}

impl SqlProjectOperator {
    /// An operator `name` running `plan`.
    pub fn new(name: &str, plan: ProjectPlan, metrics: Arc<OperatorMetrics>) -> Self {
        let columns: Arc<[FieldPath]> = plan.columns.clone().into();
        let copied: Arc<[String]> = plan.copied_fields.clone().into();
        let scan_names = scan_names(&columns, &copied);
        SqlProjectOperator {
            name: name.to_string(),
            plan,
            columns,
            copied,
            scan_names,
            metrics,
            found: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// Reads the query's fields (and the copied fields' spans) of `record`
    /// into `self.found` and `self.spans`: from what the source read ahead
    /// when it did, else from the value. Returns whether the spans are
    /// known; an error when the value is not a JSON object.
    fn read(&mut self, record: &mut Record) -> Result<bool, String> {
        self.found.clear();
        self.spans.clear();
        // A nested path is read from a whole parse, which finds nothing
        // (rather than failing) in an array or a scalar: the query's
        // columns are an object's fields, so anything else fails here.
        let first = record.value.iter().find(|b| !b.is_ascii_whitespace());
        if !self.columns.is_empty() && first != Some(&b'{') {
            return Err("the value is not a JSON object".to_string());
        }
        if let Some(read) = record.read_fields.as_deref_mut() {
            let spans = read
                .spans
                .as_ref()
                .and_then(|spans| spans.of(&self.copied).map(<[_]>::to_vec));
            let copied_known = self.copied.is_empty() || spans.is_some();
            if copied_known && let Some(values) = read.take_values_of(&self.columns) {
                self.found = values;
                if let Some(spans) = spans {
                    self.spans = spans;
                }
                return Ok(true);
            }
        }
        match &self.scan_names {
            Some(names) => {
                self.spans.resize(self.copied.len(), None);
                let spans = Spans {
                    names: &self.copied,
                    found: &mut self.spans,
                };
                extract_with_names(
                    &record.value[..],
                    names,
                    &self.columns,
                    &mut self.found,
                    Some(spans),
                )?;
                Ok(true)
            }
            None => {
                extract_into(&record.value[..], &self.columns, &mut self.found)?;
                Ok(false)
            }
        }
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
        self.metrics.count_in(&batch);
        let whole = matches!(self.plan.output, sluice_sql::Output::Whole);
        // Every output value of the batch goes into one buffer, shared by
        // the records as slices of it: one allocation per batch.
        let mut values = Vec::new();
        let mut passed: Vec<(Record, std::ops::Range<usize>)> = Vec::new();
        for mut record in batch {
            let start = values.len();
            let outcome = match self.read(&mut record) {
                Err(reason) => Err(reason),
                Ok(spans_known) => {
                    let spans = spans_known.then_some(&self.spans[..]);
                    match self.plan.passes(&self.found) {
                        Ok(false) => Ok(false),
                        Ok(true) if whole => Ok(true),
                        Ok(true) => self
                            .plan
                            .write(&self.found, &record.value, spans, &mut values)
                            .map(|()| true)
                            .map_err(|error| error.to_string()),
                        Err(error) => Err(error.to_string()),
                    }
                }
            };
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
        let emitted = passed.len() as u64;
        out.main
            .extend(passed.into_iter().map(|(mut record, range)| {
                if !whole {
                    record.value = values.slice(range);
                }
                record
            }));
        let emitted_records = &out.main[out.main.len() - emitted as usize..];
        self.metrics
            .count_out_many(emitted, record_bytes(emitted_records));
        Ok(())
    }

    fn reads_fields(&self) -> Option<Arc<[FieldPath]>> {
        (!self.columns.is_empty()).then(|| self.columns.clone())
    }

    fn projects_fields(&self) -> Option<Arc<[String]>> {
        (!self.copied.is_empty()).then(|| self.copied.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_record as record;

    fn operator(sql: &str) -> SqlProjectOperator {
        let sluice_sql::Plan::Project(plan) =
            sluice_sql::compile(sql, &sluice_sql::Catalog::input([])).unwrap();
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
        let mut op = operator(
            "SELECT id, UPPER(name) AS name, p.q AS q FROM input WHERE amount > 10 AND name IS NOT NULL",
        );
        let mut source = FileSource::open("file", &path, FileSourceOptions::default()).unwrap();
        source.read_ahead(op.reads_fields().unwrap());
        source.project_ahead(op.projects_fields().unwrap());
        let batch = source.next_batch(10).unwrap().unwrap();
        let mut out = Collector::default();
        op.process_batch(batch.records, &mut out).unwrap();
        assert_eq!(out.main.len(), 1, "{out:?}");
        assert_eq!(
            &out.main[0].value[..],
            b"{\"id\":1,\"name\":\"A\",\"q\":null}"
        );
        assert_eq!(out.dead_letter.len(), 3, "{out:?}");
    }
}
