"""The error tree: every BideError lives in engine/base/errors.py, drawn in its docstring, with
categories (NotFound, Conflict) that cut across branches and structured fields."""

import bide
import pytest
from bide import cli
from bide.engine.base import errors
from bide.engine.langgraph import store as langgraph_store
from bide.engine.read import inspect
from bide.engine.upkeep import compaction, maintenance, operations


def _error_classes():
    return [obj for obj in vars(errors).values()
            if isinstance(obj, type) and issubclass(obj, bide.BideError)]


def test_all_is_explicit_and_names_only_the_tree():
    assert "Any" not in errors.__all__
    assert errors.__all__ == sorted(errors.__all__)
    assert set(errors.__all__) == {c.__name__ for c in _error_classes()} | {"Paused"}


def test_every_error_is_drawn_in_the_docstring_and_exported_from_bide():
    for cls in _error_classes():
        assert cls.__name__ in errors.__doc__, cls
        assert getattr(bide, cls.__name__) is cls


def test_no_error_class_is_defined_outside_the_tree():
    """Issue 12: errors defined beside their first raiser moved into engine/base/errors.py."""
    for module in (compaction, inspect, langgraph_store, maintenance, operations):
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, bide.BideError):
                assert obj.__module__ in ("bide.engine.base.errors", "bide.formats.errors"), name


def test_old_import_paths_keep_working():
    assert inspect.UnknownKey is bide.UnknownKey
    assert compaction.StoreBusy is bide.StoreBusy
    assert compaction.CompactFailed is bide.CompactFailed
    assert maintenance.LogUnreadable is bide.LogUnreadable
    assert operations.NotCancellable is bide.NotCancellable
    assert inspect.LangGraphThread is bide.LangGraphThread
    assert langgraph_store.NotALangGraphThread is bide.NotALangGraphThread


@pytest.mark.parametrize("cls, branch", [
    (bide.UnknownRun, bide.RunError), (bide.UnknownVersion, bide.RunError),
    (bide.UnknownKey, bide.RunError), (bide.UnknownApproval, bide.ApprovalError),
    (bide.NotAHome, bide.StoreError),
])
def test_not_found_category_keeps_the_branch(cls, branch):
    assert issubclass(cls, bide.NotFound) and issubclass(cls, branch)


@pytest.mark.parametrize("cls", [
    bide.RunExists, bide.RunNotResumable, bide.NotCancellable, bide.DecisionRefused,
    bide.DecisionNotAllowed, bide.StaleLease, bide.StoreBusy, bide.LangGraphThread,
    bide.NotALangGraphThread,
])
def test_conflict_category(cls):
    assert issubclass(cls, bide.Conflict) and not issubclass(cls, bide.NotFound)


def test_categories_do_not_change_exit_codes():
    """The CLI's one table gives the same codes the class-by-class list gave."""
    found = [bide.UnknownRun("r"), bide.UnknownApproval("a"), bide.NotAHome("/x", "why"),
             bide.UnknownVersion("r", 3, [1]), bide.UnknownKey("r", "k", 1),
             bide.UnknownFlow("f", [])]  # issue 17.4: `submit` of an unknown flow exits 3
    assert {cli.exit_code(e) for e in found} == {cli.EXIT_NOT_FOUND}
    bad_state = [bide.UnknownStatus("x", ["DONE"]),
                 bide.RunExists("r"), bide.StoreError("s"), bide.NodeFailed("r", "n", "e"),
                 bide.CorruptRecord(b"k", "crc")]
    assert {cli.exit_code(e) for e in bad_state} == {cli.EXIT_BAD_STATE}


def test_store_errors_name_their_path():
    assert bide.StoreError("closed", path="/h").path == "/h"
    assert bide.StoreError("no path").path is None
    assert bide.NotAHome("/h", "no store").path == "/h"
    assert bide.StoreFull("/h", 10).path == "/h"
    assert bide.ReadOnlyHome("/h", "ro").path == "/h"
    assert bide.StoreBusy("/h", "process 1").path == "/h"
    assert bide.DurabilityLost("fsync failed", path="/h").path == "/h"


def test_flow_errors_name_flow_and_node():
    flow = bide.Flow("f")

    @flow.node(start=True)
    def a(state, ctx):
        return {}

    with pytest.raises(bide.FlowError) as caught:
        flow.node(name="a")(lambda state, ctx: {})
    assert (caught.value.flow, caught.value.node) == ("f", "a")
    assert bide.UnknownFlow("g", ["f"]).flow == "g"
    mismatch = bide.FlowMismatch("r", "gone", "next", flow="f")
    assert (mismatch.flow, mismatch.node, mismatch.run_id) == ("f", "gone", "r")
    assert bide.FlowError("plain").flow is None


def test_a_reducer_conflict_names_its_flow_key_and_nodes():
    from bide.engine.run.state import fold

    flow = bide.Flow("f")
    with pytest.raises(bide.ReducerConflict) as caught:
        fold(flow, {}, [("a", [("k", "set", 1)]), ("b", [("k", "set", 2)])])
    assert (caught.value.flow, caught.value.key, caught.value.nodes) == ("f", "k", ["a", "b"])


def test_branch_bases_still_take_a_bare_message():
    """The structured fields are keyword-only, so older call sites keep working."""
    for cls in (bide.BideError, bide.StoreError, bide.FlowError, bide.RunError,
                bide.ToolError, bide.ApprovalError, bide.NotFound, bide.Conflict):
        assert str(cls("message")) == "message"


def test_raised_at_names_the_innermost_frame():
    from bide.engine.base.errors import raised_at

    def inner() -> None:
        raise ValueError("deep")

    try:
        inner()
    except ValueError as exc:
        where = raised_at(exc)
    assert where.startswith("test_error_tree.py:") and where.endswith(" in inner"), where
    assert raised_at(ValueError("never raised")) == "an unknown place"
