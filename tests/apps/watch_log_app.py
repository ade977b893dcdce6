"""Flows for the watcher's log tests (``--app watch_log_app:flows``).

``hang``'s node never returns on its own (up to a minute): a watcher stopping must
wait for it, unless told twice.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import bide

ok = bide.Flow("ok")
ok.node(lambda state, ctx: {"done": True}, name="work", start=True)

boom = bide.Flow("boom")


@boom.node(start=True)
def explode(state, ctx):
    raise ValueError("disk on fire")


hang = bide.Flow("hang")


@hang.node(start=True)
def forever(state, ctx):
    if os.environ.get("WATCH_LOG_RUNNING"):  # the test's sign that the node runs
        Path(os.environ["WATCH_LOG_RUNNING"]).touch()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return {}


flows = [ok, boom, hang]
