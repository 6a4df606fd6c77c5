//! Interval joins: `SELECT ... FROM person P JOIN auction A ON P.id =
//! A.seller AND A.date_time BETWEEN P.date_time AND P.date_time + INTERVAL
//! '10' SECOND [WHERE ...]`, onto the host's interval join.
//!
//! Both sides are parts of the operator's one input (views such as
//! Nexmark's `person` and `auction`, or Kafka topics); the join key is one
//! column of each; the time bound says how far the right side's event time
//! may lie from the left's (`lower <= right - left <= upper`). The join
//! emits `{"left": <left record>, "right": <right record>}`, which the
//! query's `SELECT` and `WHERE` then read as a projection does: `P.name` is
//! the field `name` of the left record.

use super::project::compile_columns;
use super::{Catalog, ProjectPlan, TableView, bind_condition, refuse};
use crate::datum::SqlType;
use crate::error::SqlError;
use crate::expr::{Bound, Expr, Names, Scope};
use sluice_json::FieldPath;
use sqlparser::ast::{
    self, BinaryOperator, Ident, JoinConstraint, JoinOperator, Spanned, TableFactor,
};
use sqlparser::tokenizer::Span;

/// One side of an interval join.
#[derive(Debug, Clone)]
pub struct JoinInput {
    /// The table as the query names it.
    pub table: String,
    /// Its view, where the table is one (a part of the input by a
    /// column's value); `None`: a table the host tells apart itself (a
    /// Kafka topic).
    pub view: Option<TableView>,
    /// The join key's column.
    pub key: FieldPath,
}

/// A compiled interval join.
#[derive(Debug, Clone)]
pub struct JoinPlan {
    /// The `FROM` table.
    pub left: JoinInput,
    /// The `JOIN` table.
    pub right: JoinInput,
    /// Smallest `right.time - left.time`, ms.
    pub lower: i64,
    /// Largest `right.time - left.time`, ms.
    pub upper: i64,
    /// The event-time column the bound names.
    pub time_column: String,
    /// What each joined record `{"left": .., "right": ..}` becomes.
    pub project: ProjectPlan,
}

/// Which side of the join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Left,
    Right,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Left => "left",
            Side::Right => "right",
        }
    }
}

/// The names of both sides: a column is qualified by its side's table
/// name or alias, and read from that side of the joined record.
struct JoinNames<'s> {
    scope: &'s mut Scope,
    left: Vec<String>,
    right: Vec<String>,
}

impl JoinNames<'_> {
    /// The side and the column's own path (`None`: not qualified by a
    /// side).
    fn split<'p>(&self, parts: &'p [Ident]) -> Option<(Side, &'p [Ident])> {
        let (qualifier, rest) = parts.split_first()?;
        if rest.is_empty() {
            return None;
        }
        if self.left.contains(&qualifier.value) {
            Some((Side::Left, rest))
        } else if self.right.contains(&qualifier.value) {
            Some((Side::Right, rest))
        } else {
            None
        }
    }

    /// The path of `parts` (of `side`) in the joined record.
    fn joined_path(side: Side, parts: &[Ident]) -> FieldPath {
        let mut pointer = format!("/{}", side.name());
        for part in parts {
            pointer.push('/');
            pointer.push_str(&part.value.replace('~', "~0").replace('/', "~1"));
        }
        FieldPath::Pointer(pointer)
    }

    /// A side's column as its own path (the join key).
    fn own_path(parts: &[Ident]) -> FieldPath {
        Scope::default().path_of(parts)
    }
}

impl Names for JoinNames<'_> {
    fn column(&mut self, parts: &[Ident], span: Span) -> Result<Bound, SqlError> {
        match self.split(parts) {
            Some((side, rest)) => {
                let path = Self::joined_path(side, rest);
                Ok((Expr::Column(self.scope.column(path)), SqlType::Unknown))
            }
            None => Err(SqlError::at(
                span,
                format!(
                    "qualify the columns of a join with their table: {}.{}",
                    self.left.last().map_or("t", String::as_str),
                    parts.last().map_or("column", |ident| ident.value.as_str())
                ),
            )),
        }
    }
}

