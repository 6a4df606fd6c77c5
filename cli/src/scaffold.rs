//! `sluice plugin new`: scaffolds a plugin that builds and runs, in Rust,
//! Python, JavaScript or C. Every template is the same small validator: it
//! forwards records that have a required field and dead-letters the rest.

use crate::build::Language;
use anyhow::{Context, Result, bail};
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

/// Creates `<parent>/<name>/` with a working plugin in `language`. Rust
/// plugins depend on the `sluice-sdk` crate at `sdk_path`; the other
/// languages' SDKs are provided by `sluice plugin build`.
pub fn new_plugin(
    parent: &Path,
    name: &str,
    language: Language,
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
    let (file, template) = match language {
        Language::Rust => return new_rust_plugin(&dir, name, sdk_path),
        Language::Python => ("app.py", include_str!("../templates/python/app.py")),
        Language::JavaScript => ("plugin.js", include_str!("../templates/js/plugin.js")),
        Language::C => ("plugin.c", include_str!("../templates/c/plugin.c")),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join(file), template.replace("{{name}}", name))?;
    std::fs::write(dir.join(".gitignore"), "/target\n")?;
    Ok(dir)
}

/// The Rust flavour of [`new_plugin`]: a crate of its own.
fn new_rust_plugin(dir: &Path, name: &str, sdk_path: &Path) -> Result<PathBuf> {
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
sluice-sdk = {{ path = "{sdk}" }}
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
        sdk = sdk.display()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::write(
        dir.join("src").join("lib.rs"),
        include_str!("../templates/rust/lib.rs").replace("{{name}}", name),
    )?;
    std::fs::write(dir.join(".gitignore"), "/target\n")?;
    Ok(dir.to_path_buf())
}
