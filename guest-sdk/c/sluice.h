/*
 * Sluice plugin SDK for C.
 *
 * A plugin implements two functions:
 *
 *     bool sluice_plugin_init(const sluice_config *config, sluice_buf *error);
 *     void sluice_plugin_process(const sluice_record *record, sluice_out *out);
 *
 * `init` runs once with the operator's config table; returning false (with a
 * message in `error`) stops the pipeline at start-up. `process` runs for
 * every record: it emits with sluice_emit / sluice_forward / sluice_side /
 * sluice_dead_letter / sluice_emit_replacing, or fails the record with
 * sluice_fail (the record alone goes to the dead-letter output with the
 * reason).
 *
 * A window aggregate instead starts with `#define SLUICE_AGGREGATE 1`
 * (before including this header) and implements the sluice_aggregate_*
 * functions at the end of this file.
 *
 * `sluice plugin build` compiles the plugin with clang's wasm32-wasi target
 * against bindings generated from the WIT world `fast-projected-transform`
 * (fast_projected_transform.h), or `fast-projected-aggregate`
 * (fast_projected_aggregate.h), and this SDK, both embedded in the `sluice`
 * binary. C plugins get no WASI: use
 * sluice_log rather than printf.
 *
 * How batches cross: a transform's batch comes as one buffer (the packed
 * format of the `sluice-wire` crate) and its outcomes go back as one
 * buffer, so a record costs no allocation of its own at the boundary. A
 * plugin that reads a few top-level fields of JSON object records names
 * them in init (sluice_set_json_fields): the host then finds them in each
 * record (the projected path), sluice_field reads one without parsing the
 * record, and sluice_emit_replacing has the host splice a new value into
 * the record. Without named fields, sluice_field and sluice_emit_replacing
 * still work: the SDK parses the record itself (once per record). An
 * aggregate's `add` gets every key and window of a batch in one call the
 * same way (and sluice_field, with fields named in its init).
 *
 * JSON: sluice_json_parse is strict (RFC 8259, UTF-8 validated, as the Rust
 * SDK) and keeps the exact text of numbers; sluice_json_write_string
 * escapes strings exactly as serde_json does, so output can be
 * byte-identical to a Rust plugin's.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(SLUICE_AGGREGATE)
#include "fast_projected_aggregate.h"
/* A world-level binding type: `fast_projected_aggregate_<name>`. */
#define SLUICE_WORLD(name) fast_projected_aggregate_##name
#else
#include "fast_projected_transform.h"
/* A world-level binding type: `fast_projected_transform_<name>`. */
#define SLUICE_WORLD(name) fast_projected_transform_##name
#endif

/* ------------------------------------------------------------ buffers */

/* A growable byte buffer (malloc'd). */
typedef struct sluice_buf {
  uint8_t *ptr;
  size_t len;
  size_t cap;
} sluice_buf;

void sluice_buf_push(sluice_buf *buf, const void *data, size_t len);
void sluice_buf_push_byte(sluice_buf *buf, uint8_t byte);
void sluice_buf_push_str(sluice_buf *buf, const char *text);
void sluice_buf_printf(sluice_buf *buf, const char *format, ...);
/* Empties the buffer, keeping its memory. */
void sluice_buf_clear(sluice_buf *buf);
void sluice_buf_free(sluice_buf *buf);

/* ------------------------------------------------------------ records */

/* The operator's config table. */
typedef struct sluice_config {
  const SLUICE_WORLD(list_tuple2_string_string_t) *entries;
} sluice_config;

/* The value of `key` copied into `value` (NUL-terminated); false if absent. */
bool sluice_config_get(const sluice_config *config, const char *key, sluice_buf *value);

/* A record header: a name (UTF-8) and opaque bytes. */
typedef struct sluice_header {
  const uint8_t *name;
  size_t name_len;
  const uint8_t *value;
  size_t value_len;
} sluice_header;

/* The SDK's per-record view of the fields the host found (opaque). */
typedef struct sluice_record_fields sluice_record_fields;

/* A record handed to sluice_plugin_process (or sluice_aggregate_add). Its
 * pointers borrow from the batch: valid until the call returns. */
