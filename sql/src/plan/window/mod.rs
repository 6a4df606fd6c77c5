//! Window aggregations: `SELECT keys, window_start, window_end,
//! aggregates FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), size)) [WHERE
//! ...] GROUP BY window_start, window_end, keys [HAVING ...]`, and the same
//! over `HOP`, `SESSION` and `CUMULATE`: one output record per window and
//! group, as the window fires.
//!
//! The plan is what the host's window operator needs: the window (sizes in
//! ms), the fields each record's keys, condition and aggregate arguments
//! read (one row per record), the aggregate calls, and how a window's row —
//! its keys, `window_start`, `window_end`, `window_time` (the window's
//! last millisecond) and the aggregates' results — becomes the output
//! record (`SELECT` and `HAVING` are evaluated over that row).

use super::{Catalog, OutputColumn};
use super::{bind_condition, default_name, output_column, refuse, write_datum};
use crate::aggregate::{Accumulator, AggregateCall, AggregateFunction, SUPPORTED_AGGREGATES};
use crate::datum::{Datum, SqlType};
use crate::error::SqlError;
use crate::expr::bind::unsupported;
use crate::expr::{Binder, Bound, EvalError, Expr, Names, Row, Scope, path_sql};
use crate::rank::TopRows;

mod call;

pub(super) use call::{WindowCall, interval};
use sluice_json::FieldPath;
use smallvec::SmallVec;
use sqlparser::ast::{
    self, DuplicateTreatment, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, SelectItem,
    Spanned,
};
use sqlparser::tokenizer::Span;

/// A window table function, its sizes in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowFunction {
    /// `TUMBLE(.., size)`: fixed windows, aligned to the epoch.
    Tumble {
        /// Window length.
        size: i64,
    },
    /// `HOP(.., slide, size)`: windows of `size` starting every `slide`.
    Hop {
        /// Distance between window starts.
        slide: i64,
        /// Window length (a multiple of `slide`, as Flink requires).
        size: i64,
    },
    /// `SESSION(TABLE t PARTITION BY k, .., gap)`: per key, activity
    /// separated by at least `gap`.
    Session {
        /// Inactivity that closes a session.
        gap: i64,
    },
    /// `CUMULATE(.., step, size)`: within each window of `size`, one window
    /// from its start to every `step` (so each fires a running total).
    Cumulate {
        /// Distance between window ends.
        step: i64,
        /// Length of the largest window (a multiple of `step`).
        size: i64,
    },
}

/// The window columns of a window table function's rows, in the order
/// they follow the keys in a window's row.
const WINDOW_COLUMNS: [&str; 3] = ["window_start", "window_end", "window_time"];

/// A compiled window aggregation (see the module docs).
#[derive(Debug, Clone)]
pub struct WindowPlan {
    /// The window.
    pub window: WindowFunction,
    /// The column `DESCRIPTOR` named (the event time).
    pub time_column: String,
    /// The fields each record's keys, condition and arguments read, in
    /// row order; the keys first.
    pub columns: Vec<FieldPath>,
    /// The group keys (other than the window): row positions, the first
    /// ones of `columns`.
    pub keys: Vec<usize>,
    /// The `WHERE` condition, evaluated per record before it is added.
    pub filter: Option<Expr>,
    /// The aggregate calls; their arguments are over a record's row.
    pub aggregates: Vec<AggregateCall>,
    /// For a window Top-N (`ROW_NUMBER() OVER (PARTITION BY window_start,
    /// window_end ...)`), in place of aggregates: the rows each window
    /// keeps; each is one output record, its row the keys, the window
    /// columns, its rank and its kept values.
    pub ranking: Option<TopRows>,
    /// `HAVING`, over a window's row.
    pub(super) having: Option<Expr>,
    /// The output columns, over a window's row.
    pub(super) output: Vec<OutputColumn>,
    /// How each aggregate call was written (for a Top-N: the rank and the
    /// kept values), for `explain`.
    pub(super) aggregate_text: Vec<String>,
}

