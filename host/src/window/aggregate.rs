//! How a window's records become its result.
//!
//! An [`Aggregator`] works on an opaque accumulator (bytes) that the window
//! operator stores in its state: `create` an empty one, `add` records to it,
//! `merge` two (when session windows merge), `finish` it into the result.
//! [`BuiltinAggregate`] covers count / sum / min / max / avg over a numeric
//! field; plugins implement the same four steps through the `aggregate` WIT
//! world.

use super::fields::{FieldPath, FieldValue, extract};
use crate::record::Record;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A failure no record is to blame for (e.g. a plugin that faults while
/// merging): the window operator stops.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AggregateError(pub String);

/// Computes window results from records, through an accumulator.
pub trait Aggregator: Send {
    /// A new, empty accumulator.
    fn create(&mut self) -> Result<Vec<u8>, AggregateError>;

    /// Adds `records` (all of one key and window) to `accumulator`.
    /// Returns the records that could not be added, by index, with the
    /// reason: they go to the dead-letter output and do not count.
    fn add(
        &mut self,
        accumulator: &mut Vec<u8>,
        records: &[&Record],
    ) -> Result<Vec<(usize, String)>, AggregateError>;

    /// Combines two accumulators (of windows that merge).
    fn merge(&mut self, a: &[u8], b: &[u8]) -> Result<Vec<u8>, AggregateError>;

    /// The window's result.
    fn finish(&mut self, accumulator: &[u8]) -> Result<Value, AggregateError>;

    /// The plugin computing it, if a plugin does (to swap its version);
    /// `None` for built-in aggregates.
    fn plugin(&mut self) -> Option<&mut dyn crate::runtime::SwappablePlugin> {
        None
    }
}

/// The built-in functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BuiltinFunction {
    /// Number of records.
    Count,
    /// Sum of the field (an integer while every value is one).
    Sum,
    /// Smallest value of the field.
    Min,
    /// Largest value of the field.
    Max,
    /// Mean of the field.
    Avg,
}

/// A built-in aggregate over one numeric field of JSON records.
#[derive(Debug, Clone)]
pub struct BuiltinAggregate {
    function: BuiltinFunction,
    field: Option<FieldPath>,
    field_name: String,
}

/// A number as aggregated: exact while it is an integer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }

    fn json(self) -> Value {
        match self {
            Number::Int(i) => Value::from(i),
            Number::Float(f) => Value::from(f),
        }
    }

    fn less_than(self, other: Number) -> bool {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => a < b,
            (a, b) => a.as_f64() < b.as_f64(),
        }
    }
}

/// The accumulator of every built-in function.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Accumulator {
    count: u64,
    /// Exact sum while every value is an integer.
    int_sum: i128,
    float_sum: f64,
    any_float: bool,
    min: Option<Number>,
    max: Option<Number>,
}

impl Accumulator {
    fn decode(bytes: &[u8]) -> Accumulator {
        postcard::from_bytes(bytes).unwrap_or_default()
    }

    fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).unwrap_or_default()
    }

    fn add(&mut self, value: Number) {
        self.count += 1;
        match value {
            Number::Int(i) => self.int_sum += i128::from(i),
            Number::Float(f) => {
                self.any_float = true;
                self.float_sum += f;
            }
        }
        if self.min.is_none_or(|min| value.less_than(min)) {
            self.min = Some(value);
        }
        if self.max.is_none_or(|max| max.less_than(value)) {
            self.max = Some(value);
        }
    }

    fn merge(&self, other: &Accumulator) -> Accumulator {
        let pick = |a: Option<Number>, b: Option<Number>, smaller: bool| match (a, b) {
            (Some(a), Some(b)) => Some(if a.less_than(b) == smaller { a } else { b }),
            (a, b) => a.or(b),
        };
        Accumulator {
            count: self.count + other.count,
            int_sum: self.int_sum + other.int_sum,
            float_sum: self.float_sum + other.float_sum,
            any_float: self.any_float || other.any_float,
            min: pick(self.min, other.min, true),
            max: pick(self.max, other.max, false),
        }
    }

    fn sum(&self) -> Value {
        if self.any_float {
            Value::from(self.int_sum as f64 + self.float_sum)
        } else if let Ok(sum) = i64::try_from(self.int_sum) {
            Value::from(sum)
        } else {
            Value::from(self.int_sum as f64)
        }
    }
}

impl BuiltinAggregate {
    /// `function` over `field` (`count` needs none).
    pub fn new(function: BuiltinFunction, field: Option<&str>) -> Result<Self, String> {
        if function != BuiltinFunction::Count && field.is_none() {
            return Err(format!("aggregate {function:?} needs a `field`").to_lowercase());
        }
        Ok(BuiltinAggregate {
            function,
            field: field.map(FieldPath::parse),
            field_name: field.unwrap_or_default().to_string(),
        })
    }

    fn value_of(&self, record: &Record) -> Result<Option<Number>, String> {
        let Some(path) = &self.field else {
            return Ok(None);
        };
        let field = &self.field_name;
        match extract(&record.value, &[path])?.pop().flatten() {
            Some(FieldValue::Int(i)) => Ok(Some(Number::Int(i))),
            Some(FieldValue::Float(f)) => Ok(Some(Number::Float(f))),
            Some(other) => Err(format!("field `{field}` is not a number (found {other:?})")),
            None => Err(format!("field `{field}` is missing")),
        }
    }
}

impl Aggregator for BuiltinAggregate {
    fn create(&mut self) -> Result<Vec<u8>, AggregateError> {
        Ok(Accumulator::default().encode())
    }

    fn add(
        &mut self,
        accumulator: &mut Vec<u8>,
        records: &[&Record],
    ) -> Result<Vec<(usize, String)>, AggregateError> {
        let mut acc = Accumulator::decode(accumulator);
        let mut rejected = Vec::new();
        for (index, record) in records.iter().enumerate() {
            match self.value_of(record) {
                Ok(Some(value)) => acc.add(value),
                Ok(None) => acc.count += 1,
                Err(reason) => rejected.push((index, reason)),
            }
        }
        *accumulator = acc.encode();
        Ok(rejected)
    }

    fn merge(&mut self, a: &[u8], b: &[u8]) -> Result<Vec<u8>, AggregateError> {
        Ok(Accumulator::decode(a)
            .merge(&Accumulator::decode(b))
            .encode())
    }

    fn finish(&mut self, accumulator: &[u8]) -> Result<Value, AggregateError> {
        let acc = Accumulator::decode(accumulator);
        Ok(match self.function {
            BuiltinFunction::Count => Value::from(acc.count),
            BuiltinFunction::Sum => acc.sum(),
            BuiltinFunction::Min => acc.min.map_or(Value::Null, Number::json),
            BuiltinFunction::Max => acc.max.map_or(Value::Null, Number::json),
            BuiltinFunction::Avg if acc.count == 0 => Value::Null,
            BuiltinFunction::Avg => {
                Value::from((acc.int_sum as f64 + acc.float_sum) / acc.count as f64)
            }
        })
    }
}
