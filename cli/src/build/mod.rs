//! `sluice plugin build`: compiles a plugin directory to a WebAssembly
//! component, whatever language it is written in.
//!
//! The language is detected from the files in the directory
//! ([`Language::detect`]); each language has its own module:
//!
//! * [`rust`]: a crate (`Cargo.toml`), built with cargo (rustup's
//!   `wasm32-wasip2` target, or Debian's `rustc-web` with build-std).
//! * [`python`]: `app.py`, built with `componentize-py`.
//! * [`javascript`]: `plugin.js`, built with `componentize-js`.
//! * [`c`]: `plugin.c`, built with clang's wasm32 target against bindings
//!   that `wit-bindgen c` generates at build time.
//!
//! Python, JavaScript and C plugins are built against the WIT package and
//! the language SDK embedded in this binary ([`sdk`]), so a plugin
//! directory holds only the author's code. `scripts/setup-toolchain.sh`
//! installs every toolchain. Python and JavaScript builds of unchanged
//! inputs are reused from a [`BuildCache`].

pub mod c;
pub mod cache;
pub mod javascript;
pub mod python;
pub mod rust;
pub mod sdk;

pub use cache::BuildCache;
pub use rust::{Route, build_plugin_with_route, build_std_available, detect_route};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The languages `sluice plugin build` and `sluice plugin new` support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// A Rust crate using `sluice-sdk`.
    Rust,
    /// A Python module `app.py` using the `sluice` Python SDK.
    Python,
    /// An ES module `plugin.js` using the `sluice.js` SDK.
    JavaScript,
    /// A C file `plugin.c` using `sluice.h`.
    C,
}

impl Language {
    /// Every supported language.
    pub const ALL: [Language; 4] = [
        Language::Rust,
        Language::Python,
        Language::JavaScript,
        Language::C,
    ];

    /// The file whose presence marks a plugin directory as this language.
    pub fn marker_file(self) -> &'static str {
        match self {
            Language::Rust => "Cargo.toml",
            Language::Python => "app.py",
            Language::JavaScript => "plugin.js",
            Language::C => "plugin.c",
        }
    }

    /// The name used on the command line (`--lang`).
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::JavaScript => "js",
            Language::C => "c",
        }
    }

    /// Parses a `--lang` value.
    pub fn from_name(name: &str) -> Result<Language> {
        match name.to_ascii_lowercase().as_str() {
            "rust" | "rs" => Ok(Language::Rust),
            "python" | "py" => Ok(Language::Python),
            "js" | "javascript" => Ok(Language::JavaScript),
            "c" => Ok(Language::C),
            other => bail!("unknown plugin language `{other}` (use rust, python, js or c)"),
        }
    }

    /// The language of the plugin in `dir`, from its marker file.
    pub fn detect(dir: &Path) -> Result<Language> {
        if !dir.is_dir() {
            bail!("{} is not a plugin directory", dir.display());
        }
        let found: Vec<Language> = Language::ALL
            .into_iter()
            .filter(|language| dir.join(language.marker_file()).is_file())
            .collect();
        match found.as_slice() {
            [language] => Ok(*language),
            [] => bail!(
                "{}: no plugin found (expected one of {})",
                dir.display(),
                Language::ALL.map(|l| l.marker_file()).join(", ")
            ),
            several => bail!(
                "{}: ambiguous plugin language (found {})",
                dir.display(),
                several
                    .iter()
                    .map(|l| l.marker_file())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        }
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a build produced.
#[derive(Debug, Clone)]
pub struct BuiltPlugin {
    /// The component file.
    pub path: PathBuf,
    /// Its size.
    pub size_bytes: u64,
    /// The plugin's language.
    pub language: Language,
    /// For Rust plugins, the toolchain route used.
    pub route: Option<Route>,
    /// Whether the component came from the [`BuildCache`] (its inputs had
    /// not changed since a build that stored it).
    pub reused: bool,
}

/// How [`build_plugin_with`] builds a plugin.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BuildOptions {
    /// Where to write the component (default: `target/sluice/<name>.wasm`
    /// under the plugin, or under its cargo workspace for Rust).
    pub output: Option<PathBuf>,
    /// Show a spinner on the terminal while the build runs.
    pub show_progress: bool,
    /// Reuse Python and JavaScript builds of unchanged inputs from this
    /// cache, and store new ones in it (`None`: always build).
    pub cache: Option<BuildCache>,
}

impl BuildOptions {
    /// No spinner, the default output, the default [`BuildCache`].
    pub fn new() -> Self {
        BuildOptions {
            output: None,
            show_progress: false,
            cache: Some(BuildCache::new(BuildCache::default_dir())),
        }
    }
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// Builds the plugin in `dir` (any language, see [`Language::detect`]) and
/// writes the component to `output` (default: `target/sluice/<name>.wasm`
/// under the plugin, or under its cargo workspace for Rust), reusing an
/// unchanged build from the default [`BuildCache`].
pub fn build_plugin(dir: &Path, output: Option<&Path>, show_progress: bool) -> Result<BuiltPlugin> {
    let mut options = BuildOptions::new();
    options.output = output.map(Path::to_path_buf);
    options.show_progress = show_progress;
    build_plugin_with(dir, &options)
}

/// Builds the plugin in `dir` as `options` say.
pub fn build_plugin_with(dir: &Path, options: &BuildOptions) -> Result<BuiltPlugin> {
    let output = options.output.as_deref();
    let language = Language::detect(dir)?;
    if language == Language::Rust {
        return rust::build(dir, output, detect_route()?, options.show_progress);
    }
    let name = plugin_name(dir)?;
    let output = match output {
        Some(path) => path.to_path_buf(),
        None => dir
            .join("target")
            .join("sluice")
            .join(format!("{name}.wasm")),
    };
    let cached = match &options.cache {
        Some(cache) if BuildCache::caches(language) => {
            let tool = match language {
                Language::Python => python::componentize_py().into(),
                _ => javascript::componentize_js().into_os_string(),
            };
            let key = cache.key(dir, language, &tool)?;
            Some((cache, key))
        }
        _ => None,
    };
    if let Some((cache, key)) = &cached
        && let Some(component) = cache.get(key)
    {
        let mut built = write_component(&component, &output, language, None)?;
        built.reused = true;
        return Ok(built);
    }
    let source_path = dir.join(language.marker_file());
    let source = std::fs::read_to_string(&source_path)
        .with_context(|| format!("reading {}", source_path.display()))?;
    let world = sdk::World::of_source(&source);
    let progress = Spinner::start(&name, options.show_progress);
    let component = match language {
        Language::Python => python::build(dir, &scratch_dir(dir)?, world, &progress),
        Language::JavaScript => javascript::build(dir, &scratch_dir(dir)?, world, &progress),
        Language::C => c::build(dir, &scratch_dir(dir)?, world, &progress),
        Language::Rust => unreachable!("handled above"),
    };
    progress.finish();
    let component = component.with_context(|| format!("building {language} plugin `{name}`"))?;
    let built = write_component(&component, &output, language, None)?;
    if let Some((cache, key)) = &cached
        && let Err(error) = cache.put(key, &component)
    {
        // The build succeeded; only its reuse next time is lost.
        tracing::warn!(error = format!("{error:#}"), "could not cache the build");
    }
    Ok(built)
}

/// Compiles the component at `path` to this host's native code, into the
/// compiled-component cache `sluice run` reads (the same engine settings),
/// unless it is there already. `sluice plugin build` does it, so that the
/// first run of a plugin does not: a Python component (18 MB) took 11 s of
/// CPU and a 586 MB peak before the first record (issue 45). Returns
/// whether it was cached already, and how long loading or compiling took.
pub fn compile_for_this_host(
    path: &Path,
) -> Result<(sluice_host::runtime::CacheOutcome, Duration)> {
    let runtime =
        sluice_host::runtime::PluginRuntime::new(sluice_host::runtime::RuntimeConfig::default())?;
    let component = runtime
        .load(path)
        .with_context(|| format!("compiling {} for this host", path.display()))?;
    Ok((component.cache, component.load_time))
}

/// A plugin's name: its directory's name.
pub fn plugin_name(dir: &Path) -> Result<String> {
    let canonical =
        std::fs::canonicalize(dir).with_context(|| format!("cannot open {}", dir.display()))?;
    canonical
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
        .with_context(|| format!("{} has no usable directory name", dir.display()))
}

/// A fresh `target/sluice/build` directory under the plugin for
/// intermediate files.
fn scratch_dir(dir: &Path) -> Result<PathBuf> {
    let scratch = dir.join("target").join("sluice").join("build");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)
            .with_context(|| format!("clearing {}", scratch.display()))?;
    }
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    Ok(scratch)
}

