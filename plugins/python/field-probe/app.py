"""field-probe (Python): a test plugin for the SDK's field API.

For each record it emits, as JSON, what ``record.field`` and the record's
other accessors returned, then the record with field ``s`` upper-cased and
with a field ``added`` added (``out.emit_replacing``). It names its fields
in ``json_fields`` (config ``project = "no"``: names none), so the same
plugin runs through the host's projected path or the text-packed one, and
the two must agree. With config ``drop = "yes"`` it emits nothing and
counts each record it processes (plugin counter ``processed``): how a test
sees that no record is processed twice.
"""

import sluice


class FieldProbe(sluice.Transform):
    def __init__(self, config):
        if config.get("project", "yes") == "yes":
            self.json_fields = ("a", "s", "missing", "n")
        self.drop = config.get("drop") == "yes"

    def process(self, record, out):
        if self.drop:
            sluice.counter_add("processed", 1)
            return
        s = record.field("s")
        key = record.key
        out.emit_json({
            "a": record.field("a"),
            "s": s,
            "n": record.field("n"),
            "missing": record.field("missing", "default"),
            "undeclared": record.field("u"),
            "key": None if key is None else bytes(key).hex(),
            "headers": [[name, bytes(value).hex()] for name, value in record.headers],
            "event_time": record.event_time,
            "source": list(record.source),
            "value_length": len(record.value),
        })
        if isinstance(s, str):
            out.emit_replacing("s", s.upper())
        out.emit_replacing("added", [1, {"x": None}, "t\u00e9\"xt"])


Transformer = sluice.export(FieldProbe)
