// filter-rewrite (JavaScript): the record-path benchmark's transform.
//
// A record whose integer field `filter_field` (default `key`) is a multiple
// of `modulus` (default 10) is dropped; the others are emitted with the
// string field `rewrite_field` (default `text`) upper-cased (ASCII). Same
// output, byte for byte, as plugins/filter-rewrite (Rust): only the
// rewritten field changes, every other byte is the record's own.
//
// The two fields are named in `jsonFields`, so the host finds them while it
// packs the batch and splices the new value in (`out.emitReplacing`): the
// record is never parsed or written as a whole in JavaScript.

import { JsonNumber, RecordError, exportTransform } from "./sluice.js";

const asciiUpper = (text) => text.replace(/[a-z]+/g, (run) => run.toUpperCase());

class FilterRewrite {
  constructor(config) {
    this.filterField = config.get("filter_field") ?? "key";
    this.modulus = config.getInteger("modulus", 10n);
    if (this.modulus <= 0n) throw new Error("config key `modulus`: must be a positive integer");
    this.rewriteField = config.get("rewrite_field") ?? "text";
    this.jsonFields = [this.filterField, this.rewriteField];
  }

  process(record, out) {
    const value = record.field(this.filterField);
    if (!(value instanceof JsonNumber) || !value.isInteger) {
      throw new RecordError(`field \`${this.filterField}\` is not an integer`);
    }
    if (value.bigint() % this.modulus === 0n) return;
    const text = record.field(this.rewriteField);
    if (typeof text !== "string") throw new RecordError(`field \`${this.rewriteField}\` is not a string`);
    out.emitReplacing(this.rewriteField, asciiUpper(text));
  }
}

export const transformer = exportTransform(FilterRewrite);
