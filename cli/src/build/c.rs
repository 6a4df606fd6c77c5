//! C plugins: `plugin.c` (plus any `.c` files beside it), compiled with
//! clang's `wasm32-wasi` target.
//!
//! The bindings for the plugin's world (`fast-projected-transform`, or
//! `fast-projected-aggregate` when `plugin.c` says `#define
//! SLUICE_AGGREGATE 1`) are generated at build time
//! with `wit-bindgen c` (as a library, so no extra tool is needed), next to the
//! `sluice.h`/`sluice.c` SDK embedded in this binary; Debian's `wasi-libc`
//! provides the C library. The core module is turned into a component with
//! `wit-component`; only a module that calls WASI functions (e.g. `printf`)
//! gets the WASI preview1 adapter.

use super::{Spinner, componentize, run_tool, sdk};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use wit_bindgen_core::wit_parser::Resolve;

/// The C compiler: `$SLUICE_CLANG`, else Debian's `clang-19`.
fn clang() -> String {
    std::env::var("SLUICE_CLANG").unwrap_or_else(|_| "clang-19".to_string())
}

/// The WIT world a C plugin of `world` is built for: the Rust SDK's
/// `fast-projected-transform` or `fast-projected-aggregate`, the typed
/// exports and, beside them, the packed and projected batch exports the
/// host prefers (one buffer each way per batch; ADR 0015).
fn c_world_name(world: sdk::World) -> &'static str {
    match world {
        sdk::World::Transform => "fast-projected-transform",
        sdk::World::Aggregate => "fast-projected-aggregate",
    }
}

/// Writes the `wit-bindgen c` bindings of `world` into `dir` (e.g.
/// `fast_projected_transform.h`, `fast_projected_transform.c`,
/// `fast_projected_transform_component_type.o`).
pub fn generate_bindings(dir: &Path, world: sdk::World) -> Result<Vec<PathBuf>> {
    let mut resolve = Resolve::default();
    let package = resolve
        .push_str("plugin.wit", sdk::WIT)
        .context("parsing the embedded WIT package")?;
    let world = resolve.select_world(&[package], Some(c_world_name(world)))?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world, &mut files)
        .context("generating C bindings")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for (name, contents) in files.iter() {
        let path = dir.join(name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// Builds the C plugin in `dir` for `world`; intermediate files go to
/// `scratch`.
pub(super) fn build(
    dir: &Path,
    scratch: &Path,
    world: sdk::World,
    progress: &Spinner,
) -> Result<Vec<u8>> {
    progress.step("wit-bindgen c");
    let bindings_dir = scratch.join("bindings");
    let bindings = generate_bindings(&bindings_dir, world)?;
    sdk::write(&bindings_dir, "sluice.h", sdk::C_HEADER)?;
    let sdk_source = sdk::write(&bindings_dir, "sluice.c", sdk::C_SOURCE)?;

    let mut sources: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "c") {
            sources.push(path);
        }
    }
    sources.sort();
    sources.push(sdk_source);
    sources.extend(
        bindings
            .iter()
            .filter(|p| p.extension().is_some_and(|ext| ext == "c" || ext == "o"))
            .cloned(),
    );

    let module_path = scratch.join("plugin.core.wasm");
    progress.step("clang");
    run_tool(
        Command::new(clang())
            .args([
                "--target=wasm32-wasi",
                "-mexec-model=reactor",
                "-O2",
                "-std=c11",
                "-Wall",
                "-Werror=implicit-function-declaration",
            ])
            .args(match world {
                // sluice.h includes the aggregate world's bindings.
                sdk::World::Aggregate => &["-DSLUICE_AGGREGATE=1"][..],
                sdk::World::Transform => &[],
            })
            .arg("-I")
            .arg(&bindings_dir)
            .arg("-I")
            .arg(dir)
            .args(&sources)
            .arg("-o")
            .arg(&module_path),
        "clang (wasm32-wasi)",
    )?;
    let module = std::fs::read(&module_path)
        .with_context(|| format!("reading {}", module_path.display()))?;
    let adapter = if imports_wasi_preview1(&module)? {
        Some(wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER)
    } else {
        None
    };
    componentize(&module, adapter).context("componentizing the C module")
}

/// Whether a core module imports WASI preview1 functions.
fn imports_wasi_preview1(module: &[u8]) -> Result<bool> {
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        if let wasmparser::Payload::ImportSection(reader) = payload? {
            for import in reader.into_imports() {
                if import?.module == "wasi_snapshot_preview1" {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}
