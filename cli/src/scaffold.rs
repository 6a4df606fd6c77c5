//! `sluice plugin new`: scaffolds a plugin crate that builds and runs.

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

/// Creates `<parent>/<name>/` with a Cargo.toml and a working `src/lib.rs`.
pub fn new_plugin(parent: &Path, name: &str, sdk_path: &Path) -> Result<PathBuf> {
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
        TEMPLATE.replace("{{name}}", name),
    )?;
    std::fs::write(dir.join(".gitignore"), "/target\n")?;
    Ok(dir)
}

const TEMPLATE: &str = r#"//! {{name}}: a Sluice transform plugin.
//!
//! Build: `sluice plugin build .`
//! Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl`

use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

struct Plugin {
    /// Field every record must have (config key `required_field`).
    required_field: String,
}

impl Transform for Plugin {
    fn init(config: &Config) -> Result<Self, String> {
        Ok(Plugin {
            required_field: config.get("required_field").unwrap_or("id").to_string(),
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        // Returning Err sends this record (alone) to the dead-letter output.
        let value = record.value_json_value()?;
        if value.get(&self.required_field).is_none() {
            out.dead_letter(&format!("missing field `{}`", self.required_field));
            return Ok(());
        }
        out.forward();
        Ok(())
    }
}

export_transform!(Plugin);
"#;
