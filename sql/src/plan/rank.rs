//! Window Top-N: Flink's pattern of a ranking function over a window's
//! rows, filtered in an outer query:
//!
//! ```sql
//! SELECT auction, price, window_end FROM (
//!   SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end
//!                                ORDER BY price DESC) AS rownum
//!   FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
//! ) WHERE rownum <= 3
//! ```
//!
//! It becomes a [`WindowPlan`] whose windows keep their top rows
//! ([`crate::rank`]) instead of aggregates, keyed by the partition's other
//! columns. Over the rows of an earlier window aggregation (no window
//! function here: `PARTITION BY window_start, window_end` names the
//! earlier rows' columns), each window's rows arrive together at their
//! window's `window_time`, which is their event time: they are ranked in a
//! window of one millisecond at that time, keyed by the partition columns.

use super::window::{RecordNames, WindowCall, window_column};
use super::{
    Catalog, OutputColumn, Plan, WindowFunction, WindowPlan, bind_condition, default_name,
};
use super::{DedupOrder, DedupPlan, Output, ProjectPlan, TableView};
use super::{output_column, refuse};
use crate::datum::SqlType;
use crate::error::SqlError;
use crate::expr::{Binder, Bound, Expr, Names, Scope, path_sql};
use crate::rank::{Ranking, TopRows};
use sluice_json::FieldPath;
use sqlparser::ast::{
    self, BinaryOperator, FunctionArguments, Ident, SelectItem, SetExpr, Spanned, TableFactor,
    WindowType,
};
use sqlparser::tokenizer::Span;

/// The shape of a window Top-N (for messages).
const TOP_N_SHAPE: &str = "a Top-N is SELECT ... FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end[, keys] ORDER BY ...) AS rownum FROM TABLE(TUMBLE(...))) WHERE rownum <= N";

/// The inner query's ranking column.
struct RankingColumn<'q> {
    ranking: Ranking,
    name: String,
    partition_by: &'q [ast::Expr],
    order_by: &'q [ast::OrderByExpr],
}

