// filter-rewrite (JavaScript): the record-path benchmark's transform.
//
// A record whose integer field `filter_field` (default `key`) is a multiple
// of `modulus` (default 10) is dropped; the others are emitted with the
// string field `rewrite_field` (default `text`) upper-cased (ASCII). Same
// output, byte for byte, as plugins/filter-rewrite (Rust): only the
// rewritten field changes, every other byte is the record's own.
//
// `mode = "fields"` (default): the two fields are named in `jsonFields`, so
// the host finds them while it packs the batch and splices the new value in
// (`out.emitReplacing`): the record is never parsed or written as a whole in
// JavaScript. `mode = "json"`: the plugin as the SDK teaches,
// `record.json()`, `toUpperCase`, `out.emitJson` (issue 42 measures it).
// `mode = "batch"`: the batch API (`processBatch`), the two fields as
// columns of the whole batch.

import { JsonNumber, RecordError, exportTransform } from "./sluice.js";

const asciiUpper = (text) => text.replace(/[a-z]+/g, (run) => run.toUpperCase());

class FilterRewrite {
  constructor(config) {
    this.filterField = config.get("filter_field") ?? "key";
    this.modulus = config.getInteger("modulus", 10n);
    if (this.modulus <= 0n) throw new Error("config key `modulus`: must be a positive integer");
    this.rewriteField = config.get("rewrite_field") ?? "text";
    const mode = config.get("mode") ?? "fields";
    this.notAnInteger = `field \`${this.filterField}\` is not an integer`;
    this.notAString = `field \`${this.rewriteField}\` is not a string`;
    if (mode === "fields") {
      this.jsonFields = [this.filterField, this.rewriteField];
    } else if (mode === "json") {
      this.process = this.processJson;
    } else if (mode === "batch") {
      this.jsonFields = [this.filterField, this.rewriteField];
      // The SDK calls `processBatch` where the plugin has one.
      this.processBatch = this.processColumns;
    } else {
      throw new Error(`config key \`mode\`: \`${mode}\` is not \`fields\`, \`json\` or \`batch\``);
    }
  }

  processColumns(batch, out) {
    const keys = batch.column(this.filterField);
    const texts = batch.column(this.rewriteField);
    const rows = [];
    const kept = [];
    for (let row = 0; row < batch.length; row++) {
      const key = keys[row];
      if (!(key instanceof JsonNumber) || !key.isInteger) {
        out.fail(row, this.notAnInteger);
      } else if (key.bigint() % this.modulus !== 0n) {
        const text = texts[row];
        if (typeof text === "string") {
          rows.push(row);
          kept.push(asciiUpper(text));
        } else {
          out.fail(row, this.notAString);
        }
      }
    }
    out.emitReplacingRows(rows, this.rewriteField, kept);
  }

  processJson(record, out) {
    // Objects parse into `Map`s (their key order kept exactly).
    const event = record.json();
    const key = event instanceof Map ? event.get(this.filterField) : undefined;
    if (!(key instanceof JsonNumber) || !key.isInteger) {
      throw new RecordError(this.notAnInteger);
    }
    if (key.bigint() % this.modulus === 0n) return;
    const text = event.get(this.rewriteField);
    if (typeof text !== "string") throw new RecordError(this.notAString);
    event.set(this.rewriteField, text.toUpperCase());
    out.emitJson(event);
  }

  process(record, out) {
    const value = record.field(this.filterField);
    if (!(value instanceof JsonNumber) || !value.isInteger) {
      throw new RecordError(this.notAnInteger);
    }
    if (value.bigint() % this.modulus === 0n) return;
    const text = record.field(this.rewriteField);
    if (typeof text !== "string") throw new RecordError(this.notAString);
    out.emitReplacing(this.rewriteField, asciiUpper(text));
  }
}

export const transformer = exportTransform(FilterRewrite);
