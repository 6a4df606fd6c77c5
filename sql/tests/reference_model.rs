//! Random expressions over random records agree with a reference
//! evaluator: a direct, slow transcription of the SQL semantics Sluice
//! documents (docs/sql.md), written apart from the compiled evaluator.
//! NULL semantics, BIGINT overflow, string edge cases (multi-byte
//! characters, escapes), and the output JSON always valid UTF-8.

use proptest::prelude::*;
use serde_json::{Value, json};
use sluice_json::fields::{FieldPath, Spans, extract, extract_into_with_spans};
use sluice_sql::expr::Row;
use sluice_sql::{Catalog, Plan, compile};

/// The model's values.
#[derive(Debug, Clone, PartialEq)]
enum M {
    Null,
    Bool(bool),
    Int(i64),
    Str(String),
}

/// The model's expressions (each also written as SQL).
#[derive(Debug, Clone)]
enum E {
    Col(&'static str),
    Int(i64),
    Str(String),
    Null,
    Add(Box<E>, Box<E>),
    Sub(Box<E>, Box<E>),
    Mul(Box<E>, Box<E>),
    Div(Box<E>, Box<E>),
    Mod(Box<E>, Box<E>),
    Neg(Box<E>),
    Eq(Box<E>, Box<E>),
    Lt(Box<E>, Box<E>),
    And(Box<E>, Box<E>),
    Or(Box<E>, Box<E>),
    Not(Box<E>),
    IsNull(Box<E>),
    In(Box<E>, Vec<E>),
    Between(Box<E>, Box<E>, Box<E>),
    Like(Box<E>, String),
    Case(Vec<(E, E)>, Box<E>),
    Coalesce(Vec<E>),
    Upper(Box<E>),
    Length(Box<E>),
    Concat(Box<E>, Box<E>),
    Substring(Box<E>, i64, i64),
    CastInt(Box<E>),
    CastStr(Box<E>),
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn sql(e: &E) -> String {
    let bin = |a: &E, op: &str, b: &E| format!("({} {op} {})", sql(a), sql(b));
    match e {
        E::Col(name) => name.to_string(),
        E::Int(i) if *i < 0 => format!("({i})"),
        E::Int(i) => i.to_string(),
        E::Str(s) => quote(s),
        E::Null => "NULL".into(),
        E::Add(a, b) => bin(a, "+", b),
        E::Sub(a, b) => bin(a, "-", b),
        E::Mul(a, b) => bin(a, "*", b),
        E::Div(a, b) => bin(a, "/", b),
        E::Mod(a, b) => bin(a, "%", b),
        E::Neg(a) => format!("(- {})", sql(a)),
        E::Eq(a, b) => bin(a, "=", b),
        E::Lt(a, b) => bin(a, "<", b),
        E::And(a, b) => bin(a, "AND", b),
        E::Or(a, b) => bin(a, "OR", b),
        E::Not(a) => format!("(NOT {})", sql(a)),
        E::IsNull(a) => format!("({} IS NULL)", sql(a)),
        E::In(a, list) => format!(
            "({} IN ({}))",
            sql(a),
            list.iter().map(sql).collect::<Vec<_>>().join(", ")
        ),
        E::Between(a, lo, hi) => format!("({} BETWEEN {} AND {})", sql(a), sql(lo), sql(hi)),
        E::Like(a, pattern) => format!("({} LIKE {})", sql(a), quote(pattern)),
        E::Case(whens, otherwise) => format!(
            "CASE {} ELSE {} END",
            whens
                .iter()
                .map(|(w, t)| format!("WHEN {} THEN {}", sql(w), sql(t)))
                .collect::<Vec<_>>()
                .join(" "),
            sql(otherwise)
        ),
        E::Coalesce(items) => format!(
            "COALESCE({})",
            items.iter().map(sql).collect::<Vec<_>>().join(", ")
        ),
        E::Upper(a) => format!("UPPER({})", sql(a)),
        E::Length(a) => format!("CHAR_LENGTH({})", sql(a)),
        E::Concat(a, b) => bin(a, "||", b),
        E::Substring(a, from, len) => format!("SUBSTRING({} FROM {from} FOR {len})", sql(a)),
        E::CastInt(a) => format!("CAST({} AS BIGINT)", sql(a)),
        E::CastStr(a) => format!("CAST({} AS STRING)", sql(a)),
    }
}

/// Model evaluation: `Err(())` where a record must be dead-lettered.
fn eval(e: &E, record: &Value) -> Result<M, ()> {
    let int = |e: &E| -> Result<Option<i64>, ()> {
        match eval(e, record)? {
            M::Null => Ok(None),
            M::Int(i) => Ok(Some(i)),
            _ => Err(()),
        }
    };
    let text = |e: &E| -> Result<Option<String>, ()> {
        match eval(e, record)? {
            M::Null => Ok(None),
            M::Str(s) => Ok(Some(s)),
            _ => Err(()),
        }
    };
    let truth = |e: &E| -> Result<Option<bool>, ()> {
        match eval(e, record)? {
            M::Null => Ok(None),
            M::Bool(b) => Ok(Some(b)),
            _ => Err(()),
        }
    };
    let arith = |a: &E, b: &E, f: fn(i64, i64) -> Option<i64>| -> Result<M, ()> {
        let (a, b) = (int(a)?, int(b)?);
        match (a, b) {
            (Some(a), Some(b)) => f(a, b).map(M::Int).ok_or(()),
            _ => Ok(M::Null),
        }
    };
    // Ordering of two values: None with a NULL; types must match.
    let order = |a: &M, b: &M| -> Result<Option<std::cmp::Ordering>, ()> {
        match (a, b) {
            (M::Null, _) | (_, M::Null) => Ok(None),
            (M::Int(a), M::Int(b)) => Ok(Some(a.cmp(b))),
            (M::Str(a), M::Str(b)) => Ok(Some(a.cmp(b))),
            (M::Bool(a), M::Bool(b)) => Ok(Some(a.cmp(b))),
            _ => Err(()),
        }
    };
    Ok(match e {
        E::Col(name) => match record.get(*name) {
            None | Some(Value::Null) => M::Null,
            Some(Value::Number(n)) => M::Int(n.as_i64().ok_or(())?),
            Some(Value::String(s)) => M::Str(s.clone()),
            Some(Value::Bool(b)) => M::Bool(*b),
            Some(_) => return Err(()),
        },
        E::Int(i) => M::Int(*i),
        E::Str(s) => M::Str(s.clone()),
        E::Null => M::Null,
        E::Add(a, b) => arith(a, b, i64::checked_add)?,
        E::Sub(a, b) => arith(a, b, i64::checked_sub)?,
        E::Mul(a, b) => arith(a, b, i64::checked_mul)?,
        E::Div(a, b) => arith(a, b, i64::checked_div)?,
        E::Mod(a, b) => arith(a, b, i64::checked_rem)?,
        E::Neg(a) => match int(a)? {
            Some(a) => M::Int(a.checked_neg().ok_or(())?),
            None => M::Null,
        },
        E::Eq(a, b) => match order(&eval(a, record)?, &eval(b, record)?)? {
            Some(o) => M::Bool(o.is_eq()),
            None => M::Null,
        },
        E::Lt(a, b) => match order(&eval(a, record)?, &eval(b, record)?)? {
            Some(o) => M::Bool(o.is_lt()),
            None => M::Null,
        },
        E::And(a, b) => match truth(a)? {
            Some(false) => M::Bool(false),
            left => match (left, truth(b)?) {
                (_, Some(false)) => M::Bool(false),
                (Some(true), Some(true)) => M::Bool(true),
                _ => M::Null,
            },
        },
        E::Or(a, b) => match truth(a)? {
            Some(true) => M::Bool(true),
            left => match (left, truth(b)?) {
                (_, Some(true)) => M::Bool(true),
                (Some(false), Some(false)) => M::Bool(false),
                _ => M::Null,
            },
        },
        E::Not(a) => match truth(a)? {
            Some(b) => M::Bool(!b),
            None => M::Null,
        },
        E::IsNull(a) => M::Bool(eval(a, record)? == M::Null),
        E::In(a, list) => {
            let value = eval(a, record)?;
            if value == M::Null {
                return Ok(M::Null);
            }
            let mut result = M::Bool(false);
            for item in list {
                match order(&value, &eval(item, record)?)? {
                    Some(o) if o.is_eq() => return Ok(M::Bool(true)),
                    None => result = M::Null,
                    Some(_) => {}
                }
            }
            result
        }
        E::Between(a, lo, hi) => {
            let value = eval(a, record)?;
            let above = order(&value, &eval(lo, record)?)?.map(|o| o.is_ge());
            let below = order(&value, &eval(hi, record)?)?.map(|o| o.is_le());
            match (above, below) {
                (Some(false), _) | (_, Some(false)) => M::Bool(false),
                (Some(true), Some(true)) => M::Bool(true),
                _ => M::Null,
            }
        }
        E::Like(a, pattern) => match text(a)? {
            Some(s) => M::Bool(like(
                &s.chars().collect::<Vec<_>>(),
                &pattern.chars().collect::<Vec<_>>(),
            )),
            None => M::Null,
        },
        E::Case(whens, otherwise) => {
            for (when, then) in whens {
                if truth(when)? == Some(true) {
                    return eval(then, record);
                }
            }
            eval(otherwise, record)?
        }
        E::Coalesce(items) => {
            for item in items {
                let value = eval(item, record)?;
                if value != M::Null {
                    return Ok(value);
                }
            }
            M::Null
        }
        E::Upper(a) => match text(a)? {
            Some(s) => M::Str(s.to_uppercase()),
            None => M::Null,
        },
        E::Length(a) => match text(a)? {
            Some(s) => M::Int(s.chars().count() as i64),
            None => M::Null,
        },
        E::Concat(a, b) => match (text(a)?, text(b)?) {
            (Some(a), Some(b)) => M::Str(a + &b),
            _ => M::Null,
        },
        E::Substring(a, from, len) => match text(a)? {
            None => M::Null,
            Some(s) => {
                if *len < 0 {
                    return Err(());
                }
                let chars: Vec<char> = s.chars().collect();
                let n = chars.len() as i64;
                let start = match *from {
                    f if f > 0 => f - 1,
                    0 => 0,
                    f => (n + f).max(0),
                };
                let end = (start + len).min(n);
                M::Str(if start >= end {
                    String::new()
                } else {
                    chars[start as usize..end as usize].iter().collect()
                })
            }
        },
        E::CastInt(a) => match eval(a, record)? {
            M::Null => M::Null,
            M::Int(i) => M::Int(i),
            M::Bool(b) => M::Int(i64::from(b)),
            M::Str(s) => {
                let s = s.trim();
                match s.parse::<i64>() {
                    Ok(i) => M::Int(i),
                    Err(_) => {
                        let f: f64 = s.parse().map_err(|_| ())?;
                        let t = f.trunc();
                        let limit = 2f64.powi(63);
                        if !(-limit..limit).contains(&t) {
                            return Err(());
                        }
                        M::Int(t as i64)
                    }
                }
            }
        },
        E::CastStr(a) => match eval(a, record)? {
            M::Null => M::Null,
            M::Int(i) => M::Str(i.to_string()),
            M::Bool(b) => M::Str(if b { "TRUE" } else { "FALSE" }.into()),
            M::Str(s) => M::Str(s),
        },
    })
}

/// `LIKE` by its definition: `%` any run, `_` one character.
fn like(text: &[char], pattern: &[char]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some(('%', rest)) => (0..=text.len()).any(|skip| like(&text[skip..], rest)),
        Some(('_', rest)) => !text.is_empty() && like(&text[1..], rest),
        Some((c, rest)) => text.first() == Some(c) && like(&text[1..], rest),
    }
}

fn small_string() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just('a'),
            Just('b'),
            Just('é'),
            Just('ß'),
            Just('😀'),
            Just(' '),
            Just('\''),
            Just('"'),
            Just('\\'),
            Just('\n'),
            Just('%'),
            Just('1'),
        ],
        0..6,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn int() -> impl Strategy<Value = i64> {
    prop_oneof![
        -5i64..5,
        Just(i64::MAX),
        Just(i64::MIN + 1),
        Just(4_611_686_018_427_387_904),
        any::<i64>(),
    ]
}

