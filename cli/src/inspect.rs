//! `sluice plugin inspect`: what a component is and what it needs.

use anyhow::Result;
use sluice_host::runtime::{PluginRuntime, RuntimeConfig};
use std::fmt::Write;
use std::path::Path;

/// A human-readable description of the component at `path`.
pub fn describe(path: &Path) -> Result<String> {
    let runtime = PluginRuntime::new(RuntimeConfig::default())?;
    let component = runtime.load(path)?;
    let mut text = String::new();
    let world = format!("sluice:plugin/{}", component.world);
    writeln!(text, "plugin:      {}", component.name)?;
    writeln!(text, "file:        {}", component.path.display())?;
    writeln!(text, "size:        {} bytes", component.size_bytes)?;
    writeln!(text, "sha256:      {}…", component.content_hash)?;
    writeln!(text, "world:       {world}")?;
    writeln!(text, "wit version: sluice:plugin@{}", component.wit_version)?;
    writeln!(
        text,
        "compiled:    {:?} in {:.1} ms ({:?})",
        component.cache,
        component.load_time.as_secs_f64() * 1e3,
        runtime.cache().dir()
    )?;
    writeln!(text, "exports:")?;
    for name in &component.exports {
        writeln!(text, "  {name}")?;
    }
    writeln!(text, "imports:")?;
    for name in &component.imports {
        writeln!(text, "  {name}")?;
    }
    Ok(text)
}