/// Compiles `outer`, whose `FROM` is the subquery `inner` (aliased
/// `alias`).
pub(super) fn compile_ranked(
    outer: &ast::Select,
    inner: &ast::Query,
    alias: Option<&ast::TableAlias>,
    catalog: &Catalog,
) -> Result<Plan, SqlError> {
    if inner.with.is_some() || inner.order_by.is_some() || inner.limit_clause.is_some() {
        return refuse(inner, "WITH, ORDER BY or LIMIT in a subquery");
    }
    let SetExpr::Select(select) = inner.body.as_ref() else {
        return refuse(inner, TOP_N_SHAPE);
    };
    match &outer.group_by {
        ast::GroupByExpr::Expressions(keys, _) if keys.is_empty() => {}
        _ => return refuse(outer, "GROUP BY over a Top-N"),
    }
    if outer.having.is_some() || select.having.is_some() {
        return refuse(outer, "HAVING with a Top-N");
    }
    match &select.group_by {
        ast::GroupByExpr::Expressions(keys, _) if keys.is_empty() => {}
        _ => {
            return refuse(
                select.as_ref(),
                "a Top-N over a GROUP BY in the same query; aggregate in an earlier SQL operator and rank its rows here",
            );
        }
    }
    let [from] = select.from.as_slice() else {
        return refuse(select.as_ref(), TOP_N_SHAPE);
    };
    if !from.joins.is_empty() {
        return refuse(&from.joins[0], "a Top-N over a join");
    }
    // The window (from a window function, or the earlier window's rows).
    let (call, view, mut qualifiers) = match &from.relation {
        TableFactor::TableFunction { expr, alias } => {
            let call = WindowCall::parse(expr, catalog)?;
            let mut qualifiers = vec![call.table.clone()];
            qualifiers.extend(alias.iter().map(|a| a.name.value.clone()));
            let view = call.view.clone();
            (Some(call), view, qualifiers)
        }
        TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } => {
            let table = name.to_string();
            let view = catalog.table(&table, name.span())?.cloned();
            let mut qualifiers = vec![table];
            qualifiers.extend(alias.iter().map(|a| a.name.value.clone()));
            (None, view, qualifiers)
        }
        other => return refuse(other, TOP_N_SHAPE),
    };
    if let Some(alias) = alias {
        qualifiers.push(alias.name.value.clone());
    }
    let mut scope = Scope::new(qualifiers);
    let (ranking, inner_columns) = inner_columns(select, &scope)?;
    let windowed = call.is_some();
    // The partition: the window's bounds and the keys.
    let mut keys: Vec<FieldPath> = Vec::new();
    let mut window = [false; 2];
    for key in ranking.partition_by {
        let parts = match key {
            ast::Expr::Identifier(ident) => std::slice::from_ref(ident),
            ast::Expr::CompoundIdentifier(parts) => parts.as_slice(),
            other => return refuse(other, "partitioning a Top-N by an expression"),
        };
        let path = scope.path_of(parts);
        match window_column(&path) {
            Some(index @ 0..=1) => {
                window[index] = true;
                if !windowed && !keys.contains(&path) {
                    keys.push(path);
                }
            }
            _ if !keys.contains(&path) => keys.push(path),
            _ => {}
        }
    }
    if !windowed && !window[0] && !window[1] {
        return compile_deduplication(
            outer,
            select,
            &ranking,
            &inner_columns,
            view.as_ref(),
            keys,
            scope,
            catalog,
        )
        .map(Plan::Deduplicate);
    }
    if !(window[0] && window[1]) {
        let span = ranking
            .partition_by
            .first()
            .map_or(select.span(), Spanned::span);
        return Err(SqlError::at(
            span,
            "a Top-N ranks the rows of a window: PARTITION BY window_start, window_end[, keys] (a Top-N over an unbounded stream emits updates, which Sluice's append-only outputs cannot take)",
        ));
    }
    let key_positions: Vec<usize> = keys.iter().map(|key| scope.column(key.clone())).collect();
    let (filter, order) = {
        let mut record = RecordNames(&mut scope, windowed);
        let filter = bind_condition(&mut record, select.selection.as_ref(), "WHERE")?;
        let mut order = Vec::new();
        for item in ranking.order_by {
            if item.options.nulls_first.is_some() {
                return refuse(
                    item,
                    "NULLS FIRST or LAST (NULLs order first ascending, last descending)",
                );
            }
            let (bound, _) = Binder::with_names(&mut record).bind(&item.expr)?;
            let descending = match &item.options.sort {
                None | Some(ast::OrderBySort::Asc) => false,
                Some(ast::OrderBySort::Desc) => true,
                Some(ast::OrderBySort::Using(_)) => return refuse(item, "ORDER BY ... USING"),
            };
            order.push((bound, descending));
        }
        (filter, order)
    };
    if order.is_empty() {
        return Err(SqlError::at(
            select.span(),
            "a Top-N needs ORDER BY in its OVER (...)",
        ));
    }
    let filter = super::with_view_condition(view.as_ref(), filter, &mut scope);
    let limit = rank_limit(outer, &ranking.name)?;
    // The outer query, over the kept rows.
    let mut names = RankedNames {
        scope: &mut scope,
        keys: &keys,
        windowed,
        rank: &ranking.name,
        inner: &inner_columns,
        values: Vec::new(),
        value_names: Vec::new(),
    };
    let mut output: Vec<OutputColumn> = Vec::new();
    for (position, item) in outer.projection.iter().enumerate() {
        match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                let Some(columns) = &inner_columns else {
                    return refuse(
                        item,
                        "`*` over `SELECT *, ROW_NUMBER() ...`: list the columns",
                    );
                };
                for (name, _) in columns.iter().chain([(ranking.name.clone(), None)].iter()) {
                    let ident = Ident::new(name.clone());
                    let (bound, _) = names.column(std::slice::from_ref(&ident), item.span())?;
                    let column = output_column(&output, name.clone(), bound, None, item)?;
                    output.push(column);
                }
            }
            SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => {
                let name = match item {
                    SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
                    _ => default_name(expr, position),
                };
                let (bound, _) = Binder::with_names(&mut names).bind(expr)?;
                let column = output_column(&output, name, bound, None, item)?;
                output.push(column);
            }
            SelectItem::ExprWithAliases { .. } => {
                return refuse(item, "several aliases for one column");
            }
        }
    }
    if let Some(selection) = &outer.selection
        && !is_rank_condition(selection, &ranking.name)
    {
        return refuse(
            selection,
            "conditions beside the rank in a Top-N's outer WHERE (filter in the inner query)",
        );
    }
    let RankedNames {
        values,
        value_names,
        ..
    } = names;
    let (window, time_column) = match call {
        Some(call) => (call.window, call.time_column),
        None => (
            WindowFunction::Tumble { size: 1 },
            super::ROWTIME.to_string(),
        ),
    };
    let mut row_names = vec![ranking.name.clone()];
    row_names.extend(value_names);
    Ok(Plan::Window(WindowPlan {
        window,
        time_column,
        columns: scope.columns().to_vec(),
        keys: key_positions,
        filter,
        aggregates: Vec::new(),
        ranking: Some(TopRows {
            ranking: ranking.ranking,
            limit,
            order,
            values: values.into_iter().map(Expr::Column).collect(),
        }),
        having: None,
        output,
        aggregate_text: row_names,
    }))
}

