// pii-redact (JavaScript): masks e-mail addresses (`ada@example.com` becomes
// `a***@example.com`) and card numbers (13 to 19 digits, single spaces or
// dashes allowed between them; all but the last four digits become `*`) in
// every string of a JSON value. Same behaviour, byte for byte, as
// plugins/pii-redact (Rust).

import { counterAdd, exportTransform } from "./sluice.js";

const isDigit = (c) => c !== undefined && c >= "0" && c <= "9";
const isAlnum = (c) => c !== undefined && /^[0-9A-Za-z]$/.test(c);
const isEmailChar = (c) => isAlnum(c) || c === "." || c === "_" || c === "%" || c === "+" || c === "-";

function maskEmails(chars) {
  const out = [];
  let count = 0;
  let i = 0;
  while (i < chars.length) {
    if (chars[i] === "@") {
      let localLen = 0;
      while (localLen < out.length && isEmailChar(out[out.length - 1 - localLen])) localLen++;
      let j = i + 1;
      while (j < chars.length && isEmailChar(chars[j])) j++;
      let domain = chars.slice(i + 1, j).join("").replace(/\.+$/, "");
      if (localLen > 0 && domain.includes(".") && !domain.startsWith(".")) {
        const keep = out.length - localLen;
        const first = out[keep];
        out.length = keep;
        out.push(first, ..."***@", ...domain); // one character per item
        i += 1 + domain.length;
        count++;
        continue;
      }
    }
    out.push(chars[i]);
    i++;
  }
  return [out, count];
}

function maskCardNumbers(chars) {
  const out = [];
  let count = 0;
  let i = 0;
  while (i < chars.length) {
    if (isDigit(chars[i]) && (i === 0 || !isAlnum(chars[i - 1]))) {
      let end = i;
      let digits = 0;
      let lastDigitEnd = i;
      while (end < chars.length) {
        if (isDigit(chars[end])) {
          digits++;
          end++;
          lastDigitEnd = end;
        } else if ((chars[end] === " " || chars[end] === "-") && isDigit(chars[end + 1])) {
          end++;
        } else {
          break;
        }
      }
      if (digits >= 13 && digits <= 19 && !isAlnum(chars[lastDigitEnd])) {
        let seen = 0;
        for (const c of chars.slice(i, lastDigitEnd)) {
          if (isDigit(c)) {
            seen++;
            out.push(digits - seen < 4 ? c : "*");
          } else {
            out.push(c);
          }
        }
        count++;
      } else {
        out.push(...chars.slice(i, lastDigitEnd));
      }
      i = lastDigitEnd;
      continue;
    }
    out.push(chars[i]);
    i++;
  }
  return [out, count];
}

/** Masks e-mail addresses and card numbers: [text, count]. */
export function redactText(text) {
  if (!text.includes("@") && !/[0-9]/.test(text)) return [text, 0];
  const [afterEmails, emails] = maskEmails(Array.from(text));
  const [afterCards, cards] = maskCardNumbers(Array.from(afterEmails.join("")));
  return [afterCards.join(""), emails + cards];
}

function redactValue(value) {
  if (typeof value === "string") return redactText(value);
  let total = 0;
  if (Array.isArray(value)) {
    value.forEach((item, index) => {
      const [redacted, count] = redactValue(item);
      value[index] = redacted;
      total += count;
    });
  } else if (value instanceof Map) {
    for (const [key, item] of value) {
      const [redacted, count] = redactValue(item);
      value.set(key, redacted);
      total += count;
    }
  }
  return [value, total];
}

class PiiRedact {
  process(record, out) {
    const [value, redactions] = redactValue(record.json());
    if (redactions > 0) counterAdd("redactions", redactions);
    out.emitJson(value);
  }
}

export const transformer = exportTransform(PiiRedact);
