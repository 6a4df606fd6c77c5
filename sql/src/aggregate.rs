//! Aggregate functions of window queries (`COUNT`, `SUM`, `AVG`, `MIN`,
//! `MAX`, `FIRST_VALUE`, `LAST_VALUE`, `COUNT(DISTINCT ..)`), with SQL's
//! semantics: `NULL` arguments are skipped, and an aggregate over no
//! (non-`NULL`) value is `NULL` (`COUNT`: 0).
//!
//! Each call keeps an [`Accumulator`]; the host stores a window's
//! accumulators as bytes ([`encode`], [`decode`]) in its state, adds a
//! record's argument values to them ([`AggregateCall::check`] then
//! [`AggregateCall::add`], so that a record one call cannot take counts in
//! none), merges them when session windows merge, and reads the results
//! when the window fires.
//!
//! Where Flink's result is defined by processing order (`FIRST_VALUE`,
//! `LAST_VALUE`), Sluice's is defined by event time (the earliest or latest
//! record, ties by arrival), so that a result does not depend on how
//! records were interleaved: the same after a restore or with more
//! workers.

use crate::datum::{Datum, SqlType};
use crate::expr::{EvalError, Expr, describe};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BTreeSet;

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateFunction {
    /// `COUNT(*)`: rows.
    CountRows,
    /// `COUNT(x)`: rows where `x` is not `NULL`.
    Count,
    /// `COUNT(DISTINCT x)`: distinct non-`NULL` values.
    CountDistinct,
    /// `SUM(x)`: `BIGINT` while every value is one (overflow is an error),
    /// else `DOUBLE`.
    Sum,
    /// `AVG(x)`: as in Flink, the mean of `BIGINT`s is a `BIGINT`
    /// (truncated); of `DOUBLE`s a `DOUBLE`.
    Avg,
    /// `MIN(x)`.
    Min,
    /// `MAX(x)`.
    Max,
    /// `FIRST_VALUE(x)`: the value of the earliest record (event time).
    FirstValue,
    /// `LAST_VALUE(x)`: the value of the latest record (event time).
    LastValue,
}

/// The aggregate functions a query may call (for messages).
pub const SUPPORTED_AGGREGATES: &str =
    "COUNT(*), COUNT(x), COUNT(DISTINCT x), SUM, AVG, MIN, MAX, FIRST_VALUE, LAST_VALUE";

impl AggregateFunction {
    /// Whether `name` (upper case) is an aggregate function.
    pub fn is_aggregate(name: &str) -> bool {
        matches!(
            name,
            "COUNT" | "SUM" | "MIN" | "MAX" | "AVG" | "FIRST_VALUE" | "LAST_VALUE"
        )
    }

    /// The function `name` (upper case) names, `distinct` or not (only
    /// `COUNT` takes `DISTINCT`), with or without an argument.
    pub fn of(name: &str, distinct: bool, has_arg: bool) -> Result<Self, String> {
        use AggregateFunction::*;
        let function = match (name, distinct, has_arg) {
            ("COUNT", false, false) => CountRows,
            ("COUNT", false, true) => Count,
            ("COUNT", true, true) => CountDistinct,
            (_, true, _) => {
                return Err(format!(
                    "{name}(DISTINCT ..) is not supported; only COUNT(DISTINCT x) is"
                ));
            }
            (_, _, false) => return Err(format!("{name} takes one argument")),
            ("SUM", ..) => Sum,
            ("AVG", ..) => Avg,
            ("MIN", ..) => Min,
            ("MAX", ..) => Max,
            ("FIRST_VALUE", ..) => FirstValue,
            ("LAST_VALUE", ..) => LastValue,
            _ => return Err(format!("{name} is not an aggregate function")),
        };
        Ok(function)
    }

    /// The SQL name, for `explain`.
    pub fn name(self) -> &'static str {
        use AggregateFunction::*;
        match self {
            CountRows | Count | CountDistinct => "COUNT",
            Sum => "SUM",
            Avg => "AVG",
            Min => "MIN",
            Max => "MAX",
            FirstValue => "FIRST_VALUE",
            LastValue => "LAST_VALUE",
        }
    }

    /// The result's type for an argument of type `arg`.
    pub fn result_type(self, arg: SqlType) -> SqlType {
        use AggregateFunction::*;
        match self {
            CountRows | Count | CountDistinct => SqlType::Bigint,
            Sum | Avg | Min | Max | FirstValue | LastValue => arg,
        }
    }
}

