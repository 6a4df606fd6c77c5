//! Binding: sqlparser's expression tree to a compiled [`Expr`], with
//! columns resolved to row positions, types checked where they are known,
//! and everything outside the supported subset refused with its position.

use super::functions::TrimSide;
use super::{ArithOp, CastTarget, CompareOp, Expr, Function, LikePattern, MAX_DEPTH};
use crate::datum::{Datum, SqlType};
use crate::error::SqlError;
use crate::time::interval_ms;
use sluice_json::FieldPath;
use sqlparser::ast::{
    self, BinaryOperator, CastKind, DataType, FunctionArg, FunctionArgExpr, FunctionArguments,
    Ident, Spanned, TrimWhereField, UnaryOperator, Value,
};
use sqlparser::tokenizer::Span;
use std::borrow::Cow;

mod calls;

pub use calls::SUPPORTED_FUNCTIONS;

/// What a query's expressions may name: the table (and its alias) that
/// may qualify a column, and the columns read so far, each a field path of
/// the record's JSON value at a row position.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    qualifiers: Vec<String>,
    columns: Vec<FieldPath>,
}

impl Scope {
    /// A scope in which `qualifiers` (the table's name and alias) may
    /// prefix a column.
    pub fn new(qualifiers: Vec<String>) -> Scope {
        Scope {
            qualifiers,
            columns: Vec::new(),
        }
    }

    /// The fields read, in row order.
    pub fn columns(&self) -> &[FieldPath] {
        &self.columns
    }

    /// The row position of `path` (added if new).
    pub fn column(&mut self, path: FieldPath) -> usize {
        match self.columns.iter().position(|known| *known == path) {
            Some(index) => index,
            None => {
                self.columns.push(path);
                self.columns.len() - 1
            }
        }
    }

    /// The field path `parts` names: without a leading table qualifier,
    /// one name a top-level field, several a nested one.
    pub fn path_of(&self, parts: &[Ident]) -> FieldPath {
        let parts = match parts {
            [qualifier, rest @ ..]
                if !rest.is_empty() && self.qualifiers.contains(&qualifier.value) =>
            {
                rest
            }
            all => all,
        };
        match parts {
            [one] => FieldPath::Top(one.value.clone()),
            several => FieldPath::Pointer(
                several
                    .iter()
                    .map(|part| format!("/{}", part.value.replace('~', "~0").replace('/', "~1")))
                    .collect(),
            ),
        }
    }
}

/// What the names of an expression stand for while it is bound: a
/// record's fields ([`Scope`]), or the row a window aggregate emits (its
/// keys, window bounds and aggregates: `crate::plan::window`).
pub(crate) trait Names {
    /// The column `parts` names (`span`: where, for an error).
    fn column(&mut self, parts: &[Ident], span: Span) -> Result<Bound, SqlError>;

    /// The aggregate call `function` (named `name`: `COUNT`, `SUM`, ...);
    /// by default refused, as only a window aggregate's row has them.
    fn aggregate(
        &mut self,
        name: &str,
        _function: &ast::Function,
        span: Span,
    ) -> Result<Bound, SqlError> {
        Err(SqlError::at(
            span,
            format!(
                "the aggregate {name} needs GROUP BY over a window table function (TUMBLE, HOP, SESSION, CUMULATE)"
            ),
        ))
    }
}

impl Names for Scope {
    fn column(&mut self, parts: &[Ident], _span: Span) -> Result<Bound, SqlError> {
        let path = self.path_of(parts);
        Ok((Expr::Column(self.column(path)), SqlType::Unknown))
    }
}

/// Binds expressions within a [`Scope`] (or the names of a window's row, a
/// join's sides).
pub struct Binder<'s> {
    names: &'s mut dyn Names,
    depth: usize,
}

/// A bound expression and its type.
pub(crate) type Bound = (Expr, SqlType);

/// The start of `node` in the SQL text (sqlparser leaves some nodes
/// without one: then `fallback`).
fn at(node: &impl Spanned, fallback: Span) -> Span {
    let span = node.span();
    if span.start.line == 0 { fallback } else { span }
}

