"""OpenTelemetry spans for runs (the ``bide[otel]`` extra): run → superstep → node → tool.

Off unless an engine is opened with ``tracer=`` (an OpenTelemetry ``Tracer``): the
runtime then holds ``None`` where a span would be, and each hook is one ``is None``
test. Only this module imports OpenTelemetry, and only a traced engine imports it.

A run span covers one worker's turn on a run, from taking its lease to letting go.
Its trace and span ids ride in the ``LeaseAcquired`` record that takes the lease (no
extra record, no extra commit, no byte when off), so the worker that resumes the run
after a pause or a crash links its run span to the earlier one — even when the
earlier process was killed before it could export anything.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..base.optional import extra

if TYPE_CHECKING:
    from opentelemetry import trace as otel
    from opentelemetry.trace import Span
else:  # imported by the first traced run: this module imports without the extra
    otel = extra("opentelemetry.trace", "otel", "tracing runs with OpenTelemetry")

from ...formats import LeaseAcquired
from ..base.errors import Paused
from ..storage.store import Reader, Store


def ref_of(span: Span) -> str:
    """``<trace id>-<span id>`` in hex: what a lease record keeps of a run span."""
    ctx = span.get_span_context()
    return f"{ctx.trace_id:032x}-{ctx.span_id:016x}"


def context_of(ref: str) -> otel.SpanContext | None:
    """The span context a stored ``ref`` names (None if it is not one)."""
    trace_id, _, span_id = ref.partition("-")
    try:
        return otel.SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                                trace_flags=otel.TraceFlags(otel.TraceFlags.SAMPLED))
    except ValueError:
        return None


def earlier_ref(r: Reader, run_id: str) -> str:
    """The run span of the last worker that took this run's lease while traced ("" if none)."""
    leases = [seq for seq, kind in r.run_entries(run_id) if kind == LeaseAcquired.TYPE]
    for seq in reversed(leases):
        lease = r.record(seq)
        if isinstance(lease, LeaseAcquired) and lease.trace:
            return lease.trace
    return ""


class Tracing:
    """An engine's tracer, and the run spans begun for leases not yet running."""

    def __init__(self, tracer: Any) -> None:
        self.tracer: otel.Tracer = tracer
        self._begun: dict[tuple[str, int], RunSpan] = {}
        self._lock = threading.Lock()

    def begin(self, run_id: str, flow: str, *, store: Store | None = None,
              was: str | None = None) -> RunSpan:
        """A run span for a worker about to take ``run_id``'s lease; with ``store``, linked
        to the run span of the worker that took it last (``was``: the status it left)."""
        links = []
        if store is not None:
            with store.reader() as r:
                earlier = context_of(earlier_ref(r, run_id))
            if earlier is not None:
                links.append(otel.Link(earlier, {"bide.link": "resumed",
                                            "bide.resumed_from": was or ""}))
        attributes = {"bide.run_id": run_id, "bide.flow": flow}
        if was is not None:
            attributes["bide.resumed_from"] = was
        span = self.tracer.start_span(f"run {flow}", links=links, attributes=attributes)
        return RunSpan(self, span, run_id)

    def hold(self, run_id: str, token: int, span: RunSpan) -> None:
        """Keep ``span`` until the worker holding lease ``token`` starts the run."""
        with self._lock:
            self._begun[(run_id, token)] = span

    def take(self, run_id: str, token: int) -> RunSpan | None:
        with self._lock:
            return self._begun.pop((run_id, token), None)


class RunSpan:
    """One worker's turn on a run; superstep spans are its children."""

    def __init__(self, tracing: Tracing, span: Span, run_id: str) -> None:
        self.tracing, self.span, self.run_id = tracing, span, run_id
        self.ref = ref_of(span)

    @contextmanager
    def running(self, store: Store) -> Iterator[None]:
        """Around the worker's turn: the span ends when it lets go of the run."""
        try:
            yield
        except BaseException as exc:
            self.end(store, exc)
            raise
        self.end(store)

    @contextmanager
    def superstep(self, n: int, holder: Any) -> Iterator[None]:
        """A superstep's span; ``holder.step_trace`` hands it to the superstep's tasks."""
        span = self.tracing.tracer.start_span(
            "superstep", context=otel.set_span_in_context(self.span),
            attributes={"bide.run_id": self.run_id, "bide.superstep": n})
        holder.step_trace = StepSpan(self.tracing.tracer, span, self.run_id)
        try:
            with otel.use_span(span, end_on_exit=True, record_exception=False,
                               set_status_on_exception=False):
                yield
        finally:
            holder.step_trace = None

    def end(self, store: Store, exc: BaseException | None = None) -> None:
        """End the span with the status the run was left in (read from the store)."""
        with store.reader() as r:
            head = r.head(self.run_id)
        if head is not None:
            self.span.set_attribute("bide.status", head.status)
        if exc is not None:
            self.span.record_exception(exc)
            self.span.set_status(otel.StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
        self.span.end()


class StepSpan:
    """A superstep's span: each task's node span is its child (tasks run in other threads)."""

    def __init__(self, tracer: otel.Tracer, span: Span, run_id: str) -> None:
        self.tracer, self.span, self.run_id = tracer, span, run_id

    @contextmanager
    def node(self, name: str, task: str, attempt: int) -> Iterator[None]:
        """The node's span, current while it runs: its tool calls and the user's own spans
        nest under it. A pause is not an error: it says what the node waits for."""
        span = self.tracer.start_span(
            f"node {name}", context=otel.set_span_in_context(self.span),
            attributes={"bide.run_id": self.run_id, "bide.node": name, "bide.task": task,
                        "bide.attempt": attempt})
        with current(span):
            yield


@contextmanager
def tool_span(tracer: otel.Tracer, *, run_id: str, node: str, tool: str, key: str,
              idempotency_key: str) -> Iterator[Span]:
    """A tool call's span, a child of the node span current in this thread."""
    span = tracer.start_span(f"tool {tool}", attributes={
        "bide.run_id": run_id, "bide.node": node, "bide.tool": tool, "bide.intent_key": key,
        "bide.idempotency_key": idempotency_key})
    with current(span):
        yield span


@contextmanager
def current(span: Span) -> Iterator[None]:
    """``span`` current while the body runs, ended after it: a pause is not an error (it
    says what the run waits for), any other exception is recorded and marks it ERROR."""
    with otel.use_span(span, end_on_exit=True, record_exception=False,
                       set_status_on_exception=False):
        try:
            yield
        except Paused as exc:
            span.set_attribute("bide.paused", str(exc.waiting.get("type", "")))
            raise
        except Exception as exc:
            span.record_exception(exc)
            span.set_status(otel.StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
            raise
