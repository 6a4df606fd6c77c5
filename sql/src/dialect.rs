//! Flink SQL's dialect for sqlparser.
//!
//! sqlparser's generic dialect parses Flink's queries except for one thing:
//! the table arguments of window table functions, `TUMBLE(TABLE input,
//! DESCRIPTOR(ts), ...)` and `SESSION(TABLE input PARTITION BY k, ...)`
//! (checked against sqlparser 0.64: "Expected: ), found: input"). This
//! dialect parses `TABLE name [PARTITION BY key | (key, ...)]` where an
//! expression may stand, as the call `TABLE(name, key, ...)`
//! ([`TABLE_ARGUMENT`]): a function call no query can write, since
//! `TABLE(` is not how a table argument starts. Identifiers are quoted
//! with backticks, as in Flink.

use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident,
    ObjectName,
};
use sqlparser::dialect::Dialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

/// The name of the call a table argument becomes: its first argument is
/// the table, the others its `PARTITION BY` keys.
pub const TABLE_ARGUMENT: &str = "TABLE";

/// Flink SQL, as far as Sluice reads it (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct FlinkDialect;

impl Dialect for FlinkDialect {
    fn is_identifier_start(&self, ch: char) -> bool {
        ch.is_alphabetic() || ch == '_'
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        ch.is_alphanumeric() || ch == '_' || ch == '$'
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '`'
    }

    fn parse_prefix(&self, parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        let table_argument = parser.peek_keyword(Keyword::TABLE)
            && matches!(parser.peek_nth_token_ref(1).token, Token::Word(_));
        table_argument.then(|| parse_table_argument(parser))
    }
}

/// `TABLE name [PARTITION BY key | (key, ...)]`, as `TABLE(name, key, ...)`.
fn parse_table_argument(parser: &mut Parser) -> Result<Expr, ParserError> {
    parser.expect_keyword(Keyword::TABLE)?;
    let name = parser.parse_identifier()?;
    let mut args = vec![argument(Expr::Identifier(name))];
    if parser.parse_keywords(&[Keyword::PARTITION, Keyword::BY]) {
        // One key, or several in parentheses: a comma would be ambiguous
        // with the window function's next argument (as in Flink).
        match parser.parse_expr()? {
            Expr::Tuple(keys) => args.extend(keys.into_iter().map(argument)),
            Expr::Nested(key) => args.push(argument(*key)),
            key => args.push(argument(key)),
        }
    }
    Ok(Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(TABLE_ARGUMENT)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args,
            clauses: Vec::new(),
        }),
        within_group: Vec::new(),
        filter: None,
        null_treatment: None,
        over: None,
    }))
}

fn argument(expr: Expr) -> FunctionArg {
    FunctionArg::Unnamed(FunctionArgExpr::Expr(expr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parses(sql: &str) -> String {
        match Parser::parse_sql(&FlinkDialect, sql) {
            Ok(statements) => statements[0].to_string(),
            Err(error) => format!("error: {error}"),
        }
    }

    #[test]
    fn window_table_functions_take_table_arguments() {
        assert_eq!(
            parses("SELECT * FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND))"),
            "SELECT * FROM TABLE(TUMBLE(TABLE(input), DESCRIPTOR(ts), INTERVAL '1' SECOND))"
        );
        assert_eq!(
            parses(
                "SELECT * FROM TABLE(SESSION(TABLE bids PARTITION BY (a, b), DESCRIPTOR(ts), INTERVAL '5' MINUTES))"
            ),
            "SELECT * FROM TABLE(SESSION(TABLE(bids, a, b), DESCRIPTOR(ts), INTERVAL '5' MINUTES))"
        );
        assert_eq!(
            parses(
                "SELECT * FROM TABLE(SESSION(TABLE bids PARTITION BY a, DESCRIPTOR(ts), INTERVAL '5' MINUTES))"
            ),
            "SELECT * FROM TABLE(SESSION(TABLE(bids, a), DESCRIPTOR(ts), INTERVAL '5' MINUTES))"
        );
    }

    #[test]
    fn backticks_quote_identifiers() {
        assert_eq!(
            parses("SELECT `value`, `a b` FROM input"),
            "SELECT `value`, `a b` FROM input"
        );
    }
}
