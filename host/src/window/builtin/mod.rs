//! The built-in aggregates: count / sum / min / max / avg over a numeric
//! field or the length of a string field (`length(note)`), one or several
//! in one window (SQL's `COUNT(*), SUM(amount), MAX(LENGTH(note))`: every
//! column from one parse of the record).
//!
//! Their accumulators are a fixed layout in memory, added to in place, and
//! postcard in the store ([`AccumulatorEncoding`]: a varint decode and
//! encode per key and window of each batch had been ~13 % of a built-in
//! window's CPU); the store folds their merge operands itself
//! ([`fold_accumulators`]).

use super::aggregate::{AggregateError, Aggregator, GroupAdd};
use crate::record::Record;
use crate::state::merge::MergeKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sluice_json::fields::{FieldPath, FieldValue, extract};
use std::borrow::Cow;

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

/// Built-in aggregates over fields of JSON records: one (its result is the
/// window's result) or several named columns (the result is an object of
/// them).
#[derive(Debug, Clone)]
pub struct BuiltinAggregate {
    columns: Vec<Column>,
    /// The fields the columns read, in column order (one parse per record).
    paths: Vec<FieldPath>,
    /// The result is an object of the columns by name (`aggregates = [..]`)
    /// rather than the one column's value (`aggregate = {..}`).
    named: bool,
    /// Reused while adding, so that adding a group allocates nothing: the
    /// group's accumulators decoded, and one record's column values.
    decoded: Vec<Accumulator>,
    values: Vec<Option<Number>>,
}

/// One built-in function over one input.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    function: BuiltinFunction,
    input: Option<Input>,
}

/// What a column aggregates: a numeric field, or the length of a string
/// field (in characters).
#[derive(Debug, Clone)]
enum Input {
    Number { path: FieldPath, field: String },
    Length { path: FieldPath, field: String },
}

impl Input {
    /// `price`, `a.b`, `/a/b`, or `length(note)`.
    fn parse(text: &str) -> Result<Input, String> {
        let text = text.trim();
        if let Some(open) = text.find('(') {
            let (function, rest) = (text[..open].trim(), &text[open + 1..]);
            let Some(inner) = rest.strip_suffix(')') else {
                return Err(format!("`{text}`: a `(` without its `)`"));
            };
            let field = inner.trim().to_string();
            if field.is_empty() {
                return Err(format!("`{text}`: no field in the parentheses"));
            }
            return match function {
                "length" => Ok(Input::Length {
                    path: FieldPath::parse(&field),
                    field,
                }),
                other => Err(format!(
                    "`{text}`: unknown function `{other}` (a field, or `length(field)`)"
                )),
            };
        }
        if text.is_empty() {
            return Err("empty `field`".to_string());
        }
        Ok(Input::Number {
            path: FieldPath::parse(text),
            field: text.to_string(),
        })
    }

    fn path(&self) -> &FieldPath {
        match self {
            Input::Number { path, .. } | Input::Length { path, .. } => path,
        }
    }

    /// The value to aggregate from the field's `found` value.
    fn value(&self, found: Option<&FieldValue>) -> Result<Number, String> {
        match (self, found) {
            (Input::Number { .. }, Some(FieldValue::Int(i))) => Ok(Number::Int(*i)),
            (Input::Number { .. }, Some(FieldValue::Float(f))) => Ok(Number::Float(*f)),
            (Input::Number { field, .. }, Some(other)) => {
                Err(format!("field `{field}` is not a number (found {other:?})"))
            }
            (Input::Length { .. }, Some(FieldValue::Str(s))) => Ok(Number::Int(
                i64::try_from(s.chars().count()).unwrap_or(i64::MAX),
            )),
            (Input::Length { field, .. }, Some(other)) => Err(format!(
                "field `{field}` is not a string (found {other:?}), so it has no length"
            )),
            (Input::Number { field, .. } | Input::Length { field, .. }, None) => {
                Err(format!("field `{field}` is missing"))
            }
        }
    }
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

/// Bytes of one column's accumulator in memory (see
/// [`Accumulator::read_from`]).
const COLUMN_BYTES: usize = 56;

/// How a [`Number`] slot of the in-memory layout says what it holds.
const NO_NUMBER: u8 = 0;
const INT_NUMBER: u8 = 1;
const FLOAT_NUMBER: u8 = 2;

impl Accumulator {
    /// One accumulator as stored (postcard; a default one if `bytes` is
    /// not one).
    fn decode(bytes: &[u8]) -> Accumulator {
        postcard::from_bytes(bytes).unwrap_or_default()
    }

