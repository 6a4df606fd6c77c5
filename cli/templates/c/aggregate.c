/*
 * {{name}}: a Sluice window aggregate plugin in C.
 *
 * Per key and window: the number of records and the sum of an integer
 * field. Use it in a pipeline as a window operator's `plugin`.
 *
 * Build: `sluice plugin build .`
 * Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl --key-field user --timestamp-field ts`
 *
 * `sluice.h` (the SDK) and the WIT bindings are provided by
 * `sluice plugin build`.
 */
#define SLUICE_AGGREGATE 1

#include <stdlib.h>
#include <string.h>

#include "sluice.h"

/* What the host keeps per key and window between calls (as bytes). */
typedef struct totals {
  uint64_t count;
  int64_t sum;
} totals;

/* The integer field to sum (config key `field`). */
static char *field;

static totals totals_of(const uint8_t *bytes, size_t len) {
  totals t = {0, 0};
  if (len >= sizeof t) memcpy(&t, bytes, sizeof t);
  return t;
}

bool sluice_aggregate_init(const sluice_config *config, sluice_buf *error) {
  (void)error;
  sluice_buf value = {0};
  field = strdup(sluice_config_get(config, "field", &value) ? (const char *)value.ptr : "amount");
  sluice_buf_free(&value);
  return field != NULL;
}

void sluice_aggregate_create(sluice_buf *accumulator) {
  totals empty = {0, 0};
  sluice_buf_push(accumulator, &empty, sizeof empty);
}

/* Returning false sends this record to the dead-letter output with
 * `reason`; it does not count. */
bool sluice_aggregate_add(sluice_buf *accumulator, const sluice_record *record, sluice_buf *reason) {
  sluice_json json = {0};
  int64_t amount = 0;
  bool ok = sluice_json_parse(&json, record->value, record->value_len);
  if (!ok) {
    sluice_buf_push_str(reason, json.error);
  } else {
    size_t token = json.tokens[0].type == SLUICE_JSON_OBJECT ? sluice_json_get(&json, 0, field) : 0;
    ok = token != 0 && sluice_json_i64(&json, token, &amount);
    if (!ok) sluice_buf_printf(reason, "field `%s` must be an integer", field);
  }
  sluice_json_free(&json);
  if (!ok) return false;
  totals t = totals_of(accumulator->ptr, accumulator->len);
  t.count += 1;
  t.sum += amount;
  sluice_buf_clear(accumulator);
  sluice_buf_push(accumulator, &t, sizeof t);
  return true;
}

/* Combines two windows' accumulators (session windows that merge). */
void sluice_aggregate_merge(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len, sluice_buf *merged) {
  totals left = totals_of(a, a_len), right = totals_of(b, b_len);
  totals sum = {left.count + right.count, left.sum + right.sum};
  sluice_buf_push(merged, &sum, sizeof sum);
}

/* The window's result, as JSON. */
void sluice_aggregate_finish(const uint8_t *accumulator, size_t len, sluice_buf *result) {
  totals t = totals_of(accumulator, len);
  sluice_buf_printf(result, "{\"count\":%llu,\"sum\":%lld}", (unsigned long long)t.count, (long long)t.sum);
}
