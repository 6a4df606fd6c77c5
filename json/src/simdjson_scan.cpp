// The host's one pass over a JSON record, with simdjson's On-Demand parser
// (Debian's libsimdjson-dev). See `mod.rs` for why and for the contract;
// this file only walks documents and reports where the fields asked for lie.
//
// Every value is visited, so the document is checked whole: simdjson's
// first stage checks UTF-8, unescaped control characters and unclosed
// strings over the whole document; visiting a value checks its syntax
// (numbers, escapes, literals, commas and colons). A document this walk
// refuses, or one it does not handle (too deep, too large, a scalar at the
// top), is handed back to the caller, which parses it with serde_json:
// serde_json alone decides what is refused and why.

#include <simdjson.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>

namespace {

using namespace simdjson;

// Deeper documents go to serde_json, whose limit (128) decides.
constexpr int kMaxDepth = 100;
// Larger documents go to serde_json: the parser keeps buffers the size of
// the largest document it has seen.
constexpr size_t kMaxDocument = 1 << 20;

// More names go to serde_json: a key's matches are kept as bits.
constexpr size_t kMaxNames = 64;

constexpr uint32_t kMissing = 0;
constexpr uint32_t kInteger = 1;
constexpr uint32_t kOther = 2;

// One parser per thread and a padded copy of the document: simdjson reads
// up to SIMDJSON_PADDING bytes past a document's end.
struct Scanner {
  ondemand::parser parser;
  std::unique_ptr<char[]> buffer;
  size_t capacity = 0;

