// hostile (JavaScript): misbehaves on purpose, to show that the host's
// limits and sandbox hold for JavaScript plugins too. By record value:
// `loop` spins forever, `alloc` allocates without bound, `throw` throws;
// `clock` emits what `Date.now()` reads; anything else is forwarded.

import { exportTransform } from "./sluice.js";

class Hostile {
  process(record, out) {
    const command = record.text();
    if (command === "loop") for (;;);
    if (command === "alloc") {
      const hoard = [];
      for (;;) hoard.push(new Uint8Array(1 << 20));
    }
    if (command === "throw") throw new Error("hostile plugin threw on purpose");
    if (command === "clock") return out.emit(String(Date.now()));
    out.forward();
  }
}

export const transformer = exportTransform(Hostile);
