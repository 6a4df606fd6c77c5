/*
 * field-probe (C): a test plugin for the SDK's field API.
 *
 * For each record it emits, as JSON, what sluice_field and the record's
 * other fields held (fields as their JSON text), then the record with field
 * `s` upper-cased (ASCII and Latin-1 letters) and with a field `added` added
 * (sluice_emit_replacing). It names its fields with sluice_set_json_fields
 * (config `project = "no"`: names none), so the same plugin runs through the
 * host's projected path, the packed one or the typed one, and they must
 * agree, with each other and with the Rust plugin of the same name. With
 * config `drop = "yes"` it emits nothing and counts each record it processes
 * (plugin counter `processed`): how a test sees that no record is processed
 * twice.
 */
#include <string.h>

#include "sluice.h"

/* Config `drop = "yes"`. */
static bool drop;

bool sluice_plugin_init(const sluice_config *config, sluice_buf *error) {
  (void)error;
  sluice_buf value = {0};
  bool project = !sluice_config_get(config, "project", &value) || strcmp((const char *)value.ptr, "yes") == 0;
  drop = sluice_config_get(config, "drop", &value) && strcmp((const char *)value.ptr, "yes") == 0;
  sluice_buf_free(&value);
  if (project) {
    static const char *const names[] = {"a", "s", "missing", "n"};
    sluice_set_json_fields(names, 4);
  }
  return true;
}

/* A field's JSON text, or NULL when missing; false (the record failed) if
 * the value is not a JSON object. */
typedef struct field {
  const uint8_t *json;
  size_t len;
} field;

static bool read_field(const sluice_record *record, const char *name, field *found, sluice_out *out) {
  found->json = NULL;
  found->len = 0;
  switch (sluice_field(record, name, &found->json, &found->len)) {
  case SLUICE_FIELD_FOUND:
    return true;
  case SLUICE_FIELD_MISSING:
    found->json = NULL;
    return true;
  default:
    sluice_fail(out, "%s", sluice_record_error(record));
    return false;
  }
}

static void write_hex(sluice_buf *out, const uint8_t *bytes, size_t len) {
  static const char digits[] = "0123456789abcdef";
  sluice_buf_push_byte(out, '"');
  for (size_t i = 0; i < len; i++) {
    sluice_buf_push_byte(out, (uint8_t)digits[bytes[i] >> 4]);
    sluice_buf_push_byte(out, (uint8_t)digits[bytes[i] & 0xF]);
  }
  sluice_buf_push_byte(out, '"');
}

/* Upper-cases ASCII letters and the Latin-1 ones (U+00E0-U+00FE but U+00F7,
 * two bytes in UTF-8) in place. */
static void upper_case(uint8_t *text, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (text[i] >= 'a' && text[i] <= 'z') {
      text[i] -= 'a' - 'A';
    } else if (text[i] == 0xC3 && i + 1 < len && text[i + 1] >= 0xA0 && text[i + 1] <= 0xBE && text[i + 1] != 0xB7) {
      text[i + 1] -= 0x20;
      i++;
    }
  }
}

void sluice_plugin_process(const sluice_record *record, sluice_out *out) {
  if (drop) {
    sluice_counter_add("processed", 1);
    return;
  }
  field a, s, missing, n, undeclared;
  if (!read_field(record, "s", &s, out) || !read_field(record, "missing", &missing, out) ||
      !read_field(record, "a", &a, out) || !read_field(record, "n", &n, out) ||
      !read_field(record, "u", &undeclared, out))
    return;
  sluice_buf text = {0};
  bool s_is_string = s.json && sluice_json_text_string(s.json, s.len, &text);

  /* Keys in the order the Rust plugin's serde_json map writes them. */
  sluice_buf probe = {0};
  sluice_buf_push_str(&probe, "{\"a\":");
  if (a.json) sluice_json_write_string(&probe, a.json, a.len);
  else sluice_buf_push_str(&probe, "null");
  sluice_buf_push_str(&probe, ",\"event_time\":");
  if (record->has_event_time) sluice_buf_printf(&probe, "%lld", (long long)record->event_time);
  else sluice_buf_push_str(&probe, "null");
  sluice_buf_push_str(&probe, ",\"headers\":[");
  for (size_t i = 0; i < record->header_count; i++) {
    if (i > 0) sluice_buf_push_byte(&probe, ',');
    sluice_buf_push_byte(&probe, '[');
    sluice_json_write_string(&probe, record->headers[i].name, record->headers[i].name_len);
    sluice_buf_push_byte(&probe, ',');
    write_hex(&probe, record->headers[i].value, record->headers[i].value_len);
    sluice_buf_push_byte(&probe, ']');
  }
  sluice_buf_push_str(&probe, "],\"key\":");
  if (record->has_key) write_hex(&probe, record->key, record->key_len);
  else sluice_buf_push_str(&probe, "null");
  sluice_buf_push_str(&probe, ",\"missing\":");
  if (missing.json) sluice_buf_push(&probe, missing.json, missing.len);
  else sluice_buf_push_str(&probe, "\"default\"");
  sluice_buf_push_str(&probe, ",\"n\":");
  if (n.json) sluice_json_write_string(&probe, n.json, n.len);
  else sluice_buf_push_str(&probe, "null");
  sluice_buf_push_str(&probe, ",\"s\":");
  if (s_is_string) sluice_json_write_string(&probe, text.ptr, text.len);
  else sluice_buf_push_str(&probe, "null");
  sluice_buf_push_str(&probe, ",\"source\":[");
  sluice_json_write_string(&probe, record->topic, record->topic_len);
  sluice_buf_printf(&probe, ",%d,%lld]", (int)record->partition, (long long)record->offset);
  sluice_buf_push_str(&probe, ",\"undeclared\":");
  if (undeclared.json) sluice_buf_push(&probe, undeclared.json, undeclared.len);
  else sluice_buf_push_str(&probe, "null");
  sluice_buf_printf(&probe, ",\"value_length\":%zu}", record->value_len);
  sluice_emit(out, probe.ptr, probe.len);

  bool ok = true;
  if (s_is_string) {
    upper_case(text.ptr, text.len);
    sluice_buf quoted = {0};
    sluice_json_write_string(&quoted, text.ptr, text.len);
    ok = sluice_emit_replacing(out, "s", quoted.ptr, quoted.len);
    sluice_buf_free(&quoted);
  }
  static const char added[] = "[1,{\"x\":null},\"t\\u00e9\\\"xt\"]";
  if (ok) ok = sluice_emit_replacing(out, "added", (const uint8_t *)added, sizeof added - 1);
  if (!ok) sluice_fail(out, "%s", sluice_record_error(record));
  sluice_buf_free(&text);
  sluice_buf_free(&probe);
}