fn int_expr() -> impl Strategy<Value = E> {
    let leaf = prop_oneof![
        Just(E::Col("a")),
        Just(E::Col("b")),
        Just(E::Col("x")),
        int().prop_map(E::Int),
        Just(E::Null),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Add(a.into(), b.into())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Sub(a.into(), b.into())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Mul(a.into(), b.into())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Div(a.into(), b.into())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Mod(a.into(), b.into())),
            inner.clone().prop_map(|a| E::Neg(a.into())),
            str_leaf().prop_map(|a| E::Length(a.into())),
            str_leaf().prop_map(|a| E::CastInt(a.into())),
            prop::collection::vec(inner.clone(), 1..3).prop_map(E::Coalesce),
        ]
    })
}

fn str_leaf() -> impl Strategy<Value = E> {
    prop_oneof![
        Just(E::Col("s")),
        Just(E::Col("t")),
        Just(E::Col("x")),
        small_string().prop_map(E::Str),
    ]
}

fn str_expr() -> impl Strategy<Value = E> {
    str_leaf().prop_recursive(3, 10, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|a| E::Upper(a.into())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Concat(a.into(), b.into())),
            (inner.clone(), -4i64..6, 0i64..4).prop_map(|(a, from, len)| E::Substring(
                a.into(),
                from,
                len
            )),
            int_expr().prop_map(|a| E::CastStr(a.into())),
            (
                prop::collection::vec((bool_leaf(), inner.clone()), 1..3),
                inner.clone()
            )
                .prop_map(|(whens, otherwise)| E::Case(whens, otherwise.into())),
        ]
    })
}

