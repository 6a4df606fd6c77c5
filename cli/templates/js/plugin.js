// {{name}}: a Sluice transform plugin in JavaScript.
//
// Build: `sluice plugin build .`
// Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl`
//
// `./sluice.js` (the SDK) is provided by `sluice plugin build`.

import { exportTransform } from "./sluice.js";

const MISSING = Symbol("missing");

class Plugin {
  constructor(config) {
    // Field every record must have (config key `required_field`).
    this.requiredField = config.get("required_field") ?? "id";
    // The JSON fields `process` reads with `record.field`: the host finds
    // them while it packs each batch, so only their text is parsed here.
    this.jsonFields = [this.requiredField];
  }

  process(record, out) {
    // Throwing (e.g. `new RecordError("why")`) sends this record (alone) to
    // the dead-letter output with the message as the reason; `record.field`
    // throws one for a record that is not a JSON object.
    if (record.field(this.requiredField, MISSING) === MISSING) {
      out.deadLetter(`missing field \`${this.requiredField}\``);
      return;
    }
    out.forward();
  }
}

export const transformer = exportTransform(Plugin);