/// One aggregate call of a query: the function and its argument, an
/// expression over the record's row.
#[derive(Debug, Clone)]
pub struct AggregateCall {
    /// The function.
    pub function: AggregateFunction,
    /// Its argument (none for `COUNT(*)`).
    pub arg: Option<Expr>,
}

/// What an [`AggregateCall`] keeps of a window's records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Accumulator {
    /// `COUNT`: how many.
    Count(i64),
    /// `SUM` and `AVG`.
    Sum(NumberSum),
    /// `MIN` or `MAX`: the extreme so far.
    Extreme(Option<Stored>),
    /// `FIRST_VALUE` or `LAST_VALUE`: the value and its record's event time.
    Timed(Option<(i64, Stored)>),
    /// `COUNT(DISTINCT ..)`: each value's canonical bytes
    /// (a type tag and the value, equal for values SQL calls equal).
    Distinct(BTreeSet<Vec<u8>>),
    /// A window's top rows (`ROW_NUMBER() OVER (..)`: [`crate::rank`]),
    /// sorted.
    Rows(Vec<crate::rank::RankedRow>),
}

/// A sum of numbers: exact while every one is an integer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NumberSum {
    /// Values added.
    pub count: i64,
    /// Sum of the integers.
    pub int: i128,
    /// Sum of the doubles.
    pub float: f64,
    /// Whether any value was a double.
    pub any_float: bool,
}

/// A value kept in an accumulator (a [`Datum`] that owns its data).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Stored {
    /// `BOOLEAN`.
    Bool(bool),
    /// `BIGINT`.
    Int(i64),
    /// `DOUBLE`.
    Double(f64),
    /// `STRING`.
    Str(String),
    /// `TIMESTAMP_LTZ(3)`, ms.
    Timestamp(i64),
    /// An interval, ms.
    Interval(i64),
    /// A JSON value, as text.
    Json(String),
}

impl Stored {
    /// The value of a non-`NULL` datum.
    pub(crate) fn of(datum: &Datum<'_>) -> Option<Stored> {
        Some(match datum {
            Datum::Null => return None,
            Datum::Bool(b) => Stored::Bool(*b),
            Datum::Int(i) => Stored::Int(*i),
            Datum::Double(f) => Stored::Double(*f),
            Datum::Str(s) => Stored::Str(s.to_string()),
            Datum::Timestamp(t) => Stored::Timestamp(*t),
            Datum::Interval(i) => Stored::Interval(*i),
            Datum::Json(value) => Stored::Json(value.to_string()),
        })
    }

    /// The value as a datum.
    pub fn datum(&self) -> Datum<'_> {
        match self {
            Stored::Bool(b) => Datum::Bool(*b),
            Stored::Int(i) => Datum::Int(*i),
            Stored::Double(f) => Datum::Double(*f),
            Stored::Str(s) => Datum::Str(Cow::Borrowed(s)),
            Stored::Timestamp(t) => Datum::Timestamp(*t),
            Stored::Interval(i) => Datum::Interval(*i),
            Stored::Json(text) => match serde_json::from_str(text) {
                Ok(value) => Datum::Json(Cow::Owned(value)),
                Err(_) => Datum::Str(Cow::Borrowed(text)),
            },
        }
    }

    /// Bytes equal for values SQL calls equal (`1` and `1.0` too), of a
    /// non-`NULL` datum: a type tag and the value.
    fn distinct_key(datum: &Datum<'_>) -> Option<Vec<u8>> {
        let tagged = |tag: u8, bytes: &[u8]| {
            let mut key = Vec::with_capacity(bytes.len() + 1);
            key.push(tag);
            key.extend_from_slice(bytes);
            key
        };
        Some(match datum {
            Datum::Null => return None,
            Datum::Bool(b) => tagged(b'b', &[u8::from(*b)]),
            // An integral double is the integer it equals (`-0.0` is 0).
            Datum::Int(i) => tagged(b'i', &i.to_be_bytes()),
            Datum::Double(f)
                if f.fract() == 0.0 && *f >= i64::MIN as f64 && *f < i64::MAX as f64 =>
            {
                tagged(b'i', &(*f as i64).to_be_bytes())
            }
            Datum::Double(f) => tagged(b'd', &f.to_bits().to_be_bytes()),
            Datum::Str(s) => tagged(b's', s.as_bytes()),
            Datum::Timestamp(t) => tagged(b't', &t.to_be_bytes()),
            Datum::Interval(i) => tagged(b'v', &i.to_be_bytes()),
            Datum::Json(value) => tagged(b'j', value.to_string().as_bytes()),
        })
    }
}

