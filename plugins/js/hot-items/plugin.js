// hot-items (JavaScript): Nexmark q5, second stage, as a window aggregate:
// per window end, the auctions with the most bids. Input: the first stage's
// window results (`{"key": <auction>, "window_end": .., "result": <count>,
// ...}`); output: `{"window_end": .., "bids": <max count>, "auctions":
// [<auction ids with that count, ascending>]}`. Same results as
// plugins/hot-items (Rust).

import { Aggregate, JsonNumber, RecordError, exportAggregate } from "./sluice.js";

/** An exact integer from a parsed JSON number or a BigInt. */
const big = (value) => (typeof value === "bigint" ? value : value.bigint());

const I64 = [-(2n ** 63n), 2n ** 63n - 1n];
const U64 = [0n, 2n ** 64n - 1n];

function integer(counted, name, [min, max], digitStrings = false) {
  const value = counted.get(name);
  let exact;
  if (value instanceof JsonNumber && value.isInteger) {
    exact = value.bigint();
  } else if (digitStrings && typeof value === "string" && /^\+?[0-9]+$/.test(value)) {
    exact = BigInt(value.replace(/^\+/, ""));
  } else {
    throw new RecordError(`field \`${name}\` must be an integer`);
  }
  if (exact < min || exact > max) throw new RecordError(`field \`${name}\` is out of range`);
  return exact;
}

function offer(leaders, bids, auctions) {
  if (bids > big(leaders.get("bids"))) {
    leaders.set("bids", bids);
    leaders.set("auctions", []);
  }
  if (bids === big(leaders.get("bids"))) {
    const list = leaders.get("auctions").map(big);
    for (const auction of auctions) {
      let at = 0;
      while (at < list.length && list[at] < auction) at++;
      if (at === list.length || list[at] !== auction) list.splice(at, 0, auction);
    }
    leaders.set("auctions", list);
  }
}

class HotItems extends Aggregate {
  create() {
    return new Map([
      ["window_end", 0n],
      ["bids", 0n],
      ["auctions", []],
    ]);
  }

  add(leaders, record) {
    const counted = record.json();
    if (!(counted instanceof Map)) throw new RecordError("a window result must be a JSON object");
    const auction = integer(counted, "key", U64, /* digits in a string too */ true);
    const windowEnd = integer(counted, "window_end", I64);
    const bids = integer(counted, "result", U64);
    if (windowEnd > big(leaders.get("window_end"))) leaders.set("window_end", windowEnd);
    offer(leaders, bids, [auction]);
    return leaders;
  }

  merge(a, b) {
    if (big(b.get("window_end")) > big(a.get("window_end"))) a.set("window_end", big(b.get("window_end")));
    offer(a, big(b.get("bids")), b.get("auctions").map(big));
    return a;
  }

  finish(leaders) {
    return new Map([
      ["window_end", big(leaders.get("window_end"))],
      ["bids", big(leaders.get("bids"))],
      ["auctions", leaders.get("auctions").map(big)],
    ]);
  }
}

export const aggregator = exportAggregate(HotItems);
