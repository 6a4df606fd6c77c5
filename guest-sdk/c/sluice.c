/* Sluice plugin SDK for C: the `transformer` export (or, with
 * SLUICE_AGGREGATE, the `aggregator` export) on top of the wit-bindgen
 * bindings, host imports, buffers and a strict JSON parser. See sluice.h. */
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ buffers */

static void buf_reserve(sluice_buf *buf, size_t extra) {
  if (buf->len + extra <= buf->cap) return;
  size_t cap = buf->cap ? buf->cap * 2 : 64;
  while (cap < buf->len + extra) cap *= 2;
  uint8_t *grown = realloc(buf->ptr, cap);
  if (grown == NULL) abort(); /* out of memory: the host dead-letters the batch's records */
  buf->ptr = grown;
  buf->cap = cap;
}

void sluice_buf_push(sluice_buf *buf, const void *data, size_t len) {
  if (len == 0) return;
  buf_reserve(buf, len);
  memcpy(buf->ptr + buf->len, data, len);
  buf->len += len;
}

void sluice_buf_push_byte(sluice_buf *buf, uint8_t byte) {
  buf_reserve(buf, 1);
  buf->ptr[buf->len++] = byte;
}

void sluice_buf_push_str(sluice_buf *buf, const char *text) { sluice_buf_push(buf, text, strlen(text)); }

static void buf_vprintf(sluice_buf *buf, const char *format, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int needed = vsnprintf(NULL, 0, format, copy);
  va_end(copy);
  if (needed < 0) return;
  buf_reserve(buf, (size_t)needed + 1);
  vsnprintf((char *)buf->ptr + buf->len, (size_t)needed + 1, format, args);
  buf->len += (size_t)needed;
}

void sluice_buf_printf(sluice_buf *buf, const char *format, ...) {
  va_list args;
  va_start(args, format);
  buf_vprintf(buf, format, args);
  va_end(args);
}

void sluice_buf_clear(sluice_buf *buf) { buf->len = 0; }

void sluice_buf_free(sluice_buf *buf) {
  free(buf->ptr);
  buf->ptr = NULL;
  buf->len = buf->cap = 0;
}

/* A malloc'd copy of `len` bytes (the bindings free returned lists). */
static uint8_t *copy_bytes(const uint8_t *data, size_t len) {
  uint8_t *copy = malloc(len ? len : 1);
  if (copy == NULL) abort();
  if (len) memcpy(copy, data, len);
  return copy;
}

static void string_from(SLUICE_WORLD(string_t) *out, const char *text) {
  size_t len = strlen(text);
  out->ptr = copy_bytes((const uint8_t *)text, len);
  out->len = len;
}

/* ------------------------------------------------------------ records */

bool sluice_config_get(const sluice_config *config, const char *key, sluice_buf *value) {
  size_t key_len = strlen(key);
  for (size_t i = 0; i < config->entries->len; i++) {
    const SLUICE_WORLD(tuple2_string_string_t) *entry = &config->entries->ptr[i];
    if (entry->f0.len == key_len && memcmp(entry->f0.ptr, key, key_len) == 0) {
      sluice_buf_clear(value);
      sluice_buf_push(value, entry->f1.ptr, entry->f1.len);
      sluice_buf_push_byte(value, 0);
      value->len--;
      return true;
    }
  }
  return false;
}

/* The `start` of a projected slot that holds nothing, and the `end` of such
 * a field slot when the value is not a JSON object (sluice-wire's
 * `projected` module). */
#define PROJECTED_ABSENT UINT32_MAX
#define PROJECTED_NOT_AN_OBJECT 1u
/* The projected batch format version this SDK reads. */
#define PROJECTED_FORMAT_VERSION 1u
/* Slots per record before the fields: value, key, topic, headers. */
#define PROJECTED_FIXED_SLOTS 4u

struct sluice_record_fields {
  /* Projected path: the batch buffer and this record's field slots (two
   * little-endian u32 per named field: a range of the buffer); NULL
   * otherwise. */
  const uint8_t *batch;
  const uint8_t *slots;
  /* The SDK's own parse of the value, made on first need. */
  bool parsed, parse_ok;
  sluice_json json;
};

/* The fields named with sluice_set_json_fields. */
static char **json_fields;
static size_t json_field_count;

void sluice_set_json_fields(const char *const *names, size_t count) {
  for (size_t i = 0; i < json_field_count; i++) free(json_fields[i]);
  free(json_fields);
  json_fields = count ? malloc(count * sizeof *json_fields) : NULL;
  if (count && json_fields == NULL) abort();
  for (size_t i = 0; i < count; i++) {
    json_fields[i] = strdup(names[i]);
    if (json_fields[i] == NULL) abort();
  }
  json_field_count = count;
}

static uint32_t read_u32(const uint8_t *at) {
  uint32_t value;
  memcpy(&value, at, sizeof value); /* wasm32 is little-endian, as the format */
  return value;
}

static int64_t read_i64(const uint8_t *at) {
  int64_t value;
  memcpy(&value, at, sizeof value);
  return value;
}

/* The record's value parsed by the SDK (once per record); false if it is
 * not JSON (the error is in fields->json.error). */
static bool parse_record(const sluice_record *record) {
  sluice_record_fields *fields = record->fields;
  if (!fields->parsed) {
    fields->parsed = true;
    fields->parse_ok = sluice_json_parse(&fields->json, record->value, record->value_len);
  }
  return fields->parse_ok;
}

static bool parsed_object(const sluice_record *record) {
  return parse_record(record) && record->fields->json.tokens[0].type == SLUICE_JSON_OBJECT;
}

const char *sluice_record_error(const sluice_record *record) {
  if (!parse_record(record)) return record->fields->json.error;
  return "invalid JSON value: a record must be a JSON object";
}

/* The JSON text of token `token` of a parsed document (a string's token
 * spans its contents: the quotes are added back). */
static void token_text(const sluice_json *json, size_t token, const uint8_t **text, size_t *len) {
  const sluice_json_token *tok = &json->tokens[token];
  size_t quote = tok->type == SLUICE_JSON_STRING ? 1 : 0;
  *text = json->text + tok->start - quote;
  *len = tok->end - tok->start + 2 * quote;
}

/* Index of `name` among the named fields, or -1. */
static long named_field(const char *name) {
  for (size_t i = 0; i < json_field_count; i++)
    if (strcmp(json_fields[i], name) == 0) return (long)i;
  return -1;
}

