//! A query compiled into what a Sluice operator runs.
//!
//! `SELECT ... FROM input [WHERE ...]` becomes a [`ProjectPlan`]: the
//! fields to read from each record, a compiled condition, and the output
//! columns, written straight into the output record's JSON (a column that
//! is a plain top-level field is copied as the record's own JSON text).
//! Everything outside the supported subset is refused with its position.

use crate::datum::Datum;
use crate::dialect::FlinkDialect;
use crate::error::{SqlError, from_parser_message};
use crate::expr::{Binder, EvalError, Expr, Row, Scope};
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
/// and also the source's name where it has one.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// Table names the query may read (all the operator's input).
    pub tables: Vec<String>,
}

impl Catalog {
    /// The input stream as `input` and the `other` names given.
    pub fn input(other: impl IntoIterator<Item = String>) -> Catalog {
        let mut tables = vec!["input".to_string()];
        tables.extend(other.into_iter().filter(|name| name != "input"));
        Catalog { tables }
    }
}

/// A compiled query.
#[derive(Debug, Clone)]
pub enum Plan {
    /// A projection with an optional filter (one output record per input
    /// record that passes).
    Project(ProjectPlan),
}

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
    key_json: Vec<u8>,
    /// Its value.
    pub expr: Expr,
    /// For a plain top-level field: its column (row position), whose JSON
    /// text is copied as it is when its span is known.
    pub copied: Option<usize>,
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

fn compile_select(select: &ast::Select, catalog: &Catalog) -> Result<Plan, SqlError> {
    let whole = select.span();
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
    match &select.group_by {
        ast::GroupByExpr::Expressions(keys, modifiers)
            if keys.is_empty() && modifiers.is_empty() => {}
        _ => {
            return Err(SqlError::at(
                group_by_span(select).unwrap_or(whole),
                "GROUP BY is supported over a window table function (TUMBLE, HOP, SESSION, CUMULATE), which this version does not run yet; a GROUP BY without a window is not supported",
            ));
        }
    }
    if let Some(having) = &select.having {
        return refuse(having, "HAVING without GROUP BY over a window");
    }
    let qualifiers = input_table(select, catalog)?;
    let mut scope = Scope::new(qualifiers);
    let filter = match &select.selection {
        Some(condition) => {
            let mut binder = Binder::new(&mut scope);
            let (bound, ty) = binder.bind(condition)?;
            if !ty.may_be(crate::datum::SqlType::Boolean) {
                return Err(SqlError::at(
                    condition.span(),
                    format!("WHERE needs a BOOLEAN condition, found {}", ty.name()),
                ));
            }
            Some(bound)
        }
        None => None,
    };
    let mut columns = Vec::new();
    let mut whole_record = false;
    for (position, item) in select.projection.iter().enumerate() {
        let (expr, name) = match item {
            SelectItem::Wildcard(options) | SelectItem::QualifiedWildcard(_, options) => {
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
                whole_record = true;
                continue;
            }
            SelectItem::UnnamedExpr(expr) => (expr, default_name(expr, position)),
            SelectItem::ExprWithAlias { expr, alias } => (expr, alias.value.clone()),
            SelectItem::ExprWithAliases { .. } => {
                return refuse(item, "several aliases for one column");
            }
        };
        if columns
            .iter()
            .any(|column: &OutputColumn| column.name == name)
        {
            return Err(SqlError::at(
                item.span(),
                format!("two output columns are named `{name}`; give one another name with AS"),
            ));
        }
        let (bound, _) = Binder::new(&mut scope).bind(expr)?;
        let copied = match &bound {
            Expr::Column(index) => match &scope.columns()[*index] {
                FieldPath::Top(_) => Some(*index),
                FieldPath::Pointer(_) => None,
            },
            _ => None,
        };
        let mut key_json = serde_json::to_vec(&name)
            .map_err(|error| SqlError::at(item.span(), error.to_string()))?;
        key_json.push(b':');
        columns.push(OutputColumn {
            name,
            key_json,
            expr: bound,
            copied,
        });
    }
    Ok(Plan::Project(ProjectPlan {
        columns: scope.columns().to_vec(),
        filter,
        output: if whole_record {
            Output::Whole
        } else {
            Output::Columns(columns)
        },
    }))
}

fn group_by_span(select: &ast::Select) -> Option<Span> {
    match &select.group_by {
        ast::GroupByExpr::Expressions(keys, _) => keys.first().map(Spanned::span),
        ast::GroupByExpr::All(_) => None,
    }
}

/// Checks the `FROM` clause: one table of the catalog, no join; returns
/// the names that may qualify its columns (the table's and its alias).
fn input_table(select: &ast::Select, catalog: &Catalog) -> Result<Vec<String>, SqlError> {
    let from = match select.from.as_slice() {
        [one] => one,
        [] => return Err(SqlError::at(select.span(), "a query reads FROM input")),
        [_, second, ..] => return refuse(second, "reading several tables (joins)"),
    };
    if let Some(join) = from.joins.first() {
        return refuse(join, "joins (interval joins come in a later version)");
    }
    match &from.relation {
        TableFactor::Table {
            name, alias, args, ..
        } => {
            if args.is_some() {
                return Err(SqlError::at(
                    from.relation.span(),
                    "table functions other than TABLE(TUMBLE|HOP|SESSION|CUMULATE(...)) are not supported, and window table functions do not run in this version yet",
                ));
            }
            let table = name.to_string();
            if !catalog.tables.contains(&table) {
                return Err(SqlError::at(
                    name.span(),
                    format!(
                        "unknown table `{table}`: the operator's input is {}",
                        catalog
                            .tables
                            .iter()
                            .map(|t| format!("`{t}`"))
                            .collect::<Vec<_>>()
                            .join(" or ")
                    ),
                ));
            }
            let mut qualifiers = vec![table];
            if let Some(alias) = alias {
                qualifiers.push(alias.name.value.clone());
            }
            Ok(qualifiers)
        }
        TableFactor::TableFunction { .. } => Err(SqlError::at(
            from.relation.span(),
            "window table functions (TABLE(TUMBLE|HOP|SESSION|CUMULATE(...))) do not run in this version yet",
        )),
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
    /// ([`Datum::of_json_text`] of each span), and plain columns copied.
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

fn write_datum(datum: &Datum<'_>, column: &str, out: &mut Vec<u8>) -> Result<(), EvalError> {
    datum
        .write_json(out)
        .map_err(|reason| EvalError(format!("column `{column}`: {reason}")))
}
