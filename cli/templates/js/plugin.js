// {{name}}: a Sluice transform plugin in JavaScript.
//
// Build: `sluice plugin build .`
// Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl`
//
// `./sluice.js` (the SDK) is provided by `sluice plugin build`.

import { exportTransform } from "./sluice.js";

class Plugin {
  constructor(config) {
    // Field every record must have (config key `required_field`).
    this.requiredField = config.get("required_field") ?? "id";
  }

  process(record, out) {
    // Throwing (e.g. `new RecordError("why")`) sends this record (alone) to
    // the dead-letter output with the message as the reason.
    const value = record.json(); // objects are Maps
    if (!(value instanceof Map) || !value.has(this.requiredField)) {
      out.deadLetter(`missing field \`${this.requiredField}\``);
      return;
    }
    out.forward();
  }
}

export const transformer = exportTransform(Plugin);
