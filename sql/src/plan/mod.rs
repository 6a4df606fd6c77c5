//! A query compiled into what a Sluice operator runs.
//!
//! * `SELECT ... FROM input [WHERE ...]` becomes a [`ProjectPlan`]
//!   (`project`): the fields to read from each record, a compiled
//!   condition, and the output columns, written straight into the output
//!   record's JSON (a column that is a plain top-level field is copied as
//!   the record's own JSON text).
//! * `SELECT ... FROM TABLE(TUMBLE|HOP|SESSION|CUMULATE(TABLE input, ...))
//!   GROUP BY window_start, window_end, ...` becomes a [`WindowPlan`]
//!   (`window`): the window, the group keys, the aggregate calls and what
//!   each window's row becomes, for the host's window operator.
//!
//! Everything outside the supported subset is refused with its position.

mod join;
mod project;
mod rank;
mod window;

pub use join::{JoinInput, JoinPlan};
pub use project::{Output, OutputColumn, ProjectPlan};
pub use window::{WindowFunction, WindowPlan};

use crate::datum::Datum;
use crate::dialect::FlinkDialect;
use crate::error::{SqlError, from_parser_message};
use crate::expr::EvalError;
use sluice_json::FieldPath;
use sqlparser::ast::{self, SelectItem, SetExpr, Spanned, Statement, TableFactor};
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Span, Token, Tokenizer};

/// The longest SQL text accepted, in bytes.
pub const MAX_SQL_BYTES: usize = 1 << 20;

/// The most tokens a query may have: a query's tree, and so the stack
/// that parsing, binding and dropping it take, is bounded by them (a
/// chain of `+` is as deep as it is long).
pub const MAX_SQL_TOKENS: usize = 50_000;

/// What a query's `FROM` may name: the operator's input stream is `input`,
/// and also the source's name where it has one; and which of its columns
/// is its event time.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// Table names the query may read (all the operator's input).
    pub tables: Vec<String>,
    /// The names a window table function's `DESCRIPTOR` may give the
    /// event time by: the column the pipeline reads its event time from,
    /// and [`ROWTIME`].
    pub time_columns: Vec<String>,
    /// Tables that are the part of the input where a column has a value
    /// (Nexmark's `bid`, `auction` and `person` in one stream of events).
    pub views: Vec<TableView>,
}

/// A table that is the part of the operator's input whose `column` is the
/// string `value`: reading it adds `column = 'value'` to the query's
/// `WHERE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableView {
    /// The table's name.
    pub name: String,
    /// The column that tells the table's records from the others.
    pub column: String,
    /// Its value in the table's records.
    pub value: String,
}

impl TableView {
    /// `column = 'value'`, bound in `scope`.
    pub(crate) fn condition(&self, scope: &mut crate::expr::Scope) -> crate::expr::Expr {
        use crate::expr::{CompareOp, Expr};
        let column = scope.column(sluice_json::FieldPath::Top(self.column.clone()));
        Expr::Compare(
            CompareOp::Eq,
            Box::new(Expr::Column(column)),
            Box::new(Expr::Literal(Datum::Str(self.value.clone().into()))),
        )
    }
}

/// `view`'s condition AND `filter` (either may be absent).
pub(crate) fn with_view_condition(
    view: Option<&TableView>,
    filter: Option<crate::expr::Expr>,
    scope: &mut crate::expr::Scope,
) -> Option<crate::expr::Expr> {
    use crate::expr::Expr;
    match (view.map(|view| view.condition(scope)), filter) {
        (Some(view), Some(filter)) => Some(Expr::And(Box::new(view), Box::new(filter))),
        (view, filter) => view.or(filter),
    }
}

/// The name of a record's event time wherever it comes from (Kafka's
/// record timestamps, a window result's `window_time`):
/// `DESCRIPTOR(rowtime)`.
pub const ROWTIME: &str = "rowtime";

impl Catalog {
    /// The input stream as `input` and the `other` names given; the event
    /// time as [`ROWTIME`] only.
    pub fn input(other: impl IntoIterator<Item = String>) -> Catalog {
        let mut tables = vec!["input".to_string()];
        tables.extend(other.into_iter().filter(|name| name != "input"));
        Catalog {
            tables,
            time_columns: vec![ROWTIME.to_string()],
            views: Vec::new(),
        }
    }

