"""Sluice plugin SDK for Python.

A transform plugin is a class with ``__init__(self, config)`` and
``process(self, record, out)``; ``sluice.export(MyPlugin)`` turns it into
the ``transformer`` export of the ``sluice:plugin/transform`` world::

    import sluice

    class Upper(sluice.Transform):
        def __init__(self, config):
            self.field = config.get("field", "name")

        def process(self, record, out):
            event = record.json()
            event[self.field] = event[self.field].upper()
            out.emit_json(event)

    Transformer = sluice.export(Upper)

A window aggregate subclasses ``sluice.Aggregate`` (``create``, ``add``,
``merge``, ``finish`` over an accumulator: any JSON value, which the host
stores per key and window) and is exported as ``Aggregator =
sluice.export_aggregate(MyAggregate)``; ``sluice plugin build`` then builds
the ``sluice:plugin/aggregate`` world instead.

``sluice plugin build`` compiles it with componentize-py; this module is
embedded in the ``sluice`` binary and put on the plugin's path at build time.

Errors: raising ``sluice.RecordError("why")`` (or any exception) in
``process`` sends that record alone to the dead-letter output with the
message as the reason; the rest of the batch is unaffected. Raising in
``__init__`` stops the pipeline at start-up with the message.

Reading a few fields: list them in ``json_fields`` and read them with
``record.field(name)``; ``out.emit_replacing(field, value)`` emits the record
with one field changed. The host then finds the fields and splices the new
value natively (the projected path): no whole-record parse or encode here.

JSON: ``record.json()`` parses like the Rust SDK (strict RFC 8259) and keeps
every number's text, so ``sluice.dumps`` writes numbers back as they came
(``1.50`` stays ``1.50``; only an exponent is normalised, ``1E3`` to ``1e+3``,
as serde_json does) and output is byte-identical to the Rust SDK's
(serde_json with ``preserve_order`` and ``arbitrary_precision``): compact,
keys in input order, the same string escapes.
"""

import struct
import sys

import sluice_json as _json_module
from sluice_json import (
    _UNREAD,
    _C_ENCODE,
    JsonFloat,
    JsonInt,
    RecordError,
    _encode_string,
    _json_text,
    _loads_all,
    dumps,
    loads,
)

from componentize_py_types import Err, Ok
from wit_world import exports
from wit_world.imports import host, types

try:
    from wit_world.imports import state
except ImportError:
    # The `aggregate` world has no state import: the host stores the
    # accumulator.
    state = None

__all__ = [
    "Aggregate",
    "Batch",
    "BatchOutput",
    "BatchTransform",
    "Config",
    "Emitter",
    "JsonFloat",
    "JsonInt",
    "Record",
    "RecordError",
    "Transform",
    "counter_add",
    "dumps",
    "export",
    "export_aggregate",
    "log",
    "loads",
    "state",
]


# ---------------------------------------------------------------- records


class Config:
    """The operator's ``config`` table from the pipeline file."""

    def __init__(self, entries):
        self._entries = dict(entries)

    def get(self, key, default=None):
        """The raw string value of ``key``, or ``default``."""
        return self._entries.get(key, default)

    def get_int(self, key, default):
        """``key`` parsed as an integer, or ``default`` when absent."""
        raw = self._entries.get(key)
        if raw is None:
            return default
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError(f"config key `{key}`: cannot parse {raw!r} as an integer") from None

    def list(self, key):
        """``key`` split on commas (trimmed, empty entries skipped)."""
        raw = self._entries.get(key, "")
        return [part.strip() for part in raw.split(",") if part.strip()]


class Record:
    """A record handed to ``process``."""

    __slots__ = ("_input",)

    def __init__(self, input_record):
        self._input = input_record

    @property
    def key(self):
        """The key bytes, or None."""
        return self._input.key

    @property
    def value(self):
        """The value bytes."""
        return self._input.value

    @property
    def headers(self):
        """The headers as a list of (name, bytes) pairs."""
        return [(h.key, h.value) for h in self._input.headers]

    @property
    def event_time(self):
        """Event time in milliseconds since the epoch, or None."""
        return self._input.event_time

    @property
    def source(self):
        """(topic, partition, offset) the record was read from."""
        s = self._input.source
        return (s.topic, s.partition, s.offset)

    def text(self):
        """The value as a string (RecordError if it is not UTF-8)."""
        try:
            return bytes(self._input.value).decode("utf-8")
        except UnicodeDecodeError as error:
            raise RecordError(f"value is not UTF-8: {error}") from None

    def json(self):
        """The value parsed as JSON (see ``loads``)."""
        return loads(self._input.value)

    def field(self, name, default=None):
        """The top-level field ``name`` of the JSON object value, parsed (see
        ``loads``), or ``default`` if the object has no such field (of a
        name given twice, the last). RecordError if the value is not a JSON
        object.

        Fields the plugin lists in ``json_fields`` are found by the host
        while it packs the batch: only that field's text is parsed here.
        Others parse the whole record."""
        value = self.json()
        if type(value) is not dict:
            raise RecordError(_NOT_AN_OBJECT_REASON)
        return value.get(name, default)


_NOT_AN_OBJECT_REASON = "invalid JSON value: a record must be a JSON object"