typedef struct sluice_record {
  const uint8_t *value;
  size_t value_len;
  bool has_key;
  const uint8_t *key;
  size_t key_len;
  bool has_event_time;
  int64_t event_time;
  /* Headers in their order. */
  const sluice_header *headers;
  size_t header_count;
  /* Where the record was read: topic or file (UTF-8, not NUL-terminated),
   * partition and offset. */
  const uint8_t *topic;
  size_t topic_len;
  int32_t partition;
  int64_t offset;
  /* The SDK's: what sluice_field reads. */
  sluice_record_fields *fields;
} sluice_record;

/* What sluice_field found. */
typedef enum {
  /* The object has the field: its JSON text is in *json / *len. */
  SLUICE_FIELD_FOUND,
  /* The value is a JSON object without that field. */
  SLUICE_FIELD_MISSING,
  /* The value is not a JSON object (or not JSON): sluice_record_error
   * says why. */
  SLUICE_FIELD_NOT_AN_OBJECT,
} sluice_field_status;

/* Names the top-level fields of JSON object records this plugin reads
 * (call it in sluice_plugin_init; the names are copied). The host then
 * finds them in every record, and sluice_field reads them without parsing
 * the record: the projected path. */
void sluice_set_json_fields(const char *const *names, size_t count);

/* The JSON text of the top-level field `name` of the record's value, as it
 * is in the record (of a repeated name, the last). A field named with
 * sluice_set_json_fields was found by the host; any other is read from a
 * parse of the record the SDK makes once per record. */
sluice_field_status sluice_field(const sluice_record *record, const char *name, const uint8_t **json,
                                 size_t *len);

/* Why the record's value is not a JSON object ("invalid JSON value: ..."),
 * after sluice_field said SLUICE_FIELD_NOT_AN_OBJECT. */
const char *sluice_record_error(const sluice_record *record);

#if !defined(SLUICE_AGGREGATE)
/* What process emits for one record. */
typedef struct sluice_out sluice_out;

/* Emits the input record unchanged to the main output. */
void sluice_forward(sluice_out *out);
/* Emits `value` to the main output, with the input's key and headers. */
void sluice_emit(sluice_out *out, const uint8_t *value, size_t len);
/* Emits `value` to the side output `name`. */
void sluice_side(sluice_out *out, const char *name, const uint8_t *value, size_t len);
/* Emits the input record with the value of its top-level JSON field `field`
 * replaced by the JSON text `json` (the field added at the end if the object
 * has none), keeping its key, headers and event time: every other byte of
 * the value as it came. `json` must be one JSON value (e.g. written with
 * sluice_json_write_string). On the projected path the host splices it;
 * otherwise the SDK does. False (nothing emitted) if the value is not a
 * JSON object: sluice_record_error says why. */
bool sluice_emit_replacing(sluice_out *out, const char *field, const uint8_t *json, size_t len);
/* Sends the input record to the dead-letter output with `reason`. */
void sluice_dead_letter(sluice_out *out, const char *reason);
/* Fails the record: it goes to the dead-letter output with the formatted
 * reason, and anything emitted for it so far is discarded. */
void sluice_fail(sluice_out *out, const char *format, ...);
#endif

/* ------------------------------------------------------------ host */

typedef enum {
  SLUICE_LOG_TRACE = SLUICE_PLUGIN_TYPES_LOG_LEVEL_TRACE,
  SLUICE_LOG_DEBUG = SLUICE_PLUGIN_TYPES_LOG_LEVEL_DEBUG,
  SLUICE_LOG_INFO = SLUICE_PLUGIN_TYPES_LOG_LEVEL_INFO,
  SLUICE_LOG_WARN = SLUICE_PLUGIN_TYPES_LOG_LEVEL_WARN,
  SLUICE_LOG_ERROR = SLUICE_PLUGIN_TYPES_LOG_LEVEL_ERROR,
} sluice_log_level;

/* Writes a line to the host log, tagged with the operator. */
void sluice_log(sluice_log_level level, const char *message);
/* Adds `delta` to the plugin counter `name` (shown in the run summary). */
void sluice_counter_add(const char *name, uint64_t delta);
#if !defined(SLUICE_AGGREGATE)
/* Host-stored state scoped to this operator. get copies the value into
 * `value` and returns true if the key exists. (Aggregates have none: the
 * host stores the accumulator.) */
bool sluice_state_get(const uint8_t *key, size_t key_len, sluice_buf *value);
void sluice_state_put(const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len);
void sluice_state_delete(const uint8_t *key, size_t key_len);
#endif

/* ------------------------------------------------------------ JSON */

