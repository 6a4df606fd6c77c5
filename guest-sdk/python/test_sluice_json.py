"""Tests of the Python SDK's JSON (``sluice_json.py``) in a native Python.

The fast routes must answer exactly as the documented ones: ``_loads_all``
(a batch's values parsed in a few calls) as ``loads`` on each value, and
the C encoder as ``_write``, the reference writer. Run by the Rust test
``plugin_round_trip::python_sdk_json_reads_and_writes_as_its_reference_does``;
by hand: ``python3 guest-sdk/python/test_sluice_json.py`` (``SLUICE_CASES``
sets the number of generated cases, 2,000 by default).
"""

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sluice_json  # noqa: E402
from sluice_json import JsonFloat, JsonInt, RecordError  # noqa: E402

CASES = int(os.environ.get("SLUICE_CASES", "2000"))
CONFORMANCE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "..", "..", "tests", "data", "conformance")


def typed(value):
    """``value`` with every number's type and text spelled out, so that
    equal means the same value of the same types."""
    if isinstance(value, dict):
        return ("object", [(key, typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("array", [typed(item) for item in value])
    if isinstance(value, JsonFloat):
        return ("float", value.text, float(value))
    return (type(value).__name__, value)


def loads_answer(data):
    """What ``loads`` says of ``data``: its typed value or its error."""
    try:
        return typed(sluice_json.loads(data))
    except RecordError as error:
        return ("error", str(error))
    except RecursionError:
        return ("recursion",)


def random_string(rng):
    alphabet = ["a", "Z", " ", "é", "😀", "\u2028", "\\", '"', "\n", "\t", "\x01", "\x7f", "/"]
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(8)))


def random_number_text(rng):
    kind = rng.randrange(8)
    if kind == 0:
        return "-0"
    if kind == 1:
        return str(rng.choice([1, -1]) * rng.randrange(10 ** 18, 10 ** 21))
    if kind == 2:
        return rng.choice(["1.5", "-0.0", "1E3", "2e-7", "0.1e+2", "-0e0"])
    if kind == 3:
        return rng.choice(["18446744073709551615", "-9223372036854775808",
                           "18446744073709551616", "-9223372036854775809"])
    return str(rng.randrange(-10 ** 6, 10 ** 13))


def random_json_text(rng, depth=0):
    """JSON text, sometimes with whitespace, escapes and numbers that the
    fast integer parse would read differently."""
    kind = rng.randrange(9 if depth < 3 else 5)
    if kind == 0:
        return random_number_text(rng)
    if kind == 1:
        return sluice_json._encode_string(random_string(rng))
    if kind == 2:
        return rng.choice(['"\\u00e9\\/"', '"\\ud83d\\ude00"', '"\\ud800 x"', '"plain"'])
    if kind == 3:
        return rng.choice(["true", "false", "null"])
    if kind == 4:
        return str(rng.randrange(1000))
    space = rng.choice(["", "", "", " ", "\n"])
    if kind in (5, 6):
        members = [f"{sluice_json._encode_string(random_string(rng))}{space}:{space}"
                   f"{random_json_text(rng, depth + 1)}" for _ in range(rng.randrange(5))]
        return "{" + ",".join(members) + "}"
    items = [random_json_text(rng, depth + 1) for _ in range(rng.randrange(5))]
    return "[" + f",{space}".join(items) + "]"


def mutated(rng, data):
    """``data`` with a byte changed, inserted or removed (or as it is)."""
    if not data or rng.randrange(3) == 0:
        return data
    at = rng.randrange(len(data))
    byte = bytes([rng.choice(b'{}[]",:\\0-9 \x00\xff\xc3eE.')])
    choice = rng.randrange(3)
    if choice == 0:
        return data[:at] + byte + data[at + 1:]
    if choice == 1:
        return data[:at] + byte + data[at:]
    return data[:at] + data[at + 1:]


class LoadsAll(unittest.TestCase):
    def check_batch(self, values):
        parsed = sluice_json._loads_all(values)
        self.assertEqual(len(parsed), len(values))
        for value, entry in zip(values, parsed):
            if entry is sluice_json._UNREAD:
                continue  # `loads` reads it alone: the same answer by definition
            self.assertEqual(typed(entry), loads_answer(value), value)
        return parsed

    def test_a_batch_of_well_formed_values_is_parsed_at_once(self):
        values = [b'{"id":%d,"key":%d,"text":"caf\xc3\xa9 %d","ok":true,"n":null,"l":[1,-2]}'
                  % (i, i % 7, i) for i in range(300)]
        parsed = self.check_batch(values)
        self.assertFalse(any(entry is sluice_json._UNREAD for entry in parsed))
        self.assertIs(type(parsed[3]["id"]), JsonInt)

    def test_values_that_read_differently_in_a_fast_parse_are_read_as_loads_reads_them(self):
        for special in [b"-0", b"[1,-0]", b'{"a":-0 }', b"12345678901234567890",
                        b"-9223372036854775809", b"18446744073709551615", b"1E3",
                        b'{"d":"2026-01-05","n":-0}']:
            parsed = self.check_batch([b'{"a":1}', special, b"[2]"])
            self.assertIsNot(parsed[0], sluice_json._UNREAD)

    def test_the_conformance_files_in_batches_of_every_size(self):
        lines = []
        for name in sorted(os.listdir(CONFORMANCE)):
            with open(os.path.join(CONFORMANCE, name), "rb") as file:
                lines.extend(file.read().split(b"\n"))
        for size in range(1, 12):
            for start in range(0, len(lines), size):
                self.check_batch(lines[start:start + size])

    def test_generated_and_mutated_values_in_random_batches(self):
        rng = random.Random(42)
        for _ in range(CASES // 10):
            values = [mutated(rng, random_json_text(rng).encode("utf-8"))
                      for _ in range(rng.randrange(1, 20))]
            self.check_batch(values)

    def test_nul_bytes_and_invalid_utf8_leave_each_value_to_loads(self):
        for values in ([b'{"a":"x\x00y"}', b"1"], [b"1\x00", b"2"], [b'"\xff"', b"3"]):
            parsed = self.check_batch(values)
            self.assertTrue(all(entry is sluice_json._UNREAD for entry in parsed))

    def test_deep_nesting_is_left_to_loads(self):
        self.check_batch([b"[" * 100000 + b"]" * 100000, b"1"])


def random_value(rng, depth=0):
    """A Python value a plugin might emit (no JsonFloat: see the test of
    those)."""
    kind = rng.randrange(12 if depth < 3 else 8)
    if kind == 0:
        return random_string(rng) + rng.choice(["", "\ud800"])
    if kind == 1:
        return rng.choice([JsonInt("7"), JsonInt("-12"), 10 ** 30, -5, 0])
    if kind == 2:
        return rng.choice([True, False, None])
    if kind == 3:
        return rng.choice([1.5, -0.0, 1e300, 0.1])
    if kind == 4:
        return rng.choice([float("nan"), float("inf")])
    if kind == 5:
        return rng.choice([b"bytes", {1, 2}, object()])
    if kind in (6, 7):
        return random_string(rng)
    if kind in (8, 9):
        keys = [random_string(rng), JsonInt("3"), 4, True, False, None, 2.5, (1, 2)]
        return {rng.choice(keys): random_value(rng, depth + 1) for _ in range(rng.randrange(5))}
    return [random_value(rng, depth + 1) for _ in range(rng.randrange(5))] + rng.choice([[], [()]])


def written(value):
    """What ``_write``, the reference writer, makes of ``value``."""
    parts = []
    try:
        sluice_json._write(value, parts)
    except (RecordError, ValueError, TypeError) as error:
        return ("error", type(error).__name__, str(error))
    return "".join(parts)


def json_text(value):
    try:
        return sluice_json._json_text(value)
    except (RecordError, ValueError, TypeError) as error:
        return ("error", type(error).__name__, str(error))


class Dumps(unittest.TestCase):
    def setUp(self):
        sluice_json._json_floats_made = False

    def test_the_c_encoder_writes_what_the_reference_writes(self):
        rng = random.Random(7)
        for _ in range(CASES):
            value = random_value(rng)
            self.assertEqual(json_text(value), written(value), repr(value))
        self.assertFalse(sluice_json._json_floats_made)

    def test_keys_are_spelled_as_json_and_serde_json_spell_them(self):
        self.assertEqual(sluice_json.dumps({True: 1, None: 2, 3: 4, 2.5: 5, "s": 6}),
                         b'{"true":1,"null":2,"3":4,"2.5":5,"s":6}')

    def test_a_parsed_float_keeps_its_text_after_the_first_one_is_made(self):
        value = sluice_json.loads(b'{"a":1.50,"b":[2E3],"c":"x"}')
        self.assertTrue(sluice_json._json_floats_made)
        self.assertEqual(sluice_json.dumps(value), b'{"a":1.50,"b":[2e+3],"c":"x"}')
        self.assertEqual(sluice_json.dumps([JsonFloat("1E-7"), 0.5]), b"[1e-7,0.5]")


if __name__ == "__main__":
    unittest.main()
