// Sluice plugin SDK for JavaScript.
//
// A plugin is a class with `constructor(config)` and `process(record, out)`;
// `exportTransform(MyPlugin)` turns it into the `transformer` export of the
// `sluice:plugin/transform` world:
//
//     import { exportTransform } from "./sluice.js";
//
//     class Upper {
//       constructor(config) { this.field = config.get("field") ?? "name"; }
//       process(record, out) {
//         const event = record.json();              // objects are Maps
//         event.set(this.field, event.get(this.field).toUpperCase());
//         out.emitJson(event);
//       }
//     }
//
//     export const transformer = exportTransform(Upper);
//
// A window aggregate extends `Aggregate` (`create`, `add`, `merge`, `finish`
// over an accumulator: any JSON value, stored by the host per key and
// window, that comes back parsed like `record.json()`: objects as Maps,
// numbers as JsonNumbers) and is exported as
// `export const aggregator = exportAggregate(MyAggregate);`, which makes
// `sluice plugin build` build the `sluice:plugin/aggregate` world.
//
// `sluice plugin build` compiles it with componentize-js; this file is
// embedded in the `sluice` binary and placed beside the plugin at build time.
//
// Errors: throwing `new RecordError("why")` (or any error) in `process` sends
// that record alone to the dead-letter output with the message as the
// reason. Throwing in the constructor stops the pipeline at start-up.
//
// JSON: `record.json()` parses strictly, like the Rust SDK. Objects become
// `Map`s (insertion order is kept exactly, even for keys like "1"), numbers
// become `JsonNumber`s that keep their exact text, and `stringifyJson`
// writes compact JSON byte-identical to the Rust SDK's for the same value.

import { counterAdd as hostCounterAdd, log as hostLog } from "sluice:plugin/host@0.1.0";
// Host state in the `transform` world; a stub that throws in the `aggregate`
// world (which has none): `sluice plugin build` stages the right one.
import * as hostState from "./sluice-state.js";

/** Thrown by `process`: the record is dead-lettered with this message. */
export class RecordError extends Error {}

// ------------------------------------------------------------------ JSON

const I64_MIN = -(2n ** 63n);
const U64_MAX = 2n ** 64n - 1n;

/** A JSON number with its source text (exponent normalised as serde_json
 * does: `1E3` becomes `1e+3`). `isInteger` follows serde_json:
 * an integer token within the 64-bit range, other than `-0`. Arithmetic on
 * it uses `valueOf()` (a double); use `bigint()` for exact integers. */
export class JsonNumber {
  constructor(text, isInteger) {
    this.text = text;
    this.isInteger = isInteger;
  }
  valueOf() {
    return Number(this.text);
  }
  toString() {
    return this.text;
  }
  /** The exact integer (only when `isInteger`). */
  bigint() {
    return BigInt(this.text);
  }
}

const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;
const utf8Decoder = new TextDecoder("utf-8", { fatal: true });
const utf8Encoder = new TextEncoder();