    /// One column's accumulator from its in-memory layout: 56 bytes,
    /// little-endian, at fixed places — count (8), integer sum (16), float
    /// sum (8), flags (8: whether any value was a float, then the kinds of
    /// min and max: none, integer or float), min (8), max (8). Adding
    /// reads and writes it per group with no varint and no allocation;
    /// the store keeps postcard ([`AccumulatorEncoding`]). All zeros is
    /// the empty accumulator.
    fn read_from(bytes: &[u8; COLUMN_BYTES]) -> Accumulator {
        let word = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            word
        };
        let mut int_sum = [0u8; 16];
        int_sum.copy_from_slice(&bytes[8..24]);
        let number = |kind: u8, bits: [u8; 8]| match kind {
            INT_NUMBER => Some(Number::Int(i64::from_le_bytes(bits))),
            FLOAT_NUMBER => Some(Number::Float(f64::from_le_bytes(bits))),
            _ => None,
        };
        Accumulator {
            count: u64::from_le_bytes(word(0)),
            int_sum: i128::from_le_bytes(int_sum),
            float_sum: f64::from_le_bytes(word(24)),
            any_float: bytes[32] != 0,
            min: number(bytes[33], word(40)),
            max: number(bytes[34], word(48)),
        }
    }

    /// Writes the accumulator in its in-memory layout
    /// ([`Self::read_from`]).
    fn write_to(&self, bytes: &mut [u8; COLUMN_BYTES]) {
        let number = |value: Option<Number>| match value {
            None => (NO_NUMBER, [0u8; 8]),
            Some(Number::Int(i)) => (INT_NUMBER, i.to_le_bytes()),
            Some(Number::Float(f)) => (FLOAT_NUMBER, f.to_le_bytes()),
        };
        let (min_kind, min) = number(self.min);
        let (max_kind, max) = number(self.max);
        bytes[0..8].copy_from_slice(&self.count.to_le_bytes());
        bytes[8..24].copy_from_slice(&self.int_sum.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.float_sum.to_le_bytes());
        bytes[32..40].copy_from_slice(&[
            u8::from(self.any_float),
            min_kind,
            max_kind,
            0,
            0,
            0,
            0,
            0,
        ]);
        bytes[40..48].copy_from_slice(&min);
        bytes[48..56].copy_from_slice(&max);
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

/// Folds encoded built-in accumulators, in order, into one (a list of
/// them per column when `list`, as [`BuiltinAggregate`] stores several
/// columns). `None`: one of them is not an accumulator, or there is none.
/// The fold of [`MergeKind::WindowAccumulator`] and
/// [`MergeKind::WindowAccumulatorList`] operands.
pub(crate) fn fold_accumulators(list: bool, encoded: &[&[u8]]) -> Option<Vec<u8>> {
    let (first, rest) = encoded.split_first()?;
    if list {
        let mut folded: Vec<Accumulator> = postcard::from_bytes(first).ok()?;
        for bytes in rest {
            let next: Vec<Accumulator> = postcard::from_bytes(bytes).ok()?;
            if next.len() > folded.len() {
                folded.resize_with(next.len(), Accumulator::default);
            }
            for (acc, other) in folded.iter_mut().zip(&next) {
                *acc = acc.merge(other);
            }
        }
        postcard::to_allocvec(&folded).ok()
    } else {
        let mut folded: Accumulator = postcard::from_bytes(first).ok()?;
        for bytes in rest {
            folded = folded.merge(&postcard::from_bytes(bytes).ok()?);
        }
        postcard::to_allocvec(&folded).ok()
    }
}

/// Reads the columns of an in-memory accumulator into `columns` (cleared
/// first), then pads them with empty ones up to `at_least`.
fn read_columns(in_memory: &[u8], columns: &mut Vec<Accumulator>, at_least: usize) {
    columns.clear();
    columns.extend(
        in_memory
            .chunks_exact(COLUMN_BYTES)
            .filter_map(|chunk| chunk.try_into().ok())
            .map(Accumulator::read_from),
    );
    if columns.len() < at_least {
        columns.resize_with(at_least, Accumulator::default);
    }
}

/// Writes `columns` over `in_memory` in the in-memory layout, reusing its
/// memory.
fn write_columns(columns: &[Accumulator], in_memory: &mut Vec<u8>) {
    in_memory.resize(columns.len() * COLUMN_BYTES, 0);
    for (column, chunk) in columns.iter().zip(in_memory.chunks_exact_mut(COLUMN_BYTES)) {
        if let Ok(chunk) = <&mut [u8; COLUMN_BYTES]>::try_from(chunk) {
            column.write_to(chunk);
        }
    }
}

/// How an aggregate's accumulators are written to the state store (and so
/// to checkpoints and merge operands), where that differs from the bytes
/// [`Aggregator::create`] and [`Aggregator::add`] work on in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccumulatorEncoding {
    /// The same bytes (plugins: the accumulator is the plugin's own).
    AsIs,
    /// Built-in aggregates: a fixed layout in memory, read and written in
    /// place as records are added; postcard in the store, one accumulator
    /// or a list of them (one per column) when `list`: the format that
    /// earlier releases stored and that the store's merge operator folds
    /// (`fold_accumulators`).
    Builtin {
        /// Several columns (`aggregates = [..]`), stored as a list.
        list: bool,
    },
}

impl AccumulatorEncoding {
    /// Appends the stored form of the in-memory accumulator `in_memory`
    /// to `out`.
    pub(crate) fn write_stored(self, in_memory: &[u8], out: &mut Vec<u8>) {
        let AccumulatorEncoding::Builtin { list } = self else {
            out.extend_from_slice(in_memory);
            return;
        };
        let mut columns = Vec::new();
        read_columns(in_memory, &mut columns, 1);
        let buffer = std::mem::take(out);
        let written = match (list, columns.as_slice()) {
            (false, [one, ..]) => postcard::to_extend(one, buffer),
            _ => postcard::to_extend(&columns, buffer),
        };
        // Writing to a `Vec` cannot fail.
        *out = written.unwrap_or_default();
    }

