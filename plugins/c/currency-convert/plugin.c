/*
 * currency-convert (C): Nexmark q1, bid prices from dollars to euros.
 *
 * `SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid`
 * with integer cents (`price * rate_per_mille / 1000`). Events other than
 * bids are dropped. Same output, byte for byte, as plugins/currency-convert
 * (Rust) with JSON events. Config: `rate_per_mille` (default 908).
 */
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

static uint64_t rate_per_mille = 908;

bool sluice_plugin_init(const sluice_config *config, sluice_buf *error) {
  sluice_buf value = {0};
  bool ok = true;
  if (sluice_config_get(config, "rate_per_mille", &value)) {
    char *end = NULL;
    const char *text = (const char *)value.ptr;
    rate_per_mille = strtoull(text, &end, 10);
    if (value.len == 0 || text[0] == '-' || *end != 0) {
      sluice_buf_printf(error, "config key `rate_per_mille`: cannot parse \"%s\" as an integer", text);
      ok = false;
    }
  }
  if (ok && sluice_config_get(config, "encoding", &value) && strcmp((const char *)value.ptr, "json") != 0) {
    sluice_buf_printf(error, "config key `encoding`: `%s` is not supported by the C plugin (use json)",
                      (const char *)value.ptr);
    ok = false;
  }
  sluice_buf_free(&value);
  return ok;
}

/* Reads field `name` as a u64 (default 0 when absent). */
static bool field_u64(const sluice_json *json, const char *name, uint64_t *value, sluice_out *out) {
  size_t token = sluice_json_get(json, 0, name);
  *value = 0;
  if (token == 0 || sluice_json_u64(json, token, value)) return true;
  sluice_fail(out, "invalid JSON value: field `%s` must be an unsigned 64-bit integer", name);
  return false;
}

/* Token of string field `name`, 0 when absent; false if it is not a string. */
static bool field_string(const sluice_json *json, const char *name, size_t *token, sluice_out *out) {
  *token = sluice_json_get(json, 0, name);
  if (*token == 0 || json->tokens[*token].type == SLUICE_JSON_STRING) return true;
  sluice_fail(out, "invalid JSON value: field `%s` must be a string", name);
  return false;
}

static void process(const sluice_json *json, sluice_out *out) {
  if (json->tokens[0].type != SLUICE_JSON_OBJECT) {
    sluice_fail(out, "invalid JSON value: an event must be a JSON object");
    return;
  }
  size_t event_type, extra;
  uint64_t auction, bidder, price;
  int64_t date_time = 0;
  if (!field_string(json, "event_type", &event_type, out)) return;
  if (event_type == 0) {
    sluice_fail(out, "invalid JSON value: field `event_type` must be a string");
    return;
  }
  if (!field_u64(json, "auction", &auction, out) || !field_u64(json, "bidder", &bidder, out) ||
      !field_u64(json, "price", &price, out))
    return;
  size_t date_token = sluice_json_get(json, 0, "date_time");
  if (date_token != 0 && !sluice_json_i64(json, date_token, &date_time)) {
    sluice_fail(out, "invalid JSON value: field `date_time` must be a signed 64-bit integer");
    return;
  }
  if (!field_string(json, "extra", &extra, out)) return;
  if (!sluice_json_string_equals(json, event_type, "bid")) return;
  if (rate_per_mille != 0 && price > UINT64_MAX / rate_per_mille) {
    sluice_fail(out, "price * rate_per_mille overflows an unsigned 64-bit integer");
    return;
  }
  sluice_buf text = {0};
  sluice_buf converted = {0};
  if (extra != 0) sluice_json_string(json, extra, &text);
  sluice_buf_printf(&converted, "{\"auction\":%llu,\"bidder\":%llu,\"price\":%llu,\"date_time\":%lld,\"extra\":",
                    (unsigned long long)auction, (unsigned long long)bidder,
                    (unsigned long long)(price * rate_per_mille / 1000), (long long)date_time);
  sluice_json_write_string(&converted, text.ptr, text.len);
  sluice_buf_push_byte(&converted, '}');
  sluice_emit(out, converted.ptr, converted.len);
  sluice_buf_free(&text);
  sluice_buf_free(&converted);
}

void sluice_plugin_process(const sluice_record *record, sluice_out *out) {
  sluice_json json = {0};
  if (sluice_json_parse(&json, record->value, record->value_len)) {
    process(&json, out);
  } else {
    sluice_fail(out, "%s", json.error);
  }
  sluice_json_free(&json);
}