/// De-duplication, Flink's pattern: `SELECT cols FROM (SELECT *,
/// ROW_NUMBER() OVER (PARTITION BY id ORDER BY PROCTIME() | ts) AS rn FROM
/// input) WHERE rn = 1`: the first row of each key, by arrival or by event
/// time (`ts` ascending: the key's earliest row, once the watermark passes
/// it).
#[allow(clippy::too_many_arguments)]
fn compile_deduplication(
    outer: &ast::Select,
    select: &ast::Select,
    ranking: &RankingColumn<'_>,
    inner_columns: &Option<Vec<(String, Option<FieldPath>)>>,
    view: Option<&TableView>,
    keys: Vec<FieldPath>,
    mut scope: Scope,
    catalog: &Catalog,
) -> Result<DedupPlan, SqlError> {
    let keep_first = "de-duplication keeps each key's first row: ROW_NUMBER() OVER (PARTITION BY id ORDER BY PROCTIME() | <event time> ASC) AS rn ... WHERE rn = 1 (keeping the last row would emit updates)";
    if ranking.ranking != Ranking::RowNumber || rank_limit(outer, &ranking.name)? != 1 {
        return Err(SqlError::at(select.span(), keep_first));
    }
    if let Some(selection) = &outer.selection
        && !is_rank_condition(selection, &ranking.name)
    {
        return refuse(
            selection,
            "conditions beside the rank in the outer WHERE (filter in the inner query)",
        );
    }
    let [order] = ranking.order_by else {
        return Err(SqlError::at(select.span(), keep_first));
    };
    let descending = matches!(order.options.sort, Some(ast::OrderBySort::Desc));
    let by = match &order.expr {
        ast::Expr::Function(function)
            if function.name.to_string().eq_ignore_ascii_case("PROCTIME") && !descending =>
        {
            DedupOrder::Arrival
        }
        ast::Expr::Identifier(column)
            if !descending
                && catalog
                    .time_columns
                    .iter()
                    .any(|time| time.eq_ignore_ascii_case(&column.value)) =>
        {
            DedupOrder::EventTime
        }
        other => return Err(SqlError::at(other.span(), keep_first)),
    };
    if order.options.nulls_first.is_some() {
        return refuse(order, "NULLS FIRST or LAST");
    }
    let filter = bind_condition(&mut scope, select.selection.as_ref(), "WHERE")?;
    let filter = super::with_view_condition(view, filter, &mut scope);
    let key_columns: Vec<usize> = keys.iter().map(|key| scope.column(key.clone())).collect();
    let mut names = DedupNames {
        scope: &mut scope,
        rank: &ranking.name,
        inner: inner_columns,
    };
    let output = super::project::compile_columns(outer, &mut names, false)?;
    let columns = scope.columns().to_vec();
    Ok(DedupPlan {
        keys: key_columns.iter().map(|&k| columns[k].clone()).collect(),
        order: by,
        filter: ProjectPlan {
            columns: columns.clone(),
            filter,
            output: Output::Whole,
        },
        project: ProjectPlan {
            columns,
            filter: None,
            output,
        },
    })
}

