//! `sluice plugin new`: scaffolds a plugin that builds and runs, in Rust,
//! Python, JavaScript or C. Every transform template is the same small
//! validator: it forwards records that have a required field and
//! dead-letters the rest. Every aggregate template is the same count and
//! sum of an integer field per key and window.

use crate::build::Language;
use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use std::path::{Path, PathBuf};

/// Where the SDK is: `$SLUICE_SDK_PATH`, else the `guest-sdk` directory of
/// the source tree this binary was built from.
pub fn default_sdk_path() -> PathBuf {
    std::env::var_os("SLUICE_SDK_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("guest-sdk")
        })
}

/// Which kind of plugin to scaffold: the WIT world it implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TemplateWorld {
    /// A record transform (`[[operators]] plugin = ..`).
    Transform,
    /// A window aggregate (`create`/`add`/`merge`/`finish`; a window
    /// operator's `plugin`).
    Aggregate,
}

/// Creates `<parent>/<name>/` with a working plugin of `world` in
/// `language`. Rust plugins depend on the `sluice-sdk` crate at
/// `sdk_path`; the other languages' SDKs are provided by `sluice plugin
/// build`.
pub fn new_plugin(
    parent: &Path,
    name: &str,
    language: Language,
    world: TemplateWorld,
    sdk_path: &Path,
) -> Result<PathBuf> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!("plugin name `{name}` must be non-empty and use only letters, digits, `-` and `_`");
    }
    let dir = parent.join(name);
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    use TemplateWorld::{Aggregate, Transform};
    let (file, template) = match (language, world) {
        (Language::Rust, _) => return new_rust_plugin(&dir, name, world, sdk_path),
        (Language::Python, Transform) => ("app.py", include_str!("../templates/python/app.py")),
        (Language::Python, Aggregate) => {
            ("app.py", include_str!("../templates/python/aggregate.py"))
        }
        (Language::JavaScript, Transform) => {
            ("plugin.js", include_str!("../templates/js/plugin.js"))
        }
        (Language::JavaScript, Aggregate) => {
            ("plugin.js", include_str!("../templates/js/aggregate.js"))
        }
        (Language::C, Transform) => ("plugin.c", include_str!("../templates/c/plugin.c")),
        (Language::C, Aggregate) => ("plugin.c", include_str!("../templates/c/aggregate.c")),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join(file), template.replace("{{name}}", name))?;
    std::fs::write(dir.join(".gitignore"), "/target\n")?;
    Ok(dir)
}

/// The Rust flavour of [`new_plugin`]: a crate of its own (the SDK's
/// `aggregate` feature selects that world).
fn new_rust_plugin(
    dir: &Path,
    name: &str,
    world: TemplateWorld,
    sdk_path: &Path,
) -> Result<PathBuf> {
    let sdk = std::fs::canonicalize(sdk_path).with_context(|| {
        format!(
            "sluice-sdk not found at {} (set SLUICE_SDK_PATH)",
            sdk_path.display()
        )
    })?;
    std::fs::create_dir_all(dir.join("src"))
        .with_context(|| format!("creating {}", dir.display()))?;
    let manifest = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib"]

[dependencies]
sluice-sdk = {{ path = "{sdk}"{features} }}
serde = {{ version = "1", features = ["derive"] }}
serde_json = "1"

[profile.release]
opt-level = 3
lto = true
codegen-units = 1
panic = "abort"
strip = "debuginfo"

# A plugin is its own workspace: it is compiled for WebAssembly.
[workspace]
"#,
        sdk = sdk.display(),
        features = match world {
            TemplateWorld::Transform => "",
            TemplateWorld::Aggregate => r#", features = ["aggregate"]"#,
        }
    );
    let source = match world {
        TemplateWorld::Transform => include_str!("../templates/rust/lib.rs"),
        TemplateWorld::Aggregate => include_str!("../templates/rust/aggregate.rs"),
    };
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::write(
        dir.join("src").join("lib.rs"),
        source.replace("{{name}}", name),
    )?;
    std::fs::write(dir.join(".gitignore"), "/target\n")?;
    Ok(dir.to_path_buf())
}
