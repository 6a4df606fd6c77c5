//! Built-in scalar functions and `CAST`, with Flink's meaning.
//!
//! Lengths and positions count characters (Unicode scalar values), as the
//! built-in `length(field)` aggregate input does; Flink counts UTF-16 units,
//! which differ only for characters outside the Basic Multilingual Plane.

use super::like::REGEX_SIZE_LIMIT;
use super::{CastTarget, EvalError, EvalResult, Expr, Row, describe, fail};
use crate::datum::{Datum, SqlType};
use crate::time::{DatePattern, parse_timestamp, to_timestamp_ltz};
use regex::Regex;
use smallvec::SmallVec;
use std::borrow::Cow;

/// Which end `TRIM` trims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrimSide {
    /// `BOTH` (the default).
    Both,
    /// `LEADING`, `LTRIM`.
    Leading,
    /// `TRAILING`, `RTRIM`.
    Trailing,
}

/// A built-in scalar function, resolved at bind time.
#[derive(Debug, Clone)]
pub enum Function {
    /// `UPPER(s)`
    Upper,
    /// `LOWER(s)`
    Lower,
    /// `CHAR_LENGTH(s)`, `CHARACTER_LENGTH(s)`
    CharLength,
    /// `CONCAT(s, ...)`, `s || t`: NULL if any argument is.
    Concat,
    /// `SUBSTRING(s FROM start [FOR length])`: 1-based; a negative start
    /// counts from the end (as in Flink).
    Substring,
    /// `TRIM([side] [chars FROM] s)`: the arguments are `s` and, if given,
    /// the characters to trim (default: spaces).
    Trim(TrimSide),
    /// `REGEXP_LIKE(s, pattern)` (also `REGEXP`): whether some part of `s`
    /// matches; the pattern compiled once when it is a literal.
    RegexpLike(Option<Regex>),
    /// `REPLACE(s, from, to)`
    Replace,
    /// `POSITION(needle IN s)`: 1-based, 0 when absent.
    Position,
    /// `ABS(n)`
    Abs,
    /// `TO_TIMESTAMP_LTZ(n, precision)`: precision 0 (seconds) or 3 (ms).
    ToTimestampLtz,
    /// `DATE_FORMAT(ts, pattern)`: the pattern parsed once when a literal.
    DateFormat(Option<DatePattern>),
}