fn bool_leaf() -> impl Strategy<Value = E> {
    prop_oneof![
        (int_expr(), int_expr()).prop_map(|(a, b)| E::Eq(a.into(), b.into())),
        (int_expr(), int_expr()).prop_map(|(a, b)| E::Lt(a.into(), b.into())),
        (str_leaf(), str_leaf()).prop_map(|(a, b)| E::Lt(a.into(), b.into())),
        int_expr().prop_map(|a| E::IsNull(a.into())),
        (str_leaf(), small_string()).prop_map(|(a, p)| E::Like(a.into(), p)),
        (int_expr(), prop::collection::vec(int_expr(), 1..4))
            .prop_map(|(a, list)| E::In(a.into(), list)),
        (int_expr(), int_expr(), int_expr()).prop_map(|(a, lo, hi)| E::Between(
            a.into(),
            lo.into(),
            hi.into()
        )),
    ]
}

fn bool_expr() -> impl Strategy<Value = E> {
    bool_leaf().prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::And(a.into(), b.into())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Or(a.into(), b.into())),
            inner.prop_map(|a| E::Not(a.into())),
        ]
    })
}

fn field_value() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        int().prop_map(|i| Some(json!(i))),
        small_string().prop_map(|s| Some(json!(s))),
    ]
}

