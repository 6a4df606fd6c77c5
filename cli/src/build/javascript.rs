//! JavaScript plugins: the ES module `plugin.js` (plus modules beside it),
//! compiled with `componentize-js` into a component that embeds the
//! StarlingMonkey engine.
//!
//! The plugin's `.js` files and the `sluice.js` SDK embedded in this binary
//! are staged together, so a plugin imports the SDK as `./sluice.js`. The
//! component keeps WASI stdio (so `console.log` reaches the host log),
//! random and clocks (the host freezes the clock unless the pipeline grants
//! it); HTTP is left out.

use super::{Spinner, run_tool, sdk};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `@bytecodealliance/componentize-js` version the SDK is tested with.
pub const COMPONENTIZE_JS_VERSION: &str = "0.23.0";

/// The `componentize-js` command: `$SLUICE_COMPONENTIZE_JS`, else the copy
/// `scripts/setup-toolchain.sh` installs under `~/.cache/sluice`, else the
/// one on `PATH`.
pub fn componentize_js() -> PathBuf {
    if let Some(path) = std::env::var_os("SLUICE_COMPONENTIZE_JS") {
        return PathBuf::from(path);
    }
    let cached = std::env::var_os("HOME").map(|home| {
        Path::new(&home).join(".cache/sluice/js-toolchain/node_modules/.bin/componentize-js")
    });
    match cached {
        Some(path) if path.exists() => path,
        _ => PathBuf::from("componentize-js"),
    }
}

/// The entry module of a JavaScript transform: the plugin's exports, and
/// the `text-packed-transformer` and `projected-transformer` exports the
/// SDK makes of its `transformer` (the host prefers them: one string of
/// packed outcomes per batch, and the fields the plugin reads found by the
/// host; ADR 0015).
const TRANSFORM_ENTRY: &str = r#"export * from "./plugin.js";
import { transformer } from "./plugin.js";
import { packedExports } from "./sluice.js";
const packed = packedExports(transformer);
export const textPackedTransformer = packed.textPackedTransformer;
export const projectedTransformer = packed.projectedTransformer;
"#;

/// The entry module of an aggregate: the plugin's exports and, beside its
/// `aggregator`, the SDK's text and projected-text exports of the same
/// aggregate (the `text-projected-aggregate` world).
const AGGREGATE_ENTRY: &str = r#"export * from "./plugin.js";
import { aggregator } from "./plugin.js";
import { aggregateExports } from "./sluice.js";
const text = aggregateExports(aggregator);
export const textAggregator = text.textAggregator;
export const textProjectedAggregator = text.textProjectedAggregator;
"#;

/// Builds the JavaScript plugin in `dir` for `world`; intermediate files go
/// to `scratch`.
pub(super) fn build(
    dir: &Path,
    scratch: &Path,
    world: sdk::World,
    progress: &Spinner,
) -> Result<Vec<u8>> {
    let wit = sdk::write_wit(scratch)?;
    let staged = scratch.join("src");
    std::fs::create_dir_all(&staged).with_context(|| format!("creating {}", staged.display()))?;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let is_module = path
            .extension()
            .is_some_and(|ext| ext == "js" || ext == "mjs");
        if is_module && let Some(name) = path.file_name() {
            std::fs::copy(&path, staged.join(name))
                .with_context(|| format!("staging {}", path.display()))?;
        }
    }
    sdk::write(&staged, "sluice.js", sdk::JS_SDK)?;
    sdk::write(&staged, "sluice-json.js", sdk::JS_JSON)?;
    let state = match world {
        sdk::World::Transform => sdk::JS_STATE,
        sdk::World::Aggregate => sdk::JS_NO_STATE,
    };
    sdk::write(&staged, "sluice-state.js", state)?;
    // Transforms are built for `projected-transform`, aggregates for
    // `text-projected-aggregate`: an entry module exports the plugin's own
    // exports and, beside them, the SDK's exports of the same plugin for
    // the world's other interfaces.
    let (entry, world_name) = match world {
        sdk::World::Transform => (
            sdk::write(&staged, "sluice-entry.js", TRANSFORM_ENTRY)?,
            "projected-transform",
        ),
        sdk::World::Aggregate => (
            sdk::write(&staged, "sluice-entry.js", AGGREGATE_ENTRY)?,
            "text-projected-aggregate",
        ),
    };
    let output = scratch.join("component.wasm");
    progress.step("componentize-js");
    run_tool(
        Command::new(componentize_js())
            .arg(entry)
            .arg("--wit")
            .arg(&wit)
            .args(["--world-name", world_name])
            .args(["--disable", "http", "fetch-event"])
            .arg("--out")
            .arg(&output),
        "componentize-js",
    )?;
    std::fs::read(&output).with_context(|| format!("reading {}", output.display()))
}