/// Validates `component` and writes it to `output`.
fn write_component(
    component: &[u8],
    output: &Path,
    language: Language,
    route: Option<Route>,
) -> Result<BuiltPlugin> {
    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
        .validate_all(component)
        .with_context(|| format!("the {language} build produced an invalid component"))?;
    if let Some(parent) = output.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    // A process may be loading the file while another builds it again.
    sluice_host::runtime::store_file(output, component)
        .with_context(|| format!("writing {}", output.display()))?;
    Ok(BuiltPlugin {
        path: output.to_path_buf(),
        size_bytes: component.len() as u64,
        language,
        route,
        reused: false,
    })
}

/// Wraps a core module (with a component-type custom section, as
/// wit-bindgen emits) into a component. `wasi_adapter` is the WASI
/// preview1 adapter for modules that import `wasi_snapshot_preview1`.
pub fn componentize(module: &[u8], wasi_adapter: Option<&[u8]>) -> Result<Vec<u8>> {
    let mut encoder = wit_component::ComponentEncoder::default()
        .module(module)?
        .validate(true);
    if let Some(adapter) = wasi_adapter {
        encoder = encoder.adapter("wasi_snapshot_preview1", adapter)?;
    }
    encoder.encode()
}

/// Runs a build tool, failing with its output when it fails.
fn run_tool(command: &mut Command, what: &str) -> Result<()> {
    let output = command
        .output()
        .with_context(|| format!("cannot run {what} (run scripts/setup-toolchain.sh)"))?;
    if !output.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// A spinner on the terminal while a build runs (hidden when not wanted).
pub(crate) struct Spinner {
    bar: ProgressBar,
}

impl Spinner {
    /// Starts a spinner for plugin `name`.
    pub(crate) fn start(name: &str, show: bool) -> Spinner {
        let bar = if show {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed} building {prefix}: {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_prefix(name.to_string());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        } else {
            ProgressBar::hidden()
        };
        Spinner { bar }
    }

    /// Shows what the build is doing now.
    pub(crate) fn step(&self, message: impl Into<String>) {
        self.bar.set_message(message.into());
    }

    /// Removes the spinner.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Resolves an operator's `plugin` path for `sluice run`: component files
/// as they are, plugin directories (any language) built first.
pub fn resolve_plugin(path: &Path) -> std::result::Result<PathBuf, String> {
    if path.is_dir() {
        build_plugin(path, None, true)
            .map(|built| built.path)
            .map_err(|error| format!("{error:#}"))
    } else {
        Ok(path.to_path_buf())
    }
}
