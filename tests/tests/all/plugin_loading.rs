//! Loading checks: the WIT package version, the compiled-component and
//! per-function caches.

use sluice_host::runtime::{
    CacheOutcome, PluginRuntime, RuntimeConfig, RuntimeError, WIT_PACKAGE_VERSION,
};

/// Synthesizes a real component implementing `world` of the repo's WIT with
/// the package version replaced by `version`.
fn component_with_version(version: &str) -> Vec<u8> {
    let wit = std::fs::read_to_string(sluice_tests::repo_root().join("wit/plugin.wit"))
        .unwrap()
        .replace(
            &format!("sluice:plugin@{WIT_PACKAGE_VERSION}"),
            &format!("sluice:plugin@{version}"),
        );
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve.push_str("plugin.wit", &wit).unwrap();
    let world = resolve.select_world(&[package], Some("transform")).unwrap();
    let mut module =
        wit_component::dummy_module(&resolve, world, wit_parser::ManglingAndAbi::Standard32);
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .unwrap()
}

#[test]
fn plugin_built_against_another_wit_version_is_rejected_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.wasm");
    std::fs::write(&path, component_with_version("0.2.0")).unwrap();
    let runtime = sluice_tests::runtime();
    let error = match runtime.load(&path) {
        Err(error) => error,
        Ok(_) => panic!("a 0.2.0 plugin must be rejected"),
    };
    assert!(
        matches!(error, RuntimeError::VersionMismatch { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("sluice:plugin@0.2.0")
            && message.contains(&format!("sluice:plugin@{WIT_PACKAGE_VERSION}")),
        "{message}"
    );

    // The same synthesized component at the host's version loads.
    std::fs::write(&path, component_with_version(WIT_PACKAGE_VERSION)).unwrap();
    runtime.load(&path).unwrap();
}

#[test]
fn compiled_components_are_cached_by_content() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: cache.path().to_path_buf(),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let identity = sluice_tests::plugin("identity");
    assert_eq!(runtime.load(&identity).unwrap().cache, CacheOutcome::Miss);
    assert_eq!(runtime.load(&identity).unwrap().cache, CacheOutcome::Hit);
    // One compiled artifact (beside the host's key that tags it).
    let artifacts = std::fs::read_dir(cache.path())
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        })
        .count();
    assert_eq!(artifacts, 1);
    assert!(cache.path().join(".host-key").is_file());
}

#[test]
fn a_file_that_is_not_a_component_is_rejected_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.wasm");
    std::fs::write(&path, b"\0asm not really").unwrap();
    let error = sluice_tests::runtime()
        .load(&path)
        .err()
        .expect("junk must not load");
    assert!(error.to_string().contains("junk.wasm"), "{error}");
}

/// A Python plugin this host has never compiled takes the CPython
/// interpreter's functions from the per-function cache the last Python
/// plugin filled, compiles only its own, and runs as if compiled whole.
#[test]
fn a_new_python_plugin_compiles_only_the_functions_the_last_one_did_not_have() {
    use sluice_host::dataflow::{Collector, Operator};
    use sluice_host::runtime::PluginLimits;
    use sluice_host::{Record, SourcePosition};

    let cache = tempfile::tempdir().unwrap();
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: cache.path().to_path_buf(),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let functions = runtime.cache().functions().clone();
    let first = sluice_tests::plugin("python/field-probe");
    assert_eq!(runtime.load(&first).unwrap().cache, CacheOutcome::Miss);
    let (_, compiled_first) = functions.counts();
    assert!(compiled_first > 5_000, "{compiled_first} functions");

    let state = sluice_tests::state_backend();
    let mut filter = sluice_tests::operator(
        &runtime,
        &state,
        "t",
        "python/filter-rewrite",
        PluginLimits::default(),
        &[],
    );
    let (reused, compiled) = functions.counts();
    let compiled_second = compiled - compiled_first;
    assert!(
        reused >= 9 * compiled_second,
        "the second plugin reused {reused} functions and compiled {compiled_second}"
    );

    let values: [&[u8]; 2] = [br#"{"key":3,"text":"abc"}"#, br#"{"key":10,"text":"x"}"#];
    let batch = values
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let position = SourcePosition {
                topic: "in".into(),
                partition: 0,
                offset: i as i64,
            };
            Record::from_value(value.to_vec(), position)
        })
        .collect();
    let mut out = Collector::default();
    filter.process_batch(batch, &mut out).unwrap();
    let emitted: Vec<&[u8]> = out.main.iter().map(|record| &record.value[..]).collect();
    assert_eq!(emitted, [&br#"{"key":3,"text":"ABC"}"#[..]]);
}
