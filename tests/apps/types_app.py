"""A worker whose state, input and tool result hold every value type bide keeps.

usage: types_app.py HOME OUT start|resume RUN_ID
``make`` puts the values in state (and gets them back from a tool); ``check``
writes what it reads, type by type, to OUT. A crash between the two must not
change what ``check`` sees.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
import uuid
from decimal import Decimal
from zoneinfo import ZoneInfo

import bide

PARIS = ZoneInfo("Europe/Paris")
KEPT = {
    "none": None, "bool": True, "int": -(2**63), "big": 2**64 - 1, "float": 1.5,
    "nan": float("nan"), "inf": float("-inf"), "negzero": -0.0, "str": "é\x00",
    "bytes": b"\x00\xff",
    "list": [1, "a", [2]], "dict": {"a": {"b": 1}, 1: "int key", (1, "t"): "tuple key"},
    "tuple": (1, (2, 3), [4]), "set": {"a", "b", (1, 2)}, "frozenset": frozenset({1, 2}),
    "empty": [(), set(), frozenset(), {}],
    "naive": dt.datetime(2024, 5, 6, 7, 8, 9, 123456),
    "aware": dt.datetime(2024, 5, 6, 7, 8, 9,
                         tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    "named_tz": dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-3), "BRT")),
    "utc": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    "zone": dt.datetime(2021, 10, 31, 2, 30, fold=1, tzinfo=PARIS),
    "date": dt.date(1999, 12, 31), "time": dt.time(23, 59, 1, 5, tzinfo=dt.timezone.utc),
    "naive_time": dt.time(1, 2), "timedelta": dt.timedelta(days=-1, seconds=5, microseconds=7),
    "decimal": Decimal("-0.00"), "decimal_nan": Decimal("NaN"), "decimal_exp": Decimal("1E+3"),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "nested": {"sets": [{frozenset({(1, Decimal("2"))})}], "when": (dt.date(2020, 1, 1),)},
}


def describe(v):
    """Type and value, recursively, in a form that compares exactly (nan included)."""
    t = type(v).__name__
    if isinstance(v, dict):
        return [t, sorted([describe(k), describe(x)] for k, x in v.items())]
    if isinstance(v, (set, frozenset)):
        return [t, sorted(describe(x) for x in v)]
    if isinstance(v, (list, tuple)):
        return [t, [describe(x) for x in v]]
    return [t, repr(v)]


@bide.tool
def echo(values: dict) -> dict:
    return values


flow = bide.Flow("types")


@flow.node(start=True)
def make(state, ctx):
    from_tool = ctx.tool(echo, KEPT)
    if os.environ.get("SLEEP_AFTER_TOOL"):  # the outcome commits alone, then the checkpoint
        time.sleep(float(os.environ["SLEEP_AFTER_TOOL"]))
    return {"v": KEPT, "from_tool": from_tool, "input_seen": state["given"]}


@flow.node(after=["make"])
def check(state, ctx):
    with open(sys.argv[2], "w") as f:
        json.dump(describe({k: state[k] for k in ("v", "from_tool", "given", "input_seen")}), f)
    return None


def main(home: str, action: str, run_id: str) -> None:
    with bide.open(home) as engine:
        engine.register(flow)
        if action == "start":
            run = engine.start("types", {"given": KEPT}, run_id=run_id)
        else:
            run = engine.resume(run_id)
        print(run.status)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[3], sys.argv[4])
