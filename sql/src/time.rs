//! Time in SQL: `TIMESTAMP_LTZ(3)` values (ms since the Unix epoch, shown
//! in UTC, the session time zone), `TO_TIMESTAMP_LTZ`, `DATE_FORMAT` with
//! Java's pattern letters (as Flink takes them), and `INTERVAL` literals.

use chrono::{DateTime, Datelike, NaiveDateTime, Timelike, Utc};

/// `ms` as `yyyy-MM-dd HH:mm:ss.SSS` in UTC (what `CAST(ts AS STRING)`
/// gives); out-of-range instants as their number of ms.
pub fn format_timestamp(ms: i64) -> String {
    match DateTime::<Utc>::from_timestamp_millis(ms) {
        Some(time) => time.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
        None => ms.to_string(),
    }
}

/// `ms` as JSON writes a `TIMESTAMP_LTZ`: [`format_timestamp`] and `Z`.
pub fn format_instant(ms: i64) -> String {
    let mut text = format_timestamp(ms);
    text.push('Z');
    text
}

/// A timestamp string (`yyyy-MM-dd HH:mm:ss[.fff]`, or with a `T`, in
/// UTC) as ms, as `DATE_FORMAT` and `CAST(.. AS TIMESTAMP_LTZ)` read it.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let text = text.trim().trim_end_matches('Z');
    ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .or_else(|| {
            chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .and_then(|date| date.and_hms_opt(0, 0, 0))
        })
        .map(|time| time.and_utc().timestamp_millis())
}

/// `TO_TIMESTAMP_LTZ(n, precision)`: `n` seconds (precision 0) or ms (3)
/// since the epoch.
pub fn to_timestamp_ltz(n: i64, precision: u32) -> Option<i64> {
    let ms = match precision {
        0 => n.checked_mul(1000)?,
        3 => n,
        _ => return None,
    };
    DateTime::<Utc>::from_timestamp_millis(ms).map(|_| ms)
}

/// One run of a `DATE_FORMAT` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternPart {
    /// Text written as it is (quoted in the pattern, or not a letter).
    Literal(String),
    /// A field: the letter and how many times it is repeated.
    Field(char, usize),
}

/// A `DATE_FORMAT` pattern (Java's `SimpleDateFormat` letters: `yyyy yy
/// MM MMM dd HH hh mm ss SSS a EEE D`), parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatePattern(Vec<PatternPart>);

impl DatePattern {
    /// Parses `pattern`; an unsupported letter is an error.
    pub fn parse(pattern: &str) -> Result<DatePattern, String> {
        let mut parts = Vec::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\'' {
                let mut literal = String::new();
                loop {
                    match chars.next() {
                        None => return Err(format!("unclosed quote in pattern `{pattern}`")),
                        Some('\'') if chars.peek() == Some(&'\'') => {
                            chars.next();
                            literal.push('\'');
                        }
                        Some('\'') => break,
                        Some(other) => literal.push(other),
                    }
                }
                // `''` outside text is one quote.
                if literal.is_empty() {
                    literal.push('\'');
                }
                parts.push(PatternPart::Literal(literal));
            } else if c.is_ascii_alphabetic() {
                let mut count = 1;
                while chars.peek() == Some(&c) {
                    chars.next();
                    count += 1;
                }
                if !matches!(
                    c,
                    'y' | 'M' | 'd' | 'H' | 'h' | 'm' | 's' | 'S' | 'a' | 'E' | 'D'
                ) {
                    return Err(format!(
                        "pattern letter `{c}` of `{pattern}` is not supported (y M d H h m s S a E D are)"
                    ));
                }
                parts.push(PatternPart::Field(c, count));
            } else {
                parts.push(PatternPart::Literal(c.to_string()));
            }
        }
        Ok(DatePattern(parts))
    }

    /// `ms` in UTC, formatted; `None` out of range.
    pub fn format(&self, ms: i64) -> Option<String> {
        let time = DateTime::<Utc>::from_timestamp_millis(ms)?;
        let mut out = String::new();
        for part in &self.0 {
            match part {
                PatternPart::Literal(text) => out.push_str(text),
                PatternPart::Field(letter, count) => write_field(&mut out, &time, *letter, *count),
            }
        }
        Some(out)
    }
}

