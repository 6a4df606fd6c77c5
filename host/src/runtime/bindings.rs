//! Host-side bindings generated from the `sluice:plugin` WIT package.
//!
//! Ten worlds, sharing import traits with `typed`:
//!
//! * transforms: `transform` (typed, any language), `fast-transform` (adds
//!   the packed batch), `fast-projected-transform` (adds the projected
//!   batch with packed output; the Rust SDK exports it), `text-transform`
//!   (the typed batch with packed outcomes in a string) and
//!   `projected-transform` (adds batches with the JSON fields the plugin
//!   reads found by the host; the Python SDK exports it);
//! * window aggregates: `aggregate` (typed), `fast-aggregate` (adds the
//!   packed `add`), `fast-projected-aggregate` (adds the `add` with the
//!   JSON fields the plugin reads found by the host; the Rust SDK exports
//!   it), `text-aggregate` (results as strings) and
//!   `text-projected-aggregate` (adds the projected `add` with its answer
//!   as a string; the Python and JavaScript SDKs export it).

/// Bindings for the `transform` world.
pub(super) mod typed {
    wasmtime::component::bindgen!({
        world: "transform",
        path: "../wit",
        // A failing state backend traps the plugin call (ADR 0006).
        imports: {
            "sluice:plugin/state": trappable,
        },
    });
}

/// Bindings for the `fast-transform` world.
pub(super) mod fast {
    wasmtime::component::bindgen!({
        world: "fast-transform",
        path: "../wit",
        with: {
            "sluice:plugin/types": super::typed::sluice::plugin::types,
            "sluice:plugin/host": super::typed::sluice::plugin::host,
            "sluice:plugin/state": super::typed::sluice::plugin::state,
            "sluice:plugin/transformer": super::typed::exports::sluice::plugin::transformer,
        },
    });
}

/// Bindings for the `text-transform` world.
pub(super) mod text {
    wasmtime::component::bindgen!({
        world: "text-transform",
        path: "../wit",
        with: {
            "sluice:plugin/types": super::typed::sluice::plugin::types,
            "sluice:plugin/host": super::typed::sluice::plugin::host,
            "sluice:plugin/state": super::typed::sluice::plugin::state,
            "sluice:plugin/transformer": super::typed::exports::sluice::plugin::transformer,
        },
    });
}

/// Bindings for the `projected-transform` world.
pub(super) mod projected {
    wasmtime::component::bindgen!({
        world: "projected-transform",
        path: "../wit",
        with: {
            "sluice:plugin/types": super::typed::sluice::plugin::types,
            "sluice:plugin/host": super::typed::sluice::plugin::host,
            "sluice:plugin/state": super::typed::sluice::plugin::state,
            "sluice:plugin/transformer": super::typed::exports::sluice::plugin::transformer,
            "sluice:plugin/text-packed-transformer": super::text::exports::sluice::plugin::text_packed_transformer,
        },
    });
}

/// Bindings for the `fast-projected-transform` world.
pub(super) mod fast_projected {
    wasmtime::component::bindgen!({
        world: "fast-projected-transform",
        path: "../wit",
        with: {
            "sluice:plugin/types": super::typed::sluice::plugin::types,
            "sluice:plugin/host": super::typed::sluice::plugin::host,
            "sluice:plugin/state": super::typed::sluice::plugin::state,
            "sluice:plugin/transformer": super::typed::exports::sluice::plugin::transformer,
            "sluice:plugin/packed-transformer": super::fast::exports::sluice::plugin::packed_transformer,
        },
    });
}

/// Bindings for the `aggregate` world (window aggregates).
pub(super) mod aggregate {
    wasmtime::component::bindgen!({
        world: "aggregate",
        path: "../wit",
        with: {
            "sluice:plugin/types": super::typed::sluice::plugin::types,
            "sluice:plugin/host": super::typed::sluice::plugin::host,
        },
    });
}

/// Bindings for the `fast-aggregate` world (the packed `add`).
pub(super) mod fast_aggregate {
    wasmtime::component::bindgen!({
        world: "fast-aggregate",
        path: "../wit",
        with: {
            "sluice:plugin/types": super::typed::sluice::plugin::types,
            "sluice:plugin/host": super::typed::sluice::plugin::host,
            "sluice:plugin/aggregator": super::aggregate::exports::sluice::plugin::aggregator,
        },
    });
}

/// Bindings for the `fast-projected-aggregate` world (the projected `add`).
pub(super) mod fast_projected_aggregate {
    wasmtime::component::bindgen!({
        world: "fast-projected-aggregate",
        path: "../wit",
        with: {
            "sluice:plugin/types": super::typed::sluice::plugin::types,
            "sluice:plugin/host": super::typed::sluice::plugin::host,
            "sluice:plugin/aggregator": super::aggregate::exports::sluice::plugin::aggregator,
            "sluice:plugin/packed-aggregator": super::fast_aggregate::exports::sluice::plugin::packed_aggregator,
        },
    });
}

/// Bindings for the `text-aggregate` world (results as strings).
pub(super) mod text_aggregate {
    wasmtime::component::bindgen!({
        world: "text-aggregate",
        path: "../wit",
        with: {
            "sluice:plugin/types": super::typed::sluice::plugin::types,
            "sluice:plugin/host": super::typed::sluice::plugin::host,
            "sluice:plugin/aggregator": super::aggregate::exports::sluice::plugin::aggregator,
        },
    });
}

/// Bindings for the `text-projected-aggregate` world (the projected `add`
/// with its answer as a string).
pub(super) mod text_projected_aggregate {
    wasmtime::component::bindgen!({
        world: "text-projected-aggregate",
        path: "../wit",
        with: {
            "sluice:plugin/types": super::typed::sluice::plugin::types,
            "sluice:plugin/host": super::typed::sluice::plugin::host,
            "sluice:plugin/aggregator": super::aggregate::exports::sluice::plugin::aggregator,
            "sluice:plugin/text-aggregator": super::text_aggregate::exports::sluice::plugin::text_aggregator,
        },
    });
}
