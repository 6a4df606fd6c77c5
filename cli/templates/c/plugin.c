/*
 * {{name}}: a Sluice transform plugin in C.
 *
 * Build: `sluice plugin build .`
 * Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl`
 *
 * `sluice.h` (the SDK) and `fast_projected_transform.h` (the WIT bindings)
 * are provided by `sluice plugin build`.
 */
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

/* Field every record must have (config key `required_field`). */
static char *required_field;

bool sluice_plugin_init(const sluice_config *config, sluice_buf *error) {
  (void)error;
  sluice_buf value = {0};
  required_field = strdup(sluice_config_get(config, "required_field", &value) ? (const char *)value.ptr : "id");
  sluice_buf_free(&value);
  if (required_field == NULL) return false;
  /* The fields this plugin reads: the host finds them in each record, so
   * sluice_field below parses nothing. */
  const char *fields[] = {required_field};
  sluice_set_json_fields(fields, 1);
  return true;
}

void sluice_plugin_process(const sluice_record *record, sluice_out *out) {
  const uint8_t *json;
  size_t len;
  switch (sluice_field(record, required_field, &json, &len)) {
  case SLUICE_FIELD_FOUND:
    sluice_forward(out);
    break;
  case SLUICE_FIELD_MISSING: {
    sluice_buf reason = {0};
    sluice_buf_printf(&reason, "missing field `%s`", required_field);
    sluice_dead_letter(out, (const char *)reason.ptr);
    sluice_buf_free(&reason);
    break;
  }
  default:
    /* sluice_fail sends this record (alone) to the dead-letter output. */
    sluice_fail(out, "%s", sluice_record_error(record));
  }
}
