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

JSON: ``record.json()`` parses like the Rust SDK (strict RFC 8259) and keeps
every number's text, so ``sluice.dumps`` writes numbers back as they came
(``1.50`` stays ``1.50``; only an exponent is normalised, ``1E3`` to ``1e+3``,
as serde_json does) and output is byte-identical to the Rust SDK's
(serde_json with ``preserve_order`` and ``arbitrary_precision``): compact,
keys in input order, the same string escapes.
"""

import json
import json.decoder
import re
from json.encoder import encode_basestring as _encode_string

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

# ---------------------------------------------------------------- errors


class RecordError(Exception):
    """Raised by ``process``: the record goes to the dead-letter output with
    this message as the reason."""


# ---------------------------------------------------------------- JSON


class JsonInt(int):
    """An integer parsed from JSON (within the 64-bit range); ``text`` is its
    exact source text."""

    def __new__(cls, text):
        number = int.__new__(cls, text)
        number.text = text
        return number


class JsonFloat(float):
    """A non-integer number parsed from JSON; ``text`` is its source text
    with the exponent written as serde_json writes it (``1E3`` becomes
    ``1e+3``)."""

    def __new__(cls, text):
        number = float.__new__(cls, text)
        number.text = _normalize_exponent(text)
        return number


def _normalize_exponent(text):
    for marker in ("e", "E"):
        mantissa, found, exponent = text.partition(marker)
        if found:
            sign = "" if exponent[:1] in ("+", "-") else "+"
            return f"{mantissa}e{sign}{exponent}"
    return text


_I64_MIN = -(1 << 63)
_U64_MAX = (1 << 64) - 1


def _parse_integer(text):
    # Classified as serde_json does: integers are those that fit i64 or u64;
    # others (and "-0") are floating-point numbers.
    number = JsonInt(text)
    if text == "-0" or not _I64_MIN <= number <= _U64_MAX:
        return JsonFloat(text)
    return number


def _reject_constant(name):
    raise ValueError(f"{name} is not valid JSON")


_LONE_SURROGATE_HINT = re.compile(r"\\u[dD][89abAB]|\\u[dD][c-fC-F]")


def _has_lone_surrogate(value):
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, list):
        return any(_has_lone_surrogate(item) for item in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    return False


def loads(data):
    """Parses JSON ``data`` (bytes or str) strictly; numbers keep their text.

    Raises ``RecordError("invalid JSON value: ...")`` on anything that is not
    one well-formed JSON value (including NaN/Infinity, invalid UTF-8 and
    unpaired surrogate escapes), as the Rust SDK does.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
        value = json.loads(
            text,
            parse_int=_parse_integer,
            parse_float=JsonFloat,
            parse_constant=_reject_constant,
        )
    except (ValueError, UnicodeDecodeError) as error:
        raise RecordError(f"invalid JSON value: {error}") from None
    if _LONE_SURROGATE_HINT.search(text) and _has_lone_surrogate(value):
        raise RecordError("invalid JSON value: unpaired surrogate in a string escape")
    return value


def _write(value, parts):
    if isinstance(value, str):
        parts.append(_encode_string(value))
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, (JsonInt, JsonFloat)):
        parts.append(value.text)
    elif isinstance(value, int):
        parts.append(str(value))
    elif isinstance(value, float):
        parts.append(json.dumps(value, allow_nan=False))
    elif isinstance(value, dict):
        parts.append("{")
        first = True
        for key, item in value.items():
            if not first:
                parts.append(",")
            first = False
            parts.append(_encode_string(str(key)))
            parts.append(":")
            _write(item, parts)
        parts.append("}")
    elif isinstance(value, (list, tuple)):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            _write(item, parts)
        parts.append("]")
    else:
        raise RecordError(f"cannot encode {type(value).__name__} as JSON")


def dumps(value):
    """Compact JSON as UTF-8 bytes, byte-identical to the Rust SDK's
    ``serde_json`` output for the same value (parsed numbers keep their
    text)."""
    parts = []
    _write(value, parts)
    return "".join(parts).encode("utf-8")


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


class Emitter:
    """Collects what ``process`` emits for one input record."""

    __slots__ = ("_record", "_emits")

    def __init__(self, record):
        self._record = record
        self._emits = []

    def _emit(self, route, value, key, headers, event_time):
        output = types.OutputRecord(
            key=self._record.key if key is _SAME else key,
            value=bytes(value),
            headers=self._record.headers if headers is _SAME else
            [types.Header(k, bytes(v)) for k, v in headers],
            event_time=event_time,
        )
        self._emits.append(types.Emit(route, output))

    def forward(self):
        """Emits the input record unchanged to the main output."""
        self._emit(types.Route_Main(), self._record.value, _SAME, _SAME, None)

    def emit(self, value, key=None, headers=None, event_time=None):
        """Emits ``value`` (bytes) to the main output. ``key`` and
        ``headers`` default to the input record's."""
        self._emit(types.Route_Main(), value, _SAME if key is None else key,
                   _SAME if headers is None else headers, event_time)

    def emit_json(self, value, key=None):
        """Emits ``value`` encoded with ``sluice.dumps``."""
        self.emit(dumps(value), key=key)

    def side(self, name, value):
        """Emits ``value`` (bytes) to the side output ``name``."""
        self._emit(types.Route_Side(name), value, _SAME, _SAME, None)

    def dead_letter(self, reason):
        """Sends the input record to the dead-letter output with ``reason``."""
        self._emit(types.Route_DeadLetter(reason), self._record.value, _SAME, _SAME, None)


_SAME = object()


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
    and ``process(record, out)`` works)."""

    def __init__(self, config):
        pass

    def process(self, record, out):
        raise NotImplementedError


def export(plugin_class):
    """The ``Transformer`` class componentize-py exports, running
    ``plugin_class``."""

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
            outcomes = []
            for input_record in batch:
                record = Record(input_record)
                out = Emitter(input_record)
                try:
                    plugin.process(record, out)
                except RecordError as error:
                    outcomes.append(Err(str(error)))
                    continue
                except Exception as error:  # noqa: BLE001 - the record is dead-lettered
                    outcomes.append(Err(f"{type(error).__name__}: {error}"))
                    continue
                outcomes.append(Ok(out._emits))
            return outcomes

    return Transformer


class Aggregate:
    """Base class of a window aggregate. The accumulator is any value
    ``sluice.dumps`` can encode (it is stored as JSON between calls)."""

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
    ``aggregate_class``."""
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
            aggregate = self._aggregate()

            def start():
                return _decode(aggregate, accumulator)

            current = start()
            accepted = []
            rejected = []
            for index, input_record in enumerate(records):
                try:
                    current = aggregate.add(current, Record(input_record))
                    accepted.append(input_record)
                except Exception as error:  # noqa: BLE001 - the record is dead-lettered
                    rejected.append((index, _reason(error)))
                    # `add` may have changed the accumulator before failing:
                    # rebuild it from the records that counted.
                    current = start()
                    for good in accepted:
                        current = aggregate.add(current, Record(good))
            return Added(accumulator=dumps(current), rejected=rejected)

        def merge(self, a, b):
            aggregate = self._aggregate()
            return dumps(aggregate.merge(_decode(aggregate, a), _decode(aggregate, b)))

        def finish(self, accumulator):
            aggregate = self._aggregate()
            return dumps(aggregate.finish(_decode(aggregate, accumulator)))

    return Aggregator
