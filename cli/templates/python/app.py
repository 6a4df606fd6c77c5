"""{{name}}: a Sluice transform plugin in Python.

Build: `sluice plugin build .`
Try:   `sluice plugin test target/sluice/{{name}}.wasm --input records.jsonl`
"""

import sluice


class Plugin(sluice.Transform):
    def __init__(self, config):
        # Field every record must have (config key `required_field`).
        self.required_field = config.get("required_field", "id")

    def process(self, record, out):
        # Raising sluice.RecordError sends this record (alone) to the
        # dead-letter output with the message as the reason.
        value = record.json()
        if not isinstance(value, dict) or self.required_field not in value:
            out.dead_letter(f"missing field `{self.required_field}`")
            return
        out.forward()


Transformer = sluice.export(Plugin)