/// The field an outer query's column `path` reads: itself when the inner
/// query is `*`, else the column of the inner query it names (as renamed
/// there).
fn inner_path(
    inner: &Option<Vec<(String, Option<FieldPath>)>>,
    path: FieldPath,
    span: Span,
) -> Result<FieldPath, SqlError> {
    let Some(columns) = inner else {
        return Ok(path);
    };
    let named = match &path {
        FieldPath::Top(name) => columns.iter().find(|(n, _)| n == name),
        FieldPath::Pointer(_) => None,
    };
    match named {
        Some((_, Some(inner))) => Ok(inner.clone()),
        _ => Err(SqlError::at(
            span,
            format!("`{}` is not a column of the inner query", path_sql(&path)),
        )),
    }
}

/// Names in a de-duplication's outer query: the record's columns (as the
/// inner query names them) and the rank, always 1.
struct DedupNames<'s> {
    scope: &'s mut Scope,
    rank: &'s str,
    inner: &'s Option<Vec<(String, Option<FieldPath>)>>,
}

impl Names for DedupNames<'_> {
    fn column(&mut self, parts: &[Ident], span: Span) -> Result<Bound, SqlError> {
        if let [one] = parts
            && one.value == self.rank
        {
            return Ok((Expr::Literal(crate::datum::Datum::Int(1)), SqlType::Bigint));
        }
        let path = inner_path(self.inner, self.scope.path_of(parts), span)?;
        Ok((Expr::Column(self.scope.column(path)), SqlType::Unknown))
    }
}

/// The inner query's columns: its ranking column, and the others — `None`
/// for `*` (every field), else each name with the column it reads.
#[allow(clippy::type_complexity)]
fn inner_columns<'q>(
    select: &'q ast::Select,
    scope: &Scope,
) -> Result<(RankingColumn<'q>, Option<Vec<(String, Option<FieldPath>)>>), SqlError> {
    let mut ranking = None;
    let mut columns: Option<Vec<(String, Option<FieldPath>)>> = Some(Vec::new());
    for item in &select.projection {
        let (expr, alias) = match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                columns = None;
                continue;
            }
            SelectItem::UnnamedExpr(expr) => (expr, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            SelectItem::ExprWithAliases { .. } => {
                return refuse(item, "several aliases for one column");
            }
        };
        if let ast::Expr::Function(function) = expr
            && function.over.is_some()
        {
            let name = function.name.to_string().to_ascii_uppercase();
            let kind = match name.as_str() {
                "ROW_NUMBER" => Ranking::RowNumber,
                "RANK" => Ranking::Rank,
                "DENSE_RANK" => Ranking::DenseRank,
                _ => {
                    return refuse(
                        expr,
                        &format!(
                            "{name}(...) OVER (a window Top-N takes ROW_NUMBER, RANK or DENSE_RANK)"
                        ),
                    );
                }
            };
            if !matches!(&function.args, FunctionArguments::None)
                && !matches!(&function.args, FunctionArguments::List(list) if list.args.is_empty())
            {
                return Err(SqlError::at(
                    expr.span(),
                    format!("{name}() takes no argument"),
                ));
            }
            let Some(WindowType::WindowSpec(spec)) = &function.over else {
                return refuse(expr, "a named window (write the OVER (...) clause)");
            };
            if spec.window_frame.is_some() {
                return refuse(expr, "a window frame in a ranking function");
            }
            if ranking.is_some() {
                return refuse(expr, "two ranking functions in one query");
            }
            let Some(alias) = alias else {
                return Err(SqlError::at(
                    expr.span(),
                    format!("name the rank: {name}() OVER (...) AS rownum"),
                ));
            };
            ranking = Some(RankingColumn {
                ranking: kind,
                name: alias,
                partition_by: &spec.partition_by,
                order_by: &spec.order_by,
            });
            continue;
        }
        let parts = match expr {
            ast::Expr::Identifier(ident) => std::slice::from_ref(ident),
            ast::Expr::CompoundIdentifier(parts) => parts.as_slice(),
            other => {
                return refuse(
                    other,
                    "expressions in a Top-N's inner query (compute them in an earlier SQL operator); list columns",
                );
            }
        };
        let path = scope.path_of(parts);
        let name =
            alias.unwrap_or_else(|| parts.last().map(|p| p.value.clone()).unwrap_or_default());
        if let Some(columns) = &mut columns {
            columns.push((name, Some(path)));
        }
    }
    let Some(ranking) = ranking else {
        return Err(SqlError::at(
            select.span(),
            format!("a subquery in FROM is supported only as a window Top-N: {TOP_N_SHAPE}"),
        ));
    };
    Ok((ranking, columns))
}

