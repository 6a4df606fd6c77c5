//! Binding function calls: built-in scalar functions resolved by name,
//! their arguments checked, literal patterns compiled once.

use super::{Binder, Bound, at, plain_args, string_literal, unsupported};
use crate::datum::SqlType;
use crate::error::SqlError;
use crate::expr::functions::{TrimSide, regex};
use crate::expr::{ArithOp, Expr, Function};
use crate::time::DatePattern;
use sqlparser::ast;
use sqlparser::tokenizer::Span;

/// The scalar functions a query may call (for messages).
pub const SUPPORTED_FUNCTIONS: &str = "UPPER, LOWER, CHAR_LENGTH, CONCAT, SUBSTRING, TRIM, LTRIM, RTRIM, REGEXP_LIKE, REPLACE, POSITION, ABS, MOD, COALESCE, CAST, TRY_CAST, TO_TIMESTAMP_LTZ, DATE_FORMAT";

impl Binder<'_> {
    pub(super) fn function(
        &mut self,
        function: &ast::Function,
        span: Span,
    ) -> Result<Bound, SqlError> {
        let name = function.name.to_string().to_ascii_uppercase();
        if function.over.is_some() {
            return Err(unsupported(
                span,
                &format!(
                    "{name}(...) OVER (window functions, except the ROW_NUMBER de-duplication pattern)"
                ),
            ));
        }
        if function.filter.is_some()
            || !function.within_group.is_empty()
            || function.null_treatment.is_some()
        {
            return Err(unsupported(
                span,
                &format!("{name}(...) with FILTER, WITHIN GROUP or NULLS"),
            ));
        }
        if crate::aggregate::AggregateFunction::is_aggregate(&name) {
            return self.names.aggregate(&name, function, span);
        }
        let args = plain_args(&function.args, &name, span)?;
        let arity = |range: std::ops::RangeInclusive<usize>| -> Result<(), SqlError> {
            if range.contains(&args.len()) {
                Ok(())
            } else {
                let expected = if range.start() == range.end() {
                    format!("{}", range.start())
                } else if *range.end() == usize::MAX {
                    format!("at least {}", range.start())
                } else {
                    format!("{} to {}", range.start(), range.end())
                };
                Err(SqlError::at(
                    span,
                    format!("{name} takes {expected} argument(s), found {}", args.len()),
                ))
            }
        };
        let strings = |binder: &mut Self, args: &[&ast::Expr]| -> Result<Vec<Expr>, SqlError> {
            args.iter()
                .map(|arg| binder.bind_as(arg, SqlType::String, &name))
                .collect()
        };
        let (function, bound) = match name.as_str() {
            "UPPER" | "LOWER" => {
                arity(1..=1)?;
                let f = if name == "UPPER" {
                    Function::Upper
                } else {
                    Function::Lower
                };
                (f, strings(self, &args)?)
            }
            "CHAR_LENGTH" | "CHARACTER_LENGTH" => {
                arity(1..=1)?;
                (Function::CharLength, strings(self, &args)?)
            }
            "CONCAT" => {
                arity(1..=usize::MAX)?;
                (Function::Concat, strings(self, &args)?)
            }
            "LTRIM" | "RTRIM" => {
                arity(1..=1)?;
                let side = if name == "LTRIM" {
                    TrimSide::Leading
                } else {
                    TrimSide::Trailing
                };
                (Function::Trim(side), strings(self, &args)?)
            }
            "REPLACE" => {
                arity(3..=3)?;
                (Function::Replace, strings(self, &args)?)
            }
            "REGEXP_LIKE" | "REGEXP" => {
                arity(2..=2)?;
                let compiled = match string_literal(args[1]) {
                    Some(pattern) => Some(
                        regex(pattern)
                            .map_err(|message| SqlError::at(at(args[1], span), message))?,
                    ),
                    None => None,
                };
                (Function::RegexpLike(compiled), strings(self, &args)?)
            }
            "ABS" => {
                arity(1..=1)?;
                let (bound, ty) = self.bind(args[0])?;
                if !ty.may_be_numeric() {
                    return Err(SqlError::at(
                        span,
                        format!("ABS needs a number, found {}", ty.name()),
                    ));
                }
                return Ok((Expr::Call(Function::Abs, vec![bound]), ty));
            }
            "MOD" => {
                arity(2..=2)?;
                return self.arithmetic(ArithOp::Mod, args[0], args[1], span);
            }
            "COALESCE" => {
                arity(1..=usize::MAX)?;
                let mut items = Vec::with_capacity(args.len());
                let mut result_type = SqlType::Unknown;
                for arg in &args {
                    let (bound, ty) = self.bind(arg)?;
                    if result_type == SqlType::Unknown {
                        result_type = ty;
                    } else if ty != SqlType::Unknown && ty != result_type {
                        return Err(SqlError::at(
                            at(*arg, span),
                            format!(
                                "COALESCE's arguments differ in type: {} and {}",
                                result_type.name(),
                                ty.name()
                            ),
                        ));
                    }
                    items.push(bound);
                }
                return Ok((Expr::Coalesce(items), result_type));
            }
            "TO_TIMESTAMP_LTZ" => {
                arity(1..=2)?;
                let bound = args
                    .iter()
                    .map(|arg| self.bind_as(arg, SqlType::Bigint, &name))
                    .collect::<Result<_, _>>()?;
                (Function::ToTimestampLtz, bound)
            }
            "DATE_FORMAT" => {
                arity(2..=2)?;
                let compiled = match string_literal(args[1]) {
                    Some(pattern) => Some(
                        DatePattern::parse(pattern)
                            .map_err(|message| SqlError::at(at(args[1], span), message))?,
                    ),
                    None => None,
                };
                let (value, ty) = self.bind(args[0])?;
                if !matches!(ty, SqlType::Timestamp | SqlType::String | SqlType::Unknown) {
                    return Err(SqlError::at(
                        span,
                        format!(
                            "DATE_FORMAT needs a TIMESTAMP or STRING, found {}",
                            ty.name()
                        ),
                    ));
                }
                let pattern = self.bind_as(args[1], SqlType::String, &name)?;
                (Function::DateFormat(compiled), vec![value, pattern])
            }
            _ => {
                return Err(SqlError::at(
                    span,
                    format!("unknown function `{name}` (supported: {SUPPORTED_FUNCTIONS})"),
                ));
            }
        };
        let types: Vec<SqlType> = vec![SqlType::Unknown; bound.len()];
        let ty = function.result_type(&types);
        Ok((Expr::Call(function, bound), ty))
    }
}
