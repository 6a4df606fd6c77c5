/*
 * hot-items (C): Nexmark q5, second stage, as a window aggregate: per window
 * end, the auctions with the most bids. Input: the first stage's window
 * results ({"key": <auction>, "window_end": .., "result": <count>, ...});
 * output: {"window_end": .., "bids": <max count>, "auctions": [<auction
 * ids with that count, ascending>]}. Same results as plugins/hot-items
 * (Rust).
 *
 * The accumulator is little more than a struct copied into bytes: window
 * end, bids, then the leading auctions.
 */
#define SLUICE_AGGREGATE 1

#include <string.h>

#include "sluice.h"

typedef struct leaders_header {
  int64_t window_end;
  uint64_t bids;
  uint64_t count;
} leaders_header;

static leaders_header header_of(const uint8_t *bytes, size_t len) {
  leaders_header header = {0, 0, 0};
  if (len >= sizeof header) memcpy(&header, bytes, sizeof header);
  return header;
}

static uint64_t auction_at(const uint8_t *bytes, uint64_t index) {
  uint64_t auction;
  memcpy(&auction, bytes + sizeof(leaders_header) + index * sizeof auction, sizeof auction);
  return auction;
}

/* Writes leaders `header` with `auctions` into `out`. */
static void write_leaders(sluice_buf *out, leaders_header header, const uint64_t *auctions) {
  sluice_buf_clear(out);
  sluice_buf_push(out, &header, sizeof header);
  sluice_buf_push(out, auctions, header.count * sizeof *auctions);
}

/* Offers `auctions` with `bids` bids to the leaders in `acc` (in place). */
static void offer(sluice_buf *acc, uint64_t bids, const uint64_t *auctions, uint64_t count) {
  leaders_header header = header_of(acc->ptr, acc->len);
  sluice_buf list = {0};
  if (bids >= header.bids) {
    if (bids == header.bids) sluice_buf_push(&list, acc->ptr + sizeof header, header.count * sizeof(uint64_t));
    header.bids = bids;
    for (uint64_t i = 0; i < count; i++) {
      /* Insert keeping the list sorted and free of repeats. */
      uint64_t n = list.len / sizeof(uint64_t), at = 0;
      uint64_t *items = (uint64_t *)list.ptr;
      while (at < n && items[at] < auctions[i]) at++;
      if (at < n && items[at] == auctions[i]) continue;
      sluice_buf_push(&list, &auctions[i], sizeof auctions[i]);
      items = (uint64_t *)list.ptr;
      memmove(items + at + 1, items + at, (n - at) * sizeof *items);
      items[at] = auctions[i];
    }
    header.count = list.len / sizeof(uint64_t);
    write_leaders(acc, header, (const uint64_t *)list.ptr);
  }
  sluice_buf_free(&list);
}

bool sluice_aggregate_init(const sluice_config *config, sluice_buf *error) {
  (void)config;
  (void)error;
  return true;
}

void sluice_aggregate_create(sluice_buf *accumulator) {
  leaders_header empty = {0, 0, 0};
  write_leaders(accumulator, empty, NULL);
}

/* The auction id in key string token `token`, as Rust's u64 parser reads it
 * (an optional `+`, then digits, within u64). */
static bool parse_auction(const sluice_json *json, size_t token, uint64_t *auction) {
  sluice_buf text = {0};
  sluice_json_string(json, token, &text);
  size_t at = (text.len > 0 && text.ptr[0] == '+') ? 1 : 0;
  bool ok = at < text.len;
  *auction = 0;
  for (; ok && at < text.len; at++) {
    uint8_t c = text.ptr[at];
    if (c < '0' || c > '9' || *auction > (UINT64_MAX - (c - '0')) / 10) {
      ok = false;
    } else {
      *auction = *auction * 10 + (c - '0');
    }
  }
  sluice_buf_free(&text);
  return ok;
}

bool sluice_aggregate_add(sluice_buf *accumulator, const sluice_record *record, sluice_buf *reason) {
  sluice_json json = {0};
  bool ok = sluice_json_parse(&json, record->value, record->value_len);
  if (!ok) {
    sluice_buf_push_str(reason, json.error);
  } else if (json.tokens[0].type != SLUICE_JSON_OBJECT) {
    sluice_buf_push_str(reason, "a window result must be a JSON object");
    ok = false;
  }
  size_t key = ok ? sluice_json_get(&json, 0, "key") : 0;
  size_t window_end = ok ? sluice_json_get(&json, 0, "window_end") : 0;
  size_t result = ok ? sluice_json_get(&json, 0, "result") : 0;
  uint64_t auction = 0, bids = 0;
  int64_t end = 0;
  /* A numeric key, or digits in a string. */
  bool key_ok = key != 0 && (json.tokens[key].type == SLUICE_JSON_STRING ? parse_auction(&json, key, &auction)
                                                                          : sluice_json_u64(&json, key, &auction));
  if (ok && !key_ok) {
    sluice_buf_push_str(reason, "auction key is not a number");
    ok = false;
  }
  if (ok && (window_end == 0 || !sluice_json_i64(&json, window_end, &end))) {
    sluice_buf_push_str(reason, "field `window_end` must be a 64-bit integer");
    ok = false;
  }
  if (ok && (result == 0 || !sluice_json_u64(&json, result, &bids))) {
    sluice_buf_push_str(reason, "field `result` must be an unsigned 64-bit integer");
    ok = false;
  }
  sluice_json_free(&json);
  if (!ok) return false;
  leaders_header header = header_of(accumulator->ptr, accumulator->len);
  if (end > header.window_end) {
    header.window_end = end;
    memcpy(accumulator->ptr, &header, sizeof header);
  }
  offer(accumulator, bids, &auction, 1);
  return true;
}

void sluice_aggregate_merge(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len, sluice_buf *merged) {
  leaders_header left = header_of(a, a_len), right = header_of(b, b_len);
  sluice_buf_push(merged, a, a_len);
  if (right.window_end > left.window_end) {
    left.window_end = right.window_end;
    memcpy(merged->ptr, &left, sizeof left);
  }
  sluice_buf auctions = {0};
  for (uint64_t i = 0; i < right.count; i++) {
    uint64_t auction = auction_at(b, i);
    sluice_buf_push(&auctions, &auction, sizeof auction);
  }
  offer(merged, right.bids, (const uint64_t *)auctions.ptr, right.count);
  sluice_buf_free(&auctions);
}

void sluice_aggregate_finish(const uint8_t *accumulator, size_t len, sluice_buf *result) {
  leaders_header header = header_of(accumulator, len);
  sluice_buf_printf(result, "{\"window_end\":%lld,\"bids\":%llu,\"auctions\":[", (long long)header.window_end,
                    (unsigned long long)header.bids);
  for (uint64_t i = 0; i < header.count; i++) {
    sluice_buf_printf(result, i ? ",%llu" : "%llu", (unsigned long long)auction_at(accumulator, i));
  }
  sluice_buf_push_str(result, "]}");
}
