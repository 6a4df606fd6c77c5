// Sluice plugin SDK for JavaScript.
//
// A plugin is a class with `constructor(config)` and `process(record, out)`;
// `exportTransform(MyPlugin)` turns it into the `transformer` export of the
// `sluice:plugin/projected-transform` world (`sluice plugin build` adds the
// world's other exports, `packedExports` below):
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
// Reading a few fields: a plugin that sets `this.jsonFields` (the top-level
// fields of JSON object records it reads, e.g. `["price", "text"]`) in its
// constructor gets them found by the host while it packs each batch (the
// projected path): `record.field(name)` then parses only that field's text,
// and `out.emitReplacing(field, value)` has the host splice the new value
// into the record, every other byte as it came. Without `jsonFields` both
// work too: the record is parsed (and, for `emitReplacing`, written again).
//
// A window aggregate extends `Aggregate` (`create`, `add`, `merge`, `finish`
// over an accumulator: any JSON value, stored by the host per key and
// window, that comes back parsed like `record.json()`: objects as Maps,
// numbers as JsonNumbers) and is exported as
// `export const aggregator = exportAggregate(MyAggregate);`, which makes
// `sluice plugin build` build the `sluice:plugin/text-projected-aggregate`
// world: every key and window of a batch in one call, the fields named in
// `this.jsonFields` found by the host for `record.field`.
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

import {
  JsonNumber,
  RecordError,
  encodeJson,
  parseJson,
  stringifyJson,
  utf8Decoder,
  utf8Encoder,
} from "./sluice-json.js";

export { JsonNumber, RecordError, encodeJson, parseJson, stringifyJson };

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
  /** The top-level field `name` of the JSON object value, parsed as
   * `parseJson` does, or `fallback` if the object has no such field (of a
   * name given twice, the last). RecordError if the value is not a JSON
   * object. Fields the plugin lists in `jsonFields` were found by the host:
   * only that field's text is parsed; others parse the whole record. */
  field(name, fallback = undefined) {
    const value = this.json();
    if (!(value instanceof Map)) throw new RecordError(NOT_AN_OBJECT_REASON);
    return value.has(name) ? value.get(name) : fallback;
  }
}

const NOT_AN_OBJECT_REASON = "invalid JSON value: a record must be a JSON object";

// The projected batch format (`sluice-wire`'s `projected` module): a header
// of four u32 (version, records, fields, 0), then per record (4 + fields)
// (start, end) u32 slots into the whole buffer (value, key, topic, headers,
// then the fields), then three i64 per record (event time, partition,
// offset), then the bytes the slots point into. Little-endian.
const PROJECTED_FORMAT_VERSION = 1;
const ABSENT = 0xffffffff;
const NOT_AN_OBJECT = 1;
const NO_EVENT_TIME = -(2n ** 63n);
const DIGITS = /^-?[0-9]{1,18}$/;

/** One projected batch: its buffer and tables, shared by its records. */
class ProjectedBatch {
  constructor(data, records, fields, names) {
    this.data = data;
    this.view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    this.stride = 8 * (4 + fields);
    this.numbersAt = 16 + records * this.stride;
    // Name -> byte offset of its slot within a record's slots.
    this.fieldSlot = new Map(names.map((name, i) => [name, 32 + 8 * i]));
  }
  u32(at) {
    return this.view.getUint32(at, true);
  }
}

