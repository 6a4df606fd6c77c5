//! The file connector's sections of a pipeline file: `[source.file]` and
//! `[sink.file]`.

use std::path::PathBuf;

use serde::Deserialize;

use super::{FileFormat, OutputFormat};

/// `[source.file]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSourceConfig {
    /// The file.
    pub path: PathBuf,
    /// `jsonl` or `avro`.
    #[serde(default)]
    pub format: FileFormat,
    /// Field that becomes the key.
    pub key_field: Option<String>,
    /// Field holding the event time (ms).
    pub timestamp_field: Option<String>,
}

/// `[sink.file]`: JSON lines to a file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkConfig {
    /// The file (created or truncated).
    pub path: PathBuf,
    /// `value` or `record`.
    #[serde(default)]
    pub format: Option<OutputFormat>,
}
