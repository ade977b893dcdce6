"""OpenTelemetry spans (bide[otel], engine/run/tracing.py): run → superstep → node → tool, and
the link a resumed run's span keeps to the earlier worker's, after a pause or a crash."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from extras import need

need("opentelemetry.sdk")

import bide  # noqa: E402
from bide.bench.kit.crashkit import count_effects, run_worker  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

APPS = Path(__file__).parent / "apps"
sys.path.insert(0, str(APPS))
import traced_app  # noqa: E402


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("bide-test"), exporter
    provider.shutdown()


def by_name(finished, name):
    return [s for s in finished if s.name == name]


def test_a_run_is_a_tree_of_supersteps_nodes_and_tool_calls(tmp_path, spans):
    tracer, exporter = spans
    with bide.open(tmp_path / "h", tracer=tracer) as engine:
        engine.register(traced_app.flow)
        run = engine.start("traced", run_id="r-1")
        intent = engine.intents("r-1")[0]
    assert run.status == bide.Status.DONE
    finished = exporter.get_finished_spans()
    [root] = by_name(finished, "run traced")
    assert root.parent is None
    assert root.attributes["bide.run_id"] == "r-1"
    assert root.attributes["bide.status"] == bide.Status.DONE
    steps = by_name(finished, "superstep")
    assert [s.attributes["bide.superstep"] for s in steps] == [0, 1, 2]
    assert {s.parent.span_id for s in steps} == {root.context.span_id}
    nodes = {s.attributes["bide.node"]: s for s in finished if s.name.startswith("node ")}
    assert list(nodes) == ["lookup", "patch", "report"]
    for step, name in zip(steps, nodes, strict=True):
        assert nodes[name].parent.span_id == step.context.span_id
        assert nodes[name].attributes["bide.run_id"] == "r-1"
    [tool] = by_name(finished, "tool apply_patch")
    assert tool.parent.span_id == nodes["patch"].context.span_id
    assert tool.attributes["bide.tool"] == "apply_patch"
    assert tool.attributes["bide.node"] == "patch"
    assert tool.attributes["bide.idempotency_key"] == intent["idempotency_key"]
    assert tool.attributes["bide.intent_key"] == intent["key"]
    assert {s.context.trace_id for s in finished} == {root.context.trace_id}


def test_a_failing_node_marks_its_span_and_the_run_span(tmp_path, spans):
    tracer, exporter = spans
    flow = bide.Flow("breaks")

    @flow.node(start=True)
    def boom(state, ctx):
        raise RuntimeError("no disk")

    with bide.open(tmp_path / "h", tracer=tracer) as engine:
        engine.register(flow)
        assert engine.start("breaks").status == bide.Status.FAILED
    finished = exporter.get_finished_spans()
    [node] = by_name(finished, "node boom")
    assert node.status.status_code.name == "ERROR"
    assert "no disk" in node.status.description
    [root] = by_name(finished, "run breaks")
    assert root.attributes["bide.status"] == bide.Status.FAILED


def test_the_resumed_run_span_links_to_the_one_that_paused(tmp_path, spans):
    tracer, exporter = spans
    with bide.open(tmp_path / "h", tracer=tracer) as engine:
        engine.register(traced_app.flow)
        run = engine.start("traced", {"ask": True}, run_id="r-2")
        assert run.status == bide.Status.WAITING_APPROVAL
        [paused] = by_name(exporter.get_finished_spans(), "run traced")
        assert paused.attributes["bide.status"] == bide.Status.WAITING_APPROVAL
        [node] = [s for s in by_name(exporter.get_finished_spans(), "node patch")]
        assert node.attributes["bide.paused"] == "approval"
        engine.decide(engine.pending()[0]["approval_id"], bide.Decision.APPROVE)
        exporter.clear()
        assert engine.resume("r-2").status == bide.Status.DONE
    [resumed] = by_name(exporter.get_finished_spans(), "run traced")
    assert resumed.attributes["bide.resumed_from"] == bide.Status.WAITING_APPROVAL
    [link] = resumed.links
    assert (link.context.trace_id, link.context.span_id) == (
        paused.context.trace_id, paused.context.span_id)
    assert link.attributes["bide.link"] == "resumed"


def test_a_run_resumed_after_a_crash_links_to_the_killed_workers_span(tmp_path, spans,
                                                                     monkeypatch):
    """The killed worker never ended its run span; its ids were in its lease record."""
    tracer, exporter = spans
    home, dumped, effects = tmp_path / "h", tmp_path / "spans.jsonl", tmp_path / "effects"
    out = run_worker(str(APPS / "traced_app.py"), str(home), str(dumped),
                     fault="after_tool_effect:1:kill",
                     env={"BIDE_TEST_EFFECTS": str(effects), "PYTHONPATH": str(APPS)})
    assert out.returncode == -9, out.stderr
    # what the killed worker exported: the spans that ended before the kill
    ended = [json.loads(line) for line in dumped.read_text().splitlines()]
    [step0] = [s for s in ended if s["name"] == "superstep"]
    killed_run_span = step0["parent_id"]
    killed_trace = step0["context"]["trace_id"]
    assert not [s for s in ended if s["name"] == "run traced"]  # it never ended
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(effects))
    with bide.open(home, tracer=tracer) as engine:
        engine.register(traced_app.flow)
        assert engine.resume("r-t").status == bide.Status.DONE
    [resumed] = by_name(exporter.get_finished_spans(), "run traced")
    assert resumed.attributes["bide.resumed_from"] == bide.Status.RUNNING
    [link] = resumed.links
    assert f"0x{link.context.span_id:016x}" == killed_run_span
    assert f"0x{link.context.trace_id:032x}" == killed_trace
    assert count_effects(effects) == {"apply p-1": 2}  # idempotent: again, with its key
    [tool] = by_name(exporter.get_finished_spans(), "tool apply_patch")
    assert tool.attributes["bide.idempotency_key"]


def test_an_untraced_engine_records_no_trace(tmp_path):
    with bide.open(tmp_path / "h") as engine:
        engine.register(traced_app.flow)
        engine.start("traced", run_id="r-3")
        assert engine.tracing is None
        with engine.store.reader() as r:
            leases = [r.record(s) for s, t in r.run_entries("r-3") if t == "lease_acquired"]
    assert leases and all(lease.trace == "" for lease in leases)


@pytest.mark.parametrize("kind", ["memory", "postgres"])
def test_the_link_survives_on_every_store(kind, tmp_path, spans, request):
    """The lease record carries the span ids on the other stores too."""
    tracer, exporter = spans
    home = tmp_path / "h"
    if kind == "postgres":
        need("psycopg")
        engine = bide.open(request.getfixturevalue("pg_url"), local=home, tracer=tracer)
    else:
        from bide.engine.storage.memory_store import SCHEME, MemoryStore
        engine = bide.open(home, store=MemoryStore(f"{SCHEME}{home}"), tracer=tracer)
    with engine:
        engine.register(traced_app.flow)
        engine.start("traced", {"ask": True}, run_id="r-s")
        [paused] = by_name(exporter.get_finished_spans(), "run traced")
        engine.decide(engine.pending()[0]["approval_id"], bide.Decision.APPROVE)
        exporter.clear()
        assert engine.resume("r-s").status == bide.Status.DONE
    [resumed] = by_name(exporter.get_finished_spans(), "run traced")
    [link] = resumed.links
    assert link.context.span_id == paused.context.span_id