/** A record of a projected batch: read from the batch's buffer when asked. */
class ProjectedRecord extends Record {
  constructor(batch, index) {
    super(undefined);
    this.batch = batch;
    this.index = index;
    this.base = 16 + index * batch.stride;
  }
  slot(offset) {
    const start = this.batch.u32(this.base + offset);
    if (start === ABSENT) return undefined;
    return this.batch.data.subarray(start, this.batch.u32(this.base + offset + 4));
  }
  get key() {
    return this.slot(8);
  }
  get value() {
    return this.slot(0);
  }
  get headers() {
    const raw = this.slot(24);
    if (raw === undefined) return [];
    const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    const headers = [];
    let at = 4;
    for (let i = view.getUint32(0, true); i > 0; i--) {
      const nameLength = view.getUint32(at, true);
      const key = utf8Decoder.decode(raw.subarray(at + 4, at + 4 + nameLength));
      at += 4 + nameLength;
      const valueLength = view.getUint32(at, true);
      headers.push({ key, value: raw.subarray(at + 4, at + 4 + valueLength) });
      at += 4 + valueLength;
    }
    return headers;
  }
  get eventTime() {
    const time = this.batch.view.getBigInt64(this.batch.numbersAt + 24 * this.index, true);
    return time === NO_EVENT_TIME ? undefined : time;
  }
  get source() {
    const at = this.batch.numbersAt + 24 * this.index;
    return {
      topic: utf8Decoder.decode(this.slot(16)),
      partition: Number(this.batch.view.getBigInt64(at + 8, true)),
      offset: this.batch.view.getBigInt64(at + 16, true),
    };
  }
  text() {
    try {
      return utf8Decoder.decode(this.value);
    } catch {
      throw new RecordError("value is not UTF-8");
    }
  }
  json() {
    return parseJson(this.value);
  }
  field(name, fallback = undefined) {
    const slot = this.batch.fieldSlot.get(name);
    if (slot === undefined) return super.field(name, fallback);
    const at = this.base + slot;
    const start = this.batch.u32(at);
    if (start === ABSENT) {
      if (this.batch.u32(at + 4) === NOT_AN_OBJECT) return super.field(name, fallback);
      return fallback;
    }
    const bytes = this.batch.data.subarray(start, this.batch.u32(at + 4));
    // The host checked the whole value (well-formed JSON, UTF-8): a string
    // without escapes is its inner bytes, digits alone an integer.
    if (bytes[0] === 0x22 && bytes.indexOf(0x5c) < 0) return utf8Decoder.decode(bytes.subarray(1, bytes.length - 1));
    if (bytes.length < 20) {
      const text = String.fromCharCode.apply(null, bytes);
      if (DIGITS.test(text) && text !== "-0") return new JsonNumber(text, true);
    }
    return parseJson(bytes);
  }
  /** Whether the host found the value to be a JSON object (a batch with no
   * fields says nothing: parse to know). */
  isObject() {
    if (this.batch.fieldSlot.size === 0) return this.json() instanceof Map;
    return !(this.batch.u32(this.base + 32) === ABSENT && this.batch.u32(this.base + 36) === NOT_AN_OBJECT);
  }
}

