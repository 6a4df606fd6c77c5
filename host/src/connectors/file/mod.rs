//! File connectors: JSON lines and Avro object container files in, JSON
//! lines out (to a file, stdout or stderr), exactly once across restores
//! when the pipeline checkpoints ([`ExactlyOnceFileSink`]).

mod config;
mod exactly_once;
mod line_reader;
mod sink;
mod source;

pub use config::{FileSinkConfig, FileSourceConfig};
pub use exactly_once::ExactlyOnceFileSink;
pub use sink::{JsonLinesSink, OutputFormat, bytes_to_json, record_to_exact_json, record_to_json};
pub use source::{FileFormat, FileSource, FileSourceOptions};
