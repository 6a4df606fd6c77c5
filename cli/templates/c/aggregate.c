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
  if (field == NULL) return false;
  /* The field `add` reads: the host finds it in each record, so
   * sluice_field below parses nothing. */
  const char *fields[] = {field};
  sluice_set_json_fields(fields, 1);
  return true;
}

void sluice_aggregate_create(sluice_buf *accumulator) {
  totals empty = {0, 0};
  sluice_buf_push(accumulator, &empty, sizeof empty);
}

/* Returning false sends this record to the dead-letter output with
 * `reason`; it does not count. */
bool sluice_aggregate_add(sluice_buf *accumulator, const sluice_record *record, sluice_buf *reason) {
  const uint8_t *json;
  size_t len;
  int64_t amount = 0;
  sluice_field_status found = sluice_field(record, field, &json, &len);
  if (found == SLUICE_FIELD_NOT_AN_OBJECT) {
    sluice_buf_push_str(reason, sluice_record_error(record));
    return false;
  }
  if (found != SLUICE_FIELD_FOUND || !sluice_json_text_i64(json, len, &amount)) {
    sluice_buf_printf(reason, "field `%s` must be an integer", field);
    return false;
  }
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
