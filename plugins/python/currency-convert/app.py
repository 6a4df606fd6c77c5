"""currency-convert (Python): Nexmark q1, bid prices from dollars to euros.

``SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid``
with integer cents (``price * rate_per_mille // 1000``). Events other than
bids are dropped. Same output, byte for byte, as ``plugins/currency-convert``
(Rust) with JSON events. Config: ``rate_per_mille`` (default 908).
"""

import sluice

U64_MAX = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


ZERO = sluice.JsonInt("0")


def _field(event, name, default, check, expected):
    value = event.get(name, default)
    if not check(value):
        raise sluice.RecordError(f"invalid JSON value: field `{name}` must be {expected}")
    return value


def _is_u64(value):
    return isinstance(value, sluice.JsonInt) and 0 <= value <= U64_MAX


def _is_i64(value):
    return isinstance(value, sluice.JsonInt) and I64_MIN <= value <= I64_MAX


def _is_str(value):
    return isinstance(value, str)


class CurrencyConvert(sluice.Transform):
    def __init__(self, config):
        self.rate_per_mille = config.get_int("rate_per_mille", 908)
        if not 0 <= self.rate_per_mille <= U64_MAX:
            raise ValueError("config key `rate_per_mille`: must be an unsigned integer")
        encoding = config.get("encoding", "json")
        if encoding != "json":
            raise ValueError(f"config key `encoding`: `{encoding}` is not supported by the Python plugin (use json)")

    def process(self, record, out):
        event = record.json()
        if not isinstance(event, dict):
            raise sluice.RecordError("invalid JSON value: an event must be a JSON object")
        event_type = _field(event, "event_type", None, _is_str, "a string")
        auction = _field(event, "auction", ZERO, _is_u64, "an unsigned 64-bit integer")
        bidder = _field(event, "bidder", ZERO, _is_u64, "an unsigned 64-bit integer")
        price = _field(event, "price", ZERO, _is_u64, "an unsigned 64-bit integer")
        date_time = _field(event, "date_time", ZERO, _is_i64, "a signed 64-bit integer")
        extra = _field(event, "extra", "", _is_str, "a string")
        if event_type != "bid":
            return
        converted = price * self.rate_per_mille
        if converted > U64_MAX:
            raise sluice.RecordError("price * rate_per_mille overflows an unsigned 64-bit integer")
        out.emit_json({
            "auction": int(auction),
            "bidder": int(bidder),
            "price": converted // 1000,
            "date_time": int(date_time),
            "extra": extra,
        })


Transformer = sluice.export(CurrencyConvert)