/// Compiles a query whose `FROM` is `TABLE(function)` (`alias`: its
/// alias, which may prefix columns).
pub(super) fn compile_window(
    select: &ast::Select,
    function: &ast::Expr,
    alias: Option<&ast::TableAlias>,
    catalog: &Catalog,
) -> Result<WindowPlan, SqlError> {
    let call = WindowCall::parse(function, catalog)?;
    let mut qualifiers = vec![call.table.clone()];
    if let Some(alias) = alias {
        qualifiers.push(alias.name.value.clone());
    }
    let mut scope = Scope::new(qualifiers);
    let group = GroupBy::parse(select, &scope)?;
    check_session_keys(&call, &group, &scope, select)?;
    let keys: Vec<usize> = group
        .keys
        .iter()
        .map(|path| scope.column(path.clone()))
        .collect();
    let filter = bind_condition(
        &mut RecordNames(&mut scope, true),
        select.selection.as_ref(),
        "WHERE",
    )?;
    let filter = super::with_view_condition(call.view.as_ref(), filter, &mut scope);
    let mut names = GroupedNames {
        input: &mut scope,
        keys: &group.keys,
        aggregates: Vec::new(),
        aggregate_text: Vec::new(),
    };
    let mut output = Vec::new();
    for (position, item) in select.projection.iter().enumerate() {
        let (expr, name) = match item {
            SelectItem::UnnamedExpr(expr) => (expr, default_name(expr, position)),
            SelectItem::ExprWithAlias { expr, alias } => (expr, alias.value.clone()),
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                return refuse(
                    item,
                    "`*` in a window aggregation; list the keys, window columns and aggregates",
                );
            }
            SelectItem::ExprWithAliases { .. } => {
                return refuse(item, "several aliases for one column");
            }
        };
        let (bound, _) = Binder::with_names(&mut names).bind(expr)?;
        let column = output_column(&output, name, bound, None, item)?;
        output.push(column);
    }
    let having = bind_condition(&mut names, select.having.as_ref(), "HAVING")?;
    let GroupedNames {
        aggregates,
        aggregate_text,
        ..
    } = names;
    Ok(WindowPlan {
        window: call.window,
        time_column: call.time_column,
        columns: scope.columns().to_vec(),
        keys,
        filter,
        aggregates,
        ranking: None,
        having,
        output,
        aggregate_text,
    })
}

/// The `GROUP BY` of a window aggregation: the keys, and the window
/// columns (`window_start` and `window_end` must be there).
struct GroupBy {
    keys: Vec<FieldPath>,
}

impl GroupBy {
    fn parse(select: &ast::Select, scope: &Scope) -> Result<GroupBy, SqlError> {
        let needed =
            "a window aggregation groups by the window: GROUP BY window_start, window_end[, keys]";
        let exprs = match &select.group_by {
            ast::GroupByExpr::Expressions(exprs, modifiers) => {
                if !modifiers.is_empty() {
                    return refuse(select, "GROUP BY with ROLLUP, CUBE or GROUPING SETS");
                }
                exprs
            }
            ast::GroupByExpr::All(_) => return refuse(select, "GROUP BY ALL"),
        };
        if exprs.is_empty() {
            return Err(SqlError::at(
                select.span(),
                "a window table function without GROUP BY (each row with its window) is not supported; aggregate per window: GROUP BY window_start, window_end[, keys]",
            ));
        }
        let mut keys: Vec<FieldPath> = Vec::new();
        let mut window = [false; 3];
        for expr in exprs {
            let parts = match expr {
                ast::Expr::Identifier(ident) => std::slice::from_ref(ident),
                ast::Expr::CompoundIdentifier(parts) => parts.as_slice(),
                other => {
                    return Err(unsupported(
                        other.span(),
                        "grouping by an expression; GROUP BY takes columns (compute the key in an earlier SQL operator)",
                    ));
                }
            };
            let path = scope.path_of(parts);
            match window_column(&path) {
                Some(index) => window[index] = true,
                None if !keys.contains(&path) => keys.push(path),
                None => {}
            }
        }
        if !(window[0] && window[1]) {
            return Err(SqlError::at(
                exprs.first().map_or(select.span(), Spanned::span),
                needed,
            ));
        }
        Ok(GroupBy { keys })
    }
}

/// Which of [`WINDOW_COLUMNS`] `path` names.
pub(super) fn window_column(path: &FieldPath) -> Option<usize> {
    match path {
        FieldPath::Top(name) => WINDOW_COLUMNS
            .iter()
            .position(|column| column.eq_ignore_ascii_case(name)),
        FieldPath::Pointer(_) => None,
    }
}