fn record() -> impl Strategy<Value = Value> {
    (
        field_value(),
        field_value(),
        field_value(),
        field_value(),
        field_value(),
    )
        .prop_map(|(a, b, s, t, x)| {
            let mut object = serde_json::Map::new();
            for (name, value) in [("a", a), ("b", b), ("s", s), ("t", t), ("x", x)] {
                if let Some(value) = value {
                    object.insert(name.to_string(), value);
                }
            }
            Value::Object(object)
        })
}

/// The compiled query's verdict on `record`: the output value, or `None`
/// if filtered out, or `Err` if dead-lettered. The host reads a row two
/// ways (the fields' values, or their spans in the text: then plain
/// columns are copied); both must give the same verdict.
fn run(query: &str, record: &Value) -> Result<Option<Value>, String> {
    let Plan::Project(plan) =
        compile(query, &Catalog::input([])).map_err(|e| format!("compile: {e}"))?
    else {
        return Err("not a projection".to_string());
    };
    let text = serde_json::to_vec(record).map_err(|e| e.to_string())?;
    let found = extract(&text, &plan.columns).map_err(|e| e.to_string())?;
    let by_values = verdict(&plan, Row::Fields(&found), &text, None);
    let names = plan.top_level_names().ok_or("a nested column")?;
    let mut spans = vec![None; names.len()];
    extract_into_with_spans::<FieldPath>(
        &text[..],
        &[],
        &mut Vec::new(),
        Spans {
            names: &names,
            found: &mut spans,
        },
    )
    .map_err(|e| e.to_string())?;
    let row = Row::Spans {
        text: &text,
        spans: &spans,
    };
    let by_spans = verdict(&plan, row, &text, Some(&spans));
    if by_values != by_spans {
        return Err(format!(
            "invalid: read by values {by_values:?}, by spans {by_spans:?}"
        ));
    }
    by_values
}

