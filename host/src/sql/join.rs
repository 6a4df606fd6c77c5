//! A SQL interval join: the host's [`IntervalJoinOperator`] on the query's
//! two sides, followed in the same operator by the query's `SELECT` and
//! `WHERE` over each joined record `{"left": .., "right": ..}`.

use super::SqlProjectOperator;
use crate::dataflow::{CheckpointBarrier, Collector, DataflowError, Operator, Partitioner};
use crate::join::IntervalJoinOperator;
use crate::metrics::OperatorMetrics;
use crate::record::Record;
use sluice_json::FieldPath;
use std::sync::Arc;

/// A join and the projection of what it emits, as one operator.
///
/// The join's counters are the operator's: records in, and joined records
/// out (before the query's `WHERE`); records the projection cannot
/// evaluate are dead-lettered and counted there too.
pub struct SqlJoinOperator {
    join: IntervalJoinOperator,
    project: SqlProjectOperator,
}

impl SqlJoinOperator {
    /// `join`, its output projected by `project`.
    pub(crate) fn new(join: IntervalJoinOperator, project: SqlProjectOperator) -> Self {
        SqlJoinOperator { join, project }
    }

    /// Passes what the join put in `joined` on to `out`: its main records
    /// through the projection, the rest (dead letters, late records) as
    /// they are.
    fn project(&mut self, joined: Collector, out: &mut Collector) -> Result<(), DataflowError> {
        let Collector {
            main,
            side,
            dead_letter,
        } = joined;
        out.side.extend(side);
        out.dead_letter.extend(dead_letter);
        if main.is_empty() {
            return Ok(());
        }
        self.project.process_batch(main, out)
    }
}

impl Operator for SqlJoinOperator {
    fn name(&self) -> &str {
        self.join.name()
    }

    fn metrics(&self) -> &Arc<OperatorMetrics> {
        self.join.metrics()
    }

    fn process_batch(
        &mut self,
        batch: Vec<Record>,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        let mut joined = Collector::default();
        self.join.process_batch(batch, &mut joined)?;
        self.project(joined, out)
    }

    fn partitioner(&self) -> Option<Partitioner> {
        self.join.partitioner()
    }

    fn reads_fields(&self) -> Option<Arc<[FieldPath]>> {
        self.join.reads_fields()
    }

    fn projects_fields(&self) -> Option<Arc<[String]>> {
        self.join.projects_fields()
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<(), DataflowError> {
        let mut joined = Collector::default();
        self.join.on_watermark(watermark, &mut joined)?;
        self.project(joined, out)
    }

    fn has_more_to_fire(&self) -> bool {
        self.join.has_more_to_fire()
    }

    fn on_barrier(
        &mut self,
        barrier: &CheckpointBarrier,
        out: &mut Collector,
    ) -> Result<(), DataflowError> {
        let mut joined = Collector::default();
        self.join.on_barrier(barrier, &mut joined)?;
        self.project(joined, out)
    }

    fn finish(&mut self, out: &mut Collector) -> Result<(), DataflowError> {
        let mut joined = Collector::default();
        self.join.finish(&mut joined)?;
        self.project(joined, out)
    }
}
