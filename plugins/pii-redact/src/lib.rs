//! Masks personal data in JSON values: e-mail addresses (`ada@example.com`
//! becomes `a***@example.com`) and card numbers (13 to 19 digits, spaces or
//! dashes allowed, all but the last four digits become `*`), wherever they
//! appear in a string, in any field.
//!
//! Config: `copy_to` (optional) names a side output that also receives
//! every redacted record (a tee: e.g. the Silver table beside a window
//! that aggregates the same stream).

use serde_json::Value;
use sluice_sdk::{Config, Emitter, Output, Record, Transform, export_transform, host};

struct PiiRedact {
    /// A side output that also receives every redacted record.
    copy_to: Option<String>,
}

impl Transform for PiiRedact {
    fn init(config: &Config) -> Result<Self, String> {
        Ok(PiiRedact {
            copy_to: config.get("copy_to").map(str::to_string),
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        let mut value: Value = record.value_json()?;
        let redactions = redact_value(&mut value);
        if redactions > 0 {
            host::counter_add("redactions", redactions);
        }
        let bytes = serde_json::to_vec(&value).map_err(|e| format!("cannot encode JSON: {e}"))?;
        if let Some(side) = &self.copy_to {
            let mut copy = Output::value(&bytes);
            if let Some(key) = record.key() {
                copy = copy.key(key);
            }
            if let Some(time) = record.event_time() {
                copy = copy.event_time(time);
            }
            out.side(side, copy);
        }
        out.emit_value(&bytes);
        Ok(())
    }
}

/// Redacts every string inside `value`; returns how many items were masked.
fn redact_value(value: &mut Value) -> u64 {
    match value {
        Value::String(text) => {
            let (masked, count) = redact_text(text);
            if count > 0 {
                *text = masked;
            }
            count
        }
        Value::Array(items) => items.iter_mut().map(redact_value).sum(),
        Value::Object(fields) => fields.values_mut().map(redact_value).sum(),
        _ => 0,
    }
}

/// Masks e-mail addresses and card numbers in `text`.
pub fn redact_text(text: &str) -> (String, u64) {
    let (text, emails) = mask_emails(text);
    let (text, cards) = mask_card_numbers(&text);
    (text, emails + cards)
}

fn is_email_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '%' | '+' | '-')
}

fn mask_emails(text: &str) -> (String, u64) {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut count = 0;
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '@' {
            // Local part: the e-mail characters just before '@' (already copied).
            let local_len = out.chars().rev().take_while(|c| is_email_char(*c)).count();
            let domain_len = chars[i + 1..]
                .iter()
                .take_while(|c| is_email_char(**c))
                .count();
            let domain: String = chars[i + 1..i + 1 + domain_len].iter().collect();
            let domain = domain.trim_end_matches('.');
            if local_len > 0 && domain.contains('.') && !domain.starts_with('.') {
                let keep = out.chars().count() - local_len;
                let first = out.chars().nth(keep).unwrap_or('*');
                out = out.chars().take(keep).collect();
                out.push(first);
                out.push_str("***@");
                out.push_str(domain);
                i += 1 + domain.chars().count();
                count += 1;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    (out, count)
}

fn mask_card_numbers(text: &str) -> (String, u64) {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut count = 0;
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() && (i == 0 || !chars[i - 1].is_ascii_alphanumeric()) {
            // A run of digits with single spaces or dashes between them.
            let mut end = i;
            let mut digits = 0;
            let mut last_digit_end = i;
            while end < chars.len() {
                if chars[end].is_ascii_digit() {
                    digits += 1;
                    end += 1;
                    last_digit_end = end;
                } else if matches!(chars[end], ' ' | '-')
                    && end + 1 < chars.len()
                    && chars[end + 1].is_ascii_digit()
                {
                    end += 1;
                } else {
                    break;
                }
            }
            let followed_by_alnum = chars
                .get(last_digit_end)
                .is_some_and(|c| c.is_ascii_alphanumeric());
            if (13..=19).contains(&digits) && !followed_by_alnum {
                let mut seen = 0;
                for &c in &chars[i..last_digit_end] {
                    if c.is_ascii_digit() {
                        seen += 1;
                        out.push(if digits - seen < 4 { c } else { '*' });
                    } else {
                        out.push(c);
                    }
                }
                count += 1;
                i = last_digit_end;
                continue;
            }
            out.extend(&chars[i..last_digit_end]);
            i = last_digit_end;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    (out, count)
}

export_transform!(PiiRedact);

#[cfg(test)]
mod tests {
    use super::redact_text;

    #[test]
    fn masks_emails_and_cards() {
        assert_eq!(redact_text("ada.17@example.com").0, "a***@example.com");
        assert_eq!(
            redact_text("mail me at bob@mail.example.org.").0,
            "mail me at b***@mail.example.org."
        );
        assert_eq!(redact_text("4111 1111 1111 1234").0, "**** **** **** 1234");
        assert_eq!(
            redact_text("card 4111-1111-1111-1234 ok").0,
            "card ****-****-****-1234 ok"
        );
        assert_eq!(redact_text("order 12345 of 2024").0, "order 12345 of 2024");
        assert_eq!(redact_text("no @ here").1, 0);
    }
}
