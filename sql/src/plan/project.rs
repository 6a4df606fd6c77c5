//! Projections: `SELECT columns FROM input [WHERE condition]`, one output
//! record per input record that passes.

use super::{bind_condition, default_name, output_column, refuse, write_datum};
use crate::error::SqlError;
use crate::expr::{Binder, EvalError, Expr, Names, Row, Scope};
use sluice_json::FieldPath;
use sqlparser::ast::{self, SelectItem, Spanned};
use sqlparser::tokenizer::Span;

/// `SELECT columns FROM input [WHERE condition]`.
#[derive(Debug, Clone)]
pub struct ProjectPlan {
    /// The fields each record's expressions read, in row order.
    pub columns: Vec<FieldPath>,
    /// The `WHERE` condition.
    pub filter: Option<Expr>,
    /// What each passing record becomes.
    pub output: Output,
}

/// The output of a projection.
#[derive(Debug, Clone)]
pub enum Output {
    /// `SELECT *`: the record as it is.
    Whole,
    /// Named columns, as a JSON object in this order.
    Columns(Vec<OutputColumn>),
}

/// One output column.
#[derive(Debug, Clone)]
pub struct OutputColumn {
    /// The column's name (its key in the output object).
    pub name: String,
    /// `"name":`, encoded once.
    pub(super) key_json: Vec<u8>,
    /// Its value.
    pub expr: Expr,
    /// For a plain top-level field: its column (row position), whose JSON
    /// text is copied as it is when its span is known.
    pub copied: Option<usize>,
}

/// Compiles a projection whose `FROM` is the input table (or its part
/// `view`), which `qualifiers` (its name and alias) may prefix columns
/// with.
pub(super) fn compile_project(
    select: &ast::Select,
    qualifiers: Vec<String>,
    view: Option<&super::TableView>,
) -> Result<ProjectPlan, SqlError> {
    match &select.group_by {
        ast::GroupByExpr::Expressions(keys, modifiers)
            if keys.is_empty() && modifiers.is_empty() => {}
        _ => {
            return Err(SqlError::at(
                group_by_span(select).unwrap_or(select.span()),
                "GROUP BY needs a window table function: FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) (also HOP, SESSION, CUMULATE); a GROUP BY without a window is not supported",
            ));
        }
    }
    if let Some(having) = &select.having {
        return refuse(having, "HAVING without GROUP BY over a window");
    }
    let mut scope = Scope::new(qualifiers);
    let filter = bind_condition(&mut scope, select.selection.as_ref(), "WHERE")?;
    let filter = super::with_view_condition(view, filter, &mut scope);
    let mut output = compile_columns(select, &mut scope, true)?;
    // A plain top-level column is copied as the record's JSON text.
    if let Output::Columns(columns) = &mut output {
        for column in columns {
            if let Expr::Column(index) = column.expr
                && let Some(FieldPath::Top(_)) = scope.columns().get(index)
            {
                column.copied = Some(index);
            }
        }
    }
    Ok(ProjectPlan {
        columns: scope.columns().to_vec(),
        filter,
        output,
    })
}

/// The `SELECT` list of a query whose names are `names`: `*` (where
/// `star` allows it: the record unchanged) or named columns.
pub(super) fn compile_columns(
    select: &ast::Select,
    names: &mut dyn Names,
    star: bool,
) -> Result<Output, SqlError> {
    let mut columns = Vec::new();
    for (position, item) in select.projection.iter().enumerate() {
        let (expr, name) = match item {
            SelectItem::Wildcard(options) | SelectItem::QualifiedWildcard(_, options) => {
                if !star {
                    return refuse(item, "`*` here; list the columns");
                }
                if select.projection.len() > 1 {
                    return refuse(item, "`*` beside other columns; list the columns instead");
                }
                if options.opt_exclude.is_some()
                    || options.opt_except.is_some()
                    || options.opt_replace.is_some()
                    || options.opt_rename.is_some()
                    || options.opt_ilike.is_some()
                {
                    return refuse(item, "`*` with EXCLUDE, EXCEPT, REPLACE, RENAME or ILIKE");
                }
                return Ok(Output::Whole);
            }
            SelectItem::UnnamedExpr(expr) => (expr, default_name(expr, position)),
            SelectItem::ExprWithAlias { expr, alias } => (expr, alias.value.clone()),
            SelectItem::ExprWithAliases { .. } => {
                return refuse(item, "several aliases for one column");
            }
        };
        let (bound, _) = Binder::with_names(names).bind(expr)?;
        let column = output_column(&columns, name, bound, None, item)?;
        columns.push(column);
    }
    Ok(Output::Columns(columns))
}

