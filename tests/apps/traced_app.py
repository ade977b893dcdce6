"""A traced flow for tests/test_tracing.py: ``lookup`` → ``patch`` (a tool call, then an
approval) → ``report``. Run as a script, it starts run ``r-t`` in HOME with spans
exported as JSON lines to SPANS (the crash test kills it at a fault point)."""

from __future__ import annotations

import os
import sys

import bide
from bide.bench.kit.crashkit import record_effect

flow = bide.Flow("traced")


@bide.tool(idempotent=True)
def apply_patch(patch: str, idempotency_key: str = "") -> str:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if path:
        record_effect(path, f"apply {patch}")
    return f"applied {patch}"


@flow.node(start=True)
def lookup(state, ctx):
    return {"patch": "p-1"}


@flow.node(after=["lookup"])
def patch(state, ctx):
    done = ctx.tool(apply_patch, state["patch"])
    if state.get("ask") and not ctx.approve("ship it", {"patch": state["patch"]}):
        return {"result": "rejected"}
    return {"result": done}


@flow.node(after=["patch"])
def report(state, ctx):
    return {"report": f"{state['result']}."}


def main(home: str, spans: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    out = open(spans, "a")  # noqa: SIM115 - written until the process is killed
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
        out=out, formatter=lambda s: s.to_json(indent=None) + "\n")))
    with bide.open(home, tracer=provider.get_tracer("bide")) as engine:
        engine.register(flow)
        engine.start("traced", run_id="r-t")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
