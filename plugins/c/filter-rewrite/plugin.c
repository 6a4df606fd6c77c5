/*
 * filter-rewrite (C): the record-path benchmark's transform.
 *
 * A record whose integer field `filter_field` (default `key`) is a multiple
 * of `modulus` (default 10) is dropped; the others are emitted with the
 * string field `rewrite_field` (default `text`) upper-cased (ASCII). Same
 * output, byte for byte, as plugins/filter-rewrite (Rust): only the
 * rewritten field changes, every other byte is the record's own.
 *
 * The two fields are named with sluice_set_json_fields, so the host finds
 * them while it packs the batch and splices the new value in
 * (sluice_emit_replacing): the record is never parsed in the plugin.
 */
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

static char *filter_field, *rewrite_field;
static int64_t modulus = 10;
/* The rewritten field's new JSON text (reused). */
static sluice_buf rewritten;

static char *config_text(const sluice_config *config, const char *key, const char *otherwise) {
  sluice_buf value = {0};
  char *text = strdup(sluice_config_get(config, key, &value) ? (const char *)value.ptr : otherwise);
  sluice_buf_free(&value);
  if (text == NULL) abort();
  return text;
}

bool sluice_plugin_init(const sluice_config *config, sluice_buf *error) {
  filter_field = config_text(config, "filter_field", "key");
  rewrite_field = config_text(config, "rewrite_field", "text");
  char *text = config_text(config, "modulus", "10");
  char *end = NULL;
  modulus = strtoll(text, &end, 10);
  bool ok = *text != 0 && *end == 0 && modulus > 0;
  if (!ok) sluice_buf_printf(error, "config key `modulus`: must be a positive integer, not \"%s\"", text);
  free(text);
  const char *names[] = {filter_field, rewrite_field};
  sluice_set_json_fields(names, 2);
  return ok;
}

void sluice_plugin_process(const sluice_record *record, sluice_out *out) {
  const uint8_t *json;
  size_t len;
  int64_t value;
  sluice_field_status found = sluice_field(record, filter_field, &json, &len);
  if (found == SLUICE_FIELD_NOT_AN_OBJECT) {
    sluice_fail(out, "%s", sluice_record_error(record));
    return;
  }
  if (found != SLUICE_FIELD_FOUND || !sluice_json_text_i64(json, len, &value)) {
    sluice_fail(out, "field `%s` is not an integer", filter_field);
    return;
  }
  if (value % modulus == 0) return;
  if (sluice_field(record, rewrite_field, &json, &len) != SLUICE_FIELD_FOUND || json[0] != '"') {
    sluice_fail(out, "field `%s` is not a string", rewrite_field);
    return;
  }
  sluice_buf_clear(&rewritten);
  if (memchr(json, '\\', len) == NULL) {
    /* No escapes: the string's JSON text upper-cased is the upper-cased
     * string's JSON text (ASCII letters only change). */
    sluice_buf_push(&rewritten, json, len);
    for (size_t i = 0; i < rewritten.len; i++)
      if (rewritten.ptr[i] >= 'a' && rewritten.ptr[i] <= 'z') rewritten.ptr[i] -= 'a' - 'A';
  } else {
    sluice_buf text = {0};
    sluice_json_text_string(json, len, &text);
    for (size_t i = 0; i < text.len; i++)
      if (text.ptr[i] >= 'a' && text.ptr[i] <= 'z') text.ptr[i] -= 'a' - 'A';
    sluice_json_write_string(&rewritten, text.ptr, text.len);
    sluice_buf_free(&text);
  }
  if (!sluice_emit_replacing(out, rewrite_field, rewritten.ptr, rewritten.len))
    sluice_fail(out, "%s", sluice_record_error(record));
}
