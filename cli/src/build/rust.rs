//! Rust plugins: a crate compiled to a WebAssembly component.
//!
//! Two toolchain routes, chosen automatically:
//!
//! * **wasm32-wasip2** (a rustup target, when installed): `cargo build`
//!   emits a component directly.
//! * **Debian build-std** (no rustup wasm target needed): Debian's
//!   `rustc-web` builds `std` for `wasm32-unknown-unknown`, `wasm-ld` links a
//!   core module, and `wit-component` turns it into a component.
//!
//! `scripts/setup-toolchain.sh` installs whichever is missing. Set
//! `SLUICE_WASM_ROUTE=wasip2|build-std` to force a route.

use super::{BuiltPlugin, Language, Spinner, componentize, write_component};
use anyhow::{Context, Result, bail};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Debian paths of the build-std route.
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_STD_SOURCES: &str = "/usr/lib/rustlib/src/rust";
const DEBIAN_WASM_LD: &str = "/usr/lib/llvm-19/bin/wasm-ld";

/// Code generation flags for plugin crates: WebAssembly SIMD (`simd128`),
/// which Sluice's runtime always enables, so that `memchr`, copies and
/// byte loops (JSON scans, ASCII case changes) work 16 bytes at a time
/// (a few per cent on the record-path benchmark's filter plugin, ADR 0015).
/// A user's `RUSTFLAGS` (or `CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS`) wins
/// over this; `rustflags` set in a `.cargo/config.toml` are replaced by it
/// on the `wasip2` route.
const GUEST_RUSTFLAGS: &str = "-C target-feature=+simd128";

/// How a plugin crate is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// rustup's `wasm32-wasip2` target.
    Wasip2,
    /// Debian `rustc-web` + `-Zbuild-std` + `wit-component`.
    BuildStd,
}

/// Picks the toolchain route (see the module docs).
pub fn detect_route() -> Result<Route> {
    match std::env::var("SLUICE_WASM_ROUTE").as_deref() {
        Ok("wasip2") => return Ok(Route::Wasip2),
        Ok("build-std") => return Ok(Route::BuildStd),
        Ok(other) => bail!("SLUICE_WASM_ROUTE={other}: expected `wasip2` or `build-std`"),
        Err(_) => {}
    }
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.trim() == "wasm32-wasip2")
        })
        .unwrap_or(false);
    if installed {
        return Ok(Route::Wasip2);
    }
    if build_std_available() {
        return Ok(Route::BuildStd);
    }
    bail!(
        "no WebAssembly toolchain found: run scripts/setup-toolchain.sh (installs the rustup wasm32-wasip2 target, or Debian's rustc-web, rust-web-src and lld-19)"
    )
}

/// Whether Debian's build-std toolchain (rustc-web, rust-web-src, lld-19) is
/// installed.
pub fn build_std_available() -> bool {
    Path::new(DEBIAN_RUSTC).exists()
        && Path::new(DEBIAN_STD_SOURCES).exists()
        && Path::new(DEBIAN_WASM_LD).exists()
}

/// Builds the plugin crate in `crate_dir` with the toolchain `route` and
/// writes the component to `output` (default:
/// `<cargo target dir>/sluice/<crate name>.wasm`).
pub fn build_plugin_with_route(
    crate_dir: &Path,
    output: Option<&Path>,
    route: Route,
    show_progress: bool,
) -> Result<BuiltPlugin> {
    build(crate_dir, output, route, show_progress)
}

/// See [`build_plugin_with_route`].
pub(super) fn build(
    crate_dir: &Path,
    output: Option<&Path>,
    route: Route,
    show_progress: bool,
) -> Result<BuiltPlugin> {
    let manifest = crate_dir.join("Cargo.toml");
    let manifest_text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("{} is not a plugin crate", crate_dir.display()))?;
    let manifest_toml: toml::Table = toml::from_str(&manifest_text)
        .with_context(|| format!("cannot parse {}", manifest.display()))?;
    let Some(name) = manifest_toml
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
    else {
        bail!("{} has no [package] name", manifest.display());
    };
    let name = name.to_string();
    let target_dir = cargo_target_dir(crate_dir)?;

    let mut command = Command::new("cargo");
    command
        .current_dir(crate_dir)
        .args([
            "build",
            "--release",
            "--quiet",
            "--message-format=json-render-diagnostics",
            "-p",
            &name,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let route_target_dir = match route {
        Route::Wasip2 => {
            command.args(["--target", "wasm32-wasip2"]);
            if std::env::var_os("CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS").is_none() {
                command.env("CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS", GUEST_RUSTFLAGS);
            }
            target_dir.clone()
        }
        Route::BuildStd => {
            let dir = target_dir.join("build-std");
            let path = format!(
                "/usr/lib/llvm-19/bin:{}",
                std::env::var("PATH").unwrap_or_default()
            );
            command
                .args([
                    "--target",
                    "wasm32-unknown-unknown",
                    "-Zbuild-std=std,panic_abort",
                ])
                .env("PATH", path)
                .env("RUSTC_BOOTSTRAP", "1")
                .env("RUSTC", DEBIAN_RUSTC)
                .env(
                    "RUSTFLAGS",
                    format!("-C linker={DEBIAN_WASM_LD} {GUEST_RUSTFLAGS}"),
                );
            dir
        }
    };
    command.arg("--target-dir").arg(&route_target_dir);
    // A rustup toolchain file or environment must not leak into the Debian route.
    command.env_remove("RUSTUP_TOOLCHAIN");

    let progress = Spinner::start(&name, show_progress);
    let mut child = command.spawn().context("cannot run cargo")?;
    let mut artifact: Option<PathBuf> = None;
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.context("reading cargo output")?;
            let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if message["reason"] == "compiler-artifact" {
                let crate_name = message["target"]["name"].as_str().unwrap_or_default();
                progress.step(format!("compiled {crate_name}"));
                let is_plugin = crate_name == name.replace('-', "_") || crate_name == name;
                if is_plugin && let Some(files) = message["filenames"].as_array() {
                    artifact = files
                        .iter()
                        .filter_map(|f| f.as_str())
                        .find(|f| f.ends_with(".wasm"))
                        .map(PathBuf::from);
                }
            }
        }
    }
    let status = child.wait().context("waiting for cargo")?;
    progress.finish();
    if !status.success() {
        bail!("cargo build of plugin `{name}` failed ({status})");
    }
    let Some(artifact) = artifact else {
        bail!("cargo built `{name}` but produced no .wasm (is its crate-type [\"cdylib\"]?)");
    };
    let bytes =
        std::fs::read(&artifact).with_context(|| format!("reading {}", artifact.display()))?;
    let component = match route {
        Route::Wasip2 => bytes,
        Route::BuildStd => componentize(&bytes, None)
            .with_context(|| format!("componentizing {}", artifact.display()))?,
    };
    let output = match output {
        Some(path) => path.to_path_buf(),
        None => target_dir.join("sluice").join(format!("{name}.wasm")),
    };
    write_component(&component, &output, Language::Rust, Some(route))
}

/// The cargo target directory of the workspace containing `crate_dir`.
fn cargo_target_dir(crate_dir: &Path) -> Result<PathBuf> {
    let output = Command::new("cargo")
        .current_dir(crate_dir)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .context("cannot run cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed in {}: {}",
            crate_dir.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("parsing cargo metadata")?;
    metadata["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .context("cargo metadata has no target_directory")
}
