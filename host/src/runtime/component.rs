//! A loaded plugin: compiled, version-checked and linked, ready to
//! instantiate any number of times.

use super::bindings::{
    aggregate, fast, fast_aggregate, fast_projected, fast_projected_aggregate, projected, text,
    text_aggregate, text_projected_aggregate, typed,
};
use super::cache::CacheOutcome;
use super::host_api::PluginState;
use super::{PluginRuntime, RuntimeError, WIT_PACKAGE_VERSION};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use wasmtime::component::InstancePre;

/// Which world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginWorld {
    /// `sluice:plugin/transform`: typed batches only.
    Transform,
    /// `sluice:plugin/fast-transform`: typed and packed batches.
    FastTransform,
    /// `sluice:plugin/fast-projected-transform`: `fast-transform` plus
    /// projected batches with packed output (Rust plugins).
    FastProjectedTransform,
    /// `sluice:plugin/text-transform`: typed batches, outcomes packed in a
    /// string (Python plugins).
    TextTransform,
    /// `sluice:plugin/projected-transform`: `text-transform` plus batches
    /// with the JSON fields the plugin reads found by the host (Python
    /// plugins).
    ProjectedTransform,
    /// `sluice:plugin/aggregate`: a window aggregate.
    Aggregate,
    /// `sluice:plugin/fast-aggregate`: a window aggregate with the packed
    /// `add` for whole batches.
    FastAggregate,
    /// `sluice:plugin/fast-projected-aggregate`: `fast-aggregate` plus the
    /// `add` with the JSON fields the plugin reads found by the host (Rust
    /// plugins).
    FastProjectedAggregate,
    /// `sluice:plugin/text-aggregate`: a window aggregate whose results
    /// come back as strings.
    TextAggregate,
    /// `sluice:plugin/text-projected-aggregate`: `text-aggregate` plus the
    /// projected `add` for whole batches, its answer as a string (Python
    /// and JavaScript plugins).
    TextProjectedAggregate,
}

impl PluginWorld {
    /// Whether plugins of this world are window aggregates (rather than
    /// transforms).
    pub fn is_aggregate(self) -> bool {
        matches!(
            self,
            PluginWorld::Aggregate
                | PluginWorld::FastAggregate
                | PluginWorld::FastProjectedAggregate
                | PluginWorld::TextAggregate
                | PluginWorld::TextProjectedAggregate
        )
    }
}

impl std::fmt::Display for PluginWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PluginWorld::Transform => "transform",
            PluginWorld::FastTransform => "fast-transform",
            PluginWorld::FastProjectedTransform => "fast-projected-transform",
            PluginWorld::TextTransform => "text-transform",
            PluginWorld::ProjectedTransform => "projected-transform",
            PluginWorld::Aggregate => "aggregate",
            PluginWorld::FastAggregate => "fast-aggregate",
            PluginWorld::FastProjectedAggregate => "fast-projected-aggregate",
            PluginWorld::TextAggregate => "text-aggregate",
            PluginWorld::TextProjectedAggregate => "text-projected-aggregate",
        })
    }
}

/// The pre-linked instantiation recipe and where to find the exports.
pub(crate) struct Pre {
    pub(crate) instance_pre: InstancePre<PluginState>,
    /// Present for transform plugins.
    pub(crate) transformer: Option<typed::TransformIndices>,
    /// Present for `fast-transform` and `fast-projected-transform` plugins.
    pub(crate) packed: Option<fast::FastTransformIndices>,
    /// Present for `fast-projected-transform` plugins.
    pub(crate) projected_packed: Option<fast_projected::FastProjectedTransformIndices>,
    /// Present for `text-transform` and `projected-transform` plugins.
    pub(crate) text_packed: Option<text::TextTransformIndices>,
    /// Present for `projected-transform` plugins.
    pub(crate) projected: Option<projected::ProjectedTransformIndices>,
    /// Present for aggregate plugins.
    pub(crate) aggregator: Option<aggregate::AggregateIndices>,
    /// Present for `fast-aggregate` and `fast-projected-aggregate` plugins.
    pub(crate) packed_aggregator: Option<fast_aggregate::FastAggregateIndices>,
    /// Present for `fast-projected-aggregate` plugins.
    pub(crate) projected_aggregator:
        Option<fast_projected_aggregate::FastProjectedAggregateIndices>,
    /// Present for `text-aggregate` and `text-projected-aggregate` plugins.
    pub(crate) text_aggregator: Option<text_aggregate::TextAggregateIndices>,
    /// Present for `text-projected-aggregate` plugins.
    pub(crate) text_projected_aggregator:
        Option<text_projected_aggregate::TextProjectedAggregateIndices>,
}

