"""pii-redact (Python): masks e-mail addresses (``ada@example.com`` becomes
``a***@example.com``) and card numbers (13 to 19 digits, single spaces or
dashes allowed between them; all but the last four digits become ``*``)
in every string of a JSON value. Same behaviour, byte for byte, as
``plugins/pii-redact`` (Rust)."""

import sluice

_EMAIL_PUNCTUATION = frozenset(".-_%+")


def _is_alnum(c):
    return c.isascii() and c.isalnum()


def _is_email_char(c):
    return _is_alnum(c) or c in _EMAIL_PUNCTUATION


def _mask_emails(text):
    out = []  # one character per item: the local part is counted back in it
    count = 0
    i = 0
    n = len(text)
    while i < n:
        if text[i] == "@":
            local_len = 0
            while local_len < len(out) and _is_email_char(out[-1 - local_len]):
                local_len += 1
            j = i + 1
            while j < n and _is_email_char(text[j]):
                j += 1
            domain = text[i + 1 : j].rstrip(".")
            if local_len > 0 and "." in domain and not domain.startswith("."):
                keep = len(out) - local_len
                first = out[keep]
                del out[keep:]
                out.append(first)
                out.extend("***@")
                out.extend(domain)
                i += 1 + len(domain)
                count += 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out), count


def _mask_card_numbers(text):
    out = []
    count = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c.isascii() and c.isdigit() and (i == 0 or not _is_alnum(text[i - 1])):
            end = i
            digits = 0
            last_digit_end = i
            while end < n:
                if text[end].isascii() and text[end].isdigit():
                    digits += 1
                    end += 1
                    last_digit_end = end
                elif text[end] in " -" and end + 1 < n and text[end + 1].isascii() and text[end + 1].isdigit():
                    end += 1
                else:
                    break
            followed_by_alnum = last_digit_end < n and _is_alnum(text[last_digit_end])
            if 13 <= digits <= 19 and not followed_by_alnum:
                seen = 0
                for ch in text[i:last_digit_end]:
                    if ch.isdigit():
                        seen += 1
                        out.append(ch if digits - seen < 4 else "*")
                    else:
                        out.append(ch)
                count += 1
            else:
                out.append(text[i:last_digit_end])
            i = last_digit_end
            continue
        out.append(c)
        i += 1
    return "".join(out), count


def redact_text(text):
    """Masks e-mail addresses and card numbers; returns (text, count)."""
    if "@" not in text and not any(c.isdigit() for c in text):
        return text, 0
    text, emails = _mask_emails(text)
    text, cards = _mask_card_numbers(text)
    return text, emails + cards


def redact_value(value):
    """Redacts every string inside a parsed JSON value; returns
    (value, count)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        total = 0
        for index, item in enumerate(value):
            value[index], count = redact_value(item)
            total += count
        return value, total
    if isinstance(value, dict):
        total = 0
        for key in value:
            value[key], count = redact_value(value[key])
            total += count
        return value, total
    return value, 0


class PiiRedact(sluice.Transform):
    def process(self, record, out):
        value, redactions = redact_value(record.json())
        if redactions:
            sluice.counter_add("redactions", redactions)
        out.emit_json(value)


Transformer = sluice.export(PiiRedact)
