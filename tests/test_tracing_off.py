"""Tracing is off unless asked for: the core runs without OpenTelemetry installed and
never imports it (engine/run/tracing.py is loaded by a traced engine only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

APPS = Path(__file__).parent / "apps"

SCRIPT = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
import bide, traced_app
with bide.open(sys.argv[1]) as engine:
    engine.register(traced_app.flow)
    run = engine.start("traced")
    assert run.status == bide.Status.DONE, run.status
try:
    bide.open(sys.argv[1], tracer=object())
except bide.ConfigError as exc:
    assert "pip install 'bide[otel]'" in str(exc), exc
else:
    raise AssertionError("a tracer without OpenTelemetry was accepted")
loaded = [m for m in sys.modules if m.startswith("opentelemetry") or m == "bide.engine.run.tracing"]
assert loaded == ["opentelemetry"], loaded
print("ran untraced")
"""


def test_the_core_runs_without_opentelemetry(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "h")],
                         env={"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ran untraced"


# LeaseAcquired's golden bytes before it had ``trace`` (a field with a default, omitted
# when empty: an untraced engine writes exactly these bytes, and reads them back)
LEASE_BEFORE_TRACE = (
    "6264f4c8710d00010e6c656173655f616371756972656486a672756e5f6964a3722d31a56f776e6572a377"
    "2d31a5746f6b656e03aa657870697265735f6174cb4025000000000000a8617474656d70747302a26174cb"
    "4024800000000000")


def test_a_lease_without_a_trace_keeps_its_bytes():
    from bide.formats import LeaseAcquired, decode, encode

    lease = LeaseAcquired(run_id="r-1", owner="w-1", token=3, expires_at=10.5, attempts=2,
                          at=10.25)
    assert encode(lease).hex() == LEASE_BEFORE_TRACE
    assert decode(bytes.fromhex(LEASE_BEFORE_TRACE)).trace == ""