typedef enum {
  SLUICE_JSON_NULL,
  SLUICE_JSON_FALSE,
  SLUICE_JSON_TRUE,
  SLUICE_JSON_NUMBER,
  SLUICE_JSON_STRING,
  SLUICE_JSON_ARRAY,
  SLUICE_JSON_OBJECT,
} sluice_json_type;

/* One value of a parsed document. Tokens are in document order; an object's
 * children alternate key, value. */
typedef struct sluice_json_token {
  sluice_json_type type;
  /* Source text span (for strings: inside the quotes). */
  uint32_t start, end;
  /* Index of the token after this value and all its children. */
  uint32_t next;
  /* Children (arrays) or key/value pairs (objects). */
  uint32_t count;
  /* Numbers: an integer within i64/u64 range other than -0 (as serde_json
   * classifies numbers). */
  bool is_integer;
  /* Strings: contains escapes (decode with sluice_json_string). */
  bool has_escapes;
} sluice_json_token;

/* A parsed JSON document. Token 0 is the root value. */
typedef struct sluice_json {
  const uint8_t *text;
  size_t len;
  sluice_json_token *tokens;
  size_t count, cap;
  /* Why parsing failed: "invalid JSON value: ...". */
  char error[160];
} sluice_json;

/* Parses `text` strictly; false (with `error` set) if it is not exactly one
 * well-formed JSON value. Free with sluice_json_free either way. */
bool sluice_json_parse(sluice_json *json, const uint8_t *text, size_t len);
void sluice_json_free(sluice_json *json);
/* The value of member `key` of object token `object`; 0 if absent (the last
 * one if the key repeats). */
size_t sluice_json_get(const sluice_json *json, size_t object, const char *key);
/* Appends the decoded (UTF-8) contents of string token `token` to `out`. */
void sluice_json_string(const sluice_json *json, size_t token, sluice_buf *out);
/* Whether string token `token` decodes to exactly `text`. */
bool sluice_json_string_equals(const sluice_json *json, size_t token, const char *text);
/* Number token as u64 / i64; false if it is not an integer of that type. */
bool sluice_json_u64(const sluice_json *json, size_t token, uint64_t *value);
bool sluice_json_i64(const sluice_json *json, size_t token, int64_t *value);
/* Appends number token `token` as serde_json (with arbitrary_precision)
 * writes it: as written, but an exponent as `e`, sign, digits (`1E3` becomes
 * `1e+3`). */
void sluice_json_write_number(sluice_buf *out, const sluice_json *json, size_t token);
/* A JSON text (a field from sluice_field) as an i64: false if it is not an
 * integer within i64. */
bool sluice_json_text_i64(const uint8_t *json, size_t len, int64_t *value);
/* A JSON text that is a string: its decoded (UTF-8) contents appended to
 * `out`; false (nothing appended) if it is not a string. */
bool sluice_json_text_string(const uint8_t *json, size_t len, sluice_buf *out);
/* Appends `text` as a JSON string literal, escaped as serde_json does. */
void sluice_json_write_string(sluice_buf *out, const uint8_t *text, size_t len);

/* ------------------------------------------------------------ plugin */

#if defined(SLUICE_AGGREGATE)
/* Implemented by an aggregate plugin. The accumulator is bytes of the
 * plugin's choosing (e.g. a struct copied in), stored by the host per key
 * and window; an empty one (length 0) is only ever what `create` wrote.
 *
 * init:   once, with the operator's config; false (with a message) stops
 *         the pipeline at start-up.
 * create: writes a new, empty accumulator.
 * add:    adds one record (of the window's key, in arrival order) to
 *         `accumulator`, in place; false with a reason dead-letters the
 *         record, and the SDK puts the accumulator back as it was.
 * merge:  writes the combination of two accumulators (sessions merge).
 * finish: writes the window's result as JSON. */
bool sluice_aggregate_init(const sluice_config *config, sluice_buf *error);
void sluice_aggregate_create(sluice_buf *accumulator);
bool sluice_aggregate_add(sluice_buf *accumulator, const sluice_record *record, sluice_buf *reason);
void sluice_aggregate_merge(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len,
                            sluice_buf *merged);
void sluice_aggregate_finish(const uint8_t *accumulator, size_t len, sluice_buf *result);
#else
/* Implemented by the plugin: see the top of this file. */
bool sluice_plugin_init(const sluice_config *config, sluice_buf *error);
void sluice_plugin_process(const sluice_record *record, sluice_out *out);
#endif

#endif