/// Compiles a `SELECT` whose `FROM` is `left JOIN right ON ...`.
pub(super) fn compile_join(
    select: &ast::Select,
    from: &ast::TableWithJoins,
    catalog: &Catalog,
) -> Result<JoinPlan, SqlError> {
    let [join] = from.joins.as_slice() else {
        return refuse(&from.joins[1], "joining more than two tables");
    };
    let on = match &join.join_operator {
        JoinOperator::Join(JoinConstraint::On(on))
        | JoinOperator::Inner(JoinConstraint::On(on)) => on,
        JoinOperator::Join(_) | JoinOperator::Inner(_) => {
            return refuse(join, "a join without ON (the keys and the time bound)");
        }
        _ => {
            return refuse(
                join,
                "outer, cross and other joins (an inner interval join is supported)",
            );
        }
    };
    let left = side_table(&from.relation, catalog)?;
    let right = side_table(&join.relation, catalog)?;
    if left.names.iter().any(|name| right.names.contains(name)) {
        return Err(SqlError::at(
            join.relation.span(),
            "give the two sides of the join different names (aliases)",
        ));
    }
    let mut scope = Scope::default();
    let mut names = JoinNames {
        scope: &mut scope,
        left: left.names,
        right: right.names,
    };
    let condition = JoinCondition::parse(on, &names, catalog)?;
    let filter = bind_condition(&mut names, select.selection.as_ref(), "WHERE")?;
    match &select.group_by {
        ast::GroupByExpr::Expressions(keys, _) if keys.is_empty() => {}
        _ => {
            return refuse(
                select,
                "GROUP BY over a join (aggregate in a later SQL operator)",
            );
        }
    }
    if let Some(having) = &select.having {
        return refuse(having, "HAVING over a join");
    }
    let output = compile_columns(select, &mut names, false)?;
    let project = ProjectPlan {
        columns: scope.columns().to_vec(),
        filter,
        output,
    };
    Ok(JoinPlan {
        left: JoinInput {
            table: left.table,
            view: left.view,
            key: condition.left_key,
        },
        right: JoinInput {
            table: right.table,
            view: right.view,
            key: condition.right_key,
        },
        lower: condition.lower,
        upper: condition.upper,
        time_column: condition.time_column,
        project,
    })
}

/// A join side's table as the query names it.
struct SideTable {
    table: String,
    view: Option<TableView>,
    /// The names that qualify its columns (the table's and the alias).
    names: Vec<String>,
}

/// A join side's table, checked against the catalog.
fn side_table(relation: &TableFactor, catalog: &Catalog) -> Result<SideTable, SqlError> {
    let TableFactor::Table {
        name, alias, args, ..
    } = relation
    else {
        return refuse(
            relation,
            "this kind of table in a join (a subquery, a table function, ...)",
        );
    };
    if args.is_some() {
        return refuse(relation, "a table function in a join");
    }
    let table = name.to_string();
    let view = catalog.table(&table, name.span())?.cloned();
    if view.is_none() && table == "input" {
        return Err(SqlError::at(
            name.span(),
            "each side of a join is a part of the input: a table such as Nexmark's `person` and `auction`, or a Kafka topic",
        ));
    }
    let mut names = vec![table.clone()];
    if let Some(alias) = alias {
        names.push(alias.name.value.clone());
    }
    Ok(SideTable { table, view, names })
}

/// The `ON` of an interval join: one key of each side, equal, and a bound
/// on the right side's event time relative to the left's.
struct JoinCondition {
    left_key: FieldPath,
    right_key: FieldPath,
    lower: i64,
    upper: i64,
    time_column: String,
}

/// The shape the `ON` of a join must have (for messages).
const JOIN_SHAPE: &str = "a join's ON is `l.key = r.key AND r.time BETWEEN l.time [- INTERVAL ..] AND l.time + INTERVAL ..` (or the same bound with >= and <=)";

