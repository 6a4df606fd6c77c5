//! `sluice plugin test`: runs a component on sample records and prints what
//! it emits, one JSON line per output: the plugin author's dev loop.

use anyhow::{Context, Result};
use serde_json::json;
use sluice_host::connectors::file::{FileFormat, FileSource, FileSourceOptions, record_to_json};
use sluice_host::dataflow::{Collector, Operator, Source, TransformOperator};
use sluice_host::metrics::OperatorMetrics;
use sluice_host::record::dead_letter_headers;
use sluice_host::runtime::{CallMode, PluginInstance, PluginLimits, PluginRuntime, RuntimeConfig};
use sluice_host::state::{MemoryStateBackend, OperatorScope, StateBackend};
use std::io::Write;
use std::path::Path;

/// What `sluice plugin test` reports at the end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TryCounts {
    /// Input records.
    pub input: u64,
    /// Records on the main output.
    pub main: u64,
    /// Records on side outputs.
    pub side: u64,
    /// Dead-lettered records (plugin or malformed input).
    pub dead_letter: u64,
}

/// Runs `plugin` on the records in `input` (JSON lines, or raw lines with
/// `FileFormat::Lines`) with `config`, writing
/// `{"route": ..., "reason"?: ..., "record": ...}` lines to `out`.
pub fn try_plugin(
    plugin: &Path,
    input: &Path,
    format: FileFormat,
    config: Vec<(String, String)>,
    call_mode: CallMode,
    out: &mut dyn Write,
) -> Result<TryCounts> {
    let runtime = PluginRuntime::new(RuntimeConfig::default())?;
    let component = runtime.load(plugin)?;
    let scope = OperatorScope::new("dev", "plugin-test", &component.name);
    let metrics = OperatorMetrics::new(&component.name);
    let limits = PluginLimits {
        call_mode,
        ..PluginLimits::default()
    };
    let state = MemoryStateBackend::default().open(&scope, None)?;
    let instance = PluginInstance::new(
        component.clone(),
        scope,
        state,
        metrics.clone(),
        limits,
        config,
    )?;
    let mut operator = TransformOperator::new(component.name.clone(), instance, metrics);
    let options = FileSourceOptions {
        format,
        ..FileSourceOptions::default()
    };
    let mut source = FileSource::open("input", input, options)
        .with_context(|| format!("reading {}", input.display()))?;

    let mut counts = TryCounts::default();
    while let Some(batch) = source.next_batch(256)? {
        counts.input += (batch.records.len() + batch.dead_letters.len()) as u64;
        let mut collected = Collector {
            dead_letter: batch.dead_letters,
            ..Collector::default()
        };
        operator.process_batch(batch.records, &mut collected)?;
        for record in &collected.main {
            writeln!(
                out,
                "{}",
                json!({"route": "main", "record": record_to_json(record)})
            )?;
        }
        for (name, record) in &collected.side {
            writeln!(
                out,
                "{}",
                json!({"route": format!("side:{name}"), "record": record_to_json(record)})
            )?;
        }
        for record in &collected.dead_letter {
            let reason = record
                .header(dead_letter_headers::REASON)
                .map(|r| String::from_utf8_lossy(r).into_owned());
            writeln!(
                out,
                "{}",
                json!({"route": "dead-letter", "reason": reason, "record": record_to_json(record)})
            )?;
        }
        counts.main += collected.main.len() as u64;
        counts.side += collected.side.len() as u64;
        counts.dead_letter += collected.dead_letter.len() as u64;
    }
    Ok(counts)
}