impl<'s> Binder<'s> {
    /// A binder adding the columns it reads to `scope`.
    pub fn new(scope: &'s mut Scope) -> Binder<'s> {
        Binder {
            names: scope,
            depth: 0,
        }
    }

    /// A binder resolving names through `names`.
    pub(crate) fn with_names(names: &'s mut dyn Names) -> Binder<'s> {
        Binder { names, depth: 0 }
    }

    /// Binds `expr`: the compiled expression and its type.
    pub fn bind(&mut self, expr: &ast::Expr) -> Result<Bound, SqlError> {
        let span = at(expr, Span::empty());
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(SqlError::at(
                span,
                format!("expression nested more than {MAX_DEPTH} levels deep"),
            ));
        }
        let bound = self.bind_inner(expr, span);
        self.depth -= 1;
        bound
    }

    /// Binds `expr` and checks that its type may be `wanted`.
    fn bind_as(&mut self, expr: &ast::Expr, wanted: SqlType, what: &str) -> Result<Expr, SqlError> {
        let (bound, ty) = self.bind(expr)?;
        if !ty.may_be(wanted) {
            return Err(SqlError::at(
                at(expr, Span::empty()),
                format!("{what} needs {}, found {}", wanted.name(), ty.name()),
            ));
        }
        Ok(bound)
    }

    fn bind_inner(&mut self, expr: &ast::Expr, span: Span) -> Result<Bound, SqlError> {
        use ast::Expr as E;
        let boxed = |bound: Expr| Box::new(bound);
        Ok(match expr {
            E::Identifier(ident) => self.names.column(std::slice::from_ref(ident), span)?,
            E::CompoundIdentifier(parts) => self.names.column(parts, span)?,
            E::Value(value) => literal(&value.value, span)?,
            E::Interval(interval) => {
                let text = match interval.value.as_ref() {
                    E::Value(v) => match &v.value {
                        Value::SingleQuotedString(text) | Value::Number(text, _) => text.clone(),
                        _ => {
                            return Err(SqlError::at(
                                span,
                                "an INTERVAL's value is a quoted number: INTERVAL '10' SECOND",
                            ));
                        }
                    },
                    _ => {
                        return Err(SqlError::at(
                            span,
                            "an INTERVAL's value is a quoted number: INTERVAL '10' SECOND",
                        ));
                    }
                };
                let unit = match (&interval.leading_field, &interval.last_field) {
                    (Some(unit), None) => unit.to_string(),
                    _ => {
                        return Err(SqlError::at(
                            span,
                            "an INTERVAL has one unit: INTERVAL '10' SECOND (DAY, HOUR, MINUTE, SECOND, MILLISECOND)",
                        ));
                    }
                };
                let ms =
                    interval_ms(&text, &unit).map_err(|message| SqlError::at(span, message))?;
                (Expr::Literal(Datum::Interval(ms)), SqlType::Interval)
            }
            E::Nested(inner) => self.bind(inner)?,
            E::UnaryOp { op, expr: inner } => match op {
                UnaryOperator::Not => (
                    Expr::Not(boxed(self.bind_as(inner, SqlType::Boolean, "NOT")?)),
                    SqlType::Boolean,
                ),
                UnaryOperator::Minus => {
                    // `-9223372036854775808` is a literal, not a negation.
                    if let E::Value(v) = inner.as_ref()
                        && let Value::Number(digits, _) = &v.value
                    {
                        return literal(&Value::Number(format!("-{digits}"), false), span);
                    }
                    let (bound, ty) = self.bind(inner)?;
                    if !ty.may_be_numeric() && ty != SqlType::Interval {
                        return Err(SqlError::at(span, format!("cannot negate {}", ty.name())));
                    }
                    (Expr::Negate(boxed(bound)), ty)
                }
                UnaryOperator::Plus => self.bind(inner)?,
                other => return Err(unsupported(span, &format!("the operator `{other}`"))),
            },
            E::BinaryOp { left, op, right } => self.binary(left, op, right, span)?,
            E::IsNull(inner) | E::IsNotNull(inner) => (
                Expr::IsNull {
                    expr: boxed(self.bind(inner)?.0),
                    negated: matches!(expr, E::IsNotNull(_)),
                },
                SqlType::Boolean,
            ),
            E::IsTrue(inner) | E::IsNotTrue(inner) | E::IsFalse(inner) | E::IsNotFalse(inner) => (
                Expr::IsBool {
                    expr: boxed(self.bind_as(inner, SqlType::Boolean, "IS TRUE/FALSE")?),
                    value: matches!(expr, E::IsTrue(_) | E::IsNotTrue(_)),
                    negated: matches!(expr, E::IsNotTrue(_) | E::IsNotFalse(_)),
                },
                SqlType::Boolean,
            ),
            E::IsUnknown(inner) | E::IsNotUnknown(inner) => (
                Expr::IsNull {
                    expr: boxed(self.bind_as(inner, SqlType::Boolean, "IS UNKNOWN")?),
                    negated: matches!(expr, E::IsNotUnknown(_)),
                },
                SqlType::Boolean,
            ),
            E::IsDistinctFrom(left, right) | E::IsNotDistinctFrom(left, right) => {
                let (left, right) = self.comparable(left, right, span)?;
                (
                    Expr::IsDistinct {
                        left: boxed(left),
                        right: boxed(right),
                        negated: matches!(expr, E::IsNotDistinctFrom(..)),
                    },
                    SqlType::Boolean,
                )
            }
            E::In {
                expr: inner,
                target,
                negated,
                ..
            } => {
                let ast::InTarget::List(list) = target else {
                    return Err(unsupported(
                        span,
                        "IN with a subquery (IN takes a list of values)",
                    ));
                };
                let (value, value_type) = self.bind(inner)?;
                let mut items = Vec::with_capacity(list.len());
                for item in list {
                    let (bound, ty) = self.bind(item)?;
                    check_comparable(value_type, ty, at(item, span))?;
                    items.push(bound);
                }
                (
                    Expr::InList {
                        expr: boxed(value),
                        list: items,
                        negated: *negated,
                    },
                    SqlType::Boolean,
                )
            }
            E::Between {
                expr: inner,
                negated,
                low,
                high,
            } => {
                let (value, value_type) = self.bind(inner)?;
                let (low, low_type) = self.bind(low)?;
                let (high, high_type) = self.bind(high)?;
                check_comparable(value_type, low_type, span)?;
                check_comparable(value_type, high_type, span)?;
                (
                    Expr::Between {
                        expr: boxed(value),
                        low: boxed(low),
                        high: boxed(high),
                        negated: *negated,
                    },
                    SqlType::Boolean,
                )
            }
            E::Like {
                negated,
                any,
                expr: inner,
                pattern,
                escape_char,
            } => {
                if *any {
                    return Err(unsupported(span, "LIKE ANY"));
                }
                let value = self.bind_as(inner, SqlType::String, "LIKE")?;
                let escape = match escape_char.as_deref() {
                    None => None,
                    Some(escape) => match string_literal(escape) {
                        Some(text) if text.chars().count() == 1 => text.chars().next(),
                        _ => {
                            return Err(SqlError::at(
                                at(escape, span),
                                "ESCAPE takes one character in quotes: ESCAPE '!'",
                            ));
                        }
                    },
                };
                let pattern = match string_literal(pattern) {
                    Some(text) => LikePattern::compile(text, escape)
                        .map_err(|message| SqlError::at(at(pattern.as_ref(), span), message))?,
                    None => LikePattern::Dynamic {
                        pattern: boxed(self.bind_as(pattern, SqlType::String, "a LIKE pattern")?),
                        escape,
                    },
                };
                (
                    Expr::Like {
                        expr: boxed(value),
                        pattern,
                        negated: *negated,
                    },
                    SqlType::Boolean,
                )
            }
            E::Case {
                operand,
                conditions,
                else_result,
                ..
            } => self.case(operand.as_deref(), conditions, else_result.as_deref(), span)?,
            E::Cast {
                kind,
                expr: inner,
                data_type,
                format,
            } => {
                if format.is_some() {
                    return Err(unsupported(span, "CAST ... FORMAT"));
                }
                let try_cast = match kind {
                    CastKind::Cast | CastKind::DoubleColon => false,
                    CastKind::TryCast | CastKind::SafeCast => true,
                };
                let to = cast_target(data_type, span)?;
                let (bound, _) = self.bind(inner)?;
                (
                    Expr::Cast {
                        expr: boxed(bound),
                        to,
                        try_cast,
                    },
                    to.sql_type(),
                )
            }
            E::Function(function) => self.function(function, span)?,
            E::Substring {
                expr: inner,
                substring_from,
                substring_for,
                ..
            } => {
                let mut args = vec![self.bind_as(inner, SqlType::String, "SUBSTRING")?];
                let Some(from) = substring_from else {
                    return Err(SqlError::at(
                        span,
                        "SUBSTRING needs a start: SUBSTRING(s FROM 2 FOR 3)",
                    ));
                };
                args.push(self.bind_as(from, SqlType::Bigint, "SUBSTRING's start")?);
                if let Some(length) = substring_for {
                    args.push(self.bind_as(length, SqlType::Bigint, "SUBSTRING's length")?);
                }
                (Expr::Call(Function::Substring, args), SqlType::String)
            }
            E::Trim {
                trim_where,
                trim_what,
                expr: inner,
                trim_characters,
            } => {
                if trim_characters.is_some() {
                    return Err(unsupported(
                        span,
                        "TRIM(s, characters); write TRIM(BOTH 'xy' FROM s)",
                    ));
                }
                let side = match trim_where {
                    None | Some(TrimWhereField::Both) => TrimSide::Both,
                    Some(TrimWhereField::Leading) => TrimSide::Leading,
                    Some(TrimWhereField::Trailing) => TrimSide::Trailing,
                };
                let mut args = vec![self.bind_as(inner, SqlType::String, "TRIM")?];
                if let Some(what) = trim_what {
                    args.push(self.bind_as(what, SqlType::String, "TRIM's characters")?);
                }
                (Expr::Call(Function::Trim(side), args), SqlType::String)
            }
            E::Position { expr: needle, r#in } => {
                let args = vec![
                    self.bind_as(needle, SqlType::String, "POSITION")?,
                    self.bind_as(r#in, SqlType::String, "POSITION")?,
                ];
                (Expr::Call(Function::Position, args), SqlType::Bigint)
            }
            E::Subquery(_) | E::Exists { .. } => {
                return Err(unsupported(span, "subqueries in expressions"));
            }
            other => {
                let text = other.to_string();
                let shown: String = text.chars().take(40).collect();
                return Err(unsupported(span, &format!("the expression `{shown}`")));
            }
        })
    }

    /// Binds both sides of a comparison and checks they may compare.
    fn comparable(
        &mut self,
        left: &ast::Expr,
        right: &ast::Expr,
        span: Span,
    ) -> Result<(Expr, Expr), SqlError> {
        let (left, left_type) = self.bind(left)?;
        let (right, right_type) = self.bind(right)?;
        check_comparable(left_type, right_type, span)?;
        Ok((left, right))
    }

    fn binary(
        &mut self,
        left: &ast::Expr,
        op: &BinaryOperator,
        right: &ast::Expr,
        span: Span,
    ) -> Result<Bound, SqlError> {
        let span = at(right, span).union(&at(left, span));
        let compare = |op| Some(op);
        let comparison = match op {
            BinaryOperator::Eq => compare(CompareOp::Eq),
            BinaryOperator::NotEq => compare(CompareOp::NotEq),
            BinaryOperator::Lt => compare(CompareOp::Lt),
            BinaryOperator::LtEq => compare(CompareOp::LtEq),
            BinaryOperator::Gt => compare(CompareOp::Gt),
            BinaryOperator::GtEq => compare(CompareOp::GtEq),
            _ => None,
        };
        if let Some(comparison) = comparison {
            let (left, right) = self.comparable(left, right, span)?;
            return Ok((
                Expr::Compare(comparison, Box::new(left), Box::new(right)),
                SqlType::Boolean,
            ));
        }
        let arithmetic = match op {
            BinaryOperator::Plus => Some(ArithOp::Add),
            BinaryOperator::Minus => Some(ArithOp::Sub),
            BinaryOperator::Multiply => Some(ArithOp::Mul),
            BinaryOperator::Divide => Some(ArithOp::Div),
            BinaryOperator::Modulo => Some(ArithOp::Mod),
            _ => None,
        };
        if let Some(arithmetic) = arithmetic {
            return self.arithmetic(arithmetic, left, right, span);
        }
        match op {
            BinaryOperator::And | BinaryOperator::Or => {
                let name = if *op == BinaryOperator::And {
                    "AND"
                } else {
                    "OR"
                };
                let left = Box::new(self.bind_as(left, SqlType::Boolean, name)?);
                let right = Box::new(self.bind_as(right, SqlType::Boolean, name)?);
                Ok((
                    if *op == BinaryOperator::And {
                        Expr::And(left, right)
                    } else {
                        Expr::Or(left, right)
                    },
                    SqlType::Boolean,
                ))
            }
            BinaryOperator::StringConcat => {
                let args = vec![
                    self.bind_as(left, SqlType::String, "||")?,
                    self.bind_as(right, SqlType::String, "||")?,
                ];
                Ok((Expr::Call(Function::Concat, args), SqlType::String))
            }
            other => Err(unsupported(span, &format!("the operator `{other}`"))),
        }
    }

    fn arithmetic(
        &mut self,
        op: ArithOp,
        left: &ast::Expr,
        right: &ast::Expr,
        span: Span,
    ) -> Result<Bound, SqlError> {
        let (left, left_type) = self.bind(left)?;
        let (right, right_type) = self.bind(right)?;
        use SqlType::*;
        let ty = match (left_type, right_type) {
            (Bigint, Bigint) => Bigint,
            (Double, Bigint | Double | Unknown) | (Bigint | Unknown, Double) => Double,
            (Timestamp, Interval | Unknown) if matches!(op, ArithOp::Add | ArithOp::Sub) => {
                Timestamp
            }
            (Interval | Unknown, Timestamp) if op == ArithOp::Add => Timestamp,
            (Interval, Interval) if matches!(op, ArithOp::Add | ArithOp::Sub) => Interval,
            (Interval, Unknown) | (Unknown, Interval)
                if matches!(op, ArithOp::Add | ArithOp::Sub) =>
            {
                Unknown
            }
            (Unknown, Unknown | Bigint) | (Bigint, Unknown) => Unknown,
            (a, b) => {
                return Err(SqlError::at(
                    span,
                    format!("cannot compute {} {} {}", a.name(), op_symbol(op), b.name()),
                ));
            }
        };
        Ok((Expr::Arithmetic(op, Box::new(left), Box::new(right)), ty))
    }

    fn case(
        &mut self,
        operand: Option<&ast::Expr>,
        conditions: &[ast::CaseWhen],
        else_result: Option<&ast::Expr>,
        span: Span,
    ) -> Result<Bound, SqlError> {
        let operand = match operand {
            Some(operand) => Some(self.bind(operand)?),
            None => None,
        };
        let mut result_type = None;
        let mut unify = |ty: SqlType, at: Span| -> Result<(), SqlError> {
            match result_type {
                None | Some(SqlType::Unknown) => result_type = Some(ty),
                Some(known) if ty == SqlType::Unknown || known == ty => {}
                Some(SqlType::Bigint | SqlType::Double)
                    if matches!(ty, SqlType::Bigint | SqlType::Double) =>
                {
                    result_type = Some(SqlType::Unknown)
                }
                Some(known) => {
                    return Err(SqlError::at(
                        at,
                        format!(
                            "CASE results differ in type: {} and {}",
                            known.name(),
                            ty.name()
                        ),
                    ));
                }
            }
            Ok(())
        };
        let mut whens = Vec::with_capacity(conditions.len());
        for when in conditions {
            let condition = match &operand {
                Some((_, operand_type)) => {
                    let (bound, ty) = self.bind(&when.condition)?;
                    check_comparable(*operand_type, ty, at(&when.condition, span))?;
                    bound
                }
                None => self.bind_as(&when.condition, SqlType::Boolean, "CASE WHEN")?,
            };
            let (result, ty) = self.bind(&when.result)?;
            unify(ty, at(&when.result, span))?;
            whens.push((condition, result));
        }
        let otherwise = match else_result {
            Some(otherwise) => {
                let (bound, ty) = self.bind(otherwise)?;
                unify(ty, at(otherwise, span))?;
                Some(Box::new(bound))
            }
            None => None,
        };
        Ok((
            Expr::Case {
                operand: operand.map(|(bound, _)| Box::new(bound)),
                whens,
                otherwise,
            },
            result_type.unwrap_or(SqlType::Unknown),
        ))
    }
}

/// The positional arguments of a call; anything else refused.
pub(crate) fn plain_args<'a>(
    args: &'a FunctionArguments,
    name: &str,
    span: Span,
) -> Result<Vec<&'a ast::Expr>, SqlError> {
    match args {
        FunctionArguments::None => Ok(Vec::new()),
        FunctionArguments::Subquery(_) => Err(unsupported(span, "a subquery as an argument")),
        FunctionArguments::List(list) => {
            if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
                return Err(unsupported(
                    span,
                    &format!("DISTINCT, ORDER BY or other clauses in {name}(...)"),
                ));
            }
            list.args
                .iter()
                .map(|arg| match arg {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => Ok(expr),
                    _ => Err(unsupported(
                        span,
                        &format!("named or `*` arguments to {name}"),
                    )),
                })
                .collect()
        }
    }
}

