// The JSON of the JavaScript SDK: `parseJson`, which reads as the Rust SDK
// does (objects as `Map`s in their key order, numbers as `JsonNumber`s
// keeping their text), and `stringifyJson`, which writes serde_json's bytes.
// Its own module, without the host's imports, so that Node can test it
// (`sluice-json.test.mjs`); `sluice.js` re-exports it.

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
/** UTF-8 decoding that refuses invalid input, and encoding. */
export const utf8Decoder = new TextDecoder("utf-8", { fatal: true });
export const utf8Encoder = new TextEncoder();

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

// What `nativeParse` returns when the text is for `Parser` to read.
const SLOW = Symbol("slow");

// Text `JSON.parse` may read for `Parser`: none of a fraction, an exponent,
// `-0` or an integer of 16 digits or more (whose numbers' text a double
// would not keep), a key like `"12"` (which an object puts first) or a
// surrogate escape (which `JSON.parse` accepts unpaired). Strings that
// merely contain such text are read by `Parser` too: slower, never wrong.
const NOT_NATIVE = /[.eE][-+]?[0-9]|-0(?![0-9])|[0-9]{16}|"(?:0|[1-9][0-9]*)"\s*:|\\u[dD][89a-fA-F]/;

// The engine's own JSON parser (native code) for text `Parser` would read
// the same way (`NOT_NATIVE`), its objects made `Map`s and its numbers
// `JsonNumber`s; anything else, and any error, `SLOW`.
function nativeParse(text) {
  if (NOT_NATIVE.test(text)) return SLOW;
  try {
    return fromNative(JSON.parse(text), 0);
  } catch {
    return SLOW;
  }
}

function fromNative(value, depth) {
  if (typeof value === "number") return new JsonNumber(String(value), true);
  if (value === null || typeof value !== "object") return value;
  if (depth >= 100) throw SLOW;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = fromNative(value[i], depth + 1);
    return value;
  }
  const map = new Map();
  for (const key of Object.keys(value)) map.set(key, fromNative(value[key], depth + 1));
  return map;
}

/** Parses JSON from bytes (UTF-8) or a string. Throws `RecordError`
 * ("invalid JSON value: ...") on anything but one well-formed value. Text
 * the engine's own parser reads the same way goes through it (native code,
 * several times faster in a plugin); the rest, and every error, through
 * this module's parser. */
export function parseJson(input) {
  const text = decoded(input);
  const native = nativeParse(text);
  return native === SLOW ? parseInJs(text) : native;
}

/** `parseJson` by this module's parser alone: the reference its use of the
 * engine's parser is tested against. */
export function parseJsonInJs(input) {
  return parseInJs(decoded(input));
}

function decoded(input) {
  if (typeof input === "string") return input;
  try {
    return utf8Decoder.decode(input);
  } catch {
    throw new RecordError("invalid JSON value: invalid UTF-8");
  }
}

function parseInJs(text) {
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
