"""validate-dedup (Python): Bronze to Silver. Validates required fields and
their types, drops duplicate events by id (remembered in host state) and
dead-letters invalid records with the reason. Same behaviour and the same
reasons as ``plugins/validate-dedup`` (Rust).

Config: ``required``: comma-separated ``field:type`` (``string``, ``integer``,
``number``, ``boolean``; strings must be non-empty); ``id_field``: the event
id used for de-duplication (default ``event_id``).
"""

import sluice

FIELD_TYPES = {
    "string": ("a string", lambda v: isinstance(v, str) and v != ""),
    "integer": ("an integer", lambda v: isinstance(v, sluice.JsonInt)),
    "number": ("a number", lambda v: isinstance(v, (sluice.JsonInt, sluice.JsonFloat))),
    "boolean": ("a boolean", lambda v: isinstance(v, bool)),
}


def json_type(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "an empty string" if value == "" else "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


class ValidateDedup(sluice.Transform):
    def __init__(self, config):
        self.required = []
        for entry in config.list("required"):
            field, sep, kind = entry.partition(":")
            if not sep:
                raise ValueError(f"required entry `{entry}` must be field:type")
            kind = kind.strip()
            if kind not in FIELD_TYPES:
                raise ValueError(f"unknown field type `{kind}` (use string, integer, number or boolean)")
            self.required.append((field.strip(), FIELD_TYPES[kind]))
        self.id_field = config.get("id_field", "event_id")

    def process(self, record, out):
        event = record.json()
        if not isinstance(event, dict):
            raise sluice.RecordError(f"event must be a JSON object, found {json_type(event)}")
        for field, (name, matches) in self.required:
            if field not in event:
                raise sluice.RecordError(f"missing required field `{field}`")
            if not matches(event[field]):
                raise sluice.RecordError(f"field `{field}` must be {name}, found {json_type(event[field])}")
        event_id = event.get(self.id_field)
        if isinstance(event_id, str) and event_id != "":
            pass
        elif isinstance(event_id, (sluice.JsonInt, sluice.JsonFloat)):
            event_id = event_id.text
        else:
            raise sluice.RecordError(f"missing event id field `{self.id_field}`")
        key = f"seen:{event_id}".encode("utf-8")
        if sluice.state.get(key) is not None:
            sluice.counter_add("duplicates_dropped", 1)
            return
        sluice.state.put(key, b"1")
        sluice.counter_add("valid", 1)
        out.forward()


Transformer = sluice.export(ValidateDedup)