/// A session is per key: its `PARTITION BY` keys must be the `GROUP BY`
/// keys (sessions over every record, then grouped, are not supported).
fn check_session_keys(
    call: &WindowCall,
    group: &GroupBy,
    scope: &Scope,
    select: &ast::Select,
) -> Result<(), SqlError> {
    if !matches!(call.window, WindowFunction::Session { .. }) {
        return Ok(());
    }
    let mut partition = Vec::new();
    for key in &call.partition_by {
        let parts = match key {
            ast::Expr::Identifier(ident) => std::slice::from_ref(ident),
            ast::Expr::CompoundIdentifier(parts) => parts.as_slice(),
            other => return refuse(other, "partitioning a session by an expression"),
        };
        partition.push(scope.path_of(parts));
    }
    let same =
        partition.len() == group.keys.len() && partition.iter().all(|key| group.keys.contains(key));
    if same {
        return Ok(());
    }
    Err(SqlError::at(
        select.span(),
        "a SESSION window is per key: partition it by the GROUP BY keys, TABLE input PARTITION BY (k1, k2), and group by the same keys",
    ))
}

/// Names in a record's `WHERE` and in aggregate arguments: the record's
/// fields; when a window function is read (`true`), its window columns
/// are not there yet, and neither are aggregates.
pub(super) struct RecordNames<'s>(pub(super) &'s mut Scope, pub(super) bool);

impl Names for RecordNames<'_> {
    fn column(&mut self, parts: &[Ident], span: Span) -> Result<Bound, SqlError> {
        let path = self.0.path_of(parts);
        if self.1 && window_column(&path).is_some() {
            return Err(SqlError::at(
                span,
                "a record's WHERE and an aggregate's argument are read before windows are assigned: filter on window columns with HAVING",
            ));
        }
        Ok((Expr::Column(self.0.column(path)), SqlType::Unknown))
    }

    fn aggregate(
        &mut self,
        name: &str,
        _function: &ast::Function,
        span: Span,
    ) -> Result<Bound, SqlError> {
        Err(SqlError::at(
            span,
            format!(
                "{name} here: aggregates are computed per window, in SELECT and HAVING, and do not nest"
            ),
        ))
    }
}

/// Names in `SELECT` and `HAVING`: a window's row — the keys, the window
/// columns, and aggregate calls (whose arguments are bound over the
/// record, and which become columns of the row).
struct GroupedNames<'s> {
    input: &'s mut Scope,
    keys: &'s [FieldPath],
    aggregates: Vec<AggregateCall>,
    /// Each call as written (upper-cased): a call written twice is
    /// computed once.
    aggregate_text: Vec<String>,
}

impl Names for GroupedNames<'_> {
    fn column(&mut self, parts: &[Ident], span: Span) -> Result<Bound, SqlError> {
        let path = self.input.path_of(parts);
        if let Some(index) = self.keys.iter().position(|key| *key == path) {
            return Ok((Expr::Column(index), SqlType::Unknown));
        }
        if let Some(index) = window_column(&path) {
            return Ok((Expr::Column(self.keys.len() + index), SqlType::Timestamp));
        }
        Err(SqlError::at(
            span,
            format!(
                "`{}` is neither a GROUP BY key nor inside an aggregate",
                path_sql(&path)
            ),
        ))
    }

    fn aggregate(
        &mut self,
        name: &str,
        function: &ast::Function,
        span: Span,
    ) -> Result<Bound, SqlError> {
        let FunctionArguments::List(list) = &function.args else {
            return Err(SqlError::at(span, format!("{name} takes an argument")));
        };
        if !list.clauses.is_empty() {
            return Err(unsupported(
                span,
                &format!("ORDER BY or other clauses in {name}(...)"),
            ));
        }
        let distinct = matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct));
        let arg = match list.args.as_slice() {
            [] => None,
            [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] if name == "COUNT" && !distinct => {
                None
            }
            [FunctionArg::Unnamed(FunctionArgExpr::Expr(expr))] => Some(expr),
            _ => {
                return Err(SqlError::at(
                    span,
                    format!("{name} takes one argument ({SUPPORTED_AGGREGATES})"),
                ));
            }
        };
        let aggregate = AggregateFunction::of(name, distinct, arg.is_some())
            .map_err(|message| SqlError::at(span, message))?;
        let (arg, arg_type) = match arg {
            Some(expr) => {
                let (bound, ty) =
                    Binder::with_names(&mut RecordNames(self.input, true)).bind(expr)?;
                if matches!(aggregate, AggregateFunction::Sum | AggregateFunction::Avg)
                    && !ty.may_be_numeric()
                {
                    return Err(SqlError::at(
                        expr.span(),
                        format!("{name} needs a number, found {}", ty.name()),
                    ));
                }
                (Some(bound), ty)
            }
            None => (None, SqlType::Bigint),
        };
        let text = function.to_string().to_ascii_uppercase();
        let index = match self.aggregate_text.iter().position(|known| *known == text) {
            Some(index) => index,
            None => {
                self.aggregates.push(AggregateCall {
                    function: aggregate,
                    arg,
                });
                self.aggregate_text.push(function.to_string());
                self.aggregates.len() - 1
            }
        };
        let column = self.keys.len() + WINDOW_COLUMNS.len() + index;
        Ok((Expr::Column(column), aggregate.result_type(arg_type)))
    }
}