impl JoinCondition {
    fn parse(on: &ast::Expr, names: &JoinNames<'_>, catalog: &Catalog) -> Result<Self, SqlError> {
        let mut conjuncts = Vec::new();
        flatten_and(on, &mut conjuncts);
        let mut keys: Option<(FieldPath, FieldPath)> = None;
        let (mut lower, mut upper) = (None::<i64>, None::<i64>);
        let mut time_column = None::<String>;
        let mut note_time = |column: &str, span: Span| -> Result<(), SqlError> {
            match &time_column {
                Some(known) if known != column => Err(SqlError::at(
                    span,
                    "both sides' event time is one column: name it alike on each side",
                )),
                _ => {
                    time_column = Some(column.to_string());
                    Ok(())
                }
            }
        };
        for conjunct in conjuncts {
            let span = conjunct.span();
            match conjunct {
                ast::Expr::BinaryOp {
                    left,
                    op: BinaryOperator::Eq,
                    right,
                } if time_term(left, names, catalog).is_none()
                    && time_term(right, names, catalog).is_none() =>
                {
                    let (Some((a_side, a)), Some((b_side, b))) =
                        (column_of(left, names), column_of(right, names))
                    else {
                        return Err(SqlError::at(span, JOIN_SHAPE));
                    };
                    if a_side == b_side {
                        return Err(SqlError::at(
                            span,
                            "a join key compares a column of each side",
                        ));
                    }
                    if keys.is_some() {
                        return refuse(
                            conjunct,
                            "joining on more than one key (combine them in an earlier SQL operator)",
                        );
                    }
                    keys = Some(match a_side {
                        Side::Left => (a, b),
                        Side::Right => (b, a),
                    });
                }
                ast::Expr::Between {
                    expr,
                    negated: false,
                    low,
                    high,
                } => {
                    let terms = (
                        time_term(expr, names, catalog),
                        time_term(low, names, catalog),
                        time_term(high, names, catalog),
                    );
                    let (Some(x), Some(lo), Some(hi)) = terms else {
                        return Err(SqlError::at(span, JOIN_SHAPE));
                    };
                    let x = x?;
                    let (lo, hi) = (lo?, hi?);
                    if lo.side != hi.side || lo.side == x.side {
                        return Err(SqlError::at(span, JOIN_SHAPE));
                    }
                    note_time(&x.column, span)?;
                    note_time(&lo.column, span)?;
                    // x.t + x.o in [o.t + lo.o, o.t + hi.o].
                    let (from, to) = (lo.offset - x.offset, hi.offset - x.offset);
                    let (from, to) = match x.side {
                        Side::Right => (from, to),
                        Side::Left => (-to, -from),
                    };
                    lower = Some(lower.map_or(from, |known| known.max(from)));
                    upper = Some(upper.map_or(to, |known| known.min(to)));
                }
                ast::Expr::BinaryOp { left, op, right }
                    if matches!(
                        op,
                        BinaryOperator::Eq
                            | BinaryOperator::Gt
                            | BinaryOperator::GtEq
                            | BinaryOperator::Lt
                            | BinaryOperator::LtEq
                    ) =>
                {
                    let (Some(a), Some(b)) = (
                        time_term(left, names, catalog),
                        time_term(right, names, catalog),
                    ) else {
                        return Err(SqlError::at(span, JOIN_SHAPE));
                    };
                    let (a, b) = (a?, b?);
                    if a.side == b.side {
                        return Err(SqlError::at(span, JOIN_SHAPE));
                    }
                    note_time(&a.column, span)?;
                    note_time(&b.column, span)?;
                    // a.t + a.o  op  b.t + b.o, as right - left op bound.
                    let (op, bound) = match a.side {
                        Side::Right => (op.clone(), b.offset - a.offset),
                        Side::Left => (flip(op), a.offset - b.offset),
                    };
                    if op == BinaryOperator::Eq {
                        lower = Some(lower.map_or(bound, |k| k.max(bound)));
                        upper = Some(upper.map_or(bound, |k| k.min(bound)));
                        continue;
                    }
                    match op {
                        BinaryOperator::GtEq => lower = Some(lower.map_or(bound, |k| k.max(bound))),
                        BinaryOperator::Gt => {
                            lower = Some(lower.map_or(bound + 1, |k| k.max(bound + 1)))
                        }
                        BinaryOperator::LtEq => upper = Some(upper.map_or(bound, |k| k.min(bound))),
                        _ => upper = Some(upper.map_or(bound - 1, |k| k.min(bound - 1))),
                    }
                }
                other => return Err(SqlError::at(other.span(), JOIN_SHAPE)),
            }
        }
        let Some((left_key, right_key)) = keys else {
            return Err(SqlError::at(on.span(), format!("no key: {JOIN_SHAPE}")));
        };
        let (Some(lower), Some(upper), Some(time_column)) = (lower, upper, time_column) else {
            return Err(SqlError::at(
                on.span(),
                format!("an interval join needs a time bound on both ends: {JOIN_SHAPE}"),
            ));
        };
        if lower > upper {
            return Err(SqlError::at(
                on.span(),
                "the join's time bound is empty: its lower end is above its upper end",
            ));
        }
        Ok(JoinCondition {
            left_key,
            right_key,
            lower,
            upper,
            time_column,
        })
    }
}

