//! Scalar expressions, compiled once from the query and evaluated per
//! record over the fields it read: no JSON document is built.
//!
//! [`Expr`] is a tree of operations with everything that can be decided
//! once already decided (column positions, literal patterns compiled,
//! casts' targets, functions resolved); [`Expr::eval`] walks it over a
//! record's [`Row`]. SQL's NULL semantics hold throughout: most operations
//! on `NULL` give `NULL`, `AND`/`OR`/`NOT` are three-valued, and a `WHERE`
//! keeps a record only when its condition is `TRUE`. What a record gets
//! wrong (a string where a number is needed, an overflow, a division by
//! zero) is an [`EvalError`]: the record goes to the dead-letter output
//! with it, never a silently different value.

pub(crate) mod bind;
mod functions;
mod like;
mod show;

pub use bind::{Binder, SUPPORTED_FUNCTIONS, Scope};
pub(crate) use bind::{Bound, Names};
pub use functions::Function;
pub use like::LikePattern;
pub use show::path_sql;

use crate::datum::{Datum, SqlType};
use sluice_json::FieldValue;
use std::borrow::Cow;
use std::cmp::Ordering;

/// A record's columns, in the order of [`Scope::columns`], as an
/// expression reads them: each value is read when the expression reaches
/// its column, so that a column only copied to the output (or not reached)
/// is never parsed.
#[derive(Debug, Clone, Copy)]
pub enum Row<'r> {
    /// The fields' values, read already (`None`: missing).
    Fields(&'r [Option<FieldValue>]),
    /// A record's JSON text and where each column's value lies in it
    /// (`None`: missing): read with [`Datum::of_json_text`], strings
    /// without escapes borrowed.
    Spans {
        /// The record's JSON value.
        text: &'r [u8],
        /// One per column.
        spans: &'r [Option<(usize, usize)>],
    },
    /// Values computed already: the row a window aggregate emits (its
    /// keys, window bounds and aggregates' results).
    Datums(&'r [Datum<'r>]),
}

impl<'r> Row<'r> {
    /// The value of column `index`.
    pub fn column(self, index: usize) -> EvalResult<'r> {
        match self {
            Row::Fields(fields) => Ok(Datum::of_field(fields.get(index).and_then(Option::as_ref))),
            Row::Spans { text, spans } => match spans.get(index).copied().flatten() {
                None => Ok(Datum::Null),
                Some((start, end)) => match text.get(start..end) {
                    Some(value) => Datum::of_json_text(value).map_err(EvalError),
                    None => fail("a field's span lies outside the record"),
                },
            },
            Row::Datums(datums) => Ok(datums.get(index).map_or(Datum::Null, borrow)),
        }
    }
}

/// Why an expression failed on one record (the dead-letter reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

/// A result of [`Expr::eval`].
pub type EvalResult<'r> = Result<Datum<'r>, EvalError>;

fn fail<T>(message: impl Into<String>) -> Result<T, EvalError> {
    Err(EvalError(message.into()))
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// `=`
    Eq,
    /// `<>` or `!=`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

/// An arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (integer division of two `BIGINT`s, as in Flink)
    Div,
    /// `%` or `MOD` (the sign of the dividend)
    Mod,
}

/// A `CAST` target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CastTarget {
    /// `BIGINT`, or a narrower integer type with its range.
    Integer {
        /// The type's name, for messages.
        name: &'static str,
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
    },
    /// `DOUBLE`, `FLOAT`, `REAL`.
    Double,
    /// `STRING`, `VARCHAR`.
    String,
    /// `BOOLEAN`.
    Boolean,
    /// `TIMESTAMP(3)`, `TIMESTAMP_LTZ(3)`.
    Timestamp,
}

impl CastTarget {
    /// The type a cast to this gives.
    pub fn sql_type(self) -> SqlType {
        match self {
            CastTarget::Integer { .. } => SqlType::Bigint,
            CastTarget::Double => SqlType::Double,
            CastTarget::String => SqlType::String,
            CastTarget::Boolean => SqlType::Boolean,
            CastTarget::Timestamp => SqlType::Timestamp,
        }
    }
}