class Parser {
  constructor(text) {
    this.text = text;
    this.at = 0;
    this.depth = 0;
  }
  fail(message) {
    throw new RecordError(`invalid JSON value: ${message} at character ${this.at}`);
  }
  skipWhitespace() {
    const t = this.text;
    while (this.at < t.length) {
      const c = t.charCodeAt(this.at);
      if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
      this.at++;
    }
  }
  value() {
    this.skipWhitespace();
    const c = this.text[this.at];
    if (c === "{") return this.object();
    if (c === "[") return this.array();
    if (c === '"') return this.string();
    if (c === "-" || (c >= "0" && c <= "9")) return this.number();
    for (const [word, value] of [["true", true], ["false", false], ["null", null]]) {
      if (this.text.startsWith(word, this.at)) {
        this.at += word.length;
        return value;
      }
    }
    return this.fail(c === undefined ? "EOF while parsing a value" : "expected value");
  }
  enter() {
    if (++this.depth > 128) this.fail("recursion limit exceeded");
    this.at++;
  }
  object() {
    this.enter();
    const map = new Map();
    this.skipWhitespace();
    if (this.text[this.at] === "}") {
      this.at++;
      this.depth--;
      return map;
    }
    for (;;) {
      this.skipWhitespace();
      if (this.text[this.at] !== '"') this.fail("key must be a string");
      const key = this.string();
      this.skipWhitespace();
      if (this.text[this.at] !== ":") this.fail("expected `:`");
      this.at++;
      map.set(key, this.value());
      this.skipWhitespace();
      const c = this.text[this.at++];
      if (c === "}") break;
      if (c !== ",") this.fail("expected `,` or `}`");
    }
    this.depth--;
    return map;
  }
  array() {
    this.enter();
    const items = [];
    this.skipWhitespace();
    if (this.text[this.at] === "]") {
      this.at++;
      this.depth--;
      return items;
    }
    for (;;) {
      items.push(this.value());
      this.skipWhitespace();
      const c = this.text[this.at++];
      if (c === "]") break;
      if (c !== ",") this.fail("expected `,` or `]`");
    }
    this.depth--;
    return items;
  }
  hex4() {
    const digits = this.text.slice(this.at, this.at + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(digits)) this.fail("invalid escape");
    this.at += 4;
    return parseInt(digits, 16);
  }
  string() {
    const t = this.text;
    this.at++;
    let out = "";
    let start = this.at;
    for (;;) {
      if (this.at >= t.length) this.fail("EOF while parsing a string");
      const c = t.charCodeAt(this.at);
      if (c === 0x22) {
        out += t.slice(start, this.at);
        this.at++;
        return out;
      }
      if (c < 0x20) this.fail("control character in string");
      if (c !== 0x5c) {
        this.at++;
        continue;
      }
      out += t.slice(start, this.at);
      const e = t[this.at + 1];
      this.at += 2;
      const simple = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" }[e];
      if (simple !== undefined) {
        out += simple;
      } else if (e === "u") {
        const unit = this.hex4();
        if (unit >= 0xdc00 && unit <= 0xdfff) this.fail("lone trailing surrogate in escape");
        if (unit >= 0xd800 && unit <= 0xdbff) {
          if (t[this.at] !== "\\" || t[this.at + 1] !== "u") this.fail("unpaired surrogate in escape");
          this.at += 2;
          const low = this.hex4();
          if (low < 0xdc00 || low > 0xdfff) this.fail("unpaired surrogate in escape");
          out += String.fromCharCode(unit, low);
        } else {
          out += String.fromCharCode(unit);
        }
      } else {
        this.fail("invalid escape");
      }
      start = this.at;
    }
  }
  number() {
    NUMBER.lastIndex = this.at;
    const match = NUMBER.exec(this.text);
    if (match === null) this.fail("invalid number");
    let text = match[0];
    this.at += text.length;
    let isInteger = match[1] === undefined && match[2] === undefined && text !== "-0";
    if (match[2] !== undefined) {
      // The exponent as serde_json writes it: `1E3` becomes `1e+3`.
      const exponent = match[2].slice(1);
      const sign = exponent[0] === "+" || exponent[0] === "-" ? "" : "+";
      text = `${text.slice(0, text.length - match[2].length)}e${sign}${exponent}`;
    }
    if (isInteger) {
      const exact = BigInt(text);
      isInteger = exact >= I64_MIN && exact <= U64_MAX;
    }
    return new JsonNumber(text, isInteger);
  }
}

/** Parses JSON from bytes (UTF-8) or a string. Throws `RecordError`
 * ("invalid JSON value: ...") on anything but one well-formed value. */
export function parseJson(input) {
  let text = input;
  if (typeof input !== "string") {
    try {
      text = utf8Decoder.decode(input);
    } catch {
      throw new RecordError("invalid JSON value: invalid UTF-8");
    }
  }
  const parser = new Parser(text);
  const value = parser.value();
  parser.skipWhitespace();
  if (parser.at !== text.length) parser.fail("trailing characters");
  return value;
}