    /// This catalog with the table `name`: the input's records whose
    /// `column` is the string `value`.
    pub fn with_view(mut self, name: &str, column: &str, value: &str) -> Catalog {
        self.views.push(TableView {
            name: name.to_string(),
            column: column.to_string(),
            value: value.to_string(),
        });
        self
    }

    /// This catalog where the event time is also the column `name` (the
    /// source's `timestamp_field`).
    pub fn with_time_column(mut self, name: impl Into<String>) -> Catalog {
        let name = name.into();
        if !self.time_columns.contains(&name) {
            self.time_columns.insert(0, name);
        }
        self
    }

    /// Whether the query may read `table`: `None` for the input itself,
    /// the view for a view; else an error at `span` naming the tables it
    /// may read.
    fn table(&self, table: &str, span: Span) -> Result<Option<&TableView>, SqlError> {
        if self.tables.iter().any(|known| known == table) {
            return Ok(None);
        }
        if let Some(view) = self.views.iter().find(|view| view.name == table) {
            return Ok(Some(view));
        }
        let mut names: Vec<String> = self.tables.iter().map(|t| format!("`{t}`")).collect();
        let views: Vec<String> = self
            .views
            .iter()
            .map(|view| format!("`{}` (where {} = '{}')", view.name, view.column, view.value))
            .collect();
        let mut known = names.join(" or ");
        if !views.is_empty() {
            names = views;
            known = format!("{known}, or its part {}", names.join(", "));
        }
        Err(SqlError::at(
            span,
            format!("unknown table `{table}`: the operator's input is {known}"),
        ))
    }
}

/// A compiled query.
#[derive(Debug, Clone)]
pub enum Plan {
    /// A projection with an optional filter (one output record per input
    /// record that passes).
    Project(ProjectPlan),
    /// An aggregation over a window table function (one output record per
    /// window and group as the window fires).
    Window(WindowPlan),
    /// An interval join of two parts of the input, then a projection.
    Join(JoinPlan),
    /// De-duplication: each key's first row.
    Deduplicate(DedupPlan),
}

/// Which row of a key de-duplication keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DedupOrder {
    /// The first to arrive (`ORDER BY PROCTIME()`), emitted at once.
    Arrival,
    /// The earliest by event time (`ORDER BY ts`), emitted when the
    /// watermark passes it (a later-arriving, earlier row still wins
    /// until then; one behind the watermark is late).
    EventTime,
}

/// `SELECT cols FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY keys ORDER
/// BY ..) AS rn FROM input [WHERE ..]) WHERE rn = 1`: each key's first
/// row, as long as the operator's state remembers the key
/// (`state_ttl_ms`).
#[derive(Debug, Clone)]
pub struct DedupPlan {
    /// The key columns.
    pub keys: Vec<FieldPath>,
    /// Which row of a key is kept.
    pub order: DedupOrder,
    /// The inner `WHERE` (records that fail it are not ranked), passing a
    /// record unchanged.
    pub filter: ProjectPlan,
    /// What a kept record becomes (the outer `SELECT`).
    pub project: ProjectPlan,
}

impl DedupPlan {
    /// What the query became, for `sluice sql explain` and the dashboard.
    pub fn explain(&self) -> String {
        let keys: Vec<String> = self.keys.iter().map(crate::expr::path_sql).collect();
        let order = match self.order {
            DedupOrder::Arrival => "the first to arrive",
            DedupOrder::EventTime => "the earliest by event time, once the watermark passes it",
        };
        let filter = self.filter.explain();
        let columns = self.project.explain();
        format!(
            "dedup:   each key's first row ({order}), keyed by {}\n{}\n{}",
            keys.join(", "),
            filter.lines().take(2).collect::<Vec<_>>().join("\n"),
            columns.lines().last().unwrap_or_default()
        )
    }
}

impl Plan {
    /// What the query became, for `sluice sql explain` and the dashboard.
    pub fn explain(&self) -> String {
        match self {
            Plan::Project(plan) => plan.explain(),
            Plan::Window(plan) => plan.explain(),
            Plan::Join(plan) => plan.explain(),
            Plan::Deduplicate(plan) => plan.explain(),
        }
    }

    /// Whether the plan keeps state per key (and so runs where keyed
    /// operators run, one instance per worker).
    pub fn is_keyed(&self) -> bool {
        matches!(self, Plan::Window(_) | Plan::Join(_) | Plan::Deduplicate(_))
    }
}

