//! The WIT package and the Python, JavaScript and C SDKs, embedded in the
//! `sluice` binary so that building a plugin needs nothing from the source
//! tree.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// `wit/plugin.wit`: the `sluice:plugin` package.
pub const WIT: &str = include_str!("../../../wit/plugin.wit");

/// The WIT world a Python, JavaScript or C plugin is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    /// `transform`: records in, records out (the default).
    Transform,
    /// `aggregate`: a window aggregate over a host-stored accumulator.
    Aggregate,
}

impl World {
    /// The world's name in `wit/plugin.wit`.
    pub fn name(self) -> &'static str {
        match self {
            World::Transform => "transform",
            World::Aggregate => "aggregate",
        }
    }

    /// The world of the plugin whose main source is `source`: `aggregate`
    /// if it binds the `aggregator` export, which the language's toolchain
    /// requires it to do by name (Python: a top-level `Aggregator = ...`
    /// or `class Aggregator`; JavaScript: `export const aggregator`), or,
    /// in C, says `#define SLUICE_AGGREGATE 1` before including `sluice.h`.
    pub fn of_source(source: &str) -> World {
        let binds_aggregator = source.lines().any(|line| {
            let line = line.trim_end();
            line.starts_with("Aggregator =")
                || line.starts_with("Aggregator=")
                || line.starts_with("class Aggregator")
                || line.starts_with("export const aggregator")
                || line.starts_with("export let aggregator")
                || line.starts_with("#define SLUICE_AGGREGATE")
        });
        if binds_aggregator {
            World::Aggregate
        } else {
            World::Transform
        }
    }
}

/// `guest-sdk/python/sluice.py`.
pub const PYTHON_SDK: &str = include_str!("../../../guest-sdk/python/sluice.py");

/// `guest-sdk/python/sluice_json.py`: the SDK's JSON, imported by `sluice.py`.
pub const PYTHON_JSON: &str = include_str!("../../../guest-sdk/python/sluice_json.py");

/// `guest-sdk/js/sluice.js`.
pub const JS_SDK: &str = include_str!("../../../guest-sdk/js/sluice.js");

/// `guest-sdk/js/sluice-json.js`: the SDK's JSON, imported by `sluice.js`.
pub const JS_JSON: &str = include_str!("../../../guest-sdk/js/sluice-json.js");

/// `guest-sdk/js/sluice-state.js`: host state, for the `transform` world.
pub const JS_STATE: &str = include_str!("../../../guest-sdk/js/sluice-state.js");

/// `guest-sdk/js/sluice-no-state.js`: the `aggregate` world has no host
/// state (the host stores the accumulator).
pub const JS_NO_STATE: &str = include_str!("../../../guest-sdk/js/sluice-no-state.js");

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

#[cfg(test)]
mod tests {
    use super::World;

    #[test]
    fn the_world_follows_the_export_the_source_binds() {
        let python = "import sluice\n\nclass Total(sluice.Aggregate):\n    pass\n\nAggregator = sluice.export_aggregate(Total)\n";
        assert_eq!(World::of_source(python), World::Aggregate);
        let js = "import { exportAggregate } from \"./sluice.js\";\nexport const aggregator = exportAggregate(Total);\n";
        assert_eq!(World::of_source(js), World::Aggregate);
        let transform =
            "Transformer = sluice.export(Upper)\n# Aggregator = not bound in a comment\n";
        assert_eq!(World::of_source(transform), World::Transform);
        assert_eq!(
            World::of_source("export const transformer = exportTransform(P);"),
            World::Transform
        );
        let c = "#define SLUICE_AGGREGATE 1\n#include \"sluice.h\"\n";
        assert_eq!(World::of_source(c), World::Aggregate);
        assert_eq!(
            World::of_source("#include \"sluice.h\"\n"),
            World::Transform
        );
    }
}
