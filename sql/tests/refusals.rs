//! Every construct outside the supported subset is refused at start-up with
//! its position in the SQL text and what is supported instead — never run
//! with a different meaning.

use sluice_sql::{Catalog, SqlError, compile};

fn refusal(sql: &str) -> SqlError {
    match compile(sql, &Catalog::input(["orders".to_string()])) {
        Ok(plan) => panic!("`{sql}` was accepted: {plan:?}"),
        Err(error) => error,
    }
}

#[test]
fn refused_constructs_name_their_position_and_the_alternative() {
    // (query, line, column, part of the message)
    let cases: &[(&str, u64, u64, &str)] = &[
        ("SELEC a FROM input", 1, 1, "Expected"),
        ("SELECT a FROM input WHERE", 1, 26, "Expected"),
        (
            "SELECT a FROM nowhere",
            1,
            15,
            "unknown table `nowhere`: the operator's input is `input` or `orders`",
        ),
        (
            "SELECT a FROM input; SELECT b FROM input",
            1,
            22,
            "one query per operator",
        ),
        (
            "INSERT INTO t SELECT a FROM input",
            1,
            1,
            "only a query (SELECT)",
        ),
        ("SELECT a FROM input ORDER BY a", 1, 30, "ORDER BY"),
        ("SELECT a FROM input LIMIT 3", 1, 27, "LIMIT"),
        ("SELECT DISTINCT a FROM input", 1, 1, "ROW_NUMBER"),
        (
            "SELECT a, COUNT(*) FROM input GROUP BY a",
            1,
            40,
            "GROUP BY needs a window table function",
        ),
        (
            "SELECT COUNT(*) FROM input",
            1,
            8,
            "the aggregate COUNT needs GROUP BY over a window",
        ),
        (
            "SELECT a FROM input JOIN orders ON a = b",
            1,
            15,
            "each side of a join is a part of the input",
        ),
        (
            "SELECT o.a FROM orders o LEFT JOIN orders p ON o.a = p.a",
            1,
            36,
            "outer, cross and other joins",
        ),
        ("SELECT a FROM input, orders", 1, 22, "several tables"),
        (
            "SELECT a FROM (SELECT a FROM input)",
            1,
            16,
            "only as a window Top-N",
        ),
        (
            "SELECT a FROM input UNION SELECT a FROM input",
            1,
            1,
            "UNION",
        ),
        ("SELECT *, a FROM input", 1, 8, "`*` beside other columns"),
        (
            "SELECT a, b AS a FROM input",
            1,
            11,
            "two output columns are named `a`",
        ),
        ("SELECT UPPR(a) FROM input", 1, 8, "unknown function `UPPR`"),
        (
            "SELECT UPPER(1) FROM input",
            1,
            14,
            "UPPER needs STRING, found BIGINT",
        ),
        (
            "SELECT a FROM input\nWHERE 'x' + 1 > 2",
            2,
            7,
            "cannot compute STRING + BIGINT",
        ),
        (
            "SELECT a FROM input WHERE a = 'x' AND 1",
            1,
            39,
            "AND needs BOOLEAN, found BIGINT",
        ),
        (
            "SELECT a FROM input WHERE 1 + 2",
            1,
            27,
            "WHERE needs a BOOLEAN condition",
        ),
        (
            "SELECT CAST(a AS DECIMAL(10, 2)) FROM input",
            1,
            13,
            "CAST to DECIMAL(10,2) is not supported",
        ),
        (
            "SELECT CAST(a AS VARCHAR(5)) FROM input",
            1,
            13,
            "CAST to VARCHAR(5) is not supported",
        ),
        (
            "SELECT \"a\" FROM input",
            1,
            8,
            "strings are in single quotes",
        ),
        (
            "SELECT a FROM input WHERE a LIKE 'x!' ESCAPE '!'",
            1,
            34,
            "invalid escape",
        ),
        (
            "SELECT REGEXP_LIKE(a, '(') FROM input",
            1,
            23,
            "invalid regular expression",
        ),
        (
            "SELECT DATE_FORMAT(a, 'yyyy-QQ') FROM input",
            1,
            23,
            "pattern letter `Q`",
        ),
        (
            "SELECT a FROM input WHERE a IN (SELECT b FROM input)",
            1,
            27,
            "IN with a subquery",
        ),
        (
            "SELECT ROW_NUMBER() OVER (ORDER BY a) FROM input",
            1,
            8,
            "window functions",
        ),
        (
            "SELECT INTERVAL '1' MONTH FROM input",
            1,
            17,
            "interval unit `MONTH`",
        ),
        (
            "SELECT * FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(rowtime), INTERVAL '1' SECOND))",
            1,
            1,
            "a window table function without GROUP BY",
        ),
        (
            "SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '1' SECOND))\nGROUP BY window_start, window_end",
            1,
            59,
            "`ts` is not the event time",
        ),
        ("SELECT a FROM input WITH x", 1, 21, "Expected"),
    ];
    let mut wrong = Vec::new();
    for (sql, line, column, fragment) in cases {
        let error = refusal(sql);
        if (error.line, error.column) != (*line, *column) || !error.message.contains(fragment) {
            wrong.push(format!(
                "{sql}\n  expected {line}:{column} with `{fragment}`\n  found    {error}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn an_error_shows_its_line_with_a_caret() {
    let sql = "SELECT a,\n       UPPR(b)\nFROM input";
    assert_eq!(
        refusal(sql).show(sql).lines().skip(1).collect::<Vec<_>>(),
        ["         UPPR(b)", "         ^"]
    );
}

#[test]
fn nesting_however_deep_is_refused_not_a_crash() {
    let deep = format!("SELECT {}1 FROM input", "1 + ".repeat(24_000));
    let error = refusal(&deep);
    assert!(error.message.contains("nested more than"), "{error}");
    let long = format!("SELECT {}1 FROM input", "1 + ".repeat(100_000));
    let error = refusal(&long);
    assert!(error.message.contains("tokens"), "{error}");
    let parens = format!(
        "SELECT {}1{} FROM input",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    let error = refusal(&parens);
    assert!(
        error.message.contains("recursion") || error.message.contains("nested"),
        "{error}"
    );
}