impl WindowPlan {
    /// The group keys' field paths.
    pub fn key_paths(&self) -> Vec<FieldPath> {
        self.keys
            .iter()
            .map(|&key| self.columns[key].clone())
            .collect()
    }

    /// Whether a record's `row` passes the `WHERE` condition.
    pub fn passes(&self, row: Row<'_>) -> Result<bool, EvalError> {
        match &self.filter {
            Some(filter) => filter.holds(row),
            None => Ok(true),
        }
    }

    /// A new window's empty accumulators, one per aggregate call (or its
    /// list of top rows).
    pub fn create(&self) -> Vec<Accumulator> {
        if self.ranking.is_some() {
            return vec![Accumulator::Rows(Vec::new())];
        }
        self.aggregates.iter().map(AggregateCall::create).collect()
    }

    /// Adds a record's `row` (at `event_time`) to a window's
    /// `accumulators`; if any aggregate cannot take it, none does and the
    /// reason is returned.
    pub fn add(
        &self,
        accumulators: &mut [Accumulator],
        row: Row<'_>,
        event_time: i64,
    ) -> Result<(), EvalError> {
        if let Some(top) = &self.ranking {
            let ranked = top.row(row, event_time)?;
            if let Some(Accumulator::Rows(rows)) = accumulators.first_mut() {
                top.check(rows, &ranked)?;
                top.insert(rows, ranked);
            }
            return Ok(());
        }
        let mut values: SmallVec<[Datum<'_>; 4]> = SmallVec::new();
        for (call, accumulator) in self.aggregates.iter().zip(accumulators.iter()) {
            let value = match &call.arg {
                Some(arg) => arg.eval(row)?,
                None => Datum::Null,
            };
            call.check(accumulator, &value)?;
            values.push(value);
        }
        for ((call, accumulator), value) in self
            .aggregates
            .iter()
            .zip(accumulators.iter_mut())
            .zip(&values)
        {
            call.add(accumulator, value, event_time);
        }
        Ok(())
    }

    /// The accumulators of two windows that merge (sessions), `a` the
    /// earlier.
    pub fn merge(&self, a: &[Accumulator], b: &[Accumulator]) -> Vec<Accumulator> {
        if let (Some(top), [Accumulator::Rows(a)], [Accumulator::Rows(b)]) = (&self.ranking, a, b) {
            return vec![Accumulator::Rows(top.merge(a, b))];
        }
        self.aggregates
            .iter()
            .zip(a.iter().zip(b))
            .map(|(call, (a, b))| call.merge(a, b))
            .collect()
    }

    /// Writes the output records of the window `[start, end)` of the
    /// group `keys` (their values, in key order), each as `emit` takes it:
    /// one, unless `HAVING` drops it; for a Top-N, one per kept row.
    pub fn write_rows(
        &self,
        keys: &[Datum<'_>],
        start: i64,
        end: i64,
        accumulators: &[Accumulator],
        emit: &mut dyn FnMut(&[u8]),
    ) -> Result<(), EvalError> {
        let mut row: Vec<Datum<'_>> = Vec::with_capacity(keys.len() + 3 + accumulators.len());
        row.extend(keys.iter().cloned());
        row.extend([
            Datum::Timestamp(start),
            Datum::Timestamp(end),
            Datum::Timestamp(end.saturating_sub(1)),
        ]);
        let mut out = Vec::new();
        if let (Some(top), Some(Accumulator::Rows(rows))) = (&self.ranking, accumulators.first()) {
            let fixed = row.len();
            for (ranked, rank) in rows.iter().zip(top.ranks(rows)) {
                row.truncate(fixed);
                row.push(Datum::Int(i64::try_from(rank).unwrap_or(i64::MAX)));
                row.extend(ranked.datums());
                out.clear();
                self.write_output(Row::Datums(&row), &mut out)?;
                emit(&out);
            }
            return Ok(());
        }
        for (call, accumulator) in self.aggregates.iter().zip(accumulators) {
            row.push(call.finish(accumulator)?);
        }
        let row = Row::Datums(&row);
        if let Some(having) = &self.having
            && !having.holds(row)?
        {
            return Ok(());
        }
        self.write_output(row, &mut out)?;
        emit(&out);
        Ok(())
    }

    /// Writes the `SELECT` list over a window's `row` into `out`.
    fn write_output(&self, row: Row<'_>, out: &mut Vec<u8>) -> Result<(), EvalError> {
        let mark = out.len();
        out.push(b'{');
        for (index, column) in self.output.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&column.key_json);
            let written = column
                .expr
                .eval(row)
                .and_then(|value| write_datum(&value, &column.name, out));
            if let Err(error) = written {
                out.truncate(mark);
                return Err(error);
            }
        }
        out.push(b'}');
        Ok(())
    }

