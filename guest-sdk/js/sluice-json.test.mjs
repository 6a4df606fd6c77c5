// `parseJson` (the engine's parser where it reads the same way) against
// `parseJsonInJs` (the SDK's own parser, the reference): the same value,
// or the same error, for generated JSON text and for that text with bytes
// changed, inserted or removed. Run by `node --test` (the Rust test
// `plugin_round_trip::js_sdk_json_reads_as_its_own_parser_does` runs it).

import assert from "node:assert/strict";
import { test } from "node:test";
import { JsonNumber, parseJson, parseJsonInJs, stringifyJson } from "./sluice-json.js";

// A seeded generator, so that a failure repeats.
function random(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pick = (next, items) => items[Math.floor(next() * items.length)];

const NUMBERS = [
  "0", "7", "-5", "42", "123456789012345", "999999999999999", "1234567890123456",
  "9007199254740993", "18446744073709551615", "18446744073709551616", "-9223372036854775808",
  "-0", "-0.0", "1.5", "1.50", "0.1", "1e3", "1E+3", "2.5e-3", "-1E-7",
];
const STRINGS = [
  "", "a", "plain text", "é", "😀", "\\u00e9", "\\ud83d\\ude00", "\\ud800", "\\udc00x",
  "q\\\"q", "b\\\\s", "\\n\\t", "\\/", "e1", "v1.2", "-0", "12345678901234567", "\\u0000",
];
const KEYS = ["a", "b", "id", "key", "1", "0", "12", "01", "-1", "__proto__", "constructor", "é", "a\\\"b"];
const SPACES = ["", "", "", " ", "\n", "\t ", "\r\n"];

function value(next, depth) {
  const kind = next();
  if (depth > 3 || kind < 0.45) {
    const leaf = next();
    if (leaf < 0.4) return pick(next, NUMBERS);
    if (leaf < 0.8) return `"${pick(next, STRINGS)}"`;
    return pick(next, ["true", "false", "null"]);
  }
  const count = Math.floor(next() * 5);
  const items = [];
  const space = () => pick(next, SPACES);
  if (kind < 0.7) {
    for (let i = 0; i < count; i++) items.push(space() + value(next, depth + 1) + space());
    return `[${items.join(",")}]`;
  }
  for (let i = 0; i < count; i++) {
    items.push(`${space()}"${pick(next, KEYS)}"${space()}:${space()}${value(next, depth + 1)}${space()}`);
  }
  return `{${items.join(",")}}`;
}

function mutated(next, text) {
  const bytes = [...text];
  const edits = 1 + Math.floor(next() * 3);
  for (let i = 0; i < edits; i++) {
    const at = Math.floor(next() * (bytes.length + 1));
    const piece = pick(next, ['"', "\\", ",", ":", "{", "}", "[", "]", "-", "0", ".", "e", " ", "n", "\u0001", "\ud800"]);
    const edit = next();
    if (edit < 0.4) bytes.splice(at, 1, piece);
    else if (edit < 0.8) bytes.splice(at, 0, piece);
    else bytes.splice(at, 1);
  }
  return bytes.join("");
}

// A value as comparable data: key order, number text and kind included.
function shape(value) {
  if (value instanceof Map) return ["map", [...value].map(([k, v]) => [k, shape(v)])];
  if (value instanceof JsonNumber) return ["number", value.text, value.isInteger];
  if (Array.isArray(value)) return ["array", value.map(shape)];
  return [typeof value, value];
}

function outcome(parse, text) {
  try {
    return { value: shape(parse(text)) };
  } catch (error) {
    return { error: `${error.constructor.name}: ${error.message}` };
  }
}

test("parseJson reads what the SDK's own parser reads, or fails as it fails", () => {
  const next = random(42);
  let native = 0;
  for (let i = 0; i < 20000; i++) {
    const whole = value(next, 0);
    const text = next() < 0.5 ? whole : mutated(next, whole);
    const expected = outcome(parseJsonInJs, text);
    assert.deepEqual(outcome(parseJson, text), expected, text);
    const bytes = new TextEncoder().encode(text);
    assert.deepEqual(outcome(parseJson, bytes), outcome(parseJsonInJs, bytes), text);
    if (expected.value && !/[.eE]|-0|"[0-9]/.test(text)) native++;
  }
  // Most generated text goes the engine's way: the test covers it.
  assert.ok(native > 1000, `only ${native} texts read natively`);
});

test("deep nesting is refused as the SDK's own parser refuses it", () => {
  for (const depth of [99, 100, 101, 128, 129, 200, 5000]) {
    const text = "[".repeat(depth) + "]".repeat(depth);
    assert.deepEqual(outcome(parseJson, text), outcome(parseJsonInJs, text), `depth ${depth}`);
  }
});

test("a record written back is the record", () => {
  const text = '{"id":1000001,"key":-3,"text":"a \\"b\\" é","tags":["x",true,null],"nested":{"n":0}}';
  assert.equal(stringifyJson(parseJson(text)), text);
});