/// Compiles `sql` (one query) against `catalog`.
///
/// Parsing and binding recurse over the query; they run on a thread of
/// their own with a large stack, so that no query text, however deeply it
/// nests, can overflow the caller's stack.
pub fn compile(sql: &str, catalog: &Catalog) -> Result<Plan, SqlError> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(SqlError::whole(format!(
            "the SQL text is {} bytes; at most {MAX_SQL_BYTES} are accepted",
            sql.len()
        )));
    }
    let (sql, catalog) = (sql.to_string(), catalog.clone());
    let compiling = std::thread::Builder::new()
        .name("sql-compile".into())
        .stack_size(256 << 20)
        .spawn(move || compile_here(&sql, &catalog))
        .map_err(|error| SqlError::whole(format!("cannot start the SQL compiler: {error}")))?;
    compiling
        .join()
        .unwrap_or_else(|_| Err(SqlError::whole("the SQL compiler failed")))
}

fn compile_here(sql: &str, catalog: &Catalog) -> Result<Plan, SqlError> {
    let tokens = Tokenizer::new(&FlinkDialect, sql)
        .tokenize_with_location()
        .map_err(|error| from_parser_message(&error.to_string()))?;
    let words = tokens
        .iter()
        .filter(|token| !matches!(token.token, Token::Whitespace(_)))
        .count();
    if words > MAX_SQL_TOKENS {
        return Err(SqlError::whole(format!(
            "the SQL text has {words} tokens; at most {MAX_SQL_TOKENS} are accepted"
        )));
    }
    let statements = Parser::new(&FlinkDialect)
        .with_tokens_with_locations(tokens)
        .parse_statements()
        .map_err(|error| at_end_if_unplaced(from_parser_message(&error.to_string()), sql))?;
    let statement = match statements.as_slice() {
        [one] => one,
        [] => return Err(SqlError::whole("the SQL text holds no query")),
        [_, second, ..] => {
            return Err(SqlError::at(
                second.span(),
                "one query per operator (a second statement starts here)",
            ));
        }
    };
    let Statement::Query(query) = statement else {
        return Err(SqlError::at(
            statement.span(),
            "only a query (SELECT) is supported here; sources and sinks are declared in the pipeline file",
        ));
    };
    compile_query(query, catalog)
}

/// A parser error without a position is about the end of the text (it
/// ended too soon): placed just after its last character.
fn at_end_if_unplaced(mut error: SqlError, sql: &str) -> SqlError {
    if error.line == 0 {
        let trimmed = sql.trim_end();
        error.line = trimmed.lines().count().max(1) as u64;
        error.column = trimmed
            .lines()
            .last()
            .map_or(0, |line| line.chars().count()) as u64
            + 1;
    }
    error
}

fn refuse<T>(node: &impl Spanned, what: &str) -> Result<T, SqlError> {
    Err(crate::expr::bind::unsupported(node.span(), what))
}

fn compile_query(query: &ast::Query, catalog: &Catalog) -> Result<Plan, SqlError> {
    if let Some(with) = &query.with {
        return refuse(with, "WITH");
    }
    if let Some(order_by) = &query.order_by {
        return refuse(order_by, "ORDER BY (a stream has no end to sort by)");
    }
    if let Some(limit) = &query.limit_clause {
        return refuse(limit, "LIMIT");
    }
    if query.fetch.is_some() || !query.locks.is_empty() || query.for_clause.is_some() {
        return refuse(query, "FETCH, FOR and locking clauses");
    }
    let select = match query.body.as_ref() {
        SetExpr::Select(select) => select,
        SetExpr::Query(inner) => return refuse(inner.as_ref(), "a parenthesised query"),
        other => {
            return refuse(
                other,
                "UNION, INTERSECT, EXCEPT, VALUES and other set operations",
            );
        }
    };
    compile_select(select, catalog)
}