  // The document copied into the padded buffer, or null if there is no
  // memory for it.
  const char *copy(const uint8_t *document, size_t length) noexcept {
    size_t needed = length + SIMDJSON_PADDING;
    if (needed > capacity) {
      buffer.reset(new (std::nothrow) char[needed]);
      capacity = buffer ? needed : 0;
      if (!buffer) {
        return nullptr;
      }
    }
    std::memcpy(buffer.get(), document, length);
    std::memset(buffer.get() + length, 0, SIMDJSON_PADDING);
    return buffer.get();
  }
};

thread_local Scanner scanner;

static_assert(SIMDJSON_PADDING == 64, "json_scan::PADDING is simdjson's padding");

// The document itself if `readable` bytes from its start can be read (it
// is followed by the padding), else its padded copy (null: no memory).
const char *in_place_or_copy(const uint8_t *document, size_t length, size_t readable) noexcept {
  if (readable >= length + SIMDJSON_PADDING) {
    return reinterpret_cast<const char *>(document);
  }
  return scanner.copy(document, length);
}

error_code walk_object(ondemand::object &object, int depth) noexcept;
error_code walk_array(ondemand::array &array, int depth) noexcept;

// Checks one value and everything in it. Inlined where it is called, so
// that a scalar (most values) is checked without the parser's iterator
// being copied into a call: such copies, stored as two words and loaded as
// one, stalled the CPU on every field (ADR 0015, nineteenth step).
__attribute__((always_inline)) inline error_code walk_value(ondemand::value &value,
                                                             int depth) noexcept {
  if (depth > kMaxDepth) {
    return DEPTH_ERROR;
  }
  ondemand::json_type type;
  if (auto error = value.type().get(type)) {
    return error;
  }
  switch (type) {
  case ondemand::json_type::object: {
    ondemand::object object;
    if (auto error = value.get_object().get(object)) {
      return error;
    }
    return walk_object(object, depth);
  }
  case ondemand::json_type::array: {
    ondemand::array array;
    if (auto error = value.get_array().get(array)) {
      return error;
    }
    return walk_array(array, depth);
  }
  case ondemand::json_type::number: {
    ondemand::number number;
    return value.get_number().get(number);
  }
  case ondemand::json_type::string: {
    std::string_view text;
    return value.get_string().get(text);
  }
  case ondemand::json_type::boolean: {
    bool truth;
    return value.get_bool().get(truth);
  }
  case ondemand::json_type::null: {
    bool null;
    if (auto error = value.is_null().get(null)) {
      return error;
    }
    return null ? SUCCESS : N_ATOM_ERROR;
  }
  }
  return TAPE_ERROR;
}

error_code walk_object(ondemand::object &object, int depth) noexcept {
  for (auto result : object) {
    ondemand::field field;
    if (auto error = std::move(result).get(field)) {
      return error;
    }
    std::string_view key;
    if (auto error = field.unescaped_key().get(key)) {
      return error;
    }
    if (auto error = walk_value(field.value(), depth + 1)) {
      return error;
    }
  }
  return SUCCESS;
}

error_code walk_array(ondemand::array &array, int depth) noexcept {
  for (auto result : array) {
    ondemand::value element;
    if (auto error = std::move(result).get(element)) {
      return error;
    }
    if (auto error = walk_value(element, depth + 1)) {
      return error;
    }
  }
  return SUCCESS;
}

// A key is the name asked for (`length` bytes at `name`): compared in line,
// as keys and names are a few bytes (a `memcmp` call per key and name cost
// more than the compare).
bool same_name(std::string_view key, const uint8_t *name, size_t length) noexcept {
  if (key.size() != length) {
    return false;
  }
  for (size_t i = 0; i < length; i++) {
    if (static_cast<uint8_t>(key[i]) != name[i]) {
      return false;
    }
  }
  return true;
}

bool is_json_whitespace(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Nothing but whitespace follows the document's value.
bool at_end(ondemand::document &document) noexcept {
  const char *next;
  return document.current_location().get(next) == OUT_OF_BOUNDS;
}

} // namespace

extern "C" {

// Where a field asked for lies: its value's text is [start, end) of the
// document; `kind` is kMissing, kInteger (then `integer` is its value, an
// integer within i64 other than -0) or kOther.
struct sluice_json_field {
  uint32_t start;
  uint32_t end;
  uint32_t kind;
  int64_t integer;
};

// `readable` is how many bytes from the document's start may be read: with
// SIMDJSON_PADDING past its end, the document is scanned in place.
//
// Checks that `document` is one JSON object and finds the top-level fields
// named (UTF-8, unescaped) by `names`: `count` names one after another in
// `text`, name i ending at `ends[i]` (and starting where the one before
// ends). One slot in `fields` per name; a name found twice keeps its last
// value. Returns how many fields the object has, or -1 if the document is
// handed back to the caller (refused or not handled here).
int64_t sluice_json_scan_object(const uint8_t *document, size_t length, size_t readable,
                                const uint8_t *text, const uint32_t *ends, size_t count,
                                sluice_json_field *fields) noexcept {
  for (size_t i = 0; i < count; i++) {
    fields[i] = sluice_json_field{0, 0, kMissing, 0};
  }
  if (length > kMaxDocument || count > kMaxNames) {
    return -1;
  }
  const char *base = in_place_or_copy(document, length, readable);
  if (base == nullptr) {
    return -1;
  }
  ondemand::document parsed;
  if (scanner.parser.iterate(base, length, length + SIMDJSON_PADDING).get(parsed)) {
    return -1;
  }
  ondemand::object object;
  if (parsed.get_object().get(object)) {
    return -1;
  }
  int64_t entries = 0;
  for (auto result : object) {
    ondemand::field field;
    if (std::move(result).get(field)) {
      return -1;
    }
    std::string_view key;
    if (field.unescaped_key().get(key)) {
      return -1;
    }
    entries++;
    // Which names this key is, as bits (at most 64 names: checked above).
    uint64_t matched = 0;
    for (size_t i = 0, start = 0; i < count; start = ends[i], i++) {
      matched |= uint64_t{same_name(key, text + start, ends[i] - start)} << i;
    }
    ondemand::value &value = field.value();
    if (matched == 0) {
      if (walk_value(value, 1)) {
        return -1;
      }
      continue;
    }
    // A scalar's token runs to the next token (`,` or `}`); an object or
    // array ends where the walk through it leaves the parser. Either way
    // the whitespace before the next token is not the value's.
    std::string_view token = value.raw_json_token();
    const char *start = token.data();
    const char *end = start + token.size();
    uint32_t kind = kOther;
    int64_t integer = 0;
    ondemand::json_type type;
    if (value.type().get(type)) {
      return -1;
    }
    if (type == ondemand::json_type::number) {
      ondemand::number number;
      if (value.get_number().get(number)) {
        return -1;
      }
      // serde_json reads -0 as a float: so does the caller.
      if (number.is_int64() && !(number.get_int64() == 0 && *start == '-')) {
        kind = kInteger;
        integer = number.get_int64();
      }
    } else {
      if (walk_value(value, 1)) {
        return -1;
      }
      if (type == ondemand::json_type::object || type == ondemand::json_type::array) {
        if (parsed.current_location().get(end)) {
          return -1;
        }
      }
    }
    while (end > start && is_json_whitespace(end[-1])) {
      end--;
    }
    sluice_json_field found{static_cast<uint32_t>(start - base),
                            static_cast<uint32_t>(end - base), kind, integer};
    for (; matched != 0; matched &= matched - 1) {
      fields[__builtin_ctzll(matched)] = found;
    }
  }
  if (!at_end(parsed)) {
    return -1;
  }
  return entries;
}

// Checks that `document` is one JSON object or array: 1 if it is, 0 if it
// is handed back to the caller (refused, or a scalar, or not handled here).
int32_t sluice_json_check(const uint8_t *document, size_t length, size_t readable) noexcept {
  if (length > kMaxDocument) {
    return 0;
  }
  const char *base = in_place_or_copy(document, length, readable);
  if (base == nullptr) {
    return 0;
  }
  ondemand::document parsed;
  if (scanner.parser.iterate(base, length, length + SIMDJSON_PADDING).get(parsed)) {
    return 0;
  }
  ondemand::json_type type;
  if (parsed.type().get(type)) {
    return 0;
  }
  if (type == ondemand::json_type::object) {
    ondemand::object object;
    if (parsed.get_object().get(object) || walk_object(object, 1)) {
      return 0;
    }
  } else if (type == ondemand::json_type::array) {
    ondemand::array array;
    if (parsed.get_array().get(array) || walk_array(array, 1)) {
      return 0;
    }
  } else {
    return 0;
  }
  return at_end(parsed) ? 1 : 0;
}

// The simdjson kernel this file was compiled for ("haswell", "arm64", ...;
// "fallback" would mean no SIMD).
const char *sluice_json_implementation() noexcept {
  return SIMDJSON_STRINGIFY(SIMDJSON_BUILTIN_IMPLEMENTATION);
}

} // extern "C"