fn write_field(out: &mut String, time: &DateTime<Utc>, letter: char, count: usize) {
    let number = |out: &mut String, value: i64, width: usize| {
        out.push_str(&format!("{value:0width$}"));
    };
    match letter {
        'y' if count == 2 => number(out, i64::from(time.year()).rem_euclid(100), 2),
        'y' => number(out, i64::from(time.year()), count),
        'M' if count >= 4 => out.push_str(&time.format("%B").to_string()),
        'M' if count == 3 => out.push_str(&time.format("%b").to_string()),
        'M' => number(out, i64::from(time.month()), count),
        'd' => number(out, i64::from(time.day()), count),
        'D' => number(out, i64::from(time.ordinal()), count),
        'H' => number(out, i64::from(time.hour()), count),
        'h' => number(out, i64::from(time.hour12().1), count),
        'm' => number(out, i64::from(time.minute()), count),
        's' => number(out, i64::from(time.second()), count),
        'S' => {
            // Java pads the milliseconds, it does not scale them.
            number(out, i64::from(time.timestamp_subsec_millis()), count)
        }
        'a' => out.push_str(if time.hour() < 12 { "AM" } else { "PM" }),
        'E' if count >= 4 => out.push_str(&time.format("%A").to_string()),
        _ => out.push_str(&time.format("%a").to_string()),
    }
}

/// The ms of `INTERVAL '<text>' <unit>` (units `DAY`, `HOUR`, `MINUTE`,
/// `SECOND`, `MILLISECOND`, singular or plural; the text an integer, or
/// for seconds a decimal).
pub fn interval_ms(text: &str, unit: &str) -> Result<i64, String> {
    let per_unit: i64 = match unit.to_ascii_uppercase().trim_end_matches('S') {
        "DAY" => 86_400_000,
        "HOUR" => 3_600_000,
        "MINUTE" => 60_000,
        "SECOND" => 1000,
        "MILLISECOND" => 1,
        other => {
            return Err(format!(
                "interval unit `{other}` is not supported (DAY, HOUR, MINUTE, SECOND, MILLISECOND are)"
            ));
        }
    };
    let text = text.trim();
    let ms = match text.parse::<i64>() {
        Ok(n) => n.checked_mul(per_unit),
        Err(_) if per_unit == 1000 => text
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && (s * 1000.0).fract() == 0.0)
            .map(|s| (s * 1000.0) as i64),
        Err(_) => None,
    };
    ms.ok_or_else(|| format!("`{text}` is not a whole number of {unit} within range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_format_and_parse_in_utc() {
        assert_eq!(
            format_timestamp(1_700_000_000_123),
            "2023-11-14 22:13:20.123"
        );
        assert_eq!(
            parse_timestamp("2023-11-14 22:13:20.123"),
            Some(1_700_000_000_123)
        );
        assert_eq!(
            parse_timestamp("2023-11-14T22:13:20Z"),
            Some(1_700_000_000_000)
        );
        assert_eq!(parse_timestamp("2023-11-14"), Some(1_699_920_000_000));
        assert_eq!(parse_timestamp("yesterday"), None);
        assert_eq!(to_timestamp_ltz(2, 0), Some(2000));
        assert_eq!(to_timestamp_ltz(2, 6), None);
    }

    #[test]
    fn date_patterns_use_java_letters() {
        let pattern = DatePattern::parse("yyyy-MM-dd'T'HH:mm:ss.SSS EEE ''a''").unwrap();
        assert_eq!(
            pattern.format(1_700_000_000_123).unwrap(),
            "2023-11-14T22:13:20.123 Tue 'PM'"
        );
        assert!(DatePattern::parse("yyyy-QQ").is_err());
        assert!(DatePattern::parse("'open").is_err());
    }

    #[test]
    fn intervals_are_milliseconds() {
        assert_eq!(interval_ms("1", "SECOND"), Ok(1000));
        assert_eq!(interval_ms("10", "MINUTES"), Ok(600_000));
        assert_eq!(interval_ms("1.5", "SECOND"), Ok(1500));
        assert!(interval_ms("1", "MONTH").is_err());
        assert!(interval_ms("x", "DAY").is_err());
    }
}