# The projected batch format (`sluice-wire`'s `projected` module): a header
# of four u32, then per record (4 + fields) (start, end) u32 slots — value,
# key, topic, headers, then the fields — then three i64 per record — event
# time, partition, offset — then the bytes the slots point into.
_PROJECTED_FORMAT_VERSION = 1
_PROJECTED_HEADER = struct.Struct("<4I")
_ABSENT = 0xFFFFFFFF
_NOT_AN_OBJECT = 1
_NO_EVENT_TIME = -(1 << 63)
_U32 = struct.Struct("<I")


class _ProjectedBatch:
    """One projected batch: the buffer and its tables, shared by its
    records."""

    __slots__ = ("data", "slots", "numbers", "stride", "field_slot", "parsed", "json_calls")

    # Whether `record.json()` parses every value of a batch at its first
    # call (`_loads_all`): yes while the plugin asked for at least half of
    # the values in the last batch, so that one that parses few records
    # (after a test on a field) parses no more than it asks for.
    whole_batches = True

    def __init__(self, data, records, fields, names):
        self.data = data
        # The values parsed at once (`_loads_all`), when they were.
        self.parsed = None
        # `record.json()` calls while values are parsed one by one.
        self.json_calls = 0
        self.stride = 2 * (4 + fields)
        slots_end = 16 + records * self.stride * 4
        view = memoryview(data)
        self.slots = view[16:slots_end].cast("I")
        self.numbers = view[slots_end:slots_end + records * 24].cast("q")
        # Name -> index of its slot's start within a record's slots.
        self.field_slot = {name: 8 + 2 * i for i, name in enumerate(names)}

    def done(self):
        """Called when every record of the batch was processed: chooses how
        the next batch's values are parsed."""
        parsed, count = self.parsed, len(self.slots) // self.stride
        if parsed is not None:
            # Values handed out (and malformed ones) are `_UNREAD`.
            _ProjectedBatch.whole_batches = 2 * parsed.count(_UNREAD) >= count
        elif self.json_calls:
            _ProjectedBatch.whole_batches = 2 * self.json_calls >= count


# Makes an instance without calling `__init__` (a Python call less per
# record, where the fields are set in line).
_new_object = object.__new__


