"""JSON for Sluice's Python SDK: ``loads`` and ``dumps`` as the Rust SDK
reads and writes JSON (strict RFC 8259, numbers keep their text, output
byte-identical to serde_json's), and what the SDK builds on them.

Imported by ``sluice`` (which re-exports the public names: plugins use
``sluice.loads``, ``sluice.JsonInt``, ...); the names with a leading
underscore are the SDK's own, not an API. It imports nothing from the
component, so it runs (and is tested, ``test_sluice_json.py``) in a native
Python as well.

Speed: a plugin's Python runs interpreted inside a WebAssembly component,
where each Python-level call costs about a microsecond. The parse and the
encode are therefore left to the C scanner and encoder of the standard
``json`` module wherever they give the same answer as the documented
rules, and ``_loads_all`` parses a whole batch's values in a few calls.
"""

import json
import json.decoder
import re
from json.encoder import encode_basestring as _encode_string


# ---------------------------------------------------------------- errors


class RecordError(Exception):
    """Raised by ``process``: the record goes to the dead-letter output with
    this message as the reason."""


# ---------------------------------------------------------------- JSON


class JsonInt(int):
    """An integer parsed from JSON (within the 64-bit range); ``text`` is its
    exact source text (a JSON integer has one way to be written, so it is
    also ``str(number)``)."""

    # No instance dict and no Python-level constructor: the parser makes
    # one per integer it reads.
    __slots__ = ()

    @property
    def text(self):
        """The number as written in JSON."""
        return int.__repr__(self)


class JsonFloat(float):
    """A non-integer number parsed from JSON; ``text`` is its source text
    with the exponent written as serde_json writes it (``1E3`` becomes
    ``1e+3``)."""

    def __new__(cls, text):
        global _json_floats_made
        _json_floats_made = True
        number = float.__new__(cls, text)
        number.text = _normalize_exponent(text)
        return number


# Whether a JsonFloat was ever made: until then no value can hold one, and
# the C encoder writes every value as `_write` does (see `_json_text`).
_json_floats_made = False


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
    # others (and "-0") are floating-point numbers. Fewer than 19 digits
    # always fit.
    if len(text) < 19 and text != "-0":
        return JsonInt(text)
    if text == "-0" or not _I64_MIN <= int(text) <= _U64_MAX:
        return JsonFloat(text)
    return JsonInt(text)


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


# Built once: `json.loads` with hooks builds a decoder on every call.
_DECODER = json.JSONDecoder(
    parse_int=_parse_integer,
    parse_float=JsonFloat,
    parse_constant=_reject_constant,
)


_SCAN = _DECODER.scan_once

# The same parse with integers made by the C scanner (no Python call per
# integer): equal to `_DECODER`'s for text with no integer `-0` and no run
# of 19 digits, which `_loads_all` checks for a whole batch at once.
_FAST_SCAN = json.JSONDecoder(
    parse_int=JsonInt,
    parse_float=JsonFloat,
    parse_constant=_reject_constant,
).scan_once
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_NINETEEN_DIGITS = b"0" * 19
_INTEGER_MINUS_ZERO = re.compile(rb"-0(?![0-9.eE])")


# An entry of `_loads_all`'s answer: this value is read on its own by
# `loads` (it did not parse alone, or it was already handed out).
_UNREAD = object()


def _loads_all(values):
    """``loads`` of each of ``values`` (a batch's record values, bytes) in
    a few calls for the batch: one UTF-8 decode, one scan for what the fast
    integer parse would read differently, then the C scanner on each value.
    An entry is ``_UNREAD`` where ``loads`` alone must say what the value
    is (whitespace around it, malformed, a lone surrogate escape): its
    answer, value or error, is the same either way."""
    count = len(values)
    joined = b"\x00".join(values)
    # A NUL byte is never in JSON text: the split below gives back exactly
    # the values, or some value is malformed and each is read alone.
    if joined.count(b"\x00") != count - 1:
        return [_UNREAD] * count
    try:
        text = joined.decode("utf-8")
    except UnicodeDecodeError:
        return [_UNREAD] * count
    scan = _FAST_SCAN
    if (_NINETEEN_DIGITS in joined.translate(_DIGITS_TO_ZERO)
            or (b"-0" in joined and _INTEGER_MINUS_ZERO.search(joined))):
        scan = _SCAN
    surrogates = "\\u" in text and _LONE_SURROGATE_HINT.search(text) is not None
    parsed = []
    append = parsed.append
    for piece in (text.split("\x00") if count > 1 else (text,)):
        try:
            value, end = scan(piece, 0)
        except (StopIteration, ValueError, RecursionError):
            append(_UNREAD)
            continue
        if end != len(piece) or (surrogates and _LONE_SURROGATE_HINT.search(piece)):
            append(_UNREAD)
        else:
            append(value)
    return parsed


