"""{{name}}: a Sluice window aggregate plugin in Python.

Per key and window: the number of records and the sum of an integer field.
Use it in a pipeline as a window operator's `plugin`.

Build: `sluice plugin build .`
Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl --key-field user --timestamp-field ts`
"""

import sluice


class Plugin(sluice.Aggregate):
    def __init__(self, config):
        # The integer field to sum (config key `field`). Naming it in
        # `json_fields` lets the host find it in each record for
        # `record.field`, so the record is not parsed here.
        self.field = config.get("field", "amount")
        self.json_fields = (self.field,)

    def create(self):
        # What the host keeps per key and window between calls (as JSON).
        return {"count": 0, "sum": 0}

    def add(self, totals, record):
        # Raising sluice.RecordError sends this record to the dead-letter
        # output with the message as the reason; it does not count.
        amount = record.field(self.field)
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise sluice.RecordError(f"field `{self.field}` must be an integer")
        totals["count"] += 1
        totals["sum"] += amount
        return totals

    def merge(self, a, b):
        # Combines two windows' accumulators (session windows that merge).
        return {"count": a["count"] + b["count"], "sum": a["sum"] + b["sum"]}

    def finish(self, totals):
        # The window's result.
        return {"count": totals["count"], "sum": totals["sum"]}


Aggregator = sluice.export_aggregate(Plugin)