fn group_by_span(select: &ast::Select) -> Option<Span> {
    match &select.group_by {
        ast::GroupByExpr::Expressions(keys, _) => keys.first().map(Spanned::span),
        ast::GroupByExpr::All(_) => None,
    }
}

impl ProjectPlan {
    /// What the query became, for `sluice sql explain` and the dashboard:
    /// the fields read, the condition, the columns.
    pub fn explain(&self) -> String {
        let reads = if self.columns.is_empty() {
            "nothing".to_string()
        } else {
            let all: Vec<_> = (0..self.columns.len())
                .map(|i| Expr::Column(i).to_sql(&self.columns))
                .collect();
            all.join(", ")
        };
        let filter = match &self.filter {
            Some(filter) => filter.to_sql(&self.columns),
            None => "(every record)".to_string(),
        };
        let columns = match &self.output {
            Output::Whole => "* (the record unchanged)".to_string(),
            Output::Columns(columns) => columns
                .iter()
                .map(|column| {
                    let value = column.expr.to_sql(&self.columns);
                    match column.copied {
                        Some(_) => format!("{} = {value} (copied)", column.name),
                        None => format!("{} = {value}", column.name),
                    }
                })
                .collect::<Vec<_>>()
                .join(", "),
        };
        format!("reads:   {reads}\nwhere:   {filter}\ncolumns: {columns}")
    }

    /// Whether `row` passes the `WHERE` condition.
    pub fn passes(&self, row: Row<'_>) -> Result<bool, EvalError> {
        match &self.filter {
            Some(filter) => filter.holds(row),
            None => Ok(true),
        }
    }

    /// The names of the columns when every one is a top-level field: a
    /// record's row can then be read from where these lie in its value
    /// ([`crate::Datum::of_json_text`] of each span), and plain columns copied.
    pub fn top_level_names(&self) -> Option<Vec<String>> {
        self.columns
            .iter()
            .map(|path| match path {
                FieldPath::Top(name) => Some(name.clone()),
                FieldPath::Pointer(_) => None,
            })
            .collect()
    }

    /// Writes the output value of a record that passed into `out`: `value`
    /// is the record's JSON, `spans` where its columns lie in it, one per
    /// column (`None`: not known, every column is evaluated).
    pub fn write(
        &self,
        row: Row<'_>,
        value: &[u8],
        spans: Option<&[Option<(usize, usize)>]>,
        out: &mut Vec<u8>,
    ) -> Result<(), EvalError> {
        let columns = match &self.output {
            Output::Whole => {
                out.extend_from_slice(value);
                return Ok(());
            }
            Output::Columns(columns) => columns,
        };
        out.push(b'{');
        for (index, column) in columns.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&column.key_json);
            // `Some(span)` for a copied column (`None` inside: the field is
            // missing); `None` to evaluate the column.
            let copied = match (column.copied, spans) {
                (Some(at), Some(spans)) => Some(spans.get(at).copied().flatten()),
                _ => None,
            };
            match copied {
                Some(Some((start, end))) if end <= value.len() && start <= end => {
                    out.extend_from_slice(&value[start..end])
                }
                Some(_) => out.extend_from_slice(b"null"),
                None => {
                    let datum = column.expr.eval(row)?;
                    write_datum(&datum, &column.name, out)?;
                }
            }
        }
        out.push(b'}');
        Ok(())
    }
}