impl AggregateCall {
    /// A new, empty accumulator.
    pub fn create(&self) -> Accumulator {
        use AggregateFunction::*;
        match self.function {
            CountRows | Count => Accumulator::Count(0),
            CountDistinct => Accumulator::Distinct(BTreeSet::new()),
            Sum | Avg => Accumulator::Sum(NumberSum::default()),
            Min | Max => Accumulator::Extreme(None),
            FirstValue | LastValue => Accumulator::Timed(None),
        }
    }

    /// Whether `value` (this call's argument on one record) can be added
    /// to `accumulator`: the reason if not (the record goes to the
    /// dead-letter output and counts in no aggregate).
    pub fn check(&self, accumulator: &Accumulator, value: &Datum<'_>) -> Result<(), EvalError> {
        use AggregateFunction::*;
        match (self.function, value) {
            (_, Datum::Null) => Ok(()),
            (Sum | Avg, Datum::Int(_) | Datum::Double(_)) => Ok(()),
            (Sum | Avg, other) => Err(EvalError(format!(
                "{} needs a number, found {}",
                self.function.name(),
                describe(other)
            ))),
            (Min | Max, value) => match accumulator {
                Accumulator::Extreme(Some(extreme)) => {
                    crate::expr::compare(&extreme.datum(), value).map(|_| ())
                }
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Adds `value` (checked with [`Self::check`]) of a record at
    /// `event_time` to `accumulator`.
    pub fn add(&self, accumulator: &mut Accumulator, value: &Datum<'_>, event_time: i64) {
        use AggregateFunction::*;
        if self.function != CountRows && value.is_null() {
            return;
        }
        match (self.function, accumulator) {
            (CountRows | Count, Accumulator::Count(count)) => *count = count.saturating_add(1),
            (CountDistinct, Accumulator::Distinct(seen)) => {
                if let Some(key) = Stored::distinct_key(value) {
                    seen.insert(key);
                }
            }
            (Sum | Avg, Accumulator::Sum(sum)) => {
                sum.count += 1;
                match value {
                    Datum::Int(i) => sum.int += i128::from(*i),
                    Datum::Double(f) => {
                        sum.any_float = true;
                        sum.float += f;
                    }
                    _ => {}
                }
            }
            (Min | Max, Accumulator::Extreme(extreme)) => {
                let replace = match extreme {
                    None => true,
                    Some(current) => {
                        let order = crate::expr::compare(value, &current.datum()).ok().flatten();
                        let wanted = if self.function == Min {
                            Ordering::Less
                        } else {
                            Ordering::Greater
                        };
                        order == Some(wanted)
                    }
                };
                if replace {
                    *extreme = Stored::of(value);
                }
            }
            (FirstValue | LastValue, Accumulator::Timed(timed)) => {
                let replace = match timed {
                    None => true,
                    Some((at, _)) if self.function == FirstValue => event_time < *at,
                    Some((at, _)) => event_time >= *at,
                };
                if replace && let Some(stored) = Stored::of(value) {
                    *timed = Some((event_time, stored));
                }
            }
            _ => {}
        }
    }

    /// `a` and `b` combined (the accumulators of two session windows that
    /// merge; `a` the earlier).
    pub fn merge(&self, a: &Accumulator, b: &Accumulator) -> Accumulator {
        use AggregateFunction::*;
        match (a, b) {
            (Accumulator::Count(a), Accumulator::Count(b)) => {
                Accumulator::Count(a.saturating_add(*b))
            }
            (Accumulator::Distinct(a), Accumulator::Distinct(b)) => {
                Accumulator::Distinct(a.union(b).cloned().collect())
            }
            (Accumulator::Sum(a), Accumulator::Sum(b)) => Accumulator::Sum(NumberSum {
                count: a.count + b.count,
                int: a.int + b.int,
                float: a.float + b.float,
                any_float: a.any_float || b.any_float,
            }),
            (Accumulator::Extreme(a), Accumulator::Extreme(b)) => {
                let mut merged = Accumulator::Extreme(a.clone());
                if let Some(b) = b {
                    self.add(&mut merged, &b.datum(), 0);
                }
                merged
            }
            (Accumulator::Timed(a), Accumulator::Timed(b)) => Accumulator::Timed(match (a, b) {
                (Some(x), Some(y)) => {
                    let keep_a = match self.function {
                        FirstValue => x.0 <= y.0,
                        _ => x.0 > y.0,
                    };
                    Some(if keep_a { x.clone() } else { y.clone() })
                }
                (x, y) => x.clone().or_else(|| y.clone()),
            }),
            _ => a.clone(),
        }
    }

    /// The result of `accumulator`; an error where it has none (a `SUM` of
    /// `BIGINT`s beyond 64 bits).
    pub fn finish<'a>(&self, accumulator: &'a Accumulator) -> Result<Datum<'a>, EvalError> {
        use AggregateFunction::*;
        Ok(match accumulator {
            Accumulator::Count(count) => Datum::Int(*count),
            Accumulator::Distinct(seen) => {
                Datum::Int(i64::try_from(seen.len()).unwrap_or(i64::MAX))
            }
            Accumulator::Sum(sum) if sum.count == 0 => Datum::Null,
            Accumulator::Sum(sum) if sum.any_float => {
                let total = sum.int as f64 + sum.float;
                match self.function {
                    Avg => Datum::Double(total / sum.count as f64),
                    _ => Datum::Double(total),
                }
            }
            Accumulator::Sum(sum) => {
                let value = match self.function {
                    Avg => sum.int / i128::from(sum.count),
                    _ => sum.int,
                };
                match i64::try_from(value) {
                    Ok(value) => Datum::Int(value),
                    Err(_) => {
                        return Err(EvalError(format!(
                            "BIGINT overflow: the SUM is {value}, beyond 64 bits"
                        )));
                    }
                }
            }
            Accumulator::Extreme(extreme) => extreme.as_ref().map_or(Datum::Null, Stored::datum),
            Accumulator::Timed(timed) => timed.as_ref().map_or(Datum::Null, |(_, v)| v.datum()),
            Accumulator::Rows(rows) => Datum::Int(i64::try_from(rows.len()).unwrap_or(i64::MAX)),
        })
    }
}

/// A window's accumulators as the host stores them (into `out`, replacing
/// what it held): their number, then each, in postcard.
pub fn encode(accumulators: &[Accumulator], out: &mut Vec<u8>) {
    out.clear();
    // Writing to a `Vec` cannot fail.
    let mut buffer =
        postcard::to_extend(&(accumulators.len() as u64), std::mem::take(out)).unwrap_or_default();
    for accumulator in accumulators {
        buffer = postcard::to_extend(accumulator, buffer).unwrap_or_default();
    }
    *out = buffer;
}

/// A window's accumulators from what [`encode`] wrote, into `decoded`
/// (its contents replaced, its memory reused: adding to a window decodes
/// its accumulators once per batch); `None` if `bytes` are not that.
pub fn decode_into(bytes: &[u8], decoded: &mut Vec<Accumulator>) -> Option<()> {
    decoded.clear();
    let (count, mut rest) = postcard::take_from_bytes::<u64>(bytes).ok()?;
    for _ in 0..count {
        let (accumulator, after) = postcard::take_from_bytes::<Accumulator>(rest).ok()?;
        decoded.push(accumulator);
        rest = after;
    }
    rest.is_empty().then_some(())
}

/// A window's accumulators from what [`encode`] wrote; `None` if `bytes`
/// are not that.
pub fn decode(bytes: &[u8]) -> Option<Vec<Accumulator>> {
    let mut decoded = Vec::new();
    decode_into(bytes, &mut decoded).map(|()| decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(function: AggregateFunction) -> AggregateCall {
        AggregateCall {
            function,
            arg: None,
        }
    }

    fn run(function: AggregateFunction, values: &[(i64, Datum<'_>)]) -> Datum<'static> {
        let call = call(function);
        let mut acc = call.create();
        for (time, value) in values {
            call.check(&acc, value).unwrap();
            call.add(&mut acc, value, *time);
        }
        call.finish(&acc).unwrap().into_owned()
    }

    #[test]
    fn nulls_are_skipped_and_an_empty_aggregate_is_null() {
        use AggregateFunction::*;
        let values = [(1, Datum::Null), (2, Datum::Int(4)), (3, Datum::Null)];
        assert_eq!(run(CountRows, &values), Datum::Int(3));
        assert_eq!(run(Count, &values), Datum::Int(1));
        assert_eq!(run(Sum, &values), Datum::Int(4));
        for function in [Sum, Avg, Min, Max, FirstValue, LastValue] {
            assert_eq!(
                run(function, &[(1, Datum::Null)]),
                Datum::Null,
                "{function:?}"
            );
        }
        assert_eq!(run(Count, &[(1, Datum::Null)]), Datum::Int(0));
    }

    #[test]
    fn avg_of_integers_truncates_as_flink_and_of_doubles_does_not() {
        use AggregateFunction::*;
        let ints = [(1, Datum::Int(1)), (2, Datum::Int(2))];
        assert_eq!(run(Avg, &ints), Datum::Int(1));
        let negative = [(1, Datum::Int(-1)), (2, Datum::Int(-2))];
        assert_eq!(run(Avg, &negative), Datum::Int(-1));
        let doubles = [(1, Datum::Int(1)), (2, Datum::Double(2.0))];
        assert_eq!(run(Avg, &doubles), Datum::Double(1.5));
    }

    #[test]
    fn a_sum_beyond_bigint_is_an_error_and_a_wrong_type_is_refused_before_adding() {
        let sum = call(AggregateFunction::Sum);
        let mut acc = sum.create();
        for _ in 0..2 {
            sum.add(&mut acc, &Datum::Int(i64::MAX), 0);
        }
        assert!(sum.finish(&acc).is_err());
        let text = Datum::Str(Cow::Borrowed("x"));
        assert!(sum.check(&acc, &text).is_err());
        let max = call(AggregateFunction::Max);
        let mut acc = max.create();
        max.add(&mut acc, &Datum::Int(1), 0);
        assert!(max.check(&acc, &text).is_err());
    }

    #[test]
    fn first_and_last_follow_event_time_and_merge_alike() {
        use AggregateFunction::*;
        let values = [
            (20, Datum::Int(2)),
            (10, Datum::Int(1)),
            (30, Datum::Null),
            (20, Datum::Int(3)),
        ];
        assert_eq!(run(FirstValue, &values), Datum::Int(1));
        assert_eq!(run(LastValue, &values), Datum::Int(3));
        for function in [FirstValue, LastValue, Min, Max, Sum, CountDistinct] {
            let call = call(function);
            let (mut a, mut b) = (call.create(), call.create());
            for (i, (time, value)) in values.iter().enumerate() {
                let acc = if i % 2 == 0 { &mut a } else { &mut b };
                call.add(acc, value, *time);
            }
            let merged = call.merge(&a, &b);
            assert_eq!(
                call.finish(&merged).unwrap().into_owned(),
                run(function, &values),
                "{function:?}"
            );
        }
    }

    #[test]
    fn distinct_counts_equal_numbers_once() {
        let values = [
            (1, Datum::Int(1)),
            (2, Datum::Double(1.0)),
            (3, Datum::Str(Cow::Borrowed("1"))),
            (4, Datum::Double(-0.0)),
            (5, Datum::Int(0)),
        ];
        assert_eq!(
            run(AggregateFunction::CountDistinct, &values),
            Datum::Int(3)
        );
    }

    #[test]
    fn accumulators_round_trip_through_their_bytes() {
        let accumulators = vec![
            Accumulator::Count(3),
            Accumulator::Extreme(Some(Stored::Str("é".into()))),
            Accumulator::Timed(Some((5, Stored::Json("{\"a\":1}".into())))),
        ];
        let mut bytes = vec![9, 9];
        encode(&accumulators, &mut bytes);
        assert_eq!(decode(&bytes), Some(accumulators));
        assert_eq!(decode(&[0xFF, 0xFF]), None);
    }
}