function write(value, parts) {
  if (typeof value === "string") {
    parts.push(JSON.stringify(value));
  } else if (value instanceof JsonNumber) {
    parts.push(value.text);
  } else if (typeof value === "bigint") {
    parts.push(value.toString());
  } else if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new RecordError(`cannot encode ${value} as JSON`);
    parts.push(String(value));
  } else if (value === null || value === undefined) {
    parts.push("null");
  } else if (value === true || value === false) {
    parts.push(String(value));
  } else if (Array.isArray(value)) {
    parts.push("[");
    value.forEach((item, index) => {
      if (index > 0) parts.push(",");
      write(item, parts);
    });
    parts.push("]");
  } else {
    const entries = value instanceof Map ? value.entries() : Object.entries(value);
    parts.push("{");
    let first = true;
    for (const [key, item] of entries) {
      if (!first) parts.push(",");
      first = false;
      parts.push(JSON.stringify(String(key)), ":");
      write(item, parts);
    }
    parts.push("}");
  }
}

/** Compact JSON text, byte-identical to the Rust SDK's serde_json output
 * for the same value. Maps and plain objects are both written as objects. */
export function stringifyJson(value) {
  const parts = [];
  write(value, parts);
  return parts.join("");
}

/** `stringifyJson` as UTF-8 bytes. */
export function encodeJson(value) {
  return utf8Encoder.encode(stringifyJson(value));
}

// ------------------------------------------------------------------ records

/** The operator's `config` table from the pipeline file. */
export class Config {
  constructor(entries) {
    this.entries = new Map(entries);
  }
  /** The raw string value of `key`, or undefined. */
  get(key) {
    return this.entries.get(key);
  }
  /** `key` parsed as a non-negative integer (BigInt), or `fallback`. */
  getInteger(key, fallback) {
    const raw = this.entries.get(key);
    if (raw === undefined) return fallback;
    if (!/^\s*[0-9]+\s*$/.test(raw)) throw new Error(`config key \`${key}\`: cannot parse ${JSON.stringify(raw)} as an integer`);
    return BigInt(raw.trim());
  }
  /** `key` split on commas (trimmed, empty entries skipped). */
  list(key) {
    return (this.entries.get(key) ?? "").split(",").map((s) => s.trim()).filter((s) => s !== "");
  }
}

/** A record handed to `process`. */
export class Record {
  constructor(input) {
    this.input = input;
  }
  /** Key bytes (Uint8Array) or undefined. */
  get key() {
    return this.input.key;
  }
  /** Value bytes (Uint8Array). */
  get value() {
    return this.input.value;
  }
  /** Headers: [{ key, value }]. */
  get headers() {
    return this.input.headers;
  }
  /** Event time in ms since the epoch (BigInt) or undefined. */
  get eventTime() {
    return this.input.eventTime;
  }
  /** { topic, partition, offset } the record was read from. */
  get source() {
    return this.input.source;
  }
  /** The value as a string (RecordError if it is not UTF-8). */
  text() {
    try {
      return utf8Decoder.decode(this.input.value);
    } catch {
      throw new RecordError("value is not UTF-8");
    }
  }
  /** The value parsed with `parseJson`. */
  json() {
    return parseJson(this.input.value);
  }
}

/** Collects what `process` emits for one input record. */
export class Emitter {
  constructor(input) {
    this.input = input;
    this.emits = [];
  }
  push(route, value, key, headers, eventTime) {
    this.emits.push({ route, record: { key, value, headers, eventTime } });
  }
  /** Emits the input record unchanged to the main output. */
  forward() {
    this.push({ tag: "main" }, this.input.value, this.input.key, this.input.headers, undefined);
  }
  /** Emits `value` (Uint8Array or string) to the main output; key and
   * headers default to the input record's. */
  emit(value, { key = this.input.key, headers = this.input.headers, eventTime } = {}) {
    const bytes = typeof value === "string" ? utf8Encoder.encode(value) : value;
    this.push({ tag: "main" }, bytes, key, headers, eventTime);
  }
  /** Emits `value` encoded with `stringifyJson`. */
  emitJson(value, options) {
    this.emit(encodeJson(value), options);
  }
  /** Emits `value` to the side output `name`. */
  side(name, value) {
    const bytes = typeof value === "string" ? utf8Encoder.encode(value) : value;
    this.push({ tag: "side", val: name }, bytes, this.input.key, this.input.headers, undefined);
  }
  /** Sends the input record to the dead-letter output with `reason`. */
  deadLetter(reason) {
    this.push({ tag: "dead-letter", val: reason }, this.input.value, this.input.key, this.input.headers, undefined);
  }
}