def _decode_json(text):
    """``_DECODER.decode(text)``, calling the C scanner straight for a value
    with no surrounding whitespace (the common case); anything else, and
    every error, goes the documented way for its message."""
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError):
        return _DECODER.decode(text)
    if end != len(text):
        return _DECODER.decode(text)
    return value


def loads(data):
    """Parses JSON ``data`` (bytes or str) strictly; numbers keep their text.

    Raises ``RecordError("invalid JSON value: ...")`` on anything that is not
    one well-formed JSON value (including NaN/Infinity, invalid UTF-8 and
    unpaired surrogate escapes), as the Rust SDK does.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
        value = _decode_json(text)
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
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        parts.append(json.dumps(value, allow_nan=False))
    elif isinstance(value, dict):
        parts.append("{")
        first = True
        for key, item in value.items():
            if not first:
                parts.append(",")
            first = False
            parts.append(_encode_key(key))
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


def _encode_key(key):
    """An object key as Python's ``json`` (and serde_json, for booleans)
    writes it; a key of another type as its ``str``."""
    if type(key) is str:
        return _encode_string(key)
    if key is True or key is False or key is None:
        return {True: '"true"', False: '"false"', None: '"null"'}[key]
    if isinstance(key, int):
        return f'"{int.__repr__(key)}"'
    if isinstance(key, float):
        return f'"{float.__repr__(key)}"'
    return _encode_string(str(key))


def _not_encodable(value):
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


# The C encoder, for values it writes exactly as `_write` does. Made once
# (`json.dumps` makes one per call), with the arguments `JSONEncoder`
# passes it; plain `JSONEncoder.encode` where the C module is missing.
try:
    from _json import make_encoder as _make_encoder

    _C_ITERENCODE = _make_encoder(
        None, _not_encodable, _encode_string, None, ":", ",", False, False, False
    )

    def _C_ENCODE(value):
        return "".join(_C_ITERENCODE(value, 0))
except (ImportError, TypeError):
    _C_ENCODE = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
    ).encode


def _c_encodable(value):
    """Whether the C encoder writes ``value`` byte for byte as ``_write``
    does: no floats (a JsonFloat's source text would be lost) and only
    string keys. Walked only once a JsonFloat exists (``_json_text``)."""
    kind = type(value)
    if kind is str or kind is JsonInt or kind is int or kind is bool or value is None:
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            kind = type(item)
            # Scalars inline: a flat record costs no call per field.
            if not (kind is str or kind is JsonInt or kind is int or kind is bool
                    or item is None or _c_encodable(item)):
                return False
        return True
    if kind is list or kind is tuple:
        for item in value:
            if not _c_encodable(item):
                return False
        return True
    return False


def dumps(value):
    """Compact JSON as UTF-8 bytes, byte-identical to the Rust SDK's
    ``serde_json`` output for the same value (parsed numbers keep their
    text)."""
    return _json_text(value).encode("utf-8")


def _json_text(value):
    """``value`` as compact JSON text, as ``_write`` writes it. The C
    encoder writes it where it writes what ``_write`` does: every value
    but a JsonFloat (it would write the float, not its source text) and a
    key that is not a string, int, float, bool or None (it refuses it)."""
    if not _json_floats_made:
        try:
            return _C_ENCODE(value)
        except (TypeError, ValueError):
            pass  # `_write` writes it or gives the error
    elif _c_encodable(value):
        return _C_ENCODE(value)
    parts = []
    _write(value, parts)
    return "".join(parts)