/// A plugin ready to instantiate.
pub struct PluginComponent {
    /// Plugin name: the file name without `.wasm`.
    pub name: String,
    /// First 12 hex digits of the SHA-256 of the component: names this
    /// exact build in logs and dead-letter headers.
    pub content_hash: String,
    /// The whole SHA-256 of the component, hex (the `sluice_plugin_info`
    /// metric; `sluice serve` stores uploads under it).
    pub sha256: String,
    /// Where it was loaded from.
    pub path: PathBuf,
    /// Size of the component file.
    pub size_bytes: u64,
    /// The world it implements.
    pub world: PluginWorld,
    /// The `sluice:plugin` version it was built against.
    pub wit_version: String,
    /// Names of the component's imports.
    pub imports: Vec<String>,
    /// Names of the component's exports.
    pub exports: Vec<String>,
    /// Whether compilation was served from the cache.
    pub cache: CacheOutcome,
    /// Time to compile or load from cache.
    pub load_time: Duration,
    pub(crate) pre: Pre,
    pub(crate) runtime: PluginRuntime,
}

impl PluginComponent {
    /// Its name and digest, as an operator's metrics show them.
    pub fn identity(&self) -> crate::metrics::PluginIdentity {
        crate::metrics::PluginIdentity {
            name: self.name.clone(),
            sha256: self.sha256.clone(),
        }
    }

    /// `name@hash`, as used in logs and dead-letter headers.
    pub fn label(&self) -> String {
        format!("{}@{}", self.name, self.content_hash)
    }
}

