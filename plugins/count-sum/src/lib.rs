//! Count and sum per key and window, version 1 (see `count_sum.rs`).

mod count_sum;

type CountSumV1 = count_sum::CountSum<1>;

sluice_sdk::export_aggregate!(CountSumV1);