/// Refuses what no `SELECT` of the subset has, then compiles a
/// projection (`FROM input`) or a window aggregation (`FROM
/// TABLE(TUMBLE(...))`).
fn compile_select(select: &ast::Select, catalog: &Catalog) -> Result<Plan, SqlError> {
    if let Some(distinct) = &select.distinct {
        return refuse(
            select,
            &format!("SELECT {distinct} (de-duplicate with the ROW_NUMBER pattern)"),
        );
    }
    if select.top.is_some() || select.into.is_some() || !select.lateral_views.is_empty() {
        return refuse(select, "TOP, INTO and LATERAL VIEW");
    }
    if select.prewhere.is_some() || !select.connect_by.is_empty() || select.qualify.is_some() {
        return refuse(select, "PREWHERE, CONNECT BY and QUALIFY");
    }
    if !select.cluster_by.is_empty()
        || !select.distribute_by.is_empty()
        || !select.sort_by.is_empty()
    {
        return refuse(select, "CLUSTER BY, DISTRIBUTE BY and SORT BY");
    }
    if !select.named_window.is_empty() {
        return refuse(select, "WINDOW clauses");
    }
    let from = match select.from.as_slice() {
        [one] => one,
        [] => return Err(SqlError::at(select.span(), "a query reads FROM input")),
        [_, second, ..] => return refuse(second, "reading several tables (joins)"),
    };
    if !from.joins.is_empty() {
        return join::compile_join(select, from, catalog).map(Plan::Join);
    }
    match &from.relation {
        TableFactor::Table {
            name, alias, args, ..
        } => {
            if args.is_some() {
                return Err(SqlError::at(
                    from.relation.span(),
                    "table functions other than TABLE(TUMBLE|HOP|SESSION|CUMULATE(...)) are not supported",
                ));
            }
            let table = name.to_string();
            let view = catalog.table(&table, name.span())?;
            let mut qualifiers = vec![table];
            if let Some(alias) = alias {
                qualifiers.push(alias.name.value.clone());
            }
            project::compile_project(select, qualifiers, view).map(Plan::Project)
        }
        TableFactor::TableFunction { expr, alias } => {
            window::compile_window(select, expr, alias.as_ref(), catalog).map(Plan::Window)
        }
        TableFactor::Derived {
            subquery, alias, ..
        } => rank::compile_ranked(select, subquery, alias.as_ref(), catalog),
        other => refuse(other, "this kind of FROM (a subquery, UNNEST, ...)"),
    }
}

/// The name of an unaliased output column: a column's own (last) name,
/// else `EXPR$<position>` as Flink names it.
fn default_name(expr: &ast::Expr, position: usize) -> String {
    match expr {
        ast::Expr::Identifier(ident) => ident.value.clone(),
        ast::Expr::CompoundIdentifier(parts) => parts
            .last()
            .map(|ident| ident.value.clone())
            .unwrap_or_default(),
        _ => format!("EXPR${position}"),
    }
}

/// `condition` (of `clause`: `WHERE`, `HAVING`) bound with `names`; it must
/// be a `BOOLEAN`.
fn bind_condition(
    names: &mut dyn crate::expr::Names,
    condition: Option<&ast::Expr>,
    clause: &str,
) -> Result<Option<crate::expr::Expr>, SqlError> {
    let Some(condition) = condition else {
        return Ok(None);
    };
    let (bound, ty) = crate::expr::Binder::with_names(names).bind(condition)?;
    if !ty.may_be(crate::datum::SqlType::Boolean) {
        return Err(SqlError::at(
            condition.span(),
            format!("{clause} needs a BOOLEAN condition, found {}", ty.name()),
        ));
    }
    Ok(Some(bound))
}

/// An output column named `name` computing `expr` (`item`: its place, for
/// an error), unless an earlier one in `columns` has the name already.
fn output_column(
    columns: &[OutputColumn],
    name: String,
    expr: crate::expr::Expr,
    copied: Option<usize>,
    item: &SelectItem,
) -> Result<OutputColumn, SqlError> {
    if columns.iter().any(|column| column.name == name) {
        return Err(SqlError::at(
            item.span(),
            format!("two output columns are named `{name}`; give one another name with AS"),
        ));
    }
    let mut key_json =
        serde_json::to_vec(&name).map_err(|error| SqlError::at(item.span(), error.to_string()))?;
    key_json.push(b':');
    Ok(OutputColumn {
        name,
        key_json,
        expr,
        copied,
    })
}

/// Appends `datum` as the JSON value of the output column `column`.
fn write_datum(datum: &Datum<'_>, column: &str, out: &mut Vec<u8>) -> Result<(), EvalError> {
    datum
        .write_json(out)
        .map_err(|reason| EvalError(format!("column `{column}`: {reason}")))
}