// ------------------------------------------------------------------ host

/** Writes to the host log; level: "trace" | "debug" | "info" | "warn" | "error". */
export function log(level, message) {
  hostLog(level, message);
}

/** Adds `delta` to the plugin counter `name` (shown in the run summary). */
export function counterAdd(name, delta = 1) {
  hostCounterAdd(name, BigInt(delta));
}

/** Host-stored keyed state, scoped to this operator. Keys and values are
 * Uint8Arrays or strings (UTF-8 encoded). */
export const state = {
  get(key) {
    return hostState.get(typeof key === "string" ? utf8Encoder.encode(key) : key);
  },
  put(key, value) {
    hostState.put(
      typeof key === "string" ? utf8Encoder.encode(key) : key,
      typeof value === "string" ? utf8Encoder.encode(value) : value,
    );
  },
  delete(key) {
    hostState.delete(typeof key === "string" ? utf8Encoder.encode(key) : key);
  },
};

// ------------------------------------------------------------------ export

function message(error) {
  if (error instanceof RecordError) return error.message;
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}

/** The `transformer` export running `PluginClass`. */
export function exportTransform(PluginClass) {
  let plugin = null;
  return {
    init(config) {
      try {
        plugin = new PluginClass(new Config(config));
      } catch (error) {
        throw error instanceof Error ? error.message : String(error);
      }
    },
    processBatch(batch) {
      return batch.map((input) => {
        const out = new Emitter(input);
        try {
          plugin.process(new Record(input), out);
        } catch (error) {
          return { tag: "err", val: message(error) };
        }
        return { tag: "ok", val: out.emits };
      });
    },
  };
}

/** Base class of a window aggregate. The accumulator is any value
 * `stringifyJson` can encode; it is stored as JSON between calls and comes
 * back parsed with `parseJson`. */
export class Aggregate {
  constructor(config) {}
  /** A new, empty accumulator. */
  create() {
    return null;
  }
  /** Returns `accumulator` with `record` added (it may change it in place).
   * Throwing dead-letters the record; it does not count, even if the
   * accumulator was already changed. */
  add(accumulator, record) {
    throw new Error("add is not implemented");
  }
  /** Combines the accumulators of two windows that merge (sessions). */
  merge(a, b) {
    throw new Error("merge is not implemented");
  }
  /** The window's result: a JSON value. */
  finish(accumulator) {
    return accumulator;
  }
}

/** The `aggregator` export running `AggregateClass`. */
export function exportAggregate(AggregateClass) {
  let aggregate = null;
  const decode = (bytes) => (bytes.length === 0 ? aggregate.create() : parseJson(bytes));
  return {
    init(config) {
      try {
        aggregate = new AggregateClass(new Config(config));
      } catch (error) {
        throw error instanceof Error ? error.message : String(error);
      }
    },
    create() {
      return encodeJson(aggregate.create());
    },
    add(accumulator, records) {
      let current = decode(accumulator);
      const accepted = [];
      const rejected = [];
      records.forEach((input, index) => {
        try {
          current = aggregate.add(current, new Record(input));
          accepted.push(input);
        } catch (error) {
          rejected.push([index, message(error)]);
          // `add` may have changed the accumulator before failing: rebuild
          // it from the records that counted.
          current = decode(accumulator);
          for (const good of accepted) current = aggregate.add(current, new Record(good));
        }
      });
      return { accumulator: encodeJson(current), rejected };
    },
    merge(a, b) {
      return encodeJson(aggregate.merge(decode(a), decode(b)));
    },
    finish(accumulator) {
      return encodeJson(aggregate.finish(decode(accumulator)));
    },
  };
}