/** Collects what `process` emits for one input record. */
export class Emitter {
  /** `input`: the record's typed form, or the `Record` itself. */
  constructor(input, record = undefined) {
    this.input = input;
    this.record = record;
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
  /** Emits the input record to the main output with the value of its
   * top-level JSON field `field` replaced by `value` (any value
   * `stringifyJson` encodes), or the field added at the end if it has none.
   * In a projected batch the host splices the new value into the record:
   * every other byte stays as it came. Otherwise the record is parsed,
   * changed and written with `stringifyJson`. RecordError if the value is
   * not a JSON object. */
  emitReplacing(field, value) {
    const event = parseJson(this.input.value);
    if (!(event instanceof Map)) throw new RecordError(NOT_AN_OBJECT_REASON);
    event.set(field, value);
    this.emitJson(event);
  }
}

/** The emitter of a projected batch: `emitReplacing` leaves the splice to
 * the host. */
class ProjectedEmitter extends Emitter {
  emitReplacing(field, value) {
    if (!this.record.isObject()) throw new RecordError(NOT_AN_OBJECT_REASON);
    this.emits.push({ replacing: field, json: encodeJson(value) });
  }
}

// ------------------------------------------------------------------ packed output
//
// `text-packed-transformer` and `projected-transformer` return a batch's
// outcomes as one buffer in the packed output format of the `sluice-wire`
// crate (postcard-encoded `OutputItem`s), carried as ISO-8859-1 text (each
// character U+0000-U+00FF stands for one byte): one string per batch
// instead of typed lists per record.

/** A growing byte buffer for packed output. */
class PackedWriter {
  constructor(capacity) {
    this.bytes = new Uint8Array(capacity);
    this.length = 0;
  }
  reserve(extra) {
    if (this.length + extra <= this.bytes.length) return;
    let capacity = this.bytes.length * 2;
    while (capacity < this.length + extra) capacity *= 2;
    const grown = new Uint8Array(capacity);
    grown.set(this.bytes.subarray(0, this.length));
    this.bytes = grown;
  }
  byte(value) {
    this.reserve(1);
    this.bytes[this.length++] = value;
  }
  varint(value) {
    this.reserve(10);
    let n = value;
    if (typeof n === "bigint") {
      while (n > 0x7fn) {
        this.bytes[this.length++] = Number(n & 0x7fn) | 0x80;
        n >>= 7n;
      }
      this.bytes[this.length++] = Number(n);
      return;
    }
    while (n > 0x7f) {
      this.bytes[this.length++] = (n & 0x7f) | 0x80;
      n = Math.floor(n / 128);
    }
    this.bytes[this.length++] = n;
  }
  data(bytes) {
    this.varint(bytes.length);
    this.reserve(bytes.length);
    this.bytes.set(bytes, this.length);
    this.length += bytes.length;
  }
  string(text) {
    this.data(utf8Encoder.encode(text));
  }
  /** The buffer as ISO-8859-1 text. */
  latin1() {
    return latin1(this.bytes.subarray(0, this.length));
  }
}

/** `bytes` as ISO-8859-1 text: one character U+0000-U+00FF per byte (how
 * the `text-` interfaces carry bytes in the strings they return). */
function latin1(bytes) {
  const parts = [];
  for (let at = 0; at < bytes.length; at += 8192) {
    parts.push(String.fromCharCode.apply(null, bytes.subarray(at, Math.min(at + 8192, bytes.length))));
  }
  return parts.join("");
}

// Variant numbers of sluice-wire's `OutputItem` and `Route`.
const ITEM_EMIT = 0;
const ITEM_FAILED = 1;
const ITEM_EMIT_REPLACING = 2;
const ITEM_NO_EMITS = 3;
const ROUTES = { main: 0, side: 1, "dead-letter": 2 };

const asBytes = (value) => (typeof value === "string" ? utf8Encoder.encode(value) : value);

/** Appends one input record's emits to `out`. */
function packEmits(out, index, emits) {
  for (const emit of emits) {
    if (emit.replacing !== undefined) {
      out.byte(ITEM_EMIT_REPLACING);
      out.varint(index);
      out.string(emit.replacing);
      out.data(emit.json);
      continue;
    }
    const { route, record } = emit;
    out.byte(ITEM_EMIT);
    out.varint(index);
    out.byte(ROUTES[route.tag]);
    if (route.tag !== "main") out.string(route.val);
    if (record.key === undefined || record.key === null) {
      out.byte(0);
    } else {
      out.byte(1);
      out.data(asBytes(record.key));
    }
    out.data(asBytes(record.value));
    const headers = record.headers ?? [];
    out.varint(headers.length);
    for (const header of headers) {
      out.string(header.key);
      out.data(asBytes(header.value));
    }
    if (record.eventTime === undefined || record.eventTime === null) {
      out.byte(0);
    } else {
      const time = BigInt(record.eventTime);
      out.byte(1);
      out.varint(BigInt.asUintN(64, (time << 1n) ^ (time >> 63n))); // zigzag
    }
  }
}

function packFailed(out, index, reason) {
  out.byte(ITEM_FAILED);
  out.varint(index);
  out.string(reason);
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

/** The packed exports of each `transformer` made by `exportTransform`. */
const packedExportsOf = new WeakMap();

/** Runs `plugin` on each record of a batch, packing the outcomes into a new
 * writer; `recordAt(index)` gives the record and its emitter. */
function processPacked(plugin, count, capacity, recordAt) {
  const out = new PackedWriter(Math.max(capacity, 64));
  for (let index = 0; index < count; index++) {
    const [record, emitter] = recordAt(index);
    try {
      plugin.process(record, emitter);
    } catch (error) {
      packFailed(out, index, message(error));
      continue;
    }
    packEmits(out, index, emitter.emits);
  }
  return out;
}

// ------------------------------------------------------------------ batches

/** Base class of a plugin that takes a whole batch per call:
 * `processBatch(batch, out)` instead of `process(record, out)`.
 *
 * `batch.column(name)` is a field of every record as one array (for fields
 * named in `jsonFields`, found by the host and parsed in one call),
 * `batch.at(row)` a record, `batch.json()` every value parsed; `out` names
 * the row of each output: `out.emitReplacing(row, field, value)`,
 * `out.emitReplacingRows(rows, field, values)`, `out.emitJson(row, value)`,
 * `out.emit(row, bytes)`, `out.forward(row)`, `out.side(row, name, bytes)`,
 * `out.deadLetter(row, reason)`. `out.fail(row, reason)` fails one row as
 * throwing `RecordError` in `process` fails a record (its other outputs
 * are dropped); a row whose value is not a JSON object fails so when a
 * column is read; an exception from `processBatch` fails every row. */
export class BatchTransform {
  constructor(config) {}
  processBatch(batch, out) {
    throw new Error("processBatch is not implemented");
  }
}

/** The records of one `processBatch` call. */
export class Batch {
  /** `records`: `Record`s; or `projected`: a projected batch of `count`. */
  constructor(records, projected = undefined, count = records?.length ?? 0) {
    this.records = records;
    this.projected = projected;
    this.length = count;
    // Row -> reason: rows failed (`out.fail`, not a JSON object).
    this.failed = new Map();
  }
  /** The record at `row`. */
  at(row) {
    if (!Number.isInteger(row) || row < 0 || row >= this.length) {
      throw new RangeError(`no row ${row} in a batch of ${this.length}`);
    }
    return this.projected === undefined ? this.records[row] : new ProjectedRecord(this.projected, row);
  }
  /** The top-level field `name` of each record's JSON object value, parsed
   * as `parseJson` does: `fallback` where the object has no such field, and
   * where the value is not a JSON object (that row fails). */
  column(name, fallback = undefined) {
    const projected = this.projected;
    const slot = projected?.fieldSlot.get(name);
    if (slot === undefined) return this.eachRow((record) => record.field(name, fallback), fallback);
    const values = new Array(this.length).fill(fallback);
    const rows = [];
    const texts = [];
    for (let row = 0; row < this.length; row++) {
      const at = 16 + row * projected.stride + slot;
      const start = projected.u32(at);
      if (start !== ABSENT) {
        rows.push(row);
        texts.push(utf8Decoder.decode(projected.data.subarray(start, projected.u32(at + 4))));
      } else if (projected.u32(at + 4) === NOT_AN_OBJECT) {
        try {
          this.at(row).field(name);
        } catch (error) {
          if (!this.failed.has(row)) this.failed.set(row, message(error));
        }
      }
    }
    // Each text is one well-formed value (the host checked the object): one
    // parse of them all as an array; each alone where that fails.
    let parsed;
    try {
      parsed = texts.length === 0 ? [] : parseJson(`[${texts.join(",")}]`);
    } catch {
      parsed = undefined;
    }
    if (!Array.isArray(parsed) || parsed.length !== texts.length) {
      parsed = texts.map((text, i) => {
        try {
          return parseJson(text);
        } catch (error) {
          if (!this.failed.has(rows[i])) this.failed.set(rows[i], message(error));
          return fallback;
        }
      });
    }
    rows.forEach((row, i) => {
      values[row] = parsed[i];
    });
    return values;
  }
  /** Each record's value parsed with `parseJson`: `undefined` where it is
   * not JSON (that row fails). */
  json() {
    return this.eachRow((record) => record.json(), undefined);
  }
  eachRow(read, fallback) {
    const values = [];
    for (let row = 0; row < this.length; row++) {
      try {
        values.push(read(this.at(row)));
      } catch (error) {
        if (!this.failed.has(row)) this.failed.set(row, message(error));
        values.push(fallback);
      }
    }
    return values;
  }
}

/** What `processBatch` emits, each for a row of the batch. */
export class BatchOutput {
  constructor(batch) {
    this.batch = batch;
    // [row, emit] pairs, emits as `Emitter` collects them.
    this.emits = [];
  }
  emitterOf(row) {
    const record = this.batch.at(row);
    return record instanceof ProjectedRecord ? new ProjectedEmitter(record, record) : new Emitter(record.input ?? record, record);
  }
  collect(row, act) {
    const emitter = this.emitterOf(row);
    try {
      act(emitter);
    } catch (error) {
      if (!(error instanceof RecordError)) throw error;
      if (!this.batch.failed.has(row)) this.batch.failed.set(row, error.message);
      return;
    }
    for (const emit of emitter.emits) this.emits.push([row, emit]);
  }
  /** Emits the record at `row` unchanged to the main output. */
  forward(row) {
    this.collect(row, (out) => out.forward());
  }
  /** Emits `value` (Uint8Array or string) for `row`; key and headers
   * default to the row's. */
  emit(row, value, options) {
    this.collect(row, (out) => out.emit(value, options));
  }
  /** Emits `value` encoded with `stringifyJson` for `row`. */
  emitJson(row, value, options) {
    this.collect(row, (out) => out.emitJson(value, options));
  }
  /** Emits the record at `row` with its field `field` set to `value` (see
   * `Emitter.emitReplacing`; the host splices it in a projected batch). */
  emitReplacing(row, field, value) {
    this.collect(row, (out) => out.emitReplacing(field, value));
  }
  /** `emitReplacing(row, field, value)` for each row of `rows` and value
   * of `values`, in one call. */
  emitReplacingRows(rows, field, values) {
    if (rows.length !== values.length) throw new RangeError(`${rows.length} rows and ${values.length} values`);
    const projected = this.batch.projected;
    if (projected === undefined || projected.fieldSlot.size === 0) {
      rows.forEach((row, i) => this.emitReplacing(row, field, values[i]));
      return;
    }
    // `ProjectedEmitter.emitReplacing` in line: no record or emitter per row.
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i];
      if (!Number.isInteger(row) || row < 0 || row >= this.batch.length) this.batch.at(row); // throws
      const at = 16 + row * projected.stride + 32;
      if (projected.u32(at) === ABSENT && projected.u32(at + 4) === NOT_AN_OBJECT) {
        this.emitReplacing(row, field, values[i]); // fails the row
      } else {
        this.emits.push([row, { replacing: field, json: encodeJson(values[i]) }]);
      }
    }
  }
  /** Emits `value` to the side output `name` for `row`. */
  side(row, name, value) {
    this.collect(row, (out) => out.side(name, value));
  }
  /** Sends the record at `row` to the dead-letter output with `reason`. */
  deadLetter(row, reason) {
    this.collect(row, (out) => out.deadLetter(reason));
  }
  /** Fails `row` with `reason`, as throwing `RecordError` in `process` fails
   * a record: what was emitted for it is dropped. */
  fail(row, reason) {
    this.batch.at(row);
    if (!this.batch.failed.has(row)) this.batch.failed.set(row, String(reason));
  }
}