impl Function {
    /// The function's name in SQL.
    pub fn name(&self) -> &'static str {
        match self {
            Function::Upper => "UPPER",
            Function::Lower => "LOWER",
            Function::CharLength => "CHAR_LENGTH",
            Function::Concat => "CONCAT",
            Function::Substring => "SUBSTRING",
            Function::Trim(_) => "TRIM",
            Function::RegexpLike(_) => "REGEXP_LIKE",
            Function::Replace => "REPLACE",
            Function::Position => "POSITION",
            Function::Abs => "ABS",
            Function::ToTimestampLtz => "TO_TIMESTAMP_LTZ",
            Function::DateFormat(_) => "DATE_FORMAT",
        }
    }

    /// Whether the argument at `position` may be `value` (not NULL).
    fn takes(&self, position: usize, value: &Datum<'_>) -> bool {
        let string = matches!(value, Datum::Str(_));
        let integer = matches!(value, Datum::Int(_));
        match self {
            Function::Substring if position > 0 => integer,
            Function::ToTimestampLtz => integer,
            Function::Abs => matches!(value, Datum::Int(_) | Datum::Double(_)),
            Function::DateFormat(_) if position == 0 => {
                matches!(value, Datum::Str(_) | Datum::Timestamp(_))
            }
            _ => string,
        }
    }

    /// The type of the result, given the arguments' types.
    pub fn result_type(&self, args: &[SqlType]) -> SqlType {
        match self {
            Function::Upper
            | Function::Lower
            | Function::Concat
            | Function::Substring
            | Function::Trim(_)
            | Function::Replace
            | Function::DateFormat(_) => SqlType::String,
            Function::CharLength | Function::Position => SqlType::Bigint,
            Function::RegexpLike(_) => SqlType::Boolean,
            Function::Abs => args.first().copied().unwrap_or(SqlType::Unknown),
            Function::ToTimestampLtz => SqlType::Timestamp,
        }
    }

    /// Calls the function on `args` evaluated over `row`.
    pub(crate) fn call<'r>(&'r self, args: &'r [Expr], row: Row<'r>) -> EvalResult<'r> {
        let mut values: SmallVec<[Datum<'r>; 3]> = SmallVec::with_capacity(args.len());
        for arg in args {
            values.push(arg.eval(row)?);
        }
        let name = self.name();
        // Every function here is NULL on a NULL argument, once the others
        // are of types it takes (a wrong one fails the record either way).
        if values.iter().any(Datum::is_null) {
            for (position, value) in values.iter().enumerate() {
                if !value.is_null() && !self.takes(position, value) {
                    return fail(format!("{name} cannot take {}", describe(value)));
                }
            }
            return Ok(Datum::Null);
        }
        match self {
            // ASCII text (most of it) is mapped byte by byte.
            Function::Upper => map_text(values, name, |s| {
                if s.is_ascii() {
                    s.to_ascii_uppercase()
                } else {
                    s.to_uppercase()
                }
            }),
            Function::Lower => map_text(values, name, |s| {
                if s.is_ascii() {
                    s.to_ascii_lowercase()
                } else {
                    s.to_lowercase()
                }
            }),
            Function::CharLength => {
                let s = text(&values[0], name)?;
                Ok(Datum::Int(s.chars().count() as i64))
            }
            Function::Concat => {
                let mut out = String::new();
                for value in &values {
                    out.push_str(text(value, name)?);
                }
                Ok(Datum::Str(Cow::Owned(out)))
            }
            Function::Substring => {
                let s = text(&values[0], name)?;
                let start = integer(&values[1], name)?;
                let length = match values.get(2) {
                    Some(length) => Some(integer(length, name)?),
                    None => None,
                };
                substring(s, start, length).map(|s| Datum::Str(Cow::Owned(s)))
            }
            Function::Trim(side) => {
                let s = text(&values[0], name)?;
                let chars: Vec<char> = match values.get(1) {
                    Some(chars) => text(chars, name)?.chars().collect(),
                    None => vec![' '],
                };
                let trim = |c: char| chars.contains(&c);
                let trimmed = match side {
                    TrimSide::Both => s.trim_matches(trim),
                    TrimSide::Leading => s.trim_start_matches(trim),
                    TrimSide::Trailing => s.trim_end_matches(trim),
                };
                Ok(Datum::Str(Cow::Owned(trimmed.to_string())))
            }
            Function::RegexpLike(compiled) => {
                let s = text(&values[0], name)?;
                let matched = match compiled {
                    Some(regex) => regex.is_match(s),
                    None => regex(text(&values[1], name)?)
                        .map_err(EvalError)?
                        .is_match(s),
                };
                Ok(Datum::Bool(matched))
            }
            Function::Replace => {
                let (s, from, to) = (
                    text(&values[0], name)?,
                    text(&values[1], name)?,
                    text(&values[2], name)?,
                );
                // Java's replace of an empty string inserts between every
                // character; nobody means that: the string stays.
                let replaced = if from.is_empty() {
                    s.to_string()
                } else {
                    s.replace(from, to)
                };
                Ok(Datum::Str(Cow::Owned(replaced)))
            }
            Function::Position => {
                let (needle, s) = (text(&values[0], name)?, text(&values[1], name)?);
                Ok(Datum::Int(match s.find(needle) {
                    Some(at) => s[..at].chars().count() as i64 + 1,
                    None => 0,
                }))
            }
            Function::Abs => match &values[0] {
                Datum::Int(i) => match i.checked_abs() {
                    Some(n) => Ok(Datum::Int(n)),
                    None => fail(format!("BIGINT overflow: ABS({i})")),
                },
                Datum::Double(f) => Ok(Datum::Double(f.abs())),
                other => fail(format!("ABS needs a number, found {}", describe(other))),
            },
            Function::ToTimestampLtz => {
                let n = integer(&values[0], name)?;
                let precision = match values.get(1) {
                    Some(p) => integer(p, name)?,
                    None => 3,
                };
                match u32::try_from(precision)
                    .ok()
                    .and_then(|p| to_timestamp_ltz(n, p))
                {
                    Some(ms) => Ok(Datum::Timestamp(ms)),
                    None => fail(format!(
                        "TO_TIMESTAMP_LTZ({n}, {precision}): precision must be 0 or 3 and the instant within years 1..9999"
                    )),
                }
            }
            Function::DateFormat(compiled) => {
                let ms = match &values[0] {
                    Datum::Timestamp(ms) => *ms,
                    Datum::Str(s) => match parse_timestamp(s) {
                        Some(ms) => ms,
                        None => return fail(format!("DATE_FORMAT: '{s}' is not a timestamp")),
                    },
                    other => {
                        return fail(format!(
                            "DATE_FORMAT needs a TIMESTAMP or STRING, found {}",
                            describe(other)
                        ));
                    }
                };
                let parsed;
                let pattern = match compiled {
                    Some(pattern) => pattern,
                    None => {
                        parsed = DatePattern::parse(text(&values[1], name)?).map_err(EvalError)?;
                        &parsed
                    }
                };
                match pattern.format(ms) {
                    Some(text) => Ok(Datum::Str(Cow::Owned(text))),
                    None => fail(format!("DATE_FORMAT: {ms} ms is out of range")),
                }
            }
        }
    }
}