/// N of the outer `WHERE rownum <= N` (or `< N`, `= 1`, `N >= rownum`).
fn rank_limit(outer: &ast::Select, rank: &str) -> Result<u64, SqlError> {
    let Some(condition) = &outer.selection else {
        return Err(SqlError::at(
            outer.span(),
            format!("a Top-N keeps the top rows: WHERE {rank} <= N"),
        ));
    };
    let wrong = || {
        SqlError::at(
            condition.span(),
            format!("a Top-N's outer WHERE is {rank} <= N (or < N, or = 1)"),
        )
    };
    let ast::Expr::BinaryOp { left, op, right } = condition else {
        return Err(wrong());
    };
    let names =
        |expr: &ast::Expr| matches!(expr, ast::Expr::Identifier(ident) if ident.value == rank);
    let number = |expr: &ast::Expr| match expr {
        ast::Expr::Value(value) => match &value.value {
            ast::Value::Number(digits, _) => digits.parse::<u64>().ok(),
            _ => None,
        },
        _ => None,
    };
    let (op, n) = match (names(left), names(right)) {
        (true, false) => (op.clone(), number(right)),
        (false, true) => (
            match op {
                BinaryOperator::GtEq => BinaryOperator::LtEq,
                BinaryOperator::Gt => BinaryOperator::Lt,
                other => other.clone(),
            },
            number(left),
        ),
        _ => return Err(wrong()),
    };
    let limit = match (op, n) {
        (BinaryOperator::LtEq, Some(n)) if n >= 1 => n,
        (BinaryOperator::Lt, Some(n)) if n >= 2 => n - 1,
        (BinaryOperator::Eq, Some(1)) => 1,
        _ => return Err(wrong()),
    };
    Ok(limit)
}

/// Whether `condition` is only the rank's bound.
fn is_rank_condition(condition: &ast::Expr, rank: &str) -> bool {
    match condition {
        ast::Expr::BinaryOp { left, right, .. } => [left, right].iter().any(
            |side| matches!(side.as_ref(), ast::Expr::Identifier(ident) if ident.value == rank),
        ),
        _ => false,
    }
}

/// Names in a Top-N's outer query: the partition keys, the window columns
/// (over a window function), the rank, and the inner query's columns,
/// which each kept row keeps.
struct RankedNames<'s> {
    scope: &'s mut Scope,
    keys: &'s [FieldPath],
    windowed: bool,
    rank: &'s str,
    /// The inner query's columns by name (`None`: `*`).
    inner: &'s Option<Vec<(String, Option<FieldPath>)>>,
    /// What each kept row keeps (columns of the record's row), and how it
    /// was named.
    values: Vec<usize>,
    value_names: Vec<String>,
}