    /// The name of a window row's column `index`, for `explain`.
    fn row_column_sql(&self, index: usize) -> String {
        let keys = self.keys.len();
        if index < keys {
            return path_sql(&self.columns[self.keys[index]]);
        }
        match WINDOW_COLUMNS.get(index - keys) {
            Some(window) => window.to_string(),
            None => self
                .aggregate_text
                .get(index - keys - WINDOW_COLUMNS.len())
                .cloned()
                .unwrap_or_else(|| format!("#{index}")),
        }
    }

    /// What the query became, for `sluice sql explain` and the dashboard.
    pub fn explain(&self) -> String {
        let window = match self.window {
            WindowFunction::Tumble { size } => format!("TUMBLE size {size} ms"),
            WindowFunction::Hop { slide, size } => format!("HOP slide {slide} ms, size {size} ms"),
            WindowFunction::Session { gap } => format!("SESSION gap {gap} ms"),
            WindowFunction::Cumulate { step, size } => {
                format!("CUMULATE step {step} ms, size {size} ms")
            }
        };
        let keys = if self.keys.is_empty() {
            "(none: one group per window)".to_string()
        } else {
            self.key_paths()
                .iter()
                .map(path_sql)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let filter = match &self.filter {
            Some(filter) => filter.to_sql(&self.columns),
            None => "(every record)".to_string(),
        };
        let aggregates = self
            .aggregates
            .iter()
            .map(|call| {
                let arg = call
                    .arg
                    .as_ref()
                    .map_or("*".to_string(), |arg| arg.to_sql(&self.columns));
                let distinct = match call.function {
                    AggregateFunction::CountDistinct => "DISTINCT ",
                    _ => "",
                };
                format!("{}({distinct}{arg})", call.function.name())
            })
            .collect::<Vec<_>>()
            .join(", ");
        let name = |index: usize| self.row_column_sql(index);
        let columns = self
            .output
            .iter()
            .map(|column| format!("{} = {}", column.name, column.expr.to_sql_with(&name)))
            .collect::<Vec<_>>()
            .join(", ");
        let aggregates = match &self.ranking {
            Some(top) => format!(
                "top:     {} <= {} by {}",
                top.ranking.name(),
                top.limit,
                top.order
                    .iter()
                    .map(|(expr, descending)| {
                        let order = expr.to_sql(&self.columns);
                        if *descending {
                            format!("{order} DESC")
                        } else {
                            order
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => format!("aggregates: {aggregates}"),
        };
        let mut text = format!(
            "window:  {window} on event time `{}`\nkeys:    {keys}\nwhere:   {filter}\n{aggregates}\n",
            self.time_column
        );
        if let Some(having) = &self.having {
            text.push_str(&format!("having:  {}\n", having.to_sql_with(&name)));
        }
        text.push_str(&format!("columns: {columns}"));
        text
    }
}

#[cfg(test)]
mod tests;
