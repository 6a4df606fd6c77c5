//! Count and sum per key and window, version 2: the same code and
//! accumulator as `count-sum`, so a hot swap carries every open window over.

#[path = "../../count-sum/src/count_sum.rs"]
mod count_sum;

type CountSumV2 = count_sum::CountSum<2>;

sluice_sdk::export_aggregate!(CountSumV2);