pub(crate) fn load(
    runtime: &PluginRuntime,
    path: PathBuf,
) -> Result<PluginComponent, RuntimeError> {
    let started = Instant::now();
    let wasm = std::fs::read(&path).map_err(|source| RuntimeError::Read {
        path: path.clone(),
        source,
    })?;
    let engine = runtime.engine();
    let (component, cache) =
        runtime
            .cache()
            .load(engine, &wasm)
            .map_err(|error| RuntimeError::Compile {
                path: path.clone(),
                message: format!("{error:#}"),
            })?;
    let load_time = started.elapsed();

    let component_type = component.component_type();
    let imports: Vec<String> = component_type
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let exports: Vec<String> = component_type
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();

    let wit_version = check_wit_version(&path, imports.iter().chain(&exports))?;
    let has_export = |interface: &str| {
        let wanted = format!("sluice:plugin/{interface}@{WIT_PACKAGE_VERSION}");
        exports.contains(&wanted)
    };
    let world = if has_export("transformer")
        && has_export("packed-transformer")
        && has_export("projected-packed-transformer")
    {
        PluginWorld::FastProjectedTransform
    } else if has_export("transformer") && has_export("packed-transformer") {
        PluginWorld::FastTransform
    } else if has_export("transformer")
        && has_export("text-packed-transformer")
        && has_export("projected-transformer")
    {
        PluginWorld::ProjectedTransform
    } else if has_export("transformer") && has_export("text-packed-transformer") {
        PluginWorld::TextTransform
    } else if has_export("transformer") {
        PluginWorld::Transform
    } else if has_export("aggregator")
        && has_export("packed-aggregator")
        && has_export("projected-aggregator")
    {
        PluginWorld::FastProjectedAggregate
    } else if has_export("aggregator") && has_export("packed-aggregator") {
        PluginWorld::FastAggregate
    } else if has_export("aggregator")
        && has_export("text-aggregator")
        && has_export("text-projected-aggregator")
    {
        PluginWorld::TextProjectedAggregate
    } else if has_export("aggregator") && has_export("text-aggregator") {
        PluginWorld::TextAggregate
    } else if has_export("aggregator") {
        PluginWorld::Aggregate
    } else {
        return Err(RuntimeError::NotATransform {
            path,
            exports: exports.join(", "),
        });
    };

    let link_error = |error: wasmtime::Error| RuntimeError::Link {
        path: path.clone(),
        message: format!("{error:#}"),
    };
    let instance_pre = runtime
        .inner
        .linker
        .instantiate_pre(&component)
        .map_err(link_error)?;
    let mut pre = Pre {
        transformer: None,
        packed: None,
        projected_packed: None,
        text_packed: None,
        projected: None,
        aggregator: None,
        packed_aggregator: None,
        projected_aggregator: None,
        text_aggregator: None,
        text_projected_aggregator: None,
        instance_pre,
    };
    match world {
        PluginWorld::Transform
        | PluginWorld::FastTransform
        | PluginWorld::FastProjectedTransform
        | PluginWorld::TextTransform
        | PluginWorld::ProjectedTransform => {
            pre.transformer =
                Some(typed::TransformIndices::new(&pre.instance_pre).map_err(link_error)?);
        }
        PluginWorld::Aggregate
        | PluginWorld::FastAggregate
        | PluginWorld::FastProjectedAggregate
        | PluginWorld::TextAggregate
        | PluginWorld::TextProjectedAggregate => {
            pre.aggregator =
                Some(aggregate::AggregateIndices::new(&pre.instance_pre).map_err(link_error)?);
        }
    }
    if matches!(
        world,
        PluginWorld::FastTransform | PluginWorld::FastProjectedTransform
    ) {
        pre.packed = Some(fast::FastTransformIndices::new(&pre.instance_pre).map_err(link_error)?);
    }
    if world == PluginWorld::FastProjectedTransform {
        pre.projected_packed = Some(
            fast_projected::FastProjectedTransformIndices::new(&pre.instance_pre)
                .map_err(link_error)?,
        );
    }
    if matches!(
        world,
        PluginWorld::TextTransform | PluginWorld::ProjectedTransform
    ) {
        pre.text_packed =
            Some(text::TextTransformIndices::new(&pre.instance_pre).map_err(link_error)?);
    }
    if world == PluginWorld::ProjectedTransform {
        pre.projected =
            Some(projected::ProjectedTransformIndices::new(&pre.instance_pre).map_err(link_error)?);
    }
    if matches!(
        world,
        PluginWorld::TextAggregate | PluginWorld::TextProjectedAggregate
    ) {
        pre.text_aggregator =
            Some(text_aggregate::TextAggregateIndices::new(&pre.instance_pre).map_err(link_error)?);
    }
    if world == PluginWorld::TextProjectedAggregate {
        pre.text_projected_aggregator = Some(
            text_projected_aggregate::TextProjectedAggregateIndices::new(&pre.instance_pre)
                .map_err(link_error)?,
        );
    }
    if matches!(
        world,
        PluginWorld::FastAggregate | PluginWorld::FastProjectedAggregate
    ) {
        pre.packed_aggregator =
            Some(fast_aggregate::FastAggregateIndices::new(&pre.instance_pre).map_err(link_error)?);
    }
    if world == PluginWorld::FastProjectedAggregate {
        pre.projected_aggregator = Some(
            fast_projected_aggregate::FastProjectedAggregateIndices::new(&pre.instance_pre)
                .map_err(link_error)?,
        );
    }

    let name = path
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".to_string());
    let sha256 = hex::encode(Sha256::digest(&wasm));
    let content_hash = sha256[..12].to_string();
    Ok(PluginComponent {
        name,
        content_hash,
        sha256,
        size_bytes: wasm.len() as u64,
        path,
        world,
        wit_version,
        imports,
        exports,
        cache,
        load_time,
        pre,
        runtime: runtime.clone(),
    })
}

/// Finds the `sluice:plugin` version in the component's interface names and
/// rejects any version but the host's.
fn check_wit_version<'a>(
    path: &std::path::Path,
    names: impl Iterator<Item = &'a String>,
) -> Result<String, RuntimeError> {
    let mut found = None;
    for name in names {
        let Some(rest) = name.strip_prefix("sluice:plugin/") else {
            continue;
        };
        let version = rest.split_once('@').map(|(_, v)| v).unwrap_or("(none)");
        if version != WIT_PACKAGE_VERSION {
            return Err(RuntimeError::VersionMismatch {
                path: path.to_path_buf(),
                plugin_version: version.to_string(),
                host_version: WIT_PACKAGE_VERSION.to_string(),
            });
        }
        found = Some(version.to_string());
    }
    Ok(found.unwrap_or_else(|| WIT_PACKAGE_VERSION.to_string()))
}
