/*
 * pii-redact (C): masks e-mail addresses (`ada@example.com` becomes
 * `a***@example.com`) and card numbers (13 to 19 digits, single spaces or
 * dashes allowed between them; all but the last four digits become `*`) in
 * every string of a JSON value. Same behaviour, byte for byte, as
 * plugins/pii-redact (Rust): compact output, keys in input order (a repeated
 * key keeps its first position and its last value), numbers as written (an
 * exponent normalised as serde_json does).
 */
#include <string.h>

#include "sluice.h"

static bool is_alnum(uint8_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static bool is_email_char(uint8_t c) { return is_alnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-'; }

/* Masks e-mail addresses of `in` into `out`; returns how many. Works on
 * bytes: only ASCII bytes can be part of what is masked, as in the Rust
 * version's char-based logic. */
static uint64_t mask_emails(const uint8_t *in, size_t len, sluice_buf *out) {
  uint64_t count = 0;
  size_t i = 0;
  while (i < len) {
    if (in[i] == '@') {
      size_t local_len = 0;
      while (local_len < out->len && is_email_char(out->ptr[out->len - 1 - local_len])) local_len++;
      size_t j = i + 1;
      while (j < len && is_email_char(in[j])) j++;
      size_t domain_len = j - (i + 1);
      while (domain_len > 0 && in[i + domain_len] == '.') domain_len--;
      const uint8_t *domain = in + i + 1;
      if (local_len > 0 && domain_len > 0 && domain[0] != '.' && memchr(domain, '.', domain_len)) {
        out->len -= local_len - 1; /* keep the first character of the local part */
        sluice_buf_push_str(out, "***@");
        sluice_buf_push(out, domain, domain_len);
        i += 1 + domain_len;
        count++;
        continue;
      }
    }
    sluice_buf_push_byte(out, in[i]);
    i++;
  }
  return count;
}

static uint64_t mask_card_numbers(const uint8_t *in, size_t len, sluice_buf *out) {
  uint64_t count = 0;
  size_t i = 0;
  while (i < len) {
    if (is_digit(in[i]) && (i == 0 || !is_alnum(in[i - 1]))) {
      size_t end = i, digits = 0, last_digit_end = i;
      while (end < len) {
        if (is_digit(in[end])) {
          digits++;
          end++;
          last_digit_end = end;
        } else if ((in[end] == ' ' || in[end] == '-') && end + 1 < len && is_digit(in[end + 1])) {
          end++;
        } else {
          break;
        }
      }
      bool followed_by_alnum = last_digit_end < len && is_alnum(in[last_digit_end]);
      if (digits >= 13 && digits <= 19 && !followed_by_alnum) {
        size_t seen = 0;
        for (size_t k = i; k < last_digit_end; k++) {
          if (is_digit(in[k])) {
            seen++;
            sluice_buf_push_byte(out, digits - seen < 4 ? in[k] : '*');
          } else {
            sluice_buf_push_byte(out, in[k]);
          }
        }
        count++;
      } else {
        sluice_buf_push(out, in + i, last_digit_end - i);
      }
      i = last_digit_end;
      continue;
    }
    sluice_buf_push_byte(out, in[i]);
    i++;
  }
  return count;
}

typedef struct redactor {
  const sluice_json *json;
  sluice_buf out, text, emails, cards;
  uint64_t redactions;
} redactor;

static void write_value(redactor *r, size_t token);

static void write_string_value(redactor *r, size_t token) {
  sluice_buf_clear(&r->text);
  sluice_json_string(r->json, token, &r->text);
  sluice_buf_clear(&r->emails);
  sluice_buf_clear(&r->cards);
  r->redactions += mask_emails(r->text.ptr, r->text.len, &r->emails);
  r->redactions += mask_card_numbers(r->emails.ptr, r->emails.len, &r->cards);
  sluice_json_write_string(&r->out, r->cards.ptr, r->cards.len);
}

/* Whether the key at `key` appears again among the object's keys before it. */
static bool repeats_earlier_key(redactor *r, size_t first_key, size_t key, sluice_buf *scratch) {
  sluice_buf_clear(scratch);
  sluice_json_string(r->json, key, scratch);
  sluice_buf_push_byte(scratch, 0);
  for (size_t k = first_key; k != key; k = r->json->tokens[r->json->tokens[k].next].next)
    if (sluice_json_string_equals(r->json, k, (const char *)scratch->ptr)) return true;
  return false;
}

static void write_object(redactor *r, size_t token) {
  const sluice_json_token *object = &r->json->tokens[token];
  sluice_buf key_text = {0};
  sluice_buf_push_byte(&r->out, '{');
  bool first = true;
  size_t key = token + 1;
  for (uint32_t i = 0; i < object->count; i++) {
    size_t next_key = r->json->tokens[r->json->tokens[key].next].next;
    if (!repeats_earlier_key(r, token + 1, key, &key_text)) {
      if (!first) sluice_buf_push_byte(&r->out, ',');
      first = false;
      sluice_json_write_string(&r->out, key_text.ptr, key_text.len - 1);
      sluice_buf_push_byte(&r->out, ':');
      write_value(r, sluice_json_get(r->json, token, (const char *)key_text.ptr));
    }
    key = next_key;
  }
  sluice_buf_push_byte(&r->out, '}');
  sluice_buf_free(&key_text);
}

static void write_value(redactor *r, size_t token) {
  const sluice_json_token *tok = &r->json->tokens[token];
  switch (tok->type) {
  case SLUICE_JSON_STRING: write_string_value(r, token); break;
  case SLUICE_JSON_OBJECT: write_object(r, token); break;
  case SLUICE_JSON_ARRAY: {
    sluice_buf_push_byte(&r->out, '[');
    size_t item = token + 1;
    for (uint32_t i = 0; i < tok->count; i++) {
      if (i) sluice_buf_push_byte(&r->out, ',');
      write_value(r, item);
      item = r->json->tokens[item].next;
    }
    sluice_buf_push_byte(&r->out, ']');
    break;
  }
  case SLUICE_JSON_NUMBER: sluice_json_write_number(&r->out, r->json, token); break;
  default: /* true, false, null */
    sluice_buf_push(&r->out, r->json->text + tok->start, tok->end - tok->start);
  }
}

bool sluice_plugin_init(const sluice_config *config, sluice_buf *error) {
  (void)config;
  (void)error;
  return true;
}

void sluice_plugin_process(const sluice_record *record, sluice_out *out) {
  sluice_json json = {0};
  if (!sluice_json_parse(&json, record->value, record->value_len)) {
    sluice_fail(out, "%s", json.error);
    sluice_json_free(&json);
    return;
  }
  redactor r = {.json = &json};
  write_value(&r, 0);
  if (r.redactions) sluice_counter_add("redactions", r.redactions);
  sluice_emit(out, r.out.ptr, r.out.len);
  sluice_buf_free(&r.out);
  sluice_buf_free(&r.text);
  sluice_buf_free(&r.emails);
  sluice_buf_free(&r.cards);
  sluice_json_free(&json);
}