/// A regular expression from a query or a record (size-limited).
pub(crate) fn regex(pattern: &str) -> Result<Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|error| format!("invalid regular expression `{pattern}`: {error}"))
}

fn text<'v>(value: &'v Datum<'_>, function: &str) -> Result<&'v str, EvalError> {
    match value {
        Datum::Str(s) => Ok(s.as_ref()),
        other => fail(format!(
            "{function} needs a STRING, found {}",
            describe(other)
        )),
    }
}

fn integer(value: &Datum<'_>, function: &str) -> Result<i64, EvalError> {
    match value {
        Datum::Int(i) => Ok(*i),
        other => fail(format!(
            "{function} needs a BIGINT, found {}",
            describe(other)
        )),
    }
}

fn map_text<'r>(
    values: SmallVec<[Datum<'r>; 3]>,
    function: &str,
    map: impl Fn(&str) -> String,
) -> EvalResult<'r> {
    let s = text(&values[0], function)?;
    Ok(Datum::Str(Cow::Owned(map(s))))
}

/// `SUBSTRING(s FROM start [FOR length])` in characters: `start` 1-based,
/// 0 as 1, negative from the end; a negative length is an error.
pub(crate) fn substring(s: &str, start: i64, length: Option<i64>) -> Result<String, EvalError> {
    if let Some(length) = length
        && length < 0
    {
        return fail(format!("SUBSTRING: negative length {length}"));
    }
    let count = s.chars().count() as i64;
    let from = if start > 0 {
        start - 1
    } else if start < 0 {
        (count + start).max(0)
    } else {
        0
    };
    let to = match length {
        Some(length) => from.saturating_add(length).min(count),
        None => count,
    };
    if from >= to {
        return Ok(String::new());
    }
    Ok(s.chars()
        .skip(from as usize)
        .take((to - from) as usize)
        .collect())
}

