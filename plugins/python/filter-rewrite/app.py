"""filter-rewrite (Python): the record-path benchmark's transform.

A record whose integer field ``filter_field`` (default ``key``) is a
multiple of ``modulus`` (default 10) is dropped; the others are emitted with
the string field ``rewrite_field`` (default ``text``) upper-cased (ASCII).
Same output, byte for byte, as ``plugins/filter-rewrite`` (Rust): only the
rewritten field changes, every other byte is the record's own.

``mode = "fields"`` (default): the two fields are named in ``json_fields``,
so the host finds them while it packs the batch and splices the new value in
(``out.emit_replacing``): the record is never parsed or encoded as a whole
in Python. ``mode = "json"``: the plugin as the SDK's docstring teaches,
``record.json()`` into a dict, ``str.upper``, ``out.emit_json`` (issue 42
measures it; the same records as the Rust plugin's ``serde`` mode).
``mode = "batch"``: the batch API (``process_batch``): the two fields as
columns of the whole batch, a loop over them.
"""

import sluice

_ASCII_UPPER = bytes.maketrans(b"abcdefghijklmnopqrstuvwxyz", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


class FilterRewrite(sluice.Transform):
    def __init__(self, config):
        self.filter_field = config.get("filter_field", "key")
        self.modulus = config.get_int("modulus", 10)
        if self.modulus <= 0:
            raise ValueError("config key `modulus`: must be a positive integer")
        self.rewrite_field = config.get("rewrite_field", "text")
        self.not_an_integer = f"field `{self.filter_field}` is not an integer"
        self.not_a_string = f"field `{self.rewrite_field}` is not a string"
        mode = config.get("mode", "fields")
        if mode not in ("fields", "json", "batch"):
            raise ValueError(f"config key `mode`: `{mode}` is not `fields`, `json` or `batch`")
        if mode != "json":
            self.json_fields = (self.filter_field, self.rewrite_field)
        if mode == "json":
            self.process = self.process_json
        elif mode == "batch":
            # The SDK calls `process_batch` where the plugin has one.
            self.process_batch = self.process_columns

    def _kept(self, key, text):
        """``text`` if the record stays (its ``key`` is not a multiple of
        ``modulus``), None if it is dropped; RecordError if a field is not
        of its type."""
        if not isinstance(key, sluice.JsonInt):
            raise sluice.RecordError(self.not_an_integer)
        if key % self.modulus == 0:
            return None
        if not isinstance(text, str):
            raise sluice.RecordError(self.not_a_string)
        return text

    def process_json(self, record, out):
        event = record.json()
        if type(event) is not dict:
            raise sluice.RecordError("invalid JSON value: a record must be a JSON object")
        text = self._kept(event.get(self.filter_field), event.get(self.rewrite_field))
        if text is not None:
            event[self.rewrite_field] = text.upper()
            out.emit_json(event)

    def process_columns(self, batch, out):
        field, modulus = self.rewrite_field, self.modulus
        keys = batch.column(self.filter_field)
        texts = batch.column(field)
        rows, kept = [], []
        for row, (key, text) in enumerate(zip(keys, texts)):
            if not isinstance(key, sluice.JsonInt):
                out.fail(row, self.not_an_integer)
            elif key % modulus:
                if isinstance(text, str):
                    rows.append(row)
                    kept.append(text)
                else:
                    out.fail(row, self.not_a_string)
        out.emit_replacing_rows(
            rows, field, [t.encode("utf-8").translate(_ASCII_UPPER).decode("utf-8") for t in kept])

    def process(self, record, out):
        text = self._kept(record.field(self.filter_field), record.field(self.rewrite_field))
        if text is not None:
            out.emit_replacing(
                self.rewrite_field, text.encode("utf-8").translate(_ASCII_UPPER).decode("utf-8")
            )


Transformer = sluice.export(FilterRewrite)
