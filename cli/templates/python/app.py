"""{{name}}: a Sluice transform plugin in Python.

Build: `sluice plugin build .`
Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl`
"""

import sluice

_MISSING = object()


class Plugin(sluice.Transform):
    def __init__(self, config):
        # Field every record must have (config key `required_field`).
        self.required_field = config.get("required_field", "id")
        # The JSON fields `process` reads with `record.field`: the host finds
        # them while it packs each batch, so only their text is parsed here.
        self.json_fields = (self.required_field,)

    def process(self, record, out):
        # Raising sluice.RecordError sends this record (alone) to the
        # dead-letter output with the message as the reason; `record.field`
        # raises it for a record that is not a JSON object.
        if record.field(self.required_field, _MISSING) is _MISSING:
            out.dead_letter(f"missing field `{self.required_field}`")
            return
        out.forward()


Transformer = sluice.export(Plugin)