/// A compiled scalar expression.
#[derive(Debug, Clone)]
pub enum Expr {
    /// The field at this position of the row.
    Column(usize),
    /// A constant.
    Literal(Datum<'static>),
    /// `NOT e`
    Not(Box<Expr>),
    /// `a AND b` (three-valued; `b` is not evaluated when `a` is FALSE)
    And(Box<Expr>, Box<Expr>),
    /// `a OR b` (three-valued; `b` is not evaluated when `a` is TRUE)
    Or(Box<Expr>, Box<Expr>),
    /// `a <op> b`
    Compare(CompareOp, Box<Expr>, Box<Expr>),
    /// `a <op> b`
    Arithmetic(ArithOp, Box<Expr>, Box<Expr>),
    /// `-e`
    Negate(Box<Expr>),
    /// `e IS [NOT] NULL`
    IsNull {
        /// The operand.
        expr: Box<Expr>,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// `e IS [NOT] TRUE|FALSE`
    IsBool {
        /// The operand.
        expr: Box<Expr>,
        /// TRUE or FALSE.
        value: bool,
        /// `IS NOT`.
        negated: bool,
    },
    /// `a IS [NOT] DISTINCT FROM b`
    IsDistinct {
        /// Left.
        left: Box<Expr>,
        /// Right.
        right: Box<Expr>,
        /// `IS NOT DISTINCT FROM`.
        negated: bool,
    },
    /// `e [NOT] IN (list)`
    InList {
        /// The operand.
        expr: Box<Expr>,
        /// The values.
        list: Vec<Expr>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `e [NOT] BETWEEN low AND high`
    Between {
        /// The operand.
        expr: Box<Expr>,
        /// Lower bound (inclusive).
        low: Box<Expr>,
        /// Upper bound (inclusive).
        high: Box<Expr>,
        /// `NOT BETWEEN`.
        negated: bool,
    },
    /// `e [NOT] LIKE pattern [ESCAPE c]`
    Like {
        /// The operand.
        expr: Box<Expr>,
        /// The pattern.
        pattern: LikePattern,
        /// `NOT LIKE`.
        negated: bool,
    },
    /// `CASE [operand] WHEN .. THEN .. [ELSE ..] END`
    Case {
        /// The simple form's operand.
        operand: Option<Box<Expr>>,
        /// Conditions (or values, with an operand) and results.
        whens: Vec<(Expr, Expr)>,
        /// `ELSE` (absent: NULL).
        otherwise: Option<Box<Expr>>,
    },
    /// `CAST(e AS t)`, `TRY_CAST(e AS t)`
    Cast {
        /// The operand.
        expr: Box<Expr>,
        /// The target type.
        to: CastTarget,
        /// `TRY_CAST`: a value that does not convert is NULL.
        try_cast: bool,
    },
    /// `COALESCE(a, b, ...)`
    Coalesce(Vec<Expr>),
    /// A built-in scalar function.
    Call(Function, Vec<Expr>),
}

/// How deep an expression may nest: evaluation recurses once per level.
pub const MAX_DEPTH: usize = 200;

impl Expr {
    /// The value of the expression for `row`.
    pub fn eval<'r>(&'r self, row: Row<'r>) -> EvalResult<'r> {
        match self {
            Expr::Column(index) => row.column(*index),
            Expr::Literal(value) => Ok(borrow(value)),
            Expr::Not(expr) => Ok(match truth(expr.eval(row)?, "NOT")? {
                Some(b) => Datum::Bool(!b),
                None => Datum::Null,
            }),
            Expr::And(left, right) => {
                let left = truth(left.eval(row)?, "AND")?;
                if left == Some(false) {
                    return Ok(Datum::Bool(false));
                }
                let right = truth(right.eval(row)?, "AND")?;
                Ok(match (left, right) {
                    (_, Some(false)) => Datum::Bool(false),
                    (Some(true), Some(true)) => Datum::Bool(true),
                    _ => Datum::Null,
                })
            }
            Expr::Or(left, right) => {
                let left = truth(left.eval(row)?, "OR")?;
                if left == Some(true) {
                    return Ok(Datum::Bool(true));
                }
                let right = truth(right.eval(row)?, "OR")?;
                Ok(match (left, right) {
                    (_, Some(true)) => Datum::Bool(true),
                    (Some(false), Some(false)) => Datum::Bool(false),
                    _ => Datum::Null,
                })
            }
            Expr::Compare(op, left, right) => {
                let (left, right) = (left.eval(row)?, right.eval(row)?);
                Ok(match compare(&left, &right)? {
                    None => Datum::Null,
                    Some(order) => Datum::Bool(op.holds(order)),
                })
            }
            Expr::Arithmetic(op, left, right) => arithmetic(*op, left.eval(row)?, right.eval(row)?),
            Expr::Negate(expr) => match expr.eval(row)? {
                Datum::Null => Ok(Datum::Null),
                Datum::Int(i) => match i.checked_neg() {
                    Some(n) => Ok(Datum::Int(n)),
                    None => fail(format!("BIGINT overflow: -({i})")),
                },
                Datum::Double(f) => Ok(Datum::Double(-f)),
                Datum::Interval(ms) => Ok(Datum::Interval(ms.saturating_neg())),
                other => fail(format!("cannot negate {}", describe(&other))),
            },
            Expr::IsNull { expr, negated } => {
                Ok(Datum::Bool(expr.eval(row)?.is_null() != *negated))
            }
            Expr::IsBool {
                expr,
                value,
                negated,
            } => {
                let truth = truth(expr.eval(row)?, "IS TRUE/FALSE")?;
                Ok(Datum::Bool((truth == Some(*value)) != *negated))
            }
            Expr::IsDistinct {
                left,
                right,
                negated,
            } => {
                let (left, right) = (left.eval(row)?, right.eval(row)?);
                let distinct = match (left.is_null(), right.is_null()) {
                    (true, true) => false,
                    (true, false) | (false, true) => true,
                    (false, false) => compare(&left, &right)? != Some(Ordering::Equal),
                };
                Ok(Datum::Bool(distinct != *negated))
            }
            Expr::InList {
                expr,
                list,
                negated,
            } => {
                let value = expr.eval(row)?;
                if value.is_null() {
                    return Ok(Datum::Null);
                }
                let mut saw_null = false;
                for item in list {
                    match compare(&value, &item.eval(row)?)? {
                        Some(Ordering::Equal) => return Ok(Datum::Bool(!*negated)),
                        None => saw_null = true,
                        Some(_) => {}
                    }
                }
                Ok(if saw_null {
                    Datum::Null
                } else {
                    Datum::Bool(*negated)
                })
            }
            Expr::Between {
                expr,
                low,
                high,
                negated,
            } => {
                let value = expr.eval(row)?;
                let above = compare(&value, &low.eval(row)?)?.map(|o| o != Ordering::Less);
                let below = compare(&value, &high.eval(row)?)?.map(|o| o != Ordering::Greater);
                let between = match (above, below) {
                    (Some(false), _) | (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                };
                Ok(match between {
                    Some(b) => Datum::Bool(b != *negated),
                    None => Datum::Null,
                })
            }
            Expr::Like {
                expr,
                pattern,
                negated,
            } => match expr.eval(row)? {
                Datum::Null => Ok(Datum::Null),
                Datum::Str(text) => match pattern.matches(&text, row)? {
                    Some(matched) => Ok(Datum::Bool(matched != *negated)),
                    None => Ok(Datum::Null),
                },
                other => fail(format!("LIKE needs a STRING, found {}", describe(&other))),
            },
            Expr::Case {
                operand,
                whens,
                otherwise,
            } => {
                let operand = match operand {
                    Some(operand) => Some(operand.eval(row)?),
                    None => None,
                };
                for (when, then) in whens {
                    let chosen = match &operand {
                        Some(value) => compare(value, &when.eval(row)?)? == Some(Ordering::Equal),
                        None => truth(when.eval(row)?, "CASE WHEN")? == Some(true),
                    };
                    if chosen {
                        return then.eval(row);
                    }
                }
                match otherwise {
                    Some(otherwise) => otherwise.eval(row),
                    None => Ok(Datum::Null),
                }
            }
            Expr::Cast { expr, to, try_cast } => match functions::cast(expr.eval(row)?, *to) {
                Err(_) if *try_cast => Ok(Datum::Null),
                result => result,
            },
            Expr::Coalesce(items) => {
                for item in items {
                    let value = item.eval(row)?;
                    if !value.is_null() {
                        return Ok(value);
                    }
                }
                Ok(Datum::Null)
            }
            Expr::Call(function, args) => function.call(args, row),
        }
    }

    /// Whether `row` passes this condition (a `WHERE`): only TRUE does.
    pub fn holds(&self, row: Row<'_>) -> Result<bool, EvalError> {
        Ok(truth(self.eval(row)?, "WHERE")? == Some(true))
    }
}

impl CompareOp {
    fn holds(self, order: Ordering) -> bool {
        match self {
            CompareOp::Eq => order == Ordering::Equal,
            CompareOp::NotEq => order != Ordering::Equal,
            CompareOp::Lt => order == Ordering::Less,
            CompareOp::LtEq => order != Ordering::Greater,
            CompareOp::Gt => order == Ordering::Greater,
            CompareOp::GtEq => order != Ordering::Less,
        }
    }
}

/// A literal's value, borrowed from the expression.
fn borrow<'r>(value: &'r Datum<'_>) -> Datum<'r> {
    match value {
        Datum::Str(s) => Datum::Str(Cow::Borrowed(s.as_ref())),
        Datum::Json(v) => Datum::Json(Cow::Borrowed(v.as_ref())),
        other => other.clone(),
    }
}

/// A value's truth: `Some(bool)`, `None` for NULL; anything else is an
/// error naming `operation`.
fn truth(value: Datum<'_>, operation: &str) -> Result<Option<bool>, EvalError> {
    match value {
        Datum::Bool(b) => Ok(Some(b)),
        Datum::Null => Ok(None),
        other => fail(format!(
            "{operation} needs a BOOLEAN, found {}",
            describe(&other)
        )),
    }
}

/// A value and its type, for messages (strings shortened).
pub(crate) fn describe(value: &Datum<'_>) -> String {
    let shown = match value {
        Datum::Str(s) => {
            let mut shown: String = s.chars().take(40).collect();
            if shown.len() < s.len() {
                shown.push('…');
            }
            format!("'{shown}'")
        }
        other => match other.to_text() {
            Some(text) if text.len() <= 40 => text.into_owned(),
            Some(_) => "a long value".to_string(),
            None => "NULL".to_string(),
        },
    };
    format!("{} {shown}", value.sql_type().name())
}

/// The order of two values (`None` if either is NULL, or for doubles that
/// do not order: NaN); values of types that do not compare are an error.
pub(crate) fn compare(left: &Datum<'_>, right: &Datum<'_>) -> Result<Option<Ordering>, EvalError> {
    Ok(match (left, right) {
        (Datum::Null, _) | (_, Datum::Null) => None,
        (Datum::Int(a), Datum::Int(b)) => Some(a.cmp(b)),
        (Datum::Int(a), Datum::Double(b)) => (*a as f64).partial_cmp(b),
        (Datum::Double(a), Datum::Int(b)) => a.partial_cmp(&(*b as f64)),
        (Datum::Double(a), Datum::Double(b)) => a.partial_cmp(b),
        (Datum::Str(a), Datum::Str(b)) => Some(a.as_ref().cmp(b.as_ref())),
        (Datum::Bool(a), Datum::Bool(b)) => Some(a.cmp(b)),
        (Datum::Timestamp(a), Datum::Timestamp(b)) | (Datum::Interval(a), Datum::Interval(b)) => {
            Some(a.cmp(b))
        }
        (Datum::Json(a), Datum::Json(b)) if a == b => Some(Ordering::Equal),
        (a, b) => {
            return fail(format!(
                "cannot compare {} with {}",
                describe(a),
                describe(b)
            ));
        }
    })
}

/// `left <op> right`.
fn arithmetic<'r>(op: ArithOp, left: Datum<'r>, right: Datum<'r>) -> EvalResult<'r> {
    use ArithOp::*;
    let symbol = match op {
        Add => "+",
        Sub => "-",
        Mul => "*",
        Div => "/",
        Mod => "%",
    };
    match (left, right) {
        // NULL with a value that could take part gives NULL; with one
        // that could not (a string), the record is as wrong as without it.
        (Datum::Null, Datum::Null) => Ok(Datum::Null),
        (Datum::Null, other) | (other, Datum::Null) => match other {
            Datum::Int(_) | Datum::Double(_) | Datum::Timestamp(_) | Datum::Interval(_) => {
                Ok(Datum::Null)
            }
            other => fail(format!("cannot compute {symbol} on {}", describe(&other))),
        },
        (Datum::Int(a), Datum::Int(b)) => {
            let result = match op {
                Add => a.checked_add(b),
                Sub => a.checked_sub(b),
                Mul => a.checked_mul(b),
                Div | Mod if b == 0 => return fail(format!("division by zero: {a} {symbol} 0")),
                Div => a.checked_div(b),
                Mod => a.checked_rem(b),
            };
            match result {
                Some(n) => Ok(Datum::Int(n)),
                None => fail(format!("BIGINT overflow: {a} {symbol} {b}")),
            }
        }
        (Datum::Int(a), Datum::Double(b)) => Ok(Datum::Double(double_op(op, a as f64, b))),
        (Datum::Double(a), Datum::Int(b)) => Ok(Datum::Double(double_op(op, a, b as f64))),
        (Datum::Double(a), Datum::Double(b)) => Ok(Datum::Double(double_op(op, a, b))),
        (Datum::Timestamp(t), Datum::Interval(i)) | (Datum::Interval(i), Datum::Timestamp(t))
            if op == Add =>
        {
            Ok(Datum::Timestamp(t.saturating_add(i)))
        }
        (Datum::Timestamp(t), Datum::Interval(i)) if op == Sub => {
            Ok(Datum::Timestamp(t.saturating_sub(i)))
        }
        (Datum::Interval(a), Datum::Interval(b)) if matches!(op, Add | Sub) => {
            Ok(Datum::Interval(if op == Add {
                a.saturating_add(b)
            } else {
                a.saturating_sub(b)
            }))
        }
        (a, b) => fail(format!(
            "cannot compute {} {symbol} {}",
            describe(&a),
            describe(&b)
        )),
    }
}

fn double_op(op: ArithOp, a: f64, b: f64) -> f64 {
    match op {
        ArithOp::Add => a + b,
        ArithOp::Sub => a - b,
        ArithOp::Mul => a * b,
        ArithOp::Div => a / b,
        ArithOp::Mod => a % b,
    }
}