/// The text of a string literal.
pub(crate) fn string_literal(expr: &ast::Expr) -> Option<&str> {
    match expr {
        ast::Expr::Value(value) => match &value.value {
            Value::SingleQuotedString(text) => Some(text),
            _ => None,
        },
        _ => None,
    }
}

fn literal(value: &Value, span: Span) -> Result<Bound, SqlError> {
    Ok(match value {
        Value::Number(text, _) => match text.parse::<i64>() {
            Ok(n) => (Expr::Literal(Datum::Int(n)), SqlType::Bigint),
            Err(_) => match text.parse::<f64>() {
                Ok(f) if f.is_finite() => (Expr::Literal(Datum::Double(f)), SqlType::Double),
                _ => {
                    return Err(SqlError::at(
                        span,
                        format!("the number {text} is out of range"),
                    ));
                }
            },
        },
        Value::SingleQuotedString(text) => (
            Expr::Literal(Datum::Str(Cow::Owned(text.clone()))),
            SqlType::String,
        ),
        Value::Boolean(b) => (Expr::Literal(Datum::Bool(*b)), SqlType::Boolean),
        Value::Null => (Expr::Literal(Datum::Null), SqlType::Unknown),
        Value::DoubleQuotedString(_) => {
            return Err(SqlError::at(
                span,
                "strings are in single quotes ('text'), identifiers in backticks (`name`)",
            ));
        }
        other => return Err(unsupported(span, &format!("the literal {other}"))),
    })
}

