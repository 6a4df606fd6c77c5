// field-probe (JavaScript): a test plugin for the SDK's field API.
//
// For each record it emits, as JSON, what `record.field` and the record's
// other accessors returned, then the record with field `s` upper-cased and
// with a field `added` added (`out.emitReplacing`). It names its fields in
// `jsonFields` (config `project = "no"`: names none), so the same plugin
// runs through the host's projected path or the text-packed one, and the
// two must agree, with each other and with the Python plugin of the same
// name. With config `drop = "yes"` it emits nothing and counts each record
// it processes (plugin counter `processed`): how a test sees that no record
// is processed twice.

import { counterAdd, exportTransform } from "./sluice.js";

const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

class FieldProbe {
  constructor(config) {
    this.jsonFields = (config.get("project") ?? "yes") === "yes" ? ["a", "s", "missing", "n"] : [];
    this.drop = config.get("drop") === "yes";
  }

  process(record, out) {
    if (this.drop) {
      counterAdd("processed");
      return;
    }
    const s = record.field("s");
    const key = record.key;
    const source = record.source;
    out.emitJson({
      a: record.field("a") ?? null,
      s: s ?? null,
      n: record.field("n") ?? null,
      missing: record.field("missing", "default"),
      undeclared: record.field("u") ?? null,
      key: key === undefined ? null : hex(key),
      headers: record.headers.map((h) => [h.key, hex(h.value)]),
      event_time: record.eventTime ?? null,
      source: [source.topic, source.partition, source.offset],
      value_length: record.value.length,
    });
    if (typeof s === "string") out.emitReplacing("s", s.toUpperCase());
    out.emitReplacing("added", [1, new Map([["x", null]]), "t\u00e9\"xt"]);
  }
}

export const transformer = exportTransform(FieldProbe);
