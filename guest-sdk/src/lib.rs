//! # sluice-sdk: write Sluice plugins in Rust
//!
//! A Sluice plugin is a WebAssembly component that transforms records. You
//! implement [`Transform`] for a type and export it with
//! [`export_transform!`]; the SDK implements both the typed
//! `sluice:plugin/transformer` interface, the packed fast path
//! (`packed-transformer`) and the projected one
//! (`projected-packed-transformer`, for transforms that name the JSON
//! fields they read in [`Transform::json_fields`]) on top of your code.
//!
//! ```no_run
//! use sluice_sdk::{export_transform, Config, Emitter, Record, Transform};
//!
//! /// Keeps orders above a threshold, dead-letters the unreadable ones.
//! struct BigOrders {
//!     min_amount: f64,
//! }
//!
//! #[derive(serde::Deserialize)]
//! struct Order {
//!     amount: f64,
//! }
//!
//! impl Transform for BigOrders {
//!     fn init(config: &Config) -> Result<Self, String> {
//!         Ok(BigOrders { min_amount: config.parse_or("min_amount", 100.0)? })
//!     }
//!
//!     fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
//!         let order: Order = record.value_json()?; // an Err dead-letters this record
//!         if order.amount >= self.min_amount {
//!             out.forward();
//!         }
//!         sluice_sdk::host::counter_add("orders_seen", 1);
//!         Ok(())
//!     }
//! }
//!
//! export_transform!(BigOrders);
//! ```
//!
//! Build it with `sluice plugin build <crate dir>` and try it with
//! `sluice plugin test plugin.wasm --input records.jsonl`.
//!
//! * Read the value with [`Record::value_json`] (serde), [`Record::value_json_value`]
//!   or [`Record::value_avro`] (apache-avro); read a few fields without a
//!   document with [`Record::field`] (found by the host when named in
//!   [`Transform::json_fields`]) or [`Record::json_object`], and emit the
//!   record with one field changed with [`Emitter::emit_replacing`] (spliced
//!   by the host on the projected path) or
//!   [`json::JsonObject::write_replacing`].
//! * Emit with [`Emitter::forward`], [`Emitter::emit_value`], [`Emitter::emit_json`],
//!   [`Emitter::emit`]; route to side outputs with [`Emitter::side`]; send the
//!   record to the dead-letter output with [`Emitter::dead_letter`] or by
//!   returning `Err(reason)` from [`Transform::process`].
//! * Keep state with [`state`] (stored by the host, scoped to your operator).
//! * Log with [`host::log`]; count with [`host::counter_add`].

#[cfg(feature = "aggregate")]
pub mod aggregate;
mod config;
#[cfg(not(feature = "aggregate"))]
mod emit;
#[doc(hidden)]
#[cfg(not(feature = "aggregate"))]
pub mod glue;
pub mod host;
pub mod json;
mod record;
#[cfg(not(feature = "aggregate"))]
pub mod state;

#[cfg(feature = "aggregate")]
pub use aggregate::Aggregate;
pub use config::Config;
#[cfg(not(feature = "aggregate"))]
pub use emit::{Emitter, Output};
pub use record::Record;

pub use apache_avro;
pub use serde_json;

/// Bindings generated from the `sluice:plugin` WIT package.
#[doc(hidden)]
#[cfg(not(feature = "aggregate"))]
pub mod bindings {
    wit_bindgen::generate!({
        world: "fast-projected-transform",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "export_world",
        default_bindings_module: "sluice_sdk::bindings",
    });
}

/// Bindings for the `fast-projected-aggregate` world (feature `aggregate`).
#[doc(hidden)]
#[cfg(feature = "aggregate")]
pub mod bindings {
    wit_bindgen::generate!({
        world: "fast-projected-aggregate",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "export_world",
        default_bindings_module: "sluice_sdk::bindings",
    });
}

/// The version of the `sluice:plugin` WIT package this SDK builds against.
pub const WIT_PACKAGE_VERSION: &str = "0.1.0";

#[cfg(not(feature = "aggregate"))]
/// A record-at-a-time transform.
///
/// One value of your type lives in each plugin instance: the host creates it
/// with [`Transform::init`] and calls [`Transform::process`] for every record.
/// The host may re-create the instance (after a trap, or on a hot swap), so keep
/// anything that must survive in [`state`], not in fields.
pub trait Transform: Sized + 'static {
    /// Builds the transform from the operator's `config` table. An `Err`
    /// stops the pipeline at start-up with your message.
    fn init(config: &Config) -> Result<Self, String>;

    /// Handles one record: emit zero or more records through `out`. Returning
    /// `Err(reason)` sends this record (alone) to the dead-letter output and
    /// discards anything emitted for it.
    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String>;

    /// The top-level fields of a JSON object value this transform reads
    /// with [`Record::field`] (asked once, after [`Transform::init`]). When
    /// it names some, the host finds them natively while it packs each
    /// batch (the projected path): the plugin parses nothing to read them,
    /// and [`Emitter::emit_replacing`] is spliced by the host. The default,
    /// none, keeps the packed path.
    fn json_fields(&self) -> Vec<String> {
        Vec::new()
    }
}

#[cfg(not(feature = "aggregate"))]
/// Exports a [`Transform`] implementation as the plugin's component exports.
///
/// Use it once per plugin crate (a `cdylib`), at the top level.
#[macro_export]
macro_rules! export_transform {
    ($transform:ty) => {
        struct SluiceExports;

        impl $crate::bindings::exports::sluice::plugin::transformer::Guest for SluiceExports {
            fn init(config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>) -> ::std::result::Result<(), ::std::string::String> {
                $crate::glue::init::<$transform>(config)
            }

            fn process_batch(
                batch: ::std::vec::Vec<$crate::bindings::sluice::plugin::types::InputRecord>,
            ) -> ::std::vec::Vec<$crate::bindings::sluice::plugin::types::RecordOutcome> {
                $crate::glue::process_typed::<$transform>(batch)
            }
        }

        impl $crate::bindings::exports::sluice::plugin::packed_transformer::Guest for SluiceExports {
            fn process_packed(batch: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                $crate::glue::process_packed::<$transform>(&batch)
            }
        }

        impl $crate::bindings::exports::sluice::plugin::projected_packed_transformer::Guest for SluiceExports {
            fn projected_fields() -> ::std::vec::Vec<::std::string::String> {
                $crate::glue::projected_fields::<$transform>()
            }

            fn process_projected_packed(batch: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                $crate::glue::process_projected_packed::<$transform>(&batch)
            }
        }

        $crate::bindings::export_world!(SluiceExports with_types_in $crate::bindings);
    };
}