/** Runs `plugin.processBatch` on `batch`: per row, its emits (an array) or
 * the reason it failed (a string). */
function batchOutcomes(plugin, batch) {
  const outcomes = Array.from({ length: batch.length }, () => []);
  const out = new BatchOutput(batch);
  try {
    plugin.processBatch(batch, out);
  } catch (error) {
    return outcomes.map(() => message(error));
  }
  for (const [row, emit] of out.emits) outcomes[row].push(emit);
  for (const [row, reason] of batch.failed) outcomes[row] = reason;
  return outcomes;
}

/** `batchOutcomes` packed into a new writer. */
function packBatch(plugin, batch, capacity) {
  const out = new PackedWriter(Math.max(capacity, 64));
  batchOutcomes(plugin, batch).forEach((outcome, index) => {
    if (typeof outcome === "string") packFailed(out, index, outcome);
    else packEmits(out, index, outcome);
  });
  return out;
}

/** The `transformer` export running `PluginClass`. `sluice plugin build`
 * also exports the same plugin as `textPackedTransformer` and
 * `projectedTransformer` (the `projected-transform` world), which the host
 * prefers: see `packedExports`. */
export function exportTransform(PluginClass) {
  let plugin = null;
  const transformer = {
    init(config) {
      try {
        plugin = new PluginClass(new Config(config));
      } catch (error) {
        throw error instanceof Error ? error.message : String(error);
      }
    },
    processBatch(batch) {
      if (typeof plugin.processBatch === "function") {
        return batchOutcomes(plugin, new Batch(batch.map((input) => new Record(input)))).map((outcome) =>
          typeof outcome === "string" ? { tag: "err", val: outcome } : { tag: "ok", val: outcome },
        );
      }
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
  packedExportsOf.set(transformer, {
    textPackedTransformer: {
      processBatchText(batch) {
        if (typeof plugin.processBatch === "function") {
          return packBatch(plugin, new Batch(batch.map((input) => new Record(input))), 256 * batch.length).latin1();
        }
        const out = processPacked(plugin, batch.length, 256 * batch.length, (index) => {
          const input = batch[index];
          return [new Record(input), new Emitter(input)];
        });
        return out.latin1();
      },
    },
    projectedTransformer: {
      projectedFields() {
        return jsonFieldsOf(plugin);
      },
      processProjected(data) {
        const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
        const names = plugin.jsonFields ?? [];
        const count = view.getUint32(4, true);
        // A version this SDK does not read, or other fields: the host sends
        // the batch the text-packed way.
        if (view.getUint32(0, true) !== PROJECTED_FORMAT_VERSION || view.getUint32(8, true) !== names.length) return "";
        const batch = new ProjectedBatch(data, count, names.length, names);
        const out =
          typeof plugin.processBatch === "function"
            ? packBatch(plugin, new Batch(undefined, batch, count), data.length)
            : processPacked(plugin, count, data.length, (index) => {
                const record = new ProjectedRecord(batch, index);
                return [record, new ProjectedEmitter(record, record)];
              });
        if (out.length === 0 && count > 0) {
          // Nothing emitted: say the batch was read (an empty output would
          // make the host send it again).
          out.byte(ITEM_NO_EMITS);
          out.varint(count - 1);
        }
        return out.latin1();
      },
    },
  });
  return transformer;
}

/** The `textPackedTransformer` and `projectedTransformer` exports of
 * `transformer` (the build's entry module exports them beside the plugin's
 * own). A `transformer` not made by `exportTransform` gets exports that
 * pack what its `processBatch` returns and name no fields. */
export function packedExports(transformer) {
  const known = packedExportsOf.get(transformer);
  if (known !== undefined) return known;
  return {
    textPackedTransformer: {
      processBatchText(batch) {
        const out = new PackedWriter(256 * batch.length + 64);
        transformer.processBatch(batch).forEach((outcome, index) => {
          if (outcome.tag === "err") packFailed(out, index, outcome.val);
          else packEmits(out, index, outcome.val);
        });
        return out.latin1();
      },
    },
    projectedTransformer: {
      projectedFields() {
        return [];
      },
      processProjected() {
        return "";
      },
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

/** The text exports of each `aggregator` made by `exportAggregate`. */
const aggregateExportsOf = new WeakMap();

/** The plugin's `jsonFields`, checked: an array of names. */
function jsonFieldsOf(plugin) {
  const fields = plugin.jsonFields ?? [];
  if (!Array.isArray(fields) || !fields.every((f) => typeof f === "string")) {
    throw new Error("jsonFields must be an array of field names (strings)");
  }
  return fields;
}

/** Adds `records` (record views) to the stored `accumulator` (bytes; empty:
 * a new one): the new accumulator's bytes and the records not added, as
 * [index, reason]. */
function addRecords(aggregate, accumulator, records) {
  const start = () => (accumulator.length === 0 ? aggregate.create() : parseJson(accumulator));
  let current = start();
  const accepted = [];
  const rejected = [];
  records.forEach((record, index) => {
    try {
      current = aggregate.add(current, record);
      accepted.push(record);
    } catch (error) {
      rejected.push([index, message(error)]);
      // `add` may have changed the accumulator before failing: rebuild it
      // from the records that counted.
      current = start();
      for (const good of accepted) current = aggregate.add(current, good);
    }
  });
  return [encodeJson(current), rejected];
}

// The projected aggregate format (`sluice-wire`): postcard varints — the
// format version and the number of groups, then per group its accumulator
// (length and bytes) and record count — then one projected batch holding
// every group's records, group after group.
const AGGREGATE_PROJECTED_FORMAT_VERSION = 1;

/** The unsigned varint at `at` in `data`, and where the next item starts. */
function readVarint(data, at) {
  let value = 0;
  let scale = 1;
  for (;;) {
    const byte = data[at++];
    if (byte === undefined) throw new Error("truncated varint");
    value += (byte & 0x7f) * scale;
    if (byte < 0x80) return [value, at];
    scale *= 128;
  }
}

/** The `aggregator` export running `AggregateClass`. `sluice plugin build`
 * also exports the same aggregate as `textAggregator` and
 * `textProjectedAggregator` (the `text-projected-aggregate` world: every
 * key and window of a batch in one call, the fields named in `jsonFields`
 * found by the host), which the host prefers: see `aggregateExports`. */
export function exportAggregate(AggregateClass) {
  let aggregate = null;
  const decode = (bytes) => (bytes.length === 0 ? aggregate.create() : parseJson(bytes));
  const aggregator = {
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
      const [bytes, rejected] = addRecords(
        aggregate,
        accumulator,
        records.map((input) => new Record(input)),
      );
      return { accumulator: bytes, rejected };
    },
    merge(a, b) {
      return encodeJson(aggregate.merge(decode(a), decode(b)));
    },
    finish(accumulator) {
      return encodeJson(aggregate.finish(decode(accumulator)));
    },
  };
  const text = textAggregatorOf(aggregator);
  aggregateExportsOf.set(aggregator, {
    textAggregator: text,
    textProjectedAggregator: {
      projectedFields() {
        return jsonFieldsOf(aggregate);
      },
      addProjectedText(data) {
        let [version, at] = readVarint(data, 0);
        if (version !== AGGREGATE_PROJECTED_FORMAT_VERSION) return ""; // the host adds group by group
        let count;
        [count, at] = readVarint(data, at);
        const groups = [];
        let total = 0;
        for (let i = 0; i < count; i++) {
          let length;
          let records;
          [length, at] = readVarint(data, at);
          const accumulator = data.subarray(at, at + length);
          [records, at] = readVarint(data, at + length);
          groups.push([accumulator, records]);
          total += records;
        }
        const projected = data.subarray(at);
        const view = new DataView(projected.buffer, projected.byteOffset, projected.byteLength);
        const names = jsonFieldsOf(aggregate);
        if (
          view.getUint32(0, true) !== PROJECTED_FORMAT_VERSION ||
          view.getUint32(4, true) !== total ||
          view.getUint32(8, true) !== names.length
        ) {
          return "";
        }
        const batch = new ProjectedBatch(projected, total, names.length, names);
        const out = new PackedWriter(64 + 32 * count);
        let first = 0;
        for (const [accumulator, records] of groups) {
          const group = [];
          for (let i = 0; i < records; i++) group.push(new ProjectedRecord(batch, first + i));
          first += records;
          // GroupAdded: the new accumulator, then the records not added.
          const [bytes, rejected] = addRecords(aggregate, accumulator, group);
          out.data(bytes);
          out.varint(rejected.length);
          for (const [index, reason] of rejected) {
            out.varint(index);
            out.string(reason);
          }
        }
        return out.latin1();
      },
    },
  });
  return aggregator;
}

/** The `text-aggregator` functions of `aggregator`: its own, their byte
 * results as ISO-8859-1 text. */
function textAggregatorOf(aggregator) {
  return {
    createText() {
      return latin1(aggregator.create());
    },
    addText(accumulator, records) {
      const added = aggregator.add(accumulator, records);
      return { accumulator: latin1(added.accumulator), rejected: added.rejected };
    },
    mergeText(a, b) {
      return latin1(aggregator.merge(a, b));
    },
    finishText(accumulator) {
      return latin1(aggregator.finish(accumulator));
    },
  };
}

/** The `textAggregator` and `textProjectedAggregator` exports of
 * `aggregator` (the build's entry module exports them beside the plugin's
 * own). An `aggregator` not made by `exportAggregate` gets the text form of
 * its own functions and a projected `add` that reads nothing (the host then
 * adds group by group). */
export function aggregateExports(aggregator) {
  const known = aggregateExportsOf.get(aggregator);
  if (known !== undefined) return known;
  return {
    textAggregator: textAggregatorOf(aggregator),
    textProjectedAggregator: {
      projectedFields() {
        return [];
      },
      addProjectedText() {
        return "";
      },
    },
  };
}
