/*
 * {{name}}: a Sluice transform plugin in C.
 *
 * Build: `sluice plugin build .`
 * Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl`
 *
 * `sluice.h` (the SDK) and `transform.h` (the WIT bindings) are provided by
 * `sluice plugin build`.
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
  return required_field != NULL;
}

void sluice_plugin_process(const sluice_record *record, sluice_out *out) {
  sluice_json json = {0};
  if (!sluice_json_parse(&json, record->value, record->value_len)) {
    /* sluice_fail sends this record (alone) to the dead-letter output. */
    sluice_fail(out, "%s", json.error);
  } else if (sluice_json_get(&json, 0, required_field) == 0) {
    sluice_buf reason = {0};
    sluice_buf_printf(&reason, "missing field `%s`", required_field);
    sluice_dead_letter(out, (const char *)reason.ptr);
    sluice_buf_free(&reason);
  } else {
    sluice_forward(out);
  }
  sluice_json_free(&json);
}
