//! Python plugins: `app.py` (plus any modules beside it), compiled with
//! `componentize-py` into a component that embeds CPython.
//!
//! The `sluice` SDK module is put on the module path from the copy embedded
//! in this binary. The component imports WASI (CPython needs it); the host
//! links WASI with nothing granted: no files, sockets or environment.

use super::{Spinner, run_tool, sdk};
use anyhow::{Context, Result};
use std::path::Path;
use std::process::Command;

/// The `componentize-py` version the SDK is tested with.
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// The `componentize-py` command: `$SLUICE_COMPONENTIZE_PY` or the one on
/// `PATH`.
pub(super) fn componentize_py() -> String {
    std::env::var("SLUICE_COMPONENTIZE_PY").unwrap_or_else(|_| "componentize-py".to_string())
}

/// Builds the Python plugin in `dir` for `world`; intermediate files go to
/// `scratch`.
pub(super) fn build(
    dir: &Path,
    scratch: &Path,
    world: sdk::World,
    progress: &Spinner,
) -> Result<Vec<u8>> {
    let wit = sdk::write_wit(scratch)?;
    let sdk_dir = scratch.join("sdk");
    sdk::write(&sdk_dir, "sluice.py", sdk::PYTHON_SDK)?;
    sdk::write(&sdk_dir, "sluice_json.py", sdk::PYTHON_JSON)?;
    let output = scratch.join("component.wasm");
    // Built for the `text-` worlds: the SDK's `export` and
    // `export_aggregate` bind their second export, which returns results as
    // strings. componentize-py never frees the byte lists an export returns,
    // so the byte-list functions alone would grow the plugin's memory by
    // every value or accumulator it returns. Both also get the projected
    // path (`projected-transform` includes `text-transform`,
    // `text-projected-aggregate` includes `text-aggregate`).
    let world_name = match world {
        sdk::World::Transform => "projected-transform",
        sdk::World::Aggregate => "text-projected-aggregate",
    };
    progress.step("componentize-py");
    run_tool(
        Command::new(componentize_py())
            .arg("-d")
            .arg(&wit)
            .args(["-w", world_name, "componentize"])
            .arg("-p")
            .arg(dir)
            .arg("-p")
            .arg(&sdk_dir)
            .arg("app")
            .arg("-o")
            .arg(&output)
            .env("RUST_BACKTRACE", "0")
            .env("RUST_LIB_BACKTRACE", "0"),
        "componentize-py",
    )?;
    std::fs::read(&output).with_context(|| format!("reading {}", output.display()))
}