sluice_field_status sluice_field(const sluice_record *record, const char *name, const uint8_t **json,
                                 size_t *len) {
  const sluice_record_fields *fields = record->fields;
  long index = fields->slots ? named_field(name) : -1;
  if (index >= 0) {
    uint32_t start = read_u32(fields->slots + 8 * (size_t)index);
    uint32_t end = read_u32(fields->slots + 8 * (size_t)index + 4);
    if (start != PROJECTED_ABSENT) {
      *json = fields->batch + start;
      *len = end - start;
      return SLUICE_FIELD_FOUND;
    }
    if (end != PROJECTED_NOT_AN_OBJECT) return SLUICE_FIELD_MISSING;
    /* Not an object: the parse below says why. */
  }
  if (!parsed_object(record)) return SLUICE_FIELD_NOT_AN_OBJECT;
  size_t token = sluice_json_get(&record->fields->json, 0, name);
  if (token == 0) return SLUICE_FIELD_MISSING;
  token_text(&record->fields->json, token, json, len);
  return SLUICE_FIELD_FOUND;
}

/* Headers of the record being viewed (reused from record to record). */
static sluice_header *header_views;
static size_t header_views_cap;

static sluice_header *header_slots(size_t count) {
  if (count > header_views_cap) {
    sluice_header *grown = realloc(header_views, count * sizeof *grown);
    if (grown == NULL) abort();
    header_views = grown;
    header_views_cap = count;
  }
  return header_views;
}

/* Makes `fields` ready for a new record (keeping the parse's memory). */
static void reset_fields(sluice_record_fields *fields, const uint8_t *batch, const uint8_t *slots) {
  fields->batch = batch;
  fields->slots = slots;
  fields->parsed = false;
  fields->parse_ok = false;
}

/* The record view of a typed input record. */
static sluice_record record_view(const sluice_plugin_types_input_record_t *input, sluice_record_fields *fields) {
  sluice_header *headers = header_slots(input->headers.len);
  for (size_t i = 0; i < input->headers.len; i++) {
    const sluice_plugin_types_header_t *from = &input->headers.ptr[i];
    headers[i] = (sluice_header){from->key.ptr, from->key.len, from->value.ptr, from->value.len};
  }
  reset_fields(fields, NULL, NULL);
  sluice_record record = {
      .value = input->value.ptr,
      .value_len = input->value.len,
      .has_key = input->key.is_some,
      .key = input->key.is_some ? input->key.val.ptr : NULL,
      .key_len = input->key.is_some ? input->key.val.len : 0,
      .has_event_time = input->event_time.is_some,
      .event_time = input->event_time.val,
      .headers = headers,
      .header_count = input->headers.len,
      .topic = input->source.topic.ptr,
      .topic_len = input->source.topic.len,
      .partition = input->source.partition,
      .offset = input->source.offset,
      .fields = fields,
  };
  return record;
}

/* ------------------------------------------------- packed input records */

/* Reads a packed batch (postcard, as sluice-wire writes it). A malformed
 * batch is a host bug: the SDK traps, and the host reports the fault. */
typedef struct reader {
  const uint8_t *at, *end;
} reader;

static uint64_t read_varint(reader *r) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (r->at >= r->end) abort();
    uint8_t byte = *r->at++;
    value |= (uint64_t)(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return value;
  }
  abort();
}

