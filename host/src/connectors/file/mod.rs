//! File connectors: JSON lines and Avro object container files in, JSON
//! lines out (to a file, stdout or stderr).

mod sink;
mod source;

pub use sink::{JsonLinesSink, OutputFormat, bytes_to_json, record_to_json};
pub use source::{FileFormat, FileSource, FileSourceOptions};
