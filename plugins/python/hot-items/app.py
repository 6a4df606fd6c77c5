"""hot-items (Python): Nexmark q5, second stage, as a window aggregate: per
window end, the auctions with the most bids. Input: the first stage's
window results (``{"key": <auction>, "window_end": .., "result": <count>,
...}``); output: ``{"window_end": .., "bids": <max count>, "auctions":
[<auction ids with that count, ascending>]}``. Same results as
``plugins/hot-items`` (Rust)."""

import bisect

import sluice


_I64 = (-(2**63), 2**63 - 1)
_U64 = (0, 2**64 - 1)


def _integer(counted, name, bounds):
    value = counted.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise sluice.RecordError(f"field `{name}` must be an integer")
    if not bounds[0] <= value <= bounds[1]:
        raise sluice.RecordError(f"field `{name}` is out of range")
    return value


def _offer(leaders, bids, auctions):
    if bids > leaders["bids"]:
        leaders["bids"] = bids
        leaders["auctions"] = []
    if bids == leaders["bids"]:
        for auction in auctions:
            at = bisect.bisect_left(leaders["auctions"], auction)
            if at == len(leaders["auctions"]) or leaders["auctions"][at] != auction:
                leaders["auctions"].insert(at, auction)


class HotItems(sluice.Aggregate):
    def create(self):
        return {"window_end": 0, "bids": 0, "auctions": []}

    def add(self, leaders, record):
        counted = record.json()
        if not isinstance(counted, dict):
            raise sluice.RecordError("a window result must be a JSON object")
        key = counted.get("key")
        if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
            auction = key
        else:
            # A key of digits in a string is read too.
            digits = key[1:] if isinstance(key, str) and key.startswith("+") else key
            if not isinstance(key, str) or not (digits.isascii() and digits.isdigit()):
                raise sluice.RecordError(f"auction key {key!r} is not a number")
            auction = int(digits)
        if auction > _U64[1]:
            raise sluice.RecordError(f"auction key {key!r} is out of range")
        window_end = _integer(counted, "window_end", _I64)
        bids = _integer(counted, "result", _U64)
        leaders["window_end"] = max(leaders["window_end"], window_end)
        _offer(leaders, bids, [auction])
        return leaders

    def merge(self, a, b):
        a["window_end"] = max(a["window_end"], b["window_end"])
        _offer(a, b["bids"], b["auctions"])
        return a

    def finish(self, leaders):
        return {
            "window_end": leaders["window_end"],
            "bids": leaders["bids"],
            "auctions": leaders["auctions"],
        }


Aggregator = sluice.export_aggregate(HotItems)