static int64_t read_zigzag(reader *r) {
  uint64_t raw = read_varint(r);
  return (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
}

static const uint8_t *read_bytes(reader *r, size_t *len) {
  uint64_t n = read_varint(r);
  if (n > (uint64_t)(r->end - r->at)) abort();
  const uint8_t *bytes = r->at;
  r->at += n;
  *len = (size_t)n;
  return bytes;
}

static bool read_option_tag(reader *r) {
  if (r->at >= r->end || *r->at > 1) abort();
  return *r->at++ == 1;
}

/* The next record of a packed batch (an `InputRecord`). */
static sluice_record read_packed_record(reader *r, sluice_record_fields *fields) {
  sluice_record record = {0};
  record.has_key = read_option_tag(r);
  if (record.has_key) record.key = read_bytes(r, &record.key_len);
  record.value = read_bytes(r, &record.value_len);
  uint64_t count = read_varint(r);
  if (count > (uint64_t)(r->end - r->at)) abort(); /* each header takes bytes */
  sluice_header *headers = header_slots((size_t)count);
  for (size_t i = 0; i < count; i++) {
    headers[i].name = read_bytes(r, &headers[i].name_len);
    headers[i].value = read_bytes(r, &headers[i].value_len);
  }
  record.headers = headers;
  record.header_count = (size_t)count;
  record.has_event_time = read_option_tag(r);
  if (record.has_event_time) record.event_time = read_zigzag(r);
  record.topic = read_bytes(r, &record.topic_len);
  record.partition = (int32_t)read_zigzag(r);
  record.offset = read_zigzag(r);
  reset_fields(fields, NULL, NULL);
  record.fields = fields;
  return record;
}

/* Record `index` of a projected batch of `count` records with `field_count`
 * fields each. */
static sluice_record read_projected_record(const uint8_t *batch, size_t count, size_t field_count, size_t index,
                                           sluice_record_fields *fields) {
  size_t stride = 8 * (PROJECTED_FIXED_SLOTS + field_count);
  const uint8_t *slots = batch + 16 + index * stride;
  const uint8_t *numbers = batch + 16 + count * stride + 24 * index;
  sluice_record record = {0};
  record.value = batch + read_u32(slots);
  record.value_len = read_u32(slots + 4) - read_u32(slots);
  record.has_key = read_u32(slots + 8) != PROJECTED_ABSENT;
  if (record.has_key) {
    record.key = batch + read_u32(slots + 8);
    record.key_len = read_u32(slots + 12) - read_u32(slots + 8);
  }
  record.topic = batch + read_u32(slots + 16);
  record.topic_len = read_u32(slots + 20) - read_u32(slots + 16);
  /* Headers: u32 count, then per header u32 name length, name, u32 value
   * length, value. */
  size_t header_count = 0;
  if (read_u32(slots + 24) != PROJECTED_ABSENT) {
    const uint8_t *at = batch + read_u32(slots + 24);
    header_count = read_u32(at);
    at += 4;
    sluice_header *headers = header_slots(header_count);
    for (size_t i = 0; i < header_count; i++) {
      headers[i].name_len = read_u32(at);
      headers[i].name = at + 4;
      at += 4 + headers[i].name_len;
      headers[i].value_len = read_u32(at);
      headers[i].value = at + 4;
      at += 4 + headers[i].value_len;
    }
    record.headers = headers;
  }
  record.header_count = header_count;
  int64_t event_time = read_i64(numbers);
  record.has_event_time = event_time != INT64_MIN;
  record.event_time = record.has_event_time ? event_time : 0;
  record.partition = (int32_t)read_i64(numbers + 8);
  record.offset = read_i64(numbers + 16);
  reset_fields(fields, batch, slots + 8 * PROJECTED_FIXED_SLOTS);
  record.fields = fields;
  return record;
}

/* Postcard: an unsigned LEB128 varint. */
static void write_varint(sluice_buf *out, uint64_t value) {
  while (value > 0x7F) {
    sluice_buf_push_byte(out, (uint8_t)(value & 0x7F) | 0x80);
    value >>= 7;
  }
  sluice_buf_push_byte(out, (uint8_t)value);
}

static void write_bytes(sluice_buf *out, const uint8_t *bytes, size_t len) {
  write_varint(out, len);
  sluice_buf_push(out, bytes, len);
}

#if !defined(SLUICE_AGGREGATE)

/* ------------------------------------------------- emits */

/* Whether the host found the named fields in this record's value, a JSON
 * object: it then splices replacing emits itself. */
static bool projected_object(const sluice_record *record) {
  const sluice_record_fields *fields = record->fields;
  if (fields->slots == NULL || json_field_count == 0) return false;
  return !(read_u32(fields->slots) == PROJECTED_ABSENT && read_u32(fields->slots + 4) == PROJECTED_NOT_AN_OBJECT);
}


struct sluice_out {
  const sluice_record *input;
  uint32_t index;
  /* Packed path: the batch's output items (sluice-wire `OutputItem`s) and
   * where this record's begin; NULL on the typed path. */
  sluice_buf *packed;
  size_t packed_start;
  /* Typed path: this record's emits. */
  sluice_plugin_types_emit_t *emits;
  size_t count, cap;
  bool failed;
  sluice_buf reason;
};

/* Variant numbers of sluice-wire's `OutputItem` and `Route`. */
enum { ITEM_EMIT = 0, ITEM_FAILED = 1, ITEM_EMIT_REPLACING = 2, ITEM_NO_EMITS = 3 };
enum { ROUTE_MAIN = 0, ROUTE_SIDE = 1, ROUTE_DEAD_LETTER = 2 };

/* Appends an `OutputItem::Emit` of `value` with the input's key and
 * headers on `route`. */
static void write_emit(sluice_out *out, uint8_t route, const char *route_text, const uint8_t *value, size_t len) {
  sluice_buf *buf = out->packed;
  const sluice_record *input = out->input;
  sluice_buf_push_byte(buf, ITEM_EMIT);
  write_varint(buf, out->index);
  sluice_buf_push_byte(buf, route);
  if (route != ROUTE_MAIN) write_bytes(buf, (const uint8_t *)route_text, strlen(route_text));
  sluice_buf_push_byte(buf, input->has_key ? 1 : 0);
  if (input->has_key) write_bytes(buf, input->key, input->key_len);
  write_bytes(buf, value, len);
  write_varint(buf, input->header_count);
  for (size_t i = 0; i < input->header_count; i++) {
    write_bytes(buf, input->headers[i].name, input->headers[i].name_len);
    write_bytes(buf, input->headers[i].value, input->headers[i].value_len);
  }
  sluice_buf_push_byte(buf, 0); /* event time: the input's */
}

static void copy_key_and_headers(const sluice_record *input, sluice_plugin_types_output_record_t *record) {
  record->key.is_some = input->has_key;
  if (input->has_key) {
    record->key.val.ptr = copy_bytes(input->key, input->key_len);
    record->key.val.len = input->key_len;
  }
  size_t headers = input->header_count;
  record->headers.len = headers;
  record->headers.ptr = headers ? malloc(headers * sizeof(sluice_plugin_types_header_t)) : NULL;
  if (headers && record->headers.ptr == NULL) abort();
  for (size_t i = 0; i < headers; i++) {
    const sluice_header *from = &input->headers[i];
    sluice_plugin_types_header_t *to = &record->headers.ptr[i];
    to->key.ptr = copy_bytes(from->name, from->name_len);
    to->key.len = from->name_len;
    to->value.ptr = copy_bytes(from->value, from->value_len);
    to->value.len = from->value_len;
  }
}

static void push_emit(sluice_out *out, uint8_t route, const char *route_text, const uint8_t *value, size_t len) {
  if (out->packed) {
    write_emit(out, route, route_text, value, len);
    return;
  }
  if (out->count == out->cap) {
    size_t cap = out->cap ? out->cap * 2 : 2;
    sluice_plugin_types_emit_t *grown = realloc(out->emits, cap * sizeof *grown);
    if (grown == NULL) abort();
    out->emits = grown;
    out->cap = cap;
  }
  sluice_plugin_types_emit_t *emit = &out->emits[out->count++];
  memset(emit, 0, sizeof *emit);
  emit->route.tag = route;
  if (route == SLUICE_PLUGIN_TYPES_ROUTE_SIDE) string_from(&emit->route.val.side, route_text);
  if (route == SLUICE_PLUGIN_TYPES_ROUTE_DEAD_LETTER) string_from(&emit->route.val.dead_letter, route_text);
  emit->record.value.ptr = copy_bytes(value, len);
  emit->record.value.len = len;
  copy_key_and_headers(out->input, &emit->record);
}

void sluice_forward(sluice_out *out) {
  push_emit(out, ROUTE_MAIN, NULL, out->input->value, out->input->value_len);
}

void sluice_emit(sluice_out *out, const uint8_t *value, size_t len) { push_emit(out, ROUTE_MAIN, NULL, value, len); }

void sluice_side(sluice_out *out, const char *name, const uint8_t *value, size_t len) {
  push_emit(out, ROUTE_SIDE, name, value, len);
}

void sluice_dead_letter(sluice_out *out, const char *reason) {
  push_emit(out, ROUTE_DEAD_LETTER, reason, out->input->value, out->input->value_len);
}

/* The spliced value of a replacing emit made by the SDK (reused). */
static sluice_buf replacing;

bool sluice_emit_replacing(sluice_out *out, const char *field, const uint8_t *json, size_t len) {
  const sluice_record *input = out->input;
  if (out->packed && projected_object(input)) {
    sluice_buf *buf = out->packed;
    sluice_buf_push_byte(buf, ITEM_EMIT_REPLACING);
    write_varint(buf, out->index);
    write_bytes(buf, (const uint8_t *)field, strlen(field));
    write_bytes(buf, json, len);
    return true;
  }
  /* The SDK splices, as the host would: the last field of that name
   * replaced, or the field added before the closing brace. */
  if (!parsed_object(input)) return false;
  const sluice_json *doc = &input->fields->json;
  sluice_buf_clear(&replacing);
  size_t token = sluice_json_get(doc, 0, field);
  if (token != 0) {
    const uint8_t *text;
    size_t text_len;
    token_text(doc, token, &text, &text_len);
    size_t start = (size_t)(text - input->value);
    sluice_buf_push(&replacing, input->value, start);
    sluice_buf_push(&replacing, json, len);
    sluice_buf_push(&replacing, text + text_len, input->value_len - start - text_len);
  } else {
    size_t end = input->value_len;
    while (end > 0 && (input->value[end - 1] == ' ' || input->value[end - 1] == '\t' ||
                       input->value[end - 1] == '\n' || input->value[end - 1] == '\r'))
      end--;
    sluice_buf_push(&replacing, input->value, end - 1); /* up to the closing brace */
    if (doc->tokens[0].count > 0) sluice_buf_push_byte(&replacing, ',');
    sluice_json_write_string(&replacing, (const uint8_t *)field, strlen(field));
    sluice_buf_push_byte(&replacing, ':');
    sluice_buf_push(&replacing, json, len);
    sluice_buf_push_byte(&replacing, '}');
  }
  sluice_emit(out, replacing.ptr, replacing.len);
  return true;
}

void sluice_fail(sluice_out *out, const char *format, ...) {
  out->failed = true;
  sluice_buf_clear(&out->reason);
  va_list args;
  va_start(args, format);
  buf_vprintf(&out->reason, format, args);
  va_end(args);
}
#endif

/* ------------------------------------------------------------ host */

void sluice_log(sluice_log_level level, const char *message) {
  SLUICE_WORLD(string_t) text = {(uint8_t *)message, strlen(message)};
  sluice_plugin_host_log((sluice_plugin_host_log_level_t)level, &text);
}

void sluice_counter_add(const char *name, uint64_t delta) {
  SLUICE_WORLD(string_t) text = {(uint8_t *)name, strlen(name)};
  sluice_plugin_host_counter_add(&text, delta);
}

#if !defined(SLUICE_AGGREGATE)
bool sluice_state_get(const uint8_t *key, size_t key_len, sluice_buf *value) {
  SLUICE_WORLD(list_u8_t) k = {(uint8_t *)key, key_len};
  SLUICE_WORLD(list_u8_t) found;
  if (!sluice_plugin_state_get(&k, &found)) return false;
  sluice_buf_clear(value);
  sluice_buf_push(value, found.ptr, found.len);
  SLUICE_WORLD(list_u8_free)(&found);
  return true;
}

void sluice_state_put(const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len) {
  SLUICE_WORLD(list_u8_t) k = {(uint8_t *)key, key_len};
  SLUICE_WORLD(list_u8_t) v = {(uint8_t *)value, value_len};
  sluice_plugin_state_put(&k, &v);
}

void sluice_state_delete(const uint8_t *key, size_t key_len) {
  SLUICE_WORLD(list_u8_t) k = {(uint8_t *)key, key_len};
  sluice_plugin_state_delete(&k);
}
#endif

/* ------------------------------------------------------------ exports */

/* Runs the plugin's init with `config`; on failure, its message in `err`. */
static bool run_init(bool (*init)(const sluice_config *, sluice_buf *),
                     SLUICE_WORLD(list_tuple2_string_string_t) *config, SLUICE_WORLD(string_t) *err) {
  sluice_config view = {config};
  sluice_buf error = {0};
  bool ok = init(&view, &error);
  if (!ok) {
    sluice_buf_push_byte(&error, 0);
    string_from(err, (const char *)error.ptr);
  }
  sluice_buf_free(&error);
  SLUICE_WORLD(list_tuple2_string_string_free)(config);
  return ok;
}

/* Hands `buf`'s bytes to the bindings as a list they will free. */
static void list_from(SLUICE_WORLD(list_u8_t) *list, sluice_buf *buf) {
  list->ptr = buf->ptr ? buf->ptr : copy_bytes(NULL, 0);
  list->len = buf->len;
  buf->ptr = NULL;
  buf->len = buf->cap = 0;
}

/* What sluice_field reads for the record being processed (reused). */
static sluice_record_fields record_fields;

/* The named fields as a WIT list the bindings will free (the
 * `projected-fields` export of transforms and aggregates). */
static void json_fields_list(SLUICE_WORLD(list_string_t) *ret) {
  ret->len = json_field_count;
  ret->ptr = malloc((json_field_count ? json_field_count : 1) * sizeof *ret->ptr);
  if (ret->ptr == NULL) abort();
  for (size_t i = 0; i < json_field_count; i++) string_from(&ret->ptr[i], json_fields[i]);
}

#if defined(SLUICE_AGGREGATE)

/* The packed and projected aggregate format versions this SDK reads
 * (sluice-wire's AGGREGATE_FORMAT_VERSION, AGGREGATE_PROJECTED_FORMAT_VERSION). */
#define AGGREGATE_FORMAT_VERSION 1u
#define AGGREGATE_PROJECTED_FORMAT_VERSION 1u

/* A copy of the host's accumulator bytes, or a new one if empty. */
static void accumulator_from(sluice_buf *into, const uint8_t *stored, size_t len) {
  sluice_buf_clear(into);
  if (len == 0) {
    sluice_aggregate_create(into);
  } else {
    sluice_buf_push(into, stored, len);
  }
}

/* Adds `record` to `current`; if the aggregate rejects it, puts `current`
 * back as it was (the record does not count) and leaves the reason in
 * `reason`. `before` is scratch. */
static bool add_one(sluice_buf *current, const sluice_record *record, sluice_buf *before, sluice_buf *reason) {
  sluice_buf_clear(before);
  sluice_buf_push(before, current->ptr, current->len);
  sluice_buf_clear(reason);
  if (sluice_aggregate_add(current, record, reason)) return true;
  sluice_buf_clear(current);
  sluice_buf_push(current, before->ptr, before->len);
  if (reason->len == 0) sluice_buf_push_str(reason, "rejected by the aggregate");
  return false;
}

bool exports_sluice_plugin_aggregator_init(SLUICE_WORLD(list_tuple2_string_string_t) *config, SLUICE_WORLD(string_t) *err) {
  return run_init(sluice_aggregate_init, config, err);
}

void exports_sluice_plugin_aggregator_create(SLUICE_WORLD(list_u8_t) *ret) {
  sluice_buf accumulator = {0};
  sluice_aggregate_create(&accumulator);
  list_from(ret, &accumulator);
}

void exports_sluice_plugin_aggregator_add(SLUICE_WORLD(list_u8_t) *accumulator,
                                          exports_sluice_plugin_aggregator_list_input_record_t *records,
                                          exports_sluice_plugin_aggregator_added_t *ret) {
  sluice_buf current = {0};
  sluice_buf before = {0};
  sluice_buf reason = {0};
  accumulator_from(&current, accumulator->ptr, accumulator->len);
  size_t rejected = 0;
  ret->rejected.ptr = NULL;
  for (size_t i = 0; i < records->len; i++) {
    sluice_record record = record_view(&records->ptr[i], &record_fields);
    if (add_one(&current, &record, &before, &reason)) continue;
    SLUICE_WORLD(tuple2_u32_string_t) *grown = realloc(ret->rejected.ptr, (rejected + 1) * sizeof *ret->rejected.ptr);
    if (grown == NULL) abort();
    ret->rejected.ptr = grown;
    sluice_buf_push_byte(&reason, 0);
    grown[rejected].f0 = (uint32_t)i;
    string_from(&grown[rejected].f1, (const char *)reason.ptr);
    rejected++;
  }
  ret->rejected.len = rejected;
  list_from(&ret->accumulator, &current);
  sluice_buf_free(&before);
  sluice_buf_free(&reason);
  SLUICE_WORLD(list_u8_free)(accumulator);
  exports_sluice_plugin_aggregator_list_input_record_free(records);
}

/* One group of a packed or projected `add`: its accumulator, its records'
 * rejections (postcard `Rejected`s) and their number. */
typedef struct group_add {
  sluice_buf current, before, reason, rejections;
  uint64_t rejected;
} group_add;

static void group_begin(group_add *group, const uint8_t *accumulator, size_t len) {
  accumulator_from(&group->current, accumulator, len);
  sluice_buf_clear(&group->rejections);
  group->rejected = 0;
}

static void group_record(group_add *group, const sluice_record *record, uint32_t index) {
  if (add_one(&group->current, record, &group->before, &group->reason)) return;
  write_varint(&group->rejections, index);
  write_bytes(&group->rejections, group->reason.ptr, group->reason.len);
  group->rejected++;
}

/* Appends the group's `GroupAdded`: the new accumulator, then the records
 * not added. */
static void group_end(group_add *group, sluice_buf *output) {
  write_bytes(output, group->current.ptr, group->current.len);
  write_varint(output, group->rejected);
  sluice_buf_push(output, group->rejections.ptr, group->rejections.len);
}

static void group_free(group_add *group) {
  sluice_buf_free(&group->current);
  sluice_buf_free(&group->before);
  sluice_buf_free(&group->reason);
  sluice_buf_free(&group->rejections);
}

/* An empty output (a format version this SDK does not read) makes the host
 * add group by group through the typed `add`. */
void exports_sluice_plugin_packed_aggregator_add_packed(SLUICE_WORLD(list_u8_t) *groups, SLUICE_WORLD(list_u8_t) *ret) {
  sluice_buf output = {0};
  reader r = {groups->ptr, groups->ptr + groups->len};
  if (groups->len > 0 && read_varint(&r) == AGGREGATE_FORMAT_VERSION) {
    uint64_t count = read_varint(&r);
    group_add group = {0};
    for (uint64_t g = 0; g < count; g++) {
      size_t len;
      const uint8_t *accumulator = read_bytes(&r, &len);
      uint64_t records = read_varint(&r);
      group_begin(&group, accumulator, len);
      for (uint64_t i = 0; i < records; i++) {
        sluice_record record = read_packed_record(&r, &record_fields);
        group_record(&group, &record, (uint32_t)i);
      }
      group_end(&group, &output);
    }
    group_free(&group);
  }
  list_from(ret, &output);
  SLUICE_WORLD(list_u8_free)(groups);
}

void exports_sluice_plugin_projected_aggregator_projected_fields(SLUICE_WORLD(list_string_t) *ret) {
  json_fields_list(ret);
}

/* The groups' header (as `add-packed`'s), then every group's records as one
 * projected batch. An empty output (a version this SDK does not read, or
 * fields other than those named) makes the host call `add-packed`. */
void exports_sluice_plugin_projected_aggregator_add_projected(SLUICE_WORLD(list_u8_t) *groups,
                                                              SLUICE_WORLD(list_u8_t) *ret) {
  sluice_buf output = {0};
  reader r = {groups->ptr, groups->ptr + groups->len};
  if (groups->len > 0 && read_varint(&r) == AGGREGATE_PROJECTED_FORMAT_VERSION) {
    uint64_t count = read_varint(&r);
    if (count > (uint64_t)(r.end - r.at)) abort(); /* each group takes bytes */
    const uint8_t **accumulators = malloc((count ? count : 1) * sizeof *accumulators);
    size_t *lengths = malloc((count ? count : 1) * sizeof *lengths);
    uint64_t *records = malloc((count ? count : 1) * sizeof *records);
    if (accumulators == NULL || lengths == NULL || records == NULL) abort();
    uint64_t total = 0;
    for (uint64_t g = 0; g < count; g++) {
      accumulators[g] = read_bytes(&r, &lengths[g]);
      records[g] = read_varint(&r);
      total += records[g];
    }
    const uint8_t *batch = r.at;
    size_t batch_len = (size_t)(r.end - r.at);
    if (batch_len >= 16 && read_u32(batch) == PROJECTED_FORMAT_VERSION && read_u32(batch + 4) == total &&
        read_u32(batch + 8) == json_field_count) {
      size_t tables = 16 + (size_t)total * (8 * (PROJECTED_FIXED_SLOTS + json_field_count) + 24);
      if (tables > batch_len) abort(); /* a host bug: trap, the host reports it */
      group_add group = {0};
      size_t index = 0;
      for (uint64_t g = 0; g < count; g++) {
        group_begin(&group, accumulators[g], lengths[g]);
        for (uint64_t i = 0; i < records[g]; i++, index++) {
          sluice_record record = read_projected_record(batch, (size_t)total, json_field_count, index, &record_fields);
          group_record(&group, &record, (uint32_t)i);
        }
        group_end(&group, &output);
      }
      group_free(&group);
    }
    free(accumulators);
    free(lengths);
    free(records);
  }
  list_from(ret, &output);
  SLUICE_WORLD(list_u8_free)(groups);
}

void exports_sluice_plugin_aggregator_merge(SLUICE_WORLD(list_u8_t) *a, SLUICE_WORLD(list_u8_t) *b,
                                            SLUICE_WORLD(list_u8_t) *ret) {
  sluice_buf left = {0};
  sluice_buf right = {0};
  sluice_buf merged = {0};
  accumulator_from(&left, a->ptr, a->len);
  accumulator_from(&right, b->ptr, b->len);
  sluice_aggregate_merge(left.ptr, left.len, right.ptr, right.len, &merged);
  list_from(ret, &merged);
  sluice_buf_free(&left);
  sluice_buf_free(&right);
  SLUICE_WORLD(list_u8_free)(a);
  SLUICE_WORLD(list_u8_free)(b);
}

void exports_sluice_plugin_aggregator_finish(SLUICE_WORLD(list_u8_t) *accumulator, SLUICE_WORLD(list_u8_t) *ret) {
  sluice_buf current = {0};
  sluice_buf result = {0};
  accumulator_from(&current, accumulator->ptr, accumulator->len);
  sluice_aggregate_finish(current.ptr, current.len, &result);
  list_from(ret, &result);
  sluice_buf_free(&current);
  SLUICE_WORLD(list_u8_free)(accumulator);
}

#else

bool exports_sluice_plugin_transformer_init(SLUICE_WORLD(list_tuple2_string_string_t) *config,
                                            SLUICE_WORLD(string_t) *err) {
  return run_init(sluice_plugin_init, config, err);
}

void exports_sluice_plugin_transformer_process_batch(exports_sluice_plugin_transformer_list_input_record_t *batch,
                                                     exports_sluice_plugin_transformer_list_record_outcome_t *ret) {
  ret->len = batch->len;
  ret->ptr = malloc((batch->len ? batch->len : 1) * sizeof *ret->ptr);
  if (ret->ptr == NULL) abort();
  sluice_out out = {0};
  for (size_t i = 0; i < batch->len; i++) {
    sluice_record record = record_view(&batch->ptr[i], &record_fields);
    out.input = &record;
    out.index = (uint32_t)i;
    out.emits = NULL;
    out.count = out.cap = 0;
    out.failed = false;
    sluice_plugin_process(&record, &out);
    exports_sluice_plugin_transformer_record_outcome_t *outcome = &ret->ptr[i];
    if (out.failed) {
      sluice_plugin_types_list_emit_t discarded = {out.emits, out.count};
      sluice_plugin_types_list_emit_free(&discarded);
      sluice_buf_push_byte(&out.reason, 0);
      outcome->is_err = true;
      string_from(&outcome->val.err, (const char *)out.reason.ptr);
    } else {
      outcome->is_err = false;
      outcome->val.ok.ptr = out.emits;
      outcome->val.ok.len = out.count;
    }
  }
  sluice_buf_free(&out.reason);
  exports_sluice_plugin_transformer_list_input_record_free(batch);
}

/* Runs the plugin on record `index` of a packed or projected batch: its
 * emits, or its failure alone, appended to `out->packed`. */
static void process_packed(const sluice_record *record, uint32_t index, sluice_out *out) {
  out->input = record;
  out->index = index;
  out->packed_start = out->packed->len;
  out->failed = false;
  sluice_plugin_process(record, out);
  if (out->failed) {
    out->packed->len = out->packed_start;
    sluice_buf_push_byte(out->packed, ITEM_FAILED);
    write_varint(out->packed, index);
    write_bytes(out->packed, out->reason.ptr, out->reason.len);
  }
}

void exports_sluice_plugin_packed_transformer_process_packed(SLUICE_WORLD(list_u8_t) *batch,
                                                             SLUICE_WORLD(list_u8_t) *ret) {
  sluice_buf output = {0};
  buf_reserve(&output, batch->len);
  sluice_out out = {0};
  out.packed = &output;
  reader r = {batch->ptr, batch->ptr + batch->len};
  for (uint32_t index = 0; r.at < r.end; index++) {
    sluice_record record = read_packed_record(&r, &record_fields);
    process_packed(&record, index, &out);
  }
  list_from(ret, &output);
  sluice_buf_free(&out.reason);
  SLUICE_WORLD(list_u8_free)(batch);
}

void exports_sluice_plugin_projected_packed_transformer_projected_fields(SLUICE_WORLD(list_string_t) *ret) {
  json_fields_list(ret);
}

/* An empty output (a format version this SDK does not read, or fields
 * other than those named) makes the host send the batch packed instead;
 * a batch read that emitted nothing says so with a `NoEmits` item. */
void exports_sluice_plugin_projected_packed_transformer_process_projected_packed(SLUICE_WORLD(list_u8_t) *batch,
                                                                                 SLUICE_WORLD(list_u8_t) *ret) {
  sluice_buf output = {0};
  const uint8_t *data = batch->ptr;
  if (batch->len >= 16 && read_u32(data) == PROJECTED_FORMAT_VERSION && read_u32(data + 8) == json_field_count) {
    size_t count = read_u32(data + 4);
    size_t tables = 16 + count * (8 * (PROJECTED_FIXED_SLOTS + json_field_count) + 24);
    if (tables > batch->len) abort(); /* a host bug: trap, the host reports it */
    buf_reserve(&output, batch->len / 2);
    sluice_out out = {0};
    out.packed = &output;
    for (size_t index = 0; index < count; index++) {
      sluice_record record = read_projected_record(data, count, json_field_count, index, &record_fields);
      process_packed(&record, (uint32_t)index, &out);
    }
    if (output.len == 0 && count > 0) {
      /* Nothing emitted: say the batch was read (an empty output would
       * make the host send it again). */
      sluice_buf_push_byte(&output, ITEM_NO_EMITS);
      write_varint(&output, count - 1);
    }
    sluice_buf_free(&out.reason);
  }
  list_from(ret, &output);
  SLUICE_WORLD(list_u8_free)(batch);
}

#endif

/* ------------------------------------------------------------ JSON */

typedef struct parser {
  sluice_json *json;
  size_t at;
  int depth;
} parser;

static bool fail(parser *p, const char *what) {
  snprintf(p->json->error, sizeof p->json->error, "invalid JSON value: %s at byte %zu", what, p->at);
  return false;
}

static void skip_whitespace(parser *p) {
  const uint8_t *t = p->json->text;
  while (p->at < p->json->len && (t[p->at] == ' ' || t[p->at] == '\t' || t[p->at] == '\n' || t[p->at] == '\r'))
    p->at++;
}

static size_t push_token(parser *p, sluice_json_type type) {
  sluice_json *json = p->json;
  if (json->count == json->cap) {
    size_t cap = json->cap ? json->cap * 2 : 32;
    sluice_json_token *grown = realloc(json->tokens, cap * sizeof *grown);
    if (grown == NULL) abort();
    json->tokens = grown;
    json->cap = cap;
  }
  sluice_json_token *token = &json->tokens[json->count];
  memset(token, 0, sizeof *token);
  token->type = type;
  token->start = (uint32_t)p->at;
  return json->count++;
}

static bool parse_value(parser *p);

static int hex_digit(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool read_hex4(parser *p, uint32_t *unit) {
  if (p->at + 4 > p->json->len) return fail(p, "EOF while parsing a string");
  uint32_t value = 0;
  for (int i = 0; i < 4; i++) {
    int d = hex_digit(p->json->text[p->at + i]);
    if (d < 0) return fail(p, "invalid escape");
    value = value * 16 + (uint32_t)d;
  }
  p->at += 4;
  *unit = value;
  return true;
}

/* Length of the valid UTF-8 sequence at `s` (at most `left` bytes), or 0. */
static size_t utf8_sequence(const uint8_t *s, size_t left) {
  uint8_t c = s[0];
  if (c < 0x80) return 1;
  size_t n;
  uint32_t min;
  if ((c & 0xE0) == 0xC0) n = 2, min = 0x80;
  else if ((c & 0xF0) == 0xE0) n = 3, min = 0x800;
  else if ((c & 0xF8) == 0xF0) n = 4, min = 0x10000;
  else return 0;
  if (n > left) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

static bool parse_string(parser *p, size_t index) {
  const uint8_t *t = p->json->text;
  p->at++; /* opening quote */
  p->json->tokens[index].start = (uint32_t)p->at;
  for (;;) {
    if (p->at >= p->json->len) return fail(p, "EOF while parsing a string");
    uint8_t c = t[p->at];
    if (c == '"') break;
    if (c < 0x20) return fail(p, "control character in string");
    if (c == '\\') {
      p->json->tokens[index].has_escapes = true;
      if (p->at + 1 >= p->json->len) return fail(p, "EOF while parsing a string");
      uint8_t e = t[p->at + 1];
      p->at += 2;
      if (e == 'u') {
        uint32_t unit;
        if (!read_hex4(p, &unit)) return false;
        if (unit >= 0xDC00 && unit <= 0xDFFF) return fail(p, "lone trailing surrogate in escape");
        if (unit >= 0xD800 && unit <= 0xDBFF) {
          uint32_t low;
          if (p->at + 2 > p->json->len || t[p->at] != '\\' || t[p->at + 1] != 'u')
            return fail(p, "unpaired surrogate in escape");
          p->at += 2;
          if (!read_hex4(p, &low)) return false;
          if (low < 0xDC00 || low > 0xDFFF) return fail(p, "unpaired surrogate in escape");
        }
      } else if (!strchr("\"\\/bfnrt", e) || e == 0) {
        return fail(p, "invalid escape");
      }
      continue;
    }
    size_t n = utf8_sequence(t + p->at, p->json->len - p->at);
    if (n == 0) return fail(p, "invalid UTF-8 in string");
    p->at += n;
  }
  p->json->tokens[index].end = (uint32_t)p->at;
  p->at++; /* closing quote */
  return true;
}

static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static bool parse_number(parser *p, size_t index) {
  const uint8_t *t = p->json->text;
  size_t len = p->json->len;
  size_t start = p->at;
  bool integer = true;
  if (t[p->at] == '-') p->at++;
  if (p->at >= len || !is_digit(t[p->at])) return fail(p, "invalid number");
  if (t[p->at] == '0') {
    p->at++;
  } else {
    while (p->at < len && is_digit(t[p->at])) p->at++;
  }
  if (p->at < len && t[p->at] == '.') {
    integer = false;
    p->at++;
    if (p->at >= len || !is_digit(t[p->at])) return fail(p, "invalid number");
    while (p->at < len && is_digit(t[p->at])) p->at++;
  }
  if (p->at < len && (t[p->at] == 'e' || t[p->at] == 'E')) {
    integer = false;
    p->at++;
    if (p->at < len && (t[p->at] == '+' || t[p->at] == '-')) p->at++;
    if (p->at >= len || !is_digit(t[p->at])) return fail(p, "invalid number");
    while (p->at < len && is_digit(t[p->at])) p->at++;
  }
  sluice_json_token *token = &p->json->tokens[index];
  token->start = (uint32_t)start;
  token->end = (uint32_t)p->at;
  if (integer) {
    uint64_t u;
    int64_t i;
    token->is_integer = true; /* provisionally, for the range checks below */
    bool negative = t[start] == '-';
    bool minus_zero = negative && p->at - start == 2 && t[start + 1] == '0';
    token->is_integer = !minus_zero && (negative ? sluice_json_i64(p->json, index, &i)
                                                 : sluice_json_u64(p->json, index, &u));
  }
  return true;
}

static bool parse_literal(parser *p, const char *word) {
  size_t n = strlen(word);
  if (p->at + n > p->json->len || memcmp(p->json->text + p->at, word, n) != 0) return fail(p, "expected value");
  p->at += n;
  return true;
}

static bool parse_value(parser *p) {
  skip_whitespace(p);
  if (p->at >= p->json->len) return fail(p, "EOF while parsing a value");
  uint8_t c = p->json->text[p->at];
  size_t index;
  switch (c) {
  case '{':
  case '[': {
    bool object = c == '{';
    uint8_t close = object ? '}' : ']';
    if (++p->depth > 128) return fail(p, "recursion limit exceeded");
    index = push_token(p, object ? SLUICE_JSON_OBJECT : SLUICE_JSON_ARRAY);
    p->at++;
    skip_whitespace(p);
    uint32_t count = 0;
    if (p->at < p->json->len && p->json->text[p->at] == close) {
      p->at++;
    } else {
      for (;;) {
        skip_whitespace(p);
        if (object) {
          if (p->at >= p->json->len || p->json->text[p->at] != '"') return fail(p, "key must be a string");
          size_t key = push_token(p, SLUICE_JSON_STRING);
          if (!parse_string(p, key)) return false;
          p->json->tokens[key].next = (uint32_t)p->json->count;
          skip_whitespace(p);
          if (p->at >= p->json->len || p->json->text[p->at] != ':') return fail(p, "expected `:`");
          p->at++;
        }
        if (!parse_value(p)) return false;
        count++;
        skip_whitespace(p);
        if (p->at >= p->json->len) return fail(p, "EOF while parsing a container");
        uint8_t d = p->json->text[p->at++];
        if (d == close) break;
        if (d != ',') return fail(p, object ? "expected `,` or `}`" : "expected `,` or `]`");
      }
    }
    p->depth--;
    p->json->tokens[index].count = count;
    p->json->tokens[index].end = (uint32_t)p->at;
    break;
  }
  case '"':
    index = push_token(p, SLUICE_JSON_STRING);
    if (!parse_string(p, index)) return false;
    break;
  case 't':
    index = push_token(p, SLUICE_JSON_TRUE);
    if (!parse_literal(p, "true")) return false;
    break;
  case 'f':
    index = push_token(p, SLUICE_JSON_FALSE);
    if (!parse_literal(p, "false")) return false;
    break;
  case 'n':
    index = push_token(p, SLUICE_JSON_NULL);
    if (!parse_literal(p, "null")) return false;
    break;
  default:
    if (c != '-' && !is_digit(c)) return fail(p, "expected value");
    index = push_token(p, SLUICE_JSON_NUMBER);
    if (!parse_number(p, index)) return false;
    break;
  }
  if (p->json->tokens[index].type != SLUICE_JSON_STRING && p->json->tokens[index].type != SLUICE_JSON_NUMBER)
    p->json->tokens[index].end = (uint32_t)p->at;
  p->json->tokens[index].next = (uint32_t)p->json->count;
  return true;
}

bool sluice_json_parse(sluice_json *json, const uint8_t *text, size_t len) {
  json->text = text;
  json->len = len;
  json->count = 0;
  json->error[0] = 0;
  parser p = {json, 0, 0};
  if (!parse_value(&p)) return false;
  skip_whitespace(&p);
  if (p.at != len) return fail(&p, "trailing characters");
  return true;
}

void sluice_json_free(sluice_json *json) {
  free(json->tokens);
  json->tokens = NULL;
  json->count = json->cap = 0;
}

size_t sluice_json_get(const sluice_json *json, size_t object, const char *key) {
  if (json->tokens[object].type != SLUICE_JSON_OBJECT) return 0;
  size_t found = 0;
  size_t child = object + 1;
  for (uint32_t i = 0; i < json->tokens[object].count; i++) {
    size_t value = json->tokens[child].next;
    if (sluice_json_string_equals(json, child, key)) found = value;
    child = json->tokens[value].next;
  }
  return found;
}

void sluice_json_string(const sluice_json *json, size_t token, sluice_buf *out) {
  const sluice_json_token *tok = &json->tokens[token];
  const uint8_t *t = json->text;
  if (!tok->has_escapes) {
    sluice_buf_push(out, t + tok->start, tok->end - tok->start);
    return;
  }
  size_t i = tok->start;
  while (i < tok->end) {
    if (t[i] != '\\') {
      sluice_buf_push_byte(out, t[i++]);
      continue;
    }
    uint8_t e = t[i + 1];
    i += 2;
    switch (e) {
    case 'b': sluice_buf_push_byte(out, '\b'); break;
    case 'f': sluice_buf_push_byte(out, '\f'); break;
    case 'n': sluice_buf_push_byte(out, '\n'); break;
    case 'r': sluice_buf_push_byte(out, '\r'); break;
    case 't': sluice_buf_push_byte(out, '\t'); break;
    case 'u': {
      uint32_t cp = 0;
      for (int k = 0; k < 4; k++) cp = cp * 16 + (uint32_t)hex_digit(t[i + k]);
      i += 4;
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t low = 0;
        for (int k = 0; k < 4; k++) low = low * 16 + (uint32_t)hex_digit(t[i + 2 + k]);
        i += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
      }
      if (cp < 0x80) {
        sluice_buf_push_byte(out, (uint8_t)cp);
      } else if (cp < 0x800) {
        sluice_buf_push_byte(out, (uint8_t)(0xC0 | (cp >> 6)));
        sluice_buf_push_byte(out, (uint8_t)(0x80 | (cp & 0x3F)));
      } else if (cp < 0x10000) {
        sluice_buf_push_byte(out, (uint8_t)(0xE0 | (cp >> 12)));
        sluice_buf_push_byte(out, (uint8_t)(0x80 | ((cp >> 6) & 0x3F)));
        sluice_buf_push_byte(out, (uint8_t)(0x80 | (cp & 0x3F)));
      } else {
        sluice_buf_push_byte(out, (uint8_t)(0xF0 | (cp >> 18)));
        sluice_buf_push_byte(out, (uint8_t)(0x80 | ((cp >> 12) & 0x3F)));
        sluice_buf_push_byte(out, (uint8_t)(0x80 | ((cp >> 6) & 0x3F)));
        sluice_buf_push_byte(out, (uint8_t)(0x80 | (cp & 0x3F)));
      }
      break;
    }
    default: sluice_buf_push_byte(out, e); break; /* " \ / */
    }
  }
}

bool sluice_json_string_equals(const sluice_json *json, size_t token, const char *text) {
  const sluice_json_token *tok = &json->tokens[token];
  if (tok->type != SLUICE_JSON_STRING) return false;
  size_t len = strlen(text);
  if (!tok->has_escapes) return tok->end - tok->start == len && memcmp(json->text + tok->start, text, len) == 0;
  sluice_buf decoded = {0};
  sluice_json_string(json, token, &decoded);
  bool equal = decoded.len == len && memcmp(decoded.ptr, text, len) == 0;
  sluice_buf_free(&decoded);
  return equal;
}

bool sluice_json_u64(const sluice_json *json, size_t token, uint64_t *value) {
  const sluice_json_token *tok = &json->tokens[token];
  if (tok->type != SLUICE_JSON_NUMBER || !tok->is_integer || json->text[tok->start] == '-') return false;
  uint64_t v = 0;
  for (size_t i = tok->start; i < tok->end; i++) {
    uint64_t d = (uint64_t)(json->text[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *value = v;
  return true;
}

bool sluice_json_i64(const sluice_json *json, size_t token, int64_t *value) {
  const sluice_json_token *tok = &json->tokens[token];
  if (tok->type != SLUICE_JSON_NUMBER || !tok->is_integer) return false;
  bool negative = json->text[tok->start] == '-';
  uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  uint64_t v = 0;
  for (size_t i = tok->start + (negative ? 1 : 0); i < tok->end; i++) {
    uint64_t d = (uint64_t)(json->text[i] - '0');
    if (v > (limit - d) / 10) return false;
    v = v * 10 + d;
  }
  *value = negative ? (int64_t)(0 - v) : (int64_t)v;
  return true;
}

void sluice_json_write_number(sluice_buf *out, const sluice_json *json, size_t token) {
  const sluice_json_token *tok = &json->tokens[token];
  const uint8_t *text = json->text + tok->start;
  size_t len = tok->end - tok->start;
  for (size_t i = 0; i < len; i++) {
    if (text[i] == 'e' || text[i] == 'E') {
      sluice_buf_push(out, text, i);
      sluice_buf_push_byte(out, 'e');
      if (i + 1 < len && text[i + 1] != '+' && text[i + 1] != '-') sluice_buf_push_byte(out, '+');
      sluice_buf_push(out, text + i + 1, len - i - 1);
      return;
    }
  }
  sluice_buf_push(out, text, len);
}

void sluice_json_write_string(sluice_buf *out, const uint8_t *text, size_t len) {
  static const char hex[] = "0123456789abcdef";
  sluice_buf_push_byte(out, '"');
  size_t run = 0;
  for (size_t i = 0; i < len; i++) {
    uint8_t c = text[i];
    const char *escape = NULL;
    char unicode[7];
    switch (c) {
    case '"': escape = "\\\""; break;
    case '\\': escape = "\\\\"; break;
    case '\b': escape = "\\b"; break;
    case '\f': escape = "\\f"; break;
    case '\n': escape = "\\n"; break;
    case '\r': escape = "\\r"; break;
    case '\t': escape = "\\t"; break;
    default:
      if (c < 0x20) {
        memcpy(unicode, "\\u00", 4);
        unicode[4] = hex[c >> 4];
        unicode[5] = hex[c & 0xF];
        unicode[6] = 0;
        escape = unicode;
      }
    }
    if (escape) {
      sluice_buf_push(out, text + run, i - run);
      sluice_buf_push_str(out, escape);
      run = i + 1;
    }
  }
  sluice_buf_push(out, text + run, len - run);
  sluice_buf_push_byte(out, '"');
}

bool sluice_json_text_i64(const uint8_t *json, size_t len, int64_t *value) {
  size_t at = len > 0 && json[0] == '-' ? 1 : 0;
  if (at == len) return false;
  bool negative = at == 1;
  uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  uint64_t v = 0;
  for (; at < len; at++) {
    if (!is_digit(json[at])) return false;
    uint64_t d = (uint64_t)(json[at] - '0');
    if (v > (limit - d) / 10) return false;
    v = v * 10 + d;
  }
  *value = negative ? (int64_t)(0 - v) : (int64_t)v;
  return true;
}

bool sluice_json_text_string(const uint8_t *json, size_t len, sluice_buf *out) {
  if (len < 2 || json[0] != '"' || json[len - 1] != '"') return false;
  if (memchr(json + 1, '\\', len - 2) == NULL) {
    sluice_buf_push(out, json + 1, len - 2);
    return true;
  }
  sluice_json parsed = {0};
  bool ok = sluice_json_parse(&parsed, json, len) && parsed.tokens[0].type == SLUICE_JSON_STRING;
  if (ok) sluice_json_string(&parsed, 0, out);
  sluice_json_free(&parsed);
  return ok;
}
