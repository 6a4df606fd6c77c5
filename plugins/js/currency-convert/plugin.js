// currency-convert (JavaScript): Nexmark q1, bid prices from dollars to euros.
//
// `SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid`
// with integer cents (`price * rate_per_mille / 1000`, exact with BigInt).
// Events other than bids are dropped. Same output, byte for byte, as
// plugins/currency-convert (Rust) with JSON events.
// Config: `rate_per_mille` (default 908).

import { JsonNumber, RecordError, exportTransform } from "./sluice.js";

const U64_MAX = 2n ** 64n - 1n;
const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

const isU64 = (v) => v instanceof JsonNumber && v.isInteger && v.bigint() >= 0n;
const isI64 = (v) => v instanceof JsonNumber && v.isInteger && v.bigint() >= I64_MIN && v.bigint() <= I64_MAX;
const isString = (v) => typeof v === "string";

function field(event, name, fallback, check, expected) {
  const value = event.has(name) ? event.get(name) : fallback;
  if (!check(value)) throw new RecordError(`invalid JSON value: field \`${name}\` must be ${expected}`);
  return value;
}

class CurrencyConvert {
  constructor(config) {
    this.ratePerMille = config.getInteger("rate_per_mille", 908n);
    const encoding = config.get("encoding") ?? "json";
    if (encoding !== "json") {
      throw new Error(`config key \`encoding\`: \`${encoding}\` is not supported by the JavaScript plugin (use json)`);
    }
  }

  process(record, out) {
    const event = record.json();
    if (!(event instanceof Map)) throw new RecordError("invalid JSON value: an event must be a JSON object");
    const zero = new JsonNumber("0", true);
    const eventType = field(event, "event_type", undefined, isString, "a string");
    const auction = field(event, "auction", zero, isU64, "an unsigned 64-bit integer");
    const bidder = field(event, "bidder", zero, isU64, "an unsigned 64-bit integer");
    const price = field(event, "price", zero, isU64, "an unsigned 64-bit integer");
    const dateTime = field(event, "date_time", zero, isI64, "a signed 64-bit integer");
    const extra = field(event, "extra", "", isString, "a string");
    if (eventType !== "bid") return;
    const converted = price.bigint() * this.ratePerMille;
    if (converted > U64_MAX) throw new RecordError("price * rate_per_mille overflows an unsigned 64-bit integer");
    out.emitJson(new Map([
      ["auction", auction.bigint()],
      ["bidder", bidder.bigint()],
      ["price", converted / 1000n],
      ["date_time", dateTime.bigint()],
      ["extra", extra],
    ]));
  }
}

export const transformer = exportTransform(CurrencyConvert);
