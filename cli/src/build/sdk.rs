//! The WIT package and the Python, JavaScript and C SDKs, embedded in the
//! `sluice` binary so that building a plugin needs nothing from the source
//! tree.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// `wit/plugin.wit`: the `sluice:plugin` package.
pub const WIT: &str = include_str!("../../../wit/plugin.wit");

/// The world non-Rust plugins export.
pub const WORLD: &str = "transform";

/// `guest-sdk/python/sluice.py`.
pub const PYTHON_SDK: &str = include_str!("../../../guest-sdk/python/sluice.py");

/// `guest-sdk/js/sluice.js`.
pub const JS_SDK: &str = include_str!("../../../guest-sdk/js/sluice.js");

/// `guest-sdk/c/sluice.h`.
pub const C_HEADER: &str = include_str!("../../../guest-sdk/c/sluice.h");

/// `guest-sdk/c/sluice.c`.
pub const C_SOURCE: &str = include_str!("../../../guest-sdk/c/sluice.c");

/// Writes `contents` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, contents: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Writes the WIT package into `dir/wit/` and returns that directory.
pub fn write_wit(dir: &Path) -> Result<PathBuf> {
    let wit_dir = dir.join("wit");
    write(&wit_dir, "plugin.wit", WIT)?;
    Ok(wit_dir)
}