fn verdict(
    plan: &sluice_sql::ProjectPlan,
    row: Row<'_>,
    text: &[u8],
    spans: Option<&[Option<(usize, usize)>]>,
) -> Result<Option<Value>, String> {
    if !plan.passes(row).map_err(|e| e.0)? {
        return Ok(None);
    }
    let mut out = Vec::new();
    plan.write(row, text, spans, &mut out).map_err(|e| e.0)?;
    let out = String::from_utf8(out).map_err(|_| "invalid UTF-8 written".to_string())?;
    serde_json::from_str(&out)
        .map(Some)
        .map_err(|e| format!("invalid JSON written: {e}: {out}"))
}

fn model_json(value: M) -> Value {
    match value {
        M::Null => Value::Null,
        M::Bool(b) => json!(b),
        M::Int(i) => json!(i),
        M::Str(s) => json!(s),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn projections_agree_with_the_model(
        ints in int_expr(),
        strings in str_expr(),
        record in record(),
    ) {
        let query = format!("SELECT {} AS i, {} AS s FROM input", sql(&ints), sql(&strings));
        let expected = eval(&ints, &record).and_then(|i| Ok((i, eval(&strings, &record)?)));
        let found = run(&query, &record);
        match (expected, found) {
            (Ok((i, s)), Ok(Some(found))) => {
                prop_assert_eq!(found, json!({"i": model_json(i), "s": model_json(s)}), "{}", query)
            }
            (Err(()), Err(reason)) => prop_assert!(!reason.starts_with("compile") && !reason.starts_with("invalid"), "{}: {}", query, reason),
            (expected, found) => prop_assert!(false, "{query} on {record}: model {expected:?}, compiled {found:?}"),
        }
    }

    #[test]
    fn filters_agree_with_the_model(condition in bool_expr(), record in record()) {
        let query = format!("SELECT * FROM input WHERE {}", sql(&condition));
        let expected = eval(&condition, &record);
        let found = run(&query, &record);
        match (expected, found) {
            (Ok(M::Bool(true)), Ok(Some(found))) => prop_assert_eq!(found, record),
            (Ok(M::Bool(false) | M::Null), Ok(None)) => {}
            (Err(()), Err(reason)) => prop_assert!(!reason.starts_with("compile"), "{}: {}", query, reason),
            (expected, found) => prop_assert!(false, "{query} on {record}: model {expected:?}, compiled {found:?}"),
        }
    }
}

#[test]
fn paths_read_are_the_columns_named() {
    let Ok(Plan::Project(plan)) = compile(
        "SELECT i.a, payload.amount, `we/ird~` FROM input AS i WHERE b > 1",
        &Catalog::input([]),
    ) else {
        panic!("not a projection");
    };
    assert_eq!(
        plan.columns,
        [
            FieldPath::Top("b".into()),
            FieldPath::Top("a".into()),
            FieldPath::Pointer("/payload/amount".into()),
            FieldPath::Top("we/ird~".into()),
        ]
    );
    assert_eq!(plan.top_level_names(), None);
}
