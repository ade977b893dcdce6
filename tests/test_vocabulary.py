"""Code speaks of statuses and decisions through the enums, never raw literals.

A raw ``"DONE"`` compares fine until someone misspells it; ``Status.DNOE`` fails at
once. The drift check reads the source (engine/, bench/, cli.py) with ``ast``;
``formats/`` is exempt: it knows nothing of the engine and stores plain strings.
"""

import ast
from pathlib import Path

import bide
import msgspec
import pytest
from bide.engine.base import vocabulary
from bide.formats import ApprovalDecided, StatusChanged

ROOT = Path(bide.__file__).parent
STATUSES = {s.value for s in bide.Status}
WORDS = {s.value for s in bide.IntentStatus} | {d.value for d in bide.Decision}


def _sources() -> list[Path]:
    files = [ROOT / "cli.py", *sorted((ROOT / "engine").rglob("*.py")),
             *sorted((ROOT / "bench").rglob("*.py"))]
    return [f for f in files if f.name != "vocabulary.py"]


def _compared(tree: ast.AST) -> list[ast.Constant]:
    """String constants that are compared with, matched on, or passed as status/decision."""
    found: list[ast.Constant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found += [c for c in ast.walk(side) if isinstance(c, ast.Constant)]
        elif isinstance(node, ast.MatchValue) and isinstance(node.value, ast.Constant):
            found.append(node.value)
        elif isinstance(node, ast.keyword) and node.arg in ("status", "decision"):
            found += [c for c in ast.walk(node.value) if isinstance(c, ast.Constant)]
    return found


def _raw_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = [f"{path.relative_to(ROOT)}:{c.lineno}: {c.value!r}" for c in ast.walk(tree)
           if isinstance(c, ast.Constant) and c.value in STATUSES]
    out += [f"{path.relative_to(ROOT)}:{c.lineno}: {c.value!r}" for c in _compared(tree)
            if isinstance(c.value, str) and c.value in WORDS]
    return out


def test_no_raw_status_intent_or_decision_literals():
    found = [hit for f in _sources() for hit in _raw_literals(f)]
    assert found == [], "use bide.Status / IntentStatus / Decision:\n" + "\n".join(found)


def test_the_check_catches_a_raw_literal(tmp_path):
    planted = ROOT / "engine" / "_planted_for_test.py"
    planted.write_text('def f(head):\n    return head.status == "DONE" or head.d == "retry"\n')
    try:
        assert len(_raw_literals(planted)) == 2
    finally:
        planted.unlink()


@pytest.mark.parametrize("enum", [bide.Status, bide.IntentStatus, bide.Decision])
def test_members_print_and_compare_as_their_strings(enum):
    for member in enum:
        assert member == member.value and str(member) == member.value
        assert f"{member}" == member.value
        assert msgspec.json.encode(member) == msgspec.json.encode(member.value)


def test_records_encode_the_same_bytes_with_enums_or_strings():
    assert msgspec.msgpack.encode(StatusChanged(run_id="r", status=bide.Status.DONE)) == \
        msgspec.msgpack.encode(StatusChanged(run_id="r", status="DONE"))
    fields = dict(run_id="r", approval_id="a-1", by="me", at=1.0)
    assert msgspec.msgpack.encode(ApprovalDecided(decision=bide.Decision.MARK_DONE, **fields)) \
        == msgspec.msgpack.encode(ApprovalDecided(decision="mark_done", **fields))


def test_groups_partition_what_they_name():
    assert vocabulary.FINISHED | vocabulary.WAITING < set(bide.Status)
    assert not vocabulary.FINISHED & vocabulary.WAITING
    assert set(vocabulary.APPROVAL_DECISIONS) | set(vocabulary.RECONCILE_DECISIONS) | \
        set(vocabulary.INPUT_DECISIONS) | set(vocabulary.BIDE_DECISIONS) == set(bide.Decision)
    assert not set(vocabulary.BIDE_DECISIONS) & (set(vocabulary.APPROVAL_DECISIONS)
                                                 | set(vocabulary.INPUT_DECISIONS))
    assert all(s.finished for s in vocabulary.FINISHED) and bide.Status.RUNNING.finished is False
    assert bide.Status.WAITING_APPROVAL.waiting and not bide.Status.DONE.waiting
    assert bide.Status.WAITING_INPUT.waiting
