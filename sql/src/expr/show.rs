//! Expressions written back as SQL, for `sluice sql explain` and the
//! dashboard: what the query became, with every operation in parentheses.

use super::{ArithOp, CastTarget, CompareOp, Expr, Function, LikePattern};
use crate::datum::Datum;
use sluice_json::FieldPath;

/// A field path as SQL: `name`, or `a.b` for a nested field, quoted
/// where needed.
pub fn path_sql(path: &FieldPath) -> String {
    match path {
        FieldPath::Top(name) => quoted_name(name),
        FieldPath::Pointer(pointer) => pointer
            .split('/')
            .skip(1)
            .map(|part| quoted_name(&part.replace("~1", "/").replace("~0", "~")))
            .collect::<Vec<_>>()
            .join("."),
    }
}

impl Expr {
    /// The expression as SQL text, its columns named by `columns` (the
    /// plan's field paths).
    pub fn to_sql(&self, columns: &[FieldPath]) -> String {
        self.to_sql_with(&|index| match columns.get(index) {
            Some(path) => path_sql(path),
            None => format!("#{index}"),
        })
    }

    /// The expression as SQL text, column `i` written as `column(i)`.
    pub fn to_sql_with(&self, column: &dyn Fn(usize) -> String) -> String {
        let show = |expr: &Expr| expr.to_sql_with(column);
        let list = |items: &[Expr]| items.iter().map(show).collect::<Vec<_>>().join(", ");
        let not = |negated: bool| if negated { "NOT " } else { "" };
        match self {
            Expr::Column(index) => column(*index),
            Expr::Literal(value) => literal(value),
            Expr::Not(expr) => format!("(NOT {})", show(expr)),
            Expr::And(a, b) => format!("({} AND {})", show(a), show(b)),
            Expr::Or(a, b) => format!("({} OR {})", show(a), show(b)),
            Expr::Compare(op, a, b) => {
                let op = match op {
                    CompareOp::Eq => "=",
                    CompareOp::NotEq => "<>",
                    CompareOp::Lt => "<",
                    CompareOp::LtEq => "<=",
                    CompareOp::Gt => ">",
                    CompareOp::GtEq => ">=",
                };
                format!("({} {op} {})", show(a), show(b))
            }
            Expr::Arithmetic(op, a, b) => {
                let op = match op {
                    ArithOp::Add => "+",
                    ArithOp::Sub => "-",
                    ArithOp::Mul => "*",
                    ArithOp::Div => "/",
                    ArithOp::Mod => "%",
                };
                format!("({} {op} {})", show(a), show(b))
            }
            Expr::Negate(expr) => format!("(- {})", show(expr)),
            Expr::IsNull { expr, negated } => format!("({} IS {}NULL)", show(expr), not(*negated)),
            Expr::IsBool {
                expr,
                value,
                negated,
            } => format!(
                "({} IS {}{})",
                show(expr),
                not(*negated),
                if *value { "TRUE" } else { "FALSE" }
            ),
            Expr::IsDistinct {
                left,
                right,
                negated,
            } => format!(
                "({} IS {}DISTINCT FROM {})",
                show(left),
                not(*negated),
                show(right)
            ),
            Expr::InList {
                expr,
                list: items,
                negated,
            } => format!("({} {}IN ({}))", show(expr), not(*negated), list(items)),
            Expr::Between {
                expr,
                low,
                high,
                negated,
            } => format!(
                "({} {}BETWEEN {} AND {})",
                show(expr),
                not(*negated),
                show(low),
                show(high)
            ),
            Expr::Like {
                expr,
                pattern,
                negated,
            } => {
                let pattern = match pattern {
                    LikePattern::Compiled(regex) => format!("/{}/", regex.as_str()),
                    LikePattern::Dynamic { pattern, .. } => show(pattern),
                };
                format!("({} {}LIKE {pattern})", show(expr), not(*negated))
            }
            Expr::Case {
                operand,
                whens,
                otherwise,
            } => {
                let mut text = String::from("CASE");
                if let Some(operand) = operand {
                    text.push(' ');
                    text.push_str(&show(operand));
                }
                for (when, then) in whens {
                    text.push_str(&format!(" WHEN {} THEN {}", show(when), show(then)));
                }
                if let Some(otherwise) = otherwise {
                    text.push_str(&format!(" ELSE {}", show(otherwise)));
                }
                text + " END"
            }
            Expr::Cast { expr, to, try_cast } => format!(
                "{}({} AS {})",
                if *try_cast { "TRY_CAST" } else { "CAST" },
                show(expr),
                match to {
                    CastTarget::Integer { name, .. } => name,
                    other => other.sql_type().name(),
                }
            ),
            Expr::Coalesce(items) => format!("COALESCE({})", list(items)),
            Expr::Call(function, args) => match function {
                Function::Trim(side) => {
                    format!("TRIM({side:?} FROM {})", list(args)).to_uppercase()
                }
                other => format!("{}({})", other.name(), list(args)),
            },
        }
    }
}

/// A column name, in backticks unless it is a plain identifier.
fn quoted_name(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("`{}`", name.replace('`', "``"))
    }
}

fn literal(value: &Datum<'_>) -> String {
    match value {
        Datum::Null => "NULL".to_string(),
        Datum::Str(s) => format!("'{}'", s.replace('\'', "''")),
        Datum::Interval(ms) => format!("INTERVAL '{ms}' MILLISECOND"),
        Datum::Timestamp(ms) => format!("TO_TIMESTAMP_LTZ({ms}, 3)"),
        other => other.to_text().map(|t| t.into_owned()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use crate::{Catalog, Plan, compile};

    #[test]
    fn a_plan_explains_itself_in_sql() {
        let plan = compile(
            "SELECT id, UPPER(`user name`) AS u, payload.amount * 2 AS a FROM input WHERE key % 10 <> 0 AND NOT s LIKE 'a%' AND x IN (1, 2)",
            &Catalog::input([]),
        )
        .unwrap();
        assert!(matches!(plan, Plan::Project(_)));
        assert_eq!(
            plan.explain(),
            "reads:   key, s, x, id, `user name`, payload.amount\n\
             where:   ((((key % 10) <> 0) AND (NOT (s LIKE /(?s)^a.*$/))) AND (x IN (1, 2)))\n\
             columns: id = id (copied), u = UPPER(`user name`), a = (payload.amount * 2)"
        );
    }
}
