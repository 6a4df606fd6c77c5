//! `sluice plugin test`: runs a component on sample records and prints what
//! it emits, one JSON line per output: the plugin author's dev loop.
//!
//! A transform plugin sees the records in batches, as in a pipeline. An
//! aggregate plugin runs inside a window operator, as the host would run
//! it: records grouped by key (`key_field`, else the record key) and
//! tumbling event-time window, every window fired at the end of the input.

use anyhow::{Context, Result};
use serde_json::json;
use sluice_host::connectors::file::{FileFormat, FileSource, FileSourceOptions, record_to_json};
use sluice_host::dataflow::{Collector, Operator, Source, TransformOperator};
use sluice_host::metrics::OperatorMetrics;
use sluice_host::record::dead_letter_headers;
use sluice_host::runtime::{
    CallMode, PluginAggregator, PluginInstance, PluginLimits, PluginRuntime, RuntimeConfig,
};
use sluice_host::state::{MemoryStateBackend, MergeFolds, OperatorScope, StateBackend};
use sluice_host::window::{LateOutput, WindowOperator, WindowOperatorOptions, WindowSpec};
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

/// How `sluice plugin test` runs a plugin. Build it from
/// [`TryOptions::default`] and set what differs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TryOptions {
    /// How input lines become records (`Lines`: unchecked, to try
    /// malformed input).
    pub format: FileFormat,
    /// The plugin's config entries.
    pub config: Vec<(String, String)>,
    /// Typed or packed calls (transforms).
    pub call_mode: CallMode,
    /// Aggregates: the field whose value is the key (else the record key).
    pub key_field: Option<String>,
    /// Aggregates: the field holding the event time, ms; without one,
    /// every record falls in the window starting at 0.
    pub timestamp_field: Option<String>,
    /// Aggregates: the tumbling window's size, ms.
    pub tumbling_ms: i64,
}

impl Default for TryOptions {
    fn default() -> Self {
        TryOptions {
            format: FileFormat::Jsonl,
            config: Vec::new(),
            call_mode: CallMode::Auto,
            key_field: None,
            timestamp_field: None,
            tumbling_ms: 60_000,
        }
    }
}

/// Runs `plugin` on the records in `input` (JSON lines, or raw lines with
/// `FileFormat::Lines`), writing `{"route": ..., "reason"?: ...,
/// "record": ...}` lines to `out`. Aggregate plugins emit their window
/// results (`{"key", "window_start", "window_end", "result", ...}`).
pub fn try_plugin(
    plugin: &Path,
    input: &Path,
    options: TryOptions,
    out: &mut dyn Write,
) -> Result<TryCounts> {
    let runtime = PluginRuntime::new(RuntimeConfig::default())?;
    let component = runtime.load(plugin)?;
    let scope = OperatorScope::new("dev", "plugin-test", &component.name);
    let metrics = OperatorMetrics::new(&component.name);
    let limits = PluginLimits {
        call_mode: options.call_mode,
        ..PluginLimits::default()
    };
    let state = MemoryStateBackend::new(MergeFolds::NONE).open(&scope, None)?;
    let aggregate = component.world.is_aggregate();
    let mut operator: Box<dyn Operator> = if aggregate {
        let aggregator = PluginAggregator::new(
            component.clone(),
            scope,
            state.clone(),
            metrics.clone(),
            limits,
            options.config,
        )?;
        let mut window = WindowOperatorOptions::new(
            component.name.clone(),
            WindowSpec::Tumbling {
                size: options.tumbling_ms.max(1),
            },
        );
        window.key_field = options.key_field.clone();
        window.late_output = LateOutput::DeadLetter;
        Box::new(WindowOperator::new(
            window,
            Box::new(aggregator),
            state,
            metrics,
        )?)
    } else {
        let instance = PluginInstance::new(
            component.clone(),
            scope,
            state,
            metrics.clone(),
            limits,
            options.config,
        )?;
        Box::new(TransformOperator::new(
            component.name.clone(),
            instance,
            metrics,
        ))
    };
    let source_options = FileSourceOptions {
        format: options.format,
        timestamp_field: options.timestamp_field.clone(),
        ..FileSourceOptions::default()
    };
    let mut source = FileSource::open("input", input, source_options)
        .with_context(|| format!("reading {}", input.display()))?;

    let mut counts = TryCounts::default();
    while let Some(batch) = source.next_batch(256)? {
        counts.input += (batch.records.len() + batch.dead_letters.len()) as u64;
        let mut collected = Collector {
            dead_letter: batch.dead_letters,
            ..Collector::default()
        };
        let mut records = batch.records;
        if aggregate && options.timestamp_field.is_none() {
            for record in &mut records {
                record.event_time = Some(0);
            }
        }
        operator.process_batch(records, &mut collected)?;
        print_collected(&collected, &mut counts, out)?;
    }
    if aggregate {
        // The end of the input: every window fires.
        let mut collected = Collector::default();
        operator.on_watermark(i64::MAX, &mut collected)?;
        print_collected(&collected, &mut counts, out)?;
    }
    Ok(counts)
}

/// Writes every output in `collected` as a line with its route, and counts
/// it.
fn print_collected(
    collected: &Collector,
    counts: &mut TryCounts,
    out: &mut dyn Write,
) -> Result<()> {
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
    Ok(())
}
