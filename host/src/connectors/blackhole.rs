//! A sink that discards everything: for benchmarks.

use crate::dataflow::{DataflowError, Sink};
use crate::record::Record;

/// Discards records (the pipeline still counts them).
#[derive(Debug, Default)]
pub struct BlackholeSink;

impl Sink for BlackholeSink {
    fn name(&self) -> &str {
        "blackhole"
    }

    fn write(&mut self, records: &[Record]) -> Result<(), DataflowError> {
        std::hint::black_box(records);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DataflowError> {
        Ok(())
    }
}
