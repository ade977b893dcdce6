"""What tracing costs: a chain of tool-calling nodes, untraced and traced
(OpenTelemetry SDK, in-memory exporter), in the same process; the best of 7 each.

Rerun: ``python -m bide.bench.tracing_cost`` (needs ``bide[otel]``). Untraced is the
cost of the hooks when off; compare it with a checkout before tracing to see it is noise.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from .. import Flow, tool
from .. import open as open_home

STEPS = 150


@tool
def echo(i: int) -> int:
    return i


def chain() -> Flow:
    flow = Flow("chain")
    for i in range(STEPS):
        def node(state: Any, ctx: Any, i: int = i) -> dict[str, int]:
            return {"n": ctx.tool(echo, i)}
        flow.node(node, name=f"n{i}", start=i == 0, after=() if i == 0 else [f"n{i - 1}"])
    return flow


def per_step(tracer: Any = None, repeats: int = 7) -> float:
    """Seconds per superstep (one node, one tool call), the best of ``repeats`` runs."""
    flow, best = chain(), float("inf")
    for _ in range(repeats):
        with open_home(tempfile.mkdtemp(), durability="fast", tracer=tracer) as engine:
            engine.register(flow)
            t0 = time.perf_counter()
            engine.start("chain")
            best = min(best, (time.perf_counter() - t0) / STEPS)
    return best


def main() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    off = per_step()
    on = per_step(provider.get_tracer("bide-bench"))
    print(f"untraced {off * 1e3:.3f} ms/step, traced {on * 1e3:.3f} ms/step "
          f"({on / off:.2f}x: 3 spans a step, run span apart)")


if __name__ == "__main__":
    main()