/// `a AND b AND ...` as its parts.
fn flatten_and<'e>(expr: &'e ast::Expr, out: &mut Vec<&'e ast::Expr>) {
    match expr {
        ast::Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            flatten_and(left, out);
            flatten_and(right, out);
        }
        ast::Expr::Nested(inner) => flatten_and(inner, out),
        other => out.push(other),
    }
}

/// The comparison seen from the other side: `a > b` is `b < a`.
fn flip(op: &BinaryOperator) -> BinaryOperator {
    match op {
        BinaryOperator::Eq => BinaryOperator::Eq,
        BinaryOperator::Gt => BinaryOperator::Lt,
        BinaryOperator::GtEq => BinaryOperator::LtEq,
        BinaryOperator::Lt => BinaryOperator::Gt,
        _ => BinaryOperator::GtEq,
    }
}

/// A side's column: its side and its own path.
fn column_of(expr: &ast::Expr, names: &JoinNames<'_>) -> Option<(Side, FieldPath)> {
    let parts = match expr {
        ast::Expr::CompoundIdentifier(parts) => parts.as_slice(),
        ast::Expr::Nested(inner) => return column_of(inner, names),
        _ => return None,
    };
    let (side, rest) = names.split(parts)?;
    Some((side, JoinNames::own_path(rest)))
}

/// `side.time [+|- INTERVAL ..]`.
struct TimeTerm {
    side: Side,
    column: String,
    offset: i64,
}

/// `expr` as a [`TimeTerm`]: `None` if it names no side's column at all;
/// an error if it names a column that is not the event time.
fn time_term(
    expr: &ast::Expr,
    names: &JoinNames<'_>,
    catalog: &Catalog,
) -> Option<Result<TimeTerm, SqlError>> {
    match expr {
        ast::Expr::Nested(inner) => time_term(inner, names, catalog),
        ast::Expr::BinaryOp { left, op, right }
            if matches!(op, BinaryOperator::Plus | BinaryOperator::Minus) =>
        {
            let term = time_term(left, names, catalog)?;
            Some(term.and_then(|mut term| {
                let ms = super::window::interval(right)?;
                term.offset += if *op == BinaryOperator::Plus { ms } else { -ms };
                Ok(term)
            }))
        }
        ast::Expr::CompoundIdentifier(parts) => {
            let (side, rest) = names.split(parts)?;
            let column = match rest {
                [column] => column,
                _ => return None,
            };
            if !catalog
                .time_columns
                .iter()
                .any(|t| t.eq_ignore_ascii_case(&column.value))
            {
                return None;
            }
            Some(Ok(TimeTerm {
                side,
                column: column.value.clone(),
                offset: 0,
            }))
        }
        _ => None,
    }
}