/// `CAST(value AS to)`; what does not convert is an error (`TRY_CAST`
/// makes it NULL).
pub(crate) fn cast(value: Datum<'_>, to: CastTarget) -> EvalResult<'_> {
    let cannot = |value: &Datum<'_>| {
        fail(format!(
            "cannot cast {} to {}",
            describe(value),
            match to {
                CastTarget::Integer { name, .. } => name,
                other => other.sql_type().name(),
            }
        ))
    };
    if value.is_null() {
        return Ok(Datum::Null);
    }
    match to {
        CastTarget::Integer { min, max, .. } => {
            let n = match &value {
                Datum::Int(i) => Some(*i),
                Datum::Double(f) => double_to_integer(*f),
                Datum::Bool(b) => Some(i64::from(*b)),
                Datum::Str(s) => {
                    let s = s.trim();
                    s.parse::<i64>()
                        .ok()
                        .or_else(|| s.parse::<f64>().ok().and_then(double_to_integer))
                }
                Datum::Timestamp(ms) => Some(ms.div_euclid(1000)),
                _ => None,
            };
            match n {
                Some(n) if (min..=max).contains(&n) => Ok(Datum::Int(n)),
                _ => cannot(&value),
            }
        }
        CastTarget::Double => match &value {
            Datum::Int(i) => Ok(Datum::Double(*i as f64)),
            Datum::Double(f) => Ok(Datum::Double(*f)),
            Datum::Bool(b) => Ok(Datum::Double(if *b { 1.0 } else { 0.0 })),
            Datum::Str(s) => match s.trim().parse::<f64>() {
                Ok(f) => Ok(Datum::Double(f)),
                Err(_) => cannot(&value),
            },
            _ => cannot(&value),
        },
        CastTarget::String => Ok(match value {
            Datum::Str(s) => Datum::Str(s),
            other => match other.to_text() {
                Some(text) => Datum::Str(Cow::Owned(text.into_owned())),
                None => Datum::Null,
            },
        }),
        CastTarget::Boolean => match &value {
            Datum::Bool(b) => Ok(Datum::Bool(*b)),
            Datum::Int(i) => Ok(Datum::Bool(*i != 0)),
            Datum::Str(s) => match s.trim().to_ascii_lowercase().as_str() {
                "true" => Ok(Datum::Bool(true)),
                "false" => Ok(Datum::Bool(false)),
                _ => cannot(&value),
            },
            _ => cannot(&value),
        },
        CastTarget::Timestamp => match &value {
            Datum::Timestamp(ms) => Ok(Datum::Timestamp(*ms)),
            Datum::Str(s) => match parse_timestamp(s) {
                Some(ms) => Ok(Datum::Timestamp(ms)),
                None => cannot(&value),
            },
            _ => cannot(&value),
        },
    }
}

/// A double truncated toward zero, if it fits a BIGINT.
fn double_to_integer(f: f64) -> Option<i64> {
    let truncated = f.trunc();
    // i64::MAX as f64 rounds up to 2^63, which does not fit.
    (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0)
        .contains(&truncated)
        .then_some(truncated as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_counts_characters_from_one_or_from_the_end() {
        assert_eq!(substring("hello", 2, Some(3)).unwrap(), "ell");
        assert_eq!(substring("hello", 0, Some(2)).unwrap(), "he");
        assert_eq!(substring("hello", -3, None).unwrap(), "llo");
        assert_eq!(substring("hello", -9, Some(2)).unwrap(), "he");
        assert_eq!(substring("héllo", 2, Some(1)).unwrap(), "é");
        assert_eq!(substring("hello", 9, None).unwrap(), "");
        assert!(substring("hello", 1, Some(-1)).is_err());
    }

    #[test]
    fn casts_convert_or_fail() {
        let int = CastTarget::Integer {
            name: "INT",
            min: i64::from(i32::MIN),
            max: i64::from(i32::MAX),
        };
        assert_eq!(cast(Datum::Str(" 42 ".into()), int), Ok(Datum::Int(42)));
        assert_eq!(cast(Datum::Double(-2.7), int), Ok(Datum::Int(-2)));
        assert!(cast(Datum::Str("3000000000".into()), int).is_err());
        assert!(cast(Datum::Str("x".into()), int).is_err());
        assert!(cast(Datum::Double(f64::NAN), int).is_err());
        assert_eq!(
            cast(Datum::Int(7), CastTarget::String),
            Ok(Datum::Str("7".into()))
        );
        assert_eq!(
            cast(Datum::Bool(true), CastTarget::String),
            Ok(Datum::Str("TRUE".into()))
        );
        assert_eq!(
            cast(Datum::Str("False".into()), CastTarget::Boolean),
            Ok(Datum::Bool(false))
        );
        assert_eq!(cast(Datum::Null, CastTarget::Double), Ok(Datum::Null));
    }
}
