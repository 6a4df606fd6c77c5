// {{name}}: a Sluice window aggregate plugin in JavaScript.
//
// Per key and window: the number of records and the sum of an integer
// field. Use it in a pipeline as a window operator's `plugin`.
//
// Build: `sluice plugin build .`
// Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl --key-field user --timestamp-field ts`
//
// `./sluice.js` (the SDK) is provided by `sluice plugin build`.

import { Aggregate, JsonNumber, RecordError, exportAggregate } from "./sluice.js";

/** An exact integer from a stored accumulator (a parsed JSON number) or a BigInt. */
const big = (value) => (typeof value === "bigint" ? value : value.bigint());

class Plugin extends Aggregate {
  constructor(config) {
    super(config);
    // The integer field to sum (config key `field`). Naming it in
    // `jsonFields` lets the host find it in each record for `record.field`,
    // so the record is not parsed here.
    this.field = config.get("field") ?? "amount";
    this.jsonFields = [this.field];
  }

  create() {
    // What the host keeps per key and window between calls (as JSON).
    return new Map([
      ["count", 0n],
      ["sum", 0n],
    ]);
  }

  add(totals, record) {
    // Throwing (e.g. `new RecordError("why")`) sends this record to the
    // dead-letter output with the message as the reason; it does not count.
    const amount = record.field(this.field); // numbers are JsonNumbers
    if (!(amount instanceof JsonNumber) || !amount.isInteger) {
      throw new RecordError(`field \`${this.field}\` must be an integer`);
    }
    totals.set("count", big(totals.get("count")) + 1n);
    totals.set("sum", big(totals.get("sum")) + amount.bigint());
    return totals;
  }

  merge(a, b) {
    // Combines two windows' accumulators (session windows that merge).
    return new Map([
      ["count", big(a.get("count")) + big(b.get("count"))],
      ["sum", big(a.get("sum")) + big(b.get("sum"))],
    ]);
  }

  finish(totals) {
    // The window's result.
    return new Map([
      ["count", big(totals.get("count"))],
      ["sum", big(totals.get("sum"))],
    ]);
  }
}

export const aggregator = exportAggregate(Plugin);
