//! `LIKE` patterns (`%` any run, `_` one character, an optional `ESCAPE`
//! character), compiled once to a regular expression when the pattern is a
//! literal, per record when it is not.

use super::{EvalError, Expr, Row, describe, fail};
use crate::datum::Datum;
use regex::Regex;

/// Largest compiled regular expression (of a pattern or `REGEXP_LIKE`), so
/// that a record's pattern cannot make the host compile something huge.
pub(crate) const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A `LIKE` pattern.
#[derive(Debug, Clone)]
pub enum LikePattern {
    /// A literal pattern, compiled.
    Compiled(Regex),
    /// A pattern computed per record.
    Dynamic {
        /// The pattern.
        pattern: Box<Expr>,
        /// The escape character.
        escape: Option<char>,
    },
}

impl LikePattern {
    /// Compiles a literal `pattern`.
    pub fn compile(pattern: &str, escape: Option<char>) -> Result<LikePattern, String> {
        Ok(LikePattern::Compiled(like_regex(pattern, escape)?))
    }

    /// Whether `text` matches (`None` when the pattern is NULL).
    pub(crate) fn matches(&self, text: &str, row: Row<'_>) -> Result<Option<bool>, EvalError> {
        match self {
            LikePattern::Compiled(regex) => Ok(Some(regex.is_match(text))),
            LikePattern::Dynamic { pattern, escape } => match pattern.eval(row)? {
                Datum::Null => Ok(None),
                Datum::Str(pattern) => {
                    let regex = like_regex(&pattern, *escape).map_err(EvalError)?;
                    Ok(Some(regex.is_match(text)))
                }
                other => fail(format!(
                    "a LIKE pattern must be a STRING, found {}",
                    describe(&other)
                )),
            },
        }
    }
}

/// The regular expression matching what `pattern` matches, whole.
fn like_regex(pattern: &str, escape: Option<char>) -> Result<Regex, String> {
    let mut regex = String::from("(?s)^");
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            match chars.next() {
                Some(next @ ('%' | '_')) => regex.push_str(&regex::escape(&next.to_string())),
                Some(next) if Some(next) == escape => {
                    regex.push_str(&regex::escape(&next.to_string()))
                }
                _ => {
                    return Err(format!(
                        "invalid escape in LIKE pattern `{pattern}`: the escape character must precede `%`, `_` or itself"
                    ));
                }
            }
            continue;
        }
        match c {
            '%' => regex.push_str(".*"),
            '_' => regex.push('.'),
            other => regex.push_str(&regex::escape(&other.to_string())),
        }
    }
    regex.push('$');
    regex::RegexBuilder::new(&regex)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|error| format!("LIKE pattern `{pattern}`: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn like(text: &str, pattern: &str, escape: Option<char>) -> bool {
        LikePattern::compile(pattern, escape)
            .unwrap()
            .matches(text, Row::Fields(&[]))
            .unwrap()
            .unwrap()
    }

    #[test]
    fn percent_and_underscore_match_runs_and_characters() {
        assert!(like("hello", "h%o", None));
        assert!(like("hello", "h_llo", None));
        assert!(!like("hello", "h_lo", None));
        assert!(like("a\nb", "a_b", None));
        assert!(like("a.b", "a.b", None));
        assert!(!like("axb", "a.b", None));
        assert!(like("ü", "_", None));
        assert!(like("50%", "50!%", Some('!')));
        assert!(!like("500", "50!%", Some('!')));
        assert!(LikePattern::compile("50!", Some('!')).is_err());
    }
}
