// validate-dedup (JavaScript): Bronze to Silver. Validates required fields
// and their types, drops duplicate events by id (remembered in host state)
// and dead-letters invalid records with the reason. Same behaviour and the
// same reasons as plugins/validate-dedup (Rust).
//
// Config: `required`: comma-separated `field:type` (`string`, `integer`,
// `number`, `boolean`; strings must be non-empty); `id_field`: the event id
// used for de-duplication (default `event_id`).

import { JsonNumber, RecordError, counterAdd, exportTransform, state } from "./sluice.js";

const FIELD_TYPES = {
  string: ["a string", (v) => typeof v === "string" && v !== ""],
  integer: ["an integer", (v) => v instanceof JsonNumber && v.isInteger],
  number: ["a number", (v) => v instanceof JsonNumber],
  boolean: ["a boolean", (v) => typeof v === "boolean"],
};

function jsonType(value) {
  if (value === null) return "null";
  if (typeof value === "boolean") return "a boolean";
  if (value instanceof JsonNumber) return "a number";
  if (typeof value === "string") return value === "" ? "an empty string" : "a string";
  if (Array.isArray(value)) return "an array";
  return "an object";
}

class ValidateDedup {
  constructor(config) {
    this.required = config.list("required").map((entry) => {
      const colon = entry.indexOf(":");
      if (colon < 0) throw new Error(`required entry \`${entry}\` must be field:type`);
      const kind = entry.slice(colon + 1).trim();
      if (!Object.hasOwn(FIELD_TYPES, kind)) {
        throw new Error(`unknown field type \`${kind}\` (use string, integer, number or boolean)`);
      }
      return [entry.slice(0, colon).trim(), ...FIELD_TYPES[kind]];
    });
    this.idField = config.get("id_field") ?? "event_id";
  }

  process(record, out) {
    const event = record.json();
    if (!(event instanceof Map)) throw new RecordError(`event must be a JSON object, found ${jsonType(event)}`);
    for (const [field, name, matches] of this.required) {
      if (!event.has(field)) throw new RecordError(`missing required field \`${field}\``);
      const value = event.get(field);
      if (!matches(value)) throw new RecordError(`field \`${field}\` must be ${name}, found ${jsonType(value)}`);
    }
    const id = event.get(this.idField);
    let idText;
    if (typeof id === "string" && id !== "") idText = id;
    else if (id instanceof JsonNumber) idText = id.text;
    else throw new RecordError(`missing event id field \`${this.idField}\``);
    const key = `seen:${idText}`;
    if (state.get(key) !== undefined) {
      counterAdd("duplicates_dropped", 1);
      return;
    }
    state.put(key, "1");
    counterAdd("valid", 1);
    out.forward();
  }
}

export const transformer = exportTransform(ValidateDedup);
