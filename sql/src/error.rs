//! Errors that point into the SQL text: every refusal, at start-up, names
//! the line and column of what it refuses and says what is supported
//! instead; [`SqlError::show`] draws the line with a caret under it.

use sqlparser::tokenizer::{Location, Span};

/// A query that cannot run as written: where (1-based line and column in
/// the SQL text; 0 when the error is about the text as a whole) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SQL line {line}, column {column}: {message}")]
pub struct SqlError {
    /// 1-based line in the SQL text (0: no position).
    pub line: u64,
    /// 1-based column (in characters) on that line.
    pub column: u64,
    /// What is wrong, and what is supported instead.
    pub message: String,
}

impl SqlError {
    /// An error at `span`'s start.
    pub fn at(span: Span, message: impl Into<String>) -> SqlError {
        SqlError::at_location(span.start, message)
    }

    /// An error at `location`.
    pub fn at_location(location: Location, message: impl Into<String>) -> SqlError {
        SqlError {
            line: location.line,
            column: location.column,
            message: message.into(),
        }
    }

    /// An error about the text as a whole.
    pub fn whole(message: impl Into<String>) -> SqlError {
        SqlError {
            line: 0,
            column: 0,
            message: message.into(),
        }
    }

    /// The error with the offending line of `sql` and a caret under the
    /// column, as a terminal shows it:
    ///
    /// ```text
    /// SQL line 1, column 8: unknown function `UPPR`
    ///   SELECT UPPR(name) FROM input
    ///          ^
    /// ```
    pub fn show(&self, sql: &str) -> String {
        let Some(line) = usize::try_from(self.line)
            .ok()
            .and_then(|line| line.checked_sub(1))
            .and_then(|index| sql.lines().nth(index))
        else {
            return self.to_string();
        };
        let column = usize::try_from(self.column).unwrap_or(1).max(1);
        // Tabs keep their width under the caret.
        let pad: String = line
            .chars()
            .take(column - 1)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        format!("{self}\n  {line}\n  {pad}^")
    }
}

/// The position sqlparser writes at the end of its messages (`... at Line:
/// 3, Column: 14`), taken off the message.
pub(crate) fn from_parser_message(message: &str) -> SqlError {
    let message = message
        .strip_prefix("sql parser error: ")
        .unwrap_or(message);
    let Some(at) = message.rfind(" at Line: ") else {
        return SqlError::whole(message);
    };
    let (text, position) = message.split_at(at);
    let mut numbers = position
        .trim_start_matches(" at Line: ")
        .split(", Column: ")
        .map(|n| n.trim().parse::<u64>());
    match (numbers.next(), numbers.next()) {
        (Some(Ok(line)), Some(Ok(column))) => SqlError {
            line,
            column,
            message: text.to_string(),
        },
        _ => SqlError::whole(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_positions_are_taken_off_the_message() {
        let error = from_parser_message(
            "sql parser error: Expected: ), found: input at Line: 2, Column: 17",
        );
        assert_eq!(
            error,
            SqlError {
                line: 2,
                column: 17,
                message: "Expected: ), found: input".into()
            }
        );
        assert_eq!(from_parser_message("odd").line, 0);
    }

    #[test]
    fn the_caret_sits_under_the_column() {
        let error = SqlError {
            line: 2,
            column: 3,
            message: "here".into(),
        };
        assert_eq!(
            error.show("SELECT\n\tab c"),
            "SQL line 2, column 3: here\n  \tab c\n  \t ^"
        );
    }
}
