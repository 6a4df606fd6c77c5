//! Swapping the plugin of a running operator (the primitive `sluice serve`'s
//! hot deploy stands on): the new version is instantiated and initialised
//! beside the old one, with the operator's keyed state, and replaces it
//! only if that works. Here the de-duplicating plugin goes from Rust to
//! Python and back mid-stream: ids seen by one version are duplicates for
//! the next, because the state lives in the host, not in the plugin.

use sluice_host::record::{Record, SourcePosition};
use sluice_host::runtime::{EmitRoute, PluginInstance, PluginLimits};
use sluice_host::state::OperatorScope;
use sluice_tests::{plugin, runtime, state_backend};
use std::sync::Arc;

/// Orders `ids` as records (every required field valid).
fn orders(ids: std::ops::Range<u32>) -> Vec<Record> {
    ids.map(|id| {
        let value = serde_json::json!({
            "event_id": format!("e{id}"),
            "user_id": id % 7,
            "amount": 10.5,
        });
        Record::from_value(
            value.to_string(),
            SourcePosition {
                topic: Arc::from("orders"),
                partition: 0,
                offset: i64::from(id),
            },
        )
    })
    .collect()
}

/// The event ids the instance forwards from `records`.
fn forwarded(instance: &mut PluginInstance, records: &[Record]) -> Vec<String> {
    let result = instance
        .call_batch(records)
        .unwrap_or_else(|fault| panic!("{fault:?}"));
    assert!(result.failed.is_empty(), "{:?}", result.failed);
    result
        .emitted
        .iter()
        .filter(|e| e.route == EmitRoute::Main)
        .map(|e| {
            let value: serde_json::Value = serde_json::from_slice(&e.record.value).unwrap();
            value["event_id"].as_str().unwrap().to_string()
        })
        .collect()
}

fn ids(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|id| format!("e{id}")).collect()
}

#[test]
fn a_swapped_plugin_keeps_the_operators_state_across_languages_and_back() {
    let runtime = runtime();
    let state = state_backend();
    let rust = runtime.load(plugin("validate-dedup")).unwrap();
    let python = runtime.load(plugin("python/validate-dedup")).unwrap();
    let scope = OperatorScope::new("tenant", "swap", "dedup");
    let store = state.open(&scope, None).unwrap();
    let metrics = sluice_host::metrics::OperatorMetrics::new("dedup");
    let config = vec![
        (
            "required".to_string(),
            "event_id:string,user_id:integer,amount:number".to_string(),
        ),
        ("id_field".to_string(), "event_id".to_string()),
    ];
    let mut instance = PluginInstance::new(
        rust.clone(),
        scope,
        store,
        metrics,
        PluginLimits::default(),
        config,
    )
    .unwrap();
    assert_eq!(forwarded(&mut instance, &orders(0..50)), ids(0..50));

    // v2 (Python): ids 25..50 were seen by v1.
    let previous = instance.swap_component(python.clone()).unwrap();
    assert!(Arc::ptr_eq(&previous, &rust));
    assert!(Arc::ptr_eq(instance.component(), &python));
    assert_eq!(forwarded(&mut instance, &orders(25..75)), ids(50..75));

    // A plugin of another world is refused; the running version stays.
    let aggregate = runtime.load(plugin("hot-items")).unwrap();
    let Err(refused) = instance.swap_component(aggregate) else {
        panic!("an aggregate plugin replaced a transform");
    };
    assert!(
        refused.to_string().contains("not a transform plugin"),
        "{refused}"
    );
    assert!(Arc::ptr_eq(instance.component(), &python));

    // Back to v1 (a rollback): ids up to 75 are known.
    let previous = instance.swap_component(previous).unwrap();
    assert!(Arc::ptr_eq(&previous, &python));
    assert_eq!(forwarded(&mut instance, &orders(70..80)), ids(75..80));
}