impl Names for RankedNames<'_> {
    fn column(&mut self, parts: &[Ident], span: Span) -> Result<Bound, SqlError> {
        let fixed = self.keys.len() + 3;
        if let [one] = parts
            && one.value == self.rank
        {
            return Ok((Expr::Column(fixed), SqlType::Bigint));
        }
        let path = self.scope.path_of(parts);
        if self.windowed
            && let Some(index) = window_column(&path)
        {
            return Ok((Expr::Column(self.keys.len() + index), SqlType::Timestamp));
        }
        if let Some(index) = self.keys.iter().position(|key| *key == path) {
            return Ok((Expr::Column(index), SqlType::Unknown));
        }
        // A column of the inner query, renamed there or not.
        let path = inner_path(self.inner, path, span)?;
        if let Some(key) = self.keys.iter().position(|key| *key == path) {
            return Ok((Expr::Column(key), SqlType::Unknown));
        }
        let column = self.scope.column(path.clone());
        let index = match self.values.iter().position(|known| *known == column) {
            Some(index) => index,
            None => {
                self.values.push(column);
                self.value_names.push(path_sql(&path));
                self.values.len() - 1
            }
        };
        Ok((Expr::Column(fixed + 1 + index), SqlType::Unknown))
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::{Catalog, Plan, compile};

    fn compiled(sql: &str) -> Result<Plan, String> {
        let catalog = Catalog::input([]).with_time_column("ts");
        compile(sql, &catalog).map_err(|error| error.show(sql))
    }

    #[test]
    fn a_top_n_keeps_its_limit_keys_and_order() {
        let Ok(Plan::Window(plan)) = compiled(
            "SELECT k, price, rn, window_end FROM (SELECT *, DENSE_RANK() OVER (PARTITION BY window_start, window_end, k ORDER BY price DESC, id) AS rn FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND))) WHERE 3 >= rn",
        ) else {
            panic!("not a window plan");
        };
        let top = plan.ranking.as_ref().unwrap();
        assert_eq!(
            (top.ranking, top.limit),
            (crate::rank::Ranking::DenseRank, 3)
        );
        assert_eq!(plan.key_paths(), [sluice_json::FieldPath::Top("k".into())]);
        let text = plan.explain();
        assert!(
            text.contains("top:     DENSE_RANK <= 3 by price DESC, id"),
            "{text}"
        );
        assert!(
            text.contains("columns: k = k, price = price, rn = rn, window_end = window_end"),
            "{text}"
        );
    }

    #[test]
    fn de_duplication_keeps_the_first_row_by_arrival_or_event_time() {
        for (order, expected) in [
            ("PROCTIME()", crate::plan::DedupOrder::Arrival),
            ("ts", crate::plan::DedupOrder::EventTime),
            ("ts ASC", crate::plan::DedupOrder::EventTime),
        ] {
            let sql = format!(
                "SELECT id, amount, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY {order}) AS rn FROM input WHERE amount > 0) WHERE rn = 1"
            );
            let Ok(Plan::Deduplicate(plan)) = compiled(&sql) else {
                panic!("not a de-duplication: {sql}");
            };
            assert_eq!(plan.order, expected);
            assert_eq!(plan.keys, [sluice_json::FieldPath::Top("id".into())]);
            let text = plan.explain();
            assert!(text.contains("where:   (amount > 0)"), "{text}");
            assert!(
                text.contains("columns: id = id, amount = amount, rn = 1"),
                "{text}"
            );
        }
    }

    #[test]
    fn top_n_outside_the_supported_shape_is_refused_with_its_position() {
        let tvf = "FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND))";
        let cases = [
            (format!("SELECT a FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start ORDER BY a) AS rn {tvf}) WHERE rn <= 2"), "PARTITION BY window_start, window_end"),
            (format!("SELECT a FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end) AS rn {tvf}) WHERE rn <= 2"), "needs ORDER BY"),
            (format!("SELECT a FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY a) AS rn {tvf}) WHERE rn = 2"), "outer WHERE is rn <= N"),
            (format!("SELECT a FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY a) AS rn {tvf})"), "WHERE rn <= N"),
            (format!("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY a) AS rn {tvf}) WHERE rn <= 2"), "list the columns"),
            (format!("SELECT a FROM (SELECT *, LAG(a) OVER (PARTITION BY window_start, window_end ORDER BY a) AS rn {tvf}) WHERE rn <= 2"), "ROW_NUMBER, RANK or DENSE_RANK"),
            (format!("SELECT b FROM (SELECT a, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY a) AS rn {tvf}) WHERE rn <= 2"), "`b` is not a column of the inner query"),
            (format!("SELECT a FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY a NULLS LAST) AS rn {tvf}) WHERE rn <= 2"), "NULLS FIRST or LAST"),
            ("SELECT a FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY a ORDER BY ts DESC) AS rn FROM input) WHERE rn = 1".to_string(), "keeps each key's first row"),
            ("SELECT a FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY a ORDER BY b) AS rn FROM input) WHERE rn = 1".to_string(), "keeps each key's first row"),
            ("SELECT a FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY a ORDER BY ts) AS rn FROM input) WHERE rn <= 2".to_string(), "keeps each key's first row"),
            ("SELECT a FROM (SELECT *, RANK() OVER (PARTITION BY window_start, a ORDER BY ts) AS rn FROM input) WHERE rn <= 2".to_string(), "a Top-N ranks the rows of a window"),
        ];
        for (sql, expected) in cases {
            let shown = compiled(&sql)
                .map(|plan| format!("compiled: {plan:?}"))
                .unwrap_or_else(|e| e);
            assert!(shown.contains(expected), "{sql}\n{shown}");
            assert!(shown.contains('^'), "no position: {sql}\n{shown}");
        }
    }
}