class _ProjectedRecord(Record):
    """A record of a projected batch: everything is read from the batch's
    buffer when asked, nothing is built before."""

    # `_base`: the index of the record's first slot.
    __slots__ = ("_batch", "_base")

    def __init__(self, batch, base):
        self._batch = batch
        self._base = base

    def _slot(self, slot):
        batch = self._batch
        at = self._base + slot
        start = batch.slots[at]
        if start == _ABSENT:
            return None
        return batch.data[start:batch.slots[at + 1]]

    @property
    def key(self):
        batch = self._batch
        at = self._base + 2
        start = batch.slots[at]
        return None if start == _ABSENT else batch.data[start:batch.slots[at + 1]]

    @property
    def value(self):
        return self._slot(0)

    @property
    def headers(self):
        raw = self._slot(6)
        if raw is None:
            return []
        (count,) = _U32.unpack_from(raw, 0)
        at, headers = 4, []
        for _ in range(count):
            (length,) = _U32.unpack_from(raw, at)
            name = raw[at + 4:at + 4 + length].decode("utf-8")
            at += 4 + length
            (length,) = _U32.unpack_from(raw, at)
            headers.append((name, raw[at + 4:at + 4 + length]))
            at += 4 + length
        return headers

    @property
    def event_time(self):
        batch = self._batch
        time = batch.numbers[3 * (self._base // batch.stride)]
        return None if time == _NO_EVENT_TIME else time

    @property
    def source(self):
        batch = self._batch
        numbers, at = batch.numbers, 3 * (self._base // batch.stride)
        return (self._slot(4).decode("utf-8"), numbers[at + 1], numbers[at + 2])

    def text(self):
        try:
            return self.value.decode("utf-8")
        except UnicodeDecodeError as error:
            raise RecordError(f"value is not UTF-8: {error}") from None

    def json(self):
        # From the batch's values parsed at once, where that pays.
        batch = self._batch
        parsed = batch.parsed
        if parsed is None:
            if not _ProjectedBatch.whole_batches:
                batch.json_calls += 1
                return loads(self.value)
            data, slots = batch.data, batch.slots
            parsed = batch.parsed = _loads_all(
                [data[slots[at]:slots[at + 1]] for at in range(0, len(slots), batch.stride)])
        index = self._base // batch.stride
        value = parsed[index]
        if value is _UNREAD:
            return loads(self.value)
        # A second call gives a new value, as `loads` would.
        parsed[index] = _UNREAD
        return value

    def field(self, name, default=None):
        batch = self._batch
        slot = batch.field_slot.get(name)
        if slot is None:
            return Record.field(self, name, default)
        slots = batch.slots
        at = self._base + slot
        start = slots[at]
        if start == _ABSENT:
            if slots[at + 1] == _NOT_AN_OBJECT:
                return Record.field(self, name, default)
            return default
        text = batch.data[start:slots[at + 1]]
        # The host checked the whole value (well-formed JSON, UTF-8), so a
        # string without escapes is its inner bytes, and digits alone are
        # an integer (fewer than 19 fit i64, as `_parse_integer` decides).
        if text[0] == 34 and 92 not in text:  # '"', no '\\'
            return text[1:-1].decode("utf-8")
        if len(text) < 19 and text.isdigit():
            return JsonInt(text)
        return loads(text)

    def _is_object(self):
        """Whether the host found the value to be a JSON object (a batch
        with no fields says nothing: parse to know)."""
        batch = self._batch
        if not batch.field_slot:
            return type(self.json()) is dict
        at = self._base + 8
        return not (batch.slots[at] == _ABSENT and batch.slots[at + 1] == _NOT_AN_OBJECT)


class Emitter:
    """Collects what ``process`` emits for one input record."""

    __slots__ = ("_record", "_emits")

    def __init__(self, record):
        self._record = record
        self._emits = []

    def _emit(self, route, value, key, headers, event_time):
        # (route, value, key, headers, event time); `route` is one of
        # _MAIN, (_SIDE, name) or (_DEAD_LETTER, reason); headers are the
        # input record's when _SAME, else (name, bytes) pairs.
        self._emits.append((route, value, self._record.key if key is _SAME else key,
                            headers, event_time))

    # `forward` and `emit` append themselves: a call less per record.
    def forward(self):
        """Emits the input record unchanged to the main output."""
        record = self._record
        self._emits.append((_MAIN, record.value, record.key, _SAME, None))

    def emit(self, value, key=None, headers=None, event_time=None):
        """Emits ``value`` (bytes) to the main output. ``key`` and
        ``headers`` default to the input record's."""
        self._emits.append((_MAIN, value, self._record.key if key is None else key,
                            _SAME if headers is None else headers, event_time))

    def emit_json(self, value, key=None):
        """Emits ``value`` encoded with ``sluice.dumps``."""
        self.emit(dumps(value), key=key)

    def emit_replacing(self, field, value):
        """Emits the input record to the main output with the value of its
        top-level JSON field ``field`` replaced by ``value`` (any value
        ``dumps`` encodes), or the field added at the end if it has none.
        In a projected batch the host splices the new value into the
        record: every other byte stays as it came, nothing is encoded but
        ``value``. Otherwise the record is parsed, changed and written with
        ``dumps``. RecordError if the value is not a JSON object."""
        event = loads(self._record.value)
        if type(event) is not dict:
            raise RecordError(_NOT_AN_OBJECT_REASON)
        event[field] = value
        self.emit(dumps(event))

    def side(self, name, value):
        """Emits ``value`` (bytes) to the side output ``name``."""
        self._emit((_SIDE, name), value, _SAME, _SAME, None)

    def dead_letter(self, reason):
        """Sends the input record to the dead-letter output with ``reason``."""
        self._emit((_DEAD_LETTER, reason), self._record.value, _SAME, _SAME, None)


class _ProjectedEmitter(Emitter):
    """The emitter of a projected batch: ``emit_replacing`` leaves the
    splice to the host."""

    __slots__ = ()

    def emit_json(self, value, key=None):
        # `emit(dumps(value))` with the calls in line: Python calls are
        # most of the cost per record.
        if not _json_module._json_floats_made:
            try:
                text = _C_ENCODE(value)
            except (TypeError, ValueError):
                text = _json_text(value)
        else:
            text = _json_text(value)
        if key is None:
            # `self._record.key` in line.
            record = self._record
            batch = record._batch
            at = record._base + 2
            start = batch.slots[at]
            if start != _ABSENT:
                key = batch.data[start:batch.slots[at + 1]]
        self._emits.append((_MAIN, text.encode("utf-8"), key, _SAME, None))

    def emit_replacing(self, field, value):
        if not self._record._is_object():
            raise RecordError(_NOT_AN_OBJECT_REASON)
        text = _encode_string(value) if type(value) is str else _json_text(value)
        self._emits.append((_REPLACING, field, text.encode("utf-8"), None, None))


_SAME = object()
# Routes, numbered as the variants of sluice-wire's `Route`.
_MAIN_ROUTE, _SIDE, _DEAD_LETTER = 0, 1, 2
_MAIN = (_MAIN_ROUTE, None)
# The route of an `emit_replacing` emit (its own output item).
_REPLACING = (3, None)


def _typed_emit(input_record, emit):
    """One collected emit as the typed interface's ``Emit``."""
    (kind, text), value, key, headers, event_time = emit
    if kind == _MAIN_ROUTE:
        route = types.Route_Main()
    elif kind == _SIDE:
        route = types.Route_Side(text)
    else:
        route = types.Route_DeadLetter(text)
    output = types.OutputRecord(
        key=key,
        value=bytes(value),
        headers=input_record.headers if headers is _SAME else
        [types.Header(k, bytes(v)) for k, v in headers],
        event_time=event_time,
    )
    return types.Emit(route, output)


# ---------------------------------------------------------------- packed output
#
# `text-packed-transformer` returns a batch's outcomes as one buffer in the
# packed output format of the `sluice-wire` crate (postcard-encoded
# `OutputItem`s), carried as ISO-8859-1 text. Returning a string rather than
# per-record `list<u8>` values is what keeps a Python plugin's memory flat:
# componentize-py never frees the byte lists an export returns.


def _varint(out, number):
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)


def _varint_bytes(number):
    out = bytearray()
    _varint(out, number)
    return bytes(out)


# Varints of small numbers (batch indices, value lengths), made once.
_SMALL_VARINTS = [_varint_bytes(number) for number in range(4096)]


def _packed_bytes(out, data):
    _varint(out, len(data))
    out += data


def _packed_str(out, text):
    _packed_bytes(out, text.encode("utf-8"))


def _packed_emit(out, index, input_record, emit):
    (kind, text), value, key, headers, event_time = emit
    out.append(0)  # OutputItem::Emit
    _varint(out, index)
    out.append(kind)
    if kind != _MAIN_ROUTE:
        _packed_str(out, text)
    if key is None:
        out.append(0)
    else:
        out.append(1)
        _packed_bytes(out, key)
    _packed_bytes(out, value)
    if headers is _SAME:
        if isinstance(input_record, Batch):
            input_record = input_record[index]
        headers = (input_record.headers if isinstance(input_record, Record)
                   else [(h.key, h.value) for h in input_record.headers])
    _varint(out, len(headers))
    for name, header_value in headers:
        _packed_str(out, name)
        _packed_bytes(out, header_value)
    if event_time is None:
        out.append(0)
    else:
        out.append(1)
        _varint(out, (event_time << 1) ^ (event_time >> 63))  # zigzag


def _packed_replacing(out, index, field, json_text):
    out.append(2)  # OutputItem::EmitReplacing
    _varint(out, index)
    _packed_str(out, field)
    _packed_bytes(out, json_text)


def _pack_emits(out, index, input_record, emits, no_input_headers):
    """Appends one input record's emits to the packed output ``out``; the
    common cases (a value to the main output with the input's key-less
    metadata, a replaced field) written inline: Python calls are most of
    the cost per record."""
    varints = _SMALL_VARINTS
    for emit in emits:
        route, value, key, headers, event_time = emit
        if route is _REPLACING:
            # value: the field's name; key: its new JSON text.
            if index < 4096 and len(key) < 4096 and len(value) < 128 and value.isascii():
                out += b"\x02"
                out += varints[index]
                out += varints[len(value)]
                out += value.encode("ascii")
                out += varints[len(key)]
                out += key
            else:
                _packed_replacing(out, index, value, key)
        elif (route is _MAIN and key is None and event_time is None
                and headers is _SAME and no_input_headers
                and index < 4096 and len(value) < 4096):
            # Emit, index, Main, no key, the value, no headers, no event
            # time.
            out += b"\x00"
            out += varints[index]
            out += b"\x00\x00"
            out += varints[len(value)]
            out += value
            out += b"\x00\x00"
        else:
            _packed_emit(out, index, input_record, emit)


def _packed_no_emits(out, index):
    out.append(3)  # OutputItem::NoEmits
    _varint(out, index)


def _packed_failed(out, index, reason):
    out.append(1)  # OutputItem::Failed
    _varint(out, index)
    _packed_str(out, reason)


# ---------------------------------------------------------------- host


def log(level, message):
    """Writes to the host log: level is "trace", "debug", "info", "warn" or
    "error"."""
    host.log(getattr(types.LogLevel, level.upper()), message)


def counter_add(name, delta=1):
    """Adds ``delta`` to the plugin counter ``name`` (shown in the run
    summary)."""
    host.counter_add(name, delta)


# ---------------------------------------------------------------- export


class Transform:
    """Base class of a plugin (optional: any class with ``__init__(config)``
    and ``process(record, out)`` works).

    ``json_fields``: the top-level fields of JSON object records that
    ``process`` reads with ``record.field`` (a class attribute, or set in
    ``__init__`` from the config). The host finds them while it packs each
    batch, so a read parses only that field's text, and
    ``out.emit_replacing`` is spliced by the host: a plugin that reads and
    rewrites a few fields does little JSON work in Python."""

    json_fields = ()

    def __init__(self, config):
        pass

    def process(self, record, out):
        raise NotImplementedError


def _process(plugin, input_record):
    """Runs ``plugin`` on one record: its collected emits, or the reason it
    failed (a string)."""
    out = Emitter(input_record)
    try:
        plugin.process(Record(input_record), out)
    except RecordError as error:
        return str(error)
    except Exception as error:  # noqa: BLE001 - the record is dead-lettered
        return f"{type(error).__name__}: {error}"
    return out._emits


# ---------------------------------------------------------------- batches


class BatchTransform:
    """Base class of a plugin that takes a whole batch per call:
    ``process_batch(batch, out)`` instead of ``process(record, out)``.

    ``batch.column(name)`` gives a field of every record as one list (for
    fields named in ``json_fields``, parsed in a few calls for the whole
    batch: the host found them), ``batch[row]`` a record, and ``out`` says
    which row each emit is for: ``out.emit_replacing(row, field, value)``,
    ``out.emit_json(row, value)``, ``out.forward(row)``, ... A plugin whose
    work is a loop over columns pays Python's per-call costs once a batch
    instead of once a record.

    Errors: ``out.fail(row, reason)`` fails one row, as raising
    ``RecordError`` in ``process`` fails a record: it goes to the
    dead-letter output with the reason and what was emitted for it is
    dropped. A row whose value is not a JSON object when a column is read
    (or JSON, by ``batch.json()``) fails the same way, with the reason
    ``record.json()`` would raise. An exception raised by
    ``process_batch`` fails every row of the batch with its message."""

    json_fields = ()

    def __init__(self, config):
        pass

    def process_batch(self, batch, out):
        raise NotImplementedError


class Batch:
    """The records of one ``process_batch`` call."""

    __slots__ = ("_records", "_projected", "_failed")

    def __init__(self, records, projected=None):
        # Records (Record or _ProjectedRecord), made when first asked for
        # in a projected batch.
        self._records = records
        self._projected = projected
        # Row -> reason: failed rows (`out.fail`, a value that is not a
        # JSON object where a column was read).
        self._failed = {}

    def __len__(self):
        projected = self._projected
        if projected is not None:
            return len(projected.slots) // projected.stride
        return len(self._records)

    def __getitem__(self, row):
        """The record at ``row`` (a ``Record``)."""
        _check_row(self, row)
        projected = self._projected
        if projected is None:
            return self._records[row]
        record = _new_object(_ProjectedRecord)
        record._batch = projected
        record._base = row * projected.stride
        return record

    def __iter__(self):
        return iter([self[row] for row in range(len(self))])

    def column(self, name, default=None):
        """The top-level field ``name`` of each record's JSON object value,
        parsed (see ``loads``), as a list with one entry per row:
        ``default`` where the object has no such field, and where the value
        is not a JSON object (that row goes to the dead-letter output)."""
        projected = self._projected
        if projected is not None and name in projected.field_slot:
            return _projected_column(projected, self, name, default)
        values = []
        for row in range(len(self)):
            try:
                values.append(self[row].field(name, default))
            except RecordError as error:
                self._failed.setdefault(row, str(error))
                values.append(default)
        return values

    def json(self):
        """Each record's value parsed (see ``loads``), as a list with one
        entry per row: ``None`` where the value is not JSON (that row goes
        to the dead-letter output)."""
        values = []
        for row in range(len(self)):
            try:
                values.append(self[row].json())
            except RecordError as error:
                self._failed.setdefault(row, str(error))
                values.append(None)
        return values


_INT_TYPE = frozenset((int,))
_STR_TYPE = frozenset((str,))


def _check_row(batch, row):
    """IndexError unless ``row`` is a row of ``batch`` (a negative index
    would name another record to the host)."""
    if type(row) is not int or not 0 <= row < len(batch):
        raise IndexError(f"no row {row!r} in a batch of {len(batch)}")


def _projected_column(projected, batch, name, default):
    """``batch.column(name, default)`` for a field the host found: the
    fields' texts of the batch parsed as one JSON array (each is one
    well-formed value: the host checked the whole object)."""
    slot, stride, slots, data = (projected.field_slot[name], projected.stride,
                                 projected.slots, projected.data)
    starts = slots[slot::stride].tolist()
    ends = slots[slot + 1::stride].tolist()
    if _ABSENT not in starts:
        rows = None
        texts = [data[start:end] for start, end in zip(starts, ends)]
    else:
        rows = []
        texts = []
        for row, (start, end) in enumerate(zip(starts, ends)):
            if start != _ABSENT:
                rows.append(row)
                texts.append(data[start:end])
            elif end == _NOT_AN_OBJECT:
                try:
                    batch[row].field(name)
                except RecordError as error:
                    batch._failed.setdefault(row, str(error))
    parsed = _loads_all([b"[" + b",".join(texts) + b"]"])[0] if texts else []
    if parsed is _UNREAD or len(parsed) != len(texts):
        # A text `loads` reads differently alone (a lone surrogate escape):
        # each on its own, as `record.field` reads it.
        parsed = []
        for row, text in enumerate(texts):
            try:
                parsed.append(loads(text))
            except RecordError as error:
                batch._failed.setdefault(row if rows is None else rows[row], str(error))
                parsed.append(default)
    if rows is None:
        return parsed
    values = [default] * len(starts)
    for row, value in zip(rows, parsed):
        values[row] = value
    return values


class BatchOutput:
    """What ``process_batch`` emits, each for a row of the batch."""

    __slots__ = ("_batch", "_emits", "_rows")

    def __init__(self, batch):
        self._batch = batch
        # (row, emit), emits as `Emitter` collects them.
        self._emits = []
        self._rows = len(batch)

    def forward(self, row):
        """Emits the record at ``row`` unchanged to the main output."""
        record = self._batch[row]
        self._emits.append((row, (_MAIN, record.value, record.key, _SAME, None)))

    def emit(self, row, value, key=None, headers=None, event_time=None):
        """Emits ``value`` (bytes) to the main output for ``row``; ``key``
        and ``headers`` default to the row's."""
        if key is None:
            key = self._batch[row].key
        else:
            _check_row(self._batch, row)
        self._emits.append((row, (_MAIN, value, key, _SAME if headers is None else headers,
                                  event_time)))

    def emit_json(self, row, value, key=None):
        """Emits ``value`` encoded with ``sluice.dumps`` for ``row``."""
        self.emit(row, dumps(value), key=key)

    def emit_replacing(self, row, field, value):
        """Emits the record at ``row`` with its top-level JSON field
        ``field`` set to ``value`` (see ``Emitter.emit_replacing``): in a
        projected batch the host splices it in."""
        batch = self._batch
        projected = batch._projected
        if projected is not None and projected.field_slot:
            # `_ProjectedEmitter.emit_replacing` in line.
            if type(row) is not int or not 0 <= row < self._rows:
                _check_row(batch, row)
            slots, at = projected.slots, row * projected.stride + 8
            if slots[at] == _ABSENT and slots[at + 1] == _NOT_AN_OBJECT:
                try:
                    Record.field(batch[row], field)  # raises why it is not an object
                except RecordError as error:
                    batch._failed.setdefault(row, str(error))
                    return
            text = _encode_string(value) if type(value) is str else _json_text(value)
            self._emits.append((row, (_REPLACING, field, text.encode("utf-8"), None, None)))
            return
        record = batch[row]
        emitter = _ProjectedEmitter(record) if isinstance(record, _ProjectedRecord) \
            else Emitter(record)
        try:
            emitter.emit_replacing(field, value)
        except RecordError as error:
            self._batch._failed.setdefault(row, str(error))
            return
        self._emits.append((row, emitter._emits[0]))

    def emit_replacing_rows(self, rows, field, values):
        """``emit_replacing(row, field, value)`` for each ``row`` of
        ``rows`` and ``value`` of ``values`` (two sequences of one length),
        in one call: the values are encoded, and the rows checked, a whole
        list at a time."""
        rows, values = list(rows), list(values)
        if len(rows) != len(values):
            raise ValueError(f"{len(rows)} rows and {len(values)} values")
        if not rows:
            return
        batch = self._batch
        projected = batch._projected
        if (projected is None or not projected.field_slot
                or not set(map(type, rows)) <= _INT_TYPE
                or min(rows) < 0 or max(rows) >= self._rows
                or not set(map(type, values)) <= _STR_TYPE):
            for row, value in zip(rows, values):
                self.emit_replacing(row, field, value)
            return
        slots, stride = projected.slots, projected.stride
        # Rows whose value is not an object: each the one-row way (fails it).
        not_objects = {row for row in rows
                       if slots[row * stride + 8] == _ABSENT
                       and slots[row * stride + 9] == _NOT_AN_OBJECT}
        texts = [text.encode("utf-8") for text in map(_encode_string, values)]
        if not_objects:
            for row, value, text in zip(rows, values, texts):
                if row in not_objects:
                    self.emit_replacing(row, field, value)
                else:
                    self._emits.append((row, (_REPLACING, field, text, None, None)))
            return
        self._emits.extend([(row, (_REPLACING, field, text, None, None))
                            for row, text in zip(rows, texts)])

    def side(self, row, name, value):
        """Emits ``value`` (bytes) to the side output ``name`` for ``row``."""
        self._emits.append((row, ((_SIDE, name), value, self._batch[row].key, _SAME, None)))

    def fail(self, row, reason):
        """Fails ``row``, as raising ``RecordError(reason)`` in ``process``
        fails a record: it goes to the dead-letter output with ``reason``
        and what was emitted for it is dropped."""
        _check_row(self._batch, row)
        self._batch._failed.setdefault(row, str(reason))

    def dead_letter(self, row, reason):
        """Sends the record at ``row`` to the dead-letter output with
        ``reason`` (beside what else is emitted for it)."""
        record = self._batch[row]
        self._emits.append((row, ((_DEAD_LETTER, reason), record.value, record.key, _SAME, None)))


def _run_batch(plugin, batch, out, no_headers):
    """Runs ``plugin.process_batch`` on ``batch`` and appends its outcomes
    to the packed output ``out``, in row order as the format wants;
    ``no_headers[row]``: whether the row's record has no headers."""
    output = BatchOutput(batch)
    failed = batch._failed
    try:
        plugin.process_batch(batch, output)
    except Exception as error:  # noqa: BLE001 - every row is dead-lettered
        reason = str(error) if isinstance(error, RecordError) \
            else f"{type(error).__name__}: {error}"
        failed.update((row, reason) for row in range(len(batch)))
    emits = output._emits
    if not failed:
        # The common case, emits in row order: packed as they come, a
        # replacing emit (the batch API's commonest) in line.
        start, previous = len(out), -1
        varints, field_parts = _SMALL_VARINTS, {}
        for row, emit in emits:
            if row < previous:
                del out[start:]
                break
            previous = row
            if emit[0] is _REPLACING and row < 4096 and len(emit[2]) < 4096:
                field = emit[1]
                part = field_parts.get(field)
                if part is None:
                    name = field.encode("utf-8")
                    part = field_parts[field] = _varint_bytes(len(name)) + name
                text = emit[2]
                out += b"\x02"  # OutputItem::EmitReplacing, index, field, text
                out += varints[row]
                out += part
                out += varints[len(text)]
                out += text
            else:
                _pack_emits(out, row, batch, (emit,), no_headers[row])
        else:
            return
    by_row = {}
    for row, emit in emits:
        by_row.setdefault(row, []).append(emit)
    for row in sorted(by_row.keys() | failed.keys()):
        reason = failed.get(row)
        if reason is not None:
            _packed_failed(out, row, reason)
        else:
            _pack_emits(out, row, batch, by_row[row], no_headers[row])


def _batch_outcomes(plugin, batch):
    """``_run_batch`` for the typed interface: per row, its emits (a list)
    or the reason it failed (a string)."""
    output = BatchOutput(batch)
    try:
        plugin.process_batch(batch, output)
    except Exception as error:  # noqa: BLE001 - every row is dead-lettered
        reason = str(error) if isinstance(error, RecordError) \
            else f"{type(error).__name__}: {error}"
        return [reason] * len(batch)
    outcomes = [[] for _ in range(len(batch))]
    for row, emit in output._emits:
        outcomes[row].append(emit)
    for row, reason in batch._failed.items():
        outcomes[row] = reason
    return outcomes


def export(plugin_class):
    """The ``Transformer`` class componentize-py exports, running
    ``plugin_class``.

    Also binds ``TextPackedTransformer`` in the calling module (the
    ``text-transform`` world's second export, which ``sluice plugin build``
    builds Python transforms for): the same plugin, its outcomes returned
    packed in one string instead of typed records."""

    class Transformer(exports.Transformer):
        plugin = None

        def init(self, config):
            try:
                Transformer.plugin = plugin_class(Config(config))
            except Exception as error:  # noqa: BLE001 - reported to the host
                raise Err(str(error) or type(error).__name__) from None

        def process_batch(self, batch):
            plugin = Transformer.plugin
            if plugin is None:
                raise RuntimeError("process-batch called before init")
            if hasattr(plugin, "process_batch"):
                outcomes = _batch_outcomes(plugin, Batch([Record(r) for r in batch]))
                return [Err(emits) if isinstance(emits, str)
                        else Ok([_typed_emit(r, e) for e in emits])
                        for r, emits in zip(batch, outcomes)]
            outcomes = []
            for input_record in batch:
                emits = _process(plugin, input_record)
                if isinstance(emits, str):
                    outcomes.append(Err(emits))
                else:
                    outcomes.append(Ok([_typed_emit(input_record, e) for e in emits]))
            return outcomes

    class TextPackedTransformer:
        def process_batch_text(self, batch):
            plugin = Transformer.plugin
            if plugin is None:
                raise RuntimeError("process-batch-text called before init")
            out = bytearray()
            if hasattr(plugin, "process_batch"):
                _run_batch(plugin, Batch([Record(r) for r in batch]), out,
                           [not r.headers for r in batch])
                return out.decode("latin-1")
            # `_process` inline: Python calls are most of the cost per record.
            for index, input_record in enumerate(batch):
                emitter = Emitter(input_record)
                try:
                    plugin.process(Record(input_record), emitter)
                except RecordError as error:
                    _packed_failed(out, index, str(error))
                    continue
                except Exception as error:  # noqa: BLE001 - the record is dead-lettered
                    _packed_failed(out, index, f"{type(error).__name__}: {error}")
                    continue
                _pack_emits(out, index, input_record, emitter._emits,
                            not input_record.headers)
            return out.decode("latin-1")

    class ProjectedTransformer:
        def projected_fields(self):
            plugin = Transformer.plugin
            if plugin is None:
                raise RuntimeError("projected-fields called before init")
            return _json_fields(plugin)

        def process_projected(self, data):
            plugin = Transformer.plugin
            if plugin is None:
                raise RuntimeError("process-projected called before init")
            version, count, fields, _ = _PROJECTED_HEADER.unpack_from(data, 0)
            names = tuple(plugin.json_fields)
            if version != _PROJECTED_FORMAT_VERSION or fields != len(names):
                return ""  # the host sends the batch the text-packed way
            batch = _ProjectedBatch(data, count, fields, names)
            out = bytearray()
            if hasattr(plugin, "process_batch"):
                _run_batch(plugin, Batch(None, batch), out,
                           [start == _ABSENT for start in batch.slots[6::batch.stride].tolist()])
                if not out and count:
                    _packed_no_emits(out, count - 1)
                return out.decode("latin-1")
            # One emitter for the batch, pointed at each record in turn.
            emitter = _ProjectedEmitter(None)
            slots, stride = batch.slots, batch.stride
            for index in range(count):
                base = index * stride
                record = _new_object(_ProjectedRecord)
                record._batch = batch
                record._base = base
                emitter._record = record
                emitter._emits = []
                try:
                    plugin.process(record, emitter)
                except RecordError as error:
                    _packed_failed(out, index, str(error))
                    continue
                except Exception as error:  # noqa: BLE001 - the record is dead-lettered
                    _packed_failed(out, index, f"{type(error).__name__}: {error}")
                    continue
                _pack_emits(out, index, record, emitter._emits, slots[base + 6] == _ABSENT)
            batch.done()
            if not out and count:
                # Nothing emitted: say the batch was read (an empty output
                # would make the host send it again).
                _packed_no_emits(out, count - 1)
            return out.decode("latin-1")

    # componentize-py finds each export by name in the app module.
    sys._getframe(1).f_globals.setdefault("TextPackedTransformer", TextPackedTransformer)
    sys._getframe(1).f_globals.setdefault("ProjectedTransformer", ProjectedTransformer)
    return Transformer


class Aggregate:
    """Base class of a window aggregate. The accumulator is any value
    ``sluice.dumps`` can encode (it is stored as JSON between calls).

    ``add`` reads records as transforms do; the top-level fields it reads
    with ``record.field``, named in ``json_fields`` (a class attribute, or
    set in ``__init__``), are found by the host, and all the keys and
    windows of a batch are added in one call."""

    json_fields = ()

    def __init__(self, config):
        pass

    def create(self):
        """A new, empty accumulator."""
        return None

    def add(self, accumulator, record):
        """Returns ``accumulator`` with ``record`` added (it may change it in
        place). Raising (``RecordError`` or any exception) dead-letters the
        record; it does not count, even if the accumulator was already
        changed."""
        raise NotImplementedError

    def merge(self, a, b):
        """Combines the accumulators of two windows that merge (sessions)."""
        raise NotImplementedError

    def finish(self, accumulator):
        """The window's result: a JSON value."""
        return accumulator


def _decode(aggregate, accumulator):
    """An accumulator from its stored JSON (empty: a new one)."""
    return loads(accumulator) if accumulator else aggregate.create()


def _reason(error):
    if isinstance(error, RecordError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def export_aggregate(aggregate_class):
    """The ``Aggregator`` class componentize-py exports, running
    ``aggregate_class``.

    Also binds ``TextAggregator`` and ``TextProjectedAggregator`` in the
    calling module (the ``text-projected-aggregate`` world's other exports,
    which ``sluice plugin build`` builds Python aggregates for): the same
    functions with their results returned as strings, which componentize-py
    frees after the call, and every group of a batch added in one call with
    the fields named in ``json_fields`` found by the host."""
    from wit_world.exports.aggregator import Added

    class Aggregator(exports.Aggregator):
        aggregate = None

        def init(self, config):
            try:
                Aggregator.aggregate = aggregate_class(Config(config))
            except Exception as error:  # noqa: BLE001 - reported to the host
                raise Err(str(error) or type(error).__name__) from None

        @staticmethod
        def _aggregate():
            if Aggregator.aggregate is None:
                raise RuntimeError("aggregator called before init")
            return Aggregator.aggregate

        def create(self):
            return dumps(self._aggregate().create())

        def add(self, accumulator, records):
            new, rejected = _add_records(
                self._aggregate(), accumulator, [Record(r) for r in records])
            return Added(accumulator=new, rejected=rejected)

        def merge(self, a, b):
            aggregate = self._aggregate()
            return dumps(aggregate.merge(_decode(aggregate, a), _decode(aggregate, b)))

        def finish(self, accumulator):
            aggregate = self._aggregate()
            return dumps(aggregate.finish(_decode(aggregate, accumulator)))

    class TextAggregator:
        # Each result is the byte function's bytes, one character per byte.
        _bytes = Aggregator()

        def create_text(self):
            return self._bytes.create().decode("latin-1")

        def add_text(self, accumulator, records):
            from wit_world.exports.text_aggregator import AddedText

            added = self._bytes.add(accumulator, records)
            return AddedText(accumulator=added.accumulator.decode("latin-1"),
                             rejected=added.rejected)

        def merge_text(self, a, b):
            return self._bytes.merge(a, b).decode("latin-1")

        def finish_text(self, accumulator):
            return self._bytes.finish(accumulator).decode("latin-1")

    class TextProjectedAggregator:
        # Every group of a batch in one call, the fields the aggregate
        # reads (`json_fields`) found by the host: the projected aggregate
        # format in, the `add-packed` output (one `GroupAdded` per group)
        # out, as ISO-8859-1 text.
        def projected_fields(self):
            return _json_fields(Aggregator._aggregate())

        def add_projected_text(self, data):
            aggregate = Aggregator._aggregate()
            groups, at = _aggregate_groups(data)
            if groups is None:
                return ""  # the host adds group by group instead
            names = tuple(_json_fields(aggregate))
            projected = data[at:]
            version, count, fields, _ = _PROJECTED_HEADER.unpack_from(projected, 0)
            if (version != _PROJECTED_FORMAT_VERSION or fields != len(names)
                    or count != sum(records for _, records in groups)):
                return ""
            batch = _ProjectedBatch(projected, count, fields, names)
            stride, first = batch.stride, 0
            out = bytearray()
            for accumulator, records in groups:
                group = [_ProjectedRecord(batch, (first + i) * stride) for i in range(records)]
                first += records
                new, rejected = _add_records(aggregate, accumulator, group)
                _packed_bytes(out, new)  # GroupAdded: the accumulator,
                _varint(out, len(rejected))  # then the records not added
                for index, reason in rejected:
                    _varint(out, index)
                    _packed_str(out, reason)
            return out.decode("latin-1")

    sys._getframe(1).f_globals.setdefault("TextAggregator", TextAggregator)
    sys._getframe(1).f_globals.setdefault("TextProjectedAggregator", TextProjectedAggregator)
    return Aggregator


def _add_records(aggregate, accumulator, records):
    """Adds ``records`` (record views) to the stored ``accumulator``: the
    new accumulator as JSON bytes and the records not added, as (index,
    reason)."""

    def start():
        return _decode(aggregate, accumulator)

    current = start()
    accepted = []
    rejected = []
    for index, record in enumerate(records):
        try:
            current = aggregate.add(current, record)
            accepted.append(record)
        except Exception as error:  # noqa: BLE001 - the record is dead-lettered
            rejected.append((index, _reason(error)))
            # `add` may have changed the accumulator before failing:
            # rebuild it from the records that counted.
            current = start()
            for good in accepted:
                current = aggregate.add(current, good)
    return dumps(current), rejected


# The projected aggregate format (`sluice-wire`): postcard varints — the
# format version and the number of groups, then per group its accumulator
# (length and bytes) and record count — then one projected batch holding
# every group's records, group after group.
_AGGREGATE_PROJECTED_FORMAT_VERSION = 1


def _read_varint(data, at):
    number = shift = 0
    while True:
        byte = data[at]
        at += 1
        number |= (byte & 0x7F) << shift
        if byte < 0x80:
            return number, at
        shift += 7


def _aggregate_groups(data):
    """The group table of an ``add-projected`` input, as (accumulator,
    record count) pairs, and where the projected batch starts; ``None``
    for a format version this SDK does not read."""
    version, at = _read_varint(data, 0)
    if version != _AGGREGATE_PROJECTED_FORMAT_VERSION:
        return None, at
    count, at = _read_varint(data, at)
    groups = []
    for _ in range(count):
        length, at = _read_varint(data, at)
        accumulator = data[at:at + length]
        records, at = _read_varint(data, at + length)
        groups.append((accumulator, records))
    return groups, at


def _json_fields(plugin):
    """The plugin's ``json_fields``, checked: a sequence of names."""
    fields = getattr(plugin, "json_fields", ())
    if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
        raise TypeError("json_fields must be a sequence of field names (strings)")
    return list(fields)