    /// The in-memory accumulator of the stored one `stored` (an empty one
    /// where `stored` is not an accumulator, as reading it always did).
    pub(crate) fn read_stored(self, stored: &[u8]) -> Vec<u8> {
        let AccumulatorEncoding::Builtin { list } = self else {
            return stored.to_vec();
        };
        let columns: Vec<Accumulator> = if list {
            postcard::from_bytes(stored).unwrap_or_default()
        } else {
            vec![Accumulator::decode(stored)]
        };
        let mut in_memory = Vec::new();
        write_columns(&columns, &mut in_memory);
        in_memory
    }
}

impl BuiltinAggregate {
    /// `function` over `field` (`count` needs none): the window's result
    /// is the function's value.
    pub fn new(function: BuiltinFunction, field: Option<&str>) -> Result<Self, String> {
        Ok(BuiltinAggregate::of(
            vec![Column::new(String::new(), function, field)?],
            false,
        ))
    }

    /// Several functions in one window, each as `(name, function, field)`:
    /// the window's result is an object of their values by name.
    pub fn columns(columns: &[(&str, BuiltinFunction, Option<&str>)]) -> Result<Self, String> {
        if columns.is_empty() {
            return Err("`aggregates` is empty: name at least one".to_string());
        }
        let mut built: Vec<Column> = Vec::with_capacity(columns.len());
        for (index, &(name, function, field)) in columns.iter().enumerate() {
            if name.is_empty() {
                return Err(format!("aggregates[{index}]: `name` is empty"));
            }
            if built.iter().any(|column| column.name == name) {
                return Err(format!(
                    "aggregates[{index}]: the name `{name}` is used twice"
                ));
            }
            let column = Column::new(name.to_string(), function, field)
                .map_err(|message| format!("aggregates[{index}] (`{name}`): {message}"))?;
            built.push(column);
        }
        Ok(BuiltinAggregate::of(built, true))
    }

    fn of(columns: Vec<Column>, named: bool) -> Self {
        let paths = columns
            .iter()
            .filter_map(|column| column.input.as_ref().map(|input| input.path().clone()))
            .collect();
        BuiltinAggregate {
            columns,
            paths,
            named,
            decoded: Vec::new(),
            values: Vec::new(),
        }
    }

    /// Reads each column's value of one record into `values` (`None`: the
    /// column counts records) from `found`, the record's values of the
    /// columns' fields (`self.paths`, in order).
    fn values_from(
        columns: &[Column],
        found: &[Option<FieldValue>],
        values: &mut Vec<Option<Number>>,
    ) -> Result<(), String> {
        values.clear();
        let mut found = found.iter();
        for column in columns {
            values.push(match &column.input {
                None => None,
                Some(input) => Some(input.value(found.next().and_then(Option::as_ref))?),
            });
        }
        Ok(())
    }

    /// Adds one record's column values (or rejects it: it counts in none).
    fn add_values(accumulators: &mut [Accumulator], values: &[Option<Number>]) {
        for (acc, value) in accumulators.iter_mut().zip(values) {
            match value {
                Some(value) => acc.add(*value),
                None => acc.count += 1,
            }
        }
    }

    fn decode(&self, bytes: &[u8]) -> Vec<Accumulator> {
        let mut accumulators = Vec::with_capacity(self.columns.len());
        read_columns(bytes, &mut accumulators, self.columns.len());
        accumulators
    }

