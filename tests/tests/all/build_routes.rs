//! Both toolchain routes (rustup wasm32-wasip2, and Debian rustc-web with
//! build-std + wit-component) build components that behave identically.

use sluice_cli::build::{Route, build_plugin_with_route, detect_route};
use sluice_cli::try_plugin::{TryOptions, try_plugin};

#[test]
fn both_toolchain_routes_build_equivalent_components() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"event_type\":\"bid\",\"auction\":1000,\"bidder\":7,\"price\":1000,\"date_time\":5,\"extra\":\"\"}\n\
         {\"event_type\":\"person\",\"id\":1}\nnot json\n{\"event_type\":\"bid\",\"auction\":1}\n",
    )
    .unwrap();
    let crate_dir = sluice_tests::repo_root()
        .join("plugins")
        .join("currency-convert");
    let mut outputs = Vec::new();
    let routes = [Route::Wasip2, Route::BuildStd];
    // scripts/setup-toolchain.sh installs both routes; say which is missing.
    assert!(
        sluice_cli::build::build_std_available(),
        "Debian build-std toolchain missing: run scripts/setup-toolchain.sh"
    );
    assert_eq!(
        detect_route().ok(),
        Some(Route::Wasip2),
        "rustup wasm32-wasip2 missing: run scripts/setup-toolchain.sh"
    );
    for route in routes {
        let component = dir.path().join(format!("{route:?}.wasm"));
        let built = build_plugin_with_route(&crate_dir, Some(&component), route, false)
            .unwrap_or_else(|error| panic!("{route:?}: {error:#}"));
        assert_eq!(built.route, Some(route));
        let mut printed = Vec::new();
        let counts = try_plugin(&component, &input, TryOptions::default(), &mut printed).unwrap();
        assert_eq!((counts.main, counts.dead_letter), (2, 1), "{route:?}");
        outputs.push(String::from_utf8(printed).unwrap());
    }
    // Dead letters carry a wall-clock time header; compare everything else.
    let strip_time = |text: &str| -> Vec<serde_json::Value> {
        text.lines()
            .map(|line| {
                let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
                if let Some(headers) = value["record"]["headers"].as_object_mut() {
                    headers.remove("sluice.dlq.time");
                }
                value
            })
            .collect()
    };
    assert_eq!(strip_time(&outputs[0]), strip_time(&outputs[1]));
    assert!(outputs[0].contains("\"price\":908"), "{}", outputs[0]);
}