fn cast_target(data_type: &DataType, span: Span) -> Result<CastTarget, SqlError> {
    let integer = |name, min: i64, max: i64| CastTarget::Integer { name, min, max };
    Ok(match data_type {
        DataType::BigInt(_) => integer("BIGINT", i64::MIN, i64::MAX),
        DataType::Int(_) | DataType::Integer(_) => {
            integer("INT", i64::from(i32::MIN), i64::from(i32::MAX))
        }
        DataType::SmallInt(_) => integer("SMALLINT", i64::from(i16::MIN), i64::from(i16::MAX)),
        DataType::TinyInt(_) => integer("TINYINT", i64::from(i8::MIN), i64::from(i8::MAX)),
        DataType::Double(_) | DataType::DoublePrecision | DataType::Float(_) | DataType::Real => {
            CastTarget::Double
        }
        DataType::String(None) | DataType::Varchar(None) | DataType::Text => CastTarget::String,
        DataType::Boolean | DataType::Bool => CastTarget::Boolean,
        DataType::Timestamp(None | Some(3), _) => CastTarget::Timestamp,
        DataType::Custom(name, modifiers)
            if name.to_string().eq_ignore_ascii_case("TIMESTAMP_LTZ")
                && (modifiers.is_empty()
                    || modifiers.len() == 1 && modifiers[0].to_string() == "3") =>
        {
            CastTarget::Timestamp
        }
        other => {
            return Err(SqlError::at(
                span,
                format!(
                    "CAST to {other} is not supported (BIGINT, INT, SMALLINT, TINYINT, DOUBLE, FLOAT, STRING, VARCHAR, BOOLEAN, TIMESTAMP(3), TIMESTAMP_LTZ(3) are)"
                ),
            ));
        }
    })
}

fn check_comparable(left: SqlType, right: SqlType, span: Span) -> Result<(), SqlError> {
    let numeric = |ty: SqlType| matches!(ty, SqlType::Bigint | SqlType::Double);
    if left.may_be(right) || (numeric(left) && numeric(right)) {
        Ok(())
    } else {
        Err(SqlError::at(
            span,
            format!("cannot compare {} with {}", left.name(), right.name()),
        ))
    }
}

fn op_symbol(op: ArithOp) -> &'static str {
    match op {
        ArithOp::Add => "+",
        ArithOp::Sub => "-",
        ArithOp::Mul => "*",
        ArithOp::Div => "/",
        ArithOp::Mod => "%",
    }
}

/// A refusal of `what`, which the subset does not cover.
pub(crate) fn unsupported(span: Span, what: &str) -> SqlError {
    SqlError::at(
        span,
        format!("{what} is not supported (see docs/sql.md for the supported subset)"),
    )
}
