//! A window table function's call, checked: `TUMBLE(TABLE t,
//! DESCRIPTOR(ts), size)`, `HOP`, `CUMULATE` and `SESSION`, with
//! positional or named arguments.

use super::super::{Catalog, TableView, refuse};
use super::WindowFunction;
use crate::datum::Datum;
use crate::dialect::TABLE_ARGUMENT;
use crate::error::SqlError;
use crate::expr::bind::plain_args;
use crate::expr::{Binder, Expr, Scope};
use sqlparser::ast::{self, FunctionArg, FunctionArgExpr, FunctionArguments, Spanned};
use sqlparser::tokenizer::Span;

/// `TUMBLE(TABLE t, DESCRIPTOR(ts), size)` and its kin, checked.
pub(in crate::plan) struct WindowCall {
    pub(in crate::plan) window: WindowFunction,
    pub(in crate::plan) table: String,
    /// The table's view, if it is one (its condition joins `WHERE`).
    pub(in crate::plan) view: Option<TableView>,
    pub(in crate::plan) time_column: String,
    /// `SESSION`'s `PARTITION BY` keys.
    pub(super) partition_by: Vec<ast::Expr>,
}

impl WindowCall {
    pub(in crate::plan) fn parse(
        function: &ast::Expr,
        catalog: &Catalog,
    ) -> Result<WindowCall, SqlError> {
        let span = function.span();
        let ast::Expr::Function(call) = function else {
            return refuse(function, "this table function");
        };
        let name = call.name.to_string().to_ascii_uppercase();
        let parameters: &[&str] = match name.as_str() {
            "TUMBLE" => &["DATA", "TIMECOL", "SIZE", "OFFSET"],
            "HOP" => &["DATA", "TIMECOL", "SLIDE", "SIZE", "OFFSET"],
            "CUMULATE" => &["DATA", "TIMECOL", "STEP", "SIZE", "OFFSET"],
            "SESSION" => &["DATA", "TIMECOL", "GAP"],
            _ => {
                return Err(SqlError::at(
                    span,
                    format!(
                        "`{name}` is not a window table function: TUMBLE, HOP, SESSION or CUMULATE"
                    ),
                ));
            }
        };
        let args = window_args(&call.args, parameters, &name, span)?;
        let arg = |parameter: &str| {
            args.iter()
                .find(|(name, _)| *name == parameter)
                .map(|(_, expr)| *expr)
        };
        let required = |parameter: &str| {
            arg(parameter).ok_or_else(|| {
                SqlError::at(
                    span,
                    format!(
                        "{name} needs its {parameter} argument: {name}({})",
                        parameters
                            .iter()
                            .filter(|p| **p != "OFFSET")
                            .copied()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })
        };
        if let Some(offset) = arg("OFFSET") {
            return refuse(offset, "a window OFFSET");
        }
        let TableArgument {
            table,
            view,
            partition_by,
        } = table_argument(required("DATA")?, catalog)?;
        if !partition_by.is_empty() && name != "SESSION" {
            return Err(SqlError::at(
                required("DATA")?.span(),
                format!(
                    "PARTITION BY is for SESSION windows; {name} windows are the same for every key"
                ),
            ));
        }
        let time_column = descriptor(required("TIMECOL")?, catalog)?;
        let window = match name.as_str() {
            "TUMBLE" => WindowFunction::Tumble {
                size: interval(required("SIZE")?)?,
            },
            "HOP" => {
                let slide = interval(required("SLIDE")?)?;
                let size = interval(required("SIZE")?)?;
                multiple_of(size, slide, "HOP", "SLIDE", span)?;
                WindowFunction::Hop { slide, size }
            }
            "CUMULATE" => {
                let step = interval(required("STEP")?)?;
                let size = interval(required("SIZE")?)?;
                multiple_of(size, step, "CUMULATE", "STEP", span)?;
                WindowFunction::Cumulate { step, size }
            }
            _ => WindowFunction::Session {
                gap: interval(required("GAP")?)?,
            },
        };
        Ok(WindowCall {
            window,
            table,
            view,
            time_column,
            partition_by,
        })
    }
}

/// The arguments of a window function by parameter name: positional ones
/// in `parameters`' order, named ones (`SIZE => INTERVAL ..`) by name.
fn window_args<'a>(
    args: &'a FunctionArguments,
    parameters: &[&'static str],
    name: &str,
    span: Span,
) -> Result<Vec<(&'static str, &'a ast::Expr)>, SqlError> {
    let FunctionArguments::List(list) = args else {
        return Err(SqlError::at(span, format!("{name} takes arguments")));
    };
    let mut found: Vec<(&'static str, &ast::Expr)> = Vec::new();
    for (position, arg) in list.args.iter().enumerate() {
        let (parameter, expr) = match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => match parameters.get(position) {
                Some(parameter) => (*parameter, expr),
                None => {
                    return Err(SqlError::at(
                        expr.span(),
                        format!("{name} takes at most {} arguments", parameters.len()),
                    ));
                }
            },
            FunctionArg::Named {
                name: given,
                arg: FunctionArgExpr::Expr(expr),
                ..
            }
            | FunctionArg::ExprNamed {
                name: ast::Expr::Identifier(given),
                arg: FunctionArgExpr::Expr(expr),
                ..
            } => {
                let wanted = given.value.to_ascii_uppercase();
                match parameters.iter().find(|p| **p == wanted) {
                    Some(parameter) => (*parameter, expr),
                    None => {
                        return Err(SqlError::at(
                            given.span,
                            format!(
                                "{name} has no parameter `{}`; it takes {}",
                                given.value,
                                parameters.join(", ")
                            ),
                        ));
                    }
                }
            }
            other => return refuse(other, &format!("this kind of argument to {name}")),
        };
        if found.iter().any(|(known, _)| *known == parameter) {
            return Err(SqlError::at(
                expr.span(),
                format!("{name}'s {parameter} is given twice"),
            ));
        }
        found.push((parameter, expr));
    }
    Ok(found)
}

/// A window function's table argument.
struct TableArgument {
    table: String,
    view: Option<TableView>,
    partition_by: Vec<ast::Expr>,
}

/// `TABLE name [PARTITION BY keys]` (as the dialect parses it): the table,
/// checked against the catalog, and the keys.
fn table_argument(expr: &ast::Expr, catalog: &Catalog) -> Result<TableArgument, SqlError> {
    let wrong = || {
        SqlError::at(
            expr.span(),
            "a window function's first argument is the table: TABLE input",
        )
    };
    let ast::Expr::Function(function) = expr else {
        return Err(wrong());
    };
    if function.name.to_string() != TABLE_ARGUMENT {
        return Err(wrong());
    }
    let args = plain_args(&function.args, TABLE_ARGUMENT, expr.span())?;
    let Some((ast::Expr::Identifier(table), keys)) = args.split_first() else {
        return Err(wrong());
    };
    Ok(TableArgument {
        view: catalog.table(&table.value, table.span)?.cloned(),
        table: table.value.clone(),
        partition_by: keys.iter().map(|key| (*key).clone()).collect(),
    })
}

/// `DESCRIPTOR(column)`: the event time's column, which must be one the
/// catalog knows as the event time.
fn descriptor(expr: &ast::Expr, catalog: &Catalog) -> Result<String, SqlError> {
    let column = match expr {
        ast::Expr::Function(function)
            if function.name.to_string().eq_ignore_ascii_case("DESCRIPTOR") =>
        {
            match plain_args(&function.args, "DESCRIPTOR", expr.span())?.as_slice() {
                [ast::Expr::Identifier(column)] => column,
                _ => {
                    return Err(SqlError::at(
                        expr.span(),
                        "DESCRIPTOR names one column: DESCRIPTOR(ts)",
                    ));
                }
            }
        }
        _ => {
            return Err(SqlError::at(
                expr.span(),
                "the time argument is DESCRIPTOR(column), the column of the event time",
            ));
        }
    };
    if catalog
        .time_columns
        .iter()
        .any(|known| known.eq_ignore_ascii_case(&column.value))
    {
        return Ok(column.value.clone());
    }
    Err(SqlError::at(
        column.span,
        format!(
            "`{}` is not the event time: windows use the event time the pipeline reads (its watermarks follow it), which this query may name {}",
            column.value,
            catalog
                .time_columns
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    ))
}

/// A positive `INTERVAL` literal, in ms.
pub(in crate::plan) fn interval(expr: &ast::Expr) -> Result<i64, SqlError> {
    let mut scope = Scope::default();
    let bound = Binder::new(&mut scope).bind(expr);
    match bound {
        Ok((Expr::Literal(Datum::Interval(ms)), _)) if ms > 0 => Ok(ms),
        Ok(_) => Err(SqlError::at(
            expr.span(),
            "a window's size is a positive INTERVAL: INTERVAL '10' SECOND",
        )),
        Err(error) => Err(error),
    }
}

fn multiple_of(size: i64, part: i64, name: &str, what: &str, span: Span) -> Result<(), SqlError> {
    if size % part == 0 {
        return Ok(());
    }
    Err(SqlError::at(
        span,
        format!("{name}'s SIZE must be a whole multiple of its {what} (as in Flink)"),
    ))
}