impl JoinPlan {
    /// What the query became, for `sluice sql explain` and the dashboard.
    pub fn explain(&self) -> String {
        let side = |input: &JoinInput| match &input.view {
            Some(view) => format!(
                "{} (where {} = '{}') keyed by {}",
                input.table,
                view.column,
                view.value,
                crate::expr::path_sql(&input.key)
            ),
            None => format!(
                "{} keyed by {}",
                input.table,
                crate::expr::path_sql(&input.key)
            ),
        };
        format!(
            "join:    {} with {}, right.{time} - left.{time} in [{}, {}] ms\nthen\n{}",
            side(&self.left),
            side(&self.right),
            self.lower,
            self.upper,
            self.project.explain(),
            time = self.time_column,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Plan, compile};

    fn catalog() -> Catalog {
        Catalog::input([])
            .with_time_column("date_time")
            .with_view("person", "event_type", "person")
            .with_view("auction", "event_type", "auction")
    }

    fn join(sql: &str) -> JoinPlan {
        match compile(sql, &catalog()) {
            Ok(Plan::Join(plan)) => plan,
            Ok(other) => panic!("not a join: {other:?}"),
            Err(error) => panic!("{}", error.show(sql)),
        }
    }

    fn error(sql: &str) -> String {
        match compile(sql, &catalog()) {
            Ok(plan) => panic!("compiled: {plan:?}"),
            Err(error) => error.show(sql),
        }
    }

    #[test]
    fn the_bound_is_read_in_every_spelling_as_right_minus_left() {
        let on = |condition: &str| {
            let plan = join(&format!(
                "SELECT P.id, A.id AS auction FROM person P JOIN auction A ON P.id = A.seller AND {condition}"
            ));
            (plan.lower, plan.upper)
        };
        assert_eq!(
            on("A.date_time BETWEEN P.date_time AND P.date_time + INTERVAL '10' SECOND"),
            (0, 10_000)
        );
        assert_eq!(
            on("P.date_time BETWEEN A.date_time - INTERVAL '10' SECOND AND A.date_time"),
            (0, 10_000)
        );
        assert_eq!(
            on(
                "A.date_time >= P.date_time - INTERVAL '1' SECOND AND A.date_time < P.date_time + INTERVAL '2' SECOND"
            ),
            (-1000, 1999)
        );
        assert_eq!(
            on("P.date_time <= A.date_time AND P.date_time + INTERVAL '5' SECOND >= A.date_time"),
            (0, 5000)
        );
        assert_eq!(on("A.date_time = P.date_time"), (0, 0));
    }

    #[test]
    fn a_join_reads_its_sides_views_keys_and_columns() {
        let plan = join(
            "SELECT P.id, P.name, A.reserve FROM person AS P JOIN auction AS A \
             ON A.seller = P.id AND A.date_time BETWEEN P.date_time AND P.date_time + INTERVAL '10' SECOND \
             WHERE A.reserve > 100",
        );
        assert_eq!(plan.left.view.as_ref().unwrap().value, "person");
        assert_eq!(plan.right.view.as_ref().unwrap().value, "auction");
        assert_eq!(plan.left.key, FieldPath::Top("id".into()));
        assert_eq!(plan.right.key, FieldPath::Top("seller".into()));
        assert_eq!(plan.time_column, "date_time");
        let text = plan.explain();
        assert!(text.contains("where:   (right.reserve > 100)"), "{text}");
        assert!(
            text.contains("id = left.id, name = left.name, reserve = right.reserve"),
            "{text}"
        );
    }

    #[test]
    fn joins_outside_the_interval_join_are_refused_with_their_position() {
        let cases = [
            (
                "SELECT P.id FROM person P JOIN auction A ON P.id = A.seller",
                "a time bound on both ends",
            ),
            (
                "SELECT P.id FROM person P JOIN auction A ON A.date_time BETWEEN P.date_time AND P.date_time + INTERVAL '1' SECOND",
                "no key",
            ),
            (
                "SELECT P.id FROM person P JOIN auction A ON P.id = A.seller AND P.name = A.name AND A.date_time = P.date_time",
                "more than one key",
            ),
            (
                "SELECT P.id FROM person P JOIN auction A ON P.id = A.seller AND A.expires BETWEEN P.date_time AND P.date_time + INTERVAL '1' SECOND",
                "a join's ON is",
            ),
            (
                "SELECT id FROM person P JOIN auction A ON P.id = A.seller AND A.date_time = P.date_time",
                "qualify the columns",
            ),
            (
                "SELECT P.id FROM person P JOIN person Q ON P.id = Q.id AND P.date_time = Q.date_time JOIN auction A ON P.id = A.seller",
                "more than two tables",
            ),
            (
                "SELECT P.id FROM person P JOIN auction A ON P.id = A.seller AND A.date_time BETWEEN P.date_time + INTERVAL '2' SECOND AND P.date_time",
                "is empty",
            ),
            (
                "SELECT * FROM person P JOIN auction A ON P.id = A.seller AND A.date_time = P.date_time",
                "list the columns",
            ),
            (
                "SELECT P.id FROM person P FULL JOIN auction A ON P.id = A.seller AND A.date_time = P.date_time",
                "outer, cross",
            ),
        ];
        for (sql, expected) in cases {
            let shown = error(sql);
            assert!(shown.contains(expected), "{sql}\n{shown}");
            assert!(shown.contains('^'), "no position: {sql}\n{shown}");
        }
    }
}