    fn encode(accumulators: &[Accumulator]) -> Vec<u8> {
        let mut bytes = Vec::new();
        write_columns(accumulators, &mut bytes);
        bytes
    }

    /// Adds records to one accumulator: each record's found fields from
    /// `found_of(index)` (`Err`: the record is rejected with that reason).
    fn add_records<'f>(
        &mut self,
        accumulator: &mut Vec<u8>,
        count: usize,
        mut found_of: impl FnMut(usize) -> Result<Cow<'f, [Option<FieldValue>]>, String>,
    ) -> Vec<(usize, String)> {
        let mut decoded = std::mem::take(&mut self.decoded);
        let mut values = std::mem::take(&mut self.values);
        read_columns(accumulator, &mut decoded, self.columns.len());
        let mut rejected = Vec::new();
        for index in 0..count {
            // A record missing any column's input counts in none of them.
            let read = found_of(index)
                .and_then(|found| Self::values_from(&self.columns, &found, &mut values));
            match read {
                Ok(()) => Self::add_values(&mut decoded, &values),
                Err(reason) => rejected.push((index, reason)),
            }
        }
        write_columns(&decoded, accumulator);
        self.decoded = decoded;
        self.values = values;
        rejected
    }
}

impl Column {
    fn new(name: String, function: BuiltinFunction, field: Option<&str>) -> Result<Self, String> {
        if function != BuiltinFunction::Count && field.is_none() {
            return Err(format!("aggregate {function:?} needs a `field`").to_lowercase());
        }
        Ok(Column {
            name,
            function,
            input: field.map(Input::parse).transpose()?,
        })
    }

    fn finish(&self, acc: &Accumulator) -> Value {
        match self.function {
            BuiltinFunction::Count => Value::from(acc.count),
            BuiltinFunction::Sum => acc.sum(),
            BuiltinFunction::Min => acc.min.map_or(Value::Null, Number::json),
            BuiltinFunction::Max => acc.max.map_or(Value::Null, Number::json),
            BuiltinFunction::Avg if acc.count == 0 => Value::Null,
            BuiltinFunction::Avg => {
                Value::from((acc.int_sum as f64 + acc.float_sum) / acc.count as f64)
            }
        }
    }
}

impl Aggregator for BuiltinAggregate {
    fn create(&mut self) -> Result<Vec<u8>, AggregateError> {
        Ok(vec![0; self.columns.len() * COLUMN_BYTES])
    }

    fn add(
        &mut self,
        accumulator: &mut Vec<u8>,
        records: &[&Record],
    ) -> Result<Vec<(usize, String)>, AggregateError> {
        let paths = std::mem::take(&mut self.paths);
        let rejected = self.add_records(accumulator, records.len(), |index| {
            if paths.is_empty() {
                return Ok(Cow::Borrowed(&[]));
            }
            extract(&records[index].value, &paths).map(Cow::Owned)
        });
        self.paths = paths;
        Ok(rejected)
    }

    /// Groups whose fields the window operator read are added from them
    /// (no parse); others as [`Self::add`] would.
    fn add_groups(&mut self, groups: &mut [GroupAdd<'_>]) -> Result<(), AggregateError> {
        for group in groups {
            if group.fields.len() != group.records.len() {
                group.rejected = self.add(&mut group.accumulator, group.records)?;
                continue;
            }
            let fields = group.fields;
            group.rejected = self.add_records(&mut group.accumulator, fields.len(), |index| {
                Ok(Cow::Borrowed(fields[index]))
            });
        }
        Ok(())
    }

    fn input_fields(&self) -> &[FieldPath] {
        &self.paths
    }

    fn accumulator_encoding(&self) -> AccumulatorEncoding {
        AccumulatorEncoding::Builtin { list: self.named }
    }

    fn store_merge(&self) -> Option<MergeKind> {
        Some(if self.named {
            MergeKind::WindowAccumulatorList
        } else {
            MergeKind::WindowAccumulator
        })
    }

    fn merge(&mut self, a: &[u8], b: &[u8]) -> Result<Vec<u8>, AggregateError> {
        let merged: Vec<Accumulator> = self
            .decode(a)
            .iter()
            .zip(&self.decode(b))
            .map(|(a, b)| a.merge(b))
            .collect();
        Ok(Self::encode(&merged))
    }

    fn finish(&mut self, accumulator: &[u8]) -> Result<Value, AggregateError> {
        let accumulators = self.decode(accumulator);
        if !self.named {
            return Ok(self.columns[0].finish(&accumulators[0]));
        }
        Ok(Value::Object(
            self.columns
                .iter()
                .zip(&accumulators)
                .map(|(column, acc)| (column.name.clone(), column.finish(acc)))
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests;
